//! bpf_setsockopt / bpf_getsockopt (SOL_TCP, TCP_CONGESTION, as net/core/filter.c runs them for
//! a congestion control), several programs sharing one `SEC("struct_ops")` section, and the
//! choice among several tcp_congestion_ops of one object, on tests/progs/sockopt*.bpf.c
//! (compiled at test time; skipped, with the reason printed, without clang).

use std::sync::Arc;

use ccbpf::{Env, Object, Op, TcpSock, DEFAULT_KCONFIG};

mod common;
use common::compile;

const EINVAL: i32 = 22;
const ENOTSUPP: i32 = 524;

fn sockopt(select: Option<&str>) -> Option<Result<Arc<Object>, String>> {
    let b = compile("sockopt")?;
    Some(Object::load_selected(&b, &DEFAULT_KCONFIG, select).map(Arc::new).map_err(|e| e.to_string()))
}

#[test]
fn several_tcp_congestion_ops_need_a_choice_by_name() {
    let Some(r) = sockopt(None) else { return };
    let e = r.unwrap_err();
    assert!(e.contains("defines 2 tcp_congestion_ops") && e.contains("bpf_so_first") && e.contains("bpf_so (variable so)"), "{e}");
    let Some(r) = sockopt(Some("bpf_nope")) else { return };
    assert!(r.unwrap_err().contains("no tcp_congestion_ops named \"bpf_nope\""));
    // by .name, or by the variable's name
    for (sel, name) in [("bpf_so", "bpf_so"), ("so_first", "bpf_so_first")] {
        let obj = sockopt(Some(sel)).unwrap().unwrap();
        assert_eq!(obj.name(), name);
    }
}

#[test]
fn a_nameless_tcp_congestion_ops_is_skipped_as_the_kernel_refuses_it() {
    let Some(b) = compile("sockopt") else { return };
    // Empty bpf_so_first's name in the bytes (what `bpf:PATH#bpf_so` does to the others).
    let at = b.windows(13).position(|w| w == b"bpf_so_first\0").unwrap();
    let mut c = b.clone();
    c[at..at + 12].fill(0);
    let obj = Object::load(&c).unwrap();
    assert_eq!(obj.name(), "bpf_so");
    assert!(obj.has_op(Op::CwndEvent));
}

#[test]
fn programs_sharing_one_section_each_run_their_own_code() {
    let Some(r) = sockopt(Some("bpf_so_first")) else { return };
    let obj = r.unwrap();
    let mut flow = obj.instance();
    *flow.sock = TcpSock::initial(1448);
    let mut env = Env::default();
    assert_eq!(flow.call(Op::Ssthresh, &[], None, None, &mut env).unwrap(), Some(11));
    assert_eq!(flow.call(Op::UndoCwnd, &[], None, None, &mut env).unwrap(), Some(22));
    assert_eq!(obj.program_name(Op::Ssthresh), Some("struct_ops:so_ssthresh"));
    // the other variable names the same programs the other way round
    let obj = sockopt(Some("bpf_so")).unwrap().unwrap();
    let mut flow = obj.instance();
    assert_eq!(flow.call(Op::Ssthresh, &[], None, None, &mut env).unwrap(), Some(22));
    assert_eq!(flow.call(Op::UndoCwnd, &[], None, None, &mut env).unwrap(), Some(11));
}

fn event(flow: &mut ccbpf::Instance, ev: u64) -> Result<i32, String> {
    let mut env = Env::default();
    flow.sock.snd_cwnd_cnt = 0xdead;
    flow.call(Op::CwndEvent, &[ev], None, None, &mut env).map_err(|e| e.to_string())?;
    Ok(flow.sock.snd_cwnd_cnt as i32)
}

#[test]
fn tcp_congestion_with_the_kernels_results() {
    let Some(r) = sockopt(Some("bpf_so")) else { return };
    let obj = r.unwrap();
    let mut flow = obj.instance();
    *flow.sock = TcpSock::initial(1448);
    // set to its own name: 0, nothing changes
    assert_eq!(event(&mut flow, 0), Ok(0));
    // "cdg" is refused to BPF with -ENOTSUPP
    assert_eq!(event(&mut flow, 1), Ok(-ENOTSUPP));
    // get: the running congestion control's name, NUL-terminated, the rest zeroed
    assert_eq!(event(&mut flow, 2), Ok(0));
    let p = flow.sock.inet_conn.icsk_ca_priv;
    let bytes: Vec<u8> = p[..2].iter().flat_map(|w| w.to_le_bytes()).collect();
    assert_eq!(&bytes[..], b"bpf_so\0\0\0\0\0\0\0\0\0\0");
    // get into 4 bytes: 3 of the name and the NUL (optval[--optlen] = 0)
    assert_eq!(event(&mut flow, 3), Ok(0));
    assert_eq!(&flow.sock.inet_conn.icsk_ca_priv[0].to_le_bytes()[..4], b"bpf\0");
    // optlen < 2: -EINVAL
    assert_eq!(event(&mut flow, 4), Ok(-EINVAL));
}

#[test]
fn what_the_simulator_cannot_do_is_a_run_time_error_naming_it() {
    let Some(r) = sockopt(Some("bpf_so")) else { return };
    let obj = r.unwrap();
    let mut flow = obj.instance();
    *flow.sock = TcpSock::initial(1448);
    let e = event(&mut flow, 5).unwrap_err();
    assert!(e.contains("bpf_setsockopt") && e.contains("\"reno\"") && e.contains("switching"), "{e}");
    assert!(e.contains("struct_ops:so_cwnd_event (cwnd_event)"), "{e}");
    let e = event(&mut flow, 6).unwrap_err();
    assert!(e.contains("level 6 (SOL_TCP) option 1 (TCP_NODELAY) is not supported"), "{e}");
    let e = event(&mut flow, 7).unwrap_err();
    assert!(e.contains("bpf_getsockopt") && e.contains("SOL_SOCKET") && e.contains("SO_SNDBUF"), "{e}");
}

#[test]
fn release_may_not_call_setsockopt() {
    let Some(b) = compile("sockopt_release") else { return };
    let e = Object::load(&b).unwrap_err().to_string();
    assert!(e.contains("op release") && e.contains("bpf_setsockopt") && e.contains("sr_release"), "{e}");
}
