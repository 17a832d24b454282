//! The BBR family: BBRv1 ([`v1`], Linux `net/ipv4/tcp_bbr.c`) and BBRv3 ([`v3`], the google/bbr
//! `v3` branch's `tcp_bbr.c`, cross-checked against draft-ietf-ccwg-bbr), on one shared model.
//!
//! Both versions keep Linux's fixed-point units (bandwidth in packets per microsecond << 24,
//! gains in 1/256) and the same skeleton per ACK: count packet-timed rounds, sample the
//! delivery rate, estimate ACK aggregation, run the state checks (STARTUP's full pipe, DRAIN,
//! PROBE_BW), renew min_rtt and schedule PROBE_RTT, then set the gains, the pacing rate and
//! cwnd. v3 adds bounds on rate and inflight from loss and ECN and replaces v1's eight-phase
//! gain cycle with four PROBE_BW phases. What both do alike is here, once, under Linux's names:
//! - units and the `bbr_*` arithmetic: `rate_bytes_per_sec`, `bdp_packets`,
//!   `packets_in_net_at_edt`, `initial_bw`;
//! - the filters: `TwoSlotMax` (v3's `bw_hi`, both versions' `extra_acked`), `MinRtt` (the
//!   windowed min RTT) and the ACK-aggregation estimate `AckAggregation` (BBRv1's bandwidth
//!   filter is Linux's `lib/win_minmax.c`, [`super::minmax`]);
//! - PROBE_RTT's hold (`ProbeRttHold`);
//! - `Core`: the state both versions keep and the steps both take alike (round counting,
//!   full-pipe detection, PROBE_RTT entry, hold and exit, gains, pacing rate, saved cwnd, cwnd
//!   growth, restart from idle);
//! - `Version`: what each version decides for itself (its bandwidth estimate, TSO goal,
//!   quantization budget, aggregation allowance and PROBE_RTT cwnd), and the quantities derived
//!   from those alike (`bbr_inflight`, `bbr_packets_in_net_at_edt`, the cwnd target);
//! - the parameters both versions take (`bbr_params!`) and the `CongestionControl` items both
//!   have alike (`family_items!`).
//!
//! The versions: `v1/mod.rs` is BBRv1 and `v1/proposals.rs` the thesis' proposals on it (BBR
//! Shallow, the adaptive inflight cap, the stable RTprop estimator); `v3/mod.rs` is BBRv3 (its
//! state, control and `bbr_main`), `v3/signals.rs` its congestion signals and the bounds they
//! set, and `v3/startup.rs`, `v3/drain.rs`, `v3/probe_bw.rs`, `v3/probe_rtt.rs` its phases. Each
//! version's module documentation cites the source it follows, its order of work per ACK and
//! its deviations.

use super::{CaEvent, CaState, ConnInfo, RateSample, Window};
use crate::jiffies::{msecs_to_jiffies, CONFIG_HZ};
use crate::rng::SimRng;
use crate::tcp::tso;
use crate::time::Nanos;

