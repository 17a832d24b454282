"""Summary plots of a sweep: a metric against one varied field, a line per value of another, a
panel per value of the rest, each point the mean over the seeds.

The plots the thesis publishes are the defaults (:func:`default_plots`): loss at the bottleneck
vs queue size, utilization vs queue size, and each algorithm's share of the link vs queue size
with the 25th-75th percentile band of its per-0.5 s shares (pooled over the seeds), plus RTT,
queue occupancy and Jain's index. Axis values are read in the units they were written in (queue
sizes in BDP on a log scale, capacities in Mbit/s, loss in %, times in ms).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np
import polars as pl
from matplotlib.figure import Figure

from .. import units
from ..plot import literal_text, save_figure
from ..results import DamagedFile
from .store import read_table

#: Short names for ``--y``; anything else must be a trials.parquet column.
ALIASES = {
    "loss": "total.loss_pct",
    "utilization": "total.utilization",
    "goodput": "total.goodput_bps",
    "retrans": "total.retrans_pct",
    "jain": "total.jain",
    "rtt": "rtt.p50_ms",
    "rtt_p95": "rtt.p95_ms",
    "queue_occupancy": "queue.mean_bdp",
    "cov": "total.tput_cov",
}

#: How a metric is drawn: y-axis label, scale factor, title phrase.
METRICS = {
    "total.loss_pct": ("loss at the bottleneck (%)", 1.0, "loss at the bottleneck"),
    "total.utilization": ("utilization (% of capacity)", 100.0, "link utilization"),
    "total.goodput_bps": ("goodput (Mbit/s)", 1e-6, "total goodput"),
    "total.retrans_pct": ("retransmitted segments (%)", 1.0, "retransmission rate"),
    "total.jain": ("Jain's fairness index", 1.0, "Jain's fairness index over flows"),
    "total.tput_cov": ("throughput CoV over 0.5 s", 1.0, "throughput variation"),
    "rtt.p50_ms": ("RTT median (ms)", 1.0, "median RTT"),
    "rtt.p95_ms": ("RTT 95th percentile (ms)", 1.0, "95th-percentile RTT"),
    "rtt.mean_ms": ("RTT mean (ms)", 1.0, "mean RTT"),
    "queue.mean_bdp": ("queue occupancy, mean (BDP)", 1.0, "queue occupancy"),
    "queue.p95_bdp": ("queue occupancy, 95th pct (BDP)", 1.0, "queue occupancy (95th percentile)"),
}

#: A group's metric (``groups.<label>.<key>``) is drawn as the total metric it refines.
GROUP_METRICS = {
    "goodput_bps": "total.goodput_bps",
    "retrans_pct": "total.retrans_pct",
    "jain": "total.jain",
    "tput_cov": "total.tput_cov",
    "rtt_p50_ms": "rtt.p50_ms",
    "rtt_p95_ms": "rtt.p95_ms",
    "rtt_mean_ms": "rtt.mean_ms",
}


#: A workload group's completion-time metrics (``fct.<label>.<key>``, and per size bucket
#: ``fct.<label>.buckets.<bucket>.<key>``): y-axis label, title phrase.
FCT_METRICS = {
    "fct_p50_ms": ("FCT median (ms)", "median FCT"),
    "fct_p95_ms": ("FCT 95th percentile (ms)", "p95 FCT"),
    "fct_p99_ms": ("FCT 99th percentile (ms)", "p99 FCT"),
    "fct_mean_ms": ("FCT mean (ms)", "mean FCT"),
    "slowdown_mean": ("mean slowdown (FCT / ideal)", "mean slowdown"),
    "slowdown_p99": ("99th-percentile slowdown", "p99 slowdown"),
    "unfinished": ("flows unfinished at the end", "unfinished flows"),
}


def metric_style(col: str) -> tuple[tuple[str, float, str], str]:
    """((y label, scale factor, title phrase), the total metric whose axis rules apply)."""
    if col in METRICS:
        return METRICS[col], col
    m = re.fullmatch(r"fct\.(.+?)(?:\.buckets\.([A-Za-z0-9_]+))?\.([a-z0-9_]+)", col)
    if m and m.group(3) in FCT_METRICS:
        label, phrase = FCT_METRICS[m.group(3)]
        where = m.group(1) + (f" {m.group(2)}" if m.group(2) else "")
        return (f"{where}: {label}", 1.0, f"{where}: {phrase}"), col
    m = re.fullmatch(r"groups\.(.+)\.([a-z0-9_]+)", col)
    base = GROUP_METRICS.get(m.group(2)) if m else None
    if m and base:
        label, factor, phrase = METRICS[base]
        return (f"{m.group(1)}: {label}", factor, f"{m.group(1)}'s {phrase.replace('total ', '')}"), base
    return (col, 1.0, col), col


#: Algorithms keep one colour in every plot (each algorithm of the core has one: a sweep over
#: algorithms one of which had none fell back to the default cycle for all of them).
ALGO_COLORS = {
    "bbr": "tab:blue", "bbr1": "tab:blue", "cubic": "tab:orange", "reno": "tab:green", "bbr3": "tab:purple",
    "bbr-shallow": "tab:cyan", "bbr-adaptive": "tab:olive", "bbr-stable-rtprop": "tab:pink",
    "vegas": "tab:brown", "htcp": "tab:red", "dctcp": "tab:gray",
}


class PlotError(ValueError):
    """A plot that cannot be drawn from this sweep; the message says what can."""


@dataclass(frozen=True)
class Scale:
    """How one axis column reads as numbers."""

    values: dict[Any, float]  # cell value -> number
    label: str
    log: bool


def _parse_all(cells: Sequence[Any], parse: Any) -> Optional[dict[Any, float]]:
    out = {}
    for c in cells:
        try:
            out[c] = float(parse(c))
        except (units.UnitError, ValueError, TypeError):
            return None
    return out


def column_scale(column: str, path: str, cells: Sequence[Any]) -> Optional[Scale]:
    """Numbers for an axis column's values, by what its trial path holds; None if categorical."""
    cells = [c for c in dict.fromkeys(cells) if c is not None]
    last = path.split(".")[-1]
    if not cells:
        return None
    if last == "queue":
        kinds = set()
        vals = {}
        for c in cells:
            try:
                kind, amount = units.parse_queue(c)
            except units.UnitError:
                return None
            kinds.add(kind)
            vals[c] = amount
        if len(kinds) != 1:
            return None
        kind = kinds.pop()
        if kind == "bdp":
            return Scale(vals, f"{column} (BDP)", True)
        if kind == "packets":
            return Scale(vals, f"{column} (packets)", True)
        return Scale({k: v / 1e3 for k, v in vals.items()}, f"{column} (KB)", True)
    if last in ("capacity", "access_rate", "rate") or re.search(r"rate$", last):
        v = _parse_all(cells, units.parse_rate)
        return Scale({k: x / 1e6 for k, x in v.items()}, f"{column} (Mbit/s)", False) if v else None
    if last in ("rtt", "delay", "delay_fwd", "delay_rev", "start", "stagger", "extra_delay", "duration", "timeout"):
        v = _parse_all(cells, units.parse_time)
        if v:
            big = max(v.values()) >= 10e9
            scale, unit = (1e-9, "s") if big else (1e-6, "ms")
            return Scale({k: x * scale for k, x in v.items()}, f"{column} ({unit})", False)
        return None
    if last in ("loss", "p", "r", "loss_good", "loss_bad"):
        v = _parse_all(cells, units.parse_fraction)
        if v:
            pos = [x for x in v.values() if x > 0]
            log = bool(pos) and len(pos) == len(v) and max(pos) / min(pos) >= 100
            return Scale({k: x * 100 for k, x in v.items()}, f"{column} (%)", log)
        return None
    if all(isinstance(c, (int, float)) and not isinstance(c, bool) for c in cells):
        vals = {c: float(c) for c in cells}
        pos = [x for x in vals.values() if x > 0]
        log = len(pos) == len(vals) and len(vals) > 2 and max(pos) / min(pos) >= 50
        return Scale(vals, column, log)
    return None


