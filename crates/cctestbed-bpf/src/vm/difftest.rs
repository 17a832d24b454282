//! Differential test of the fast loop (`fast::run_fast`) against the reference interpreter
//! ([`step`](super::step)) alone: random, well-formed programs (every ALU32/ALU64 operation
//! with register and immediate operands, division and modulo by zero, shifts, byte swaps, sign
//! extension, loads and stores of 1, 2, 4 and 8 bytes to the stack, the socket view, the
//! context, the rate sample (its pointer read from the context, where the compiler expects it;
//! the sample sometimes absent), socket storage and data sections at offsets in and out of
//! bounds, atomics, JMP and JMP32 jumps forward and backward, helper, kfunc and bpf-to-bpf calls,
//! the fused sequences of [`compile`](super::compile)) must give the same r0 or the same error
//! (instruction index and message), and leave the same stack, socket view, data and
//! environment. Loops end by the instruction budget, which each case draws small so that
//! exhaustion (and the hand-over of runs the budget does not cover) is exercised too.

use std::sync::Mutex;

use proptest::prelude::*;
use proptest::strategy::ValueTree;

use super::*;
use crate::load::{DataSection, Object, Shared};
use crate::view::{ViewType, TcpSock};

/// One random program element: (kind, a, b, c, w), interpreted by [`lower`].
type Item = (u8, u8, u8, u16, u64);

const RODATA_LEN: usize = 64;
const BSS_LEN: usize = 32;

fn ins(code: u8, dst: u8, src: u8, off: i16, imm: i64) -> Insn {
    Insn { code, dst, src, off, imm }
}

/// An immediate: mostly the values where semantics differ (0, ±1, shift widths, extremes).
fn imm_of(w: u64) -> i64 {
    let v = w >> 8;
    match w & 15 {
        0 => 0,
        1 => 1,
        2 => -1,
        3 => (v % 70) as i64,
        4 => i32::MIN as i64,
        5 => i32::MAX as i64,
        6 => -((v % 70) as i64),
        7 => 0x8000,
        8 => 0x80,
        _ => v as i32 as i64,
    }
}

/// A 64-bit value for `ld_imm64`: small, extreme, or one of the call's pointers.
fn imm64_of(w: u64, c: u16) -> i64 {
    let off = (c % 600) as u64;
    (match (w >> 60) & 7 {
        0 => sock_addr().wrapping_add(off),
        1 => data_addr(0, off % 80),
        2 => data_addr(1, off % 48),
        3 => Machine::sk_storage_addr(0).wrapping_add(off % 24),
        4 => addr(R_STACK, off),
        5 => imm_of(w) as u64,
        6 => (1u64 << 63).wrapping_add(w & 0xff),
        _ => w,
    }) as i64
}

/// The destination register: mostly r0-r5, so that the pointers of the prologue (r6-r9) stay
/// usable for a while.
fn dst_of(a: u8) -> u8 {
    if a & 0x80 != 0 {
        a % 10
    } else {
        a % 6
    }
}

/// A base register and offset for a memory access of `n` bytes.
fn mem_of(b: u8, c: u16, n: usize) -> (u8, i16) {
    let sock = TcpSock::SIZE as i64;
    let writable = offsets_writable();
    let c = c as i64;
    match b % 9 {
        0 | 1 => (10, if c & 1 == 0 { -((c >> 1) % 530) } else { (c >> 1) % 16 - 8 } as i16),
        2 => (6, ((c % (sock + 24)) - 8) as i16),
        3 => {
            // at or around a writable field
            let (_, s, e) = writable[(c as usize) % writable.len()];
            let span = (e - s) as i64 + n as i64 + 2;
            (6, (s as i64 + ((c >> 4) % span) - 1) as i16)
        }
        4 => (7, ((c % 600) - 300) as i16),
        5 => (1, ((c % 40) - 8) as i16),
        6 => (8, ((c % 32) - 8) as i16),
        7 => (9, ((c % 80) - 8) as i16),
        _ => ((b >> 4) % 11, ((c % 64) - 32) as i16),
    }
}

