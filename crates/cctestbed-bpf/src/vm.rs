//! The interpreter: instructions decoded once at load ([`Insn`]), run with an instruction
//! budget, a frame limit, and every memory access checked against the regions of the call.
//!
//! Pointers are 64-bit values `region << 32 | offset`; a region is one of the buffers a call
//! may touch (context array, socket view, ack/rate sample, stack, a global data section, an
//! array map's values, one hash map entry's value, one socket-local storage value). An access
//! is allowed when its first and last byte lie inside one region and the region is writable
//! for a store. Address 0 is never a region, so a NULL dereference is an error.

use std::sync::Arc;

use crate::kernel::{self, Kfunc};
use crate::load::{DataSection, MapStore, Object, Shared, MAP_TYPE_ARRAY, MAP_TYPE_HASH};

mod fast;
mod jit;
pub(crate) use fast::{compile, run, Code, CtxLayout, Regs};
#[cfg(test)]
use fast::run_with;
use crate::view::ViewType;
use crate::{AckSample, Env, LoadError, Op, RateSample, RunError, TcpSock};

/// Instructions one call may execute (a loop that runs longer is an error, not a hang).
pub const INSN_BUDGET: u64 = 1_000_000;
/// Deepest bpf-to-bpf call nesting (the kernel's `MAX_CALL_FRAMES`).
pub const MAX_FRAMES: usize = 8;
/// Stack bytes per frame.
pub const STACK_PER_FRAME: usize = 512;

pub(crate) const CALL_HELPER: u8 = 0;
pub(crate) const CALL_LOCAL: u8 = 1;
pub(crate) const CALL_KFUNC: u8 = 2;

const R_CTX: u32 = 1;
const R_SOCK: u32 = 2;
const R_ACK: u32 = 3;
const R_RS: u32 = 4;
const R_STACK: u32 = 5;
const R_DATA: u32 = 0x100;
const R_MAP_HANDLE: u32 = 0x1000;
const R_ARRAY: u32 = 0x2000;
const R_SK_STORAGE: u32 = 0x3000;
const R_HASH: u32 = 0x1000_0000;

pub(crate) fn addr(region: u32, off: u64) -> u64 {
    (region as u64) << 32 | (off & 0xffff_ffff)
}
pub(crate) fn map_handle(map: usize) -> u64 {
    addr(R_MAP_HANDLE + map as u32, 0)
}
pub(crate) fn data_addr(section: usize, off: u64) -> u64 {
    addr(R_DATA + section as u32, off)
}
pub(crate) fn sock_addr() -> u64 {
    addr(R_SOCK, 0)
}

/// One decoded instruction. `ld_imm64` holds its whole 64-bit value in `imm` and is followed
/// by a filler slot (code 0) so that indices match the object's; calls carry their kind in
/// `src` and, for local calls, the absolute target index in `imm`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Insn {
    pub code: u8,
    pub dst: u8,
    pub src: u8,
    pub off: i16,
    pub imm: i64,
}

impl Insn {
    pub(crate) fn raw(b: &[u8; 8]) -> Insn {
        Insn {
            code: b[0],
            dst: b[1] & 0xf,
            src: b[1] >> 4,
            off: i16::from_le_bytes([b[2], b[3]]),
            imm: i32::from_le_bytes([b[4], b[5], b[6], b[7]]) as i64,
        }
    }
    pub(crate) fn filler() -> Insn {
        Insn { code: 0, dst: 0, src: 0, off: 0, imm: 0 }
    }
}

/// Bytes accessed by a memory instruction.
pub(crate) fn mem_size(code: u8) -> usize {
    match code & 0x18 {
        0x00 => 4,
        0x08 => 2,
        0x10 => 1,
        _ => 8,
    }
}

/// Load-time check of a program's instructions: known opcodes, registers, jump targets inside
/// the program and not into the second half of an `ld_imm64`, call targets, kfunc ids.
pub(crate) fn validate(insns: &[Insn], name: &str) -> Result<(), LoadError> {
    let bad = |i: usize, m: &str| LoadError(format!("{name}: instruction {i}: {m}"));
    let n = insns.len() as i64;
    let filler = |t: i64| insns.get(t as usize).is_none_or(|x| x.code == 0);
    for (i, x) in insns.iter().enumerate() {
        if x.code == 0 {
            if i == 0 || insns[i - 1].code != 0x18 {
                return Err(bad(i, "invalid opcode 0x00"));
            }
            continue;
        }
        if x.dst > 10 || x.src > 10 && x.code != 0x85 {
            return Err(bad(i, "register number above r10"));
        }
        let class = x.code & 7;
        let op = x.code & 0xf0;
        let ok = match class {
            0 => x.code == 0x18,
            1 => matches!(x.code & 0xe0, 0x60 | 0x80) && !(x.code & 0xe0 == 0x80 && x.code & 0x18 == 0x18),
            2 => x.code & 0xe0 == 0x60,
            3 => match x.code & 0xe0 {
                0x60 => true,
                0xc0 => matches!(x.code & 0x18, 0x00 | 0x18) && matches!(x.imm, 0x00 | 0x01 | 0x40 | 0x41 | 0x50 | 0x51 | 0xa0 | 0xa1 | 0xe1 | 0xf1),
                _ => false,
            },
            4 | 7 => match op {
                0xd0 => matches!(x.imm, 16 | 32 | 64) && (class == 4 || x.code & 0x08 == 0),
                0x80 => x.code & 0x08 == 0,
                0x30 | 0x90 => matches!(x.off, 0 | 1),
                // sign-extending moves (off 8/16/32) take a register; the kernel refuses an
                // immediate move with a non-zero offset ("BPF_MOV uses reserved fields")
                0xb0 => matches!(x.off, 0 | 8 | 16 | 32) && !(class == 4 && x.off == 32) && (x.code & 0x08 != 0 || x.off == 0),
                0xe0 | 0xf0 => false,
                _ => true,
            },
            5 | 6 => match op {
                0x80 => class == 5 && x.code == 0x85,
                0x90 => class == 5 && x.code == 0x95,
                0xe0 | 0xf0 => false,
                _ => true,
            },
            _ => false,
        };
        if !ok {
            return Err(bad(i, &format!("unsupported opcode 0x{:02x}", x.code)));
        }
        // r10 is read-only
        let writes_dst = matches!(class, 0 | 1 | 4 | 7);
        if writes_dst && x.dst == 10 {
            return Err(bad(i, "write to r10 (the frame pointer)"));
        }
        // an atomic fetch loads the old value into its source register (cmpxchg into r0); the
        // kernel's verifier refuses r10 there too ("frame pointer is read only")
        if class == 3 && x.code & 0xe0 == 0xc0 && x.imm & 1 != 0 && x.imm != 0xf1 && x.src == 10 {
            return Err(bad(i, "atomic fetch into r10 (the frame pointer)"));
        }
        if class == 5 || class == 6 {
            let target = match x.code {
                0x85 => {
                    match x.src {
                        CALL_LOCAL => {
                            if x.imm < 0 || x.imm >= n || filler(x.imm) {
                                return Err(bad(i, "bpf-to-bpf call target outside the program"));
                            }
                        }
                        CALL_KFUNC => {
                            if Kfunc::from_index(x.imm).is_none() {
                                return Err(bad(i, "unknown kfunc"));
                            }
                        }
                        CALL_HELPER => {}
                        _ => return Err(bad(i, "unknown call kind")),
                    }
                    continue;
                }
                0x95 => continue,
                0x06 => i as i64 + 1 + x.imm, // gotol
                _ => i as i64 + 1 + x.off as i64,
            };
            if target < 0 || target >= n || filler(target) {
                return Err(bad(i, &format!("jump target {target} outside the program")));
            }
        }
    }
    Ok(())
}

