//! RTT estimation and the retransmission timeout as Linux computes them
//! (`tcp_rtt_estimator` and `__tcp_set_rto` in net/ipv4/tcp_input.c and include/net/tcp.h):
//!
//! - srtt: RFC 6298's 1/8 gain.
//! - mdev (kept, as the kernel keeps `mdev_us`, at four times the mean deviation): 1/4 gain,
//!   except that a sample below srtt whose error exceeds the deviation moves it with 1/32
//!   (the kernel's Eifel-like rule, so a falling RTT barely raises the RTO).
//! - The RTO's variance term `rttvar` is not mdev itself: it rises at once to the largest
//!   mdev seen in the current round trip (`mdev_max_us`), and once a round trip (when snd_una
//!   passes `rtt_seq`, the snd_nxt of the last turn) decays a quarter of the way towards that
//!   round's largest, which is never below TCP_RTO_MIN. So RTO = srtt + rttvar >=
//!   srtt + 200 ms, and a burst of RTT variance holds the RTO up for round trips rather than
//!   for a few ACKs, as RFC 6298's per-sample rttvar would.
//! - The first sample sets srtt = R and rttvar = max(2R, TCP_RTO_MIN): RTO = 3 R at least.
//! - Initial RTO 1 s (TCP_TIMEOUT_INIT); at most TCP_RTO_MAX (120 s); doubling backoff on
//!   each timeout, cleared by a new RTT sample (`tcp_ack_update_rtt`).
//!
//! Deviations: nanoseconds where the kernel counts microseconds. The RTO is kept exact here and
//! rounded up to whole jiffies where its timer is armed (`jiffies::TickClock::wheel_fire_time`),
//! where the kernel rounds `icsk_rto` itself before a backoff doubles it (a difference of under
//! a jiffy per doubling).

use crate::time::Nanos;

pub const TCP_RTO_MIN: Nanos = 200_000_000;
pub const TCP_RTO_MAX: Nanos = 120_000_000_000;
pub const TCP_TIMEOUT_INIT: Nanos = 1_000_000_000;

#[derive(Debug, Clone, Default)]
pub struct RttEstimator {
    /// Smoothed RTT, 0 before the first sample.
    pub srtt: Nanos,
    /// Four times the mean deviation (`mdev_us`).
    mdev: Nanos,
    /// The largest `mdev` of the current round trip, at least TCP_RTO_MIN (`mdev_max_us`).
    mdev_max: Nanos,
    /// The RTO's variance term (`rttvar_us`): RTO = srtt + rttvar.
    pub rttvar: Nanos,
    /// snd_nxt when the current round trip of the variance began (`rtt_seq`).
    rtt_seq: u64,
    /// Minimum RTT seen (Linux keeps a 5-minute windowed min; trials are shorter).
    pub min_rtt: Nanos,
    pub backoff: u32,
    /// Latest sample.
    pub latest: Nanos,
}

impl RttEstimator {
    /// One RTT sample, taken on an ACK that has already moved snd_una (`tcp_ack_update_rtt`).
    pub fn on_sample(&mut self, rtt: Nanos, snd_una: u64, snd_nxt: u64) {
        let rtt = rtt.max(1);
        self.latest = rtt;
        if self.min_rtt == 0 || rtt < self.min_rtt {
            self.min_rtt = rtt;
        }
        if self.srtt == 0 {
            self.srtt = rtt;
            self.mdev = 2 * rtt;
            self.rttvar = self.mdev.max(TCP_RTO_MIN);
            self.mdev_max = self.rttvar;
            self.rtt_seq = snd_nxt;
        } else {
            let err = rtt - self.srtt;
            self.srtt = (self.srtt + err / 8).max(1);
            let mut m = err.abs() - self.mdev / 4;
            if err < 0 && m > 0 {
                m /= 8;
            }
            self.mdev += m;
            if self.mdev > self.mdev_max {
                self.mdev_max = self.mdev;
                self.rttvar = self.rttvar.max(self.mdev_max);
            }
            if snd_una > self.rtt_seq {
                if self.mdev_max < self.rttvar {
                    self.rttvar -= (self.rttvar - self.mdev_max) / 4;
                }
                self.rtt_seq = snd_nxt;
                self.mdev_max = TCP_RTO_MIN;
            }
        }
        self.backoff = 0;
    }

    /// Current RTO including backoff.
    pub fn rto(&self) -> Nanos {
        let base = if self.srtt == 0 { TCP_TIMEOUT_INIT } else { (self.srtt + self.rttvar).min(TCP_RTO_MAX) };
        base.saturating_mul(1 << self.backoff.min(20)).min(TCP_RTO_MAX)
    }
}

/// The send times one ACK newly covers, never-retransmitted packets only: the oldest and newest
/// cumulatively ACKed (`tcp_clean_rtx_queue`'s first_ackt, last_ackt) and SACKed
/// (`tcp_sacktag_write_queue`'s first_sackt, last_sackt); and whether it cumulatively ACKed a
/// retransmitted packet (`FLAG_RETRANS_DATA_ACKED`). The sender and the capture analysis fill it.
#[derive(Debug, Default, Clone, Copy)]
pub struct AckedSendTimes {
    pub first_ackt: Option<Nanos>,
    pub last_ackt: Option<Nanos>,
    pub first_sackt: Option<Nanos>,
    pub last_sackt: Option<Nanos>,
    pub retrans_data_acked: bool,
}

