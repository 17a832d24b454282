"""Bad trials are refused by the CLI before anything runs: exit code 2, a message naming the
field, the value and what is valid, and nothing written to the output directory."""

import os

import pytest

REFUSALS = [
    # (what, mutation, fragments that must all appear in the output)
    (
        "unknown algorithm",
        lambda d: d["flows"][0].update(cc="cubicc"),
        ["flows[0].cc", "'cubicc'", "unknown algorithm; valid are", "cubic", "reno"],
    ),
    ("zero capacity", lambda d: d["link"].update(capacity="0Mbit"), ["link.capacity", "'0Mbit'", "must be > 0"]),
    ("negative capacity", lambda d: d["link"].update(capacity="-10Mbit"), ["link.capacity", "'-10Mbit'", "must be > 0"]),
    (
        "queue below one packet (bytes)",
        lambda d: d["link"].update(queue="1000B"),
        ["link.queue", "'1KB'", "holds 1000 B", "must hold at least one packet (1500 B)"],
    ),
    (
        "queue below one packet (bdp)",
        lambda d: d["link"].update(queue="0.01bdp"),
        ["link.queue", "'0.01bdp'", "holds 250 B", "must hold at least one packet"],
    ),
    ("queue of zero packets", lambda d: d["link"].update(queue="0pkts"), ["link.queue", "'0pkts'", "must be > 0"]),
    (
        "malformed rate unit",
        lambda d: d["link"].update(capacity="10Mbitz"),
        ["link.capacity", "'10Mbitz'", "unknown rate unit 'Mbitz'; valid are bit, bps, kbit"],
    ),
    (
        "malformed time",
        lambda d: d["link"].update(rtt="twenty ms"),
        ["link.rtt", "'twenty ms'", "not a time", "units: ns, us"],
    ),
    ("missing unit", lambda d: d.update(duration="10"), ["duration", "'10'", "missing unit", "'25ms'"]),
    ("zero duration", lambda d: d.update(duration="0s"), ["duration", "'0s'", "must be > 0"]),
    ("negative duration", lambda d: d.update(duration="-1s"), ["duration", "'-1s'", "must be > 0"]),
    (
        "unknown top-level key",
        lambda d: d.update(durration="1s"),
        ["durration", "unknown key; valid are name, duration, steady"],
    ),
    (
        "unknown link key",
        lambda d: d["link"].update(bandwidth="1Mbit"),
        ["link.bandwidth", "unknown key; valid are", "capacity", "rtt", "queue"],
    ),
    (
        "unknown flow key",
        lambda d: d["flows"][1].update(algo="reno"),
        ["flows[1].algo", "unknown key; valid are cc, count, start, stagger, params"],
    ),
    (
        "steady window past the end",
        lambda d: d.update(steady=["1s", "3s"]),
        ["steady", "must lie within the duration (0 to 2s)"],
    ),
    ("steady window reversed", lambda d: d.update(steady=["1.5s", "1s"]), ["steady", "must start before it ends"]),
    (
        "unknown parameter",
        lambda d: d["flows"][0].update(params={"bogus": 2.0}),
        ["flows[0].params.bogus", "2.0", "unknown parameter for cubic; valid are"],
    ),
]


@pytest.mark.parametrize("what,mutate,fragments", REFUSALS, ids=[r[0] for r in REFUSALS])
@pytest.mark.parametrize("command", ["run", "validate"])
def test_refused(cli, trial_dict, write_trial, tmp_path, what, mutate, fragments, command):
    d = trial_dict()
    mutate(d)
    path = write_trial(d)
    out_dir = tmp_path / "out"
    args = ["run", path, "-o", out_dir] if command == "run" else ["validate", path]
    r = cli(*args)
    assert r.exit_code == 2, r.output
    for f in fragments:
        assert f in r.output, f"{f!r} not in:\n{r.output}"
    assert not out_dir.exists()
    assert os.listdir(tmp_path) == ["trial.toml"], "nothing but the trial file on disk"


def test_validate_reports_every_problem_at_once(cli, trial_dict, write_trial):
    d = trial_dict(duration="0s", extra=1)
    d["link"].update(capacity="fast", queue="2 bdpx", loss="200%")
    d["flows"][0].update(cc="bbr9", stagger="-1s")
    d["flows"][1].update(params={"x": 1.0}, size="12QB")
    r = cli("validate", write_trial(d))
    assert r.exit_code == 2
    for f in [
        "duration: '0s'",
        "extra: unknown key",
        "link.capacity: 'fast'",
        "link.queue: '2 bdpx'",
        "link.loss.p: '200%'",
        "flows[0].cc: 'bbr9'",
        "flows[0].stagger: '-1s'",
        "flows[1].params.x",
        "flows[1].size: '12QB'",
    ]:
        assert f in r.output, f"{f!r} not in:\n{r.output}"
    assert "9 problem(s)" in r.output


