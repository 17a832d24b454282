//! Trial builders shared by the integration tests.
#![allow(dead_code)]

use ccsim::config::*;
use ccsim::SimOutput;

pub const MS: i64 = 1_000_000;
pub const S: i64 = 1_000_000_000;

/// A dumbbell of `rate` bit/s and `rtt` ns RTprop with a drop-tail queue of `bdp` BDPs.
pub fn dumbbell(rate: u64, rtt: i64, bdp: f64) -> SimConfig {
    SimConfig::dumbbell(rate, rtt, bdp)
}

pub fn flow(cc: &str) -> FlowConfig {
    FlowConfig::bulk(cc)
}

pub fn with_flows(mut c: SimConfig, flows: Vec<FlowConfig>) -> SimConfig {
    c.flows = flows;
    c
}

pub fn run(c: SimConfig) -> SimOutput {
    ccsim::simulate(c).expect("valid config")
}

/// Mean of flow `f`'s column over samples with time in [t0, t1].
pub fn flow_mean(out: &SimOutput, f: u32, col: &[f64], t0: f64, t1: f64) -> f64 {
    let v: Vec<f64> = (0..col.len())
        .filter(|&i| out.flows.flow[i] == f && out.flows.time_s[i] >= t0 && out.flows.time_s[i] <= t1)
        .map(|i| col[i])
        .filter(|x| x.is_finite())
        .collect();
    v.iter().sum::<f64>() / v.len() as f64
}

/// Payload goodput of flow `f` between t0 and t1 (from cumulative delivered bytes), bit/s.
pub fn goodput(out: &SimOutput, f: u32, t0: f64, t1: f64) -> f64 {
    let at = |t: f64| {
        (0..out.flows.time_s.len())
            .filter(|&i| out.flows.flow[i] == f && out.flows.time_s[i] <= t + 1e-9)
            .map(|i| out.flows.delivered_bytes[i])
            .last()
            .unwrap_or(0)
    };
    (at(t1) - at(t0)) as f64 * 8.0 / (t1 - t0)
}

/// Total goodput of all flows between t0 and t1.
pub fn total_goodput(out: &SimOutput, t0: f64, t1: f64) -> f64 {
    let n = out.flow_final.len() as u32;
    (0..n).map(|f| goodput(out, f, t0, t1)).sum()
}

/// Payload capacity: the IP rate scaled by MSS/MTU.
pub fn payload_capacity(rate: u64) -> f64 {
    rate as f64 * 1448.0 / 1500.0
}

/// Router drops over arrivals between t0 and t1, in percent.
pub fn loss_pct(out: &SimOutput, t0: f64, t1: f64) -> f64 {
    let r = &out.router;
    let idx = |t: f64| r.time_s.iter().rposition(|&x| x <= t + 1e-9).unwrap_or(0);
    let (a, b) = (idx(t0), idx(t1));
    let drops = |i: usize| r.drops_total(i);
    let arr = (r.arrivals_pkts[b] - r.arrivals_pkts[a]) as f64;
    100.0 * (drops(b) - drops(a)) as f64 / arr.max(1.0)
}

/// Mean router queue in bytes between t0 and t1.
pub fn mean_queue(out: &SimOutput, t0: f64, t1: f64) -> f64 {
    let r = &out.router;
    let v: Vec<f64> = (0..r.time_s.len())
        .filter(|&i| r.time_s[i] >= t0 && r.time_s[i] <= t1)
        .map(|i| r.queue_bytes[i] as f64)
        .collect();
    v.iter().sum::<f64>() / v.len() as f64
}

pub fn bdp_bytes(rate: u64, rtt: i64) -> f64 {
    rate as f64 / 8.0 * rtt as f64 / 1e9
}

/// Runs `sim` up to `end` in steps of `step` ns, calling `each(sim, t)` after every step, and
/// stops early when it returns false; for tests that watch the senders' state over time.
pub fn step_through(sim: &mut ccsim::Simulation, end: i64, step: i64, mut each: impl FnMut(&ccsim::Simulation, i64) -> bool) {
    let mut t = 0;
    while t < end {
        t += step;
        sim.run_until(t);
        if !each(sim, t) {
            break;
        }
    }
}
