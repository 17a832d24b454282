//! `make bench`: fixed scenarios, each run in its own process so its peak memory is its own.
//! Prints wall time, simulated seconds per wall second, events and packets per wall second,
//! and peak resident memory; then the speed of capture analysis (`cctestbed analyze`) on the
//! first scenario's captures. Wall-clock time is read here only, never inside the simulator.

use ccsim::config::*;
use std::process::Command;
use std::time::Instant;

struct Scenario {
    name: &'static str,
    cc: &'static str,
    flows: usize,
    rate_bps: u64,
    rtt_ms: i64,
    bdp: f64,
    secs: i64,
    loss: f64,
    /// A workload instead of bulk flows: this many flows of `WORKLOAD_FLOW_BYTES`, one every
    /// `secs / flows`, so the peak memory shows what finished flows keep.
    workload: bool,
    /// The receiving host's interrupt coalescing (`ethtool -C rx-usecs`), microseconds.
    rx_usecs: i64,
}

const WORKLOAD_FLOW_BYTES: u64 = 1_000_000;

const SCENARIOS: &[Scenario] = &[
    Scenario { name: "4 cubic, 80 Mb/s, 25 ms, 2 BDP, 60 s", cc: "cubic", flows: 4, rate_bps: 80_000_000, rtt_ms: 25, bdp: 2.0, secs: 60, loss: 0.0, workload: false, rx_usecs: 0 },
    Scenario { name: "1 cubic, 10 Gb/s, 100 ms, 1 BDP, 10 s", cc: "cubic", flows: 1, rate_bps: 10_000_000_000, rtt_ms: 100, bdp: 1.0, secs: 10, loss: 0.0, workload: false, rx_usecs: 0 },
    Scenario { name: "16 cubic, 10 Gb/s, 50 ms, 0.5 BDP, 10 s", cc: "cubic", flows: 16, rate_bps: 10_000_000_000, rtt_ms: 50, bdp: 0.5, secs: 10, loss: 0.0, workload: false, rx_usecs: 0 },
    Scenario { name: "1 cubic, 1 Gb/s, 10 ms, 1 BDP, 1% loss, 10 s", cc: "cubic", flows: 1, rate_bps: 1_000_000_000, rtt_ms: 10, bdp: 1.0, secs: 10, loss: 0.01, workload: false, rx_usecs: 0 },
    // The best-known simulator's published scenarios (performance.md): 17.2 s and 147.3 s.
    Scenario { name: "4 bbr, 80 Mb/s, 25 ms, 2 BDP, 60 s", cc: "bbr", flows: 4, rate_bps: 80_000_000, rtt_ms: 25, bdp: 2.0, secs: 60, loss: 0.0, workload: false, rx_usecs: 0 },
    Scenario { name: "4 bbr, 80 Mb/s, 25 ms, 0.5 BDP, 60 s", cc: "bbr", flows: 4, rate_bps: 80_000_000, rtt_ms: 25, bdp: 0.5, secs: 60, loss: 0.0, workload: false, rx_usecs: 0 },
    Scenario { name: "1 bbr, 10 Gb/s, 100 ms, 1 BDP, 10 s", cc: "bbr", flows: 1, rate_bps: 10_000_000_000, rtt_ms: 100, bdp: 1.0, secs: 10, loss: 0.0, workload: false, rx_usecs: 0 },
    // ESnet's data-transfer nodes: 16 parallel streams over 88 ms with a switch buffer of about
    // 16 MB (0.15 BDP at 10 Gb/s), on today's 10G and 100G hosts.
    Scenario { name: "16 bbr3, 10 Gb/s, 88 ms, 0.15 BDP, 10 s", cc: "bbr3", flows: 16, rate_bps: 10_000_000_000, rtt_ms: 88, bdp: 0.15, secs: 10, loss: 0.0, workload: false, rx_usecs: 0 },
    Scenario { name: "16 bbr3, 100 Gb/s, 88 ms, 0.15 BDP, 3 s", cc: "bbr3", flows: 16, rate_bps: 100_000_000_000, rtt_ms: 88, bdp: 0.15, secs: 3, loss: 0.0, workload: false, rx_usecs: 0 },
    // The same with the receiving NIC's interrupt coalescing at a 100G NIC's default (mlx5:
    // rx-usecs 8), so GRO coalesces what one poll finds, as on such a host.
    Scenario { name: "16 bbr3, 10 Gb/s, 88 ms, 0.15 BDP, NIC 8 us, 10 s", cc: "bbr3", flows: 16, rate_bps: 10_000_000_000, rtt_ms: 88, bdp: 0.15, secs: 10, loss: 0.0, workload: false, rx_usecs: 8 },
    Scenario { name: "16 bbr3, 100 Gb/s, 88 ms, 0.15 BDP, NIC 8 us, 3 s", cc: "bbr3", flows: 16, rate_bps: 100_000_000_000, rtt_ms: 88, bdp: 0.15, secs: 3, loss: 0.0, workload: false, rx_usecs: 8 },
    // The BPF port of BBR (target/bpf/bbr.bpf.o, the object the kernel backend registers) in
    // the simulator's interpreter, at the two BBR points above: its cost against the Rust bbr.
    Scenario { name: "4 bpf:bbr, 80 Mb/s, 25 ms, 2 BDP, 60 s", cc: "bpf", flows: 4, rate_bps: 80_000_000, rtt_ms: 25, bdp: 2.0, secs: 60, loss: 0.0, workload: false, rx_usecs: 0 },
    Scenario { name: "4 bpf:bbr, 80 Mb/s, 25 ms, 0.5 BDP, 60 s", cc: "bpf", flows: 4, rate_bps: 80_000_000, rtt_ms: 25, bdp: 0.5, secs: 60, loss: 0.0, workload: false, rx_usecs: 0 },
    // Short flows: 6,000 flows of 1 MB at 400 a second (a 3.2 Gbit/s offered load).
    Scenario { name: "6000 x 1 MB cubic, 10 Gb/s, 10 ms, 1 BDP, 15 s", cc: "cubic", flows: 6000, rate_bps: 10_000_000_000, rtt_ms: 10, bdp: 1.0, secs: 15, loss: 0.0, workload: true, rx_usecs: 0 },
];

