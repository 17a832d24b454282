//! Compiling the small test programs of tests/progs at test time.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Compiles tests/progs/<name>.bpf.c (with `-g` unless `debug` is false) and returns the
/// object's bytes, or None with the reason printed.
pub fn compile_with(name: &str, debug: bool) -> Option<Vec<u8>> {
    let vmlinux_dir = repo().join("target/bpf");
    if !vmlinux_dir.join("vmlinux.h").exists() {
        eprintln!("skipped: {}/vmlinux.h is absent (make bpf)", vmlinux_dir.display());
        return None;
    }
    if !Path::new("/usr/include/bpf/bpf_helpers.h").exists() {
        eprintln!("skipped: libbpf headers (/usr/include/bpf) are absent");
        return None;
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/progs").join(format!("{name}.bpf.c"));
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}{}.bpf.o", if debug { "" } else { "-nodebug" }));
    let mut cmd = Command::new("clang");
    if debug {
        cmd.arg("-g");
    }
    cmd.args(["-O2", "-target", "bpf", "-I"]).arg(&vmlinux_dir).arg("-c").arg(&src).arg("-o").arg(&out);
    match cmd.output() {
        Err(e) => {
            eprintln!("skipped: clang is not available ({e})");
            None
        }
        Ok(o) if !o.status.success() => panic!("clang failed on {}: {}", src.display(), String::from_utf8_lossy(&o.stderr)),
        Ok(_) => Some(std::fs::read(&out).unwrap()),
    }
}

pub fn compile(name: &str) -> Option<Vec<u8>> {
    compile_with(name, true)
}

