//! Native code for the programs that allow it: each program compiled at its
//! [`CALLS_BEFORE_COMPILING`]th call (once per process) with Cranelift (the code generator of
//! wasmtime) into a function that runs it on the host CPU with the same memory rules as the
//! interpreter; whatever it does not do itself it hands back, one instruction at a time, to the
//! reference interpreter ([`step`](super::step)).
//!
//! What is compiled: a program that makes no bpf-to-bpf call, of at most [`MAX_INSNS`]
//! instructions, on a host Cranelift supports. Everything else runs in the fast loop as before.
//! The code charges the instruction budget as the fast loop does, by runs (a run is the straight
//! line from an instruction to the next jump, call or exit, with the costs of
//! [`compile`](super::fast::compile)): on entry and at every jump it charges the run it enters;
//! when the budget does not cover that run it hands the run's first instruction back, and when
//! it hands back an instruction inside a run it gives back what the run had charged for it and
//! the instructions after it. So the interpreter, which charges one instruction at a time,
//! exhausts the budget at the very instruction the reference does.
//!
//! What the code does itself: 32- and 64-bit arithmetic (division and modulo by zero as the
//! kernel defines them), `ld_imm64`, every jump, `exit`, and loads and stores of 1-8 bytes whose
//! base register the load-time data-flow pass ([`guess_bases`](super::fast::guess_bases))
//! expects to point into a buffer of the call: the context, the socket view, the samples, the
//! stack, read-only data, socket storage. Each such access checks at run time that the address
//! lies in that buffer, all of it (a store into the socket view: that it is the very address of
//! a field a congestion control may write, known at load), exactly as the interpreter's checks
//! do; an access through the frame pointer at a constant offset inside its frame needs no check.
//! Helpers and kfuncs it calls through [`call_back`], which runs them as the interpreter does.
//! Anything else (atomics, signed division, byte swaps, sign-extending moves and loads, an
//! access whose check fails) returns the instruction's index (the registers live in the frame
//! the code shares with [`Jit::run`]): the interpreter runs it (a fault is reported there, with
//! its message and index) and the code is entered again at the next instruction where it can
//! be, else the fast loop goes on.
//!
//! Safety: the only `unsafe` of the crate is here: calling the generated function, its call
//! back (which reaches the machine through the frame), and releasing the code's memory. The
//! code reads and writes only through the table of buffers [`Jit::run`] builds from the call's
//! own slices (held mutably borrowed for the call; the call back refreshes the socket storage
//! entries a helper may create or delete), and only after the bounds check described above; the
//! differential test holds it to the reference interpreter on random programs.

#![allow(unsafe_code)]

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, AbiParam, Block, InstBuilder, MemFlagsData, Value};
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Switch};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{Linkage, Module};

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use super::fast::Val;
use super::*;

/// Longest program compiled (longer ones take the fast loop).
pub(crate) const MAX_INSNS: usize = 0x8000;
/// Buffers a compiled program may name (more: its accesses to the others go to the interpreter).
const MAX_REGIONS: usize = 16;

/// What the generated function shares with [`Jit::run`]: the registers r0-r10 in and out, the
/// instruction handed back, and the buffers of the call (address and length in bytes).
#[repr(C)]
struct JitFrame {
    regs: [u64; 11],
    pc: u64,
    budget: u64,
    /// The [`Host`] of the code's calls.
    host: u64,
    regions: [[u64; 2]; MAX_REGIONS],
}

const OFF_PC: i32 = 88;
const OFF_BUDGET: i32 = 96;
const OFF_REGIONS: i32 = 112;
const _: () = assert!(std::mem::offset_of!(JitFrame, pc) == OFF_PC as usize);
const _: () = assert!(std::mem::offset_of!(JitFrame, budget) == OFF_BUDGET as usize);
const _: () = assert!(std::mem::offset_of!(JitFrame, regions) == OFF_REGIONS as usize);

/// The generated function: (frame, entry index) -> 0 at the program's exit (r0 in the frame),
/// 1 when it hands back the instruction in `pc`, 2 when a helper or kfunc it called failed.
type JitFn = unsafe extern "C" fn(*mut JitFrame, u32) -> u32;

/// A program compiled to native code.
pub(crate) struct Jit {
    /// Owns the code's memory; released on drop.
    module: Option<JITModule>,
    func: JitFn,
    /// For each instruction, its entry index if the code can be entered there, else `NONE`.
    entries: Vec<u32>,
    /// The region each slot of [`JitFrame::regions`] holds.
    slots: Vec<u32>,
    /// The run costs by instruction, which the code reads when it hands an instruction back.
    _costs: Box<[u32]>,
}

const NONE: u32 = u32::MAX;

// The module is only kept to own the code's memory (never used after compilation), and the
// finished code is immutable: sharing the function between threads is sharing a function.
unsafe impl Send for Jit {}
unsafe impl Sync for Jit {}

impl Drop for Jit {
    fn drop(&mut self) {
        if let Some(module) = self.module.take() {
            // SAFETY: the function is called only through `self`, which is going away.
            unsafe { module.free_memory() };
        }
    }
}