fn offsets_writable() -> Vec<(&'static str, usize, usize)> {
    crate::view::offsets::writable()
}

/// An instruction, and for a jump or call the raw choice of its target (resolved by [`lower`]).
type Pending = (Insn, Option<u16>);

fn item(it: &Item, out: &mut Vec<Pending>) {
    let &(kind, a, b, c, w) = it;
    let d = dst_of(a);
    let s = b % 11;
    let x = (w >> 4) & 1 != 0; // register operand
    let class64 = (w >> 5) & 1 != 0;
    let imm = imm_of(w);
    let plain = |i: Insn| (i, None);
    match kind % 24 {
        0..=6 => {
            const OPS: [u8; 13] = [0x00, 0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0x80, 0x90, 0xa0, 0xb0, 0xc0];
            let op = OPS[(c as usize) % OPS.len()];
            let class = if class64 { 7 } else { 4 };
            let x = x && op != 0x80;
            let off = match op {
                0x30 | 0x90 => ((c >> 8) & 1) as i16,
                0xb0 if x => [0, 0, 8, 16, 32][(c as usize >> 8) % if class64 { 5 } else { 4 }],
                _ => 0,
            };
            let code = class | op | if x { 0x08 } else { 0 };
            out.push(plain(ins(code, d, if x { s } else { 0 }, off, if x { 0 } else { imm })));
        }
        7 => {
            // byte swaps: to-le / to-be (ALU) and bswap (ALU64)
            let code = [0xd4, 0xdc, 0xd7][(c as usize) % 3];
            out.push(plain(ins(code, d, 0, 0, [16, 32, 64][(c as usize >> 4) % 3])));
        }
        8..=10 => {
            let n = [1, 2, 4, 8][(a as usize >> 3) % 4];
            let size = match n {
                1 => 0x10,
                2 => 0x08,
                4 => 0x00,
                _ => 0x18,
            };
            let sign = (w >> 6) & 1 != 0 && n != 8;
            let (base, off) = mem_of(b, c, n);
            out.push(plain(ins(if sign { 0x81 } else { 0x61 } | size, d, base, off, 0)));
        }
        11..=12 => {
            let n = [1, 2, 4, 8][(a as usize >> 3) % 4];
            let size = match n {
                1 => 0x10,
                2 => 0x08,
                4 => 0x00,
                _ => 0x18,
            };
            let (base, off) = mem_of(b, c, n);
            let src = (w >> 8) as u8 % 11;
            if x {
                out.push(plain(ins(0x63 | size, base, src, off, 0)));
            } else {
                out.push(plain(ins(0x62 | size, base, 0, off, imm)));
            }
        }
        13 => {
            let n = if class64 { 0x18 } else { 0x00 };
            let (base, off) = mem_of(b, c, if class64 { 8 } else { 4 });
            let op = [0x00, 0x01, 0x40, 0x41, 0x50, 0x51, 0xa0, 0xa1, 0xe1, 0xf1][(w as usize >> 8) % 10];
            out.push(plain(ins(0xc3 | n, base, s, off, op)));
        }
        14..=17 => {
            const OPS: [u8; 11] = [0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0xa0, 0xb0, 0xc0, 0xd0];
            let op = OPS[(a as usize) % OPS.len()];
            let class = if class64 { 5 } else { 6 };
            let code = class | op | if x { 0x08 } else { 0 };
            out.push((ins(code, d, if x { s } else { 0 }, 0, if x { 0 } else { imm }), Some(c)));
        }
        18 => {
            let code = if x { 0x06 } else { 0x05 };
            out.push((ins(code, 0, 0, 0, 0), Some(c)));
        }
        19 => {
            // bpf_ktime_get_ns, bpf_get_prandom_u32, bpf_jiffies64, bpf_ktime_get_coarse_ns,
            // bpf_tcp_send_ack (socket in r1, or not), bpf_map_lookup_elem (no map: an error);
            // or a kfunc (socket in r1, or not)
            if (w >> 40) % 4 == 0 {
                if x {
                    out.push(plain(ins(0xbf, 1, 6, 0, 0)));
                }
                out.push(plain(ins(0x85, 0, CALL_KFUNC, 0, (c % 5) as i64)));
                return;
            }
            let id = [5, 7, 118, 160, 116, 5, 1][(c as usize) % 7];
            if id == 116 && x {
                out.push(plain(ins(0xbf, 1, 6, 0, 0)));
            }
            out.push(plain(ins(0x85, 0, CALL_HELPER, 0, id)));
        }
        20 => out.push((ins(0x85, 0, CALL_LOCAL, 0, 0), Some(c))),
        21 => out.push(plain(ins(0x95, 0, 0, 0, 0))),
        22 => {
            out.push(plain(ins(0x18, d, 0, 0, imm64_of(w, c))));
            out.push(plain(Insn::filler()));
        }
        _ => {
            // the sequences compile() fuses
            let s2 = (b >> 4) % 10;
            if (w >> 56) % 5 == 0 {
                // the sample pointer from the context (slot 1), then a load through it
                let n = [0x71, 0x69, 0x61, 0x79][(a as usize >> 3) % 4];
                let off = ((w >> 32) % 96) as i16 - 8;
                out.extend([plain(ins(0x79, d, 1, 8, 0)), plain(ins(n, dst_of(b), d, off, 0))]);
                return;
            }
            match c % 9 {
                0 => out.extend([plain(ins(0x67, d, 0, 0, 32)), plain(ins(0x77, d, 0, 0, 32))]),
                1 => out.extend([plain(ins(0x67, d, 0, 0, 32)), plain(ins(0xc7, d, 0, 0, 32))]),
                2 => out.extend([plain(ins(0xbf, d, s, 0, 0)), plain(ins(0x67, d, 0, 0, 32)), plain(ins(0x77, d, 0, 0, 32))]),
                3 => out.extend([plain(ins(0xbf, d, s, 0, 0)), plain(ins(0x67, d, 0, 0, 32)), plain(ins(0xc7, d, 0, 0, 32))]),
                4 | 5 => {
                    let code = if c % 9 == 4 { 0x2d } else { 0x6d };
                    out.extend([plain(ins(0xb7, d, 0, 0, imm)), (ins(code, s2, d, 0, 0), Some((w >> 16) as u16))]);
                }
                6 | 7 => {
                    let (base, off) = mem_of(b, (w >> 32) as u16, 4);
                    let code = if c % 9 == 6 { 0x15 } else { 0x55 };
                    let cmp = if (w >> 7) & 1 != 0 { imm } else { 0 };
                    out.extend([plain(ins(0x61, d, base, off, 0)), (ins(code, d, 0, 0, cmp), Some((w >> 16) as u16))]);
                }
                _ => {
                    let n = [1, 2, 4, 8][(a as usize >> 3) % 4];
                    let size = [0x10, 0x08, 0x00, 0x18][(a as usize >> 3) % 4];
                    let k = (w >> 16) % (RODATA_LEN as u64 + 8);
                    let off = ((w >> 32) % 24) as i16 - 8;
                    let _ = n;
                    out.extend([plain(ins(0x18, d, 0, 0, data_addr(0, k) as i64)), plain(Insn::filler()), plain(ins(0x61 | size, d, d, off, 0))]);
                }
            }
        }
    }
}

