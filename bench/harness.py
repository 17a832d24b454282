"""Speed and memory of the harness around the simulator (``make bench`` runs the quick set).

    python bench/harness.py                     # validate, run overhead, sweep driver memory (2,000 trials)
    python bench/harness.py --sweep-trials 20000

- validate: wall time of ``cctestbed validate examples/default.toml``, a whole process each.
- run overhead: wall time of ``cctestbed run examples/default.toml`` minus the simulation's own
  time (the core alone, in this process, on the same trial).
- run --plot: the same with the stacked plot drawn (trial.png), timed in turn with the run
  without it; its cost is the difference of the two medians.
- sweep driver: peak resident memory of the ``cctestbed sweep`` process (its workers not
  counted) over a sweep of short trials (200 ms, one flow), read from /proc while it runs, and
  its resident memory after a tenth, half and all of the trials.

Each figure is printed as min / median / max over the runs. Timings vary with other load on the
machine: compare medians taken side by side.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLI = Path(sys.executable).with_name("cctestbed")
TRIAL = ROOT / "examples" / "default.toml"

SWEEP = """name = "bench-memory"
trials = {n}
[base]
duration = "200ms"
sample_interval = "50ms"
[base.link]
capacity = "1Mbit"
rtt = "20ms"
queue = "1bdp"
[[base.flows]]
cc = "reno"
"""


def spread(xs: list[float], unit: str, fmt: str = ".3f") -> str:
    return f"{min(xs):{fmt}} / {statistics.median(xs):{fmt}} / {max(xs):{fmt}} {unit}"


#: The commands run as on a user's machine: Python caches the bytecode of the modules it compiles
#: (the warm-up run writes it), even where the calling shell sets PYTHONDONTWRITEBYTECODE, which
#: would make every run compile cctestbed's changed modules again.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def wall(args: list[str], cwd: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run([str(CLI), *args], cwd=cwd, check=True, stdout=subprocess.DEVNULL, env=ENV)
    return time.perf_counter() - t0


def bench_validate(runs: int, tmp: Path) -> None:
    wall(["validate", str(TRIAL)], tmp)  # warm-up: file caches and bytecode
    xs = [wall(["validate", str(TRIAL)], tmp) for _ in range(runs)]
    print(f"validate {TRIAL.name}: wall {spread(xs, 's')}")


def bench_run(runs: int, tmp: Path) -> None:
    from cctestbed import _core
    from cctestbed.config import load_trial

    config = load_trial(TRIAL).to_core_json()
    sim = []
    for _ in range(runs):
        t0 = time.perf_counter()
        _core.simulate(config)
        sim.append(time.perf_counter() - t0)
    args = ["run", str(TRIAL), "-o", str(tmp / "run"), "--force"]
    wall(args, tmp)
    wall([*args, "--plot"], tmp)
    total, plotted = [], []
    for _ in range(runs):  # in turn, so that both see the same load
        total.append(wall(args, tmp))
        plotted.append(wall([*args, "--plot"], tmp))
    over = [t - statistics.median(sim) for t in total]
    print(f"run {TRIAL.name}: wall {spread(total, 's')}; simulation alone {spread(sim, 's')}; "
          f"overhead {spread(over, 's')}")
    print(f"run {TRIAL.name} --plot: wall {spread(plotted, 's')}; the plot costs "
          f"{statistics.median(plotted) - statistics.median(total):.2f} s (difference of the medians)")


def bench_sweep(n: int, tmp: Path) -> None:
    (tmp / "sweep.toml").write_text(SWEEP.format(n=n))
    out = tmp / "sweep"
    proc = subprocess.Popen([str(CLI), "sweep", "sweep.toml", "-o", str(out), "-j", "2"], cwd=tmp, env=ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    status = Path(f"/proc/{proc.pid}/status")
    peak = 0.0
    at: dict[float, float] = {}
    t0 = time.perf_counter()
    while proc.poll() is None:
        try:
            fields = dict(line.split(":", 1) for line in status.read_text().splitlines())
        except OSError:
            break
        if "VmRSS" not in fields:  # exited since poll(): a zombie's status has no memory lines
            break
        rss, peak = float(fields["VmRSS"].split()[0]) / 1024, float(fields["VmHWM"].split()[0]) / 1024
        done = len(os.listdir(out / "trials")) if (out / "trials").is_dir() else 0
        for frac in (0.1, 0.5, 1.0):
            if done >= frac * n and frac not in at:
                at[frac] = rss
        time.sleep(0.2)
    if proc.wait() != 0:
        raise SystemExit(f"the sweep failed (exit {proc.returncode})")
    steps = ", ".join(f"{int(f * n):,}: {mb:.0f} MB" for f, mb in sorted(at.items()))
    print(f"sweep of {n:,} trials: {time.perf_counter() - t0:.0f} s; driver peak {peak:.0f} MB; "
          f"resident after {steps}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="timed runs of validate and run")
    ap.add_argument("--sweep-trials", type=int, default=2000, help="trials of the memory sweep (0: none)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="cctestbed-bench-") as tmp:
        bench_validate(a.runs, Path(tmp))
        bench_run(a.runs, Path(tmp))
        if a.sweep_trials:
            bench_sweep(a.sweep_trials, Path(tmp))


if __name__ == "__main__":
    main()
