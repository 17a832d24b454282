// SPDX-License-Identifier: GPL-2.0
/* bpf_setsockopt / bpf_getsockopt (SOL_TCP, TCP_CONGESTION), several programs in one
 * SEC("struct_ops") section, and two tcp_congestion_ops in one object (as the kernel's own
 * selftests have them). Which call cwnd_event makes is chosen by its event argument; the
 * result lands in snd_cwnd_cnt, the name read back in icsk_ca_priv. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char _license[] SEC("license") = "GPL";

#define SOL_TCP 6
#define SOL_SOCKET 1
#define TCP_CONGESTION 13
#define TCP_NODELAY 1

char name_buf[16];

SEC("struct_ops")
__u32 BPF_PROG(so_ssthresh, struct sock *sk)
{
	return 11;
}

SEC("struct_ops")
__u32 BPF_PROG(so_undo, struct sock *sk)
{
	return 22;
}

SEC("struct_ops")
void BPF_PROG(so_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
}

SEC("struct_ops")
void BPF_PROG(so_cwnd_event, struct sock *sk, enum tcp_ca_event ev)
{
	struct tcp_sock *tp = (struct tcp_sock *)sk;
	char own[] = "bpf_so";
	char cdg[] = "cdg";
	char other[] = "reno";
	char small[8];
	int one = 1;
	long r = 0;

	switch ((int)ev) {
	case 0:
		r = bpf_setsockopt(sk, SOL_TCP, TCP_CONGESTION, own, sizeof(own));
		break;
	case 1:
		r = bpf_setsockopt(sk, SOL_TCP, TCP_CONGESTION, cdg, sizeof(cdg));
		break;
	case 2:
		r = bpf_getsockopt(sk, SOL_TCP, TCP_CONGESTION, name_buf, sizeof(name_buf));
		__builtin_memcpy(&((struct inet_connection_sock *)sk)->icsk_ca_priv, name_buf, 16);
		break;
	case 3:
		r = bpf_getsockopt(sk, SOL_TCP, TCP_CONGESTION, small, 4);
		__builtin_memcpy(&((struct inet_connection_sock *)sk)->icsk_ca_priv, small, 8);
		break;
	case 4:
		r = bpf_setsockopt(sk, SOL_TCP, TCP_CONGESTION, own, 1);
		break;
	case 5:
		r = bpf_setsockopt(sk, SOL_TCP, TCP_CONGESTION, other, sizeof(other));
		break;
	case 6:
		r = bpf_setsockopt(sk, SOL_TCP, TCP_NODELAY, &one, sizeof(one));
		break;
	case 7:
		r = bpf_getsockopt(sk, SOL_SOCKET, 7, &one, sizeof(one));
		break;
	}
	tp->snd_cwnd_cnt = (__u32)r;
}

SEC(".struct_ops")
struct tcp_congestion_ops so_first = {
	.ssthresh = (void *)so_ssthresh,
	.undo_cwnd = (void *)so_undo,
	.cong_avoid = (void *)so_cong_avoid,
	.name = "bpf_so_first",
};

SEC(".struct_ops")
struct tcp_congestion_ops so = {
	.ssthresh = (void *)so_undo,
	.undo_cwnd = (void *)so_ssthresh,
	.cwnd_event = (void *)so_cwnd_event,
	.cong_avoid = (void *)so_cong_avoid,
	.name = "bpf_so",
};
