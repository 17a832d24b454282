//! The simulator's input: a fully normalised trial, every quantity in SI integers
//! (nanoseconds, bits per second, bytes). People-readable units ("80Mbit", "2bdp") are
//! parsed and validated by the Python front end, which hands this structure over as JSON.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The configuration's times are simulated time ([`crate::time`]).
pub use crate::time::Nanos;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimConfig {
    pub duration_ns: Nanos,
    pub seed: u64,
    /// Telemetry sampling interval.
    #[serde(default = "default_sample_interval")]
    pub sample_interval_ns: Nanos,
    /// IP packet size of a full segment (MTU) and the TCP payload it carries (MSS).
    #[serde(default = "default_mtu")]
    pub mtu: u32,
    #[serde(default = "default_mss")]
    pub mss: u32,
    pub link: LinkConfig,
    pub flows: Vec<FlowConfig>,
    /// Packet captures to write (none by default).
    #[serde(default)]
    pub capture: Option<crate::capture::CaptureConfig>,
}

fn default_sample_interval() -> Nanos {
    10_000_000
}
fn default_mtu() -> u32 {
    1500
}
fn default_mss() -> u32 {
    1448
}

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
}

/// The reverse path's bottleneck: the same router model as the forward one ([`crate::link::Bottleneck`])
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
    /// The reverse bottleneck as a [`LinkConfig`] for [`crate::link::Bottleneck::new`]: its own
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
        }
    }
}

/// Which way a flow's data crosses the dumbbell.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// Left to right: data through the forward bottleneck, ACKs back over the reverse path.
    #[default]
    Forward,
    /// Right to left: data through the reverse path (`link.reverse`), ACKs through the forward
    /// bottleneck, queued with the forward flows' data.
    Reverse,
}

/// A link trace in Mahimahi's format: one delivery opportunity of
/// [`crate::link::TRACE_OPPORTUNITY_BYTES`] per entry, at that many milliseconds from the
/// start of the trace; the trace repeats with the last entry's time as its period.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceConfig {
    pub opportunities_ms: Vec<u64>,
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

/// A queue discipline other than drop-tail, with `tc`'s parameter names (times in ns);
/// absent parameters take Linux's defaults.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AqmConfig {
    /// `tc qdisc ... codel` (RFC 8289).
    Codel(CodelConfig),
    /// `tc qdisc ... fq_codel` (RFC 8290).
    FqCodel(FqCodelConfig),
    /// `tc qdisc ... red` (Floyd and Jacobson 1993; adaptive: Floyd et al. 2001).
    Red(RedConfig),
    /// `tc qdisc ... pie` (RFC 8033).
    Pie(PieConfig),
    /// `tc qdisc ... fq` (Linux's fair-queue scheduler).
    Fq(FqConfig),
    /// `tc qdisc ... dualpi2` (RFC 9332).
    Dualpi2(DualPi2Config),
}

/// DualPI2's parameters (`tc-dualpi2`); alpha and beta in Hz.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DualPi2Config {
    #[serde(default)]
    pub target_ns: Option<Nanos>,
    #[serde(default)]
    pub tupdate_ns: Option<Nanos>,
    #[serde(default)]
    pub alpha: Option<f64>,
    #[serde(default)]
    pub beta: Option<f64>,
    #[serde(default)]
    pub step_thresh_ns: Option<Nanos>,
    #[serde(default)]
    pub min_qlen_step: Option<u32>,
    #[serde(default)]
    pub coupling_factor: Option<u8>,
    #[serde(default)]
    pub drop_overload: Option<bool>,
    /// The C queue's share of the round robin, percent.
    #[serde(default)]
    pub c_protection: Option<u8>,
}

/// FQ's parameters (`tc-fq`); sizes in bytes, `flow_limit` in packets.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FqConfig {
    #[serde(default)]
    pub flow_limit: Option<u32>,
    #[serde(default)]
    pub quantum: Option<u32>,
    #[serde(default)]
    pub initial_quantum: Option<u32>,
    #[serde(default)]
    pub flow_refill_delay_ns: Option<Nanos>,
    #[serde(default)]
    pub ce_threshold_ns: Option<Nanos>,
}

