"""The multi-flow sender and sink, run inside a host namespace (``ip netns exec``).

Why Python: the data path is the kernel's (one large ``send``/``recv`` per wake-up keeps the
interpreter far below a millisecond per 10 ms tick at the rates the testbed runs), and the
telemetry is ``getsockopt`` calls; one single-threaded ``epoll`` loop per host both pumps the
sockets and samples them, so there is no lock and no thread to schedule. Both programs read a
JSON spec, print ``ready`` once listening (sink) or set up (sender), read the start time ``t0``
(CLOCK_MONOTONIC ns, shared by every namespace) from standard input, start their clock there, and write their samples as
``.npz`` arrays when done.

Sender (``python -m cctestbed.kernel.traffic send SPEC``): one socket per flow, bound to
source port ``port_base + flow`` so the sink and packet captures can tell flows apart; per
socket ``TCP_CONGESTION``, optional ``SO_MAX_PACING_RATE`` (``max_pacing_rate`` caps
``sk_pacing_rate``; any value but ~0 also moves ``sk_pacing_status`` to ``SK_PACING_NEEDED``,
the kernel's own pacing for algorithms that do not ask for it, so ``pacing = true`` without a
cap sets the largest value but one), staggered connects, bulk or fixed-size
transfers. Every ``interval`` it reads ``TCP_INFO`` and, for BBR, ``TCP_CC_INFO``.

Workload flows (a flow group with ``arrivals``: many short flows) are sampled only while open:
the sender closes a workload socket (an orderly close, its FIN long sent) at the first tick at
which every byte is acknowledged, after sampling it, and the sink drops one at the first tick
after its end of stream; so thousands of them neither pile up sockets nor samples. Both raise
their open-file limit to the hard limit. The sender records when it called ``connect`` for each
flow, the sink when its application had read every byte of a flow with a size: the flow's
completion time, receiver side, as the simulator measures it.

Sink (``... sink SPEC``): listens with the group's algorithm when ``cc`` is given (an ECN
group's: the receiver's algorithm decides how CE marks are echoed), accepts every flow, reads and discards, and every ``interval`` reads
each connection's ``tcpi_bytes_received`` (payload delivered in order by the receiving TCP)
and the bytes the application has read. ``rwnd`` sets ``SO_RCVBUF`` to the window (the kernel
doubles it and keeps about half for overhead) and ``TCP_WINDOW_CLAMP`` (the advertised-window cap
itself), applied again after every read: Linux resets a connection's clamp to what its buffer
allows whenever its measured payload-to-truesize ratio changes (``tcp_measure_rcv_mss``), which
the first data segment already does, and would otherwise advertise twice the window.
With ``read_interval_ns`` (the group's ``read_interval``) the sink reads only at ``t0 + k *
read_interval``, every readable socket whole, as the simulator's receiving application does;
without it, whenever a socket is readable (on a busy host that is every 75-100 us of this
loop, several segments a read at 500 Mbit/s).
"""

from __future__ import annotations

import collections
import errno
import json
import os
import select
import signal
import socket
import struct
import sys
import time
from typing import Any, Callable, Mapping, Optional

TCP_CONGESTION = getattr(socket, "TCP_CONGESTION", 13)
TCP_INFO = getattr(socket, "TCP_INFO", 11)
TCP_CC_INFO = 26
TCP_WINDOW_CLAMP = getattr(socket, "TCP_WINDOW_CLAMP", 10)
SO_MAX_PACING_RATE = 47
#: ``SO_MAX_PACING_RATE`` takes an unsigned long (bytes per second) when given 8 bytes;
#: ~0 means "no cap" and leaves pacing off (sk_setsockopt), so "pace, uncapped" is ~0 - 1.
PACE_UNCAPPED = 2**64 - 2
TCP_INFO_LEN = 280

