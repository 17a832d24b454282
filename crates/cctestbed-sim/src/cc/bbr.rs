//! BBR version 1 as Linux `net/ipv4/tcp_bbr.c` implements it (Cardwell et al., "BBR:
//! Congestion-Based Congestion Control", ACM Queue 2016).
//!
//! On each ACK the model is updated, then pacing rate and cwnd follow from it:
//! ```text
//!   btlbw   = windowed max(delivered / interval, 10 packet-timed rounds)
//!   rtprop  = windowed min(rtt, 10 s)
//!   pacing  = pacing_gain * btlbw * (1 - 1 %)
//!   cwnd    = cwnd_gain * btlbw * rtprop + ACK-aggregation allowance + quantization budget
//! ```
//! States: STARTUP (gain 2/ln 2 until the bandwidth stops growing by 25 % for 3 rounds) ->
//! DRAIN (pacing gain 1/2.885 until in-flight <= BDP) -> PROBE_BW (8-phase pacing gain cycle
//! 1.25, 0.75, 1 x 6, starting in a random phase other than 0.75) <-> PROBE_RTT (every 10 s
//! without a new min RTT: cwnd 4 packets for max(200 ms, one round)).
//!
//! The order of work per ACK is `bbr_main`: update_bw (round counting, long-term sampling,
//! max filter) -> ACK aggregation -> cycle phase -> full-bw check -> drain check -> min_rtt
//! and PROBE_RTT -> gains -> pacing rate -> cwnd. All quantities use Linux's fixed-point
//! units (bandwidth in packets per microsecond << 24, gains in 1/256), so integer rounding
//! matches the kernel's.
//!
//! Choices and deviations:
//! - TSO quantization budget: kept as Linux computes it (`bbr_tso_segs_goal`: about 1 ms of
//!   data at the pacing rate, 2..127 segments; +3 goals, rounded up to even, +2 in the 1.25
//!   phase). BBR computes it from the pacing rate whatever the NIC offers, so a kernel with
//!   TSO off carries the same budget; `tso_budget = 0` removes it to study a budget-free BBR.
//! - min_rtt_stamp and the PROBE_RTT hold are in jiffies at CONFIG_HZ = 250, as Linux keeps
//!   them (`tcp_jiffies32`, `msecs_to_jiffies`, `after()`): the hold ends only on an ACK
//!   after the tick that follows 200 ms, so when the probe's ACKs come in bursts one round
//!   trip apart (a lone flow; RTprop dividing 200 ms) PROBE_RTT lasts one round longer than
//!   in nanoseconds (0.4 s against 0.3 s at 100 ms on Linux 6.18, see [`crate::jiffies`]).
//! - The parameters below (all with Linux's defaults) let the thesis' variants be built on
//!   this code, and combined freely: `cwnd_gain = 1.5` is "BBR Shallow" (tcp_bbrshallow.c);
//!   `adaptive_cap = 1` is the thesis' adaptive inflight cap (Algorithm 1: per round, lower
//!   the PROBE_BW cwnd gain on loss, else raise it when delivery falls short of BtlBw, else
//!   lower it when RTT exceeds RTprop; the printed "<" on the RTT test is read as ">" as the
//!   prose says); `stable_rtprop = 1` keeps the RTprop estimate from rising unless a higher
//!   value persists over several PROBE_RTT probes or jumps by a large factor. The thesis
//!   gives no constants for either proposal; the defaults here were chosen by running its
//!   experiments (see the README's validation section).

use super::minmax::MinMax;
use super::{CaEvent, CaState, CongestionControl, ConnInfo, RateSample, Window};
use crate::jiffies::{jiffies, msecs_to_jiffies, CONFIG_HZ};
use crate::rng::SimRng;
use crate::tcp::tso;
use crate::time::Nanos;

/// Bandwidth unit: packets per microsecond << BW_SCALE.
pub(crate) const BW_SCALE: u32 = 24;
pub(crate) const BW_UNIT: u64 = 1 << BW_SCALE;
/// Gains are fractions of BBR_UNIT.
pub(crate) const BBR_SCALE: u32 = 8;
pub(crate) const BBR_UNIT: u32 = 1 << BBR_SCALE;
/// Number of phases in the PROBE_BW pacing-gain cycle.
const CYCLE_LEN: usize = 8;
/// TCP_INIT_CWND: cwnd target before any RTT sample.
const TCP_INIT_CWND: u32 = 10;
/// Largest TSO burst BBR budgets for (GSO_LEGACY_MAX_SIZE - 1 - MAX_TCP_HEADER).
pub(crate) const GSO_MAX_BYTES: u64 = tso::GSO_LEGACY_MAX_SIZE - 1 - tso::MAX_TCP_HEADER;
/// Restart the ACK-aggregation epoch after this many packets (bbr_ack_epoch_acked_reset_thresh).
const ACK_EPOCH_ACKED_RESET_THRESH: u32 = 1 << 20;
/// Cap on the aggregation allowance, in time at the estimated bandwidth (bbr_extra_acked_max_us).
pub(crate) const EXTRA_ACKED_MAX_US: u64 = 100_000;
/// Below this pacing rate TSO bursts are one segment (bbr_min_tso_rate, bits/s).
const BBR_MIN_TSO_RATE: u64 = 1_200_000;

