"""Model predictions beside the measurements: the ``models`` section of ``summary.json``.

Four published models, each computed only where its assumptions hold (``applies``; otherwise
``why_not`` says which does not), each with its prediction, the measurement it predicts, their
difference and whether that is more than 10 (percent or points of share, ``differs``):

- ``mathis``: Reno under random loss (Mathis, Semke, Mahdavi, Ott 1997): a flow's throughput
  = MSS / RTT x C / sqrt(p), C = sqrt(3/2), p the link's random loss probability and RTT the
  flow's median RTT in the steady window. Applies when every long-running flow is Reno, the loss
  is Bernoulli with p > 0 and nothing else limits the flows (drop-tail, and the flows' predicted
  sum below 90 % of the payload capacity). Compared: the flows' mean goodput against the mean
  prediction, in % of the prediction.
- ``cubic``: CUBIC's epoch (RFC 9438): after a loss the window follows W(t) = C (t - K)^3 + W_max
  from the epoch's start (recovery's end), K = cbrt((W_max - cwnd_epoch) / C), C = 0.4; with
  cwnd_epoch = beta x W_max (beta = 0.7, Linux's 717/1024) this is cbrt(W_max (1 - beta) / C).
  Per loss epoch in the steady window (the first 100 of each flow): W_max (the implementation's, with fast convergence),
  cwnd_epoch, the model's K and the time the window took to regain W_max. Linux adds delay_min
  to t and rounds C (t - K)^3 down to whole packets, so its target is W_max from cbrt(1/C) s
  before K: the expected regain is K - delay_min - cbrt(1/C) (docs/validation.md, "CUBIC regains
  W_max"); measured against that, in %.
- ``bbr_inflight_cap``: BBR's in-flight cap, cwnd_gain x BtlBw_est x RTprop_est (the flow's own
  estimates, telemetry ``cc.btlbw_bps``, ``cc.rtprop_ms``), plus Linux's quantization budget
  (``bbr_quantization_budget``: 3 TSO goals of max(2, 1 ms at BtlBw) segments and 2 packets in
  the first phase, rounded up to even: taken as 3 goals + 3 packets), beside cwnd_gain x the true
  BDP (capacity x RTprop, over the BBR flows). Measured: ``ratio``, the 95th percentile over the
  flow's PROBE_BW samples in the window of its in-flight data over the cap with the budget at
  that sample (the estimates move). ``window_limited`` when the ratio reaches 0.9 (Ware et al.:
  competing with loss-based flows BBR is window-limited); ``differs`` when it exceeds 1.1 (the cap
  did not hold).
- ``ware``: Ware, Mukerjee, Seshan, Sherry, "Modeling BBR's Interactions with Loss-Based
  Congestion Control" (IMC'19), BBRv1's aggregate share against loss-based flows. With q the
  buffer (packets), c the capacity (packets/s), l the RTprop (s), X = q / (c l) the buffer in BDP
  and N the number of BBR flows, the loss-based flows' share p solves in-flight cap = BBR's
  in-flight data, 2 (1 - p) c ((p q + 4N) / c + l) = (1 - p)(q + c l):
  p = 1/2 - 1/(2X) - 4N/q (0 if negative: BBR's cap exceeds BDP + buffer), and BBR's share,
  discounted for the time PROBE_RTT spends draining a full queue about every 10 s,
  (1 - p) (1 - (q/c + 0.2 + l) / 10). The number of loss-based flows does not enter. Assumed:
  long-running flows, one base RTT for all, a fixed capacity, a drop-tail queue the loss-based
  flows keep full, no random loss, BBRv1 with cwnd_gain 2. Compared: the BBR flows' summed share,
  in points.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import numpy as np
import polars as pl

from .summary import TrialInfo, window

#: Differences beyond this (percent, or points of share) are flagged ``differs``.
DIFFERS = 10.0
MATHIS_C = math.sqrt(1.5)
CUBIC_C = 0.4
CUBIC_BETA = 717 / 1024
LOSS_BASED = ("cubic", "reno")
#: Loss epochs examined per CUBIC flow at most (the first in the window; the figures are medians).
MAX_EPOCHS = 100


def _num(x: Any) -> Optional[float]:
    if x is None:
        return None
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _not(why: str) -> dict[str, Any]:
    return {"applies": False, "why_not": why}


def _flows_conf(core: dict[str, Any]) -> list[dict[str, Any]]:
    return [f for f in core.get("flows", []) if isinstance(f, dict)]


def _has_loss(loss: Any) -> bool:
    if not isinstance(loss, dict) or loss.get("kind") in (None, "none"):
        return False
    p = _num(loss.get("p"))
    return p is None or p > 0


def _link_problems(core: dict[str, Any], random_loss: bool) -> list[str]:
    """What about the link breaks a model's assumptions (fixed capacity, drop-tail, the loss)."""
    link = core.get("link", {})
    out = []
    if link.get("schedule") or link.get("trace"):
        out.append("the capacity varies")
    if link.get("aqm"):
        out.append("an AQM manages the queue (the models assume drop-tail)")
    if link.get("shaper") or link.get("policer"):
        out.append("a shaper or policer")
    loss = link.get("loss")
    p = _num(loss.get("p")) if isinstance(loss, dict) else None
    has_loss = _has_loss(loss)
    if random_loss and not (isinstance(loss, dict) and loss.get("kind") == "bernoulli" and p and p > 0):
        out.append("no Bernoulli random loss on the link")
    if not random_loss and has_loss:
        out.append("random loss on the link")
    return out


