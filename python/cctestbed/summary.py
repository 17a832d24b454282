"""Steady-state metrics over the telemetry frames, and the ``summary.json`` they make.

Every function takes polars frames shaped like ``flows.parquet`` and ``router.parquet`` so the
same code serves single trials and sweeps. Conventions (see the README's summary.json section):

- A sample at ``time_s`` covers the interval ending at ``time_s``. The window ``(t0, t1]`` holds
  the samples with ``t0 < time_s <= t1``; cumulative counters are differenced between the last
  sample at or before ``t1`` and the last one at or before ``t0`` (zero before the first sample).
- Utilization is delivered payload over the payload capacity, capacity x mss / mtu, integrated
  over the window with the capacity schedule.
- Loss is router drops (every cause: overflow, random, policer, aqm) over packets arriving at
  the router; the mark rate is CE marks set by the router over the same arrivals;
  retransmission rate is retransmitted segments over segments sent. Both in percent.
- Sojourn percentiles are over the per-interval mean sojourn (``sojourn_mean_ms``), as RTT
  percentiles are over per-interval mean RTTs; the maximum is the largest single packet's.
- Datagram flows (``kind`` udp or ping) count in the utilization, goodput, loss and group
  shares; the TCP metrics (``rtt``, ``jain``, ``retrans_pct`` of the total and the flows'
  RTTs) are over the tcp flows only. ``udp.<group>`` reports a udp group's delivered rate,
  datagram loss (missing at the receivers over sent) and one-way delay percentiles over the
  per-interval means (``owd_ms``); ``ping.<group>`` the probes' RTT percentiles (over the
  per-interval means of ``rtt_ms``: with an interval of at least the sample interval, each
  sample holds one probe) and their loss. These sections appear only when such groups exist.
- Traffic in both directions (a trial with reverse flows or ``link.reverse``): ``total``,
  ``queue``, ``sojourn`` and ``rtt`` are the forward direction's (forward flows over the
  forward link); ``reverse`` reports the reverse flows over the reverse link the same way (its
  utilization is None on an unconstrained reverse path); each group's share is of its own
  direction's capacity, and groups and flows carry their ``direction``. Trials without reverse
  traffic keep the document as it was.
- Flow completion times (``fct.<group>``, from ``fct.parquet``: one row per tcp flow with a
  size) cover the flows that start in the window, whenever they finish; percentiles and mean
  slowdowns are over those that finished by the end of the trial, and ``unfinished`` counts the
  rest. Slowdowns are also reported per size bucket (:data:`cctestbed.workload.BUCKET_NAMES`).
  A workload's flows (groups with ``arrivals``) are left out of ``flows[]`` and of the Jain
  indices: their per-flow figures are their completion times.
- Percentiles interpolate linearly between samples (numpy's default).
- Values that do not exist (no samples, nothing sent) are ``None`` (JSON null).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional, Sequence

import numpy as np
import polars as pl

#: Time comparisons tolerate this much float error (sample times are multiples of the interval).
EPS = 1e-9

#: Router counters are named ``drops_<cause>`` and ``marks_<cause>``; the causes are the core's
#: (``cctestbed-sim`` ``qdisc::DropCause`` and ``MarkCause``), so the columns are found by prefix.
DROP_PREFIX = "drops_"
MARK_PREFIX = "marks_"


def drop_columns(router: pl.DataFrame) -> list[str]:
    """The router's drop counters, one per cause."""
    return [c for c in router.columns if c.startswith(DROP_PREFIX)]


def mark_columns(router: pl.DataFrame) -> list[str]:
    """The router's CE-mark counters, one per cause."""
    return [c for c in router.columns if c.startswith(MARK_PREFIX)]


