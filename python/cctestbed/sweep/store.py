"""The sweep's output directory: a content-addressed trial store and the ``trials.parquet`` table.

Layout of a sweep directory::

    sweep.json            the sweep file's contents and the column -> trial path map
    trials.parquet        one row per trial of the sweep (rewritten atomically as trials finish)
    trials/<key>/         one finished trial: trial.toml, flows.parquet, router.parquet,
                          summary.json, metrics.json, run.json (+ trial.png with --trial-plots)
    failed/<key>.json     a trial that failed: its error and traceback (removed once it succeeds)
    judge/<key>.json      with ``sweep --judge``: the trial's judgement (cctestbed.sweep.judge)
    .lock                 held while a sweep runs in the directory

``<key>`` is :func:`cctestbed.sweep.spec.trial_key`: a hash of the trial's normalised core config
(seed included), its steady window and the backend, so the same trial is stored once whatever
sweep file asks for it. A trial directory is filled under a temporary name and renamed into place
in one step: a trial is either finished and complete in the store or absent. ``trials.parquet`` is
derived from the trial directories and can always be rebuilt from them (every run does so first).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional

import polars as pl

from ..results import DamagedFile
from .spec import FIXED_COLUMNS, Sweep, TrialSpec

TRIALS_DIR = "trials"
FAILED_DIR = "failed"
TABLE = "trials.parquet"
META = "sweep.json"
#: Prefix of the per-trial and per-write temporary names; left-overs of a killed run are removed.
TMP_PREFIX = ".tmp-"

#: Metric groups flattened into trials.parquet, in this order, after the fixed columns.
SECTION_ORDER = ("total", "groups", "queue", "rtt", "flows", "trial")


class StoreBusy(RuntimeError):
    """Another sweep holds the directory."""


class StoreMismatch(RuntimeError):
    """The directory holds another sweep (or is not a sweep directory)."""


def flatten(doc: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts to dotted keys; lists of tables with an ``id`` are keyed by it; other lists stay lists."""
    out: dict[str, Any] = {}
    if isinstance(doc, dict):
        for k, v in doc.items():
            out.update(flatten(v, f"{prefix}{k}."))
    elif isinstance(doc, list) and doc and all(isinstance(x, dict) and "id" in x for x in doc):
        for x in doc:
            rest = {k: v for k, v in x.items() if k != "id"}
            out.update(flatten(rest, f"{prefix}{x['id']}."))
    else:
        out[prefix[:-1]] = doc
    return out


def merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """``a`` deep-merged over ``b``: where both hold a value, ``a``'s wins."""
    out = dict(b)
    for k, v in a.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merge(v, out[k])
        else:
            out[k] = v
    return out


