"""The time-sequence plot (tcptrace's, Wireshark's "Stevens" graph) of one flow from packet
captures: the sequence number of every data segment against the time its sender sent it,
retransmissions in red, the cumulative ACK line, SACK blocks, segments the receiver never got,
and the algorithm's state changes (BBR's STARTUP, DRAIN, PROBE_BW, PROBE_RTT) as vertical lines.

Any results directory with captures works: ``run``'s (simulator or kernel, ``capture = true``)
and ``analyze``'s (its ``capture.json`` names the captures it read). The packets come from the
core (``_core.tseq``), which reads them as ``analyze`` does, so flow numbers agree.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np
import polars as pl
from matplotlib.figure import Figure

from .plot import STATE_COLORS, literal_text


class TseqError(ValueError):
    """No captures to plot, no such flow, or an empty time range."""


def capture_inputs(directory: Union[str, Path]) -> tuple[list[tuple[str, str]], Optional[int]]:
    """The captures of a results directory as (path, point) pairs, and the time zero to use."""
    d = Path(directory)
    report = d / "capture.json"
    if report.is_file():
        try:
            doc = json.loads(report.read_text(encoding="utf-8"))
            return [(f["path"], f["point"]) for f in doc["files"]], int(doc["time_zero_ns"])
        except (ValueError, KeyError, TypeError) as e:
            raise TseqError(f"{report}: damaged ({e})") from None
    files = sorted(p for p in d.iterdir() if p.suffix in (".pcap", ".pcapng")) if d.is_dir() else []
    if not files:
        raise TseqError(f"{d}: no packet captures in it; run the trial with capture = true, or analyze captures into it")
    router = {p.name: p for p in files if p.stem in ("rtr-in", "rtr-out")}
    inputs = [(str(p), "host") for p in files if p.name not in router]
    if len(router) == 2:
        inputs += [(str(router["rtr-in.pcap"]), "ingress"), (str(router["rtr-out.pcap"]), "egress")]
    backend = None
    try:
        backend = json.loads((d / "summary.json").read_text(encoding="utf-8"))["trial"]["backend"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    # the simulator's captures start at the Unix epoch, its time 0
    return inputs, (0 if backend == "sim" else None)


def state_changes(directory: Union[str, Path], flow: int, t0: float, t1: float) -> list[tuple[float, str]]:
    """The state flow ``flow`` is in at ``t0`` and (time, new state) at each change within
    [t0, t1], from flows.parquet."""
    p = Path(directory) / "flows.parquet"
    if not p.is_file():
        return []
    try:
        df = pl.read_parquet(p, columns=["time_s", "flow", "state"])
    except Exception:
        return []
    d = df.filter(pl.col("flow") == flow).sort("time_s")
    if len(d) < 2 or d["state"].null_count() == len(d):
        return []
    t = d["time_s"].to_numpy()
    st = d["state"].to_list()
    dt = float(t[1] - t[0])
    out = []
    # the state the range opens in
    first = int(np.searchsorted(t, t0 + 1e-12))
    if first < len(st) and st[first] is not None:
        out.append((t0, str(st[first])))
    for i in range(1, len(st)):
        if st[i] != st[i - 1] and st[i] is not None:
            at = float(t[i]) - dt  # the state holds over the interval ending at t[i]
            if t0 <= at <= t1:
                out.append((at, str(st[i])))
    return out


@literal_text
def plot_tseq(directory: Union[str, Path], flow: int = 0, t_from: Optional[float] = None,
              t_to: Optional[float] = None, title: Optional[str] = None) -> Figure:
    """The time-sequence plot of ``flow`` between ``t_from`` and ``t_to`` seconds."""
    from . import _core

    inputs, zero = capture_inputs(directory)
    try:
        tr: dict[str, Any] = _core.tseq(inputs, flow, zero)
    except ValueError as e:
        raise TseqError(str(e)) from None
    ts = {k: np.asarray(tr[f"{k}_t"], dtype=float) / 1e9 for k in ("data", "ack", "sack", "drop")}
    end = max((float(v.max()) for v in ts.values() if len(v)), default=0.0)
    lo = 0.0 if t_from is None else t_from
    hi = end if t_to is None else t_to
    if hi <= lo:
        raise TseqError(f"--from {lo:g} --to {hi:g}: the range is empty")
    keep = {k: (v >= lo) & (v <= hi) for k, v in ts.items()}
    if not keep["data"].any():
        raise TseqError(f"flow {flow} sent nothing between {lo:g} s and {hi:g} s")

    start = np.asarray(tr["data_start"], dtype=float)[keep["data"]]
    stop = np.asarray(tr["data_end"], dtype=float)[keep["data"]]
    scale, unit = (1e6, "MB") if stop.max() > 5e6 else (1e3, "KB")
    from matplotlib.collections import LineCollection
    from matplotlib.lines import Line2D

    fig = Figure(figsize=(10, 6.5), layout="constrained")
    ax = fig.subplots()

    def segments(t: np.ndarray, a: np.ndarray, b: np.ndarray) -> list[np.ndarray]:
        return list(np.stack([np.stack([t, a / scale], axis=1), np.stack([t, b / scale], axis=1)], axis=1))

    t_data = ts["data"][keep["data"]]
    retrans = np.asarray(tr["data_retrans"], dtype=bool)[keep["data"]]
    handles = []
    for mask, color, lw, label in ((~retrans, "black", 1.0, "data sent"), (retrans, "tab:red", 3.0, "retransmission")):
        if mask.any():
            ax.add_collection(LineCollection(segments(t_data[mask], start[mask], stop[mask]), colors=color, linewidths=lw,
                                             zorder=3))
            handles.append(Line2D([], [], color=color, lw=lw, label=label))
    k = keep["ack"]
    if k.any():
        ack = np.asarray(tr["ack"], dtype=float)[k]
        ax.step(ts["ack"][k], ack / scale, where="post", color="tab:green", lw=1.1)
        handles.append(Line2D([], [], color="tab:green", lw=1.1, label="ACK"))
    k = keep["sack"]
    if k.any():
        sl = np.asarray(tr["sack_start"], dtype=float)[k]
        sr = np.asarray(tr["sack_end"], dtype=float)[k]
        ax.add_collection(LineCollection(segments(ts["sack"][k], sl, sr), colors="tab:purple", linewidths=2.2, alpha=0.6,
                                         zorder=1))
        handles.append(Line2D([], [], color="tab:purple", lw=2.2, alpha=0.6, label="SACK block"))
    k = keep["drop"]
    if k.any():
        mid = (np.asarray(tr["drop_start"], dtype=float)[k] + np.asarray(tr["drop_end"], dtype=float)[k]) / 2
        ax.plot(ts["drop"][k], mid / scale, "x", color="tab:red", ms=7, mew=1.6, zorder=4)
        handles.append(Line2D([], [], color="tab:red", marker="x", ls="", ms=7, mew=1.6, label="dropped (never received)"))
    for at, state in state_changes(directory, flow, lo, hi):
        color = STATE_COLORS.get(state, "0.4")
        ax.axvline(at, color=color, lw=1.2, ls="--")
        ax.text(at, 1.0, f" {state}", transform=ax.get_xaxis_transform(), rotation=90, va="top", ha="left",
                fontsize=8, color=color)
    ax.set_xlim(lo, hi)
    ax.set_ylim(bottom=float(start.min()) / scale * 0.98, top=float(stop.max()) / scale * 1.02)
    ax.set_xlabel("time (s)")
    ax.set_ylabel(f"sequence offset ({unit})")
    ax.grid(True, lw=0.3, alpha=0.5)
    ax.legend(handles=handles, loc="lower right", fontsize=8)
    if not tr["drops_known"]:
        ax.text(0.99, 0.01, "no receiver capture: drops not marked", transform=ax.transAxes, ha="right", fontsize=8,
                color="0.4")
    ax.set_title(title or f"{Path(directory).name}: flow {flow}, time-sequence", fontsize=11)
    return fig
