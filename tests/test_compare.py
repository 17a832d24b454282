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


def test_compare_of_two_different_trials_describes_both_and_draws_both_capacities(write_trial, trial_dict, tmp_path):
    """Comparing 10 with 20 Mbit/s: the title gives each trial's setup, and each payload
    capacity has its reference line (only A's had them)."""
    from cctestbed import run_trial
    from cctestbed.compare import plot_compare

    def at(capacity: str):
        return run_trial(trial_dict(duration="2s", steady=["1s", "2s"],
                                    link={"capacity": capacity, "rtt": "20ms", "queue": "1bdp"}))

    a, b = at("10Mbit"), at("20Mbit")
    fig = plot_compare(a, b)
    title = fig._suptitle.get_text()
    assert f"A: {a.trial.describe()}" in title and f"B: {b.trial.describe()}" in title
    goodput_axes = fig.axes[0]
    levels = sorted(round(line.get_ydata()[0], 3) for line in goodput_axes.lines if line.get_linestyle() == ":")
    assert levels == [round(10 * 1448 / 1500, 3), round(20 * 1448 / 1500, 3)]
    same = plot_compare(a, a)
    assert same._suptitle.get_text().count(a.trial.describe()) == 1
