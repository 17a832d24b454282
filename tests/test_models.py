"""Model predictions in summary.json (cctestbed.models): each model on a trial where it applies
and agrees (within the bound stated in each test) and one where it does not apply."""

from __future__ import annotations

import functools
import math

import pytest

import cctestbed
from cctestbed.models import ware_share


def _trial(link, flows, duration="60s", steady=("20s", "60s")):
    return {"name": "m", "duration": duration, "steady": list(steady), "link": link, "flows": flows}


TRIALS = {
    # Reno alone under 1 % random loss on a 100 ms path: loss-limited at ~1.4 Mbit/s of 20
    "reno-1pct": _trial({"capacity": "20Mbit", "rtt": "100ms", "queue": "1bdp", "loss": "1%"},
                        [{"cc": "reno"}], "120s", ("10s", "120s")),
    "cubic-1bdp": _trial({"capacity": "40Mbit", "rtt": "25ms", "queue": "1bdp"}, [{"cc": "cubic"}], "40s", ("10s", "40s")),
    "bbr-cubic-8bdp": _trial({"capacity": "10Mbit", "rtt": "20ms", "queue": "8bdp"}, [{"cc": "bbr"}, {"cc": "cubic"}],
                             "30s", ("10s", "30s")),
    # Ware et al.'s link (10 Mbit/s x 40 ms): 1 BBR against 2 CUBIC in 8 BDP
    "bbr-2cubic-8bdp": _trial({"capacity": "10Mbit", "rtt": "40ms", "queue": "8bdp"},
                              [{"cc": "bbr"}, {"cc": "cubic", "count": 2}], "120s", ("30s", "120s")),
    "bbr-alone": _trial({"capacity": "10Mbit", "rtt": "20ms", "queue": "2bdp"}, [{"cc": "bbr"}], "20s", ("5s", "20s")),
    "bbr-cubic-loss": _trial({"capacity": "10Mbit", "rtt": "20ms", "queue": "2bdp", "loss": "0.5%"},
                             [{"cc": "bbr"}, {"cc": "cubic"}], "20s", ("5s", "20s")),
}


@functools.lru_cache(maxsize=None)
def models(key):
    return cctestbed.run_trial(TRIALS[key]).summary["models"]


def test_every_trial_has_the_four_models_each_saying_whether_it_applies():
    for key in ("cubic-1bdp", "bbr-alone"):
        m = models(key)
        assert set(m) == {"mathis", "cubic", "bbr_inflight_cap", "ware"}
        for v in m.values():
            assert isinstance(v["applies"], bool)
            assert v["applies"] or v["why_not"]


def test_mathis_applies_to_reno_under_random_loss_and_agrees_within_10_pct():
    m = models("reno-1pct")["mathis"]
    assert m["applies"] and m["loss_p"] == 0.01
    # MSS/RTT x sqrt(3/2)/sqrt(p) with the flow's median RTT
    rtt = m["flows"][0]["rtt_ms"] / 1000
    assert m["predicted_bps"] == pytest.approx(1448 * 8 / rtt * math.sqrt(1.5) / 0.1)
    assert abs(m["error_pct"]) <= 10 and not m["differs"]


def test_mathis_does_not_apply_without_random_loss_or_to_cubic():
    assert models("cubic-1bdp")["mathis"] == {"applies": False, "why_not": "not every flow is Reno"}
    m = cctestbed.run_trial(_trial({"capacity": "10Mbit", "rtt": "20ms", "queue": "1bdp"}, [{"cc": "reno"}], "5s",
                                   ("1s", "5s"))).summary["models"]["mathis"]
    assert not m["applies"] and "no Bernoulli random loss" in m["why_not"]


def test_cubic_k_and_epoch_agree_with_a_lone_flow():
    m = models("cubic-1bdp")["cubic"]
    assert m["applies"] and m["epochs_regained"] >= 5
    (f,) = m["flows"]
    # K = cbrt((W_max - cwnd_epoch) / C): the model's K is the implementation's to 0.01 s (the
    # lone flow's epochs are alike: W_max 168, cwnd_epoch 117)
    assert (f["w_max_pkts"], f["cwnd_epoch_pkts"]) == (168, 117)
    assert f["k_s"] == pytest.approx(((168 - 117) / 0.4) ** (1 / 3))
    assert f["k_sim_s"] == pytest.approx(f["k_s"], abs=0.01)
    # W_max 168 at 40 Mbit/s x 25 ms, 1 BDP: K = 5.03 s, regained after K - delay_min - cbrt(1/C)
    assert m["k_s"] == pytest.approx(5.03, abs=0.05)
    assert m["regain_expected_s"] == pytest.approx(5.03 - 0.025 - 2.5 ** (1 / 3), abs=0.05)
    assert abs(m["error_pct"]) <= 5 and not m["differs"]


def test_cubic_model_does_not_apply_without_cubic():
    assert models("bbr-alone")["cubic"] == {"applies": False, "why_not": "no CUBIC flow"}


def test_bbr_inflight_cap_binds_against_cubic_in_a_deep_buffer():
    m = models("bbr-cubic-8bdp")["bbr_inflight_cap"]
    assert m["applies"]
    f = m["flows"][0]
    assert f["cwnd_gain"] == 2.0
    # window-limited, as Ware et al. find: in flight reaches the cap and stays within 10 % of it
    assert m["window_limited"] and 0.9 <= f["ratio"] <= 1.1 and not m["differs"]
    # the estimates are inflated by CUBIC's queue: the cap is well above 2 x the true BDP
    assert f["cap_bytes"] > 1.3 * f["cap_true_bdp_bytes"]