/// Declares a BBR version's parameters through [`crate::cc_params!`]: the version's own, then
/// those every version takes, with the same names, meanings, defaults and ranges (and
/// `family()`, what [`Core`] reads of them).
macro_rules! bbr_params {
    ($(#[$m:meta])* pub struct $name:ident { $($own:tt)* }) => {
        crate::cc_params! {
            $(#[$m])*
            pub struct $name {
                $($own)*
                /// PROBE_BW cwnd gain (bbr_cwnd_gain); in BBRv1, 1.5 is the thesis' BBR Shallow.
                cwnd_gain: 2.0, 0.5, 10.0;
                /// Bandwidth growth that counts as "still growing" (bbr_full_bw_thresh).
                full_bw_thresh: 1.25, 1.0, 4.0;
                /// Rounds without such growth before the pipe counts as full (bbr_full_bw_cnt).
                full_bw_cnt: 3.0, 1.0, 3.0;
                /// Gain on the ACK-aggregation allowance (bbr_extra_acked_gain); 0 disables it.
                extra_acked_gain: 1.0, 0.0, 4.0;
                /// Rounds per ACK-aggregation filter slot (bbr_extra_acked_win_rtts; in BBRv3 after
                /// Startup; draft BBRExtraAckedFilterLen 10).
                extra_acked_win_rtts: 5.0, 1.0, 31.0;
                /// Time held at the PROBE_RTT cwnd, seconds (bbr_probe_rtt_mode_ms).
                probe_rtt_duration: 0.2, 0.0, 10.0;
                /// Minimum cwnd, packets (bbr_cwnd_min_target); BBRv1's PROBE_RTT cwnd.
                cwnd_min_target: 4.0, 1.0, 1000.0;
                /// Pacing below the estimate, percent (bbr_pacing_margin_percent).
                pacing_margin_percent: 1.0, 0.0, 50.0;
                /// Keep the version's TSO quantization budget in the cwnd target (1) or not (0).
                tso_budget: 1.0, 0.0, 1.0;
            }
        }

        impl $name {
            /// What the family's shared core reads of these parameters.
            fn family(&self) -> crate::cc::bbr::Family {
                crate::cc::bbr::Family {
                    extra_acked_gain: self.extra_acked_gain,
                    full_bw_thresh: self.full_bw_thresh,
                    full_bw_cnt: self.full_bw_cnt,
                    probe_rtt_duration: self.probe_rtt_duration,
                    cwnd_min_target: self.cwnd_min_target,
                    pacing_margin_percent: self.pacing_margin_percent,
                }
            }
        }
    };
}

/// The [`CongestionControl`](super::CongestionControl) items every BBR version has alike: its
/// random stream goes to the [`Core`], it sets cwnd itself and paces, and `bbr_cwnd_event`
/// ([`Core::cwnd_event`]) ends in the version's own `check_probe_rtt_done`.
macro_rules! family_items {
    () => {
        fn seed(&mut self, rng: crate::rng::SimRng) {
            self.core.rng = rng;
        }

        fn controls_cwnd(&self) -> bool {
            true
        }

        fn wants_pacing(&self) -> bool {
            true
        }

        /// `bbr_cwnd_event`.
        fn cwnd_event(&mut self, info: &crate::cc::ConnInfo, w: &mut crate::cc::Window, ev: crate::cc::CaEvent) {
            if self.core.cwnd_event(info, w, ev, self.bw()) {
                self.check_probe_rtt_done(info, w);
            }
        }
    };
}

pub mod v1;
pub mod v3;

pub use v1::{Bbr, BbrParams};

/// Bandwidth unit: packets per microsecond << BW_SCALE.
const BW_SCALE: u32 = 24;
const BW_UNIT: u64 = 1 << BW_SCALE;
/// Gains are fractions of BBR_UNIT.
const BBR_SCALE: u32 = 8;
const BBR_UNIT: u32 = 1 << BBR_SCALE;
/// TCP_INIT_CWND: the BDP before any RTT sample (BBRv1; v3 remembers the flow's own).
const TCP_INIT_CWND: u32 = 10;
/// Largest TSO burst BBR budgets for (GSO_LEGACY_MAX_SIZE - 1 - MAX_TCP_HEADER).
const GSO_MAX_BYTES: u64 = tso::GSO_LEGACY_MAX_SIZE - 1 - tso::MAX_TCP_HEADER;
/// Restart the ACK-aggregation epoch after this many packets (bbr_ack_epoch_acked_reset_thresh).
const ACK_EPOCH_ACKED_RESET_THRESH: u32 = 1 << 20;
/// Cap on the aggregation allowance, in time at the estimated bandwidth (bbr_extra_acked_max_us).
const EXTRA_ACKED_MAX_US: u64 = 100_000;

/// Linux `enum bbr_mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Startup,
    Drain,
    ProbeBw,
    ProbeRtt,
}

impl Mode {
    #[inline]
    pub fn name(self) -> &'static str {
        match self {
            Mode::Startup => "STARTUP",
            Mode::Drain => "DRAIN",
            Mode::ProbeBw => "PROBE_BW",
            Mode::ProbeRtt => "PROBE_RTT",
        }
    }
}

/// A real gain as a fraction of BBR_UNIT.
#[inline]
fn to_unit(x: f64) -> u32 {
    (x * BBR_UNIT as f64).round() as u32
}

/// `bbr_rate_bytes_per_sec`: a bandwidth (packets/us << BW_SCALE) times a gain, less the
/// pacing margin, in bytes per second.
#[inline]
fn rate_bytes_per_sec(rate: u64, mss: u32, gain: u32, margin_percent: f64) -> u64 {
    let margin = (100.0 - margin_percent) / 100.0;
    let r = (rate as u128 * mss as u128 * gain as u128) >> BBR_SCALE;
    // The conversions go through 64 bits when the values fit: the same f64 and the same
    // truncated integer, without the 128-bit conversion routines (once per ACK).
    let x = match u64::try_from(r) {
        Ok(r64) => r64 as f64,
        Err(_) => r as f64,
    } * 1e6 * margin;
    let r = if x < 18_446_744_073_709_551_616.0 { x as u64 as u128 } else { x as u128 };
    (r >> BW_SCALE) as u64
}

