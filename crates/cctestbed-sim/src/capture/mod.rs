//! Packet captures in and out.
//!
//! - Out ([`Recorder`]): the simulator's traffic written as pcap files with nanosecond
//!   timestamps (or pcapng), one file per capture point: each sender host (`snd<i>.pcap`, flow `i`'s data
//!   as it leaves and its ACKs as they arrive), each receiver host (`rcv<i>.pcap`), and the
//!   bottleneck router's ingress (`rtr-in.pcap`, every data packet arriving, dropped ones
//!   included) and egress (`rtr-out.pcap`, each packet as it starts on the link, i.e. as it
//!   leaves the queue). Frames are real Ethernet/IPv4/TCP ([`wire`]); time 0 of the trial is
//!   the Unix epoch.
//! - In ([`analyze`]): any pcap or pcapng of TCP traffic turned back into per-flow series.
//!
//! Every flow opens with the simulator's three-way handshake, recorded where its packets pass:
//! the SYN and the handshake's final ACK at the sender, the router's ingress and egress and the
//! receiver (the SYN may be dropped and sent again, as any data packet), the SYN-ACK at the
//! receiver and the sender. The SYN and SYN-ACK carry the options a Linux host sends (MSS, SACK
//! permitted, timestamps, window scale; ECE and CWR on a SYN of an ECN flow, ECE on its
//! SYN-ACK), so readers learn each connection's MSS and options; data counts from ISN + 1. ACKs
//! are written with their SACK blocks and so are longer on the wire than the fixed 52 bytes the
//! simulator's uncongested ACK path counts.

pub mod analyze;
pub mod wire;

use crate::packet::{AckPacket, DataPacket};
use crate::problem::{Path, Problem};
use crate::time::Nanos;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
use pcap_file::pcapng::blocks::interface_description::{InterfaceDescriptionBlock, InterfaceDescriptionOption};
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::{DataLink, Endianness, TsResolution};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::io::Write;
use std::time::Duration;
use wire::{encode, sender_port, ts_ms, Ecn, Host, Segment, RCV_PORT, TTL_HOST, WSCALE};

/// Which capture points a trial records, and how much of each frame.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaptureConfig {
    /// One file per sender host.
    #[serde(default)]
    pub senders: bool,
    /// One file per receiver host.
    #[serde(default)]
    pub receivers: bool,
    /// Data packets arriving at the bottleneck router (before loss and the queue).
    #[serde(default)]
    pub ingress: bool,
    /// Data packets leaving the bottleneck queue.
    #[serde(default)]
    pub egress: bool,
    /// Bytes kept of each frame (tcpdump's `-s`); headers need at most 94.
    #[serde(default = "default_snaplen")]
    pub snaplen: u32,
    /// File format: pcap with nanosecond timestamps, or pcapng (nanosecond `if_tsresol`).
    #[serde(default)]
    pub format: Format,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    #[default]
    Pcap,
    Pcapng,
}

impl Format {
    pub fn extension(self) -> &'static str {
        match self {
            Format::Pcap => "pcap",
            Format::Pcapng => "pcapng",
        }
    }
}

fn default_snaplen() -> u32 {
    128
}

/// Smallest snap length that keeps every header the simulator writes (14 + 20 + 60).
pub const MIN_SNAPLEN: u32 = 94;
/// Largest snap length (tcpdump's `MAXIMUM_SNAPLEN`).
pub const MAX_SNAPLEN: u32 = 262_144;

/// No capture point, the default snap length and format.
impl Default for CaptureConfig {
    fn default() -> Self {
        CaptureConfig { senders: false, receivers: false, ingress: false, egress: false, snaplen: default_snaplen(), format: Format::Pcap }
    }
}

impl CaptureConfig {
    /// A snap length that keeps every header; problems are at `at` (`capture`).
    pub fn check(&self, at: &Path, out: &mut Vec<Problem>) {
        if !(MIN_SNAPLEN..=MAX_SNAPLEN).contains(&self.snaplen) {
            out.push(at.field("snaplen").problem(format!("{}: out of range; valid are {MIN_SNAPLEN} to {MAX_SNAPLEN}", self.snaplen)));
        }
    }
}

/// What the capture of a flow's connection shows besides its packets: the bytes it will send
/// (`None`: until the end), the receive window it advertises (`None`: unlimited) and whether it
/// negotiates ECN.
#[derive(Debug, Clone, Copy)]
pub struct Connection {
    pub size_bytes: Option<u64>,
    pub rwnd_bytes: Option<u64>,
    pub ecn: bool,
}

