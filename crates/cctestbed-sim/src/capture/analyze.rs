//! Captures read back into per-flow series, as the thesis' parser did for its testbed.
//!
//! Input: pcap (microsecond or nanosecond) or pcapng files of Ethernet, Linux cooked (SLL) or
//! raw IP frames, read with `pcap-file` and decoded with `etherparse`. Each file is a *host*
//! capture (a sender's or a receiver's, told apart below) or the bottleneck router's
//! *ingress* or *egress*, as the caller says.
//!
//! 1. Connections: TCP packets grouped by their address and port pair. The direction that
//!    carries more payload is the data direction: its source is the sender. Connections with
//!    no payload are counted, not analysed. Flows are numbered by first packet, then address.
//! 2. Which host a capture is on: hosts send with an initial TTL (32, 64, 128 or 255) and a
//!    router on the path lowers it, so a capture where the data leaves with an initial TTL
//!    and the ACKs arrive with a lower one is the sender's, and the reverse the receiver's.
//!    Where the TTLs do not tell (no router between the hosts), the first such capture of a
//!    connection is taken as the sender's and a second as the receiver's. A capture that holds
//!    one direction only is from the path, not a host, and is neither.
//! 3. At the sender (Linux's `tcp_clean_rtx_queue` and `tcp_sacktag_write_queue` replayed on
//!    byte ranges): bytes and segments sent, retransmissions (data below the highest sequence
//!    sent), one RTT sample per ACK that newly covers never-retransmitted data, from the
//!    oldest such byte range cumulatively ACKed, else the oldest newly SACKed (Karn's rule,
//!    and the sample Linux feeds its RTT estimator), the minimum RTT, and inflight as the
//!    bytes sent and neither cumulatively ACKed nor SACKed.
//! 4. At the receiver: payload delivered in order (the next expected byte's advance).
//!    Without a receiver capture, the sender's cumulative ACKs stand in for it.
//! 5. At the router: the egress packets are matched to the ingress ones in each connection's
//!    order (the queue may interleave connections, as fq does, but keeps each one's order) by
//!    connection, sequence number, IP id and length; an ingress packet of the connection
//!    passed over is a drop, counted at its arrival (an AQM's drop at dequeue included).
//!    The queue is what arrived and was neither dropped nor left, sampled at each interval.
//!
//! Everything is sampled on a grid of `interval` from time zero (the earliest packet of any
//! file unless given): a sample at `t` holds the counters after every packet before `t` (as
//! the simulator samples before it handles the packets of that instant).
//! Numbers a capture cannot give are NaN.

use etherparse::{LaxNetSlice, LaxSlicedPacket, TcpOptionElement, TransportSlice};
use pcap_file::pcap::PcapParser;
use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionOption;
use pcap_file::pcapng::{Block, PcapNgParser};
use pcap_file::{DataLink, PcapError, TsResolution};
use std::collections::{BTreeMap, HashMap, VecDeque};

/// How a file was captured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Point {
    /// On a host (sender or receiver, told apart by the analysis).
    Host,
    /// The bottleneck router's ingress.
    Ingress,
    /// The bottleneck router's egress.
    Egress,
}

/// A connection's address pair: (address, port) of each end, the lower first.
type Endpoint = ([u8; 16], u16);
type ConnKey = (Endpoint, Endpoint);

/// One TCP packet, decoded.
#[derive(Debug, Clone, Copy)]
pub struct Packet {
    pub t: i64,
    pub conn: u32,
    /// From the lower endpoint of the key to the higher.
    pub up: bool,
    pub seq: u32,
    pub ack: u32,
    pub syn: bool,
    pub has_ack: bool,
    pub payload: u32,
    pub ttl: u8,
    pub ip_id: u16,
    pub ip_len: u32,
    pub wire_len: u32,
    pub n_sacks: u8,
    pub sacks: [(u32, u32); 4],
    /// MSS option (SYN only) and whether the timestamps option is present.
    pub mss_opt: u16,
    pub ts: bool,
}

/// A capture file, decoded.
#[derive(Debug, Default)]
pub struct FileData {
    pub path: String,
    pub format: &'static str,
    pub frames: u64,
    pub tcp: Vec<Packet>,
    /// The file ended inside a record (a capture cut short); what came before is kept.
    pub truncated: bool,
}

#[derive(Debug)]
pub struct AnalyzeError(pub String);

impl std::fmt::Display for AnalyzeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

const INITIAL_TTLS: [u8; 4] = [32, 64, 128, 255];
/// Most samples per flow (the series are held in memory: 10^7 is about a day at 10 ms).
const MAX_SAMPLES: i64 = 10_000_000;

fn link_offset(dl: DataLink) -> Option<LinkKind> {
    match dl {
        DataLink::ETHERNET => Some(LinkKind::Ethernet),
        DataLink::RAW | DataLink::IPV4 | DataLink::IPV6 => Some(LinkKind::Ip),
        DataLink::LINUX_SLL => Some(LinkKind::Sll),
        _ => None,
    }
}

#[derive(Debug, Clone, Copy)]
enum LinkKind {
    Ethernet,
    Ip,
    Sll,
}

struct Decoder {
    conns: HashMap<ConnKey, u32>,
    keys: Vec<ConnKey>,
    last: Option<(ConnKey, u32)>,
}

