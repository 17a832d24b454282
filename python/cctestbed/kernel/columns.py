"""The kernel backend's result tables from what its programs recorded.

The senders and sinks (:mod:`.traffic`, :mod:`.datagrams`) and the router sampler
(:mod:`.routerstats`) leave their samples in the run's work directory (:class:`RawRun`); this
module works out the result schema's columns from them, each by its name, and hands them to the
tables' builder (:func:`cctestbed.schema.build_table`), which orders them, attaches the trial's
labels and ``backend``, and leaves null what is not named here. The whole of it is a function
of the recorded files, the trial and the link emulator (:func:`kernel_tables`): it runs, and is
tested, without a kernel.

What the kernel cannot measure is left null (tcp flows' ``lost_segs``,
``departed_payload_bytes``, the algorithms' internal counters other than BBR's
``TCP_CC_INFO`` fields). Two columns differ in meaning: ``rtt_ms`` is the kernel's smoothed
RTT (``tcpi_rtt``) read at the sample time, as the kernel exposes no per-ACK RTT samples (so it
equals ``srtt_ms``); rates (``goodput_bps``, ``send_rate_bps``) divide by the measured time
between two readings rather than the nominal interval.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import polars as pl

from .. import units
from ..config import Trial
from ..schema import Column, Labels, build_table, completions_frame, flow_columns, router_columns, trial_labels
from .checks import kernel_cc
from .topology import ETH_HEADER

BACKEND = "kernel"

Samples = dict[str, np.ndarray]


@dataclass
class RawRun:
    """What a run's programs recorded, per flow group ``k``: the sender's and the sink's samples
    (``send<k>.npz``, ``sink<k>.npz``) and the sender's report (``send<k>.npz.json``, by ``k``
    as text: errors, bytes sent, the algorithm in use, when each flow called ``connect``); and
    the router sampler's samples (``router.npz``)."""

    send: list[Samples]
    sink: list[Samples]
    router: Samples
    senders: dict[str, Any]

    @classmethod
    def load(cls, workdir: Path, groups: int) -> "RawRun":
        reports = {str(k): json.loads(p.read_text()) for k in range(groups)
                   for p in [workdir / f"send{k}.npz.json"] if p.exists()}
        return cls([_npz(workdir / f"send{k}.npz") for k in range(groups)],
                   [_npz(workdir / f"sink{k}.npz") for k in range(groups)], _npz(workdir / "router.npz"), reports)


def kernel_tables(trial: Trial, raw: RawRun, mode: str,
                  bottleneck: Optional[dict[str, Any]] = None) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """flows.parquet, router.parquet and fct.parquet of a run of ``trial`` on the ``mode`` link
    emulator (:data:`~.checks.LINK_EMULATORS`) from what it recorded; ``bottleneck`` is how the
    forward bottleneck was set up (an htb's ``burst_bytes``, in Ethernet frame bytes)."""
    frame = trial.mtu + ETH_HEADER
    bucket = (bottleneck or {}).get("burst_bytes", 0) * trial.mtu // frame
    return (build_flows(trial, raw.send, raw.sink), build_router(trial, raw.router, mode),
            build_completions(trial, raw.sink, raw.senders, bucket))


def _npz(path: Path) -> Samples:
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def _bbr_state(pacing_gain: float, cwnd_gain: float) -> str:
    """BBRv1's mode from the gains it reports (tcp_bbr.c sets them per mode)."""
    if cwnd_gain > 2.5:
        return "STARTUP" if pacing_gain > 2.5 else "DRAIN"
    if abs(cwnd_gain - 1.0) < 0.01:
        return "PROBE_RTT"
    return "PROBE_BW"


CA_STATES = ("open", "disorder", "cwr", "recovery", "loss")


