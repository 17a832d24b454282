//! Links and the bottleneck router: the one queue model, shared by the simulator and the
//! userspace link emulator.
//!
//! - [`DelayLine`]: a FIFO link with constant propagation delay and optional serialisation;
//!   packets wait in a ring buffer ordered by arrival time, so only its head needs an event.
//! - [`Bottleneck`]: the router's egress. On arrival a packet meets, in order, random loss
//!   (like netem's `loss`), an optional token-bucket policer (drops what does not conform) and
//!   the queue discipline ([`crate::qdisc`]: drop-tail like `bfifo`/`pfifo` by default, or an
//!   AQM). The queue drains at the link capacity, optionally behind a token-bucket shaper
//!   (like `tc tbf`: the head waits for tokens, peeked from the discipline). Capacity may
//!   change over time.
//!
//! - [`TraceLink`]: a bottleneck whose capacity follows a trace of delivery opportunities
//!   (Mahimahi's `LinkQueue`) instead of a rate.
//! - [`AckAggregator`]: a return path that holds ACKs and releases them in bursts.
//!
//! All arithmetic is in integers (nanoseconds, bits x nanoseconds), so long runs do not drift.
//! The model is driven by time passed in; it never reads a clock.

use crate::nic::ReceiverNicConfig;
use crate::packet::DataPacket;
use crate::problem::{Path, Problem};
use crate::qdisc::{AqmConfig, Qdisc, QueueConfig, Queued};
pub use crate::qdisc::{Counters, DropCause, FlowRouterStats, MarkCause, RouterStats};
use crate::rng::SimRng;
use crate::time::Nanos;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

// --- settings -------------------------------------------------------------------------------

/// The link's settings (`link` in the trial): the bottleneck's rate, propagation delays, queue
/// and discipline, and what else shapes the path.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkConfig {
    /// Bottleneck rate at the IP level: a `mtu`-byte packet takes mtu*8/capacity seconds.
    pub capacity_bps: u64,
    /// One-way propagation delay sender -> receiver (through the router).
    pub delay_fwd_ns: Nanos,
    /// One-way propagation delay receiver -> sender (the uncongested ACK path).
    pub delay_rev_ns: Nanos,
    pub queue: QueueConfig,
    #[serde(default)]
    pub loss: LossConfig,
    /// Optional token-bucket shaper in front of the link (like `tc tbf`): packets wait for tokens.
    #[serde(default)]
    pub shaper: Option<TokenBucketConfig>,
    /// Optional token-bucket policer at the router's ingress: non-conforming packets are dropped.
    #[serde(default)]
    pub policer: Option<TokenBucketConfig>,
    /// Capacity changes over time: at `at_ns` the link rate becomes `capacity_bps`.
    #[serde(default)]
    pub schedule: Vec<CapacityChange>,
    /// Propagation-delay changes over time (a route change): from `at_ns` on, packets
    /// entering the forward or ACK path take the new delay; none overtakes an earlier one.
    #[serde(default)]
    pub delay_schedule: Vec<DelayChange>,
    /// Sender access-link rate (NIC); `None` means packets reach the router back to back
    /// with no serialisation of their own.
    #[serde(default)]
    pub access_rate_bps: Option<u64>,
    /// Host jitter: each ACK is delayed by an extra uniform [0, jitter) on its way back
    /// (order kept), as interrupt and scheduling delays do on real hosts. 0 = none.
    #[serde(default)]
    pub jitter_ns: Nanos,
    /// Active queue management at the bottleneck; `None` is drop-tail. `queue` stays the
    /// hard limit under every discipline.
    #[serde(default)]
    pub aqm: Option<AqmConfig>,
    /// Capacity from a trace of delivery opportunities (Mahimahi's link traces) instead of
    /// `capacity_bps`, which then only sizes BDP-relative quantities.
    #[serde(default)]
    pub trace: Option<TraceConfig>,
    /// ACKs held and released in bursts on their way back (Wi-Fi, cellular, cable uplinks).
    #[serde(default)]
    pub ack_aggregation: Option<AckAggregationConfig>,
    /// The right-to-left path's own bottleneck, which reverse flows' data and forward flows'
    /// ACKs cross; `None` leaves that path unconstrained (a plain delay line).
    #[serde(default)]
    pub reverse: Option<ReverseLinkConfig>,
    /// The receiving hosts' NIC: GRO and interrupt coalescing (both ends' hosts alike).
    #[serde(default)]
    pub receiver_nic: ReceiverNicConfig,
}

/// The reverse path's bottleneck: the same router model as the forward one ([`Bottleneck`])
/// with its own rate, queue limit, queue discipline and random loss.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReverseLinkConfig {
    pub capacity_bps: u64,
    pub queue: QueueConfig,
    #[serde(default)]
    pub loss: LossConfig,
    #[serde(default)]
    pub aqm: Option<AqmConfig>,
}

impl ReverseLinkConfig {
    /// Its rate, queue, loss and discipline; problems are at `at` (`link.reverse`).
    pub fn check(&self, at: &Path, mtu: u32, out: &mut Vec<Problem>) {
        if self.capacity_bps == 0 {
            out.push(at.field("capacity_bps").problem("0: must be > 0"));
        }
        self.queue.check(&at.field("queue"), mtu, out);
        self.loss.check(&at.field("loss"), out);
        if let Some(a) = &self.aqm {
            a.check(&at.field("aqm"), out);
        }
    }

