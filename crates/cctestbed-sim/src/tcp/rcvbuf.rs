//! The receive buffer of a Linux 6.18 receiver, and the window it advertises from it.
//!
//! What it follows (net/ipv4/tcp_input.c, tcp_output.c, include/net/tcp.h of 6.18):
//! - Space and window: `tcp_win_from_space` = space x `scaling_ratio` / 256 and its inverse
//!   `tcp_space_from_win`. `scaling_ratio` starts at TCP_DEFAULT_SCALING_RATIO (128, a half) and
//!   `tcp_measure_rcv_mss` sets it from the first full-sized segment's `len << 8 / truesize`,
//!   moving `window_clamp` to the buffer's window (`tcp_set_window_clamp`).
//! - At establishment (`tcp_select_initial_window`, `tcp_init_buffer_space`): `sk_rcvbuf` =
//!   `tcp_rmem[1]`; the first window is the full space at the default ratio rounded down to the
//!   MSS, at most 65535 (65160 at an MSS of 1448), and `rcv_ssthresh` with it; `window_clamp` is
//!   the full space less one MSS (`tcp_app_win`'s reservation); `rcv_wscale` from
//!   `tcp_rmem[2]`; `rcvq_space.space` = min(rcv_ssthresh, rcv_wnd, 10 x advmss).
//! - `tcp_grow_window`, per data segment: while `rcv_ssthresh` is below `window_clamp` and the
//!   free space, a segment whose truesize fits its length (at the learned ratio) raises it by
//!   2 x advmss, and sets one quick ACK (`icsk_ack.quick |= 1`).
//! - `__tcp_select_window` and `tcp_select_window`, for every ACK: the free space (the buffer
//!   less what the out-of-order queue holds), at most `rcv_ssthresh`, rounded up to the window
//!   scale; a window that would move the right edge back is not offered (the edge stays).
//!   Below half the full space, the window is the free space rounded down, or 0 below a
//!   sixteenth of the buffer or one MSS, and quick ACKs stop.
//! - The receiver's RTT (`tcp_rcv_rtt_measure_ts`, `tcp_rcv_rtt_update`): per full-sized
//!   segment carrying a new timestamp echo, the time since the ACK it echoes left (whole
//!   millisecond ticks, none for 0); and `tcp_rcv_rtt_measure`: the time for `rcv_nxt` to pass
//!   the right edge of the window advertised when the measurement began. A lower sample is
//!   taken at once, a higher timestamp sample smoothed in by 1/8.
//! - Dynamic right-sizing (`tcp_rcv_space_adjust`, `tcp_rcvbuf_grow`), once per receiver RTT as
//!   the application reads: if it read more than `rcvq_space.space` in that time, that becomes
//!   the space, and the buffer the space for a window of twice it ("DRS is always one RTT
//!   late") plus four times it times its relative growth since the last RTT (the sender's slow
//!   start), plus what is held beyond a hole, at most `tcp_rmem[2]`; `window_clamp` follows it.
//!   Each segment queued out of order grows it the same way without the growth term. This is
//!   6.18's form: the receive-autotuning series merged for 6.16 ("fix sk_rcvbuf overshoot",
//!   "adjust rcvbuf in presence of reorders", "always seek for minimal rtt") with 6.18-rc4's
//!   "fix too slow tcp_rcvbuf_grow() action"; checked on the kernel backend's 6.18.44 with
//!   probes of `rcvq_space`, `sk_rcvbuf` and `window_clamp` (a 100 Mbit/s, 10 ms flow: 14480,
//!   then 28960 read in a RTT gives a 244,316-byte buffer, 57920 gives 556,032). 6.18.45's
//!   "do not change rcv_ssthresh in tcp_measure_rcv_mss()" is not in it: learning the ratio
//!   still lifts `rcv_ssthresh` to the window offered.
//!
//! Deviations: an application that reads at once (the default, see `super::receiver`) leaves
//! no unread in-order data to take buffer space (Linux builds the ACK before the reader wakes,
//! with the segment just queued still charged: a window about one truesize smaller); one that
//! reads every `read_interval` is charged one truesize per unread segment;
//! the out-of-order queue costs one truesize per segment (no coalescing of adjacent segments,
//! `tcp_try_coalesce`, and no pruning, `tcp_prune_queue`); no memory pressure; the receiver
//! with a configured `rwnd` is the kernel backend's sink (`SO_RCVBUF`, which locks the buffer
//! at twice the value, and `TCP_WINDOW_CLAMP`).

