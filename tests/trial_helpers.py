"""Small valid trials shared by the tests, importable by name (``from trial_helpers import
...``): ``conftest`` itself is not, since tests/kernel has a conftest of its own and the name
resolves to whichever was imported first."""

from __future__ import annotations

from typing import Any

#: The smallest sensible trial: short, so tests that run the core stay fast.
BASE_TRIAL: dict[str, Any] = {
    "name": "t",
    "duration": "2s",
    "seed": 1,
    "link": {"capacity": "10Mbit", "rtt": "20ms", "queue": "2bdp"},
    "flows": [{"cc": "cubic", "count": 2, "stagger": "100ms"}, {"cc": "reno"}],
}


def toml_of(d: dict[str, Any]) -> str:
    """A trial dict as TOML (using the package's own writer, checked in test_config)."""
    from cctestbed.config import _toml_dumps

    return _toml_dumps(d)
