//! How many segments Linux puts in one TSO/GSO skb: the single place where the simulator sizes
//! a send burst, used by the sender for its trains and by BBR for its quantization budget.
//!
//! Linux builds GSO skbs for TCP whatever the device offers (`sk_setup_caps` in
//! net/core/sock.c always gives TCP sockets `NETIF_F_GSO`; a device without TSO/GSO gets the
//! skb segmented in software just before it), so a TCP sender hands its data to the device in
//! back-to-back trains. `tcp_write_xmit` (net/ipv4/tcp_output.c) sizes them with
//! `tcp_tso_segs` -> `tcp_tso_autosize`: about 1 ms of data at `sk_pacing_rate`
//! (`>> sk_pacing_shift`, 10), plus an allowance of `sk_gso_max_size >> (min_rtt_us >>
//! sysctl_tcp_tso_rtt_log)` for short paths (since v5.18), at most `sk_gso_max_size` bytes, and
//! at least `min_tso_segs` segments (the algorithm's `min_tso_segs` hook, else
//! `sysctl_tcp_min_tso_segs` = 2). BBR's `bbr_tso_segs_goal` (tcp_bbr.c) is "sort of
//! `tcp_tso_autosize`" without the RTT allowance, capped at 127 segments.

/// `sk_pacing_shift`: a burst is about 1/2^10 s of data at the pacing rate.
pub const SK_PACING_SHIFT: u32 = 10;
/// `sysctl_tcp_min_tso_segs` default.
pub const TCP_MIN_TSO_SEGS: u32 = 2;
/// `sysctl_tcp_tso_rtt_log` default: the RTT allowance halves per 2^9 us of min_rtt.
pub const TCP_TSO_RTT_LOG: u32 = 9;
/// 64 KB, the legacy (and veth default) GSO limit.
pub const GSO_LEGACY_MAX_SIZE: u64 = 65536;
/// `MAX_TCP_HEADER` on x86-64 (L1_CACHE_ALIGN(128 + MAX_HEADER)).
pub const MAX_TCP_HEADER: u64 = 320;
/// `sk_gso_max_size` of a TCP socket over a device with the default GSO limit
/// (`sk_dst_gso_max_size`: the device's size - (MAX_TCP_HEADER + 1)).
pub const SK_GSO_MAX_SIZE: u64 = GSO_LEGACY_MAX_SIZE - (MAX_TCP_HEADER + 1);
/// `sk_gso_max_segs` of a veth (GSO_MAX_SEGS).
pub const GSO_MAX_SEGS: u32 = 65535;
/// `sysctl_tcp_tso_win_divisor` default (`tcp_tso_should_defer`).
pub const TCP_TSO_WIN_DIVISOR: u32 = 3;

/// `tcp_tso_autosize`: segments per skb at `pacing_rate` bytes/s. With `min_rtt_us`, adds the
/// short-path allowance `allowance >> (min_rtt_us >> 9)` (None leaves it out, as
/// `bbr_tso_segs_goal` does); at most `cap` bytes, at least `min_tso_segs` segments.
pub fn autosize(pacing_rate: u64, mss: u32, min_rtt_us: Option<u64>, allowance: u64, cap: u64, min_tso_segs: u32) -> u32 {
    let mut bytes = pacing_rate >> SK_PACING_SHIFT;
    if let Some(rtt) = min_rtt_us {
        let r = rtt >> TCP_TSO_RTT_LOG;
        if r < u32::BITS as u64 {
            bytes = bytes.saturating_add(allowance >> r);
        }
    }
    let bytes = bytes.min(cap);
    ((bytes / mss.max(1) as u64) as u32).max(min_tso_segs)
}

/// `tcp_tso_segs`: the autosized count (with the algorithm's minimum), at most the device's
/// `sk_gso_max_segs`.
pub fn tcp_tso_segs(pacing_rate: u64, mss: u32, min_rtt_us: u64, min_tso_segs: u32) -> u32 {
    autosize(pacing_rate, mss, Some(min_rtt_us), SK_GSO_MAX_SIZE, SK_GSO_MAX_SIZE, min_tso_segs).min(GSO_MAX_SEGS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn autosize_is_about_one_ms_of_data_and_at_least_the_minimum() {
        // 80 Mbit/s = 10 MB/s: 10e6 >> 10 = 9765 bytes = 6 segments of 1448; 25 ms of min_rtt
        // leaves no allowance (25000 >> 9 = 48 >= 32).
        assert_eq!(tcp_tso_segs(10_000_000, 1448, 25_000, 2), 6);
        // 1 Mbit/s: 122 bytes -> the minimum.
        assert_eq!(tcp_tso_segs(125_000, 1448, 50_000, 2), 2);
        assert_eq!(tcp_tso_segs(125_000, 1448, 50_000, 1), 1);
        // Short path: 2 ms of min_rtt adds 64 KB >> 3 = 8111 bytes.
        assert_eq!(tcp_tso_segs(10_000_000, 1448, 2_000, 2), (9765 + 8111) / 1448);
        // Capped at sk_gso_max_size (45 segments) at high rates and before any RTT sample.
        assert_eq!(tcp_tso_segs(1_250_000_000, 1448, 100_000, 2), (SK_GSO_MAX_SIZE / 1448) as u32);
        assert_eq!(tcp_tso_segs(u64::MAX, 1448, u32::MAX as u64, 2), (SK_GSO_MAX_SIZE / 1448) as u32);
    }
}
