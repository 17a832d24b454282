//! Datagram flows (udp streams, ping probes) and pacing caps (`max_pacing_rate`) in trials:
//! what a stream leaves TCP, what probes measure, that caps hold, and that determinism and
//! conservation hold with them present.

mod common;
use ccsim::config::*;
use ccsim::datagram::UDP_HEADERS;
use ccsim::telemetry::ColumnData;
use common::*;

fn udp(rate_bps: u64, size: u32) -> FlowConfig {
    FlowConfig { traffic: Traffic::Udp(UdpConfig { rate_bps, size_bytes: size, on_ns: None, off_ns: None, exponential: false }), ..flow("") }
}

fn ping(interval_ns: i64, size: u32) -> FlowConfig {
    FlowConfig { traffic: Traffic::Ping(PingConfig { interval_ns, size_bytes: size }), ..flow("") }
}

/// Flow `f`'s values of `col` at samples in [t0, t1], NaN left out.
fn samples(out: &ccsim::SimOutput, f: u32, col: &[f64], t0: f64, t1: f64) -> Vec<f64> {
    (0..col.len())
        .filter(|&i| out.flows.flow[i] == f && out.flows.time_s[i] >= t0 && out.flows.time_s[i] <= t1)
        .map(|i| col[i])
        .filter(|x| x.is_finite())
        .collect()
}

fn check_conservation(out: &ccsim::SimOutput) {
    for (i, f) in out.flow_final.iter().enumerate() {
        assert_eq!(f.sent_pkts, f.delivered_pkts + f.dropped_pkts + f.queued_pkts + f.in_transit_pkts, "flow {i}: {f:?}");
    }
    let r = out.router_final;
    assert_eq!(r.arrival_bytes, r.departed_bytes + r.dropped_bytes + out.router_queued_bytes, "router bytes: {r:?}");
}

#[test]
fn a_udp_stream_leaves_tcp_the_rest_of_the_link() {
    let (cap, rtt) = (50_000_000u64, 20 * MS);
    for (cc, r) in [("cubic", 10_000_000u64), ("cubic", 25_000_000), ("bbr", 20_000_000)] {
        let mut c = with_flows(dumbbell(cap, rtt, 1.0), vec![flow(cc), udp(r, 1500)]);
        c.duration_ns = 30 * S;
        let out = run(c);
        // TCP's IP-level rate: its payload goodput scaled by mtu / mss.
        let tcp_ip = goodput(&out, 0, 10.0, 30.0) * 1500.0 / 1448.0;
        let want = (cap - r) as f64;
        assert!((tcp_ip / want - 1.0).abs() <= 0.02, "{cc} beside {r} bit/s of udp: {tcp_ip:.0} bit/s, want {want:.0}");
        // The stream's own delivered rate, loss and one-way delay are reported.
        let udp_payload = goodput(&out, 1, 10.0, 30.0);
        let sent_payload = r as f64 * (1500 - UDP_HEADERS) as f64 / 1500.0;
        let fin = out.flow_final[1];
        let lost = fin.lost_segs as f64 / fin.sent_segs as f64;
        assert!((udp_payload / sent_payload - 1.0 + lost).abs() < 0.01, "{cc}: udp delivered {udp_payload:.0} of {sent_payload:.0}, lost {lost}");
        assert!(fin.lost_segs <= fin.dropped_pkts && fin.dropped_pkts - fin.lost_segs <= fin.queued_pkts + fin.in_transit_pkts);
        let owd = samples(&out, 1, &out.flows.owd_ms, 10.0, 30.0);
        let base_ms = (rtt / 2) as f64 / 1e6 + 1500.0 * 8.0 / cap as f64 * 1e3;
        let queue_ms = bdp_bytes(cap, rtt) * 8.0 / cap as f64 * 1e3;
        assert!(owd.len() > 1900, "an owd sample every interval");
        assert!(owd.iter().all(|&d| d >= base_ms - 1e-6 && d <= base_ms + queue_ms + 0.1), "{cc}: owd out of [{base_ms}, {}]", base_ms + queue_ms);
        assert!(samples(&out, 1, &out.flows.rtt_ms, 0.0, 30.0).is_empty(), "a udp stream has no rtt");
        check_conservation(&out);
    }
}

