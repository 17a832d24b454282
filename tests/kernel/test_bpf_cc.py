"""BPF congestion controls on the kernel backend: the BPF port of BBR against the built-in bbr,
the thesis' variants (each loads, runs as its parameters say, and unloads), nothing left
registered after SIGTERM, Ctrl-C or SIGKILL + cleanup, and the README's Reno as a user object.

Needs root, kernel BTF with struct_ops, bpftool, and the objects `make build` compiles (clang,
libbpf-dev); otherwise skipped with the reason. The full port-vs-built-in comparison (4
scenarios x 3 reps x 60 s each side, about 25 minutes) is marked ``bpf_full`` and runs only when
asked for: ``pytest tests/kernel/test_bpf_cc.py -m bpf_full``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Optional

import polars as pl
import pytest
from kernelutil import check_on_quiet_host, has_bbr, kernel_trial, metrics_of, registry_entry

from cctestbed.config import parse_trial
from cctestbed.fidelity.verdict import cells_for, tolerances
from cctestbed.kernel import bpfcc
from cctestbed.kernel.run import run_kernel_trial
from cctestbed.kernel.topology import available_algorithms

CLI = [sys.executable, "-m", "cctestbed.cli"]
ROOT = Path(__file__).resolve().parents[2]


def _bpf_unavailable() -> Optional[str]:
    why = bpfcc.kernel_support()
    if why:
        return why
    missing = [n for n in ("bbr", "reno") if not (bpfcc.bpf_dir() / f"{n}.bpf.o").exists()]
    if missing:
        return f"BPF objects not built ({', '.join(missing)}): run `make build` (needs clang, bpftool, libbpf-dev)"
    return None


pytestmark = pytest.mark.skipif(os.geteuid() != 0 or _bpf_unavailable() is not None,
                                reason=_bpf_unavailable() or "needs root")

BDP_PKTS = 80e6 * 0.025 / 8 / 1448  # 80 Mbit/s x 25 ms in full-size segments


def ours() -> set[str]:
    """Congestion controls registered under the testbed's names, by both of the kernel's lists."""
    names = {n for n in bpfcc.registered().values() if bpfcc.is_testbed_name(n)}
    return names | {n for n in available_algorithms() if bpfcc.is_testbed_name(n)}


def steady(result: Any, col: str) -> pl.Series:
    t0, t1 = (x / 1e9 for x in result.trial.steady_ns)
    return result.flows.filter((pl.col("time_s") > t0) & (pl.col("time_s") <= t1))[col]


@dataclass
class Comparison:
    cells: list[Any]
    #: every kernel trial the comparison ran, both sides
    runs: list[Any]

    def misses(self, metrics: Optional[set[str]] = None) -> list[str]:
        return [f"{c.metric}: built-in {c.kernel_mean} port {c.sim_mean} (allowed {c.allowed})"
                for c in self.cells if c.verdict != "within" and (metrics is None or c.metric in metrics)]


def compare(scenario: dict[str, Any], reps: int) -> Comparison:
    """The built-in bbr (the reference, in the verdict's kernel column) against the BPF port
    (``bpf:bbr``, in its simulator column): every fidelity cell of the scenario."""
    runs: dict[str, list[dict[str, Any]]] = {"bbr": [], "bpf:bbr": []}
    results = []
    for rep in range(1, reps + 1):
        for cc in runs:
            flows = [{**f, "cc": cc} if f["cc"] == "bbr" else f for f in scenario["flows"]]
            r = run_kernel_trial(parse_trial({**scenario, "flows": flows, "seed": rep}))
            in_use = {v for s in r.extra["senders"].values() for v in s.get("cc", {}).values()}
            assert ("bbr" in in_use) == (cc == "bbr") and any(bpfcc.is_testbed_name(v) for v in in_use) == (cc != "bbr")
            runs[cc].append(metrics_of(r))
            results.append(r)
    cells = cells_for(scenario["name"], runs["bbr"], runs["bpf:bbr"], tolerances())
    for c in cells:
        print(f"{c.scenario} {c.metric}: built-in {c.kernel_mean} port {c.sim_mean} -> {c.verdict}")
    return Comparison(cells, results)


def scenario(name: str, queue: str, flows: list[dict[str, Any]], duration: str, steady: list[str]) -> dict[str, Any]:
    return kernel_trial(name=name, duration=duration, steady=steady,
                        link={"capacity": "80Mbit", "rtt": "25ms", "queue": queue}, flows=flows)


def test_port_matches_builtin_bbr_reduced():
    """4 BBR flows, 0.5 BDP, 20 s: the BPF port and the built-in bbr agree on utilization, loss,
    queue and RTT within the fidelity tolerances (two reps each, so that the built-in's own spread
    counts as the verdict's does; the full comparison is bpf_full). 0.5 BDP because there BBR's
    loss is steady (9-11 %) from the first seconds; in deeper queues a short trial's loss is
    start-up's, and varies from run to run."""
    if not has_bbr():
        pytest.skip("this kernel has no built-in bbr to compare with")
    wanted = {"utilization_pct", "loss_pct", "queue_mean_bdp", "rtt_p50_ms"}

    def check(c: Comparison) -> None:
        assert {x.metric for x in c.cells} >= wanted
        misses = c.misses(wanted)
        assert not misses, misses

    # Both sides' loss moves with a disturbed host (a CI run measured 11.1 % built-in against
    # 6.9 % port, where quiet runs measure 9.4 against 9.3): the quiet-host rule decides.
    check_on_quiet_host(lambda: compare(scenario("port-0.5bdp", "0.5bdp", [{"cc": "bbr", "count": 4, "stagger": "100ms"}],
                                                 "20s", ["8s", "20s"]), reps=2),
                        check, trials=lambda c: c.runs)


FULL = [
    ("port-4bbr-0.5bdp", "0.5bdp", [{"cc": "bbr", "count": 4, "stagger": "100ms"}]),
    ("port-4bbr-2bdp", "2bdp", [{"cc": "bbr", "count": 4, "stagger": "100ms"}]),
    ("port-4bbr-8bdp", "8bdp", [{"cc": "bbr", "count": 4, "stagger": "100ms"}]),
    ("port-2bbr-2cubic-2bdp", "2bdp", [{"cc": "bbr", "count": 2, "group": "bbr", "stagger": "100ms"},
                                       {"cc": "cubic", "count": 2, "start": "200ms", "stagger": "100ms"}]),
]


@pytest.mark.bpf_full
@pytest.mark.parametrize("name,queue,flows", FULL, ids=[f[0] for f in FULL])
def test_port_matches_builtin_bbr_full(name, queue, flows):
    """The issue's comparison: 3 reps of 60 s on each side, every fidelity cell within."""
    if not has_bbr():
        pytest.skip("this kernel has no built-in bbr to compare with")
    def check(c: Comparison) -> None:
        assert not c.misses(), c.misses()

    check_on_quiet_host(lambda: compare(scenario(name, queue, flows, "60s", ["20s", "60s"]), reps=3),
                        check, trials=lambda c: c.runs)


# What each variant's parameters make of the cwnd, per the simulator's model of the same trial.
# One flow in a 4 BDP queue (no loss, so the PROBE_BW target binds): cwnd_gain x BDP plus the
# quantization budget (about 0.13 BDP here); BBR Shallow's 1.5 against the stock 2 (the stable
# RTprop estimator changes nothing with one flow). The adaptive cap acts on loss, so 4 flows in a
# 0.5 BDP queue: the sum of their cwnds, which stock BBR keeps near 2.5 BDP (simulator: 2.52),
# falls as the gains are lowered (simulator: 1.59).
VARIANTS = [
    ("bbr-shallow", {"bbr_cwnd_gain": 384, "bbr_adaptive_cap": 0, "bbr_stable_rtprop": 0}, 1, "4bdp", (1.35, 1.85)),
    ("bbr-adaptive", {"bbr_cwnd_gain": 512, "bbr_adaptive_cap": 1, "bbr_stable_rtprop": 0}, 4, "0.5bdp", (1.1, 2.05)),
    ("bbr-stable-rtprop", {"bbr_cwnd_gain": 512, "bbr_adaptive_cap": 0, "bbr_stable_rtprop": 1}, 1, "4bdp", (1.85, 2.5)),
]


@pytest.mark.parametrize("cc,values,count,queue,cwnd_bdp", VARIANTS, ids=[v[0] for v in VARIANTS])
def test_variant_loads_runs_and_unloads(cc, values, count, queue, cwnd_bdp):
    before = ours()
    flows = [{"cc": cc, "count": count, "stagger": "100ms"}]
    trial = parse_trial(scenario(cc, queue, flows, "15s", ["7s", "15s"]))

    def check(r: Any) -> None:
        bpf = r.extra["bpf"]["0"]
        assert bpfcc.is_testbed_name(bpf["name"]) and bpf["map_id"] is not None
        assert {k: bpf["values"][k] for k in values} == values
        assert r.extra["senders"]["0"]["cc"] == {str(i): bpf["name"] for i in range(count)}, "flows ran under the registered name"
        assert bpf["name"] not in ours() and ours() <= before, "unregistered at the end"
        t0, t1 = (x / 1e9 for x in r.trial.steady_ns)
        total = r.flows.filter((pl.col("time_s") > t0) & (pl.col("time_s") <= t1)).group_by("time_s").agg(pl.col("cwnd_pkts").sum())
        cwnd = total["cwnd_pkts"].median() / BDP_PKTS
        util = r.summary["total"]["utilization"]
        print(f"{cc}: median cwnd (sum of {count} flows) {cwnd:.2f} BDP, utilization {100 * util:.1f} %, "
              f"loss {r.summary['total']['loss_pct']:.2f} %")
        assert cwnd_bdp[0] <= cwnd <= cwnd_bdp[1]
        assert util >= 0.9

    r = check_on_quiet_host(lambda: run_kernel_trial(trial), check)
    assert steady(r, "pacing_rate_bps").drop_nulls().len() > 0, "BBR sets a pacing rate"


def test_bbr_with_params_runs_as_the_port():
    """bbr with params is the port with those params: cwnd_gain = 3 holds a larger cwnd than
    the 1.5 of BBR Shallow (test above) in the same queue."""
    d = scenario("bbr-params", "4bdp", [{"cc": "bbr", "params": {"cwnd_gain": 3.0, "tso_budget": 0}}], "12s",
                 ["6s", "12s"])
    r = run_kernel_trial(parse_trial(d))
    v = r.extra["bpf"]["0"]["values"]
    assert v["bbr_cwnd_gain"] == 768 and v["bbr_tso_budget"] == 0
    cwnd = steady(r, "cwnd_pkts").median() / BDP_PKTS
    print(f"\nbbr cwnd_gain = 3: median cwnd {cwnd:.2f} BDP")
    assert 2.7 <= cwnd <= 3.3


def _start(path: Path, out: Path) -> tuple[subprocess.Popen, str]:
    """Starts `cctestbed run --backend kernel`; returns it once its congestion control is registered."""
    proc = subprocess.Popen([*CLI, "run", str(path), "--backend", "kernel", "-o", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        ops = (registry_entry(proc.pid) or {}).get("struct_ops", [])
        if ops and ops[0].get("id") is not None and ops[0]["name"] in available_algorithms():
            time.sleep(3.0)  # traffic under way
            return proc, ops[0]["name"]
        time.sleep(0.2)
    proc.kill()
    raise AssertionError("the trial did not register its congestion control")


def test_nothing_stays_registered_after_sigterm_ctrl_c_or_sigkill_and_cleanup(tmp_path, write_trial):
    path = write_trial(kernel_trial(duration="40s", flows=[{"cc": "bbr-shallow"}]))
    for sig in (signal.SIGTERM, signal.SIGINT):
        proc, name = _start(path, tmp_path / "out")
        os.kill(proc.pid, sig)
        assert proc.wait(30) != 0
        assert name not in available_algorithms() and name not in bpfcc.registered().values(), signal.Signals(sig).name
    proc, name = _start(path, tmp_path / "out")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert name in available_algorithms(), "a SIGKILLed run leaves its congestion control until cleanup"
    p = subprocess.run([*CLI, "cleanup"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    print(f"\ncleanup: {p.stdout.strip()}")
    assert name in p.stdout
    assert name not in available_algorithms() and name not in bpfcc.registered().values()
    assert not (tmp_path / "out").exists()


def test_cleanup_unregisters_an_unrecorded_testbed_name(tmp_path):
    """A congestion control under the testbed's names that no live trial claims (a run killed
    between registering and recording it) goes with cleanup; others' are left alone."""
    obj = bpfcc.inspect(bpfcc.bpf_dir() / "reno.bpf.o")
    for name in ("cctabcdef7", "notours1"):
        (tmp_path / f"{name}.o").write_bytes(bpfcc.build(obj, name, {}))
        bpfcc.register(tmp_path / f"{name}.o")
    try:
        p = subprocess.run([*CLI, "cleanup"], capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        assert "cctabcdef7" in p.stdout
        assert "cctabcdef7" not in available_algorithms()
        assert "notours1" in available_algorithms()
    finally:
        for i, n in bpfcc.registered().items():
            if n in ("cctabcdef7", "notours1"):
                bpfcc.unregister(i, n)


def test_readme_reno_example_runs(tmp_path, write_trial):
    """The README's example: compile bpf/reno.bpf.c as the README says, run it as a user
    object with a parameter. beta_pct = 70 keeps 70 % of the window at each loss, so the
    sawtooth's bottom sits near 0.7 of its top (Reno's 50 % would put it near 0.5)."""
    obj = tmp_path / "reno.bpf.o"
    p = subprocess.run(["clang", "-g", "-O2", "-target", "bpf", "-I", str(bpfcc.bpf_dir()), "-c",
                        str(ROOT / "bpf" / "reno.bpf.c"), "-o", str(obj)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    bottoms = {}
    for beta in (50, 70):
        d = kernel_trial(duration="25s", steady=["8s", "25s"], link={"capacity": "20Mbit", "rtt": "25ms", "queue": "1bdp"},
                         flows=[{"cc": f"bpf:{obj}", "params": {"beta_pct": beta}}])
        r = run_kernel_trial(parse_trial(d))
        assert r.extra["bpf"]["0"]["values"] == {"beta_pct": beta}
        cwnd = steady(r, "cwnd_pkts")
        bottoms[beta] = cwnd.quantile(0.02) / cwnd.max()
        print(f"\nbeta_pct {beta}: cwnd bottom/top {bottoms[beta]:.2f}, utilization {100 * r.summary['total']['utilization']:.1f} %")
        assert abs(bottoms[beta] - beta / 100) <= 0.12
    # an unknown parameter is refused before anything is created, naming what is valid
    path = write_trial(kernel_trial(flows=[{"cc": f"bpf:{obj}", "params": {"beta": 70}}]))
    p = subprocess.run([*CLI, "run", str(path), "--backend", "kernel", "-o", str(tmp_path / "out")],
                       capture_output=True, text=True)
    assert p.returncode == 2
    assert "flows[0].params.beta" in p.stderr and "valid are beta_pct" in p.stderr
    assert not (tmp_path / "out").exists()


def test_an_object_declared_for_link_registration_registers_and_unregisters(tmp_path):
    """Objects written for BPF-link registration (SEC(".struct_ops.link"), the form newer
    examples use) are registered without a link like the others, so their lifetime is the
    trial's, and they unregister."""
    src = (ROOT / "bpf" / "reno.bpf.c").read_text().replace('SEC(".struct_ops")', 'SEC(".struct_ops.link")')
    assert ".struct_ops.link" in src
    (tmp_path / "reno_link.bpf.c").write_text(src)
    obj = tmp_path / "reno_link.bpf.o"
    p = subprocess.run(["clang", "-g", "-O2", "-target", "bpf", "-I", str(bpfcc.bpf_dir()), "-c",
                        str(tmp_path / "reno_link.bpf.c"), "-o", str(obj)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    parsed = bpfcc.inspect(obj)
    assert parsed.link_names, "the object's map is in .struct_ops.link"
    patched = tmp_path / "patched.bpf.o"
    patched.write_bytes(bpfcc.build(parsed, "cctfeed000", {"beta_pct": 60}))
    map_id = bpfcc.register(patched)
    try:
        assert "cctfeed000" in available_algorithms()
        time.sleep(0.5)
        assert "cctfeed000" in available_algorithms(), "still registered after bpftool exited"
    finally:
        assert bpfcc.unregister(map_id, "cctfeed000")
    assert "cctfeed000" not in available_algorithms()