/// A written capture: its file name and bytes.
#[derive(Debug, Clone)]
pub struct CaptureFile {
    pub name: String,
    pub bytes: Vec<u8>,
}

enum Writer<W: Write> {
    Pcap(PcapWriter<W>),
    Pcapng(PcapNgWriter<W>),
}

/// One capture point's file: the format's header, then a record per frame, into any sink (the
/// simulator keeps it in memory; the link emulator streams its router points to disk).
pub struct PointFile<W: Write = Vec<u8>> {
    name: String,
    w: Writer<W>,
}

impl PointFile<Vec<u8>> {
    fn new(stem: String, cfg: &CaptureConfig) -> Self {
        Self::to_sink(stem, cfg, Vec::new()).expect("headers into a Vec")
    }

}

impl<W: Write> PointFile<W> {
    /// The point `stem` (`rtr-in`, `snd0`, ...) written into `sink` in `cfg`'s format.
    pub fn to_sink(stem: String, cfg: &CaptureConfig, sink: W) -> Result<Self, String> {
        let w = match cfg.format {
            Format::Pcap => {
                let header = PcapHeader {
                    version_major: 2,
                    version_minor: 4,
                    ts_correction: 0,
                    ts_accuracy: 0,
                    snaplen: cfg.snaplen,
                    datalink: DataLink::ETHERNET,
                    ts_resolution: TsResolution::NanoSecond,
                    endianness: Endianness::Little,
                };
                Writer::Pcap(PcapWriter::with_header(sink, header).map_err(|e| format!("{stem}: {e}"))?)
            }
            Format::Pcapng => {
                let mut w = PcapNgWriter::with_endianness(sink, Endianness::Little).map_err(|e| format!("{stem}: {e}"))?;
                // if_tsresol 9: timestamps count nanoseconds
                let idb = InterfaceDescriptionBlock {
                    linktype: DataLink::ETHERNET,
                    snaplen: cfg.snaplen,
                    options: vec![InterfaceDescriptionOption::IfTsResol(9)],
                };
                w.write_pcapng_block(idb).map_err(|e| format!("{stem}: {e}"))?;
                Writer::Pcapng(w)
            }
        };
        Ok(PointFile { name: format!("{stem}.{}", cfg.format.extension()), w })
    }

    /// The file's name: the point's stem and the format's extension.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// One frame at `t` (ns since the Unix epoch), `data` its first bytes (at most the snap
    /// length), `wire_len` its length on the wire.
    pub fn write(&mut self, t: Nanos, data: &[u8], wire_len: u32) -> Result<(), String> {
        let ts = Duration::from_nanos(t.max(0) as u64);
        match &mut self.w {
            Writer::Pcap(w) => w.write_packet(&PcapPacket::new(ts, wire_len, data)).map(|_| ()),
            Writer::Pcapng(w) => w
                .write_pcapng_block(EnhancedPacketBlock {
                    interface_id: 0,
                    timestamp: ts,
                    original_len: wire_len,
                    data: std::borrow::Cow::Borrowed(data),
                    options: vec![],
                })
                .map(|_| ()),
        }
        .map_err(|e| format!("{}: {e}", self.name))
    }

    /// The sink, every record handed to it.
    pub fn into_sink(self) -> W {
        match self.w {
            Writer::Pcap(w) => w.into_writer(),
            Writer::Pcapng(w) => w.into_inner(),
        }
    }
}

/// Per-flow wire state.
struct FlowWire {
    mss: u64,
    /// The MSS option of the SYNs: the payload per segment plus the timestamps option.
    mss_option: u16,
    size: Option<u64>,
    isn_snd: u32,
    isn_rcv: u32,
    /// The flow negotiates ECN: its SYN carries ECE and CWR, the SYN-ACK ECE (RFC 3168 6.1.1).
    ecn: bool,
    /// TSval of the last SYN-ACK the receiver sent, echoed by the handshake's final ACK.
    syn_ack_ts: u32,
    /// The ACKs on the way back (FIFO, nothing lost on the ACK path): their send time and IP id.
    acks_in_flight: VecDeque<(Nanos, u16)>,
    ack_ip_id: u16,
}

/// Records the simulator's packets at the configured capture points.
pub struct Recorder {
    snaplen: u32,
    senders: Vec<PointFile>,
    receivers: Vec<PointFile>,
    ingress: Option<PointFile>,
    egress: Option<PointFile>,
    flows: Vec<FlowWire>,
    buf: Vec<u8>,
}

