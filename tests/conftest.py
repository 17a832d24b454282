"""Shared helpers: small valid trials and a CLI runner."""

from __future__ import annotations

import copy
import json
import signal
from pathlib import Path
from typing import Any, Callable

import pytest

# Tests press Ctrl-C in the commands they start. A shell starts a background job (`make test &`)
# with SIGINT ignored, which its children inherit, and the command keeps an ignored SIGINT
# ignored, as under nohup. Give the commands the terminal's default instead.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

#: The smallest sensible trial: short, so tests that run the core stay fast.
BASE_TRIAL: dict[str, Any] = {
    "name": "t",
    "duration": "2s",
    "seed": 1,
    "link": {"capacity": "10Mbit", "rtt": "20ms", "queue": "2bdp"},
    "flows": [{"cc": "cubic", "count": 2, "stagger": "100ms"}, {"cc": "reno"}],
}


@pytest.fixture
def trial_dict() -> Callable[..., dict[str, Any]]:
    """A fresh copy of BASE_TRIAL with top-level keys updated: ``trial_dict(duration="1s")``."""

    def make(**updates: Any) -> dict[str, Any]:
        d = copy.deepcopy(BASE_TRIAL)
        d.update(updates)
        return d

    return make


def toml_of(d: dict[str, Any]) -> str:
    """A trial dict as TOML (using the package's own writer, checked in test_config)."""
    from cctestbed.config import _toml_dumps

    return _toml_dumps(d)


@pytest.fixture
def write_trial(tmp_path: Path) -> Callable[..., Path]:
    """Write a trial (dict or TOML text) to a file in tmp_path and return its path."""

    def write(content: Any, name: str = "trial.toml") -> Path:
        p = tmp_path / name
        if isinstance(content, str):
            p.write_text(content)
        elif name.endswith(".json"):
            p.write_text(json.dumps(content))
        else:
            p.write_text(toml_of(content))
        return p

    return write


@pytest.fixture
def cli():
    """Invoke the CLI in-process: ``cli("validate", path)`` -> click Result."""
    from typer.testing import CliRunner

    from cctestbed.cli import app

    runner = CliRunner()

    def invoke(*args: Any):
        return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)

    return invoke