/// The program: a prologue that puts pointers in r6-r9 and values in r0, r2-r5, the items, and
/// (when `exit`) a final exit. Jump and call targets are resolved to any instruction that is
/// not the second half of an `ld_imm64`, fused sequences' middles included.
fn lower(items: &[Item], regs: [u64; 5], exit: bool) -> Vec<Insn> {
    let mut p: Vec<Pending> = Vec::new();
    let ld = |d: u8, v: u64| [(ins(0x18, d, 0, 0, v as i64), None), (Insn::filler(), None)];
    p.extend(ld(6, sock_addr()));
    p.extend([(ins(0xbf, 7, 10, 0, 0), None), (ins(0x07, 7, 0, 0, -64), None)]);
    p.extend(ld(8, Machine::sk_storage_addr(0)));
    p.extend(ld(9, data_addr(0, 0)));
    for (i, v) in regs.iter().enumerate() {
        let reg = [0, 2, 3, 4, 5][i];
        p.extend(ld(reg, imm64_of(*v, (*v >> 20) as u16) as u64));
    }
    for it in items {
        item(it, &mut p);
    }
    if exit {
        p.push((ins(0x95, 0, 0, 0, 0), None));
    }
    let n = p.len();
    let mut insns: Vec<Insn> = p.iter().map(|(x, _)| *x).collect();
    for (i, (x, t)) in p.iter().enumerate() {
        let Some(t) = t else { continue };
        let mut t = *t as usize % n;
        if insns[t].code == 0 && t > 0 && insns[t - 1].code == 0x18 {
            t -= 1;
        }
        let rel = t as i64 - (i as i64 + 1);
        match x.code {
            0x85 => insns[i].imm = t as i64,
            0x06 => insns[i].imm = rel,
            _ => insns[i].off = rel as i16,
        }
    }
    insns
}