impl std::fmt::Debug for Jit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Jit").field("entries", &self.entries.iter().filter(|&&e| e != NONE).count()).field("slots", &self.slots).finish()
    }
}

/// Whether programs are compiled to native code: yes, unless `CCTESTBED_BPF_JIT=0` (the
/// interpreter alone, for comparison; both give the same results).
pub(crate) fn enabled() -> bool {
    std::env::var("CCTESTBED_BPF_JIT").map_or(true, |v| v != "0")
}

/// Calls of a program before it is compiled: compiling bbr's main program takes about as long
/// as 17,000 of its calls in the interpreter, so only the programs a trial calls often are
/// compiled (once per process: see [`Lazy`]).
pub(crate) const CALLS_BEFORE_COMPILING: u32 = 1000;

/// Everything a compilation depends on besides the instructions' meaning: the same key gives
/// the same code.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    insns: Vec<Insn>,
    entry: usize,
    bases: Vec<Val>,
    cost: Vec<u32>,
    readonly: Vec<bool>,
}

/// The programs compiled in this process, so that the flows of a trial (each of which loads
/// its object) and the trials of a sweep share one compilation.
fn cache() -> &'static Mutex<HashMap<Key, Option<Arc<Jit>>>> {
    static CACHE: OnceLock<Mutex<HashMap<Key, Option<Arc<Jit>>>>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// A program's native code, compiled at its [`CALLS_BEFORE_COMPILING`]th call (from the inputs
/// kept here) or taken from the process's cache.
#[derive(Debug, Default)]
pub(crate) struct Lazy {
    calls: AtomicU32,
    code: OnceLock<Option<Arc<Jit>>>,
    entry: usize,
    bases: Vec<Val>,
    cost: Vec<u32>,
    readonly: Vec<bool>,
}

impl Lazy {
    pub(crate) fn new(entry: usize, bases: Vec<Val>, cost: Vec<u32>, data: &[DataSection]) -> Lazy {
        Lazy { calls: AtomicU32::new(0), code: OnceLock::new(), entry, bases, cost, readonly: data.iter().map(|d| !d.writable).collect() }
    }

    /// The code, once the program has been called often enough (None before, and for a
    /// program that does not qualify).
    #[inline]
    pub(crate) fn get(&self, insns: &[Insn]) -> Option<&Jit> {
        if let Some(code) = self.code.get() {
            return code.as_deref();
        }
        if self.calls.fetch_add(1, Ordering::Relaxed) < CALLS_BEFORE_COMPILING {
            return None;
        }
        self.force(insns)
    }

    /// A compilation of its own, outside the cache (for the differential test).
    #[cfg(test)]
    pub(crate) fn fresh(&self, insns: &[Insn]) -> Option<Jit> {
        compile(insns, self.entry, &self.bases, &self.readonly, &self.cost)
    }

    /// The code now, compiling it if need be.
    pub(crate) fn force(&self, insns: &[Insn]) -> Option<&Jit> {
        self.code
            .get_or_init(|| {
                if !enabled() {
                    return None;
                }
                let key = Key { insns: insns.to_vec(), entry: self.entry, bases: self.bases.clone(), cost: self.cost.clone(), readonly: self.readonly.clone() };
                let mut cache = match cache().lock() {
                    Ok(c) => c,
                    Err(poisoned) => poisoned.into_inner(),
                };
                cache.entry(key).or_insert_with(|| compile(insns, self.entry, &self.bases, &self.readonly, &self.cost).map(Arc::new)).clone()
            })
            .as_deref()
    }
}

impl Jit {
    /// The entry index of instruction `pc`, if the code can be entered there.
    #[inline]
    pub(crate) fn entry_at(&self, pc: usize) -> Option<u32> {
        self.entries.get(pc).copied().filter(|&e| e != NONE)
    }

    /// Runs the code from entry `k` with `cpu`'s registers: Some(r0) at the program's exit,
    /// None with `cpu.pc` at the instruction handed back; Err as [`step`] reports a fault of a
    /// helper or kfunc the code called.
    pub(crate) fn run(&self, m: &mut Machine, insns: &[Insn], cpu: &mut Cpu, k: u32) -> Result<Option<u64>, (usize, String)> {
        // the code addresses the frame pointer's buffer as the first frame's, and the socket
        // view as a whole one (the interpreter takes over otherwise)
        if m.stack_top != STACK_PER_FRAME || m.mem.stack.len() < STACK_PER_FRAME || m.mem.sock.len() < TcpSock::SIZE {
            return Ok(None);
        }
        let mut f = JitFrame { regs: [0; 11], pc: cpu.pc as u64, budget: cpu.budget, host: 0, regions: [[0; 2]; MAX_REGIONS] };
        f.regs.copy_from_slice(&cpu.r[..11]);
        fill_regions(&mut f, m, &self.slots);
        let mut host = Host { m, insns, slots: &self.slots, error: None };
        f.host = &mut host as *mut Host as u64;
        // SAFETY: the code accesses memory only inside the regions just written, after
        // checking the bounds; their slices stay borrowed (through `m`, which only the code's
        // calls back into `call_back` use meanwhile, refreshing the regions after each).
        let status = unsafe { (self.func)(&mut f, k) };
        cpu.r[..11].copy_from_slice(&f.regs);
        cpu.budget = f.budget;
        match status {
            0 => Ok(Some(f.regs[0])),
            1 => {
                cpu.pc = f.pc as usize;
                Ok(None)
            }
            _ => Err(host.error.take().unwrap_or((f.pc as usize, "native code failed".into()))),
        }
    }
}

