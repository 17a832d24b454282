"""The router sampler: qdisc statistics over netlink and the link emulator's counters.

Run inside the router namespace (``python -m cctestbed.kernel.routerstats SPEC``). Every
``interval`` it dumps the namespace's qdiscs with one ``RTM_GETQDISC`` request on a raw
netlink socket (no tool is spawned, so sampling costs well under a millisecond) and keeps
the bottleneck queue's backlog, packets sent, and drops (and the reverse bottleneck's, ``rev_q_*``,
when the trial has one: ``rev_dev`` and ``rev_handle`` in the spec); with the userspace emulator it also
reads the emulator's counters from its memory-mapped stats file. With the ``full`` emulator
(no ``bottleneck_dev``) the bottleneck is the emulator's own, and its queue, drops, marks and
sojourn come from that file alone. Samples are written as
``.npz`` arrays at the end, like the traffic programs.
"""

from __future__ import annotations

import mmap
import os
import socket
import struct
import sys
from typing import Any, Optional

from .traffic import Clock, Stop, _save, _sleep_until, mono_ns, program_main, wait_t0

RTM_NEWQDISC = 36
RTM_GETQDISC = 38
NLM_F_REQUEST = 0x1
NLM_F_DUMP = 0x300
NLMSG_DONE = 3
NLMSG_ERROR = 2
TCA_KIND = 1
TCA_STATS = 3
TCA_STATS2 = 7
TCA_STATS_BASIC = 1
TCA_STATS_QUEUE = 3

#: Slots of the emulator's stats file (crates/cctestbed-linkemu, enum Slot).
EMU_BASE_SLOTS: tuple[str, ...] = (
    "magic",
    "fwd_rx_pkts",
    "fwd_rx_bytes",
    "fwd_arrival_pkts",
    "fwd_arrival_bytes",
    "fwd_loss_pkts",
    "fwd_loss_bytes",
    "fwd_tx_pkts",
    "fwd_tx_refused",
    "rev_rx_pkts",
    "rev_rx_bytes",
    "rev_tx_pkts",
    "rev_tx_refused",
    "sock_drops",
    "queued",
    "late_max_ns",
    "updated_ns",
    "late_over_1ms",
    "serialization_bps",
)
#: With the ``full`` emulator (``--model``), each direction's bottleneck: a block of slots after
#: :data:`EMU_BASE_SLOTS`, forward (``model_fwd_``) then reverse (``model_rev_``) (enum ModelSlot).
EMU_MODEL_SLOTS = (
    "arrival_pkts",
    "arrival_bytes",
    "queue_pkts",
    "queue_bytes",
    "departure_pkts",
    "departed_bytes",
    "departed_payload_bytes",
    "drops_overflow",
    "drops_random",
    "drops_policer",
    "drops_aqm",
    "marks_aqm",
    "marks_threshold",
    "sojourn_sum_ns",
    "sojourn_count",
    "sojourn_max_ns",
    "ce_written",
    "rate_bps",
)
#: After the model blocks, ``epoch_ns``: the trial's time 0 (CLOCK_MONOTONIC), which the backend
#: writes once for the ``full`` emulator's model to run on trial time (EPOCH_SLOT).
EMU_SLOTS: tuple[str, ...] = (*EMU_BASE_SLOTS, *(f"model_fwd_{k}" for k in EMU_MODEL_SLOTS),
             *(f"model_rev_{k}" for k in EMU_MODEL_SLOTS), "epoch_ns")
EMU_MAGIC = 0x6363_7465_6D75_0001


def frames_lost_outside_the_link(linkemu: Optional[dict[str, Any]]) -> int:
    """Frames the host lost around the userspace link emulator, outside the link it models (from
    its report, ``linkemu.json``): the kernel dropped them before the emulator read them (its
    socket's buffer full) or, where the emulator is the bottleneck (``full``, mode ``model``), an
    interface refused them (with ``userspace`` the interface it writes to holds the htb + bfifo
    bottleneck, whose refusals are the link's own drops); 0 without the emulator. Each is a loss
    the trial does not describe."""
    c = (linkemu or {}).get("counters") or {}
    refused = c.get("fwd_tx_refused", 0) + c.get("rev_tx_refused", 0) if (linkemu or {}).get("mode") == "model" else 0
    return int(c.get("sock_drops", 0) + refused)


