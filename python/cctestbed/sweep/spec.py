"""Sweep files: a base trial, axes to vary and seeds, expanded into one trial per point and seed.

A sweep file (TOML, or JSON if it ends in .json)::

    name = "table1-quick"            # optional; the file's stem otherwise
    trials = 3                        # seeds per point: base seed, +1, +2 (or seeds = [1, 7, 9])
    steady = ["20s", "60s"]           # steady-state window of every trial
    telemetry = "summary"             # optional: keep each trial's summary only, no time series
    [base]                            # a trial, exactly as in a trial file
    ...
    [axes]                            # dotted trial paths -> lists; the cartesian product
    "link.capacity" = ["40Mbit", "80Mbit"]
    "flows.0.cc" = ["bbr", "cubic"]
    [zip]                             # optional; varied together (also [[zip]] for several groups)
    "flows.0.count" = [1, 2, 4]
    "flows.1.count" = [1, 2, 4]

An axis path walks the trial schema: tables by key, flow groups by index (``flows.0`` is the
first group), algorithm parameters by name (``flows.1.params.cwnd_gain``). An axis may also
replace a whole table or list, e.g. ``flows`` with a list of flow-group lists to vary the flow
mix; such values are shown by a short label ("1 bbr + 1 cubic").

:func:`load_sweep` validates everything up front (the file's own keys, every axis path, every
expanded point as a trial) and raises :class:`SweepError` listing each problem as
``field: value: what is valid``; nothing runs and nothing is written.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional, Sequence, Union

from pydantic import BaseModel

from .. import units
from ..config import U64_MAX, ConfigError, Trial, _model_in, parse_trial, read_trial_file

__all__ = ["SweepError", "Sweep", "TrialSpec", "Axis", "load_sweep", "parse_sweep", "trial_key"]

TOP_KEYS = ("name", "description", "trials", "seeds", "steady", "telemetry", "base", "axes", "zip")
#: What each finished trial keeps: ``full`` (the time series as ``run`` writes them) or
#: ``summary`` (its summary and metrics only, for sweeps that read nothing else).
TELEMETRY = ("full", "summary")
#: Columns every trials.parquet row has; an axis whose name would collide is renamed.
FIXED_COLUMNS = ("seed", "status", "error", "dir", "key")
#: Trial fields that a sweep sets itself and that no axis may vary.
RESERVED_PATHS = {"seed": "use `trials = N` or `seeds = [...]`", "name": "the sweep's name names every trial",
                  "steady": "give the sweep's top-level `steady`"}
#: Bumped when the stored files of a trial change meaning; part of every trial's key.
STORE_FORMAT = 1


class SweepError(ValueError):
    """A sweep file that cannot run. ``problems`` lists each as ``field: value: what is valid``."""

    #: What the file is, in the message's head ("invalid sweep x.toml: 2 problem(s)").
    what = "sweep"

    def __init__(self, problems: list[str], source: Optional[str] = None):
        self.problems = list(problems)
        self.source = source
        head = f"invalid {self.what}{f' {source}' if source else ''}: {len(self.problems)} problem(s)"
        super().__init__("\n".join([head, *("  " + p for p in self.problems)]))


@dataclass(frozen=True)
class Axis:
    """One varied trial field: its dotted ``path``, the trials.parquet ``column`` and its values."""

    path: str
    column: str
    values: tuple[Any, ...]
    zip_group: Optional[int] = None

    def label(self, value: Any) -> Any:
        """The value as it appears in trials.parquet: scalars as written, tables and lists as a label."""
        return value_label(self.path, value)


@dataclass(frozen=True)
class TrialSpec:
    """One trial of the sweep: its point, seed, the validated trial and its store key.

    A large sweep keeps no :class:`Trial` per spec (``stored_trial`` is None): :attr:`trial` is
    rebuilt from the sweep when asked for, so a sweep's specs take a few hundred bytes each."""

    index: int
    point: int
    values: dict[str, Any]  # column -> label
    seed: int
    stored_trial: Optional[Trial]
    key: str
    sweep: Optional["Sweep"] = field(default=None, repr=False, compare=False)

    @property
    def trial(self) -> Trial:
        if self.stored_trial is not None:
            return self.stored_trial
        assert self.sweep is not None
        _, t = self.sweep.point_trial(self.point)
        return t if t.seed == self.seed else t.model_copy(update={"seed": self.seed})

    @property
    def trial_dict(self) -> dict[str, Any]:
        """The trial in trial-file form (what a worker validates and runs)."""
        return self.trial.model_dump(mode="json", exclude_none=True)

    def without_trial(self, sweep: "Sweep") -> "TrialSpec":
        """This spec keeping only its key; :attr:`trial` is rebuilt from ``sweep`` when asked for."""
        return TrialSpec(self.index, self.point, self.values, self.seed, None, self.key, sweep)


