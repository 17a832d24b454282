//! `Object::load` and `Instance::call` never panic: random bytes, and copies of reno.bpf.o and
//! bbr.bpf.o with bytes changed, are refused or loaded, and what loads runs every op to a result.

use std::sync::Arc;

use ccbpf::{AckSample, Env, Object, Op, RateSample, TcpSock};
use proptest::prelude::*;

fn object(name: &str) -> Option<Vec<u8>> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/bpf").join(name);
    std::fs::read(path).ok()
}

fn exercise(bytes: &[u8]) {
    let Ok(obj) = Object::load(bytes) else { return };
    let obj = Arc::new(obj);
    let mut flow = obj.instance();
    *flow.sock = TcpSock::initial(1448);
    let mut env = Env { now_ns: 1_000_000, jiffies: 250, prandom: 3, send_ack: false };
    let ack = AckSample { pkts_acked: 1, rtt_us: 20_000, in_flight: 10 };
    let rs = RateSample { delivered: 10, interval_us: 10_000, rtt_us: 20_000, acked_sacked: 1, ..RateSample::default() };
    for op in Op::ALL {
        let _ = flow.call(op, &[1, 2], Some(&ack), Some(&rs), &mut env);
    }
    let _ = flow.call(Op::CongControl, &[0, 0], None, Some(&rs), &mut env);
}

/// Changes `n` bytes of `base`, at positions and values from `edits`.
fn mutate(base: &[u8], edits: &[(usize, u8)]) -> Vec<u8> {
    let mut b = base.to_vec();
    for &(pos, v) in edits {
        let i = pos % b.len();
        b[i] = v;
    }
    b
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, failure_persistence: None, .. ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        exercise(&bytes);
        // an ELF64 BPF header in front of random bytes goes further into the parser
        let mut elf = b"\x7fELF\x02\x01\x01\x00".to_vec();
        elf.resize(18, 0);
        elf.extend_from_slice(&247u16.to_le_bytes());
        elf.extend_from_slice(&bytes);
        exercise(&elf);
    }

    #[test]
    fn mutated_reno_never_panics(edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8)) {
        if let Some(base) = object("reno.bpf.o") {
            exercise(&mutate(&base, &edits));
        }
    }

    #[test]
    fn mutated_reno_code_never_panics(edits in proptest::collection::vec((0usize..0x130, any::<u8>()), 1..4)) {
        // edits within the programs' instructions (they start with reno_ssthresh's first two)
        if let Some(base) = object("reno.bpf.o") {
            let start = code_start(&base);
            let shifted: Vec<(usize, u8)> = edits.iter().map(|&(p, v)| (start + p, v)).collect();
            exercise(&mutate(&base, &shifted));
        }
    }

    #[test]
    fn mutated_bbr_never_panics(edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8)) {
        if let Some(base) = object("bbr.bpf.o") {
            exercise(&mutate(&base, &edits));
        }
    }
}

/// Where reno_ssthresh's code starts: `r1 = *(u64 *)(r1 + 0); r1 = *(u32 *)(r1 + ...)`.
fn code_start(b: &[u8]) -> usize {
    b.windows(10).position(|w| w == [0x79, 0x11, 0, 0, 0, 0, 0, 0, 0x61, 0x11]).unwrap_or(64)
}

/// Mutated instructions load often enough to exercise the interpreter, not only the loader.
#[test]
fn mutated_code_often_loads() {
    let Some(base) = object("reno.bpf.o") else {
        eprintln!("skipped: target/bpf/reno.bpf.o is absent (make bpf)");
        return;
    };
    let start = code_start(&base);
    let mut loaded = 0;
    let mut state = 12345u64;
    for _ in 0..2000 {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let pos = start + (state >> 33) as usize % 0x130;
        let v = (state >> 20) as u8;
        let b = mutate(&base, &[(pos, v)]);
        if Object::load(&b).is_ok() {
            loaded += 1;
        }
        exercise(&b);
    }
    eprintln!("{loaded} of 2000 single-byte code mutations loaded");
    assert!(loaded > 200, "{loaded}");
}

/// The same on BBR's cong_control program (13 KB of code, maps, .rodata): mutated code that
/// loads is run through a short steady sequence of calls.
#[test]
fn mutated_bbr_code_runs_to_a_result() {
    let Some(base) = object("bbr.bpf.o") else {
        eprintln!("skipped: target/bpf/bbr.bpf.o is absent (make bpf)");
        return;
    };
    // bbr_main starts with r7 = *(u64 *)(r1 + 24); r6 = *(u64 *)(r1 + 0)
    let start = base
        .windows(16)
        .position(|w| w == [0x79, 0x17, 0x18, 0, 0, 0, 0, 0, 0x79, 0x16, 0, 0, 0, 0, 0, 0])
        .expect("bbr_main's first instructions");
    let (mut loaded, mut failed) = (0, 0);
    let mut state = 99u64;
    for _ in 0..500 {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let pos = start + (state >> 33) as usize % 0x32b8;
        let b = mutate(&base, &[(pos, (state >> 20) as u8)]);
        let Ok(obj) = Object::load(&b) else { continue };
        loaded += 1;
        let obj = Arc::new(obj);
        let mut flow = obj.instance();
        *flow.sock = TcpSock::initial(1448);
        let mut env = Env::default();
        let _ = flow.call(Op::Init, &[], None, None, &mut env);
        for k in 1..50u32 {
            flow.sock.delivered = k;
            let rs = RateSample { delivered: 10, prior_delivered: k.saturating_sub(10), interval_us: 10_000, rtt_us: 10_000, acked_sacked: 1, ..RateSample::default() };
            if flow.call(Op::CongControl, &[0, 0], None, Some(&rs), &mut env).is_err() {
                failed += 1;
                break;
            }
        }
    }
    eprintln!("{loaded} of 500 mutations of bbr_main loaded, {failed} of them failed at run time");
    assert!(loaded > 100, "{loaded}");
}

#[test]
fn truncated_objects_never_panic() {
    let Some(base) = object("reno.bpf.o") else {
        eprintln!("skipped: target/bpf/reno.bpf.o is absent (make bpf)");
        return;
    };
    for len in (0..base.len()).step_by(97) {
        exercise(&base[..len]);
    }
}
