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
//!    connection, sequence number, IP id and length, among the ingress packets captured no
//!    later than the egress packet (the two captures share the router's clock); an ingress
//!    packet of the connection passed over is a drop, counted at its arrival (an AQM's drop at
//!    dequeue included). When the caller says the discipline serves in arrival order (one
//!    FIFO: drop-tail, red, codel, pie), an ingress packet of any connection that arrived
//!    before one that left is a drop too: so are the last packets a flow sent before it
//!    stopped, which nothing of its own follows.
//!    The queue is what arrived and was neither dropped nor left, sampled at each interval.
//!
//! The files are streamed, never held: a first pass finds the connections and which capture is
//! whose, a second replays the senders and receivers, and the router's pair is read together
//! once more; memory holds the connections' state, the packets still in the router's queue and
//! the output series, whose rows are bounded ([`MAX_ROWS`]) before they are built.
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

use crate::tcp::rtt::AckedSendTimes;
use crate::tcp::TCP_TS_TICK as TS_TICK;
use crate::telemetry::{ColumnData, Scalar};

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
    /// The timestamps option's TSval and TSecr (0 and 0 without it).
    pub tsval: u32,
    pub tsecr: u32,
}

/// A capture file as read: its format, frames and TCP packets counted, first and last times.
/// The packets themselves are streamed, never held.
#[derive(Debug, Default, Clone)]
pub struct FileData {
    pub path: String,
    pub format: &'static str,
    pub frames: u64,
    /// TCP packets decoded.
    pub tcp_packets: u64,
    /// Earliest and latest TCP packet.
    pub first_t: Option<i64>,
    pub last_t: Option<i64>,
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

/// Why an analysis ended early: an error, or the caller's check asked it to stop (Ctrl-C).
#[derive(Debug)]
pub enum Stop {
    Error(AnalyzeError),
    Stopped,
}

impl From<AnalyzeError> for Stop {
    fn from(e: AnalyzeError) -> Self {
        Stop::Error(e)
    }
}

const INITIAL_TTLS: [u8; 4] = [32, 64, 128, 255];
/// Most rows of output (flows x samples, plus the router's samples): the series are the one
/// thing held in memory that grows with the captures, about 100 bytes a row here and 500 in all
/// by the time `cctestbed analyze` has written its tables and plot (measured: 4 million rows,
/// 2.1 GB peak), so this is about 2 GB, as a trial's limit (`cctestbed.config.MAX_ROWS`).
pub const MAX_ROWS: i64 = 4_000_000;
/// How far (in packets) a file's records may stray from time order and still be streamed:
/// tcpdump writes a few packets taken on other CPUs late. A file out of order by more is
/// read whole and sorted, as a last resort.
const REORDER_WINDOW: usize = 1 << 16;
static WINDOW: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(REORDER_WINDOW);
/// Read-buffer size, and the largest record read (a record longer than what is left of its file
/// is a capture cut short).
const READ_CHUNK: usize = 1 << 20;
const MAX_RECORD: usize = 64 << 20;
/// Packets between two calls of the caller's stop check.
const CHECK_EVERY: u64 = 1 << 16;

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
            tsval: 0,
            tsecr: 0,
        };
        for o in tcp.options_iterator() {
            match o {
                Ok(TcpOptionElement::Timestamp(val, ecr)) => {
                    p.ts = true;
                    p.tsval = val;
                    p.tsecr = ecr;
                }
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

/// A file read in chunks.
struct Buf {
    file: std::fs::File,
    buf: Vec<u8>,
    pos: usize,
    len: usize,
    eof: bool,
}

impl Buf {
    fn open(path: &str) -> Result<Self, AnalyzeError> {
        let file = match std::fs::File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(AnalyzeError(format!("{path}: missing"))),
            Err(e) => return Err(AnalyzeError(format!("{path}: cannot be read ({e})"))),
        };
        Ok(Buf { file, buf: vec![0; READ_CHUNK], pos: 0, len: 0, eof: false })
    }

    fn data(&self) -> &[u8] {
        &self.buf[self.pos..self.len]
    }

    /// Reads more of the file behind what is buffered; false at its end.
    fn more(&mut self, path: &str) -> Result<bool, AnalyzeError> {
        use std::io::Read;
        if self.eof {
            return Ok(false);
        }
        if self.pos > 0 {
            self.buf.copy_within(self.pos..self.len, 0);
            self.len -= self.pos;
            self.pos = 0;
        }
        if self.len == self.buf.len() {
            if self.buf.len() >= MAX_RECORD {
                // a record this long is a length field gone wrong: the capture is read up to it
                self.eof = true;
                return Ok(false);
            }
            self.buf.resize(self.buf.len() * 2, 0);
        }
        loop {
            match self.file.read(&mut self.buf[self.len..]) {
                Ok(0) => {
                    self.eof = true;
                    return Ok(false);
                }
                Ok(n) => {
                    self.len += n;
                    return Ok(true);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(AnalyzeError(format!("{path}: cannot be read ({e})"))),
            }
        }
    }
}

enum Format {
    Pcap { parser: PcapParser, kind: LinkKind, frac_ns: i64 },
    PcapNg { parser: PcapNgParser, ifaces: Vec<(Option<LinkKind>, u128, u128)> },
}

/// What reading the next packet in time order gave.
enum Next {
    Packet(Packet),
    End,
    /// A record later in the file belongs more than [`REORDER_WINDOW`] packets earlier.
    OutOfOrder,
}

/// A capture's TCP packets in time order, decoded as the file is read: a window of
/// [`REORDER_WINDOW`] packets puts the few late ones in place; a file more out of order than
/// that is read whole and sorted ([`Stream::open`] with `whole`).
struct Stream {
    path: String,
    buf: Buf,
    fmt: Format,
    frames: u64,
    truncated: bool,
    done: bool,
    /// The window: packets read ahead, in time order (a late one is put in place, after those
    /// of the same time, as a stable sort of the whole file would).
    window: VecDeque<Packet>,
    last_out: i64,
    sorted: Option<std::vec::IntoIter<Packet>>,
}

impl Stream {
    fn open(path: &str, dec: &mut Decoder, whole: bool) -> Result<Stream, AnalyzeError> {
        let mut buf = Buf::open(path)?;
        while buf.data().len() < 4 && buf.more(path)? {}
        let magic = buf.data().get(..4).map(|m| u32::from_le_bytes([m[0], m[1], m[2], m[3]]));
        let not_capture = || AnalyzeError(format!("{path}: not a pcap or pcapng capture (no capture file header)"));
        let fmt = match magic {
            Some(0xa1b2c3d4 | 0xd4c3b2a1 | 0xa1b23c4d | 0x4d3cb2a1) => loop {
                let data = buf.data();
                let got = match PcapParser::new(data) {
                    Ok((rest, parser)) => Ok((data.len() - rest.len(), parser)),
                    Err(e) => Err(matches!(e, PcapError::IncompleteBuffer)),
                };
                match got {
                    Ok((used, parser)) => {
                        buf.pos += used;
                        let header = parser.header();
                        let kind = link_offset(header.datalink).ok_or_else(|| {
                            AnalyzeError(format!(
                                "{path}: link type {:?} is not read (Ethernet, Linux cooked or raw IP are)",
                                header.datalink
                            ))
                        })?;
                        let frac_ns: i64 = if header.ts_resolution == TsResolution::NanoSecond { 1 } else { 1000 };
                        break Format::Pcap { parser, kind, frac_ns };
                    }
                    Err(true) if buf.more(path)? => continue,
                    Err(_) => return Err(not_capture()),
                }
            },
            Some(0x0a0d0d0a) => loop {
                let data = buf.data();
                let got = match PcapNgParser::new(data) {
                    Ok((rest, parser)) => Ok((data.len() - rest.len(), parser)),
                    Err(e) => Err(matches!(e, PcapError::IncompleteBuffer)),
                };
                match got {
                    Ok((used, parser)) => {
                        buf.pos += used;
                        break Format::PcapNg { parser, ifaces: vec![] };
                    }
                    Err(true) if buf.more(path)? => continue,
                    Err(_) => return Err(not_capture()),
                }
            },
            _ => return Err(not_capture()),
        };
        let mut s = Stream {
            path: path.to_string(),
            buf,
            fmt,
            frames: 0,
            truncated: false,
            done: false,
            window: VecDeque::new(),
            last_out: i64::MIN,
            sorted: None,
        };
        if whole {
            let mut all = vec![];
            while let Some(p) = s.raw_next(dec)? {
                all.push(p);
            }
            all.sort_by_key(|p| p.t); // stable: equal times keep the file's order
            s.sorted = Some(all.into_iter());
        }
        Ok(s)
    }

    /// The file's next TCP packet in the file's order; None at its end.
    fn raw_next(&mut self, dec: &mut Decoder) -> Result<Option<Packet>, AnalyzeError> {
        let path = &self.path;
        loop {
            if self.buf.data().is_empty() && !self.buf.more(path)? {
                return Ok(None);
            }
            let data = self.buf.data();
            let (used, pkt) = match &mut self.fmt {
                // Raw records: pcap-file's checked ones refuse a frame longer than the snap length,
                // which is every frame a snap length cut.
                Format::Pcap { parser, kind, frac_ns } => match parser.next_raw_packet(data) {
                    Ok((rest, pkt)) => {
                        self.frames += 1;
                        let t = pkt.ts_sec as i64 * 1_000_000_000 + pkt.ts_frac as i64 * *frac_ns;
                        (data.len() - rest.len(), dec.decode(*kind, t, &pkt.data, pkt.orig_len))
                    }
                    Err(PcapError::IncompleteBuffer) => (0, None),
                    Err(e) => {
                        return Err(AnalyzeError(format!("{path}: damaged after {} packets ({e})", self.frames)))
                    }
                },
                Format::PcapNg { parser, ifaces } => match parser.next_block(data) {
                    Ok((rest, block)) => {
                        let mut got = None;
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
                                self.frames += 1;
                                if let Some(&(Some(kind), num, den)) = ifaces.get(epb.interface_id as usize) {
                                    // pcap-file hands over the raw timestamp ticks as nanoseconds.
                                    let t = (epb.timestamp.as_nanos() * num / den) as i64;
                                    got = dec.decode(kind, t, &epb.data, epb.original_len);
                                }
                            }
                            Block::SimplePacket(_) | Block::Packet(_) => self.frames += 1,
                            _ => {}
                        }
                        (data.len() - rest.len(), got)
                    }
                    Err(PcapError::IncompleteBuffer) => (0, None),
                    Err(e) => {
                        return Err(AnalyzeError(format!("{path}: damaged after {} packets ({e})", self.frames)))
                    }
                },
            };
            if used == 0 {
                // a record runs past what is buffered: read on, or the file ends inside it
                if !self.buf.more(path)? {
                    self.truncated = true;
                    return Ok(None);
                }
                continue;
            }
            self.buf.pos += used;
            if pkt.is_some() {
                return Ok(pkt);
            }
        }
    }

    /// The next TCP packet in time order.
    fn next(&mut self, dec: &mut Decoder) -> Result<Next, AnalyzeError> {
        if let Some(it) = &mut self.sorted {
            return Ok(it.next().map_or(Next::End, Next::Packet));
        }
        let window = WINDOW.load(std::sync::atomic::Ordering::Relaxed);
        while !self.done && self.window.len() < window {
            match self.raw_next(dec)? {
                Some(p) => {
                    if p.t < self.last_out {
                        return Ok(Next::OutOfOrder);
                    }
                    if self.window.back().is_none_or(|q| q.t <= p.t) {
                        self.window.push_back(p);
                    } else {
                        let at = self.window.partition_point(|q| q.t <= p.t);
                        self.window.insert(at, p);
                    }
                }
                None => self.done = true,
            }
        }
        Ok(match self.window.pop_front() {
            Some(p) => {
                self.last_out = p.t;
                Next::Packet(p)
            }
            None => Next::End,
        })
    }
}

