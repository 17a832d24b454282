//! DualPI2, the coupled dual-queue AQM for L4S (RFC 9332), as Linux `net/sched/sch_dualpi2.c`.
//!
//! Packets carrying ECT(1) or CE (the L4S identifier, RFC 9331) go to the L queue, all others
//! to the C (classic) queue. One PI controller (PI2, De Schepper et al. 2016) updates a base
//! probability p' every `tupdate` from the larger of the two head-of-queue delays:
//! `p' += alpha (qdelay - target) + beta (qdelay - qdelay_old)` (`calculate_probability`).
//! Classic packets are dropped (or marked, if ECN-capable) with p_C = p'^2, drawn as two
//! independent rolls (`dualpi2_classic_marking`); L packets are marked with the coupled
//! p_CL = k p' (`dualpi2_scalable_marking`) and, by the L queue's native step AQM, whenever
//! their sojourn exceeds `step_thresh` (`do_step_aqm`). Once k p' >= 1 (overload) L packets
//! get the classic treatment too, dropped unless `drop_overload` is off. No signal is given
//! while less than two MTUs are queued (`must_drop`). A weighted round robin with
//! `c_protection` % for the C queue keeps either from starving the other (`dequeue_packet`:
//! the credit's sign picks the queue, the dequeued length moves it).
//!
//! Defaults as `dualpi2_reset_default`: target 15 ms, tupdate 16 ms, alpha 41/256 = 0.16 Hz,
//! beta 819/256 = 3.2 Hz, step_thresh 1 ms (sojourn), min_qlen_step 0, coupling_factor 2,
//! drop_overload on, drop at dequeue, c_protection 10 %, L4S = ECT(1). The packet `limit` is
//! the trial's queue (both queues together).
//!
//! Deviations: probabilities are floating point rather than fractions of 2^32; the PI timer's
//! updates are applied lazily at the next enqueue or dequeue, each with the head delays it
//! would have seen at its own time (heads change only at those events); `memory_limit`
//! (skb truesize) is not modelled; the step threshold is in time only (not packets); no
//! `drop_early`, no tc filters, no GSO splitting (the simulator's packets are single
//! segments); random numbers come from the trial seed.

use super::param::{Kind, Param};
use super::{Counters, DequeueDecides, Discipline, DropCause, Limit, MarkCause, PeekDequeued, Qdisc, Queued, Setup};
use crate::packet::Ecn;
use crate::rng::SimRng;
use crate::time::Nanos;
use std::collections::VecDeque;

/// Weights are percentages: wc + wl = MAX_WC.
const MAX_WC: i64 = 100;

/// `dualpi2_reset_default`.
const TARGET_NS: Nanos = 15_000_000;
const TUPDATE_NS: Nanos = 16_000_000;
const ALPHA: f64 = 41.0 / 256.0;
const BETA: f64 = 819.0 / 256.0;
const STEP_THRESH_NS: Nanos = 1_000_000;
const COUPLING_FACTOR: u8 = 2;
const C_PROTECTION: u8 = 10;

crate::qdisc_params! {
    /// `tc qdisc ... dualpi2`: the coupled dual-queue AQM for L4S (RFC 9332), a PI2 controller
    /// over a classic queue and a low-latency queue for ECT(1) traffic.
    pub struct DualPi2Config {
        /// The queueing delay the PI controller aims at.
        target_ns: Nanos = Param::new("target", Kind::Time).min(1.0).default(TARGET_NS as f64),
        /// Time between two updates of the base probability.
        tupdate_ns: Nanos = Param::new("tupdate", Kind::Time).min(1.0).default(TUPDATE_NS as f64),
        /// Integral gain of the PI controller.
        alpha: f64 = Param::new("alpha", Kind::Real).above(0.0).unit("Hz").default(ALPHA),
        /// Proportional gain of the PI controller.
        beta: f64 = Param::new("beta", Kind::Real).above(0.0).unit("Hz").default(BETA),
        /// The L queue's step AQM marks packets whose sojourn exceeds this.
        step_thresh_ns: Nanos = Param::new("step_thresh", Kind::Time).min(1.0).default(STEP_THRESH_NS as f64),
        /// Packets the L queue must hold before the step AQM marks.
        min_qlen_step: u32 = Param::new("min_qlen_step", Kind::Count).range(0.0, u32::MAX as f64).default(0.0),
        /// k, the coupling of the L queue's marking to the classic probability (p_L = k p').
        coupling_factor: u8 = Param::new("coupling_factor", Kind::Count).range(1.0, 255.0).default(COUPLING_FACTOR as f64),
        /// Under overload, drop L packets rather than mark them.
        drop_overload: bool = Param::new("drop_overload", Kind::Flag).default_flag(true),
        /// The classic queue's share of the round robin.
        c_protection: u8 = Param::new("c_protection", Kind::Count).range(0.0, 100.0).unit("percent").default(C_PROTECTION as f64),
    }
}

