"""Every example trial file is valid, and the short startup examples show the published
startup behaviour (CACM Fig. 6-7): BBR's RTT returns to RTprop after DRAIN while CUBIC keeps
a large standing queue."""

from pathlib import Path

import polars as pl
import pytest

import cctestbed
from cctestbed.config import load_trial

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
TRIALS = sorted(p for p in EXAMPLES.glob("*.toml") if "[base" not in p.read_text())


@pytest.mark.parametrize("path", TRIALS, ids=lambda p: p.name)
def test_example_trial_files_are_valid(path):
    trial = load_trial(path)
    assert trial.duration > 0 and trial.flows


def _rtt_after(result, t0: float) -> float:
    return result.flows.filter(pl.col("time_s") > t0)["rtt_ms"].drop_nans().median()


def test_startup_examples_bbr_drains_its_queue_cubic_keeps_one():
    bbr = cctestbed.run_trial(EXAMPLES / "exp7-startup-bbr.toml")
    cubic = cctestbed.run_trial(EXAMPLES / "exp7-startup-cubic.toml")
    rtprop = 40.0
    assert _rtt_after(bbr, 2.0) < 1.3 * rtprop
    # CUBIC holds most of its 8 BDP buffer: RTT several times RTprop.
    assert _rtt_after(cubic, 2.0) > 4 * rtprop
    # Both fill the link.
    assert bbr.summary["total"]["utilization"] > 0.95
    assert cubic.summary["total"]["utilization"] > 0.95
