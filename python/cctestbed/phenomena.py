"""Detectors of the phenomena a congestion-control study looks for, the ``phenomena`` section of
``summary.json``.

Each detector reads the telemetry frames and returns ``{"detected": bool, "events": [...],
...}``, every event with ``start_s`` and ``end_s`` (trial time, s) so that a plot can shade it.
They look at the whole trial (start-up included), not only the steady window, and at the
forward direction's long-running tcp flows (a workload's flows are left out). Definitions
(also in the README's summary.json section):

- ``starvation``: a flow whose goodput, in 0.5 s bins, stays below 10 % of its fair share
  (the payload capacity over the number of flows running in the bin) for at least the longer
  of 5 s and 10 RTprops. Bins in which the flow starts or ends are not judged.
- ``standing_queue``: the queue's minimum over a 10 s window (BBR's PROBE_RTT interval: a flow
  that drains the queue once a window shows it) above 0.5 BDP; windows from 0 s, whole ones
  only, consecutive ones merged into one event.
- ``share_oscillation``: the share of the delivered payload of a group (or, with one group, of
  a flow), in 0.5 s bins over the steady window, whose autocorrelation has a peak of at least
  0.3 at a lag of 2 s or more (the first peak after it first turns negative: the period) and
  which swings by at least 0.2 (10th to 90th percentile). With exactly two units only the
  first is reported (the other's share is its complement).
- ``slow_convergence``: after each time flows join (a distinct start time), the seconds until
  Jain's index of the running flows' goodputs over a 1 s bucket first reaches 0.9 (buckets
  from the join, until the next join or the end); slow when that takes longer than 5 s or
  never happens. Joins that leave a single flow running are not judged.
- ``probe_rtt_sync``: runs of samples in the PROBE_RTT state (``state`` column) are a flow's
  episodes; the share of episodes that overlap an episode of another flow. Detected when two
  or more flows have episodes and at least half overlap; events are the overlapping clusters.
- ``startup_overshoot``: per flow with a start-up state (BBR's STARTUP, or ``slow_start``), the
  peak queue (in BDP) and the router's loss from the flow's start to one RTprop after it left
  start-up; detected when that loss is above 0 or the peak queue above 1 BDP.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Union

import numpy as np
import polars as pl

from .scores import (
    FlowArrays,
    arrays_at,
    as_arrays,
    bucket_edges,
    flow_arrays,
    long_flows,
    sample_interval,
    startup_exit,
)
from .summary import EPS, TrialInfo, counter_deltas, drop_columns, jain, payload_capacity_bits

STARVATION_FRACTION = 0.10
STARVATION_MIN_S = 5.0
STARVATION_MIN_RTTS = 10
STARVATION_BIN_S = 0.5
STANDING_WINDOW_S = 10.0
STANDING_BDP = 0.5
OSCILLATION_BIN_S = 0.5
OSCILLATION_MIN_ACF = 0.3
OSCILLATION_MIN_SWING = 0.2
OSCILLATION_MIN_PERIOD_S = 2.0
CONVERGED_JAIN = 0.9
SLOW_CONVERGENCE_S = 5.0
SYNC_SHARE = 0.5
OVERSHOOT_BDP = 1.0
STARTUP_STATES = ("startup", "slow_start")


def _num(x: Any) -> Optional[float]:
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


Flows = Union[pl.DataFrame, dict[int, FlowArrays]]


def flow_spans(flows: Flows, dt: float, end_s: float,
               completions: Optional[pl.DataFrame] = None) -> dict[int, tuple[float, float]]:
    """Per flow, when it runs: from the interval of its first sample that sent anything to its
    completion (``fct.parquet``) or the trial's end."""
    done: dict[int, float] = {}
    if completions is not None and len(completions):
        for r in completions.iter_rows(named=True):
            if r["fct_ms"] is not None and math.isfinite(r["fct_ms"]):
                done[int(r["flow"])] = float(r["start_s"]) + float(r["fct_ms"]) / 1e3
    out = {}
    for fid, a in as_arrays(flows).items():
        sent = next((a.cols[c] for c in ("sent_bytes", "sent_segs", "delivered_bytes") if c in a.cols), None)
        if sent is None:
            continue
        began = np.nonzero(np.nan_to_num(sent) > 0)[0]
        if len(began):
            out[fid] = (round(max(0.0, float(a.t[began[0]]) - dt), 9), done.get(fid, end_s))
    return out


