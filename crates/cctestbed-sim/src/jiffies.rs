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
//!
//! TCP's retransmission-family timers (RTO, tail loss probe, RACK's reordering timeout) are
//! `timer_list`s on the kernel's timer wheel (kernel/time/timer.c), which never fires a timer
//! early and fires distant ones late: [`TickClock::wheel_fire_time`]. Where a timer fires on
//! the coarse levels depends on the absolute jiffies count, which a running kernel has
//! counted since boot; that count is drawn from the seed too, as [`TickClock::wheel_base`].

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
    /// The jiffies count at the trial's start, as far as the timer wheel can tell (modulo
    /// its coarsest granularity a TCP timeout reaches).
    pub wheel_base: u64,
}

/// The timer wheel's shape (kernel/time/timer.c): 64 buckets a level (LVL_BITS 6), each level
/// 8 times coarser than the one below (LVL_CLK_SHIFT 3).
const LVL_CLK_SHIFT: u32 = 3;
const LVL_SIZE: u64 = 64;
/// The levels a TCP timeout can reach (TCP_RTO_MAX, 120 s, is 30,000 jiffies at HZ 250: level
/// 3, 512-jiffy buckets); the base is drawn over a multiple of the coarsest.
const WHEEL_BASE_SPAN: u32 = 1 << 15;

/// `LVL_START(n)`: the smallest timeout, in jiffies, that goes to level `n`.
const fn lvl_start(n: u32) -> u64 {
    (LVL_SIZE - 1) << ((n - 1) * LVL_CLK_SHIFT)
}

impl TickClock {
    /// The trial's tick phase, uniform over one jiffy at CONFIG_HZ, from its seed.
    pub fn from_seed(seed: u64) -> Self {
        TickClock {
            phase_ns: SimRng::new(seed, stream::TICK_PHASE).below(jiffy_ns(CONFIG_HZ) as u32) as Nanos,
            wheel_base: SimRng::new(seed, stream::TIMER_WHEEL).below(WHEEL_BASE_SPAN) as u64,
        }
    }

    /// When a `timer_list` armed at `now` for `timeout` (rounded up to whole jiffies, as
    /// `usecs_to_jiffies` rounds the kernel's TCP timeouts) fires; see [`Self::wheel_expiry`].
    pub fn wheel_fire_time(self, now: Nanos, timeout: Nanos, hz: u64) -> Nanos {
        let clk = self.jiffies(now, hz);
        let expires = clk + nsecs_to_jiffies_ceil(timeout, hz);
        self.tick_start(self.wheel_expiry(clk, expires) as i64, hz)
    }

    /// The jiffy at whose tick a timer armed at jiffy `clk` for jiffy `expires` fires (both
    /// counted from the trial's start): `calc_wheel_index` picks the level from `expires -
    /// clk` (levels 1, 2 and 3 have buckets of 8, 64 and 512 jiffies, 32 ms, 256 ms and
    /// 2.048 s at HZ 250), and `calc_index` files the timer in the bucket after the one its
    /// expiry falls in. So it fires at the next bucket boundary strictly after its expiry: one
    /// jiffy late on level 0 (a timer armed at the edge of a tick still waits its whole
    /// timeout) and up to 12.5 % late above.
    pub fn wheel_expiry(self, clk: u64, expires: u64) -> u64 {
        let delta = expires.saturating_sub(clk);
        let mut lvl = 0;
        while lvl < 7 && delta >= lvl_start(lvl + 1) {
            lvl += 1;
        }
        let shift = lvl * LVL_CLK_SHIFT;
        let since_boot = self.wheel_base + expires;
        (((since_boot >> shift) + 1) << shift) - self.wheel_base
    }

    /// `jiffies` (`tcp_jiffies32`) at simulated time `now`.
    pub fn jiffies(self, now: Nanos, hz: u64) -> u64 {
        jiffies(now.max(0) + self.phase_ns, hz)
    }

    /// Simulated time at which tick `j` begins (the timer wheel fires a timer as the tick after
    /// its expiry begins: [`Self::wheel_expiry`]).
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
        let c = TickClock { phase_ns: 1_000_000, wheel_base: 0 };
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

    #[test]
    fn the_wheel_fires_one_jiffy_late_on_level_0_and_on_bucket_edges_above() {
        let j = jiffy_ns(CONFIG_HZ);
        let c = TickClock { phase_ns: 0, wheel_base: 0 };
        // 200 ms = 50 jiffies (level 0), armed mid-tick 10: expiry 60, fires as tick 61 begins.
        let now = 10 * j + j / 2;
        assert_eq!(c.wheel_fire_time(now, 200_000_000, CONFIG_HZ), 61 * j);
        // 201 ms rounds up to 51 jiffies.
        assert_eq!(c.wheel_fire_time(now, 201_000_000, CONFIG_HZ), 62 * j);
        // 63 jiffies and up: level 1, 8-jiffy buckets; expiry 10 + 100 = 110 fires at 112.
        assert_eq!(c.wheel_fire_time(now, 100 * j, CONFIG_HZ), 112 * j);
        // An expiry on a bucket edge goes to the next: 8 + 64 = 72 fires at 80.
        assert_eq!(c.wheel_fire_time(8 * j, 64 * j, CONFIG_HZ), 80 * j);
        // 504 jiffies and up: 64-jiffy buckets; 4032 and up: 512.
        assert_eq!(c.wheel_fire_time(now, 600 * j, CONFIG_HZ), 640 * j);
        assert_eq!(c.wheel_fire_time(now, 5000 * j, CONFIG_HZ), 5120 * j);
        // The edges are those of the kernel's count since boot, not the trial's.
        let booted = TickClock { phase_ns: 0, wheel_base: 100 };
        assert_eq!(booted.wheel_fire_time(now, 5000 * j, CONFIG_HZ), (5120 - 100) * j);
        // Never early, at most one bucket (12.5 % of the timeout above level 0) late.
        for seed in 1..200u64 {
            let c = TickClock::from_seed(seed);
            for timeout in [3 * j, 70 * j + 1, 700 * j, 6000 * j + 17] {
                let now = 123_456_789;
                let fire = c.wheel_fire_time(now, timeout, CONFIG_HZ);
                assert!(fire >= now + timeout, "early: {fire} < {}", now + timeout);
                assert!(fire - now <= timeout + timeout / 8 + 2 * j, "late: {} for {timeout}", fire - now);
            }
        }
    }
}
