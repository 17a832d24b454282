//! FQ-CoDel, flow queueing with CoDel (RFC 8290), as Linux `net/sched/sch_fq_codel.c`.
//!
//! Packets are hashed to one of `flows` queues (RFC 8290 section 4.1.1; Linux
//! `fq_codel_hash`: the flow hash scaled to the table with `reciprocal_scale`); each queue is
//! a FIFO under its own CoDel state ([`super::codel`]). Queues with packets sit on one of two
//! round-robin lists: a queue that becomes active joins the tail of *new flows* with a deficit
//! of one `quantum`; dequeue serves new flows before old ones (section 4.2), a queue whose
//! deficit is spent gets another quantum and moves to the tail of *old flows*, and a new queue
//! that empties moves to old flows once (to prevent starvation) before it is forgotten.
//!
//! When the hard limit (the trial's `link.queue`) or `memory_limit` is exceeded on enqueue,
//! `fq_codel_drop` finds the queue with the largest byte backlog and drops from its head until
//! half that backlog is gone or `drop_batch` packets are dropped (section 4.1.3), then raises
//! that queue's CoDel `count` by the number dropped. These drops count as `overflow`.
//!
//! Defaults as `fq_codel_init`: 1024 flows, quantum = the device MTU, target 5 ms, interval
//! 100 ms, ECN on, no ce_threshold, drop_batch 64, memory_limit 32 MB.
//!
//! Deviations: the flow hash is a fixed mixing function of the simulator's flow id and a
//! perturbation drawn from the trial seed, standing in for Linux's `skb_get_hash` over the
//! 5-tuple with a boot-time random key (collisions happen with the same odds); memory use is
//! counted in packet bytes, not `skb->truesize`; lengths are IP bytes, so the default quantum
//! is the IP MTU (Linux's `psched_mtu` adds the Ethernet header to both quantum and packet
//! lengths, giving the same packets per round); no external classifiers or
//! `skb->priority` steering.

use super::flows::{mix, perturbation, Rounds};
use super::codel::{codel_dequeue, CodelConfig, CodelParams, CodelSource, CodelVars, INTERVAL_NS, TARGET_NS};
use super::param::{Kind, Param};
use super::{Counters, DequeueDecides, Discipline, DropCause, Limit, PeekDequeued, Qdisc, Queued, Setup};
use crate::rng::SimRng;
use crate::time::Nanos;
use std::collections::VecDeque;

/// `fq_codel_init` defaults.
const FLOWS: u32 = 1024;
const DROP_BATCH: u32 = 64;
const MEMORY_LIMIT: u64 = 32 << 20;

crate::qdisc_params! {
    /// `tc qdisc ... fq_codel`: flow queueing with CoDel (RFC 8290), a CoDel queue per flow
    /// hash served in deficit round robin, new flows first.
    pub struct FqCodelConfig {
        /// The sojourn time each queue's CoDel keeps packets under.
        target_ns: Nanos = Param::new("target", Kind::Time).min(1.0).default(TARGET_NS as f64),
        /// How long the sojourn may stay above target before CoDel acts.
        interval_ns: Nanos = Param::new("interval", Kind::Time).min(1.0).default(INTERVAL_NS as f64),
        /// Mark ECN-capable packets instead of dropping them.
        ecn: bool = Param::new("ecn", Kind::Flag).default_flag(true),
        /// Mark every ECN-capable packet whose sojourn exceeds this, whatever the control law says.
        ce_threshold_ns: Nanos = Param::new("ce_threshold", Kind::Time).min(0.0),
        /// Number of queues the flows hash into.
        flows: u32 = Param::new("flows", Kind::Count).range(1.0, 65536.0).default(FLOWS as f64),
        /// Bytes a queue may send per round.
        quantum: u32 = Param::new("quantum", Kind::Size).range(256.0, u32::MAX as f64).derived("the device MTU"),
        /// Most packets dropped at once from the fattest queue when over a limit.
        drop_batch: u32 = Param::new("drop_batch", Kind::Count).range(1.0, u32::MAX as f64).default(DROP_BATCH as f64),
        /// Bytes of packets the discipline may hold.
        memory_limit: u64 = Param::new("memory_limit", Kind::Size).range(1.0, (1u64 << 31) as f64).default(MEMORY_LIMIT as f64),
    }
}

impl FqCodelConfig {
    /// The CoDel part of the parameters.
    pub fn codel(&self) -> CodelConfig {
        CodelConfig { target_ns: self.target_ns, interval_ns: self.interval_ns, ecn: self.ecn, ce_threshold_ns: self.ce_threshold_ns }
    }
}

impl Discipline for FqCodelConfig {
    /// Per-flow queues served in turn: each flow keeps its order, the link does not.
    const ARRIVAL_ORDER: bool = false;

    fn build(&self, setup: &Setup, rng: SimRng) -> Box<dyn Qdisc> {
        Box::new(PeekDequeued::new(FqCodel::new(setup.limit, self, setup.mtu, rng)))
    }
}

#[derive(Default)]
struct FlowQueue {
    q: VecDeque<Queued>,
}

/// The borrowed state `codel_dequeue` pops from: one queue and the discipline's totals.
struct Source<'a> {
    flow: &'a mut FlowQueue,
    flow_backlog: &'a mut u64,
    memory_usage: &'a mut u64,
    qlen: &'a mut u64,
    backlog: &'a mut u64,
}

