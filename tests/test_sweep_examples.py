"""The sweep files in examples/: each loads, and the thesis' Table 1 has every point."""

from __future__ import annotations

from pathlib import Path

import pytest

from cctestbed.sweep.spec import load_sweep

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SWEEPS = sorted(f for f in EXAMPLES.glob("*.toml") if "[base]" in f.read_text())

QUEUES = ["0.25bdp", "0.5bdp", "0.75bdp", "1bdp", "1.25bdp", "1.5bdp", "1.75bdp", "2bdp", "4bdp", "8bdp"]
MIXES = ["2 bbr", "4 bbr", "8 bbr", "1 bbr + 1 cubic", "2 bbr + 2 cubic", "4 bbr + 4 cubic"]


@pytest.mark.parametrize("path", SWEEPS, ids=[f.stem for f in SWEEPS])
def test_every_sweep_example_loads(path: Path):
    s = load_sweep(path)
    assert s.specs and len({x.key for x in s.specs}) == len(s.specs)


@pytest.mark.parametrize("name, duration_s, steady_s", [("table1", 300, (120, 240)), ("table1-quick", 60, (20, 60))])
def test_table1_has_every_point(name, duration_s, steady_s):
    s = load_sweep(EXAMPLES / f"{name}.toml")
    assert s.name == name and list(s.seeds) == [1, 2, 3]
    assert list(s.columns) == ["capacity", "queue", "flows"]
    points = {(x.values["capacity"], x.values["queue"], x.values["flows"]) for x in s.specs}
    assert points == {(c, q, m) for c in ("40Mbit", "80Mbit", "120Mbit") for q in QUEUES for m in MIXES}
    assert len(s.specs) == 540
    for x in s.specs:
        t = x.trial
        assert t.duration == duration_s * 10**9 and t.steady_ns == (steady_s[0] * 10**9, steady_s[1] * 10**9)
        assert t.link.rtprop_ns == 25_000_000
        assert sum(g.count for g in t.flows) in (2, 4, 8)


def test_random_loss_sweeps_loss_and_algorithm():
    s = load_sweep(EXAMPLES / "random-loss.toml")
    assert list(s.columns) == ["loss", "cc"]
    losses = sorted({x.trial.link.loss.p for x in s.specs})
    assert losses[0] == pytest.approx(1e-5) and losses[-1] == pytest.approx(0.5)
    assert {x.trial.flows[0].cc for x in s.specs} == {"bbr", "cubic"}
    assert all(x.trial.link.capacity == 100_000_000 and x.trial.link.rtprop_ns == 100_000_000 for x in s.specs)
