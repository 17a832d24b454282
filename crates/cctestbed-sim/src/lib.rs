//! # cctestbed-sim: a deterministic packet-level dumbbell simulator
//!
//! Layers, bottom up:
//! - [`event`]: the event queue ordered by (time, insertion) and lazily re-armed timers;
//! - [`link`]: delay lines and the bottleneck router (random loss, token-bucket shaper and
//!   policer, capacity schedule), the one queue model; [`qdisc`]: its queue disciplines
//!   (drop-tail, CoDel, FQ-CoDel, RED, PIE, fq, DualPI2), drop and mark causes;
//! - [`nic`]: the receiving hosts' interface (interrupt coalescing, NAPI polls, GRO);
//! - [`tcp`]: sender (SACK scoreboard, RACK loss detection, PRR, RTO, pacing, delivery-rate
//!   sampling) and receiver (cumulative + SACK ACKs, delayed ACKs);
//! - [`cc`]: the congestion-control interface and the algorithms; [`jiffies`]: the kernel's
//!   tick clock, which several of them read;
//! - [`datagram`]: udp streams (constant bit rate, on/off) and ping probes beside the TCP flows;
//! - [`sim`]: the dumbbell wiring and event loop; [`telemetry`]: columnar time series;
//! - [`capture`]: the traffic written as pcap files, and captures read back into series;
//! - [`config`]: the trial as the front end hands it over, assembled from the settings each part
//!   above owns (with their defaults, checks and resolution); a [`problem`] names a setting's
//!   path and what is wrong with it.
//!
//! Time is integer nanoseconds ([`time::Nanos`]); all randomness comes from the trial seed through per-component
//! ChaCha streams ([`rng`]), so the same configuration gives the same output, bit for bit.

pub mod capture;
pub mod cc;
pub mod config;
pub mod datagram;
pub mod event;
pub mod jiffies;
pub mod link;
pub mod nic;
pub mod packet;
pub mod problem;
pub mod qdisc;
pub mod ranges;
pub mod rng;
pub mod sim;
pub mod tcp;
pub mod telemetry;
pub mod time;

pub use config::SimConfig;
pub use sim::{SimOutput, Simulation};

/// Validates and runs one trial.
pub fn simulate(cfg: SimConfig) -> Result<SimOutput, Vec<problem::Problem>> {
    Ok(Simulation::new(cfg)?.run())
}
