//! The whole link as the simulator models it (`--model CONFIG`): the emulator is the
//! bottleneck.
//!
//! ```text
//!   senders ─ left ═[ extra_delay of the frame's flow ]═[ Bottleneck: loss, qdisc, rate ]═[ delay_fwd ]═▶ right ─ receivers
//!   senders ◀ left ◀═[ delay_rev ]═[ reverse Bottleneck (link.reverse) ]═[ extra_delay ]═════════════════ right ◀ receivers
//! ```
//!
//! Each direction is a [`Path`]: the simulator's own pieces in the simulator's order
//! (`sim.rs`: a flow's access line with its `extra_delay`, the router's [`Bottleneck`] with
//! the trial's random loss, queue discipline ([`ccsim::qdisc`]) and rate, then the
//! propagation [`DelayLine`]), built from the trial's [`SimConfig`] with the simulator's
//! random streams, so the queue that decides drops and marks here is the simulator's code.
//! The reverse path has a bottleneck only with `link.reverse`, as in the simulator, where
//! ACKs otherwise take a plain line of `delay_rev`.
//!
//! A frame is a packet to the model when it is IPv4: its size is the IP packet's, its ECN
//! field the header's, and its flow the one whose port (`port_base + flow id`, as the backend
//! binds every flow's own end) it carries; the flow's `extra_delay` applies to the frames its
//! own end sends (data, SYN), as the simulator puts it on the flow's access line. The packet
//! carries its frame's slot as its sequence number; when it leaves the bottleneck with CE set
//! and its frame is not CE yet, CE is written into the frame ([`crate::frame::set_ce`]).
//! Packets the bottleneck drops come back through [`ccsim::qdisc::Counters::dropped`], so
//! their frames are freed.
//!
//! With `link.ack_aggregation`, the frames a flow's far end sends towards its own end (its
//! ACKs) wait in the simulator's [`AckAggregator`] for that flow before entering the path, as
//! the simulator's receiver hands its ACKs to it; a `delay_schedule` changes each direction's
//! propagation line at its times, and a `trace` is the bottleneck's own (`TraceLink`).
//!
//! Time is trial time: `CLOCK_MONOTONIC` less the trial's time 0, which the backend writes into
//! the stats file (`EPOCH_SLOT` in main.rs). Events run in time order: before a frame arrives at time `t`
//! (its kernel receive time), the model runs every event up to `t`, so the queue sees what
//! the simulator would. A frame read after the model has already passed its receive time
//! (rare: it was timestamped while the previous batch was processed) arrives at the model's
//! current time instead. The model is run lazily: nothing needs the bottleneck's own
//! events before a frame arrives or one becomes due on the delay line, so the emulator sleeps
//! until the earliest time a frame could be due ([`Path::next_due_bound`]).

use crate::frame;
use crate::tap::RouterTap;
use ccsim::config::{Direction, SimConfig};
use ccsim::link::{AckAggregator, Bottleneck, DelayLine, RouterStats};
use ccsim::packet::{DataPacket, Ecn};
use ccsim::rng::{stream, SimRng};
use ccsim::time::Nanos;

/// How frames are told apart: the first flow's port and each flow's direction and extra
/// delay.
pub struct Flows {
    pub port_base: u16,
    pub extra_delay: Vec<Nanos>,
    pub direction: Vec<Direction>,
}

impl Flows {
    pub fn from_config(cfg: &SimConfig, port_base: u16) -> Self {
        Flows {
            port_base,
            extra_delay: cfg.flows.iter().map(|f| f.extra_delay_ns).collect(),
            direction: cfg.flows.iter().map(|f| f.direction).collect(),
        }
    }

    fn n(&self) -> usize {
        self.extra_delay.len()
    }

    /// The flow of a packet with these ports, and whether its source is the flow's own end
    /// (the end that binds `port_base + flow`).
    pub fn classify(&self, ports: Option<(u16, u16)>) -> Option<(u32, bool)> {
        let (src, dst) = ports?;
        let of = |p: u16| p.checked_sub(self.port_base).map(|i| i as usize).filter(|&i| i < self.n());
        if let Some(f) = of(src) {
            return Some((f as u32, true));
        }
        of(dst).map(|f| (f as u32, false))
    }
}

