"""``cctestbed fidelity run | report | check``: the commands of :mod:`cctestbed.fidelity`.

Exit codes as elsewhere: 0 success; 1 trials failed, or (``check``) cells out of tolerance that
the known-deviations file does not list; 2 a bad suite, reference or command line, nothing run.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any, Optional

import typer

from ..console import err, fail, out, refuse


#: Attempts at a kernel rep whose host stalled (:func:`.reference.disturbed`) in one run.
DISTURBED_ATTEMPTS = 3
#: What a rep that is not kept measured, said with why (metric, label, unit): a reader sees what
#: the disturbance did.
NOT_KEPT_SHOWN = (("utilization_pct", "utilization", " %"), ("loss_pct", "loss", " %"), ("rtt_p95_ms", "RTT p95", " ms"))

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="The simulator measured against real Linux: run the suite, report the map, check the simulator.",
)


def _load(suite_file: Path, reps: Optional[int]) -> Any:
    from .suite import SuiteError, load_suite

    try:
        suite = load_suite(suite_file)
    except SuiteError as e:
        refuse(f"{suite_file} is not a valid fidelity suite", e.problems)
    if reps is not None:
        suite.reps = reps
    return suite


def _select(suite: Any, only: Optional[str]) -> None:
    """Keep the scenarios whose id matches the comma-separated glob patterns ``only``."""
    if not only:
        return
    import fnmatch

    pats = [p.strip() for p in only.split(",") if p.strip()]
    keep = [s for s in suite.scenarios if any(fnmatch.fnmatchcase(s.id, p) for p in pats)]
    if not keep:
        fail(f"--scenarios {only!r} matches no scenario; ids are e.g. {', '.join(s.id for s in suite.scenarios[:4])}")
    suite.scenarios = keep


def _reference(suite: Any, path: Optional[Path]) -> Any:
    from .reference import Reference, default_path

    p = path if path is not None else default_path(suite.source)
    try:
        return Reference(p)
    except ValueError as e:
        fail(str(e))


def _progress(title: str, total: int) -> Any:
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn,
                               TimeElapsedColumn, TimeRemainingColumn)

    p = Progress(SpinnerColumn(), TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                 TextColumn("[red]{task.fields[failed]} failed[/]"), TextColumn("elapsed"), TimeElapsedColumn(),
                 TextColumn("ETA"), TimeRemainingColumn(), console=err.rich, transient=False)
    p.add_task(title, total=total, failed=0)
    return p


def run_backend(suite: Any, backend: str, dest: Path, reference: Any = None, workers: Optional[int] = None,
                max_trials: Optional[int] = None, remeasure: bool = False) -> tuple[int, int]:
    """Run the suite's trials on one backend into ``dest`` (a sweep store); (done, failed).

    Kernel trials already in ``reference`` are skipped, unless ``remeasure``; each kernel trial
    that finishes is added to the reference at once, replacing the rep it measures again (and
    those finished in the store but missing from it are added first).
    """
    from ..sweep.execute import run_sweep
    from ..sweep.store import Store
    from .measure import metrics_of_dir
    from .reference import provenance

    sweep = suite.sweep(backend)
    scen_key = {s.key: suite.scenario(s.values["scenario"]).scenario_key(s.seed, backend) for s in sweep.specs}
    store = Store(dest)

    not_kept: dict[str, str] = {}  # sweep key -> why the rep is not in the reference

    def to_reference(spec: Any, save: bool = True) -> None:
        d = store.trial_dir(spec.key)
        row = {"scenario": spec.values["scenario"], "seed": spec.seed, "key": scen_key[spec.key],
               **provenance(d), **metrics_of_dir(d)}
        why = reference.add(row, save=save)
        if why is not None:
            measured = ", ".join(f"{label} {row[m]:.3g}{unit}" for m, label, unit in NOT_KEPT_SHOWN
                                 if isinstance(row.get(m), (int, float)))
            not_kept[spec.key] = why + (f" (it measured {measured})" if measured else "")

    def measure_again(spec: Any, why: str) -> None:
        err.tagged("not kept", "yellow", f"{spec.values['scenario']} seed {spec.seed}: {why}; measuring it again")
        shutil.rmtree(store.trial_dir(spec.key))

    if reference is not None and not remeasure:
        synced = False
        for s in sweep.specs:  # finished in the store but not (or not as measured today) in the reference
            if (not reference.has(scen_key[s.key]) or reference.stale(scen_key[s.key])) and store.is_done(s.key):
                to_reference(s, save=False)
                synced = True
                if s.key in not_kept:
                    measure_again(s, not_kept.pop(s.key))
        if synced:
            reference.save()
        sweep.specs = [s for s in sweep.specs if not reference.has(scen_key[s.key])]
    todo = [s for s in sweep.specs if not store.is_done(s.key)]
    if max_trials is not None and len(todo) > max_trials:
        err.print(f"{backend}: {len(todo) - max_trials} of {len(todo)} trial(s) left for a later run (--max-trials)")
        todo = todo[:max_trials]
        keep = {s.key for s in todo} | {s.key for s in sweep.specs if store.is_done(s.key)}
        sweep.specs = [s for s in sweep.specs if s.key in keep]
    if not todo:
        err.print(f"{backend}: nothing to run ({len(sweep.specs)} trial(s) already finished)")
        return 0, 0
    n_workers = 1 if backend == "kernel" else (workers or os.cpu_count() or 1)
    est = sum(s.trial.duration for s in todo) / 1e9
    err.print(f"{backend}: {len(todo)} trial(s) to run"
              + (f", {est / 60:.0f} min of real time plus set-up" if backend == "kernel" else "")
              + f" -> {dest}")
    progress = _progress(f"{suite.name} on {backend}", len(todo))
    failed = 0

    def report(event: str, spec: Any, res: dict[str, Any]) -> None:
        nonlocal failed
        if event == "start":
            progress.start()
            return
        if event == "failed":
            failed += 1
            progress.update(0, failed=failed)
            err.tagged("failed", "red", f"{spec.values['scenario']} seed {spec.seed}: {res['error']}")
        elif reference is not None:
            to_reference(spec)
        progress.advance(0)

    done = 0
    try:
        for attempt in range(1, DISTURBED_ATTEMPTS + 1):
            run = run_sweep(sweep, dest, workers=n_workers, resume=True, report=report)
            done += run.done
            if run.interrupted or not not_kept:
                break
            for s in sweep.specs:  # a rep measured on a stalled host is measured again
                if s.key in not_kept and attempt < DISTURBED_ATTEMPTS:
                    measure_again(s, not_kept.pop(s.key))
                    progress.update(0, total=progress.tasks[0].total + 1)
                elif s.key in not_kept:  # the next `fidelity run` into this store measures it again
                    err.tagged("not kept", "red", f"{s.values['scenario']} seed {s.seed}: {not_kept[s.key]} in each "
                                                  f"of {DISTURBED_ATTEMPTS} attempts; run `fidelity run` again later")
    finally:
        progress.stop()
    if run.interrupted:
        err.print("interrupted: finished trials are kept" + (" and in the reference" if reference is not None else ""))
        raise typer.Exit(130)
    return done, failed


@app.command("run")
def run_command(
    suite_file: Path = typer.Argument(..., help="Suite file, e.g. fidelity/suite.toml."),
    output: Path = typer.Option(Path("results/fidelity"), "-o", "--output", help="Directory for both backends' trials and the report."),
    reps: Optional[int] = typer.Option(None, "--reps", min=1, help="Seeds per backend (default: the suite's reps)."),
    reference: Optional[Path] = typer.Option(None, "--reference", help="Kernel reference (default: kernel-reference.parquet beside the suite)."),
    backend: Optional[str] = typer.Option(None, "--backend", help="Run only this side: kernel or sim (default: both)."),
    scenarios: Optional[str] = typer.Option(None, "--scenarios", help="Only scenarios whose id matches these globs (comma-separated)."),
    workers: Optional[int] = typer.Option(None, "--workers", "-j", min=1, help="Simulator worker processes (default: all cores); kernel trials run one at a time."),
    max_trials: Optional[int] = typer.Option(None, "--max-trials", min=0, help="Run at most this many kernel trials now (0: only bring the reference up to date from the trials at hand)."),
    remeasure: bool = typer.Option(False, "--remeasure", help="Measure the selected scenarios on the kernel again although the reference holds them (after a change to the kernel backend); give a new --output, whose finished trials are kept on a resume."),
) -> None:
    """Run every scenario on the kernel (skipping reps the reference holds) and on the simulator, then report."""
    suite = _load(suite_file, reps)
    _select(suite, scenarios)
    if backend not in (None, "kernel", "sim"):
        fail(f"--backend: {backend!r}: valid are kernel, sim")
    ref = _reference(suite, reference)
    sides = [backend] if backend else ["kernel", "sim"]
    if "kernel" in sides and os.geteuid() != 0:
        fail("the kernel side requires root (namespaces and qdiscs): run with sudo, or pass --backend sim")
    failed = 0
    for side in sides:
        _, f = run_backend(suite, side, output / side, reference=ref if side == "kernel" else None, workers=workers,
                           max_trials=max_trials if side == "kernel" else None, remeasure=remeasure)
        failed += f
    out.print(f"kernel reference: {ref.path} ({len(ref.rows)} rep(s))")
    _write_report(suite, output, ref)
    if failed:
        raise typer.Exit(1)


def _write_report(suite: Any, output: Path, ref: Any) -> None:
    from .report import collect, write_all

    cells, extra = collect(suite, ref, sim_dir=output / "sim", kernel_dir=output / "kernel")
    for p in write_all(suite, cells, extra, output):
        out.print(f"report: {p}")


@app.command("report")
def report_command(
    directory: Path = typer.Argument(Path("results/fidelity"), help="The directory `fidelity run` wrote (its sim/ and kernel/ stores)."),
    suite_file: Path = typer.Option(Path("fidelity/suite.toml"), "--suite", help="The suite file."),
    reference: Optional[Path] = typer.Option(None, "--reference", help="Kernel reference (default: beside the suite)."),
) -> None:
    """Write fidelity.md, fidelity.json and fidelity.html for what both sides have measured."""
    suite = _load(suite_file, None)
    ref = _reference(suite, reference)
    if not (directory / "sim" / "sweep.json").is_file():
        fail(f"{directory} holds no simulator trials (no sim/sweep.json); run `cctestbed fidelity run {suite_file} "
             f"-o {directory} --backend sim` first")
    _write_report(suite, directory, ref)
    out.print(_headline_of(directory))


def _headline_of(directory: Path) -> str:
    import json

    from .report import headline

    return headline(json.loads((directory / "fidelity.json").read_text(encoding="utf-8")))


def _sim_job(job: tuple[str, dict[str, Any], int]) -> tuple[str, int, dict[str, Any]]:
    """One simulator rep of a scenario, measured (runs in a worker process)."""
    from ..config import parse_trial
    from ..runner import run_trial
    from .measure import scenario_metrics

    sid, doc, seed = job
    r = run_trial(parse_trial({**doc, "seed": seed}))
    return sid, seed, scenario_metrics(r.flows, r.router, r.summary, r.info)


def simulate_suite(suite: Any, scenario_ids: list[str], workers: int, progress: Any = None) -> dict[str, list[dict[str, Any]]]:
    """scenario -> metric dicts of its simulator reps, computed in memory (nothing written)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    jobs = [(sc.id, sc.doc, seed) for sc, seed in suite.jobs("sim") if sc.id in scenario_ids]
    out: dict[str, list[dict[str, Any]]] = {}
    ctx = multiprocessing.get_context("spawn")  # polars and rayon threads do not survive fork
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        for sid, seed, m in pool.map(_sim_job, jobs, chunksize=1):
            out.setdefault(sid, []).append(m)
            if progress is not None:
                progress.advance(0)
    return out


