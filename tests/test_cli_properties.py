"""The command line under generated hostile inputs: bad trial fields and values, huge numbers,
odd output paths, damaged files, FIFOs and devices. Whatever the input, a command ends with exit
0, 1, 2 or 130, prints no traceback, and touches nothing outside its output (a snapshot of the
whole sandbox before and after, the output and the folders made for it aside).

Commands run in process (``CliRunner``), except those given a FIFO or a device, which run as
subprocesses with a time limit, so that a hang fails the test instead of stopping it. Kept to
about half a minute: a few dozen examples per property."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from trial_helpers import toml_of

CLI = Path(sys.executable).with_name("cctestbed")
EXITS = {0, 1, 2, 130}
SETTINGS = dict(deadline=None, suppress_health_check=list(HealthCheck), derandomize=True, database=None)

BASE: dict[str, Any] = {
    "name": "t",
    "duration": "200ms",
    "sample_interval": "10ms",
    "link": {"capacity": "10Mbit", "rtt": "20ms", "queue": "2bdp"},
    "flows": [{"cc": "cubic"}, {"kind": "udp", "rate": "1Mbit", "on": "20ms", "off": "20ms"}],
}

# --- the sandbox ------------------------------------------------------------------------------


def snapshot(root: Path) -> dict[str, Any]:
    """Every entry under ``root``: its kind and contents (a file's hash, a link's target)."""
    out: dict[str, Any] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            st_ = os.lstat(p)
            if stat.S_ISLNK(st_.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISDIR(st_.st_mode):
                out[rel] = ("dir",)
            elif stat.S_ISREG(st_.st_mode):
                out[rel] = ("file", hashlib.sha256(p.read_bytes()).hexdigest())
            else:
                out[rel] = ("other", stat.S_IFMT(st_.st_mode))
    return out


def untouched_outside(root: Path, before: dict[str, Any], output: Optional[Path]) -> None:
    """Nothing under ``root`` changed but ``output`` (what is in it, and the folders made on the
    way to it, which did not exist before)."""
    after = snapshot(root)
    own: set[str] = set()
    if output is not None:
        out = Path(os.path.abspath(output))
        for q in (out, *out.parents):
            try:
                rel = str(q.relative_to(root))
            except ValueError:
                break
            if q != out and rel in before:
                break
            own.add(rel)

    def mine(rel: str) -> bool:
        return any(rel == o or rel.startswith(o + os.sep) for o in own)

    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k) and not mine(k))
    assert not changed, f"touched outside the output {output}: {changed}"


def make_sandbox(root: Path, result: Path) -> None:
    """Inputs and bystanders: a trial, a user's files and folders, a FIFO, odd links, a result."""
    (root / "inputs").mkdir()
    (root / "inputs" / "trial.toml").write_text(toml_of(BASE))
    (root / "mine").mkdir()
    (root / "mine" / "notes.txt").write_text("a user's file\n")
    (root / "file.txt").write_text("plain\n")
    os.mkfifo(root / "fifo")
    (root / "dangling").symlink_to(root / "nowhere")
    (root / "loop").symlink_to(root / "loop")
    (root / "to-mine").symlink_to(root / "mine")
    shutil.copytree(result, root / "res")


