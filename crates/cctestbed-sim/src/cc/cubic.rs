//! CUBIC as Linux `net/ipv4/tcp_cubic.c` implements RFC 9438, with HyStart.
//!
//! Window growth: W(t) = C (t - K)^3 + W_max with C = bic_scale/1024 * 10 (0.4 for the
//! default bic_scale 41) and beta = 717/1024 (~0.7); t counts from the epoch start plus
//! delay_min, as in `bictcp_update`, and the per-ACK increment is 1/cnt packet with
//! cnt = cwnd / (W(t) - cwnd). Before the first loss cnt is capped at 20. The Reno-friendly
//! (TCP-friendliness) estimate grows at 3 beta' / (2 - beta') per RTT with the Linux
//! integer constant beta_scale. Fast convergence lowers W_max to cwnd (1 + beta) / 2 when a
//! loss comes below the previous W_max. A retransmission timeout resets the state.
//!
//! HyStart (`hystart_update`), active while cwnd >= hystart_low_window (16): the ACK-train
//! exit when ACKs no more than 2 ms apart span more than delay_min/2 (delay_min + ack delay,
//! halved when not paced), and the delay exit when the round's minimum RTT over 8 samples
//! exceeds delay_min + clamp(delay_min/8, 4 ms, 16 ms). Either sets ssthresh = cwnd.
//!
//! Deviations: time is continuous (ns) where Linux counts jiffies; the "at most once per
//! jiffy" update rule uses a 1 ms jiffy (HZ = 1000). The cube root is computed in floating
//! point, not with Linux's table plus Newton step (same value to within a jiffy).

use super::{CaEvent, CaState, CongestionControl, ConnInfo, Window, AckSample};
use crate::config::Nanos;

/// BICTCP_BETA_SCALE.
const BETA_SCALE: u32 = 1024;
/// HYSTART_MIN_SAMPLES.
const HYSTART_MIN_SAMPLES: u32 = 8;
/// HYSTART_DELAY_MIN / HYSTART_DELAY_MAX.
const HYSTART_DELAY_MIN: Nanos = 4_000_000;
const HYSTART_DELAY_MAX: Nanos = 16_000_000;
/// One jiffy at HZ = 1000.
const JIFFY: Nanos = 1_000_000;

crate::cc_params! {
    /// Linux module parameters of tcp_cubic.c, same names and defaults.
    pub struct CubicParams {
        /// Multiplicative decrease, in 1/1024 (717 = 0.7).
        beta: 717.0, 1.0, 1023.0;
        /// Scales C: C = bic_scale * 10 / 1024 (41 gives 0.4).
        bic_scale: 41.0, 1.0, 1024.0;
        /// Lower W_max on a loss below the previous one (1 = on).
        fast_convergence: 1.0, 0.0, 1.0;
        /// Grow at least as fast as Reno would (1 = on).
        tcp_friendliness: 1.0, 0.0, 1.0;
        /// HyStart slow-start exit (1 = on).
        hystart: 1.0, 0.0, 1.0;
        /// HyStart only runs once cwnd reaches this many packets.
        hystart_low_window: 16.0, 2.0, 1e6;
        /// Maximum spacing of ACKs in an ACK train, microseconds.
        hystart_ack_delta_us: 2000.0, 1.0, 1e6;
        /// Enable the ACK-train (1) and delay (2) detectors; 3 = both.
        hystart_detect: 3.0, 0.0, 3.0;
    }
}

pub struct Cubic {
    p: CubicParams,
    beta: u32,
    /// `cube_rtt_scale` = bic_scale * 10.
    cube_rtt_scale: f64,
    /// `beta_scale` = 8 (1024 + beta) / 3 / (1024 - beta).
    beta_scale: u32,

    cnt: u32,
    last_max_cwnd: u32,
    last_cwnd: u32,
    last_time: Nanos,
    origin_point: u32,
    /// K in seconds.
    k: f64,
    delay_min: Nanos,
    epoch_start: Option<Nanos>,
    ack_cnt: u32,
    tcp_cwnd: u32,
    // HyStart.
    found: bool,
    round_start: Nanos,
    end_seq: u64,
    last_ack: Nanos,
    curr_rtt: Nanos,
    sample_cnt: u32,
}