crate::cc_params! {
    /// BBRv1 constants from tcp_bbr.c, same names and meanings, as real numbers.
    pub struct BbrParams {
        /// STARTUP pacing and cwnd gain (bbr_high_gain = 2/ln 2 = 2.885).
        high_gain: 2.885, 1.0, 10.0;
        /// DRAIN pacing gain (bbr_drain_gain = 1/2.885).
        drain_gain: 1.0 / 2.885, 0.01, 1.0;
        /// PROBE_BW cwnd gain (bbr_cwnd_gain); 1.5 is the thesis' BBR Shallow.
        cwnd_gain: 2.0, 0.5, 10.0;
        /// Pacing gain of the probing phase of the cycle (bbr_pacing_gain[0]).
        probe_gain: 1.25, 1.0, 4.0;
        /// Pacing gain of the draining phase of the cycle (bbr_pacing_gain[1]).
        drain_cycle_gain: 0.75, 0.1, 1.0;
        /// Phases a flow may start its gain cycle in (bbr_cycle_rand).
        cycle_rand: 7.0, 1.0, 7.0;
        /// Length of the bandwidth max filter in rounds (bbr_bw_rtts = CYCLE_LEN + 2).
        bw_filter_rounds: 10.0, 1.0, 1000.0;
        /// min_rtt filter window, seconds (bbr_min_rtt_win_sec).
        probe_rtt_interval: 10.0, 0.01, 3600.0;
        /// Time held at cwnd_min_target in PROBE_RTT, seconds (bbr_probe_rtt_mode_ms).
        probe_rtt_duration: 0.2, 0.0, 10.0;
        /// Minimum cwnd and the PROBE_RTT cwnd, packets (bbr_cwnd_min_target).
        cwnd_min_target: 4.0, 1.0, 1000.0;
        /// Bandwidth growth that counts as "still growing" in STARTUP (bbr_full_bw_thresh).
        full_bw_thresh: 1.25, 1.0, 4.0;
        /// Rounds without such growth before the pipe counts as full (bbr_full_bw_cnt).
        full_bw_cnt: 3.0, 1.0, 3.0;
        /// Gain on the ACK-aggregation allowance (bbr_extra_acked_gain); 0 disables it.
        extra_acked_gain: 1.0, 0.0, 4.0;
        /// Rounds per ACK-aggregation filter slot (bbr_extra_acked_win_rtts).
        extra_acked_win_rtts: 5.0, 1.0, 31.0;
        /// Pacing below the estimate, percent (bbr_pacing_margin_percent).
        pacing_margin_percent: 1.0, 0.0, 50.0;
        /// Keep Linux's TSO quantization budget in the cwnd target (1) or not (0).
        tso_budget: 1.0, 0.0, 1.0;
        /// Long-term (policer) bandwidth estimator on (1) or off (0).
        lt_bw: 1.0, 0.0, 1.0;
        /// The thesis' adaptive inflight cap (1 = on): PROBE_BW cwnd gain adjusted per round.
        adaptive_cap: 0.0, 0.0, 1.0;
        /// Adaptive cap: round loss rate (lost / sent) above which the gain is lowered.
        adaptive_loss_thresh: 0.01, 0.0, 1.0;
        /// Adaptive cap: gain change per round.
        adaptive_step: 0.05, 0.001, 1.0;
        /// Adaptive cap: raise the gain if the round's delivery rate is below
        /// (1 - margin) x the bandwidth estimate.
        adaptive_delivery_margin: 0.05, 0.0, 1.0;
        /// Adaptive cap: lower the gain if the round's smallest RTT exceeds
        /// (1 + margin) x RTprop, i.e. a standing queue persisted the whole round.
        adaptive_rtt_margin: 0.25, 0.0, 10.0;
        /// Adaptive cap: bounds of the cwnd gain.
        adaptive_min_gain: 1.1, 0.5, 10.0;
        adaptive_max_gain: 2.0, 0.5, 10.0;
        /// Stable RTprop estimator (1 = on): a higher RTprop is adopted only when it persists.
        stable_rtprop: 0.0, 0.0, 1.0;
        /// Stable RTprop: consecutive PROBE_RTT probes that must agree on a higher RTprop.
        stable_rtprop_probes: 3.0, 1.0, 100.0;
        /// Stable RTprop: how closely (relative spread) those probes must agree.
        stable_rtprop_tolerance: 0.01, 0.0, 10.0;
        /// Stable RTprop: a single probe this many times the estimate is adopted at once
        /// (a route change); set it above 1 + the deepest queue (in BDP) a competitor may hold.
        stable_rtprop_jump: 4.0, 1.0, 1000.0;
    }
}

impl BbrParams {
    /// 'BBR Shallow' (the thesis' tcp_bbrshallow.c): only the PROBE_BW cwnd gain changes, to 1.5.
    pub fn shallow() -> Self {
        BbrParams { cwnd_gain: 1.5, ..BbrParams::default() }
    }

    /// BBRv1 with the thesis' adaptive inflight cap.
    pub fn adaptive() -> Self {
        BbrParams { adaptive_cap: 1.0, ..BbrParams::default() }
    }

    /// BBRv1 with the stable RTprop estimator.
    pub fn stable_rtprop() -> Self {
        BbrParams { stable_rtprop: 1.0, ..BbrParams::default() }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Startup,
    Drain,
    ProbeBw,
    ProbeRtt,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Startup => "STARTUP",
            Mode::Drain => "DRAIN",
            Mode::ProbeBw => "PROBE_BW",
            Mode::ProbeRtt => "PROBE_RTT",
        }
    }
}

/// A real gain as a fraction of BBR_UNIT.
pub(crate) fn to_unit(x: f64) -> u32 {
    (x * BBR_UNIT as f64).round() as u32
}

/// `bbr_rate_bytes_per_sec`: a bandwidth (packets/us << BW_SCALE) times a gain, less the
/// pacing margin, in bytes per second.
pub(crate) fn rate_bytes_per_sec(rate: u64, mss: u32, gain: u32, margin_percent: f64) -> u64 {
    let margin = (100.0 - margin_percent) / 100.0;
    let r = (rate as u128 * mss as u128 * gain as u128) >> BBR_SCALE;
    // The conversions go through 64 bits when the values fit: the same f64 and the same
    // truncated integer, without the 128-bit conversion routines (once per ACK).
    let x = match u64::try_from(r) {
        Ok(r64) => r64 as f64,
        Err(_) => r as f64,
    } * 1e6 * margin;
    let r = if x < 18_446_744_073_709_551_616.0 { x as u64 as u128 } else { x as u128 };
    (r >> BW_SCALE) as u64
}

/// The arithmetic of `bbr_bdp`: ceil(bw * min_rtt * gain) in packets, rounded up so that a
/// low estimate cannot feed on itself.
pub(crate) fn bdp_packets(bw: u64, min_rtt_us: u32, gain: u32) -> u32 {
    let w = bw as u128 * min_rtt_us as u128;
    ((((w * gain as u128) >> BBR_SCALE) + BW_UNIT as u128 - 1) / BW_UNIT as u128) as u32
}