impl Decoder {
    fn decode(&mut self, kind: LinkKind, t: i64, data: &[u8], orig_len: u32) -> Option<Packet> {
        let sliced = match kind {
            LinkKind::Ethernet => LaxSlicedPacket::from_ethernet(data).ok()?,
            LinkKind::Ip => LaxSlicedPacket::from_ip(data).ok()?,
            LinkKind::Sll => {
                if data.len() < 16 {
                    return None;
                }
                let proto = u16::from_be_bytes([data[14], data[15]]);
                LaxSlicedPacket::from_ether_type(etherparse::EtherType(proto), &data[16..])
            }
        };
        let (src, dst, ttl, ip_id, ip_len, ip_hdr) = match sliced.net.as_ref()? {
            LaxNetSlice::Ipv4(ip) => {
                let h = ip.header();
                let map = |a: [u8; 4]| {
                    let mut x = [0u8; 16];
                    x[10] = 0xff;
                    x[11] = 0xff;
                    x[12..].copy_from_slice(&a);
                    x
                };
                (map(h.source()), map(h.destination()), h.ttl(), h.identification(), h.total_len() as u32, h.ihl() as u32 * 4)
            }
            LaxNetSlice::Ipv6(ip) => {
                let h = ip.header();
                (h.source(), h.destination(), h.hop_limit(), 0, h.payload_length() as u32 + 40, 40)
            }
            _ => return None,
        };
        let tcp = match sliced.transport.as_ref()? {
            TransportSlice::Tcp(t) => t,
            _ => return None,
        };
        let hdr = tcp.header_len() as u32;
        // IP total length 0 is what a capture of a TSO/GSO super-packet may show.
        let link_len = match kind {
            LinkKind::Ethernet => 14,
            LinkKind::Sll => 16,
            LinkKind::Ip => 0,
        };
        let ip_len = if ip_len == 0 { orig_len.saturating_sub(link_len) } else { ip_len };
        let payload = ip_len.saturating_sub(ip_hdr + hdr);
        let a: Endpoint = (src, tcp.source_port());
        let b: Endpoint = (dst, tcp.destination_port());
        let (key, up) = if a <= b { ((a, b), true) } else { ((b, a), false) };
        // consecutive packets mostly belong to one connection: skip the hash lookup then
        let conn = match self.last {
            Some((k, c)) if k == key => c,
            _ => {
                let next = self.keys.len() as u32;
                let conn = *self.conns.entry(key).or_insert(next);
                if conn == next {
                    self.keys.push(key);
                }
                self.last = Some((key, conn));
                conn
            }
        };
        let mut p = Packet {
            t,
            conn,
            up,
            seq: tcp.sequence_number(),
            ack: tcp.acknowledgment_number(),
            syn: tcp.syn(),
            has_ack: tcp.ack(),
            payload,
            ttl,
            ip_id,
            ip_len,
            wire_len: orig_len,
            n_sacks: 0,
            sacks: [(0, 0); 4],
            mss_opt: 0,
            ts: false,
        };
        for o in tcp.options_iterator() {
            match o {
                Ok(TcpOptionElement::Timestamp(..)) => p.ts = true,
                Ok(TcpOptionElement::MaximumSegmentSize(m)) => p.mss_opt = m,
                Ok(TcpOptionElement::SelectiveAcknowledgement(first, rest)) => {
                    p.sacks[0] = first;
                    p.n_sacks = 1;
                    for r in rest.into_iter().flatten() {
                        p.sacks[p.n_sacks as usize] = r;
                        p.n_sacks += 1;
                    }
                }
                _ => {}
            }
        }
        Some(p)
    }
}