@dataclass
class SweepData:
    """A sweep directory's finished trials and what its columns mean."""

    root: Path
    name: str
    table: pl.DataFrame  # rows with status "done"
    all_rows: int
    columns: dict[str, str]  # axis column -> trial path
    steady: Optional[list[Any]]

    @classmethod
    def load(cls, root: Path) -> "SweepData":
        root = Path(root)
        if not (root / "trials.parquet").is_file():
            raise PlotError(f"{root} has no trials.parquet yet; run the sweep first")
        try:
            df, meta = read_table(root)
        except DamagedFile as e:
            raise PlotError(str(e)) from None
        done = df.filter(pl.col("status") == "done")
        if len(done) == 0:
            raise PlotError(f"{root}: no finished trials to plot ({len(df)} trial(s), none done)")
        return cls(root, meta.get("name", root.name), done, len(df), dict(meta.get("columns", {})),
                   meta.get("sweep", {}).get("steady"))

    @property
    def axes(self) -> list[str]:
        return list(self.columns)

    def varied(self) -> list[str]:
        """Axis columns that take more than one value among the finished trials."""
        return [c for c in self.axes if self.table[c].n_unique() > 1]

    def scale(self, column: str) -> Optional[Scale]:
        return column_scale(column, self.columns.get(column, column), self.table[column].to_list())

    def groups(self) -> list[str]:
        """Flow-group labels with a share column, in first-seen order."""
        out = []
        for c in self.table.columns:
            m = re.fullmatch(r"groups\.(.+)\.share", c)
            if m and self.table[c].drop_nulls().len() > 0:
                out.append(m.group(1))
        return out

    def resolve(self, y: str) -> str:
        y = ALIASES.get(y, y)
        if y not in self.table.columns:
            metrics = [c for c in self.table.columns if "." in c and not c.startswith(("flows.", "trial."))]
            raise PlotError(
                f"--y {y!r}: no such column in trials.parquet; try one of: "
                + ", ".join([*ALIASES, "share"]) + ", or a column such as " + ", ".join(metrics[:12])
            )
        if self.table[y].dtype not in (pl.Float64, pl.Int64, pl.Float32, pl.Int32):
            raise PlotError(f"--y {y!r} is not a number per trial ({self.table[y].dtype})")
        return y


