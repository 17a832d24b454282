"""Output paths: one that cannot be created is refused before the work (exit 2, naming the
user's path, not a temporary one), and Ctrl-C leaves behind nothing the command created."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trial_helpers import toml_of

CLI = Path(sys.executable).with_name("cctestbed")


@pytest.fixture
def no_simulation(monkeypatch):
    """Any simulation started fails the test: the refusals come before it."""
    from cctestbed import runner

    def refuse(*a, **k):
        raise AssertionError("the simulation ran before the output path was checked")

    monkeypatch.setattr(runner.Simulation, "__init__", refuse)


def _refused(cli, trial_file: Path, dest: Path, *names: str) -> str:
    r = cli("run", trial_file, "-o", dest)
    assert r.exit_code == 2, r.output
    text = r.output.replace("\n", "")
    assert "Traceback" not in text and ".tmp-" not in text and ".new-" not in text, r.output
    for n in names:
        assert n in text, (n, r.output)
    return text


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.isdir("/proc/self"), reason="needs root and /proc")
def test_a_directory_even_root_cannot_create_in_is_refused_first(cli, trial_dict, write_trial, no_simulation):
    _refused(cli, write_trial(trial_dict()), Path("/proc/x"), "/proc/x")
    assert not os.path.exists("/proc/x")


def test_a_dangling_symlink_output_is_refused_first(cli, trial_dict, write_trial, tmp_path, no_simulation):
    link = tmp_path / "res"
    link.symlink_to(tmp_path / "nowhere")
    _refused(cli, write_trial(trial_dict()), link, str(link), "symbolic link")
    assert link.is_symlink() and not (tmp_path / "nowhere").exists()
    # a dangling symlink on the way to the output is refused as well
    inner = link / "sub"
    _refused(cli, write_trial(trial_dict()), inner, str(link), "symbolic link")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["res", "trial.toml"]


@pytest.mark.parametrize("where", ["leaf", "middle"])
def test_a_name_too_long_is_refused_first(cli, trial_dict, write_trial, tmp_path, no_simulation, where):
    long = "a" * 300
    dest = tmp_path / long if where == "leaf" else tmp_path / long / "res"
    text = _refused(cli, write_trial(trial_dict()), dest, long, "longer than")
    assert "nothing was run" in text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trial.toml"]


def test_the_longest_accepted_name_is_written(cli, trial_dict, write_trial, tmp_path):
    dest = tmp_path / ("b" * 200)
    r = cli("run", write_trial(trial_dict(duration="1s")), "-o", dest)
    assert r.exit_code == 0, r.output
    assert (dest / "summary.json").is_file()


# --- Ctrl-C leaves no directory it created ---------------------------------------------------------


@pytest.fixture(scope="module")
def a_result(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("res")
    trial = d / "t.toml"
    trial.write_text(toml_of({"name": "t", "duration": "2s", "link": {"capacity": "10Mbit", "rtt": "20ms",
                                                                       "queue": "1bdp"}, "flows": [{"cc": "cubic"}]}))
    subprocess.run([CLI, "run", trial, "-o", d / "r"], check=True, capture_output=True, timeout=120)
    return d / "r"


def _interrupt_while(args: list, started, tmp_path: Path) -> subprocess.CompletedProcess:
    """Start ``cctestbed ARGS``, press Ctrl-C once ``started()`` holds, and return what it gave."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=tmp_path)
    try:
        for _ in range(3000):  # polls; not a time limit on the behaviour under test
            if started() or proc.poll() is not None:
                break
            time.sleep(0.005)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return subprocess.CompletedProcess(args, proc.returncode, out.decode(errors="replace"), "")


def test_ctrl_c_in_plot_leaves_no_directory_it_created(a_result, tmp_path):
    dest = tmp_path / "figs" / "deeper" / "f.png"
    r = _interrupt_while(["plot", a_result, "-o", dest], lambda: (tmp_path / "figs").exists(), tmp_path)
    assert r.returncode in (0, 130), r.stdout
    if r.returncode == 130:
        assert sorted(os.listdir(tmp_path)) == [], r.stdout
        assert "Traceback" not in r.stdout


def test_plot_interrupted_after_making_its_directory_removes_only_that(a_result, tmp_path, monkeypatch):
    """In process: Ctrl-C arrives as the figure is written, after its parents were made."""
    from typer.testing import CliRunner

    from cctestbed import plot as plotmod
    from cctestbed.cli import app

    keep = tmp_path / "mine"
    keep.mkdir()
    (keep / "notes.txt").write_text("x")
    dest = keep / "new" / "deeper" / "f.png"

    def interrupted(path, write):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        raise KeyboardInterrupt

    monkeypatch.setattr(plotmod, "write_file_atomically", interrupted)
    r = CliRunner().invoke(app, ["plot", str(a_result), "-o", str(dest)])
    assert r.exit_code == 130, r.output
    assert sorted(p.name for p in keep.iterdir()) == ["notes.txt"]
    assert (keep / "notes.txt").read_text() == "x"


def test_report_interrupted_removes_what_it_created_and_nothing_else(tmp_path_factory, monkeypatch):
    """Ctrl-C after the report's figure folder is in place, as its page is written."""
    from sweep_helpers import small_sweep_run
    from typer.testing import CliRunner

    from cctestbed.cli import app
    from cctestbed.sweep import report as reportmod

    sweep_dir = small_sweep_run(tmp_path_factory)[0]
    base = tmp_path_factory.mktemp("rep")
    (base / "old.txt").write_text("kept")
    (base / "a").mkdir()
    page = base / "a" / "b" / "r.html"

    def interrupted(path, write):
        assert (base / "a" / "b" / "r").is_dir(), "the figure folder is in place"
        raise KeyboardInterrupt

    monkeypatch.setattr(reportmod, "write_file_atomically", interrupted)
    r = CliRunner().invoke(app, ["report", str(sweep_dir), "-o", str(page)])
    assert r.exit_code == 130, r.output
    assert sorted(p.name for p in base.iterdir()) == ["a", "old.txt"]
    assert list((base / "a").iterdir()) == []


def test_sweep_plots_interrupted_in_an_existing_directory_remove_only_their_own(tmp_path_factory, monkeypatch):
    """``plot SWEEP -o DIR`` into a directory that existed: the figures it wrote go, the rest stays."""
    from sweep_helpers import small_sweep_run
    from typer.testing import CliRunner

    from cctestbed.cli import app
    from cctestbed.sweep import plot as sweepplot

    sweep_dir = small_sweep_run(tmp_path_factory)[0]
    figs = tmp_path_factory.mktemp("figs")
    (figs / "mine.png").write_bytes(b"not ours")
    real = sweepplot.plot_metric
    calls = []

    def second_interrupted(*a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(sweepplot, "plot_metric", second_interrupted)
    r = CliRunner().invoke(app, ["plot", str(sweep_dir), "-o", str(figs)])
    assert r.exit_code == 130, r.output
    assert sorted(p.name for p in figs.iterdir()) == ["mine.png"]
