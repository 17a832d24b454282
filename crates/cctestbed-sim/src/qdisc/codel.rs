//! CoDel, Controlled Delay (RFC 8289), as Linux runs it: the control law of
//! `include/net/codel_impl.h` (`codel_should_drop`, `codel_dequeue`, `codel_Newton_step`,
//! `codel_control_law`) inside the `sch_codel.c` discipline (a FIFO with a packet limit).
//!
//! The model in four lines (RFC 8289 section 3): every packet is stamped when it enters; at
//! dequeue its sojourn time is compared with `target`. Once the sojourn has stayed at or above
//! `target` for a whole `interval` (and more than one MTU waits), CoDel enters the dropping
//! state and drops (or, with `ecn`, marks) one packet, then the next ones at
//! `interval / sqrt(count)` spacing, until a packet's sojourn falls below `target`.
//!
//! ```text
//!            sojourn >= target for interval                 sojourn < target
//!   [normal] ------------------------------> [dropping] -------------------------> [normal]
//!                 drop/mark, count = 1           drop/mark at drop_next,
//!             (or count - lastcount when it        drop_next += interval/sqrt(count)
//!              re-enters within 16 intervals)
//! ```
//!
//! Linux specifics kept: 1/sqrt(count) is kept as `rec_inv_sqrt` (Q0.16) and refined by one
//! Newton step per change of count; the control law is `t + interval * rec_inv_sqrt`; a
//! re-entry within 16 intervals of the last drop resumes from `count - lastcount`; no drop
//! while the backlog is at most one MTU (`params->mtu`); `ce_threshold` marks every
//! ECN-capable packet whose sojourn exceeds it, independent of the control law.
//! Defaults as `codel_params_init` and `sch_codel.c`: target 5 ms, interval 100 ms, ECN off,
//! no ce_threshold; the packet `limit` is the trial's queue (`link.queue`), in packets or bytes.
//!
//! Deviations: time is kept in nanoseconds, not Linux's 1024 ns `codel_time_t` units, so the
//! comparisons are a little finer; the newest kernels' cap on drops per dequeue
//! (`CODEL_MAX_DROPS_PER_DEQUEUE`) is not modelled.

use super::param::{Kind, Param};
use super::{Counters, DequeueDecides, Discipline, DropCause, Limit, MarkCause, PeekDequeued, Qdisc, Queued, Setup};
use crate::rng::SimRng;
use super::fifo::Fifo;
use crate::time::Nanos;

/// `codel_params_init`: target 5 ms, interval 100 ms.
pub const TARGET_NS: Nanos = 5_000_000;
pub const INTERVAL_NS: Nanos = 100_000_000;

crate::qdisc_params! {
    /// `tc qdisc ... codel`: Controlled Delay (RFC 8289), one FIFO whose packets are dropped or
    /// marked once their sojourn time has stayed above target for an interval.
    pub struct CodelConfig {
        /// The sojourn time CoDel keeps packets under.
        target_ns: Nanos = Param::new("target", Kind::Time).min(1.0).default(TARGET_NS as f64),
        /// How long the sojourn may stay above target before CoDel acts; about a worst-case RTT.
        interval_ns: Nanos = Param::new("interval", Kind::Time).min(1.0).default(INTERVAL_NS as f64),
        /// Mark ECN-capable packets instead of dropping them.
        ecn: bool = Param::new("ecn", Kind::Flag).default_flag(false),
        /// Mark every ECN-capable packet whose sojourn exceeds this, whatever the control law says.
        ce_threshold_ns: Nanos = Param::new("ce_threshold", Kind::Time).min(0.0),
    }
}

impl CodelConfig {
    /// The parameters with defaults filled in; `ecn_default` is the discipline's.
    pub fn resolve_with(&self, mtu: u32, ecn_default: bool) -> CodelParams {
        CodelParams {
            target: self.target_ns.unwrap_or(TARGET_NS),
            interval: self.interval_ns.unwrap_or(INTERVAL_NS),
            ecn: self.ecn.unwrap_or(ecn_default),
            ce_threshold: self.ce_threshold_ns,
            mtu: mtu as u64,
        }
    }

    /// For `codel` (sch_codel.c leaves ECN off).
    pub fn resolve(&self, mtu: u32) -> CodelParams {
        self.resolve_with(mtu, false)
    }
}

impl Discipline for CodelConfig {
    /// One FIFO: drops (at arrival or, at dequeue, from the head) do not reorder.
    const ARRIVAL_ORDER: bool = true;

    fn build(&self, setup: &Setup, _rng: SimRng) -> Box<dyn Qdisc> {
        Box::new(PeekDequeued::new(Codel::new(setup.limit, self.resolve(setup.mtu))))
    }
}

