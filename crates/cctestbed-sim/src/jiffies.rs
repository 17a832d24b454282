//! The kernel's tick clock: `jiffies`, CONFIG_HZ ticks a second.
//!
//! Linux keeps several TCP clocks in jiffies rather than microseconds: CUBIC's epoch
//! (`tcp_cubic.c`), the receiver's delayed-ACK timer and ATO (`tcp_input.c`, `tcp_timer.c`),
//! and BBR's min_rtt and PROBE_RTT stamps (`tcp_bbr.c`: `tcp_jiffies32`, `msecs_to_jiffies`).
//! A comparison such as `after(tcp_jiffies32, stamp)` is then only true from the tick after
//! the stamp's, so a 200 ms PROBE_RTT hold whose ACKs arrive in bursts one 100 ms round trip
//! apart ends on the third burst, not on the second (the tick-rounding gives 200 ms + up to
//! one jiffy). The models use these helpers wherever their source uses jiffies.
//!
//! The tick boundaries fall at an arbitrary phase against a trial's start, as they do on a
//! running kernel (jiffies count from boot, not from the trial): [`TickClock`] draws that
//! phase from the trial seed, one per trial, since the kernel backend's hosts share one
//! kernel and so one tick clock. The phase matters where nothing else varies between
//! seeds: a CUBIC or Reno trial without random loss was one realisation for every seed
//! while the kernel's reps differ (each tick-rounded timer and CUBIC's epoch move with it).

use crate::rng::{stream, SimRng};
use crate::time::Nanos;

/// CONFIG_HZ of the reference kernel (Debian's and most distributions' default): 4 ms ticks.
pub const CONFIG_HZ: u64 = 250;

/// Length of one jiffy at `hz`, nanoseconds.
pub const fn jiffy_ns(hz: u64) -> Nanos {
    (1_000_000_000 / hz) as Nanos
}

/// `jiffies` at simulated time `now` (ticks completed since time 0).
pub fn jiffies(now: Nanos, hz: u64) -> u64 {
    (now.max(0) as u128 * hz as u128 / 1_000_000_000) as u64
}

/// Where the kernel's ticks fall against simulated time: tick `j` begins at
/// `j * jiffy - phase_ns`, so `jiffies` at time 0 is the phase's share of a tick.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TickClock {
    /// Time from the last tick before the trial's start to the start, in [0, one jiffy).
    pub phase_ns: Nanos,
}

impl TickClock {
    /// The trial's tick phase, uniform over one jiffy at CONFIG_HZ, from its seed.
    pub fn from_seed(seed: u64) -> Self {
        TickClock { phase_ns: SimRng::new(seed, stream::TICK_PHASE).below(jiffy_ns(CONFIG_HZ) as u32) as Nanos }
    }

    /// `jiffies` (`tcp_jiffies32`) at simulated time `now`.
    pub fn jiffies(self, now: Nanos, hz: u64) -> u64 {
        jiffies(now.max(0) + self.phase_ns, hz)
    }

    /// Simulated time at which tick `j` begins (a timer armed for jiffy `j` fires then).
    pub fn tick_start(self, j: i64, hz: u64) -> Nanos {
        j * jiffy_ns(hz) - self.phase_ns
    }
}

/// `msecs_to_jiffies`: rounds up.
pub fn msecs_to_jiffies(ms: u64, hz: u64) -> u64 {
    (ms * hz).div_ceil(1000)
}

/// `usecs_to_jiffies`: rounds up.
pub fn usecs_to_jiffies(us: u64, hz: u64) -> u64 {
    (us * hz).div_ceil(1_000_000)
}

/// A duration in nanoseconds as whole jiffies, rounded up (`nsecs_to_jiffies` of a timeout).
pub fn nsecs_to_jiffies_ceil(ns: Nanos, hz: u64) -> u64 {
    (ns.max(0) as u128 * hz as u128).div_ceil(1_000_000_000) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_round_as_the_kernel_does() {
        assert_eq!(jiffy_ns(CONFIG_HZ), 4_000_000);
        assert_eq!(jiffies(3_999_999, CONFIG_HZ), 0);
        assert_eq!(jiffies(4_000_000, CONFIG_HZ), 1);
        assert_eq!(msecs_to_jiffies(200, CONFIG_HZ), 50);
        assert_eq!(msecs_to_jiffies(201, CONFIG_HZ), 51);
        assert_eq!(usecs_to_jiffies(1, CONFIG_HZ), 1);
        assert_eq!(usecs_to_jiffies(4000, CONFIG_HZ), 1);
        assert_eq!(nsecs_to_jiffies_ceil(4_000_001, CONFIG_HZ), 2);
        assert_eq!(msecs_to_jiffies(10, 1000), 10);
    }

    #[test]
    fn a_tick_clock_counts_from_its_phase() {
        let c = TickClock { phase_ns: 1_000_000 };
        assert_eq!(c.jiffies(2_999_999, CONFIG_HZ), 0);
        assert_eq!(c.jiffies(3_000_000, CONFIG_HZ), 1);
        assert_eq!(c.tick_start(1, CONFIG_HZ), 3_000_000);
        assert_eq!(c.jiffies(c.tick_start(7, CONFIG_HZ), CONFIG_HZ), 7);
        // seeds spread the phase over the whole tick
        let phases: Vec<Nanos> = (1..=64).map(|s| TickClock::from_seed(s).phase_ns).collect();
        assert!(phases.iter().all(|&p| (0..jiffy_ns(CONFIG_HZ)).contains(&p)));
        assert!(phases.iter().any(|&p| p < 1_000_000) && phases.iter().any(|&p| p >= 3_000_000));
        assert_eq!(TickClock::from_seed(5), TickClock::from_seed(5));
    }
}
