//! BBR version 3 as the google/bbr `v3` branch implements it in `net/ipv4/tcp_bbr.c`
//! (BBR_VERSION 3), cross-checked against the IETF's draft-ietf-ccwg-bbr.
//!
//! The model has a long-term upper bound and a short-term lower bound on both the rate and the
//! volume in flight:
//! ```text
//!   max_bw      = max of bw samples over the last 1-2 ProbeBW cycles   (bw_hi in Linux)
//!   bw          = min(max_bw, bw_lo)          bw_lo: cut by beta on each lossy round
//!   min_rtt     = windowed min(rtt, 10 s), refreshed by ProbeRTT every 5 s
//!   pacing      = pacing_gain * bw * (1 - 1 %)
//!   cwnd        = min(cwnd_gain * bw * min_rtt + aggregation + budget,
//!                     inflight_hi (less 15 % headroom in CRUISE / ProbeRTT), inflight_lo)
//! ```
//! States:
//! ```text
//!   STARTUP --(bw plateau 3 rounds, or >= 6 lossy ACKs in a round with > 2 % loss)--> DRAIN
//!   DRAIN --(in-network <= BDP)--> PROBE_BW_DOWN
//!   PROBE_BW: DOWN --(inflight <= min(BDP, inflight_hi - headroom))--> CRUISE
//!             DOWN/CRUISE --(2-3 s, or min(63, BDP) rounds: Reno coexistence)--> REFILL
//!             REFILL --(one round at gain 1)--> UP
//!             UP --(loss > 2 % of tx_in_flight, bw plateau, or back at the last too-high
//!                  inflight_hi)--> DOWN
//!   any --(5 s without a lower RTT)--> PROBE_RTT (cwnd max(4, BDP/2) for >= 200 ms and a
//!   round) --> PROBE_BW_CRUISE (via DOWN) or STARTUP
//! ```
//! Reference choice: the Linux v3 code, not the draft, because it is what runs in deployed
//! kernels and what Google's published v3 measurements used; the draft is the public
//! description of the same state machine. Where they differ in a constant, the constant is a
//! parameter below ([`Bbr3Params`]) with Linux's value as default, and [`Bbr3Params::draft`]
//! holds the draft's. Details the draft words differently are modelled as Linux has them:
//! Startup grows cwnd while below target or below twice the initial window, and the
//! app-limited fast path (`bbr_run_fast_path`, `fast_path = 0` turns it off) is kept. To run the draft's values from a trial file, set `cc = "bbr3"` and
//! `params = { startup_pacing_gain = 2.77, drain_gain = 0.5, drain_max_rounds = 3,
//! probe_down_gain = 0.9, beta = 0.7, loss_thresh = 0.02, inflight_headroom = 0.15,
//! extra_acked_win_rtts = 10, extra_acked_win_rtts_startup = 10 }`.
//!
//! The per-ACK order is Linux's `bbr_main`: round start -> bandwidth sample -> latest delivery
//! signals -> (app-limited fast path) -> model (congestion signals and lower bounds, ACK
//! aggregation, Startup loss exit, full-bw plateau, Drain, ProbeBW phase with upper bounds,
//! min_rtt and ProbeRTT) -> gains -> pacing rate -> cwnd -> inflight_lo/hi caps. Each lost
//! packet also runs `bbr_skb_marked_lost`, which finds the inflight at which the loss rate
//! crossed the threshold (`bbr_inflight_hi_from_lost_skb`, the draft's
//! BBRInflightHiFromLostPacket). Units are Linux's fixed point (bandwidth in packets/us << 24,
//! gains in 1/256), so integer rounding matches the kernel's; the loss threshold, beta and
//! headroom are kept in 1/65536 so that the draft's 0.02/0.7/0.15 stay distinct from Linux's
//! 5/256, 180/256 and 38/256 (Linux's own values give identical results at either scale).
//!
//! Files: this one holds the parameters, the state, the control (gains, pacing, cwnd and its
//! inflight caps) and `bbr_main`; `signals.rs` the per-ACK congestion signals (rounds,
//! bandwidth samples, loss and ECN) and the bounds they set; `startup.rs`, `drain.rs`,
//! `probe_bw.rs` and `probe_rtt.rs` the phases. What BBRv3 does as BBRv1 does (units, filters,
//! PROBE_RTT's hold, pacing, cwnd growth) is the family's shared model ([`super`]).
//!
//! Deviations:
//! - ECN follows v3 (`bbr_update_ecn_alpha`, `bbr_ecn_lower_bounds`, the ECN half of
//!   `bbr_is_inflight_too_high`, the Startup ECN exit and the ECN reprobe), used only when the
//!   flow has `ecn = true` and the `ecn_low` parameter stands for Linux's per-route flag (off
//!   by default, as on a default route), and while min_rtt <= `ecn_max_rtt` (5 ms). The
//!   receiver echoes CE per packet as v3's `bbr_precise_ece_ack` does. No PLB (it rehashes
//!   the path, and the dumbbell has one). TLP does not exist in the transport, so the TLP-repair path
//!   (`bbr_run_loss_probe_recovery`) never runs; undo of spurious recovery is kept but the
//!   transport never calls it.
//! - TSO/GSO trains: v3 sizes them itself through the `tso_segs` hook (`bbr_tso_segs`), and
//!   the quantization budget uses the same arithmetic (`bbr_tso_segs_goal`: max(about 1 ms of
//!   data at the pacing rate plus 64 KB >> (min_rtt / 512 us), 2 segments); cwnd >= max(3
//!   goals, 4), +2 in UP, no rounding to even); `tso_budget = 0` removes the budget (the
//!   trains stay).
//! - The min_rtt and ProbeRTT stamps and the ProbeRTT hold are in jiffies at CONFIG_HZ =
//!   250, as google/bbr keeps them (`tcp_jiffies32`, `msecs_to_jiffies`, `after()`), as in
//!   BBRv1 (see [`super::v1`] and [`crate::jiffies`]).
//! - `drain_max_rounds` (0 = off, as Linux) is the draft's bound on rounds spent in Drain.
//! - The transport reports each packet it marks lost (RACK or RTO) through
//!   [`CongestionControl::skb_marked_lost`] after counting it in `lost`, as google/bbr's
//!   `tcp_mark_skb_lost` does.
//! - The random probe timing (`bbr_pick_probe_wait`: 0 or 1 extra round, 0-1 s extra wait)
//!   draws from the injected per-flow RNG, the only randomness here.