@dataclass(frozen=True)
class TrialInfo:
    """What the metrics need to know about the trial besides the telemetry."""

    name: str
    seed: int
    duration_s: float
    steady_s: tuple[float, float]
    capacity_bps: int
    rtprop_ms: float
    bdp_bytes: float
    mss: int = 1448
    mtu: int = 1500
    backend: str = "sim"
    #: Piecewise-constant capacity: (from second, bps), the first entry at 0.
    schedule: tuple[tuple[float, int], ...] = field(default=())
    #: Whether the trial has traffic in both directions (reverse flows, or ``link.reverse``).
    bidirectional: bool = False
    #: The reverse bottleneck's capacity (``link.reverse``); None when unconstrained.
    reverse_capacity_bps: Optional[int] = None
    #: The labels of workload groups (flow groups with ``arrivals``).
    workload_groups: tuple[str, ...] = field(default=())
    #: The labels of the groups that send in the reverse direction.
    reverse_groups: tuple[str, ...] = field(default=())
    #: The trial's normalised configuration (``Trial.to_core()``), for the models; None when unknown.
    core: Optional[dict[str, Any]] = field(default=None, compare=False, hash=False, repr=False)

    @classmethod
    def from_trial(cls, trial: Any, backend: str = "sim") -> "TrialInfo":
        """Built from a :class:`cctestbed.config.Trial`."""
        t0, t1 = trial.steady_ns
        return cls(
            name=trial.name,
            seed=trial.seed,
            duration_s=trial.duration / 1e9,
            steady_s=(t0 / 1e9, t1 / 1e9),
            capacity_bps=trial.link.capacity,
            rtprop_ms=trial.link.rtprop_ns / 1e6,
            bdp_bytes=trial.link.bdp_bytes(),
            mss=trial.mss,
            mtu=trial.mtu,
            backend=backend,
            schedule=tuple(trial.capacity_schedule()),
            bidirectional=trial.link.reverse is not None or any(g.flow_direction == "reverse" for g in trial.flows),
            reverse_capacity_bps=None if trial.link.reverse is None else trial.link.reverse.capacity,
            workload_groups=tuple(dict.fromkeys(g.label for g in trial.flows if g.arrivals is not None)),
            reverse_groups=tuple(dict.fromkeys(g.label for g in trial.flows if g.flow_direction == "reverse")),
            core=trial.to_core(),
        )

    def capacity_steps(self) -> list[tuple[float, int]]:
        return list(self.schedule) if self.schedule else [(0.0, self.capacity_bps)]


# --- building blocks --------------------------------------------------------------------------