#: The link emulator's timing error (us) at its 99th percentile above which a run measured a stalled
#: host rather than the path its trial describes: the bound the kernel tests hold the emulator to
#: and the fidelity reference keeps reps by. Such stalls come in bursts when the virtual machine's
#: host takes its CPUs (two step-bbr reps: p99 3.0 and 5.5 ms, queue p95 1.56 and 1.76 BDP, where
#: the quiet reps measured 0.80-0.86), or when the emulator has more to do than one CPU carries
#: (router captures at 1 Gbit/s: p99 9.7 ms, utilization 23.8 % where 70-87 % is measured without).
EMULATOR_LATE_P99_US = 1000.0


def emulator_timing_us(linkemu: Optional[dict[str, Any]], stat: str) -> Optional[float]:
    """One statistic of the userspace emulator's per-frame timing error (``p50_us``, ``p99_us``,
    ``max_us``: how late it sent frames, us), the later of its two directions, from its report;
    None without the emulator."""
    errors = [((linkemu or {}).get(k) or {}).get(stat) for k in ("timing_error_fwd", "timing_error_rev")]
    known = [float(e) for e in errors if e is not None]
    return max(known) if known else None


def emulator_late_p99_us(linkemu: Optional[dict[str, Any]]) -> Optional[float]:
    """The userspace emulator's timing error at its 99th percentile (us), the later direction's;
    None without the emulator."""
    return emulator_timing_us(linkemu, "p99_us")


def emulator_stall_ms(linkemu: Optional[dict[str, Any]]) -> float:
    """The longest the userspace link emulator held a frame past its time, either way, in ms (its
    largest timing error); 0 without the emulator. It sees the stalls of its own CPU only: from
    250 Mbit/s the stacks run on the other, whose stalls it does not see (docs/kernel.md)."""
    return (emulator_timing_us(linkemu, "max_us") or 0.0) / 1e3


def stall_overflow(linkemu: Optional[dict[str, Any]], bottleneck: Optional[dict[str, Any]]) -> Optional[str]:
    """Why a kernel run's host broke its path (:func:`stall_outlasts_buffer`), from its report."""
    stalls = (linkemu or {}).get("stalls") or {}
    worst = max(stalls.get("kept") or [], key=lambda s: s["max_late_us"], default=None)
    drain_us = (bottleneck or {}).get("buffer_drain_us")
    return stall_outlasts_buffer(emulator_stall_ms(linkemu), drain_us / 1e3 if drain_us else None,
                                 at_s=worst["t_s"] if worst else None, count=stalls.get("count"))


def stall_outlasts_buffer(stall_ms: float, drain_ms: Optional[float], at_s: Optional[float] = None,
                          count: Optional[int] = None) -> Optional[str]:
    """Why a kernel run's host broke its path, or None: the link emulator stalled at least as
    long as the bottleneck's buffer takes to drain (``drain_ms``), so what the stall held left
    at once, a burst the buffer could not hold even empty. 16 CUBIC flows at 1 Gbit/s, 88 ms,
    0.073 BDP (6.4 ms): one 8.2 ms stall at 19.05 s, and 11 of the flows lost 196 packets at
    19.07-19.12 s with their windows 720 packets short of filling the path, where every other
    loss of that run, and every loss of the simulator's, came with the path full."""
    if not drain_ms or stall_ms < drain_ms:
        return None
    when = f" at {at_s:.2f} s" if at_s is not None else ""
    how_many = f" ({count} stall(s) over 1 ms)" if count is not None else ""
    return (f"the link emulator stalled for {stall_ms:.1f} ms{when}{how_many}, as long as the bottleneck's buffer "
            f"takes to drain ({drain_ms:.1f} ms): the frames it held left at once, a burst the buffer could not hold")


