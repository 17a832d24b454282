"""AQM, ECN, mixed path lengths, traces and ACK aggregation on the kernel backend, through the ``full`` link emulator: the
userspace emulator runs the simulator's own bottleneck and queue disciplines (this kernel has no
codel, fq_codel, pie, red or dualpi2 qdisc), writes CE marks into the real IP headers, and
delays each flow's own frames by its ``extra_delay``. Each trial is compared with the simulator
within the fidelity suite's tolerances (``cctestbed.fidelity.verdict``); measured figures are
printed (``pytest -s`` shows them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import polars as pl
import pytest
from kernelutil import check_on_quiet_host, kernel_trial, metrics_of, run_with_sim_schema

from cctestbed.config import parse_trial
from cctestbed.fidelity.verdict import DEFAULT_TOLERANCES, tolerance_for
from cctestbed.kernel.checks import KernelUnavailable, choose_link_emulator, trial_problems
from cctestbed.kernel.routerstats import emulator_late_p99_us
from cctestbed.runner import run_trial

#: The emulator's per-frame timing error (sent - due), 99th percentile, that a trial of these
#: rates may show and still measure the path it describes; at 50 and 80 Mbit/s the emulator
#: measured 70-128 us (docs/kernel.md, "The full link emulator").
TIMING_P99_US = 400.0


def within(metric: str, kernel: float, sim: float) -> bool:
    return abs(kernel - sim) <= tolerance_for(metric, kernel, DEFAULT_TOLERANCES)


def emulator_p99_us(r: Any) -> float:
    emu = r.extra["linkemu"]
    assert emu["mode"] == "model" and r.extra["link_emulator"] == "full"
    return emulator_late_p99_us(emu)


def test_the_full_link_emulator_is_chosen_for_what_htb_cannot_do() -> None:
    link = kernel_trial()["link"]
    for doc in (dict(link={**link, "aqm": "codel"}),
                dict(flows=[{"cc": "cubic"}, {"cc": "cubic", "extra_delay": "10ms"}]),
                dict(link={**link, "reverse": {"capacity": "10Mbit", "queue": "100KB", "aqm": "pie", "loss": "1%"}})):
        t = parse_trial(kernel_trial(**doc))
        assert trial_problems(t) == []
        assert choose_link_emulator(None, t) == "full"
        for other in ("userspace", "tc"):
            with pytest.raises(KernelUnavailable, match="use --link-emulator full"):
                choose_link_emulator(other, t)
    plain = parse_trial(kernel_trial())
    assert choose_link_emulator("full", plain) == "full"
    assert choose_link_emulator(None, plain) in ("tc", "userspace")
    # from 250 Mbit/s the full emulator's batched loop is the default (docs/kernel.md: the delay
    # lines before htb fell 14.7 ms behind at 500 Mbit/s), and the others stay selectable
    fast = parse_trial(kernel_trial(link={**link, "capacity": "500Mbit"}))
    assert choose_link_emulator(None, fast) == "full"
    assert choose_link_emulator("userspace", fast) == "userspace"
    l4s = parse_trial(kernel_trial(flows=[{"cc": "dctcp", "ecn": "l4s"}]))
    assert any(p.startswith("flows[0].ecn: 'l4s'") for p in trial_problems(l4s))


CODEL = dict(name="codel-4cubic", duration="20s", steady=["5s", "20s"],
             link={"capacity": "80Mbit", "rtt": "25ms", "queue": "2bdp", "aqm": "codel"},
             flows=[{"cc": "cubic", "count": 4}])


def test_codel_holds_four_cubic_flows_near_its_target_as_the_simulator_does() -> None:
    sim = run_trial(parse_trial(kernel_trial(**CODEL)))

    def check(r: Any) -> None:
        k, s = r.summary, sim.summary
        soj, sim_soj = k["sojourn"]["p50_ms"], s["sojourn"]["p50_ms"]
        print(f"\nkernel: utilization {100 * k['total']['utilization']:.1f} %, sojourn p50 {soj:.2f} ms, "
              f"RTT p50 {k['rtt']['p50_ms']:.1f} ms, queue mean {k['queue']['mean_bdp']:.3f} BDP, "
              f"drops_aqm {int(r.router['drops_aqm'].max())}, overflow {int(r.router['drops_overflow'].max())}, Jain {k['total']['jain']:.3f}, "
              f"emulator p99 {emulator_p99_us(r):.0f} us; simulator: utilization {100 * s['total']['utilization']:.1f} %, "
              f"sojourn p50 {sim_soj:.2f} ms, RTT p50 {s['rtt']['p50_ms']:.1f} ms, queue mean {s['queue']['mean_bdp']:.3f} BDP")
        assert emulator_p99_us(r) <= TIMING_P99_US
        assert 3.0 <= soj <= 8.0, "near CoDel's 5 ms target"
        # the fidelity suite has no sojourn metric: the sojourn is held to the tolerance of the RTT
        # it is part of (10 % of the RTT, 3.1 ms here). Measured 5.6-7.6 ms against the
        # simulator's 5.2 ms: the kernel's senders send GSO trains, burstier than the model's.
        assert abs(soj - sim_soj) <= tolerance_for("rtt_p50_ms", k["rtt"]["p50_ms"], DEFAULT_TOLERANCES)
        # start-up's overshoot may reach the hard limit before CoDel's first interval ends
        overflow = r.router.filter(pl.col("time_s") > 5.0)["drops_overflow"]
        assert r.router["drops_aqm"].max() > 0, "CoDel drops"
        assert overflow.max() == overflow.min(), "after start-up CoDel, not the limit, drops"
        assert within("utilization_pct", 100 * k["total"]["utilization"], 100 * s["total"]["utilization"])
        assert within("rtt_p50_ms", k["rtt"]["p50_ms"], s["rtt"]["p50_ms"])
        assert within("queue_mean_bdp", k["queue"]["mean_bdp"], s["queue"]["mean_bdp"])
        assert within("jain", k["total"]["jain"], s["total"]["jain"])

    check_on_quiet_host(lambda: run_with_sim_schema(**CODEL), check)


ECN = dict(name="codel-ecn", duration="20s", steady=["5s", "20s"],
           link={"capacity": "80Mbit", "rtt": "25ms", "queue": "2bdp", "aqm": {"kind": "codel", "ecn": True}},
           flows=[{"cc": "cubic", "count": 2, "ecn": True}])


def retrans_after(r: Any, t_s: float, group: Optional[str] = None) -> int:
    """Segments retransmitted after ``t_s`` by the trial's TCP flows (of ``group`` if given)."""
    f = r.flows.filter((pl.col("kind") == "tcp") & ((pl.col("group") == group) if group else pl.lit(True)))
    at = f.filter(pl.col("time_s") <= t_s).group_by("flow").agg(pl.col("retrans_segs").max())
    end = f.group_by("flow").agg(pl.col("retrans_segs").max())
    return int(end["retrans_segs"].sum() - at["retrans_segs"].sum())