impl Discipline for DualPi2Config {
    /// Two queues (L4S and classic) under a coupled scheduler: each keeps its order only.
    const ARRIVAL_ORDER: bool = false;

    fn build(&self, setup: &Setup, rng: SimRng) -> Box<dyn Qdisc> {
        Box::new(PeekDequeued::new(DualPi2::new(setup.limit, DualPi2Params::resolve(self, setup.mtu), rng)))
    }
}

#[derive(Debug, Clone, Copy)]
pub struct DualPi2Params {
    pub target: Nanos,
    pub tupdate: Nanos,
    /// Integral and proportional gains, per second.
    pub alpha: f64,
    pub beta: f64,
    pub step_thresh: Nanos,
    pub min_qlen_step: u64,
    pub coupling: f64,
    pub drop_overload: bool,
    /// C queue's WRR weight, percent.
    pub c_protection: i64,
    pub mtu: u64,
}

impl DualPi2Params {
    pub fn resolve(cfg: &DualPi2Config, mtu: u32) -> Self {
        DualPi2Params {
            target: cfg.target_ns.unwrap_or(TARGET_NS),
            tupdate: cfg.tupdate_ns.unwrap_or(TUPDATE_NS),
            alpha: cfg.alpha.unwrap_or(ALPHA),
            beta: cfg.beta.unwrap_or(BETA),
            step_thresh: cfg.step_thresh_ns.unwrap_or(STEP_THRESH_NS),
            min_qlen_step: cfg.min_qlen_step.unwrap_or(0) as u64,
            coupling: cfg.coupling_factor.unwrap_or(COUPLING_FACTOR) as f64,
            drop_overload: cfg.drop_overload.unwrap_or(true),
            c_protection: cfg.c_protection.unwrap_or(C_PROTECTION) as i64,
            mtu: mtu as u64,
        }
    }
}

/// A queued packet and whether the step AQM applies to it (`apply_step`, decided at enqueue).
#[derive(Debug, Clone, Copy)]
struct Entry {
    q: Queued,
    apply_step: bool,
}

pub struct DualPi2 {
    limit: Limit,
    pub p: DualPi2Params,
    /// The base probability p'.
    pub prob: f64,
    last_qdelay: Nanos,
    l: VecDeque<Entry>,
    c: VecDeque<Entry>,
    bytes: u64,
    credit: i64,
    credit_init: i64,
    next_update: Nanos,
    rng: SimRng,
}

fn is_l4s(e: Ecn) -> bool {
    matches!(e, Ecn::Ect1 | Ecn::Ce)
}

impl DualPi2 {
    pub fn new(limit: Limit, p: DualPi2Params, rng: SimRng) -> Self {
        // dualpi2_calculate_c_protection: a negative credit serves L first.
        let credit_init = p.mtu as i64 * (p.c_protection - (MAX_WC - p.c_protection));
        DualPi2 {
            limit,
            p,
            prob: 0.0,
            last_qdelay: 0,
            l: VecDeque::new(),
            c: VecDeque::new(),
            bytes: 0,
            credit: credit_init,
            credit_init,
            next_update: p.tupdate,
            rng,
        }
    }

    fn qlen(&self) -> u64 {
        (self.l.len() + self.c.len()) as u64
    }

    /// The PI timer's updates due by `now` (`dualpi2_timer` -> `calculate_probability`).
    fn catch_up(&mut self, now: Nanos) {
        while self.next_update <= now {
            let t = self.next_update;
            let delay = |q: &VecDeque<Entry>| q.front().map_or(0, |e| t - e.q.enqueued_at);
            let qdelay = delay(&self.l).max(delay(&self.c));
            let secs = |ns: Nanos| ns as f64 / 1e9;
            let delta = self.p.alpha * secs(qdelay - self.p.target) + self.p.beta * secs(qdelay - self.last_qdelay);
            self.last_qdelay = qdelay;
            self.prob = (self.prob + delta).clamp(0.0, 1.0);
            if !self.p.drop_overload {
                self.prob = self.prob.min(1.0 / self.p.coupling);
            }
            self.next_update += self.p.tupdate;
        }
    }

