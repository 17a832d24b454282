//! PIE, Proportional Integral controller Enhanced (RFC 8033), as Linux `net/sched/sch_pie.c`
//! with its default timestamp mode (`dq_rate_estimator` off: the queuing delay is the head
//! packet's sojourn, RFC 8033 section 5.2's alternative).
//!
//! The model: every `tupdate` the drop probability moves by
//! `alpha (qdelay - target) + beta (qdelay - qdelay_old)` (section 4.2, `pie_calculate_probability`),
//! with alpha and beta scaled down while p is small (/2 below 10 %, then /4 per decade down
//! to 10^-6) and the step capped at 2 % once p >= 10 %; p also rises 2 % per update while the
//! delay exceeds 250 ms and decays by 1/64 after two updates of an empty queue. Arrivals are
//! dropped at random with p (section 4.1, `pie_drop_early`), except during the 150 ms burst
//! allowance, when the delay is below half the target and p below 20 %, or with less than two
//! MTUs queued; Linux's derandomisation (`accu_prob`: never before the accumulated
//! probability reaches 0.85, always at 8.5) is kept. With `ecn`, ECN-capable packets are
//! marked instead while p <= 10 %.
//!
//! Defaults as `pie_params_init`: target 15 ms, tupdate 15 ms, alpha 2 and beta 20 (in 1/16,
//! i.e. 0.125 and 1.25 per second as the RFC), ECN off, bytemode off; the first update 500 ms
//! after start. The packet `limit` is the trial's queue.
//!
//! Deviations: probabilities are floating point rather than fractions of 2^56; Linux's
//! `tupdate` is rounded up to whole jiffies (HZ = 250: 15 ms becomes 16 ms), which is kept, but
//! time is otherwise in nanoseconds, not 64 ns psched ticks; the timer's updates are applied
//! lazily at the next enqueue or dequeue, in order, with the backlog they would have seen
//! (it only changes at those events, so the result is the same); random numbers come from the
//! trial seed.

use super::param::{Kind, Param};
use super::{Counters, Discipline, DropCause, Limit, MarkCause, Qdisc, Queued, Setup};
use crate::rng::SimRng;
use super::fifo::Fifo;
use crate::time::Nanos;

/// One jiffy: PIE's timer runs in jiffies (`usecs_to_jiffies(tupdate)`).
const JIFFY_NS: Nanos = crate::jiffies::jiffy_ns(crate::jiffies::CONFIG_HZ);
/// The first probability update is HZ/2 after the discipline starts (`pie_init`).
const FIRST_UPDATE_NS: Nanos = 500_000_000;
/// `pie_vars_init`: burst allowance of 150 ms (RFC 8033 MAX_BURST).
const MAX_BURST_NS: Nanos = 150_000_000;
/// Above this delay p grows by 2 % per update regardless (section 4.2's non-linear boost).
const QDELAY_BOOST_NS: Nanos = 250_000_000;

/// `pie_params_init`: target 15 ms, tupdate 15 ms, alpha 2/16, beta 20/16.
const TARGET_NS: Nanos = 15_000_000;
const TUPDATE_NS: Nanos = 15_000_000;
const ALPHA: u32 = 2;
const BETA: u32 = 20;

crate::qdisc_params! {
    /// `tc qdisc ... pie`: Proportional Integral controller Enhanced (RFC 8033), a drop
    /// probability updated from the queueing delay, applied as packets arrive.
    pub struct PieConfig {
        /// The queueing delay PIE aims at.
        target_ns: Nanos = Param::new("target", Kind::Time).min(1.0).default(TARGET_NS as f64),
        /// Time between two updates of the drop probability (whole jiffies, rounded up).
        tupdate_ns: Nanos = Param::new("tupdate", Kind::Time).min(1.0).default(TUPDATE_NS as f64),
        /// Weight of the delay's distance from target in each update.
        alpha: u32 = Param::new("alpha", Kind::Whole).range(0.0, 32.0).unit("sixteenths").default(ALPHA as f64),
        /// Weight of the delay's change since the last update.
        beta: u32 = Param::new("beta", Kind::Whole).range(0.0, 32.0).unit("sixteenths").default(BETA as f64),
        /// Mark ECN-capable packets instead of dropping them while the probability is at most 10 %.
        ecn: bool = Param::new("ecn", Kind::Flag).default_flag(false),
        /// Scale the probability by packet size.
        bytemode: bool = Param::new("bytemode", Kind::Flag).default_flag(false),
    }
}

