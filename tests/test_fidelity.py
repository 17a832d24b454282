"""The fidelity machinery: the suite, the compared metrics, verdicts, the accumulating kernel
reference, and `fidelity check` against a reference."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from cctestbed.fidelity.measure import BIN_S, share_period
from cctestbed.fidelity.reference import Reference, disturbed
from cctestbed.fidelity.suite import SuiteError, load_suite, parse_suite
from cctestbed.fidelity.verdict import apply_known, cells_for, gross_miss, tolerances

ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT / "fidelity" / "suite.toml"

MINI = {
    "name": "mini",
    "reps": 2,
    "defaults": {"duration": "3s", "steady": ["1s", "3s"]},
    "scenarios": [
        {"id": "two-cubic", "link": {"capacity": "10Mbit", "rtt": "20ms", "queue": "1bdp"},
         "flows": [{"cc": "cubic", "count": 2}]},
        {"id": "bbr-reno", "link": {"capacity": "5Mbit", "rtt": "40ms", "queue": "2bdp"},
         "flows": [{"cc": "bbr"}, {"cc": "reno"}]},
    ],
}


def write_suite(tmp_path: Path, doc: dict) -> Path:
    p = tmp_path / "suite.json"
    p.write_text(json.dumps(doc))
    return p


# --- the checked-in suite ----------------------------------------------------------------------


def test_suite_spans_the_regimes_the_map_must_cover():
    suite = load_suite(SUITE)
    trials = [s.trial for s in suite.scenarios]
    assert len(trials) >= 48
    caps = [t.link.capacity for t in trials]
    assert min(caps) <= 100_000 and max(caps) >= 100_000_000
    rtts = [t.link.rtprop_ns / 1e6 for t in trials]
    assert min(rtts) <= 2 and max(rtts) >= 200
    counts = {sum(g.count for g in t.flows) for t in trials}
    assert {1, 2, 4, 8, 16} <= counts
    queue_s = [t.link.queue_limits()[0] * 8 / t.link.capacity for t in trials if t.link.queue_limits()[0]]
    bdps = [t.link.queue_limits()[0] / t.link.bdp_bytes() for t in trials if t.link.queue_limits()[0]]
    assert min(bdps) <= 0.1 + 1e-9 and max(queue_s) >= 1.0, "from 0.1 BDP to seconds of queue"
    mixes = {tuple(sorted({g.cc for g in t.flows if g.cc is not None})) for t in trials}  # tcp groups
    assert {("reno",), ("cubic",), ("bbr",), ("bbr", "cubic"), ("bbr", "reno")} <= mixes
    assert any(t.link.loss is not None and (getattr(t.link.loss, "p", None) or 0) >= 0.02 for t in trials)
    assert any(g.stagger > 0 for t in trials for g in t.flows), "staggered starts"
    assert any(t.link.schedule for t in trials), "a capacity step"
    assert suite.reps == 3


def test_suite_errors_name_the_field(tmp_path):
    bad = {**MINI, "repz": 2, "scenarios": [MINI["scenarios"][0], MINI["scenarios"][0],
                                           {"id": "x", "link": {"capacity": "-1Mbit", "rtt": "1ms", "queue": "1bdp"},
                                            "flows": [{"cc": "bbr"}]}]}
    with pytest.raises(SuiteError) as e:
        parse_suite(bad)
    text = str(e.value)
    assert "repz: unknown key" in text
    assert "scenarios[1].id: 'two-cubic': used by an earlier scenario" in text
    assert "scenarios[2] (x): link.capacity" in text
    with pytest.raises(SuiteError, match="tolerances.utilization_pct.abs: -1"):
        parse_suite({**MINI, "tolerances": {"utilization_pct": {"abs": -1}}})


def test_cli_refuses_a_bad_suite_and_writes_nothing(cli, tmp_path):
    p = write_suite(tmp_path, {**MINI, "scenarios": []})
    r = cli("fidelity", "run", p, "-o", tmp_path / "out", "--backend", "sim")
    assert r.exit_code == 2 and "scenarios: must be a non-empty array" in r.output
    assert not (tmp_path / "out").exists()


def test_scenario_key_follows_the_text_not_the_code():
    a = parse_suite(MINI).scenarios[0]
    b = parse_suite(json.loads(json.dumps(MINI))).scenarios[0]
    assert a.scenario_key(1, "kernel") == b.scenario_key(1, "kernel")
    assert len({a.scenario_key(1, "kernel"), a.scenario_key(2, "kernel"), a.scenario_key(1, "sim")}) == 3
    changed = json.loads(json.dumps(MINI))
    changed["scenarios"][0]["link"]["queue"] = "2bdp"
    assert parse_suite(changed).scenarios[0].scenario_key(1, "kernel") != a.scenario_key(1, "kernel")
    # a default changes every scenario it reaches
    changed = {**MINI, "defaults": {"duration": "4s", "steady": ["1s", "3s"]}}
    assert parse_suite(changed).scenarios[1].scenario_key(1, "kernel") != parse_suite(MINI).scenarios[1].scenario_key(1, "kernel")


def test_a_scenario_may_ask_for_more_reps_without_changing_its_key():
    """A noisy scenario's own ``reps`` raises its seeds on both backends; the reps it had keep
    their keys (the reference is not measured again), and ``--reps`` raises every scenario."""
    more = json.loads(json.dumps(MINI))
    more["scenarios"][1]["reps"] = 4
    suite, plain = parse_suite(more), parse_suite(MINI)
    a, b = suite.scenarios
    assert suite.seeds_of(a) == [1, 2] and suite.seeds_of(b) == [1, 2, 3, 4]
    assert b.scenario_key(1, "kernel") == plain.scenarios[1].scenario_key(1, "kernel")
    specs = suite.sweep("sim").specs
    assert [(s.values["scenario"], s.seed) for s in specs] == [
        ("two-cubic", 1), ("bbr-reno", 1), ("two-cubic", 2), ("bbr-reno", 2), ("bbr-reno", 3), ("bbr-reno", 4)]
    suite.reps = 5
    assert suite.seeds_of(a) == suite.seeds_of(b) == [1, 2, 3, 4, 5]
    more["scenarios"][0]["reps"] = 0
    with pytest.raises(SuiteError, match=r"scenarios\[0\].reps: 0: must be a whole number from 1 to 100"):
        parse_suite(more)


def test_simulator_reps_raise_the_simulator_side_alone():
    """``simulator_reps`` adds seeds on the simulator only: the kernel's reps, their keys and the
    reference stay as measured, and ``fidelity check`` averages the simulator's many seeds."""
    doc = {**json.loads(json.dumps(MINI)), "simulator_reps": 5}
    suite, plain = parse_suite(doc), parse_suite(MINI)
    a, b = suite.scenarios
    assert suite.seeds_of(a) == suite.seeds_of(a, "kernel") == [1, 2]
    assert suite.seeds_of(a, "sim") == [1, 2, 3, 4, 5]
    assert [s.seed for s in suite.sweep("kernel").specs] == [1, 1, 2, 2]
    assert [s.key for s in suite.sweep("kernel").specs] == [s.key for s in plain.sweep("kernel").specs]
    assert len(suite.sweep("sim").specs) == 10
    assert b.scenario_key(3, "kernel") == plain.scenarios[1].scenario_key(3, "kernel")
    for bad in (0, 2.5, True, "20"):
        with pytest.raises(SuiteError, match=r"simulator_reps: .*: must be a whole number from 1 to 1000"):
            parse_suite({**doc, "simulator_reps": bad})


