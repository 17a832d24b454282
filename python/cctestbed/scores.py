"""transperf's six scores of a trial, the ``scores`` section of ``summary.json``.

transperf (Google's transport testing tool, github.com/google/transperf: README "Scores" and
``default_check_*`` in ``__init__.py``) grades a test by six numbers on a 0-100 scale, 100
the best. Here each is computed from the telemetry frames (see the README's summary.json
section for the contract):

- ``tput``: 100 x the mean over the steady window's 1-second buckets of the payload all forward
  flows delivered in the bucket over the link's payload capacity in it (transperf: total
  goodput over the bottleneck rate, averaged over the test's seconds).
- ``rtt_med``: per tcp flow 100 x minRTT / medianRTT, minRTT the smallest RTT the flow measured
  in the whole trial (``min_rtt_ms``), medianRTT the median of its per-interval RTTs in the
  steady window; the trial's and a group's score is the lowest flow's (transperf checks every
  flow against the target).
- ``loss_avoid``: per tcp flow 100 x (1 - retransmitted segments / segments sent) over the
  steady window (transperf: its per-flow retransmission rate); the lowest flow's.
- ``fairness``: 100 x the mean over the steady window's 1-second buckets of Jain's index of the
  per-flow goodputs (transperf's ``default_check_fairness``, which averages the per-second index
  after the convergence time); null with fewer than two flows.
- ``convergence_fairness``: 100 x the lowest of those per-second indices; the convergence time
  (transperf's ``convergence_sec``) is the start of the steady window, ``convergence_s``.
- ``lock_on_bw``: per flow that has a STARTUP state (the BBR family), 100 x its bandwidth
  estimate (``cc.btlbw_bps``) when it leaves STARTUP over its fair share of the payload
  capacity (capacity / number of flows); the lowest flow's; null when no flow has one.

The flows scored are the long-running tcp flows of the forward direction (workloads' flows are
left out as ``total.jain`` leaves them out).
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

import numpy as np
import polars as pl

from .summary import EPS, TrialInfo, jain, payload_capacity_bits, window

#: Width of transperf's buckets (its ``CONVERGENCE_BUCKET``).
BUCKET_S = 1.0


def _num(x: Any) -> Optional[float]:
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def sample_interval(router: pl.DataFrame, flows: pl.DataFrame) -> float:
    """The telemetry's sample interval (s): the median step between the router's samples."""
    t = (router if len(router) > 1 else flows)["time_s"].unique().sort().to_numpy()
    return float(np.median(np.diff(t))) if len(t) > 1 else 0.01


def long_flows(flows: pl.DataFrame, info: TrialInfo) -> pl.DataFrame:
    """The rows of the forward direction's long-running tcp flows (no workload group)."""
    f = flows
    if "kind" in f.columns:
        f = f.filter(pl.col("kind") == "tcp")
    if "direction" in f.columns:
        f = f.filter(pl.col("direction") == "forward")
    if info.workload_groups:
        f = f.filter(~pl.col("group").is_in(list(info.workload_groups)))
    return f


def counters_at(flows: pl.DataFrame, column: str, edges: Sequence[float]) -> dict[int, np.ndarray]:
    """Per flow, cumulative ``column`` read at each of ``edges`` (the last sample at or before
    it; zero before the first)."""
    e = np.asarray(edges, dtype=float) + EPS
    out: dict[int, np.ndarray] = {}
    for (fid,), part in flows.select("flow", "time_s", column).partition_by("flow", as_dict=True).items():
        t = part["time_s"].to_numpy()
        v = part[column].cast(pl.Float64).fill_null(0.0).to_numpy()
        order = np.argsort(t, kind="stable")
        t, v = t[order], v[order]
        idx = np.searchsorted(t, e, side="right") - 1
        out[int(fid)] = np.where(idx >= 0, v[np.clip(idx, 0, None)], 0.0)  # type: ignore[call-overload]
    return out


def bucket_edges(t0: float, t1: float, width: float) -> list[float]:
    """Edges of the whole buckets of ``width`` in ``(t0, t1]``, from ``t0``."""
    n = int(math.floor((t1 - t0) / width + 1e-6))
    return [t0 + k * width for k in range(n + 1)]


def startup_exit(states: pl.Series, names: tuple[str, ...] = ("startup",)) -> Optional[tuple[int, int]]:
    """Indices (first sample in start-up, first sample after it) of a flow's first start-up
    (a ``state`` in ``names``, case-insensitive), or None if it never left it or never had one."""
    mask = states.fill_null("").str.to_lowercase().is_in(list(names)).to_numpy()
    if not mask.any():
        return None
    first = int(np.argmax(mask))
    rest = ~mask[first:]
    if not rest.any():
        return None
    return first, first + int(np.argmax(rest))


def per_second_jain(flows: pl.DataFrame, t0: float, t1: float) -> list[float]:
    """Jain's index of the flows' goodputs in each whole second of ``(t0, t1]``."""
    edges = bucket_edges(t0, t1, BUCKET_S)
    if len(edges) < 2:
        return []
    got = counters_at(flows, "delivered_bytes", edges)
    if len(got) < 2:
        return []
    per = np.diff(np.vstack(list(got.values())), axis=1)  # flows x buckets
    out = []
    for k in range(per.shape[1]):
        j = jain(per[:, k])
        out.append(0.0 if j is None else j)  # nothing delivered by anyone: nothing shared fairly
    return out