use crate::time::Nanos;

/// `tcp_rmem[1]` on the kernel backend's hosts (Linux's default): the buffer a socket starts with.
pub const TCP_RMEM_DEFAULT: u64 = 131_072;
/// `TCP_RMEM_TO_WIN_SCALE`: `scaling_ratio` is in 1/256ths.
const RMEM_TO_WIN_SCALE: u32 = 8;
/// `TCP_DEFAULT_SCALING_RATIO`: a half, until the first full-sized segment.
const DEFAULT_SCALING_RATIO: u64 = 1 << (RMEM_TO_WIN_SCALE - 1);
/// `TCP_INIT_CWND`, for the first `rcvq_space.space`.
const INIT_CWND: u64 = 10;
/// What one received segment costs the buffer (`skb->truesize`) on the kernel backend: every
/// frame reaches the receiving host in its own linear skb, written by the link emulator's
/// packet socket, 2304 bytes for a 1448-byte segment as a TUN device's on 6.18.44 (ratio
/// 160/256: the 80-KB window of a 131072-byte buffer; a veth carrying the sender's own
/// page-fragment skbs measured 2280, and GSO skbs of several segments far less per byte).
/// The overhead beyond the frame is taken as fixed.
const TRUESIZE_OVERHEAD: u64 = 2304 - 1514;
/// The frame around a segment's payload: Ethernet (14), IPv4 (20), TCP with timestamps (32).
const FRAME_HEADERS: u64 = 66;
/// The largest window scale (RFC 7323, `TCP_MAX_WSCALE`).
const MAX_WSCALE: u32 = 14;
/// The receiver's RTT samples from timestamps are whole ticks.
use super::TCP_TS_TICK as TS_TICK;

/// `tcp_rmem[2]` as the kernel backend sets it: room for four times the path's BDP and queue,
/// at least Linux's default of 6 MB.
pub fn tcp_rmem_max(bdp_bytes: u64, queue_bytes: u64) -> u64 {
    (4 * (bdp_bytes + queue_bytes)).max(6 << 20)
}

/// A receiver's buffer and advertised window, in bytes of the flow's data.
#[derive(Debug, Clone)]
pub struct RcvBuf {
    advmss: u64,
    /// `sk_rcvbuf`, `tcp_rmem[2]`, and whether the buffer is locked (`SOCK_RCVBUF_LOCK`).
    rcvbuf: u64,
    rmem_max: u64,
    locked: bool,
    /// `scaling_ratio`, in 1/256ths.
    ratio: u64,
    window_clamp: u64,
    rcv_ssthresh: u64,
    wscale: u32,
    /// The window last advertised and the byte it counted from (`rcv_wnd`, `rcv_wup`).
    rcv_wnd: u64,
    rcv_wup: u64,
    /// `rcvq_space`: bytes read in the last measured RTT, and where and when this one began.
    space: u64,
    space_seq: u64,
    space_time: Nanos,
    /// `rcv_rtt_est.rtt_us` in nanoseconds, times 8 (0: none yet), the last echo sampled, and
    /// the window measurement's right edge and start (`rcv_rtt_est.seq`, `.time`).
    rtt8: Nanos,
    last_echo: Option<Nanos>,
    rtt_seq: u64,
    rtt_time: Option<Nanos>,
    /// Whether `scaling_ratio` was learned from a full-sized segment.
    ratio_learned: bool,
}

