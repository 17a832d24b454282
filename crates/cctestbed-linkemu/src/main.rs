//! # cctestbed-linkemu: the userspace link emulator
//!
//! Joins two interfaces of the router namespace like a bridge and applies the simulator's own
//! link model on the way. Two modes:
//!
//! - **the whole link** (`--model TRIAL.json`, the backend's `--link-emulator full`): the
//!   emulator is the bottleneck, running the simulator's [`ccsim::link::Bottleneck`] and queue
//!   disciplines on the real frames, CE marks written into their IP headers, per-flow
//!   `extra_delay` on their own lines; see [`model`] and [`frame`]. No qdisc on the way.
//! - **delay lines** (the rest of this page): [`ccsim::link::DelayLine`] for the propagation
//!   delay in each direction and [`ccsim::link::LossModel`] (drawn from the same [`ccsim::rng`]
//!   stream as the simulator's bottleneck, `stream::LINK_LOSS`) for random loss on the forward
//!   (data) path, with the bottleneck left to the kernel's `htb` on `right`. It is used where
//!   the kernel has no `netem`.
//!
//! ```text
//!   senders ── left ═[ delay_fwd, then loss ]═▶ right ──(bottleneck qdisc)──▶ receivers
//!   senders ◀─ left ◀═[ delay_rev ]═══════════ right ◀──────────────────────── receivers
//! ```
//!
//! Frames are read with raw `AF_PACKET` sockets (one per interface, outgoing frames ignored)
//! and written back with the same sockets, so frames sent to `right` pass through its qdisc
//! (the bottleneck: rate and drop-tail queue). Each frame's arrival time is the kernel's
//! receive timestamp (`SO_TIMESTAMPNS`), so wake-up latency does not add to the delay; the
//! process runs under `SCHED_FIFO` with its memory locked where allowed and sleeps in
//! `ppoll` with a nanosecond timeout until the next frame is due.
//!
//! Random loss applies to IPv4 frames when they leave the forward delay line, i.e. just
//! before the bottleneck queue, as in the simulator (loss before the queue, netem-style).
//!
//! The bottleneck qdisc (HTB) releases a packet as soon as it may start sending it, and the
//! veth delivers it at once, so a receiver would get each packet one transmission time earlier
//! than from a real link, which delivers its last bit at the end of that time. With
//! `--serialization-bps` (the trial's capacity) each forward frame enters the delay line its
//! own transmission time at that rate late (its IP bytes, as the simulator counts them), so it
//! reaches the receiver when it would over a real link; for frames of one size that is a
//! constant shift, and the queue sees the same arrivals, one transmission time later. Where
//! sizes mix, a frame whose own shift would put it before the frame ahead of it (a 52-byte ACK
//! that follows a 1500-byte datagram by less than their difference, 1.2 ms at 10 Mbit/s) keeps
//! its real gap behind that frame instead ([`Shifter`]): held right behind it, it would reach
//! the queue just after it, into the room the datagram had just taken. So within a stream of
//! mixed sizes the queue sees the real arrivals, shifted by the larger frames' time, and a frame
//! on its own gets its own time. The rate is the bottleneck's current one: the backend writes
//! each scheduled capacity into the stats file's `SerializationBps` slot as it changes the
//! qdisc's rate, and frames read after that are shifted by the new rate. A trial with a
//! reverse bottleneck (`link.reverse`: the same HTB and fifo on `left`'s egress, at a fixed
//! rate) gives its rate as `--serialization-rev-bps`, and reverse frames are shifted the same
//! way.
//!
//! Counters are kept in a small memory-mapped file (`--stats`, little-endian `u64` slots,
//! see [`Slot`]) that the router sampler reads every sample interval; at exit a JSON report
//! (`--report`) gives the counters and the distribution of the emulator's timing error: for
//! every forwarded frame, when it was actually sent minus when it was due (kernel receive
//! time + delay).
//!
//! With `--model` the stats file also carries each direction's bottleneck ([`ModelSlot`]:
//! queue, departures, drops and marks by cause, sojourn) and the report a `model` section.
//!
//! Usage: `cctestbed-linkemu --left IF --right IF --delay-fwd-ns N --delay-rev-ns N
//! [--loss JSON] [--seed S] [--stats FILE] [--report FILE] [--rt-priority P] [--serialization-bps R]
//! [--serialization-rev-bps R]`, or `cctestbed-linkemu --left IF --right IF --model TRIAL.json
//! [--port-base P] [--stats FILE] [--report FILE] [--rt-priority P]` (the trial's simulator config,
//! `Trial.to_core()`; `--port-base`, 20000 by default, is flow 0's own port).
//! SIGINT/SIGTERM end it cleanly.

mod frame;
mod model;
mod ring;
mod tap;

use ccsim::config::{LossConfig, SimConfig};
use ccsim::link::{DelayLine, DropCause, LossModel, MarkCause};
use ccsim::rng::{stream, SimRng};
use ccsim::time::Nanos;
use std::ffi::CString;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use model::{FrameStore, Path};

const ETH_P_ALL: u16 = 0x0003;
const ETH_P_IP: u16 = 0x0800;
const PACKET_OUTGOING: u8 = 4;
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
const PACKET_STATISTICS: libc::c_int = 6;
const SO_TIMESTAMPNS: libc::c_int = 35;
const FRAME_MAX: usize = 65536;
const MAGIC: u64 = 0x6363_7465_6d75_0001;

/// Slots of the stats file, each a little-endian u64.
#[derive(Clone, Copy)]
#[repr(usize)]
enum Slot {
    Magic = 0,
    /// Frames read from the left interface (towards the receivers), and their bytes.
    FwdRxPkts,
    FwdRxBytes,
    /// IPv4 packets leaving the forward delay line (arriving at the bottleneck), IP bytes.
    FwdArrivalPkts,
    FwdArrivalBytes,
    /// Of those, dropped by random loss (packets, IP bytes).
    FwdLossPkts,
    FwdLossBytes,
    /// Frames written to the right interface, and frames its qdisc refused (ENOBUFS).
    FwdTxPkts,
    FwdTxRefused,
    RevRxPkts,
    RevRxBytes,
    RevTxPkts,
    RevTxRefused,
    /// Frames the kernel dropped before the emulator read them (socket buffer full).
    SockDrops,
    /// Frames on the delay lines now.
    Queued,
    /// Largest timing error so far, ns.
    LateMaxNs,
    /// CLOCK_MONOTONIC of the last update, ns.
    UpdatedNs,
    /// Frames sent more than 1 ms after they were due.
    LateOver1ms,
    /// The forward bottleneck's rate, bit/s, that forward frames are shifted by: set from
    /// `--serialization-bps` at start and rewritten by the backend when it changes the
    /// bottleneck's rate (a capacity schedule); read before every batch of frames. With
    /// `--model` it is the model's bottleneck rate itself, changed the same way.
    SerializationBps,
    Count,
}