/// The buffers of the call into the frame's region table.
fn fill_regions(f: &mut JitFrame, m: &mut Machine, slots: &[u32]) {
    for (slot, &region) in f.regions.iter_mut().zip(slots) {
        *slot = region_of(m, region);
    }
}

/// Where `region`'s buffer is and its length (null and 0 for one the call lacks).
fn region_of(m: &mut Machine, region: u32) -> [u64; 2] {
    let (p, n): (*const u8, usize) = match region {
        R_CTX => (m.mem.ctx.as_mut_ptr(), m.mem.ctx.len()),
        R_SOCK => (m.mem.sock.as_mut_ptr(), m.mem.sock.len()),
        R_ACK => (m.mem.ack.as_mut_ptr(), m.mem.ack.len()),
        R_RS => (m.mem.rs.as_mut_ptr(), m.mem.rs.len()),
        R_STACK => (m.mem.stack.as_mut_ptr(), m.stack_top),
        r if is_storage(r) => match m.mem.sk_storage.get_mut((r - R_SK_STORAGE) as usize) {
            Some(Some(v)) => (v.as_mut_ptr(), v.len()),
            _ => (std::ptr::null(), 0),
        },
        r if r.wrapping_sub(R_DATA) < 0x100 => match m.object.data.get((r - R_DATA) as usize) {
            Some(d) if !d.writable => (d.initial.as_ptr(), d.initial.len()),
            _ => (std::ptr::null(), 0),
        },
        _ => (std::ptr::null(), 0),
    };
    [p as u64, n as u64]
}

/// A socket storage region (the only buffers a helper can create or delete).
fn is_storage(region: u32) -> bool {
    region.wrapping_sub(R_SK_STORAGE) < 0x1000
}

/// What the code's helper and kfunc calls reach through the frame.
struct Host<'h, 'a> {
    m: &'h mut Machine<'a>,
    insns: &'h [Insn],
    slots: &'h [u32],
    error: Option<(usize, String)>,
}

/// Runs the helper or kfunc call at `pc` for the code, as the interpreter does (r0 its
/// result, r1-r5 cleared; the call was charged with its run): 0 when it returned (the socket
/// storage regions refreshed, as a helper may create or delete a value), 1 on a fault (kept
/// for [`Jit::run`]).
extern "C" fn call_back(frame: *mut JitFrame, pc: u64) -> u32 {
    // SAFETY: the code passes the frame `Jit::run` gave it, whose `host` points at the `Host`
    // that `Jit::run` keeps alive (and does not touch) until the code returns.
    let f = unsafe { &mut *frame };
    let host = unsafe { &mut *(f.host as *mut Host) };
    let pc = pc as usize;
    let Some(x) = host.insns.get(pc) else { return 1 };
    let args = [f.regs[1], f.regs[2], f.regs[3], f.regs[4], f.regs[5]];
    match call_kernel(host.m, x.src, x.imm, args) {
        Ok(r0) => {
            f.regs[0] = r0;
            f.regs[1..=5].fill(0);
            for (slot, &region) in f.regions.iter_mut().zip(host.slots) {
                if is_storage(region) {
                    *slot = region_of(host.m, region);
                }
            }
            0
        }
        Err(e) => {
            host.error = Some((pc, e));
            1
        }
    }
}

/// The instructions control can go to from `i` (within the program or `n` for past its end).
fn successors(insns: &[Insn], i: usize) -> ([usize; 2], usize) {
    let x = &insns[i];
    let next = if x.code == 0x18 { i + 2 } else { i + 1 };
    match x.code {
        0x95 => ([0, 0], 0),
        0x05 => ([(i as i64 + 1 + x.off as i64) as usize, 0], 1),
        0x06 => ([(i as i64 + 1 + x.imm) as usize, 0], 1),
        0x85 => ([next, 0], 1),
        c if matches!(c & 7, 5 | 6) => ([next, (i as i64 + 1 + x.off as i64) as usize], 2),
        _ => ([next, 0], 1),
    }
}

/// The instructions reached from `entry`, when none of them is a bpf-to-bpf call.
fn reachable(insns: &[Insn], entry: usize) -> Option<Vec<bool>> {
    let n = insns.len();
    let mut seen = vec![false; n];
    let mut work = vec![entry];
    while let Some(i) = work.pop() {
        if i >= n || seen[i] {
            continue;
        }
        seen[i] = true;
        if insns[i].code == 0x85 && insns[i].src == CALL_LOCAL {
            return None;
        }
        let (succ, count) = successors(insns, i);
        work.extend_from_slice(&succ[..count]);
    }
    Some(seen)
}

