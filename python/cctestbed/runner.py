"""Running one trial on the simulator core and turning its output into frames."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Union

import numpy as np
import polars as pl

from .config import ConfigError, Trial, load_trial, sim_problems
from .results import TrialResult
from .summary import TrialInfo, summarize

BACKEND = "sim"

#: Column order of flows.parquet; algorithm columns ``cc.<key>`` follow, sorted, then ``backend``.
FLOW_COLUMNS = (
    "time_s",
    "flow",
    "cc",
    "group",
    "goodput_bps",
    "delivered_bytes",
    "send_rate_bps",
    "sent_bytes",
    "rtt_ms",
    "srtt_ms",
    "min_rtt_ms",
    "cwnd_pkts",
    "cwnd_bytes",
    "inflight_pkts",
    "inflight_bytes",
    "pacing_rate_bps",
    "sent_segs",
    "retrans_segs",
    "lost_segs",
    "rto_count",
    "state",
    "ca_state",
)



def _ordered(columns: dict[str, Any], first: tuple[str, ...]) -> list[str]:
    known = [c for c in first if c in columns]
    rest = sorted(c for c in columns if c not in first and not c.startswith("cc."))
    algo = sorted(c for c in columns if c.startswith("cc."))
    return known + rest + algo


def flows_frame(raw: dict[str, Any], trial: Trial, backend: str = BACKEND) -> pl.DataFrame:
    """flows.parquet from the core's ``flows`` columns: state codes as labels, cc/group added."""
    labels = np.asarray(raw["state_labels"], dtype=object)
    cols: dict[str, Any] = {k: np.asarray(v) for k, v in raw["flows"].items()}
    flow_ids = cols["flow"].astype(np.int64)
    expanded = trial.expanded()
    cols["cc"] = np.asarray([g.cc for _, g, _ in expanded], dtype=object)[flow_ids]
    cols["group"] = np.asarray([g.label for _, g, _ in expanded], dtype=object)[flow_ids]
    for c in ("state", "ca_state"):
        if c in cols:
            cols[c] = labels[cols[c].astype(np.int64)] if len(labels) else cols[c].astype(str)
    series = []
    for name in _ordered(cols, FLOW_COLUMNS):
        v = cols[name]
        series.append(pl.Series(name, v.tolist() if v.dtype == object else v, dtype=pl.String if v.dtype == object else None))
    series.append(pl.Series("backend", [backend] * len(flow_ids), dtype=pl.String))
    return pl.DataFrame(series)


def router_frame(raw: dict[str, Any], backend: str = BACKEND) -> pl.DataFrame:
    """router.parquet from the core's ``router`` columns, in the core's order (the drop and
    mark columns, ``drops_<cause>`` and ``marks_<cause>``, come from the core's list of causes)."""
    cols = {k: np.asarray(v) for k, v in raw["router"].items()}
    n = len(cols["time_s"])
    series = [pl.Series(name, v) for name, v in cols.items()]
    series.append(pl.Series("backend", [backend] * n, dtype=pl.String))
    return pl.DataFrame(series)


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
    summary = summarize(flows, router, TrialInfo.from_trial(trial, backend=BACKEND))
    files = {name: bytes(data) for name, data in raw.get("captures", [])}
    return TrialResult(trial, flows, router, summary, final=raw.get("final"), backend=BACKEND, files=files)
