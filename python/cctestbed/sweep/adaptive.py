"""Adaptive sweeps: add seeds per point until a metric's 95 % confidence interval is tight.

``cctestbed sweep FILE --until "ci95(groups.bbr.share) <= 0.02" --max-seeds 30`` runs every point
with the sweep file's seeds (at least two), then, round after round, one more seed at every point
whose interval is still wider than asked, until each point is tight enough or has ``max_seeds``
seeds. The interval is Student's t over the point's values of the metric (one per seed):

    half-width = t(0.975, n - 1) * s / sqrt(n)

with ``s`` the sample standard deviation (n - 1 in the denominator) of the ``n`` values. The
bound is in the metric's own units (a share is a fraction of 1: ``<= 0.02`` is two points), or,
written with ``%``, a percentage of the point's mean (``<= 5%``, as netperf's ``-I 95,10``).

Seeds added to a point continue the sweep's own: seeds 1, 2, 3 then 4, 5, ...; the simulator is
deterministic, so the same results ask for the same seeds, and a run that is stopped and started
again finds its trials in the store and goes on where it was (every trial is stored by its
content, like any sweep's). The outcome per point (seeds run, mean, half-width, converged or not)
is written to ``sweep.json`` under ``adaptive``.
"""

from __future__ import annotations

import copy
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, Union

from .spec import Sweep, TrialSpec, trial_key

__all__ = ["Until", "UntilError", "parse_until", "t_quantile", "ci95_half_width", "run_adaptive", "AdaptiveRun"]

#: Seeds per point at most, unless --max-seeds says otherwise.
DEFAULT_MAX_SEEDS = 30
#: First components of a trials.parquet metric column.
METRIC_SECTIONS = ("total", "groups", "queue", "sojourn", "rtt", "flows", "trial", "scores", "fct", "udp", "ping",
                   "reverse", "phenomena", "models")
#: Metrics that are fractions of 1: a bound of 1 or more on their interval is always met.
FRACTION_SUFFIXES = ("share", "share_p25", "share_p50", "share_p75", "jain", "utilization", "utilization_p25",
                     "utilization_p50", "utilization_p75")

VALID = ("valid: 'ci95(METRIC) <= BOUND' (or '<'), BOUND a number in the metric's units or a percentage of "
         "the point's mean ('5%'), METRIC a numeric column of trials.parquet such as groups.bbr.share, "
         "total.utilization, rtt.p95_ms, queue.mean_bdp")

_UNTIL = re.compile(r"^\s*ci95\(\s*([A-Za-z0-9_.+-]+)\s*\)\s*(<=|<)\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(%?)\s*$")


class UntilError(ValueError):
    """An --until expression that cannot be used; the message names it and what is valid."""


@dataclass(frozen=True)
class Until:
    """A stopping rule: ``ci95(metric) op bound`` (``relative``: bound in % of the mean)."""

    text: str
    metric: str
    op: str
    bound: float
    relative: bool = False

    def limit(self, mean: float) -> float:
        """The bound on the half-width, in the metric's units, for a point of this mean."""
        return abs(mean) * self.bound / 100.0 if self.relative else self.bound

    def met(self, half_width: Optional[float], mean: Optional[float]) -> bool:
        if half_width is None or mean is None:
            return False
        lim = self.limit(mean)
        return half_width <= lim if self.op == "<=" else half_width < lim

    def to_json(self) -> dict[str, Any]:
        return {"text": self.text, "metric": self.metric, "op": self.op, "bound": self.bound,
                "relative": self.relative}