impl Cubic {
    pub fn new(p: CubicParams) -> Self {
        let beta = p.beta as u32;
        Cubic {
            p,
            beta,
            cube_rtt_scale: p.bic_scale * 10.0,
            beta_scale: 8 * (BETA_SCALE + beta) / 3 / (BETA_SCALE - beta),
            cnt: 0,
            last_max_cwnd: 0,
            last_cwnd: 0,
            last_time: 0,
            origin_point: 0,
            k: 0.0,
            delay_min: 0,
            epoch_start: None,
            ack_cnt: 0,
            tcp_cwnd: 0,
            found: false,
            round_start: 0,
            end_seq: 0,
            last_ack: 0,
            curr_rtt: Nanos::MAX,
            sample_cnt: 0,
        }
    }

    /// `bictcp_reset`.
    fn reset(&mut self) {
        let delay_min = self.delay_min;
        *self = Cubic::new(self.p);
        self.delay_min = delay_min;
    }

    fn hystart_reset(&mut self, info: &ConnInfo) {
        self.round_start = info.now;
        self.last_ack = info.now;
        self.end_seq = info.snd_nxt;
        self.curr_rtt = Nanos::MAX;
        self.sample_cnt = 0;
    }

    /// `bictcp_update`: the per-ACK increment 1/cnt.
    fn update(&mut self, now: Nanos, cwnd: u32, acked: u32) {
        self.ack_cnt += acked;
        if self.last_cwnd == cwnd && now - self.last_time <= JIFFY * 1000 / 32 {
            return;
        }
        let same_jiffy = self.epoch_start.is_some() && now / JIFFY == self.last_time / JIFFY;
        if !same_jiffy {
            self.last_cwnd = cwnd;
            self.last_time = now;
            if self.epoch_start.is_none() {
                self.epoch_start = Some(now);
                self.ack_cnt = acked;
                self.tcp_cwnd = cwnd;
                if self.last_max_cwnd <= cwnd {
                    self.k = 0.0;
                    self.origin_point = cwnd;
                } else {
                    // K = cbrt((W_max - cwnd) / C), C = cube_rtt_scale / 2^10 per s^3.
                    let c = self.cube_rtt_scale / 1024.0;
                    self.k = ((self.last_max_cwnd - cwnd) as f64 / c).cbrt();
                    self.origin_point = self.last_max_cwnd;
                }
            }
            let t = (now - self.epoch_start.unwrap() + self.delay_min) as f64 / 1e9;
            let offs = (t - self.k).abs();
            let delta = self.cube_rtt_scale / 1024.0 * offs * offs * offs;
            let target = if t < self.k {
                self.origin_point as f64 - delta
            } else {
                self.origin_point as f64 + delta
            };
            let target = target.max(0.0) as u32;
            self.cnt = if target > cwnd { cwnd / (target - cwnd) } else { 100 * cwnd };
            // Before the first loss, grow at least 5 % per RTT.
            if self.last_max_cwnd == 0 && self.cnt > 20 {
                self.cnt = 20;
            }
        }
        if self.p.tcp_friendliness != 0.0 {
            let delta = (cwnd * self.beta_scale) >> 3;
            while delta > 0 && self.ack_cnt > delta {
                self.ack_cnt -= delta;
                self.tcp_cwnd += 1;
            }
            if self.tcp_cwnd > cwnd {
                let max_cnt = cwnd / (self.tcp_cwnd - cwnd);
                self.cnt = self.cnt.min(max_cnt);
            }
        }
        self.cnt = self.cnt.max(2);
    }

