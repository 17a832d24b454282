//! Queue disciplines at the bottleneck: the seam between the router ([`crate::link::Bottleneck`])
//! and what decides which packet waits, leaves, is dropped or is marked.
//!
//! A discipline sees a packet twice, as a Linux `struct Qdisc_ops` does: at `enqueue`, with
//! the time it arrives, and at `dequeue`, with the time the link is ready to send. At either
//! point it may drop packets (its own arrival or packets already queued) or set CE on an
//! ECN-capable one; it reports every such decision to [`Counters`] with a cause, so the
//! router's drop and mark counters, the per-flow counts and the telemetry columns
//! (`drops_<cause>`, `marks_<cause>`) all come from the keyed sets [`DropCause`] and
//! [`MarkCause`] declared once here.
//!
//! Disciplines, each with its source in its own module header:
//! - [`fifo::DropTail`]: `bfifo`/`pfifo`, the default;
//! - [`codel::Codel`]: `codel` (RFC 8289, Linux `sch_codel.c` and `codel_impl.h`);
//! - [`fq_codel::FqCodel`]: `fq_codel` (RFC 8290, Linux `sch_fq_codel.c`);
//! - [`red::Red`]: `red`, with ECN and adaptive max_P (Linux `sch_red.c`, `red.h`);
//! - [`pie::Pie`]: `pie` (RFC 8033, Linux `sch_pie.c`);
//! - [`fq::Fq`]: `fq` (Linux `sch_fq.c`: per-flow round robin; no pacing of forwarded packets);
//! - [`dualpi2::DualPi2`]: `dualpi2` (RFC 9332, Linux `sch_dualpi2.c`).
//!
//! The trial's queue limit (`link.queue`, bytes or packets) is every discipline's hard limit.

use crate::config::{AqmConfig, QueueConfig};
use crate::packet::{DataPacket, Ecn};
use crate::rng::SimRng;
use crate::time::Nanos;

pub mod codel;
pub mod dualpi2;
pub mod fifo;
pub mod fq;
pub mod fq_codel;
pub mod pie;
pub mod red;

/// Declares a keyed set of causes: an enum, its `ALL` list and its column-name suffixes, so
/// that counters, telemetry columns and the binding derive from this one declaration.
macro_rules! causes {
    ($(#[$m:meta])* $name:ident { $( $(#[$vm:meta])* $v:ident = $s:literal ),* $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $( $(#[$vm])* $v ),* }
        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$v),*];
            pub const COUNT: usize = $name::ALL.len();
            /// The suffix of this cause's counter and column (`drops_<name>`, `marks_<name>`).
            pub fn name(self) -> &'static str {
                match self { $( $name::$v => $s ),* }
            }
        }
        impl crate::telemetry::CauseSet for $name {
            fn names() -> &'static [&'static str] {
                &[$($s),*]
            }
        }
    };
}

causes! {
    /// Why the router dropped a packet.
    DropCause {
        /// The queue was full (the trial's hard limit, or fq_codel's memory limit).
        Overflow = "overflow",
        /// The random loss process (netem `loss`), before the queue.
        Random = "random",
        /// The ingress token-bucket policer.
        Policer = "policer",
        /// The active queue management's congestion signal, given as a drop (CoDel's control
        /// law on a packet that is not ECN-capable, for example).
        Aqm = "aqm",
    }
}

causes! {
    /// Why the router set CE on a packet.
    MarkCause {
        /// The AQM's congestion signal, given as a mark instead of a drop (`ecn` on).
        Aqm = "aqm",
        /// A sojourn-time threshold on its own (`ce_threshold`, a DCTCP-style step).
        Threshold = "threshold",
    }
}

/// A count per cause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PerCause<const N: usize>(pub [u64; N]);

impl<const N: usize> Default for PerCause<N> {
    fn default() -> Self {
        PerCause([0; N])
    }
}

impl<const N: usize> PerCause<N> {
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
}

impl std::ops::Index<DropCause> for PerCause<{ DropCause::COUNT }> {
    type Output = u64;
    fn index(&self, c: DropCause) -> &u64 {
        &self.0[c as usize]
    }
}

impl std::ops::Index<MarkCause> for PerCause<{ MarkCause::COUNT }> {
    type Output = u64;
    fn index(&self, c: MarkCause) -> &u64 {
        &self.0[c as usize]
    }
}

pub type Drops = PerCause<{ DropCause::COUNT }>;
pub type Marks = PerCause<{ MarkCause::COUNT }>;

/// Cumulative router counters.
#[derive(Debug, Clone, Copy, Default)]
pub struct RouterStats {
    pub arrivals_pkts: u64,
    pub arrival_bytes: u64,
    pub departures_pkts: u64,
    pub departed_bytes: u64,
    pub departed_payload_bytes: u64,
    pub drops: Drops,
    pub marks: Marks,
    pub dropped_bytes: u64,
}

/// Per-flow counters at the router (for conservation checks and per-flow loss).
#[derive(Debug, Clone, Copy, Default)]
pub struct FlowRouterStats {
    pub arrivals: u64,
    pub drops: u64,
    pub departures: u64,
    /// Admitted and not yet departed or dropped (queued or in service).
    pub queued: u64,
    /// Packets that left with CE set by this router.
    pub marks: u64,
}

/// Where disciplines report drops and marks.
#[derive(Debug, Clone, Default)]
pub struct Counters {
    pub stats: RouterStats,
    pub per_flow: Vec<FlowRouterStats>,
    /// Every dropped packet, in drop order, when [`Counters::log_drops`] turned it on (the
    /// userspace link emulator frees a dropped packet's frame from it); off in the simulator.
    pub dropped: Option<Vec<DataPacket>>,
}

