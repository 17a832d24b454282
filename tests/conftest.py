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

from trial_helpers import BASE_TRIAL, toml_of  # noqa: E402,F401  (shared with the test modules)


@pytest.fixture
def trial_dict() -> Callable[..., dict[str, Any]]:
    """A fresh copy of BASE_TRIAL with top-level keys updated: ``trial_dict(duration="1s")``."""

    def make(**updates: Any) -> dict[str, Any]:
        d = copy.deepcopy(BASE_TRIAL)
        d.update(updates)
        return d

    return make


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