/// With `--model`, each direction's bottleneck: a block of slots after [`Slot::Count`], the
/// forward block first ([`MODEL_FWD`], [`MODEL_REV`]). Counters are cumulative, the queue and
/// the rate are the current ones; `SojournMaxNs` is the largest sojourn since the router
/// sampler last read it and set it to 0.
#[derive(Clone, Copy)]
#[repr(usize)]
enum ModelSlot {
    ArrivalPkts = 0,
    ArrivalBytes,
    QueuePkts,
    QueueBytes,
    DeparturePkts,
    DepartedBytes,
    DepartedPayloadBytes,
    DropsOverflow,
    DropsRandom,
    DropsPolicer,
    DropsAqm,
    MarksAqm,
    MarksThreshold,
    SojournSumNs,
    SojournCount,
    SojournMaxNs,
    /// CE marks written into frames' IP headers.
    CeWritten,
    /// The bottleneck's rate now, bit/s (0: no bottleneck on this path).
    RateBps,
    Count,
}

const MODEL_FWD: usize = Slot::Count as usize;
const MODEL_REV: usize = MODEL_FWD + ModelSlot::Count as usize;
/// With `--model`, the trial's time 0 (CLOCK_MONOTONIC ns), written once by the backend when it
/// fixes the start (0 until then): the model runs on trial time, as the simulator does, so a
/// delay schedule, a trace and the queue disciplines' timers line up with the simulator's.
/// After the model blocks, so the slots before it keep their places.
const EPOCH_SLOT: usize = MODEL_REV + ModelSlot::Count as usize;
const SLOTS: usize = EPOCH_SLOT + 1;

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

fn clock_ns(clock: libc::clockid_t) -> i64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

fn mono() -> Nanos {
    clock_ns(libc::CLOCK_MONOTONIC)
}

fn err<T>(what: &str) -> Result<T, String> {
    Err(format!("{what}: {}", io::Error::last_os_error()))
}

/// Time to transmit a frame's IP packet (the frame less its 14-byte Ethernet header) at
/// `rate_bps`; 0 without a rate.
fn transmission_ns(frame_len: usize, rate_bps: u64) -> Nanos {
    if rate_bps == 0 {
        return 0;
    }
    (frame_len.saturating_sub(14) as u128 * 8 * 1_000_000_000 / rate_bps as u128) as Nanos
}

/// When each frame of one direction enters its delay line: its arrival plus its transmission
/// time at the bottleneck rate, unless that would put it before the frame ahead of it; then
/// it keeps its real gap behind that frame (module docs).
struct Shifter {
    rate_bps: u64,
    /// The previous frame's arrival and entry times.
    last: Option<(Nanos, Nanos)>,
}

impl Shifter {
    fn new(rate_bps: u64) -> Self {
        Shifter { rate_bps, last: None }
    }

    fn enter(&mut self, at: Nanos, frame_len: usize) -> Nanos {
        let own = at + transmission_ns(frame_len, self.rate_bps);
        let enter = match self.last {
            Some((prev_at, prev_enter)) if own < prev_enter => prev_enter + (at - prev_at).max(0),
            _ => own,
        };
        self.last = Some((at, enter));
        enter
    }
}

struct Args {
    left: String,
    right: String,
    delay_fwd: Nanos,
    delay_rev: Nanos,
    loss: LossConfig,
    seed: u64,
    stats: Option<String>,
    report: Option<String>,
    rt_priority: i32,
    /// Bottleneck rate whose transmission time each forward frame is delayed by (0: none).
    serialization_bps: u64,
    /// The same for reverse frames: the reverse bottleneck's rate (0: none, an unconstrained
    /// reverse path).
    serialization_rev_bps: u64,
    /// `--model FILE`: the trial's simulator config (JSON); the emulator is the whole link.
    model: Option<SimConfig>,
    /// The port of flow 0's own end (`--model`): flow i binds `port_base + i`.
    port_base: u16,
    /// `--tx-slack-us`: the full emulator's batching slack ([`batching`]); None: by rate.
    tx_slack_ns: Option<Nanos>,
    /// `--cpu N`: run on that CPU only (the backend steers the switches' receive processing to
    /// the others, so the frames the emulator sends are carried on by them).
    cpu: Option<usize>,
    /// `--capture-dir DIR`: write the router's capture points the model's `capture` asks for
    /// (`rtr-in`, `rtr-out`) there ([`tap`]).
    capture_dir: Option<String>,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        left: String::new(),
        right: String::new(),
        delay_fwd: 0,
        delay_rev: 0,
        loss: LossConfig::None,
        seed: 1,
        stats: None,
        report: None,
        rt_priority: 50,
        serialization_bps: 0,
        serialization_rev_bps: 0,
        model: None,
        port_base: 20000,
        tx_slack_ns: None,
        cpu: None,
        capture_dir: None,
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < argv.len() {
        let key = argv[i].as_str();
        if key == "-h" || key == "--help" {
            println!(
                "usage: cctestbed-linkemu --left IF --right IF --delay-fwd-ns N --delay-rev-ns N \
                 [--loss JSON] [--seed S] [--stats FILE] [--report FILE] [--rt-priority P (0: none)] \
                 [--serialization-bps RATE] [--serialization-rev-bps RATE]\n       \
                 cctestbed-linkemu --left IF --right IF --model TRIAL.json [--port-base P] [--seed S] [--stats FILE] \
                 [--report FILE] [--rt-priority P] [--serialization-bps RATE] [--tx-slack-us US] [--cpu N] [--capture-dir DIR]"
            );
            std::process::exit(0);
        }
        let val = argv.get(i + 1).ok_or(format!("{key}: missing value"))?.clone();
        let num = |v: &str| v.parse::<i64>().map_err(|e| format!("{key}: {v}: {e}"));
        match key {
            "--left" => a.left = val,
            "--right" => a.right = val,
            "--delay-fwd-ns" => a.delay_fwd = num(&val)?,
            "--delay-rev-ns" => a.delay_rev = num(&val)?,
            "--loss" => a.loss = serde_json::from_str(&val).map_err(|e| format!("--loss: {e}"))?,
            "--seed" => a.seed = val.parse().map_err(|e| format!("--seed: {e}"))?,
            "--stats" => a.stats = Some(val),
            "--report" => a.report = Some(val),
            "--rt-priority" => a.rt_priority = num(&val)? as i32,
            "--serialization-bps" => a.serialization_bps = val.parse().map_err(|e| format!("--serialization-bps: {e}"))?,
            "--serialization-rev-bps" => {
                a.serialization_rev_bps = val.parse().map_err(|e| format!("--serialization-rev-bps: {e}"))?
            }
            "--model" => {
                let text = std::fs::read_to_string(&val).map_err(|e| format!("--model {val}: {e}"))?;
                let cfg: SimConfig = serde_json::from_str(&text).map_err(|e| format!("--model {val}: {e}"))?;
                a.model = Some(cfg);
            }
            "--port-base" => a.port_base = val.parse().map_err(|e| format!("--port-base: {e}"))?,
            "--tx-slack-us" => a.tx_slack_ns = Some(num(&val)?.max(0) * 1000),
            "--cpu" => a.cpu = Some(val.parse().map_err(|e| format!("--cpu: {e}"))?),
            "--capture-dir" => a.capture_dir = Some(val),
            _ => return Err(format!("unknown option {key}")),
        }
        i += 2;
    }
    if a.left.is_empty() || a.right.is_empty() {
        return Err("--left and --right are required".into());
    }
    if a.delay_fwd < 0 || a.delay_rev < 0 {
        return Err("delays must be >= 0".into());
    }
    if let Some(cfg) = a.model.as_ref() {
        // The model's delays and loss are the config's; the rate a schedule changes comes in
        // through the stats file's SerializationBps slot.
        a.delay_fwd = cfg.link.delay_fwd_ns;
        a.delay_rev = cfg.link.delay_rev_ns;
        a.serialization_bps = cfg.link.capacity_bps;
        a.serialization_rev_bps = cfg.link.reverse.as_ref().map_or(0, |r| r.capacity_bps);
        if cfg.link.access_rate_bps.is_some() {
            return Err("--model: link.access_rate is not emulated yet".into());
        }
    }
    Ok(a)
}