    fn hystart_update(&mut self, info: &ConnInfo, w: &mut Window, delay: Nanos) {
        if info.snd_una > self.end_seq {
            self.hystart_reset(info);
        }
        let detect = self.p.hystart_detect as u32;
        if detect & 1 != 0 {
            let now = info.now;
            if now - self.last_ack <= (self.p.hystart_ack_delta_us * 1000.0) as Nanos {
                self.last_ack = now;
                // hystart_ack_delay: up to 1 ms of ACK compression (4 GSO bursts at the pacing rate).
                let mut threshold = self.delay_min + 1_000_000;
                if !info.paced {
                    threshold /= 2;
                }
                if now - self.round_start > threshold {
                    self.found = true;
                    w.ssthresh = w.cwnd;
                }
            }
        }
        if detect & 2 != 0 {
            self.curr_rtt = self.curr_rtt.min(delay);
            if self.sample_cnt < HYSTART_MIN_SAMPLES {
                self.sample_cnt += 1;
            } else {
                let thresh = (self.delay_min / 8).clamp(HYSTART_DELAY_MIN, HYSTART_DELAY_MAX);
                if self.curr_rtt > self.delay_min + thresh {
                    self.found = true;
                    w.ssthresh = w.cwnd;
                }
            }
        }
    }

    pub fn w_max(&self) -> u32 {
        self.last_max_cwnd
    }

    pub fn k_seconds(&self) -> f64 {
        self.k
    }
}

impl CongestionControl for Cubic {
    fn name(&self) -> &'static str {
        "cubic"
    }

    fn init(&mut self, info: &ConnInfo, _w: &mut Window) {
        self.reset();
        if self.p.hystart != 0.0 {
            self.hystart_reset(info);
        }
    }

    fn ssthresh(&mut self, _info: &ConnInfo, w: &Window) -> u32 {
        self.epoch_start = None;
        let cwnd = w.cwnd;
        self.last_max_cwnd = if cwnd < self.last_max_cwnd && self.p.fast_convergence != 0.0 {
            cwnd * (BETA_SCALE + self.beta) / (2 * BETA_SCALE)
        } else {
            cwnd
        };
        (cwnd * self.beta / BETA_SCALE).max(2)
    }

    fn cong_avoid(&mut self, info: &ConnInfo, w: &mut Window, acked: u32) {
        let acked = w.slow_start_if_cwnd_limited(info, acked);
        if acked == 0 {
            return;
        }
        self.update(info.now, w.cwnd, acked);
        w.cong_avoid_ai(self.cnt, acked);
    }

    fn set_state(&mut self, info: &ConnInfo, _w: &mut Window, new: CaState) {
        if new == CaState::Loss {
            self.reset();
            self.hystart_reset(info);
        }
    }

    fn cwnd_event(&mut self, info: &ConnInfo, _w: &mut Window, ev: CaEvent) {
        // The epoch shifts over idle time so the cubic curve does not jump.
        if ev == CaEvent::TxStart {
            if let Some(start) = self.epoch_start {
                let idle = info.now - info.last_send_ns;
                if idle > 0 {
                    self.epoch_start = Some((start + idle).min(info.now));
                }
            }
        }
    }

    /// `cubictcp_acked`.
    fn pkts_acked(&mut self, info: &ConnInfo, w: &mut Window, sample: &AckSample) {
        if sample.rtt_ns < 0 {
            return;
        }
        // Discard delay samples right after fast recovery.
        if let Some(start) = self.epoch_start {
            if info.now - start < 1_000_000_000 {
                return;
            }
        }
        let delay = sample.rtt_ns.max(1);
        if self.delay_min == 0 || self.delay_min > delay {
            self.delay_min = delay;
        }
        if !self.found && w.in_slow_start() && self.p.hystart != 0.0 && w.cwnd as f64 >= self.p.hystart_low_window {
            self.hystart_update(info, w, delay);
        }
    }

    fn telemetry_keys(&self) -> &'static [&'static str] {
        &["w_max_pkts", "k_s"]
    }

    fn telemetry(&self, out: &mut Vec<f64>) {
        out.push(self.last_max_cwnd as f64);
        out.push(self.k);
    }
}