use super::{to_unit, Core, MinRtt, TwoSlotMax, Version, BBR_UNIT, GSO_MAX_BYTES};
use crate::cc::{CaState, CongestionControl, ConnInfo, LostPacket, RateSample, Window};
use crate::jiffies::{msecs_to_jiffies, CONFIG_HZ};
use crate::tcp::tso;
use crate::time::Nanos;

mod drain;
mod probe_bw;
mod probe_rtt;
mod signals;
mod startup;

pub use super::Mode;

/// Fine fixed point for the loss threshold, beta and headroom (Linux uses 1/256).
const FRAC_SCALE: u32 = 16;
const FRAC_UNIT: u64 = 1 << FRAC_SCALE;
/// Largest initial cwnd BBR remembers (its 7-bit init_cwnd field).
const MAX_INIT_CWND: u32 = 0x7F;
/// Saturation of the rounds_since_probe (8 bits), bw_probe_up_rounds (capped at 30) and
/// loss_events_in_round (4 bits) counters.
const MAX_ROUNDS_SINCE_PROBE: u32 = 0xFF;
const MAX_PROBE_UP_ROUNDS: u32 = 30;
const MAX_LOSS_EVENTS: u32 = 0xF;
/// "Not set" for bw_lo, inflight_lo and inflight_hi (Linux ~0U).
const UNSET_BW: u64 = u64::MAX;
const UNSET: u32 = u32::MAX;

