//! TCP Vegas as Linux `net/ipv4/tcp_vegas.c` (Brakmo and Peterson, IEEE JSAC 1995).
//!
//! Once per RTT (when the ACK passes the sequence sent at the start of the previous window)
//! and given more than two RTT samples in it, Vegas compares the window with what the path
//! holds without queueing: diff = cwnd (rtt - baseRTT) / baseRTT packets queued, where rtt is
//! the minimum sample of the last RTT and baseRTT the minimum ever. In slow start, diff >
//! gamma ends it, with cwnd set to the actual rate times baseRTT (+1). In congestion
//! avoidance cwnd drops by one when diff > beta and grows by one when diff < alpha, so each
//! flow keeps alpha..beta packets (2..4) in the bottleneck queue. Losses are handled as Reno.
//! With too few samples, or right after (re)starting, Vegas behaves as Reno.
//!
//! Deviation: RTTs are kept in nanoseconds (Linux: microseconds + 1).

use crate::time::Nanos;
use super::reno::{reno_cong_avoid, reno_ssthresh};
use super::{AckSample, CaEvent, CaState, CongestionControl, ConnInfo, Window};

crate::cc_params! {
    /// tcp_vegas.c module parameters, in packets.
    pub struct VegasParams {
        /// Lower bound of packets kept in the network.
        alpha: 2.0, 0.0, 1000.0;
        /// Upper bound of packets kept in the network.
        beta: 4.0, 0.0, 1000.0;
        /// Queue (packets) that ends slow start.
        gamma: 1.0, 0.0, 1000.0;
    }
}

pub struct Vegas {
    p: VegasParams,
    doing_vegas_now: bool,
    beg_snd_nxt: u64,
    cnt_rtt: u32,
    min_rtt: Nanos,
    pub base_rtt: Nanos,
    last_diff: f64,
}

impl Vegas {
    pub fn new(p: VegasParams) -> Self {
        Vegas { p, doing_vegas_now: true, beg_snd_nxt: 0, cnt_rtt: 0, min_rtt: Nanos::MAX, base_rtt: Nanos::MAX, last_diff: f64::NAN }
    }

    /// `vegas_enable`.
    fn enable(&mut self, info: &ConnInfo) {
        self.doing_vegas_now = true;
        self.beg_snd_nxt = info.snd_nxt;
        self.cnt_rtt = 0;
        self.min_rtt = Nanos::MAX;
    }

    /// `tcp_vegas_init`.
    fn restart(&mut self, info: &ConnInfo) {
        self.base_rtt = Nanos::MAX;
        self.enable(info);
    }
}

/// `tcp_current_ssthresh`.
fn current_ssthresh(info: &ConnInfo, w: &Window) -> u32 {
    if matches!(info.ca_state, CaState::Recovery) {
        w.ssthresh
    } else {
        w.ssthresh.max((w.cwnd >> 1) + (w.cwnd >> 2))
    }
}

impl CongestionControl for Vegas {
    fn name(&self) -> &'static str {
        "vegas"
    }

    fn init(&mut self, info: &ConnInfo, _w: &mut Window) {
        self.restart(info);
    }

    fn ssthresh(&mut self, _info: &ConnInfo, w: &Window) -> u32 {
        reno_ssthresh(w.cwnd)
    }

    fn pkts_acked(&mut self, _info: &ConnInfo, _w: &mut Window, sample: &AckSample) {
        if sample.rtt_ns < 0 {
            return;
        }
        let vrtt = sample.rtt_ns + 1;
        self.base_rtt = self.base_rtt.min(vrtt);
        self.min_rtt = self.min_rtt.min(vrtt);
        self.cnt_rtt += 1;
    }

    fn set_state(&mut self, info: &ConnInfo, _w: &mut Window, new: CaState) {
        if new == CaState::Open {
            self.enable(info);
        } else {
            self.doing_vegas_now = false;
        }
    }

    fn cwnd_event(&mut self, info: &ConnInfo, _w: &mut Window, ev: CaEvent) {
        if matches!(ev, CaEvent::TxStart | CaEvent::CwndRestart) {
            self.restart(info);
        }
    }

    fn cong_avoid(&mut self, info: &ConnInfo, w: &mut Window, acked: u32) {
        if !self.doing_vegas_now {
            return reno_cong_avoid(info, w, acked);
        }
        if info.snd_una > self.beg_snd_nxt {
            // The once-per-RTT adjustment.
            self.beg_snd_nxt = info.snd_nxt;
            if self.cnt_rtt <= 2 {
                // Probably only delayed ACKs: behave as Reno this round.
                reno_cong_avoid(info, w, acked);
            } else {
                let rtt = self.min_rtt;
                let target_cwnd = (w.cwnd as u128 * self.base_rtt as u128 / rtt as u128) as u32;
                let diff = (w.cwnd as u128 * (rtt - self.base_rtt) as u128 / self.base_rtt as u128) as f64;
                self.last_diff = diff;
                if diff > self.p.gamma && w.in_slow_start() {
                    // Going too fast: match the actual rate and leave slow start.
                    w.cwnd = w.cwnd.min(target_cwnd + 1);
                    w.ssthresh = w.ssthresh.min(w.cwnd);
                } else if w.in_slow_start() {
                    w.slow_start(acked);
                } else if diff > self.p.beta {
                    w.cwnd -= 1;
                    w.ssthresh = w.ssthresh.min(w.cwnd);
                } else if diff < self.p.alpha {
                    w.cwnd += 1;
                }
                w.cwnd = w.cwnd.max(2);
                w.ssthresh = current_ssthresh(info, w);
            }
            self.cnt_rtt = 0;
            self.min_rtt = Nanos::MAX;
        } else if w.in_slow_start() {
            w.slow_start(acked);
        }
    }

    fn telemetry_keys(&self) -> &'static [&'static str] {
        &["base_rtt_ms", "queued_pkts_est"]
    }

    fn telemetry(&self, out: &mut Vec<f64>) {
        out.push(if self.base_rtt == Nanos::MAX { f64::NAN } else { self.base_rtt as f64 / 1e6 });
        out.push(self.last_diff);
    }
}