/// One flow (socket) running an [`Object`]: its socket view and its socket-local storage.
#[derive(Debug)]
pub struct Instance {
    object: Arc<Object>,
    /// The program's view of the socket: fill before each call, read the writable fields after.
    pub sock: Box<TcpSock>,
    /// The memory of a call (its buffers kept from call to call) and the socket storage.
    pub(crate) mem: Mem,
    /// The fast loop's registers, kept to spare zeroing them at every call.
    regs: Box<Regs>,
    /// For each program that is a function of the socket bytes it reads
    /// ([`Code::reads`]): the context and those bytes at its last successful call, and its
    /// result then.
    memo: Vec<Option<(Vec<u8>, u64)>>,
    /// The key of the current call, built here to spare an allocation.
    key: Vec<u8>,
    /// The stand-in for the object's shared state when its programs cannot change it.
    unshared: Option<Shared>,
}

/// The memory of a call: the context array, the socket view, the samples, the stack, and the
/// instance's socket storage values (one per map of the object; None: not created).
#[derive(Debug, Default)]
pub(crate) struct Mem {
    pub ctx: Vec<u8>,
    pub sock: Vec<u8>,
    pub ack: Vec<u8>,
    pub rs: Vec<u8>,
    pub stack: Vec<u8>,
    pub sk_storage: Vec<Option<Vec<u8>>>,
}

/// Overwrites `buf` with the bytes of view `v` (empty for None). The buffer keeps its size
/// from call to call, so it is zeroed only when it is (re)made: the view's padding, which no
/// member store writes and no program may write, stays zero.
fn fill_view<T: ViewType>(buf: &mut Vec<u8>, v: Option<&T>) {
    match v {
        Some(v) => {
            if buf.len() != T::SIZE {
                buf.clear();
                buf.resize(T::SIZE, 0);
            }
            v.store(buf);
        }
        None => buf.clear(),
    }
}

struct Frame {
    ret_pc: usize,
    saved: [u64; 4],
}

/// Everything one call can touch.
pub(crate) struct Machine<'a> {
    pub object: &'a Object,
    pub mem: &'a mut Mem,
    /// End of the current frame's 512 bytes: the stack below it (this frame and its callers')
    /// is accessible, the frames of returned callees above it are not.
    pub stack_top: usize,
    pub shared: &'a mut Shared,
    pub env: &'a mut Env,
}

impl<'a> Machine<'a> {
    /// The bytes `[a, a + len)`, readable.
    pub fn slice(&self, a: u64, len: usize) -> Result<&[u8], String> {
        let region = (a >> 32) as u32;
        let off = (a & 0xffff_ffff) as usize;
        let buf: &[u8] = match region {
            R_CTX => &self.mem.ctx,
            R_SOCK => &self.mem.sock,
            R_ACK => &self.mem.ack,
            R_RS => &self.mem.rs,
            R_STACK => &self.mem.stack[..self.stack_top],
            r if (R_DATA..R_DATA + 0x100).contains(&r) => {
                let i = (r - R_DATA) as usize;
                match self.object.data.get(i) {
                    Some(d) if d.writable => &self.shared.data[i],
                    Some(d) => &d.initial,
                    None => return Err(format!("read of 0x{a:x}, which is no memory")),
                }
            }
            r if (R_ARRAY..R_ARRAY + 0x1000).contains(&r) => match self.shared.maps.get((r - R_ARRAY) as usize) {
                Some(MapStore::Array(v)) => v,
                _ => return Err(format!("read of 0x{a:x}, which is no memory")),
            },
            r if (R_SK_STORAGE..R_SK_STORAGE + 0x1000).contains(&r) => match self.mem.sk_storage.get((r - R_SK_STORAGE) as usize) {
                Some(Some(v)) => v,
                _ => return Err(format!("read of 0x{a:x}: socket storage not present")),
            },
            r if r >= R_HASH => {
                let m = ((r - R_HASH) >> 20) as usize;
                let slot = ((r - R_HASH) & 0xf_ffff) as usize;
                match self.shared.maps.get(m) {
                    Some(MapStore::Hash(slots)) => match slots.get(slot) {
                        Some(Some((_, v))) => v,
                        _ => return Err(format!("read of 0x{a:x}: hash map entry deleted")),
                    },
                    _ => return Err(format!("read of 0x{a:x}, which is no memory")),
                }
            }
            _ => return Err(format!("read of {len} bytes at 0x{a:x}, which is no memory (NULL or a scalar used as a pointer)")),
        };
        buf.get(off..off + len).ok_or_else(|| format!("read of {len} bytes at 0x{a:x} is out of bounds ({} bytes there)", buf.len()))
    }

