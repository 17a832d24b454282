//! BBRv3's DRAIN: once STARTUP found the pipe full, pace below the estimate until the flight
//! is down to the BDP (or, with the draft's bound, for at most drain_max_rounds rounds), then
//! PROBE_BW_DOWN.

use super::Bbr3;
use crate::cc::bbr::{Mode, Version, BBR_UNIT};
use crate::cc::{ConnInfo, Window};

impl Bbr3 {
    /// `bbr_check_drain`.
    pub(super) fn check_drain(&mut self, info: &ConnInfo, w: &mut Window) {
        if self.core.mode == Mode::Startup && self.core.full_bw_reached {
            self.core.mode = Mode::Drain;
            w.ssthresh = self.inflight(self.max_bw(), BBR_UNIT);
            self.reset_congestion_signals();
            self.drain_rounds = 0;
        }
        if self.core.mode != Mode::Drain {
            return;
        }
        if self.core.round_start {
            self.drain_rounds += 1;
        }
        let drained =
            self.packets_in_net_at_edt(info, info.packets_in_flight) <= self.inflight(self.max_bw(), BBR_UNIT);
        let too_long = self.p.drain_max_rounds > 0.0 && self.drain_rounds >= self.p.drain_max_rounds as u32;
        if drained || too_long {
            self.core.mode = Mode::ProbeBw;
            self.start_bw_probe_down(info);
        }
    }
}