def scores(flows: pl.DataFrame, router: pl.DataFrame, info: TrialInfo) -> dict[str, Any]:
    """The ``scores`` section (see the module docstring)."""
    t0, t1 = info.steady_s
    fwd = flows.filter(pl.col("direction") == "forward") if "direction" in flows.columns else flows
    edges = bucket_edges(t0, t1, BUCKET_S)
    tput = None
    if len(edges) >= 2 and len(fwd):
        got = counters_at(fwd, "delivered_bytes", edges)
        delivered = np.diff(np.sum(np.vstack(list(got.values())), axis=0)) * 8
        caps = [payload_capacity_bits(info.capacity_steps(), a, b, info.mss, info.mtu)
                for a, b in zip(edges, edges[1:])]
        tput = 100.0 * float(np.mean([d / c for d, c in zip(delivered, caps) if c > 0]))
    lf = long_flows(flows, info)
    js = per_second_jain(lf, t0, t1) if lf["flow"].n_unique() >= 2 else []
    per_flow = flow_scores(lf, info)
    groups: dict[str, Any] = {}
    for label in dict.fromkeys(r["group"] for r in per_flow):
        mine = [r for r in per_flow if r["group"] == label]
        groups[str(label)] = {k: _lowest(r[k] for r in mine) for k in ("rtt_med", "loss_avoid", "lock_on_bw")}
    return {
        "tput": _num(tput),
        "rtt_med": _lowest(r["rtt_med"] for r in per_flow),
        "loss_avoid": _lowest(r["loss_avoid"] for r in per_flow),
        "fairness": _num(100.0 * float(np.mean(js))) if js else None,
        "convergence_fairness": _num(100.0 * min(js)) if js else None,
        "convergence_s": t0,
        "lock_on_bw": _lowest(r["lock_on_bw"] for r in per_flow),
        "groups": groups,
    }


def _lowest(values: Any) -> Optional[float]:
    vs = [v for v in values if v is not None]
    return min(vs) if vs else None


def flow_scores(lf: pl.DataFrame, info: TrialInfo) -> list[dict[str, Any]]:
    """Per flow: ``flow``, ``group``, ``rtt_med``, ``loss_avoid``, ``lock_on_bw``."""
    if len(lf) == 0:
        return []
    t0, t1 = info.steady_s
    n = lf["flow"].n_unique()
    wanted = ["flow", "time_s", "group", "rtt_ms", "min_rtt_ms", "sent_segs", "retrans_segs", "state", "cc.btlbw_bps"]
    lf = lf.select([c for c in wanted if c in lf.columns])
    inside = window(lf, t0, t1)
    out = []
    for (fid,), part in lf.partition_by("flow", as_dict=True, maintain_order=True).items():
        if not part["time_s"].is_sorted():
            part = part.sort("time_s")
        mine = inside.filter(pl.col("flow") == fid)
        rtts = mine["rtt_ms"].cast(pl.Float64).fill_nan(None).drop_nulls()
        med = _num(rtts.quantile(0.5, interpolation="linear")) if len(rtts) else None
        lo_col = part["min_rtt_ms"] if "min_rtt_ms" in part.columns else part["rtt_ms"]
        lo_all = lo_col.cast(pl.Float64).fill_nan(None).drop_nulls()
        lo = _num(lo_all.min()) if len(lo_all) else None
        rtt_med = 100.0 * lo / med if lo is not None and med else None
        sent = _delta(part, "sent_segs", t0, t1) if "sent_segs" in part.columns else 0.0
        retx = _delta(part, "retrans_segs", t0, t1) if "retrans_segs" in part.columns else 0.0
        loss_avoid = 100.0 * (1.0 - retx / sent) if sent > 0 else None
        lock = None
        if "state" in part.columns and "cc.btlbw_bps" in part.columns:
            se = startup_exit(part["state"])
            if se is not None:
                bw = _num(part["cc.btlbw_bps"][se[1]])
                at = float(part["time_s"][se[1]])
                cap = _capacity_at(info, at) * info.mss / info.mtu
                lock = 100.0 * bw / (cap / n) if bw is not None and cap > 0 else None
        out.append({"flow": int(fid), "group": part["group"][0] if "group" in part.columns else None,
                    "rtt_med": rtt_med, "loss_avoid": loss_avoid, "lock_on_bw": lock})
    return out


def _delta(part: pl.DataFrame, column: str, t0: float, t1: float) -> float:
    t = part["time_s"].to_numpy()
    v = part[column].cast(pl.Float64).fill_null(0.0).to_numpy()
    i1 = np.searchsorted(t, t1 + EPS, side="right") - 1
    i0 = np.searchsorted(t, t0 + EPS, side="right") - 1
    return float((v[i1] if i1 >= 0 else 0.0) - (v[i0] if i0 >= 0 else 0.0))


def _capacity_at(info: TrialInfo, t: float) -> float:
    cap = float(info.capacity_bps)
    for start, bps in sorted(info.capacity_steps()):
        if start <= t + EPS:
            cap = float(bps)
    return cap


def describe(section: dict[str, Any]) -> str:
    """The scores on one line, for the command's summary."""
    def f(k: str) -> str:
        v = section.get(k)
        return "-" if v is None else f"{v:.1f}"

    return (f"tput {f('tput')}, rtt_med {f('rtt_med')}, loss_avoid {f('loss_avoid')}, fairness {f('fairness')}, "
            f"convergence_fairness {f('convergence_fairness')} (after {section.get('convergence_s', 0):g} s), "
            f"lock_on_bw {f('lock_on_bw')} (transperf)")
