//! Packet captures: what the simulator writes is what it simulated, on real headers, and the
//! analysis of those files gives back the simulator's own counters.

mod common;
use ccsim::capture::analyze::{analyze, Point};
use ccsim::capture::CaptureConfig;
use ccsim::config::*;
use common::*;
use etherparse::{LaxSlicedPacket, TcpOptionElement, TransportSlice};
use pcap_file::pcap::PcapReader;

fn all_points(snaplen: u32) -> CaptureConfig {
    CaptureConfig { senders: true, receivers: true, ingress: true, egress: true, snaplen, format: Default::default() }
}

/// Two CUBIC flows through a shallow queue with random loss: drops of both kinds, SACKs,
/// retransmissions.
fn lossy(capture: Option<CaptureConfig>) -> SimConfig {
    let mut c = with_flows(dumbbell(20_000_000, 30 * MS, 0.5), vec![flow("cubic"), flow("bbr")]);
    c.flows[1].start_ns = 100 * MS;
    c.link.loss = LossConfig::Bernoulli { p: 0.005 };
    c.duration_ns = 4 * S;
    c.capture = capture;
    c
}

fn frames(bytes: &[u8]) -> Vec<(i64, u32, Vec<u8>)> {
    let mut r = PcapReader::new(bytes).expect("pcap header");
    let mut out = vec![];
    while let Some(p) = r.next_raw_packet() {
        let p = p.expect("record");
        out.push((p.ts_sec as i64 * 1_000_000_000 + p.ts_frac as i64, p.orig_len, p.data.to_vec()));
    }
    out
}

/// The one's-complement sum over a TCP segment with its pseudo-header; 0xffff when valid.
fn tcp_checksum_ok(frame: &[u8], wire_len: u32) -> bool {
    let ip = &frame[14..34];
    let total = u16::from_be_bytes([ip[2], ip[3]]) as usize;
    let tcp_len = total - 20;
    let mut seg = frame[34..].to_vec();
    seg.resize(tcp_len, 0); // the payload the snap length cut is zeros
    assert_eq!(wire_len as usize, 14 + total);
    let mut sum: u32 = 0;
    let mut add = |b: &[u8]| {
        for c in b.chunks(2) {
            sum += u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]) as u32;
        }
    };
    add(&ip[12..20]);
    add(&[0, 6]);
    add(&(tcp_len as u16).to_be_bytes());
    add(&seg);
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum == 0xffff
}

#[test]
fn capturing_changes_nothing_the_simulator_computes() {
    let plain = run(lossy(None));
    let captured = run(lossy(Some(all_points(128))));
    assert_eq!(plain.events, captured.events);
    assert_eq!(plain.flows.delivered_bytes, captured.flows.delivered_bytes);
    assert_eq!(plain.flows.rtt_ms.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
               captured.flows.rtt_ms.iter().map(|x| x.to_bits()).collect::<Vec<_>>());
    assert!(plain.captures.is_empty());
    let again = run(lossy(Some(all_points(128))));
    for (a, b) in captured.captures.iter().zip(&again.captures) {
        assert_eq!(a.name, b.name);
        assert!(a.bytes == b.bytes, "{} differs between two runs of the same trial", a.name);
    }
}

