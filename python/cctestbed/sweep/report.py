"""A sweep's static HTML report: one page (``report.html``) and its images (``report/*.png``).

The page holds the sweep's description, its axes, a table of the mean metrics per point (over
the seeds), every summary plot, the failed trials with their errors, and every trial's row. It
uses no script and no external resource, so it opens from the disk and can be mailed as a folder.
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import Any, Optional

import polars as pl

from ..destination import (
    GENERATOR, REPORT_SUFFIXES, DestinationError, check_output_file, write_dir, write_file_atomically,
)
from .store import read_table
from .plot import SweepData, choose_axes, summary_plots

#: Columns of the per-point table: (column, heading, scale, format).
POINT_METRICS = (
    ("total.loss_pct", "loss %", 1.0, ".3g"),
    ("total.utilization", "utilization %", 100.0, ".1f"),
    ("total.goodput_bps", "goodput Mbit/s", 1e-6, ".3g"),
    ("total.retrans_pct", "retrans %", 1.0, ".3g"),
    ("rtt.p50_ms", "RTT p50 ms", 1.0, ".1f"),
    ("rtt.p95_ms", "RTT p95 ms", 1.0, ".1f"),
    ("queue.mean_bdp", "queue mean BDP", 1.0, ".2f"),
    ("queue.p95_bdp", "queue p95 BDP", 1.0, ".2f"),
    ("total.jain", "Jain", 1.0, ".3f"),
    ("total.tput_cov", "tput CoV", 1.0, ".3f"),
)

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto; max-width: 1500px;
       padding: 0 1.5rem; color: #1d232a; line-height: 1.45; }
h1 { margin-bottom: .2rem; } h2 { margin-top: 2.2rem; border-bottom: 1px solid #d5dbe1; padding-bottom: .2rem; }
.meta { color: #56606b; margin: .2rem 0; }
table { border-collapse: collapse; font-size: .85rem; margin: .6rem 0; }
th, td { border: 1px solid #d5dbe1; padding: .25rem .5rem; text-align: right; white-space: nowrap; }
th { background: #eef2f6; position: sticky; top: 0; }
td.k, th.k { text-align: left; }
tr:nth-child(even) td { background: #f8fafc; }
td.failed { color: #b42318; font-weight: 600; } td.err { text-align: left; white-space: normal; max-width: 40rem; }
figure { margin: 1.2rem 0; } figure img { max-width: 100%; border: 1px solid #e3e8ee; }
figcaption { color: #56606b; font-size: .9rem; }
.scroll { overflow-x: auto; max-height: 38rem; overflow-y: auto; }
"""

CAPTIONS = {
    "loss": "Loss at the bottleneck: router drops over packets arriving, over the steady window.",
    "utilization": "Receiver goodput over the payload capacity (capacity x mss/mtu); 100 % is a saturated link.",
    "share": "Each algorithm's share of the link: line = mean over seeds; band = 25th-75th percentile of the "
             "per-0.5 s shares pooled over the seeds (trials with two or more flow groups).",
    "rtt": "Median of the per-interval RTT samples of every flow.",
    "queue_occupancy": "Mean queue length at the bottleneck, in BDP.",
    "retrans": "Retransmitted segments over segments sent.",
    "jain": "Jain's fairness index over every flow's goodput.",
    "harm": "Throughput harm per flow group A (sweep --judge): beside the others (solid) and beside a copy of "
            "itself (dashed, harm(A->A)); the others are deployable beside A where solid <= dashed.",
}


def _fmt(v: Any, spec: str, scale: float = 1.0) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    if isinstance(v, (int, float)):
        return format(v * scale, spec)
    return str(v)


def _esc(v: Any) -> str:
    return html.escape(str(v), quote=True)


#: summary.json's phenomena, as the report names them.
PHENOMENA = {"starvation": "starvation", "standing_queue": "standing queue", "share_oscillation": "share oscillation",
             "slow_convergence": "slow convergence", "probe_rtt_sync": "PROBE_RTT sync",
             "startup_overshoot": "start-up overshoot"}


def _phenomena_cols(table: pl.DataFrame) -> list[tuple[str, str]]:
    return [(f"phenomena.{k}.detected", v) for k, v in PHENOMENA.items() if f"phenomena.{k}.detected" in table.columns]


