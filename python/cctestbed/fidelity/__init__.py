"""Fidelity: the simulator measured against real Linux, scenario by scenario and metric by metric.

A suite file (``fidelity/suite.toml``) lists scenarios, each a trial. ``cctestbed fidelity run``
runs every scenario ``reps`` times on the kernel backend and on the simulator through the sweep
store; the kernel side accumulates in a compact reference (``kernel-reference.parquet``: summary
metrics per rep, kernel version, host, date) that can be checked in. ``fidelity report`` turns
both sides into verdicts per scenario x metric (:mod:`.verdict`) and writes ``fidelity.md``,
``fidelity.json`` and an HTML page; ``fidelity check`` re-runs only the simulator against the
reference and fails on any cell out of tolerance that the known-deviations file does not list.

Rooms: :mod:`.suite` (the file and its trials), :mod:`.measure` (the metrics compared, computed
the same way for both backends), :mod:`.reference` (the kernel reference), :mod:`.verdict`
(tolerances and verdicts), :mod:`.report` (the written report), :mod:`.cli` (the commands).
"""
