// SPDX-License-Identifier: GPL-2.0
/*
 * A congestion control that never grows its window, whose sndbuf_expand sets it to 4: the
 * window a flow runs with shows whether sndbuf_expand was called (tcp_init_buffer_space calls
 * it once the algorithm is initialised, before any data goes).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char _license[] SEC("license") = "GPL";

SEC("struct_ops/fixed_ssthresh")
__u32 BPF_PROG(fixed_ssthresh, struct sock *sk)
{
	return 2;
}

SEC("struct_ops/fixed_cong_avoid")
void BPF_PROG(fixed_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
}

SEC("struct_ops/fixed_undo_cwnd")
__u32 BPF_PROG(fixed_undo_cwnd, struct sock *sk)
{
	return ((struct tcp_sock *)sk)->snd_cwnd;
}

SEC("struct_ops/fixed_sndbuf_expand")
__u32 BPF_PROG(fixed_sndbuf_expand, struct sock *sk)
{
	((struct tcp_sock *)sk)->snd_cwnd = 4;
	return 3;
}

SEC(".struct_ops")
struct tcp_congestion_ops fixed = {
	.ssthresh = (void *)fixed_ssthresh,
	.cong_avoid = (void *)fixed_cong_avoid,
	.undo_cwnd = (void *)fixed_undo_cwnd,
	.sndbuf_expand = (void *)fixed_sndbuf_expand,
	.name = "bpf_fixed",
};
