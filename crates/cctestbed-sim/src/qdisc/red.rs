//! RED, Random Early Detection (Floyd and Jacobson 1993; RFC 2309 / RFC 7567's background), as
//! Linux `net/sched/sch_red.c` with `include/net/red.h`, and `tc-red`'s parameter defaults.
//!
//! The model: on every arrival the average backlog in bytes is updated,
//! `qavg <- (1 - W) qavg + W backlog` with W = 2^-Wlog; below `min` nothing happens; at or
//! above `max` every packet is dropped (or, with `ecn` and without `harddrop`, marked); in
//! between a packet is dropped or marked with probability rising linearly from 0 at `min` to
//! `probability` (max_P) at `max`, spread evenly between marks as RED's `count` does (Linux
//! `red_action` / `red_mark_probability`: mark once `(qavg - min) * count >= R`, R uniform in
//! [0, (max - min) / max_P)). After an idle period the average decays as if `m = idle /
//! (avpkt / bandwidth)` empty-queue arrivals had been seen (`red_calc_qavg_from_idle_time`).
//! With `adaptive` (Floyd, Gummadi and Shenker 2001; Linux `red_adaptative_algo`, every 500 ms)
//! max_P rises by min(0.01, max_P / 4) while qavg is above the upper 60 % point of
//! [min, max] and falls by the factor 0.9 while below the 40 % point, within [0.01, 0.5].
//!
//! Defaults as `tc-red`: `max` = a quarter of the hard limit, `min` = max / 3, `avpkt` 1000
//! bytes, `burst` = (2 min + max) / (3 avpkt) packets, giving Wlog as tc's
//! `tc_red_eval_ewma`; `probability` 0.02; `bandwidth` = the link capacity. The hard limit is
//! the trial's queue (`limit`, RED's child bfifo).
//!
//! Deviations: the average is kept in floating point rather than scaled by 2^Wlog; the idle
//! decay is computed as (1 - W)^m directly, not through tc's 256-entry `Stab` lookup table;
//! the random numbers come from the trial seed.

use super::param::{Kind, Param, Rule};
use super::{Counters, Discipline, DropCause, Limit, MarkCause, Qdisc, Queued, Setup};
use crate::rng::SimRng;
use super::fifo::Fifo;
use crate::time::Nanos;

/// `red_adaptative_algo` runs every HZ/2.
const ADAPTIVE_PERIOD_NS: Nanos = 500_000_000;
/// `MAX_P_MIN`, `MAX_P_MAX`: the range adaptive RED keeps max_P in.
const MAX_P_MIN: f64 = 0.01;
const MAX_P_MAX: f64 = 0.50;
/// `MAX_P_BETA`: the multiplicative decrease.
const MAX_P_BETA: f64 = 0.9;

/// `tc-red`'s defaults: max_P 2 %, avpkt 1000 bytes.
const PROBABILITY: f64 = 0.02;
const AVPKT: u64 = 1000;

crate::qdisc_params! {
    /// `tc qdisc ... red`: Random Early Detection (Floyd and Jacobson 1993), drops or marks
    /// arrivals with a probability rising with the average queue; adaptive (Floyd et al. 2001)
    /// tunes max_P.
    pub struct RedConfig {
        /// Average queue, bytes, above which packets may be dropped or marked.
        min: u64 = Param::new("min", Kind::Size).min(1.0).derived("a third of max"),
        /// Average queue, bytes, at which the probability reaches max_P.
        max: u64 = Param::new("max", Kind::Size).min(1.0).derived("3 x min, else a quarter of the queue limit"),
        /// max_P, the probability at max.
        probability: f64 = Param::new("probability", Kind::Fraction).above(0.0).max(1.0).default(PROBABILITY),
        /// The average packet size, bytes, for the average's ageing and the burst.
        avpkt: u64 = Param::new("avpkt", Kind::Size).min(1.0).default(AVPKT as f64),
        /// Packets of avpkt the average lets through at once (sets the averaging weight).
        burst: u64 = Param::new("burst", Kind::Count).range(1.0, u32::MAX as f64).derived("(2 min + max) / (3 avpkt)"),
        /// Rate used to age the average over idle periods.
        bandwidth_bps: u64 = Param::new("bandwidth", Kind::Rate).min(1.0).derived("the link's capacity"),
        /// Mark ECN-capable packets instead of dropping them.
        ecn: bool = Param::new("ecn", Kind::Flag).default_flag(false),
        /// Drop rather than mark above max, even with ecn.
        harddrop: bool = Param::new("harddrop", Kind::Flag).default_flag(false),
        /// Adapt max_P to keep the average between min and max.
        adaptive: bool = Param::new("adaptive", Kind::Flag).default_flag(false),
    }
    rules: &[Rule::Below("min", "max")];
}

impl Discipline for RedConfig {
    /// One FIFO: drops (at arrival or, at dequeue, from the head) do not reorder.
    const ARRIVAL_ORDER: bool = true;

    fn build(&self, setup: &Setup, rng: SimRng) -> Box<dyn Qdisc> {
        let p = RedParams::resolve(self, &setup.limit, setup.mtu, setup.capacity_bps);
        Box::new(Red::new(setup.limit, p, rng))
    }
}

