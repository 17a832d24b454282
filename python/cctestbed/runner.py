"""Running one trial: on the simulator core, or (``backend = "kernel"``) on real Linux TCP."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional, Union

from .config import ConfigError, Trial, load_trial, sim_problems
from .results import TrialResult
from .schema import completions_frame, flows_frame, router_frame
from .summary import TrialInfo, summarize

BACKEND = "sim"


def run_trial(
    config: Union[str, Path, dict[str, Any], Trial], seed: Optional[int] = None, allow_large: bool = False
) -> TrialResult:
    """Validate and run one trial on the simulator; returns a :class:`TrialResult`.

    ``config`` is a trial file path (TOML or JSON), a dict in the trial-file shape, or a
    :class:`~cctestbed.config.Trial`. ``seed`` overrides the trial's seed. Invalid trials raise
    :class:`~cctestbed.config.ConfigError` before anything runs, and so do trials past the
    resource limits (:func:`~cctestbed.config.resource_problems`) unless ``allow_large``.
    """
    from . import _core

    trial = load_trial(config, allow_large=allow_large)
    if seed is not None:
        trial = trial.with_seed(seed)
    if trial.backend == "kernel":  # real Linux TCP in namespaces (needs root)
        from .kernel.backend import run_kernel_trial

        return run_kernel_trial(trial)
    problems = sim_problems(trial)
    if problems:
        raise ConfigError(problems)
    raw = _core.simulate(trial.to_core_json())
    flows = flows_frame(raw, trial, BACKEND)
    router = router_frame(raw, BACKEND)
    fct = completions_frame(raw["completions"], trial, BACKEND)
    summary = summarize(flows, router, TrialInfo.from_trial(trial, backend=BACKEND), fct)
    files = {name: bytes(data) for name, data in raw.get("captures", [])}
    return TrialResult(trial, flows, router, summary, final=raw.get("final"), backend=BACKEND, files=files,
                       completions=fct if len(fct) else None)
