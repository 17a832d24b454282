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
//!
//! Each discipline owns its settings (a struct declared with [`qdisc_params!`](crate::qdisc_params):
//! names, meanings, defaults, ranges), resolves them, checks them and builds itself
//! ([`Discipline`]); this module registers them in one list (`disciplines!`), from which come
//! the trial's [`AqmConfig`], the checks and [`disciplines`], the export the Python schema builds
//! its `link.aqm` from. A new discipline is one file here and one line in that list (the
//! test-only `toy.rs` shows it). What several share: [`fifo::Fifo`] (the queue of drop-tail,
//! codel, pie and red), [`flows`] (fq_codel's and fq's flow hash and round robin) and
//! [`PeekDequeued`] (a peek of a discipline that decides at dequeue).

use crate::packet::{DataPacket, Ecn};
use crate::problem::{Path, Problem};
use crate::rng::SimRng;
use crate::time::Nanos;
use param::{Param, Rule, Settings};
use serde::{Deserialize, Serialize};

pub mod fifo;
pub mod flows;
pub mod param;

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
        impl CauseSet for $name {
            fn names() -> &'static [&'static str] {
                &[$($s),*]
            }
        }
    };
}

/// A keyed set of causes, for the telemetry's one counter column per cause (`drops_<cause>`).
pub trait CauseSet {
    fn names() -> &'static [&'static str];
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

/// The trial's queue: the hard limit of every discipline, in bytes of IP packets, in packets,
/// or both (`link.queue`, `link.reverse.queue`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueConfig {
    #[serde(default)]
    pub limit_bytes: Option<u64>,
    #[serde(default)]
    pub limit_packets: Option<u64>,
}

impl QueueConfig {
    /// A limit holds at least one packet of `mtu` bytes; problems are at `at` (`link.queue`).
    pub fn check(&self, at: &Path, mtu: u32, out: &mut Vec<Problem>) {
        match (self.limit_bytes, self.limit_packets) {
            (None, None) => out.push(at.problem("no limit: give limit_bytes or limit_packets")),
            (Some(b), _) if b < mtu as u64 => {
                out.push(at.field("limit_bytes").problem(format!("{b}: must hold at least one packet ({mtu} bytes)")))
            }
            (_, Some(0)) => out.push(at.field("limit_packets").problem("0: must be >= 1")),
            _ => {}
        }
    }
}

/// The hard limit, resolved from the trial's queue once: in bytes and packets, either
/// unlimited (`u64::MAX`) when not given.
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

    /// The limit in bytes: a packet limit counts packets of `mtu` bytes.
    pub fn bytes_at(&self, mtu: u32) -> f64 {
        if self.bytes != u64::MAX {
            self.bytes as f64
        } else {
            self.packets as f64 * mtu as f64
        }
    }
}

/// A queue discipline. `enqueue` and `dequeue` receive the current time and report drops
/// and marks to `c`; the router has counted the packet in `c.per_flow[..].queued` before
/// `enqueue`.
pub trait Qdisc: Send {
    /// A packet arrives (`enqueue`); it is queued or dropped (and other queued packets may
    /// be dropped to make room).
    fn enqueue(&mut self, now: Nanos, q: Queued, c: &mut Counters);

    /// The link is ready: the next packet to send, if any (`dequeue`).
    fn dequeue(&mut self, now: Nanos, c: &mut Counters) -> Option<Queued>;

    /// The packet `dequeue` would return, without taking it (`peek`), for a shaper in front
    /// of the link. Disciplines that decide at dequeue time are wrapped in [`PeekDequeued`].
    fn peek(&mut self, now: Nanos, c: &mut Counters) -> Option<&Queued>;

    /// Packets and bytes waiting (tc's `backlog`).
    fn backlog(&self) -> (u64, u64);
}

