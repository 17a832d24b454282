"""The destination rule: no command deletes, replaces or writes into what it did not write, nor
into a path holding one of its own inputs; each case failed before the rule was one."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from trial_helpers import toml_of
from sweep_helpers import small_sweep_run

from cctestbed.destination import OWNER_FILE, OWNER_TEXT, clean_stale, is_owned, write_dir

TRACE = Path(__file__).resolve().parents[1] / "examples" / "traces" / "step-24-6.trace"


def _tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` with its bytes, to show that nothing changed."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# --- report -o ------------------------------------------------------------------------------------

def test_report_refuses_to_replace_a_folder_it_did_not_write(tmp_path_factory, tmp_path, cli, monkeypatch):
    """`report SW -o mydata.html` used to rmtree the user's mydata/ (the figures' folder)."""
    sweep, _, _ = small_sweep_run(tmp_path_factory)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mydata").mkdir()
    (tmp_path / "mydata" / "ch1.tex").write_text("my thesis\n")
    r = cli("report", sweep, "-o", "mydata.html")
    assert r.exit_code == 2, r.output
    assert "was not written by cctestbed report" in r.output and "nothing was written" in r.output
    assert (tmp_path / "mydata" / "ch1.tex").read_text() == "my thesis\n"
    assert not (tmp_path / "mydata.html").exists()


def test_report_never_writes_over_the_sweeps_own_files(tmp_path_factory, cli):
    """`-o SW/trials.html` deleted the stored trials; `-o SW/sweep.json` overwrote the record."""
    sweep, _, _ = small_sweep_run(tmp_path_factory)
    before = _tree(sweep)
    for target in ("trials.html", "sweep.json", "trials.parquet", "failed.htm"):
        r = cli("report", sweep, "-o", sweep / target)
        assert r.exit_code == 2, (target, r.output)
    assert _tree(sweep) == before


def test_report_replaces_its_own_page_and_figures_and_nothing_else(tmp_path_factory, tmp_path, cli):
    sweep, _, _ = small_sweep_run(tmp_path_factory)
    page = tmp_path / "fig.html"
    assert cli("report", sweep, "-o", page).exit_code == 0
    figs = tmp_path / "fig"
    assert (figs / ".cctestbed-report").is_file() and any(figs.glob("*.png"))
    (figs / "stale.png").write_bytes(b"left by an older report")
    r = cli("report", sweep, "-o", page)  # a second time: its own page and folder are replaced
    assert r.exit_code == 0, r.output
    assert not (figs / "stale.png").exists() and any(figs.glob("*.png"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fig", "fig.html"], "no temporary left beside it"
    # an HTML file of the user's is not a report of ours
    mine = tmp_path / "notes.html"
    mine.write_text("<html>my notes</html>")
    r = cli("report", sweep, "-o", mine)
    assert r.exit_code == 2 and "was not written by cctestbed" in r.output
    assert mine.read_text() == "<html>my notes</html>" and not (tmp_path / "notes").exists()


# --- --force and the command's own inputs ---------------------------------------------------------

def test_run_force_never_replaces_a_directory_holding_the_trials_trace(cli, trial_dict, tmp_path):
    """`run --force` deleted the trial's link.trace when it lay inside the replaced directory."""
    res = tmp_path / "res"
    trial = trial_dict(duration="1s")
    trial["link"] = {"trace": "res/link.trace", "rtt": "20ms", "queue": "2bdp"}
    (tmp_path / "t.toml").write_text(toml_of(trial))
    res.mkdir()
    shutil.copy(TRACE, res / "link.trace")
    (res / "trial.toml").write_text("name = 'old'\n")
    (res / "summary.json").write_text("{}")  # a results directory of ours, by its files
    r = cli("run", tmp_path / "t.toml", "-o", res, "--force")
    assert r.exit_code == 2, r.output
    assert "link.trace, one of this command's inputs" in r.output
    assert (res / "link.trace").read_bytes() == TRACE.read_bytes()


