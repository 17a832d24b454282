"""Running a trial on real Linux TCP: checks, the run itself, and the result frames.

:func:`run_kernel_trial` takes the same trial as the simulator and returns the same
:class:`~cctestbed.results.TrialResult`, with ``backend = "kernel"``. Before anything is
created it checks that it runs as root, that the tools it needs exist, that the kernel has
every algorithm the trial names, and that the trial uses nothing the kernel backend cannot
reproduce (each refused with the reason). Then it builds the topology
(:mod:`.topology`), starts the link emulator, the sinks, the senders and the router sampler
in their namespaces, releases them all at one start time, waits for the trial's duration,
and turns their samples into ``flows.parquet`` / ``router.parquet`` rows shaped exactly like
the simulator's (same columns and types, plus ``backend``).

What the kernel cannot measure is left null (tcp flows' ``lost_segs``, ``departed_payload_bytes``, the
algorithms' internal counters other than BBR's ``TCP_CC_INFO`` fields). Two columns differ
in meaning and are documented as such: ``rtt_ms`` is the kernel's smoothed RTT (``tcpi_rtt``)
read at the sample time, as the kernel exposes no per-ACK RTT samples (so it equals
``srtt_ms``); rates (``goodput_bps``, ``send_rate_bps``) divide by the measured time between
two readings rather than the nominal interval.

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

import numpy as np
import polars as pl

from ..config import Trial, load_trial
from ..results import TrialResult
from ..summary import TrialInfo, summarize
from . import bpfcc
from . import topology as topo

BACKEND = "kernel"
PORT = 5201
PORT_BASE = 20000
MAX_PORT = 65535


class KernelUnavailable(RuntimeError):
    """The kernel backend cannot run here (not root, missing tools or kernel features)."""


class TrialRefused(ValueError):
    """The trial asks for something the kernel backend cannot do; ``problems`` lists each."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("; ".join(problems))


class KernelRunError(RuntimeError):
    """The run started but failed."""


#: Trial algorithm names that map to another kernel module name.
KERNEL_NAMES = {"bbr1": "bbr"}


def kernel_cc(name: str) -> str:
    return KERNEL_NAMES.get(name, name)


# --- checks -------------------------------------------------------------------------------------


def find_linkemu() -> Optional[str]:
    """The link emulator binary: $CCTESTBED_LINKEMU, the workspace's target/, or $PATH."""
    env = os.environ.get("CCTESTBED_LINKEMU")
    if env:
        return env if os.access(env, os.X_OK) else None
    root = Path(__file__).resolve().parents[3]
    for profile in ("release", "debug"):
        p = root / "target" / profile / "cctestbed-linkemu"
        if os.access(p, os.X_OK):
            return str(p)
    return shutil.which("cctestbed-linkemu")


def check_host() -> None:
    """Root, the tools, network namespaces. Raises KernelUnavailable saying what to do."""
    if os.geteuid() != 0:
        raise KernelUnavailable(
            "the kernel backend requires root (it creates network namespaces and qdiscs): run with sudo, "
            f"e.g. sudo {Path(sys.executable).parent / 'cctestbed'} run TRIAL --backend kernel"
        )
    missing = [t for t in ("ip", "tc", "ethtool", "sysctl") if shutil.which(t) is None]
    if missing:
        raise KernelUnavailable(
            f"missing tools: {', '.join(missing)}; install them with `make kernel-deps` "
            "(apt-get install iproute2 ethtool procps)"
        )
    if not Path("/proc/self/ns/net").exists():
        raise KernelUnavailable("this kernel has no network namespaces")


#: The link emulators: the kernel's netem (``tc``), the userspace delay lines in front of the
#: kernel's htb + fifo bottleneck (``userspace``), and the userspace emulator running the whole
#: link on the simulator's own bottleneck and queue disciplines (``full``).
LINK_EMULATORS = ("tc", "userspace", "full")


