"""The kernel backend's refusals that need no root: they run everywhere."""

from __future__ import annotations

import os

from cctestbed.kernel.topology import Names, tc_limit, tc_rate


def test_kernel_run_without_root_says_so(cli, write_trial, trial_dict, tmp_path, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    path = write_trial(trial_dict())
    r = cli("run", path, "--backend", "kernel", "-o", tmp_path / "out")
    assert r.exit_code == 2
    assert "requires root" in r.output and "sudo" in r.output
    assert not (tmp_path / "out").exists()


def test_backend_in_the_trial_file_selects_the_kernel(cli, write_trial, trial_dict, tmp_path, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    r = cli("run", write_trial(trial_dict(backend="kernel")), "-o", tmp_path / "out")
    assert r.exit_code == 2 and "requires root" in r.output


def test_unknown_backend_is_refused(cli, write_trial, trial_dict, tmp_path):
    r = cli("run", write_trial(trial_dict()), "--backend", "ns3", "-o", tmp_path / "out")
    assert r.exit_code == 2 and "backend" in r.output


def test_tc_units_count_ethernet_headers():
    # a 1514-byte frame at the tc rate takes exactly as long as 1500 IP bytes at the capacity
    assert tc_rate(80_000_000, 1500) == 80_746_667
    assert 1514 * 8 / tc_rate(80_000_000, 1500) == 1500 * 8 / 80_000_000 or abs(
        1514 * 8 / tc_rate(80_000_000, 1500) - 1500 * 8 / 80_000_000
    ) < 1e-12
    # the queue holds as many full-size packets as the simulator's
    for limit in (125_000, 250_000, 1_000_000, 1500, 4499):
        assert tc_limit(limit, 1500) // 1514 == limit // 1500


def test_names_are_unique_per_trial_and_fit_interfaces():
    a, b = Names("a1b2c3", 4), Names("d4e5f6", 4)
    assert not set(a.all_ns()) & set(b.all_ns())
    for n in (a, b):
        for dev in (n.left, n.right, n.uplink, n.bridge, n.ifb, n.host_if(3), n.swl_port(3), n.swr_port(3)):
            assert len(dev) <= 15
        assert n.ip("snd", 0).startswith("10.") and n.ip("rcv", 3).endswith(".132")


def test_the_router_sampler_reads_the_link_emulators_stats_slots_in_their_order():
    # One list per concept: the emulator's enum Slot and enum ModelSlot (main.rs) declare the
    # stats file's slots; routerstats.EMU_SLOTS must name the same ones in the same order.
    import re
    from pathlib import Path

    from cctestbed.kernel.routerstats import EMU_BASE_SLOTS, EMU_MODEL_SLOTS, EMU_SLOTS

    src = (Path(__file__).parents[1] / "crates/cctestbed-linkemu/src/main.rs").read_text()

    def variants(enum: str) -> list[str]:
        body = re.search(rf"enum {enum} \{{(.*?)\n\}}", src, re.S)
        assert body is not None, enum
        names = re.findall(r"^\s+([A-Z][A-Za-z0-9]*)(?: = \d+)?,", body.group(1), re.M)
        snake = [re.sub(r"(?<!^)(?=[A-Z])", "_", n).lower() for n in names]
        assert snake[-1] == "count"
        return snake[:-1]

    rename = {"late_over1ms": "late_over_1ms"}
    assert [rename.get(n, n) for n in variants("Slot")] == list(EMU_BASE_SLOTS)
    assert variants("ModelSlot") == list(EMU_MODEL_SLOTS)
    assert len(EMU_SLOTS) == len(EMU_BASE_SLOTS) + 2 * len(EMU_MODEL_SLOTS) + 1
    # the trial's time 0 comes last, after the model blocks (EPOCH_SLOT)
    assert EMU_SLOTS[-1] == "epoch_ns"
    assert re.search(r"const EPOCH_SLOT: usize = MODEL_REV \+ ModelSlot::Count as usize;", src)