/// What the code does with an instruction.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    /// Arithmetic, `ld_imm64`, jumps, exit: always in the code.
    Own,
    /// A load or store the code tries (checked), handing it back when the check fails.
    Mem,
    /// Handed back to the interpreter every time.
    Hand,
}

fn kind(x: &Insn) -> Kind {
    match x.code & 7 {
        0 => Kind::Own,
        1 => {
            if matches!(x.code, 0x61 | 0x69 | 0x71 | 0x79) {
                Kind::Mem
            } else {
                Kind::Hand
            }
        }
        2 => Kind::Mem,
        3 => {
            if x.code & 0xe0 == 0x60 {
                Kind::Mem
            } else {
                Kind::Hand
            }
        }
        4 | 7 => match x.code & 0xf0 {
            0x30 | 0x90 if x.off != 0 => Kind::Hand,
            0xb0 if x.off != 0 => Kind::Hand,
            0xd0 => Kind::Hand,
            0xe0 | 0xf0 => Kind::Hand,
            _ => Kind::Own,
        },
        _ => match x.code {
            0x85 => Kind::Hand,
            _ => Kind::Own,
        },
    }
}

/// Compiles the program entered at `entry` (validated; `bases` from
/// [`guess_bases`](super::fast::guess_bases), `readonly` which data sections are read-only,
/// `cost` the fast loop's run costs by instruction) when it qualifies (see the module's documentation) and the host is supported.
fn compile(insns: &[Insn], entry: usize, bases: &[Val], readonly: &[bool], cost: &[u32]) -> Option<Jit> {
    let n = insns.len();
    if n == 0 || n > MAX_INSNS || cost.len() < n + 1 {
        return None;
    }
    let reached = &reachable(insns, entry)?[..];
    // the buffers the program's accesses are expected in
    let mut slots: Vec<u32> = Vec::new();
    let mut slot_of = |r: u32| -> Option<usize> {
        let ok = matches!(r, R_CTX | R_SOCK | R_ACK | R_RS | R_STACK)
            || is_storage(r)
            || r.wrapping_sub(R_DATA) < 0x100 && readonly.get((r - R_DATA) as usize).copied().unwrap_or(false);
        if !ok {
            return None;
        }
        if let Some(k) = slots.iter().position(|&s| s == r) {
            return Some(k);
        }
        (slots.len() < MAX_REGIONS).then(|| {
            slots.push(r);
            slots.len() - 1
        })
    };
    let mut region_slot: Vec<Option<usize>> = vec![None; n];
    for i in 0..n {
        if reached[i] && kind(&insns[i]) == Kind::Mem {
            if let Val::Ptr(r, _) = bases[i] {
                region_slot[i] = slot_of(r);
            }
        }
    }
    let stack_slot = slot_of(R_STACK)?;

    // where the code can be entered: the program's entry, and after each instruction it
    // always hands back (or, for a call, where it goes on when the budget left is short)
    let mut entries = vec![NONE; n];
    let mut entry_pcs = vec![entry];
    entries[entry] = 0;
    for i in 0..n {
        if reached[i] && kind(&insns[i]) == Kind::Hand {
            let next = i + 1;
            if next < n && reached[next] && entries[next] == NONE {
                entries[next] = entry_pcs.len() as u32;
                entry_pcs.push(next);
            }
        }
    }
    // instructions that start a block: entries and jump targets, and those after a jump
    let mut leader = vec![false; n + 1];
    for &e in &entry_pcs {
        leader[e] = true;
    }
    for i in 0..n {
        if !reached[i] {
            continue;
        }
        let x = &insns[i];
        if matches!(x.code & 7, 5 | 6) && x.code != 0x85 {
            let (succ, count) = successors(insns, i);
            for &t in &succ[..count] {
                leader[t.min(n)] = true;
            }
            leader[(i + 1).min(n)] = true;
        }
    }

    let isa = {
        let mut flags = settings::builder();
        flags.set("opt_level", "speed").ok()?;
        flags.set("enable_verifier", "false").ok()?;
        let isa = cranelift_native::builder().ok()?;
        isa.finish(settings::Flags::new(flags)).ok()?
    };
    let mut module = JITModule::new(JITBuilder::with_isa(isa, cranelift_module::default_libcall_names()));
    let target = module.target_config();
    let ptr = target.pointer_type();
    let mut ctx = module.make_context();
    ctx.func.signature.params.push(AbiParam::new(ptr));
    ctx.func.signature.params.push(AbiParam::new(types::I32));
    ctx.func.signature.returns.push(AbiParam::new(types::I32));
    let mut callback = module.make_signature();
    callback.params.push(AbiParam::new(ptr));
    callback.params.push(AbiParam::new(types::I64));
    callback.returns.push(AbiParam::new(types::I32));
    let costs: Box<[u32]> = cost.into();
    let mut fctx = FunctionBuilderContext::new();
    {
        let mut b = FunctionBuilder::new(&mut ctx.func, &mut fctx);
        let call_sig = b.import_signature(callback);
        let start = b.create_block();
        b.append_block_params_for_function_params(start);
        b.switch_to_block(start);
        let fp = b.block_params(start)[0];
        let which = b.block_params(start)[1];
        let blocks: Vec<Option<Block>> = (0..=n).map(|i| (leader[i] && (i == n || reached[i])).then(|| b.create_block())).collect();
        let past_end = blocks[n];
        let handback = b.create_block();
        b.append_block_param(handback, types::I64);
        let refund = b.create_block();
        b.append_block_param(refund, types::I64);
        let g = Gen { fp, cost, handback, refund, limit: n as i64 + 1, trusted: MemFlagsData::trusted(), data: MemFlagsData::new().with_notrap() };
        // dispatch on the entry index to a block that charges the run entered
        let mut switch = Switch::new();
        let mut trampolines = Vec::new();
        for (k, &pc) in entry_pcs.iter().enumerate() {
            let t = b.create_block();
            switch.set_entry(k as u128, t);
            trampolines.push((t, pc));
        }
        let nowhere = b.create_block();
        switch.emit(&mut b, which, nowhere);
        b.switch_to_block(nowhere);
        let two = b.ins().iconst(types::I32, 2);
        b.ins().return_(&[two]);
        for (t, pc) in trampolines {
            b.switch_to_block(t);
            g.checked_goto(&mut b, blocks[pc]?, pc);
        }
        // handing back inside a charged run: what the run charged for the instruction and
        // those after it is given back (the interpreter charges them one by one)
        b.switch_to_block(refund);
        let at = b.block_params(refund)[0];
        let table = b.ins().iconst(ptr, costs.as_ptr() as i64);
        let index = b.ins().ishl_imm_u(at, 2);
        let entry = b.ins().iadd(table, index);
        let c = b.ins().uload32(g.trusted.with_readonly(), entry, 0);
        let left = g.left(&mut b);
        let rest = b.ins().iadd(left, c);
        g.set_left(&mut b, rest);
        b.ins().jump(handback, &[at.into()]);
        // the one way back: the instruction into the frame
        b.switch_to_block(handback);
        let at = b.block_params(handback)[0];
        b.ins().store(g.trusted, at, fp, OFF_PC);
        let one = b.ins().iconst(types::I32, 1);
        b.ins().return_(&[one]);
        // the instructions, in program order
        let mut open = false;
        let mut pc = 0;
        while pc < n {
            let x = insns[pc];
            let next = if x.code == 0x18 { pc + 2 } else { pc + 1 };
            if !reached[pc] {
                pc = next;
                continue;
            }
            if let Some(block) = blocks[pc] {
                if open {
                    b.ins().jump(block, &[]);
                }
                b.switch_to_block(block);
                open = true;
            }
            if !open {
                // reached only by a path the code never takes (after a hand-back)
                pc = next;
                continue;
            }
            let block_at = |t: usize| blocks.get(t).copied().flatten();
            match kind(&x) {
                Kind::Hand if x.code == 0x85 && pc + 1 < n => {
                    // a helper or kfunc: run through `call_back`, then on
                    let callee = b.ins().iconst(ptr, call_back as *const () as usize as i64);
                    let at = b.ins().iconst(types::I64, pc as i64);
                    let call = b.ins().call_indirect(call_sig, callee, &[fp, at]);
                    let status = b.inst_results(call)[0];
                    let (fail, cont) = (b.create_block(), b.create_block());
                    b.ins().brif(status, fail, &[], cont, &[]);
                    b.switch_to_block(fail);
                    let two = b.ins().iconst(types::I32, 2);
                    b.ins().return_(&[two]);
                    b.switch_to_block(cont);
                    g.checked_goto(&mut b, blocks[pc + 1]?, pc + 1);
                    open = false;
                }
                Kind::Hand => {
                    g.hand_back(&mut b, pc);
                    open = false;
                }
                Kind::Mem => {
                    g.access(&mut b, &x, pc, bases[pc], region_slot[pc], stack_slot);
                }
                Kind::Own => match x.code & 7 {
                    0 => {
                        let v = b.ins().iconst(types::I64, x.imm);
                        g.set(&mut b, x.dst, v);
                    }
                    4 | 7 => g.alu(&mut b, &x),
                    _ => match x.code {
                        0x95 => {
                            let zero = b.ins().iconst(types::I32, 0);
                            b.ins().return_(&[zero]);
                            open = false;
                        }
                        0x05 | 0x06 => {
                            let (succ, _) = successors(insns, pc);
                            g.goto(&mut b, block_at(succ[0])?, succ[0], succ[0] <= pc);
                            open = false;
                        }
                        _ => {
                            let (succ, _) = successors(insns, pc);
                            let (taken, fall) = (block_at(succ[1])?, block_at(succ[0])?);
                            let c = g.condition(&mut b, &x);
                            if succ[1] <= pc {
                                // a jump back: checked on its own edge, the way on charged
                                let (taken_edge, fall_edge) = (b.create_block(), b.create_block());
                                b.ins().brif(c, taken_edge, &[], fall_edge, &[]);
                                b.switch_to_block(taken_edge);
                                g.goto(&mut b, taken, succ[1], true);
                                b.switch_to_block(fall_edge);
                                g.goto(&mut b, fall, succ[0], false);
                            } else {
                                // both runs' costs are known: charge the one entered
                                let (ct, cf) = (g.cost_of(succ[1]), g.cost_of(succ[0]));
                                let kt = b.ins().iconst(types::I64, ct);
                                let kf = b.ins().iconst(types::I64, cf);
                                let k = b.ins().select(c, kt, kf);
                                let left = g.left(&mut b);
                                let rest = b.ins().isub(left, k);
                                g.set_left(&mut b, rest);
                                b.ins().brif(c, taken, &[], fall, &[]);
                            }
                            open = false;
                        }
                    },
                },
            }
            pc = next;
        }
        if let Some(block) = past_end {
            if open {
                b.ins().jump(block, &[]);
            }
            b.switch_to_block(block);
            g.hand_back(&mut b, n);
        } else if open {
            g.hand_back(&mut b, n);
        }
        b.seal_all_blocks();
        b.finalize(target);
    }
    let id = module.declare_function("bpf_program", Linkage::Local, &ctx.func.signature).ok()?;
    module.define_function(id, &mut ctx).ok()?;
    module.clear_context(&mut ctx);
    module.finalize_definitions().ok()?;
    let code = module.get_finalized_function(id);
    // SAFETY: `code` is the function just defined with this signature (frame pointer, u32
    // entry -> u32), in memory owned by `module`, which the `Jit` keeps until it is dropped.
    let func: JitFn = unsafe { std::mem::transmute::<*const u8, JitFn>(code) };
    Some(Jit { module: Some(module), func, entries, slots, _costs: costs })
}