def full_link_needs(trial: Optional[Trial]) -> list[str]:
    """What in the trial only the ``full`` link emulator reproduces (htb + a fifo cannot), one
    item each; empty when any emulator will do."""
    if trial is None:
        return []
    needs = []
    if trial.link.aqm is not None:
        needs.append(f"link.aqm ({trial.link.aqm.kind})")
    needs += [f"link.{name}" for name in ("shaper", "policer") if getattr(trial.link, name) is not None]
    rev = trial.link.reverse
    if rev is not None and rev.aqm is not None:
        needs.append(f"link.reverse.aqm ({rev.aqm.kind})")
    if rev is not None and rev.loss.model != "none":
        needs.append("link.reverse.loss")
    if any(g.extra_delay for g in trial.flows):
        needs.append("flows[].extra_delay")
    cap = trial.capture_config
    router_points = sorted(set(cap.points) & {"ingress", "egress"}) if cap is not None else []
    if router_points:
        needs.append(f"capture.points ({', '.join(router_points)}: the router's captures)")
    if trial.link.trace is not None:
        needs.append("link.trace")
    if trial.link.delay_schedule:
        needs.append("link.delay_schedule")
    if trial.link.ack_aggregation is not None:
        needs.append("link.ack_aggregation")
    return needs


def choose_link_emulator(requested: Optional[str], trial: Optional[Trial] = None) -> str:
    """``full`` where the trial needs it (:func:`full_link_needs`), else ``tc`` where the kernel
    has netem and ifb, else ``userspace``; ``requested`` overrides."""
    if requested not in (None, *LINK_EMULATORS):
        raise KernelUnavailable(f"--link-emulator {requested}: valid are {', '.join(LINK_EMULATORS)}")
    needs = full_link_needs(trial)
    if requested in ("tc", "userspace") and needs:
        raise KernelUnavailable(
            f"--link-emulator {requested}: {', '.join(needs)} runs only on the simulator's link model: "
            "use --link-emulator full (the default for this trial)"
        )
    caps = topo.probe_qdiscs()
    if requested == "tc" and not (caps.get("netem") and caps.get("ifb")):
        lacking = [k for k in ("netem", "ifb") if not caps.get(k)]
        raise KernelUnavailable(
            f"--link-emulator tc: this kernel lacks {' and '.join(lacking)}; use --link-emulator userspace or full"
        )
    if requested is not None:
        mode = requested
    elif needs:
        mode = "full"
    else:
        mode = "tc" if caps.get("netem") and caps.get("ifb") else "userspace"
    if mode in ("userspace", "full") and find_linkemu() is None:
        raise KernelUnavailable(
            "the userspace link emulator is not built: run `make build` "
            "(or cargo build --release -p cctestbed-linkemu), or set CCTESTBED_LINKEMU"
        )
    return mode


@dataclass
class BpfPlan:
    """One flow group's BPF congestion control: which object, with which read-only values."""

    group: int
    object: Path
    values: dict[str, int]
    name: str = ""
    map_id: Optional[int] = None


def bpf_plans(trial: Trial) -> tuple[dict[int, BpfPlan], list[str]]:
    """The flow groups that run a BPF congestion control (``bpf:`` objects, and the thesis'
    BBR variants or ``bbr`` with params as the BPF port of BBR), and what is wrong with them."""
    plans: dict[int, BpfPlan] = {}
    problems: list[str] = []
    support: Optional[str] = None
    checked = False
    for i, g in enumerate(trial.flows):
        if g.cc is None:  # a udp or ping group
            continue
        is_user = g.cc.startswith(bpfcc.BPF_PREFIX)
        if not is_user and not bpfcc.uses_bbr_port(g.cc, g.params):
            continue
        if not checked:
            support, checked = bpfcc.kernel_support(), True
        if support is not None:
            problems.append(f"flows[{i}].cc: {g.cc!r}: runs as a BPF congestion control, but {support}")
            continue
        if is_user:
            plan, bad = bpfcc.user_object(g.cc, g.params, i)
            if plan is None:
                problems += bad
                continue
            path, values = plan[0].path, plan[1]
        else:
            path = bpfcc.resolve_object(bpfcc.BBR_OBJECT)
            if not path.exists():
                problems.append(
                    f"flows[{i}].cc: {g.cc!r}: runs as the BPF port of BBR, which is not built ({path} is missing): "
                    "run `make build` (it needs clang, bpftool and libbpf-dev: `make kernel-deps`)"
                )
                continue
            values, bad = bpfcc.bbr_values(g.cc, g.params, f"flows[{i}].params")
        problems += bad
        plans[i] = BpfPlan(i, path, values)
    return plans, problems


