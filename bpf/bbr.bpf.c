// SPDX-License-Identifier: GPL-2.0
/*
 * BBR version 1 as a BPF congestion control (struct_ops tcp_congestion_ops), with the thesis'
 * variants as parameters. It follows Linux net/ipv4/tcp_bbr.c (v6.x) function by function (the
 * names below are tcp_bbr.c's) and implements the same parameters, with the same meanings, as
 * the simulator's BBRv1 (crates/cctestbed-sim/src/cc/bbr/v1/: BbrParams, proposals.rs):
 *
 *   cwnd_gain = 1.5      BBR Shallow (the thesis' tcp_bbrshallow.c)
 *   adaptive_cap = 1     the thesis' adaptive inflight cap (Algorithm 1), adapt_cwnd_gain
 *   stable_rtprop = 1    the stable RTprop estimator, judge_probe / stable_rtprop_sample
 *
 * Parameters are read-only globals (.rodata): the loader writes them into the object before it
 * is loaded, so one object serves every parameter set and each loaded instance has its own.
 * Gains are in 1/256 (BBR_UNIT), fractions in parts per million, times in nanoseconds.
 *
 * Deviations from tcp_bbr.c, each forced by what a BPF congestion control can do:
 *  - Per-connection state lives in a socket-local storage map (BPF_MAP_TYPE_SK_STORAGE)
 *    instead of icsk_ca_priv: the variants need more than the 104 bytes there, and plain
 *    fields replace tcp_bbr.c's bit fields (same ranges where they matter: the ACK epoch
 *    count saturates at 0xFFFFF, the aggregation window count at 0x1F).
 *  - Timers (min_rtt_stamp, probe_rtt_done_stamp) are jiffies as in tcp_bbr.c, read with
 *    bpf_jiffies64() for tcp_jiffies32; the loader converts the 10 s window and the 200 ms
 *    hold with the running kernel's CONFIG_HZ (from /proc/config.gz), rounding the hold up as
 *    msecs_to_jiffies does, and stamps compare as after() does.
 *  - get_random_u32_below() becomes bpf_get_prandom_u32() % bbr_cycle_rand.
 *  - minmax_running_max (lib/win_minmax.c) is written out here; kernel functions other than
 *    the few kfuncs of bpf_tcp_ca.c cannot be called.
 *  - get_info is not supported for BPF congestion controls (bpf_tcp_ca.c unsupported_ops), so
 *    TCP_CC_INFO returns nothing: the kernel backend reads no BBR internals for these flows.
 *  - bbr_rate_bytes_per_sec takes the pacing margin in basis points (kernel: whole percent),
 *    so the simulator's fractional margins are representable; 100 bp = tcp_bbr.c's 1 %.
 *  - bbr_init's cmpxchg(&sk->sk_pacing_status, NONE, NEEDED) is a test and a store: BPF has no
 *    compare-and-exchange on a tcp_sock field; init runs under the socket lock.
 *  - bbr_tso_segs_goal's MAX_TCP_HEADER is x86-64's 320, a kernel build constant (as in the
 *    simulator's tcp/tso.rs).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char _license[] SEC("license") = "GPL";

#define BW_SCALE 24
#define BW_UNIT (1ULL << BW_SCALE)
#define BBR_SCALE 8
#define BBR_UNIT (1U << BBR_SCALE)
#define CYCLE_LEN 8
#define TCP_INIT_CWND 10
#define USEC_PER_MSEC 1000ULL
#define USEC_PER_SEC 1000000ULL
#define NSEC_PER_USEC 1000ULL
#define PPM 1000000ULL
/* GSO_LEGACY_MAX_SIZE - 1 - MAX_TCP_HEADER (x86-64: 65536 - 1 - 320), as bbr_tso_segs_goal */
#define GSO_MAX_BYTES (65536U - 1U - 320U)
#define BBR_MIN_TSO_RATE 1200000ULL
#define ACK_EPOCH_ACKED_RESET_THRESH (1U << 20)
#define EXTRA_ACKED_MAX_US 100000ULL
#define LT_INTVL_MIN_RTTS 4
#define LT_LOSS_THRESH 50
#define LT_BW_RATIO (BBR_UNIT / 8)
#define LT_BW_DIFF (4000 / 8)
#define LT_BW_MAX_RTTS 48
#define MAX_STABLE_PROBES 16
#define TCP_INFINITE_SSTHRESH 0x7fffffff

/* --- parameters (the simulator's BbrParams; defaults are tcp_bbr.c's) ------------------- */
const volatile __u32 bbr_high_gain = BBR_UNIT * 2885 / 1000 + 1;  /* 2/ln(2) */
const volatile __u32 bbr_drain_gain = BBR_UNIT * 1000 / 2885;
const volatile __u32 bbr_cwnd_gain = BBR_UNIT * 2;
const volatile __u32 bbr_probe_gain = BBR_UNIT * 5 / 4;            /* bbr_pacing_gain[0] */
const volatile __u32 bbr_drain_cycle_gain = BBR_UNIT * 3 / 4;      /* bbr_pacing_gain[1] */
const volatile __u32 bbr_cycle_rand = 7;
const volatile __u32 bbr_bw_rtts = CYCLE_LEN + 2;
const volatile __u64 bbr_min_rtt_win_jiffies = 10 * 250;         /* 10 s at HZ = 250 */
const volatile __u64 bbr_probe_rtt_mode_jiffies = 50;            /* 200 ms at HZ = 250 */
const volatile __u32 bbr_cwnd_min_target = 4;
const volatile __u32 bbr_full_bw_thresh = BBR_UNIT * 5 / 4;
const volatile __u32 bbr_full_bw_cnt = 3;
const volatile __u32 bbr_extra_acked_gain = BBR_UNIT;
const volatile __u32 bbr_extra_acked_win_rtts = 5;
const volatile __u32 bbr_pacing_margin_bp = 100;                   /* 1 % */
const volatile __u32 bbr_tso_budget = 1;
const volatile __u32 bbr_lt_bw = 1;
/* the adaptive inflight cap */
const volatile __u32 bbr_adaptive_cap = 0;
const volatile __u32 bbr_adaptive_loss_thresh_ppm = 10000;         /* 0.01 */
const volatile __u32 bbr_adaptive_step = 13;                       /* 0.05 x 256, rounded */
const volatile __u32 bbr_adaptive_delivery_margin_ppm = 50000;     /* 0.05 */
const volatile __u32 bbr_adaptive_rtt_margin_ppm = 250000;         /* 0.25 */
const volatile __u32 bbr_adaptive_min_gain = 282;                  /* 1.1 x 256, rounded */
const volatile __u32 bbr_adaptive_max_gain = BBR_UNIT * 2;
/* the stable RTprop estimator */
const volatile __u32 bbr_stable_rtprop = 0;
const volatile __u32 bbr_stable_rtprop_probes = 3;
const volatile __u32 bbr_stable_rtprop_tolerance_ppm = 10000;      /* 0.01 */
const volatile __u32 bbr_stable_rtprop_jump_ppm = 4000000;         /* 4 x */

