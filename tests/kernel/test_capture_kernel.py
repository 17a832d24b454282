"""The kernel backend's own captures, analysed, against its TCP_INFO telemetry (issue 12):
goodput within 1 %, retransmissions within 5 % (relative), RTT p50 within 1 ms.

One 15 s run of one CUBIC flow in a 0.5 BDP queue with 0.1 % random loss, so that it
retransmits a few hundred segments whatever CUBIC's cycle does. The measured figures are
printed (``pytest -s`` shows them). The bounds are checked on a quiet host
(``check_on_quiet_host``).
"""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path
from typing import Any

import pytest
from kernelutil import check_on_quiet_host, kernel_trial

from cctestbed.captures import analyze_captures
from cctestbed.config import parse_trial
from cctestbed.kernel.run import run_kernel_trial


def test_analysed_captures_agree_with_tcp_info(tmp_path: Path) -> None:
    if shutil.which("tcpdump") is None:
        pytest.skip("tcpdump is not installed (make kernel-deps)")
    trial = parse_trial(kernel_trial(name="capana", duration="15s", steady=["5s", "15s"],
                                     link={"capacity": "80Mbit", "rtt": "25ms", "queue": "0.5bdp", "loss": "0.1%"},
                                     capture=True))
    attempts = itertools.count(1)

    def check(r: Any) -> None:
        """The capture's figures against TCP_INFO's; on a quiet host (check_on_quiet_host), since
        they are two clocks' views of the same run: a host that stalls the sampler moves the
        moment its last TCP_INFO sample is taken, and with it how far the capture is ahead."""
        d = r.save(tmp_path / f"kernel-{next(attempts)}")
        a = analyze_captures([d / "snd0.pcap", d / "rcv0.pcap"], trial=r.trial)
        k, c = r.summary["flows"][0], a.summary["flows"][0]
        conn = a.report["connections"][0]
        print(f"kernel vs capture: goodput {k['goodput_bps'] / 1e6:.3f} vs {c['goodput_bps'] / 1e6:.3f} Mbit/s "
              f"({100 * (c['goodput_bps'] / k['goodput_bps'] - 1):+.2f} %), retrans {k['retrans_pct']:.3f} vs "
              f"{c['retrans_pct']:.3f} % (segments {r.summary['total']['retrans_pct']:.3f}), RTT p50 "
              f"{k['rtt_p50_ms']:.2f} vs {c['rtt_p50_ms']:.2f} ms; sender capture {conn['sender_capture']}, "
              f"receiver {conn['receiver_capture']}")
        assert conn["sender_capture"].endswith("snd0.pcap") and conn["receiver_capture"].endswith("rcv0.pcap")
        assert k["retrans_pct"] > 0.05, "the trial must retransmit for the check to mean anything"
        assert abs(c["goodput_bps"] / k["goodput_bps"] - 1) <= 0.01
        assert abs(c["retrans_pct"] / k["retrans_pct"] - 1) <= 0.05
        assert abs(c["rtt_p50_ms"] - k["rtt_p50_ms"]) <= 1.0
        # the captures hold the whole trial, its last second too (tcpdump stopped without losing it)
        assert a.flows["time_s"].max() >= 14.9
        # The capture counts the receiver's in-order bytes, TCP_INFO the sender's cumulatively
        # ACKed ones: at the end the receiver is ahead by what the ACKs still carry, at most what
        # the link delivers in one RTT plus one sample interval. A lost tail would put the capture
        # behind. (A CI host running builds beside the test once saw 388 KB against 350 KB.)
        ahead = a.flows["delivered_bytes"][-1] - r.flows["delivered_bytes"][-1]
        one_rtt = r.trial.link.capacity * (r.trial.link.rtt + r.trial.sample_interval) / 1e9 / 8
        assert -0.005 * r.flows["delivered_bytes"][-1] <= ahead <= one_rtt, (ahead, one_rtt)

    check_on_quiet_host(lambda: run_kernel_trial(trial), check)


def test_router_captures_through_the_link_emulator_read_back_as_its_queue(tmp_path: Path) -> None:
    """The router's capture points on the kernel (issue 25): asking for ``ingress`` and
    ``egress`` puts the trial on the full link emulator, which writes ``rtr-in.pcap`` and
    ``rtr-out.pcap`` as the simulator does. Read back by ``analyze``, they give the queue and
    the drops the emulator's model counted: every arrival and departure recorded once, every drop
    (a drop-tail overflow of two CUBIC flows in 0.5 BDP) within 2 packets of the model's total,
    the queue's mean within one packet of the model's samples."""
    if shutil.which("tcpdump") is None:
        pytest.skip("tcpdump is not installed (make kernel-deps)")
    trial = parse_trial(kernel_trial(
        name="rtrcap", duration="12s", steady=["4s", "12s"],
        link={"capacity": "20Mbit", "rtt": "20ms", "queue": "0.5bdp"},
        flows=[{"cc": "cubic", "count": 2}],
        capture={"points": ["senders", "receivers", "ingress", "egress"]}))
    attempts = itertools.count(1)

    def check(r: Any) -> None:
        d = r.save(tmp_path / f"kernel-{next(attempts)}")
        assert r.extra["link_emulator"] == "full"
        a = analyze_captures(sorted(d.glob("snd*.pcap")) + sorted(d.glob("rcv*.pcap")),
                             ingress=d / "rtr-in.pcap", egress=d / "rtr-out.pcap", trial=r.trial)
        model, cap = r.router, a.router
        # the model's own totals: the captures run until the emulator stops, after the last
        # sample of router.parquet
        totals = r.extra["linkemu"]["model"]["forward"]["router"]
        model_drops = int(totals["drops"]["overflow"])
        cap_drops = int(cap["drops_overflow"][-1])
        q_model, q_cap = float(model["queue_pkts"].mean()), float(cap["queue_pkts"].mean())
        emu = r.extra["linkemu"]["model"]["capture"]
        print(f"router capture: {emu['rtr_in_frames']} in, {emu['rtr_out_frames']} out; drops model "
              f"{model_drops} capture {cap_drops}; queue mean model {q_model:.2f} capture {q_cap:.2f} pkts")
        assert (emu["rtr_in_frames"], emu["rtr_out_frames"]) == (totals["arrivals_pkts"], totals["departures_pkts"])
        assert model_drops > 10, "the queue must overflow for the check to mean anything"
        assert abs(cap_drops - model_drops) <= 2
        assert abs(q_cap - q_model) <= 1.0
        # the analysed flows carry the two connections, each through the router
        assert len(a.summary["flows"]) == 2

    check_on_quiet_host(lambda: run_kernel_trial(trial), check)
