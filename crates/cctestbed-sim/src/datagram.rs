//! Datagram traffic beside the TCP flows, both ends of each flow in one value:
//! - a UDP stream ([`UdpConfig`]): fixed-size IP packets at a constant bit rate, as
//!   `iperf3 -u -b RATE -l LEN` sends them, or in on/off periods of fixed or exponentially
//!   distributed lengths, as ns-3's `OnOffApplication` does (each on period restarts the packet
//!   clock; the draws come from the trial seed's stream for the flow). An on period shorter
//!   than one packet time sends only when the on time of such periods adds up to a packet, so
//!   the mean rate stays `rate x on / (on + off)`. The receiver counts what
//!   arrives, infers losses from gaps in the sequence numbers (as iperf3 does), and records
//!   each datagram's one-way delay (sender's send time to arrival at the receiver);
//! - echo probes ([`PingConfig`]): one probe every interval on a fixed clock (isochronous, like
//!   `irtt` and the UDP latency probes of Flent's RRUL), echoed by the receiver at once; the
//!   sender records the round trip, which crosses the bottleneck's queue one way and the
//!   uncongested return path the other. Probes not answered are inferred lost from gaps in
//!   the sequence of the replies.
//!
//! Sizes are IP packets; the payload is the size less the IPv4 and UDP headers
//! ([`UDP_HEADERS`]). Datagrams are never ECN-capable and never retransmitted.

use crate::packet::{AckPacket, DataPacket, Ecn, MAX_SACK_BLOCKS};
use crate::problem::{Path, Problem};
use crate::rng::{stream, SimRng};
use crate::time::Nanos;
use serde::{Deserialize, Serialize};

/// IPv4 (20) and UDP (8) header bytes.
pub const UDP_HEADERS: u32 = 28;

/// What a flow sends.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Traffic {
    /// A TCP connection (the flow's `cc`, window and ACK settings).
    #[default]
    Tcp,
    /// A UDP stream: constant bit rate, or on/off.
    Udp(UdpConfig),
    /// Isochronous echo probes measuring the round trip through the queues.
    Ping(PingConfig),
}

impl Traffic {
    pub fn name(&self) -> &'static str {
        match self {
            Traffic::Tcp => "tcp",
            Traffic::Udp(_) => "udp",
            Traffic::Ping(_) => "ping",
        }
    }
}

/// A UDP stream sending `size_bytes` IP packets at `rate_bps` (IP level, as the link's
/// capacity), continuously or in on periods separated by off periods.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UdpConfig {
    pub rate_bps: u64,
    pub size_bytes: u32,
    /// Mean length of an on period; `None` sends all the time (constant bit rate).
    #[serde(default)]
    pub on_ns: Option<Nanos>,
    /// Mean length of an off period; with `on_ns`.
    #[serde(default)]
    pub off_ns: Option<Nanos>,
    /// Period lengths drawn from exponential distributions of those means (the trial seed's
    /// stream for the flow), instead of fixed.
    #[serde(default)]
    pub exponential: bool,
}

/// One probe of `size_bytes` (IP packet) every `interval_ns`, echoed by the receiver.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PingConfig {
    pub interval_ns: Nanos,
    pub size_bytes: u32,
}

impl UdpConfig {
    /// A rate, a size that fits the `mtu`, and both periods or neither; problems are at `at`
    /// (`flows[2].traffic`).
    pub fn check(&self, at: &Path, mtu: u32, out: &mut Vec<Problem>) {
        if self.rate_bps == 0 {
            out.push(at.field("rate_bps").problem("0: must be > 0"));
        }
        check_size(at, self.size_bytes, mtu, out);
        match (self.on_ns, self.off_ns) {
            (None, None) => {}
            (Some(on), Some(off)) if on > 0 && off > 0 => {}
            (on, off) => out.push(at.problem(format!("on_ns {on:?}, off_ns {off:?}: give both, each > 0, or neither"))),
        }
    }
}

impl PingConfig {
    pub fn check(&self, at: &Path, mtu: u32, out: &mut Vec<Problem>) {
        if self.interval_ns <= 0 {
            out.push(at.field("interval_ns").problem(format!("{}: must be > 0", self.interval_ns)));
        }
        check_size(at, self.size_bytes, mtu, out);
    }
}