#[test]
fn ping_on_an_empty_path_measures_the_base_rtt_plus_serialization() {
    let (cap, rtt) = (20_000_000u64, 30 * MS);
    let mut c = with_flows(dumbbell(cap, rtt, 1.0), vec![ping(7 * MS, 84)]);
    c.duration_ns = 2 * S;
    let out = run(c);
    let want_ms = (rtt as f64 + 84.0 * 8.0 * 1e9 / cap as f64) / 1e6;
    let rtts = samples(&out, 0, &out.flows.rtt_ms, 0.0, 2.0);
    assert!(rtts.len() > 190, "a reply in nearly every interval");
    assert!(rtts.iter().all(|r| (r - want_ms).abs() < 1e-9), "want {want_ms} ms, got {:?}", &rtts[..5]);
    let fin = out.flow_final[0];
    assert_eq!(fin.sent_pkts, 2_000 / 7 + 1, "one probe every 7 ms from time 0");
    assert_eq!(fin.lost_segs, 0);
}

#[test]
fn ping_rtt_grows_by_the_queue_delay_under_a_standing_queue() {
    // A udp stream above the capacity keeps the queue at its limit; probes wait behind it.
    let (cap, rtt) = (20_000_000u64, 20 * MS);
    let mut c = with_flows(dumbbell(cap, rtt, 2.0), vec![udp(22_000_000, 1500), ping(10 * MS, 84)]);
    c.duration_ns = 10 * S;
    let out = run(c);
    let base_ms = (rtt as f64 + 84.0 * 8.0 * 1e9 / cap as f64) / 1e6;
    let full_ms = 2.0 * bdp_bytes(cap, rtt) * 8.0 / cap as f64 * 1e3;
    let rtts = samples(&out, 1, &out.flows.rtt_ms, 3.0, 10.0);
    let mean_rtt = rtts.iter().sum::<f64>() / rtts.len() as f64;
    // The queue delay the router measured over the same samples.
    let r = &out.router;
    let soj: Vec<f64> = (0..r.time_s.len()).filter(|&i| r.time_s[i] >= 3.0).map(|i| r.sojourn_mean_ms[i]).collect();
    let mean_soj = soj.iter().sum::<f64>() / soj.len() as f64;
    let one_pkt_ms = 1500.0 * 8.0 / cap as f64 * 1e3;
    assert!(mean_soj > 0.9 * full_ms - one_pkt_ms, "the queue stands near its limit: {mean_soj} ms of {full_ms}");
    assert!((mean_rtt - base_ms - mean_soj).abs() <= one_pkt_ms, "rtt {mean_rtt} = base {base_ms} + queue {mean_soj}?");
    // The stream loses what exceeds the capacity, and reports it.
    let fin = out.flow_final[0];
    let lost = fin.lost_segs as f64 / fin.sent_segs as f64;
    assert!((lost - 2.0 / 22.0).abs() < 0.01, "udp at 22 Mbit/s into 20: lost {lost}");
    assert!(out.flow_final[1].lost_segs <= out.flow_final[1].dropped_pkts);
    check_conservation(&out);
}

