"""Running sweeps: the store and trials.parquet, re-runs, failures, a kill and resume, Dask."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import time
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal
from sweep_helpers import cli_process, hooked_env, small_sweep_run, write_small_sweep

from cctestbed.sweep.store import trial_metrics
from cctestbed.sweep.spec import load_sweep

TRIAL_FILES = {"trial.toml", "flows.parquet", "router.parquet", "summary.json", "metrics.json", "run.json"}


def snapshot(out: Path) -> dict[str, tuple[bytes, int]]:
    """Finished trial directories: key -> (run.json, mtime of summary.json)."""
    snap = {}
    for d in (out / "trials").iterdir():
        if d.name.startswith("."):
            continue
        snap[d.name] = ((d / "run.json").read_bytes(), (d / "summary.json").stat().st_mtime_ns)
    return snap


def core_hash(spec) -> str:
    return hashlib.sha256(spec.trial.to_core_json().encode()).hexdigest()


def test_local_run_writes_store_and_table(tmp_path_factory):
    out, sweep_file, output = small_sweep_run(tmp_path_factory)
    sweep = load_sweep(sweep_file)
    df = pl.read_parquet(out / "trials.parquet")
    assert len(df) == 8
    assert df.columns[:7] == ["capacity", "queue", "seed", "status", "error", "dir", "key"]
    assert df["status"].to_list() == ["done"] * 8 and df["error"].null_count() == 8
    assert df.select("capacity", "queue", "seed").rows() == [
        (s.values["capacity"], s.values["queue"], s.seed) for s in sweep.specs
    ]
    for row in df.iter_rows(named=True):
        d = out / row["dir"]
        assert d.name == row["key"] and set(p.name for p in d.iterdir()) == TRIAL_FILES
        summary = json.loads((d / "summary.json").read_text())
        assert row["total.loss_pct"] == summary["total"]["loss_pct"]
        assert row["groups.bbr.share"] == summary["groups"]["bbr"]["share"]
        assert row["groups.cubic.share"] == summary["groups"]["cubic"]["share"]
        assert row["queue.mean_bdp"] == summary["queue"]["mean_bdp"]
        assert row["trial.seed"] == row["seed"]
        metrics = json.loads((d / "metrics.json").read_text())
        assert row["groups.bbr.share_p75"] == metrics["groups"]["bbr"]["share_p75"]
        assert row["groups.bbr.interval_shares"] == metrics["groups"]["bbr"]["interval_shares"]
        assert len(metrics["groups"]["bbr"]["interval_shares"]) == 4  # (1 s, 3 s] in 0.5 s intervals
        assert f"capacity = \"{row['capacity']}\"" in (d / "trial.toml").read_text()
    assert "8/8" in output and "0 failed" in output
    meta = json.loads((out / "sweep.json").read_text())
    assert meta["columns"] == {"capacity": "link.capacity", "queue": "link.queue"}


def test_rerun_skips_finished_trials(tmp_path_factory, cli):
    out, sweep_file, _ = small_sweep_run(tmp_path_factory)
    before = snapshot(out)
    table = pl.read_parquet(out / "trials.parquet")
    r = cli("sweep", sweep_file, "-o", out)
    assert r.exit_code == 0, r.output
    assert "0 trial(s) run, 8 already finished, 0 failed" in r.output
    assert snapshot(out) == before
    assert_frame_equal(pl.read_parquet(out / "trials.parquet"), table)
    # the dry run agrees: nothing to run
    r = cli("sweep", sweep_file, "-o", out, "--dry-run")
    assert r.exit_code == 0 and "to run: 0 trial(s)" in r.output and "8 trial(s) already finished" in r.output


def test_another_sweep_file_needs_resume(tmp_path_factory, tmp_path, cli):
    out, sweep_file, _ = small_sweep_run(tmp_path_factory)
    other = tmp_path / "other.toml"
    other.write_text(sweep_file.read_text().replace('["0.5bdp", "2bdp"]', '["2bdp"]'))
    before = snapshot(out)
    r = cli("sweep", other, "-o", out)
    assert r.exit_code == 2 and "different sweep file" in r.output and "--resume" in r.output
    assert snapshot(out) == before
    # the same trials stored under their keys serve the other sweep
    r = cli("sweep", other, "-o", out, "--resume", "--dry-run")
    assert r.exit_code == 0 and "to run: 0 trial(s)" in r.output


def test_failing_trial_is_recorded_and_the_rest_finish(tmp_path):
    f = write_small_sweep(tmp_path)
    out = tmp_path / "out"
    env = hooked_env(tmp_path, CCTB_TEST_FAIL="2:4000000")  # seed 2 at 4 Mbit/s: two trials
    p = cli_process(["sweep", str(f), "-o", str(out), "--workers", "2"], env)
    stdout, stderr = p.communicate(timeout=120)
    assert p.returncode == 1, stdout + stderr
    assert "injected failure" in stderr and "2 failed" in stdout
    df = pl.read_parquet(out / "trials.parquet")
    failed = df.filter(pl.col("status") == "failed")
    assert sorted(failed.select("capacity", "seed").rows()) == [("4Mbit", 2), ("4Mbit", 2)]
    assert failed["error"].to_list() == ["RuntimeError: injected failure for this trial"] * 2
    assert failed["dir"].null_count() == 2 and failed["total.loss_pct"].null_count() == 2
    assert (df["status"] == "done").sum() == 6
    for key in failed["key"]:
        rec = json.loads((out / "failed" / f"{key}.json").read_text())
        assert "injected failure" in rec["error"] and "Traceback" in rec["traceback"]
        assert not (out / "trials" / key).exists()
    # the next run, without the fault, runs exactly the failed trials
    done_before = snapshot(out)
    p = cli_process(["sweep", str(f), "-o", str(out)], {k: v for k, v in env.items() if k != "CCTB_TEST_FAIL"})
    stdout, stderr = p.communicate(timeout=120)
    assert p.returncode == 0, stdout + stderr
    assert "2 trial(s) run, 6 already finished, 0 failed" in stdout
    df = pl.read_parquet(out / "trials.parquet")
    assert df["status"].to_list() == ["done"] * 8 and df["error"].null_count() == 8
    after = snapshot(out)
    assert {k: after[k] for k in done_before} == done_before
    assert not list((out / "failed").iterdir())


def test_trial_that_kills_its_worker_is_recorded_after_two_deaths_and_the_rest_run_once(tmp_path):
    f = write_small_sweep(tmp_path)
    out = tmp_path / "out"
    log = tmp_path / "sims.log"
    # seed 2 at 8 Mbit/s (two trials) kills the worker process; one worker, so no other trial is
    # in the pool when it breaks
    env = hooked_env(tmp_path, CCTB_TEST_KILL="2:8000000", CCTB_TEST_SIMLOG=str(log))
    p = cli_process(["sweep", str(f), "-o", str(out), "--workers", "1"], env)
    stdout, stderr = p.communicate(timeout=300)
    assert p.returncode == 1, stdout + stderr
    df = pl.read_parquet(out / "trials.parquet")
    failed = df.filter(pl.col("status") == "failed")
    assert sorted(failed.select("capacity", "seed").rows()) == [("8Mbit", 2), ("8Mbit", 2)]
    assert all("died 2 times" in e for e in failed["error"])
    assert (df["status"] == "done").sum() == 6
    runs = log.read_text().split()
    assert sorted(runs.count(h) for h in set(runs)) == [1] * 6 + [2, 2]


def test_kill_mid_run_then_resume_runs_each_trial_once(tmp_path):
    f = write_small_sweep(tmp_path)
    sweep = load_sweep(f)
    out = tmp_path / "out"
    log = tmp_path / "sims.log"
    env = hooked_env(tmp_path, CCTB_TEST_SIMLOG=str(log), CCTB_TEST_DELAY="0.7")
    p = cli_process(["sweep", str(f), "-o", str(out), "--workers", "2"], env)
    deadline = time.time() + 90
    while time.time() < deadline:
        done = [d for d in (out / "trials").glob("*") if not d.name.startswith(".")] if (out / "trials").exists() else []
        if len(done) >= 3:
            break
        assert p.poll() is None, p.communicate()
        time.sleep(0.05)
    else:
        pytest.fail("the sweep did not finish three trials in time")
    os.killpg(p.pid, signal.SIGKILL)
    p.wait(timeout=10)
    p.stdout.close()
    p.stderr.close()
    time.sleep(0.3)  # let orphaned workers notice

    killed = snapshot(out)
    assert 3 <= len(killed) < 8
    for key in killed:  # every stored trial is complete
        assert set(q.name for q in (out / "trials" / key).iterdir()) == TRIAL_FILES
        trial_metrics(out / "trials" / key)
    pl.read_parquet(out / "trials.parquet")  # whatever its age, never half-written

    p = cli_process(["sweep", "--resume", "-o", str(out), "--workers", "2"],
                    {**env, "CCTB_TEST_DELAY": "0"})
    stdout, stderr = p.communicate(timeout=120)
    assert p.returncode == 0, stdout + stderr
    assert f"{len(killed)} already finished" in stdout

    final = snapshot(out)
    assert len(final) == 8 and set(final) == {s.key for s in sweep.specs}
    assert {k: final[k] for k in killed} == killed  # finished trials untouched
    assert not [q for q in (out / "trials").iterdir() if q.name.startswith(".")]
    df = pl.read_parquet(out / "trials.parquet")
    assert df["status"].to_list() == ["done"] * 8

    runs = log.read_text().split()
    counts = {core_hash(s): runs.count(core_hash(s)) for s in sweep.specs}
    by_key = {s.key: core_hash(s) for s in sweep.specs}
    assert all(counts[by_key[k]] == 1 for k in killed), counts  # no finished trial ran twice
    assert all(c >= 1 for c in counts.values())  # none missing
    assert sum(counts.values()) <= 8 + 2 * 2  # at most the ones in progress ran again
    assert len(runs) == sum(counts.values())


def test_dask_local_cluster_gives_the_same_table(tmp_path_factory, tmp_path, cli):
    distributed = pytest.importorskip("distributed")
    out_local, sweep_file, _ = small_sweep_run(tmp_path_factory)
    out = tmp_path / "dask"
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                  dashboard_address=None) as cluster:
        r = cli("sweep", sweep_file, "-o", out, "--cluster", cluster.scheduler_address)
    assert r.exit_code == 0, r.output
    assert "8 trial(s) run" in r.output and f"on {cluster.scheduler_address}" in r.output
    local = pl.read_parquet(out_local / "trials.parquet")
    remote = pl.read_parquet(out / "trials.parquet")
    assert_frame_equal(local, remote)
    for row in local.iter_rows(named=True):
        for name in ("flows.parquet", "router.parquet", "summary.json", "metrics.json", "trial.toml"):
            assert (out / row["dir"] / name).read_bytes() == (out_local / row["dir"] / name).read_bytes()


def test_dask_refuses_an_unreachable_scheduler(tmp_path, cli, monkeypatch):
    pytest.importorskip("distributed")
    monkeypatch.setattr("cctestbed.sweep.execute.DASK_CONNECT_TIMEOUT_S", 2)
    f = write_small_sweep(tmp_path)
    r = cli("sweep", f, "-o", tmp_path / "out", "--cluster", "tcp://127.0.0.1:9")
    assert r.exit_code == 2 and "cannot reach the Dask scheduler at tcp://127.0.0.1:9" in r.output
    assert not (tmp_path / "out").exists()  # connected before anything is created


def test_summary_telemetry_keeps_the_metrics_without_the_series(tmp_path_factory, tmp_path, cli):
    """``telemetry = "summary"``: each trial keeps its summary and metrics, no time series, and
    trials.parquet is the full sweep's value for value; the same store run later with full
    telemetry (``--resume``) runs those trials again for their series; a bad value is refused."""
    out_full, sweep_file, _ = small_sweep_run(tmp_path_factory)
    summary_file = tmp_path / "small.toml"
    summary_file.write_text('telemetry = "summary"\n' + sweep_file.read_text())
    out = tmp_path / "out"
    r = cli("sweep", summary_file, "-o", out, "--workers", "2")
    assert r.exit_code == 0, r.output
    for d in (out / "trials").iterdir():
        assert {p.name for p in d.iterdir()} == TRIAL_FILES - {"flows.parquet", "router.parquet"}, d
    full, summ = pl.read_parquet(out_full / "trials.parquet"), pl.read_parquet(out / "trials.parquet")
    assert_frame_equal(summ.drop("dir"), full.drop("dir"))
    r = cli("plot", next((out / "trials").iterdir()))
    assert r.exit_code == 2 and 'telemetry = "summary"' in r.output
    r = cli("sweep", sweep_file, "-o", out, "--resume")
    assert r.exit_code == 0 and "8 trial(s) run" in r.output, r.output
    for d in (out / "trials").iterdir():
        assert {p.name for p in d.iterdir()} == TRIAL_FILES
    bad = tmp_path / "bad.toml"
    bad.write_text('telemetry = "none"\n' + sweep_file.read_text())
    r = cli("sweep", bad, "-o", tmp_path / "never")
    assert r.exit_code == 2 and "telemetry: 'none': valid are \"full\"" in r.output, r.output
    assert not (tmp_path / "never").exists()
