"""The stacked plot on synthetic data: 0.5 s aggregation and consistent per-flow colours."""

import numpy as np
import polars as pl
import pytest

from cctestbed.plot import binned_flows, binned_router, flow_colors, plot_trial, save_figure
from cctestbed.summary import TrialInfo


def flows_frame(n_flows=3, dt=0.1, duration=2.0):
    rows = []
    times = np.round(np.arange(1, int(round(duration / dt)) + 1) * dt, 9)
    for t in times:
        for f in range(n_flows):
            rows.append(
                dict(
                    time_s=float(t),
                    flow=f,
                    cc="cubic",
                    group="cubic",
                    goodput_bps=1e6 * (f + 1) * (1 if t <= 1.0 else 2),
                    rtt_ms=float("nan") if t <= 0.2 else 20.0 + 10 * t,
                    cwnd_pkts=10 + f,
                    inflight_pkts=8 + f,
                )
            )
    return pl.DataFrame(rows)


def router_frame(dt=0.1, duration=2.0):
    times = np.round(np.arange(1, int(round(duration / dt)) + 1) * dt, 9)
    n = len(times)
    return pl.DataFrame(
        dict(
            time_s=times,
            queue_bytes=np.arange(n) * 1000,
            capacity_bps=np.full(n, 10_000_000),
            arrivals_pkts=np.arange(1, n + 1) * 100,  # 100 packets per sample
            drops_overflow=np.arange(1, n + 1) * 2,  # 2 per sample -> 2 %
            drops_random=np.zeros(n, dtype=np.int64),
            drops_policer=np.zeros(n, dtype=np.int64),
        )
    )


INFO = TrialInfo(name="p", seed=1, duration_s=2.0, steady_s=(0.0, 2.0), capacity_bps=10_000_000,
                 rtprop_ms=20.0, bdp_bytes=25_000.0)


def test_flow_bins_average_half_seconds():
    b = binned_flows(flows_frame())
    f0 = b.filter(pl.col("flow") == 0)
    assert f0["t"].to_list() == [0.5, 1.0, 1.5, 2.0]
    assert f0["goodput_bps"].to_list() == [1e6, 1e6, 2e6, 2e6]
    # first bin: samples 0.1..0.5, RTT missing for 0.1 and 0.2 -> mean of 23, 24, 25
    assert f0["rtt_ms"][0] == pytest.approx(24.0)
    assert b.filter(pl.col("flow") == 2)["cwnd_pkts"].to_list() == [12.0] * 4


def test_router_bins_give_loss_rate_and_queue():
    b = binned_router(router_frame())
    assert b["t"].to_list() == [0.5, 1.0, 1.5, 2.0]
    assert b["loss_pct"].to_list() == pytest.approx([2.0] * 4)
    assert b["queue_mean"].to_list() == [2000.0, 7000.0, 12000.0, 17000.0]
    assert b["queue_max"].to_list() == [4000.0, 9000.0, 14000.0, 19000.0]


def test_figure_panels_and_consistent_colours(tmp_path):
    fig = plot_trial(flows_frame(), router_frame(), INFO, title="test", queue_limit_bytes=50_000)
    axes = [*fig.axes, *(c for a in fig.axes for c in a.child_axes)]  # twin BDP axis is a child
    labels = [a.get_ylabel() for a in axes]
    for want in ("goodput (Mbit/s)", "RTT (ms)", "packets", "queue (KB)", "queue (BDP)", "loss at router (%)"):
        assert want in labels
    colors = flow_colors(3)
    tp, rtt, cwnd = fig.axes[0], fig.axes[1], fig.axes[2]
    from matplotlib.colors import to_rgba

    def with_colour(ax, c):
        return sum(np.allclose(to_rgba(line.get_color()), c) for line in ax.get_lines())

    for i in range(3):
        c = colors[i]
        assert with_colour(tp, c) == 1, "one throughput line per flow"
        assert with_colour(rtt, c) == 1, "one RTT line per flow"
        assert with_colour(cwnd, c) == 2, "cwnd and inflight per flow"
    legend_texts = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend_texts[:3] == ["0: cubic", "1: cubic", "2: cubic"]
    out = tmp_path / "x.png"
    save_figure(fig, str(out))
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_many_flows_get_distinct_colours():
    for n in (4, 16, 40):
        cols = {tuple(np.round(c, 6)) for c in flow_colors(n)}
        assert len(cols) == n


def test_state_spans_follow_the_state_column_at_full_resolution():
    from cctestbed.plot import state_spans

    flows = pl.DataFrame(
        {
            "time_s": [0.01, 0.02, 0.03, 0.04, 0.01, 0.02, 0.03, 0.04],
            "flow": [0, 0, 0, 0, 1, 1, 1, 1],
            "state": ["STARTUP", "PROBE_BW", "PROBE_RTT", "PROBE_BW", "idle", "idle", "slow_start", "slow_start"],
        }
    )
    spans = state_spans(flows)
    # A sample at t covers (t - dt, t]: PROBE_RTT at 0.03 spans 0.02-0.03.
    assert [s for s, _, _ in spans[0]] == ["STARTUP", "PROBE_BW", "PROBE_RTT", "PROBE_BW"]
    assert spans[0][2][1] == pytest.approx(0.02) and spans[0][2][2] == pytest.approx(0.03)
    assert spans[1] == [("idle", pytest.approx(0.0), pytest.approx(0.02)), ("slow_start", pytest.approx(0.02), pytest.approx(0.04))]


def test_bbr_trials_get_a_model_panel():
    import cctestbed

    base = {
        "name": "p", "duration": "2s",
        "link": {"capacity": "10Mbit", "rtt": "20ms", "queue": "2bdp"},
    }
    bbr = cctestbed.run_trial({**base, "flows": [{"cc": "bbr"}]}).plot()
    cubic = cctestbed.run_trial({**base, "flows": [{"cc": "cubic"}]}).plot()
    labels = [a.get_ylabel() for a in bbr.axes]
    assert any("BtlBw" in l for l in labels)
    assert not any("BtlBw" in a.get_ylabel() for a in cubic.axes)


LABEL = "cubic $\\q$ x"  # a pair of '$' around a command TeX does not know


def _texts(fig) -> list[str]:
    return [t.get_text() for t in fig.findobj(lambda o: hasattr(o, "get_text"))]


def test_a_label_with_dollar_signs_is_drawn_as_written(tmp_path, trial_dict, cli):
    """Group labels are the user's text: mathtext once read '$\\q$' as TeX and the plot ended
    in a ParseFatalException (run --plot, plot, compare, the sweep plots all draw labels)."""
    from cctestbed import run_trial
    from cctestbed.compare import plot_compare

    r = run_trial(trial_dict(duration="2s", steady=["1s", "2s"],
                             flows=[{"cc": "cubic", "group": LABEL}, {"cc": "reno"}]))
    for fig in (r.plot(), plot_compare(r, r)):
        save_figure(fig, str(tmp_path / "f.png"))  # the texts are laid out and drawn here
        assert any(LABEL in t for t in _texts(fig))
    r.save(tmp_path / "trial")
    out = cli("plot", tmp_path / "trial", "-o", tmp_path / "p.png")
    assert out.exit_code == 0, out.output
