"""transperf's scores (cctestbed.scores): a worked example on synthetic frames, computed by hand,
and trials that show a high and a low value of each."""

import functools
import json

import polars as pl
import pytest

import cctestbed
from cctestbed.scores import scores, startup_exit
from cctestbed.summary import TrialInfo

TIMES = [0.5 * k for k in range(1, 9)]  # 0.5 .. 4.0 s


def _info(**kw):
    base = dict(name="t", seed=1, duration_s=4.0, steady_s=(2.0, 4.0), capacity_bps=8000, rtprop_ms=20.0,
                bdp_bytes=20.0, mss=1500, mtu=1500)
    base.update(kw)
    return TrialInfo(**base)


def _delivered_1(t):
    """Flow 1: nothing until 2 s, 200 B/s to 3 s, 400 B/s after."""
    if t <= 2:
        return 0.0
    return 200 * (min(t, 3) - 2) + 400 * max(t - 3, 0)


def worked_frames():
    """Two flows on an 8000 bit/s link (1000 B/s; mss = mtu so payload capacity is the rate).

    flow 0: 600 B/s throughout; sends 50 segments/s, 2.5 of them retransmitted (5 over the
    window (2, 4]); RTT samples in the window 40, 50, 60, 80 ms, lifetime minimum 20 ms;
    STARTUP until 1.0 s, then PROBE_BW with a bandwidth estimate of 2000 bit/s.
    flow 1: the delivery above; sends 25 segments/s, none retransmitted; RTT 40 ms, minimum 40.
    """
    rtt0 = {2.5: 40.0, 3.0: 50.0, 3.5: 60.0, 4.0: 80.0}
    rows = []
    for t in TIMES:
        rows.append(dict(time_s=t, flow=0, group="bbr", kind="tcp", direction="forward",
                         delivered_bytes=600.0 * t, sent_segs=50.0 * t, retrans_segs=2.5 * t,
                         rtt_ms=rtt0.get(t, 30.0), min_rtt_ms=20.0 if t >= 1 else 25.0,
                         state="STARTUP" if t <= 1.0 else "PROBE_BW", **{"cc.btlbw_bps": 2000.0 if t > 1 else 900.0}))
        rows.append(dict(time_s=t, flow=1, group="cubic", kind="tcp", direction="forward",
                         delivered_bytes=_delivered_1(t), sent_segs=25.0 * t, retrans_segs=0.0,
                         rtt_ms=40.0, min_rtt_ms=40.0, state="cong_avoid", **{"cc.btlbw_bps": None}))
    flows = pl.DataFrame(rows)
    router = pl.DataFrame({"time_s": TIMES, "queue_bytes": [0] * 8, "arrivals_pkts": [0] * 8, "drops_overflow": [0] * 8})
    return flows, router


def test_scores_worked_example():
    flows, router = worked_frames()
    s = scores(flows, router, _info())
    # buckets (2, 3] and (3, 4]: 600 + 200 and 600 + 400 bytes of 1000 -> utilization 0.8 and 1.0
    assert s["tput"] == pytest.approx(90.0)
    # Jain: (800^2) / (2 (600^2 + 200^2)) = 0.8; 1000^2 / (2 (600^2 + 400^2)) = 1/1.04
    assert s["fairness"] == pytest.approx(100 * (0.8 + 1 / 1.04) / 2)
    assert s["convergence_fairness"] == pytest.approx(80.0)
    assert s["convergence_s"] == 2.0
    # flow 0: min 20 over median(40, 50, 60, 80) = 55; flow 1: 40 / 40
    assert s["rtt_med"] == pytest.approx(100 * 20 / 55)
    assert s["groups"]["cubic"]["rtt_med"] == pytest.approx(100.0)
    # flow 0: 5 of 100 segments retransmitted over the window
    assert s["loss_avoid"] == pytest.approx(95.0)
    assert s["groups"]["cubic"]["loss_avoid"] == pytest.approx(100.0)
    # flow 0 leaves STARTUP at 1.5 s with 2000 bit/s against a fair share of 8000 / 2
    assert s["lock_on_bw"] == pytest.approx(50.0)
    assert s["groups"]["cubic"]["lock_on_bw"] is None
    json.dumps(s)  # JSON-ready