@dataclass
class Sweep:
    """A validated sweep: its raw file contents, axes, seeds and base trial.

    Expansion is lazy: :attr:`n_points` and :attr:`n_trials` are counted, not expanded;
    :meth:`point_trial` builds one point's trial and :meth:`iter_specs` every trial in order, one
    point at a time, keeping none (a run streams them, so what it holds does not grow with the
    sweep). :attr:`specs` is the same trials as a list, for callers that want one. A sweep of up
    to :data:`FULL_CHECK_POINTS` points has every point checked by :func:`parse_sweep` already,
    a larger one when it is first expanded (:meth:`check`).
    """

    name: str
    raw: dict[str, Any]
    axes: list[Axis]
    seeds: Sequence[int]
    steady: Optional[tuple[int, int]]
    source: Optional[str] = None
    description: str = ""
    #: What each finished trial keeps (:data:`TELEMETRY`).
    telemetry: str = "full"
    base: dict[str, Any] = field(default_factory=dict, repr=False)
    #: Refuse no trial for its size (``--allow-large``).
    allow_large: bool = False
    #: Every point has been checked (see :meth:`check`).
    checked: bool = False
    _specs: Optional[list[TrialSpec]] = field(default=None, repr=False)

    @property
    def specs(self) -> list[TrialSpec]:
        """Every trial of the sweep (points x seeds) as a list; expanded on first use."""
        if self._specs is None:
            keep = self.n_trials <= KEEP_TRIALS
            self._specs = [s if keep else s.without_trial(self) for s in self.iter_specs()]
        return self._specs

    @specs.setter
    def specs(self, value: list[TrialSpec]) -> None:
        self._specs = list(value)

    def iter_specs(self) -> Iterator[TrialSpec]:
        """Every trial of the sweep in order (seeds innermost), built as it is asked for."""
        if self._specs is not None:
            yield from self._specs
            return
        self.check()
        for point in range(self.n_points):
            labels, trial = self.point_trial(point)
            for j in range(len(self.seeds)):
                yield self.spec(point, j, trial, labels)

    def check(self) -> None:
        """Check every point as a trial (once); raises :class:`SweepError` listing the problems."""
        if not self.checked:
            _check_points(self, range(self.n_points), self.source)
            self.checked = True

    @property
    def columns(self) -> dict[str, str]:
        """trials.parquet column -> dotted trial path, in axis order."""
        return {a.column: a.path for a in self.axes}

    @property
    def n_points(self) -> int:
        if self._specs is not None:
            return len(self._specs) // max(len(self.seeds), 1)
        return math.prod(len(d[0].values) for d in _dimensions(self.axes))

    @property
    def n_trials(self) -> int:
        if self._specs is not None:
            return len(self._specs)
        return self.n_points * len(self.seeds)

    def point_doc(self, point: int) -> tuple[dict[str, Any], dict[str, Any]]:
        """(labels, trial dict) of one point; the last axis varies fastest."""
        dims = _dimensions(self.axes)
        idx = []
        rest = point
        for d in reversed(dims):
            rest, i = divmod(rest, len(d[0].values))
            idx.append(i)
        idx.reverse()
        doc = copy.deepcopy(self.base)
        doc["name"] = self.name
        if self.steady is not None:
            doc["steady"] = [units.format_time(self.steady[0]), units.format_time(self.steady[1])]
        labels: dict[str, Any] = {}
        for dim, i in zip(dims, idx):
            for a in dim:
                set_path(doc, a.path, a.values[i])
                labels[a.column] = a.label(a.values[i])
        if self.seeds:
            doc["seed"] = self.seeds[0]
        return labels, doc

    def point_trial(self, point: int) -> tuple[dict[str, Any], Trial]:
        """(labels, trial) of one point with the first seed; raises ConfigError."""
        labels, doc = self.point_doc(point)
        return labels, parse_trial(doc, allow_large=self.allow_large)

    def spec(self, point: int, seed_index: int, trial: Trial, labels: dict[str, Any]) -> TrialSpec:
        """The trial of ``point`` (``trial``, with the first seed) with its ``seed_index``-th seed."""
        seed = self.seeds[seed_index]
        t = trial if seed == trial.seed else trial.model_copy(update={"seed": seed})
        return TrialSpec(point * len(self.seeds) + seed_index, point, labels, seed, t, trial_key(t))

    def sample_points(self, limit: int = 500) -> list[int]:
        """Points to check and time a large sweep by: every value of every axis at least once, the
        first and last point, and up to ``limit`` more drawn evenly at random (fixed draw)."""
        import random

        dims = _dimensions(self.axes)
        n = self.n_points
        if n <= limit:
            return list(range(n))
        lens = [len(d[0].values) for d in dims]
        chosen = {0, n - 1}
        for k in range(max(lens, default=1)):  # the "diagonal": value k mod len of every dimension
            p = 0
            for ln in lens:
                p = p * ln + k % ln
            chosen.add(p)
        rng = random.Random(0)
        target = min(n, len(chosen) + limit)
        while len(chosen) < target:
            chosen.add(rng.randrange(n))
        return sorted(chosen)


