"""`cctestbed fidelity run` on the kernel: each finished rep lands in the reference with its
provenance, and a second run (another machine, an empty store) runs nothing already there."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from pathlib import Path

import polars as pl

CLI = [sys.executable, "-m", "cctestbed.cli"]

SUITE = {
    "name": "kfid",
    "reps": 1,
    "defaults": {"duration": "6s", "steady": ["2s", "6s"]},
    "scenarios": [{"id": "two-cubic", "link": {"capacity": "20Mbit", "rtt": "20ms", "queue": "1bdp"},
                   "flows": [{"cc": "cubic", "count": 2}]}],
}


def test_kernel_reps_accumulate_in_the_reference(tmp_path):
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps(SUITE))
    r = subprocess.run([*CLI, "fidelity", "run", str(suite), "-o", str(tmp_path / "a")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    ref = pl.read_parquet(tmp_path / "kernel-reference.parquet")
    row = ref.row(0, named=True)
    print(f"\nkernel rep: utilization {row['utilization_pct']:.1f} %, loss {row['loss_pct']:.3f} %, "
          f"RTT p50 {row['rtt_p50_ms']:.1f} ms, link emulator p99 error {row['emu_p99_us']} us")
    assert len(ref) == 1 and row["scenario"] == "two-cubic" and row["kernel"] == platform.release()
    # the userspace emulator adds each packet's transmission time (docs/kernel.md); tc cannot
    assert row["link_emulator"] in ("tc", "userspace+tx") and row["date"].endswith("Z")
    assert 90.0 <= row["utilization_pct"] <= 101.0, "two CUBIC flows fill a 20 Mbit/s link"
    doc = json.loads((tmp_path / "a" / "fidelity.json").read_text())
    assert doc["totals"]["scenarios"] == 1 and doc["totals"]["cells"] >= 8
    r = subprocess.run([*CLI, "fidelity", "run", str(suite), "-o", str(tmp_path / "b"), "--backend", "kernel"],
                       capture_output=True, text=True)
    assert r.returncode == 0 and "nothing to run" in r.stderr
    assert not (Path(tmp_path / "b" / "kernel" / "trials").exists() and any((tmp_path / "b" / "kernel" / "trials").iterdir()))