def parse_until(text: str, labels: Sequence[str] = ()) -> Until:
    """Parse ``ci95(METRIC) <= BOUND[%]``; ``labels`` are the sweep's flow-group labels (checked
    against ``groups.<label>.*``). Raises :class:`UntilError` naming the expression and what is valid."""
    m = _UNTIL.match(text)
    if not m:
        raise UntilError(f"--until {text!r}: not a stopping rule; {VALID}")
    metric, op, num, pct = m.groups()
    parts = metric.split(".")
    if parts[0] not in METRIC_SECTIONS or len(parts) < 2 or "" in parts:
        raise UntilError(
            f"--until {text!r}: {metric!r} is not a metric column; a metric starts with one of "
            f"{', '.join(METRIC_SECTIONS)}; {VALID}")
    if parts[0] == "groups" and labels and parts[1] not in labels:
        raise UntilError(
            f"--until {text!r}: no flow group {parts[1]!r} in this sweep; its groups are "
            f"{', '.join(sorted(labels))}; {VALID}")
    bound = float(num)
    if not math.isfinite(bound) or bound <= 0:
        raise UntilError(f"--until {text!r}: the bound must be a number above 0; {VALID}")
    relative = pct == "%"
    if not relative and parts[-1] in FRACTION_SUFFIXES and bound >= 1:
        raise UntilError(
            f"--until {text!r}: {metric} is a fraction of 1 (0.55 is 55 %), so a half-width bound of {num} "
            f"is always met; write {bound / 100:g} for {num} points, or {num}% for {num} % of the point's mean")
    return Until(text=text.strip(), metric=metric, op=op, bound=bound, relative=relative)


# --- Student's t ---------------------------------------------------------------------------------


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularised incomplete beta function (Lentz's method)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    lbeta = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(lbeta) * _betacf(a, b, x) / a
    return 1.0 - math.exp(lbeta) * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: int) -> float:
    """Student's t distribution function with ``df`` degrees of freedom."""
    x = df / (df + t * t)
    tail = 0.5 * _betainc(df / 2.0, 0.5, x)
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (bisection on :func:`t_cdf`)."""
    if not 0.0 < p < 1.0 or df < 1:
        raise ValueError("t_quantile: 0 < p < 1 and df >= 1")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


def ci95_half_width(values: Sequence[float]) -> Optional[float]:
    """Half-width of the 95 % confidence interval of the mean of ``values``: t(0.975, n-1) s / sqrt(n),
    ``s`` the sample standard deviation; None with fewer than two values."""
    n = len(values)
    if n < 2:
        return None
    mean = sum(values) / n
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return t_quantile(0.975, n - 1) * math.sqrt(var) / math.sqrt(n)


# --- running -------------------------------------------------------------------------------------


@dataclass
class PointOutcome:
    point: int
    values: dict[str, Any]  # column -> label
    seeds: list[int] = field(default_factory=list)
    metric: list[float] = field(default_factory=list)
    mean: Optional[float] = None
    half_width: Optional[float] = None
    #: "running", "converged", "not converged" (max seeds reached), "failed", "no value"
    status: str = "running"

    def to_json(self, until: Until) -> dict[str, Any]:
        return {"point": self.point, "values": self.values, "seeds": len(self.seeds), "seed_list": self.seeds,
                "mean": self.mean, "half_width": self.half_width,
                "limit": None if self.mean is None else until.limit(self.mean), "status": self.status,
                "converged": self.status == "converged"}


@dataclass
class AdaptiveRun:
    """What :func:`run_adaptive` did: per point its outcome; totals over every round."""

    until: Until
    max_seeds: int
    points: list[PointOutcome]
    rounds: int = 0
    done: int = 0
    skipped: int = 0
    failed: int = 0
    interrupted: bool = False

    @property
    def not_converged(self) -> list[PointOutcome]:
        return [p for p in self.points if p.status != "converged"]

    def to_json(self) -> dict[str, Any]:
        seeds = [len(p.seeds) for p in self.points]
        return {
            "until": self.until.to_json(), "max_seeds": self.max_seeds,
            "interval": "95 % confidence interval of the mean over the point's seeds, Student's t: "
                        "t(0.975, n-1) * s / sqrt(n), s the sample standard deviation",
            "rounds": self.rounds, "interrupted": self.interrupted,
            "converged": sum(p.status == "converged" for p in self.points),
            "not_converged": sum(p.status != "converged" for p in self.points),
            "seeds_total": sum(seeds), "seeds_min": min(seeds, default=0), "seeds_max": max(seeds, default=0),
            "points": [p.to_json(self.until) for p in self.points],
        }


def group_labels(sweep: Sweep) -> set[str]:
    """Every flow-group label (``group``, else ``cc``) of any point of the sweep."""
    labels: set[str] = set()
    for p in range(min(sweep.n_points, 2000)):
        _, doc = sweep.point_doc(p)
        for g in doc.get("flows", []) or []:
            if isinstance(g, dict):
                lab = g.get("group") or g.get("cc")
                if isinstance(lab, str):
                    labels.add(lab)
    return labels


def _extra_seeds(sweep: Sweep) -> Callable[[int], int]:
    """The seed of index ``i`` (0-based) of a point: the sweep's own, then counting on from the last."""
    seeds = list(sweep.seeds)

    def seed(i: int) -> int:
        return seeds[i] if i < len(seeds) else max(seeds) + 1 + (i - len(seeds))

    return seed