/// A raw packet socket bound to one interface.
struct PacketSocket {
    fd: libc::c_int,
    /// The receive ring ([`ring`]), where the kernel allows one; else frames are read with
    /// `recvmsg`.
    rx: Option<ring::RxRing>,
}

impl PacketSocket {
    fn open(ifname: &str) -> Result<Self, String> {
        let proto = (ETH_P_ALL).to_be() as libc::c_int;
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, proto) };
        if fd < 0 {
            return err("socket(AF_PACKET)");
        }
        let mut s = PacketSocket { fd, rx: None };
        let name = CString::new(ifname).map_err(|e| e.to_string())?;
        let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
        if ifindex == 0 {
            return err(&format!("interface {ifname}"));
        }
        s.setopt(libc::SOL_PACKET, PACKET_IGNORE_OUTGOING, 1, "PACKET_IGNORE_OUTGOING").ok();
        s.setopt(libc::SOL_SOCKET, SO_TIMESTAMPNS, 1, "SO_TIMESTAMPNS")?;
        for (opt, force, name) in [
            (libc::SO_RCVBUF, libc::SO_RCVBUFFORCE, "SO_RCVBUF"),
            (libc::SO_SNDBUF, libc::SO_SNDBUFFORCE, "SO_SNDBUF"),
        ] {
            if s.setopt(libc::SOL_SOCKET, force, 64 << 20, name).is_err() {
                s.setopt(libc::SOL_SOCKET, opt, 64 << 20, name)?;
            }
        }
        // 2 KiB slots hold an MTU-sized frame with the ring's headers; 16,384 of them are 0.2 s
        // of 1 Gbit/s.
        match ring::RxRing::new(fd, 2048, 16_384) {
            Ok(r) => s.rx = Some(r),
            Err(e) => eprintln!("linkemu: {ifname}: no receive ring, reading frames one by one: {e}"),
        }
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = ETH_P_ALL.to_be();
        sll.sll_ifindex = ifindex as i32;
        let rc = unsafe {
            libc::bind(fd, &sll as *const _ as *const libc::sockaddr, std::mem::size_of::<libc::sockaddr_ll>() as u32)
        };
        if rc < 0 {
            return err(&format!("bind to {ifname}"));
        }
        Ok(s)
    }

    fn setopt(&self, level: libc::c_int, opt: libc::c_int, v: libc::c_int, name: &str) -> Result<(), String> {
        let rc = unsafe {
            libc::setsockopt(self.fd, level, opt, &v as *const _ as *const libc::c_void, std::mem::size_of::<libc::c_int>() as u32)
        };
        if rc < 0 {
            return err(name);
        }
        Ok(())
    }

    /// Reads one frame into `buf`: Ok(Some((len, kernel realtime ns or 0, outgoing))) or
    /// Ok(None) when nothing is waiting.
    fn recv(&self, buf: &mut [u8]) -> io::Result<Option<(usize, i64, bool)>> {
        if let Some(r) = self.rx.as_ref() {
            return Ok(r.next(|f| {
                let n = f.data.len().min(buf.len());
                buf[..n].copy_from_slice(&f.data[..n]);
                (n, f.ts_realtime_ns, f.pkttype == PACKET_OUTGOING)
            }));
        }
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        let mut iov = libc::iovec { iov_base: buf.as_mut_ptr() as *mut libc::c_void, iov_len: buf.len() };
        let mut cbuf = [0u64; 16];
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_name = &mut sll as *mut _ as *mut libc::c_void;
        msg.msg_namelen = std::mem::size_of::<libc::sockaddr_ll>() as u32;
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = std::mem::size_of_val(&cbuf);
        let n = unsafe { libc::recvmsg(self.fd, &mut msg, libc::MSG_TRUNC) };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(None),
                _ => Err(e),
            };
        }
        let mut ts = 0i64;
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == SO_TIMESTAMPNS {
                    let t = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::timespec);
                    ts = t.tv_sec * 1_000_000_000 + t.tv_nsec;
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        Ok(Some(((n as usize).min(buf.len()), ts, sll.sll_pkttype == PACKET_OUTGOING)))
    }

    /// Sends one frame. Ok(true) sent, Ok(false) refused by the qdisc (dropped), Err(WouldBlock)
    /// when the socket buffer is full (retry later).
    fn send(&self, frame: &[u8]) -> io::Result<bool> {
        let n = unsafe { libc::send(self.fd, frame.as_ptr() as *const libc::c_void, frame.len(), libc::MSG_DONTWAIT) };
        if n >= 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::ENOBUFS) => Ok(false),
            Some(libc::EAGAIN) | Some(libc::ENOMEM) | Some(libc::EINTR) => Err(io::ErrorKind::WouldBlock.into()),
            _ => Err(e),
        }
    }

    /// Frames dropped by the kernel for this socket since the last call.
    fn drops(&self) -> u64 {
        let mut st = [0u32; 2];
        let mut len = std::mem::size_of_val(&st) as u32;
        let rc = unsafe {
            libc::getsockopt(self.fd, libc::SOL_PACKET, PACKET_STATISTICS, st.as_mut_ptr() as *mut libc::c_void, &mut len)
        };
        if rc < 0 {
            0
        } else {
            st[1] as u64
        }
    }
}

impl Drop for PacketSocket {
    fn drop(&mut self) {
        unsafe { libc::close(self.fd) };
    }
}

/// The counters, in a memory-mapped file when `--stats` is given (else in memory).
struct Stats {
    ptr: *mut u64,
    _keep: Option<Vec<u64>>,
}

