"""BPF congestion controls without root: the schema takes ``bpf:OBJECT``, the simulator refuses it,
and the objects `make build` compiles carry what the loader writes (parameters, name)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import polars as pl
import pytest

from cctestbed.config import ConfigError, algorithms, parse_trial
from cctestbed.kernel import bpfcc
from cctestbed.runner import run_trial
from trial_helpers import toml_of

BBR_OBJ = bpfcc.bpf_dir() / "bbr.bpf.o"
RENO_OBJ = bpfcc.bpf_dir() / "reno.bpf.o"
needs_objects = pytest.mark.skipif(
    shutil.which("bpftool") is None or not BBR_OBJ.exists() or not RENO_OBJ.exists(),
    reason="BPF objects not built or bpftool missing: `make build` (clang, bpftool, libbpf-dev via make kernel-deps)",
)


def test_simulator_names_a_missing_object_before_it_runs(cli, write_trial, trial_dict, tmp_path):
    path = write_trial(trial_dict(flows=[{"cc": "cubic"}, {"cc": "bpf:my/cc.bpf.o", "params": {"beta": 7}}]))
    r = cli("run", path, "-o", tmp_path / "out")
    assert r.exit_code == 2
    # a relative path is the trial file's, as a trace's: the message says where it looked
    where = tmp_path.resolve() / "my" / "cc.bpf.o"
    assert f"flows[1].cc: 'bpf:{where}': cannot read {where}" in " ".join(r.output.split()).replace("\n", "")
    assert not (tmp_path / "out").exists()


@needs_objects
def test_an_object_is_found_beside_the_trial_file_that_names_it(cli, trial_dict, tmp_path, monkeypatch):
    (tmp_path / "cc").mkdir()
    shutil.copy(RENO_OBJ, tmp_path / "cc" / "mine.bpf.o")
    trial = tmp_path / "cc" / "trial.toml"
    trial.write_text(toml_of(trial_dict(duration="2s", flows=[{"cc": "bpf:mine.bpf.o"}])))
    monkeypatch.chdir(tmp_path)  # elsewhere: the object is the file's neighbour, not the working directory's
    r = cli("run", trial, "-o", tmp_path / "out")
    assert r.exit_code == 0, r.output
    assert (tmp_path / "out" / "summary.json").exists()
    # a sweep's axis over cc, and its base's groups, likewise (a #NAME kept, a project name untouched)
    from cctestbed.sweep.spec import read_sweep_file

    sweep = tmp_path / "cc" / "sweep.toml"
    sweep.write_text('[base]\nflows = [{ cc = "bpf:mine.bpf.o" }]\n'
                     '[axes]\n"flows.0.cc" = ["cubic", "bpf:bbr", "bpf:sub/x.o#x"]\n')
    raw = read_sweep_file(sweep)
    here = (tmp_path / "cc").resolve()
    assert raw["base"]["flows"][0]["cc"] == f"bpf:{here / 'mine.bpf.o'}"
    assert raw["axes"]["flows.0.cc"] == ["cubic", "bpf:bbr", f"bpf:{here / 'sub' / 'x.o'}#x"]


def test_simulator_refuses_what_is_not_a_bpf_object(cli, write_trial, trial_dict, tmp_path):
    junk = tmp_path / "junk.bpf.o"
    junk.write_bytes(b"\x7fELF" + bytes(60))
    r = cli("run", write_trial(trial_dict(flows=[{"cc": f"bpf:{junk}"}])), "-o", tmp_path / "out")
    assert r.exit_code == 2 and "flows[0].cc" in r.output
    assert not (tmp_path / "out").exists()


@needs_objects
def test_schema_takes_bpf_objects_with_their_parameters(trial_dict):
    t = parse_trial(trial_dict(flows=[{"cc": f"bpf:{RENO_OBJ}", "params": {"beta_pct": 70}}]))
    assert t.flows[0].cc == f"bpf:{RENO_OBJ}" and t.flows[0].params == {"beta_pct": 70}
    with pytest.raises(ConfigError) as e:
        parse_trial(trial_dict(flows=[{"cc": "bpf:reno", "params": {"anything": 3}}]))
    assert "flows[0].params.anything: 3: reno.bpf.o has no such parameter; valid are beta_pct" in str(e.value)


def test_schema_names_a_missing_object_and_unknown_algorithms(trial_dict):
    with pytest.raises(ConfigError) as e:
        parse_trial(trial_dict(flows=[{"cc": "bpf:x.bpf.o", "params": {"anything": 3}}]))
    assert "flows[0].cc: 'bpf:x.bpf.o': cannot read x.bpf.o" in str(e.value)
    with pytest.raises(ConfigError) as e:
        parse_trial(trial_dict(flows=[{"cc": "bpf:"}]))
    assert "flows[0].cc: 'bpf:': bpf: needs an object" in str(e.value)
    with pytest.raises(ConfigError) as e:
        parse_trial(trial_dict(flows=[{"cc": "bbr9"}]))
    assert "bpf:PATH" in str(e.value)


def test_every_simulator_bbr_parameter_has_a_place_in_the_port():
    for cc in ("bbr", *bpfcc.BBR_VARIANTS):
        assert set(algorithms()[cc]) == set(bpfcc.BBR_PARAMS), cc


def test_variant_values():
    shallow, _ = bpfcc.bbr_values("bbr-shallow", {}, "flows[0].params")
    assert shallow["bbr_cwnd_gain"] == 384 and shallow["bbr_adaptive_cap"] == 0
    assert shallow["bbr_high_gain"] == 739 and shallow["bbr_drain_gain"] == 88  # tcp_bbr.c's integers
    adaptive, _ = bpfcc.bbr_values("bbr-adaptive", {"adaptive_step": 0.1}, "flows[0].params")
    assert adaptive["bbr_adaptive_cap"] == 1 and adaptive["bbr_adaptive_step"] == 26
    stable, problems = bpfcc.bbr_values("bbr-stable-rtprop", {"stable_rtprop_probes": 40}, "flows[2].params")
    assert stable["bbr_stable_rtprop"] == 1
    assert problems and problems[0].startswith("flows[2].params.stable_rtprop_probes: 40")
    assert bpfcc.uses_bbr_port("bbr", {"cwnd_gain": 1.5}) and not bpfcc.uses_bbr_port("bbr", {})


@needs_objects
def test_the_port_declares_every_parameter_the_loader_writes():
    obj = bpfcc.inspect(BBR_OBJ)
    assert {v for v, _ in bpfcc.BBR_PARAMS.values()} <= set(obj.rodata)
    # the object's defaults are the simulator's bbr defaults
    defaults, problems = bpfcc.bbr_values("bbr", {}, "p")
    assert not problems
    assert {k: obj.rodata[k].default for k in defaults} == defaults


@needs_objects
def test_build_writes_the_name_and_the_parameters(tmp_path):
    obj = bpfcc.inspect(RENO_OBJ)
    assert obj.rodata["beta_pct"].default == 50 and obj.ops[0][1] == "bpf_reno"
    values, problems = bpfcc.encode_values(obj, {"beta_pct": 70, "nope": 1, }, "flows[0].params")
    assert values == {"beta_pct": 70}
    assert problems == ["flows[0].params.nope: 1: reno.bpf.o has no such parameter; valid are beta_pct"]
    _, problems = bpfcc.encode_values(obj, {"beta_pct": 70.5}, "flows[0].params")
    assert "must be a whole number" in problems[0]
    _, problems = bpfcc.encode_values(obj, {"beta_pct": 2.0**40}, "flows[0].params")
    assert "32-bit" in problems[0]
    out = tmp_path / "patched.bpf.o"
    out.write_bytes(bpfcc.build(obj, "cct0a1b2c3", values))
    again = bpfcc.inspect(out)
    assert again.rodata["beta_pct"].default == 70 and again.ops[0][1] == "cct0a1b2c3"
    with pytest.raises(bpfcc.BpfError, match="invalid congestion control name"):
        bpfcc.build(obj, "a-name-far-too-long", {})


def test_inspect_refuses_what_is_not_a_bpf_object(tmp_path):
    p = tmp_path / "x.o"
    p.write_bytes(b"hello")
    with pytest.raises(bpfcc.BpfError, match="not a 64-bit little-endian ELF"):
        bpfcc.inspect(p)
    with pytest.raises(bpfcc.BpfError, match="cannot read"):
        bpfcc.inspect(tmp_path / "missing.o")


# --- the same object in the simulator ---------------------------------------------------------

SIM_TRIAL = {
    "name": "bpfsim", "duration": "20s", "seed": 3, "steady": ["5s", "20s"],
    "link": {"capacity": "20Mbit", "rtt": "40ms", "queue": "1bdp"},
}


def _pair(cc_bpf: str, cc_rust: str, count: int = 2, params: dict | None = None, **link: object) -> tuple[dict, dict]:
    trial = {**SIM_TRIAL, "link": {**SIM_TRIAL["link"], **link}}
    a = run_trial({**trial, "flows": [{"cc": cc_bpf, "count": count, "stagger": "1s", **({"params": params} if params else {})}]})
    b = run_trial({**trial, "flows": [{"cc": cc_rust, "count": count, "stagger": "1s"}]})
    return a.summary, b.summary


def _close(x: float, y: float, rel: float) -> bool:
    return abs(x - y) <= rel * max(abs(x), abs(y), 1e-9)


@needs_objects
@pytest.mark.parametrize("queue", ["0.5bdp", "2bdp"])
def test_bpf_reno_in_the_simulator_matches_the_simulators_reno(queue):
    """reno.bpf.o on the kernel's tcp_slow_start / tcp_cong_avoid_ai is Reno: the same trial
    gives the same goodput, loss and RTT as the Rust reno, within the fidelity tolerances."""
    a, b = _pair(f"bpf:{RENO_OBJ}", "reno", queue=queue)
    assert _close(a["total"]["goodput_bps"], b["total"]["goodput_bps"], 0.05), (a["total"], b["total"])
    assert _close(a["rtt"]["p50_ms"], b["rtt"]["p50_ms"], 0.10)
    assert _close(a["total"]["retrans_pct"], b["total"]["retrans_pct"], 0.25) or \
        abs(a["total"]["retrans_pct"] - b["total"]["retrans_pct"]) < 0.2


@needs_objects
def test_bpf_reno_parameter_reaches_the_program():
    """beta_pct = 70 keeps more of the window on loss than 50: a higher median RTT in a
    drop-tail queue, as the loader wrote the value into the object's read-only data."""
    half, _ = _pair(f"bpf:{RENO_OBJ}", "reno", count=1, queue="1bdp")
    seventy, _ = _pair(f"bpf:{RENO_OBJ}", "reno", count=1, params={"beta_pct": 70}, queue="1bdp")
    assert seventy["rtt"]["p50_ms"] > half["rtt"]["p50_ms"] * 1.03