fn read_file(path: &str, dec: &mut Decoder) -> Result<FileData, AnalyzeError> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(AnalyzeError(format!("{path}: missing"))),
        Err(e) => return Err(AnalyzeError(format!("{path}: cannot be read ({e})"))),
    };
    let mut out = FileData { path: path.to_string(), ..Default::default() };
    let magic = bytes.get(..4).map(|m| u32::from_le_bytes([m[0], m[1], m[2], m[3]]));
    let not_capture = || AnalyzeError(format!("{path}: not a pcap or pcapng capture (no capture file header)"));
    match magic {
        Some(0xa1b2c3d4 | 0xd4c3b2a1 | 0xa1b23c4d | 0x4d3cb2a1) => {
            out.format = "pcap";
            let (mut rest, parser) = PcapParser::new(&bytes).map_err(|_| not_capture())?;
            let header = parser.header();
            let kind = link_offset(header.datalink).ok_or_else(|| {
                AnalyzeError(format!("{path}: link type {:?} is not read (Ethernet, Linux cooked or raw IP are)", header.datalink))
            })?;
            let frac_ns: i64 = if header.ts_resolution == TsResolution::NanoSecond { 1 } else { 1000 };
            while !rest.is_empty() {
                // Raw records: pcap-file's checked ones refuse a frame longer than the snap length,
                // which is every frame a snap length cut.
                match parser.next_raw_packet(rest) {
                    Ok((r, pkt)) => {
                        rest = r;
                        out.frames += 1;
                        let t = pkt.ts_sec as i64 * 1_000_000_000 + pkt.ts_frac as i64 * frac_ns;
                        if let Some(p) = dec.decode(kind, t, &pkt.data, pkt.orig_len) {
                            out.tcp.push(p);
                        }
                    }
                    Err(PcapError::IncompleteBuffer) => {
                        out.truncated = true;
                        break;
                    }
                    Err(e) => return Err(AnalyzeError(format!("{path}: damaged after {} packets ({e})", out.frames))),
                }
            }
        }
        Some(0x0a0d0d0a) => {
            out.format = "pcapng";
            let (mut rest, mut parser) = PcapNgParser::new(&bytes).map_err(|_| not_capture())?;
            let mut ifaces: Vec<(Option<LinkKind>, u128, u128)> = vec![];
            while !rest.is_empty() {
                match parser.next_block(rest) {
                    Ok((r, block)) => {
                        rest = r;
                        match block {
                            Block::SectionHeader(_) => ifaces.clear(),
                            Block::InterfaceDescription(idb) => {
                                // if_tsresol: 10^-n s (default 6) or 2^-n with the top bit set.
                                let mut res: u8 = 6;
                                for o in &idb.options {
                                    if let InterfaceDescriptionOption::IfTsResol(x) = o {
                                        res = *x;
                                    }
                                }
                                let (num, den) = if res & 0x80 == 0 {
                                    let e = res.min(38) as u32;
                                    if e <= 9 { (10u128.pow(9 - e), 1) } else { (1, 10u128.pow(e - 9)) }
                                } else {
                                    (1_000_000_000, 1u128 << (res & 0x7f).min(100))
                                };
                                ifaces.push((link_offset(idb.linktype), num, den));
                            }
                            Block::EnhancedPacket(epb) => {
                                out.frames += 1;
                                let Some(&(Some(kind), num, den)) = ifaces.get(epb.interface_id as usize) else { continue };
                                // pcap-file hands over the raw timestamp ticks as nanoseconds.
                                let t = (epb.timestamp.as_nanos() * num / den) as i64;
                                if let Some(p) = dec.decode(kind, t, &epb.data, epb.original_len) {
                                    out.tcp.push(p);
                                }
                            }
                            Block::SimplePacket(_) | Block::Packet(_) => out.frames += 1,
                            _ => {}
                        }
                    }
                    Err(PcapError::IncompleteBuffer) => {
                        out.truncated = true;
                        break;
                    }
                    Err(e) => return Err(AnalyzeError(format!("{path}: damaged after {} packets ({e})", out.frames))),
                }
            }
        }
        _ => return Err(not_capture()),
    }
    if out.tcp.is_empty() {
        return Err(AnalyzeError(format!("{path}: no TCP packets in it ({} frames)", out.frames)));
    }
    // Captures are in time order, except a few packets tcpdump takes from other CPUs.
    out.tcp.sort_by_key(|p| p.t);
    Ok(out)
}

/// Unwraps 32-bit sequence numbers into 64-bit offsets from a base, following the last value.
#[derive(Debug, Clone, Copy)]
struct Unwrap {
    base: u32,
    last: i64,
}

impl Unwrap {
    fn new(base: u32) -> Self {
        Unwrap { base, last: 0 }
    }
    fn rel(&mut self, x: u32) -> i64 {
        let d = x.wrapping_sub(self.base).wrapping_sub(self.last as u32) as i32 as i64;
        let v = self.last + d;
        if v > self.last {
            self.last = v;
        }
        v
    }
}

/// A connection as the captures show it.
#[derive(Debug, Clone)]
pub struct Connection {
    pub flow: u32,
    /// The connection's index among every connection read, its data direction (from the
    /// lower endpoint) and the data's first sequence number (ISN + 1) when a SYN was seen.
    pub conn: u32,
    pub data_up: bool,
    pub data_base: Option<u32>,
    pub sender: (String, u16),
    pub receiver: (String, u16),
    /// Payload bytes per segment (from the SYNs' MSS options, else the commonest size).
    pub mss: u32,
    pub syn_seen: bool,
    pub first_t: i64,
    pub last_t: i64,
    /// Index of the files read as this connection's sender and receiver captures.
    pub sender_file: Option<usize>,
    pub receiver_file: Option<usize>,
    /// Per file: (packets, frame bytes on the wire, payload bytes) of this connection.
    pub per_file: Vec<(u64, u64, u64)>,
}

/// Per-flow series on the sample grid; NaN where the captures do not tell.
#[derive(Debug, Default, Clone)]
pub struct FlowColumns {
    pub time_s: Vec<f64>,
    pub flow: Vec<u32>,
    pub goodput_bps: Vec<f64>,
    pub delivered_bytes: Vec<f64>,
    pub send_rate_bps: Vec<f64>,
    pub sent_bytes: Vec<f64>,
    pub rtt_ms: Vec<f64>,
    pub min_rtt_ms: Vec<f64>,
    pub inflight_bytes: Vec<f64>,
    pub inflight_pkts: Vec<f64>,
    pub sent_segs: Vec<f64>,
    pub retrans_segs: Vec<f64>,
}

#[derive(Debug, Default, Clone)]
pub struct RouterColumns {
    pub time_s: Vec<f64>,
    pub queue_bytes: Vec<f64>,
    pub queue_pkts: Vec<f64>,
    pub arrivals_pkts: Vec<f64>,
    pub arrival_bytes: Vec<f64>,
    pub departures_pkts: Vec<f64>,
    pub departed_bytes: Vec<f64>,
    pub departed_payload_bytes: Vec<f64>,
    pub drops: Vec<f64>,
    /// Egress packets with no ingress packet to match (the captures disagree).
    pub unmatched: u64,
}

/// Everything `cctestbed analyze` needs.
#[derive(Debug)]
pub struct Analysis {
    pub files: Vec<FileData>,
    pub connections: Vec<Connection>,
    /// Connections that carried no payload.
    pub idle_connections: u64,
    pub time_zero: i64,
    pub flows: FlowColumns,
    pub router: Option<RouterColumns>,
}

/// A sender's byte range on the wire: last transmission time, ever retransmitted, SACKed.
#[derive(Debug, Clone, Copy)]
struct Range {
    end: i64,
    tx: i64,
    retrans: bool,
    sacked: bool,
}

