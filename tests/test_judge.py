"""Ware et al.'s harm and the judge (cctestbed.judging): the formula by hand, the verdict on
figures made up for it, the baselines a trial implies, the cache, and the command."""

import json

import pytest

import cctestbed
from cctestbed.config import parse_trial
from cctestbed.judging import JudgeError, baselines, harm, judge, judgement, trial_key


def test_harm_by_hand():
    # more is better: (x - y) / x
    assert harm(100.0, 60.0, True) == (pytest.approx(0.4), pytest.approx(0.4))
    # the newcomer helps: clamped at 0, the signed change kept
    assert harm(100.0, 120.0, True) == (0.0, pytest.approx(-0.2))
    # less is better: (y - x) / y
    assert harm(50.0, 100.0, False) == (pytest.approx(0.5), pytest.approx(0.5))
    assert harm(100.0, 50.0, False) == (0.0, pytest.approx(-1.0))
    # no loss alone, some beside the newcomer: the whole harm; none in either: none
    assert harm(0.0, 0.2, False) == (1.0, 1.0)
    assert harm(0.0, 0.0, False) == (0.0, 0.0)
    # nothing to lose alone, or a figure missing: undefined
    assert harm(0.0, 5.0, True) == (None, None)
    assert harm(None, 5.0, False) == (None, None)


def _runs(alone, beside_self, mixed):
    return {"mixed": {"key": "m", "cached": False, "figures": {"cubic": mixed}},
            "alone:cubic": {"key": "a", "cached": True, "figures": {"cubic": alone}},
            "self:cubic": {"key": "s", "cached": False, "figures": {"cubic": beside_self}},
            "alone:bbr": {"key": "b", "cached": False, "figures": {"bbr": alone}},
            "self:bbr": {"key": "c", "cached": False, "figures": {"bbr": alone}},
            }


def test_judgement_by_hand():
    t = parse_trial({"name": "x", "duration": "10s", "link": {"capacity": "10Mbit", "rtt": "20ms", "queue": "2bdp"},
                     "flows": [{"cc": "bbr"}, {"cc": "cubic", "count": 2}]})
    fig = lambda g, r, l: {"goodput_bps": g, "rtt_p95_ms": r, "loss_pct": l, "fct_p99_ms": None}  # noqa: E731
    runs = _runs(alone=fig(100.0, 50.0, 0.0), beside_self=fig(50.0, 55.0, 0.1), mixed=fig(20.0, 52.0, 0.1))
    runs["mixed"]["figures"]["bbr"] = fig(80.0, 50.0, 0.0)
    doc = judgement(t, runs)
    c = doc["groups"]["cubic"]
    # throughput: harm 0.8 beside BBR against 0.5 beside itself: not deployable on it
    assert c["harm"]["throughput"] == pytest.approx(0.8) and c["harm_self"]["throughput"] == pytest.approx(0.5)
    # RTT: (52 - 50) / 52 against (55 - 50) / 55: no worse than itself
    assert c["harm"]["rtt_p95"] == pytest.approx(2 / 52) and c["harm_self"]["rtt_p95"] == pytest.approx(5 / 55)
    # loss 0 alone, 0.1 beside either: harm 1 both ways, deployable (equal)
    assert c["harm"]["loss"] == 1.0 and c["harm_self"]["loss"] == 1.0
    assert c["deployable"] == {"throughput": False, "rtt_p95": True, "loss": True}
    assert c["verdict"] == "not deployable" and c["worse_than_self_on"] == ["throughput"]
    assert "fct_p99" not in c["harm"]  # no sized flows
    assert c["flows"] == 2 and c["others"] == ["bbr"]
    b = doc["groups"]["bbr"]  # BBR beside CUBIC lost 20 % of its throughput; beside itself nothing
    assert b["harm"]["throughput"] == pytest.approx(0.2) and b["verdict"] == "not deployable"
    assert doc["runs"]["alone:cubic"] == {"key": "a", "cached": True}
    assert "clamped at 0" in doc["definition"]


def test_baselines_a_trial_implies():
    t = parse_trial({"name": "x", "duration": "10s", "link": {"capacity": "10Mbit", "rtt": "20ms", "queue": "2bdp"},
                     "flows": [{"cc": "bbr", "count": 2, "params": {"cwnd_gain": 1.5}},
                               {"cc": "cubic", "count": 3, "start": "1s", "stagger": "1s"}]})
    runs = baselines(t)
    assert sorted(runs) == ["alone:bbr", "alone:cubic", "mixed", "self:bbr", "self:cubic"]
    alone = runs["alone:cubic"].flows
    assert len(alone) == 1 and (alone[0].cc, alone[0].count, alone[0].start) == ("cubic", 3, 1_000_000_000)
    # BBR beside a copy of itself: the copy has CUBIC's count and timing and BBR's algorithm and parameters
    copy = runs["self:bbr"].flows[1]
    assert (copy.cc, copy.count, copy.start, copy.stagger, copy.params, copy.label) == \
        ("bbr", 3, 1_000_000_000, 1_000_000_000, {"cwnd_gain": 1.5}, "bbr-copy")
    assert runs["self:bbr"].flows[0].label == "bbr"
    assert [g.cc for g in runs["self:cubic"].flows] == ["cubic", "cubic"]
    assert runs["self:cubic"].flows[1].params == {}
    # the cache key ignores the trial's name, and follows everything else
    assert trial_key(runs["alone:cubic"]) == trial_key(parse_trial({**runs["alone:cubic"].model_dump(mode="json"),
                                                                    "name": "other"}))
    assert trial_key(runs["alone:cubic"]) != trial_key(runs["alone:cubic"].with_seed(2))


