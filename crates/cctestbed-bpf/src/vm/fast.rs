//! The fast path: each program compiled once, at load, into ops that one `match` loop
//! ([`run_fast`]) runs; whatever the loop does not handle itself it hands, one instruction at a
//! time, to the reference interpreter ([`step`]), which also produces every error.
//!
//! Compilation ([`compile`]):
//! - **Ops**: one per instruction (operands decoded, immediates sign-extended), a few frequent
//!   sequences fused into one op (zero/sign extension of the low half, `.rodata` constant
//!   loads, mov + compare-jump, load + compare-jump), never across an instruction a jump or
//!   call can enter. The ops are laid out in program order without the instructions they cover
//!   (the second half of `ld_imm64`, the rest of a fused sequence), 16 bytes each, jumps naming
//!   ops; tables map ops to instructions and back for the hand-over to [`step`]. The ops are
//!   padded to a power of two with hand-overs to [`step`] and the loop indexes them through a
//!   mask, so fetching an op needs no bounds check. A program of more than [`MAX_SLOTS`]
//!   instructions runs in [`step`] alone.
//! - **Budget by runs**: a run is the straight line from an instruction to the next jump,
//!   call or exit (included). Each op holds its cost, the instructions from it to the end of
//!   its run; the loop charges the budget with the cost of the run it enters (at the entry,
//!   after every jump, call and step), not per instruction. When the budget does not cover a
//!   run, the run goes to [`step`] instruction by instruction, so the budget runs out at the
//!   very instruction it would in the reference; an op handed to [`step`] gets back what its
//!   run had charged for it and the instructions after it.
//! - **Where a pointer points**: a forward data-flow pass ([`guess_bases`]) follows, through
//!   registers and 8-byte stack slots, the pointers a program is given or makes (the context,
//!   the socket from the context, the `rate_sample` or `ack_sample` from the context of
//!   `cong_control` and `pkts_acked`, socket storage from `bpf_sk_storage_get`, global data
//!   from `ld_imm64`, the stack from `r10`). A load or store whose base register it expects to
//!   hold such a pointer gets an op for that region: the op checks the region of the address
//!   (for a store into the socket view, that the base register holds the exact address
//!   expected, the field's writability having been checked at compile time) and then only the
//!   offset against the region's length; when the check fails it does what a plain load or
//!   store does (out of line). The pass is a guess the ops check, never trusted: a wrong guess
//!   costs time, not correctness. For a program with no call and no store outside its stack
//!   the same pass is exact, and gives the socket bytes its result depends on
//!   ([`socket_reads`]; [`Instance::call`] keeps that result with them).
//! - **Calls** of helpers and kfuncs run in the loop (the same functions [`step`] calls).
//!
//! The differential test (`vm::difftest`) holds this loop to [`step`] alone.

use super::*;
use crate::load::MapDef;

/// The operations of the fast loop. Anything else is [`K::Step`], run by [`step`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum K {
    Step,
    Add64I, Add64R, Sub64I, Sub64R, Mul64I, Mul64R, Or64I, Or64R, And64I, And64R,
    Lsh64I, Lsh64R, Rsh64I, Rsh64R, Xor64I, Xor64R, Mov64I, Mov64R, Arsh64I, Arsh64R,
    Div64I, Div64R, Mod64I, Mod64R, Neg64,
    Add32I, Add32R, Sub32I, Sub32R, Mul32I, Mul32R, Or32I, Or32R, And32I, And32R,
    Lsh32I, Lsh32R, Rsh32I, Rsh32R, Xor32I, Xor32R, Mov32I, Mov32R, Arsh32I, Arsh32R,
    Ja, JeqI, JeqR, JgtI, JgtR, JgeI, JgeR, JsetI, JsetR, JneI, JneR, JsgtI, JsgtR, JsgeI, JsgeR,
    JltI, JltR, JleI, JleR, JsltI, JsltR, JsleI, JsleR,
    LdImm64,
    /// Loads and stores through any pointer: the region is found at run time.
    Ldx1, Ldx2, Ldx4, Ldx8, Stx1, Stx2, Stx4, Stx8, St1, St2, St4, St8,
    /// Loads and stores through `r10`.
    LdxS1, LdxS2, LdxS4, LdxS8, StxS1, StxS2, StxS4, StxS8, StS1, StS2, StS4, StS8,
    /// Loads expected in the socket view, a socket storage value (map `x`), the rate sample.
    LdxSock1, LdxSock2, LdxSock4, LdxSock8,
    LdxSk1, LdxSk2, LdxSk4, LdxSk8,
    LdxRs1, LdxRs2, LdxRs4, LdxRs8,
    /// A store into a writable socket field, when the base register holds `imm` (else a
    /// plain store).
    StxSock1, StxSock2, StxSock4, StxSock8,
    /// Stores expected in a socket storage value (map `x`).
    StxSk1, StxSk2, StxSk4, StxSk8,
    Exit,
    /// A helper call (`imm` the helper id) and a kfunc call (`imm` the kfunc index).
    CallHelper,
    CallKfunc,
    /// `rd <<= 32; rd >>= 32` (zero-extension of the low half).
    Zext,
    /// `rd <<= 32; rd s>>= 32` (sign-extension of the low half).
    Sext,
    /// `rd = rs; rd <<= 32; rd >>= 32`.
    MovZext,
    /// `rd = rs; rd <<= 32; rd s>>= 32`.
    MovSext,
    /// `rd = &rodata + c; rd = *(rd + off)` of a read-only section: the loaded value is `imm`.
    LdConst,
    /// `rd = imm; if rs > rd goto off` (and the signed form).
    MovIJgt,
    MovIJsgt,
    /// `rd = *(u32 *)(rs + off); if rd == / != c goto t`, with `imm` = `t << 32 | c as u32`.
    Ldx4Jeq,
    Ldx4Jne,
}

/// One compiled instruction (16 bytes, so that the ops a call runs take few cache lines).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Fast {
    k: K,
    d: u8,
    s: u8,
    /// The map of a socket storage access.
    x: u8,
    /// The low half is the memory offset (an `i16`, as in the instruction) or the jump target
    /// (a slot); the high half is the op's cost: the instructions from it to the end of its run
    /// (see the module's documentation).
    a: u32,
    imm: u64,
}

const _: () = assert!(std::mem::size_of::<Fast>() == 16);

/// Most slots a program may have for the fast loop (its slots and costs are 16-bit); a larger
/// program runs in the reference interpreter alone.
const MAX_SLOTS: usize = 0xfff0;

impl Fast {
    fn new(k: K, d: u8, s: u8, low: u16, imm: u64) -> Fast {
        Fast { k, d, s, x: 0, a: low as u32, imm }
    }
    #[inline(always)]
    fn off(&self) -> u64 {
        self.a as u16 as i16 as i64 as u64
    }
    #[inline(always)]
    fn target(&self) -> usize {
        (self.a & 0xffff) as usize
    }
    #[inline(always)]
    fn cost(&self) -> u64 {
        (self.a >> 16) as u64
    }
}

/// How the context array of a program's op is laid out, for [`guess_bases`]: the slot and
/// region of its sample pointer (`rate_sample` of `cong_control`, `ack_sample` of
/// `pkts_acked`), if any. Slot 0 is always the socket.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct CtxLayout {
    pub sample: Option<(usize, u32)>,
}

impl CtxLayout {
    /// The layout [`Instance::call`] builds for `op` (with the kernel's argument counts).
    pub(crate) fn of(op: Op) -> CtxLayout {
        match op {
            Op::PktsAcked => CtxLayout { sample: Some((1, R_ACK)) },
            Op::CongControl => CtxLayout { sample: Some((3, R_RS)) },
            _ => CtxLayout::default(),
        }
    }
}