# --- metrics and verdicts ----------------------------------------------------------------------


def test_dominant_period_finds_a_periodic_share_and_nothing_in_noise():
    t = np.arange(0, 30, BIN_S)
    def dominant(series):
        period, is_dominant = share_period(series)
        return period if is_dominant else None

    assert dominant(0.5 + 0.2 * np.sin(2 * math.pi * t / 10.0)) == pytest.approx(10.0, rel=0.05)
    assert dominant(0.5 + 0.2 * np.sign(np.sin(2 * math.pi * t / 2.5))) == pytest.approx(2.5, rel=0.05)
    rng = np.random.default_rng(1)
    assert dominant(0.5 + 0.05 * rng.standard_normal(len(t))) is None
    assert dominant(np.full(len(t), 0.5)) is None


def test_cells_within_by_tolerance_or_by_kernel_spread():
    tols = tolerances()
    kernel = [{"utilization_pct": 97.0, "loss_pct": 4.0}, {"utilization_pct": 99.0, "loss_pct": 6.0}]
    # utilization: kernel mean 98, spread 2 -> allowed 2; loss: mean 5, tolerance 25 % = 1.25, spread 2 -> 2
    near = [{"utilization_pct": 99.9, "loss_pct": 6.9}]
    far = [{"utilization_pct": 100.1, "loss_pct": 7.1}]
    by = {c.metric: c for c in cells_for("s", kernel, near, tols)}
    assert by["utilization_pct"].verdict == "within" and by["utilization_pct"].allowed == pytest.approx(2.0)
    assert by["loss_pct"].verdict == "within" and by["loss_pct"].allowed == pytest.approx(2.0)
    by = {c.metric: c for c in cells_for("s", kernel, far, tols)}
    assert by["utilization_pct"].verdict == "miss" and by["loss_pct"].verdict == "miss"
    # tight kernel reps: the tolerance decides (25 % of 10 % loss)
    by = {c.metric: c for c in cells_for("s", [{"loss_pct": 10.0}] * 3, [{"loss_pct": 12.4}], tols)}
    assert by["loss_pct"].verdict == "within" and by["loss_pct"].allowed == pytest.approx(2.5)


