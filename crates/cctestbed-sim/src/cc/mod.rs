//! The congestion-control interface shared by every algorithm.
//!
//! Modelled on Linux `struct tcp_congestion_ops` (include/net/tcp.h): the transport owns loss
//! detection, recovery, the delivery-rate sampler and pacing; an algorithm only decides the
//! congestion window (in packets) and, if it wants, the pacing rate. Two styles exist, as in
//! Linux:
//! - *classic* algorithms (Reno, CUBIC, Vegas, H-TCP) implement [`CongestionControl::ssthresh`]
//!   and [`CongestionControl::cong_avoid`]; the transport applies Proportional Rate Reduction
//!   in recovery and sets cwnd = ssthresh on leaving it (`tcp_cwnd_reduction`,
//!   `tcp_end_cwnd_reduction`);
//! - *model-based* algorithms (BBR) return `true` from [`CongestionControl::controls_cwnd`] and
//!   set cwnd and pacing themselves in [`CongestionControl::cong_control`], called on every ACK
//!   with the shared [`RateSample`] (Linux `cong_control`).

use crate::jiffies::TickClock;
use crate::problem::{Path, Problem};
use crate::time::Nanos;
use std::collections::BTreeMap;

pub mod bbr;
pub mod bpf;
pub use bbr::v3 as bbr3;
pub mod cubic;
pub mod dctcp;
pub mod htcp;
pub mod minmax;
pub mod reno;
pub mod vegas;

/// Loss-recovery state of the connection, as Linux `enum tcp_ca_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaState {
    Open,
    /// SACKs or dupACKs seen, nothing marked lost yet.
    Disorder,
    /// Window reduction after an ECN echo (`TCP_CA_CWR`), no loss.
    Cwr,
    /// Fast recovery after losses detected by SACK/RACK.
    Recovery,
    /// After a retransmission timeout.
    Loss,
}

/// What the transport knows about the connection, read-only for the algorithm.
#[derive(Debug, Clone, Copy)]
pub struct ConnInfo {
    pub now: Nanos,
    pub mss: u32,
    /// Smoothed RTT (0 before the first sample).
    pub srtt_ns: Nanos,
    /// Minimum RTT seen over the connection's life (Linux `tcp_min_rtt`, windowed there).
    pub min_rtt_ns: Nanos,
    /// Packets in flight: packets_out - sacked_out - lost_out + retrans_out (`tcp_packets_in_flight`).
    pub packets_in_flight: u32,
    /// Packets delivered (ACKed or SACKed) since the start (`tp->delivered`).
    pub delivered: u64,
    /// Packets delivered by ACKs carrying ECE (`tp->delivered_ce`).
    pub delivered_ce: u64,
    /// The connection negotiated ECN.
    pub ecn: bool,
    /// Packets marked lost since the start (`tp->lost`).
    pub lost: u64,
    /// Packets SACKed, marked lost, and retransmitted still in flight (`tp->sacked_out`,
    /// `lost_out`, `retrans_out`).
    pub sacked_out: u32,
    pub lost_out: u32,
    pub retrans_out: u32,
    /// Whether the sender filled cwnd recently (`tcp_is_cwnd_limited`).
    pub is_cwnd_limited: bool,
    /// Non-zero while the connection is application-limited (`tp->app_limited`).
    pub app_limited: u64,
    pub ca_state: CaState,
    /// Current cwnd (packets) and ssthresh, so algorithms may read them.
    pub cwnd: u32,
    pub ssthresh: u32,
    /// Initial window, packets.
    pub initial_cwnd: u32,
    /// Packets sent and not yet cumulatively ACKed (`tp->packets_out`).
    pub packets_out: u32,
    /// Next new segment to send and oldest unacknowledged one, in segments.
    pub snd_nxt: u64,
    pub snd_una: u64,
    /// Time of the last transmission (`tp->lsndtime`).
    pub last_send_ns: Nanos,
    /// Whether this flow is paced.
    pub paced: bool,
    /// Time of the latest delivery (`tp->delivered_mstamp`).
    pub delivered_mstamp_ns: Nanos,
    /// Earliest departure time of the next packet under pacing (`tp->tcp_wstamp_ns`).
    pub wstamp_ns: Nanos,
    /// `sk_pacing_rate` in bytes/s as the transport keeps it: the algorithm's own rate, or
    /// `tcp_update_pacing_rate`'s for one that sets none (`u64::MAX` before an RTT sample).
    pub sk_pacing_rate: u64,
    /// `sk_max_pacing_rate` in bytes/s (`u64::MAX` when not set), which algorithms that set
    /// their own pacing rate cap it at (`bbr_bw_to_pacing_rate`).
    pub max_pacing_rate: u64,
    /// The kernel's tick clock, for the algorithms' jiffies stamps (`tcp_jiffies32`).
    pub ticks: TickClock,
}

