"""The fidelity suite file: scenarios, each a trial, run ``reps`` times on each backend.

::

    name = "fidelity"
    reps = 3                         # seeds 1..reps on each backend
    simulator_reps = 20              # optional: at least this many seeds on the simulator
    [defaults]                       # merged under every scenario (a scenario's keys win)
    duration = "40s"
    steady = ["10s", "40s"]
    [[scenarios]]
    id = "thesis-4bbr-0.5bdp"        # names the trial; letters, digits and . _ + -
    reps = 6                         # optional: at least this many seeds for this scenario
    link = { capacity = "80Mbit", rtt = "25ms", queue = "0.5bdp" }
    flows = [{ cc = "bbr", count = 4 }]

``simulator_reps`` raises the simulator's side alone: a simulator rep costs well under a
second, and where a scenario's outcome turns on the flows' phases (CUBIC's sawtooth against
the tick clock, two BBR flows' cycles), three seeds sample that distribution too coarsely to
say whether the model's mean is the kernel's; the verdict compares means (verdict.py), so the
simulator's mean is best taken over many seeds. The kernel's reps stay as measured.

A scenario's own ``reps`` is for scenarios whose metrics vary much from seed to seed on both
backends (two BBR flows' loss depends on how their gain cycles line up): both sides then average
more reps, so the verdict is about the model and not about three draws. ``--reps`` raises every
scenario to at least its value.

A scenario's **key** hashes its merged trial document as written (not the normalised trial),
with the seed and backend: it changes when the scenario's text changes, and stays the same when
the simulator's code or schema grows, so a checked-in kernel reference stays valid across
simulator changes.
"""

from __future__ import annotations

import copy
import hashlib
import os
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

from ..config import ConfigError, Trial, parse_trial, read_trial_file
from ..kernel import bpfcc
from ..sweep.store import merge
from ..sweep.spec import Axis, Sweep, SweepError, TrialSpec, trial_key

TOP_KEYS = ("name", "description", "reps", "simulator_reps", "defaults", "scenarios", "tolerances")
#: Bumped when the meaning of a scenario key changes (every kernel reference row is then stale).
KEY_FORMAT = 1


class SuiteError(SweepError):
    """A suite file that cannot run; ``problems`` lists each as ``field: value: what is valid``."""

    what = "fidelity suite"


