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
#[derive(Clone, Copy, Debug, PartialEq)]
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
    /// Socket-local storage values, one per map of the object (None: not created).
    pub(crate) sk_storage: Vec<Option<Vec<u8>>>,
    /// Buffers of the last call, kept to spare allocations.
    scratch: Scratch,
    /// Each program pre-decoded for the fast loop ([`compile`]).
    code: Vec<Vec<Fast>>,
    /// The stand-in for the object's shared state when its programs cannot change it.
    unshared: Option<Shared>,
}

#[derive(Debug, Default)]
struct Scratch {
    ctx: Vec<u8>,
    sock: Vec<u8>,
    ack: Vec<u8>,
    rs: Vec<u8>,
    stack: Vec<u8>,
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
    pub ctx: Vec<u8>,
    pub sock: Vec<u8>,
    pub ack: Vec<u8>,
    pub rs: Vec<u8>,
    pub stack: Vec<u8>,
    /// End of the current frame's 512 bytes: the stack below it (this frame and its callers')
    /// is accessible, the frames of returned callees above it are not.
    pub stack_top: usize,
    pub shared: &'a mut Shared,
    pub sk_storage: &'a mut Vec<Option<Vec<u8>>>,
    pub env: &'a mut Env,
}

impl<'a> Machine<'a> {
    /// The bytes `[a, a + len)`, readable.
    pub fn slice(&self, a: u64, len: usize) -> Result<&[u8], String> {
        let region = (a >> 32) as u32;
        let off = (a & 0xffff_ffff) as usize;
        let buf: &[u8] = match region {
            R_CTX => &self.ctx,
            R_SOCK => &self.sock,
            R_ACK => &self.ack,
            R_RS => &self.rs,
            R_STACK => &self.stack[..self.stack_top],
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
            r if (R_SK_STORAGE..R_SK_STORAGE + 0x1000).contains(&r) => match self.sk_storage.get((r - R_SK_STORAGE) as usize) {
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
                &mut self.sock
            }
            R_STACK => {
                let top = self.stack_top;
                return self.stack.get_mut(off..off + len).filter(|_| off + len <= top).ok_or_else(|| {
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
            r if (R_SK_STORAGE..R_SK_STORAGE + 0x1000).contains(&r) => match self.sk_storage.get_mut((r - R_SK_STORAGE) as usize) {
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
        let code = object.programs.iter().map(|p| compile(&p.insns, &object.data)).collect();
        // Without array or hash maps and writable data, the shared state is never touched: a
        // copy of its (empty) shape stands in for it and no call takes the lock.
        let lock_free = object.maps.iter().all(|m| m.kind != MAP_TYPE_ARRAY && m.kind != MAP_TYPE_HASH) && object.data.iter().all(|d| !d.writable);
        let unshared = lock_free.then(|| Shared {
            data: object.data.iter().map(|_| Vec::new()).collect(),
            maps: object.maps.iter().map(|_| MapStore::SkStorage).collect(),
        });
        Instance { object, sock: Box::default(), sk_storage: vec![None; n], scratch: Scratch::default(), code, unshared }
    }

    pub fn object(&self) -> &Arc<Object> {
        &self.object
    }

    /// This socket's value in socket-local storage map `map` (None: no such map, or no value
    /// created yet).
    pub fn sk_storage(&self, map: &str) -> Option<&[u8]> {
        let i = self.object.maps.iter().position(|m| m.name == map)?;
        self.sk_storage.get(i)?.as_deref()
    }

    /// Runs `op`'s program with the socket as first argument and `args` after it (u64 each,
    /// as the BPF_PROG context array). `pkts_acked` gets `ack` and `cong_control` gets `rs` as
    /// their pointer argument, after `args` (so `cong_control` takes `args = [ack, flag]`); a
    /// missing sample is passed as NULL. Returns r0; an op the object lacks returns Ok(None).
    pub fn call(&mut self, op: Op, args: &[u64], ack: Option<&AckSample>, rs: Option<&RateSample>, env: &mut Env) -> Result<Option<u64>, RunError> {
        let object = Arc::clone(&self.object);
        let Some(pi) = object.ops[op.index()] else { return Ok(None) };
        let prog = &object.programs[pi];
        let mut scratch = std::mem::take(&mut self.scratch);
        let ctx = &mut scratch.ctx;
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
        let mut guard = match self.unshared {
            Some(_) => None,
            None => Some(match object.shared.lock() {
                Ok(g) => g,
                Err(poisoned) => poisoned.into_inner(),
            }),
        };
        let shared: &mut Shared = match (&mut guard, &mut self.unshared) {
            (Some(g), _) => g,
            (None, Some(u)) => u,
            (None, None) => return Err(RunError { program: prog.section.clone(), op, insn: prog.entry, message: "no shared state".into() }),
        };
        // Kernel bit fields (read-only) go where the object's BTF puts them within their byte.
        let mut sock = std::mem::take(&mut scratch.sock);
        fill_view(&mut sock, Some(&*self.sock));
        for b in &object.bitfields {
            let mask = ((1u16 << b.width) - 1) as u8;
            sock[b.offset] = (sock[b.offset] & mask) << b.shift;
        }
        fill_view(&mut scratch.ack, ack);
        fill_view(&mut scratch.rs, rs);
        // Each frame's 512 bytes are zeroed when the frame starts.
        scratch.stack.resize(STACK_PER_FRAME * MAX_FRAMES, 0);
        scratch.stack[..STACK_PER_FRAME].fill(0);
        let mut m = Machine {
            object: &object,
            ctx: std::mem::take(&mut scratch.ctx),
            sock,
            ack: std::mem::take(&mut scratch.ack),
            rs: std::mem::take(&mut scratch.rs),
            stack: std::mem::take(&mut scratch.stack),
            stack_top: STACK_PER_FRAME,
            shared,
            sk_storage: &mut self.sk_storage,
            env,
        };
        let code = self.code.get(pi).map_or(&[][..], |c| &c[..]);
        let result = run(&mut m, &prog.insns, code, prog.entry);
        let sock_bytes = std::mem::take(&mut m.sock);
        scratch.ctx = std::mem::take(&mut m.ctx);
        scratch.ack = std::mem::take(&mut m.ack);
        scratch.rs = std::mem::take(&mut m.rs);
        scratch.stack = std::mem::take(&mut m.stack);
        drop(m);
        drop(guard);
        // Stores before a failure stay visible, as they would in the kernel. Only the writable
        // fields can have changed (the bit-field bytes, read-only, need no restoring).
        crate::view::offsets::load_writable(&mut self.sock, &sock_bytes);
        scratch.sock = sock_bytes;
        self.scratch = scratch;
        match result {
            Ok(r0) => Ok(Some(r0)),
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
                                m.stack[base..m.stack_top].fill(0);
                                r[10] = addr(R_STACK, m.stack_top as u64);
                                *pc = x.imm as usize;
                            }
                            CALL_HELPER => {
                                r[0] = kernel::helper(m, x.imm, [r[1], r[2], r[3], r[4], r[5]]).map_err(fail)?;
                            }
                            _ => {
                                let k = Kfunc::from_index(x.imm).ok_or_else(|| fail("unknown kfunc".into()))?;
                                r[0] = kernel::kfunc(m, k, [r[1], r[2], r[3], r[4], r[5]]).map_err(fail)?;
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

/// The operations of the fast loop: the frequent instructions with their operands decoded
/// (immediates sign-extended, jump targets absolute), loads and stores through `r10`
/// specialised to the stack, and a few fused sequences. Anything else is [`K::Step`], run by
/// the reference interpreter [`step`].
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
    Ldx1, Ldx2, Ldx4, Ldx8, Stx1, Stx2, Stx4, Stx8, St1, St2, St4, St8,
    LdxS1, LdxS2, LdxS4, LdxS8, StxS1, StxS2, StxS4, StxS8, StS1, StS2, StS4, StS8,
    Exit,
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

/// One pre-decoded instruction (16 bytes). For jumps `off` is the absolute target.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Fast {
    k: K,
    d: u8,
    s: u8,
    off: i32,
    imm: u64,
}

/// The most instructions one fast op stands for: the fast loop leaves the last few of the
/// budget to [`step`], so that running out of budget is reported at the same instruction.
const MAX_WEIGHT: u64 = 4;

/// Pre-decodes a program (already validated) for [`run`]. Slot `i` of the result stands for
/// instruction `i`; a fused op at `i` leaves the instructions it covers in place after it, so a
/// jump into the middle of a fused sequence runs them one by one.
pub(crate) fn compile(insns: &[Insn], data: &[DataSection]) -> Vec<Fast> {
    let mut out: Vec<Fast> = insns.iter().enumerate().map(|(i, x)| decode(i, x)).collect();
    for i in 0..insns.len() {
        let x = &insns[i];
        let at = |j: usize| insns.get(i + j);
        let is = |j: usize, code: u8, dst: u8, imm: i64| at(j).is_some_and(|y| y.code == code && y.dst == dst && y.imm == imm && y.off == 0);
        let fast = |k: K, _weight: u8, imm: u64| Fast { k, d: x.dst, s: x.src, off: 0, imm };
        // rd = rs (64-bit mov); rd <<= 32; rd >>= 32 / s>>= 32
        if x.code == 0xbf && x.off == 0 && is(1, 0x67, x.dst, 32) {
            if is(2, 0x77, x.dst, 32) {
                out[i] = fast(K::MovZext, 3, 0);
                continue;
            }
            if is(2, 0xc7, x.dst, 32) {
                out[i] = fast(K::MovSext, 3, 0);
                continue;
            }
        }
        if x.code == 0x67 && x.imm == 32 && x.off == 0 {
            if is(1, 0x77, x.dst, 32) {
                out[i] = fast(K::Zext, 2, 0);
                continue;
            }
            if is(1, 0xc7, x.dst, 32) {
                out[i] = fast(K::Sext, 2, 0);
                continue;
            }
        }
        // rd = imm; if rX > rd goto (jump targets of the pair are the jump's own)
        if x.code == 0xb7 && x.off == 0 {
            if let Some(y) = at(1).filter(|y| matches!(y.code, 0x2d | 0x6d) && y.src == x.dst && y.dst <= 10) {
                let k = if y.code == 0x2d { K::MovIJgt } else { K::MovIJsgt };
                out[i] = Fast { k, d: x.dst, s: y.dst, off: (i as i64 + 2 + y.off as i64) as i32, imm: x.imm as u64 };
                continue;
            }
        }
        // rd = *(u32 *)(rs + off); if rd ==/!= c goto
        if x.code == 0x61 && x.src != 10 {
            if let Some(y) = at(1).filter(|y| matches!(y.code, 0x15 | 0x55) && y.dst == x.dst) {
                let k = if y.code == 0x15 { K::Ldx4Jeq } else { K::Ldx4Jne };
                let target = (i as i64 + 2 + y.off as i64) as u32 as u64;
                out[i] = Fast { k, d: x.dst, s: x.src, off: x.off as i32, imm: target << 32 | y.imm as u32 as u64 };
                continue;
            }
        }
        // rd = address in a read-only data section; rd = *(size *)(rd + off)
        if x.code == 0x18 {
            if let (Some(y), Some(v)) = (at(2), const_load(x, insns.get(i + 2), data)) {
                if y.dst == x.dst {
                    out[i] = fast(K::LdConst, 2, v);
                }
            }
        }
    }
    out
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

fn decode(i: usize, x: &Insn) -> Fast {
    use K::*;
    let imm = x.imm as u64;
    let target = (i as i64 + 1 + x.off as i64) as i32;
    let mut f = Fast { k: Step, d: x.dst, s: x.src, off: x.off as i32, imm };
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
        0x71 if x.src == 10 => LdxS1, 0x69 if x.src == 10 => LdxS2, 0x61 if x.src == 10 => LdxS4, 0x79 if x.src == 10 => LdxS8,
        0x73 if x.dst == 10 => StxS1, 0x6b if x.dst == 10 => StxS2, 0x63 if x.dst == 10 => StxS4, 0x7b if x.dst == 10 => StxS8,
        0x72 if x.dst == 10 => StS1, 0x6a if x.dst == 10 => StS2, 0x62 if x.dst == 10 => StS4, 0x7a if x.dst == 10 => StS8,
        0x71 => Ldx1, 0x69 => Ldx2, 0x61 => Ldx4, 0x79 => Ldx8,
        0x73 => Stx1, 0x6b => Stx2, 0x63 => Stx4, 0x7b => Stx8,
        0x72 => St1, 0x6a => St2, 0x62 => St4, 0x7a => St8,
        _ => Step,
    };
    if matches!(x.code & 7, 5) && k != Step && k != Exit {
        f.off = target;
    }
    if x.dst > 10 || x.src > 10 {
        f.k = Step; // only calls may carry other numbers in src; validate refused the rest
        return f;
    }
    f.k = k;
    f
}

/// A readable region the fast loop resolves itself: the call's buffers, read-only data, socket
/// storage. Anything else (maps, writable data) is left to [`step`].
#[inline(always)]
fn fast_buf<'b>(m: &'b Machine, region: u32) -> Option<&'b [u8]> {
    match region {
        R_SOCK => Some(&m.sock),
        R_STACK => m.stack.get(..m.stack_top),
        R_RS => Some(&m.rs),
        R_CTX => Some(&m.ctx),
        R_ACK => Some(&m.ack),
        r if r.wrapping_sub(R_SK_STORAGE) < 0x1000 => m.sk_storage.get((r - R_SK_STORAGE) as usize)?.as_deref(),
        r if r.wrapping_sub(R_DATA) < 0x100 => m.object.data.get((r - R_DATA) as usize).filter(|d| !d.writable).map(|d| &d.initial[..]),
        _ => None,
    }
}

#[inline(always)]
fn fast_load<const N: usize>(m: &Machine, a: u64) -> Option<[u8; N]> {
    let off = (a & 0xffff_ffff) as usize;
    let b = fast_buf(m, (a >> 32) as u32)?.get(off..off + N)?;
    <[u8; N]>::try_from(b).ok()
}

/// A writable region the fast loop resolves itself: the stack (this frame and its callers'),
/// the socket's writable fields, socket storage.
#[inline(always)]
fn fast_store<const N: usize>(m: &mut Machine, a: u64, v: [u8; N]) -> Option<()> {
    let off = (a & 0xffff_ffff) as usize;
    let end = off + N;
    let dst = match (a >> 32) as u32 {
        R_STACK if end <= m.stack_top => m.stack.get_mut(off..end)?,
        R_SOCK if m.object.writable.iter().any(|(_, s, e)| off >= *s && end <= *e) => m.sock.get_mut(off..end)?,
        r if r.wrapping_sub(R_SK_STORAGE) < 0x1000 => m.sk_storage.get_mut((r - R_SK_STORAGE) as usize)?.as_deref_mut()?.get_mut(off..end)?,
        _ => return None,
    };
    dst.copy_from_slice(&v);
    Some(())
}

/// The stack bytes at `r10 + off` (`r10` is the top of the current frame), readable up to the
/// top of the current frame.
#[inline(always)]
fn stack_range(m: &Machine, off: i32, n: usize) -> Option<std::ops::Range<usize>> {
    let o = m.stack_top.checked_add_signed(off as isize)?;
    let end = o + n;
    (end <= m.stack_top).then_some(o..end)
}

/// Runs a program from `entry` to its exit: the fast loop over `code` (from [`compile`]),
/// which hands every instruction it does not handle itself, and every access it cannot
/// resolve, to the reference interpreter [`step`] (which then reports any fault).
pub(crate) fn run(m: &mut Machine, insns: &[Insn], code: &[Fast], entry: usize) -> Result<u64, (usize, String)> {
    let mut cpu = Cpu::new(entry);
    loop {
        if let Some(r0) = run_fast(m, insns, code, &mut cpu)? {
            return Ok(r0);
        }
    }
}

/// Runs a program from `entry` with `budget` instructions, through the fast loop over `code`
/// or, when `code` is None, through the reference interpreter [`step`] alone (for the
/// differential tests, which hold the fast loop to the reference).
#[cfg(test)]
pub(crate) fn run_with(m: &mut Machine, insns: &[Insn], code: Option<&[Fast]>, entry: usize, budget: u64) -> Result<u64, (usize, String)> {
    let mut cpu = Cpu::new(entry);
    cpu.budget = budget;
    loop {
        let done = match code {
            Some(code) => run_fast(m, insns, code, &mut cpu)?,
            None => step(m, insns, &mut cpu)?,
        };
        if let Some(r0) = done {
            return Ok(r0);
        }
    }
}

/// The fast loop; returns to [`run`] after each [`step`].
fn run_fast(m: &mut Machine, insns: &[Insn], code: &[Fast], cpu: &mut Cpu) -> Result<Option<u64>, (usize, String)> {
    let mut pc = cpu.pc;
    let mut budget = cpu.budget;
    let mut r = cpu.r;
    macro_rules! step {
        () => {{
            cpu.r = r;
            cpu.pc = pc;
            cpu.budget = budget;
            return step(m, insns, cpu);
        }};
    }
    loop {
        if budget <= MAX_WEIGHT {
            step!();
        }
        let Some(x) = code.get(pc) else { step!() };
        let d = (x.d & 15) as usize;
        let s = (x.s & 15) as usize;
        let imm = x.imm;
        macro_rules! next {
            ($e:expr) => {{
                $e;
                pc += 1;
                budget -= 1;
                continue;
            }};
        }
        macro_rules! w {
            ($v:expr) => {
                next!(r[d] = ($v) as u32 as u64)
            };
        }
        macro_rules! jmp {
            ($c:expr) => {{
                budget -= 1;
                pc = if $c { x.off as usize } else { pc + 1 };
                continue;
            }};
        }
        macro_rules! ldx {
            ($n:literal, $t:ty) => {{
                match fast_load::<$n>(m, r[s].wrapping_add(x.off as i64 as u64)) {
                    Some(b) => next!(r[d] = <$t>::from_le_bytes(b) as u64),
                    None => step!(),
                }
            }};
        }
        macro_rules! stx {
            ($n:literal, $t:ty, $v:expr) => {{
                match fast_store::<$n>(m, r[d].wrapping_add(x.off as i64 as u64), ($v as $t).to_le_bytes()) {
                    Some(()) => next!(()),
                    None => step!(),
                }
            }};
        }
        macro_rules! ldxs {
            ($n:literal, $t:ty) => {{
                match stack_range(m, x.off, $n).and_then(|rg| m.stack.get(rg)).and_then(|b| <[u8; $n]>::try_from(b).ok()) {
                    Some(b) => next!(r[d] = <$t>::from_le_bytes(b) as u64),
                    None => step!(),
                }
            }};
        }
        macro_rules! stxs {
            ($n:literal, $t:ty, $v:expr) => {{
                match stack_range(m, x.off, $n).and_then(|rg| m.stack.get_mut(rg)) {
                    Some(b) => next!(b.copy_from_slice(&($v as $t).to_le_bytes())),
                    None => step!(),
                }
            }};
        }
        match x.k {
            K::Step => step!(),
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
            K::Ja => jmp!(true),
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
                pc += 2;
                budget -= 1;
            }
            K::Ldx1 => ldx!(1, u8),
            K::Ldx2 => ldx!(2, u16),
            K::Ldx4 => ldx!(4, u32),
            K::Ldx8 => ldx!(8, u64),
            K::Stx1 => stx!(1, u8, r[s]),
            K::Stx2 => stx!(2, u16, r[s]),
            K::Stx4 => stx!(4, u32, r[s]),
            K::Stx8 => stx!(8, u64, r[s]),
            K::St1 => stx!(1, u8, imm),
            K::St2 => stx!(2, u16, imm),
            K::St4 => stx!(4, u32, imm),
            K::St8 => stx!(8, u64, imm),
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
                if cpu.frames.is_empty() {
                    cpu.budget = budget - 1;
                    return Ok(Some(r[0]));
                }
                step!()
            }
            K::Zext => {
                r[d] = r[d] as u32 as u64;
                pc += 2;
                budget -= 2;
            }
            K::Sext => {
                r[d] = r[d] as u32 as i32 as i64 as u64;
                pc += 2;
                budget -= 2;
            }
            K::MovZext => {
                r[d] = r[s] as u32 as u64;
                pc += 3;
                budget -= 3;
            }
            K::MovSext => {
                r[d] = r[s] as u32 as i32 as i64 as u64;
                pc += 3;
                budget -= 3;
            }
            K::LdConst => {
                r[d] = imm;
                pc += 3;
                budget -= 2;
            }
            K::MovIJgt | K::MovIJsgt => {
                r[d] = imm;
                budget -= 2;
                let taken = if x.k == K::MovIJgt { r[s] > imm } else { r[s] as i64 > imm as i64 };
                pc = if taken { x.off as usize } else { pc + 2 };
            }
            K::Ldx4Jeq | K::Ldx4Jne => match fast_load::<4>(m, r[s].wrapping_add(x.off as i64 as u64)) {
                Some(b) => {
                    let v = u32::from_le_bytes(b) as u64;
                    r[d] = v;
                    budget -= 2;
                    let c = imm as u32 as i32 as i64 as u64;
                    let taken = (v == c) == (x.k == K::Ldx4Jeq);
                    pc = if taken { (imm >> 32) as usize } else { pc + 2 };
                }
                None => step!(),
            },
        }
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
        let mut sk = Vec::new();
        let mut env = Env::default();
        let mut m = Machine {
            object: &object,
            ctx: vec![0; 8],
            sock: to_bytes(&TcpSock::default()),
            ack: Vec::new(),
            rs: Vec::new(),
            stack: vec![0; STACK_PER_FRAME * MAX_FRAMES],
            stack_top: STACK_PER_FRAME,
            shared: &mut shared,
            sk_storage: &mut sk,
            env: &mut env,
        };
        run(&mut m, insns, &compile(insns, &[]), 0)
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
