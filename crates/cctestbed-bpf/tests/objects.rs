//! The project's own objects, target/bpf/reno.bpf.o and bbr.bpf.o (built by `make bpf`).

use std::sync::Arc;

use ccbpf::{Env, Object, Op, RateSample, TcpSock};

/// The object's bytes, or None (with the reason printed) when it has not been built.
fn object_bytes(name: &str) -> Option<Vec<u8>> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/bpf").join(name);
    match std::fs::read(&path) {
        Ok(b) => Some(b),
        Err(e) => {
            eprintln!("skipped: {} is absent ({e}); run `make bpf`", path.display());
            None
        }
    }
}

fn env() -> Env {
    Env { now_ns: 0, jiffies: 0, prandom: 1, send_ack: false }
}

#[test]
fn reno_loads() {
    let Some(b) = object_bytes("reno.bpf.o") else { return };
    let obj = Object::load(&b).unwrap();
    assert_eq!(obj.name(), "bpf_reno");
    assert!(obj.has_op(Op::Ssthresh) && obj.has_op(Op::CongAvoid) && obj.has_op(Op::UndoCwnd));
    assert!(!obj.has_op(Op::Init) && !obj.has_op(Op::CongControl));
}

#[test]
fn bbr_loads() {
    let Some(b) = object_bytes("bbr.bpf.o") else { return };
    let obj = Object::load(&b).unwrap();
    assert_eq!(obj.name(), "bpf_bbr");
    assert_eq!(obj.flags(), 1);
    assert!(obj.has_op(Op::Init) && obj.has_op(Op::CongControl));
}

/// Linux tcp_cong_avoid_ai (net/ipv4/tcp_cong.c), written out independently of the crate.
fn linux_cong_avoid_ai(cwnd: &mut u32, cnt: &mut u32, w: u32, acked: u32) {
    if *cnt >= w {
        *cnt = 0;
        *cwnd += 1;
    }
    *cnt += acked;
    if *cnt >= w {
        let delta = *cnt / w;
        *cnt -= delta * w;
        *cwnd += delta;
    }
}

fn reno() -> Option<Arc<Object>> {
    object_bytes("reno.bpf.o").map(|b| Arc::new(Object::load(&b).unwrap()))
}

#[test]
fn reno_ssthresh_halves() {
    let Some(obj) = reno() else { return };
    let mut flow = obj.instance();
    *flow.sock = TcpSock::initial(1448);
    flow.sock.snd_cwnd = 20;
    assert_eq!(flow.call(Op::Ssthresh, &[], None, None, &mut env()).unwrap(), Some(10));
    flow.sock.snd_cwnd = 3;
    assert_eq!(flow.call(Op::Ssthresh, &[], None, None, &mut env()).unwrap(), Some(2));
}

#[test]
fn reno_beta_from_rodata() {
    // beta_pct is a const volatile parameter in .rodata: patch it to 70 as a loader does.
    let Some(b) = object_bytes("reno.bpf.o") else { return };
    let vars = ccbpf::rodata_variables(&b).unwrap();
    assert_eq!(vars.len(), 1);
    assert_eq!((vars[0].name.as_str(), vars[0].value.as_slice()), ("beta_pct", &50u32.to_le_bytes()[..]));
    let patched = ccbpf::patch_rodata(&b, "beta_pct", &70u32.to_le_bytes()).unwrap();
    let obj = Arc::new(Object::load(&patched).unwrap());
    let mut flow = obj.instance();
    *flow.sock = TcpSock::initial(1448);
    flow.sock.snd_cwnd = 20;
    assert_eq!(flow.call(Op::Ssthresh, &[], None, None, &mut env()), Ok(Some(14)));
    assert!(ccbpf::patch_rodata(&b, "beta_pct", &[1, 2]).is_err());
    assert!(ccbpf::patch_rodata(&b, "no_such", &[0; 4]).is_err());
}

