//! CUBIC as Linux 6.18 `net/ipv4/tcp_cubic.c` implements RFC 9438, with HyStart.
//!
//! The per-ACK law follows the kernel's integer arithmetic and clocks:
//! - `cubictcp_cong_avoid`: nothing unless `tcp_is_cwnd_limited`; `tcp_slow_start` below
//!   ssthresh (the ACKed packets left over go on to congestion avoidance); then
//!   `bictcp_update` and `tcp_cong_avoid_ai(cnt, acked)`, where `acked` counts every packet
//!   the ACK newly delivered (two or more with delayed or stretched ACKs).
//! - `bictcp_update`: W(t) = C (t - K)^3 + W_max with C = bic_scale * 10 / 1024 (0.4) in
//!   packets per s^3, evaluated as the kernel does: t in jiffies since `epoch_start` plus
//!   `usecs_to_jiffies(delay_min)`, converted to units of 1/1024 s (BICTCP_HZ = 10), K in the
//!   same units from `cube_factor` = 2^40 / (bic_scale * 10), and the target
//!   (cube_rtt_scale * offs^3) >> 40 in u32. cnt = cwnd / (target - cwnd), or 100 cwnd below
//!   the curve; capped at 20 before the first loss (`last_max_cwnd == 0`). The update runs
//!   at most once per jiffy (`epoch_start && jiffies == last_time`) and not at all while cwnd
//!   is unchanged and less than HZ/32 jiffies have passed. The Reno-friendly estimate
//!   (`tcp_friendliness`) adds one packet to `tcp_cwnd` per (cwnd * beta_scale) >> 3 packets
//!   ACKed, beta_scale = 8 (1024 + beta) / 3 / (1024 - beta) = 15, and lowers cnt to
//!   cwnd / (tcp_cwnd - cwnd) when Reno would be ahead; cnt is at least 2.
//! - `cubictcp_recalc_ssthresh`: ends the epoch, W_max = cwnd, or cwnd (1024 + beta) / 2048
//!   with fast convergence when the loss comes below the previous W_max; returns
//!   max(cwnd * beta / 1024, 2). cwnd during recovery is the transport's PRR
//!   (`tcp_cwnd_reduction`) and ssthresh on leaving it (`tcp_end_cwnd_reduction`).
//! - `cubictcp_state`: entering Loss (RTO) runs `bictcp_reset`, which clears every field up
//!   to and including `delay_min` and `found`, then `bictcp_hystart_reset`.
//! - `cubictcp_cwnd_event` (CA_EVENT_TX_START): the epoch moves forward by the idle time in
//!   jiffies so the curve does not jump after idle.
//! - `cubictcp_acked`: RTT samples (µs) are ignored for one second (HZ jiffies) after an
//!   epoch starts; delay_min is their minimum; HyStart runs while in slow start.
//! - HyStart (`hystart_update`, with the 6.14 round-start fix: the round is reset on every
//!   slow-start ACK, the detectors only run once cwnd >= hystart_low_window = 16). ACK
//!   train: ACKs no more than hystart_ack_delta_us = 2 ms apart spanning more than
//!   delay_min + `hystart_ack_delay` (min(1 ms, 4 GSO bursts at the pacing rate)), halved for
//!   unpaced flows (SK_PACING_NONE). Delay: after 8 samples in a round, the round's minimum
//!   RTT exceeds delay_min + clamp(delay_min / 8, 4 ms, 16 ms). Either sets ssthresh = cwnd.
//! - `undo_cwnd` is `tcp_reno_undo_cwnd` (the trait default).
//!
//! The jiffy length comes from the kernel's CONFIG_HZ, here the parameter `hz` (250 on the
//! reference machine, 4 ms jiffies); jiffies count from simulation time 0.
//!
//! Deviations:
//! - `cubic_root` in Linux is a table lookup plus one Newton step with about 0.2 % error; the
//!   simulator takes the exact integer cube root (K differs by at most a few ms, i.e. at most
//!   about one jiffy, near the plateau where the curve is flat).
//! - `hystart_ack_delay` takes the socket's GSO size as 64 KiB minus the TCP header reserve
//!   (`sk_gso_max_size` of a veth/ethernet device) and the pacing rate as
//!   `tcp_update_pacing_rate` computes it from cwnd, packets out and srtt.
//!
//! Transport differences that touch this law, left in tcp/ (see docs/validation.md):
//! - `pkts_acked` runs after RACK loss detection and the recovery-state update, where Linux
//!   calls it from `tcp_clean_rtx_queue` before `tcp_fastretrans_alert`; only the RTT sample of
//!   the ACK that enters recovery is treated differently (kept for delay_min where Linux may
//!   discard it within a second of the epoch start).
//! - `tcp_is_cwnd_limited` in slow start is `cwnd < 2 max_packets_out` without Linux's
//!   `|| tp->is_cwnd_limited` term (the same for bulk flows).
//! - The receiver ACKs every second segment after its 16 quick ACKs; Linux also quick-ACKs
//!   whenever `tcp_grow_window` raises rcv_ssthresh, i.e. nearly every segment in slow start.
//!   Below ~11 Mbit/s two segments take more than hystart_ack_delta_us = 2 ms, so the ACK-train
//!   detector sees no train in the simulator where Linux sees one (10 Mbit/s, 200 ms: Linux
//!   leaves slow start at cwnd 247, the simulator overshoots to 656 and loses).

