"""Metrics on small synthetic frames, checked against values worked out by hand."""

import math

import polars as pl
import pytest

from cctestbed.summary import (
    TrialInfo,
    counter_deltas,
    jain,
    payload_capacity_bits,
    per_flow,
    percentile,
    summarize,
    window,
    window_bounds,
)


def make_flows(rates=(1000, 3000), times=(1.0, 2.0, 3.0, 4.0)):
    """Flow i delivers rates[i] bytes/s, sends 10 segments/s of which 1 is a retransmission;
    its RTT sample at time t is 10 t + i ms."""
    rows = []
    for t in times:
        for f, r in enumerate(rates):
            rows.append(
                dict(
                    time_s=t,
                    flow=f,
                    cc="reno" if f % 2 == 0 else "cubic",
                    group="reno" if f % 2 == 0 else "cubic",
                    delivered_bytes=int(r * t),
                    sent_segs=10 * int(t),
                    retrans_segs=int(t),
                    rtt_ms=10 * t + f,
                    goodput_bps=8.0 * r,
                    cwnd_pkts=10,
                    inflight_pkts=9,
                )
            )
    return pl.DataFrame(rows)


def make_router(times=(1.0, 2.0, 3.0, 4.0)):
    return pl.DataFrame(
        dict(
            time_s=list(times),
            queue_bytes=[0, 100, 200, 300],
            capacity_bps=[64_000] * 4,
            arrivals_pkts=[10, 20, 30, 40],
            drops_overflow=[0, 1, 1, 2],
            drops_random=[0, 0, 1, 1],
            drops_policer=[0, 0, 0, 0],
        )
    )


def info(steady=(1.0, 4.0), schedule=(), capacity=64_000):
    return TrialInfo(
        name="x",
        seed=3,
        duration_s=4.0,
        steady_s=steady,
        capacity_bps=capacity,
        rtprop_ms=10.0,
        bdp_bytes=100.0,
        mss=1448,
        mtu=1500,
        schedule=schedule,
    )


def test_jain():
    assert jain([1, 1, 1, 1]) == 1.0
    assert jain([1, 0, 0, 0]) == 0.25
    assert jain([1000, 3000]) == pytest.approx(16 / 20)  # (4000)^2 / (2 * 10e6)
    assert jain([]) is None
    assert jain([0, 0]) is None


def test_percentile_interpolates_linearly_and_skips_missing():
    s = pl.Series([4.0, 1.0, float("nan"), 2.0, None, 3.0])
    assert percentile(s, 0.5) == 2.5
    assert percentile(s, 0.95) == pytest.approx(3.85)  # 3 + 0.85 * (4 - 3)
    assert percentile(pl.Series([float("nan")]), 0.5) is None


def test_window_is_half_open_on_the_left():
    df = make_router()
    assert window(df, 1.0, 3.0)["time_s"].to_list() == [2.0, 3.0]
    assert window(df, 0.0, 4.0)["time_s"].to_list() == [1.0, 2.0, 3.0, 4.0]
    assert window_bounds(df["time_s"], 1.5, 3.7) == (1.0, 3.0)
    assert window_bounds(df["time_s"], 0.0, 4.0) == (0.0, 4.0)


def test_counter_deltas_per_flow_and_overall():
    df = make_flows()
    d = counter_deltas(df, ["delivered_bytes", "sent_segs"], 1.0, 3.0, by="flow")
    assert d.sort("flow")["delivered_bytes"].to_list() == [2000.0, 6000.0]
    assert d["sent_segs"].to_list() == [20.0, 20.0]
    # from the start, the baseline is zero
    d0 = counter_deltas(df, ["delivered_bytes"], 0.0, 2.0, by="flow")
    assert d0.sort("flow")["delivered_bytes"].to_list() == [2000.0, 6000.0]
    r = counter_deltas(make_router(), ["arrivals_pkts", "drops_overflow"], 2.0, 4.0)
    assert r.row(0, named=True) == {"arrivals_pkts": 20.0, "drops_overflow": 1.0}


def test_counter_deltas_flow_starting_inside_window():
    df = pl.DataFrame(
        dict(time_s=[1.0, 1.0, 2.0, 2.0], flow=[0, 1, 0, 1], delivered_bytes=[100, 0, 200, 50])
    ).filter(~((pl.col("flow") == 1) & (pl.col("time_s") == 1.0)))  # flow 1 has no row at 1 s
    d = counter_deltas(df, ["delivered_bytes"], 1.0, 2.0, by="flow")
    assert d.sort("flow")["delivered_bytes"].to_list() == [100.0, 50.0]


def test_capacity_integral_follows_the_schedule():
    steps = [(0.0, 10_000_000), (2.0, 20_000_000), (4.0, 10_000_000)]
    # 1..2 s at 10 Mbit, 2..4 at 20, 4..5 at 10 => 60 Mbit, times 1448/1500
    assert payload_capacity_bits(steps, 1.0, 5.0, 1448, 1500) == pytest.approx(60e6 * 1448 / 1500)
    assert payload_capacity_bits([(0.0, 1000)], 0.0, 2.0, 1500, 1500) == 2000


