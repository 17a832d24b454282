//! The dumbbell and its event loop.
//!
//! ```text
//!  sender i --access line i (extra delay, NIC rate)--> router --bottleneck--> forward line
//!     ^                                                       (queue, loss,    (delay_fwd)
//!     |                                                        shaper, rate)       |
//!     +---- ACK line i (delay_rev, uncongested) <-- [ACK aggregation] <-- receiver i <--+
//! ```
//! The bottleneck serves at the link's rate, or at the opportunities of a trace; ACK
//! aggregation, when the link has it, holds each flow's ACKs and releases them in bursts.
//! RTprop of flow i = delay_fwd + delay_rev + extra_delay_i.
//!
//! Reverse flows (`direction = "reverse"`) send from the right: their data takes their access
//! line, then the reverse path (the reverse bottleneck of `link.reverse` when the trial has one,
//! then a line of delay_rev) to the receivers on the left, and their ACKs cross the forward
//! bottleneck, queued with the forward data, before a line of delay_fwd. With a reverse
//! bottleneck the forward flows' ACKs queue in it behind the reverse data. An ACK in a
//! bottleneck is a small packet standing for it ([`DataPacket::ack_carrier`]); the ACK itself
//! waits beside the queue until that packet leaves, so the one queue model (loss, discipline,
//! rate) serves both kinds of packet. Without reverse flows and `link.reverse` every ACK takes
//! its ACK line directly, as above.
//!
//! Datagram flows ([`crate::datagram`]: udp streams, ping probes) take the same access line,
//! bottleneck and forward line as TCP's data; a probe's reply takes the flow's ACK line.
//! Every flow id indexes every per-flow vector: a datagram flow's TCP sender and receiver
//! exist but are never opened.

use crate::capture::{CaptureFile, Connection, Recorder};
use crate::cc::bpf;
use crate::config::{Direction, SimConfig, Traffic};
use crate::datagram::DatagramFlow;
use crate::event::{Event, EventQueue, Timer, TimerKind, TimerPop};
use crate::jiffies::TickClock;
use crate::link::{AckAggregator, Bottleneck, DelayLine, FlowRouterStats, RouterStats};
use crate::nic::{Gro, Skb};
use crate::packet::{AckPacket, DataPacket, ACK_SIZE};
use crate::rng::{stream, SimRng};
use crate::tcp::receiver::{EcnEcho, Receiver};
use crate::tcp::sender::{Io, Sender};
use crate::telemetry::{CompletionSeries, FlowSeries, RouterSeries, Telemetry};
use crate::time::Nanos;
use std::collections::VecDeque;

/// Size of a pure ACK on the wire (IP + TCP with timestamps); the ACK path is uncongested.

/// Per-flow totals at the end of a run, counted independently at each place a packet can be,
/// so that conservation (sent = delivered + dropped + queued + in transit) is a real check.
#[derive(Debug, Clone, Copy, Default)]
pub struct FlowFinal {
    pub sent_pkts: u64,
    pub delivered_pkts: u64,
    pub dropped_pkts: u64,
    /// Packets this router set CE on.
    pub marked_pkts: u64,
    pub queued_pkts: u64,
    pub in_transit_pkts: u64,
    pub delivered_bytes: u64,
    pub retrans_segs: u64,
    pub sent_segs: u64,
    pub lost_segs: u64,
    pub rto_count: u64,
    /// Tail loss probes sent (Linux counts them as TcpExt TCPLossProbes).
    pub tlp_count: u64,
    /// Congestion-window reductions undone as spurious (Linux: TcpExt TCPFullUndo,
    /// TCPPartialUndo, TCPLossUndo and TCPDSACKUndo between them; an F-RTO undo counts in
    /// TCPLossUndo and again in TCPSpuriousRTOs).
    pub undo_count: u64,
}

#[derive(Debug, Clone)]
pub struct SimOutput {
    pub flows: FlowSeries,
    pub router: RouterSeries,
    pub state_labels: Vec<&'static str>,
    pub flow_final: Vec<FlowFinal>,
    pub router_final: RouterStats,
    /// Router bytes queued or in service at the end.
    pub router_queued_bytes: u64,
    /// The reverse bottleneck's counters and bytes queued or in service at the end, when the
    /// trial has one (`link.reverse`).
    pub reverse_final: Option<(RouterStats, u64)>,
    pub events: u64,
    /// The packet captures the trial asked for (empty without `capture`).
    pub captures: Vec<CaptureFile>,
    /// One row per TCP flow with a size: its completion time, or none by the end.
    pub completions: CompletionSeries,
    /// Why the trial could not run to its end: a BPF congestion control's run-time error
    /// (naming the program, the op and the instruction). The series stop where it happened.
    pub error: Option<String>,
}

