"""Kernel-backend tests: real Linux TCP in network namespaces.

Every test here is marked ``kernel`` and needs root, network namespaces, the system tools
(``make kernel-deps``) and a way to emulate the link (netem, or the userspace emulator built
by ``make build``). Where any is missing the tests are skipped with the reason.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path
from typing import Optional

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "kernel: runs real Linux TCP in network namespaces (root)")
    config.addinivalue_line("markers", "bpf_full: the full BPF BBR vs built-in bbr comparison (about 25 min); "
                                       "runs only with -m bpf_full")


@functools.lru_cache(maxsize=None)
def unavailable() -> Optional[str]:
    """Why the kernel backend cannot run here, or None."""
    if os.geteuid() != 0:
        return "kernel backend tests need root (CI runs as root)"
    missing = [t for t in ("ip", "tc", "ethtool", "sysctl") if shutil.which(t) is None]
    if missing:
        return f"missing tools {', '.join(missing)} (make kernel-deps)"
    probe = "cct-pytest-probe"
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if r.returncode != 0:
        return f"cannot create network namespaces: {r.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    from cctestbed.kernel.checks import KernelUnavailable, choose_link_emulator

    try:
        choose_link_emulator(None)
    except KernelUnavailable as e:
        return str(e)
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.kernel)
            reason = unavailable()
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))
            elif item.get_closest_marker("bpf_full") and "bpf_full" not in (config.getoption("markexpr") or ""):
                item.add_marker(pytest.mark.skip(reason="the full comparison takes about 25 minutes: pytest -m bpf_full"))
