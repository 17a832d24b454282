"""The result schema: which columns ``flows.parquet``, ``router.parquet`` and ``fct.parquet``
hold, in order.

The simulator core declares its columns once (``crates/cctestbed-sim/src/telemetry.rs``), each
with its type, unit and meaning, and hands the declaration over as ``_core.columns()``. Around
them :func:`flows_frame` adds the columns it knows from the trial (:data:`FLOW_TRIAL_COLUMNS`) and
the ``backend`` of every row. Every backend's frames (the simulator's, the kernel's, the capture
analysis') are built to :func:`flow_schema` and :func:`router_schema`, so their schemas are
identical; :func:`flows_frame`, :func:`router_frame` and :func:`completions_frame` build them from
the core's columns (or a backend's of the same names).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Optional

import numpy as np
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
    for f in core["flows"]:  # a BPF object has no cc.* columns of its own
        if f.get("cc") == "bpf":
            f["cc"], f["params"] = "reno", {}
            f.pop("bpf_object", None)
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


# --- frames in the schema, from the core's columns ----------------------------------------------


def _labels(name: str, labels: list[str], codes: np.ndarray) -> pl.Series:
    """A text column from per-row codes into ``labels``, gathered by polars (no Python string per
    row)."""
    return pl.Series(name, labels, dtype=pl.String).gather(pl.Series(codes, dtype=pl.UInt32))


def flows_frame(raw: Mapping[str, Any], trial: Trial, backend: str) -> pl.DataFrame:
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


def router_frame(raw: Mapping[str, Any], backend: str) -> pl.DataFrame:
    """router.parquet from the core's ``router`` columns, in the order of
    :func:`~cctestbed.schema.router_columns` (the drop and mark columns, ``drops_<cause>`` and
    ``marks_<cause>``, come from the core's list of causes)."""
    cols = {k: np.asarray(v) for k, v in raw["router"].items()}
    n = len(cols["time_s"])
    return pl.DataFrame([_labels(name, [backend], np.zeros(n, dtype=np.int64)).cast(dtype) if name == "backend"
                         else pl.Series(name, cols[name], dtype=dtype)
                         for name, dtype in router_schema().items()])


def completions_frame(cols: Mapping[str, Any], trial: Trial, backend: str) -> pl.DataFrame:
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
