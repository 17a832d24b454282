"""GRO at the receivers, on real Linux and in the simulator (``link.receiver_nic``).

The kernel backend turns GRO on on its hosts' veths as a NIC has it, and the simulator's
receiving NIC joins what one NAPI poll finds. Either way the ACK policy runs once per skb,
so the ACKs a sender gets per data segment it sends tell whether the two receive paths batch
alike. One CUBIC flow at the rates the backend carries, counted in the sender's capture on each
backend: the ratio within 10 % of the simulator's. The figures are printed (``pytest -s``).

Linux ACKs data the application has not read yet only while the window it could offer is
still the one offered (``__tcp_ack_snd_check``: ``rcv_nxt - copied_seq < sk_rcvlowat`` or
``__tcp_select_window(sk) >= tp->rcv_wnd``). Once ``tcp_grow_window`` has raised ``rcv_ssthresh``
to the free space, any unread segment fails both, and the ACK waits for the read
(``tcp_cleanup_rbuf``): one ACK per read. The kernel backend's sink showed it: at 500 Mbit/s it
read 80,646 times and the sender got 80,817 ACKs (0.243 a segment, 4.1 segments a read), where an
application that reads at once gets one ACK per two segments. So the comparison at 500 Mbit/s
fixes the application's pace on both backends (``read_interval``, the sink reading at the same
times as the simulator's application). With the default reader the simulator reads every
segment at once where the sink, a Python loop, takes 75-100 us a turn on a busy host; the last
test holds Linux to one ACK per read there, counted against the sink's reads.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Optional

import pytest
from kernelutil import check_on_quiet_host, kernel_trial

from cctestbed import _core
from cctestbed.config import parse_trial
from cctestbed.kernel.run import run_kernel_trial
from cctestbed.runner import run_trial
from cctestbed.tseq import capture_inputs


def tseq_of(directory: Path) -> dict[str, Any]:
    """The first flow's time-sequence record from its sender's capture."""
    inputs, zero = capture_inputs(directory)
    return _core.tseq([i for i in inputs if i[0].endswith("snd0.pcap")], 0, zero)


def acks_per_segment(directory: Path) -> tuple[float, int]:
    """ACKs that reached the sender per data segment it sent (its own capture), and the segments."""
    t = tseq_of(directory)
    return len(t["ack_t"]) / len(t["data_t"]), len(t["data_t"])


def gro_trial(rate: str, read_interval: Optional[str]) -> Any:
    """One CUBIC flow at ``rate``, 10 ms, 1 BDP, 8 s, the senders captured."""
    pace = {"read_interval": read_interval} if read_interval else {}
    return parse_trial(kernel_trial(name=f"gro-{rate}", duration="8s", steady=["2s", "8s"],
                                    link={"capacity": rate, "rtt": "10ms", "queue": "1bdp"},
                                    flows=[{"cc": "cubic", **pace}], capture={"points": ["senders"]}))


@pytest.mark.parametrize("rate,read_interval", [("100Mbit", None), ("500Mbit", "500us")])
def test_acks_per_segment_with_gro_agree_with_the_simulator(tmp_path: Path, rate: str,
                                                            read_interval: Optional[str]) -> None:
    if shutil.which("tcpdump") is None:
        pytest.skip("tcpdump is not installed (make kernel-deps)")
    trial = gro_trial(rate, read_interval)
    assert trial.link.receiver_nic.gro, "GRO is on by default"
    sim_ratio, sim_segs = acks_per_segment(run_trial(trial).save(tmp_path / "sim"))
    attempts = iter(range(1, 10))

    def check(r: Any) -> None:
        assert r.extra["host_stack"]["receiver_gro"] == "on"
        ratio, segs = acks_per_segment(r.save(tmp_path / f"kernel-{next(attempts)}"))
        print(f"{rate}, read_interval {read_interval}: ACKs per data segment, kernel {ratio:.3f} of {segs} segments, "
              f"simulator {sim_ratio:.3f} of {sim_segs}")
        assert segs > 0.5 * sim_segs
        assert abs(ratio / sim_ratio - 1) <= 0.10

    check_on_quiet_host(lambda: run_kernel_trial(trial), check)


def test_linux_acks_once_per_read_when_reads_find_several_segments(tmp_path: Path) -> None:
    # the default sink at 500 Mbit/s reads several segments a turn; each read's ACK is the only
    # one (the reason the default application's comparison would fail: the simulator's reads
    # every segment at once and ACKs every second one)
    if shutil.which("tcpdump") is None:
        pytest.skip("tcpdump is not installed (make kernel-deps)")
    trial = gro_trial("500Mbit", None)
    attempts = iter(range(1, 10))

    def check(r: Any) -> None:
        (reads,) = r.extra["sink_reads"].values()
        t = tseq_of(r.save(tmp_path / f"kernel-{next(attempts)}"))
        acks = len(t["ack_t"])
        print(f"500 Mbit/s, default reader: {reads['segments_per_read']:.2f} segments a read, "
              f"{acks} ACKs for {reads['reads']} reads")
        assert reads["segments_per_read"] > 2
        assert abs(acks / reads["reads"] - 1) <= 0.10

    check_on_quiet_host(lambda: run_kernel_trial(trial), check)
