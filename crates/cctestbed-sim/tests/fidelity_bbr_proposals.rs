//! Fidelity group: the shallow-buffer BBR proposals of the thesis (experiment 4) against
//! stock BBRv1 on the same trials and seeds.

mod common;
use ccsim::cc::bbr::Bbr;
use ccsim::config::DelayChange;
use ccsim::Simulation;
use common::*;

/// 4 flows, 80 Mb/s, 25 ms, staggered 100 ms, 60 s: (loss %, utilization) over 20-60 s.
fn four(cc: &str, bdp: f64) -> (f64, f64) {
    let mut c = with_flows(dumbbell(80_000_000, 25 * MS, bdp), (0..4).map(|_| flow(cc)).collect());
    for (i, f) in c.flows.iter_mut().enumerate() {
        f.start_ns = i as i64 * 100 * MS;
    }
    c.duration_ns = 60 * S;
    let out = run(c);
    (loss_pct(&out, 20.0, 60.0), total_goodput(&out, 20.0, 60.0) / payload_capacity(80_000_000))
}

#[test]
fn bbr_shallow_loses_less_than_bbr_at_one_bdp() {
    let (stock, shallow) = (four("bbr", 1.0).0, four("bbr-shallow", 1.0).0);
    println!("measured: loss at 1 BDP: BBR Shallow {shallow:.2} %, BBR {stock:.2} %");
    assert!(shallow < stock, "1 BDP: BBR Shallow {shallow:.2} % vs BBR {stock:.2} %");
}

/// Published (thesis Fig. 17): BBR Shallow also loses less at 0.5 BDP. In the model its
/// 1.5 BDP cwnd cap plus four flows' quantization budgets still exceeds pipe + buffer
/// (1.5 BDP), so the cap never binds there and loss is set by the 1.25 probing phases:
/// measured 6.9-8.8 % against BBR's 6.3-7.6 % over seeds 1-5.
#[test]
#[ignore = "published figure not met at 0.5 BDP: the 1.5 BDP cap does not bind; see README (validation)"]
fn bbr_shallow_loses_less_than_bbr_at_half_a_bdp() {
    let (stock, shallow) = (four("bbr", 0.5).0, four("bbr-shallow", 0.5).0);
    assert!(shallow < stock, "0.5 BDP: BBR Shallow {shallow:.2} % vs BBR {stock:.2} %");
}

#[test]
fn bbr_adaptive_loses_less_in_shallow_buffers_and_fills_deep_ones() {
    let (stock, adaptive) = (four("bbr", 0.5).0, four("bbr-adaptive", 0.5).0);
    assert!(adaptive < stock, "0.5 BDP: adaptive {adaptive:.2} % vs BBR {stock:.2} %");
    let (_, util) = four("bbr-adaptive", 8.0);
    println!("measured: loss at 0.5 BDP: adaptive {adaptive:.2} %, BBR {stock:.2} %; utilization at 8 BDP {util:.3}");
    assert!(util >= 0.95, "8 BDP: adaptive utilization {util:.3}");
}

/// Largest RTprop estimate (ms) of flow 0 after `from` seconds, sampled every 100 ms.
fn rtprop_trace(c: ccsim::SimConfig) -> Vec<(f64, f64)> {
    let end = c.duration_ns;
    let mut sim = Simulation::new(c).unwrap();
    let mut v = vec![];
    step_through(&mut sim, end, 100 * MS, |sim, t| {
        let b = sim.senders[0].cc.as_any().downcast_ref::<Bbr>().unwrap();
        v.push((t as f64 / 1e9, b.min_rtt_ns().map_or(f64::NAN, |x| x as f64 / 1e6)));
        true
    });
    v
}

#[test]
fn stable_rtprop_ignores_a_queue_held_by_cubic_where_bbr_inflates() {
    // One BBR flow against 2 CUBIC flows that keep a 1.75 BDP buffer full.
    let mk = |cc: &str| {
        let mut c = with_flows(dumbbell(80_000_000, 25 * MS, 1.75), vec![flow(cc), flow("cubic"), flow("cubic")]);
        c.duration_ns = 90 * S;
        rtprop_trace(c)
    };
    let true_rtprop = 25.0;
    let worst = |v: &[(f64, f64)]| v.iter().filter(|p| p.0 > 5.0).map(|p| p.1).fold(0.0, f64::max);
    let (stock, stable) = (worst(&mk("bbr")), worst(&mk("bbr-stable-rtprop")));
    println!("measured: largest RTprop estimate (true 25 ms): BBR {stock:.1} ms, stable {stable:.1} ms");
    assert!(stock > 1.2 * true_rtprop, "BBRv1's estimate never inflated (max {stock:.1} ms)");
    assert!(stable <= 1.2 * true_rtprop, "stable RTprop rose to {stable:.1} ms");
}

#[test]
fn stable_rtprop_follows_a_route_change_within_the_configured_probes() {
    // Propagation delay +50 % at 30 s (25 -> 37.5 ms); probes every 10 s, 3 must agree.
    let mut c = with_flows(dumbbell(80_000_000, 25 * MS, 2.0), vec![flow("bbr-stable-rtprop")]);
    c.duration_ns = 90 * S;
    c.link.delay_schedule = vec![DelayChange { at_ns: 30 * S, delay_fwd_ns: 18_750_000, delay_rev_ns: 18_750_000 }];
    let v = rtprop_trace(c);
    let adopted = v.iter().find(|p| p.0 > 30.0 && p.1 >= 37.5).map(|p| p.0);
    // The first probe after the change comes within one 10 s window, then two more.
    let bound = 30.0 + 10.0 + 2.0 * 10.2 + 1.0;
    println!("measured: route change at 30 s adopted at {adopted:?} s");
    assert!(adopted.is_some_and(|t| t <= bound), "new RTprop adopted at {adopted:?}, bound {bound:.1} s");
    // And not before the third probe: two probes alone never move it.
    assert!(adopted.unwrap() > 30.0 + 20.0, "adopted too early, at {adopted:?}");
    assert!(v.iter().all(|p| p.1 < 1.55 * 25.0), "estimate overshot the new RTprop");
}