/// The sender's view of one connection (Linux's retransmission queue on byte ranges).
#[derive(Debug, Default)]
struct SenderView {
    ranges: BTreeMap<i64, Range>,
    una: i64,
    nxt: i64,
    sacked: i64,
    sent_bytes: u64,
    sent_segs: u64,
    retrans_segs: u64,
    rtt_sum: f64,
    rtt_n: u64,
    min_rtt: i64,
}

impl SenderView {
    /// Splits the range containing `at` so that a range starts there.
    fn split(&mut self, at: i64) {
        if let Some((&s, &r)) = self.ranges.range(..at).next_back() {
            if r.end > at {
                self.ranges.insert(s, Range { end: at, ..r });
                self.ranges.insert(at, r);
            }
        }
    }

    fn data(&mut self, t: i64, s: i64, e: i64, mss: u32) {
        let len = (e - s).max(0) as u64;
        let segs = len.div_ceil(mss.max(1) as u64).max(1);
        self.sent_bytes += len;
        self.sent_segs += segs;
        if s < self.nxt {
            self.retrans_segs += segs;
            let (lo, hi) = (s.max(self.una), e.min(self.nxt));
            if lo < hi {
                self.split(lo);
                self.split(hi);
                for (_, r) in self.ranges.range_mut(lo..hi) {
                    r.tx = t;
                    r.retrans = true;
                }
            }
        }
        if e > self.nxt {
            let lo = s.max(self.nxt);
            self.ranges.insert(lo, Range { end: e, tx: t, retrans: false, sacked: false });
            self.nxt = e;
        }
    }

    /// An ACK at `t`; returns the RTT sample it gives, if any.
    fn ack(&mut self, t: i64, a: i64, sacks: &[(i64, i64)]) -> Option<i64> {
        if a > self.nxt {
            return None;
        }
        let mut first_ackt = None;
        let mut first_sackt = None;
        let mut last = None::<i64>;
        if a > self.una {
            self.split(a);
            // every range starts at or above una: those below a are the first ones
            while let Some(entry) = self.ranges.first_entry() {
                if *entry.key() >= a {
                    break;
                }
                let (s, r) = entry.remove_entry();
                if r.sacked {
                    self.sacked -= r.end - s;
                } else if !r.retrans {
                    first_ackt.get_or_insert(r.tx);
                    last = Some(last.map_or(r.tx, |l| l.max(r.tx)));
                }
            }
            self.una = a;
        }
        for &(l, r) in sacks {
            let (l, r) = (l.max(self.una), r.min(self.nxt));
            if l >= r {
                continue;
            }
            self.split(l);
            self.split(r);
            for (&s, g) in self.ranges.range_mut(l..r) {
                if !g.sacked {
                    g.sacked = true;
                    self.sacked += g.end - s;
                    if !g.retrans {
                        first_sackt.get_or_insert(g.tx);
                        last = Some(last.map_or(g.tx, |x| x.max(g.tx)));
                    }
                }
            }
        }
        if let Some(l) = last {
            let ca = (t - l).max(1);
            if self.min_rtt == 0 || ca < self.min_rtt {
                self.min_rtt = ca;
            }
        }
        let sample = first_ackt.or(first_sackt).map(|tx| (t - tx).max(1));
        if let Some(r) = sample {
            self.rtt_sum += r as f64;
            self.rtt_n += 1;
            if self.min_rtt == 0 || r < self.min_rtt {
                self.min_rtt = r;
            }
        }
        sample
    }
}

/// The receiver's view: the next byte expected and what arrived beyond it.
#[derive(Debug, Default)]
struct ReceiverView {
    nxt: i64,
    ooo: BTreeMap<i64, i64>,
}

impl ReceiverView {
    fn data(&mut self, s: i64, e: i64) {
        if e <= self.nxt {
            return;
        }
        if s <= self.nxt {
            self.nxt = e;
        } else {
            let end = self.ooo.entry(s).or_insert(e);
            *end = (*end).max(e);
        }
        while let Some((&s, &e)) = self.ooo.iter().next() {
            if s > self.nxt {
                break;
            }
            self.ooo.remove(&s);
            self.nxt = self.nxt.max(e);
        }
    }
}

fn ip_text(a: &[u8; 16]) -> String {
    if a[..10].iter().all(|&x| x == 0) && a[10] == 0xff && a[11] == 0xff {
        std::net::Ipv4Addr::new(a[12], a[13], a[14], a[15]).to_string()
    } else {
        std::net::Ipv6Addr::from(*a).to_string()
    }
}

/// Per connection and direction (up = lower endpoint sends), the ISN seen on a SYN.
#[derive(Debug, Default, Clone, Copy)]
struct Syns {
    isn: [Option<u32>; 2],
    mss: [u16; 2],
    ts: bool,
}

