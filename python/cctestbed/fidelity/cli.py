"""``cctestbed fidelity run | report | check``: the commands of :mod:`cctestbed.fidelity`.

Exit codes as elsewhere: 0 success; 1 trials failed, or (``check``) cells out of tolerance that
the known-deviations file does not list; 2 a bad suite, reference or command line, nothing run.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="The simulator measured against real Linux: run the suite, report the map, check the simulator.",
)


def _fail(msg: str, code: int = 2) -> None:
    err.print("[bold red]error[/]: ", end="")
    err.print(msg, markup=False)
    raise typer.Exit(code)


def _load(suite_file: Path, reps: Optional[int]) -> Any:
    from .suite import SuiteError, load_suite

    try:
        suite = load_suite(suite_file)
    except SuiteError as e:
        err.print(f"[bold red]error[/]: {suite_file} is not a valid fidelity suite ({len(e.problems)} problem(s)):")
        for p in e.problems:
            err.print(f"  - {p}", markup=False)
        raise typer.Exit(2)
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
        _fail(f"--scenarios {only!r} matches no scenario; ids are e.g. {', '.join(s.id for s in suite.scenarios[:4])}")
    suite.scenarios = keep


def _reference(suite: Any, path: Optional[Path]) -> Any:
    from .reference import Reference, default_path

    p = path if path is not None else default_path(suite.source)
    try:
        return Reference(p)
    except ValueError as e:
        _fail(str(e))


def _progress(title: str, total: int) -> Any:
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn,
                               TimeElapsedColumn, TimeRemainingColumn)

    p = Progress(SpinnerColumn(), TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                 TextColumn("[red]{task.fields[failed]} failed[/]"), TextColumn("elapsed"), TimeElapsedColumn(),
                 TextColumn("ETA"), TimeRemainingColumn(), console=err, transient=False)
    p.add_task(title, total=total, failed=0)
    return p


def run_backend(suite: Any, backend: str, dest: Path, reference: Any = None, workers: Optional[int] = None) -> tuple[int, int]:
    """Run the suite's trials on one backend into ``dest`` (a sweep store); (done, failed).

    Kernel trials already in ``reference`` are skipped; each kernel trial that finishes is
    added to the reference at once (and those finished in the store but missing from it).
    """
    from ..execute import run_sweep
    from ..store import Store
    from .measure import metrics_of_dir
    from .reference import provenance

    sweep = suite.sweep(backend)
    scen_key = {(s.key): suite.scenario(s.values["scenario"]).scenario_key(s.seed, backend) for s in sweep.specs}
    store = Store(dest)

    def to_reference(spec: Any) -> None:
        d = store.trial_dir(spec.key)
        row = {"scenario": spec.values["scenario"], "seed": spec.seed, "key": scen_key[spec.key],
               **provenance(d), **metrics_of_dir(d)}
        reference.add(row)

    if reference is not None:
        for s in sweep.specs:  # finished in the store but not yet in the reference
            if not reference.has(scen_key[s.key]) and store.is_done(s.key):
                to_reference(s)
        sweep.specs = [s for s in sweep.specs if not reference.has(scen_key[s.key])]
    todo = [s for s in sweep.specs if not store.is_done(s.key)]
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
            progress.console.print(f"[red]failed[/]: {spec.values['scenario']} seed {spec.seed}: {res['error']}",
                                   highlight=False)
        elif reference is not None:
            to_reference(spec)
        progress.advance(0)

    try:
        run = run_sweep(sweep, dest, workers=n_workers, resume=True, report=report)
    finally:
        progress.stop()
    if run.interrupted:
        err.print("interrupted: finished trials are kept" + (" and in the reference" if reference is not None else ""))
        raise typer.Exit(130)
    return run.done, failed


@app.command("run")
def run_command(
    suite_file: Path = typer.Argument(..., help="Suite file, e.g. fidelity/suite.toml."),
    output: Path = typer.Option(Path("results/fidelity"), "-o", "--output", help="Directory for both backends' trials and the report."),
    reps: Optional[int] = typer.Option(None, "--reps", min=1, help="Seeds per backend (default: the suite's reps)."),
    reference: Optional[Path] = typer.Option(None, "--reference", help="Kernel reference (default: kernel-reference.parquet beside the suite)."),
    backend: Optional[str] = typer.Option(None, "--backend", help="Run only this side: kernel or sim (default: both)."),
    scenarios: Optional[str] = typer.Option(None, "--scenarios", help="Only scenarios whose id matches these globs (comma-separated)."),
    workers: Optional[int] = typer.Option(None, "--workers", "-j", min=1, help="Simulator worker processes (default: all cores); kernel trials run one at a time."),
) -> None:
    """Run every scenario on the kernel (skipping reps the reference holds) and on the simulator, then report."""
    suite = _load(suite_file, reps)
    _select(suite, scenarios)
    if backend not in (None, "kernel", "sim"):
        _fail(f"--backend: {backend!r}: valid are kernel, sim")
    ref = _reference(suite, reference)
    sides = [backend] if backend else ["kernel", "sim"]
    if "kernel" in sides and os.geteuid() != 0:
        _fail("the kernel side requires root (namespaces and qdiscs): run with sudo, or pass --backend sim")
    failed = 0
    for side in sides:
        _, f = run_backend(suite, side, output / side, reference=ref if side == "kernel" else None, workers=workers)
        failed += f
    out.print(f"kernel reference: {ref.path} ({len(ref.rows)} rep(s))")
    _write_report(suite, output, ref)
    if failed:
        raise typer.Exit(1)


def _write_report(suite: Any, output: Path, ref: Any) -> None:
    try:
        from .report import collect, write_all
    except ImportError:  # pragma: no cover
        return
    cells, extra = collect(suite, ref, sim_dir=output / "sim", kernel_dir=output / "kernel")
    for p in write_all(suite, cells, extra, output):
        out.print(f"report: {p}")


def register(main: typer.Typer) -> None:
    main.add_typer(app, name="fidelity")
