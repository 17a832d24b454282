"""AQM and ECN trials on the kernel backend: refused before anything is created when the kernel
lacks the discipline (probed in a throw-away namespace), with the list of what it has; the
kernel-side AQM measurements skip with that reason."""

from __future__ import annotations

import pytest
from kernelutil import kernel_trial

from cctestbed.config import parse_trial
from cctestbed.kernel import topology as topo
from cctestbed.kernel.backend import TrialRefused, aqm_problems, run_kernel_trial


@pytest.mark.parametrize("kind", ["codel", "fq_codel"])
def test_aqm_trial_is_refused_before_start_with_what_is_available(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Nothing may be built for a refused trial (other runs' namespaces may come and go meanwhile).
    monkeypatch.setattr(topo.Topology, "build", lambda self: pytest.fail("a refused trial built its topology"))
    monkeypatch.setattr(topo, "register", lambda *a: pytest.fail("a refused trial registered itself"))
    trial = parse_trial(kernel_trial(name=f"aqm-{kind}", link={**kernel_trial()["link"], "aqm": kind}))
    with pytest.raises(TrialRefused) as e:
        run_kernel_trial(trial)
    have = topo.available_qdiscs()
    msg = str(e.value)
    print(f"\n{kind}: kernel has {', '.join(have)}; refused: {msg}")
    assert f"link.aqm.kind: '{kind}'" in msg
    if kind not in have:
        assert f"no {kind} qdisc" in msg and ", ".join(have) in msg


def test_ecn_flows_are_refused() -> None:
    trial = parse_trial(kernel_trial(name="ecn", flows=[{"cc": "cubic", "ecn": True}]))
    problems = aqm_problems(trial)
    assert any(p.startswith("flows[0].ecn") for p in problems), problems


def test_fq_codel_on_the_kernel_against_the_simulator() -> None:
    """BBR vs CUBIC under fq_codel on real Linux, once the kernel has the discipline."""
    trial = parse_trial(
        kernel_trial(name="fqc", link={**kernel_trial()["link"], "aqm": "fq_codel"}, flows=[{"cc": "cubic", "count": 2}])
    )
    problems = aqm_problems(trial)
    if problems:
        pytest.skip(problems[0])
    r = run_kernel_trial(trial)  # pragma: no cover - needs a kernel with sch_fq_codel and backend support
    assert r.summary["total"]["utilization"] > 0.9
