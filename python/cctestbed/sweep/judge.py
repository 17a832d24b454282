"""``cctestbed sweep --judge``: Ware et al.'s harm (:mod:`cctestbed.judging`) for every trial of a sweep.

After the sweep's own trials, the baselines each finished trial implies (each flow group alone,
each beside a copy of itself) run as jobs of the same executor (``--workers`` processes or the
``--cluster``), each baseline once however many trials share it (the same trial text: across
points and seeds alike), through the judge's cache (:func:`cctestbed.judging.default_cache`, or
``--judge-cache``): a baseline another judgement or sweep ran is not run again. The mixed run is
the sweep's own trial. Each judgement is stored as ``judge/<key>.json`` in the sweep directory
(the ``judge.json`` document of ``cctestbed judge``), and trials.parquet gains per group
``judge.<group>.harm.<metric>``, ``judge.<group>.harm_self.<metric>`` (harm(A->A)),
``judge.<group>.deployable.<metric>``, ``judge.<group>.verdict`` and the group's figures alone
(``judge.<group>.alone.<figure>``). A resumed sweep judges only the trials not yet judged, and
runs only baselines not in the cache.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence

import polars as pl

from .spec import Sweep

#: The sweep directory's folder of judgements, one ``<trial key>.json`` each.
JUDGE_DIR = "judge"
#: Job keys of baseline runs: this prefix and the baseline's cache key.
JOB_PREFIX = "judge-"
#: Metric -> heading in the report.
METRIC_NAMES = {"throughput": "tput", "rtt_p95": "RTT p95", "loss": "loss", "fct_p99": "FCT p99"}


def problems(sweep: Sweep, most: int = 5) -> list[str]:
    """Why the sweep's trials cannot be judged (empty when every point can): each reason once,
    with how many points it holds for and the first of them."""
    from ..judging import JudgeError, baselines

    seen: dict[str, list[str]] = {}
    for point in range(sweep.n_points):
        labels, trial = sweep.point_trial(point)
        try:
            baselines(trial)
        except JudgeError as e:
            where = ", ".join(f"{k}={v}" for k, v in labels.items()) or "the base trial"
            seen.setdefault(str(e), []).append(where)
    out = []
    for why, points in list(seen.items())[:most]:
        n = len(points)
        out.append(f"{why} (at {n} of {sweep.n_points} point(s), e.g. {points[0]})" if sweep.axes else why)
    return out


def judge_path(root: Path, key: str) -> Path:
    return Path(root) / JUDGE_DIR / f"{key}.json"


def read_judgement(root: Path, key: str) -> Optional[dict[str, Any]]:
    p = judge_path(root, key)
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def cells(doc: dict[str, Any]) -> dict[str, Any]:
    """A judgement's trials.parquet cells (see the module docstring)."""
    out: dict[str, Any] = {}
    for label, g in doc.get("groups", {}).items():
        p = f"judge.{label}."
        for part in ("harm", "harm_self", "deployable"):
            for metric, v in g.get(part, {}).items():
                out[f"{p}{part}.{metric}"] = v
        for fig, v in g.get("alone", {}).items():
            if v is not None or fig != "fct_p99_ms":  # no completion times without sized flows
                out[f"{p}alone.{fig}"] = v
        out[f"{p}verdict"] = g.get("verdict")
    return out


def table_cells(root: Path, key: str) -> dict[str, Any]:
    """The cells of the trial ``key``'s judgement, if the sweep directory holds one."""
    doc = read_judgement(root, key) if (Path(root) / JUDGE_DIR).is_dir() else None
    return cells(doc) if doc else {}


def figures_from_dir(trial_dir: Path) -> dict[str, dict[str, Optional[float]]]:
    """:func:`cctestbed.judging.figures` of a stored trial (summary.json and metrics.json)."""
    from ..results import read_json

    s = read_json(trial_dir / "summary.json")
    mp = trial_dir / "metrics.json"
    m = read_json(mp) if mp.exists() else {}
    out = {}
    for label, g in s["groups"].items():
        mg = m.get("groups", {}).get(label, {})
        out[label] = {
            "goodput_bps": g.get("goodput_bps"),
            "rtt_p95_ms": mg.get("rtt_p95_ms"),
            "loss_pct": mg.get("lost_pct"),
            "fct_p99_ms": s.get("fct", {}).get(label, {}).get("fct_p99_ms"),
        }
    return out