def test_metric_on_one_side_only_is_a_miss_and_absent_on_both_makes_no_cell():
    cells = cells_for("s", [{"period_s": 10.0}, {"period_s": 10.2}], [{"period_s": None}, {"period_s": None}], tolerances())
    assert [(c.metric, c.verdict) for c in cells] == [("period_s", "miss")]
    assert cells_for("s", [{"period_s": None}], [{"period_s": None}], tolerances()) == []


def test_known_deviations_and_gross_misses():
    kernel = [{"utilization_pct": 98.0, "loss_pct": 11.0}]
    sim = [{"utilization_pct": 97.5, "loss_pct": 5.0}]
    cells = cells_for("s", kernel, sim, tolerances())
    assert gross_miss(cells) == "loss 5.00 % against the kernel's 11.00 %"
    apply_known(cells, {("s", "loss_pct"): "trains"})
    assert {c.metric: c.verdict for c in cells} == {"utilization_pct": "within", "loss_pct": "known"}
    assert gross_miss(cells_for("s", [{"utilization_pct": 98.0}], [{"utilization_pct": 85.0}], tolerances()))
    # 0.1 % vs 0.3 %: three times, but not 2 points apart
    assert gross_miss(cells_for("s", [{"loss_pct": 0.1}], [{"loss_pct": 0.3}], tolerances())) is None


# --- the reference and the check -----------------------------------------------------------------


def test_reference_accumulates_and_refuses_a_damaged_file(tmp_path):
    path = tmp_path / "ref.parquet"
    ref = Reference(path)
    ref.add({"scenario": "a", "seed": 1, "key": "k1", "kernel": "6.18", "utilization_pct": 97.0, "share.bbr": 40.0})
    ref.add({"scenario": "b", "seed": 1, "key": "k2", "kernel": "6.18", "utilization_pct": 99.0})
    again = Reference(path)
    assert again.has("k1") and again.has("k2") and not again.has("k3")
    assert again.rows["k1"]["share.bbr"] == 40.0 and "share.bbr" not in again.rows["k2"]
    path.write_bytes(b"not parquet")
    with pytest.raises(ValueError, match="not a readable kernel reference"):
        Reference(path)


def test_run_skips_what_the_reference_holds(tmp_path):
    """A rep in the reference is not run again; a scenario whose text changed is."""
    from cctestbed.fidelity.cli import run_backend

    suite = parse_suite(MINI, source=str(tmp_path / "suite.toml"))
    ref = Reference(tmp_path / "ref.parquet")
    done, failed = run_backend(suite, "sim", tmp_path / "a", reference=ref, workers=2)
    assert (done, failed) == (4, 0) and len(Reference(tmp_path / "ref.parquet").rows) == 4
    # another machine, a fresh store: nothing to run
    assert run_backend(suite, "sim", tmp_path / "b", reference=ref, workers=2) == (0, 0)
    changed = json.loads(json.dumps(MINI))
    changed["scenarios"][1]["link"]["queue"] = "1bdp"
    suite2 = parse_suite(changed, source=str(tmp_path / "suite.toml"))
    assert run_backend(suite2, "sim", tmp_path / "b", reference=ref, workers=2) == (2, 0)