/// A deterministic, well-spread initial sequence number per flow and direction.
fn isn(flow: u32, salt: u32) -> u32 {
    let mut x = (flow as u64) << 1 | salt as u64;
    x = x.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (x >> 32) as u32 ^ (x as u32)
}

/// The IP identification of a data packet: a hash of the segment and its send time, so that
/// every capture point writes the same value for the same transmission.
fn data_ip_id(p: &DataPacket) -> u16 {
    let x = p.seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (p.sent_at as u64).wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
    (x >> 48) as u16
}

impl Recorder {
    pub fn new(cfg: &CaptureConfig, flows: &[Connection], mss: u32, mtu: u32) -> Self {
        let mss_option = (mss + if mtu - mss >= 52 { 12 } else { 0 }).min(65535) as u16;
        let n = flows.len();
        let files = |on: bool, prefix: &str| -> Vec<PointFile> {
            if on {
                (0..n).map(|i| PointFile::new(format!("{prefix}{i}"), cfg)).collect()
            } else {
                vec![]
            }
        };
        Recorder {
            snaplen: cfg.snaplen,
            senders: files(cfg.senders, "snd"),
            receivers: files(cfg.receivers, "rcv"),
            ingress: cfg.ingress.then(|| PointFile::new("rtr-in".into(), cfg)),
            egress: cfg.egress.then(|| PointFile::new("rtr-out".into(), cfg)),
            flows: flows
                .iter()
                .enumerate()
                .map(|(i, f)| FlowWire {
                    mss: mss as u64,
                    mss_option,
                    size: f.size_bytes,
                    isn_snd: isn(i as u32, 0),
                    isn_rcv: isn(i as u32, 1),
                    ecn: f.ecn,
                    syn_ack_ts: 0,
                    acks_in_flight: VecDeque::new(),
                    ack_ip_id: 0,
                })
                .collect(),
            buf: Vec::with_capacity(256),
        }
    }

    /// Byte offset of segment `seg` from the start of the flow's data.
    fn byte(&self, f: u32, seg: u64) -> u64 {
        let w = &self.flows[f as usize];
        let b = seg * w.mss;
        w.size.map_or(b, |s| b.min(s))
    }

    fn data_seq(&self, f: u32, seg: u64) -> u32 {
        self.flows[f as usize].isn_snd.wrapping_add(1).wrapping_add(self.byte(f, seg) as u32)
    }

    fn write(snaplen: u32, file: &mut PointFile, now: Nanos, frame: &[u8], wire_len: u32) {
        let keep = (snaplen as usize).min(frame.len());
        file.write(now, &frame[..keep], wire_len).expect("writing to a Vec");
    }

    /// Data packet `p` seen at `point` (0 sender, 1 ingress, 2 egress, 3 receiver) at `now`.
    fn data_at(&mut self, now: Nanos, p: &DataPacket, point: u8) {
        let f = p.flow;
        let (s, r) = (Host::Sender(f), Host::Receiver(f));
        let (l2, ttl) = match point {
            0 | 1 => ((s, Host::Router(0)), TTL_HOST),
            _ => ((Host::Router(1), r), TTL_HOST - 1),
        };
        let file = match point {
            0 => self.senders.get_mut(f as usize),
            1 => self.ingress.as_mut(),
            2 => self.egress.as_mut(),
            _ => self.receivers.get_mut(f as usize),
        };
        let Some(file) = file else { return };
        let seg = {
            let w = &self.flows[p.flow as usize];
            if p.is_syn() {
                Segment {
                    seq: w.isn_snd,
                    syn: true,
                    window: 65535,
                    ts: Some((ts_ms(p.sent_at), 0)),
                    syn_mss: Some(w.mss_option),
                    ece: w.ecn,
                    cwr: w.ecn,
                    ip_id: data_ip_id(p),
                    ..Default::default()
                }
            } else if p.is_handshake_ack() {
                Segment {
                    seq: w.isn_snd.wrapping_add(1),
                    ack: Some(w.isn_rcv.wrapping_add(1)),
                    window: 502,
                    ts: Some((ts_ms(p.sent_at), w.syn_ack_ts)),
                    ip_id: data_ip_id(p),
                    ..Default::default()
                }
            } else {
                let opts = p.size.saturating_sub(p.payload).saturating_sub(40);
                let b = (p.seq * w.mss).min(w.size.unwrap_or(u64::MAX));
                Segment {
                    seq: w.isn_snd.wrapping_add(1).wrapping_add(b as u32),
                    ack: Some(w.isn_rcv.wrapping_add(1)),
                    window: 502,
                    payload: p.payload,
                    ts: (opts >= 12).then(|| (ts_ms(p.sent_at), 0)),
                    ecn: p.ecn,
                    cwr: p.cwr,
                    ip_id: data_ip_id(p),
                    ..Default::default()
                }
            }
        };
        let n = encode(&mut self.buf, s, r, (sender_port(f), RCV_PORT), l2, ttl, &seg);
        Self::write(self.snaplen, file, now, &self.buf, n);
    }

