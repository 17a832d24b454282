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
from dataclasses import dataclass
from typing import Any, Optional, Sequence, Union

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


@dataclass
class FlowArrays:
    """One flow's telemetry as NumPy arrays, in time order: ``t`` (``time_s``) and ``cols``, the
    numeric columns as floats (NaN where null) and the masks ``_bbr_startup`` (BBR's STARTUP),
    ``_startup`` (STARTUP or ``slow_start``) and ``_probe_rtt``; ``state`` the state column as
    it is (None without one)."""

    group: Optional[str]
    t: np.ndarray
    cols: dict[str, np.ndarray]
    state: Optional[pl.Series] = None


#: The numeric columns the scores and detectors read.
NUMERIC = ("delivered_bytes", "sent_bytes", "sent_segs", "retrans_segs", "rtt_ms", "min_rtt_ms", "cc.btlbw_bps")
#: The masks made from the ``state`` column: name -> the states (lower case) it marks.
STATE_MASKS = {"_bbr_startup": ("startup",), "_startup": ("startup", "slow_start"), "_probe_rtt": ("probe_rtt",)}


def flow_arrays(lf: pl.DataFrame) -> dict[int, FlowArrays]:
    """Per flow of ``lf`` (rows shaped like ``flows.parquet``), its :class:`FlowArrays`, which
    every score and detector then reads: the rows ordered by flow (then time) once and each
    column converted once."""
    masks = []
    if "state" in lf.columns:
        # the few distinct states, matched case-insensitively, rather than every row lower-cased
        states = [x for x in lf["state"].unique().to_list() if x is not None]
        for name, wanted in STATE_MASKS.items():
            masks.append(pl.col("state").is_in([x for x in states if x.lower() in wanted]).fill_null(False).alias(name))
    else:
        masks = [pl.lit(False).alias(name) for name in STATE_MASKS]
    numeric = [pl.col(c).cast(pl.Float64).fill_null(float("nan")) for c in NUMERIC if c in lf.columns]
    sel = lf.select(
        "flow", "time_s", pl.col("group") if "group" in lf.columns else pl.lit(None, pl.String).alias("group"),
        *numeric, *([pl.col("state")] if "state" in lf.columns else []), *masks)
    if len(sel) == 0:
        return {}
    ids = sel["flow"].to_numpy()
    first = sel["flow"].unique(maintain_order=True).to_numpy()
    n = len(first)
    if sel["time_s"].is_sorted() and len(ids) % n == 0 and (ids.reshape(-1, n) == first).all():
        # the simulator's telemetry: every flow at every sample, in time then flow order, so each
        # flow's rows are every n-th one (no sort, no copy)
        t_all = sel["time_s"].to_numpy()
        cols_all = {c: sel[c].to_numpy() for c in sel.columns if c not in ("flow", "time_s", "group", "state")}
        state_all = sel["state"] if "state" in sel.columns else None
        return dict(sorted(
            (int(fid), FlowArrays(sel["group"][j], t_all[j::n], {c: v[j::n] for c, v in cols_all.items()},
                                  state_all.gather_every(n, offset=j) if state_all is not None else None))
            for j, fid in enumerate(first)))
    # otherwise a stable sort by flow keeps each flow's samples in time order
    sel = sel.sort("flow", maintain_order=True) if sel["time_s"].is_sorted() else sel.sort(["flow", "time_s"])
    ids = sel["flow"].to_numpy()
    cuts = [0, *(np.flatnonzero(np.diff(ids)) + 1).tolist(), len(ids)]
    t = sel["time_s"].to_numpy()
    arrays = {c: sel[c].to_numpy() for c in sel.columns if c not in ("flow", "time_s", "group", "state")}
    groups = sel["group"]
    state = sel["state"] if "state" in sel.columns else None
    out = {}
    for a, b in zip(cuts, cuts[1:]):
        out[int(ids[a])] = FlowArrays(groups[a], t[a:b], {c: v[a:b] for c, v in arrays.items()},
                                      state.slice(a, b - a) if state is not None else None)
    return out


def as_arrays(flows: Union[pl.DataFrame, dict[int, FlowArrays]]) -> dict[int, FlowArrays]:
    """``flows`` as :func:`flow_arrays` gives them (a frame is split; arrays are kept)."""
    return flow_arrays(flows) if isinstance(flows, pl.DataFrame) else flows


def arrays_at(arrays: dict[int, FlowArrays], column: str, edges: Sequence[float]) -> dict[int, np.ndarray]:
    """Per flow, cumulative ``column`` read at each of ``edges`` (the last sample at or before
    it; zero before the first)."""
    e = np.asarray(edges, dtype=float) + EPS
    out = {}
    for fid, a in arrays.items():
        v = np.nan_to_num(a.cols[column], nan=0.0)
        idx = np.searchsorted(a.t, e, side="right") - 1
        out[fid] = np.where(idx >= 0, v[np.clip(idx, 0, None)], 0.0)
    return out


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