#[test]
fn pacing_caps_hold_per_flow() {
    let cap = 100_000_000u64;
    let caps = [5_000_000u64, 12_000_000, 20_000_000];
    let mk = |cc: &str, m: u64| FlowConfig { max_pacing_rate_bps: Some(m), ..flow(cc) };
    let mut c = with_flows(dumbbell(cap, 20 * MS, 1.0), vec![mk("cubic", caps[0]), mk("bbr", caps[1]), mk("reno", caps[2]), flow("cubic")]);
    c.duration_ns = 20 * S;
    let out = run(c);
    for (f, &m) in caps.iter().enumerate() {
        let g = goodput(&out, f as u32, 5.0, 20.0);
        assert!(g <= m as f64 * 1.005, "flow {f}: {g:.0} bit/s above its cap {m}");
        assert!(g >= m as f64 * 0.9, "flow {f}: {g:.0} bit/s, far below its cap {m} on a link with room");
        let paced = samples(&out, f as u32, &out.flows.pacing_rate_bps, 1.0, 20.0);
        assert!(!paced.is_empty() && paced.iter().all(|&p| p <= m as f64 + 1.0), "flow {f} is paced at most at its cap");
    }
    // The uncapped flow takes the rest.
    let rest = goodput(&out, 3, 5.0, 20.0) * 1500.0 / 1448.0;
    let left = (cap - caps.iter().sum::<u64>()) as f64;
    assert!(rest > 0.9 * left, "uncapped cubic {rest:.0} of {left:.0}");
}

#[test]
fn a_capped_cubic_flow_is_paced_at_its_cap_from_the_start() {
    // CUBIC does not pace; a cap paces it (SK_PACING_NEEDED), so even in slow start no 100 ms
    // carries more than the cap (and a train), while the uncapped flow's slow start overshoots it.
    let cap = 20_000_000u64;
    let run_one = |m: Option<u64>| {
        let mut c = with_flows(dumbbell(100_000_000, 20 * MS, 1.0), vec![FlowConfig { max_pacing_rate_bps: m, ..flow("cubic") }]);
        c.duration_ns = 3 * S;
        c.sample_interval_ns = 100 * MS;
        run(c)
    };
    let (capped, free) = (run_one(Some(cap)), run_one(None));
    let rates = |o: &ccsim::SimOutput| samples(o, 0, &o.flows.send_rate_bps, 0.0, 3.0);
    assert!(samples(&free, 0, &free.flows.pacing_rate_bps, 0.0, 3.0).is_empty(), "cubic alone is not paced");
    assert!(!samples(&capped, 0, &capped.flows.pacing_rate_bps, 0.2, 3.0).is_empty(), "a cap paces cubic");
    let worst = rates(&capped).into_iter().fold(0.0, f64::max);
    assert!(worst <= cap as f64 * 1.05, "capped cubic sent {worst:.0} bit/s in 100 ms, cap {cap}");
    assert!(worst >= cap as f64 * 0.9, "and reaches its cap: {worst:.0}");
    assert!(rates(&free).into_iter().fold(0.0, f64::max) > 2.0 * cap as f64);
}