def _check_axis(data: SweepData, name: Optional[str], flag: str) -> None:
    if name is not None and name not in data.table.columns:
        raise PlotError(f"{flag} {name!r}: not a column; the sweep's axes are {', '.join(data.axes) or 'none'}")


def choose_axes(
    data: SweepData, x: Optional[str] = None, by: Optional[str] = None, facet: Optional[str] = None
) -> tuple[str, Optional[str], list[str]]:
    """x, by and the facet columns: queue on x when varied, a line per the next axis, panels for the rest."""
    for name, flag in ((x, "--x"), (by, "--by"), (facet, "--facet")):
        _check_axis(data, name, flag)
    varied = data.varied()
    if x is None:
        queue = [c for c in varied if data.columns.get(c, "").endswith("queue")]
        numeric = [c for c in varied if data.scale(c) is not None]
        pick = queue or numeric or varied or data.axes
        if not pick:
            raise PlotError("the sweep varies nothing; give --x (and --y) explicitly")
        x = pick[0]
    rest = [c for c in varied if c not in (x, by, facet)]
    if by is None and rest:
        by = rest.pop(0)
    facets = [facet] if facet is not None else rest
    return x, by, facets


def _sorted_values(data: SweepData, col: str) -> list[Any]:
    vals = data.table[col].unique(maintain_order=True).to_list()
    sc = data.scale(col)
    if sc is not None:
        return sorted(vals, key=lambda v: sc.values.get(v, math.inf))
    return vals


def _facet_keys(data: SweepData, facets: list[str]) -> list[tuple[Any, ...]]:
    if not facets:
        return [()]
    lists = [_sorted_values(data, f) for f in facets]
    present = set(data.table.select(facets).unique().iter_rows())
    import itertools

    return [k for k in itertools.product(*lists) if k in present]


def _facet_title(facets: list[str], key: tuple[Any, ...]) -> str:
    return ", ".join(f"{f} = {v}" for f, v in zip(facets, key))


def _grid(n: int, share_y: bool = True) -> tuple[Figure, list[Any]]:
    ncols = min(n, 3)
    nrows = math.ceil(n / ncols)
    fig = Figure(figsize=(max(4.6 * ncols + 0.6, 7.0), 3.5 * nrows + 1.6), layout="constrained")
    axs = fig.subplots(nrows, ncols, sharey=share_y, squeeze=False).ravel().tolist()
    for ax in axs[n:]:
        ax.set_visible(False)
    return fig, axs[:n]


def _x_numbers(data: SweepData, x: str) -> tuple[Optional[Scale], dict[Any, float]]:
    sc = data.scale(x)
    if sc is not None:
        return sc, sc.values
    cats = _sorted_values(data, x)
    return None, {c: float(i) for i, c in enumerate(cats)}


