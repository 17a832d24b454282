// SPDX-License-Identifier: GPL-2.0
/* Refused at load: a (non-weak) __kconfig option the loader does not know. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char _license[] SEC("license") = "GPL";

extern int CONFIG_NOT_AN_OPTION __kconfig;

SEC("struct_ops/ku_ssthresh")
__u32 BPF_PROG(ku_ssthresh, struct sock *sk)
{
	return CONFIG_NOT_AN_OPTION;
}

SEC(".struct_ops")
struct tcp_congestion_ops ku = {
	.ssthresh = (void *)ku_ssthresh,
	.name = "bpf_ku",
};
