"""Running a trial on real Linux TCP.

:func:`run_kernel_trial` takes the same trial as the simulator and returns the same
:class:`~cctestbed.results.TrialResult`, with ``backend = "kernel"``. Before anything is
created it checks the host and the trial (:mod:`.checks`: root, the tools, the algorithms, and
what the kernel backend cannot reproduce, each refused with the reason). Then it builds the
topology (:mod:`.topology`), starts the link emulator, each flow group's receiver and sender
(:func:`group_programs`) and the router sampler in their namespaces, releases them all at one
start time, waits for the trial's duration, and turns what they recorded into the result
tables (:mod:`.columns`).

Everything is removed on success, failure, Ctrl-C and SIGTERM; a killed run's leftovers go
with ``cctestbed cleanup``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Union

from ..config import Trial, load_trial
from ..results import TrialResult
from ..summary import TrialInfo, summarize
from . import bpfcc
from . import topology as topo
from .checks import (PORT_BASE, RX_STEERING_BPS, BpfPlan, KernelUnavailable, TrialRefused, bpf_plans, check_host,
                     choose_link_emulator, find_linkemu, kernel_cc, trial_problems)
from .columns import BACKEND, RawRun, application_reads, kernel_tables

#: The port every sink listens on.
PORT = 5201


class KernelRunError(RuntimeError):
    """The run started but failed."""




def _steering(trial: Trial) -> Optional[tuple[int, list[int]]]:
    """(the emulator's CPU, the CPUs that process what it sends) at high rates on a host with more
    than one CPU, else None. Without it, every frame the emulator writes is carried through the
    bridge and the receiving host's TCP (and the ACK or data that TCP sends back) inside the
    emulator's own send call, on its CPU: at 1 Gbit/s that CPU runs the stacks of both ends."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2 or trial.link.capacity < RX_STEERING_BPS:
        return None
    return cpus[0], cpus[1:]


# --- processes -----------------------------------------------------------------------------------


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen
    log: Path
    ready: bool = False


@dataclass
class Run:
    trial: Trial
    names: topo.Names
    workdir: Path
    mode: str
    capture: bool
    procs: list[Proc] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)

    #: With receive steering (:func:`_steering`), the CPUs the traffic and sampling processes run
    #: on: not the link emulator's, whose frames would otherwise wait behind their system calls
    #: (a sender's write carries its segments through the bridges with bottom halves off).
    app_cpus: Optional[list[int]] = None

    def spawn(self, name: str, ns: str, argv: list[str], stdin: bool = False,
              cpus: Optional[list[int]] = None) -> Proc:
        log = self.workdir / f"{name}.log"
        fh = open(log, "w")
        pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
        p = subprocess.Popen(
            topo.nsexec(ns, *argv),
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE if stdin else fh,
            stderr=fh,
            text=True,
            start_new_session=True,
            preexec_fn=pin,
        )
        fh.close()
        proc = Proc(name, p, log)
        self.procs.append(proc)
        return proc

    def py(self, name: str, ns: str, module: str, *args: str) -> Proc:
        return self.spawn(name, ns, [sys.executable, "-m", f"cctestbed.kernel.{module}", *args], stdin=True,
                          cpus=self.app_cpus)

    def wait_ready(self, procs: list[Proc], timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        for p in procs:
            assert p.popen.stdout is not None
            while not p.ready:
                if time.monotonic() > deadline:
                    raise KernelRunError(f"{p.name} did not start in {timeout:.0f} s; see {p.log}")
                line = p.popen.stdout.readline()
                if line.strip() == "ready":
                    p.ready = True
                elif line == "" and p.popen.poll() is not None:
                    raise KernelRunError(f"{p.name} exited ({p.popen.returncode}): {self.tail(p)}")

    def tail(self, p: Proc) -> str:
        try:
            return p.log.read_text()[-2000:].strip()
        except OSError:
            return ""

    def stop_all(self) -> None:
        for p in self.procs:
            if p.popen.poll() is None:
                try:
                    p.popen.send_signal(signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 5
        for p in self.procs:
            try:
                p.popen.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.popen.kill()
                p.popen.wait()


class _Terminated(BaseException):
    pass


def _raise_terminated(signum: int, frame: Any) -> None:
    raise _Terminated()


# --- the run -------------------------------------------------------------------------------------


def run_kernel_trial(
    config: Union[str, Path, dict[str, Any], Trial],
    seed: Optional[int] = None,
    link_emulator: Optional[str] = None,
    capture: Optional[bool] = None,
    keep_workdir: bool = False,
    status: Optional[Callable[[str], None]] = None,
) -> "KernelTrialResult":
    """Run one trial on the kernel; returns a TrialResult with ``backend == "kernel"``.

    Raises :class:`KernelUnavailable` (not root, tools or features missing) and
    :class:`TrialRefused` before creating anything, :class:`KernelRunError` if the run fails.
    """
    trial = load_trial(config)
    if seed is not None:
        trial = trial.with_seed(seed)
    say = status or (lambda s: None)
    check_host()
    problems = trial_problems(trial)
    if problems:
        raise TrialRefused(problems)
    mode = choose_link_emulator(link_emulator, trial)
    if mode == "tc" and trial.link.reverse is not None:
        raise TrialRefused(["link.reverse: the tc link emulator delays the reverse path with netem at left's root, "
                            "where the reverse bottleneck's htb would go; run it with --link-emulator userspace"])
    capture = bool(trial.capture) if capture is None else capture
    if capture and shutil.which("tcpdump") is None:
        raise KernelUnavailable("capture = true needs tcpdump: run `make kernel-deps` (apt-get install tcpdump)")

    names = topo.Names(topo.new_id(), len(trial.flows))
    plans, _ = bpf_plans(trial)
    for k, plan in plans.items():
        plan.name = bpfcc.unique_name(names.id, k)
    workdir = Path(f"/tmp/cctestbed-{names.id}")
    workdir.mkdir(mode=0o755)
    # the registry names the congestion controls before they exist, so cleanup finds them by name
    reg = topo.register(names, workdir, struct_ops=[{"name": p.name, "id": None} for p in plans.values()])
    run = Run(trial, names, workdir, mode, capture)
    limit_bytes, limit_pkts = trial.link.queue_limits()
    bdp = trial.link.bdp_bytes()
    from .. import _core

    queue_bytes = int(limit_bytes or (limit_pkts or 0) * trial.mtu)
    # tcp_rmem[2] as the simulator's receivers assume it (tcp/rcvbuf.rs); tcp_wmem[2] room for
    # four times the path, at least Linux's default of 4 MB
    rmem = _core.tcp_rmem_max(int(bdp), queue_bytes)
    wmem = max(4 * (int(bdp) + queue_bytes), 4 << 20)
    topology = topo.Topology(
        names,
        trial.mtu,
        mode,
        [topo.HostSettings(initcwnd=g.initial_cwnd, quickack=not g.delayed_ack.enabled,
                           reverse=g.flow_direction == "reverse", ecn=bool(g.ecn)) for g in trial.flows],
        tcp_rmem_max=rmem,
        tcp_wmem_max=wmem,
        gro=trial.link.receiver_nic.gro,
    )
    old_term = signal.signal(signal.SIGTERM, _raise_terminated)
    old_hup = signal.signal(signal.SIGHUP, _raise_terminated)
    try:
        if plans:
            say("registering the BPF congestion controls")
            _register_bpf(plans, workdir, reg)
            run.info["bpf"] = {str(k): {"name": p.name, "object": str(p.object), "map_id": p.map_id,
                                        "values": p.values} for k, p in plans.items()}
        say("building the namespaces")
        topology.build()
        run.info["host_stack"] = topology.host_stack()
        rev_link = trial.link.reverse
        if mode == "full":
            # the emulator is the bottleneck: no qdisc on the router's interfaces
            run.info["bottleneck"] = {"emulated": True, "rate_tc_bps": None, "capacity_bps": trial.link.capacity,
                                      "qdisc": trial.link.aqm.kind if trial.link.aqm is not None else "fifo",
                                      "handle": None}
        else:
            run.info["bottleneck"] = topology.set_bottleneck(trial.link.capacity, limit_bytes, limit_pkts)
            if rev_link is not None:
                rev_bytes, rev_pkts = trial.link.reverse_queue_limits()
                run.info["reverse_bottleneck"] = topology.set_bottleneck(rev_link.capacity, rev_bytes, rev_pkts,
                                                                         dev=names.left)
        # how long the forward buffer takes to drain at the initial capacity: a host stall that
        # held frames that long released a burst the buffer cannot hold (routerstats.stall_overflow)
        run.info["bottleneck"]["buffer_drain_us"] = queue_bytes * 8e6 / trial.link.capacity if queue_bytes else None
        fwd, rev = trial.link.delays_ns
        emu_stats = None
        # Either userspace emulator at high rates: pinned to one CPU, the stacks steered to the others.
        steer = _steering(trial) if mode in ("full", "userspace") else None
        if steer:
            run.info["rx_steering"] = topology.steer_switch_receive(steer[1])
            if run.info["rx_steering"]:
                run.app_cpus = steer[1]
                run.info["rx_steering"]["app_cpus"] = steer[1]
        pin = ["--cpu", str(steer[0])] if steer and run.info.get("rx_steering") else []
        if mode == "full":
            emu_stats = str(workdir / "linkemu.stats")
            emu = run.spawn("linkemu", names.rtr, [
                find_linkemu() or "cctestbed-linkemu", "--left", names.left, "--right", names.right,
                "--model", _write(workdir / "link.json", trial.to_core()), "--port-base", str(PORT_BASE),
                "--stats", emu_stats, "--report", str(workdir / "linkemu.json"),
                *pin,
                # the router's capture points (rtr-in, rtr-out), if the trial asks for them
                *(["--capture-dir", str(workdir)] if capture else []),
            ])
        elif mode == "userspace":
            emu_stats = str(workdir / "linkemu.stats")
            emu = run.spawn("linkemu", names.rtr, [
                find_linkemu() or "cctestbed-linkemu", "--left", names.left, "--right", names.right,
                "--delay-fwd-ns", str(fwd), "--delay-rev-ns", str(rev),
                "--loss", json.dumps(trial.link.loss.to_core()), "--seed", str(trial.seed),
                "--stats", emu_stats, "--report", str(workdir / "linkemu.json"),
                "--serialization-bps", str(trial.link.capacity),
                *(["--serialization-rev-bps", str(rev_link.capacity)] if rev_link is not None else []),
                *pin,
            ])
        if emu_stats is not None:
            from .routerstats import emu_ready

            deadline = time.monotonic() + 10
            while not emu_ready(emu_stats):
                if emu.popen.poll() is not None or time.monotonic() > deadline:
                    raise KernelRunError(f"the link emulator did not start: {run.tail(emu)}")
                time.sleep(0.01)
        else:
            run.info["tc_link"] = topology.set_tc_link(fwd, rev, _netem_loss(trial))
        say("starting senders, sinks and samplers")
        interval = trial.sample_interval
        base = {"interval_ns": interval, "duration_ns": trial.duration}
        flow_ids = _flow_ids(trial)
        programs = [group_programs(trial, names, workdir, k, flow_ids[k], base,
                                   plans[k].name if k in plans else None) for k in range(len(trial.flows))]
        procs = [run.py(p.name, p.ns, p.module, p.command, _write(workdir / f"{p.name}.json", p.spec))
                 for p in [*(r for r, _ in programs), *(s for _, s in programs)]]
        rs_spec = {**base, "bottleneck_dev": names.right if mode != "full" else None,
                   "bottleneck_handle": run.info["bottleneck"]["handle"],
                   "emu_stats": emu_stats, "out": str(workdir / "router.npz"),
                   **({"rev_dev": names.left, "rev_handle": run.info["reverse_bottleneck"]["handle"]}
                      if rev_link is not None and mode != "full" else {}),
                   **({"loss_dev": run.info["tc_link"]["loss_dev"], "loss_handle": run.info["tc_link"]["loss_handle"]}
                      if mode == "tc" else {})}
        procs.append(run.py("router", names.rtr, "routerstats", _write(workdir / "router.json", rs_spec)))
        if capture:
            cap = trial.capture_config
            points = set(cap.points) if cap is not None else {"senders", "receivers"}
            snaplen = str(cap.snaplen if cap is not None else 128)
            for k in range(len(trial.flows)):
                for role, ns in (("snd", names.snd(k)), ("rcv", names.rcv(k))):
                    if {"snd": "senders", "rcv": "receivers"}[role] not in points:
                        continue
                    # --immediate-mode: packets reach tcpdump one by one; in blocks, the last
                    # block (up to a second of the trial's tail) is lost when tcpdump is stopped
                    run.spawn(f"tcpdump-{role}{k}", ns, ["tcpdump", "-i", names.host_if(k), "-n", "-s", snaplen,
                                                          "--immediate-mode", "-U",
                                                          "-w", str(workdir / f"{role}{k}.pcap")])
        run.wait_ready(procs)
        if capture:
            time.sleep(0.5)  # tcpdump has no ready signal; give it time to open the interface
        counters_at_start = topology.tcp_counters()
        t0 = time.monotonic_ns() + 200_000_000
        if emu_stats is not None:
            from .routerstats import EmuStats

            # the full emulator's model runs on trial time: a delay schedule, a trace and the
            # disciplines' timers line up with the simulator's; either emulator reports its
            # stalls on it
            EmuStats(emu_stats, writable=True).set_epoch(t0)
        for p in procs:
            assert p.popen.stdin is not None
            p.popen.stdin.write(f"{t0}\n")
            p.popen.stdin.close()
        sched = _CapacitySchedule(topology, trial, t0, emu_stats, qdisc=mode != "full")
        sched.start()
        steal_at_start = host_cpu_steal_ms()
        say(f"running for {trial.duration / 1e9:g} s ({mode} link emulator)")
        end = t0 + trial.duration
        # the hosts' TCP counters at the steady window's edges, read as the loop passes them
        # (an edge at the trial's end is the final read)
        steady = dict(zip(("start", "end"), trial.steady_ns))
        at_edge: dict[str, tuple[int, Any]] = {"start": (0, counters_at_start)} if steady["start"] == 0 else {}
        while time.monotonic_ns() < end + 3_000_000_000:
            time.sleep(0.1)
            now = time.monotonic_ns()
            for edge, at in steady.items():
                if edge not in at_edge and at < trial.duration and now >= t0 + at:
                    at_edge[edge] = (now - t0, topology.tcp_counters())
            dead = [p for p in run.procs if p.popen.poll() is not None and p.popen.returncode != 0]
            if dead:
                raise KernelRunError(f"{dead[0].name} failed ({dead[0].popen.returncode}): {run.tail(dead[0])}")
            if time.monotonic_ns() > end and all(p.popen.poll() is not None for p in procs):
                break
        sched.stop()
        counters_at_end = topology.tcp_counters()
        at_edge.setdefault("end", (time.monotonic_ns() - t0, counters_at_end))
        edges = [at_edge.get(e) for e in ("start", "end")]
        run.info["tcp_counters"] = {
            "note": "each host's Tcp and TcpExt counters (/proc/net/snmp, /proc/net/netstat) gained over the "
                    "trial (read before the flows connect and after they close) and over the steady window "
                    "(read as the run passed its edges, at steady_read_s after the start); snd<k> and rcv<k> "
                    "are group k's hosts (a reverse group's data leaves rcv<k>); null where a read failed",
            "trial": topo.counter_deltas(counters_at_start, counters_at_end),
            "steady": topo.counter_deltas(edges[0][1], edges[1][1]) if edges[0] and edges[1] else None,
            "steady_read_s": [round(e[0] / 1e9, 3) if e else None for e in edges],
        }
        run.info["host_cpu_steal_ms"] = host_cpu_steal_ms() - steal_at_start
        unfinished = [p.name for p in procs if p.popen.poll() is None]
        if unfinished:
            raise KernelRunError(f"did not finish: {', '.join(unfinished)}")
        run.stop_all()
        say("collecting results")
        result = _collect(run, topology)
        return result
    except _Terminated:
        raise KeyboardInterrupt("terminated") from None
    finally:
        # Cleanup must not be cut short by a second Ctrl-C or SIGTERM.
        old_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            run.stop_all()
            topology.teardown()
            for plan in plans.values():
                if plan.map_id is not None:
                    bpfcc.unregister(plan.map_id, plan.name)
            if not keep_workdir:
                shutil.rmtree(workdir, ignore_errors=True)
            reg.unlink(missing_ok=True)
        finally:
            signal.signal(signal.SIGINT, old_int)
            signal.signal(signal.SIGTERM, old_term)
            signal.signal(signal.SIGHUP, old_hup)


def host_cpu_steal_ms() -> float:
    """CPU time the hypervisor took from this machine's CPUs so far (/proc/stat's steal column,
    all CPUs), in ms. Kept per trial because a stolen CPU stalls the link emulator, the qdiscs and
    the stacks at once: the trial then ran on a slower, burstier path than it describes."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
        return int(fields[8]) * 1000 / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def datagram_flows(trial: Trial, g: Any, ids: list[int]) -> list[dict[str, Any]]:
    """A udp or ping group's flows as its sender takes them: each flow's index, start and the
    core's ``traffic``, from which the sender builds the simulator's own schedule."""
    specs = trial.flow_list()
    return [{"flow": f, "start_ns": specs[f].start_ns, "traffic": g.traffic_core(trial.mtu)} for f in ids]


@dataclass
class Program:
    """One process of a flow group: its name (and that of its files), namespace, module
    (``cctestbed.kernel.<module>``), command and spec."""

    name: str
    ns: str
    module: str
    command: str
    spec: dict[str, Any]


def group_programs(trial: Trial, names: topo.Names, workdir: Path, k: int, ids: list[int], base: dict[str, Any],
                   bpf_name: Optional[str] = None) -> tuple[Program, Program]:
    """Group ``k``'s receiver and sender: a tcp group's sink and sender (:mod:`.traffic`, the
    sender's congestion control the kernel's or the registered BPF one, ``bpf_name``), a udp
    group's ``udp-sink`` and ``udp-send``, a ping group's ``echo`` and ``ping``
    (:mod:`.datagrams`). Their samples go to ``sink<k>.npz`` and ``send<k>.npz``."""
    g = trial.flows[k]
    specs = trial.flow_list()
    send_ns, send_ip, sink_ns, sink_ip = _hosts(names, k, g)
    common = {**base, "port": PORT, "port_base": PORT_BASE}
    rcv = {**common, "addr": sink_ip, "out": str(workdir / f"sink{k}.npz")}
    snd = {**common, "src": send_ip, "dst": sink_ip, "out": str(workdir / f"send{k}.npz")}
    if g.flow_kind == "tcp":
        assert g.cc is not None
        cc_name = bpf_name or kernel_cc(g.cc)
        # With ECN the receiver's algorithm decides how CE marks are echoed (an algorithm that
        # wants CE events, as DCTCP, echoes each packet's mark from its cwnd_event,
        # tcp_ecn_check_ce), so the sink runs the group's algorithm, as both ends of a DCTCP
        # path do; the simulator's receiver echoes by the flow's algorithm likewise.
        rcv.update(cc=cc_name if g.ecn else None,
                   rwnd={str(f): g.rwnd for f in ids} if g.rwnd else {},
                   sizes={str(f): specs[f].size for f in ids if specs[f].size is not None},
                   workload=ids if g.arrivals is not None else [], read_interval_ns=g.read_interval)
        snd["flows"] = [{"flow": f, "cc": cc_name, "start_ns": specs[f].start_ns, "size": specs[f].size,
                         "pacing": g.pacing, "workload": g.arrivals is not None,
                         "max_pacing_rate": None if g.max_pacing_rate is None else g.max_pacing_rate // 8}
                        for f in ids]
        module, recv, send = "traffic", "sink", "send"
    else:
        snd["seed"] = trial.seed
        snd["flows"] = datagram_flows(trial, g, ids)
        module = "datagrams"
        recv, send = ("udp-sink", "udp-send") if g.flow_kind == "udp" else ("echo", "ping")
    return Program(f"sink{k}", sink_ns, module, recv, rcv), Program(f"send{k}", send_ns, module, send, snd)


def _hosts(names: topo.Names, k: int, g: Any) -> tuple[str, str, str, str]:
    """Group ``k``'s sending and receiving hosts: (sender's namespace, its address, sink's
    namespace, its address). A reverse group sends from the right-hand host (``rcv<k>``)."""
    src, dst = ("rcv", "snd") if g.flow_direction == "reverse" else ("snd", "rcv")
    ns = {"snd": names.snd(k), "rcv": names.rcv(k)}
    return ns[src], names.ip(src, k), ns[dst], names.ip(dst, k)


def _register_bpf(plans: dict[int, BpfPlan], workdir: Path, reg: Path) -> None:
    """Registers each group's BPF congestion control under its own name, recording each map id
    in the registry as soon as the kernel has it."""
    for k, p in plans.items():
        obj = p.chosen or bpfcc.inspect(p.object)
        patched = workdir / f"cc{k}.bpf.o"
        patched.write_bytes(bpfcc.build(obj, p.name, p.values))
        try:
            p.map_id = bpfcc.register(patched, nameless=len(obj.unchosen))
        except bpfcc.BpfError as e:
            raise KernelRunError(f"flows[{k}].cc: {e}") from None
        topo.update_registry(reg, struct_ops=[{"name": q.name, "id": q.map_id} for q in plans.values()])


def _write(path: Path, spec: dict[str, Any]) -> str:
    path.write_text(json.dumps(spec))
    return str(path)


def _flow_ids(trial: Trial) -> list[list[int]]:
    out: list[list[int]] = [[] for _ in trial.flows]
    for fid, (gi, _, _) in enumerate(trial.expanded()):
        out[gi].append(fid)
    return out


def _netem_loss(trial: Trial) -> Optional[str]:
    loss = trial.link.loss
    if loss.model == "bernoulli":
        return f"loss random {100 * (loss.p or 0):.6f}%"
    if loss.model == "gilbert-elliott":
        lg = 0.0 if loss.loss_good is None else loss.loss_good
        lb = 1.0 if loss.loss_bad is None else loss.loss_bad
        return (f"loss gemodel {100 * (loss.p or 0):.6f}% {100 * (loss.r or 0):.6f}% "
                f"{100 * lb:.6f}% {100 * lg:.6f}%")
    return None


class _CapacitySchedule(threading.Thread):
    """Changes the bottleneck rate at the trial's scheduled times: the htb class's (``qdisc``)
    and the rate the userspace link emulator shifts forward frames by (``emu_stats``), or, with
    the ``full`` emulator, its bottleneck's own rate."""

    def __init__(self, topology: topo.Topology, trial: Trial, t0: int, emu_stats: Optional[str], qdisc: bool = True):
        super().__init__(daemon=True)
        self.topology, self.trial, self.t0, self.emu_stats, self.qdisc = topology, trial, t0, emu_stats, qdisc
        self.done = threading.Event()
        self.error: Optional[str] = None

    def run(self) -> None:
        from .routerstats import EmuStats

        emu = None
        for c in sorted(self.trial.link.schedule, key=lambda c: c.at):
            wait = (self.t0 + c.at - time.monotonic_ns()) / 1e9
            if wait > 0 and self.done.wait(wait):
                return
            try:
                if self.qdisc:
                    self.topology.set_bottleneck(c.capacity, None, None, change=True)
                if self.emu_stats is not None:
                    emu = emu or EmuStats(self.emu_stats, writable=True)
                    emu.set_serialization(c.capacity)
            except (topo.TopologyError, OSError) as e:
                self.error = str(e)

    def stop(self) -> None:
        self.done.set()


# --- results -------------------------------------------------------------------------------------


@dataclass
class KernelTrialResult(TrialResult):
    """A TrialResult whose directory also keeps the kernel run's own files."""

    extra: dict[str, Any] = field(default_factory=dict)

    def write_files(self, tmp: Path, plot: bool = False, series: bool = True) -> None:
        super().write_files(tmp, plot=plot, series=series)
        (tmp / "kernel.json").write_text(json.dumps(self.extra, indent=2, default=str) + "\n", encoding="utf-8")


def _collect(run: Run, topology: topo.Topology) -> KernelTrialResult:
    trial, wd = run.trial, run.workdir
    raw = RawRun.load(wd, len(trial.flows))
    extra: dict[str, Any] = {
        "backend": BACKEND,
        "kernel": os.uname().release,
        "link_emulator": run.mode,
        "available_congestion_control": topo.available_algorithms(),
        "trial_id": run.names.id,
        "conversion": {
            "capacity_bps": trial.link.capacity,
            "tc_rate_bps": run.info["bottleneck"]["rate_tc_bps"],
            "note": "tc counts Ethernet frames: rate_tc = capacity x (mtu + 14) / mtu; "
                    "bfifo limit = queue limit x (mtu + 14) / mtu",
        },
        "bottleneck": run.info.get("bottleneck"),
        "host_cpu_steal_ms": run.info.get("host_cpu_steal_ms"),
        "bpf": run.info.get("bpf", {}),
        "host_stack": run.info.get("host_stack"),
        "rx_steering": run.info.get("rx_steering"),
        "senders": raw.senders,
        "sink_reads": application_reads(trial, raw.sink),
        "tcp_counters": run.info.get("tcp_counters"),
    }
    files: dict[str, bytes] = {}
    emu = wd / "linkemu.json"
    if emu.exists():
        extra["linkemu"] = json.loads(emu.read_text())
    for pcap in sorted(wd.glob("*.pcap")):
        files[pcap.name] = pcap.read_bytes()
    errors = {i: e for i, s in raw.senders.items() for e in [s.get("errors")] if e}
    if errors:
        raise KernelRunError(f"flows failed: {errors}")
    flows, rframe, fct = kernel_tables(trial, raw, run.mode, run.info["bottleneck"])
    summary = summarize(flows, rframe, TrialInfo.from_trial(trial, backend=BACKEND), fct)
    return KernelTrialResult(trial, flows, rframe, summary, None, BACKEND, extra=extra, files=files,
                             completions=fct if len(fct) else None)