    /// The reverse bottleneck as a [`LinkConfig`] for [`Bottleneck::new`]: its own
    /// rate, queue, loss and discipline, none of the forward link's shaping or schedules.
    pub fn as_link(&self, fwd: &LinkConfig) -> LinkConfig {
        LinkConfig {
            loss: self.loss.clone(),
            aqm: self.aqm.clone(),
            ..LinkConfig::plain(self.capacity_bps, fwd.delay_rev_ns, fwd.delay_fwd_ns, self.queue.clone())
        }
    }
}

impl LinkConfig {
    /// Every setting of the link in range and consistent with the others, a packet being `mtu`
    /// bytes; problems are at `at` (`link`).
    pub fn check(&self, at: &Path, mtu: u32, out: &mut Vec<Problem>) {
        if self.capacity_bps == 0 {
            out.push(at.field("capacity_bps").problem("0: must be > 0"));
        }
        if let Some(t) = &self.trace {
            t.check(&at.field("trace"), out);
            if !self.schedule.is_empty() || self.shaper.is_some() {
                out.push(at.field("trace").problem("a trace sets the capacity over time; it takes no schedule and no shaper"));
            }
        }
        if let Some(a) = &self.ack_aggregation {
            a.check(&at.field("ack_aggregation"), out);
        }
        if self.delay_fwd_ns < 0 || self.delay_rev_ns < 0 {
            out.push(at.field("delay").problem("must be >= 0"));
        }
        if self.jitter_ns < 0 {
            out.push(at.field("jitter_ns").problem(format!("{}: must be >= 0", self.jitter_ns)));
        }
        self.queue.check(&at.field("queue"), mtu, out);
        self.loss.check(&at.field("loss"), out);
        if let Some(r) = &self.reverse {
            r.check(&at.field("reverse"), mtu, out);
        }
        for (name, tb) in [("shaper", &self.shaper), ("policer", &self.policer)] {
            if let Some(tb) = tb {
                tb.check(&at.field(name), mtu, out);
            }
        }
        for (i, c) in self.schedule.iter().enumerate() {
            let at = at.field("schedule").index(i);
            if c.capacity_bps == 0 {
                out.push(at.field("capacity_bps").problem("0: must be > 0"));
            }
            if c.at_ns < 0 {
                out.push(at.field("at_ns").problem(format!("{}: must be >= 0", c.at_ns)));
            }
        }
        for (i, c) in self.delay_schedule.iter().enumerate() {
            if c.at_ns < 0 || c.delay_fwd_ns < 0 || c.delay_rev_ns < 0 {
                out.push(at.field("delay_schedule").index(i).problem("times and delays must be >= 0"));
            }
        }
        if let Some(a) = &self.aqm {
            a.check(&at.field("aqm"), out);
        }
        self.receiver_nic.check(&at.field("receiver_nic"), out);
    }

    /// A fixed-rate drop-tail link with no loss, shaping, schedule, trace or reverse
    /// bottleneck: what every other setting adds to.
    pub fn plain(capacity_bps: u64, delay_fwd_ns: Nanos, delay_rev_ns: Nanos, queue: QueueConfig) -> Self {
        LinkConfig {
            capacity_bps,
            delay_fwd_ns,
            delay_rev_ns,
            queue,
            loss: LossConfig::None,
            shaper: None,
            policer: None,
            schedule: vec![],
            delay_schedule: vec![],
            access_rate_bps: None,
            jitter_ns: 0,
            aqm: None,
            trace: None,
            ack_aggregation: None,
            reverse: None,
            receiver_nic: ReceiverNicConfig::default(),
        }
    }
}

/// A link trace in Mahimahi's format: one delivery opportunity of
/// [`TRACE_OPPORTUNITY_BYTES`] per entry, at that many milliseconds from the
/// start of the trace; the trace repeats with the last entry's time as its period.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceConfig {
    pub opportunities_ms: Vec<u64>,
}

impl TraceConfig {
    /// At least one opportunity after 0 ms, in time order.
    pub fn check(&self, at: &Path, out: &mut Vec<Problem>) {
        let o = &self.opportunities_ms;
        if o.last().is_none_or(|&last| last == 0) {
            out.push(at.problem("needs at least one opportunity after 0 ms (the last one is the period)"));
        } else if let Some(i) = o.windows(2).position(|w| w[1] < w[0]) {
            out.push(at.problem(format!("entry {}: {} ms after {} ms: times must not decrease", i + 2, o[i + 1], o[i])));
        }
    }
}

/// How the ACK path aggregates: every ACK of a flow waits, and the waiting ACKs leave together.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "model", rename_all = "snake_case", deny_unknown_fields)]
pub enum AckAggregationConfig {
    /// ACKs wait for the next multiple of `interval_ns` (from time 0) and leave together, as
    /// behind a link that grants its uplink at a fixed period (DOCSIS request-grant, LTE
    /// scheduling).
    Periodic { interval_ns: Nanos },
    /// Wi-Fi-like: the first waiting ACK starts a channel access of random length, uniform in
    /// [0, `interval_ns`); then up to `max_acks` waiting ACKs leave together (one A-MPDU) and
    /// the rest wait for the next access.
    Wifi { interval_ns: Nanos, max_acks: u32 },
}

