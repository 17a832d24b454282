//! H-TCP as Linux `net/ipv4/tcp_htcp.c` (Shorten and Leith, "H-TCP: TCP for high-speed and
//! long-distance networks", PFLDnet 2004).
//!
//! The additive increase grows with the time D since the last congestion event:
//! alpha = 2 (1 - beta) f(D), f = 1 for D <= 1 s, else 1 + 10 (D - 1) + ((D - 1)/2)^2, scaled
//! by minRTT / 100 ms (clamped to [0.5, 10]) so flows of different RTTs grow alike. On a loss
//! cwnd is multiplied by beta = minRTT / maxRTT, clamped to [0.5, 0.8] ("adaptive backoff"),
//! or 0.5 when the measured maximum throughput moved by more than 20 % between congestion
//! events (the bandwidth switch). maxRTT fades 5 % towards minRTT at each event.
//!
//! Fixed-point arithmetic (<< 7) as in Linux, and its clock: jiffies at the kernel's CONFIG_HZ
//! (parameter `hz`, 250 on the reference machine: 4 ms ticks) from the trial's tick clock
//! ([`crate::jiffies::TickClock`]), RTT samples converted with `usecs_to_jiffies` (rounded
//! up), the 10 ms and 20 ms thresholds with `msecs_to_jiffies`. So minRTT and maxRTT are whole
//! ticks and beta = minRTT / maxRTT moves in steps of a tick, as on Linux.
//! `undo_cwnd` is `htcp_cwnd_undo`: a spurious reduction undone gives back the time of the
//! last congestion event, maxRTT and the bandwidth switch's old maximum.
//!
//! Deviation: tcp_htcp.c is not built into the reference kernel (CONFIG_TCP_CONG_HTCP is not
//! set), so this model is checked against the source and the published behaviour only.

use super::{AckSample, CaState, CongestionControl, ConnInfo, Window};
use crate::jiffies::{msecs_to_jiffies, usecs_to_jiffies};

/// 1.0, 0.5 and 0.8 in 1/128.
const ALPHA_BASE: u32 = 1 << 7;
const BETA_MIN: u32 = 1 << 6;
const BETA_MAX: u32 = 102;
crate::cc_params! {
    /// tcp_htcp.c module parameters, and the kernel's tick rate.
    pub struct HtcpParams {
        /// Scale the increase by the flow's minRTT (1 = on).
        use_rtt_scaling: 1.0, 0.0, 1.0;
        /// Fall back to beta = 0.5 when throughput changes by > 20 % (1 = on).
        use_bandwidth_switch: 1.0, 0.0, 1.0;
        /// The kernel's CONFIG_HZ (jiffies per second): H-TCP's clock. 250 on the reference kernel.
        hz: 250.0, 100.0, 1000.0;
    }
}

pub struct Htcp {
    p: HtcpParams,
    alpha: u32,
    pub beta: u32,
    modeswitch: bool,
    pkts_acked: u32,
    packetcount: u32,
    min_rtt: u32,
    max_rtt: u32,
    last_cong: u32,
    undo_last_cong: u32,
    undo_max_rtt: u32,
    undo_old_max_b: u32,
    min_b: u32,
    max_b: u32,
    old_max_b: u32,
    bi: u32,
    lasttime: u32,
}


impl Htcp {
    pub fn new(p: HtcpParams) -> Self {
        Htcp {
            p,
            alpha: ALPHA_BASE,
            beta: BETA_MIN,
            modeswitch: false,
            pkts_acked: 1,
            packetcount: 0,
            min_rtt: 0,
            max_rtt: 0,
            last_cong: 0,
            undo_last_cong: 0,
            undo_max_rtt: 0,
            undo_old_max_b: 0,
            min_b: 0,
            max_b: 0,
            old_max_b: 0,
            bi: 0,
            lasttime: 0,
        }
    }

    fn hz(&self) -> u32 {
        self.p.hz as u32
    }

    /// `jiffies` now, on the trial's tick clock.
    fn jiffies(&self, info: &ConnInfo) -> u32 {
        info.ticks.jiffies(info.now, self.p.hz as u64) as u32
    }

    /// Beta as a fraction.
    pub fn beta_ratio(&self) -> f64 {
        self.beta as f64 / 128.0
    }

    fn cong_time(&self, now: u32) -> u32 {
        now.wrapping_sub(self.last_cong)
    }

    fn measure_rtt(&mut self, ca_state: CaState, srtt: u32) {
        if self.min_rtt > srtt || self.min_rtt == 0 {
            self.min_rtt = srtt;
        }
        if ca_state == CaState::Open {
            if self.max_rtt < self.min_rtt {
                self.max_rtt = self.min_rtt;
            }
            if self.max_rtt < srtt && srtt <= self.max_rtt + msecs_to_jiffies(20, self.p.hz as u64) as u32 {
                self.max_rtt = srtt;
            }
        }
    }

    fn beta_update(&mut self) {
        if self.p.use_bandwidth_switch != 0.0 {
            let (max_b, old_max_b) = (self.max_b, self.old_max_b);
            self.old_max_b = self.max_b;
            let x = 5 * max_b as u64;
            if !(4 * old_max_b as u64 <= x && x <= 6 * old_max_b as u64) {
                self.beta = BETA_MIN;
                self.modeswitch = false;
                return;
            }
        }
        if self.modeswitch && self.min_rtt > msecs_to_jiffies(10, self.p.hz as u64) as u32 && self.max_rtt > 0 {
            self.beta = ((self.min_rtt << 7) / self.max_rtt).clamp(BETA_MIN, BETA_MAX);
        } else {
            self.beta = BETA_MIN;
            self.modeswitch = true;
        }
    }