/// A packet the model carries: its frame's slot in `seq`.
fn packet(slot: u32, flow: u32, f: &frame::Ipv4Frame, now: Nanos) -> DataPacket {
    DataPacket { flow, seq: slot as u64, size: f.ip_len, payload: f.payload, sent_at: now, ecn: f.ecn, cwr: false, ts_echo: None }
}

/// What a path did since it started, for the stats file and the report.
#[derive(Debug, Clone, Copy, Default)]
pub struct PathCounters {
    /// Frames passed on the line without the model (not IPv4).
    pub bypassed: u64,
    /// CE marks written into frames.
    pub ce_written: u64,
}

impl PathCounters {
    /// A mark the discipline set goes into the frame's IP header, once (a frame already CE is
    /// left as it is).
    fn write_ce(&mut self, frame: &mut [u8], ecn: Ecn) {
        if ecn == Ecn::Ce && frame::set_ce(frame) {
            self.ce_written += 1;
        }
    }
}

/// One direction of the link.
pub struct Path {
    /// A line per distinct extra delay on this side: flows with the same delay share one (a
    /// constant delay keeps their frames in order), so a workload of thousands of flows in a
    /// few groups has a few lines. Items are (frame slot, flow).
    extra: Vec<DelayLine<(u32, u32)>>,
    /// Each flow's line in `extra`, if its frames enter on this side with an extra delay.
    extra_of: Vec<Option<usize>>,
    pub bottleneck: Option<Bottleneck>,
    /// When the bottleneck next needs [`Bottleneck::wake`].
    wake: Option<Nanos>,
    /// The propagation delay after the bottleneck; items are frame slots.
    pub line: DelayLine<u32>,
    delay: Nanos,
    /// The link's `delay_schedule` for this direction: (time, new delay), in time order; the
    /// next to apply is `delay_changes[next_delay_change]`. As in the simulator, a change
    /// applies to the propagation line (frames entering it from then on), not to the flows'
    /// extra delays.
    delay_changes: Vec<(Nanos, Nanos)>,
    next_delay_change: usize,
    /// With `link.ack_aggregation`, each flow whose ACKs enter on this side: its aggregator
    /// (the simulator's, with its random stream) and its next release. The frames a flow's
    /// far end sends towards its own end (its ACKs, as the simulator's receiver sends them)
    /// wait there before the path, as in the simulator's `send_ack`.
    agg: Vec<Option<(AckAggregator<u32>, Option<Nanos>)>>,
    /// Frames waiting in the aggregators.
    agg_held: usize,
    /// The model's time: never goes backwards.
    clock: Nanos,
    unclassified_flow: u32,
    pub counters: PathCounters,
    /// The router's capture points (the forward path, with `--capture-dir`).
    pub tap: Option<RouterTap>,
}

/// Frames by slot: what the path reads and writes through.
pub trait FrameStore {
    fn frame(&mut self, slot: u32) -> &mut Vec<u8>;
    fn release(&mut self, slot: u32);
}

