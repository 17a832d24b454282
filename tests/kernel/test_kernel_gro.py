"""GRO at the receivers, on real Linux and in the simulator (``link.receiver_nic``).

The kernel backend turns GRO on on its hosts' veths as a NIC has it, and the simulator's
receiving NIC joins what one NAPI poll finds. Either way the ACK policy runs once per skb,
so the ACKs a sender gets per data segment it sends tell whether the two receive paths batch
alike. One CUBIC flow at the rates the backend carries, counted in the sender's capture on each
backend: the ratio within 10 % of the simulator's. The figures are printed (``pytest -s``).

At 500 Mbit/s Linux ACKs far less often than the model: 0.234-0.236 ACKs a segment against the
simulator's 0.498, with GRO on or off on the receiver alike, so GRO is not the cause. The
mechanism, read in the 6.18 sources (not yet confirmed by a trace): at a segment's arrival,
``__tcp_ack_snd_check`` ACKs at once for more than one MSS unacknowledged only if the
application has read everything (``rcv_nxt - copied_seq < sk_rcvlowat``) or the window it
could offer now is not below the one offered (``__tcp_select_window(sk) >= tp->rcv_wnd``). In
bulk steady state the offered window is the autotuned buffer's free space, so any unread data
(the arriving segment itself, before the sink's read) fails both, and the ACK is left to
``tcp_cleanup_rbuf`` after the read, which ACKs when more than one MSS is unacknowledged: one
ACK per read. A sink that reads every segment alone so gets one ACK per two segments; one that
wakes late and reads about four at a time (500 Mbit/s here, 23 us a segment) one per four.
The model's application reads every segment the instant it arrives, so the window half of that
test always holds. A strict xfail until the receiving application's pace (its wake-up latency,
and the window with unread data) is modelled.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from kernelutil import check_on_quiet_host, kernel_trial

from cctestbed import _core
from cctestbed.config import parse_trial
from cctestbed.kernel.run import run_kernel_trial
from cctestbed.runner import run_trial
from cctestbed.tseq import capture_inputs


def acks_per_segment(directory: Path) -> tuple[float, int]:
    """ACKs that reached the sender per data segment it sent (its own capture), and the segments."""
    inputs, zero = capture_inputs(directory)
    t = _core.tseq([i for i in inputs if i[0].endswith("snd0.pcap")], 0, zero)
    return len(t["ack_t"]) / len(t["data_t"]), len(t["data_t"])


@pytest.mark.parametrize("rate", [
    "100Mbit",
    pytest.param("500Mbit", marks=pytest.mark.xfail(strict=True, reason=(
        "at 500 Mbit/s Linux ACKs 0.234-0.236 times a segment with GRO on or off, the model 0.498; "
        "likely the sink's batched reads (module docstring)"))),
])
def test_acks_per_segment_with_gro_agree_with_the_simulator(tmp_path: Path, rate: str) -> None:
    if shutil.which("tcpdump") is None:
        pytest.skip("tcpdump is not installed (make kernel-deps)")
    spec = kernel_trial(name=f"gro-{rate}", duration="8s", steady=["2s", "8s"],
                        link={"capacity": rate, "rtt": "10ms", "queue": "1bdp"},
                        capture={"points": ["senders"]})
    trial = parse_trial(spec)
    assert trial.link.receiver_nic.gro, "GRO is on by default"
    sim_ratio, sim_segs = acks_per_segment(run_trial(trial).save(tmp_path / "sim"))
    attempts = iter(range(1, 10))

    def check(r: Any) -> None:
        assert r.extra["host_stack"]["receiver_gro"] == "on"
        ratio, segs = acks_per_segment(r.save(tmp_path / f"kernel-{next(attempts)}"))
        print(f"{rate}: ACKs per data segment, kernel {ratio:.3f} of {segs} segments, "
              f"simulator {sim_ratio:.3f} of {sim_segs}")
        assert segs > 0.5 * sim_segs
        assert abs(ratio / sim_ratio - 1) <= 0.10

    check_on_quiet_host(lambda: run_kernel_trial(trial), check)