bbr_params! {
    /// BBRv3 constants from google/bbr v3 tcp_bbr.c (defaults) as real numbers; each notes the
    /// draft-ietf-ccwg-bbr value where it differs.
    pub struct Bbr3Params {
        /// STARTUP pacing gain, about 4 ln 2 (bbr_startup_pacing_gain = 710/256; draft 2.77).
        startup_pacing_gain: 710.0 / 256.0, 1.0, 10.0;
        /// STARTUP and DRAIN cwnd gain (bbr_startup_cwnd_gain).
        startup_cwnd_gain: 2.0, 1.0, 10.0;
        /// DRAIN pacing gain (bbr_drain_gain = 1/2.885 = 88/256; draft 0.5).
        drain_gain: 88.0 / 256.0, 0.01, 1.0;
        /// Leave DRAIN after this many rounds even if inflight is still high (0 = no bound,
        /// Linux; draft 3).
        drain_max_rounds: 0.0, 0.0, 1000.0;
        /// cwnd gain in PROBE_BW_UP (bbr_cwnd_gain + bbr_bw_probe_cwnd_gain / 4).
        probe_up_cwnd_gain: 2.25, 0.5, 10.0;
        /// PROBE_BW_UP pacing gain (the UP entry of `bbr_pacing_gain`).
        probe_up_gain: 1.25, 1.0, 4.0;
        /// PROBE_BW_DOWN pacing gain (the DOWN entry of `bbr_pacing_gain`, 232/256; draft 0.90).
        probe_down_gain: 232.0 / 256.0, 0.1, 1.0;
        /// Fraction of bw_lo / inflight_lo kept per lossy round and of the target inflight
        /// kept on too much loss (1 - bbr_beta = 180/256 = 0.703; draft BBRBeta 0.7).
        beta: 180.0 / 256.0, 0.0, 1.0;
        /// Loss rate of a probe's flight that means "too high" (bbr_loss_thresh = 5/256;
        /// draft BBRLossThresh 0.02).
        loss_thresh: 5.0 / 256.0, 0.001, 0.5;
        /// Share of inflight_hi left free in CRUISE and PROBE_RTT (bbr_inflight_headroom =
        /// 38/256; draft BBRHeadroom 0.15).
        inflight_headroom: 38.0 / 256.0, 0.0, 0.9;
        /// Lossy ACKs in one Startup recovery round that end Startup (bbr_full_loss_cnt; 0 =
        /// off).
        full_loss_cnt: 6.0, 0.0, 15.0;
        /// Rounds per slot during Startup (Linux 1; the draft uses its one length throughout).
        extra_acked_win_rtts_startup: 1.0, 1.0, 31.0;
        /// min_rtt filter window, seconds (bbr_min_rtt_win_sec).
        min_rtt_window: 10.0, 0.01, 3600.0;
        /// Time without a lower RTT before PROBE_RTT, seconds (bbr_probe_rtt_win_ms).
        probe_rtt_interval: 5.0, 0.01, 3600.0;
        /// PROBE_RTT cwnd as a share of the BDP (bbr_probe_rtt_cwnd_gain).
        probe_rtt_cwnd_gain: 0.5, 0.0, 2.0;
        /// Most rounds between bandwidth probes, for Reno coexistence (bbr_bw_probe_max_rounds).
        bw_probe_max_rounds: 63.0, 1.0, 255.0;
        /// Random head start of the round count: 0 .. this - 1 (bbr_bw_probe_rand_rounds).
        bw_probe_rand_rounds: 2.0, 1.0, 255.0;
        /// Wall-clock wait before a bandwidth probe, seconds (bbr_bw_probe_base_us) ...
        bw_probe_base: 2.0, 0.0, 3600.0;
        /// ... plus a uniform random 0 .. this, seconds (bbr_bw_probe_rand_us).
        bw_probe_rand: 1.0, 0.0, 3600.0;
        /// Linux's app-limited fast path (bbr_fast_path): 1 on, 0 off.
        fast_path: 1.0, 0.0, 1.0;
        /// The route is a shallow-threshold ECN environment (Linux's per-route `ecn_low`,
        /// TCP_ECN_LOW): only then does v3 use ECN (`bbr_can_use_ecn`, which also needs the
        /// flow's `ecn = true`). 0 = off, as on a default route.
        ecn_low: 0.0, 0.0, 1.0;
        /// Use the ECN logic only while min_rtt is at most this, seconds (bbr_ecn_max_rtt_us =
        /// 5000; 0 = any RTT).
        ecn_max_rtt: 0.005, 0.0, 10.0;
        /// EWMA gain of the CE ratio in ecn_alpha (bbr_ecn_alpha_gain = 1/16).
        ecn_alpha_gain: 1.0 / 16.0, 0.0, 1.0;
        /// ecn_alpha at start (bbr_ecn_alpha_init = 1.0).
        ecn_alpha_init: 1.0, 0.0, 1.0;
        /// On an ECN round, inflight_lo is cut to (1 - ecn_factor x ecn_alpha) (bbr_ecn_factor
        /// = 1/3; 0 = no ECN bound).
        ecn_factor: 1.0 / 3.0, 0.0, 1.0;
        /// CE ratio of a sample that means probing went too high (bbr_ecn_thresh = 1/2).
        ecn_thresh: 0.5, 0.0, 1.0;
        /// After a cycle with marks but no loss, the first probe round adds this share of
        /// inflight_hi once marks cease (bbr_ecn_reprobe_gain = 1/2; 0 = off).
        ecn_reprobe_gain: 0.5, 0.0, 1.0;
        /// Startup ends after this many rounds with a CE ratio >= ecn_thresh (bbr_full_ecn_cnt).
        full_ecn_cnt: 2.0, 0.0, 3.0;
    }
}