def test_remeasure_runs_again_what_the_reference_holds_and_replaces_it(tmp_path):
    """After a change to the kernel backend, --remeasure measures held reps again, rep by rep
    into the reference, and a resume into the same store keeps what finished."""
    from cctestbed.fidelity.cli import run_backend

    suite = parse_suite(MINI, source=str(tmp_path / "suite.toml"))
    ref = Reference(tmp_path / "ref.parquet")
    assert run_backend(suite, "sim", tmp_path / "a", reference=ref, workers=2) == (4, 0)
    before = {k: r["date"] for k, r in Reference(tmp_path / "ref.parquet").rows.items()}
    for r in ref.rows.values():
        r["date"] = "2000-01-01T00:00:00Z"  # as if measured long ago
    ref.save()
    assert run_backend(suite, "sim", tmp_path / "b", reference=ref, workers=2, remeasure=True) == (4, 0)
    after = Reference(tmp_path / "ref.parquet").rows
    assert after.keys() == before.keys() and all(r["date"] != "2000-01-01T00:00:00Z" for r in after.values())
    assert run_backend(suite, "sim", tmp_path / "b", reference=ref, workers=2, remeasure=True) == (0, 0)


def test_a_rep_from_a_stalled_host_is_measured_again_and_never_kept(tmp_path, monkeypatch, capsys):
    """A rep whose link emulator missed its 1 ms p99 is not added to the reference: it runs again
    in the same `fidelity run` (up to three attempts), and one already in a reference file is
    dropped on loading, so the next run measures it again."""
    from cctestbed.fidelity import reference as refmod
    from cctestbed.fidelity.cli import DISTURBED_ATTEMPTS, run_backend

    real = refmod.provenance
    attempts: dict[str, int] = {}

    def provenance(trial_dir: Path) -> dict:
        attempts[trial_dir.name] = attempts.get(trial_dir.name, 0) + 1
        stalled = trial_dir.name == first and attempts[trial_dir.name] < 3
        return {**real(trial_dir), "emu_p99_us": 5400.0 if stalled else 150.0}

    monkeypatch.setattr(refmod, "provenance", provenance)
    suite = parse_suite(MINI, source=str(tmp_path / "suite.toml"))
    first = suite.sweep("sim").specs[0].key
    ref = Reference(tmp_path / "ref.parquet")
    assert DISTURBED_ATTEMPTS >= 3
    done, failed = run_backend(suite, "sim", tmp_path / "a", reference=ref, workers=2)
    assert (done, failed) == (6, 0) and attempts[first] == 3, "two stalled attempts, then a quiet one"
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("not kept")]
    assert len(said) == 2 and all("5.4 ms late" in line and "(it measured utilization " in line and " %, loss "
                                  in line for line in said), "why, and what the stalled rep measured"
    rows = Reference(tmp_path / "ref.parquet").rows
    assert len(rows) == 4 and all(r["emu_p99_us"] == 150.0 for r in rows.values())

    key = next(iter(rows))
    ref.rows[key]["emu_p99_us"] = 1500.0
    ref.save()
    again = Reference(tmp_path / "ref.parquet")
    assert not again.has(key) and len(again.rows) == 3
    assert run_backend(suite, "sim", tmp_path / "b", reference=again, workers=2) == (1, 0)
    assert len(Reference(tmp_path / "ref.parquet").rows) == 4

    # a rep whose host lost frames around the link emulator is not kept either
    ref = Reference(tmp_path / "ref.parquet")
    key = next(iter(ref.rows))
    assert ref.rows[key].get("frames_lost") in (None, 0)
    ref.rows[key]["frames_lost"] = 3
    ref.save()
    assert not Reference(tmp_path / "ref.parquet").has(key)
    assert "lost 3 frame(s)" in (disturbed({"frames_lost": 3}) or "")

    # nor one whose emulator stalled as long as the bottleneck's buffer takes to drain
    ref = Reference(tmp_path / "ref.parquet")
    key = next(iter(ref.rows))
    ref.rows[key].update(emu_stall_ms=12.0, buffer_drain_ms=6.4)
    ref.save()
    assert not Reference(tmp_path / "ref.parquet").has(key)


