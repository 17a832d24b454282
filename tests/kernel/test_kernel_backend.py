"""The kernel backend against the acceptance figures: capacity, queue drops, random loss,
cleanup, and the same trial on the simulator and the kernel side by side.

Each run is short (10-20 s; the side-by-side trial is the specified 60 s) so the whole file
takes a few minutes. Measured figures are printed (``pytest -s`` shows them).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from kernelutil import check_on_quiet_host, has_bbr, host_was_quiet, kernel_trial, our_namespaces, registry_entry

from cctestbed.config import parse_trial
from cctestbed.kernel.run import run_kernel_trial
from cctestbed.kernel.topology import REGISTRY
from cctestbed.kernel.topology import alive as is_alive

CLI = [sys.executable, "-m", "cctestbed.cli"]


def last_row(df: pl.DataFrame) -> dict:
    return df.filter(pl.col("time_s") == pl.col("time_s").max()).to_dicts()


def assert_nothing_left(trial_id: str) -> None:
    assert our_namespaces(trial_id) == [], f"namespaces left: {our_namespaces(trial_id)}"
    assert not (REGISTRY / f"{trial_id}.json").exists()
    assert not Path(f"/tmp/cctestbed-{trial_id}").exists()


def test_capacity_and_min_rtt():
    """1 CUBIC flow, 80 Mbit/s, 1 BDP: payload rate within 3 %; min RTT within 1 ms of 25 ms; the
    userspace link emulator sends 99 % of frames within 1 ms of when they are due.

    The emulator runs SCHED_FIFO, so load inside this machine does not delay it (two busy
    processes on both cores: p99 81-102 us), but a virtual machine whose CPUs the host takes
    away stalls it for tens of ms (a CI run: p99 2.9 ms, max 21 ms, and 2.3 % less goodput).
    The bounds are checked on a quiet host (``check_on_quiet_host``). The timing bound measures
    the host's scheduling as much as the emulator: it is checked whenever the host was quiet and
    left unchecked, with a warning that says so, on a disturbed one (a CI host that took
    380-500 ms in each of three 12 s attempts gave p99 1.3-1.9 ms; locally 60-140 ms gave
    77-160 us)."""
    expected = 80e6 * 1448 / 1500

    def check(r: Any) -> None:
        goodput = r.summary["total"]["goodput_bps"]
        min_rtt = last_row(r.flows)[0]["min_rtt_ms"]
        print(f"capacity: goodput {goodput / 1e6:.3f} Mbit/s vs {expected / 1e6:.3f} expected "
              f"({100 * (goodput / expected - 1):+.2f} %); min RTT {min_rtt:.3f} ms vs 25 ms")
        assert abs(goodput / expected - 1) <= 0.03
        assert abs(min_rtt - 25.0) <= 1.0
        emu = r.extra.get("linkemu")
        if emu is not None:  # the tc link emulator has no per-frame timing of its own
            fwd, rev = emu["timing_error_fwd"], emu["timing_error_rev"]
            print(f"link emulator timing error p50/p99/max: fwd {fwd['p50_us']}/{fwd['p99_us']}/{fwd['max_us']:.0f} us, "
                  f"rev {rev['p50_us']}/{rev['p99_us']}/{rev['max_us']:.0f} us, realtime {emu['realtime']}")
            if host_was_quiet(r):
                assert fwd["p99_us"] <= 1000 and rev["p99_us"] <= 1000

    r = check_on_quiet_host(lambda: run_kernel_trial(parse_trial(kernel_trial(name="capacity", duration="12s",
                                                                               steady=["4s", "12s"]))), check)
    if r.extra.get("linkemu") is not None and not host_was_quiet(r):
        warnings.warn(f"the link emulator's 1 ms bound was not checked: the host took "
                      f"{r.extra['host_cpu_steal_ms']:.0f} ms of CPU during the 12 s trial")
    # the schema is the simulator's, plus the backend column
    from cctestbed.schema import flow_schema, router_schema

    assert dict(r.flows.schema) == flow_schema(r.trial) and dict(r.router.schema) == router_schema()
    assert set(r.flows["backend"].unique()) == {"kernel"}
    assert_nothing_left(r.extra["trial_id"])


def test_rwnd_caps_the_window_as_in_the_simulator():
    """A receive window far below the BDP limits the flow to rwnd per round trip, on both
    backends: in flight within rwnd, goodput rwnd / RTT (within 5 %). The sink's clamp and the
    kernel resetting it are in cctestbed.kernel.traffic; test_kernel_reverse checks the trial in
    which the reset showed."""
    doc = kernel_trial(name="rwnd", duration="10s", steady=["3s", "10s"],
                       link={"capacity": "80Mbit", "rtt": "40ms", "queue": "1bdp"}, flows=[{"cc": "cubic", "rwnd": "32KB"}])
    from cctestbed.runner import run_trial

    sim = run_trial(parse_trial({**doc, "backend": "sim"}))

    def check(r: Any) -> None:
        inflight_p95 = r.flows.filter(pl.col("time_s") > 3.0)["inflight_bytes"].quantile(0.95)
        k, s = r.summary["total"]["goodput_bps"], sim.summary["total"]["goodput_bps"]
        print(f"rwnd 32 KB over 40 ms: kernel goodput {k / 1e6:.2f} Mbit/s, in flight p95 {inflight_p95 / 1e3:.1f} KB; "
              f"simulator {s / 1e6:.2f} Mbit/s")
        assert inflight_p95 <= 32_000, "in flight stays within rwnd"
        assert abs(k / s - 1) <= 0.05

    check_on_quiet_host(lambda: run_kernel_trial(parse_trial(doc)), check)


def test_queue_drops_match_retransmissions():
    """0.5 BDP, 4 BBR flows: router drops match the flows' retransmissions within 5 %."""
    cc = "bbr" if has_bbr() else "cubic"
    if cc != "bbr":
        print("\nbbr unavailable in this kernel: the queue test runs CUBIC")
    trial = parse_trial(kernel_trial(
        name="queue", duration="15s", steady=["5s", "15s"], link={"capacity": "80Mbit", "rtt": "25ms", "queue": "0.5bdp"},
        flows=[{"cc": cc, "count": 4, "stagger": "200ms"}],
    ))

    def check(r: Any) -> None:
        router = last_row(r.router)[0]
        drops = router["drops_overflow"] + router["drops_random"] + router["drops_policer"]
        retrans = sum(row["retrans_segs"] for row in last_row(r.flows))
        print(f"queue ({cc}): router drops {drops}, retransmitted segments {retrans} "
              f"({100 * (retrans / drops - 1):+.2f} %); loss {r.summary['total']['loss_pct']:.2f} %")
        assert drops > 100
        assert abs(retrans - drops) <= 0.05 * drops
        # the sender host's own counters tell the same story as its sockets' tcp_info: Linux adds
        # each retransmitted segment to both (__tcp_retransmit_skb). The counters are read before
        # the flows connect, as the run passes the steady window's start and after the flows
        # close; tcp_info every sample. So the host's count at the start edge lies between the
        # sockets' at the samples around that read (it takes some tens of ms), and at the end the
        # host holds every retransmission the sockets reported, plus those sent after the last
        # sample, as a closed socket still sends what its buffer holds (1.15-2.2 % more here, 177-311
        # segments: too many for a fixed tolerance). The steady window (5-15 s) holds fewer
        # retransmissions than the whole trial, whose start-up overshoot loses the most.
        counters = r.extra["tcp_counters"]
        snd, rcv = counters["trial"]["snd0"], counters["trial"]["rcv0"]
        read_s = counters["steady_read_s"][0]
        host_at_read = snd["Tcp.RetransSegs"] - counters["steady"]["snd0"]["Tcp.RetransSegs"]
        total = r.flows.group_by("time_s").agg(pl.col("retrans_segs").sum()).sort("time_s")
        before = total.filter(pl.col("time_s") <= read_s)["retrans_segs"][-1]
        after = total.filter(pl.col("time_s") >= read_s + 0.2)["retrans_segs"][0]
        print(f"kernel counters: RetransSegs {snd.get('Tcp.RetransSegs', 0)} (steady "
              f"{counters['steady']['snd0'].get('Tcp.RetransSegs', 0)}), TCPTimeouts {snd.get('TcpExt.TCPTimeouts', 0)}, "
              f"TCPLossProbes {snd.get('TcpExt.TCPLossProbes', 0)}; receiver TCPOFOQueue {rcv.get('TcpExt.TCPOFOQueue', 0)}; "
              f"at {read_s} s the host {host_at_read}, the sockets {before}-{after}")
        assert before <= host_at_read <= after
        assert snd["Tcp.RetransSegs"] >= retrans
        assert 0 < counters["steady"]["snd0"]["Tcp.RetransSegs"] < snd["Tcp.RetransSegs"]
        assert 4.5 <= read_s <= 5.6
        # segments beyond a hole wait in the receiver's out-of-order queue
        assert rcv["TcpExt.TCPOFOQueue"] > 0

    check_on_quiet_host(lambda: run_kernel_trial(trial), check)


