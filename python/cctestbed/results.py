"""A trial's results: the telemetry frames, the summary, and how they are written to disk.

A results directory holds ``trial.toml`` (the normalised trial), ``flows.parquet``,
``router.parquet``, ``summary.json``, ``fct.parquet`` when the trial has flows with a size (one
row per such flow: its completion time), the packet captures when the trial asked for them, and
``trial.png`` (the stacked plot) when it is asked for. It is written into a temporary
directory beside its destination and renamed into place only once complete, so a directory
at the destination is never half written. Parquet files are deterministic: the same trial
and seed give byte-identical files (fixed compression, no timestamps in the metadata).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Union

import polars as pl

from .config import Trial, load_trial
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
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DamagedFile(f"{path}: missing") from None
    except (OSError, UnicodeDecodeError) as e:
        raise DamagedFile(f"{path}: cannot be read ({_reason(e)})") from None
    except (ValueError, RecursionError) as e:
        raise DamagedFile(f"{path}: damaged, not valid JSON ({_reason(e)})") from None
    if not isinstance(doc, dict):
        raise DamagedFile(f"{path}: damaged, holds a JSON {type(doc).__name__} where an object belongs")
    return doc


def read_parquet(path: Union[str, Path], columns: tuple[str, ...] = ()) -> pl.DataFrame:
    """A Parquet results file with at least ``columns``; :class:`DamagedFile` otherwise."""
    path = Path(path)
    if not path.is_file():
        raise DamagedFile(f"{path}: missing")
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
        )

    def save(self, directory: Union[str, Path], force: bool = False, plot: bool = False) -> Path:
        """Write every result file into ``directory`` atomically (see :func:`write_dir`), and the
        stacked plot (``trial.png``) if ``plot``."""
        return write_dir(Path(directory), lambda tmp: self.write_files(tmp, plot=plot), force=force)

    def write_files(self, tmp: Path, plot: bool = False) -> None:
        """The result files, written into the (temporary) directory ``tmp``; ``trial.png`` too if
        ``plot`` (drawing it loads matplotlib and takes most of a short trial's time)."""
        (tmp / "trial.toml").write_text(self.trial.to_toml(), encoding="utf-8")
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
    dictionary encoding for the text columns (on numbers it costs a third of the write time and
    makes the file larger). polars' own writer is not used: it stores its strings as
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
        fields.append(pa.field(f.name, col.type))
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


class ReplaceRefused(ValueError):
    """``--force`` was asked to replace something that is not a results directory of this tool."""


#: A directory holding all of these was written by :func:`write_dir` (a trial's results).
MARKER_FILES = ("trial.toml", "summary.json")
#: ... or these: captures analysed without their trial (``cctestbed analyze``).
ANALYSIS_MARKER_FILES = ("capture.json", "summary.json")


def check_replaceable(dest: Union[str, Path], protect: tuple[Union[str, Path], ...] = ()) -> None:
    """Raise :class:`ReplaceRefused` unless ``dest`` may be replaced by a new results directory.

    Only a results directory of this tool (one holding trial.toml and summary.json) may be
    replaced, and never the working directory or one of its parents, nor a directory holding
    one of the ``protect`` paths (the trial file being run). A path that does not exist is fine.
    """
    dest = Path(dest)
    if not dest.exists() and not dest.is_symlink():
        return
    real = dest.resolve()
    if dest.is_symlink() or not dest.is_dir():
        raise ReplaceRefused(f"{dest} is not a directory; --force replaces only a results directory")
    cwd = Path.cwd().resolve()
    if real == cwd or real in cwd.parents:
        raise ReplaceRefused(
            f"{dest} is the working directory or one of its parents; --force replaces only a results directory"
        )
    for p in protect:
        pr = Path(p).resolve()
        if pr == real or real in pr.parents:
            raise ReplaceRefused(f"{dest} holds {p}, the file being run; choose another output directory")
    missing = [f for f in MARKER_FILES if not (dest / f).is_file()]
    analysed = all((dest / f).is_file() for f in ANALYSIS_MARKER_FILES)
    if missing and not analysed:
        raise ReplaceRefused(
            f"{dest} is not a cctestbed results directory (no {', '.join(missing)}); "
            "--force replaces only a results directory written by cctestbed"
        )


class DestinationError(ValueError):
    """The results cannot be written where asked (a path through a file, a read-only directory)."""


def check_destination(dest: Union[str, Path]) -> None:
    """Raise :class:`DestinationError` unless a directory can be created at ``dest``: every
    existing ancestor must be a directory and the nearest one writable. Checked before a trial
    runs, so a bad ``-o`` costs nothing."""
    dest = Path(dest).absolute()
    if dest.exists() and not dest.is_dir():
        raise DestinationError(f"{dest} is a file, not a directory; choose another output directory")
    for anc in dest.parents:
        if anc.exists() or anc.is_symlink():
            if not anc.is_dir():
                raise DestinationError(
                    f"{anc} is a file, not a directory, so {dest} cannot be created; choose another output directory"
                )
            if not os.access(anc, os.W_OK | os.X_OK):
                raise DestinationError(f"cannot create {dest}: {anc} is not writable")
            return


#: Temporary names beside a destination: ``.<name>.tmp-*`` while being written (locked by the
#: writer), ``.<name>.old-*`` holding the directory a ``--force`` run moved aside.
TMP_MARK = ".tmp-"
OLD_MARK = ".old-"
_LEFTOVER = re.compile(r"^\.[^/]+\.(tmp|old)-[a-z0-9_]+$")


def _lock_dir(path: Path) -> Optional[int]:
    """An exclusive flock on directory ``path`` (held until the fd is closed), or None if taken."""
    import fcntl

    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def clean_stale(parent: Union[str, Path]) -> tuple[list[Path], list[Path]]:
    """Remove the temporary directories that killed runs left in ``parent``.

    A run writes its results into ``.<name>.tmp-*`` holding a lock on it; a directory whose lock
    can be taken was left by a run that died (SIGKILL, power loss) and is removed. Returns
    (removed, kept): kept are ``.<name>.old-*`` directories holding results a ``--force`` run had
    moved aside when it was killed; they are reported, never deleted.
    """
    parent = Path(parent)
    removed: list[Path] = []
    kept: list[Path] = []
    try:
        entries = list(parent.iterdir())
    except OSError:
        return removed, kept
    for p in entries:
        m = _LEFTOVER.match(p.name)
        if m is None or p.is_symlink() or not p.is_dir():
            continue
        if m.group(1) == "tmp":
            try:
                fd = _lock_dir(p)
            except OSError:
                continue  # gone meanwhile, or not ours to open
            if fd is None:
                continue  # a run is writing it now
            try:
                shutil.rmtree(p, ignore_errors=True)
                removed.append(p)
            finally:
                os.close(fd)
        elif any(p.iterdir()):
            kept.append(p)
    return removed, kept


def write_dir(dest: Path, write: Callable[[Path], None], force: bool = False) -> Path:
    """Fill a temporary directory beside ``dest`` with ``write`` and rename it to ``dest``.

    An existing ``dest`` is refused (``FileExistsError``) unless ``force``; then, if it is a
    results directory (:func:`check_replaceable`), it is moved aside, the new directory renamed
    into place, and the old one deleted. On any error the temporary directory is removed and
    ``dest`` is left as it was.
    """
    dest = dest.absolute()
    if dest.exists() and not force:
        raise FileExistsError(f"{dest} exists; pass force=True (--force) to replace it")
    if force:
        check_replaceable(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    clean_stale(dest.parent)
    # Created under another name and locked before it is renamed to a .tmp- name, so that
    # clean_stale never sees an unlocked directory of a live run.
    new = Path(tempfile.mkdtemp(prefix=f".{dest.name}.new-", dir=dest.parent))
    lock = _lock_dir(new)
    tmp = new.with_name(new.name.replace(".new-", TMP_MARK, 1))
    os.rename(new, tmp)
    try:
        write(tmp)
        os.chmod(tmp, 0o755)
        if dest.exists():
            if not force:
                raise FileExistsError(f"{dest} exists; pass force=True (--force) to replace it")
            check_replaceable(dest)
            old = Path(tempfile.mkdtemp(prefix=f".{dest.name}{OLD_MARK}", dir=dest.parent))
            os.rename(dest, old / "previous")
            os.rename(tmp, dest)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        if lock is not None:
            os.close(lock)
    return dest
