//! Transport behaviours modelled on Linux's TCP output path: TSO/GSO trains
//! (`tcp_write_xmit`, `tcp_tso_autosize`, `tcp_update_skb_after_send`).

mod common;
use common::*;

/// A paced BBR flow at 80 Mbit/s sends trains of `tcp_tso_segs` segments (about 1 ms of data
/// at the pacing rate: 4-8 segments over the gain cycle), one per pacing release, never more, and the next
/// release comes a train's length at the pacing rate later.
#[test]
fn paced_flow_sends_trains_of_the_autosize_goal() {
    let mut c = with_flows(dumbbell(80_000_000, 25 * MS, 2.0), vec![flow("bbr")]);
    c.duration_ns = 6 * S;
    let mut sim = ccsim::Simulation::new(c).unwrap();
    sim.run_until(5 * S);
    let step = 10_000; // 10 us: much shorter than the ~0.9 ms between trains
    let (mut prev, mut trains, mut full, mut last_t) = (sim.senders[0].stats.sent_pkts, 0, 0, None::<i64>);
    let mut gaps_ok = 0;
    let mut t = 5 * S;
    while t < 5 * S + 500 * MS {
        let goal = sim.senders[0].tso_segs();
        let rate = sim.senders[0].pacing_rate().unwrap();
        t += step;
        sim.run_until(t);
        let sent = sim.senders[0].stats.sent_pkts;
        let n = (sent - prev) as u32;
        prev = sent;
        if n == 0 {
            continue;
        }
        assert!(n <= goal, "a train of {n} segments where the goal is {goal}");
        trains += 1;
        if n == goal {
            full += 1;
        }
        if let Some(l) = last_t {
            // The release after a full train: goal x MSS at the pacing rate, within a step.
            let expect = (goal as f64 * 1448.0 / rate * 1e9) as i64;
            if n == goal && (t - l - expect).abs() <= 2 * step {
                gaps_ok += 1;
            }
        }
        last_t = Some(t);
        // tcp_tso_autosize at this pacing rate: 6 segments at gain 1 (9.6 MB/s >> 10 =
        // 9.4 KB), 8 at 1.25, 4 at 0.75; no allowance at 25 ms of min_rtt.
        let min_rtt_us = (sim.senders[0].rtt.min_rtt / 1000) as u64;
        assert_eq!(goal, ccsim::tcp::tso::tcp_tso_segs(rate as u64, 1448, min_rtt_us, 2));
        assert!((4..=8).contains(&goal), "goal {goal}");
    }
    println!("measured: {trains} trains, {full} of the full goal, {gaps_ok} spaced by goal/rate");
    assert!(trains > 400, "{trains} trains in 500 ms");
    assert!(full * 10 >= trains * 9, "only {full} of {trains} trains were full");
    assert!(gaps_ok * 10 >= trains * 8, "only {gaps_ok} of {trains} trains came goal/rate after the previous");
}

/// Below 1.2 Mbit/s BBR asks for one-segment trains (`bbr_min_tso_segs`), and the transport's
/// autosize and BBR's quantization budget use the same goal.
#[test]
fn bbr_below_the_min_tso_rate_sends_single_segments() {
    let mut c = with_flows(dumbbell(1_000_000, 50 * MS, 2.0), vec![flow("bbr")]);
    c.duration_ns = 20 * S;
    let mut sim = ccsim::Simulation::new(c).unwrap();
    sim.run_until(10 * S);
    let mut prev = sim.senders[0].stats.sent_pkts;
    let mut t = 10 * S;
    while t < 20 * S {
        assert_eq!(sim.senders[0].tso_segs(), 1);
        t += 100_000;
        sim.run_until(t);
        let sent = sim.senders[0].stats.sent_pkts;
        assert!(sent - prev <= 1, "{} segments at once below 1.2 Mbit/s", sent - prev);
        prev = sent;
    }
}
