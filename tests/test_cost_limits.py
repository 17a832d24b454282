"""Every cost is bounded before the work: the packets a trial will make the simulator carry
(TCP, UDP, ping, on/off periods; one model), a sweep's dry run (estimated from a sample, never
an enumeration of the grid), and validation's own work (groups and arrival times counted before
anything is built)."""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from typing import Any

import pytest

from cctestbed.config import MAX_PACKETS, ConfigError, parse_trial, resources

LINK = {"capacity": "10Mbit", "rtt": "20ms", "queue": "2bdp"}


def trial(*flows: dict[str, Any], duration: str = "10s") -> dict[str, Any]:
    return {"name": "t", "duration": duration, "link": copy.deepcopy(LINK), "flows": [{"cc": "cubic"}, *flows]}


def refused(cli, tmp_path: Path, doc: dict[str, Any], *fragments: str) -> str:
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc))
    t0 = time.monotonic()
    r = cli("validate", p)
    assert time.monotonic() - t0 < 10, "refused at once, nothing run"
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output
    text = " ".join(r.output.split())
    for f in fragments:
        assert f in text, (f, r.output)
    return text


# --- one packet model for every kind of flow ------------------------------------------------------


@pytest.mark.parametrize(
    "group, fragments",
    [
        ({"kind": "udp", "rate": "1000000Gbit"},
         ("flows[1].rate: 1000000Gbit", "packets", "a rate of at most", "--allow-large")),
        ({"kind": "ping", "interval": "1ns"},
         ("flows[1].interval: 1ns", "probes", "an interval of at least", "--allow-large")),
        ({"kind": "udp", "rate": "1Mbit", "on": "1ns", "off": "1ns"},
         ("flows[1].on: 1ns", "on/off periods", "on + off of at least", "--allow-large")),
        ({"kind": "udp", "rate": "50Gbit", "count": 100},
         ("flows[1].rate: 50Gbit", "100 flow(s)", "--allow-large")),
    ],
)
def test_datagram_rates_count_toward_the_packet_limit(cli, tmp_path, group, fragments):
    refused(cli, tmp_path, trial(group), *fragments, "1,000,000,000")


def test_the_limit_is_one_budget_for_every_kind(trial_dict):
    # each stream alone fits; the TCP bottleneck, the udp packets and the probes together do not
    d = trial({"kind": "udp", "rate": "5Gbit"}, {"kind": "ping", "interval": "3us"}, duration="1000s")
    with pytest.raises(ConfigError) as e:
        parse_trial(d)
    assert any("flows[" in p and "--allow-large" in p for p in e.value.problems), e.value.problems
    r = resources(parse_trial(d, allow_large=True))
    assert r.packets > MAX_PACKETS
    # ordinary datagram trials are far from it, and allowed
    ok = parse_trial(trial({"kind": "udp", "rate": "3Mbit", "on": "10ms", "off": "30ms"},
                           {"kind": "ping", "interval": "10ms"}))
    assert resources(ok).packets < 10**7


def test_packet_estimate_counts_udp_ping_and_periods():
    base = resources(parse_trial(trial())).packets
    # 8 Mbit/s of 1500-byte packets for 10 s: about 6,667; half of it on/off at a 50 % duty
    udp = resources(parse_trial(trial({"kind": "udp", "rate": "8Mbit"}))).packets - base
    assert 6_600 <= udp <= 6_700, udp
    onoff = resources(parse_trial(trial({"kind": "udp", "rate": "8Mbit", "on": "1s", "off": "1s"}))).packets - base
    assert 3_300 <= onoff <= 3_400, onoff
    # a probe and its echo every 10 ms: 2,000 packets in 10 s
    ping = resources(parse_trial(trial({"kind": "ping"}))).packets - base
    assert 1_990 <= ping <= 2_010, ping


def test_allow_large_lets_a_fast_stream_through():
    t = parse_trial(trial({"kind": "udp", "rate": "1000000Gbit"}), allow_large=True)
    assert resources(t).packets > MAX_PACKETS


# --- a sweep's dry run estimates from a sample --------------------------------------------------


def _sweep_file(tmp_path: Path, **top: Any) -> Path:
    raw = {"name": "s", "base": {"duration": "1s", "link": copy.deepcopy(LINK), "flows": [{"cc": "cubic"}]}, **top}
    p = tmp_path / "sweep.json"
    p.write_text(json.dumps(raw))
    return p


@pytest.mark.parametrize("trials, seeds", [(100_000, None), (None, 10**6), (10**6, None)])
def test_dry_run_of_many_seeds_never_enumerates(cli, tmp_path, monkeypatch, trials, seeds):
    from cctestbed.sweep.spec import Sweep

    def enumerate_all(self):
        raise AssertionError("the dry run enumerated every trial")

    monkeypatch.setattr(Sweep, "iter_specs", enumerate_all)
    top = {"trials": trials} if trials else {"seeds": list(range(seeds))}
    p = _sweep_file(tmp_path, axes={"flows.0.cc": ["cubic", "reno"]}, **top)
    out = tmp_path / "out"
    t0 = time.monotonic()
    r = cli("sweep", p, "-o", out, "--dry-run")
    spent = time.monotonic() - t0
    assert r.exit_code == 0, r.output
    n = 2 * (trials or seeds)
    assert f"to run: {n:,} trial(s)" in r.output and "of CPU" in r.output
    assert not out.exists()
    assert spent < 15, f"{spent:.1f} s (the probe of one trial is most of it)"


def test_dry_run_of_a_small_sweep_still_lists_every_trial(cli, tmp_path):
    p = _sweep_file(tmp_path, trials=3, axes={"flows.0.cc": ["cubic", "reno"]})
    r = cli("sweep", p, "-o", tmp_path / "out", "--dry-run")
    assert r.exit_code == 0, r.output
    assert "to run: 6 trial(s)" in r.output and "sample" not in r.output


# --- validation bounds its own work ---------------------------------------------------------------


def _timed_refusal(cli, path: Path, *fragments: str, limit_s: float = 5.0) -> str:
    t0 = time.monotonic()
    r = cli("validate", path)
    spent = time.monotonic() - t0
    assert r.exit_code == 2, r.output[-2000:]
    assert "Traceback" not in r.output
    for f in fragments:
        assert f in r.output, (f, r.output[-2000:])
    assert spent < limit_s, f"refused after {spent:.1f} s"
    return r.output


def test_six_hundred_thousand_flow_groups_are_refused_by_their_count(cli, tmp_path):
    p = tmp_path / "t.json"
    doc = trial()
    doc["flows"] = [{"cc": "cubic"}] * 600_000
    p.write_text(json.dumps(doc))
    _timed_refusal(cli, p, "flows: 600,000 flow groups", "--allow-large")


def test_a_million_arrival_times_are_refused_by_their_count(cli, tmp_path):
    p = tmp_path / "t.json"
    doc = trial()
    doc["flows"] = [{"cc": "cubic", "size": "10KB", "arrivals": [f"{i}us" for i in range(1_000_000)]}]
    p.write_text(json.dumps(doc))
    _timed_refusal(cli, p, "flows[0].arrivals: 1,000,000 arrival times", "--allow-large")
