//! BBRv3's STARTUP: the pipe is full when the bandwidth stops growing by full_bw_thresh for
//! full_bw_cnt rounds (the same test ends a PROBE_BW_UP probe), when a recovery round lost too
//! much, or when rounds are CE-marked past ecn_thresh.

use super::{Bbr3, MAX_LOSS_EVENTS};
use crate::cc::bbr::{Version, BBR_UNIT};
use crate::cc::{CaState, ConnInfo, RateSample};

impl Bbr3 {
    /// `bbr_reset_full_bw`.
    pub(super) fn reset_full_bw(&mut self) {
        self.core.full_bw = 0;
        self.core.full_bw_cnt = 0;
        self.full_bw_now = false;
    }

    /// `bbr_check_full_bw_reached` (v3: on every sample; also detects the UP plateau).
    pub(super) fn check_full_bw_reached(&mut self, rs: &RateSample, sample_bw: u64) {
        if self.full_bw_now || rs.is_app_limited || self.core.full_bw_grew(sample_bw) {
            return;
        }
        if self.core.round_start {
            self.full_bw_now = self.core.full_bw_stalled();
            self.core.full_bw_reached |= self.full_bw_now;
        }
    }

    /// `bbr_check_loss_too_high_in_startup`: at the end of a Startup recovery round with at
    /// least full_loss_cnt lossy ACKs and loss above the threshold, the pipe is full.
    pub(super) fn check_loss_too_high_in_startup(&mut self, info: &ConnInfo, rs: &RateSample) {
        if self.core.full_bw_reached {
            return;
        }
        if rs.losses > 0 && self.loss_events_in_round < MAX_LOSS_EVENTS {
            self.loss_events_in_round += 1;
        }
        if self.p.full_loss_cnt > 0.0
            && self.loss_round_start
            && info.ca_state == CaState::Recovery
            && self.loss_events_in_round >= self.p.full_loss_cnt as u32
            && self.is_inflight_too_high(rs.lost, rs.tx_in_flight, rs.delivered, rs.delivered_ce)
        {
            self.handle_queue_too_high_in_startup();
            return;
        }
        if self.loss_round_start {
            self.loss_events_in_round = 0;
        }
    }

    /// `bbr_check_ecn_too_high_in_startup`, at a round start with its CE ratio: after
    /// full_ecn_cnt rounds at or above ecn_thresh, the pipe is full.
    pub(super) fn check_ecn_too_high_in_startup(&mut self, ce_ratio: u32) {
        let thresh = self.ecn_thresh;
        if self.core.full_bw_reached || self.p.full_ecn_cnt == 0.0 || thresh == 0 {
            return;
        }
        if ce_ratio >= thresh {
            self.startup_ecn_rounds += 1;
        } else {
            self.startup_ecn_rounds = 0;
        }
        if self.startup_ecn_rounds >= self.p.full_ecn_cnt as u32 {
            self.handle_queue_too_high_in_startup();
        }
    }

    /// `bbr_handle_queue_too_high_in_startup`: the pipe is full, and inflight_hi starts at the
    /// BDP (or the latest delivered volume, if larger).
    fn handle_queue_too_high_in_startup(&mut self) {
        self.core.full_bw_reached = true;
        self.inflight_hi = self.inflight(self.max_bw(), BBR_UNIT).max(self.inflight_latest);
    }
}