impl AckedSendTimes {
    /// Never-retransmitted packets sent from `first_tx` to `newest_tx`, in the order ACKed,
    /// newly covered by the cumulative ACK.
    #[inline]
    pub fn acked(&mut self, first_tx: Nanos, newest_tx: Nanos) {
        self.first_ackt.get_or_insert(first_tx);
        self.last_ackt = Some(self.last_ackt.map_or(newest_tx, |t| t.max(newest_tx)));
    }

    /// A never-retransmitted packet sent at `tx`, newly SACKed.
    #[inline]
    pub fn sacked(&mut self, tx: Nanos) {
        self.first_sackt.get_or_insert(tx);
        self.last_sackt = Some(self.last_sackt.map_or(tx, |t| t.max(tx)));
    }

    /// The (seq_rtt, ca_rtt) the ACK yields at `now`, as `tcp_clean_rtx_queue` and
    /// `tcp_ack_update_rtt` take them: from ACK timing (Karn: none from the cumulative part when
    /// it covers retransmitted data), else, when the ACK advances snd_una (`FLAG_ACKED`), from
    /// the echoed timestamp (`tcp_rtt_tsopt_us`: `ts_ticks`, the TS clock's ticks since the
    /// echoed value, taken as at least one).
    pub fn rtt_samples(&self, now: Nanos, una_advanced: bool, ts_ticks: Option<i64>) -> (Option<Nanos>, Option<Nanos>) {
        let since = |t: Option<Nanos>| t.map(|t| now - t);
        let (mut seq_rtt, mut ca_rtt) =
            if self.retrans_data_acked { (None, None) } else { (since(self.first_ackt), since(self.last_ackt)) };
        if self.first_sackt.is_some() {
            ca_rtt = since(self.last_sackt);
            seq_rtt = seq_rtt.or(since(self.first_sackt));
        }
        if let (None, true, Some(ticks)) = (seq_rtt, una_advanced, ts_ticks) {
            seq_rtt = Some(ticks.max(1) * super::TCP_TS_TICK);
            ca_rtt = seq_rtt;
        }
        (seq_rtt, ca_rtt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_rto_is_one_second_then_three_rtts_and_never_below_srtt_plus_200ms() {
        let mut e = RttEstimator::default();
        assert_eq!(e.rto(), 1_000_000_000);
        e.on_sample(100_000_000, 0, 10);
        assert_eq!(e.rto(), 300_000_000);
        for i in 0..100 {
            e.on_sample(25_000_000, 10 + i, 20 + i);
        }
        assert!(e.rto() >= e.srtt + TCP_RTO_MIN);
        assert!(e.rto() < e.srtt + TCP_RTO_MIN + 1_000_000);
        e.backoff = 3;
        assert_eq!(e.rto(), (e.srtt + e.rttvar) * 8);
    }

    /// A jump in the RTT raises the RTO at once and holds it for two round trips (the
    /// round of the jump, whose largest deviation is the jump's, and the next), then decays a
    /// quarter of the way towards TCP_RTO_MIN per round trip, however many samples a round
    /// holds; RFC 6298's per-sample rttvar would have decayed with every ACK.
    #[test]
    fn variance_decays_per_round_trip_not_per_sample() {
        const S: Nanos = 1_000_000_000;
        let mut e = RttEstimator::default();
        // A steady 1 s, one sample a round, until the variance term rests at its floor.
        for s in 1..=400 {
            e.on_sample(S, s, s);
        }
        e.on_sample(S, 401, 1000);
        assert!(e.rttvar < TCP_RTO_MIN + 1_000_000, "{}", e.rttvar);
        // The step to 2 s: the deviation climbs for as long as srtt lags the samples and then
        // falls back; within the round trip the variance term holds the largest it reached.
        let mut largest_mdev = 0;
        for s in 402..1000 {
            let before = e.rttvar;
            e.on_sample(2 * S, s, 1000);
            largest_mdev = largest_mdev.max(e.mdev);
            assert!(e.rttvar >= before);
        }
        let peak = e.rttvar;
        assert_eq!(peak, largest_mdev);
        assert!(e.mdev < peak / 100, "the deviation itself has decayed: {} of {peak}", e.mdev);
        e.on_sample(2 * S, 1001, 2000);
        assert_eq!(e.rttvar, peak, "the round of the jump ends at its own largest deviation");
        for s in 1002..2000 {
            e.on_sample(2 * S, s, 2000);
        }
        e.on_sample(2 * S, 2001, 3000);
        assert_eq!(e.rttvar, peak - (peak - TCP_RTO_MIN) / 4);
    }

    /// A falling RTT moves the deviation with gain 1/32, not 1/4 (Linux's Eifel-like rule).
    #[test]
    fn falling_rtt_barely_raises_the_deviation() {
        let mut up = RttEstimator::default();
        let mut down = RttEstimator::default();
        for e in [&mut up, &mut down] {
            for s in 0..200 {
                e.on_sample(1_000_000_000, s, s + 1);
            }
        }
        let base = up.mdev;
        up.on_sample(1_800_000_000, 300, 301);
        down.on_sample(200_000_000, 300, 301);
        let rise = up.mdev - base;
        let fall = down.mdev - base;
        assert!(fall > 0 && fall * 7 < rise && rise < fall * 9, "rise {rise} fall {fall}");
    }
}