impl RcvBuf {
    /// A receiver with MSS `mss`; `rwnd` is the window the trial fixes (`SO_RCVBUF` and
    /// `TCP_WINDOW_CLAMP`), if any; `rmem_max` is `tcp_rmem[2]`.
    pub fn new(mss: u32, rwnd: Option<u64>, rmem_max: u64) -> Self {
        let advmss = mss as u64;
        let (rcvbuf, locked) = match rwnd {
            Some(w) => (2 * w, true),
            None => (TCP_RMEM_DEFAULT, false),
        };
        let full = win_from_space(DEFAULT_SCALING_RATIO, rcvbuf);
        // tcp_select_initial_window: the full space rounded down to the MSS, at most 65535
        let clamp0 = rwnd.unwrap_or(u64::MAX);
        let mut space = full.min(clamp0);
        if space > advmss {
            space = space / advmss * advmss;
        }
        let rcv_wnd = space.min(65535);
        let wscale = {
            let s = rmem_max.max(rcvbuf).min(clamp0).max(1);
            (63 - s.leading_zeros()).saturating_sub(15).min(MAX_WSCALE)
        };
        // tcp_init_buffer_space: tcp_app_win's reservation of one MSS
        let mut window_clamp = clamp0;
        if window_clamp >= full {
            window_clamp = full;
            if full > 4 * advmss {
                window_clamp = (full - (full >> 31)).max(4 * advmss);
            }
        }
        if window_clamp > 2 * advmss && window_clamp + advmss > full {
            window_clamp = (2 * advmss).max(full - advmss);
        }
        let rcv_ssthresh = rcv_wnd.min(window_clamp);
        let mut b = RcvBuf {
            advmss,
            rcvbuf,
            rmem_max,
            locked,
            ratio: DEFAULT_SCALING_RATIO,
            window_clamp,
            rcv_ssthresh,
            wscale,
            rcv_wnd,
            rcv_wup: 0,
            space: rcv_ssthresh.min(rcv_wnd).min(INIT_CWND * advmss),
            space_seq: 0,
            space_time: 0,
            rtt8: 0,
            last_echo: None,
            rtt_seq: 0,
            rtt_time: None,
            ratio_learned: false,
        };
        // TCP_WINDOW_CLAMP, set on the accepted socket after tcp_init_buffer_space
        if let Some(w) = rwnd {
            b.set_window_clamp(w);
        }
        b
    }

    /// The window the SYN-ACK offers (unscaled).
    pub fn syn_window(&self) -> u64 {
        self.rcv_wnd
    }

    /// The buffer (`sk_rcvbuf`) and the largest window it may advertise (`window_clamp`).
    pub fn buffer(&self) -> (u64, u64) {
        (self.rcvbuf, self.window_clamp)
    }

    /// The window last offered (`rcv_wnd`).
    pub fn offered(&self) -> u64 {
        self.rcv_wnd
    }

    /// The receiver's RTT estimate (`rcv_rtt_est.rtt_us`), 0 before any sample.
    pub fn rtt(&self) -> Nanos {
        self.rtt8 >> 3
    }

    /// `tcp_space` with `ooo` bytes of truesize held out of order.
    fn free_space(&self, ooo_mem: u64) -> u64 {
        win_from_space(self.ratio, self.rcvbuf.saturating_sub(ooo_mem))
    }

    /// `tcp_set_window_clamp` for a clamp of `val`.
    fn set_window_clamp(&mut self, val: u64) {
        let old = self.window_clamp;
        if val == old {
            return;
        }
        self.window_clamp = val;
        if val < old {
            self.rcv_ssthresh = self.rcv_ssthresh.min(val);
        } else {
            self.rcv_ssthresh = self.rcv_ssthresh.max(self.rcv_wnd.min(val));
        }
    }

