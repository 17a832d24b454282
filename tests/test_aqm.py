"""AQM and ECN from the trial file to summary.json: accepted forms and refusals of ``link.aqm``
and ``flows.ecn``, the router columns derived from the core's drop and mark causes, and the
BBR-vs-CUBIC example pair under fq_codel and drop-tail."""

from __future__ import annotations

from pathlib import Path

import pytest

import cctestbed
from cctestbed.config import ConfigError, parse_trial

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def problems(d):
    with pytest.raises(ConfigError) as e:
        parse_trial(d)
    return e.value.problems


def with_aqm(trial_dict, aqm):
    d = trial_dict()
    d["link"]["aqm"] = aqm
    return d


def test_aqm_forms_reach_the_core_in_si_units(trial_dict):
    c = parse_trial(with_aqm(trial_dict, {"kind": "fq_codel", "target": "5ms", "interval": "100ms", "quantum": "3KB"})).to_core()
    assert c["link"]["aqm"] == {"kind": "fq_codel", "target_ns": 5_000_000, "interval_ns": 100_000_000, "quantum": 3000}
    assert parse_trial(with_aqm(trial_dict, "codel")).to_core()["link"]["aqm"] == {"kind": "codel"}
    # drop-tail trials send the core exactly what they sent before: no aqm key, no ecn key
    plain = parse_trial(trial_dict()).to_core()
    assert "aqm" not in plain["link"] and all("ecn" not in f for f in plain["flows"])


@pytest.mark.parametrize(
    "aqm,fragment",
    [
        ({"kind": "cake"}, "link.aqm.kind: 'cake': unknown queue discipline; valid are codel, fq_codel, red, pie, fq, dualpi2"),
        ({"kind": "dualpi2", "c_protection": 150}, "link.aqm.c_protection: 150: must be a whole number from 0 to 100"),
        ({"kind": "dualpi2", "alpha": -1}, "link.aqm.alpha: -1.0: must be > 0 (Hz, as tc-dualpi2)"),
        ({"kind": "red", "min": "90KB", "max": "30KB"}, "link.aqm.min: '90KB': must be below max (30KB)"),
        ({"kind": "pie", "alpha": 40}, "link.aqm.alpha: 40.0: must be a whole number from 0 to 32"),
        ({"kind": "pie", "interval": "100ms"}, "link.aqm.interval: not a parameter of pie; it takes target, tupdate, alpha, beta, ecn, bytemode"),
        ({"kind": "codel", "quantum": 1514}, "link.aqm.quantum: not a parameter of codel; it takes target, interval, ecn, ce_threshold"),
        ({"kind": "fq_codel", "limit": 1000}, "link.aqm.limit: 1000: the hard limit of every discipline is link.queue"),
        ({"kind": "fq_codel", "target": "-1ms"}, "link.aqm.target"),
        ({"kind": "fq_codel", "flows": 0}, "link.aqm.flows: 0: must be a whole number from 1 to 65536"),
        ({"kind": "fq_codel", "quantum": 100}, "link.aqm.quantum: 100: must be a whole number from 256"),
        ({"kind": "codel", "ecn": "yes"}, "link.aqm.ecn: 'yes': must be true or false"),
        ({"kind": "codel", "tarket": "5ms"}, "link.aqm.tarket: unknown key; valid are kind, target, interval"),
    ],
)
def test_aqm_refusals_name_field_value_and_what_is_valid(trial_dict, aqm, fragment):
    ps = problems(with_aqm(trial_dict, aqm))
    assert any(fragment in p for p in ps), ps


def test_the_aqm_schema_is_built_from_the_core_declaration():
    from cctestbed import _core
    from cctestbed.config import DISCIPLINES, Aqm

    assert DISCIPLINES == _core.disciplines()
    assert list(Aqm.model_fields) == ["kind", *dict.fromkeys(p["name"] for d in DISCIPLINES.values() for p in d["params"])]
    pie = {p["name"]: p for p in DISCIPLINES["pie"]["params"]}
    assert pie["alpha"]["key"] == "alpha" and pie["alpha"]["default"] == 2 and pie["alpha"]["max"] == 32
    assert {p["name"]: p["key"] for p in DISCIPLINES["fq"]["params"]}["refill_delay"] == "flow_refill_delay_ns"
    assert DISCIPLINES["red"]["rules"] == [("below", "min", "max")]