/// PIE's parameters (`tc-pie`); alpha and beta in Linux's 1/16 units (0-32).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PieConfig {
    #[serde(default)]
    pub target_ns: Option<Nanos>,
    #[serde(default)]
    pub tupdate_ns: Option<Nanos>,
    #[serde(default)]
    pub alpha: Option<u32>,
    #[serde(default)]
    pub beta: Option<u32>,
    #[serde(default)]
    pub ecn: Option<bool>,
    #[serde(default)]
    pub bytemode: Option<bool>,
}

/// RED's parameters (`tc-red`); thresholds and sizes in bytes.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedConfig {
    #[serde(default)]
    pub min: Option<u64>,
    #[serde(default)]
    pub max: Option<u64>,
    /// max_P, the marking probability at `max`.
    #[serde(default)]
    pub probability: Option<f64>,
    #[serde(default)]
    pub avpkt: Option<u64>,
    /// Packets of `avpkt` the average lets through at once (sets the EWMA weight).
    #[serde(default)]
    pub burst: Option<u64>,
    /// Rate used to age the average over idle periods; the link capacity if absent.
    #[serde(default)]
    pub bandwidth_bps: Option<u64>,
    #[serde(default)]
    pub ecn: Option<bool>,
    /// Drop rather than mark above `max`, even with `ecn`.
    #[serde(default)]
    pub harddrop: Option<bool>,
    #[serde(default)]
    pub adaptive: Option<bool>,
}

impl AqmConfig {
    pub fn kind(&self) -> &'static str {
        match self {
            AqmConfig::Codel(_) => "codel",
            AqmConfig::FqCodel(_) => "fq_codel",
            AqmConfig::Red(_) => "red",
            AqmConfig::Pie(_) => "pie",
            AqmConfig::Fq(_) => "fq",
            AqmConfig::Dualpi2(_) => "dualpi2",
        }
    }
}

/// CoDel's parameters (`tc-codel`). `ecn` defaults to off for `codel`, on for `fq_codel`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CodelConfig {
    #[serde(default)]
    pub target_ns: Option<Nanos>,
    #[serde(default)]
    pub interval_ns: Option<Nanos>,
    #[serde(default)]
    pub ecn: Option<bool>,
    #[serde(default)]
    pub ce_threshold_ns: Option<Nanos>,
}

/// Linux `codel_params_init`: target 5 ms, interval 100 ms.
pub const CODEL_TARGET_NS: Nanos = 5_000_000;
pub const CODEL_INTERVAL_NS: Nanos = 100_000_000;

impl CodelConfig {
    /// The parameters with defaults filled in; `ecn_default` is the discipline's.
    pub fn resolve_with(&self, mtu: u32, ecn_default: bool) -> crate::qdisc::codel::CodelParams {
        crate::qdisc::codel::CodelParams {
            target: self.target_ns.unwrap_or(CODEL_TARGET_NS),
            interval: self.interval_ns.unwrap_or(CODEL_INTERVAL_NS),
            ecn: self.ecn.unwrap_or(ecn_default),
            ce_threshold: self.ce_threshold_ns,
            mtu: mtu as u64,
        }
    }

    /// For `codel` (sch_codel.c leaves ECN off).
    pub fn resolve(&self, mtu: u32) -> crate::qdisc::codel::CodelParams {
        self.resolve_with(mtu, false)
    }

    fn check(&self, at: &str, errs: &mut Vec<String>) {
        for (name, v) in [("target_ns", self.target_ns), ("interval_ns", self.interval_ns)] {
            if let Some(v) = v {
                if v <= 0 {
                    errs.push(format!("{at}.{name}: {v}: must be > 0"));
                }
            }
        }
        if let Some(v) = self.ce_threshold_ns {
            if v < 0 {
                errs.push(format!("{at}.ce_threshold_ns: {v}: must be >= 0"));
            }
        }
    }
}

/// FQ-CoDel's parameters (`tc-fq_codel`), CoDel's among them.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FqCodelConfig {
    #[serde(default)]
    pub target_ns: Option<Nanos>,
    #[serde(default)]
    pub interval_ns: Option<Nanos>,
    #[serde(default)]
    pub ecn: Option<bool>,
    #[serde(default)]
    pub ce_threshold_ns: Option<Nanos>,
    /// Number of queues the flows hash into.
    #[serde(default = "fq_codel_flows")]
    pub flows: u32,
    /// Bytes a queue may send per round; `None` is the MTU.
    #[serde(default)]
    pub quantum: Option<u32>,
    /// Most packets dropped at once from the fattest queue when over a limit.
    #[serde(default = "fq_codel_drop_batch")]
    pub drop_batch: u32,
    /// Bytes of packets the discipline may hold.
    #[serde(default = "fq_codel_memory_limit")]
    pub memory_limit: u64,
}