impl Stats {
    fn new(path: Option<&str>) -> Result<Self, String> {
        let n = SLOTS;
        let Some(path) = path else {
            let mut v = vec![0u64; n];
            return Ok(Stats { ptr: v.as_mut_ptr(), _keep: Some(v) });
        };
        let c = CString::new(path).map_err(|e| e.to_string())?;
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC, 0o644) };
        if fd < 0 {
            return err(&format!("open {path}"));
        }
        let size = (n * 8) as libc::off_t;
        if unsafe { libc::ftruncate(fd, size) } < 0 {
            return err("ftruncate stats");
        }
        let p = unsafe {
            libc::mmap(std::ptr::null_mut(), size as usize, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0)
        };
        unsafe { libc::close(fd) };
        if p == libc::MAP_FAILED {
            return err("mmap stats");
        }
        Ok(Stats { ptr: p as *mut u64, _keep: None })
    }

    fn epoch(&self) -> u64 {
        unsafe { std::ptr::read_volatile(self.ptr.add(EPOCH_SLOT)) }
    }

    fn get(&self, s: Slot) -> u64 {
        unsafe { std::ptr::read_volatile(self.ptr.add(s as usize)) }
    }

    fn set(&self, s: Slot, v: u64) {
        unsafe { std::ptr::write_volatile(self.ptr.add(s as usize), v) }
    }

    fn add(&self, s: Slot, v: u64) {
        self.set(s, self.get(s) + v);
    }

    fn model(&self, block: usize, s: ModelSlot) -> *mut u64 {
        unsafe { self.ptr.add(block + s as usize) }
    }

    fn set_model(&self, block: usize, s: ModelSlot, v: u64) {
        unsafe { std::ptr::write_volatile(self.model(block, s), v) }
    }

    fn get_model(&self, block: usize, s: ModelSlot) -> u64 {
        unsafe { std::ptr::read_volatile(self.model(block, s)) }
    }

    /// Writes a model path's bottleneck into its block.
    /// `now` is the model's time and `window` the sample interval: a trace link's rate is its
    /// mean over the window ending now, as the simulator's router samples give it.
    fn write_path(&self, block: usize, path: &mut Path, now: Nanos, window: Nanos) {
        use ModelSlot as M;
        self.set_model(block, M::CeWritten, path.counters.ce_written);
        let Some(b) = path.bottleneck.as_mut() else { return };
        let st = *b.stats();
        let (qp, qb) = b.queue_len();
        for (slot, v) in [
            (M::ArrivalPkts, st.arrivals_pkts),
            (M::ArrivalBytes, st.arrival_bytes),
            (M::QueuePkts, qp),
            (M::QueueBytes, qb),
            (M::DeparturePkts, st.departures_pkts),
            (M::DepartedBytes, st.departed_bytes),
            (M::DepartedPayloadBytes, st.departed_payload_bytes),
            (M::DropsOverflow, st.drops[DropCause::Overflow]),
            (M::DropsRandom, st.drops[DropCause::Random]),
            (M::DropsPolicer, st.drops[DropCause::Policer]),
            (M::DropsAqm, st.drops[DropCause::Aqm]),
            (M::MarksAqm, st.marks[MarkCause::Aqm]),
            (M::MarksThreshold, st.marks[MarkCause::Threshold]),
            (M::SojournSumNs, b.sojourn.sum_ns.max(0) as u64),
            (M::SojournCount, b.sojourn.count),
            (M::RateBps, b.capacity_bps(now, window)),
        ] {
            self.set_model(block, slot, v);
        }
        let max = b.take_sojourn_max().max(0) as u64;
        if max > self.get_model(block, M::SojournMaxNs) {
            self.set_model(block, M::SojournMaxNs, max);
        }
    }
}

/// Timing error histogram: 1 µs buckets up to 100 ms.
struct Hist {
    buckets: Vec<u64>,
    n: u64,
    max: i64,
    sum: f64,
}

impl Hist {
    fn new() -> Self {
        Hist { buckets: vec![0; 100_001], n: 0, max: 0, sum: 0.0 }
    }
    fn add(&mut self, ns: i64) {
        let us = (ns.max(0) / 1000) as usize;
        let last = self.buckets.len() - 1;
        self.buckets[us.min(last)] += 1;
        self.n += 1;
        self.max = self.max.max(ns);
        self.sum += ns as f64;
    }
    fn quantile_us(&self, q: f64) -> f64 {
        if self.n == 0 {
            return f64::NAN;
        }
        let target = (q * self.n as f64).ceil().max(1.0) as u64;
        let mut acc = 0;
        for (i, &b) in self.buckets.iter().enumerate() {
            acc += b;
            if acc >= target {
                return i as f64 + 1.0; // upper edge of the bucket
            }
        }
        f64::INFINITY
    }
    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "n": self.n,
            "mean_us": if self.n > 0 { self.sum / self.n as f64 / 1e3 } else { f64::NAN },
            "p50_us": self.quantile_us(0.5),
            "p99_us": self.quantile_us(0.99),
            "p999_us": self.quantile_us(0.999),
            "max_us": self.max as f64 / 1e3,
        })
    }
}

/// Frame storage: slots reused through a free list; delay lines carry slot indices.
struct Slab {
    frames: Vec<Vec<u8>>,
    free: Vec<u32>,
}

impl Slab {
    fn put(&mut self, data: &[u8]) -> u32 {
        let i = match self.free.pop() {
            Some(i) => i,
            None => {
                self.frames.push(Vec::with_capacity(2048));
                (self.frames.len() - 1) as u32
            }
        };
        let f = &mut self.frames[i as usize];
        f.clear();
        f.extend_from_slice(data);
        i
    }
    fn release(&mut self, i: u32) {
        self.free.push(i);
    }
    fn in_use(&self) -> usize {
        self.frames.len() - self.free.len()
    }
}

impl FrameStore for Slab {
    fn frame(&mut self, slot: u32) -> &mut Vec<u8> {
        &mut self.frames[slot as usize]
    }
    fn release(&mut self, slot: u32) {
        Slab::release(self, slot)
    }
}

fn is_ipv4(frame: &[u8]) -> bool {
    frame.len() >= 34 && u16::from_be_bytes([frame[12], frame[13]]) == ETH_P_IP
}

/// One direction: the delay line and the frames that wait on it with their due times.
struct Direction {
    line: DelayLine<(u32, Nanos)>,
    /// A frame whose send would have blocked, to retry first.
    retry: Option<(u32, Nanos)>,
    forward: bool,
}

fn set_realtime(prio: i32) -> Result<(), String> {
    if prio <= 0 {
        return Err("disabled".into());
    }
    let p = libc::sched_param { sched_priority: prio };
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) } < 0 {
        return err("sched_setscheduler(SCHED_FIFO)");
    }
    if unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) } < 0 {
        eprintln!("linkemu: mlockall: {}", io::Error::last_os_error());
    }
    Ok(())
}

