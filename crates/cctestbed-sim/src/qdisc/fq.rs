//! FQ, Linux's fair-queue packet scheduler (`net/sched/sch_fq.c`, `tc-fq`), as it behaves on a
//! router's egress.
//!
//! Forwarded packets carry no socket and no departure time, so `fq_classify` files them under
//! an "orphan" flow chosen by the packet hash masked with `orphan_mask` (1024 buckets), and
//! `fq_dequeue` neither paces nor throttles them (no `sk_pacing_rate`, `flow_max_rate`
//! unlimited): what remains is deficit round robin over per-flow queues. A flow that becomes
//! active joins *new flows* (a new flow with `initial_quantum` of credit, a flow idle for more
//! than `flow_refill_delay` with at least one `quantum`); dequeue serves new flows before old
//! ones, a flow whose credit is spent gets a quantum and moves to the tail of *old flows*, and a
//! new flow that empties passes through old flows once before it is detached. Each flow holds
//! at most `flow_limit` packets (arrivals beyond are dropped, `flows_plimit`); the trial's
//! queue is the discipline's `limit`. With `ce_threshold`, packets that waited longer are
//! CE-marked at dequeue. There is no AQM otherwise.
//!
//! Defaults as `fq_init`: `flow_limit` 100 packets, `quantum` 2 MTU, `initial_quantum` 10 MTU,
//! `flow_refill_delay` 40 ms, `ce_threshold` off.
//!
//! Deviations: the three priority bands are not modelled (all traffic here has priority 0,
//! band 1); the flow hash is the same seeded mixing function as fq_codel's (see there); flow
//! garbage collection is not needed (flows are few and fixed); pacing of locally generated
//! traffic, fq's main use on a sending host, is the TCP sender's own
//! ([`crate::tcp::sender`]).

use super::flows::{mix, perturbation, Rounds};
use super::param::{Kind, Param};
use super::{Counters, DequeueDecides, Discipline, DropCause, Limit, MarkCause, PeekDequeued, Qdisc, Queued, Setup};
use crate::rng::SimRng;
use crate::time::Nanos;
use std::collections::VecDeque;

/// `fq_init` defaults.
const FLOW_LIMIT: u32 = 100;
const REFILL_DELAY_NS: Nanos = 40_000_000;

crate::qdisc_params! {
    /// `tc qdisc ... fq`: Linux's fair-queue scheduler, deficit round robin over per-flow queues
    /// (forwarded packets are not paced).
    pub struct FqConfig {
        /// Most packets one flow may hold.
        flow_limit: u32 = Param::new("flow_limit", Kind::Count).range(1.0, u32::MAX as f64).default(FLOW_LIMIT as f64),
        /// Bytes a flow may send per round.
        quantum: u32 = Param::new("quantum", Kind::Size).range(256.0, u32::MAX as f64).derived("2 x the device MTU"),
        /// Credit of a flow seen for the first time, bytes.
        initial_quantum: u32 = Param::new("initial_quantum", Kind::Size).range(1.0, u32::MAX as f64).derived("10 x the device MTU"),
        /// Idle time after which a flow gets at least a quantum of credit back.
        flow_refill_delay_ns: Nanos = Param::new("refill_delay", Kind::Time).min(0.0).default(REFILL_DELAY_NS as f64),
        /// Mark ECN-capable packets that waited longer than this.
        ce_threshold_ns: Nanos = Param::new("ce_threshold", Kind::Time).min(0.0),
    }
}

impl Discipline for FqConfig {
    /// Per-flow queues served in turn: each flow keeps its order, the link does not.
    const ARRIVAL_ORDER: bool = false;

    fn build(&self, setup: &Setup, rng: SimRng) -> Box<dyn Qdisc> {
        Box::new(PeekDequeued::new(Fq::new(setup.limit, self, setup.mtu, rng)))
    }
}

/// `orphan_mask` default: 1024 buckets.
const ORPHAN_MASK: u64 = 1024 - 1;

struct Flow {
    q: VecDeque<Queued>,
    /// When the flow was last detached (`f->age`); `None` for a flow never seen.
    age: Option<Nanos>,
}

