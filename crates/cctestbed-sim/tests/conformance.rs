//! The shared conformance suite: every registered algorithm, run through the same trials,
//! must conserve packets, keep delivering under random loss, be deterministic and keep its
//! congestion window above its floor.

mod common;
use ccsim::cc::{algorithms, CaState};
use ccsim::config::LossConfig;
use ccsim::Simulation;
use common::*;

fn names() -> Vec<&'static str> {
    algorithms().into_iter().map(|(n, _)| n).collect()
}

/// Two flows of `cc` on 30 Mb/s / 30 ms, 1 BDP, with random loss `p`.
fn trial(cc: &str, p: f64, seed: u64) -> ccsim::SimConfig {
    let mut c = with_flows(dumbbell(30_000_000, 30 * MS, 1.0), vec![flow(cc), flow(cc)]);
    c.flows[1].start_ns = 300 * MS;
    c.duration_ns = 20 * S;
    c.seed = seed;
    if p > 0.0 {
        c.link.loss = LossConfig::Bernoulli { p };
    }
    c
}

#[test]
fn every_algorithm_conserves_packets_and_keeps_delivering_under_loss() {
    for cc in names() {
        for p in [0.0, 0.01, 0.05, 0.10] {
            let out = run(trial(cc, p, 3));
            for (i, f) in out.flow_final.iter().enumerate() {
                assert_eq!(
                    f.sent_pkts,
                    f.delivered_pkts + f.dropped_pkts + f.queued_pkts + f.in_transit_pkts,
                    "{cc} at loss {p}, flow {i}: {f:?}"
                );
                // Delivery in every 3 s window after the flow's first second; at 10 % loss in
                // every 4 s window: two retransmissions of the head lost in a row (1 % of
                // timeouts) leave 1 s + 2 s of doubled RTO (`tcp_retransmit_timer`) plus the
                // time before the first timeout without delivery.
                let series: Vec<(f64, u64)> = (0..out.flows.time_s.len())
                    .filter(|&k| out.flows.flow[k] == i as u32)
                    .map(|k| (out.flows.time_s[k], out.flows.delivered_bytes[k]))
                    .collect();
                let win = if p >= 0.10 { 400 } else { 300 };
                for w in series.windows(win) {
                    if w[0].0 >= 1.5 {
                        assert!(w[win - 1].1 > w[0].1, "{cc} at loss {p}, flow {i}: stalled from {:.2} s to {:.2} s", w[0].0, w[win - 1].0);
                    }
                }
            }
        }
    }
}

#[test]
fn every_algorithm_is_deterministic_per_seed() {
    for cc in names() {
        let a = run(trial(cc, 0.02, 11));
        let b = run(trial(cc, 0.02, 11));
        let c = run(trial(cc, 0.02, 12));
        assert_eq!(a.flows.delivered_bytes, b.flows.delivered_bytes, "{cc}: same seed, different output");
        assert_eq!(a.flows.cwnd_pkts, b.flows.cwnd_pkts, "{cc}: same seed, different cwnd");
        assert_eq!(a.events, b.events, "{cc}");
        assert_ne!(a.flows.delivered_bytes, c.flows.delivered_bytes, "{cc}: seed has no effect");
    }
}

#[test]
fn every_algorithm_keeps_cwnd_above_its_floor() {
    for cc in names() {
        let bbr_family = cc.starts_with("bbr");
        let mut sim = Simulation::new(trial(cc, 0.03, 5)).unwrap();
        step_through(&mut sim, 20 * S, MS, |sim, t| {
            for s in &sim.senders {
                let cwnd = s.w.cwnd;
                assert!(cwnd >= 1, "{cc}: cwnd {cwnd} at {t} ns");
                // Outside loss recovery: BBR keeps cwnd_min_target (4) packets, the others 2.
                if s.ca_state == CaState::Open && s.stats.sent_pkts > 20 {
                    let floor = if bbr_family { 4 } else { 2 };
                    assert!(cwnd >= floor, "{cc}: cwnd {cwnd} < {floor} in Open state at {t} ns");
                }
            }
            true
        });
    }
}
