"""The result schema: which columns ``flows.parquet``, ``router.parquet`` and ``fct.parquet``
hold, in order.

The simulator core declares its columns once (``crates/cctestbed-sim/src/telemetry.rs``), each
with its type, unit and meaning, and hands the declaration over as ``_core.columns()``. Around
them the runner adds the columns it knows from the trial (:data:`FLOW_TRIAL_COLUMNS`) and the
``backend`` of every row. Every backend's frames (the simulator's, the kernel's) are built to
:func:`flow_schema` and :func:`router_schema`, so their schemas are identical.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import polars as pl

if TYPE_CHECKING:
    from ._core import Columns
    from .config import Trial


@dataclass(frozen=True)
class Column:
    name: str
    dtype: pl.DataType
    unit: str
    doc: str


#: The core's element types; its ``label`` columns (codes into ``state_labels``) become strings.
DTYPES: dict[str, pl.DataType] = {"f64": pl.Float64(), "u64": pl.UInt64(), "u32": pl.UInt32(), "u16": pl.UInt16()}

#: Flow columns the runner adds from the trial, after ``flow``.
FLOW_TRIAL_COLUMNS = (
    Column("cc", pl.String(), "label", "the congestion control of a tcp flow; the kind (udp, ping) of a datagram flow"),
    Column("group", pl.String(), "label", "the flow group's label (group, else cc)"),
    Column("kind", pl.String(), "label", "what the flow sends: tcp, udp or ping"),
    Column("direction", pl.String(), "label", "which way the data goes: forward (left to right) or reverse"),
)
BACKEND_COLUMN = Column("backend", pl.String(), "label", "sim, kernel, or capture (cctestbed analyze)")

#: fct.parquet columns the runner adds after ``flow``: the flow's labels from the trial.
FCT_TRIAL_COLUMNS = FLOW_TRIAL_COLUMNS[:2]
#: fct.parquet columns the runner derives from the trial and the completion time
#: (:mod:`cctestbed.workload`), after the core's.
FCT_DERIVED_COLUMNS = (
    Column("ideal_fct_ms", pl.Float64(), "ms", "the flow alone on the empty path with an unlimited window: "
           "handshake round trip, every packet back to back at the bottleneck rate, one-way delay"),
    Column("slowdown", pl.Float64(), "", "fct_ms / ideal_fct_ms (>= 1); NaN if unfinished"),
)


def _core_columns(trial: Optional["Trial"]) -> Columns:
    from . import _core

    if trial is None:
        return _core.columns()
    core = trial.to_core()
    core.pop("capture", None)
    for f in core["flows"]:  # a BPF object (kernel backend only) has no cc.* columns of its own
        if str(f.get("cc", "")).startswith("bpf:"):
            f["cc"], f["params"] = "reno", {}
    return _core.columns(json.dumps(core))


def _column(name: str, dtype: str, unit: str, doc: str) -> Column:
    return Column(name, pl.String() if unit == "label" else DTYPES[dtype], unit, doc)


def flow_columns(trial: Optional["Trial"] = None) -> list[Column]:
    """flows.parquet's columns in order: ``time_s``, ``flow``, the trial's columns, the core's
    other fixed columns, the trial's algorithms' ``cc.<key>`` columns sorted, ``backend``."""
    core = [_column(*c) for c in _core_columns(trial)["flows"]]
    head = [c for c in core if c.name in ("time_s", "flow")]
    fixed = [c for c in core if c.name not in ("time_s", "flow") and not c.name.startswith("cc.")]
    algo = sorted((c for c in core if c.name.startswith("cc.")), key=lambda c: c.name)
    return [*head, *FLOW_TRIAL_COLUMNS, *fixed, *algo, BACKEND_COLUMN]


def router_columns() -> list[Column]:
    """router.parquet's columns in order: the core's, then ``backend``."""
    return [*(_column(*c) for c in _core_columns(None)["router"]), BACKEND_COLUMN]


def flow_schema(trial: Optional["Trial"] = None) -> dict[str, pl.DataType]:
    return {c.name: c.dtype for c in flow_columns(trial)}


def router_schema() -> dict[str, pl.DataType]:
    return {c.name: c.dtype for c in router_columns()}



def completion_columns() -> list[Column]:
    """fct.parquet's columns in order: ``flow``, the trial's labels, the core's completion
    columns, the derived ideal and slowdown, ``backend``."""
    core = [_column(*c) for c in _core_columns(None)["completions"]]
    return [core[0], *FCT_TRIAL_COLUMNS, *core[1:], *FCT_DERIVED_COLUMNS, BACKEND_COLUMN]


def completion_schema() -> dict[str, pl.DataType]:
    return {c.name: c.dtype for c in completion_columns()}