def test_scores_single_flow_has_no_fairness():
    flows, router = worked_frames()
    s = scores(flows.filter(pl.col("flow") == 0), router, _info())
    assert s["fairness"] is None and s["convergence_fairness"] is None
    assert s["tput"] == pytest.approx(60.0)
    assert s["lock_on_bw"] == pytest.approx(100 * 2000 / 8000)  # one flow: its fair share is the link


def test_startup_exit():
    assert startup_exit(pl.Series(["STARTUP", "STARTUP", "DRAIN", "PROBE_BW"])) == (0, 2)
    assert startup_exit(pl.Series(["x", "slow_start", "cong_avoid"]), ("slow_start",)) == (1, 2)
    assert startup_exit(pl.Series(["STARTUP", "STARTUP"])) is None  # never left it
    assert startup_exit(pl.Series(["PROBE_BW", None])) is None


def trial(flows, queue, duration="30s", steady=("10s", "30s"), loss="0%"):
    return {"name": "t", "duration": duration, "steady": list(steady), "seed": 1,
            "link": {"capacity": "80Mbit", "rtt": "25ms", "queue": queue, "loss": loss}, "flows": flows}


@functools.lru_cache(maxsize=None)
def run(key):
    return cctestbed.run_trial(TRIALS[key]).summary


TRIALS = {
    "4bbr-8bdp": trial([{"cc": "bbr", "count": 4}], "8bdp"),
    "bbr-8bdp": trial([{"cc": "bbr"}], "8bdp"),
    "cubic-8bdp": trial([{"cc": "cubic"}], "8bdp"),
    "2bbr-2cubic-0.25bdp": trial([{"cc": "bbr", "count": 2}, {"cc": "cubic", "count": 2}], "0.25bdp"),
    "reno-1pct-loss": trial([{"cc": "reno"}], "2bdp", loss="1%"),
}


def test_summary_has_scores_on_every_trial():
    s = run("bbr-8bdp")
    assert set(s["scores"]) == {"tput", "rtt_med", "loss_avoid", "fairness", "convergence_fairness",
                                "convergence_s", "lock_on_bw", "groups"}


def test_fairness_scores_high_among_bbr_flows_and_low_when_bbr_starves_cubic():
    fair, unfair = run("4bbr-8bdp")["scores"], run("2bbr-2cubic-0.25bdp")["scores"]
    assert fair["fairness"] > 95 and fair["convergence_fairness"] > 90
    assert unfair["fairness"] < 60 and unfair["convergence_fairness"] < unfair["fairness"]


def test_rtt_med_high_for_bbr_low_for_cubic_in_a_deep_buffer():
    # CUBIC fills 8 BDP: its median RTT is several times RTprop; BBR alone keeps it near RTprop
    assert run("cubic-8bdp")["scores"]["rtt_med"] < 25
    assert run("bbr-8bdp")["scores"]["rtt_med"] > 80


def test_loss_avoid_and_tput_fall_under_random_loss_for_reno():
    reno = run("reno-1pct-loss")["scores"]
    assert reno["loss_avoid"] < 99.5 and reno["tput"] < 30
    clean = run("cubic-8bdp")["scores"]
    assert clean["loss_avoid"] > 99.9 and clean["tput"] > 97


def test_lock_on_bw_of_bbr_alone_is_its_whole_link_and_none_without_bbr():
    assert run("bbr-8bdp")["scores"]["lock_on_bw"] == pytest.approx(100, abs=10)
    assert run("cubic-8bdp")["scores"]["lock_on_bw"] is None


def test_scores_the_same_whatever_the_row_order():
    # the simulator's rows (time, then flow) are read as strided arrays; any other order is sorted
    flows, router = worked_frames()
    shuffled = flows.sample(fraction=1.0, shuffle=True, seed=3)
    assert scores(shuffled, router, _info()) == scores(flows, router, _info())
    gappy = flows.filter(~((pl.col("flow") == 1) & (pl.col("time_s") < 1.0)))  # flow 1's first rows missing
    assert scores(gappy, router, _info())["fairness"] == pytest.approx(scores(flows, router, _info())["fairness"])