def trial_metrics(trial_dir: Path) -> dict[str, Any]:
    """summary.json merged with metrics.json (summary.json wins), flattened to dotted keys;
    :class:`~cctestbed.results.DamagedFile` if either is damaged."""
    from ..results import read_json

    summary = read_json(trial_dir / "summary.json")
    extra_path = trial_dir / "metrics.json"
    extra = read_json(extra_path) if extra_path.exists() else {}
    extra = {k: v for k, v in extra.items() if k in ("total", "groups")}
    return flatten(merge(summary, extra))


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write a file via a temporary one beside it and a rename: readers see the old or the new file."""
    fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX + path.name + ".", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _metric_order(col: str) -> tuple[int, str]:
    head = col.split(".", 1)[0]
    return (SECTION_ORDER.index(head) if head in SECTION_ORDER else len(SECTION_ORDER), col)


class Store:
    """A sweep directory (see the module docstring)."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self._lock_fd: Optional[int] = None
        #: Kinds of value seen per column of the table last written, and the keys changed since.
        self._kinds: Optional[dict[str, set[str]]] = None
        self._changed: set[str] = set()
        #: A finished trial also holds its time series (a sweep of full telemetry, once opened):
        #: one kept with ``telemetry = "summary"`` is run again.
        self.series_required = False

    # --- paths ---------------------------------------------------------------------------------

    def trial_dir(self, key: str) -> Path:
        return self.root / TRIALS_DIR / key

    def failure_path(self, key: str) -> Path:
        return self.root / FAILED_DIR / f"{key}.json"

    def is_done(self, key: str) -> bool:
        d = self.trial_dir(key)
        return (d / "summary.json").is_file() and (not self.series_required or (d / "flows.parquet").is_file())

    def failure(self, key: str) -> Optional[dict[str, Any]]:
        p = self.failure_path(key)
        if not p.is_file():
            return None
        try:
            return json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {"error": "failure record unreadable"}

    # --- opening -------------------------------------------------------------------------------

    @staticmethod
    def is_sweep_dir(path: Path) -> bool:
        return (Path(path) / META).is_file()

    def check_compatible(self, sweep: Sweep, resume: bool) -> None:
        """Refuse a directory that holds something else, unless ``resume`` says to reuse it."""
        if not self.root.exists():
            return
        if not self.root.is_dir():
            raise StoreMismatch(f"{self.root} exists and is not a directory")
        meta = self.root / META
        if meta.is_file():
            try:
                old = json.loads(meta.read_text(encoding="utf-8")).get("sweep")
            except (OSError, ValueError):
                old = None
            if old != sweep.raw and not resume:
                raise StoreMismatch(
                    f"{self.root} holds results of a different sweep file; pass --resume to run this one "
                    f"there (finished trials they share are reused), or choose another -o directory"
                )
        elif any(p for p in self.root.iterdir() if p.name != ".lock") and not resume:
            raise StoreMismatch(
                f"{self.root} exists and is not a sweep directory; choose another -o directory"
            )

    def open(self, sweep: Sweep) -> None:
        """Create the directory, take the lock, clean left-overs, record the sweep."""
        self.series_required = sweep.telemetry == "full"
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / TRIALS_DIR).mkdir(exist_ok=True)
        (self.root / FAILED_DIR).mkdir(exist_ok=True)
        self._lock()
        for d in (self.root, self.root / TRIALS_DIR, self.root / FAILED_DIR):
            for p in d.iterdir():
                if p.name.startswith(TMP_PREFIX):
                    shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
        meta = {"format": 1, "name": sweep.name, "sweep": sweep.raw, "columns": sweep.columns}
        atomic_write_bytes(self.root / META, (json.dumps(meta, indent=2, sort_keys=False) + "\n").encode())

    def _lock(self) -> None:
        import fcntl

        fd = os.open(self.root / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.EAGAIN, errno.EACCES):
                raise StoreBusy(f"another sweep is running in {self.root}") from None
            raise
        self._lock_fd = fd

    def close(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # --- writing trials ------------------------------------------------------------------------

    def commit(self, key: str, files: dict[str, bytes]) -> Path:
        """Store a finished trial's files under its key in one rename."""
        final = self.trial_dir(key)
        if self.is_done(key):
            return final
        tmp = Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{key}.", dir=self.root / TRIALS_DIR))
        try:
            for name, data in files.items():
                (tmp / name).write_bytes(data)
            os.chmod(tmp, 0o755)
            if final.exists():  # not a finished trial (no summary.json, or no series wanted now); replace it
                shutil.rmtree(final)
            os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        self.failure_path(key).unlink(missing_ok=True)
        self._changed.add(key)
        return final

    def record_failure(self, key: str, error: str, detail: Optional[dict[str, Any]] = None) -> None:
        doc = {"key": key, "error": error, **(detail or {})}
        atomic_write_bytes(self.failure_path(key), (json.dumps(doc, indent=2) + "\n").encode())
        self._changed.add(key)

    # --- the table -----------------------------------------------------------------------------
    #
    # trials.parquet is written in chunks of CHUNK_ROWS rows, so what the sweep process holds
    # does not grow with the sweep: a full write spools the rows to a temporary file while it
    # learns each column's type, then writes them chunk by chunk; an incremental write copies the
    # last table chunk by chunk, replacing the rows of trials that changed since. The only state
    # kept between writes is the kinds of value seen per column (as many entries as columns).

    def state(self, key: str) -> dict[str, Any]:
        """A trial's status, error, dir and (when finished) its metrics, as table cells."""
        if self.is_done(key):
            try:
                metrics = trial_metrics(self.trial_dir(key))
                from .judge import table_cells  # sweep --judge's harm columns, when judged

                return {"status": "done", "error": None, "dir": f"{TRIALS_DIR}/{key}", **metrics,
                        **table_cells(self.root, key)}
            except DamagedFile as e:
                damaged = f"stored results damaged: {e}; delete {self.trial_dir(key)} to run it again"
                return {"status": "failed", "error": damaged, "dir": None}
        fail = self.failure(key)
        return {"status": "failed" if fail else "pending", "error": fail.get("error") if fail else None, "dir": None}

    def rows(self, specs: Iterable[TrialSpec]) -> Iterator[dict[str, Any]]:
        """The table's row of each spec, in order."""
        for s in specs:
            yield {**s.values, "seed": s.seed, "key": s.key, **self.state(s.key)}

    def table(self, sweep: Sweep) -> pl.DataFrame:
        """trials.parquet as a frame: axis columns, seed, status, error, dir, key, then metrics."""
        with tempfile.TemporaryDirectory(prefix="cctestbed-table-") as tmp:
            self._write_full(sweep, Path(tmp) / TABLE, Path(tmp) / "rows.jsonl")
            return pl.read_parquet(Path(tmp) / TABLE)

    def write_table(self, sweep: Sweep, incremental: bool = False) -> None:
        """Write trials.parquet atomically, rebuilt from the trial directories; ``incremental``
        (after a first write) rebuilds only the rows of trials committed or failed since, so a
        write reads what changed, not every trial (the final write of a run rebuilds it all)."""
        from pyarrow import ArrowException  # type: ignore[import-untyped]

        path = self.root / TABLE
        fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX + TABLE + ".", dir=self.root)
        os.close(fd)
        try:
            patched = False
            if incremental and self._kinds is not None and path.is_file():
                try:
                    self._write_patched(sweep, path, Path(tmp))
                    patched = True
                except ArrowException:  # a column's type changed beyond what a cast carries over
                    pass
            if not patched:
                self._kinds = self._write_full(sweep, Path(tmp), Path(tmp + ".rows"))
            self._changed = set()
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def _write_full(self, sweep: Sweep, dest: Path, spool: Path) -> dict[str, set[str]]:
        """The whole table into ``dest``; returns the kinds of value seen per column."""
        kinds: dict[str, set[str]] = {c: set() for c in [*sweep.columns, *FIXED_COLUMNS]}
        try:
            with open(spool, "w", encoding="utf-8") as f:
                for row in self.rows(sweep.iter_specs()):
                    _note_kinds(kinds, row)
                    f.write(json.dumps(row, separators=(",", ":")) + "\n")
            schema = _schema(sweep, kinds)
            with open(spool, encoding="utf-8") as f, _writer(dest, schema) as w:
                chunk: list[dict[str, Any]] = []
                for line in f:
                    chunk.append(json.loads(line))
                    if len(chunk) == CHUNK_ROWS:
                        w.write_table(_arrow(schema, chunk))
                        chunk = []
                if chunk or not w.written:
                    w.write_table(_arrow(schema, chunk))
        finally:
            spool.unlink(missing_ok=True)
        return kinds

    def _write_patched(self, sweep: Sweep, old: Path, dest: Path) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq  # type: ignore[import-untyped]

        assert self._kinds is not None
        states = {k: self.state(k) for k in self._changed}
        for st in states.values():
            _note_kinds(self._kinds, st)
        schema = _schema(sweep, self._kinds)
        keep = [*sweep.columns, "seed", "key"]
        with _writer(dest, schema) as w:
            for batch in pq.ParquetFile(old).iter_batches(batch_size=CHUNK_ROWS):
                t = _conform(pa.Table.from_batches([batch]), schema)
                keys = t.column("key").to_pylist()
                hits = [i for i, k in enumerate(keys) if k in states]
                if hits:
                    pieces, start = [], 0
                    for i in hits:
                        fixed = t.slice(i, 1).select(keep).to_pylist()[0]
                        pieces += [t.slice(start, i - start), _arrow(schema, [{**fixed, **states[keys[i]]}])]
                        start = i + 1
                    t = pa.concat_tables([*pieces, t.slice(start)])
                w.write_table(t)