def point_table(data: SweepData, all_rows: pl.DataFrame) -> str:
    """Mean over seeds per point: the axis values, seeds done, and the main metrics per group."""
    axes = data.axes
    groups = data.groups()
    metrics = [m for m in POINT_METRICS if m[0] in data.table.columns]
    share_cols = [(f"groups.{g}.share", f"{g} share %", 100.0, ".1f") for g in groups]
    cols = metrics[:2] + share_cols + metrics[2:]
    found = _phenomena_cols(data.table)
    if axes:
        counts = all_rows.group_by(axes, maintain_order=True).agg(
            pl.len().alias("_n"), (pl.col("status") == "done").sum().alias("_done")
        )
        agg = data.table.group_by(axes, maintain_order=True).agg(
            [pl.col(c).mean() for c, *_ in cols] + [pl.col(c).cast(pl.Int64).sum() for c, _ in found])
        agg = counts.join(agg, on=axes, how="left", maintain_order="left")
    else:
        agg = pl.DataFrame({"_n": [len(all_rows)], "_done": [len(data.table)]}).with_columns(
            [pl.lit(data.table[c].mean()).alias(c) for c, *_ in cols]
            + [pl.lit(data.table[c].cast(pl.Int64).sum()).alias(c) for c, _ in found]
        )
    head = "".join(f'<th class="k">{_esc(a)}</th>' for a in axes) + "<th>seeds done</th>"
    head += "".join(f"<th>{_esc(h)}</th>" for _, h, _, _ in cols)
    head += '<th class="k">phenomena (seeds)</th>' if found else ""
    body = []
    for r in agg.iter_rows(named=True):
        cells = "".join(f'<td class="k">{_esc(r[a])}</td>' for a in axes)
        cls = "" if r["_done"] == r["_n"] else ' class="failed"'
        cells += f"<td{cls}>{r['_done']}/{r['_n']}</td>"
        cells += "".join(f"<td>{_fmt(r.get(c), f, s)}</td>" for c, _, s, f in cols)
        if found:
            seen = [f"{name} {r[c]}/{r['_done']}" for c, name in found if r.get(c)]
            cells += f'<td class="k">{_esc(", ".join(seen) or "-")}</td>'
        body.append(f"<tr>{cells}</tr>")
    return f'<div class="scroll"><table id="points"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'


def trials_table(data: SweepData, all_rows: pl.DataFrame) -> str:
    axes = data.axes
    metrics = [m for m in POINT_METRICS if m[0] in all_rows.columns][:6]
    head = "".join(f'<th class="k">{_esc(a)}</th>' for a in axes)
    head += '<th>seed</th><th class="k">status</th>' + "".join(f"<th>{_esc(h)}</th>" for _, h, _, _ in metrics)
    found = _phenomena_cols(all_rows)
    head += '<th class="k">phenomena</th>' if found else ""
    head += '<th class="k">directory</th>'
    body = []
    for r in all_rows.iter_rows(named=True):
        cells = "".join(f'<td class="k">{_esc(r[a])}</td>' for a in axes)
        st = r["status"]
        st_cls = "k failed" if st == "failed" else "k"
        cells += f'<td>{r["seed"]}</td><td class="{st_cls}">{_esc(st)}</td>'
        cells += "".join(f"<td>{_fmt(r.get(c), f, s)}</td>" for c, _, s, f in metrics)
        if found:
            cells += f'<td class="k">{_esc(", ".join(name for c, name in found if r.get(c)) or "-")}</td>'
        d = r.get("dir")
        link = f'<a href="{_esc(d)}/">{_esc(d)}</a>' if d else "-"
        cells += f'<td class="k">{link}</td>'
        body.append(f"<tr>{cells}</tr>")
    return f'<div class="scroll"><table id="trials"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'


