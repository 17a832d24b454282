"""A trial's results: the telemetry frames, the summary, and how they are written to disk.

A results directory holds ``trial.toml`` (the normalised trial), ``flows.parquet``,
``router.parquet``, ``summary.json``, ``fct.parquet`` when the trial has flows with a size (one
row per such flow: its completion time), the packet captures when the trial asked for them, and
``trial.png`` (the stacked plot) when it is asked for. It is written into a temporary
directory beside its destination and renamed into place only once complete
(:mod:`cctestbed.destination`), so a directory
at the destination is never half written. Parquet files are deterministic: the same trial
and seed give byte-identical files (fixed compression, no timestamps in the metadata).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Optional, Union

import polars as pl

from .config import Trial, load_trial
from .destination import write_dir
from .summary import TrialInfo

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: The files of every trial's results directory.
FILES = ("trial.toml", "flows.parquet", "router.parquet", "summary.json")
#: The stacked plot, written when asked for (``run --plot``, ``save(plot=True)``, ``cctestbed plot``).
PLOT_FILE = "trial.png"


class DamagedFile(ValueError):
    """A results file that cannot be read: missing, empty, truncated, or not what its name says."""


def _reason(e: BaseException) -> str:
    lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()]
    text = lines[0] if lines else type(e).__name__
    return text if len(text) <= 160 else text[:157] + "..."


def read_json(path: Union[str, Path]) -> dict[str, Any]:
    """A JSON object from a results file; :class:`DamagedFile` saying what is wrong otherwise."""
    from .inputs import InputError, read_text

    path = Path(path)
    try:  # the guarded reader: a regular file (not a FIFO or device), its size limited, UTF-8
        text = read_text(path, "JSON file", missing="missing")
    except InputError as e:
        raise DamagedFile(str(e)) from None
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise DamagedFile(f"{path}: damaged, not valid JSON ({_reason(e)})") from None
    if not isinstance(doc, dict):
        raise DamagedFile(f"{path}: damaged, holds a JSON {type(doc).__name__} where an object belongs")
    return doc


def read_parquet(path: Union[str, Path], columns: tuple[str, ...] = ()) -> pl.DataFrame:
    """A Parquet results file with at least ``columns``; :class:`DamagedFile` otherwise."""
    from .inputs import InputError, check_file

    path = Path(path)
    try:  # no FIFO or device handed to the Parquet reader
        check_file(path, "Parquet file", missing="missing")
    except InputError as e:
        raise DamagedFile(str(e)) from None
    try:
        df = pl.read_parquet(path)
    except Exception as e:  # polars' and pyarrow's errors for empty, truncated or foreign files
        raise DamagedFile(f"{path}: damaged, not a readable Parquet file ({_reason(e)})") from None
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise DamagedFile(f"{path}: not a cctestbed table (no column {', '.join(missing)})")
    return df


@dataclass
class TrialResult:
    """One trial's telemetry and summary.

    ``flows``: one row per flow per sample; ``router``: one row per sample (columns in the
    README). ``summary``: the summary.json document. ``final``: the core's end-of-run counters
    (absent for results loaded from disk).
    """

    trial: Trial
    flows: pl.DataFrame
    router: pl.DataFrame
    summary: dict[str, Any]
    final: Optional[Mapping[str, Any]] = None
    backend: str = "sim"
    #: Further files of the results directory by name: the packet captures (``*.pcap``).
    files: dict[str, bytes] = field(default_factory=dict)
    #: fct.parquet: one row per tcp flow with a size (its completion time); None without such flows.
    completions: Optional[pl.DataFrame] = None
    info: TrialInfo = field(init=False)

    def __post_init__(self) -> None:
        self.info = TrialInfo.from_trial(self.trial, backend=self.backend)

    def plot(self) -> "Figure":
        """The stacked time plot (throughput, RTT, cwnd/inflight, queue, loss)."""
        from .plot import plot_trial

        mtu = self.trial.mtu

        def in_bytes(limits: tuple[Optional[int], Optional[int]]) -> Optional[float]:
            limit_bytes, limit_pkts = limits
            return (float(limit_bytes) if limit_bytes is not None else float(limit_pkts or 0) * mtu) or None

        return plot_trial(
            self.flows,
            self.router,
            self.info,
            title=f"{self.trial.name}: {self.trial.describe()}",
            queue_limit_bytes=in_bytes(self.trial.link.queue_limits()),
            reverse_queue_limit_bytes=in_bytes(self.trial.link.reverse_queue_limits()),
            completions=self.completions,
            phenomena=self.summary.get("phenomena"),
        )

    def save(self, directory: Union[str, Path], force: bool = False, plot: bool = False) -> Path:
        """Write every result file into ``directory`` atomically (see :func:`write_dir`), and the
        stacked plot (``trial.png``) if ``plot``."""
        return write_dir(Path(directory), lambda tmp: self.write_files(tmp, plot=plot), force=force)

    def write_files(self, tmp: Path, plot: bool = False, series: bool = True) -> None:
        """The result files, written into the (temporary) directory ``tmp``; ``trial.png`` too if
        ``plot`` (drawing it loads matplotlib and takes most of a short trial's time); without
        ``series``, no time series (a sweep of ``telemetry = "summary"``: encoding them is most
        of the time a trial spends outside the simulator)."""
        (tmp / "trial.toml").write_text(self.trial.to_toml(), encoding="utf-8")
        if series:
            write_parquet(self.flows, tmp / "flows.parquet")
            write_parquet(self.router, tmp / "router.parquet")
            if self.completions is not None:
                write_parquet(self.completions, tmp / "fct.parquet")
        (tmp / "summary.json").write_text(dump_summary(self.summary), encoding="utf-8")
        if plot:
            from .plot import save_figure

            save_figure(self.plot(), str(tmp / PLOT_FILE))
        for name, data in self.files.items():
            (tmp / name).write_bytes(data)

    @classmethod
    def load(cls, directory: Union[str, Path]) -> "TrialResult":
        """Read a results directory written by :meth:`save`."""
        from .config import ConfigError

        d = Path(directory)
        try:
            trial = load_trial(d / "trial.toml", allow_large=True)
        except ConfigError as e:
            where = f"{d / 'trial.toml'}: "
            why = "; ".join(p[len(where):] if p.startswith(where) else p for p in e.problems)
            raise DamagedFile(f"{where}damaged: {why}") from None
        summary = read_json(d / "summary.json")
        for key in ("trial", "total", "flows"):
            if key not in summary:
                raise DamagedFile(f"{d / 'summary.json'}: not a cctestbed summary (no '{key}')")
        flows = read_parquet(d / "flows.parquet", ("time_s", "flow"))
        router = read_parquet(d / "router.parquet", ("time_s", "queue_bytes"))
        if len(flows) == 0 or len(router) == 0:
            raise DamagedFile(f"{d}: the telemetry holds no samples (flows.parquet or router.parquet is empty)")
        backend = flows["backend"][0] if "backend" in flows.columns and len(flows) else "sim"
        fct = read_parquet(d / "fct.parquet", ("flow", "fct_ms")) if (d / "fct.parquet").exists() else None
        return cls(trial, flows, router, summary, None, backend, completions=fct)


def dump_summary(summary: dict[str, Any]) -> str:
    return json.dumps(summary, indent=2, allow_nan=False) + "\n"


def write_parquet(df: pl.DataFrame, path: Union[str, Path]) -> None:
    """Deterministic parquet: plain string types, zstd level 3, one row group per 1M rows,
    columns without nulls required, dictionary encoding for the text columns (on numbers it costs
    a third of the write time and makes the file larger). polars' own writer is not used: it stores its strings as
    ``large_string`` and dictionary-encodes integer columns (examples/default.toml's flows.parquet
    38 % larger)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    compat = getattr(pl, "CompatLevel", None)  # polars >= 1.1; before it, strings were large_string
    table = df.to_arrow(compat_level=compat.oldest()) if compat is not None else df.to_arrow()
    columns: list[Any] = []
    fields: list[Any] = []
    for f, col in zip(table.schema, table.columns):
        if pa.types.is_large_string(f.type) or str(f.type) == "string_view":
            col = pa.chunked_array([_plain_string(c) for c in col.chunks], pa.string())
        columns.append(col)
        # a column without nulls is written as required: no definition levels to encode (a
        # fifth of a Table 1 trial's write)
        fields.append(pa.field(f.name, col.type, nullable=col.null_count > 0))
    table = pa.Table.from_arrays(columns, schema=pa.schema(fields))
    pq.write_table(
        table,
        str(path),
        compression="zstd",
        compression_level=3,
        row_group_size=1 << 20,
        write_statistics=True,
        use_dictionary=[f.name for f in fields if pa.types.is_string(f.type)],
    )


def _plain_string(arr: Any) -> Any:
    """A ``large_string`` array as a ``string`` array: the same buffers with its 64-bit offsets
    narrowed by NumPy, which spares loading ``pyarrow.compute`` (slower to import than the whole
    write) for a cast. Anything else (``string_view``, 2 GB of text) is cast."""
    import numpy as np
    import pyarrow as pa

    validity, offsets, data = arr.buffers() if pa.types.is_large_string(arr.type) else (None, None, None)
    if offsets is None:
        return arr.cast(pa.string())
    off = np.frombuffer(offsets, dtype=np.int64, count=arr.offset + len(arr) + 1)
    if off[-1] > np.iinfo(np.int32).max:
        return arr.cast(pa.string())
    return pa.Array.from_buffers(pa.string(), len(arr), [validity, pa.py_buffer(off.astype(np.int32)), data],
                                 null_count=arr.null_count, offset=arr.offset)