/// `bbr_packets_in_net_at_edt`: packets in flight at the next departure time, less what the
/// path delivers at `bw` until then; `edt_skb` counts the packet leaving at that time when
/// inflight is rising.
pub(crate) fn packets_in_net_at_edt(info: &ConnInfo, inflight_now: u32, bw: u64, edt_skb: u32) -> u32 {
    let interval_us = ((info.wstamp_ns - info.now).max(0) / 1000) as u64;
    let interval_delivered = ((bw as u128 * interval_us as u128) >> BW_SCALE) as u64;
    (inflight_now as u64 + edt_skb as u64).saturating_sub(interval_delivered) as u32
}

/// The bandwidth `bbr_init_pacing_rate_from_rtt` starts pacing from: cwnd per srtt, or per
/// 1 ms before any RTT sample.
pub(crate) fn initial_bw(info: &ConnInfo, cwnd: u32) -> u64 {
    let rtt_us = if info.srtt_ns > 0 { ((info.srtt_ns / 1000) as u64).max(1) } else { 1000 };
    cwnd as u64 * BW_UNIT / rtt_us
}

/// `bbr_save_cwnd`: the cwnd to restore after recovery or PROBE_RTT. Outside both the current
/// one is good; inside, the larger of it and the one saved before.
pub(crate) fn saved_cwnd(prev_ca_state: CaState, in_probe_rtt: bool, prior_cwnd: u32, cwnd: u32) -> u32 {
    if matches!(prev_ca_state, CaState::Open | CaState::Disorder | CaState::Cwr) && !in_probe_rtt {
        cwnd
    } else {
        prior_cwnd.max(cwnd)
    }
}

/// PROBE_RTT's hold (the tail of `bbr_update_min_rtt` and the test of
/// `bbr_check_probe_rtt_done`): once the flight is down to the PROBE_RTT cwnd, stay for a
/// given time and until one more round has ended.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ProbeRttHold {
    /// `probe_rtt_done_stamp`, jiffies.
    done_stamp: Option<u64>,
    round_done: bool,
}

impl ProbeRttHold {
    /// On entering PROBE_RTT: the hold starts once the flight is low enough.
    pub(crate) fn restart(&mut self) {
        self.done_stamp = None;
    }

    /// One ACK in PROBE_RTT; true once both the time and the round have passed. When the flight
    /// first reaches `target`, the timer starts and so does a new round (`next_rtt_delivered`).
    /// `hold_j` is the hold in jiffies (`msecs_to_jiffies(bbr_probe_rtt_mode_ms)`).
    pub(crate) fn on_ack(&mut self, info: &ConnInfo, target: u32, hold_j: u64, round_start: bool, next_rtt_delivered: &mut u64) -> bool {
        if self.done_stamp.is_none() && info.packets_in_flight <= target {
            self.done_stamp = Some(jiffies(info.now, CONFIG_HZ) + hold_j);
            self.round_done = false;
            *next_rtt_delivered = info.delivered;
            return false;
        }
        if self.done_stamp.is_some() && round_start {
            self.round_done = true;
        }
        self.round_done && self.time_passed(info.now)
    }

    /// Whether the hold time has passed (`after(tcp_jiffies32, probe_rtt_done_stamp)`).
    pub(crate) fn time_passed(&self, now: Nanos) -> bool {
        matches!(self.done_stamp, Some(t) if jiffies(now, CONFIG_HZ) > t)
    }
}

/// ACK-aggregation estimator (`bbr_update_ack_aggregation`, `bbr_extra_acked`): the most data
/// ACKed beyond bw x elapsed time within an epoch, max-filtered over two slots of a given
/// number of rounds each (so over the last k to 2k rounds).
#[derive(Debug, Clone, Default)]
pub(crate) struct AckAggregation {
    epoch_mstamp: Nanos,
    epoch_acked: u32,
    extra_acked: [u32; 2],
    win_rtts: u32,
    win_idx: usize,
}

impl AckAggregation {
    /// Maximum recent excess ACKed data, packets.
    pub(crate) fn extra_acked(&self) -> u32 {
        self.extra_acked[0].max(self.extra_acked[1])
    }

    /// Starts a new epoch at `now` (connection start, restart from idle).
    pub(crate) fn restart_epoch(&mut self, now: Nanos) {
        self.epoch_mstamp = now;
        self.epoch_acked = 0;
    }

    /// One valid ACK of `acked` packets: a round start ages the filter once `win_rtts_thresh`
    /// rounds have passed; `bw` is the estimate the expected delivery is computed from.
    pub(crate) fn update(&mut self, round_start: bool, win_rtts_thresh: u32, acked: u32, delivered_mstamp: Nanos, bw: u64, cwnd: u32) {
        if round_start {
            self.win_rtts = (self.win_rtts + 1).min(0x1F);
            if self.win_rtts >= win_rtts_thresh {
                self.win_rtts = 0;
                self.win_idx ^= 1;
                self.extra_acked[self.win_idx] = 0;
            }
        }
        let epoch_us = ((delivered_mstamp - self.epoch_mstamp) / 1000) as u64;
        let mut expected = (bw as u128 * epoch_us as u128 / BW_UNIT as u128) as u32;
        if self.epoch_acked <= expected || self.epoch_acked + acked >= ACK_EPOCH_ACKED_RESET_THRESH {
            self.epoch_acked = 0;
            self.epoch_mstamp = delivered_mstamp;
            expected = 0;
        }
        self.epoch_acked = (self.epoch_acked + acked).min(0xFFFFF);
        let extra = (self.epoch_acked - expected).min(cwnd);
        let slot = &mut self.extra_acked[self.win_idx];
        *slot = (*slot).max(extra);
    }
}