def models(flows: pl.DataFrame, summary: dict[str, Any], info: TrialInfo) -> dict[str, Any]:
    """The ``models`` section (see the module docstring); ``summary`` is the rest of summary.json."""
    core = info.core
    if not isinstance(core, dict):
        why = "the trial's configuration is not known (analysed captures)"
        return {k: _not(why) for k in ("mathis", "cubic", "bbr_inflight_cap", "ware")}
    t0, t1 = info.steady_s
    tcp = flows  # each model picks its algorithm's flows (tcp only)
    return {
        "mathis": mathis(tcp, summary, info, core),
        "cubic": cubic(tcp, info, t0, t1),
        "bbr_inflight_cap": bbr_inflight_cap(tcp, info, core, t0, t1),
        "ware": ware(summary, info, core),
    }


def _plain_bulk(core: dict[str, Any]) -> Optional[str]:
    fl = _flows_conf(core)
    if not fl:
        return "no flows"
    if any(f.get("size_bytes") or f.get("arrivals") for f in fl):
        return "sized flows or a workload (the models assume long-running flows)"
    if any(f.get("kind") not in (None, "tcp") for f in fl):
        return "udp or ping flows"
    if any(f.get("direction") == "reverse" for f in fl):
        return "reverse flows"
    return None


def mathis(tcp: pl.DataFrame, summary: dict[str, Any], info: TrialInfo, core: dict[str, Any]) -> dict[str, Any]:
    why = _plain_bulk(core)
    if why:
        return _not(why)
    fl = _flows_conf(core)
    if any(f.get("cc") != "reno" for f in fl):
        return _not("not every flow is Reno")
    probs = _link_problems(core, random_loss=True)
    if probs:
        return _not("; ".join(probs))
    p = float(core["link"]["loss"]["p"])
    rows = [r for r in summary.get("flows", []) if r.get("cc") == "reno"]
    per = []
    for r in rows:
        rtt = _num(r.get("rtt_p50_ms"))
        good = _num(r.get("goodput_bps"))
        if rtt is None or rtt <= 0 or good is None:
            continue
        pred = info.mss * 8 / (rtt / 1000.0) * MATHIS_C / math.sqrt(p)
        per.append({"id": r["id"], "rtt_ms": rtt, "predicted_bps": pred, "goodput_bps": good})
    if not per:
        return _not("no flow with an RTT sample and a goodput in the window")
    pred_sum = sum(x["predicted_bps"] for x in per)
    payload = info.capacity_bps * info.mss / info.mtu
    if pred_sum > 0.9 * payload:
        return _not(f"link-limited: the predicted {pred_sum / 1e6:.3g} Mbit/s is over 90 % of the payload capacity "
                    f"({payload / 1e6:.3g} Mbit/s)")
    pred = pred_sum / len(per)
    meas = sum(x["goodput_bps"] for x in per) / len(per)
    err = 100.0 * (meas - pred) / pred
    return {"applies": True, "loss_p": p, "predicted_bps": pred, "measured_bps": meas, "error_pct": err,
            "differs": abs(err) > DIFFERS, "flows": per}