def test_capture_keeps_pcaps(tmp_path):
    """capture = true: a pcap per sender and receiver host, kept in the results directory."""
    import shutil

    if shutil.which("tcpdump") is None:
        pytest.skip("tcpdump is not installed (make kernel-deps)")
    r = run_kernel_trial(parse_trial(kernel_trial(name="capture", duration="3s", capture=True)))
    out = r.save(tmp_path / "res")
    for name in ("snd0.pcap", "rcv0.pcap"):
        assert (out / name).stat().st_size > 10_000, name
    assert json.loads((out / "kernel.json").read_text())["backend"] == "kernel"


def test_random_loss():
    """1 % configured loss is measured within 0.2 % (one BBR flow keeps the link busy)."""
    cc = "bbr" if has_bbr() else "cubic"
    r = run_kernel_trial(parse_trial(kernel_trial(
        name="loss", duration="12s", link={"capacity": "80Mbit", "rtt": "25ms", "queue": "2bdp", "loss": "1%"},
        flows=[{"cc": cc}],
    )))
    router = last_row(r.router)[0]
    measured = 100 * router["drops_random"] / router["arrivals_pkts"]
    print(f"\nrandom loss ({cc}): {router['drops_random']} of {router['arrivals_pkts']} packets = {measured:.3f} %")
    assert router["arrivals_pkts"] > 20_000
    assert abs(measured - 1.0) <= 0.2


