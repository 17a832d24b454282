//! BBRv3's congestion signals: packet-timed and loss rounds, bandwidth samples, the latest
//! delivery signals, loss and ECN, and the bounds they set (`bw_lo` and `inflight_lo` from a
//! lossy or marked round; `inflight_hi` from a probe that lost too much).

use super::{Bbr3, Phase, FRAC_SCALE, FRAC_UNIT, UNSET, UNSET_BW};
use crate::cc::bbr::{to_unit, Mode, BBR_SCALE, BBR_UNIT, BW_UNIT};
use crate::cc::{ConnInfo, RateSample, Window};

impl Bbr3 {
    /// `bbr_update_round_start`.
    pub(super) fn update_round_start(&mut self, info: &ConnInfo, rs: &RateSample) {
        self.core.update_round_start(info, rs, rs.interval_ns / 1000 > 0);
    }

    /// `bbr_calculate_bw_sample`: delivered / interval, rounded up; 0 if invalid.
    pub(super) fn bw_sample(rs: &RateSample) -> u64 {
        let interval_us = (rs.interval_ns / 1000).max(0) as u64;
        if interval_us == 0 || rs.delivered < 0 {
            return 0;
        }
        (rs.delivered as u64 * BW_UNIT).div_ceil(interval_us)
    }

    fn is_valid_observation(rs: &RateSample) -> bool {
        rs.interval_ns / 1000 > 0 && rs.acked_sacked > 0
    }

    /// `bbr_update_latest_delivery_signals`: max rate and volume delivered this loss round.
    pub(super) fn update_latest_delivery_signals(&mut self, info: &ConnInfo, rs: &RateSample, sample_bw: u64) {
        self.loss_round_start = false;
        if !Self::is_valid_observation(rs) {
            return;
        }
        self.bw_latest = self.bw_latest.max(sample_bw);
        self.inflight_latest = self.inflight_latest.max(rs.delivered.max(0) as u32);
        if rs.prior_delivered >= self.loss_round_delivered {
            self.loss_round_delivered = info.delivered;
            self.loss_round_start = true;
        }
    }

    /// `bbr_advance_latest_delivery_signals`: restart them at each loss round.
    pub(super) fn advance_latest_delivery_signals(&mut self, rs: &RateSample, sample_bw: u64) {
        if self.loss_round_start {
            self.bw_latest = sample_bw;
            self.inflight_latest = rs.delivered.max(0) as u32;
        }
    }

    /// `bbr_update_congestion_signals`: the max filter (app-limited samples only if they
    /// raise it) and, once per loss round, the lower bounds.
    pub(super) fn update_congestion_signals(&mut self, w: &Window, rs: &RateSample, sample_bw: u64) {
        if !Self::is_valid_observation(rs) {
            return;
        }
        if !rs.is_app_limited || sample_bw >= self.max_bw() {
            self.bw_hi.update(sample_bw);
        }
        self.loss_in_round |= rs.losses > 0;
        if !self.loss_round_start {
            return;
        }
        self.adapt_lower_bounds(w.cwnd);
        self.loss_in_round = false;
        self.ecn_in_round = false;
    }

    /// `bbr_adapt_lower_bounds`: outside probing, cut bw_lo and inflight_lo by beta on a lossy
    /// round, but not below what this round delivered (draft BBRAdaptLowerBoundsFromCongestion).
    /// With ECN, a round with marks cuts inflight_lo to (1 - ecn_factor x ecn_alpha) of
    /// itself (`bbr_ecn_lower_bounds`); the lower of the ECN and loss levels wins.
    fn adapt_lower_bounds(&mut self, cwnd: u32) {
        if self.is_probing_bandwidth() {
            return;
        }
        let mut ecn_inflight_lo = UNSET;
        if self.ecn_in_round && self.p.ecn_factor > 0.0 {
            if self.inflight_lo == UNSET {
                self.inflight_lo = cwnd;
            }
            // bbr_ecn_cut: BBR_UNIT - ecn_alpha x ecn_factor.
            let cut = BBR_UNIT.saturating_sub((self.ecn_alpha * to_unit(self.p.ecn_factor)) >> BBR_SCALE);
            ecn_inflight_lo = ((self.inflight_lo as u64 * cut as u64) >> BBR_SCALE) as u32;
        }
        if self.loss_in_round {
            if self.bw_lo == UNSET_BW {
                self.bw_lo = self.max_bw();
            }
            if self.inflight_lo == UNSET {
                self.inflight_lo = cwnd;
            }
            self.bw_lo = self.bw_latest.max(((self.bw_lo as u128 * self.beta as u128) >> FRAC_SCALE) as u64);
            self.inflight_lo = self.inflight_latest.max(((self.inflight_lo as u64 * self.beta) >> FRAC_SCALE) as u32);
        }
        self.inflight_lo = self.inflight_lo.min(ecn_inflight_lo);
        if self.bw_lo != UNSET_BW {
            self.bw_lo = self.bw_lo.max(1);
        }
    }

