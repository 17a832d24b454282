//! A minimal, bounds-checked reader of 64-bit little-endian ELF relocatable objects: sections,
//! symbols and `SHT_REL` relocations, which is all a BPF object needs. Written here rather than
//! taken from a crate because it is small and every read of untrusted input must fail with an
//! error instead of panicking.

use crate::LoadError;

pub const EM_BPF: u16 = 247;
const SHT_SYMTAB: u32 = 2;
const SHT_REL: u32 = 9;
const SHT_NOBITS: u32 = 8;
pub const STT_SECTION: u8 = 3;
pub const SHN_UNDEF: u16 = 0;
pub const STB_WEAK: u8 = 2;

pub struct Section<'a> {
    pub name: String,
    pub kind: u32,
    /// The bytes (empty for `SHT_NOBITS`, see `size`).
    pub data: &'a [u8],
    /// Where `data` starts in the file.
    pub file_offset: u64,
    pub size: u64,
    pub info: u32,
    pub link: u32,
}

#[derive(Clone, Debug)]
pub struct Symbol {
    pub name: String,
    pub value: u64,
    pub size: u64,
    pub kind: u8,
    pub bind: u8,
    pub section: u16,
}

#[derive(Clone, Copy, Debug)]
pub struct Rel {
    pub offset: u64,
    pub symbol: usize,
}

pub struct Elf<'a> {
    pub sections: Vec<Section<'a>>,
    pub symbols: Vec<Symbol>,
}

fn err(msg: impl Into<String>) -> LoadError {
    LoadError(msg.into())
}

pub(crate) fn u16_at(b: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(off..off.checked_add(2)?)?.try_into().ok()?))
}
pub(crate) fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(off..off.checked_add(4)?)?.try_into().ok()?))
}
pub(crate) fn u64_at(b: &[u8], off: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(off..off.checked_add(8)?)?.try_into().ok()?))
}

/// The NUL-terminated string at `off` of a string table.
pub(crate) fn cstr_at(b: &[u8], off: usize) -> Option<String> {
    let rest = b.get(off..)?;
    let end = rest.iter().position(|&c| c == 0)?;
    Some(String::from_utf8_lossy(&rest[..end]).into_owned())
}

fn slice(b: &[u8], off: u64, len: u64) -> Option<&[u8]> {
    let off = usize::try_from(off).ok()?;
    let len = usize::try_from(len).ok()?;
    b.get(off..off.checked_add(len)?)
}

impl<'a> Elf<'a> {
    pub fn parse(b: &'a [u8]) -> Result<Elf<'a>, LoadError> {
        if b.len() < 64 || &b[0..4] != b"\x7fELF" {
            return Err(err("not an ELF file"));
        }
        if b[4] != 2 || b[5] != 1 {
            return Err(err("not a 64-bit little-endian ELF file (BPF objects are ELF64 LE)"));
        }
        let machine = u16_at(b, 18).unwrap_or(0);
        if machine != EM_BPF {
            return Err(err(format!("ELF machine is {machine}, not EM_BPF ({EM_BPF})")));
        }
        let shoff = u64_at(b, 40).unwrap_or(0);
        let shentsize = u16_at(b, 58).unwrap_or(0) as u64;
        let shnum = u16_at(b, 60).unwrap_or(0) as u64;
        let shstrndx = u16_at(b, 62).unwrap_or(0) as usize;
        if shentsize < 64 {
            return Err(err("ELF section header size is too small"));
        }
        let mut raw = Vec::new();
        for i in 0..shnum {
            let h = slice(b, shoff.saturating_add(i * shentsize), 64).ok_or_else(|| err("ELF section header out of file"))?;
            let name = u32_at(h, 0).unwrap_or(0);
            let kind = u32_at(h, 4).unwrap_or(0);
            let offset = u64_at(h, 24).unwrap_or(0);
            let size = u64_at(h, 32).unwrap_or(0);
            let link = u32_at(h, 40).unwrap_or(0);
            let info = u32_at(h, 44).unwrap_or(0);
            let data = if kind == SHT_NOBITS || kind == 0 {
                &b[0..0]
            } else {
                slice(b, offset, size).ok_or_else(|| err(format!("ELF section {i} out of file")))?
            };
            raw.push((name, kind, data, offset, size, info, link));
        }
        let shstr = raw.get(shstrndx).map(|r| r.2).ok_or_else(|| err("ELF has no section name table"))?;
        let sections: Vec<Section> = raw
            .into_iter()
            .map(|(name, kind, data, file_offset, size, info, link)| Section {
                name: cstr_at(shstr, name as usize).unwrap_or_default(),
                kind,
                data,
                file_offset,
                size,
                info,
                link,
            })
            .collect();
        let mut symbols = Vec::new();
        if let Some(symtab) = sections.iter().find(|s| s.kind == SHT_SYMTAB) {
            let strtab = sections.get(symtab.link as usize).map(|s| s.data).unwrap_or(&[]);
            for e in symtab.data.chunks_exact(24) {
                let info = e[4];
                symbols.push(Symbol {
                    name: cstr_at(strtab, u32_at(e, 0).unwrap_or(0) as usize).unwrap_or_default(),
                    kind: info & 0xf,
                    bind: info >> 4,
                    section: u16_at(e, 6).unwrap_or(0),
                    value: u64_at(e, 8).unwrap_or(0),
                    size: u64_at(e, 16).unwrap_or(0),
                });
            }
        }
        Ok(Elf { sections, symbols })
    }

    pub fn section_by_name(&self, name: &str) -> Option<(usize, &Section<'a>)> {
        self.sections.iter().enumerate().find(|(_, s)| s.name == name)
    }

    /// The relocations that apply to section `target`.
    pub fn relocations_for(&self, target: usize) -> Result<Vec<Rel>, LoadError> {
        let mut out = Vec::new();
        for s in &self.sections {
            if s.kind != SHT_REL || s.info as usize != target {
                continue;
            }
            for e in s.data.chunks_exact(16) {
                let offset = u64_at(e, 0).unwrap_or(0);
                let info = u64_at(e, 8).unwrap_or(0);
                let symbol = (info >> 32) as usize;
                if symbol >= self.symbols.len() {
                    return Err(err(format!("relocation in {} names symbol {symbol}, which does not exist", s.name)));
                }
                out.push(Rel { offset, symbol });
            }
        }
        Ok(out)
    }
}
