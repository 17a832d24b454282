//! Published behaviour of Reno (RFC 5681, Mathis et al. 1997) and CUBIC (RFC 9438, Linux
//! tcp_cubic.c) in the simulator.

mod common;
use ccsim::cc::CaState;
use ccsim::config::LossConfig;
use ccsim::Simulation;
use common::*;

/// One observed loss event: cwnd just before recovery, ssthresh set, cwnd on leaving it.
#[derive(Debug)]
struct LossEvent {
    t_enter: f64,
    cwnd_before: u32,
    cwnd_after: u32,
    t_exit: f64,
}

/// Steps the simulation every `step` ns and records each recovery episode of flow 0, and
/// (time, cwnd, srtt) samples outside recovery.
fn trace(c: ccsim::SimConfig, step: i64) -> (Vec<LossEvent>, Vec<(f64, u32, f64)>) {
    let end = c.duration_ns;
    let mut sim = Simulation::new(c).unwrap();
    let mut events = vec![];
    let mut samples = vec![];
    let mut last_cwnd = 0;
    let mut open: Option<(f64, u32)> = None;
    step_through(&mut sim, end, step, |sim, t| {
        let s = &sim.senders[0];
        let ts = t as f64 / 1e9;
        let in_rec = matches!(s.ca_state, CaState::Recovery | CaState::Loss);
        match (in_rec, open) {
            (true, None) => open = Some((ts, last_cwnd)),
            (false, Some((t0, before))) => {
                events.push(LossEvent { t_enter: t0, cwnd_before: before, cwnd_after: s.w.cwnd, t_exit: ts });
                open = None;
            }
            _ => {}
        }
        if !in_rec {
            samples.push((ts, s.w.cwnd, s.rtt.srtt as f64 / 1e9));
        }
        last_cwnd = s.w.cwnd;
        true
    });
    (events, samples)
}

#[test]
fn single_flow_fills_the_link_with_one_bdp_or_more() {
    for cc in ["reno", "cubic"] {
        for bdp in [1.0, 2.0, 8.0] {
            let mut c = with_flows(dumbbell(80_000_000, 25 * MS, bdp), vec![flow(cc)]);
            c.duration_ns = 30 * S;
            let out = run(c);
            let util = total_goodput(&out, 5.0, 30.0) / payload_capacity(80_000_000);
            println!("measured: {cc} at {bdp} BDP: utilization {util:.3}");
            assert!(util >= 0.95, "{cc} at {bdp} BDP: utilization {util:.3} < 0.95");
        }
    }
}

#[test]
fn reno_halves_cwnd_per_loss_and_grows_one_packet_per_rtt() {
    // 20 Mb/s, 40 ms, 1 BDP: a sawtooth of single loss events in congestion avoidance.
    let mut c = with_flows(dumbbell(20_000_000, 40 * MS, 1.0), vec![flow("reno")]);
    c.duration_ns = 60 * S;
    let (events, samples) = trace(c, MS);
    let ca_events: Vec<_> = events.iter().filter(|e| e.t_enter > 5.0).collect();
    assert!(ca_events.len() >= 5, "expected a sawtooth, saw {} loss events", ca_events.len());
    for e in &ca_events {
        let expect = (e.cwnd_before / 2).max(2);
        assert!(e.cwnd_after.abs_diff(expect) <= 1, "cwnd {} -> {} (expected {expect}): {e:?}", e.cwnd_before, e.cwnd_after);
    }
    // Between losses: cwnd gained per RTT elapsed (RTTs counted with the srtt in force).
    for w in ca_events.windows(2) {
        let seg: Vec<_> = samples.iter().filter(|s| s.0 > w[0].t_exit + 0.05 && s.0 < w[1].t_enter - 0.05).collect();
        if seg.len() < 100 {
            continue;
        }
        let rtts: f64 = seg.windows(2).map(|p| (p[1].0 - p[0].0) / p[0].2).sum();
        let grown = seg.last().unwrap().1 as f64 - seg[0].1 as f64;
        let per_rtt = grown / rtts;
        assert!((0.85..=1.15).contains(&per_rtt), "Reno grew {per_rtt:.3} packets per RTT");
    }
}

/// Mathis et al.: throughput = 1.22 MSS / (RTT sqrt(p)) for Reno under random loss p.
#[test]
fn reno_matches_the_mathis_model_under_random_loss() {
    for (p, secs) in [(0.001, 600), (0.01, 300)] {
        let rtt = 100 * MS;
        let mut c = with_flows(dumbbell(100_000_000, rtt, 1.0), vec![flow("reno")]);
        c.duration_ns = secs * S;
        c.link.loss = LossConfig::Bernoulli { p };
        let out = run(c);
        let measured = goodput(&out, 0, 10.0, secs as f64);
        let model = 1.22 * 1448.0 * 8.0 / (rtt as f64 / 1e9 * p.sqrt());
        let err = (measured - model).abs() / model;
        println!("measured: Reno at p={p}: {:.2} Mb/s vs Mathis {:.2} Mb/s ({:+.1} %)", measured / 1e6, model / 1e6, (measured - model) / model * 100.0);
        assert!(err <= 0.25, "p={p}: Reno goodput {:.2} Mb/s vs Mathis {:.2} Mb/s ({:.0} %)", measured / 1e6, model / 1e6, err * 100.0);
    }
}

