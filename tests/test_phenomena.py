"""Phenomenon detectors (cctestbed.phenomena): each on synthetic frames worked out by hand, and
on a trial that shows the phenomenon and one that does not."""

import functools
import json

import numpy as np
import polars as pl
import pytest

import cctestbed
from cctestbed.phenomena import (
    oscillation_period,
    phenomena,
    probe_rtt_sync,
    share_oscillation,
    slow_convergence,
    standing_queue,
    starvation,
    startup_overshoot,
)
from cctestbed.summary import TrialInfo

DT = 0.5


def _info(duration=20.0, steady=(0.0, 20.0), rtprop_ms=25.0, bdp=1000.0):
    # 8000 bit/s = 1000 B/s; mss = mtu: the payload capacity is the rate
    return TrialInfo(name="t", seed=1, duration_s=duration, steady_s=steady, capacity_bps=8000, rtprop_ms=rtprop_ms,
                     bdp_bytes=bdp, mss=1500, mtu=1500)


def frames(rates, duration, states=None, groups=None):
    """Flows delivering ``rates[f](t)`` bytes/s in the sample interval ending at t (sampled every
    0.5 s); ``states[f](t)`` their state; an empty router."""
    times = [DT * k for k in range(1, int(round(duration / DT)) + 1)]
    rows = []
    for f, rate in enumerate(rates):
        total = 0.0
        for t in times:
            r = rate(t)
            total += r * DT
            rows.append(dict(time_s=t, flow=f, group=(groups[f] if groups else f"g{f}"), kind="tcp", direction="forward",
                             delivered_bytes=total, sent_bytes=total + 1.0 if r > 0 or total > 0 else 0.0,
                             state=(states[f](t) if states else "cong_avoid")))
    router = pl.DataFrame({"time_s": times, "queue_bytes": [0.0] * len(times), "arrivals_pkts": [0] * len(times),
                           "drops_overflow": [0] * len(times)})
    return pl.DataFrame(rows), router


def _spans(flows, duration):
    return {f: (0.0, duration) for f in flows["flow"].unique().to_list()}


# --- worked examples ---------------------------------------------------------------------------


def test_starvation_worked_example():
    # fair share 500 B/s each; flow 1 gets 40 B/s (8 %) from 4 to 12 s: 8 s, past the 5 s minimum;
    # flow 0 gets 40 B/s from 14 to 17 s: only 3 s, not starvation
    f0 = lambda t: 40.0 if 14 < t <= 17 else 500.0  # noqa: E731
    f1 = lambda t: 40.0 if 4 < t <= 12 else 500.0  # noqa: E731
    flows, _ = frames([f0, f1], 20)
    s = starvation(flows, _info(), _spans(flows, 20))
    assert s["detected"] and s["min_duration_s"] == 5.0
    assert [(e["flow"], e["start_s"], e["end_s"]) for e in s["events"]] == [(1, 4.0, 12.0)]
    assert s["events"][0]["share_of_fair"] == pytest.approx(0.08)
    # with an RTprop of 1 s the minimum is 10 RTprops, 10 s: 8 s is no longer enough
    assert not starvation(flows, _info(rtprop_ms=1000.0), _spans(flows, 20))["detected"]


def test_standing_queue_worked_example():
    times = [DT * k for k in range(1, 61)]
    # window (0, 10]: minimum 0; (10, 20]: 600 B = 0.6 BDP; (20, 30]: 700 B
    q = [0.0 if t <= 10 else 600.0 + 100 * (t > 20) + (t % 2) * 50 for t in times]
    router = pl.DataFrame({"time_s": times, "queue_bytes": q})
    s = standing_queue(router, _info(duration=30.0))
    assert s["window_min_queue_bdp"] == pytest.approx([0.0, 0.6, 0.7])
    assert s["events"] == [{"start_s": 10.0, "end_s": 30.0, "min_queue_bdp": pytest.approx(0.6)}]
    low = router.with_columns(pl.col("queue_bytes") * 0.8)  # minima 0.48 and 0.56 BDP
    assert [(e["start_s"], e["end_s"]) for e in standing_queue(low, _info(duration=30.0))["events"]] == [(20.0, 30.0)]