impl AckAggregationConfig {
    pub fn check(&self, at: &Path, out: &mut Vec<Problem>) {
        match *self {
            AckAggregationConfig::Periodic { interval_ns } | AckAggregationConfig::Wifi { interval_ns, .. } if interval_ns <= 0 => {
                out.push(at.field("interval_ns").problem(format!("{interval_ns}: must be > 0")))
            }
            AckAggregationConfig::Wifi { max_acks: 0, .. } => out.push(at.field("max_acks").problem("0: must be >= 1")),
            _ => {}
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum LossConfig {
    #[default]
    None,
    /// Independent loss with probability `p` per packet (netem `loss random p`).
    Bernoulli { p: f64 },
    /// Gilbert-Elliott bursts (netem `loss gemodel p r 1-h 1-k`): `p` good->bad, `r`
    /// bad->good transition probabilities per packet; loss probability `loss_good` in the good
    /// state and `loss_bad` in the bad state.
    GilbertElliott {
        p: f64,
        r: f64,
        #[serde(default)]
        loss_good: f64,
        #[serde(default = "one")]
        loss_bad: f64,
    },
}

fn one() -> f64 {
    1.0
}

impl LossConfig {
    /// Probabilities in [0, 1]; problems are at `at` (`link.loss`, `link.reverse.loss`).
    pub fn check(&self, at: &Path, out: &mut Vec<Problem>) {
        let probabilities: &[(&str, f64)] = match *self {
            LossConfig::None => &[],
            LossConfig::Bernoulli { p } => &[("p", p)],
            LossConfig::GilbertElliott { p, r, loss_good, loss_bad } => {
                &[("p", p), ("r", r), ("loss_good", loss_good), ("loss_bad", loss_bad)]
            }
        };
        for &(n, v) in probabilities {
            if !(0.0..=1.0).contains(&v) {
                out.push(at.field(n).problem(format!("{v}: must be in [0, 1]")));
            }
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenBucketConfig {
    pub rate_bps: u64,
    pub burst_bytes: u64,
}

impl TokenBucketConfig {
    /// A rate, and a bucket that holds a packet of `mtu` bytes.
    pub fn check(&self, at: &Path, mtu: u32, out: &mut Vec<Problem>) {
        if self.rate_bps == 0 {
            out.push(at.field("rate_bps").problem("0: must be > 0"));
        }
        if self.burst_bytes < mtu as u64 {
            out.push(at.field("burst_bytes").problem(format!("{}: must be at least one packet ({mtu} bytes)", self.burst_bytes)));
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CapacityChange {
    pub at_ns: Nanos,
    pub capacity_bps: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DelayChange {
    pub at_ns: Nanos,
    pub delay_fwd_ns: Nanos,
    pub delay_rev_ns: Nanos,
}


// --- the model ------------------------------------------------------------------------------

const NS_PER_S: u128 = 1_000_000_000;

/// Time to serialise `bytes` at `rate_bps`, carrying the sub-nanosecond remainder in `rem`
/// (units of 1/rate ns) so that back-to-back packets keep the exact average rate. The
/// remainder is below the rate, so it fits in 64 bits.
fn serialisation_ns(bytes: u32, rate_bps: u64, rem: &mut u64) -> Nanos {
    let total = bytes as u128 * 8 * NS_PER_S + *rem as u128;
    // The same quotient and remainder in 64 bits when the total fits (always, below 2 GB
    // packets): a 128-bit division is a library call several times slower, once per packet.
    if let Ok(t) = u64::try_from(total) {
        *rem = t % rate_bps;
        return (t / rate_bps) as Nanos;
    }
    *rem = (total % rate_bps as u128) as u64;
    (total / rate_bps as u128) as Nanos
}

/// [`serialisation_ns`] at one rate, back to back, without a division for a packet of the
/// size before: with that size's `bits x 1e9 = q x rate + r` kept, a packet carrying `rem`
/// takes `q` ns, one more when `r + rem` reaches the rate (both are below it), and leaves that
/// less the rate: the same quotient and remainder, as exact integers.
#[derive(Debug, Clone, Copy, Default)]
struct Serialiser {
    rem: u64,
    /// The last size divided out, at `rate`, and its quotient and remainder (`rate` 0: none).
    bytes: u32,
    rate: u64,
    q: u64,
    r: u64,
}

impl Serialiser {
    /// Inlined at every caller (once per packet at the bottleneck): the division-free step
    /// only; a new size or rate goes to [`Self::ns_slow`].
    #[inline(always)]
    fn ns(&mut self, bytes: u32, rate_bps: u64) -> Nanos {
        if bytes == self.bytes && rate_bps == self.rate && self.rem < rate_bps {
            self.step(rate_bps)
        } else {
            self.ns_slow(bytes, rate_bps)
        }
    }

    /// r, rem < rate < 2^62, so their sum fits.
    #[inline(always)]
    fn step(&mut self, rate_bps: u64) -> Nanos {
        let sum = self.r + self.rem;
        if sum >= rate_bps {
            self.rem = sum - rate_bps;
            (self.q + 1) as Nanos
        } else {
            self.rem = sum;
            self.q as Nanos
        }
    }

    #[cold]
    #[inline(never)]
    fn ns_slow(&mut self, bytes: u32, rate_bps: u64) -> Nanos {
        if bytes != self.bytes || rate_bps != self.rate {
            // Divide this size out once, when it fits in 64 bits (any packet) and the rate
            // keeps the sums below in range; else the division of every packet.
            let bits_ns = (bytes as u64).checked_mul(8 * NS_PER_S as u64);
            match bits_ns {
                Some(b) if rate_bps > 0 && rate_bps < 1 << 62 && b / rate_bps < 1 << 62 => {
                    self.bytes = bytes;
                    self.rate = rate_bps;
                    self.q = b / rate_bps;
                    self.r = b % rate_bps;
                }
                _ => return serialisation_ns(bytes, rate_bps, &mut self.rem),
            }
        }
        if self.rem >= rate_bps {
            return serialisation_ns(bytes, rate_bps, &mut self.rem);
        }
        self.step(rate_bps)
    }
}

/// A FIFO link: constant delay, optional rate. Items become due in push order.
#[derive(Debug)]
pub struct DelayLine<T> {
    delay: Nanos,
    rate_bps: Option<u64>,
    busy_until: Nanos,
    ser: Serialiser,
    q: VecDeque<(Nanos, T)>,
    /// Optional extra delay drawn uniformly in [0, max) per item; arrivals stay in order
    /// (an item never overtakes the one before it), like host processing jitter.
    jitter: Option<(Nanos, SimRng)>,
    last_at: Nanos,
}

impl<T: Copy> DelayLine<T> {
    pub fn new(delay: Nanos, rate_bps: Option<u64>) -> Self {
        DelayLine { delay, rate_bps, busy_until: 0, ser: Serialiser::default(), q: VecDeque::new(), jitter: None, last_at: 0 }
    }

    /// Adds up to `max` of random extra delay per item, drawn from `rng`.
    pub fn with_jitter(mut self, max: Nanos, rng: SimRng) -> Self {
        if max > 0 {
            self.jitter = Some((max, rng));
        }
        self
    }

    /// Puts `item` of `bytes` on the line at `now`. Returns the arrival time if the line was
    /// empty, i.e. when the caller must schedule an event for the new head.
    ///
    /// Inlined where it is called: most lines (propagation, access without a rate) have neither
    /// rate nor jitter, and their push, twice per data packet, is a few instructions beside
    /// the call it was; the rest is out of line in [`Self::arrival`].
    #[inline(always)]
    pub fn push(&mut self, now: Nanos, item: T, bytes: u32) -> Option<Nanos> {
        let at = if self.rate_bps.is_none() && self.jitter.is_none() {
            // FIFO: after a delay decrease, nothing overtakes the packet before it.
            (now + self.delay).max(self.last_at)
        } else {
            self.arrival(now, bytes)
        };
        self.last_at = at;
        debug_assert!(self.q.back().map_or(true, |&(t, _)| t <= at));
        let was_empty = self.q.is_empty();
        self.q.push_back((at, item));
        was_empty.then_some(at)
    }

    /// When an item of `bytes` put on the line at `now` arrives, on a line with a rate or
    /// jitter: after its serialisation behind the items before it, the delay and the jitter.
    #[inline(never)]
    fn arrival(&mut self, now: Nanos, bytes: u32) -> Nanos {
        let depart = match self.rate_bps {
            Some(r) => {
                let start = now.max(self.busy_until);
                self.busy_until = start + self.ser.ns(bytes, r);
                self.busy_until
            }
            None => now,
        };
        let mut at = depart + self.delay;
        if let Some((max, rng)) = self.jitter.as_mut() {
            at += (rng.uniform() * *max as f64) as Nanos;
        }
        // FIFO: after a delay decrease or with jitter, nothing overtakes the packet before it.
        at.max(self.last_at)
    }

    /// Pops the head if it is due at `now`.
    #[inline]
    pub fn pop_due(&mut self, now: Nanos) -> Option<T> {
        match self.q.front() {
            Some(&(t, _)) if t <= now => self.q.pop_front().map(|(_, x)| x),
            _ => None,
        }
    }

    pub fn head_time(&self) -> Option<Nanos> {
        self.q.front().map(|&(t, _)| t)
    }

    pub fn len(&self) -> usize {
        self.q.len()
    }

    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.q.iter().map(|(_, x)| x)
    }

    /// Gives back memory beyond what the items on the line now need.
    pub fn shrink_to_fit(&mut self) {
        self.q.shrink_to_fit();
    }

    pub fn set_delay(&mut self, delay: Nanos) {
        self.delay = delay;
    }
}

/// Token bucket in exact integer units: one token is one bit-nanosecond per second of rate,
/// i.e. a byte costs 8e9 tokens and the bucket gains `rate_bps` tokens per nanosecond.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate_bps: u64,
    cap: i128,
    tokens: i128,
    last: Nanos,
}

impl TokenBucket {
    pub fn new(cfg: &TokenBucketConfig) -> Self {
        let cap = cfg.burst_bytes as i128 * 8 * NS_PER_S as i128;
        TokenBucket { rate_bps: cfg.rate_bps, cap, tokens: cap, last: 0 }
    }

    fn refill(&mut self, now: Nanos) {
        let dt = (now - self.last).max(0) as i128;
        self.tokens = (self.tokens + dt * self.rate_bps as i128).min(self.cap);
        self.last = now;
    }

    fn cost(bytes: u32) -> i128 {
        bytes as i128 * 8 * NS_PER_S as i128
    }

    /// Takes tokens for `bytes` if available now.
    pub fn take(&mut self, now: Nanos, bytes: u32) -> bool {
        self.refill(now);
        let c = Self::cost(bytes);
        if self.tokens >= c {
            self.tokens -= c;
            true
        } else {
            false
        }
    }

    /// Earliest time at which `bytes` of tokens are available.
    pub fn ready_at(&mut self, now: Nanos, bytes: u32) -> Nanos {
        self.refill(now);
        let missing = Self::cost(bytes) - self.tokens;
        if missing <= 0 {
            now
        } else {
            let r = self.rate_bps as i128;
            now + ((missing + r - 1) / r) as Nanos
        }
    }
}

/// Random loss process, netem-style: drawn per arriving packet from the link's own stream.
#[derive(Clone)]
pub struct LossModel {
    cfg: LossConfig,
    bad: bool,
    rng: SimRng,
}

impl LossModel {
    pub fn new(cfg: LossConfig, rng: SimRng) -> Self {
        LossModel { cfg, bad: false, rng }
    }

    #[inline]
    pub fn drop_next(&mut self) -> bool {
        match self.cfg {
            LossConfig::None => false,
            LossConfig::Bernoulli { p } => self.rng.bernoulli(p),
            LossConfig::GilbertElliott { p, r, loss_good, loss_bad } => {
                // netem gemodel: transition first, then lose with the new state's probability.
                if self.bad {
                    if self.rng.bernoulli(r) {
                        self.bad = false;
                    }
                } else if self.rng.bernoulli(p) {
                    self.bad = true;
                }
                self.rng.bernoulli(if self.bad { loss_bad } else { loss_good })
            }
        }
    }
}

/// Bytes one trace entry can deliver: Mahimahi's `PACKET_SIZE` of 1504 bytes is one
/// 1500-byte IP packet and its 4-byte TUN header, so one entry is one MTU-sized packet.
pub const TRACE_OPPORTUNITY_BYTES: u32 = 1500;

/// A link that delivers at the opportunities of a trace, as Mahimahi's `LinkQueue` does: each
/// opportunity carries up to [`TRACE_OPPORTUNITY_BYTES`]; a packet larger than what is left
/// of one continues in the next, smaller ones share one; an opportunity that finds the queue
/// empty is lost. The trace repeats with the time of its last entry as the period.
#[derive(Debug, Clone)]
pub struct TraceLink {
    times_ns: Vec<Nanos>,
    period_ns: Nanos,
    /// The next unused opportunity: repetition and index.
    cycle: i64,
    next: usize,
    /// Bytes left in the opportunity last used, usable only at its instant `credit_at`.
    credit: u32,
    credit_at: Nanos,
}

impl TraceLink {
    pub fn new(cfg: &TraceConfig) -> Self {
        let times_ns: Vec<Nanos> = cfg.opportunities_ms.iter().map(|&ms| ms as Nanos * 1_000_000).collect();
        let period_ns = *times_ns.last().expect("validated: not empty");
        TraceLink { times_ns, period_ns, cycle: 0, next: 0, credit: 0, credit_at: -1 }
    }

    fn at(&self, cycle: i64, i: usize) -> Nanos {
        cycle * self.period_ns + self.times_ns[i]
    }

    /// Moves `next` to the first opportunity at or after `t` (never backwards).
    fn skip_to(&mut self, t: Nanos) {
        if self.at(self.cycle, self.next) >= t {
            return;
        }
        let mut cycle = (t / self.period_ns).max(self.cycle) - 1;
        loop {
            let i = self.times_ns.partition_point(|&x| cycle * self.period_ns + x < t);
            if i < self.times_ns.len() {
                if (cycle, i) > (self.cycle, self.next) {
                    (self.cycle, self.next) = (cycle, i);
                }
                return;
            }
            cycle += 1;
        }
    }

    fn advance(&mut self) {
        self.next += 1;
        if self.next == self.times_ns.len() {
            self.next = 0;
            self.cycle += 1;
        }
    }

    /// When a packet waiting at `now` can start to leave: now, if the opportunity in use has
    /// bytes left at this instant, else the next opportunity.
    pub fn ready_at(&mut self, now: Nanos) -> Nanos {
        if self.credit > 0 && self.credit_at == now {
            return now;
        }
        self.skip_to(now);
        self.at(self.cycle, self.next)
    }

    /// Sends `bytes` starting at `now` (a time [`Self::ready_at`] returned): the time its last
    /// byte is delivered.
    pub fn send(&mut self, now: Nanos, bytes: u32) -> Nanos {
        let mut need = bytes;
        if !(self.credit > 0 && self.credit_at == now) {
            self.credit = 0;
        }
        loop {
            if self.credit == 0 {
                self.skip_to(now);
                self.credit_at = self.at(self.cycle, self.next);
                self.credit = TRACE_OPPORTUNITY_BYTES;
                self.advance();
            }
            let take = need.min(self.credit);
            self.credit -= take;
            need -= take;
            if need == 0 {
                return self.credit_at;
            }
        }
    }

    /// Opportunities in (t0, t1].
    pub fn opportunities_in(&self, t0: Nanos, t1: Nanos) -> u64 {
        let below = |t: Nanos| -> i64 {
            // Opportunities at or before t, counted from time 0.
            if t < 0 {
                return 0;
            }
            // Entries reach the period itself, so pass c - 1 may end at t exactly and pass c
            // may begin there: count the passes before c - 1 whole, then both by time.
            let n = self.times_ns.len() as i64;
            let p = self.period_ns;
            let c = t / p;
            let before = |from: Nanos| self.times_ns.partition_point(|&x| x <= t - from) as i64;
            if c == 0 {
                before(0)
            } else {
                (c - 1) * n + before((c - 1) * p) + before(c * p)
            }
        };
        (below(t1) - below(t0)).max(0) as u64
    }

    /// Capacity over (now - window, now], IP bits per second.
    pub fn capacity_bps(&self, now: Nanos, window: Nanos) -> u64 {
        let t0 = (now - window).max(0);
        if now <= t0 {
            return 0;
        }
        let bits = self.opportunities_in(t0, now) as u128 * TRACE_OPPORTUNITY_BYTES as u128 * 8;
        (bits * NS_PER_S / (now - t0) as u128) as u64
    }
}

/// ACK aggregation on one flow's way back ([`AckAggregationConfig`]): ACKs wait here and
/// leave in bursts.
#[derive(Debug)]
pub struct AckAggregator<T> {
    cfg: AckAggregationConfig,
    waiting: VecDeque<T>,
    /// The next release, while ACKs wait.
    release_at: Option<Nanos>,
    rng: SimRng,
}

impl<T> AckAggregator<T> {
    pub fn new(cfg: AckAggregationConfig, rng: SimRng) -> Self {
        AckAggregator { cfg, waiting: VecDeque::new(), release_at: None, rng }
    }

    fn next_release(&mut self, now: Nanos) -> Nanos {
        match self.cfg {
            AckAggregationConfig::Periodic { interval_ns } => (now / interval_ns + 1) * interval_ns,
            AckAggregationConfig::Wifi { interval_ns, .. } => now + (self.rng.uniform() * interval_ns as f64) as Nanos,
        }
    }

    /// An ACK joins the waiting ones; returns the release time if the caller must schedule one.
    pub fn push(&mut self, now: Nanos, ack: T) -> Option<Nanos> {
        self.waiting.push_back(ack);
        if self.release_at.is_some() {
            return None;
        }
        let at = self.next_release(now);
        self.release_at = Some(at);
        Some(at)
    }

    /// At a release time: the ACKs that leave now (in order), and the next release if some
    /// are left waiting.
    pub fn release(&mut self, now: Nanos) -> (impl Iterator<Item = T> + '_, Option<Nanos>) {
        let n = match self.cfg {
            AckAggregationConfig::Periodic { .. } => self.waiting.len(),
            AckAggregationConfig::Wifi { max_acks, .. } => self.waiting.len().min(max_acks as usize),
        };
        let next = if n < self.waiting.len() { Some(self.next_release(now)) } else { None };
        self.release_at = next;
        (self.waiting.drain(..n), next)
    }
}

/// The bottleneck router's egress.
pub struct Bottleneck {
    rate_bps: u64,
    ser: Serialiser,
    qdisc: Box<dyn Qdisc>,
    in_service: Option<(DataPacket, Nanos)>,
    shaper: Option<TokenBucket>,
    policer: Option<TokenBucket>,
    /// Capacity from a trace instead of `rate_bps`.
    trace: Option<TraceLink>,
    loss: LossModel,
    /// The discipline's name (`fifo`, `codel`, ...).
    kind: &'static str,
    /// Drop, mark and per-flow counters, written by the router and its queue discipline.
    pub counters: Counters,
    pub sojourn: Sojourn,
}

/// Sojourn time of packets in the queue, from enqueue to the start of transmission:
/// cumulative sum and count, and the largest since the last [`Bottleneck::take_sojourn_max`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Sojourn {
    pub sum_ns: i128,
    pub count: u64,
    pub max_ns: Nanos,
}

impl Bottleneck {
    /// `qdisc_rng` is the queue discipline's own random stream.
    pub fn new(cfg: &LinkConfig, n_flows: usize, mtu: u32, loss_rng: SimRng, qdisc_rng: SimRng) -> Self {
        Bottleneck {
            rate_bps: cfg.capacity_bps,
            ser: Serialiser::default(),
            qdisc: crate::qdisc::build(cfg.aqm.as_ref(), &cfg.queue, mtu, cfg.capacity_bps, qdisc_rng),
            in_service: None,
            shaper: cfg.shaper.as_ref().map(TokenBucket::new),
            policer: cfg.policer.as_ref().map(TokenBucket::new),
            trace: cfg.trace.as_ref().map(TraceLink::new),
            loss: LossModel::new(cfg.loss.clone(), loss_rng),
            kind: crate::qdisc::kind(cfg.aqm.as_ref()),
            counters: Counters::new(n_flows),
            sojourn: Sojourn::default(),
        }
    }

    pub fn stats(&self) -> &RouterStats {
        &self.counters.stats
    }

    pub fn per_flow(&self) -> &[FlowRouterStats] {
        &self.counters.per_flow
    }

    /// The queue discipline's name (`fifo`, `codel`, ...).
    pub fn qdisc_kind(&self) -> &'static str {
        self.kind
    }

    pub fn rate_bps(&self) -> u64 {
        self.rate_bps
    }

    /// The capacity in force at `now`: the rate, or a trace's mean rate over the `window`
    /// before `now` (telemetry passes its sample interval, so samples tile the run).
    pub fn capacity_bps(&self, now: Nanos, window: Nanos) -> u64 {
        self.trace.as_ref().map_or(self.rate_bps, |t| t.capacity_bps(now, window))
    }

    /// Changes the link rate; a packet already being sent finishes at the old rate.
    pub fn set_rate(&mut self, rate_bps: u64) {
        self.rate_bps = rate_bps;
        self.ser.rem = 0;
    }

    /// Packets and bytes waiting (not counting the one being transmitted, as tc's backlog).
    pub fn queue_len(&self) -> (u64, u64) {
        self.qdisc.backlog()
    }

    pub fn in_service(&self) -> Option<&DataPacket> {
        self.in_service.as_ref().map(|(p, _)| p)
    }

    pub fn is_idle(&self) -> bool {
        self.in_service.is_none()
    }

    /// The largest sojourn since the last call (0 if no packet left the queue).
    pub fn take_sojourn_max(&mut self) -> Nanos {
        std::mem::take(&mut self.sojourn.max_ns)
    }

    /// A packet arrives at the router: random loss, then the policer, then the queue
    /// discipline, which queues it or drops it (or others).
    #[inline]
    pub fn arrive(&mut self, now: Nanos, p: DataPacket) {
        let c = &mut self.counters;
        c.stats.arrivals_pkts += 1;
        c.stats.arrival_bytes += p.size as u64;
        c.per_flow[p.flow as usize].arrivals += 1;
        if self.loss.drop_next() {
            c.drop_arrival(&p, DropCause::Random);
        } else if self.policer.as_mut().is_some_and(|tb| !tb.take(now, p.size)) {
            c.drop_arrival(&p, DropCause::Policer);
        } else {
            c.per_flow[p.flow as usize].queued += 1;
            self.qdisc.enqueue(now, Queued { pkt: p, enqueued_at: now }, c);
        }
    }

    /// If the link is idle and a packet waits, starts sending it (or waits for shaper tokens).
    /// Returns the time at which the caller must call [`Self::wake`] next, if any.
    #[inline]
    pub fn try_begin(&mut self, now: Nanos) -> Option<Nanos> {
        if let Some((_, done)) = self.in_service {
            return Some(done);
        }
        let c = &mut self.counters;
        if let Some(trace) = self.trace.as_mut() {
            // A packet leaves the queue at the opportunity that starts carrying it.
            self.qdisc.peek(now, c)?;
            let ready = trace.ready_at(now);
            if ready > now {
                return Some(ready);
            }
        }
        let q = match self.shaper.as_mut() {
            Some(tb) => {
                let size = self.qdisc.peek(now, c)?.pkt.size;
                let ready = tb.ready_at(now, size);
                if ready > now {
                    return Some(ready);
                }
                let took = tb.take(now, size);
                debug_assert!(took);
                self.qdisc.dequeue(now, c).expect("the peeked packet")
            }
            None => self.qdisc.dequeue(now, c)?,
        };
        let waited = now - q.enqueued_at;
        self.sojourn.sum_ns += waited as i128;
        self.sojourn.count += 1;
        self.sojourn.max_ns = self.sojourn.max_ns.max(waited);
        let head = q.pkt;
        let done = match self.trace.as_mut() {
            Some(trace) => trace.send(now, head.size),
            None => now + self.ser.ns(head.size, self.rate_bps),
        };
        self.in_service = Some((head, done));
        Some(done)
    }

    /// Called at a time returned by [`Self::try_begin`]: completes the packet in service if
    /// it is done (returning it) and returns the next wake-up time.
    #[inline]
    pub fn wake(&mut self, now: Nanos) -> (Option<DataPacket>, Option<Nanos>) {
        let mut out = None;
        if self.in_service.is_none() {
            // Idle until now (shaper tokens, a trace's next opportunity): start the head, which
            // on a trace link may also be delivered at once.
            self.try_begin(now);
        }
        if let Some((p, done)) = self.in_service {
            if done <= now {
                self.in_service = None;
                let st = &mut self.counters.stats;
                st.departures_pkts += 1;
                st.departed_bytes += p.size as u64;
                st.departed_payload_bytes += p.payload as u64;
                let f = &mut self.counters.per_flow[p.flow as usize];
                f.departures += 1;
                f.queued -= 1;
                out = Some(p);
            }
        }
        (out, self.try_begin(now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(rate: u64, limit_bytes: u64) -> LinkConfig {
        LinkConfig::plain(rate, 0, 0, QueueConfig { limit_bytes: Some(limit_bytes), limit_packets: None })
    }

    fn pkt(seq: u64) -> DataPacket {
        DataPacket { flow: 0, seq, size: 1500, payload: 1448, sent_at: 0, ecn: Default::default(), cwr: false, ts_echo: None }
    }

    /// Drives the bottleneck with `n` back-to-back packets arriving at t=0; returns departures.
    fn drain(b: &mut Bottleneck, n: u64) -> Vec<Nanos> {
        let mut wake = None;
        for i in 0..n {
            b.arrive(0, pkt(i));
            if wake.is_none() {
                wake = b.try_begin(0);
            }
        }
        let mut out = vec![];
        while let Some(t) = wake {
            let (p, next) = b.wake(t);
            if p.is_some() {
                out.push(t);
            }
            wake = next;
        }
        out
    }

    #[test]
    fn drop_tail_admits_up_to_the_byte_limit() {
        let mut b = Bottleneck::new(&cfg(80_000_000, 4500), 1, 1500, SimRng::new(1, 1), SimRng::new(1, 2));
        for i in 0..5 {
            b.arrive(0, pkt(i));
        }
        assert_eq!(b.queue_len(), (3, 4500));
        assert_eq!(b.stats().drops[DropCause::Overflow], 2);
    }

    #[test]
    fn serialisation_is_exact_over_many_packets() {
        // 1500 B at 7 Mb/s = 1714285.71 ns: the remainder must carry.
        let mut b = Bottleneck::new(&cfg(7_000_000, u64::MAX), 1, 1500, SimRng::new(1, 1), SimRng::new(1, 2));
        let d = drain(&mut b, 7000);
        let expect = 7000u128 * 1500 * 8 * NS_PER_S / 7_000_000;
        assert_eq!(*d.last().unwrap() as u128, expect);
    }

    #[test]
    fn serialiser_gives_the_divisions_quotients_and_remainders() {
        // Sizes that repeat and change, rates that divide and do not, one change of rate
        // (the remainder reset as set_rate does): every time and remainder as the division's.
        let mut rng = SimRng::new(7, 7);
        for &rate in &[7_000_000u64, 80_000_000, 10_000_000_000, 100_000_000_000, 999_999_937, 1 << 61] {
            let (mut s, mut rem) = (Serialiser::default(), 0u64);
            for i in 0..20_000 {
                let bytes = match i % 7 {
                    0 => 52,
                    1 => 29 + (rng.uniform() * 1471.0) as u32,
                    _ => 1500,
                };
                if i == 10_000 {
                    s.rem = 0;
                    rem = 0;
                }
                assert_eq!(s.ns(bytes, rate), serialisation_ns(bytes, rate, &mut rem), "rate {rate}, packet {i}");
                assert_eq!(s.rem, rem);
            }
        }
    }

    #[test]
    fn shaper_limits_departures_to_its_rate_after_the_burst() {
        let mut c = cfg(1_000_000_000, u64::MAX);
        c.shaper = Some(TokenBucketConfig { rate_bps: 10_000_000, burst_bytes: 3000 });
        let mut b = Bottleneck::new(&c, 1, 1500, SimRng::new(1, 1), SimRng::new(1, 2));
        let d = drain(&mut b, 1002);
        // Two packets go in the initial burst; once tokens are exhausted, departures are
        // exactly 1.2 ms apart (1500 B at 10 Mb/s).
        assert!(d[1] < 100_000, "burst of two sent at line rate");
        let span = d[1001] - d[2];
        let expect = 999 * 1_200_000;
        assert!((span - expect).abs() <= 1, "span {span} expected {expect}");
    }

    fn trace_link(ms: &[u64]) -> Bottleneck {
        let mut c = cfg(1_000_000, u64::MAX);
        c.trace = Some(TraceConfig { opportunities_ms: ms.to_vec() });
        Bottleneck::new(&c, 1, 1500, SimRng::new(1, 1), SimRng::new(1, 2))
    }

    #[test]
    fn a_trace_link_delivers_exactly_at_its_opportunities_and_repeats() {
        // Three opportunities at 2 ms (three packets together), one at 5 ms; period 5 ms.
        let mut b = trace_link(&[2, 2, 2, 5]);
        let d = drain(&mut b, 9);
        let ms = |x: i64| x * 1_000_000;
        assert_eq!(d, vec![ms(2), ms(2), ms(2), ms(5), ms(7), ms(7), ms(7), ms(10), ms(12)]);
        // The second pass adds the period (the last entry's time, 5 ms) to every entry, as
        // Mahimahi does.
        assert_eq!(b.trace.as_ref().unwrap().opportunities_in(0, ms(10)), 8);
        assert_eq!(b.trace.as_ref().unwrap().opportunities_in(ms(2), ms(7)), 4);
        assert_eq!(b.capacity_bps(ms(100), ms(100)), 80 * 1500 * 8 * 10);
    }

    #[test]
    fn a_trace_opportunity_lost_to_an_empty_queue_is_not_made_up() {
        let mut b = trace_link(&[1, 2, 3, 4]);
        // One packet at 0 leaves at 1 ms; the next arrives at 2.5 ms and waits for 3 ms.
        b.arrive(0, pkt(0));
        assert_eq!(b.try_begin(0), Some(1_000_000));
        assert!(b.wake(1_000_000).0.is_some());
        b.arrive(2_500_000, pkt(1));
        assert_eq!(b.try_begin(2_500_000), Some(3_000_000));
        assert_eq!(b.queue_len(), (1, 1500), "it waits in the queue, not in service");
        assert!(b.wake(3_000_000).0.is_some());
    }

    #[test]
    fn delay_line_serialises_and_delays_in_order() {
        let mut l: DelayLine<u32> = DelayLine::new(1000, Some(12_000_000_000));
        assert_eq!(l.push(0, 1, 1500), Some(1000 + 1000));
        assert_eq!(l.push(0, 2, 1500), None);
        assert_eq!(l.pop_due(1999), None);
        assert_eq!(l.pop_due(2000), Some(1));
        assert_eq!(l.head_time(), Some(3000));
    }
}