impl Bbr3Params {
    /// The constants draft-ietf-ccwg-bbr gives where they differ from Linux v3.
    pub fn draft() -> Self {
        Bbr3Params {
            startup_pacing_gain: 2.77,
            drain_gain: 0.5,
            drain_max_rounds: 3.0,
            probe_down_gain: 0.9,
            beta: 0.7,
            loss_thresh: 0.02,
            inflight_headroom: 0.15,
            extra_acked_win_rtts: 10.0,
            extra_acked_win_rtts_startup: 10.0,
            ..Bbr3Params::default()
        }
    }
}

/// PROBE_BW phase (Linux `enum bbr_pacing_gain_phase`; the index into the gain table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Up = 0,
    Down = 1,
    Cruise = 2,
    Refill = 3,
}

/// Mode and phase together, as `bbr_get_phase` reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Startup,
    Drain,
    ProbeBwDown,
    ProbeBwCruise,
    ProbeBwRefill,
    ProbeBwUp,
    ProbeRtt,
}

impl State {
    pub fn name(self) -> &'static str {
        match self {
            State::Startup => "STARTUP",
            State::Drain => "DRAIN",
            State::ProbeBwDown => "PROBE_BW_DOWN",
            State::ProbeBwCruise => "PROBE_BW_CRUISE",
            State::ProbeBwRefill => "PROBE_BW_REFILL",
            State::ProbeBwUp => "PROBE_BW_UP",
            State::ProbeRtt => "PROBE_RTT",
        }
    }
}

/// What the incoming ACKs say about bandwidth probing (Linux `enum bbr_ack_phase`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AckPhase {
    Init,
    Refilling,
    ProbeStarting,
    ProbeFeedback,
    ProbeStopping,
}

fn to_frac(x: f64) -> u64 {
    (x * FRAC_UNIT as f64).round() as u64
}

pub struct Bbr3 {
    p: Bbr3Params,
    /// What BBRv3 keeps as BBRv1 does: mode, rounds, min_rtt and PROBE_RTT, full pipe, gains,
    /// pacing, saved cwnd, ACK aggregation.
    core: Core,
    cwnd_gain_probe_bw: u32,
    cwnd_gain_probe_up: u32,
    /// Pacing gains indexed by [`Phase`].
    pacing_gains: [u32; 4],
    probe_rtt_cwnd_gain: u32,
    /// bbr_ecn_thresh, BBR_UNIT.
    ecn_thresh: u32,
    /// beta, loss_thresh and headroom in 1/FRAC_UNIT.
    beta: u64,
    loss_thresh: u64,
    headroom: u64,
    /// The window of the min filter that schedules PROBE_RTT, jiffies
    /// (`msecs_to_jiffies(bbr_probe_rtt_win_ms)`).
    probe_rtt_win_j: u64,

    pub cycle_idx: Phase,
    /// The 5 s min filter that schedules PROBE_RTT (`probe_rtt_min_us`, `probe_rtt_min_stamp`);
    /// the 10 s one, min_rtt, is the core's.
    probe_rtt_min: MinRtt,
    bw_probe_up_rounds: u32,
    try_fast_path: bool,
    full_bw_now: bool,
    loss_round_delivered: u64,
    undo_bw_lo: u64,
    undo_inflight_lo: u32,
    undo_inflight_hi: u32,
    bw_latest: u64,
    bw_lo: u64,
    /// The long-term max filter, a window per PROBE_BW cycle (`bw_hi[2]`).
    bw_hi: TwoSlotMax<u64>,
    inflight_latest: u32,
    inflight_lo: u32,
    inflight_hi: u32,
    bw_probe_up_cnt: u32,
    bw_probe_up_acks: u32,
    probe_wait_us: u64,
    bw_probe_samples: bool,
    prev_probe_too_high: bool,
    stopped_risky_probe: bool,
    pub rounds_since_probe: u32,
    loss_round_start: bool,
    loss_in_round: bool,
    loss_in_cycle: bool,
    // ECN (google/bbr v3).
    /// `bbr_can_use_ecn`: the flow negotiated ECN on a route with ecn_low.
    can_use_ecn: bool,
    ecn_eligible: bool,
    /// `ecn_alpha`, EWMA of the CE ratio in 1/256.
    pub ecn_alpha: u32,
    alpha_last_delivered: u64,
    alpha_last_delivered_ce: u64,
    ecn_in_round: bool,
    ecn_in_cycle: bool,
    startup_ecn_rounds: u32,
    ack_phase: AckPhase,
    loss_events_in_round: u32,
    drain_rounds: u32,
}