    /// An skb of `len` bytes in `segs` segments arrived (in order or not) with the timestamp
    /// echo `echo` (when the ACK it echoes left); `ooo_mem` is what the out-of-order queue then
    /// holds. Returns whether `tcp_grow_window` asked for a quick ACK.
    pub fn on_segment(&mut self, now: Nanos, len: u64, segs: u64, echo: Option<Nanos>, ooo_mem: u64) -> bool {
        let truesize = self.truesize_of(len, segs);
        // tcp_measure_rcv_mss: the ratio from the first full-sized segment
        if !self.ratio_learned && len >= self.advmss {
            self.ratio_learned = true;
            let r = ((len << RMEM_TO_WIN_SCALE) / truesize).max(1);
            if r != self.ratio {
                self.ratio = r;
                let clamp = if self.locked { self.window_clamp.min(win_from_space(r, self.rcvbuf)) } else { win_from_space(r, self.rcvbuf) };
                self.set_window_clamp(clamp);
                self.space = self.space.min(self.window_clamp);
            }
        }
        // tcp_rcv_rtt_measure_ts: one sample per new echo, from full-sized segments
        if let Some(e) = echo {
            if self.last_echo != Some(e) {
                self.last_echo = Some(e);
                if len >= self.advmss {
                    let ticks = now / TS_TICK - e / TS_TICK;
                    if ticks > 0 {
                        self.rtt_update(ticks * TS_TICK, false);
                    }
                }
            }
        }
        // tcp_grow_window (skbs of at least 128 bytes)
        let room = self.window_clamp.min(self.free_space(ooo_mem)).saturating_sub(self.rcv_ssthresh);
        if len >= 128 && room > 0 && win_from_space(self.ratio, truesize) <= len {
            let incr = (2 * self.advmss).max(2 * len);
            self.rcv_ssthresh += incr.min(room);
            return true;
        }
        false
    }

    /// `skb->truesize` of `segs` segments of `len` payload bytes in all (a GRO skb's truesize
    /// is the sum of its frames').
    fn truesize_of(&self, len: u64, segs: u64) -> u64 {
        len + segs * (FRAME_HEADERS + TRUESIZE_OVERHEAD)
    }

    /// `tcp_rcv_rtt_update` (since 6.16, "always seek for minimal rtt"): a lower sample is
    /// taken at once; a higher one is smoothed in by 1/8 if it came from a timestamp, and
    /// ignored if it came from the window measurement.
    fn rtt_update(&mut self, sample: Nanos, win_dep: bool) {
        let m8 = sample.max(1) << 3;
        if self.rtt8 == 0 || m8 < self.rtt8 {
            self.rtt8 = m8;
        } else if !win_dep {
            self.rtt8 = self.rtt8 - (self.rtt8 >> 3) + sample;
        }
    }

    /// In-order data up to byte `rcv_nxt` has arrived (`tcp_event_data_recv`'s
    /// `tcp_rcv_rtt_measure`): the time for `rcv_nxt` to pass the right edge of the window
    /// offered when the measurement began.
    pub fn on_in_order(&mut self, now: Nanos, rcv_nxt: u64) {
        let measured = match self.rtt_time {
            None => true,
            Some(_) if rcv_nxt < self.rtt_seq => false,
            Some(t) => {
                self.rtt_update(now - t, true);
                true
            }
        };
        if measured {
            self.rtt_seq = rcv_nxt + self.rcv_wnd;
            self.rtt_time = Some(now);
        }
    }

    /// The application has read up to byte `copied` (`tcp_recvmsg`'s `tcp_rcv_space_adjust`);
    /// `ooo_end` is the byte after the last one held out of order, if any.
    pub fn on_read(&mut self, now: Nanos, copied: u64, ooo_end: Option<u64>) {
        if self.rtt8 == 0 || now - self.space_time < self.rtt8 >> 3 {
            return;
        }
        let read = copied - self.space_seq;
        if read > self.space {
            let old = self.space.max(1);
            self.space = read;
            self.grow(copied, ooo_end, old);
        }
        self.space_seq = copied;
        self.space_time = now;
    }