/// A program compiled for the fast loop: its ops in program order, without the instructions
/// an op covers (the second half of `ld_imm64`, the later instructions of a fused sequence);
/// jumps name ops. `pc_of` gives each op's instruction (and, after the last op, the
/// program's length), `op_of` each instruction's op (`NO_OP` for a covered one).
#[derive(Debug, Default)]
pub(crate) struct Code {
    ops: Vec<Fast>,
    pc_of: Vec<u16>,
    op_of: Vec<u16>,
    /// For a program whose result depends only on the socket view's bytes it reads (see
    /// [`socket_reads`]), those bytes: (first, end) ranges of the view.
    pub reads: Option<Vec<(usize, usize)>>,
    /// The program as native code, once called often enough (see [`super::jit`]).
    pub(crate) jit: super::jit::Lazy,
}

const NO_OP: u16 = u16::MAX;

impl Code {
    /// The op of instruction `pc`, if one starts there.
    fn op_at(&self, pc: usize) -> Option<usize> {
        self.op_of.get(pc).copied().filter(|&o| o != NO_OP).map(usize::from)
    }
}

/// Compiles a program (already validated) entered at `entry`, given the object's data
/// sections and maps and the context layout of the op it serves.
pub(crate) fn compile(insns: &[Insn], entry: usize, data: &[DataSection], maps: &[MapDef], layout: CtxLayout) -> Code {
    let n = insns.len();
    if n > MAX_SLOTS {
        return Code::default();
    }
    let (bases, reached) = guess_bases(insns, entry, layout, maps);
    let reads = socket_reads(insns, &bases, &reached, data);
    let mut slots: Vec<Fast> = insns.iter().enumerate().map(|(i, x)| decode(i, x, bases[i])).collect();
    // instructions control can reach other than by falling through: no fused sequence covers
    // one of them
    let mut entered = vec![false; n + 1];
    entered[entry.min(n)] = true;
    for (i, x) in insns.iter().enumerate() {
        if let Some(t) = jump_target(i, x) {
            entered[t.min(n)] = true;
        }
        if x.code == 0x85 && x.src == CALL_LOCAL {
            entered[usize::try_from(x.imm).unwrap_or(n).min(n)] = true;
        }
    }
    let covers = fuse(insns, data, &mut slots, &entered);
    // costs, from the end: a run ends at a jump, call or exit; past the end is one more
    // instruction (the reference's "fell off the end")
    let mut cost = vec![1u32; n + 2];
    for i in (0..n).rev() {
        let x = &insns[i];
        cost[i] = if x.code == 0 {
            0
        } else if matches!(x.code & 7, 5 | 6) {
            1
        } else {
            let next = if x.code == 0x18 { i + 2 } else { i + 1 };
            cost[next.min(n)].saturating_add(1)
        };
    }
    let jit = super::jit::Lazy::new(entry, bases.clone(), cost.clone(), data);
    // the ops, in program order, without covered instructions
    let mut code = Code { ops: Vec::new(), pc_of: Vec::new(), op_of: vec![NO_OP; n + 1], reads, jit };
    let mut pc = 0;
    while pc < n {
        code.op_of[pc] = code.ops.len() as u16;
        code.pc_of.push(pc as u16);
        let mut f = slots[pc];
        f.a = (f.a & 0xffff) | cost[pc] << 16;
        code.ops.push(f);
        pc += covers[pc].max(1);
    }
    code.op_of[n] = code.ops.len() as u16;
    code.pc_of.push(n as u16);
    // Padding to a power of two, of ops that hand over to step (at the end of the program,
    // where step reports falling off it): the loop indexes the ops with a mask, which needs
    // no bounds check.
    let len = (code.ops.len() + 1).next_power_of_two();
    let end = Fast::new(K::Step, 0, 0, 0, 0);
    code.ops.resize(len, Fast { a: 1 << 16, ..end });
    // jump targets: instructions to ops (every target starts an op: fusion spared them)
    for f in &mut code.ops {
        if has_target(f.k) {
            let t = code.op_of.get(f.target()).copied().unwrap_or(NO_OP);
            f.a = (f.a & 0xffff_0000) | t as u32;
        }
    }
    code
}

/// The socket bytes a program reads, when they are all its result can depend on: it calls no
/// helper, kfunc or subprogram, stores only to its stack (zeroed at every call), and loads
/// only from its stack, read-only data, the context (whose slot 0, the socket's address, is
/// the same at every call; the caller keys on the rest) and the socket view, each at an offset
/// known at load (so that no access can stray into another region). The data-flow pass is
/// exact for such a program: without calls and with stores only into its own stack slots,
/// nothing it does not follow can change what a register or a slot holds (the guesses it
/// makes of the context's sample pointer are never used as a base here). None when a reached
/// instruction does anything else.
fn socket_reads(insns: &[Insn], bases: &[Val], reached: &[bool], data: &[DataSection]) -> Option<Vec<(usize, usize)>> {
    let mut reads: Vec<(usize, usize)> = Vec::new();
    for (i, x) in insns.iter().enumerate() {
        if !reached.get(i).copied().unwrap_or(false) {
            continue;
        }
        let ro = |r: u32| r.checked_sub(R_DATA).and_then(|d| data.get(d as usize)).is_some_and(|d| !d.writable);
        // the offset of the access in the region its base points into
        let at = |o: i64| o.checked_add(x.off as i64);
        let near = |a: Option<i64>| a.is_some_and(|a| (0..1 << 31).contains(&a));
        match x.code & 7 {
            0 | 4 | 7 => {}
            5 | 6 => {
                if x.code == 0x85 {
                    return None;
                }
            }
            1 => match bases[i] {
                Val::Ptr(R_STACK, Some(o)) if at(o).is_some_and(|a| a >= -(STACK_PER_FRAME as i64) && a < 0) => {}
                Val::Ptr(R_CTX, Some(o)) if near(at(o)) => {}
                Val::Ptr(r, Some(o)) if ro(r) && near(at(o)) => {}
                Val::Ptr(R_SOCK, Some(o)) => {
                    let a = at(o).filter(|a| *a >= 0)? as usize;
                    let end = a + mem_size(x.code);
                    if end > TcpSock::SIZE {
                        return None;
                    }
                    reads.push((a, end));
                }
                _ => return None,
            },
            _ => match bases[i] {
                Val::Ptr(R_STACK, Some(o)) if at(o).is_some_and(|a| a >= -(STACK_PER_FRAME as i64) && a < 0) => {}
                _ => return None,
            },
        }
    }
    reads.sort_unstable();
    reads.dedup();
    Some(reads)
}

/// An op of kind `k` holds a jump target in the low half of `a`.
fn has_target(k: K) -> bool {
    use K::*;
    matches!(
        k,
        Ja | JeqI | JeqR | JgtI | JgtR | JgeI | JgeR | JsetI | JsetR | JneI | JneR | JsgtI | JsgtR | JsgeI | JsgeR | JltI | JltR
            | JleI | JleR | JsltI | JsltR | JsleI | JsleR | MovIJgt | MovIJsgt | Ldx4Jeq | Ldx4Jne
    )
}

