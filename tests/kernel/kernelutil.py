"""Helpers shared by the kernel-backend tests."""

from __future__ import annotations

import copy
import json
import subprocess
from typing import Any, Optional

KERNEL_TRIAL: dict[str, Any] = {
    "name": "k",
    "duration": "10s",
    "seed": 1,
    "link": {"capacity": "80Mbit", "rtt": "25ms", "queue": "1bdp"},
    "flows": [{"cc": "cubic"}],
}


def kernel_trial(**updates: Any) -> dict[str, Any]:
    d = copy.deepcopy(KERNEL_TRIAL)
    d.update(updates)
    return d


def has_bbr() -> bool:
    from cctestbed.kernel.topology import load_algorithm

    return load_algorithm("bbr")


def our_namespaces(trial_id: Optional[str] = None) -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    names = [line.split()[0] for line in out.splitlines() if line.strip()]
    prefix = f"cct-{trial_id}-" if trial_id else "cct-"
    return [n for n in names if n.startswith(prefix) and "pytest" not in n]


def registry_entry(pid: int) -> Optional[dict[str, Any]]:
    """The trial registry entry (``/run/cctestbed/<id>.json``) owned by process ``pid``, if it
    has written one yet: how a test finds its own trial among others running at once."""
    from cctestbed.kernel.topology import REGISTRY

    for entry in REGISTRY.glob("*.json"):
        try:
            doc = json.loads(entry.read_text())
        except (OSError, ValueError):
            continue
        if doc.get("pid") == pid:
            return doc
    return None