def test_a_discipline_the_core_registers_needs_no_change_to_the_schema():
    """The shape the core's test-only discipline (qdisc/toy.rs) exports: the schema takes it,
    checks its range and refuses other disciplines' parameters, with nothing written for it."""
    from pydantic import ValidationError

    from cctestbed.config import DISCIPLINES, aqm_model, format_errors

    toy = {"doc": "drop-tail at a packet limit of its own", "rules": [],
           "params": [{"name": "packets", "key": "packets", "kind": "count", "min": 1.0, "min_open": False,
                       "max": 1000.0, "default": 10.0, "unit": "", "doc": "Most packets queued."}]}
    model = aqm_model({**DISCIPLINES, "toy": toy})
    assert model.model_validate({"kind": "toy", "packets": 3}).to_core() == {"kind": "toy", "packets": 3}
    for given, fragment in [({"packets": 0}, "packets: 0: must be a whole number from 1 to 1000"),
                            ({"target": "5ms"}, "target: not a parameter of toy; it takes packets")]:
        with pytest.raises(ValidationError) as e:
            model.model_validate({"kind": "toy", **given})
        assert any(fragment in p for p in format_errors(e.value)), format_errors(e.value)
    with pytest.raises(ValidationError) as e:
        model.model_validate({"kind": "toy2"})
    assert "valid are codel, fq_codel, red, pie, fq, dualpi2, toy" in format_errors(e.value)[0]


def test_the_aqm_sweep_puts_drop_tail_beside_each_discipline():
    from cctestbed.sweep.spec import load_sweep

    s = load_sweep(EXAMPLES / "aqm-sweep.toml")
    kinds = {x.values["aqm"]: (x.trial.link.aqm.kind if x.trial.link.aqm else None) for x in s.specs}
    assert kinds == {"none": None, "codel": "codel", "fq_codel": "fq_codel", "pie": "pie", "red": "red"}
    assert len(s.specs) == 5 * 5 * 3


def test_ecn_is_a_boolean_or_l4s(trial_dict):
    d = trial_dict()
    d["flows"][0]["ecn"] = "on"
    assert any(p.startswith("flows[0].ecn") and "'on'" in p for p in problems(d)), problems(d)
    d["flows"][0]["ecn"] = "l4s"
    f = parse_trial(d).to_core()["flows"][0]
    assert f["ecn"] is True and f["ect1"] is True


def test_router_columns_follow_the_core_causes(trial_dict):
    d = with_aqm(trial_dict, {"kind": "codel", "ecn": True})
    d["duration"] = "5s"
    d["flows"] = [{"cc": "cubic", "count": 2, "ecn": True}, {"cc": "reno"}]
    r = cctestbed.run_trial(d)
    drops = [c for c in r.router.columns if c.startswith("drops_")]
    marks = [c for c in r.router.columns if c.startswith("marks_")]
    assert drops == ["drops_overflow", "drops_random", "drops_policer", "drops_aqm"]
    assert marks == ["marks_aqm", "marks_threshold"]
    assert set(drops + marks) <= set(r.final["router"])
    last = r.router.tail(1).to_dicts()[0]
    final = r.final["router"]
    # the marks went to the ECN flows, the AQM's drops to the one without ECN
    flows = r.final["flows"]
    print(f"\ncodel ecn: marks {final['marks_aqm']}, aqm drops {final['drops_aqm']}, "
          f"marked per flow {[f['marked_pkts'] for f in flows]}, dropped per flow {[f['dropped_pkts'] for f in flows]}")
    assert final["marks_aqm"] > 0 and flows[2]["marked_pkts"] == 0
    assert flows[0]["marked_pkts"] + flows[1]["marked_pkts"] == final["marks_aqm"]
    assert last["marks_aqm"] <= final["marks_aqm"]
    s = r.summary
    assert s["total"]["mark_pct"] > 0 and s["sojourn"]["p50_ms"] is not None


def test_fq_codel_example_is_fairer_and_shallower_than_its_drop_tail_counterpart():
    fq = cctestbed.run_trial(EXAMPLES / "bbr-vs-cubic-fq_codel.toml")
    tail = cctestbed.run_trial(EXAMPLES / "bbr-vs-cubic-droptail.toml")
    jf, jt = fq.summary["total"]["jain"], tail.summary["total"]["jain"]
    bf, bt = fq.summary["groups"]["bbr"]["share"], tail.summary["groups"]["bbr"]["share"]
    sf, st = fq.summary["sojourn"]["p50_ms"], tail.summary["sojourn"]["p50_ms"]
    print(f"\nfq_codel: Jain {jf:.3f}, bbr share {bf:.2f}, sojourn p50 {sf:.1f} ms; "
          f"drop-tail: Jain {jt:.3f}, bbr share {bt:.2f}, sojourn p50 {st:.1f} ms")
    assert jf >= 0.95 and jt < jf
    assert bt > 1.5 * bf
    assert sf <= 10.0 < st