def write_report(root: Path, output: Optional[Path] = None) -> Path:
    """Write ``report.html`` and ``report/*.png`` for the sweep in ``root``; returns the HTML path."""
    root = Path(root)
    data = SweepData.load(root)
    all_rows, meta = read_table(root)  # read (and checked) by SweepData.load already
    page, img_dir = report_paths(root, output)
    check_report_destination(root, output)

    x, by, facets = choose_axes(data)
    figures: list[tuple[Optional[Path], str, str]] = []

    def draw(tmp: Path) -> None:
        (tmp / ASSETS_MARKER).write_text(ASSETS_MARKER_TEXT, encoding="utf-8")
        for stem, path, why in summary_plots(data, tmp):
            figures.append((None if path is None else img_dir / path.name, stem, why or CAPTIONS.get(stem, "")))

    write_dir(img_dir, draw, force=True, replaceable=lambda d: _check_assets(d, output is None))

    sweep = meta.get("sweep", {})
    failed = all_rows.filter(pl.col("status") == "failed")
    pending = all_rows.filter(pl.col("status") == "pending")
    axes_desc = "".join(
        f"<li><code>{_esc(path)}</code> as <b>{_esc(col)}</b>: "
        f"{_esc(', '.join(str(v) for v in all_rows[col].unique(maintain_order=True).to_list()))}</li>"
        for col, path in data.columns.items()
    )
    base = sweep.get("base", {})
    base_desc = ""
    if isinstance(base, dict):
        link = base.get("link", {})
        flows = base.get("flows", [])
        base_desc = (
            f"base: {_esc(base.get('duration', '?'))} trials, link {_esc(json.dumps(link, sort_keys=True))}, "
            f"flows {_esc(json.dumps(flows, sort_keys=True))}"
        )
    parts = [
        "<!DOCTYPE html>",
        f'<html lang="en"><head><meta charset="utf-8"><meta name="generator" content="{GENERATOR}">',
        f"<title>{_esc(data.name)}: sweep report</title>",
        f"<style>{CSS}</style></head><body>",
        f"<h1>{_esc(data.name)}</h1>",
    ]
    if sweep.get("description"):
        parts.append(f'<p class="meta">{_esc(sweep["description"])}</p>')
    parts.append(
        f'<p class="meta" id="counts">{len(all_rows)} trial(s): {len(data.table)} done, {len(failed)} failed, '
        f"{len(pending)} not run; seeds per point: {all_rows['seed'].n_unique()}; steady window: "
        f"{_esc(' to '.join(map(str, sweep['steady'])) if sweep.get('steady') else 'the whole trial')}</p>"
    )
    parts.append(f'<p class="meta">{base_desc}</p>')
    parts.append(f"<ul>{axes_desc}</ul>" if axes_desc else "")
    parts.append("<h2>Summary plots</h2>")
    parts.append(
        f'<p class="meta">x: <b>{_esc(x)}</b>; a line per <b>{_esc(by or "-")}</b>'
        + (f"; a panel per <b>{_esc(', '.join(facets))}</b>" if facets else "")
        + "; points are means over the seeds, bars span their minimum to maximum.</p>"
    )
    for dest, stem, caption in figures:
        if dest is None:
            parts.append(f'<p class="meta">{_esc(stem)}: {_esc(caption)}</p>')
            continue
        rel = dest.relative_to(page.parent).as_posix()
        parts.append(
            f'<figure id="fig-{_esc(stem)}"><img src="{_esc(rel)}" alt="{_esc(stem)} vs {_esc(x)}">'
            f"<figcaption>{_esc(caption)}</figcaption></figure>"
        )
    if isinstance(meta.get("adaptive"), dict):
        from .adaptive import adaptive_html

        parts.append(adaptive_html(meta["adaptive"], list(data.columns)))
    parts.append("<h2>Per point (mean over seeds)</h2>")
    parts.append(point_table(data, all_rows))
    from .modelreport import models_html

    parts.append(models_html(all_rows, data.axes))
    from .judge import judge_html

    parts.append(judge_html(all_rows, data.axes))
    if len(failed):
        parts.append(f"<h2>Failed trials ({len(failed)})</h2><table id=\"failed\"><thead><tr>")
        parts.append("".join(f'<th class="k">{_esc(a)}</th>' for a in data.axes) + '<th>seed</th><th class="k">error</th>')
        parts.append("</tr></thead><tbody>")
        for r in failed.iter_rows(named=True):
            parts.append(
                "<tr>" + "".join(f'<td class="k">{_esc(r[a])}</td>' for a in data.axes)
                + f'<td>{r["seed"]}</td><td class="err">{_esc(r["error"])}</td></tr>'
            )
        parts.append("</tbody></table>")
    parts.append("<h2>Every trial</h2>")
    parts.append(trials_table(data, all_rows))
    parts.append(
        '<p class="meta">Columns of <code>trials.parquet</code> hold every metric of every trial; '
        "each trial's telemetry is in its directory.</p></body></html>"
    )
    html = "\n".join(p for p in parts if p) + "\n"
    write_file_atomically(page, lambda tmp: tmp.write_text(html, encoding="utf-8"))
    return page


#: The file that marks a report's figure folder as one ``report`` wrote and may replace.
ASSETS_MARKER = ".cctestbed-report"
ASSETS_MARKER_TEXT = "figures of a cctestbed sweep report; replaced whenever the report is written again\n"


def report_paths(root: Path, output: Optional[Path]) -> tuple[Path, Path]:
    """The report's page and its figure folder (the page's name without its suffix, beside it)."""
    page = Path(output) if output is not None else Path(root) / "report.html"
    return page, page.parent / page.stem


def _check_assets(img_dir: Path, default: bool) -> None:
    """Raise :class:`DestinationError` unless ``img_dir`` may be replaced: a folder a report wrote
    (it holds :data:`ASSETS_MARKER`), or, at the sweep's own default place, an older report's
    folder of PNG files only."""
    if not img_dir.exists() and not img_dir.is_symlink():
        return
    if img_dir.is_symlink() or not img_dir.is_dir():
        raise DestinationError(f"{img_dir} (the report's figure folder) exists and is not a directory; choose another -o")
    marker = img_dir / ASSETS_MARKER
    if marker.is_file() and not marker.is_symlink():
        return
    if default and all(p.is_file() and not p.is_symlink() and p.suffix == ".png" for p in img_dir.iterdir()):
        return
    raise DestinationError(
        f"{img_dir} (the report's figure folder, named after the page) exists and was not written by "
        "cctestbed report; choose another -o"
    )


def check_report_destination(root: Path, output: Optional[Path]) -> None:
    """Everything ``report`` will write, checked before it draws anything: the page (an HTML file
    that does not exist or was written by a report), and its figure folder (see
    :func:`_check_assets`); neither may be a file of the sweep itself."""
    page, img_dir = report_paths(root, output)
    root = Path(root)
    check_output_file(page, REPORT_SUFFIXES)
    _check_assets(img_dir, output is None)
    if img_dir.resolve() == root.resolve() or img_dir.resolve() in root.resolve().parents:
        raise DestinationError(f"{page}: its figure folder {img_dir} would be the sweep directory or hold it; choose another -o")