    /// The bytes `[a, a + len)`, writable.
    pub fn slice_mut(&mut self, a: u64, len: usize) -> Result<&mut [u8], String> {
        let region = (a >> 32) as u32;
        let off = (a & 0xffff_ffff) as usize;
        let ro = |what: &str| Err(format!("write of {len} bytes at 0x{a:x}: {what} is read-only"));
        let buf: &mut Vec<u8> = match region {
            R_CTX => return ro("the context"),
            R_ACK => return ro("ack_sample"),
            R_RS => return ro("rate_sample"),
            R_SOCK => {
                if !self.object.writable.iter().any(|(_, s, e)| off >= *s && off + len <= *e) {
                    return Err(format!(
                        "write of {len} bytes at tcp_sock offset {off}, outside the fields a congestion control may write ({})",
                        self.object.writable.iter().map(|w| w.0).collect::<Vec<_>>().join(", ")
                    ));
                }
                &mut self.mem.sock
            }
            R_STACK => {
                let top = self.stack_top;
                return self.mem.stack.get_mut(off..off + len).filter(|_| off + len <= top).ok_or_else(|| {
                    format!("write of {len} bytes at 0x{a:x} is out of bounds (the stack has {top} bytes in this frame and its callers')")
                });
            }
            r if (R_DATA..R_DATA + 0x100).contains(&r) => {
                let i = (r - R_DATA) as usize;
                match self.object.data.get(i) {
                    Some(d) if d.writable => &mut self.shared.data[i],
                    Some(d) => return ro(&d.name),
                    None => return Err(format!("write of 0x{a:x}, which is no memory")),
                }
            }
            r if (R_ARRAY..R_ARRAY + 0x1000).contains(&r) => match self.shared.maps.get_mut((r - R_ARRAY) as usize) {
                Some(MapStore::Array(v)) => v,
                _ => return Err(format!("write of 0x{a:x}, which is no memory")),
            },
            r if (R_SK_STORAGE..R_SK_STORAGE + 0x1000).contains(&r) => match self.mem.sk_storage.get_mut((r - R_SK_STORAGE) as usize) {
                Some(Some(v)) => v,
                _ => return Err(format!("write of 0x{a:x}: socket storage not present")),
            },
            r if r >= R_HASH => {
                let m = ((r - R_HASH) >> 20) as usize;
                let slot = ((r - R_HASH) & 0xf_ffff) as usize;
                match self.shared.maps.get_mut(m) {
                    Some(MapStore::Hash(slots)) => match slots.get_mut(slot) {
                        Some(Some((_, v))) => v,
                        _ => return Err(format!("write of 0x{a:x}: hash map entry deleted")),
                    },
                    _ => return Err(format!("write of 0x{a:x}, which is no memory")),
                }
            }
            _ => return Err(format!("write of {len} bytes at 0x{a:x}, which is no memory (NULL or a scalar used as a pointer)")),
        };
        let n = buf.len();
        buf.get_mut(off..off + len).ok_or_else(|| format!("write of {len} bytes at 0x{a:x} is out of bounds ({n} bytes there)"))
    }

    /// A little-endian load of `len` (1, 2, 4 or 8) bytes.
    pub fn read(&self, a: u64, len: usize) -> Result<u64, String> {
        let s = self.slice(a, len)?;
        Ok(match *s {
            [b0] => b0 as u64,
            [b0, b1] => u16::from_le_bytes([b0, b1]) as u64,
            [b0, b1, b2, b3] => u32::from_le_bytes([b0, b1, b2, b3]) as u64,
            [b0, b1, b2, b3, b4, b5, b6, b7] => u64::from_le_bytes([b0, b1, b2, b3, b4, b5, b6, b7]),
            _ => return Err(format!("load of {len} bytes")),
        })
    }

    /// A little-endian store of the low `len` (1, 2, 4 or 8) bytes of `v`.
    pub fn write(&mut self, a: u64, len: usize, v: u64) -> Result<(), String> {
        let s = self.slice_mut(a, len)?;
        let b = v.to_le_bytes();
        match s {
            [d0] => *d0 = b[0],
            [d0, d1] => [*d0, *d1] = [b[0], b[1]],
            [d0, d1, d2, d3] => [*d0, *d1, *d2, *d3] = [b[0], b[1], b[2], b[3]],
            [_, _, _, _, _, _, _, _] => s.copy_from_slice(&b),
            _ => return Err(format!("store of {len} bytes")),
        }
        Ok(())
    }

    pub fn hash_addr(map: usize, slot: usize) -> u64 {
        addr(R_HASH | (map as u32) << 20 | slot as u32, 0)
    }
    pub fn array_addr(map: usize, off: u64) -> u64 {
        addr(R_ARRAY + map as u32, off)
    }
    pub fn sk_storage_addr(map: usize) -> u64 {
        addr(R_SK_STORAGE + map as u32, 0)
    }
    /// The map a map-handle pointer names.
    pub fn map_of(&self, handle: u64) -> Option<usize> {
        let r = (handle >> 32) as u32;
        let m = r.checked_sub(R_MAP_HANDLE)? as usize;
        (handle & 0xffff_ffff == 0 && m < self.object.maps.len()).then_some(m)
    }
}

impl Instance {
    pub(crate) fn new(object: Arc<Object>) -> Instance {
        let n = object.maps.len();
        // Without array or hash maps and writable data, the shared state is never touched: a
        // copy of its (empty) shape stands in for it and no call takes the lock.
        let lock_free = object.maps.iter().all(|m| m.kind != MAP_TYPE_ARRAY && m.kind != MAP_TYPE_HASH) && object.data.iter().all(|d| !d.writable);
        let unshared = lock_free.then(|| Shared {
            data: object.data.iter().map(|_| Vec::new()).collect(),
            maps: object.maps.iter().map(|_| MapStore::SkStorage).collect(),
        });
        let mem = Mem { sk_storage: vec![None; n], ..Mem::default() };
        let memo = vec![None; object.programs.len()];
        Instance { object, sock: Box::default(), mem, regs: Box::new([0; 256]), memo, key: Vec::new(), unshared }
    }