/// A discipline that decides at dequeue time (CoDel's drops, fq's round robin): which packet
/// `dequeue` returns is known only by dequeuing. It runs inside [`PeekDequeued`].
pub trait DequeueDecides: Send {
    /// As [`Qdisc::enqueue`]; `held` is the packet a peek took out and holds, (0, 0) or (1,
    /// its bytes), which still counts against the limit.
    fn enqueue(&mut self, now: Nanos, q: Queued, held: (u64, u64), c: &mut Counters);
    fn dequeue(&mut self, now: Nanos, c: &mut Counters) -> Option<Queued>;
    /// Packets and bytes waiting, without the held one.
    fn backlog(&self) -> (u64, u64);
}

/// Linux `qdisc_peek_dequeued`: a peek dequeues the packet and holds it, still counted in the
/// backlog, until `dequeue` asks for it.
pub struct PeekDequeued<D> {
    inner: D,
    held: Option<Queued>,
}

impl<D: DequeueDecides> PeekDequeued<D> {
    pub fn new(inner: D) -> Self {
        PeekDequeued { inner, held: None }
    }

    fn held(&self) -> (u64, u64) {
        self.held.as_ref().map_or((0, 0), |q| (1, q.pkt.size as u64))
    }
}

impl<D: DequeueDecides> Qdisc for PeekDequeued<D> {
    fn enqueue(&mut self, now: Nanos, q: Queued, c: &mut Counters) {
        let held = self.held();
        self.inner.enqueue(now, q, held, c);
    }

    fn dequeue(&mut self, now: Nanos, c: &mut Counters) -> Option<Queued> {
        self.held.take().or_else(|| self.inner.dequeue(now, c))
    }

    fn peek(&mut self, now: Nanos, c: &mut Counters) -> Option<&Queued> {
        if self.held.is_none() {
            self.held = self.inner.dequeue(now, c);
        }
        self.held.as_ref()
    }

    fn backlog(&self) -> (u64, u64) {
        let ((n, b), (hn, hb)) = (self.inner.backlog(), self.held());
        (n + hn, b + hb)
    }
}

/// What a discipline is built for, besides its own settings.
#[derive(Debug, Clone, Copy)]
pub struct Setup {
    /// The trial's queue.
    pub limit: Limit,
    /// The device MTU (`psched_mtu`).
    pub mtu: u32,
    /// The link's rate.
    pub capacity_bps: u64,
}

/// A discipline's settings that build it.
pub trait Discipline: Settings {
    /// Whether it sends packets in the order they arrived (one queue, drops and marks aside):
    /// then a packet that never left is known dropped as soon as any later arrival leaves,
    /// which is how a capture analysis finds drops of a flow that sent nothing after them.
    const ARRIVAL_ORDER: bool;

    /// The discipline, with its own random stream `rng` (fq_codel's hash perturbation, RED's
    /// draws).
    fn build(&self, setup: &Setup, rng: SimRng) -> Box<dyn Qdisc>;
}

/// One discipline as the core exports it: its name in trial files, what it is, its parameters
/// and the rules between them.
#[derive(Debug, Clone, Copy)]
pub struct Described {
    pub name: &'static str,
    pub doc: &'static str,
    pub params: &'static [Param],
    pub rules: &'static [Rule],
}

impl Described {
    fn of<S: Settings>(name: &'static str) -> Self {
        Described { name, doc: S::DOC, params: S::PARAMS, rules: S::RULES }
    }
}