#: From this forward rate the ``full`` link emulator is pinned to one CPU and the switches'
#: receive processing is steered to the others (:func:`_steering`). Set by CCTESTBED_RX_STEERING_BPS
#: (0: always; a huge value: never).
RX_STEERING_BPS = int(os.environ.get("CCTESTBED_RX_STEERING_BPS", 250_000_000))


def _steering(trial: Trial) -> Optional[tuple[int, list[int]]]:
    """(the emulator's CPU, the CPUs that process what it sends) at high rates on a host with more
    than one CPU, else None. Without it, every frame the emulator writes is carried through the
    bridge and the receiving host's TCP (and the ACK or data that TCP sends back) inside the
    emulator's own send call, on its CPU: at 1 Gbit/s that CPU runs the stacks of both ends."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2 or trial.link.capacity < RX_STEERING_BPS:
        return None
    return cpus[0], cpus[1:]


def trial_problems(trial: Trial) -> list[str]:
    """What in the trial the kernel backend cannot reproduce, one reason each."""
    problems = []
    available = topo.available_algorithms()
    plans, bpf_problems = bpf_plans(trial)
    problems += bpf_problems
    for i, g in enumerate(trial.flows):
        if g.flow_kind != "tcp":
            problems += datagram_problems(i, g, trial)
            continue
        assert g.cc is not None
        name = kernel_cc(g.cc)
        bpf = i in plans or g.cc.startswith(bpfcc.BPF_PREFIX)
        if not bpf and not topo.load_algorithm(name):
            problems.append(
                f"flows[{i}].cc: {g.cc!r}: this kernel has no such congestion control; "
                f"available are {', '.join(available) or 'none'} (and, through BPF, "
                f"{', '.join(bpfcc.BBR_VARIANTS)}, bbr with params, bpf:OBJECT)"
            )
        if g.params and not bpf:
            problems.append(
                f"flows[{i}].params: the kernel's built-in {name} takes no per-flow parameters "
                "(BBR with params runs as the BPF port of BBR; other algorithms only as bpf:OBJECT)"
            )
        if g.pacing is False and name.startswith("bbr"):
            problems.append(f"flows[{i}].pacing: false: the kernel's BBR always paces")
        d = g.delayed_ack
        if d.enabled and (d.timeout != 40_000_000 or d.segments_per_ack != 2 or d.quickacks != 16):
            problems.append(
                f"flows[{i}].delayed_ack: the kernel's delayed ACKs are fixed (40 ms, every 2 segments, "
                "16 quick ACKs); only delayed_ack = false (quick ACKs) can be set"
            )
    cap = trial.capture_config
    if cap is not None and cap.format != "pcap":
        problems.append(f"capture.format: {cap.format!r}: the kernel backend's tcpdump writes pcap")
    link = trial.link
    if link.access_rate is not None:
        problems.append("link.access_rate: the kernel backend's hosts send at veth speed; the link emulator does "
                        "not serialise each sender's access link yet")
    problems += aqm_problems(trial)
    n = len(trial.flow_list())
    if n > MAX_PORT - PORT_BASE:
        problems.append(f"flows: {n:,} flows in all: the kernel backend gives each its own source port from "
                        f"{PORT_BASE}, so at most {MAX_PORT - PORT_BASE:,} fit; give a lower arrival rate or a shorter "
                        "duration")
    return problems


#: Datagrams per second one Python sender keeps on their schedule (kernel/datagrams.py).
MAX_DATAGRAMS_PER_S = 20_000


def datagram_problems(i: int, g: Any, trial: Trial) -> list[str]:
    """Why a udp or ping group cannot run here: more datagrams per second than its one sender
    process keeps on schedule."""
    problems = []
    size = g.datagram_size(trial.mtu)
    per_s = g.count * (g.rate / (8 * size) if g.flow_kind == "udp" else 1e9 / (g.interval or 10_000_000))
    if per_s > MAX_DATAGRAMS_PER_S:
        problems.append(
            f"flows[{i}]: {per_s:,.0f} datagrams/s in the group: the kernel backend's sender keeps at most "
            f"{MAX_DATAGRAMS_PER_S:,} per group on schedule; use larger packets, fewer flows or a lower rate"
        )
    return problems


def aqm_problems(trial: Trial) -> list[str]:
    """Why the trial's AQM and ECN settings cannot run on the kernel backend. Every AQM runs on
    the ``full`` link emulator (the simulator's own queue disciplines) whether or not the kernel
    has the qdisc, and ``ecn = true`` sets ``net.ipv4.tcp_ecn`` on the group's hosts; ``ecn =
    "l4s"`` is refused: the kernel's TCP sends ECT(1) only with AccECN and an L4S congestion
    control (TCP Prague), which the kernel backend does not set up."""
    problems = []
    l4s = [i for i, g in enumerate(trial.flows) if g.ecn == "l4s"]
    if l4s:
        problems.append(
            f"flows[{l4s[0]}].ecn: 'l4s': the kernel's TCP with net.ipv4.tcp_ecn = 1 sends ECT(0), not the L4S "
            "identifier ECT(1) (that needs AccECN and TCP Prague); run it on the simulator"
        )
    return problems


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
    mem = int(4 * (bdp + (limit_bytes or (limit_pkts or 0) * trial.mtu)))
    topology = topo.Topology(
        names,
        trial.mtu,
        mode,
        [topo.HostSettings(initcwnd=g.initial_cwnd, quickack=not g.delayed_ack.enabled,
                           reverse=g.flow_direction == "reverse", ecn=bool(g.ecn)) for g in trial.flows],
        tcp_mem_max=mem,
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
        fwd, rev = trial.link.delays_ns
        emu_stats = None
        if mode == "full":
            emu_stats = str(workdir / "linkemu.stats")
            steer = _steering(trial)
            if steer:
                run.info["rx_steering"] = topology.steer_switch_receive(steer[1])
                if run.info["rx_steering"]:
                    run.app_cpus = steer[1]
                    run.info["rx_steering"]["app_cpus"] = steer[1]
            emu = run.spawn("linkemu", names.rtr, [
                find_linkemu() or "cctestbed-linkemu", "--left", names.left, "--right", names.right,
                "--model", _write(workdir / "link.json", trial.to_core()), "--port-base", str(PORT_BASE),
                "--stats", emu_stats, "--report", str(workdir / "linkemu.json"),
                *(["--cpu", str(steer[0])] if steer and run.info.get("rx_steering") else []),
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
        procs = []
        flow_ids = _flow_ids(trial)
        for k, g in enumerate(trial.flows):
            if g.flow_kind != "tcp":
                procs += _datagram_procs(run, k, g, flow_ids[k], base)
                continue
            rw = {str(f): g.rwnd for f in flow_ids[k]} if g.rwnd else {}
            _, _, sink_ns, sink_ip = _hosts(names, k, g)
            specs = trial.flow_list()
            sink_spec = {**base, "addr": sink_ip, "port": PORT, "port_base": PORT_BASE, "rwnd": rw,
                         "sizes": {str(f): specs[f].size for f in flow_ids[k] if specs[f].size is not None},
                         "workload": flow_ids[k] if g.arrivals is not None else [],
                         "out": str(workdir / f"sink{k}.npz")}
            procs.append(run.py(f"sink{k}", sink_ns, "traffic", "sink", _write(workdir / f"sink{k}.json", sink_spec)))
        for k, g in enumerate(trial.flows):
            if g.flow_kind != "tcp":
                continue
            assert g.cc is not None
            cc_name = plans[k].name if k in plans else kernel_cc(g.cc)
            specs = trial.flow_list()
            flows = [{"flow": f, "cc": cc_name, "start_ns": specs[f].start_ns, "size": specs[f].size,
                      "pacing": g.pacing, "workload": g.arrivals is not None,
                      "max_pacing_rate": None if g.max_pacing_rate is None else g.max_pacing_rate // 8}
                     for f in flow_ids[k]]
            send_ns, send_ip, _, sink_ip = _hosts(names, k, g)
            snd_spec = {**base, "src": send_ip, "dst": sink_ip, "port": PORT,
                        "port_base": PORT_BASE, "flows": flows, "out": str(workdir / f"send{k}.npz")}
            procs.append(run.py(f"send{k}", send_ns, "traffic", "send", _write(workdir / f"send{k}.json", snd_spec)))
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
        t0 = time.monotonic_ns() + 200_000_000
        if mode == "full" and emu_stats is not None:
            from .routerstats import EmuStats

            # the model runs on trial time: a delay schedule, a trace and the disciplines'
            # timers line up with the simulator's
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
        while time.monotonic_ns() < end + 3_000_000_000:
            time.sleep(0.1)
            dead = [p for p in run.procs if p.popen.poll() is not None and p.popen.returncode != 0]
            if dead:
                raise KernelRunError(f"{dead[0].name} failed ({dead[0].popen.returncode}): {run.tail(dead[0])}")
            if time.monotonic_ns() > end and all(p.popen.poll() is not None for p in procs):
                break
        sched.stop()
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


def _datagram_procs(run: Run, k: int, g: Any, ids: list[int], base: dict[str, Any]) -> list[Proc]:
    """A udp or ping group's receiver (``udp-sink``, ``echo``) and sender (``udp-send``,
    ``ping``), from :mod:`.datagrams`; their files are named as a TCP group's."""
    names, wd, trial = run.names, run.workdir, run.trial
    flows = datagram_flows(trial, g, ids)
    recv, send = ("udp-sink", "udp-send") if g.flow_kind == "udp" else ("echo", "ping")
    send_ns, send_ip, sink_ns, sink_ip = _hosts(names, k, g)
    rcv_spec = {**base, "addr": sink_ip, "port": PORT, "port_base": PORT_BASE, "out": str(wd / f"sink{k}.npz")}
    snd_spec = {**base, "src": send_ip, "dst": sink_ip, "port": PORT, "port_base": PORT_BASE,
                "seed": trial.seed, "flows": flows, "out": str(wd / f"send{k}.npz")}
    return [
        run.py(f"sink{k}", sink_ns, "datagrams", recv, _write(wd / f"sink{k}.json", rcv_spec)),
        run.py(f"send{k}", send_ns, "datagrams", send, _write(wd / f"send{k}.json", snd_spec)),
    ]


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
        obj = bpfcc.inspect(p.object)
        patched = workdir / f"cc{k}.bpf.o"
        patched.write_bytes(bpfcc.build(obj, p.name, p.values))
        try:
            p.map_id = bpfcc.register(patched)
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