@app.command("check")
def check_command(
    suite_file: Path = typer.Argument(Path("fidelity/suite.toml"), help="The suite file."),
    reference: Optional[Path] = typer.Option(None, "--reference", help="Kernel reference (default: beside the suite)."),
    json_file: Optional[Path] = typer.Option(None, "--json", help="Also write every cell and the totals here."),
    scenarios: Optional[str] = typer.Option(None, "--scenarios", help="Only scenarios whose id matches these globs (comma-separated)."),
    workers: Optional[int] = typer.Option(None, "--workers", "-j", min=1, help="Worker processes (default: all cores)."),
) -> None:
    """Re-run the simulator side against the checked-in kernel reference; exit 1 on an unexplained miss."""
    from .report import build_cells, headline, kernel_metrics, write_json

    suite = _load(suite_file, None)
    _select(suite, scenarios)
    ref = _reference(suite, reference)
    kernel = kernel_metrics(suite, ref)
    if not kernel:
        fail(f"{ref.path} holds no kernel rep of this suite's scenarios: run `sudo cctestbed fidelity run "
             f"{suite_file} --backend kernel` first")
    n = sum(len(suite.seeds_of(sc, "sim")) for sc in suite.scenarios if sc.id in kernel)
    progress = _progress(f"{suite.name}: simulator", n)
    with progress:
        sim = simulate_suite(suite, list(kernel), workers or os.cpu_count() or 1, progress)
    try:
        cells, extra = build_cells(suite, kernel, sim)
    except ValueError as e:  # a damaged known-deviations file
        fail(str(e))
    misses = [c for c in cells if c.verdict == "miss"]
    for c in misses:
        def f(x: Optional[float]) -> str:
            return "-" if x is None else f"{x:.3g}"
        out.tagged("miss", "red", f"{c.scenario}: {c.metric}: simulator {f(c.sim_mean)}, kernel {f(c.kernel_mean)} "
                                  f"[{f(c.kernel_min)}, {f(c.kernel_max)}], allowed +-{f(c.allowed)}")
    for s in extra["stale_known"]:
        out.tagged("note", "yellow", f"known deviation now within tolerance: {s}")
    out.print(headline(extra))
    if json_file is not None:
        json_file.parent.mkdir(parents=True, exist_ok=True)
        write_json(cells, extra, json_file)
    if misses:
        raise typer.Exit(1)


def register(main: typer.Typer) -> None:
    main.add_typer(app, name="fidelity")