fn decode(i: usize, x: &Insn, base: Val) -> Fast {
    use K::*;
    let imm = x.imm as u64;
    let target = (i as i64 + 1 + x.off as i64) as u16;
    let mut f = Fast::new(Step, x.dst, x.src, x.off as u16, imm);
    let k = match x.code {
        0x07 => Add64I, 0x0f => Add64R, 0x17 => Sub64I, 0x1f => Sub64R, 0x27 => Mul64I, 0x2f => Mul64R,
        0x47 => Or64I, 0x4f => Or64R, 0x57 => And64I, 0x5f => And64R, 0x67 => Lsh64I, 0x6f => Lsh64R,
        0x77 => Rsh64I, 0x7f => Rsh64R, 0xa7 => Xor64I, 0xaf => Xor64R, 0xc7 => Arsh64I, 0xcf => Arsh64R,
        0xb7 if x.off == 0 => Mov64I,
        0xbf if x.off == 0 => Mov64R,
        0x37 if x.off == 0 => Div64I,
        0x3f if x.off == 0 => Div64R,
        0x97 if x.off == 0 => Mod64I,
        0x9f if x.off == 0 => Mod64R,
        0x87 => Neg64,
        0x04 => Add32I, 0x0c => Add32R, 0x14 => Sub32I, 0x1c => Sub32R, 0x24 => Mul32I, 0x2c => Mul32R,
        0x44 => Or32I, 0x4c => Or32R, 0x54 => And32I, 0x5c => And32R, 0x64 => Lsh32I, 0x6c => Lsh32R,
        0x74 => Rsh32I, 0x7c => Rsh32R, 0xa4 => Xor32I, 0xac => Xor32R, 0xc4 => Arsh32I, 0xcc => Arsh32R,
        0xb4 if x.off == 0 => Mov32I,
        0xbc if x.off == 0 => Mov32R,
        0x05 => Ja, 0x15 => JeqI, 0x1d => JeqR, 0x25 => JgtI, 0x2d => JgtR, 0x35 => JgeI, 0x3d => JgeR,
        0x45 => JsetI, 0x4d => JsetR, 0x55 => JneI, 0x5d => JneR, 0x65 => JsgtI, 0x6d => JsgtR,
        0x75 => JsgeI, 0x7d => JsgeR, 0xa5 => JltI, 0xad => JltR, 0xb5 => JleI, 0xbd => JleR,
        0xc5 => JsltI, 0xcd => JsltR, 0xd5 => JsleI, 0xdd => JsleR,
        0x18 => LdImm64,
        0x95 => Exit,
        0x85 if x.src == CALL_HELPER => CallHelper,
        0x85 if x.src == CALL_KFUNC => CallKfunc,
        0x71 if x.src == 10 => LdxS1, 0x69 if x.src == 10 => LdxS2, 0x61 if x.src == 10 => LdxS4, 0x79 if x.src == 10 => LdxS8,
        0x73 if x.dst == 10 => StxS1, 0x6b if x.dst == 10 => StxS2, 0x63 if x.dst == 10 => StxS4, 0x7b if x.dst == 10 => StxS8,
        0x72 if x.dst == 10 => StS1, 0x6a if x.dst == 10 => StS2, 0x62 if x.dst == 10 => StS4, 0x7a if x.dst == 10 => StS8,
        0x71 | 0x69 | 0x61 | 0x79 => load_kind(x.code, base, &mut f),
        0x73 | 0x6b | 0x63 | 0x7b => store_kind(x, base, &mut f),
        0x72 => St1, 0x6a => St2, 0x62 => St4, 0x7a => St8,
        _ => Step,
    };
    if matches!(x.code & 7, 5) && !matches!(k, Step | Exit | CallHelper | CallKfunc) {
        f.a = target as u32;
    }
    if x.dst > 10 || x.src > 10 && x.code != 0x85 {
        return f; // validate refused these; Step all the same
    }
    f.k = k;
    f
}

/// The op of a plain load (`code` 0x61/0x69/0x71/0x79) whose base is expected to be `base`.
fn load_kind(code: u8, base: Val, f: &mut Fast) -> K {
    use K::*;
    let size = |k: [K; 4]| match code {
        0x71 => k[0],
        0x69 => k[1],
        0x61 => k[2],
        _ => k[3],
    };
    match base.region() {
        Some(R_SOCK) => size([LdxSock1, LdxSock2, LdxSock4, LdxSock8]),
        Some(R_RS) => size([LdxRs1, LdxRs2, LdxRs4, LdxRs8]),
        Some(r) if r.wrapping_sub(R_SK_STORAGE) < 0x100 => {
            f.x = (r - R_SK_STORAGE) as u8;
            size([LdxSk1, LdxSk2, LdxSk4, LdxSk8])
        }
        _ => size([Ldx1, Ldx2, Ldx4, Ldx8]),
    }
}

/// The op of a plain register store whose base is expected to be `base`.
fn store_kind(x: &Insn, base: Val, f: &mut Fast) -> K {
    use K::*;
    let n = mem_size(x.code);
    let size = |k: [K; 4]| match n {
        1 => k[0],
        2 => k[1],
        4 => k[2],
        _ => k[3],
    };
    match base {
        Val::Ptr(R_SOCK, Some(o)) => {
            let expected = ((R_SOCK as u64) << 32).wrapping_add(o as u64);
            let a = expected.wrapping_add(x.off as i64 as u64);
            let off = (a & 0xffff_ffff) as usize;
            let writable = crate::view::offsets::writable().iter().any(|(_, s, e)| off >= *s && off + n <= *e);
            if a >> 32 == R_SOCK as u64 && writable {
                f.imm = expected;
                return size([StxSock1, StxSock2, StxSock4, StxSock8]);
            }
        }
        Val::Ptr(r, _) if r.wrapping_sub(R_SK_STORAGE) < 0x100 => {
            f.x = (r - R_SK_STORAGE) as u8;
            return size([StxSk1, StxSk2, StxSk4, StxSk8]);
        }
        _ => {}
    }
    size([Stx1, Stx2, Stx4, Stx8])
}

/// Fuses the frequent sequences into the op of their first slot.
/// Fuses the frequent sequences into the op of their first instruction, none covering an
/// instruction in `entered`; returns how many instructions each op covers (0 for the second
/// half of `ld_imm64`, which no op starts at).
fn fuse(insns: &[Insn], data: &[DataSection], out: &mut [Fast], entered: &[bool]) -> Vec<usize> {
    let mut covers: Vec<usize> = insns.iter().map(|x| if x.code == 0x18 { 2 } else { 1 }).collect();
    for i in 0..insns.len() {
        let x = &insns[i];
        // a sequence of `k` instructions from `i` that control enters only at `i`
        let alone = |k: usize| (1..k).all(|j| !entered.get(i + j).copied().unwrap_or(true));
        let at = |j: usize| insns.get(i + j).filter(|_| alone(j + 1));
        let is = |j: usize, code: u8, dst: u8, imm: i64| at(j).is_some_and(|y| y.code == code && y.dst == dst && y.imm == imm && y.off == 0);
        let fast = |k: K, imm: u64| Fast::new(k, x.dst, x.src, 0, imm);
        // rd = rs (64-bit mov); rd <<= 32; rd >>= 32 / s>>= 32
        if x.code == 0xbf && x.off == 0 && is(1, 0x67, x.dst, 32) {
            if is(2, 0x77, x.dst, 32) {
                out[i] = fast(K::MovZext, 0);
                covers[i] = 3;
                continue;
            }
            if is(2, 0xc7, x.dst, 32) {
                out[i] = fast(K::MovSext, 0);
                covers[i] = 3;
                continue;
            }
        }
        if x.code == 0x67 && x.imm == 32 && x.off == 0 {
            if is(1, 0x77, x.dst, 32) {
                out[i] = fast(K::Zext, 0);
                covers[i] = 2;
                continue;
            }
            if is(1, 0xc7, x.dst, 32) {
                out[i] = fast(K::Sext, 0);
                covers[i] = 2;
                continue;
            }
        }
        // rd = imm; if rX > rd goto (jump targets of the pair are the jump's own)
        if x.code == 0xb7 && x.off == 0 {
            if let Some(y) = at(1).filter(|y| matches!(y.code, 0x2d | 0x6d) && y.src == x.dst && y.dst <= 10) {
                let k = if y.code == 0x2d { K::MovIJgt } else { K::MovIJsgt };
                out[i] = Fast::new(k, x.dst, y.dst, (i as i64 + 2 + y.off as i64) as u16, x.imm as u64);
                covers[i] = 2;
                continue;
            }
        }
        // rd = *(u32 *)(rs + off); if rd ==/!= c goto
        if x.code == 0x61 && x.src != 10 {
            if let Some(y) = at(1).filter(|y| matches!(y.code, 0x15 | 0x55) && y.dst == x.dst) {
                let k = if y.code == 0x15 { K::Ldx4Jeq } else { K::Ldx4Jne };
                let target = (i as i64 + 2 + y.off as i64) as u16;
                out[i] = Fast::new(k, x.dst, x.src, target, (x.off as u16 as u64) << 32 | y.imm as u32 as u64);
                covers[i] = 2;
                continue;
            }
        }
        // rd = address in a read-only data section; rd = *(size *)(rd + off)
        if x.code == 0x18 {
            if let (Some(y), Some(v)) = (at(2), const_load(x, insns.get(i + 2), data)) {
                if y.dst == x.dst {
                    out[i] = fast(K::LdConst, v);
                    covers[i] = 3;
                }
            }
        }
    }
    covers
}