/// The per-frame timing error of each direction (forward, reverse) and the wake-up latency.
struct Timing {
    hist: [Hist; 2],
    wake: Hist,
    stalls: Stalls,
}

impl Timing {
    fn new() -> Self {
        Timing { hist: [Hist::new(), Hist::new()], wake: Hist::new(), stalls: Stalls::default() }
    }

    /// A frame due at `due` was sent (or refused) just now, in direction `d`.
    fn sent(&mut self, d: usize, due: Nanos, stats: &Stats) {
        let now = mono();
        let late = now - due;
        self.hist[d].add(late);
        if late > stats.get(Slot::LateMaxNs) as i64 {
            stats.set(Slot::LateMaxNs, late as u64);
        }
        if late > STALL_NS {
            stats.add(Slot::LateOver1ms, 1);
            self.stalls.late(d, due, late, now);
        }
    }
}

/// A frame later than this is sent in a stall (and counted in `late_over_1ms`).
const STALL_NS: Nanos = 1_000_000;
/// Stalls kept in the report (the first ones; the count goes on).
const STALLS_KEPT: usize = 1000;

/// When the emulator fell behind: runs of frames sent over [`STALL_NS`] late, one run while
/// each was due before the one before it was sent, give or take [`STALL_NS`]. A stall releases
/// what it held at once (a burst of data into the next hop, a burst of ACKs into the senders),
/// which a path with a buffer of a few milliseconds feels as loss, so the report says when
/// each happened.
#[derive(Default)]
struct Stalls {
    runs: Vec<Stall>,
    count: u64,
    last_sent: Nanos,
}

struct Stall {
    first_due: Nanos,
    max_late: Nanos,
    frames: [u64; 2],
}

impl Stalls {
    fn late(&mut self, d: usize, due: Nanos, late: Nanos, now: Nanos) {
        let continues = self.count > 0 && due <= self.last_sent + STALL_NS;
        self.last_sent = now;
        if !continues {
            self.count += 1;
            if self.runs.len() < STALLS_KEPT {
                self.runs.push(Stall { first_due: due, max_late: 0, frames: [0; 2] });
            }
        }
        if self.runs.len() as u64 == self.count {
            // the run this frame belongs to is one of those kept
            let run = self.runs.last_mut().expect("a run was started");
            run.max_late = run.max_late.max(late);
            run.frames[d] += 1;
        }
    }

    /// The report: each kept stall's start on the trial's clock (`epoch`, CLOCK_MONOTONIC of
    /// the trial's time 0; the emulator's own clock without one), its worst lateness and the
    /// frames it delayed each way.
    fn json(&self, epoch: Option<Nanos>) -> serde_json::Value {
        serde_json::json!({
            "count": self.count,
            "kept": self.runs.iter().map(|r| serde_json::json!({
                "t_s": (r.first_due - epoch.unwrap_or(0)) as f64 / 1e9,
                "max_late_us": r.max_late as f64 / 1e3,
                "frames_fwd": r.frames[0],
                "frames_rev": r.frames[1],
            })).collect::<Vec<_>>(),
        })
    }
}

/// Sleeps until `deadline` (or 20 us while a send is to be retried, or 100 ms with nothing
/// due) or until a frame arrives on either socket.
fn sleep_until(deadline: Option<Nanos>, retrying: bool, left: &PacketSocket, right: &PacketSocket) {
    sleep_batched(deadline, retrying, left, right, true)
}

/// As [`sleep_until`]; with `wake_on_frames` false, arriving frames do not end the sleep (they
/// wait in the receive ring with their kernel timestamps, read at the deadline).
fn sleep_batched(deadline: Option<Nanos>, retrying: bool, left: &PacketSocket, right: &PacketSocket, wake_on_frames: bool) {
    let timeout_ns = if retrying {
        20_000
    } else {
        match deadline {
            Some(t) => (t - mono()).max(0),
            None => 100_000_000,
        }
    };
    let ts = libc::timespec { tv_sec: timeout_ns / 1_000_000_000, tv_nsec: timeout_ns % 1_000_000_000 };
    let mut fds = [
        libc::pollfd { fd: left.fd, events: libc::POLLIN, revents: 0 },
        libc::pollfd { fd: right.fd, events: libc::POLLIN, revents: 0 },
    ];
    if timeout_ns > 0 {
        let n = if wake_on_frames { 2 } else { 0 };
        unsafe { libc::ppoll(fds.as_mut_ptr(), n, &ts, std::ptr::null()) };
    }
}

/// How the full emulator batches its frame I/O at a forward rate of `rate_bps` with the
/// shortest one-way delay `delay_min` a frame can see after it is read: `(slack, read_every)`.
/// Below 250 Mbit/s none (0, 0): the loop wakes when a frame arrives and when the next is due,
/// as before batching. From 250 Mbit/s it wakes `slack` (40 us) after the next frame is due,
/// so the frames due by then leave in one `sendmmsg` (each up to the slack late), and reads the
/// receive ring at least every `read_every` (200 us, or a quarter of the shortest delay if
/// that is less) rather than on every arrival: a frame read late still enters the model at its
/// kernel timestamp, and none can be due before its arrival plus the delay.
fn batching(rate_bps: u64, delay_min: Nanos, slack_override_ns: Option<Nanos>) -> (Nanos, Nanos) {
    let slack = slack_override_ns.unwrap_or(if rate_bps >= 250_000_000 { 40_000 } else { 0 });
    if slack == 0 {
        return (0, 0);
    }
    (slack, (delay_min / 4).clamp(10_000, 200_000))
}