/// The values an algorithm may write.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    /// Congestion window in packets (`tp->snd_cwnd`).
    pub cwnd: u32,
    /// Slow-start threshold in packets (`tp->snd_ssthresh`); `u32::MAX` is "infinite".
    pub ssthresh: u32,
    /// Pacing rate in bytes per second set by the algorithm (`sk->sk_pacing_rate`); `None`
    /// lets the transport derive it from cwnd/srtt as Linux does (`tcp_update_pacing_rate`).
    pub pacing_rate: Option<f64>,
    /// Fractional additive-increase counter (`tp->snd_cwnd_cnt`).
    pub cwnd_cnt: u32,
    /// Set to mark the connection application-limited after this call, as BBR does in
    /// PROBE_RTT (`tp->app_limited = delivered + in_flight`).
    pub set_app_limited: bool,
}

impl Window {
    /// `tcp_slow_start`: grow by `acked` up to ssthresh; returns the ACKs left over.
    pub fn slow_start(&mut self, acked: u32) -> u32 {
        let cwnd = self.cwnd.saturating_add(acked).min(self.ssthresh);
        let left = acked - (cwnd - self.cwnd).min(acked);
        self.cwnd = cwnd;
        left
    }

    /// `tcp_cong_avoid_ai`: grow by one packet for every `w` packets ACKed.
    pub fn cong_avoid_ai(&mut self, w: u32, acked: u32) {
        let w = w.max(1);
        if self.cwnd_cnt >= w {
            self.cwnd_cnt = 0;
            self.cwnd += 1;
        }
        self.cwnd_cnt += acked;
        if self.cwnd_cnt >= w {
            let delta = self.cwnd_cnt / w;
            self.cwnd_cnt -= delta * w;
            self.cwnd += delta;
        }
    }

    pub fn in_slow_start(&self) -> bool {
        self.cwnd < self.ssthresh
    }

    /// The common head of Linux's Reno-style `cong_avoid` hooks: nothing unless cwnd-limited,
    /// then slow start up to ssthresh. Returns the ACKed packets left for congestion avoidance.
    pub fn slow_start_if_cwnd_limited(&mut self, info: &ConnInfo, acked: u32) -> u32 {
        if !info.is_cwnd_limited {
            0
        } else if self.in_slow_start() {
            self.slow_start(acked)
        } else {
            acked
        }
    }
}

/// One delivery-rate sample (Linux `struct rate_sample`, net/ipv4/tcp_rate.c), produced once
/// per ACK by the transport's single rate estimator and handed to every algorithm.
#[derive(Debug, Clone, Copy, Default)]
pub struct RateSample {
    /// `tp->delivered` when the sampled packet was sent.
    pub prior_delivered: u64,
    /// `tp->delivered_mstamp` when the sampled packet was sent.
    pub prior_time: Nanos,
    /// Packets delivered over the interval; negative means invalid sample.
    pub delivered: i64,
    /// Sampling interval; <= 0 means invalid sample.
    pub interval_ns: Nanos,
    /// RTT of the most recently sent packet this ACK covers (-1 if none).
    pub rtt_ns: Nanos,
    /// Packets newly ACKed or SACKed by this ACK.
    pub acked_sacked: u32,
    /// Packets newly marked lost while processing this ACK.
    pub losses: u32,
    /// Packets in flight before this ACK was processed.
    pub prior_in_flight: u32,
    /// Whether the sampled packet was sent while application-limited.
    pub is_app_limited: bool,
    /// Whether the sampled packet was a retransmission.
    pub is_retrans: bool,
    /// Whether the ACK was delayed by the receiver (`rs->is_ack_delayed`).
    pub is_ack_delayed: bool,
    /// Packets in flight when the sampled packet was sent, including it (google/bbr `tx.in_flight`).
    pub tx_in_flight: u32,
    /// Packets marked lost between the sampled packet's send and now (google/bbr `rs->lost`).
    pub lost: u64,
    /// Packets delivered by ECE-carrying ACKs between the sampled packet's send and now
    /// (google/bbr `rs->delivered_ce`).
    pub delivered_ce: i64,
    /// This ACK carried ECE (google/bbr `rs->is_ece`).
    pub is_ece: bool,
}