def cubic(tcp: pl.DataFrame, info: TrialInfo, t0: float, t1: float) -> dict[str, Any]:
    # the columns it reads, before any filter: the frame has thirty-odd
    cols = ["flow", "time_s", "ca_state", "cwnd_pkts", "cc.w_max_pkts", "min_rtt_ms", "cc.k_s"]
    cub = tcp.select(c for c in ("cc", "kind", *cols) if c in tcp.columns).filter(pl.col("cc") == "cubic")
    if "kind" in cub.columns:
        cub = cub.filter(pl.col("kind") == "tcp")
    if cub.is_empty():
        return _not("no CUBIC flow")
    if "cc.w_max_pkts" not in cub.columns or "ca_state" not in cub.columns:
        return _not("the backend reports no CUBIC state (cc.w_max_pkts, ca_state)")
    per: list[dict[str, Any]] = []
    cols = [c for c in cols if c in cub.columns]
    for f in cub.select(cols).filter(pl.col("time_s") > t0 - 1.0).partition_by("flow", maintain_order=True):
        fid = int(f["flow"][0])
        f = f.sort("time_s")
        t = f["time_s"].to_numpy()
        rec = (f["ca_state"] == "recovery").to_numpy()
        cwnd = f["cwnd_pkts"].to_numpy().astype(float)
        wmax = f["cc.w_max_pkts"].to_numpy().astype(float)
        ks = f["cc.k_s"].to_numpy().astype(float) if "cc.k_s" in f.columns else np.full(len(f), np.nan)
        mrtt = f["min_rtt_ms"].to_numpy().astype(float)
        # recovery's end starts an epoch; its start is the next loss
        starts = np.flatnonzero(rec[:-1] & ~rec[1:]) + 1
        losses = np.flatnonzero(~rec[:-1] & rec[1:]) + 1
        for i in starts[(t[starts] > t0) & (t[starts] <= t1)][:MAX_EPOCHS]:
            later = losses[losses > i]
            nxt = int(later[0]) if len(later) else len(f)
            w_max, cw0 = wmax[i], cwnd[i]
            if not (w_max > cw0 > 0):
                continue
            k = ((w_max - cw0) / CUBIC_C) ** (1 / 3)
            dmin = (mrtt[i] / 1000.0) if math.isfinite(mrtt[i]) else 0.0
            hit = np.flatnonzero(cwnd[i:nxt] >= w_max)
            per.append({
                "flow": fid, "start_s": float(t[i]), "w_max_pkts": float(w_max),
                "cwnd_epoch_pkts": float(cw0), "k_s": k, "k_sim_s": _num(ks[i]),
                "k_rfc_beta_s": (w_max * (1 - CUBIC_BETA) / CUBIC_C) ** (1 / 3),
                "regain_expected_s": k - dmin - (1 / CUBIC_C) ** (1 / 3),
                "regain_s": float(t[i + hit[0]] - t[i]) if len(hit) else None,
                "next_loss_s": None if nxt >= len(f) else float(t[nxt] - t[i]),
            })
    done = [e for e in per if e["regain_s"] is not None]
    if not done:
        return _not("no loss epoch in the steady window in which the window regained W_max before the next loss"
                    if per else "no loss epoch in the steady window") | {"epochs": len(per)}

    def med(rows: list[dict[str, Any]], k: str) -> Optional[float]:
        vals = [r[k] for r in rows if r.get(k) is not None]
        return float(np.median(vals)) if vals else None

    # per flow, the medians over its epochs that regained W_max (keyed by flow id, so that
    # trials.parquet gets a column per flow, not per epoch)
    flows_out = []
    for fid in sorted({e["flow"] for e in done}):
        rows = [e for e in done if e["flow"] == fid]
        flows_out.append({"id": fid, "epochs": len(rows), **{k: med(rows, k) for k in (
            "w_max_pkts", "cwnd_epoch_pkts", "k_s", "k_sim_s", "k_rfc_beta_s", "regain_expected_s", "regain_s",
            "next_loss_s")}})
    reg = float(np.median([e["regain_s"] for e in done]))
    exp = float(np.median([e["regain_expected_s"] for e in done]))
    k = float(np.median([e["k_s"] for e in done]))
    err = 100.0 * (reg - exp) / exp if exp > 0 else None
    return {"applies": True, "k_s": k, "regain_expected_s": exp, "regain_s": reg, "error_pct": err,
            "differs": err is not None and abs(err) > DIFFERS, "epochs": len(per), "epochs_regained": len(done),
            "flows": flows_out}


