"""`cctestbed sweep --judge`: harm columns equal to cctestbed.judge's for every trial, baselines
run once and cached across runs of the sweep, and the sweeps that cannot be judged."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from sweep_helpers import cli_process, hooked_env

import cctestbed
from cctestbed.sweep.spec import load_sweep

#: 2 queue sizes x 2 seeds of one BBR and one CUBIC flow, 3 s each.
JUDGED_SWEEP = '''
name = "judged"
trials = 2
steady = ["1s", "3s"]
[base]
duration = "3s"
[base.link]
capacity = "8Mbit"
rtt = "20ms"
[[base.flows]]
cc = "bbr"
[[base.flows]]
cc = "cubic"
[axes]
"link.queue" = ["0.5bdp", "4bdp"]
'''


def _run(tmp: Path, out: Path, cache: Path, log: Path, *extra: str) -> tuple[str, list[str]]:
    """Run the sweep with --judge in a process whose every simulation is logged; (output, hashes
    of the core configs simulated by this run)."""
    before = log.read_text().split() if log.exists() else []
    p = cli_process(["sweep", str(tmp / "judged.toml"), "-o", str(out), "--judge", "--judge-cache", str(cache),
                     "--workers", "2", *extra], hooked_env(tmp, CCTB_TEST_SIMLOG=str(log)))
    stdout, stderr = p.communicate(timeout=300)
    assert p.returncode == 0, stdout + stderr
    return stdout + stderr, (log.read_text().split() if log.exists() else [])[len(before):]


def test_judged_sweep_equals_judge_and_caches_its_baselines(tmp_path):
    (tmp_path / "judged.toml").write_text(JUDGED_SWEEP)
    out, cache, log = tmp_path / "out", tmp_path / "cache", tmp_path / "sims.log"
    text, sims = _run(tmp_path, out, cache, log)
    # 4 trials, and per trial each group alone and beside a copy of itself: 16 baselines, each once
    assert len(sims) == 20 and len(set(sims)) == 20
    assert "16 distinct baseline run(s): 0 from the cache, 16 run" in text

    sweep = load_sweep(tmp_path / "judged.toml")
    df = pl.read_parquet(out / "trials.parquet")
    assert df["status"].to_list() == ["done"] * 4
    for spec in sweep.specs:
        row = df.filter(pl.col("key") == spec.key).row(0, named=True)
        doc = cctestbed.judge(spec.trial, cache=tmp_path / "apart")  # the judge on its own, its own cache
        assert sorted(doc["groups"]) == ["bbr", "cubic"]
        for g, gd in doc["groups"].items():
            assert set(gd["harm"]) == {"throughput", "rtt_p95", "loss"}
            for metric, h in gd["harm"].items():
                assert row[f"judge.{g}.harm.{metric}"] == h
                assert row[f"judge.{g}.harm_self.{metric}"] == gd["harm_self"][metric]
                assert row[f"judge.{g}.deployable.{metric}"] == gd["deployable"][metric]
            assert row[f"judge.{g}.verdict"] == gd["verdict"]
            assert row[f"judge.{g}.alone.goodput_bps"] == gd["alone"]["goodput_bps"]
        stored = json.loads((out / "judge" / f"{spec.key}.json").read_text())
        assert stored["groups"] == json.loads(json.dumps(doc["groups"]))
        assert stored["runs"]["mixed"]["dir"] == f"trials/{spec.key}"
    # BBR takes most of a 0.5 BDP buffer: CUBIC is harmed beyond what CUBIC does to itself
    shallow = df.filter(pl.col("queue") == "0.5bdp")
    assert (shallow["judge.cubic.harm.throughput"] > shallow["judge.cubic.harm_self.throughput"]).all()
    assert shallow["judge.cubic.verdict"].to_list() == ["not deployable"] * 2

    # resumed: nothing simulated, every trial judged before
    text, sims = _run(tmp_path, out, cache, log)
    assert sims == [] and "0 trial(s) judged, 4 judged before" in text
    # into a new directory: the sweep's own 4 trials run, every baseline comes from the cache
    text, sims = _run(tmp_path, tmp_path / "again", cache, log)
    assert len(sims) == 4 and "16 distinct baseline run(s): 16 from the cache, 0 run" in text
    again = pl.read_parquet(tmp_path / "again" / "trials.parquet")
    harm_cols = [c for c in df.columns if c.startswith("judge.")]
    assert again.select(harm_cols).equals(df.select(harm_cols))

    # the report's harm section and plot
    from cctestbed.sweep.report import write_report

    page = write_report(out)
    html = page.read_text()
    assert 'id="harm"' in html and 'id="harm-points"' in html and "harm_vs_queue.png" in html
    assert (out / "report" / "harm_vs_queue.png").is_file()



@pytest.mark.parametrize("flows, extra, why", [
    ('[[base.flows]]\ncc = "cubic"\ncount = 2\n', "", "two or more groups"),
    ('[[base.flows]]\ncc = "cubic"\n[[base.flows]]\nkind = "udp"\nrate = "1Mbit"\n', "", "judge compares tcp"),
    ('[base.link.reverse]\ncapacity = "8Mbit"\nqueue = "50KB"\n'
     '[[base.flows]]\ncc = "cubic"\n[[base.flows]]\ncc = "bbr"\ndirection = "reverse"\n', "",
     "reverse direction"),
    ('[[base.flows]]\ncc = "cubic"\n[[base.flows]]\ncc = "bbr"\n', 'backend = "kernel"\n', "on the simulator"),
])
def test_sweeps_that_cannot_be_judged_are_refused(cli, tmp_path, flows, extra, why):
    text = ('name = "x"\n[base]\nduration = "3s"\n' + extra + '[base.link]\ncapacity = "8Mbit"\nrtt = "20ms"\n'
            'queue = "1bdp"\n' + flows + '[axes]\n"link.capacity" = ["8Mbit", "16Mbit"]\n')
    f = tmp_path / "x.toml"
    f.write_text(text)
    r = cli("sweep", f, "-o", tmp_path / "out", "--judge")
    assert r.exit_code == 2, r.output
    assert "cannot be judged" in r.output and why in r.output and "nothing was written" in r.output
    assert "at 2 of 2 point(s)" in r.output
    assert not (tmp_path / "out").exists()


def test_judge_refused_with_until(cli, tmp_path):
    (tmp_path / "judged.toml").write_text(JUDGED_SWEEP)
    r = cli("sweep", tmp_path / "judged.toml", "-o", tmp_path / "out", "--judge", "--until",
            "ci95(groups.bbr.share) <= 0.05")
    assert r.exit_code == 2 and "--until" in r.output and not (tmp_path / "out").exists()
    r = cli("sweep", tmp_path / "judged.toml", "-o", tmp_path / "out", "--judge-cache", tmp_path / "c")
    assert r.exit_code == 2 and "goes with --judge" in r.output