def test_per_flow_goodput_retrans_rtt():
    pf = per_flow(make_flows(), 1.0, 4.0)
    assert pf["flow"].to_list() == [0, 1]
    assert pf["goodput_bps"].to_list() == [8000.0, 24000.0]  # 3000 B and 9000 B over 3 s
    assert pf["retrans_pct"].to_list() == [10.0, 10.0]
    # samples inside (1, 4]: t = 2, 3, 4 -> 20, 30, 40 ms (+1 for flow 1)
    assert pf["rtt_p50_ms"].to_list() == [30.0, 31.0]
    assert pf["cc"].to_list() == ["reno", "cubic"]


def test_summary_against_hand_computed_values():
    s = summarize(make_flows(), make_router(), info())
    payload_cap_bps = 64_000 * 1448 / 1500
    assert s["total"]["goodput_bps"] == 32_000.0
    assert s["total"]["utilization"] == pytest.approx(32_000 / payload_cap_bps)
    # drops (2-0 overflow + 1-0 random) over arrivals 40-10
    assert s["total"]["loss_pct"] == pytest.approx(100 * 3 / 30)
    assert s["total"]["retrans_pct"] == pytest.approx(10.0)
    assert s["total"]["jain"] == pytest.approx(0.8)
    q = s["queue"]
    assert q["mean_bytes"] == 200.0 and q["p95_bytes"] == pytest.approx(290.0)
    assert q["mean_bdp"] == 2.0 and q["p95_bdp"] == pytest.approx(2.9)
    r = s["rtt"]
    assert (r["p50_ms"], r["min_ms"], r["mean_ms"]) == (30.5, 20.0, 30.5)
    assert r["p95_ms"] == pytest.approx(40.75)  # sorted 20,21,30,31,40,41: 40 + 0.75 * 1
    assert s["groups"]["cubic"] == {
        "share": pytest.approx(24_000 / payload_cap_bps),
        "goodput_bps": 24_000.0,
        "flows": 1,
        "retrans_pct": 10.0,
        "jain": 1.0,
    }
    assert s["flows"][1] == {
        "id": 1,
        "cc": "cubic",
        "group": "cubic",
        "goodput_bps": 24_000.0,
        "retrans_pct": 10.0,
        "rtt_p50_ms": 31.0,
    }
    assert s["trial"] == {
        "name": "x",
        "seed": 3,
        "duration_s": 4.0,
        "steady_s": [1.0, 4.0],
        "backend": "sim",
        "bdp_bytes": 100.0,
        "rtprop_ms": 10.0,
        "capacity_bps": 64_000,
    }


def test_steady_window_slices_everything():
    # flow 0 delivers nothing after 2 s: over (2, 4] its goodput is 0 and fairness drops to 1/2
    df = make_flows().with_columns(
        pl.when((pl.col("flow") == 0) & (pl.col("time_s") > 2))
        .then(2000)
        .otherwise(pl.col("delivered_bytes"))
        .alias("delivered_bytes")
    )
    s = summarize(df, make_router(), info(steady=(2.0, 4.0)))
    assert s["flows"][0]["goodput_bps"] == 0.0
    assert s["flows"][1]["goodput_bps"] == 24_000.0
    assert s["total"]["jain"] == pytest.approx(0.5)
    assert s["queue"]["mean_bytes"] == 250.0  # samples at 3 and 4 s
    assert s["total"]["loss_pct"] == pytest.approx(100 * 2 / 20)  # (2+1)-(1+0) over 40-20
    assert s["rtt"]["min_ms"] == 30.0


def test_utilization_uses_the_capacity_schedule():
    # capacity doubles at 2 s: payload capacity over (0, 4] is (2 * 64k + 2 * 128k) * mss/mtu
    sched = ((0.0, 64_000), (2.0, 128_000))
    s = summarize(make_flows(), make_router(), info(steady=(0.0, 4.0), schedule=sched))
    assert s["total"]["utilization"] == pytest.approx(4 * 4000 * 8 / ((2 * 64_000 + 2 * 128_000) * 1448 / 1500))


def test_missing_values_are_null_not_nan():
    df = make_flows().with_columns(pl.lit(0).alias("sent_segs"), pl.lit(0).alias("retrans_segs"),
                                   pl.lit(float("nan")).alias("rtt_ms"))
    s = summarize(df, make_router(), info())
    assert s["total"]["retrans_pct"] is None
    assert s["rtt"] == {"p50_ms": None, "p95_ms": None, "min_ms": None, "mean_ms": None}
    assert s["flows"][0]["rtt_p50_ms"] is None
    import json

    json.dumps(s, allow_nan=False)  # valid JSON
    assert not any(isinstance(v, float) and math.isnan(v) for v in s["total"].values())
