//! The bottleneck delivers exactly the configured rate: capacity schedule and token-bucket
//! shaper measured from the router's departure counters.

mod common;
use ccsim::config::{CapacityChange, TokenBucketConfig};
use common::*;

/// IP bit rate of departures in each 1 s interval [k, k+1) that lies in [t0, t1).
fn departure_rates(out: &ccsim::SimOutput, t0: f64, t1: f64) -> Vec<(f64, f64)> {
    let r = &out.router;
    let at = |t: f64| r.time_s.iter().position(|&x| (x - t).abs() < 1e-9).expect("sample at whole second");
    let mut v = vec![];
    let mut t = t0;
    while t + 1.0 <= t1 + 1e-9 {
        let (a, b) = (at(t), at(t + 1.0));
        v.push((t, (r.departed_bytes[b] - r.departed_bytes[a]) as f64 * 8.0));
        t += 1.0;
    }
    v
}

fn busy_link(rate: u64) -> ccsim::SimConfig {
    let mut c = with_flows(dumbbell(rate, 20 * MS, 4.0), (0..4).map(|_| flow("cubic")).collect());
    c.duration_ns = 30 * S;
    c
}

#[test]
fn capacity_schedule_is_met_within_one_percent_per_interval() {
    let mut c = busy_link(20_000_000);
    c.link.schedule = vec![
        CapacityChange { at_ns: 10 * S, capacity_bps: 50_000_000 },
        CapacityChange { at_ns: 20 * S, capacity_bps: 5_000_000 },
    ];
    let out = run(c);
    for (t0, t1, rate) in [(3.0, 10.0, 20e6), (12.0, 20.0, 50e6), (22.0, 30.0, 5e6)] {
        for (t, got) in departure_rates(&out, t0, t1) {
            assert!((got - rate).abs() / rate <= 0.01, "[{t}, {}) s: {got:.0} b/s vs {rate}", t + 1.0);
        }
    }
    // The capacity column follows the schedule.
    let cap_at = |t: f64| out.router.capacity_bps[out.router.time_s.iter().position(|&x| x >= t).unwrap()];
    assert_eq!((cap_at(5.0), cap_at(15.0), cap_at(25.0)), (20_000_000, 50_000_000, 5_000_000));
}

#[test]
fn token_bucket_shaper_sets_the_rate_below_the_line_rate() {
    let mut c = busy_link(1_000_000_000);
    c.link.shaper = Some(TokenBucketConfig { rate_bps: 30_000_000, burst_bytes: 3000 });
    // The queue is sized for the shaped rate.
    c.link.queue.limit_bytes = Some((4.0 * bdp_bytes(30_000_000, 20 * MS)) as u64);
    let out = run(c);
    for (t, got) in departure_rates(&out, 3.0, 30.0) {
        assert!((got - 30e6).abs() / 30e6 <= 0.01, "[{t}, {}) s: {got:.0} b/s vs 30 Mb/s", t + 1.0);
    }
}

#[test]
fn policer_drops_what_exceeds_its_rate() {
    let mut c = busy_link(100_000_000);
    c.link.policer = Some(ccsim::config::TokenBucketConfig { rate_bps: 10_000_000, burst_bytes: 15_000 });
    let out = run(c);
    assert!(out.router_final.drops[ccsim::qdisc::DropCause::Policer] > 0);
    for (t, got) in departure_rates(&out, 5.0, 30.0) {
        // A policer admits at most rate x interval + burst.
        assert!(got <= 10e6 + 15_000.0 * 8.0, "[{t}, {}) s: {got:.0} b/s through a 10 Mb/s policer", t + 1.0);
    }
}