/// A datagram is one IP packet: its headers plus at least one byte, at most the MTU.
fn check_size(at: &Path, size: u32, mtu: u32, out: &mut Vec<Problem>) {
    if size <= UDP_HEADERS || size > mtu {
        out.push(at.field("size_bytes").problem(format!(
            "{size}: must be from {} to the mtu ({mtu}) bytes (an IP packet with its IPv4 and UDP headers)",
            UDP_HEADERS + 1
        )));
    }
}

#[derive(Debug, Clone)]
enum Pattern {
    Udp(UdpConfig),
    Ping(PingConfig),
}

/// Counters kept at a datagram flow's receiving end (UDP: the sink; ping: the sender, for the
/// replies): arrivals, and losses inferred from sequence gaps.
#[derive(Debug, Clone, Copy, Default)]
pub struct Arrivals {
    pub pkts: u64,
    pub payload_bytes: u64,
    /// Highest sequence number seen plus one.
    next_expected: u64,
}

impl Arrivals {
    fn note(&mut self, seq: u64, payload: u32) {
        self.pkts += 1;
        self.payload_bytes += payload as u64;
        self.next_expected = self.next_expected.max(seq + 1);
    }

    /// Datagrams missing below the highest one seen (the path keeps each flow's order).
    pub fn lost(&self) -> u64 {
        self.next_expected - self.pkts
    }
}

/// Sum and count of delay samples (ns), for per-interval means.
#[derive(Debug, Clone, Copy, Default)]
pub struct DelaySum {
    pub sum_ns: i128,
    pub n: u64,
    /// Smallest sample so far (`Nanos::MAX` before any).
    pub min_ns: Nanos,
}

impl DelaySum {
    fn add(&mut self, d: Nanos) {
        if self.n == 0 {
            self.min_ns = d;
        }
        self.sum_ns += d as i128;
        self.n += 1;
        self.min_ns = self.min_ns.min(d);
    }
}

/// One datagram flow: its sender's clock and counters, and its receiver's.
#[derive(Debug, Clone)]
pub struct DatagramFlow {
    flow: u32,
    pattern: Pattern,
    rng: SimRng,
    /// Start of the current on period (UDP) or of the probe clock (ping).
    period_start: Nanos,
    /// End of the current on period (`Nanos::MAX` when always on).
    period_end: Nanos,
    /// Packets sent in the current on period.
    in_period: u64,
    /// On time of periods shorter than one packet time not yet sent, in bit-nanoseconds at the
    /// rate (on time x rate; a packet takes size x 8 x 10^9 of it): such a period sends one
    /// packet, at its start, only when the credit it completes reaches a packet.
    credit: u128,
    /// No on period is looked for past this time (`Nanos::MAX` unless [`Self::until`]).
    horizon: Nanos,
    next_seq: u64,
    pub sent_pkts: u64,
    pub sent_payload_bytes: u64,
    /// At the receiver: data arrivals.
    pub received: Arrivals,
    /// UDP: one-way delays of the arrivals.
    pub one_way: DelaySum,
    /// Ping: replies back at the sender, and their round trips.
    pub replies: Arrivals,
    pub rtt: DelaySum,
}

impl DatagramFlow {
    pub fn udp(flow: u32, cfg: UdpConfig, rng: SimRng) -> Self {
        Self::new(flow, Pattern::Udp(cfg), rng)
    }

    pub fn ping(flow: u32, cfg: PingConfig, rng: SimRng) -> Self {
        Self::new(flow, Pattern::Ping(cfg), rng)
    }

    fn new(flow: u32, pattern: Pattern, rng: SimRng) -> Self {
        DatagramFlow {
            flow,
            pattern,
            rng,
            period_start: 0,
            period_end: Nanos::MAX,
            in_period: 0,
            credit: 0,
            horizon: Nanos::MAX,
            next_seq: 0,
            sent_pkts: 0,
            sent_payload_bytes: 0,
            received: Arrivals::default(),
            one_way: DelaySum::default(),
            replies: Arrivals::default(),
            rtt: DelaySum::default(),
        }
    }