    /// `tcp_rcvbuf_grow` (6.16's "fix sk_rcvbuf overshoot" and "adjust rcvbuf in presence of
    /// reorders"): room for twice what was read in the last RTT (the sender's slow start) and
    /// for the data held beyond a hole, at most `tcp_rmem[2]`; the clamp follows. Run when the
    /// reader's RTT measurement grows `rcvq_space` and for each segment queued out of order.
    fn grow(&mut self, rcv_nxt: u64, ooo_end: Option<u64>, old: u64) {
        if self.locked {
            return;
        }
        // one RTT late: twice what was read, and twice the growth since the RTT before
        let mut rcvwin = self.space << 1;
        if self.space > old {
            rcvwin += ((rcvwin as u128 * (self.space - old) as u128 / old as u128) as u64) << 1;
        }
        if let Some(end) = ooo_end {
            rcvwin += end.saturating_sub(rcv_nxt);
        }
        let rcvbuf = space_from_win(self.ratio, rcvwin).min(self.rmem_max);
        if rcvbuf > self.rcvbuf {
            self.rcvbuf = rcvbuf;
            self.window_clamp = win_from_space(self.ratio, rcvbuf);
        }
    }

    /// A segment was queued out of order, the queue now reaching byte `ooo_end`
    /// (`tcp_data_queue_ofo`'s `tcp_rcvbuf_grow`).
    pub fn on_out_of_order(&mut self, rcv_nxt: u64, ooo_end: u64) {
        self.grow(rcv_nxt, Some(ooo_end), self.space);
    }

    /// `tcp_select_window` for an ACK of byte `rcv_nxt` with `ooo_mem` bytes of truesize held
    /// out of order: the window to advertise (in bytes, a multiple of the window scale), and
    /// whether quick ACKs stop (free space below half the full space).
    pub fn select_window(&mut self, rcv_nxt: u64, ooo_mem: u64) -> (u64, bool) {
        let (new, stop_quick) = self.window_from_free_space(ooo_mem);
        let unit = 1u64 << self.wscale;
        // never move the right edge back
        let cur = self.receive_window(rcv_nxt);
        let win = if new < cur { cur.div_ceil(unit) * unit } else { new };
        let win = win.min(65535 << self.wscale);
        self.rcv_wnd = win;
        self.rcv_wup = rcv_nxt;
        (win, stop_quick)
    }

    /// `tcp_receive_window`: what is left of the window last offered once `rcv_nxt` arrived.
    pub fn receive_window(&self, rcv_nxt: u64) -> u64 {
        (self.rcv_wup + self.rcv_wnd).saturating_sub(rcv_nxt)
    }

    /// `__tcp_select_window` with `mem` bytes of truesize held (out of order or unread): the
    /// window the free space allows now, and whether quick ACKs stop (free space below half the
    /// full space).
    pub fn window_from_free_space(&self, mem: u64) -> (u64, bool) {
        let unit = 1u64 << self.wscale;
        let free = self.free_space(mem);
        let allowed = win_from_space(self.ratio, self.rcvbuf);
        let full = self.window_clamp.min(allowed);
        let mss = self.advmss.min(full);
        let mut stop_quick = false;
        let new = 'w: {
            let mut free = free;
            if free < full >> 1 {
                stop_quick = true;
                free = free / unit * unit;
                if free < allowed >> 4 || free < mss {
                    break 'w 0;
                }
            }
            free.min(self.rcv_ssthresh).div_ceil(unit) * unit
        };
        (new, stop_quick)
    }

    /// What one segment held out of order costs the buffer.
    pub fn ooo_cost(&self) -> u64 {
        self.truesize_of(self.advmss, 1)
    }
}

fn win_from_space(ratio: u64, space: u64) -> u64 {
    (space * ratio) >> RMEM_TO_WIN_SCALE
}