impl RateSample {
    /// Delivery rate in packets per second, or `None` for an invalid sample.
    pub fn rate_pps(&self) -> Option<f64> {
        if self.delivered < 0 || self.interval_ns <= 0 {
            None
        } else {
            Some(self.delivered as f64 * 1e9 / self.interval_ns as f64)
        }
    }
}

/// The send-time state of a packet the transport has just marked lost (google/bbr hands the
/// skb itself to `skb_marked_lost`; these are the fields BBRv3 reads from it).
#[derive(Debug, Clone, Copy)]
pub struct LostPacket {
    /// Packets in flight when it was (last) sent, including itself (`tx.in_flight`).
    pub tx_in_flight: u32,
    /// `tp->lost` when it was sent (`tx.lost`); [`ConnInfo::lost`] already counts this loss.
    pub tx_lost: u64,
    /// Whether it was sent while application-limited (`tx.is_app_limited`).
    pub is_app_limited: bool,
}

/// Transmit-side events passed to [`CongestionControl::cwnd_event`] (Linux `enum tcp_ca_event`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaEvent {
    /// First transmission when nothing is in flight (`CA_EVENT_TX_START`).
    TxStart,
    /// Congestion window restart after idle (`CA_EVENT_CWND_RESTART`).
    CwndRestart,
}

/// One RTT sample from an ACK that advanced the scoreboard (Linux `struct ack_sample`).
#[derive(Debug, Clone, Copy)]
pub struct AckSample {
    pub pkts_acked: u32,
    /// RTT in ns (-1 if the ACK yielded no valid sample, e.g. only retransmitted data).
    pub rtt_ns: Nanos,
    pub in_flight: u32,
}

/// A congestion-control algorithm. All methods have Linux names and the same call points.
pub trait CongestionControl: std::any::Any + Send {
    /// Name as given in trial files.
    fn name(&self) -> &'static str;

    /// Gives the algorithm its own random stream (BBR's random ProbeBW phase).
    fn seed(&mut self, _rng: crate::rng::SimRng) {}

    /// Called once before the first packet is sent (`init`).
    fn init(&mut self, _info: &ConnInfo, _w: &mut Window) {}

    /// Whether the algorithm sets cwnd itself on every ACK (`cong_control` in Linux).
    fn controls_cwnd(&self) -> bool {
        false
    }

    /// Whether the flow should be paced when the trial leaves pacing to the algorithm.
    fn wants_pacing(&self) -> bool {
        false
    }

    /// Slow-start threshold on entering recovery or loss (`ssthresh`).
    fn ssthresh(&mut self, info: &ConnInfo, w: &Window) -> u32;

    /// Window growth on an ACK outside recovery (`cong_avoid`); `acked` packets newly delivered.
    fn cong_avoid(&mut self, _info: &ConnInfo, _w: &mut Window, _acked: u32) {}

    /// Model-based control on every ACK (`cong_control`).
    fn cong_control(&mut self, _info: &ConnInfo, _w: &mut Window, _rs: &RateSample) {}

    /// Called on each ACK that acknowledged data, with its RTT sample (`pkts_acked`).
    fn pkts_acked(&mut self, _info: &ConnInfo, _w: &mut Window, _sample: &AckSample) {}

    /// A packet was just marked lost, by RACK or an RTO (google/bbr `skb_marked_lost`).
    fn skb_marked_lost(&mut self, _info: &ConnInfo, _pkt: &LostPacket) {}

    /// Called on every ACK of an ECN-capable connection once its deliveries are counted,
    /// with whether it carried ECE (`in_ack_event` with CA_ACK_ECE).
    fn in_ack_event(&mut self, _info: &ConnInfo, _w: &mut Window, _ece: bool) {}

