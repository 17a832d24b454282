//! CO-RE relocation against the target BTF of [`crate::view`], done here rather than with
//! `aya-obj` (0.3.0, the registry's version): its `Object::parse` does not accept `struct_ops/`
//! program sections (they are listed as unsupported), its BTF struct types cannot be built
//! from outside the crate, and `Object::relocate_btf` does not report which target field each
//! instruction ended up addressing, which the loader needs to refuse stores to read-only
//! socket fields and to place the kernel's bit fields. The algorithm follows libbpf's
//! `bpf_core_calc_relo_insn` for field relocations: the local access string is walked in the
//! object's BTF, named members are matched by name in the target (through anonymous members),
//! array indices are kept, and the instruction's immediate or offset is patched after checking
//! that it holds the local value.

use crate::btf::{Btf, CoreRelo, KIND_ARRAY, KIND_ENUM, KIND_ENUM64, KIND_INT, KIND_STRUCT, KIND_UNION, MAX_DEPTH};
use crate::view::{TargetBtf, TargetType};

pub const FIELD_BYTE_OFFSET: u32 = 0;
pub const FIELD_BYTE_SIZE: u32 = 1;
pub const FIELD_EXISTS: u32 = 2;
pub const FIELD_SIGNED: u32 = 3;
pub const FIELD_LSHIFT_U64: u32 = 4;
pub const FIELD_RSHIFT_U64: u32 = 5;
pub const TYPE_EXISTS: u32 = 8;
pub const TYPE_SIZE: u32 = 9;

/// What a field relocation resolved to in the target.
#[derive(Clone, Debug)]
pub struct Resolved {
    /// Value the instruction held (computed from the object's BTF).
    pub local: u64,
    /// Value to patch in.
    pub target: u64,
    /// Local and target field sizes (for the memory-size adjustment of loads).
    pub local_size: u64,
    pub target_size: u64,
    /// Root type name and the dotted member path, for messages (`tcp_sock`, `srtt_us`).
    pub root: String,
    pub path: String,
    /// Byte range of the field in the target root type (None when it does not exist).
    pub target_range: Option<(u64, u64)>,
    /// A kernel bit field held in a whole byte of the view: (byte offset in the target root,
    /// bit position and width the object's BTF gives it within that byte). The byte is
    /// presented to the program with the value at that position, so that both a direct access
    /// (whose shift and mask clang hard-codes) and `BPF_CORE_READ_BITFIELD` read it right.
    pub bitfield: Option<(u64, u8, u8)>,
    /// Whether the instruction must hold `local` before patching. Not for bit fields, as in
    /// libbpf: compilers choose their own container for those.
    pub validate: bool,
}

enum Access {
    Member(String),
    Index(u64),
}

struct FieldPos {
    bit_offset: u64,
    bit_size: u64,
    byte_size: u64,
    bitfield: bool,
    signed: bool,
}

/// The field the access string names in the object's BTF: its position, and the named
/// accesses (members by name, array indices) to repeat in the target.
fn local_field(btf: &Btf, relo: &CoreRelo, spec: &[u64]) -> Result<(FieldPos, Vec<Access>), String> {
    let root = btf.skip_mods(relo.type_id).ok_or("bad root type")?;
    let root_size = btf.size_of(root).ok_or("root type has no size")?;
    let mut bit_offset = spec[0].checked_mul(root_size).and_then(|v| v.checked_mul(8)).ok_or("offset overflow")?;
    let mut cur = root;
    let mut access = Vec::new();
    let mut bit_size = root_size * 8;
    let mut bitfield = false;
    for &idx in &spec[1..] {
        let t = btf.get(btf.skip_mods(cur).ok_or("bad type")?).ok_or("bad type")?;
        match t.kind {
            KIND_STRUCT | KIND_UNION => {
                let m = t.members.get(idx as usize).ok_or("member index out of range")?;
                bit_offset = bit_offset.checked_add(m.bit_offset as u64).ok_or("offset overflow")?;
                if !m.name.is_empty() {
                    access.push(Access::Member(m.name.clone()));
                }
                cur = m.ty;
                bitfield = m.bit_size != 0;
                bit_size = if bitfield { m.bit_size as u64 } else { btf.size_of(cur).ok_or("member has no size")? * 8 };
            }
            KIND_ARRAY => {
                let (elem, _) = t.array.ok_or("bad array")?;
                let esz = btf.size_of(elem).ok_or("element has no size")?;
                bit_offset = bit_offset.checked_add(idx.checked_mul(esz * 8).ok_or("offset overflow")?).ok_or("offset overflow")?;
                access.push(Access::Index(idx));
                cur = elem;
                bitfield = false;
                bit_size = esz * 8;
            }
            _ => return Err("access string walks into a type that is neither struct, union nor array".into()),
        }
    }
    let leaf = btf.get(btf.skip_mods(cur).ok_or("bad type")?).ok_or("bad type")?;
    let signed = leaf.kind == KIND_INT && leaf.signed;
    let byte_size = if bitfield { btf.size_of(cur).ok_or("bit field has no size")? } else { bit_size / 8 };
    Ok((FieldPos { bit_offset, bit_size, byte_size, bitfield, signed }, access))
}