def _reference_from_simulator(suite, path: Path) -> Reference:
    """A reference holding the simulator's own reps under the kernel's keys."""
    from cctestbed.fidelity.cli import _sim_job

    ref = Reference(path)

    for sc in suite.scenarios:
        for seed in suite.seeds:
            _, _, m = _sim_job((sc.id, sc.doc, seed))
            ref.rows[sc.scenario_key(seed, "kernel")] = {"scenario": sc.id, "seed": seed,
                                                          "key": sc.scenario_key(seed, "kernel"), **m}
    ref.save()
    return ref


def test_check_passes_against_itself_and_fails_on_a_moved_cell(cli, tmp_path):
    """The simulator checked against its own figures is within everywhere (determinism); moving
    one kernel figure out of tolerance fails the check naming the cell, until it is listed."""
    p = write_suite(tmp_path, MINI)
    suite = load_suite(p)
    ref = _reference_from_simulator(suite, tmp_path / "kernel-reference.parquet")
    r = cli("fidelity", "check", p, "--json", tmp_path / "f.json", "-j", "2")
    assert r.exit_code == 0, r.output
    doc = json.loads((tmp_path / "f.json").read_text())
    assert doc["totals"]["cells"] == doc["totals"]["within"] > 0 and doc["totals"]["scenarios"] == 2
    assert all(c["diff"] == 0 for c in doc["cells"] if c["diff"] is not None)

    key = suite.scenarios[0].scenario_key(1, "kernel")
    for seed in suite.seeds:
        ref.rows[suite.scenarios[0].scenario_key(seed, "kernel")]["utilization_pct"] = 80.0
    ref.save()
    r = cli("fidelity", "check", p)
    assert r.exit_code == 1
    assert "miss: two-cubic: utilization_pct" in r.output
    (tmp_path / "known-deviations.toml").write_text(
        '[[deviations]]\nscenario = "two-cubic"\nmetric = "utilization_pct"\nreason = "test"\n')
    r = cli("fidelity", "check", p)
    assert r.exit_code == 0, r.output
    assert "1 known deviations" in r.output
    assert key in Reference(tmp_path / "kernel-reference.parquet").rows


def test_report_writes_the_map(cli, tmp_path):
    p = write_suite(tmp_path, MINI)
    suite = load_suite(p)
    _reference_from_simulator(suite, tmp_path / "kernel-reference.parquet")
    r = cli("fidelity", "run", p, "-o", tmp_path / "out", "--backend", "sim", "-j", "2")
    assert r.exit_code == 0, r.output
    md = (tmp_path / "out" / "fidelity.md").read_text()
    assert "| two-cubic |" in md and "| bbr-reno |" in md
    doc = json.loads((tmp_path / "out" / "fidelity.json").read_text())
    assert doc["totals"]["within"] == doc["totals"]["cells"]
    assert {c["metric"] for c in doc["cells"]} >= {"utilization_pct", "share.bbr", "share.reno", "rtt_p50_ms"}
    assert (tmp_path / "out" / "fidelity-plots" / "heatmap.png").is_file()
    r = cli("fidelity", "report", tmp_path / "out", "--suite", p)
    assert r.exit_code == 0 and "cells within tolerance" in r.output