def build_flows(trial: Trial, send: list[Samples], sink: list[Samples]) -> pl.DataFrame:
    """flows.parquet from the senders' and sinks' samples: a row per flow per tick, except a
    workload's flows, which have rows only from the first tick their sender or sink sampled them
    to the last (while open), as in the simulator."""
    n_ticks = trial.duration // trial.sample_interval
    expanded = trial.expanded()
    columns, labels = flow_columns(trial), trial_labels(trial)
    workload = np.array([gr.arrivals is not None for _, gr, _ in expanded], dtype=bool)
    blocks = []
    dense = np.flatnonzero(~workload)
    if len(dense):
        blocks.append(_flow_block(trial, send, sink, columns, labels, dense, np.ones(len(dense), dtype=int),
                                  np.full(len(dense), n_ticks)))
    if workload.any():
        ids = np.flatnonzero(workload)
        first = np.full(len(expanded), n_ticks + 1)
        last = np.zeros(len(expanded), dtype=int)
        for d in [*send, *sink]:  # the sink's last sample (every byte read) may come a tick after the sender's
            if len(d.get("tick", [])) == 0:
                continue
            t, f = d["tick"].astype(int), d["flow"].astype(int)
            ok = workload[f] & (t >= 1) & (t <= n_ticks)
            np.minimum.at(first, f[ok], t[ok])
            np.maximum.at(last, f[ok], t[ok])
        ids = ids[last[ids] >= first[ids]]  # flows never sampled have no rows
        if len(ids):
            blocks.append(_flow_block(trial, send, sink, columns, labels, ids, first[ids], last[ids] - first[ids] + 1))
    df = pl.concat(blocks) if blocks else build_table(columns, {}, 0, BACKEND)
    # rows ordered by time then flow, as the simulator writes them
    return df.sort(["time_s", "flow"], maintain_order=True)


