// SPDX-License-Identifier: GPL-2.0
/*
 * Loads, then fails (or not) at run time:
 *  ssthresh      loops until snd_cwnd_cnt reaches a value it never reaches (instruction budget)
 *  cong_avoid    reads 4 bytes at the socket + acked (out of bounds for a large acked)
 *  undo_cwnd     snd_cwnd / snd_cwnd_cnt (kernel: 0 when dividing by zero)
 *  min_tso_segs  snd_cwnd % snd_cwnd_cnt (kernel: snd_cwnd unchanged when dividing by zero)
 *  set_state     stores 4 bytes at the socket + new_state (only allowed inside writable fields)
 *  sndbuf_expand a chain of bpf-to-bpf calls deeper than the kernel allows when snd_cwnd_cnt says so
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char _license[] SEC("license") = "GPL";

SEC("struct_ops/mb_ssthresh")
__u32 BPF_PROG(mb_ssthresh, struct sock *sk)
{
	struct tcp_sock *tp = (struct tcp_sock *)sk;
	__u32 i = 0;

	while (*(volatile __u32 *)&tp->snd_cwnd_cnt != 0xdeadbeef)
		i++;
	return i;
}

SEC("struct_ops/mb_cong_avoid")
void BPF_PROG(mb_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	struct tcp_sock *tp = (struct tcp_sock *)sk;
	char *p = (char *)sk;

	tp->snd_cwnd = *(volatile __u32 *)(p + acked);
}

SEC("struct_ops/mb_undo_cwnd")
__u32 BPF_PROG(mb_undo_cwnd, struct sock *sk)
{
	struct tcp_sock *tp = (struct tcp_sock *)sk;

	return tp->snd_cwnd / tp->snd_cwnd_cnt;
}

SEC("struct_ops/mb_min_tso_segs")
__u32 BPF_PROG(mb_min_tso_segs, struct sock *sk)
{
	struct tcp_sock *tp = (struct tcp_sock *)sk;

	return tp->snd_cwnd % tp->snd_cwnd_cnt;
}

SEC("struct_ops/mb_set_state")
void BPF_PROG(mb_set_state, struct sock *sk, __u8 new_state)
{
	char *p = (char *)sk;

	*(volatile __u32 *)(p + new_state) = 7;
}

static __attribute__((noinline)) __u32 deeper(__u32 n)
{
	__u32 x;

	if (n == 0)
		return 0;
	x = deeper(n - 1);
	return x ^ (x << 1) ^ n;
}

SEC("struct_ops/mb_sndbuf_expand")
__u32 BPF_PROG(mb_sndbuf_expand, struct sock *sk)
{
	struct tcp_sock *tp = (struct tcp_sock *)sk;

	return deeper(tp->snd_cwnd_cnt);
}

SEC(".struct_ops")
struct tcp_congestion_ops mb = {
	.ssthresh = (void *)mb_ssthresh,
	.cong_avoid = (void *)mb_cong_avoid,
	.undo_cwnd = (void *)mb_undo_cwnd,
	.min_tso_segs = (void *)mb_min_tso_segs,
	.set_state = (void *)mb_set_state,
	.sndbuf_expand = (void *)mb_sndbuf_expand,
	.name = "bpf_mb",
};
