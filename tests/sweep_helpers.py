"""Shared by the tests/test_sweep_*.py files: a small sweep, run once per test session."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

#: 2 capacities x 2 queues x 2 seeds of 3 s with one BBR and one CUBIC flow: 8 quick trials.
SMALL_SWEEP = '''
name = "small"
trials = 2
steady = ["1s", "3s"]
[base]
duration = "3s"
[base.link]
capacity = "4Mbit"
rtt = "20ms"
[[base.flows]]
cc = "bbr"
[[base.flows]]
cc = "cubic"
[axes]
"link.capacity" = ["4Mbit", "8Mbit"]
"link.queue" = ["0.5bdp", "2bdp"]
'''

#: Loaded by every Python process of a sweep started with :func:`hooked_env` (a sitecustomize on
#: PYTHONPATH): it wraps the core's simulate to log each run, slow it down or fail it.
SITECUSTOMIZE = '''
import hashlib, json, os, time

def _install():
    if not os.environ.get("CCTB_TEST_HOOK"):
        return
    import cctestbed._core as core
    orig = core.simulate
    log = os.environ.get("CCTB_TEST_SIMLOG")
    fail = os.environ.get("CCTB_TEST_FAIL")  # "seed:capacity_bps"
    kill = os.environ.get("CCTB_TEST_KILL")  # "seed:capacity_bps": the worker process is killed
    delay = float(os.environ.get("CCTB_TEST_DELAY", "0"))

    def simulate(cfg, stop=None):
        c = json.loads(cfg)
        if log:
            with open(log, "a") as f:
                f.write(hashlib.sha256(cfg.encode()).hexdigest() + "\\n")
        if fail and f"{c['seed']}:{c['link']['capacity_bps']}" == fail:
            raise RuntimeError("injected failure for this trial")
        if kill and f"{c['seed']}:{c['link']['capacity_bps']}" == kill:
            os.kill(os.getpid(), 9)
        time.sleep(delay)
        return orig(cfg, stop)

    core.simulate = simulate

_install()
'''

_CACHE: dict[str, Any] = {}


def write_small_sweep(directory: Path, text: str = SMALL_SWEEP) -> Path:
    f = directory / "small.toml"
    f.write_text(text)
    return f


def small_sweep_run(tmp_path_factory) -> Path:
    """The sweep directory of SMALL_SWEEP run locally with the CLI (once per session)."""
    if "small" not in _CACHE:
        from typer.testing import CliRunner

        from cctestbed.cli import app

        d = tmp_path_factory.mktemp("small-sweep")
        f = write_small_sweep(d)
        r = CliRunner().invoke(app, ["sweep", str(f), "-o", str(d / "out"), "--workers", "2"],
                               catch_exceptions=False)
        assert r.exit_code == 0, r.output
        _CACHE["small"] = (d / "out", f, r.output)
    return _CACHE["small"]


def hooked_env(tmp: Path, **env: str) -> dict[str, str]:
    """Environment for a sweep subprocess whose every Python process loads SITECUSTOMIZE."""
    hook = tmp / "hook"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(SITECUSTOMIZE)
    out = dict(os.environ)
    out["PYTHONPATH"] = str(hook) + (os.pathsep + out["PYTHONPATH"] if out.get("PYTHONPATH") else "")
    out["CCTB_TEST_HOOK"] = "1"
    out.update(env)
    return out


def cli_process(args: list[str], env: dict[str, str], **kw: Any) -> subprocess.Popen:
    """``cctestbed ARGS`` in a new process group (so a test can kill it with its workers)."""
    return subprocess.Popen(
        [sys.executable, "-m", "cctestbed.cli", *args], env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True, **kw
    )
