"""Adaptive sweeps (`sweep --until`): the stopping rule by hand, the rule's parsing, and a run in
which one point converges in few seeds and the other does not within --max-seeds."""

from __future__ import annotations

import json
import math
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from cctestbed.cli import app
from cctestbed.sweep.adaptive import UntilError, ci95_half_width, parse_until, t_quantile

#: One Reno and one BBR flow under 1 % random loss: in a 1 BDP buffer BBR's share varies by a
#: couple of points between seeds (converges in a few seeds to +-0.03); in 4 BDP by about ten
#: (does not within 5 seeds).
ADAPTIVE_SWEEP = '''
name = "adaptive"
trials = 2
steady = ["2s", "6s"]
[base]
duration = "6s"
[base.link]
capacity = "10Mbit"
rtt = "20ms"
loss = "1%"
[[base.flows]]
cc = "reno"
[[base.flows]]
cc = "bbr"
[axes]
# (0.5 BDP: BBR holds 91-96 % in every seed, so five seeds meet the rule; at 4 BDP its
# share varies from 0.61 to 0.84 with the seed)
"link.queue" = ["0.5bdp", "4bdp"]
'''

RULE = "ci95(groups.bbr.share) <= 0.03"


def test_t_quantiles_match_the_tables():
    # two-sided 95 % critical values of Student's t (any statistics table)
    for df, t in [(1, 12.706), (2, 4.303), (3, 3.182), (4, 2.776), (9, 2.262), (29, 2.045), (120, 1.980)]:
        assert t_quantile(0.975, df) == pytest.approx(t, abs=1e-3)
    assert t_quantile(0.025, 5) == pytest.approx(-t_quantile(0.975, 5))


def test_stopping_rule_by_hand():
    values = [0.50, 0.52, 0.48]
    # mean 0.50, s = sqrt((0 + 0.0004 + 0.0004) / 2) = 0.02, t(0.975, 2) = 4.3027
    hw = 4.302653 * 0.02 / math.sqrt(3)  # 0.049684
    assert ci95_half_width(values) == pytest.approx(hw, rel=1e-6)
    assert parse_until("ci95(groups.bbr.share) <= 0.05").met(ci95_half_width(values), 0.5)
    assert not parse_until("ci95(groups.bbr.share) <= 0.049").met(ci95_half_width(values), 0.5)
    # relative: 10 % of the mean 0.5 is 0.05 >= 0.0497; 9 % is 0.045 < 0.0497
    assert parse_until("ci95(groups.bbr.share) <= 10%").met(ci95_half_width(values), 0.5)
    assert not parse_until("ci95(groups.bbr.share) <= 9%").met(ci95_half_width(values), 0.5)
    # strict: a half-width equal to the bound does not pass '<'
    assert parse_until("ci95(rtt.p95_ms) <= 2").met(2.0, 50.0)
    assert not parse_until("ci95(rtt.p95_ms) < 2").met(2.0, 50.0)
    # identical values: a zero-width interval; one value: no interval
    assert ci95_half_width([3.0, 3.0]) == 0.0
    assert ci95_half_width([3.0]) is None
    assert not parse_until("ci95(rtt.p95_ms) <= 2").met(None, 3.0)


@pytest.mark.parametrize("text, says", [
    ("groups.bbr.share <= 0.02", "not a stopping rule"),
    ("ci95(groups.bbr.share) >= 0.02", "not a stopping rule"),
    ("ci95(bogus.share) <= 0.02", "not a metric column"),
    ("ci95(groups.vegas.share) <= 0.02", "no flow group 'vegas'"),
    ("ci95(groups.bbr.share) <= 2", "fraction of 1"),
    ("ci95(rtt.p95_ms) <= 0", "above 0"),
])
def test_bad_rules_name_the_expression_and_what_is_valid(text, says):
    with pytest.raises(UntilError) as e:
        parse_until(text, ["bbr", "reno"])
    assert repr(text) in str(e.value) and says in str(e.value)
    if says != "fraction of 1":
        assert "valid: 'ci95(METRIC) <= BOUND'" in str(e.value)


