//! Loader and safe interpreter for BPF `struct_ops` congestion controls: the very
//! `tcp_congestion_ops` object files (`clang -target bpf`) that Linux loads, run inside the
//! simulator.
//!
//! # What is followed
//! The semantics are those of Linux **6.18**:
//! - **Writable socket fields** are those of `net/ipv4/bpf_tcp_ca.c`
//!   (`bpf_tcp_ca_btf_struct_access`): `sk_pacing_rate`, `sk_pacing_status`, `icsk_ca_priv`,
//!   `icsk_ack.pending`, `snd_cwnd`, `snd_cwnd_cnt`, `snd_ssthresh`, `ecn_flags`,
//!   `app_limited`. A store whose CO-RE relocation targets any other field is refused at load
//!   ([`LoadError`] naming the field); at run time every store into the socket view outside
//!   those byte ranges is a [`RunError`] (this catches stores through computed pointers, which
//!   carry no relocation). `ack_sample`, `rate_sample`, the context array and `.rodata` are
//!   read-only, as in the kernel.
//! - **kfuncs** `tcp_reno_ssthresh`, `tcp_reno_cong_avoid`, `tcp_reno_undo_cwnd`,
//!   `tcp_slow_start`, `tcp_cong_avoid_ai` follow `net/ipv4/tcp_cong.c` (including
//!   `tcp_is_cwnd_limited` / `tcp_in_slow_start` in `tcp_reno_cong_avoid`). They are resolved
//!   at load by the name of the object's extern symbol (the object file's calls carry a
//!   relocation against it; the kernel would use the BTF id, which names the same function).
//! - **Helpers** (by id): `bpf_map_lookup_elem` (1), `bpf_map_update_elem` (2),
//!   `bpf_map_delete_elem` (3) on array and hash maps, `bpf_ktime_get_ns` (5),
//!   `bpf_get_prandom_u32` (7), `bpf_setsockopt` (49), `bpf_getsockopt` (57),
//!   `bpf_sk_storage_get` (107), `bpf_sk_storage_delete` (108), `bpf_tcp_send_ack` (116),
//!   `bpf_jiffies64` (118), `bpf_ktime_get_coarse_ns` (160). Any other id is refused at load.
//! - **Socket options** follow `net/core/filter.c` (`sol_tcp_sockopt_congestion`) for
//!   `SOL_TCP` `TCP_CONGESTION` only: get gives the object's `.name` (NUL-terminated in
//!   `optlen - 1` bytes, the rest zeroed); set to its own name is 0 and changes nothing, `"cdg"`
//!   is `-ENOTSUPP`, `optlen` < 2 is `-EINVAL`. Switching to another algorithm, and every other
//!   level or option, is a [`RunError`] naming it (the option is a run-time value). As
//!   `bpf_tcp_ca_get_func_proto`, a `release` program that can reach either helper is refused
//!   at load.
//! - **Objects**: several programs may share one section (`SEC("struct_ops")`, as the kernel's
//!   selftests do; each is named `section:function`); of several `tcp_congestion_ops` in one
//!   object, [`Object::load_selected`] takes one by name, and [`Object::load`] the only one
//!   with a non-empty `.name` (the kernel refuses to register a nameless one). As
//!   `tcp_validate_congestion_control` (`net/ipv4/tcp_cong.c`), the selected ops must provide
//!   `ssthresh`, `undo_cwnd`, and `cong_avoid` or `cong_control`; a [`LoadError`] names what
//!   is missing (the other ops of the object are not checked).
//! - **Division** follows the kernel (which wins over any other reading of the ISA): division
//!   by zero yields 0, modulo by zero leaves the destination unchanged (the 32-bit forms then
//!   zero-extend the 32-bit destination, as the verifier's rewrite does); signed division of
//!   the minimum by -1 wraps. Shift amounts are masked to the operand width, as the kernel's
//!   interpreter does.
//! - **CO-RE** field relocations (byte offset, byte size, existence, signedness, bit-field
//!   shifts) and type existence/size relocations are resolved by name, as libbpf does, against
//!   a target BTF built from this crate's own `#[repr(C)]` view structs ([`view`]): one macro
//!   declares each struct and its BTF description, with offsets from `offset_of!`. A program
//!   reading a field the view lacks is refused at load, naming the type and the field.
//!
//! # Deviations from the kernel
//! - The socket view holds only the fields congestion controls read (see [`TcpSock`]), at its
//!   own offsets (CO-RE moves every access there). The kernel's bit fields `icsk_ca_state` and
//!   `is_cwnd_limited` are whole bytes of the view; when a program reads one, the loader notes
//!   the bit position the object's BTF gives it and the byte is presented to the program with
//!   the value at that position, because clang hard-codes the shift and mask of a direct
//!   bit-field read (only `BPF_CORE_READ_BITFIELD` is relocated).
//! - There is no verifier: instead every memory access is checked at run time (first and last
//!   byte inside one region handed to the call), every call has an instruction budget
//!   ([`INSN_BUDGET`]) and a frame depth limit (8, the kernel's `MAX_CALL_FRAMES`). A program
//!   the kernel's verifier would refuse may therefore load here and fail only when it runs.
//! - The stack is one region of 8 × 512 bytes; a frame's `r10` points at the top of its own
//!   512 bytes, and a frame can reach its own and its callers' frames (the kernel allows the
//!   latter only through pointers passed as arguments), never above its own top. The stack is
//!   zeroed at the start of each call (the kernel's is uninitialised, and its verifier refuses
//!   reads of unwritten slots).
//! - `__kconfig` externs are `CONFIG_*` and `LINUX_KERNEL_VERSION` only, with values the caller
//!   gives ([`Object::load_with_kconfig`]; [`DEFAULT_KCONFIG`] otherwise).
//! - Ring buffers, other externs and the built-in controls' own kfuncs (`cubictcp_*`,
//!   `bbr_*`, `dctcp_*`) are not implemented: objects using them are refused at load, naming
//!   the helper or symbol. Socket options other than `TCP_CONGESTION` fail when called (above).
//! - Maps are per [`Object`] (shared by its instances behind a mutex, held for a whole call);
//!   socket-local storage is per [`Instance`]. Hash maps keep at most 2^20 entries.
//! - `bpf_get_prandom_u32` is deterministic: [`Env::prandom`] is the generator's state, advanced
//!   on every call (no OS randomness), and there is no wall clock: time is [`Env::now_ns`] and
//!   [`Env::jiffies`].
//!
//! - `Object::load` takes a ready object: set `const volatile` parameters first with
//!   [`patch_rodata`] (the kernel's loader, libbpf, does the same before load).
//!
//! # Calling convention
//! [`Instance::call`] builds the `BPF_PROG` context array `[sk, args.., sample]`: the socket
//! first, then the scalar `args`, then for `pkts_acked` the `ack_sample` and for
//! `cong_control` the `rate_sample` (so `cong_control` takes `args = [ack, flag]`). The socket
//! view, samples and context are copied in for the call; the socket is copied back after it,
//! also when it fails (stores before a failure stay, as in the kernel). A [`RunError`] names the
//! program's section, the op, and the instruction index (in the program's section, with
//! `.text` subprograms numbered after it).
//!
//! # Cost
//! [`vm`] compiles each program once, at load, for a fast loop (its `fast` module: ops of 16
//! bytes in program order, frequent sequences fused, the budget charged per straight-line run
//! rather than per instruction, loads and stores specialised to the region a data-flow pass
//! expects their base to point into, helper and kfunc calls in the loop) and runs them in one
//! `match` loop; every other instruction, and every access the loop cannot resolve itself,
//! goes to the reference interpreter ([`vm`]'s `step`), which also produces every error, so
//! messages, instruction indices and the budget are those of the plain interpreter. Objects
//! without array/hash maps or writable globals take no lock. The loop's shortcuts rest on what
//! the loader checks: `r10` is never written (no instruction may, an atomic fetch into it
//! included), so stack accesses through it need not read it. A program that is a function of
//! the socket bytes it reads (no call, stores only to its stack, every access at an offset
//! known at load: `bbr.bpf.o`'s `min_tso_segs`) gives its last result again, without running,
//! when the context and those bytes are the same.
//!
//! Native code ([`vm`]'s `jit` module): a program without bpf-to-bpf calls is compiled with
//! Cranelift at its 1,000th call (so that only the programs a trial calls often pay for a
//! compilation), once per process (a cache keyed by everything the compilation reads), into a
//! function that keeps the interpreter's rules: each access through a pointer the data-flow pass
//! expects in a buffer of the call checks that region and bound (the exact address, where the
//! pass knows the offset), the budget is charged by runs, and whatever the code does not do
//! itself goes to the reference interpreter one instruction at a time (atomics, byte swaps, sign
//! extensions, a failed check, where the fault is then reported); helpers and kfuncs are called
//! from the code through one function. The only `unsafe` of the crate is there: calling the
//! generated code, its call back, and releasing its memory. `CCTESTBED_BPF_JIT=0` turns it off.
//!
//! Measured (ccsim-bench, 2-CPU AMD EPYC; whole-process CPU and wall, median of paired runs):
//! 4 `bpf:bbr` flows, 80 Mb/s, 25 ms, 60 s, 2 BDP: 0.205 s against 0.108 s for the Rust `bbr`,
//! 1.91x (15 pairs); 0.5 BDP: 0.258 against 0.155 s, 1.67x (11 pairs). In the interpreter alone
//! the same take 2.6x and 2.2x. Counted with callgrind at 2 BDP: 2.12 G host instructions
//! against 1.27 G for the Rust `bbr` (the interpreter alone: 3.10 G): the generated code about
//! 2,000 a call of the main program (the interpreter about 8,300, 25 a fused op), its compilation
//! 139 M (about 15 ms, once), the calls of helpers through the call back 69 M, the adapter's and
//! the call's own work (filling the socket view, the memoised `min_tso_segs`) the rest. The
//! registers and the budget live in the call's frame in memory: keeping them in SSA values gave
//! slower code (register pressure) and twice the compilation time.
//!
//! The interpreter: the 2x asked of it alone was not reached: it needs half the host
//! instructions per BPF instruction without the loop's code growing (it is read into the
//! instruction cache again at each call, the simulator's code having evicted it). Tried and
//! dropped there: handlers chained by tail calls (LLVM compiles them as jumps in a release
//! build), which cost as much per op as the `match`; superinstructions for the frequent
//! sequences of two and three ops, which cut the scenario's instructions by 10% but made the loop
//! 28 to 43 KB (11 KB without) and tripled its instruction-cache misses in the simulator.
//!
//! # Tests
//! `cargo test -p cctestbed-bpf --release`. Tests of the project's objects need
//! `target/bpf/{reno,bbr}.bpf.o` (`make bpf`); those of small programs under `tests/progs`
//! compile them with clang against `target/bpf/vmlinux.h` and libbpf's headers. Each skips,
//! printing why, when what it needs is absent. A differential property test (`vm::difftest`,
//! 10,000 random well-formed programs a run: every ALU32/ALU64 operation, loads, stores and
//! atomics in and out of bounds of the stack, socket view, context, rate sample, storage and
//! data, JMP and JMP32 jumps forward and backward, helper, kfunc and bpf-to-bpf calls, the
//! fused sequences, small budgets) holds the fast loop to the reference interpreter alone: same
//! r0 or same error (instruction and message), same stack, socket view, data and environment;
//! a second one (2,000 programs a run) holds the native code, with what it hands back, to the
//! same reference.
//!
//! # Why not `rbpf`
//! rbpf 0.4.1 has no instruction budget (a loop in a program hangs the simulator), checks only
//! the start address of extra memory regions, and its helpers are context-free `fn(u64, ..)`,
//! which cannot reach per-socket storage or the simulated clock. The interpreter in [`vm`] decodes
//! instructions once at load and checks every access.
//!
//! # ELF and BTF
//! Sections, symbols and relocations are read with the `object` crate's ELF reader. `aya-obj`
//! would also parse BTF and struct_ops, but 0.6 needs a newer rustc than the project's and 0.3
//! has no struct_ops; no other kept crate parses BTF and `.BTF.ext` CO-RE records, so those
//! (the private `btf` module) stay hand-written, every read bounds-checked.
//!
//! # Using it
//! ```no_run
//! use std::sync::Arc;
//! use ccbpf::{Env, Object, Op, TcpSock};
//! let obj = Arc::new(Object::load(&std::fs::read("target/bpf/reno.bpf.o").unwrap()).unwrap());
//! let mut flow = obj.instance();
//! *flow.sock = TcpSock::initial(1448);
//! let mut env = Env { now_ns: 0, jiffies: 0, prandom: 1, send_ack: false };
//! let ssthresh = flow.call(Op::Ssthresh, &[], None, None, &mut env).unwrap();
//! ```

