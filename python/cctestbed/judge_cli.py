"""``cctestbed judge TRIAL``: harm of each flow group's neighbours against its own baselines
(:mod:`cctestbed.judging`), printed as a table; ``-o DIR`` keeps the runs and ``judge.json``.

Exit codes as every command's: 0 judged (whatever the verdict), 2 an invalid trial, one that
cannot be judged or a bad output directory (nothing is run or written), 1 a run failed, 130
interrupted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from .console import err, escape, fail, out


def _f(x: Optional[float], spec: str = ".3f") -> str:
    return "-" if x is None else format(x, spec)


#: metric -> (figure key, row label, scale, format)
_ROWS = {
    "throughput": ("goodput_bps", "tput Mbit/s", 1e-6, ".1f"),
    "rtt_p95": ("rtt_p95_ms", "RTT p95 ms", 1.0, ".1f"),
    "loss": ("loss_pct", "loss %", 1.0, ".3f"),
    "fct_p99": ("fct_p99_ms", "FCT p99 ms", 1.0, ".1f"),
}


def judge_table(doc: dict[str, Any]) -> Any:
    """The judgement as a rich table: a row per group and metric."""
    from rich.table import Table

    t = Table(title=f"harm (Ware et al., clamped at 0): {doc['trial']['describe']}", title_justify="left",
              show_edge=False, pad_edge=False)
    for c in ("group A", "metric", "alone", "+ itself", "+ others", "h(A->A)", "h(->A)", "ok"):
        t.add_column(c, justify="left" if c in ("group A", "metric", "ok") else "right")
    for label, g in doc["groups"].items():
        for i, (metric, h) in enumerate(g["harm"].items()):
            fig, name, scale, spec = _ROWS[metric]
            ok = g["deployable"][metric]

            def shown(x: Optional[float]) -> str:
                return "-" if x is None else format(x * scale, spec)

            t.add_row(label if i == 0 else "", name, shown(g["alone"].get(fig)), shown(g["beside_self"].get(fig)),
                      shown(g["beside_others"].get(fig)), _f(g["harm_self"][metric]), _f(h),
                      "-" if ok is None else "yes" if ok else "no")
    return t


def register(app: typer.Typer) -> None:
    @app.command()
    def judge(
        trial_file: Path = typer.Argument(..., help="Trial file with two or more flow groups."),
        output: Optional[Path] = typer.Option(
            None, "-o", "--output", help="Directory to write judge.json and every run's results into (trials/)."
        ),
        force: bool = typer.Option(False, "--force", "-f", help="Replace the output directory if judge wrote it."),
        seed: Optional[int] = typer.Option(None, "--seed", help="Override the trial's seed."),
        cache: Optional[Path] = typer.Option(
            None, "--cache", help="Directory of cached runs.",
            show_default="$CCTESTBED_CACHE/judge, else ~/.cache/cctestbed/judge",
        ),
        no_cache: bool = typer.Option(False, "--no-cache", help="Run every baseline, caching none."),
        allow_large: bool = typer.Option(False, "--allow-large", help="Do not refuse a trial for its size."),
    ) -> None:
        """Judge each flow group's neighbours by Ware et al.'s harm: runs each group alone and beside a
        copy of itself, and says whether the others harm it no more than it harms itself."""
        from .config import ConfigError, load_trial
        from .destination import DestinationError, ReplaceRefused, check_destination
        from .judging import JUDGE_FILE, JudgeError, baselines, default_cache, judgement, run_baselines, write_output

        try:
            trial = load_trial(trial_file, allow_large=allow_large)
            if seed is not None:
                trial = trial.with_seed(seed)
            runs = baselines(trial)
        except ConfigError as e:
            from .console import refuse

            refuse(f"{e.source or trial_file} is not valid", e.problems)
        except JudgeError as e:
            fail(f"{trial_file}: {e}; nothing was run")
        if output is not None:
            if output.exists() and not force:
                fail(f"{output} exists; pass --force to replace it")
            if output.exists() and not ((output / JUDGE_FILE).is_file() and (output / "trials").is_dir()):
                fail(f"{output} is not a judge directory (no {JUDGE_FILE} and trials/); not replaced")
            inside = [p for p in (trial_file, *trial.input_files(), *([] if no_cache else [cache or default_cache()]))
                      if Path(p).absolute().resolve().is_relative_to(output.absolute().resolve())]
            if output.exists() and inside:
                fail(f"{output} holds {inside[0]}, which judge reads; not replaced")
            try:
                check_destination(output)
            except DestinationError as e:
                fail(f"{e}; nothing was run")
        cache_dir = None if no_cache else (cache if cache is not None else default_cache())
        from . import _core

        try:
            with err.status(f"judging [bold]{escape(trial.name)}[/]: {len(runs)} runs ...", spinner="dots"):
                done = run_baselines(runs, cache_dir, keep=output is not None)
        except _core.TrialFailed as e:
            fail(f"{trial_file}: {e}; nothing was written", code=1)
        doc = judgement(trial, done)
        if output is not None:
            try:
                write_output(output, doc, done, cache_dir, force=force)
            except ReplaceRefused as e:
                fail(str(e))
            except OSError as e:
                fail(f"could not write {output}: {e}; nothing was written", code=1)
        cached = sum(r["cached"] for r in doc["runs"].values())
        out.print(judge_table(doc))
        for label, g in doc["groups"].items():
            others = " + ".join(g["others"])
            if g["verdict"] is None:
                line = f"{others} beside {label}: not judged (no figures)"
            elif g["verdict"] == "deployable":
                line = f"{others} beside {label}: deployable (harms {label} no more than {label} harms itself)"
            else:
                line = (f"{others} beside {label}: not deployable (harms {label} more than {label} harms itself on "
                        f"{', '.join(g['worse_than_self_on'])})")
            out.print(line)
        out.print(f"runs: {len(doc['runs'])} ({cached} from the cache"
                  f"{'' if cache_dir is None else ' ' + str(cache_dir)})")
        if output is not None:
            out.print(f"results: {output}")
