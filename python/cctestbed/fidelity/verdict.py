"""Cells and verdicts: each scenario x metric, the kernel's reps against the simulator's.

A cell is **within** when ``|sim mean - kernel mean| <= max(tolerance, kernel spread)``, the
spread being the kernel's max - min over its reps (real runs vary; a simulator cannot be asked
to be closer to one rep than the reps are to each other). A tolerance is
``max(abs, rel x |kernel mean|)`` with the defaults below (a suite's ``[tolerances]`` table
overrides them per metric, e.g. ``utilization_pct = { abs = 3 }``). ``share.<group>`` cells use
the ``share`` tolerance. A metric absent on both sides makes no cell; present on one side only,
the cell is a miss. A miss listed in the known-deviations file (with its reason) is **known**.

A scenario is a **gross miss** when utilization differs by more than 10 points, or loss differs
by more than a factor 2 and more than 2 points at once.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional, Union

#: metric -> {"abs": points/units, "rel": fraction of the kernel mean}
DEFAULT_TOLERANCES: dict[str, dict[str, float]] = {
    "utilization_pct": {"abs": 2.0},
    "loss_pct": {"abs": 0.5, "rel": 0.25},
    "retrans_pct": {"abs": 0.5, "rel": 0.25},
    "queue_mean_bdp": {"abs": 0.15, "rel": 0.15},
    "queue_p95_bdp": {"abs": 0.15, "rel": 0.15},
    "rtt_p50_ms": {"rel": 0.10},
    "rtt_p95_ms": {"rel": 0.10},
    "jain": {"abs": 0.1},
    "share": {"abs": 8.0},
    "period_s": {"abs": 0.5, "rel": 0.25},
}
GROSS_UTIL_POINTS = 10.0
GROSS_LOSS_FACTOR = 2.0
GROSS_LOSS_POINTS = 2.0


def check_tolerances(raw: dict[str, Any]) -> list[str]:
    """Problems in a suite's ``[tolerances]`` table, as ``field: value: what is valid``."""
    problems = []
    for metric, v in raw.items():
        if metric not in DEFAULT_TOLERANCES:
            problems.append(f"tolerances.{metric}: unknown metric; valid are {', '.join(DEFAULT_TOLERANCES)}")
            continue
        if not isinstance(v, dict) or not v or any(k not in ("abs", "rel") for k in v):
            problems.append(f"tolerances.{metric}: {v!r}: must be a table with abs and/or rel, e.g. {{ abs = 2 }}")
            continue
        for k, x in v.items():
            if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x < 0:
                problems.append(f"tolerances.{metric}.{k}: {x!r}: must be a number >= 0")
    return problems


def tolerances(overrides: Optional[dict[str, Any]] = None) -> dict[str, dict[str, float]]:
    out = {k: dict(v) for k, v in DEFAULT_TOLERANCES.items()}
    for k, v in (overrides or {}).items():
        out[k] = {kk: float(x) for kk, x in v.items()}
    return out


def tolerance_for(metric: str, kernel_mean: float, tols: dict[str, dict[str, float]]) -> float:
    t = tols["share" if metric.startswith("share.") else metric]
    return max(t.get("abs", 0.0), t.get("rel", 0.0) * abs(kernel_mean))


@dataclass
class Cell:
    scenario: str
    metric: str
    kernel_mean: Optional[float]
    kernel_min: Optional[float]
    kernel_max: Optional[float]
    kernel_n: int
    sim_mean: Optional[float]
    sim_min: Optional[float]
    sim_max: Optional[float]
    sim_n: int
    tolerance: Optional[float]
    allowed: Optional[float]
    diff: Optional[float]
    verdict: str  # "within", "miss" or "known"
    reason: Optional[str] = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _stats(values: list[Optional[float]]) -> tuple[Optional[float], Optional[float], Optional[float], int]:
    v = [float(x) for x in values if x is not None and math.isfinite(float(x))]
    if not v:
        return None, None, None, 0
    return sum(v) / len(v), min(v), max(v), len(v)


def _present(values: list[Optional[float]], n_reps: int) -> bool:
    """A metric exists on a side when at least half its reps have it (a period may come and go)."""
    have = sum(1 for x in values if x is not None)
    return have > 0 and have * 2 >= n_reps