#: tcp_info fields read (byte offset, struct format), see linux/tcp.h.
INFO_FIELDS: dict[str, tuple[int, str]] = {
    "state": (0, "B"),
    "ca_state": (1, "B"),
    "snd_mss": (16, "I"),
    "unacked": (24, "I"),
    "sacked": (28, "I"),
    "lost": (32, "I"),
    "retrans": (36, "I"),
    "rtt_us": (68, "I"),
    "rttvar_us": (72, "I"),
    "snd_ssthresh": (76, "I"),
    "snd_cwnd": (80, "I"),
    "total_retrans": (100, "I"),
    "pacing_rate": (104, "Q"),
    "bytes_acked": (120, "Q"),
    "bytes_received": (128, "Q"),
    "min_rtt_us": (148, "I"),
    "data_segs_out": (156, "I"),
    "delivery_rate": (160, "Q"),
    "delivered": (192, "I"),
    "bytes_sent": (200, "Q"),
    "bytes_retrans": (208, "Q"),
    "total_rto": (240, "H"),
}


def parse_tcp_info(raw: bytes) -> dict[str, float]:
    """The fields of INFO_FIELDS present in ``raw`` (older kernels return shorter structs)."""
    out: dict[str, float] = {}
    for name, (off, fmt) in INFO_FIELDS.items():
        if off + struct.calcsize(fmt) <= len(raw):
            out[name] = struct.unpack_from(fmt, raw, off)[0]
        else:
            out[name] = float("nan")
    return out


def parse_bbr_info(raw: bytes) -> Optional[dict[str, float]]:
    """struct tcp_bbr_info: bw (bytes/s), min_rtt (us), pacing and cwnd gains (<< 8)."""
    if len(raw) < 20:
        return None
    lo, hi, min_rtt, pg, cg = struct.unpack_from("5I", raw, 0)
    return {"bw": float(lo | (hi << 32)), "min_rtt_us": float(min_rtt), "pacing_gain": pg / 256, "cwnd_gain": cg / 256}


def mono_ns() -> int:
    return time.monotonic_ns()


def raise_fd_limit() -> None:
    """Open files up to the hard limit: a workload opens a socket per flow."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class Stop(Exception):
    pass


def _on_signal(signum: int, frame: Any) -> None:
    raise Stop()


def _sleep_until(t_ns: int) -> None:
    while True:
        d = t_ns - mono_ns()
        if d <= 0:
            return
        time.sleep(min(d / 1e9, 0.05))


def wait_t0(spec: dict[str, Any]) -> None:
    """Prints ``ready`` and reads the start time (CLOCK_MONOTONIC ns) from standard input."""
    print("ready", flush=True)
    line = sys.stdin.readline()
    if not line.strip():
        raise Stop()
    spec["t0_ns"] = int(line)


def _save(path: str, cols: dict[str, list[Any]]) -> None:
    import numpy as np

    tmp = path + ".tmp.npz"
    arrays: dict[str, Any] = {k: np.asarray(v) for k, v in cols.items()}
    np.savez(tmp, **arrays)
    os.replace(tmp, path)


class Clock:
    """A program's sample times, from the start time (:func:`wait_t0`): tick ``k`` at
    ``t0 + k * interval``; the last is the first at or after the trial's end."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.t0: int = spec["t0_ns"]
        self.interval: int = spec["interval_ns"]
        self.end: int = self.t0 + spec["duration_ns"]

    def run(self, sample: Callable[[int, int], None], wait: Callable[[int, int], None],
            due: Callable[[int, int], None] = lambda now, next_ns: None) -> None:
        """The programs' one loop. Each turn first does what is ``due(now, next_ns)`` (by now,
        and no later than the next sample time), then takes the next sample once its time has
        come, ``sample(tick, now)``, or else waits for its I/O until then at the latest,
        ``wait(now, next_ns)``. It returns after the last sample."""
        tick = 1
        while True:
            now = mono_ns()
            next_ns = self.t0 + tick * self.interval
            due(now, next_ns)
            if now >= next_ns:
                sample(tick, now)
                tick += 1
                if next_ns >= self.end:
                    return
                continue
            wait(now, next_ns)


def program_main(argv: list[str], module: str, commands: Mapping[str, Callable[[dict[str, Any]], int]]) -> int:
    """The entry point of a program run in a namespace, ``python -m cctestbed.kernel.<module>
    COMMAND SPEC.json`` (without COMMAND where the module has one program, named ``""``): reads
    the JSON spec and runs the command, SIGTERM and SIGINT stopping it (:class:`Stop`)."""
    named = "|".join(c for c in commands if c)
    if len(argv) != (2 if named else 1) or (named and argv[0] not in commands):
        print(f"usage: python -m cctestbed.kernel.{module} {named + ' ' if named else ''}SPEC.json", file=sys.stderr)
        return 2
    with open(argv[-1]) as fh:
        spec = json.load(fh)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    try:
        return commands[argv[0] if named else ""](spec)
    except Stop:
        return 0