impl Bbr3 {
    pub fn new(p: Bbr3Params) -> Self {
        let core = Core::new(
            p.family(),
            to_unit(p.startup_pacing_gain),
            to_unit(p.startup_cwnd_gain),
            to_unit(p.drain_gain),
            p.min_rtt_window,
        );
        Bbr3 {
            // v3's gains start at 1, and its pacing rate is at least 1 byte/s.
            core: Core { pacing_gain: BBR_UNIT, cwnd_gain: BBR_UNIT, pacing_rate_floor: 1, ..core },
            cwnd_gain_probe_bw: to_unit(p.cwnd_gain),
            cwnd_gain_probe_up: to_unit(p.probe_up_cwnd_gain),
            pacing_gains: [to_unit(p.probe_up_gain), to_unit(p.probe_down_gain), BBR_UNIT, BBR_UNIT],
            probe_rtt_cwnd_gain: to_unit(p.probe_rtt_cwnd_gain),
            ecn_thresh: to_unit(p.ecn_thresh),
            beta: to_frac(p.beta),
            loss_thresh: to_frac(p.loss_thresh),
            headroom: to_frac(p.inflight_headroom),
            probe_rtt_win_j: msecs_to_jiffies((p.probe_rtt_interval * 1e3).round() as u64, CONFIG_HZ),
            p,
            cycle_idx: Phase::Up,
            probe_rtt_min: MinRtt::NONE,
            bw_probe_up_rounds: 0,
            try_fast_path: false,
            full_bw_now: false,
            loss_round_delivered: 0,
            undo_bw_lo: 0,
            undo_inflight_lo: 0,
            undo_inflight_hi: 0,
            bw_latest: 0,
            bw_lo: UNSET_BW,
            bw_hi: TwoSlotMax::default(),
            inflight_latest: 0,
            inflight_lo: UNSET,
            inflight_hi: UNSET,
            bw_probe_up_cnt: UNSET,
            bw_probe_up_acks: 0,
            probe_wait_us: 0,
            bw_probe_samples: false,
            prev_probe_too_high: false,
            stopped_risky_probe: false,
            rounds_since_probe: 0,
            loss_round_start: false,
            loss_in_round: false,
            loss_in_cycle: false,
            can_use_ecn: false,
            ecn_eligible: false,
            ecn_alpha: to_unit(p.ecn_alpha_init),
            alpha_last_delivered: 0,
            alpha_last_delivered_ce: 0,
            ecn_in_round: false,
            ecn_in_cycle: false,
            startup_ecn_rounds: 0,
            ack_phase: AckPhase::Init,
            loss_events_in_round: 0,
            drain_rounds: 0,
        }
    }

    // ---- read-outs ----------------------------------------------------------------------

    /// Mode and PROBE_BW phase together.
    pub fn state(&self) -> State {
        match (self.core.mode, self.cycle_idx) {
            (Mode::Startup, _) => State::Startup,
            (Mode::Drain, _) => State::Drain,
            (Mode::ProbeRtt, _) => State::ProbeRtt,
            (Mode::ProbeBw, Phase::Down) => State::ProbeBwDown,
            (Mode::ProbeBw, Phase::Cruise) => State::ProbeBwCruise,
            (Mode::ProbeBw, Phase::Refill) => State::ProbeBwRefill,
            (Mode::ProbeBw, Phase::Up) => State::ProbeBwUp,
        }
    }

    /// Packet-timed rounds so far (telemetry; Linux keeps no such counter in v3).
    pub fn round_count(&self) -> u64 {
        self.core.round_count
    }

    /// `bbr_max_bw`: the long-term max filter (bw_hi), packets/us << 24.
    pub fn max_bw(&self) -> u64 {
        self.bw_hi.get()
    }

    /// bw_lo, if a lossy round has set it.
    pub fn bw_lo(&self) -> Option<u64> {
        (self.bw_lo != UNSET_BW).then_some(self.bw_lo)
    }

    pub fn inflight_hi(&self) -> Option<u32> {
        (self.inflight_hi != UNSET).then_some(self.inflight_hi)
    }

    pub fn inflight_lo(&self) -> Option<u32> {
        (self.inflight_lo != UNSET).then_some(self.inflight_lo)
    }

    /// A bandwidth in this module's unit as bits per second of payload.
    pub fn to_bps(&self, bw: u64) -> f64 {
        self.core.bw_to_bps(bw)
    }