impl CodelSource for Source<'_> {
    /// `dequeue_func`.
    fn pop(&mut self) -> Option<Queued> {
        let q = self.flow.q.pop_front()?;
        let len = q.pkt.size as u64;
        *self.flow_backlog -= len;
        *self.memory_usage -= len;
        *self.qlen -= 1;
        *self.backlog -= len;
        Some(q)
    }
    fn backlog_bytes(&self) -> u64 {
        *self.backlog
    }
}

pub struct FqCodel {
    limit: Limit,
    params: CodelParams,
    drop_batch_size: u32,
    memory_limit: u64,
    flows: Vec<FlowQueue>,
    cvars: Vec<CodelVars>,
    /// Byte backlog per queue (`q->backlogs`).
    backlogs: Vec<u64>,
    rounds: Rounds,
    memory_usage: u64,
    qlen: u64,
    backlog: u64,
    perturbation: u64,
    /// Queues that became active (`new_flow_count`).
    pub new_flow_count: u64,
}

impl FqCodel {
    pub fn new(limit: Limit, cfg: &FqCodelConfig, mtu: u32, mut rng: SimRng) -> Self {
        let n = cfg.flows.unwrap_or(FLOWS) as usize;
        let perturbation = perturbation(&mut rng);
        FqCodel {
            limit,
            params: cfg.codel().resolve_with(mtu, true),
            drop_batch_size: cfg.drop_batch.unwrap_or(DROP_BATCH),
            memory_limit: cfg.memory_limit.unwrap_or(MEMORY_LIMIT),
            flows: (0..n).map(|_| FlowQueue::default()).collect(),
            cvars: vec![CodelVars::default(); n],
            backlogs: vec![0; n],
            rounds: Rounds::new(n, cfg.quantum.unwrap_or(mtu) as i64),
            memory_usage: 0,
            qlen: 0,
            backlog: 0,
            perturbation,
            new_flow_count: 0,
        }
    }

    /// `fq_codel_hash`: the flow's queue index, `reciprocal_scale(hash, flows_cnt)`.
    pub fn classify(&self, flow: u32) -> usize {
        let h = (mix(flow as u64 ^ self.perturbation) >> 32) as u32;
        ((h as u64 * self.flows.len() as u64) >> 32) as usize
    }

    /// Byte backlog of each queue that holds packets: (queue index, bytes).
    pub fn queue_backlogs(&self) -> impl Iterator<Item = (usize, u64)> + '_ {
        self.backlogs.iter().enumerate().filter(|(_, &b)| b > 0).map(|(i, &b)| (i, b))
    }

    /// `fq_codel_drop`: drop from the head of the fattest queue until half its backlog or
    /// `max_packets` are gone; returns the number dropped.
    fn drop_fattest(&mut self, max_packets: u32, c: &mut Counters) -> u32 {
        let mut idx = 0;
        let mut maxbacklog = 0;
        for (i, &b) in self.backlogs.iter().enumerate() {
            if b > maxbacklog {
                maxbacklog = b;
                idx = i;
            }
        }
        let threshold = maxbacklog >> 1;
        let mut len = 0u64;
        let mut i = 0u32;
        loop {
            let Some(q) = self.flows[idx].q.pop_front() else { break };
            len += q.pkt.size as u64;
            c.drop_queued(&q.pkt, DropCause::Overflow);
            i += 1;
            if i >= max_packets || len >= threshold {
                break;
            }
        }
        // A stronger signal from CoDel for this queue too.
        self.cvars[idx].count = self.cvars[idx].count.wrapping_add(i);
        self.backlogs[idx] -= len;
        self.memory_usage -= len;
        self.qlen -= i as u64;
        self.backlog -= len;
        i
    }
}

impl DequeueDecides for FqCodel {
    /// `fq_codel_enqueue`.
    fn enqueue(&mut self, _now: Nanos, q: Queued, held: (u64, u64), c: &mut Counters) {
        let idx = self.classify(q.pkt.flow);
        let len = q.pkt.size as u64;
        let flow = &mut self.flows[idx];
        flow.q.push_back(q);
        self.backlogs[idx] += len;
        self.backlog += len;
        if !self.rounds.is_listed(idx) {
            self.rounds.credit[idx] = self.rounds.quantum();
            self.rounds.push_new(idx);
            self.new_flow_count += 1;
        }
        self.memory_usage += len;
        let memory_limited = self.memory_usage > self.memory_limit;
        self.qlen += 1;
        if self.limit.holds(self.qlen + held.0, self.backlog + held.1) && !memory_limited {
            return;
        }
        self.drop_fattest(self.drop_batch_size, c);
    }

    /// `fq_codel_dequeue`.
    fn dequeue(&mut self, now: Nanos, c: &mut Counters) -> Option<Queued> {
        loop {
            let (from_new, idx) = self.rounds.next()?;
            let mut src = Source {
                flow: &mut self.flows[idx],
                flow_backlog: &mut self.backlogs[idx],
                memory_usage: &mut self.memory_usage,
                qlen: &mut self.qlen,
                backlog: &mut self.backlog,
            };
            let skb = codel_dequeue(&mut src, now, &self.params, &mut self.cvars[idx], c);
            match skb {
                // A new queue that empties passes through old flows once, so that a stream
                // of sparse new queues cannot starve the old ones.
                None if from_new && self.rounds.has_old() => self.rounds.rotate(from_new),
                None => self.rounds.detach(from_new),
                Some(q) => {
                    self.rounds.spend(idx, q.pkt.size);
                    return Some(q);
                }
            }
        }
    }

    fn backlog(&self) -> (u64, u64) {
        (self.qlen, self.backlog)
    }
}