def starvation(flows: Flows, info: TrialInfo, spans: dict[int, tuple[float, float]]) -> dict[str, Any]:
    min_s = max(STARVATION_MIN_S, STARVATION_MIN_RTTS * info.rtprop_ms / 1e3)
    edges = bucket_edges(0.0, info.duration_s, STARVATION_BIN_S)
    events: list[dict[str, Any]] = []
    if len(edges) < 2 or not spans:
        return {"detected": False, "min_duration_s": min_s, "events": events}
    arrays = as_arrays(flows)
    got = arrays_at(arrays, "delivered_bytes", edges)
    group_of = {f: a.group for f, a in arrays.items()}
    lo, hi = np.array(edges[:-1]), np.array(edges[1:])
    running = {f: (lo >= s - EPS) & (hi <= e + EPS) for f, (s, e) in spans.items()}
    n_running = np.sum(np.vstack([running[f] for f in spans]), axis=0)
    cap = np.array([payload_capacity_bits(info.capacity_steps(), a, b, info.mss, info.mtu) / 8
                    for a, b in zip(lo, hi)])
    for f in sorted(spans):
        if f not in got:
            continue
        per = np.diff(got[f])
        fair = np.where(n_running > 0, cap / np.maximum(n_running, 1), np.inf)
        low = running[f] & (per < STARVATION_FRACTION * fair)
        for a, b in _runs(low):
            if hi[b - 1] - lo[a] >= min_s - EPS:
                events.append({"flow": f, "group": group_of.get(f), "start_s": float(lo[a]), "end_s": float(hi[b - 1]),
                               "share_of_fair": _num(np.sum(per[a:b]) / np.sum(fair[a:b]))})
    return {"detected": bool(events), "min_duration_s": min_s, "events": events}


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """``[start, end)`` index ranges where ``mask`` is true."""
    m = np.concatenate(([False], np.asarray(mask, dtype=bool), [False]))
    d = np.diff(m.astype(np.int8))
    return [(int(a), int(b)) for a, b in zip(np.nonzero(d == 1)[0], np.nonzero(d == -1)[0])]


def standing_queue(router: pl.DataFrame, info: TrialInfo) -> dict[str, Any]:
    events: list[dict[str, Any]] = []
    edges = bucket_edges(0.0, info.duration_s, STANDING_WINDOW_S)
    if "queue_bytes" not in router.columns:
        return {"detected": False, "window_s": STANDING_WINDOW_S, "window_min_queue_bdp": [], "events": events}
    t = router["time_s"].to_numpy()
    q = router["queue_bytes"].cast(pl.Float64).to_numpy()
    minima = []
    for a, b in zip(edges, edges[1:]):
        inside = q[(t > a + EPS) & (t <= b + EPS)]
        minima.append(float(inside.min()) / info.bdp_bytes if len(inside) and info.bdp_bytes > 0 else 0.0)
    standing = np.array([m > STANDING_BDP for m in minima], dtype=bool)
    for a, b in _runs(standing):
        events.append({"start_s": edges[a], "end_s": edges[b], "min_queue_bdp": min(minima[a:b])})
    return {"detected": bool(events), "window_s": STANDING_WINDOW_S,
            "window_min_queue_bdp": [_num(m) for m in minima], "events": events}