pub struct Simulation {
    cfg: SimConfig,
    q: EventQueue,
    pub senders: Vec<Sender>,
    pub receivers: Vec<Receiver>,
    /// The datagram flows' state, `None` for TCP flows.
    pub datagrams: Vec<Option<DatagramFlow>>,
    /// Whether any flow sends datagrams: TCP-only trials skip every look at `datagrams`.
    any_datagram: bool,
    started: Vec<bool>,
    /// When each sized TCP flow's receiver came to hold every byte in order.
    completed: Vec<Option<Nanos>>,
    /// Sized flows whose every byte is acknowledged and whose buffers were given back.
    released: Vec<bool>,
    /// Each flow's `size_bytes`, read once per delivered segment (the flow configurations
    /// are large and cold).
    sizes: Vec<Option<u64>>,
    access: Vec<DelayLine<DataPacket>>,
    forward: DelayLine<DataPacket>,
    acks: Vec<DelayLine<AckPacket>>,
    /// Per-flow ACK aggregation before the ACK line, when the link asks for it.
    ack_agg: Vec<AckAggregator<AckPacket>>,
    pub bottleneck: Bottleneck,
    bottleneck_wake: Option<Nanos>,
    /// The line from the reverse path to the receivers of reverse flows (delay_rev).
    backward: DelayLine<DataPacket>,
    /// The reverse path's bottleneck (`link.reverse`); `None` leaves the path unconstrained.
    pub rev_bottleneck: Option<Bottleneck>,
    rev_wake: Option<Nanos>,
    /// Each flow's direction.
    dir: Vec<Direction>,
    /// Whether any ACK crosses a bottleneck (a reverse flow, or `link.reverse`); without it
    /// every ACK goes straight to its ACK line.
    routed_acks: bool,
    /// Per flow, the ACKs whose carriers are in a bottleneck, in the order they entered it
    /// (every discipline keeps a flow's packets in order), with the carriers' ids.
    acks_in_router: Vec<VecDeque<(u64, AckPacket)>>,
    next_ack_id: u64,
    /// ACKs released together by an aggregator, on their way into a bottleneck.
    ack_scratch: Vec<AckPacket>,
    delack: Vec<Timer>,
    out: Vec<DataPacket>,
    timers: Vec<(Nanos, TimerKind)>,
    telemetry: Telemetry,
    /// Capture points, when the trial records packets; `None` costs one branch per packet.
    capture: Option<Box<Recorder>>,
    /// The packet the bottleneck is sending, as last seen (captures only: a change is a
    /// packet leaving the queue).
    in_service: Option<DataPacket>,
    /// The first run-time error of a BPF congestion control, which ends the trial.
    bpf_fault: bpf::BpfFault,
    /// Each receiving host's GRO table ([`Side`]) and the time its NIC's next poll is due,
    /// when interrupts are coalesced.
    gro: [Gro; 2],
    poll_at: [Option<Nanos>; 2],
    /// The time the run goes up to (`run_until`): the bottleneck never runs ahead of it.
    horizon: Nanos,
}

/// The two receiving hosts: forward flows' receivers (behind the forward line) and reverse
/// flows' (behind the backward line).
#[derive(Debug, Clone, Copy)]
enum Side {
    Forward = 0,
    Backward = 1,
}

impl Side {
    /// The event of a frame at the head of this side's line.
    fn event(self) -> Event {
        match self {
            Side::Forward => Event::ForwardHead,
            Side::Backward => Event::BackwardHead,
        }
    }
}