use super::{CaEvent, CaState, CongestionControl, ConnInfo, Window, AckSample};
use crate::jiffies;
use crate::time::Nanos;

/// BICTCP_BETA_SCALE.
const BETA_SCALE: u32 = 1024;
/// BICTCP_HZ: K and t are in units of 2^-10 s.
const BICTCP_HZ: u32 = 10;
/// HYSTART_MIN_SAMPLES.
const HYSTART_MIN_SAMPLES: u32 = 8;
/// HYSTART_DELAY_MIN / HYSTART_DELAY_MAX, µs.
const HYSTART_DELAY_MIN_US: u32 = 4_000;
const HYSTART_DELAY_MAX_US: u32 = 16_000;
/// `sk_gso_max_size`: GSO_LEGACY_MAX_SIZE (65536) less MAX_TCP_HEADER + 1 (`sk_setup_caps`).
const GSO_MAX_SIZE: u64 = 65_536 - 321;

crate::cc_params! {
    /// Linux module parameters of tcp_cubic.c, same names and defaults, plus the kernel's HZ.
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
        /// The kernel's CONFIG_HZ (jiffies per second): CUBIC's clock. 250 on the reference kernel.
        hz: 250.0, 100.0, 1000.0;
    }
}

pub struct Cubic {
    p: CubicParams,
    beta: u32,
    hz: u64,
    /// `cube_rtt_scale` = bic_scale * 10.
    cube_rtt_scale: u64,
    /// `cube_factor` = 2^(10 + 3 BICTCP_HZ) / (bic_scale * 10).
    cube_factor: u64,
    /// `beta_scale` = 8 (1024 + beta) / 3 / (1024 - beta).
    beta_scale: u32,

    // Fields `bictcp_reset` clears.
    cnt: u32,
    last_max_cwnd: u32,
    last_cwnd: u32,
    /// Jiffies.
    last_time: u64,
    origin_point: u32,
    /// K in 2^-10 s.
    bic_k: u64,
    /// Minimum RTT, µs (0 = none yet).
    delay_min: u32,
    /// Jiffies; `None` where Linux has 0.
    epoch_start: Option<u64>,
    ack_cnt: u32,
    tcp_cwnd: u32,
    // HyStart.
    found: bool,
    sample_cnt: u32,
    /// µs.
    round_start: u64,
    end_seq: u64,
    /// µs.
    last_ack: u64,
    /// µs.
    curr_rtt: u32,
}

