//! The receiving host's NIC: interrupt coalescing, NAPI polls and GRO (`ccsim::nic`).

mod common;
use ccsim::nic::GRO_MAX_SIZE;
use common::*;

/// Runs `c` to its end and returns, per flow, (segments arrived, skbs they came in, ACKs sent)
/// with the output.
fn run_counting(c: ccsim::SimConfig) -> (Vec<(u64, u64, u64)>, ccsim::SimOutput) {
    let end = c.duration_ns;
    let mut sim = ccsim::Simulation::new(c).unwrap();
    sim.run_until(end);
    let counts = sim.receivers.iter().map(|r| (r.arrived_pkts, r.arrived_skbs, r.acks_sent)).collect();
    (counts, sim.run())
}

/// Where every frame reaches the receiving host on its own (a bottleneck spaces them, and the
/// NIC polls at each arrival), GRO has nothing to join: the run with GRO on is the run with it
/// off, event for event.
#[test]
fn gro_changes_nothing_when_frames_arrive_one_at_a_time() {
    let base = with_flows(dumbbell(100_000_000, 20 * MS, 1.0), vec![flow("cubic"), flow("cubic"), flow("bbr")]);
    let mut on = base.clone();
    on.duration_ns = 5 * S;
    on.link.receiver_nic.gro = true;
    let mut off = on.clone();
    off.link.receiver_nic.gro = false;
    let (c_on, o_on) = run_counting(on);
    let (c_off, o_off) = run_counting(off);
    assert_eq!(c_on, c_off);
    assert!(c_on.iter().all(|&(pkts, skbs, _)| pkts == skbs && pkts > 5_000), "{c_on:?}");
    assert_eq!(o_on.events, o_off.events);
    assert_eq!(format!("{:?}", o_on.flow_final), format!("{:?}", o_off.flow_final));
    assert_eq!(format!("{:?}", o_on.router_final), format!("{:?}", o_off.router_final));
}

/// With interrupts coalesced (30 us at 2 Gbit/s: about five frames a poll), each poll's
/// in-order segments of a flow reach TCP as one skb, never above `gro_max_size`, and each skb
/// of two or more segments is ACKed at once as Linux's `__tcp_ack_snd_check` does (more than
/// one full frame unacknowledged): far fewer ACKs per segment than the one per two segments of
/// delayed ACKs, and the link as full as without coalescing.
#[test]
fn coalesced_polls_ack_once_per_skb_and_keep_the_link_full() {
    let rate = 2_000_000_000;
    let mut plain = with_flows(dumbbell(rate, 10 * MS, 1.0), vec![flow("cubic"), flow("cubic")]);
    plain.duration_ns = 3 * S;
    let mut coalesced = plain.clone();
    coalesced.link.receiver_nic.coalesce_ns = 30_000;
    let (c_plain, o_plain) = run_counting(plain);
    let (c_co, o_co) = run_counting(coalesced);
    for f in 0..2 {
        let (pkts, skbs, acks) = c_co[f];
        let (p_pkts, p_skbs, p_acks) = c_plain[f];
        assert_eq!(p_pkts, p_skbs);
        let per_skb = pkts as f64 / skbs as f64;
        assert!(per_skb > 2.0, "flow {f}: {per_skb:.2} segments per skb");
        assert!(per_skb <= ((GRO_MAX_SIZE - 52) / 1448) as f64);
        // one ACK per skb at most, plus the timer's and the handshake's few
        assert!(acks as f64 <= skbs as f64 * 1.05, "flow {f}: {acks} ACKs for {skbs} skbs");
        let (r_co, r_plain) = (acks as f64 / pkts as f64, p_acks as f64 / p_pkts as f64);
        assert!(r_plain > 0.45, "flow {f}: {r_plain:.3} ACKs per segment without coalescing");
        assert!(r_co < 0.6 * r_plain, "flow {f}: {r_co:.3} ACKs per segment coalesced, {r_plain:.3} not");
    }
    let (g_co, g_plain) = (total_goodput(&o_co, 1.0, 3.0), total_goodput(&o_plain, 1.0, 3.0));
    assert!(g_co >= 0.97 * g_plain, "goodput {g_co:.3e} coalesced against {g_plain:.3e}");
    assert!(g_co <= payload_capacity(rate) * 1.001);
}
