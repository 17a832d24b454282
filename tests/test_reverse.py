"""Traffic in the reverse direction through the Python front end: ``direction`` and
``link.reverse`` in trial files and their refusals, the core config they make, the result
schema, and the summary, sweep metrics and plot per direction. The queueing itself is checked
in the simulator's tests (crates/cctestbed-sim/tests/reverse.rs) and, on real Linux, in
tests/kernel/test_kernel_reverse.py."""

from __future__ import annotations

import copy
import tomllib
from typing import Any

import polars as pl
import pytest

from cctestbed.config import ConfigError, parse_trial
from cctestbed.runner import run_trial
from cctestbed.schema import flow_schema, router_schema

LINK = {"capacity": "20Mbit", "rtt": "20ms", "queue": "1bdp"}
REVERSE = {"capacity": "5Mbit", "queue": "50KB"}


def trial(*flows: dict[str, Any], reverse: Any = REVERSE, duration: str = "4s", **top: Any) -> dict[str, Any]:
    link = copy.deepcopy(LINK)
    if reverse is not None:
        link["reverse"] = copy.deepcopy(reverse)
    return {"name": "t", "duration": duration, "link": link, "flows": list(flows), **top}


def problems(doc: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as e:
        parse_trial(doc)
    return e.value.problems


REFUSED = [
    (trial({"cc": "cubic", "direction": "up"}), "flows[0].direction: 'up'"),
    (trial({"cc": "cubic", "direction": "reverse"}, reverse=None),
     "flows[0].direction: 'reverse': a reverse tcp flow needs link.reverse (the reverse path's capacity and queue)"),
    (trial({"cc": "cubic"}, reverse={"queue": "50KB"}), "link.reverse.capacity: missing"),
    (trial({"cc": "cubic"}, reverse={"capacity": "-5Mbit", "queue": "50KB"}), "link.reverse.capacity: '-5Mbit': must be > 0"),
    (trial({"cc": "cubic"}, reverse={"capacity": "5Mbit", "queue": "1000B"}),
     "link.reverse.queue: '1KB': holds 1000 B; must hold at least one packet (1500 B)"),
    (trial({"cc": "cubic"}, reverse={"capacity": "5Mbit", "queue": "50KB", "rate": "1Mbit"}), "link.reverse.rate"),
    (trial({"cc": "cubic"}, reverse={"capacity": "5Mbit", "queue": "50KB", "aqm": "blue"}),
     "link.reverse.aqm.kind: 'blue': unknown queue discipline"),
    (trial({"cc": "cubic"}, {"cc": "cubic", "direction": "reverse"}, capture=True),
     "capture: true: packet captures record the forward path only; flows[1] is reverse"),
]


@pytest.mark.parametrize("doc,fragment", REFUSED, ids=[r[1][:50] for r in REFUSED])
def test_bad_directions_and_reverse_links_are_refused_naming_the_field(doc, fragment):
    found = problems(doc)
    assert any(fragment in p for p in found), found


def test_refused_on_the_command_line_with_exit_2_and_nothing_written(cli, tmp_path):
    p = tmp_path / "t.toml"
    p.write_text('duration = "1s"\n[link]\ncapacity = "10Mbit"\nrtt = "10ms"\nqueue = "1bdp"\n'
                 '[[flows]]\ncc = "cubic"\ndirection = "reverse"\n')
    r = cli("run", p, "-o", tmp_path / "out")
    assert r.exit_code == 2
    assert "flows[0].direction: 'reverse': a reverse tcp flow needs link.reverse" in r.output
    assert not (tmp_path / "out").exists()


def test_reverse_udp_and_ping_need_no_reverse_link():
    parse_trial(trial({"cc": "cubic"}, {"kind": "udp", "rate": "1Mbit", "direction": "reverse"},
                      {"kind": "ping", "direction": "reverse"}, reverse=None))


def test_core_config_and_the_normalised_trial():
    t = parse_trial(trial({"cc": "cubic"}, {"cc": "reno", "direction": "reverse", "count": 2},
                          reverse={"capacity": "5Mbit", "queue": "2bdp", "loss": "1%", "aqm": "fq_codel"}))
    core = t.to_core()
    assert [f.get("direction") for f in core["flows"]] == [None, "reverse", "reverse"]
    # a BDP multiple of the reverse queue is of the reverse capacity: 5 Mbit/s x 20 ms = 12.5 KB
    assert core["link"]["reverse"] == {"capacity_bps": 5_000_000, "queue": {"limit_bytes": 25_000, "limit_packets": None},
                                       "loss": {"kind": "bernoulli", "p": 0.01}, "aqm": {"kind": "fq_codel"}}
    again = parse_trial(tomllib.loads(t.to_toml()))
    assert again.to_core() == core
    assert "reverse 5 Mbit/s, queue 2bdp, fq_codel" in t.describe()
    # a trial without reverse traffic makes the core config it made before
    plain = parse_trial(trial({"cc": "cubic"}, reverse=None)).to_core()
    assert "reverse" not in plain["link"] and "direction" not in plain["flows"][0]


def test_frames_follow_the_schema_and_flows_carry_their_direction():
    t = parse_trial(trial({"cc": "cubic"}, {"cc": "bbr", "direction": "reverse"},
                          {"kind": "ping", "direction": "reverse", "group": "probe"}))
    r = run_trial(t)
    assert dict(r.flows.schema) == flow_schema(t)
    assert dict(r.router.schema) == router_schema()
    dirs = dict(r.flows.group_by("flow").agg(pl.col("direction").first()).iter_rows())
    assert dirs == {0: "forward", 1: "reverse", 2: "reverse"}
    assert r.router["rev_capacity_bps"].unique().to_list() == [5_000_000]
    assert r.router["rev_queue_bytes"].max() > 0
    assert "reverse_router" in r.final


def test_summary_keeps_directions_apart():
    r = run_trial(trial({"cc": "cubic", "group": "down"}, {"cc": "cubic", "direction": "reverse", "group": "up"},
                        duration="20s", steady=["5s", "20s"]))
    s = r.summary
    down, up = s["groups"]["down"], s["groups"]["up"]
    assert (down["direction"], up["direction"]) == ("forward", "reverse")
    assert [f["direction"] for f in s["flows"]] == ["forward", "reverse"]
    # total is the forward direction's: the upload's bytes are not in it
    assert s["total"]["goodput_bps"] == pytest.approx(down["goodput_bps"])
    assert s["total"]["utilization"] == pytest.approx(down["share"])
    rev = s["reverse"]
    assert rev["goodput_bps"] == pytest.approx(up["goodput_bps"])
    # each share is of its own link: the upload fills most of its 5 Mbit/s, never more
    assert up["share"] == pytest.approx(rev["utilization"])
    assert 0.8 < up["share"] <= 1.0
    assert up["goodput_bps"] <= 5e6
    assert s["trial"]["reverse_capacity_bps"] == 5_000_000
    # the reverse queue: in bytes and in the reverse link's BDP (5 Mbit/s x 20 ms = 12.5 KB)
    q = rev["queue"]
    assert q["mean_bdp"] == pytest.approx(q["mean_bytes"] / 12_500)
    assert 0 < q["mean_bytes"] <= 50_000
    assert rev["sojourn"]["p50_ms"] > 0 and rev["loss_pct"] is not None
    # both flows' RTTs hold the other direction's queue: above RTprop plus the reverse sojourn's median
    assert s["rtt"]["p50_ms"] > 20 + 0.5 * rev["sojourn"]["p50_ms"]
    assert rev["rtt"]["p50_ms"] > 20 + 0.5 * rev["sojourn"]["p50_ms"]


def test_a_trial_without_reverse_traffic_keeps_its_summary_shape():
    s = run_trial(trial({"cc": "cubic"}, reverse=None, duration="2s")).summary
    assert "reverse" not in s and "reverse_capacity_bps" not in s["trial"]
    assert "direction" not in s["groups"]["cubic"] and "direction" not in s["flows"][0]


def test_the_forward_rtt_rises_by_the_reverse_queue():
    # a reverse stream above the reverse capacity holds the 50 KB reverse queue full: 80 ms at
    # 5 Mbit/s; the window-limited forward flow's ACKs wait that long (the simulator's tests
    # give the tolerance's reasons)
    fwd = {"cc": "cubic", "rwnd": "32KB", "delayed_ack": False}
    base = run_trial(trial(fwd, duration="10s", steady=["3s", "10s"])).summary["rtt"]["p50_ms"]
    loaded = run_trial(trial(fwd, {"kind": "udp", "rate": "6Mbit", "direction": "reverse"},
                             duration="10s", steady=["3s", "10s"])).summary["rtt"]["p50_ms"]
    assert loaded - base == pytest.approx(80.0, abs=2.0)


def test_sweep_metrics_are_per_direction():
    from cctestbed.sweep.metrics import sweep_metrics

    r = run_trial(trial({"cc": "cubic", "group": "down"}, {"cc": "cubic", "direction": "reverse", "group": "up"},
                        duration="10s", steady=["4s", "10s"]))
    m = sweep_metrics(r.flows, r.router, r.info)
    assert m["groups"]["up"]["share_p50"] > 0.8, "of the reverse link's 5 Mbit/s"
    assert m["total"]["utilization_p50"] == pytest.approx(m["groups"]["down"]["share_p50"])


def test_the_plot_draws_both_directions(tmp_path):
    r = run_trial(trial({"cc": "cubic", "group": "down"}, {"cc": "cubic", "direction": "reverse", "group": "up"},
                        duration="3s"))
    fig = r.plot()
    labels = {line.get_label() for ax in fig.axes for line in ax.get_lines()}
    assert {"1: up (reverse)", "reverse payload capacity", "reverse mean", "reverse"} <= labels


def test_an_unconstrained_reverse_path_reports_no_queue_with_the_same_keys():
    s = run_trial(trial({"cc": "cubic"}, {"kind": "udp", "rate": "2Mbit", "direction": "reverse", "group": "bg"},
                        reverse=None, duration="3s")).summary
    rev = s["reverse"]
    assert rev["capacity_bps"] is None and rev["utilization"] is None and rev["loss_pct"] is None
    assert set(rev["queue"]) == {"mean_bdp", "p95_bdp", "mean_bytes", "p95_bytes"} and not any(rev["queue"].values())
    assert rev["goodput_bps"] == pytest.approx(2e6 * (1500 - 28) / 1500, rel=0.02)
    assert s["groups"]["bg"]["share"] is None and s["groups"]["bg"]["direction"] == "reverse"


def test_a_sweep_varies_the_reverse_link_and_the_direction(tmp_path):
    from cctestbed.sweep.spec import parse_sweep

    raw = {"name": "s", "trials": 1,
           "base": trial({"cc": "cubic", "group": "down"}, {"cc": "cubic", "group": "up", "direction": "reverse"}),
           "axes": {"link.reverse.queue": ["20KB", "100KB"], "flows.1.direction": ["forward", "reverse"]}}
    sweep = parse_sweep(raw)
    cores = [sweep.point_trial(i)[1].to_core() for i in range(sweep.n_points)]
    assert sorted((c["link"]["reverse"]["queue"]["limit_bytes"], c["flows"][1].get("direction", "forward"))
                  for c in cores) == [(20_000, "forward"), (20_000, "reverse"), (100_000, "forward"), (100_000, "reverse")]