/// floor(cbrt(a)).
fn icbrt(a: u64) -> u64 {
    if a == 0 {
        return 0;
    }
    let mut x = (a as f64).cbrt() as u64;
    while x > 0 && x.checked_mul(x).and_then(|y| y.checked_mul(x)).is_none_or(|c| c > a) {
        x -= 1;
    }
    while (x + 1).checked_mul(x + 1).and_then(|y| y.checked_mul(x + 1)).is_some_and(|c| c <= a) {
        x += 1;
    }
    x
}

impl Cubic {
    pub fn new(p: CubicParams) -> Self {
        let beta = p.beta as u32;
        let cube_rtt_scale = p.bic_scale as u64 * 10;
        Cubic {
            p,
            beta,
            hz: p.hz as u64,
            cube_rtt_scale,
            cube_factor: (1u64 << (10 + 3 * BICTCP_HZ)) / cube_rtt_scale,
            beta_scale: 8 * (BETA_SCALE + beta) / 3 / (BETA_SCALE - beta),
            cnt: 0,
            last_max_cwnd: 0,
            last_cwnd: 0,
            last_time: 0,
            origin_point: 0,
            bic_k: 0,
            delay_min: 0,
            epoch_start: None,
            ack_cnt: 0,
            tcp_cwnd: 0,
            found: false,
            sample_cnt: 0,
            round_start: 0,
            end_seq: 0,
            last_ack: 0,
            curr_rtt: u32::MAX,
        }
    }

    /// `tcp_jiffies32` at `now` on the connection's tick clock.
    fn jiffies(&self, info: &ConnInfo, now: Nanos) -> u64 {
        info.ticks.jiffies(now, self.hz)
    }

    /// `usecs_to_jiffies`: rounds up.
    fn usecs_to_jiffies(&self, us: u32) -> u64 {
        jiffies::usecs_to_jiffies(us as u64, self.hz)
    }

    /// `bictcp_reset`: clears everything up to and including delay_min, and `found`.
    fn reset(&mut self) {
        *self = Cubic::new(self.p);
    }

    /// `bictcp_hystart_reset`.
    fn hystart_reset(&mut self, info: &ConnInfo) {
        self.round_start = us(info.now);
        self.last_ack = self.round_start;
        self.end_seq = info.snd_nxt;
        self.curr_rtt = u32::MAX;
        self.sample_cnt = 0;
    }

