"""Running one trial on the simulator core and turning its output into frames."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional, Union

import numpy as np
import polars as pl

from .config import ConfigError, Trial, load_trial, sim_problems
from .results import TrialResult
from .schema import completion_schema, flow_schema, router_schema
from .summary import TrialInfo, summarize

BACKEND = "sim"


def _labels(name: str, labels: list[str], codes: np.ndarray) -> pl.Series:
    """A text column from per-row codes into ``labels``, gathered by polars (no Python string per
    row)."""
    return pl.Series(name, labels, dtype=pl.String).gather(pl.Series(codes, dtype=pl.UInt32))


def flows_frame(raw: Mapping[str, Any], trial: Trial, backend: str = BACKEND) -> pl.DataFrame:
    """flows.parquet from the core's ``flows`` columns: state codes as labels, the trial's
    columns (cc, group, kind, direction) added, in the order of :func:`~cctestbed.schema.flow_columns`."""
    cols: dict[str, Any] = {k: np.asarray(v) for k, v in raw["flows"].items()}
    flow_ids = cols["flow"].astype(np.int64)
    expanded = trial.expanded()
    text = {
        "cc": _labels("cc", [g.algorithm for _, g, _ in expanded], flow_ids),
        "group": _labels("group", [g.label for _, g, _ in expanded], flow_ids),
        "kind": _labels("kind", [g.flow_kind for _, g, _ in expanded], flow_ids),
        "direction": _labels("direction", [g.flow_direction for _, g, _ in expanded], flow_ids),
        "backend": _labels("backend", [backend], np.zeros(len(flow_ids), dtype=np.int64)),
    }
    labels = list(raw["state_labels"])
    for c in ("state", "ca_state"):
        if c in cols:
            text[c] = _labels(c, labels, cols[c].astype(np.int64)) if labels else pl.Series(c, cols[c].astype(str))
    series = []
    for name, dtype in flow_schema(trial).items():
        series.append(text[name].cast(dtype) if name in text else pl.Series(name, cols[name], dtype=dtype))
    return pl.DataFrame(series)


def router_frame(raw: Mapping[str, Any], backend: str = BACKEND) -> pl.DataFrame:
    """router.parquet from the core's ``router`` columns, in the order of
    :func:`~cctestbed.schema.router_columns` (the drop and mark columns, ``drops_<cause>`` and
    ``marks_<cause>``, come from the core's list of causes)."""
    cols = {k: np.asarray(v) for k, v in raw["router"].items()}
    n = len(cols["time_s"])
    return pl.DataFrame([_labels(name, [backend], np.zeros(n, dtype=np.int64)).cast(dtype) if name == "backend"
                         else pl.Series(name, cols[name], dtype=dtype)
                         for name, dtype in router_schema().items()])


def completions_frame(cols: dict[str, Any], trial: Trial, backend: str = BACKEND) -> pl.DataFrame:
    """fct.parquet from the completion columns (the core's, or a backend's of the same names):
    the flows' labels, their ideal completion time and slowdown (:mod:`cctestbed.workload`)."""
    from . import workload

    c = {k: np.asarray(v) for k, v in cols.items()}
    ids = c["flow"].astype(np.int64)
    specs, groups = trial.flow_list(), trial.flows
    fwd, rev = trial.link.delays_ns
    steps = trial.capacity_schedule()
    ideal = np.empty(len(ids))
    for k, (fid, size) in enumerate(zip(ids, c["size_bytes"].astype(np.int64))):
        g = groups[specs[fid].group]
        if g.flow_direction == "reverse":  # data over the reverse bottleneck, ACKs forward
            assert trial.link.reverse is not None  # a reverse tcp group without one is refused
            ideal[k] = workload.ideal_fct_ns(int(size), trial.link.reverse.capacity, rev + g.extra_delay, fwd,
                                             trial.mss, trial.mtu) / 1e6
            continue
        start_s = specs[fid].start_ns / 1e9
        rate = [bps for at, bps in steps if at <= start_s + 1e-12][-1]
        if trial.link.access_rate is not None:
            rate = min(rate, trial.link.access_rate)
        ideal[k] = workload.ideal_fct_ns(int(size), rate, fwd + g.extra_delay, rev, trial.mss, trial.mtu) / 1e6
    c["cc"] = np.asarray([groups[specs[f].group].algorithm for f in ids], dtype=object)
    c["group"] = np.asarray([groups[specs[f].group].label for f in ids], dtype=object)
    c["ideal_fct_ms"] = ideal
    c["slowdown"] = c["fct_ms"].astype(float) / ideal if len(ids) else ideal
    c["backend"] = np.full(len(ids), backend, dtype=object)
    return pl.DataFrame([pl.Series(name, c[name].tolist() if c[name].dtype == object else c[name], dtype=dtype)
                         for name, dtype in completion_schema().items()])


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
    flows = flows_frame(raw, trial)
    router = router_frame(raw)
    fct = completions_frame(raw["completions"], trial)
    summary = summarize(flows, router, TrialInfo.from_trial(trial, backend=BACKEND), fct)
    files = {name: bytes(data) for name, data in raw.get("captures", [])}
    return TrialResult(trial, flows, router, summary, final=raw.get("final"), backend=BACKEND, files=files,
                       completions=fct if len(fct) else None)