enum bbr_st_mode { MODE_STARTUP, MODE_DRAIN, MODE_PROBE_BW, MODE_PROBE_RTT };

struct mm_sample {
	__u32 t;
	__u32 v;
};

struct bbr_st {
	struct mm_sample bw[3];          /* max filter of delivery rate, lib/win_minmax.c */
	__u64 min_rtt_stamp;             /* jiffies */
	__u64 probe_rtt_done_stamp;      /* jiffies; 0 = not yet in the PROBE_RTT hold */
	__u64 cycle_mstamp;
	__u64 ack_epoch_mstamp;
	__u32 min_rtt_us;
	__u32 rtt_cnt;
	__u32 next_rtt_delivered;
	__u32 mode;
	__u32 prev_ca_state;
	__u32 packet_conservation;
	__u32 round_start;
	__u32 idle_restart;
	__u32 probe_rtt_round_done;
	__u32 lt_is_sampling;
	__u32 lt_rtt_cnt;
	__u32 lt_use_bw;
	__u32 lt_bw;
	__u32 lt_last_delivered;
	__u32 lt_last_stamp;
	__u32 lt_last_lost;
	__u32 pacing_gain;
	__u32 cwnd_gain;
	__u32 full_bw_reached;
	__u32 full_bw_cnt;
	__u32 cycle_idx;
	__u32 has_seen_rtt;
	__u32 prior_cwnd;
	__u32 full_bw;
	__u32 ack_epoch_acked;
	__u32 extra_acked_win_rtts;
	__u32 extra_acked_win_idx;
	__u32 extra_acked[2];
	/* adaptive inflight cap: the PROBE_BW cwnd gain and what the current round saw */
	__u32 cwnd_gain_probe_bw;
	__u32 round_delivered;
	__u64 round_start_us;            /* tcp_mstamp at the round's start; 0 = none yet */
	__u32 round_lost;
	__u32 round_min_rtt_us;
	/* stable RTprop: this probe's smallest RTT and the recent higher probes, oldest first */
	__u32 probe_min_rtt_us;
	__u32 n_higher;
	__u32 higher[MAX_STABLE_PROBES];
};

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct bbr_st);
} bbr_state SEC(".maps");

static __always_inline struct tcp_sock *tcp_sk(const struct sock *sk)
{
	return (struct tcp_sock *)sk;
}

static __always_inline struct inet_connection_sock *inet_csk(const struct sock *sk)
{
	return (struct inet_connection_sock *)sk;
}

static __always_inline struct bbr_st *bbr_of(struct sock *sk)
{
	return bpf_sk_storage_get(&bbr_state, sk, 0, 0);
}

static __always_inline bool before(__u32 seq1, __u32 seq2)
{
	return (__s32)(seq1 - seq2) < 0;
}

static __always_inline __u32 min_u32(__u32 a, __u32 b) { return a < b ? a : b; }
static __always_inline __u32 max_u32(__u32 a, __u32 b) { return a > b ? a : b; }
static __always_inline __u64 min_u64(__u64 a, __u64 b) { return a < b ? a : b; }

static __always_inline __u32 tcp_packets_in_flight(const struct tcp_sock *tp)
{
	return tp->packets_out - (tp->sacked_out + tp->lost_out) + tp->retrans_out;
}

static __always_inline __u64 tcp_stamp_us_delta(__u64 t1, __u64 t0)
{
	return t1 > t0 ? t1 - t0 : 0;
}

/* --- lib/win_minmax.c: minmax_running_max ------------------------------------------------ */

static __always_inline __u32 minmax_reset(struct mm_sample *s, __u32 t, __u32 v)
{
	s[0].t = s[1].t = s[2].t = t;
	s[0].v = s[1].v = s[2].v = v;
	return v;
}

static __always_inline __u32 minmax_subwin_update(struct mm_sample *s, __u32 win, __u32 t, __u32 v)
{
	__u32 dt = t - s[0].t;

	if (dt > win) {
		s[0] = s[1];
		s[1] = s[2];
		s[2].t = t;
		s[2].v = v;
		if (t - s[0].t > win) {
			s[0] = s[1];
			s[1] = s[2];
			s[2].t = t;
			s[2].v = v;
		}
	} else if (s[1].t == s[0].t && dt > win / 4) {
		s[2].t = s[1].t = t;
		s[2].v = s[1].v = v;
	} else if (s[2].t == s[1].t && dt > win / 2) {
		s[2].t = t;
		s[2].v = v;
	}
	return s[0].v;
}

