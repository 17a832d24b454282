"""Judging a trial's flow groups by Ware et al.'s harm (HotNets'19, "Beyond Jain's Fairness
Index: Setting the Bar for the Deployment of Congestion Control Algorithms").

For a metric where more is better (throughput), the harm a newcomer B does to an incumbent A is
``(x - y) / x``; where less is better (RTT, loss, completion time) it is ``(y - x) / y``; ``x`` is
A's figure when it runs alone, ``y`` its figure beside B. Like the paper, harm is clamped at 0:
a newcomer that leaves A better off does it no harm (the signed value is kept as ``change``).
B is deployable beside A on a metric when ``harm(B->A) <= harm(A->A)``: it hurts A no more than
A hurts itself.

:func:`judge` runs, for each flow group A of a trial (its ``group`` label), the baselines the
trial implies, on the same link and seed:

- ``alone:A``: A's flows alone (the same count, start times and sizes);
- ``self:A``: the trial with every other group running A's algorithm (``cc``, ``params``,
  ``pacing``, ``ecn``) in its place (the same count and timing), labelled ``A-copy``: A beside
  a copy of itself, for harm(A->A);
- ``mixed``: the trial itself, for harm(others->A).

Each run is cached under a hash of its normalised trial text (``Trial.to_toml()``, the name
set to ``judge``) in a cache directory, so a baseline that several judgements share (CUBIC
alone on a link, say) runs once. A's figures in each run: throughput (the group's goodput,
``summary.json``), p95 RTT and loss (``metrics.json``'s ``rtt_p95_ms`` and ``lost_pct``:
segments the senders marked lost over segments sent) and, for groups with sized flows, the
99th percentile completion time (``fct.<group>.fct_p99_ms``), all over the steady window.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any, Callable, Optional, Union

from .config import Trial, load_trial, parse_trial

#: (name, figure, more is better) for every metric judged.
METRICS: tuple[tuple[str, str, bool], ...] = (
    ("throughput", "goodput_bps", True),
    ("rtt_p95", "rtt_p95_ms", False),
    ("loss", "loss_pct", False),
    ("fct_p99", "fct_p99_ms", False),
)
#: The fields of a flow group that make its algorithm: copied into the others for harm(A->A).
ALGORITHM_FIELDS = ("cc", "params", "pacing", "ecn")
CACHE_NAME = "judge"
RUN_NAME = "judge"
JUDGE_FILE = "judge.json"
FIGURES_FILE = "figures.json"
DEFINITION = ("harm = (x - y) / x where more is better (throughput), (y - x) / y where less is better "
              "(RTT, loss, completion time); x the group's figure alone, y beside the others; clamped at 0 "
              "as Ware et al. (HotNets'19) do (the signed value is 'change'); deployable on a metric when "
              "harm(others->A) <= harm(A->A)")


class JudgeError(ValueError):
    """A trial that cannot be judged (fewer than two flow groups, datagram or reverse groups)."""


def default_cache() -> Path:
    """``$CCTESTBED_CACHE/judge``, else ``$XDG_CACHE_HOME/cctestbed/judge``, else
    ``~/.cache/cctestbed/judge``."""
    if os.environ.get("CCTESTBED_CACHE"):
        return Path(os.environ["CCTESTBED_CACHE"]) / CACHE_NAME
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "cctestbed" / CACHE_NAME


def harm(x: Optional[float], y: Optional[float], more_is_better: bool) -> tuple[Optional[float], Optional[float]]:
    """(harm clamped at 0, signed change) of a victim whose figure is ``x`` alone and ``y``
    beside the newcomer; (None, None) when undefined (a figure missing, or nothing alone to lose
    on a more-is-better metric)."""
    if x is None or y is None:
        return None, None
    if more_is_better:
        if x <= 0:
            return None, None
        change = (x - y) / x
    else:
        if y <= 0:  # nothing beside the newcomer: no worse than alone
            change = 0.0 if x <= 0 else -(x - y) / x
        else:
            change = (y - x) / y
    return max(0.0, change), change


def trial_text(trial: Trial) -> str:
    """The text a run is cached by: the normalised trial, its name set to :data:`RUN_NAME`."""
    return parse_trial({**trial.model_dump(mode="json", exclude_none=True), "name": RUN_NAME},
                       allow_large=True).to_toml()


def trial_key(trial: Trial) -> str:
    return hashlib.sha256(trial_text(trial).encode()).hexdigest()[:24]


def _labels(trial: Trial) -> list[str]:
    return list(dict.fromkeys(g.label for g in trial.flows))


def baselines(trial: Trial) -> dict[str, Trial]:
    """The runs judging ``trial`` needs, by name: ``mixed``, and per group ``alone:<label>`` and
    ``self:<label>``. Raises :class:`JudgeError` when the trial cannot be judged."""
    labels = _labels(trial)
    problems = []
    if len(labels) < 2:
        problems.append(f"judge compares flow groups: {trial.name} has one ({labels[0] if labels else '-'}); "
                        "give it two or more groups (a second [[flows]] table with another cc or group)")
    for g in trial.flows:
        if g.flow_kind != "tcp":
            problems.append(f"group {g.label} is {g.flow_kind}: judge compares tcp flow groups")
        if g.flow_direction != "forward":
            problems.append(f"group {g.label} sends in the reverse direction: judge compares forward flow groups")
    if trial.backend == "kernel":
        problems.append("judge runs its baselines on the simulator: remove backend = \"kernel\"")
    if problems:
        raise JudgeError("; ".join(problems))
    doc = trial.model_dump(mode="json", exclude_none=True)
    flows = doc["flows"]
    out = {"mixed": trial}
    for label in labels:
        mine = [i for i, g in enumerate(trial.flows) if g.label == label]
        first = flows[mine[0]]
        alone = {**doc, "flows": [flows[i] for i in mine]}
        copy_label = f"{label}-copy"
        while copy_label in labels:
            copy_label += "-"
        selfd = []
        for i, f in enumerate(flows):
            if i in mine:
                selfd.append({**f, "group": label})
                continue
            copied = {k: v for k, v in f.items() if k not in ALGORITHM_FIELDS}
            copied.update({k: first[k] for k in ALGORITHM_FIELDS if k in first})
            copied["group"] = copy_label
            selfd.append(copied)
        out[f"alone:{label}"] = parse_trial(alone, allow_large=True)
        out[f"self:{label}"] = parse_trial({**doc, "flows": selfd}, allow_large=True)
    return out


def figures(result: Any) -> dict[str, dict[str, Optional[float]]]:
    """Per group label of a :class:`~cctestbed.results.TrialResult`: the judged figures."""
    from .sweep.metrics import sweep_metrics

    m = sweep_metrics(result.flows, result.router, result.info)
    s = result.summary
    out = {}
    for label, g in s["groups"].items():
        mg = m["groups"].get(label, {})
        out[label] = {
            "goodput_bps": g.get("goodput_bps"),
            "rtt_p95_ms": mg.get("rtt_p95_ms"),
            "loss_pct": mg.get("lost_pct"),
            "fct_p99_ms": s.get("fct", {}).get(label, {}).get("fct_p99_ms"),
        }
    return out


def _cached(cache: Optional[Path], key: str) -> Optional[dict[str, Any]]:
    if cache is None:
        return None
    f = cache / key / FIGURES_FILE
    try:
        doc = json.loads(f.read_text(encoding="utf-8"))
        return doc if isinstance(doc, dict) else None
    except (OSError, ValueError):
        return None


def _store(cache: Path, key: str, result: Any, figs: dict[str, Any]) -> None:
    from .destination import write_dir

    def write(tmp: Path) -> None:
        result.write_files(tmp)
        (tmp / FIGURES_FILE).write_text(json.dumps(figs, indent=1, sort_keys=True), encoding="utf-8")

    cache.mkdir(parents=True, exist_ok=True)
    try:
        write_dir(cache / key, write)
    except FileExistsError:  # another judgement stored the same run meanwhile
        pass


def run_baselines(runs: dict[str, Trial], cache: Optional[Path],
                  progress: Optional[Callable[[str], None]] = None, keep: bool = False) -> dict[str, dict[str, Any]]:
    """Every run's figures (``figures``), ``key`` and whether it came from the ``cache``; the
    runs not cached simulate as many at once as there are cores, each core in a thread of its
    own. ``keep``: also return each simulated run's :class:`~cctestbed.results.TrialResult`
    (``result``) when there is no cache to copy it from."""
    from .runner import Simulation

    keys = {name: trial_key(t) for name, t in runs.items()}
    out: dict[str, dict[str, Any]] = {}
    todo: dict[str, str] = {}  # key -> first run name needing it
    for name, key in keys.items():
        hit = _cached(cache, key)
        if hit is not None:
            out[name] = {"key": key, "cached": True, "figures": hit}
        elif key not in todo:
            todo[key] = name
    if progress is not None:
        progress(f"{len(runs)} runs, {len(runs) - len(todo)} cached, simulating {len(todo)}")
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    figs: dict[str, Any] = {}
    results: dict[str, Any] = {}
    pending = list(todo.items())
    while pending:
        batch, pending = pending[:cores], pending[cores:]
        with contextlib.ExitStack() as stack:  # leaving it (Ctrl-C) stops every core still running
            sims = {key: stack.enter_context(Simulation(runs[name])) for key, name in batch}
            done = {key: sim.result() for key, sim in sims.items()}
        for key, result in done.items():
            figs[key] = figures(result)
            if cache is not None:
                _store(cache, key, result, figs[key])
            elif keep:
                results[key] = result
    for name, key in keys.items():
        if name not in out:
            out[name] = {"key": key, "cached": False, "figures": figs[key],
                         **({"result": results[key]} if key in results else {})}
    return out


def judgement(trial: Trial, runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The ``judge.json`` document from the runs' figures."""
    labels = _labels(trial)
    groups: dict[str, Any] = {}
    for label in labels:
        alone = runs[f"alone:{label}"]["figures"].get(label, {})
        beside_self = runs[f"self:{label}"]["figures"].get(label, {})
        beside_others = runs["mixed"]["figures"].get(label, {})
        h, h_self, change, change_self, ok = {}, {}, {}, {}, {}
        for metric, fig, more in METRICS:
            if fig == "fct_p99_ms" and alone.get(fig) is None and beside_others.get(fig) is None:
                continue  # no sized flows: no completion times
            h[metric], change[metric] = harm(alone.get(fig), beside_others.get(fig), more)
            h_self[metric], change_self[metric] = harm(alone.get(fig), beside_self.get(fig), more)
            a, b = h[metric], h_self[metric]
            ok[metric] = None if a is None or b is None else bool(a <= b + 1e-12)
        worse = [m for m, v in ok.items() if v is False]
        judged = [m for m, v in ok.items() if v is not None]
        others = [x for x in labels if x != label]
        groups[label] = {
            "flows": sum(g.count for g in trial.flows if g.label == label and g.arrivals is None),
            "others": others,
            "alone": alone,
            "beside_self": beside_self,
            "beside_others": beside_others,
            "harm": h,
            "harm_self": h_self,
            "change": change,
            "change_self": change_self,
            "deployable": ok,
            "verdict": (None if not judged else "deployable" if not worse else "not deployable"),
            "worse_than_self_on": worse,
        }
    return {
        "trial": {"name": trial.name, "seed": trial.seed, "describe": trial.describe()},
        "definition": DEFINITION,
        "runs": {name: {"key": r["key"], "cached": r["cached"]} for name, r in runs.items()},
        "groups": groups,
    }