    /// `dualpi2_roll`.
    fn roll(&mut self, prob: f64) -> bool {
        self.rng.uniform() < prob
    }

    /// `must_drop`: the PI2 verdict for a packet leaving `from_l`; marks are applied here.
    fn must_drop(&mut self, e: &mut Entry, from_l: bool, c: &mut Counters) -> bool {
        // The backlog without this packet, as Linux has already taken it out.
        if self.bytes < 2 * self.p.mtu {
            return false;
        }
        let prob = self.prob;
        let l_prob = prob * self.p.coupling;
        let overload = l_prob > 1.0;
        let not_ect = e.q.pkt.ecn == Ecn::NotEct;
        if !from_l {
            // dualpi2_classic_marking: p_C = p'^2 as two rolls.
            if self.roll(prob) && self.roll(prob) {
                if overload || not_ect {
                    return true;
                }
                c.mark(&mut e.q.pkt, MarkCause::Aqm);
            }
            return false;
        }
        // dualpi2_scalable_marking.
        if overload {
            if self.p.drop_overload && self.roll(prob) && self.roll(prob) {
                return true;
            }
            c.mark(&mut e.q.pkt, MarkCause::Aqm);
            return false;
        }
        if self.roll(l_prob) {
            if not_ect {
                return true;
            }
            c.mark(&mut e.q.pkt, MarkCause::Aqm);
        }
        false
    }

    /// `dualpi2_qdisc_dequeue`: WRR between the queues, PI2 drops/marks, the L step AQM.
    fn dequeue_dualpi2(&mut self, now: Nanos, c: &mut Counters) -> Option<Queued> {
        self.catch_up(now);
        loop {
            let (l_len, c_len) = (self.l.len(), self.c.len());
            let (mut e, from_l, mut change) = if l_len > 0 && (c_len == 0 || self.credit <= 0) {
                let e = self.l.pop_front().expect("non-empty");
                (e, true, if c_len > 0 { self.p.c_protection } else { 0 })
            } else if c_len > 0 {
                let e = self.c.pop_front().expect("non-empty");
                (e, false, if l_len > 0 { -(MAX_WC - self.p.c_protection) } else { 0 })
            } else {
                self.credit = self.credit_init;
                return None;
            };
            self.bytes -= e.q.pkt.size as u64;
            change *= e.q.pkt.size as i64;
            if self.must_drop(&mut e, from_l, c) {
                c.drop_queued(&e.q.pkt, DropCause::Aqm);
                continue;
            }
            if from_l && e.apply_step && now - e.q.enqueued_at > self.p.step_thresh {
                if e.q.pkt.ecn == Ecn::NotEct {
                    c.drop_queued(&e.q.pkt, DropCause::Aqm);
                    continue;
                }
                c.mark(&mut e.q.pkt, MarkCause::Threshold);
            }
            self.credit += change;
            return Some(e.q);
        }
    }
}

/// Drops at dequeue, so peeked by dequeuing (`qdisc_peek_dequeued`).
impl DequeueDecides for DualPi2 {
    /// `dualpi2_enqueue_skb`: classify by the ECN field, tail drop beyond the limit.
    fn enqueue(&mut self, now: Nanos, q: Queued, held: (u64, u64), c: &mut Counters) {
        self.catch_up(now);
        let (n, b) = (self.qlen() + held.0, self.bytes + held.1);
        if !self.limit.holds(n + 1, b + q.pkt.size as u64) {
            c.drop_queued(&q.pkt, DropCause::Overflow);
            return;
        }
        self.bytes += q.pkt.size as u64;
        if is_l4s(q.pkt.ecn) {
            let apply_step = self.l.len() as u64 >= self.p.min_qlen_step;
            self.l.push_back(Entry { q, apply_step });
        } else {
            self.c.push_back(Entry { q, apply_step: false });
        }
    }

    fn dequeue(&mut self, now: Nanos, c: &mut Counters) -> Option<Queued> {
        self.dequeue_dualpi2(now, c)
    }

    fn backlog(&self) -> (u64, u64) {
        (self.qlen(), self.bytes)
    }
}