def _npz(path: Path) -> dict[str, np.ndarray]:
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def sim_schema(trial: Trial) -> tuple[dict[str, pl.DataType], dict[str, pl.DataType]]:
    """The flows/router column types of this trial's results, the simulator's and every
    backend's (:mod:`cctestbed.schema`)."""
    from ..schema import flow_schema, router_schema

    return flow_schema(trial), router_schema()


def _bbr_state(pacing_gain: float, cwnd_gain: float) -> str:
    """BBRv1's mode from the gains it reports (tcp_bbr.c sets them per mode)."""
    if cwnd_gain > 2.5:
        return "STARTUP" if pacing_gain > 2.5 else "DRAIN"
    if abs(cwnd_gain - 1.0) < 0.01:
        return "PROBE_RTT"
    return "PROBE_BW"


CA_STATES = ("open", "disorder", "cwr", "recovery", "loss")


def build_flows(trial: Trial, send: list[dict[str, np.ndarray]], sink: list[dict[str, np.ndarray]],
                schema: dict[str, pl.DataType]) -> pl.DataFrame:
    """flows.parquet from the senders' and sinks' samples: a row per flow per tick, except a
    workload's flows, which have rows only from the first tick their sender or sink sampled them
    to the last (while open), as in the simulator."""
    n_ticks = trial.duration // trial.sample_interval
    expanded = trial.expanded()
    workload = np.array([gr.arrivals is not None for _, gr, _ in expanded], dtype=bool)
    blocks = []
    dense = np.flatnonzero(~workload)
    if len(dense):
        blocks.append(_flow_block(trial, send, sink, schema, dense, np.ones(len(dense), dtype=int),
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
            blocks.append(_flow_block(trial, send, sink, schema, ids, first[ids], last[ids] - first[ids] + 1))
    df = pl.concat(blocks) if blocks else pl.DataFrame(schema=schema)
    # rows ordered by time then flow, as the simulator writes them
    return df.sort(["time_s", "flow"], maintain_order=True)


def _flow_block(trial: Trial, send: list[dict[str, np.ndarray]], sink: list[dict[str, np.ndarray]],
                schema: dict[str, pl.DataType], ids: np.ndarray, first: np.ndarray, count: np.ndarray) -> pl.DataFrame:
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

    def grid(src: list[dict[str, np.ndarray]], col: str, fill: float) -> np.ndarray:
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

    def times(src: list[dict[str, np.ndarray]]) -> np.ndarray:
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
    n_rows = int(keep.sum())
    per_row = np.repeat(np.arange(n_flows), width)[keep]
    series = []
    for name, dtype in schema.items():
        if name == "backend":
            series.append(pl.Series(name, [BACKEND] * n_rows, dtype=dtype))
            continue
        if name in ("cc", "group", "kind", "direction"):
            vals = [{"cc": gr.algorithm, "group": gr.label, "kind": gr.flow_kind, "direction": gr.flow_direction}[name]
                    for _, gr, _ in expanded]
            series.append(pl.Series(name, [vals[r] for r in per_row], dtype=dtype))
            continue
        v = cols.get(name, cc_cols.get(name))
        if v is None:
            series.append(pl.Series(name, [None] * n_rows, dtype=dtype))
            continue
        flat = np.asarray(v).reshape(-1)[keep]
        if flat.dtype == object:
            series.append(pl.Series(name, flat.tolist(), dtype=dtype))
        else:
            s = pl.Series(name, flat.astype(float))
            if dtype.is_integer():
                s = s.fill_nan(None).cast(dtype, strict=False)
            else:
                s = s.cast(dtype)
            series.append(s)
    return pl.DataFrame(series)


def _router_frame(schema: Any, cols: dict[str, Any], n: int) -> pl.DataFrame:
    """The router table in the results schema from named columns of ``n`` samples: a column
    not given is null, NaN becomes null in integer columns, and ``backend`` names this one."""
    series = []
    for name, dtype in schema.items():
        if name == "backend":
            series.append(pl.Series(name, [BACKEND] * n, dtype=dtype))
            continue
        v = cols.get(name)
        if v is None:
            series.append(pl.Series(name, [None] * n, dtype=dtype))
            continue
        s = pl.Series(name, np.asarray(v, dtype=float))
        series.append(s.fill_nan(None).cast(dtype, strict=False) if dtype.is_integer() else s.cast(dtype))
    return pl.DataFrame(series)


def build_router(trial: Trial, r: dict[str, np.ndarray], mode: str, schema: dict[str, pl.DataType]) -> pl.DataFrame:
    dt = trial.sample_interval
    n_ticks = trial.duration // dt
    tick = r["tick"].astype(int)
    base = {k: (v[tick == 0][0] if np.any(tick == 0) else 0) for k, v in r.items()}
    keep = (tick >= 1) & (tick <= n_ticks)
    col = {k: v[keep].astype(float) for k, v in r.items()}
    n = int(keep.sum())

    def counter(k: str) -> np.ndarray:
        return col[k] - float(base[k])

    eth = topo.ETH_HEADER
    steps = trial.capacity_schedule()
    t_s = col["tick"] * dt / 1e9
    cap = np.array([[bps for start, bps in steps if start <= t + 1e-12][-1] for t in t_s], dtype=float)
    if mode == "full":
        return _model_router(trial, col, counter, cap, t_s, n, schema)
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
    return _router_frame(schema, cols, n)


def _model_router(trial: Trial, col: dict[str, np.ndarray], counter: Callable[[str], np.ndarray], cap: np.ndarray,
                  t_s: np.ndarray, n: int, schema: dict[str, pl.DataType]) -> pl.DataFrame:
    """router.parquet from the ``full`` link emulator's own bottlenecks (the simulator's code,
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
            zero = np.zeros(n)
            cols.update({c: zero for c in ("rev_queue_bytes", "rev_queue_pkts", "rev_capacity_bps", "rev_arrivals_pkts",
                                           "rev_departed_bytes", "rev_departed_payload_bytes", "rev_drops_overflow",
                                           "rev_drops_random", "rev_drops_policer", "rev_drops_aqm")})
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
    return _router_frame(schema, cols, n)


def reverse_router_columns(trial: Trial, col: dict[str, np.ndarray], counter: Callable[[str], np.ndarray],
                           n: int) -> dict[str, Any]:
    """The ``rev_`` router columns from the reverse bottleneck's qdisc on ``left`` (``rev_q_*``
    samples), in the simulator's units; zeros, as the simulator writes them, on an
    unconstrained reverse path. Its arrivals are what the qdisc sent, dropped and holds."""
    rev = trial.link.reverse
    if rev is None:
        zero = np.zeros(n)
        return {c: zero for c in ("rev_queue_bytes", "rev_queue_pkts", "rev_capacity_bps", "rev_arrivals_pkts",
                                  "rev_departed_bytes", "rev_departed_payload_bytes", "rev_drops_overflow",
                                  "rev_drops_random", "rev_drops_policer", "rev_drops_aqm")}
    eth = topo.ETH_HEADER
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


def _collect(run: Run, topology: topo.Topology) -> KernelTrialResult:
    trial, wd = run.trial, run.workdir
    k = len(trial.flows)
    send = [_npz(wd / f"send{i}.npz") for i in range(k)]
    sink = [_npz(wd / f"sink{i}.npz") for i in range(k)]
    router = _npz(wd / "router.npz")
    fschema, rschema = sim_schema(trial)
    flows = build_flows(trial, send, sink, fschema)
    rframe = build_router(trial, router, run.mode, rschema)
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
        "senders": {},
    }
    for i in range(k):
        p = wd / f"send{i}.npz.json"
        if p.exists():
            extra["senders"][str(i)] = json.loads(p.read_text())
    files: dict[str, bytes] = {}
    emu = wd / "linkemu.json"
    if emu.exists():
        extra["linkemu"] = json.loads(emu.read_text())
    for pcap in sorted(wd.glob("*.pcap")):
        files[pcap.name] = pcap.read_bytes()
    errors = {i: e for i, s in extra["senders"].items() for e in [s.get("errors")] if e}
    if errors:
        raise KernelRunError(f"flows failed: {errors}")
    fct = build_completions(trial, sink, extra["senders"])
    summary = summarize(flows, rframe, TrialInfo.from_trial(trial, backend=BACKEND), fct)
    return KernelTrialResult(trial, flows, rframe, summary, None, BACKEND, extra=extra, files=files,
                             completions=fct if len(fct) else None)


def build_completions(trial: Trial, sink: list[dict[str, np.ndarray]], senders: dict[str, Any]) -> pl.DataFrame:
    """fct.parquet from the runs' records: a sized flow starts when its sender called
    ``connect`` and completes when its sink's application had read every byte (receiver side,
    as the simulator measures it); delivered is what the application read by the end."""
    from ..schema import completions_frame

    connect: dict[int, int] = {}
    for s in senders.values():
        connect.update({int(f): int(ns) for f, ns in (s.get("connect_ns") or {}).items()})
    done: dict[int, int] = {}
    read: dict[int, int] = {}
    for d in sink:
        done.update(zip(d.get("done_flow", np.array([])).astype(int).tolist(),
                        d.get("done_ns", np.array([])).astype(int).tolist()))
        if len(d.get("tick", [])) and "app_bytes" in d:
            for f, b in zip(d["flow"].astype(int).tolist(), d["app_bytes"].astype(int).tolist()):
                read[f] = max(read.get(f, 0), b)
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
    return completions_frame(cols, trial, backend=BACKEND)