#[test]
fn bbr_parameters_are_rodata() {
    let Some(b) = object_bytes("bbr.bpf.o") else { return };
    let vars = ccbpf::rodata_variables(&b).unwrap();
    let gain = vars.iter().find(|v| v.name == "bbr_cwnd_gain").unwrap();
    assert_eq!(gain.value, 512u32.to_le_bytes());
}

#[test]
fn reno_cong_avoid_follows_linux() {
    let Some(obj) = reno() else { return };
    let mut flow = obj.instance();
    *flow.sock = TcpSock::initial(1448);
    flow.sock.snd_cwnd = 10;
    flow.sock.snd_ssthresh = 20;
    // slow start: +acked
    flow.call(Op::CongAvoid, &[0, 4], None, None, &mut env()).unwrap();
    assert_eq!((flow.sock.snd_cwnd, flow.sock.snd_cwnd_cnt), (14, 0));
    // crossing ssthresh: up to 20, the remaining 4 go to snd_cwnd_cnt
    flow.call(Op::CongAvoid, &[0, 10], None, None, &mut env()).unwrap();
    assert_eq!((flow.sock.snd_cwnd, flow.sock.snd_cwnd_cnt), (20, 4));
    // avoidance: one segment per window ACKed, exactly as tcp_cong_avoid_ai
    let (mut cwnd, mut cnt) = (20u32, 4u32);
    for i in 0..500u32 {
        let acked = 1 + i % 3;
        flow.call(Op::CongAvoid, &[0, acked as u64], None, None, &mut env()).unwrap();
        let w = cwnd;
        linux_cong_avoid_ai(&mut cwnd, &mut cnt, w, acked);
        assert_eq!((flow.sock.snd_cwnd, flow.sock.snd_cwnd_cnt), (cwnd, cnt), "after ACK {i}");
    }
    assert!(cwnd > 20 + 20, "grew about one per window: {cwnd}");
    // the clamp holds
    flow.sock.snd_cwnd_clamp = cwnd;
    flow.sock.snd_cwnd_cnt = cwnd - 1;
    flow.call(Op::CongAvoid, &[0, 5], None, None, &mut env()).unwrap();
    assert_eq!(flow.sock.snd_cwnd, cwnd);
}

#[test]
fn reno_undo_cwnd() {
    let Some(obj) = reno() else { return };
    let mut flow = obj.instance();
    *flow.sock = TcpSock::initial(1448);
    flow.sock.snd_cwnd = 10;
    flow.sock.prior_cwnd = 30;
    assert_eq!(flow.call(Op::UndoCwnd, &[], None, None, &mut env()).unwrap(), Some(30));
    flow.sock.prior_cwnd = 5;
    assert_eq!(flow.call(Op::UndoCwnd, &[], None, None, &mut env()).unwrap(), Some(10));
    // an op the object lacks
    assert_eq!(flow.call(Op::Init, &[], None, None, &mut env()).unwrap(), None);
}

/// BBR on a steady path: a 1000 packet/s bottleneck (one packet per ms), a 20 ms base RTT,
/// MSS 1448, modelled per millisecond: the sender sends what pacing and cwnd allow, the
/// bottleneck serves one packet per ms in order, and each ACK gives the rate sample
/// `tcp_rate_gen` would (delivered and interval since the packet's send, its RTT). tcp_bbr.c's
/// model then holds bw = 1 pkt/ms in BW_UNIT (2^24) = 16777, BDP = 20 packets, and:
///  - pacing: bbr_rate_bytes_per_sec = bw * mss * gain / 256 * (1e6/1e4 * (1e4 - 100)) >> 24
///    = 1,433,500 B/s at gain 1 (1000 pkt/s * 1448 B less the 1 % margin); in PROBE_BW the gain
///    cycles over 5/4, 3/4 and six phases of 1, so each rate must be one of those three
///    multiples (0.5 %: the formula's integer rounding, and a bw sample a packet off), and 1
///    the most frequent;
///  - cwnd: bbr_inflight(bw, cwnd_gain 2) = 2 * BDP = 40, plus the quantization budget
///    3 * tso_segs_goal (pacing 1.43 MB/s >> 10 = 1399 B < 1 MSS: the 2-segment minimum, +6),
///    rounded to even, plus 2 in cycle phase 0, plus the ACK-aggregation allowance (a packet or
///    two on this regular ACK clock): 46..=50 once converged.
#[test]
fn bbr_converges_on_a_steady_path() {
    let Some(b) = object_bytes("bbr.bpf.o") else { return };
    bbr_converges(&b);
}