def _num(x: Any) -> Optional[float]:
    """A float for JSON, or None for missing/NaN/inf."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def window(df: pl.DataFrame, t0: float, t1: float) -> pl.DataFrame:
    """The samples whose interval lies in the window: ``t0 < time_s <= t1``."""
    return df.filter((pl.col("time_s") > t0 + EPS) & (pl.col("time_s") <= t1 + EPS))


def window_bounds(times: pl.Series, t0: float, t1: float) -> tuple[float, float]:
    """The sample times the counters are read at: last at or before t0 (else 0), last at or before t1."""
    before_end = times.filter(times <= t1 + EPS)
    before_start = times.filter(times <= t0 + EPS)
    s1 = float(before_end.max()) if len(before_end) else 0.0  # type: ignore[arg-type]
    s0 = float(before_start.max()) if len(before_start) else 0.0  # type: ignore[arg-type]
    return s0, max(s1, s0)


def counter_deltas(
    df: pl.DataFrame, columns: Sequence[str], t0: float, t1: float, by: Optional[str] = None
) -> pl.DataFrame:
    """Increase of cumulative ``columns`` over the window, per ``by`` (or one row overall).

    Each counter is read at the last sample at or before ``t1`` minus the last sample at or
    before ``t0``; a counter with no sample at or before ``t0`` starts from zero.
    """
    keys = [by] if by else []
    # telemetry comes in time order (then by flow): a stable sort by time alone would change nothing
    times = df["time_s"]
    in_time_order = times.is_sorted()
    sorted_times = times.to_numpy() if in_time_order else None

    def last_at(t: float) -> pl.DataFrame:
        if sorted_times is not None:
            # the rows at or before t are a prefix: found by bisection, not by a pass over them all
            n = int(np.searchsorted(sorted_times, t + EPS, side="right"))
            if not by:
                return df.select(columns).slice(n - 1, 1) if n else pl.DataFrame()
            sub = df.select(*keys, *columns).head(n)
        else:
            sub = df.select(*keys, "time_s", *columns).filter(pl.col("time_s") <= t + EPS).sort("time_s", maintain_order=True)
        if by:
            # each key's last row (what a group_by taking every column's last value gives, at
            # half the cost)
            return sub.unique(subset=by, keep="last", maintain_order=True).select(by, *columns)
        return sub.select([pl.col(c).last() for c in columns]) if len(sub) else pl.DataFrame()

    end, start = last_at(t1), last_at(t0)
    if by:
        ids = df.select(pl.col(by).unique().sort())
        end = ids.join(end, on=by, how="left")
        start = ids.join(start, on=by, how="left")
        out = ids
        for c in columns:
            a = end[c].cast(pl.Float64).fill_null(0.0)
            b = start[c].cast(pl.Float64).fill_null(0.0)
            out = out.with_columns((a - b).alias(c))
        return out
    row = {}
    for c in columns:
        at_end = float(end[c][0]) if len(end) and end[c][0] is not None else 0.0
        at_start = float(start[c][0]) if len(start) and start[c][0] is not None else 0.0
        row[c] = [at_end - at_start]
    return pl.DataFrame(row)


def payload_capacity_bits(steps: Iterable[tuple[float, int]], t0: float, t1: float, mss: int, mtu: int) -> float:
    """Payload bits the link could carry over [t0, t1] under a piecewise-constant capacity."""
    steps = sorted(steps)
    total = 0.0
    for i, (start, bps) in enumerate(steps):
        end = steps[i + 1][0] if i + 1 < len(steps) else math.inf
        lo, hi = max(start, t0), min(end, t1)
        if hi > lo:
            total += bps * (hi - lo)
    return total * mss / mtu


def jain(values: Iterable[float]) -> Optional[float]:
    """Jain's fairness index (sum x)^2 / (n sum x^2); None when empty or all zero."""
    xs = [float(v) for v in values]
    sq = sum(x * x for x in xs)
    if not xs or sq == 0:
        return None
    return sum(xs) ** 2 / (len(xs) * sq)


def percentile(values: pl.Series, q: float) -> Optional[float]:
    """Linear-interpolation percentile (q in 0..1) ignoring nulls and NaN; None if no values."""
    v = values.cast(pl.Float64).fill_nan(None).drop_nulls()
    if len(v) == 0:
        return None
    return _num(v.quantile(q, interpolation="linear"))


def _pct(num: float, den: float) -> Optional[float]:
    return 100.0 * num / den if den > 0 else None


# --- the metrics ------------------------------------------------------------------------------


def per_flow(flows: pl.DataFrame, t0: float, t1: float, times: Optional[pl.Series] = None) -> pl.DataFrame:
    """One row per flow over the window.

    Columns: ``flow, cc, group, delivered_bytes, goodput_bps, sent_segs, retrans_segs,
    retrans_pct, rtt_p50_ms, rtt_mean_ms``. ``goodput_bps`` is delivered payload over the span
    between the two counter readings (the window itself when samples fall on its ends), read on
    ``times`` (the sample times; default the flows'; a workload's flows have rows only while
    open, so the router's are the trial's).
    """
    s0, s1 = window_bounds(flows["time_s"] if times is None else times, t0, t1)
    span = s1 - s0
    deltas = counter_deltas(flows, ["delivered_bytes", "sent_segs", "retrans_segs"], t0, t1, by="flow")
    meta_cols = [c for c in ("cc", "group") if c in flows.columns]
    meta = flows.group_by("flow", maintain_order=True).agg([pl.col(c).first() for c in meta_cols]) if meta_cols else None
    inside = window(flows.select("flow", "time_s", "rtt_ms"), t0, t1).with_columns(pl.col("rtt_ms").cast(pl.Float64).fill_nan(None))
    rtt = inside.group_by("flow").agg(
        pl.col("rtt_ms").quantile(0.5, interpolation="linear").alias("rtt_p50_ms"),
        pl.col("rtt_ms").mean().alias("rtt_mean_ms"),
    )
    out = deltas
    if meta is not None:
        out = out.join(meta, on="flow", how="left")
    out = out.join(rtt, on="flow", how="left").with_columns(
        (pl.col("delivered_bytes") * 8 / span if span > 0 else pl.lit(None, pl.Float64)).alias("goodput_bps"),
        pl.when(pl.col("sent_segs") > 0)
        .then(100.0 * pl.col("retrans_segs") / pl.col("sent_segs"))
        .otherwise(None)
        .alias("retrans_pct"),
    )
    for c in ("cc", "group"):
        if c not in out.columns:
            out = out.with_columns(pl.lit(None, pl.String).alias(c))
    return out.sort("flow").select(
        "flow",
        "cc",
        "group",
        "delivered_bytes",
        "goodput_bps",
        "sent_segs",
        "retrans_segs",
        "retrans_pct",
        "rtt_p50_ms",
        "rtt_mean_ms",
    )