fn config(s: &Scenario) -> SimConfig {
    let mut c = SimConfig::dumbbell(s.rate_bps, s.rtt_ms * 1_000_000, s.bdp);
    c.duration_ns = s.secs * 1_000_000_000;
    c.link.receiver_nic.coalesce_ns = s.rx_usecs * 1_000;
    if s.loss > 0.0 {
        c.link.loss = LossConfig::Bernoulli { p: s.loss };
    }
    c.flows = if s.workload {
        let every = s.secs * 1_000_000_000 / s.flows as i64;
        (0..s.flows)
            .map(|i| FlowConfig {
                start_ns: i as i64 * every,
                size_bytes: Some(WORKLOAD_FLOW_BYTES),
                workload: true,
                ..FlowConfig::bulk(s.cc)
            })
            .collect()
    } else {
        (0..s.flows).map(|i| FlowConfig { start_ns: i as i64 * 10_000_000, ..FlowConfig::bulk(s.cc) }).collect()
    };
    if s.cc == ccsim::cc::bpf::NAME {
        // the port's read-only defaults are the simulator bbr's, so the object runs as built
        let object = bbr_object().map(ccsim::cc::bpf::ObjectBytes);
        for f in &mut c.flows {
            f.bpf_object = object.clone();
        }
    }
    c
}

/// The project's BPF port of BBR as `make build` compiles it, if it is built.
fn bbr_object() -> Option<Vec<u8>> {
    let dir = std::env::var_os("CCTESTBED_BPF_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/bpf"));
    std::fs::read(dir.join("bbr.bpf.o")).ok()
}

fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn run_one(i: usize) {
    let s = &SCENARIOS[i];
    let t0 = Instant::now();
    let out = ccsim::simulate(config(s)).expect("valid scenario");
    let wall = t0.elapsed().as_secs_f64();
    let pkts: u64 = out.flow_final.iter().map(|f| f.sent_pkts).sum();
    println!("{wall} {} {pkts} {}", out.events, peak_rss_mib());
}

