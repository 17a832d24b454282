"""Helpers shared by the kernel-backend tests."""

from __future__ import annotations

import copy
import json
import subprocess
from typing import Any, Callable, Optional

import pytest

KERNEL_TRIAL: dict[str, Any] = {
    "name": "k",
    "duration": "10s",
    "seed": 1,
    "link": {"capacity": "80Mbit", "rtt": "25ms", "queue": "1bdp"},
    "flows": [{"cc": "cubic"}],
}


def kernel_trial(**updates: Any) -> dict[str, Any]:
    d = copy.deepcopy(KERNEL_TRIAL)
    d.update(updates)
    return d


#: CPU time a hypervisor may take from this machine, in ms per second of trial (all CPUs), for
#: a kernel trial to measure the path it describes. A stolen CPU stalls the link emulator, the
#: qdiscs and the stacks at once: a CI host that took 380-500 ms during a 12 s trial made the
#: emulator send 1 % of frames more than 1.3 ms late and cost a CUBIC flow 2.3 % of its goodput;
#: a CI run of the BBR Shallow test (its steal not recorded) measured 89.6 % utilization where
#: quiet runs measure 97.1-97.2 %. Locally 60-140 ms per 12 s.
QUIET_HOST_STEAL_MS_PER_S = 20.0

#: The link emulator's median lateness (us, either direction) above which the host wakes a
#: sleeping real-time process too late for sub-millisecond bounds on times: a busy emulator
#: sends half its frames within 34-66 us of their time here, an idle one on a virtual machine
#: that is slow to wake its CPUs 130-260 us late (2026-11-27: a probe every 100 ms then came back
#: 1.0-1.7 ms above the simulator's RTT, 0.58 at its fastest, with this release and the one
#: before alike, where the ping tests allow 1 ms for the echo's turnaround and the emulator).
QUIET_HOST_EMU_P50_US = 100.0


def frames_lost_outside_the_link(result: Any) -> int:
    """:func:`cctestbed.kernel.routerstats.frames_lost_outside_the_link` of a result. (A CI run of the
    DualPI2 test, CPU steal 0 ms, retransmitted 94 segments of an ECN flow that local runs never
    retransmit, with 40 drops at the bottleneck; these counters were not checked then, so whether
    the host lost frames is not known.)"""
    from cctestbed.kernel.routerstats import frames_lost_outside_the_link as lost

    return lost(result.extra.get("linkemu"))


def host_disturbances(result: Any) -> list[str]:
    """What, beside CPU steal, says the host did not keep the path of this kernel trial: frames
    lost outside the emulated link, a link emulator stall as long as the bottleneck's buffer takes
    to drain (:func:`cctestbed.kernel.routerstats.stall_overflow`), or an emulator that sent half
    its frames over :data:`QUIET_HOST_EMU_P50_US` late."""
    from cctestbed.kernel.routerstats import emulator_timing_us, stall_overflow

    found = []
    if lost := frames_lost_outside_the_link(result):
        found.append(f"{lost} frames lost outside the link")
    if stalled := stall_overflow(result.extra.get("linkemu"), result.extra.get("bottleneck")):
        found.append(stalled)
    p50 = emulator_timing_us(result.extra.get("linkemu"), "p50_us") or 0.0
    if p50 > QUIET_HOST_EMU_P50_US:
        found.append(f"the emulator's median lateness {p50:.0f} us")
    return found


def host_was_quiet(result: Any) -> bool:
    """Whether the hypervisor took less than the quiet budget during this kernel trial and
    nothing else disturbed the host (:func:`host_disturbances`)."""
    budget = QUIET_HOST_STEAL_MS_PER_S * result.trial.duration / 1e9
    return (result.extra.get("host_cpu_steal_ms") or 0.0) < budget and not host_disturbances(result)


def check_on_quiet_host(run: Callable[[], Any], check: Callable[[Any], None], attempts: int = 3,
                        trials: Callable[[Any], list[Any]] = lambda r: [r]) -> Any:
    """Run a kernel trial and check its bounds. A miss on a quiet host fails at once; a miss on a
    host that took more than the quiet budget runs the trial again, up to ``attempts`` in all.
    When every attempt ran on a disturbed host and missed, the bounds could not be measured
    there: the test is skipped, saying so with each attempt's steal and the last miss (a CI host
    that took 940-1650 ms in each of three 12 s attempts missed the capacity bound by 3.2-7.5 %).
    For bounds on rates and times, which a stalled virtual machine moves. Every attempt's steal
    is printed. An attempt made of several kernel trials (a comparison of reps) gives them by
    ``trials``: it was quiet when each of them was."""
    steals = []
    for attempt in range(1, attempts + 1):
        r = run()
        runs = trials(r)
        quiet = all(host_was_quiet(t) for t in runs)
        steals.append("/".join(f"{t.extra.get('host_cpu_steal_ms') or 0.0:.0f}" for t in runs) + " ms"
                      + "".join(f" ({why})" for t in runs for why in host_disturbances(t)))
        seconds = runs[0].trial.duration / 1e9
        print(f"\nattempt {attempt}: host CPU steal {steals[-1]} in "
              f"{seconds:g} s{' each' if len(runs) > 1 else ''}{'' if quiet else ' (disturbed)'}")
        try:
            check(r)
            return r
        except AssertionError as miss:
            if quiet:
                raise
            print(f"missed on a disturbed host: {miss}")
            last_miss = miss
    pytest.skip(f"not measurable here: the host was disturbed in each of {attempts} attempts "
                f"(CPU steal {', '.join(steals)} in {seconds:g} s each); last miss: {last_miss}")


def emulator_stall_ms(result: Any) -> float:
    """:func:`cctestbed.kernel.routerstats.emulator_stall_ms` of a result."""
    from cctestbed.kernel.routerstats import emulator_stall_ms as stall_ms

    return stall_ms(result.extra.get("linkemu"))


def metrics_of(result: Any) -> dict[str, Any]:
    """The fidelity suite's metrics of one trial result, from either backend."""
    from cctestbed.fidelity.measure import scenario_metrics
    from cctestbed.summary import TrialInfo

    return scenario_metrics(result.flows, result.router, result.summary,
                            TrialInfo.from_trial(result.trial, backend=result.trial.backend))


def run_with_sim_schema(**updates: Any) -> Any:
    """The default kernel trial with ``updates``, run; its telemetry has the simulator's schema."""
    from cctestbed.config import parse_trial
    from cctestbed.kernel.run import run_kernel_trial
    from cctestbed.schema import flow_schema, router_schema

    r = run_kernel_trial(parse_trial(kernel_trial(**updates)))
    assert dict(r.flows.schema) == flow_schema(r.trial) and dict(r.router.schema) == router_schema(), \
        "the simulator's schema"
    return r


def has_bbr() -> bool:
    from cctestbed.kernel.topology import load_algorithm

    return load_algorithm("bbr")


def our_namespaces(trial_id: Optional[str] = None) -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    names = [line.split()[0] for line in out.splitlines() if line.strip()]
    prefix = f"cct-{trial_id}-" if trial_id else "cct-"
    return [n for n in names if n.startswith(prefix) and "pytest" not in n]


def registry_entry(pid: int) -> Optional[dict[str, Any]]:
    """The trial registry entry (``/run/cctestbed/<id>.json``) owned by process ``pid``, if it
    has written one yet: how a test finds its own trial among others running at once."""
    from cctestbed.kernel.topology import REGISTRY

    for entry in REGISTRY.glob("*.json"):
        try:
            doc = json.loads(entry.read_text())
        except (OSError, ValueError):
            continue
        if doc.get("pid") == pid:
            return doc
    return None
