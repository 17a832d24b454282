"""The sweep commands of the ``cctestbed`` CLI: ``sweep``, ``plot`` and ``report``.

Exit codes as for ``run``: 0 success; 1 some trials failed (they are recorded) or the run broke
off; 2 the sweep file, the command line or the output directory is not usable, and nothing is
written.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, Optional

import typer

from ..console import err, escape, fail, out, refuse


if TYPE_CHECKING:
    from rich.table import Table

from ..units import human_size


def _refuse(source: str, problems: list[str], what: str = "sweep") -> NoReturn:
    refuse(f"{source} is not a valid {what}", problems)


def _duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


#: A dry run lists at most this many trials.
LIST_TRIALS = 200


def _trials_table(sweep: Any, store: Any, specs: Any) -> Table:
    from rich.table import Table
    from rich.text import Text

    t = Table(show_edge=False, pad_edge=False, header_style="bold")
    t.add_column("#", justify="right")
    for c in sweep.columns:
        t.add_column(c)
    t.add_column("seed", justify="right")
    t.add_column("key")
    t.add_column("state")
    for s in specs:
        if store is not None and store.is_done(s.key):
            state = Text("done", style="green")
        elif store is not None and store.failure(s.key):
            state = Text.assemble(("failed", "red"), " (will run again)")
        else:
            state = Text("to run")
        t.add_row(str(s.index), *(str(s.values[c]) for c in sweep.columns), str(s.seed), s.key, state)
    return t


#: A dry run lists (and checks against a sweep directory) every trial of a sweep of up to this
#: many; a larger one is estimated from a sample of its points, never enumerated.
DRY_RUN_TRIALS = 2000


def sweep_command(
    sweep_file: Optional[Path] = typer.Argument(
        None, help="Sweep file (TOML, or JSON if it ends in .json); with --resume, defaults to DIR's own."
    ),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="Sweep directory (default: results/<name>)."),
    workers: Optional[int] = typer.Option(
        None, "--workers", "-j", min=1, help="Local worker processes (default: all cores)."
    ),
    cluster: Optional[str] = typer.Option(
        None, "--cluster", help="Run on a Dask distributed scheduler, e.g. tcp://host:8786."
    ),
    resume: bool = typer.Option(
        False, "--resume", help="Continue in DIR even if it holds another version of the sweep (finished trials are reused)."
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="List the trials and the estimated cost; run nothing."),
    trial_plots: bool = typer.Option(False, "--trial-plots", help="Also draw each trial's stacked plot (trial.png)."),
    allow_large: bool = typer.Option(
        False, "--allow-large", help="Run trials past the resource limits, and sweeps of more than 100,000 trials."
    ),
    until: Optional[str] = typer.Option(
        None, "--until", help="Add seeds per point until e.g. 'ci95(groups.bbr.share) <= 0.02' (Student-t 95 % "
        "half-width, in the metric's units, or '5%' of the point's mean)."
    ),
    max_seeds: Optional[int] = typer.Option(
        None, "--max-seeds", min=2, help="With --until: seeds per point at most (default 30)."
    ),
    judge: bool = typer.Option(
        False, "--judge", help="Also judge every trial by Ware et al.'s harm (as cctestbed judge): run each flow "
        "group's baselines (alone, beside a copy of itself) once, and add judge.<group>.* columns."
    ),
    judge_cache: Optional[Path] = typer.Option(
        None, "--judge-cache", help="With --judge: directory of cached baseline runs.",
        show_default="$CCTESTBED_CACHE/judge, else ~/.cache/cctestbed/judge",
    ),
) -> None:
    """Run every trial of a sweep (axes x seeds) and collect trials.parquet; finished trials are kept."""
    from .store import Store, StoreBusy, StoreMismatch
    from .spec import MAX_SWEEP_TRIALS, SweepError, load_sweep, parse_sweep

    if cluster is not None:
        from .execute import check_cluster_address

        try:
            check_cluster_address(cluster)
        except ValueError as e:
            fail(f"{e}; nothing was written")

    if sweep_file is None:
        if not (resume and output is not None):
            fail("give a SWEEP_FILE, or --resume with -o DIR to continue the sweep stored in DIR")
        meta_path = output / "sweep.json"
        if not meta_path.is_file():
            fail(f"{output} holds no sweep (no sweep.json); give the SWEEP_FILE")
        from ..results import DamagedFile
        from .store import read_meta

        try:
            sweep = parse_sweep(read_meta(output)["sweep"], source=str(meta_path), allow_large=allow_large)
        except DamagedFile as e:
            fail(f"{e}; give the SWEEP_FILE with --resume to run it into {output} again")
        except SweepError as e:
            _refuse(str(meta_path), e.problems)
    else:
        try:
            sweep = load_sweep(sweep_file, allow_large=allow_large)
        except SweepError as e:
            _refuse(str(sweep_file), e.problems)
    if cluster is not None and workers is not None:
        fail("--workers sets local processes; with --cluster the cluster's workers run the trials")
    rule, max_seeds = _until_rule(sweep, until, max_seeds, output if sweep_file is None else None)
    if judge_cache is not None and not judge:
        fail("--judge-cache goes with --judge")
    if judge and rule is not None:
        fail("--judge does not go with --until (an adaptive sweep's seeds are not known ahead); nothing was written")
    dest = output if output is not None else Path("results") / sweep.name
    store = Store(dest)
    try:
        store.check_compatible(sweep, resume)
    except StoreMismatch as e:
        fail(str(e))
    n_workers = workers or os.cpu_count() or 1
    if workers is None and _uses_kernel(sweep):
        # real TCP runs in real time: parallel trials would share the cores and skew each other
        n_workers = 1
    known = store if Store.is_sweep_dir(dest) else None
    n_trials = sweep.n_trials
    head = (
        f"[bold]{escape(sweep.name)}[/]: {n_trials:,} trial(s) = {sweep.n_points:,} point(s) x {len(sweep.seeds):,} seed(s)"
        + (f"; axes: {', '.join(f'{a.column} ({len(a.values)})' for a in sweep.axes)}" if sweep.axes else "")
    )
    too_many = (
        f"{n_trials:,} trials; a sweep of more than {MAX_SWEEP_TRIALS:,} is refused as too large: "
        "see its cost with --dry-run, or pass --allow-large to run it"
    )

    if judge:
        _check_judge(sweep, str(sweep_file or output))

    if dry_run:
        from .execute import estimate

        out.print(head, markup=True)
        if sweep.checked and n_trials <= DRY_RUN_TRIALS:
            todo = [s for s in sweep.specs if known is None or not known.is_done(s.key)]
            listed = sweep.specs[:LIST_TRIALS]
            out.print(_trials_table(sweep, known, listed))
            if len(sweep.specs) > len(listed):
                out.print(f"... and {len(sweep.specs) - len(listed):,} more trial(s)")
            sample, scale = todo, 1.0
        else:
            # too many trials to list here: estimated from a sample (every axis value, a few hundred
            # points, each with its first seed: a trial's cost does not depend on its seed); the
            # whole sweep is checked when it runs
            points = sweep.sample_points()
            sample = []
            for p in points:
                labels, trial = sweep.point_trial(p)
                sample.append(sweep.spec(p, 0, trial, labels))
            todo = sample
            scale = n_trials / len(sample)
            out.print(_trials_table(sweep, known, sample[:20]))
            what = (f"a sample of {len(sample)} of the {sweep.n_points:,} points (every value of every axis)"
                    if len(sample) < sweep.n_points else f"every point ({sweep.n_points:,})")
            out.print(
                f"... {what}, each with its first of {len(sweep.seeds):,} seed(s), was checked and "
                f"timed for the {n_trials:,} trial(s); every point is checked when the sweep runs"
                + (f"; trials already finished in {dest} are skipped then" if known is not None else "")
            )
        with err.status("timing a short probe of the heaviest trial ...", spinner="dots"):
            est = estimate(sweep, todo, n_workers if cluster is None else 1, scale=scale)
        out.print(
            f"to run: {est.trials:,} trial(s), {_duration(est.simulated_s)} of simulated time; "
            f"estimated {_duration(est.cpu_s)} of CPU"
            + (f", about {_duration(est.wall_s)} with {est.workers} worker(s) here" if cluster is None else
               " (divide by the cluster's worker count)")
            + (f"; about {human_size(est.disk_bytes)} of telemetry in {dest}" if sweep.telemetry == "full" else
               f"; summaries only in {dest} (telemetry = \"summary\")")
        )
        if sweep.checked and n_trials <= DRY_RUN_TRIALS and len(todo) < len(sweep.specs):
            out.print(f"{len(sweep.specs) - len(todo)} trial(s) already finished in {dest} are skipped")
        if n_trials > MAX_SWEEP_TRIALS and not allow_large:
            out.print(f"note: {too_many}")
        if rule is not None:
            out.print(f"--until {rule.text!r}: this is the first round ({max(2, len(sweep.seeds))} seed(s) a point); "
                      f"points not yet within it then get one seed more a round, up to {max_seeds} a point "
                      f"({max_seeds / max(2, len(sweep.seeds)):.3g} times this at most)")
        return

    if n_trials > MAX_SWEEP_TRIALS and not allow_large:
        fail(f"{sweep.source or sweep.name}: {too_many}; nothing was written")
    if not sweep.checked:
        with err.status(f"checking every one of the {sweep.n_points:,} points ...", spinner="dots"):
            try:
                sweep.check()
            except SweepError as e:
                _refuse(str(sweep_file or output), e.problems)

    from .execute import connect, run_sweep

    client = None
    if cluster is not None:  # connected before anything is created in the output directory
        with err.status(f"connecting to {cluster} ...", spinner="dots"):
            try:
                client = connect(cluster)
            except RuntimeError as e:
                fail(f"{e}; nothing was written")

    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    progress = Progress(
        SpinnerColumn(),
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("[red]{task.fields[failed]} failed[/]" ),
        TextColumn("elapsed"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=err.rich,
        transient=False,
    )
    task = progress.add_task(sweep.name, total=n_trials, failed=0)

    def report(event: str, spec: Any, res: dict[str, Any]) -> None:
        if event == "start":
            progress.update(task, total=res["todo"])
            where = f"on {cluster}" if cluster else f"with {min(n_workers, max(res['todo'], 1))} worker process(es)"
            err.print(head, markup=True)
            if res["skipped"]:
                err.print(f"{res['skipped']} trial(s) already finished in {dest}: skipped")
            if res["todo"]:
                err.print(f"running {res['todo']} trial(s) {where}")
            progress.start()
            return
        if event == "failed":
            progress.update(task, failed=progress.tasks[0].fields["failed"] + 1)
            vals = ", ".join(f"{k}={v}" for k, v in spec.values.items())
            err.tagged("failed", "red", f"{vals} seed {spec.seed}: {res['error']}")
        progress.advance(task)

    t0 = time.perf_counter()
    if rule is not None:
        _run_adaptive(sweep, dest, rule, max_seeds, n_workers, client, resume, trial_plots, progress, task, head,
                      cluster)
        return
    jrun = None
    try:
        run = run_sweep(sweep, dest, workers=n_workers, cluster=client, resume=resume,
                        trial_plots=trial_plots, report=report)
        if judge and not run.interrupted:
            jrun = _run_judge(sweep, dest, judge_cache, n_workers, client, progress)
    except (StoreBusy, StoreMismatch) as e:
        fail(str(e))
    except (OSError, RuntimeError) as e:
        progress.stop()
        fail(f"the sweep could not run: {e}", 1)
    finally:
        progress.stop()
        if client is not None:
            client.close()
    wall = time.perf_counter() - t0
    out.print(
        escape(f"{sweep.name}: {run.done} trial(s) run, {run.skipped} already finished, {run.failed} failed"
               f" in {_duration(wall)}") + (" [yellow](interrupted)[/]" if run.interrupted else ""),
        markup=True,
    )
    if jrun is not None:
        _judge_summary(jrun, dest)
    out.print(f"table:   {dest / 'trials.parquet'}")
    out.print(f"plots:   cctestbed plot {dest}    report: cctestbed report {dest}")
    if run.failed:
        out.print(f"failed trials are recorded in {dest / 'failed'} and run again on the next sweep into {dest}")
    if run.interrupted or (jrun is not None and jrun.interrupted):
        raise typer.Exit(130)
    if run.failed or (jrun is not None and jrun.failed):
        raise typer.Exit(1)


def _check_judge(sweep: Any, source: str) -> None:
    """Exit 2, naming the reason, unless every trial of the sweep can be judged."""
    from .judge import problems

    with err.status(f"checking that the {sweep.n_points:,} point(s) can be judged ...", spinner="dots"):
        why = problems(sweep)
    if why:
        fail(f"--judge: {source} cannot be judged: " + "; ".join(why) + "; nothing was written")


def _run_judge(sweep: Any, dest: Path, cache: Optional[Path], n_workers: int, client: Any, progress: Any) -> Any:
    """sweep --judge's baselines, after the sweep's trials (cctestbed.sweep.judge)."""
    from ..judging import default_cache
    from .judge import run_judgements

    state: dict[str, Any] = {}

    def report(event: str, res: dict[str, Any]) -> None:
        if event == "start":
            if res["todo"] or res["cached"]:
                err.print(f"judge: {res['todo'] + res['cached']} baseline run(s): {res['cached']} in the cache, "
                          f"running {res['todo']}")
            if res["todo"]:
                state["task"] = progress.add_task("judge baselines", total=res["todo"], failed=0)
            return
        task = state["task"]
        if event == "failed":
            progress.update(task, failed=progress.tasks[-1].fields["failed"] + 1)
            err.tagged("failed", "red", f"judge baseline: {res['error']}")
        progress.advance(task)

    return run_judgements(sweep, dest, cache if cache is not None else default_cache(), workers=n_workers,
                          cluster=client, report=report)


def _judge_summary(jrun: Any, dest: Path) -> None:
    out.print(f"judge: {jrun.judged} trial(s) judged, {jrun.already} judged before, of {jrun.trials} finished; "
              f"{jrun.baselines} distinct baseline run(s): {jrun.cached} from the cache, {jrun.simulated} run"
              + (f", {jrun.failed} failed" if jrun.failed else ""))
    for label, v in jrun.verdicts.items():
        n = sum(v.values())
        out.print(f"  others beside {label}: deployable in {v.get('deployable', 0)} of {n} trial(s)"
                  + (f", not judged in {v['None']}" if v.get("None") else ""))
    for e in jrun.errors[:5]:
        err.tagged("judge", "red", e)
    out.print(f"harm:    judge.<group>.* columns of {dest / 'trials.parquet'}; judgements in {dest / 'judge'}")


def _until_rule(sweep: Any, until: Optional[str], max_seeds: Optional[int],
                resume_dir: Optional[Path]) -> tuple[Any, int]:
    """The --until rule (parsed, checked against the sweep's groups) and --max-seeds; with
    ``--resume -o DIR`` and no --until, the rule DIR's adaptive sweep ran with. Exits 2 on a bad one."""
    from .adaptive import DEFAULT_MAX_SEEDS, UntilError, group_labels, parse_until, read_adaptive

    if until is None and resume_dir is not None:
        stored = read_adaptive(resume_dir)
        if stored and isinstance(stored.get("until"), dict):
            until = str(stored["until"].get("text"))
            if max_seeds is None and isinstance(stored.get("max_seeds"), int):
                max_seeds = stored["max_seeds"]
    if until is None:
        if max_seeds is not None:
            fail("--max-seeds goes with --until (the stopping rule it bounds)")
        return None, 0
    n = DEFAULT_MAX_SEEDS if max_seeds is None else max_seeds
    try:
        rule = parse_until(until, sorted(group_labels(sweep)))
    except UntilError as e:
        fail(f"{e}; nothing was written")
    start = max(2, len(sweep.seeds))
    if n < start:
        fail(f"--max-seeds {n}: below the {start} seed(s) every point starts with (the sweep's seeds, at least 2 "
             "for an interval); nothing was written")
    return rule, n


def _run_adaptive(sweep: Any, dest: Path, rule: Any, max_seeds: int, n_workers: int, client: Any, resume: bool,
                  trial_plots: bool, progress: Any, task: Any, head: str, cluster: Optional[str]) -> None:
    """`sweep --until`: rounds of trials until every point's interval is tight or at --max-seeds."""
    from .adaptive import UntilError, run_adaptive
    from .store import StoreBusy, StoreMismatch

    state = {"base": 0}

    def on_round(n: int, open_points: int, todo: int) -> None:
        if n == 1:
            err.print(head, markup=True)
            err.print(f"until {escape(rule.text)} (95 % Student-t interval over each point's seeds), "
                      f"at most {max_seeds} seeds a point")
        else:
            err.print(f"round {n}: {open_points} point(s) not yet within the bound get one more seed: {todo} trial(s)")
        state["base"] = int(progress.tasks[0].completed)
        progress.update(task, total=state["base"] + todo)
        progress.start()

    def report(event: str, spec: Any, res: dict[str, Any]) -> None:
        if event == "start":
            return
        if event == "failed":
            progress.update(task, failed=progress.tasks[0].fields["failed"] + 1)
            vals = ", ".join(f"{k}={v}" for k, v in spec.values.items())
            err.tagged("failed", "red", f"{vals} seed {spec.seed}: {res['error']}")
        progress.advance(task)

    t0 = time.perf_counter()
    try:
        run = run_adaptive(sweep, dest, rule, max_seeds, workers=n_workers, cluster=client, resume=resume,
                           trial_plots=trial_plots, report=report, on_round=on_round)
    except UntilError as e:
        progress.stop()
        fail(str(e))
    except (StoreBusy, StoreMismatch) as e:
        progress.stop()
        fail(str(e))
    except (OSError, RuntimeError) as e:
        progress.stop()
        fail(f"the sweep could not run: {e}", 1)
    finally:
        progress.stop()
        if client is not None:
            client.close()
    wall = time.perf_counter() - t0
    seeds = [len(p.seeds) for p in run.points]
    out.print(escape(
        f"{sweep.name}: {run.done} trial(s) run, {run.skipped} already finished, {run.failed} point(s) with failed "
        f"trials, in {run.rounds} round(s), {_duration(wall)}") + (" [yellow](interrupted)[/]" if run.interrupted else ""),
        markup=True)
    conv = len(run.points) - len(run.not_converged)
    out.print(f"until {rule.text}: {conv} of {len(run.points)} point(s) converged; seeds per point "
              f"{min(seeds, default=0)}-{max(seeds, default=0)}, {sum(seeds)} in all (at most {max_seeds} a point)")
    from rich.table import Table
    from rich.text import Text

    t = Table(show_edge=False, pad_edge=False, header_style="bold")
    for c in sweep.columns:
        t.add_column(c)
    for c in ("seeds", "mean", "ci95 +-", "bound", "state"):
        t.add_column(c, justify="right" if c != "state" else "left")
    for p in run.points:
        lim = None if p.mean is None else rule.limit(p.mean)
        style = "green" if p.status == "converged" else "red"
        t.add_row(*(str(p.values[c]) for c in sweep.columns), str(len(p.seeds)), _num(p.mean), _num(p.half_width),
                  _num(lim), Text(p.status, style=style))
    out.print(t)
    if run.not_converged:
        out.print(f"not converged: {len(run.not_converged)} point(s) (listed above; sweep.json 'adaptive')")
    out.print(f"table:   {dest / 'trials.parquet'}    per point: {dest / 'sweep.json'} ('adaptive')")
    out.print(f"plots:   cctestbed plot {dest}    report: cctestbed report {dest}")
    if run.interrupted:
        raise typer.Exit(130)
    if run.failed:
        raise typer.Exit(1)


def _num(v: Optional[float]) -> str:
    return "-" if v is None else f"{v:.4g}"


def plot_command(
    directory: Path = typer.Argument(..., help="A trial's results directory, or a sweep directory."),
    x: Optional[str] = typer.Option(None, "--x", help="Column on the x axis (default: queue, else the first axis)."),
    y: Optional[str] = typer.Option(
        None, "--y", help="Metric on the y axis, e.g. total.loss_pct or share (default: every summary plot)."
    ),
    by: Optional[str] = typer.Option(None, "--by", help="One line per value of this column."),
    facet: Optional[str] = typer.Option(None, "--facet", help="One panel per value of this column."),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="Figure file (.png, .svg or .pdf) for one plot, or directory for a sweep's plots."),
    kind: str = typer.Option("trial", "--kind", help="trial (the stacked plot) or tseq (a flow's time-sequence plot)."),
    flow: int = typer.Option(0, "--flow", help="--kind tseq: the flow to plot."),
    t_from: Optional[float] = typer.Option(None, "--from", help="--kind tseq: start of the time range (s)."),
    t_to: Optional[float] = typer.Option(None, "--to", help="--kind tseq: end of the time range (s)."),
) -> None:
    """Draw a trial's stacked plot, a flow's time-sequence plot from captures (--kind tseq), or a
    sweep's summary plots (loss, utilization, shares vs queue)."""
    from ..destination import undone_if_interrupted
    from ..results import DamagedFile
    from .store import Store

    if not directory.is_dir():
        fail(f"{directory}: no such directory")
    if kind not in ("trial", "tseq"):
        fail(f"--kind {kind}: valid are trial, tseq")
    if output is not None and (kind == "tseq" or y is not None or not Store.is_sweep_dir(directory)):
        from ..destination import FIGURE_SUFFIXES, DestinationError, check_output_file

        try:  # one figure: checked before anything is drawn
            check_output_file(output, FIGURE_SUFFIXES)
        except DestinationError as e:
            fail(f"{e}; nothing was written")
    if kind == "tseq":
        from ..plot import save_figure
        from ..tseq import TseqError, plot_tseq

        if any(v is not None for v in (x, y, by, facet)):
            fail("--x, --y, --by and --facet apply to sweep directories, not to --kind tseq")
        if flow < 0:
            fail(f"--flow {flow}: must be >= 0")
        try:
            fig = plot_tseq(directory, flow, t_from, t_to)
        except TseqError as e:
            fail(str(e))
        dest = output if output is not None else directory / f"tseq-flow{flow}.png"
        with undone_if_interrupted(dest):
            save_figure(fig, str(dest))
        out.print(f"plot: {dest}")
        return
    if any(v is not None for v in (t_from, t_to)) or flow != 0:
        fail("--flow, --from and --to apply to --kind tseq")
    named = {k: v for k, v in (("--x", x), ("--by", by), ("--facet", facet)) if v is not None}
    for k1, v1 in named.items():
        for k2, v2 in named.items():
            if k1 < k2 and v1 == v2:
                fail(f"{k1} and {k2} both name '{v1}'; the x axis, the lines and the panels need different columns")
    if Store.is_sweep_dir(directory):
        from .plot import PlotError, SweepData, default_plots, plot_metric

        try:
            data = SweepData.load(directory)
            if y is None:
                dest = output if output is not None else directory / "plots"
                with undone_if_interrupted(dest):
                    paths = default_plots(data, dest, x=x, by=by, facet=facet)
            else:
                dest = output if output is not None else directory / "plots" / f"{y.replace('.', '_')}.png"
                with undone_if_interrupted(dest):
                    paths = [plot_metric(data, y, dest, x=x, by=by, facet=facet)]
        except PlotError as e:
            fail(str(e))
        for p in paths:
            out.print(f"plot: {p}")
        return
    if (directory / "summary.json").is_file() and (directory / "flows.parquet").is_file():
        from ..plot import save_figure
        from ..results import PLOT_FILE, TrialResult

        if any(v is not None for v in (x, y, by, facet)):
            fail("--x, --y, --by and --facet apply to sweep directories; a trial has one stacked plot")
        if (directory / "capture.json").is_file() and not (directory / "trial.toml").is_file():
            fail(f"{directory} holds captures analysed without their trial: its trial.png was drawn by analyze; "
                 "--kind tseq plots a flow's packets")
        try:
            result = TrialResult.load(directory)
        except DamagedFile as e:
            fail(str(e))
        dest = output if output is not None else directory / PLOT_FILE
        with undone_if_interrupted(dest):
            save_figure(result.plot(), str(dest))
        out.print(f"plot: {dest}")
        return
    if (directory / "summary.json").is_file() and (directory / "trial.toml").is_file():
        fail(f"{directory} is a trial kept without its time series (its sweep has telemetry = \"summary\"): "
             f"nothing to plot; run the trial (cctestbed run {directory / 'trial.toml'}) or the sweep with "
             "telemetry = \"full\" for them")
    fail(f"{directory} is neither a trial's results directory (summary.json, flows.parquet) "
         "nor a sweep directory (sweep.json, trials.parquet)")


