//! A discipline for the tests only, to show what adding one takes: this file, and its line in
//! the registration list of [`super`]. It is drop-tail with a lower limit of its own, and so
//! needs nothing but its settings, their check and its build.

use super::fifo::DropTail;
use super::param::{Kind, Param};
use super::{Discipline, Limit, Qdisc, Setup};
use crate::rng::SimRng;

crate::qdisc_params! {
    /// `toy`: drop-tail at a packet limit of its own, below the trial's queue.
    pub struct ToyConfig {
        /// Most packets queued.
        packets: u64 = Param::new("packets", Kind::Count).range(1.0, 1000.0).default(10.0),
    }
}

impl Discipline for ToyConfig {
    /// Drop-tail: one FIFO.
    const ARRIVAL_ORDER: bool = true;

    fn build(&self, setup: &Setup, _rng: SimRng) -> Box<dyn Qdisc> {
        let packets = self.packets.unwrap_or(10).min(setup.limit.packets);
        Box::new(DropTail::new(Limit { packets, ..setup.limit }))
    }
}