impl Simulation {
    /// Builds the dumbbell; the configuration must have passed [`SimConfig::validate`].
    pub fn new(cfg: SimConfig) -> Result<Self, Vec<crate::problem::Problem>> {
        cfg.validate()?;
        let n = cfg.flows.len();
        let mut senders = Vec::with_capacity(n);
        let mut receivers = Vec::with_capacity(n);
        let mut access = Vec::with_capacity(n);
        let mut acks = Vec::with_capacity(n);
        let mut datagrams = Vec::with_capacity(n);
        let bpf_fault = bpf::BpfFault::default();
        // one kernel, one tick clock, for every host of the trial
        let ticks = TickClock::from_seed(cfg.seed);
        type ObjectKey = (Option<String>, Option<bpf::ObjectBytes>);
        let mut bpf_objects: Vec<(ObjectKey, std::sync::Arc<ccbpf::Object>)> = Vec::new();
        // tcp_rmem[2] as the kernel backend sets it on every host
        let rtprop = (cfg.link.delay_fwd_ns + cfg.link.delay_rev_ns) as u128;
        let bdp = (cfg.link.capacity_bps as u128 * rtprop / 8_000_000_000) as u64;
        let q = &cfg.link.queue;
        let queue_bytes = q.limit_bytes.unwrap_or_else(|| q.limit_packets.unwrap_or(0) * cfg.mtu as u64);
        let rmem_max = crate::tcp::rcvbuf::tcp_rmem_max(bdp, queue_bytes);
        for (i, f) in cfg.flows.iter().enumerate() {
            datagrams.push(DatagramFlow::for_traffic(i as u32, &f.traffic, cfg.seed, cfg.duration_ns));
            // A datagram flow's TCP endpoints are never opened; any algorithm will do.
            let cc_name = if f.traffic == Traffic::Tcp { f.cc.as_str() } else { "reno" };
            let mut cc: Box<dyn crate::cc::CongestionControl> = if cc_name == bpf::NAME {
                // one loaded object per flow group, as the kernel backend registers one per group
                let key = (f.group.clone(), f.bpf_object.clone());
                let object = match bpf_objects.iter().find(|(k, _)| *k == key) {
                    Some((_, o)) => std::sync::Arc::clone(o),
                    None => {
                        let o = bpf::load(f.bpf_object.as_ref()).expect("checked by validate");
                        bpf_objects.push((key, std::sync::Arc::clone(&o)));
                        o
                    }
                };
                Box::new(bpf::BpfCc::new(object, bpf_fault.clone()))
            } else {
                crate::cc::build(cc_name, &f.params).expect("checked by validate")
            };
            cc.seed(SimRng::new(cfg.seed, stream::CC_BASE + i as u64));
            let wants_ce = cc.wants_ce_events();
            senders.push(Sender::new(i as u32, f, cfg.mss, cfg.mtu, cc).with_ticks(ticks));
            // The receiver's RTT until the handshake measures it: RTprop plus a small packet's
            // serialisation at the bottleneck its data crosses (none on an unconstrained path).
            let data_rate = match f.direction {
                Direction::Forward => cfg.link.capacity_bps,
                Direction::Reverse => cfg.link.reverse.as_ref().map_or(0, |r| r.capacity_bps),
            };
            let handshake_ser = (ACK_SIZE as u64 * 8 * 1_000_000_000).checked_div(data_rate).unwrap_or(0);
            // A reverse flow's ACKs come back over the forward path.
            let ack_delay = match f.direction {
                Direction::Forward => cfg.link.delay_rev_ns,
                Direction::Reverse => cfg.link.delay_fwd_ns,
            };
            let handshake_rtt = cfg.link.delay_fwd_ns + cfg.link.delay_rev_ns + f.extra_delay_ns + handshake_ser as Nanos;
            let echo = match (f.ecn, wants_ce) {
                (false, _) => EcnEcho::Off,
                (true, false) => EcnEcho::Classic,
                (true, true) => EcnEcho::PerPacket,
            };
            receivers.push(Receiver::new(i as u32, f.delayed_ack.clone(), cfg.mss, f.rwnd_bytes, handshake_rtt, rmem_max).with_ecn(echo).with_ticks(ticks).with_read_interval(f.read_interval_ns));
            access.push(DelayLine::new(f.extra_delay_ns, cfg.link.access_rate_bps));
            let jitter_rng = SimRng::new(cfg.seed, stream::JITTER_BASE + i as u64);
            // An aggregating link sends a released burst of ACKs as frames, back to back at its rate,
            // not at one instant (the kernel backend's frames reach the sender one after another).
            let ack_rate = cfg.link.ack_aggregation.as_ref().map(|_| cfg.link.capacity_bps);
            acks.push(DelayLine::new(ack_delay, ack_rate).with_jitter(cfg.link.jitter_ns, jitter_rng));
        }
        let ack_agg = match &cfg.link.ack_aggregation {
            Some(a) => (0..n).map(|i| AckAggregator::new(a.clone(), SimRng::new(cfg.seed, stream::ACK_AGG_BASE + i as u64))).collect(),
            None => Vec::new(),
        };
        let bottleneck = Bottleneck::new(
            &cfg.link,
            n,
            cfg.mtu,
            SimRng::new(cfg.seed, stream::LINK_LOSS),
            SimRng::new(cfg.seed, stream::QDISC),
        );
        let rev_bottleneck = cfg.link.reverse.as_ref().map(|r| {
            let link = r.as_link(&cfg.link);
            Bottleneck::new(&link, n, cfg.mtu, SimRng::new(cfg.seed, stream::REV_LINK_LOSS), SimRng::new(cfg.seed, stream::REV_QDISC))
        });
        let dir: Vec<Direction> = cfg.flows.iter().map(|f| f.direction).collect();
        let routed_acks = rev_bottleneck.is_some() || dir.contains(&Direction::Reverse);
        let workload = cfg.flows.iter().map(|f| f.workload).collect();
        let telemetry = Telemetry::new(&senders, &datagrams, workload, cfg.sample_interval_ns, cfg.duration_ns);
        let any_datagram = datagrams.iter().any(Option::is_some);
        let mut q = EventQueue::default();
        for (i, f) in cfg.flows.iter().enumerate() {
            q.push(f.start_ns, Event::FlowStart(i as u32));
        }
        for (i, c) in cfg.link.schedule.iter().enumerate() {
            q.push(c.at_ns, Event::CapacityChange(i as u32));
        }
        for (i, c) in cfg.link.delay_schedule.iter().enumerate() {
            q.push(c.at_ns, Event::DelayChange(i as u32));
        }
        q.push(cfg.sample_interval_ns, Event::Sample);
        let capture = cfg.capture.as_ref().map(|c| {
            let flows: Vec<Connection> =
                cfg.flows.iter().map(|f| Connection { size_bytes: f.size_bytes, rwnd_bytes: f.rwnd_bytes, ecn: f.ecn }).collect();
            Box::new(Recorder::new(c, &flows, cfg.mss, cfg.mtu))
        });
        let sizes = cfg.flows.iter().map(|f| f.size_bytes).collect();
        Ok(Simulation {
            capture,
            in_service: None,
            forward: DelayLine::new(cfg.link.delay_fwd_ns, None),
            backward: DelayLine::new(cfg.link.delay_rev_ns, None),
            rev_bottleneck,
            rev_wake: None,
            dir,
            routed_acks,
            acks_in_router: if routed_acks { vec![VecDeque::new(); n] } else { Vec::new() },
            next_ack_id: 0,
            ack_scratch: Vec::new(),
            cfg,
            q,
            senders,
            receivers,
            datagrams,
            any_datagram,
            started: vec![false; n],
            completed: vec![None; n],
            released: vec![false; n],
            sizes,
            access,
            acks,
            ack_agg,
            bottleneck,
            bottleneck_wake: None,
            delack: vec![Timer::default(); n],
            out: Vec::new(),
            timers: Vec::new(),
            telemetry,
            bpf_fault,
            gro: Default::default(),
            poll_at: [None; 2],
            horizon: 0,
        })
    }