/// The arithmetic of `bbr_bdp`: ceil(bw * min_rtt * gain) in packets, rounded up so that a
/// low estimate cannot feed on itself.
#[inline]
fn bdp_packets(bw: u64, min_rtt_us: u32, gain: u32) -> u32 {
    let w = bw as u128 * min_rtt_us as u128;
    ((((w * gain as u128) >> BBR_SCALE) + BW_UNIT as u128 - 1) / BW_UNIT as u128) as u32
}

/// `bbr_packets_in_net_at_edt`: packets in flight at the next departure time, less what the
/// path delivers at `bw` until then; `edt_skb` counts the packet leaving at that time when
/// inflight is rising.
#[inline]
fn packets_in_net_at_edt(info: &ConnInfo, inflight_now: u32, bw: u64, edt_skb: u32) -> u32 {
    let interval_us = ((info.wstamp_ns - info.now).max(0) / 1000) as u64;
    let interval_delivered = ((bw as u128 * interval_us as u128) >> BW_SCALE) as u64;
    (inflight_now as u64 + edt_skb as u64).saturating_sub(interval_delivered) as u32
}

/// The bandwidth `bbr_init_pacing_rate_from_rtt` starts pacing from: cwnd per srtt, or per
/// 1 ms before any RTT sample.
#[inline]
fn initial_bw(info: &ConnInfo, cwnd: u32) -> u64 {
    let rtt_us = if info.srtt_ns > 0 { ((info.srtt_ns / 1000) as u64).max(1) } else { 1000 };
    cwnd as u64 * BW_UNIT / rtt_us
}

/// A max filter over two windows, the current one and the one before it: v3's `bw_hi[2]` (a
/// window per PROBE_BW cycle) and the `extra_acked[2]` of both versions (a window per few
/// rounds). Advancing starts a new, empty current window and forgets the older one.
#[derive(Debug, Clone, Copy, Default)]
struct TwoSlotMax<T> {
    slots: [T; 2],
    /// Which slot is the current window.
    cur: bool,
}

impl<T: Copy + Ord + Default> TwoSlotMax<T> {
    /// The max over both windows.
    #[inline]
    fn get(&self) -> T {
        self.slots[0].max(self.slots[1])
    }

    /// The current window's max.
    #[inline]
    fn current(&self) -> T {
        self.slots[self.cur as usize]
    }

    /// A sample, into the current window.
    #[inline]
    fn update(&mut self, v: T) {
        let slot = &mut self.slots[self.cur as usize];
        *slot = (*slot).max(v);
    }

    /// The current window becomes the older one, and a new one starts empty.
    #[inline]
    fn advance(&mut self) {
        self.cur = !self.cur;
        self.slots[self.cur as usize] = T::default();
    }
}

/// A windowed min RTT, as `bbr_update_min_rtt` keeps it: Linux's `min_rtt_us` and
/// `min_rtt_stamp` (jiffies), and v3's `probe_rtt_min_us` and `probe_rtt_min_stamp`.
#[derive(Debug, Clone, Copy)]
struct MinRtt {
    us: u32,
    /// Jiffies when `us` was last renewed.
    stamp: u64,
}

impl MinRtt {
    /// No sample yet (Linux ~0U).
    const NONE: MinRtt = MinRtt { us: u32::MAX, stamp: 0 };

    /// `bbr_init`: the handshake's RTT, if there was one, stamped now.
    #[inline]
    fn start(info: &ConnInfo) -> MinRtt {
        let us = if info.min_rtt_ns > 0 { (info.min_rtt_ns / 1000) as u32 } else { u32::MAX };
        MinRtt { us, stamp: info.ticks.jiffies(info.now, CONFIG_HZ) }
    }

    /// Whether `win_j` jiffies have passed since the last renewal (`after()`).
    #[inline]
    fn expired(&self, now_j: u64, win_j: u64) -> bool {
        now_j > self.stamp + win_j
    }