struct World {
    object: Object,
    sock: Vec<u8>,
    ctx: Vec<u8>,
    /// The rate sample (context slot 1), or none.
    rs: Vec<u8>,
    shared_data: Vec<Vec<u8>>,
    sk_storage: Vec<Option<Vec<u8>>>,
    env: Env,
}

/// What a run leaves: r0 or the error, the stack, the socket view, the data, socket storage,
/// and the environment (prandom state, send_ack).
#[derive(Debug, PartialEq)]
struct Outcome {
    result: Result<u64, (usize, String)>,
    stack: Vec<u8>,
    sock: Vec<u8>,
    data: Vec<Vec<u8>>,
    sk_storage: Vec<Option<Vec<u8>>>,
    env: (u64, u64, u32, bool),
}

/// How [`run_one`] runs a program.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Reference,
    Fast,
    /// The native code (where the program qualifies) and the fast loop.
    Native,
}

fn run_one(w: &World, insns: &[Insn], mode: Mode, budget: u64) -> Outcome {
    let mut shared = Shared { data: w.shared_data.clone(), maps: Vec::new() };
    let mut env = w.env.clone();
    // context slot 1 is expected to hold the rate sample (a guess the loop checks)
    let code = compile(insns, 0, &w.object.data, &[], CtxLayout { sample: Some((1, R_RS)) });
    let mut mem = Mem {
        ctx: w.ctx.clone(),
        sock: w.sock.clone(),
        rs: w.rs.clone(),
        stack: vec![0; STACK_PER_FRAME * MAX_FRAMES],
        sk_storage: w.sk_storage.clone(),
        ..Mem::default()
    };
    let mut m = Machine { object: &w.object, mem: &mut mem, stack_top: STACK_PER_FRAME, shared: &mut shared, env: &mut env };
    let jit = if mode == Mode::Native { code.jit.fresh(insns) } else { None };
    let result = run_with(&mut m, insns, (mode != Mode::Reference).then_some(&code), jit.as_ref(), 0, budget);
    let Mem { stack, sock, sk_storage: sk, .. } = mem;
    Outcome { result, stack, sock, data: shared.data, sk_storage: sk, env: (env.now_ns, env.jiffies, env.prandom, env.send_ack) }
}

