"""The sweep's extra metrics (metrics.json) and the flattening into trials.parquet, checked
against values worked out by hand on small synthetic series."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from cctestbed.sweep.metrics import counters_at, cov, interval_edges, quartiles, sweep_metrics
from cctestbed.sweep.store import _column_type, _kind, flatten, merge
from cctestbed.summary import TrialInfo

# Capacity 12 kbit/s with mss = mtu: the payload capacity of a 0.5 s interval is 6000 bits = 750 B.
CAP = 12_000


def info(steady=(0.0, 2.0), schedule=()):
    return TrialInfo(name="t", seed=1, duration_s=2.0, steady_s=steady, capacity_bps=CAP, rtprop_ms=10.0,
                     bdp_bytes=15.0, mss=1000, mtu=1000, schedule=schedule)


def make_flows(per_interval: dict[int, list[int]], groups: dict[int, str], dt: float = 0.25):
    """Flow f delivers per_interval[f][k] bytes in the k-th 0.5 s interval, spread over its two
    0.25 s samples; RTT sample of flow f at time t is 10 + f + t ms; sends 10 segments a sample
    and marks f of every 10 lost."""
    rows = []
    for f, amounts in per_interval.items():
        cum, sent, lost = 0.0, 0, 0
        for k, amount in enumerate(amounts):
            for half in range(2):
                t = round(k * 0.5 + (half + 1) * dt, 6)
                cum += amount / 2
                sent += 10
                lost += f
                rows.append(dict(time_s=t, flow=f, cc=groups[f], group=groups[f], delivered_bytes=cum,
                                 sent_segs=sent, lost_segs=lost, retrans_segs=lost, rtt_ms=10 + f + t,
                                 goodput_bps=8 * amount))
    return pl.DataFrame(rows).sort(["time_s", "flow"])


def test_cov_and_quartiles_by_hand():
    assert cov([2, 4, 4, 4, 5, 5, 7, 9]) == pytest.approx(2 / 5)  # population sd 2, mean 5
    assert cov([3, 3, 3]) == 0.0
    assert cov([]) is None and cov([0, 0]) is None
    # linear interpolation: positions 0.75, 1.5, 2.25 of [1, 2, 3, 4]
    assert quartiles([4, 1, 3, 2]) == (pytest.approx(1.75), pytest.approx(2.5), pytest.approx(3.25))
    assert quartiles([None, 5.0]) == (5.0, 5.0, 5.0)
    assert quartiles([]) == (None, None, None)


def test_edges_and_counter_reads():
    assert interval_edges(20.0, 22.0).tolist() == [20.0, 20.5, 21.0, 21.5, 22.0]
    assert interval_edges(0.0, 1.2).tolist() == [0.0, 0.5, 1.0]  # the partial last interval is left out
    times = np.array([0.25, 0.5, 0.75])
    vals = np.array([1.0, 2.0, 3.0])
    # last sample at or before each edge; 0 before the first sample
    assert counters_at(times, vals, np.array([0.0, 0.5, 0.6, 1.0])).tolist() == [0.0, 2.0, 2.0, 3.0]


def test_interval_shares_tput_cov_and_quartiles():
    # group "a" (flow 0) delivers 750, 375, 0, 375 bytes per interval: shares 1, .5, 0, .5
    # group "b" (flows 1, 2) delivers 0, 375, 750, 0 together
    flows = make_flows({0: [750, 375, 0, 375], 1: [0, 375, 375, 0], 2: [0, 0, 375, 0]},
                       {0: "a", 1: "b", 2: "b"})
    m = sweep_metrics(flows, pl.DataFrame(), info())
    assert m["intervals"] == 4 and m["interval_s"] == 0.5
    a, b = m["groups"]["a"], m["groups"]["b"]
    assert a["interval_shares"] == pytest.approx([1.0, 0.5, 0.0, 0.5])
    assert b["interval_shares"] == pytest.approx([0.0, 0.5, 1.0, 0.0])
    # quartiles of [0, .5, .5, 1] -> .375, .5, .625; of [0, 0, .5, 1] -> 0, .25, .625
    assert (a["share_p25"], a["share_p50"], a["share_p75"]) == pytest.approx((0.375, 0.5, 0.625))
    assert (b["share_p25"], b["share_p50"], b["share_p75"]) == pytest.approx((0.0, 0.25, 0.625))
    # goodput per interval of a: 12, 6, 0, 6 kbit/s: mean 6, population sd sqrt(18) -> CoV 0.7071
    assert a["tput_cov"] == pytest.approx(math.sqrt(18) / 6)
    # b: 0, 6, 12, 0: mean 4.5, sd sqrt((20.25 + 2.25 + 56.25 + 20.25) / 4) = sqrt(24.75)
    assert b["tput_cov"] == pytest.approx(math.sqrt(24.75) / 4.5)
    total = m["total"]
    assert total["interval_utilization"] == pytest.approx([1.0, 1.0, 1.0, 0.5])
    assert (total["utilization_p25"], total["utilization_p50"], total["utilization_p75"]) == pytest.approx(
        (0.875, 1.0, 1.0))
    assert total["tput_cov"] == pytest.approx(np.std([12, 12, 12, 6]) / 10.5)
    # lost: flow f marks f of 10 segments lost; group b = flows 1 and 2: (1 + 2) / 20 over the window
    assert a["lost_pct"] == 0.0
    assert b["lost_pct"] == pytest.approx(100 * 3 / 20)


def test_group_rtt_over_the_window_only():
    flows = make_flows({0: [750, 750, 750, 750]}, {0: "a"})
    m = sweep_metrics(flows, pl.DataFrame(), info(steady=(1.0, 2.0)))
    # samples inside (1, 2]: t = 1.25, 1.5, 1.75, 2.0 -> RTT 11.25 .. 12.0 ms
    g = m["groups"]["a"]
    assert g["rtt_mean_ms"] == pytest.approx(11.625)
    assert g["rtt_p50_ms"] == pytest.approx(11.625)
    assert g["rtt_p95_ms"] == pytest.approx(11.25 + 0.95 * 0.75)
    assert m["intervals"] == 2 and g["interval_shares"] == pytest.approx([1.0, 1.0])


def test_shares_follow_a_capacity_schedule():
    # capacity halves at 1 s: the same 375 B per interval is a share of .5 before and 1 after
    flows = make_flows({0: [375, 375, 375, 375]}, {0: "a"})
    m = sweep_metrics(flows, pl.DataFrame(), info(schedule=((0.0, CAP), (1.0, CAP // 2))))
    assert m["groups"]["a"]["interval_shares"] == pytest.approx([0.5, 0.5, 1.0, 1.0])


def test_flatten_and_merge_for_the_table():
    summary = {"total": {"loss_pct": 1.5}, "groups": {"bbr": {"share": 0.6}},
               "flows": [{"id": 0, "cc": "bbr", "goodput_bps": 5.0}], "trial": {"steady_s": [1.0, 2.0]}}
    extra = {"total": {"tput_cov": 0.1, "loss_pct": 99.0}, "groups": {"bbr": {"share_p25": 0.5}}}
    flat = flatten(merge(summary, extra))
    assert flat == {
        "total.loss_pct": 1.5,  # summary.json wins
        "total.tput_cov": 0.1,
        "groups.bbr.share": 0.6,
        "groups.bbr.share_p25": 0.5,
        "flows.0.cc": "bbr",
        "flows.0.goodput_bps": 5.0,
        "trial.steady_s": [1.0, 2.0],
    }


def test_table_columns_keep_one_type():
    import pyarrow as pa

    def column_type(values, name="x"):
        return _column_type(name, {_kind(v) for v in values})

    assert column_type([1, None, 2]) == pa.int64()
    assert column_type([1, 2.5, None]) == pa.float64()
    assert column_type([None, None]) == pa.float64()
    assert column_type([None, None], name="error") == pa.string()
    assert column_type([[0.5, None], None]) == pa.list_(pa.float64())
    assert column_type([True, None]) == pa.bool_()
    assert column_type(["a", None]) == pa.string()
    assert column_type(["a", 1]) == pa.string()