def run_baseline_job(job: dict[str, Any]) -> dict[str, Any]:
    """One baseline run in a worker: its result files as bytes and its figures, or its error."""
    import traceback

    from .execute import _error_text

    t0 = time.perf_counter()
    out: dict[str, Any] = {"key": job["key"]}
    try:
        from ..config import parse_trial
        from ..judging import figures
        from ..runner import run_trial

        result = run_trial(parse_trial(job["trial"], allow_large=True))
        figs = figures(result)
        with tempfile.TemporaryDirectory(prefix="cctestbed-judge-") as tmp:
            result.write_files(Path(tmp))
            files = {p.name: p.read_bytes() for p in sorted(Path(tmp).iterdir())}
        out.update(status="done", files=files, figures=figs, elapsed_s=time.perf_counter() - t0)
    except Exception as e:
        out.update(status="failed", error=_error_text(e), traceback=traceback.format_exc(),
                   elapsed_s=time.perf_counter() - t0)
    return out


def _store_baseline(cache: Path, key: str, files: dict[str, bytes], figs: dict[str, Any]) -> None:
    """A baseline into the judge's cache, as :func:`cctestbed.judging.run_baselines` stores one."""
    from ..destination import write_dir
    from ..judging import FIGURES_FILE

    def write(tmp: Path) -> None:
        for name, data in files.items():
            (tmp / name).write_bytes(data)
        (tmp / FIGURES_FILE).write_text(json.dumps(figs, indent=1, sort_keys=True), encoding="utf-8")

    cache.mkdir(parents=True, exist_ok=True)
    try:
        write_dir(cache / key, write)
    except FileExistsError:  # stored meanwhile by another judgement
        pass


@dataclass
class JudgeRun:
    """What one :func:`run_judgements` did."""

    trials: int = 0  #: finished trials of the sweep
    judged: int = 0  #: judged by this run
    already: int = 0  #: judged before (judge/<key>.json)
    baselines: int = 0  #: distinct baselines the trials judged here need
    cached: int = 0  #: of which in the cache before
    simulated: int = 0  #: of which run here
    failed: int = 0  #: of which failed
    interrupted: bool = False
    errors: list[str] = field(default_factory=list)
    verdicts: dict[str, dict[str, int]] = field(default_factory=dict)  #: group -> verdict -> trials


BaselineReporter = Callable[[str, dict[str, Any]], None]