    /// `bbr_update_ecn_alpha` (at a round start): decide ECN eligibility (ECN usable and
    /// min_rtt <= ecn_max_rtt), fold the round's CE ratio into ecn_alpha, and in Startup count
    /// rounds with a CE ratio >= ecn_thresh.
    pub(super) fn update_ecn_alpha(&mut self, info: &ConnInfo) {
        let max_rtt_us = (self.p.ecn_max_rtt * 1e6) as u64;
        if !self.ecn_eligible
            && self.can_use_ecn
            && self.p.ecn_factor > 0.0
            && (max_rtt_us == 0 || (self.core.min_rtt.us as u64) <= max_rtt_us)
        {
            self.ecn_eligible = true;
        }
        if !self.ecn_eligible {
            return;
        }
        let delivered = info.delivered - self.alpha_last_delivered;
        let delivered_ce = info.delivered_ce - self.alpha_last_delivered_ce;
        if delivered == 0 {
            return;
        }
        let ce_ratio = ((delivered_ce << BBR_SCALE) / delivered) as u32;
        let gain = to_unit(self.p.ecn_alpha_gain);
        let alpha = (((BBR_UNIT - gain) * self.ecn_alpha) >> BBR_SCALE) + ((gain * ce_ratio) >> BBR_SCALE);
        self.ecn_alpha = alpha.min(BBR_UNIT);
        self.alpha_last_delivered = info.delivered;
        self.alpha_last_delivered_ce = info.delivered_ce;
        self.check_ecn_too_high_in_startup(ce_ratio);
    }

    pub(super) fn reset_lower_bounds(&mut self) {
        self.bw_lo = UNSET_BW;
        self.inflight_lo = UNSET;
    }

    /// `bbr_reset_congestion_signals`.
    pub(super) fn reset_congestion_signals(&mut self) {
        self.loss_in_round = false;
        self.ecn_in_round = false;
        self.loss_in_cycle = false;
        self.ecn_in_cycle = false;
        self.bw_latest = 0;
        self.inflight_latest = 0;
    }

    /// `bbr_is_inflight_too_high`: more than loss_thresh of the flight was lost, or (ECN
    /// eligible) more than ecn_thresh of what the sample delivered was CE-marked.
    pub(super) fn is_inflight_too_high(&self, lost: u64, tx_in_flight: u32, delivered: i64, delivered_ce: i64) -> bool {
        if lost > 0 && tx_in_flight > 0 && lost > (tx_in_flight as u64 * self.loss_thresh) >> FRAC_SCALE {
            return true;
        }
        let thresh = self.ecn_thresh;
        delivered_ce > 0
            && delivered > 0
            && self.ecn_eligible
            && thresh > 0
            && delivered_ce as u64 > (delivered as u64 * thresh as u64) >> BBR_SCALE
    }

    /// `bbr_inflight_hi_from_lost_skb` (draft BBRInflightHiFromLostPacket): the inflight at
    /// which the loss rate crossed the threshold, solving
    /// (lost_prev + x) / (inflight_prev + x) = thresh for the prefix x of this packet, rounded
    /// up; `lost` already counts this packet.
    pub(super) fn inflight_hi_from_lost_packet(&self, lost: u64, tx_in_flight: u32) -> u32 {
        let Some(inflight_prev) = tx_in_flight.checked_sub(1) else { return UNSET };
        let Some(lost_prev) = lost.checked_sub(1) else { return UNSET };
        let loss_budget = (inflight_prev as u64 * self.loss_thresh + FRAC_UNIT - 1) >> FRAC_SCALE;
        let prefix = if lost_prev >= loss_budget {
            0
        } else {
            ((loss_budget - lost_prev) << FRAC_SCALE) / (FRAC_UNIT - self.loss_thresh)
        };
        (inflight_prev as u64 + prefix).min(UNSET as u64) as u32
    }

    /// `bbr_handle_inflight_too_high`: once per probe, set inflight_hi from the flight that
    /// lost too much (not below beta x target) and end an UP phase.
    pub(super) fn handle_inflight_too_high(&mut self, info: &ConnInfo, cwnd: u32, is_app_limited: bool, tx_in_flight: u32) {
        self.prev_probe_too_high = true;
        self.bw_probe_samples = false;
        if !is_app_limited {
            let floor = ((self.target_inflight(cwnd) as u64 * self.beta) >> FRAC_SCALE) as u32;
            self.inflight_hi = tx_in_flight.max(floor);
        }
        if self.core.mode == Mode::ProbeBw && self.cycle_idx == Phase::Up {
            self.start_bw_probe_down(info);
        }
    }

    /// `bbr_note_loss`: a loss marks the current loss round (extended to a full round trip).
    pub(super) fn note_loss(&mut self, info: &ConnInfo) {
        if !self.loss_in_round {
            self.loss_round_delivered = info.delivered;
        }
        self.loss_in_round = true;
        self.loss_in_cycle = true;
    }
}
