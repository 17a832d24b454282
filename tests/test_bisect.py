"""cctestbed bisect: the bisection on known functions (log, linear, whole numbers), its refusals
(no crossing, non-monotone evidence, bad ranges), and a run on a trial with a known crossing."""

from __future__ import annotations

import json
import math

import polars as pl
import pytest
from typer.testing import CliRunner

from cctestbed.cli import app
from cctestbed.sweep.bisect import BisectError, Range, bisect, parse_range


def evaluator(f, seeds=1, calls=None):
    def evaluate(values):
        out = {}
        for v in values:
            x = float(str(v).rstrip("bdpMbit")) if not isinstance(v, (int, float)) else float(v)
            out[v] = [f(x) + 0.0 * s for s in range(seeds)]
            if calls is not None:
                calls.append(v)
        return out
    return evaluate


def test_log_scale_brackets_a_known_crossing():
    rng = parse_range("0.25bdp:16bdp", "link.queue")
    assert rng.scale == "log"
    # a share falling with the buffer, crossing 0.5 at 3 BDP
    res = bisect(rng, 0.5, evaluator(lambda x: 1.0 / (1.0 + x / 3.0)), steps=6)
    lo, hi = res.lo, res.hi
    assert res.direction == "falls" and res.steps == 6 and res.stopped == "steps"
    assert lo.x < 3.0 <= hi.x
    assert lo.mean >= 0.5 > hi.mean
    # six halvings of log(16 / 0.25): the bracket is 64^(1/64) wide
    assert hi.x / lo.x == pytest.approx(64 ** (1 / 64))
    assert res.crossing == pytest.approx(3.0, rel=0.01)
    assert len(res.probes) == 8  # the two ends and six midpoints


def test_linear_and_integer_scales():
    rng = parse_range("0:10", "flows.0.params.cwnd_gain")
    assert rng.scale == "linear"
    res = bisect(rng, 7.3, evaluator(lambda x: x), steps=10)
    assert res.lo.x < 7.3 <= res.hi.x and res.hi.x - res.lo.x == pytest.approx(10 / 2 ** 10)
    rng = parse_range("1:16", "flows.1.count")
    assert rng.scale == "integer"
    calls: list = []
    res = bisect(rng, 5.5, evaluator(lambda n: n, calls=calls), steps=20)
    assert (res.lo.value, res.hi.value) == (5, 6) and res.stopped == "resolution"
    assert all(isinstance(v, int) for v in calls) and res.steps <= 4


def test_refuses_a_range_without_crossing_and_non_monotone_evidence():
    rng = parse_range("1Mbit:64Mbit", "link.capacity")
    with pytest.raises(BisectError, match="no crossing of 0.5 between the ends.*both below"):
        bisect(rng, 0.5, evaluator(lambda x: 0.1))
    # ends straddle the threshold, but the midpoint (8 Mbit) lies far above both ends
    with pytest.raises(BisectError, match="non-monotone evidence: 10 at 8Mbit lies outside 0 at 1Mbit and 1 at 64Mbit") as e:
        bisect(rng, 0.5, evaluator(lambda x: 10.0 if 2 < x < 32 else (0.0 if x < 2 else 1.0)))
    assert e.value.partial is not None and len(e.value.partial.probes) == 3


def test_noise_within_the_interval_is_not_non_monotone():
    rng = Range(1.0, 16.0, "bdp", "log")

    def evaluate(values):  # the midpoint 4 sits 0.02 beyond the end at 1 but seeds spread 0.1
        out = {}
        for v in values:
            x = float(v.rstrip("bdp"))
            base = {1.0: 0.8, 16.0: 0.2}.get(x, 0.82 if x == 4.0 else 0.5)
            out[v] = [base - 0.05, base, base + 0.05]
        return out

    res = bisect(rng, 0.5, evaluate, steps=1)
    assert res.steps == 1 and res.lo.value == "4bdp"


@pytest.mark.parametrize("text, says", [
    ("0.25bdp-16bdp", "valid: LO:HI"), ("1bdp:16Mbit", "different units"), ("16bdp:1bdp", "below HI"),
    ("0bdp:4bdp", "log-scale bisection needs LO above 0"),
])
def test_bad_ranges(text, says):
    with pytest.raises(BisectError, match=says):
        parse_range(text, "link.queue", "log" if text.startswith("0bdp") else None)
    assert parse_range("0bdp:4bdp", "link.queue").scale == "linear"  # from 0: no log scale


TRIAL = '''
name = "cap"
duration = "6s"
steady = ["2s", "6s"]
[link]
capacity = "10Mbit"
rtt = "20ms"
queue = "2bdp"
[[flows]]
cc = "cubic"
'''


def test_cli_finds_the_capacity_where_goodput_crosses_5_mbit(tmp_path):
    # one CUBIC flow fills the link: its goodput is the payload capacity, about 0.97-0.99 of the
    # capacity in this window, so 5 Mbit/s of goodput needs 5.0-5.2 Mbit/s of link
    f = tmp_path / "cap.toml"
    f.write_text(TRIAL)
    out = tmp_path / "bis"
    args = ["bisect", str(f), "--field", "link.capacity", "--range", "1Mbit:40Mbit", "--metric",
            "total.goodput_bps", "--threshold", "5e6", "--steps", "6", "-o", str(out), "-j", "2"]
    r = CliRunner().invoke(app, args, catch_exceptions=False)
    assert r.exit_code == 0, r.output
    doc = json.loads((out / "bisect.json").read_text())
    assert doc["ok"] and doc["scale"] == "log" and doc["steps"] == 6 and doc["direction"] == "rises"
    lo, hi = doc["bracket"]
    assert lo["mean"] < 5e6 <= hi["mean"]
    assert hi["x"] / lo["x"] == pytest.approx(40 ** (1 / 64))
    assert 5.0 <= lo["x"] <= hi["x"] <= 5.4
    assert 5.0 <= doc["crossing_estimate"] <= 5.2
    assert "rises through 5e+06" in r.output and "log scale" in r.output
    # a sweep directory: every probe is a row of trials.parquet; a second run reuses them all
    assert len(pl.read_parquet(out / "trials.parquet")) == 8
    r2 = CliRunner().invoke(app, args, catch_exceptions=False)
    assert r2.exit_code == 0
    assert json.loads((out / "bisect.json").read_text())["bracket"] == doc["bracket"]


def test_cli_refusals(tmp_path):
    f = tmp_path / "cap.toml"
    f.write_text(TRIAL)
    base = ["bisect", str(f), "--field", "link.capacity", "--metric", "groups.cubic.share", "-o", str(tmp_path / "o")]
    r = CliRunner().invoke(app, [*base, "--range", "1Mbit:4Mbit", "--threshold", "50"])
    assert r.exit_code == 2 and "fraction of 1" in r.output and "0.5" in r.output
    assert not (tmp_path / "o").exists()
    r = CliRunner().invoke(app, [*base, "--range", "1Mbit:4bdp", "--threshold", "0.5"])
    assert r.exit_code == 2 and "different units" in r.output
    r = CliRunner().invoke(app, ["bisect", str(f), "--field", "link.nosuch", "--range", "1:4", "--metric",
                                 "total.utilization", "--threshold", "0.5", "-o", str(tmp_path / "o2")])
    assert r.exit_code == 2 and "nosuch" in r.output
    assert not (tmp_path / "o2").exists()
