"""Two trials side by side: steady-state metrics in one table, time series overlaid in one plot.

The natural use is the same trial on the simulator and on the kernel
(``cctestbed compare results/x-sim results/x-kernel``), but any two results directories work.
Trial A is drawn solid, trial B dashed; per-group curves keep one colour per group.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, NoReturn, Optional, Union

import polars as pl
from matplotlib.figure import Figure
from rich.table import Table

from .plot import aggregate_workloads, binned_flows, binned_router, literal_text, save_figure, style_fct_axes
from .results import DamagedFile, TrialResult


def load_pair(dir_a: Union[str, Path], dir_b: Union[str, Path]) -> tuple[TrialResult, TrialResult]:
    """Both results directories, loaded; a missing or incomplete one raises OSError, a damaged
    one (a file that is not what its name says, a summary.json of the wrong types)
    :class:`~cctestbed.results.DamagedFile` naming the file and the field."""
    out = []
    for d in (Path(dir_a), Path(dir_b)):
        for f in ("trial.toml", "flows.parquet", "router.parquet", "summary.json"):
            if not os.path.lexists(d / f):
                raise OSError(f"{d}: not a results directory (no {f})")
        r = TrialResult.load(d)
        check_summary(r.summary, d / "summary.json")
        out.append(r)
    return out[0], out[1]


#: The numbers :func:`metric_rows` reads, by section; each must be a number or null.
_TOTAL = ("utilization", "goodput_bps", "loss_pct", "retrans_pct", "jain")
_QUEUE = ("mean_bdp", "p95_bdp")
_RTT = ("p50_ms", "p95_ms", "min_ms")
_GROUP = ("share", "goodput_bps", "retrans_pct", "jain")
_UDP = ("delivered_bps", "loss_pct", "owd_p50_ms", "owd_p95_ms")
_PING = ("rtt_p50_ms", "rtt_p95_ms", "rtt_p99_ms", "loss_pct")
_FCT = ("completed", "unfinished", "fct_p50_ms", "fct_p99_ms", "slowdown_mean")
_FLOW = ("goodput_bps", "rtt_p50_ms")


def check_summary(summary: dict[str, Any], path: Union[str, Path]) -> None:
    """Raise :class:`DamagedFile` naming ``path`` and the field unless every value
    :func:`metric_rows` reads is there with its type: a table where a table belongs, a number or
    null where a number belongs (a hand-edited or foreign summary.json is refused in one line,
    not with a traceback)."""
    missing = object()

    def refuse(field: str, v: Any, what: str) -> NoReturn:
        text = "missing" if v is missing else json.dumps(v)
        raise DamagedFile(f"{path}: {field}: {text if len(text) <= 40 else text[:37] + '...'}: must be {what}")

    def table(parent: dict[str, Any], key: str, field: str, optional: bool = False) -> dict[str, Any]:
        v = parent.get(key, missing)
        if v is missing and optional:
            return {}
        if not isinstance(v, dict):
            refuse(field, v, "a table (a JSON object)")
        return v

    def numbers(t: dict[str, Any], keys: tuple[str, ...], field: str, optional: tuple[str, ...] = ()) -> None:
        for k in keys:
            v = t.get(k, missing)
            if v is None or (v is missing and k in optional):
                continue
            if v is missing or isinstance(v, bool) or not isinstance(v, (int, float)):
                refuse(f"{field}.{k}", v, "a number or null")

    numbers(table(summary, "total", "total"), _TOTAL, "total")
    numbers(table(summary, "queue", "queue"), _QUEUE, "queue")
    numbers(table(summary, "rtt", "rtt"), (*_RTT, "mean_ms"), "rtt", optional=("mean_ms",))
    for section, keys in (("groups", _GROUP), ("udp", _UDP), ("ping", _PING), ("fct", _FCT)):
        for name in table(summary, section, section, optional=section != "groups"):
            g = table(summary[section], name, f"{section}.{name}")
            numbers(g, keys, f"{section}.{name}")
            if section == "fct":
                buckets = table(g, "buckets", f"fct.{name}.buckets")
                for b in buckets:
                    numbers(table(buckets, b, f"fct.{name}.buckets.{b}"), ("slowdown_mean",), f"fct.{name}.buckets.{b}")
    flows = summary.get("flows", missing)
    if not isinstance(flows, list):
        refuse("flows", flows, "a list")
    for i, f in enumerate(flows):
        if not isinstance(f, dict):
            refuse(f"flows[{i}]", f, "a table (a JSON object)")
        for k in ("id", "group"):
            v = f.get(k, missing)
            if v is missing or isinstance(v, bool) or not isinstance(v, (str, int, type(None) if k == "group" else int)):
                refuse(f"flows[{i}].{k}", v, "a name or number")
        numbers(f, _FLOW, f"flows[{i}]")


def _label(r: TrialResult) -> str:
    return f"{r.trial.name} ({r.backend})"


def metric_rows(summary: dict[str, Any]) -> list[tuple[str, Optional[float], str]]:
    """(name, value, format) for every steady-state metric of a summary.json."""
    tot, q, rtt = summary["total"], summary["queue"], summary["rtt"]

    def pct(x: Optional[float]) -> Optional[float]:
        return None if x is None else 100 * x

    def mbit(x: Optional[float]) -> Optional[float]:
        return None if x is None else x / 1e6

    rows: list[tuple[str, Optional[float], str]] = [
        ("utilization %", pct(tot["utilization"]), ".1f"),
        ("goodput Mbit/s", mbit(tot["goodput_bps"]), ".2f"),
        ("loss at router %", tot["loss_pct"], ".3f"),
        ("retransmissions %", tot["retrans_pct"], ".3f"),
        ("Jain index", tot["jain"], ".3f"),
        ("queue mean BDP", q["mean_bdp"], ".3f"),
        ("queue p95 BDP", q["p95_bdp"], ".3f"),
        ("RTT p50 ms", rtt["p50_ms"], ".2f"),
        ("RTT p95 ms", rtt["p95_ms"], ".2f"),
        ("RTT min ms", rtt["min_ms"], ".2f"),
        ("RTT mean ms", rtt.get("mean_ms"), ".2f"),
    ]
    for name, g in summary["groups"].items():
        rows += [
            (f"{name}: share %", pct(g["share"]), ".1f"),
            (f"{name}: goodput Mbit/s", mbit(g["goodput_bps"]), ".2f"),
            (f"{name}: retransmissions %", g["retrans_pct"], ".3f"),
            (f"{name}: Jain index", g["jain"], ".3f"),
        ]
    for name, g in summary.get("udp", {}).items():
        rows += [
            (f"{name} (udp): delivered Mbit/s", mbit(g["delivered_bps"]), ".2f"),
            (f"{name} (udp): loss %", g["loss_pct"], ".3f"),
            (f"{name} (udp): one-way delay p50 ms", g["owd_p50_ms"], ".2f"),
            (f"{name} (udp): one-way delay p95 ms", g["owd_p95_ms"], ".2f"),
        ]
    for name, g in summary.get("ping", {}).items():
        rows += [
            (f"{name} (ping): RTT p50 ms", g["rtt_p50_ms"], ".2f"),
            (f"{name} (ping): RTT p95 ms", g["rtt_p95_ms"], ".2f"),
            (f"{name} (ping): RTT p99 ms", g["rtt_p99_ms"], ".2f"),
            (f"{name} (ping): loss %", g["loss_pct"], ".3f"),
        ]
    for name, g in summary.get("fct", {}).items():
        rows += [
            (f"{name} (FCT): flows completed", g["completed"], ".0f"),
            (f"{name} (FCT): unfinished", g["unfinished"], ".0f"),
            (f"{name} (FCT): p50 ms", g["fct_p50_ms"], ".2f"),
            (f"{name} (FCT): p99 ms", g["fct_p99_ms"], ".2f"),
            (f"{name} (FCT): mean slowdown", g["slowdown_mean"], ".2f"),
        ]
        rows += [(f"{name} (FCT): mean slowdown, {b}", v["slowdown_mean"], ".2f") for b, v in g["buckets"].items()]
    for f in summary["flows"]:
        rows += [
            (f"flow {f['id']} ({f['group']}): goodput Mbit/s", mbit(f["goodput_bps"]), ".2f"),
            (f"flow {f['id']} ({f['group']}): RTT p50 ms", f["rtt_p50_ms"], ".2f"),
        ]
    return rows


def compare_table(a: TrialResult, b: TrialResult) -> Table:
    """The steady-state metrics of both trials and their difference (B - A)."""
    t = Table(title="steady-state metrics", title_justify="left", show_edge=False, pad_edge=False)
    t.add_column("metric")
    t.add_column(f"A: {_label(a)}", justify="right")
    t.add_column(f"B: {_label(b)}", justify="right")
    t.add_column("B - A", justify="right")
    ra = {name: (v, fmt) for name, v, fmt in metric_rows(a.summary)}
    rb = {name: (v, fmt) for name, v, fmt in metric_rows(b.summary)}
    names = list(ra) + [n for n in rb if n not in ra]
    for name in names:
        va, fmt = ra.get(name, (None, ".3f"))
        vb, fmt_b = rb.get(name, (None, fmt))
        diff = None if va is None or vb is None else vb - va
        show = lambda x: "-" if x is None else format(x, fmt)  # noqa: E731
        t.add_row(name, show(va), show(vb), "-" if diff is None else format(diff, "+" + fmt))
    return t


def _flows(r: TrialResult) -> pl.DataFrame:
    """The trial's flows with each workload group summed into one (as the trial plot draws them)."""
    return aggregate_workloads(r.flows, r.info.workload_groups, r.router["time_s"])


