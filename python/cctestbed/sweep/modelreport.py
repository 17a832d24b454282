"""The sweep report's section on model predictions (``models`` in summary.json, cctestbed.models):
per model that applies at some point, the mean prediction and measurement per point, and the
points where they differ by more than 10 (points of share, or percent)."""

from __future__ import annotations

import html
import math
from typing import Any, Sequence

import polars as pl

#: model -> (title, [(column, heading, scale, format)], the error column, its unit)
MODELS: dict[str, tuple[str, list[tuple[str, str, float, str]], str, str]] = {
    "ware": ("Ware et al. (IMC'19): BBRv1's share against loss-based flows",
             [("predicted_share", "predicted BBR share %", 100.0, ".1f"),
              ("measured_share", "measured BBR share %", 100.0, ".1f")], "error_points", "points"),
    "mathis": ("Mathis: Reno's throughput under random loss",
               [("predicted_bps", "predicted Mbit/s", 1e-6, ".3g"), ("measured_bps", "measured Mbit/s", 1e-6, ".3g")],
               "error_pct", "%"),
    "cubic": ("CUBIC's epoch: time to regain W_max (K - delay_min - cbrt(1/C) in Linux)",
              [("k_s", "K s", 1.0, ".3g"), ("regain_expected_s", "expected regain s", 1.0, ".3g"),
               ("regain_s", "measured regain s", 1.0, ".3g")], "error_pct", "%"),
    "bbr_inflight_cap": ("BBR's in-flight cap: cwnd_gain x BtlBw_est x RTprop_est (+ quantization budget)",
                         [("cap_bytes", "cap KB", 1e-3, ".4g"), ("inflight_p95_bytes", "in flight p95 KB", 1e-3, ".4g"),
                          ("ratio_max", "in flight / cap", 1.0, ".3f")], "error_pct", "%"),
}


def _esc(v: Any) -> str:
    return html.escape(str(v), quote=True)


def _fmt(v: Any, spec: str, scale: float) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    return format(v * scale, spec)


def models_html(table: pl.DataFrame, axes: Sequence[str]) -> str:
    """The section, or '' when no model applies to any finished trial."""
    done = table.filter(pl.col("status") == "done") if "status" in table.columns else table
    parts: list[str] = []
    for name, (title, cols, err_col, unit) in MODELS.items():
        app = f"models.{name}.applies"
        if app not in done.columns:
            continue
        rows = done.filter(pl.col(app).fill_null(False))
        need = [f"models.{name}.{c}" for c, *_ in cols] + [f"models.{name}.{err_col}", f"models.{name}.differs"]
        if rows.is_empty() or any(c not in rows.columns for c in need):
            continue
        keys = list(axes)
        aggs = [pl.col(f"models.{name}.{c}").cast(pl.Float64).mean().alias(c) for c, *_ in cols]
        aggs += [pl.col(f"models.{name}.{err_col}").cast(pl.Float64).mean().alias("_err"),
                 pl.col(f"models.{name}.differs").cast(pl.Int64).sum().alias("_ndiff"), pl.len().alias("_n")]
        agg = rows.group_by(keys, maintain_order=True).agg(aggs) if keys else rows.select(aggs)
        bad = agg.filter(pl.col("_err").abs() > 10)
        head = "".join(f'<th class="k">{_esc(a)}</th>' for a in keys)
        head += "".join(f"<th>{_esc(h)}</th>" for _, h, _, _ in cols)
        head += f"<th>difference ({_esc(unit)})</th><th>seeds beyond 10</th>"
        body = []
        for r in agg.iter_rows(named=True):
            cls = ' class="failed"' if r["_err"] is not None and abs(r["_err"]) > 10 else ""
            body.append("<tr>" + "".join(f'<td class="k">{_esc(r[a])}</td>' for a in keys)
                        + "".join(f"<td>{_fmt(r[c], f, s)}</td>" for c, _, s, f in cols)
                        + f"<td{cls}>{_fmt(r['_err'], '+.1f', 1.0)}</td><td>{r['_ndiff']}/{r['_n']}</td></tr>")
        if len(bad):
            where = "; ".join(", ".join(f"{a}={r[a]}" for a in keys) or "the trial" for r in bad.iter_rows(named=True))
            verdict = (f"Measurement and model differ by more than 10 {_esc(unit)} at {len(bad)} of {len(agg)} "
                       f"point(s): {_esc(where)}.")
        else:
            verdict = f"Measurement and model agree within 10 {_esc(unit)} at every one of the {len(agg)} point(s)."
        parts.append(f'<h3 id="model-{name}">{_esc(title)}</h3><p class="meta">{verdict}</p>'
                     f'<div class="scroll"><table id="model-{name}-points"><thead><tr>{head}</tr></thead>'
                     f'<tbody>{"".join(body)}</tbody></table></div>')
    if not parts:
        return ""
    return ('<h2 id="models">Models beside measurements</h2><p class="meta">Means over the seeds of the trials where '
            "each model applies (summary.json <code>models</code>; the README states each model and its "
            "assumptions); a difference of more than 10 is marked.</p>" + "".join(parts))
