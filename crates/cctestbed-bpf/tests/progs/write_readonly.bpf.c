// SPDX-License-Identifier: GPL-2.0
/* Refused at load: stores to tcp_sock.srtt_us, which bpf_tcp_ca.c does not let a program write. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char _license[] SEC("license") = "GPL";

SEC("struct_ops/ro_ssthresh")
__u32 BPF_PROG(ro_ssthresh, struct sock *sk)
{
	struct tcp_sock *tp = (struct tcp_sock *)sk;

	tp->srtt_us = 1;
	return 2;
}

SEC(".struct_ops")
struct tcp_congestion_ops ro = {
	.ssthresh = (void *)ro_ssthresh,
	.name = "bpf_ro",
};