    pub fn object(&self) -> &Arc<Object> {
        &self.object
    }

    /// This socket's value in socket-local storage map `map` (None: no such map, or no value
    /// created yet).
    pub fn sk_storage(&self, map: &str) -> Option<&[u8]> {
        let i = self.object.maps.iter().position(|m| m.name == map)?;
        self.mem.sk_storage.get(i)?.as_deref()
    }

    /// Runs `op`'s program with the socket as first argument and `args` after it (u64 each,
    /// as the BPF_PROG context array). `pkts_acked` gets `ack` and `cong_control` gets `rs` as
    /// their pointer argument, after `args` (so `cong_control` takes `args = [ack, flag]`); a
    /// missing sample is passed as NULL. Returns r0; an op the object lacks returns Ok(None).
    pub fn call(&mut self, op: Op, args: &[u64], ack: Option<&AckSample>, rs: Option<&RateSample>, env: &mut Env) -> Result<Option<u64>, RunError> {
        let Instance { object, sock: view, mem, regs, memo, key, unshared } = self;
        let object: &Object = object;
        let Some(pi) = object.ops[op.index()] else { return Ok(None) };
        let prog = &object.programs[pi];
        let ctx = &mut mem.ctx;
        ctx.clear();
        ctx.extend_from_slice(&sock_addr().to_le_bytes());
        for a in args {
            ctx.extend_from_slice(&a.to_le_bytes());
        }
        match op {
            Op::PktsAcked => ctx.extend_from_slice(&(if ack.is_some() { addr(R_ACK, 0) } else { 0 }).to_le_bytes()),
            Op::CongControl => ctx.extend_from_slice(&(if rs.is_some() { addr(R_RS, 0) } else { 0 }).to_le_bytes()),
            _ => {}
        }
        let mut guard = match unshared {
            Some(_) => None,
            None => Some(match object.shared.lock() {
                Ok(g) => g,
                Err(poisoned) => poisoned.into_inner(),
            }),
        };
        let shared: &mut Shared = match (&mut guard, unshared) {
            (Some(g), _) => g,
            (None, Some(u)) => u,
            (None, None) => return Err(RunError { program: prog.section.clone(), op, insn: prog.entry, message: "no shared state".into() }),
        };
        // Kernel bit fields (read-only) go where the object's BTF puts them within their byte.
        fill_view(&mut mem.sock, Some(&**view));
        for b in &object.bitfields {
            let mask = ((1u16 << b.width) - 1) as u8;
            mem.sock[b.offset] = (mem.sock[b.offset] & mask) << b.shift;
        }
        // A program that is a function of the context and the socket bytes it reads gives
        // again the result it gave for the same bytes.
        if let Some(reads) = &prog.fast.reads {
            key.clear();
            key.extend_from_slice(&mem.ctx);
            for &(a, b) in reads {
                key.extend_from_slice(mem.sock.get(a..b).unwrap_or(&[]));
            }
            if let Some(Some((k, r0))) = memo.get(pi) {
                if k == key {
                    return Ok(Some(*r0));
                }
            }
        }
        fill_view(&mut mem.ack, ack);
        fill_view(&mut mem.rs, rs);
        // Each frame's 512 bytes are zeroed when the frame starts.
        mem.stack.resize(STACK_PER_FRAME * MAX_FRAMES, 0);
        mem.stack[..STACK_PER_FRAME].fill(0);
        let mut m = Machine { object, mem, stack_top: STACK_PER_FRAME, shared, env };
        let result = run(&mut m, &prog.insns, &prog.fast, prog.entry, regs);
        drop(guard);
        // Stores before a failure stay visible, as they would in the kernel. Only the writable
        // fields can have changed (the bit-field bytes, read-only, need no restoring).
        crate::view::offsets::load_writable(view, &mem.sock);
        match result {
            Ok(r0) => {
                if prog.fast.reads.is_some() {
                    if let Some(slot) = memo.get_mut(pi) {
                        match slot {
                            Some((k, v)) => {
                                k.clone_from(key);
                                *v = r0;
                            }
                            None => *slot = Some((key.clone(), r0)),
                        }
                    }
                }
                Ok(Some(r0))
            }
            Err((insn, message)) => Err(RunError { program: prog.section.clone(), op, insn, message }),
        }
    }
}