/// `REC_INV_SQRT_BITS`: rec_inv_sqrt is a 16-bit fraction.
const REC_INV_SQRT_BITS: u32 = 16;
/// `REC_INV_SQRT_SHIFT`: from Q0.16 to Q0.32.
const REC_INV_SQRT_SHIFT: u32 = 32 - REC_INV_SQRT_BITS;
/// A re-entry into the dropping state within this many intervals of the last drop resumes
/// with the previous drop rate (RFC 8289 section 5.5; `16 * params->interval`).
const REENTRY_INTERVALS: Nanos = 16;

/// `struct codel_params`, resolved.
#[derive(Debug, Clone, Copy)]
pub struct CodelParams {
    pub target: Nanos,
    pub interval: Nanos,
    /// Mark ECN-capable packets instead of dropping them.
    pub ecn: bool,
    /// Mark ECN-capable packets whose sojourn exceeds this (`ce_threshold`); `None` = off.
    pub ce_threshold: Option<Nanos>,
    /// No drop while the backlog is at most this many bytes (`params->mtu`, the device MTU).
    pub mtu: u64,
}

/// `struct codel_vars`.
#[derive(Debug, Clone, Copy)]
pub struct CodelVars {
    /// Drops (or marks) since entering the dropping state.
    pub count: u32,
    /// `count` when the dropping state was last entered.
    pub lastcount: u32,
    pub dropping: bool,
    /// 1/sqrt(count) in Q0.16.
    pub rec_inv_sqrt: u16,
    /// When the sojourn will have been above target for an interval; `None` while below.
    pub first_above_time: Option<Nanos>,
    /// Time of the next drop, or of the last one.
    pub drop_next: Nanos,
    /// Sojourn time of the last packet examined.
    pub ldelay: Nanos,
}

impl Default for CodelVars {
    fn default() -> Self {
        CodelVars { count: 0, lastcount: 0, dropping: false, rec_inv_sqrt: 0, first_above_time: None, drop_next: 0, ldelay: 0 }
    }
}

/// What [`codel_dequeue`] takes packets from: a FIFO, or one flow of fq_codel.
pub trait CodelSource {
    /// Removes the head packet (`dequeue_func`), updating the backlogs.
    fn pop(&mut self) -> Option<Queued>;
    /// The backlog CoDel compares with the MTU, after the pop (`sch->qstats.backlog`).
    fn backlog_bytes(&self) -> u64;
}

/// `codel_Newton_step`: rec_inv_sqrt <- rec_inv_sqrt * (3 - count * rec_inv_sqrt^2) / 2, in
/// fixed point with the same widths as Linux (u32 operands, u64 products, wrapping).
pub fn newton_step(v: &mut CodelVars) {
    let invsqrt = (v.rec_inv_sqrt as u32) << REC_INV_SQRT_SHIFT;
    let invsqrt2 = ((invsqrt as u64 * invsqrt as u64) >> 32) as u32;
    let mut val = (3u64 << 32).wrapping_sub((v.count as u64).wrapping_mul(invsqrt2 as u64));
    val >>= 2; // keeps the next product within 64 bits
    val = val.wrapping_mul(invsqrt as u64) >> (32 - 2 + 1);
    v.rec_inv_sqrt = (val >> REC_INV_SQRT_SHIFT) as u16;
}

/// `codel_control_law`: t + interval / sqrt(count), via `reciprocal_scale`.
pub fn control_law(t: Nanos, interval: Nanos, rec_inv_sqrt: u16) -> Nanos {
    let scale = ((rec_inv_sqrt as u64) << REC_INV_SQRT_SHIFT) as u128;
    t + ((interval as u128 * scale) >> 32) as Nanos
}

/// `codel_should_drop`: whether the head packet `q` (just taken out) may be dropped.
fn should_drop(q: Option<&Queued>, v: &mut CodelVars, p: &CodelParams, backlog: u64, now: Nanos) -> bool {
    let Some(q) = q else {
        v.first_above_time = None;
        return false;
    };
    v.ldelay = now - q.enqueued_at;
    if v.ldelay < p.target || backlog <= p.mtu {
        // Below target (or almost nothing queued): stay out for at least an interval.
        v.first_above_time = None;
        return false;
    }
    match v.first_above_time {
        None => {
            v.first_above_time = Some(now + p.interval);
            false
        }
        Some(t) => now > t,
    }
}

