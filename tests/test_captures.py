"""Packet captures: the simulator writes them, tshark reads them as we do, and analysing them
gives back the simulator's own summary (the round trip of issue 12)."""

from __future__ import annotations

import json
import shutil
import subprocess
import struct
from collections import defaultdict
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from cctestbed import run_trial
from cctestbed.captures import analyze_captures
from cctestbed.config import ConfigError, load_trial

#: Two flows of different algorithms through a shallow queue with random loss: overflow and
#: random drops, SACK recovery, retransmissions, a standing queue.
TRIAL: dict[str, Any] = {
    "name": "cap",
    "duration": "20s",
    "steady": ["5s", "20s"],
    "link": {"capacity": "20Mbit", "rtt": "30ms", "queue": "0.5bdp", "loss": "0.3%"},
    "flows": [{"cc": "cubic"}, {"cc": "bbr", "start": "0.2s"}],
    "capture": {"points": ["senders", "receivers", "ingress", "egress"]},
}
HOSTS = ["snd0.pcap", "rcv0.pcap", "snd1.pcap", "rcv1.pcap"]


@pytest.fixture(scope="module")
def captured(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("cap") / "run"
    run_trial(TRIAL).save(d)
    return d


@pytest.fixture(scope="module")
def analysed(captured: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ana") / "analysed"
    a = analyze_captures([captured / h for h in HOSTS], captured / "rtr-in.pcap", captured / "rtr-out.pcap",
                         trial=load_trial(captured / "trial.toml"))
    a.save(out)
    return out


def _within(a: float, b: float, rel: float) -> bool:
    return abs(a - b) <= rel * abs(b)


def test_round_trip_gives_the_simulators_summary(captured: Path, analysed: Path) -> None:
    sim = json.loads((captured / "summary.json").read_text())
    cap = json.loads((analysed / "summary.json").read_text())
    assert cap["trial"]["backend"] == "capture"
    assert sim["total"]["retrans_pct"] > 0.1, "the trial must retransmit for the check to mean anything"
    for key in ("goodput_bps", "retrans_pct", "utilization"):
        assert _within(cap["total"][key], sim["total"][key], 0.01), key
    assert _within(cap["rtt"]["p50_ms"], sim["rtt"]["p50_ms"], 0.01)
    for fc, fs in zip(cap["flows"], sim["flows"]):
        assert fc["cc"] == fs["cc"]
        for key in ("goodput_bps", "retrans_pct", "rtt_p50_ms"):
            assert _within(fc[key], fs[key], 0.01), (fc["id"], key, fc[key], fs[key])


def test_round_trip_router_queue_within_one_packet(captured: Path, analysed: Path) -> None:
    sim = pl.read_parquet(captured / "router.parquet")
    cap = pl.read_parquet(analysed / "router.parquet")
    assert cap.schema == sim.schema, "one results schema for every backend"
    assert cap["time_s"].to_list() == sim["time_s"].to_list()
    diff = (cap["queue_pkts"].cast(pl.Int64) - sim["queue_pkts"].cast(pl.Int64)).abs()
    assert diff.max() <= 1
    assert sim["queue_pkts"].max() > 5, "a queue must build for the check to mean anything"
    sim_drops = sim["drops_overflow"][-1] + sim["drops_random"][-1]
    assert sim_drops > 10 and abs(cap["drops_overflow"][-1] - sim_drops) <= 2
    assert cap["drops_random"].null_count() == len(cap), "a capture cannot tell why a packet was dropped"


def test_analysed_flows_keep_the_schema_with_nulls_where_a_capture_is_blind(captured: Path, analysed: Path) -> None:
    sim = pl.read_parquet(captured / "flows.parquet")
    cap = pl.read_parquet(analysed / "flows.parquet")
    common = [c for c in sim.columns if not c.startswith("cc.")]
    assert cap.columns == common
    assert {c: cap.schema[c] for c in common} == {c: sim.schema[c] for c in common}
    for c in ("cwnd_pkts", "srtt_ms", "pacing_rate_bps", "lost_segs", "rto_count", "state"):
        assert cap[c].null_count() == len(cap), c
    report = json.loads((analysed / "capture.json").read_text())
    assert [c["sender"] for c in report["connections"]] == ["10.1.0.1:40000", "10.1.0.2:40001"]
    assert report["connections"][1]["sender_capture"].endswith("snd1.pcap")
    assert report["connections"][1]["receiver_capture"].endswith("rcv1.pcap")
    assert (analysed / "trial.png").stat().st_size > 10_000


def test_no_capture_no_files(tmp_path: Path) -> None:
    r = run_trial({**TRIAL, "duration": "1s", "steady": ["0s", "1s"], "capture": False})
    assert r.files == {}
    r = run_trial({**TRIAL, "duration": "1s", "steady": ["0s", "1s"], "capture": True})
    assert sorted(r.files) == sorted(HOSTS)


def test_capture_settings_are_checked() -> None:
    for bad, field in (({"points": ["senders", "router"]}, "capture.points"), ({"snaplen": 64}, "capture.snaplen"),
                       ({"points": ["egress", "egress"]}, "capture.points"), ({"points": []}, "capture.points"),
                       ({"format": "erf"}, "capture.format")):
        with pytest.raises(ConfigError) as e:
            load_trial({**TRIAL, "capture": bad})
        assert any(p.startswith(field) for p in e.value.problems), e.value.problems


def _tshark(args: list[str]) -> str:
    p = subprocess.run(["tshark", *args], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_tshark_reads_every_capture_without_malformed_packets_and_counts_as_we_do(
    captured: Path, analysed: Path
) -> None:
    if shutil.which("tshark") is None:
        pytest.skip("tshark is not installed (make tshark installs Debian's package as root)")
    report = json.loads((analysed / "capture.json").read_text())
    for name in HOSTS + ["rtr-in.pcap", "rtr-out.pcap"]:
        f = captured / name
        assert _tshark(["-r", str(f), "-Y", "_ws.malformed || _ws.expert.severity == error", "-T", "fields",
                        "-e", "frame.number"]).strip() == "", f"{name}: malformed packets"
        counts: dict[frozenset[str], list[int]] = defaultdict(lambda: [0, 0, 0])
        rows = _tshark(["-r", str(f), "-T", "fields", "-E", "separator=,", "-e", "ip.src", "-e", "tcp.srcport",
                        "-e", "ip.dst", "-e", "tcp.dstport", "-e", "frame.len", "-e", "tcp.len"])
        for line in rows.splitlines():
            src, sport, dst, dport, flen, tlen = line.split(",")
            c = counts[frozenset((f"{src}:{sport}", f"{dst}:{dport}"))]
            c[0] += 1
            c[1] += int(flen)
            c[2] += int(tlen)
        ours = {}
        for c in report["connections"]:
            for path, v in c["per_capture"].items():
                if Path(path).name == name:
                    ours[frozenset((c["sender"], c["receiver"]))] = [v["packets"], v["bytes"], v["payload_bytes"]]
        assert dict(counts) == ours, name


def test_pcapng_output_reads_as_pcap(tmp_path: Path) -> None:
    short = {**TRIAL, "duration": "3s", "steady": ["1s", "3s"]}
    ng = run_trial({**short, "capture": {**TRIAL["capture"], "format": "pcapng"}})
    pc = run_trial(short)
    assert sorted(ng.files) == sorted(n.replace(".pcap", ".pcapng") for n in pc.files)
    for r, d in ((ng, tmp_path / "ng"), (pc, tmp_path / "pc")):
        r.save(d)
    ext = lambda d, e: [d / h.replace(".pcap", e) for h in HOSTS]  # noqa: E731
    a = analyze_captures(ext(tmp_path / "pc", ".pcap"), tmp_path / "pc/rtr-in.pcap", tmp_path / "pc/rtr-out.pcap")
    b = analyze_captures(ext(tmp_path / "ng", ".pcapng"), tmp_path / "ng/rtr-in.pcapng", tmp_path / "ng/rtr-out.pcapng")
    assert a.flows.equals(b.flows) and a.router is not None and b.router is not None and a.router.equals(b.router)
    if shutil.which("tshark") is None:
        pytest.skip("tshark is not installed (make tshark installs Debian's package as root)")
    for f in sorted((tmp_path / "ng").glob("*.pcapng")):
        assert _tshark(["-r", str(f), "-Y", "_ws.malformed || _ws.expert.severity == error", "-T", "fields",
                        "-e", "frame.number"]).strip() == "", f"{f.name}: malformed packets"
        # nanosecond timestamps as in the pcap files
        times = [_tshark(["-r", str(x), "-T", "fields", "-e", "frame.time_epoch"]).split()
                 for x in (f, tmp_path / "pc" / f.name.replace(".pcapng", ".pcap"))]
        assert times[0] == times[1] and len(times[0]) > 100


def test_pcapng_reads_as_pcap(captured: Path, tmp_path: Path) -> None:
    if shutil.which("editcap") is None:
        pytest.skip("editcap is not installed (it comes with tshark: make tshark)")
    ng = []
    for h in HOSTS[:2]:
        dst = tmp_path / h.replace(".pcap", ".pcapng")
        subprocess.run(["editcap", "-F", "pcapng", str(captured / h), str(dst)], check=True)
        ng.append(dst)
    a = analyze_captures([captured / h for h in HOSTS[:2]])
    b = analyze_captures(ng)
    assert a.flows.equals(b.flows)


# --- the command line ---------------------------------------------------------------------------


def _pcap_without_tcp(path: Path) -> None:
    """A valid pcap holding one ARP frame."""
    frame = b"\xff" * 6 + b"\x02\x00\x00\x00\x00\x01" + b"\x08\x06" + bytes(28)
    path.write_bytes(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)
                     + struct.pack("<IIII", 0, 0, len(frame), len(frame)) + frame)


@pytest.mark.parametrize(
    "case, message",
    [
        ("missing", "absent.pcap: missing"),
        ("text", "notes.txt: not a pcap or pcapng capture"),
        ("no_tcp", "arp.pcap: no TCP packets in it"),
        ("ingress_alone", "--ingress and --egress go together"),
        ("truncated_header", "short.pcap: not a pcap or pcapng capture"),
    ],
)
def test_bad_captures_exit_2_naming_file_and_reason(cli, tmp_path: Path, captured: Path, case: str, message: str) -> None:
    (tmp_path / "notes.txt").write_text("hello\n")
    _pcap_without_tcp(tmp_path / "arp.pcap")
    (tmp_path / "short.pcap").write_bytes((captured / "snd0.pcap").read_bytes()[:10])
    args = {
        "missing": [tmp_path / "absent.pcap"],
        "text": [tmp_path / "notes.txt"],
        "no_tcp": [captured / "snd0.pcap", tmp_path / "arp.pcap"],
        "ingress_alone": [captured / "snd0.pcap", "--ingress", captured / "rtr-in.pcap"],
        "truncated_header": [tmp_path / "short.pcap"],
    }[case]
    out = tmp_path / "out"
    r = cli("analyze", *args, "-o", out)
    assert r.exit_code == 2
    lines = [ln for ln in r.output.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and message in lines[0], r.output
    assert not out.exists()
    assert not any(p.name.startswith(".out.") for p in tmp_path.iterdir()), "nothing half-written"


def test_cli_analyze_writes_the_results_directory(cli, tmp_path: Path, captured: Path) -> None:
    out = tmp_path / "a"
    r = cli("analyze", captured / "snd0.pcap", captured / "rcv0.pcap", "-o", out, "--steady", "5s", "20s")
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in out.iterdir()) == ["capture.json", "flows.parquet", "summary.json", "trial.png"]
    s = json.loads((out / "summary.json").read_text())
    assert s["trial"]["steady_s"] == [5.0, 20.0] and len(s["flows"]) == 1
    assert s["total"]["utilization"] is None, "no capacity without a trial"
    assert cli("analyze", captured / "snd0.pcap", "-o", out).exit_code == 2, "an existing directory needs --force"
    r = cli("analyze", captured / "snd1.pcap", "-o", out, "--force")
    assert r.exit_code == 0, r.output
    assert json.loads((out / "capture.json").read_text())["connections"][0]["sender"] == "10.1.0.2:40001"


# --- the time-sequence plot ---------------------------------------------------------------------


def test_tseq_trace_holds_every_segment_retransmission_and_drop(captured: Path) -> None:
    from cctestbed import _core
    from cctestbed.tseq import capture_inputs

    inputs, zero = capture_inputs(captured)
    assert zero == 0 and ("ingress" in {p for _, p in inputs})
    sim = pl.read_parquet(captured / "flows.parquet")
    router = pl.read_parquet(captured / "router.parquet")
    for flow in (0, 1):
        tr = _core.tseq(inputs, flow, zero)
        last = sim.filter(pl.col("flow") == flow).tail(1).to_dicts()[0]
        assert len(tr["data_t"]) == last["sent_segs"]
        assert int(tr["data_retrans"].sum()) == last["retrans_segs"]
        assert tr["drops_known"]
        # every segment the router dropped is marked; besides them only what was still on its way
        assert len(tr["drop_t"]) >= 1
        assert (tr["ack"][1:] >= tr["ack"][:-1]).all(), "the cumulative ACK never goes back"
        assert (tr["sack_end"] > tr["sack_start"]).all()
    marked = sum(len(_core.tseq(inputs, f, zero)["drop_t"]) for f in (0, 1))
    dropped = router["drops_overflow"][-1] + router["drops_random"][-1]
    assert dropped <= marked <= dropped + 2 * 30, (marked, dropped)


def test_plot_tseq_command(cli, captured: Path, tmp_path: Path) -> None:
    out = tmp_path / "t.png"
    r = cli("plot", captured, "--kind", "tseq", "--flow", "1", "--from", "1", "--to", "2", "-o", out)
    assert r.exit_code == 0, r.output
    assert out.stat().st_size > 20_000
    from cctestbed.tseq import state_changes

    changes = state_changes(captured, 1, 0.0, 20.0)
    # flow 1 (BBR) starts at 0.2 s: idle, then STARTUP from its first interval, DRAIN, PROBE_BW
    assert [s for _, s in changes[:4]] == ["idle", "STARTUP", "DRAIN", "PROBE_BW"], changes
    assert changes[0][0] == 0.0 and abs(changes[1][0] - 0.2) <= 0.01 + 1e-9  # within one sample interval


@pytest.mark.parametrize(
    "args, message",
    [
        (["--flow", "7"], "no flow 7 in the captures: they hold 2 flow(s), 0 to 1"),
        (["--from", "3", "--to", "2"], "the range is empty"),
        (["--from", "30", "--to", "40"], "flow 0 sent nothing between 30 s and 40 s"),
        (["--kind", "tsq"], "--kind tsq: valid are trial, tseq"),
    ],
)
def test_plot_tseq_refusals(cli, captured: Path, args: list[str], message: str) -> None:
    r = cli("plot", captured, "--kind", "tseq", *args) if "--kind" not in args else cli("plot", captured, *args)
    assert r.exit_code == 2 and message in r.output, r.output


def test_plot_tseq_without_captures(cli, tmp_path: Path) -> None:
    d = tmp_path / "plain"
    run_trial({**TRIAL, "duration": "1s", "steady": ["0s", "1s"], "capture": False}).save(d)
    r = cli("plot", d, "--kind", "tseq")
    assert r.exit_code == 2 and "no packet captures in it; run the trial with capture = true" in r.output
    assert not list(d.glob("tseq*"))


def test_captures_too_large_for_memory_are_refused_before_running(cli, write_trial, tmp_path: Path) -> None:
    big = {**TRIAL, "duration": "60s", "steady": ["0s", "60s"], "link": {**TRIAL["link"], "capacity": "10Gbit"}}
    path = write_trial(big)
    r = cli("run", path, "-o", tmp_path / "out")
    assert r.exit_code == 2 and "capture: about" in r.output and "capture fewer points" in r.output, r.output
    assert not (tmp_path / "out").exists()
    small = {**big, "capture": {"points": ["senders"], "snaplen": 96}, "duration": "1s", "steady": ["0s", "1s"]}
    assert load_trial(small) is not None, "a short capture of one point fits"


def test_tseq_of_an_analysed_directory_from_anywhere(cli, captured: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(captured)
    out = tmp_path / "ana"
    assert cli("analyze", "snd1.pcap", "rcv1.pcap", "-o", out).exit_code == 0
    monkeypatch.chdir(tmp_path)
    r = cli("plot", out, "--kind", "tseq", "--from", "2", "--to", "3")
    assert r.exit_code == 0, r.output
    assert (out / "tseq-flow0.png").stat().st_size > 20_000


def test_late_flows_keep_the_simulators_time_axis(tmp_path: Path) -> None:
    """Flows that start after 0: with its trial, a simulator capture is read from the trial's
    time 0, so the series line up sample by sample."""
    late = {**TRIAL, "duration": "4s", "steady": ["1s", "4s"], "flows": [{"cc": "cubic", "start": "0.5s"}],
            "capture": True}
    r = run_trial(late)
    r.save(tmp_path / "late")
    a = analyze_captures([tmp_path / "late/snd0.pcap", tmp_path / "late/rcv0.pcap"], trial=r.trial)
    assert a.report["time_zero_ns"] == 0
    sim = r.flows.select("time_s", "delivered_bytes")
    assert a.flows.select("time_s", "delivered_bytes").equals(sim)
    b = analyze_captures([tmp_path / "late/snd0.pcap", tmp_path / "late/rcv0.pcap"])
    assert b.report["time_zero_ns"] == 500_000_000, "without the trial, the first packet"


def test_a_grid_too_fine_for_memory_is_refused(captured: Path) -> None:
    from cctestbed.captures import CaptureError

    with pytest.raises(CaptureError, match=r"the captures end 20 s after time zero: .* samples of 0.00001 ms per flow; give a longer interval"):
        analyze_captures([captured / "snd0.pcap"], interval_ns=10)