/// The reference interpreter: runs one instruction at `cpu.pc` (its budget check included),
/// returning `Some(r0)` when the program exits. Every fault and every uncommon instruction of
/// the fast loop ([`run`]) comes here, so errors (message and instruction index) are this
/// function's.
fn step(m: &mut Machine, insns: &[Insn], cpu: &mut Cpu) -> Result<Option<u64>, (usize, String)> {
    let Cpu { r, frames, pc, budget } = cpu;
    #[allow(clippy::never_loop)]
    loop {
        let at = *pc;
        let fail = |msg: String| (at, msg);
        if *budget == 0 {
            return Err(fail(format!("instruction budget of {INSN_BUDGET} exhausted (a loop that does not end?)")));
        }
        *budget -= 1;
        // By reference: copying the instruction out costs a store-forwarding stall.
        let x: &Insn = insns.get(*pc).ok_or_else(|| fail("fell off the end of the program".into()))?;
        *pc += 1;
        let d = x.dst as usize;
        let s = (x.src as usize).min(10);
        // The frequent opcodes first, in one dispatch; the rest by class below.
        let imm = x.imm as u64; // sign-extended at decode
        let jump = (at as i64 + 1 + x.off as i64) as usize;
        macro_rules! jmp {
            ($cond:expr) => {{
                if $cond {
                    *pc = jump;
                }
                return Ok(None);
            }};
        }
        macro_rules! w {
            ($v:expr) => {{
                r[d] = ($v) as u32 as u64;
                return Ok(None);
            }};
        }
        match x.code {
            0x07 => {
                r[d] = r[d].wrapping_add(imm);
                return Ok(None);
            }
            0x0f => {
                r[d] = r[d].wrapping_add(r[s]);
                return Ok(None);
            }
            0x17 => {
                r[d] = r[d].wrapping_sub(imm);
                return Ok(None);
            }
            0x1f => {
                r[d] = r[d].wrapping_sub(r[s]);
                return Ok(None);
            }
            0x27 => {
                r[d] = r[d].wrapping_mul(imm);
                return Ok(None);
            }
            0x2f => {
                r[d] = r[d].wrapping_mul(r[s]);
                return Ok(None);
            }
            0x47 => {
                r[d] |= imm;
                return Ok(None);
            }
            0x4f => {
                r[d] |= r[s];
                return Ok(None);
            }
            0x57 => {
                r[d] &= imm;
                return Ok(None);
            }
            0x5f => {
                r[d] &= r[s];
                return Ok(None);
            }
            0x67 => {
                r[d] = r[d].wrapping_shl(imm as u32 & 63);
                return Ok(None);
            }
            0x6f => {
                r[d] = r[d].wrapping_shl(r[s] as u32 & 63);
                return Ok(None);
            }
            0x77 => {
                r[d] = r[d].wrapping_shr(imm as u32 & 63);
                return Ok(None);
            }
            0x7f => {
                r[d] = r[d].wrapping_shr(r[s] as u32 & 63);
                return Ok(None);
            }
            0xa7 => {
                r[d] ^= imm;
                return Ok(None);
            }
            0xaf => {
                r[d] ^= r[s];
                return Ok(None);
            }
            0xb7 if x.off == 0 => {
                r[d] = imm;
                return Ok(None);
            }
            0xbf if x.off == 0 => {
                r[d] = r[s];
                return Ok(None);
            }
            0xc7 => {
                r[d] = ((r[d] as i64) >> (imm & 63)) as u64;
                return Ok(None);
            }
            0x04 => w!((r[d] as u32).wrapping_add(imm as u32)),
            0x0c => w!((r[d] as u32).wrapping_add(r[s] as u32)),
            0x14 => w!((r[d] as u32).wrapping_sub(imm as u32)),
            0x1c => w!((r[d] as u32).wrapping_sub(r[s] as u32)),
            0x54 => w!(r[d] as u32 & imm as u32),
            0x5c => w!(r[d] as u32 & r[s] as u32),
            0x64 => w!((r[d] as u32).wrapping_shl(imm as u32 & 31)),
            0x74 => w!((r[d] as u32).wrapping_shr(imm as u32 & 31)),
            0xb4 if x.off == 0 => w!(imm),
            0xbc if x.off == 0 => w!(r[s]),
            0x61 | 0x69 | 0x71 | 0x79 => {
                r[d] = m.read(r[s].wrapping_add(x.off as i64 as u64), mem_size(x.code)).map_err(fail)?;
                return Ok(None);
            }
            0x63 | 0x6b | 0x73 | 0x7b => {
                m.write(r[d].wrapping_add(x.off as i64 as u64), mem_size(x.code), r[s]).map_err(fail)?;
                return Ok(None);
            }
            0x05 => jmp!(true),
            0x15 => jmp!(r[d] == imm),
            0x1d => jmp!(r[d] == r[s]),
            0x25 => jmp!(r[d] > imm),
            0x2d => jmp!(r[d] > r[s]),
            0x35 => jmp!(r[d] >= imm),
            0x3d => jmp!(r[d] >= r[s]),
            0x45 => jmp!(r[d] & imm != 0),
            0x4d => jmp!(r[d] & r[s] != 0),
            0x55 => jmp!(r[d] != imm),
            0x5d => jmp!(r[d] != r[s]),
            0x65 => jmp!(r[d] as i64 > imm as i64),
            0x6d => jmp!(r[d] as i64 > r[s] as i64),
            0x75 => jmp!(r[d] as i64 >= imm as i64),
            0x7d => jmp!(r[d] as i64 >= r[s] as i64),
            0xa5 => jmp!(r[d] < imm),
            0xad => jmp!(r[d] < r[s]),
            0xb5 => jmp!(r[d] <= imm),
            0xbd => jmp!(r[d] <= r[s]),
            0xc5 => jmp!((r[d] as i64) < imm as i64),
            0xcd => jmp!((r[d] as i64) < r[s] as i64),
            0xd5 => jmp!(r[d] as i64 <= imm as i64),
            0xdd => jmp!(r[d] as i64 <= r[s] as i64),
            _ => {}
        }
        let class = x.code & 7;
        match class {
            7 => {
                let src = if x.code & 0x08 != 0 { r[s] } else { x.imm as i32 as i64 as u64 };
                r[d] = alu64(x.code & 0xf0, x.off, x.imm, r[d], src);
            }
            4 => {
                let src = if x.code & 0x08 != 0 { r[s] } else { x.imm as i32 as u32 as u64 };
                r[d] = alu32(x.code, x.off, x.imm, r[d], src);
            }
            5 | 6 => {
                let op = x.code & 0xf0;
                match x.code {
                    0x05 => {
                        *pc = (at as i64 + 1 + x.off as i64) as usize;
                        return Ok(None);
                    }
                    0x06 => {
                        *pc = (at as i64 + 1 + x.imm) as usize;
                        return Ok(None);
                    }
                    0x85 => {
                        match x.src {
                            CALL_LOCAL => {
                                if frames.len() + 1 >= MAX_FRAMES {
                                    return Err(fail(format!("call depth above {MAX_FRAMES} frames")));
                                }
                                frames.push(Frame { ret_pc: *pc, saved: [r[6], r[7], r[8], r[9]] });
                                let base = STACK_PER_FRAME * frames.len();
                                m.stack_top = base + STACK_PER_FRAME;
                                m.mem.stack[base..m.stack_top].fill(0);
                                r[10] = addr(R_STACK, m.stack_top as u64);
                                *pc = x.imm as usize;
                            }
                            _ => {
                                r[0] = call_kernel(m, x.src, x.imm, [r[1], r[2], r[3], r[4], r[5]]).map_err(fail)?;
                            }
                        }
                        if x.src != CALL_LOCAL {
                            // r1-r5 are clobbered by a call; make that visible as the kernel's
                            // verifier would (it refuses reading them).
                            for reg in &mut r[1..=5] {
                                *reg = 0;
                            }
                        }
                        return Ok(None);
                    }
                    0x95 => match frames.pop() {
                        None => return Ok(Some(r[0])),
                        Some(f) => {
                            [r[6], r[7], r[8], r[9]] = f.saved;
                            m.stack_top = STACK_PER_FRAME * (frames.len() + 1);
                            r[10] = addr(R_STACK, m.stack_top as u64);
                            *pc = f.ret_pc;
                            return Ok(None);
                        }
                    },
                    _ => {}
                }
                let (a, b) = if x.code & 0x08 != 0 { (r[d], r[s]) } else { (r[d], x.imm as i32 as i64 as u64) };
                let (a, b) = if class == 6 { (a as u32 as u64, b as u32 as u64) } else { (a, b) };
                let (sa, sb) = if class == 6 { (a as u32 as i32 as i64, b as u32 as i32 as i64) } else { (a as i64, b as i64) };
                let taken = match op {
                    0x10 => a == b,
                    0x20 => a > b,
                    0x30 => a >= b,
                    0x40 => a & b != 0,
                    0x50 => a != b,
                    0x60 => sa > sb,
                    0x70 => sa >= sb,
                    0xa0 => a < b,
                    0xb0 => a <= b,
                    0xc0 => sa < sb,
                    0xd0 => sa <= sb,
                    _ => return Err(fail(format!("bad jump opcode 0x{:02x}", x.code))),
                };
                if taken {
                    *pc = (at as i64 + 1 + x.off as i64) as usize;
                }
            }
            0 => {
                // ld_imm64: the value (a constant, map handle or data address) was set at load.
                r[d] = x.imm as u64;
                *pc += 1;
            }
            1 => {
                let n = mem_size(x.code);
                let a = r[s].wrapping_add(x.off as i64 as u64);
                let v = m.read(a, n).map_err(fail)?;
                r[d] = if x.code & 0xe0 == 0x80 {
                    match n {
                        1 => v as u8 as i8 as i64 as u64,
                        2 => v as u16 as i16 as i64 as u64,
                        _ => v as u32 as i32 as i64 as u64,
                    }
                } else {
                    v
                };
            }
            2 => {
                let n = mem_size(x.code);
                let a = r[d].wrapping_add(x.off as i64 as u64);
                m.write(a, n, x.imm as u64).map_err(fail)?;
            }
            3 => {
                let n = mem_size(x.code);
                let a = r[d].wrapping_add(x.off as i64 as u64);
                if x.code & 0xe0 == 0x60 {
                    m.write(a, n, r[s]).map_err(fail)?;
                } else {
                    atomic(m, r, *x, a, n).map_err(fail)?;
                }
            }
            _ => return Err(fail(format!("bad opcode 0x{:02x}", x.code))),
        }
            return Ok(None);
    }
}