def bbr_inflight_cap(tcp: pl.DataFrame, info: TrialInfo, core: dict[str, Any], t0: float, t1: float) -> dict[str, Any]:
    cols = ("cc", "kind", "flow", "time_s", "state", "inflight_bytes", "cwnd_bytes", "cc.btlbw_bps", "cc.rtprop_ms", "cc.cwnd_gain")
    bbr = tcp.select(c for c in cols if c in tcp.columns).filter(pl.col("cc").str.starts_with("bbr"))
    if "kind" in bbr.columns:
        bbr = bbr.filter(pl.col("kind") == "tcp")
    if bbr.is_empty():
        return _not("no BBR flow")
    need = ("cc.btlbw_bps", "cc.rtprop_ms", "cc.cwnd_gain", "state")
    if any(c not in bbr.columns for c in need):
        return _not("the backend reports no BBR estimates (cc.btlbw_bps, cc.rtprop_ms, cc.cwnd_gain)")
    w = window(bbr.select("flow", "time_s", "state", "inflight_bytes", "cwnd_bytes", *need[:3]), t0, t1).filter((pl.col("state") == "PROBE_BW") & pl.col("cc.btlbw_bps").is_not_nan()
                                   & (pl.col("cc.btlbw_bps") > 0))
    if w.is_empty():
        return _not("no BBR flow in PROBE_BW in the steady window")
    n_bbr = bbr["flow"].n_unique()
    bdp = info.capacity_bps / 8 * info.rtprop_ms / 1000.0
    per = []
    for f in w.partition_by("flow", maintain_order=True):
        fid = f["flow"][0]
        bw = f["cc.btlbw_bps"].to_numpy().astype(float)
        cap = (f["cc.cwnd_gain"].to_numpy() * bw / 8 * f["cc.rtprop_ms"].to_numpy() / 1000.0).astype(float)
        # Linux's bbr_quantization_budget: 3 TSO goals (tcp_tso_autosize: 1 ms at the pacing rate,
        # at least 2 segments, at most 64 KB) and 2 packets in the first phase, rounded up to even
        goal = np.clip(np.floor(np.minimum(bw / 8 * 0.001, 65536) / info.mss), 2, None)
        allow = (3 * goal + 3) * info.mss
        gain = float(np.median(f["cc.cwnd_gain"].to_numpy()))
        infl = f["inflight_bytes"].to_numpy().astype(float)
        cap_m = float(np.median(cap))
        p95 = float(np.percentile(infl, 95))
        # sample by sample (the estimates move): in-flight data over the cap with its budget
        ok = (cap + allow) > 0
        ratio = float(np.percentile(infl[ok] / (cap + allow)[ok], 95)) if ok.any() else None
        per.append({"id": int(fid), "cwnd_gain": gain, "cap_bytes": cap_m,
                    "quantization_budget_bytes": float(np.median(allow)),
                    "cap_true_bdp_bytes": gain * bdp / n_bbr, "inflight_p95_bytes": p95,
                    "cwnd_p50_bytes": float(np.median(f["cwnd_bytes"].to_numpy())),
                    "btlbw_bps": float(np.median(bw)),
                    "rtprop_est_ms": float(np.median(f["cc.rtprop_ms"].to_numpy())),
                    "ratio": ratio, "window_limited": ratio is not None and ratio >= 0.9})
    ratios = [x["ratio"] for x in per if x["ratio"] is not None]
    worst = max(ratios) if ratios else None
    # in flight beyond the cap and its quantization budget by more than 10 %: the cap did not hold
    broken = worst is not None and worst > 1 + DIFFERS / 100
    return {"applies": True, "cap_bytes": sum(x["cap_bytes"] for x in per),
            "cap_true_bdp_bytes": sum(x["cap_true_bdp_bytes"] for x in per),
            "inflight_p95_bytes": sum(x["inflight_p95_bytes"] for x in per),
            "ratio_max": worst, "window_limited": all(x["window_limited"] for x in per),
            "error_pct": None if worst is None else 100.0 * (worst - 1.0),
            "differs": broken, "flows": per}