    /// min_rtt estimate in ns, if any.
    pub fn min_rtt_ns(&self) -> Option<Nanos> {
        self.core.min_rtt_ns()
    }

    // ---- rate, volume and budget ------------------------------------------------------------

    /// `bbr_tso_segs_generic` (v3), through the transport's `tcp_tso_autosize` arithmetic:
    /// the allowance is 64 KB >> (min_rtt >> 9) whatever the cap.
    fn tso_segs_generic(&self, mss: u32, cap: u64) -> u32 {
        // An unset min_rtt (~0U) leaves no allowance, as in Linux.
        let min_rtt_us = Some(self.core.min_rtt.us as u64);
        tso::autosize(self.core.pacing_rate, mss, min_rtt_us, tso::GSO_LEGACY_MAX_SIZE, cap, tso::TCP_MIN_TSO_SEGS)
    }

    /// `bbr_target_inflight`: the BDP, unless congestion has cut cwnd below it.
    fn target_inflight(&self, cwnd: u32) -> u32 {
        self.inflight(self.bw(), BBR_UNIT).min(cwnd)
    }

    /// `bbr_inflight_with_headroom`: inflight_hi less max(1, headroom share), at least 4.
    fn inflight_with_headroom(&self) -> u32 {
        if self.inflight_hi == UNSET {
            return UNSET;
        }
        let headroom = ((self.inflight_hi as u64 * self.headroom) >> FRAC_SCALE).max(1) as u32;
        self.inflight_hi.saturating_sub(headroom).max(self.core.cwnd_min_target)
    }

    fn is_probing_bandwidth(&self) -> bool {
        self.core.mode == Mode::Startup
            || (self.core.mode == Mode::ProbeBw && matches!(self.cycle_idx, Phase::Refill | Phase::Up))
    }

    // ---- control -----------------------------------------------------------------------------

    /// `bbr_update_gains`: in PROBE_BW, the phase's pacing gain, and a larger cwnd gain in UP.
    fn update_gains(&mut self) {
        self.core.update_gains(|| {
            let pacing = self.pacing_gains[self.cycle_idx as usize];
            (pacing, if self.cycle_idx == Phase::Up { self.cwnd_gain_probe_up } else { self.cwnd_gain_probe_bw })
        });
    }

    /// `bbr_set_cwnd` (v3: no packet conservation; Startup grows while below target or below
    /// twice the initial window). Stopping at the target lets the fast path be tried.
    fn set_cwnd(&mut self, w: &mut Window, acked: u32, bw: u64, gain: u32) {
        let mut cwnd = w.cwnd;
        if acked > 0 {
            let target = self.cwnd_target(bw, gain);
            let early = cwnd < 2 * self.core.init_cwnd;
            (cwnd, self.try_fast_path) = self.core.grow_cwnd(cwnd, acked, target, early);
        }
        self.set_snd_cwnd(w, cwnd);
    }

    /// `bbr_bound_cwnd_for_inflight_model`.
    fn bound_cwnd_for_inflight_model(&self, w: &mut Window) {
        let mut cap = UNSET;
        if self.core.mode == Mode::ProbeBw && self.cycle_idx != Phase::Cruise {
            cap = self.inflight_hi;
        } else if self.core.mode == Mode::ProbeRtt || self.core.mode == Mode::ProbeBw {
            cap = self.inflight_with_headroom();
        }
        let cap = cap.min(self.inflight_lo).max(self.core.cwnd_min_target);
        w.cwnd = w.cwnd.min(cap);
    }

    /// `bbr_update_ack_aggregation` (1-round slots until the pipe is full).
    fn update_ack_aggregation(&mut self, info: &ConnInfo, w: &Window, rs: &RateSample) {
        if self.core.extra_acked_gain == 0 || rs.acked_sacked == 0 || rs.delivered < 0 || rs.interval_ns / 1000 <= 0 {
            return;
        }
        let full = self.core.full_bw_reached;
        let win = if full { self.p.extra_acked_win_rtts } else { self.p.extra_acked_win_rtts_startup };
        let bw = self.bw();
        self.core.aggr.update(self.core.round_start, win as u32, rs.acked_sacked, info.delivered_mstamp_ns, bw, w.cwnd);
    }

