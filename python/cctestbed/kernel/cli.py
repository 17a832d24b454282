"""Command-line pieces of the kernel backend: ``run --backend kernel``, ``cleanup``, ``compare``.

:func:`register` adds the ``cleanup`` and ``compare`` commands to the main typer app;
:func:`run_kernel` is what ``cctestbed run`` calls for a kernel trial. Exit codes follow the
main CLI: 2 when the trial cannot run here (not root, tools or algorithms missing, options
the kernel backend refuses), nothing having been created; 1 when a started run fails.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer

from ..console import err, escape, fail, out, refuse

if TYPE_CHECKING:
    from ..config import Trial


def run_kernel(trial: Trial, link_emulator: Optional[str], capture: Optional[bool]) -> Any:
    """Runs the trial on the kernel with a status line; exits 2 or 1 on the errors above."""
    from .checks import KernelUnavailable, TrialRefused
    from .columns import batched_reads, missed_reads
    from .routerstats import EMULATOR_LATE_P99_US, emulator_late_p99_us, frames_lost_outside_the_link, stall_overflow
    from .run import KernelRunError, run_kernel_trial

    with err.status(f"kernel: [bold]{escape(trial.name)}[/] ...", spinner="dots") as st:
        try:
            result = run_kernel_trial(
                trial,
                link_emulator=link_emulator,
                capture=capture,
                status=lambda s: st.update(f"kernel: [bold]{escape(trial.name)}[/]: {escape(s)} ..."),
            )
        except KernelUnavailable as e:
            fail(str(e))
        except TrialRefused as e:
            refuse(f"the kernel backend cannot run {trial.name}", e.problems)
        except KernelRunError as e:
            fail(f"the kernel run failed: {e}", code=1)
        except KeyboardInterrupt:
            err.print("interrupted: everything the trial created has been removed")
            raise typer.Exit(130)
    lost = frames_lost_outside_the_link(result.extra.get("linkemu"))
    if lost:
        err.tagged("warning", "yellow", f"the host lost {lost} frame(s) around the link emulator (its socket's "
                   "buffer full, or an interface refused them): losses the trial does not describe; a quieter "
                   "host, or fewer flows or a lower rate, measures the path it does")
    late = emulator_late_p99_us(result.extra.get("linkemu"))
    if late is not None and late > EMULATOR_LATE_P99_US:
        err.tagged("warning", "yellow", f"the link emulator sent 1 % of frames over {late / 1000:.1f} ms late "
                   f"(kept up to {EMULATOR_LATE_P99_US / 1000:g} ms): the host could not keep the path's timing, "
                   "so the results describe a stalled path; a quieter host, no router capture, or fewer flows or "
                   "a lower rate, measures the path the trial describes")
    stalled = stall_overflow(result.extra.get("linkemu"), result.extra.get("bottleneck"))
    if stalled:
        err.tagged("warning", "yellow", f"{stalled}: losses the trial does not describe; a quieter host measures it")
    batched = batched_reads(trial, result.extra.get("sink_reads"))
    if batched:
        err.tagged("note", "cyan", batched)
    missed = missed_reads(trial, result.extra.get("sink_reads"))
    if missed:
        err.tagged("warning", "yellow", missed)
    return result


def cleanup(
    everything: bool = typer.Option(
        False, "--all", help="Also remove trials whose owner is still running (stops them)."
    ),
) -> None:
    """Remove leftovers of killed kernel trials: namespaces, veths, processes, BPF congestion controls, work files."""
    import os

    from .topology import cleanup as do_cleanup

    if os.geteuid() != 0:
        fail("cleanup requires root: run with sudo (sudo cctestbed cleanup)")
    done = do_cleanup(everything=everything)
    if not done["trials"] and not done["namespaces"] and not done.get("congestion_controls"):
        out.print("nothing to clean up")
        return
    if done["trials"]:
        out.print(f"removed trial(s): {', '.join(done['trials'])}")
    if done["namespaces"]:
        out.print(f"removed {len(done['namespaces'])} namespace(s) and their interfaces and processes:")
        for ns in done["namespaces"]:
            out.print(f"  {ns}")
    if done.get("congestion_controls"):
        out.print(f"unregistered BPF congestion control(s): {', '.join(done['congestion_controls'])}")


def compare(
    dir_a: Path = typer.Argument(..., help="First results directory."),
    dir_b: Path = typer.Argument(..., help="Second results directory."),
    output: Optional[Path] = typer.Option(
        None, "-o", "--output", help="Figure to write (.png, .svg or .pdf).", show_default="DIR_B/compare.png"
    ),
) -> None:
    """Overlay two trials' time series (PNG) and print their steady-state metrics side by side."""
    from ..compare import compare_table, load_pair, plot_compare, save_compare
    from ..destination import FIGURE_SUFFIXES, DestinationError, check_output_file

    if output is not None:
        try:
            check_output_file(output, FIGURE_SUFFIXES)
        except DestinationError as e:
            fail(f"{e}; nothing was written")
    try:
        a, b = load_pair(dir_a, dir_b)
    except (OSError, ValueError) as e:
        fail(str(e))
    out.print(compare_table(a, b))
    dest = output if output is not None else dir_b / "compare.png"
    save_compare(plot_compare(a, b), dest)
    out.print(f"plot: {dest}")


def register(app: typer.Typer) -> None:
    app.command()(cleanup)
    app.command()(compare)
