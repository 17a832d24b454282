//! The simulator's input: a fully normalised trial, every quantity in SI integers
//! (nanoseconds, bits per second, bytes). People-readable units ("80Mbit", "2bdp") are
//! parsed and validated by the Python front end, which hands this structure over as JSON.
//!
//! This module only assembles: each part owns its settings, their defaults, their checks and
//! their resolution, and is re-exported here: the link's ([`crate::link`]: rate, delays, loss,
//! shaping, schedules, traces, the reverse path), the queue's and its disciplines'
//! ([`crate::qdisc`]), the datagram flows' ([`crate::datagram`]), the receiver's delayed ACKs
//! ([`crate::tcp::receiver`]), the captures' ([`crate::capture`]) and the algorithms'
//! parameters ([`crate::cc`]). What is left here is the trial and the flow, which hold them,
//! and the checks that span parts (captures record TCP on the forward path only).

use crate::problem::{Path, Problem};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub use crate::capture::CaptureConfig;
pub use crate::datagram::{PingConfig, Traffic, UdpConfig};
pub use crate::link::{
    AckAggregationConfig, CapacityChange, DelayChange, LinkConfig, LossConfig, ReverseLinkConfig, TokenBucketConfig, TraceConfig,
};
pub use crate::qdisc::{AqmConfig, CodelConfig, DualPi2Config, FqCodelConfig, FqConfig, PieConfig, QueueConfig, RedConfig};
pub use crate::tcp::receiver::DelayedAckConfig;
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
    pub capture: Option<CaptureConfig>,
}

/// The trial's defaults: telemetry every 10 ms, Ethernet's MTU and the MSS it leaves with TCP
/// timestamps.
pub const SAMPLE_INTERVAL_NS: Nanos = 10_000_000;
pub const MTU: u32 = 1500;
pub const MSS: u32 = 1448;
/// Linux's initial window (`TCP_INIT_CWND`), packets.
pub const INITIAL_CWND: u32 = 10;

fn default_sample_interval() -> Nanos {
    SAMPLE_INTERVAL_NS
}
fn default_mtu() -> u32 {
    MTU
}
fn default_mss() -> u32 {
    MSS
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

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlowConfig {
    /// What the flow sends: TCP (the default) or datagrams ([`crate::datagram`]). Every other
    /// field but `start_ns`, `extra_delay_ns` and `group` is TCP's and ignored by datagrams.
    #[serde(default)]
    pub traffic: Traffic,
    /// Congestion control name (`reno`, `cubic`, ...), see [`crate::cc::algorithms`]; TCP only.
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
    /// The receiving application reads every this many ns of the trial's clock; 0 reads as
    /// soon as data arrives. Linux ACKs data the application has not read yet only when the
    /// window could stay as offered, else after the read (`tcp_cleanup_rbuf`).
    #[serde(default)]
    pub read_interval_ns: Nanos,
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
    INITIAL_CWND
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
            read_interval_ns: 0,
            bpf_object: None,
            group: None,
            ecn: false,
            ect1: false,
            direction: Direction::Forward,
            workload: false,
        }
    }
}