/// The delay-line emulator (no `--model`): delays, random loss and the serialisation shift,
/// with the bottleneck left to the kernel's qdisc on `right` (module docs).
fn delay_loop(a: &Args, stats: &Stats, left: &PacketSocket, right: &PacketSocket, timing: &mut Timing) -> Option<String> {
    let mut buf = vec![0u8; FRAME_MAX];
    let mut loss = LossModel::new(a.loss.clone(), SimRng::new(a.seed, stream::LINK_LOSS));
    let mut slab = Slab { frames: Vec::new(), free: Vec::new() };
    let mut dirs = [
        Direction { line: DelayLine::new(a.delay_fwd, None), retry: None, forward: true },
        Direction { line: DelayLine::new(a.delay_rev, None), retry: None, forward: false },
    ];
    let mut shifters = [Shifter::new(a.serialization_bps), Shifter::new(a.serialization_rev_bps)];
    let mut fatal: Option<String> = None;

    while !STOP.load(Ordering::Relaxed) && fatal.is_none() {
        // 1. Read whatever waits on both interfaces.
        shifters[0].rate_bps = stats.get(Slot::SerializationBps);
        let offset = mono() - clock_ns(libc::CLOCK_REALTIME);
        for (d, sock) in [(0usize, left), (1usize, right)] {
            for _ in 0..512 {
                match sock.recv(&mut buf) {
                    Ok(None) => break,
                    Ok(Some((_, _, true))) => continue,
                    Ok(Some((len, ts, false))) => {
                        let now = mono();
                        let at = if ts > 0 && now - (ts + offset) < 1_000_000_000 { (ts + offset).min(now) } else { now };
                        timing.wake.add(now - at);
                        let frame = &buf[..len];
                        let (rx_p, rx_b) = if d == 0 { (Slot::FwdRxPkts, Slot::FwdRxBytes) } else { (Slot::RevRxPkts, Slot::RevRxBytes) };
                        stats.add(rx_p, 1);
                        stats.add(rx_b, len as u64);
                        let idx = slab.put(frame);
                        // Frames enter the line one transmission time at their bottleneck's
                        // rate late, keeping their gaps where sizes mix (see the module docs).
                        let enter = shifters[d].enter(at, len);
                        let due = enter + if d == 0 { a.delay_fwd } else { a.delay_rev };
                        dirs[d].line.push(enter, (idx, due), len as u32);
                    }
                    Err(e) => {
                        fatal = Some(format!("recv: {e}"));
                        break;
                    }
                }
            }
        }
        // 2. Send what is due.
        let now = mono();
        for (d, dir) in dirs.iter_mut().enumerate() {
            let sock = if dir.forward { right } else { left };
            loop {
                let item = match dir.retry.take() {
                    Some(x) => Some(x),
                    None => dir.line.pop_due(now),
                };
                let Some((idx, due)) = item else { break };
                let frame = &slab.frames[idx as usize];
                if dir.forward && is_ipv4(frame) {
                    let ip_bytes = (frame.len() - 14) as u64;
                    stats.add(Slot::FwdArrivalPkts, 1);
                    stats.add(Slot::FwdArrivalBytes, ip_bytes);
                    if loss.drop_next() {
                        stats.add(Slot::FwdLossPkts, 1);
                        stats.add(Slot::FwdLossBytes, ip_bytes);
                        slab.release(idx);
                        continue;
                    }
                }
                match sock.send(frame) {
                    Ok(sent) => {
                        timing.sent(d, due, stats);
                        let slot = match (dir.forward, sent) {
                            (true, true) => Slot::FwdTxPkts,
                            (true, false) => Slot::FwdTxRefused,
                            (false, true) => Slot::RevTxPkts,
                            (false, false) => Slot::RevTxRefused,
                        };
                        stats.add(slot, 1);
                        slab.release(idx);
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        // Undo the arrival count: the frame is offered again on the retry.
                        if dir.forward && is_ipv4(frame) {
                            stats.set(Slot::FwdArrivalPkts, stats.get(Slot::FwdArrivalPkts) - 1);
                            stats.set(Slot::FwdArrivalBytes, stats.get(Slot::FwdArrivalBytes) - (frame.len() - 14) as u64);
                        }
                        dir.retry = Some((idx, due));
                        break;
                    }
                    Err(e) => {
                        fatal = Some(format!("send: {e}"));
                        break;
                    }
                }
            }
        }
        stats.add(Slot::SockDrops, left.drops() + right.drops());
        stats.set(Slot::Queued, (dirs[0].line.len() + dirs[1].line.len()) as u64);
        stats.set(Slot::UpdatedNs, mono() as u64);

        // 3. Sleep until the next frame is due or one arrives.
        let retrying = dirs.iter().any(|d| d.retry.is_some());
        sleep_until(dirs.iter().filter_map(|d| d.line.head_time()).min(), retrying, left, right);
    }
    fatal
}

