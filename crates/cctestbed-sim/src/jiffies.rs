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
//! Jiffies count from simulated time 0 (Linux starts them at an arbitrary phase).

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
}
