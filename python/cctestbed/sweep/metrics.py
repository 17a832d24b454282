"""Metrics a sweep adds to each trial's ``summary.json``, written beside it as ``metrics.json``.

Over the steady window, cut into intervals of :data:`INTERVAL_S` (0.5 s) from its start:

- ``total.interval_utilization`` and ``groups.<label>.interval_shares``: payload delivered in each
  interval over the payload capacity of that interval (capacity x mss / mtu, following the
  capacity schedule), so summary plots can draw the 25th-75th percentile band of the shares;
  ``utilization_p25/p50/p75`` and ``share_p25/p50/p75`` are those percentiles for the trial.
- ``tput_cov``: coefficient of variation (population standard deviation over mean) of the
  per-interval goodput, in total and per group; 0 is a perfectly steady rate.
- ``groups.<label>.rtt_mean_ms/rtt_p50_ms/rtt_p95_ms``: the group's per-sample RTTs in the window
  (a ping group's: its probes' round trips).
- ``groups.<label>.owd_p50_ms/owd_p95_ms``: a udp group's per-sample one-way delays (only for
  groups that have them).
- ``groups.<label>.lost_pct``: segments the group's senders marked lost over segments they sent
  (the router's drops are not attributed to flows; ``total.loss_pct`` in summary.json is the
  router's loss).

With traffic in both directions the totals are the forward flows' and a reverse group's shares
are of the reverse link's capacity (none on an unconstrained reverse path), as in summary.json.
Counters are read as in :mod:`cctestbed.summary`: the last sample at or before each interval edge.
An interval that would run past the window's end is left out.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence, Union

import numpy as np
import polars as pl

from ..summary import EPS, TrialInfo, counter_deltas, in_direction, payload_capacity_bits, window

INTERVAL_S = 0.5


def _num(x: Any) -> Optional[float]:
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def interval_edges(t0: float, t1: float, width: float = INTERVAL_S) -> np.ndarray:
    """Edges t0, t0 + w, ... up to the last one at or before t1 (at least the two ends of one interval)."""
    n = int(math.floor((t1 - t0) / width + 1e-9))
    if n < 1:
        return np.array([t0, t1])
    return t0 + width * np.arange(n + 1)


def counters_at(times: np.ndarray, values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """A cumulative counter read at each edge: its last sample at or before the edge, 0 before the first."""
    idx = np.searchsorted(times, edges + EPS, side="right") - 1
    out = np.where(idx >= 0, values[np.clip(idx, 0, None)], 0.0)
    return out.astype(float)


def delivered_per_interval(flows: pl.DataFrame, edges: np.ndarray, by: Optional[str] = "group") -> dict[Any, np.ndarray]:
    """Payload bytes delivered in each interval, summed per ``by`` label (or under None for all flows)."""
    out: dict[Any, np.ndarray] = {}
    flows = flows.select("flow", "time_s", "delivered_bytes", *([by] if by else []))
    # one pass splits the rows by flow (a filter per flow would read every row once per flow)
    parts = flows.partition_by("flow", as_dict=True)
    for key in sorted(parts):
        f = parts[key].sort("time_s")
        label = f[by][0] if by else None
        cum = counters_at(f["time_s"].to_numpy(), f["delivered_bytes"].cast(pl.Float64).to_numpy(), edges)
        out[label] = out.get(label, 0.0) + np.diff(cum)
    return out


def capacity_per_interval(info: TrialInfo, edges: np.ndarray) -> np.ndarray:
    """Payload bits the link could carry in each interval."""
    steps = info.capacity_steps()
    return np.array([payload_capacity_bits(steps, a, b, info.mss, info.mtu) for a, b in zip(edges[:-1], edges[1:])])


def cov(values: Union[Sequence[float], np.ndarray]) -> Optional[float]:
    """Coefficient of variation: population standard deviation over mean; None if empty or the mean is 0."""
    x = np.asarray(values, dtype=float)
    if len(x) == 0:
        return None
    m = x.mean()
    if m == 0:
        return None
    return _num(x.std() / m)


def quartiles(values: Sequence[Optional[float]]) -> tuple[Optional[float], Optional[float], Optional[float]]:
    """25th, 50th and 75th percentile (linear interpolation) of the finite values; Nones when none."""
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    if len(x) == 0:
        return None, None, None
    p = np.percentile(x, [25, 50, 75])
    return _num(p[0]), _num(p[1]), _num(p[2])


def _rtt_stats(samples: pl.Series) -> dict[str, Optional[float]]:
    r = samples.cast(pl.Float64).fill_nan(None).drop_nulls().to_numpy()
    if len(r) == 0:
        return {"rtt_mean_ms": None, "rtt_p50_ms": None, "rtt_p95_ms": None}
    return {
        "rtt_mean_ms": _num(r.mean()),
        "rtt_p50_ms": _num(np.percentile(r, 50)),
        "rtt_p95_ms": _num(np.percentile(r, 95)),
    }


def sweep_metrics(flows: pl.DataFrame, router: pl.DataFrame, info: TrialInfo, width: float = INTERVAL_S) -> dict[str, Any]:
    """The ``metrics.json`` document for one trial (see the module docstring)."""
    t0, t1 = info.steady_s
    edges = interval_edges(t0, t1, width)
    cap = capacity_per_interval(info, edges)
    spans = np.diff(edges)

    rev_bps = info.reverse_capacity_bps or 0
    rev_cap = np.array([payload_capacity_bits([(0.0, rev_bps)], a, b, info.mss, info.mtu)
                        for a, b in zip(edges[:-1], edges[1:])])
    reverse_groups = set(in_direction(flows, "reverse")["group"].unique().to_list()) if info.bidirectional else set()

    def shares(bytes_: np.ndarray, of: np.ndarray = cap) -> list[Optional[float]]:
        return [_num(x) for x in np.where(of > 0, 8 * bytes_ / np.where(of > 0, of, 1), np.nan)]

    by_group = delivered_per_interval(flows, edges, "group") if len(flows) else {}
    total_bytes = sum((b for label, b in by_group.items() if label not in reverse_groups), np.zeros(len(edges) - 1))
    util = shares(total_bytes)
    u25, u50, u75 = quartiles(util)
    total = {
        "tput_cov": cov(8 * total_bytes / spans) if len(flows) else None,
        "utilization_p25": u25,
        "utilization_p50": u50,
        "utilization_p75": u75,
        "interval_utilization": util,
    }

    # the window's samples of the columns read below, split by group in one pass
    delays = [c for c in ("rtt_ms", "owd_ms") if c in flows.columns]
    inside = {key[0]: part for key, part in
              window(flows.select("time_s", "group", *delays), t0, t1).partition_by("group", as_dict=True).items()}
    group_flows = dict(flows.group_by("group").agg(pl.col("flow").unique()).iter_rows())
    have_lost = len(flows) > 0 and {"sent_segs", "lost_segs"} <= set(flows.columns)
    lost = counter_deltas(flows, ["sent_segs", "lost_segs"], t0, t1, by="flow") if have_lost else None
    groups: dict[str, Any] = {}
    for label, b in by_group.items():
        s = shares(b, rev_cap if label in reverse_groups else cap)
        q25, q50, q75 = quartiles(s)
        g: dict[str, Any] = {
            "tput_cov": cov(8 * b / spans),
            "share_p25": q25,
            "share_p50": q50,
            "share_p75": q75,
            "interval_shares": s,
        }
        mine_inside = inside.get(label, flows.select("time_s", "group", *delays).clear())
        g.update(_rtt_stats(mine_inside["rtt_ms"]))
        if "owd_ms" in delays:
            owd = mine_inside["owd_ms"].cast(pl.Float64).fill_nan(None).drop_nulls().to_numpy()
            if len(owd):
                g["owd_p50_ms"], g["owd_p95_ms"] = (_num(x) for x in np.percentile(owd, [50, 95]))
        if lost is not None:
            mine = lost.filter(pl.col("flow").is_in(group_flows[label]))
            sent = float(mine["sent_segs"].sum())
            g["lost_pct"] = 100.0 * float(mine["lost_segs"].sum()) / sent if sent > 0 else None
        groups[str(label)] = g
    return {"interval_s": width, "intervals": len(edges) - 1, "total": total, "groups": groups}