/// `codel_dequeue`: the next packet from `src` after CoDel's drops (or marks), reported to
/// `c` with cause [`DropCause::Aqm`] / [`MarkCause::Aqm`]; ce_threshold marks as
/// [`MarkCause::Threshold`].
pub fn codel_dequeue<S: CodelSource>(src: &mut S, now: Nanos, p: &CodelParams, v: &mut CodelVars, c: &mut Counters) -> Option<Queued> {
    let mut skb = src.pop();
    if skb.is_none() {
        v.dropping = false;
        return None;
    }
    let drop = should_drop(skb.as_ref(), v, p, src.backlog_bytes(), now);
    if v.dropping {
        if !drop {
            v.dropping = false;
        } else if now >= v.drop_next {
            // Time for the next drop; a large backlog may make several due at once.
            while v.dropping && now >= v.drop_next {
                v.count = v.count.wrapping_add(1);
                newton_step(v);
                let q = skb.as_mut().expect("a packet while dropping");
                if p.ecn && c.mark(&mut q.pkt, MarkCause::Aqm) {
                    v.drop_next = control_law(v.drop_next, p.interval, v.rec_inv_sqrt);
                    return threshold_mark(skb, v, p, c);
                }
                c.drop_queued(&q.pkt, DropCause::Aqm);
                skb = src.pop();
                if !should_drop(skb.as_ref(), v, p, src.backlog_bytes(), now) {
                    v.dropping = false;
                } else {
                    v.drop_next = control_law(v.drop_next, p.interval, v.rec_inv_sqrt);
                }
            }
        }
    } else if drop {
        let q = skb.as_mut().expect("checked above");
        if !(p.ecn && c.mark(&mut q.pkt, MarkCause::Aqm)) {
            c.drop_queued(&q.pkt, DropCause::Aqm);
            skb = src.pop();
            should_drop(skb.as_ref(), v, p, src.backlog_bytes(), now);
        }
        v.dropping = true;
        // Re-entering soon after the last dropping state: resume near its drop rate.
        let delta = v.count.wrapping_sub(v.lastcount);
        if delta > 1 && now - v.drop_next < REENTRY_INTERVALS * p.interval {
            v.count = delta;
            newton_step(v);
        } else {
            v.count = 1;
            v.rec_inv_sqrt = u16::MAX;
        }
        v.lastcount = v.count;
        v.drop_next = control_law(now, p.interval, v.rec_inv_sqrt);
    }
    threshold_mark(skb, v, p, c)
}

/// The `end:` of `codel_dequeue`: the ce_threshold step mark.
fn threshold_mark(mut skb: Option<Queued>, v: &CodelVars, p: &CodelParams, c: &mut Counters) -> Option<Queued> {
    if let (Some(q), Some(th)) = (skb.as_mut(), p.ce_threshold) {
        if v.ldelay > th {
            c.mark(&mut q.pkt, MarkCause::Threshold);
        }
    }
    skb
}

/// The `codel` discipline (sch_codel.c): one FIFO under CoDel.
pub struct Codel {
    limit: Limit,
    params: CodelParams,
    vars: CodelVars,
    fifo: Fifo,
}

impl CodelSource for Fifo {
    fn pop(&mut self) -> Option<Queued> {
        Fifo::pop(self)
    }
    fn backlog_bytes(&self) -> u64 {
        self.bytes()
    }
}

impl Codel {
    pub fn new(limit: Limit, params: CodelParams) -> Self {
        Codel { limit, params, vars: CodelVars::default(), fifo: Fifo::default() }
    }

    pub fn vars(&self) -> &CodelVars {
        &self.vars
    }
}

impl DequeueDecides for Codel {
    /// `codel_qdisc_enqueue`: tail drop beyond the limit (`drop_overlimit`), else stamp and queue.
    fn enqueue(&mut self, _now: Nanos, q: Queued, held: (u64, u64), c: &mut Counters) {
        if self.fifo.fits(&self.limit, &q, held) {
            self.fifo.push(q);
        } else {
            c.drop_queued(&q.pkt, DropCause::Overflow);
        }
    }

    fn dequeue(&mut self, now: Nanos, c: &mut Counters) -> Option<Queued> {
        codel_dequeue(&mut self.fifo, now, &self.params, &mut self.vars, c)
    }

    fn backlog(&self) -> (u64, u64) {
        self.fifo.backlog()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newton_step_converges_to_the_inverse_square_root() {
        let mut v = CodelVars { rec_inv_sqrt: u16::MAX, count: 1, ..Default::default() };
        for count in 2..=100u32 {
            v.count = count;
            // Linux takes one step per increment of count; repeated steps settle on the root.
            for _ in 0..8 {
                newton_step(&mut v);
            }
            let got = v.rec_inv_sqrt as f64 / 65536.0;
            let want = 1.0 / (count as f64).sqrt();
            assert!((got - want).abs() < 3e-3, "count {count}: {got} vs {want}");
        }
    }

    #[test]
    fn control_law_spaces_drops_by_interval_over_sqrt_count() {
        // count = 4 -> interval / 2.
        let mut v = CodelVars { rec_inv_sqrt: u16::MAX, count: 4, ..Default::default() };
        for _ in 0..6 {
            newton_step(&mut v);
        }
        let next = control_law(1_000, 100_000_000, v.rec_inv_sqrt);
        assert!((next - 1_000 - 50_000_000).abs() < 100_000, "{next}");
    }
}