/// The value `ld_imm64` `x` followed by load `y` reads, when `x` is the address of a read-only
/// data section and `y` a plain load through it that lies inside the section.
fn const_load(x: &Insn, y: Option<&Insn>, data: &[DataSection]) -> Option<u64> {
    let y = y?;
    if !matches!(y.code, 0x61 | 0x69 | 0x71 | 0x79) || y.src != x.dst {
        return None;
    }
    let a = (x.imm as u64).wrapping_add(y.off as i64 as u64);
    let region = (a >> 32) as u32;
    let i = region.checked_sub(R_DATA).filter(|i| *i < 0x100)? as usize;
    let d = data.get(i).filter(|d| !d.writable)?;
    // the address must not have wrapped from another region
    if (x.imm as u64) >> 32 != region as u64 {
        return None;
    }
    let off = (a & 0xffff_ffff) as usize;
    let n = mem_size(y.code);
    let b = d.initial.get(off..off.checked_add(n)?)?;
    let mut v = [0u8; 8];
    v[..n].copy_from_slice(b);
    Some(u64::from_le_bytes(v))
}

// ---------------------------------------------------------------------------------------------
// Where pointers point: a guess for the ops to check.

/// What a register or an 8-byte stack slot is expected to hold: a pointer into a region (at
/// a known offset, or not), or anything.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Val {
    Any,
    Ptr(u32, Option<i64>),
}

impl Val {
    fn join(self, o: Val) -> Val {
        match (self, o) {
            (Val::Ptr(a, x), Val::Ptr(b, y)) if a == b => Val::Ptr(a, if x == y { x } else { None }),
            _ => Val::Any,
        }
    }
    fn region(self) -> Option<u32> {
        match self {
            Val::Ptr(r, _) => Some(r),
            Val::Any => None,
        }
    }
    fn plus(self, d: Option<i64>) -> Val {
        match self {
            Val::Ptr(r, o) => Val::Ptr(r, o.zip(d).map(|(o, d)| o.wrapping_add(d))),
            Val::Any => Val::Any,
        }
    }
}

/// Stack slots followed: the 8-byte slots of the current frame (`r10` is offset 0).
const SLOTS: usize = STACK_PER_FRAME / 8;

#[derive(Clone, PartialEq)]
struct State {
    r: [Val; 11],
    stack: [Val; SLOTS],
}

impl State {
    fn join(&mut self, o: &State) -> bool {
        let before = self.clone();
        for (a, b) in self.r.iter_mut().zip(o.r.iter()) {
            *a = a.join(*b);
        }
        for (a, b) in self.stack.iter_mut().zip(o.stack.iter()) {
            *a = a.join(*b);
        }
        *self != before
    }

    /// The slot of the 8 bytes at `base + off`, when `base` is a frame pointer at a known
    /// offset and the bytes are one aligned slot of the frame.
    fn slot(base: Val, off: i64) -> Option<usize> {
        match base {
            Val::Ptr(R_STACK, Some(o)) => {
                let a = o.checked_add(off)?;
                (a < 0 && a >= -(STACK_PER_FRAME as i64) && a % 8 == 0).then(|| ((a + STACK_PER_FRAME as i64) / 8) as usize)
            }
            _ => None,
        }
    }

    /// Forgets what a store of `n` bytes at `base + off` may overwrite.
    fn clobber(&mut self, base: Val, off: i64, n: usize) {
        match base {
            Val::Ptr(R_STACK, Some(o)) => {
                let a = o.saturating_add(off);
                for (k, slot) in self.stack.iter_mut().enumerate() {
                    let s = k as i64 * 8 - STACK_PER_FRAME as i64;
                    if a < s + 8 && s < a + n as i64 {
                        *slot = Val::Any;
                    }
                }
            }
            Val::Ptr(R_STACK, None) => self.stack = [Val::Any; SLOTS],
            _ => {}
        }
    }
}

fn is_jump(x: &Insn) -> bool {
    matches!(x.code & 7, 5 | 6)
}

/// The targets of jump `x` at `i` other than the next instruction (none for calls and exit).
fn jump_target(i: usize, x: &Insn) -> Option<usize> {
    if !is_jump(x) || matches!(x.code, 0x85 | 0x95) {
        return None;
    }
    let t = i as i64 + 1 + if x.code == 0x06 { x.imm } else { x.off as i64 };
    usize::try_from(t).ok()
}

/// For each memory instruction, what its base register is expected to hold (`Any` for the
/// others and for unreached code), and whether each instruction is reached: a forward
/// data-flow pass over the program from `entry` (its `r1` the context, laid out as `layout`)
/// and from every bpf-to-bpf call target.
pub(crate) fn guess_bases(insns: &[Insn], entry: usize, layout: CtxLayout, maps: &[MapDef]) -> (Vec<Val>, Vec<bool>) {
    let n = insns.len();
    let mut leader = vec![false; n + 1];
    let mut entries = vec![entry];
    for (i, x) in insns.iter().enumerate() {
        if x.code == 0x85 && x.src == CALL_LOCAL {
            if let Ok(t) = usize::try_from(x.imm) {
                entries.push(t);
            }
        }
        if let Some(t) = jump_target(i, x) {
            if t < n {
                leader[t] = true;
            }
        }
        if is_jump(x) {
            leader[i + 1] = true;
        }
    }
    let mut state: Vec<Option<State>> = vec![None; n];
    let mut work = Vec::new();
    for (k, &e) in entries.iter().enumerate() {
        if e >= n {
            continue;
        }
        leader[e] = true;
        let mut st = State { r: [Val::Any; 11], stack: [Val::Any; SLOTS] };
        st.r[10] = Val::Ptr(R_STACK, Some(0));
        if k == 0 {
            st.r[1] = Val::Ptr(R_CTX, Some(0));
        }
        merge(&mut state[e], &st, e, &mut work);
    }
    let mut bases = vec![Val::Any; n];
    while let Some(l) = work.pop() {
        let Some(mut st) = state[l].clone() else { continue };
        let mut i = l;
        loop {
            let x = &insns[i];
            transfer(x, &mut st, layout, maps, &mut bases[i]);
            let next = if x.code == 0x18 { i + 2 } else { i + 1 };
            if let Some(t) = jump_target(i, x) {
                if t < n {
                    merge(&mut state[t], &st, t, &mut work);
                }
            }
            let falls = !matches!(x.code, 0x05 | 0x06 | 0x95);
            if !falls || next >= n {
                break;
            }
            if leader[next] {
                merge(&mut state[next], &st, next, &mut work);
                break;
            }
            i = next;
        }
    }
    // The last visit of each block saw its final state, but an earlier visit may have left a
    // guess the final state no longer supports: recompute from the final states.
    bases.fill(Val::Any);
    let mut reached = vec![false; n];
    for (l, st) in state.iter().enumerate() {
        let Some(mut st) = st.clone() else { continue };
        let mut i = l;
        loop {
            let x = &insns[i];
            reached[i] = true;
            transfer(x, &mut st, layout, maps, &mut bases[i]);
            let next = if x.code == 0x18 { i + 2 } else { i + 1 };
            if is_jump(x) || next >= n || leader[next] {
                break;
            }
            i = next;
        }
    }
    (bases, reached)
}

