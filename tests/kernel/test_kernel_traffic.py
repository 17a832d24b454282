"""udp streams, ping probes and pacing caps on real Linux (kernel/datagrams.py, SO_MAX_PACING_RATE):
the checks the simulator's tests make (crates/cctestbed-sim/tests/datagrams.rs), with the
tolerances real time needs. Measured figures are printed (``pytest -s`` shows them)."""

from __future__ import annotations

from typing import Any

import polars as pl
import pytest
from kernelutil import check_on_quiet_host, has_bbr, kernel_trial, run_with_sim_schema

from cctestbed.config import parse_trial
from cctestbed.kernel.checks import TrialRefused, trial_problems
from cctestbed.kernel.run import run_kernel_trial
from cctestbed.runner import run_trial


def test_udp_leaves_tcp_the_rest_and_reports_its_loss_and_delay():
    cap, rate = 50e6, 20e6

    def check(r: Any) -> None:
        s = r.summary
        tcp_ip = s["groups"]["cubic"]["goodput_bps"] * 1500 / 1448
        udp = s["udp"]["bg"]
        print(f"\nkernel: cubic beside 20 Mbit/s udp on 50: {tcp_ip / 1e6:.3f} Mbit/s at IP level "
              f"({100 * (tcp_ip / (cap - rate) - 1):+.2f} % of C - r); udp delivered {udp['delivered_bps'] / 1e6:.3f} "
              f"Mbit/s, loss {udp['loss_pct']:.3f} %, one-way delay p50 {udp['owd_p50_ms']:.2f} p95 {udp['owd_p95_ms']:.2f} ms")
        assert abs(tcp_ip / (cap - rate) - 1) <= 0.02
        sent_payload = rate * (1500 - 28) / 1500
        assert abs(udp["delivered_bps"] / sent_payload - 1 + udp["loss_pct"] / 100) < 0.02
        assert 10.0 <= udp["owd_p50_ms"] <= udp["owd_p95_ms"] <= 10.0 + 20.0 + 2.0, "propagation plus at most the queue"
        flows = r.flows.filter(pl.col("kind") == "udp")
        assert flows["lost_segs"].null_count() == 0 and flows["owd_ms"].drop_nans().len() > 0.9 * len(flows)

    doc = dict(name="udp", duration="14s", steady=["4s", "14s"], link={"capacity": "50Mbit", "rtt": "20ms", "queue": "1bdp"},
               flows=[{"cc": "cubic"}, {"kind": "udp", "rate": "20Mbit", "group": "bg"}])
    check_on_quiet_host(lambda: run_with_sim_schema(**doc), check)


def test_ping_measures_the_base_rtt_and_then_the_queue():
    # The window starts at 1.5 s: in some runs the first group's host loses what it sends in the
    # first few hundred milliseconds after the start (a TCP flow of that group then sees its SYN
    # retransmitted at 1 s); that is the topology's, not the probes'.
    want = 30.0 + 84 * 8 / 20e6 * 1e3

    def base_rtt(empty: Any) -> None:
        p = empty.summary["ping"]["ping"]
        print(f"kernel: ping on an empty 20 Mbit/s, 30 ms path: RTT p50 {p['rtt_p50_ms']:.3f} "
              f"p99 {p['rtt_p99_ms']:.3f} ms (base + serialization {want:.3f})")
        # the echo's turnaround (a Python process woken by select) and the link emulator's timing
        # add a little, never less: +0.43 to +0.53 ms in four runs on 2026-11-23, where +0.5 ms had
        # been the bound; up to 1 ms, the per-direction timing error test_capacity_and_min_rtt allows
        assert want - 0.05 <= p["rtt_p50_ms"] <= want + 1.0
        lost = empty.flows.filter(pl.col("lost_segs").diff().fill_null(0) > 0).select("time_s", "sent_segs", "lost_segs")
        assert p["loss_pct"] == 0.0, f"probes lost on an empty path: {lost}"

    check_on_quiet_host(lambda: run_with_sim_schema(
        name="ping-empty", duration="4s", steady=["1.5s", "4s"], link={"capacity": "20Mbit", "rtt": "30ms", "queue": "1bdp"},
        flows=[{"kind": "ping", "interval": "10ms"}]), base_rtt)

    def behind_the_queue(loaded: Any) -> None:
        rtt = loaded.flows.filter((pl.col("kind") == "ping") & (pl.col("time_s") > 3.0))["rtt_ms"].drop_nans().mean()
        router = loaded.router.filter(pl.col("time_s") > 3.0)
        queue_ms = float(router["queue_bytes"].cast(pl.Float64).mean()) * 8 / 20e6 * 1e3
        base = 20.0 + 84 * 8 / 20e6 * 1e3
        print(f"kernel: ping behind a standing queue: RTT {rtt:.2f} ms = base {base:.2f} + {rtt - base:.2f} ms; "
              f"the router's mean queue is {queue_ms:.2f} ms")
        assert queue_ms > 30.0, "the udp stream keeps the 40 ms queue near full"
        assert abs((rtt - base) - queue_ms) <= 1.5

    check_on_quiet_host(lambda: run_with_sim_schema(
        name="ping-queue", duration="8s", steady=["3s", "8s"], link={"capacity": "20Mbit", "rtt": "20ms", "queue": "2bdp"},
        flows=[{"kind": "udp", "rate": "22Mbit"}, {"kind": "ping"}]), behind_the_queue)


