"""`cctestbed compare`: two results directories, metrics side by side and an overlaid plot."""

from __future__ import annotations


def test_compare_two_runs(cli, write_trial, trial_dict, tmp_path):
    path = write_trial(trial_dict(duration="3s", steady=["1s", "3s"]))
    a, b = tmp_path / "a", tmp_path / "b"
    assert cli("run", path, "-o", a).exit_code == 0
    assert cli("run", path, "-o", b, "--seed", "2").exit_code == 0
    r = cli("compare", a, b, "-o", tmp_path / "cmp.png")
    assert r.exit_code == 0, r.output
    for metric in ("utilization %", "loss at router %", "RTT p50 ms", "cubic: share %", "reno: share %", "B - A"):
        assert metric in r.output
    assert (tmp_path / "cmp.png").stat().st_size > 10_000


def test_compare_refuses_a_directory_without_results(cli, tmp_path):
    (tmp_path / "empty").mkdir()
    r = cli("compare", tmp_path / "empty", tmp_path / "empty")
    assert r.exit_code == 2 and "not a results directory" in r.output