# --- helpers ---------------------------------------------------------------------------------


def _show(v: Any) -> str:
    if isinstance(v, str):
        return repr(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return json.dumps(v, sort_keys=True)


def _qpath(path: str) -> str:
    """An axis path as written in the file: quoted when dotted."""
    return f'"{path}"' if "." in path else path


def flows_label(groups: list[Any]) -> str:
    """'2 bbr' or '1 bbr + 1 cubic' for a list of flow-group tables."""
    parts = []
    for g in groups:
        if isinstance(g, dict):
            label = g.get("group") or g.get("cc") or "?"
            parts.append(f"{g.get('count', 1)} {label}")
        else:
            parts.append(_show(g))
    return " + ".join(parts)


def value_label(path: str, value: Any) -> Any:
    """A varied value as a trials.parquet cell."""
    if path == "flows" and isinstance(value, list):
        return flows_label(value)
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    return value


def trial_key(trial: Trial) -> str:
    """Content address of a trial: its normalised core config (with seed), steady window and backend."""
    backend = getattr(trial, "backend", None) or "sim"
    doc = {"core": trial.to_core(), "steady_ns": list(trial.steady_ns), "backend": backend, "format": STORE_FORMAT}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:20]


def _kind(annotation: Any) -> str:
    """'list', 'dict', 'model' or 'leaf' for a field annotation (through Optional/Annotated)."""
    origin = typing.get_origin(annotation)
    if origin in (list, tuple):
        return "list"
    if origin is dict:
        return "dict"
    if origin is typing.Annotated:
        return _kind(typing.get_args(annotation)[0])
    if origin is Union:
        kinds = {_kind(a) for a in typing.get_args(annotation) if a is not type(None)}
        return kinds.pop() if len(kinds) == 1 else "leaf"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "model"
    return "leaf"


def check_path(path: str, base: dict[str, Any]) -> Optional[str]:
    """None if ``path`` names a trial field that ``base`` can take; else what is wrong."""
    parts = path.split(".")
    if any(p == "" for p in parts):
        return "not a dotted path such as 'link.capacity' or 'flows.0.cc'"
    if parts[0] in RESERVED_PATHS:
        return f"cannot be varied: {RESERVED_PATHS[parts[0]]}"
    model: Optional[type[BaseModel]] = Trial
    node: Any = base
    i = 0
    where = "the trial"
    while i < len(parts):
        part = parts[i]
        assert model is not None
        if part not in model.model_fields:
            return f"unknown field '{part}' in {where}; valid are {', '.join(model.model_fields)}"
        ann = model.model_fields[part].annotation
        kind = _kind(ann)
        node = node.get(part) if isinstance(node, dict) else None
        where = ".".join(parts[: i + 1])
        i += 1
        if i == len(parts):
            return None
        nxt = parts[i]
        if kind == "list":
            if not re.fullmatch(r"\d+", nxt):
                return f"'{nxt}' after '{where}' must be a group index (0, 1, ...)"
            n = len(node) if isinstance(node, list) else 0
            if int(nxt) >= n:
                return f"index {nxt} is beyond the base's {n} entr{'y' if n == 1 else 'ies'} in '{where}' (0 to {n - 1})"
            node = node[int(nxt)]
            i += 1
            where = ".".join(parts[:i])
            model = _model_in(ann)
            if i == len(parts):
                return None
            if model is None:
                return f"'{where}' has no fields"
        elif kind == "dict":
            # algorithm parameters: any name here; the trial's validation checks it
            return None if i + 1 == len(parts) else f"'{'.'.join(parts[: i + 1])}' is a single value"
        elif kind == "model":
            model = _model_in(ann)
            if isinstance(node, (str, int, float)) and not isinstance(node, bool):
                # e.g. link.loss = "1%": the shorthand replaces the table; vary the whole field
                return f"the base gives '{where}' as a single value ({_show(node)}); vary '{where}' itself"
        else:
            return f"'{where}' is a single value; it has no field '{nxt}'"
    return None


