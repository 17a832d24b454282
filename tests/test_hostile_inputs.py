"""Hostile and absurd inputs are refused as ordinary validation errors: exit code 2, a message
naming the field, the value and the valid range, and nothing written. Never a traceback, a bare
ValueError from the core, an OverflowError, a MemoryError or a panic.

Property-based where it fits (hypothesis generates trial documents with bad numbers and types).
"""

from __future__ import annotations

import copy
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cctestbed.config import ConfigError, parse_trial

BASE: dict[str, Any] = {
    "name": "t",
    "duration": "1s",
    "link": {"capacity": "10Mbit", "rtt": "20ms", "queue": "2bdp"},
    "flows": [{"cc": "cubic"}],
}


def doc(**top: Any) -> dict[str, Any]:
    d = copy.deepcopy(BASE)
    d.update(top)
    return d


def refused(cli, tmp_path: Path, content: Any, *fragments: str, name: str = "trial.toml", extra=()) -> str:
    """Run the trial through ``cctestbed run``: exit 2, every fragment in the output, nothing written."""
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif isinstance(content, str):
        path.write_text(content)
    else:
        path.write_text(json.dumps(content) if name.endswith(".json") else _toml(content))
    out = tmp_path / "out"
    before = sorted(os.listdir(tmp_path))
    r = cli("run", path, "-o", out, *extra)
    assert r.exit_code == 2, r.output
    for f in fragments:
        assert f in r.output, (f, r.output)
    assert "Traceback" not in r.output
    assert not out.exists()
    assert sorted(os.listdir(tmp_path)) == before
    return r.output


def _toml(d: dict[str, Any]) -> str:
    from cctestbed.config import _toml_dumps

    return _toml_dumps(d)


def _set(d: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    node: Any = d
    parts = path.split(".")
    for p in parts[:-1]:
        node = node[int(p)] if isinstance(node, list) else node.setdefault(p, {})
    node[parts[-1]] = value
    return d


# --- 1. every number range-checked ---------------------------------------------------------------

OUT_OF_RANGE = [
    ("link.capacity", 1e30, ["link.capacity", "1e+30", "valid are 1bit to 1000000000Gbit"]),
    ("link.capacity", "1e30Mbit", ["link.capacity", "'1e30Mbit'", "valid are 1bit to"]),
    ("link.rtt", 1e30, ["link.rtt", "1e+30", "valid are 0s to 1000000000s"]),
    ("duration", 1e30, ["duration", "1e+30", "valid are 1ns to 1000000000s"]),
    ("link.queue", 1e30, ["link.queue", "1e+30", "valid are 1B to 1000000000GB"]),
    ("link.queue", "1e30bdp", ["link.queue", "out of range", "1000000000GB"]),
    ("flows.0.initial_cwnd", 2**40, ["flows[0].initial_cwnd", "1099511627776", "from 1 to 4294967295"]),
    ("link.capacity", 10**400, ["link.capacity", "(401 digits)", "valid are 1bit to"]),
    ("seed", 10**400, ["seed", "(401 digits)", "from 0 to 18446744073709551615"]),
    ("link.loss", "1e400%", ["link.loss", "'1e400%'", "out of range"]),
    ("flows.0.params", {"beta": "1e400%"}, ["flows[0].params.beta", "out of range"]),
    ("flows.0.params", {"beta": 10**400}, ["flows[0].params.beta", "out of range"]),
    ("duration", "1e999999999s", ["duration", "out of range"]),
    ("flows.0.delayed_ack", {"segments_per_ack": 2**40}, ["segments_per_ack", "from 1 to 4294967295"]),
    ("flows.0.count", 2**64, ["flows[0].count", "from 1 to 4294967295"]),
    ("link.queue", "100000000000000000000pkts", ["link.queue", "out of range"]),
]


@pytest.mark.parametrize("path,value,fragments", OUT_OF_RANGE, ids=[f"{p}={v!r}"[:40] for p, v, _ in OUT_OF_RANGE])
def test_out_of_range_numbers(cli, tmp_path, path, value, fragments):
    refused(cli, tmp_path, _set(doc(), path, value), *fragments, name="trial.json")


WRONG_TYPES = [
    ("flows.0.count", "2", ["flows[0].count", "'2'", "whole number, written without quotes"]),
    ("flows.0.count", 2.0, ["flows[0].count", "whole number"]),
    ("flows.0.count", True, ["flows[0].count", "whole number"]),
    ("flows.0.pacing", "yes", ["flows[0].pacing", "'yes'", "true or false"]),
    ("flows.0.pacing", 1, ["flows[0].pacing", "true or false"]),
    ("flows.0.initial_cwnd", "10", ["flows[0].initial_cwnd", "whole number"]),
    ("seed", "1", ["seed", "whole number"]),
    ("mtu", 1500.0, ["mtu", "whole number"]),
]


@pytest.mark.parametrize("path,value,fragments", WRONG_TYPES, ids=[f"{p}={v!r}" for p, v, _ in WRONG_TYPES])
def test_strict_types(cli, tmp_path, path, value, fragments):
    refused(cli, tmp_path, _set(doc(), path, value), *fragments, name="trial.json")


def test_small_mtu_names_the_right_bound(cli, tmp_path):
    refused(cli, tmp_path, doc(mtu=68), "mss: 1448", "at most mtu - 20 (48)")


def test_duplicate_schedule_times(cli, tmp_path):
    d = doc()
    d["link"]["schedule"] = [{"at": "0.5s", "capacity": "5Mbit"}, {"at": "500ms", "capacity": "6Mbit"}]
    refused(cli, tmp_path, d, "link.schedule[1].at", "the same time as link.schedule[0]")
    d = doc()
    d["link"]["delay_schedule"] = [{"at": "0.5s", "rtt": "5ms"}, {"at": "0.5s", "rtt": "6ms"}]
    refused(cli, tmp_path, d, "link.delay_schedule[1].at", "the same time")


def test_duplicate_json_keys(cli, tmp_path):
    text = json.dumps(BASE)[:-1] + ', "duration": "2s"}'
    refused(cli, tmp_path, text, "'duration' is given twice", name="trial.json")


def test_duplicate_toml_keys(cli, tmp_path):
    refused(cli, tmp_path, 'duration = "2s"\n' + _toml(BASE), "not valid TOML", "line 3", "given twice")


@pytest.mark.parametrize(
    "content,fragment",
    [
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)), "not UTF-8 text"),
        ('name = "caf\xe9"\nduration = "1s"\n'.encode("latin-1"), "line 1: not UTF-8 text (byte 0xe9"),
        (b"duration = \"1s\"\x00\n", "NUL bytes"),
        (("a = " + "[" * 100_000 + "]" * 100_000).encode(), "nested too deeply"),
        (("a = " + "1" * 5000).encode(), "not valid TOML"),
    ],
    ids=["binary", "latin-1", "nul", "deep-toml", "huge-int"],
)
def test_unreadable_files(cli, tmp_path, content, fragment):
    refused(cli, tmp_path, content, fragment)