    /// One ACK's RTT sample. It renews the estimate only if strictly lower, or once the window
    /// expired and the ACK was not delayed: Linux has compared with `<` since v5.10 (commit
    /// 1b9e2a8c99a5, "tcp: only postpone PROBE_RTT if RTT is < current min_rtt estimate");
    /// `<=` let equal samples postpone PROBE_RTT forever.
    #[inline]
    fn update(&mut self, now_j: u64, expired: bool, rs: &RateSample) {
        if rs.rtt_ns < 0 {
            return;
        }
        let rtt_us = (rs.rtt_ns / 1000) as u32;
        if rtt_us < self.us || (expired && !rs.is_ack_delayed) {
            self.us = rtt_us;
            self.stamp = now_j;
        }
    }

    /// The estimate in ns, if any.
    #[inline]
    fn ns(&self) -> Option<Nanos> {
        (self.us != u32::MAX).then_some(self.us as Nanos * 1000)
    }
}

/// PROBE_RTT's hold (the tail of `bbr_update_min_rtt` and the test of
/// `bbr_check_probe_rtt_done`): once the flight is down to the PROBE_RTT cwnd, stay for a
/// given time and until one more round has ended.
#[derive(Debug, Clone, Copy, Default)]
struct ProbeRttHold {
    /// `probe_rtt_done_stamp`, jiffies.
    done_stamp: Option<u64>,
    round_done: bool,
}

impl ProbeRttHold {
    /// On entering PROBE_RTT: the hold starts once the flight is low enough.
    #[inline]
    fn restart(&mut self) {
        self.done_stamp = None;
    }

    /// One ACK in PROBE_RTT; true once both the time and the round have passed. When the flight
    /// first reaches `target`, the timer starts and so does a new round (`next_rtt_delivered`).
    /// `hold_j` is the hold in jiffies (`msecs_to_jiffies(bbr_probe_rtt_mode_ms)`).
    #[inline]
    fn on_ack(&mut self, info: &ConnInfo, target: u32, hold_j: u64, round_start: bool, next_rtt_delivered: &mut u64) -> bool {
        if self.done_stamp.is_none() && info.packets_in_flight <= target {
            self.done_stamp = Some(info.ticks.jiffies(info.now, CONFIG_HZ) + hold_j);
            self.round_done = false;
            *next_rtt_delivered = info.delivered;
            return false;
        }
        if self.done_stamp.is_some() && round_start {
            self.round_done = true;
        }
        self.round_done && self.time_passed(info)
    }

    /// Whether the hold time has passed (`after(tcp_jiffies32, probe_rtt_done_stamp)`).
    #[inline]
    fn time_passed(&self, info: &ConnInfo) -> bool {
        matches!(self.done_stamp, Some(t) if info.ticks.jiffies(info.now, CONFIG_HZ) > t)
    }
}

/// ACK-aggregation estimator (`bbr_update_ack_aggregation`, `bbr_extra_acked`): the most data
/// ACKed beyond bw x elapsed time within an epoch, max-filtered over two slots of a given
/// number of rounds each (so over the last k to 2k rounds).
#[derive(Debug, Clone, Default)]
struct AckAggregation {
    epoch_mstamp: Nanos,
    epoch_acked: u32,
    extra_acked: TwoSlotMax<u32>,
    win_rtts: u32,
}

impl AckAggregation {
    /// Starts a new epoch at `now` (connection start, restart from idle).
    #[inline]
    fn restart_epoch(&mut self, now: Nanos) {
        self.epoch_mstamp = now;
        self.epoch_acked = 0;
    }

    /// One valid ACK of `acked` packets: a round start ages the filter once `win_rtts_thresh`
    /// rounds have passed; `bw` is the estimate the expected delivery is computed from.
    #[inline]
    fn update(&mut self, round_start: bool, win_rtts_thresh: u32, acked: u32, delivered_mstamp: Nanos, bw: u64, cwnd: u32) {
        if round_start {
            self.win_rtts = (self.win_rtts + 1).min(0x1F);
            if self.win_rtts >= win_rtts_thresh {
                self.win_rtts = 0;
                self.extra_acked.advance();
            }
        }
        let epoch_us = ((delivered_mstamp - self.epoch_mstamp) / 1000) as u64;
        let mut expected = (bw as u128 * epoch_us as u128 / BW_UNIT as u128) as u32;
        if self.epoch_acked <= expected || self.epoch_acked + acked >= ACK_EPOCH_ACKED_RESET_THRESH {
            self.epoch_acked = 0;
            self.epoch_mstamp = delivered_mstamp;
            expected = 0;
        }
        self.epoch_acked = (self.epoch_acked + acked).min(0xFFFFF);
        self.extra_acked.update((self.epoch_acked - expected).min(cwnd));
    }