def test_ping_after_a_capacity_drop_carries_the_new_rates_transmission_time():
    # 1400-byte probes on an empty path whose capacity drops from 20 to 1 Mbit/s at 3 s: a probe
    # then takes 11.2 ms to cross the bottleneck, where it took 0.56 ms before. htb releases a
    # lone probe at once, so this time is the link emulator's shift, which follows the schedule
    # (it had kept the initial rate's: +0.56 ms after the drop, 10.6 ms short).
    drop_at, size = 3.0, 1400
    doc = dict(name="ping-drop", duration="7s", steady=["1.5s", "7s"], sample_interval="100ms",
               link={"capacity": "20Mbit", "rtt": "30ms", "queue": "100KB",
                     "schedule": [{"at": f"{drop_at:g}s", "capacity": "1Mbit"}]},
               flows=[{"kind": "ping", "interval": "100ms", "packet_size": f"{size}B"}])

    def rtt_p50(r: Any, t0: float, t1: float) -> float:
        f = r.flows.filter((pl.col("kind") == "ping") & (pl.col("time_s") > t0) & (pl.col("time_s") <= t1))
        return float(f["rtt_ms"].drop_nans().median())

    sim = run_trial(parse_trial(kernel_trial(**doc)))
    before, after = 30.0 + size * 8 / 20e6 * 1e3, 30.0 + size * 8 / 1e6 * 1e3
    sim_before, sim_after = rtt_p50(sim, 1.5, drop_at), rtt_p50(sim, drop_at + 0.5, 7.0)
    assert abs(sim_before - before) <= 0.05 and abs(sim_after - after) <= 0.05, (sim_before, sim_after)

    def check(r: Any) -> None:
        k_before, k_after = rtt_p50(r, 1.5, drop_at), rtt_p50(r, drop_at + 0.5, 7.0)
        print(f"ping RTT p50 before the drop: kernel {k_before:.2f} ms, simulator {sim_before:.2f} ms; "
              f"after: kernel {k_after:.2f} ms, simulator {sim_after:.2f} ms")
        # the echo's turnaround and the emulator's timing add up to 1 ms, never less (ping test above)
        assert sim_before - 0.05 <= k_before <= sim_before + 1.0
        assert sim_after - 0.05 <= k_after <= sim_after + 1.0

    check_on_quiet_host(lambda: run_with_sim_schema(**doc), check)


def test_pacing_caps_hold_per_flow():
    caps = {"c5": 5e6, "c12": 12e6}
    flows = [{"cc": "cubic", "max_pacing_rate": "5Mbit", "group": "c5"},
             {"cc": "bbr" if has_bbr() else "reno", "max_pacing_rate": "12Mbit", "group": "c12"},
             {"cc": "cubic", "group": "free"}]

    def capped(r: Any) -> None:
        g = r.summary["groups"]
        print("kernel: capped goodputs " + ", ".join(f"{k} {g[k]['goodput_bps'] / 1e6:.3f} Mbit/s (cap {v / 1e6:g})"
                                                   for k, v in caps.items()) + f"; free {g['free']['goodput_bps'] / 1e6:.2f}")
        for label, cap in caps.items():
            assert g[label]["goodput_bps"] <= cap * 1.01
            assert g[label]["goodput_bps"] >= cap * 0.85
            # paced from the start: no 100 ms sends more than the cap and a train
            rates = r.flows.filter(pl.col("group") == label)["send_rate_bps"].drop_nans()
            assert float(rates.max()) <= cap * 1.1, f"{label}: {float(rates.max()):.0f} bit/s in 100 ms"
        assert g["free"]["goodput_bps"] > 0.8 * (100e6 - 17e6) * 1448 / 1500

    check_on_quiet_host(lambda: run_with_sim_schema(name="caps", duration="10s", steady=["3s", "10s"], sample_interval="100ms",
                                                    link={"capacity": "100Mbit", "rtt": "20ms", "queue": "1bdp"},
                                                    flows=flows), capped)


def test_what_the_kernel_cannot_keep_is_refused_before_start():
    t = parse_trial(kernel_trial(flows=[{"kind": "udp", "rate": "10Gbit", "packet_size": "100B"}]))
    problems = trial_problems(t)
    assert any("datagrams/s in the group" in p and "at most 20,000" in p for p in problems), problems
    with pytest.raises(TrialRefused):
        run_kernel_trial(t)