/// The same source compiled for BPF ISA v3 (32-bit ALU and jumps, which the project's -mcpu=v1
/// objects do not use) must behave the same.
#[test]
fn bbr_compiled_for_isa_v3_converges_too() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("bbr-v3.bpf.o");
    if !root.join("target/bpf/vmlinux.h").exists() {
        eprintln!("skipped: target/bpf/vmlinux.h is absent (make bpf)");
        return;
    }
    let status = std::process::Command::new("clang")
        .args(["-g", "-O2", "-target", "bpf", "-mcpu=v3", "-I"])
        .arg(root.join("target/bpf"))
        .arg("-c")
        .arg(root.join("bpf/bbr.bpf.c"))
        .arg("-o")
        .arg(&out)
        .status();
    match status {
        Err(e) => eprintln!("skipped: clang is not available ({e})"),
        Ok(s) => {
            assert!(s.success(), "clang failed on bpf/bbr.bpf.c");
            bbr_converges(&std::fs::read(&out).unwrap());
        }
    }
}

fn bbr_converges(b: &[u8]) {
    use std::collections::VecDeque;
    let obj = Arc::new(Object::load(b).unwrap());
    let mut flow = obj.instance();
    let mss = 1448u32;
    *flow.sock = TcpSock::initial(mss);
    let mut env = env();
    let hz_ms = 4; // HZ = 250, the object's default
    flow.call(Op::Init, &[], None, None, &mut env).unwrap();
    assert_eq!(flow.sock.snd_ssthresh, 0x7fff_ffff);
    assert_eq!(flow.sock.inet_conn.icsk_inet.sk.sk_pacing_status, 1, "SK_PACING_NEEDED");
    assert!(flow.sock.inet_conn.icsk_inet.sk.sk_pacing_rate > 0);

    struct Sent {
        ack_at_us: u64,
        sent_us: u64,
        delivered: u32,
        delivered_mstamp: u64,
    }
    let mut in_flight: VecDeque<Sent> = VecDeque::new();
    let mut bottleneck_free_us = 0u64;
    let mut pacing_credit = 0.0f64;
    let (mut rates, mut cwnds) = (Vec::new(), Vec::new());
    for ms in 1..=3000u64 {
        let now_us = ms * 1000;
        env.now_ns = now_us * 1000;
        env.jiffies = ms / hz_ms;
        flow.sock.tcp_mstamp = now_us;
        flow.sock.tcp_clock_cache = now_us * 1000;
        flow.sock.tcp_wstamp_ns = now_us * 1000;
        while in_flight.front().is_some_and(|p| p.ack_at_us <= now_us) {
            let p = in_flight.pop_front().unwrap();
            let prior_in_flight = in_flight.len() as u32 + 1;
            let tp = &mut *flow.sock;
            tp.delivered += 1;
            tp.packets_out = in_flight.len() as u32;
            let rtt = (now_us - p.sent_us) as i64;
            tp.srtt_us = (rtt as u32) << 3;
            let rs = RateSample {
                prior_mstamp: p.delivered_mstamp,
                prior_delivered: p.delivered,
                delivered: (tp.delivered - p.delivered) as i32,
                interval_us: (now_us - p.delivered_mstamp) as i64,
                snd_interval_us: (p.sent_us - p.delivered_mstamp) as u32,
                rcv_interval_us: (now_us - p.delivered_mstamp) as u32,
                rtt_us: rtt,
                acked_sacked: 1,
                prior_in_flight,
                ..RateSample::default()
            };
            tp.delivered_mstamp = now_us;
            flow.call(Op::CongControl, &[0, 0], None, Some(&rs), &mut env).unwrap();
        }
        let rate = flow.sock.inet_conn.icsk_inet.sk.sk_pacing_rate;
        pacing_credit = (pacing_credit + rate as f64 / 1000.0 / mss as f64).min(4.0);
        while pacing_credit >= 1.0 && (in_flight.len() as u32) < flow.sock.snd_cwnd {
            pacing_credit -= 1.0;
            bottleneck_free_us = bottleneck_free_us.max(now_us) + 1000;
            let tp = &*flow.sock;
            in_flight.push_back(Sent { ack_at_us: bottleneck_free_us + 19_000, sent_us: now_us, delivered: tp.delivered, delivered_mstamp: tp.delivered_mstamp.max(1).min(now_us) });
            flow.sock.packets_out = in_flight.len() as u32;
        }
        rates.push(rate);
        cwnds.push(flow.sock.snd_cwnd);
    }
    // BBR's state is in socket-local storage (struct bbr_st); mode is MODE_PROBE_BW (2)
    let st = flow.sk_storage("bbr_state").expect("bbr_init created the storage");
    let mode_offset = 3 * 8 + 4 * 8 + 3 * 4; // after bw[3], four u64 stamps, min_rtt_us, rtt_cnt, next_rtt_delivered
    assert_eq!(st[mode_offset..mode_offset + 4], 2u32.to_le_bytes(), "PROBE_BW");
    let min_rtt_us = u32::from_le_bytes(st[56..60].try_into().unwrap());
    assert_eq!(min_rtt_us, 20_000);
    let base = (((16777u64 * mss as u64 * 256) >> 8) * (1_000_000 / 10_000 * (10_000 - 100))) >> 24;
    assert!((base as f64 - 1_433_500.0).abs() < 1000.0, "{base}");
    let tail = &rates[rates.len() - 1000..];
    let mut counts = [0usize; 3];
    for &r in tail {
        let ratio = r as f64 / base as f64;
        let k = [1.0, 1.25, 0.75].iter().position(|g| (ratio - g).abs() < 0.005);
        let k = k.unwrap_or_else(|| panic!("pacing rate {r} is {ratio:.4} x bw, not a PROBE_BW gain"));
        counts[k] += 1;
    }
    assert!(counts[0] > counts[1] + counts[2], "gain 1 most frequent: {counts:?}");
    assert!(counts[1] > 0 && counts[2] > 0, "the probing (5/4) and draining (3/4) phases appear: {counts:?}");
    let last = &cwnds[cwnds.len() - 1000..];
    eprintln!("pacing gains 1, 5/4, 3/4 over the last second: {counts:?}; cwnd {}..={}; first rates {:?}", last.iter().min().unwrap(), last.iter().max().unwrap(), &rates[..5]);
    for &c in last {
        assert!((46..=50).contains(&c), "cwnd {c} is not 2 x BDP (40) + quantization budget; last: {last:?}");
    }
}

/// `min_tso_segs` of the BBR port reads only `sk_pacing_rate` (tcp_bbr.c: 1 below 1.2 Mbit/s
/// in bytes, 2 above), so its result is kept with that field: repeated and alternating rates,
/// and other fields changing in between, give what the program computes.
#[test]
fn bbr_min_tso_segs_follows_the_pacing_rate() {
    let Some(b) = object_bytes("bbr.bpf.o") else { return };
    let obj = Arc::new(Object::load(&b).unwrap());
    let mut flow = obj.instance();
    *flow.sock = TcpSock::initial(1448);
    let mut env = env();
    for (k, rate) in [0u64, 149_999, 149_999, 150_000, 150_000, 10, 1 << 40, 1 << 40, 149_999].into_iter().enumerate() {
        flow.sock.inet_conn.icsk_inet.sk.sk_pacing_rate = rate;
        flow.sock.snd_cwnd = 10 + k as u32;
        let r = flow.call(Op::MinTsoSegs, &[], None, None, &mut env).unwrap();
        assert_eq!(r, Some(if rate < 150_000 { 1 } else { 2 }), "rate {rate}");
    }
}