def judge(trial: Union[str, Path, dict[str, Any], Trial], output: Optional[Union[str, Path]] = None,
          cache: Union[str, Path, None, bool] = True, force: bool = False,
          progress: Optional[Callable[[str], None]] = None) -> dict[str, Any]:
    """Judge a trial's flow groups by harm (see the module docstring); returns the ``judge.json``
    document. ``output``: a directory to write ``judge.json`` and every run's results directory
    (``trials/<run>``) into. ``cache``: the cache directory (True: :func:`default_cache`; False
    or None: no cache). Raises :class:`~cctestbed.config.ConfigError` for an invalid trial and
    :class:`JudgeError` for one that cannot be judged, before anything runs."""
    t = load_trial(trial)
    runs = baselines(t)
    cache_dir = default_cache() if cache is True else (Path(cache) if cache else None)
    done = run_baselines(runs, cache_dir, progress, keep=output is not None)
    doc = judgement(t, done)
    if output is not None:
        write_output(Path(output), doc, done, cache_dir, force=force)
    return doc


def write_output(dest: Path, doc: dict[str, Any], runs: dict[str, dict[str, Any]], cache: Optional[Path],
                 force: bool = False) -> Path:
    """``dest/judge.json`` and ``dest/trials/<run>/`` (``:`` in run names becomes ``-``),
    written atomically."""
    from .destination import ReplaceRefused, write_dir

    def write(tmp: Path) -> None:
        (tmp / JUDGE_FILE).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
        for name, r in runs.items():
            d = tmp / "trials" / name.replace(":", "-")
            d.parent.mkdir(exist_ok=True)
            if "result" in r:
                d.mkdir()
                r["result"].write_files(d)
            else:
                assert cache is not None
                shutil.copytree(cache / r["key"], d)
                (d / FIGURES_FILE).unlink(missing_ok=True)

    def replaceable(p: Path) -> None:
        if not p.exists() and not p.is_symlink():
            return
        if not (p / JUDGE_FILE).is_file() or not (p / "trials").is_dir():
            raise ReplaceRefused(f"{p} is not a judge directory (no {JUDGE_FILE} and trials/); not replaced")

    return write_dir(dest, write, force=force, replaceable=replaceable)
