"""The kernel reference: the kernel side of the suite, one row per scenario rep, small enough to check in.

``kernel-reference.parquet`` (beside the suite file by default) has, per finished kernel trial:
``scenario``, ``seed``, ``key`` (the scenario key: :meth:`.suite.Scenario.scenario_key`), the
run's provenance (``kernel`` release, ``host``, ``date`` in UTC, ``cctestbed`` version,
``link_emulator`` and its per-frame timing error ``emu_p99_us`` (p99, the later direction's; the
forward one's in older rows) and ``emu_stall_ms`` (its longest, either way) beside the forward
buffer's drain time ``buffer_drain_ms``, the frames the host lost around the link emulator
``frames_lost`` (null where not recorded), the sender hosts' ``sender_qdisc``), and every metric of
:mod:`.measure` with the ``metrics_version`` that computed them (rows of an older version are
measured again from their trials by the next ``fidelity run`` where the trials are at hand). It grows one row at a time, rewritten atomically after each kernel trial, so a
campaign cut off at any point keeps every finished trial; ``fidelity run`` skips rows it holds.
"""

from __future__ import annotations

import json
import platform
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional, Union

import polars as pl

from ..kernel.routerstats import (EMULATOR_LATE_P99_US, emulator_late_p99_us, emulator_stall_ms, frames_lost_outside_the_link,
                                  stall_outlasts_buffer)
from ..results import write_parquet
from ..sweep.store import atomic_write_bytes

FILENAME = "kernel-reference.parquet"
ID_COLUMNS = ("scenario", "seed", "key")
PROVENANCE = ("kernel", "host", "date", "cctestbed", "link_emulator", "emu_p99_us", "emu_stall_ms", "buffer_drain_ms",
              "frames_lost", "sender_qdisc", "metrics_version")
#: A kernel rep whose link emulator sent 1 % of frames later than this (its p99 timing error, us)
#: ran on a stalled host, not on the path its trial describes, and is not kept
#: (:data:`cctestbed.kernel.routerstats.EMULATOR_LATE_P99_US`).
DISTURBED_EMU_P99_US = EMULATOR_LATE_P99_US


def default_path(suite_source: Optional[str]) -> Path:
    return (Path(suite_source).parent if suite_source else Path(".")) / FILENAME