def test_deep_json(cli, tmp_path):
    refused(cli, tmp_path, "[" * 100_000 + "]" * 100_000, "nested too deeply", name="trial.json")


def test_validate_command_refuses_too(cli, tmp_path):
    p = tmp_path / "t.json"
    p.write_text(json.dumps(_set(doc(), "link.capacity", 1e30)))
    r = cli("validate", p)
    assert r.exit_code == 2 and "valid are 1bit to" in r.output


# --- property-based: any bad number or type is a ConfigError naming its field -----------------

HUGE = st.one_of(
    st.integers(min_value=2**64, max_value=10**500),
    st.floats(min_value=2.0**64, max_value=1e308),
    st.integers(min_value=-(10**500), max_value=-1),
    st.floats(max_value=-1e-3, min_value=-1e308),
)
WITH_UNIT = st.tuples(
    st.one_of(st.integers(min_value=19, max_value=500).map(lambda e: f"1e{e}"), st.just("-5")),
    st.sampled_from(["", " "]),
)
JUNK = st.one_of(
    st.booleans(),
    st.none(),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.text(max_size=20),
    st.floats(allow_nan=True, allow_infinity=True),
)

NUMERIC_FIELDS = {
    "duration": "s",
    "sample_interval": "ms",
    "link.capacity": "Mbit",
    "link.rtt": "ms",
    "link.jitter": "ms",
    "link.queue": "B",
    "link.access_rate": "Gbit",
    "flows.0.start": "s",
    "flows.0.stagger": "s",
    "flows.0.size": "MB",
    "flows.0.rwnd": "KB",
    "flows.0.extra_delay": "ms",
    "flows.0.count": None,
    "flows.0.initial_cwnd": None,
    "seed": None,
    "mtu": None,
    "mss": None,
}


def _field_shown(path: str) -> str:
    parts = path.split(".")
    out = parts[0]
    for p in parts[1:]:
        out += f"[{p}]" if p.isdigit() else f".{p}"
    return out


def _assert_config_error(d: dict[str, Any], path: str) -> None:
    try:
        parse_trial(d)
    except ConfigError as e:
        # one line per problem, each starting with the field it concerns (the value may make
        # another field wrong: rtt = 0 leaves a queue of "2bdp" empty)
        assert e.problems and all(re.match(r"^\S+: ", p) for p in e.problems), e.problems
        return
    # Some junk is a legitimate value (a short string that parses, an empty table); then the
    # trial is valid and must also be something the core accepted.


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=st.sampled_from(sorted(NUMERIC_FIELDS)), value=HUGE)
def test_huge_or_negative_numbers_are_config_errors(path, value):
    d = _set(doc(), path, value)
    with pytest.raises(ConfigError) as e:
        parse_trial(d)
    assert any(_field_shown(path) in p for p in e.value.problems) or path in ("duration",), e.value.problems


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=st.sampled_from(sorted(NUMERIC_FIELDS)), value=WITH_UNIT)
def test_huge_quantities_with_units_are_config_errors(path, value):
    num, sep = value
    unit = NUMERIC_FIELDS[path]
    written = f"{num}{sep}{unit}" if unit else num
    d = _set(doc(), path, written)
    with pytest.raises(ConfigError):
        parse_trial(d)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=st.sampled_from(sorted(NUMERIC_FIELDS) + ["flows.0.pacing", "link.loss", "flows.0.params"]), value=JUNK)
def test_junk_values_never_escape_as_other_exceptions(path, value):
    _assert_config_error(_set(doc(), path, value), path)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    axis=st.sampled_from(["link.capacity", "link.rtt", "duration", "link.queue", "flows.0.count"]),
    value=st.one_of(st.floats(min_value=1e19, max_value=1e300), st.integers(min_value=2**64, max_value=10**400)),
)
def test_sweep_axis_values_out_of_range(axis, value):
    from cctestbed.sweep import SweepError, parse_sweep

    raw = {"name": "s", "base": copy.deepcopy(BASE), "axes": {axis: [value]}}
    with pytest.raises(SweepError) as e:
        parse_sweep(raw)
    assert any("point 0" in p for p in e.value.problems), e.value.problems
