"""Bisection over one trial field: where does a metric cross a threshold?

``cctestbed bisect FILE --field link.queue --range 0.25bdp:16bdp --metric groups.bbr.share
--threshold 0.5`` runs the trial (or the sweep file's base) at both ends of the range, checks that
the metric lies on opposite sides of the threshold there, then halves the bracket ``--steps``
times: each step runs the midpoint (``--seeds`` seeds, the metric their mean) and keeps the half
whose ends still straddle the threshold. Sizes, rates, times and percentages (a value with a
unit: ``0.25bdp``, ``10Mbit``, ``25ms``, ``1%``) are halved on a log scale (the geometric mean
of the ends), plain numbers on a linear one, whole-number fields (``flows.0.count``) in whole
numbers.

A monotone metric lies between its values at the bracket's ends at every midpoint; a midpoint
outside them (by more than the 95 % half-widths of the points involved, with two or more seeds) is
non-monotone evidence and the bisection stops there and says so, as it does when both ends are on
the same side of the threshold. The trials are stored as a sweep directory (one axis, the field,
with the values in the order they were run), so ``cctestbed report DIR`` works on it and a run
stopped and started again reuses its trials; ``bisect.json`` holds the outcome.
"""

from __future__ import annotations

import copy
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Union

from .adaptive import FRACTION_SUFFIXES, ci95_half_width

__all__ = ["BisectError", "Range", "parse_range", "bisect", "Bisection", "run_bisect"]

DEFAULT_STEPS = 8

_NUM = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([A-Za-z%]*)\s*$")


class BisectError(ValueError):
    """A bisection that cannot start, or evidence that it cannot go on (non-monotone); ``partial``
    holds the probes run until then."""

    partial: Optional["Bisection"] = None


@dataclass(frozen=True)
class Range:
    lo: float
    hi: float
    unit: str
    scale: str  # "log", "linear" or "integer"

    def value(self, x: float) -> Any:
        """A field value at ``x``, as a trial file writes it."""
        if self.scale == "integer":
            return int(round(x))
        if self.unit:
            return f"{x:.6g}{self.unit}"
        return float(f"{x:.6g}")

    def mid(self, a: float, b: float) -> float:
        if self.scale == "log":
            return math.sqrt(a * b)
        if self.scale == "integer":
            return float((int(a) + int(b)) // 2)
        return 0.5 * (a + b)


def parse_range(text: str, field_path: str, scale: Optional[str] = None) -> Range:
    """``LO:HI`` with the same unit at both ends (``0.25bdp:16bdp``, ``10Mbit:100Mbit``, ``1:16``)."""
    parts = text.split(":")
    valid = "valid: LO:HI with the same unit at both ends, e.g. 0.25bdp:16bdp, 10Mbit:100Mbit, 1:16"
    if len(parts) != 2:
        raise BisectError(f"--range {text!r}: {valid}")
    m1, m2 = _NUM.match(parts[0]), _NUM.match(parts[1])
    if not m1 or not m2:
        raise BisectError(f"--range {text!r}: {valid}")
    lo, u1 = float(m1.group(1)), m1.group(2)
    hi, u2 = float(m2.group(1)), m2.group(2)
    if u1 != u2:
        raise BisectError(f"--range {text!r}: the ends have different units ({u1 or 'none'}, {u2 or 'none'}); {valid}")
    if not lo < hi:
        raise BisectError(f"--range {text!r}: LO must be below HI; {valid}")
    whole = field_path.split(".")[-1] == "count"
    if scale is None:
        scale = "integer" if whole else ("log" if u1 and lo > 0 else "linear")
    if scale not in ("log", "linear", "integer"):
        raise BisectError(f"--scale {scale}: valid are log, linear, integer")
    if scale == "log" and lo <= 0:
        raise BisectError(f"--range {text!r}: a log-scale bisection needs LO above 0")
    if scale == "integer" and not (lo.is_integer() and hi.is_integer()):
        raise BisectError(f"--range {text!r}: {field_path} is a whole number; give whole ends")
    return Range(lo, hi, u1, scale)


@dataclass
class Probe:
    x: float
    value: Any
    mean: Optional[float]
    half_width: Optional[float]
    values: list[float] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"value": self.value, "x": self.x, "mean": self.mean, "half_width": self.half_width,
                "values": self.values}