def test_refuses_algorithms_the_kernel_lacks(tmp_path, write_trial):
    from cctestbed.kernel.topology import available_algorithms

    missing = next((a for a in ("vegas", "htcp", "bbr3") if a not in available_algorithms()), None)
    if missing is None:
        pytest.skip("this kernel has every algorithm tried")
    path = write_trial(kernel_trial(flows=[{"cc": missing}]))
    p = subprocess.run([*CLI, "run", str(path), "--backend", "kernel", "-o", str(tmp_path / "out")],
                       capture_output=True, text=True)
    assert p.returncode == 2
    assert "available are" in p.stderr and missing in p.stderr
    assert not (tmp_path / "out").exists()


def start_and_wait_for_traffic(path: Path, out: Path) -> tuple[subprocess.Popen, list[str], set[int]]:
    """Starts `cctestbed run --backend kernel` and waits until its programs run in its namespaces.

    The trial is found by its registry entry (owner pid), so other trials running at the same
    time are never mistaken for it.
    """
    proc = subprocess.Popen([*CLI, "run", str(path), "--backend", "kernel", "-o", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    mine: list[str] = []
    pids: set[int] = set()
    while time.monotonic() < deadline and proc.poll() is None:
        doc = registry_entry(proc.pid)
        if doc is not None:
            mine = doc["namespaces"]
        if mine and set(mine) <= set(our_namespaces()):
            pids = {int(x) for n in mine for x in subprocess.run(["ip", "netns", "pids", n], capture_output=True,
                                                                 text=True).stdout.split()}
            if len(pids) >= 3:  # sink, sender, router sampler (and the emulator)
                break
        time.sleep(0.2)
    assert mine and pids, "the trial did not start"
    time.sleep(1.0)
    return proc, mine, pids


def test_sigterm_and_ctrl_c_clean_up(tmp_path, write_trial):
    """SIGTERM or SIGINT (Ctrl-C) during a run: it exits and removes everything it made."""
    path = write_trial(kernel_trial(duration="30s"))
    for sig in (signal.SIGTERM, signal.SIGINT):
        proc, mine, pids = start_and_wait_for_traffic(path, tmp_path / "out")
        os.kill(proc.pid, sig)
        assert proc.wait(30) != 0
        trial_id = mine[0].split("-")[1]
        assert_nothing_left(trial_id)
        assert [pid for pid in pids if is_alive(pid)] == []
        assert not (tmp_path / "out").exists()


def test_sigkill_then_cleanup_leaves_nothing(tmp_path, write_trial):
    """SIGKILL a running trial; `cctestbed cleanup` removes its namespaces and processes."""
    path = write_trial(kernel_trial(duration="30s"))
    proc, mine, pids = start_and_wait_for_traffic(path, tmp_path / "out")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    trial_id = mine[0].split("-")[1]
    assert our_namespaces(trial_id), "namespaces should survive SIGKILL until cleanup"
    p = subprocess.run([*CLI, "cleanup"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    print(f"\ncleanup: {p.stdout.strip()}")
    assert trial_id in p.stdout
    assert_nothing_left(trial_id)
    alive = [pid for pid in pids if is_alive(pid)]
    assert alive == [], f"processes left: {alive}"
    assert not (tmp_path / "out").exists()


def test_side_by_side_with_the_simulator(tmp_path):
    """2 BBR + 2 CUBIC, 80 Mbit/s, 25 ms, 2 BDP, 60 s: utilization within 5 points, BBR share within 15."""
    if not has_bbr():
        pytest.skip("this kernel has no bbr")
    from cctestbed.compare import compare_table
    from cctestbed.runner import run_trial
    from rich.console import Console

    d = kernel_trial(name="bbr-vs-cubic", duration="60s", steady=["20s", "60s"],
                     link={"capacity": "80Mbit", "rtt": "25ms", "queue": "2bdp"},
                     flows=[{"cc": "bbr", "count": 2}, {"cc": "cubic", "count": 2}])
    sim = run_trial(parse_trial(d))
    su, sb = sim.summary["total"]["utilization"], sim.summary["groups"]["bbr"]["share"]

    def close_to_the_simulator(ker: Any) -> None:
        ku, kb = ker.summary["total"]["utilization"], ker.summary["groups"]["bbr"]["share"]
        print(f"utilization sim {100 * su:.1f} % kernel {100 * ku:.1f} %; BBR share sim {100 * sb:.1f} % "
              f"kernel {100 * kb:.1f} %")
        print(json.dumps({"sim": sim.summary["total"], "kernel": ker.summary["total"]}, indent=1))
        assert abs(su - ku) * 100 <= 5
        assert abs(sb - kb) * 100 <= 15

    ker = check_on_quiet_host(lambda: run_kernel_trial(parse_trial(d)), close_to_the_simulator)
    sim.save(tmp_path / "sim")
    ker.save(tmp_path / "kernel")
    console = Console(width=110, record=True)
    console.print(compare_table(sim, ker))
    Path(os.environ.get("CCTESTBED_COMPARE_OUT", tmp_path / "compare.txt")).write_text(console.export_text())