/// Reads and analyses `inputs`; `interval` is the sample interval, `time_zero` the grid's start.
pub fn analyze(inputs: &[(String, Point)], interval: i64, time_zero: Option<i64>) -> Result<Analysis, AnalyzeError> {
    if interval <= 0 {
        return Err(AnalyzeError(format!("interval: {interval} ns: must be > 0")));
    }
    let mut dec = Decoder { conns: HashMap::new(), keys: vec![], last: None };
    let mut files = Vec::with_capacity(inputs.len());
    for (path, _) in inputs {
        files.push(read_file(path, &mut dec)?);
    }
    let n_conn = dec.keys.len();
    // Totals per connection: payload per direction, SYN options, first and last time.
    let mut payload = vec![[0u64; 2]; n_conn];
    let mut syns = vec![Syns::default(); n_conn];
    let mut span = vec![(i64::MAX, i64::MIN); n_conn];
    let mut sizes: Vec<HashMap<u32, u64>> = vec![HashMap::new(); n_conn];
    let mut per_file = vec![vec![(0u64, 0u64, 0u64); files.len()]; n_conn];
    // Per file, per connection: its packets' indices (each pass below walks only its own).
    let mut index: Vec<HashMap<u32, Vec<u32>>> = vec![HashMap::new(); files.len()];
    for (fi, f) in files.iter().enumerate() {
        for (i, p) in f.tcp.iter().enumerate() {
            index[fi].entry(p.conn).or_default().push(i as u32);
        }
    }
    let packets_of = |fi: usize, c: usize| -> Vec<&Packet> {
        index[fi].get(&(c as u32)).map_or_else(Vec::new, |ix| ix.iter().map(|&i| &files[fi].tcp[i as usize]).collect())
    };
    for (fi, f) in files.iter().enumerate() {
        for p in &f.tcp {
            let c = p.conn as usize;
            let d = p.up as usize;
            payload[c][d] += p.payload as u64;
            if p.syn {
                syns[c].isn[d] = Some(p.seq);
                if p.mss_opt > 0 {
                    syns[c].mss[d] = p.mss_opt;
                }
                syns[c].ts |= p.ts;
            }
            if p.payload > 0 {
                *sizes[c].entry(p.payload).or_default() += 1;
            }
            span[c] = (span[c].0.min(p.t), span[c].1.max(p.t));
            let pf = &mut per_file[c][fi];
            *pf = (pf.0 + 1, pf.1 + p.wire_len as u64, pf.2 + p.payload as u64);
        }
    }
    let t_first = files.iter().filter_map(|f| f.tcp.first()).map(|p| p.t).min().unwrap_or(0);
    let t_last = files.iter().filter_map(|f| f.tcp.last()).map(|p| p.t).max().unwrap_or(0);
    let time_zero = time_zero.unwrap_or(t_first);

    // Flows: connections with payload, by first packet then address.
    let mut order: Vec<usize> = (0..n_conn).filter(|&c| payload[c][0] + payload[c][1] > 0).collect();
    order.sort_by_key(|&c| (span[c].0, dec.keys[c]));
    let idle = (n_conn - order.len()) as u64;
    if order.is_empty() {
        return Err(AnalyzeError("no TCP connection in the captures carries data".into()));
    }
    let mut flow_of = vec![u32::MAX; n_conn];
    let mut conns = vec![];
    for (i, &c) in order.iter().enumerate() {
        flow_of[c] = i as u32;
        let up = payload[c][1] >= payload[c][0]; // the data direction
        let (a, b) = dec.keys[c];
        let (snd, rcv) = if up { (a, b) } else { (b, a) };
        let d = up as usize;
        let s = syns[c];
        let mss = if s.mss[0] > 0 && s.mss[1] > 0 {
            (s.mss[0].min(s.mss[1]) as u32).saturating_sub(if s.ts { 12 } else { 0 })
        } else {
            sizes[c].iter().max_by_key(|&(sz, n)| (*n, *sz)).map_or(1460, |(&sz, _)| sz)
        };
        // Which host files are the sender's and the receiver's.
        let mut sender_file = None;
        let mut receiver_file = None;
        let mut unknown = vec![];
        for fi in 0..files.len() {
            if inputs[fi].1 != Point::Host || per_file[c][fi].0 == 0 {
                continue;
            }
            let mut ttl = [0u8; 2]; // max TTL of data, of ACKs
            for p in packets_of(fi, c) {
                let k = if p.up == up { 0 } else { 1 };
                ttl[k] = ttl[k].max(p.ttl);
            }
            let init = |x: u8| INITIAL_TTLS.contains(&x);
            if init(ttl[0]) && ttl[1] > 0 && !init(ttl[1]) && sender_file.is_none() {
                sender_file = Some(fi);
            } else if init(ttl[1]) && ttl[0] > 0 && !init(ttl[0]) && receiver_file.is_none() {
                receiver_file = Some(fi);
            } else if ttl[0] > 0 && ttl[1] > 0 {
                unknown.push(fi);
            }
            // a capture with one direction only is from the path (a router), not a host
        }
        for fi in unknown {
            if sender_file.is_none() {
                sender_file = Some(fi);
            } else if receiver_file.is_none() {
                receiver_file = Some(fi);
            }
        }
        conns.push(Connection {
            flow: i as u32,
            conn: c as u32,
            data_up: up,
            data_base: s.isn[d].map(|x| x.wrapping_add(1)),
            sender: (ip_text(&snd.0), snd.1),
            receiver: (ip_text(&rcv.0), rcv.1),
            mss: mss.max(1),
            syn_seen: s.isn[d].is_some(),
            first_t: span[c].0,
            last_t: span[c].1,
            sender_file,
            receiver_file,
            per_file: per_file[c].clone(),
        });
    }

    // The sample grid.
    let n_samples = ((t_last - time_zero).max(0) + interval - 1) / interval;
    if n_samples > MAX_SAMPLES {
        return Err(AnalyzeError(format!(
            "the captures end {:.0} s after time zero: {n_samples} samples of {} ms per flow; give a longer interval",
            (t_last - time_zero) as f64 / 1e9,
            interval as f64 / 1e6
        )));
    }
    let n_samples = n_samples.max(1) as usize;
    let grid = |k: usize| time_zero + (k as i64 + 1) * interval;

    let mut cols = FlowColumns::default();
    let n_flows = conns.len();
    // Per flow, per sample: the values, filled flow by flow then interleaved by time.
    let mut per_flow: Vec<FlowColumns> = Vec::with_capacity(n_flows);
    for (fl, &c) in order.iter().enumerate() {
        let conn = &conns[fl];
        let up = payload[c][1] >= payload[c][0];
        let d = up as usize;
        let mut out = FlowColumns::default();
        let nan = vec![f64::NAN; n_samples];
        // Sender view.
        let (mut sent_b, mut sent_s, mut retr, mut rtt, mut minr, mut infl, mut acked) =
            (nan.clone(), nan.clone(), nan.clone(), nan.clone(), nan.clone(), nan.clone(), nan.clone());
        if let Some(fi) = conn.sender_file {
            let pk = packets_of(fi, c);
            let base = syns[c].isn[d].map(|x| x.wrapping_add(1)).or_else(|| {
                pk.iter().find(|p| p.up == up && p.payload > 0).map(|p| p.seq)
            });
            if let Some(base) = base {
                let mut seq = Unwrap::new(base);
                let mut ackn = Unwrap::new(base);
                let mut v = SenderView::default();
                let mut started = false;
                let mut k = 0usize;
                let mut sacks: Vec<(i64, i64)> = Vec::with_capacity(4);
                let mut emit = |k: usize, v: &SenderView, prev: &mut (f64, u64), started: bool| {
                    if !started {
                        sent_b[k] = 0.0;
                        sent_s[k] = 0.0;
                        retr[k] = 0.0;
                        acked[k] = 0.0;
                        return;
                    }
                    sent_b[k] = v.sent_bytes as f64;
                    sent_s[k] = v.sent_segs as f64;
                    retr[k] = v.retrans_segs as f64;
                    acked[k] = v.una.max(0) as f64;
                    if v.rtt_n > prev.1 {
                        rtt[k] = (v.rtt_sum - prev.0) / (v.rtt_n - prev.1) as f64 / 1e6;
                    }
                    *prev = (v.rtt_sum, v.rtt_n);
                    if v.min_rtt > 0 {
                        minr[k] = v.min_rtt as f64 / 1e6;
                    }
                    infl[k] = (v.nxt - v.una - v.sacked).max(0) as f64;
                };
                let mut prev = (0.0, 0u64);
                for p in pk {
                    while k < n_samples && grid(k) <= p.t {
                        emit(k, &v, &mut prev, started);
                        k += 1;
                    }
                    if p.syn {
                        continue;
                    }
                    if p.up == up && p.payload > 0 {
                        started = true;
                        let s = seq.rel(p.seq);
                        v.data(p.t, s, s + p.payload as i64, conn.mss);
                    } else if p.up != up && p.has_ack && started {
                        let a = ackn.rel(p.ack);
                        sacks.clear();
                        for &(l, r) in &p.sacks[..p.n_sacks as usize] {
                            let l = a + (l.wrapping_sub(p.ack) as i32 as i64);
                            let r = a + (r.wrapping_sub(p.ack) as i32 as i64);
                            sacks.push((l, r));
                        }
                        v.ack(p.t, a, &sacks);
                    }
                }
                while k < n_samples {
                    emit(k, &v, &mut prev, started);
                    k += 1;
                }
            }
        }
        // Receiver view: in-order delivery; else the sender's cumulative ACKs.
        let mut delivered = acked.clone();
        if let Some(fi) = conn.receiver_file {
            let pk = packets_of(fi, c);
            let base = syns[c].isn[d]
                .map(|x| x.wrapping_add(1))
                .or_else(|| pk.iter().find(|p| p.up == up && p.payload > 0).map(|p| p.seq));
            if let Some(base) = base {
                let mut seq = Unwrap::new(base);
                let mut v = ReceiverView::default();
                let mut k = 0usize;
                for p in pk {
                    while k < n_samples && grid(k) <= p.t {
                        delivered[k] = v.nxt.max(0) as f64;
                        k += 1;
                    }
                    if p.up == up && p.payload > 0 && !p.syn {
                        let s = seq.rel(p.seq);
                        v.data(s, s + p.payload as i64);
                    }
                }
                while k < n_samples {
                    delivered[k] = v.nxt.max(0) as f64;
                    k += 1;
                }
            }
        }
        let dt = interval as f64 / 1e9;
        let rate = |x: &[f64], k: usize| {
            let prev = if k == 0 { 0.0 } else { x[k - 1] };
            let prev = if prev.is_nan() { 0.0 } else { prev };
            (x[k] - prev) * 8.0 / dt
        };
        for k in 0..n_samples {
            out.time_s.push((grid(k) - time_zero) as f64 / 1e9);
            out.flow.push(fl as u32);
            out.goodput_bps.push(rate(&delivered, k));
            out.delivered_bytes.push(delivered[k]);
            out.send_rate_bps.push(rate(&sent_b, k));
            out.sent_bytes.push(sent_b[k]);
            out.rtt_ms.push(rtt[k]);
            out.min_rtt_ms.push(minr[k]);
            out.inflight_bytes.push(infl[k]);
            out.inflight_pkts.push((infl[k] / conn.mss as f64).ceil());
            out.sent_segs.push(sent_s[k]);
            out.retrans_segs.push(retr[k]);
        }
        per_flow.push(out);
    }
    // Rows ordered by time, then flow, as the simulator writes them.
    for k in 0..n_samples {
        for f in &per_flow {
            cols.time_s.push(f.time_s[k]);
            cols.flow.push(f.flow[k]);
            cols.goodput_bps.push(f.goodput_bps[k]);
            cols.delivered_bytes.push(f.delivered_bytes[k]);
            cols.send_rate_bps.push(f.send_rate_bps[k]);
            cols.sent_bytes.push(f.sent_bytes[k]);
            cols.rtt_ms.push(f.rtt_ms[k]);
            cols.min_rtt_ms.push(f.min_rtt_ms[k]);
            cols.inflight_bytes.push(f.inflight_bytes[k]);
            cols.inflight_pkts.push(f.inflight_pkts[k]);
            cols.sent_segs.push(f.sent_segs[k]);
            cols.retrans_segs.push(f.retrans_segs[k]);
        }
    }

    let ingress = inputs.iter().position(|i| i.1 == Point::Ingress);
    let egress = inputs.iter().position(|i| i.1 == Point::Egress);
    let router = match (ingress, egress) {
        (Some(i), Some(e)) => Some(router_series(&files[i], &files[e], n_samples, &grid, time_zero)),
        _ => None,
    };
    Ok(Analysis { files, connections: conns, idle_connections: idle, time_zero, flows: cols, router })
}