def _style_x(ax: Any, sc: Optional[Scale], xmap: dict[Any, float], xname: str) -> None:
    from matplotlib.ticker import FixedLocator, NullFormatter

    xs = sorted(set(xmap.values()))
    if sc is None:
        inv = {v: k for k, v in xmap.items()}
        ax.set_xticks(xs, [str(inv[v]) for v in xs], rotation=30 if len(xs) > 4 else 0, ha="right" if len(xs) > 4 else "center")
        ax.set_xlabel(xname)
        return
    if sc.log:
        ax.set_xscale("log")
        # a tick at every value; labels where they do not crowd (at least x1.4 apart), powers
        # of two first (0.25, 0.5, 1, 2, 4, 8 BDP), then the others
        def pow2(v: float) -> bool:
            return v > 0 and abs(math.log2(v) - round(math.log2(v))) < 1e-9

        labelled: list[float] = []
        for v in sorted(xs, key=lambda v: (not pow2(v), v)):
            if v > 0 and all(max(v, u) / min(v, u) >= 1.4 for u in labelled):
                labelled.append(v)
        labelled.sort()
        ax.xaxis.set_major_locator(FixedLocator(labelled))
        ax.xaxis.set_minor_locator(FixedLocator([v for v in xs if v not in labelled]))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xticklabels([f"{v:g}" for v in labelled])
        pad = 1.15
        ax.set_xlim(min(xs) / pad, max(xs) * pad)
    ax.set_xlabel(sc.label)


def _colors_for(data: SweepData, by: Optional[str], values: list[Any]) -> dict[Any, Any]:
    from matplotlib import colormaps

    if by is None:
        return {v: "black" for v in values}
    if all(str(v) in ALGO_COLORS for v in values):
        return {v: ALGO_COLORS[str(v)] for v in values}
    if data.scale(by) is not None and len(values) > 1:
        cmap = colormaps["viridis"]
        return {v: cmap(0.1 + 0.75 * i / (len(values) - 1)) for i, v in enumerate(values)}
    # Up to 10 lines take tab10; more take tab20, so no two of up to 20 lines share a colour.
    n = 10 if len(values) <= 10 else 20
    tab = colormaps[f"tab{n}"]
    return {v: tab(i % n) for i, v in enumerate(values)}


def _subtitle(data: SweepData) -> str:
    seeds = data.table["seed"].n_unique()
    steady = f"; steady window {data.steady[0]}-{data.steady[1]}" if data.steady else ""
    missing = data.all_rows - len(data.table)
    return (f"mean over {seeds} seed(s), bars span min-max{steady}"
            + (f"; {missing} trial(s) not finished" if missing else ""))


@literal_text
def plot_metric(
    data: SweepData,
    y: str,
    dest: Optional[Path] = None,
    x: Optional[str] = None,
    by: Optional[str] = None,
    facet: Optional[str] = None,
) -> Any:
    """One summary plot of metric ``y``; written to ``dest`` (returns the path) or returned as a Figure."""
    if y == "share":
        return plot_shares(data, dest, x=x, by=by, facet=facet)
    col = data.resolve(y)
    x, by, facets = choose_axes(data, x, by, facet)
    (ylabel, factor, phrase), kind = metric_style(col)
    sc, xmap = _x_numbers(data, x)
    keys = _facet_keys(data, facets)
    fig, axs = _grid(len(keys))
    by_vals = _sorted_values(data, by) if by else [None]
    colors = _colors_for(data, by, by_vals)
    agg = (
        data.table.filter(pl.col(col).is_not_null())
        .group_by([x, *([by] if by else []), *facets])
        .agg(
            pl.col(col).mean().alias("mean"),
            pl.col(col).min().alias("lo"),
            pl.col(col).max().alias("hi"),
            pl.len().alias("n"),
        )
    )
    for ax, key in zip(axs, keys):
        sub = agg
        for f, v in zip(facets, key):
            sub = sub.filter(pl.col(f) == v)
        for bv in by_vals:
            line = sub.filter(pl.col(by) == bv) if by else sub
            if len(line) == 0:
                continue
            pts = sorted((xmap[r[x]], r["mean"] * factor, r["lo"] * factor, r["hi"] * factor)
                         for r in line.iter_rows(named=True))
            xs, ms, lo, hi = (np.array(v) for v in zip(*pts))
            # the mean of equal values can land a rounding error outside [min, max]
            ms = np.clip(ms, lo, hi)
            label = None if by is None else f"{bv}"
            ax.errorbar(xs, ms, yerr=[np.maximum(ms - lo, 0.0), np.maximum(hi - ms, 0.0)], color=colors[bv], marker="o", ms=4, lw=1.6,
                        capsize=2.5, elinewidth=0.9, label=label)
        if col == "total.utilization" and data.columns.get(x, "").split(".")[-1] in ("loss", "p"):
            xs_all = np.array(sorted(set(xmap.values())))
            ax.plot(xs_all, 100 - xs_all, color="0.4", ls="--", lw=1, label="best possible, 1 - p")
        _style_x(ax, sc, xmap, x)
        ax.set_title(_facet_title(facets, key), fontsize=10)
        ax.grid(True, alpha=0.3, which="both")
    for ax in axs:
        ax.set_ylabel(ylabel)
    if kind in ("total.loss_pct", "total.retrans_pct", "queue.mean_bdp", "queue.p95_bdp", "rtt.p50_ms",
                "rtt.p95_ms", "rtt.mean_ms", "total.goodput_bps"):
        axs[0].set_ylim(bottom=0)
    if col == "total.utilization" and len(agg):
        low = float(agg.select(pl.col("lo").min()).item()) * factor
        axs[0].set_ylim(min(90.0, 10 * math.floor(low / 10)), 101)
    if kind == "total.jain":
        axs[0].set_ylim(0, 1.02)
    _outer_labels(axs)
    _legend(fig, axs, by)
    fig.suptitle(f"{data.name}: {phrase} vs {x}\n{_subtitle(data)}", fontsize=11)
    return _finish(fig, dest)