def oscillation_period(x: np.ndarray, dt: float) -> Optional[tuple[float, float]]:
    """(period in s, autocorrelation at it) of a series' strongest regular cycle: the first
    local maximum of its autocorrelation after the first negative value, at a lag of at least
    :data:`OSCILLATION_MIN_PERIOD_S`, up to half the series; None if there is none."""
    n = len(x)
    d = x - x.mean()
    var = float(np.dot(d, d))
    if n < 8 or var <= 0:
        return None
    # each lag's mean product over the variance (not biased towards 0 at long lags)
    acf = np.array([float(np.dot(d[: n - k], d[k:])) / (n - k) / (var / n) for k in range(n // 2 + 1)])
    neg = np.nonzero(acf < 0)[0]
    if not len(neg):
        return None
    best = None
    for k in range(max(int(neg[0]), 1), len(acf) - 1):
        if acf[k] >= acf[k - 1] and acf[k] >= acf[k + 1] and k * dt >= OSCILLATION_MIN_PERIOD_S - EPS:
            if best is None or acf[k] > acf[best] + 1e-12:
                best = k
            if acf[k] >= OSCILLATION_MIN_ACF:
                break  # the first strong peak is the period (later ones are its multiples)
    return None if best is None else (best * dt, float(acf[best]))


def share_oscillation(flows: Flows, info: TrialInfo) -> dict[str, Any]:
    t0, t1 = info.steady_s
    edges = bucket_edges(t0, t1, OSCILLATION_BIN_S)
    arrays = as_arrays(flows)
    group_of = {f: a.group for f, a in arrays.items()}
    by = "group" if len(set(group_of.values())) >= 2 else "flow"
    got = arrays_at(arrays, "delivered_bytes", edges) if len(edges) >= 2 else {}
    units: dict[Any, np.ndarray] = {}
    if got:
        for f, v in got.items():
            key = group_of.get(f) if by == "group" else f
            units[key] = units.get(key, 0) + np.diff(v)
    events: list[dict[str, Any]] = []
    checked: list[dict[str, Any]] = []
    if len(units) >= 2:
        total = np.sum(np.vstack(list(units.values())), axis=0)
        keep = total > 0
        names = list(units)[:1] if len(units) == 2 else list(units)
        for u in names:
            x = units[u][keep] / total[keep]
            found = oscillation_period(x, OSCILLATION_BIN_S)
            swing = float(np.percentile(x, 90) - np.percentile(x, 10)) if len(x) else 0.0
            row = {by: u, "period_s": found[0] if found else None, "acf": found[1] if found else None,
                   "swing": swing, "mean_share": _num(x.mean()) if len(x) else None}
            checked.append(row)
            if found and found[1] >= OSCILLATION_MIN_ACF and swing >= OSCILLATION_MIN_SWING:
                events.append({**row, "start_s": t0, "end_s": edges[-1]})
    return {"detected": bool(events), "units": checked, "events": events}


def slow_convergence(flows: Flows, info: TrialInfo, spans: dict[int, tuple[float, float]]) -> dict[str, Any]:
    arrays = as_arrays(flows)
    joins = sorted({round(s, 6) for s, _ in spans.values()})
    rows, events = [], []
    for i, j in enumerate(joins):
        until = joins[i + 1] if i + 1 < len(joins) else info.duration_s
        running = [f for f, (s, e) in spans.items() if s <= j + EPS and e > j + EPS]
        if len(running) < 2:
            continue
        edges = bucket_edges(j, until, 1.0)
        after = None
        if len(edges) >= 2:
            got_all = arrays_at({f: arrays[f] for f in running if f in arrays}, "delivered_bytes", edges)
            per = np.diff(np.vstack(list(got_all.values())), axis=1)
            for k in range(per.shape[1]):
                jk = jain(per[:, k])
                if jk is not None and jk >= CONVERGED_JAIN:
                    after = float(k + 1)
                    break
        row = {"time_s": j, "flows": len(running), "converged_after_s": after,
               "slow": after is None or after > SLOW_CONVERGENCE_S}
        rows.append(row)
        if row["slow"]:
            events.append({"start_s": j, "end_s": j + after if after is not None else until, **row})
    return {"detected": bool(events), "joins": rows, "events": events}


def probe_rtt_sync(flows: Flows, dt: float) -> dict[str, Any]:
    episodes: list[tuple[float, float, int]] = []
    for fid, a in as_arrays(flows).items():
        for i, j in _runs(a.cols["_probe_rtt"]):
            episodes.append((round(float(a.t[i]) - dt, 9), float(a.t[j - 1]), fid))
    flows_with = {f for _, _, f in episodes}
    overlapping: list[bool] = []
    if episodes:
        s_, e_, f_ = (np.array([e[i] for e in episodes]) for i in range(3))
        over = (s_[:, None] < e_[None, :] - EPS) & (s_[None, :] < e_[:, None] - EPS) & (f_[:, None] != f_[None, :])
        overlapping = [bool(x) for x in over.any(axis=1)]
    share = sum(overlapping) / len(episodes) if episodes else None
    # clusters: overlapping episodes joined into one span, with the number of flows in it
    events: list[dict[str, Any]] = []
    for (s, e, f), ov in sorted(zip(episodes, overlapping)):
        if not ov:
            continue
        if events and s < events[-1]["end_s"] - EPS:
            events[-1]["end_s"] = max(events[-1]["end_s"], e)
            events[-1]["_flows"].add(f)
        else:
            events.append({"start_s": s, "end_s": e, "_flows": {f}})
    for ev in events:
        ev["flows"] = len(ev.pop("_flows"))
    detected = len(flows_with) >= 2 and share is not None and share >= SYNC_SHARE
    return {"detected": detected, "episodes": len(episodes), "flows": len(flows_with),
            "overlapping": sum(overlapping), "share": share, "events": events}


def startup_overshoot(flows: Flows, router: pl.DataFrame, info: TrialInfo,
                      spans: dict[int, tuple[float, float]]) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    arrays = as_arrays(flows)
    if "queue_bytes" not in router.columns or not any(a.state is not None for a in arrays.values()):
        return {"detected": False, "flows": rows, "events": []}
    rt = router["time_s"].to_numpy()
    q = router["queue_bytes"].cast(pl.Float64).to_numpy()
    drops = drop_columns(router)
    for fid, a in arrays.items():
        se = startup_exit(a.cols["_startup"])
        if se is None or fid not in spans:
            continue
        start = spans[fid][0]
        exit_s = float(a.t[se[1]])
        end = exit_s + info.rtprop_ms / 1e3
        inside = q[(rt > start + EPS) & (rt <= end + EPS)]
        peak = float(inside.max()) / info.bdp_bytes if len(inside) and info.bdp_bytes > 0 else None
        d = counter_deltas(router, ["arrivals_pkts", *drops], start, end)
        arrivals = float(d["arrivals_pkts"][0])
        lost = sum(float(d[c][0]) for c in drops)
        loss = 100.0 * lost / arrivals if arrivals > 0 else None
        rows.append({"flow": fid, "state": str(a.state[se[0]]) if a.state is not None else None,
                     "start_s": start, "end_s": exit_s,
                     "peak_queue_bdp": _num(peak), "loss_pct": _num(loss),
                     "overshoot": bool((loss or 0) > 0 or (peak or 0) > OVERSHOOT_BDP)})
    rows.sort(key=lambda r: r["flow"])
    events = [r for r in rows if r["overshoot"]]
    return {"detected": bool(events), "flows": rows, "events": events}


def phenomena(flows: pl.DataFrame, router: pl.DataFrame, info: TrialInfo,
              completions: Optional[pl.DataFrame] = None,
              arrays: Optional[dict[int, FlowArrays]] = None) -> dict[str, Any]:
    """The ``phenomena`` section (see the module docstring); ``arrays``: the long flows'
    :func:`~cctestbed.scores.flow_arrays`, when the caller has them."""
    if arrays is None:
        arrays = flow_arrays(long_flows(flows, info))
    dt = sample_interval(router, flows)
    spans = flow_spans(arrays, dt, info.duration_s, completions)
    return {
        "starvation": starvation(arrays, info, spans),
        "standing_queue": standing_queue(router, info),
        "share_oscillation": share_oscillation(arrays, info),
        "slow_convergence": slow_convergence(arrays, info, spans),
        "probe_rtt_sync": probe_rtt_sync(arrays, dt),
        "startup_overshoot": startup_overshoot(arrays, router, info, spans),
    }


def detected(section: dict[str, Any]) -> list[str]:
    """The names of the phenomena a ``phenomena`` section detected."""
    return [k for k, v in section.items() if isinstance(v, dict) and v.get("detected")]


def _spans(events: list[dict[str, Any]], limit: int = 3) -> str:
    shown = ", ".join(f"{e['start_s']:.1f}-{e['end_s']:.1f} s" for e in events[:limit])
    return shown + (f" and {len(events) - limit} more" if len(events) > limit else "")


def describe(section: dict[str, Any]) -> list[str]:
    """One line per detected phenomenon, for the command's summary (empty when none)."""
    lines = []
    s = section.get("starvation", {})
    if s.get("detected"):
        flows = sorted({e["flow"] for e in s["events"]})
        lines.append(f"starvation: flow(s) {', '.join(map(str, flows))} below 10 % of the fair share, "
                     f"{_spans(s['events'])}")
    s = section.get("standing_queue", {})
    if s.get("detected"):
        low = min(e["min_queue_bdp"] for e in s["events"])
        lines.append(f"standing queue: minimum over each {s['window_s']:g} s window above 0.5 BDP "
                     f"(lowest {low:.2f} BDP), {_spans(s['events'])}")
    s = section.get("share_oscillation", {})
    if s.get("detected"):
        parts = [f"{e.get('group', e.get('flow'))} every {e['period_s']:g} s (swing {e['swing']:.2f})"
                 for e in s["events"]]
        lines.append(f"share oscillation: {'; '.join(parts)}")
    s = section.get("slow_convergence", {})
    if s.get("detected"):
        parts = [f"join at {e['time_s']:.1f} s: " + ("never" if e["converged_after_s"] is None
                                                    else f"{e['converged_after_s']:g} s") for e in s["events"][:3]]
        lines.append(f"slow convergence (Jain >= 0.9 took > 5 s): {'; '.join(parts)}")
    s = section.get("probe_rtt_sync", {})
    if s.get("detected"):
        lines.append(f"PROBE_RTT synchronised: {s['overlapping']} of {s['episodes']} episodes overlap across "
                     f"{s['flows']} flows, {_spans(s['events'])}")
    s = section.get("startup_overshoot", {})
    if s.get("detected"):
        parts = [f"flow {e['flow']} peak queue {e['peak_queue_bdp'] or 0:.2f} BDP, loss {e['loss_pct'] or 0:.1f} %"
                 for e in s["events"][:3]]
        more = len(s["events"]) - 3
        lines.append(f"start-up overshoot: {'; '.join(parts)}" + (f" and {more} more" if more > 0 else ""))
    return lines