def set_path(doc: dict[str, Any], path: str, value: Any) -> None:
    """Set ``value`` at the dotted ``path`` of the trial dict ``doc`` (tables created as needed)."""
    parts = path.split(".")
    node: Any = doc
    for j, part in enumerate(parts[:-1]):
        key: Any = int(part) if isinstance(node, list) else part
        if isinstance(node, dict) and key not in node:
            node[key] = {}
        node = node[key]
    last = parts[-1]
    if isinstance(node, list):
        node[int(last)] = copy.deepcopy(value)
    else:
        node[last] = copy.deepcopy(value)


def _column_names(paths: list[str]) -> dict[str, str]:
    """path -> column: the last path component, else the shortest unambiguous suffix joined by '_'."""
    names: dict[str, str] = {}
    for p in paths:
        parts = p.split(".")
        for n in range(1, len(parts) + 1):
            if parts[-n].isdigit() and n < len(parts):
                continue  # '0_count' says little; 'flows_0_count' says which group
            cand = "_".join(parts[-n:])
            clash = any(
                q != p and "_".join(q.split(".")[-n:]) == cand for q in paths
            ) or cand in FIXED_COLUMNS
            if not clash or n == len(parts):
                names[p] = cand if cand not in FIXED_COLUMNS else f"{cand}_"
                break
    return names


# --- loading ---------------------------------------------------------------------------------


def read_sweep_file(path: Union[str, Path]) -> dict[str, Any]:
    """The raw table in a TOML or JSON sweep file (read as trial files are)."""
    try:
        return read_trial_file(path, "sweep file")
    except ConfigError as e:
        raise SweepError(e.problems) from None


def load_sweep(path: Union[str, Path], allow_large: bool = False) -> Sweep:
    """Read, validate and expand a sweep file; raises :class:`SweepError` listing every problem."""
    path = Path(path)
    raw = read_sweep_file(path)
    if isinstance(raw, dict) and "name" not in raw:
        raw = {"name": re.sub(r"[^A-Za-z0-9._+-]", "_", path.stem) or "sweep", **raw}
    return parse_sweep(raw, source=str(path), allow_large=allow_large)


def _point_text(values: dict[str, Any]) -> str:
    return ", ".join(f"{k}={_show(v)}" for k, v in values.items())


