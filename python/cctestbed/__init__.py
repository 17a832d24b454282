"""cctestbed: a congestion-control testbed on a deterministic packet-level simulator.

Notebook use::

    import cctestbed
    r = cctestbed.run_trial("examples/default.toml")   # or a dict, or a Trial
    r.summary["total"]["utilization"]
    r.flows, r.router                                   # polars DataFrames
    r.plot()                                            # matplotlib Figure
    r.save("results/default")
    j = cctestbed.judge("examples/bbr-vs-cubic-droptail.toml")   # harm against its baselines
    a = cctestbed.analyze_captures(["snd0.pcap", "rcv0.pcap"])   # packet captures, same frames
    a.summary, a.flows

The names below are loaded on first use, so importing the package (and starting the
``cctestbed`` command) does not pay for pydantic, polars and NumPy until they are needed.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing itself is not imported here: it slows the command's start
if TYPE_CHECKING:
    from typing import Any

    from .captures import analyze_captures
    from .config import ConfigError, Trial, algorithms, load_trial
    from .judging import judge
    from .results import TrialResult
    from .runner import run_trial

#: Public name -> the module that defines it.
_LAZY = {
    "analyze_captures": "captures",
    "ConfigError": "config",
    "Trial": "config",
    "algorithms": "config",
    "load_trial": "config",
    "judge": "judging",
    "TrialResult": "results",
    "run_trial": "runner",
}


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            value = version("cctestbed")
        except PackageNotFoundError:  # pragma: no cover - running from a source tree
            value = "0+unknown"
    elif name in _LAZY:
        from importlib import import_module

        value = getattr(import_module(f".{_LAZY[name]}", __name__), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


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
    "judge",
    "load_trial",
    "run_trial",
    "__version__",
]