/// `fq_codel_init` defaults.
fn fq_codel_flows() -> u32 {
    1024
}
fn fq_codel_drop_batch() -> u32 {
    64
}
fn fq_codel_memory_limit() -> u64 {
    32 << 20
}

impl Default for FqCodelConfig {
    fn default() -> Self {
        FqCodelConfig {
            target_ns: None,
            interval_ns: None,
            ecn: None,
            ce_threshold_ns: None,
            flows: fq_codel_flows(),
            quantum: None,
            drop_batch: fq_codel_drop_batch(),
            memory_limit: fq_codel_memory_limit(),
        }
    }
}

impl FqCodelConfig {
    /// The CoDel part of the parameters.
    pub fn codel(&self) -> CodelConfig {
        CodelConfig {
            target_ns: self.target_ns,
            interval_ns: self.interval_ns,
            ecn: self.ecn,
            ce_threshold_ns: self.ce_threshold_ns,
        }
    }
}

impl AqmConfig {
    /// Range checks, each as "field: value: what is valid".
    pub fn check(&self, errs: &mut Vec<String>) {
        let at = "link.aqm";
        match self {
            AqmConfig::Codel(c) => c.check(at, errs),
            AqmConfig::Dualpi2(d) => {
                for (n, v) in [("target_ns", d.target_ns), ("tupdate_ns", d.tupdate_ns), ("step_thresh_ns", d.step_thresh_ns)] {
                    if let Some(v) = v {
                        if v <= 0 {
                            errs.push(format!("{at}.{n}: {v}: must be > 0"));
                        }
                    }
                }
                for (n, v) in [("alpha", d.alpha), ("beta", d.beta)] {
                    if let Some(v) = v {
                        if !(v > 0.0 && v.is_finite()) {
                            errs.push(format!("{at}.{n}: {v}: must be > 0 (Hz)"));
                        }
                    }
                }
                if d.coupling_factor == Some(0) {
                    errs.push(format!("{at}.coupling_factor: 0: must be >= 1"));
                }
                if let Some(w) = d.c_protection {
                    if w > 100 {
                        errs.push(format!("{at}.c_protection: {w}: must be from 0 to 100 (percent)"));
                    }
                }
            }
            AqmConfig::Fq(f) => {
                for (n, v) in [("flow_limit", f.flow_limit), ("quantum", f.quantum)] {
                    if v == Some(0) {
                        errs.push(format!("{at}.{n}: 0: must be > 0"));
                    }
                }
                for (n, v) in [("flow_refill_delay_ns", f.flow_refill_delay_ns), ("ce_threshold_ns", f.ce_threshold_ns)] {
                    if let Some(v) = v {
                        if v < 0 {
                            errs.push(format!("{at}.{n}: {v}: must be >= 0"));
                        }
                    }
                }
            }
            AqmConfig::Pie(p) => {
                for (n, v) in [("target_ns", p.target_ns), ("tupdate_ns", p.tupdate_ns)] {
                    if let Some(v) = v {
                        if v <= 0 {
                            errs.push(format!("{at}.{n}: {v}: must be > 0"));
                        }
                    }
                }
                for (n, v) in [("alpha", p.alpha), ("beta", p.beta)] {
                    if let Some(v) = v {
                        if v > 32 {
                            errs.push(format!("{at}.{n}: {v}: must be from 0 to 32 (sixteenths)"));
                        }
                    }
                }
            }
            AqmConfig::Red(r) => {
                if let Some(p) = r.probability {
                    if !(p > 0.0 && p <= 1.0) {
                        errs.push(format!("{at}.probability: {p}: must be in (0, 1]"));
                    }
                }
                if let (Some(a), Some(b)) = (r.min, r.max) {
                    if a >= b {
                        errs.push(format!("{at}.min: {a}: must be below max ({b})"));
                    }
                }
                for (n, v) in [("avpkt", r.avpkt), ("burst", r.burst), ("bandwidth_bps", r.bandwidth_bps), ("max", r.max)] {
                    if v == Some(0) {
                        errs.push(format!("{at}.{n}: 0: must be > 0"));
                    }
                }
            }
            AqmConfig::FqCodel(f) => {
                f.codel().check(at, errs);
                // Linux fq_codel_change: 1 to 65536 flows.
                if !(1..=65536).contains(&f.flows) {
                    errs.push(format!("{at}.flows: {}: must be from 1 to 65536", f.flows));
                }
                if let Some(q) = f.quantum {
                    if q < 256 {
                        errs.push(format!("{at}.quantum: {q}: must be at least 256 bytes"));
                    }
                }
                if f.drop_batch == 0 {
                    errs.push(format!("{at}.drop_batch: 0: must be >= 1"));
                }
                if f.memory_limit == 0 || f.memory_limit > 1 << 31 {
                    errs.push(format!("{at}.memory_limit: {}: must be from 1 to 2^31 bytes", f.memory_limit));
                }
            }
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueConfig {
    /// Drop-tail limit in bytes of IP packets; either or both limits may be set.
    #[serde(default)]
    pub limit_bytes: Option<u64>,
    #[serde(default)]
    pub limit_packets: Option<u64>,
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

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenBucketConfig {
    pub rate_bps: u64,
    pub burst_bytes: u64,
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

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlowConfig {
    /// What the flow sends: TCP (the default) or datagrams ([`crate::datagram`]). Every other
    /// field but `start_ns`, `extra_delay_ns` and `group` is TCP's and ignored by datagrams.
    #[serde(default)]
    pub traffic: Traffic,
    /// Congestion control name (`reno`, `cubic`, ...), see [`crate::cc::ALGORITHMS`]; TCP only.
    #[serde(default)]
    pub cc: String,
    /// Algorithm parameters by name; unknown names are refused.
    #[serde(default)]
    pub params: BTreeMap<String, f64>,
    #[serde(default)]
    pub start_ns: Nanos,
    /// Extra one-way delay on this flow's access link (RTT heterogeneity); its RTprop is
    /// delay_fwd + delay_rev + extra_delay.
    #[serde(default)]
    pub extra_delay_ns: Nanos,
    /// Bytes to send; `None` is a bulk transfer that lasts the whole trial.
    #[serde(default)]
    pub size_bytes: Option<u64>,
    /// Receive window (the receiver's buffer) in bytes; `None` is unlimited.
    #[serde(default)]
    pub rwnd_bytes: Option<u64>,
    /// Pacing: `None` lets the algorithm decide (BBR paces, loss-based algorithms do not),
    /// `Some(true)` paces any algorithm as Linux fq would.
    #[serde(default)]
    pub pacing: Option<bool>,
    /// `SO_MAX_PACING_RATE` in bits per second: caps the pacing rate, and turns pacing on for
    /// an algorithm that does not pace (Linux `sk_pacing_status` = `SK_PACING_NEEDED`).
    #[serde(default)]
    pub max_pacing_rate_bps: Option<u64>,
    #[serde(default = "default_iw")]
    pub initial_cwnd: u32,
    #[serde(default)]
    pub delayed_ack: DelayedAckConfig,
    /// With `cc = "bpf"`: the BPF congestion-control object, its read-only data already
    /// holding the trial's parameters (written by the same loader code as the kernel backend's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bpf_object: Option<crate::cc::bpf::ObjectBytes>,
    /// Label shown in results; defaults to the algorithm name.
    #[serde(default)]
    pub group: Option<String>,
    /// Negotiate ECN (RFC 3168): data leaves ECN-capable and the receiver echoes CE marks.
    #[serde(default)]
    pub ecn: bool,
    /// With `ecn`: data leaves ECT(1), the L4S identifier (RFC 9331), instead of ECT(0).
    #[serde(default)]
    pub ect1: bool,
    /// Which way the data goes.
    #[serde(default)]
    pub direction: Direction,
    /// One flow of a workload (many short flows arriving over time): its telemetry rows are
    /// only those of the sample intervals in which it is open, from its start to the sample
    /// after its completion, so thousands of short flows do not each fill the whole trial.
    #[serde(default)]
    pub workload: bool,
}

fn default_iw() -> u32 {
    10
}

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

impl FlowConfig {
    /// A bulk flow of algorithm `cc` with every other setting at its default, starting at 0.
    pub fn bulk(cc: &str) -> Self {
        FlowConfig {
            traffic: Traffic::Tcp,
            cc: cc.into(),
            params: BTreeMap::new(),
            start_ns: 0,
            extra_delay_ns: 0,
            size_bytes: None,
            rwnd_bytes: None,
            pacing: None,
            max_pacing_rate_bps: None,
            initial_cwnd: default_iw(),
            delayed_ack: DelayedAckConfig::default(),
            bpf_object: None,
            group: None,
            ecn: false,
            ect1: false,
            direction: Direction::Forward,
            workload: false,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DelayedAckConfig {
    /// Off: every segment is ACKed at once.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Minimum ACK timeout (Linux TCP_ATO_MIN = TCP_DELACK_MIN, 40 ms); the receiver adapts its
    /// timeout from there as Linux does (see tcp::receiver).
    #[serde(default = "default_delack")]
    pub timeout_ns: Nanos,
    /// Segments covered by one ACK outside quick-ack mode (Linux: 2; more makes stretch ACKs).
    #[serde(default = "two")]
    pub segments_per_ack: u32,
    /// Most quick ACKs at a time (Linux TCP_MAX_QUICKACKS, 16); the count is
    /// rcv_wnd / (2 * MSS) up to this.
    #[serde(default = "sixteen")]
    pub quickacks: u32,
}

impl Default for DelayedAckConfig {
    fn default() -> Self {
        DelayedAckConfig {
            enabled: true,
            timeout_ns: default_delack(),
            segments_per_ack: 2,
            quickacks: 16,
        }
    }
}

fn yes() -> bool {
    true
}
fn default_delack() -> Nanos {
    40_000_000
}
fn two() -> u32 {
    2
}
fn sixteen() -> u32 {
    16
}

/// A queue limit's problems, `at` naming it (`link.queue`, `link.reverse.queue`).
fn check_queue(at: &str, q: &QueueConfig, mtu: u32, errs: &mut Vec<String>) {
    match (q.limit_bytes, q.limit_packets) {
        (None, None) => errs.push(format!("{at}: no limit: give limit_bytes or limit_packets")),
        (Some(b), _) if b < mtu as u64 => {
            errs.push(format!("{at}.limit_bytes: {b}: must hold at least one packet ({mtu} bytes)"))
        }
        (_, Some(0)) => errs.push(format!("{at}.limit_packets: 0: must be >= 1")),
        _ => {}
    }
}

/// A loss model's problems, `at` naming it (`link.loss`, `link.reverse.loss`).
fn check_loss(at: &str, loss: &LossConfig, errs: &mut Vec<String>) {
    match *loss {
        LossConfig::None => {}
        LossConfig::Bernoulli { p } => {
            if !(0.0..=1.0).contains(&p) {
                errs.push(format!("{at}.p: {p}: must be in [0, 1]"));
            }
        }
        LossConfig::GilbertElliott { p, r, loss_good, loss_bad } => {
            for (n, v) in [("p", p), ("r", r), ("loss_good", loss_good), ("loss_bad", loss_bad)] {
                if !(0.0..=1.0).contains(&v) {
                    errs.push(format!("{at}.{n}: {v}: must be in [0, 1]"));
                }
            }
        }
    }
}

impl SimConfig {
    /// A dumbbell of `capacity_bps` with two-way propagation delay `rtt_ns` split evenly, and a
    /// drop-tail queue of `queue_bdp` bandwidth-delay products (at least one packet); 10 s, seed
    /// 1, no flows. For programs and tests that build trials in Rust.
    pub fn dumbbell(capacity_bps: u64, rtt_ns: Nanos, queue_bdp: f64) -> Self {
        let bdp_bytes = capacity_bps as f64 / 8.0 * rtt_ns as f64 / 1e9;
        let mtu = default_mtu();
        SimConfig {
            duration_ns: 10_000_000_000,
            seed: 1,
            sample_interval_ns: default_sample_interval(),
            mtu,
            mss: default_mss(),
            link: LinkConfig::plain(
                capacity_bps,
                rtt_ns / 2,
                rtt_ns - rtt_ns / 2,
                QueueConfig { limit_bytes: Some((queue_bdp * bdp_bytes).round().max(mtu as f64) as u64), limit_packets: None },
            ),
            flows: vec![],
            capture: None,
        }
    }

    /// Checks what serde cannot: ranges and consistency. Returns every problem found, each as
    /// "field: value: what is valid".
    pub fn validate(&self) -> Result<(), Vec<String>> {
        let mut errs = Vec::new();
        if let Some(c) = &self.capture {
            errs.extend(c.validate());
        }
        if self.duration_ns <= 0 {
            errs.push(format!("duration_ns: {}: must be > 0", self.duration_ns));
        }
        if self.sample_interval_ns <= 0 {
            errs.push(format!("sample_interval_ns: {}: must be > 0", self.sample_interval_ns));
        }
        if self.mss == 0 || self.mss + 20 > self.mtu {
            errs.push(format!(
                "mss: {}: must be > 0 and at most mtu - 20 ({}, with mtu {})",
                self.mss,
                self.mtu.saturating_sub(20),
                self.mtu
            ));
        }
        let l = &self.link;
        if l.capacity_bps == 0 {
            errs.push("link.capacity_bps: 0: must be > 0".into());
        }
        if let Some(t) = &l.trace {
            let o = &t.opportunities_ms;
            if o.is_empty() || *o.last().unwrap() == 0 {
                errs.push("link.trace: needs at least one opportunity after 0 ms (the last one is the period)".into());
            } else if let Some(i) = o.windows(2).position(|w| w[1] < w[0]) {
                errs.push(format!("link.trace: entry {}: {} ms after {} ms: times must not decrease", i + 2, o[i + 1], o[i]));
            }
            if !l.schedule.is_empty() || l.shaper.is_some() {
                errs.push("link.trace: a trace sets the capacity over time; it takes no schedule and no shaper".into());
            }
        }
        match &l.ack_aggregation {
            Some(AckAggregationConfig::Periodic { interval_ns }) | Some(AckAggregationConfig::Wifi { interval_ns, .. })
                if *interval_ns <= 0 =>
            {
                errs.push(format!("link.ack_aggregation.interval_ns: {interval_ns}: must be > 0"))
            }
            Some(AckAggregationConfig::Wifi { max_acks: 0, .. }) => {
                errs.push("link.ack_aggregation.max_acks: 0: must be >= 1".into())
            }
            _ => {}
        }
        if l.delay_fwd_ns < 0 || l.delay_rev_ns < 0 {
            errs.push("link.delay: must be >= 0".into());
        }
        if l.jitter_ns < 0 {
            errs.push(format!("link.jitter_ns: {}: must be >= 0", l.jitter_ns));
        }
        check_queue("link.queue", &l.queue, self.mtu, &mut errs);
        check_loss("link.loss", &l.loss, &mut errs);
        if let Some(r) = &l.reverse {
            if r.capacity_bps == 0 {
                errs.push("link.reverse.capacity_bps: 0: must be > 0".into());
            }
            check_queue("link.reverse.queue", &r.queue, self.mtu, &mut errs);
            check_loss("link.reverse.loss", &r.loss, &mut errs);
            if let Some(a) = &r.aqm {
                let mut aqm_errs = Vec::new();
                a.check(&mut aqm_errs);
                errs.extend(aqm_errs.into_iter().map(|e| e.replacen("link.", "link.reverse.", 1)));
            }
        }
        let reverse = l.reverse.is_some() || self.flows.iter().any(|f| f.direction == Direction::Reverse);
        if reverse && self.capture.is_some() {
            errs.push("capture: packet captures record the forward path only; a trial with link.reverse or reverse flows takes none".into());
        }
        for (name, tb) in [("shaper", &l.shaper), ("policer", &l.policer)] {
            if let Some(tb) = tb {
                if tb.rate_bps == 0 {
                    errs.push(format!("link.{name}.rate_bps: 0: must be > 0"));
                }
                if tb.burst_bytes < self.mtu as u64 {
                    errs.push(format!(
                        "link.{name}.burst_bytes: {}: must be at least one packet ({} bytes)",
                        tb.burst_bytes, self.mtu
                    ));
                }
            }
        }
        for (i, c) in l.schedule.iter().enumerate() {
            if c.capacity_bps == 0 {
                errs.push(format!("link.schedule[{i}].capacity_bps: 0: must be > 0"));
            }
            if c.at_ns < 0 {
                errs.push(format!("link.schedule[{i}].at_ns: {}: must be >= 0", c.at_ns));
            }
        }
        for (i, c) in l.delay_schedule.iter().enumerate() {
            if c.at_ns < 0 || c.delay_fwd_ns < 0 || c.delay_rev_ns < 0 {
                errs.push(format!("link.delay_schedule[{i}]: times and delays must be >= 0"));
            }
        }
        if let Some(a) = &l.aqm {
            a.check(&mut errs);
        }
        if self.flows.is_empty() {
            errs.push("flows: empty: give at least one flow".into());
        }
        let datagrams = self.flows.iter().any(|f| f.traffic != Traffic::Tcp);
        if datagrams && self.capture.is_some() {
            errs.push("capture: packet captures record TCP only; a trial with udp or ping flows takes none".into());
        }
        for (i, f) in self.flows.iter().enumerate() {
            match &f.traffic {
                Traffic::Tcp if f.cc == crate::cc::bpf::NAME => {
                    if let Err(e) = crate::cc::bpf::load(f.bpf_object.as_ref()) {
                        errs.push(format!("flows[{i}].{e}"));
                    }
                }
                Traffic::Tcp => {
                    if let Err(e) = crate::cc::build(&f.cc, &f.params) {
                        errs.push(format!("flows[{i}].{e}"));
                    }
                }
                Traffic::Udp(u) => {
                    if u.rate_bps == 0 {
                        errs.push(format!("flows[{i}].traffic.rate_bps: 0: must be > 0"));
                    }
                    crate::datagram::check_size(&format!("flows[{i}].traffic"), u.size_bytes, self.mtu, &mut errs);
                    match (u.on_ns, u.off_ns) {
                        (None, None) => {}
                        (Some(on), Some(off)) if on > 0 && off > 0 => {}
                        (on, off) => errs.push(format!(
                            "flows[{i}].traffic: on_ns {on:?}, off_ns {off:?}: give both, each > 0, or neither"
                        )),
                    }
                }
                Traffic::Ping(p) => {
                    if p.interval_ns <= 0 {
                        errs.push(format!("flows[{i}].traffic.interval_ns: {}: must be > 0", p.interval_ns));
                    }
                    crate::datagram::check_size(&format!("flows[{i}].traffic"), p.size_bytes, self.mtu, &mut errs);
                }
            }
            if let Some(r) = f.max_pacing_rate_bps {
                if f.traffic != Traffic::Tcp {
                    errs.push(format!("flows[{i}].max_pacing_rate_bps: {r}: a {} flow is not paced (TCP only)", f.traffic.name()));
                }
                if r == 0 {
                    errs.push(format!("flows[{i}].max_pacing_rate_bps: 0: must be > 0"));
                }
                if f.pacing == Some(false) {
                    errs.push(format!(
                        "flows[{i}].pacing: false: a max_pacing_rate turns pacing on (Linux SK_PACING_NEEDED); drop one of them"
                    ));
                }
            }
            if f.start_ns < 0 {
                errs.push(format!("flows[{i}].start_ns: {}: must be >= 0", f.start_ns));
            }
            if f.extra_delay_ns < 0 {
                errs.push(format!("flows[{i}].extra_delay_ns: {}: must be >= 0", f.extra_delay_ns));
            }
            if f.initial_cwnd == 0 {
                errs.push(format!("flows[{i}].initial_cwnd: 0: must be >= 1"));
            }
            if let Some(0) = f.size_bytes {
                errs.push(format!("flows[{i}].size_bytes: 0: must be > 0 (or absent for bulk)"));
            }
            if let Some(w) = f.rwnd_bytes {
                if w < self.mss as u64 {
                    errs.push(format!("flows[{i}].rwnd_bytes: {w}: must be at least one MSS ({})", self.mss));
                }
            }
            if f.delayed_ack.segments_per_ack == 0 {
                errs.push(format!("flows[{i}].delayed_ack.segments_per_ack: 0: must be >= 1"));
            }
        }
        if errs.is_empty() {
            Ok(())
        } else {
            Err(errs)
        }
    }
}