def test_bad_until_on_the_command_line_exits_2_and_writes_nothing(tmp_path):
    f = tmp_path / "adaptive.toml"
    f.write_text(ADAPTIVE_SWEEP)
    for args in (["--until", "ci95(groups.cubic.share) <= 0.02"], ["--until", "mean(total.utilization) < 1"],
                 ["--max-seeds", "5"], ["--until", RULE, "--max-seeds", "1"]):
        r = CliRunner().invoke(app, ["sweep", str(f), "-o", str(tmp_path / "out"), *args])
        assert r.exit_code == 2, (args, r.output)
        assert not (tmp_path / "out").exists()
    r = CliRunner().invoke(app, ["sweep", str(f), "-o", str(tmp_path / "out"), "--until", "ci95(groups.cubic.share) <= 0.02"])
    assert "no flow group 'cubic'" in r.output and "bbr, reno" in r.output


def test_one_point_converges_in_few_seeds_the_other_not_within_max_seeds(tmp_path):
    f = tmp_path / "adaptive.toml"
    f.write_text(ADAPTIVE_SWEEP)
    out = tmp_path / "out"
    args = ["sweep", str(f), "-o", str(out), "--workers", "2", "--until", RULE, "--max-seeds", "6"]
    r = CliRunner().invoke(app, args, catch_exceptions=False)
    assert r.exit_code == 0, r.output
    doc = json.loads((out / "sweep.json").read_text())["adaptive"]
    pts = {p["values"]["queue"]: p for p in doc["points"]}
    table = pl.read_parquet(out / "trials.parquet")
    for q, p in pts.items():
        # the table holds exactly the seeds the point ran, and the interval is theirs by hand
        vals = table.filter(pl.col("queue") == q).sort("seed")["groups.bbr.share"].to_list()
        assert len(vals) == p["seeds"] == len(p["seed_list"])
        assert p["seed_list"] == list(range(1, p["seeds"] + 1))
        n = len(vals)
        mean = sum(vals) / n
        s = math.sqrt(sum((v - mean) ** 2 for v in vals) / (n - 1))
        assert p["half_width"] == pytest.approx(t_quantile(0.975, n - 1) * s / math.sqrt(n))
        # it stopped at the first seed count that met the rule (or at the maximum)
        for k in range(2, n):
            assert ci95_half_width(vals[:k]) > 0.03
    conv, wide = pts["0.5bdp"], pts["4bdp"]
    assert conv["status"] == "converged" and conv["half_width"] <= 0.03 and conv["seeds"] < 6
    assert wide["status"] == "not converged" and wide["half_width"] > 0.03 and wide["seeds"] == 6
    assert doc["converged"] == 1 and doc["not_converged"] == 1
    assert doc["seeds_total"] == conv["seeds"] + 6 == len(table)
    assert "1 of 2 point(s) converged" in r.output and "not converged" in r.output
    # the report lists the seeds each point needed
    r2 = CliRunner().invoke(app, ["report", str(out)], catch_exceptions=False)
    assert r2.exit_code == 0, r2.output
    page = (out / "report.html").read_text()
    assert 'id="adaptive-points"' in page and "not converged" in page
    # resumable: the same command again runs nothing and comes to the same outcome; so does
    # --resume -o DIR, which takes the rule from sweep.json
    for again in (args, ["sweep", "--resume", "-o", str(out)]):
        r3 = CliRunner().invoke(app, again, catch_exceptions=False)
        assert r3.exit_code == 0, r3.output
        assert "0 trial(s) run" in r3.output
        doc2 = json.loads((out / "sweep.json").read_text())["adaptive"]
        assert [p["seeds"] for p in doc2["points"]] == [p["seeds"] for p in doc["points"]]
