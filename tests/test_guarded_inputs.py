"""Every input is read through one guarded reader (issue 29, items 5, 8, 9, 11, 13, 17, 20):
FIFOs, devices, directories and symlink loops are refused by name without being opened for
reading, sizes are checked before reading, decoding errors name the file and line, and analyze
writes null, not NaN, for what a capture alone cannot give."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from trial_helpers import BASE_TRIAL, toml_of

#: Commands that could hang on a FIFO or read /dev/zero without end run in a process of their own,
#: with a time limit and a memory limit, so a regression fails the test instead of hanging the
#: suite or taking the host's memory.
LIMIT_S = 30
MEMORY_LIMIT = 4 << 30


def _limit_memory() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def _run(tmp_path: Path, *args: Any) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "cctestbed", *map(str, args)], capture_output=True, text=True,
                          cwd=tmp_path, timeout=LIMIT_S, env=env, preexec_fn=_limit_memory)


def _one_error(r: Any, *fragments: str) -> str:
    """The run ended with exit 2 and one ``error: ...`` line holding every fragment, no traceback."""
    text = r.output if hasattr(r, "output") else r.stdout + r.stderr
    code = r.exit_code if hasattr(r, "exit_code") else r.returncode
    assert code == 2, text
    assert "Traceback" not in text and "literal[" not in text, text
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    assert lines and lines[0].startswith("error:"), text
    joined = " ".join(lines)
    for f in fragments:
        assert f in joined, (f, text)
    return joined


def _trial(tmp_path: Path, name: str = "t.toml", **link: Any) -> Path:
    d = copy.deepcopy(BASE_TRIAL)
    d["duration"] = "1s"
    d["link"].update(link)
    p = tmp_path / name
    p.write_text(toml_of(d))
    return p


# --- items 11 and 17: trial files that are not regular files --------------------------------------


@pytest.mark.parametrize("command", ["validate", "run", "sweep"])
def test_a_fifo_as_trial_or_sweep_file_is_refused_at_once(tmp_path: Path, command: str) -> None:
    fifo = tmp_path / "t.toml"
    os.mkfifo(fifo)
    extra = ["-o", tmp_path / "out"] if command != "validate" else []
    r = _run(tmp_path, command, fifo, *extra)
    _one_error(r, "t.toml", "FIFO")
    assert not (tmp_path / "out").exists()


def test_validate_dev_zero_is_refused_without_reading_it(tmp_path: Path) -> None:
    r = _run(tmp_path, "validate", "/dev/zero")
    _one_error(r, "/dev/zero", "character device")


def test_a_directory_as_trial_file_is_refused_by_name(cli, tmp_path: Path) -> None:
    (tmp_path / "d.toml").mkdir()
    _one_error(cli("validate", tmp_path / "d.toml"), "d.toml", "is a directory")


def test_a_symlink_loop_as_trial_file_is_refused_by_name(cli, tmp_path: Path) -> None:
    (tmp_path / "loop.toml").symlink_to("loop.toml")
    _one_error(cli("validate", tmp_path / "loop.toml"), "loop.toml", "symlink loop")


def test_a_trial_file_past_the_size_limit_is_refused_before_reading(cli, tmp_path: Path) -> None:
    from cctestbed.inputs import LIMITS

    p = tmp_path / "big.toml"
    with open(p, "wb") as f:
        f.truncate(LIMITS["trial file"] + 1)  # sparse: no time or disk spent on it
    _one_error(cli("validate", p), "big.toml", "larger than 16 MB")


# --- item 20: the messages ------------------------------------------------------------------------


def test_a_utf8_byte_order_mark_is_accepted(cli, tmp_path: Path) -> None:
    p = _trial(tmp_path)
    p.write_bytes(b"\xef\xbb\xbf" + p.read_bytes())
    r = cli("validate", p)
    assert r.exit_code == 0, r.output


def test_a_utf16_trial_file_is_named_as_such(cli, tmp_path: Path) -> None:
    p = _trial(tmp_path)
    p.write_bytes(p.read_text().encode("utf-16"))  # with its byte-order mark, as Windows writes it
    _one_error(cli("validate", p), "t.toml", "UTF-16 byte-order mark", "UTF-8")


def test_ecn_yes_names_the_valid_values_in_plain_words(cli, tmp_path: Path) -> None:
    d = copy.deepcopy(BASE_TRIAL)
    d["flows"][0]["ecn"] = "yes"
    p = tmp_path / "e.toml"
    p.write_text(toml_of(d))
    r = cli("validate", p)
    text = _one_error(r, "flows[0].ecn: 'yes':", "true", "false", '"l4s"')
    assert text.count("flows[0].ecn") == 1, "one problem for one field"


def test_a_trace_line_that_is_not_a_number_names_file_and_line(cli, tmp_path: Path) -> None:
    (tmp_path / "bad.trace").write_text("1\n2\nabc\n")
    _one_error(cli("validate", _trial(tmp_path, trace="bad.trace")), "bad.trace: line 3: 'abc'")


def test_a_trace_byte_that_is_not_utf8_names_file_and_line(cli, tmp_path: Path) -> None:
    (tmp_path / "bad.trace").write_bytes(b"1\n2\n3\xff\n")
    _one_error(cli("validate", _trial(tmp_path, trace="bad.trace")), "bad.trace: line 3: not UTF-8")


def test_a_cdf_byte_that_is_not_utf8_names_file_and_line(cli, tmp_path: Path) -> None:
    (tmp_path / "s.cdf").write_bytes(b"0 0\n100 0.5\n\xe9200 1\n")
    d = copy.deepcopy(BASE_TRIAL)
    d["flows"] = [{"cc": "cubic", "size": {"dist": "cdf", "file": "s.cdf"}, "arrivals": {"model": "poisson", "rate": 10.0}}]
    p = tmp_path / "w.toml"
    p.write_text(toml_of(d))
    _one_error(cli("validate", p), "s.cdf: line 3: not UTF-8")


# --- item 8, and traces and CDFs that are not regular files -----------------------------------------


@pytest.fixture
def loop(tmp_path: Path) -> Path:
    p = tmp_path / "loop.trace"
    p.symlink_to("loop.trace")
    return p


def test_a_trace_that_is_a_symlink_loop_is_refused_by_validate(cli, tmp_path: Path, loop: Path) -> None:
    _one_error(cli("validate", _trial(tmp_path, trace="loop.trace")), "loop.trace", "symlink loop")


def test_a_trace_that_is_a_symlink_loop_is_refused_by_run(cli, tmp_path: Path, loop: Path) -> None:
    _one_error(cli("run", _trial(tmp_path, trace="loop.trace"), "-o", tmp_path / "out"), "loop.trace",
               "symlink loop")
    assert not (tmp_path / "out").exists()


def test_a_trace_that_is_a_symlink_loop_is_refused_as_a_sweep_axis(cli, tmp_path: Path, loop: Path) -> None:
    (tmp_path / "ok.trace").write_text("1\n2\n")
    base = copy.deepcopy(BASE_TRIAL)
    base["duration"] = "1s"
    sweep = {"name": "s", "base": base, "axes": {"link.trace": ["ok.trace", "loop.trace"]}}
    p = tmp_path / "s.json"
    p.write_text(json.dumps(sweep))
    _one_error(cli("sweep", p, "-o", tmp_path / "out"), "loop.trace", "symlink loop")
    assert not (tmp_path / "out").exists()


def test_a_fifo_trace_is_refused_at_once(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "f.trace")
    _one_error(_run(tmp_path, "validate", _trial(tmp_path, trace="f.trace")), "f.trace", "FIFO")


def test_a_device_trace_is_refused(cli, tmp_path: Path) -> None:
    _one_error(cli("validate", _trial(tmp_path, trace="/dev/zero")), "/dev/zero", "character device")


def test_a_trace_past_the_size_limit_is_refused_before_reading(cli, tmp_path: Path) -> None:
    from cctestbed.inputs import LIMITS

    with open(tmp_path / "big.trace", "wb") as f:
        f.truncate(LIMITS["trace"] + 1)
    _one_error(cli("validate", _trial(tmp_path, trace="big.trace")), "big.trace", "larger than 128 MB")


def test_a_fifo_cdf_is_refused_at_once(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "s.cdf")
    d = copy.deepcopy(BASE_TRIAL)
    d["flows"] = [{"cc": "cubic", "size": {"dist": "cdf", "file": "s.cdf"}, "arrivals": {"model": "poisson", "rate": 10.0}}]
    p = tmp_path / "w.toml"
    p.write_text(toml_of(d))
    _one_error(_run(tmp_path, "validate", p), "s.cdf", "FIFO")


# --- items 5, 13 and 17: captures ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def captured(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from cctestbed import run_trial

    d = tmp_path_factory.mktemp("cap") / "run"
    run_trial({
        "name": "cap", "duration": "3s",
        "link": {"capacity": "20Mbit", "rtt": "30ms", "queue": "0.5bdp"},
        "flows": [{"cc": "cubic"}],
        "capture": {"points": ["senders", "receivers", "ingress", "egress"]},
    }).save(d)
    return d


def _strict_json(path: Path) -> Any:
    def no_constant(name: str) -> Any:
        raise AssertionError(f"{path} holds {name}")

    return json.loads(path.read_text(), parse_constant=no_constant)


@pytest.mark.parametrize("capture", ["rcv0.pcap", "rtr-in.pcap", "rtr-out.pcap"])
def test_analyze_of_a_capture_without_the_sender_writes_null_not_nan(cli, tmp_path: Path, captured: Path,
                                                                     capture: str) -> None:
    out = tmp_path / "a"
    r = cli("analyze", captured / capture, "-o", out)
    assert r.exit_code == 0, r.output
    s = _strict_json(out / "summary.json")
    assert s["trial"]["rtprop_ms"] is None, "no RTT sample: no RTprop"
    assert set(s) >= {"trial", "total", "flows", "queue", "rtt"}, "the schema is kept"
    assert s["rtt"]["p50_ms"] is None


def _receiver_side_pcap(path: Path, ports: int, ip_total_length: int = 0) -> None:
    """Data packets only (no ACK from the receiver), one per source port from 10000, each with
    100 payload bytes; ``ip_total_length`` when given is written in place of the true one."""
    import struct

    out = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)
    for i in range(max(ports, 5)):
        payload = b"x" * 100
        tcp = struct.pack("!HHIIBBHHH", 10000 + i % ports, 5201, 1, 0, 5 << 4, 0x18, 65535, 0, 0)
        ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, ip_total_length or 20 + len(tcp) + len(payload), 0, 0, 64, 6, 0,
                         bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2]))
        frame = b"\x00" * 12 + b"\x08\x00" + ip + tcp + payload
        out += struct.pack("<IIII", 1, i * 1000, len(frame), len(frame)) + frame
    path.write_bytes(out)


@pytest.mark.parametrize("ports, ip_total_length", [(200, 0), (1, 0xFFFF)], ids=["new-port-each-packet", "ip-len-ffff"])
def test_analyze_of_hostile_receiver_side_captures_writes_null_not_nan(cli, tmp_path: Path, ports: int,
                                                                         ip_total_length: int) -> None:
    _receiver_side_pcap(tmp_path / "c.pcap", ports, ip_total_length)
    r = cli("analyze", tmp_path / "c.pcap", "-o", tmp_path / "a")
    assert r.exit_code == 0, r.output
    assert _strict_json(tmp_path / "a" / "summary.json")["trial"]["rtprop_ms"] is None
    _strict_json(tmp_path / "a" / "capture.json")


def test_analyze_of_a_sender_capture_still_gives_its_rtprop(cli, tmp_path: Path, captured: Path) -> None:
    out = tmp_path / "a"
    assert cli("analyze", captured / "snd0.pcap", "-o", out).exit_code == 0
    assert _strict_json(out / "summary.json")["trial"]["rtprop_ms"] >= 30


def test_analyze_refuses_a_fifo_capture_at_once(tmp_path: Path, captured: Path) -> None:
    os.mkfifo(tmp_path / "live.pcap")
    r = _run(tmp_path, "analyze", tmp_path / "live.pcap", "-o", tmp_path / "out")
    _one_error(r, "live.pcap", "FIFO")
    assert not (tmp_path / "out").exists()


def test_analyze_refuses_a_fifo_as_ingress(tmp_path: Path, captured: Path) -> None:
    os.mkfifo(tmp_path / "in.pcap")
    r = _run(tmp_path, "analyze", captured / "snd0.pcap", "--ingress", tmp_path / "in.pcap",
             "--egress", captured / "rtr-out.pcap", "-o", tmp_path / "out")
    _one_error(r, "in.pcap", "FIFO")


def test_analyze_refuses_dev_zero_at_once(tmp_path: Path) -> None:
    r = _run(tmp_path, "analyze", "/dev/zero", "-o", tmp_path / "out")
    _one_error(r, "/dev/zero", "character device")
    assert not (tmp_path / "out").exists()


def test_analyze_refuses_a_file_that_is_not_a_capture_at_its_header(cli, tmp_path: Path) -> None:
    p = tmp_path / "zeros.pcap"
    with open(p, "wb") as f:
        f.truncate(64 << 20)  # read no further than its first bytes
    _one_error(cli("analyze", p, "-o", tmp_path / "out"), "zeros.pcap", "not a pcap or pcapng capture",
               "00 00 00 00")


def test_analyze_refuses_a_capture_that_is_a_symlink_loop(cli, tmp_path: Path) -> None:
    (tmp_path / "l.pcap").symlink_to("l.pcap")
    _one_error(cli("analyze", tmp_path / "l.pcap", "-o", tmp_path / "out", "--force"), "l.pcap", "symlink loop")


# --- item 9: compare on a summary.json of the wrong types ---------------------------------------------


@pytest.fixture(scope="module")
def two_results(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    from cctestbed import run_trial

    root = tmp_path_factory.mktemp("cmp")
    d = copy.deepcopy(BASE_TRIAL)
    d["duration"] = "1s"
    res = run_trial(d)
    res.save(root / "a")
    res.save(root / "b")
    return root / "a", root / "b"


@pytest.mark.parametrize(
    "change, field",
    [
        (lambda s: s.update(total=None), "total"),
        (lambda s: s.update(total="x"), "total"),
        (lambda s: s["total"].update(utilization="x"), "total.utilization"),
        (lambda s: s["total"].update(goodput_bps=[1]), "total.goodput_bps"),
        (lambda s: s.update(flows=None), "flows"),
        (lambda s: s["flows"][0].update(goodput_bps="fast"), "flows[0].goodput_bps"),
        (lambda s: s.update(groups=[1]), "groups"),
        (lambda s: s["rtt"].update(p50_ms=True), "rtt.p50_ms"),
        (lambda s: s.pop("queue"), "queue"),
    ],
)
def test_compare_names_the_file_and_field_of_a_summary_of_wrong_types(cli, tmp_path: Path, two_results, change,
                                                                      field: str) -> None:
    import shutil

    a, b = two_results
    bad = tmp_path / "bad"
    shutil.copytree(b, bad)
    s = json.loads((bad / "summary.json").read_text())
    change(s)
    (bad / "summary.json").write_text(json.dumps(s))
    before = sorted(p.name for p in bad.iterdir())
    r = cli("compare", a, bad, "-o", tmp_path / "c.png")
    text = _one_error(r, str(bad / "summary.json"), field)
    assert len(text.splitlines()) == 1
    assert not (tmp_path / "c.png").exists() and sorted(p.name for p in bad.iterdir()) == before


def test_compare_refuses_a_summary_that_is_a_fifo(tmp_path: Path, two_results) -> None:
    import shutil

    a, b = two_results
    bad = tmp_path / "bad"
    shutil.copytree(b, bad)
    (bad / "summary.json").unlink()
    os.mkfifo(bad / "summary.json")
    _one_error(_run(tmp_path, "compare", a, bad, "-o", tmp_path / "c.png"), "summary.json", "FIFO")