@dataclass(frozen=True)
class Scenario:
    """One scenario: its id, the merged trial document as written, and the validated trial."""

    id: str
    doc: dict[str, Any]
    trial: Trial
    #: This scenario's own minimum number of reps (0: the suite's).
    min_reps: int = 0

    #: The directory the suite file is in: a trace file or BPF object named in the scenario is
    #: keyed by its path from there, so a reference measured in one checkout holds in any other.
    base: Optional[Path] = None

    def scenario_key(self, seed: int, backend: str) -> str:
        """Stable address of one rep of this scenario on one backend (see the module docstring)."""
        doc, base = self.doc, self.base
        if base is not None:
            def from_base(path: str) -> str:
                return os.path.relpath(path, base) if Path(path).is_absolute() else path

            link = doc.get("link")
            if isinstance(link, dict) and isinstance(link.get("trace"), str):
                doc = {**doc, "link": {**link, "trace": from_base(link["trace"])}}
            if isinstance(doc.get("flows"), list):
                doc = {**doc, "flows": [{**g, "cc": bpfcc.with_object_path(g["cc"], from_base)}
                                        if isinstance(g, dict) and "cc" in g else g for g in doc["flows"]]}
        blob = {"doc": doc, "seed": seed, "backend": backend, "format": KEY_FORMAT}
        return hashlib.sha256(json.dumps(blob, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:20]

    def trial_for(self, seed: int, backend: str) -> Trial:
        return self.trial.model_copy(update={"seed": seed, "backend": backend})


@dataclass
class Suite:
    name: str
    reps: int
    scenarios: list[Scenario]
    raw: dict[str, Any]
    tolerances: dict[str, Any] = field(default_factory=dict)
    description: str = ""
    source: Optional[str] = None
    #: The simulator side's minimum number of seeds per scenario (0: as the kernel's).
    simulator_reps: int = 0

    @property
    def seeds(self) -> list[int]:
        """Seeds of a scenario without reps of its own."""
        return list(range(1, self.reps + 1))

    def seeds_of(self, sc: Scenario, backend: str = "kernel") -> list[int]:
        """Seeds 1..max(suite reps, the scenario's own reps) of one scenario on one backend,
        and at least ``simulator_reps`` on the simulator."""
        floor = self.simulator_reps if backend != "kernel" else 0
        return list(range(1, max(self.reps, sc.min_reps, floor) + 1))

    def jobs(self, backend: str = "kernel") -> list[tuple[Scenario, int]]:
        """Every (scenario, seed) on one backend, rep by rep: every scenario's first rep, then
        every second rep, ..., so a campaign cut short still covers every scenario."""
        top = max((len(self.seeds_of(sc, backend)) for sc in self.scenarios), default=0)
        return [(sc, seed) for seed in range(1, top + 1) for sc in self.scenarios
                if seed <= len(self.seeds_of(sc, backend))]

    def scenario(self, sid: str) -> Scenario:
        for s in self.scenarios:
            if s.id == sid:
                return s
        raise KeyError(sid)

    def sweep(self, backend: str) -> Sweep:
        """The suite on one backend as a sweep (one point per scenario), for the sweep store,
        in the order of :meth:`jobs`."""
        ids = tuple(s.id for s in self.scenarios)
        axis = Axis("scenario", "scenario", ids)
        raw = {"name": f"{self.name}-{backend}", "fidelity_suite": self.raw, "backend": backend}
        top = max((len(self.seeds_of(sc, backend)) for sc in self.scenarios), default=0)
        sweep = Sweep(name=f"{self.name}-{backend}", raw=raw, axes=[axis], seeds=list(range(1, top + 1)), steady=None,
                      source=self.source, description=self.description)
        point = {sc.id: i for i, sc in enumerate(self.scenarios)}
        specs: list[TrialSpec] = []
        for sc, seed in self.jobs(backend):
            t = sc.trial_for(seed, backend)
            specs.append(TrialSpec(len(specs), point[sc.id], {"scenario": sc.id}, seed, t, trial_key(t)))
        sweep.specs = specs
        return sweep


def _show(v: Any) -> str:
    return repr(v) if isinstance(v, str) else json.dumps(v)


def load_suite(path: Union[str, Path]) -> Suite:
    """Read and validate a suite file; raises :class:`SuiteError` listing every problem."""
    try:
        raw = read_trial_file(path)
    except ConfigError as e:
        raise SuiteError(e.problems, str(path)) from None
    return parse_suite(raw, source=str(path))


def parse_suite(raw: Any, source: Optional[str] = None) -> Suite:
    problems: list[str] = []
    if not isinstance(raw, dict):
        raise SuiteError(["(suite): expected a table of settings"], source)
    for k in raw:
        if k not in TOP_KEYS:
            problems.append(f"{k}: unknown key; valid are {', '.join(TOP_KEYS)}")
    name = raw.get("name", "fidelity")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._+-]*", name):
        problems.append(f"name: {_show(name)}: letters, digits and . _ + - only, starting with a letter or digit")
        name = "fidelity"
    reps = raw.get("reps", 3)
    if not isinstance(reps, int) or isinstance(reps, bool) or not 1 <= reps <= 100:
        problems.append(f"reps: {_show(reps)}: must be a whole number from 1 to 100 (seeds per backend)")
        reps = 1
    sim_reps = raw.get("simulator_reps", 0)
    if not isinstance(sim_reps, int) or isinstance(sim_reps, bool) or not 1 <= sim_reps <= 1000:
        if "simulator_reps" in raw:
            problems.append(f"simulator_reps: {_show(sim_reps)}: must be a whole number from 1 to 1000 (seeds on the simulator)")
        sim_reps = 0
    defaults = raw.get("defaults", {})
    if not isinstance(defaults, dict):
        problems.append(f"defaults: {_show(defaults)}: must be a table of trial fields")
        defaults = {}
    tolerances = raw.get("tolerances", {})
    if not isinstance(tolerances, dict):
        problems.append(f"tolerances: {_show(tolerances)}: must be a table of metric = tolerance")
        tolerances = {}
    entries = raw.get("scenarios")
    if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) for e in entries):
        problems.append("scenarios: must be a non-empty array of tables ([[scenarios]] with an id and a trial)")
        entries = []
    scenarios: list[Scenario] = []
    seen: set[str] = set()
    for i, e in enumerate(entries):
        where = f"scenarios[{i}]"
        sid = e.get("id")
        if not isinstance(sid, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._+-]*", sid):
            problems.append(f"{where}.id: {_show(sid)}: required; letters, digits and . _ + -")
            continue
        if sid in seen:
            problems.append(f"{where}.id: {_show(sid)}: used by an earlier scenario; ids must be unique")
            continue
        seen.add(sid)
        body = {k: v for k, v in e.items() if k not in ("id", "reps")}
        own_reps = e.get("reps", 0)
        if "reps" in e and (not isinstance(own_reps, int) or isinstance(own_reps, bool) or not 1 <= own_reps <= 100):
            problems.append(f"{where}.reps: {_show(own_reps)}: must be a whole number from 1 to 100 (this scenario's seeds per backend)")
            continue
        if "name" in body or "seed" in body or "backend" in body:
            problems.append(f"{where} ({sid}): name, seed and backend are set by the suite; remove them")
            continue
        doc = merge(copy.deepcopy(body), copy.deepcopy(defaults))
        doc["name"] = sid
        try:
            trial = parse_trial(doc)
        except ConfigError as err:
            problems += [f"{where} ({sid}): {p}" for p in err.problems]
            continue
        scenarios.append(Scenario(sid, doc, trial, own_reps, Path(source).resolve().parent if source else None))
    if problems:
        raise SuiteError(problems, source)
    from .verdict import check_tolerances

    bad = check_tolerances(tolerances)
    if bad:
        raise SuiteError(bad, source)
    return Suite(name=name, reps=reps, scenarios=scenarios, raw=raw, tolerances=tolerances, simulator_reps=sim_reps,
                 description=str(raw.get("description", "")), source=source)