def run_judgements(sweep: Sweep, out: Path, cache: Path, workers: Optional[int] = None, cluster: Any = None,
                   report: Optional[BaselineReporter] = None) -> JudgeRun:
    """Judge every finished trial of ``sweep`` in the sweep directory ``out`` not judged yet (see
    the module docstring). ``report("start", {"todo": n, "cached": k})`` once, then
    ``report("done" | "failed", outcome)`` per baseline run."""
    from ..judging import _cached, baselines, judgement, trial_key
    from .execute import run_dask, run_local
    from .store import TMP_PREFIX, Store, atomic_write_bytes

    store = Store(Path(out))
    (store.root / JUDGE_DIR).mkdir(parents=True, exist_ok=True)
    store._lock()
    run = JudgeRun()
    try:
        for p in (store.root / JUDGE_DIR).iterdir():
            if p.name.startswith(TMP_PREFIX):
                p.unlink(missing_ok=True)
        # per trial to judge: its key and its runs' cache keys; per baseline not cached: its trial
        pending: list[tuple[str, dict[str, str], Any]] = []
        need: dict[str, dict[str, Any]] = {}
        known: set[str] = set()
        for s in sweep.iter_specs():
            if not store.is_done(s.key):
                continue
            run.trials += 1
            if read_judgement(store.root, s.key) is not None:
                run.already += 1
                continue
            keys = {}
            for name, t in baselines(s.trial).items():
                if name == "mixed":
                    continue
                k = keys[name] = trial_key(t)
                if k not in known:
                    known.add(k)
                    if _cached(cache, k) is None:
                        need[k] = t.model_dump(mode="json", exclude_none=True)
            pending.append((s.key, keys, s.trial))
        run.baselines = len(known)
        run.cached = len(known) - len(need)
        if report:
            report("start", {"todo": len(need), "cached": run.cached})
        got: dict[str, dict[str, Any]] = {}  # figures of the baselines run here

        def jobs() -> Iterator[dict[str, Any]]:
            for k, trial in need.items():
                yield {"key": JOB_PREFIX + k, "kind": "baseline", "trial": trial}

        outcomes = (run_dask(jobs(), cluster) if cluster is not None
                    else run_local(jobs(), workers or os.cpu_count() or 1)) if need else iter(())
        try:
            for res in outcomes:
                k = res["key"][len(JOB_PREFIX):]
                if res["status"] == "done":
                    got[k] = res["figures"]
                    try:
                        _store_baseline(cache, k, res["files"], res["figures"])
                    except OSError as e:
                        run.errors.append(f"could not cache baseline {k} in {cache}: {e}")
                    run.simulated += 1
                else:
                    run.failed += 1
                    run.errors.append(f"baseline {k}: {res['error']}")
                if report:
                    report(res["status"], res)
                del res
        except KeyboardInterrupt:
            run.interrupted = True
        finally:
            close = getattr(outcomes, "close", None)
            if close:
                close()
        # every trial whose baselines are all at hand is judged, also after an interruption
        for key, keys, spec_trial in pending:
            figs: dict[str, Any] = {}
            for name, k in keys.items():
                f = got.get(k)
                if f is None:
                    f = _cached(cache, k)
                if f is None:
                    break
                figs[name] = {"key": k, "cached": k not in got, "figures": f}
            else:
                mixed = {"key": trial_key(spec_trial), "cached": False,
                         "figures": figures_from_dir(store.trial_dir(key))}
                doc = judgement(spec_trial, {"mixed": mixed, **figs})
                doc["runs"]["mixed"]["dir"] = f"trials/{key}"
                atomic_write_bytes(judge_path(store.root, key), (json.dumps(doc, indent=2) + "\n").encode())
                run.judged += 1
        for s in sweep.iter_specs():
            stored = read_judgement(store.root, s.key) if store.is_done(s.key) else None
            for label, g in (stored or {}).get("groups", {}).items():
                v = run.verdicts.setdefault(label, {})
                v[str(g.get("verdict"))] = v.get(str(g.get("verdict")), 0) + 1
        store.write_table(sweep)
        return run
    finally:
        store.close()


# --- the report ------------------------------------------------------------------------------


def judged_groups(table: pl.DataFrame) -> list[str]:
    """Flow groups with a verdict column, in column order."""
    return [c[len("judge."):-len(".verdict")] for c in table.columns
            if c.startswith("judge.") and c.endswith(".verdict")]


def _esc(v: Any) -> str:
    import html

    return html.escape(str(v), quote=True)


def _fmt(v: Any) -> str:
    import math

    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    return format(v, ".3f")