/// RED's parameters, resolved (bytes, fractions).
#[derive(Debug, Clone, Copy)]
pub struct RedParams {
    pub min: f64,
    pub max: f64,
    pub max_p: f64,
    pub wlog: u32,
    pub avpkt: f64,
    pub bandwidth_bps: f64,
    pub ecn: bool,
    pub harddrop: bool,
    pub adaptive: bool,
}

/// `tc_red_eval_ewma`: the smallest Wlog whose filter lets a burst of `burst` packets of
/// `avpkt` bytes through with the average still below `min` (Floyd and Jacobson section 6).
pub fn eval_ewma(min: f64, burst: f64, avpkt: f64) -> u32 {
    let a = burst + 1.0 - min / avpkt;
    let mut w: f64 = 0.5;
    for wlog in 1..32 {
        if a <= (1.0 - (1.0 - w).powf(burst)) / w {
            return wlog;
        }
        w /= 2.0;
    }
    31
}

impl RedParams {
    pub fn resolve(cfg: &RedConfig, limit: &Limit, mtu: u32, capacity_bps: u64) -> Self {
        let limit_bytes = limit.bytes_at(mtu);
        let max = cfg.max.map(|v| v as f64).or(cfg.min.map(|m| 3.0 * m as f64)).unwrap_or(limit_bytes / 4.0);
        let min = cfg.min.map(|v| v as f64).unwrap_or(max / 3.0);
        let avpkt = cfg.avpkt.unwrap_or(AVPKT) as f64;
        let burst = cfg.burst.map(|b| b as f64).unwrap_or(((2.0 * min + max) / (3.0 * avpkt)).floor().max(1.0));
        RedParams {
            min,
            max,
            max_p: cfg.probability.unwrap_or(PROBABILITY),
            wlog: eval_ewma(min, burst, avpkt),
            avpkt,
            bandwidth_bps: cfg.bandwidth_bps.unwrap_or(capacity_bps) as f64,
            ecn: cfg.ecn.unwrap_or(false),
            harddrop: cfg.harddrop.unwrap_or(false),
            adaptive: cfg.adaptive.unwrap_or(false),
        }
    }
}

/// What `red_action` decided for one arrival.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    DontMark,
    ProbMark,
    HardMark,
}

/// RED's control state (`struct red_vars`), separate from the queue so it can be tested alone.
#[derive(Debug, Clone)]
pub struct RedState {
    pub p: RedParams,
    pub qavg: f64,
    /// Packets since the last mark, -1 after leaving the [min, max) band (`qcount`).
    qcount: i64,
    /// The current random threshold (`qR`), in bytes x packets.
    q_r: f64,
    idle_since: Option<Nanos>,
    next_adapt: Nanos,
    rng: SimRng,
}

impl RedState {
    pub fn new(p: RedParams, rng: SimRng) -> Self {
        RedState { p, qavg: 0.0, qcount: -1, q_r: 0.0, idle_since: Some(0), next_adapt: ADAPTIVE_PERIOD_NS, rng }
    }

    /// `red_random`: uniform in [0, (max - min) / max_P).
    fn random(&mut self) -> f64 {
        self.rng.uniform() * (self.p.max - self.p.min) / self.p.max_p
    }

    /// `red_calc_qavg` on an arrival seeing `backlog` bytes.
    pub fn update_avg(&mut self, now: Nanos, backlog: u64) {
        let w = (-(self.p.wlog as f64)).exp2();
        match self.idle_since.take() {
            None => self.qavg += (backlog as f64 - self.qavg) * w,
            Some(start) => {
                let per_pkt_ns = self.p.avpkt * 8.0 * 1e9 / self.p.bandwidth_bps;
                let m = (now - start).max(0) as f64 / per_pkt_ns;
                self.qavg *= (1.0 - w).powf(m);
            }
        }
    }

    /// `red_action`.
    pub fn action(&mut self) -> Action {
        if self.qavg < self.p.min {
            self.qcount = -1;
            Action::DontMark
        } else if self.qavg >= self.p.max {
            self.qcount = -1;
            Action::HardMark
        } else {
            self.qcount += 1;
            if self.qcount != 0 {
                if (self.qavg - self.p.min) * self.qcount as f64 >= self.q_r {
                    self.qcount = 0;
                    self.q_r = self.random();
                    return Action::ProbMark;
                }
            } else {
                self.q_r = self.random();
            }
            Action::DontMark
        }
    }

    /// `red_adaptative_algo`, run when its 500 ms period has passed.
    pub fn adapt(&mut self, now: Nanos) {
        if !self.p.adaptive {
            return;
        }
        while now >= self.next_adapt {
            self.next_adapt += ADAPTIVE_PERIOD_NS;
            let span = self.p.max - self.p.min;
            let (lo, hi) = (self.p.min + 0.4 * span, self.p.min + 0.6 * span);
            if self.qavg > hi && self.p.max_p <= MAX_P_MAX {
                self.p.max_p += (self.p.max_p / 4.0).min(0.01);
            } else if self.qavg < lo && self.p.max_p >= MAX_P_MIN {
                self.p.max_p *= MAX_P_BETA;
            }
        }
    }

