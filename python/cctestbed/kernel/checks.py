"""What the kernel backend checks before it creates anything: that it runs as root with the
tools it needs (:func:`check_host`), which link emulator the trial gets
(:func:`choose_link_emulator`), which flow groups run a BPF congestion control
(:func:`bpf_plans`), and what in the trial it cannot reproduce (:func:`trial_problems`, each
refused with the reason). :mod:`.run` calls them first; the tests call them without root.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from ..config import Trial
from . import bpfcc
from . import topology as topo

#: Each flow's source port is its own, from PORT_BASE (the flow id added) up to MAX_PORT.
PORT_BASE = 20000
MAX_PORT = 65535


class KernelUnavailable(RuntimeError):
    """The kernel backend cannot run here (not root, missing tools or kernel features)."""


class TrialRefused(ValueError):
    """The trial asks for something the kernel backend cannot do; ``problems`` lists each."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("; ".join(problems))


#: Trial algorithm names that map to another kernel module name.
KERNEL_NAMES = {"bbr1": "bbr"}


def kernel_cc(name: str) -> str:
    return KERNEL_NAMES.get(name, name)


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

#: From this forward rate a userspace link emulator is pinned to one CPU and the switches'
#: receive processing is steered to the others (``run._steering``), and the ``full`` emulator is
#: the default: its batched loop keeps a frame's timing error p99 near 0.1 ms at 500 Mbit/s,
#: where the delay lines in front of htb measured 14.7 ms (docs/kernel.md). Set by
#: CCTESTBED_RX_STEERING_BPS (0: always; a huge value: never).
RX_STEERING_BPS = int(os.environ.get("CCTESTBED_RX_STEERING_BPS", 250_000_000))


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
    """``full`` where the trial needs it (:func:`full_link_needs`) or runs at
    :data:`RX_STEERING_BPS` or more, else ``tc`` where the kernel has netem and ifb, else
    ``userspace``; ``requested`` overrides."""
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
    elif needs or (trial is not None and trial.link.capacity >= RX_STEERING_BPS):
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
    #: The object as inspected, with the one tcp_congestion_ops a ``bpf:PATH#NAME`` chose.
    chosen: Optional[bpfcc.BpfObject] = None


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
            path, values, chosen = plan[0].path, plan[1], plan[0]
        else:
            chosen = None
            path = bpfcc.resolve_object(bpfcc.BBR_OBJECT)
            if not path.exists():
                problems.append(
                    f"flows[{i}].cc: {g.cc!r}: runs as the BPF port of BBR, which is not built ({path} is missing): "
                    "run `make build` (it needs clang, bpftool and libbpf-dev: `make kernel-deps`)"
                )
                continue
            values, bad = bpfcc.bbr_values(g.cc, g.params, f"flows[{i}].params")
        problems += bad
        plans[i] = BpfPlan(i, path, values, chosen=chosen)
    return plans, problems


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
                + ("; DCTCP runs as the kernel's own selftest object: cc = \"bpf:PATH/bpf_dctcp.o#bpf_dctcp\" "
                   "(target/selftests/bpf_dctcp.o, built by make kernel-selftests)" if name == "dctcp" else "")
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
    nic = link.receiver_nic
    defaults = type(nic)()
    if nic.coalesce != defaults.coalesce or nic.budget != defaults.budget:
        problems.append("link.receiver_nic: the kernel backend's hosts receive on veths, which poll at each frame "
                        f"(coalesce = 0s) and take {defaults.budget} frames a poll; only gro can be set")
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

