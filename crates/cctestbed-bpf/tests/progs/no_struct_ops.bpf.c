// SPDX-License-Identifier: GPL-2.0
/* Refused at load: a program but no tcp_congestion_ops. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char _license[] SEC("license") = "GPL";

SEC("struct_ops/nso_ssthresh")
__u32 BPF_PROG(nso_ssthresh, struct sock *sk)
{
	return 2;
}