def congestion_control(sock: socket.socket) -> str:
    """The congestion control a TCP socket runs, as the kernel names it (TCP_CA_NAME_MAX is 16)."""
    return sock.getsockopt(socket.IPPROTO_TCP, TCP_CONGESTION, 16).split(b"\0")[0].decode()


# --- sender -----------------------------------------------------------------------------------


class Flow:
    def __init__(self, spec: dict[str, Any], t0: int):
        self.id: int = spec["flow"]
        self.cc: str = spec["cc"]
        self.start_ns: int = t0 + spec["start_ns"]
        self.size: Optional[int] = spec.get("size")
        self.pacing: Optional[bool] = spec.get("pacing")
        #: bytes per second
        self.max_pacing_rate: Optional[int] = spec.get("max_pacing_rate")
        #: A workload's flow: sampled while open, closed once every byte is acknowledged.
        self.workload: bool = bool(spec.get("workload"))
        self.closed = False
        #: When connect() was called (CLOCK_MONOTONIC ns).
        self.connect_ns: Optional[int] = None
        self.sock: Optional[socket.socket] = None
        self.connected = False
        self.sent = 0
        self.done_sending = False
        self.error: Optional[str] = None


def run_sender(spec: dict[str, Any]) -> int:
    raise_fd_limit()
    wait_t0(spec)
    t0: int = spec["t0_ns"]
    interval: int = spec["interval_ns"]
    end: int = t0 + spec["duration_ns"]
    dst = (spec["dst"], spec["port"])
    flows = [Flow(f, t0) for f in spec["flows"]]
    chunk = memoryview(b"\0" * spec.get("chunk", 1 << 18))
    ep = select.epoll()
    by_fd: dict[int, Flow] = {}
    cols: dict[str, list[Any]] = {k: [] for k in ("tick", "t_ns", "flow", *INFO_FIELDS, "bbr_bw", "bbr_min_rtt_us",
                                                   "bbr_pacing_gain", "bbr_cwnd_gain", "started", "done")}

    def start(f: Flow) -> None:
        f.connect_ns = mono_ns()
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.setsockopt(socket.IPPROTO_TCP, TCP_CONGESTION, f.cc.encode())
        if f.max_pacing_rate is not None or f.pacing:
            cap = f.max_pacing_rate if f.max_pacing_rate is not None else PACE_UNCAPPED
            s.setsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE, struct.pack("Q", cap))
        s.bind((spec["src"], spec["port_base"] + f.id))
        s.setblocking(False)
        err = s.connect_ex(dst)
        if err not in (0, errno.EINPROGRESS):
            f.error = f"connect: {os.strerror(err)}"
        f.sock = s
        by_fd[s.fileno()] = f
        ep.register(s.fileno(), select.EPOLLOUT)

    open_flows: list[Flow] = []

    def sample(tick: int) -> None:
        now = mono_ns()
        still: list[Flow] = []
        for f in open_flows:
            assert f.sock is not None
            try:
                info = parse_tcp_info(f.sock.getsockopt(socket.IPPROTO_TCP, TCP_INFO, TCP_INFO_LEN))
            except OSError:
                still.append(f)
                continue
            if f.workload and f.done_sending and info["unacked"] == 0:
                close(f)  # sampled below for the last time
            else:
                still.append(f)
            bbr = None
            if f.cc.startswith("bbr"):
                try:
                    bbr = parse_bbr_info(f.sock.getsockopt(socket.IPPROTO_TCP, TCP_CC_INFO, 20))
                except OSError:
                    bbr = None
            cols["tick"].append(tick)
            cols["t_ns"].append(now - t0)
            cols["flow"].append(f.id)
            for k in INFO_FIELDS:
                cols[k].append(info[k])
            nan = float("nan")
            cols["bbr_bw"].append(bbr["bw"] if bbr else nan)
            cols["bbr_min_rtt_us"].append(bbr["min_rtt_us"] if bbr else nan)
            cols["bbr_pacing_gain"].append(bbr["pacing_gain"] if bbr else nan)
            cols["bbr_cwnd_gain"].append(bbr["cwnd_gain"] if bbr else nan)
            cols["started"].append(f.connected)
            cols["done"].append(f.done_sending)
        open_flows[:] = still

    def close(f: Flow) -> None:
        assert f.sock is not None
        fd = f.sock.fileno()
        if fd in by_fd:
            del by_fd[fd]
            try:
                ep.unregister(fd)
            except (OSError, ValueError):
                pass
        f.sock.close()
        f.closed = True

    pending = collections.deque(sorted(flows, key=lambda f: f.start_ns))

    def start_due(now: int, next_ns: int) -> None:
        while pending and pending[0].start_ns <= now:
            f = pending.popleft()
            start(f)
            open_flows.append(f)

    def pump(now: int, next_ns: int) -> None:
        wake = next_ns if not pending else min(next_ns, pending[0].start_ns)
        timeout = max(0.0, (wake - now) / 1e9)
        for fd, ev in ep.poll(timeout):
            f = by_fd[fd]
            assert f.sock is not None
            if not f.connected:
                err = f.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    f.error = f"connect: {os.strerror(err)}"
                    ep.unregister(fd)
                    continue
                f.connected = True
            if f.done_sending:
                continue
            want = len(chunk) if f.size is None else min(len(chunk), f.size - f.sent)
            try:
                n = f.sock.send(chunk[:want])
            except BlockingIOError:
                continue
            except OSError as e:
                # The sinks close their sockets at the same end tick; a reset in the last
                # two sample intervals is the end of the trial, not a failure.
                if mono_ns() < end - 2 * interval:
                    f.error = f"send: {e.strerror}"
                f.done_sending = True
                ep.unregister(fd)
                continue
            f.sent += n
            if f.size is not None and f.sent >= f.size:
                f.done_sending = True
                f.sock.shutdown(socket.SHUT_WR)
                ep.modify(fd, 0)

    try:
        _sleep_until(t0)
        Clock(spec).run(lambda tick, now: sample(tick), pump, due=start_due)
    except Stop:
        pass
    finally:
        _save(spec["out"], cols)
        errors = {f.id: f.error for f in flows if f.error}
        in_use = {}  # the congestion control each socket ran at the end, as the kernel names it
        for f in flows:
            if f.sock is not None and not f.closed:
                try:
                    in_use[f.id] = congestion_control(f.sock)
                except OSError:
                    pass
        with open(spec["out"] + ".json", "w") as fh:
            json.dump({"errors": errors, "sent": {f.id: f.sent for f in flows}, "cc": in_use,
                       "connect_ns": {f.id: f.connect_ns - t0 for f in flows if f.connect_ns is not None}}, fh)
        for f in flows:
            if f.sock is not None and not f.closed:
                # RST rather than FIN: nothing lingers once the trial is over.
                f.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                f.sock.close()
    return 0


