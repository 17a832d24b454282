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
//! matches the kernel's. What BBRv3 does alike (units, filters, PROBE_RTT, pacing, cwnd
//! growth) is the family's shared model ([`super`]).
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
//!   this code ([`proposals`]), and combined freely: `cwnd_gain = 1.5` is "BBR Shallow" (tcp_bbrshallow.c);
//!   `adaptive_cap = 1` is the thesis' adaptive inflight cap (Algorithm 1: per round, lower
//!   the PROBE_BW cwnd gain on loss, else raise it when delivery falls short of BtlBw, else
//!   lower it when RTT exceeds RTprop; the printed "<" on the RTT test is read as ">" as the
//!   prose says); `stable_rtprop = 1` keeps the RTprop estimate from rising unless a higher
//!   value persists over several PROBE_RTT probes or jumps by a large factor. The thesis
//!   gives no constants for either proposal; the defaults here were chosen by running its
//!   experiments (see the README's validation section).

use super::{to_unit, Core, Mode, Version, BBR_SCALE, BBR_UNIT, BW_UNIT, GSO_MAX_BYTES, TCP_INIT_CWND};
use crate::cc::minmax::MinMax;
use crate::cc::{CaState, CongestionControl, ConnInfo, RateSample, Window};
use crate::jiffies::CONFIG_HZ;
use crate::tcp::tso;
use crate::time::Nanos;

pub mod proposals;

use proposals::RoundStats;

/// Number of phases in the PROBE_BW pacing-gain cycle.
const CYCLE_LEN: usize = 8;
/// Below this pacing rate TSO bursts are one segment (bbr_min_tso_rate, bits/s).
const BBR_MIN_TSO_RATE: u64 = 1_200_000;