/// Calls `f` on every TCP packet of `path` in time order (a file found too far out of order is
/// read again whole, and `f` starts over after `restart`); `check` is asked every
/// [`CHECK_EVERY`] packets whether to go on. Returns the file's counts and whether it had to
/// be read whole.
fn each_packet(
    path: &str,
    dec: &mut Decoder,
    whole: bool,
    check: &mut dyn FnMut() -> bool,
    restart: &mut dyn FnMut(),
    f: &mut dyn FnMut(&Packet),
) -> Result<(FileData, bool), Stop> {
    let mut whole = whole;
    'again: loop {
        let mut s = Stream::open(path, dec, whole)?;
        let mut fd = FileData { path: path.to_string(), format: match s.fmt {
            Format::Pcap { .. } => "pcap",
            Format::PcapNg { .. } => "pcapng",
        }, ..Default::default() };
        loop {
            match s.next(dec)? {
                Next::Packet(p) => {
                    fd.tcp_packets += 1;
                    if fd.tcp_packets.is_multiple_of(CHECK_EVERY) && !check() {
                        return Err(Stop::Stopped);
                    }
                    fd.first_t.get_or_insert(p.t);
                    fd.last_t = Some(p.t);
                    f(&p);
                }
                Next::End => break,
                Next::OutOfOrder => {
                    whole = true;
                    restart();
                    continue 'again;
                }
            }
        }
        fd.frames = s.frames;
        fd.truncated = s.truncated;
        return Ok((fd, whole));
    }
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