/// Capture analysis speed: the first scenario with every capture point, analysed (best of 3).
fn analyze_speed() {
    use ccsim::capture::analyze::{analyze, Point};
    use ccsim::capture::{CaptureConfig, Format};
    let mut c = config(&SCENARIOS[0]);
    c.capture = Some(CaptureConfig { senders: true, receivers: true, ingress: true, egress: true, snaplen: 128, format: Format::Pcap });
    let out = ccsim::simulate(c).expect("valid scenario");
    let dir = std::env::temp_dir().join(format!("ccsim-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temporary directory");
    let mut inputs = vec![];
    let mut bytes = 0;
    for f in &out.captures {
        let p = dir.join(&f.name);
        std::fs::write(&p, &f.bytes).expect("write capture");
        bytes += f.bytes.len();
        let point = match f.name.as_str() {
            "rtr-in.pcap" => Point::Ingress,
            "rtr-out.pcap" => Point::Egress,
            _ => Point::Host,
        };
        inputs.push((p.to_string_lossy().into_owned(), point));
    }
    let mut best = f64::INFINITY;
    let mut frames = 0;
    for _ in 0..3 {
        let t0 = Instant::now();
        let a = analyze(&inputs, 10_000_000, None, true).expect("analysable");
        best = best.min(t0.elapsed().as_secs_f64());
        frames = a.files.iter().map(|f| f.frames).sum::<u64>();
    }
    std::fs::remove_dir_all(&dir).ok();
    println!(
        "capture analysis ({}, every point: {} files, {:.0} MB): {:.2} M packets in {:.3} s, {:.2} M packets/s",
        SCENARIOS[0].name,
        inputs.len(),
        bytes as f64 / 1e6,
        frames as f64 / 1e6,
        best,
        frames as f64 / best / 1e6
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--scenario").and_then(|p| args.get(p + 1)) {
        run_one(i.parse().expect("scenario index"));
        return;
    }
    if args.iter().any(|a| a == "--analyze") {
        analyze_speed();
        return;
    }
    let exe = std::env::current_exe().expect("own path");
    println!(
        "{:<48} {:>8} {:>10} {:>10} {:>10} {:>7} {:>7} {:>9}",
        "scenario", "wall s", "sim s/s", "M ev/s", "M pkt/s", "ev/pkt", "ns/pkt", "peak MiB"
    );
    let mut walls: Vec<(&str, f64)> = Vec::new();
    for (i, s) in SCENARIOS.iter().enumerate() {
        if s.cc == ccsim::cc::bpf::NAME && bbr_object().is_none() {
            println!("{:<48} skipped: target/bpf/bbr.bpf.o is not built (make build)", s.name);
            continue;
        }
        let o = Command::new(&exe).args(["--scenario", &i.to_string()]).output().expect("run scenario");
        let text = String::from_utf8_lossy(&o.stdout);
        let v: Vec<f64> = text.split_whitespace().filter_map(|x| x.parse().ok()).collect();
        let [wall, events, pkts, mib] = v[..] else {
            eprintln!("{}: failed: {}", s.name, String::from_utf8_lossy(&o.stderr));
            std::process::exit(1);
        };
        println!(
            "{:<48} {:>8.3} {:>10.1} {:>10.2} {:>10.2} {:>7.2} {:>7.0} {:>9.1}",
            s.name,
            wall,
            s.secs as f64 / wall,
            events / wall / 1e6,
            pkts / wall / 1e6,
            events / pkts,
            wall * 1e9 / pkts,
            mib
        );
        walls.push((s.name, wall));
    }
    // the BPF port against the Rust model on the same scenario
    for (name, wall) in &walls {
        if let Some(rust) = name.strip_prefix("4 bpf:bbr").map(|rest| format!("4 bbr{rest}")) {
            if let Some((_, rust_wall)) = walls.iter().find(|(n, _)| *n == rust) {
                println!("{name}: {:.2}x the time of the Rust bbr", wall / rust_wall);
            }
        }
    }
    let o = Command::new(&exe).arg("--analyze").output().expect("run the analysis");
    print!("{}", String::from_utf8_lossy(&o.stdout));
}