    /// The arithmetic of `bbr_ack_aggregation_cwnd`: `gain` (BBR_UNIT) x the recent excess, at
    /// most what `bw` delivers in bbr_extra_acked_max_us.
    #[inline]
    fn cwnd(&self, bw: u64, gain: u32) -> u32 {
        let max_aggr = (bw as u128 * EXTRA_ACKED_MAX_US as u128 / BW_UNIT as u128) as u32;
        ((gain * self.extra_acked.get()) >> BBR_SCALE).min(max_aggr)
    }
}

/// The parameters every version takes that [`Core`] reads (see [`bbr_params!`]).
struct Family {
    extra_acked_gain: f64,
    full_bw_thresh: f64,
    full_bw_cnt: f64,
    probe_rtt_duration: f64,
    cwnd_min_target: f64,
    pacing_margin_percent: f64,
}

/// The state both versions keep, under tcp_bbr.c's names, and the steps both take alike.
struct Core {
    rng: SimRng,
    mss: u32,
    mode: Mode,
    /// STARTUP's pacing and cwnd gains and DRAIN's pacing gain, in BBR_UNIT (BBRv1:
    /// bbr_high_gain for both of STARTUP's).
    startup_pacing_gain: u32,
    startup_cwnd_gain: u32,
    drain_gain: u32,
    /// The gains in force (`bbr_update_gains`).
    pacing_gain: u32,
    cwnd_gain: u32,
    pacing_margin_percent: f64,
    /// The lowest pacing rate the version sets, bytes per second (v3: 1).
    pacing_rate_floor: u64,
    /// sk_pacing_rate, bytes per second.
    pacing_rate: u64,
    has_seen_rtt: bool,
    next_rtt_delivered: u64,
    round_start: bool,
    /// Packet-timed rounds so far (BBRv1's `rtt_cnt`; telemetry in v3, which keeps no such
    /// counter).
    round_count: u64,
    /// The min_rtt estimate the BDP is computed from, and its window in jiffies
    /// (`bbr_min_rtt_win_sec * HZ`).
    min_rtt: MinRtt,
    min_rtt_win_j: u64,
    probe_rtt: ProbeRttHold,
    /// PROBE_RTT hold, jiffies (`msecs_to_jiffies(bbr_probe_rtt_mode_ms)`); 0 disables PROBE_RTT.
    probe_rtt_mode_j: u64,
    idle_restart: bool,
    cwnd_min_target: u32,
    /// The BDP before any RTT sample: TCP_INIT_CWND (BBRv1), the flow's initial cwnd (v3).
    init_cwnd: u32,
    prior_cwnd: u32,
    prev_ca_state: CaState,
    full_bw: u64,
    full_bw_cnt: u32,
    full_bw_reached: bool,
    full_bw_thresh: u32,
    /// Rounds without growth that mean the pipe is full (bbr_full_bw_cnt).
    full_bw_rounds: u32,
    aggr: AckAggregation,
    /// bbr_extra_acked_gain, BBR_UNIT.
    extra_acked_gain: u32,
    cycle_mstamp: Nanos,
}

impl Core {
    /// A version's core with its STARTUP and DRAIN gains (BBR_UNIT) and min_rtt window
    /// (seconds); gains in force are 0 and pacing is unfloored until the version says otherwise.
    fn new(p: Family, startup_pacing_gain: u32, startup_cwnd_gain: u32, drain_gain: u32, min_rtt_window: f64) -> Core {
        Core {
            rng: SimRng::new(0, 0),
            mss: 1448,
            mode: Mode::Startup,
            startup_pacing_gain,
            startup_cwnd_gain,
            drain_gain,
            pacing_gain: 0,
            cwnd_gain: 0,
            pacing_margin_percent: p.pacing_margin_percent,
            pacing_rate_floor: 0,
            pacing_rate: 0,
            has_seen_rtt: false,
            next_rtt_delivered: 0,
            round_start: false,
            round_count: 0,
            min_rtt: MinRtt::NONE,
            min_rtt_win_j: (min_rtt_window * CONFIG_HZ as f64).round() as u64,
            probe_rtt: ProbeRttHold::default(),
            probe_rtt_mode_j: msecs_to_jiffies((p.probe_rtt_duration * 1e3).round() as u64, CONFIG_HZ),
            idle_restart: false,
            cwnd_min_target: p.cwnd_min_target as u32,
            init_cwnd: TCP_INIT_CWND,
            prior_cwnd: 0,
            prev_ca_state: CaState::Open,
            full_bw: 0,
            full_bw_cnt: 0,
            full_bw_reached: false,
            full_bw_thresh: to_unit(p.full_bw_thresh),
            full_bw_rounds: p.full_bw_cnt as u32,
            aggr: AckAggregation::default(),
            extra_acked_gain: to_unit(p.extra_acked_gain),
            cycle_mstamp: 0,
        }
    }

