//! Batched frame I/O: a `PACKET_MMAP` receive ring and `sendmmsg` transmission.
//!
//! Receiving: a `TPACKET_V2` ring (`PACKET_RX_RING`) shared with the kernel. The kernel writes
//! each frame, its receive timestamp and its packet type into the next free slot and hands the
//! slot over (`TP_STATUS_USER`); the emulator reads slots in order and gives each back
//! (`TP_STATUS_KERNEL`), with no system call per frame. Version 2 and not 3: a `TPACKET_V3`
//! block reaches user space only when it is full or its retire timer fires (at least 1 ms), so
//! at low rates frames would be read up to a millisecond late, after the model had run past
//! their arrival; version 2 hands over every frame as soon as it is written, and `poll`
//! reports it.
//!
//! Sending: the frames due in one pass go out in one `sendmmsg` call per interface (each
//! message one frame), instead of one `send` each.

use std::io;

pub const PACKET_RX_RING: libc::c_int = 5;
pub const PACKET_VERSION: libc::c_int = 10;
pub const TPACKET_V2: libc::c_int = 1;
const TP_STATUS_KERNEL: u32 = 0;
const TP_STATUS_USER: u32 = 1;
/// `TPACKET_ALIGN(sizeof(struct tpacket2_hdr))`: where the `sockaddr_ll` starts.
const HDR2_LEN: usize = 32;

/// `struct tpacket2_hdr`.
#[repr(C)]
struct Tpacket2Hdr {
    tp_status: u32,
    tp_len: u32,
    tp_snaplen: u32,
    tp_mac: u16,
    tp_net: u16,
    tp_sec: u32,
    tp_nsec: u32,
    tp_vlan_tci: u16,
    tp_vlan_tpid: u16,
    tp_padding: [u8; 4],
}

/// `struct tpacket_req`.
#[repr(C)]
struct TpacketReq {
    tp_block_size: u32,
    tp_block_nr: u32,
    tp_frame_size: u32,
    tp_frame_nr: u32,
}

/// One frame read from the ring.
pub struct RxFrame<'a> {
    pub data: &'a [u8],
    /// The kernel's receive time, CLOCK_REALTIME ns.
    pub ts_realtime_ns: i64,
    pub pkttype: u8,
}

pub struct RxRing {
    map: *mut u8,
    map_len: usize,
    frame_size: usize,
    frame_nr: usize,
    next: std::cell::Cell<usize>,
}

impl RxRing {
    /// Sets `fd` (an AF_PACKET socket, before bind) up with a ring of `frame_nr` slots of
    /// `frame_size` bytes (a power of two, >= an MTU-sized frame plus the 32 + 20-byte header).
    pub fn new(fd: libc::c_int, frame_size: usize, frame_nr: usize) -> Result<Self, String> {
        let os = |what: &str| format!("{what}: {}", io::Error::last_os_error());
        let v: libc::c_int = TPACKET_V2;
        let rc = unsafe {
            libc::setsockopt(fd, libc::SOL_PACKET, PACKET_VERSION, &v as *const _ as *const libc::c_void, 4)
        };
        if rc < 0 {
            return Err(os("PACKET_VERSION"));
        }
        let block_size = 1usize << 22; // 4 MiB blocks, frame_size divides them
        let per_block = block_size / frame_size;
        let block_nr = frame_nr.div_ceil(per_block);
        let frame_nr = block_nr * per_block;
        let req = TpacketReq {
            tp_block_size: block_size as u32,
            tp_block_nr: block_nr as u32,
            tp_frame_size: frame_size as u32,
            tp_frame_nr: frame_nr as u32,
        };
        let rc = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_PACKET,
                PACKET_RX_RING,
                &req as *const _ as *const libc::c_void,
                std::mem::size_of::<TpacketReq>() as u32,
            )
        };
        if rc < 0 {
            return Err(os("PACKET_RX_RING"));
        }
        let map_len = block_size * block_nr;
        let map = unsafe {
            libc::mmap(std::ptr::null_mut(), map_len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0)
        };
        if map == libc::MAP_FAILED {
            return Err(os("mmap(PACKET_RX_RING)"));
        }
        Ok(RxRing { map: map as *mut u8, map_len, frame_size, frame_nr, next: std::cell::Cell::new(0) })
    }

    fn hdr(&self, i: usize) -> *mut Tpacket2Hdr {
        unsafe { self.map.add(i * self.frame_size) as *mut Tpacket2Hdr }
    }

    /// The next frame the kernel has handed over, if any: `f` sees it, then its slot goes back
    /// to the kernel. Returns `None` when the ring holds no frame for user space.
    pub fn next<R>(&self, f: impl FnOnce(RxFrame<'_>) -> R) -> Option<R> {
        let i = self.next.get();
        let h = self.hdr(i);
        let status = unsafe { std::ptr::read_volatile(&(*h).tp_status) };
        if status & TP_STATUS_USER == 0 {
            return None;
        }
        std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        let r = unsafe {
            let hd = &*h;
            let base = h as *const u8;
            let len = (hd.tp_snaplen as usize).min(self.frame_size - hd.tp_mac as usize);
            let data = std::slice::from_raw_parts(base.add(hd.tp_mac as usize), len);
            let sll = &*(base.add(HDR2_LEN) as *const libc::sockaddr_ll);
            let ts = hd.tp_sec as i64 * 1_000_000_000 + hd.tp_nsec as i64;
            f(RxFrame { data, ts_realtime_ns: ts, pkttype: sll.sll_pkttype })
        };
        std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
        unsafe { std::ptr::write_volatile(&mut (*h).tp_status, TP_STATUS_KERNEL) };
        self.next.set((i + 1) % self.frame_nr);
        Some(r)
    }
}

impl Drop for RxRing {
    fn drop(&mut self) {
        unsafe { libc::munmap(self.map as *mut libc::c_void, self.map_len) };
    }
}

/// Sends `frames` on `fd` (a bound AF_PACKET socket) with as few `sendmmsg` calls as it takes:
/// one, unless a frame is refused or the socket fills. Returns each frame's outcome in order
/// (true sent, false refused by the interface: ENOBUFS, dropped); fewer outcomes than frames
/// when the socket would block at the next one (retry it and those after it later). Err on
/// any other error.
pub fn send_batch(fd: libc::c_int, frames: &[&[u8]]) -> io::Result<Vec<bool>> {
    let mut out = Vec::with_capacity(frames.len());
    let mut iov: Vec<libc::iovec> =
        frames.iter().map(|f| libc::iovec { iov_base: f.as_ptr() as *mut libc::c_void, iov_len: f.len() }).collect();
    let mut msgs: Vec<libc::mmsghdr> = iov
        .iter_mut()
        .map(|v| {
            let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
            m.msg_hdr.msg_iov = v;
            m.msg_hdr.msg_iovlen = 1;
            m
        })
        .collect();
    while out.len() < frames.len() {
        let i = out.len();
        let n = unsafe {
            libc::sendmmsg(fd, msgs[i..].as_mut_ptr(), (frames.len() - i) as libc::c_uint, libc::MSG_DONTWAIT)
        };
        if n > 0 {
            out.extend(std::iter::repeat(true).take(n as usize));
            continue;
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::ENOBUFS) => out.push(false),
            Some(libc::EAGAIN) | Some(libc::ENOMEM) | Some(libc::EINTR) => return Ok(out),
            _ => return Err(e),
        }
    }
    Ok(out)
}