def startup_exit(states: Union[pl.Series, np.ndarray], names: tuple[str, ...] = ("startup",)) -> Optional[tuple[int, int]]:
    """Indices (first sample in start-up, first sample after it) of a flow's first start-up
    (a ``state`` in ``names``, case-insensitive; or a boolean mask of the start-up samples), or
    None if it never left it or never had one."""
    if isinstance(states, pl.Series):
        mask = states.fill_null("").str.to_lowercase().is_in(list(names)).to_numpy()
    else:
        mask = np.asarray(states, dtype=bool)
    if not mask.any():
        return None
    first = int(np.argmax(mask))
    rest = ~mask[first:]
    if not rest.any():
        return None
    return first, first + int(np.argmax(rest))


def per_second_jain(flows: Union[pl.DataFrame, dict[int, FlowArrays]], t0: float, t1: float) -> list[float]:
    """Jain's index of the flows' goodputs in each whole second of ``(t0, t1]``."""
    edges = bucket_edges(t0, t1, BUCKET_S)
    arrays = as_arrays(flows)
    if len(edges) < 2 or len(arrays) < 2:
        return []
    got = arrays_at(arrays, "delivered_bytes", edges)
    per = np.diff(np.vstack(list(got.values())), axis=1)  # flows x buckets
    out = []
    for k in range(per.shape[1]):
        j = jain(per[:, k])
        out.append(0.0 if j is None else j)  # nothing delivered by anyone: nothing shared fairly
    return out


def scores(flows: pl.DataFrame, router: pl.DataFrame, info: TrialInfo,
           arrays: Optional[dict[int, FlowArrays]] = None) -> dict[str, Any]:
    """The ``scores`` section (see the module docstring); ``arrays``: the long flows'
    :func:`flow_arrays`, when the caller has them."""
    t0, t1 = info.steady_s
    if arrays is None:
        arrays = flow_arrays(long_flows(flows, info))
    fwd = flows.filter(pl.col("direction") == "forward") if "direction" in flows.columns else flows
    edges = bucket_edges(t0, t1, BUCKET_S)
    tput = None
    if len(edges) >= 2 and len(fwd):
        # every forward flow counts (datagrams and workloads too); the long flows' arrays serve
        # when they are all there is
        all_long = fwd["flow"].n_unique() == len(arrays)
        got = arrays_at(arrays, "delivered_bytes", edges) if all_long else counters_at(fwd, "delivered_bytes", edges)
        delivered = np.diff(np.sum(np.vstack(list(got.values())), axis=0)) * 8
        caps = [payload_capacity_bits(info.capacity_steps(), a, b, info.mss, info.mtu)
                for a, b in zip(edges, edges[1:])]
        tput = 100.0 * float(np.mean([d / c for d, c in zip(delivered, caps) if c > 0]))
    js = per_second_jain(arrays, t0, t1)
    per_flow = flow_scores(arrays, info)
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


def flow_scores(flows: Union[pl.DataFrame, dict[int, FlowArrays]], info: TrialInfo) -> list[dict[str, Any]]:
    """Per flow: ``flow``, ``group``, ``rtt_med``, ``loss_avoid``, ``lock_on_bw``."""
    arrays = as_arrays(flows)
    t0, t1 = info.steady_s
    n = len(arrays)
    out = []
    for fid, a in arrays.items():
        c = a.cols
        inside = (a.t > t0 + EPS) & (a.t <= t1 + EPS)
        rtt_med = None
        if "rtt_ms" in c:
            rtts = c["rtt_ms"][inside]
            rtts = rtts[np.isfinite(rtts)]
            med = float(np.median(rtts)) if len(rtts) else None
            lows = c["min_rtt_ms"] if "min_rtt_ms" in c else c["rtt_ms"]
            lows = lows[np.isfinite(lows)]
            lo = float(lows.min()) if len(lows) else None
            rtt_med = 100.0 * lo / med if lo is not None and med else None
        sent = _delta(a, "sent_segs", t0, t1)
        retx = _delta(a, "retrans_segs", t0, t1)
        loss_avoid = 100.0 * (1.0 - retx / sent) if sent > 0 else None
        lock = None
        if "cc.btlbw_bps" in c:
            se = startup_exit(c["_bbr_startup"])
            if se is not None:
                bw = _num(c["cc.btlbw_bps"][se[1]])
                cap = _capacity_at(info, float(a.t[se[1]])) * info.mss / info.mtu
                lock = 100.0 * bw / (cap / n) if bw is not None and cap > 0 else None
        out.append({"flow": fid, "group": a.group, "rtt_med": rtt_med, "loss_avoid": loss_avoid, "lock_on_bw": lock})
    return out


def _delta(a: FlowArrays, column: str, t0: float, t1: float) -> float:
    if column not in a.cols:
        return 0.0
    v = np.nan_to_num(a.cols[column], nan=0.0)
    i1 = np.searchsorted(a.t, t1 + EPS, side="right") - 1
    i0 = np.searchsorted(a.t, t0 + EPS, side="right") - 1
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
