"""The ``cctestbed`` command: run and validate trial files.

Exit codes: 0 success; 1 the run failed; 2 the trial (or the command line) is invalid, in
which case nothing is written; 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, Optional

import typer
from typer.core import TyperGroup

from . import interrupt
from .console import err, escape, fail, out, refuse
from .units import human_rate, human_size, human_time

if TYPE_CHECKING:
    from rich.table import Table

    from .config import ConfigError


class CommandGroup(TyperGroup):
    """The commands: Ctrl-C while one runs ends it with one line and exit code 130; a file the
    system cannot write or read (a full disk, a vanished directory) with one line and exit 1."""

    def invoke(self, ctx: Any) -> Any:
        try:
            interrupt.command_started()
            return super().invoke(ctx)
        except (KeyboardInterrupt, Exception) as e:
            if _interrupted(e):
                err.print("interrupted")
                raise typer.Exit(130) from None
            if isinstance(e, OSError):
                fail(f"{ctx.invoked_subcommand}: {e}", code=1)
            raise


def _interrupted(e: BaseException) -> bool:
    """Whether ``e`` is the end of a Ctrl-C: its KeyboardInterrupt, or an error of its own that a
    library raised in its place (pydantic building a schema, a module loading)."""
    return isinstance(e, KeyboardInterrupt) or (interrupt.pressed and not isinstance(e, (typer.Exit, typer.Abort)))


app = typer.Typer(
    cls=CommandGroup,
    add_completion=False,
    no_args_is_help=True,
    help="Congestion-control testbed: run trials on a deterministic packet-level dumbbell simulator.",
)


def _version(value: bool) -> None:
    if value:
        from . import __version__, core_version

        out.print(f"cctestbed {__version__} (core {core_version()})")
        raise typer.Exit()


@app.callback()
def main(
    version: Optional[bool] = typer.Option(
        None, "--version", callback=_version, is_eager=True, help="Show the version and exit."
    ),
) -> None:
    """Congestion-control testbed."""


def _refuse(e: ConfigError) -> NoReturn:
    refuse(f"{e.source or 'trial'} is not valid", e.problems)


def _fmt(x: Optional[float], spec: str, scale: float = 1.0) -> str:
    return "-" if x is None else format(x * scale, spec)


def _summary_table(summary: dict[str, Any]) -> Table:
    from rich.table import Table

    t = Table(title="per flow (steady window)", title_justify="left", show_edge=False, pad_edge=False)
    for c in ("flow", "group", "goodput", "retrans %", "RTT p50 ms"):
        t.add_column(c, justify="left" if c == "group" else "right")
    for f in summary["flows"]:
        t.add_row(
            str(f["id"]),
            str(f["group"]),
            "-" if f["goodput_bps"] is None else human_rate(f["goodput_bps"]),
            _fmt(f["retrans_pct"], ".2f"),
            _fmt(f["rtt_p50_ms"], ".1f"),
        )
    return t


def _totals_table(summary: dict[str, Any]) -> Table:
    from rich.table import Table

    tot, q, rtt = summary["total"], summary["queue"], summary["rtt"]
    t = Table(show_header=False, show_edge=False, pad_edge=False, box=None)
    t.add_column(style="bold")
    t.add_column()
    t.add_row(
        "total",
        f"utilization {_fmt(tot['utilization'], '.1f', 100)} %, goodput "
        f"{'-' if tot['goodput_bps'] is None else human_rate(tot['goodput_bps'])}, Jain {_fmt(tot['jain'], '.3f')}",
    )
    t.add_row("loss", f"{_fmt(tot['loss_pct'], '.3f')} % at the router, retrans {_fmt(tot['retrans_pct'], '.3f')} %")
    for name, g in summary["groups"].items():
        t.add_row(
            name,
            f"{g['flows']} flow(s), share {_fmt(g['share'], '.1f', 100)} %, "
            f"retrans {_fmt(g['retrans_pct'], '.3f')} %, Jain {_fmt(g['jain'], '.3f')}",
        )
    for name, g in summary.get("fct", {}).items():
        t.add_row(
            f"{name} FCT",
            f"{g['completed']} completed, {g['unfinished']} unfinished; p50 {_fmt(g['fct_p50_ms'], '.1f')} ms, "
            f"p99 {_fmt(g['fct_p99_ms'], '.1f')} ms, mean slowdown {_fmt(g['slowdown_mean'], '.2f')}",
        )
    t.add_row("queue", f"mean {_fmt(q['mean_bdp'], '.2f')} BDP, p95 {_fmt(q['p95_bdp'], '.2f')} BDP")
    t.add_row(
        "RTT",
        f"p50 {_fmt(rtt['p50_ms'], '.1f')} ms, p95 {_fmt(rtt['p95_ms'], '.1f')} ms, "
        f"min {_fmt(rtt['min_ms'], '.1f')} ms",
    )
    if "scores" in summary:
        from .phenomena import describe as phenomena_lines
        from .scores import describe as scores_line

        t.add_row("scores", scores_line(summary["scores"]))
        for i, line in enumerate(phenomena_lines(summary.get("phenomena", {})) or ["none detected"]):
            t.add_row("phenomena" if i == 0 else "", line)
    rev = summary.get("reverse")
    if rev is not None:  # traffic both ways: the lines above are the forward direction's
        rq = rev["queue"]
        t.add_row(
            "reverse",
            f"utilization {_fmt(rev['utilization'], '.1f', 100)} %, goodput "
            f"{'-' if rev['goodput_bps'] is None else human_rate(rev['goodput_bps'])}, "
            f"loss {_fmt(rev['loss_pct'], '.3f')} %, queue mean {_fmt(rq['mean_bytes'], '.0f', 1e-3)} KB, "
            f"RTT p50 {_fmt(rev['rtt']['p50_ms'], '.1f')} ms",
        )
    return t


@app.command()
def run(
    trial_file: Path = typer.Argument(..., help="Trial file (TOML, or JSON if it ends in .json)."),
    output: Optional[Path] = typer.Option(
        None, "-o", "--output", help="Results directory.", show_default="results/<name>"
    ),
    force: bool = typer.Option(False, "--force", "-f", help="Replace the results directory if it exists."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Override the trial's seed."),
    backend: Optional[str] = typer.Option(
        None, "--backend", help="sim (the simulator) or kernel (real Linux TCP; root).",
        show_default="the trial's, else sim",
    ),
    link_emulator: Optional[str] = typer.Option(
        None, "--link-emulator",
        help="Kernel backend: tc (netem + htb), userspace (delay lines + htb) or full (the emulator runs the "
             "simulator's bottleneck and queue disciplines).",
        show_default="full where the trial needs it (aqm, extra_delay), else tc where netem exists, else userspace"
    ),
    capture: Optional[bool] = typer.Option(
        None, "--capture/--no-capture", help="Write packet captures of every sender and receiver (or none)."
    ),
    allow_large: bool = typer.Option(
        False, "--allow-large", help="Run a trial past the resource limits (flows, telemetry rows, packets)."
    ),
    plot: bool = typer.Option(
        False, "--plot/--no-plot", help="Also draw the stacked plot (trial.png; later: cctestbed plot DIR)."
    ),
) -> None:
    """Run one trial and write its results directory."""
    try:
        _run(trial_file, output, force, seed, backend, link_emulator, capture, allow_large, plot)
    except (KeyboardInterrupt, Exception) as e:
        if not _interrupted(e):
            raise
        # the core stops within a fraction of a second; a results directory is written atomically
        err.print(interrupt.MESSAGE)
        raise typer.Exit(130) from None


def _run(
    trial_file: Path,
    output: Optional[Path],
    force: bool,
    seed: Optional[int],
    backend: Optional[str],
    link_emulator: Optional[str],
    capture: Optional[bool],
    allow_large: bool,
    plot: bool,
) -> None:
    from .config import ConfigError, load_trial, parse_trial, sim_problems
    from .runner import Simulation

    try:
        trial = load_trial(trial_file, allow_large=allow_large)
        if seed is not None:
            trial = trial.with_seed(seed)
        if backend is not None:
            trial = trial.with_backend(backend)
        if capture is not None and bool(trial.capture) != capture:
            trial = parse_trial({**trial.model_dump(mode="json", exclude_none=True), "capture": capture},
                                allow_large=allow_large)
        if trial.backend != "kernel" and sim_problems(trial):
            raise ConfigError(sim_problems(trial))
    except ConfigError as e:
        if e.source is None:
            e.source = str(trial_file)
        _refuse(e)
    dest = output if output is not None else Path("results") / trial.name
    from .destination import DestinationError, check_destination, clean_stale

    try:
        check_destination(dest)
    except DestinationError as e:
        fail(f"{e}; nothing was run")
    if dest.exists() and not force:
        fail(f"{dest} exists; pass --force to replace it")
    if force:
        from .destination import ReplaceRefused, check_replaceable

        try:
            check_replaceable(dest, protect=(trial_file, *trial.input_files()))
        except ReplaceRefused as e:
            fail(f"{e}; nothing was written")
    removed, kept = clean_stale(dest.absolute().parent)
    for p in removed:
        err.print(f"removed {p}, left by a run that was killed")
    for p in kept:
        err.print(f"note: {p} holds results an interrupted --force run had moved aside; "
                  "move them back or delete the directory")

    n_flows = len(trial.flow_list())
    if trial.backend == "kernel":
        from .kernel.cli import run_kernel

        result = run_kernel(trial, link_emulator, capture)
    else:
        # the core runs in a thread of its own from here, while this one loads the libraries that
        # build and write the results
        from . import _core

        try:
            with Simulation(trial) as sim, err.status(
                f"simulating [bold]{escape(trial.name)}[/]: {n_flows} flow(s), {human_time(trial.duration)} "
                f"of simulated time ...",
                spinner="dots",
            ):
                import pyarrow.parquet  # noqa: F401  (results.write_parquet's writer)

                if plot:
                    import matplotlib.backends.backend_agg  # noqa: F401  (what draws trial.png)

                    from . import plot as _  # noqa: F401
                result = sim.result()
        except _core.TrialFailed as e:
            fail(f"{trial_file}: {e}; nothing was written", code=1)
    with err.status("writing results and drawing the plot ..." if plot else "writing results ...", spinner="dots"):
        try:
            path = result.save(dest, force=force, plot=plot)
        except OSError as e:
            fail(f"could not write {dest}: {e}; nothing was written", code=1)

    out.print(f"[bold]{escape(trial.name)}[/]: {escape(trial.describe())}", markup=True)
    if result.summary["flows"]:  # a workload's flows are summarised by their completion times
        out.print(_summary_table(result.summary))
    out.print(_totals_table(result.summary))
    out.print(f"results: {path}")
    if plot:
        from .results import PLOT_FILE

        out.print(f"plot:    {path / PLOT_FILE}")
    else:
        import shlex

        out.print(f"plot:    cctestbed plot {shlex.quote(str(path))}")


@app.command()
def validate(
    trial_file: Path = typer.Argument(..., help="Trial file to check."),
    allow_large: bool = typer.Option(False, "--allow-large", help="Do not refuse a trial for its size."),
) -> None:
    """Check a trial file and report every problem at once (exit code 2 if any)."""
    from .config import ConfigError, load_trial

    try:
        trial = load_trial(trial_file, allow_large=allow_large)
    except ConfigError as e:
        if e.source is None:
            e.source = str(trial_file)
        _refuse(e)
    def shown(limits: tuple[Optional[int], Optional[int]]) -> str:
        limit_bytes, limit_pkts = limits
        return human_size(limit_bytes) if limit_bytes is not None else f"{limit_pkts} packets"

    rev = trial.link.reverse
    reverse = (f", reverse {human_rate(rev.capacity)} with queue limit {shown(trial.link.reverse_queue_limits())}"
               if rev is not None else "")
    out.line(
        f"ok: {trial.name}: {len(trial.expanded())} flow(s), {human_rate(trial.link.capacity)}, "
        f"RTprop {human_time(trial.link.rtprop_ns)}, BDP {human_size(trial.link.bdp_bytes())}, "
        f"queue limit {shown(trial.link.queue_limits())}{reverse}, {human_time(trial.duration)}"
    )


@app.command()
def analyze(
    captures: list[Path] = typer.Argument(..., help="Host captures (pcap or pcapng): senders' and receivers'."),
    output: Path = typer.Option(..., "-o", "--output", help="Results directory to write."),
    ingress: Optional[Path] = typer.Option(None, "--ingress", help="Capture of the bottleneck router's ingress."),
    egress: Optional[Path] = typer.Option(None, "--egress", help="Capture of the bottleneck router's egress."),
    trial_file: Optional[Path] = typer.Option(
        None, "--trial", help="Trial file, or results directory, the captures came from (capacity, RTprop, algorithms)."
    ),
    interval: Optional[str] = typer.Option(
        None, "--interval", help="Sample interval.", show_default="the trial's, else 10ms"
    ),
    steady: Optional[tuple[str, str]] = typer.Option(
        None, "--steady", help="Steady window START END for summary.json.", show_default="the trial's, else everything"
    ),
    force: bool = typer.Option(False, "--force", "-f", help="Replace the results directory if it exists."),
) -> None:
    """Analyse packet captures into a results directory like run's (flows, router, summary, plot)."""
    from . import units
    from .captures import CaptureError, analyze_captures, check_captures
    from .config import ConfigError, load_trial
    from .destination import DestinationError, ReplaceRefused, check_destination, check_replaceable

    def refused(msg: str) -> NoReturn:
        fail(f"{msg}; nothing was written")

    interval_ns: Optional[int] = None
    window: Optional[tuple[float, float]] = None
    try:
        interval_ns = units.parse_time(interval) if interval is not None else None
    except ValueError as e:
        refused(f"--interval {interval}: {e}")
    try:
        window = (units.parse_time(steady[0]) / 1e9, units.parse_time(steady[1]) / 1e9) if steady else None
    except ValueError as e:
        refused(f"--steady {' '.join(steady or ())}: {e}")
    if interval_ns is not None and interval_ns <= 0:
        refused(f"--interval {interval}: must be > 0")
    trial = None
    if trial_file is not None:
        path = trial_file / "trial.toml" if trial_file.is_dir() else trial_file
        try:
            trial = load_trial(path, allow_large=True)
        except ConfigError as e:
            refused(f"{path}: not a valid trial ({'; '.join(e.problems)})")
    try:  # every capture a regular file with a capture's header, before anything else is looked at
        check_captures([*captures, *(p for p in (ingress, egress) if p is not None)])
    except CaptureError as e:
        refused(str(e))
    try:
        check_destination(output)
    except DestinationError as e:
        refused(str(e))
    if output.exists() and not force:
        refused(f"{output} exists; pass --force to replace it")
    try:
        if force:
            inputs = [*captures, *(p for p in (ingress, egress, trial_file) if p is not None)]
            check_replaceable(output, protect=(*inputs, *(trial.input_files() if trial is not None else ())))
    except ReplaceRefused as e:
        refused(str(e))
    try:
        with err.status(f"analysing {len(captures) + (2 if ingress else 0)} capture(s) ...", spinner="dots"):
            result = analyze_captures(captures, ingress, egress, trial, interval_ns, window, name=output.name)
            try:
                path = result.save(output, force=force)
            except OSError as e:
                fail(f"could not write {output}: {e}; nothing was written", code=1)
    except CaptureError as e:
        refused(str(e))
    s = result.summary
    for c in result.report["connections"]:
        out.print(f"flow {c['flow']}: {c['sender']} -> {c['receiver']} (sender capture: {c['sender_capture'] or '-'}, "
                  f"receiver capture: {c['receiver_capture'] or '-'})")
    if s["flows"]:  # a workload's flows are summarised by their completion times
        out.print(_summary_table(s))
    out.print(f"results: {path}")


# sweep, plot and report
from .sweep.cli import register as _register_sweep_commands  # noqa: E402

_register_sweep_commands(app)


from .judge_cli import register as _register_judge_command  # noqa: E402

_register_judge_command(app)


from .kernel.cli import register as _register_kernel_commands  # noqa: E402

_register_kernel_commands(app)


from .fidelity.cli import register as _register_fidelity_commands  # noqa: E402

_register_fidelity_commands(app)


if __name__ == "__main__":  # pragma: no cover
    app()