#[test]
fn cubic_cuts_to_beta_and_regains_w_max_after_k() {
    // Without fast convergence W_max is the cwnd at the loss, so K = cbrt(0.3 W_max / 0.4)
    // exactly as RFC 9438 states; with it, W_max is lowered and K follows from the cut.
    cubic_epochs(false);
    cubic_epochs(true);
}

fn cubic_epochs(fast_convergence: bool) {
    // 10 Mb/s, 100 ms, 1 BDP (83 packets): W_max ~ 170 packets, K ~ 5 s.
    let rtt = 100 * MS;
    let mut f = flow("cubic");
    f.params.insert("fast_convergence".into(), if fast_convergence { 1.0 } else { 0.0 });
    let mut c = with_flows(dumbbell(10_000_000, rtt, 1.0), vec![f]);
    c.duration_ns = 90 * S;
    let end = c.duration_ns;
    let mut sim = Simulation::new(c).unwrap();
    let mut prev_state = CaState::Open;
    let mut last_cwnd = 0u32;
    let mut checked_k = 0;
    let mut checked_beta = 0;
    // (recovery exit time, W_max for that epoch, cwnd at the epoch's start)
    let mut epoch: Option<(f64, u32, u32)> = None;
    step_through(&mut sim, end, MS, |sim, t| {
        let s = &sim.senders[0];
        let ts = t as f64 / 1e9;
        if s.ca_state == CaState::Recovery && prev_state != CaState::Recovery {
            if ts > 10.0 {
                // ssthresh = 717/1024 of cwnd at the loss.
                let expect = last_cwnd * 717 / 1024;
                assert!(s.w.ssthresh.abs_diff(expect) <= 1, "ssthresh {} expected {expect}", s.w.ssthresh);
                checked_beta += 1;
            }
            epoch = None;
        }
        if s.ca_state == CaState::Open && prev_state == CaState::Recovery && ts > 10.0 {
            let w_max = sim.senders[0].cc.as_ref().telemetry_value(0) as u32;
            if !fast_convergence {
                // W_max is the cwnd at the loss, and the cut is to beta W_max.
                assert!(s.w.cwnd.abs_diff(w_max * 717 / 1024) <= 1, "cwnd {} after a loss at {w_max}", s.w.cwnd);
            }
            epoch = Some((ts, w_max, s.w.cwnd));
        }
        if let Some((t0, w_max, w0)) = epoch {
            if s.w.cwnd >= w_max {
                // K = cbrt((W_max - cwnd_epoch) / C), = cbrt(W_max (1 - beta) / C) without
                // fast convergence; measured from the start of the epoch.
                let k = ((w_max - w0) as f64 / 0.4).cbrt();
                let took = ts - t0;
                println!("measured: W_max {w_max}, regained after {took:.2} s, K {k:.2} s");
                // Linux adds delay_min to t, so W_max comes about one RTprop early; and
                // bictcp_update rounds C (K - t)^3 down to whole packets, so the target is
                // W_max itself once that is below one packet, cbrt(1 / C) = 1.36 s before K.
                let expect = k - rtt as f64 / 1e9 - (1.0f64 / 0.4).cbrt();
                assert!((took - expect).abs() <= 0.1 * k + 0.1, "W_max {w_max}: regained after {took:.2} s, K - RTprop = {expect:.2} s");
                checked_k += 1;
                epoch = None;
            }
        }
        prev_state = s.ca_state;
        last_cwnd = s.w.cwnd;
        true
    });
    assert!(checked_beta >= 3 && checked_k >= 3, "too few epochs: beta {checked_beta}, K {checked_k}");
}

#[test]
fn cubic_fills_a_deep_drop_tail_queue() {
    let rate = 80_000_000;
    let rtt = 25 * MS;
    let mut c = with_flows(dumbbell(rate, rtt, 8.0), vec![flow("cubic"), flow("cubic"), flow("cubic"), flow("cubic")]);
    c.duration_ns = 60 * S;
    let out = run(c);
    let q = mean_queue(&out, 20.0, 60.0);
    let buffer = 8.0 * bdp_bytes(rate, rtt);
    println!("measured: 4 CUBIC flows keep {:.2} BDP queued in an 8 BDP buffer", q / bdp_bytes(rate, rtt));
    assert!(q > 0.5 * buffer, "mean queue {:.2} BDP, buffer 8 BDP", q / bdp_bytes(rate, rtt));
}

#[test]
fn cubic_hystart_leaves_slow_start_before_the_first_loss_on_a_deep_buffer() {
    let mut c = with_flows(dumbbell(80_000_000, 25 * MS, 8.0), vec![flow("cubic")]);
    c.duration_ns = 5 * S;
    let end = c.duration_ns;
    let mut sim = Simulation::new(c).unwrap();
    let mut ended = false;
    step_through(&mut sim, end, MS, |sim, _| {
        let s = &sim.senders[0];
        if s.w.ssthresh != u32::MAX {
            assert_eq!(s.stats.lost_segs, 0, "ssthresh was first set by a loss, not by HyStart");
            assert_eq!(s.ca_state, CaState::Open);
            assert!(s.w.cwnd >= 16);
            ended = true;
        }
        !ended
    });
    assert!(ended, "slow start never ended");
}
