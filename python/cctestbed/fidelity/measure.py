"""The metrics a fidelity cell compares, computed the same way from either backend's results.

Most come from ``summary.json`` (utilization, loss, retransmissions, queue mean and p95 in BDP,
per-group share, Jain). Two are computed here so kernel and simulator are compared like with like:

- ``rtt_p50_ms`` / ``rtt_p95_ms`` pool every flow's **smoothed** RTT samples (``srtt_ms``) in
  the steady window: the kernel reports ``tcpi_rtt`` (a smoothed RTT), while the simulator's
  ``rtt_ms`` is a per-interval mean of raw samples; ``srtt_ms`` is the same quantity in both.
- ``period_s``: the period of the share series' strongest oscillation, and ``period_dominant``
  (1 or 0) whether it stands out of the spectrum (:func:`share_period`). The series is the first
  group's share of the delivered bytes (several groups), else the first flow's share (one group
  of several flows), in :data:`BIN_S` bins over the steady window; a single flow has none. A
  period cell exists where either side's oscillation is dominant in most of its reps (a
  dominant period exists); otherwise both sides are noise and there is nothing to compare.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import numpy as np
import polars as pl

from ..summary import TrialInfo, percentile, window

#: Bumped when a metric's definition changes; reference rows of older versions are measured again.
VERSION = 3
BIN_S = 0.1
MIN_PERIOD_S = 0.5
PEAK_FRACTION = 0.25
PEAK_RATIO = 1.5

#: metric -> (label, unit) in report order; ``share.<group>`` cells follow ``jain``.
METRICS: dict[str, tuple[str, str]] = {
    "utilization_pct": ("utilization", "%"),
    "loss_pct": ("loss at the router", "%"),
    "retrans_pct": ("retransmissions", "%"),
    "queue_mean_bdp": ("queue mean", "BDP"),
    "queue_p95_bdp": ("queue p95", "BDP"),
    "rtt_p50_ms": ("RTT p50 (smoothed)", "ms"),
    "rtt_p95_ms": ("RTT p95 (smoothed)", "ms"),
    "jain": ("Jain index", ""),
    "share": ("share", "%"),
    "period_s": ("share period", "s"),
}


def _num(x: Any) -> Optional[float]:
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def share_series(flows: pl.DataFrame, t0: float, t1: float) -> Optional[np.ndarray]:
    """The share series described in the module docstring, or None for a single flow."""
    groups = flows["group"].unique(maintain_order=True).to_list()
    ids = flows["flow"].unique().sort().to_list()
    if len(ids) < 2:
        return None
    if len(groups) >= 2:
        first = flows.filter(pl.col("group") == groups[0])["flow"].unique().to_list()
    else:
        first = [ids[0]]
    edges = t0 + BIN_S * np.arange(int(math.floor((t1 - t0) / BIN_S + 1e-9)) + 1)
    if len(edges) < 8:
        return None
    total = np.zeros(len(edges) - 1)
    mine = np.zeros(len(edges) - 1)
    for fid in ids:
        f = flows.filter(pl.col("flow") == fid).sort("time_s")
        times = f["time_s"].to_numpy()
        cum = f["delivered_bytes"].cast(pl.Float64).to_numpy()
        idx = np.searchsorted(times, edges + 1e-9, side="right") - 1
        at = np.where(idx >= 0, cum[np.clip(idx, 0, None)], 0.0)
        d = np.diff(at)
        total += d
        if fid in first:
            mine += d
    with np.errstate(invalid="ignore", divide="ignore"):
        s = np.where(total > 0, mine / np.where(total > 0, total, 1), np.nan)
    if np.isnan(s).all():
        return None
    return np.where(np.isnan(s), np.nanmean(s), s)


def share_period(series: Optional[np.ndarray], bin_s: float = BIN_S) -> tuple[Optional[float], Optional[bool]]:
    """(period in s of the periodogram's highest peak, whether that peak is dominant).

    The band runs from :data:`MIN_PERIOD_S` to a third of the window. The peak is dominant when
    it (its bin and both neighbours) holds :data:`PEAK_FRACTION` of the band's power and its bin
    :data:`PEAK_RATIO` times the power of any bin outside it. The period is refined on an 8x
    zero-padded spectrum, since a 30 s window alone resolves only 30/k seconds.
    """
    if series is None or len(series) < 8:
        return None, None
    x = series - series.mean()
    if not np.any(np.abs(x) > 1e-12):
        return None, None
    power = np.abs(np.fft.rfft(x)) ** 2
    freqs = np.fft.rfftfreq(len(x), d=bin_s)
    span = len(x) * bin_s
    band = np.flatnonzero((freqs > 0) & (freqs <= 1.0 / MIN_PERIOD_S) & (freqs >= 3.0 / span))
    if len(band) < 3:
        return None, None
    p = power[band]
    total = p.sum()
    if total <= 0:
        return None, None
    i = int(np.argmax(p))
    near = np.zeros(len(p), dtype=bool)
    near[max(i - 1, 0): i + 2] = True
    dominant = bool(p[near].sum() / total >= PEAK_FRACTION
                    and p[i] >= PEAK_RATIO * (p[~near].max() if (~near).any() else 0.0))
    lo, hi = freqs[band[max(i - 1, 0)]], freqs[band[min(i + 1, len(band) - 1)]]
    fine_f = np.fft.rfftfreq(8 * len(x), d=bin_s)
    fine_p = np.abs(np.fft.rfft(x, n=8 * len(x))) ** 2
    sel = (fine_f >= lo) & (fine_f <= hi)
    return float(1.0 / fine_f[sel][int(np.argmax(fine_p[sel]))]), dominant


def scenario_metrics(flows: pl.DataFrame, router: pl.DataFrame, summary: dict[str, Any], info: TrialInfo) -> dict[str, Any]:
    """The compared metrics of one trial: a flat dict, ``share.<group>`` per group, None where absent."""
    t0, t1 = info.steady_s
    tot, q = summary["total"], summary["queue"]
    util = _num(tot.get("utilization"))
    w = window(flows, t0, t1)
    srtt = w["srtt_ms"].cast(pl.Float64).fill_nan(None)
    srtt = srtt.filter(srtt > 0)
    out: dict[str, Any] = {
        "utilization_pct": None if util is None else 100.0 * util,
        "loss_pct": _num(tot.get("loss_pct")),
        "retrans_pct": _num(tot.get("retrans_pct")),
        "queue_mean_bdp": _num(q.get("mean_bdp")),
        "queue_p95_bdp": _num(q.get("p95_bdp")),
        "rtt_p50_ms": percentile(srtt, 0.5),
        "rtt_p95_ms": percentile(srtt, 0.95),
        "jain": _num(tot.get("jain")),
        "metrics_version": VERSION,
    }
    period, dominant = share_period(share_series(flows, t0, t1))
    out["period_s"], out["period_dominant"] = period, None if dominant is None else float(dominant)
    for g, gm in summary["groups"].items():
        share = _num(gm.get("share"))
        out[f"share.{g}"] = None if share is None or len(summary["groups"]) < 2 else 100.0 * share
    return {k: v for k, v in out.items() if not (k.startswith("share.") and v is None)}


def metrics_of_dir(trial_dir: Any) -> dict[str, Any]:
    """:func:`scenario_metrics` of a stored trial (trial.toml, summary.json and the Parquet files)."""
    import json
    from pathlib import Path

    from ..config import load_trial

    d = Path(trial_dir)
    trial = load_trial(d / "trial.toml")
    summary = json.loads((d / "summary.json").read_text(encoding="utf-8"))
    flows = pl.read_parquet(d / "flows.parquet")
    router = pl.read_parquet(d / "router.parquet")
    backend = flows["backend"][0] if "backend" in flows.columns and len(flows) else "sim"
    return scenario_metrics(flows, router, summary, TrialInfo.from_trial(trial, backend=backend))