impl Discipline for PieConfig {
    /// One FIFO: drops (at arrival or, at dequeue, from the head) do not reorder.
    const ARRIVAL_ORDER: bool = true;

    fn build(&self, setup: &Setup, rng: SimRng) -> Box<dyn Qdisc> {
        Box::new(Pie::new(setup.limit, PieParams::resolve(self, setup.mtu), rng))
    }
}

#[derive(Debug, Clone, Copy)]
pub struct PieParams {
    pub target: Nanos,
    pub tupdate: Nanos,
    /// alpha and beta in 1/16 (Linux's integers, 0-32).
    pub alpha: u32,
    pub beta: u32,
    pub ecn: bool,
    pub bytemode: bool,
    pub mtu: u64,
}

impl PieParams {
    pub fn resolve(cfg: &PieConfig, mtu: u32) -> Self {
        let tupdate = cfg.tupdate_ns.unwrap_or(TUPDATE_NS);
        PieParams {
            target: cfg.target_ns.unwrap_or(TARGET_NS),
            tupdate: ((tupdate + JIFFY_NS - 1) / JIFFY_NS).max(1) * JIFFY_NS,
            alpha: cfg.alpha.unwrap_or(ALPHA),
            beta: cfg.beta.unwrap_or(BETA),
            ecn: cfg.ecn.unwrap_or(false),
            bytemode: cfg.bytemode.unwrap_or(false),
            mtu: mtu as u64,
        }
    }
}

/// `struct pie_vars` (timestamp mode).
#[derive(Debug, Clone)]
pub struct PieVars {
    pub prob: f64,
    pub qdelay: Nanos,
    pub qdelay_old: Nanos,
    pub burst_time: Nanos,
    dq_tstamp: Option<Nanos>,
    accu_prob: f64,
}

impl PieVars {
    fn new() -> Self {
        PieVars { prob: 0.0, qdelay: 0, qdelay_old: 0, burst_time: MAX_BURST_NS, dq_tstamp: None, accu_prob: 0.0 }
    }

    /// `pie_vars_init` on a restart (p is already 0 then).
    fn restart(&mut self) {
        self.burst_time = MAX_BURST_NS;
        self.dq_tstamp = None;
        self.accu_prob = 0.0;
    }
}

/// `pie_calculate_probability` (timestamp mode) for a queue of `backlog` bytes.
pub fn calculate_probability(p: &PieParams, v: &mut PieVars, backlog: u64) {
    let qdelay = v.qdelay;
    let qdelay_old = v.qdelay_old;
    // A zero delay with packets queued: too little queue to judge, keep p this round.
    let mut update_prob = !(qdelay == 0 && backlog != 0);
    let mut alpha = p.alpha as f64 / 16.0;
    let mut beta = p.beta as f64 / 16.0;
    if v.prob < 0.1 {
        alpha /= 2.0;
        beta /= 2.0;
        let mut power = 100.0;
        while v.prob < 1.0 / power && power <= 1e6 {
            alpha /= 4.0;
            beta /= 4.0;
            power *= 10.0;
        }
    }
    let secs = |ns: Nanos| ns as f64 / 1e9;
    let mut delta = alpha * secs(qdelay - p.target) + beta * secs(qdelay - qdelay_old);
    // Steps of at most 2 % once p is 10 % or more.
    if delta > 0.02 && v.prob >= 0.1 {
        delta = 0.02;
    }
    if qdelay > QDELAY_BOOST_NS {
        delta += 0.02;
    }
    v.prob += delta;
    if v.prob > 1.0 {
        v.prob = 1.0;
        update_prob = false;
    } else if v.prob < 0.0 {
        v.prob = 0.0;
    }
    // Two updates in a row with an empty queue: decay p quickly.
    if qdelay == 0 && qdelay_old == 0 && update_prob {
        v.prob -= v.prob / 64.0;
    }
    v.qdelay = qdelay;
    if qdelay < p.target / 2 && v.qdelay_old < p.target / 2 && v.prob == 0.0 {
        v.restart();
    }
    v.qdelay_old = qdelay;
}

pub struct Pie {
    limit: Limit,
    pub params: PieParams,
    pub vars: PieVars,
    fifo: Fifo,
    next_update: Nanos,
    rng: SimRng,
}

