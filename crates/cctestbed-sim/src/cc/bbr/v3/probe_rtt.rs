//! BBRv3's PROBE_RTT: min_rtt is a 10 s min filter, but PROBE_RTT comes from a 5 s one (the
//! draft's ProbeRTTInterval): when it expires without a lower RTT, cwnd drops to
//! max(4, BDP/2) for at least 200 ms and a round, then the flow returns to PROBE_BW (through
//! DOWN, at once to CRUISE) or to STARTUP.

use super::{AckPhase, Bbr3};
use crate::cc::bbr::{Mode, Version};
use crate::cc::{ConnInfo, RateSample, Window};
use crate::jiffies::CONFIG_HZ;

impl Bbr3 {
    /// `bbr_exit_probe_rtt`: back to PROBE_BW (DOWN, then at once CRUISE) or STARTUP.
    fn exit_probe_rtt(&mut self, info: &ConnInfo) {
        self.reset_lower_bounds();
        if self.core.full_bw_reached {
            self.core.mode = Mode::ProbeBw;
            self.start_bw_probe_down(info);
            self.start_bw_probe_cruise();
        } else {
            self.core.mode = Mode::Startup;
        }
    }

    /// `bbr_check_probe_rtt_done`: the hold over, the PROBE_RTT schedule restarts.
    pub(super) fn check_probe_rtt_done(&mut self, info: &ConnInfo, w: &mut Window) {
        if !self.core.probe_rtt_done(info, w) {
            return;
        }
        self.probe_rtt_min.stamp = info.ticks.jiffies(info.now, CONFIG_HZ);
        self.exit_probe_rtt(info);
    }

    /// `bbr_update_min_rtt`: a 5 s min filter schedules PROBE_RTT, the 10 s one is min_rtt.
    pub(super) fn update_min_rtt(&mut self, info: &ConnInfo, w: &mut Window, rs: &RateSample) {
        let now_j = info.ticks.jiffies(info.now, CONFIG_HZ);
        let probe_rtt_expired = self.probe_rtt_min.expired(now_j, self.probe_rtt_win_j);
        self.probe_rtt_min.update(now_j, probe_rtt_expired, rs);
        let min_rtt_expired = self.core.min_rtt.expired(now_j, self.core.min_rtt_win_j);
        if self.probe_rtt_min.us <= self.core.min_rtt.us || min_rtt_expired {
            self.core.min_rtt = self.probe_rtt_min;
        }
        if self.core.enter_probe_rtt(probe_rtt_expired, w.cwnd) {
            self.ack_phase = AckPhase::ProbeStopping;
            self.core.next_rtt_delivered = info.delivered;
        }
        if self.core.mode == Mode::ProbeRtt && self.core.hold_probe_rtt(info, w, self.probe_rtt_cwnd()) {
            self.check_probe_rtt_done(info, w);
        }
        self.core.update_idle_restart(rs);
    }
}