static __always_inline __u32 minmax_running_max(struct mm_sample *s, __u32 win, __u32 t, __u32 v)
{
	if (v >= s[0].v || t - s[2].t > win)
		return minmax_reset(s, t, v);
	if (v >= s[1].v) {
		s[2].t = s[1].t = t;
		s[2].v = s[1].v = v;
	} else if (v >= s[2].v) {
		s[2].t = t;
		s[2].v = v;
	}
	return minmax_subwin_update(s, win, t, v);
}

/* --- model ------------------------------------------------------------------------------- */

static __always_inline bool bbr_full_bw_reached(const struct bbr_st *bbr)
{
	return bbr->full_bw_reached;
}

static __always_inline __u32 bbr_max_bw(const struct bbr_st *bbr)
{
	return bbr->bw[0].v;
}

static __always_inline __u32 bbr_bw(const struct bbr_st *bbr)
{
	return bbr->lt_use_bw ? bbr->lt_bw : bbr_max_bw(bbr);
}

static __always_inline __u32 bbr_extra_acked(const struct bbr_st *bbr)
{
	return max_u32(bbr->extra_acked[0], bbr->extra_acked[1]);
}

/* bbr_rate_bytes_per_sec, with the margin in basis points */
static __always_inline __u64 bbr_rate_bytes_per_sec(struct sock *sk, __u64 rate, __u32 gain)
{
	__u32 mss = tcp_sk(sk)->mss_cache;

	rate *= mss;
	rate *= gain;
	rate >>= BBR_SCALE;
	rate *= USEC_PER_SEC / 10000 * (10000 - bbr_pacing_margin_bp);
	return rate >> BW_SCALE;
}

static __always_inline __u64 bbr_bw_to_pacing_rate(struct sock *sk, __u32 bw, __u32 gain)
{
	__u64 rate = bbr_rate_bytes_per_sec(sk, bw, gain);

	return min_u64(rate, sk->sk_max_pacing_rate);
}

static __always_inline void bbr_init_pacing_rate_from_rtt(struct sock *sk, struct bbr_st *bbr)
{
	struct tcp_sock *tp = tcp_sk(sk);
	__u64 bw;
	__u32 rtt_us;

	if (tp->srtt_us) {
		rtt_us = max_u32(tp->srtt_us >> 3, 1);
		bbr->has_seen_rtt = 1;
	} else {
		rtt_us = USEC_PER_MSEC;
	}
	bw = (__u64)tp->snd_cwnd * BW_UNIT;
	bw /= rtt_us;
	sk->sk_pacing_rate = bbr_bw_to_pacing_rate(sk, bw, bbr_high_gain);
}

static __always_inline void bbr_set_pacing_rate(struct sock *sk, struct bbr_st *bbr, __u32 bw, __u32 gain)
{
	struct tcp_sock *tp = tcp_sk(sk);
	__u64 rate = bbr_bw_to_pacing_rate(sk, bw, gain);

	if (!bbr->has_seen_rtt && tp->srtt_us)
		bbr_init_pacing_rate_from_rtt(sk, bbr);
	if (bbr_full_bw_reached(bbr) || rate > sk->sk_pacing_rate)
		sk->sk_pacing_rate = rate;
}

static __always_inline __u32 bbr_min_tso_segs_of(struct sock *sk)
{
	return sk->sk_pacing_rate < (BBR_MIN_TSO_RATE >> 3) ? 1 : 2;
}

static __always_inline __u32 bbr_tso_segs_goal(struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	__u64 bytes;
	__u32 segs, mss = tp->mss_cache ? tp->mss_cache : 1;

	bytes = min_u64(sk->sk_pacing_rate >> (sk->sk_pacing_shift & 63), GSO_MAX_BYTES);
	segs = max_u32((__u32)bytes / mss, bbr_min_tso_segs_of(sk));
	return min_u32(segs, 0x7F);
}

static __always_inline void bbr_save_cwnd(struct sock *sk, struct bbr_st *bbr)
{
	__u32 cwnd = tcp_sk(sk)->snd_cwnd;

	if (bbr->prev_ca_state < TCP_CA_Recovery && bbr->mode != MODE_PROBE_RTT)
		bbr->prior_cwnd = cwnd;
	else
		bbr->prior_cwnd = max_u32(bbr->prior_cwnd, cwnd);
}

static __always_inline __u32 bbr_bdp(struct bbr_st *bbr, __u32 bw, __u32 gain)
{
	__u64 w;

	if (bbr->min_rtt_us == ~0U)
		return TCP_INIT_CWND;
	w = (__u64)bw * bbr->min_rtt_us;
	return (((w * gain) >> BBR_SCALE) + BW_UNIT - 1) / BW_UNIT;
}

static __always_inline __u32 bbr_quantization_budget(struct sock *sk, struct bbr_st *bbr, __u32 cwnd)
{
	if (bbr_tso_budget) {
		cwnd += 3 * bbr_tso_segs_goal(sk);
		cwnd = (cwnd + 1) & ~1U;
	}
	if (bbr->mode == MODE_PROBE_BW && bbr->cycle_idx == 0)
		cwnd += 2;
	return cwnd;
}

static __always_inline __u32 bbr_inflight(struct sock *sk, struct bbr_st *bbr, __u32 bw, __u32 gain)
{
	return bbr_quantization_budget(sk, bbr, bbr_bdp(bbr, bw, gain));
}

static __always_inline __u32 bbr_packets_in_net_at_edt(struct sock *sk, struct bbr_st *bbr, __u32 inflight_now)
{
	struct tcp_sock *tp = tcp_sk(sk);
	__u64 now_ns = tp->tcp_clock_cache, edt_ns = tp->tcp_wstamp_ns, interval_us;
	__u32 interval_delivered, inflight_at_edt;

	if (edt_ns < now_ns)
		edt_ns = now_ns;
	interval_us = (edt_ns - now_ns) / NSEC_PER_USEC;
	interval_delivered = ((__u64)bbr_bw(bbr) * interval_us) >> BW_SCALE;
	inflight_at_edt = inflight_now;
	if (bbr->pacing_gain > BBR_UNIT)
		inflight_at_edt += bbr_tso_segs_goal(sk);
	if (interval_delivered >= inflight_at_edt)
		return 0;
	return inflight_at_edt - interval_delivered;
}

