"""Workloads: flows that arrive over time with sizes drawn from a distribution, and what their
completion times are measured against.

A flow group with ``arrivals`` is a workload: its flows start at the times of a Poisson process
(exponential gaps at ``rate`` flows per second, or at the rate that offers ``load`` of the link,
as the pFabric, HPCC and Homa simulations generate traffic) or at listed times. Any tcp group's
``size`` may be a distribution instead of one size: exponential, Pareto (optionally cut at
``max``), or an empirical CDF, read from a file or one of the shipped ones
(:data:`SHIPPED_CDFS`: web search after DCTCP, data mining after VL2; each file's header cites
where its numbers come from). An empirical CDF is sampled by inverting it with linear
interpolation between its points, as HPCC's ``custom_rand`` and ns-2's
``EmpiricalRandomVariable`` do.

Expansion is deterministic and happens here, once, for every backend: the simulator and the
kernel backend run the same list of (start, size). The draws come from Python's
``random.Random``, whose ``random()`` sequence for a given integer seed Python guarantees not to
change between versions, seeded from the trial seed, the group's index and the stream (arrivals
or sizes) through SHA-256. Arrivals and sizes are separate streams, and neither depends on the
algorithm, so a sweep over ``cc`` sees identical flows, and changing a size distribution leaves
the arrival times as they were.

A flow's completion time (FCT) is receiver-side: from the moment the sender opens the connection
(its SYN leaves) to the moment the receiving application has every byte. Its ideal
(:func:`ideal_fct_ns`) is the same flow alone on the empty path with an unlimited window: the
handshake's round trip, then every packet back to back at the bottleneck's rate, the last one
arriving a one-way delay later. No flow can beat it, so slowdown = FCT / ideal is at least 1.
"""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Optional, Sequence, Union

#: The empirical CDFs shipped with cctestbed, by the name a trial gives as ``size``.
SHIPPED_DIR = Path(__file__).resolve().parent / "workloads"
SHIPPED_CDFS = ("websearch", "datamining")

#: Size buckets for the summary's slowdown: the boundaries (bytes) between short flows, the
#: middle and the large ones, as pFabric, HPCC and Homa report (0-100 KB, 100 KB-1 MB, 1-10 MB,
#: over 10 MB). A bucket holds sizes in [lower, upper).
BUCKET_BOUNDS = (100_000, 1_000_000, 10_000_000)
BUCKET_NAMES = ("lt_100KB", "100KB_1MB", "1MB_10MB", "ge_10MB")

#: A CDF file of more points than this is refused.
MAX_CDF_POINTS = 100_000


class CdfError(ValueError):
    """A CDF file that cannot be used; the message names the file and, where it can, the line."""


def cdf_path(name: str, base: Optional[Path] = None) -> Path:
    """The file a ``file`` names: a shipped CDF by name, else a path (relative to ``base``)."""
    if name in SHIPPED_CDFS:
        return SHIPPED_DIR / f"{name}.cdf"
    p = Path(name).expanduser()
    if not p.is_absolute() and base is not None:
        p = base / p
    return p.absolute()


def load_cdf(path: Union[str, Path]) -> tuple[tuple[float, float], ...]:
    """The (size in bytes, cumulative fraction) points of a CDF file, validated: sizes >= 0 and
    non-decreasing, fractions from 0 to 1 non-decreasing, the last one 1."""
    from .inputs import InputError, file_identity

    try:
        return _load_cdf(*file_identity(path, "CDF"))
    except InputError as e:
        raise CdfError(str(e)) from None


@lru_cache(maxsize=16)
def _load_cdf(path: str, mtime_ns: int, size: int) -> tuple[tuple[float, float], ...]:
    from .inputs import read_text

    pts: list[tuple[float, float]] = []
    text = read_text(path, "CDF")  # the guarded reader: a regular file, its size limited, UTF-8
    for n, line in enumerate(text.splitlines(), 1):
        s = line.split("#", 1)[0].strip()
        if not s:
            continue
        parts = s.split()
        try:
            if len(parts) != 2:
                raise ValueError
            size_b, frac = float(parts[0]), float(parts[1])
        except ValueError:
            raise CdfError(f"{path}: line {n}: {s!r}: expected two numbers, size in bytes and cumulative fraction") from None
        if not (math.isfinite(size_b) and 0 <= size_b <= 1e18):
            raise CdfError(f"{path}: line {n}: size {parts[0]}: must be from 0 to 1e18 bytes")
        if not (math.isfinite(frac) and 0 <= frac <= 1):
            raise CdfError(f"{path}: line {n}: fraction {parts[1]}: must be from 0 to 1")
        if pts and (size_b < pts[-1][0] or frac < pts[-1][1]):
            raise CdfError(f"{path}: line {n}: {s!r}: sizes and fractions must not decrease")
        pts.append((size_b, frac))
        if len(pts) > MAX_CDF_POINTS:
            raise CdfError(f"{path}: more than {MAX_CDF_POINTS} points")
    if not pts:
        raise CdfError(f"{path}: no points (lines of size in bytes and cumulative fraction)")
    if pts[-1][1] != 1.0:
        raise CdfError(f"{path}: the last fraction is {pts[-1][1]}; a CDF ends at 1")
    if pts[-1][0] < 1:
        raise CdfError(f"{path}: every size is 0 bytes; a flow carries at least one")
    return tuple(pts)


# --- size distributions -------------------------------------------------------------------------


