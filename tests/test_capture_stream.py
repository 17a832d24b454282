"""``analyze`` streams its captures (issue 29, items 6 and 22): memory is bounded by the flows'
state and the output series, not the files' size; the series' rows are bounded before they are
built; and Ctrl-C while the core reads a large capture is exit 130 with nothing written."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cctestbed import run_trial

#: One CUBIC flow at 1 Gbit/s, captured at its sender and receiver: about 10 MB of capture a second.
BIG = {
    "name": "big",
    "link": {"capacity": "1Gbit", "rtt": "10ms", "queue": "1bdp"},
    "flows": [{"cc": "cubic"}],
    "capture": {"points": ["senders", "receivers"]},
}


def _captured(root: Path, seconds: int) -> Path:
    d = root / f"big{seconds}"
    run_trial({**BIG, "duration": f"{seconds}s", "steady": ["0s", f"{seconds}s"]}).save(d)
    return d


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _captured(tmp_path_factory.mktemp("cap"), 1)


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _captured(tmp_path_factory.mktemp("cap"), 8)


def _size(d: Path) -> int:
    return sum(p.stat().st_size for p in d.glob("*.pcap"))


#: The peak resident memory of this process (VmHWM: getrusage's maximum would carry the parent's
#: over exec).
PEAK = """
import sys
from cctestbed import _core
_core.analyze([(p, "host") for p in sys.argv[1:]], 10_000_000, None)
hwm = [x for x in open("/proc/self/status").read().splitlines() if x.startswith("VmHWM:")][0]
print(int(hwm.split()[1]) * 1024)
"""


def _peak_rss(d: Path) -> int:
    """Peak resident memory of a fresh process that analyses ``d``'s captures in the core."""
    r = subprocess.run([sys.executable, "-c", PEAK, str(d / "snd0.pcap"), str(d / "rcv0.pcap")],
                       capture_output=True, text=True, timeout=300, check=True)
    return int(r.stdout.split()[-1])


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="reads VmHWM from /proc")
def test_memory_does_not_grow_with_the_captures_size(small: Path, big: Path) -> None:
    grown = _size(big) - _size(small)
    assert grown > 100e6, "the big captures are more than 100 MB larger"
    more = _peak_rss(big) - _peak_rss(small)
    # Held whole, a capture took about 1.7 times its size; streamed, 8 times the packets cost
    # only the longer output series (800 rows).
    assert more < 0.05 * grown, f"{more / 1e6:.0f} MB more for {grown / 1e6:.0f} MB more of captures"


def test_a_fine_interval_is_refused_before_it_runs_naming_what_fits(cli, big: Path, tmp_path: Path) -> None:
    t0 = time.monotonic()
    r = cli("analyze", big / "snd0.pcap", big / "rcv0.pcap", "--interval", "1us", "-o", tmp_path / "out")
    assert r.exit_code == 2, r.output
    text = " ".join(r.output.split())
    assert re.search(r"the captures end 8 s after time zero: 79\d{5} rows \(1 flow\(s\)\) are more than the limit of "
                     r"4000000 \(about 2 GB of memory\): 79\d{5} samples of 0.001 ms per flow; give a longer interval: "
                     r"--interval 2us or longer fits; nothing was written", text), text
    assert not (tmp_path / "out").exists()
    assert time.monotonic() - t0 < 30


def _holds_open(pid: int, path: Path) -> bool:
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == str(path):
                return True
        except OSError:
            pass
    return False


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to see the core reading")
def test_ctrl_c_while_the_core_reads_a_large_capture(big: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    # each capture given four times: seconds of reading in the core, to be interrupted in
    caps = [str(big / "snd0.pcap"), str(big / "rcv0.pcap")] * 4
    p = subprocess.Popen([sys.executable, "-m", "cctestbed", "analyze", *caps, "-o", str(out)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 60
        # the core holds a capture open while it reads it (the CLI's header check closes at once)
        while not (_holds_open(p.pid, big / "snd0.pcap") or _holds_open(p.pid, big / "rcv0.pcap")):
            assert p.poll() is None and time.monotonic() < deadline, "the analysis never started"
            time.sleep(0.01)
        time.sleep(0.2)
        assert p.poll() is None, "the analysis ended before it could be interrupted"
        sent = time.monotonic()
        p.send_signal(signal.SIGINT)
        stdout, stderr = p.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    text = stdout + stderr
    assert p.returncode == 130, text
    assert "Traceback" not in text and "panic" not in text.lower() and "capsule" not in text, text
    assert "interrupted" in stderr, text
    assert took < 2, f"stopped {took:.1f} s after Ctrl-C"
    assert not out.exists()
    assert sorted(x.name for x in tmp_path.iterdir()) == [], "nothing written beside the output"