static __always_inline __u32 bbr_ack_aggregation_cwnd(struct bbr_st *bbr)
{
	__u32 max_aggr_cwnd, aggr_cwnd = 0;

	if (bbr_extra_acked_gain && bbr_full_bw_reached(bbr)) {
		max_aggr_cwnd = ((__u64)bbr_bw(bbr) * EXTRA_ACKED_MAX_US) / BW_UNIT;
		aggr_cwnd = (bbr_extra_acked_gain * bbr_extra_acked(bbr)) >> BBR_SCALE;
		aggr_cwnd = min_u32(aggr_cwnd, max_aggr_cwnd);
	}
	return aggr_cwnd;
}

static __always_inline bool bbr_set_cwnd_to_recover_or_restore(struct sock *sk, struct bbr_st *bbr,
							       const struct rate_sample *rs, __u32 acked,
							       __u32 *new_cwnd)
{
	struct tcp_sock *tp = tcp_sk(sk);
	__u32 prev_state = bbr->prev_ca_state, state = inet_csk(sk)->icsk_ca_state;
	__u32 cwnd = tp->snd_cwnd;
	int losses = rs->losses;

	if (losses > 0)
		cwnd = (__s32)cwnd - losses > 1 ? cwnd - losses : 1;
	if (state == TCP_CA_Recovery && prev_state != TCP_CA_Recovery) {
		bbr->packet_conservation = 1;
		bbr->next_rtt_delivered = tp->delivered;
		cwnd = tcp_packets_in_flight(tp) + acked;
	} else if (prev_state >= TCP_CA_Recovery && state < TCP_CA_Recovery) {
		cwnd = max_u32(cwnd, bbr->prior_cwnd);
		bbr->packet_conservation = 0;
	}
	bbr->prev_ca_state = state;
	if (bbr->packet_conservation) {
		*new_cwnd = max_u32(cwnd, tcp_packets_in_flight(tp) + acked);
		return true;
	}
	*new_cwnd = cwnd;
	return false;
}

static __always_inline void bbr_set_cwnd(struct sock *sk, struct bbr_st *bbr, const struct rate_sample *rs,
					 __u32 acked, __u32 bw, __u32 gain)
{
	struct tcp_sock *tp = tcp_sk(sk);
	__u32 cwnd = tp->snd_cwnd, target_cwnd;

	if (!acked)
		goto done;
	if (bbr_set_cwnd_to_recover_or_restore(sk, bbr, rs, acked, &cwnd))
		goto done;
	target_cwnd = bbr_bdp(bbr, bw, gain);
	target_cwnd += bbr_ack_aggregation_cwnd(bbr);
	target_cwnd = bbr_quantization_budget(sk, bbr, target_cwnd);
	if (bbr_full_bw_reached(bbr))
		cwnd = min_u32(cwnd + acked, target_cwnd);
	else if (cwnd < target_cwnd || tp->delivered < TCP_INIT_CWND)
		cwnd = cwnd + acked;
	cwnd = max_u32(cwnd, bbr_cwnd_min_target);
done:
	tp->snd_cwnd = min_u32(cwnd, tp->snd_cwnd_clamp);
	if (bbr->mode == MODE_PROBE_RTT)
		tp->snd_cwnd = min_u32(tp->snd_cwnd, bbr_cwnd_min_target);
}

static __always_inline __u32 bbr_cycle_gain(__u32 idx)
{
	if (idx == 0)
		return bbr_probe_gain;
	if (idx == 1)
		return bbr_drain_cycle_gain;
	return BBR_UNIT;
}

static __always_inline bool bbr_is_next_cycle_phase(struct sock *sk, struct bbr_st *bbr, const struct rate_sample *rs)
{
	struct tcp_sock *tp = tcp_sk(sk);
	bool is_full_length = tcp_stamp_us_delta(tp->delivered_mstamp, bbr->cycle_mstamp) > bbr->min_rtt_us;
	__u32 inflight, bw;

	if (bbr->pacing_gain == BBR_UNIT)
		return is_full_length;
	inflight = bbr_packets_in_net_at_edt(sk, bbr, rs->prior_in_flight);
	bw = bbr_max_bw(bbr);
	if (bbr->pacing_gain > BBR_UNIT)
		return is_full_length && (rs->losses || inflight >= bbr_inflight(sk, bbr, bw, bbr->pacing_gain));
	return is_full_length || inflight <= bbr_inflight(sk, bbr, bw, BBR_UNIT);
}

static __always_inline void bbr_advance_cycle_phase(struct sock *sk, struct bbr_st *bbr)
{
	bbr->cycle_idx = (bbr->cycle_idx + 1) & (CYCLE_LEN - 1);
	bbr->cycle_mstamp = tcp_sk(sk)->delivered_mstamp;
}

static __always_inline void bbr_reset_probe_bw_mode(struct sock *sk, struct bbr_st *bbr)
{
	__u32 r = bbr_cycle_rand ? bpf_get_prandom_u32() % bbr_cycle_rand : 0;

	bbr->mode = MODE_PROBE_BW;
	bbr->cycle_idx = CYCLE_LEN - 1 - r;
	bbr_advance_cycle_phase(sk, bbr);
}

static __always_inline void bbr_reset_mode(struct sock *sk, struct bbr_st *bbr)
{
	if (!bbr_full_bw_reached(bbr))
		bbr->mode = MODE_STARTUP;
	else
		bbr_reset_probe_bw_mode(sk, bbr);
}