    /// Flow `flow`'s source for `traffic` (None for tcp), on the trial seed's stream for that
    /// flow, in a trial of `duration`: the simulator and the kernel backend's sender
    /// ([`DatagramClock`]) both build it here, so both send the same datagrams at the same
    /// trial times, on/off draws included.
    pub fn for_traffic(flow: u32, traffic: &Traffic, seed: u64, duration: Nanos) -> Option<Self> {
        let rng = SimRng::new(seed, stream::DATAGRAM_BASE + flow as u64);
        match traffic {
            Traffic::Tcp => None,
            Traffic::Udp(u) => Some(Self::udp(flow, u.clone(), rng).until(duration)),
            Traffic::Ping(p) => Some(Self::ping(flow, p.clone(), rng)),
        }
    }

    /// The search for an on/off stream's next packet stops past `end` (the trial's end), where
    /// periods too short to send in would otherwise be skipped one by one without bound.
    pub fn until(mut self, end: Nanos) -> Self {
        self.horizon = end;
        self
    }

    pub fn is_ping(&self) -> bool {
        matches!(self.pattern, Pattern::Ping(_))
    }

    /// A period length of mean `mean` ns: fixed, or exponentially distributed.
    fn period(&mut self, mean: Nanos, exponential: bool) -> Nanos {
        if !exponential {
            return mean;
        }
        let u = self.rng.uniform();
        (-(mean as f64) * (1.0 - u).ln()).round() as Nanos
    }

    /// The flow starts at `now`; returns the time of its first packet (now).
    pub fn start(&mut self, now: Nanos) -> Nanos {
        self.period_start = now;
        if let Pattern::Udp(UdpConfig { on_ns: Some(on), exponential, .. }) = self.pattern {
            let len = self.period(on, exponential);
            self.period_end = now + len;
            if !self.sends_in_period() {
                return self.next_period();
            }
        }
        now
    }

    /// Whether the current on period sends: one at least a packet time long does (a packet at
    /// each packet time from its start while within it, as `OnOffApplication` does); a shorter
    /// one adds its length to the credit, and sends one packet when the credit reaches a packet
    /// time. So a stream of periods shorter than a packet keeps the mean rate
    /// `rate x on / (on + off)`, instead of sending a packet every period.
    fn sends_in_period(&mut self) -> bool {
        let Pattern::Udp(u) = &self.pattern else { return true };
        let len = (self.period_end - self.period_start) as u128;
        let packet = u.size_bytes as u128 * 8 * 1_000_000_000;
        let on = len * u.rate_bps as u128;
        if on >= packet {
            return true;
        }
        self.credit += on;
        if self.credit >= packet {
            self.credit -= packet;
            return true;
        }
        false
    }

    /// Whether the sender is in an on period at `now` (ping: always, once started).
    pub fn is_on(&self, now: Nanos) -> bool {
        now >= self.period_start && now < self.period_end
    }

    /// The send time of packet `k` of the current period: `k` packet times (UDP: size at the
    /// rate, exact to the nanosecond with no drift; ping: the interval) after its start.
    fn packet_time(&self, k: u64) -> Nanos {
        let step = match &self.pattern {
            Pattern::Udp(u) => (k as u128 * u.size_bytes as u128 * 8 * 1_000_000_000 / u.rate_bps as u128) as Nanos,
            Pattern::Ping(p) => k as Nanos * p.interval_ns,
        };
        self.period_start + step
    }

    /// Skips the off period after the current on period; returns the new on period's start.
    fn next_period(&mut self) -> Nanos {
        let Pattern::Udp(UdpConfig { on_ns: Some(on), off_ns: Some(off), exponential, .. }) = self.pattern else {
            unreachable!("only on/off streams have periods");
        };
        loop {
            let off_len = self.period(off, exponential);
            let on_len = self.period(on, exponential);
            self.period_start = self.period_end + off_len;
            self.period_end = self.period_start + on_len;
            self.in_period = 0;
            if self.period_start > self.horizon || self.sends_in_period() {
                return self.period_start;
            }
        }
    }

    /// Sends the packet due at `now`; returns it and the time of the next one.
    pub fn emit(&mut self, now: Nanos) -> (DataPacket, Nanos) {
        let size = match &self.pattern {
            Pattern::Udp(u) => u.size_bytes,
            Pattern::Ping(p) => p.size_bytes,
        };
        let payload = size - UDP_HEADERS;
        let p = DataPacket { flow: self.flow, seq: self.next_seq, size, payload, sent_at: now, ecn: Ecn::NotEct, cwr: false, ts_echo: None };
        self.next_seq += 1;
        self.sent_pkts += 1;
        self.sent_payload_bytes += payload as u64;
        self.in_period += 1;
        let next = self.packet_time(self.in_period);
        let next = if next >= self.period_end { self.next_period() } else { next };
        (p, next)
    }

