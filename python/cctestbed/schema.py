"""The result tables: which columns ``flows.parquet``, ``router.parquet`` and ``fct.parquet``
hold, in order, and the one builder every backend feeds.

The simulator core declares its columns once (``crates/cctestbed-sim/src/telemetry.rs``), each
with its type, unit and meaning, and hands the declaration over as ``_core.columns()``. Around
them this module declares the columns known from the trial (:data:`FLOW_TRIAL_COLUMNS`: each
flow's labels), the ones derived from it (:data:`FCT_DERIVED_COLUMNS`) and ``backend``:
:func:`flow_columns`, :func:`router_columns` and :func:`completion_columns` give each table's
whole list.

:func:`build_table` builds a table from that list and a backend's named columns: the
simulator's (:func:`flows_frame`, :func:`router_frame`, :func:`completions_frame`), the kernel
backend's (:mod:`cctestbed.kernel.columns`) and the capture analysis' (:mod:`cctestbed.captures`).
A column a backend does not name is null; the trial's labels and ``backend`` are attached there
and nowhere else. So adding a column is one declaration: every backend's table carries it,
filled where the backend names it, null elsewhere.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

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
    #: A label known from the trial: the flow group's attribute that gives it.
    group_attr: Optional[str] = None


#: The core's element types; its ``label`` columns (codes into ``state_labels``) become strings.
DTYPES: dict[str, pl.DataType] = {"f64": pl.Float64(), "u64": pl.UInt64(), "u32": pl.UInt32(), "u16": pl.UInt16()}

#: Flow columns known from the trial, after ``flow``: each flow's labels (:func:`trial_labels`).
FLOW_TRIAL_COLUMNS = (
    Column("cc", pl.String(), "label", "the congestion control of a tcp flow; the kind (udp, ping) of a datagram flow",
           "algorithm"),
    Column("group", pl.String(), "label", "the flow group's label (group, else cc)", "label"),
    Column("kind", pl.String(), "label", "what the flow sends: tcp, udp or ping", "flow_kind"),
    Column("direction", pl.String(), "label", "which way the data goes: forward (left to right) or reverse",
           "flow_direction"),
)
BACKEND_COLUMN = Column("backend", pl.String(), "label", "sim, kernel, or capture (cctestbed analyze)")

#: fct.parquet columns known from the trial, after ``flow``: the flow's labels.
FCT_TRIAL_COLUMNS = FLOW_TRIAL_COLUMNS[:2]
#: fct.parquet columns derived from the trial and the completion time
#: (:mod:`cctestbed.workload`), after the core's.
FCT_DERIVED_COLUMNS = (
    Column("ideal_fct_ms", pl.Float64(), "ms", "the flow alone on the empty path with an unlimited window: "
           "handshake round trip, every packet back to back at the bottleneck rate (less an htb "
           "bottleneck's bucket, sent at once), one-way delay"),
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


# --- the builder ------------------------------------------------------------------------------

#: Per flow id, each label column's value (:data:`FLOW_TRIAL_COLUMNS`); None where unknown.
Labels = Mapping[str, Sequence[Optional[str]]]


def trial_labels(trial: Trial) -> dict[str, list[Optional[str]]]:
    """Each flow's labels from the trial, by flow id."""
    expanded = trial.expanded()
    return {c.name: [getattr(g, str(c.group_attr)) for _, g, _ in expanded] for c in FLOW_TRIAL_COLUMNS}


def _series(name: str, values: Any, dtype: pl.DataType, rows: int) -> pl.Series:
    """One column in its declared type: None gives nulls; text stays text; a float given for an
    integer column has NaN (what was not measured) as null."""
    if values is None:
        return pl.Series(name, [None] * rows, dtype=dtype)
    if isinstance(values, pl.Series):
        return values.alias(name).cast(dtype)
    a = np.asarray(values)
    if a.dtype.kind in "OUS":
        return pl.Series(name, a.tolist(), dtype=dtype)
    if a.dtype.kind == "f" and dtype.is_integer():
        return pl.Series(name, a).fill_nan(None).cast(dtype, strict=False)
    return pl.Series(name, a).cast(dtype)


def build_table(columns: Sequence[Column], values: Mapping[str, Any], rows: int, backend: str,
                labels: Optional[Labels] = None) -> pl.DataFrame:
    """A result table of ``rows`` rows with ``columns`` in their order, from a backend's named
    columns ``values`` (arrays or polars Series of ``rows`` values; names the table does not
    declare are passed over). A declared column missing from ``values``, or None there, is
    null. The label columns (``cc``, ``group``, ...) come from ``labels`` through each row's
    ``flow`` id, and ``backend`` names the backend."""
    ids = None if labels is None else pl.Series(np.asarray(values["flow"]), dtype=pl.UInt32)
    out = []
    for c in columns:
        if c.name == BACKEND_COLUMN.name:
            s = pl.Series(c.name, [backend], dtype=pl.String).gather(pl.Series(np.zeros(rows, dtype=np.uint32)))
        elif labels is not None and ids is not None and c.name in labels:
            s = pl.Series(c.name, list(labels[c.name]), dtype=pl.String).gather(ids)
        else:
            s = _series(c.name, values.get(c.name), c.dtype, rows)
        out.append(s)
    return pl.DataFrame(out)


# --- the simulator's tables, from the core's columns -------------------------------------------


def _labels(name: str, labels: list[str], codes: np.ndarray) -> pl.Series:
    """A text column from per-row codes into ``labels``, gathered by polars (no Python string per
    row)."""
    return pl.Series(name, labels, dtype=pl.String).gather(pl.Series(codes, dtype=pl.UInt32))


def flows_frame(raw: Mapping[str, Any], trial: Trial, backend: str) -> pl.DataFrame:
    """flows.parquet from the core's ``flows`` columns, its state codes as labels."""
    cols: dict[str, Any] = dict(raw["flows"])
    labels = list(raw["state_labels"])
    for c in ("state", "ca_state"):
        if c in cols:
            codes = np.asarray(cols[c])
            cols[c] = _labels(c, labels, codes.astype(np.int64)) if labels else pl.Series(c, codes.astype(str))
    return build_table(flow_columns(trial), cols, len(cols["time_s"]), backend, trial_labels(trial))


def router_frame(raw: Mapping[str, Any], backend: str) -> pl.DataFrame:
    """router.parquet from the core's ``router`` columns (the drop and mark columns,
    ``drops_<cause>`` and ``marks_<cause>``, come from the core's list of causes)."""
    return build_table(router_columns(), raw["router"], len(raw["router"]["time_s"]), backend)


def completions_frame(cols: Mapping[str, Any], trial: Trial, backend: str, bucket_bytes: int = 0) -> pl.DataFrame:
    """fct.parquet from the completion columns (the core's, or a backend's of the same names):
    the flows' labels, their ideal completion time and slowdown (:mod:`cctestbed.workload`).
    ``bucket_bytes``: IP bytes the forward bottleneck lets through at once when idle (the kernel
    backend's htb bucket), which the empty path's ideal then carries without serialisation."""
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
        ideal[k] = workload.ideal_fct_ns(int(size), rate, fwd + g.extra_delay, rev, trial.mss, trial.mtu,
                                         bucket_bytes) / 1e6
    c["ideal_fct_ms"] = ideal
    c["slowdown"] = c["fct_ms"].astype(float) / ideal if len(ids) else ideal
    return build_table(completion_columns(), c, len(ids), backend, trial_labels(trial))
