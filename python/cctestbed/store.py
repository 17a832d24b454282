"""The sweep's output directory: a content-addressed trial store and the ``trials.parquet`` table.

Layout of a sweep directory::

    sweep.json            the sweep file's contents and the column -> trial path map
    trials.parquet        one row per trial of the sweep (rewritten atomically as trials finish)
    trials/<key>/         one finished trial: trial.toml, flows.parquet, router.parquet,
                          summary.json, metrics.json, run.json (+ trial.png with --trial-plots)
    failed/<key>.json     a trial that failed: its error and traceback (removed once it succeeds)
    .lock                 held while a sweep runs in the directory

``<key>`` is :func:`cctestbed.sweep.trial_key`: a hash of the trial's normalised core config
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
from typing import Any, Iterable, Optional

import polars as pl

from .results import DamagedFile, write_parquet
from .sweep import Sweep, TrialSpec

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
    from .results import read_json

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
        #: The table last written, its row of each key, and the keys changed since.
        self._table: Optional[pl.DataFrame] = None
        self._row_of: dict[str, int] = {}
        self._changed: set[str] = set()

    # --- paths ---------------------------------------------------------------------------------

    def trial_dir(self, key: str) -> Path:
        return self.root / TRIALS_DIR / key

    def failure_path(self, key: str) -> Path:
        return self.root / FAILED_DIR / f"{key}.json"

    def is_done(self, key: str) -> bool:
        return (self.trial_dir(key) / "summary.json").is_file()

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
            if final.exists():  # a directory without summary.json is not a trial; replace it
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

    def _metrics_row(self, key: str) -> dict[str, Any]:
        return trial_metrics(self.trial_dir(key))

    def rows(self, specs: Iterable[TrialSpec]) -> list[dict[str, Any]]:
        out = []
        for s in specs:
            row: dict[str, Any] = dict(s.values)
            row["seed"] = s.seed
            row["key"] = s.key
            done, damaged = self.is_done(s.key), None
            if done:
                try:
                    row.update(self._metrics_row(s.key))
                except DamagedFile as e:
                    damaged = f"stored results damaged: {e}; delete {self.trial_dir(s.key)} to run it again"
            if done and damaged is None:
                row.update(status="done", error=None, dir=f"{TRIALS_DIR}/{s.key}")
            elif damaged is not None:
                row.update(status="failed", error=damaged, dir=None)
            else:
                fail = self.failure(s.key)
                row.update(
                    status="failed" if fail else "pending",
                    error=fail.get("error") if fail else None,
                    dir=None,
                )
            out.append(row)
        return out

    def table(self, sweep: Sweep) -> pl.DataFrame:
        """trials.parquet as a frame: axis columns, seed, status, error, dir, key, then metrics."""
        return self._frame(sweep, self.rows(sweep.specs))

    def _frame(self, sweep: Sweep, rows: list[dict[str, Any]]) -> pl.DataFrame:
        fixed = [*sweep.columns, "seed", "status", "error", "dir", "key"]
        metric_cols = sorted({c for r in rows for c in r if c not in fixed}, key=_metric_order)
        cols: dict[str, list[Any]] = {c: [r.get(c) for r in rows] for c in [*fixed, *metric_cols]}
        return pl.DataFrame([_series(c, v) for c, v in cols.items()])

    def write_table(self, sweep: Sweep, incremental: bool = False) -> pl.DataFrame:
        """Write trials.parquet atomically. The whole table is rebuilt from the trial directories,
        unless ``incremental`` and a table was built before: then only the rows of trials
        committed or failed since are rebuilt, so a write costs what changed, not the sweep's size
        (the final write of a run rebuilds it all)."""
        if incremental and self._table is not None:
            df = self._updated(sweep)
        else:
            df = self.table(sweep)
            self._row_of = {k: i for i, k in enumerate(df["key"].to_list())}
        self._table = df
        self._changed = set()
        fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX + TABLE + ".", dir=self.root)
        os.close(fd)
        try:
            write_parquet(df, tmp)
            os.replace(tmp, self.root / TABLE)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return df

    def _updated(self, sweep: Sweep) -> pl.DataFrame:
        """The last table with the rows of the changed trials rebuilt."""
        assert self._table is not None
        keys = sorted(k for k in self._changed if k in self._row_of)
        if not keys:
            return self._table
        positions = [self._row_of[k] for k in keys]
        by_pos = {p: sweep.specs[p] for p in positions}  # the table's rows follow sweep.specs
        if any(by_pos[p].key != k for p, k in zip(positions, keys)):
            return self.table(sweep)
        new = self._frame(sweep, self.rows([by_pos[p] for p in positions]))
        new = new.with_columns(pl.Series("_row", positions, dtype=pl.UInt32))
        rest = self._table.with_row_index("_row").filter(~pl.col("_row").is_in(positions))
        df = pl.concat([rest, new], how="diagonal_relaxed").sort("_row").drop("_row")
        fixed = [*sweep.columns, "seed", "status", "error", "dir", "key"]
        metric_cols = sorted((c for c in df.columns if c not in fixed), key=_metric_order)
        return df.select([*fixed, *metric_cols])


def _series(name: str, values: list[Any]) -> pl.Series:
    """A column with a stable type whatever mix of None, ints and floats the rows hold."""
    present = [v for v in values if v is not None]
    if present and all(isinstance(v, bool) for v in present):
        return pl.Series(name, values, dtype=pl.Boolean)
    if present and all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        return pl.Series(name, values, dtype=pl.Int64)
    if present and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
        return pl.Series(name, [None if v is None else float(v) for v in values], dtype=pl.Float64)
    if present and all(isinstance(v, list) for v in present):
        if all(isinstance(x, (int, float)) or x is None for v in present for x in v):
            return pl.Series(
                name, [None if v is None else [None if x is None else float(x) for x in v] for v in values],
                dtype=pl.List(pl.Float64),
            )
        return pl.Series(name, [None if v is None else json.dumps(v) for v in values], dtype=pl.String)
    if not present:
        return pl.Series(name, values, dtype=pl.String if name in ("error", "dir") else pl.Float64)
    return pl.Series(name, [None if v is None else (v if isinstance(v, str) else json.dumps(v)) for v in values],
                     dtype=pl.String)


def read_meta(root: Path) -> dict[str, Any]:
    """sweep.json of a sweep directory; :class:`~cctestbed.results.DamagedFile` if it is damaged."""
    from .results import DamagedFile, read_json

    path = Path(root) / META
    meta = read_json(path)
    if not isinstance(meta.get("sweep"), dict) or not isinstance(meta.get("columns", {}), dict):
        raise DamagedFile(f"{path}: not a cctestbed sweep record (no 'sweep' table)")
    return meta


def read_table(root: Path) -> tuple[pl.DataFrame, dict[str, Any]]:
    """trials.parquet and sweep.json of a sweep directory (DamagedFile if either is damaged)."""
    from .results import read_parquet

    root = Path(root)
    meta = read_meta(root)
    return read_parquet(root / TABLE, ("status", "seed", "key", *meta.get("columns", {}))), meta