fn merge(slot: &mut Option<State>, st: &State, at: usize, work: &mut Vec<usize>) {
    let changed = match slot {
        None => {
            *slot = Some(st.clone());
            true
        }
        Some(s) => s.join(st),
    };
    if changed {
        work.push(at);
    }
}

/// One instruction's effect on `st`; for a memory instruction, `base` gets its base
/// register's value.
fn transfer(x: &Insn, st: &mut State, layout: CtxLayout, maps: &[MapDef], base: &mut Val) {
    let d = (x.dst as usize).min(10);
    let s = (x.src as usize).min(10);
    let off = x.off as i64;
    match x.code & 7 {
        0 => {
            let v = x.imm as u64;
            st.r[d] = if v >> 32 != 0 { Val::Ptr((v >> 32) as u32, Some((v & 0xffff_ffff) as i64)) } else { Val::Any };
        }
        1 => {
            *base = st.r[s];
            st.r[d] = if x.code == 0x79 { loaded(st, st.r[s], off, layout) } else { Val::Any };
        }
        2 => {
            *base = st.r[d];
            st.clobber(st.r[d], off, mem_size(x.code));
        }
        3 => {
            *base = st.r[d];
            let n = mem_size(x.code);
            if x.code == 0x7b {
                match State::slot(st.r[d], off) {
                    Some(k) => st.stack[k] = st.r[s],
                    None => st.clobber(st.r[d], off, n),
                }
            } else {
                st.clobber(st.r[d], off, n);
                if x.code & 0xe0 == 0xc0 && x.imm & 1 != 0 {
                    let fetched = if x.imm == 0xf1 { 0 } else { s };
                    st.r[fetched] = Val::Any;
                }
            }
        }
        7 => {
            st.r[d] = match x.code {
                0xbf if x.off == 0 => st.r[s],
                0x07 => st.r[d].plus(Some(x.imm)),
                0x17 => st.r[d].plus(Some(x.imm.wrapping_neg())),
                0x0f | 0x1f => match (st.r[d], st.r[s]) {
                    (Val::Ptr(r, _), Val::Any) => Val::Ptr(r, None),
                    (Val::Any, Val::Ptr(r, _)) if x.code == 0x0f => Val::Ptr(r, None),
                    _ => Val::Any,
                },
                _ => Val::Any,
            };
        }
        4 => st.r[d] = Val::Any,
        _ => {
            if x.code == 0x85 {
                st.r[0] = if x.src == CALL_HELPER { helper_result(x.imm, st.r[1], maps) } else { Val::Any };
                for r in &mut st.r[1..=5] {
                    *r = Val::Any;
                }
            }
        }
    }
}

/// What an 8-byte load from `base + off` gives: the socket or the sample from the context,
/// a spilled pointer from the stack.
fn loaded(st: &State, base: Val, off: i64, layout: CtxLayout) -> Val {
    match base {
        Val::Ptr(R_CTX, Some(o)) => match o.checked_add(off) {
            Some(0) => Val::Ptr(R_SOCK, Some(0)),
            Some(a) => match layout.sample {
                Some((slot, region)) if a == slot as i64 * 8 => Val::Ptr(region, Some(0)),
                _ => Val::Any,
            },
            None => Val::Any,
        },
        _ => State::slot(base, off).map_or(Val::Any, |k| st.stack[k]),
    }
}

/// What helper `id` returns given its first argument `map`: a socket storage value, an
/// array map's value.
fn helper_result(id: i64, map: Val, maps: &[MapDef]) -> Val {
    let Val::Ptr(r, Some(0)) = map else { return Val::Any };
    let Some(m) = r.checked_sub(R_MAP_HANDLE).filter(|m| (*m as usize) < maps.len()) else { return Val::Any };
    match id {
        107 => Val::Ptr(R_SK_STORAGE + m, Some(0)),
        1 if maps[m as usize].kind == crate::load::MAP_TYPE_ARRAY => Val::Ptr(R_ARRAY + m, None),
        _ => Val::Any,
    }
}

// ---------------------------------------------------------------------------------------------
// The loop.

/// A readable region the fast loop resolves itself: the call's buffers, read-only data, socket
/// storage. Anything else (maps, writable data) is left to [`step`].
#[inline(always)]
fn fast_buf<'b>(m: &'b Machine, region: u32) -> Option<&'b [u8]> {
    match region {
        R_SOCK => Some(&m.mem.sock),
        R_STACK => m.mem.stack.get(..m.stack_top),
        R_RS => Some(&m.mem.rs),
        R_CTX => Some(&m.mem.ctx),
        R_ACK => Some(&m.mem.ack),
        r if r.wrapping_sub(R_SK_STORAGE) < 0x1000 => m.mem.sk_storage.get((r - R_SK_STORAGE) as usize)?.as_deref(),
        r if r.wrapping_sub(R_DATA) < 0x100 => m.object.data.get((r - R_DATA) as usize).filter(|d| !d.writable).map(|d| &d.initial[..]),
        _ => None,
    }
}

/// The `N` bytes at offset `a` (the low half of an address) of `buf`.
#[inline(always)]
fn load_in<const N: usize>(buf: &[u8], a: u64) -> Option<[u8; N]> {
    let off = (a & 0xffff_ffff) as usize;
    buf.get(off..off + N).and_then(|b| <[u8; N]>::try_from(b).ok())
}

#[inline(always)]
fn fast_load<const N: usize>(m: &Machine, a: u64) -> Option<[u8; N]> {
    load_in::<N>(fast_buf(m, (a >> 32) as u32)?, a)
}

/// [`fast_load`] out of line, for a specialised load whose guess did not hold.
#[cold]
#[inline(never)]
fn load_other<const N: usize>(m: &Machine, a: u64) -> Option<[u8; N]> {
    fast_load::<N>(m, a)
}

/// [`fast_store`] out of line, for a specialised store whose guess did not hold.
#[cold]
#[inline(never)]
fn store_other<const N: usize>(m: &mut Machine, a: u64, v: [u8; N]) -> Option<()> {
    fast_store::<N>(m, a, v)
}

/// A load expected in the socket view.
#[inline(always)]
fn load_sock<const N: usize>(m: &Machine, a: u64) -> Option<[u8; N]> {
    if a >> 32 == R_SOCK as u64 {
        load_in::<N>(&m.mem.sock, a)
    } else {
        load_other::<N>(m, a)
    }
}

/// A load expected in the rate sample.
#[inline(always)]
fn load_rs<const N: usize>(m: &Machine, a: u64) -> Option<[u8; N]> {
    if a >> 32 == R_RS as u64 {
        load_in::<N>(&m.mem.rs, a)
    } else {
        load_other::<N>(m, a)
    }
}

/// A load expected in socket storage value `map`.
#[inline(always)]
fn load_sk<const N: usize>(m: &Machine, a: u64, map: u8) -> Option<[u8; N]> {
    if a >> 32 == (R_SK_STORAGE + map as u32) as u64 {
        load_in::<N>(m.mem.sk_storage.get(map as usize)?.as_deref()?, a)
    } else {
        load_other::<N>(m, a)
    }
}