impl Path {
    /// The forward path (left to right) or the reverse one, from the trial's config.
    pub fn new(cfg: &SimConfig, flows: &Flows, forward: bool) -> Self {
        let n = flows.n();
        let side = if forward { Direction::Forward } else { Direction::Reverse };
        let mut delays: Vec<Nanos> = Vec::new();
        let extra_of = (0..n)
            .map(|i| {
                let d = flows.extra_delay[i];
                (d > 0 && flows.direction[i] == side).then(|| match delays.iter().position(|&x| x == d) {
                    Some(k) => k,
                    None => {
                        delays.push(d);
                        delays.len() - 1
                    }
                })
            })
            .collect();
        let extra = delays.iter().map(|&d| DelayLine::new(d, None)).collect();
        // One more per-flow counter than flows, for packets of no flow (none expected).
        let mut bottleneck = if forward {
            Some(Bottleneck::new(&cfg.link, n + 1, cfg.mtu, SimRng::new(cfg.seed, stream::LINK_LOSS), SimRng::new(cfg.seed, stream::QDISC)))
        } else {
            cfg.link.reverse.as_ref().map(|r| {
                let link = r.as_link(&cfg.link);
                Bottleneck::new(&link, n + 1, cfg.mtu, SimRng::new(cfg.seed, stream::REV_LINK_LOSS), SimRng::new(cfg.seed, stream::REV_QDISC))
            })
        };
        if let Some(b) = bottleneck.as_mut() {
            b.counters.log_drops();
        }
        let delay = if forward { cfg.link.delay_fwd_ns } else { cfg.link.delay_rev_ns };
        let mut delay_changes: Vec<(Nanos, Nanos)> = cfg
            .link
            .delay_schedule
            .iter()
            .map(|c| (c.at_ns, if forward { c.delay_fwd_ns } else { c.delay_rev_ns }))
            .collect();
        delay_changes.sort_by_key(|&(at, _)| at);
        let agg: Vec<Option<(AckAggregator<u32>, Option<Nanos>)>> = (0..n)
            .map(|i| {
                let a = cfg.link.ack_aggregation.as_ref()?;
                // a flow's ACKs travel the other way from its data
                (flows.direction[i] != side)
                    .then(|| (AckAggregator::new(a.clone(), SimRng::new(cfg.seed, stream::ACK_AGG_BASE + i as u64)), None))
            })
            .collect();
        // As in the simulator, a path that aggregates ACKs and has no bottleneck of its own sends
        // a released burst as frames back to back at the link's rate, not at one instant.
        let line_rate = (bottleneck.is_none() && agg.iter().any(Option::is_some)).then_some(cfg.link.capacity_bps);
        Path {
            agg,
            agg_held: 0,
            delay_changes,
            next_delay_change: 0,
            extra,
            extra_of,
            bottleneck,
            wake: None,
            line: DelayLine::new(delay, line_rate),
            delay,
            clock: Nanos::MIN,
            unclassified_flow: n as u32,
            counters: PathCounters::default(),
            tap: None,
        }
    }

    /// The shortest propagation delay this path has or will have (its delay schedule's too).
    pub fn min_delay(&self) -> Nanos {
        self.delay_changes.iter().map(|&(_, d)| d).chain([self.delay]).min().unwrap_or(0)
    }

    /// A frame (already in `store` at `slot`) was received at `at`.
    pub fn receive(&mut self, at: Nanos, slot: u32, flows: &Flows, store: &mut impl FrameStore) {
        let buf = store.frame(slot);
        let len = buf.len() as u32;
        let Some(f) = frame::parse(buf) else {
            self.counters.bypassed += 1;
            self.run_until(at, store);
            self.line.push(at.max(self.clock), slot, len);
            return;
        };
        let (flow, own_end) = flows.classify(f.ports).unwrap_or((self.unclassified_flow, false));
        if own_end {
            if let Some(k) = self.extra_of.get(flow as usize).copied().flatten() {
                self.extra[k].push(at, (slot, flow), len);
                return;
            }
        } else if self.agg.get(flow as usize).is_some_and(Option::is_some) {
            // releases due before this ACK come first
            self.run_until(at, store);
            let t = at.max(self.clock);
            let Some(Some((a, release))) = self.agg.get_mut(flow as usize) else { unreachable!() };
            if let Some(r) = a.push(t, slot) {
                *release = Some(r);
            }
            self.agg_held += 1;
            return;
        }
        self.run_until(at, store);
        let t = at.max(self.clock);
        self.clock = t;
        self.arrive(t, packet(slot, flow, &f, t), store);
    }

    /// The earliest aggregator release: (time, flow).
    fn agg_head(&self) -> Option<(Nanos, usize)> {
        self.agg.iter().enumerate().filter_map(|(i, a)| a.as_ref().and_then(|(_, r)| r.map(|t| (t, i)))).min()
    }

