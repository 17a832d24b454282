//! Traffic in both directions: reverse flows (`direction = Reverse`) through the reverse
//! path's own bottleneck (`link.reverse`), and the forward flows' ACKs queued behind them.

mod common;
use ccsim::config::*;
use ccsim::SimOutput;
use common::*;

const FWD_RATE: u64 = 80_000_000;
const REV_RATE: u64 = 10_000_000;
const RTT: i64 = 20 * MS;
/// The reverse queue: 100 KB at 10 Mbit/s is 80 ms of standing delay when full.
const REV_QUEUE: u64 = 100_000;

fn reverse(mut f: FlowConfig) -> FlowConfig {
    f.direction = Direction::Reverse;
    f
}

fn udp(rate_bps: u64) -> FlowConfig {
    FlowConfig { traffic: Traffic::Udp(UdpConfig { rate_bps, size_bytes: 1500, on_ns: None, off_ns: None, exponential: false }), ..flow("") }
}

/// An 80 Mbit/s, 20 ms dumbbell (1 BDP of forward queue) whose reverse path is 10 Mbit/s with
/// a drop-tail queue of [`REV_QUEUE`] bytes.
fn asymmetric(flows: Vec<FlowConfig>, secs: i64) -> SimConfig {
    let mut c = with_flows(dumbbell(FWD_RATE, RTT, 1.0), flows);
    c.duration_ns = secs * S;
    c.link.reverse = Some(ReverseLinkConfig {
        capacity_bps: REV_RATE,
        queue: QueueConfig { limit_bytes: Some(REV_QUEUE), limit_packets: None },
        loss: LossConfig::None,
        aqm: None,
    });
    c
}