fn world(bytes: u64) -> World {
    let mut object = Object::for_tests(Mutex::new(Shared { data: Vec::new(), maps: Vec::new() }));
    // a byte pattern from a small generator (splitmix64)
    let mut state = bytes;
    let mut next = move || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let mut fill = |n: usize| (0..n).map(|_| next() as u8).collect::<Vec<u8>>();
    let rodata = fill(RODATA_LEN);
    let bss = fill(BSS_LEN);
    let sock = fill(TcpSock::SIZE);
    let storage = fill(16);
    let rs = if bytes & 1 == 0 { fill(crate::RateSample::SIZE) } else { Vec::new() };
    let mut ctx = sock_addr().to_le_bytes().to_vec();
    ctx.extend(addr(R_RS, 0).to_le_bytes());
    ctx.extend(fill(8));
    object.data = vec![
        DataSection { name: ".rodata".into(), writable: false, initial: rodata },
        DataSection { name: ".bss".into(), writable: true, initial: bss.clone() },
    ];
    World {
        object,
        sock,
        ctx,
        rs,
        shared_data: vec![Vec::new(), bss],
        sk_storage: vec![Some(storage)],
        env: Env { now_ns: bytes.rotate_left(17), jiffies: bytes >> 3, prandom: bytes as u32, send_ack: false },
    }
}

fn item_strategy() -> impl Strategy<Value = Item> {
    (any::<u8>(), any::<u8>(), any::<u8>(), any::<u16>(), any::<u64>())
}

/// Runs a generated program in `mode` and in the reference alone: the same outcome.
fn agrees(mode: Mode, items: &[Item], regs: [u64; 5], bytes: u64, budget: u64, exit: bool) -> Result<(), TestCaseError> {
    let insns = lower(items, regs, exit);
    // the generator makes well-formed programs, except where validate is meant to refuse
    // (an atomic fetch into r10)
    if let Err(e) = validate(&insns, "t") {
        prop_assert!(e.0.contains("r10"), "{e:?}");
        return Ok(());
    }
    let w = world(bytes);
    let tried = run_one(&w, &insns, mode, budget);
    let reference = run_one(&w, &insns, Mode::Reference, budget);
    prop_assert_eq!(tried, reference, "program {:?}", insns);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10000, failure_persistence: None, .. ProptestConfig::default() })]

    #[test]
    fn fast_loop_matches_reference(
        items in proptest::collection::vec(item_strategy(), 1..48),
        regs in any::<[u64; 5]>(),
        bytes in any::<u64>(),
        budget in prop_oneof![1u64..40, 40u64..4000],
        exit in prop_oneof![9 => Just(true), 1 => Just(false)],
    ) {
        agrees(Mode::Fast, &items, regs, bytes, budget, exit)?;
    }
}

proptest! {
    // a compilation takes about a millisecond: fewer cases than the fast loop's
    #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, .. ProptestConfig::default() })]

    /// The native code (with the fast loop and the reference for what it hands back) against
    /// the reference alone, on the same programs.
    #[test]
    fn native_code_matches_reference(
        items in proptest::collection::vec(item_strategy(), 1..48),
        regs in any::<[u64; 5]>(),
        bytes in any::<u64>(),
        budget in prop_oneof![1u64..40, 40u64..4000],
        exit in prop_oneof![9 => Just(true), 1 => Just(false)],
    ) {
        agrees(Mode::Native, &items, regs, bytes, budget, exit)?;
    }
}