def test_validate_accepts_a_good_trial(cli, trial_dict, write_trial):
    r = cli("validate", write_trial(trial_dict()))
    assert r.exit_code == 0, r.output
    assert "ok" in r.output and "3 flow(s)" in r.output and "BDP 25 KB" in r.output


def test_missing_and_malformed_files(cli, tmp_path):
    r = cli("validate", tmp_path / "nope.toml")
    assert r.exit_code == 2 and "no such file" in r.output
    bad = tmp_path / "bad.toml"
    bad.write_text("[link\ncapacity = 1")
    r = cli("run", bad, "-o", tmp_path / "out")
    assert r.exit_code == 2 and "not valid TOML" in r.output
    assert not (tmp_path / "out").exists()


def test_existing_output_is_refused_without_force(cli, trial_dict, write_trial, tmp_path):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    (out_dir / "keep").write_text("mine")
    r = cli("run", write_trial(trial_dict()), "-o", out_dir)
    assert r.exit_code == 2
    assert "exists; pass --force" in r.output
    assert os.listdir(out_dir) == ["keep"]


@pytest.mark.parametrize("name", ["[/]", "[bold]x", "a[red]b[/red]"])
def test_a_path_with_brackets_is_printed_as_it_is(cli, trial_dict, write_trial, tmp_path, name):
    """Paths, names and error texts are never read as style markup: '[/]' once ended in a
    MarkupError traceback instead of the one-line refusal."""
    out_dir = tmp_path / name  # "[/]" is the directory "]" in "["
    out_dir.mkdir(parents=True)
    r = cli("run", write_trial(trial_dict()), "-o", out_dir)
    assert r.exit_code == 2
    assert f"error: {out_dir} exists; pass --force to replace it" in r.output
    r = cli("validate", tmp_path / name / "missing.toml")
    assert r.exit_code == 2 and f"{out_dir}" in r.output


@pytest.mark.parametrize("where", ["cwd", "parent", "trial file", "plain file", "foreign dir"])
def test_force_never_deletes_what_is_not_results(cli, trial_dict, write_trial, tmp_path, monkeypatch, where):
    """`run -o . --force` once deleted the working directory; every such target is refused, exit 2."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    trial = write_trial(trial_dict())
    moved = work / "t.toml"
    os.replace(trial, moved)
    (work / "notes.txt").write_text("mine")
    (work / "data").mkdir()
    (work / "data" / "keep").write_text("mine")
    dest = {"cwd": ".", "parent": "..", "trial file": "t.toml", "plain file": "notes.txt", "foreign dir": "data"}[where]
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    r = cli("run", "t.toml", "-o", dest, "--force")
    assert r.exit_code == 2, r.output
    assert "--force replaces only" in r.output or "one of this command's inputs" in r.output or "not a directory" in r.output
    after = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert after == before, "nothing deleted, nothing written"


def test_force_replaces_a_results_directory(cli, trial_dict, write_trial, tmp_path):
    trial = write_trial(trial_dict())
    out_dir = tmp_path / "out"
    assert cli("run", trial, "-o", out_dir).exit_code == 0
    (out_dir / "summary.json").write_text("{}")
    r = cli("run", trial, "-o", out_dir, "--force")
    assert r.exit_code == 0, r.output
    assert (out_dir / "summary.json").read_text() != "{}"


def test_version(cli):
    r = cli("--version")
    assert r.exit_code == 0
    assert r.output.startswith("cctestbed ") and "core " in r.output


def test_a_full_disk_is_one_line_exit_1_and_nothing_written(cli, trial_dict, write_trial, tmp_path, monkeypatch):
    """An error from the file system while the results are written (here the disk filling up
    under the Parquet writer) is one line naming the destination, exit 1, and no directory."""
    import cctestbed.results

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cctestbed.results, "write_parquet", full)
    out_dir = tmp_path / "out"
    r = cli("run", write_trial(trial_dict()), "-o", out_dir)
    assert r.exit_code == 1
    assert f"error: could not write {out_dir}: [Errno 28] No space left on device; nothing was written" in r.output
    assert "Traceback" not in r.output
    assert sorted(os.listdir(tmp_path)) == ["trial.toml"]  # no results, no temporary directory