    /// Runs to the configured duration.
    pub fn run(mut self) -> SimOutput {
        let end = self.cfg.duration_ns;
        self.run_until(end);
        self.finish()
    }

    /// Runs to the configured duration like [`run`](Self::run), calling `keep_going` after every
    /// `every` events and stopping early (`None`) when it returns false: how a caller lets the
    /// user interrupt a long run. The check sees nothing of the simulation, so a run that
    /// completes is the same, bit for bit, as [`run`](Self::run).
    pub fn run_checked(mut self, every: u64, mut keep_going: impl FnMut() -> bool) -> Option<SimOutput> {
        let end = self.cfg.duration_ns;
        self.horizon = end;
        let every = every.max(1);
        let mut n: u64 = 0;
        while let Some((now, ev)) = self.q.pop_until(end) {
            self.handle(now, ev);
            n += 1;
            if n % every == 0 {
                if !keep_going() {
                    return None;
                }
                if self.faulted() {
                    break;
                }
            }
        }
        Some(self.finish())
    }

    /// Processes every event up to and including time `t`, or up to a BPF congestion
    /// control's run-time error.
    pub fn run_until(&mut self, t: Nanos) {
        self.horizon = t;
        let mut n: u64 = 0;
        while let Some((now, ev)) = self.q.pop_until(t) {
            self.handle(now, ev);
            n += 1;
            if n % 32_768 == 0 && self.faulted() {
                break;
            }
        }
    }

    fn faulted(&self) -> bool {
        self.bpf_fault.lock().map_or(true, |f| f.is_some())
    }

    /// Puts what sender `f` emitted on its access line and queues the timers it armed.
    fn flush(&mut self, now: Nanos, f: u32) {
        if let Some(c) = self.capture.as_mut() {
            for p in &self.out {
                c.data_sent(now, p);
            }
        }
        for p in self.out.drain(..) {
            if let Some(at) = self.access[f as usize].push(now, p, p.size) {
                self.q.push(at, Event::AccessHead(f));
            }
        }
        for (at, kind) in self.timers.drain(..) {
            self.q.push(at, Event::Timer(f, kind));
        }
    }

