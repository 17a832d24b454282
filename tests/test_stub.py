"""The type stub of the compiled core matches what the extension exports."""

import subprocess
import sys

import pytest


def test_core_stub_matches_the_extension():
    pytest.importorskip("mypy", reason="mypy is in the [test] extra")
    r = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "cctestbed._core"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout + r.stderr