    /// A packet of this flow reaches the receiver at `now`; a probe is answered at once with
    /// the returned reply (its `ack` the probe's number, `tsecr` its send time).
    pub fn arrive(&mut self, now: Nanos, p: &DataPacket) -> Option<AckPacket> {
        self.received.note(p.seq, p.payload);
        match self.pattern {
            Pattern::Udp(_) => {
                self.one_way.add(now - p.sent_at);
                None
            }
            Pattern::Ping(_) => Some(AckPacket {
                flow: self.flow,
                ack: p.seq,
                sacks: [(0, 0); MAX_SACK_BLOCKS],
                n_sacks: 0,
                delayed: false,
                tsecr: Some(p.sent_at),
                ece: false,
                wnd: 0,
                ts_val: now,
            }),
        }
    }

    /// A probe's reply reaches the sender at `now`.
    pub fn reply(&mut self, now: Nanos, a: &AckPacket) {
        let sent = a.tsecr.expect("a probe reply echoes its probe's send time");
        let payload = match &self.pattern {
            Pattern::Ping(p) => p.size_bytes - UDP_HEADERS,
            Pattern::Udp(_) => 0,
        };
        self.replies.note(a.ack, payload);
        self.rtt.add(now - sent);
    }

    /// Datagrams the flow counts lost: UDP at the receiver, ping probes at the sender.
    pub fn lost(&self) -> u64 {
        if self.is_ping() {
            self.replies.lost()
        } else {
            self.received.lost()
        }
    }

    /// The delay samples the flow reports: one-way (UDP) or round trips (ping).
    pub fn delays(&self) -> &DelaySum {
        if self.is_ping() {
            &self.rtt
        } else {
            &self.one_way
        }
    }
}


/// One datagram flow's send times in order, as the simulator's events take them
/// (`Event::DatagramDue`): the kernel backend's sender sends at these times.
pub struct DatagramClock {
    flow: DatagramFlow,
    next: Option<Nanos>,
    end: Nanos,
}

impl DatagramClock {
    /// The flow starting at `start`, sending until `end` (both trial times).
    pub fn new(mut flow: DatagramFlow, start: Nanos, end: Nanos) -> Self {
        let first = (start <= end).then(|| flow.start(start)).filter(|&t| t <= end);
        DatagramClock { flow, next: first, end }
    }

    /// The next datagram's send time (and the schedule moves past it); None once the trial ends.
    pub fn pop(&mut self) -> Option<Nanos> {
        let t = self.next?;
        let (_, n) = self.flow.emit(t);
        self.next = (n <= self.end).then_some(n);
        Some(t)
    }