/// Registers the disciplines, each as `module: Variant(Settings)` (the module's name is the
/// discipline's name in trial files): declares the modules, the trial's [`AqmConfig`] with one
/// variant each, and [`disciplines`].
macro_rules! disciplines {
    ($( $(#[$attr:meta])* $module:ident: $variant:ident($settings:ident), )*) => {
        $( $(#[$attr])* pub mod $module; )*
        $( $(#[$attr])* pub use $module::$settings; )*

        /// A queue discipline other than drop-tail (`link.aqm`), with `tc`'s parameter names;
        /// absent parameters take Linux's defaults. `kind` names it.
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
        #[serde(tag = "kind", rename_all = "snake_case")]
        pub enum AqmConfig {
            $( $(#[$attr])* $variant($settings), )*
        }

        impl AqmConfig {
            /// The discipline's name in trial files.
            pub fn kind(&self) -> &'static str {
                match self {
                    $( $(#[$attr])* AqmConfig::$variant(_) => stringify!($module), )*
                }
            }

            /// Each parameter in its range, and the rules between them; problems are at `at`
            /// (`link.aqm`).
            pub fn check(&self, at: &Path, out: &mut Vec<Problem>) {
                match self {
                    $( $(#[$attr])* AqmConfig::$variant(s) => s.check(at, out), )*
                }
            }

            fn build(&self, setup: &Setup, rng: SimRng) -> Box<dyn Qdisc> {
                match self {
                    $( $(#[$attr])* AqmConfig::$variant(s) => s.build(setup, rng), )*
                }
            }
        }

        /// Every discipline besides drop-tail, in the order registered: the core's export of
        /// their names, meanings, parameters, defaults and ranges.
        pub fn disciplines() -> Vec<Described> {
            let mut all = Vec::new();
            $( $(#[$attr])* all.push(Described::of::<$settings>(stringify!($module))); )*
            all
        }

        /// Whether the discipline named `kind` (`fifo` for drop-tail) sends packets in the
        /// order they arrived ([`Discipline::ARRIVAL_ORDER`]); `None` for a name not registered.
        pub fn serves_in_arrival_order(kind: &str) -> Option<bool> {
            match kind {
                "fifo" => Some(true),
                $( $(#[$attr])* stringify!($module) => Some(<$settings as Discipline>::ARRIVAL_ORDER), )*
                _ => None,
            }
        }
    };
}

disciplines! {
    codel: Codel(CodelConfig),
    fq_codel: FqCodel(FqCodelConfig),
    red: Red(RedConfig),
    pie: Pie(PieConfig),
    fq: Fq(FqConfig),
    dualpi2: Dualpi2(DualPi2Config),
    #[cfg(test)]
    toy: Toy(ToyConfig),
}

/// The name of the discipline `aqm` builds: drop-tail's `fifo` when there is none.
pub fn kind(aqm: Option<&AqmConfig>) -> &'static str {
    aqm.map_or("fifo", AqmConfig::kind)
}

/// Builds the discipline a trial asks for (drop-tail when `aqm` is `None`); `rng` is the
/// discipline's own stream.
pub fn build(aqm: Option<&AqmConfig>, queue: &QueueConfig, mtu: u32, capacity_bps: u64, rng: SimRng) -> Box<dyn Qdisc> {
    let setup = Setup { limit: Limit::new(queue), mtu, capacity_bps };
    match aqm {
        None => Box::new(fifo::DropTail::new(setup.limit)),
        Some(a) => a.build(&setup, rng),
    }
}

#[cfg(test)]
mod tests {
    use super::param::Fallback;
    use super::*;
    use crate::packet::DataPacket;

    /// Adding a discipline is one file and one line: `toy.rs`, registered only for the tests as
    /// `toy: Toy(ToyConfig)`, is read from a trial, checked, built and exported like the others.
    #[test]
    fn a_discipline_registered_in_one_line_is_read_checked_built_and_exported() {
        let toy = disciplines().into_iter().find(|d| d.name == "toy").expect("the toy is exported");
        assert_eq!(toy.params.iter().map(|p| (p.name, p.key)).collect::<Vec<_>>(), [("packets", "packets")]);
        assert_eq!(toy.params[0].default, Fallback::Number(10.0));
        assert!(toy.doc.contains("drop-tail"), "{}", toy.doc);

        let aqm: AqmConfig = serde_json::from_str(r#"{"kind": "toy", "packets": 3}"#).expect("a toy trial");
        assert_eq!(aqm.kind(), "toy");
        let mut problems = Vec::new();
        aqm.check(&Path::of(&["link", "aqm"]), &mut problems);
        assert!(problems.is_empty(), "{problems:?}");
        let bad: AqmConfig = serde_json::from_str(r#"{"kind": "toy", "packets": 0}"#).unwrap();
        bad.check(&Path::of(&["link", "aqm"]), &mut problems);
        assert_eq!(problems.iter().map(ToString::to_string).collect::<Vec<_>>(), ["link.aqm.packets: 0: must be from 1 to 1000"]);

        let queue = QueueConfig { limit_bytes: None, limit_packets: Some(100) };
        let mut q = build(Some(&aqm), &queue, 1500, 10_000_000, SimRng::new(1, 0));
        let mut c = Counters::new(1);
        for seq in 0..5 {
            let pkt = DataPacket { flow: 0, seq, size: 1500, payload: 1448, sent_at: 0, ecn: Ecn::NotEct, cwr: false, ts_echo: None };
            c.per_flow[0].queued += 1;
            q.enqueue(0, Queued { pkt, enqueued_at: 0 }, &mut c);
        }
        assert_eq!(q.backlog(), (3, 4500), "its own limit of 3 packets");
        assert_eq!(c.stats.drops[DropCause::Overflow], 2);
    }

    /// Each variant's tag in the trial's JSON is its module's name, the discipline's name.
    #[test]
    fn every_discipline_is_named_after_its_module() {
        for d in disciplines() {
            let aqm: AqmConfig = serde_json::from_str(&format!(r#"{{"kind": "{}"}}"#, d.name)).expect(d.name);
            assert_eq!(aqm.kind(), d.name);
            assert_eq!(serde_json::to_value(&aqm).unwrap()["kind"], d.name);
        }
    }

    /// Names and keys are unique within a discipline, and every default is in its range.
    #[test]
    fn every_parameter_is_declared_once_with_a_default_in_range() {
        for d in disciplines() {
            for (i, p) in d.params.iter().enumerate() {
                assert!(!p.doc.trim().is_empty(), "{}.{} has no meaning", d.name, p.name);
                assert!(d.params[..i].iter().all(|q| q.name != p.name && q.key != p.key), "{}.{} twice", d.name, p.name);
                if let Fallback::Number(v) = p.default {
                    assert!(p.holds(v), "{}.{}: default {v} outside its range", d.name, p.name);
                }
            }
            for Rule::Below(a, b) in d.rules {
                assert!(d.params.iter().any(|p| p.key == *a) && d.params.iter().any(|p| p.key == *b), "{}: rule on {a}, {b}", d.name);
            }
        }
    }

    /// A discipline that decides at dequeue time keeps a peeked packet in its backlog and its
    /// limit, and hands it to the next dequeue.
    #[test]
    fn a_peeked_packet_is_held_counted_and_dequeued_next() {
        let queue = QueueConfig { limit_bytes: None, limit_packets: Some(2) };
        let aqm = AqmConfig::Codel(CodelConfig::default());
        let mut q = build(Some(&aqm), &queue, 1500, 10_000_000, SimRng::new(1, 0));
        let mut c = Counters::new(1);
        let arrive = |q: &mut Box<dyn Qdisc>, c: &mut Counters, seq| {
            let pkt = DataPacket { flow: 0, seq, size: 1000, payload: 948, sent_at: 0, ecn: Ecn::NotEct, cwr: false, ts_echo: None };
            c.per_flow[0].queued += 1;
            q.enqueue(0, Queued { pkt, enqueued_at: 0 }, c);
        };
        arrive(&mut q, &mut c, 0);
        arrive(&mut q, &mut c, 1);
        assert_eq!(q.peek(0, &mut c).map(|p| p.pkt.seq), Some(0));
        assert_eq!(q.backlog(), (2, 2000));
        arrive(&mut q, &mut c, 2);
        assert_eq!(c.stats.drops[DropCause::Overflow], 1, "the held packet counts against the limit");
        assert_eq!(q.dequeue(0, &mut c).map(|p| p.pkt.seq), Some(0));
        assert_eq!(q.dequeue(0, &mut c).map(|p| p.pkt.seq), Some(1));
        assert_eq!(q.backlog(), (0, 0));
    }
}