@dataclass
class Bisection:
    """The outcome: the bracket ``[lo, hi]`` (its probes), every probe in the order run, and why it stopped."""

    threshold: float
    scale: str
    probes: list[Probe]
    lo: Optional[Probe] = None
    hi: Optional[Probe] = None
    steps: int = 0
    stopped: str = ""
    crossing: Optional[float] = None
    direction: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "threshold": self.threshold, "scale": self.scale, "steps": self.steps, "stopped": self.stopped,
            "direction": self.direction,
            "bracket": None if self.lo is None or self.hi is None else [self.lo.to_json(), self.hi.to_json()],
            "crossing_estimate": self.crossing,
            "probes": [p.to_json() for p in self.probes],
        }


Evaluate = Callable[[list[Any]], dict[Any, list[float]]]


def _probe(rng: Range, x: float, vals: list[float]) -> Probe:
    return Probe(x, rng.value(x), sum(vals) / len(vals) if vals else None, ci95_half_width(vals), list(vals))


def bisect(rng: Range, threshold: float, evaluate: Evaluate, steps: int = DEFAULT_STEPS) -> Bisection:
    """Bisect ``rng`` for the value where the metric crosses ``threshold``; ``evaluate(values)``
    returns each value's metric per seed. Raises :class:`BisectError` when both ends lie on the same
    side, a probe has no value, or a midpoint is non-monotone evidence (the message says which)."""
    out = Bisection(threshold=threshold, scale=rng.scale, probes=[])
    try:
        return _bisect(rng, threshold, evaluate, steps, out)
    except BisectError as e:
        e.partial = out
        raise


def _bisect(rng: Range, threshold: float, evaluate: Evaluate, steps: int, out: Bisection) -> Bisection:
    ends = evaluate([rng.value(rng.lo), rng.value(rng.hi)])
    lo = _probe(rng, rng.lo, ends[rng.value(rng.lo)])
    hi = _probe(rng, rng.hi, ends[rng.value(rng.hi)])
    out.probes += [lo, hi]
    for p in (lo, hi):
        if p.mean is None:
            raise BisectError(f"no value of the metric at {p.value}")
    assert lo.mean is not None and hi.mean is not None
    above_lo, above_hi = lo.mean >= threshold, hi.mean >= threshold
    if above_lo == above_hi:
        side = "above" if above_lo else "below"
        raise BisectError(
            f"no crossing of {threshold:g} between the ends: {lo.mean:.4g} at {lo.value} and {hi.mean:.4g} at "
            f"{hi.value} are both {side} it (the crossing lies outside the range, or the metric is not monotone "
            "in the field)")
    out.direction = "falls" if above_lo else "rises"
    for _ in range(steps):
        x = rng.mid(lo.x, hi.x)
        if x in (lo.x, hi.x) or rng.value(x) in (lo.value, hi.value):
            out.stopped = "resolution"  # whole numbers next to each other, or 6 significant digits
            break
        v = rng.value(x)
        m = _probe(rng, x, evaluate([v])[v])
        out.probes.append(m)
        out.steps += 1
        if m.mean is None:
            raise BisectError(f"no value of the metric at {m.value}")
        assert lo.mean is not None and hi.mean is not None
        low, high = min(lo.mean, hi.mean), max(lo.mean, hi.mean)
        tol = max(lo.half_width or 0.0, hi.half_width or 0.0, m.half_width or 0.0)
        if m.mean < low - tol or m.mean > high + tol:
            out.lo, out.hi = lo, hi
            raise BisectError(
                f"non-monotone evidence: {m.mean:.4g} at {m.value} lies outside {lo.mean:.4g} at {lo.value} and "
                f"{hi.mean:.4g} at {hi.value}" + (f" (beyond their 95 % half-widths, {tol:.3g})" if tol else "")
                + f"; the metric is not monotone in the field here, so a single crossing of {threshold:g} "
                "cannot be located (more --seeds may separate noise from shape)")
        if (m.mean >= threshold) == above_lo:
            lo = m
        else:
            hi = m
    else:
        out.stopped = "steps"
    out.lo, out.hi = lo, hi
    assert lo.mean is not None and hi.mean is not None
    # the crossing by interpolation between the bracket's ends, on the bisection's scale
    f = (threshold - lo.mean) / (hi.mean - lo.mean) if hi.mean != lo.mean else 0.5
    f = min(1.0, max(0.0, f))
    if rng.scale == "log":
        out.crossing = math.exp(math.log(lo.x) + f * (math.log(hi.x) - math.log(lo.x)))
    else:
        out.crossing = lo.x + f * (hi.x - lo.x)
    return out


# --- running trials ------------------------------------------------------------------------------