static __always_inline void bbr_reset_lt_bw_sampling_interval(struct sock *sk, struct bbr_st *bbr)
{
	struct tcp_sock *tp = tcp_sk(sk);

	bbr->lt_last_stamp = tp->delivered_mstamp / USEC_PER_MSEC;
	bbr->lt_last_delivered = tp->delivered;
	bbr->lt_last_lost = tp->lost;
	bbr->lt_rtt_cnt = 0;
}

static __always_inline void bbr_reset_lt_bw_sampling(struct sock *sk, struct bbr_st *bbr)
{
	bbr->lt_bw = 0;
	bbr->lt_use_bw = 0;
	bbr->lt_is_sampling = 0;
	bbr_reset_lt_bw_sampling_interval(sk, bbr);
}

static __always_inline void bbr_lt_bw_interval_done(struct sock *sk, struct bbr_st *bbr, __u32 bw)
{
	__u32 diff;

	if (bbr->lt_bw) {
		diff = bw > bbr->lt_bw ? bw - bbr->lt_bw : bbr->lt_bw - bw;
		if ((__u64)diff * BBR_UNIT <= (__u64)LT_BW_RATIO * bbr->lt_bw ||
		    bbr_rate_bytes_per_sec(sk, diff, BBR_UNIT) <= LT_BW_DIFF) {
			bbr->lt_bw = (bw + bbr->lt_bw) >> 1;
			bbr->lt_use_bw = 1;
			bbr->pacing_gain = BBR_UNIT;
			bbr->lt_rtt_cnt = 0;
			return;
		}
	}
	bbr->lt_bw = bw;
	bbr_reset_lt_bw_sampling_interval(sk, bbr);
}

/* bbr_lt_bw_sampling, with the rate sample's two fields it reads as arguments */
static __always_inline void bbr_lt_bw_sampling(struct sock *sk, struct bbr_st *bbr, int losses, bool app_limited)
{
	struct tcp_sock *tp = tcp_sk(sk);
	__u32 lost, delivered;
	__u64 bw;
	__u32 t;

	if (!bbr_lt_bw)
		return;
	if (bbr->lt_use_bw) {
		if (bbr->mode == MODE_PROBE_BW && bbr->round_start && ++bbr->lt_rtt_cnt >= LT_BW_MAX_RTTS) {
			bbr_reset_lt_bw_sampling(sk, bbr);
			bbr_reset_probe_bw_mode(sk, bbr);
		}
		return;
	}
	if (!bbr->lt_is_sampling) {
		if (!losses)
			return;
		bbr_reset_lt_bw_sampling_interval(sk, bbr);
		bbr->lt_is_sampling = 1;
	}
	if (app_limited) {
		bbr_reset_lt_bw_sampling(sk, bbr);
		return;
	}
	if (bbr->round_start)
		bbr->lt_rtt_cnt++;
	if (bbr->lt_rtt_cnt < LT_INTVL_MIN_RTTS)
		return;
	if (bbr->lt_rtt_cnt > 4 * LT_INTVL_MIN_RTTS) {
		bbr_reset_lt_bw_sampling(sk, bbr);
		return;
	}
	if (!losses)
		return;
	lost = tp->lost - bbr->lt_last_lost;
	delivered = tp->delivered - bbr->lt_last_delivered;
	if (!delivered || ((__u64)lost << BBR_SCALE) < (__u64)LT_LOSS_THRESH * delivered)
		return;
	t = (__u32)(tp->delivered_mstamp / USEC_PER_MSEC) - bbr->lt_last_stamp;
	if ((__s32)t < 1)
		return;
	if (t >= ~0U / USEC_PER_MSEC) {
		bbr_reset_lt_bw_sampling(sk, bbr);
		return;
	}
	bw = (__u64)delivered * BW_UNIT;
	bw /= (__u64)t * USEC_PER_MSEC;
	bbr_lt_bw_interval_done(sk, bbr, (__u32)bw);
}

static __always_inline void bbr_update_bw(struct sock *sk, struct bbr_st *bbr, const struct rate_sample *rs)
{
	struct tcp_sock *tp = tcp_sk(sk);
	long interval_us = rs->interval_us;
	__u64 bw;

	bbr->round_start = 0;
	if (rs->delivered < 0 || interval_us <= 0)
		return;
	if (!before(rs->prior_delivered, bbr->next_rtt_delivered)) {
		bbr->next_rtt_delivered = tp->delivered;
		bbr->rtt_cnt++;
		bbr->round_start = 1;
		bbr->packet_conservation = 0;
	}
	bbr_lt_bw_sampling(sk, bbr, rs->losses, rs->is_app_limited);
	bw = (__u64)rs->delivered * BW_UNIT / (__u64)interval_us;
	if (!rs->is_app_limited || bw >= bbr_max_bw(bbr))
		minmax_running_max(bbr->bw, bbr_bw_rtts, bbr->rtt_cnt, (__u32)bw);
}