impl Pie {
    pub fn new(limit: Limit, params: PieParams, rng: SimRng) -> Self {
        Pie { limit, params, vars: PieVars::new(), fifo: Fifo::default(), next_update: FIRST_UPDATE_NS, rng }
    }

    /// The timer's updates due by `now`, each with the backlog it would have seen.
    fn catch_up(&mut self, now: Nanos) {
        while self.next_update <= now {
            calculate_probability(&self.params, &mut self.vars, self.fifo.bytes());
            self.next_update += self.params.tupdate;
        }
    }

    /// `pie_drop_early`.
    fn drop_early(&mut self, size: u32) -> bool {
        let v = &mut self.vars;
        if v.burst_time > 0 {
            return false;
        }
        if v.qdelay < self.params.target / 2 && v.prob < 0.2 {
            return false;
        }
        if self.fifo.bytes() < 2 * self.params.mtu {
            return false;
        }
        let local = if self.params.bytemode && (size as u64) <= self.params.mtu {
            v.prob * size as f64 / self.params.mtu as f64
        } else {
            v.prob
        };
        if local == 0.0 {
            v.accu_prob = 0.0;
        } else {
            v.accu_prob += local;
        }
        if v.accu_prob < 0.85 {
            return false;
        }
        if v.accu_prob >= 8.5 {
            return true;
        }
        if self.rng.uniform() < local {
            v.accu_prob = 0.0;
            return true;
        }
        false
    }
}

impl Qdisc for Pie {
    /// `pie_qdisc_enqueue`.
    fn enqueue(&mut self, now: Nanos, mut q: Queued, c: &mut Counters) {
        self.catch_up(now);
        if !self.fifo.fits(&self.limit, &q, (0, 0)) {
            self.vars.accu_prob = 0.0;
            c.drop_queued(&q.pkt, DropCause::Overflow);
            return;
        }
        let admit = !self.drop_early(q.pkt.size)
            || (self.params.ecn && self.vars.prob <= 0.1 && c.mark(&mut q.pkt, MarkCause::Aqm));
        if admit {
            self.fifo.push(q);
        } else {
            self.vars.accu_prob = 0.0;
            c.drop_queued(&q.pkt, DropCause::Aqm);
        }
    }

    /// `pie_qdisc_dequeue` and `pie_process_dequeue` (timestamp mode).
    fn dequeue(&mut self, now: Nanos, _c: &mut Counters) -> Option<Queued> {
        self.catch_up(now);
        let q = self.fifo.pop()?;
        let v = &mut self.vars;
        v.qdelay = now - q.enqueued_at;
        let dtime = v.dq_tstamp.map_or(0, |t| now - t);
        v.dq_tstamp = Some(now);
        if self.fifo.bytes() == 0 {
            v.qdelay = 0;
        }
        if dtime > 0 && v.burst_time > 0 {
            v.burst_time = (v.burst_time - dtime).max(0);
        }
        Some(q)
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

    fn params() -> PieParams {
        PieParams::resolve(&PieConfig::default(), 1500)
    }

    #[test]
    fn tupdate_is_rounded_to_jiffies_as_linux_does() {
        assert_eq!(params().tupdate, 16_000_000);
        assert_eq!(params().target, 15_000_000);
    }

    /// RFC 8033 section 4.2: a standing delay above target raises p in proportion, with the
    /// gains scaled down while p is small (auto-tuning); at target p stops moving.
    #[test]
    fn probability_integrates_the_delay_error_with_auto_tuned_gains() {
        let p = params();
        let mut v = PieVars::new();
        v.qdelay = 35_000_000; // 20 ms above target
        v.qdelay_old = 35_000_000;
        calculate_probability(&p, &mut v, 100_000);
        // p = 0 < 1e-6: alpha = 0.125 / 2048 per second; x 0.02 s.
        let expect = 0.125 / 2048.0 * 0.02;
        assert!((v.prob - expect).abs() < 1e-12, "{}", v.prob);
        for _ in 0..2000 {
            v.qdelay = 35_000_000;
            calculate_probability(&p, &mut v, 100_000);
        }
        assert!(v.prob > 0.1, "p grows while the delay stays above target: {}", v.prob);
        let held = v.prob;
        v.qdelay = p.target;
        v.qdelay_old = p.target;
        calculate_probability(&p, &mut v, 100_000);
        assert!((v.prob - held).abs() < 1e-12, "at target p holds");
    }
}