def test_cubic_with_ecn_under_codel_is_marked_not_dropped() -> None:
    sim = run_trial(parse_trial(kernel_trial(**ECN)))

    def check(r: Any) -> None:
        k, s = r.summary, sim.summary
        marks, drops = int(r.router["marks_aqm"].max()), int(r.router["drops_aqm"].max())
        written = r.extra["linkemu"]["model"]["forward"]["ce_written"]
        late = retrans_after(r, 3.0)
        print(f"\nkernel: {marks} CE marks ({written} written into frames), {drops} AQM drops, "
              f"{late} retransmissions after 3 s, utilization {100 * k['total']['utilization']:.1f} %, "
              f"sojourn p50 {k['sojourn']['p50_ms']:.2f} ms, RTT p50 {k['rtt']['p50_ms']:.1f} ms, emulator p99 "
              f"{emulator_p99_us(r):.0f} us; simulator: {int(sim.router['marks_aqm'].max())} marks, "
              f"{retrans_after(sim, 3.0)} retransmissions after 3 s, utilization {100 * s['total']['utilization']:.1f} %, "
              f"sojourn p50 {s['sojourn']['p50_ms']:.2f} ms, RTT p50 {s['rtt']['p50_ms']:.1f} ms")
        assert emulator_p99_us(r) <= TIMING_P99_US
        assert marks > 0 and written == marks, "every mark reached a real IP header"
        assert drops == 0, "ECN-capable data is marked, not dropped"
        assert late == 0, "no retransmission after start-up"
        assert within("utilization_pct", 100 * k["total"]["utilization"], 100 * s["total"]["utilization"])
        assert within("rtt_p50_ms", k["rtt"]["p50_ms"], s["rtt"]["p50_ms"])

    check_on_quiet_host(lambda: run_with_sim_schema(**ECN), check)