/// Long-term sampling constants (bbr_lt_*), fixed as in Linux.
const LT_INTVL_MIN_RTTS: u32 = 4;
const LT_LOSS_THRESH: u64 = 50;
const LT_BW_RATIO: u64 = BBR_UNIT as u64 / 8;
const LT_BW_DIFF_BYTES_PER_S: u64 = 4000 / 8;
const LT_BW_MAX_RTTS: u32 = 48;

pub struct Bbr {
    p: BbrParams,
    name: &'static str,
    high_gain: u32,
    drain_gain: u32,
    cwnd_gain_probe_bw: u32,
    pacing_gains: [u32; CYCLE_LEN],
    full_bw_thresh: u32,
    /// min_rtt filter window, jiffies (`bbr_min_rtt_win_sec * HZ`).
    min_rtt_win_j: u64,
    /// PROBE_RTT hold, jiffies (`msecs_to_jiffies(bbr_probe_rtt_mode_ms)`); 0 disables PROBE_RTT.
    probe_rtt_mode_j: u64,
    cwnd_min_target: u32,
    rng: SimRng,

    pub mode: Mode,
    min_rtt_us: u32,
    /// Jiffies when min_rtt_us was last renewed.
    min_rtt_stamp: u64,
    probe_rtt: ProbeRttHold,
    bw: MinMax,
    pub rtt_cnt: u32,
    next_rtt_delivered: u64,
    cycle_mstamp: Nanos,
    prev_ca_state: CaState,
    packet_conservation: bool,
    round_start: bool,
    idle_restart: bool,
    lt_is_sampling: bool,
    lt_rtt_cnt: u32,
    lt_use_bw: bool,
    lt_bw: u64,
    lt_last_delivered: u64,
    lt_last_stamp_ms: i64,
    lt_last_lost: u64,
    pub pacing_gain: u32,
    pub cwnd_gain: u32,
    pub full_bw_reached: bool,
    full_bw_cnt: u32,
    pub cycle_idx: usize,
    has_seen_rtt: bool,
    prior_cwnd: u32,
    full_bw: u64,
    aggr: AckAggregation,
    /// sk_pacing_rate, bytes per second.
    pacing_rate: u64,
    mss: u32,
    /// Adaptive inflight cap: what the current round has seen.
    round: RoundStats,
    /// Stable RTprop: smallest RTT since the filter expired (the current probe's measurement)
    /// and the recent probes that measured above the estimate.
    probe_min_rtt_us: u32,
    higher_probes: Vec<u32>,
}

/// Per-round counters for the adaptive inflight cap.
#[derive(Debug, Clone, Copy)]
struct RoundStats {
    start: Nanos,
    delivered: u64,
    lost: u64,
    min_rtt_us: u32,
}

impl Bbr {
    pub fn new(p: BbrParams, name: &'static str) -> Self {
        let probe = to_unit(p.probe_gain);
        let down = to_unit(p.drain_cycle_gain);
        Bbr {
            name,
            // Linux: BBR_UNIT * 2885 / 1000 + 1 = 739 and BBR_UNIT * 1000 / 2885 = 88.
            high_gain: if p.high_gain == 2.885 { BBR_UNIT * 2885 / 1000 + 1 } else { to_unit(p.high_gain) },
            drain_gain: if p.drain_gain == 1.0 / 2.885 { BBR_UNIT * 1000 / 2885 } else { to_unit(p.drain_gain) },
            cwnd_gain_probe_bw: to_unit(p.cwnd_gain),
            pacing_gains: [probe, down, BBR_UNIT, BBR_UNIT, BBR_UNIT, BBR_UNIT, BBR_UNIT, BBR_UNIT],
            full_bw_thresh: to_unit(p.full_bw_thresh),
            min_rtt_win_j: (p.probe_rtt_interval * CONFIG_HZ as f64).round() as u64,
            probe_rtt_mode_j: msecs_to_jiffies((p.probe_rtt_duration * 1e3).round() as u64, CONFIG_HZ),
            cwnd_min_target: p.cwnd_min_target as u32,
            p,
            rng: SimRng::new(0, 0),
            mode: Mode::Startup,
            min_rtt_us: u32::MAX,
            min_rtt_stamp: 0,
            probe_rtt: ProbeRttHold::default(),
            bw: MinMax::default(),
            rtt_cnt: 0,
            next_rtt_delivered: 0,
            cycle_mstamp: 0,
            prev_ca_state: CaState::Open,
            packet_conservation: false,
            round_start: false,
            idle_restart: false,
            lt_is_sampling: false,
            lt_rtt_cnt: 0,
            lt_use_bw: false,
            lt_bw: 0,
            lt_last_delivered: 0,
            lt_last_stamp_ms: 0,
            lt_last_lost: 0,
            pacing_gain: 0,
            cwnd_gain: 0,
            full_bw_reached: false,
            full_bw_cnt: 0,
            cycle_idx: 0,
            has_seen_rtt: false,
            prior_cwnd: 0,
            full_bw: 0,
            aggr: AckAggregation::default(),
            pacing_rate: 0,
            mss: 1448,
            round: RoundStats { start: 0, delivered: 0, lost: 0, min_rtt_us: u32::MAX },
            probe_min_rtt_us: u32::MAX,
            higher_probes: Vec::new(),
        }
    }

    /// `bbr_max_bw`.
    pub fn max_bw(&self) -> u64 {
        self.bw.get()
    }

    /// `bbr_bw`: the long-term estimate while policed, else the max filter.
    pub fn bw(&self) -> u64 {
        if self.lt_use_bw {
            self.lt_bw
        } else {
            self.max_bw()
        }
    }

    /// Bandwidth estimate in bits per second of payload.
    pub fn bw_bps(&self) -> f64 {
        self.bw() as f64 * self.mss as f64 * 8.0 * 1e6 / BW_UNIT as f64
    }

    /// min_rtt estimate in ns, if any.
    pub fn min_rtt_ns(&self) -> Option<Nanos> {
        (self.min_rtt_us != u32::MAX).then_some(self.min_rtt_us as Nanos * 1000)
    }

    /// `bbr_rate_bytes_per_sec`.
    fn rate_bytes_per_sec(&self, rate: u64, gain: u32) -> u64 {
        rate_bytes_per_sec(rate, self.mss, gain, self.p.pacing_margin_percent)
    }