#[test]
fn every_point_holds_the_packets_that_passed_it() {
    let out = run(lossy(Some(all_points(128))));
    let names: Vec<&str> = out.captures.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["snd0.pcap", "snd1.pcap", "rcv0.pcap", "rcv1.pcap", "rtr-in.pcap", "rtr-out.pcap"]);
    let file = |n: &str| frames(&out.captures.iter().find(|c| c.name == n).unwrap().bytes);
    // everything toward the receiver: the handshake's SYN(s) and final ACK, and the data
    let data = |fs: &[(i64, u32, Vec<u8>)], dst_last: u8| {
        fs.iter().filter(|(_, _, d)| d[33] == dst_last && d[30] == 10 && d[31] == 2).count() as u64
    };
    let r = out.router_final;
    let ing = file("rtr-in.pcap");
    let egr = file("rtr-out.pcap");
    assert_eq!(ing.len() as u64, r.arrivals_pkts, "ingress: every arrival, dropped ones too");
    let in_service = (out.router_queued_bytes > 0) as u64;
    let queued: u64 = out.flow_final.iter().map(|f| f.queued_pkts).sum();
    // egress is written as a packet starts on the link: the departed ones and the one in service
    assert!(egr.len() as u64 >= r.departures_pkts && egr.len() as u64 <= r.departures_pkts + in_service.min(queued));
    for (i, f) in out.flow_final.iter().enumerate() {
        let host = i as u8 + 1;
        assert_eq!(data(&file(&format!("snd{i}.pcap")), host), f.sent_pkts, "flow {i}: sent");
        assert_eq!(data(&file(&format!("rcv{i}.pcap")), host), f.delivered_pkts, "flow {i}: arrived");
    }
}

#[test]
fn headers_are_real_tcp_with_byte_sequence_numbers_sacks_and_checksums() {
    let mut cfg = lossy(Some(all_points(96)));
    cfg.flows.truncate(1);
    let out = run(cfg);
    let snd = frames(&out.captures[0].bytes);
    let (mut data_seqs, mut sacks, mut syn) = (vec![], 0, false);
    let mut isn = 0u32;
    for (_, wire_len, d) in &snd {
        assert!(d.len() <= 96);
        assert!(tcp_checksum_ok(d, *wire_len), "bad checksum");
        // the snap length cut the payload: the lax parser reads the headers that are there
        let p = LaxSlicedPacket::from_ethernet(d).expect("Ethernet");
        assert!(p.stop_err.is_none(), "headers complete within the snap length");
        let Some(TransportSlice::Tcp(t)) = p.transport else { panic!("not TCP") };
        if t.syn() && !t.ack() {
            syn = true;
            isn = t.sequence_number();
            let opts: Vec<_> = t.options_iterator().map(|o| o.unwrap()).collect();
            assert!(opts.contains(&TcpOptionElement::MaximumSegmentSize(1460)), "MSS option: {opts:?}");
            assert!(opts.contains(&TcpOptionElement::SelectiveAcknowledgementPermitted));
        }
        let mut has_ts = false;
        for o in t.options_iterator() {
            match o.unwrap() {
                TcpOptionElement::Timestamp(..) => has_ts = true,
                TcpOptionElement::SelectiveAcknowledgement(first, rest) => {
                    sacks += 1;
                    for (l, r) in std::iter::once(first).chain(rest.into_iter().flatten()) {
                        assert_eq!(l.wrapping_sub(isn.wrapping_add(1)) % 1448, 0, "SACK edges on segment boundaries");
                        assert_eq!(r.wrapping_sub(isn.wrapping_add(1)) % 1448, 0);
                    }
                }
                _ => {}
            }
        }
        assert!(has_ts, "every segment carries timestamps");
        if *wire_len == 1514 {
            data_seqs.push(t.sequence_number().wrapping_sub(isn.wrapping_add(1)));
        }
    }
    assert!(syn, "the connection opens with a SYN");
    assert!(sacks > 10, "ACKs under loss carry SACK blocks ({sacks})");
    assert!(data_seqs.iter().all(|s| s % 1448 == 0), "sequence numbers count bytes");
    assert_eq!(*data_seqs.iter().max().unwrap() as u64 / 1448 + 1, out.flow_final[0].sent_segs - out.flow_final[0].retrans_segs);
}