/// What the translation of one instruction needs.
struct Gen<'c> {
    /// The frame, which holds the registers and the budget left while the code runs.
    fp: Value,
    /// The block that hands an instruction back: parameter its index.
    handback: Block,
    /// The same inside a charged run (see [`Gen::back_args`]).
    refund: Block,
    /// The budget a pass without a jump back can spend at most: the program's length and
    /// the instruction after its end.
    limit: i64,
    /// The fast loop's run costs, by instruction.
    cost: &'c [u32],
    /// For the frame's own fields.
    trusted: MemFlagsData,
    /// For the program's accesses (checked, possibly unaligned).
    data: MemFlagsData,
}

impl Gen<'_> {
    fn reg(&self, b: &mut FunctionBuilder, r: u8) -> Value {
        b.ins().load(types::I64, self.trusted, self.fp, r as i32 * 8)
    }
    fn set(&self, b: &mut FunctionBuilder, r: u8, v: Value) {
        b.ins().store(self.trusted, v, self.fp, r as i32 * 8);
    }
    fn cost_of(&self, pc: usize) -> i64 {
        self.cost.get(pc).copied().unwrap_or(1) as i64
    }

    /// Ends the current block by going to `block` (instruction `pc`, which starts a run),
    /// charging the run; on a jump back (`check`), only when the budget covers a whole pass.
    fn goto(&self, b: &mut FunctionBuilder, block: Block, pc: usize, check: bool) {
        if check {
            self.checked_goto(b, block, pc);
        } else {
            let left = self.left(b);
            let rest = b.ins().iadd_imm_s(left, -self.cost_of(pc));
            self.set_left(b, rest);
            b.ins().jump(block, &[]);
        }
    }

    /// [`goto`](Self::goto) where control may come again: when the budget left does not cover
    /// a pass through the program without a jump back (so that the code never reaches the
    /// end of the budget), `pc` is handed back with nothing charged.
    fn checked_goto(&self, b: &mut FunctionBuilder, block: Block, pc: usize) {
        let left = self.left(b);
        let covered = b.ins().icmp_imm_s(IntCC::SignedGreaterThanOrEqual, left, self.limit + self.cost_of(pc));
        let go = b.create_block();
        let at = b.ins().iconst(types::I64, pc as i64);
        b.ins().brif(covered, go, &[], self.handback, &[at.into()]);
        b.switch_to_block(go);
        let rest = b.ins().iadd_imm_s(left, -self.cost_of(pc));
        self.set_left(b, rest);
        b.ins().jump(block, &[]);
    }

    /// The block arguments that hand `pc` back inside a charged run: what the run charged for
    /// `pc` and the instructions after it is given back (the interpreter charges them one by
    /// one).
    fn back_args(&self, b: &mut FunctionBuilder, pc: usize) -> [cranelift_codegen::ir::BlockArg; 1] {
        let at = b.ins().iconst(types::I64, pc as i64);
        [at.into()]
    }

    /// The budget left (in the frame while the code runs).
    fn left(&self, b: &mut FunctionBuilder) -> Value {
        b.ins().load(types::I64, self.trusted, self.fp, OFF_BUDGET)
    }
    fn set_left(&self, b: &mut FunctionBuilder, v: Value) {
        b.ins().store(self.trusted, v, self.fp, OFF_BUDGET);
    }

    /// Ends the current block, handing `pc` (inside a charged run) back.
    fn hand_back(&self, b: &mut FunctionBuilder, pc: usize) {
        let args = self.back_args(b, pc);
        b.ins().jump(self.refund, &args);
    }

    /// The second operand of an ALU or jump instruction: its register, or its immediate
    /// (sign-extended to 64 bits; 32-bit operations use the low half).
    fn operand(&self, b: &mut FunctionBuilder, x: &Insn) -> Value {
        if x.code & 0x08 != 0 {
            self.reg(b, x.src)
        } else {
            b.ins().iconst(types::I64, x.imm as i32 as i64)
        }
    }

    /// An ALU instruction: 64-bit, or 32-bit on the low halves with the result zero-extended.
    fn alu(&self, b: &mut FunctionBuilder, x: &Insn) {
        let wide = x.code & 7 == 7;
        let low = |b: &mut FunctionBuilder, v: Value| b.ins().band_imm_u(v, 0xffff_ffff);
        let (mut d, mut s) = (self.reg(b, x.dst), self.operand(b, x));
        if !wide {
            (d, s) = (low(b, d), low(b, s));
        }
        // shift amounts are taken modulo the width
        let width_mask = if wide { 63 } else { 31 };
        let v = match x.code & 0xf0 {
            0x00 => b.ins().iadd(d, s),
            0x10 => b.ins().isub(d, s),
            0x20 => b.ins().imul(d, s),
            0x30 => self.divide(b, d, s, false),
            0x40 => b.ins().bor(d, s),
            0x50 => b.ins().band(d, s),
            0x60 => {
                let k = b.ins().band_imm_u(s, width_mask);
                b.ins().ishl(d, k)
            }
            0x70 => {
                let k = b.ins().band_imm_u(s, width_mask);
                b.ins().ushr(d, k)
            }
            0x80 => b.ins().ineg(d),
            0x90 => self.divide(b, d, s, true),
            0xa0 => b.ins().bxor(d, s),
            0xb0 => s,
            _ => {
                let k = b.ins().band_imm_u(s, width_mask);
                let signed = if wide {
                    d
                } else {
                    let d32 = b.ins().ireduce(types::I32, d);
                    b.ins().sextend(types::I64, d32)
                };
                b.ins().sshr(signed, k)
            }
        };
        let v = if wide { v } else { low(b, v) };
        self.set(b, x.dst, v);
    }

    /// Unsigned division (or modulo) as BPF defines it by zero: the quotient 0, the remainder
    /// the dividend.
    fn divide(&self, b: &mut FunctionBuilder, d: Value, s: Value, modulo: bool) -> Value {
        let zero = b.ins().icmp_imm_s(IntCC::Equal, s, 0);
        let one = b.ins().iconst(types::I64, 1);
        let safe = b.ins().select(zero, one, s);
        if modulo {
            let r = b.ins().urem(d, safe);
            b.ins().select(zero, d, r)
        } else {
            let q = b.ins().udiv(d, safe);
            let z = b.ins().iconst(types::I64, 0);
            b.ins().select(zero, z, q)
        }
    }

    /// Whether conditional jump `x` is taken.
    fn condition(&self, b: &mut FunctionBuilder, x: &Insn) -> Value {
        let mut d = self.reg(b, x.dst);
        let mut s = self.operand(b, x);
        if x.code & 7 == 6 {
            d = b.ins().ireduce(types::I32, d);
            s = b.ins().ireduce(types::I32, s);
        }
        let cc = match x.code & 0xf0 {
            0x10 => IntCC::Equal,
            0x20 => IntCC::UnsignedGreaterThan,
            0x30 => IntCC::UnsignedGreaterThanOrEqual,
            0x50 => IntCC::NotEqual,
            0x60 => IntCC::SignedGreaterThan,
            0x70 => IntCC::SignedGreaterThanOrEqual,
            0xa0 => IntCC::UnsignedLessThan,
            0xb0 => IntCC::UnsignedLessThanOrEqual,
            0xc0 => IntCC::SignedLessThan,
            0xd0 => IntCC::SignedLessThanOrEqual,
            _ => {
                // 0x40: jset
                let both = b.ins().band(d, s);
                return b.ins().icmp_imm_s(IntCC::NotEqual, both, 0);
            }
        };
        b.ins().icmp(cc, d, s)
    }

    /// The address of region slot `k`'s buffer and its length.
    fn region(&self, b: &mut FunctionBuilder, k: usize) -> (Value, Value) {
        let at = OFF_REGIONS + 16 * k as i32;
        // constant during a call: free to be computed once and moved
        let fixed = self.trusted.with_readonly().with_can_move();
        let base = b.ins().load(types::I64, fixed, self.fp, at);
        let len = b.ins().load(types::I64, fixed, self.fp, at + 8);
        (base, len)
    }

    /// A load or store (`x` at `pc`, its base expected to be `base`, in slot `slot`).
    fn access(&self, b: &mut FunctionBuilder, x: &Insn, pc: usize, base: Val, slot: Option<usize>, stack_slot: usize) {
        let n = mem_size(x.code) as i64;
        let load = x.code & 7 == 1;
        let breg = if load { x.src } else { x.dst };
        let off = x.off as i64;
        // the frame pointer at a constant offset inside its frame: no check
        if breg == 10 && off >= -(STACK_PER_FRAME as i64) && off + n <= 0 {
            let (buf, _) = self.region(b, stack_slot);
            self.move_bytes(b, x, buf, STACK_PER_FRAME as i64 + off);
            return;
        }
        let Val::Ptr(region, known) = base else { return self.hand_back_open(b, pc) };
        let Some(k) = slot else { return self.hand_back_open(b, pc) };
        let readonly = matches!(region, R_CTX | R_ACK | R_RS) || region.wrapping_sub(R_DATA) < 0x100;
        if !load && readonly {
            return self.hand_back_open(b, pc);
        }
        let r = self.reg(b, breg);
        let (buf, len) = self.region(b, k);
        let ok_block = b.create_block();
        // where the pass expects the base at a known offset: the address itself is compared
        // (the frame pointer's region offsets count from the frame's top)
        let top = if region == R_STACK { STACK_PER_FRAME as i64 } else { 0 };
        let exact = known.and_then(|o| o.checked_add(off + top)).filter(|o| (0..1 << 31).contains(o) && o + n < 1 << 32);
        if let (Some(o), false) = (exact, !load && region == R_SOCK) {
            let expected = ((region as u64) << 32 | o as u64) as i64;
            let same = b.ins().icmp_imm_s(IntCC::Equal, r, expected - off);
            let args = self.back_args(b, pc);
            // the socket view and the first frame always have their full length
            let fixed = match region {
                R_SOCK => o + n <= TcpSock::SIZE as i64,
                R_STACK => o + n <= STACK_PER_FRAME as i64,
                _ => false,
            };
            let ok = if fixed {
                same
            } else {
                let fits = b.ins().icmp_imm_s(IntCC::UnsignedGreaterThanOrEqual, len, o + n);
                b.ins().band(same, fits)
            };
            b.ins().brif(ok, ok_block, &[], self.refund, &args);
            b.switch_to_block(ok_block);
            self.move_bytes(b, x, buf, o);
            let cont = b.create_block();
            b.ins().jump(cont, &[]);
            b.switch_to_block(cont);
            return;
        }
        let a = b.ins().iadd_imm_s(r, off);
        if !load && region == R_SOCK {
            // only the exact address of a writable field, known at load
            let Some(o) = known.and_then(|o| o.checked_add(off)).filter(|o| (0..1 << 31).contains(o)) else {
                return self.hand_back_open(b, pc);
            };
            let writable = crate::view::offsets::writable().iter().any(|(_, s, e)| o as usize >= *s && o as usize + n as usize <= *e);
            if !writable {
                return self.hand_back_open(b, pc);
            }
            let expected = ((R_SOCK as u64) << 32 | o as u64) as i64;
            let same = b.ins().icmp_imm_s(IntCC::Equal, a, expected);
            let fits = b.ins().icmp_imm_s(IntCC::UnsignedGreaterThanOrEqual, len, o + n);
            let ok = b.ins().band(same, fits);
            let args = self.back_args(b, pc);
            b.ins().brif(ok, ok_block, &[], self.refund, &args);
            b.switch_to_block(ok_block);
            self.move_bytes(b, x, buf, o);
        } else {
            let hi = b.ins().ushr_imm_u(a, 32);
            let same = b.ins().icmp_imm_s(IntCC::Equal, hi, region as i64);
            let lo = b.ins().band_imm_u(a, 0xffff_ffff);
            let end = b.ins().iadd_imm_s(lo, n);
            let fits = b.ins().icmp(IntCC::UnsignedLessThanOrEqual, end, len);
            let ok = b.ins().band(same, fits);
            let args = self.back_args(b, pc);
            b.ins().brif(ok, ok_block, &[], self.refund, &args);
            b.switch_to_block(ok_block);
            let p = b.ins().iadd(buf, lo);
            self.move_bytes(b, x, p, 0);
        }
        let cont = b.create_block();
        b.ins().jump(cont, &[]);
        b.switch_to_block(cont);
    }

    /// Hands `pc` back and goes on in a fresh block that nothing enters (so that the caller
    /// can keep translating the instructions after it in program order).
    fn hand_back_open(&self, b: &mut FunctionBuilder, pc: usize) {
        self.hand_back(b, pc);
        let dead = b.create_block();
        b.switch_to_block(dead);
    }

    /// The load or store of `x` at address `p + off` (checked by the caller).
    fn move_bytes(&self, b: &mut FunctionBuilder, x: &Insn, p: Value, off: i64) {
        let off = off as i32;
        let f = self.data;
        if x.code & 7 == 1 {
            let v = match mem_size(x.code) {
                1 => b.ins().uload8(types::I64, f, p, off),
                2 => b.ins().uload16(types::I64, f, p, off),
                4 => b.ins().uload32(f, p, off),
                _ => b.ins().load(types::I64, f, p, off),
            };
            self.set(b, x.dst, v);
        } else {
            let v = if x.code & 7 == 3 { self.reg(b, x.src) } else { b.ins().iconst(types::I64, x.imm) };
            match mem_size(x.code) {
                1 => b.ins().istore8(f, v, p, off),
                2 => b.ins().istore16(f, v, p, off),
                4 => b.ins().istore32(f, v, p, off),
                _ => b.ins().store(f, v, p, off),
            };
        }
    }
}