@needs_objects
@pytest.mark.parametrize("queue", ["0.5bdp", "4bdp"])
def test_bpf_bbr_in_the_simulator_matches_the_simulators_bbr(queue):
    a, b = _pair(f"bpf:{BBR_OBJ}", "bbr", queue=queue)
    assert _close(a["total"]["goodput_bps"], b["total"]["goodput_bps"], 0.05), (a["total"], b["total"])
    assert _close(a["rtt"]["p50_ms"], b["rtt"]["p50_ms"], 0.15), (a["rtt"], b["rtt"])


@needs_objects
def test_bpf_object_runs_are_deterministic():
    t = {**SIM_TRIAL, "duration": "5s", "steady": ["1s", "5s"], "flows": [{"cc": f"bpf:{BBR_OBJ}", "count": 2}]}
    a, b = run_trial(t), run_trial(t)
    assert a.summary == b.summary


def _compile(source: Path, out: Path) -> Path:
    """A test program compiled as the README says (clang -g -O2 -target bpf), or skip."""
    vmlinux = bpfcc.bpf_dir() / "vmlinux.h"
    if shutil.which("clang") is None or not vmlinux.exists() or not Path("/usr/include/bpf/bpf_helpers.h").exists():
        pytest.skip("clang, libbpf's headers or target/bpf/vmlinux.h missing (make kernel-deps; make build)")
    subprocess.run(["clang", "-g", "-O2", "-target", "bpf", "-I", str(vmlinux.parent), "-c", str(source), "-o", str(out)],
                   check=True, capture_output=True)
    return out