def report_command(
    directory: Path = typer.Argument(..., help="A sweep directory."),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="HTML file (default: DIR/report.html)."),
) -> None:
    """Write a static HTML report of a sweep: its table and every summary plot."""
    from .store import Store

    if not Store.is_sweep_dir(directory):
        fail(f"{directory} is not a sweep directory (no sweep.json)")
    from ..destination import DestinationError, undone_if_interrupted
    from .report import check_report_destination, report_paths, write_report
    from .plot import PlotError

    try:
        check_report_destination(directory, output)
    except DestinationError as e:
        fail(f"{e}; nothing was written")
    page, img_dir = report_paths(directory, output)
    # an existing figure folder is replaced whole or not at all (write_dir); a new one goes on Ctrl-C
    try:
        with undone_if_interrupted(page, *(() if img_dir.exists() else (img_dir,))):
            path = write_report(directory, output)
    except PlotError as e:
        fail(str(e))
    out.print(f"report: {path}")


def bisect_command(
    file: Path = typer.Argument(..., help="A trial file, or a sweep file without axes (its base, seeds, steady window)."),
    field_path: str = typer.Option(..., "--field", help="The trial field to vary, as a sweep axis: link.queue, link.capacity, flows.1.count."),
    range_text: str = typer.Option(..., "--range", help="LO:HI, the same unit at both ends: 0.25bdp:16bdp, 10Mbit:100Mbit, 1:16."),
    metric: str = typer.Option(..., "--metric", help="A numeric trials.parquet column, e.g. groups.bbr.share."),
    threshold: float = typer.Option(..., "--threshold", help="The value it crosses, in the metric's units (a share: 0.5)."),
    steps: int = typer.Option(8, "--steps", min=1, max=60, help="Midpoints to run at most, after the two ends."),
    seeds: Optional[int] = typer.Option(None, "--seeds", min=1, help="Seeds per probe (default: the file's)."),
    scale: Optional[str] = typer.Option(None, "--scale", help="log, linear or integer (default: log for values with a unit, integer for counts, else linear)."),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="Directory (default: results/bisect-<name>-<field>)."),
    workers: Optional[int] = typer.Option(None, "--workers", "-j", min=1, help="Local worker processes (default: all cores)."),
) -> None:
    """Find the value of one field at which a metric crosses a threshold, by bisection (with its bracket)."""
    from ..config import ConfigError, read_trial_file
    from .bisect import BisectError, check_bisect_dir, check_threshold, parse_range, run_bisect
    from .spec import SweepError

    try:
        doc = read_trial_file(file, "trial or sweep file")
    except ConfigError as e:
        _refuse(str(file), e.problems, "trial or sweep file")
    if not isinstance(doc, dict):
        fail(f"{file}: expected a table of settings")
    try:
        rng = parse_range(range_text, field_path, scale)
        check_threshold(metric, threshold)
    except BisectError as e:
        fail(f"{e}; nothing was written")
    stem = re.sub(r"[^A-Za-z0-9._+-]", "_", str(doc.get("name") or file.stem)) or "trial"
    name = f"bisect-{stem}-{re.sub(r'[^A-Za-z0-9]', '_', field_path)}"[:200]
    dest = output if output is not None else Path("results") / name
    try:
        check_bisect_dir(dest)
    except BisectError as e:
        fail(str(e))
    err.print(f"bisecting {escape(field_path)} over {escape(range_text)} ({rng.scale} scale) for {escape(metric)} "
              f"= {threshold:g}, at most {steps} step(s)")

    def on_probe(values: list[Any]) -> None:
        err.print(f"  running {escape(field_path)} = {escape(', '.join(map(str, values)))}")

    try:
        res = run_bisect(doc, dest, field_path, rng, metric, threshold, steps=steps, seeds=seeds,
                         workers=workers or os.cpu_count() or 1, name=name, source=str(file), on_probe=on_probe)
    except SweepError as e:
        _refuse(str(file), e.problems, "bisection")
    except BisectError as e:
        out.print(f"[red]refused:[/] {escape(str(e))}", markup=True)
        if e.partial is not None and e.partial.probes:
            out.print(_probes_table(e.partial, field_path, metric))
        if (dest / "bisect.json").is_file():
            out.print(f"probes: {dest / 'bisect.json'}")
        raise typer.Exit(1)
    except KeyboardInterrupt:
        out.print("interrupted; run the same command again to go on (finished trials are reused)")
        raise typer.Exit(130)
    assert res.lo is not None and res.hi is not None
    out.print(_probes_table(res, field_path, metric))
    lo, hi = sorted((res.lo, res.hi), key=lambda p: p.x)
    out.print(escape(
        f"{metric} {res.direction} through {threshold:g} between {field_path} = {lo.value} ({lo.mean:.4g}) and "
        f"{hi.value} ({hi.mean:.4g}); estimate {rng.value(res.crossing) if res.crossing is not None else '-'} "
        f"({rng.scale} interpolation); {res.steps} step(s) on a {rng.scale} scale"
        + (" (stopped: the bracket cannot be split further)" if res.stopped == "resolution" else "")))
    out.print(f"result:  {dest / 'bisect.json'}    trials: {dest / 'trials.parquet'}")


def _probes_table(res: Any, field_path: str, metric: str) -> Any:
    from rich.table import Table

    t = Table(show_edge=False, pad_edge=False, header_style="bold")
    for c in ("#", field_path, metric, "ci95 +-", "seeds"):
        t.add_column(c, justify="right")
    for i, p in enumerate(res.probes):
        t.add_row(str(i), str(p.value), _num(p.mean), _num(p.half_width), str(len(p.values)))
    return t


def _uses_kernel(sweep: Any) -> bool:
    """Whether any trial of the sweep runs on the kernel backend (read from its base and axes)."""
    if sweep.base.get("backend") == "kernel":
        return True
    return any(a.path == "backend" and "kernel" in a.values for a in sweep.axes)


def register(app: typer.Typer) -> None:
    """Add the sweep commands to the ``cctestbed`` app."""
    app.command("sweep")(sweep_command)
    app.command("plot")(plot_command)
    app.command("report")(report_command)
    app.command("bisect")(bisect_command)