/// The bottleneck from its ingress and egress captures (see the module documentation).
fn router_series(ing: &FileData, egr: &FileData, n: usize, grid: &dyn Fn(usize) -> i64, t0: i64) -> RouterColumns {
    type Key = (u32, u32, u16, u32);
    let key = |p: &Packet| -> Key { (p.conn, p.seq, p.ip_id, p.ip_len) };
    let mut at: HashMap<Key, VecDeque<usize>> = HashMap::new();
    // Each connection's arrivals in order, and each arrival's place among them: queue
    // disciplines that interleave flows (fq, fq_codel, dualpi2) keep each flow's order only.
    let mut of_conn: HashMap<u32, Vec<usize>> = HashMap::new();
    let mut rank = vec![0usize; ing.tcp.len()];
    for (i, p) in ing.tcp.iter().enumerate() {
        at.entry(key(p)).or_default().push_back(i);
        let l = of_conn.entry(p.conn).or_default();
        rank[i] = l.len();
        l.push(i);
    }
    let mut dropped = vec![false; ing.tcp.len()];
    let mut next: HashMap<u32, usize> = HashMap::new();
    let mut unmatched = 0u64;
    let mut departed: Vec<&Packet> = Vec::with_capacity(egr.tcp.len());
    for p in &egr.tcp {
        let nx = next.entry(p.conn).or_default();
        let q = at.get_mut(&key(p));
        let j = q.and_then(|q| {
            while q.front().is_some_and(|&j| rank[j] < *nx) {
                q.pop_front();
            }
            q.pop_front()
        });
        match j {
            Some(j) => {
                // the connection's arrivals skipped over never left: dropped
                for &d in &of_conn[&p.conn][*nx..rank[j]] {
                    dropped[d] = true;
                }
                *nx = rank[j] + 1;
                departed.push(p);
            }
            None => unmatched += 1,
        }
    }
    let mut r = RouterColumns { unmatched, ..Default::default() };
    let (mut i, mut e) = (0usize, 0usize);
    let (mut arr, mut arr_b, mut drops, mut drop_b) = (0u64, 0u64, 0u64, 0u64);
    let (mut dep, mut dep_b, mut dep_pl) = (0u64, 0u64, 0u64);
    for k in 0..n {
        let t = grid(k);
        while i < ing.tcp.len() && ing.tcp[i].t < t {
            arr += 1;
            arr_b += ing.tcp[i].ip_len as u64;
            if dropped[i] {
                drops += 1;
                drop_b += ing.tcp[i].ip_len as u64;
            }
            i += 1;
        }
        while e < departed.len() && departed[e].t < t {
            dep += 1;
            dep_b += departed[e].ip_len as u64;
            dep_pl += departed[e].payload as u64;
            e += 1;
        }
        r.time_s.push((t - t0) as f64 / 1e9);
        r.arrivals_pkts.push(arr as f64);
        r.arrival_bytes.push(arr_b as f64);
        r.departures_pkts.push(dep as f64);
        r.departed_bytes.push(dep_b as f64);
        r.departed_payload_bytes.push(dep_pl as f64);
        r.drops.push(drops as f64);
        r.queue_pkts.push(arr.saturating_sub(drops + dep) as f64);
        r.queue_bytes.push(arr_b.saturating_sub(drop_b + dep_b) as f64);
    }
    r
}

