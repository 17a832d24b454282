"""The dumbbell in network namespaces, its bottleneck, its registry and its cleanup.

::

    snd0 ─┐                                         ┌─ rcv0
    snd1 ─┤── swl (bridge) ── rtr ── swr (bridge) ──┤── rcv1
    ...  ─┘          left ─┘    └─ right          └─ ...

One sender host and one receiver host per flow group, each a namespace; a switch namespace
(a Linux bridge) on each side; the router namespace in the middle. Every namespace is named
``cct-<id>-<role>`` from a 6-hex-digit trial id, every interface carries the id too, and the
hosts share one private /24 derived from the id (senders .1.., receivers .129..), so trials
run side by side without meeting. Nothing is routed out of these namespaces: they have no
link to the root namespace at all. IPv6 is off (no stray neighbour discovery), neighbours
are static (no ARP at flow start), and TSO, GSO and checksum offloads are off on every veth
so that every frame is one MTU-sized packet with a real checksum. GRO is on on the hosts'
interfaces (``link.receiver_nic.gro``, Linux's default for a NIC) and off on the switches' and
the router's.

The router joins ``left`` and ``right`` in one of two ways:

- ``userspace``: the project's link emulator (``cctestbed-linkemu``) bridges the two
  interfaces itself and applies delay and random loss (the kernel here has no netem);
- ``full``: the same emulator is the whole link, bottleneck included: the simulator's own
  bottleneck and queue disciplines decide when each frame leaves, drops and CE marks, so no
  qdisc is put on the router's interfaces;
- ``tc``: a Linux bridge joins them; ``netem`` on ``left``'s egress delays the ACK path, and
  ``left``'s ingress is redirected through an ``ifb`` device whose ``netem`` adds the forward
  delay and the random loss.

With ``userspace`` and ``tc`` the bottleneck is ``right``'s egress: ``htb`` (one class) with a ``bfifo`` leaf. A
trial with ``link.reverse`` (userspace mode) gets the same on ``left``'s egress, the reverse
path's bottleneck: the emulator writes right-to-left frames to ``left`` after their delay, so
they queue there as forward frames queue on ``right``. Reverse flow groups run their sender on
the group's right-hand host (``rcv<k>``) and their sink on the left-hand one (``snd<k>``); the
host routes are set both ways.

Units: capacity in a trial is the IP-level rate (a 1500-byte packet takes 1500 x 8 /
capacity seconds) and queue limits are IP bytes, as in the simulator. ``htb`` and ``bfifo``
count whole Ethernet frames (IP length + 14 bytes of header), so both are set in frame
bytes: ``rate_tc = capacity x (mtu + 14) / mtu`` and ``limit_tc = limit x (mtu + 14) /
mtu``. Full-size packets then leave at exactly the simulator's rate and the queue holds the
same number of them; smaller frames (the sender's pure ACKs, SYN, FIN) are charged 14 bytes
more than in the simulator, which at bulk-transfer rates is negligible.

The registry (``/run/cctestbed/<id>.json``, written *before* anything is created) names the
owning process and everything the trial made, BPF congestion controls included (by name
before they are registered, with their map ids once they are); :func:`cleanup` removes whatever belongs to
an owner that is no longer alive (or everything, with ``everything=True``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

PREFIX = "cct-"
REGISTRY = Path(os.environ.get("CCTESTBED_RUN_DIR", "/run/cctestbed"))
ETH_HEADER = 14


class TopologyError(RuntimeError):
    """A command that builds the topology failed."""


def sh(args: Sequence[str], check: bool = True, input: Optional[str] = None) -> subprocess.CompletedProcess:
    """Runs a command, raising TopologyError with its stderr if it fails (and check)."""
    p = subprocess.run(list(args), input=input, capture_output=True, text=True)
    if check and p.returncode != 0:
        raise TopologyError(f"{' '.join(args)}: {(p.stderr or p.stdout).strip()}")
    return p


def nsexec(ns: str, *args: str) -> list[str]:
    return ["ip", "netns", "exec", ns, *args]


def parse_mib(text: str, tables: Sequence[str]) -> dict[str, int]:
    """/proc/net/snmp and /proc/net/netstat: each table is a line of names then a line of values,
    both led by ``Table:``. Returns ``{"Table.Name": value}`` for the tables asked for."""
    out: dict[str, int] = {}
    header: dict[str, list[str]] = {}
    for line in text.splitlines():
        table, _, rest = line.partition(":")
        if table not in tables:
            continue
        fields = rest.split()
        if table not in header:
            header[table] = fields
            continue
        for name, value in zip(header.pop(table), fields):
            try:
                out[f"{table}.{name}"] = int(value)
            except ValueError:
                pass
    return out


def counter_deltas(before: dict[str, Optional[dict[str, int]]],
                   after: dict[str, Optional[dict[str, int]]]) -> dict[str, Optional[dict[str, int]]]:
    """What each host's counters gained between two snapshots (nonzero ones only; gauges such as
    ``Tcp.CurrEstab`` are not counters and are left out). None for a host either read missed."""
    gauges = {"Tcp.CurrEstab", "Tcp.RtoAlgorithm", "Tcp.RtoMin", "Tcp.RtoMax", "Tcp.MaxConn"}
    out: dict[str, Optional[dict[str, int]]] = {}
    for host, now in after.items():
        then = before.get(host)
        out[host] = None if now is None or then is None else {
            k: v - then.get(k, 0) for k, v in sorted(now.items()) if k not in gauges and v != then.get(k, 0)}
    return out


def tc_rate(capacity_bps: int, mtu: int) -> int:
    """htb rate in bit/s of Ethernet frames for an IP-level capacity (see the module doc)."""
    return round(capacity_bps * (mtu + ETH_HEADER) / mtu)


def tc_limit(limit_bytes: int, mtu: int) -> int:
    """bfifo limit in frame bytes holding as many full-size packets as ``limit_bytes`` of IP."""
    return limit_bytes * (mtu + ETH_HEADER) // mtu


@dataclass
class Names:
    """Every name and address of one trial, derived from its id."""

    id: str
    groups: int

    @property
    def subnet(self) -> tuple[int, int]:
        h = int(hashlib.sha256(self.id.encode()).hexdigest(), 16)
        return 100 + h % 100, (h >> 8) % 256

    def ns(self, role: str) -> str:
        return f"{PREFIX}{self.id}-{role}"

    def snd(self, k: int) -> str:
        return self.ns(f"snd{k}")

    def rcv(self, k: int) -> str:
        return self.ns(f"rcv{k}")

    @property
    def rtr(self) -> str:
        return self.ns("rtr")

    @property
    def swl(self) -> str:
        return self.ns("swl")

    @property
    def swr(self) -> str:
        return self.ns("swr")

    def all_ns(self) -> list[str]:
        return [*(self.snd(k) for k in range(self.groups)), self.swl, self.rtr, self.swr,
                *(self.rcv(k) for k in range(self.groups))]

    def ip(self, role: str, k: int) -> str:
        a, b = self.subnet
        return f"10.{a}.{b}.{(1 if role == 'snd' else 129) + k}"

    def dev(self, tag: str) -> str:
        name = f"{tag}-{self.id}"
        assert len(name) <= 15, name
        return name

    # interfaces
    def host_if(self, k: int) -> str:  # in snd k and in rcv k
        return self.dev(f"h{k}")

    def swl_port(self, k: int) -> str:
        return self.dev(f"p{k}")

    def swr_port(self, k: int) -> str:
        return self.dev(f"q{k}")

    @property
    def left(self) -> str:
        return self.dev("l")

    @property
    def right(self) -> str:
        return self.dev("r")

    @property
    def uplink(self) -> str:  # in each switch
        return self.dev("u")

    @property
    def bridge(self) -> str:  # in each switch, and in the router with tc
        return self.dev("br")

    @property
    def ifb(self) -> str:
        return self.dev("ifb")


def new_id() -> str:
    return os.urandom(3).hex()


# --- registry and cleanup ---------------------------------------------------------------------


def _proc_start(pid: int) -> Optional[str]:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def alive(pid: int) -> bool:
    """True while the process exists and is not a zombie waiting to be reaped."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def register(names: Names, workdir: Path, struct_ops: Optional[list[dict[str, Any]]] = None) -> Path:
    """Writes the trial's registry entry; ``struct_ops`` names the BPF congestion controls it will
    register (``{"name", "id"}``, the id filled in by :func:`update_registry` once known)."""
    REGISTRY.mkdir(parents=True, exist_ok=True)
    path = REGISTRY / f"{names.id}.json"
    pid = os.getpid()
    _write_entry(path, {"id": names.id, "pid": pid, "start": _proc_start(pid),
                        "namespaces": names.all_ns(), "workdir": str(workdir), "struct_ops": struct_ops or []})
    return path