def router_metrics(router: pl.DataFrame, info: TrialInfo, t0: float, t1: float) -> dict[str, Any]:
    """Loss and CE marks over the window, queue occupancy statistics in bytes and in BDP, and
    the sojourn time through the queue."""
    drop_cols, mark_cols = drop_columns(router), mark_columns(router)
    d = counter_deltas(router, ["arrivals_pkts", *drop_cols, *mark_cols], t0, t1)
    drops = sum(float(d[c][0]) for c in drop_cols)
    arrivals = float(d["arrivals_pkts"][0])
    # Marks exist only where the backend reports them (the simulator); None elsewhere.
    has_marks = bool(mark_cols) and router[mark_cols[0]].null_count() < len(router)
    marks = sum(float(d[c][0]) for c in mark_cols) if has_marks else None
    q = window(router.select("time_s", "queue_bytes"), t0, t1)["queue_bytes"].cast(pl.Float64)
    mean_b = _num(q.mean()) if len(q) else None
    p95_b = percentile(q, 0.95)

    def bdp(x: Optional[float]) -> Optional[float]:
        return None if x is None or info.bdp_bytes <= 0 else x / info.bdp_bytes

    inside = window(router, t0, t1)
    soj = inside["sojourn_mean_ms"] if "sojourn_mean_ms" in inside.columns else pl.Series([], dtype=pl.Float64)
    soj_max = inside["sojourn_max_ms"].cast(pl.Float64).fill_nan(None) if "sojourn_max_ms" in inside.columns else None
    return {
        "loss_pct": _pct(drops, arrivals),
        "mark_pct": None if marks is None else _pct(marks, arrivals),
        "queue": {"mean_bdp": bdp(mean_b), "p95_bdp": bdp(p95_b), "mean_bytes": mean_b, "p95_bytes": p95_b},
        "sojourn": {
            "p50_ms": percentile(soj, 0.5),
            "p95_ms": percentile(soj, 0.95),
            "max_ms": _num(soj_max.max()) if soj_max is not None and soj_max.drop_nulls().len() else None,
        },
    }


#: The reverse bottleneck's router columns carry this prefix (the core's ``rev_`` columns).
REVERSE_PREFIX = "rev_"


def reverse_router(router: pl.DataFrame) -> pl.DataFrame:
    """The reverse bottleneck's columns under the forward ones' names, so that
    :func:`router_metrics` reads them as it reads the forward link's."""
    rev = [c for c in router.columns if c.startswith(REVERSE_PREFIX)]
    return router.select("time_s", *(pl.col(c).alias(c[len(REVERSE_PREFIX):]) for c in rev))


def in_direction(flows: pl.DataFrame, direction: str) -> pl.DataFrame:
    """The rows of flows going ``direction`` (results without a ``direction`` column go forward)."""
    if "direction" not in flows.columns:
        return flows if direction == "forward" else flows.clear()
    return flows.filter(pl.col("direction") == direction)


def of_kind(flows: pl.DataFrame, kind: str) -> pl.DataFrame:
    """The rows of flows of ``kind`` (results without a ``kind`` column hold tcp flows only)."""
    if "kind" not in flows.columns:
        return flows if kind == "tcp" else flows.clear()
    return flows.filter(pl.col("kind") == kind)