#: Rows of trials.parquet built and written at a time (one Parquet row group each).
CHUNK_ROWS = 1000


def _kind(v: Any) -> str:
    if v is None:
        return "none"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float"
    if isinstance(v, list):
        return "numbers" if all(x is None or isinstance(x, (int, float)) for x in v) else "list"
    return "str" if isinstance(v, str) else "other"


def _note_kinds(kinds: dict[str, set[str]], row: dict[str, Any]) -> None:
    for c, v in row.items():
        kinds.setdefault(c, set()).add(_kind(v))


def _column_type(name: str, kinds: set[str]) -> Any:
    """A column's type, stable whatever mix of None, ints and floats its rows hold."""
    import pyarrow as pa

    present = kinds - {"none"}
    if not present:
        return pa.string() if name in ("error", "dir") else pa.float64()
    if present == {"bool"}:
        return pa.bool_()
    if present == {"int"}:
        return pa.int64()
    if present <= {"int", "float"}:
        return pa.float64()
    if present == {"numbers"}:
        return pa.list_(pa.float64())
    return pa.string()  # text, or values of mixed kinds as JSON


def _schema(sweep: Sweep, kinds: dict[str, set[str]]) -> Any:
    import pyarrow as pa

    fixed = [*sweep.columns, *FIXED_COLUMNS]
    metrics = sorted((c for c in kinds if c not in fixed), key=_metric_order)
    return pa.schema([pa.field(c, _column_type(c, kinds.get(c, set()))) for c in [*fixed, *metrics]])