def _write_entry(path: Path, entry: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(entry))
    os.replace(tmp, path)


def update_registry(path: Path, **changes: Any) -> None:
    """Rewrites fields of a registry entry (atomically: cleanup may read it at any time)."""
    entry = json.loads(path.read_text())
    entry.update(changes)
    _write_entry(path, entry)


def remove_struct_ops(listed: Sequence[dict[str, Any]]) -> list[str]:
    """Unregisters the BPF congestion controls a registry entry names. Returns the names removed."""
    from . import bpfcc

    wanted = [e for e in listed if isinstance(e, dict) and isinstance(e.get("name"), str)]
    if not wanted:
        return []
    present = bpfcc.registered()
    removed = []
    for e in wanted:
        ids = [i for i, n in present.items() if n == e["name"]]
        for i in ids:
            if bpfcc.unregister(i, e["name"]):
                removed.append(e["name"])
    return removed


def _owner_alive(entry: dict[str, Any]) -> bool:
    pid = entry.get("pid")
    return isinstance(pid, int) and alive(pid) and _proc_start(pid) == entry.get("start")


def list_netns() -> list[str]:
    p = sh(["ip", "netns", "list"], check=False)
    return [line.split()[0] for line in p.stdout.splitlines() if line.strip()]


def ns_pids(ns: str) -> list[int]:
    p = sh(["ip", "netns", "pids", ns], check=False)
    return [int(x) for x in p.stdout.split() if x.isdigit()]