static __always_inline void bbr_update_ack_aggregation(struct sock *sk, struct bbr_st *bbr, const struct rate_sample *rs)
{
	struct tcp_sock *tp = tcp_sk(sk);
	__u32 epoch_us, expected_acked, extra_acked, idx;

	if (!bbr_extra_acked_gain || rs->acked_sacked <= 0 || rs->delivered < 0 || rs->interval_us <= 0)
		return;
	if (bbr->round_start) {
		bbr->extra_acked_win_rtts = min_u32(0x1F, bbr->extra_acked_win_rtts + 1);
		if (bbr->extra_acked_win_rtts >= bbr_extra_acked_win_rtts) {
			bbr->extra_acked_win_rtts = 0;
			bbr->extra_acked_win_idx = bbr->extra_acked_win_idx ? 0 : 1;
			if (bbr->extra_acked_win_idx)
				bbr->extra_acked[1] = 0;
			else
				bbr->extra_acked[0] = 0;
		}
	}
	epoch_us = tcp_stamp_us_delta(tp->delivered_mstamp, bbr->ack_epoch_mstamp);
	expected_acked = ((__u64)bbr_bw(bbr) * epoch_us) / BW_UNIT;
	if (bbr->ack_epoch_acked <= expected_acked ||
	    bbr->ack_epoch_acked + rs->acked_sacked >= ACK_EPOCH_ACKED_RESET_THRESH) {
		bbr->ack_epoch_acked = 0;
		bbr->ack_epoch_mstamp = tp->delivered_mstamp;
		expected_acked = 0;
	}
	bbr->ack_epoch_acked = min_u32(0xFFFFF, bbr->ack_epoch_acked + rs->acked_sacked);
	extra_acked = bbr->ack_epoch_acked - expected_acked;
	extra_acked = min_u32(extra_acked, tp->snd_cwnd);
	idx = bbr->extra_acked_win_idx;
	if (idx) {
		if (extra_acked > bbr->extra_acked[1])
			bbr->extra_acked[1] = extra_acked;
	} else {
		if (extra_acked > bbr->extra_acked[0])
			bbr->extra_acked[0] = extra_acked;
	}
}

static __always_inline void bbr_check_full_bw_reached(struct bbr_st *bbr, const struct rate_sample *rs)
{
	__u32 bw_thresh;

	if (bbr_full_bw_reached(bbr) || !bbr->round_start || rs->is_app_limited)
		return;
	bw_thresh = (__u64)bbr->full_bw * bbr_full_bw_thresh >> BBR_SCALE;
	if (bbr_max_bw(bbr) >= bw_thresh) {
		bbr->full_bw = bbr_max_bw(bbr);
		bbr->full_bw_cnt = 0;
		return;
	}
	++bbr->full_bw_cnt;
	bbr->full_bw_reached = bbr->full_bw_cnt >= bbr_full_bw_cnt;
}

static __always_inline void bbr_check_drain(struct sock *sk, struct bbr_st *bbr)
{
	struct tcp_sock *tp = tcp_sk(sk);

	if (bbr->mode == MODE_STARTUP && bbr_full_bw_reached(bbr)) {
		bbr->mode = MODE_DRAIN;
		tp->snd_ssthresh = bbr_inflight(sk, bbr, bbr_max_bw(bbr), BBR_UNIT);
	}
	if (bbr->mode == MODE_DRAIN &&
	    bbr_packets_in_net_at_edt(sk, bbr, tcp_packets_in_flight(tp)) <= bbr_inflight(sk, bbr, bbr_max_bw(bbr), BBR_UNIT))
		bbr_reset_probe_bw_mode(sk, bbr);
}

/* Stable RTprop (judge_probe): at the end of a PROBE_RTT, adopt the probe's higher
 * RTprop only if it jumped by more than the jump factor, or if the last N probes all measured
 * higher and agree within the tolerance. */
static __always_inline void bbr_judge_probe(struct bbr_st *bbr)
{
	__u32 probe = bbr->probe_min_rtt_us, n = bbr_stable_rtprop_probes, lo = ~0U, hi = 0, i;

	bbr->probe_min_rtt_us = ~0U;
	if (probe == ~0U || probe <= bbr->min_rtt_us || bbr->min_rtt_us == ~0U) {
		bbr->n_higher = 0;
		return;
	}
	if ((__u64)probe * PPM > (__u64)bbr_stable_rtprop_jump_ppm * bbr->min_rtt_us) {
		bbr->min_rtt_us = probe;
		bbr->n_higher = 0;
		return;
	}
	if (n < 1)
		n = 1;
	if (n > MAX_STABLE_PROBES)
		n = MAX_STABLE_PROBES;
	if (bbr->n_higher >= n) {
		/* drop the oldest */
		for (i = 0; i + 1 < MAX_STABLE_PROBES; i++)
			bbr->higher[i] = bbr->higher[i + 1];
		bbr->n_higher = n - 1;
	}
	i = bbr->n_higher;
	if (i < MAX_STABLE_PROBES)
		bbr->higher[i] = probe;
	bbr->n_higher = i + 1;
	if (bbr->n_higher < n)
		return;
	for (i = 0; i < MAX_STABLE_PROBES; i++) {
		if (i >= n)
			break;
		lo = min_u32(lo, bbr->higher[i]);
		hi = max_u32(hi, bbr->higher[i]);
	}
	if ((__u64)hi * PPM <= (__u64)lo * (PPM + bbr_stable_rtprop_tolerance_ppm)) {
		bbr->min_rtt_us = lo;
		bbr->n_higher = 0;
	}
}

static __always_inline void bbr_check_probe_rtt_done(struct sock *sk, struct bbr_st *bbr)
{
	struct tcp_sock *tp = tcp_sk(sk);
	__u64 now = bpf_jiffies64();

	if (!(bbr->probe_rtt_done_stamp && now > bbr->probe_rtt_done_stamp))
		return;
	bbr->min_rtt_stamp = now;
	if (bbr_stable_rtprop)
		bbr_judge_probe(bbr);
	tp->snd_cwnd = max_u32(tp->snd_cwnd, bbr->prior_cwnd);
	bbr_reset_mode(sk, bbr);
}

