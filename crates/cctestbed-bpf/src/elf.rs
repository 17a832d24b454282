//! The sections, symbols and `SHT_REL` relocations of a 64-bit little-endian ELF relocatable
//! object, read with the `object` crate (its low-level ELF reader, which checks every offset and
//! size against the file and returns an error rather than panicking), into the plain tables the
//! loader works on. The byte readers below serve the hand-written BTF parser.

use object::elf::{FileHeader64, Rel64, SHT_NOBITS, SHT_NULL, SHT_REL, SHT_SYMTAB};
use object::read::elf::{FileHeader, Rel as _, SectionHeader as _, SectionTable, Sym as _};
use object::LittleEndian;

use crate::LoadError;

pub const EM_BPF: u16 = object::elf::EM_BPF;
pub const STT_SECTION: u8 = object::elf::STT_SECTION;
pub const SHN_UNDEF: u16 = object::elf::SHN_UNDEF;
pub const STB_WEAK: u8 = object::elf::STB_WEAK;

pub struct Section<'a> {
    pub name: String,
    pub kind: u32,
    /// The bytes (empty for `SHT_NOBITS`, see `size`).
    pub data: &'a [u8],
    /// Where `data` starts in the file.
    pub file_offset: u64,
    pub size: u64,
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
    /// The section headers, for the relocations.
    rels: SectionTable<'a, FileHeader64<LittleEndian>, &'a [u8]>,
    endian: LittleEndian,
    bytes: &'a [u8],
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

/// The NUL-terminated string at `off` of a string table.
pub(crate) fn cstr_at(b: &[u8], off: usize) -> Option<String> {
    let rest = b.get(off..)?;
    let end = rest.iter().position(|&c| c == 0)?;
    Some(String::from_utf8_lossy(&rest[..end]).into_owned())
}

fn bad(e: object::read::Error) -> LoadError {
    err(format!("malformed ELF file: {e}"))
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

impl<'a> Elf<'a> {
    pub fn parse(b: &'a [u8]) -> Result<Elf<'a>, LoadError> {
        if b.len() < 64 || &b[0..4] != b"\x7fELF" {
            return Err(err("not an ELF file"));
        }
        if b[4] != 2 || b[5] != 1 {
            return Err(err("not a 64-bit little-endian ELF file (BPF objects are ELF64 LE)"));
        }
        let header = FileHeader64::<LittleEndian>::parse(b).map_err(bad)?;
        let e = header.endian().map_err(bad)?;
        let machine = header.e_machine(e);
        if machine != EM_BPF {
            return Err(err(format!("ELF machine is {machine}, not EM_BPF ({EM_BPF})")));
        }
        let table = header.sections(e, b).map_err(bad)?;
        let mut sections = Vec::with_capacity(table.len());
        for (i, h) in table.iter().enumerate() {
            let kind = h.sh_type(e);
            let data = if kind == SHT_NOBITS || kind == SHT_NULL {
                &b[0..0]
            } else {
                h.data(e, b).map_err(|_| err(format!("ELF section {i} out of file")))?
            };
            sections.push(Section {
                name: table.section_name(e, h).map(lossy).unwrap_or_default(),
                kind,
                data,
                file_offset: h.sh_offset(e),
                size: h.sh_size(e),
            });
        }
        let mut symbols = Vec::new();
        if sections.iter().any(|s| s.kind == SHT_SYMTAB) {
            let symtab = table.symbols(e, b, SHT_SYMTAB).map_err(bad)?;
            for sym in symtab.iter() {
                symbols.push(Symbol {
                    name: symtab.symbol_name(e, sym).map(lossy).unwrap_or_default(),
                    kind: sym.st_type(),
                    bind: sym.st_bind(),
                    section: sym.st_shndx(e),
                    value: sym.st_value(e),
                    size: sym.st_size(e),
                });
            }
        }
        Ok(Elf { sections, symbols, rels: table, endian: e, bytes: b })
    }

    pub fn section_by_name(&self, name: &str) -> Option<(usize, &Section<'a>)> {
        self.sections.iter().enumerate().find(|(_, s)| s.name == name)
    }

    /// The relocations that apply to section `target`.
    pub fn relocations_for(&self, target: usize) -> Result<Vec<Rel>, LoadError> {
        let mut out = Vec::new();
        for (i, h) in self.rels.iter().enumerate() {
            if h.sh_type(self.endian) != SHT_REL || h.sh_info(self.endian) as usize != target {
                continue;
            }
            let name = self.sections.get(i).map_or("", |s| s.name.as_str());
            let rels: &[Rel64<LittleEndian>] = h.data_as_array(self.endian, self.bytes).map_err(|_| err(format!("relocation section {name} out of file")))?;
            for r in rels {
                let symbol = r.r_sym(self.endian) as usize;
                if symbol >= self.symbols.len() {
                    return Err(err(format!("relocation in {name} names symbol {symbol}, which does not exist")));
                }
                out.push(Rel { offset: r.r_offset(self.endian), symbol });
            }
        }
        Ok(out)
    }
}