def test_bbr_inflight_cap_alone_is_an_upper_bound_not_reached_and_absent_without_bbr():
    m = models("bbr-alone")["bbr_inflight_cap"]
    assert m["applies"] and not m["window_limited"] and m["ratio_max"] < 0.9 and not m["differs"]
    assert models("cubic-1bdp")["bbr_inflight_cap"] == {"applies": False, "why_not": "no BBR flow"}


def test_ware_formula_by_hand():
    # 10 Mbit/s, 40 ms, 1500-byte packets: c = 833.3 pkt/s, BDP 33.3 pkts; 8 BDP = 266.7 pkts
    c, l = 1e7 / 8 / 1500, 0.04
    q = 8 * c * l
    w = ware_share(q, c, l, 1)
    p = 0.5 - 1 / 16 - 4 / q
    assert w["p"] == pytest.approx(p)
    assert w["share"] == pytest.approx((1 - p) * (1 - (q / c + 0.2 + l) / 10))
    # 1 BDP: the cap exceeds BDP + buffer (p < 0 -> 0): all but the PROBE_RTT time
    w1 = ware_share(c * l, c, l, 1)
    assert w1["p"] == 0 and w1["share"] == pytest.approx(1 - (0.04 + 0.2 + 0.04) / 10)
    # deep buffers: the cap towards 1/2 of the link, less the PROBE_RTT drain of a full queue
    # (2.56 s of queue + 0.2 s + one RTprop every 10 s: 28 %)
    w64 = ware_share(64 * c * l, c, l, 1)
    assert w64["cap_share"] == pytest.approx(1 - (0.5 - 1 / 128 - 4 / (64 * c * l)))
    assert w64["share"] == pytest.approx(0.367, abs=0.001)


def test_ware_applies_to_1_bbr_against_2_cubic_in_8_bdp():
    m = models("bbr-2cubic-8bdp")["ware"]
    assert m["applies"] and m["bbr_flows"] == 1 and m["loss_based_flows"] == 2
    # q = 266.7 packets, X = 8: p = 1/2 - 1/16 - 4/q = 0.4225; PROBE_RTT (0.32 + 0.2 + 0.04 s in
    # 10 s) takes 5.6 %: 0.5775 x 0.944 = 0.545
    assert m["predicted_share"] == pytest.approx(0.545, abs=0.001)


#: BBR's share in this trial on Linux 6.18 (the kernel backend): 0.420 (2026-11-26) and 0.444,
#: 0.424, 0.466 (2026-11-27, seeds 2-4), against Ware's 0.545.
KERNEL_WARE_SHARES = (0.420, 0.444, 0.424, 0.466)


def test_linux_takes_less_than_ware_predicts_for_1_bbr_against_2_cubic_in_8_bdp():
    # Each seed sets where the kernel's ticks fall, so seeds sample the outcome as kernel runs do
    # (0.432-0.474 over seeds 1-8; 0.496 on every seed before the tick phase). The simulator's mean
    # over six seeds lies within the kernel's four runs, and below the model's by over 5 points
    # as the kernel's mean (0.439) is.
    shares = [cctestbed.run_trial({**TRIALS["bbr-2cubic-8bdp"], "seed": s}).summary["models"]["ware"]["measured_share"]
              for s in range(1, 7)]
    mean = sum(shares) / len(shares)
    assert min(KERNEL_WARE_SHARES) <= mean <= max(KERNEL_WARE_SHARES), shares
    assert mean < models("bbr-2cubic-8bdp")["ware"]["predicted_share"] - 0.05


def test_ware_applies_to_bbr_against_cubic():
    m = models("bbr-cubic-8bdp")["ware"]
    assert m["applies"] and m["bbr_flows"] == 1 and m["loss_based_flows"] == 1
    assert m["buffer_bdp"] == pytest.approx(8.0)
    assert m["predicted_share"] == pytest.approx(ware_share(m["queue_pkts"], 1e7 / 8 / 1500, 0.02, 1)["share"])
    assert m["error_points"] == pytest.approx(100 * (m["measured_share"] - m["predicted_share"]))
    assert m["differs"] == (abs(m["error_points"]) > 10)


def test_ware_does_not_apply_with_random_loss_or_without_a_loss_based_flow():
    assert models("bbr-cubic-loss")["ware"] == {"applies": False, "why_not": "random loss on the link"}
    assert models("bbr-alone")["ware"] == {"applies": False, "why_not": "no loss-based (CUBIC or Reno) flow"}


def test_sweep_report_says_where_model_and_measurement_differ(tmp_path):
    import polars as pl
    from typer.testing import CliRunner

    from cctestbed.cli import app

    f = tmp_path / "w.toml"
    f.write_text('''
name = "w"
trials = 1
steady = ["10s", "30s"]
[base]
duration = "30s"
[base.link]
capacity = "10Mbit"
rtt = "40ms"
[[base.flows]]
cc = "bbr"
[[base.flows]]
cc = "cubic"
[axes]
"link.queue" = ["1bdp", "8bdp"]
''')
    out = tmp_path / "out"
    r = CliRunner().invoke(app, ["sweep", str(f), "-o", str(out), "-j", "2"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, ["report", str(out)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    page = (out / "report.html").read_text()
    t = pl.read_parquet(out / "trials.parquet")
    assert 'id="models"' in page and 'id="model-ware-points"' in page and 'id="model-cubic-points"' in page
    bad = [q for q, e in zip(t["queue"], t["models.ware.error_points"]) if abs(e) > 10]
    if bad:
        assert f"differ by more than 10 points at {len(bad)} of 2 point(s): " + "; ".join(f"queue={q}" for q in bad) in page
    else:
        assert "agree within 10 points at every one of the 2 point(s)" in page
    assert "Mathis" not in page  # no Reno under random loss: the model applies nowhere