def test_analyze_force_never_replaces_the_directory_holding_its_captures(cli, tmp_path):
    """`analyze r/snd0.pcap r/rcv0.pcap -o r --force` deleted both captures."""
    from cctestbed.runner import run_trial

    trial = {"name": "c", "duration": "1s", "seed": 1, "capture": True,
             "link": {"capacity": "10Mbit", "rtt": "20ms", "queue": "1bdp"}, "flows": [{"cc": "cubic"}]}
    r = run_trial(trial)
    res = tmp_path / "r"
    r.save(res)
    caps = sorted(res.glob("*.pcap"))
    assert caps, "the trial wrote captures"
    before = {p.name: p.read_bytes() for p in caps}
    out = cli("analyze", *caps, "-o", res, "--force")
    assert out.exit_code == 2, out.output
    assert "one of this command's inputs" in out.output
    assert {p.name: p.read_bytes() for p in sorted(res.glob("*.pcap"))} == before


# --- leftovers ------------------------------------------------------------------------------------

def test_cleanup_removes_only_temporaries_it_marked(cli, trial_dict, write_trial, tmp_path, monkeypatch):
    """A user's `.res.tmp-mywork/thesis.tex` went with `run t.toml -o res`."""
    monkeypatch.chdir(tmp_path)
    mine = tmp_path / ".res.tmp-mywork"
    mine.mkdir()
    (mine / "thesis.tex").write_text("chapter 1\n")
    ours = tmp_path / ".res.tmp-abc123"  # left by a killed run: marked, unlocked
    ours.mkdir()
    (ours / OWNER_FILE).write_text(OWNER_TEXT)
    assert is_owned(ours) and not is_owned(mine)
    write_trial(trial_dict(duration="1s"), name="t.toml")
    r = cli("run", "t.toml", "-o", "res")
    assert r.exit_code == 0, r.output
    assert (mine / "thesis.tex").read_text() == "chapter 1\n"
    assert not ours.exists()
    assert not (tmp_path / "res" / OWNER_FILE).exists(), "the marker does not travel into the results"


def test_a_marker_with_other_text_is_not_ours(tmp_path):
    d = tmp_path / ".x.tmp-a"
    d.mkdir()
    (d / OWNER_FILE).write_text("something else\n")
    removed, _ = clean_stale(tmp_path)
    assert removed == [] and d.exists()


def test_an_interrupted_write_leaves_no_marked_or_unmarked_temporary(tmp_path):
    def boom(tmp: Path) -> None:
        (tmp / "half").write_text("x")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_dir(tmp_path / "res", boom)
    assert os.listdir(tmp_path) == []


# --- plot -o and compare -o -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def two_results(tmp_path_factory):
    from cctestbed.runner import run_trial

    root = tmp_path_factory.mktemp("two")
    trial = {"name": "p", "duration": "1s", "seed": 1,
             "link": {"capacity": "10Mbit", "rtt": "20ms", "queue": "1bdp"}, "flows": [{"cc": "cubic"}]}
    run_trial(trial).save(root / "a")
    run_trial({**trial, "seed": 2}).save(root / "b")
    return root / "a", root / "b"


@pytest.mark.parametrize("name", ["x.txt", "x.json", "x.parquet", "x.jpg", "x"])
def test_plot_and_compare_refuse_a_format_they_cannot_write(cli, two_results, tmp_path, name):
    a, b = two_results
    for args in (("plot", a), ("compare", a, b)):
        r = cli(*args, "-o", tmp_path / name)
        assert r.exit_code == 2, r.output
        assert "valid suffixes: .png, .svg, .pdf" in r.output
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("suffix, magic", [(".png", b"\x89PNG"), (".svg", b"<?xml"), (".pdf", b"%PDF")])
def test_plot_and_compare_write_each_figure_format_and_replace_only_their_own(cli, two_results, tmp_path, suffix, magic):
    a, b = two_results
    for args in (("plot", a), ("compare", a, b)):
        dest = tmp_path / f"{args[0]}{suffix}"
        for _ in range(2):  # the second time over its own file
            r = cli(*args, "-o", dest)
            assert r.exit_code == 0, r.output
            assert dest.read_bytes().startswith(magic)
    user = tmp_path / f"mine{suffix}"
    user.write_bytes(magic + b" a figure of the user's")
    r = cli("plot", a, "-o", user)
    assert r.exit_code == 2 and "was not written by cctestbed" in r.output
    assert user.read_bytes() == magic + b" a figure of the user's"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [f"plot{suffix}", f"compare{suffix}", f"mine{suffix}"]), "no temporary left beside them"