def test_oscillation_period_of_a_square_wave():
    x = np.array([0.8 if (k // 4) % 2 == 0 else 0.2 for k in range(80)])  # 4 samples high, 4 low: 8 x 0.5 s
    period, acf = oscillation_period(x, 0.5)
    assert period == 4.0 and acf == pytest.approx(1.0)
    rng = np.random.default_rng(1)
    noise = 0.5 + 0.01 * rng.standard_normal(80)
    found = oscillation_period(noise, 0.5)
    assert found is None or found[1] < 0.3


def test_share_oscillation_worked_example():
    up = lambda t: 800.0 if (t - DT) % 4 < 2 else 200.0  # noqa: E731
    flows, _ = frames([up, lambda t: 1000.0 - up(t)], 40, groups=["bbr", "cubic"])
    s = share_oscillation(flows, _info(duration=40.0, steady=(0.0, 40.0)))
    assert s["detected"]
    (e,) = s["events"]  # two groups: only the first is reported, the other is its complement
    assert e["group"] == "bbr" and e["period_s"] == 4.0 and e["swing"] == pytest.approx(0.6)
    assert (e["start_s"], e["end_s"]) == (0.0, 40.0)
    steady, _ = frames([lambda t: 700.0, lambda t: 300.0], 40, groups=["bbr", "cubic"])
    s = share_oscillation(steady, _info(duration=40.0, steady=(0.0, 40.0)))
    assert not s["detected"] and s["units"][0]["swing"] == pytest.approx(0.0)


def test_slow_convergence_worked_example():
    # flow 1 joins at 10 s and gets 100 B/s against 900 until 17 s, then an equal share:
    # Jain = 1000^2 / (2 (900^2 + 100^2)) = 0.61 for 7 buckets, 1 from the 8th: converged after 8 s
    f0 = lambda t: 900.0 if 10 < t <= 17 else (500.0 if t > 17 else 1000.0)  # noqa: E731
    f1 = lambda t: 0.0 if t <= 10 else (100.0 if t <= 17 else 500.0)  # noqa: E731
    flows, _ = frames([f0, f1], 30)
    spans = {0: (0.0, 30.0), 1: (10.0, 30.0)}
    s = slow_convergence(flows, _info(duration=30.0), spans)
    assert s["joins"] == [{"time_s": 10.0, "flows": 2, "converged_after_s": 8.0, "slow": True}]
    assert (s["events"][0]["start_s"], s["events"][0]["end_s"]) == (10.0, 18.0)
    fast = lambda t: 0.0 if t <= 10 else (100.0 if t <= 12 else 500.0)  # noqa: E731
    flows, _ = frames([f0, fast], 30)
    s = slow_convergence(flows, _info(duration=30.0), spans)
    assert not s["detected"] and s["joins"][0]["converged_after_s"] == 3.0


def test_probe_rtt_sync_worked_example():
    def states(*runs):
        return lambda t: "PROBE_RTT" if any(a < t <= b for a, b in runs) else "PROBE_BW"

    # episodes: flow 0 (10, 11] and (20, 20.5]; flow 1 (10, 10.5] and (25, 25.5]; flow 2 (10.5, 11]
    # the three around 10 s overlap, the other two do not: 3 of 5
    flows, _ = frames([lambda t: 1.0] * 3, 30, states=[states((10.25, 11), (20.25, 20.5)),
                                                       states((10.25, 10.5), (25.25, 25.5)), states((10.75, 11))])
    s = probe_rtt_sync(flows, DT)
    assert (s["episodes"], s["overlapping"], s["flows"]) == (5, 3, 3)
    assert s["share"] == pytest.approx(0.6) and s["detected"]
    assert s["events"] == [{"start_s": 10.0, "end_s": 11.0, "flows": 3}]
    flows, _ = frames([lambda t: 1.0] * 2, 30, states=[states((10.25, 10.5)), states((15.25, 15.5))])
    s = probe_rtt_sync(flows, DT)
    assert s["share"] == 0.0 and not s["detected"] and s["events"] == []


def test_startup_overshoot_worked_example():
    flows, router = frames([lambda t: 500.0], 4, states=[lambda t: "STARTUP" if t <= 1.0 else "PROBE_BW"])
    # queue peaks at 1500 B (1.5 BDP) at 1.0 s; by 2.0 s (leaving at 1.5 s + RTprop 0.5 s) 100
    # packets arrived and 5 were dropped; a drop at 3 s comes after and does not count
    router = router.with_columns(
        queue_bytes=pl.Series([200.0, 1500.0, 900.0, 100.0, 0.0, 0.0, 0.0, 0.0]),
        arrivals_pkts=pl.Series([20, 40, 70, 100, 120, 140, 160, 180]),
        drops_overflow=pl.Series([0, 2, 5, 5, 5, 9, 9, 9]))
    s = startup_overshoot(flows, router, _info(duration=4.0, rtprop_ms=500.0), {0: (0.0, 4.0)})
    (e,) = s["events"]
    assert (e["start_s"], e["end_s"], e["state"]) == (0.0, 1.5, "STARTUP")
    assert e["peak_queue_bdp"] == pytest.approx(1.5) and e["loss_pct"] == pytest.approx(5.0)
    calm = router.with_columns(queue_bytes=pl.col("queue_bytes") * 0.5, drops_overflow=pl.lit(0))
    s = startup_overshoot(flows, calm, _info(duration=4.0, rtprop_ms=500.0), {0: (0.0, 4.0)})
    assert not s["detected"] and s["flows"][0]["peak_queue_bdp"] == pytest.approx(0.75)


# --- trials that show each phenomenon and trials that do not -----------------------------------


def trial(flows, queue, duration="40s", steady=("10s", "40s")):
    return {"name": "t", "duration": duration, "steady": list(steady), "seed": 1,
            "link": {"capacity": "80Mbit", "rtt": "25ms", "queue": queue}, "flows": flows}


TRIALS = {
    # BBR takes nearly all of a shallow buffer: CUBIC gets about 3 % of its fair share
    "2bbr-2cubic-0.25bdp": trial([{"cc": "bbr", "count": 2}, {"cc": "cubic", "count": 2}], "0.25bdp"),
    "2cubic-2bdp": trial([{"cc": "cubic", "count": 2}], "2bdp"),
    "cubic-8bdp": trial([{"cc": "cubic"}], "8bdp"),
    "4bbr-8bdp": trial([{"cc": "bbr", "count": 4}], "8bdp"),
    "bbr-cubic-1.75bdp-90s": trial([{"cc": "bbr"}, {"cc": "cubic"}], "1.75bdp", "90s", ("10s", "90s")),
    "cubic-joins-cubic-2bdp": trial([{"cc": "cubic"}, {"cc": "cubic", "start": "10s", "group": "late"}], "2bdp"),
    # two BBR flows whose PROBE_RTT timers differ (10 s, 7 s), behind CUBIC's full deep queue
    "bbr-timers-apart": trial([{"cc": "bbr"}, {"cc": "bbr", "start": "3s", "group": "b2",
                                               "params": {"probe_rtt_interval": 7}}, {"cc": "cubic", "count": 2}], "8bdp"),
    "bbr-0.5bdp": trial([{"cc": "bbr"}], "0.5bdp"),
}


@functools.lru_cache(maxsize=None)
def run(key):
    return cctestbed.run_trial(TRIALS[key]).summary["phenomena"]


def test_phenomena_section_is_json_and_every_detector_reports():
    p = run("2cubic-2bdp")
    assert set(p) == {"starvation", "standing_queue", "share_oscillation", "slow_convergence", "probe_rtt_sync",
                      "startup_overshoot"}
    for v in p.values():
        assert isinstance(v["detected"], bool)
        assert all(e["start_s"] <= e["end_s"] for e in v["events"])
    json.dumps(p)


def test_starvation_of_cubic_beside_bbr_in_a_shallow_buffer():
    s = run("2bbr-2cubic-0.25bdp")["starvation"]
    assert s["detected"] and {e["group"] for e in s["events"]} == {"cubic"}
    assert all(e["share_of_fair"] < 0.1 for e in s["events"])
    # each CUBIC flow starves for most of the trial, in episodes a PROBE_RTT may split: on Linux
    # 6.18 (the kernel backend, 2026-11-26, the same trial) 25.0 and 27.5 s of the 40, in episodes
    # of 19.5 and 5.5-7.5 s
    for flow in (2, 3):
        assert sum(e["end_s"] - e["start_s"] for e in s["events"] if e["flow"] == flow) >= 25
    assert not run("2cubic-2bdp")["starvation"]["detected"]


def test_standing_queue_of_cubic_in_a_deep_buffer_not_of_bbr():
    s = run("cubic-8bdp")["standing_queue"]
    assert s["detected"] and s["events"][0]["min_queue_bdp"] > 3
    # four BBR flows: their synchronised PROBE_RTT drains the queue every 10 s
    s = run("4bbr-8bdp")["standing_queue"]
    assert not s["detected"] and max(s["window_min_queue_bdp"]) < 0.5


def test_share_oscillation_of_bbr_against_cubic_at_1_75_bdp():
    # Linux 6.18 (the kernel backend, the same trial) oscillates in 3 of 4 runs: period 31 s
    # (autocorrelation 0.86, swing 0.36; 2026-11-26), then 20.5, none (0.05) and 30.5 s (0.45,
    # 0.47; 2026-11-27, seeds 2-4). Over seeds 1-8 the simulator, each seed at its own tick phase,
    # oscillates in 5 (20.5 s; 31 s with every seed at one phase before); its shares swung
    # irregularly (autocorrelation 0.11) before its receivers ACKed every segment while their
    # window opens, as Linux's do.
    found = []
    for seed in range(1, 9):
        s = cctestbed.run_trial({**TRIALS["bbr-cubic-1.75bdp-90s"], "seed": seed}).summary["phenomena"]["share_oscillation"]
        found += s["events"]
    assert len(found) >= 4, found
    assert all(20 <= e["period_s"] <= 31.5 and e["swing"] > 0.25 for e in found), found


def test_no_share_oscillation_where_shares_hold():
    assert not run("2cubic-2bdp")["share_oscillation"]["detected"]
    assert not run("2bbr-2cubic-0.25bdp")["share_oscillation"]["detected"]  # BBR holds ~96 % throughout


def test_slow_convergence_when_bbr_and_cubic_never_share_fairly():
    s = run("2bbr-2cubic-0.25bdp")["slow_convergence"]
    assert s["detected"] and s["joins"][0]["converged_after_s"] is None


def test_late_cubic_beside_cubic_converges_in_12_to_28_s():
    # a late CUBIC flow beside CUBIC does reach its share, 12-28 s after it joins on Linux 6.18
    # (the kernel backend, the same trial: 12.0, 12.0, 22.0 and 28.0 s in 4 runs, 2026-11-26 and
    # -27); the simulator's over seeds 1-8: 11.0 s in 7, 17.0 s in 1 since its RTO and timers are
    # the kernel's (3.0 s in 3 seeds before). Both leave the late flow's first recovery with a
    # window of about 109 packets in most runs; the kernel's runs 3 and 4 detected that loss at a
    # window of about 87 packets and took 22-28 s.
    for seed in range(1, 9):
        s = cctestbed.run_trial({**TRIALS["cubic-joins-cubic-2bdp"], "seed": seed}).summary["phenomena"]["slow_convergence"]
        (j,) = s["joins"]
        assert j["time_s"] == pytest.approx(10.0, abs=0.1)
        assert j["converged_after_s"] is not None and 12.0 - 3 <= j["converged_after_s"] <= 28.0 + 3, (seed, j)


def test_probe_rtt_synchronisation_of_bbr_flows():
    s = run("4bbr-8bdp")["probe_rtt_sync"]
    assert s["detected"] and s["share"] == 1.0 and s["flows"] == 4
    assert all(e["flows"] == 4 and e["end_s"] - e["start_s"] < 0.5 for e in s["events"])
    s = run("bbr-timers-apart")["probe_rtt_sync"]
    assert s["flows"] == 2 and s["episodes"] >= 5 and s["share"] < 0.5 and not s["detected"]


def test_startup_overshoot_of_bbr_in_a_shallow_buffer_not_of_cubic_with_hystart():
    s = run("bbr-0.5bdp")["startup_overshoot"]
    (e,) = s["events"]
    assert e["state"] == "STARTUP" and e["loss_pct"] > 5 and e["end_s"] < 1.0
    # CUBIC's HyStart leaves slow start before the queue reaches 1 BDP, without loss
    s = run("cubic-8bdp")["startup_overshoot"]
    assert not s["detected"]
    (f,) = s["flows"]
    assert f["state"] == "slow_start" and f["loss_pct"] == 0 and f["peak_queue_bdp"] < 1


def test_phenomena_of_a_workload_and_datagram_trial_run():
    # a workload's flows and a udp flow are left out of the flow detectors, without error
    doc = {"name": "w", "duration": "5s", "link": {"capacity": "20Mbit", "rtt": "20ms", "queue": "2bdp"},
           "flows": [{"cc": "cubic"}, {"kind": "udp", "rate": "2Mbit"},
                     {"cc": "reno", "size": "20KB", "arrivals": {"model": "poisson", "rate": 20}}]}
    r = cctestbed.run_trial(doc)
    p = phenomena(r.flows, r.router, r.info, r.completions)
    assert p["starvation"]["events"] == [] and p["slow_convergence"]["joins"] == []


def test_trial_plot_shades_the_detected_phenomena():
    r = cctestbed.run_trial(TRIALS["4bbr-8bdp"])
    fig = r.plot()
    labels = {p.get_label() for ax in fig.axes for p in ax.patches}
    assert {"synchronised PROBE_RTT", "start-up overshoot"} <= labels
    assert "starvation" not in labels and "standing queue" not in labels
    # the RTT panel's shades are its synchronised episodes, one per event
    rtt_ax = next(ax for ax in fig.axes if ax.get_ylabel().startswith("RTT"))
    n_events = len(r.summary["phenomena"]["probe_rtt_sync"]["events"])
    assert len([p for p in rtt_ax.patches if p.get_facecolor()[2] > 0.5]) >= n_events


def test_sweep_report_lists_phenomena_per_point_and_trial(cli, tmp_path):
    sweep = tmp_path / "s.toml"
    sweep.write_text('name = "s"\ntrials = 2\nsteady = ["2s", "6s"]\n[base]\nduration = "6s"\n'
                     '[base.link]\ncapacity = "20Mbit"\nrtt = "20ms"\n[[base.flows]]\ncc = "bbr"\n'
                     '[axes]\n"link.queue" = ["0.5bdp", "8bdp"]\n')
    out = tmp_path / "out"
    assert cli("sweep", sweep, "-o", out, "--workers", "1").exit_code == 0
    assert cli("report", out).exit_code == 0
    page = (out / "report.html").read_text()
    assert "<th class=\"k\">phenomena (seeds)</th>" in page and "<th class=\"k\">phenomena</th>" in page
    # BBR's STARTUP overflows 0.5 BDP in both seeds (loss); in 8 BDP its queue peaks near 2 BDP
    assert "start-up overshoot 2/2" in page
