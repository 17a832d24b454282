//! The project's own objects, target/bpf/reno.bpf.o and bbr.bpf.o (built by `make bpf`).

use std::sync::Arc;

use ccbpf::{Env, Object, Op, RateSample, TcpSock};

/// The object's bytes, or None (with the reason printed) when it has not been built.
fn object_bytes(name: &str) -> Option<Vec<u8>> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/bpf").join(name);
    match std::fs::read(&path) {
        Ok(b) => Some(b),
        Err(e) => {
            eprintln!("skipped: {} is absent ({e}); run `make bpf`", path.display());
            None
        }
    }
}

fn env() -> Env {
    Env { now_ns: 0, jiffies: 0, prandom: 1, send_ack: false }
}

#[test]
fn reno_loads() {
    let Some(b) = object_bytes("reno.bpf.o") else { return };
    let obj = Object::load(&b).unwrap();
    assert_eq!(obj.name(), "bpf_reno");
    assert!(obj.has_op(Op::Ssthresh) && obj.has_op(Op::CongAvoid) && obj.has_op(Op::UndoCwnd));
    assert!(!obj.has_op(Op::Init) && !obj.has_op(Op::CongControl));
}

#[test]
fn bbr_loads() {
    let Some(b) = object_bytes("bbr.bpf.o") else { return };
    let obj = Object::load(&b).unwrap();
    assert_eq!(obj.name(), "bpf_bbr");
    assert_eq!(obj.flags(), 1);
    assert!(obj.has_op(Op::Init) && obj.has_op(Op::CongControl));
}