def datagram_metrics(flows: pl.DataFrame, kind: str, t0: float, t1: float) -> dict[str, Any]:
    """Per group of ``kind`` (udp or ping): what its flows delivered and lost, and the
    percentiles of their per-interval delays (udp: one-way; ping: round trip)."""
    mine = of_kind(flows, kind)
    out: dict[str, Any] = {}
    if len(mine) == 0:
        return out
    s0, s1 = window_bounds(mine["time_s"], t0, t1)
    span = s1 - s0
    deltas = counter_deltas(mine, ["delivered_bytes", "sent_segs", "lost_segs"], t0, t1, by="flow")
    groups = mine.group_by("flow", maintain_order=True).agg(pl.col("group").first())
    deltas = deltas.join(groups, on="flow", how="left")
    inside = window(mine, t0, t1)
    delay = "owd_ms" if kind == "udp" else "rtt_ms"
    for label in groups["group"].unique(maintain_order=True).to_list():
        d = deltas.filter(pl.col("group") == label)
        samples = inside.filter(pl.col("group") == label)[delay].cast(pl.Float64).fill_nan(None).drop_nulls()
        sent, lost = float(d["sent_segs"].sum()), float(d["lost_segs"].sum())
        g: dict[str, Any] = {"flows": len(d), "loss_pct": _pct(lost, sent)}
        if kind == "udp":
            g["delivered_bps"] = float(d["delivered_bytes"].sum()) * 8 / span if span > 0 else None
            g["owd_p50_ms"] = percentile(samples, 0.5)
            g["owd_p95_ms"] = percentile(samples, 0.95)
        else:
            g["rtt_p50_ms"] = percentile(samples, 0.5)
            g["rtt_p95_ms"] = percentile(samples, 0.95)
            g["rtt_p99_ms"] = percentile(samples, 0.99)
        out[str(label)] = g
    return out


def rtt_metrics(flows: pl.DataFrame, t0: float, t1: float) -> dict[str, Optional[float]]:
    """RTT over every flow's per-interval RTT samples in the window."""
    r = window(flows.select("time_s", "rtt_ms"), t0, t1)["rtt_ms"].cast(pl.Float64).fill_nan(None).drop_nulls()
    return {
        "p50_ms": percentile(r, 0.5),
        "p95_ms": percentile(r, 0.95),
        "min_ms": _num(r.min()) if len(r) else None,
        "mean_ms": _num(r.mean()) if len(r) else None,
    }


def direction_totals(flows: pl.DataFrame, pf: pl.DataFrame, cap_bits: float, span: float,
                     workload: tuple[str, ...] = ()) -> dict[str, Any]:
    """Utilization, goodput, retransmission rate and Jain's index of the flows in ``flows``
    (one direction's, or all), with ``pf`` their :func:`per_flow` rows; Jain's index leaves out
    the ``workload`` groups' flows (their per-flow figures are their completion times)."""
    delivered_bits = float(pf["delivered_bytes"].sum()) * 8
    tcp = of_kind(flows, "tcp")
    pf_tcp = pf.filter(pl.col("flow").is_in(tcp["flow"].unique().implode()))
    listed = pf_tcp.filter(~pl.col("group").is_in(list(workload))) if workload else pf_tcp
    return {
        "utilization": delivered_bits / cap_bits if cap_bits > 0 else None,
        "goodput_bps": delivered_bits / span if span > 0 else None,
        "retrans_pct": _pct(float(pf_tcp["retrans_segs"].sum()), float(pf_tcp["sent_segs"].sum())),
        "jain": jain(listed["goodput_bps"].fill_null(0.0)),
    }


