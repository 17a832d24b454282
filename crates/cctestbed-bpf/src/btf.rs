//! The object's own BTF (`.BTF`) and its CO-RE relocation records (`.BTF.ext`), parsed with
//! every read bounds-checked. Only what the loader uses is kept: names, struct/union members
//! (with bit-field sizes), arrays, int encodings, the modifiers and typedefs to skip, and enums.

use crate::elf::{cstr_at, u16_at, u32_at};
use crate::LoadError;

pub const KIND_INT: u32 = 1;
pub const KIND_PTR: u32 = 2;
pub const KIND_ARRAY: u32 = 3;
pub const KIND_STRUCT: u32 = 4;
pub const KIND_UNION: u32 = 5;
pub const KIND_ENUM: u32 = 6;
pub const KIND_TYPEDEF: u32 = 8;
pub const KIND_VOLATILE: u32 = 9;
pub const KIND_CONST: u32 = 10;
pub const KIND_RESTRICT: u32 = 11;
pub const KIND_TYPE_TAG: u32 = 18;
pub const KIND_ENUM64: u32 = 19;

/// Longest chain of typedefs/modifiers/nesting followed before giving up (a cycle in untrusted
/// BTF must not hang or overflow the stack).
pub const MAX_DEPTH: usize = 64;

#[derive(Clone, Debug, Default)]
pub struct Member {
    pub name: String,
    pub ty: u32,
    pub bit_offset: u32,
    /// Non-zero for a bit field.
    pub bit_size: u32,
}

#[derive(Clone, Debug, Default)]
pub struct Type {
    pub kind: u32,
    pub name: String,
    /// `size` for int/struct/union/enum, the referenced type for ptr/typedef/modifiers.
    pub size_or_type: u32,
    pub members: Vec<Member>,
    /// Arrays: element type and count.
    pub array: Option<(u32, u32)>,
    /// Ints: signedness.
    pub signed: bool,
}

#[derive(Debug, Default)]
pub struct Btf {
    /// Index 0 is `void`.
    pub types: Vec<Type>,
}

fn err(msg: impl Into<String>) -> LoadError {
    LoadError(msg.into())
}

impl Btf {
    pub fn parse(b: &[u8]) -> Result<Btf, LoadError> {
        let bad = || err("malformed .BTF section");
        if u16_at(b, 0) != Some(0xeb9f) {
            return Err(err(".BTF section has a bad magic number"));
        }
        let hdr_len = u32_at(b, 4).ok_or_else(bad)? as usize;
        let type_off = u32_at(b, 8).ok_or_else(bad)? as usize;
        let type_len = u32_at(b, 12).ok_or_else(bad)? as usize;
        let str_off = u32_at(b, 16).ok_or_else(bad)? as usize;
        let str_len = u32_at(b, 20).ok_or_else(bad)? as usize;
        let range = |off: usize, len: usize| -> Result<&[u8], LoadError> {
            let start = hdr_len.checked_add(off).ok_or_else(bad)?;
            b.get(start..start.checked_add(len).ok_or_else(bad)?).ok_or_else(bad)
        };
        let types_bytes = range(type_off, type_len)?;
        let strings = range(str_off, str_len)?;
        let name = |off: u32| cstr_at(strings, off as usize).unwrap_or_default();
        let mut types = vec![Type::default()];
        let mut p = 0usize;
        while p < types_bytes.len() {
            let rd = |o: usize| u32_at(types_bytes, p + o).ok_or_else(bad);
            let name_off = rd(0)?;
            let info = rd(4)?;
            let size_or_type = rd(8)?;
            let vlen = (info & 0xffff) as usize;
            let kind = (info >> 24) & 0x1f;
            let kind_flag = info >> 31 == 1;
            let mut t = Type { kind, name: name(name_off), size_or_type, ..Type::default() };
            p += 12;
            let rd = |o: usize| u32_at(types_bytes, p + o).ok_or_else(bad);
            let extra = match kind {
                KIND_INT => {
                    t.signed = rd(0)? >> 24 & 1 == 1;
                    4
                }
                KIND_ARRAY => {
                    t.array = Some((rd(0)?, rd(8)?));
                    12
                }
                KIND_STRUCT | KIND_UNION => {
                    for i in 0..vlen {
                        let off = rd(i * 12 + 8)?;
                        let (bit_offset, bit_size) = if kind_flag { (off & 0xff_ffff, off >> 24) } else { (off, 0) };
                        t.members.push(Member { name: name(rd(i * 12)?), ty: rd(i * 12 + 4)?, bit_offset, bit_size });
                    }
                    vlen * 12
                }
                KIND_ENUM => vlen * 8,
                13 => vlen * 8,  // FUNC_PROTO
                14 => 4,         // VAR
                15 => vlen * 12, // DATASEC
                17 => 4,         // DECL_TAG
                KIND_ENUM64 => vlen * 12,
                KIND_PTR | 7 | KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | 12 | 16 | KIND_TYPE_TAG => 0,
                k => return Err(err(format!(".BTF has a type of unknown kind {k}"))),
            };
            if p.checked_add(extra).is_none_or(|e| e > types_bytes.len()) {
                return Err(bad());
            }
            p += extra;
            types.push(t);
        }
        Ok(Btf { types })
    }