/// libbpf's computation of a field relocation's value from a field position.
fn field_value(kind: u32, f: &FieldPos) -> Result<(u64, u64), String> {
    let mut byte_size = f.byte_size;
    let mut byte_off = if f.bitfield { f.bit_offset / 8 / byte_size.max(1) * byte_size.max(1) } else { f.bit_offset / 8 };
    if f.bitfield {
        while f.bit_offset + f.bit_size - byte_off * 8 > byte_size * 8 {
            if byte_size >= 8 {
                return Err("bit field cannot be read with one 64-bit load".into());
            }
            byte_size *= 2;
            byte_off = f.bit_offset / 8 / byte_size * byte_size;
        }
    }
    let v = match kind {
        FIELD_BYTE_OFFSET => byte_off,
        FIELD_BYTE_SIZE => byte_size,
        FIELD_EXISTS => 1,
        FIELD_SIGNED => f.signed as u64,
        FIELD_LSHIFT_U64 => 64u64.wrapping_sub(f.bit_offset + f.bit_size - byte_off * 8),
        FIELD_RSHIFT_U64 => 64u64.wrapping_sub(f.bit_size),
        k => return Err(format!("unsupported CO-RE relocation kind {k}")),
    };
    Ok((v, byte_size))
}

fn find_member(target: &TargetBtf, ty: usize, name: &str, depth: usize) -> Option<(u64, usize)> {
    if depth > MAX_DEPTH {
        return None;
    }
    if let TargetType::Struct { members, .. } = &target.types[ty] {
        for m in members {
            if m.name == name {
                return Some((m.offset as u64, m.ty));
            }
        }
    }
    None
}