/// The three-way handshake at every point it passes, with a Linux host's flags and options and
/// the data from ISN + 1; an ECN flow's SYN asks for ECN, its data leaves ECT(0), CoDel's CE marks
/// appear from the router's egress on and come back as ECE, and the sender answers with CWR.
#[test]
fn handshake_and_ecn_bits_at_every_point() {
    let mut f = flow("cubic");
    f.ecn = true;
    let mut c = with_flows(dumbbell(20_000_000, 30 * MS, 4.0), vec![f]);
    c.link.aqm = Some(AqmConfig::Codel(CodelConfig { ecn: Some(true), ..Default::default() }));
    c.duration_ns = 3 * S;
    c.capture = Some(all_points(128));
    let out = run(c);
    assert!(out.router_final.marks.total() > 0, "CoDel marked");
    // per frame: (IP ECN bits, SYN, ACK, ECE, CWR, seq, ack, payload, options)
    type Frame = (u8, bool, bool, bool, bool, u32, u32, usize, Vec<TcpOptionElement>);
    let parsed = |n: &str| -> Vec<Frame> {
        let bytes = &out.captures.iter().find(|c| c.name == n).unwrap().bytes;
        frames(bytes)
            .iter()
            .map(|(_, len, d)| {
                let p = LaxSlicedPacket::from_ethernet(d).expect("Ethernet");
                let Some(TransportSlice::Tcp(t)) = p.transport else { panic!("not TCP") };
                let payload = *len as usize - 14 - 20 - t.header_len() as usize;
                let opts = t.options_iterator().map(|o| o.unwrap()).collect();
                (d[15] & 3, t.syn(), t.ack(), t.ece(), t.cwr(), t.sequence_number(), t.acknowledgment_number(), payload, opts)
            })
            .collect()
    };
    let snd = parsed("snd0.pcap");
    let (syn, synack, hs) = (&snd[0], &snd[1], &snd[2]);
    // SYN: ECE and CWR (ECN setup), not ECN-capable itself, Linux's options
    assert!(syn.1 && !syn.2 && syn.3 && syn.4 && syn.0 == 0, "SYN flags {syn:?}");
    let isn = syn.5;
    assert!(syn.8.contains(&TcpOptionElement::MaximumSegmentSize(1460)));
    assert!(syn.8.contains(&TcpOptionElement::SelectiveAcknowledgementPermitted));
    assert!(syn.8.contains(&TcpOptionElement::WindowScale(7)));
    assert!(syn.8.iter().any(|o| matches!(o, TcpOptionElement::Timestamp(_, 0))));
    // SYN-ACK: ECE without CWR, acknowledging ISN + 1
    assert!(synack.1 && synack.2 && synack.3 && !synack.4, "SYN-ACK flags {synack:?}");
    assert_eq!(synack.6, isn.wrapping_add(1));
    let synack_ts = synack.8.iter().find_map(|o| match o {
        TcpOptionElement::Timestamp(v, _) => Some(*v),
        _ => None,
    });
    let synack_ts = synack_ts.expect("SYN-ACK timestamps");
    // the handshake's final ACK: no data, acknowledges the SYN-ACK, echoes its timestamp
    assert!(!hs.1 && hs.2 && !hs.3 && !hs.4 && hs.7 == 0, "handshake ACK {hs:?}");
    assert_eq!((hs.5, hs.6), (isn.wrapping_add(1), synack.5.wrapping_add(1)));
    assert!(hs.8.iter().any(|o| matches!(o, TcpOptionElement::Timestamp(_, e) if *e == synack_ts)), "echoes the SYN-ACK's TSval");
    let data: Vec<&Frame> = snd.iter().filter(|f| f.7 > 0).collect();
    assert_eq!(data[0].5, isn.wrapping_add(1), "data from ISN + 1");
    assert!(data.iter().all(|f| f.0 == 2), "data leaves ECT(0)");
    assert!(data.iter().any(|f| f.4), "the sender signals CWR");
    assert!(snd.iter().filter(|f| f.7 == 0 && !f.1 && f.6 != isn.wrapping_add(1)).any(|f| f.3), "ACKs echo CE");
    // the router's captures and the receiver's open with the same handshake
    for n in ["rtr-in.pcap", "rtr-out.pcap", "rcv0.pcap"] {
        let fs = parsed(n);
        assert!(fs[0].1 && !fs[0].2 && fs[0].5 == isn, "{n}: SYN first");
        let after: Vec<&Frame> = fs[1..].iter().filter(|f| f.5 == isn.wrapping_add(1) || f.1).take(2).collect();
        if n == "rcv0.pcap" {
            assert!(after[0].1 && after[0].2, "{n}: the SYN-ACK sent");
            assert!(!after[1].1 && after[1].2 && after[1].7 == 0, "{n}: the handshake ACK");
        } else {
            assert!(!after[0].1 && after[0].2 && after[0].7 == 0, "{n}: the handshake ACK");
        }
    }
    let ce = |n: &str| parsed(n).iter().filter(|f| f.7 > 0 && f.0 == 3).count();
    assert_eq!(ce("rtr-in.pcap"), 0, "nothing marked before the queue");
    assert!(ce("rtr-out.pcap") > 0);
    assert_eq!(ce("rtr-out.pcap"), ce("rcv0.pcap"), "the marks reach the receiver");
}