    fn init_pacing_rate_from_rtt(&mut self, info: &ConnInfo, cwnd: u32) {
        self.has_seen_rtt |= info.srtt_ns > 0;
        // bbr_bw_to_pacing_rate: capped at sk_max_pacing_rate.
        self.pacing_rate = self.rate_bytes_per_sec(initial_bw(info, cwnd), self.high_gain).min(info.max_pacing_rate);
    }

    fn set_pacing_rate(&mut self, info: &ConnInfo, cwnd: u32, bw: u64, gain: u32) {
        let rate = self.rate_bytes_per_sec(bw, gain).min(info.max_pacing_rate);
        if !self.has_seen_rtt && info.srtt_ns > 0 {
            self.init_pacing_rate_from_rtt(info, cwnd);
        }
        if self.full_bw_reached || rate > self.pacing_rate {
            self.pacing_rate = rate;
        }
    }

    /// `bbr_min_tso_segs`: one-segment bursts below 1.2 Mbit/s, else two.
    fn min_tso_segs(&self) -> u32 {
        if self.pacing_rate < BBR_MIN_TSO_RATE >> 3 {
            1
        } else {
            2
        }
    }

    /// `bbr_tso_segs_goal`: `tcp_tso_autosize` without the RTT allowance, at most 127.
    fn tso_segs_goal(&self) -> u32 {
        tso::autosize(self.pacing_rate, self.mss, None, 0, GSO_MAX_BYTES, self.min_tso_segs()).min(0x7F)
    }

    fn save_cwnd(&mut self, cwnd: u32) {
        self.prior_cwnd = saved_cwnd(self.prev_ca_state, self.mode == Mode::ProbeRtt, self.prior_cwnd, cwnd);
    }

    /// `bbr_bdp`: ceil(bw * min_rtt * gain) in packets.
    fn bdp(&self, bw: u64, gain: u32) -> u32 {
        if self.min_rtt_us == u32::MAX {
            return TCP_INIT_CWND;
        }
        bdp_packets(bw, self.min_rtt_us, gain)
    }

    /// `bbr_quantization_budget`.
    fn quantization_budget(&self, cwnd: u32) -> u32 {
        let mut cwnd = cwnd;
        if self.p.tso_budget != 0.0 {
            cwnd += 3 * self.tso_segs_goal();
            cwnd = (cwnd + 1) & !1;
        }
        if self.mode == Mode::ProbeBw && self.cycle_idx == 0 {
            cwnd += 2;
        }
        cwnd
    }

    /// `bbr_inflight`.
    fn inflight(&self, bw: u64, gain: u32) -> u32 {
        self.quantization_budget(self.bdp(bw, gain))
    }

    /// `bbr_packets_in_net_at_edt`.
    fn packets_in_net_at_edt(&self, info: &ConnInfo, inflight_now: u32) -> u32 {
        let edt_skb = if self.pacing_gain > BBR_UNIT { self.tso_segs_goal() } else { 0 };
        packets_in_net_at_edt(info, inflight_now, self.bw(), edt_skb)
    }

    /// `bbr_ack_aggregation_cwnd`.
    fn ack_aggregation_cwnd(&self) -> u32 {
        if self.p.extra_acked_gain > 0.0 && self.full_bw_reached {
            let max_aggr = (self.bw() as u128 * EXTRA_ACKED_MAX_US as u128 / BW_UNIT as u128) as u32;
            let gain = to_unit(self.p.extra_acked_gain);
            let aggr = (gain * self.aggr.extra_acked()) >> BBR_SCALE;
            aggr.min(max_aggr)
        } else {
            0
        }
    }

    /// `bbr_set_cwnd_to_recover_or_restore`: returns Some(cwnd) when packet conservation applies.
    fn recover_or_restore(&mut self, info: &ConnInfo, rs: &RateSample, acked: u32, cwnd: &mut u32) -> bool {
        let state = info.ca_state;
        let prev = self.prev_ca_state;
        if rs.losses > 0 {
            *cwnd = (*cwnd as i64 - rs.losses as i64).max(1) as u32;
        }
        let in_recovery = |s: CaState| matches!(s, CaState::Recovery | CaState::Loss);
        if state == CaState::Recovery && prev != CaState::Recovery {
            // First round of recovery: packet conservation.
            self.packet_conservation = true;
            self.next_rtt_delivered = info.delivered;
            *cwnd = info.packets_in_flight + acked;
        } else if in_recovery(prev) && !in_recovery(state) {
            // Leaving recovery: restore the cwnd saved on entry.
            *cwnd = (*cwnd).max(self.prior_cwnd);
            self.packet_conservation = false;
        }
        self.prev_ca_state = state;
        if self.packet_conservation {
            *cwnd = (*cwnd).max(info.packets_in_flight + acked);
            return true;
        }
        false
    }

    /// `bbr_set_cwnd`.
    fn set_cwnd(&mut self, info: &ConnInfo, w: &mut Window, rs: &RateSample, acked: u32, bw: u64, gain: u32) {
        let mut cwnd = w.cwnd;
        if acked > 0 && !self.recover_or_restore(info, rs, acked, &mut cwnd) {
            let mut target = self.bdp(bw, gain);
            target += self.ack_aggregation_cwnd();
            target = self.quantization_budget(target);
            if self.full_bw_reached {
                cwnd = (cwnd + acked).min(target);
            } else if cwnd < target || info.delivered < TCP_INIT_CWND as u64 {
                cwnd += acked;
            }
            cwnd = cwnd.max(self.cwnd_min_target);
        }
        w.cwnd = cwnd;
        if self.mode == Mode::ProbeRtt {
            w.cwnd = w.cwnd.min(self.cwnd_min_target);
        }
    }