    fn handle(&mut self, now: Nanos, ev: Event) {
        match ev {
            Event::FlowStart(f) => {
                self.started[f as usize] = true;
                if let Some(d) = self.datagrams[f as usize].as_mut() {
                    let first = d.start(now);
                    self.q.push(first, Event::DatagramDue(f));
                } else {
                    self.with_sender(now, f, |s, now, io| s.connect(now, io));
                }
            }
            Event::DatagramDue(f) => {
                let d = self.datagrams[f as usize].as_mut().expect("a datagram flow");
                let (p, next) = d.emit(now);
                if let Some(at) = self.access[f as usize].push(now, p, p.size) {
                    self.q.push(at, Event::AccessHead(f));
                }
                if next <= self.cfg.duration_ns {
                    self.q.push(next, Event::DatagramDue(f));
                }
            }
            Event::AccessHead(f) if self.routed_acks && self.dir[f as usize] == Direction::Reverse => {
                while let Some(p) = self.access[f as usize].pop_due(now) {
                    self.enter_reverse(now, p);
                }
                if let Some(at) = self.access[f as usize].head_time() {
                    self.q.push(at, Event::AccessHead(f));
                }
            }
            Event::AccessHead(f) => {
                while let Some(p) = self.access[f as usize].pop_due(now) {
                    if let Some(c) = self.capture.as_mut() {
                        c.data_ingress(now, &p);
                    }
                    self.bottleneck.arrive(now, p);
                    // The first packet of a burst that finds the link idle goes into service
                    // before the next is queued, as a qdisc dequeues after each enqueue: it
                    // does not count against the queue's limit.
                    self.start_forward(now);
                }
                if let Some(at) = self.access[f as usize].head_time() {
                    self.q.push(at, Event::AccessHead(f));
                }
                if self.capture.is_some() {
                    self.note_service(now);
                }
            }
            Event::BottleneckWake => {
                if self.bottleneck_wake != Some(now) {
                    return;
                }
                // Departures follow one another without an event each while nothing else is
                // due before the next one: no other event can touch the queue in between, and
                // what they push keeps its order among the pending events.
                let mut t = now;
                // The next other event's time, looked up again only after a push (the loop
                // pops nothing): once per departure it was a good part of the loop's cost.
                let (mut pushed, mut next_event) = (self.q.pushed(), self.q.peek_time());
                loop {
                    let (p, next) = self.bottleneck.wake(t);
                    if let Some(p) = p {
                        if self.routed_acks && p.carried_ack().is_some() {
                            self.ack_leaves_router(t, p);
                        } else if let Some(at) = self.forward.push(t, p, p.size) {
                            self.q.push(at, Event::ForwardHead);
                        }
                    }
                    self.bottleneck_wake = next;
                    if self.capture.is_some() {
                        self.note_service(t);
                    }
                    if self.q.pushed() != pushed {
                        (pushed, next_event) = (self.q.pushed(), self.q.peek_time());
                    }
                    match next {
                        Some(at) if at <= self.horizon && next_event.is_none_or(|e| e > at) => t = at,
                        Some(at) => {
                            self.q.push(at, Event::BottleneckWake);
                            break;
                        }
                        None => break,
                    }
                }
            }
            Event::ForwardHead => self.nic_interrupt(now, Side::Forward),
            Event::ReverseWake => {
                if self.rev_wake != Some(now) {
                    return;
                }
                let b = self.rev_bottleneck.as_mut().expect("a reverse bottleneck");
                let (p, next) = b.wake(now);
                if let Some(p) = p {
                    if p.carried_ack().is_some() {
                        self.ack_leaves_router(now, p);
                    } else if let Some(at) = self.backward.push(now, p, p.size) {
                        self.q.push(at, Event::BackwardHead);
                    }
                }
                self.rev_wake = next;
                if let Some(at) = next {
                    self.q.push(at, Event::ReverseWake);
                }
            }
            Event::BackwardHead => self.nic_interrupt(now, Side::Backward),
            Event::AckHead(f) if self.any_datagram && self.datagrams[f as usize].is_some() => {
                let d = self.datagrams[f as usize].as_mut().expect("a datagram flow");
                while let Some(reply) = self.acks[f as usize].pop_due(now) {
                    d.reply(now, &reply);
                }
                if let Some(at) = self.acks[f as usize].head_time() {
                    self.q.push(at, Event::AckHead(f));
                }
            }
            Event::AckHead(f) => {
                while let Some(ack) = self.acks[f as usize].pop_due(now) {
                    if let Some(c) = self.capture.as_mut() {
                        c.ack_received(now, &ack);
                    }
                    if ack.is_syn_ack() {
                        self.with_sender(now, f, |s, now, io| s.on_syn_ack(now, &ack, io));
                    } else {
                        self.with_sender(now, f, |s, now, io| s.on_ack(now, &ack, io));
                    }
                }
                if let Some(at) = self.acks[f as usize].head_time() {
                    self.q.push(at, Event::AckHead(f));
                }
                let f = f as usize;
                if !self.released[f] && self.senders[f].is_done() {
                    self.senders[f].release_buffers();
                    self.receivers[f].release_buffers();
                    self.access[f].shrink_to_fit();
                    self.acks[f].shrink_to_fit();
                    self.released[f] = true;
                }
            }
            Event::AckRelease(f) => {
                let (out, next) = self.ack_agg[f as usize].release(now);
                if self.routed_acks {
                    self.ack_scratch.extend(out);
                } else {
                    for ack in out {
                        if let Some(at) = self.acks[f as usize].push(now, ack, ACK_SIZE) {
                            self.q.push(at, Event::AckHead(f));
                        }
                    }
                }
                if let Some(at) = next {
                    self.q.push(at, Event::AckRelease(f));
                }
                let mut released = std::mem::take(&mut self.ack_scratch);
                for ack in released.drain(..) {
                    self.ack_onward(now, ack);
                }
                self.ack_scratch = released;
            }
            Event::Timer(f, TimerKind::DelAck) => match self.delack[f as usize].on_pop(now) {
                TimerPop::Fire => {
                    if let Some(ack) = self.receivers[f as usize].on_timer(now) {
                        self.send_ack(now, ack);
                    }
                    self.sync_delack(f as usize);
                    self.note_completion(now, f as usize);
                }
                TimerPop::Requeue(at) => self.q.push(at, ev),
                TimerPop::Stale => {}
            },
            Event::Timer(f, kind) => match self.senders[f as usize].timers[kind as usize].on_pop(now) {
                TimerPop::Fire => self.with_sender(now, f, |s, now, io| s.on_timer(now, kind, io)),
                TimerPop::Requeue(at) => self.q.push(at, ev),
                TimerPop::Stale => {}
            },
            Event::Sample => {
                self.telemetry.sample(
                    now,
                    &self.senders,
                    &self.receivers,
                    &self.datagrams,
                    &self.started,
                    &self.completed,
                    &mut self.bottleneck,
                    self.rev_bottleneck.as_mut(),
                );
                let next = now + self.cfg.sample_interval_ns;
                if next <= self.cfg.duration_ns {
                    self.q.push(next, Event::Sample);
                }
            }
            Event::CapacityChange(i) => {
                let rate = self.cfg.link.schedule[i as usize].capacity_bps;
                self.bottleneck.set_rate(rate);
            }
            Event::DelayChange(i) => {
                let c = &self.cfg.link.delay_schedule[i as usize];
                self.forward.set_delay(c.delay_fwd_ns);
                self.backward.set_delay(c.delay_rev_ns);
                for (line, d) in self.acks.iter_mut().zip(&self.dir) {
                    line.set_delay(match d {
                        Direction::Forward => c.delay_rev_ns,
                        Direction::Reverse => c.delay_fwd_ns,
                    });
                }
            }
        }
    }