impl Counters {
    pub fn new(n_flows: usize) -> Self {
        Counters { stats: RouterStats::default(), per_flow: vec![FlowRouterStats::default(); n_flows], dropped: None }
    }

    /// Keeps every dropped packet in [`Counters::dropped`] from now on.
    pub fn log_drops(&mut self) {
        self.dropped.get_or_insert_with(Vec::new);
    }

    /// A packet that arrived and was not admitted (random loss, policer).
    pub fn drop_arrival(&mut self, p: &DataPacket, cause: DropCause) {
        self.stats.drops.0[cause as usize] += 1;
        self.stats.dropped_bytes += p.size as u64;
        self.per_flow[p.flow as usize].drops += 1;
        if let Some(log) = self.dropped.as_mut() {
            log.push(*p);
        }
    }

    /// A packet handed to the discipline (admitted or not) is dropped by it.
    pub fn drop_queued(&mut self, p: &DataPacket, cause: DropCause) {
        self.drop_arrival(p, cause);
        self.per_flow[p.flow as usize].queued -= 1;
    }

    /// Sets CE on `p` if it is ECN-capable and counts the mark; false if it is not capable
    /// (the caller then drops it), as Linux `INET_ECN_set_ce`. A packet already CE counts as
    /// marked again (the signal is given), as in Linux.
    pub fn mark(&mut self, p: &mut DataPacket, cause: MarkCause) -> bool {
        if !p.ecn.is_capable() {
            return false;
        }
        if p.ecn != Ecn::Ce {
            self.per_flow[p.flow as usize].marks += 1;
        }
        p.ecn = Ecn::Ce;
        self.stats.marks.0[cause as usize] += 1;
        true
    }
}

/// A packet waiting in a discipline, with the time it was enqueued (Linux `codel_set_enqueue_time`).
#[derive(Debug, Clone, Copy)]
pub struct Queued {
    pub pkt: DataPacket,
    pub enqueued_at: Nanos,
}

/// The hard limit: the trial's queue, in bytes and/or packets.
#[derive(Debug, Clone, Copy)]
pub struct Limit {
    pub bytes: u64,
    pub packets: u64,
}

impl Limit {
    pub fn new(q: &QueueConfig) -> Self {
        Limit { bytes: q.limit_bytes.unwrap_or(u64::MAX), packets: q.limit_packets.unwrap_or(u64::MAX) }
    }

    /// Whether a backlog of `pkts` packets and `bytes` bytes is within the limit.
    pub fn holds(&self, pkts: u64, bytes: u64) -> bool {
        pkts <= self.packets && bytes <= self.bytes
    }
}

/// A queue discipline. `enqueue` and `dequeue` receive the current time and report drops
/// and marks to `c`; the router has counted the packet in `c.per_flow[..].queued` before
/// `enqueue`.
pub trait Qdisc: Send {
    /// Name as given in trial files.
    fn kind(&self) -> &'static str;

    /// A packet arrives (`enqueue`); it is queued or dropped (and other queued packets may
    /// be dropped to make room).
    fn enqueue(&mut self, now: Nanos, q: Queued, c: &mut Counters);

    /// The link is ready: the next packet to send, if any (`dequeue`).
    fn dequeue(&mut self, now: Nanos, c: &mut Counters) -> Option<Queued>;

    /// The packet `dequeue` would return, without taking it (`peek`), for a shaper in front
    /// of the link. Disciplines that decide at dequeue time take the packet out and hold it,
    /// still counted in their backlog, as Linux `qdisc_peek_dequeued` does.
    fn peek(&mut self, now: Nanos, c: &mut Counters) -> Option<&Queued>;

    /// Packets and bytes waiting (tc's `backlog`).
    fn backlog(&self) -> (u64, u64);
}

/// Holds a packet taken out by `peek` until `dequeue` asks for it (`qdisc_peek_dequeued`).
#[derive(Debug, Default)]
pub struct Peeked(Option<Queued>);

impl Peeked {
    pub fn take(&mut self) -> Option<Queued> {
        self.0.take()
    }
    pub fn get_or_fill(&mut self, f: impl FnOnce() -> Option<Queued>) -> Option<&Queued> {
        if self.0.is_none() {
            self.0 = f();
        }
        self.0.as_ref()
    }
    pub fn len(&self) -> (u64, u64) {
        self.0.as_ref().map_or((0, 0), |q| (1, q.pkt.size as u64))
    }
}

/// Builds the discipline a trial asks for; `mtu` is the device MTU (`psched_mtu`), `rng` the
/// discipline's own stream (fq_codel's hash perturbation, RED's draws).
pub fn build(aqm: Option<&AqmConfig>, queue: &QueueConfig, mtu: u32, capacity_bps: u64, rng: SimRng) -> Box<dyn Qdisc> {
    let limit = Limit::new(queue);
    match aqm {
        None => Box::new(fifo::DropTail::new(limit)),
        Some(AqmConfig::Codel(p)) => Box::new(codel::Codel::new(limit, p.resolve(mtu))),
        Some(AqmConfig::FqCodel(p)) => Box::new(fq_codel::FqCodel::new(limit, p, mtu, rng)),
        Some(AqmConfig::Dualpi2(p)) => Box::new(dualpi2::DualPi2::new(limit, dualpi2::DualPi2Params::resolve(p, mtu), rng)),
        Some(AqmConfig::Fq(p)) => Box::new(fq::Fq::new(limit, p, mtu, rng)),
        Some(AqmConfig::Pie(p)) => Box::new(pie::Pie::new(limit, pie::PieParams::resolve(p, mtu), rng)),
        Some(AqmConfig::Red(p)) => Box::new(red::Red::new(limit, red::RedParams::resolve(p, &limit, mtu, capacity_bps), rng)),
    }
}