@pytest.fixture(scope="module")
def result(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("prop")
    (d / "t.toml").write_text(toml_of(BASE))
    subprocess.run([CLI, "run", d / "t.toml", "-o", d / "res"], check=True, capture_output=True, timeout=120)
    return d / "res"


def invoke(args: list[Any], cwd: Path, subprocess_: bool) -> tuple[int, str]:
    """Run ``cctestbed ARGS`` in ``cwd``: (exit code, everything printed)."""
    args = [str(a) for a in args]
    if subprocess_:
        try:
            p = subprocess.run([CLI, *args], cwd=cwd, capture_output=True, timeout=30,
                               env={**os.environ, "COLUMNS": "200"})
        except subprocess.TimeoutExpired:
            raise AssertionError(f"cctestbed {' '.join(args)} did not end within 30 s") from None
        return p.returncode, (p.stdout + p.stderr).decode(errors="replace")
    from typer.testing import CliRunner

    from cctestbed.cli import app

    old = os.getcwd()
    os.chdir(cwd)
    try:
        r = CliRunner().invoke(app, args)
    finally:
        os.chdir(old)
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        import traceback

        tb = "".join(traceback.format_exception(r.exception))
        raise AssertionError(f"cctestbed {' '.join(args)} raised:\n{tb}\n{r.output}")
    return r.exit_code, r.output


def check(code: int, output: str, args: list[Any]) -> None:
    assert code in EXITS, f"exit {code} from cctestbed {' '.join(map(str, args))}:\n{output}"
    for sign in ("Traceback", "panicked", "Exception ignored", ".tmp-", ".new-"):  # nor a temporary's name
        assert sign not in output, f"cctestbed {' '.join(map(str, args))}:\n{output}"


# --- generated inputs -----------------------------------------------------------------------------

FIELDS = ["duration", "sample_interval", "seed", "mtu", "mss", "steady", "link.capacity", "link.rtt",
          "link.queue", "link.loss", "link.aqm", "link.jitter", "link.trace", "flows", "flows.0.cc",
          "flows.0.count", "flows.0.size", "flows.0.arrivals", "flows.0.ecn", "flows.0.initial_cwnd",
          "flows.1.rate", "flows.1.on", "flows.1.off", "flows.1.kind", "flows.1.interval",
          "flows.1.packet_size", "name", "capture"]
NUMBERS = st.one_of(
    st.integers(min_value=-(10**30), max_value=10**30),
    st.sampled_from([2**64, 2**63, -(2**63), 10**400, 0, -1]),
    st.floats(allow_nan=False, allow_infinity=False),
)
QUANTITIES = st.builds(
    lambda n, u: f"{n}{u}",
    st.sampled_from(["0", "-1", "1e30", "1e-30", "1", "0.0000001", "1000000", "1e400", "nan", "inf", "0x10", ""]),
    st.sampled_from(["", "ns", "s", "ms", "Gbit", "bit", "bdp", "pkts", "B", "GB", "%", " Mbit", "xyz"]),
)
VALUES = st.one_of(
    NUMBERS, QUANTITIES,
    st.sampled_from([None, True, "yes", "", "\x00", "\ufeff1s", "é" * 300, "a" * 5000, [], {}, ["1s"] * 3,
                     {"model": "poisson"}, {"kind": "nope"}, "/dev/zero", "fifo", "loop", "dangling", "file.txt"]),
    st.lists(st.integers(min_value=-5, max_value=10**20), max_size=4),
    st.text(max_size=12),
)


def set_path(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    d = copy.deepcopy(doc)
    cur: Any = d
    keys = path.split(".")
    for k in keys[:-1]:
        cur = cur[int(k)] if k.isdigit() else cur[k]
    last = keys[-1]
    if last.isdigit():
        cur[int(last)] = value
    else:
        cur[last] = value
    return d


def packets(doc: dict[str, Any]) -> Optional[float]:
    """The packets a trial makes the simulator carry, worked out here on its own (not by the
    project's cost model): TCP at the link's capacity, udp at its rate while on, one step per
    on/off period, a probe and its echo per ping interval. None if the trial is not valid even
    when large."""
    from cctestbed.config import ConfigError, parse_trial

    try:
        t = parse_trial(doc, allow_large=True)
    except ConfigError:
        return None
    top = max([t.link.capacity, *(c.capacity for c in t.link.schedule)])
    n = t.duration * top / (8e9 * t.mtu)
    for g in t.flows:
        span = g.count * (t.duration - g.start) / 1e9
        if g.flow_kind == "udp":
            duty = g.on / (g.on + g.off) if g.on and g.off else 1.0
            n += span * g.rate * duty / (8 * g.datagram_size(t.mtu))
            n += span * 1e9 / (g.on + g.off) if g.on and g.off else 0
        elif g.flow_kind == "ping":
            n += 2 * span * 1e9 / (g.interval or 10**7)
    return n


PING_1NS = [{"cc": "cubic"}, {"kind": "ping", "interval": "1ns"}]


@settings(max_examples=40, **SETTINGS)
@given(field=st.sampled_from(FIELDS), value=VALUES, json_file=st.booleans(), command=st.sampled_from(["validate", "run"]))
@example(field="flows.1.on", value="1ns", json_file=False, command="run")
@example(field="flows.1.rate", value="1000000Gbit", json_file=False, command="run")
@example(field="flows", value=PING_1NS, json_file=True, command="run")
@example(field="link.capacity", value="1000Gbit", json_file=False, command="run")
def test_bad_trial_fields_and_values(result, field, value, json_file, command):
    """A trial the simulator would carry more than 10^9 packets for is refused before it runs
    (worked out here independently); any other is refused, or runs and writes only its output."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_sandbox(root, result)
        doc = set_path(BASE, field, value)
        path = root / "inputs" / ("t.json" if json_file else "t.toml")
        try:
            path.write_text(json.dumps(doc) if json_file else toml_of(doc))
        except (ValueError, TypeError, OverflowError):
            path.write_text(json.dumps(doc, default=str))
        n = packets(doc)
        if n is not None and n > 200_000:
            command = "validate"  # a large trial is not run here; validate must refuse the largest
        out = root / "out"
        args = [command, path] + (["-o", out] if command == "run" else [])
        before = snapshot(root)
        code, text = invoke(args, root, subprocess_=False)
        check(code, text, args)
        if n is not None and n > 1.01e9:
            assert code == 2 and "--allow-large" in text, f"about {n:.3g} packets, not refused:\n{text}"
        untouched_outside(root, before, out if command == "run" else None)


ODD_OUTPUTS = ["out", "mine", "mine/new/deeper", "file.txt", "file.txt/sub", "fifo", "dangling", "dangling/sub",
               "loop", "to-mine", ".", "..", "res", "res/inner", "a" * 300, "b" * 230, "mine/" + "c" * 256,
               "/proc/x", "/dev/null", "", " ", "-o", "out\nname", "out/../file.txt"]


@settings(max_examples=30, **SETTINGS)
@given(dest=st.sampled_from(ODD_OUTPUTS), force=st.booleans(),
       command=st.sampled_from(["run", "analyze", "plot", "compare", "report"]))
def test_odd_output_paths(result, dest, force, command):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_sandbox(root, result)
        out = dest if dest.startswith("/") else str(root / dest) if dest else dest
        if command == "run":
            args = ["run", root / "inputs" / "trial.toml", "-o", out]
        elif command == "analyze":
            args = ["analyze", root / "file.txt", "-o", out]
        elif command == "plot":
            args = ["plot", root / "res", "-o", out + ".png" if dest not in ("", "/dev/null") else out]
        elif command == "compare":
            args = ["compare", root / "res", root / "res", "-o", out + ".svg" if dest else out]
        else:
            args = ["report", root / "res", "-o", out + ".html" if dest else out]
        if force and command in ("run", "analyze"):
            args.append("--force")
        before = snapshot(root)
        code, text = invoke(args, root, subprocess_=dest in ("fifo",))
        check(code, text, args)
        written = args[args.index("-o") + 1]
        untouched_outside(root, before, Path(written) if code == 0 and str(written).strip() else None)


DAMAGE = st.sampled_from(["truncate", "garbage", "empty", "nul", "wrong-types", "fifo", "directory", "loop",
                          "huge-number", "bom", "latin1"])


def damage(path: Path, how: str) -> None:
    """Spoil the file at ``path`` in the way named."""
    if how in ("fifo", "directory", "loop"):
        path.unlink()
        if how == "fifo":
            os.mkfifo(path)
        elif how == "directory":
            path.mkdir()
        else:
            path.symlink_to(path)
        return
    data = path.read_bytes()
    if how == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif how == "garbage":
        path.write_bytes(bytes(range(256)) * 4)
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "nul":
        path.write_bytes(b"\x00" * 64)
    elif how == "bom":
        path.write_bytes(b"\xef\xbb\xbf" + data)
    elif how == "latin1":
        path.write_bytes(data.replace(b"t", "\xe9".encode("latin-1"), 3))
    elif how == "wrong-types" and path.suffix == ".json":
        doc = json.loads(data)
        for k in list(doc)[:3]:
            doc[k] = None if isinstance(doc[k], (int, float)) else "x"
        path.write_text(json.dumps(doc))
    elif how == "huge-number":
        path.write_bytes(data.replace(b"1", b"9" * 400, 1))


@settings(max_examples=30, **SETTINGS)
@given(target=st.sampled_from(["summary.json", "trial.toml", "flows.parquet", "router.parquet", "inputs/trial.toml"]),
       how=DAMAGE, command=st.sampled_from(["plot", "compare", "report", "validate", "run", "analyze"]))
def test_damaged_files_fifos_and_devices(result, target, how, command):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_sandbox(root, result)
        victim = root / target if target.startswith("inputs/") else root / "res" / target
        damage(victim, how)
        out = root / "out"
        trial = root / "inputs" / "trial.toml" if target.startswith("inputs/") else root / "res" / "trial.toml"
        args: list[Any] = {
            "plot": ["plot", root / "res", "-o", root / "out.png"],
            "compare": ["compare", root / "res", root / "res", "-o", root / "out.png"],
            "report": ["report", root / "res", "-o", root / "out.html"],
            "validate": ["validate", trial],
            "run": ["run", trial, "-o", out],
            "analyze": ["analyze", victim, "-o", out],
        }[command]
        written = Path(args[args.index("-o") + 1]) if "-o" in args else None
        before = snapshot(root)
        code, text = invoke(args, root, subprocess_=how == "fifo")
        check(code, text, args)
        untouched_outside(root, before, written)


@pytest.mark.parametrize("device, command", [("/dev/zero", "validate"), ("/dev/urandom", "analyze"),
                                             ("/dev/zero", "compare"), ("/dev/null", "validate")])
def test_devices_as_inputs(tmp_path, device, command):
    args = {"validate": ["validate", device], "analyze": ["analyze", device, "-o", tmp_path / "o"],
            "plot": ["plot", device], "compare": ["compare", device, device]}[command]
    before = snapshot(tmp_path)
    code, text = invoke(args, tmp_path, subprocess_=True)
    check(code, text, args)
    assert code == 2, text
    untouched_outside(tmp_path, before, None)