def destroy_namespaces(namespaces: Sequence[str]) -> list[str]:
    """Kills every process in the namespaces, then deletes them. Returns what was removed."""
    present = set(list_netns())
    targets = [ns for ns in namespaces if ns in present]
    for sig, wait in ((signal.SIGTERM, 1.0), (signal.SIGKILL, 1.0)):
        pids = {pid for ns in targets for pid in ns_pids(ns)}
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while pids and time.monotonic() < deadline:
            pids = {pid for pid in pids if alive(pid)}
            time.sleep(0.02)
        if not pids:
            break
    for ns in targets:
        sh(["ip", "netns", "del", ns], check=False)
    return targets


def cleanup(everything: bool = False) -> dict[str, list[str]]:
    """Removes leftovers of trials whose owner is gone (all trials with ``everything``).

    Namespaces named ``cct-*`` that no live registry entry claims are leftovers too.
    Returns {"trials": ids, "namespaces": names removed}.
    """
    from . import bpfcc

    removed_ids: list[str] = []
    removed_ns: list[str] = []
    removed_cc: list[str] = []
    claimed: set[str] = set()
    claimed_cc: set[str] = set()
    if REGISTRY.is_dir():
        for path in sorted(REGISTRY.glob("*.json")):
            try:
                entry = json.loads(path.read_text())
            except (OSError, ValueError):
                path.unlink(missing_ok=True)
                continue
            if not everything and _owner_alive(entry):
                claimed.update(entry.get("namespaces", []))
                claimed_cc.update(str(e["name"]) for e in entry.get("struct_ops", []) if isinstance(e, dict) and e.get("name"))
                continue
            removed_ns += destroy_namespaces(entry.get("namespaces", []))
            removed_cc += remove_struct_ops(entry.get("struct_ops", []))
            wd = entry.get("workdir")
            if wd and Path(wd).name.startswith("cctestbed-"):
                shutil.rmtree(wd, ignore_errors=True)
            path.unlink(missing_ok=True)
            removed_ids.append(str(entry.get("id")))
    orphans = [ns for ns in list_netns() if ns.startswith(PREFIX) and ns not in claimed]
    removed_ns += destroy_namespaces(orphans)
    # congestion controls under the testbed's names that no live trial claims (a trial killed
    # between registering one and recording it)
    for map_id, name in bpfcc.registered().items():
        if bpfcc.is_testbed_name(name) and name not in claimed_cc and bpfcc.unregister(map_id, name):
            removed_cc.append(name)
    return {"trials": removed_ids, "namespaces": sorted(set(removed_ns)), "congestion_controls": sorted(set(removed_cc))}