/// The whole link as the simulator models it (`--model`, [`model`]): both directions'
/// paths, driven by the frames' receive times; frames leave when the model says they are due.
fn model_loop(
    a: &Args,
    cfg: &SimConfig,
    stats: &Stats,
    left: &PacketSocket,
    right: &PacketSocket,
    timing: &mut Timing,
) -> (Option<String>, serde_json::Value) {
    let flows = model::Flows::from_config(cfg, a.port_base);
    let mut paths = [Path::new(cfg, &flows, true), Path::new(cfg, &flows, false)];
    if let (Some(dir), Some(c)) = (a.capture_dir.as_deref(), cfg.capture.as_ref()) {
        match tap::RouterTap::open(dir, c) {
            Ok(t) => paths[0].tap = t,
            Err(e) => return (Some(e), serde_json::Value::Null),
        }
    }
    let mut slab = Slab { frames: Vec::new(), free: Vec::new() };
    let mut buf = vec![0u8; FRAME_MAX];
    // Frames due and not yet sent (the socket would have blocked), per direction, in order.
    let mut pending: [std::collections::VecDeque<(u32, Nanos)>; 2] = Default::default();
    let mut rate = a.serialization_bps;
    let delay_min = paths.iter().map(Path::min_delay).min().unwrap_or(0);
    // Trial time 0 (EPOCH_SLOT); until the backend writes it, frames pass straight through.
    let mut epoch: Option<Nanos> = None;
    let mut before_epoch = 0u64;
    let (slack, read_every) = batching(rate, delay_min, a.tx_slack_ns);
    let mut drops_read = 0;
    let mut fatal: Option<String> = None;
    let mut slab_max = 0;
    let (rx, tx) = ([(Slot::FwdRxPkts, Slot::FwdRxBytes), (Slot::RevRxPkts, Slot::RevRxBytes)], [(Slot::FwdTxPkts, Slot::FwdTxRefused), (Slot::RevTxPkts, Slot::RevTxRefused)]);
    while !STOP.load(Ordering::Relaxed) && fatal.is_none() {
        if epoch.is_none() {
            epoch = Some(stats.epoch() as Nanos).filter(|&e| e != 0);
            if let (Some(e), Some(tap)) = (epoch, paths[0].tap.as_mut()) {
                tap.epoch_realtime = e - (mono() - clock_ns(libc::CLOCK_REALTIME));
            }
        }
        if let Some(e) = paths[0].tap.as_mut().and_then(|t| t.error.take()) {
            fatal = Some(format!("capture: {e}"));
        }
        // 1. A capacity schedule's new rate, from the backend.
        let r = stats.get(Slot::SerializationBps);
        if let (Some(e), true) = (epoch, r != 0 && r != rate) {
            paths[0].set_rate((mono() - e).max(0), r, &mut slab);
            rate = r;
        }
        // 2. Every waiting frame enters its path at its kernel receive time.
        let offset = mono() - clock_ns(libc::CLOCK_REALTIME);
        for (d, sock) in [(0usize, left), (1usize, right)] {
            for _ in 0..512 {
                match sock.recv(&mut buf) {
                    Ok(None) => break,
                    Ok(Some((_, _, true))) => continue,
                    Ok(Some((len, ts, false))) => {
                        let now = mono();
                        let at = if ts > 0 && now - (ts + offset) < 1_000_000_000 { (ts + offset).min(now) } else { now };
                        timing.wake.add(now - at);
                        stats.add(rx[d].0, 1);
                        stats.add(rx[d].1, len as u64);
                        let slot = slab.put(&buf[..len]);
                        match epoch {
                            Some(e) => paths[d].receive((at - e).max(0), slot, &flows, &mut slab),
                            None => {
                                // Before the trial's start: no trial traffic yet; passed on.
                                before_epoch += 1;
                                pending[d].push_back((slot, at));
                            }
                        }
                    }
                    Err(e) => {
                        fatal = Some(format!("recv: {e}"));
                        break;
                    }
                }
            }
        }
        // 3. Run the model to now and send what is due, one sendmmsg per interface.
        let now = mono();
        for (d, sock) in [(0usize, right), (1usize, left)] {
            if let Some(e) = epoch {
                let path = &mut paths[d];
                let now_m = now - e;
                path.run_until(now_m, &mut slab);
                while let Some(t) = path.line.head_time() {
                    if t > now_m {
                        break;
                    }
                    pending[d].push_back((path.line.pop_due(t).expect("the head is due"), t + e));
                }
            }
            if pending[d].is_empty() {
                continue;
            }
            let batch: Vec<&[u8]> = pending[d].iter().map(|&(slot, _)| slab.frames[slot as usize].as_slice()).collect();
            match ring::send_batch(sock.fd, &batch) {
                Ok(outcomes) => {
                    for sent in outcomes {
                        let (slot, due) = pending[d].pop_front().expect("one outcome per frame");
                        timing.sent(d, due, stats);
                        stats.add(if sent { tx[d].0 } else { tx[d].1 }, 1);
                        slab.release(slot);
                    }
                }
                Err(e) => fatal = Some(format!("send: {e}")),
            }
        }
        // 4. Counters.
        slab_max = slab_max.max(slab.in_use());
        let now_m = epoch.map_or(0, |e| (mono() - e).max(0));
        for (block, path) in [MODEL_FWD, MODEL_REV].into_iter().zip(paths.iter_mut()) {
            stats.write_path(block, path, now_m, cfg.sample_interval_ns);
        }
        if let Some(st) = paths[0].router_stats() {
            stats.set(Slot::FwdArrivalPkts, st.arrivals_pkts);
            stats.set(Slot::FwdArrivalBytes, st.arrival_bytes);
            stats.set(Slot::FwdLossPkts, st.drops[DropCause::Random]);
        }
        let now = mono();
        if now - drops_read >= 10_000_000 {
            // PACKET_STATISTICS is a system call: every 10 ms, not every pass.
            stats.add(Slot::SockDrops, left.drops() + right.drops());
            drops_read = now;
        }
        stats.set(Slot::Queued, (paths[0].held() + paths[1].held()) as u64);
        stats.set(Slot::UpdatedNs, now as u64);
        // 5. Sleep until a frame may be due (plus the batching slack) or, without batching,
        // one arrives; with batching, read the ring again after `read_every` at the latest.
        let next = epoch.and_then(|e| paths.iter().filter_map(|p| p.next_due_bound()).min().map(|t| t + e + slack));
        let retrying = pending.iter().any(|q| !q.is_empty());
        if slack == 0 {
            sleep_until(next, retrying, left, right);
        } else {
            let read_by = now + read_every;
            sleep_batched(Some(next.map_or(read_by, |t| t.min(read_by))), retrying, left, right, false);
        }
    }
    let held: usize = paths.iter().map(|p| p.held()).sum::<usize>() + pending.iter().map(|q| q.len()).sum::<usize>();
    let captured = paths[0].tap.as_ref().map(|t| serde_json::json!({"rtr_in_frames": t.frames[0], "rtr_out_frames": t.frames[1]}));
    if let Some(Err(e)) = paths[0].tap.take().map(tap::RouterTap::finish) {
        fatal.get_or_insert(format!("capture: {e}"));
    }
    let direction = |p: &Path| {
        serde_json::json!({
            "router": p.router_stats().map(|st| serde_json::json!({
                "arrivals_pkts": st.arrivals_pkts,
                "departures_pkts": st.departures_pkts,
                "drops": DropCause::ALL.iter().map(|&c| (c.name().to_string(), st.drops[c].into())).collect::<serde_json::Map<_, _>>(),
                "marks": MarkCause::ALL.iter().map(|&c| (c.name().to_string(), st.marks[c].into())).collect::<serde_json::Map<_, _>>(),
            })),
            "qdisc": p.bottleneck.as_ref().map(|b| b.qdisc_kind()),
            "ce_written": p.counters.ce_written,
            "bypassed": p.counters.bypassed,
        })
    };
    let report = serde_json::json!({
        "forward": direction(&paths[0]),
        "reverse": direction(&paths[1]),
        "port_base": a.port_base,
        "frames_held_at_exit": held,
        "frames_stored_at_exit": slab.in_use(),
        "frames_stored_max": slab_max,
        "frames_before_epoch": before_epoch,
        "capture": captured,
        "epoch_ns": epoch,
        "io": {
            "rx_ring": [left.rx.is_some(), right.rx.is_some()],
            "tx": "sendmmsg",
            "tx_slack_us": slack as f64 / 1e3,
            "read_every_us": read_every as f64 / 1e3,
        },
    });
    (fatal, report)
}

