"""Sweep files: expansion (cartesian product, zip groups, seeds, dotted paths) and refusals."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from cctestbed.sweep.spec import SweepError, load_sweep, parse_sweep, trial_key

#: The sweep file of issue 4, verbatim.
ISSUE_EXAMPLE = '''
name = "table1-quick"
trials = 3
steady = ["20s", "60s"]
[base]
duration = "60s"
[base.link]
capacity = "80Mbit"
rtt = "25ms"
[[base.flows]]
cc = "bbr"
count = 2
[[base.flows]]
cc = "cubic"
count = 2
[axes]
"link.capacity" = ["40Mbit", "80Mbit", "120Mbit"]
"link.queue" = ["0.25bdp", "0.5bdp", "1bdp", "1.5bdp", "2bdp", "4bdp", "8bdp"]
'''

BASE = {
    "duration": "3s",
    "link": {"capacity": "4Mbit", "rtt": "20ms", "queue": "1bdp"},
    "flows": [{"cc": "bbr", "count": 1}, {"cc": "cubic", "count": 1}],
}


def sweep_dict(**updates):
    d = {"name": "s", "trials": 1, "steady": ["1s", "3s"], "base": copy.deepcopy(BASE), "axes": {}}
    d.update(updates)
    return d


def problems(d) -> list[str]:
    with pytest.raises(SweepError) as e:
        parse_sweep(d)
    return e.value.problems


def test_issue_example_expands_to_every_point_and_seed(tmp_path: Path):
    f = tmp_path / "quick.toml"
    f.write_text(ISSUE_EXAMPLE)
    s = load_sweep(f)
    assert s.name == "table1-quick"
    assert s.columns == {"capacity": "link.capacity", "queue": "link.queue"}
    assert len(s.specs) == 3 * 7 * 3 and s.n_points == 21
    # the last axis varies fastest, seeds innermost
    first = [(x.values["capacity"], x.values["queue"], x.seed) for x in s.specs[:4]]
    assert first == [("40Mbit", "0.25bdp", 1), ("40Mbit", "0.25bdp", 2), ("40Mbit", "0.25bdp", 3),
                     ("40Mbit", "0.5bdp", 1)]
    for x in s.specs:
        assert x.trial.link.capacity == {"40Mbit": 40e6, "80Mbit": 80e6, "120Mbit": 120e6}[x.values["capacity"]]
        assert x.trial.link.queue == x.values["queue"]
        assert x.trial.steady_ns == (20 * 10**9, 60 * 10**9)
        assert [g.cc for g in x.trial.flows] == ["bbr", "cubic"]
        assert x.trial.seed == x.seed
    assert len({x.key for x in s.specs}) == len(s.specs)
    # the queue of 2 BDP at 40 Mbit/s, 25 ms is 250 KB exactly
    two = next(x for x in s.specs if x.values == {"capacity": "40Mbit", "queue": "2bdp"})
    assert two.trial.link.queue_limits() == (250_000, None)


def test_zip_varies_fields_together_and_columns_disambiguate():
    d = sweep_dict(
        trials=2,
        axes={"link.capacity": ["4Mbit", "8Mbit"]},
        zip={"flows.0.count": [1, 2, 4], "flows.1.count": [1, 2, 4]},
    )
    s = parse_sweep(d)
    assert list(s.columns) == ["capacity", "flows_0_count", "flows_1_count"]
    assert len(s.specs) == 2 * 3 * 2
    pairs = {(x.values["flows_0_count"], x.values["flows_1_count"]) for x in s.specs}
    assert pairs == {(1, 1), (2, 2), (4, 4)}
    for x in s.specs:
        assert [g.count for g in x.trial.flows] == [x.values["flows_0_count"], x.values["flows_1_count"]]


def test_several_zip_groups_multiply():
    d = sweep_dict(zip=[{"flows.0.count": [1, 2], "flows.1.count": [2, 1]},
                        {"link.capacity": ["4Mbit", "8Mbit", "16Mbit"], "link.rtt": ["10ms", "20ms", "40ms"]}])
    s = parse_sweep(d)
    assert len(s.specs) == 2 * 3
    combos = {(x.trial.link.capacity, x.trial.link.rtprop_ns) for x in s.specs}
    assert combos == {(4_000_000, 10_000_000), (8_000_000, 20_000_000), (16_000_000, 40_000_000)}


def test_dotted_paths_reach_flow_groups_and_algorithm_parameters():
    d = sweep_dict(axes={"flows.0.cc": ["bbr", "bbr-shallow"], "flows.0.params.cwnd_gain": [1.5, 2.0]})
    s = parse_sweep(d)
    assert list(s.columns) == ["cc", "cwnd_gain"]
    got = {(x.trial.flows[0].cc, x.trial.flows[0].params["cwnd_gain"]) for x in s.specs}
    assert got == {("bbr", 1.5), ("bbr", 2.0), ("bbr-shallow", 1.5), ("bbr-shallow", 2.0)}
    assert all(x.trial.flows[1].cc == "cubic" and x.trial.flows[1].params == {} for x in s.specs)


def test_whole_flow_mix_axis_is_labelled():
    mixes = [[{"cc": "bbr", "count": 2}], [{"cc": "bbr", "count": 1}, {"cc": "cubic", "count": 1}]]
    s = parse_sweep(sweep_dict(axes={"flows": mixes}))
    assert [x.values["flows"] for x in s.specs] == ["2 bbr", "1 bbr + 1 cubic"]
    assert [len(x.trial.expanded()) for x in s.specs] == [2, 2]
    assert [x.trial.flows[-1].cc for x in s.specs] == ["bbr", "cubic"]


def test_seeds_follow_the_base_seed_or_an_explicit_list():
    base = copy.deepcopy(BASE)
    base["seed"] = 10
    s = parse_sweep(sweep_dict(trials=3, base=base))
    assert [x.seed for x in s.specs] == [10, 11, 12]
    d = sweep_dict(seeds=[7, 3])
    del d["trials"]
    assert [x.seed for x in parse_sweep(d).specs] == [7, 3]
    assert any("not both" in p for p in problems(sweep_dict(seeds=[1])))


def test_key_is_the_trial_not_the_sweep():
    a = parse_sweep(sweep_dict(axes={"link.capacity": ["4Mbit", "8Mbit"]}))
    b = parse_sweep(sweep_dict(name="other", axes={"link.capacity": ["8000kbit"]}))
    assert b.specs[0].key == a.specs[1].key  # same config, written differently, other sweep
    c = parse_sweep(sweep_dict(steady=["2s", "3s"], axes={"link.capacity": ["8Mbit"]}))
    assert c.specs[0].key != a.specs[1].key  # another steady window is another result
    assert trial_key(a.specs[0].trial) == a.specs[0].key


def test_no_axes_is_one_point():
    s = parse_sweep(sweep_dict(trials=2))
    assert len(s.specs) == 2 and s.columns == {}


# --- refusals ----------------------------------------------------------------------------------


def test_unknown_axis_names_the_field_and_the_valid_ones():
    (p,) = problems(sweep_dict(axes={"link.capacty": ["4Mbit"]}))
    assert p.startswith('axes."link.capacty": unknown axis')
    assert "unknown field 'capacty' in link" in p and "capacity" in p
    (p,) = problems(sweep_dict(axes={"flows.2.cc": ["bbr"]}))
    assert "index 2 is beyond the base's 2 entries in 'flows'" in p
    (p,) = problems(sweep_dict(axes={"flows.0.colour": ["red"]}))
    assert "unknown field 'colour' in flows.0" in p
    (p,) = problems(sweep_dict(axes={"seed": [1, 2]}))
    assert "cannot be varied" in p and "trials" in p
    (p,) = problems(sweep_dict(axes={"link.capacity.max": [1]}))
    assert "'link.capacity' is a single value" in p


def test_empty_list_and_not_a_list_refused():
    ps = problems(sweep_dict(axes={"link.queue": [], "link.rtt": "20ms"}))
    assert 'axes."link.queue": empty list; give at least one value' in ps
    assert any(p.startswith("axes.\"link.rtt\": '20ms': must be a list") for p in ps)


def test_steady_window_outside_the_duration_refused():
    (p,) = problems(sweep_dict(steady=["1s", "5s"]))
    assert p.startswith('steady: ["1s", "5s"]: ends after the trial ends (base.duration = \'3s\')')
    (p,) = problems(sweep_dict(steady=["1s", "3s"], axes={"duration": ["3s", "2s"]}))
    assert "axes.duration value '2s'" in p
    (p,) = problems(sweep_dict(steady=["3s", "1s"]))
    assert p.startswith("steady:") and "start" in p


def test_zip_of_unequal_lengths_refused():
    (p,) = problems(sweep_dict(zip={"flows.0.count": [1, 2, 4], "flows.1.count": [1, 2]}))
    assert p.startswith("zip: lists of unequal length")
    assert '"flows.0.count" has 3 values' in p and '"flows.1.count" has 2 values' in p


def test_other_mistakes_each_reported():
    d = sweep_dict(axes={"link.capacity": ["4Mbit", "4Mbit"], "flows": [[{"cc": "bbr"}]]},
                   zip={"link.capacity": ["8Mbit"]}, trials=0, colour="red")
    d["axes"]["flows.0.cc"] = ["bbr"]
    ps = problems(d)
    text = "\n".join(ps)
    assert "colour: unknown key" in text
    assert "trials: 0: must be a whole number >= 1" in text
    assert "listed more than once" in text
    assert "also given as" in text  # link.capacity in axes and zip
    assert "overlaps" in text  # flows and flows.0.cc


def test_invalid_value_names_the_point():
    ps = problems(sweep_dict(axes={"link.capacity": ["4Mbit", "4 furlongs"]}))
    assert any("link.capacity: '4 furlongs'" in p and "capacity='4 furlongs'" in p for p in ps), ps
    ps = problems(sweep_dict(axes={"flows.0.params.cwnd_gain": [2.0], "flows.0.cc": ["cubic"]}))
    assert any("cwnd_gain" in p and "unknown parameter" in p for p in ps), ps


def test_missing_base_and_bad_file(tmp_path: Path):
    assert any(p.startswith("base: missing") for p in problems({"axes": {}}))
    with pytest.raises(SweepError, match="no such file"):
        load_sweep(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[axes\n")
    with pytest.raises(SweepError, match="not valid TOML"):
        load_sweep(bad)


BAD_FILES = {
    "unknown-axis": ('"link.capacty" = ["4Mbit"]', "link.capacty"),
    "empty-list": ('"link.queue" = []', "empty list"),
    "steady": ('"link.queue" = ["1bdp"]\n', "ends after the trial ends"),
    "zip": ('"link.queue" = ["1bdp"]\n[zip]\n"flows.0.count" = [1, 2]\n"flows.1.count" = [1]', "unequal length"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_cli_refuses_bad_sweep_files_with_exit_2_and_writes_nothing(case, tmp_path: Path, cli):
    axes, expect = BAD_FILES[case]
    steady = '["1s", "9s"]' if case == "steady" else '["1s", "3s"]'
    f = tmp_path / "bad.toml"
    f.write_text(
        f'name = "bad"\ntrials = 2\nsteady = {steady}\n[base]\nduration = "3s"\n'
        '[base.link]\ncapacity = "4Mbit"\nrtt = "20ms"\nqueue = "1bdp"\n'
        '[[base.flows]]\ncc = "bbr"\n[[base.flows]]\ncc = "cubic"\n'
        f"[axes]\n{axes}\n"
    )
    out = tmp_path / "out"
    before = sorted(p.name for p in tmp_path.iterdir())
    r = cli("sweep", f, "-o", out)
    assert r.exit_code == 2, r.output
    assert "is not a valid sweep" in r.output and expect in r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == before and not out.exists()
    r = cli("sweep", f, "-o", out, "--dry-run")
    assert r.exit_code == 2 and not out.exists()


def test_two_points_that_are_the_same_trial_are_refused():
    # the queue in bytes equals 1 BDP at 4 Mbit/s and 20 ms (10 KB) but not at 8 Mbit/s: only
    # the points at 4 Mbit/s coincide, for every seed
    d = sweep_dict(axes={"link.capacity": ["8Mbit", "4Mbit"], "link.queue": ["1bdp", "10KB"]}, trials=3)
    with pytest.raises(SweepError) as e:
        parse_sweep(d)
    assert e.value.problems == [
        "axes: point 3 (capacity='4Mbit', queue='10KB') is the same trial as point 2 "
        "(capacity='4Mbit', queue='1bdp'); the values differ only in how they are written"
    ]


def test_the_sweep_package_gives_the_sweep_file_names_in_a_fresh_interpreter():
    """``from cctestbed.sweep import load_sweep`` as a notebook's first line (the README's
    promise): the package loads its ``spec`` submodule on first use, and names it does not have
    are an ImportError, not an endless recursion."""
    import subprocess
    import sys

    code = ("from cctestbed.sweep import load_sweep, parse_sweep, Sweep\n"
            "from cctestbed.sweep import spec\n"
            "assert load_sweep is spec.load_sweep and Sweep is spec.Sweep\n"
            "try:\n    from cctestbed.sweep import no_such_name\nexcept ImportError:\n    print('ok')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout == "ok\n", r.stderr[-2000:]
