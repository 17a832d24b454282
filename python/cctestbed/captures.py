"""Packet captures analysed into a results directory, as ``run`` writes one.

The parsing and the per-packet work happen in the core (``_core.analyze``; see
``crates/cctestbed-sim/src/capture/analyze.rs`` for the rules), whose columns carry the result
schema's names; this module feeds them to the tables' builder
(:func:`cctestbed.schema.build_table`) for ``flows.parquet`` and ``router.parquet``, computes
``summary.json`` with the same code as ``run`` (:func:`cctestbed.summary.summarize`), and draws
``trial.png`` with the same plot.

Columns a capture cannot give are null: the sender's smoothed RTT, cwnd, pacing rate, segments
it marked lost, timeouts, its algorithm's state and ``cc.*`` values; at the router, its
capacity and why a packet was dropped (every drop the captures show counts in
``drops_overflow``). Which capture points give which columns is in the README.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Optional, Sequence, Union

import polars as pl

from .config import Trial
from .destination import write_dir
from .results import PLOT_FILE, dump_summary, write_parquet
from .summary import TrialInfo, summarize

if TYPE_CHECKING:
    from matplotlib.figure import Figure

BACKEND = "capture"

#: Which capture gives which column (the README's table is written from this).
SOURCES = {
    "goodput_bps, delivered_bytes": "receiver (in-order payload), else the sender (cumulative ACKs)",
    "send_rate_bps, sent_bytes, sent_segs, retrans_segs": "sender",
    "rtt_ms, min_rtt_ms": "sender (data matched with ACKs, Karn's rule)",
    "inflight_bytes, inflight_pkts": "sender (sent, neither cumulatively ACKed nor SACKed)",
    "router.parquet": "router ingress and egress together",
}


class CaptureError(ValueError):
    """A capture that cannot be analysed (missing, not a capture, no TCP in it), or bad options."""


@dataclass
class CaptureAnalysis:
    """Captures analysed: frames shaped like ``run``'s, the summary, and what was found."""

    flows: pl.DataFrame
    router: Optional[pl.DataFrame]
    summary: dict[str, Any]
    info: TrialInfo
    report: dict[str, Any]
    trial: Optional[Trial] = None
    files: dict[str, bytes] = field(default_factory=dict)

    def plot(self) -> "Figure":
        from .plot import plot_trial

        router = self.router if self.router is not None else _empty_router(self.flows)
        title = f"{self.info.name}: {len(self.report['connections'])} flow(s) from captures"
        return plot_trial(self.flows, router, self.info, title=title)

    def write_files(self, tmp: Path) -> None:
        from .plot import save_figure

        if self.trial is not None:
            (tmp / "trial.toml").write_text(self.trial.to_toml(), encoding="utf-8")
        write_parquet(self.flows, tmp / "flows.parquet")
        if self.router is not None:
            write_parquet(self.router, tmp / "router.parquet")
        (tmp / "summary.json").write_text(dump_summary(self.summary), encoding="utf-8")
        (tmp / "capture.json").write_text(json.dumps(self.report, indent=2) + "\n", encoding="utf-8")
        save_figure(self.plot(), str(tmp / PLOT_FILE))

    def save(self, directory: Union[str, Path], force: bool = False) -> Path:
        return write_dir(Path(directory), self.write_files, force=force)


def check_captures(paths: Iterable[Union[str, Path]]) -> None:
    """Refuse, with :class:`CaptureError`, any path that is not a regular file starting with a
    pcap or pcapng header (:func:`cctestbed.inputs.check_capture`): a FIFO or a device is refused
    before the core would block on it or read it without end."""
    from .inputs import InputError, check_capture

    for p in paths:
        try:
            check_capture(p)
        except InputError as e:
            raise CaptureError(str(e)) from None


def _finite(v: Any) -> Any:
    """``v`` with every float that is not finite (NaN, inf) replaced by None: what a capture
    cannot give is null in summary.json, as JSON has no NaN."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_finite(x) for x in v]
    return v


def _empty_router(flows: pl.DataFrame) -> pl.DataFrame:
    """A router table of nulls on the flows' sample times, for the summary and the plot of
    captures without the router's."""
    from .schema import build_table, router_columns

    times = flows["time_s"].unique().sort()
    return build_table(router_columns(), {"time_s": times}, len(times), BACKEND)


def capture_labels(trial: Optional[Trial], connections: int) -> dict[str, list[Optional[str]]]:
    """The flows' labels: the trial's algorithm and group when it has as many flows as the
    captures have connections (by flow order), else no algorithm and the group ``tcp``;
    captures are read for TCP only, along the data's captured (forward) path."""
    from .schema import trial_labels

    labels: dict[str, list[Optional[str]]] = {"cc": [None] * connections, "group": ["tcp"] * connections}
    if trial is not None and len(trial.expanded()) == connections:
        labels = {k: v for k, v in trial_labels(trial).items() if k in labels}
    return {**labels, "kind": ["tcp"] * connections, "direction": ["forward"] * connections}