fn run(a: Args) -> Result<(), String> {
    let stats = Stats::new(a.stats.as_deref())?;
    let left = PacketSocket::open(&a.left)?;
    let right = PacketSocket::open(&a.right)?;
    // Frames queued before bind may come from any interface: discard them.
    let mut buf = vec![0u8; FRAME_MAX];
    for s in [&left, &right] {
        while let Ok(Some(_)) = s.recv(&mut buf) {}
        s.drops();
    }
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        sa.sa_flags = 0; // no SA_RESTART: ppoll returns EINTR
        libc::sigaction(libc::SIGTERM, &sa, std::ptr::null_mut());
        libc::sigaction(libc::SIGINT, &sa, std::ptr::null_mut());
    }
    if let Some(cpu) = a.cpu {
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        unsafe { libc::CPU_SET(cpu, &mut set) };
        if unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) } < 0 {
            eprintln!("linkemu: --cpu {cpu}: {}", io::Error::last_os_error());
        }
    }
    let rt = set_realtime(a.rt_priority);
    if let Err(e) = &rt {
        eprintln!("linkemu: running without real-time priority: {e}");
    }
    let mut timing = Timing::new();
    stats.set(Slot::SerializationBps, a.serialization_bps);
    stats.set(Slot::Magic, MAGIC);
    stats.set(Slot::UpdatedNs, mono() as u64);
    let started = mono();
    let (fatal, model_report) = match a.model.as_ref() {
        Some(cfg) => model_loop(&a, cfg, &stats, &left, &right, &mut timing),
        None => (delay_loop(&a, &stats, &left, &right, &mut timing), serde_json::Value::Null),
    };
    let Timing { hist, wake, stalls } = timing;
    let epoch = Some(stats.epoch() as Nanos).filter(|&e| e != 0);

    let names = [
        ("fwd_rx_pkts", Slot::FwdRxPkts),
        ("fwd_arrival_pkts", Slot::FwdArrivalPkts),
        ("fwd_loss_pkts", Slot::FwdLossPkts),
        ("fwd_tx_pkts", Slot::FwdTxPkts),
        ("fwd_tx_refused", Slot::FwdTxRefused),
        ("rev_rx_pkts", Slot::RevRxPkts),
        ("rev_tx_pkts", Slot::RevTxPkts),
        ("rev_tx_refused", Slot::RevTxRefused),
        ("sock_drops", Slot::SockDrops),
        ("late_over_1ms", Slot::LateOver1ms),
    ];
    let mut counters = serde_json::Map::new();
    for (n, s) in names {
        counters.insert(n.into(), stats.get(s).into());
    }
    let report = serde_json::json!({
        "left": a.left,
        "right": a.right,
        "delay_fwd_ns": a.delay_fwd,
        "delay_rev_ns": a.delay_rev,
        "serialization_bps": a.serialization_bps,
        "realtime": rt.is_ok(),
        "realtime_error": rt.err(),
        "runtime_s": (mono() - started) as f64 / 1e9,
        "counters": counters,
        "timing_error_fwd": hist[0].json(),
        "timing_error_rev": hist[1].json(),
        "wakeup_latency": wake.json(),
        "stalls": stalls.json(epoch),
        "mode": if a.model.is_some() { "model" } else { "delay" },
        "cpu": a.cpu,
        "model": model_report,
        "error": fatal.clone(),
    });
    let text = serde_json::to_string_pretty(&report).unwrap();
    match &a.report {
        Some(p) => std::fs::write(p, text + "\n").map_err(|e| format!("write {p}: {e}"))?,
        None => println!("{text}"),
    }
    match fatal {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("cctestbed-linkemu: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(args) {
        eprintln!("cctestbed-linkemu: {e}");
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_held_by_one_stall_make_one_run_and_a_later_stall_another() {
        let ms = 1_000_000;
        let mut st = Stalls::default();
        // held 8 ms: frames due at 100..101 ms all go out from 108 ms on, both ways, with a
        // pause in the catching up itself
        st.late(0, 100 * ms, 8 * ms, 108 * ms);
        st.late(1, 100 * ms + ms / 2, 7 * ms + ms / 2, 108 * ms);
        st.late(0, 101 * ms, 9 * ms, 110 * ms);
        // a second stall a second later
        st.late(0, 1100 * ms, 2 * ms, 1102 * ms);
        let j = st.json(Some(50 * ms));
        assert_eq!(j["count"], 2);
        let kept = j["kept"].as_array().unwrap();
        assert_eq!((kept[0]["t_s"].as_f64(), kept[0]["max_late_us"].as_f64()), (Some(0.05), Some(9000.0)));
        assert_eq!((kept[0]["frames_fwd"].as_u64(), kept[0]["frames_rev"].as_u64()), (Some(2), Some(1)));
        assert_eq!((kept[1]["t_s"].as_f64(), kept[1]["frames_fwd"].as_u64()), (Some(1.05), Some(1)));
    }

    #[test]
    fn histogram_quantiles_are_bucket_upper_edges() {
        let mut h = Hist::new();
        for us in 0..100 {
            h.add(us * 1000 + 500);
        }
        assert_eq!(h.quantile_us(0.5), 50.0);
        assert_eq!(h.quantile_us(0.99), 99.0);
        assert_eq!(h.max, 99_500);
        h.add(1_000_000_000); // beyond the last bucket: counted there
        assert_eq!(h.n, 101);
    }

    #[test]
    fn forward_shift_is_the_ip_packets_transmission_time() {
        // A full frame (1514 bytes, a 1500-byte IP packet) takes 12 ms at 1 Mbit/s, as the
        // simulator's bottleneck serialises it; a handshake ACK (66-byte frame) 416 us.
        assert_eq!(transmission_ns(1514, 1_000_000), 12_000_000);
        assert_eq!(transmission_ns(66, 1_000_000), 416_000);
        assert_eq!(transmission_ns(1514, 0), 0);
    }

    #[test]
    fn a_small_frame_keeps_its_gap_behind_a_larger_one_and_its_own_shift_alone() {
        let mut s = Shifter::new(10_000_000); // 1500 bytes: 1.2 ms; 52 bytes: 41.6 us
        assert_eq!(s.enter(0, 1514), 1_200_000);
        // an ACK 0.5 ms behind the datagram: its own shift would overtake it, so it keeps 0.5 ms
        assert_eq!(s.enter(500_000, 66), 1_700_000);
        // and so does the next one, behind the ACK (the gaps the queue sees are the real ones)
        assert_eq!(s.enter(600_000, 66), 1_800_000);
        // a datagram's own shift puts it after them: its own shift
        assert_eq!(s.enter(1_000_000, 1514), 2_200_000);
        // an ACK on its own, long after: its own transmission time
        assert_eq!(s.enter(50_000_000, 66), 50_041_600);
        // without a bottleneck rate nothing moves
        let mut none = Shifter::new(0);
        assert_eq!((none.enter(5, 1514), none.enter(6, 66)), (5, 6));
    }

    #[test]
    fn only_ipv4_frames_meet_random_loss() {
        let mut f = vec![0u8; 60];
        f[12] = 0x08;
        assert!(is_ipv4(&f));
        f[13] = 0x06; // ARP
        assert!(!is_ipv4(&f));
        assert!(!is_ipv4(&f[..20]));
    }

    #[test]
    fn loss_draws_match_the_simulators_stream() {
        // The emulator's loss process is the simulator's, seeded the same way: equal draws.
        let cfg = LossConfig::Bernoulli { p: 0.01 };
        let mut a = LossModel::new(cfg.clone(), SimRng::new(7, stream::LINK_LOSS));
        let mut b = LossModel::new(cfg, SimRng::new(7, stream::LINK_LOSS));
        let da: Vec<bool> = (0..100_000).map(|_| a.drop_next()).collect();
        let db: Vec<bool> = (0..100_000).map(|_| b.drop_next()).collect();
        assert_eq!(da, db);
        let rate = da.iter().filter(|&&x| x).count() as f64 / 1e5;
        assert!((rate - 0.01).abs() < 0.002, "{rate}");
    }

    #[test]
    fn slab_reuses_slots() {
        let mut s = Slab { frames: Vec::new(), free: Vec::new() };
        let a = s.put(&[1, 2, 3]);
        s.release(a);
        let b = s.put(&[4]);
        assert_eq!(a, b);
        assert_eq!(s.frames[b as usize], vec![4]);
    }
}
