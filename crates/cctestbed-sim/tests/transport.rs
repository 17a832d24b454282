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

/// A 1 s delay spike on the ACK path makes the RTO fire although nothing was lost (the tail
/// loss probe fires first, 2 srtt after the last ACK, and does not stop it). The
/// delayed ACKs then echo timestamps older than the retransmission (`tcp_packet_delayed`), or
/// F-RTO sees never-retransmitted data ACKed, and the timeout is undone
/// (`tcp_try_undo_loss`): only the head is retransmitted, not the whole window, and cwnd and
/// ssthresh come back. The ACK for the original head does not advance RACK either
/// (`tcp_skb_spurious_retrans`), so the rest of the window, whose ACKs are still on their way,
/// is not taken for lost. The window comes back whole, and the 300 ms of ACKs that arrive
/// together release a burst that overflows the bottleneck: those retransmissions repair real
/// drops. So what is counted is what arrived twice (spurious retransmissions), and every other
/// retransmission must be matched by a drop at the bottleneck.
#[test]
fn a_delay_spike_causes_no_retransmission_storm() {
    for cc in ["cubic", "reno", "bbr"] {
        let mut c = with_flows(dumbbell(20_000_000, 50 * MS, 2.0), vec![flow(cc)]);
        c.duration_ns = 16 * S;
        c.link.delay_schedule = vec![
            ccsim::config::DelayChange { at_ns: 10 * S, delay_fwd_ns: 25 * MS, delay_rev_ns: 1025 * MS },
            ccsim::config::DelayChange { at_ns: 10 * S + 300 * MS, delay_fwd_ns: 25 * MS, delay_rev_ns: 25 * MS },
        ];
        let mut sim = ccsim::Simulation::new(c).unwrap();
        sim.run_until(10 * S);
        let (rto0, retr0, undo0) = {
            let s = &sim.senders[0].stats;
            (s.rto_count, s.retrans_segs, s.undo_count)
        };
        let (dup0, drop0) = (sim.receivers[0].duplicate_pkts, sim.bottleneck.counters.per_flow[0].drops);
        let cwnd0 = sim.senders[0].w.cwnd;
        // Until 11.4 s: after the undo and the burst the returning ACKs release.
        sim.run_until(11 * S + 400 * MS);
        let s = sim.senders[0].stats;
        let (rtos, retrans, undos) = (s.rto_count - rto0, s.retrans_segs - retr0, s.undo_count - undo0);
        let twice = sim.receivers[0].duplicate_pkts - dup0;
        let drops = sim.bottleneck.counters.per_flow[0].drops - drop0;
        let cwnd = sim.senders[0].w.cwnd;
        println!("measured: {cc}: {rtos} RTO(s), {retrans} retransmitted, {twice} arrived twice, {drops} dropped, {undos} undone, cwnd {cwnd0} -> {cwnd}");
        assert!(rtos >= 1, "{cc}: the spike should fire the RTO");
        assert!(undos >= 1, "{cc}: the spurious timeout was not undone");
        assert!(twice <= 4, "{cc}: {twice} segments arrived twice after a spurious timeout (window {cwnd0})");
        assert!(retrans <= twice + drops, "{cc}: {retrans} retransmitted, {twice} arrived twice, {drops} dropped");
        assert!(cwnd as f64 >= 0.5 * cwnd0 as f64, "{cc}: cwnd {cwnd0} -> {cwnd} after an undone timeout");
    }
}

/// The three-way handshake (`tcp_connect`, `tcp_rcv_synsent_state_process`): nothing but the
/// SYN leaves before the SYN-ACK; its RTT (RTprop plus the 60-byte SYN's serialisation at the
/// bottleneck) seeds srtt and the min RTT, and the initial window follows at once.
#[test]
fn the_handshake_seeds_the_rtt_and_data_follows_the_syn_ack() {
    let rate = 20_000_000;
    let mut c = with_flows(dumbbell(rate, 50 * MS, 2.0), vec![flow("cubic")]);
    c.duration_ns = 1 * S;
    let mut sim = ccsim::Simulation::new(c).unwrap();
    sim.run_until(49 * MS);
    let s = &sim.senders[0];
    assert_eq!((s.stats.handshake_pkts, s.stats.sent_pkts), (1, 0), "only the SYN before the SYN-ACK");
    sim.run_until(51 * MS);
    let s = &sim.senders[0];
    let syn_rtt = 50 * MS + 60 * 8 * 1_000_000_000 / rate as i64;
    println!("measured: srtt {} ns, min RTT {} ns after the SYN-ACK (expected {syn_rtt})", s.rtt.srtt, s.rtt.min_rtt);
    assert_eq!(s.rtt.srtt, syn_rtt);
    assert_eq!(s.rtt.min_rtt, syn_rtt);
    assert_eq!(s.stats.handshake_pkts, 2, "SYN and the final ACK");
    assert_eq!(s.stats.sent_pkts, 10, "the initial window leaves with the final ACK");
}