def analyze_captures(
    hosts: Sequence[Union[str, Path]],
    ingress: Optional[Union[str, Path]] = None,
    egress: Optional[Union[str, Path]] = None,
    trial: Optional[Trial] = None,
    interval_ns: Optional[int] = None,
    steady_s: Optional[tuple[float, float]] = None,
    name: Optional[str] = None,
    time_zero_ns: Optional[int] = None,
) -> CaptureAnalysis:
    """Analyse host captures (and the bottleneck's ``ingress`` and ``egress``) into results.

    ``trial`` (optional) gives what a capture cannot: the link's capacity and RTprop for
    utilization and queue in BDP, the flows' algorithms and groups (by flow order), the steady
    window, the sample interval, and the router's queue discipline (with one FIFO, a packet
    that never left is a drop once any later arrival leaves; without the trial, only once a
    later packet of its own connection leaves). Raises :class:`CaptureError` naming the file and the reason.
    """
    from . import _core
    from .schema import build_table, flow_columns, router_columns

    if (ingress is None) != (egress is None):
        raise CaptureError("--ingress and --egress go together: the router's queue needs both captures")
    if not hosts and ingress is None:
        raise CaptureError("no capture given")
    inputs = [(str(p), "host") for p in hosts]
    if ingress is not None and egress is not None:
        inputs += [(str(ingress), "ingress"), (str(egress), "egress")]
    check_captures(p for p, _ in inputs)
    interval = interval_ns or (trial.sample_interval if trial is not None else 10_000_000)
    # the router's discipline: a single FIFO lets a drop be found by any later departure
    discipline = None if trial is None else (trial.link.aqm.kind if trial.link.aqm is not None else "fifo")
    try:
        raw = _core.analyze(inputs, interval, time_zero_ns, discipline)
        # The simulator's captures count from the Unix epoch, its time 0: with its trial, a first
        # packet within the trial's duration of the epoch puts time zero there (flows that start late).
        first = raw["time_zero_ns"]
        if time_zero_ns is None and trial is not None and trial.backend != "kernel" and 0 < first < trial.duration:
            raw = _core.analyze(inputs, interval, 0, discipline)
    except ValueError as e:
        raise CaptureError(str(e)) from None

    conns = raw["connections"]
    n = len(raw["flows"]["time_s"])
    flows = build_table(flow_columns(), raw["flows"], n, BACKEND, capture_labels(trial, len(conns)))
    router = None
    if raw["router"] is not None:
        r: dict[str, Any] = dict(raw["router"])
        if trial is not None:
            steps = trial.capacity_schedule()
            r["capacity_bps"] = [[bps for start, bps in steps if start <= x + 1e-12][-1] for x in r["time_s"]]
        router = build_table(router_columns(), r, len(r["time_s"]), BACKEND)

    span_s = float(flows["time_s"].max()) if n else 0.0  # type: ignore[arg-type]
    # NaN where a sample has no RTT (no sender capture): no RTprop then, and null in summary.json
    min_rtt = flows["min_rtt_ms"].fill_nan(None).drop_nulls()
    if trial is not None:
        base = TrialInfo.from_trial(trial, backend=BACKEND)
        t0, t1 = steady_s if steady_s is not None else base.steady_s
        info = TrialInfo(
            name=name or trial.name, seed=trial.seed, duration_s=base.duration_s, steady_s=(t0, t1),
            capacity_bps=base.capacity_bps, rtprop_ms=base.rtprop_ms, bdp_bytes=base.bdp_bytes, mss=base.mss,
            mtu=base.mtu, backend=BACKEND, schedule=base.schedule,
        )
    else:
        mss = int(conns[0]["mss"]) if conns else 1448
        t0, t1 = steady_s if steady_s is not None else (0.0, span_s)
        rtprop = float(min_rtt.min()) if len(min_rtt) else math.nan  # type: ignore[arg-type]
        info = TrialInfo(
            name=name or "capture", seed=0, duration_s=span_s, steady_s=(t0, t1), capacity_bps=0,
            rtprop_ms=rtprop, bdp_bytes=0.0, mss=mss, mtu=mss + 52, backend=BACKEND,
        )
    if not (0 <= t0 < t1):
        raise CaptureError(f"--steady {t0:g} {t1:g}: the window must start at or after 0 and before it ends")
    summary = _finite(summarize(flows, router if router is not None else _empty_router(flows), info))

    files = [{**f, "path": str(Path(f["path"]).absolute())} for f in raw["files"]]
    where = [str(Path(p).absolute()) for p, _ in inputs]
    report = {
        "files": [
            {**f, "point": point, "connections": sum(1 for c in conns if c["per_file"][i][0] > 0)}
            for i, (f, (_, point)) in enumerate(zip(files, inputs))
        ],
        "time_zero_ns": raw["time_zero_ns"],
        "interval_ns": interval,
        "connections": [
            {
                "flow": c["flow"],
                "sender": f"{c['sender'][0]}:{c['sender'][1]}",
                "receiver": f"{c['receiver'][0]}:{c['receiver'][1]}",
                "mss": c["mss"],
                "syn_seen": c["syn_seen"],
                "first_s": (c["first_ns"] - raw["time_zero_ns"]) / 1e9,
                "last_s": (c["last_ns"] - raw["time_zero_ns"]) / 1e9,
                "sender_capture": None if c["sender_file"] is None else where[c["sender_file"]],
                "receiver_capture": None if c["receiver_file"] is None else where[c["receiver_file"]],
                "per_capture": {
                    where[i]: {"packets": p, "bytes": b, "payload_bytes": pl_}
                    for i, (p, b, pl_) in enumerate(c["per_file"]) if p > 0
                },
            }
            for c in conns
        ],
        "connections_without_data": raw["idle_connections"],
        "router": None if raw["router"] is None else {"unmatched_egress_packets": raw["router"]["unmatched"]},
        "null_columns": sorted(c for c in flows.columns if flows[c].null_count() == len(flows)),
    }
    return CaptureAnalysis(flows, router, summary, info, report, trial)
