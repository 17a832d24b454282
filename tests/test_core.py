"""Through the compiled core: determinism, conservation, end-to-end runs and the API."""

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

import cctestbed
from cctestbed import _core
from cctestbed.config import ConfigError, load_trial, parse_trial
from cctestbed.results import FILES, PLOT_FILE, TrialResult
from cctestbed.summary import TrialInfo, summarize


def lossy(trial_dict, seed=1, p="1%"):
    d = trial_dict(seed=seed)
    d["link"]["loss"] = p
    return d


def test_algorithms_come_from_the_core():
    algos = cctestbed.algorithms()
    assert {"reno", "cubic"} <= set(algos)
    assert algos == {k: dict(v) for k, v in _core.algorithms().items()}


def test_core_accepts_what_the_schema_produces(trial_dict):
    d = trial_dict()
    d["link"].update(
        loss={"model": "gilbert-elliott", "p": "1%", "r": "30%"},
        shaper={"rate": "10Mbit", "burst": "3KB"},
        policer={"rate": "20Mbit", "burst": "30KB"},
        schedule=[{"at": "1s", "capacity": "5Mbit"}],
        access_rate="100Mbit",
        delay_schedule=[{"at": "1s", "rtt": "40ms"}],
        jitter="500us",
    )
    d["flows"][1].update(size="100KB", rwnd="64KB", pacing=True, extra_delay="5ms", delayed_ack=False, group="g")
    assert _core.validate(parse_trial(d).to_core_json()) == []


def test_core_range_errors_are_reported_per_group(trial_dict):
    d = trial_dict()
    d["flows"][0].update(params={"beta": 1e9})  # out of range for cubic (group of 2 flows)
    with pytest.raises(ConfigError) as e:
        parse_trial(d)
    (p,) = e.value.problems
    assert p.startswith("flows[0].params.beta: ")
    assert "must be in" in p


@pytest.mark.parametrize("extra", [{}, {"loss": "2%"}, {"policer": {"rate": "6Mbit", "burst": "15KB"}}])
def test_packets_are_conserved(trial_dict, extra):
    d = trial_dict()
    d["link"].update(extra, queue="0.5bdp")
    r = cctestbed.run_trial(d)
    fin = r.final
    assert len(fin["flows"]) == 3
    for f in fin["flows"]:
        assert f["sent_pkts"] == f["delivered_pkts"] + f["dropped_pkts"] + f["queued_pkts"] + f["in_transit_pkts"]
        assert f["sent_pkts"] > 0
    router = fin["router"]
    drops = router["drops_overflow"] + router["drops_random"] + router["drops_policer"]
    assert drops == sum(f["dropped_pkts"] for f in fin["flows"])
    assert router["arrivals_pkts"] == router["departures_pkts"] + drops + sum(f["queued_pkts"] for f in fin["flows"])
    assert fin["events"] > 0
    # the telemetry's last sample (at the end of the run) agrees with the final counters, up to
    # events at that very instant, which the sample may precede
    last = r.flows.filter(pl.col("time_s") == r.flows["time_s"].max()).sort("flow")
    for sampled, f in zip(last.iter_rows(named=True), fin["flows"]):
        assert 0 <= f["delivered_bytes"] - sampled["delivered_bytes"] <= 2 * 1448
        assert 0 <= f["sent_segs"] - sampled["sent_segs"] <= 2
    assert 0 <= router["drops_overflow"] - r.router["drops_overflow"][-1] <= 2


def run_cli(cli, path, out, *extra):
    r = cli("run", path, "-o", out, *extra)
    assert r.exit_code == 0, r.output
    return out