/// A helper call (`src` [`CALL_HELPER`], `imm` its id) or a kfunc call (`imm` the kfunc's
/// index): its r0. The one way every runner (interpreter, fast loop, native code) calls out.
pub(crate) fn call_kernel(m: &mut Machine, src: u8, imm: i64, args: [u64; 5]) -> Result<u64, String> {
    if src == CALL_HELPER {
        return kernel::helper(m, imm, args);
    }
    let k = Kfunc::from_index(imm).ok_or_else(|| String::from("unknown kfunc"))?;
    kernel::kfunc(m, k, args)
}

/// The state of a run: registers (r0-r10; 16 slots so that a 4-bit register number indexes
/// without a bounds check), the bpf-to-bpf call frames, the next instruction and the budget.
pub(crate) struct Cpu {
    pub r: [u64; 16],
    frames: Vec<Frame>,
    pub pc: usize,
    pub budget: u64,
}

impl Cpu {
    pub(crate) fn new(entry: usize) -> Cpu {
        let mut r = [0u64; 16];
        r[1] = addr(R_CTX, 0);
        r[10] = addr(R_STACK, STACK_PER_FRAME as u64);
        Cpu { r, frames: Vec::new(), pc: entry, budget: INSN_BUDGET }
    }
}

fn atomic(m: &mut Machine, r: &mut [u64; 16], x: Insn, a: u64, n: usize) -> Result<(), String> {
    let s = x.src as usize;
    let mask = if n == 4 { 0xffff_ffff } else { u64::MAX };
    let old = m.read(a, n)?;
    let val = r[s] & mask;
    let new = match x.imm & !1 {
        0x00 => old.wrapping_add(val),
        0x40 => old | val,
        0x50 => old & val,
        0xa0 => old ^ val,
        0xe0 => val,
        0xf0 => {
            // cmpxchg: compare with r0, old value into r0
            let expected = r[0] & mask;
            let new = if old == expected { val } else { old };
            m.write(a, n, new)?;
            r[0] = old;
            return Ok(());
        }
        _ => return Err(format!("unsupported atomic operation 0x{:x}", x.imm)),
    };
    m.write(a, n, new & mask)?;
    if x.imm & 1 != 0 {
        r[s] = old;
    }
    Ok(())
}

fn alu64(op: u8, off: i16, imm: i64, dst: u64, src: u64) -> u64 {
    match op {
        0x00 => dst.wrapping_add(src),
        0x10 => dst.wrapping_sub(src),
        0x20 => dst.wrapping_mul(src),
        0x30 => {
            if src == 0 {
                0
            } else if off == 1 {
                (dst as i64).wrapping_div(src as i64) as u64
            } else {
                dst / src
            }
        }
        0x40 => dst | src,
        0x50 => dst & src,
        0x60 => dst.wrapping_shl(src as u32 & 63),
        0x70 => dst.wrapping_shr(src as u32 & 63),
        0x80 => (dst as i64).wrapping_neg() as u64,
        0x90 => {
            if src == 0 {
                dst
            } else if off == 1 {
                (dst as i64).wrapping_rem(src as i64) as u64
            } else {
                dst % src
            }
        }
        0xa0 => dst ^ src,
        0xb0 => match off {
            8 => src as u8 as i8 as i64 as u64,
            16 => src as u16 as i16 as i64 as u64,
            32 => src as u32 as i32 as i64 as u64,
            _ => src,
        },
        0xc0 => ((dst as i64) >> (src & 63)) as u64,
        0xd0 => match imm {
            16 => (dst as u16).swap_bytes() as u64,
            32 => (dst as u32).swap_bytes() as u64,
            _ => dst.swap_bytes(),
        },
        _ => dst,
    }
}

