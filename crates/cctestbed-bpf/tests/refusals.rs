//! Refusals at load and failures at run time, on small programs under tests/progs compiled at
//! test time (`clang -g -O2 -target bpf -I target/bpf`); each test is skipped, with the reason
//! printed, when clang, libbpf's headers or target/bpf/vmlinux.h are absent.

use std::sync::Arc;

mod common;
use common::{compile, compile_with};

use ccbpf::{Env, Object, Op, TcpSock};

fn refusal(bytes: &[u8]) -> String {
    match Object::load(bytes) {
        Ok(o) => panic!("loaded, but should have been refused: {}", o.name()),
        Err(e) => {
            eprintln!("{e}");
            e.to_string()
        }
    }
}

fn env() -> Env {
    Env { now_ns: 0, jiffies: 0, prandom: 7, send_ack: false }
}

#[test]
fn refuses_random_bytes() {
    let bytes: Vec<u8> = (0..4096u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    let e = refusal(&bytes);
    assert!(e.contains("not an ELF"), "{e}");
    assert!(refusal(&[]).contains("not an ELF"));
}

#[test]
fn refuses_an_elf_that_is_not_bpf() {
    let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
    let e = refusal(&me);
    assert!(e.contains("EM_BPF"), "{e}");
}

#[test]
fn refuses_a_store_to_a_read_only_field() {
    let Some(b) = compile("write_readonly") else { return };
    let e = refusal(&b);
    assert!(e.contains("srtt_us") && e.contains("may not write"), "{e}");
}

#[test]
fn refuses_an_unknown_kfunc() {
    let Some(b) = compile("unknown_kfunc") else { return };
    let e = refusal(&b);
    assert!(e.contains("tcp_made_up_kfunc"), "{e}");
}

#[test]
fn refuses_a_license_that_is_not_gpl() {
    let Some(b) = compile("no_gpl") else { return };
    let e = refusal(&b);
    assert!(e.contains("Proprietary") && e.contains("GPL"), "{e}");
}

#[test]
fn refuses_a_field_the_view_lacks() {
    let Some(b) = compile("missing_field") else { return };
    let e = refusal(&b);
    assert!(e.contains("rcv_ssthresh") && e.contains("tcp_sock"), "{e}");
}

/// `tcp_validate_congestion_control` (net/ipv4/tcp_cong.c): ssthresh, undo_cwnd, and cong_avoid
/// or cong_control; only the selected tcp_congestion_ops is checked.
#[test]
fn refuses_ops_the_kernel_would_not_register() {
    let Some(b) = compile("no_undo_cwnd") else { return };
    let load = |name: &str| Object::load_selected(&b, &ccbpf::DEFAULT_KCONFIG, Some(name));
    let e = load("bpf_nu").unwrap_err().to_string();
    eprintln!("{e}");
    assert!(e.contains("bpf_nu") && e.contains("lacks undo_cwnd:") && e.contains("tcp_validate_congestion_control"), "{e}");
    let e = load("bpf_nca").unwrap_err().to_string();
    assert!(e.contains("lacks undo_cwnd and cong_avoid or cong_control:"), "{e}");
    let obj = load("bpf_cc").unwrap_or_else(|e| panic!("{e}"));
    assert!(obj.has_op(Op::CongControl) && !obj.has_op(Op::CongAvoid));
    // with three named ops and none chosen, the choice is asked for before any check
    assert!(refusal(&b).contains("choose one"));
}

#[test]
fn refuses_an_object_without_struct_ops() {
    let Some(b) = compile("no_struct_ops") else { return };
    let e = refusal(&b);
    assert!(e.contains(".struct_ops"), "{e}");
}

#[test]
fn refuses_an_object_without_btf() {
    let Some(b) = compile_with("no_struct_ops", false) else { return };
    let e = refusal(&b);
    assert!(e.contains(".BTF"), "{e}");
}

fn misbehave() -> Option<(Arc<Object>, ccbpf::Instance)> {
    let b = compile("misbehave")?;
    let obj = Arc::new(Object::load(&b).unwrap_or_else(|e| panic!("{e}")));
    let mut flow = obj.instance();
    *flow.sock = TcpSock::initial(1448);
    Some((obj, flow))
}

#[test]
fn an_endless_loop_exhausts_the_budget() {
    let Some((_, mut flow)) = misbehave() else { return };
    let e = flow.call(Op::Ssthresh, &[], None, None, &mut env()).unwrap_err();
    assert_eq!(e.program, "struct_ops/mb_ssthresh");
    assert_eq!(e.op, Op::Ssthresh);
    assert!(e.message.contains("budget"), "{e}");
    assert!(e.to_string().contains(&format!("instruction {}", e.insn)), "{e}");
}

#[test]
fn an_out_of_bounds_read_is_an_error() {
    let Some((_, mut flow)) = misbehave() else { return };
    // in bounds: the socket's own bytes
    flow.sock.snd_cwnd = 33;
    let off = std::mem::offset_of!(TcpSock, snd_cwnd) as u64;
    flow.call(Op::CongAvoid, &[0, off], None, None, &mut env()).unwrap();
    assert_eq!(flow.sock.snd_cwnd, 33);
    // the last 4 bytes, then one byte further: the end of the access is checked too
    let size = std::mem::size_of::<TcpSock>() as u64;
    flow.call(Op::CongAvoid, &[0, size - 4], None, None, &mut env()).unwrap();
    let e = flow.call(Op::CongAvoid, &[0, size - 3], None, None, &mut env()).unwrap_err();
    assert!(e.message.contains("out of bounds"), "{e}");
    let e = flow.call(Op::CongAvoid, &[0, 1 << 20], None, None, &mut env()).unwrap_err();
    assert!(e.message.contains("out of bounds"), "{e}");
    assert_eq!(e.program, "struct_ops/mb_cong_avoid");
}

#[test]
fn division_by_zero_follows_the_kernel() {
    let Some((_, mut flow)) = misbehave() else { return };
    flow.sock.snd_cwnd = 17;
    flow.sock.snd_cwnd_cnt = 0;
    assert_eq!(flow.call(Op::UndoCwnd, &[], None, None, &mut env()).unwrap(), Some(0), "x / 0 = 0");
    assert_eq!(flow.call(Op::MinTsoSegs, &[], None, None, &mut env()).unwrap(), Some(17), "x % 0 = x");
    flow.sock.snd_cwnd_cnt = 5;
    assert_eq!(flow.call(Op::UndoCwnd, &[], None, None, &mut env()).unwrap(), Some(3));
    assert_eq!(flow.call(Op::MinTsoSegs, &[], None, None, &mut env()).unwrap(), Some(2));
}

#[test]
fn stores_through_computed_pointers_stay_inside_writable_fields() {
    let Some((_, mut flow)) = misbehave() else { return };
    // set_state stores 7 at the socket + new_state: offset 0 is sk_pacing_rate (writable) ...
    let pacing = std::mem::offset_of!(TcpSock, inet_conn) as u64; // sock is at offset 0
    flow.call(Op::SetState, &[pacing], None, None, &mut env()).unwrap();
    assert_eq!(flow.sock.inet_conn.icsk_inet.sk.sk_pacing_rate & 0xffff_ffff, 7);
    // ... offset 8 is sk_max_pacing_rate, which is not
    let e = flow.call(Op::SetState, &[8], None, None, &mut env()).unwrap_err();
    assert!(e.message.contains("may write"), "{e}");
    assert_eq!(flow.sock.inet_conn.icsk_inet.sk.sk_max_pacing_rate, !0);
}

#[test]
fn bpf_to_bpf_calls_and_the_frame_limit() {
    let Some((_, mut flow)) = misbehave() else { return };
    // deeper(n) recurses n times: x' = x ^ (x << 1) ^ n
    let model = |n: u32| (1..=n).fold(0u32, |x, k| x ^ (x << 1) ^ k);
    for n in 0..=6 {
        flow.sock.snd_cwnd_cnt = n;
        assert_eq!(flow.call(Op::SndbufExpand, &[], None, None, &mut env()).unwrap(), Some(model(n) as u64), "n = {n}");
    }
    flow.sock.snd_cwnd_cnt = 100;
    let e = flow.call(Op::SndbufExpand, &[], None, None, &mut env()).unwrap_err();
    assert!(e.message.contains("call depth"), "{e}");
}

#[test]
fn refuses_an_unknown_helper() {
    let Some(b) = compile("unknown_helper") else { return };
    let e = refusal(&b);
    assert!(e.contains("helper 14"), "{e}");
}
