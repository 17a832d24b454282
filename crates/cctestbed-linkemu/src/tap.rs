//! The router's capture points on the kernel's frames (`--capture-dir`): the bottleneck's
//! ingress (`rtr-in.pcap`: every forward IPv4 frame as it reaches the router, before random
//! loss and the queue, so dropped frames are in it) and egress (`rtr-out.pcap`: each frame as
//! the link starts sending it, i.e. as it leaves the queue), in the same format, with the same
//! names and at the same moments as the simulator's [`ccsim::capture::Recorder`] writes its
//! own. The frames are the real ones, cut to the trial's snap length; a frame the discipline
//! marks carries CE in its egress record. Timestamps are `CLOCK_REALTIME`, the clock tcpdump
//! stamps the hosts' captures with, so `cctestbed analyze` reads all of a trial's captures on
//! one clock.

use ccsim::capture::{CaptureConfig, PointFile};
use ccsim::time::Nanos;
use std::fs::File;
use std::io::{BufWriter, Write};

type Point = PointFile<BufWriter<File>>;

pub struct RouterTap {
    ingress: Option<Point>,
    egress: Option<Point>,
    snaplen: usize,
    /// `CLOCK_REALTIME` at trial time 0, once the trial has started.
    pub epoch_realtime: Nanos,
    /// The frame slot last seen entering service: a new one is a frame leaving the queue.
    pub in_service: Option<u32>,
    /// Frames written per point.
    pub frames: [u64; 2],
    /// The first write error (a full disk): the emulator stops on it rather than lose records.
    pub error: Option<String>,
}

impl RouterTap {
    /// The trial's router points in `dir`, or None when it asks for neither.
    pub fn open(dir: &str, cfg: &CaptureConfig) -> Result<Option<Self>, String> {
        if !cfg.ingress && !cfg.egress {
            return Ok(None);
        }
        let point = |on: bool, stem: &str| -> Result<Option<Point>, String> {
            if !on {
                return Ok(None);
            }
            let path = std::path::Path::new(dir).join(format!("{stem}.{}", cfg.format.extension()));
            let f = File::create(&path).map_err(|e| format!("--capture-dir: {}: {e}", path.display()))?;
            PointFile::to_sink(stem.into(), cfg, BufWriter::with_capacity(1 << 20, f)).map(Some)
        };
        Ok(Some(RouterTap {
            ingress: point(cfg.ingress, "rtr-in")?,
            egress: point(cfg.egress, "rtr-out")?,
            snaplen: cfg.snaplen as usize,
            epoch_realtime: 0,
            in_service: None,
            frames: [0; 2],
            error: None,
        }))
    }

    fn write(&mut self, egress: bool, t: Nanos, frame: &[u8]) {
        let (file, n) = if egress { (self.egress.as_mut(), 1) } else { (self.ingress.as_mut(), 0) };
        let Some(file) = file else { return };
        let keep = self.snaplen.min(frame.len());
        match file.write(self.epoch_realtime + t, &frame[..keep], frame.len() as u32) {
            Ok(()) => self.frames[n] += 1,
            Err(e) => {
                self.error.get_or_insert(e);
            }
        }
    }

    /// A frame reaches the router at trial time `t`.
    pub fn ingress(&mut self, t: Nanos, frame: &[u8]) {
        self.write(false, t, frame);
    }

    /// A frame starts on the link at trial time `t`.
    pub fn egress(&mut self, t: Nanos, frame: &[u8]) {
        self.write(true, t, frame);
    }

    /// Flushes both files.
    pub fn finish(self) -> Result<(), String> {
        for p in [self.ingress, self.egress].into_iter().flatten() {
            let name = p.name().to_string();
            p.into_sink().flush().map_err(|e| format!("{name}: {e}"))?;
        }
        Ok(())
    }
}