    /// What `bbr_init` does in both versions: no ssthresh, min_rtt from the handshake, pacing
    /// from the initial cwnd, STARTUP with its gains, a new ACK-aggregation epoch.
    #[inline]
    fn init(&mut self, info: &ConnInfo, w: &mut Window) {
        self.mss = info.mss;
        w.ssthresh = u32::MAX;
        self.min_rtt = MinRtt::start(info);
        self.init_pacing_rate_from_rtt(info, w.cwnd);
        self.mode = Mode::Startup;
        self.aggr.restart_epoch(info.now);
        (self.pacing_gain, self.cwnd_gain) = (self.startup_pacing_gain, self.startup_cwnd_gain);
        w.pacing_rate = Some(self.pacing_rate as f64);
    }

    /// min_rtt estimate in ns, if any.
    #[inline]
    fn min_rtt_ns(&self) -> Option<Nanos> {
        self.min_rtt.ns()
    }

    /// A bandwidth (packets/us << BW_SCALE) in bits per second of payload.
    #[inline]
    fn bw_to_bps(&self, bw: u64) -> f64 {
        bw as f64 * self.mss as f64 * 8.0 * 1e6 / BW_UNIT as f64
    }

    /// `bbr_rate_bytes_per_sec`, at this flow's MSS and pacing margin.
    #[inline]
    fn rate_bytes_per_sec(&self, rate: u64, gain: u32) -> u64 {
        rate_bytes_per_sec(rate, self.mss, gain, self.pacing_margin_percent)
    }

    /// `bbr_bw_to_pacing_rate`: capped at sk_max_pacing_rate.
    #[inline]
    fn bw_to_pacing_rate(&self, info: &ConnInfo, bw: u64, gain: u32) -> u64 {
        self.rate_bytes_per_sec(bw, gain).max(self.pacing_rate_floor).min(info.max_pacing_rate)
    }

    /// `bbr_init_pacing_rate_from_rtt`: STARTUP's gain x cwnd / srtt (1 ms before any sample).
    #[inline]
    fn init_pacing_rate_from_rtt(&mut self, info: &ConnInfo, cwnd: u32) {
        self.has_seen_rtt |= info.srtt_ns > 0;
        self.pacing_rate = self.bw_to_pacing_rate(info, initial_bw(info, cwnd), self.startup_pacing_gain);
    }

    /// `bbr_set_pacing_rate`: never lowered before the pipe is full.
    #[inline]
    fn set_pacing_rate(&mut self, info: &ConnInfo, w: &mut Window, bw: u64, gain: u32) {
        let rate = self.bw_to_pacing_rate(info, bw, gain);
        if !self.has_seen_rtt && info.srtt_ns > 0 {
            self.init_pacing_rate_from_rtt(info, w.cwnd);
        }
        if self.full_bw_reached || rate > self.pacing_rate {
            self.pacing_rate = rate;
        }
        w.pacing_rate = Some(self.pacing_rate as f64);
    }

    /// `bbr_save_cwnd`: the cwnd to restore after recovery or PROBE_RTT. Outside both the
    /// current one is good; inside, the larger of it and the one saved before.
    #[inline]
    fn save_cwnd(&mut self, cwnd: u32) {
        let outside = matches!(self.prev_ca_state, CaState::Open | CaState::Disorder | CaState::Cwr);
        self.prior_cwnd = if outside && self.mode != Mode::ProbeRtt { cwnd } else { self.prior_cwnd.max(cwnd) };
    }

    /// `bbr_bdp`: ceil(bw * min_rtt * gain) in packets; the initial cwnd before any RTT sample.
    #[inline]
    fn bdp(&self, bw: u64, gain: u32) -> u32 {
        if self.min_rtt.us == u32::MAX {
            return self.init_cwnd;
        }
        bdp_packets(bw, self.min_rtt.us, gain)
    }

