// SPDX-License-Identifier: GPL-2.0
/* Refused at load: reads tcp_sock.rcv_ssthresh, which the simulator's socket view lacks. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char _license[] SEC("license") = "GPL";

SEC("struct_ops/mf_ssthresh")
__u32 BPF_PROG(mf_ssthresh, struct sock *sk)
{
	struct tcp_sock *tp = (struct tcp_sock *)sk;

	return tp->rcv_ssthresh;
}

SEC(".struct_ops")
struct tcp_congestion_ops mf = {
	.ssthresh = (void *)mf_ssthresh,
	.name = "bpf_mf",
};