def test_same_seed_gives_identical_files(cli, trial_dict, write_trial, tmp_path):
    path = write_trial(lossy(trial_dict))
    a = run_cli(cli, path, tmp_path / "a")
    b = run_cli(cli, path, tmp_path / "b")
    for name in ("flows.parquet", "router.parquet", "summary.json", "trial.toml"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_different_seed_differs_with_random_loss(cli, trial_dict, write_trial, tmp_path):
    path = write_trial(lossy(trial_dict))
    a = run_cli(cli, path, tmp_path / "a")
    b = run_cli(cli, path, tmp_path / "b", "--seed", "2")
    assert (a / "flows.parquet").read_bytes() != (b / "flows.parquet").read_bytes()
    assert (a / "router.parquet").read_bytes() != (b / "router.parquet").read_bytes()
    assert json.loads((b / "summary.json").read_text())["trial"]["seed"] == 2


def test_end_to_end_run_writes_consistent_results(cli, trial_dict, write_trial, tmp_path):
    d = trial_dict(duration="4s", steady=["2s", "4s"])
    out = tmp_path / "res"
    r = cli("run", write_trial(d), "-o", out)
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in out.iterdir()) == sorted(FILES), "no trial.png unless --plot"
    assert f"cctestbed plot {out}" in r.output, "says how to draw the plot"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == [], "no temp dirs left"

    summary = json.loads((out / "summary.json").read_text())
    flows = pl.read_parquet(out / "flows.parquet")
    router = pl.read_parquet(out / "router.parquet")
    trial = load_trial(out / "trial.toml")
    assert trial.to_core() == parse_trial(d).to_core()

    # the frames: documented columns, labels as strings, the backend column
    for col in ("time_s", "flow", "cc", "group", "goodput_bps", "delivered_bytes", "rtt_ms", "cwnd_pkts",
                "inflight_pkts", "retrans_segs", "state", "ca_state", "backend"):
        assert col in flows.columns
    assert flows["state"].dtype == pl.String and flows["ca_state"].dtype == pl.String
    assert set(flows["ca_state"].unique()) <= {"open", "disorder", "recovery", "loss"}
    assert set(flows["backend"].unique()) == {"sim"} == set(router["backend"].unique())
    assert flows["flow"].unique().sort().to_list() == [0, 1, 2]
    assert len(flows) == 3 * len(router)
    assert flows["time_s"].is_sorted()

    # the summary is what the metrics give on the saved frames, and is self-consistent
    assert summary == json.loads(json.dumps(summarize(flows, router, TrialInfo.from_trial(trial))))
    assert summary["trial"]["steady_s"] == [2.0, 4.0]
    assert summary["trial"]["bdp_bytes"] == 25_000
    assert len(summary["flows"]) == 3
    tot = summary["total"]
    # Goodput counts in-order delivery, so a loss repaired inside a 2 s window releases data that
    # crossed the link before it: a few percent above the payload capacity is possible.
    assert 0.8 < tot["utilization"] <= 1.03, "bulk flows saturate the link"
    assert tot["goodput_bps"] == pytest.approx(sum(f["goodput_bps"] for f in summary["flows"]))
    assert sum(g["share"] for g in summary["groups"].values()) == pytest.approx(tot["utilization"])
    assert {k: g["flows"] for k, g in summary["groups"].items()} == {"cubic": 2, "reno": 1}
    assert summary["rtt"]["min_ms"] >= 20.0 - 1e-6, "no RTT below RTprop"
    assert summary["queue"]["p95_bytes"] <= 50_000


def test_python_api(trial_dict, tmp_path):
    d = trial_dict(duration="1s")
    r1 = cctestbed.run_trial(d)
    r2 = cctestbed.run_trial(parse_trial(d))
    assert r1.flows.equals(r2.flows, null_equal=True)
    assert r1.summary == r2.summary
    fig = r1.plot()
    # Five time-series panels and the state bands; no BBR flow, so no BBR model panel.
    assert len(fig.axes) == 6
    assert fig.axes[-1].get_ylabel().startswith("state")
    saved = r1.save(tmp_path / "x")
    assert sorted(p.name for p in saved.iterdir()) == sorted(FILES), "the plot is drawn only when asked"
    back = TrialResult.load(saved)
    assert back.summary == r1.summary
    assert back.flows.equals(r1.flows, null_equal=True)
    with pytest.raises(FileExistsError):
        r1.save(tmp_path / "x")
    drawn = r1.save(tmp_path / "y", plot=True)
    assert sorted(p.name for p in drawn.iterdir()) == sorted((*FILES, PLOT_FILE))
    assert (drawn / PLOT_FILE).read_bytes()[:4] == b"\x89PNG"
    for name in FILES:
        assert (drawn / name).read_bytes() == (saved / name).read_bytes(), name


def _long(trial_dict):
    """A trial of minutes of work for the core: 10 minutes of a 1 Gbit/s bottleneck."""
    d = trial_dict(duration="600s")
    d["link"]["capacity"] = "1Gbit"
    return parse_trial(d)