    pub fn get(&self, id: u32) -> Option<&Type> {
        self.types.get(id as usize)
    }

    /// `id` with typedefs and modifiers followed.
    pub fn skip_mods(&self, mut id: u32) -> Option<u32> {
        for _ in 0..MAX_DEPTH {
            let t = self.get(id)?;
            match t.kind {
                KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG => id = t.size_or_type,
                _ => return Some(id),
            }
        }
        None
    }

    /// The size in bytes of type `id`.
    pub fn size_of(&self, id: u32) -> Option<u64> {
        self.size_of_depth(id, 0)
    }

    fn size_of_depth(&self, id: u32, depth: usize) -> Option<u64> {
        if depth > MAX_DEPTH {
            return None;
        }
        let id = self.skip_mods(id)?;
        let t = self.get(id)?;
        match t.kind {
            KIND_INT | KIND_STRUCT | KIND_UNION | KIND_ENUM | KIND_ENUM64 | 16 => Some(t.size_or_type as u64),
            KIND_PTR => Some(8),
            KIND_ARRAY => {
                let (elem, n) = t.array?;
                self.size_of_depth(elem, depth + 1)?.checked_mul(n as u64)
            }
            _ => None,
        }
    }

    pub fn struct_by_name(&self, name: &str) -> Option<u32> {
        self.types
            .iter()
            .position(|t| (t.kind == KIND_STRUCT || t.kind == KIND_UNION) && t.name == name && !t.members.is_empty())
            .map(|i| i as u32)
    }
}

/// One CO-RE relocation record of `.BTF.ext`.
#[derive(Clone, Debug)]
pub struct CoreRelo {
    pub section: String,
    /// Byte offset of the instruction within its section.
    pub insn_off: u32,
    pub type_id: u32,
    pub access: String,
    pub kind: u32,
}

/// The CO-RE relocation records of a `.BTF.ext` section. Needs the `.BTF` string table, which
/// the records' names index.
pub fn parse_core_relos(ext: &[u8], btf_bytes: &[u8]) -> Result<Vec<CoreRelo>, LoadError> {
    let bad = || err("malformed .BTF.ext section");
    if u16_at(ext, 0) != Some(0xeb9f) {
        return Err(err(".BTF.ext section has a bad magic number"));
    }
    let hdr_len = u32_at(ext, 4).ok_or_else(bad)? as usize;
    if hdr_len < 32 {
        return Ok(Vec::new()); // no CO-RE records in this layout
    }
    let off = u32_at(ext, 24).ok_or_else(bad)? as usize;
    let len = u32_at(ext, 28).ok_or_else(bad)? as usize;
    let start = hdr_len.checked_add(off).ok_or_else(bad)?;
    let data = ext.get(start..start.checked_add(len).ok_or_else(bad)?).ok_or_else(bad)?;
    // the .BTF string table
    let str_start = (u32_at(btf_bytes, 4).ok_or_else(bad)? as usize).checked_add(u32_at(btf_bytes, 16).ok_or_else(bad)? as usize).ok_or_else(bad)?;
    let str_len = u32_at(btf_bytes, 20).ok_or_else(bad)? as usize;
    let strings = btf_bytes.get(str_start..str_start.checked_add(str_len).ok_or_else(bad)?).ok_or_else(bad)?;
    let name = |o: u32| cstr_at(strings, o as usize).ok_or_else(bad);
    let mut out = Vec::new();
    if data.is_empty() {
        return Ok(out);
    }
    let rec_size = u32_at(data, 0).ok_or_else(bad)? as usize;
    if rec_size < 16 {
        return Err(bad());
    }
    let mut p = 4usize;
    while p < data.len() {
        let section = name(u32_at(data, p).ok_or_else(bad)?)?;
        let n = u32_at(data, p + 4).ok_or_else(bad)? as usize;
        p += 8;
        for _ in 0..n {
            let r = data.get(p..p.checked_add(rec_size).ok_or_else(bad)?).ok_or_else(bad)?;
            out.push(CoreRelo {
                section: section.clone(),
                insn_off: u32_at(r, 0).ok_or_else(bad)?,
                type_id: u32_at(r, 4).ok_or_else(bad)?,
                access: name(u32_at(r, 8).ok_or_else(bad)?)?,
                kind: u32_at(r, 12).ok_or_else(bad)?,
            });
            p += rec_size;
        }
    }
    Ok(out)
}