#![deny(unsafe_code)]

mod btf;
mod core_relo;
mod elf;
mod kernel;
mod load;
pub mod view;
pub mod vm;

pub use load::{patch_rodata, rodata_variables, Object, RodataVar, DEFAULT_KCONFIG};
pub use view::{AckSample, IcskAck, InetConnectionSock, InetSock, Minmax, MinmaxSample, RateSample, Sock, TcpSock};
pub use vm::{Instance, INSN_BUDGET};

use std::fmt;

/// The operations of `struct tcp_congestion_ops` a program can fill.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    Init,
    Release,
    Ssthresh,
    CongAvoid,
    SetState,
    CwndEvent,
    InAckEvent,
    PktsAcked,
    MinTsoSegs,
    CongControl,
    UndoCwnd,
    SndbufExpand,
}

impl Op {
    pub const ALL: [Op; 12] = [
        Op::Init,
        Op::Release,
        Op::Ssthresh,
        Op::CongAvoid,
        Op::SetState,
        Op::CwndEvent,
        Op::InAckEvent,
        Op::PktsAcked,
        Op::MinTsoSegs,
        Op::CongControl,
        Op::UndoCwnd,
        Op::SndbufExpand,
    ];

    /// The member name in `struct tcp_congestion_ops`.
    pub fn member_name(self) -> &'static str {
        match self {
            Op::Init => "init",
            Op::Release => "release",
            Op::Ssthresh => "ssthresh",
            Op::CongAvoid => "cong_avoid",
            Op::SetState => "set_state",
            Op::CwndEvent => "cwnd_event",
            Op::InAckEvent => "in_ack_event",
            Op::PktsAcked => "pkts_acked",
            Op::MinTsoSegs => "min_tso_segs",
            Op::CongControl => "cong_control",
            Op::UndoCwnd => "undo_cwnd",
            Op::SndbufExpand => "sndbuf_expand",
        }
    }

    pub fn from_member_name(name: &str) -> Option<Op> {
        Op::ALL.into_iter().find(|op| op.member_name() == name)
    }

    pub(crate) fn index(self) -> usize {
        Op::ALL.iter().position(|&o| o == self).unwrap_or(0)
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.member_name())
    }
}