    /// `bbr_is_next_cycle_phase`.
    fn is_next_cycle_phase(&self, info: &ConnInfo, rs: &RateSample) -> bool {
        let is_full_length = (info.delivered_mstamp_ns - self.cycle_mstamp) / 1000 > self.min_rtt_us as Nanos;
        if self.pacing_gain == BBR_UNIT {
            return is_full_length;
        }
        let inflight = self.packets_in_net_at_edt(info, rs.prior_in_flight);
        let bw = self.max_bw();
        if self.pacing_gain > BBR_UNIT {
            return is_full_length && (rs.losses > 0 || inflight >= self.inflight(bw, self.pacing_gain));
        }
        is_full_length || inflight <= self.inflight(bw, BBR_UNIT)
    }

    fn advance_cycle_phase(&mut self, info: &ConnInfo) {
        self.cycle_idx = (self.cycle_idx + 1) & (CYCLE_LEN - 1);
        self.cycle_mstamp = info.delivered_mstamp_ns;
    }

    fn reset_probe_bw_mode(&mut self, info: &ConnInfo) {
        self.mode = Mode::ProbeBw;
        let r = self.rng.below(self.p.cycle_rand as u32) as usize;
        self.cycle_idx = CYCLE_LEN - 1 - r;
        self.advance_cycle_phase(info);
    }

    fn reset_mode(&mut self, info: &ConnInfo) {
        if !self.full_bw_reached {
            self.mode = Mode::Startup;
        } else {
            self.reset_probe_bw_mode(info);
        }
    }

    fn reset_lt_bw_sampling_interval(&mut self, info: &ConnInfo) {
        self.lt_last_stamp_ms = info.delivered_mstamp_ns / 1_000_000;
        self.lt_last_delivered = info.delivered;
        self.lt_last_lost = info.lost;
        self.lt_rtt_cnt = 0;
    }

    fn reset_lt_bw_sampling(&mut self, info: &ConnInfo) {
        self.lt_bw = 0;
        self.lt_use_bw = false;
        self.lt_is_sampling = false;
        self.reset_lt_bw_sampling_interval(info);
    }

    /// `bbr_lt_bw_interval_done`.
    fn lt_bw_interval_done(&mut self, info: &ConnInfo, bw: u64) {
        if self.lt_bw != 0 {
            let diff = bw.abs_diff(self.lt_bw);
            if diff * BBR_UNIT as u64 <= LT_BW_RATIO * self.lt_bw
                || self.rate_bytes_per_sec(diff, BBR_UNIT) <= LT_BW_DIFF_BYTES_PER_S
            {
                // Two consistent lossy intervals: we are policed.
                self.lt_bw = (bw + self.lt_bw) >> 1;
                self.lt_use_bw = true;
                self.pacing_gain = BBR_UNIT;
                self.lt_rtt_cnt = 0;
                return;
            }
        }
        self.lt_bw = bw;
        self.reset_lt_bw_sampling_interval(info);
    }

    /// `bbr_lt_bw_sampling`: detect a token-bucket policer.
    fn lt_bw_sampling(&mut self, info: &ConnInfo, rs: &RateSample) {
        if self.p.lt_bw == 0.0 {
            return;
        }
        if self.lt_use_bw {
            if self.mode == Mode::ProbeBw && self.round_start {
                self.lt_rtt_cnt += 1;
                if self.lt_rtt_cnt >= LT_BW_MAX_RTTS {
                    self.reset_lt_bw_sampling(info);
                    self.reset_probe_bw_mode(info);
                }
            }
            return;
        }
        if !self.lt_is_sampling {
            if rs.losses == 0 {
                return;
            }
            self.reset_lt_bw_sampling_interval(info);
            self.lt_is_sampling = true;
        }
        if rs.is_app_limited {
            self.reset_lt_bw_sampling(info);
            return;
        }
        if self.round_start {
            self.lt_rtt_cnt += 1;
        }
        if self.lt_rtt_cnt < LT_INTVL_MIN_RTTS {
            return;
        }
        if self.lt_rtt_cnt > 4 * LT_INTVL_MIN_RTTS {
            self.reset_lt_bw_sampling(info);
            return;
        }
        if rs.losses == 0 {
            return;
        }
        let lost = info.lost - self.lt_last_lost;
        let delivered = info.delivered - self.lt_last_delivered;
        if delivered == 0 || (lost << BBR_SCALE) < LT_LOSS_THRESH * delivered {
            return;
        }
        let t = info.delivered_mstamp_ns / 1_000_000 - self.lt_last_stamp_ms;
        if t < 1 {
            return;
        }
        let bw = delivered * BW_UNIT / (t as u64 * 1000);
        self.lt_bw_interval_done(info, bw);
    }

    /// `bbr_update_bw`.
    fn update_bw(&mut self, info: &ConnInfo, rs: &RateSample) {
        self.round_start = false;
        if rs.delivered < 0 || rs.interval_ns <= 0 {
            return;
        }
        if rs.prior_delivered >= self.next_rtt_delivered {
            self.next_rtt_delivered = info.delivered;
            self.rtt_cnt += 1;
            self.round_start = true;
            self.packet_conservation = false;
        }
        self.lt_bw_sampling(info, rs);
        let interval_us = (rs.interval_ns / 1000).max(1) as u64;
        let bw = rs.delivered as u64 * BW_UNIT / interval_us;
        if !rs.is_app_limited || bw >= self.max_bw() {
            self.bw.running_max(self.p.bw_filter_rounds as u64, self.rtt_cnt as u64, bw);
        }
    }

    /// `bbr_update_ack_aggregation`.
    fn update_ack_aggregation(&mut self, info: &ConnInfo, w: &Window, rs: &RateSample) {
        if self.p.extra_acked_gain == 0.0 || rs.acked_sacked == 0 || rs.delivered < 0 || rs.interval_ns <= 0 {
            return;
        }
        let win = self.p.extra_acked_win_rtts as u32;
        self.aggr.update(self.round_start, win, rs.acked_sacked, info.delivered_mstamp_ns, self.bw(), w.cwnd);
    }

