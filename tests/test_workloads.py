"""Workloads: arrivals and size distributions against their definitions (confidence intervals
over long runs), determinism per seed, completion times against physical bounds, the summary's
FCT metrics against values worked out by hand, refusals, and the results files."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from cctestbed import run_trial, workload
from cctestbed.config import ConfigError, load_trial, resource_problems
from cctestbed.schema import completion_columns
from cctestbed.summary import fct_metrics

#: Two-sided 99.9 % normal quantile: a check at this level fails by chance once in 1000.
Z = 3.29

WEB: dict[str, Any] = {
    "name": "web",
    "duration": "4s",
    "seed": 1,
    "link": {"capacity": "100Mbit", "rtt": "10ms", "queue": "1bdp"},
    "flows": [{"cc": "cubic", "group": "web", "arrivals": {"model": "poisson", "rate": 40.0},
               "size": {"dist": "exponential", "mean": "50KB"}}],
}


def trial(**flow: Any) -> dict[str, Any]:
    d = copy.deepcopy(WEB)
    d["flows"][0].update(flow)
    return d


def problems(d: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as e:
        load_trial(d, allow_large=True)
    return e.value.problems


# --- arrivals -----------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_poisson_arrivals_match_the_rate_within_the_confidence_interval(seed):
    # 100 flows/s over 2000 s: the count is Poisson(200,000), the gaps exponential of mean 10 ms
    rate, dur = 100.0, 2000
    t = load_trial({**trial(arrivals={"model": "poisson", "rate": rate}, size="1KB"),
                    "duration": f"{dur}s", "seed": seed, "sample_interval": "1s"}, allow_large=True)
    starts = [f.start_ns for f in t.flow_list()]
    n, mean_n = len(starts), rate * dur
    assert abs(n - mean_n) <= Z * math.sqrt(mean_n), (n, mean_n)
    gaps = [(b - a) / 1e9 for a, b in zip([0, *starts], starts)]
    m = sum(gaps) / len(gaps)
    assert abs(m - 1 / rate) <= Z * (1 / rate) / math.sqrt(len(gaps)), m
    # exponential gaps: standard deviation equal to the mean (coefficient of variation 1)
    sd = math.sqrt(sum((g - m) ** 2 for g in gaps) / (len(gaps) - 1))
    # the CV's standard error for exponential samples is about 1 / sqrt(n)
    assert abs(sd / m - 1) <= Z / math.sqrt(len(gaps)), sd / m
    # counts per second: Poisson, so their variance equals their mean (index of dispersion 1)
    per_s = [0] * dur
    for s in starts:
        per_s[s // 10**9] += 1
    mu = sum(per_s) / dur
    var = sum((c - mu) ** 2 for c in per_s) / (dur - 1)
    assert abs(var / mu - 1) <= Z * math.sqrt(2 / (dur - 1)), var / mu
    assert starts == sorted(starts) and 0 < starts[0] and starts[-1] < dur * 10**9


def test_load_sets_the_rate_from_the_mean_size_and_the_payload_capacity():
    t = load_trial(trial(arrivals={"model": "poisson", "load": "60%"}, size="websearch"))
    mean = workload.SizeDistribution("cdf", points=workload.load_cdf(workload.cdf_path("websearch"))).expected()
    assert t.workload_rate(0) == pytest.approx(0.6 * 100e6 * 1448 / 1500 / (8 * mean))
    # the arrivals run from the group's start to until
    t = load_trial(trial(arrivals={"model": "poisson", "rate": 200.0, "until": "3s"}, start="1s"))
    s = [f.start_ns for f in t.flow_list()]
    assert 10**9 < min(s) and max(s) < 3 * 10**9


def test_fixed_arrivals_start_at_the_listed_times():
    t = load_trial(trial(arrivals=["0.5s", "1s", "250ms"], size="20KB"))
    assert [(f.start_ns, f.size) for f in t.flow_list()] == [(500_000_000, 20_000), (10**9, 20_000), (250_000_000, 20_000)]


# --- sizes --------------------------------------------------------------------------------------


def draws(size: Any, n: int = 200_000, seed: int = 7) -> list[int]:
    t = load_trial({**trial(size=size, arrivals={"model": "poisson", "rate": n / 1000.0}), "duration": "1000s",
                    "seed": seed, "sample_interval": "1s"}, allow_large=True)
    return [f.size for f in t.flow_list()]


def mean_ci(xs: list[int]) -> tuple[float, float]:
    m = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))
    return m, Z * sd / math.sqrt(len(xs))


@pytest.mark.parametrize("size, want", [
    ({"dist": "exponential", "mean": "50KB"}, 50_000),
    ({"dist": "exponential", "mean": "50KB", "max": "100KB"}, 50_000 * (1 - math.exp(-2))),
    ({"dist": "pareto", "mean": "100KB", "shape": 2.5}, 100_000),
    ({"dist": "pareto", "scale": "10KB", "shape": 1.5, "max": "1MB"},
     10_000 + 10_000**1.5 * (1e6**-0.5 - 10_000**-0.5) / -0.5),
])
def test_size_distributions_have_their_mean(size, want):
    xs = draws(size)
    m, ci = mean_ci(xs)
    assert abs(m - want) <= ci + 0.5, (m, want, ci)  # + rounding to whole bytes
    assert min(xs) >= 1


@pytest.mark.parametrize("name", workload.SHIPPED_CDFS)
def test_shipped_cdfs_are_sampled_as_their_points_say(name):
    pts = workload.load_cdf(workload.cdf_path(name))
    xs = sorted(draws(name))
    n = len(xs)
    for size, frac in pts:
        if frac in (0.0, 1.0):
            continue
        below = sum(1 for x in xs if x <= size) / n  # the fraction at or below each point's size
        assert abs(below - frac) <= Z * math.sqrt(frac * (1 - frac) / n) + 1 / n, (size, frac, below)
    assert xs[-1] <= pts[-1][0] and xs[0] >= max(1, pts[0][0])


def test_cdf_files_named_relative_to_the_trial(tmp_path, write_trial):
    (tmp_path / "my.cdf").write_text("# two sizes\n1000 0.5\n1000 0.5\n5000 1\n")
    p = write_trial(trial(size={"dist": "cdf", "file": "my.cdf"}))
    sizes = {f.size for f in load_trial(p).flow_list()}
    assert sizes <= set(range(1000, 5001)) and 1000 in sizes


# --- determinism ----------------------------------------------------------------------------------


def test_the_same_seed_gives_the_same_flows_and_completion_times():
    a, b = run_trial(trial()), run_trial(trial())
    assert a.completions is not None and len(a.completions) > 100
    assert a.completions.equals(b.completions) and a.flows.equals(b.flows)
    c = run_trial({**trial(), "seed": 2})
    assert not c.completions["start_s"].equals(a.completions["start_s"])


def test_flows_depend_on_the_seed_not_on_the_algorithm():
    a = load_trial(trial(cc="cubic")).flow_list()
    b = load_trial(trial(cc="bbr")).flow_list()
    assert a == b
    # a new size distribution keeps the arrival times (separate streams)
    c = load_trial(trial(size="websearch")).flow_list()
    assert [f.start_ns for f in c] == [f.start_ns for f in a]


# --- completion times -----------------------------------------------------------------------------


def test_completion_times_respect_physical_bounds_and_bytes_are_conserved():
    d = {**trial(size="websearch", arrivals={"model": "poisson", "load": "50%"}),
         "link": {"capacity": "1Gbit", "rtt": "10ms", "queue": "1bdp"}}
    r = run_trial(d)
    fct = r.completions
    assert fct is not None
    assert fct.columns == [c.name for c in completion_columns()]
    done = fct.filter(pl.col("fct_ms").is_not_nan())
    assert len(fct) > 100 and len(done) > 0.8 * len(fct)
    # no flow beats the empty path
    assert (done["slowdown"] >= 1 - 1e-9).all()
    # every byte of a finished flow reached the application, exactly once; the rest are short
    assert (done["delivered_bytes"] == done["size_bytes"]).all()
    left = fct.filter(pl.col("fct_ms").is_nan())
    assert (left["delivered_bytes"] < left["size_bytes"]).all()
    # the flows' last telemetry rows say the same
    last = r.flows.group_by("flow").agg(pl.col("delivered_bytes").sort_by("time_s").last())
    joined = fct.join(last, on="flow", suffix="_telemetry")
    assert (joined["delivered_bytes"] == joined["delivered_bytes_telemetry"]).all()
    # and the flows start where the expansion put them
    starts = {i: f.start_ns / 1e9 for i, f in enumerate(load_trial(d).flow_list())}
    assert all(abs(starts[f] - s) < 1e-12 for f, s in zip(fct["flow"], fct["start_s"]))
    # a workload's flows have rows only while open: far fewer than every flow at every sample
    samples = 4 / 0.01
    assert len(r.flows) < 0.2 * samples * len(fct)


def test_a_paced_reader_completes_a_flow_at_a_read():
    # a flow is complete when its application has read the last byte: with reads every 5 ms
    # that is on the 5-ms grid of the trial's clock, never before the instant reader's
    sized = trial(arrivals=["0.5s", "1s", "1.2s"], size="300KB")
    instant = run_trial(sized).completions
    paced_trial = trial(arrivals=["0.5s", "1s", "1.2s"], size="300KB", read_interval="5ms")
    assert load_trial(paced_trial).describe().endswith("read every 5 ms")
    paced = run_trial(paced_trial).completions
    assert instant is not None and paced is not None
    assert (paced["delivered_bytes"] == paced["size_bytes"]).all()
    end_ms = (paced["start_s"] * 1e3 + paced["fct_ms"]).to_list()
    assert all(abs(e / 5 - round(e / 5)) < 1e-6 for e in end_ms), end_ms
    assert (paced["fct_ms"] >= instant["fct_ms"]).all()
    assert any(round(e / 5) * 5 != round(e, 6) for e in (instant["start_s"] * 1e3 + instant["fct_ms"]).to_list())


def test_the_ideal_is_the_empty_path():
    # 1448 B: one full packet; 10 Mbit/s, 20 ms: handshake 20 ms, 1500 B at 1.2 ms, 10 ms one way
    assert workload.ideal_fct_ns(1448, 10e6, 10_000_000, 10_000_000, 1448, 1500) == pytest.approx(31.2e6)
    assert workload.wire_bytes(1449, 1448, 1500) == 1449 + 2 * 52
    # a bucket of two packets on an idle bottleneck sends them at once: of 3 packets, one at rate
    assert workload.ideal_fct_ns(3 * 1448, 10e6, 10_000_000, 10_000_000, 1448, 1500, 3000) == pytest.approx(31.2e6)
    assert workload.ideal_fct_ns(1448, 10e6, 10_000_000, 10_000_000, 1448, 1500, 3000) == pytest.approx(30e6)
    assert workload.slow_start_rounds(14_480, 1448, 10) == 1
    assert workload.slow_start_rounds(14_481, 1448, 10) == 2
    assert workload.slow_start_rounds(1_000_000, 1448, 10) == 7


def test_a_single_flow_on_an_empty_path_completes_in_the_analytic_slow_start_time():
    # 200 KB over 1 Gbit/s, 40 ms: 139 segments, ceil(log2(13.9 + 1)) = 4 rounds
    d = {"name": "one", "duration": "2s", "link": {"capacity": "1Gbit", "rtt": "40ms", "queue": "2bdp"},
         "flows": [{"cc": "cubic", "arrivals": ["100ms"], "size": "200KB"}]}
    r = run_trial(d)
    fct = r.completions["fct_ms"][0]
    rounds = workload.slow_start_rounds(200_000, 1448, 10)
    analytic = rounds * 40 + 20 + workload.wire_bytes(200_000, 1448, 1500) * 8e3 / 1e9
    assert rounds == 4 and abs(fct - analytic) <= 40, (fct, analytic)


# --- summary --------------------------------------------------------------------------------------


def test_fct_metrics_by_hand():
    f = pl.DataFrame({
        "flow": [0, 1, 2, 3, 4],
        "group": ["w"] * 5,
        "start_s": [0.5, 1.0, 1.5, 2.0, 9.0],
        "size_bytes": [10_000, 50_000, 500_000, 20_000_000, 1_000],
        "fct_ms": [10.0, 20.0, 40.0, float("nan"), 5.0],
        "slowdown": [2.0, 4.0, 1.0, float("nan"), 1.0],
    })
    m = fct_metrics(f, 0.0, 5.0)["w"]  # flow 4 starts after the window
    assert (m["flows"], m["completed"], m["unfinished"]) == (4, 3, 1)
    assert m["fct_p50_ms"] == 20.0
    assert m["fct_p95_ms"] == pytest.approx(20 + 0.9 * 20)  # linear between 20 and 40
    assert m["slowdown_mean"] == pytest.approx(7 / 3)
    b = m["buckets"]
    assert b["lt_100KB"] == {"flows": 2, "completed": 2, "slowdown_mean": 3.0, "slowdown_p99": pytest.approx(3.98),
                             "fct_p99_ms": pytest.approx(19.9)}
    assert (b["100KB_1MB"]["flows"], b["100KB_1MB"]["slowdown_mean"]) == (1, 1.0)
    assert (b["ge_10MB"]["flows"], b["ge_10MB"]["completed"], b["ge_10MB"]["slowdown_mean"]) == (1, 0, None)
    assert b["1MB_10MB"]["flows"] == 0


def test_summary_lists_workload_flows_by_their_completion_times_only():
    r = run_trial({**trial(), "flows": [WEB["flows"][0], {"cc": "reno"}]})
    s = r.summary
    assert [f["group"] for f in s["flows"]] == ["reno"]
    assert s["groups"]["web"]["jain"] is None and s["groups"]["reno"]["jain"] == 1.0
    assert s["fct"]["web"]["flows"] == len(r.completions)
    assert set(s["fct"]["web"]["buckets"]) == set(workload.BUCKET_NAMES)


def test_results_directory_round_trip(tmp_path):
    from cctestbed.results import TrialResult

    r = run_trial(trial())
    r.save(tmp_path / "a")
    run_trial(trial()).save(tmp_path / "b")
    assert (tmp_path / "a" / "fct.parquet").read_bytes() == (tmp_path / "b" / "fct.parquet").read_bytes()
    back = TrialResult.load(tmp_path / "a")
    assert back.completions is not None and back.completions.equals(r.completions)
    again = load_trial(tmp_path / "a" / "trial.toml")
    assert again.flow_list() == load_trial(trial()).flow_list()
    assert json.loads((tmp_path / "a" / "summary.json").read_text())["fct"] == r.summary["fct"]


def test_the_readme_documents_the_completion_columns():
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    missing = [c.name for c in completion_columns() if f"`{c.name}`" not in readme]
    assert not missing, missing


# --- refusals -------------------------------------------------------------------------------------


@pytest.mark.parametrize("flow, message", [
    ({"arrivals": {"model": "poisson"}}, "flows[0].arrivals.rate: a poisson arrival process takes exactly one of rate"),
    ({"arrivals": {"model": "poisson", "rate": 5.0, "load": 0.5}}, "flows[0].arrivals.rate: a poisson arrival process"),
    ({"arrivals": {"model": "poisson", "rate": -1.0}}, "flows[0].arrivals.rate: -1.0: must be a finite number > 0"),
    ({"arrivals": {"model": "burst", "rate": 1.0}}, "flows[0].arrivals.model: 'burst': Input should be 'poisson' or 'fixed'"),
    ({"arrivals": ["1s", "9s"]}, "flows[0].arrivals.times[1]: '9s': must be before the end (4s)"),
    ({"arrivals": {"model": "poisson", "rate": 5.0, "until": "5s"}}, "flows[0].arrivals.until: '5s': must be within the duration (4s)"),
    ({"count": 3}, "flows[0].count: 3: a workload's arrivals decide how many flows start and when; drop count"),
    ({"size": None}, "flows[0].size: missing: a workload's flows need a size"),
    ({"size": "0B"}, "flows[0].size: '0B': must be > 0"),
    ({"size": "webserch"}, "flows[0].size: 'webserch':"),
    ({"size": {"dist": "pareto", "mean": "1MB", "shape": 0.9}}, "flows[0].size.shape: 0.9: must be > 1 when the mean is given"),
    ({"size": {"dist": "pareto", "shape": 1.2}}, "flows[0].size.scale: give exactly one of scale (the smallest size, x_m) and mean"),
    ({"size": {"dist": "exponential", "mean": "1MB", "shape": 2.0}}, "flows[0].size.shape: 2.0: not used by the exponential distribution; it takes mean, max"),
    ({"size": {"dist": "normal", "mean": "1MB"}}, "flows[0].size.dist: 'normal': Input should be 'exponential', 'pareto' or 'cdf'"),
    ({"size": {"dist": "cdf", "file": "nope.cdf"}}, "flows[0].size.file: 'nope.cdf':"),
    ({"size": {"dist": "exponential", "mean": "1MB", "bogus": 1}}, "flows[0].size.bogus: unknown key; valid are dist, mean, scale, shape, max, file"),
    ({"arrivals": {"model": "poisson", "load": "50%"}, "size": {"dist": "pareto", "scale": "1KB", "shape": 1.0}},
     "flows[0].arrivals.load: '50%': sets the rate from the mean size, and a Pareto of shape <= 1 has none"),
])
def test_bad_workloads_are_refused_naming_field_value_and_what_is_valid(flow, message):
    d = trial(**flow)
    if flow.get("size", 1) is None:
        d["flows"][0].pop("size")
    found = problems(d)
    assert any(p.startswith(message) for p in found), found


def test_a_workload_group_of_udp_is_refused():
    found = problems(trial(kind="udp", rate="1Mbit", cc=None, size=None))
    assert any(p.startswith("flows[0].arrivals: {") or "takes no arrivals (TCP only)" in p for p in found), found


def test_bad_cdf_files_are_refused_with_the_line(tmp_path):
    bad = tmp_path / "bad.cdf"
    for text, why in [("100 0.5\n50 1\n", "line 2: '50 1': sizes and fractions must not decrease"),
                      ("100 0.5\n200 0.9\n", "the last fraction is 0.9; a CDF ends at 1"),
                      ("100 x\n", "line 1: '100 x': expected two numbers")]:
        bad.write_text(text)
        found = problems(trial(size={"dist": "cdf", "file": str(bad)}))
        assert any(why in p and p.startswith("flows[0].size.file:") for p in found), found


def test_too_many_workload_flows_are_refused_before_expansion():
    d = {**trial(arrivals={"model": "poisson", "rate": 1e6}), "duration": "60s"}
    with pytest.raises(ConfigError) as e:
        load_trial(d)
    assert any(p.startswith("flows.arrivals: about 60,000,000 workload flows in all; more than 100,000") for p in e.value.problems)


def test_refused_on_the_command_line_with_exit_2_and_nothing_written(cli, tmp_path, write_trial):
    p = write_trial(trial(size={"dist": "pareto", "shape": 1.2}))
    r = cli("run", p, "-o", tmp_path / "out")
    assert r.exit_code == 2
    assert "flows[0].size.scale: give exactly one of scale" in r.output
    assert not (tmp_path / "out").exists()


def test_resources_of_a_large_workload_stay_within_the_limits():
    # 200 flows/s for 60 s on 1 Gbit/s: 12,000 flows, tens of thousands of rows, not refused
    d = {**trial(arrivals={"model": "poisson", "rate": 200.0}, size={"dist": "exponential", "mean": "300KB"}),
         "duration": "60s", "link": {"capacity": "1Gbit", "rtt": "10ms", "queue": "1bdp"}}
    assert resource_problems(load_trial(d)) == []


def test_goodput_counts_the_whole_window_when_no_flow_is_open_at_its_end():
    # three flows done within the first second of a 4 s trial: rows end early, the window does not
    r = run_trial(trial(arrivals=["0.1s", "0.2s", "0.3s"], size="100KB"))
    assert r.flows["time_s"].max() < 1.0 and r.router["time_s"].max() == 4.0
    assert r.summary["total"]["goodput_bps"] == pytest.approx(3 * 100_000 * 8 / 4.0)


def test_a_reverse_workloads_ideal_is_the_reverse_paths():
    """A workload sending right to left completes over the reverse bottleneck: its ideal is the
    handshake over the reverse path plus the flow at the reverse capacity, and no flow beats it."""
    d = {"name": "upweb", "duration": "10s", "link": {"capacity": "80Mbit", "rtt": "20ms", "queue": "1bdp",
                                                    "reverse": {"capacity": "10Mbit", "queue": "100KB"}},
         "flows": [{"cc": "cubic", "direction": "reverse", "arrivals": {"model": "poisson", "rate": 5.0},
                    "size": "100KB"}]}
    r = run_trial(d)
    fct = r.completions
    assert fct is not None and len(fct) > 20
    t = r.trial
    fwd, rev = t.link.delays_ns
    expected = workload.ideal_fct_ns(100_000, 10_000_000, rev, fwd, t.mss, t.mtu) / 1e6
    assert fct["ideal_fct_ms"].to_list() == pytest.approx([expected] * len(fct))
    assert fct["slowdown"].drop_nans().min() >= 1.0
