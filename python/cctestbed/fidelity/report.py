"""The fidelity report: cells from the kernel reference and the simulator's trials, written out.

``fidelity.json`` holds every cell (:class:`.verdict.Cell`), the per-scenario verdicts and a
``totals`` object ``{"cells", "within", "known", "misses", "scenarios", "gross_misses"}``;
``fidelity.md`` the headline, the scenario x metric matrix and every miss; ``fidelity.html`` the
heat map and, for every scenario with a miss whose trials are at hand, both time series overlaid
as ``cctestbed compare`` draws them.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any, Optional

from ..plot import literal_text
from .measure import METRICS
from .verdict import KNOWN_FILENAME, Cell, apply_known, cells_for, gross_miss, load_known, tolerances

MARK = {"within": "✓", "miss": "✗", "known": "≈"}


def known_path(suite: Any) -> Optional[Path]:
    return Path(suite.source).parent / KNOWN_FILENAME if suite.source else None


def sim_metrics_from_store(suite: Any, sim_dir: Path) -> dict[str, list[dict[str, Any]]]:
    """scenario -> metric dicts of its finished simulator trials in the sweep store ``sim_dir``."""
    from ..sweep.store import Store
    from .measure import metrics_of_dir

    store = Store(sim_dir)
    out: dict[str, list[dict[str, Any]]] = {}
    for s in suite.sweep("sim").specs:
        if store.is_done(s.key):
            out.setdefault(s.values["scenario"], []).append(metrics_of_dir(store.trial_dir(s.key)))
    return out


def kernel_metrics(suite: Any, ref: Any) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for sc in suite.scenarios:
        rows = ref.for_scenario([sc.scenario_key(seed, "kernel") for seed in suite.seeds_of(sc)])
        if rows:
            out[sc.id] = rows
    return out


def build_cells(suite: Any, kernel: dict[str, list[dict[str, Any]]], sim: dict[str, list[dict[str, Any]]]) -> tuple[list[Cell], dict[str, Any]]:
    """Cells of every scenario measured on both sides, known deviations applied, and the totals."""
    tols = tolerances(suite.tolerances)
    known = load_known(known_path(suite))
    cells: list[Cell] = []
    scenarios = []
    for sc in suite.scenarios:
        k, s = kernel.get(sc.id, []), sim.get(sc.id, [])
        entry: dict[str, Any] = {"id": sc.id, "trial": sc.trial.describe(), "kernel_reps": len(k), "sim_reps": len(s)}
        if k and s:
            cs = cells_for(sc.id, k, s, tols)
            apply_known(cs, known)
            cells += cs
            entry["gross_miss"] = gross_miss(cs)
            entry["misses"] = sum(c.verdict != "within" for c in cs)
        scenarios.append(entry)
    measured = [e for e in scenarios if e.get("kernel_reps") and e.get("sim_reps")]
    used = {(c.scenario, c.metric) for c in cells}
    stale = sorted(f"{s}: {m}" for (s, m) in known if (s, m) in used and
                   next(c for c in cells if (c.scenario, c.metric) == (s, m)).verdict == "within")
    provenance = {}
    rows = [r for rs in kernel.values() for r in rs]
    for f in ("kernel", "host", "link_emulator"):
        provenance[f] = sorted({str(r.get(f)) for r in rows if r.get(f) is not None})
    dates = sorted(str(r.get("date")) for r in rows if r.get("date"))
    provenance["dates"] = [dates[0], dates[-1]] if dates else []
    totals = {
        "cells": len(cells),
        "within": sum(c.verdict == "within" for c in cells),
        "known": sum(c.verdict == "known" for c in cells),
        "misses": sum(c.verdict == "miss" for c in cells),
        "scenarios": len(measured),
        "scenarios_in_suite": len(suite.scenarios),
        "gross_misses": sum(1 for e in measured if e.get("gross_miss")),
    }
    return cells, {"totals": totals, "scenarios": scenarios, "kernel": provenance, "stale_known": stale}


def collect(suite: Any, ref: Any, sim_dir: Path, kernel_dir: Optional[Path] = None) -> tuple[list[Cell], dict[str, Any]]:
    cells, extra = build_cells(suite, kernel_metrics(suite, ref), sim_metrics_from_store(suite, sim_dir))
    extra["dirs"] = {"sim": str(sim_dir), "kernel": str(kernel_dir) if kernel_dir else None}
    return cells, extra


# --- writing -----------------------------------------------------------------------------------


def _fmt(x: Optional[float]) -> str:
    if x is None:
        return "-"
    return f"{x:.3g}" if abs(x) < 100 else f"{x:.0f}"


def metric_order(cells: list[Cell]) -> list[str]:
    names = [m for m in METRICS if m != "share"]
    shares = sorted({c.metric for c in cells if c.metric.startswith("share.")})
    return names[: names.index("jain") + 1] + shares + names[names.index("jain") + 1:]


def headline(extra: dict[str, Any]) -> str:
    t = extra["totals"]
    pct = 100.0 * t["within"] / t["cells"] if t["cells"] else 0.0
    return (f"{t['within']} of {t['cells']} cells within tolerance ({pct:.1f} %), {t['known']} known deviations, "
            f"{t['misses']} unexplained misses; {t['scenarios']} of {t['scenarios_in_suite']} scenarios measured "
            f"on both sides; {t['gross_misses']} gross misses")


def family_table(cells: list[Cell], extra: dict[str, Any]) -> list[str]:
    """Cells within per family of scenarios (the id up to its first '-': thesis, rate, rtt, ...)."""
    fams: dict[str, list[Cell]] = {}
    for c in cells:
        fams.setdefault(c.scenario.split("-", 1)[0], []).append(c)
    n_scen = {f: len({c.scenario for c in cs}) for f, cs in fams.items()}
    out = ["| family | scenarios | cells | within | known deviations |", "|---|---|---|---|---|"]
    for f, cs in fams.items():
        w = sum(c.verdict == "within" for c in cs)
        out.append(f"| {f} | {n_scen[f]} | {len(cs)} | {w} ({100.0 * w / len(cs):.0f} %) | "
                   f"{sum(c.verdict == 'known' for c in cs)} |")
    return out


def write_markdown(suite: Any, cells: list[Cell], extra: dict[str, Any], path: Path) -> None:
    by = {(c.scenario, c.metric): c for c in cells}
    metrics = metric_order(cells)
    k = extra["kernel"]
    lines = [
        f"# Fidelity: {suite.name}",
        "",
        headline(extra) + ".",
        "",
        f"Kernel: {', '.join(k.get('kernel', [])) or '-'} on {', '.join(k.get('host', [])) or '-'} "
        f"({', '.join(k.get('link_emulator', [])) or '-'} link emulator), measured "
        f"{' to '.join(k.get('dates', [])) or '-'}. A cell is within when |sim - kernel| <= max(tolerance, "
        "kernel spread over reps); ✓ within, ✗ miss, ≈ known deviation (known-deviations.toml).",
        "",
        *family_table(cells, extra),
        "",
        "| scenario | " + " | ".join(METRICS.get(m, (m,))[0] if not m.startswith("share.") else m for m in metrics) + " |",
        "|---|" + "---|" * len(metrics),
    ]
    for e in extra["scenarios"]:
        if not e.get("kernel_reps") or not e.get("sim_reps"):
            continue
        row = [by[(e["id"], m)] if (e["id"], m) in by else None for m in metrics]
        lines.append(f"| {e['id']}{' **(gross)**' if e.get('gross_miss') else ''} | "
                     + " | ".join("" if c is None else MARK[c.verdict] for c in row) + " |")
    pending = [e["id"] for e in extra["scenarios"] if not (e.get("kernel_reps") and e.get("sim_reps"))]
    if pending:
        lines += ["", f"Not yet measured on both sides: {', '.join(pending)}."]
    misses = [c for c in cells if c.verdict != "within"]
    if misses:
        lines += ["", "## Misses", "", "| scenario | metric | kernel mean [min, max] | simulator mean [min, max] | allowed | verdict |",
                  "|---|---|---|---|---|---|"]
        for c in misses:
            lines.append(
                f"| {c.scenario} | {c.metric} | {_fmt(c.kernel_mean)} [{_fmt(c.kernel_min)}, {_fmt(c.kernel_max)}] | "
                f"{_fmt(c.sim_mean)} [{_fmt(c.sim_min)}, {_fmt(c.sim_max)}] | {_fmt(c.allowed)} | "
                f"{c.verdict}{': ' + c.reason if c.reason else ''} |")
    gross = [e for e in extra["scenarios"] if e.get("gross_miss")]
    if gross:
        lines += ["", "## Gross misses", ""] + [f"- {e['id']}: {e['gross_miss']}" for e in gross]
    if extra.get("stale_known"):
        lines += ["", "Known deviations now within tolerance (remove them from the file): "
                  + ", ".join(extra["stale_known"]) + "."]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@literal_text
def heatmap(cells: list[Cell], extra: dict[str, Any], path: Path) -> None:
    """Scenario x metric: |sim - kernel| / allowed, capped at 3; hatched where known, grey where absent."""
    import numpy as np
    from matplotlib.figure import Figure

    from ..plot import save_figure

    metrics = metric_order(cells)
    ids = [e["id"] for e in extra["scenarios"] if e.get("kernel_reps") and e.get("sim_reps")]
    if not ids:
        return
    by = {(c.scenario, c.metric): c for c in cells}
    z = np.full((len(ids), len(metrics)), np.nan)
    for i, s in enumerate(ids):
        for j, m in enumerate(metrics):
            c = by.get((s, m))
            if c is None:
                continue
            z[i, j] = 3.0 if c.diff is None else min(abs(c.diff) / max(c.allowed or 1e-12, 1e-12), 3.0)
    fig = Figure(figsize=(2.5 + 0.55 * len(metrics), 1.5 + 0.22 * len(ids)), layout="constrained")
    ax = fig.subplots()
    from matplotlib.colors import LinearSegmentedColormap

    cmap = LinearSegmentedColormap.from_list("fid", [(0, "#1a9850"), (1 / 3, "#d9ef8b"), (0.34, "#fdae61"),
                                                     (1, "#a50026")]).with_extremes(bad="#dddddd")
    im = ax.imshow(np.ma.masked_invalid(z), cmap=cmap, vmin=0, vmax=3, aspect="auto")
    for i, s in enumerate(ids):
        for j, m in enumerate(metrics):
            c = by.get((s, m))
            if c is not None and c.verdict != "within":
                ax.text(j, i, MARK[c.verdict], ha="center", va="center", fontsize=7)
    ax.set_xticks(range(len(metrics)), [METRICS[m][0] if m in METRICS else m for m in metrics], rotation=40, ha="right", fontsize=8)
    ax.set_yticks(range(len(ids)), ids, fontsize=7)
    cb = fig.colorbar(im, ax=ax, shrink=0.5)
    cb.set_label("|sim - kernel| / allowed (<= 1 is within)")
    ax.set_title("simulator vs kernel: " + headline(extra).split(";")[0], fontsize=9)
    save_figure(fig, str(path))


def overlay(extra: dict[str, Any], suite: Any, scenario: str, dest: Path) -> Optional[Path]:
    """The first rep's kernel and simulator trials overlaid (compare's plot), where both are at hand."""
    from ..compare import plot_compare, save_compare
    from ..results import TrialResult
    from ..sweep.store import Store

    dirs = extra.get("dirs") or {}
    if not dirs.get("kernel") or not dirs.get("sim"):
        return None
    sc = suite.scenario(scenario)
    seed = suite.seeds[0]
    from ..sweep.spec import trial_key

    kd = Store(Path(dirs["kernel"])).trial_dir(trial_key(sc.trial_for(seed, "kernel")))
    sd = Store(Path(dirs["sim"])).trial_dir(trial_key(sc.trial_for(seed, "sim")))
    if not (kd / "summary.json").is_file() or not (sd / "summary.json").is_file():
        return None
    save_compare(plot_compare(TrialResult.load(sd), TrialResult.load(kd)), dest)
    return dest


def write_html(suite: Any, cells: list[Cell], extra: dict[str, Any], out_dir: Path) -> Path:
    plots = out_dir / "fidelity-plots"
    plots.mkdir(parents=True, exist_ok=True)
    heatmap(cells, extra, plots / "heatmap.png")
    parts = [f"<h1>Fidelity: {html.escape(suite.name)}</h1>", f"<p>{html.escape(headline(extra))}.</p>"]
    if (plots / "heatmap.png").is_file():
        parts.append('<img src="fidelity-plots/heatmap.png" alt="scenario x metric heat map">')
    missed = [e for e in extra["scenarios"] if e.get("misses")]
    for e in missed:
        rows = "".join(
            f"<tr><td>{html.escape(c.metric)}</td><td>{_fmt(c.kernel_mean)} [{_fmt(c.kernel_min)}, {_fmt(c.kernel_max)}]</td>"
            f"<td>{_fmt(c.sim_mean)} [{_fmt(c.sim_min)}, {_fmt(c.sim_max)}]</td><td>{_fmt(c.allowed)}</td>"
            f"<td>{html.escape(c.verdict + (': ' + c.reason if c.reason else ''))}</td></tr>"
            for c in cells if c.scenario == e["id"] and c.verdict != "within")
        parts.append(f"<h2>{html.escape(e['id'])}</h2><p>{html.escape(e['trial'])}"
                     + (f" &mdash; <b>gross miss: {html.escape(e['gross_miss'])}</b>" if e.get("gross_miss") else "")
                     + "</p><table border=1 cellpadding=3><tr><th>metric</th><th>kernel mean [min, max]</th>"
                     f"<th>simulator mean [min, max]</th><th>allowed</th><th>verdict</th></tr>{rows}</table>")
        p = overlay(extra, suite, e["id"], plots / f"{e['id']}.png")
        if p is not None:
            parts.append(f'<p>Simulator solid, kernel dashed (seed {suite.seeds[0]}):</p><img src="fidelity-plots/{p.name}" width="800">')
        else:
            parts.append("<p>(time series not at hand: the kernel trials of this scenario ran elsewhere)</p>")
    page = out_dir / "fidelity.html"
    page.write_text("<!doctype html><meta charset=utf-8><title>fidelity</title><body style='font-family:sans-serif'>"
                    + "\n".join(parts) + "</body>", encoding="utf-8")
    return page


def write_json(cells: list[Cell], extra: dict[str, Any], path: Path) -> None:
    doc = {**{k: v for k, v in extra.items() if k != "dirs"}, "cells": [c.as_dict() for c in cells]}
    path.write_text(json.dumps(doc, indent=1, allow_nan=False) + "\n", encoding="utf-8")


def write_all(suite: Any, cells: list[Cell], extra: dict[str, Any], out_dir: Path, html_page: bool = True) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "fidelity.md", out_dir / "fidelity.json"]
    write_markdown(suite, cells, extra, paths[0])
    write_json(cells, extra, paths[1])
    if html_page:
        paths.append(write_html(suite, cells, extra, out_dir))
    return paths
