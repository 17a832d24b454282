"""Sweep plots and the HTML report (rendered in headless Chromium when it is installed)."""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import polars as pl
import pytest
from sweep_helpers import small_sweep_run

from cctestbed.sweep.plot import PlotError, SweepData, choose_axes, column_scale, plot_metric, plot_shares


def test_every_algorithm_of_the_core_has_its_own_colour():
    from cctestbed import algorithms
    from cctestbed.sweep.plot import ALGO_COLORS

    assert set(algorithms()) <= set(ALGO_COLORS)
    # one colour each, but for bbr1, which is bbr under its version's name
    by_colour = {c: [a for a in algorithms() if ALGO_COLORS[a] == c] for c in ALGO_COLORS.values()}
    assert all(len(algos) == 1 or set(algos) == {"bbr", "bbr1"} for algos in by_colour.values()), by_colour


def test_axis_values_read_as_numbers():
    q = column_scale("queue", "link.queue", ["0.25bdp", "2bdp", "8bdp"])
    assert q.values == {"0.25bdp": 0.25, "2bdp": 2.0, "8bdp": 8.0} and q.log and q.label == "queue (BDP)"
    c = column_scale("capacity", "link.capacity", ["40Mbit", "1.2Gbit"])
    assert c.values == {"40Mbit": 40.0, "1.2Gbit": 1200.0} and not c.log
    loss = column_scale("loss", "link.loss", ["0.001%", "1%", "50%"])
    assert loss.values == pytest.approx({"0.001%": 0.001, "1%": 1.0, "50%": 50.0}) and loss.log
    rtt = column_scale("rtt", "link.rtt", ["10ms", "100ms"])
    assert rtt.values == {"10ms": 10.0, "100ms": 100.0} and rtt.label == "rtt (ms)"
    assert column_scale("cc", "flows.0.cc", ["bbr", "cubic"]) is None
    assert column_scale("flows", "flows", ["2 bbr", "1 bbr + 1 cubic"]) is None
    assert column_scale("cwnd_gain", "flows.0.params.cwnd_gain", [1.5, 2]).values == {1.5: 1.5, 2: 2.0}


def test_default_axes_queue_on_x_a_line_per_capacity(tmp_path_factory):
    out, _, _ = small_sweep_run(tmp_path_factory)
    data = SweepData.load(out)
    assert choose_axes(data) == ("queue", "capacity", [])
    assert choose_axes(data, x="capacity") == ("capacity", "queue", [])
    assert choose_axes(data, by=None, facet="capacity") == ("queue", None, ["capacity"])
    with pytest.raises(PlotError, match="--by 'nope': not a column; the sweep's axes are capacity, queue"):
        choose_axes(data, by="nope")
    assert data.groups() == ["bbr", "cubic"]


def test_loss_plot_points_are_means_over_seeds(tmp_path_factory):
    out, _, _ = small_sweep_run(tmp_path_factory)
    data = SweepData.load(out)
    fig = plot_metric(data, "loss")
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_xlabel() == "queue (BDP)"
    lines = [ln for ln in ax.get_lines() if len(ln.get_xdata()) == 2 and ln.get_marker() == "o"]
    assert len(lines) == 2  # one per capacity
    df = data.table
    for ln, cap in zip(lines, ["4Mbit", "8Mbit"]):
        assert list(ln.get_xdata()) == [0.5, 2.0]
        want = [df.filter((pl.col("capacity") == cap) & (pl.col("queue") == q))["total.loss_pct"].mean()
                for q in ("0.5bdp", "2bdp")]
        assert np.allclose(ln.get_ydata(), want)


def test_share_plot_band_is_the_pooled_interquartile_range(tmp_path_factory):
    out, _, _ = small_sweep_run(tmp_path_factory)
    data = SweepData.load(out)
    fig = plot_shares(data)
    assert len(fig.axes) == 2  # a panel per capacity
    ax = fig.axes[0]
    assert ax.get_title() == "capacity = 4Mbit"
    rows = data.table.filter((pl.col("capacity") == "4Mbit") & (pl.col("queue") == "0.5bdp"))
    pooled = [s for lst in rows["groups.bbr.interval_shares"].to_list() for s in lst]
    q25, q75 = np.percentile(pooled, [25, 75]) * 100
    band = ax.collections[0]  # bbr's band
    verts = band.get_paths()[0].vertices
    at_x = verts[np.isclose(verts[:, 0], 0.5)][:, 1]
    assert np.isclose(at_x.min(), q25) and np.isclose(at_x.max(), q75)
    mean_line = next(ln for ln in ax.get_lines() if ln.get_label() == "bbr (mean)")
    assert np.isclose(mean_line.get_ydata()[0], rows["groups.bbr.share"].mean() * 100)