@needs_objects
def test_a_program_that_never_returns_ends_the_trial_naming_program_op_and_instruction(cli, write_trial, trial_dict, tmp_path):
    obj = _compile(Path(__file__).parent / "bpf" / "spin.bpf.c", tmp_path / "spin.bpf.o")
    path = write_trial(trial_dict(flows=[{"cc": "cubic"}, {"cc": f"bpf:{obj}"}]))
    r = cli("run", path, "-o", tmp_path / "out")
    assert r.exit_code == 1, r.output
    assert "Traceback" not in r.output
    assert "spin_cong_avoid" in r.output and "cong_avoid" in r.output and "instruction" in r.output
    assert not (tmp_path / "out").exists()


@needs_objects
def test_sndbuf_expand_runs_once_the_algorithm_is_initialised(tmp_path):
    """tcp_init_buffer_space asks sndbuf_expand after init, before any data: the window the
    program sets there (4, never grown after) is the flow's from the start."""
    obj = _compile(Path(__file__).parent / "bpf" / "sndbuf_cwnd.bpf.c", tmp_path / "sndbuf_cwnd.bpf.o")
    r = run_trial({**SIM_TRIAL, "duration": "2s", "steady": ["0s", "2s"], "flows": [{"cc": f"bpf:{obj}"}]})
    sending = r.flows.filter(pl.col("sent_segs") > 0)  # from the handshake's end
    cwnd = sending["cwnd_pkts"].drop_nans().to_list()
    assert cwnd and set(cwnd) == {4}, sorted(set(cwnd))


@needs_objects
@pytest.mark.parametrize("flow", [{"size": "100KB"}, {}], ids=["sized flow ends", "open flow at the trial's end"])
def test_release_runs_when_the_connection_is_torn_down(cli, write_trial, trial_dict, tmp_path, flow):
    """A release that never returns ends the trial, naming the program and the op: it runs
    when a sized flow's data is all acknowledged, and for a flow still open at the end."""
    obj = _compile(Path(__file__).parent / "bpf" / "release_spin.bpf.c", tmp_path / "release_spin.bpf.o")
    path = write_trial(trial_dict(flows=[{"cc": f"bpf:{obj}", **flow}]))
    r = cli("run", path, "-o", tmp_path / "out")
    assert r.exit_code == 1, r.output
    assert "Traceback" not in r.output
    assert "rspin_release" in r.output and "release" in r.output and "instruction" in r.output