# --- building -----------------------------------------------------------------------------------

#: net.core.netdev_max_backlog while the switches' receive processing is steered
#: (:meth:`Topology.steer_switch_receive`).
BACKLOG_STEERED = 10_000

#: How long a new veth may take to become operational.
OPERATIONAL_TIMEOUT_S = 5.0


def wait_operational(devs: Sequence[tuple[str, str]], timeout_s: float = OPERATIONAL_TIMEOUT_S) -> None:
    """Waits until every (namespace, device) is operationally up. A new veth's carrier, the qdisc
    attached to it on carrier-on (``dev_activate``) and the bridges' view of their ports come up
    asynchronously, through the kernel's linkwatch work; a trial starting at once was seen to
    lose its first 0.3 to 0.5 s of packets (its SYNs, retransmitted only after the 1 s initial
    RTO)."""
    deadline = time.monotonic() + timeout_s
    pending = list(devs)
    while pending:
        pending = [(ns, dev) for ns, dev in pending
                   if json.loads(sh(["ip", "-n", ns, "-j", "link", "show", "dev", dev]).stdout)[0].get("operstate")
                   != "UP"]
        if not pending:
            return
        if time.monotonic() > deadline:
            raise TopologyError(f"interfaces not up after {timeout_s:g} s: "
                                + ", ".join(f"{dev} in {ns}" for ns, dev in pending))
        time.sleep(0.02)


@dataclass
class HostSettings:
    """Per flow group: the sender route's initial cwnd, the receiver's quick ACKs, ECN."""

    initcwnd: int = 10
    quickack: bool = False
    #: The group sends right to left: its sender is the right-hand host.
    reverse: bool = False
    #: ``net.ipv4.tcp_ecn = 1`` on both hosts: the sender asks for ECN (RFC 3168) and sends
    #: ECT(0), the receiver echoes CE marks (a namespace starts with 2: accept, never ask).
    ecn: bool = False