def _cell(v: Any, kind: Any) -> Any:
    import pyarrow as pa

    if v is None:
        return None
    if kind == pa.float64():
        return float(v)
    if kind == pa.list_(pa.float64()):
        return [None if x is None else float(x) for x in v]
    if kind == pa.string() and not isinstance(v, str):
        return json.dumps(v)
    return v


def _arrow(schema: Any, rows: list[dict[str, Any]]) -> Any:
    """Rows as an Arrow table of ``schema`` (a missing cell is null)."""
    import pyarrow as pa

    return pa.table(
        [pa.array([_cell(r.get(f.name), f.type) for r in rows], type=f.type) for f in schema], schema=schema
    )


def _conform(t: Any, schema: Any) -> Any:
    """An Arrow table in the columns and types of ``schema``: columns added as nulls, types widened."""
    import pyarrow as pa

    cols = []
    for f in schema:
        if f.name not in t.column_names:
            cols.append(pa.nulls(t.num_rows, f.type))
        else:
            c = t.column(f.name)
            if c.type != f.type:
                c = pa.nulls(t.num_rows, f.type) if c.null_count == t.num_rows else c.cast(f.type)
            cols.append(c)
    return pa.table(cols, schema=schema)


class _writer:
    """A Parquet file written a chunk (one row group) at a time, as :func:`~cctestbed.results.write_parquet` does."""

    def __init__(self, path: Path, schema: Any):
        import pyarrow.parquet as pq

        self.written = False
        self._w = pq.ParquetWriter(str(path), schema, compression="zstd", compression_level=3,
                                   write_statistics=True, use_dictionary=True)

    def write_table(self, t: Any) -> None:
        self._w.write_table(t)
        self.written = True

    def __enter__(self) -> "_writer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self._w.close()


def read_meta(root: Path) -> dict[str, Any]:
    """sweep.json of a sweep directory; :class:`~cctestbed.results.DamagedFile` if it is damaged."""
    from ..results import DamagedFile, read_json

    path = Path(root) / META
    meta = read_json(path)
    if not isinstance(meta.get("sweep"), dict) or not isinstance(meta.get("columns", {}), dict):
        raise DamagedFile(f"{path}: not a cctestbed sweep record (no 'sweep' table)")
    return meta


def read_table(root: Path) -> tuple[pl.DataFrame, dict[str, Any]]:
    """trials.parquet and sweep.json of a sweep directory (DamagedFile if either is damaged)."""
    from ..results import read_parquet

    root = Path(root)
    meta = read_meta(root)
    return read_parquet(root / TABLE, ("status", "seed", "key", *meta.get("columns", {}))), meta
