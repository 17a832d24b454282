"""The kernel's own BPF congestion controls, ``bpf_cubic.c`` and ``bpf_dctcp.c`` of
tools/testing/selftests/bpf/progs, run by the simulator's BPF interpreter against the
simulator's Rust ``cubic`` and ``dctcp``, cell by cell with the fidelity suite's tolerances
(the Rust model in the place of the kernel's reps), on 4-flow trials at 0.5, 2 and 8 BDP.

The objects are built by ``make kernel-selftests`` from Debian's ``linux-source-6.12`` (never
kept in the repository; README, "The kernel's own selftests"). Without them the tests skip.

Measured (80 Mbit/s, 25 ms, 20 s, seeds 1-3, each seed its own phase of the kernel's tick
clock): ``bpf_dctcp.o`` gives the Rust ``dctcp``'s figures exactly in every cell; ``bpf_cubic.o``
is within tolerance in every cell. Its share oscillation's period (``period_s``) is the cell
that moves: with every seed at one tick phase, the two sides gave one realisation each and
differed at 0.5 BDP (Rust 3.69 s, BPF 2.23 s) and 2 BDP (2.91 s against 0.54 s); over three
phases the Rust model gives 1.88-4.0 s (mean 3.29) and 2.67-3.84 s (3.24), the object 2.82-3.56 s
(3.13) and 2.59-4.0 s (3.48). The object differs from tcp_cubic.c in its own arithmetic
(``bpf_cubic.c`` says of itself that it "is not necessarily the same as tcp_cubic.c"): (1) t is
counted in µs with delay_min added unrounded, where tcp_cubic.c adds
``usecs_to_jiffies(delay_min)`` (rounded up to a jiffy), (2) the Reno-friendly count divides
(``ack_cnt / delta``) where tcp_cubic.c loops while ``ack_cnt > delta``, (3) HyStart's round
starts in cong_avoid (6.12) where 6.14+ starts it in ``hystart_update``; with the Rust model's
exact cube root (tcp_cubic.c's table lookup errs by ~0.2 %). A local copy of the object with
those four changed gives the Rust ``cubic``'s trajectory packet for packet over the 20 s of 4
flows, so the socket view the object reads is right; single-packet differences decide which
flows synchronise in a 4-flow sawtooth, as the tick phase does, so the period is compared over
phases.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cctestbed.config import ConfigError, parse_trial
from cctestbed.fidelity.measure import scenario_metrics
from cctestbed.fidelity.verdict import cells_for, tolerances
from cctestbed.runner import run_trial

SELFTESTS = Path(__file__).resolve().parents[1] / "target" / "selftests"
CUBIC_OBJ = SELFTESTS / "bpf_cubic.o"
DCTCP_OBJ = SELFTESTS / "bpf_dctcp.o"


def _why_not() -> str | None:
    if not Path("/usr/src/linux-source-6.12.tar.xz").exists():
        return "Debian's linux-source-6.12 is not installed: `make kernel-selftests` as root installs it and builds the objects"
    if shutil.which("clang") is None or not Path("/usr/include/bpf/bpf_helpers.h").exists():
        return "clang or libbpf-dev is missing (make kernel-deps), so the kernel selftests cannot be compiled"
    if not (CUBIC_OBJ.exists() and DCTCP_OBJ.exists()):
        return f"{CUBIC_OBJ.name}/{DCTCP_OBJ.name} not built in {SELFTESTS}: run `make kernel-selftests`"
    return None


pytestmark = pytest.mark.skipif(_why_not() is not None, reason=_why_not() or "")

SEEDS = (1, 2, 3)
QUEUES = ("0.5bdp", "2bdp", "8bdp")
BASE = {"duration": "20s", "steady": ["8s", "20s"], "link": {"capacity": "80Mbit", "rtt": "25ms"}}
#: DCTCP's marking AQM: CoDel marking every ECN-capable packet whose sojourn exceeds 4 ms (a
#: step threshold, as DCTCP's switches mark), which keeps the queue near it at every buffer size.
MARKING = {"kind": "codel", "ecn": True, "ce_threshold": "4ms"}
CUBIC = f"bpf:{CUBIC_OBJ}"
#: bpf_dctcp.c defines two tcp_congestion_ops (bpf_dctcp_nouse, a registration test, and
#: bpf_dctcp); ``#NAME`` chooses one.
DCTCP = f"bpf:{DCTCP_OBJ}#bpf_dctcp"


def _metrics(cc: str, queue: str, ecn: bool) -> list[dict]:
    out = []
    for seed in SEEDS:
        link = {**BASE["link"], "queue": queue, **({"aqm": MARKING} if ecn else {})}
        group = {"cc": cc, "count": 4, **({"ecn": True} if ecn else {})}
        r = run_trial(parse_trial({**BASE, "name": "x", "seed": seed, "link": link, "flows": [group]}))
        out.append(scenario_metrics(r.flows, r.router, r.summary, r.info))
    return out


_CELLS: dict[tuple[str, str], list] = {}


def _cells(bpf_cc: str, rust_cc: str, queue: str, ecn: bool) -> list:
    key = (bpf_cc, queue)
    if key not in _CELLS:
        _CELLS[key] = cells_for(f"{bpf_cc} vs {rust_cc} at {queue}", _metrics(rust_cc, queue, ecn),
                                _metrics(bpf_cc, queue, ecn), tolerances())
        assert len(_CELLS[key]) >= 8, "the comparison must cover the suite's metrics"
    return _CELLS[key]


def _misses(cells: list, skip: tuple[str, ...] = ()) -> list[str]:
    return [f"{c.metric}: rust {c.kernel_mean}, bpf {c.sim_mean} (allowed {c.allowed})"
            for c in cells if c.verdict != "within" and c.metric not in skip]


@pytest.mark.parametrize("queue", QUEUES)
def test_kernel_bpf_dctcp_is_within_tolerance_of_the_rust_dctcp_under_a_marking_aqm(queue):
    cells = _cells(DCTCP, "dctcp", queue, ecn=True)
    assert _misses(cells) == []


@pytest.mark.parametrize("queue", QUEUES)
def test_kernel_bpf_cubic_is_within_tolerance_of_the_rust_cubic(queue):
    """Every cell but the share period, which is the next test's."""
    assert _misses(_cells(CUBIC, "cubic", queue, ecn=False), skip=("period_s",)) == []