@dataclass(frozen=True)
class SizeDistribution:
    """Flow sizes in bytes (whole, at least 1): ``fixed`` (``mean`` is the size),
    ``exponential`` (``mean``), ``pareto`` (``scale`` x_m and ``shape`` alpha), ``cdf``
    (``points``); exponential and Pareto draws above ``cap`` are cut to it."""

    kind: str
    mean: float = 0.0
    scale: float = 0.0
    shape: float = 0.0
    cap: Optional[float] = None
    points: tuple[tuple[float, float], ...] = ()

    def draw(self, u: float) -> int:
        """The size for a uniform draw ``u`` in [0, 1) (inverse transform)."""
        if self.kind == "fixed":
            x = self.mean
        elif self.kind == "exponential":
            x = -self.mean * math.log1p(-u)
        elif self.kind == "pareto":
            x = self.scale * (1.0 - u) ** (-1.0 / self.shape)
        else:
            x = _cdf_inverse(self.points, u)
        if self.cap is not None:
            x = min(x, self.cap)
        return max(1, int(x + 0.5))

    def expected(self) -> float:
        """The mean flow size in bytes (before rounding to whole bytes)."""
        cap = self.cap
        if self.kind == "fixed":
            return self.mean
        if self.kind == "exponential":  # E[min(X, M)] = mean (1 - e^(-M / mean))
            return self.mean if cap is None else self.mean * -math.expm1(-cap / self.mean)
        if self.kind == "pareto":  # E[min(X, M)] = x_m + integral from x_m to M of (x_m / x)^alpha
            xm, a = self.scale, self.shape
            if cap is None:
                return math.inf if a <= 1 else a * xm / (a - 1)
            if cap <= xm:
                return cap
            if a == 1:
                return xm + xm * math.log(cap / xm)
            return xm + xm**a * (cap ** (1 - a) - xm ** (1 - a)) / (1 - a)
        pts = self.points
        m = pts[0][0] * pts[0][1]
        for (s0, c0), (s1, c1) in zip(pts, pts[1:]):
            m += (c1 - c0) * (s0 + s1) / 2
        return m


def _cdf_inverse(points: Sequence[tuple[float, float]], u: float) -> float:
    """The size at cumulative fraction ``u``, linear between the points."""
    if u < points[0][1]:
        return points[0][0]
    lo, hi = 0, len(points) - 1
    while lo < hi:  # the first point whose fraction exceeds u
        mid = (lo + hi) // 2
        if points[mid][1] > u:
            hi = mid
        else:
            lo = mid + 1
    (s0, c0), (s1, c1) = points[lo - 1], points[lo]
    return s0 + (s1 - s0) * (u - c0) / (c1 - c0) if c1 > c0 else s1


# --- deterministic draws ------------------------------------------------------------------------

#: Stream names: arrival gaps and sizes draw from separate generators.
ARRIVALS, SIZES = "arrivals", "sizes"


def stream(seed: int, group: int, name: str) -> random.Random:
    """The generator of ``name`` draws for flow group ``group`` under trial seed ``seed``."""
    digest = hashlib.sha256(f"cctestbed-workload/{seed}/{group}/{name}".encode()).digest()
    return random.Random(int.from_bytes(digest[:16], "big"))


def poisson_arrivals(rng: random.Random, rate_per_s: float, start_ns: int, until_ns: int) -> list[int]:
    """Arrival times (ns) of a Poisson process of ``rate_per_s`` from ``start_ns`` (exclusive)
    to ``until_ns`` (exclusive): exponential gaps of mean 1 / rate."""
    out: list[int] = []
    t = float(start_ns)
    mean_gap_ns = 1e9 / rate_per_s
    while True:
        t += -mean_gap_ns * math.log1p(-rng.random())
        if t >= until_ns:
            return out
        out.append(int(t))


def draw_sizes(rng: random.Random, dist: SizeDistribution, n: int) -> list[int]:
    return [dist.draw(rng.random()) for _ in range(n)]


# --- completion times ---------------------------------------------------------------------------


def wire_bytes(size: int, mss: int, mtu: int) -> int:
    """IP bytes a transfer of ``size`` payload bytes puts on the link: one header of mtu - mss
    bytes (IP and TCP with timestamps) per segment."""
    return size + -(-size // mss) * (mtu - mss)


def ideal_fct_ns(size: int, rate_bps: float, delay_fwd_ns: int, delay_rev_ns: int, mss: int, mtu: int,
                 bucket_bytes: int = 0) -> float:
    """The flow's completion time alone on the empty path with an unlimited window: the
    handshake's round trip (SYN out, SYN-ACK back), then every packet back to back at
    ``rate_bps``, the last arriving ``delay_fwd_ns`` after it left. A bottleneck that lets
    ``bucket_bytes`` through at once when idle (a token bucket, as the kernel backend's htb) sends
    that much of the flow without serialisation."""
    sent_at_rate = max(wire_bytes(size, mss, mtu) - bucket_bytes, 0)
    return 2 * delay_fwd_ns + delay_rev_ns + sent_at_rate * 8e9 / rate_bps


def bucket_of(size: int) -> str:
    """The summary's size bucket of a flow of ``size`` bytes."""
    for bound, name in zip(BUCKET_BOUNDS, BUCKET_NAMES):
        if size < bound:
            return name
    return BUCKET_NAMES[-1]


def slow_start_rounds(size: int, mss: int, initial_cwnd: int) -> int:
    """Round trips of data a loss-free slow start needs for ``size`` bytes: the window doubles
    each round from ``initial_cwnd`` segments, so n rounds carry IW (2^n - 1) segments and
    n = ceil(log2(S / (IW MSS) + 1))."""
    segs = -(-size // mss)
    n = 0
    while initial_cwnd * (2**n - 1) < segs:
        n += 1
    return n
