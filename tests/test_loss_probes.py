"""The simulator's timeouts and tail loss probes against the kernel's own counters.

Many BBR flows at a few hundred kbit/s in deep buffers have RTTs of seconds that climb for
seconds; a loss probe's timer is never later than the RTO would fire (`tcp_rto_delta_us`), so
how the RTO follows the RTT decides how many probes go out. The kernel backend's `tcp_counters`
(the sender host's TcpExt counters over the whole trial, Linux 6.18) gave these counts; the
simulator matched them once its RTO followed `tcp_rtt_estimator` (the variance held a round
trip) rather than RFC 6298's per-sample variance, which sent 9, 26 and 62-68 probes here.
"""

import pytest

from cctestbed import _core
from cctestbed.config import parse_trial


def _finals(link: dict, flows: int, seed: int) -> list[dict]:
    trial = parse_trial({"name": "low-rate", "duration": "120s", "steady": ["40s", "120s"],
                         "link": link, "flows": [{"cc": "bbr", "count": flows}], "seed": seed})
    return _core.simulate(trial.to_core_json())["final"]["flows"]


# (link, flows, kernel's TCPLossProbes, kernel's TCPTimeouts): the counts of kernel runs of
# the fidelity suite's scenarios (2026-11-28, seed 1, the sender host's counters).
KERNEL = [
    ({"capacity": "256kbit", "rtt": "100ms", "queue": "200bdp"}, 4, (4, 4), (4, 4)),
    ({"capacity": "128kbit", "rtt": "100ms", "queue": "150bdp"}, 8, (20, 21), (20, 21)),
]


# Since the simulator counts the SYN as delivered (tests/test_startup_window.py) the 8-flow
# trial follows the kernel's overflow by overflow for 70 s, and then parts from it; on 10 of 12
# seeds one flow then sends one probe more, at about 117 s, than any of five kernel runs (all
# 20-21 probes and 20-21 timeouts, with the htb bottleneck and with the full link emulator).
EXTRA_LATE_PROBE = pytest.mark.xfail(strict=True, reason="one probe more than the kernel's, at 117 s")
CASES = [pytest.param(*case, seed, id=f"{name}-seed{seed}",
                      marks=[EXTRA_LATE_PROBE] if name.startswith("8bbr") and seed in (2, 3) else [])
         for case, name in zip(KERNEL, ["4bbr-256k-200bdp", "8bbr-128k-150bdp"]) for seed in (1, 2, 3)]


@pytest.mark.parametrize("link,flows,probes,timeouts,seed", CASES)
def test_low_rate_loss_probes_and_timeouts_are_the_kernels(link, flows, probes, timeouts, seed):
    f = _finals(link, flows, seed)
    tlp = sum(x["tlp_count"] for x in f)
    rto = sum(x["rto_count"] for x in f)
    print(f"measured: {flows} BBR, {link['capacity']}, seed {seed}: {tlp} loss probes, {rto} timeouts")
    assert probes[0] <= tlp <= probes[1], f"{tlp} loss probes where the kernel sent {probes}"
    assert timeouts[0] <= rto <= timeouts[1], f"{rto} timeouts where the kernel had {timeouts}"