/// A writable region the fast loop resolves itself: the stack (this frame and its callers'),
/// the socket's writable fields, socket storage.
#[inline(always)]
fn fast_store<const N: usize>(m: &mut Machine, a: u64, v: [u8; N]) -> Option<()> {
    let off = (a & 0xffff_ffff) as usize;
    let end = off + N;
    let dst = match (a >> 32) as u32 {
        R_STACK if end <= m.stack_top => m.mem.stack.get_mut(off..end)?,
        R_SOCK if m.object.writable.iter().any(|(_, s, e)| off >= *s && end <= *e) => m.mem.sock.get_mut(off..end)?,
        r if r.wrapping_sub(R_SK_STORAGE) < 0x1000 => m.mem.sk_storage.get_mut((r - R_SK_STORAGE) as usize)?.as_deref_mut()?.get_mut(off..end)?,
        _ => return None,
    };
    dst.copy_from_slice(&v);
    Some(())
}

/// A store expected in socket storage value `map`.
#[inline(always)]
fn store_sk<const N: usize>(m: &mut Machine, a: u64, map: u8, v: [u8; N]) -> Option<()> {
    if a >> 32 == (R_SK_STORAGE + map as u32) as u64 {
        let off = (a & 0xffff_ffff) as usize;
        m.mem.sk_storage.get_mut(map as usize)?.as_deref_mut()?.get_mut(off..off + N)?.copy_from_slice(&v);
        Some(())
    } else {
        store_other::<N>(m, a, v)
    }
}

/// The stack bytes at `r10 + off` (`r10` is the top of the current frame), readable up to the
/// top of the current frame.
#[inline(always)]
fn stack_range(m: &Machine, off: u64, n: usize) -> Option<std::ops::Range<usize>> {
    // below 0 wraps to a huge offset, which the checks refuse
    let o = (m.stack_top as u64).wrapping_add(off) as usize;
    let end = o.wrapping_add(n);
    (end <= m.stack_top && o < end).then_some(o..end)
}

/// Marks, in the op index [`run_fast`] leaves at, a run the budget did not cover.
const UNCHARGED: usize = 1 << 62;

/// The fast loop's registers: r0-r10 (and the rest unused), indexed by a byte so that an
/// operand needs no bounds check.
pub(crate) type Regs = [u64; 256];

/// The budget that entering a run at `i` charges.
#[inline(always)]
fn cost_at(code: &[Fast], i: usize) -> u64 {
    code.get(i).map_or(1, |y| y.cost())
}

/// Runs a program from `entry` to its exit: the fast loop over `code` (from [`compile`]),
/// which hands every instruction it does not handle itself, and every access it cannot
/// resolve, to the reference interpreter [`step`] (which then reports any fault).
pub(crate) fn run(m: &mut Machine, insns: &[Insn], code: &Code, entry: usize, regs: &mut Regs) -> Result<u64, (usize, String)> {
    let mut cpu = Cpu::new(entry);
    drive(m, insns, Some(code), code.jit.get(insns), &mut cpu, regs)
}

/// Runs a program from `cpu.pc` to its exit: the native code where it can be entered, else the
/// fast loop over `code`; what either hands back goes to the reference interpreter [`step`]
/// (alone when both are None).
fn drive(m: &mut Machine, insns: &[Insn], code: Option<&Code>, jit: Option<&super::jit::Jit>, cpu: &mut Cpu, regs: &mut Regs) -> Result<u64, (usize, String)> {
    loop {
        if let Some((jit, k)) = jit.and_then(|j| Some((j, j.entry_at(cpu.pc)?))) {
            if let Some(r0) = jit.run(m, insns, cpu, k)? {
                return Ok(r0);
            }
        } else if let Some(code) = code {
            if let Some(r0) = run_fast(m, code, cpu, regs)? {
                return Ok(r0);
            }
        }
        if let Some(r0) = step(m, insns, cpu)? {
            return Ok(r0);
        }
    }
}

/// Runs a program from `entry` with `budget` instructions, through the reference interpreter
/// [`step`] alone (`code` None), the fast loop over `code`, or also `jit`'s native code (for
/// the differential tests, which hold both to the reference).
#[cfg(test)]
pub(crate) fn run_with(m: &mut Machine, insns: &[Insn], code: Option<&Code>, jit: Option<&super::jit::Jit>, entry: usize, budget: u64) -> Result<u64, (usize, String)> {
    let mut cpu = Cpu::new(entry);
    cpu.budget = budget;
    drive(m, insns, code, jit, &mut cpu, &mut [0; 256])
}

