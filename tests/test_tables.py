"""The result tables: one declaration of each table's columns and one builder that every backend
feeds (``cctestbed.schema``). The kernel backend's tables are built from runs it recorded
(``tests/data/kernel-runs``), without a kernel."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from cctestbed import run_trial
from cctestbed.captures import analyze_captures
from cctestbed.config import Trial, load_trial
from cctestbed.kernel.columns import RawRun, kernel_tables
from cctestbed.schema import (FLOW_TRIAL_COLUMNS, Column, build_table, completion_columns, flow_columns,
                              router_columns, trial_labels)

RUNS = Path(__file__).parent / "data" / "kernel-runs"


def recorded_run(name: str) -> tuple[Path, Trial, RawRun, str]:
    d = RUNS / name
    trial = load_trial(d / "trial.toml")
    mode = json.loads((d / "run.json").read_text())["link_emulator"]
    return d, trial, RawRun.load(d, len(trial.flows)), mode


def names(columns: list[Column]) -> list[str]:
    return [c.name for c in columns]


@pytest.mark.parametrize("name", sorted(p.name for p in RUNS.iterdir() if p.is_dir()))
def test_kernel_tables_from_a_recorded_run_are_the_ones_it_wrote(name: str) -> None:
    d, trial, raw, mode = recorded_run(name)
    flows, router, fct = kernel_tables(trial, raw, mode)
    for got, file in ((flows, "flows.parquet"), (router, "router.parquet")):
        want = pl.read_parquet(d / file)
        assert got.columns == want.columns and got.dtypes == want.dtypes, file
        assert got.equals(want, null_equal=True), file
    assert flows.columns == names(flow_columns(trial)) and router.columns == names(router_columns())
    assert fct.columns == names(completion_columns()) and len(fct) == 0  # bulk flows: no completions
    assert set(flows["backend"]) == {"kernel"} and set(flows["group"]) == {g.label for g in trial.flows}


# --- a column declared once reaches every backend's table ---------------------------------------

TOY = ("toy_ms", "f64", "ms", "a per-flow column declared for this test")


@pytest.fixture
def toy_column(monkeypatch: pytest.MonkeyPatch) -> None:
    """The core declares one more per-flow column, as a new field of ``FlowSeries``
    (telemetry.rs) would, and the simulator fills it (here: twice ``rtt_ms``)."""
    from cctestbed import _core

    columns, simulate = _core.columns, _core.simulate

    def declared(*args: Any) -> Any:
        d = columns(*args)
        return {**d, "flows": [*d["flows"], TOY]}

    def filled(*args: Any) -> Any:
        raw = simulate(*args)
        raw["flows"]["toy_ms"] = 2 * raw["flows"]["rtt_ms"]
        return raw

    monkeypatch.setattr(_core, "columns", declared)
    monkeypatch.setattr(_core, "simulate", filled)


def test_a_declared_per_flow_column_is_in_every_backends_table(toy_column: None, tmp_path: Path) -> None:
    sim_trial = load_trial({"name": "toy", "duration": "1s", "seed": 1,
                            "link": {"capacity": "10Mbit", "rtt": "20ms", "queue": "1bdp"},
                            "flows": [{"cc": "cubic"}, {"cc": "bbr", "start": "0.1s"}],
                            "capture": {"points": ["senders", "receivers"]}})
    r = run_trial(sim_trial)
    r.save(tmp_path / "sim")
    _, kernel_trial, raw, mode = recorded_run("full-2bbr")
    kernel = kernel_tables(kernel_trial, raw, mode)[0]
    capture = analyze_captures([tmp_path / "sim" / f for f in ("snd0.pcap", "rcv0.pcap", "snd1.pcap", "rcv1.pcap")],
                               trial=sim_trial).flows

    for flows, trial in ((r.flows, sim_trial), (kernel, kernel_trial), (capture, None)):
        declared = names(flow_columns(trial))
        assert "toy_ms" in declared and flows.columns == declared
        assert flows.schema["toy_ms"] == pl.Float64
    # filled where the backend names it (the simulator), null where it does not
    sim = r.flows.select("rtt_ms", "toy_ms").to_numpy()
    assert np.array_equal(sim[:, 1], 2 * sim[:, 0], equal_nan=True) and r.flows["toy_ms"].null_count() == 0
    assert kernel["toy_ms"].null_count() == len(kernel) > 0
    assert capture["toy_ms"].null_count() == len(capture) > 0
    # and it is written with the rest
    assert pl.read_parquet(tmp_path / "sim" / "flows.parquet").columns == r.flows.columns


# --- the builder ---------------------------------------------------------------------------------

COLUMNS = [
    Column("time_s", pl.Float64(), "s", ""),
    Column("flow", pl.UInt32(), "", ""),
    *FLOW_TRIAL_COLUMNS,
    Column("sent_bytes", pl.UInt64(), "B", ""),
    Column("rtt_ms", pl.Float64(), "ms", ""),
    Column("state", pl.String(), "label", ""),
    Column("backend", pl.String(), "label", ""),
]


def test_the_builder_orders_types_labels_and_leaves_null_what_is_not_named() -> None:
    trial = load_trial({"name": "b", "duration": "1s", "link": {"capacity": "10Mbit", "rtt": "20ms", "queue": "1bdp"},
                        "flows": [{"cc": "cubic", "group": "a"}, {"kind": "udp", "rate": "1Mbit"}]})
    nan = math.nan
    t = build_table(COLUMNS, {"rtt_ms": [5.0, nan, 7.0], "flow": np.array([1, 0, 1]), "time_s": [0.1, 0.1, 0.2],
                              "sent_bytes": [10.0, nan, 30.0], "not_declared": [1, 2, 3]}, 3, "sim", trial_labels(trial))
    assert t.columns == names(COLUMNS) and t.dtypes == [c.dtype for c in COLUMNS]
    assert t["sent_bytes"].to_list() == [10, None, 30]  # NaN (not measured) is null in an integer column
    assert math.isnan(t["rtt_ms"][1])  # and stays NaN in a float one
    assert t["state"].to_list() == [None] * 3 and t["backend"].to_list() == ["sim"] * 3
    assert t["cc"].to_list() == ["udp", "cubic", "udp"] and t["group"].to_list() == ["udp", "a", "udp"]
    assert t["kind"].to_list() == ["udp", "tcp", "udp"] and t["direction"].to_list() == ["forward"] * 3
    empty = build_table(COLUMNS, {}, 0, "kernel")
    assert empty.columns == names(COLUMNS) and empty.dtypes == t.dtypes and len(empty) == 0


def test_frames_lost_outside_the_link_count_interface_refusals_only_where_the_emulator_is_the_bottleneck() -> None:
    from cctestbed.kernel.routerstats import frames_lost_outside_the_link

    counters = {"sock_drops": 2, "fwd_tx_refused": 5, "rev_tx_refused": 1}
    # full: the emulator is the bottleneck, so a refused frame is lost outside the link it models
    assert frames_lost_outside_the_link({"mode": "model", "counters": counters}) == 8
    # userspace: the interface it writes to holds the htb + bfifo bottleneck, whose refusals are
    # the link's own drops; its socket's overflow is still a loss outside the link
    assert frames_lost_outside_the_link({"mode": "delay", "counters": counters}) == 2
    assert frames_lost_outside_the_link(None) == 0


def test_the_emulators_lateness_is_the_later_of_its_two_directions() -> None:
    from cctestbed.fidelity.reference import disturbed
    from cctestbed.kernel.routerstats import EMULATOR_LATE_P99_US, emulator_late_p99_us

    # a stalled ACK path disturbs a run as much as a stalled data path
    emu = {"timing_error_fwd": {"p99_us": 120.0}, "timing_error_rev": {"p99_us": 3910.0}}
    assert emulator_late_p99_us(emu) == 3910.0 > EMULATOR_LATE_P99_US
    assert "3.9 ms late" in (disturbed({"emu_p99_us": emulator_late_p99_us(emu)}) or "")
    assert emulator_late_p99_us({"timing_error_fwd": {"p99_us": 120.0}}) == 120.0
    assert disturbed({"emu_p99_us": 120.0}) is None
    assert emulator_late_p99_us(None) is None and emulator_late_p99_us({"mode": "delay"}) is None


def test_a_stall_as_long_as_the_buffer_drains_disturbs_a_run_and_a_shorter_one_does_not() -> None:
    from cctestbed.fidelity.reference import disturbed
    from cctestbed.kernel.routerstats import emulator_stall_ms, stall_overflow

    # 0.073 BDP at 1 Gbit/s, 88 ms drains in 6.4 ms; 2 BDP at 80 Mbit/s, 25 ms in 50 ms
    emu = {"timing_error_fwd": {"max_us": 6983.5}, "timing_error_rev": {"max_us": 8187.7},
           "stalls": {"count": 1, "kept": [{"t_s": 19.053, "max_late_us": 8187.7}]}}
    assert emulator_stall_ms(emu) == 8.1877 and emulator_stall_ms(None) == 0.0
    why = stall_overflow(emu, {"buffer_drain_us": 6424.0}) or ""
    assert "8.2 ms at 19.05 s" in why and "6.4 ms" in why
    assert stall_overflow(emu, {"buffer_drain_us": 50000.0}) is None
    assert stall_overflow(emu, {"buffer_drain_us": None}) is None  # no limit, nothing to overflow
    assert "stalled for 8.2 ms" in (disturbed({"emu_stall_ms": 8.19, "buffer_drain_ms": 6.42}) or "")
    assert disturbed({"emu_stall_ms": 5.0, "buffer_drain_ms": 6.42}) is None
    assert disturbed({"emu_stall_ms": None, "buffer_drain_ms": None}) is None  # rows before the columns