def provenance(trial_dir: Path) -> dict[str, Any]:
    """Where and when a stored kernel trial ran, from its kernel.json and run.json."""
    from .. import __version__

    kj: dict[str, Any] = {}
    rj: dict[str, Any] = {}
    try:
        kj = json.loads((trial_dir / "kernel.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        pass
    try:
        rj = json.loads((trial_dir / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        pass
    started = rj.get("started")
    when = datetime.fromtimestamp(started, timezone.utc) if isinstance(started, (int, float)) else datetime.now(timezone.utc)
    return {
        "kernel": kj.get("kernel") or platform.release(),
        "host": rj.get("host") or platform.node(),
        "date": when.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "cctestbed": rj.get("cctestbed") or __version__,
        "link_emulator": _link_emulator(kj),
        "emu_p99_us": emulator_late_p99_us(kj.get("linkemu")),
        "frames_lost": frames_lost_outside_the_link(kj.get("linkemu")) if kj.get("linkemu") else None,
        "emu_stall_ms": emulator_stall_ms(kj.get("linkemu")) if kj.get("linkemu") else None,
        "buffer_drain_ms": (drain / 1e3 if (drain := (kj.get("bottleneck") or {}).get("buffer_drain_us")) else None),
        "sender_qdisc": (kj.get("host_stack") or {}).get("sender_qdisc"),
    }


def disturbed(row: dict[str, Any]) -> Optional[str]:
    """Why a kernel rep is not kept in the reference (see :data:`DISTURBED_EMU_P99_US`), or None."""
    p99 = row.get("emu_p99_us")
    if row.get("frames_lost"):
        return (f"the host lost {row['frames_lost']} frame(s) around the link emulator, outside the link "
                "(its socket's buffer full, or an interface refused them)")
    stalled = stall_outlasts_buffer(row.get("emu_stall_ms") or 0.0, row.get("buffer_drain_ms"))
    if stalled:
        return stalled
    if p99 is not None and p99 > DISTURBED_EMU_P99_US:
        return (f"the link emulator sent 1 % of frames over {p99 / 1000:.1f} ms late "
                f"(a stalled host; kept up to {DISTURBED_EMU_P99_US / 1000:g} ms)")
    return None


def _link_emulator(kj: dict[str, Any]) -> Optional[str]:
    """The kernel path's link emulation: ``userspace+tx`` once the emulator delays each frame by
    its transmission time at the bottleneck rate (docs/kernel.md), plain ``userspace`` before."""
    mode = kj.get("link_emulator")
    if mode == "userspace" and (kj.get("linkemu") or {}).get("serialization_bps"):
        return "userspace+tx"
    return mode


class Reference:
    """The reference file, held as rows keyed by scenario key."""

    def __init__(self, path: Union[str, Path]):
        self.path = Path(path)
        self.rows: dict[str, dict[str, Any]] = {}
        if self.path.is_file():
            try:
                df = pl.read_parquet(self.path)
            except Exception as e:  # a damaged file is named, not silently replaced
                raise ValueError(f"{self.path}: not a readable kernel reference ({e})") from None
            missing = [c for c in ID_COLUMNS if c not in df.columns]
            if missing:
                raise ValueError(f"{self.path}: not a kernel reference (no {', '.join(missing)} column)")
            for r in df.iter_rows(named=True):
                if disturbed(r) is None:  # a rep from a stalled host is measured again
                    self.rows[r["key"]] = {k: v for k, v in r.items() if v is not None or k in ID_COLUMNS}

    def has(self, key: str) -> bool:
        return key in self.rows

    def add(self, row: dict[str, Any], save: bool = True) -> Optional[str]:
        """Add (or replace) one rep and rewrite the file atomically unless ``save`` is False;
        a rep from a stalled host is not kept, and why is returned (:func:`disturbed`)."""
        why = disturbed(row)
        if why is not None:
            return why
        self.rows[row["key"]] = row
        if save:
            self.save()
        return None

    def frame(self) -> pl.DataFrame:
        rows = sorted(self.rows.values(), key=lambda r: (r["scenario"], r["seed"]))
        metric_cols = sorted({k for r in rows for k in r if k not in ID_COLUMNS and k not in PROVENANCE})
        cols = [*ID_COLUMNS, *PROVENANCE, *metric_cols]
        data: dict[str, list[Any]] = {c: [r.get(c) for r in rows] for c in cols}
        schema: dict[str, Any] = {"scenario": pl.String, "seed": pl.Int64, "key": pl.String, "kernel": pl.String,
                                  "host": pl.String, "date": pl.String, "cctestbed": pl.String,
                                  "link_emulator": pl.String, "emu_p99_us": pl.Float64, "emu_stall_ms": pl.Float64,
                                  "buffer_drain_ms": pl.Float64, "frames_lost": pl.Int64,
                                  "sender_qdisc": pl.String,
                                  "metrics_version": pl.Int64}
        for c in metric_cols:
            schema[c] = pl.Float64
        return pl.DataFrame(
            {c: [None if v is None else (float(v) if schema[c] == pl.Float64 else v) for v in data[c]] for c in cols},
            schema=schema,
        )

    def save(self) -> None:
        import tempfile

        self.path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            write_parquet(self.frame(), Path(tmp) / FILENAME)
            atomic_write_bytes(self.path, (Path(tmp) / FILENAME).read_bytes())

    def stale(self, key: str) -> bool:
        """True when the row was measured by an older definition of the metrics (:data:`.measure.VERSION`)."""
        from .measure import VERSION

        return (self.rows.get(key, {}).get("metrics_version") or 0) < VERSION

    def for_scenario(self, keys: list[str]) -> list[dict[str, Any]]:
        return [self.rows[k] for k in keys if k in self.rows]
