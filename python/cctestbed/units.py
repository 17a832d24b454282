"""People-readable quantities: parsing to SI integers and formatting back.

Every quantity a trial file names is converted here, and only here, to the integers the
simulator core takes: rates in bits per second, times in nanoseconds, sizes in bytes.

Conventions
- Rates count bits: ``bit, kbit, Mbit, Gbit`` or ``bps, Kbps, Mbps, Gbps`` (powers of 1000).
  Byte rates (``MBps``, ``MB/s``) are refused rather than guessed.
- Times: ``ns, us (or µs), ms, s, min``.
- Sizes: ``B``; decimal ``KB (or kB), MB, GB`` (1000) and binary ``KiB, MiB, GiB`` (1024).
- Percentages: ``"0.5%"``; a bare number is a fraction in [0, 1].
- A bare number (TOML integer or float, not a string) is taken in the base unit: bit/s,
  seconds, bytes.

Parsers raise :class:`UnitError` (a ``ValueError``) whose message says what is valid.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from fractions import Fraction
from typing import Union

Number = Union[int, float]

RATE_UNITS: dict[str, int] = {
    "bit": 1,
    "bps": 1,
    "kbit": 10**3,
    "Kbit": 10**3,
    "kbps": 10**3,
    "Kbps": 10**3,
    "Mbit": 10**6,
    "mbit": 10**6,
    "Mbps": 10**6,
    "Gbit": 10**9,
    "gbit": 10**9,
    "Gbps": 10**9,
}
TIME_UNITS: dict[str, int] = {
    "ns": 1,
    "us": 10**3,
    "µs": 10**3,
    "ms": 10**6,
    "s": 10**9,
    "min": 60 * 10**9,
}
SIZE_UNITS: dict[str, int] = {
    "B": 1,
    "KB": 10**3,
    "kB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "KiB": 2**10,
    "MiB": 2**20,
    "GiB": 2**30,
}

_QUANTITY = re.compile(
    r"^\s*(?P<num>[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*(?P<unit>[^\s\d.+-][^\s]*)?\s*$"
)


class UnitError(ValueError):
    """A quantity that cannot be read; the message says what is valid."""


#: Largest decimal exponent a written number may have ("1e400s" is refused before it is
#: expanded into a 400-digit integer); every quantity the core takes is far below 10^40.
MAX_EXPONENT = 40


def _decimal(text: str) -> Fraction:
    """The exact value of a decimal numeral, refusing absurd exponents before expanding them."""
    d = Decimal(text)
    if d and abs(d.adjusted()) > MAX_EXPONENT:
        raise UnitError(f"out of range: numbers between 1e-{MAX_EXPONENT} and 1e{MAX_EXPONENT} in magnitude (or 0)")
    return Fraction(d)


def _valid(units: dict[str, int]) -> str:
    return ", ".join(units)


def _split(text: str, what: str, units: dict[str, int], example: str) -> tuple[Fraction, str]:
    m = _QUANTITY.match(text)
    if not m:
        raise UnitError(f"not a {what}; write a number and a unit such as '{example}' (units: {_valid(units)})")
    unit = m.group("unit")
    if unit is None:
        raise UnitError(f"missing unit; write e.g. '{example}' (units: {_valid(units)})")
    if unit not in units:
        raise UnitError(f"unknown {what} unit '{unit}'; valid are {_valid(units)}")
    return _decimal(m.group("num")), unit


def _bare(value: object, what: str) -> Fraction | None:
    """A TOML/JSON number (not a string), or None for strings; anything else is refused."""
    if isinstance(value, bool):
        raise UnitError(f"expected a {what}, got a boolean")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise UnitError(f"expected a finite {what}")
        return _decimal(repr(value))
    if isinstance(value, str):
        return None
    raise UnitError(f"expected a {what} as a string such as '80Mbit' or a number, got {type(value).__name__}")


def _to_int(x: Fraction) -> int:
    """Round half away from zero, so '12.5ns' is 13 ns whatever the platform."""
    n = abs(x)
    r = int(n + Fraction(1, 2))
    return r if x >= 0 else -r


def parse_rate(value: object) -> int:
    """A rate such as ``"80Mbit"`` or ``"1.5 Gbps"`` in bits per second (a bare number is bit/s)."""
    bare = _bare(value, "rate")
    if bare is not None:
        return _to_int(bare)
    text = str(value)
    if re.search(r"(B/s|Bps|byte)", text):
        raise UnitError(f"byte rates are not accepted; give bits, units: {_valid(RATE_UNITS)}")
    num, unit = _split(text, "rate", RATE_UNITS, "80Mbit")
    return _to_int(num * RATE_UNITS[unit])


def parse_time(value: object) -> int:
    """A time such as ``"25ms"`` or ``"1.5 s"`` in nanoseconds (a bare number is seconds)."""
    bare = _bare(value, "time")
    if bare is not None:
        return _to_int(bare * 10**9)
    num, unit = _split(str(value), "time", TIME_UNITS, "25ms")
    return _to_int(num * TIME_UNITS[unit])


def parse_size(value: object) -> int:
    """A size such as ``"375KB"`` or ``"8MiB"`` in bytes (a bare number is bytes)."""
    bare = _bare(value, "size")
    if bare is not None:
        return _to_int(bare)
    num, unit = _split(str(value), "size", SIZE_UNITS, "375KB")
    return _to_int(num * SIZE_UNITS[unit])


def parse_fraction(value: object) -> float:
    """A probability: ``"0.1%"`` is 0.001; a bare number is the fraction itself."""
    bare = _bare(value, "percentage")
    if bare is not None:
        return _float(bare, "percentage")
    text = str(value).strip()
    if not text.endswith("%"):
        raise UnitError("write a percentage such as '0.1%' or a fraction between 0 and 1")
    m = _QUANTITY.match(text[:-1] + "x")
    if not m or m.group("unit") != "x":
        raise UnitError("not a percentage; write e.g. '0.1%'")
    return _float(_decimal(m.group("num")) / 100, "percentage")


def _float(x: Union[Fraction, int], what: str) -> float:
    try:
        return float(x)
    except OverflowError:
        raise UnitError(f"{what} out of range (beyond a 64-bit float)") from None


def parse_param(value: object) -> float:
    """An algorithm parameter in SI base units: a number as is, or a quantity with units
    converted to seconds (``"10s"``), bits per second (``"10Mbit"``), bytes (``"1MB"``) or a
    fraction (``"2%"``)."""
    if isinstance(value, bool):
        raise UnitError("expected a number, not true/false")
    if isinstance(value, (int, float)):
        if isinstance(value, int) and abs(value) > 10**MAX_EXPONENT:
            raise UnitError(f"out of range (magnitude above 1e{MAX_EXPONENT})")
        return float(value)
    for parse, scale in ((parse_time, Fraction(1, 10**9)), (parse_rate, 1), (parse_size, 1)):
        try:
            return _float(parse(value) * scale, "number")
        except UnitError as e:
            if "out of range" in str(e):
                raise
            pass
    if str(value).strip().endswith("%"):
        return parse_fraction(value)
    raise UnitError("expected a number or a quantity with units such as '10s', '10Mbit', '1MB' or '2%'")


def parse_queue(value: object) -> tuple[str, float]:
    """A queue limit: ``"2bdp"`` -> ("bdp", 2.0), ``"250pkts"`` -> ("packets", 250), a size -> ("bytes", n).

    Packet and byte counts are returned as exact integers."""
    if isinstance(value, str):
        m = re.match(r"^\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*(bdp|BDP)\s*$", value)
        if m:
            return "bdp", _float(_decimal(m.group(1)), "multiple of the BDP")
        m = re.match(r"^\s*([+-]?\d+)\s*(pkts|pkt|packets|p)\s*$", value)
        if m:
            return "packets", int(_decimal(m.group(1)))
        if re.match(r"^\s*[+-]?[\d.]+\s*(pkts|pkt|packets|p)\s*$", value):
            raise UnitError("a packet count must be a whole number, e.g. '250pkts'")
    try:
        return "bytes", parse_size(value)
    except UnitError as e:
        if "out of range" in str(e):
            raise
        raise UnitError(f"{e}; or a multiple of the BDP such as '2bdp', or packets such as '250pkts'") from None


# ---------------------------------------------------------------------------------------------
# Formatting: the inverse of the parsers, exact (parse(format(x)) == x), choosing the largest
# unit that keeps the number at least 1.


def _fmt(value: int, units: list[tuple[str, int]], max_decimals: int) -> str | None:
    """The largest unit u with |value| >= u whose quotient is exact within max_decimals."""
    sign = "-" if value < 0 else ""
    v = abs(value)
    for name, scale in units:
        if v >= scale:
            q = Fraction(v, scale)
            d = Decimal(q.numerator) / Decimal(q.denominator)
            exponent = d.as_tuple().exponent  # an int for a finite number
            if Fraction(d) == q and isinstance(exponent, int) and -exponent <= max_decimals:
                return f"{sign}{format(d.normalize(), 'f')}{name}"
    return None


def format_rate(bps: int) -> str:
    if bps == 0:
        return "0bit"
    return _fmt(bps, [("Gbit", 10**9), ("Mbit", 10**6), ("kbit", 10**3), ("bit", 1)], 6) or f"{bps}bit"


def format_time(ns: int) -> str:
    if ns == 0:
        return "0s"
    return _fmt(ns, [("s", 10**9), ("ms", 10**6), ("us", 10**3), ("ns", 1)], 6) or f"{ns}ns"


def format_size(nbytes: int) -> str:
    """Whole decimal units ('375KB'), else whole binary ones ('8MiB'), else bytes ('1500B')."""
    if nbytes == 0:
        return "0B"
    dec = _fmt(nbytes, [("GB", 10**9), ("MB", 10**6), ("KB", 10**3)], 3)
    if dec is not None and "." not in dec:
        return dec
    binary = _fmt(nbytes, [("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)], 0)
    return binary or f"{nbytes}B"


def format_percent(fraction: float) -> str:
    return f"{Decimal(repr(fraction)) * 100:f}".rstrip("0").rstrip(".") + "%" if fraction else "0%"


def human_rate(bps: float) -> str:
    """Rounded for display: '80 Mbit/s'."""
    for name, scale in (("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if abs(bps) >= scale:
            return f"{bps / scale:.3g} {name}"
    return f"{bps:.3g} bit/s"


def human_size(nbytes: float) -> str:
    """Rounded for display: '625 KB'."""
    for name, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(nbytes) >= scale:
            return f"{nbytes / scale:.3g} {name}"
    return f"{nbytes:.0f} B"


def human_time(ns: float) -> str:
    """Rounded for display: '25 ms'."""
    for name, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if abs(ns) >= scale:
            return f"{ns / scale:.4g} {name}"
    return f"{ns:.0f} ns"