def test_the_modules_that_start_a_simulation_load_no_dataframe_library():
    """`run` starts the core before it loads polars, NumPy and pyarrow, which then load while
    the core runs: nothing it needs up to then may load them."""
    code = ("import sys, cctestbed.runner, cctestbed.destination, cctestbed.cli\n"
            "print(sorted(m for m in ('polars', 'numpy', 'pyarrow') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("user_value", [None, "2"])
def test_the_command_keeps_openblas_to_one_thread_unless_the_user_chose(user_value):
    """OpenBLAS starts a thread per core when NumPy loads, and they spin beside the core that
    `run` is running meanwhile; the command keeps it to its own thread unless the user set
    OPENBLAS_NUM_THREADS, whose choice stands."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if user_value is not None:
        env["OPENBLAS_NUM_THREADS"] = user_value
    code = ("import os, cctestbed.__main__, numpy\n"
            "print(os.environ['OPENBLAS_NUM_THREADS'], len(os.listdir('/proc/self/task')),\n"
            "      numpy.__config__.CONFIG['Build Dependencies']['blas']['name'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    value, threads, blas = out.stdout.split()
    assert value == (user_value or "1")
    if user_value is None and "openblas" in blas:
        assert threads == "1"


def test_leaving_a_simulation_by_an_exception_stops_the_core(trial_dict):
    """Ctrl-C reaches the thread that started the core, not the core's own: leaving the block by
    its KeyboardInterrupt stops the core and waits for it, long before the trial's end."""
    from cctestbed.runner import Simulation

    with pytest.raises(KeyboardInterrupt):
        with Simulation(_long(trial_dict)) as sim:
            raise KeyboardInterrupt
    assert not sim._thread.is_alive()
    assert isinstance(sim._error, KeyboardInterrupt), "the core stopped, it did not finish"


def test_a_raised_stop_flag_stops_the_core(trial_dict):
    flag = _core.StopFlag()
    flag.set()
    with pytest.raises(KeyboardInterrupt):
        _core.simulate(_long(trial_dict).to_core_json(), flag)


def _imported(stderr: str) -> set[str]:
    """The modules a process run under ``python -X importtime`` imported."""
    return {ln.split("|")[-1].strip() for ln in stderr.splitlines() if ln.startswith("import time:")}


def test_run_draws_the_plot_only_when_asked(trial_dict, write_trial, tmp_path):
    path = write_trial(trial_dict(duration="1s"))
    cmd = [sys.executable, "-X", "importtime", "-m", "cctestbed", "run", str(path)]
    bare = subprocess.run([*cmd, "-o", str(tmp_path / "bare")], capture_output=True, text=True, check=True)
    assert sorted(p.name for p in (tmp_path / "bare").iterdir()) == sorted(FILES)
    assert f"plot:    cctestbed plot {tmp_path / 'bare'}" in bare.stdout
    modules = _imported(bare.stderr)
    assert "cctestbed.runner" in modules, "the importtime listing was read"
    assert not {m for m in modules if m.split(".")[0] == "matplotlib"}, "run without --plot loads no matplotlib"

    drawn = subprocess.run([*cmd, "-o", str(tmp_path / "drawn"), "--plot"], capture_output=True, text=True,
                           check=True)
    assert sorted(p.name for p in (tmp_path / "drawn").iterdir()) == sorted((*FILES, PLOT_FILE))
    assert (tmp_path / "drawn" / PLOT_FILE).read_bytes()[:4] == b"\x89PNG"
    assert f"plot:    {tmp_path / 'drawn' / PLOT_FILE}" in drawn.stdout
    for name in FILES:
        assert (tmp_path / "drawn" / name).read_bytes() == (tmp_path / "bare" / name).read_bytes(), name

    # the plot drawn later from the directory is the one run --plot draws
    later = subprocess.run([sys.executable, "-m", "cctestbed", "plot", str(tmp_path / "bare")], capture_output=True,
                           text=True, check=True)
    assert f"plot: {tmp_path / 'bare' / PLOT_FILE}" in later.stdout
    assert (tmp_path / "bare" / PLOT_FILE).read_bytes() == (tmp_path / "drawn" / PLOT_FILE).read_bytes()


def test_random_loss_rate_reaches_the_router(trial_dict):
    d = trial_dict(duration="5s")
    d["link"].update(capacity="20Mbit", queue="8bdp", loss="1%")
    r = cctestbed.run_trial(d)
    router = r.final["router"]
    rate = router["drops_random"] / router["arrivals_pkts"]
    assert 0.006 < rate < 0.014


def test_delay_schedule_reaches_the_core(trial_dict):
    d = trial_dict(flows=[{"cc": "reno"}])
    d["link"].update(queue="8bdp", delay_schedule=[{"at": "1s", "rtt": "60ms"}])
    r = cctestbed.run_trial(d)
    rtt = r.flows.with_columns(pl.col("rtt_ms").fill_nan(None))
    assert rtt.filter(pl.col("time_s") < 0.99)["rtt_ms"].min() < 40
    assert rtt.filter(pl.col("time_s") > 1.5)["rtt_ms"].min() >= 60 - 1e-6


def test_queue_limit_and_schedule_reach_the_core(trial_dict):
    d = trial_dict()
    d["link"].update(queue="20pkts", schedule=[{"at": "1s", "capacity": "5Mbit"}])
    r = cctestbed.run_trial(d)
    assert r.router["queue_pkts"].max() <= 20
    cap = r.router.select("time_s", "capacity_bps")
    assert set(cap.filter(pl.col("time_s") < 0.99)["capacity_bps"]) == {10_000_000}
    assert set(cap.filter(pl.col("time_s") > 1.01)["capacity_bps"]) == {5_000_000}