@pytest.mark.parametrize("queue", QUEUES)
def test_kernel_bpf_cubic_share_period(queue):
    assert _misses([c for c in _cells(CUBIC, "cubic", queue, ecn=False) if c.metric == "period_s"]) == []


def test_the_dctcp_trials_are_ecn_trials():
    """bpf_dctcp reacts to marks, not losses: the AQM marks and nothing is dropped."""
    link = {**BASE["link"], "queue": "2bdp", "aqm": MARKING}
    r = run_trial(parse_trial({**BASE, "duration": "5s", "steady": ["2s", "5s"], "name": "x", "link": link,
                               "flows": [{"cc": DCTCP, "count": 4, "ecn": True}]}))
    assert r.router["marks_threshold"].sum() > 0
    assert r.router["drops_overflow"].sum() == 0 and r.flows["retrans_segs"].max() == 0


def test_an_object_with_two_tcp_congestion_ops_needs_a_name():
    link = {**BASE["link"], "queue": "1bdp"}
    with pytest.raises(ConfigError) as e:
        parse_trial({**BASE, "name": "x", "link": link, "flows": [{"cc": f"bpf:{DCTCP_OBJ}", "count": 1}]})
    assert "defines 2 tcp_congestion_ops (bpf_dctcp_nouse, bpf_dctcp); choose one as bpf:" in str(e.value)
    with pytest.raises(ConfigError) as e:
        parse_trial({**BASE, "name": "x", "link": link, "flows": [{"cc": f"bpf:{DCTCP_OBJ}#dctcp2", "count": 1}]})
    assert "has no tcp_congestion_ops named 'dctcp2'; it has bpf_dctcp_nouse, bpf_dctcp" in str(e.value)