# --- the tests below compare one kernel trial with the mean of the simulator's seeds, on the
# fidelity suite's metrics and tolerances (the suite's `rttmix`, `aqm`, `ecn`, `trace` and
# `ackagg` families hold three or six 25-40 s reps of each on both sides; these are shorter
# checks that the kernel backend still runs each feature as the simulator does).

ROOT = Path(__file__).resolve().parents[2]


def sim_runs(spec: dict[str, Any], seeds: range = range(1, 9)) -> list[Any]:
    """``spec`` on the simulator, one result for each of ``seeds``."""
    return [run_trial(parse_trial(kernel_trial(**{**spec, "seed": s}))) for s in seeds]


def seed_mean(results: list[Any]) -> dict[str, float]:
    """The fidelity suite's metrics of ``results``, each the mean over them."""
    runs = [metrics_of(r) for r in results]
    return {k: sum(r[k] for r in runs) / len(runs) for k in runs[0]
            if all(isinstance(r.get(k), (int, float)) for r in runs)}


def sim_metrics(spec: dict[str, Any], seeds: range = range(1, 9)) -> dict[str, float]:
    """The fidelity suite's metrics of ``spec`` on the simulator, each the mean over ``seeds``."""
    return seed_mean(sim_runs(spec, seeds))


def marks_written(r: Any) -> tuple[int, int]:
    """The emulator's own count of CE marks over its whole run (its report, not the sampled router
    series, which ends with the trial's last sample) and the CE marks it wrote into frames."""
    fwd = r.extra["linkemu"]["model"]["forward"]
    return sum(fwd["router"]["marks"].values()), fwd["ce_written"]


def compare(name: str, k: dict[str, Any], s: dict[str, float], metrics: list[str]) -> list[str]:
    """Prints each metric on both sides; returns those out of tolerance."""
    print(f"\n{name}: " + ", ".join(f"{m} kernel {k[m]:.3f} simulator {s[m]:.3f}" for m in metrics))
    return [m for m in metrics if not within(m, k[m], s[m])]


#: Two path lengths under one drop-tail bottleneck: RTprop 20 ms and 50 ms (30 ms of extra delay
#: on the long group's own frames, before the queue, as the simulator's access line), a CUBIC flow
#: on the short path and a BBR flow on the long one. One run pins this split: the kernel's short
#: path took 8.9-9.8 % in the suite's three 30 s reps (rttmix-bbr-cubic-20-50), the simulator's
#: 9.0-10.8 % over seeds 1-20 of this 25 s trial (the share tolerance is 8 points). Two CUBIC flows
#: do not: their split through the drop-tail queue turns on the flows' phases (Floyd and Jacobson
#: 1992), 56.6-76.7 % for the short path over the kernel's runs, so one run is one draw and
#: a single run's check failed on a quiet CI host (75.0 % against the simulator's mean of 62.8);
#: that pair is held by the suite's reps (rttmix-2cubic-20-50, three kernel runs against 20 seeds).
RTTMIX = dict(name="rttmix", duration="25s", steady=["5s", "25s"],
              link={"capacity": "50Mbit", "rtt": "20ms", "queue": "2bdp"},
              flows=[{"cc": "cubic", "group": "short"}, {"cc": "bbr", "group": "long", "extra_delay": "30ms"}])