def run_adaptive(
    sweep: Sweep,
    out: Union[str, Path],
    until: Until,
    max_seeds: int = DEFAULT_MAX_SEEDS,
    workers: Optional[int] = None,
    cluster: Any = None,
    resume: bool = False,
    trial_plots: bool = False,
    report: Optional[Callable[..., None]] = None,
    on_round: Optional[Callable[[int, int, int], None]] = None,
) -> AdaptiveRun:
    """Run ``sweep`` into ``out`` adding seeds per point until ``until`` holds or a point has
    ``max_seeds`` seeds (see the module docstring). ``report`` is :func:`run_sweep`'s, called per
    round; ``on_round(round, points still open, trials to run)`` before each round. Raises
    :class:`UntilError` when no trial of the first round has the metric."""
    from .execute import run_sweep
    from .store import META, Store, atomic_write_bytes, read_meta, trial_metrics

    start = max(2, len(sweep.seeds))
    if max_seeds < start:
        raise UntilError(f"--max-seeds {max_seeds}: must be at least the sweep's {start} seed(s) per point "
                         "(and at least 2, for an interval)")
    seed_of = _extra_seeds(sweep)
    work = copy.copy(sweep)
    work._specs = None
    base: list[tuple[dict[str, Any], Any]] = [sweep.point_trial(p) for p in range(sweep.n_points)]
    points = [PointOutcome(p, labels, [seed_of(i) for i in range(start)]) for p, (labels, _) in enumerate(base)]
    run = AdaptiveRun(until=until, max_seeds=max_seeds, points=points)
    store = Store(Path(out))
    cache: dict[str, Optional[float]] = {}

    def key_of(p: PointOutcome, seed: int) -> tuple[str, Any]:
        trial = base[p.point][1]
        t = trial if trial.seed == seed else trial.model_copy(update={"seed": seed})
        return trial_key(t), t

    def value(key: str) -> Optional[float]:
        if key not in cache:
            try:
                v = trial_metrics(store.trial_dir(key)).get(until.metric)
            except Exception:  # a damaged trial is the store's to report (listed as failed)
                v = None
            cache[key] = float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None
        return cache[key]

    def write_meta() -> None:
        try:
            meta = read_meta(store.root)
        except Exception:
            return
        meta["adaptive"] = run.to_json()
        atomic_write_bytes(store.root / META, (json.dumps(meta, indent=2) + "\n").encode())

    first = True
    while True:
        open_points = [p for p in points if p.status == "running"]
        specs: list[TrialSpec] = []
        for p in points:  # every point's trials so far: trials.parquet lists them all
            for j, seed in enumerate(p.seeds):
                key, t = key_of(p, seed)
                specs.append(TrialSpec(len(specs), p.point, p.values, seed, t, key))
        work.specs = specs
        todo = sum(not store.is_done(s.key) for s in specs)
        run.rounds += 1
        if on_round:
            on_round(run.rounds, len(open_points), todo)
        r = run_sweep(work, out, workers=workers, cluster=cluster, resume=resume or not first,
                      trial_plots=trial_plots, report=report)
        run.done += r.done
        run.skipped += r.skipped if first else 0
        if r.interrupted:
            run.interrupted = True
            write_meta()
            return run
        n_failed_round = 0
        any_value = False
        for p in open_points:
            keys = [key_of(p, s)[0] for s in p.seeds]
            vals = [v for k in keys if (v := value(k)) is not None]
            any_value = any_value or bool(vals)
            p.metric = vals
            p.mean = sum(vals) / len(vals) if vals else None
            p.half_width = ci95_half_width(vals)
            if any(not store.is_done(k) for k in keys):
                p.status = "failed"
                n_failed_round += 1
            elif not vals:
                p.status = "no value"
            elif until.met(p.half_width, p.mean):
                p.status = "converged"
            elif len(p.seeds) >= max_seeds:
                p.status = "not converged"
            else:
                p.seeds.append(seed_of(len(p.seeds)))
        if first and not any_value and open_points:
            write_meta()
            raise UntilError(
                f"--until {until.text!r}: no trial of the first round has a value of {until.metric}; {VALID}"
                + _known_columns(store, [key_of(p, p.seeds[0])[0] for p in points[:50]]))
        run.failed = sum(p.status == "failed" for p in points)
        first = False
        if not any(p.status == "running" for p in points):
            write_meta()
            return run
        write_meta()