    /// `bbr_check_full_bw_reached`.
    fn check_full_bw_reached(&mut self, rs: &RateSample) {
        if self.full_bw_reached || !self.round_start || rs.is_app_limited {
            return;
        }
        let thresh = (self.full_bw as u128 * self.full_bw_thresh as u128 >> BBR_SCALE) as u64;
        if self.max_bw() >= thresh {
            self.full_bw = self.max_bw();
            self.full_bw_cnt = 0;
            return;
        }
        self.full_bw_cnt += 1;
        self.full_bw_reached = self.full_bw_cnt >= self.p.full_bw_cnt as u32;
    }

    /// `bbr_check_drain`.
    fn check_drain(&mut self, info: &ConnInfo, w: &mut Window) {
        if self.mode == Mode::Startup && self.full_bw_reached {
            self.mode = Mode::Drain;
            w.ssthresh = self.inflight(self.max_bw(), BBR_UNIT);
        }
        if self.mode == Mode::Drain
            && self.packets_in_net_at_edt(info, info.packets_in_flight) <= self.inflight(self.max_bw(), BBR_UNIT)
        {
            self.reset_probe_bw_mode(info);
        }
    }

    /// `bbr_check_probe_rtt_done`.
    fn check_probe_rtt_done(&mut self, info: &ConnInfo, w: &mut Window) {
        if !self.probe_rtt.time_passed(info.now) {
            return;
        }
        self.min_rtt_stamp = jiffies(info.now, CONFIG_HZ);
        if self.p.stable_rtprop != 0.0 {
            self.judge_probe();
        }
        w.cwnd = w.cwnd.max(self.prior_cwnd);
        self.reset_mode(info);
    }

    /// Stable RTprop: at the end of a PROBE_RTT, adopt the probe's higher RTprop only if it
    /// jumped by more than `stable_rtprop_jump` x, or if the last `stable_rtprop_probes` probes
    /// all measured higher and agree within `stable_rtprop_tolerance` (a route change gives
    /// the same floor each time; a competitor's queue gives a different level each time).
    fn judge_probe(&mut self) {
        let probe = std::mem::replace(&mut self.probe_min_rtt_us, u32::MAX);
        if probe == u32::MAX || probe <= self.min_rtt_us || self.min_rtt_us == u32::MAX {
            self.higher_probes.clear();
            return;
        }
        if probe as f64 > self.p.stable_rtprop_jump * self.min_rtt_us as f64 {
            self.min_rtt_us = probe;
            self.higher_probes.clear();
            return;
        }
        self.higher_probes.push(probe);
        let n = self.p.stable_rtprop_probes as usize;
        if self.higher_probes.len() > n {
            self.higher_probes.remove(0);
        }
        if self.higher_probes.len() == n {
            let lo = *self.higher_probes.iter().min().unwrap() as f64;
            let hi = *self.higher_probes.iter().max().unwrap() as f64;
            if hi <= lo * (1.0 + self.p.stable_rtprop_tolerance) {
                self.min_rtt_us = lo as u32;
                self.higher_probes.clear();
            }
        }
    }

    /// The thesis' adaptive inflight cap (Algorithm 1), once per round in PROBE_BW: lower the
    /// cwnd gain if the round lost more than `adaptive_loss_thresh`; else raise it if the
    /// round delivered less than the bandwidth estimate (minus a margin); else lower it if
    /// even the round's smallest RTT shows a standing queue; else keep it.
    fn adapt_cwnd_gain(&mut self, info: &ConnInfo) {
        let r = std::mem::replace(
            &mut self.round,
            RoundStats { start: info.now, delivered: info.delivered, lost: info.lost, min_rtt_us: u32::MAX },
        );
        if self.mode != Mode::ProbeBw || r.start == 0 || info.now <= r.start {
            return;
        }
        let delivered = (info.delivered - r.delivered) as f64;
        let lost = (info.lost - r.lost) as f64;
        let loss_rate = if delivered + lost > 0.0 { lost / (delivered + lost) } else { 0.0 };
        let rate_pps = delivered * 1e9 / (info.now - r.start) as f64;
        let bw_pps = self.bw() as f64 * 1e6 / BW_UNIT as f64;
        let mut gain = self.cwnd_gain_probe_bw as f64 / BBR_UNIT as f64;
        let p = &self.p;
        if loss_rate > p.adaptive_loss_thresh {
            gain -= p.adaptive_step;
        } else if rate_pps < (1.0 - p.adaptive_delivery_margin) * bw_pps {
            gain += p.adaptive_step;
        } else if self.min_rtt_us != u32::MAX
            && r.min_rtt_us != u32::MAX
            && r.min_rtt_us as f64 > (1.0 + p.adaptive_rtt_margin) * self.min_rtt_us as f64
        {
            gain -= p.adaptive_step;
        }
        self.cwnd_gain_probe_bw = to_unit(gain.clamp(p.adaptive_min_gain, p.adaptive_max_gain));
    }

    /// `bbr_update_min_rtt`, with PROBE_RTT entry and exit. A sample renews the estimate (and
    /// postpones PROBE_RTT) only if strictly lower than it, or once the window expired: Linux
    /// has compared with `<` since v5.10 (commit 1b9e2a8c99a5, "tcp: only postpone PROBE_RTT
    /// if RTT is < current min_rtt estimate"); `<=` let equal samples postpone PROBE_RTT
    /// forever.
    fn update_min_rtt(&mut self, info: &ConnInfo, w: &mut Window, rs: &RateSample) {
        let now_j = jiffies(info.now, CONFIG_HZ);
        let filter_expired = now_j > self.min_rtt_stamp + self.min_rtt_win_j;
        if rs.rtt_ns >= 0 {
            let rtt_us = (rs.rtt_ns / 1000) as u32;
            if self.p.stable_rtprop != 0.0 {
                // Lower samples are taken at once (strictly lower, as the stock filter);
                // higher ones only feed the probe's measurement, judged when the PROBE_RTT
                // ends.
                if rtt_us < self.min_rtt_us {
                    self.min_rtt_us = rtt_us;
                    self.min_rtt_stamp = now_j;
                    self.higher_probes.clear();
                } else if filter_expired || self.mode == Mode::ProbeRtt {
                    self.probe_min_rtt_us = self.probe_min_rtt_us.min(rtt_us);
                }
            } else if rtt_us < self.min_rtt_us || (filter_expired && !rs.is_ack_delayed) {
                self.min_rtt_us = rtt_us;
                self.min_rtt_stamp = now_j;
            }
        }
        if self.probe_rtt_mode_j > 0 && filter_expired && !self.idle_restart && self.mode != Mode::ProbeRtt {
            self.mode = Mode::ProbeRtt;
            self.save_cwnd(w.cwnd);
            self.probe_rtt.restart();
        }
        if self.mode == Mode::ProbeRtt {
            // Ignore low-rate samples while the flight is cut.
            w.set_app_limited = true;
            let (target, hold) = (self.cwnd_min_target, self.probe_rtt_mode_j);
            if self.probe_rtt.on_ack(info, target, hold, self.round_start, &mut self.next_rtt_delivered) {
                self.check_probe_rtt_done(info, w);
            }
        }
        if rs.delivered > 0 {
            self.idle_restart = false;
        }
    }