    /// The earliest of the extra lines' heads.
    fn extra_head(&self) -> Option<(Nanos, usize)> {
        self.extra.iter().enumerate().filter_map(|(i, l)| l.head_time().map(|t| (t, i))).min()
    }

    /// Runs the model's events (bottleneck wake-ups, frames leaving their extra delay) up to
    /// and including `t`, in time order.
    pub fn run_until(&mut self, t: Nanos, store: &mut impl FrameStore) {
        loop {
            // A scheduled delay change at or before the next event applies first (the
            // simulator's DelayChange events sit in the same queue as the link's).
            if let Some(&(at, d)) = self.delay_changes.get(self.next_delay_change) {
                let next_event =
                    [self.wake, self.extra_head().map(|(e, _)| e), self.agg_head().map(|(e, _)| e)].into_iter().flatten().min();
                if at <= t && next_event.is_none_or(|e| at <= e) {
                    self.line.set_delay(d);
                    self.delay = d;
                    self.next_delay_change += 1;
                    continue;
                }
            }
            let extra = self.extra_head();
            let wake = self.wake;
            let agg = self.agg_head();
            let Some(next) = [wake, extra.map(|(e, _)| e), agg.map(|(e, _)| e)].into_iter().flatten().min() else {
                return;
            };
            if next > t {
                return;
            }
            let now = next.max(self.clock);
            self.clock = now;
            if let Some((at, i)) = agg.filter(|&(at, _)| at == next && wake != Some(next)) {
                let (a, release) = self.agg[i].as_mut().expect("a releasing aggregator");
                let (out, again) = a.release(at);
                let slots: Vec<u32> = out.collect();
                *release = again;
                self.agg_held -= slots.len();
                for slot in slots {
                    let buf = store.frame(slot);
                    match frame::parse(buf) {
                        Some(f) => self.arrive(now, packet(slot, i as u32, &f, now), store),
                        None => {
                            let len = buf.len() as u32;
                            self.line.push(now, slot, len);
                        }
                    }
                }
            } else if wake == Some(next) {
                let b = self.bottleneck.as_mut().expect("a wake-up needs a bottleneck");
                let (p, again) = b.wake(now);
                self.wake = again;
                if let Some(p) = p {
                    self.depart(now, p, store);
                }
                self.note_service(now, store);
                self.free_dropped(store);
            } else if let Some((_, i)) = extra {
                while let Some((slot, flow)) = self.extra[i].pop_due(next) {
                    let buf = store.frame(slot);
                    match frame::parse(buf) {
                        Some(f) => self.arrive(now, packet(slot, flow, &f, now), store),
                        None => {
                            let len = buf.len() as u32;
                            self.line.push(now, slot, len);
                        }
                    }
                }
            }
        }
    }

    /// A packet reaches the router at `now`.
    fn arrive(&mut self, now: Nanos, p: DataPacket, store: &mut impl FrameStore) {
        if let Some(tap) = self.tap.as_mut() {
            tap.ingress(now, store.frame(p.seq as u32));
        }
        match self.bottleneck.as_mut() {
            None => self.depart(now, p, store),
            Some(b) => {
                b.arrive(now, p);
                if self.wake.is_none() {
                    self.wake = b.try_begin(now);
                }
                self.note_service(now, store);
                self.free_dropped(store);
            }
        }
    }

    /// Captures only: a frame that entered service since the last look left the queue now (as
    /// the simulator's `note_service`); its CE mark, if the discipline set one, is written first
    /// so the record shows it.
    fn note_service(&mut self, now: Nanos, store: &mut impl FrameStore) {
        let Some(tap) = self.tap.as_mut() else { return };
        let cur = self.bottleneck.as_ref().and_then(|b| b.in_service()).map(|p| (p.seq as u32, p.ecn));
        if cur.map(|(slot, _)| slot) == tap.in_service {
            return;
        }
        tap.in_service = cur.map(|(slot, _)| slot);
        if let Some((slot, ecn)) = cur {
            let buf = store.frame(slot);
            self.counters.write_ce(buf, ecn);
            tap.egress(now, buf);
        }
    }