def _attrs(data: bytes, off: int, end: int) -> dict[int, bytes]:
    out = {}
    while off + 4 <= end:
        length, kind = struct.unpack_from("HH", data, off)
        if length < 4:
            break
        out[kind & 0x3FFF] = data[off + 4 : off + length]
        off += (length + 3) & ~3
    return out


class QdiscReader:
    """Dumps qdisc statistics of the current network namespace."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
        self.sock.bind((0, 0))
        self.seq = 0

    def dump(self) -> dict[tuple[int, int], dict[str, Any]]:
        """{(ifindex, handle): {kind, bytes, packets, drops, qlen, backlog, overlimits}}."""
        self.seq += 1
        tcmsg = struct.pack("BxxxiIII", socket.AF_UNSPEC, 0, 0, 0, 0)
        hdr = struct.pack("IHHII", 16 + len(tcmsg), RTM_GETQDISC, NLM_F_REQUEST | NLM_F_DUMP, self.seq, 0)
        self.sock.send(hdr + tcmsg)
        out: dict[tuple[int, int], dict[str, Any]] = {}
        while True:
            data = self.sock.recv(1 << 16)
            off = 0
            while off + 16 <= len(data):
                length, kind, flags, seq, pid = struct.unpack_from("IHHII", data, off)
                if length < 16:
                    return out
                if kind == NLMSG_DONE:
                    return out
                if kind == NLMSG_ERROR:
                    (code,) = struct.unpack_from("i", data, off + 16)
                    if code != 0:
                        raise OSError(-code, os.strerror(-code))
                    return out
                if kind == RTM_NEWQDISC and seq == self.seq:
                    _, ifindex, handle, parent, _ = struct.unpack_from("BxxxiIII", data, off + 16)
                    a = _attrs(data, off + 36, off + length)
                    q: dict[str, Any] = {"kind": a.get(TCA_KIND, b"").rstrip(b"\0").decode(), "parent": parent}
                    if TCA_STATS2 in a:
                        s2 = _attrs(a[TCA_STATS2], 0, len(a[TCA_STATS2]))
                        if TCA_STATS_BASIC in s2:
                            q["bytes"], q["packets"] = struct.unpack_from("QI", s2[TCA_STATS_BASIC], 0)
                        if TCA_STATS_QUEUE in s2:
                            q["qlen"], q["backlog"], q["drops"], q["requeues"], q["overlimits"] = struct.unpack_from(
                                "5I", s2[TCA_STATS_QUEUE], 0
                            )
                    elif TCA_STATS in a:
                        b, p, d, o, _, _, ql, bl = struct.unpack_from("QIIIIIII", a[TCA_STATS], 0)
                        q.update(bytes=b, packets=p, drops=d, overlimits=o, qlen=ql, backlog=bl)
                    out[(ifindex, handle)] = q
                off += (length + 3) & ~3


class EmuStats:
    """The emulator's memory-mapped stats file: its counters, read by the router sampler, and
    (``writable``) the slots the backend sets, ``serialization_bps`` and ``epoch_ns``."""

    def __init__(self, path: str, writable: bool = False):
        fd = os.open(path, os.O_RDWR if writable else os.O_RDONLY)
        prot = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
        try:
            self.map = mmap.mmap(fd, len(EMU_SLOTS) * 8, mmap.MAP_SHARED, prot)
        finally:
            os.close(fd)

    def read(self) -> dict[str, int]:
        vals = struct.unpack_from(f"<{len(EMU_SLOTS)}Q", self.map, 0)
        return dict(zip(EMU_SLOTS, vals))

    def take_sojourn_max(self) -> tuple[int, int]:
        """The largest sojourn in each direction's bottleneck since the last call (ns), each
        slot set back to 0 (``full`` emulator)."""
        out = []
        for d in ("fwd", "rev"):
            off = 8 * EMU_SLOTS.index(f"model_{d}_sojourn_max_ns")
            (v,) = struct.unpack_from("<Q", self.map, off)
            struct.pack_into("<Q", self.map, off, 0)
            out.append(v)
        return out[0], out[1]

    def set_epoch(self, t0_ns: int) -> None:
        """The trial's time 0 (CLOCK_MONOTONIC ns): the ``full`` emulator's model runs on trial
        time from then on (frames before it pass straight through), and either emulator's report
        gives its stalls' times on it."""
        struct.pack_into("<Q", self.map, 8 * EMU_SLOTS.index("epoch_ns"), t0_ns)

    def set_serialization(self, rate_bps: int) -> None:
        """The forward bottleneck's new rate: frames the emulator reads from now on are shifted
        by their transmission time at that rate."""
        struct.pack_into("<Q", self.map, 8 * EMU_SLOTS.index("serialization_bps"), rate_bps)