def test_plot_command_writes_every_summary_plot(tmp_path_factory, tmp_path, cli):
    out, _, _ = small_sweep_run(tmp_path_factory)
    r = cli("plot", out, "-o", tmp_path / "plots")
    assert r.exit_code == 0, r.output
    names = sorted(p.name for p in (tmp_path / "plots").iterdir())
    assert names == sorted(f"{m}_vs_queue.png" for m in
                           ("loss", "utilization", "share", "rtt", "queue_occupancy", "retrans", "jain"))
    r = cli("plot", out, "--y", "groups.cubic.share", "--x", "capacity", "--by", "queue", "-o", tmp_path / "one.png")
    assert r.exit_code == 0 and (tmp_path / "one.png").stat().st_size > 10_000
    r = cli("plot", out, "--y", "nonsense")
    assert r.exit_code == 2 and "no such column" in r.output and "loss" in r.output


def test_plot_command_on_a_trial_dir_draws_the_stacked_plot(tmp_path_factory, tmp_path, cli):
    out, _, _ = small_sweep_run(tmp_path_factory)
    trial = next(d for d in (out / "trials").iterdir() if not d.name.startswith("."))
    r = cli("plot", trial, "-o", tmp_path / "t.png")
    assert r.exit_code == 0, r.output
    assert (tmp_path / "t.png").read_bytes()[:4] == b"\x89PNG"
    r = cli("plot", tmp_path)
    assert r.exit_code == 2 and "neither a trial's results directory" in r.output


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def test_report_is_one_page_with_the_table_and_every_plot(tmp_path_factory, tmp_path, cli):
    out, _, _ = small_sweep_run(tmp_path_factory)
    page = tmp_path / "report.html"
    r = cli("report", out, "-o", page)
    assert r.exit_code == 0, r.output
    html = page.read_text()
    imgs = re.findall(r'<img src="([^"]+)"', html)
    assert len(imgs) == 7 and all((tmp_path / src).is_file() for src in imgs)
    assert all(src.startswith("report/") for src in imgs)
    assert "8 trial(s): 8 done, 0 failed, 0 not run" in html
    points = html.split('<table id="points">')[1].split("</table>")[0]
    assert points.count("<tr>") == 1 + 4  # header and one row per point
    assert "2/2" in points and "bbr share %" in points
    assert "<script" not in html and "http" not in html  # self-contained


def test_report_renders_in_headless_chromium(tmp_path_factory, tmp_path, cli):
    chromium = _chromium()
    if chromium is None:
        pytest.skip("chromium is not installed (make browser installs Debian's package; needs apt-get and root)")
    out, _, _ = small_sweep_run(tmp_path_factory)
    page = tmp_path / "report.html"
    assert cli("report", out, "-o", page).exit_code == 0
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}",
             "--window-size=1300,2600", "--hide-scrollbars"]
    dom = subprocess.run([chromium, *flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert '<h1>small</h1>' in dom.stdout
    assert dom.stdout.count("<img ") == 7 and 'id="points"' in dom.stdout and 'id="trials"' in dom.stdout
    shot = tmp_path / "shot.png"
    r = subprocess.run([chromium, *flags, f"--screenshot={shot}", page.as_uri()], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and shot.is_file(), r.stderr[-2000:]
    from matplotlib.image import imread

    img = imread(str(shot))[..., :3]
    assert img.shape[:2] == (2600, 1300)
    # the plots rendered: the screenshot holds the BBR blue and the CUBIC orange of the share plot
    blue = np.all(np.abs(img - np.array([0x1F, 0x77, 0xB4]) / 255) < 0.04, axis=-1).sum()
    orange = np.all(np.abs(img - np.array([0xFF, 0x7F, 0x0E]) / 255) < 0.04, axis=-1).sum()
    assert blue > 200 and orange > 200, (blue, orange)