    /// A packet leaves the router at `now` (its last bit sent): the mark, then the line.
    fn depart(&mut self, now: Nanos, p: DataPacket, store: &mut impl FrameStore) {
        let slot = p.seq as u32;
        let buf = store.frame(slot);
        self.counters.write_ce(buf, p.ecn);
        self.line.push(now, slot, p.size);
    }

    fn free_dropped(&mut self, store: &mut impl FrameStore) {
        if let Some(log) = self.bottleneck.as_mut().and_then(|b| b.counters.dropped.as_mut()) {
            for p in log.drain(..) {
                store.release(p.seq as u32);
            }
        }
    }

    /// The earliest time a frame not yet on the line could become due: a frame on an extra
    /// line or in the bottleneck leaves no earlier than its next event plus the line's delay.
    pub fn next_due_bound(&self) -> Option<Nanos> {
        let model = [self.wake, self.extra_head().map(|(t, _)| t), self.agg_head().map(|(t, _)| t)]
            .into_iter()
            .flatten()
            .min()
            .map(|t| t + self.delay);
        [self.line.head_time(), model].into_iter().flatten().min()
    }

    /// Sets the bottleneck's rate (a capacity schedule), from `now` on.
    pub fn set_rate(&mut self, now: Nanos, rate_bps: u64, store: &mut impl FrameStore) {
        self.run_until(now, store);
        if let Some(b) = self.bottleneck.as_mut() {
            if b.rate_bps() != rate_bps {
                b.set_rate(rate_bps);
            }
        }
    }

    pub fn router_stats(&self) -> Option<RouterStats> {
        self.bottleneck.as_ref().map(|b| *b.stats())
    }

