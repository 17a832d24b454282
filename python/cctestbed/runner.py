"""Running one trial: on the simulator core, or (``backend = "kernel"``) on real Linux TCP.

Loading this module loads no polars, NumPy or pyarrow: a command starts the simulation first
(:class:`Simulation`) and loads them while the core runs.
"""

from __future__ import annotations

import threading
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Optional, Union

from .config import ConfigError, Trial, load_trial, sim_problems

if TYPE_CHECKING:
    from ._core import SimOutput
    from .results import TrialResult

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
    trial = load_trial(config, allow_large=allow_large)
    if seed is not None:
        trial = trial.with_seed(seed)
    if trial.backend == "kernel":  # real Linux TCP in namespaces (needs root)
        from .kernel.run import run_kernel_trial

        return run_kernel_trial(trial)
    with Simulation(trial) as sim:
        return sim.result()


class Simulation:
    """A validated trial running on the simulator core in a thread of its own.

    The core releases the GIL while it runs, so the thread that started it is free meanwhile:
    :meth:`result` loads what turns the core's output into a :class:`TrialResult` (polars,
    NumPy: about a third of a second for a command) while the core runs rather than after it,
    and a command can load more (the Parquet writer) before it asks for the result. Ctrl-C
    stays with the starting thread, as Python's signals do; leaving the ``with`` block by an
    exception (``KeyboardInterrupt``) stops the core within a few milliseconds and waits for it.
    """

    def __init__(self, trial: Trial) -> None:
        from . import _core

        problems = sim_problems(trial)
        if problems:
            raise ConfigError(problems)
        self.trial = trial
        self._stop = _core.StopFlag()
        self._raw: Optional[SimOutput] = None
        self._error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._run, args=(trial.to_core_json(),),
                                        name=f"cctestbed simulation of {trial.name}", daemon=True)
        self._thread.start()

    def _run(self, config_json: str) -> None:
        from . import _core

        try:
            self._raw = _core.simulate(config_json, self._stop)
        except BaseException as e:  # raised again in the starting thread
            self._error = e

    def __enter__(self) -> Simulation:
        return self

    def __exit__(self, kind: Optional[type[BaseException]], e: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        if self._thread.is_alive():
            self._stop.set()
            while self._thread.is_alive():
                # the core stops within milliseconds of the flag; a second Ctrl-C meanwhile must
                # not end the wait, or the interpreter could finalise while the core's thread
                # still runs inside it
                try:
                    self._thread.join()
                except KeyboardInterrupt:
                    pass

    def result(self) -> TrialResult:
        """The trial's frames and summary, once the core has finished (waiting for it)."""
        from .results import TrialResult
        from .schema import completions_frame, flows_frame, router_frame
        from .summary import TrialInfo, summarize

        while self._thread.is_alive():
            self._thread.join(0.05)  # in slices, so that Ctrl-C is seen at once
        if self._error is not None:
            raise self._error
        raw, trial = self._raw, self.trial
        assert raw is not None
        flows = flows_frame(raw, trial, BACKEND)
        router = router_frame(raw, BACKEND)
        fct = completions_frame(raw["completions"], trial, BACKEND)
        summary = summarize(flows, router, TrialInfo.from_trial(trial, backend=BACKEND), fct)
        files = {name: bytes(data) for name, data in raw.get("captures", [])}
        return TrialResult(trial, flows, router, summary, final=raw.get("final"), backend=BACKEND, files=files,
                           completions=fct if len(fct) else None)