@literal_text

def panels_over(data: SweepData, rows: pl.DataFrame, by: Optional[str],
                facets: list[str]) -> tuple[SweepData, list[str], list[tuple[Any, ...]]]:
    """The panels of a plot drawn over ``rows``, a subset of the sweep's finished trials: the
    sweep restricted to them, the columns that tell panels apart (the line column, and the
    facets that vary among the rows), and each panel's key."""
    sub_data = SweepData(data.root, data.name, rows, data.all_rows, data.columns, data.steady)
    panel_cols = [c for c in ([by] if by else []) + facets if rows[c].n_unique() > 1 or c == by]
    return sub_data, panel_cols, _facet_keys(sub_data, panel_cols)


def panel_rows(rows: pl.DataFrame, panel_cols: list[str], key: tuple[Any, ...]) -> pl.DataFrame:
    """The rows of one panel (:func:`panels_over`)."""
    for f, v in zip(panel_cols, key):
        rows = rows.filter(pl.col(f) == v)
    return rows


def plot_shares(
    data: SweepData,
    dest: Optional[Path] = None,
    x: Optional[str] = None,
    by: Optional[str] = None,
    facet: Optional[str] = None,
) -> Any:
    """Each flow group's share of the link vs ``x``: the mean over seeds, and the band from the
    25th to the 75th percentile of the per-0.5 s shares pooled over the seeds; a panel per value
    of ``by`` and the facet columns. Only trials with at least two groups are drawn."""
    groups = data.groups()
    if len(groups) < 2:
        raise PlotError("share plots need trials with two or more flow groups (e.g. bbr and cubic); "
                        f"this sweep has {', '.join(groups) or 'none'}")
    x, by, facets = choose_axes(data, x, by, facet)
    mixed = data.table.filter(
        pl.sum_horizontal([pl.col(f"groups.{g}.share").is_not_null().cast(pl.Int32) for g in groups]) >= 2
    )
    if len(mixed) == 0:
        raise PlotError("no finished trial has two or more flow groups to compare")
    sub_data, panel_cols, keys = panels_over(data, mixed, by, facets)
    sc, xmap = _x_numbers(sub_data, x)
    fig, axs = _grid(len(keys))
    colors = {g: ALGO_COLORS.get(g, f"C{i}") for i, g in enumerate(groups)}
    for ax, key in zip(axs, keys):
        sub = panel_rows(mixed, panel_cols, key)
        for g in groups:
            share, ivals = f"groups.{g}.share", f"groups.{g}.interval_shares"
            rows = sub.filter(pl.col(share).is_not_null())
            if len(rows) == 0:
                continue
            pts = []
            for xv, part in rows.group_by(x):
                xv = xv[0] if isinstance(xv, tuple) else xv
                pooled = np.array([s for lst in part[ivals].to_list() if lst is not None for s in lst if s is not None]) \
                    if ivals in part.columns else np.array([])
                q25, q75 = (np.percentile(pooled, [25, 75]) if len(pooled) else (np.nan, np.nan))
                pts.append((xmap[xv], float(part.select(pl.col(share).mean()).item()) * 100, q25 * 100, q75 * 100))
            pts.sort()
            xs, ms, lo, hi = (np.array(v) for v in zip(*pts))
            ax.fill_between(xs, lo, hi, color=colors[g], alpha=0.2, lw=0)
            ax.plot(xs, ms, color=colors[g], marker="o", ms=4, lw=1.8, label=f"{g} (mean)")
        ax.plot([], [], color="0.5", alpha=0.3, lw=6, label="25th-75th pct of 0.5 s shares")
        _style_x(ax, sc, xmap, x)
        ax.set_ylim(0, 100)
        ax.set_title(_facet_title(panel_cols, key), fontsize=10)
        ax.grid(True, alpha=0.3, which="both")
        ax.set_ylabel("share of the link (%)")
    _outer_labels(axs)
    _legend(fig, axs, None)
    seeds = mixed["seed"].n_unique()
    steady = f"; steady window {data.steady[0]}-{data.steady[1]}" if data.steady else ""
    fig.suptitle(f"{data.name}: share of the link per algorithm vs {x}\n"
                 f"line: mean over {seeds} seed(s); band: 25th-75th percentile of 0.5 s intervals{steady}",
                 fontsize=11)
    return _finish(fig, dest)