#[test]
fn same_seed_same_output_and_conservation_with_datagrams() {
    let mk = |seed| {
        let onoff = FlowConfig {
            traffic: Traffic::Udp(UdpConfig { rate_bps: 30_000_000, size_bytes: 1200, on_ns: Some(50 * MS), off_ns: Some(80 * MS), exponential: true }),
            ..flow("")
        };
        let mut c = with_flows(dumbbell(40_000_000, 20 * MS, 1.0), vec![flow("cubic"), onoff, ping(5 * MS, 84), flow("bbr")]);
        c.duration_ns = 5 * S;
        c.seed = seed;
        run(c)
    };
    let (a, b, c) = (mk(3), mk(3), mk(4));
    let bits = |o: &ccsim::SimOutput| {
        o.flows
            .clone()
            .into_columns()
            .into_iter()
            .map(|(n, d)| {
                let v: Vec<u64> = match d {
                    ColumnData::F64(v) => v.iter().map(|x| x.to_bits()).collect(),
                    ColumnData::U64(v) => v,
                    ColumnData::U32(v) => v.iter().map(|&x| x as u64).collect(),
                    ColumnData::U16(v) => v.iter().map(|&x| x as u64).collect(),
                };
                (n, v)
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(bits(&a), bits(&b), "same seed, same columns bit for bit");
    assert_eq!(a.router.queue_bytes, b.router.queue_bytes);
    assert_eq!(a.events, b.events);
    assert_ne!(a.flows.sent_bytes, c.flows.sent_bytes, "another seed draws other on/off periods");
    for o in [&a, &c] {
        check_conservation(o);
    }
    // The on/off stream is off part of the time and sends at its rate while on.
    let sent = a.flow_final[1].sent_pkts as f64 * 1200.0 * 8.0;
    let frac_on = sent / (30_000_000.0 * 5.0);
    assert!(frac_on > 0.15 && frac_on < 0.7, "on {frac_on} of the time (mean 50 / 130)");
}


#[test]
fn tcp_only_settings_on_datagram_flows_and_bad_datagrams_are_refused() {
    let mut capped = udp(1_000_000, 1500);
    capped.max_pacing_rate_bps = Some(1_000_000);
    let cases = [
        (capped, "flows[0].max_pacing_rate_bps: 1000000: a udp flow is not paced"),
        (udp(0, 1500), "flows[0].traffic.rate_bps: 0: must be > 0"),
        (udp(1_000_000, 28), "flows[0].traffic.size_bytes: 28: must be from 29 to the mtu (1500)"),
        (ping(0, 84), "flows[0].traffic.interval_ns: 0: must be > 0"),
        (FlowConfig { max_pacing_rate_bps: Some(5), pacing: Some(false), ..flow("cubic") }, "flows[0].pacing: false"),
    ];
    for (f, want) in cases {
        let errs = ccsim::simulate(with_flows(dumbbell(10_000_000, 10 * MS, 1.0), vec![f])).err().expect("refused");
        assert!(errs.iter().any(|e| e.to_string().starts_with(want)), "{want:?} not in {errs:?}");
    }
}

#[test]
fn the_kernel_senders_clock_sends_what_the_simulator_sends() {
    // The kernel backend's udp-send follows `DatagramClock`: for each datagram flow of a trial
    // (a late exponential on/off stream, a periodic stream, a ping), the clock's count equals the
    // simulator's sent packets, and another seed gives other on/off draws.
    let onoff = |start| FlowConfig {
        traffic: Traffic::Udp(UdpConfig { rate_bps: 30_000_000, size_bytes: 1200, on_ns: Some(50 * MS), off_ns: Some(80 * MS), exponential: true }),
        start_ns: start,
        ..flow("")
    };
    let periodic = FlowConfig {
        traffic: Traffic::Udp(UdpConfig { rate_bps: 1_000_000, size_bytes: 1500, on_ns: Some(1_000), off_ns: Some(1_000), exponential: false }),
        ..flow("")
    };
    let counts = |seed: u64| {
        let mut c = with_flows(dumbbell(40_000_000, 20 * MS, 1.0), vec![flow("cubic"), onoff(700 * MS), periodic.clone(), ping(5 * MS, 84)]);
        c.duration_ns = 5 * S;
        c.seed = seed;
        let clock: Vec<u64> = c.flows[1..]
            .iter()
            .enumerate()
            .map(|(k, f)| {
                let d = ccsim::datagram::DatagramFlow::for_traffic(k as u32 + 1, &f.traffic, seed, c.duration_ns).unwrap();
                let mut clock = ccsim::datagram::DatagramClock::new(d, f.start_ns, c.duration_ns);
                let mut n = 0u64;
                let mut last = 0;
                while let Some(t) = clock.pop() {
                    assert!(t >= last && t >= f.start_ns && t <= c.duration_ns);
                    last = t;
                    n += 1;
                }
                n
            })
            .collect();
        let out = run(c);
        (clock, out.flow_final[1..].iter().map(|f| f.sent_pkts).collect::<Vec<_>>())
    };
    let (clock3, sim3) = counts(3);
    assert_eq!(clock3, sim3);
    assert!(clock3.iter().all(|&n| n > 10), "{clock3:?}");
    let (clock4, sim4) = counts(4);
    assert_eq!(clock4, sim4);
    assert_ne!(clock3[0], clock4[0], "another seed draws other on/off periods");
}