/// Flow `f`'s per-interval RTT samples in [t0, t1].
fn rtts(out: &SimOutput, f: u32, t0: f64, t1: f64) -> Vec<f64> {
    (0..out.flows.time_s.len())
        .filter(|&i| out.flows.flow[i] == f && out.flows.time_s[i] >= t0 && out.flows.time_s[i] <= t1)
        .map(|i| out.flows.rtt_ms[i])
        .filter(|x| x.is_finite())
        .collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    assert!(!v.is_empty());
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn mean_of(v: impl Iterator<Item = f64>) -> f64 {
    let v: Vec<f64> = v.filter(|x| x.is_finite()).collect();
    v.iter().sum::<f64>() / v.len() as f64
}

fn check_conservation(out: &SimOutput) {
    for (i, f) in out.flow_final.iter().enumerate() {
        assert_eq!(f.sent_pkts, f.delivered_pkts + f.dropped_pkts + f.queued_pkts + f.in_transit_pkts, "flow {i}: {f:?}");
    }
    let r = out.router_final;
    assert_eq!(r.arrival_bytes, r.departed_bytes + r.dropped_bytes + out.router_queued_bytes, "forward router bytes: {r:?}");
    if let Some((r, queued)) = out.reverse_final {
        assert_eq!(r.arrival_bytes, r.departed_bytes + r.dropped_bytes + queued, "reverse router bytes: {r:?}");
    }
}

/// A reverse stream above the reverse capacity keeps the reverse drop-tail queue full, so every
/// ACK of a forward flow waits Q/C there: the forward RTT is RTprop + Q/C. The forward flow is
/// window-limited (64 KB) far below the forward capacity, so it has no queue of its own, and
/// ACKs every segment, so no delayed-ACK wait enters its samples.
///
/// Tolerance: the stream (one 1500-byte packet every 1 ms, the link sending one every 1.2 ms)
/// keeps the queue between Q - 2 MTU (just after a packet entered service, before the next
/// arrival) and Q, and the packet in service has up to one MTU left, so an ACK waits between
/// (Q - 2 MTU)/C and (Q + MTU)/C: Q/C - 2.4 ms to Q/C + 1.2 ms at 10 Mbit/s; the median of the
/// per-interval means sits near the middle of that band. The ACK's own 52 bytes and the
/// data's serialisation on the forward link add 0.04 and 0.15 ms. +-1.5 ms holds the middle of
/// the band (the middle is Q/C - 0.6 ms).
#[test]
fn reverse_data_delays_forward_acks_by_the_reverse_queue() {
    let fwd = FlowConfig {
        rwnd_bytes: Some(64_000),
        delayed_ack: DelayedAckConfig { enabled: false, ..DelayedAckConfig::default() },
        ..flow("cubic")
    };
    let base = median(rtts(&run(asymmetric(vec![fwd.clone()], 20)), 0, 5.0, 20.0));
    let loaded = run(asymmetric(vec![fwd, reverse(udp(12_000_000))], 20));
    let rtt = median(rtts(&loaded, 0, 5.0, 20.0));
    let q_over_c = REV_QUEUE as f64 * 8.0 / REV_RATE as f64 * 1e3;
    let rtprop = RTT as f64 / 1e6;
    assert!((base - rtprop).abs() < 0.5, "unloaded forward RTT {base:.2} ms, RTprop {rtprop} ms");
    let inflation = rtt - base;
    assert!((inflation - q_over_c).abs() < 1.5, "forward RTT {rtt:.2} ms: inflation {inflation:.2} ms, Q/C = {q_over_c} ms");
    // The reverse queue stood full meanwhile, and its sojourn says the same.
    let r = &loaded.router;
    let steady = |i: usize| r.time_s[i] >= 5.0;
    let rev_q = mean_of((0..r.time_s.len()).filter(|&i| steady(i)).map(|i| r.rev_queue_bytes[i] as f64));
    assert!(rev_q > (REV_QUEUE - 2 * 1500) as f64, "reverse queue {rev_q:.0} B, limit {REV_QUEUE}");
    eprintln!("forward RTT {base:.2} ms unloaded, {rtt:.2} ms loaded: +{inflation:.2} ms, Q/C {q_over_c} ms; reverse queue {rev_q:.0} B");
    let soj = mean_of((0..r.time_s.len()).filter(|&i| steady(i)).map(|i| r.rev_sojourn_mean_ms[i]));
    assert!((soj - q_over_c).abs() < 1.5, "reverse sojourn {soj:.2} ms, Q/C {q_over_c} ms");
    check_conservation(&loaded);
}

/// Bulk TCP both ways (the asymmetric access link of cable and ADSL): each flow's RTT is
/// RTprop plus what its data waits in one queue and its ACKs in the other. The flows' RTT
/// samples and the routers' sojourns are measured independently; their means agree within
/// 10 % of the queueing delay (sojourns are means over every packet, data and ACKs, per
/// interval; RTT samples are per ACK).
#[test]
fn bulk_tcp_both_ways_each_rtt_is_the_sum_of_both_queues() {
    let out = run(asymmetric(vec![flow("cubic"), reverse(flow("cubic"))], 30));
    let r = &out.router;
    let idx: Vec<usize> = (0..r.time_s.len()).filter(|&i| r.time_s[i] >= 10.0).collect();
    let fwd_soj = mean_of(idx.iter().map(|&i| r.sojourn_mean_ms[i]));
    let rev_soj = mean_of(idx.iter().map(|&i| r.rev_sojourn_mean_ms[i]));
    let rtprop = RTT as f64 / 1e6;
    for (f, name) in [(0, "forward"), (1, "reverse")] {
        let rtt = mean_of(rtts(&out, f, 10.0, 30.0).into_iter());
        let queues = fwd_soj + rev_soj;
        eprintln!("{name}: RTT {rtt:.2} ms = RTprop {rtprop} + fwd sojourn {fwd_soj:.2} + rev sojourn {rev_soj:.2} (+{:.2})", rtt - rtprop - queues);
        assert!(
            (rtt - rtprop - queues).abs() < 0.1 * queues + 1.0,
            "{name} flow: RTT {rtt:.1} ms, RTprop {rtprop} + sojourns {fwd_soj:.1} + {rev_soj:.1} ms"
        );
    }
    // The reverse bulk flow keeps its queue busy: its ACK delay is most of the forward RTT's
    // queueing, and the reverse link runs full.
    assert!(rev_soj > 0.3 * REV_QUEUE as f64 * 8.0 / REV_RATE as f64 * 1e3, "reverse sojourn {rev_soj:.1} ms");
    let rev_goodput = goodput(&out, 1, 10.0, 30.0);
    assert!(rev_goodput > 0.85 * payload_capacity(REV_RATE), "reverse flow {rev_goodput:.0} bit/s of {REV_RATE}");
    check_conservation(&out);
}

/// Bytes are conserved per direction (every packet of a flow is delivered, dropped, queued or
/// on a line, and each router's bytes balance) and the same trial gives the same output twice.
#[test]
fn reverse_traffic_conserves_packets_and_is_deterministic() {
    let mk = || {
        let mut c = asymmetric(
            vec![flow("bbr"), flow("cubic"), reverse(flow("cubic")), reverse(udp(3_000_000))],
            8,
        );
        c.link.reverse.as_mut().unwrap().loss = LossConfig::Bernoulli { p: 0.01 };
        c
    };
    let (a, b) = (run(mk()), run(mk()));
    check_conservation(&a);
    let (rf, _) = a.reverse_final.unwrap();
    assert!(rf.drops[ccsim::qdisc::DropCause::Random] > 0, "the reverse loss model ran");
    assert_eq!(a.events, b.events);
    assert_eq!(a.flows.delivered_bytes, b.flows.delivered_bytes);
    assert_eq!(a.flows.rtt_ms.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), b.flows.rtt_ms.iter().map(|x| x.to_bits()).collect::<Vec<_>>());
    assert_eq!(a.router.rev_queue_bytes, b.router.rev_queue_bytes);
    for f in 0..4 {
        assert!(goodput(&a, f, 2.0, 8.0) > 0.0, "flow {f} delivers");
    }
}