def _flow_block(trial: Trial, send: list[Samples], sink: list[Samples], columns: list[Column], labels: Labels,
                ids: np.ndarray, first: np.ndarray, count: np.ndarray) -> pl.DataFrame:
    """The rows of flows ``ids``, flow ``ids[i]`` over the ``count[i]`` ticks from ``first[i]``:
    every column worked out on a grid of a row per flow and a column per tick from its first."""
    dt = trial.sample_interval
    n_ticks = trial.duration // dt
    all_flows = trial.expanded()
    expanded = [all_flows[i] for i in ids]
    n_flows = len(ids)
    width = int(count.max())
    row_of = np.full(len(all_flows), -1)
    row_of[ids] = np.arange(n_flows)
    ticks = first[:, None] + np.arange(width)[None, :]
    valid = np.arange(width)[None, :] < count[:, None]
    nan = np.nan

    def grid(src: list[Samples], col: str, fill: float) -> np.ndarray:
        out = np.full((n_flows, width), fill, dtype=float)
        for d in src:
            if len(d.get("tick", [])) == 0 or col not in d:
                continue
            t = d["tick"].astype(int)
            r = row_of[d["flow"].astype(int)]
            c = t - first[np.maximum(r, 0)]
            ok = (r >= 0) & (c >= 0) & (c < width) & (t >= 1) & (t <= n_ticks)
            out[r[ok], c[ok]] = d[col][ok].astype(float)
        return out

    def times(src: list[Samples]) -> np.ndarray:
        g = grid(src, "t_ns", nan)
        return np.where(np.isnan(g), (ticks * dt).astype(float), g)

    def ffill(a: np.ndarray, first_value: float = 0.0) -> np.ndarray:
        """Each NaN replaced by the last value before it in its row (``first_value`` if none)."""
        seen = ~np.isnan(a)
        idx = np.where(seen, np.arange(a.shape[1])[None, :], -1)
        np.maximum.accumulate(idx, axis=1, out=idx)
        out = a[np.arange(a.shape[0])[:, None], np.maximum(idx, 0)]
        return np.where(idx < 0, first_value, out)

    def rate(counter: np.ndarray, t_ns: np.ndarray) -> np.ndarray:
        prev_c = np.concatenate([np.zeros((n_flows, 1)), counter[:, :-1]], axis=1)
        prev_t = np.concatenate([((first - 1) * dt).astype(float)[:, None], t_ns[:, :-1]], axis=1)
        span = np.maximum(t_ns - prev_t, 1.0)
        return (counter - prev_c) * 8e9 / span

    # tcpi_bytes_received counts the FIN's sequence number too: a sized flow's payload is its size
    sizes = np.array([np.inf if spec.size is None else spec.size for spec in (trial.flow_list()[i] for i in ids)])
    recv = np.minimum(ffill(grid(sink, "bytes_received", nan)), sizes[:, None])
    t_sink = times(sink)
    t_send = times(send)
    g = {k: grid(send, k, nan) for k in ("snd_mss", "unacked", "sacked", "lost", "retrans", "rtt_us", "snd_cwnd",
                                         "snd_ssthresh", "total_retrans", "pacing_rate", "min_rtt_us", "data_segs_out",
                                         "bytes_sent", "total_rto", "ca_state", "bbr_bw", "bbr_min_rtt_us",
                                         "bbr_pacing_gain", "bbr_cwnd_gain", "started", "done", "on",
                                         "dgram_lost", "delay_sum_ns", "delay_n", "delay_min_ns")}
    # datagram flows (kernel/datagrams.py): ping's round trips and losses at the sender, udp's
    # one-way delays and losses at the receiver
    kinds = np.array([gr.flow_kind for _, gr, _ in expanded])
    is_udp, is_ping = (kinds == "udp")[:, None], (kinds == "ping")[:, None]
    rcv = {k: grid(sink, k, nan) for k in ("dgram_lost", "delay_sum_ns", "delay_n")}

    def interval_mean_ms(total: np.ndarray, n: np.ndarray) -> np.ndarray:
        total, n = ffill(total), ffill(n)
        d_total = np.diff(total, axis=1, prepend=0.0)
        d_n = np.diff(n, axis=1, prepend=0.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(d_n > 0, d_total / np.maximum(d_n, 1) / 1e6, nan)

    probe_rtt = interval_mean_ms(g["delay_sum_ns"], g["delay_n"])
    owd = interval_mean_ms(rcv["delay_sum_ns"], rcv["delay_n"])
    dgram_lost = np.where(is_udp, ffill(rcv["dgram_lost"]), np.where(is_ping, ffill(g["dgram_lost"]), nan))
    sent_bytes = ffill(g["bytes_sent"])
    mss = np.where(np.isnan(g["snd_mss"]), trial.mss, g["snd_mss"])
    inflight = g["unacked"] - g["sacked"] - g["lost"] + g["retrans"]
    ms = lambda us: np.where((us > 0) & (us < 0xFFFFFFFF), us / 1e3, nan)  # noqa: E731
    paced = np.array([gr.flow_kind == "tcp" and (kernel_cc(gr.algorithm).startswith("bbr") or bool(gr.pacing)
                                                 or gr.max_pacing_rate is not None)
                      for _, gr, _ in expanded])[:, None]
    pacing = np.where(paced & (g["pacing_rate"] > 0) & (g["pacing_rate"] < 2**63), g["pacing_rate"] * 8, nan)
    rto = g["total_rto"]
    cols: dict[str, Any] = {
        "time_s": ticks * dt / 1e9,
        "flow": np.repeat(ids, width).reshape(n_flows, width),
        "goodput_bps": rate(recv, t_sink),
        "delivered_bytes": recv,
        "send_rate_bps": rate(sent_bytes, t_send),
        "sent_bytes": sent_bytes,
        "rtt_ms": np.where(is_ping, probe_rtt, ms(g["rtt_us"])),
        "srtt_ms": ms(g["rtt_us"]),
        "min_rtt_ms": np.where(is_ping, ffill(g["delay_min_ns"], nan) / 1e6, ms(g["min_rtt_us"])),
        "owd_ms": np.where(is_udp, owd, nan),
        "cwnd_pkts": np.nan_to_num(g["snd_cwnd"], nan=0.0),
        "cwnd_bytes": np.nan_to_num(g["snd_cwnd"] * mss, nan=0.0),
        "inflight_pkts": np.nan_to_num(inflight, nan=0.0),
        "inflight_bytes": np.nan_to_num(inflight * mss, nan=0.0),
        "pacing_rate_bps": pacing,
        "sent_segs": ffill(g["data_segs_out"]),
        "retrans_segs": ffill(g["total_retrans"]),
        "lost_segs": dgram_lost,
        "rto_count": None if np.all(np.isnan(rto)) else ffill(rto),
    }
    # states
    state = np.empty((n_flows, width), dtype=object)
    ca = np.empty((n_flows, width), dtype=object)
    for i, (_, gr, _) in enumerate(expanded):
        if gr.flow_kind != "tcp":
            for j in range(int(count[i])):
                ca[i, j] = "open"
                if np.isnan(g["started"][i, j]) or not g["started"][i, j]:
                    state[i, j] = "idle"
                elif gr.flow_kind == "ping":
                    state[i, j] = "probing"
                else:
                    state[i, j] = "on" if g["on"][i, j] else "off"
            continue
        bbr = kernel_cc(gr.algorithm).startswith("bbr")
        for j in range(int(count[i])):
            c = g["ca_state"][i, j]
            ca_label = CA_STATES[int(c)] if not np.isnan(c) and int(c) < len(CA_STATES) else "open"
            ca[i, j] = ca_label
            if np.isnan(g["started"][i, j]) or not g["started"][i, j] or (
                g["done"][i, j] and g["unacked"][i, j] == 0
            ):
                state[i, j] = "idle"
            elif bbr and not np.isnan(g["bbr_cwnd_gain"][i, j]):
                state[i, j] = _bbr_state(g["bbr_pacing_gain"][i, j], g["bbr_cwnd_gain"][i, j])
            elif ca_label in ("recovery", "loss"):
                state[i, j] = ca_label
            elif g["snd_cwnd"][i, j] < g["snd_ssthresh"][i, j]:
                state[i, j] = "slow_start"
            else:
                state[i, j] = "cong_avoid"
    cols["state"] = state
    cols["ca_state"] = ca
    cc_cols = {
        "cc.btlbw_bps": g["bbr_bw"] * 8,
        "cc.rtprop_ms": ms(g["bbr_min_rtt_us"]),
        "cc.pacing_gain": g["bbr_pacing_gain"],
        "cc.cwnd_gain": g["bbr_cwnd_gain"],
    }
    keep = valid.reshape(-1)
    flat = {name: None if v is None else np.asarray(v).reshape(-1)[keep] for name, v in {**cols, **cc_cols}.items()}
    return build_table(columns, flat, int(keep.sum()), BACKEND, labels)


def build_router(trial: Trial, r: Samples, mode: str) -> pl.DataFrame:
    """router.parquet from the router sampler's samples: the bottleneck qdisc's and the link
    emulator's counters (``tc``, ``userspace``), or the ``full`` emulator's own bottlenecks."""
    dt = trial.sample_interval
    n_ticks = trial.duration // dt
    tick = r["tick"].astype(int)
    base = {k: (v[tick == 0][0] if np.any(tick == 0) else 0) for k, v in r.items()}
    keep = (tick >= 1) & (tick <= n_ticks)
    col = {k: v[keep].astype(float) for k, v in r.items()}
    n = int(keep.sum())

    def counter(k: str) -> np.ndarray:
        return col[k] - float(base[k])

    eth = ETH_HEADER
    steps = trial.capacity_schedule()
    t_s = col["tick"] * dt / 1e9
    cap = np.array([[bps for start, bps in steps if start <= t + 1e-12][-1] for t in t_s], dtype=float)
    if mode == "full":
        return build_table(router_columns(), _model_router(trial, col, counter, cap, t_s, n), n, BACKEND)
    if mode == "userspace":
        arrivals, arrival_bytes = counter("emu_fwd_arrival_pkts"), counter("emu_fwd_arrival_bytes")
        drops_random = counter("emu_fwd_loss_pkts")
    else:
        drops_random = counter("loss_q_drops")
        arrivals = counter("loss_q_packets") + drops_random
        arrival_bytes = None
    cols: dict[str, Any] = {
        "time_s": t_s,
        "queue_bytes": col["q_backlog"] - eth * col["q_qlen"],
        "queue_pkts": col["q_qlen"],
        "capacity_bps": cap,
        "arrivals_pkts": arrivals,
        "arrival_bytes": arrival_bytes,
        "departures_pkts": counter("q_packets"),
        "departed_bytes": counter("q_bytes") - eth * counter("q_packets"),
        "departed_payload_bytes": None,
        "drops_overflow": counter("q_drops"),
        "drops_random": drops_random,
        "drops_policer": np.zeros(n),
        **reverse_router_columns(trial, col, counter, n),
    }
    return build_table(router_columns(), cols, n, BACKEND)


def _model_router(trial: Trial, col: Samples, counter: Callable[[str], np.ndarray], cap: np.ndarray,
                  t_s: np.ndarray, n: int) -> dict[str, Any]:
    """The router columns from the ``full`` link emulator's own bottlenecks (the simulator's code,
    so every column has the simulator's meaning and units: IP bytes, drops and marks by cause,
    sojourn from enqueue to the start of transmission); the reverse columns are zeros, as the
    simulator writes them, without ``link.reverse``."""
    def sojourn(d: str) -> tuple[np.ndarray, np.ndarray]:
        dn = np.diff(col[f"emu_model_{d}_sojourn_count"], prepend=np.nan)
        ds = np.diff(col[f"emu_model_{d}_sojourn_sum_ns"], prepend=np.nan)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(dn > 0, ds / np.maximum(dn, 1) / 1e6, np.nan)
        return mean, np.where(dn > 0, col[f"emu_model_{d}_sojourn_max_ns"] / 1e6, np.nan)

    cols: dict[str, Any] = {"time_s": t_s, "capacity_bps": cap}
    for d, prefix in (("fwd", ""), ("rev", "rev_")):
        if d == "rev" and trial.link.reverse is None:
            cols.update(_unconstrained_reverse(n))
            continue
        m = f"emu_model_{d}_"
        mean, mx = sojourn(d)
        cols.update({
            f"{prefix}queue_bytes": col[m + "queue_bytes"],
            f"{prefix}queue_pkts": col[m + "queue_pkts"],
            f"{prefix}arrivals_pkts": counter(m + "arrival_pkts"),
            f"{prefix}departed_bytes": counter(m + "departed_bytes"),
            f"{prefix}departed_payload_bytes": counter(m + "departed_payload_bytes"),
            f"{prefix}drops_overflow": counter(m + "drops_overflow"),
            f"{prefix}drops_random": counter(m + "drops_random"),
            f"{prefix}drops_policer": counter(m + "drops_policer"),
            f"{prefix}drops_aqm": counter(m + "drops_aqm"),
            f"{prefix}sojourn_mean_ms": mean,
            f"{prefix}sojourn_max_ms": mx,
        })
        if d == "fwd":
            cols.update({"arrival_bytes": counter(m + "arrival_bytes"), "departures_pkts": counter(m + "departure_pkts"),
                         "marks_aqm": counter(m + "marks_aqm"), "marks_threshold": counter(m + "marks_threshold")})
        else:
            assert trial.link.reverse is not None
            cols["rev_capacity_bps"] = np.full(n, float(trial.link.reverse.capacity))
    return cols


def _unconstrained_reverse(n: int) -> dict[str, np.ndarray]:
    """The ``rev_`` counters without ``link.reverse``: zeros, as the simulator writes them."""
    zero = np.zeros(n)
    return {c: zero for c in ("rev_queue_bytes", "rev_queue_pkts", "rev_capacity_bps", "rev_arrivals_pkts",
                              "rev_departed_bytes", "rev_departed_payload_bytes", "rev_drops_overflow",
                              "rev_drops_random", "rev_drops_policer", "rev_drops_aqm")}


def reverse_router_columns(trial: Trial, col: Samples, counter: Callable[[str], np.ndarray],
                           n: int) -> dict[str, Any]:
    """The ``rev_`` router columns from the reverse bottleneck's qdisc on ``left`` (``rev_q_*``
    samples), in the simulator's units; zeros, as the simulator writes them, on an
    unconstrained reverse path. Its arrivals are what the qdisc sent, dropped and holds."""
    rev = trial.link.reverse
    if rev is None:
        return _unconstrained_reverse(n)
    eth = ETH_HEADER
    drops = counter("rev_q_drops")
    return {
        "rev_queue_bytes": col["rev_q_backlog"] - eth * col["rev_q_qlen"],
        "rev_queue_pkts": col["rev_q_qlen"],
        "rev_capacity_bps": np.full(n, float(rev.capacity)),
        "rev_arrivals_pkts": counter("rev_q_packets") + drops + col["rev_q_qlen"],
        "rev_departed_bytes": counter("rev_q_bytes") - eth * counter("rev_q_packets"),
        "rev_drops_overflow": drops,
        "rev_drops_random": np.zeros(n),
        "rev_drops_policer": np.zeros(n),
    }


#: Segments a sink's read may find, on average, before the CLI warns that the kernel ACKed
#: once per read where the simulator's default application (reading each segment at once)
#: ACKs every second segment: at 1.5 the kernel sends 0.4 ACKs a segment, 20 % fewer.
BATCHED_READ_SEGMENTS = 1.5


def bytes_read(sink: list[Samples]) -> dict[int, int]:
    """What each flow's application had read by its sink's last sample."""
    read: dict[int, int] = {}
    for d in sink:
        if len(d.get("tick", [])) and "app_bytes" in d:
            for f, b in zip(d["flow"].astype(int).tolist(), d["app_bytes"].astype(int).tolist()):
                read[f] = max(read.get(f, 0), b)
    return read


def application_reads(trial: Trial, sink: list[Samples]) -> dict[str, dict[str, Any]]:
    """Each TCP flow's reads that returned data at its sink, the bytes they read, and the
    segments (of the trial's MSS) a read found on average: Linux ACKs once per read once
    data waits unread (``tcp_cleanup_rbuf``), so this sets the ACKs a segment."""
    out: dict[str, dict[str, Any]] = {}
    read = bytes_read(sink)
    for d in sink:
        if "read_flow" not in d or not len(d.get("tick", [])):
            continue
        for f, n in zip(d["read_flow"].astype(int).tolist(), d["reads"].astype(int).tolist()):
            b = read.get(f, 0)
            out[str(f)] = {"reads": n, "bytes": b, "segments_per_read": round(b / trial.mss / n, 3) if n else None}
    return out


def batched_reads(trial: Trial, reads: Optional[dict[str, dict[str, Any]]]) -> Optional[str]:
    """A warning when a flow whose application reads at once (no ``read_interval``) found more
    than :data:`BATCHED_READ_SEGMENTS` segments a read at the kernel's sink, else None."""
    specs = trial.flow_list()
    worst: Optional[tuple[float, int]] = None
    for f, r in (reads or {}).items():
        spr = r.get("segments_per_read")
        g = trial.flows[specs[int(f)].group]
        if spr is not None and spr > BATCHED_READ_SEGMENTS and not g.read_interval and (worst is None or spr > worst[0]):
            worst = (spr, int(f))
    if worst is None:
        return None
    return (f"the sink read {worst[0]:.1f} segments a read (flow {worst[1]}; a Python loop, slower on a busy "
            "host): Linux ACKs about once per read once data waits unread, where the simulator's default "
            "application reads each segment at once and ACKs every second one; set the group's read_interval "
            "(on both backends) to compare ACK-clocked behaviour")


#: Share of its read times a paced sink must keep (a bulk flow's reads against its time over
#: the read interval) before the CLI warns that the host woke it too late: at 500 us on the
#: 2-core machine it kept 96.8-97.7 %.
KEPT_READS = 0.9


def missed_reads(trial: Trial, reads: Optional[dict[str, dict[str, Any]]]) -> Optional[str]:
    """A warning when a bulk flow of a group with ``read_interval`` was read at fewer than
    :data:`KEPT_READS` of its read times (the sink woke too late to keep them), else None."""
    specs = trial.flow_list()
    worst: Optional[tuple[float, int, int]] = None
    for f, r in (reads or {}).items():
        spec = specs[int(f)]
        interval = trial.flows[spec.group].read_interval
        if not interval or spec.size is not None:
            continue
        kept = r["reads"] / max(1, (trial.duration - spec.start_ns) // interval)
        if kept < KEPT_READS and (worst is None or kept < worst[0]):
            worst = (kept, int(f), interval)
    if worst is None:
        return None
    share, flow, interval = worst
    return (f"the sink read flow {flow} at {100 * share:.0f} % of its read times (every {units.human_time(interval)}): the host "
            "woke it too late, so its application read less often than the trial says; a longer read_interval, or "
            "a quieter host, keeps them")


def build_completions(trial: Trial, sink: list[Samples], senders: dict[str, Any], bucket_bytes: int = 0) -> pl.DataFrame:
    """fct.parquet from the runs' records: a sized flow starts when its sender called
    ``connect`` and completes when its sink's application had read every byte (receiver side,
    as the simulator measures it); delivered is what the application read by the end. The ideal
    completion counts the bottleneck's idle bucket (``bucket_bytes`` of IP) as sent at once: two
    frames of htb bucket at 80 Mbit/s are 0.30 ms, which flows alone on the path beat the
    bucketless ideal by (up to 0.086 ms measured)."""
    connect: dict[int, int] = {}
    for s in senders.values():
        connect.update({int(f): int(ns) for f, ns in (s.get("connect_ns") or {}).items()})
    done: dict[int, int] = {}
    for d in sink:
        done.update(zip(d.get("done_flow", np.array([])).astype(int).tolist(),
                        d.get("done_ns", np.array([])).astype(int).tolist()))
    read = bytes_read(sink)
    rows: dict[str, list[Any]] = {k: [] for k in ("flow", "start_s", "size_bytes", "delivered_bytes", "fct_ms")}
    for f, spec in enumerate(trial.flow_list()):
        if spec.size is None or trial.flows[spec.group].flow_kind != "tcp":
            continue
        start = connect.get(f, spec.start_ns)
        rows["flow"].append(f)
        rows["start_s"].append(start / 1e9)
        rows["size_bytes"].append(spec.size)
        rows["delivered_bytes"].append(min(read.get(f, 0), spec.size) if f not in done else spec.size)
        rows["fct_ms"].append((done[f] - start) / 1e6 if f in done else float("nan"))
    cols = {"flow": np.asarray(rows["flow"], dtype=np.uint32), "start_s": np.asarray(rows["start_s"], dtype=float),
            "size_bytes": np.asarray(rows["size_bytes"], dtype=np.uint64),
            "delivered_bytes": np.asarray(rows["delivered_bytes"], dtype=np.uint64),
            "fct_ms": np.asarray(rows["fct_ms"], dtype=float)}
    return completions_frame(cols, trial, backend=BACKEND, bucket_bytes=bucket_bytes)