/// Why an object was refused at load.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadError(pub String);

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BPF object refused: {}", self.0)
    }
}

impl std::error::Error for LoadError {}

/// A program that failed while running: which program (its section name), in which op, at
/// which instruction (index within the program, counting `ld_imm64` as two), and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunError {
    pub program: String,
    pub op: Op,
    pub insn: usize,
    pub message: String,
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BPF program {} ({}) failed at instruction {}: {}", self.program, self.op, self.insn, self.message)
    }
}

impl std::error::Error for RunError {}

/// The simulated world a call sees.
#[derive(Clone, Debug, Default)]
pub struct Env {
    /// `bpf_ktime_get_ns` and `bpf_ktime_get_coarse_ns`.
    pub now_ns: u64,
    /// `bpf_jiffies64`.
    pub jiffies: u64,
    /// State of the deterministic generator behind `bpf_get_prandom_u32`; every call of the
    /// helper advances it.
    pub prandom: u32,
    /// Set (never cleared) when the program calls `bpf_tcp_send_ack`.
    pub send_ack: bool,
}

impl Env {
    /// The next `bpf_get_prandom_u32` value: a Weyl sequence mixed by murmur3's finaliser.
    pub fn next_prandom(&mut self) -> u32 {
        self.prandom = self.prandom.wrapping_add(0x9e37_79b9);
        let mut x = self.prandom;
        x ^= x >> 16;
        x = x.wrapping_mul(0x85eb_ca6b);
        x ^= x >> 13;
        x = x.wrapping_mul(0xc2b2_ae35);
        x ^ (x >> 16)
    }
}