/// The fast loop, from `cpu.pc`. Returns Ok(Some(r0)) at the program's exit; Ok(None) with
/// `cpu` the reference's state at an instruction for [`step`] to run (one the loop does not
/// handle, or the first of a run the budget does not cover); Err as [`step`] would.
fn run_fast(m: &mut Machine, compiled: &Code, cpu: &mut Cpu, r: &mut Regs) -> Result<Option<u64>, (usize, String)> {
    // an instruction inside a fused sequence (after step ran its first) goes to step too
    let Some(mut i) = compiled.op_at(cpu.pc) else { return Ok(None) };
    let code = &compiled.ops[..];
    let mask = code.len().wrapping_sub(1);
    if !code.len().is_power_of_two() {
        return Ok(None);
    }
    let mut budget = cpu.budget;
    let c = cost_at(code, i);
    if budget < c {
        return Ok(None);
    }
    budget -= c;
    r[..16].copy_from_slice(&cpu.r);
    // Hands instruction `i` to step, with what its run charged for it and the rest of the
    // run given back (one exit for all, after the loop).
    macro_rules! bail {
        () => {
            break i
        };
    }
    // Enters the run at `t`, or hands `t` to step when the budget does not cover the run
    // (marked by UNCHARGED: nothing to give back).
    macro_rules! goto {
        ($t:expr) => {{
            i = $t;
            let c = code[i & mask].cost();
            if budget < c {
                break i | UNCHARGED;
            }
            budget -= c;
            continue;
        }};
    }
    let at = loop {
        let Some(x) = code.get(i & mask) else { bail!() };
        let d = x.d as usize;
        let s = x.s as usize;
        let imm = x.imm;
        macro_rules! next {
            ($e:expr) => {{
                $e;
                i += 1;
                continue;
            }};
        }
        macro_rules! w {
            ($v:expr) => {
                next!(r[d] = ($v) as u32 as u64)
            };
        }
        macro_rules! jmp {
            ($c:expr) => {
                goto!(if $c { x.target() } else { i + 1 })
            };
        }
        macro_rules! ldx {
            ($t:ty, $load:expr) => {{
                match $load {
                    Some(b) => next!(r[d] = <$t>::from_le_bytes(b) as u64),
                    None => bail!(),
                }
            }};
        }
        macro_rules! addr {
            ($reg:expr) => {
                r[$reg].wrapping_add(x.off())
            };
        }
        macro_rules! stx {
            ($n:literal, $t:ty, $v:expr) => {{
                match fast_store::<$n>(m, addr!(d), ($v as $t).to_le_bytes()) {
                    Some(()) => next!(()),
                    None => bail!(),
                }
            }};
        }
        macro_rules! stx_sock {
            ($n:literal, $t:ty) => {{
                let v = (r[s] as $t).to_le_bytes();
                let at = imm.wrapping_add(x.off()) as u32 as usize;
                match m.mem.sock.get_mut(at..at + $n).filter(|_| r[d] == imm) {
                    Some(b) => next!(b.copy_from_slice(&v)),
                    None => match store_other::<$n>(m, addr!(d), v) {
                        Some(()) => next!(()),
                        None => bail!(),
                    },
                }
            }};
        }
        macro_rules! stx_sk {
            ($n:literal, $t:ty) => {{
                match store_sk::<$n>(m, addr!(d), x.x, (r[s] as $t).to_le_bytes()) {
                    Some(()) => next!(()),
                    None => bail!(),
                }
            }};
        }
        macro_rules! ldxs {
            ($n:literal, $t:ty) => {{
                match stack_range(m, x.off(), $n).and_then(|rg| m.mem.stack.get(rg)).and_then(|b| <[u8; $n]>::try_from(b).ok()) {
                    Some(b) => next!(r[d] = <$t>::from_le_bytes(b) as u64),
                    None => bail!(),
                }
            }};
        }
        macro_rules! stxs {
            ($n:literal, $t:ty, $v:expr) => {{
                match stack_range(m, x.off(), $n).and_then(|rg| m.mem.stack.get_mut(rg)) {
                    Some(b) => next!(b.copy_from_slice(&($v as $t).to_le_bytes())),
                    None => bail!(),
                }
            }};
        }
        match x.k {
            K::Step => bail!(),
            K::Add64I => next!(r[d] = r[d].wrapping_add(imm)),
            K::Add64R => next!(r[d] = r[d].wrapping_add(r[s])),
            K::Sub64I => next!(r[d] = r[d].wrapping_sub(imm)),
            K::Sub64R => next!(r[d] = r[d].wrapping_sub(r[s])),
            K::Mul64I => next!(r[d] = r[d].wrapping_mul(imm)),
            K::Mul64R => next!(r[d] = r[d].wrapping_mul(r[s])),
            K::Or64I => next!(r[d] |= imm),
            K::Or64R => next!(r[d] |= r[s]),
            K::And64I => next!(r[d] &= imm),
            K::And64R => next!(r[d] &= r[s]),
            K::Lsh64I => next!(r[d] = r[d].wrapping_shl(imm as u32 & 63)),
            K::Lsh64R => next!(r[d] = r[d].wrapping_shl(r[s] as u32 & 63)),
            K::Rsh64I => next!(r[d] = r[d].wrapping_shr(imm as u32 & 63)),
            K::Rsh64R => next!(r[d] = r[d].wrapping_shr(r[s] as u32 & 63)),
            K::Xor64I => next!(r[d] ^= imm),
            K::Xor64R => next!(r[d] ^= r[s]),
            K::Mov64I => next!(r[d] = imm),
            K::Mov64R => next!(r[d] = r[s]),
            K::Arsh64I => next!(r[d] = ((r[d] as i64) >> (imm & 63)) as u64),
            K::Arsh64R => next!(r[d] = ((r[d] as i64) >> (r[s] & 63)) as u64),
            K::Div64I => next!(r[d] = r[d].checked_div(imm).unwrap_or(0)),
            K::Div64R => next!(r[d] = r[d].checked_div(r[s]).unwrap_or(0)),
            K::Mod64I => next!(r[d] = r[d].checked_rem(imm).unwrap_or(r[d])),
            K::Mod64R => next!(r[d] = r[d].checked_rem(r[s]).unwrap_or(r[d])),
            K::Neg64 => next!(r[d] = (r[d] as i64).wrapping_neg() as u64),
            K::Add32I => w!((r[d] as u32).wrapping_add(imm as u32)),
            K::Add32R => w!((r[d] as u32).wrapping_add(r[s] as u32)),
            K::Sub32I => w!((r[d] as u32).wrapping_sub(imm as u32)),
            K::Sub32R => w!((r[d] as u32).wrapping_sub(r[s] as u32)),
            K::Mul32I => w!((r[d] as u32).wrapping_mul(imm as u32)),
            K::Mul32R => w!((r[d] as u32).wrapping_mul(r[s] as u32)),
            K::Or32I => w!(r[d] as u32 | imm as u32),
            K::Or32R => w!(r[d] as u32 | r[s] as u32),
            K::And32I => w!(r[d] as u32 & imm as u32),
            K::And32R => w!(r[d] as u32 & r[s] as u32),
            K::Lsh32I => w!((r[d] as u32).wrapping_shl(imm as u32 & 31)),
            K::Lsh32R => w!((r[d] as u32).wrapping_shl(r[s] as u32 & 31)),
            K::Rsh32I => w!((r[d] as u32).wrapping_shr(imm as u32 & 31)),
            K::Rsh32R => w!((r[d] as u32).wrapping_shr(r[s] as u32 & 31)),
            K::Xor32I => w!(r[d] as u32 ^ imm as u32),
            K::Xor32R => w!(r[d] as u32 ^ r[s] as u32),
            K::Mov32I => w!(imm),
            K::Mov32R => w!(r[s]),
            K::Arsh32I => w!((r[d] as u32 as i32) >> (imm as u32 & 31)),
            K::Arsh32R => w!((r[d] as u32 as i32) >> (r[s] as u32 & 31)),
            K::Ja => goto!(x.target()),
            K::JeqI => jmp!(r[d] == imm),
            K::JeqR => jmp!(r[d] == r[s]),
            K::JgtI => jmp!(r[d] > imm),
            K::JgtR => jmp!(r[d] > r[s]),
            K::JgeI => jmp!(r[d] >= imm),
            K::JgeR => jmp!(r[d] >= r[s]),
            K::JsetI => jmp!(r[d] & imm != 0),
            K::JsetR => jmp!(r[d] & r[s] != 0),
            K::JneI => jmp!(r[d] != imm),
            K::JneR => jmp!(r[d] != r[s]),
            K::JsgtI => jmp!(r[d] as i64 > imm as i64),
            K::JsgtR => jmp!(r[d] as i64 > r[s] as i64),
            K::JsgeI => jmp!(r[d] as i64 >= imm as i64),
            K::JsgeR => jmp!(r[d] as i64 >= r[s] as i64),
            K::JltI => jmp!(r[d] < imm),
            K::JltR => jmp!(r[d] < r[s]),
            K::JleI => jmp!(r[d] <= imm),
            K::JleR => jmp!(r[d] <= r[s]),
            K::JsltI => jmp!((r[d] as i64) < imm as i64),
            K::JsltR => jmp!((r[d] as i64) < r[s] as i64),
            K::JsleI => jmp!(r[d] as i64 <= imm as i64),
            K::JsleR => jmp!(r[d] as i64 <= r[s] as i64),
            K::LdImm64 => {
                r[d] = imm;
                i += 1;
            }
            K::Ldx1 => ldx!(u8, fast_load::<1>(m, addr!(s))),
            K::Ldx2 => ldx!(u16, fast_load::<2>(m, addr!(s))),
            K::Ldx4 => ldx!(u32, fast_load::<4>(m, addr!(s))),
            K::Ldx8 => ldx!(u64, fast_load::<8>(m, addr!(s))),
            K::LdxSock1 => ldx!(u8, load_sock::<1>(m, addr!(s))),
            K::LdxSock2 => ldx!(u16, load_sock::<2>(m, addr!(s))),
            K::LdxSock4 => ldx!(u32, load_sock::<4>(m, addr!(s))),
            K::LdxSock8 => ldx!(u64, load_sock::<8>(m, addr!(s))),
            K::LdxRs1 => ldx!(u8, load_rs::<1>(m, addr!(s))),
            K::LdxRs2 => ldx!(u16, load_rs::<2>(m, addr!(s))),
            K::LdxRs4 => ldx!(u32, load_rs::<4>(m, addr!(s))),
            K::LdxRs8 => ldx!(u64, load_rs::<8>(m, addr!(s))),
            K::LdxSk1 => ldx!(u8, load_sk::<1>(m, addr!(s), x.x)),
            K::LdxSk2 => ldx!(u16, load_sk::<2>(m, addr!(s), x.x)),
            K::LdxSk4 => ldx!(u32, load_sk::<4>(m, addr!(s), x.x)),
            K::LdxSk8 => ldx!(u64, load_sk::<8>(m, addr!(s), x.x)),
            K::Stx1 => stx!(1, u8, r[s]),
            K::Stx2 => stx!(2, u16, r[s]),
            K::Stx4 => stx!(4, u32, r[s]),
            K::Stx8 => stx!(8, u64, r[s]),
            K::St1 => stx!(1, u8, imm),
            K::St2 => stx!(2, u16, imm),
            K::St4 => stx!(4, u32, imm),
            K::St8 => stx!(8, u64, imm),
            K::StxSock1 => stx_sock!(1, u8),
            K::StxSock2 => stx_sock!(2, u16),
            K::StxSock4 => stx_sock!(4, u32),
            K::StxSock8 => stx_sock!(8, u64),
            K::StxSk1 => stx_sk!(1, u8),
            K::StxSk2 => stx_sk!(2, u16),
            K::StxSk4 => stx_sk!(4, u32),
            K::StxSk8 => stx_sk!(8, u64),
            K::LdxS1 => ldxs!(1, u8),
            K::LdxS2 => ldxs!(2, u16),
            K::LdxS4 => ldxs!(4, u32),
            K::LdxS8 => ldxs!(8, u64),
            K::StxS1 => stxs!(1, u8, r[s]),
            K::StxS2 => stxs!(2, u16, r[s]),
            K::StxS4 => stxs!(4, u32, r[s]),
            K::StxS8 => stxs!(8, u64, r[s]),
            K::StS1 => stxs!(1, u8, imm),
            K::StS2 => stxs!(2, u16, imm),
            K::StS4 => stxs!(4, u32, imm),
            K::StS8 => stxs!(8, u64, imm),
            K::Exit => {
                if !cpu.frames.is_empty() {
                    bail!();
                }
                cpu.r.copy_from_slice(&r[..16]);
                cpu.pc = i;
                cpu.budget = budget;
                return Ok(Some(r[0]));
            }
            K::CallHelper | K::CallKfunc => {
                let src = if x.k == K::CallHelper { CALL_HELPER } else { CALL_KFUNC };
                r[0] = call_kernel(m, src, imm as i64, [r[1], r[2], r[3], r[4], r[5]]).map_err(|e| (compiled.pc_of.get(i).map_or(0, |&p| p as usize), e))?;
                // r1-r5 are clobbered by a call, as in step
                r[1..=5].fill(0);
                goto!(i + 1)
            }
            K::Zext => {
                r[d] = r[d] as u32 as u64;
                i += 1;
            }
            K::Sext => {
                r[d] = r[d] as u32 as i32 as i64 as u64;
                i += 1;
            }
            K::MovZext => {
                r[d] = r[s] as u32 as u64;
                i += 1;
            }
            K::MovSext => {
                r[d] = r[s] as u32 as i32 as i64 as u64;
                i += 1;
            }
            K::LdConst => {
                r[d] = imm;
                i += 1;
            }
            K::MovIJgt | K::MovIJsgt => {
                r[d] = imm;
                let taken = if x.k == K::MovIJgt { r[s] > imm } else { r[s] as i64 > imm as i64 };
                goto!(if taken { x.target() } else { i + 1 })
            }
            K::Ldx4Jeq | K::Ldx4Jne => match fast_load::<4>(m, r[s].wrapping_add((imm >> 32) as u16 as i16 as i64 as u64)) {
                Some(b) => {
                    let v = u32::from_le_bytes(b) as u64;
                    r[d] = v;
                    let c = imm as u32 as i32 as i64 as u64;
                    let taken = (v == c) == (x.k == K::Ldx4Jeq);
                    goto!(if taken { x.target() } else { i + 1 })
                }
                None => bail!(),
            },
        }
    };
    let (at, refund) = (at & !UNCHARGED, at & UNCHARGED == 0);
    cpu.r.copy_from_slice(&r[..16]);
    cpu.pc = compiled.pc_of.get(at).or(compiled.pc_of.last()).map_or(0, |&p| p as usize);
    cpu.budget = if refund { budget + cost_at(code, at) } else { budget };
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn i(code: u8, dst: u8, src: u8, off: i16, imm: i64) -> Insn {
        Insn { code, dst, src, off, imm }
    }
    const EXIT: Insn = Insn { code: 0x95, dst: 0, src: 0, off: 0, imm: 0 };
    /// r6 = the socket (context slot 0)
    const SOCK: Insn = Insn { code: 0x79, dst: 6, src: 1, off: 0, imm: 0 };

    fn reads(p: &[Insn]) -> Option<Vec<(usize, usize)>> {
        validate(p, "t").unwrap();
        compile(p, 0, &[], &[], CtxLayout::default()).reads
    }

    /// A program is keyed on the socket bytes it reads only when nothing else can change its
    /// result: no call, no store outside its stack, every access at an offset known at load.
    #[test]
    fn socket_reads_of_pure_programs_only() {
        // r0 = sk_pacing_rate (8 bytes at 0); spilled to the stack and read back
        let pure = [SOCK, i(0x79, 0, 6, 0, 0), i(0x7b, 10, 0, -8, 0), i(0x79, 0, 10, -8, 0), EXIT];
        assert_eq!(reads(&pure), Some(vec![(0, 8)]));
        // the socket pointer spilled and reloaded is still followed
        let spilled = [SOCK, i(0x7b, 10, 6, -16, 0), i(0x79, 2, 10, -16, 0), i(0x61, 0, 2, 16, 0), EXIT];
        assert_eq!(reads(&spilled), Some(vec![(16, 20)]));
        // a helper call, a store into the socket, a load at a computed offset, a stack
        // pointer moved out of its frame, a read past the view: not keyed
        let helper = [SOCK, i(0x85, 0, CALL_HELPER, 0, 5), i(0x79, 0, 6, 0, 0), EXIT];
        let store = [SOCK, i(0xb7, 2, 0, 0, 1), i(0x63, 6, 2, 0, 0), EXIT];
        let computed = [SOCK, i(0x61, 2, 6, 4, 0), i(0x0f, 6, 2, 0, 0), i(0x61, 0, 6, 0, 0), EXIT];
        let far = [i(0xbf, 2, 10, 0, 0), i(0x17, 2, 0, 0, 1 << 30), i(0x17, 2, 0, 0, 1 << 30), i(0x79, 0, 2, 0, 0), EXIT];
        let past = [SOCK, i(0x79, 0, 6, TcpSock::SIZE as i16 - 4, 0), EXIT];
        for p in [&helper[..], &store, &computed, &far, &past] {
            assert_eq!(reads(p), None, "{p:?}");
        }
    }
}

