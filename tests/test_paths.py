"""Trace-driven links and ACK aggregation from trial files: validation, paths, utilization."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cctestbed.config import ConfigError, load_trial, parse_trial
from cctestbed.kernel.checks import full_link_needs, trial_problems
from cctestbed.runner import run_trial
from cctestbed.traces import capacity_steps, load_trace, mean_rate_bps

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "examples" / "traces"


def trace_trial(trace: str, **link: object) -> dict:
    return {
        "name": "tr",
        "duration": "12s",
        "steady": ["4s", "12s"],
        "link": {"trace": trace, "rtt": "40ms", "queue": "2bdp", **link},
        "flows": [{"cc": "cubic"}],
    }


def test_shipped_traces_load_and_have_the_rates_their_headers_give():
    step = load_trace(TRACES / "step-24-6.trace")
    assert step[-1] == 20_000 and mean_rate_bps(step) == 15_000_000
    steps = capacity_steps(step, 1_000_000_000, 20_000_000_000)
    assert {b for _, b in steps[:10]} == {24_000_000} and {b for _, b in steps[10:]} == {6_000_000}
    for name in ("sawtooth-2-22.trace", "cellular-onoff.trace"):
        assert mean_rate_bps(load_trace(TRACES / name)) > 1_000_000


def test_a_relative_trace_is_read_beside_the_trial_file(tmp_path):
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "two.trace").write_text("# 2 packets a ms\n1\n1\n2\n2\n")
    f = tmp_path / "t" / "trial.json"
    f.write_text(json.dumps(trace_trial("two.trace")))
    t = load_trial(f)
    assert t.link.trace == str(tmp_path / "t" / "two.trace")
    assert t.link.capacity == 24_000_000, "the capacity is the trace's mean rate"
    # The normalised trial names the absolute path and reads back to the same trial.
    again = load_trial(t.model_dump(mode="json", exclude_none=True))
    assert again.to_core() == t.to_core()


@pytest.mark.parametrize(
    "text, message",
    [
        ("1\n3\n2\n", "line 3: 2 ms after 3 ms: times must not decrease"),
        ("1\nten\n", "line 2: 'ten': expected a whole number of milliseconds"),
        ("0\n0\n", "no opportunity after 0 ms"),
        ("", "no opportunity after 0 ms"),
        ("1\n99999999999999999999\n", "line 2: 99999999999999999999 ms: beyond the longest trace"),
        ("1\n999999999\n", "2 opportunities in 999999999 ms: a mean rate below 1 bit/s"),
        ("1\n\xff\n", "not UTF-8 text"),
    ],
)
def test_a_bad_trace_is_refused_naming_the_file_and_line(tmp_path, text, message):
    p = tmp_path / "bad.trace"
    p.write_bytes(text.encode("latin-1"))  # "\xff" is a byte that is not UTF-8
    with pytest.raises(ConfigError) as e:
        parse_trial(trace_trial(str(p)))
    assert f"link.trace: {str(p)!r}" in str(e.value) and message in str(e.value)


def test_a_trace_takes_no_capacity_schedule_or_shaper(tmp_path):
    trace = str(TRACES / "step-24-6.trace")
    with pytest.raises(ConfigError, match="a trace link's capacity is its trace's mean rate"):
        parse_trial(trace_trial(trace, capacity="10Mbit"))
    parse_trial(trace_trial(trace, capacity="15Mbit"))  # the mean itself, as the normalised trial writes it
    with pytest.raises(ConfigError, match="takes no schedule and no shaper"):
        parse_trial(trace_trial(trace, schedule=[{"at": "1s", "capacity": "5Mbit"}]))
    with pytest.raises(ConfigError, match="no such file"):
        parse_trial(trace_trial(str(tmp_path / "missing.trace")))


def test_utilization_is_measured_against_the_trace():
    """A deep-buffered bulk flow on the step trace uses what the trace offers, 24 Mbit/s and
    then 6 Mbit/s, and the summary's utilization is against that, not a fixed rate."""
    d = trace_trial(str(TRACES / "step-24-6.trace"), queue="8bdp")
    d.update(duration="20s", steady=["4s", "20s"])
    r = run_trial(parse_trial(d))
    assert r.summary["total"]["utilization"] > 0.95
    cap = r.router.filter((r.router["time_s"] > 4) & (r.router["time_s"] <= 10))["capacity_bps"]
    assert set(cap.to_list()) == {24_000_000}


def test_ack_aggregation_is_validated_and_refused_by_the_kernel():
    ok = parse_trial({**trace_trial(str(TRACES / "step-24-6.trace")),
                      "link": {"capacity": "20Mbit", "rtt": "20ms", "queue": "1bdp",
                               "ack_aggregation": {"model": "wifi", "interval": "4ms"}}})
    assert ok.to_core()["link"]["ack_aggregation"] == {"model": "wifi", "interval_ns": 4_000_000, "max_acks": 64}
    with pytest.raises(ConfigError, match="only the wifi model caps a burst"):
        parse_trial({**ok.model_dump(mode="json", exclude_none=True),
                     "link": {"capacity": "20Mbit", "rtt": "20ms", "queue": "1bdp",
                              "ack_aggregation": {"model": "periodic", "interval": "4ms", "max_acks": 8}}})
    # ACK aggregation and traces run on the kernel backend's full link emulator
    assert not any(p.startswith("link.ack_aggregation:") for p in trial_problems(ok))
    assert "link.ack_aggregation" in full_link_needs(ok)
    # a trace runs on the kernel backend's full link emulator (the simulator's TraceLink)
    traced = parse_trial(trace_trial(str(TRACES / "step-24-6.trace")))
    assert not any(p.startswith("link.trace:") for p in trial_problems(traced))
    assert "link.trace" in full_link_needs(traced)


def test_receiver_nic_is_validated_and_the_kernel_takes_only_gro():
    base = {"name": "nic", "duration": "2s", "flows": [{"cc": "cubic"}],
            "link": {"capacity": "1Gbit", "rtt": "10ms", "queue": "1bdp"}}
    plain = parse_trial(base)
    assert plain.to_core()["link"]["receiver_nic"] == {"gro": True, "coalesce_ns": 0, "budget": 64}
    nic = parse_trial({**base, "link": {**base["link"], "receiver_nic": {"coalesce": "8us", "gro": False}}})
    assert nic.to_core()["link"]["receiver_nic"] == {"gro": False, "coalesce_ns": 8000, "budget": 64}
    for bad, field in (({"budget": 0}, "budget"), ({"coalesce": "-1us"}, "coalesce"), ({"gro": "yes"}, "gro")):
        with pytest.raises(ConfigError, match=field):
            parse_trial({**base, "link": {**base["link"], "receiver_nic": bad}})
    # the kernel's veths poll at each frame: GRO follows the trial, coalescing is refused
    assert not any(p.startswith("link.receiver_nic") for p in trial_problems(plain))
    no_gro = parse_trial({**base, "link": {**base["link"], "receiver_nic": {"gro": False}}})
    assert not any(p.startswith("link.receiver_nic") for p in trial_problems(no_gro))
    assert any(p.startswith("link.receiver_nic: ") and "coalesce" in p for p in trial_problems(nic))