def fct_metrics(fct: pl.DataFrame, t0: float, t1: float) -> dict[str, Any]:
    """Per group: completion-time percentiles and mean slowdown, overall and per size bucket,
    of the flows that start in the window ``[t0, t1)``; counts of finished and unfinished."""
    from .workload import BUCKET_BOUNDS, BUCKET_NAMES

    inside = fct.filter((pl.col("start_s") >= t0 - EPS) & (pl.col("start_s") < t1 - EPS))
    bounds = [0, *BUCKET_BOUNDS, math.inf]
    out: dict[str, Any] = {}
    for label in inside["group"].unique(maintain_order=True).to_list():
        g = inside.filter(pl.col("group") == label)
        done = g.filter(pl.col("fct_ms").is_not_nan() & pl.col("fct_ms").is_not_null())
        buckets = {}
        for name, lo, hi in zip(BUCKET_NAMES, bounds, bounds[1:]):
            b = done.filter((pl.col("size_bytes") >= lo) & (pl.col("size_bytes") < hi))
            in_bucket = g.filter((pl.col("size_bytes") >= lo) & (pl.col("size_bytes") < hi))
            buckets[name] = {
                "flows": len(in_bucket),
                "completed": len(b),
                "slowdown_mean": _num(b["slowdown"].mean()) if len(b) else None,
                "slowdown_p99": percentile(b["slowdown"], 0.99),
                "fct_p99_ms": percentile(b["fct_ms"], 0.99),
            }
        out[str(label)] = {
            "flows": len(g),
            "completed": len(done),
            "unfinished": len(g) - len(done),
            "fct_p50_ms": percentile(done["fct_ms"], 0.5),
            "fct_p95_ms": percentile(done["fct_ms"], 0.95),
            "fct_p99_ms": percentile(done["fct_ms"], 0.99),
            "fct_mean_ms": _num(done["fct_ms"].mean()) if len(done) else None,
            "slowdown_mean": _num(done["slowdown"].mean()) if len(done) else None,
            "slowdown_p99": percentile(done["slowdown"], 0.99),
            "buckets": buckets,
        }
    return out


def summarize(
    flows: pl.DataFrame, router: pl.DataFrame, info: TrialInfo, completions: Optional[pl.DataFrame] = None
) -> dict[str, Any]:
    """The ``summary.json`` document (see the README for the contract); ``completions`` is
    ``fct.parquet``'s frame, when the trial has flows with a size."""
    t0, t1 = info.steady_s
    # the sample times: the router's, as a workload's flows have rows only while open
    times = router["time_s"] if len(router) else flows["time_s"]
    s0, s1 = window_bounds(times, t0, t1)
    cap_bits = payload_capacity_bits(info.capacity_steps(), s0, s1, info.mss, info.mtu)
    span = s1 - s0
    pf = per_flow(flows, t0, t1, times)
    workload = info.workload_groups
    pf_listed = pf.filter(~pl.col("group").is_in(list(workload))) if workload else pf
    both = info.bidirectional
    fwd = in_direction(flows, "forward") if both else flows
    pf_fwd = pf.filter(pl.col("flow").is_in(fwd["flow"].unique().implode())) if both else pf
    totals = direction_totals(fwd, pf_fwd, cap_bits, span, workload)
    rm = router_metrics(router, info, t0, t1)
    rev_cap_bits = (payload_capacity_bits([(0.0, info.reverse_capacity_bps)], s0, s1, info.mss, info.mtu)
                    if info.reverse_capacity_bps else 0.0)
    direction_of = dict(zip(*flows.group_by("flow", maintain_order=True).agg(pl.col("direction").first())
                            .get_columns())) if both and "direction" in flows.columns else {}

    groups: dict[str, Any] = {}
    for label in pf["group"].unique(maintain_order=True).to_list():
        g = pf.filter(pl.col("group") == label) if label is not None else pf.filter(pl.col("group").is_null())
        bits = float(g["delivered_bytes"].sum()) * 8
        reverse = both and direction_of.get(g["flow"][0]) == "reverse"
        share_of = rev_cap_bits if reverse else cap_bits
        groups[str(label)] = {
            "share": bits / share_of if share_of > 0 else None,
            "goodput_bps": bits / span if span > 0 else None,
            "flows": len(g),
            "retrans_pct": _pct(float(g["retrans_segs"].sum()), float(g["sent_segs"].sum())),
            "jain": None if label in workload else jain(g["goodput_bps"].fill_null(0.0)),
            **({"direction": "reverse" if reverse else "forward"} if both else {}),
        }

    out: dict[str, Any] = {
        "trial": {
            "name": info.name,
            "seed": info.seed,
            "duration_s": info.duration_s,
            "steady_s": [t0, t1],
            "backend": info.backend,
            "bdp_bytes": info.bdp_bytes,
            "rtprop_ms": info.rtprop_ms,
            "capacity_bps": info.capacity_bps,
            **({"reverse_capacity_bps": info.reverse_capacity_bps} if both else {}),
        },
        "total": {
            "utilization": totals["utilization"],
            "goodput_bps": totals["goodput_bps"],
            "loss_pct": rm["loss_pct"],
            "mark_pct": rm["mark_pct"],
            "retrans_pct": totals["retrans_pct"],
            "jain": totals["jain"],
        },
        "queue": rm["queue"],
        "sojourn": rm["sojourn"],
        "rtt": rtt_metrics(of_kind(fwd, "tcp"), t0, t1),
        **({"reverse": reverse_metrics(flows, router, pf, info, rev_cap_bits, span)} if both else {}),
        "groups": groups,
        **{kind: m for kind in ("udp", "ping") if (m := datagram_metrics(flows, kind, t0, t1))},
        **({"fct": m} if completions is not None and (m := fct_metrics(completions, t0, t1)) else {}),
        "flows": [
            {
                "id": int(r["flow"]),
                "cc": r["cc"],
                "group": r["group"],
                **({"direction": direction_of.get(r["flow"], "forward")} if both else {}),
                "goodput_bps": _num(r["goodput_bps"]),
                "retrans_pct": _num(r["retrans_pct"]),
                "rtt_p50_ms": _num(r["rtt_p50_ms"]),
            }
            for r in pf_listed.iter_rows(named=True)
        ],
    }
    # transperf's scores and the detected phenomena (cctestbed.scores, cctestbed.phenomena)
    from .phenomena import phenomena
    from .scores import flow_arrays, long_flows, scores

    arrays = flow_arrays(long_flows(flows, info))  # the long flows split once, for both
    out["scores"] = scores(flows, router, info, arrays)
    out["phenomena"] = phenomena(flows, router, info, completions, arrays)
    from .models import models  # model predictions beside the measurements (cctestbed.models)

    out["models"] = models(flows, out, info)
    return out