@pytest.mark.parametrize("flows, why", [
    ([{"cc": "cubic", "count": 2}], "one"),
    ([{"cc": "cubic"}, {"kind": "udp", "rate": "1Mbit"}], "udp"),
])
def test_trials_that_cannot_be_judged(flows, why):
    t = parse_trial({"name": "x", "duration": "10s", "link": {"capacity": "10Mbit", "rtt": "20ms", "queue": "2bdp"}, "flows": flows})
    with pytest.raises(JudgeError, match=why):
        baselines(t)


BBR_VS_CUBIC = {"name": "bbr-vs-cubic", "duration": "30s", "steady": ["10s", "30s"],
                "link": {"capacity": "80Mbit", "rtt": "25ms", "queue": "0.5bdp"},
                "flows": [{"cc": "bbr", "count": 2}, {"cc": "cubic", "count": 2}]}


def test_judge_bbr_against_cubic_in_a_shallow_buffer_and_the_cache(tmp_path):
    cache = tmp_path / "cache"
    doc = cctestbed.judge(BBR_VS_CUBIC, cache=cache)
    assert len(doc["runs"]) == 5 and not any(r["cached"] for r in doc["runs"].values())
    c = doc["groups"]["cubic"]
    # BBR takes nearly all of a 0.5 BDP link: CUBIC loses most of its throughput, far more than
    # it loses to more CUBIC flows
    assert c["harm"]["throughput"] > 0.8 and c["harm_self"]["throughput"] < 0.6
    assert c["deployable"]["throughput"] is False and c["verdict"] == "not deployable"
    assert c["alone"]["goodput_bps"] > 70e6 and c["beside_others"]["goodput_bps"] < 10e6
    # again: every run from the cache, the same judgement
    again = judge(BBR_VS_CUBIC, cache=cache)
    assert all(r["cached"] for r in again["runs"].values())
    assert again["groups"] == doc["groups"]
    # a judgement sharing a baseline (CUBIC alone on this link) runs only what it lacks
    other = judge({**BBR_VS_CUBIC, "flows": [{"cc": "bbr3", "count": 2}, {"cc": "cubic", "count": 2}]}, cache=cache)
    assert other["runs"]["alone:cubic"]["cached"] and not other["runs"]["mixed"]["cached"]
    assert other["runs"]["alone:cubic"]["key"] == doc["runs"]["alone:cubic"]["key"]


def test_judge_output_directory(tmp_path):
    out = tmp_path / "j"
    doc = judge(BBR_VS_CUBIC, output=out, cache=None)
    assert json.loads((out / "judge.json").read_text()) == json.loads(json.dumps(doc))
    assert sorted(p.name for p in (out / "trials").iterdir()) == ["alone-bbr", "alone-cubic", "mixed", "self-bbr",
                                                                 "self-cubic"]
    assert (out / "trials" / "self-cubic" / "summary.json").is_file()
    with pytest.raises(FileExistsError):
        judge(BBR_VS_CUBIC, output=out, cache=None)


def test_judge_command(cli, write_trial, tmp_path, monkeypatch):
    monkeypatch.setenv("CCTESTBED_CACHE", str(tmp_path / "cache"))
    path = write_trial(BBR_VS_CUBIC)
    r = cli("judge", path, "-o", tmp_path / "out", "--force")  # --force with nothing to replace
    assert r.exit_code == 0, r.output
    assert "bbr beside cubic: not deployable" in r.output and "tput Mbit/s" in r.output
    assert "runs: 5 (0 from the cache" in r.output
    assert (tmp_path / "out" / "judge.json").is_file()
    r = cli("judge", path, "-o", tmp_path / "out")  # exists: refused, nothing run
    assert r.exit_code == 2 and "exists" in r.output
    r = cli("judge", path, "-o", tmp_path / "out", "--force")
    assert r.exit_code == 0 and "runs: 5 (5 from the cache" in r.output
    moved = tmp_path / "out" / "trial.toml"  # a judge directory holding the trial: never replaced
    moved.write_text(path.read_text())
    r = cli("judge", moved, "-o", tmp_path / "out", "--force")
    assert r.exit_code == 2 and "which judge reads" in r.output and moved.is_file()
    (tmp_path / "mine").mkdir()
    r = cli("judge", path, "-o", tmp_path / "mine", "--force")  # not a judgement: never replaced
    assert r.exit_code == 2 and "not a judge directory" in r.output and not any((tmp_path / "mine").iterdir())
    one = write_trial({**BBR_VS_CUBIC, "flows": [{"cc": "cubic"}]}, name="one.toml")
    r = cli("judge", one)
    assert r.exit_code == 2 and "two or more groups" in r.output
    bad = write_trial({**BBR_VS_CUBIC, "duration": "-1s"}, name="bad.toml")
    assert cli("judge", bad).exit_code == 2


def test_judge_command_interrupted_or_failed(cli, write_trial, tmp_path, monkeypatch):
    import cctestbed.judging as judging
    from cctestbed import _core

    path = write_trial(BBR_VS_CUBIC)

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(judging, "run_baselines", interrupted)
    r = cli("judge", path, "-o", tmp_path / "out", "--no-cache")
    assert r.exit_code == 130 and "interrupted" in r.output and not (tmp_path / "out").exists()

    def failed(*a, **k):
        raise _core.TrialFailed("flow 0: the program never returned")

    monkeypatch.setattr(judging, "run_baselines", failed)
    r = cli("judge", path, "-o", tmp_path / "out", "--no-cache")
    assert r.exit_code == 1 and "never returned" in r.output and not (tmp_path / "out").exists()