@dataclass
class Topology:
    names: Names
    mtu: int
    link_emulator: str  # "userspace", "full" or "tc"
    hosts: list[HostSettings]
    tcp_rmem_max: int = 6 << 20
    tcp_wmem_max: int = 4 << 20
    #: GRO on the hosts' interfaces (``link.receiver_nic.gro``).
    gro: bool = True
    made: list[str] = field(default_factory=list)
    #: net.core.netdev_max_backlog as it was before the run raised it (restored at teardown)
    _backlog_prev: Optional[int] = None

    def build(self) -> None:
        n = self.names
        for ns in n.all_ns():
            sh(["ip", "netns", "add", ns])
            self.made.append(ns)
            sh(["ip", "-n", ns, "link", "set", "dev", "lo", "up"])
            sysctls = ["net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"]
            if "-snd" in ns or "-rcv" in ns:
                sysctls += [f"net.ipv4.tcp_rmem=4096 131072 {self.tcp_rmem_max}",
                            f"net.ipv4.tcp_wmem=4096 16384 {self.tcp_wmem_max}",
                            "net.ipv4.tcp_no_metrics_save=1"]
            sh(nsexec(ns, "sysctl", "-q", "-w", *sysctls))
        veths: list[tuple[str, str]] = []  # (ns, dev) of every veth end

        def veth(ns_a: str, a: str, ns_b: str, b: str) -> None:
            sh(["ip", "-n", ns_a, "link", "add", "name", a, "mtu", str(self.mtu), "type", "veth",
                "peer", "name", b, "mtu", str(self.mtu), "netns", ns_b])
            veths.extend([(ns_a, a), (ns_b, b)])

        for k in range(n.groups):
            veth(n.snd(k), n.host_if(k), n.swl, n.swl_port(k))
            veth(n.swr, n.swr_port(k), n.rcv(k), n.host_if(k))
        veth(n.swl, n.uplink, n.rtr, n.left)
        veth(n.rtr, n.right, n.swr, n.uplink)
        for sw, ports in ((n.swl, [n.swl_port(k) for k in range(n.groups)]),
                          (n.swr, [n.swr_port(k) for k in range(n.groups)])):
            sh(["ip", "-n", sw, "link", "add", "name", n.bridge, "type", "bridge", "stp_state", "0",
                "forward_delay", "0", "mcast_snooping", "0"])
            for dev in [*ports, n.uplink]:
                sh(["ip", "-n", sw, "link", "set", "dev", dev, "master", n.bridge])
            sh(["ip", "-n", sw, "link", "set", "dev", n.bridge, "up"])
        hosts = {(ns, n.host_if(k)) for k in range(n.groups) for ns in (n.snd(k), n.rcv(k))}
        for ns, dev in veths:
            # GRO on a host's interface as the trial's receiver_nic says (on a veth it also
            # turns on the NAPI poll that GRO needs); never on the switches and the router,
            # which forward frame by frame.
            gro = "on" if self.gro and (ns, dev) in hosts else "off"
            sh(nsexec(ns, "ethtool", "-K", dev, "tso", "off", "gso", "off", "gro", gro, "tx", "off", "rx", "off"))
            sh(["ip", "-n", ns, "link", "set", "dev", dev, "up"])
        macs = {}
        for k in range(n.groups):
            for role, ns in (("snd", n.snd(k)), ("rcv", n.rcv(k))):
                sh(["ip", "-n", ns, "addr", "add", f"{n.ip(role, k)}/24", "dev", n.host_if(k)])
                out = sh(["ip", "-n", ns, "-j", "link", "show", "dev", n.host_if(k)]).stdout
                macs[(role, k)] = json.loads(out)[0]["address"]
        for k in range(n.groups):
            s, r = n.snd(k), n.rcv(k)
            sh(["ip", "-n", s, "neigh", "replace", n.ip("rcv", k), "lladdr", macs[("rcv", k)], "dev",
                n.host_if(k), "nud", "permanent"])
            sh(["ip", "-n", r, "neigh", "replace", n.ip("snd", k), "lladdr", macs[("snd", k)], "dev",
                n.host_if(k), "nud", "permanent"])
            h = self.hosts[k]
            if h.ecn:
                for ns in (s, r):
                    sh(nsexec(ns, "sysctl", "-q", "-w", "net.ipv4.tcp_ecn=1"))
            # the sending host's route carries the initial window, the receiving host's quick ACKs
            (src, src_role), (dst, dst_role) = ((r, "rcv"), (s, "snd")) if h.reverse else ((s, "snd"), (r, "rcv"))
            sh(["ip", "-n", src, "route", "add", f"{n.ip(dst_role, k)}/32", "dev", n.host_if(k), "initcwnd",
                str(h.initcwnd)])
            route = ["ip", "-n", dst, "route", "add", f"{n.ip(src_role, k)}/32", "dev", n.host_if(k)]
            sh(route + (["quickack", "1"] if h.quickack else []))
        wait_operational(veths)

    def steer_switch_receive(self, cpus: Sequence[int]) -> dict[str, Any]:
        """Receive packet steering (RPS) on the switches' uplinks: the frames the link emulator
        writes towards the hosts are processed (bridge, the hosts' TCP, the ACKs and data they
        send back) on ``cpus`` rather than inside the emulator's own send calls on its CPU.
        Returns what was set, for ``kernel.json``; {} where the kernel has no RPS."""
        mask = sum(1 << c for c in cpus)
        done: dict[str, Any] = {}
        for sw in (self.names.swl, self.names.swr):
            path = f"/sys/class/net/{self.names.uplink}/queues/rx-0/rps_cpus"
            r = sh(nsexec(sw, "sh", "-c", f"echo {mask:x} > {path}"), check=False)
            if r.returncode != 0:
                return {}
            done[f"{sw}/{self.names.uplink}"] = f"{mask:x}"
        # Steered frames wait in the other CPUs' backlog (net.core.netdev_max_backlog, global,
        # 1000 by default): at 1 Gbit/s a burst of the emulator's sends overflowed it and the
        # veth refused frames the model had let through (46-187 in 10 s). Raised for the run,
        # restored at teardown.
        prev = int(sh(["sysctl", "-n", "net.core.netdev_max_backlog"]).stdout.strip())
        if prev < BACKLOG_STEERED:
            sh(["sysctl", "-q", "-w", f"net.core.netdev_max_backlog={BACKLOG_STEERED}"])
            self._backlog_prev = prev
        return {"rps_cpus": done, "netdev_max_backlog": max(prev, BACKLOG_STEERED)}

    def host_stack(self) -> dict[str, Any]:
        """What the first sender host's TCP stack runs with: its qdisc and the TCP sysctls that
        decide trains, loss recovery and ACKs (recorded so a reference says what it measured)."""
        n = self.names
        ns = n.snd(0)
        qdisc = sh(nsexec(ns, "tc", "qdisc", "show", "dev", n.host_if(0)), check=False).stdout.split()
        keys = ["net.ipv4.tcp_min_tso_segs", "net.ipv4.tcp_frto", "net.ipv4.tcp_recovery",
                "net.ipv4.tcp_early_retrans", "net.ipv4.tcp_comp_sack_nr", "net.ipv4.tcp_comp_sack_delay_ns",
                "net.ipv4.tcp_sack", "net.ipv4.tcp_timestamps", "net.ipv4.tcp_dsack", "net.ipv4.tcp_autocorking",
                "net.ipv4.tcp_pacing_ss_ratio", "net.ipv4.tcp_pacing_ca_ratio", "net.ipv4.tcp_limit_output_bytes"]
        values = {}
        for k in keys:
            r = sh(nsexec(ns, "sysctl", "-n", k), check=False)
            values[k.rsplit(".", 1)[1]] = r.stdout.strip() if r.returncode == 0 else None
        features = sh(nsexec(n.rcv(0), "ethtool", "-k", n.host_if(0)), check=False).stdout
        gro = next((line.split(":", 1)[1].split()[0] for line in features.splitlines()
                    if line.startswith("generic-receive-offload:")), None)
        return {"sender_qdisc": qdisc[1] if len(qdisc) > 1 else None, "sysctl": values, "receiver_gro": gro}

    def tcp_counters(self) -> dict[str, Optional[dict[str, int]]]:
        """Each end host's TCP counters as its namespace's /proc/net/snmp (``Tcp:``) and
        /proc/net/netstat (``TcpExt:``) give them: ``{"snd0": {"TcpExt.TCPTimeouts": 3, ...}}``.
        The kernel's own account of what its stacks did (timeouts, loss probes, undos, SACK and
        DSACK events), for a trial where its state machines cannot be traced."""
        n = self.names
        out: dict[str, Optional[dict[str, int]]] = {}
        for k in range(n.groups):
            for role, ns in (("snd", n.snd(k)), ("rcv", n.rcv(k))):
                r = sh(nsexec(ns, "cat", "/proc/net/snmp", "/proc/net/netstat"), check=False)
                out[f"{role}{k}"] = parse_mib(r.stdout, ("Tcp", "TcpExt")) if r.returncode == 0 else None
        return out

    def set_bottleneck(self, capacity_bps: int, limit_bytes: Optional[int], limit_packets: Optional[int],
                       change: bool = False, dev: Optional[str] = None) -> dict[str, Any]:
        """htb + bfifo (or pfifo for a packet limit) on the router's egress to the receivers, or on
        ``dev`` (``left``: the reverse path's bottleneck)."""
        n = self.names
        dev = dev or n.right
        frame = self.mtu + ETH_HEADER
        rate = tc_rate(capacity_bps, self.mtu)
        # A small bucket, as on the thesis testbed: two frames, or 100 us at the rate if larger;
        # but never more than 10 ms at the rate. htb sends while its tokens are not negative, so a
        # full bucket of two frames lets three frames leave back to back: at 128 kbit/s that put
        # a flow's first packets 190 ms ahead of a real link's and its first bandwidth samples at
        # 179 kbit/s, which BBR's max filter then held for the whole trial.
        burst = max(min(2 * frame, rate // 8 // 100), rate // 8 // 10_000)
        cls = ["rate", f"{rate}bit", "ceil", f"{rate}bit", "burst", str(burst), "cburst", str(burst),
               "quantum", str(frame)]
        if change:
            sh(nsexec(n.rtr, "tc", "class", "change", "dev", dev, "parent", "1:", "classid", "1:1", "htb", *cls))
            return {"rate_tc_bps": rate, "burst_bytes": burst}
        sh(nsexec(n.rtr, "tc", "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "1"))
        sh(nsexec(n.rtr, "tc", "class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb", *cls))
        if limit_bytes is not None:
            leaf = ["bfifo", "limit", str(tc_limit(limit_bytes, self.mtu))]
        else:
            leaf = ["pfifo", "limit", str(limit_packets)]
        sh(nsexec(n.rtr, "tc", "qdisc", "add", "dev", dev, "parent", "1:1", "handle", "10:", *leaf))
        return {"rate_tc_bps": rate, "burst_bytes": burst, "leaf": " ".join(leaf), "handle": 0x00100000}  # "10:" (tc handles are hex)

    def set_tc_link(self, delay_fwd_ns: int, delay_rev_ns: int, loss: Optional[str]) -> dict[str, Any]:
        """tc mode: bridge the router's interfaces and add netem delays and loss."""
        n = self.names
        r = n.rtr
        sh(["ip", "-n", r, "link", "add", "name", n.bridge, "type", "bridge", "stp_state", "0", "forward_delay", "0"])
        for dev in (n.left, n.right):
            sh(["ip", "-n", r, "link", "set", "dev", dev, "master", n.bridge])
        sh(["ip", "-n", r, "link", "set", "dev", n.bridge, "up"])
        sh(["ip", "-n", r, "link", "add", "name", n.ifb, "type", "ifb"])
        sh(["ip", "-n", r, "link", "set", "dev", n.ifb, "up"])
        limit = "1000000"
        sh(nsexec(r, "tc", "qdisc", "add", "dev", n.left, "root", "handle", "1:", "netem", "limit", limit,
                  "delay", f"{delay_rev_ns / 1e3:.3f}us"))
        fwd = ["netem", "limit", limit, "delay", f"{delay_fwd_ns / 1e3:.3f}us"] + (loss.split() if loss else [])
        sh(nsexec(r, "tc", "qdisc", "add", "dev", n.ifb, "root", "handle", "1:", *fwd))
        sh(nsexec(r, "tc", "qdisc", "add", "dev", n.left, "handle", "ffff:", "ingress"))
        sh(nsexec(r, "tc", "filter", "add", "dev", n.left, "parent", "ffff:", "protocol", "all", "u32", "match",
                  "u32", "0", "0", "action", "mirred", "egress", "redirect", "dev", n.ifb))
        return {"loss_dev": n.ifb, "loss_handle": 0x00010000}

    def teardown(self) -> list[str]:
        prev = self._backlog_prev
        if prev is not None:
            sh(["sysctl", "-q", "-w", f"net.core.netdev_max_backlog={prev}"], check=False)
            self._backlog_prev = None
        return destroy_namespaces(self.made)


# --- what the kernel offers ---------------------------------------------------------------------


def available_algorithms() -> list[str]:
    try:
        return Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split()
    except OSError:
        return []


def load_algorithm(name: str) -> bool:
    """Tries to load tcp_<name> (modprobe, if present); True if it is available afterwards."""
    if name in available_algorithms():
        return True
    if shutil.which("modprobe"):
        sh(["modprobe", "-q", f"tcp_{name}"], check=False)
    return name in available_algorithms()


_probe_cache: dict[str, bool] = {}

#: Queue disciplines probed besides netem: the AQMs a trial may ask for and the classless and
#: shaping ones the backend itself uses or could use.
AQM_QDISCS = ("codel", "fq_codel", "red", "pie", "dualpi2", "fq")
OTHER_QDISCS = ("tbf", "htb", "bfifo", "pfifo")

#: The arguments that make each probed qdisc valid on its own (red needs its limits).
_QDISC_PROBE_ARGS: dict[str, list[str]] = {
    "netem": ["netem", "delay", "1ms"],
    "red": ["red", "limit", "400000", "min", "30000", "max", "90000", "avpkt", "1000", "burst", "55",
            "bandwidth", "10mbit"],
    "tbf": ["tbf", "rate", "10mbit", "burst", "32kb", "latency", "50ms"],
    "htb": ["htb"],
    "bfifo": ["bfifo", "limit", "100000"],
    "pfifo": ["pfifo", "limit", "100"],
}


def probe_qdiscs() -> dict[str, bool]:
    """Which qdiscs (netem, the AQMs of :data:`AQM_QDISCS`, tbf, htb, fifos) and whether ifb this
    kernel has, each tried in a throw-away namespace."""
    if _probe_cache:
        return dict(_probe_cache)
    ns = f"{PREFIX}{new_id()}-probe"
    REGISTRY.mkdir(parents=True, exist_ok=True)
    reg = REGISTRY / f"probe-{ns}.json"
    reg.write_text(json.dumps({"id": ns, "pid": os.getpid(), "start": _proc_start(os.getpid()), "namespaces": [ns]}))
    try:
        sh(["ip", "netns", "add", ns])
        sh(["ip", "-n", ns, "link", "add", "name", "p0", "type", "veth", "peer", "name", "p1"])
        for q in ("netem", *AQM_QDISCS, *OTHER_QDISCS):
            args = _QDISC_PROBE_ARGS.get(q, [q])
            added = sh(nsexec(ns, "tc", "qdisc", "add", "dev", "p0", "root", *args), check=False).returncode == 0
            _probe_cache[q] = added
            if added:
                sh(nsexec(ns, "tc", "qdisc", "del", "dev", "p0", "root"), check=False)
        _probe_cache["ifb"] = sh(["ip", "-n", ns, "link", "add", "name", "i0", "type", "ifb"],
                                 check=False).returncode == 0
    finally:
        destroy_namespaces([ns])
        reg.unlink(missing_ok=True)
    return dict(_probe_cache)


def available_qdiscs() -> list[str]:
    """The qdiscs this kernel has, by name, as :func:`probe_qdiscs` found them."""
    return [q for q, ok in probe_qdiscs().items() if ok and q != "ifb"]