    /// Whether the receiver should echo CE marks per packet, as DCTCP needs (Linux
    /// `TCP_CONG_NEEDS_ECN` / `TCP_CONG_WANTS_CE_EVENTS` at the receiving host), rather than
    /// RFC 3168's until-CWR echo.
    fn wants_ce_events(&self) -> bool {
        false
    }

    /// Recovery-state changes (`set_state`).
    fn set_state(&mut self, _info: &ConnInfo, _w: &mut Window, _new: CaState) {}

    /// Transmit-side events (`cwnd_event`).
    fn cwnd_event(&mut self, _info: &ConnInfo, _w: &mut Window, _ev: CaEvent) {}
    /// Smallest TSO/GSO burst in segments (Linux `min_tso_segs`); `None` is
    /// `sysctl_tcp_min_tso_segs` (2).
    fn min_tso_segs(&self) -> Option<u32> {
        None
    }
    /// The whole TSO/GSO burst size in segments, if the algorithm decides it (google/bbr's
    /// `tso_segs` hook); `None` lets the transport autosize it (`tcp_tso_autosize`).
    fn tso_segs(&self, _mss: u32) -> Option<u32> {
        None
    }

    /// The multiplier, per segment of the window, of the send buffer `tcp_sndbuf_expand` sizes
    /// (`sndbuf_expand`); `None` is Linux's 2. Asked where `tcp_init_buffer_space` asks it:
    /// once the algorithm is initialised at establishment. The simulator models no send
    /// buffer, so the answer changes nothing (an algorithm may still change the window it is
    /// given); nor does it model `tcp_new_space`, which asks again when an application blocked
    /// on a full send buffer gets room.
    fn sndbuf_expand(&mut self, _info: &ConnInfo, _w: &mut Window) -> Option<u32> {
        None
    }

    /// The connection's congestion control is torn down (`release`, from
    /// `tcp_cleanup_congestion_control` when the socket is destroyed): once all of a sized
    /// flow's data is acknowledged, or at the end of the trial for a flow still open; never for
    /// a flow whose algorithm was not initialised, and at most once.
    fn release(&mut self, _info: &ConnInfo, _w: &Window) {}

    /// cwnd to restore after a spurious reduction (`undo_cwnd`); default as Reno's.
    fn undo_cwnd(&mut self, _info: &ConnInfo, w: &Window, prior_cwnd: u32) -> u32 {
        w.cwnd.max(prior_cwnd)
    }

    /// Name of the algorithm's own state machine state (BBR's STARTUP, ...), for telemetry;
    /// `None` lets the transport report slow_start / cong_avoid / recovery / loss.
    fn state_name(&self) -> Option<&'static str> {
        None
    }

    /// Names of the algorithm's internal estimates, as telemetry column suffixes.
    fn telemetry_keys(&self) -> &'static [&'static str] {
        &[]
    }

    /// Current values of [`Self::telemetry_keys`], in the same order.
    fn telemetry(&self, _out: &mut Vec<f64>) {}
}

impl dyn CongestionControl {
    /// For inspecting an algorithm's concrete state (tests, telemetry).
    pub fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    /// The `i`-th telemetry value (NaN if absent); convenient in tests.
    pub fn telemetry_value(&self, i: usize) -> f64 {
        let mut v = Vec::new();
        self.telemetry(&mut v);
        v.get(i).copied().unwrap_or(f64::NAN)
    }
}

/// Names accepted in trial files, with their parameters' defaults.
pub fn algorithms() -> Vec<(&'static str, BTreeMap<&'static str, f64>)> {
    vec![
        ("reno", reno::RenoParams::default().to_map()),
        ("cubic", cubic::CubicParams::default().to_map()),
        ("bbr", bbr::BbrParams::default().to_map()),
        ("bbr1", bbr::BbrParams::default().to_map()),
        ("bbr-shallow", bbr::BbrParams::shallow().to_map()),
        ("bbr3", bbr3::Bbr3Params::default().to_map()),
        ("bbr-adaptive", bbr::BbrParams::adaptive().to_map()),
        ("bbr-stable-rtprop", bbr::BbrParams::stable_rtprop().to_map()),
        ("vegas", vegas::VegasParams::default().to_map()),
        ("htcp", htcp::HtcpParams::default().to_map()),
        ("dctcp", dctcp::DctcpParams::default().to_map()),
    ]
}