def parse_sweep(raw: dict[str, Any], source: Optional[str] = None, allow_large: bool = False) -> Sweep:
    """Validate and expand a sweep given as a dict (the file's contents).

    ``allow_large`` lets trials past the resource limits through (``--allow-large``)."""
    problems: list[str] = []
    if not isinstance(raw, dict):
        raise SweepError(["(sweep): expected a table of settings"], source)
    for k in raw:
        if k not in TOP_KEYS:
            problems.append(f"{k}: unknown key; valid are {', '.join(TOP_KEYS)}")

    name = raw.get("name", "sweep")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._+-]*", name) or len(name) > 200:
        problems.append(f"name: {_show(name)}: letters, digits and . _ + - only, starting with a letter or digit")
        name = "sweep"
    description = raw.get("description", "")
    if not isinstance(description, str):
        problems.append(f"description: {_show(description)}: must be a string")
        description = ""
    telemetry = raw.get("telemetry", "full")
    if telemetry not in TELEMETRY:
        problems.append(f"telemetry: {_show(telemetry)}: valid are \"full\" (each trial's time series, as run "
                        f"writes them) and \"summary\" (its summary and metrics only)")
        telemetry = "full"

    base = raw.get("base")
    if base is None:
        problems.append("base: missing: required (the trial every point starts from, as in a trial file)")
        base = {}
    elif not isinstance(base, dict):
        problems.append(f"base: {_show(base)}: must be a table (the trial every point starts from)")
        base = {}

    # seeds
    seeds: Sequence[int] = []
    base_seed = base.get("seed", 1)
    if not isinstance(base_seed, int) or isinstance(base_seed, bool) or not 0 <= base_seed <= U64_MAX:
        base_seed = 1  # the base's own validation reports it
    if "trials" in raw and "seeds" in raw:
        problems.append("seeds: give either trials (a count) or seeds (a list), not both")
    elif "seeds" in raw:
        s = raw["seeds"]
        if not isinstance(s, list) or not s or not all(
            isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= U64_MAX for x in s
        ):
            problems.append(f"seeds: {_show(s)}: must be a non-empty list of whole numbers from 0 to {U64_MAX}")
        elif len(set(s)) != len(s):
            problems.append(f"seeds: {_show(s)}: each seed at most once")
        else:
            seeds = list(s)
    else:
        n = raw.get("trials", 1)
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            problems.append(f"trials: {_show(n)}: must be a whole number >= 1 (seeds per point)")
        elif base_seed + n - 1 > U64_MAX:
            problems.append(
                f"trials: {_show(n)}: the seeds would run from {base_seed} past {U64_MAX}, the largest seed"
            )
        else:
            seeds = range(base_seed, base_seed + n)  # lazy: a count, not a list

    # steady window
    steady: Optional[tuple[int, int]] = None
    if "steady" in raw:
        s = raw["steady"]
        if not isinstance(s, list) or len(s) != 2:
            problems.append(f"steady: {_show(s)}: must be [start, end], e.g. [\"20s\", \"60s\"]")
        else:
            try:
                a, b = units.parse_time(s[0]), units.parse_time(s[1])
                if a < 0 or a >= b:
                    problems.append(f"steady: {_show(s)}: the window must start at or after 0 and before it ends")
                else:
                    steady = (a, b)
            except units.UnitError as e:
                problems.append(f"steady: {_show(s)}: {e}")

    # axes and zip groups
    axis_items: list[tuple[str, list[Any], Optional[int]]] = []
    axes_raw = raw.get("axes", {})
    if not isinstance(axes_raw, dict):
        problems.append(f"axes: {_show(axes_raw)}: must be a table of \"dotted.path\" = [values]")
        axes_raw = {}
    for path, values in axes_raw.items():
        axis_items.append((path, values, None))
    zip_raw = raw.get("zip", [])
    zip_groups = [zip_raw] if isinstance(zip_raw, dict) else zip_raw
    if not isinstance(zip_groups, list) or not all(isinstance(g, dict) for g in zip_groups):
        problems.append("zip: must be a table (or [[zip]] tables) of \"dotted.path\" = [values] of equal length")
        zip_groups = []
    for gi, group in enumerate(zip_groups):
        where = "zip" if isinstance(zip_raw, dict) else f"zip[{gi}]"
        if not group:
            problems.append(f"{where}: empty; give at least one \"dotted.path\" = [values]")
        lengths = {p: len(v) for p, v in group.items() if isinstance(v, list)}
        if len(set(lengths.values())) > 1:
            problems.append(
                f"{where}: lists of unequal length: "
                + ", ".join(f"{_qpath(p)} has {n} value{'s' if n != 1 else ''}" for p, n in lengths.items())
                + "; every list in a zip group needs the same length"
            )
        for path, values in group.items():
            axis_items.append((path, values, gi))

    seen: dict[str, str] = {}
    for path, values, in_group in axis_items:
        table = "axes" if in_group is None else ("zip" if isinstance(zip_raw, dict) else f"zip[{in_group}]")
        where = f"{table}.{_qpath(path)}"
        if not isinstance(values, list):
            problems.append(f"{where}: {_show(values)}: must be a list of values, e.g. [\"40Mbit\", \"80Mbit\"]")
            continue
        if not values:
            problems.append(f"{where}: empty list; give at least one value")
        shown = [json.dumps(v, sort_keys=True) for v in values]
        dups = sorted({s for s in shown if shown.count(s) > 1})
        if dups:
            problems.append(f"{where}: {', '.join(dups)}: listed more than once; each value at most once")
        why = check_path(path, base)
        if why:
            problems.append(f"{where}: unknown axis: {why}")
        for other, other_where in seen.items():
            if other == path:
                problems.append(f"{where}: also given as {other_where}; vary each field in one place")
            elif path.startswith(other + ".") or other.startswith(path + "."):
                problems.append(f"{where}: overlaps {other_where}; one axis sets part of the other")
        seen[path] = where

    if problems:
        raise SweepError(problems, source)

    names = _column_names([p for p, _, _ in axis_items])
    axes = [Axis(p, names[p], tuple(v), gi) for p, v, gi in axis_items]
    sweep = Sweep(name=name, raw=raw, axes=axes, seeds=seeds, steady=steady, source=source, description=description,
                  telemetry=telemetry,
                  base=base, allow_large=allow_large)
    _check_steady(sweep, base, source)
    if sweep.n_points <= FULL_CHECK_POINTS:
        sweep.check()
    else:  # checked in full when it is expanded (to run); here every axis value and a sample
        _check_points(sweep, sweep.sample_points(), source)
    return sweep


