"""cctestbed: a congestion-control testbed on a deterministic packet-level simulator.

Notebook use::

    import cctestbed
    r = cctestbed.run_trial("examples/default.toml")   # or a dict, or a Trial
    r.summary["total"]["utilization"]
    r.flows, r.router                                   # polars DataFrames
    r.plot()                                            # matplotlib Figure
    r.save("results/default")
    a = cctestbed.analyze_captures(["snd0.pcap", "rcv0.pcap"])   # packet captures, same frames
    a.summary, a.flows
"""

from __future__ import annotations

from .captures import analyze_captures
from .config import ConfigError, Trial, algorithms, load_trial
from .results import TrialResult
from .runner import run_trial

try:
    from importlib.metadata import PackageNotFoundError, version

    __version__ = version("cctestbed")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0+unknown"


def core_version() -> str:
    """Version of the compiled simulator core."""
    from . import _core

    return str(_core.__version__)


__all__ = [
    "ConfigError",
    "Trial",
    "TrialResult",
    "algorithms",
    "analyze_captures",
    "core_version",
    "load_trial",
    "run_trial",
    "__version__",
]