def ware_share(q_pkts: float, c_pps: float, l_s: float, n_bbr: int) -> dict[str, float]:
    """Ware et al.'s prediction: the loss-based share ``p``, BBR's share by the in-flight cap alone
    (``cap_share`` = 1 - p) and with the PROBE_RTT discount (``share``)."""
    x = q_pkts / (c_pps * l_s)
    p = max(0.0, 0.5 - 1.0 / (2.0 * x) - 4.0 * n_bbr / q_pkts)
    probe = (q_pkts / c_pps + 0.2 + l_s) / 10.0
    return {"buffer_bdp": x, "p": p, "cap_share": 1.0 - p, "probe_rtt_fraction": min(1.0, probe),
            "share": max(0.0, (1.0 - p) * (1.0 - probe))}


def ware(summary: dict[str, Any], info: TrialInfo, core: dict[str, Any]) -> dict[str, Any]:
    why = _plain_bulk(core)
    if why:
        return _not(why)
    fl = _flows_conf(core)
    ccs = {f.get("cc") for f in fl}
    if "bbr" not in ccs:
        return _not("no BBRv1 flow")
    if not ccs & set(LOSS_BASED):
        return _not("no loss-based (CUBIC or Reno) flow")
    other = ccs - {"bbr", *LOSS_BASED}
    if other:
        return _not(f"flows other than BBRv1, CUBIC and Reno: {', '.join(sorted(map(str, other)))}")
    if any(f.get("cc") == "bbr" and _num((f.get("params") or {}).get("cwnd_gain", 2.0)) != 2.0 for f in fl) \
            or any(f.get("cc") == "bbr" and set((f.get("params") or {})) - {"cwnd_gain"} for f in fl):
        return _not("BBR with changed parameters (the model is BBRv1's, cwnd_gain 2)")
    if any(f.get("extra_delay_ns") for f in fl):
        return _not("flows with different base RTTs")
    probs = _link_problems(core, random_loss=False)
    if probs:
        return _not("; ".join(probs))
    qd = core["link"].get("queue", {}) or {}
    if qd.get("limit_bytes"):
        q = float(qd["limit_bytes"]) / info.mtu
    elif qd.get("limit_packets"):
        q = float(qd["limit_packets"])
    else:
        return _not("an unlimited queue")
    c = info.capacity_bps / 8.0 / info.mtu
    l = info.rtprop_ms / 1000.0
    n = sum(1 for f in fl if f.get("cc") == "bbr")
    pred = ware_share(q, c, l, n)
    payload = info.capacity_bps * info.mss / info.mtu
    meas_bps = sum(_num(r.get("goodput_bps")) or 0.0 for r in summary.get("flows", []) if r.get("cc") == "bbr")
    meas = meas_bps / payload
    err = 100.0 * (meas - pred["share"])
    starts = {f.get("start_ns", 0) for f in fl}
    return {"applies": True, "bbr_flows": n, "loss_based_flows": len(fl) - n, "queue_pkts": q, **pred,
            "predicted_share": pred["share"], "measured_share": meas, "error_points": err,
            "differs": abs(err) > DIFFERS, "same_start": len(starts) == 1}