/// The generator reaches what it is meant to: successful exits, faults of each kind, budget
/// exhaustion, helper calls (a fixed sample, counted).
#[test]
fn generator_covers_outcomes() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strat = (proptest::collection::vec(item_strategy(), 1..48), any::<[u64; 5]>(), any::<u64>());
    let mut counts = std::collections::BTreeMap::<&str, usize>::new();
    for _ in 0..2000 {
        let (items, regs, bytes) = strat.new_tree(&mut runner).unwrap().current();
        let insns = lower(&items, regs, true);
        if validate(&insns, "t").is_err() {
            *counts.entry("refused").or_default() += 1;
            continue;
        }
        let o = run_one(&world(bytes), &insns, Mode::Reference, 2000);
        let k = match &o.result {
            Ok(_) => "ok",
            Err((_, m)) if m.contains("budget") => "budget",
            Err((_, m)) if m.contains("out of bounds") => "bounds",
            Err((_, m)) if m.contains("may write") => "sock-readonly",
            Err((_, m)) if m.contains("read-only") => "readonly",
            Err((_, m)) if m.contains("no memory") => "no-memory",
            Err(_) => "other",
        };
        *counts.entry(k).or_default() += 1;
    }
    eprintln!("{counts:?}");
    for k in ["ok", "budget", "bounds", "sock-readonly", "no-memory"] {
        assert!(counts.get(k).copied().unwrap_or(0) >= 20, "{k}: {counts:?}");
    }
}

/// An atomic fetch into r10 would move the frame pointer, which the fast loop's stack accesses
/// through r10 take to be the frame's top: the kernel's verifier refuses it ("frame pointer is
/// read only"), and so does `validate`.
#[test]
fn atomic_fetch_into_r10_is_refused() {
    let put = [ins(0xb7, 1, 0, 0, 5), ins(0x7b, 10, 1, -8, 0)];
    for op in [0x01, 0x41, 0x51, 0xa1, 0xe1] {
        let p = [&put[..], &[ins(0xdb, 10, 10, -8, op), ins(0x79, 0, 10, -8, 0), ins(0x95, 0, 0, 0, 0)]].concat();
        let e = validate(&p, "t").unwrap_err();
        assert!(e.0.contains("r10"), "{e:?}");
    }
    // cmpxchg loads into r0; non-fetching forms write no register
    for op in [0x00, 0x40, 0xf1] {
        let p = [&put[..], &[ins(0xdb, 10, 10, -8, op), ins(0x95, 0, 0, 0, 0)]].concat();
        validate(&p, "t").unwrap();
    }
}

/// `mov` with an immediate has no sign-extending form: the kernel refuses a non-zero offset
/// ("BPF_MOV uses reserved fields").
#[test]
fn mov_immediate_with_offset_is_refused() {
    for code in [0xb7, 0xb4] {
        assert!(validate(&[ins(code, 0, 0, 8, 0x80), ins(0x95, 0, 0, 0, 0)], "t").is_err());
        validate(&[ins(code, 0, 0, 0, 0x80), ins(0x95, 0, 0, 0, 0)], "t").unwrap();
    }
}

/// The native code's differential test is not vacuous: most generated programs (those without
/// a bpf-to-bpf call) are compiled, and their runs end in each way the reference's do.
#[test]
fn native_code_covers_programs() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strat = (proptest::collection::vec(item_strategy(), 1..48), any::<[u64; 5]>(), any::<u64>());
    let (mut compiled, mut total) = (0, 0);
    let mut ends = std::collections::BTreeMap::<&str, usize>::new();
    for _ in 0..300 {
        let (items, regs, bytes) = strat.new_tree(&mut runner).unwrap().current();
        let insns = lower(&items, regs, true);
        if validate(&insns, "t").is_err() {
            continue;
        }
        total += 1;
        let code = compile(&insns, 0, &world(bytes).object.data, &[], CtxLayout { sample: Some((1, R_RS)) });
        if code.jit.fresh(&insns).is_none() {
            continue;
        }
        compiled += 1;
        let o = run_one(&world(bytes), &insns, Mode::Native, 2000);
        let k = match &o.result {
            Ok(_) => "ok",
            Err((_, m)) if m.contains("budget") => "budget",
            Err(_) => "fault",
        };
        *ends.entry(k).or_default() += 1;
    }
    eprintln!("compiled {compiled} of {total}: {ends:?}");
    assert!(compiled * 2 >= total, "compiled {compiled} of {total}");
    for k in ["ok", "budget", "fault"] {
        assert!(ends.get(k).copied().unwrap_or(0) >= 10, "{k}: {ends:?}");
    }
}
