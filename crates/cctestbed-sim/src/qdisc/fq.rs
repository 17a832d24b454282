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

use super::{Counters, DropCause, Limit, MarkCause, Peeked, Qdisc, Queued};
use crate::config::FqConfig;
use crate::rng::SimRng;
use crate::time::Nanos;
use std::collections::VecDeque;

/// `orphan_mask` default: 1024 buckets.
const ORPHAN_MASK: u64 = 1024 - 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum List {
    New,
    Old,
}

struct Flow {
    q: VecDeque<Queued>,
    credit: i64,
    list: Option<List>,
    /// When the flow was last detached (`f->age`); `None` for a flow never seen.
    age: Option<Nanos>,
}

pub struct Fq {
    limit: Limit,
    flow_plimit: u64,
    quantum: i64,
    initial_quantum: i64,
    flow_refill_delay: Nanos,
    ce_threshold: Option<Nanos>,
    flows: Vec<Flow>,
    new_flows: VecDeque<usize>,
    old_flows: VecDeque<usize>,
    qlen: u64,
    bytes: u64,
    perturbation: u64,
    peeked: Peeked,
}

/// SplitMix64's finaliser, as fq_codel's flow hash.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl Fq {
    pub fn new(limit: Limit, cfg: &FqConfig, mtu: u32, mut rng: SimRng) -> Self {
        let perturbation = ((rng.below(u32::MAX) as u64) << 32) | rng.below(u32::MAX) as u64;
        Fq {
            limit,
            flow_plimit: cfg.flow_limit.unwrap_or(100) as u64,
            quantum: cfg.quantum.unwrap_or(2 * mtu) as i64,
            initial_quantum: cfg.initial_quantum.unwrap_or(10 * mtu) as i64,
            flow_refill_delay: cfg.flow_refill_delay_ns.unwrap_or(40_000_000),
            ce_threshold: cfg.ce_threshold_ns,
            flows: (0..=ORPHAN_MASK).map(|_| Flow { q: VecDeque::new(), credit: 0, list: None, age: None }).collect(),
            new_flows: VecDeque::new(),
            old_flows: VecDeque::new(),
            qlen: 0,
            bytes: 0,
            perturbation,
            peeked: Peeked::default(),
        }
    }

    /// `fq_dequeue` without pacing (no socket, no EDT time on forwarded packets).
    fn dequeue_inner(&mut self, now: Nanos, c: &mut Counters) -> Option<Queued> {
        loop {
            let (from_new, idx) = match (self.new_flows.front(), self.old_flows.front()) {
                (Some(&i), _) => (true, i),
                (None, Some(&i)) => (false, i),
                (None, None) => return None,
            };
            let pop_head = |s: &mut Self| {
                if from_new {
                    s.new_flows.pop_front();
                } else {
                    s.old_flows.pop_front();
                }
            };
            if self.flows[idx].credit <= 0 {
                self.flows[idx].credit += self.quantum;
                pop_head(self);
                self.old_flows.push_back(idx);
                self.flows[idx].list = Some(List::Old);
                continue;
            }
            match self.flows[idx].q.pop_front() {
                Some(mut q) => {
                    self.qlen -= 1;
                    self.bytes -= q.pkt.size as u64;
                    if let Some(th) = self.ce_threshold {
                        if now - q.enqueued_at > th {
                            c.mark(&mut q.pkt, MarkCause::Threshold);
                        }
                    }
                    self.flows[idx].credit -= q.pkt.size as i64;
                    return Some(q);
                }
                None => {
                    pop_head(self);
                    // A new flow that empties passes through old flows once (starvation guard).
                    if from_new {
                        self.old_flows.push_back(idx);
                        self.flows[idx].list = Some(List::Old);
                    } else {
                        self.flows[idx].list = None;
                        self.flows[idx].age = Some(now);
                    }
                }
            }
        }
    }

    /// `fq_classify` for a packet without a socket: `skb_get_hash & orphan_mask`.
    pub fn classify(&self, flow: u32) -> usize {
        ((mix(flow as u64 ^ self.perturbation) >> 32) & ORPHAN_MASK) as usize
    }
}

impl Qdisc for Fq {
    fn kind(&self) -> &'static str {
        "fq"
    }

    /// `fq_enqueue`.
    fn enqueue(&mut self, now: Nanos, q: Queued, c: &mut Counters) {
        let (n, b) = self.backlog();
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
        if f.list.is_none() {
            match f.age {
                // A flow seen for the first time starts with the initial quantum.
                None => f.credit = self.initial_quantum,
                // One idle for long enough gets at least a quantum back.
                Some(age) if now > age + self.flow_refill_delay => f.credit = f.credit.max(self.quantum),
                Some(_) => {}
            }
            f.list = Some(List::New);
            self.new_flows.push_back(idx);
        }
        self.qlen += 1;
        self.bytes += q.pkt.size as u64;
        f.q.push_back(q);
    }

    fn dequeue(&mut self, now: Nanos, c: &mut Counters) -> Option<Queued> {
        if let Some(q) = self.peeked.take() {
            return Some(q);
        }
        self.dequeue_inner(now, c)
    }

    /// `qdisc_peek_dequeued`, as sch_fq uses: dequeue and hold the packet.
    fn peek(&mut self, now: Nanos, c: &mut Counters) -> Option<&Queued> {
        if self.peeked.len().0 == 0 {
            let q = self.dequeue_inner(now, c);
            return self.peeked.get_or_fill(|| q);
        }
        self.peeked.get_or_fill(|| None)
    }

    fn backlog(&self) -> (u64, u64) {
        let (pn, pb) = self.peeked.len();
        (self.qlen + pn, self.bytes + pb)
    }
}