pub struct Fq {
    limit: Limit,
    flow_plimit: u64,
    initial_quantum: i64,
    flow_refill_delay: Nanos,
    ce_threshold: Option<Nanos>,
    flows: Vec<Flow>,
    rounds: Rounds,
    qlen: u64,
    bytes: u64,
    perturbation: u64,
}

impl Fq {
    pub fn new(limit: Limit, cfg: &FqConfig, mtu: u32, mut rng: SimRng) -> Self {
        Fq {
            limit,
            flow_plimit: cfg.flow_limit.unwrap_or(FLOW_LIMIT) as u64,
            initial_quantum: cfg.initial_quantum.unwrap_or(10 * mtu) as i64,
            flow_refill_delay: cfg.flow_refill_delay_ns.unwrap_or(REFILL_DELAY_NS),
            ce_threshold: cfg.ce_threshold_ns,
            flows: (0..=ORPHAN_MASK).map(|_| Flow { q: VecDeque::new(), age: None }).collect(),
            rounds: Rounds::new(ORPHAN_MASK as usize + 1, cfg.quantum.unwrap_or(2 * mtu) as i64),
            qlen: 0,
            bytes: 0,
            perturbation: perturbation(&mut rng),
        }
    }

    /// `fq_dequeue` without pacing (no socket, no EDT time on forwarded packets).
    fn dequeue_fq(&mut self, now: Nanos, c: &mut Counters) -> Option<Queued> {
        loop {
            let (from_new, idx) = self.rounds.next()?;
            match self.flows[idx].q.pop_front() {
                Some(mut q) => {
                    self.qlen -= 1;
                    self.bytes -= q.pkt.size as u64;
                    if let Some(th) = self.ce_threshold {
                        if now - q.enqueued_at > th {
                            c.mark(&mut q.pkt, MarkCause::Threshold);
                        }
                    }
                    self.rounds.spend(idx, q.pkt.size);
                    return Some(q);
                }
                // A new flow that empties passes through old flows once (starvation guard).
                None if from_new => self.rounds.rotate(from_new),
                None => {
                    self.rounds.detach(from_new);
                    self.flows[idx].age = Some(now);
                }
            }
        }
    }

    /// `fq_classify` for a packet without a socket: `skb_get_hash & orphan_mask`.
    pub fn classify(&self, flow: u32) -> usize {
        ((mix(flow as u64 ^ self.perturbation) >> 32) & ORPHAN_MASK) as usize
    }
}

/// Peeked as sch_fq peeks, `qdisc_peek_dequeued`.
impl DequeueDecides for Fq {
    /// `fq_enqueue`.
    fn enqueue(&mut self, now: Nanos, q: Queued, held: (u64, u64), c: &mut Counters) {
        let (n, b) = (self.qlen + held.0, self.bytes + held.1);
        if !self.limit.holds(n + 1, b + q.pkt.size as u64) {
            c.drop_queued(&q.pkt, DropCause::Overflow);
            return;
        }
        let idx = self.classify(q.pkt.flow);
        let f = &mut self.flows[idx];
        if f.q.len() as u64 >= self.flow_plimit {
            c.drop_queued(&q.pkt, DropCause::Overflow);
            return;
        }
        if !self.rounds.is_listed(idx) {
            match f.age {
                // A flow seen for the first time starts with the initial quantum.
                None => self.rounds.credit[idx] = self.initial_quantum,
                // One idle for long enough gets at least a quantum back.
                Some(age) if now > age + self.flow_refill_delay => {
                    self.rounds.credit[idx] = self.rounds.credit[idx].max(self.rounds.quantum())
                }
                Some(_) => {}
            }
            self.rounds.push_new(idx);
        }
        self.qlen += 1;
        self.bytes += q.pkt.size as u64;
        f.q.push_back(q);
    }

    fn dequeue(&mut self, now: Nanos, c: &mut Counters) -> Option<Queued> {
        self.dequeue_fq(now, c)
    }

    fn backlog(&self) -> (u64, u64) {
        (self.qlen, self.bytes)
    }
}