def judge_html(table: pl.DataFrame, axes: Sequence[str]) -> str:
    """The report's harm section: per point and group, the mean harm over the seeds beside the
    others and beside itself per metric, and in how many seeds the others are deployable; '' when
    the sweep was not judged."""
    groups = judged_groups(table)
    done = table.filter(pl.col("status") == "done") if "status" in table.columns else table
    if not groups or done.is_empty():
        return ""
    metrics = [m for m in METRIC_NAMES if any(f"judge.{g}.harm.{m}" in done.columns for g in groups)]
    head = "".join(f'<th class="k">{_esc(a)}</th>' for a in axes) + '<th class="k">group A</th>'
    for m in metrics:
        head += f"<th>{_esc(METRIC_NAMES[m])} h(-&gt;A)</th><th>{_esc(METRIC_NAMES[m])} h(A-&gt;A)</th>"
    head += "<th>deployable (seeds)</th>"
    body = []
    keys = list(axes)
    for g in groups:
        verdict = f"judge.{g}.verdict"
        rows = done.filter(pl.col(verdict).is_not_null())
        if rows.is_empty():
            continue
        cols = [c for m in metrics for c in (f"judge.{g}.harm.{m}", f"judge.{g}.harm_self.{m}")]
        aggs = [(pl.col(c).cast(pl.Float64).mean() if c in rows.columns else pl.lit(None)).alias(c) for c in cols]
        aggs += [(pl.col(verdict) == "deployable").sum().alias("_ok"), pl.len().alias("_n")]
        agg = rows.group_by(keys, maintain_order=True).agg(aggs) if keys else rows.select(aggs)
        for r in agg.iter_rows(named=True):
            cls = "" if r["_ok"] == r["_n"] else ' class="failed"'
            body.append("<tr>" + "".join(f'<td class="k">{_esc(r[a])}</td>' for a in keys)
                        + f'<td class="k">{_esc(g)}</td>' + "".join(f"<td>{_fmt(r[c])}</td>" for c in cols)
                        + f"<td{cls}>{r['_ok']}/{r['_n']}</td></tr>")
    return ('<h2 id="harm">Harm (Ware et al.)</h2><p class="meta">Per point and flow group A: harm the others do '
            "to A, h(-&gt;A), and A does to itself, h(A-&gt;A) (A beside a copy of itself), means over the seeds; "
            "harm = (x - y) / x where more is better (throughput), (y - x) / y where less is better (RTT, loss, "
            "completion time), x A's figure alone, y beside the others, clamped at 0. The others are deployable "
            "beside A in a seed when h(-&gt;A) &lt;= h(A-&gt;A) on every metric (<code>judge/&lt;key&gt;.json</code>, "
            "the <code>judge.*</code> columns of trials.parquet).</p>"
            f'<div class="scroll"><table id="harm-points"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table></div>')


def plot_harm(data: Any, dest: Optional[Path] = None, x: Optional[str] = None, by: Optional[str] = None,
              facet: Optional[str] = None) -> Any:
    """Each judged group's throughput harm vs ``x``: beside the others (solid) and beside a copy
    of itself (dashed), means over the seeds; a panel per value of ``by`` and the facet columns."""
    import numpy as np

    from .plot import (ALGO_COLORS, PlotError, _facet_title, _finish, _grid, _legend, _outer_labels, _style_x,
                       _x_numbers, choose_axes, panel_rows, panels_over)

    groups = [g for g in judged_groups(data.table) if f"judge.{g}.harm.throughput" in data.table.columns]
    if not groups:
        raise PlotError("no harm columns: run the sweep with --judge")
    judged = data.table.filter(pl.any_horizontal([pl.col(f"judge.{g}.harm.throughput").is_not_null()
                                                  for g in groups]))
    if judged.is_empty():
        raise PlotError("no finished trial has been judged")
    x, by, facets = choose_axes(data, x, by, facet)
    sub_data, panel_cols, keys = panels_over(data, judged, by, facets)
    sc, xmap = _x_numbers(sub_data, x)
    fig, axs = _grid(len(keys))
    colors = {g: ALGO_COLORS.get(g, f"C{i}") for i, g in enumerate(groups)}
    for ax, key in zip(axs, keys):
        sub = panel_rows(judged, panel_cols, key)
        for g in groups:
            for part, ls, what in (("harm", "-", "h(->A)"), ("harm_self", "--", "h(A->A)")):
                col = f"judge.{g}.{part}.throughput"
                rows = sub.filter(pl.col(col).is_not_null())
                if rows.is_empty():
                    continue
                agg = rows.group_by(x).agg(pl.col(col).cast(pl.Float64).mean().alias("m"))
                pts = sorted((xmap[r[x]], r["m"]) for r in agg.iter_rows(named=True))
                xs, ms = (np.array(v) for v in zip(*pts))
                ax.plot(xs, ms, color=colors[g], ls=ls, marker="o" if ls == "-" else "s", ms=4, lw=1.6,
                        label=f"A = {g}: {what}")
        _style_x(ax, sc, xmap, x)
        ax.set_ylim(-0.02, 1.02)
        ax.set_title(_facet_title(panel_cols, key), fontsize=10)
        ax.grid(True, alpha=0.3, which="both")
        ax.set_ylabel("throughput harm")
    _outer_labels(axs)
    _legend(fig, axs, None)
    seeds = judged["seed"].n_unique()
    fig.suptitle(f"{data.name}: throughput harm of each flow group A vs {x}\n"
                 f"solid: by the others; dashed: by a copy of A; mean over {seeds} seed(s)", fontsize=11)
    return _finish(fig, dest)