    /// `bbr_update_gains`.
    fn update_gains(&mut self) {
        let (p, c) = match self.mode {
            Mode::Startup => (self.high_gain, self.high_gain),
            Mode::Drain => (self.drain_gain, self.high_gain),
            Mode::ProbeBw => (
                if self.lt_use_bw { BBR_UNIT } else { self.pacing_gains[self.cycle_idx] },
                self.cwnd_gain_probe_bw,
            ),
            Mode::ProbeRtt => (BBR_UNIT, BBR_UNIT),
        };
        self.pacing_gain = p;
        self.cwnd_gain = c;
    }
}

impl CongestionControl for Bbr {
    fn name(&self) -> &'static str {
        self.name
    }

    fn seed(&mut self, rng: SimRng) {
        self.rng = rng;
    }

    fn controls_cwnd(&self) -> bool {
        true
    }

    fn wants_pacing(&self) -> bool {
        true
    }

    fn min_tso_segs(&self) -> Option<u32> {
        Some(Bbr::min_tso_segs(self))
    }

    fn init(&mut self, info: &ConnInfo, w: &mut Window) {
        self.mss = info.mss;
        w.ssthresh = u32::MAX;
        self.min_rtt_us = if info.min_rtt_ns > 0 { (info.min_rtt_ns / 1000) as u32 } else { u32::MAX };
        self.min_rtt_stamp = jiffies(info.now, CONFIG_HZ);
        self.bw.reset(0, 0);
        self.init_pacing_rate_from_rtt(info, w.cwnd);
        self.reset_lt_bw_sampling(info);
        self.mode = Mode::Startup;
        self.aggr.restart_epoch(info.now);
        self.update_gains();
        w.pacing_rate = Some(self.pacing_rate as f64);
    }

    fn ssthresh(&mut self, _info: &ConnInfo, w: &Window) -> u32 {
        self.save_cwnd(w.cwnd);
        w.ssthresh
    }

    fn undo_cwnd(&mut self, info: &ConnInfo, w: &Window, _prior_cwnd: u32) -> u32 {
        self.full_bw = 0;
        self.full_bw_cnt = 0;
        self.reset_lt_bw_sampling(info);
        w.cwnd
    }

    fn set_state(&mut self, info: &ConnInfo, _w: &mut Window, new: CaState) {
        if new == CaState::Loss {
            self.prev_ca_state = CaState::Loss;
            self.full_bw = 0;
            self.round_start = true;
            let rs = RateSample { losses: 1, ..RateSample::default() };
            self.lt_bw_sampling(info, &rs);
        }
    }

    fn cwnd_event(&mut self, info: &ConnInfo, w: &mut Window, ev: CaEvent) {
        if ev == CaEvent::TxStart && info.app_limited != 0 {
            self.idle_restart = true;
            self.aggr.restart_epoch(info.now);
            if self.mode == Mode::ProbeBw {
                let bw = self.bw();
                self.set_pacing_rate(info, w.cwnd, bw, BBR_UNIT);
                w.pacing_rate = Some(self.pacing_rate as f64);
            } else if self.mode == Mode::ProbeRtt {
                self.check_probe_rtt_done(info, w);
            }
        }
    }

    /// `bbr_main`.
    fn cong_control(&mut self, info: &ConnInfo, w: &mut Window, rs: &RateSample) {
        self.update_bw(info, rs);
        if self.p.adaptive_cap != 0.0 {
            if rs.rtt_ns >= 0 {
                self.round.min_rtt_us = self.round.min_rtt_us.min((rs.rtt_ns / 1000) as u32);
            }
            if self.round_start {
                self.adapt_cwnd_gain(info);
            }
        }
        self.update_ack_aggregation(info, w, rs);
        if self.mode == Mode::ProbeBw && self.is_next_cycle_phase(info, rs) {
            self.advance_cycle_phase(info);
        }
        self.check_full_bw_reached(rs);
        self.check_drain(info, w);
        self.update_min_rtt(info, w, rs);
        self.update_gains();
        let bw = self.bw();
        self.set_pacing_rate(info, w.cwnd, bw, self.pacing_gain);
        w.pacing_rate = Some(self.pacing_rate as f64);
        self.set_cwnd(info, w, rs, rs.acked_sacked, bw, self.cwnd_gain);
    }

    fn state_name(&self) -> Option<&'static str> {
        Some(self.mode.name())
    }

    fn telemetry_keys(&self) -> &'static [&'static str] {
        &["btlbw_bps", "rtprop_ms", "pacing_gain", "cwnd_gain", "round", "full_bw_reached", "lt_bw_in_use", "cycle_idx"]
    }

    fn telemetry(&self, out: &mut Vec<f64>) {
        out.push(self.bw_bps());
        out.push(self.min_rtt_ns().map_or(f64::NAN, |n| n as f64 / 1e6));
        out.push(self.pacing_gain as f64 / BBR_UNIT as f64);
        out.push(self.cwnd_gain as f64 / BBR_UNIT as f64);
        out.push(self.rtt_cnt as f64);
        out.push(self.full_bw_reached as u8 as f64);
        out.push(self.lt_use_bw as u8 as f64);
        out.push(self.cycle_idx as f64);
    }
}