def emu_ready(path: str) -> bool:
    try:
        with open(path, "rb") as fh:
            head = fh.read(8)
    except OSError:
        return False
    return len(head) == 8 and struct.unpack("<Q", head)[0] == EMU_MAGIC


def run(spec: dict[str, Any]) -> int:
    reader = QdiscReader()
    # with the full emulator there is no bottleneck qdisc: its queue is in the emulator's slots
    key = (socket.if_nametoindex(spec["bottleneck_dev"]), int(spec["bottleneck_handle"])) \
        if spec.get("bottleneck_dev") else None
    loss_key: Optional[tuple[int, int]] = None
    if spec.get("loss_dev"):
        loss_key = (socket.if_nametoindex(spec["loss_dev"]), int(spec["loss_handle"]))
    rev_key: Optional[tuple[int, int]] = None
    if spec.get("rev_dev"):
        rev_key = (socket.if_nametoindex(spec["rev_dev"]), int(spec["rev_handle"]))
    emu = EmuStats(spec["emu_stats"], writable=key is None) if spec.get("emu_stats") else None
    queue_fields = ("bytes", "packets", "drops", "qlen", "backlog")
    names = ["tick", "t_ns", *(f"q_{k}" for k in queue_fields), "loss_q_drops", "loss_q_packets",
             *(f"rev_q_{k}" for k in queue_fields)]
    names += [f"emu_{k}" for k in EMU_SLOTS[1:]]
    cols: dict[str, list[Any]] = {k: [] for k in names}
    wait_t0(spec)
    t0: int = spec["t0_ns"]

    def sample(tick: int) -> None:
        now = mono_ns()
        qs = reader.dump()
        e = emu.read() if emu else None
        if e is not None and key is None:
            assert emu is not None
            e["model_fwd_sojourn_max_ns"], e["model_rev_sojourn_max_ns"] = emu.take_sojourn_max()
        if key is not None and key not in qs:
            raise RuntimeError(f"no qdisc {key[1] >> 16:x}: on {spec['bottleneck_dev']}: found {sorted(qs)}")
        q = qs[key] if key is not None else {}
        lq = qs.get(loss_key, {}) if loss_key else {}
        cols["tick"].append(tick)
        cols["t_ns"].append(now - t0)
        rq = qs.get(rev_key, {}) if rev_key else {}
        for k in queue_fields:
            cols[f"q_{k}"].append(q.get(k, -1))
            cols[f"rev_q_{k}"].append(rq.get(k, -1))
        cols["loss_q_drops"].append(lq.get("drops", -1))
        cols["loss_q_packets"].append(lq.get("packets", -1))
        for k in EMU_SLOTS[1:]:
            cols[f"emu_{k}"].append(e[k] if e else -1)

    try:
        _sleep_until(t0)
        sample(0)
        Clock(spec).run(lambda tick, now: sample(tick), lambda now, next_ns: _sleep_until(next_ns))
    except Stop:
        pass
    finally:
        _save(spec["out"], cols)
    return 0


def main(argv: list[str]) -> int:
    return program_main(argv, "routerstats", {"": run})


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