/// Without `link.reverse` a reverse datagram stream crosses an unconstrained path (only the
/// propagation delay), while a reverse ping's replies queue in the forward bottleneck behind
/// the forward bulk flow's data.
#[test]
fn an_unconstrained_reverse_path_only_delays() {
    let ping = FlowConfig { traffic: Traffic::Ping(PingConfig { interval_ns: 10 * MS, size_bytes: 84 }), ..flow("") };
    let mut c = with_flows(dumbbell(FWD_RATE, RTT, 2.0), vec![flow("cubic"), reverse(udp(200_000_000)), reverse(ping)]);
    c.duration_ns = 10 * S;
    let out = run(c);
    // 200 Mbit/s through a path without a bottleneck: all of it arrives, after delay_rev.
    let udp_fin = out.flow_final[1];
    assert_eq!(udp_fin.dropped_pkts, 0);
    assert!(udp_fin.sent_pkts - udp_fin.delivered_pkts <= udp_fin.in_transit_pkts);
    let owd = mean_of(rtts_col(&out, 1, &out.flows.owd_ms).into_iter());
    assert!((owd - (RTT / 2) as f64 / 1e6).abs() < 1e-6, "one-way delay {owd} ms");
    // The probes' replies wait behind the forward queue that CUBIC keeps.
    let ping_rtt = mean_of(rtts(&out, 2, 5.0, 10.0).into_iter());
    let fwd_q = mean_queue(&out, 5.0, 10.0) * 8.0 / FWD_RATE as f64 * 1e3;
    assert!((ping_rtt - RTT as f64 / 1e6 - fwd_q).abs() < 0.2 * fwd_q + 1.0, "ping RTT {ping_rtt:.1} ms, queue {fwd_q:.1} ms");
    assert!(out.reverse_final.is_none());
    assert!(out.router.rev_queue_bytes.iter().all(|&q| q == 0));
    check_conservation(&out);
}

fn rtts_col(out: &SimOutput, f: u32, col: &[f64]) -> Vec<f64> {
    (0..col.len()).filter(|&i| out.flows.flow[i] == f).map(|i| col[i]).filter(|x| x.is_finite()).collect()
}

/// A reverse stream on an unconstrained reverse path sends nothing through the forward
/// bottleneck (udp has no ACKs), so the forward flows see exactly the trial without it: their
/// every column is the same bit for bit, though the reverse flow's presence routes every ACK
/// through the bottleneck-aware path.
#[test]
fn an_unconstrained_reverse_path_leaves_forward_flows_bit_identical() {
    let fwd = || vec![flow("cubic"), flow("bbr"), FlowConfig { start_ns: 2 * S, ..flow("reno") }];
    let mk = |extra: Option<FlowConfig>| {
        let mut c = with_flows(dumbbell(FWD_RATE, RTT, 1.0), fwd().into_iter().chain(extra).collect());
        c.duration_ns = 8 * S;
        c.link.jitter_ns = MS;
        c
    };
    let alone = run(mk(None));
    let beside = run(mk(Some(reverse(udp(50_000_000)))));
    assert!(goodput(&beside, 3, 1.0, 8.0) > 40e6, "the reverse stream ran");
    let forward_rows = |out: &SimOutput| -> Vec<(String, Vec<u64>)> {
        let keep: Vec<bool> = out.flows.flow.iter().map(|&f| f < 3).collect();
        out.flows
            .clone()
            .into_columns()
            .into_iter()
            .map(|(name, col)| {
                let bits: Vec<u64> = match col {
                    ccsim::telemetry::ColumnData::F64(v) => v.iter().map(|x| x.to_bits()).collect(),
                    ccsim::telemetry::ColumnData::U64(v) => v,
                    ccsim::telemetry::ColumnData::U32(v) => v.iter().map(|&x| x as u64).collect(),
                    ccsim::telemetry::ColumnData::U16(v) => v.iter().map(|&x| x as u64).collect(),
                };
                (name, bits.into_iter().zip(&keep).filter(|(_, &k)| k).map(|(b, _)| b).collect())
            })
            .collect()
    };
    let (a, b) = (forward_rows(&alone), forward_rows(&beside));
    for ((name, x), (_, y)) in a.iter().zip(&b) {
        if name == "state" || name == "ca_state" {
            // label codes, numbered by first appearance: compare the labels they stand for
            let (la, lb) = (&alone.state_labels, &beside.state_labels);
            assert!(x.iter().map(|&c| la[c as usize]).eq(y.iter().map(|&c| lb[c as usize])), "column {name} differs");
            continue;
        }
        assert!(x == y, "column {name} differs");
    }
    assert_eq!(alone.router.queue_bytes, beside.router.queue_bytes);
    for f in 0..3 {
        assert_eq!(alone.flow_final[f].delivered_bytes, beside.flow_final[f].delivered_bytes);
    }
}