/// One flow's packets as its sender saw them, for a time-sequence plot; sequence numbers are
/// byte offsets from the flow's first data byte, times nanoseconds from time zero.
#[derive(Debug, Default)]
pub struct Trace {
    /// Data segments sent: time, first byte, end, whether data below the highest sent.
    pub data_t: Vec<i64>,
    pub data_start: Vec<i64>,
    pub data_end: Vec<i64>,
    pub data_retrans: Vec<bool>,
    /// ACKs arriving: time and cumulative ACK.
    pub ack_t: Vec<i64>,
    pub ack: Vec<i64>,
    /// SACK blocks the ACKs carried: time, left and right edge.
    pub sack_t: Vec<i64>,
    pub sack_start: Vec<i64>,
    pub sack_end: Vec<i64>,
    /// Segments sent and never seen at the receiver (needs its capture): time sent, range.
    pub drop_t: Vec<i64>,
    pub drop_start: Vec<i64>,
    pub drop_end: Vec<i64>,
    /// Whether a receiver capture was there to find drops.
    pub drops_known: bool,
}

/// The trace of flow `flow` (numbered as [`analyze`] numbers them) from its sender capture.
pub fn trace(inputs: &[(String, Point)], flow: u32, time_zero: Option<i64>) -> Result<Trace, AnalyzeError> {
    let a = analyze(inputs, 1_000_000_000, time_zero)?;
    let n = a.connections.len();
    let c = a.connections.get(flow as usize).ok_or_else(|| {
        AnalyzeError(format!("no flow {flow} in the captures: they hold {n} flow(s), 0 to {}", n.saturating_sub(1)))
    })?;
    let sf = c.sender_file.ok_or_else(|| AnalyzeError(format!("flow {flow}: no capture on its sender's side")))?;
    let mine = |fi: usize| a.files[fi].tcp.iter().filter(move |p| p.conn == c.conn);
    let base = c
        .data_base
        .or_else(|| mine(sf).find(|p| p.up == c.data_up && p.payload > 0).map(|p| p.seq))
        .unwrap_or(0);
    let mut received: HashMap<(u32, u16, u32), u32> = HashMap::new();
    if let Some(rf) = c.receiver_file {
        for p in mine(rf).filter(|p| p.up == c.data_up && p.payload > 0) {
            *received.entry((p.seq, p.ip_id, p.payload)).or_default() += 1;
        }
    }
    let mut t = Trace { drops_known: c.receiver_file.is_some(), ..Default::default() };
    let (mut seq, mut ackn) = (Unwrap::new(base), Unwrap::new(base));
    let mut high = 0i64;
    for p in mine(sf) {
        let at = p.t - a.time_zero;
        if p.syn {
            continue;
        }
        if p.up == c.data_up && p.payload > 0 {
            let s = seq.rel(p.seq);
            let e = s + p.payload as i64;
            t.data_t.push(at);
            t.data_start.push(s);
            t.data_end.push(e);
            t.data_retrans.push(s < high);
            high = high.max(e);
            if t.drops_known {
                match received.get_mut(&(p.seq, p.ip_id, p.payload)) {
                    Some(k) if *k > 0 => *k -= 1,
                    _ => {
                        t.drop_t.push(at);
                        t.drop_start.push(s);
                        t.drop_end.push(e);
                    }
                }
            }
        } else if p.up != c.data_up && p.has_ack && high > 0 {
            let a = ackn.rel(p.ack);
            t.ack_t.push(at);
            t.ack.push(a);
            for &(l, r) in &p.sacks[..p.n_sacks as usize] {
                t.sack_t.push(at);
                t.sack_start.push(a + (l.wrapping_sub(p.ack) as i32 as i64));
                t.sack_end.push(a + (r.wrapping_sub(p.ack) as i32 as i64));
            }
        }
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_numbers_unwrap_across_2_32() {
        let mut u = Unwrap::new(u32::MAX - 1000);
        assert_eq!(u.rel(u32::MAX - 1000), 0);
        assert_eq!(u.rel(u32::MAX), 1000);
        assert_eq!(u.rel(499), 1500); // wrapped
        assert_eq!(u.rel(u32::MAX), 1000, "an old segment stays below");
        let mut v = Unwrap::new(7);
        let mut x = 7u32;
        for k in 1..=5u64 {
            x = x.wrapping_add(1_000_000_000);
            assert_eq!(v.rel(x), k as i64 * 1_000_000_000);
        }
    }

    #[test]
    fn rtt_samples_follow_karn_and_linux_seq_rtt() {
        let mut v = SenderView::default();
        v.data(0, 0, 1000, 1000);
        v.data(10, 1000, 2000, 1000);
        v.data(20, 2000, 3000, 1000);
        v.data(50, 0, 1000, 1000); // retransmission of the first
        assert_eq!(v.retrans_segs, 1);
        // cumulative ACK of the retransmitted segment alone: no sample (Karn)
        assert_eq!(v.ack(100, 1000, &[]), None);
        // SACK of the third: a sample from its send time
        assert_eq!(v.ack(110, 1000, &[(2000, 3000)]), Some(90));
        assert_eq!(v.sacked, 1000);
        // cumulative ACK over the second (never retransmitted) and the SACKed third: the
        // oldest newly ACKed that was neither retransmitted nor SACKed gives the sample
        assert_eq!(v.ack(120, 3000, &[]), Some(110));
        assert_eq!((v.sacked, v.una, v.nxt), (0, 3000, 3000));
        assert_eq!(v.min_rtt, 90);
    }

    #[test]
    fn partial_acks_split_ranges() {
        let mut v = SenderView::default();
        v.data(0, 0, 3000, 1000); // a 3-segment super-packet (TSO as captured)
        assert_eq!(v.sent_segs, 3);
        assert_eq!(v.ack(40, 1000, &[]), Some(40));
        assert_eq!(v.ranges.len(), 1);
        assert_eq!(v.ranges.keys().next(), Some(&1000));
        assert_eq!(v.ack(45, 3000, &[]), Some(45));
        assert!(v.ranges.is_empty());
    }

    #[test]
    fn receiver_counts_in_order_bytes_only() {
        let mut r = ReceiverView::default();
        r.data(0, 1000);
        r.data(2000, 3000); // a hole at 1000..2000
        assert_eq!(r.nxt, 1000);
        r.data(1000, 2000);
        assert_eq!(r.nxt, 3000);
        r.data(500, 1500); // a duplicate
        assert_eq!(r.nxt, 3000);
    }
}