fn alu32(code: u8, off: i16, imm: i64, dst: u64, src: u64) -> u64 {
    let d = dst as u32;
    let s = src as u32;
    let v: u32 = match code & 0xf0 {
        0x00 => d.wrapping_add(s),
        0x10 => d.wrapping_sub(s),
        0x20 => d.wrapping_mul(s),
        0x30 => {
            if s == 0 {
                0
            } else if off == 1 {
                (d as i32).wrapping_div(s as i32) as u32
            } else {
                d / s
            }
        }
        0x40 => d | s,
        0x50 => d & s,
        0x60 => d.wrapping_shl(s & 31),
        0x70 => d.wrapping_shr(s & 31),
        0x80 => (d as i32).wrapping_neg() as u32,
        0x90 => {
            if s == 0 {
                d
            } else if off == 1 {
                (d as i32).wrapping_rem(s as i32) as u32
            } else {
                d % s
            }
        }
        0xa0 => d ^ s,
        0xb0 => match off {
            8 => s as u8 as i8 as i32 as u32,
            16 => s as u16 as i16 as i32 as u32,
            _ => s,
        },
        0xc0 => ((d as i32) >> (s & 31)) as u32,
        0xd0 => {
            // BPF_END: to little-endian (src bit clear) truncates on a little-endian machine,
            // to big-endian swaps.
            let to_be = code & 0x08 != 0;
            return match (imm, to_be) {
                (16, false) => dst as u16 as u64,
                (32, false) => dst as u32 as u64,
                (_, false) => dst,
                (16, true) => (dst as u16).swap_bytes() as u64,
                (32, true) => (dst as u32).swap_bytes() as u64,
                (_, true) => dst.swap_bytes(),
            };
        }
        _ => d,
    };
    v as u64
}

#[cfg(test)]
mod difftest;