    /// Frames held by the path: on its lines and in its bottleneck (queued or in service).
    pub fn held(&self) -> usize {
        let extra: usize = self.extra.iter().map(|l| l.len()).sum::<usize>()
            + self.agg_held;
        let b = self.bottleneck.as_ref().map_or(0, |b| b.queue_len().0 as usize + b.in_service().is_some() as usize);
        extra + b + self.line.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ccsim::config::{AqmConfig, QueueConfig};
    use crate::frame::ETH_HEADER;
    use etherparse::PacketBuilder;

    struct Store(Vec<Option<Vec<u8>>>);

    impl FrameStore for Store {
        fn frame(&mut self, slot: u32) -> &mut Vec<u8> {
            self.0[slot as usize].as_mut().expect("a live frame")
        }
        fn release(&mut self, slot: u32) {
            assert!(self.0[slot as usize].take().is_some(), "released twice");
        }
    }

    impl Store {
        fn put(&mut self, f: Vec<u8>) -> u32 {
            self.0.push(Some(f));
            (self.0.len() - 1) as u32
        }
    }

    fn tcp(src_port: u16, dst_port: u16, payload: usize, tos: u8) -> Vec<u8> {
        let b = PacketBuilder::ethernet2([2; 6], [3; 6]).ipv4([10, 0, 0, 1], [10, 0, 0, 129], 64).tcp(src_port, dst_port, 1, 1000);
        let mut out = Vec::new();
        b.write(&mut out, &vec![0; payload]).unwrap();
        if tos != 0 {
            out[ETH_HEADER + 1] = tos;
            let (h, _) = etherparse::Ipv4Header::from_slice(&out[ETH_HEADER..]).unwrap();
            let sum = h.calc_header_checksum();
            out[ETH_HEADER + 10..ETH_HEADER + 12].copy_from_slice(&sum.to_be_bytes());
        }
        out
    }

    fn config(rate: u64, extra: &[Nanos], limit_bytes: u64) -> SimConfig {
        let mut c = SimConfig::dumbbell(rate, 10_000_000, 1.0);
        c.link.delay_fwd_ns = 10_000_000;
        c.link.delay_rev_ns = 5_000_000;
        c.link.queue = QueueConfig { limit_bytes: Some(limit_bytes), limit_packets: None };
        c.flows = extra.iter().map(|&e| ccsim::config::FlowConfig { extra_delay_ns: e, ..ccsim::config::FlowConfig::bulk("cubic") }).collect();
        c
    }

    /// Every frame's due time on the line, in order.
    fn drain(p: &mut Path, store: &mut Store) -> Vec<(Nanos, Vec<u8>)> {
        p.run_until(Nanos::MAX / 2, store);
        let mut out = vec![];
        while let Some(t) = p.line.head_time() {
            let slot = p.line.pop_due(t).unwrap();
            out.push((t, store.0[slot as usize].take().unwrap()));
        }
        out
    }

    #[test]
    fn frames_leave_at_the_simulators_departure_times_plus_the_delay() {
        // 12 Mbit/s: a 1500-byte packet takes 1 ms; three arrive together at t = 0.
        let cfg = config(12_000_000, &[0], 1_000_000);
        let flows = Flows::from_config(&cfg, 20_000);
        let mut p = Path::new(&cfg, &flows, true);
        let mut s = Store(vec![]);
        for _ in 0..3 {
            let slot = s.put(tcp(20_000, 5201, 1460, 0));
            p.receive(0, slot, &flows, &mut s);
        }
        let due: Vec<Nanos> = drain(&mut p, &mut s).into_iter().map(|(t, _)| t).collect();
        assert_eq!(due, vec![11_000_000, 12_000_000, 13_000_000]);
        let st = p.router_stats().unwrap();
        assert_eq!((st.arrivals_pkts, st.departures_pkts, st.departed_payload_bytes), (3, 3, 3 * 1460));
    }

    #[test]
    fn a_flows_extra_delay_applies_to_its_own_ends_frames_before_the_queue() {
        let cfg = config(12_000_000, &[0, 30_000_000, 30_000_000], 1_000_000);
        let flows = Flows::from_config(&cfg, 20_000);
        assert_eq!(Path::new(&cfg, &flows, true).extra.len(), 1, "one line per distinct delay");
        assert_eq!(Path::new(&cfg, &flows, false).extra.len(), 0, "forward flows' delay is on their side");
        assert_eq!(flows.classify(Some((20_001, 5201))), Some((1, true)));
        assert_eq!(flows.classify(Some((5201, 20_001))), Some((1, false)));
        assert_eq!(flows.classify(Some((5201, 20_003))), None);
        let mut p = Path::new(&cfg, &flows, true);
        let mut s = Store(vec![]);
        let a = s.put(tcp(20_001, 5201, 1460, 0)); // flow 1's data: 30 ms extra
        p.receive(0, a, &flows, &mut s);
        let b = s.put(tcp(20_000, 5201, 1460, 0)); // flow 0's data
        p.receive(0, b, &flows, &mut s);
        let c = s.put(tcp(5201, 20_001, 0, 0)); // an ACK towards flow 1's end: no extra delay
        p.receive(0, c, &flows, &mut s);
        let due: Vec<(Nanos, u16)> = drain(&mut p, &mut s)
            .into_iter()
            .map(|(t, f)| (t, u16::from_be_bytes([f[ETH_HEADER + 20], f[ETH_HEADER + 21]])))
            .collect();
        // flow 0's packet (1 ms), then the 40-byte ACK behind it, then flow 1's after 30 ms.
        assert_eq!(due, vec![(11_000_000, 20_000), (11_026_666, 5201), (41_000_000, 20_001)]);
    }

    #[test]
    fn codel_marks_are_written_into_ect_frames_and_drops_free_their_frames() {
        // A standing queue at 12 Mbit/s under CoDel with ECN: ECT(0) frames are marked, not
        // dropped; not-ECT frames are dropped and their slots released.
        for (tos, expect_marks) in [(0b10u8, true), (0, false)] {
            let mut cfg = config(12_000_000, &[0], 200_000);
            cfg.link.aqm = Some(AqmConfig::Codel(serde_json::from_str(r#"{"ecn": true}"#).unwrap()));
            let flows = Flows::from_config(&cfg, 20_000);
            let mut p = Path::new(&cfg, &flows, true);
            let mut s = Store(vec![]);
            // 2 packets per ms for 500 ms into a 1 packet/ms link.
            for i in 0..1000 {
                let slot = s.put(tcp(20_000, 5201, 1460, tos));
                p.receive(i * 500_000, slot, &flows, &mut s);
            }
            let out = drain(&mut p, &mut s);
            let st = p.router_stats().unwrap();
            let ce = out.iter().filter(|(_, f)| f[ETH_HEADER + 1] & 3 == 3).count() as u64;
            if expect_marks {
                assert!(st.marks.total() > 0);
                assert_eq!(ce, p.counters.ce_written);
                assert_eq!(ce, st.marks.total(), "each mark written once");
                for (_, f) in &out {
                    let (h, _) = etherparse::Ipv4Header::from_slice(&f[ETH_HEADER..]).unwrap();
                    assert_eq!(h.header_checksum, h.calc_header_checksum());
                }
            } else {
                assert_eq!((st.marks.total(), ce), (0, 0));
                assert!(st.drops.total() > 0);
            }
            // Every frame either left or was dropped, and each slot was freed exactly once.
            assert_eq!(out.len() as u64 + st.drops.total(), 1000);
            assert!(s.0.iter().all(Option::is_none));
            assert_eq!(p.held(), 0);
        }
    }

    #[test]
    fn the_router_tap_records_every_arrival_and_each_frame_as_it_starts_on_the_link() {
        // CoDel with ECN at 12 Mbit/s, 2 packets per ms into a 1 packet/ms link, half the
        // frames ECT(0), in a 200 KB buffer: marks, AQM drops and tail drops all happen.
        let mut cfg = config(12_000_000, &[0], 200_000);
        cfg.link.aqm = Some(AqmConfig::Codel(serde_json::from_str(r#"{"ecn": true}"#).unwrap()));
        cfg.capture = Some(serde_json::from_str(r#"{"ingress": true, "egress": true, "snaplen": 96}"#).unwrap());
        let dir = std::env::temp_dir().join(format!("linkemu-tap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let flows = Flows::from_config(&cfg, 20_000);
        let mut p = Path::new(&cfg, &flows, true);
        p.tap = RouterTap::open(dir.to_str().unwrap(), cfg.capture.as_ref().unwrap()).unwrap();
        p.tap.as_mut().unwrap().epoch_realtime = 1_700_000_000_000_000_000;
        let mut s = Store(vec![]);
        for i in 0..1000 {
            let slot = s.put(tcp(20_000, 5201, 1460, if i % 2 == 0 { 0b10 } else { 0 }));
            p.receive(i * 500_000, slot, &flows, &mut s);
        }
        let out = drain(&mut p, &mut s);
        let st = p.router_stats().unwrap();
        p.tap.take().unwrap().finish().unwrap();
        let read = |name: &str| -> Vec<(Nanos, Vec<u8>, u32)> {
            let f = std::fs::File::open(dir.join(name)).unwrap();
            let mut r = pcap_file::pcap::PcapReader::new(f).unwrap();
            let mut v = vec![];
            // raw records: the checked reader refuses a frame cut by the snap length
            while let Some(pkt) = r.next_raw_packet() {
                let pkt = pkt.unwrap();
                let t = pkt.ts_sec as Nanos * 1_000_000_000 + pkt.ts_frac as Nanos;
                v.push((t - 1_700_000_000_000_000_000, pkt.data.to_vec(), pkt.orig_len));
            }
            v
        };
        let (rin, rout) = (read("rtr-in.pcap"), read("rtr-out.pcap"));
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(st.drops.total() > 0 && st.marks.total() > 0);
        // Ingress: every arrival, dropped ones included, at its arrival time, cut to the snap
        // length with the wire length kept.
        assert_eq!(rin.len(), 1000);
        assert!(rin.iter().enumerate().all(|(i, (t, d, len))| *t == i as Nanos * 500_000 && d.len() == 96 && *len == 1514));
        // Egress: each departure once, at its departure time less its transmission (1 ms at
        // 12 Mbit/s for a 1500-byte packet), with the mark the line then carries.
        assert_eq!(rout.len() as u64, st.departures_pkts);
        assert_eq!(rout.len(), out.len());
        for ((t_out, rec, _), (due, frame)) in rout.iter().zip(&out) {
            assert_eq!(*t_out, due - 10_000_000 - 1_000_000);
            assert_eq!(rec[..], frame[..96]);
        }
        let ce = rout.iter().filter(|(_, d, _)| d[ETH_HEADER + 1] & 3 == 3).count() as u64;
        assert_eq!(ce, st.marks.total());
    }

    #[test]
    fn a_delay_schedule_changes_the_line_for_frames_entering_after_it() {
        // 12 Mbit/s (1 ms per packet), 10 ms forward; from 20 ms on, 30 ms forward.
        let mut cfg = config(12_000_000, &[0], 1_000_000);
        cfg.link.delay_schedule =
            vec![ccsim::config::DelayChange { at_ns: 20_000_000, delay_fwd_ns: 30_000_000, delay_rev_ns: 5_000_000 }];
        let flows = Flows::from_config(&cfg, 20_000);
        let mut p = Path::new(&cfg, &flows, true);
        assert_eq!(p.min_delay(), 10_000_000);
        let mut s = Store(vec![]);
        for at in [0, 18_500_000, 25_000_000] {
            let slot = s.put(tcp(20_000, 5201, 1460, 0));
            p.receive(at, slot, &flows, &mut s);
        }
        let due: Vec<Nanos> = drain(&mut p, &mut s).into_iter().map(|(t, _)| t).collect();
        // The second leaves the bottleneck at 19.5 ms, before the change: 10 ms still.
        assert_eq!(due, vec![11_000_000, 29_500_000, 56_000_000]);
    }

    #[test]
    fn periodic_ack_aggregation_releases_a_flows_acks_together_at_each_period_back_to_back() {
        // ACKs of flow 0 (towards its own end, port 20000) on the reverse path wait for the
        // next multiple of 4 ms, then take the 5 ms reverse line; flow 0's data is not held.
        let mut cfg = config(12_000_000, &[0], 1_000_000);
        cfg.link.ack_aggregation = Some(ccsim::config::AckAggregationConfig::Periodic { interval_ns: 4_000_000 });
        let flows = Flows::from_config(&cfg, 20_000);
        assert!(Path::new(&cfg, &flows, true).agg.iter().all(Option::is_none), "data is not aggregated");
        let mut p = Path::new(&cfg, &flows, false);
        let mut s = Store(vec![]);
        for at in [500_000, 1_500_000, 3_900_000, 4_100_000] {
            let slot = s.put(tcp(5201, 20_000, 0, 0));
            p.receive(at, slot, &flows, &mut s);
        }
        assert_eq!(p.held(), 4);
        let due: Vec<Nanos> = drain(&mut p, &mut s).into_iter().map(|(t, _)| t).collect();
        // Each burst leaves back to back at the link's rate: 40-byte ACKs take 26.67 us at 12 Mbit/s.
        assert_eq!(due, vec![9_026_666, 9_053_333, 9_080_000, 13_026_666]);
        assert_eq!(p.held(), 0);
    }

    #[test]
    fn the_model_time_never_goes_back_for_a_late_read_frame() {
        let cfg = config(12_000_000, &[0], 1_000_000);
        let flows = Flows::from_config(&cfg, 20_000);
        let mut p = Path::new(&cfg, &flows, true);
        let mut s = Store(vec![]);
        for at in [5_000_000, 5_500_000] {
            let slot = s.put(tcp(20_000, 5201, 1460, 0));
            p.receive(at, slot, &flows, &mut s);
        }
        // Both have left by 7 ms: the model's time is 7 ms.
        p.run_until(7_000_000, &mut s);
        let b = s.put(tcp(20_000, 5201, 1460, 0));
        p.receive(6_500_000, b, &flows, &mut s); // timestamped before the model's time
        let due: Vec<Nanos> = drain(&mut p, &mut s).into_iter().map(|(t, _)| t).collect();
        assert_eq!(due, vec![16_000_000, 17_000_000, 18_000_000]);
    }
}