impl SimConfig {
    /// A dumbbell of `capacity_bps` with two-way propagation delay `rtt_ns` split evenly, and a
    /// drop-tail queue of `queue_bdp` bandwidth-delay products (at least one packet); 10 s, seed
    /// 1, no flows. For programs and tests that build trials in Rust.
    pub fn dumbbell(capacity_bps: u64, rtt_ns: Nanos, queue_bdp: f64) -> Self {
        let bdp_bytes = capacity_bps as f64 / 8.0 * rtt_ns as f64 / 1e9;
        let mtu = MTU;
        SimConfig {
            duration_ns: 10_000_000_000,
            seed: 1,
            sample_interval_ns: SAMPLE_INTERVAL_NS,
            mtu,
            mss: MSS,
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

    /// Checks what serde cannot: ranges and consistency. Returns every problem found, each at
    /// its path with the value and what is valid.
    pub fn validate(&self) -> Result<(), Vec<Problem>> {
        let mut out = Vec::new();
        let top = Path::root();
        if let Some(c) = &self.capture {
            c.check(&top.field("capture"), &mut out);
        }
        if self.duration_ns <= 0 {
            out.push(top.field("duration_ns").problem(format!("{}: must be > 0", self.duration_ns)));
        }
        if self.sample_interval_ns <= 0 {
            out.push(top.field("sample_interval_ns").problem(format!("{}: must be > 0", self.sample_interval_ns)));
        }
        if self.mss == 0 || self.mss + 20 > self.mtu {
            out.push(top.field("mss").problem(format!(
                "{}: must be > 0 and at most mtu - 20 ({}, with mtu {})",
                self.mss,
                self.mtu.saturating_sub(20),
                self.mtu
            )));
        }
        self.link.check(&top.field("link"), self.mtu, &mut out);
        if self.flows.is_empty() {
            out.push(top.field("flows").problem("empty: give at least one flow"));
        }
        for (i, f) in self.flows.iter().enumerate() {
            f.check(&top.field("flows").index(i), self.mtu, self.mss, &mut out);
        }
        if self.capture.is_some() {
            let at = top.field("capture");
            if self.link.reverse.is_some() || self.flows.iter().any(|f| f.direction == Direction::Reverse) {
                out.push(at.problem("packet captures record the forward path only; a trial with link.reverse or reverse flows takes none"));
            }
            if self.flows.iter().any(|f| f.traffic != Traffic::Tcp) {
                out.push(at.problem("packet captures record TCP only; a trial with udp or ping flows takes none"));
            }
        }
        if out.is_empty() {
            Ok(())
        } else {
            Err(out)
        }
    }
}

impl FlowConfig {
    /// The flow's settings, a packet being `mtu` bytes and a segment `mss`; problems are at
    /// `at` (`flows[3]`).
    pub fn check(&self, at: &Path, mtu: u32, mss: u32, out: &mut Vec<Problem>) {
        match &self.traffic {
            Traffic::Tcp if self.cc == crate::cc::bpf::NAME => {
                // cc::bpf's errors read "cc: ...": the part after the field's name is the message
                if let Err(e) = crate::cc::bpf::load(self.bpf_object.as_ref()) {
                    out.push(at.field("cc").problem(e.strip_prefix("cc: ").unwrap_or(&e)));
                }
            }
            Traffic::Tcp => {
                if let Err(e) = crate::cc::build(&self.cc, &self.params) {
                    out.push(e.under(at));
                }
            }
            Traffic::Udp(u) => u.check(&at.field("traffic"), mtu, out),
            Traffic::Ping(p) => p.check(&at.field("traffic"), mtu, out),
        }
        if let Some(r) = self.max_pacing_rate_bps {
            let cap = at.field("max_pacing_rate_bps");
            if self.traffic != Traffic::Tcp {
                out.push(cap.problem(format!("{r}: a {} flow is not paced (TCP only)", self.traffic.name())));
            }
            if r == 0 {
                out.push(cap.problem("0: must be > 0"));
            }
            if self.pacing == Some(false) {
                out.push(at.field("pacing").problem(
                    "false: a max_pacing_rate turns pacing on (Linux SK_PACING_NEEDED); drop one of them",
                ));
            }
        }
        if self.start_ns < 0 {
            out.push(at.field("start_ns").problem(format!("{}: must be >= 0", self.start_ns)));
        }
        if self.extra_delay_ns < 0 {
            out.push(at.field("extra_delay_ns").problem(format!("{}: must be >= 0", self.extra_delay_ns)));
        }
        if self.read_interval_ns < 0 {
            out.push(at.field("read_interval_ns").problem(format!("{}: must be >= 0 (0 reads as data arrives)", self.read_interval_ns)));
        }
        if self.initial_cwnd == 0 {
            out.push(at.field("initial_cwnd").problem("0: must be >= 1"));
        }
        if let Some(0) = self.size_bytes {
            out.push(at.field("size_bytes").problem("0: must be > 0 (or absent for bulk)"));
        }
        if let Some(w) = self.rwnd_bytes {
            if w < mss as u64 {
                out.push(at.field("rwnd_bytes").problem(format!("{w}: must be at least one MSS ({mss})")));
            }
        }
        self.delayed_ack.check(&at.field("delayed_ack"), out);
    }
}

/// The defaults of the trial's settings that the front end writes out in full (the trial's
/// sampling, MTU and MSS, a flow's initial window, delayed ACKs, captures, the datagram
/// headers), each taken from the part that owns it, so that the Python schema offers the same
/// without restating them. The disciplines' come with [`crate::qdisc::disciplines`].
pub fn defaults() -> serde_json::Value {
    use crate::capture::{Format, MAX_SNAPLEN, MIN_SNAPLEN};
    let capture = CaptureConfig::default();
    serde_json::json!({
        "sample_interval_ns": SAMPLE_INTERVAL_NS,
        "mtu": MTU,
        "mss": MSS,
        "initial_cwnd": INITIAL_CWND,
        "delayed_ack": DelayedAckConfig::default(),
        "receiver_nic": crate::nic::ReceiverNicConfig::default(),
        "capture": {
            "snaplen": capture.snaplen,
            "snaplen_min": MIN_SNAPLEN,
            "snaplen_max": MAX_SNAPLEN,
            "format": Format::default(),
        },
        "udp_headers": crate::datagram::UDP_HEADERS,
    })
}