    /// Whether the flow is in an on period at `t` (the one holding its next datagram).
    pub fn is_on(&self, t: Nanos) -> bool {
        self.flow.is_on(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn udp(rate_bps: u64, size: u32, on_off: Option<(Nanos, Nanos)>, exponential: bool) -> DatagramFlow {
        let cfg = UdpConfig { rate_bps, size_bytes: size, on_ns: on_off.map(|p| p.0), off_ns: on_off.map(|p| p.1), exponential };
        DatagramFlow::udp(0, cfg, SimRng::new(1, 7))
    }

    /// Send times of the first `n` packets.
    fn times(d: &mut DatagramFlow, n: usize) -> Vec<Nanos> {
        let mut t = d.start(0);
        (0..n)
            .map(|_| {
                let now = t;
                t = d.emit(now).1;
                now
            })
            .collect()
    }

    #[test]
    fn constant_bit_rate_keeps_the_rate_without_drift() {
        // 1500-byte packets at 7 Mbit/s: 1.714285... ms apart, never a whole number of ns.
        let mut d = udp(7_000_000, 1500, None, false);
        let t = times(&mut d, 7001);
        assert_eq!(t[7000], 12_000_000_000, "7000 packets of 12000 bits at 7 Mbit/s take exactly 12 s");
        assert!(t.windows(2).all(|w| (1_714_285..=1_714_286).contains(&(w[1] - w[0]))));
    }

    #[test]
    fn fixed_on_off_sends_only_in_on_periods() {
        // 10 ms on, 30 ms off at 12 Mbit/s with 1500-byte packets: one packet per ms while on.
        let mut d = udp(12_000_000, 1500, Some((10_000_000, 30_000_000)), false);
        let t = times(&mut d, 30);
        assert!(t.iter().all(|&x| x % 40_000_000 < 10_000_000), "{t:?}");
        assert_eq!(t[10], 40_000_000, "the second on period starts after the off period");
        assert_eq!(t[20], 80_000_000);
    }

    #[test]
    fn exponential_periods_have_the_configured_means() {
        let (on, off) = (20_000_000, 60_000_000);
        let mut d = udp(120_000_000, 1500, Some((on, off)), true);
        let t = times(&mut d, 400_000);
        // A packet every 100 us while on: the fraction of time on is on / (on + off).
        let span = *t.last().unwrap() as f64;
        let sent_time = t.len() as f64 * 100_000.0;
        let frac = sent_time / span;
        assert!((frac - 0.25).abs() < 0.02, "fraction of time on {frac}");
    }

    /// Sent bits over the span from the first packet to the one after the last, in bit/s.
    fn mean_rate(d: &mut DatagramFlow, n: usize, size: u32) -> f64 {
        let t = times(d, n + 1);
        n as f64 * size as f64 * 8.0 / (t[n] - t[0]) as f64 * 1e9
    }

    #[test]
    fn on_off_periods_shorter_than_a_packet_keep_the_mean_rate() {
        // 1 Mbit/s in 1 us on / 1 us off periods, 1500-byte packets (12 ms each at the rate):
        // the stream is on half the time, so its mean rate is 0.5 Mbit/s, not a packet a period.
        let mut d = udp(1_000_000, 1500, Some((1_000, 1_000)), false);
        let r = mean_rate(&mut d, 50, 1500);
        assert!((r - 500_000.0).abs() < 5_000.0, "mean rate {r} bit/s");
        // a period shorter than a packet by a little: on 10 ms of 12, off 10 ms
        let mut d = udp(1_000_000, 1500, Some((10_000_000, 10_000_000)), false);
        let r = mean_rate(&mut d, 200, 1500);
        assert!((r - 500_000.0).abs() < 5_000.0, "mean rate {r} bit/s");
        // exponential periods of 1 us means
        let mut d = udp(1_000_000, 1500, Some((1_000, 3_000)), true);
        let r = mean_rate(&mut d, 200, 1500);
        assert!((r - 250_000.0).abs() < 10_000.0, "mean rate {r} bit/s");
        // every packet leaves in an on period
        let mut d = udp(1_000_000, 1500, Some((1_000, 1_000)), false);
        let mut t = d.start(0);
        for _ in 0..20 {
            assert!(d.is_on(t), "packet at {t} outside an on period");
            t = d.emit(t).1;
        }
    }

    #[test]
    fn on_off_periods_end_at_the_horizon() {
        // 1 bit/s in 1 ns periods: a packet needs 12,000 s of on time; the search for the
        // next one stops at the horizon instead of running on past it.
        let cfg = UdpConfig { rate_bps: 1, size_bytes: 1500, on_ns: Some(1), off_ns: Some(1), exponential: false };
        let mut d = DatagramFlow::udp(0, cfg, SimRng::new(1, 7)).until(1_000_000);
        let first = d.start(0);
        assert!(first > 1_000_000, "no packet within the horizon: {first}");
    }

    #[test]
    fn probes_are_echoed_and_timed() {
        let mut d = DatagramFlow::ping(3, PingConfig { interval_ns: 5_000_000, size_bytes: 84 }, SimRng::new(1, 1));
        let t0 = d.start(1_000);
        let (p, next) = d.emit(t0);
        assert_eq!((p.flow, p.seq, p.size, p.payload, next), (3, 0, 84, 56, 5_001_000));
        let reply = d.arrive(t0 + 10_000_000, &p).expect("probes are answered");
        d.reply(t0 + 20_000_000, &reply);
        assert_eq!((d.rtt.n, d.rtt.sum_ns, d.lost()), (1, 20_000_000, 0));
        let (_, _) = d.emit(next);
        let (p2, _) = d.emit(next + 5_000_000);
        let r2 = d.arrive(next + 9_000_000, &p2).unwrap();
        d.reply(next + 12_000_000, &r2);
        assert_eq!(d.lost(), 1, "probe 1 never answered");
    }
}