def _dominant(reps: list[dict[str, Any]]) -> bool:
    """Most reps' share series have a dominant period (``period_dominant``; older rows: a period)."""
    flags = [r.get("period_dominant", 1.0 if r.get("period_s") is not None else None) for r in reps]
    return bool(reps) and sum(1 for f in flags if f) * 2 > len(reps)


def cells_for(scenario: str, kernel: list[dict[str, Any]], sim: list[dict[str, Any]],
              tols: dict[str, dict[str, float]]) -> list[Cell]:
    """Every cell of one scenario from its kernel reps and simulator reps (metric dicts)."""
    from .measure import METRICS

    names = [m for m in METRICS if m != "share"]
    shares = sorted({k for r in [*kernel, *sim] for k in r if k.startswith("share.")})
    order = names[: names.index("jain") + 1] + shares + names[names.index("jain") + 1:]
    out = []
    for m in order:
        kv = [r.get(m) for r in kernel]
        sv = [r.get(m) for r in sim]
        kp, sp = _present(kv, len(kernel)), _present(sv, len(sim))
        if not kp and not sp:
            continue
        if m == "period_s" and not (_dominant(kernel) or _dominant(sim)):
            continue  # neither side oscillates with a dominant period: nothing to compare
        km, kmin, kmax, kn = _stats(kv) if kp else (None, None, None, 0)
        sm, smin, smax, sn = _stats(sv) if sp else (None, None, None, 0)
        if km is None or sm is None:
            out.append(Cell(scenario, m, km, kmin, kmax, kn, sm, smin, smax, sn, None, None, None, "miss"))
            continue
        tol = tolerance_for(m, km, tols)
        spread = (kmax - kmin) if kmax is not None and kmin is not None else 0.0
        allowed = max(tol, spread)
        diff = sm - km
        out.append(Cell(scenario, m, km, kmin, kmax, kn, sm, smin, smax, sn, tol, allowed, diff,
                        "within" if abs(diff) <= allowed + 1e-12 else "miss"))
    return out


def gross_miss(cells: list[Cell]) -> Optional[str]:
    """Why a scenario's cells make it a gross miss (module docstring), or None."""
    by = {c.metric: c for c in cells}
    u = by.get("utilization_pct")
    if u is not None and u.diff is not None and abs(u.diff) > GROSS_UTIL_POINTS:
        return f"utilization off by {u.diff:+.1f} points"
    lo = by.get("loss_pct")
    if lo is not None and lo.kernel_mean is not None and lo.sim_mean is not None:
        a, b = lo.kernel_mean, lo.sim_mean
        ratio = max(a, b) / min(a, b) if min(a, b) > 0 else (math.inf if max(a, b) > 0 else 1.0)
        if ratio > GROSS_LOSS_FACTOR and abs(b - a) > GROSS_LOSS_POINTS:
            return f"loss {b:.2f} % against the kernel's {a:.2f} %"
    return None


# --- known deviations -------------------------------------------------------------------------

KNOWN_FILENAME = "known-deviations.toml"


def load_known(path: Union[str, Path, None]) -> dict[tuple[str, str], str]:
    """(scenario, metric) -> reason, from a known-deviations file; empty when there is none.

    The file holds ``[[deviations]]`` tables with ``scenario``, ``metric`` and ``reason``
    (``metric = "*"`` covers every metric of the scenario).
    """
    if path is None or not Path(path).is_file():
        return {}
    from ..config import ConfigError, read_trial_file

    try:
        raw = read_trial_file(path)
    except ConfigError as e:
        raise ValueError(f"{path}: {'; '.join(e.problems)}") from None
    out: dict[tuple[str, str], str] = {}
    entries = raw.get("deviations", []) if isinstance(raw, dict) else None
    if not isinstance(entries, list):
        raise ValueError(f"{path}: deviations: must be an array of tables ([[deviations]])")
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or not all(isinstance(entry.get(k), str) and entry.get(k)
                                                  for k in ("scenario", "metric", "reason")):
            raise ValueError(f"{path}: deviations[{i}]: needs scenario, metric and reason (non-empty strings)")
        out[(entry["scenario"], entry["metric"])] = entry["reason"]
    return out


def apply_known(cells: list[Cell], known: dict[tuple[str, str], str]) -> None:
    for c in cells:
        reason = known.get((c.scenario, c.metric)) or known.get((c.scenario, "*"))
        if reason:
            c.reason = reason
            if c.verdict == "miss":
                c.verdict = "known"