    /// A frame reached the receiving host of `side` (the forward line's head, or the backward
    /// line's): the NIC's interrupt, which polls at once or `coalesce_ns` after the first frame
    /// of a batch ([`crate::nic`]).
    fn nic_interrupt(&mut self, now: Nanos, side: Side) {
        let coalesce = self.cfg.link.receiver_nic.coalesce_ns;
        if coalesce > 0 {
            let armed = &mut self.poll_at[side as usize];
            match *armed {
                None => {
                    *armed = Some(now + coalesce);
                    self.q.push(now + coalesce, side.event());
                    return;
                }
                Some(t) if now < t => return,
                Some(_) => *armed = None,
            }
        }
        self.napi_poll(now, side);
        if let Some(at) = self.line(side).head_time() {
            self.q.push(at, side.event());
        }
    }

    fn line(&mut self, side: Side) -> &mut DelayLine<DataPacket> {
        match side {
            Side::Forward => &mut self.forward,
            Side::Backward => &mut self.backward,
        }
    }

    /// The NAPI polls at `now`: every frame that has arrived, `budget` to a poll, TCP data
    /// through GRO, each poll's held skbs flushed at its end.
    fn napi_poll(&mut self, now: Nanos, side: Side) {
        let nic = &self.cfg.link.receiver_nic;
        let (gro, budget) = (nic.gro, nic.budget);
        let mut left = budget;
        while let Some(p) = self.line(side).pop_due(now) {
            let f = p.flow as usize;
            // Up as it is: without GRO, what is not TCP data, and a frame alone in its poll
            // (the common case without coalescing), which GRO would hold and hand over at the
            // poll's end, now.
            let direct = !gro
                || p.is_syn()
                || p.is_handshake_ack()
                || self.any_datagram && self.datagrams[f].is_some()
                || self.gro[side as usize].is_empty() && self.line(side).head_time().is_none_or(|t| t > now);
            if direct {
                self.deliver(now, p);
            } else {
                if let Some(c) = self.capture.as_mut() {
                    c.data_received(now, &p);
                }
                if let Some(skb) = self.gro[side as usize].receive(p) {
                    self.deliver_skb(now, skb);
                }
            }
            if gro {
                left -= 1;
                if left == 0 {
                    self.flush_gro(now, side);
                    left = budget;
                }
            }
        }
        self.flush_gro(now, side);
    }

    /// The end of a poll: the held skbs reach TCP, oldest first.
    #[inline]
    fn flush_gro(&mut self, now: Nanos, side: Side) {
        if self.gro[side as usize].is_empty() {
            return;
        }
        let mut gro = std::mem::take(&mut self.gro[side as usize]);
        for skb in gro.flush() {
            self.deliver_skb(now, skb);
        }
        self.gro[side as usize] = gro;
    }