def reverse_metrics(flows: pl.DataFrame, router: pl.DataFrame, pf: pl.DataFrame, info: TrialInfo,
                    cap_bits: float, span: float) -> dict[str, Any]:
    """The reverse direction as ``total``, ``queue``, ``sojourn`` and ``rtt`` report the forward
    one: the reverse flows over the reverse link (whose BDP is its capacity over the RTprop).
    On an unconstrained reverse path there is no capacity, queue or loss to report (None, with the
    keys a constrained one has, so that sweeps flatten both alike)."""
    t0, t1 = info.steady_s
    rev = in_direction(flows, "reverse")
    pf_rev = pf.filter(pl.col("flow").is_in(rev["flow"].unique().implode()))
    totals = direction_totals(rev, pf_rev, cap_bits, span, info.workload_groups)
    out: dict[str, Any] = {
        "capacity_bps": info.reverse_capacity_bps,
        "utilization": totals["utilization"],
        "goodput_bps": totals["goodput_bps"] if len(pf_rev) else None,
        "flows": len(pf_rev),
        "loss_pct": None,
        "mark_pct": None,
        "retrans_pct": totals["retrans_pct"],
        "jain": totals["jain"],
        "queue": dict.fromkeys(("mean_bdp", "p95_bdp", "mean_bytes", "p95_bytes")),
        "sojourn": dict.fromkeys(("p50_ms", "p95_ms", "max_ms")),
        "rtt": rtt_metrics(of_kind(rev, "tcp"), t0, t1),
    }
    rr = reverse_router(router)
    if info.reverse_capacity_bps and "queue_bytes" in rr.columns:
        bdp = info.reverse_capacity_bps * info.rtprop_ms / 8e3
        rm = router_metrics(rr, dataclasses.replace(info, bdp_bytes=bdp), t0, t1)
        out.update(loss_pct=rm["loss_pct"], mark_pct=rm["mark_pct"], queue=rm["queue"], sojourn=rm["sojourn"])
    return out