/// Resolves one relocation. `Err` is a message for a load refusal.
pub fn resolve(btf: &Btf, target: &TargetBtf, relo: &CoreRelo) -> Result<Resolved, String> {
    let spec: Vec<u64> = relo
        .access
        .split(':')
        .map(|s| s.parse::<u64>().map_err(|_| format!("bad CO-RE access string {:?}", relo.access)))
        .collect::<Result<_, _>>()?;
    if spec.is_empty() {
        return Err("empty CO-RE access string".into());
    }
    let root_local = btf.skip_mods(relo.type_id).and_then(|id| btf.get(id)).ok_or("CO-RE relocation names no type")?;
    let root_name = root_local.name.clone();
    match relo.kind {
        TYPE_EXISTS | TYPE_SIZE => {
            let t = target.struct_by_name(&root_name);
            let local = if relo.kind == TYPE_EXISTS { 1 } else { btf.size_of(relo.type_id).unwrap_or(0) };
            let value = match (relo.kind, t) {
                (TYPE_EXISTS, t) => t.is_some() as u64,
                (_, Some(t)) => target.size_of(t) as u64,
                (_, None) => return Err(format!("type struct {root_name} does not exist in the simulator's socket view")),
            };
            return Ok(Resolved { local, target: value, local_size: 0, target_size: 0, root: root_name, path: String::new(), target_range: None, bitfield: None, validate: true });
        }
        FIELD_BYTE_OFFSET..=FIELD_RSHIFT_U64 => {}
        k => return Err(format!("unsupported CO-RE relocation kind {k} on type {root_name}")),
    }
    if root_local.kind != KIND_STRUCT && root_local.kind != KIND_UNION {
        return Err(format!("CO-RE field relocation on {root_name:?}, which is not a struct"));
    }
    let (pos, access) = local_field(btf, relo, &spec)?;
    let (local, local_size) = field_value(relo.kind, &pos)?;
    let path: Vec<String> = access
        .iter()
        .map(|a| match a {
            Access::Member(n) => n.clone(),
            Access::Index(i) => format!("[{i}]"),
        })
        .collect();
    let path = path.join(".").replace(".[", "[");
    let missing = |what: String| -> Result<Resolved, String> {
        if relo.kind == FIELD_EXISTS {
            Ok(Resolved { local, target: 0, local_size, target_size: 0, root: root_name.clone(), path: path.clone(), target_range: None, bitfield: None, validate: true })
        } else {
            Err(what)
        }
    };
    let Some(troot) = target.struct_by_name(&root_name) else {
        return missing(format!("type struct {root_name} does not exist in the simulator's socket view"));
    };
    let root_size = target.size_of(troot) as u64;
    let mut off = spec[0].checked_mul(root_size).ok_or("offset overflow")?;
    let mut cur = troot;
    for a in &access {
        match a {
            Access::Member(name) => match find_member(target, cur, name, 0) {
                Some((o, ty)) => {
                    off += o;
                    cur = ty;
                }
                None => {
                    return missing(format!(
                        "field {name} (in {root_name}.{path}) does not exist in the simulator's struct {}",
                        match &target.types[cur] {
                            TargetType::Struct { name, .. } => *name,
                            _ => "?",
                        }
                    ))
                }
            },
            Access::Index(i) => match &target.types[cur] {
                TargetType::Array { elem, len } => {
                    if *i >= *len as u64 {
                        return missing(format!("index {i} of {root_name}.{path} is out of the target array's {len} elements"));
                    }
                    off += i * target.size_of(*elem) as u64;
                    cur = *elem;
                }
                _ => return missing(format!("{root_name}.{path} is not an array in the simulator's view")),
            },
        }
    }
    let size = target.size_of(cur) as u64;
    let signed = matches!(target.types[cur], TargetType::Int { signed: true, .. });
    // Kinds must agree: an int or enum local leaf against an int target, composites alike.
    let local_leaf = btf.get(btf.skip_mods(leaf_type(btf, relo, &spec).unwrap_or(0)).unwrap_or(0)).map(|t| t.kind).unwrap_or(0);
    let target_is_int = matches!(target.types[cur], TargetType::Int { .. });
    let local_is_scalar = matches!(local_leaf, KIND_INT | KIND_ENUM | KIND_ENUM64);
    if local_is_scalar != target_is_int && relo.kind != FIELD_EXISTS {
        return Err(format!("field {root_name}.{path} has an incompatible type in the simulator's view"));
    }
    let mut bitfield = None;
    let (shift, width) = if pos.bitfield {
        let shift = pos.bit_offset % 8;
        if size != 1 || local_size != 1 || shift + pos.bit_size > 8 {
            return Err(format!(
                "bit field {root_name}.{path} ({} bits at bit {}) is not within one byte of the object's struct, or the view's field is not one byte",
                pos.bit_size, pos.bit_offset
            ));
        }
        bitfield = Some((off, shift as u8, pos.bit_size as u8));
        (shift, pos.bit_size)
    } else {
        (0, size * 8)
    };
    let value = match relo.kind {
        FIELD_BYTE_OFFSET => off,
        FIELD_BYTE_SIZE => size,
        FIELD_EXISTS => 1,
        FIELD_SIGNED => signed as u64,
        FIELD_LSHIFT_U64 => 64 - (shift + width),
        _ => 64 - width,
    };
    Ok(Resolved { local, target: value, local_size, target_size: size, root: root_name, path, target_range: Some((off, off + size)), bitfield, validate: !pos.bitfield })
}

fn leaf_type(btf: &Btf, relo: &CoreRelo, spec: &[u64]) -> Option<u32> {
    let mut cur = btf.skip_mods(relo.type_id)?;
    for &idx in &spec[1..] {
        let t = btf.get(btf.skip_mods(cur)?)?;
        cur = match t.kind {
            KIND_STRUCT | KIND_UNION => t.members.get(idx as usize)?.ty,
            KIND_ARRAY => t.array?.0,
            _ => return None,
        };
    }
    Some(cur)
}
