//! Fidelity group: Vegas (tcp_vegas.c) and H-TCP (tcp_htcp.c).

mod common;
use ccsim::cc::htcp::Htcp;
use ccsim::Simulation;
use common::*;

/// Vegas holds alpha..beta packets per flow in the queue as measured by its own estimator,
/// diff = cwnd (rtt - baseRTT) / baseRTT (Linux truncates diff to an integer, so "4" covers
/// 4.0-4.99). A lone flow's estimate is the router's queue. Flows that join 15 s apart, into a
/// queue the earlier ones have settled, take that backlog for propagation delay (the known
/// base-RTT error of Vegas: their SYN and first segments wait behind it) and add their own
/// alpha..beta on top, so the router holds more than the sum of the estimates, which is
/// faithful and printed but not asserted.
#[test]
fn vegas_keeps_two_to_four_packets_per_flow_queued() {
    for n in [1usize, 3] {
        let rate = 20_000_000;
        let mut c = with_flows(dumbbell(rate, 40 * MS, 8.0), (0..n).map(|_| flow("vegas")).collect());
        for (i, f) in c.flows.iter_mut().enumerate() {
            f.start_ns = i as i64 * 15 * S;
        }
        c.duration_ns = (30 + 15 * (n as i64 - 1)) * S;
        let end = c.duration_ns as f64 / 1e9;
        let out = run(c);
        let util = total_goodput(&out, end - 10.0, end) / payload_capacity(rate);
        // Minimum queue in each 50 ms (about one RTT) window over the last 10 s.
        let r = &out.router;
        let idx: Vec<usize> = (0..r.time_s.len()).filter(|&i| r.time_s[i] > end - 10.0).collect();
        let mins: Vec<f64> = idx.chunks(5).map(|w| w.iter().map(|&i| r.queue_pkts[i]).min().unwrap() as f64).collect();
        let router_per_flow = mins.iter().sum::<f64>() / mins.len() as f64 / n as f64;
        let est = &out.flows.cc.iter().find(|(k, _)| k == "cc.queued_pkts_est").expect("Vegas telemetry").1;
        let own: Vec<f64> = (0..n as u32).map(|f| flow_mean(&out, f, est, end - 10.0, end)).collect();
        println!("measured: {n} Vegas flows: own estimates {own:.2?} packets, router {router_per_flow:.2} per flow, utilization {util:.3}");
        for (f, q) in own.iter().enumerate() {
            assert!((2.0..5.0).contains(q), "Vegas flow {f} of {n} estimates {q:.2} packets of its own queued");
        }
        if n == 1 {
            assert!((2.0..5.0).contains(&router_per_flow), "a lone Vegas flow: {router_per_flow:.2} packets queued");
        }
        assert!(util > 0.95, "{n} Vegas flows: utilization {util:.3}");
        assert_eq!(loss_pct(&out, 0.0, end), 0.0, "Vegas should not fill an 8 BDP buffer");
    }
}

/// beta = minRTT / maxRTT, clamped to [0.5, 0.8]: a shallow queue (small RTT swing) backs
/// off gently, a deep one halves.
#[test]
fn htcp_backoff_follows_the_rtt_ratio_within_its_bounds() {
    for (bdp, lo, hi) in [(0.1, 0.75, 0.8), (2.0, 0.5, 0.55)] {
        let mut c = with_flows(dumbbell(50_000_000, 100 * MS, bdp), vec![flow("htcp")]);
        c.duration_ns = 60 * S;
        let end = c.duration_ns;
        let mut sim = Simulation::new(c).unwrap();
        let mut betas = vec![];
        step_through(&mut sim, end, 10 * MS, |sim, t| {
            let h = sim.senders[0].cc.as_any().downcast_ref::<Htcp>().unwrap();
            let b = h.beta_ratio();
            assert!((0.5..=0.8).contains(&b), "beta {b} out of [0.5, 0.8]");
            if t > 20 * S {
                betas.push(b);
            }
            true
        });
        let mean = betas.iter().sum::<f64>() / betas.len() as f64;
        println!("measured: H-TCP mean beta {mean:.3} with a {bdp} BDP buffer");
        assert!((lo..=hi).contains(&mean), "{bdp} BDP buffer: mean beta {mean:.3}, expected [{lo}, {hi}]");
    }
}

#[test]
fn htcp_grows_faster_than_reno_long_after_a_loss() {
    // On a long fat pipe with rare random loss, H-TCP's time-based increase recovers the
    // window much faster than Reno's one packet per RTT.
    let mk = |cc: &str| {
        let mut c = with_flows(dumbbell(500_000_000, 100 * MS, 1.0), vec![flow(cc)]);
        c.duration_ns = 60 * S;
        c.link.loss = ccsim::config::LossConfig::Bernoulli { p: 1e-5 };
        goodput(&run(c), 0, 10.0, 60.0)
    };
    let (h, r) = (mk("htcp"), mk("reno"));
    println!("measured: H-TCP {:.0} Mb/s vs Reno {:.0} Mb/s at 1e-5 loss, 500 Mb/s, 100 ms", h / 1e6, r / 1e6);
    assert!(h > 1.5 * r, "H-TCP {:.0} Mb/s vs Reno {:.0} Mb/s", h / 1e6, r / 1e6);
}

/// tcp_htcp.c keeps minRTT and maxRTT in jiffies (`usecs_to_jiffies`, rounded up) and adapts
/// beta = minRTT / maxRTT only when minRTT exceeds `msecs_to_jiffies(10)`. On an 11 ms path a
/// 250 Hz kernel counts minRTT as 3 ticks, which is not above msecs_to_jiffies(10) = 3, so
/// beta stays at 0.5; with 1 ms ticks 11 > 10 and beta follows the RTT ratio (about 11/17 with
/// half a BDP of queue). The bandwidth switch, which also resets beta to 0.5, is off here.
#[test]
fn htcp_measures_rtt_in_the_kernels_ticks() {
    let mean_beta = |hz: f64| {
        let mut f = flow("htcp");
        f.params.insert("hz".into(), hz);
        f.params.insert("use_bandwidth_switch".into(), 0.0);
        let mut c = with_flows(dumbbell(50_000_000, 11 * MS, 0.5), vec![f]);
        c.duration_ns = 30 * S;
        let end = c.duration_ns;
        let mut sim = Simulation::new(c).unwrap();
        let mut betas = vec![];
        step_through(&mut sim, end, 10 * MS, |sim, t| {
            if t > 10 * S {
                betas.push(sim.senders[0].cc.as_any().downcast_ref::<Htcp>().unwrap().beta_ratio());
            }
            true
        });
        betas.iter().sum::<f64>() / betas.len() as f64
    };
    let (b250, b1000) = (mean_beta(250.0), mean_beta(1000.0));
    println!("measured: H-TCP mean beta {b250:.3} at HZ 250, {b1000:.3} at HZ 1000 (11 ms, 0.5 BDP)");
    assert!(b250 <= 0.51, "HZ 250: mean beta {b250:.3}");
    assert!(b1000 >= 0.6, "HZ 1000: mean beta {b1000:.3}");
}