static __always_inline void bbr_update_min_rtt(struct sock *sk, struct bbr_st *bbr, const struct rate_sample *rs)
{
	struct tcp_sock *tp = tcp_sk(sk);
	__u64 now = bpf_jiffies64();
	bool filter_expired = now > bbr->min_rtt_stamp + bbr_min_rtt_win_jiffies;
	long rtt_us = rs->rtt_us;

	if (rtt_us >= 0) {
		if (bbr_stable_rtprop) {
			/* lower samples at once; higher ones only feed the probe's measurement */
			if ((__u64)rtt_us < bbr->min_rtt_us) {
				bbr->min_rtt_us = rtt_us;
				bbr->min_rtt_stamp = now;
				bbr->n_higher = 0;
			} else if (filter_expired || bbr->mode == MODE_PROBE_RTT) {
				bbr->probe_min_rtt_us = min_u32(bbr->probe_min_rtt_us, (__u32)rtt_us);
			}
		} else if ((__u64)rtt_us < bbr->min_rtt_us || (filter_expired && !rs->is_ack_delayed)) {
			bbr->min_rtt_us = rtt_us;
			bbr->min_rtt_stamp = now;
		}
	}
	if (bbr_probe_rtt_mode_jiffies > 0 && filter_expired && !bbr->idle_restart && bbr->mode != MODE_PROBE_RTT) {
		bbr->mode = MODE_PROBE_RTT;
		bbr_save_cwnd(sk, bbr);
		bbr->probe_rtt_done_stamp = 0;
	}
	if (bbr->mode == MODE_PROBE_RTT) {
		__u32 app = tp->delivered + tcp_packets_in_flight(tp);

		/* ignore low rate samples during this mode */
		tp->app_limited = app ? app : 1;
		if (!bbr->probe_rtt_done_stamp && tcp_packets_in_flight(tp) <= bbr_cwnd_min_target) {
			bbr->probe_rtt_done_stamp = now + bbr_probe_rtt_mode_jiffies;
			bbr->probe_rtt_round_done = 0;
			bbr->next_rtt_delivered = tp->delivered;
		} else if (bbr->probe_rtt_done_stamp) {
			if (bbr->round_start)
				bbr->probe_rtt_round_done = 1;
			if (bbr->probe_rtt_round_done)
				bbr_check_probe_rtt_done(sk, bbr);
		}
	}
	if (rs->delivered > 0)
		bbr->idle_restart = 0;
}

static __always_inline void bbr_update_gains(struct bbr_st *bbr)
{
	switch (bbr->mode) {
	case MODE_STARTUP:
		bbr->pacing_gain = bbr_high_gain;
		bbr->cwnd_gain = bbr_high_gain;
		break;
	case MODE_DRAIN:
		bbr->pacing_gain = bbr_drain_gain;
		bbr->cwnd_gain = bbr_high_gain;
		break;
	case MODE_PROBE_BW:
		bbr->pacing_gain = bbr->lt_use_bw ? BBR_UNIT : bbr_cycle_gain(bbr->cycle_idx);
		bbr->cwnd_gain = bbr->cwnd_gain_probe_bw;
		break;
	default:
		bbr->pacing_gain = BBR_UNIT;
		bbr->cwnd_gain = BBR_UNIT;
		break;
	}
}

/* The adaptive inflight cap (adapt_cwnd_gain), once per round in PROBE_BW: lower the
 * cwnd gain if the round lost more than the threshold; else raise it if the round delivered
 * less than the bandwidth estimate (minus a margin); else lower it if even the round's
 * smallest RTT shows a standing queue; else keep it. */
static __always_inline void bbr_adapt_cwnd_gain(struct sock *sk, struct bbr_st *bbr)
{
	struct tcp_sock *tp = tcp_sk(sk);
	__u64 now = tp->tcp_mstamp, start = bbr->round_start_us, elapsed, round_bw;
	__u32 delivered = tp->delivered - bbr->round_delivered;
	__u32 lost = tp->lost - bbr->round_lost;
	__u32 round_min_rtt = bbr->round_min_rtt_us;
	__s32 gain = bbr->cwnd_gain_probe_bw;

	bbr->round_start_us = now;
	bbr->round_delivered = tp->delivered;
	bbr->round_lost = tp->lost;
	bbr->round_min_rtt_us = ~0U;
	if (bbr->mode != MODE_PROBE_BW || start == 0 || now <= start)
		return;
	elapsed = now - start;
	round_bw = (__u64)delivered * BW_UNIT / elapsed;
	if (delivered + lost > 0 &&
	    (__u64)lost * PPM > (__u64)bbr_adaptive_loss_thresh_ppm * (delivered + lost))
		gain -= bbr_adaptive_step;
	else if (round_bw * PPM < (__u64)bbr_bw(bbr) * (PPM - bbr_adaptive_delivery_margin_ppm))
		gain += bbr_adaptive_step;
	else if (bbr->min_rtt_us != ~0U && round_min_rtt != ~0U &&
		 (__u64)round_min_rtt * PPM > (PPM + bbr_adaptive_rtt_margin_ppm) * bbr->min_rtt_us)
		gain -= bbr_adaptive_step;
	if (gain < (__s32)bbr_adaptive_min_gain)
		gain = bbr_adaptive_min_gain;
	if (gain > (__s32)bbr_adaptive_max_gain)
		gain = bbr_adaptive_max_gain;
	bbr->cwnd_gain_probe_bw = gain;
}

/* --- struct_ops callbacks ------------------------------------------------------------------ */

