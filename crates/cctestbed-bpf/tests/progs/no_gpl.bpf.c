/* Refused at load: the license is not GPL-compatible. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char _license[] SEC("license") = "Proprietary";

SEC("struct_ops/ng_ssthresh")
__u32 BPF_PROG(ng_ssthresh, struct sock *sk)
{
	return 2;
}

SEC(".struct_ops")
struct tcp_congestion_ops ng = {
	.ssthresh = (void *)ng_ssthresh,
	.name = "bpf_ng",
};
