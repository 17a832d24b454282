//! Invariants every trial must keep: conservation of packets and bytes, progress under loss,
//! determinism.

mod common;
use ccsim::config::LossConfig;
use ccsim::qdisc::DropCause;
use common::*;
use proptest::prelude::*;

fn check_conservation(out: &ccsim::SimOutput) {
    for (i, f) in out.flow_final.iter().enumerate() {
        assert_eq!(
            f.sent_pkts,
            f.delivered_pkts + f.dropped_pkts + f.queued_pkts + f.in_transit_pkts,
            "flow {i}: sent != delivered + dropped + queued + in transit: {f:?}"
        );
    }
    let r = out.router_final;
    assert_eq!(r.arrival_bytes, r.departed_bytes + r.dropped_bytes + out.router_queued_bytes, "router bytes: {r:?}");
    assert_eq!(
        r.arrivals_pkts,
        r.departures_pkts + r.drops.total()
            + out.flow_final.iter().map(|f| f.queued_pkts).sum::<u64>()
    );
}

/// Longest span (s) over which flow `f` delivered nothing, after `from` seconds.
fn longest_stall(out: &ccsim::SimOutput, f: u32, from: f64) -> f64 {
    let mut last_progress = from;
    let mut prev = None;
    let mut worst: f64 = 0.0;
    for i in 0..out.flows.time_s.len() {
        if out.flows.flow[i] != f || out.flows.time_s[i] < from {
            continue;
        }
        let (t, d) = (out.flows.time_s[i], out.flows.delivered_bytes[i]);
        if prev.is_some_and(|p| d > p) {
            last_progress = t;
        }
        worst = worst.max(t - last_progress);
        prev = Some(d);
    }
    worst
}

#[test]
fn conservation_and_progress_under_random_loss() {
    for p in [0.0, 0.01, 0.05, 0.10] {
        for cc in ["reno", "cubic", "bbr"] {
            let mut c = with_flows(dumbbell(20_000_000, 30 * MS, 1.0), vec![flow(cc), flow(cc)]);
            c.duration_ns = 30 * S;
            c.link.loss = LossConfig::Bernoulli { p };
            let out = run(c);
            check_conservation(&out);
            for f in 0..2 {
                let stall = longest_stall(&out, f, 0.5);
                assert!(stall < 3.0, "{cc} flow {f} at loss {p}: no delivery for {stall:.2} s");
                assert!(out.flow_final[f as usize].delivered_bytes > 0);
            }
            if p > 0.0 {
                assert!(out.router_final.drops[DropCause::Random] > 0);
            }
        }
    }
}

#[test]
fn same_seed_is_identical_and_another_seed_differs_under_loss() {
    let mk = |seed| {
        let mut c = with_flows(dumbbell(50_000_000, 20 * MS, 1.0), vec![flow("cubic"), flow("reno")]);
        c.duration_ns = 5 * S;
        c.seed = seed;
        c.link.loss = LossConfig::Bernoulli { p: 0.005 };
        run(c)
    };
    let (a, b, c) = (mk(7), mk(7), mk(8));
    assert_eq!(a.flows.delivered_bytes, b.flows.delivered_bytes);
    assert_eq!(a.flows.cwnd_pkts, b.flows.cwnd_pkts);
    assert_eq!(a.flows.rtt_ms.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), b.flows.rtt_ms.iter().map(|x| x.to_bits()).collect::<Vec<_>>());
    assert_eq!(a.router.queue_bytes, b.router.queue_bytes);
    assert_eq!(a.events, b.events);
    assert_ne!(a.flows.delivered_bytes, c.flows.delivered_bytes);
}

/// Without random loss a CUBIC trial's seed still sets where the kernel's ticks fall
/// (jiffies.rs), and CUBIC's epoch and the receivers' delayed-ACK timers run in ticks: two
/// seeds give two realisations, as two kernel runs do, and one seed gives one.
#[test]
fn the_seed_sets_the_tick_phase_of_a_lossless_cubic_trial() {
    let mk = |seed| {
        let mut c = with_flows(dumbbell(10_000_000, 25 * MS, 2.0), vec![flow("cubic"), flow("cubic")]);
        c.duration_ns = 10 * S;
        c.seed = seed;
        run(c)
    };
    let (a, b, c) = (mk(1), mk(1), mk(2));
    assert_eq!(a.flows.cwnd_pkts, b.flows.cwnd_pkts);
    assert_eq!(a.events, b.events);
    assert_ne!(a.flows.cwnd_pkts, c.flows.cwnd_pkts);
    assert_ne!(ccsim::jiffies::TickClock::from_seed(1), ccsim::jiffies::TickClock::from_seed(2));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, .. ProptestConfig::default() })]
    #[test]
    fn conservation_holds_on_random_dumbbells(
        rate_mbit in 1u64..200,
        rtt_ms in 1i64..150,
        bdp in 0.05f64..4.0,
        loss in 0.0f64..0.08,
        n in 1usize..4,
        cubic in proptest::bool::ANY,
        pacing in proptest::bool::ANY,
        delack in proptest::bool::ANY,
        size_kb in proptest::option::of(1u64..3000),
        seed in 0u64..1000,
    ) {
        let mut c = dumbbell(rate_mbit * 1_000_000, rtt_ms * MS, bdp);
        c.duration_ns = 3 * S;
        c.seed = seed;
        c.link.loss = LossConfig::Bernoulli { p: loss };
        c.flows = (0..n).map(|i| {
            let mut f = flow(if cubic { "cubic" } else { "reno" });
            f.start_ns = i as i64 * 100 * MS;
            f.pacing = Some(pacing);
            f.delayed_ack.enabled = delack;
            f.size_bytes = size_kb.map(|k| k * 1000);
            f
        }).collect();
        let out = run(c);
        check_conservation(&out);
        for (i, f) in out.flow_final.iter().enumerate() {
            if let Some(k) = size_kb {
                prop_assert!(f.delivered_bytes <= k * 1000, "flow {} delivered more than its size", i);
            }
        }
    }
}