    /// A packet reaches its receiving endpoint on its own (no GRO).
    fn deliver(&mut self, now: Nanos, p: DataPacket) {
        let f = p.flow as usize;
        if let Some(c) = self.capture.as_mut() {
            c.data_received(now, &p);
        }
        if self.any_datagram {
            if let Some(d) = self.datagrams[f].as_mut() {
                if let Some(reply) = d.arrive(now, &p) {
                    self.send_ack(now, reply);
                }
                return;
            }
        }
        if p.is_syn() {
            let syn_ack = self.receivers[f].on_syn(now, &p);
            self.send_ack(now, syn_ack);
            return;
        }
        if p.is_handshake_ack() {
            self.receivers[f].on_handshake_ack(now);
            return;
        }
        self.deliver_skb(now, Skb::single(p));
    }

    /// TCP data reaches its receiver: one segment, or a GRO skb.
    #[inline]
    fn deliver_skb(&mut self, now: Nanos, skb: Skb) {
        let f = skb.first.flow as usize;
        let acks = self.receivers[f].on_skb(now, &skb);
        acks.send_each(|a| self.send_ack(now, a));
        self.sync_delack(f);
        self.note_completion(now, f);
    }

    /// A sized flow is complete when its application has read its last byte.
    #[inline]
    fn note_completion(&mut self, now: Nanos, f: usize) {
        if let Some(size) = self.sizes[f] {
            if self.completed[f].is_none() && self.receivers[f].read_bytes >= size {
                self.completed[f] = Some(now);
            }
        }
    }

    /// A reverse flow's packet leaves its access line: into the reverse bottleneck, or straight
    /// onto the backward line when the reverse path is unconstrained.
    fn enter_reverse(&mut self, now: Nanos, p: DataPacket) {
        match self.rev_bottleneck.as_mut() {
            Some(b) => {
                b.arrive(now, p);
                self.start_reverse(now);
            }
            None => {
                if let Some(at) = self.backward.push(now, p, p.size) {
                    self.q.push(at, Event::BackwardHead);
                }
            }
        }
    }

    /// Starts the forward bottleneck if it is idle and a packet waits.
    #[inline]
    fn start_forward(&mut self, now: Nanos) {
        if self.bottleneck_wake.is_none() {
            if let Some(at) = self.bottleneck.try_begin(now) {
                self.bottleneck_wake = Some(at);
                self.q.push(at, Event::BottleneckWake);
            }
        }
    }

    /// Starts the reverse bottleneck if it is idle and a packet waits.
    fn start_reverse(&mut self, now: Nanos) {
        if self.rev_wake.is_none() {
            if let Some(at) = self.rev_bottleneck.as_mut().and_then(|b| b.try_begin(now)) {
                self.rev_wake = Some(at);
                self.q.push(at, Event::ReverseWake);
            }
        }
    }

    /// An ACK on its way back, after any aggregation: a reverse flow's crosses the forward
    /// bottleneck, a forward flow's the reverse one when there is one, else its ACK line.
    fn ack_onward(&mut self, now: Nanos, ack: AckPacket) {
        let f = ack.flow as usize;
        if self.routed_acks {
            let reverse = self.dir[f] == Direction::Reverse;
            if reverse || self.rev_bottleneck.is_some() {
                let id = self.next_ack_id;
                self.next_ack_id += 1;
                self.acks_in_router[f].push_back((id, ack));
                let carrier = DataPacket::ack_carrier(ack.flow, id, now);
                if reverse {
                    self.bottleneck.arrive(now, carrier);
                    self.start_forward(now);
                } else {
                    self.rev_bottleneck.as_mut().expect("checked").arrive(now, carrier);
                    self.start_reverse(now);
                }
                return;
            }
        }
        if let Some(at) = self.acks[f].push(now, ack, ACK_SIZE) {
            self.q.push(at, Event::AckHead(ack.flow));
        }
    }

    /// An ACK's carrier left a bottleneck: the ACK goes on along its flow's ACK line. ACKs
    /// whose carriers the queue dropped are skipped (they sit before it in the flow's order).
    fn ack_leaves_router(&mut self, now: Nanos, p: DataPacket) {
        let id = p.carried_ack().expect("an ACK carrier");
        let waiting = &mut self.acks_in_router[p.flow as usize];
        let ack = loop {
            let (k, ack) = waiting.pop_front().expect("the carrier's ACK waits beside the queue");
            debug_assert!(k <= id, "a flow's ACKs leave in order");
            if k == id {
                break ack;
            }
        };
        if let Some(at) = self.acks[p.flow as usize].push(now, ack, ACK_SIZE) {
            self.q.push(at, Event::AckHead(p.flow));
        }
    }

    /// Points flow `f`'s receiver timer at the receiver's next deadline.
    fn sync_delack(&mut self, f: usize) {
        match self.receivers[f].timer_deadline() {
            Some(at) => {
                if self.delack[f].deadline() != Some(at) {
                    if let Some(t) = self.delack[f].arm(at) {
                        self.q.push(t, Event::Timer(f as u32, TimerKind::DelAck));
                    }
                }
            }
            None => self.delack[f].cancel(),
        }
    }