    pub fn data_sent(&mut self, now: Nanos, p: &DataPacket) {
        self.data_at(now, p, 0);
    }
    pub fn data_ingress(&mut self, now: Nanos, p: &DataPacket) {
        self.data_at(now, p, 1);
    }
    pub fn data_egress(&mut self, now: Nanos, p: &DataPacket) {
        self.data_at(now, p, 2);
    }
    pub fn data_received(&mut self, now: Nanos, p: &DataPacket) {
        self.data_at(now, p, 3);
    }

    fn ack_segment(&self, a: &AckPacket, sent: Nanos, ip_id: u16) -> Segment {
        let f = a.flow;
        let w = &self.flows[f as usize];
        if a.is_syn_ack() {
            return Segment {
                seq: w.isn_rcv,
                ack: Some(w.isn_snd.wrapping_add(1)),
                syn: true,
                window: a.wnd.min(65535) as u16,
                ts: Some((ts_ms(sent), a.tsecr.map_or(0, ts_ms))),
                syn_mss: Some(w.mss_option),
                ece: w.ecn,
                ip_id,
                ..Default::default()
            };
        }
        let sacks = a
            .sack_blocks()
            .iter()
            .map(|&(s, e)| (self.data_seq(f, s), self.data_seq(f, e)))
            .collect();
        Segment {
            seq: w.isn_rcv.wrapping_add(1),
            ack: Some(self.data_seq(f, a.ack)),
            // the window the receiver offered, in units of its window scale
            window: (a.wnd >> WSCALE).min(65535) as u16,
            payload: 0,
            ts: Some((ts_ms(sent), a.tsecr.map_or(0, ts_ms))),
            sacks,
            ecn: Ecn::NotEct,
            ece: a.ece,
            ip_id,
            ..Default::default()
        }
    }

    /// The receiver sends ACK `a` at `now`.
    pub fn ack_sent(&mut self, now: Nanos, a: &AckPacket) {
        let w = &mut self.flows[a.flow as usize];
        let id = w.ack_ip_id;
        w.ack_ip_id = w.ack_ip_id.wrapping_add(1);
        w.acks_in_flight.push_back((now, id));
        if a.is_syn_ack() {
            w.syn_ack_ts = ts_ms(now);
        }
        if self.receivers.is_empty() {
            return;
        }
        let seg = self.ack_segment(a, now, id);
        let (s, r) = (Host::Sender(a.flow), Host::Receiver(a.flow));
        let n = encode(&mut self.buf, r, s, (RCV_PORT, sender_port(a.flow)), (r, Host::Router(1)), TTL_HOST, &seg);
        Self::write(self.snaplen, &mut self.receivers[a.flow as usize], now, &self.buf, n);
    }

    /// ACK `a` reaches its sender at `now`.
    pub fn ack_received(&mut self, now: Nanos, a: &AckPacket) {
        let (sent, id) = self.flows[a.flow as usize].acks_in_flight.pop_front().unwrap_or((now, 0));
        if self.senders.is_empty() {
            return;
        }
        let seg = self.ack_segment(a, sent, id);
        let (s, r) = (Host::Sender(a.flow), Host::Receiver(a.flow));
        let n = encode(&mut self.buf, r, s, (RCV_PORT, sender_port(a.flow)), (Host::Router(0), s), TTL_HOST - 1, &seg);
        Self::write(self.snaplen, &mut self.senders[a.flow as usize], now, &self.buf, n);
    }

    /// The files, in a fixed order: senders, receivers, ingress, egress.
    pub fn finish(self) -> Vec<CaptureFile> {
        self.senders
            .into_iter()
            .chain(self.receivers)
            .chain(self.ingress)
            .chain(self.egress)
            .map(|f| CaptureFile { name: f.name.clone(), bytes: f.into_sink() })
            .collect()
    }
}