    pub fn start_idle(&mut self, now: Nanos) {
        if self.idle_since.is_none() {
            self.idle_since = Some(now);
        }
    }
}

pub struct Red {
    limit: Limit,
    state: RedState,
    fifo: Fifo,
}

impl Red {
    pub fn new(limit: Limit, p: RedParams, rng: SimRng) -> Self {
        Red { limit, state: RedState::new(p, rng), fifo: Fifo::default() }
    }

    pub fn state(&self) -> &RedState {
        &self.state
    }
}

impl Qdisc for Red {
    /// `red_enqueue`.
    fn enqueue(&mut self, now: Nanos, mut q: Queued, c: &mut Counters) {
        self.state.adapt(now);
        self.state.update_avg(now, self.fifo.bytes());
        let signal = match self.state.action() {
            Action::DontMark => false,
            Action::ProbMark => {
                if self.state.p.ecn && c.mark(&mut q.pkt, MarkCause::Aqm) {
                    false
                } else {
                    true
                }
            }
            Action::HardMark => {
                if !self.state.p.harddrop && self.state.p.ecn && c.mark(&mut q.pkt, MarkCause::Aqm) {
                    false
                } else {
                    true
                }
            }
        };
        if signal {
            c.drop_queued(&q.pkt, DropCause::Aqm);
        } else if self.fifo.fits(&self.limit, &q, (0, 0)) {
            self.fifo.push(q);
        } else {
            c.drop_queued(&q.pkt, DropCause::Overflow);
        }
    }

    fn dequeue(&mut self, now: Nanos, _c: &mut Counters) -> Option<Queued> {
        let q = self.fifo.pop();
        if q.is_none() {
            self.state.start_idle(now);
        }
        q
    }

    fn peek(&mut self, _now: Nanos, _c: &mut Counters) -> Option<&Queued> {
        self.fifo.front()
    }

    fn backlog(&self) -> (u64, u64) {
        self.fifo.backlog()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(min: f64, max: f64, max_p: f64) -> RedParams {
        RedParams {
            min,
            max,
            max_p,
            wlog: 9,
            avpkt: 1000.0,
            bandwidth_bps: 10e6,
            ecn: false,
            harddrop: false,
            adaptive: false,
        }
    }

    /// The drop probability follows RED's curve: with the average held at a point of
    /// [min, max), pb = max_P (avg - min) / (max - min), and RED's count spreads the marks so
    /// that the gap between two is uniform in [1, 1/pb] (Floyd and Jacobson 1993, section 7),
    /// a mean gap of 1/(2 pb) + 1/2 arrivals: a mark rate of 2 pb / (1 + pb).
    #[test]
    fn drop_probability_follows_the_red_curve() {
        let (min, max, max_p) = (30_000.0, 90_000.0, 0.1);
        for frac in [0.1, 0.25, 0.5, 0.75, 0.95] {
            let mut s = RedState::new(params(min, max, max_p), SimRng::new(7, 2));
            s.qavg = min + frac * (max - min);
            let n = 400_000;
            let marks = (0..n).filter(|_| s.action() == Action::ProbMark).count();
            let pb = max_p * frac;
            let expect = 2.0 * pb / (1.0 + pb);
            let got = marks as f64 / n as f64;
            println!("measured: RED at {:.0} % of [min, max): mark rate {got:.5}, curve {expect:.5} (pb {pb:.4})", frac * 100.0);
            assert!((got / expect - 1.0).abs() < 0.03, "frac {frac}: {got} vs {expect}");
        }
        let mut s = RedState::new(params(min, max, max_p), SimRng::new(7, 2));
        s.qavg = max;
        assert_eq!(s.action(), Action::HardMark);
        s.qavg = min - 1.0;
        assert_eq!(s.action(), Action::DontMark);
    }

    #[test]
    fn ewma_weight_follows_tc_for_its_default_burst() {
        // min 30 KB, avpkt 1000, burst 50: the burst condition 50 + 1 - 30 = 21 <=
        // (1 - (1 - W)^50) / W first holds at W = 1/32 (25.5; 1/16 gives 15.4).
        assert_eq!(eval_ewma(30_000.0, 50.0, 1000.0), 5);
        // A larger burst allowance needs a slower filter.
        assert!(eval_ewma(30_000.0, 200.0, 1000.0) > 5);
    }

    #[test]
    fn adaptive_red_raises_max_p_above_target_and_lowers_it_below() {
        let mut p = params(30_000.0, 90_000.0, 0.02);
        p.adaptive = true;
        let mut s = RedState::new(p, SimRng::new(1, 2));
        s.qavg = 80_000.0;
        s.adapt(10 * ADAPTIVE_PERIOD_NS);
        assert!(s.p.max_p > 0.1, "{}", s.p.max_p);
        s.qavg = 31_000.0;
        s.adapt(100 * ADAPTIVE_PERIOD_NS);
        assert!(s.p.max_p < 0.011, "{}", s.p.max_p);
    }
}
