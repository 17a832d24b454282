//! Deterministic randomness: every component draws from its own ChaCha stream derived from
//! the trial seed, so adding a draw in one component never shifts another's sequence.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha12Rng;

/// Stream identifiers: one per component kind, offset by the flow index where per flow.
pub mod stream {
    pub const LINK_LOSS: u64 = 1;
    /// The bottleneck's queue discipline (fq_codel's hash perturbation, RED's and PIE's draws).
    pub const QDISC: u64 = 2;
    /// The reverse bottleneck's random loss and queue discipline (`link.reverse`).
    pub const REV_LINK_LOSS: u64 = 3;
    pub const REV_QDISC: u64 = 4;
    /// Per-flow ACK-path jitter: JITTER_BASE + flow index.
    pub const JITTER_BASE: u64 = 1 << 16;
    /// Per-flow ACK aggregation (Wi-Fi channel access), streams ACK_AGG_BASE + flow.
    pub const ACK_AGG_BASE: u64 = 1 << 28;
    /// Per-flow datagram on/off periods: DATAGRAM_BASE + flow index.
    pub const DATAGRAM_BASE: u64 = 1 << 24;
    pub const CC_BASE: u64 = 1 << 32;
    /// The phase of the kernel's tick clock against the trial's start (`jiffies::TickClock`).
    pub const TICK_PHASE: u64 = 5;
    /// The kernel's jiffies count at the trial's start, for the timer wheel's coarse levels
    /// (`jiffies::TickClock::wheel_base`).
    pub const TIMER_WHEEL: u64 = 6;
}

#[derive(Clone, Debug)]
pub struct SimRng(ChaCha12Rng);

impl SimRng {
    pub fn new(seed: u64, stream: u64) -> Self {
        let mut r = ChaCha12Rng::seed_from_u64(seed);
        r.set_stream(stream);
        SimRng(r)
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        self.0.gen::<f64>()
    }

    /// Uniform integer in [0, n).
    pub fn below(&mut self, n: u32) -> u32 {
        self.0.gen_range(0..n)
    }

    pub fn bernoulli(&mut self, p: f64) -> bool {
        p > 0.0 && self.uniform() < p
    }
}
