"""Flow kinds (udp streams, ping probes) and pacing caps through the Python front end: the
trial file's fields and their refusals, the result schema the core declares, and the summary's
udp and ping sections. The behaviour itself is checked in the simulator's tests
(crates/cctestbed-sim/tests/datagrams.rs) and, on real Linux, in tests/kernel."""

from __future__ import annotations

import copy
from typing import Any

import polars as pl
import pytest

from cctestbed import _core
from cctestbed.config import ConfigError, parse_trial
from cctestbed.runner import run_trial
from cctestbed.schema import flow_columns, flow_schema, router_schema

LINK = {"capacity": "20Mbit", "rtt": "20ms", "queue": "1bdp"}


def trial(*flows: dict[str, Any], duration: str = "4s", **top: Any) -> dict[str, Any]:
    return {"name": "t", "duration": duration, "link": copy.deepcopy(LINK), "flows": list(flows), **top}


def problems(doc: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as e:
        parse_trial(doc)
    return e.value.problems


REFUSED = [
    ({"kind": "udp", "rate": "1Mbit", "cc": "cubic"}, "flows[0].cc: 'cubic': a udp flow group takes no cc (TCP only)"),
    ({"kind": "ping", "rwnd": "64KB"}, "flows[0].rwnd"),
    ({"kind": "udp", "rate": "1Mbit", "read_interval": "1ms"}, "a udp flow group takes no read_interval (TCP only)"),
    ({"kind": "udp", "rate": "1Mbit", "max_pacing_rate": "1Mbit"}, "a udp flow group takes no max_pacing_rate"),
    ({"kind": "udp"}, "flows[0].rate: missing: a udp flow group needs its sending rate"),
    ({"cc": "cubic", "rate": "1Mbit"}, "flows[0].rate: '1Mbit': a tcp flow group takes no rate (udp only)"),
    ({"kind": "ping", "on": "1s"}, "a ping flow group takes no on (udp only)"),
    ({"kind": "udp", "rate": "1Mbit", "on": "1s"}, "flows[0].off: missing: an on/off stream gives both"),
    ({"kind": "udp", "rate": "1Mbit", "periods": "exponential"}, "flows[0].periods: 'exponential': applies to on/off streams only"),
    ({"kind": "udp", "rate": "1Mbit", "packet_size": "9000B"}, "flows[0].packet_size: '9KB': must be from 29 B to the mtu (1500 B)"),
    ({"kind": "ping", "packet_size": "28B"}, "flows[0].packet_size: '28B': must be from 29 B"),
    ({"kind": "icmp"}, "flows[0].kind"),
    ({"cc": "cubic", "pacing": False, "max_pacing_rate": "10Mbit"}, "flows[0].pacing: false: a max_pacing_rate turns pacing on"),
    ({"cc": "cubic", "max_pacing_rate": "0Mbit"}, "flows[0].max_pacing_rate"),
]


@pytest.mark.parametrize("flow,fragment", REFUSED, ids=[f[1][:40] for f in REFUSED])
def test_fields_that_do_not_fit_the_kind_are_refused(flow, fragment):
    found = problems(trial(flow))
    assert any(fragment in p for p in found), found


def test_datagram_flows_refuse_captures():
    found = problems(trial({"cc": "cubic"}, {"kind": "ping"}, capture=True))
    assert any(p.startswith("capture: true: packet captures record TCP only; flows[1] is ping") for p in found), found


def test_refused_on_the_command_line_with_exit_2(cli, tmp_path):
    p = tmp_path / "t.toml"
    p.write_text('duration = "1s"\n[link]\ncapacity = "10Mbit"\nrtt = "10ms"\nqueue = "1bdp"\n'
                 '[[flows]]\nkind = "udp"\ncc = "reno"\n')
    r = cli("run", p, "-o", tmp_path / "out")
    assert r.exit_code == 2
    assert "flows[0].cc: 'reno': a udp flow group takes no cc (TCP only)" in r.output
    assert "flows[0].rate: missing" in r.output
    assert not (tmp_path / "out").exists()


def test_defaults_and_the_normalised_trial_round_trip():
    t = parse_trial(trial({"kind": "udp", "rate": "5Mbit"}, {"kind": "ping"}))
    core = t.to_core()["flows"]
    assert core[0]["traffic"] == {"kind": "udp", "rate_bps": 5_000_000, "size_bytes": 1500, "on_ns": None,
                                  "off_ns": None, "exponential": False}
    assert core[1]["traffic"] == {"kind": "ping", "interval_ns": 10_000_000, "size_bytes": 84}
    assert [g.label for g in t.flows] == ["udp", "ping"]
    again = parse_trial(dict(__import__("tomllib").loads(t.to_toml())))
    assert again.to_core() == t.to_core()
    # a TCP-only trial's core config holds nothing new (sweep keys stay what they were)
    tcp = parse_trial(trial({"cc": "cubic"})).to_core()["flows"][0]
    assert "traffic" not in tcp and "max_pacing_rate_bps" not in tcp


def test_every_frame_follows_the_declared_schema():
    t = parse_trial(trial({"cc": "bbr"}, {"cc": "cubic", "max_pacing_rate": "5Mbit"},
                          {"kind": "udp", "rate": "4Mbit", "on": "100ms", "off": "200ms", "periods": "exponential"},
                          {"kind": "ping", "interval": "20ms"}))
    r = run_trial(t)
    assert dict(r.flows.schema) == flow_schema(t)
    assert dict(r.router.schema) == router_schema()
    declared = [c[0] for c in _core.columns()["flows"]]
    assert set(declared) <= set(r.flows.columns)
    assert all(c.doc for c in flow_columns(t)), "every column says what it holds"
    assert {"owd_ms", "kind"} <= set(r.flows.columns)
    kinds = dict(r.flows.group_by("flow").agg(pl.col("kind").first()).iter_rows())
    assert kinds == {0: "tcp", 1: "tcp", 2: "udp", 3: "ping"}
    # a datagram flow's TCP-only columns hold nothing
    udp = r.flows.filter(pl.col("kind") == "udp")
    assert udp["cwnd_pkts"].max() == 0 and udp["pacing_rate_bps"].is_nan().all()
    assert set(udp["state"].unique()) <= {"on", "off", "idle"} and "off" in set(udp["state"])


def test_summary_reports_udp_and_ping_and_keeps_tcp_metrics_to_tcp():
    r = run_trial(trial({"cc": "cubic"}, {"kind": "udp", "rate": "5Mbit", "group": "bg"}, {"kind": "ping"},
                        duration="10s", steady=["3s", "10s"]))
    s = r.summary
    udp, ping = s["udp"]["bg"], s["ping"]["ping"]
    assert 0.9 * 5e6 < udp["delivered_bps"] <= 5e6
    assert udp["loss_pct"] is not None and udp["owd_p50_ms"] <= udp["owd_p95_ms"]
    assert udp["owd_p50_ms"] >= 10.0, "at least the one-way propagation delay"
    assert 20.0 <= ping["rtt_p50_ms"] <= ping["rtt_p95_ms"] <= ping["rtt_p99_ms"]
    # the queue the cubic flow builds shows in the probes' RTT
    assert ping["rtt_p95_ms"] > 21.0
    # jain and the RTT percentiles are the TCP flow's alone
    assert s["total"]["jain"] == 1.0
    tcp_rtt = r.flows.filter((pl.col("kind") == "tcp") & (pl.col("time_s") > 3.0))["rtt_ms"].drop_nans()
    assert s["rtt"]["min_ms"] == pytest.approx(float(tcp_rtt.min()))
    # a TCP-only trial's summary has neither section
    plain = run_trial(trial({"cc": "cubic"}, duration="2s")).summary
    assert "udp" not in plain and "ping" not in plain


def test_the_readme_documents_every_declared_column():
    from pathlib import Path

    from cctestbed.schema import router_columns

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    names = [c.name for c in flow_columns() if not c.name.startswith("cc.")]
    names += [c.name for c in router_columns() if not c.name.startswith(("drops_", "marks_"))]
    missing = [n for n in names if f"`{n}`" not in readme]
    assert not missing, f"columns the core declares but the README does not name: {missing}"


def test_sweep_metrics_give_a_udp_groups_one_way_delay():
    from cctestbed.sweep.metrics import sweep_metrics

    r = run_trial(trial({"cc": "reno"}, {"kind": "udp", "rate": "5Mbit", "group": "bg"}, duration="3s"))
    m = sweep_metrics(r.flows, r.router, r.info)
    assert m["groups"]["bg"]["owd_p50_ms"] <= m["groups"]["bg"]["owd_p95_ms"]
    assert "owd_p50_ms" not in m["groups"]["reno"]


def test_the_kernel_sender_sends_the_simulators_datagrams() -> None:
    """The kernel backend's udp and ping senders (kernel/datagrams.py) follow the core's schedule
    for each flow: over a trial, as many datagrams as the simulator sends, for an exponential
    on/off stream starting late, an on/off stream of periods shorter than a packet (which keeps
    its mean rate) and a ping; the same draws, so another seed changes both alike."""
    from cctestbed.kernel.run import _flow_ids, datagram_flows
    from cctestbed.kernel.datagrams import Source

    def counts(seed: int) -> tuple[list[int], list[int]]:
        t = parse_trial(trial({"cc": "cubic"},
                              {"kind": "udp", "rate": "30Mbit", "packet_size": 1200, "on": "50ms", "off": "80ms",
                               "periods": "exponential", "start": "0.7s"},
                              {"kind": "udp", "rate": "1Mbit", "on": "1us", "off": "1us"},
                              # 7 ms: no probe falls exactly on the trial's end, which the last
                              # sample of the simulator's series precedes
                              {"kind": "ping", "interval": "7ms"}, seed=seed))
        ids = _flow_ids(t)
        kernel = []
        for k in (1, 2, 3):
            (f,) = datagram_flows(t, t.flows[k], ids[k])
            s = Source(f, 10**12, t.seed, t.duration)
            n = 0
            while s.next is not None:
                assert 10**12 + f["start_ns"] <= s.due() <= 10**12 + t.duration
                s.next = s.clock.pop()
                n += 1
            kernel.append(n)
        r = run_trial(t)
        sim = [int(r.flows.filter(pl.col("flow") == f)["sent_segs"].max()) for f in (1, 2, 3)]
        return kernel, sim

    k3, s3 = counts(3)
    assert k3 == s3 and min(k3) > 10, (k3, s3)
    assert abs(k3[1] - 1_000_000 * 0.5 * 4 / (1500 * 8)) <= 2, "periods shorter than a packet keep rate x on/(on+off)"
    k4, s4 = counts(4)
    assert k4 == s4 and k4[0] != k3[0]