    /// `bbr_update_round_start` (BBRv1: the head of `bbr_update_bw`): a round ends when the
    /// packet this ACK samples was sent after the last round ended; `valid` is the version's
    /// test of the sample.
    #[inline]
    fn update_round_start(&mut self, info: &ConnInfo, rs: &RateSample, valid: bool) {
        self.round_start = valid && rs.prior_delivered >= self.next_rtt_delivered;
        if self.round_start {
            self.next_rtt_delivered = info.delivered;
            self.round_count += 1;
        }
    }

    /// The growth test of `bbr_check_full_bw_reached`: a bandwidth of at least
    /// full_bw_thresh x full_bw is still growth, and restarts the count from it.
    #[inline]
    fn full_bw_grew(&mut self, bw: u64) -> bool {
        let thresh = ((self.full_bw as u128 * self.full_bw_thresh as u128) >> BBR_SCALE) as u64;
        if bw < thresh {
            return false;
        }
        self.full_bw = bw;
        self.full_bw_cnt = 0;
        true
    }

    /// Counts a round without growth; true once there were bbr_full_bw_cnt of them.
    #[inline]
    fn full_bw_stalled(&mut self) -> bool {
        self.full_bw_cnt += 1;
        self.full_bw_cnt >= self.full_bw_rounds
    }

    /// PROBE_RTT entry (`bbr_update_min_rtt`), once the filter that schedules it has expired,
    /// unless PROBE_RTT is off or the flow is restarting from idle: saves cwnd and restarts the
    /// hold. Returns whether it entered.
    #[inline]
    fn enter_probe_rtt(&mut self, expired: bool, cwnd: u32) -> bool {
        if !expired || self.probe_rtt_mode_j == 0 || self.idle_restart || self.mode == Mode::ProbeRtt {
            return false;
        }
        self.mode = Mode::ProbeRtt;
        self.save_cwnd(cwnd);
        self.probe_rtt.restart();
        true
    }

    /// One ACK in PROBE_RTT: the samples at the cut flight are not the path's rate (the flow is
    /// marked app-limited), and the flight is held at `target`. True once the hold is over.
    #[inline]
    fn hold_probe_rtt(&mut self, info: &ConnInfo, w: &mut Window, target: u32) -> bool {
        w.set_app_limited = true;
        self.probe_rtt.on_ack(info, target, self.probe_rtt_mode_j, self.round_start, &mut self.next_rtt_delivered)
    }

    /// The part of `bbr_check_probe_rtt_done` both versions share: once the hold time has
    /// passed, restore the cwnd saved on entry and return true (the version then renews its
    /// PROBE_RTT schedule and leaves).
    #[inline]
    fn probe_rtt_done(&mut self, info: &ConnInfo, w: &mut Window) -> bool {
        if !self.probe_rtt.time_passed(info) {
            return false;
        }
        w.cwnd = w.cwnd.max(self.prior_cwnd);
        true
    }

    /// The end of `bbr_update_min_rtt`: an ACK that delivered data ends a restart from idle.
    #[inline]
    fn update_idle_restart(&mut self, rs: &RateSample) {
        if rs.delivered > 0 {
            self.idle_restart = false;
        }
    }

    /// `bbr_update_gains`, with the version's PROBE_BW pair (pacing, cwnd).
    #[inline]
    fn update_gains(&mut self, probe_bw: impl FnOnce() -> (u32, u32)) {
        (self.pacing_gain, self.cwnd_gain) = match self.mode {
            Mode::Startup => (self.startup_pacing_gain, self.startup_cwnd_gain),
            Mode::Drain => (self.drain_gain, self.startup_cwnd_gain),
            Mode::ProbeBw => probe_bw(),
            Mode::ProbeRtt => (BBR_UNIT, BBR_UNIT),
        };
    }

    /// The growth of `bbr_set_cwnd` toward `target` by the `acked` packets: up to the target
    /// once the pipe is full; before, while below it or while `early` (the version's allowance
    /// for a young flow). Never below bbr_cwnd_min_target. Also returns whether cwnd stopped at
    /// its target (v3's fast-path hint).
    #[inline]
    fn grow_cwnd(&self, cwnd: u32, acked: u32, target: u32, early: bool) -> (u32, bool) {
        let (cwnd, at_target) = if self.full_bw_reached {
            if cwnd + acked >= target {
                (target, true)
            } else {
                (cwnd + acked, false)
            }
        } else if cwnd < target || early {
            (cwnd + acked, false)
        } else {
            (cwnd, true)
        };
        (cwnd.max(self.cwnd_min_target), at_target)
    }

