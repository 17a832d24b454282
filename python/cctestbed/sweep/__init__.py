"""Sweeps: many trials from one file, run in parallel and summarised together.

- :mod:`.spec`: sweep files (a base trial, axes to vary, seeds) and their expansion into trials,
  each with a content key;
- :mod:`.execute`: running the trials in local worker processes or on a Dask cluster;
- :mod:`.store`: the sweep's output directory, one finished trial at a time, and
  ``trials.parquet``;
- :mod:`.metrics`: the per-interval metrics a sweep adds to each trial (``metrics.json``);
- :mod:`.plot` and :mod:`.report`: the summary plots and the HTML report;
- :mod:`.cli`: the ``sweep``, ``plot`` and ``report`` commands.

The sweep-file names (``load_sweep``, ``parse_sweep``, ``Sweep``, ...) are also reachable here,
loaded on first use.
"""

from __future__ import annotations

import importlib
from typing import Any


def __getattr__(name: str) -> Any:
    # importlib, not `from . import spec`: that asks this module for `spec` first, which would
    # come back here before the submodule is loaded
    spec = importlib.import_module(f"{__name__}.spec")
    try:
        return getattr(spec, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