    /// Captures only: a packet that entered service since the last look left the queue now.
    fn note_service(&mut self, now: Nanos) {
        let cur = self.bottleneck.in_service().copied();
        if cur.is_some() && cur != self.in_service {
            if let (Some(c), Some(p)) = (self.capture.as_mut(), cur.as_ref()) {
                c.data_egress(now, p);
            }
        }
        self.in_service = cur;
    }

    fn send_ack(&mut self, now: Nanos, ack: AckPacket) {
        if let Some(c) = self.capture.as_mut() {
            c.ack_sent(now, &ack);
        }
        if let Some(agg) = self.ack_agg.get_mut(ack.flow as usize) {
            if let Some(at) = agg.push(now, ack) {
                self.q.push(at, Event::AckRelease(ack.flow));
            }
            return;
        }
        self.ack_onward(now, ack);
    }

    fn with_sender(&mut self, now: Nanos, f: u32, op: impl FnOnce(&mut Sender, Nanos, &mut Io)) {
        let mut io = Io { out: &mut self.out, timers: &mut self.timers };
        op(&mut self.senders[f as usize], now, &mut io);
        self.flush(now, f);
    }

    pub fn now(&self) -> Nanos {
        self.q.peek_time().unwrap_or(0)
    }

    pub fn events_processed(&self) -> u64 {
        self.q.processed
    }

    fn finish(mut self) -> SimOutput {
        // The end of the trial closes the connections still open, tearing their algorithms
        // down (a failure there ends the trial like any other); not after a failure.
        if !self.faulted() {
            let end = self.cfg.duration_ns;
            for s in &mut self.senders {
                s.release_cc(end);
            }
        }
        let error = self.bpf_fault.lock().map_or_else(|p| p.into_inner().take(), |mut f| f.take());
        let n = self.senders.len();
        let mut fin = vec![FlowFinal::default(); n];
        for (i, f) in fin.iter_mut().enumerate() {
            let s = &self.senders[i];
            let r = &self.receivers[i];
            // A flow's data crosses one bottleneck (the other holds its ACKs); none on an
            // unconstrained reverse path.
            let data_router = match self.dir[i] {
                Direction::Forward => Some(&self.bottleneck),
                Direction::Reverse => self.rev_bottleneck.as_ref(),
            };
            let FlowRouterStats { drops, queued, marks, .. } = data_router.map_or_else(FlowRouterStats::default, |b| b.per_flow()[i]);
            // Packets, handshake included, for conservation; segments below count data only.
            f.sent_pkts = s.stats.sent_pkts + s.stats.handshake_pkts;
            f.delivered_pkts = r.arrived_pkts + r.handshake_pkts;
            f.dropped_pkts = drops;
            f.marked_pkts = marks;
            f.queued_pkts = queued;
            f.in_transit_pkts = self.access[i].len() as u64;
            f.delivered_bytes = r.delivered_bytes;
            f.retrans_segs = s.stats.retrans_segs;
            f.sent_segs = s.stats.sent_pkts;
            f.lost_segs = s.stats.lost_segs;
            f.rto_count = s.stats.rto_count;
            f.tlp_count = s.stats.tlp_count;
            f.undo_count = s.stats.undo_count;
            if let Some(d) = &self.datagrams[i] {
                f.sent_pkts = d.sent_pkts;
                f.delivered_pkts = d.received.pkts;
                f.delivered_bytes = d.received.payload_bytes;
                f.sent_segs = d.sent_pkts;
                f.lost_segs = d.lost();
            }
        }
        for p in self.forward.iter().chain(self.backward.iter()) {
            fin[p.flow as usize].in_transit_pkts += 1;
        }
        let sized = self.cfg.flows.iter().filter(|f| f.size_bytes.is_some()).count();
        let mut completions = CompletionSeries::with_capacity(sized);
        for (i, f) in self.cfg.flows.iter().enumerate() {
            if let (crate::config::Traffic::Tcp, Some(size)) = (&f.traffic, f.size_bytes) {
                completions.push(i as u32, f.start_ns, size, self.receivers[i].delivered_bytes, self.completed[i]);
            }
        }
        let (_, qb) = self.bottleneck.queue_len();
        let in_service = self.bottleneck.in_service().map_or(0, |p| p.size as u64);
        SimOutput {
            flows: self.telemetry.flows,
            router: self.telemetry.router,
            state_labels: self.telemetry.labels,
            flow_final: fin,
            router_final: *self.bottleneck.stats(),
            router_queued_bytes: qb + in_service,
            reverse_final: self.rev_bottleneck.as_ref().map(|b| {
                let in_service = b.in_service().map_or(0, |p| p.size as u64);
                (*b.stats(), b.queue_len().1 + in_service)
            }),
            events: self.q.processed,
            captures: self.capture.map_or_else(Vec::new, |c| c.finish()),
            completions,
            error,
        }
    }
}