#[test]
fn analysis_of_the_captures_gives_back_the_simulators_counters() {
    let out = run(lossy(Some(all_points(128))));
    let dir = std::env::temp_dir().join(format!("ccsim-capture-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut inputs = vec![];
    for c in &out.captures {
        let p = dir.join(&c.name);
        std::fs::write(&p, &c.bytes).unwrap();
        let point = match c.name.as_str() {
            "rtr-in.pcap" => Point::Ingress,
            "rtr-out.pcap" => Point::Egress,
            _ => Point::Host,
        };
        inputs.push((p.to_string_lossy().into_owned(), point));
    }
    let a = analyze(&inputs, 10 * MS, Some(0), true).expect("analysable");
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(a.connections.len(), 2);
    for (i, c) in a.connections.iter().enumerate() {
        assert_eq!(c.sender.0, format!("10.1.0.{}", i + 1));
        assert_eq!(c.mss, 1448);
        assert_eq!(c.sender_file, Some(i), "flow {i}: sender capture told by TTL");
        assert_eq!(c.receiver_file, Some(2 + i), "flow {i}: receiver capture");
    }
    let n = a.flows.time_s.len();
    let last = |f: u32, col: &[f64]| (0..n).rev().find(|&k| a.flows.flow[k] == f).map(|k| col[k]).unwrap();
    let sim_last = |f: u32, col: &[u64]| {
        (0..out.flows.flow.len()).rev().find(|&k| out.flows.flow[k] == f).map(|k| col[k] as f64).unwrap()
    };
    for f in 0..2 {
        assert_eq!(last(f, &a.flows.delivered_bytes), sim_last(f, &out.flows.delivered_bytes), "flow {f}: delivered");
        assert_eq!(last(f, &a.flows.retrans_segs), sim_last(f, &out.flows.retrans_segs), "flow {f}: retransmissions");
        assert_eq!(last(f, &a.flows.sent_segs), sim_last(f, &out.flows.sent_segs), "flow {f}: segments sent");
    }
    let r = a.router.expect("ingress and egress given");
    assert_eq!(r.unmatched, 0);
    let drops = out.router_final.drops.total();
    let seen = *r.drops_overflow.last().unwrap() as u64;
    assert!(seen <= drops && seen + 2 >= drops, "drops {seen} of {drops}");
    let worst = (0..r.queue_pkts.len()).map(|k| (r.queue_pkts[k] - out.router.queue_pkts[k] as f64).abs()).fold(0.0, f64::max);
    assert!(worst <= 1.0, "queue off by {worst} packets");
}

/// A flow that stops right after losing packets leaves nothing of its own behind them at the
/// egress: only the queue's arrival order tells they were dropped. The router's captures of
/// the lossy trial are cut as if flow 0 stopped at 3 s and its last 5 packets before that
/// were lost: with drop-tail's arrival order the analysis finds those 5 among the drops;
/// assuming only each connection's order, it takes them as still queued.
#[test]
fn arrival_order_finds_the_drops_of_a_flow_that_sent_nothing_after_them() {
    let out = run(lossy(Some(CaptureConfig { ingress: true, egress: true, ..all_points(128) })));
    let dir = std::env::temp_dir().join(format!("ccsim-capture-order-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let of_flow0 = |d: &[u8]| d[14 + 12..14 + 16] == [10, 1, 0, 1];
    let cut = 3 * S;
    let bytes = |name: &str| &out.captures.iter().find(|c| c.name == name).expect(name).bytes;
    let (ing, egr) = (frames(bytes("rtr-in.pcap")), frames(bytes("rtr-out.pcap")));
    // flow 0's last 5 departures before the cut, taken as lost
    let lost: Vec<i64> = egr.iter().filter(|(t, _, d)| *t < cut && of_flow0(d)).map(|f| f.0).rev().take(5).collect();
    assert_eq!(lost.len(), 5);
    let keep_in = |(t, _, d): &&(i64, u32, Vec<u8>)| !(of_flow0(d) && *t >= cut);
    let keep_out = |(t, _, d): &&(i64, u32, Vec<u8>)| !(of_flow0(d) && (*t >= cut || lost.contains(t)));
    let removed_in = ing.iter().filter(|f| !keep_in(f)).count();
    let removed_out = egr.iter().filter(|f| !keep_out(f)).count();
    let write = |name: &str, point: Point, records: Vec<&(i64, u32, Vec<u8>)>| {
        let mut buf = vec![];
        {
            let header = pcap_file::pcap::PcapHeader { ts_resolution: pcap_file::TsResolution::NanoSecond, ..Default::default() };
            let mut w = pcap_file::pcap::PcapWriter::with_header(&mut buf, header).unwrap();
            for (t, len, d) in records {
                w.write_packet(&pcap_file::pcap::PcapPacket::new(std::time::Duration::from_nanos(*t as u64), *len, d)).unwrap();
            }
        }
        let p = dir.join(name);
        std::fs::write(&p, buf).unwrap();
        (p.to_string_lossy().into_owned(), point)
    };
    let inputs = [
        write("in.pcap", Point::Ingress, ing.iter().filter(keep_in).collect()),
        write("out.pcap", Point::Egress, egr.iter().filter(keep_out).collect()),
    ];
    let fifo = ccsim::qdisc::serves_in_arrival_order("fifo").expect("drop-tail");
    let by_arrival = analyze(&inputs, 10 * MS, Some(0), fifo).unwrap().router.unwrap();
    let by_connection = analyze(&inputs, 10 * MS, Some(0), false).unwrap().router.unwrap();
    std::fs::remove_dir_all(&dir).ok();
    // what the cut captures hold: the simulator's drops and the 5, less the drops of flow 0
    // after the cut (gone from both files)
    let arrived = (ing.len() - removed_in) as u64;
    let left = (egr.len() - removed_out) as u64;
    let last = |c: &Vec<f64>| *c.last().unwrap() as u64;
    assert!(fifo);
    assert_eq!(by_arrival.unmatched, 0);
    assert_eq!(last(&by_arrival.arrivals_pkts), arrived);
    assert_eq!(last(&by_arrival.drops_overflow) + last(&by_arrival.queue_pkts), arrived - left);
    // by connection, the 5 (and flow 0's own drops just before the cut) stay queued
    assert_eq!(last(&by_connection.drops_overflow) + last(&by_connection.queue_pkts), arrived - left);
    assert!(last(&by_connection.queue_pkts) >= last(&by_arrival.queue_pkts) + 5);
    // the queue left at the end is at most the simulator's own (flow 0's part of it was cut)
    let (q, sim_q) = (last(&by_arrival.queue_pkts), *out.router.queue_pkts.last().unwrap());
    assert!(q <= sim_q + 1, "queue {q} vs the simulator's {sim_q}");
}

/// fq_codel interleaves the flows and CoDel drops at dequeue: each connection's packets still
/// leave in their order, so every egress packet is matched and every drop is found.
#[test]
fn router_analysis_under_fq_codel_finds_every_drop() {
    let mut c = with_flows(dumbbell(20_000_000, 30 * MS, 4.0), vec![flow("cubic"), flow("cubic"), flow("bbr")]);
    c.link.aqm = Some(AqmConfig::FqCodel(FqCodelConfig::default()));
    c.duration_ns = 4 * S;
    c.capture = Some(CaptureConfig { ingress: true, egress: true, ..all_points(128) });
    let out = run(c);
    let dir = std::env::temp_dir().join(format!("ccsim-capture-fq-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut inputs = vec![];
    for c in &out.captures {
        let p = dir.join(&c.name);
        std::fs::write(&p, &c.bytes).unwrap();
        let point = match c.name.as_str() {
            "rtr-in.pcap" => Point::Ingress,
            "rtr-out.pcap" => Point::Egress,
            _ => Point::Host,
        };
        inputs.push((p.to_string_lossy().into_owned(), point));
    }
    let order = ccsim::qdisc::serves_in_arrival_order("fq_codel").expect("registered");
    assert!(!order, "fq_codel serves its flows in turn");
    let a = analyze(&inputs, 10 * MS, Some(0), order).expect("analysable");
    std::fs::remove_dir_all(&dir).ok();
    let r = a.router.expect("ingress and egress given");
    assert_eq!(r.unmatched, 0);
    let drops = out.router_final.drops.total();
    assert!(out.router_final.drops[ccsim::qdisc::DropCause::Aqm] > 0, "CoDel dropped");
    let seen = *r.drops_overflow.last().unwrap() as u64;
    assert!(seen <= drops && seen + 3 >= drops, "drops {seen} of {drops}");
}

#[test]
fn bad_inputs_are_named_with_the_reason() {
    let dir = std::env::temp_dir().join(format!("ccsim-capture-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let text = dir.join("notes.txt");
    std::fs::write(&text, "not a capture\n").unwrap();
    let err = |p: &std::path::Path| analyze(&[(p.to_string_lossy().into_owned(), Point::Host)], 10 * MS, None, false).unwrap_err().0;
    assert!(err(&dir.join("absent.pcap")).ends_with("absent.pcap: missing"));
    assert!(err(&text).contains("notes.txt: not a pcap or pcapng capture"));
    // a valid pcap of one ARP frame: no TCP
    let mut arp = vec![];
    {
        let header = pcap_file::pcap::PcapHeader { datalink: pcap_file::DataLink::ETHERNET, ..Default::default() };
        let mut w = pcap_file::pcap::PcapWriter::with_header(&mut arp, header).unwrap();
        let mut frame = vec![0xffu8; 6];
        frame.extend([2, 0, 0, 0, 0, 1, 0x08, 0x06]);
        frame.extend([0u8; 28]);
        w.write_packet(&pcap_file::pcap::PcapPacket::new(std::time::Duration::ZERO, 42, &frame)).unwrap();
    }
    let no_tcp = dir.join("arp.pcap");
    std::fs::write(&no_tcp, &arp).unwrap();
    assert!(err(&no_tcp).contains("arp.pcap: no TCP packets in it (1 frames)"));
    std::fs::remove_dir_all(&dir).ok();
}

/// The same frames as Linux cooked (SLL, `tcpdump -i any`) and as raw IP: other testbeds' link
/// types read to the same series.
#[test]
fn cooked_and_raw_ip_captures_read_as_ethernet() {
    let mut cfg = lossy(Some(CaptureConfig { senders: true, receivers: true, ingress: false, egress: false, snaplen: 128, format: Default::default() }));
    cfg.flows.truncate(1);
    let out = run(cfg);
    let dir = std::env::temp_dir().join(format!("ccsim-capture-link-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let write = |name: &str, dl: pcap_file::DataLink, strip: usize, prefix: &dyn Fn(&[u8]) -> Vec<u8>, src: &[u8]| {
        let mut bytes = vec![];
        {
            let header = pcap_file::pcap::PcapHeader {
                datalink: dl,
                ts_resolution: pcap_file::TsResolution::NanoSecond,
                snaplen: 65535,
                ..Default::default()
            };
            let mut w = pcap_file::pcap::PcapWriter::with_header(&mut bytes, header).unwrap();
            for (t, len, d) in frames(src) {
                let mut f = prefix(&d);
                f.extend_from_slice(&d[strip..]);
                let orig = len - strip as u32 + (f.len() - (d.len() - strip)) as u32;
                w.write_packet(&pcap_file::pcap::PcapPacket::new(std::time::Duration::from_nanos(t as u64), orig, &f)).unwrap();
            }
        }
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        (p.to_string_lossy().into_owned(), Point::Host)
    };
    let sll = |d: &[u8]| {
        // packet type, ARPHRD_ETHER, address length, the source MAC padded to 8, protocol
        let mut h = vec![0, 4, 0, 1, 0, 6];
        h.extend_from_slice(&d[6..12]);
        h.extend_from_slice(&[0, 0, 0x08, 0x00]);
        h
    };
    let none = |_: &[u8]| Vec::new();
    let (snd, rcv) = (&out.captures[0].bytes, &out.captures[1].bytes);
    let mut results = vec![];
    for (tag, dl, strip, prefix) in [
        ("eth", pcap_file::DataLink::ETHERNET, 0usize, &none as &dyn Fn(&[u8]) -> Vec<u8>),
        ("sll", pcap_file::DataLink::LINUX_SLL, 14, &sll),
        ("raw", pcap_file::DataLink::RAW, 14, &none),
    ] {
        let inputs = [write(&format!("{tag}-snd.pcap"), dl, strip, prefix, snd), write(&format!("{tag}-rcv.pcap"), dl, strip, prefix, rcv)];
        results.push(analyze(&inputs, 10 * MS, Some(0), true).expect(tag));
    }
    std::fs::remove_dir_all(&dir).ok();
    let eth = &results[0].flows;
    assert!(*eth.retrans_segs.last().unwrap() > 0.0);
    for r in &results[1..] {
        assert_eq!(r.flows.delivered_bytes, eth.delivered_bytes);
        assert_eq!(r.flows.retrans_segs, eth.retrans_segs);
        assert_eq!(r.flows.rtt_ms.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                   eth.rtt_ms.iter().map(|x| x.to_bits()).collect::<Vec<_>>());
        assert_eq!(r.connections[0].sender_file, Some(0));
    }
}

#[test]
fn pcapng_holds_the_same_packets() {
    use ccsim::capture::Format;
    let mut ng = all_points(128);
    ng.format = Format::Pcapng;
    let a = run(lossy(Some(all_points(128))));
    let b = run(lossy(Some(ng)));
    let dir = std::env::temp_dir().join(format!("ccsim-capture-ng-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut series = vec![];
    for out in [&a, &b] {
        let mut inputs = vec![];
        for c in &out.captures {
            let p = dir.join(&c.name);
            std::fs::write(&p, &c.bytes).unwrap();
            let point = if c.name.starts_with("rtr-in") {
                Point::Ingress
            } else if c.name.starts_with("rtr-out") {
                Point::Egress
            } else {
                Point::Host
            };
            inputs.push((p.to_string_lossy().into_owned(), point));
        }
        series.push(analyze(&inputs, 10 * MS, Some(0), true).unwrap());
    }
    std::fs::remove_dir_all(&dir).ok();
    assert!(b.captures.iter().all(|c| c.name.ends_with(".pcapng") && c.bytes[..4] == [0x0a, 0x0d, 0x0d, 0x0a]));
    assert_eq!(series[0].flows.delivered_bytes, series[1].flows.delivered_bytes);
    assert_eq!(series[0].flows.rtt_ms.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
               series[1].flows.rtt_ms.iter().map(|x| x.to_bits()).collect::<Vec<_>>());
    assert_eq!(series[0].router.as_ref().unwrap().queue_pkts, series[1].router.as_ref().unwrap().queue_pkts);
}