/// Declares a struct of column vectors, each field named as a column of the result schema
/// ([`crate::telemetry::FlowSeries`], [`crate::telemetry::RouterSeries`]), and `into_columns`, which hands
/// them over by those names. Units and meanings are the schema's (a test checks every name
/// against it); fields after `extra` are not columns.
macro_rules! named_columns {
    (
        $(#[$sm:meta])*
        pub struct $name:ident { $( pub $f:ident : Vec<$t:ty>, )* }
        extra { $( $(#[$em:meta])* pub $ef:ident : $et:ty, )* }
    ) => {
        $(#[$sm])*
        #[derive(Debug, Default, Clone)]
        pub struct $name {
            $( pub $f: Vec<$t>, )*
            $( $(#[$em])* pub $ef: $et, )*
        }

        impl $name {
            /// The columns' names, in the order of [`Self::into_columns`].
            pub const NAMES: &'static [&'static str] = &[$( stringify!($f) ),*];

            /// The columns by name.
            pub fn into_columns(self) -> Vec<(String, ColumnData)> {
                vec![$( (stringify!($f).to_string(), <$t as Scalar>::wrap(self.$f)) ),*]
            }
        }
    };
}

named_columns! {
    /// Per-flow series on the sample grid; NaN where the captures do not tell.
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
    extra {}
}

named_columns! {
    /// Router series on the sample grid. Every drop the captures show is a `drops_overflow`:
    /// a capture cannot tell why a packet was dropped (an AQM's drop included).
    pub struct RouterColumns {
        pub time_s: Vec<f64>,
        pub queue_bytes: Vec<f64>,
        pub queue_pkts: Vec<f64>,
        pub arrivals_pkts: Vec<f64>,
        pub arrival_bytes: Vec<f64>,
        pub departures_pkts: Vec<f64>,
        pub departed_bytes: Vec<f64>,
        pub departed_payload_bytes: Vec<f64>,
        pub drops_overflow: Vec<f64>,
    }
    extra {
        /// Egress packets with no ingress packet to match (the captures disagree).
        pub unmatched: u64,
    }
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
    /// The sender's timestamp clock against capture time: TSval less the capture time in
    /// milliseconds, from its latest data segment (Linux's TS clock ticks in ms, from an offset
    /// of its own).
    ts_offset: Option<i64>,
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

    /// A data segment's TSval: where the sender's timestamp clock stands against capture time.
    fn tsval(&mut self, t: i64, tsval: u32) {
        self.ts_offset = Some(tsval as i64 - t.div_euclid(TS_TICK));
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

    /// An ACK at `t` echoing `tsecr` (0: none); returns the RTT sample it gives, if any, as
    /// `tcp_clean_rtx_queue` and `tcp_ack_update_rtt` take it: from the oldest newly ACKed
    /// segment's send time unless the ACK covers retransmitted data (Karn, for the whole ACK),
    /// else from the oldest newly SACKed one, else, when snd_una advances, from the echoed
    /// timestamp (`tcp_rtt_tsopt_us`: whole milliseconds, at least one).
    fn ack(&mut self, t: i64, a: i64, sacks: &[(i64, i64)], tsecr: u32) -> Option<i64> {
        if a > self.nxt {
            return None;
        }
        let mut times = AckedSendTimes::default();
        let una_advanced = a > self.una;
        if una_advanced {
            self.split(a);
            // every range starts at or above una: those below a are the first ones
            while let Some(entry) = self.ranges.first_entry() {
                if *entry.key() >= a {
                    break;
                }
                let (s, r) = entry.remove_entry();
                times.retrans_data_acked |= r.retrans;
                if r.sacked {
                    self.sacked -= r.end - s;
                } else if !r.retrans {
                    times.acked(r.tx, r.tx);
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
                        times.sacked(g.tx);
                    }
                }
            }
        }
        // the TS clock's ticks since the echoed value, where the sender's clock is known
        let ts_ticks = self
            .ts_offset
            .filter(|_| tsecr != 0)
            .map(|off| ((t.div_euclid(TS_TICK) + off) as u32).wrapping_sub(tsecr) as i32 as i64)
            .filter(|&ticks| ticks >= 0);
        let (sample, ca) = times.rtt_samples(t, una_advanced, ts_ticks);
        let (sample, ca) = (sample.map(|r| r.max(1)), ca.map(|r| r.max(1)));
        if let Some(ca) = ca {
            if self.min_rtt == 0 || ca < self.min_rtt {
                self.min_rtt = ca;
            }
        }
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

/// One connection in one file: what the first pass counts.
#[derive(Debug, Default, Clone)]
struct FileConn {
    packets: u64,
    wire_bytes: u64,
    payload_bytes: u64,
    /// Per direction (up = lower endpoint sends): payload, the last SYN's ISN and nonzero MSS
    /// option, the highest TTL, the first data segment's sequence number.
    payload: [u64; 2],
    isn: [Option<u32>; 2],
    mss: [u16; 2],
    ts: bool,
    ttl: [u8; 2],
    first_seq: [Option<u32>; 2],
    span: (i64, i64),
}

/// What the first pass over every file finds: the files, the flows and where their packets are.
struct Discovery {
    files: Vec<FileData>,
    connections: Vec<Connection>,
    idle: u64,
    time_zero: i64,
    t_last: i64,
    /// Per file: read whole (too far out of time order to stream).
    whole: Vec<bool>,
    /// Per connection: its flow, or u32::MAX for one without data.
    flow_of: Vec<u32>,
    /// Per flow: the data's first sequence number at its sender's and its receiver's capture.
    sender_base: Vec<Option<u32>>,
    receiver_base: Vec<Option<u32>>,
    dec: Decoder,
}

fn discover(inputs: &[(String, Point)], time_zero: Option<i64>, check: &mut dyn FnMut() -> bool) -> Result<Discovery, Stop> {
    let mut dec = Decoder { conns: HashMap::new(), keys: vec![], last: None };
    let mut files = Vec::with_capacity(inputs.len());
    let mut whole = Vec::with_capacity(inputs.len());
    // Per file, per connection in it.
    let mut seen: Vec<HashMap<u32, FileConn>> = Vec::with_capacity(inputs.len());
    // Per file: (connection, payload size) -> segments.
    let mut file_sizes: Vec<HashMap<(u32, u32), u64>> = Vec::with_capacity(inputs.len());
    for (path, _) in inputs {
        let mut fc: HashMap<u32, FileConn> = HashMap::new();
        let mut sz: HashMap<(u32, u32), u64> = HashMap::new();
        let (fd, w) = {
            let fc = std::cell::RefCell::new(&mut fc);
            let sz = std::cell::RefCell::new(&mut sz);
            each_packet(
                path,
                &mut dec,
                false,
                check,
                &mut || {
                    fc.borrow_mut().clear();
                    sz.borrow_mut().clear();
                },
                &mut |p: &Packet| {
                    let mut fc = fc.borrow_mut();
                    let e = fc.entry(p.conn).or_insert_with(|| FileConn { span: (i64::MAX, i64::MIN), ..Default::default() });
                    let d = p.up as usize;
                    e.packets += 1;
                    e.wire_bytes += p.wire_len as u64;
                    e.payload_bytes += p.payload as u64;
                    e.payload[d] += p.payload as u64;
                    if p.syn {
                        e.isn[d] = Some(p.seq);
                        if p.mss_opt > 0 {
                            e.mss[d] = p.mss_opt;
                        }
                        e.ts |= p.ts;
                    }
                    e.ttl[d] = e.ttl[d].max(p.ttl);
                    if p.payload > 0 {
                        e.first_seq[d].get_or_insert(p.seq);
                        *sz.borrow_mut().entry((p.conn, p.payload)).or_default() += 1;
                    }
                    e.span = (e.span.0.min(p.t), e.span.1.max(p.t));
                },
            )?
        };
        if fd.tcp_packets == 0 {
            return Err(AnalyzeError(format!("{path}: no TCP packets in it ({} frames)", fd.frames)).into());
        }
        files.push(fd);
        whole.push(w);
        seen.push(fc);
        file_sizes.push(sz);
    }
    let n_conn = dec.keys.len();
    // Totals per connection: payload per direction, SYN options, first and last time.
    let mut payload = vec![[0u64; 2]; n_conn];
    let mut syns = vec![Syns::default(); n_conn];
    let mut span = vec![(i64::MAX, i64::MIN); n_conn];
    for fc in &seen {
        for (&c, e) in fc {
            let c = c as usize;
            for d in 0..2 {
                payload[c][d] += e.payload[d];
            }
            span[c] = (span[c].0.min(e.span.0), span[c].1.max(e.span.1));
        }
    }
    // the last SYN read (files in order) gives the ISN and the MSS option
    for fc in &seen {
        for (&c, e) in fc {
            let s = &mut syns[c as usize];
            for d in 0..2 {
                if e.isn[d].is_some() {
                    s.isn[d] = e.isn[d];
                }
                if e.mss[d] > 0 {
                    s.mss[d] = e.mss[d];
                }
            }
            s.ts |= e.ts;
        }
    }
    let t_first = files.iter().filter_map(|f| f.first_t).min().unwrap_or(0);
    let t_last = files.iter().filter_map(|f| f.last_t).max().unwrap_or(0);
    let time_zero = time_zero.unwrap_or(t_first);

    // Flows: connections with payload, by first packet then address.
    let mut order: Vec<usize> = (0..n_conn).filter(|&c| payload[c][0] + payload[c][1] > 0).collect();
    order.sort_by_key(|&c| (span[c].0, dec.keys[c]));
    let idle = (n_conn - order.len()) as u64;
    if order.is_empty() {
        return Err(AnalyzeError("no TCP connection in the captures carries data".into()).into());
    }
    let mut sizes: HashMap<u32, HashMap<u32, u64>> = HashMap::new();
    for sz in &file_sizes {
        for (&(c, s), &n) in sz {
            *sizes.entry(c).or_default().entry(s).or_default() += n;
        }
    }
    drop(file_sizes);
    let mut flow_of = vec![u32::MAX; n_conn];
    let mut conns = vec![];
    let (mut sender_base, mut receiver_base) = (vec![], vec![]);
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
            sizes.get(&(c as u32)).and_then(|m| m.iter().max_by_key(|&(sz, n)| (*n, *sz))).map_or(1460, |(&sz, _)| sz)
        };
        // Which host files are the sender's and the receiver's.
        let mut sender_file = None;
        let mut receiver_file = None;
        let mut unknown = vec![];
        for fi in 0..files.len() {
            let Some(e) = seen[fi].get(&(c as u32)) else { continue };
            if inputs[fi].1 != Point::Host || e.packets == 0 {
                continue;
            }
            let ttl = [e.ttl[d], e.ttl[1 - d]]; // max TTL of data, of ACKs
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
        let data_base = s.isn[d].map(|x| x.wrapping_add(1));
        let base_in = |f: Option<usize>| f.and_then(|fi| data_base.or_else(|| seen[fi][&(c as u32)].first_seq[d]));
        sender_base.push(base_in(sender_file));
        receiver_base.push(base_in(receiver_file));
        conns.push(Connection {
            flow: i as u32,
            conn: c as u32,
            data_up: up,
            data_base,
            sender: (ip_text(&snd.0), snd.1),
            receiver: (ip_text(&rcv.0), rcv.1),
            mss: mss.max(1),
            syn_seen: s.isn[d].is_some(),
            first_t: span[c].0,
            last_t: span[c].1,
            sender_file,
            receiver_file,
            per_file: (0..files.len())
                .map(|fi| seen[fi].get(&(c as u32)).map_or((0, 0, 0), |e| (e.packets, e.wire_bytes, e.payload_bytes)))
                .collect(),
        });
    }
    Ok(Discovery {
        files,
        connections: conns,
        idle,
        time_zero,
        t_last,
        whole,
        flow_of,
        sender_base,
        receiver_base,
        dec,
    })
}

/// A sender's replay in progress: sequence numbers unwrapped, its view, the next sample.
struct SenderRun {
    seq: Unwrap,
    ackn: Unwrap,
    v: SenderView,
    started: bool,
    k: usize,
    prev: (f64, u64),
}

/// The per-flow columns being filled, row `k * flows + flow`, NaN where the captures do not tell.
struct Filling {
    flows: usize,
    sent_b: Vec<f64>,
    sent_s: Vec<f64>,
    retr: Vec<f64>,
    rtt: Vec<f64>,
    minr: Vec<f64>,
    infl: Vec<f64>,
    /// In-order payload at the receiver, else the sender's cumulative ACKs.
    deliv: Vec<f64>,
}

impl Filling {
    /// The sample `k` of flow `fl` from its sender's view; `acked` says whether the cumulative
    /// ACKs stand in for the receiver.
    fn emit(&mut self, fl: usize, k: usize, r: &mut SenderRun, acked: bool) {
        let i = k * self.flows + fl;
        if !r.started {
            self.sent_b[i] = 0.0;
            self.sent_s[i] = 0.0;
            self.retr[i] = 0.0;
            if acked {
                self.deliv[i] = 0.0;
            }
            return;
        }
        let v = &r.v;
        self.sent_b[i] = v.sent_bytes as f64;
        self.sent_s[i] = v.sent_segs as f64;
        self.retr[i] = v.retrans_segs as f64;
        if acked {
            self.deliv[i] = v.una.max(0) as f64;
        }
        if v.rtt_n > r.prev.1 {
            self.rtt[i] = (v.rtt_sum - r.prev.0) / (v.rtt_n - r.prev.1) as f64 / 1e6;
        }
        if v.min_rtt > 0 {
            self.minr[i] = v.min_rtt as f64 / 1e6;
        }
        self.infl[i] = (v.nxt - v.una - v.sacked).max(0) as f64;
        r.prev = (v.rtt_sum, v.rtt_n);
    }
}

/// Reads and analyses `inputs`; `interval` is the sample interval, `time_zero` the grid's start,
/// `arrival_order` whether the router's discipline serves in arrival order
/// ([`crate::qdisc::serves_in_arrival_order`]; false assumes only each connection's order).
pub fn analyze(inputs: &[(String, Point)], interval: i64, time_zero: Option<i64>, arrival_order: bool) -> Result<Analysis, AnalyzeError> {
    match analyze_checked(inputs, interval, time_zero, arrival_order, &mut || true) {
        Ok(a) => Ok(a),
        Err(Stop::Error(e)) => Err(e),
        Err(Stop::Stopped) => Err(AnalyzeError("stopped".into())),
    }
}

/// [`analyze`], asking `check` every few tens of thousands of packets whether to go on (false:
/// [`Stop::Stopped`]). The captures are streamed twice (the router's pair once more): memory
/// holds the connections' state and the output series, not the files.
pub fn analyze_checked(
    inputs: &[(String, Point)],
    interval: i64,
    time_zero: Option<i64>,
    arrival_order: bool,
    check: &mut dyn FnMut() -> bool,
) -> Result<Analysis, Stop> {
    if interval <= 0 {
        return Err(AnalyzeError(format!("interval: {interval} ns: must be > 0")).into());
    }
    let mut disc = discover(inputs, time_zero, check)?;
    let time_zero = disc.time_zero;
    let conns = &disc.connections;
    let n_flows = conns.len();
    let router_pair = (
        inputs.iter().position(|i| i.1 == Point::Ingress),
        inputs.iter().position(|i| i.1 == Point::Egress),
    );
    let with_router = matches!(router_pair, (Some(_), Some(_)));

    // The sample grid, and the rows it makes, refused before anything is built.
    let span = (disc.t_last as i128 - time_zero as i128).max(0);
    let n_samples = (span + interval as i128 - 1) / interval as i128;
    let series = n_flows as i128 + with_router as i128;
    let rows = n_samples.max(1) * series;
    if rows > MAX_ROWS as i128 {
        let fit = (span * series + MAX_ROWS as i128 - 1) / MAX_ROWS as i128; // the shortest interval that fits
        let fit = if fit < 1_000 {
            format!("{fit}ns")
        } else if fit < 1_000_000 {
            format!("{}us", (fit + 999) / 1_000)
        } else {
            format!("{}ms", (fit + 999_999) / 1_000_000)
        };
        return Err(AnalyzeError(format!(
            "the captures end {:.0} s after time zero: {rows} rows ({n_flows} flow(s){}) are more than the limit of \
             {MAX_ROWS} (about 2 GB of memory): {n_samples} samples of {} ms per flow; give a longer interval: \
             --interval {fit} or longer fits",
            span as f64 / 1e9,
            if with_router { " and the router" } else { "" },
            interval as f64 / 1e6
        ))
        .into());
    }
    let n_samples = n_samples.max(1) as usize;
    let grid = |k: usize| time_zero + (k as i64 + 1) * interval;

    let rows = n_samples * n_flows;
    let nan = || vec![f64::NAN; rows];
    let mut fill = Filling {
        flows: n_flows,
        sent_b: nan(),
        sent_s: nan(),
        retr: nan(),
        rtt: nan(),
        minr: nan(),
        infl: nan(),
        deliv: nan(),
    };
    // The receiver's in-order payload where it was captured (and its data found), else the
    // sender's cumulative ACKs.
    let from_receiver: Vec<bool> = (0..n_flows).map(|fl| disc.receiver_base[fl].is_some()).collect();
    for fi in 0..inputs.len() {
        let senders: Vec<usize> =
            (0..n_flows).filter(|&fl| conns[fl].sender_file == Some(fi) && disc.sender_base[fl].is_some()).collect();
        let receivers: Vec<usize> =
            (0..n_flows).filter(|&fl| conns[fl].receiver_file == Some(fi) && disc.receiver_base[fl].is_some()).collect();
        if senders.is_empty() && receivers.is_empty() {
            continue;
        }
        let mut snd: HashMap<usize, SenderRun> = HashMap::new();
        let mut rcv: HashMap<usize, (Unwrap, ReceiverView, usize)> = HashMap::new();
        let start = |snd: &mut HashMap<usize, SenderRun>, rcv: &mut HashMap<usize, (Unwrap, ReceiverView, usize)>| {
            snd.clear();
            rcv.clear();
            for &fl in &senders {
                let b = disc.sender_base[fl].unwrap_or(0);
                snd.insert(fl, SenderRun {
                    seq: Unwrap::new(b),
                    ackn: Unwrap::new(b),
                    v: SenderView::default(),
                    started: false,
                    k: 0,
                    prev: (0.0, 0),
                });
            }
            for &fl in &receivers {
                rcv.insert(fl, (Unwrap::new(disc.receiver_base[fl].unwrap_or(0)), ReceiverView::default(), 0));
            }
        };
        start(&mut snd, &mut rcv);
        let state = std::cell::RefCell::new((snd, rcv, &mut fill));
        let mut sacks: Vec<(i64, i64)> = Vec::with_capacity(4);
        let flow_of = &disc.flow_of;
        each_packet(
            &inputs[fi].0,
            &mut disc.dec,
            disc.whole[fi],
            check,
            &mut || {
                let (snd, rcv, _) = &mut *state.borrow_mut();
                start(snd, rcv);
            },
            &mut |p: &Packet| {
                let fl = flow_of[p.conn as usize];
                if fl == u32::MAX {
                    return;
                }
                let fl = fl as usize;
                let up = conns[fl].data_up;
                let (snd, rcv, fill) = &mut *state.borrow_mut();
                if let Some(r) = snd.get_mut(&fl) {
                    while r.k < n_samples && grid(r.k) <= p.t {
                        let k = r.k;
                        fill.emit(fl, k, r, !from_receiver[fl]);
                        r.k += 1;
                    }
                    if !p.syn {
                        if p.up == up && p.payload > 0 {
                            r.started = true;
                            let s = r.seq.rel(p.seq);
                            if p.ts {
                                r.v.tsval(p.t, p.tsval);
                            }
                            r.v.data(p.t, s, s + p.payload as i64, conns[fl].mss);
                        } else if p.up != up && p.has_ack && r.started {
                            let a = r.ackn.rel(p.ack);
                            sacks.clear();
                            for &(l, rr) in &p.sacks[..p.n_sacks as usize] {
                                let l = a + (l.wrapping_sub(p.ack) as i32 as i64);
                                let rr = a + (rr.wrapping_sub(p.ack) as i32 as i64);
                                sacks.push((l, rr));
                            }
                            r.v.ack(p.t, a, &sacks, p.tsecr);
                        }
                    }
                }
                if let Some((seq, v, k)) = rcv.get_mut(&fl) {
                    while *k < n_samples && grid(*k) <= p.t {
                        fill.deliv[*k * n_flows + fl] = v.nxt.max(0) as f64;
                        *k += 1;
                    }
                    if p.up == up && p.payload > 0 && !p.syn {
                        let s = seq.rel(p.seq);
                        v.data(s, s + p.payload as i64);
                    }
                }
            },
        )?;
        let (mut snd, mut rcv, fill) = state.into_inner();
        for (&fl, r) in snd.iter_mut() {
            while r.k < n_samples {
                let k = r.k;
                fill.emit(fl, k, r, !from_receiver[fl]);
                r.k += 1;
            }
        }
        for (&fl, (_, v, k)) in rcv.iter_mut() {
            while *k < n_samples {
                fill.deliv[*k * n_flows + fl] = v.nxt.max(0) as f64;
                *k += 1;
            }
        }
    }
    // Rows ordered by time, then flow, as the simulator writes them.
    let dt = interval as f64 / 1e9;
    let rate = |x: &[f64], i: usize| {
        let prev = if i < n_flows { 0.0 } else { x[i - n_flows] };
        let prev = if prev.is_nan() { 0.0 } else { prev };
        (x[i] - prev) * 8.0 / dt
    };
    let cols = FlowColumns {
        time_s: (0..rows).map(|i| (grid(i / n_flows) - time_zero) as f64 / 1e9).collect(),
        flow: (0..rows).map(|i| (i % n_flows) as u32).collect(),
        goodput_bps: (0..rows).map(|i| rate(&fill.deliv, i)).collect(),
        send_rate_bps: (0..rows).map(|i| rate(&fill.sent_b, i)).collect(),
        inflight_pkts: (0..rows).map(|i| (fill.infl[i] / conns[i % n_flows].mss as f64).ceil()).collect(),
        delivered_bytes: fill.deliv,
        sent_bytes: fill.sent_b,
        rtt_ms: fill.rtt,
        min_rtt_ms: fill.minr,
        inflight_bytes: fill.infl,
        sent_segs: fill.sent_s,
        retrans_segs: fill.retr,
    };

    let router = match router_pair {
        (Some(i), Some(e)) => Some(router_series(inputs, i, e, &mut disc, n_samples, interval, arrival_order, check)?),
        _ => None,
    };
    Ok(Analysis {
        files: disc.files,
        connections: disc.connections,
        idle_connections: disc.idle,
        time_zero,
        flows: cols,
        router,
    })
}

/// An ingress packet not yet known to have left or been dropped.
struct Waiting {
    key: (u32, u32, u16, u32),
    /// Its place among all the router's arrivals.
    order: u64,
    bucket: usize,
    ip_len: u32,
}

/// The bottleneck from its ingress and egress captures (see the module documentation), both
/// streamed: each egress packet is matched among the ingress packets captured up to its own
/// time, and only packets still unaccounted for (queued, or of a connection with nothing
/// after them at the egress) are held. Counts are kept per sample interval (a drop is found
/// late, and counted at its arrival) and summed at the end. With `arrival_order`, a departure
/// also settles every arrival of any connection before its own.
#[allow(clippy::too_many_arguments)]
fn router_series(
    inputs: &[(String, Point)],
    ing_i: usize,
    egr_i: usize,
    disc: &mut Discovery,
    n: usize,
    interval: i64,
    arrival_order: bool,
    check: &mut dyn FnMut() -> bool,
) -> Result<RouterColumns, Stop> {
    type Key = (u32, u32, u16, u32);
    let key = |p: &Packet| -> Key { (p.conn, p.seq, p.ip_id, p.ip_len) };
    let t0 = disc.time_zero;
    // the first sample that counts a packet at t (sample k counts those before t0 + (k+1) interval)
    let bucket = |t: i64| -> usize {
        let d = t as i128 - t0 as i128;
        if d < interval as i128 { 0 } else { (d / interval as i128).min(n as i128) as usize }
    };
    let (ing_path, egr_path) = (&inputs[ing_i].0, &inputs[egr_i].0);
    let dec = &mut disc.dec;
    let mut ing = Stream::open(ing_path, dec, disc.whole[ing_i])?;
    let mut egr = Stream::open(egr_path, dec, disc.whole[egr_i])?;
    // per sample: arrivals (packets, bytes), drops by arrival (packets, bytes), departures
    let mut arr = vec![(0u64, 0u64); n + 1];
    let mut drop = vec![(0u64, 0u64); n + 1];
    let mut dep = vec![(0u64, 0u64, 0u64); n + 1];
    // Each connection's waiting arrivals in order (the front's rank is `next`) and the number
    // it has had; per key, the ranks of the waiting arrivals with that key. Queue disciplines
    // that interleave flows (fq, fq_codel, dualpi2) keep each flow's order only.
    struct Conn {
        next: usize,
        count: usize,
        waiting: VecDeque<Waiting>,
    }
    let mut of_conn: HashMap<u32, Conn> = HashMap::new();
    let mut at: HashMap<Key, VecDeque<usize>> = HashMap::new();
    let mut unmatched = 0u64;
    let mut pending: Option<Packet> = None; // the next ingress packet, read ahead
    let mut ing_done = false;
    let mut seen = 0u64;
    let next_of = |s: &mut Stream, dec: &mut Decoder| -> Result<Option<Packet>, Stop> {
        match s.next(dec)? {
            Next::Packet(p) => Ok(Some(p)),
            Next::End => Ok(None),
            // pass 1 read every file in order or found it must be read whole
            Next::OutOfOrder => Err(AnalyzeError(format!("{}: changed while it was read", s.path)).into()),
        }
    };
    // With `arrival_order`: every kept arrival in order, as (order, connection, rank).
    let mut arrivals: VecDeque<(u64, u32, usize)> = VecDeque::new();
    let mut n_arrived = 0u64;
    let mut arrive = |p: &Packet, arr: &mut Vec<(u64, u64)>, keep: bool, of_conn: &mut HashMap<u32, Conn>, at: &mut HashMap<Key, VecDeque<usize>>, arrivals: &mut VecDeque<(u64, u32, usize)>| {
        let b = bucket(p.t);
        arr[b].0 += 1;
        arr[b].1 += p.ip_len as u64;
        if keep {
            let c = of_conn.entry(p.conn).or_insert_with(|| Conn { next: 0, count: 0, waiting: VecDeque::new() });
            at.entry(key(p)).or_default().push_back(c.count);
            c.waiting.push_back(Waiting { key: key(p), order: n_arrived, bucket: b, ip_len: p.ip_len });
            if arrival_order {
                arrivals.push_back((n_arrived, p.conn, c.count));
            }
            c.count += 1;
            n_arrived += 1;
        }
    };
    // A waiting arrival found dropped: counted at its arrival, and its key's ranks up to
    // `settled` (every earlier rank of its connection is settled) forgotten.
    let dropped = |w: &Waiting, settled: usize, drop: &mut Vec<(u64, u64)>, at: &mut HashMap<Key, VecDeque<usize>>| {
        drop[w.bucket].0 += 1;
        drop[w.bucket].1 += w.ip_len as u64;
        if let Some(q) = at.get_mut(&w.key) {
            while q.front().is_some_and(|&r| r <= settled) {
                q.pop_front();
            }
            if q.is_empty() {
                at.remove(&w.key);
            }
        }
    };
    while let Some(e) = next_of(&mut egr, dec)? {
        seen += 1;
        if seen.is_multiple_of(CHECK_EVERY) && !check() {
            return Err(Stop::Stopped);
        }
        // every ingress packet captured up to this departure has arrived
        loop {
            if pending.is_none() && !ing_done {
                pending = next_of(&mut ing, dec)?;
                ing_done = pending.is_none();
            }
            match pending {
                Some(p) if p.t <= e.t => {
                    arrive(&p, &mut arr, true, &mut of_conn, &mut at, &mut arrivals);
                    pending = None;
                }
                _ => break,
            }
        }
        let k = key(&e);
        let j = match (of_conn.get(&e.conn), at.get_mut(&k)) {
            (Some(c), Some(q)) => {
                while q.front().is_some_and(|&j| j < c.next) {
                    q.pop_front();
                }
                q.front().copied()
            }
            _ => None,
        };
        let Some(j) = j else {
            unmatched += 1;
            continue;
        };
        let c = of_conn.get_mut(&e.conn).expect("an arrival of the connection");
        // the connection's arrivals skipped over never left: dropped
        let skipped = j - c.next;
        let order = c.waiting[skipped].order;
        for w in c.waiting.drain(..=skipped).take(skipped) {
            dropped(&w, j, &mut drop, &mut at);
        }
        c.next = j + 1;
        if let Some(q) = at.get_mut(&k) {
            while q.front().is_some_and(|&r| r <= j) {
                q.pop_front();
            }
            if q.is_empty() {
                at.remove(&k);
            }
        }
        // in arrival order, every other connection's earlier arrival still waiting never left
        while arrivals.front().is_some_and(|&(o, _, _)| o < order) {
            let (_, conn, rank) = arrivals.pop_front().expect("a front");
            let c = of_conn.get_mut(&conn).expect("an arrival of the connection");
            if rank < c.next {
                continue; // left, or already found dropped
            }
            let w = c.waiting.pop_front().expect("the connection's first waiting arrival");
            c.next = rank + 1;
            dropped(&w, rank, &mut drop, &mut at);
        }
        if arrivals.front().is_some_and(|&(o, _, _)| o == order) {
            arrivals.pop_front();
        }
        let b = bucket(e.t);
        dep[b].0 += 1;
        dep[b].1 += e.ip_len as u64;
        dep[b].2 += e.payload as u64;
    }
    // arrivals after the last departure
    if let Some(p) = pending {
        arrive(&p, &mut arr, false, &mut of_conn, &mut at, &mut arrivals);
    }
    while !ing_done {
        match next_of(&mut ing, dec)? {
            Some(p) => {
                seen += 1;
                if seen.is_multiple_of(CHECK_EVERY) && !check() {
                    return Err(Stop::Stopped);
                }
                arrive(&p, &mut arr, false, &mut of_conn, &mut at, &mut arrivals)
            }
            None => ing_done = true,
        }
    }
    let mut r = RouterColumns { unmatched, ..Default::default() };
    let (mut a, mut a_b, mut d, mut d_b) = (0u64, 0u64, 0u64, 0u64);
    let (mut l, mut l_b, mut l_pl) = (0u64, 0u64, 0u64);
    for k in 0..n {
        a += arr[k].0;
        a_b += arr[k].1;
        d += drop[k].0;
        d_b += drop[k].1;
        l += dep[k].0;
        l_b += dep[k].1;
        l_pl += dep[k].2;
        r.time_s.push(((t0 + (k as i64 + 1) * interval) - t0) as f64 / 1e9);
        r.arrivals_pkts.push(a as f64);
        r.arrival_bytes.push(a_b as f64);
        r.departures_pkts.push(l as f64);
        r.departed_bytes.push(l_b as f64);
        r.departed_payload_bytes.push(l_pl as f64);
        r.drops_overflow.push(d as f64);
        r.queue_pkts.push(a.saturating_sub(d + l) as f64);
        r.queue_bytes.push(a_b.saturating_sub(d_b + l_b) as f64);
    }
    Ok(r)
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
    match trace_checked(inputs, flow, time_zero, &mut || true) {
        Ok(t) => Ok(t),
        Err(Stop::Error(e)) => Err(e),
        Err(Stop::Stopped) => Err(AnalyzeError("stopped".into())),
    }
}

/// [`trace`], asking `check` now and then whether to go on (as [`analyze_checked`]).
pub fn trace_checked(
    inputs: &[(String, Point)],
    flow: u32,
    time_zero: Option<i64>,
    check: &mut dyn FnMut() -> bool,
) -> Result<Trace, Stop> {
    let mut disc = discover(inputs, time_zero, check)?;
    let n = disc.connections.len();
    let c = disc.connections.get(flow as usize).cloned().ok_or_else(|| {
        AnalyzeError(format!("no flow {flow} in the captures: they hold {n} flow(s), 0 to {}", n.saturating_sub(1)))
    })?;
    let sf = c.sender_file.ok_or_else(|| AnalyzeError(format!("flow {flow}: no capture on its sender's side")))?;
    let base = disc.sender_base[flow as usize].unwrap_or(0);
    let mut received: HashMap<(u32, u16, u32), u32> = HashMap::new();
    if let Some(rf) = c.receiver_file {
        let received = std::cell::RefCell::new(&mut received);
        each_packet(&inputs[rf].0, &mut disc.dec, disc.whole[rf], check, &mut || received.borrow_mut().clear(), &mut |p| {
            if p.conn == c.conn && p.up == c.data_up && p.payload > 0 {
                *received.borrow_mut().entry((p.seq, p.ip_id, p.payload)).or_default() += 1;
            }
        })?;
    }
    let time_zero = disc.time_zero;
    let start = || (Trace { drops_known: c.receiver_file.is_some(), ..Default::default() }, Unwrap::new(base), Unwrap::new(base), 0i64);
    let state = std::cell::RefCell::new(start());
    let received = std::cell::RefCell::new(received);
    let fresh = received.borrow().clone();
    each_packet(
        &inputs[sf].0,
        &mut disc.dec,
        disc.whole[sf],
        check,
        &mut || {
            *state.borrow_mut() = start();
            *received.borrow_mut() = fresh.clone();
        },
        &mut |p| {
            if p.conn != c.conn {
                return;
            }
            let (t, seq, ackn, high) = &mut *state.borrow_mut();
            let at = p.t - time_zero;
            if p.syn {
                return;
            }
            if p.up == c.data_up && p.payload > 0 {
                let s = seq.rel(p.seq);
                let e = s + p.payload as i64;
                t.data_t.push(at);
                t.data_start.push(s);
                t.data_end.push(e);
                t.data_retrans.push(s < *high);
                *high = (*high).max(e);
                if t.drops_known {
                    match received.borrow_mut().get_mut(&(p.seq, p.ip_id, p.payload)) {
                        Some(k) if *k > 0 => *k -= 1,
                        _ => {
                            t.drop_t.push(at);
                            t.drop_start.push(s);
                            t.drop_end.push(e);
                        }
                    }
                }
            } else if p.up != c.data_up && p.has_ack && *high > 0 {
                let a = ackn.rel(p.ack);
                t.ack_t.push(at);
                t.ack.push(a);
                for &(l, r) in &p.sacks[..p.n_sacks as usize] {
                    t.sack_t.push(at);
                    t.sack_start.push(a + (l.wrapping_sub(p.ack) as i32 as i64));
                    t.sack_end.push(a + (r.wrapping_sub(p.ack) as i32 as i64));
                }
            }
        },
    )?;
    Ok(state.into_inner().0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pcap (nanosecond) of Ethernet frames: one connection's data segments from
    /// 10.0.0.1:1000, TTL 64, and their ACKs through a router (TTL 60), in `order`.
    fn capture(order: &[usize]) -> Vec<u8> {
        let mut frames = vec![];
        for i in 0..40u32 {
            let b = etherparse::PacketBuilder::ethernet2([1; 6], [2; 6]).ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64).tcp(1000, 80, 1000 + i * 100, 65535).ack(1);
            let mut f = vec![];
            b.write(&mut f, &[7u8; 100]).unwrap();
            frames.push((i as i64 * 1_000_000, f));
            let b = etherparse::PacketBuilder::ethernet2([2; 6], [1; 6]).ipv4([10, 0, 0, 2], [10, 0, 0, 1], 60).tcp(80, 1000, 1, 65535).ack(1000 + (i + 1) * 100);
            let mut f = vec![];
            b.write(&mut f, &[]).unwrap();
            frames.push((i as i64 * 1_000_000 + 500_000, f));
        }
        let mut hdr = vec![];
        hdr.extend_from_slice(&0xa1b23c4du32.to_le_bytes());
        hdr.extend_from_slice(&2u16.to_le_bytes());
        hdr.extend_from_slice(&4u16.to_le_bytes());
        hdr.extend_from_slice(&[0; 8]);
        hdr.extend_from_slice(&65535u32.to_le_bytes());
        hdr.extend_from_slice(&1u32.to_le_bytes());
        for &i in order {
            let (t, f) = &frames[i];
            hdr.extend_from_slice(&((t / 1_000_000_000) as u32).to_le_bytes());
            hdr.extend_from_slice(&((t % 1_000_000_000) as u32).to_le_bytes());
            hdr.extend_from_slice(&(f.len() as u32).to_le_bytes());
            hdr.extend_from_slice(&(f.len() as u32).to_le_bytes());
            hdr.extend_from_slice(f);
        }
        hdr
    }

    #[test]
    fn a_capture_out_of_time_order_is_read_in_order() {
        let dir = std::env::temp_dir().join(format!("ccsim-order-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let sorted: Vec<usize> = (0..80).collect();
        // the second half first: out of order by 40 packets, beyond a window of 8
        let shuffled: Vec<usize> = (40..80).chain(0..40).collect();
        let (a, b) = (dir.join("sorted.pcap"), dir.join("shuffled.pcap"));
        std::fs::write(&a, capture(&sorted)).unwrap();
        std::fs::write(&b, capture(&shuffled)).unwrap();
        let run = |p: &std::path::Path| analyze(&[(p.to_string_lossy().into_owned(), Point::Host)], 2_000_000, None, false).unwrap();
        let bits = |x: &[f64]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        let want = run(&a);
        assert_eq!(want.flows.sent_bytes.last(), Some(&4000.0));
        WINDOW.store(8, std::sync::atomic::Ordering::Relaxed);
        let mut dec = Decoder { conns: HashMap::new(), keys: vec![], last: None };
        let times = std::cell::RefCell::new(vec![]);
        let (fd, whole) = each_packet(&b.to_string_lossy(), &mut dec, false, &mut || true, &mut || times.borrow_mut().clear(),
                                      &mut |p| times.borrow_mut().push(p.t))
        .unwrap();
        let times = times.into_inner();
        let got = run(&b);
        WINDOW.store(REORDER_WINDOW, std::sync::atomic::Ordering::Relaxed);
        assert!(whole, "read whole once found out of order");
        assert_eq!(fd.tcp_packets, 80);
        assert!(times.windows(2).all(|w| w[0] <= w[1]) && times.len() == 80);
        for (x, y) in [
            (&want.flows.sent_bytes, &got.flows.sent_bytes),
            (&want.flows.delivered_bytes, &got.flows.delivered_bytes),
            (&want.flows.rtt_ms, &got.flows.rtt_ms),
            (&want.flows.inflight_bytes, &got.flows.inflight_bytes),
        ] {
            assert_eq!(bits(x), bits(y));
        }
        // within the window: streamed, the same
        let mut dec = Decoder { conns: HashMap::new(), keys: vec![], last: None };
        let (_, whole) = each_packet(&b.to_string_lossy(), &mut dec, false, &mut || true, &mut || {}, &mut |_| {}).unwrap();
        assert!(!whole);
        assert_eq!(bits(&run(&b).flows.rtt_ms), bits(&want.flows.rtt_ms));
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn capture_columns_are_columns_of_the_result_schema() {
        use crate::telemetry::{FlowSeries, RouterSeries};
        let names = |cols: Vec<crate::telemetry::Column>| cols.into_iter().map(|c| c.name).collect::<Vec<_>>();
        let (flows, router) = (names(FlowSeries::columns()), names(RouterSeries::columns()));
        for n in FlowColumns::NAMES {
            assert!(flows.iter().any(|c| c == n), "{n} is not a flows column");
        }
        for n in RouterColumns::NAMES {
            assert!(router.iter().any(|c| c == n), "{n} is not a router column");
        }
        let got = RouterColumns { drops_overflow: vec![1.0], ..Default::default() }.into_columns();
        assert_eq!(got.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), RouterColumns::NAMES);
    }

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
        assert_eq!(v.ack(100, 1000, &[], 0), None);
        // SACK of the third: a sample from its send time
        assert_eq!(v.ack(110, 1000, &[(2000, 3000)], 0), Some(90));
        assert_eq!(v.sacked, 1000);
        // cumulative ACK over the second (never retransmitted) and the SACKed third: the
        // oldest newly ACKed that was neither retransmitted nor SACKed gives the sample
        assert_eq!(v.ack(120, 3000, &[], 0), Some(110));
        assert_eq!((v.sacked, v.una, v.nxt), (0, 3000, 3000));
        assert_eq!(v.min_rtt, 90);
    }

    /// An ACK that covers a retransmission gives no sample from its timing even for the
    /// never-retransmitted data it also covers (Karn for the whole ACK, `FLAG_RETRANS_DATA_ACKED`);
    /// when it moves snd_una, its echoed timestamp gives one in whole milliseconds.
    #[test]
    fn an_ack_over_a_retransmission_samples_only_its_timestamp() {
        const MS: i64 = 1_000_000;
        let run = |tsecr: u32| {
            let mut v = SenderView::default();
            v.tsval(0, 5_000); // the sender's TS clock reads 5,000 at capture time 0
            v.data(0, 0, 1000, 1000);
            v.data(10 * MS, 1000, 2000, 1000);
            v.data(300 * MS, 0, 1000, 1000); // the first, retransmitted
            v.ack(340 * MS, 2000, &[], tsecr)
        };
        assert_eq!(run(0), None, "no timestamp: no sample");
        // echoing the retransmission's TSval (5,300) at 5,340: 40 ms
        assert_eq!(run(5_300), Some(40 * MS));
    }

    #[test]
    fn partial_acks_split_ranges() {
        let mut v = SenderView::default();
        v.data(0, 0, 3000, 1000); // a 3-segment super-packet (TSO as captured)
        assert_eq!(v.sent_segs, 3);
        assert_eq!(v.ack(40, 1000, &[], 0), Some(40));
        assert_eq!(v.ranges.len(), 1);
        assert_eq!(v.ranges.keys().next(), Some(&1000));
        assert_eq!(v.ack(45, 3000, &[], 0), Some(45));
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