bbr_params! {
    /// BBRv1 constants from tcp_bbr.c, same names and meanings, as real numbers.
    pub struct BbrParams {
        /// STARTUP pacing and cwnd gain (bbr_high_gain = 2/ln 2 = 2.885).
        high_gain: 2.885, 1.0, 10.0;
        /// DRAIN pacing gain (bbr_drain_gain = 1/2.885).
        drain_gain: 1.0 / 2.885, 0.01, 1.0;
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

/// Long-term sampling constants (bbr_lt_*), fixed as in Linux.
const LT_INTVL_MIN_RTTS: u32 = 4;
const LT_LOSS_THRESH: u64 = 50;
const LT_BW_RATIO: u64 = BBR_UNIT as u64 / 8;
const LT_BW_DIFF_BYTES_PER_S: u64 = 4000 / 8;
const LT_BW_MAX_RTTS: u32 = 48;

pub struct Bbr {
    p: BbrParams,
    name: &'static str,
    /// What BBRv1 keeps as BBRv3 does: mode, rounds, min_rtt and PROBE_RTT, full pipe, gains,
    /// pacing, saved cwnd, ACK aggregation.
    core: Core,
    cwnd_gain_probe_bw: u32,
    pacing_gains: [u32; CYCLE_LEN],
    bw: MinMax,
    packet_conservation: bool,
    lt_is_sampling: bool,
    lt_rtt_cnt: u32,
    lt_use_bw: bool,
    lt_bw: u64,
    lt_last_delivered: u64,
    lt_last_stamp_ms: i64,
    lt_last_lost: u64,
    pub cycle_idx: usize,
    /// Adaptive inflight cap: what the current round has seen.
    round: RoundStats,
    /// Stable RTprop: smallest RTT since the filter expired (the current probe's measurement)
    /// and the recent probes that measured above the estimate.
    probe_min_rtt_us: u32,
    higher_probes: Vec<u32>,
}

impl Bbr {
    pub fn new(p: BbrParams, name: &'static str) -> Self {
        let probe = to_unit(p.probe_gain);
        let down = to_unit(p.drain_cycle_gain);
        // Linux: BBR_UNIT * 2885 / 1000 + 1 = 739 and BBR_UNIT * 1000 / 2885 = 88.
        let high_gain = if p.high_gain == 2.885 { BBR_UNIT * 2885 / 1000 + 1 } else { to_unit(p.high_gain) };
        let drain_gain = if p.drain_gain == 1.0 / 2.885 { BBR_UNIT * 1000 / 2885 } else { to_unit(p.drain_gain) };
        Bbr {
            name,
            core: Core::new(p.family(), high_gain, high_gain, drain_gain, p.probe_rtt_interval),
            cwnd_gain_probe_bw: to_unit(p.cwnd_gain),
            pacing_gains: [probe, down, BBR_UNIT, BBR_UNIT, BBR_UNIT, BBR_UNIT, BBR_UNIT, BBR_UNIT],
            p,
            bw: MinMax::default(),
            packet_conservation: false,
            lt_is_sampling: false,
            lt_rtt_cnt: 0,
            lt_use_bw: false,
            lt_bw: 0,
            lt_last_delivered: 0,
            lt_last_stamp_ms: 0,
            lt_last_lost: 0,
            cycle_idx: 0,
            round: RoundStats::NONE,
            probe_min_rtt_us: u32::MAX,
            higher_probes: Vec::new(),
        }
    }

    /// The mode (`bbr->mode`).
    pub fn mode(&self) -> Mode {
        self.core.mode
    }

    /// Packet-timed rounds so far (`bbr->rtt_cnt`).
    pub fn rtt_cnt(&self) -> u32 {
        self.core.round_count as u32
    }

    /// `bbr_max_bw`.
    pub fn max_bw(&self) -> u64 {
        self.bw.get()
    }

    /// min_rtt estimate in ns, if any.
    pub fn min_rtt_ns(&self) -> Option<Nanos> {
        self.core.min_rtt_ns()
    }

    /// `bbr_min_tso_segs`: one-segment bursts below 1.2 Mbit/s, else two.
    fn min_tso_segs(&self) -> u32 {
        if self.core.pacing_rate < BBR_MIN_TSO_RATE >> 3 {
            1
        } else {
            2
        }
    }

    /// `bbr_set_cwnd_to_recover_or_restore`: returns Some(cwnd) when packet conservation applies.
    fn recover_or_restore(&mut self, info: &ConnInfo, rs: &RateSample, acked: u32, cwnd: &mut u32) -> bool {
        let state = info.ca_state;
        let prev = self.core.prev_ca_state;
        if rs.losses > 0 {
            *cwnd = (*cwnd as i64 - rs.losses as i64).max(1) as u32;
        }
        let in_recovery = |s: CaState| matches!(s, CaState::Recovery | CaState::Loss);
        if state == CaState::Recovery && prev != CaState::Recovery {
            // First round of recovery: packet conservation.
            self.packet_conservation = true;
            self.core.next_rtt_delivered = info.delivered;
            *cwnd = info.packets_in_flight + acked;
        } else if in_recovery(prev) && !in_recovery(state) {
            // Leaving recovery: restore the cwnd saved on entry.
            *cwnd = (*cwnd).max(self.core.prior_cwnd);
            self.packet_conservation = false;
        }
        self.core.prev_ca_state = state;
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
            let target = self.cwnd_target(bw, gain);
            cwnd = self.core.grow_cwnd(cwnd, acked, target, info.delivered < TCP_INIT_CWND as u64).0;
        }
        self.set_snd_cwnd(w, cwnd);
    }

    /// `bbr_is_next_cycle_phase`.
    fn is_next_cycle_phase(&self, info: &ConnInfo, rs: &RateSample) -> bool {
        let is_full_length = (info.delivered_mstamp_ns - self.core.cycle_mstamp) / 1000 > self.core.min_rtt.us as Nanos;
        if self.core.pacing_gain == BBR_UNIT {
            return is_full_length;
        }
        let inflight = self.packets_in_net_at_edt(info, rs.prior_in_flight);
        let bw = self.max_bw();
        if self.core.pacing_gain > BBR_UNIT {
            return is_full_length && (rs.losses > 0 || inflight >= self.inflight(bw, self.core.pacing_gain));
        }
        is_full_length || inflight <= self.inflight(bw, BBR_UNIT)
    }

    fn advance_cycle_phase(&mut self, info: &ConnInfo) {
        self.cycle_idx = (self.cycle_idx + 1) & (CYCLE_LEN - 1);
        self.core.cycle_mstamp = info.delivered_mstamp_ns;
    }

    fn reset_probe_bw_mode(&mut self, info: &ConnInfo) {
        self.core.mode = Mode::ProbeBw;
        let r = self.core.rng.below(self.p.cycle_rand as u32) as usize;
        self.cycle_idx = CYCLE_LEN - 1 - r;
        self.advance_cycle_phase(info);
    }

    fn reset_mode(&mut self, info: &ConnInfo) {
        if !self.core.full_bw_reached {
            self.core.mode = Mode::Startup;
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
                || self.core.rate_bytes_per_sec(diff, BBR_UNIT) <= LT_BW_DIFF_BYTES_PER_S
            {
                // Two consistent lossy intervals: we are policed.
                self.lt_bw = (bw + self.lt_bw) >> 1;
                self.lt_use_bw = true;
                self.core.pacing_gain = BBR_UNIT;
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
            if self.core.mode == Mode::ProbeBw && self.core.round_start {
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
        if self.core.round_start {
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
        let valid = rs.delivered >= 0 && rs.interval_ns > 0;
        self.core.update_round_start(info, rs, valid);
        if !valid {
            return;
        }
        if self.core.round_start {
            self.packet_conservation = false;
        }
        self.lt_bw_sampling(info, rs);
        let interval_us = (rs.interval_ns / 1000).max(1) as u64;
        let bw = rs.delivered as u64 * BW_UNIT / interval_us;
        if !rs.is_app_limited || bw >= self.max_bw() {
            self.bw.running_max(self.p.bw_filter_rounds as u64, self.core.round_count, bw);
        }
    }

    /// `bbr_update_ack_aggregation`.
    fn update_ack_aggregation(&mut self, info: &ConnInfo, w: &Window, rs: &RateSample) {
        if self.p.extra_acked_gain == 0.0 || rs.acked_sacked == 0 || rs.delivered < 0 || rs.interval_ns <= 0 {
            return;
        }
        let (win, bw) = (self.p.extra_acked_win_rtts as u32, self.bw());
        self.core.aggr.update(self.core.round_start, win, rs.acked_sacked, info.delivered_mstamp_ns, bw, w.cwnd);
    }

    /// `bbr_check_full_bw_reached`.
    fn check_full_bw_reached(&mut self, rs: &RateSample) {
        if self.core.full_bw_reached || !self.core.round_start || rs.is_app_limited {
            return;
        }
        let bw = self.max_bw();
        if !self.core.full_bw_grew(bw) {
            self.core.full_bw_reached = self.core.full_bw_stalled();
        }
    }

    /// `bbr_check_drain`.
    fn check_drain(&mut self, info: &ConnInfo, w: &mut Window) {
        if self.core.mode == Mode::Startup && self.core.full_bw_reached {
            self.core.mode = Mode::Drain;
            w.ssthresh = self.inflight(self.max_bw(), BBR_UNIT);
        }
        if self.core.mode == Mode::Drain
            && self.packets_in_net_at_edt(info, info.packets_in_flight) <= self.inflight(self.max_bw(), BBR_UNIT)
        {
            self.reset_probe_bw_mode(info);
        }
    }

    /// `bbr_check_probe_rtt_done`: the hold over, min_rtt counts as renewed and the flow
    /// returns to STARTUP or PROBE_BW.
    fn check_probe_rtt_done(&mut self, info: &ConnInfo, w: &mut Window) {
        if !self.core.probe_rtt_done(info, w) {
            return;
        }
        self.core.min_rtt.stamp = info.ticks.jiffies(info.now, CONFIG_HZ);
        if self.p.stable_rtprop != 0.0 {
            self.judge_probe();
        }
        self.reset_mode(info);
    }

    /// `bbr_update_min_rtt`, with PROBE_RTT entry and exit: min_rtt is also the filter that
    /// schedules PROBE_RTT.
    fn update_min_rtt(&mut self, info: &ConnInfo, w: &mut Window, rs: &RateSample) {
        let now_j = info.ticks.jiffies(info.now, CONFIG_HZ);
        let filter_expired = self.core.min_rtt.expired(now_j, self.core.min_rtt_win_j);
        if self.p.stable_rtprop != 0.0 {
            self.stable_rtprop_sample(now_j, filter_expired, rs);
        } else {
            self.core.min_rtt.update(now_j, filter_expired, rs);
        }
        self.core.enter_probe_rtt(filter_expired, w.cwnd);
        if self.core.mode == Mode::ProbeRtt && self.core.hold_probe_rtt(info, w, self.probe_rtt_cwnd()) {
            self.check_probe_rtt_done(info, w);
        }
        self.core.update_idle_restart(rs);
    }

    /// `bbr_update_gains`: in PROBE_BW, the cycle's pacing gain (1 while policed).
    fn update_gains(&mut self) {
        self.core.update_gains(|| {
            let pacing = if self.lt_use_bw { BBR_UNIT } else { self.pacing_gains[self.cycle_idx] };
            (pacing, self.cwnd_gain_probe_bw)
        });
    }
}

impl Version for Bbr {
    fn core(&self) -> &Core {
        &self.core
    }

    /// `bbr_bw`: the long-term estimate while policed, else the max filter.
    fn bw(&self) -> u64 {
        if self.lt_use_bw {
            self.lt_bw
        } else {
            self.max_bw()
        }
    }

    /// `bbr_tso_segs_goal`: `tcp_tso_autosize` without the RTT allowance, at most 127.
    fn tso_segs_goal(&self) -> u32 {
        tso::autosize(self.core.pacing_rate, self.core.mss, None, 0, GSO_MAX_BYTES, self.min_tso_segs()).min(0x7F)
    }

    /// `bbr_quantization_budget`: room for three TSO bursts, rounded up to even, +2 in the
    /// probing phase of the cycle.
    fn quantization_budget(&self, cwnd: u32) -> u32 {
        let mut cwnd = cwnd;
        if self.p.tso_budget != 0.0 {
            cwnd += 3 * self.tso_segs_goal();
            cwnd = (cwnd + 1) & !1;
        }
        if self.core.mode == Mode::ProbeBw && self.cycle_idx == 0 {
            cwnd += 2;
        }
        cwnd
    }

    /// `bbr_ack_aggregation_cwnd`: only once the pipe is full.
    fn ack_aggregation_cwnd(&self) -> u32 {
        if self.p.extra_acked_gain > 0.0 && self.core.full_bw_reached {
            self.core.aggr.cwnd(self.bw(), self.core.extra_acked_gain)
        } else {
            0
        }
    }

    /// bbr_cwnd_min_target.
    fn probe_rtt_cwnd(&self) -> u32 {
        self.core.cwnd_min_target
    }
}

impl CongestionControl for Bbr {
    fn name(&self) -> &'static str {
        self.name
    }

    family_items!();

    fn min_tso_segs(&self) -> Option<u32> {
        Some(Bbr::min_tso_segs(self))
    }

    fn init(&mut self, info: &ConnInfo, w: &mut Window) {
        self.core.init(info, w);
        self.bw.reset(0, 0);
        self.reset_lt_bw_sampling(info);
    }

    fn ssthresh(&mut self, _info: &ConnInfo, w: &Window) -> u32 {
        self.core.save_cwnd(w.cwnd);
        w.ssthresh
    }

    fn undo_cwnd(&mut self, info: &ConnInfo, w: &Window, _prior_cwnd: u32) -> u32 {
        self.core.full_bw = 0;
        self.core.full_bw_cnt = 0;
        self.reset_lt_bw_sampling(info);
        w.cwnd
    }

    fn set_state(&mut self, info: &ConnInfo, _w: &mut Window, new: CaState) {
        if new == CaState::Loss {
            self.core.prev_ca_state = CaState::Loss;
            self.core.full_bw = 0;
            self.core.round_start = true;
            let rs = RateSample { losses: 1, ..RateSample::default() };
            self.lt_bw_sampling(info, &rs);
        }
    }

    /// `bbr_main`.
    fn cong_control(&mut self, info: &ConnInfo, w: &mut Window, rs: &RateSample) {
        self.update_bw(info, rs);
        if self.p.adaptive_cap != 0.0 {
            self.update_adaptive_cap(info, rs);
        }
        self.update_ack_aggregation(info, w, rs);
        if self.core.mode == Mode::ProbeBw && self.is_next_cycle_phase(info, rs) {
            self.advance_cycle_phase(info);
        }
        self.check_full_bw_reached(rs);
        self.check_drain(info, w);
        self.update_min_rtt(info, w, rs);
        self.update_gains();
        let (bw, pacing_gain) = (self.bw(), self.core.pacing_gain);
        self.core.set_pacing_rate(info, w, bw, pacing_gain);
        self.set_cwnd(info, w, rs, rs.acked_sacked, bw, self.core.cwnd_gain);
    }

    fn state_name(&self) -> Option<&'static str> {
        Some(self.core.mode.name())
    }

    fn telemetry_keys(&self) -> &'static [&'static str] {
        &["btlbw_bps", "rtprop_ms", "pacing_gain", "cwnd_gain", "round", "full_bw_reached", "lt_bw_in_use", "cycle_idx"]
    }

    fn telemetry(&self, out: &mut Vec<f64>) {
        self.core.telemetry(self.bw(), out);
        out.push(self.core.round_count as f64);
        out.push(self.core.full_bw_reached as u8 as f64);
        out.push(self.lt_use_bw as u8 as f64);
        out.push(self.cycle_idx as f64);
    }
}