/// A SYN lost at the bottleneck is sent again after TCP_TIMEOUT_INIT (1 s, 250 jiffies: on the
/// timer wheel's second level, so at the next 8-jiffy boundary after it, up to 36 ms late), and
/// data starts once that SYN's handshake completes.
#[test]
fn a_lost_syn_is_sent_again_after_one_second() {
    let trial = |seed: u64| {
        let mut c = with_flows(dumbbell(20_000_000, 50 * MS, 2.0), vec![flow("cubic")]);
        c.link.loss = ccsim::config::LossConfig::Bernoulli { p: 0.2 };
        c.seed = seed;
        c.duration_ns = 2 * S;
        ccsim::Simulation::new(c).unwrap()
    };
    // A seed whose first SYN is lost and whose second is not.
    let seed = (1..500u64)
        .find(|&seed| {
            let mut sim = trial(seed);
            sim.run_until(500 * MS);
            let first_lost = sim.senders[0].stats.sent_pkts == 0;
            sim.run_until(1200 * MS);
            first_lost && sim.senders[0].stats.sent_pkts > 0
        })
        .expect("some seed loses only the first SYN");
    let resend = ccsim::jiffies::TickClock::from_seed(seed).wheel_fire_time(0, S, ccsim::jiffies::CONFIG_HZ);
    assert!((S..=S + 36 * MS).contains(&resend), "{resend}");
    let mut sim = trial(seed);
    sim.run_until(S - 1);
    assert_eq!(sim.senders[0].stats.handshake_pkts, 1, "no second SYN before 1 s");
    sim.run_until(resend - 1);
    assert_eq!(sim.senders[0].stats.handshake_pkts, 1, "no second SYN before its timer fires");
    sim.run_until(resend);
    assert_eq!(sim.senders[0].stats.handshake_pkts, 2, "the SYN is sent again when the timer fires");
    sim.run_until(resend + 49 * MS);
    assert_eq!(sim.senders[0].stats.sent_pkts, 0, "no data before the second SYN's SYN-ACK");
    sim.run_until(resend + 51 * MS);
    let s = &sim.senders[0];
    println!("measured: seed {seed}: first SYN lost, resent at {resend} ns, {} handshake packets, {} data segments 51 ms later", s.stats.handshake_pkts, s.stats.sent_pkts);
    assert_eq!(s.stats.handshake_pkts, 3, "two SYNs and the final ACK");
    assert_eq!(s.stats.sent_pkts, 10, "the initial window after one SYN retransmission");
}

/// Under 5 % random loss on 100 Mbit/s, 100 ms (a hole every 20 packets, some 400 per window)
/// the sender retransmits what was lost and little else: the receiver flushes a compressed SACK
/// before a new block would push an unreported one out of its list (`tcp_sack_compress_send_ack`),
/// so RACK does not take arrived data for lost. On Linux 6.18 this path retransmits 5.02 % of
/// its segments for 5.03 % loss (docs/fidelity.md, `loss-5-bbr`).
#[test]
fn random_loss_causes_no_spurious_retransmissions() {
    let mut c = with_flows(dumbbell(100_000_000, 100 * MS, 1.0), vec![flow("bbr")]);
    c.link.loss = ccsim::config::LossConfig::Bernoulli { p: 0.05 };
    c.duration_ns = 20 * S;
    let mut sim = ccsim::Simulation::new(c).unwrap();
    sim.run_until(20 * S);
    let (s, r) = (&sim.senders[0].stats, &sim.receivers[0]);
    let spurious = r.duplicate_pkts as f64 / s.sent_pkts as f64;
    println!(
        "measured: {} segments sent, {:.2} % retransmitted, {:.3} % arrived twice",
        s.sent_pkts,
        100.0 * s.retrans_segs as f64 / s.sent_pkts as f64,
        100.0 * spurious
    );
    assert!(spurious < 0.002, "{:.2} % of the segments sent arrived twice", 100.0 * spurious);
}
