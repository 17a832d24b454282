//! BBRv3's PROBE_BW: a cycle of DOWN (pace below the estimate until inflight is down to the
//! BDP and below inflight_hi's headroom), CRUISE (at the estimate, until 2-3 s or a Reno flow's
//! BDP-rounds have passed), REFILL (one round at gain 1 with the lower bounds reset) and UP
//! (probe at 1.25 until loss or ECN says inflight is too high, the bandwidth plateaus, or the
//! flight is back at a level that was too high before); inflight_hi grows while UP is limited
//! by it, and the max filter advances once per cycle.

use super::{AckPhase, Bbr3, Phase, MAX_PROBE_UP_ROUNDS, UNSET};
use crate::cc::bbr::{to_unit, Mode, Version, BBR_SCALE, BBR_UNIT};
use crate::cc::{CaState, ConnInfo, RateSample, Window};
use crate::time::Nanos;

impl Bbr3 {
    /// `bbr_pick_probe_wait`: 0 or 1 rounds of head start, 2-3 s of wall clock.
    fn pick_probe_wait(&mut self) {
        self.rounds_since_probe = self.core.rng.below(self.p.bw_probe_rand_rounds as u32);
        let rand_us = (self.p.bw_probe_rand * 1e6) as u32;
        let extra = if rand_us > 0 { self.core.rng.below(rand_us) } else { 0 };
        self.probe_wait_us = (self.p.bw_probe_base * 1e6) as u64 + extra as u64;
    }

    /// `bbr_raise_inflight_hi_slope`: each UP round doubles the growth of inflight_hi.
    fn raise_inflight_hi_slope(&mut self, cwnd: u32) {
        let growth_this_round = 1u32 << self.bw_probe_up_rounds;
        self.bw_probe_up_rounds = (self.bw_probe_up_rounds + 1).min(MAX_PROBE_UP_ROUNDS);
        self.bw_probe_up_cnt = (cwnd / growth_this_round).max(1);
    }

    /// `bbr_probe_inflight_hi_upward`: while cwnd-limited at inflight_hi, +1 per
    /// bw_probe_up_cnt packets ACKed.
    fn probe_inflight_hi_upward(&mut self, info: &ConnInfo, cwnd: u32, rs: &RateSample) {
        if !info.is_cwnd_limited || cwnd < self.inflight_hi {
            return;
        }
        self.bw_probe_up_acks += rs.acked_sacked;
        if self.bw_probe_up_acks >= self.bw_probe_up_cnt {
            let delta = self.bw_probe_up_acks / self.bw_probe_up_cnt;
            self.bw_probe_up_acks -= delta * self.bw_probe_up_cnt;
            self.inflight_hi = self.inflight_hi.saturating_add(delta);
            self.try_fast_path = false;
        }
        if self.core.round_start {
            self.raise_inflight_hi_slope(cwnd);
        }
    }

    /// `bbr_start_bw_probe_refill`.
    fn start_bw_probe_refill(&mut self, info: &ConnInfo, bw_probe_up_rounds: u32) {
        self.reset_lower_bounds();
        self.bw_probe_up_rounds = bw_probe_up_rounds;
        self.bw_probe_up_acks = 0;
        self.stopped_risky_probe = false;
        self.ack_phase = AckPhase::Refilling;
        self.core.next_rtt_delivered = info.delivered;
        self.set_cycle_idx(Phase::Refill);
    }

    /// `bbr_start_bw_probe_up`.
    fn start_bw_probe_up(&mut self, info: &ConnInfo, cwnd: u32, sample_bw: u64) {
        self.ack_phase = AckPhase::ProbeStarting;
        self.core.next_rtt_delivered = info.delivered;
        self.core.cycle_mstamp = info.now;
        self.reset_full_bw();
        self.core.full_bw = sample_bw;
        self.set_cycle_idx(Phase::Up);
        self.raise_inflight_hi_slope(cwnd);
    }

    /// `bbr_start_bw_probe_down`: a new cycle; pick when to probe next.
    pub(super) fn start_bw_probe_down(&mut self, info: &ConnInfo) {
        self.reset_congestion_signals();
        self.bw_probe_up_cnt = UNSET;
        self.pick_probe_wait();
        self.core.cycle_mstamp = info.now;
        self.ack_phase = AckPhase::ProbeStopping;
        self.core.next_rtt_delivered = info.delivered;
        self.set_cycle_idx(Phase::Down);
    }

    /// `bbr_start_bw_probe_cruise`.
    pub(super) fn start_bw_probe_cruise(&mut self) {
        if self.inflight_lo != UNSET {
            self.inflight_lo = self.inflight_lo.min(self.inflight_hi);
        }
        self.set_cycle_idx(Phase::Cruise);
    }

    fn set_cycle_idx(&mut self, phase: Phase) {
        self.cycle_idx = phase;
        self.try_fast_path = false;
    }