#[cfg(test)]
mod long_program {
    use super::*;
    use crate::load::{Object, Shared};
    use std::sync::Mutex;

    /// A program longer than the fast loop's 16-bit slots runs in the reference interpreter
    /// alone, with the same result (and its budget counted the same way).
    #[test]
    fn runs_in_the_reference_interpreter() {
        let n = MAX_SLOTS + 10;
        let mut p: Vec<Insn> = (0..n).map(|k| Insn { code: 0x07, dst: 0, src: 0, off: 0, imm: (k % 7) as i64 }).collect();
        p.push(Insn { code: 0x95, dst: 0, src: 0, off: 0, imm: 0 });
        validate(&p, "t").unwrap();
        let code = compile(&p, 0, &[], &[], CtxLayout::default());
        assert!(code.ops.is_empty());
        let object = Object::for_tests(Mutex::new(Shared { data: Vec::new(), maps: Vec::new() }));
        let mut shared = object.shared.lock().unwrap();
        let mut env = Env::default();
        let mut mem = Mem { ctx: vec![0; 8], stack: vec![0; STACK_PER_FRAME * MAX_FRAMES], ..Mem::default() };
        let mut m = Machine { object: &object, mem: &mut mem, stack_top: STACK_PER_FRAME, shared: &mut shared, env: &mut env };
        let expected: u64 = (0..n).map(|k| (k % 7) as u64).sum();
        assert_eq!(run(&mut m, &p, &code, 0, &mut [0; 256]), Ok(expected));
        let e = run_with(&mut m, &p, Some(&code), None, 0, 100).unwrap_err();
        assert_eq!(e.0, 100, "{e:?}");
    }
}