/// Instruction semantics the project's objects (built for ISA v1) do not reach: ISA v4's
/// signed division, sign-extending moves and loads, byte swaps, long jumps, and the atomics.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::{Object, Shared};
    use crate::view::to_bytes;
    use std::sync::Mutex;

    fn object() -> Object {
        Object::for_tests(Mutex::new(Shared { data: Vec::new(), maps: Vec::new() }))
    }

    fn i(code: u8, dst: u8, src: u8, off: i16, imm: i64) -> Insn {
        Insn { code, dst, src, off, imm }
    }
    const EXIT: Insn = Insn { code: 0x95, dst: 0, src: 0, off: 0, imm: 0 };

    /// Runs `insns` (validated first) and returns r0.
    fn exec(insns: &[Insn]) -> Result<u64, (usize, String)> {
        validate(insns, "test").map_err(|e| (0, e.0))?;
        let object = object();
        let mut shared = object.shared.lock().unwrap();
        let mut env = Env::default();
        let mut mem = Mem { ctx: vec![0; 8], sock: to_bytes(&TcpSock::default()), stack: vec![0; STACK_PER_FRAME * MAX_FRAMES], ..Mem::default() };
        let mut m = Machine { object: &object, mem: &mut mem, stack_top: STACK_PER_FRAME, shared: &mut shared, env: &mut env };
        run(&mut m, insns, &compile(insns, 0, &[], &[], CtxLayout::default()), 0, &mut [0; 256])
    }

    fn r0_after(setup: &[Insn]) -> u64 {
        let mut v = setup.to_vec();
        v.push(EXIT);
        exec(&v).unwrap()
    }

    // r0 = imm (ALU64 mov, sign-extended), r1 = imm
    fn mov(dst: u8, imm: i64) -> Insn {
        i(0xb7, dst, 0, 0, imm)
    }

    #[test]
    fn division_and_modulo() {
        // unsigned 64: 7 / 0 = 0, 7 % 0 = 7
        assert_eq!(r0_after(&[mov(0, 7), mov(1, 0), i(0x3f, 0, 1, 0, 0)]), 0);
        assert_eq!(r0_after(&[mov(0, 7), mov(1, 0), i(0x9f, 0, 1, 0, 0)]), 7);
        // 32-bit modulo by zero keeps the low half, zero-extended
        assert_eq!(r0_after(&[mov(0, -1), mov(1, 0), i(0x9c, 0, 1, 0, 0)]), 0xffff_ffff);
        assert_eq!(r0_after(&[mov(0, -1), mov(1, 0), i(0x3c, 0, 1, 0, 0)]), 0);
        // signed (off = 1): -7 / 2 = -3, -7 % 2 = -1; MIN / -1 wraps, MIN % -1 = 0
        assert_eq!(r0_after(&[mov(0, -7), i(0x37, 0, 0, 1, 2)]) as i64, -3);
        assert_eq!(r0_after(&[mov(0, -7), i(0x97, 0, 0, 1, 2)]) as i64, -1);
        let min = [mov(0, 1), i(0x67, 0, 0, 0, 63)];
        assert_eq!(r0_after(&[&min[..], &[i(0x37, 0, 0, 1, -1)]].concat()), 1 << 63);
        assert_eq!(r0_after(&[&min[..], &[i(0x97, 0, 0, 1, -1)]].concat()), 0);
        // unsigned division sees -7 as a large number
        assert_eq!(r0_after(&[mov(0, -7), i(0x37, 0, 0, 0, 2)]), (-7i64 as u64) / 2);
    }

    #[test]
    fn alu32_zero_extends_and_shifts_mask() {
        assert_eq!(r0_after(&[mov(0, -1), i(0x04, 0, 0, 0, 1)]), 0); // w0 += 1 wraps to 0
        assert_eq!(r0_after(&[mov(0, -8), i(0xc4, 0, 0, 0, 1)]), 0xffff_fffc); // w0 s>>= 1
        assert_eq!(r0_after(&[mov(0, 1), mov(1, 65), i(0x6f, 0, 1, 0, 0)]), 2); // shift by 65 & 63
        assert_eq!(r0_after(&[mov(0, 5), i(0x87, 0, 0, 0, 0)]) as i64, -5); // neg
    }

    #[test]
    fn sign_extension_and_byte_swaps() {
        // movsx r0 = (s8) r1
        assert_eq!(r0_after(&[mov(1, 0x80), i(0xbf, 0, 1, 8, 0)]) as i64, -128);
        assert_eq!(r0_after(&[mov(1, 0x8000), i(0xbf, 0, 1, 16, 0)]) as i64, -32768);
        // memsx: store 0xff on the stack, load it sign-extended
        assert_eq!(r0_after(&[mov(1, 0xff), i(0x73, 10, 1, -8, 0), i(0x91, 0, 10, -8, 0)]) as i64, -1);
        // bswap16/32/64 and to-big-endian
        assert_eq!(r0_after(&[mov(0, 0x1234), i(0xd7, 0, 0, 0, 16)]), 0x3412);
        assert_eq!(r0_after(&[mov(0, 0x1234_5678), i(0xdc, 0, 0, 0, 32)]), 0x7856_3412);
        assert_eq!(r0_after(&[mov(0, 0x1234_5678), i(0xd4, 0, 0, 0, 16)]), 0x5678); // to-le 16 truncates
    }

    #[test]
    fn jumps() {
        // gotol +1 skips r0 = 1
        assert_eq!(r0_after(&[mov(0, 2), i(0x06, 0, 0, 0, 1), mov(0, 1)]), 2);
        // JMP32: w1 (0x1_0000_0000 -> 0) == 0
        let hi = [mov(1, 1), i(0x67, 1, 0, 0, 32)];
        assert_eq!(r0_after(&[&hi[..], &[mov(0, 0), i(0x16, 1, 0, 1, 0), mov(0, 9)]].concat()), 0);
        // signed compare: -1 s< 0
        assert_eq!(r0_after(&[mov(1, -1), mov(0, 0), i(0xc5, 1, 0, 1, 0), mov(0, 9)]), 0);
        // unsigned: -1 > 0
        assert_eq!(r0_after(&[mov(1, -1), mov(0, 0), i(0x25, 1, 0, 1, 0), mov(0, 9)]), 0);
    }

    #[test]
    fn atomics_on_the_stack() {
        let put = |v: i64| [mov(1, v), i(0x7b, 10, 1, -8, 0)];
        // fetch-add returns the old value in src
        let mut p = put(5).to_vec();
        p.extend([mov(2, 3), i(0xdb, 10, 2, -8, 0x01), i(0xbf, 0, 2, 0, 0)]);
        assert_eq!(r0_after(&p), 5);
        p.extend([i(0x79, 0, 10, -8, 0)]);
        assert_eq!(r0_after(&p), 8);
        // cmpxchg: r0 = expected; swaps only when equal; r0 = old
        let mut c = put(5).to_vec();
        c.extend([mov(0, 5), mov(2, 9), i(0xdb, 10, 2, -8, 0xf1), i(0x79, 0, 10, -8, 0)]);
        assert_eq!(r0_after(&c), 9);
        let mut c = put(5).to_vec();
        c.extend([mov(0, 4), mov(2, 9), i(0xdb, 10, 2, -8, 0xf1)]);
        assert_eq!(r0_after(&c), 5);
        // xchg
        let mut x = put(5).to_vec();
        x.extend([mov(2, 7), i(0xdb, 10, 2, -8, 0xe1), i(0x79, 0, 10, -8, 0), i(0x0f, 0, 2, 0, 0)]);
        assert_eq!(r0_after(&x), 12);
        // 32-bit or
        let mut o = put(1).to_vec();
        o.extend([mov(2, 6), i(0xc3, 10, 2, -8, 0x40), i(0x61, 0, 10, -8, 0)]);
        assert_eq!(r0_after(&o), 7);
    }

    #[test]
    fn memory_faults_and_read_only_regions() {
        // stack: below the frame's 512 bytes is another frame's (allowed); beyond the top is not
        let e = exec(&[mov(1, 1), i(0x7b, 10, 1, 0, 0), EXIT]).unwrap_err();
        assert!(e.1.contains("out of bounds") && e.0 == 1, "{e:?}");
        // NULL
        let e = exec(&[mov(1, 0), i(0x79, 0, 1, 0, 0), EXIT]).unwrap_err();
        assert!(e.1.contains("no memory"), "{e:?}");
        // the context is read-only
        let e = exec(&[mov(2, 1), i(0x7b, 1, 2, 0, 0), EXIT]).unwrap_err();
        assert!(e.1.contains("read-only"), "{e:?}");
        // the socket outside writable fields (sk_max_pacing_rate at 8)
        let e = exec(&[i(0x18, 1, 0, 0, sock_addr() as i64), Insn::filler(), mov(2, 1), i(0x7b, 1, 2, 8, 0), EXIT]).unwrap_err();
        assert!(e.1.contains("may write") && e.0 == 3, "{e:?}");
        // an access that starts inside and ends outside a region
        let size = TcpSock::SIZE as i16;
        let e = exec(&[i(0x18, 1, 0, 0, sock_addr() as i64), Insn::filler(), i(0x79, 0, 1, size - 4, 0), EXIT]).unwrap_err();
        assert!(e.1.contains("out of bounds"), "{e:?}");
    }

    #[test]
    fn validation_refuses_bad_programs() {
        assert!(validate(&[i(0x05, 0, 0, 5, 0), EXIT], "t").is_err(), "jump out of the program");
        assert!(validate(&[i(0x18, 0, 0, 0, 0), Insn::filler(), i(0x05, 0, 0, -2, 0), EXIT], "t").is_err(), "jump into ld_imm64");
        assert!(validate(&[mov(10, 1), EXIT], "t").is_err(), "write to r10");
        assert!(validate(&[i(0xff, 0, 0, 0, 0), EXIT], "t").is_err(), "unknown opcode");
        assert!(validate(&[i(0x85, 0, CALL_LOCAL, 0, 9), EXIT], "t").is_err(), "call target");
        assert!(validate(&[Insn::filler(), EXIT], "t").is_err(), "lone filler");
    }
}