fn space_from_win(ratio: u64, win: u64) -> u64 {
    (win << RMEM_TO_WIN_SCALE) / ratio.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSS: u32 = 1448;
    const MS: Nanos = 1_000_000;

    #[test]
    fn opens_at_64k_and_settles_at_the_buffers_80k_window() {
        let mut b = RcvBuf::new(MSS, None, 6 << 20);
        assert_eq!(b.syn_window(), 65160, "64 KB rounded down to the MSS");
        assert_eq!(b.wscale, 7);
        // the first full segment teaches the ratio: 1448 << 8 / 2304 = 160
        b.on_segment(0, 1448, 1, None, 0);
        assert_eq!(b.ratio, 160);
        assert_eq!(b.buffer(), (131_072, 81_920));
        for _ in 0..20 {
            b.on_segment(0, 1448, 1, None, 0);
        }
        let (w, _) = b.select_window(21 * 1448, 0);
        assert_eq!(w, 81_920, "rcv_ssthresh grows 2 MSS a segment up to the clamp");
    }

    #[test]
    fn a_slow_reader_keeps_the_default_buffer_and_a_fast_one_grows_it() {
        // 2 KB/s with an RTT of 10 s: 20 KB a receiver RTT, never more than the last
        let mut slow = RcvBuf::new(MSS, None, 6 << 20);
        let mut t = 0;
        let mut n = 0u64;
        let mut echo = 0;
        while t < 300_000 * MS {
            t += 724 * MS;
            n += 1448;
            if n % (14 * 1448) == 0 {
                echo = t - 10_000 * MS;
            }
            slow.on_segment(t, 1448, 1, Some(echo), 0);
            slow.on_in_order(t, n);
            slow.on_read(t, n, None);
            slow.select_window(n, 0);
        }
        assert_eq!(slow.buffer(), (131_072, 81_920));
        // 100 Mbit/s, 10 ms, doubling each RTT from 10 segments
        let mut fast = RcvBuf::new(MSS, None, 6 << 20);
        let (mut n, mut per_rtt) = (0u64, 10i64);
        for rtt in 1..9i64 {
            let start = rtt * 10 * MS;
            for k in 0..per_rtt {
                let t = start + k * (10 * MS) / per_rtt;
                n += 1448;
                // the data echoes the ACK that left half an RTT before the flight
                fast.on_segment(t, 1448, 1, Some(start - 5 * MS), 0);
                fast.on_in_order(t, n);
                fast.on_read(t, n, None);
                fast.select_window(n, 0);
            }
            per_rtt *= 2;
        }
        // the window stays ahead of the sender, at least twice what was read in the last whole
        // RTT measured (640 segments), and the buffer within tcp_rmem[2]
        let (buf, clamp) = fast.buffer();
        assert!(clamp >= 2 * 640 * 1448, "window {clamp}");
        assert!(buf > 20 * TCP_RMEM_DEFAULT && buf <= 6 << 20, "buffer {buf}");
    }

    #[test]
    fn out_of_order_data_takes_the_window_but_never_moves_its_right_edge_back() {
        let mut b = RcvBuf::new(MSS, None, 6 << 20);
        for _ in 0..30 {
            b.on_segment(0, 1448, 1, None, 0);
        }
        let (w0, _) = b.select_window(0, 0);
        assert_eq!(w0, 81_920);
        // 30 segments held beyond a hole: the edge stays where it was
        let held = 30 * b.ooo_cost();
        let (w1, stop) = b.select_window(0, held);
        assert_eq!(w1, 81_920);
        assert!(stop, "free space below half the full space");
        // in-order data up to byte 30000 (the hole's sender kept sending): what is free is
        // 38,656 bytes, less than the 51,920 still offered beyond 30000, so the edge stays
        let free = win_from_space(160, 131_072 - held) / 128 * 128;
        assert_eq!(free, 38_656);
        let (w2, _) = b.select_window(30_000, held);
        assert_eq!(w2, (81_920u64 - 30_000).div_ceil(128) * 128);
        // once the queue drains, the window is the free space again
        let (w3, stop) = b.select_window(60_000, 0);
        assert!(!stop);
        assert_eq!(w3, 81_920);
    }

    #[test]
    fn a_configured_window_is_the_clamp_and_the_buffer_is_locked() {
        let mut b = RcvBuf::new(MSS, Some(40_000), 6 << 20);
        b.on_segment(0, 1448, 1, None, 0);
        for _ in 0..100 {
            b.on_segment(0, 1448, 1, None, 0);
        }
        assert_eq!(b.select_window(0, 0).0.div_ceil(128), 40_000u64.div_ceil(128));
        assert_eq!(b.buffer().0, 80_000);
    }
}