    /// `bbr_cwnd_event`: restarting from idle (the first send with nothing in flight while
    /// app-limited) starts a new ACK-aggregation epoch and, in PROBE_BW, paces at `bw`. True in
    /// PROBE_RTT, where the version checks whether it is done.
    #[inline]
    fn cwnd_event(&mut self, info: &ConnInfo, w: &mut Window, ev: CaEvent, bw: u64) -> bool {
        if ev != CaEvent::TxStart || info.app_limited == 0 {
            return false;
        }
        self.idle_restart = true;
        self.aggr.restart_epoch(info.now);
        if self.mode == Mode::ProbeBw {
            self.set_pacing_rate(info, w, bw, BBR_UNIT);
        }
        self.mode == Mode::ProbeRtt
    }

    /// The telemetry both versions start with (`btlbw_bps`, `rtprop_ms`, `pacing_gain`,
    /// `cwnd_gain`), `bw` being the estimate in use.
    #[inline]
    fn telemetry(&self, bw: u64, out: &mut Vec<f64>) {
        out.push(self.bw_to_bps(bw));
        out.push(self.min_rtt_ns().map_or(f64::NAN, |n| n as f64 / 1e6));
        out.push(self.pacing_gain as f64 / BBR_UNIT as f64);
        out.push(self.cwnd_gain as f64 / BBR_UNIT as f64);
    }
}

/// What each version decides for itself, and the quantities both derive from those alike.
trait Version {
    fn core(&self) -> &Core;

    /// `bbr_bw`: the bandwidth estimate in use, packets/us << BW_SCALE.
    fn bw(&self) -> u64;

    /// `bbr_tso_segs_goal`.
    fn tso_segs_goal(&self) -> u32;

    /// `bbr_quantization_budget`.
    fn quantization_budget(&self, cwnd: u32) -> u32;

    /// `bbr_ack_aggregation_cwnd`.
    fn ack_aggregation_cwnd(&self) -> u32;

    /// The cwnd PROBE_RTT holds the flight at.
    fn probe_rtt_cwnd(&self) -> u32;

    /// `bbr_inflight`: the BDP at `gain`, with the quantization budget.
    #[inline]
    fn inflight(&self, bw: u64, gain: u32) -> u32 {
        self.quantization_budget(self.core().bdp(bw, gain))
    }

    /// `bbr_packets_in_net_at_edt`, counting a TSO burst at the next departure while pacing
    /// above the estimate.
    #[inline]
    fn packets_in_net_at_edt(&self, info: &ConnInfo, inflight_now: u32) -> u32 {
        let edt_skb = if self.core().pacing_gain > BBR_UNIT { self.tso_segs_goal() } else { 0 };
        packets_in_net_at_edt(info, inflight_now, self.bw(), edt_skb)
    }

    /// The target of `bbr_set_cwnd`: the BDP at `gain` plus the aggregation allowance, with the
    /// quantization budget.
    #[inline]
    fn cwnd_target(&self, bw: u64, gain: u32) -> u32 {
        self.quantization_budget(self.core().bdp(bw, gain) + self.ack_aggregation_cwnd())
    }

    /// The end of `bbr_set_cwnd`: the new cwnd, no more than the PROBE_RTT cwnd in PROBE_RTT.
    #[inline]
    fn set_snd_cwnd(&self, w: &mut Window, cwnd: u32) {
        w.cwnd = cwnd;
        if self.core().mode == Mode::ProbeRtt {
            w.cwnd = w.cwnd.min(self.probe_rtt_cwnd());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::TwoSlotMax;

    #[test]
    fn two_slot_max_spans_the_current_and_the_previous_window() {
        let mut m = TwoSlotMax::<u64>::default();
        m.update(5);
        m.update(3);
        assert_eq!((m.get(), m.current()), (5, 5));
        m.advance();
        m.update(4);
        assert_eq!((m.get(), m.current()), (5, 4), "the older window still counts");
        m.advance();
        assert_eq!((m.get(), m.current()), (4, 0), "two advances forget a window");
        m.advance();
        assert_eq!(m.get(), 0);
    }
}