def _by_group(flows: pl.DataFrame, bf: pl.DataFrame) -> pl.DataFrame:
    meta = flows.group_by("flow").agg(pl.col("group").first())
    return bf.join(meta, on="flow", how="left")


@literal_text
def plot_compare(a: TrialResult, b: TrialResult) -> Figure:
    """Goodput per group and in total, RTT per group, queue and loss: A solid, B dashed."""
    from matplotlib import colormaps

    has_fct = a.completions is not None or b.completions is not None
    fig = Figure(figsize=(11, 11 + (4 if has_fct else 0)), layout="constrained")
    axes = fig.subplots(4 + has_fct, 1, height_ratios=[1.3, 1, 1, 0.8] + ([2] if has_fct else []))
    ax_tp, ax_rtt, ax_q, ax_loss = axes[:4]
    for ax in (ax_rtt, ax_q, ax_loss):
        ax.sharex(ax_tp)
    for ax in (ax_tp, ax_rtt, ax_q):
        ax.tick_params(labelbottom=False)
    flows = {id(r): _flows(r) for r in (a, b)}
    groups: list[str] = []
    for r in (a, b):
        for g in flows[id(r)]["group"].unique(maintain_order=True).to_list():
            if g not in groups:
                groups.append(g)
    colors = {g: colormaps["tab10"](i % 10) for i, g in enumerate(groups)}
    for r, ls in ((a, "-"), (b, "--")):
        tag = "A" if r is a else "B"
        bf = _by_group(flows[id(r)], binned_flows(flows[id(r)]))
        per_group = bf.group_by(["group", "t"]).agg(
            pl.col("goodput_bps").sum(), pl.col("rtt_ms").mean()
        ).sort(["group", "t"])
        for g in groups:
            d = per_group.filter(pl.col("group") == g)
            if len(d) == 0:
                continue
            ax_tp.plot(d["t"], d["goodput_bps"] / 1e6, color=colors[g], ls=ls, lw=1.3, label=f"{tag}: {g}")
            ax_rtt.plot(d["t"], d["rtt_ms"], color=colors[g], ls=ls, lw=1.2)
        total = bf.group_by("t").agg(pl.col("goodput_bps").sum()).sort("t")
        ax_tp.plot(total["t"], total["goodput_bps"] / 1e6, color="black", ls=ls, lw=1, alpha=0.7, label=f"{tag}: total")
        br = binned_router(r.router)
        if len(br):
            ax_q.plot(br["t"], br["queue_mean"] / 1e3, color="black", ls=ls, lw=1.2, label=f"{tag}: {_label(r)}")
            ax_loss.plot(br["t"], br["loss_pct"], color="tab:red", ls=ls, lw=1.2, drawstyle="steps-pre")
    # the payload capacity and the RTprop, each once, or one per trial where they differ
    lines = dict.fromkeys((r.info.capacity_bps * r.info.mss / r.info.mtu / 1e6, r.info.rtprop_ms) for r in (a, b))
    for payload_mbit, rtprop_ms in lines:
        ax_tp.axhline(payload_mbit, color="0.5", lw=0.8, ls=":")
        ax_rtt.axhline(rtprop_ms, color="0.5", lw=0.8, ls=":")
    ax_tp.set_ylabel("goodput (Mbit/s)")
    ax_rtt.set_ylabel("RTT (ms)")
    ax_q.set_ylabel("queue (KB)")
    ax_loss.set_ylabel("loss at router (%)")
    ax_loss.set_xlabel("time (s)")
    for ax in (ax_tp, ax_rtt, ax_q, ax_loss):
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
    if has_fct:
        ax_fct = axes[4]
        for r, marker in ((a, "o"), (b, "x")):
            c = r.completions
            if c is None:
                continue
            done = c.filter(pl.col("fct_ms").is_not_nan())
            ax_fct.scatter(done["size_bytes"], done["fct_ms"], s=8, marker=marker, lw=0.8 if marker == "x" else 0,
                           alpha=0.5, label=f"{'A' if r is a else 'B'}: {_label(r)} ({len(done)} completed)")
        style_fct_axes(ax_fct)
    ax_tp.legend(loc="lower right", fontsize=8, ncol=max(2, len(groups) + 1))
    ax_q.legend(loc="upper right", fontsize=8)
    setups = (a.trial.describe(),) if a.trial.describe() == b.trial.describe() else (
        f"A: {a.trial.describe()}", f"B: {b.trial.describe()}")
    fig.suptitle("\n".join((f"A (solid): {_label(a)}    B (dashed): {_label(b)}", *setups)), fontsize=11)
    return fig


def save_compare(fig: Figure, path: Union[str, Path]) -> None:
    """Write the figure at ``path``; Ctrl-C meanwhile leaves no folder it made for it."""
    from .destination import undone_if_interrupted

    with undone_if_interrupted(path):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        save_figure(fig, str(path))