#: The simulator's side: the mean of 8 seeds, each its own phase of the kernel's tick clock.
SIM_SEEDS = range(1, 9)


def test_two_path_lengths_share_one_bottleneck_as_in_the_simulator() -> None:
    s = sim_metrics(RTTMIX, SIM_SEEDS)
    rtprop = {"short": 20.0, "long": 50.0}

    def check(r: Any) -> None:
        min_rtt = {g: float(r.flows.filter(pl.col("group") == g)["min_rtt_ms"].min()) for g in rtprop}
        print(f"\nkernel: min RTT short {min_rtt['short']:.2f} ms, long {min_rtt['long']:.2f} ms; loss "
              f"{r.summary['total']['loss_pct']:.3f} %, emulator p99 {emulator_p99_us(r):.0f} us; simulator: mean of "
              f"{len(SIM_SEEDS)} seeds")
        misses = compare("rttmix", metrics_of(r), s, ["utilization_pct", "share.short", "share.long", "loss_pct"])
        assert emulator_p99_us(r) <= TIMING_P99_US
        for g, base in rtprop.items():
            # the kernel's min_rtt: RTprop plus a full packet's transmission (0.24 ms at 50 Mbit/s)
            # and the hosts' own stack time
            assert base <= min_rtt[g] <= base + 1.5, (g, min_rtt[g])
        assert not misses, misses

    check_on_quiet_host(lambda: run_with_sim_schema(**RTTMIX), check)


AQM_FEATURES = {
    # the FQ-CoDel check: one BBR flow gets its fair share beside four CUBIC
    "fqcodel-1bbr-4cubic": dict(
        link={"capacity": "80Mbit", "rtt": "25ms", "queue": "2bdp", "aqm": "fq_codel"},
        flows=[{"cc": "bbr"}, {"cc": "cubic", "count": 4}],
        metrics=["utilization_pct", "share.bbr", "share.cubic", "rtt_p50_ms"]),
    "pie-4cubic": dict(
        link={"capacity": "80Mbit", "rtt": "25ms", "queue": "2bdp", "aqm": "pie"},
        flows=[{"cc": "cubic", "count": 4}],
        metrics=["utilization_pct", "queue_mean_bdp", "rtt_p50_ms"]),
    # RED's utilization is left out: the kernel's senders' bursts push its fast average over max
    # in some runs (88.7-99.0 % over the suite's reps, docs/fidelity.md)
    "red-ecn-4cubic": dict(
        link={"capacity": "80Mbit", "rtt": "25ms", "queue": "2bdp", "aqm": {"kind": "red", "ecn": True}},
        flows=[{"cc": "cubic", "count": 4, "ecn": True}],
        metrics=["queue_mean_bdp", "rtt_p50_ms"]),
}


@pytest.mark.parametrize("name", list(AQM_FEATURES))
def test_queue_disciplines_run_on_the_kernel_as_in_the_simulator(name: str) -> None:
    f = AQM_FEATURES[name]
    spec = dict(name=name, duration="15s", steady=["5s", "15s"], link=f["link"], flows=f["flows"])
    s = sim_metrics(spec)

    def check(r: Any) -> None:
        k = metrics_of(r)
        misses = compare(name, k, s, f["metrics"])
        marks, drops = int(r.router["marks_aqm"].max()), int(r.router["drops_aqm"].max())
        print(f"{name}: {marks} CE marks, {drops} AQM drops, Jain {k['jain']:.3f}, emulator p99 {emulator_p99_us(r):.0f} us")
        assert emulator_p99_us(r) <= TIMING_P99_US
        assert not misses, misses
        if name.startswith("fqcodel"):
            assert k["jain"] >= 0.95, "FQ-CoDel shares the link evenly"
        if "ecn" in name:
            total, written = marks_written(r)
            assert marks > 0 and written == total, "every mark reached a real IP header"
            assert drops == 0, "ECN-capable data is marked, not dropped"
        else:
            assert drops > 0, "the discipline, not the limit, drops"

    check_on_quiet_host(lambda: run_with_sim_schema(**spec), check)


