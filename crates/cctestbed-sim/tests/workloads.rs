//! Flow completion times of sized flows, against the analytic slow-start time on an empty
//! path, and the telemetry of workload flows (rows only while open).
//!
//! The analytic time (receiver side, as the core measures it): with an initial window of IW
//! segments and no loss, the window doubles every round trip, so n rounds carry
//! IW (2^n - 1) segments and a flow of S bytes needs n = ceil(log2(S / (IW MSS) + 1)) rounds.
//! Its SYN leaves at 0 and the SYN-ACK is back at one RTT, when round 1 leaves; round k leaves
//! at k RTT; the last byte arrives a one-way delay after round n left, behind the serialisation
//! of the flow's packets at the bottleneck:
//!
//!     FCT = n RTT + delay_fwd + S_wire 8 / C,   S_wire = S + ceil(S / MSS) (MTU - MSS).
//!
//! The serialisation term bounds how much of the flow queues behind itself; the paths below
//! keep the whole flow within one BDP, so the flow stays round-limited and loss-free.
//! The model is window-based slow start (Reno's and CUBIC's, RFC 5681 with Linux's
//! cwnd += acked); BBR's STARTUP paces each round at 2.89 times the last round's delivery
//! rate, spreading a round over about 0.7 RTT, and is not what it describes.

mod common;
use common::*;

use ccsim::config::FlowConfig;

const MSS: u64 = 1448;
const MTU: u64 = 1500;

fn rounds(size: u64, iw: u64) -> u32 {
    let segs = size.div_ceil(MSS);
    let mut n = 0;
    while iw * ((1u64 << n) - 1) < segs {
        n += 1;
    }
    n
}

fn analytic_fct_ns(size: u64, iw: u64, rate: u64, rtt: i64) -> f64 {
    let wire = size + size.div_ceil(MSS) * (MTU - MSS);
    rounds(size, iw) as f64 * rtt as f64 + (rtt / 2) as f64 + wire as f64 * 8e9 / rate as f64
}

fn single(cc: &str, size: u64, rate: u64, rtt: i64) -> (SimConfigOut, FlowConfig) {
    let mut f = flow(cc);
    f.size_bytes = Some(size);
    f.start_ns = 100 * MS;
    let mut c = with_flows(dumbbell(rate, rtt, 2.0), vec![f.clone()]);
    c.duration_ns = 5 * S;
    (run(c), f)
}

type SimConfigOut = ccsim::SimOutput;

#[test]
fn a_single_short_flow_completes_in_the_analytic_slow_start_time() {
    // 1 Gbit/s, 50 ms (BDP 6.25 MB): every size below completes within its window's rounds
    let (rate, rtt) = (1_000_000_000u64, 50 * MS);
    for cc in ["reno", "cubic"] {
        for size in [1_000u64, 14_480, 14_481, 100_000, 1_000_000, 3_000_000] {
            let (out, f) = single(cc, size, rate, rtt);
            let c = &out.completions;
            assert_eq!(c.flow, vec![0]);
            assert_eq!(c.size_bytes[0], size);
            assert_eq!(c.delivered_bytes[0], size, "{cc} {size}: every byte delivered");
            assert_eq!(c.start_s[0], f.start_ns as f64 / 1e9);
            let fct = c.fct_ms[0] * 1e6;
            let want = analytic_fct_ns(size, 10, rate, rtt);
            eprintln!("{cc:6} {size:>8} B: {} rounds, FCT {:.2} ms, analytic {:.2} ms", rounds(size, 10), fct / 1e6, want / 1e6);
            assert!((fct - want).abs() <= rtt as f64, "{cc} {size} B: FCT {:.2} ms, analytic {:.2} ms", fct / 1e6, want / 1e6);
            assert_eq!(out.flow_final[0].retrans_segs, 0, "{cc} {size}: no loss on the empty path");
        }
    }
}

#[test]
fn the_initial_window_decides_the_rounds() {
    // 100 KB: 70 segments; IW 10 needs 3 rounds, IW 4 needs 5, IW 70 one
    let (rate, rtt) = (1_000_000_000u64, 40 * MS);
    for iw in [4u32, 10, 70] {
        let mut f = flow("reno");
        f.size_bytes = Some(100_000);
        f.initial_cwnd = iw;
        let mut c = with_flows(dumbbell(rate, rtt, 2.0), vec![f]);
        c.duration_ns = 3 * S;
        let out = run(c);
        let fct = out.completions.fct_ms[0] * 1e6;
        let want = analytic_fct_ns(100_000, iw as u64, rate, rtt);
        assert!((fct - want).abs() <= rtt as f64, "IW {iw}: FCT {:.2} ms, analytic {:.2} ms", fct / 1e6, want / 1e6);
    }
}

/// Many short flows arriving over time: `n` flows of `size` bytes, one every `gap`.
fn workload(n: u32, size: u64, gap: i64, cc: &str) -> ccsim::SimConfig {
    let flows = (0..n)
        .map(|k| {
            let mut f = flow(cc);
            f.size_bytes = Some(size + 997 * k as u64 % 50_000);
            f.start_ns = 7 * MS + k as i64 * gap;
            f.workload = true;
            f
        })
        .collect();
    let mut c = with_flows(dumbbell(100_000_000, 20 * MS, 1.0), flows);
    c.duration_ns = 2 * S;
    c
}

#[test]
fn workload_flows_have_rows_only_while_open_and_bytes_are_conserved() {
    let out = run(workload(150, 20_000, 10 * MS, "cubic"));
    let c = &out.completions;
    assert_eq!(c.flow.len(), 150);
    let dt = 0.01;
    for (k, &f) in c.flow.iter().enumerate() {
        let fin = &out.flow_final[f as usize];
        let rows: Vec<f64> = (0..out.flows.flow.len()).filter(|&i| out.flows.flow[i] == f).map(|i| out.flows.time_s[i]).collect();
        let start = c.start_s[k];
        if c.fct_ms[k].is_finite() {
            // every byte, exactly once, to the application; the sender sent at least that
            assert_eq!(c.delivered_bytes[k], c.size_bytes[k]);
            assert_eq!(fin.delivered_bytes, c.size_bytes[k]);
            let end = start + c.fct_ms[k] / 1e3;
            // rows: the samples from the one after the start to the first at or after the end
            let first = (start / dt).floor() * dt + dt;
            let last = (end / dt - 1e-9).ceil() * dt;
            let want = ((last - first) / dt).round() as usize + 1;
            assert_eq!(rows.len(), want, "flow {f}: start {start}, end {end}");
            assert!((rows[0] - first).abs() < 1e-9 && (rows[rows.len() - 1] - last).abs() < 1e-9);
            // its last row holds every byte delivered
            let i = (0..out.flows.flow.len()).rev().find(|&i| out.flows.flow[i] == f).unwrap();
            assert_eq!(out.flows.delivered_bytes[i], c.size_bytes[k]);
        } else {
            assert!(c.delivered_bytes[k] < c.size_bytes[k]);
        }
    }
    // far fewer rows than every flow at every sample
    assert!(out.flows.flow.len() < 150 * 200 / 10, "{} rows", out.flows.flow.len());
}

#[test]
fn completion_times_are_deterministic_per_seed() {
    let a = run(workload(80, 30_000, 5 * MS, "bbr"));
    let b = run(workload(80, 30_000, 5 * MS, "bbr"));
    assert_eq!(a.completions.fct_ms.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
               b.completions.fct_ms.iter().map(|x| x.to_bits()).collect::<Vec<_>>());
    assert_eq!(a.flows.time_s.len(), b.flows.time_s.len());
}
