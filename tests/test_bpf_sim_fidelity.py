"""One algorithm, two implementations: the BPF objects the kernel backend registers, run by the
simulator's BPF interpreter, against the simulator's own Rust models, cell by cell with the
fidelity suite's tolerances (the Rust model in the place of the kernel's reps)."""

from __future__ import annotations

import shutil

import pytest

from cctestbed.config import parse_trial
from cctestbed.fidelity.measure import scenario_metrics
from cctestbed.fidelity.verdict import cells_for, tolerances
from cctestbed.kernel import bpfcc
from cctestbed.runner import run_trial

BBR_OBJ = bpfcc.bpf_dir() / "bbr.bpf.o"
RENO_OBJ = bpfcc.bpf_dir() / "reno.bpf.o"
pytestmark = pytest.mark.skipif(
    shutil.which("bpftool") is None or not BBR_OBJ.exists() or not RENO_OBJ.exists(),
    reason="BPF objects not built or bpftool missing: `make build` (clang, bpftool, libbpf-dev via make kernel-deps)",
)

SEEDS = (1, 2, 3)
#: The thesis' operating point (80 Mbit/s, 25 ms, 4 flows), as the fidelity suite's thesis family.
THESIS = {"duration": "25s", "steady": ["10s", "25s"], "link": {"capacity": "80Mbit", "rtt": "25ms"}}


def _metrics(cc: str, queue: str, count: int = 4, base: dict = THESIS) -> list[dict]:
    out = []
    for seed in SEEDS:
        doc = {**base, "name": "x", "seed": seed, "link": {**base["link"], "queue": queue},
               "flows": [{"cc": cc, "count": count}]}
        r = run_trial(parse_trial(doc))
        out.append(scenario_metrics(r.flows, r.router, r.summary, r.info))
    return out


def _misses(bpf_cc: str, rust_cc: str, queue: str, **kw: object) -> list[str]:
    cells = cells_for(f"{bpf_cc} vs {rust_cc} at {queue}", _metrics(rust_cc, queue, **kw), _metrics(bpf_cc, queue, **kw),
                      tolerances())
    assert len(cells) >= 8, "the comparison must cover the suite's metrics"
    return [f"{c.metric}: rust {c.kernel_mean}, bpf {c.sim_mean} (allowed {c.allowed})"
            for c in cells if c.verdict != "within"]


@pytest.mark.parametrize("queue", ["0.5bdp", "2bdp", "8bdp"])
def test_bpf_bbr_port_is_within_tolerance_of_the_rust_bbr_on_the_thesis_family(queue):
    assert _misses("bpf:bbr", "bbr", queue) == []


@pytest.mark.parametrize("variant", bpfcc.BBR_VARIANTS)
def test_each_thesis_variant_of_the_port_is_within_tolerance_of_its_rust_counterpart(variant):
    assert _misses(f"bpf:{variant}", variant, "0.5bdp") == []


@pytest.mark.parametrize("queue", ["0.5bdp", "2bdp"])
def test_bpf_reno_is_within_tolerance_of_the_rust_reno(queue):
    base = {"duration": "25s", "steady": ["10s", "25s"], "link": {"capacity": "20Mbit", "rtt": "40ms"}}
    assert _misses("bpf:reno", "reno", queue, count=2, base=base) == []