def _outer_labels(axs: list[Any]) -> None:
    """Axis labels on the outer panels only: x where no panel is below, y in the first column."""
    n = len(axs)
    ncols = min(n, 3)
    for i, ax in enumerate(axs):
        if i + ncols < n:
            ax.set_xlabel("")
        if i % ncols:
            ax.set_ylabel("")


def _legend(fig: Figure, axs: list[Any], title: Optional[str]) -> None:
    """One legend for the figure, below the panels, from every panel's lines."""
    seen: dict[str, Any] = {}
    for ax in axs:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(lab, h)
    if seen:
        fig.legend(list(seen.values()), list(seen), title=title, loc="outside lower center",
                   ncol=min(len(seen), 6), fontsize=9, title_fontsize=9, frameon=False)


def _finish(fig: Figure, dest: Optional[Path]) -> Any:
    if dest is None:
        return fig
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    save_figure(fig, str(dest))
    return dest


#: The default set: (file stem, y); share only when the sweep has two or more groups.
DEFAULT_PLOTS = (
    ("loss", "total.loss_pct"),
    ("utilization", "total.utilization"),
    ("share", "share"),
    ("rtt", "rtt.p50_ms"),
    ("queue_occupancy", "queue.mean_bdp"),
    ("retrans", "total.retrans_pct"),
    ("jain", "total.jain"),
)


def summary_plots(
    data: SweepData, dest_dir: Path, x: Optional[str] = None, by: Optional[str] = None, facet: Optional[str] = None
) -> list[tuple[str, Optional[Path], str]]:
    """Every summary plot into ``dest_dir`` as ``<metric>_vs_<x>.png``: (stem, path, "") for each
    drawn, (stem, None, why) for a share plot this sweep cannot have."""
    x_col, _, _ = choose_axes(data, x, by, facet)
    out: list[tuple[str, Optional[Path], str]] = []
    for stem, y in DEFAULT_PLOTS:
        if y != "share" and y not in data.table.columns:
            continue
        try:
            path = plot_metric(data, y, Path(dest_dir) / f"{stem}_vs_{x_col}.png", x=x, by=by, facet=facet)
        except PlotError as e:
            if y != "share":
                raise
            out.append((stem, None, str(e)))
            continue
        out.append((stem, path, ""))
    if any(c.startswith("judge.") and c.endswith(".harm.throughput") for c in data.table.columns):
        from .judge import plot_harm  # a sweep run with --judge

        try:
            out.append(("harm", plot_harm(data, Path(dest_dir) / f"harm_vs_{x_col}.png", x=x, by=by, facet=facet), ""))
        except PlotError as e:
            out.append(("harm", None, str(e)))
    return out


def default_plots(
    data: SweepData, dest_dir: Path, x: Optional[str] = None, by: Optional[str] = None, facet: Optional[str] = None
) -> list[Path]:
    """The paths of :func:`summary_plots` that were drawn."""
    return [p for _, p, _ in summary_plots(data, dest_dir, x, by, facet) if p is not None]