/// Builds an algorithm by name, checking its parameters. A problem is at `cc` or
/// `params.<name>`, relative to the flow, which callers place under the flow's path.
pub fn build(name: &str, params: &BTreeMap<String, f64>) -> Result<Box<dyn CongestionControl>, Problem> {
    match name {
        "reno" => Ok(Box::new(reno::Reno::new(reno::RenoParams::from_map(params)?))),
        "cubic" => Ok(Box::new(cubic::Cubic::new(cubic::CubicParams::from_map(params)?))),
        "bbr" | "bbr1" => Ok(Box::new(bbr::Bbr::new(bbr::BbrParams::from_map(params)?, "bbr"))),
        "bbr3" => Ok(Box::new(bbr3::Bbr3::new(bbr3::Bbr3Params::from_map(params)?))),
        "vegas" => Ok(Box::new(vegas::Vegas::new(vegas::VegasParams::from_map(params)?))),
        "htcp" => Ok(Box::new(htcp::Htcp::new(htcp::HtcpParams::from_map(params)?))),
        "dctcp" => Ok(Box::new(dctcp::Dctcp::new(dctcp::DctcpParams::from_map(params)?))),
        "bbr-shallow" => Ok(Box::new(bbr::Bbr::new(bbr::BbrParams::shallow().with_map(params)?, "bbr-shallow"))),
        "bbr-adaptive" => Ok(Box::new(bbr::Bbr::new(bbr::BbrParams::adaptive().with_map(params)?, "bbr-adaptive"))),
        "bbr-stable-rtprop" => {
            Ok(Box::new(bbr::Bbr::new(bbr::BbrParams::stable_rtprop().with_map(params)?, "bbr-stable-rtprop")))
        }
        _ => {
            let names: Vec<_> = algorithms().iter().map(|(n, _)| *n).collect();
            Err(Path::of(&["cc"]).problem(format!("'{name}': unknown algorithm; valid are {}", names.join(", "))))
        }
    }
}

/// Declares an algorithm's parameter struct with defaults, docs and range checks, converting
/// from and to the trial file's `params` table so every algorithm validates the same way.
#[macro_export]
macro_rules! cc_params {
    ($(#[$m:meta])* pub struct $name:ident { $( $(#[$fm:meta])* $field:ident : $default:expr, $lo:expr, $hi:expr; )* }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq)]
        pub struct $name { $( $(#[$fm])* pub $field: f64, )* }
        impl Default for $name {
            fn default() -> Self { $name { $( $field: $default, )* } }
        }
        impl $name {
            pub const NAMES: &'static [&'static str] = &[$(stringify!($field)),*];
            #[allow(unused_mut)]
            pub fn to_map(&self) -> std::collections::BTreeMap<&'static str, f64> {
                let mut m = std::collections::BTreeMap::new();
                $( m.insert(stringify!($field), self.$field); )*
                m
            }
            #[allow(unused_mut, unused_variables)]
            pub fn from_map(p: &std::collections::BTreeMap<String, f64>) -> Result<Self, $crate::problem::Problem> {
                Self::default().with_map(p)
            }
            /// These parameters with the given overrides applied; a problem is at `params.<name>`.
            #[allow(unused_mut, unused_variables)]
            pub fn with_map(self, p: &std::collections::BTreeMap<String, f64>) -> Result<Self, $crate::problem::Problem> {
                let mut out = self;
                for (k, v) in p {
                    let at = $crate::problem::Path::of(&["params", k]);
                    match k.as_str() {
                        $( stringify!($field) => {
                            if !(*v >= $lo && *v <= $hi) {
                                return Err(at.problem(format!("{}: must be in [{}, {}]", v, $lo, $hi)));
                            }
                            out.$field = *v;
                        } )*
                        _ => return Err(at.problem(format!(
                            "unknown parameter; valid are {}",
                            if Self::NAMES.is_empty() { "none".to_string() } else { Self::NAMES.join(", ") }))),
                    }
                }
                Ok(out)
            }
        }
    };
}
