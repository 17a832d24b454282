"""The stacked trial plot: throughput, RTT, cwnd and inflight, queue, loss over time, the
algorithms' states as bands, and BBR's model (bottleneck-bandwidth and RTprop estimates)
when a BBR flow is present; below them, when the trial has flows with a size, each flow's
completion time against its size (log axes), with the ideal on the empty path.

A workload's flows (hundreds or thousands of short flows) are drawn as one line per workload
group: their goodput, cwnd and inflight summed over the flows open in each sample, their RTT
averaged; they get no state band.

Everything is aggregated over 0.5 s intervals (or the sample interval if longer), as the
testbed plots that users compare against. Flows keep one colour in every panel. The figure is
built without pyplot, so it holds no global state and works in scripts and notebooks alike.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Any, Callable, Optional, TypeVar

import numpy as np
import polars as pl
from matplotlib.figure import Figure

from .destination import FIGURE_SUFFIXES, GENERATOR, write_file_atomically
from .summary import TrialInfo, drop_columns, in_direction, reverse_router

Builder = TypeVar("Builder", bound=Callable[..., Any])


def literal_text(build: Builder) -> Builder:
    """Builds a figure with matplotlib's mathtext off. Its texts are the user's: group labels,
    trial and scenario names, paths; a pair of '$' in one would be read as TeX, and a command
    TeX does not know ended the plot in a ParseFatalException."""

    @functools.wraps(build)
    def with_literal_text(*args: Any, **kwargs: Any) -> Any:
        import matplotlib

        with matplotlib.rc_context({"text.parse_math": False}):
            return build(*args, **kwargs)

    return with_literal_text  # type: ignore[return-value]

BIN_S = 0.5

# State colours: BBR's states, the classic slow start / avoidance / recovery, idle.
STATE_COLORS = {
    "STARTUP": "tab:orange",
    "DRAIN": "gold",
    "PROBE_BW": "tab:green",
    "PROBE_BW_DOWN": "yellowgreen",
    "PROBE_BW_CRUISE": "tab:green",
    "PROBE_BW_REFILL": "mediumseagreen",
    "PROBE_BW_UP": "darkgreen",
    "PROBE_RTT": "tab:purple",
    "slow_start": "tab:orange",
    "cong_avoid": "tab:blue",
    "recovery": "tab:red",
    "loss": "black",
    "idle": "0.85",
}


def state_spans(flows: pl.DataFrame) -> dict[int, list[tuple[str, float, float]]]:
    """Per flow, the runs of equal ``state`` at full sample resolution: (state, start, end)."""
    out: dict[int, list[tuple[str, float, float]]] = {}
    if "state" not in flows.columns:
        return out
    for (f,), d in flows.select("flow", "time_s", "state").sort("flow", "time_s").group_by(["flow"], maintain_order=True):
        t = d["time_s"].to_numpy()
        st = d["state"].to_list()
        if not len(t):
            continue
        dt = float(t[1] - t[0]) if len(t) > 1 else 0.01
        runs = []
        start = 0
        for i in range(1, len(st) + 1):
            if i == len(st) or st[i] != st[start]:
                runs.append((st[start], float(t[start]) - dt, float(t[i - 1])))
                start = i
        out[int(f)] = runs
    return out


def _has_bbr_model(flows: pl.DataFrame) -> bool:
    col = "cc.btlbw_bps"
    return col in flows.columns and flows[col].cast(pl.Float64).fill_nan(None).drop_nulls().len() > 0


def flow_colors(n: int) -> list:
    """One distinct colour per flow id: tab10 up to ten flows, tab20, then a sampled colormap."""
    from matplotlib import colormaps

    if n <= 10:
        return [colormaps["tab10"](i) for i in range(n)]
    if n <= 20:
        return [colormaps["tab20"](i) for i in range(n)]
    cmap = colormaps["turbo"]
    return [cmap(0.05 + 0.9 * i / max(n - 1, 1)) for i in range(n)]


def _bin_expr(width: float) -> pl.Expr:
    # a sample at time t covers (t - dt, t]; it belongs to bin k when (k-1) w < t <= k w
    return ((pl.col("time_s") / width - 1e-9).ceil() * width).alias("t")


def binned_flows(flows: pl.DataFrame, width: float = BIN_S) -> pl.DataFrame:
    """Per flow and interval: mean goodput, RTT and udp one-way delay (samples without one
    skipped), cwnd, inflight."""
    cols = {
        "goodput_bps": pl.col("goodput_bps").cast(pl.Float64).mean(),
        "rtt_ms": pl.col("rtt_ms").cast(pl.Float64).fill_nan(None).mean(),
        "owd_ms": pl.col("owd_ms").cast(pl.Float64).fill_nan(None).mean(),
        "cwnd_pkts": pl.col("cwnd_pkts").cast(pl.Float64).mean(),
        "inflight_pkts": pl.col("inflight_pkts").cast(pl.Float64).mean(),
    }
    present = {k: v.alias(k) for k, v in cols.items() if k in flows.columns}
    return flows.with_columns(_bin_expr(width)).group_by(["flow", "t"]).agg(**present).sort(["flow", "t"])


def binned_router(router: pl.DataFrame, width: float = BIN_S) -> pl.DataFrame:
    """Per interval: mean and max queue (bytes), capacity, and the drop rate (drops / arrivals)."""
    # a drop column a backend cannot fill (null) counts nothing; all null stays null
    present = drop_columns(router)
    if present:
        drops = pl.when(pl.all_horizontal(pl.col(c).is_null() for c in present)).then(None).otherwise(
            pl.sum_horizontal(pl.col(c).cast(pl.Float64) for c in present)
        )
    else:
        drops = pl.lit(0.0)
    b = (
        router.with_columns(_bin_expr(width), drops.alias("drops"))
        .group_by("t")
        .agg(
            pl.col("queue_bytes").cast(pl.Float64).mean().alias("queue_mean"),
            pl.col("queue_bytes").cast(pl.Float64).max().alias("queue_max"),
            pl.col("capacity_bps").cast(pl.Float64).mean().alias("capacity_bps"),
            pl.col("drops").last().alias("drops_cum"),
            pl.col("arrivals_pkts").cast(pl.Float64).last().alias("arrivals_cum"),
        )
        .sort("t")
    )
    def steps(col: str) -> np.ndarray:
        x = b[col].cast(pl.Float64).to_numpy()
        return np.diff(x, prepend=0.0) if len(x) else x

    d_drops, d_arr = steps("drops_cum"), steps("arrivals_cum")
    with np.errstate(invalid="ignore"):
        loss = np.where(d_arr > 0, 100.0 * d_drops / np.maximum(d_arr, 1), np.nan)
    return b.with_columns(pl.Series("loss_pct", loss))


def aggregate_workloads(flows: pl.DataFrame, groups: tuple[str, ...], times: pl.Series) -> pl.DataFrame:
    """``flows`` with each workload group's flows replaced by one pseudo-flow per group (ids
    after the last flow's): goodput, cwnd and inflight summed over the flows open at each
    sample time of ``times`` (zero when none is), RTT averaged, no state."""
    if not groups or "group" not in flows.columns:
        return flows
    is_wl = pl.col("group").is_in(list(groups))
    keep = flows.filter(~is_wl)
    wl = flows.filter(is_wl)
    if len(wl) == 0:
        return keep
    next_id = int(flows["flow"].max()) + 1  # type: ignore[arg-type]
    sums = [c for c in ("goodput_bps", "cwnd_pkts", "inflight_pkts") if c in flows.columns]
    grid = pl.DataFrame({"time_s": times.unique().sort().cast(pl.Float64)})
    parts = []
    for k, label in enumerate(groups):
        g = wl.filter(pl.col("group") == label)
        if len(g) == 0:
            continue
        agg = g.group_by("time_s").agg(
            *(pl.col(c).cast(pl.Float64).sum() for c in sums),
            pl.col("rtt_ms").cast(pl.Float64).fill_nan(None).mean(),
            pl.len().alias("open_flows"),
        )
        full = grid.join(agg, on="time_s", how="left").with_columns(
            *(pl.col(c).fill_null(0.0) for c in sums),
            pl.lit(next_id + k, dtype=flows["flow"].dtype).alias("flow"),
            pl.lit(g["cc"][0] if "cc" in g.columns else None, dtype=pl.String).alias("cc"),
            pl.lit(f"{label} ({g['flow'].n_unique()} flows, summed)", dtype=pl.String).alias("group"),
            pl.lit(None, dtype=pl.String).alias("state"),
            *(pl.lit(g[c][0], dtype=flows[c].dtype).alias(c) for c in ("kind", "direction") if c in flows.columns),
        )
        parts.append(full)
    cols = ["time_s", "flow", "cc", "group", "state", "kind", "direction", "rtt_ms", *sums]
    keep = keep.select([c for c in cols if c in keep.columns]).with_columns(
        *(pl.col(c).cast(pl.Float64) for c in ("rtt_ms", *sums))
    )
    return pl.concat([keep, *(p.select([c for c in cols if c in keep.columns]) for p in parts)], how="vertical_relaxed")


def plot_fct(ax, completions: pl.DataFrame, info: TrialInfo,  # type: ignore[no-untyped-def]
             group_color: Optional[dict[str, Any]] = None) -> None:
    """Completion time against size, log axes, each group in ``group_color`` (its flows' colour
    in the time panels; tab10 otherwise); unfinished flows as their age at the end of the trial
    (hollow); the ideal of the empty path dashed (dotted for the reverse path's, when it differs)."""
    from matplotlib import colormaps

    cmap = colormaps["tab10"]
    labels = completions["group"].unique(maintain_order=True).to_list()
    for k, label in enumerate(labels):
        color = (group_color or {}).get(str(label), cmap(k % 10))
        g = completions.filter(pl.col("group") == label)
        done = g.filter(pl.col("fct_ms").is_not_nan())
        ax.scatter(done["size_bytes"], done["fct_ms"], s=6, alpha=0.5, color=color, lw=0,
                   label=f"{label}: {len(done)} completed")
        left = g.filter(pl.col("fct_ms").is_nan())
        if len(left):
            age = (info.duration_s - left["start_s"]) * 1e3
            ax.scatter(left["size_bytes"], age, s=14, facecolors="none", edgecolors=color, lw=0.8,
                       label=f"{label}: {len(left)} unfinished (age at the end)")
    reverse = {str(x) for x in info.reverse_groups}
    paths = [("forward", "ideal (empty path)", "--"), ("reverse", "ideal, reverse path (empty)", ":")]
    for direction, text, ls in paths:
        mine = completions.filter(pl.col("group").is_in(list(reverse)) == (direction == "reverse"))
        if len(mine):
            ideal = mine.sort("size_bytes")
            ax.plot(ideal["size_bytes"], ideal["ideal_fct_ms"], color="0.3", lw=1, ls=ls,
                    label=text if reverse else "ideal (empty path)")
    style_fct_axes(ax)


def style_fct_axes(ax) -> None:  # type: ignore[no-untyped-def]
    """Completion time against size: both axes logarithmic, a grid at every decade's ticks."""
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("flow size (bytes)")
    ax.set_ylabel("completion time (ms)")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(loc="upper left", fontsize=8)


@literal_text
def plot_trial(
    flows: pl.DataFrame,
    router: pl.DataFrame,
    info: TrialInfo,
    title: Optional[str] = None,
    queue_limit_bytes: Optional[float] = None,
    reverse_queue_limit_bytes: Optional[float] = None,
    completions: Optional[pl.DataFrame] = None,
    phenomena: Optional[dict[str, Any]] = None,
) -> Figure:
    """The stacked plot of one trial; returns a matplotlib Figure (not shown, not saved).

    ``phenomena`` (``summary.json``'s section) shades what was detected: starvation and slow
    convergence on the goodput panel, synchronised PROBE_RTT on the RTT panel, a standing queue
    and start-up overshoot on the queue panel; a share oscillation is named with its period.

    With traffic in both directions (``info.bidirectional``) reverse flows are labelled so, the
    goodput totals and payload capacities are per direction (reverse dotted), and the queue
    and loss panels add the reverse bottleneck's (purple) when the trial has one. A workload's
    flows are drawn summed, one line per group, and ``completions`` (``fct.parquet``) adds
    completion time against size."""
    # a workload's flows become one summed pseudo-flow per group, numbered after the last flow
    max_listed = int(flows["flow"].max()) if len(flows) else 0  # type: ignore[arg-type]
    flows = aggregate_workloads(flows, info.workload_groups, router["time_s"])
    width = BIN_S
    if len(flows) > 1:
        times = flows["time_s"].unique().sort()
        if len(times) > 1:
            width = max(BIN_S, float(times[1] - times[0]))
    bf = binned_flows(flows, width)
    br = binned_router(router, width)
    ids = sorted(flows["flow"].unique().to_list())
    colors = flow_colors(len(ids))
    meta = (
        flows.group_by("flow")
        .agg(*(pl.col(c).first() for c in ("cc", "group") if c in flows.columns))
        .sort("flow")
    )
    labels = {}
    both = info.bidirectional
    reverse_ids = set(in_direction(flows, "reverse")["flow"].unique().to_list()) if both else set()
    for r in meta.iter_rows(named=True):
        name = r.get("group") or r.get("cc") or ""
        labels[r["flow"]] = (f"{r['flow']}: {name}" if name else f"flow {r['flow']}") + (
            " (reverse)" if r["flow"] in reverse_ids else "")
    brr = binned_router(reverse_router(router), width) if both and info.reverse_capacity_bps else None

    bbr = _has_bbr_model(flows)
    spans = state_spans(flows)
    has_fct = completions is not None and len(completions) > 0
    ratios = [1.3, 1, 1, 1, 0.8] + ([0.9] if bbr else []) + [0.25 + 0.08 * len(ids)] + ([2.2] if has_fct else [])
    fig = Figure(figsize=(11, 13 + (2.2 if bbr else 0) + 0.2 * len(ids) + (4.5 if has_fct else 0)),
                 layout="constrained")
    all_axes = fig.subplots(len(ratios), 1, height_ratios=ratios)
    axes = all_axes[:-1] if has_fct else all_axes  # the time axes, sharing x
    for ax in axes[1:]:
        ax.sharex(axes[0])
    for ax in axes[:-1]:
        ax.tick_params(labelbottom=False)
    ax_tp, ax_rtt, ax_cwnd, ax_q, ax_loss = axes[:5]
    ax_bbr = axes[5] if bbr else None
    ax_state = axes[-1]
    if has_fct:
        assert completions is not None
        # each group in its flows' colour: a workload's summed line, else its first flow's
        group_color: dict[str, Any] = {}
        for i, r in enumerate(meta.iter_rows(named=True)):
            label = str(r.get("group") or "")
            group_color.setdefault(label.rsplit(" (", 1)[0] if r["flow"] > max_listed else label, colors[i])
        plot_fct(all_axes[-1], completions, info, group_color)
    mss_over_mtu = info.mss / info.mtu

    # Throughput
    for i, f in enumerate(ids):
        d = bf.filter(pl.col("flow") == f)
        ax_tp.plot(d["t"], d["goodput_bps"] / 1e6, color=colors[i], lw=1.4, label=labels[f])
    if len(br):
        ax_tp.plot(br["t"], br["capacity_bps"] * mss_over_mtu / 1e6, color="0.3", lw=1, ls="--",
                   label="payload capacity")
    if brr is not None and len(brr):
        ax_tp.plot(brr["t"], brr["capacity_bps"] * mss_over_mtu / 1e6, color="0.3", lw=1, ls=":",
                   label="reverse payload capacity")
    for which, ls in (("forward", "-"), ("reverse", ":")):
        members = [f for f in ids if (f in reverse_ids) == (which == "reverse")]
        if len(members) > 1:
            total = bf.filter(pl.col("flow").is_in(members)).group_by("t").agg(pl.col("goodput_bps").sum()).sort("t")
            ax_tp.plot(total["t"], total["goodput_bps"] / 1e6, color="black", lw=1, ls=ls, alpha=0.6,
                       label=f"total {which}" if both else "total")
    ax_tp.set_ylabel("goodput (Mbit/s)")
    ax_tp.set_ylim(bottom=0)

    # RTT (ping probes' too), and udp streams' one-way delay dashed
    has_owd = False
    for i, f in enumerate(ids):
        d = bf.filter(pl.col("flow") == f)
        ax_rtt.plot(d["t"], d["rtt_ms"], color=colors[i], lw=1.2)
        if "owd_ms" in d.columns and d["owd_ms"].drop_nulls().len():
            ax_rtt.plot(d["t"], d["owd_ms"], color=colors[i], lw=1.2, ls="--")
            has_owd = True
    if math.isfinite(info.rtprop_ms):  # not known for a capture without its sender
        ax_rtt.axhline(info.rtprop_ms, color="0.3", lw=1, ls="--", label=f"RTprop {info.rtprop_ms:g} ms")
    ax_rtt.set_ylabel("RTT, one-way delay (ms)" if has_owd else "RTT (ms)")
    ax_rtt.set_ylim(bottom=0)
    if ax_rtt.get_legend_handles_labels()[0]:
        ax_rtt.legend(loc="upper right", fontsize=8)

    # cwnd and inflight (TCP flows only)
    tcp_ids = set(flows.filter(pl.col("kind") == "tcp")["flow"].unique()) if "kind" in flows.columns else set(ids)
    for i, f in enumerate(ids):
        if f not in tcp_ids:
            continue
        d = bf.filter(pl.col("flow") == f)
        ax_cwnd.plot(d["t"], d["cwnd_pkts"], color=colors[i], lw=1.3)
        ax_cwnd.plot(d["t"], d["inflight_pkts"], color=colors[i], lw=0.9, ls=":")
    bdp_pkts = info.bdp_bytes / info.mtu
    if bdp_pkts > 0:  # unknown (0) for captures analysed without their trial
        ax_cwnd.axhline(bdp_pkts, color="0.3", lw=1, ls="--")
    from matplotlib.lines import Line2D

    ax_cwnd.legend(
        handles=[
            Line2D([], [], color="0.2", lw=1.3, label="cwnd"),
            Line2D([], [], color="0.2", lw=0.9, ls=":", label="inflight"),
            *([Line2D([], [], color="0.3", lw=1, ls="--", label=f"BDP {bdp_pkts:.0f} pkts")] if bdp_pkts > 0 else []),
        ],
        loc="upper right",
        fontsize=8,
        ncol=3,
    )
    ax_cwnd.set_ylabel("packets")
    ax_cwnd.set_ylim(bottom=0)

    # Queue
    if len(br):
        q_kb_mean = br["queue_mean"] / 1e3
        ax_q.fill_between(br["t"], 0, br["queue_max"] / 1e3, color="tab:gray", alpha=0.25, lw=0, label="max")
        ax_q.plot(br["t"], q_kb_mean, color="black", lw=1.2, label="mean")
    if queue_limit_bytes:
        ax_q.axhline(queue_limit_bytes / 1e3, color="tab:red", lw=1, ls="--",
                     label=f"limit {queue_limit_bytes / max(info.bdp_bytes, 1e-9):.3g} BDP")
    if brr is not None and len(brr):
        ax_q.plot(brr["t"], brr["queue_mean"] / 1e3, color="tab:purple", lw=1.2, label="reverse mean")
        if reverse_queue_limit_bytes:
            ax_q.axhline(reverse_queue_limit_bytes / 1e3, color="tab:purple", lw=1, ls="--",
                         label=f"reverse limit {reverse_queue_limit_bytes / 1e3:.3g} KB")
    ax_q.set_ylabel("queue (KB)")
    ax_q.set_ylim(bottom=0)
    ax_q.legend(loc="best" if brr is not None else "lower right", fontsize=8, ncol=3)
    if info.bdp_bytes > 0:
        sec = ax_q.secondary_yaxis(
            "right", functions=(lambda kb: kb * 1e3 / info.bdp_bytes, lambda bdp: bdp * info.bdp_bytes / 1e3)
        )
        sec.set_ylabel("queue (BDP)")

    # Loss
    if len(br):
        ax_loss.plot(br["t"], br["loss_pct"], color="tab:red", lw=1.2, drawstyle="steps-pre",
                     label="forward" if brr is not None else None)
    if brr is not None and len(brr):
        ax_loss.plot(brr["t"], brr["loss_pct"], color="tab:purple", lw=1.2, drawstyle="steps-pre", label="reverse")
        ax_loss.legend(loc="upper right", fontsize=8, ncol=2)
    ax_loss.set_ylabel("loss at router (%)")
    ax_loss.set_ylim(bottom=0)

    # BBR's model: bottleneck-bandwidth estimate (solid) and RTprop estimate (dotted, right axis)
    if ax_bbr is not None:
        est = (
            flows.with_columns(_bin_expr(width))
            .group_by(["flow", "t"])
            .agg(
                pl.col("cc.btlbw_bps").cast(pl.Float64).fill_nan(None).mean().alias("btlbw"),
                pl.col("cc.rtprop_ms").cast(pl.Float64).fill_nan(None).mean().alias("rtprop")
                if "cc.rtprop_ms" in flows.columns else pl.lit(None).alias("rtprop"),
            )
            .sort(["flow", "t"])
        )
        ax_rt = ax_bbr.twinx()
        for i, f in enumerate(ids):
            d = est.filter(pl.col("flow") == f)
            if d["btlbw"].drop_nulls().len() == 0:
                continue
            ax_bbr.plot(d["t"], d["btlbw"] / 1e6, color=colors[i], lw=1.3)
            ax_rt.plot(d["t"], d["rtprop"], color=colors[i], lw=1, ls=":")
        ax_bbr.set_ylabel("BtlBw est. (Mbit/s)")
        ax_bbr.set_ylim(bottom=0)
        ax_rt.set_ylabel("RTprop est. (ms)")
        ax_rt.set_ylim(bottom=0)
        from matplotlib.lines import Line2D as _L

        ax_bbr.legend(handles=[_L([], [], color="0.2", lw=1.3, label="BtlBw estimate"),
                               _L([], [], color="0.2", lw=1, ls=":", label="RTprop estimate")],
                      loc="lower right", fontsize=8, ncol=2)

    # States as bands, one row per flow, at full sample resolution (PROBE_RTT lasts ~200 ms);
    # one set of bars per flow and state (a call per band costs a second on a long trial)
    seen: dict[str, None] = {}
    for row, f in enumerate(ids):
        bands: dict[str, list[tuple[float, float]]] = {}
        for state, a, b in spans.get(f, []):
            if state is None:  # a backend that cannot see the state (captures)
                continue
            bands.setdefault(state, []).append((a, b - a))
        for state, xranges in bands.items():
            seen.setdefault(state, None)
            ax_state.broken_barh(xranges, (row - 0.4, 0.8), color=STATE_COLORS.get(state, "0.6"), lw=0)
    if not seen:  # only summed workload groups: no flow of its own to show
        ax_state.text(0.5, 0.5, "a workload's flows are summed: no per-flow state", transform=ax_state.transAxes,
                      ha="center", va="center", fontsize=8, color="0.4")
    ax_state.set_yticks(range(len(ids)), [str(f) for f in ids], fontsize=7)
    ax_state.set_ylim(len(ids) - 0.5, -0.5)
    ax_state.set_ylabel("state\n(flow)")
    from matplotlib.patches import Patch

    ax_state.legend(handles=[Patch(color=STATE_COLORS.get(s_, "0.6"), label=s_) for s_ in seen],
                    loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7, frameon=False)
    ax_state.set_xlabel("time (s)")
    ax_state.set_xlim(0, info.duration_s)

    t0, t1 = info.steady_s
    if (t0, t1) != (0.0, info.duration_s):
        for ax in axes:
            ax.axvspan(t0, t1, color="tab:green", alpha=0.05, lw=0)
    for ax in axes[:-1]:
        ax.grid(True, alpha=0.3)

    if phenomena:
        shade_phenomena(phenomena, ax_tp, ax_rtt, ax_q)
    ncol = min(len(ids) + 2, 6)
    fig.legend(*ax_tp.get_legend_handles_labels(), loc="outside lower center", ncol=ncol, fontsize=9, frameon=False)
    import textwrap

    heading = "\n".join(textwrap.wrap(title or info.name, 120))  # a long description keeps to the figure
    fig.suptitle(f"{heading}\n(seed {info.seed}; {width:g} s averages"
                 + (f"; shaded: steady window {t0:g}-{t1:g} s)" if (t0, t1) != (0.0, info.duration_s) else ")"),
                 fontsize=11)
    return fig


#: How each detected phenomenon is shaded: (panel, colour, opacity, legend label).
PHENOMENON_SHADES = {
    "starvation": ("tp", "tab:red", 0.12, "starvation"),
    "slow_convergence": ("tp", "tab:purple", 0.08, "slow convergence"),
    "probe_rtt_sync": ("rtt", "tab:blue", 0.25, "synchronised PROBE_RTT"),
    "standing_queue": ("q", "tab:orange", 0.12, "standing queue"),
    "startup_overshoot": ("q", "tab:red", 0.15, "start-up overshoot"),
}


def shade_phenomena(phenomena: dict[str, Any], ax_tp: Any, ax_rtt: Any, ax_q: Any) -> None:
    """Shade each detected phenomenon's spans on its panel (:data:`PHENOMENON_SHADES`), and name a
    share oscillation with its period on the goodput panel."""
    panels = {"tp": ax_tp, "rtt": ax_rtt, "q": ax_q}
    for name, (panel, color, alpha, label) in PHENOMENON_SHADES.items():
        section = phenomena.get(name) or {}
        if not section.get("detected"):
            continue
        ax = panels[panel]
        for i, e in enumerate(section.get("events", [])):
            ax.axvspan(e["start_s"], e["end_s"], color=color, alpha=alpha, lw=0, label=label if i == 0 else None)
    for ax in (ax_rtt, ax_q):  # their legends again, with the shades
        if ax.get_legend_handles_labels()[0]:
            old = ax.get_legend()
            ax.legend(loc=getattr(old, "_loc", "upper right") if old is not None else "upper right", fontsize=8,
                      ncol=3 if ax is ax_q else 1)
    osc = phenomena.get("share_oscillation") or {}
    if osc.get("detected"):
        text = "; ".join(f"{e.get('group', e.get('flow'))}'s share cycles every {e['period_s']:g} s"
                         for e in osc.get("events", []))
        ax_tp.text(0.01, 0.97, text, transform=ax_tp.transAxes, ha="left", va="top", fontsize=8, color="0.2")


#: What each figure format records as its creator (:data:`destination.GENERATOR`, the mark that
#: lets a later command overwrite the file), with no timestamp or other varying metadata.
_FIGURE_METADATA = {
    "png": {"Software": GENERATOR},
    "svg": {"Creator": GENERATOR, "Date": None},
    "pdf": {"Creator": GENERATOR, "Producer": None, "CreationDate": None},
}


def save_figure(fig: Figure, path: str, dpi: int = 110) -> None:
    """Write the figure as PNG, SVG or PDF (by the path's suffix) without pyplot, into place in
    one rename so that an interrupted write leaves no partial file."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fmt = Path(path).suffix.lower().lstrip(".") or "png"
    if fmt not in _FIGURE_METADATA:
        raise ValueError(f"{path}: figures are written as {', '.join(FIGURE_SUFFIXES)}")
    FigureCanvasAgg(fig)
    write_file_atomically(Path(path), lambda tmp: fig.savefig(tmp, dpi=dpi, format=fmt, metadata=_FIGURE_METADATA[fmt]))