    /// `bbr_adapt_upper_bounds`: track probe feedback, advance the max filter once per cycle,
    /// and move inflight_hi down on too much loss or up when a higher level proved safe.
    /// Returns true if it decided a phase change.
    fn adapt_upper_bounds(&mut self, info: &ConnInfo, w: &Window, rs: &RateSample) -> bool {
        if self.ack_phase == AckPhase::ProbeStarting && self.core.round_start {
            self.ack_phase = AckPhase::ProbeFeedback;
        }
        if self.ack_phase == AckPhase::ProbeStopping && self.core.round_start {
            self.bw_probe_samples = false;
            self.ack_phase = AckPhase::Init;
            // bbr_advance_max_bw_filter: forget the older cycle's samples, if this one has any.
            if self.core.mode == Mode::ProbeBw && !rs.is_app_limited && self.bw_hi.current() != 0 {
                self.bw_hi.advance();
            }
            if self.core.mode == Mode::ProbeBw && self.stopped_risky_probe && !self.prev_probe_too_high {
                self.start_bw_probe_refill(info, 0);
                return true;
            }
        }
        if self.is_inflight_too_high(rs.lost, rs.tx_in_flight, rs.delivered, rs.delivered_ce) {
            if self.bw_probe_samples {
                self.handle_inflight_too_high(info, w.cwnd, rs.is_app_limited, rs.tx_in_flight);
            }
        } else {
            if self.inflight_hi == UNSET {
                return false;
            }
            if rs.tx_in_flight > self.inflight_hi {
                self.inflight_hi = rs.tx_in_flight;
            }
            if self.core.mode == Mode::ProbeBw && self.cycle_idx == Phase::Up {
                self.probe_inflight_hi_upward(info, w.cwnd, rs);
            }
        }
        false
    }

    /// `bbr_is_reno_coexistence_probe_time`: a Reno flow with our BDP would probe every BDP
    /// rounds; probe at least that often (at most 63 rounds).
    fn is_reno_coexistence_probe_time(&self, cwnd: u32) -> bool {
        let rounds = (self.p.bw_probe_max_rounds as u32).min(self.target_inflight(cwnd));
        self.rounds_since_probe >= rounds
    }

    /// `bbr_check_time_to_probe_bw`.
    fn check_time_to_probe_bw(&mut self, info: &ConnInfo, cwnd: u32) -> bool {
        // Marks but no loss this cycle: once they cease, reprobe quickly with a first step of
        // about ecn_reprobe_gain x inflight_hi (2^n packets).
        if self.p.ecn_reprobe_gain > 0.0
            && self.ecn_eligible
            && self.ecn_in_cycle
            && !self.loss_in_cycle
            && info.ca_state == CaState::Open
        {
            let target = (self.inflight_hi as u64 * to_unit(self.p.ecn_reprobe_gain) as u64) >> BBR_SCALE;
            let n = if target == 0 { 0 } else { 63 - target.leading_zeros() };
            self.start_bw_probe_refill(info, n.min(MAX_PROBE_UP_ROUNDS));
            return true;
        }
        let waited = info.now > self.core.cycle_mstamp + self.probe_wait_us as Nanos * 1000;
        if waited || self.is_reno_coexistence_probe_time(cwnd) {
            self.start_bw_probe_refill(info, 0);
            return true;
        }
        false
    }

    /// `bbr_check_time_to_cruise`: inflight is down to min(BDP, inflight_hi - headroom).
    fn check_time_to_cruise(&self, inflight: u32, bw: u64) -> bool {
        inflight <= self.inflight_with_headroom() && inflight <= self.inflight(bw, BBR_UNIT)
    }

    /// `bbr_update_cycle_phase`: the PROBE_BW state machine.
    pub(super) fn update_cycle_phase(&mut self, info: &ConnInfo, w: &Window, rs: &RateSample, sample_bw: u64) {
        if !self.core.full_bw_reached {
            return;
        }
        if self.adapt_upper_bounds(info, w, rs) || self.core.mode != Mode::ProbeBw {
            return;
        }
        let inflight = self.packets_in_net_at_edt(info, rs.prior_in_flight);
        let bw = self.max_bw();
        match self.cycle_idx {
            Phase::Cruise => {
                self.check_time_to_probe_bw(info, w.cwnd);
            }
            Phase::Refill => {
                // After a round at gain 1 the samples start to reflect the refilled pipe.
                if self.core.round_start {
                    self.bw_probe_samples = true;
                    self.start_bw_probe_up(info, w.cwnd, sample_bw);
                }
            }
            Phase::Up => {
                let mut done = false;
                if self.prev_probe_too_high && inflight >= self.inflight_hi {
                    // Back at the level that lost too much last time.
                    self.stopped_risky_probe = true;
                    done = true;
                } else if info.is_cwnd_limited && w.cwnd >= self.inflight_hi {
                    // inflight_hi, not the path, is what limits growth.
                    self.reset_full_bw();
                    self.core.full_bw = sample_bw;
                } else if self.full_bw_now {
                    // Bandwidth plateau: the pipe is full.
                    done = true;
                }
                if done {
                    self.prev_probe_too_high = false;
                    self.start_bw_probe_down(info);
                }
            }
            Phase::Down => {
                if !self.check_time_to_probe_bw(info, w.cwnd) && self.check_time_to_cruise(inflight, bw) {
                    self.start_bw_probe_cruise();
                }
            }
        }
    }
}
