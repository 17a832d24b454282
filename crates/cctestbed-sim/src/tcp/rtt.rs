//! RTT estimation and the retransmission timeout: RFC 6298 (alpha 1/8, beta 1/4, K = 4) with
//! Linux's floors (`tcp_rtt_estimator`, `__tcp_set_rto` in net/ipv4/tcp_input.c): the variance
//! term is at least TCP_RTO_MIN (200 ms), so RTO >= SRTT + 200 ms; initial RTO 1 s
//! (TCP_TIMEOUT_INIT); RTO at most TCP_RTO_MAX (120 s); doubling backoff on each timeout,
//! cleared by a new RTT sample.

use crate::time::Nanos;

pub const TCP_RTO_MIN: Nanos = 200_000_000;
pub const TCP_RTO_MAX: Nanos = 120_000_000_000;
pub const TCP_TIMEOUT_INIT: Nanos = 1_000_000_000;

#[derive(Debug, Clone, Default)]
pub struct RttEstimator {
    /// Smoothed RTT, 0 before the first sample.
    pub srtt: Nanos,
    pub rttvar: Nanos,
    /// Minimum RTT seen (Linux keeps a 5-minute windowed min; trials are shorter).
    pub min_rtt: Nanos,
    pub backoff: u32,
    /// Latest sample.
    pub latest: Nanos,
}

impl RttEstimator {
    pub fn on_sample(&mut self, rtt: Nanos) {
        let rtt = rtt.max(1);
        self.latest = rtt;
        if self.min_rtt == 0 || rtt < self.min_rtt {
            self.min_rtt = rtt;
        }
        if self.srtt == 0 {
            self.srtt = rtt;
            self.rttvar = rtt / 2;
        } else {
            let err = (rtt - self.srtt).abs();
            self.rttvar += (err - self.rttvar) / 4;
            self.srtt += (rtt - self.srtt) / 8;
        }
        self.backoff = 0;
    }

    /// Current RTO including backoff.
    pub fn rto(&self) -> Nanos {
        let base = if self.srtt == 0 {
            TCP_TIMEOUT_INIT
        } else {
            self.srtt + (4 * self.rttvar).max(TCP_RTO_MIN)
        };
        base.saturating_mul(1 << self.backoff.min(20)).min(TCP_RTO_MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_rto_is_one_second_and_never_below_srtt_plus_200ms() {
        let mut e = RttEstimator::default();
        assert_eq!(e.rto(), 1_000_000_000);
        for _ in 0..100 {
            e.on_sample(25_000_000);
        }
        assert!(e.rto() >= e.srtt + TCP_RTO_MIN);
        assert!(e.rto() < e.srtt + TCP_RTO_MIN + 1_000_000);
        e.backoff = 3;
        assert_eq!(e.rto(), (e.srtt + TCP_RTO_MIN) * 8);
    }
}