#: DualPI2 with one ECN-capable CUBIC flow (ECT(0): the classic queue, marked at the classic
#: probability) and one without: the first is marked, the second dropped, and both keep a share.
DUALPI2 = dict(name="dualpi2-ecn-classic", duration="15s", steady=["5s", "15s"],
               link={"capacity": "80Mbit", "rtt": "25ms", "queue": "2bdp", "aqm": "dualpi2"},
               flows=[{"cc": "cubic", "ecn": True, "group": "ecn"}, {"cc": "cubic", "group": "classic"}])


def test_dualpi2_marks_the_ecn_flow_and_drops_the_classic_one() -> None:
    s = sim_metrics(DUALPI2)

    def check(r: Any) -> None:
        k = metrics_of(r)
        misses = compare("dualpi2", k, s, ["utilization_pct"])
        marks, drops = int(r.router["marks_aqm"].max()), int(r.router["drops_aqm"].max())
        overflow = int(r.router["drops_overflow"].max())
        retrans = {g: int(r.flows.filter(pl.col("group") == g)["retrans_segs"].max()) for g in ("ecn", "classic")}
        late = {"ecn": retrans_after(r, 3.0, "ecn")}
        print(f"dualpi2: {marks} CE marks, {drops} AQM drops, {overflow} at the hard limit, retransmissions {retrans} "
              f"({late['ecn']} of the ECN flow's after 3 s), "
              f"shares ecn {k['share.ecn']:.1f} / classic {k['share.classic']:.1f} %, emulator p99 {emulator_p99_us(r):.0f} us")
        assert emulator_p99_us(r) <= TIMING_P99_US
        assert not misses, misses
        total, written = marks_written(r)
        assert marks > 0 and written == total, "every mark reached a real IP header"
        assert drops > 0 and retrans["classic"] > 0, "the classic flow's packets are dropped"
        # after start-up: a CI run (steal 0) retransmitted 94 of the ECN flow's segments and 111
        # of the classic's with 40 AQM drops in all, so most of its losses were not the
        # discipline's (a start-up overshoot to the hard limit; the limit's drops were not
        # printed then); the CoDel ECN test counts from 3 s for the same reason
        assert late["ecn"] == 0, "the ECN flow's are marked"
        assert min(k["share.ecn"], k["share.classic"]) >= 30.0, "neither flow starves"

    check_on_quiet_host(lambda: run_with_sim_schema(**DUALPI2), check)


#: DCTCP as the kernel's own BPF selftest object (tools/testing/selftests/bpf/progs/bpf_dctcp.c,
#: built by `make kernel-selftests`): this kernel has no tcp_dctcp, so the object is registered
#: through struct_ops on both hosts' kernel (the receiver echoes each packet's CE from the
#: object's cwnd_event) and run by the simulator's BPF interpreter on the other side. The marking
#: is DCTCP's step: CoDel's ce_threshold marks every ECN-capable packet whose sojourn exceeds 4 ms.
DCTCP_OBJ = ROOT / "target" / "selftests" / "bpf_dctcp.o"
DCTCP = dict(name="dctcp-bpf-step", duration="20s", steady=["5s", "20s"],
             link={"capacity": "80Mbit", "rtt": "25ms", "queue": "2bdp",
                   "aqm": {"kind": "codel", "ecn": True, "ce_threshold": "4ms"}},
             flows=[{"cc": f"bpf:{DCTCP_OBJ}#bpf_dctcp", "count": 2, "ecn": True}])


def _dctcp_unavailable() -> Optional[str]:
    from cctestbed.kernel import bpfcc

    if not DCTCP_OBJ.exists():
        return f"{DCTCP_OBJ} not built: `make kernel-selftests` (needs Debian's linux-source-6.12, clang, libbpf-dev)"
    return bpfcc.kernel_support()