SEC("struct_ops/bbr_init")
void BPF_PROG(bbr_init, struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct bbr_st *bbr = bpf_sk_storage_get(&bbr_state, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);

	if (!bbr)
		return;
	__builtin_memset(bbr, 0, sizeof(*bbr));
	bbr->prior_cwnd = 0;
	tp->snd_ssthresh = TCP_INFINITE_SSTHRESH;
	bbr->rtt_cnt = 0;
	bbr->next_rtt_delivered = tp->delivered;
	bbr->prev_ca_state = TCP_CA_Open;
	bbr->packet_conservation = 0;
	bbr->probe_rtt_done_stamp = 0;
	bbr->probe_rtt_round_done = 0;
	bbr->min_rtt_us = tp->rtt_min.s[0].v;        /* tcp_min_rtt(): ~0U without a sample */
	bbr->min_rtt_stamp = bpf_jiffies64();
	minmax_reset(bbr->bw, bbr->rtt_cnt, 0);
	bbr->has_seen_rtt = 0;
	bbr_init_pacing_rate_from_rtt(sk, bbr);
	bbr->round_start = 0;
	bbr->idle_restart = 0;
	bbr->full_bw_reached = 0;
	bbr->full_bw = 0;
	bbr->full_bw_cnt = 0;
	bbr->cycle_mstamp = 0;
	bbr->cycle_idx = 0;
	bbr_reset_lt_bw_sampling(sk, bbr);
	bbr->mode = MODE_STARTUP;                      /* bbr_reset_startup_mode */
	bbr->ack_epoch_mstamp = tp->tcp_mstamp;
	bbr->ack_epoch_acked = 0;
	bbr->extra_acked_win_rtts = 0;
	bbr->extra_acked_win_idx = 0;
	bbr->extra_acked[0] = 0;
	bbr->extra_acked[1] = 0;
	bbr->cwnd_gain_probe_bw = bbr_cwnd_gain;
	bbr->round_start_us = 0;
	bbr->round_min_rtt_us = ~0U;
	bbr->probe_min_rtt_us = ~0U;
	bbr->n_higher = 0;
	if (sk->sk_pacing_status == SK_PACING_NONE)   /* cmpxchg(NONE -> NEEDED) */
		sk->sk_pacing_status = SK_PACING_NEEDED;
}

SEC("struct_ops/bbr_main")
void BPF_PROG(bbr_main, struct sock *sk, __u32 ack, int flag, const struct rate_sample *rs)
{
	struct bbr_st *bbr = bbr_of(sk);
	__u32 bw;

	if (!bbr)
		return;
	/* bbr_update_model */
	bbr_update_bw(sk, bbr, rs);
	if (bbr_adaptive_cap) {
		if (rs->rtt_us >= 0)
			bbr->round_min_rtt_us = min_u32(bbr->round_min_rtt_us, (__u32)rs->rtt_us);
		if (bbr->round_start)
			bbr_adapt_cwnd_gain(sk, bbr);
	}
	bbr_update_ack_aggregation(sk, bbr, rs);
	if (bbr->mode == MODE_PROBE_BW && bbr_is_next_cycle_phase(sk, bbr, rs))
		bbr_advance_cycle_phase(sk, bbr);
	bbr_check_full_bw_reached(bbr, rs);
	bbr_check_drain(sk, bbr);
	bbr_update_min_rtt(sk, bbr, rs);
	bbr_update_gains(bbr);

	bw = bbr_bw(bbr);
	bbr_set_pacing_rate(sk, bbr, bw, bbr->pacing_gain);
	bbr_set_cwnd(sk, bbr, rs, rs->acked_sacked, bw, bbr->cwnd_gain);
}

SEC("struct_ops/bbr_sndbuf_expand")
__u32 BPF_PROG(bbr_sndbuf_expand, struct sock *sk)
{
	return 3;
}

SEC("struct_ops/bbr_undo_cwnd")
__u32 BPF_PROG(bbr_undo_cwnd, struct sock *sk)
{
	struct bbr_st *bbr = bbr_of(sk);

	if (bbr) {
		bbr->full_bw = 0;
		bbr->full_bw_cnt = 0;
		bbr_reset_lt_bw_sampling(sk, bbr);
	}
	return tcp_sk(sk)->snd_cwnd;
}

SEC("struct_ops/bbr_ssthresh")
__u32 BPF_PROG(bbr_ssthresh, struct sock *sk)
{
	struct bbr_st *bbr = bbr_of(sk);

	if (bbr)
		bbr_save_cwnd(sk, bbr);
	return tcp_sk(sk)->snd_ssthresh;
}

SEC("struct_ops/bbr_min_tso_segs")
__u32 BPF_PROG(bbr_min_tso_segs, struct sock *sk)
{
	return bbr_min_tso_segs_of(sk);
}

SEC("struct_ops/bbr_cwnd_event")
void BPF_PROG(bbr_cwnd_event, struct sock *sk, enum tcp_ca_event event)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct bbr_st *bbr;

	if (event != CA_EVENT_TX_START || !tp->app_limited)
		return;
	bbr = bbr_of(sk);
	if (!bbr)
		return;
	bbr->idle_restart = 1;
	bbr->ack_epoch_mstamp = tp->tcp_mstamp;
	bbr->ack_epoch_acked = 0;
	if (bbr->mode == MODE_PROBE_BW)
		bbr_set_pacing_rate(sk, bbr, bbr_bw(bbr), BBR_UNIT);
	else if (bbr->mode == MODE_PROBE_RTT)
		bbr_check_probe_rtt_done(sk, bbr);
}

SEC("struct_ops/bbr_set_state")
void BPF_PROG(bbr_set_state, struct sock *sk, __u8 new_state)
{
	struct bbr_st *bbr;

	if (new_state != TCP_CA_Loss)
		return;
	bbr = bbr_of(sk);
	if (!bbr)
		return;
	bbr->prev_ca_state = TCP_CA_Loss;
	bbr->full_bw = 0;
	bbr->round_start = 1;  /* treat RTO like end of a round */
	bbr_lt_bw_sampling(sk, bbr, 1, false);
}

/* The loader replaces the name with a unique one per loaded instance (at most 15 characters). */
SEC(".struct_ops")
struct tcp_congestion_ops bbr_ops = {
	.init = (void *)bbr_init,
	.cong_control = (void *)bbr_main,
	.sndbuf_expand = (void *)bbr_sndbuf_expand,
	.undo_cwnd = (void *)bbr_undo_cwnd,
	.cwnd_event = (void *)bbr_cwnd_event,
	.ssthresh = (void *)bbr_ssthresh,
	.min_tso_segs = (void *)bbr_min_tso_segs,
	.set_state = (void *)bbr_set_state,
	.flags = 0x1,  /* TCP_CONG_NON_RESTRICTED */
	.name = "bpf_bbr",
};