def bisect_sweep_raw(doc: dict[str, Any], field_path: str, values: list[Any], seeds: Optional[int],
                     name: Optional[str]) -> dict[str, Any]:
    """The sweep file (as a dict) that runs ``values`` of ``field_path`` on the trial or sweep ``doc``."""
    if "base" in doc:  # a sweep file: its base, seeds and steady window
        if doc.get("axes") or doc.get("zip"):
            raise BisectError("bisect varies one field of one trial: give a trial file, or a sweep file without "
                              "axes or zip (its base, seeds and steady window are used)")
        raw = copy.deepcopy(doc)
        raw.pop("zip", None)
    else:
        trial = copy.deepcopy(doc)
        steady = trial.pop("steady", None)
        trial.pop("name", None)
        raw = {"name": str(doc.get("name", "bisect")), "base": trial}
        if steady is not None:
            raw["steady"] = steady
    if name is not None:
        raw["name"] = name
    if seeds is not None:
        raw.pop("seeds", None)
        raw["trials"] = seeds
    raw["axes"] = {field_path: list(values)}
    return raw


def run_bisect(
    doc: dict[str, Any],
    out: Union[str, Path],
    field_path: str,
    rng: Range,
    metric: str,
    threshold: float,
    steps: int = DEFAULT_STEPS,
    seeds: Optional[int] = None,
    workers: Optional[int] = None,
    name: Optional[str] = None,
    source: Optional[str] = None,
    on_probe: Optional[Callable[[list[Any]], None]] = None,
) -> Bisection:
    """:func:`bisect` with each probe a sweep of the field's values run into ``out`` (a sweep
    directory); writes ``out/bisect.json``. Raises :class:`~cctestbed.sweep.spec.SweepError` for a
    field or value the trial cannot take, :class:`BisectError` as :func:`bisect`."""
    from .execute import run_sweep
    from .spec import parse_sweep
    from .store import Store, atomic_write_bytes, trial_metrics

    check_threshold(metric, threshold)
    run_values: list[Any] = []
    store = Store(Path(out))
    # a first parse checks the field and both ends before anything runs
    parse_sweep(bisect_sweep_raw(doc, field_path, [rng.value(rng.lo), rng.value(rng.hi)], seeds, name), source=source)

    def evaluate(values: list[Any]) -> dict[Any, list[float]]:
        for v in values:
            if v not in run_values:
                run_values.append(v)
        raw = bisect_sweep_raw(doc, field_path, run_values, seeds, name)
        sweep = parse_sweep(raw, source=source)
        if on_probe:
            on_probe(values)
        r = run_sweep(sweep, out, workers=workers, resume=True)
        if r.interrupted:
            raise KeyboardInterrupt
        col = sweep.axes[0].column
        got: dict[Any, list[float]] = {v: [] for v in values}
        for s in sweep.iter_specs():
            v = s.values[col]
            if v in got and store.is_done(s.key):
                m = trial_metrics(store.trial_dir(s.key)).get(metric)
                if isinstance(m, (int, float)) and not isinstance(m, bool) and math.isfinite(m):
                    got[v].append(float(m))
            elif v in got:
                raise BisectError(f"a trial at {field_path} = {v} (seed {s.seed}) failed: see {store.failure_path(s.key)}")
        return got

    result: Optional[Bisection] = None
    error: Optional[BisectError] = None
    try:
        result = bisect(rng, threshold, evaluate, steps)
    except BisectError as e:
        error = e
        result = e.partial
    doc_out = {
        "field": field_path, "range": [rng.value(rng.lo), rng.value(rng.hi)], "metric": metric,
        "threshold": threshold, "scale": rng.scale, "steps_max": steps, "seeds": seeds,
        "ok": error is None, "error": None if error is None else str(error),
        **(result.to_json() if result is not None else {}),
    }
    if store.root.is_dir():
        atomic_write_bytes(store.root / "bisect.json", (json.dumps(doc_out, indent=2) + "\n").encode())
    if error is not None:
        raise error
    assert result is not None
    return result


def check_threshold(metric: str, threshold: float) -> None:
    """Refuse a threshold a fraction-of-1 metric (a share, Jain's index, utilization) never reaches."""
    if metric.split(".")[-1] in FRACTION_SUFFIXES and threshold >= 1:
        raise BisectError(f"--threshold {threshold:g}: {metric} is a fraction of 1 (0.55 is 55 %), so it never "
                          f"reaches {threshold:g}; write {threshold / 100:g} for {threshold:g} %")


def check_bisect_dir(out: Path) -> None:
    """Refuse an existing, non-empty directory that holds no earlier bisection (nothing is written)."""
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / "bisect.json").is_file())):
        raise BisectError(f"{out} exists and holds no bisection (no bisect.json); choose another -o directory")