    /// `bbr_update_model`.
    fn update_model(&mut self, info: &ConnInfo, w: &mut Window, rs: &RateSample, sample_bw: u64) {
        self.update_congestion_signals(w, rs, sample_bw);
        self.update_ack_aggregation(info, w, rs);
        self.check_loss_too_high_in_startup(info, rs);
        self.check_full_bw_reached(rs, sample_bw);
        self.check_drain(info, w);
        self.update_cycle_phase(info, w, rs, sample_bw);
        self.update_min_rtt(info, w, rs);
    }
}

impl Version for Bbr3 {
    fn core(&self) -> &Core {
        &self.core
    }

    /// `bbr_bw`: the estimate in use, min(max_bw, bw_lo).
    fn bw(&self) -> u64 {
        self.max_bw().min(self.bw_lo)
    }

    /// `bbr_tso_segs_goal` (v3): about 1 ms of data at the pacing rate plus an allowance that
    /// halves per 512 us of min_rtt, at least 2 segments.
    fn tso_segs_goal(&self) -> u32 {
        self.tso_segs_generic(self.core.mss, GSO_MAX_BYTES)
    }

    /// `bbr_quantization_budget` (v3): room for three TSO bursts, at least 4, +2 in UP.
    fn quantization_budget(&self, cwnd: u32) -> u32 {
        let mut cwnd = cwnd;
        if self.p.tso_budget != 0.0 {
            cwnd = cwnd.max(3 * self.tso_segs_goal());
        }
        cwnd = cwnd.max(self.core.cwnd_min_target);
        if self.core.mode == Mode::ProbeBw && self.cycle_idx == Phase::Up {
            cwnd += 2;
        }
        cwnd
    }

    /// `bbr_ack_aggregation_cwnd` (v3 adds it in every state).
    fn ack_aggregation_cwnd(&self) -> u32 {
        if self.core.extra_acked_gain == 0 {
            return 0;
        }
        self.core.aggr.cwnd(self.bw(), self.core.extra_acked_gain)
    }

    /// `bbr_probe_rtt_cwnd`: max(4, BDP/2).
    fn probe_rtt_cwnd(&self) -> u32 {
        self.core.cwnd_min_target.max(self.core.bdp(self.bw(), self.probe_rtt_cwnd_gain))
    }
}