# --- sink -------------------------------------------------------------------------------------


def run_sink(spec: dict[str, Any]) -> int:
    raise_fd_limit()
    port_base: int = spec["port_base"]
    rwnd: dict[int, int] = {int(k): v for k, v in (spec.get("rwnd") or {}).items()}
    #: Flows with a size: when the application has read them whole (CLOCK_MONOTONIC ns).
    sizes: dict[int, int] = {int(k): v for k, v in (spec.get("sizes") or {}).items()}
    workload: set[int] = set(spec.get("workload") or ())
    #: The application reads every this many ns from t0 (0: whenever a socket is readable).
    read_interval: int = spec.get("read_interval_ns") or 0
    done_ns: dict[int, int] = {}
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if rwnd:
        # The listening socket's buffer is inherited by accepted sockets and sets the window
        # scale negotiated in the handshake; the per-flow clamp is applied after accept.
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, max(rwnd.values()))
    if spec.get("cc"):
        # accepted sockets keep the listener's algorithm (tcp_ca_openreq_child)
        ls.setsockopt(socket.IPPROTO_TCP, TCP_CONGESTION, spec["cc"].encode())
    ls.bind((spec["addr"], spec["port"]))
    ls.listen(256)
    ls.setblocking(False)
    ep = select.epoll()
    ep.register(ls.fileno(), select.EPOLLIN)
    conns: dict[int, tuple[socket.socket, int]] = {}
    app_bytes: dict[int, int] = {}
    #: Reads that returned data, per flow: Linux ACKs once per read once data waits unread.
    reads: collections.Counter[int] = collections.Counter()
    closed: dict[int, int] = {}
    buf = bytearray(1 << 20)
    cols: dict[str, list[Any]] = {k: [] for k in ("tick", "t_ns", "flow", "bytes_received", "app_bytes", "closed")}
    wait_t0(spec)
    t0: int = spec["t0_ns"]

    def sample(tick: int) -> None:
        now = mono_ns()
        for fd, (s, flow) in list(conns.items()):
            try:
                info = parse_tcp_info(s.getsockopt(socket.IPPROTO_TCP, TCP_INFO, TCP_INFO_LEN))
                received = info["bytes_received"]
            except OSError:
                received = float("nan")
            cols["tick"].append(tick)
            cols["t_ns"].append(now - t0)
            cols["flow"].append(flow)
            cols["bytes_received"].append(received)
            cols["app_bytes"].append(app_bytes[flow])
            cols["closed"].append(flow in closed)
            if flow in workload and flow in closed:  # that was its last sample; the socket goes
                del conns[fd]
                s.close()

    def receive(now: int, next_ns: int) -> None:
        handle(ep.poll(max(0.0, (next_ns - now) / 1e9)))

    def receive_paced(now: int, next_ns: int) -> None:
        # the application's read times: every read_interval from t0, the next at or after now
        due = t0 + -(-(now - t0) // read_interval) * read_interval
        if due > now:
            time.sleep((min(due, next_ns) - now) / 1e9)
            if due > next_ns:
                return
        handle(ep.poll(0))

    def handle(events: list[tuple[int, int]]) -> None:
        for fd, ev in events:
            if fd == ls.fileno():
                while True:
                    try:
                        s, peer = ls.accept()
                    except BlockingIOError:
                        break
                    flow = peer[1] - port_base
                    if spec.get("cc"):
                        got = congestion_control(s)
                        if got != spec["cc"]:
                            raise RuntimeError(f"flow {flow}'s receiving socket runs {got}, not the listener's {spec['cc']}")
                    if flow in rwnd:
                        s.setsockopt(socket.IPPROTO_TCP, TCP_WINDOW_CLAMP, rwnd[flow])
                    s.setblocking(False)
                    conns[s.fileno()] = (s, flow)
                    app_bytes[flow] = 0
                    ep.register(s.fileno(), select.EPOLLIN)
                continue
            s, flow = conns[fd]
            while True:
                try:
                    n = s.recv_into(buf)
                except BlockingIOError:
                    break
                except OSError:
                    n = 0
                if n == 0:
                    # Keep the socket for TCP_INFO but stop polling it.
                    closed[flow] = app_bytes[flow]
                    ep.unregister(fd)
                    break
                app_bytes[flow] += n
                reads[flow] += 1
                if flow in sizes and flow not in done_ns and app_bytes[flow] >= sizes[flow]:
                    done_ns[flow] = mono_ns()
                if n < len(buf):
                    break
            if flow in rwnd and flow not in closed:
                s.setsockopt(socket.IPPROTO_TCP, TCP_WINDOW_CLAMP, rwnd[flow])  # see the module doc

    try:
        Clock(spec).run(lambda tick, now: sample(tick), receive_paced if read_interval else receive)
    except Stop:
        pass
    finally:
        done = sorted(done_ns)
        _save(spec["out"], {**cols, "done_flow": done, "done_ns": [done_ns[f] - t0 for f in done],
                            "read_flow": sorted(reads), "reads": [reads[f] for f in sorted(reads)]})
        for s, _ in conns.values():
            s.close()
        ls.close()
    return 0


def main(argv: list[str]) -> int:
    return program_main(argv, "traffic", {"send": run_sender, "sink": run_sink})


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
