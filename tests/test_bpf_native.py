"""The BPF programs' native code changes nothing a trial reports: the same trial, run once with
programs compiled at their 1,000th call and once in the interpreter alone
(``CCTESTBED_BPF_JIT=0``), writes the same files byte for byte. Each run is its own process,
since compiled programs are kept for the life of a process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cctestbed.kernel import bpfcc

BBR_OBJ = bpfcc.bpf_dir() / "bbr.bpf.o"

TRIAL = f"""
duration = "20s"
seed = 5
[link]
capacity = "80Mbit"
rtt = "25ms"
queue = "0.5bdp"
[[flows]]
cc = "bpf:{BBR_OBJ}"
count = 3
[[flows]]
cc = "bpf:bbr-stable-rtprop"
[[flows]]
cc = "cubic"
"""


@pytest.mark.skipif(not BBR_OBJ.exists(), reason="BPF objects not built: `make build` (clang, bpftool, libbpf-dev)")
def test_native_code_and_interpreter_write_the_same_trial(tmp_path: Path) -> None:
    trial = tmp_path / "t.toml"
    trial.write_text(TRIAL)
    outs = {}
    for jit in ("1", "0"):
        out = tmp_path / f"out{jit}"
        env = {**os.environ, "CCTESTBED_BPF_JIT": jit}
        r = subprocess.run([sys.executable, "-m", "cctestbed", "run", str(trial), "-o", str(out)], env=env, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        outs[jit] = out
    names = sorted(p.name for p in outs["1"].iterdir())
    assert "flows.parquet" in names and "summary.json" in names
    for name in names:
        assert (outs["1"] / name).read_bytes() == (outs["0"] / name).read_bytes(), name
