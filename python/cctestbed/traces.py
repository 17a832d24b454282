"""Link traces: a bottleneck whose capacity follows recorded or synthetic delivery opportunities.

The format is Mahimahi's (``mm-link``): one line per delivery opportunity, its time in whole
milliseconds from the start of the trace, non-decreasing; each opportunity carries one
1500-byte packet (Mahimahi's 1504-byte ``PACKET_SIZE`` with its 4-byte TUN header), several
lines with the same time give that many packets at once, and the trace repeats with the last
line's time as its period. Blank lines and lines starting with ``#`` are skipped. A trial names
its trace with ``link.trace``; a relative path is read from the trial (or sweep) file's folder.

The simulator serves the queue at those opportunities (``crates/cctestbed-sim/src/link.rs``,
``TraceLink``); the trace's mean rate is the link's capacity for BDP-sized queues, and the
router's ``capacity_bps`` column (the opportunities in each sample interval) is what
utilization is measured against.
"""

from __future__ import annotations

import math
import os
from functools import lru_cache
from pathlib import Path
from typing import Union

from .inputs import InputError, file_identity, text_lines

#: IP bytes one opportunity carries.
OPPORTUNITY_BYTES = 1500
#: A trace of more lines than this is refused (about 10 minutes at 200 Mbit/s).
MAX_OPPORTUNITIES = 10_000_000
#: The latest time a line may give (about 11.6 days).
MAX_MS = 1_000_000_000


class TraceError(ValueError):
    """A trace file that cannot be used; the message names the file and, where it can, the line."""


def load_trace(path: Union[str, Path]) -> tuple[int, ...]:
    """The opportunity times (ms) of the trace file at ``path``, validated. The file is read
    through the guarded reader (:mod:`cctestbed.inputs`): a regular file of at most
    ``LIMITS["trace"]`` bytes, UTF-8."""
    try:
        return _load(*file_identity(path, "trace"))
    except InputError as e:
        raise TraceError(str(e)) from None


@lru_cache(maxsize=16)
def _load(path: str, mtime_ns: int, size: int) -> tuple[int, ...]:
    out: list[int] = []
    for n, line in text_lines(path, "trace"):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        if not s.isdigit():
            raise TraceError(f"{path}: line {n}: {s[:40]!r}: expected a whole number of milliseconds")
        ms = int(s)
        if ms > MAX_MS:
            raise TraceError(f"{path}: line {n}: {s[:40]} ms: beyond the longest trace ({MAX_MS:,} ms)")
        if out and ms < out[-1]:
            raise TraceError(f"{path}: line {n}: {ms} ms after {out[-1]} ms: times must not decrease")
        out.append(ms)
        if len(out) > MAX_OPPORTUNITIES:
            raise TraceError(f"{path}: more than {MAX_OPPORTUNITIES:,} opportunities; split or shorten the trace")
    if not out or out[-1] == 0:
        raise TraceError(f"{path}: no opportunity after 0 ms; the last line's time is the trace's period and must be > 0")
    if mean_rate_bps(tuple(out)) == 0:
        raise TraceError(f"{path}: {len(out)} opportunities in {out[-1]} ms: a mean rate below 1 bit/s")
    return tuple(out)


def mean_rate_bps(ms: tuple[int, ...]) -> int:
    """The trace's mean capacity over one period, IP bits per second."""
    return len(ms) * OPPORTUNITY_BYTES * 8 * 1000 // ms[-1]


def resolve(path: str, base: Union[str, Path, None]) -> str:
    """``path`` made absolute: relative to ``base`` (a folder) when given, else to the
    working directory, with symlinks resolved where they can be (a symlink loop is left as it
    is, for the reader to refuse by name)."""
    p = Path(os.path.expanduser(path))
    if not p.is_absolute():
        p = (Path(base) if base is not None else Path.cwd()) / p
    try:
        return str(p.resolve())
    except (OSError, RuntimeError):  # a symlink loop (RuntimeError before Python 3.13), a name too long
        return os.path.abspath(p)


def capacity_steps(ms: tuple[int, ...], interval_ns: int, duration_ns: int) -> list[tuple[float, int]]:
    """The trace's capacity as (from second, bps) steps, one per ``interval_ns``: the step
    starting at k x interval carries the opportunities in (k x interval, (k + 1) x interval],
    the windows of the router's ``capacity_bps`` samples."""
    import numpy as np

    period = ms[-1] * 1_000_000
    one = np.asarray(ms, dtype=np.int64) * 1_000_000
    passes = math.ceil(duration_ns / period) + 1
    times = (one[None, :] + (np.arange(passes, dtype=np.int64) * period)[:, None]).ravel()
    edges = np.arange(0, duration_ns + interval_ns, interval_ns, dtype=np.int64)
    counts = np.diff(np.searchsorted(times, edges, side="right"))
    bps = counts * (OPPORTUNITY_BYTES * 8 * 1_000_000_000) // interval_ns
    return [(float(e) / 1e9, int(b)) for e, b in zip(edges[:-1], bps)]