    /// `bictcp_update`: sets cnt, the number of ACKed packets per packet of growth.
    fn update(&mut self, info: &ConnInfo, cwnd: u32, acked: u32) {
        let jiffies = self.jiffies(info, info.now);
        self.ack_cnt = self.ack_cnt.wrapping_add(acked);
        if self.last_cwnd == cwnd && jiffies.wrapping_sub(self.last_time) <= self.hz / 32 {
            return;
        }
        // At most once per jiffy; a cwnd reduction clears epoch_start and forces a recalculation.
        if !(self.epoch_start.is_some() && jiffies == self.last_time) {
            self.last_cwnd = cwnd;
            self.last_time = jiffies;
            if self.epoch_start.is_none() {
                self.epoch_start = Some(jiffies);
                self.ack_cnt = acked;
                self.tcp_cwnd = cwnd;
                if self.last_max_cwnd <= cwnd {
                    self.bic_k = 0;
                    self.origin_point = cwnd;
                } else {
                    self.bic_k = icbrt(self.cube_factor.wrapping_mul((self.last_max_cwnd - cwnd) as u64));
                    self.origin_point = self.last_max_cwnd;
                }
            }
            // t in 2^-10 s: jiffies since the epoch began plus delay_min (rounded up to jiffies).
            let elapsed = jiffies.wrapping_sub(self.epoch_start.unwrap()) as u32 as i32 as i64 as u64;
            let t = (elapsed.wrapping_add(self.usecs_to_jiffies(self.delay_min)) << BICTCP_HZ) / self.hz;
            let offs = if t < self.bic_k { self.bic_k - t } else { t - self.bic_k };
            let delta = (self.cube_rtt_scale.wrapping_mul(offs).wrapping_mul(offs).wrapping_mul(offs)
                >> (10 + 3 * BICTCP_HZ)) as u32;
            let target = if t < self.bic_k {
                self.origin_point.wrapping_sub(delta)
            } else {
                self.origin_point.wrapping_add(delta)
            };
            self.cnt = if target > cwnd { cwnd / (target - cwnd) } else { 100u32.wrapping_mul(cwnd) };
            // Before the first loss, grow at least 5 % per RTT.
            if self.last_max_cwnd == 0 && self.cnt > 20 {
                self.cnt = 20;
            }
        }
        if self.p.tcp_friendliness != 0.0 {
            let delta = cwnd.wrapping_mul(self.beta_scale) >> 3;
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

    /// `hystart_ack_delay`: up to 1 ms for 4 GSO bursts at the pacing rate.
    fn hystart_ack_delay(info: &ConnInfo) -> u32 {
        // tcp_update_pacing_rate: mss * max(cwnd, packets_out) / srtt, x2 in slow start
        // below ssthresh / 2, else x1.2.
        if info.srtt_ns <= 0 {
            return 0;
        }
        let ratio = if info.cwnd < info.ssthresh / 2 { 2.0 } else { 1.2 };
        let rate = ratio * info.mss as f64 * info.cwnd.max(info.packets_out) as f64 * 1e9 / info.srtt_ns as f64;
        if rate <= 0.0 {
            return 0;
        }
        ((GSO_MAX_SIZE * 4 * 1_000_000) as f64 / rate).min(1000.0) as u32
    }

    fn hystart_update(&mut self, info: &ConnInfo, w: &mut Window, delay: u32) {
        if info.snd_una > self.end_seq {
            self.hystart_reset(info);
        }
        if (w.cwnd as f64) < self.p.hystart_low_window {
            return;
        }
        let detect = self.p.hystart_detect as u32;
        if detect & 1 != 0 {
            let now = us(info.now);
            if now.wrapping_sub(self.last_ack) as i64 <= self.p.hystart_ack_delta_us as i64 {
                self.last_ack = now;
                let mut threshold = self.delay_min as u64 + Self::hystart_ack_delay(info) as u64;
                if !info.paced {
                    threshold >>= 1;
                }
                if now.saturating_sub(self.round_start) > threshold {
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
                let thresh = (self.delay_min >> 3).clamp(HYSTART_DELAY_MIN_US, HYSTART_DELAY_MAX_US);
                if self.curr_rtt > self.delay_min.saturating_add(thresh) {
                    self.found = true;
                    w.ssthresh = w.cwnd;
                }
            }
        }
    }

    pub fn w_max(&self) -> u32 {
        self.last_max_cwnd
    }

    /// K in seconds.
    pub fn k_seconds(&self) -> f64 {
        self.bic_k as f64 / 1024.0
    }

    /// The cnt last computed by `bictcp_update`.
    pub fn cnt(&self) -> u32 {
        self.cnt
    }

    /// delay_min in µs.
    pub fn delay_min_us(&self) -> u32 {
        self.delay_min
    }
}

/// The µs clock `tcp_mstamp` HyStart reads.
fn us(now: Nanos) -> u64 {
    (now.max(0) / 1000) as u64
}

impl CongestionControl for Cubic {
    fn name(&self) -> &'static str {
        "cubic"
    }

    /// `cubictcp_init`.
    fn init(&mut self, info: &ConnInfo, _w: &mut Window) {
        self.reset();
        if self.p.hystart != 0.0 {
            self.hystart_reset(info);
        }
    }

    /// `cubictcp_recalc_ssthresh`.
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

    /// `cubictcp_cong_avoid`.
    fn cong_avoid(&mut self, info: &ConnInfo, w: &mut Window, acked: u32) {
        let acked = w.slow_start_if_cwnd_limited(info, acked);
        if acked == 0 {
            return;
        }
        self.update(info, w.cwnd, acked);
        w.cong_avoid_ai(self.cnt, acked);
    }

    /// `cubictcp_state`.
    fn set_state(&mut self, info: &ConnInfo, _w: &mut Window, new: CaState) {
        if new == CaState::Loss {
            self.reset();
            self.hystart_reset(info);
        }
    }

    /// `cubictcp_cwnd_event`: after idle the epoch shifts so the cubic curve does not jump.
    fn cwnd_event(&mut self, info: &ConnInfo, _w: &mut Window, ev: CaEvent) {
        if ev == CaEvent::TxStart {
            let now = self.jiffies(info, info.now);
            let delta = now as i64 - self.jiffies(info, info.last_send_ns) as i64;
            if let Some(start) = self.epoch_start {
                if delta > 0 {
                    self.epoch_start = Some((start + delta as u64).min(now));
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
            if (self.jiffies(info, info.now) as i64 - start as i64) < self.hz as i64 {
                return;
            }
        }
        let delay = ((sample.rtt_ns / 1000) as u32).max(1);
        if self.delay_min == 0 || self.delay_min > delay {
            self.delay_min = delay;
        }
        if !self.found && w.in_slow_start() && self.p.hystart != 0.0 {
            self.hystart_update(info, w, delay);
        }
    }

    fn telemetry_keys(&self) -> &'static [&'static str] {
        &["w_max_pkts", "k_s"]
    }

    fn telemetry(&self, out: &mut Vec<f64>) {
        out.push(self.last_max_cwnd as f64);
        out.push(self.k_seconds());
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn integer_cube_root() {
        for a in [0u64, 1, 7, 8, 26, 27, 1000, 999, 1 << 40, u64::MAX] {
            let x = icbrt(a);
            assert!(x * x * x <= a || x == 0);
            assert!((x + 1).checked_pow(3).is_none_or(|c| c > a), "{a}: {x}");
        }
    }

    pub(crate) fn info(now: Nanos, w: &Window) -> ConnInfo {
        ConnInfo {
            now,
            mss: 1448,
            srtt_ns: 100_000_000,
            min_rtt_ns: 100_000_000,
            packets_in_flight: w.cwnd,
            delivered: 0,
            delivered_ce: 0,
            ecn: false,
            lost: 0,
            sacked_out: 0,
            lost_out: 0,
            retrans_out: 0,
            is_cwnd_limited: true,
            app_limited: 0,
            ca_state: CaState::Open,
            cwnd: w.cwnd,
            ssthresh: w.ssthresh,
            initial_cwnd: 10,
            packets_out: w.cwnd,
            snd_nxt: 0,
            snd_una: 0,
            last_send_ns: now,
            paced: false,
            delivered_mstamp_ns: now,
            wstamp_ns: now,
            sk_pacing_rate: u64::MAX,
            max_pacing_rate: u64::MAX,
            ticks: Default::default(),
        }
    }

    /// Drives an ACK clock: every RTT, cwnd packets are ACKed evenly spread, `per_ack` per
    /// ACK; returns (time s, cwnd counting the fraction held in snd_cwnd_cnt) after each ACK.
    fn ack_clock(cc: &mut Cubic, w: &mut Window, rtt: Nanos, until: Nanos, per_ack: u32) -> Vec<(f64, f64)> {
        let mut out = vec![];
        let mut now = 0;
        while now < until {
            let acks = (w.cwnd / per_ack).max(1);
            let gap = rtt / acks as Nanos;
            for _ in 0..acks {
                now += gap;
                let i = info(now, w);
                cc.pkts_acked(&i, w, &AckSample { pkts_acked: per_ack, rtt_ns: rtt, in_flight: w.cwnd });
                cc.cong_avoid(&i, w, per_ack);
                out.push((now as f64 / 1e9, w.cwnd as f64 + (w.cwnd_cnt as f64 / cc.cnt.max(1) as f64).min(1.0)));
            }
        }
        out
    }

    /// After a loss at W_max the window (with the fraction accumulated in snd_cwnd_cnt) follows
    /// W(t) = C (t - K)^3 + W_max, t from the epoch start: within half a packet on average and
    /// two at worst, with jiffies at HZ = 250 and 1000, with and without delayed ACKs. The
    /// worst case is Linux's own arithmetic: the target is rounded to whole packets and cnt is
    /// kept for up to HZ/32 jiffies while cwnd does not change.
    #[test]
    fn window_follows_the_cubic_closed_form_after_a_loss() {
        for hz in [250.0, 1000.0] {
            for per_ack in [1, 2] {
                let rtt = 100_000_000;
                let w_max = 400u32;
                let mut p = CubicParams::default();
                p.hz = hz;
                p.fast_convergence = 0.0;
                let mut cc = Cubic::new(p);
                let mut w = Window { cwnd: w_max, ssthresh: u32::MAX, pacing_rate: None, cwnd_cnt: 0, set_app_limited: false };
                cc.init(&info(0, &w), &mut w);
                cc.delay_min = (rtt / 1000) as u32;
                let ss = cc.ssthresh(&info(0, &w), &w);
                assert_eq!(ss, w_max * 717 / 1024);
                w.cwnd = ss;
                w.ssthresh = ss;
                let trace = ack_clock(&mut cc, &mut w, rtt, 15_000_000_000, per_ack);
                // C = bic_scale * 10 / 1024 = 0.4004 packets/s^3.
                let c = 410.0 / 1024.0;
                let k = ((w_max - ss) as f64 / c).cbrt();
                assert!((cc.k_seconds() - k).abs() < 0.002, "K {} vs {k}", cc.k_seconds());
                let mut worst: f64 = 0.0;
                let (mut sum, mut n) = (0.0, 0);
                for &(t, cwnd) in trace.iter().filter(|(t, _)| *t > 0.3) {
                    let err = (cwnd - (c * (t - k).powi(3) + w_max as f64)).abs();
                    worst = worst.max(err);
                    sum += err;
                    n += 1;
                }
                let mean = sum / n as f64;
                println!("HZ {hz}, {per_ack} pkt/ACK: K {k:.3} s, |cwnd - W(t)| mean {mean:.2}, max {worst:.2} packets");
                assert!(mean <= 0.5, "HZ {hz}, {per_ack}/ACK: cwnd off the cubic curve by {mean:.2} packets on average");
                assert!(worst <= 2.0, "HZ {hz}, {per_ack}/ACK: cwnd off the cubic curve by up to {worst:.2} packets");
            }
        }
    }

    /// `bictcp_reset` on an RTO clears delay_min and HyStart's `found`, as Linux's memset does.
    #[test]
    fn rto_reset_clears_delay_min() {
        let mut cc = Cubic::new(CubicParams::default());
        let mut w = Window { cwnd: 50, ssthresh: 30, pacing_rate: None, cwnd_cnt: 0, set_app_limited: false };
        cc.init(&info(0, &w), &mut w);
        cc.pkts_acked(&info(0, &w), &mut w, &AckSample { pkts_acked: 1, rtt_ns: 30_000_000, in_flight: 50 });
        assert_eq!(cc.delay_min_us(), 30_000);
        cc.found = true;
        cc.ssthresh(&info(0, &w), &w);
        assert_eq!(cc.delay_min_us(), 30_000, "a fast-recovery ssthresh keeps delay_min");
        cc.set_state(&info(0, &w), &mut w, CaState::Loss);
        assert_eq!(cc.delay_min_us(), 0);
        assert!(!cc.found);
        assert_eq!(cc.w_max(), 0);
    }

    /// Before the first loss (W_max = 0) growth is at least cwnd/20 per RTT.
    #[test]
    fn cnt_is_capped_at_20_before_the_first_loss() {
        let mut cc = Cubic::new(CubicParams::default());
        let mut w = Window { cwnd: 200, ssthresh: 200, pacing_rate: None, cwnd_cnt: 0, set_app_limited: false };
        cc.init(&info(0, &w), &mut w);
        let _ = ack_clock(&mut cc, &mut w, 100_000_000, 100_000_000, 1);
        assert!(cc.cnt() <= 20, "cnt {}", cc.cnt());
        assert!((209..=211).contains(&w.cwnd), "cwnd {} after one RTT from 200", w.cwnd);
    }
}