@pytest.mark.skipif(_dctcp_unavailable() is not None, reason=_dctcp_unavailable() or "")
def test_dctcp_as_the_kernels_bpf_object_holds_the_queue_at_its_mark_threshold_as_in_the_simulator() -> None:
    runs = sim_runs(DCTCP)
    s, sim = seed_mean(runs), runs[0]  # the marks and sojourn of seed 1, as the kernel trial's seed
    # not the two flows' split: the kernel's part from the start and keep parting (Jain 0.79-0.87
    # over 8-25 s, 0.975 over 5-20 s once) where the simulator's converge: a known deviation of
    # the fidelity suite (ecn-dctcp-2flows-step4ms): the split is bistable, and the simulator's
    # flows part the same way in some seeds once its ACKs carry 100-200 us of jitter
    metrics = ["utilization_pct", "queue_mean_bdp", "rtt_p50_ms"]

    def check(r: Any) -> None:
        k = metrics_of(r)
        misses = compare("dctcp", k, s, metrics)
        marks, drops = int(r.router["marks_threshold"].max()), int(r.router["drops_aqm"].max())
        soj, sim_soj = r.summary["sojourn"]["p50_ms"], sim.summary["sojourn"]["p50_ms"]
        late = retrans_after(r, 3.0)
        print(f"dctcp: {marks} threshold marks (simulator {int(sim.router['marks_threshold'].max())}), {drops} AQM "
              f"drops, {late} retransmissions after 3 s, sojourn p50 {soj:.2f} / {sim_soj:.2f} ms, "
              f"algorithm in use {r.extra['senders']['0']['cc']}, emulator p99 {emulator_p99_us(r):.0f} us")
        assert emulator_p99_us(r) <= TIMING_P99_US
        total, written = marks_written(r)
        assert marks > 0 and written == total, "every mark reached a real IP header"
        assert drops == 0 and late == 0, "DCTCP is held by marks alone"
        # the sojourn is held to the tolerance of the RTT it is part of (as the CoDel test's)
        assert abs(soj - sim_soj) <= tolerance_for("rtt_p50_ms", k["rtt_p50_ms"], DEFAULT_TOLERANCES)
        assert not misses, misses

    check_on_quiet_host(lambda: run_with_sim_schema(**DCTCP), check)


#: One CUBIC flow over the step-24-6 trace (24 Mbit/s for 10 s, then 6 Mbit/s), one full period.
TRACE = dict(name="trace-step-cubic", duration="30s", steady=["10s", "30s"],
             link={"trace": str(ROOT / "examples/traces/step-24-6.trace"), "rtt": "40ms", "queue": "2bdp"},
             flows=[{"cc": "cubic"}])

#: One BBR flow whose ACKs are released every 4 ms: Linux's BBR keeps a standing queue (its
#: delivery-rate samples across a burst run above the link), as the simulator's does.
ACKAGG = dict(name="ackagg-periodic4-bbr", duration="20s", steady=["8s", "20s"],
              link={"capacity": "50Mbit", "rtt": "20ms", "queue": "2bdp",
                    "ack_aggregation": {"model": "periodic", "interval": "4ms"}},
              flows=[{"cc": "bbr"}])


@pytest.mark.parametrize("spec,metrics", [
    (TRACE, ["utilization_pct", "loss_pct", "queue_mean_bdp", "rtt_p50_ms"]),
    (ACKAGG, ["utilization_pct", "queue_mean_bdp", "rtt_p50_ms"]),
], ids=["trace", "ack-aggregation"])
def test_traces_and_ack_aggregation_run_on_the_kernel_as_in_the_simulator(spec: dict[str, Any], metrics: list[str]) -> None:
    s = sim_metrics(spec)

    def check(r: Any) -> None:
        misses = compare(spec["name"], metrics_of(r), s, metrics)
        assert emulator_p99_us(r) <= TIMING_P99_US
        assert not misses, misses

    check_on_quiet_host(lambda: run_with_sim_schema(**spec), check)