def _known_columns(store: Any, keys: list[str]) -> str:
    from .store import trial_metrics

    for k in keys:
        if store.is_done(k):
            try:
                cols = [c for c, v in trial_metrics(store.trial_dir(k)).items()
                        if isinstance(v, (int, float)) and not isinstance(v, bool)]
            except Exception:
                continue
            shown = [c for c in cols if not c.startswith(("flows.", "phenomena."))][:40]
            return "; this sweep's trials have e.g. " + ", ".join(shown)
    return ""


def read_adaptive(root: Union[str, Path]) -> Optional[dict[str, Any]]:
    """sweep.json's ``adaptive`` section, or None."""
    from .store import read_meta

    try:
        a = read_meta(Path(root)).get("adaptive")
    except Exception:
        return None
    return a if isinstance(a, dict) else None


def adaptive_html(doc: dict[str, Any], columns: Sequence[str]) -> str:
    """The report's section on an adaptive sweep: the rule, and per point the seeds it needed."""
    import html

    def esc(v: Any) -> str:
        return html.escape(str(v), quote=True)

    def num(v: Any) -> str:
        return "-" if not isinstance(v, (int, float)) else f"{v:.4g}"

    until = doc.get("until", {}) if isinstance(doc.get("until"), dict) else {}
    points = [p for p in doc.get("points", []) if isinstance(p, dict)]
    bad = [p for p in points if p.get("status") != "converged"]
    head = "".join(f'<th class="k">{esc(c)}</th>' for c in columns)
    head += "<th>seeds</th><th>mean</th><th>ci95 half-width</th><th>bound</th><th class=\"k\">state</th>"
    rows = []
    for p in points:
        vals = p.get("values", {}) if isinstance(p.get("values"), dict) else {}
        cls = "k" if p.get("status") == "converged" else "k failed"
        rows.append("<tr>" + "".join(f'<td class="k">{esc(vals.get(c, ""))}</td>' for c in columns)
                    + f"<td>{esc(p.get('seeds'))}</td><td>{num(p.get('mean'))}</td><td>{num(p.get('half_width'))}</td>"
                    f"<td>{num(p.get('limit'))}</td><td class=\"{cls}\">{esc(p.get('status'))}</td></tr>")
    return (
        f'<h2 id="adaptive">Seeds per point: until {esc(until.get("text", "?"))}</h2>'
        f'<p class="meta">Seeds were added one a round to every point whose 95 % confidence interval of '
        f'<code>{esc(until.get("metric", "?"))}</code> (Student\'s t over the seeds: t(0.975, n-1) s / sqrt(n)) '
        f'was wider than the bound, up to {esc(doc.get("max_seeds"))} seeds a point; {esc(doc.get("rounds"))} '
        f'round(s), {esc(doc.get("seeds_total"))} trials, {len(points) - len(bad)} of {len(points)} point(s) '
        f'converged{"" if not bad else f"; not converged: {len(bad)}"}'
        f'{"; interrupted" if doc.get("interrupted") else ""}.</p>'
        f'<div class="scroll"><table id="adaptive-points"><thead><tr>{head}</tr></thead>'
        f'<tbody>{"".join(rows)}</tbody></table></div>'
    )