impl CongestionControl for Bbr3 {
    fn name(&self) -> &'static str {
        "bbr3"
    }

    family_items!();

    /// google/bbr's `tso_segs` hook (`bbr_tso_segs`): the generic goal under the socket's
    /// GSO limit.
    fn tso_segs(&self, mss: u32) -> Option<u32> {
        Some(self.tso_segs_generic(mss, tso::SK_GSO_MAX_SIZE - 1 - tso::MAX_TCP_HEADER))
    }

    /// `bbr_init`.
    fn init(&mut self, info: &ConnInfo, w: &mut Window) {
        self.core.init_cwnd = w.cwnd.min(MAX_INIT_CWND);
        self.core.init(info, w);
        self.can_use_ecn = info.ecn && self.p.ecn_low != 0.0;
        self.ecn_eligible = false;
        self.ecn_alpha = to_unit(self.p.ecn_alpha_init);
        self.startup_ecn_rounds = 0;
        self.core.next_rtt_delivered = info.delivered;
        self.core.prev_ca_state = CaState::Open;
        self.probe_rtt_min = self.core.min_rtt;
        self.loss_round_delivered = info.delivered + 1;
        self.reset_congestion_signals();
        self.reset_full_bw();
    }

    /// `bbr_ssthresh`: save cwnd and the loss-adapted bounds for undo.
    fn ssthresh(&mut self, _info: &ConnInfo, w: &Window) -> u32 {
        self.core.save_cwnd(w.cwnd);
        self.undo_bw_lo = self.bw_lo;
        self.undo_inflight_lo = self.inflight_lo;
        self.undo_inflight_hi = self.inflight_hi;
        w.ssthresh
    }

    /// `bbr_undo_cwnd`.
    fn undo_cwnd(&mut self, _info: &ConnInfo, _w: &Window, _prior_cwnd: u32) -> u32 {
        self.reset_full_bw();
        self.loss_in_round = false;
        self.bw_lo = self.bw_lo.max(self.undo_bw_lo);
        self.inflight_lo = self.inflight_lo.max(self.undo_inflight_lo);
        self.inflight_hi = self.inflight_hi.max(self.undo_inflight_hi);
        self.try_fast_path = false;
        self.core.prior_cwnd
    }

    /// `bbr_set_state`.
    fn set_state(&mut self, _info: &ConnInfo, w: &mut Window, new: CaState) {
        if new == CaState::Loss {
            self.core.prev_ca_state = CaState::Loss;
            self.reset_full_bw();
            if !self.is_probing_bandwidth() && self.inflight_lo == UNSET {
                // adapt_lower_bounds needs the cwnd from before the RTO.
                self.inflight_lo = w.cwnd.max(self.core.prior_cwnd);
            }
        } else if self.core.prev_ca_state == CaState::Loss {
            // bbr_exit_loss_recovery.
            w.cwnd = w.cwnd.max(self.core.prior_cwnd);
            self.try_fast_path = false;
        }
    }

    /// `bbr_skb_marked_lost`: while the flight reflects a bandwidth probe, a loss rate above
    /// loss_thresh sets inflight_hi to where the threshold was crossed.
    fn skb_marked_lost(&mut self, info: &ConnInfo, pkt: &LostPacket) {
        self.note_loss(info);
        if !self.bw_probe_samples {
            return;
        }
        let lost = info.lost - pkt.tx_lost;
        if self.is_inflight_too_high(lost, pkt.tx_in_flight, 0, 0) {
            let inflight_hi = self.inflight_hi_from_lost_packet(lost, pkt.tx_in_flight);
            self.handle_inflight_too_high(info, info.cwnd, pkt.is_app_limited, inflight_hi);
        }
    }

    /// `bbr_main`.
    fn cong_control(&mut self, info: &ConnInfo, w: &mut Window, rs: &RateSample) {
        self.update_round_start(info, rs);
        if self.core.round_start {
            self.rounds_since_probe = (self.rounds_since_probe + 1).min(MAX_ROUNDS_SINCE_PROBE);
            self.update_ecn_alpha(info);
        }
        self.ecn_in_round |= self.ecn_eligible && rs.is_ece;
        let sample_bw = Self::bw_sample(rs);
        self.update_latest_delivery_signals(info, rs, sample_bw);

        // bbr_run_fast_path: an app-limited sample below max_bw with no loss this round
        // cannot change the model; only the state checks run.
        let mut update_model = true;
        let mut skip_control = false;
        if self.p.fast_path != 0.0
            && self.try_fast_path
            && rs.is_app_limited
            && sample_bw < self.max_bw()
            && !self.loss_in_round
            && !self.ecn_in_round
        {
            let (mode, min_rtt) = (self.core.mode, self.core.min_rtt.us);
            self.check_drain(info, w);
            self.update_cycle_phase(info, w, rs, sample_bw);
            self.update_min_rtt(info, w, rs);
            skip_control = self.core.mode == mode && self.core.min_rtt.us == min_rtt && self.try_fast_path;
            update_model = false;
        }
        if !skip_control {
            if update_model {
                self.update_model(info, w, rs, sample_bw);
            }
            self.update_gains();
            let (bw, pacing_gain) = (self.bw(), self.core.pacing_gain);
            self.core.set_pacing_rate(info, w, bw, pacing_gain);
            self.set_cwnd(w, rs.acked_sacked, bw, self.core.cwnd_gain);
            self.bound_cwnd_for_inflight_model(w);
        }
        self.advance_latest_delivery_signals(rs, sample_bw);
        self.core.prev_ca_state = info.ca_state;
        self.loss_in_cycle |= rs.lost > 0;
        self.ecn_in_cycle |= rs.delivered_ce > 0;
    }

    /// TCP_CONG_WANTS_CE_EVENTS: the receiver echoes CE per packet (`bbr_precise_ece_ack`).
    fn wants_ce_events(&self) -> bool {
        true
    }

    fn state_name(&self) -> Option<&'static str> {
        Some(self.state().name())
    }

    fn telemetry_keys(&self) -> &'static [&'static str] {
        &[
            "btlbw_bps",
            "rtprop_ms",
            "pacing_gain",
            "cwnd_gain",
            "bw_hi_bps",
            "bw_lo_bps",
            "inflight_hi_pkts",
            "inflight_lo_pkts",
            "round",
            "full_bw_reached",
            "rounds_since_probe",
        ]
    }

    fn telemetry(&self, out: &mut Vec<f64>) {
        self.core.telemetry(self.bw(), out);
        out.push(self.to_bps(self.max_bw()));
        out.push(self.bw_lo().map_or(f64::NAN, |b| self.to_bps(b)));
        out.push(self.inflight_hi().map_or(f64::NAN, |x| x as f64));
        out.push(self.inflight_lo().map_or(f64::NAN, |x| x as f64));
        out.push(self.core.round_count as f64);
        out.push(self.core.full_bw_reached as u8 as f64);
        out.push(self.rounds_since_probe as f64);
    }
}