#: Sweeps of up to this many points are checked in full when read; larger ones are checked on a
#: sample when read (every axis value, a few hundred points) and in full when expanded to run.
FULL_CHECK_POINTS = 2000
#: Sweeps of more trials than this are refused unless large sweeps are allowed (--allow-large).
MAX_SWEEP_TRIALS = 100_000
#: :attr:`Sweep.specs` of up to this many trials keeps each validated trial; a larger list keeps
#: only keys and rebuilds a trial from the sweep when it is needed (about 4.6 KB a trial saved).
KEEP_TRIALS = 10_000


def _dimensions(axes: list[Axis]) -> list[list[Axis]]:
    """Axes grouped into product dimensions: each free axis alone, each zip group together, in file order."""
    dims: list[list[Axis]] = []
    zips: dict[int, list[Axis]] = {}
    for a in axes:
        if a.zip_group is None:
            dims.append([a])
        elif a.zip_group in zips:
            zips[a.zip_group].append(a)
        else:
            zips[a.zip_group] = [a]
            dims.append(zips[a.zip_group])
    return dims


def _check_steady(sweep: Sweep, base: dict[str, Any], source: Optional[str]) -> None:
    """The steady window against the base duration and every duration on an axis, told plainly."""
    if sweep.steady is None:
        return
    problems: list[str] = []
    durations: list[tuple[str, Any]] = []
    dur_axis = next((a for a in sweep.axes if a.path == "duration"), None)
    if dur_axis is not None:
        durations = [(f"axes.duration value {_show(v)}", v) for v in dur_axis.values]
    elif "duration" in base:
        durations = [(f"base.duration = {_show(base['duration'])}", base["duration"])]
    for where, v in durations:
        try:
            d = units.parse_time(v)
        except units.UnitError:
            continue  # reported by the trial's validation
        if sweep.steady[1] > d:
            problems.append(
                f"steady: {_show(list(sweep.raw['steady']))}: ends after the trial ends ({where}); "
                f"the window must lie within 0 to {units.format_time(d)}"
            )
    if problems:
        raise SweepError(problems, source)


def _check_points(sweep: Sweep, points: Iterable[int], source: Optional[str]) -> None:
    """Validate the trial of each of ``points``; raises :class:`SweepError` listing the problems
    (at most 20), each naming its point, or naming two points that are the same trial. Holds one
    key per point while it runs (two points are the same trial for every seed if for the first)."""
    problems: list[str] = []
    seen_problems: set[str] = set()
    n_bad = 0
    point_of: dict[str, int] = {}
    for point in points:
        try:
            labels, trial = sweep.point_trial(point)
        except ConfigError as e:
            labels = sweep.point_doc(point)[0]
            for p in e.problems:
                if p not in seen_problems:
                    seen_problems.add(p)
                    n_bad += 1
                    if len(problems) < 20:
                        at = f" (point {point}: {_point_text(labels)})" if labels else " (base)"
                        problems.append(p + at)
            continue
        if problems:
            continue
        key = trial_key(trial)
        other = point_of.setdefault(key, point)
        if other != point:
            raise SweepError(
                [
                    f"axes: point {point} ({_point_text(labels)}) is the same trial as point {other} "
                    f"({_point_text(sweep.point_doc(other)[0])}); the values differ only in how they are written"
                ],
                source,
            )
    if problems:
        if n_bad > len(problems):
            problems.append(f"... and {n_bad - len(problems)} more")
        raise SweepError(problems, source)