def test_period_cell_only_where_a_side_oscillates_with_a_dominant_period():
    noise_k = [{"period_s": 0.7, "period_dominant": 0.0}, {"period_s": 4.0, "period_dominant": 0.0}]
    noise_s = [{"period_s": 9.0, "period_dominant": 0.0}]
    assert cells_for("s", noise_k, noise_s, tolerances()) == [], "noise against noise: nothing to compare"
    strong_k = [{"period_s": 6.0, "period_dominant": 1.0}, {"period_s": 6.2, "period_dominant": 1.0}]
    (c,) = cells_for("s", strong_k, [{"period_s": 3.7, "period_dominant": 0.0}], tolerances())
    assert c.verdict == "miss" and c.allowed == pytest.approx(1.525)
    (c,) = cells_for("s", strong_k, [{"period_s": 5.5, "period_dominant": 0.0}], tolerances())
    assert c.verdict == "within"


def test_max_trials_zero_only_brings_the_reference_up_to_date(tmp_path):
    """--max-trials 0 runs nothing, but reps finished in the store and missing from the reference
    (or measured by an older metrics version) are added from their trials."""
    from cctestbed.fidelity.cli import run_backend

    suite = parse_suite(MINI, source=str(tmp_path / "suite.toml"))
    assert run_backend(suite, "sim", tmp_path / "a", reference=None, workers=2) == (4, 0)
    ref = Reference(tmp_path / "ref.parquet")
    assert run_backend(suite, "sim", tmp_path / "a", reference=ref, workers=2, max_trials=0) == (0, 0)
    assert len(Reference(tmp_path / "ref.parquet").rows) == 4
    key = next(iter(ref.rows))
    ref.rows[key]["metrics_version"] = 1
    ref.rows[key]["utilization_pct"] = -1.0
    ref.save()
    ref = Reference(tmp_path / "ref.parquet")
    run_backend(suite, "sim", tmp_path / "a", reference=ref, workers=2, max_trials=0)
    assert Reference(tmp_path / "ref.parquet").rows[key]["utilization_pct"] > 50.0


def test_a_trace_scenarios_key_does_not_depend_on_where_the_checkout_is(tmp_path):
    """The reference is measured in one checkout and checked in every other (CI's clean clone):
    a scenario naming a trace file is keyed by the path as written, relative to the suite."""
    import shutil

    keys = []
    for where in ("a", "b/deeper"):
        d = tmp_path / where / "fidelity"
        d.mkdir(parents=True)
        (d.parent / "traces").mkdir()
        shutil.copy(Path(__file__).parent.parent / "examples" / "traces" / "step-24-6.trace", d.parent / "traces")
        (d / "suite.toml").write_text(
            '[[scenarios]]\nid = "t"\nduration = "10s"\n'
            'link = { trace = "../traces/step-24-6.trace", rtt = "40ms", queue = "2bdp" }\n'
            'flows = [{ cc = "cubic" }]\n')
        (s,) = load_suite(d / "suite.toml").scenarios
        assert Path(s.trial.link.trace).is_absolute()  # the trial reads the file where it is
        keys.append(s.scenario_key(1, "kernel"))
    assert keys[0] == keys[1]


def test_a_bpf_objects_scenario_key_does_not_depend_on_where_the_checkout_is(tmp_path):
    """As a trace's: a scenario naming a BPF object file (the kernel's bpf_dctcp selftest in the
    suite) is keyed by its path from the suite, though the trial holds it absolute."""
    import shutil

    from cctestbed.kernel import bpfcc

    obj = bpfcc.bpf_dir() / "reno.bpf.o"
    if not obj.exists():
        pytest.skip(f"{obj} not built (make build)")
    keys = []
    for where in ("a", "b/deeper"):
        d = tmp_path / where / "fidelity"
        d.mkdir(parents=True)
        (d.parent / "cc").mkdir()
        shutil.copy(obj, d.parent / "cc" / "mine.bpf.o")
        (d / "suite.toml").write_text(
            '[[scenarios]]\nid = "t"\nduration = "10s"\n'
            'link = { capacity = "20Mbit", rtt = "40ms", queue = "1bdp" }\n'
            'flows = [{ cc = "bpf:../cc/mine.bpf.o#bpf_reno" }, { cc = "cubic" }]\n')
        (s,) = load_suite(d / "suite.toml").scenarios
        assert s.trial.flows[0].cc == f"bpf:{(d.parent / 'cc' / 'mine.bpf.o').resolve()}#bpf_reno"
        keys.append(s.scenario_key(1, "kernel"))
    assert keys[0] == keys[1]