    fn alpha_update(&mut self, now: u32) {
        let hz = self.hz();
        let mut factor: u32 = 1;
        let mut diff = self.cong_time(now);
        if diff > hz {
            diff -= hz;
            factor = 1 + (10 * diff + ((diff / 2) * (diff / 2) / hz)) / hz;
        }
        if self.p.use_rtt_scaling != 0.0 && self.min_rtt > 0 {
            let scale = ((hz << 3) / (10 * self.min_rtt)).clamp(1 << 2, 10 << 3);
            factor = ((factor << 3) / scale).max(1);
        }
        self.alpha = 2 * factor * ((1 << 7) - self.beta);
        if self.alpha == 0 {
            self.alpha = ALPHA_BASE;
        }
    }
}

impl CongestionControl for Htcp {
    fn name(&self) -> &'static str {
        "htcp"
    }

    fn init(&mut self, info: &ConnInfo, _w: &mut Window) {
        *self = Htcp::new(self.p);
        self.last_cong = self.jiffies(info);
    }

    /// `htcp_recalc_ssthresh` with `htcp_param_update`.
    fn ssthresh(&mut self, info: &ConnInfo, w: &Window) -> u32 {
        self.beta_update();
        self.alpha_update(self.jiffies(info));
        if self.min_rtt > 0 && self.max_rtt > self.min_rtt {
            self.max_rtt = self.min_rtt + (self.max_rtt - self.min_rtt) * 95 / 100;
        }
        ((w.cwnd * self.beta) >> 7).max(2)
    }

    fn cong_avoid(&mut self, info: &ConnInfo, w: &mut Window, acked: u32) {
        if !info.is_cwnd_limited {
            return;
        }
        if w.in_slow_start() {
            w.slow_start(acked);
        } else {
            if (w.cwnd_cnt as u64 * self.alpha as u64) >> 7 >= w.cwnd as u64 {
                w.cwnd += 1;
                w.cwnd_cnt = 0;
                self.alpha_update(self.jiffies(info));
            } else {
                w.cwnd_cnt += self.pkts_acked;
            }
            self.pkts_acked = 1;
        }
    }

    fn set_state(&mut self, info: &ConnInfo, _w: &mut Window, new: CaState) {
        match new {
            CaState::Open => {
                if self.undo_last_cong != 0 {
                    self.last_cong = self.jiffies(info);
                    self.undo_last_cong = 0;
                }
            }
            CaState::Cwr | CaState::Recovery | CaState::Loss => {
                // htcp_reset (a last_cong of 0 is kept as 1: 0 means nothing to undo)
                self.undo_last_cong = self.last_cong.max(1);
                self.undo_max_rtt = self.max_rtt;
                self.undo_old_max_b = self.old_max_b;
                self.last_cong = self.jiffies(info);
            }
            CaState::Disorder => {}
        }
    }

    /// `htcp_cwnd_undo`, then Reno's undo.
    fn undo_cwnd(&mut self, _info: &ConnInfo, w: &Window, prior_cwnd: u32) -> u32 {
        if self.undo_last_cong != 0 {
            self.last_cong = self.undo_last_cong;
            self.max_rtt = self.undo_max_rtt;
            self.old_max_b = self.undo_old_max_b;
            self.undo_last_cong = 0;
        }
        w.cwnd.max(prior_cwnd)
    }

    /// `measure_achieved_throughput`.
    fn pkts_acked(&mut self, info: &ConnInfo, w: &mut Window, sample: &AckSample) {
        let now = self.jiffies(info);
        if info.ca_state == CaState::Open {
            self.pkts_acked = sample.pkts_acked;
        }
        if sample.rtt_ns > 0 {
            self.measure_rtt(info.ca_state, usecs_to_jiffies(sample.rtt_ns as u64 / 1000, self.p.hz as u64) as u32);
        }
        if self.p.use_bandwidth_switch == 0.0 {
            return;
        }
        if !matches!(info.ca_state, CaState::Open | CaState::Disorder) {
            self.packetcount = 0;
            self.lasttime = now;
            return;
        }
        self.packetcount += sample.pkts_acked;
        let a = (self.alpha >> 7).max(1);
        if self.packetcount >= w.cwnd.saturating_sub(a) && now.wrapping_sub(self.lasttime) >= self.min_rtt && self.min_rtt > 0 {
            let cur_bi = (self.packetcount as u64 * self.hz() as u64 / now.wrapping_sub(self.lasttime).max(1) as u64) as u32;
            if self.cong_time(now) / self.min_rtt <= 3 {
                self.min_b = cur_bi;
                self.max_b = cur_bi;
                self.bi = cur_bi;
            } else {
                self.bi = (3 * self.bi + cur_bi) / 4;
                self.max_b = self.max_b.max(self.bi);
                self.min_b = self.min_b.min(self.max_b);
            }
            self.packetcount = 0;
            self.lasttime = now;
        }
    }

    fn telemetry_keys(&self) -> &'static [&'static str] {
        &["beta", "alpha"]
    }

    fn telemetry(&self, out: &mut Vec<f64>) {
        out.push(self.beta_ratio());
        out.push(self.alpha as f64 / 128.0);
    }
}
