//! Loading an object: ELF, license, `.BTF`, the `tcp_congestion_ops` struct_ops variable and the
//! programs it names, maps, global data sections, relocations (maps, data, kfuncs, subprogram
//! calls), CO-RE, the writable-field check, and the decoding of every instruction.

use std::sync::{Arc, Mutex};

use crate::btf::{self, Btf, KIND_ARRAY, KIND_PTR};
use crate::core_relo::{self, FIELD_BYTE_OFFSET};
use crate::elf::{Elf, Rel, Symbol, SHN_UNDEF, STB_WEAK, STT_SECTION};
use crate::kernel::{Kfunc, HELPERS};
use crate::view::{offsets, TargetBtf};
use crate::vm::{self, Code, CtxLayout, Insn, Instance, CALL_HELPER, CALL_KFUNC, CALL_LOCAL};
use crate::{LoadError, Op};

/// `STT_FUNC`: a symbol naming a function.
const STT_FUNC: u8 = 2;

pub const MAP_TYPE_HASH: u32 = 1;
pub const MAP_TYPE_ARRAY: u32 = 2;
pub const MAP_TYPE_SK_STORAGE: u32 = 24;
/// Most maps an object may define (region numbering, see [`vm`]).
pub const MAX_MAPS: usize = 64;
/// Most entries of a hash map.
pub const MAX_HASH_ENTRIES: u32 = 1 << 20;
/// Most bytes of an array map or a global data section.
pub const MAX_REGION_BYTES: u64 = 1 << 24;

/// Licenses the kernel's `license_is_gpl_compatible` accepts.
const GPL_COMPATIBLE: [&str; 6] = ["GPL", "GPL v2", "GPL and additional rights", "Dual BSD/GPL", "Dual MIT/GPL", "Dual MPL/GPL"];

/// One program: a `struct_ops/...` section's instructions, followed by `.text`'s subprograms,
/// entered at `entry` (a section may hold several programs, as `SEC("struct_ops")` does).
#[derive(Debug)]
pub(crate) struct Program {
    /// The section's name, or `section:function` when the section holds several programs.
    pub section: String,
    /// The section's index in the object.
    pub sec_index: usize,
    pub insns: Vec<Insn>,
    pub entry: usize,
    /// The program compiled for the fast loop ([`vm::compile`]).
    pub fast: Code,
}

#[derive(Clone, Debug)]
pub(crate) struct MapDef {
    pub name: String,
    pub kind: u32,
    pub key_size: u32,
    pub value_size: u32,
    pub max_entries: u32,
}

#[derive(Debug)]
pub(crate) struct DataSection {
    pub name: String,
    pub writable: bool,
    pub initial: Vec<u8>,
}

/// Map contents and writable global data, shared by all instances of an object.
#[derive(Debug)]
pub(crate) struct Shared {
    /// Live bytes of each data section (read-only ones are never written).
    pub data: Vec<Vec<u8>>,
    pub maps: Vec<MapStore>,
}

#[derive(Debug)]
pub(crate) enum MapStore {
    Array(Vec<u8>),
    Hash(Vec<Option<(Vec<u8>, Vec<u8>)>>),
    SkStorage,
}

/// A loaded, relocated and checked `tcp_congestion_ops` object.
#[derive(Debug)]
pub struct Object {
    name: String,
    flags: u32,
    pub(crate) ops: [Option<usize>; 12],
    pub(crate) programs: Vec<Program>,
    pub(crate) maps: Vec<MapDef>,
    pub(crate) data: Vec<DataSection>,
    pub(crate) shared: Mutex<Shared>,
    /// (field name, first byte, end byte) of the writable socket fields.
    pub(crate) writable: Vec<(&'static str, usize, usize)>,
    /// Kernel bit fields the programs read (presented at the object's bit positions).
    pub(crate) bitfields: Vec<BitField>,
}

fn err(msg: impl Into<String>) -> LoadError {
    LoadError(msg.into())
}

/// The `__kconfig` values [`Object::load`] gives: `CONFIG_HZ` 250 (the default of the
/// project's BBR object, and of Debian's kernels) and `LINUX_KERNEL_VERSION` 6.18.0.
pub const DEFAULT_KCONFIG: [(&str, u64); 2] = [("CONFIG_HZ", 250), ("LINUX_KERNEL_VERSION", (6 << 16) | (18 << 8))];

impl Object {
    /// Loads an object file (its `.rodata` already holding the parameters the caller wants),
    /// with the `__kconfig` values of [`DEFAULT_KCONFIG`].
    pub fn load(elf_bytes: &[u8]) -> Result<Object, LoadError> {
        Object::load_with_kconfig(elf_bytes, &DEFAULT_KCONFIG)
    }

    /// Loads an object file, giving its `__kconfig` externs (`CONFIG_*`, `LINUX_KERNEL_VERSION`)
    /// the values of `kconfig` (pass the `CONFIG_HZ` that [`crate::Env::jiffies`] counts in). As
    /// libbpf does, a `__weak` option missing from `kconfig` reads 0 and a strong one is refused.
    pub fn load_with_kconfig(elf_bytes: &[u8], kconfig: &[(&str, u64)]) -> Result<Object, LoadError> {
        Object::load_selected(elf_bytes, kconfig, None)
    }

    /// Loads the `tcp_congestion_ops` called `ops` (its `.name`, or its variable's name) of an
    /// object that defines several, as the kernel's `bpf_dctcp.c` does; `None` takes the only
    /// one, or the only one with a non-empty `.name`.
    pub fn load_selected(elf_bytes: &[u8], kconfig: &[(&str, u64)], ops: Option<&str>) -> Result<Object, LoadError> {
        let ops_select = ops;
        let elf = Elf::parse(elf_bytes)?;

        let license = elf
            .section_by_name("license")
            .and_then(|(_, s)| crate::elf::cstr_at(s.data, 0))
            .ok_or_else(|| err("no license section: a BPF congestion control must declare a GPL-compatible license"))?;
        if !GPL_COMPATIBLE.contains(&license.as_str()) {
            return Err(err(format!("license {license:?} is not GPL-compatible (the kernel refuses struct_ops programs that are not)")));
        }

        let (_, btf_sec) = elf.section_by_name(".BTF").ok_or_else(|| err("no .BTF section (compile with clang -g)"))?;
        let btf = Btf::parse(btf_sec.data)?;
        let core_relos = match elf.section_by_name(".BTF.ext") {
            Some((_, ext)) => btf::parse_core_relos(ext.data, btf_sec.data)?,
            None => Vec::new(),
        };
        let target = TargetBtf::of_views();

        // Maps of .maps, described by BTF.
        let maps_section = elf.section_by_name(".maps").map(|(i, _)| i);
        let mut maps = Vec::new();
        if let Some(ms) = maps_section {
            for sym in elf.symbols.iter().filter(|s| s.section as usize == ms && s.kind != STT_SECTION && !s.name.is_empty()) {
                if maps.len() >= MAX_MAPS {
                    return Err(err(format!("more than {MAX_MAPS} maps")));
                }
                maps.push(map_def(&btf, &sym.name)?);
            }
        }

        // Global data sections.
        let mut data = Vec::new();
        let mut data_index = vec![None; elf.sections.len()];
        for (i, s) in elf.sections.iter().enumerate() {
            let is_data = [".rodata", ".data", ".bss"].iter().any(|p| s.name == *p || s.name.starts_with(&format!("{p}.")));
            if !is_data {
                continue;
            }
            if s.size > MAX_REGION_BYTES {
                return Err(err(format!("section {} is too large", s.name)));
            }
            let mut initial = s.data.to_vec();
            initial.resize(s.size as usize, 0);
            data_index[i] = Some(data.len());
            data.push(DataSection { name: s.name.clone(), writable: !s.name.starts_with(".rodata"), initial });
        }

        // __kconfig externs: one read-only section of 8-byte little-endian values.
        let mut kconfig_slots: Vec<(String, usize)> = Vec::new();
        let mut kconfig_bytes = Vec::new();
        for sym in elf.symbols.iter().filter(|s| s.section == SHN_UNDEF && (s.name.starts_with("CONFIG_") || s.name == "LINUX_KERNEL_VERSION")) {
            if kconfig_slots.iter().any(|(n, _)| *n == sym.name) {
                continue;
            }
            let value = match kconfig.iter().find(|(n, _)| *n == sym.name) {
                Some((_, v)) => *v,
                None if sym.bind == STB_WEAK => 0,
                None => return Err(err(format!("kconfig option {} is not known to the loader (known: {}); declare it __weak to read 0", sym.name,
                    kconfig.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")))),
            };
            kconfig_slots.push((sym.name.clone(), kconfig_bytes.len()));
            kconfig_bytes.extend_from_slice(&value.to_le_bytes());
        }
        let kconfig_section = (!kconfig_slots.is_empty()).then(|| {
            data.push(DataSection { name: ".kconfig".into(), writable: false, initial: kconfig_bytes });
            data.len() - 1
        });

        // The struct_ops variable.
        let (so_idx, so_sec) = elf
            .section_by_name(".struct_ops")
            .or_else(|| elf.section_by_name(".struct_ops.link"))
            .ok_or_else(|| err("no .struct_ops or .struct_ops.link section: not a struct_ops tcp_congestion_ops object"))?;
        let ops_type = btf
            .struct_by_name("tcp_congestion_ops")
            .ok_or_else(|| err("the object's BTF has no struct tcp_congestion_ops"))?;
        let ops_t = btf.get(ops_type).ok_or_else(|| err("bad BTF"))?;
        let ops_size = ops_t.size_or_type as u64;
        let vars: Vec<_> = elf.symbols.iter().filter(|s| s.section as usize == so_idx && s.kind == 1).collect();
        let member_at = |name: &str| ops_t.members.iter().find(|m| m.name == name).map(|m| (m.bit_offset / 8) as usize);
        let ops_name = |base: usize| {
            member_at("name")
                .and_then(|o| so_sec.data.get(base.checked_add(o)?..))
                .map(|b| String::from_utf8_lossy(&b[..b.iter().position(|&c| c == 0).unwrap_or(b.len()).min(16)]).into_owned())
        };
        let var = select_struct_ops(&vars, ops_select, |v| ops_name(v.value as usize).unwrap_or_default())?;
        if var.size != ops_size {
            return Err(err(format!("struct_ops variable {} is {} bytes, struct tcp_congestion_ops is {ops_size}: not a tcp_congestion_ops", var.name, var.size)));
        }
        let base = var.value as usize;
        let name = ops_name(base).ok_or_else(|| err("tcp_congestion_ops has no name"))?;
        let flags = member_at("flags").and_then(|o| crate::elf::u32_at(so_sec.data, base + o)).unwrap_or(0);

        let writable = offsets::writable();
        let bitfields = std::cell::RefCell::new(Vec::new());
        let mut programs: Vec<Program> = Vec::new();
        let mut ops = [None; 12];
        for rel in elf.relocations_for(so_idx)? {
            let sym = &elf.symbols[rel.symbol];
            let off = rel.offset.wrapping_sub(var.value);
            if off >= var.size {
                continue; // another struct_ops variable's member
            }
            let member = ops_t
                .members
                .iter()
                .find(|m| (m.bit_offset / 8) as u64 == off)
                .ok_or_else(|| err(format!("relocation at .struct_ops offset {off} names no member of tcp_congestion_ops")))?;
            let op = Op::from_member_name(&member.name)
                .ok_or_else(|| err(format!("op {} (program {}) is not supported for BPF congestion controls", member.name, sym.name)))?;
            let sec = sym.section as usize;
            let psec = elf.sections.get(sec).ok_or_else(|| err(format!("op {op} names symbol {}, which is in no section", sym.name)))?;
            // Several programs may share one section (SEC("struct_ops")): one per entry point.
            let existing = programs.iter().position(|p| p.sec_index == sec && p.entry as u64 * 8 == sym.value);
            let idx = match existing {
                Some(i) => i,
                None => {
                    let ctx = Ctx { elf: &elf, btf: &btf, target: &target, core_relos: &core_relos, maps_section, maps: &maps, data_index: &data_index, writable: &writable, bitfields: &bitfields, kconfig: (kconfig_section, &kconfig_slots) };
                    let mut insns = decode_section(&ctx, sec)?;
                    let text_base = insns.len();
                    if let Some((ti, t)) = elf.section_by_name(".text") {
                        if !t.data.is_empty() && ti != sec {
                            insns.extend(decode_section(&ctx, ti)?);
                        }
                    }
                    resolve_calls(&mut insns, text_base);
                    vm::validate(&insns, &psec.name)?;
                    if sym.value % 8 != 0 || (sym.value / 8) as usize >= insns.len() {
                        return Err(err(format!("op {op}: program {} does not start at an instruction of {}", sym.name, psec.name)));
                    }
                    let section = program_display_name(&elf, sec, &psec.name, &sym.name);
                    programs.push(Program { section, sec_index: sec, insns, entry: (sym.value / 8) as usize, fast: Code::default() });
                    programs.len() - 1
                }
            };
            if op == Op::Release {
                // bpf_tcp_ca_get_func_proto: release() may not call bpf_setsockopt/getsockopt.
                let p = &programs[idx];
                for id in reachable_helpers(&p.insns, p.entry) {
                    if let Some((_, helper)) = HELPERS.iter().find(|(h, _)| *h as i64 == id).filter(|(h, _)| SOCKOPT_HELPERS.contains(h)) {
                        return Err(err(format!("op release: program {} calls {helper}, which the kernel does not allow in release", p.section)));
                    }
                }
            }
            ops[op.index()] = Some(idx);
        }
        if ops.iter().all(|o| o.is_none()) {
            return Err(err("tcp_congestion_ops names no program"));
        }
        let missing = missing_required_ops(&ops);
        if !missing.is_empty() {
            return Err(err(format!(
                "tcp_congestion_ops {} ({name}) lacks {}: the kernel refuses to register it (tcp_validate_congestion_control needs ssthresh, undo_cwnd, and cong_avoid or cong_control)",
                var.name,
                missing.join(" and ")
            )));
        }

        // Each program compiled once for the fast loop, for the context of the op it serves
        // (of a program that serves several ops, only the socket is known).
        for (pi, p) in programs.iter_mut().enumerate() {
            let mut served = Op::ALL.into_iter().filter(|op| ops[op.index()] == Some(pi));
            let layout = match (served.next(), served.next()) {
                (Some(op), None) => CtxLayout::of(op),
                _ => CtxLayout::default(),
            };
            p.fast = vm::compile(&p.insns, p.entry, &data, &maps, layout);
        }

        let shared = Shared {
            data: data.iter().map(|d| if d.writable { d.initial.clone() } else { Vec::new() }).collect(),
            maps: maps
                .iter()
                .map(|m| match m.kind {
                    MAP_TYPE_ARRAY => MapStore::Array(vec![0; m.value_size as usize * m.max_entries as usize]),
                    MAP_TYPE_HASH => MapStore::Hash(Vec::new()),
                    _ => MapStore::SkStorage,
                })
                .collect(),
        };
        Ok(Object { name, flags, ops, programs, maps, data, shared: Mutex::new(shared), writable, bitfields: bitfields.into_inner() })
    }

    /// The `tcp_congestion_ops` `.name`.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn has_op(&self, op: Op) -> bool {
        self.ops[op.index()].is_some()
    }

    /// The `tcp_congestion_ops` `.flags` (`TCP_CONG_NON_RESTRICTED` = 1, `TCP_CONG_NEEDS_ECN` = 2).
    pub fn flags(&self) -> u32 {
        self.flags
    }

    /// The section name of the program filling `op`.
    pub fn program_name(&self, op: Op) -> Option<&str> {
        self.ops[op.index()].map(|i| self.programs[i].section.as_str())
    }

    /// An object with no programs, maps or data, for the interpreter's unit tests.
    #[cfg(test)]
    pub(crate) fn for_tests(shared: Mutex<Shared>) -> Object {
        Object {
            name: String::new(),
            flags: 0,
            ops: [None; 12],
            programs: Vec::new(),
            maps: Vec::new(),
            data: Vec::new(),
            shared,
            writable: offsets::writable(),
            bitfields: Vec::new(),
        }
    }

    /// A new flow (socket) running this object.
    pub fn instance(self: &Arc<Self>) -> Instance {
        Instance::new(Arc::clone(self))
    }
}

/// The name a program is known by: its section's, followed by `:function` when the section
/// holds more than one function (as the kernel's selftests put every op in `SEC("struct_ops")`).
fn program_display_name(elf: &Elf, sec: usize, section: &str, function: &str) -> String {
    let functions = elf.symbols.iter().filter(|s| s.section as usize == sec && s.kind == STT_FUNC).count();
    if functions > 1 {
        format!("{section}:{function}")
    } else {
        section.to_string()
    }
}

/// The ops `tcp_validate_congestion_control` (net/ipv4/tcp_cong.c) requires and `ops` lacks:
/// `ssthresh`, `undo_cwnd`, and one of `cong_avoid` or `cong_control`.
fn missing_required_ops(ops: &[Option<usize>; 12]) -> Vec<&'static str> {
    let has = |op: Op| ops[op.index()].is_some();
    let mut missing = Vec::new();
    if !has(Op::Ssthresh) {
        missing.push("ssthresh");
    }
    if !has(Op::UndoCwnd) {
        missing.push("undo_cwnd");
    }
    if !has(Op::CongAvoid) && !has(Op::CongControl) {
        missing.push("cong_avoid or cong_control");
    }
    missing
}

/// The `tcp_congestion_ops` variable to load among those of `.struct_ops`: the one `select`
/// names (by its `.name` or its variable name); else the only one; else the only one with a
/// non-empty `.name` (the kernel refuses to register a nameless one, `bpf_obj_name_cpy`).
fn select_struct_ops<'s>(vars: &[&'s Symbol], select: Option<&str>, name_of: impl Fn(&Symbol) -> String) -> Result<&'s Symbol, LoadError> {
    let listed = || vars.iter().map(|v| format!("{} (variable {})", name_of(v), v.name)).collect::<Vec<_>>().join(", ");
    if let Some(want) = select {
        return vars
            .iter()
            .copied()
            .find(|v| name_of(v) == want || v.name == want)
            .ok_or_else(|| err(format!("the object has no tcp_congestion_ops named {want:?} (it has: {})", listed())));
    }
    match vars {
        [] => Err(err("the .struct_ops section defines no variable")),
        [v] => Ok(*v),
        _ => {
            let named: Vec<_> = vars.iter().copied().filter(|v| !name_of(v).is_empty()).collect();
            match named.as_slice() {
                [v] => Ok(*v),
                _ => Err(err(format!(
                    "the object defines {} tcp_congestion_ops: {}; choose one by name (bpf:PATH#NAME in a trial, Object::load_selected)",
                    vars.len(),
                    listed()
                ))),
            }
        }
    }
}

struct Ctx<'a, 'e> {
    elf: &'a Elf<'e>,
    btf: &'a Btf,
    target: &'a TargetBtf,
    core_relos: &'a [btf::CoreRelo],
    maps_section: Option<usize>,
    maps: &'a [MapDef],
    data_index: &'a [Option<usize>],
    writable: &'a [(&'static str, usize, usize)],
    /// Kernel bit fields the programs read, see [`core_relo::Resolved::bitfield`].
    bitfields: &'a std::cell::RefCell<Vec<BitField>>,
    /// The `.kconfig` data section, and each extern's offset in it.
    kconfig: (Option<usize>, &'a [(String, usize)]),
}

/// A kernel bit field of the socket held in a whole byte of the view: the byte offset, and the
/// bit position and width at which the program expects the value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BitField {
    pub offset: usize,
    pub shift: u8,
    pub width: u8,
}

/// The map described by the BTF variable `name` of `.maps`.
fn map_def(btf: &Btf, name: &str) -> Result<MapDef, LoadError> {
    let var = btf
        .types
        .iter()
        .find(|t| t.kind == 14 && t.name == name)
        .ok_or_else(|| err(format!("map {name} has no BTF description (only BTF-defined maps in .maps are supported)")))?;
    let def = btf.get(btf.skip_mods(var.size_or_type).unwrap_or(0)).ok_or_else(|| err(format!("map {name}: bad BTF")))?;
    let mut m = MapDef { name: name.to_string(), kind: 0, key_size: 0, value_size: 0, max_entries: 0 };
    for member in &def.members {
        let pointee = btf.get(member.ty).filter(|t| t.kind == KIND_PTR).map(|t| t.size_or_type);
        // __uint(x, n) is `int (*x)[n]`; __type(x, T) is `T *x`.
        let uint = pointee.and_then(|p| btf.get(p)).filter(|t| t.kind == KIND_ARRAY).and_then(|t| t.array).map(|a| a.1);
        let size = pointee.and_then(|p| btf.size_of(p)).and_then(|s| u32::try_from(s).ok());
        match member.name.as_str() {
            "type" => m.kind = uint.unwrap_or(0),
            "max_entries" => m.max_entries = uint.unwrap_or(0),
            "key_size" => m.key_size = uint.unwrap_or(0),
            "value_size" => m.value_size = uint.unwrap_or(0),
            "key" => m.key_size = size.unwrap_or(0),
            "value" => m.value_size = size.unwrap_or(0),
            _ => {}
        }
    }
    let bytes = m.value_size as u64 * m.max_entries as u64;
    match m.kind {
        MAP_TYPE_ARRAY if m.key_size == 4 && m.value_size > 0 && bytes <= MAX_REGION_BYTES => {}
        MAP_TYPE_HASH if m.key_size > 0 && m.value_size > 0 && m.max_entries > 0 && m.max_entries <= MAX_HASH_ENTRIES => {}
        MAP_TYPE_SK_STORAGE if m.key_size == 4 && m.value_size > 0 && m.value_size as u64 <= MAX_REGION_BYTES => {}
        MAP_TYPE_ARRAY | MAP_TYPE_HASH | MAP_TYPE_SK_STORAGE => {
            return Err(err(format!("map {name}: unsupported key/value sizes or entry count ({m:?})")))
        }
        k => return Err(err(format!("map {name}: map type {k} is not supported (array, hash and sk_storage are)"))),
    }
    Ok(m)
}

/// Decodes section `sec` into instructions, applying its relocations and CO-RE records. Calls
/// stay relative (see [`resolve_calls`]).
fn decode_section(ctx: &Ctx, sec: usize) -> Result<Vec<Insn>, LoadError> {
    let s = &ctx.elf.sections[sec];
    let sname = &s.name;
    if !s.data.len().is_multiple_of(8) {
        return Err(err(format!("program section {sname} is not a whole number of instructions")));
    }
    let raw: Vec<[u8; 8]> = s.data.chunks_exact(8).map(|c| c.try_into().unwrap_or([0; 8])).collect();
    let mut insns: Vec<Insn> = raw.iter().map(Insn::raw).collect();
    // ld_imm64: join the two halves.
    let mut i = 0;
    while i < insns.len() {
        if insns[i].code == 0x18 {
            let hi = insns.get(i + 1).ok_or_else(|| err(format!("{sname}: ld_imm64 at the end of the section")))?;
            if hi.code != 0 {
                return Err(err(format!("{sname}: malformed ld_imm64 at instruction {i}")));
            }
            if insns[i].src != 0 {
                return Err(err(format!("{sname}: ld_imm64 of kind {} at instruction {i} is not supported in an object file", insns[i].src)));
            }
            let lo = insns[i].imm as u32 as u64;
            let hiv = insns[i + 1].imm as u32 as u64;
            insns[i].imm = (hiv << 32 | lo) as i64;
            insns[i + 1] = Insn::filler();
            i += 2;
        } else {
            i += 1;
        }
    }
    for (i, insn) in insns.iter().enumerate() {
        if insn.code == 0x85 && insn.src == CALL_KFUNC {
            return Err(err(format!("{sname}: instruction {i} is a kfunc call without a relocation naming the function")));
        }
        if insn.code == 0x85 && insn.src > CALL_KFUNC {
            return Err(err(format!("{sname}: instruction {i} is a call of unknown kind {}", insn.src)));
        }
        if insn.code == 0x85 && insn.src == CALL_HELPER && !helper_known(insn.imm) {
            return Err(err(format!("{sname}: instruction {i} calls helper {}, which is not available to congestion controls here (known: {})", insn.imm,
                HELPERS.iter().map(|(id, n)| format!("{n} ({id})")).collect::<Vec<_>>().join(", "))));
        }
    }
    // Relocations.
    for rel in ctx.elf.relocations_for(sec)? {
        apply_relocation(ctx, sname, &mut insns, &raw, &rel)?;
    }
    // CO-RE.
    for relo in ctx.core_relos.iter().filter(|r| &r.section == sname) {
        let idx = (relo.insn_off / 8) as usize;
        let insn = insns.get_mut(idx).ok_or_else(|| err(format!("{sname}: CO-RE relocation past the end of the program")))?;
        let r = core_relo::resolve(ctx.btf, ctx.target, relo).map_err(|m| err(format!("{sname}: instruction {idx}: {m}")))?;
        patch_core(sname, idx, insn, relo.kind, &r)?;
        if let (Some((off, shift, width)), "sock" | "inet_sock" | "inet_connection_sock" | "tcp_sock") = (r.bitfield, r.root.as_str()) {
            let bf = BitField { offset: off as usize, shift, width };
            let mut all = ctx.bitfields.borrow_mut();
            if all.iter().any(|b| b.offset == bf.offset && *b != bf) {
                return Err(err(format!("{sname}: instruction {idx}: bit field {}.{} is read at two different bit positions", r.root, r.path)));
            }
            if !all.contains(&bf) {
                all.push(bf);
            }
        }
        check_store(ctx, sname, idx, insn, relo.kind, &r)?;
    }
    Ok(insns)
}

/// The relocation of one instruction: `ld_imm64` of a map or of global data, a kfunc call
/// (an undefined symbol), or a call of a `.text` subprogram.
fn apply_relocation(ctx: &Ctx, sname: &str, insns: &mut [Insn], raw: &[[u8; 8]], rel: &Rel) -> Result<(), LoadError> {
    let idx = (rel.offset / 8) as usize;
    let sym = &ctx.elf.symbols[rel.symbol];
    let insn = insns.get_mut(idx).ok_or_else(|| err(format!("{sname}: relocation past the end of the program")))?;
    match insn.code {
        0x18 => {
            let sec = sym.section as usize;
            if sym.section == SHN_UNDEF {
                let slot = ctx.kconfig.1.iter().find(|(n, _)| *n == sym.name);
                return match (ctx.kconfig.0, slot) {
                    (Some(section), Some((_, off))) => {
                        insn.imm = vm::data_addr(section, *off as u64) as i64;
                        Ok(())
                    }
                    _ => Err(err(format!("{sname}: instruction {idx} loads extern {}, which is not supported (only __kconfig CONFIG_* and LINUX_KERNEL_VERSION are)", sym.name))),
                };
            }
            if Some(sec) == ctx.maps_section {
                let m = ctx
                    .maps
                    .iter()
                    .position(|m| m.name == sym.name)
                    .ok_or_else(|| err(format!("{sname}: instruction {idx} names map {}, which is not defined", sym.name)))?;
                insn.imm = vm::map_handle(m) as i64;
            } else if let Some(d) = ctx.data_index.get(sec).copied().flatten() {
                let addend = i32::from_le_bytes([raw[idx][4], raw[idx][5], raw[idx][6], raw[idx][7]]) as i64;
                let off = (sym.value as i64).wrapping_add(addend);
                if off < 0 || off as u64 > MAX_REGION_BYTES {
                    return Err(err(format!("{sname}: instruction {idx} points outside section {}", ctx.elf.sections[sec].name)));
                }
                insn.imm = vm::data_addr(d, off as u64) as i64;
            } else {
                return Err(err(format!("{sname}: instruction {idx} loads the address of {}, which is not a map or global data", sym.name)));
            }
        }
        0x85 => {
            if sym.section == SHN_UNDEF {
                let k = Kfunc::by_name(&sym.name).ok_or_else(|| {
                    err(format!("{sname}: instruction {idx} calls kfunc {}, which is not available to congestion controls here (known: {})", sym.name, Kfunc::NAMES.join(", ")))
                })?;
                insn.src = CALL_KFUNC;
                insn.imm = k as i64;
            } else if ctx.elf.sections.get(sym.section as usize).map(|s| s.name.as_str()) == Some(".text") {
                let target = if sym.kind == STT_SECTION { (sym.value / 8) as i64 + insn.imm + 1 } else { (sym.value / 8) as i64 };
                // The index within .text; resolve_calls makes it absolute.
                insn.src = CALL_LOCAL;
                insn.imm = target;
                insn.off = TEXT_RELATIVE;
            } else {
                return Err(err(format!("{sname}: instruction {idx} calls {}, which is neither a kfunc nor a .text subprogram", sym.name)));
            }
        }
        _ => return Err(err(format!("{sname}: relocation on instruction {idx}, which is neither ld_imm64 nor a call"))),
    }
    Ok(())
}

/// Marks (in `off`) a call whose `imm` is an index within `.text`.
const TEXT_RELATIVE: i16 = 2;

/// Makes every bpf-to-bpf call's target an absolute index within the program: pc-relative
/// calls (no relocation, `off` 0) and `.text`-relative ones (relocated). A target outside the
/// program becomes -1, which [`vm::validate`] refuses.
fn resolve_calls(insns: &mut [Insn], text_base: usize) {
    let n = insns.len();
    for (pc, insn) in insns.iter_mut().enumerate() {
        if insn.code != 0x85 || insn.src != CALL_LOCAL {
            continue;
        }
        let target = if insn.off == TEXT_RELATIVE {
            text_base as i64 + insn.imm
        } else {
            // pc-relative, in the same section (or within .text)
            pc as i64 + 1 + insn.imm
        };
        insn.imm = if target < 0 || target as usize >= n { -1 } else { target };
        insn.off = 0;
    }
}

fn patch_core(sname: &str, idx: usize, insn: &mut Insn, kind: u32, r: &core_relo::Resolved) -> Result<(), LoadError> {
    let class = insn.code & 7;
    let fail = |m: String| err(format!("{sname}: instruction {idx}: CO-RE {}: {m}", if r.path.is_empty() { r.root.clone() } else { format!("{}.{}", r.root, r.path) }));
    match class {
        4 | 7 if insn.code & 0x08 == 0 => {
            if r.validate && insn.imm as u32 as u64 != r.local & 0xffff_ffff {
                return Err(fail(format!("immediate {} does not hold the local value {}", insn.imm, r.local)));
            }
            insn.imm = r.target as u32 as i32 as i64;
            if r.target > u32::MAX as u64 {
                return Err(fail("value does not fit an immediate".into()));
            }
        }
        1..=3 => {
            if kind != FIELD_BYTE_OFFSET {
                return Err(fail(format!("relocation kind {kind} on a memory instruction")));
            }
            if r.validate && insn.off as i64 as u64 != r.local {
                return Err(fail(format!("offset {} does not hold the local value {}", insn.off, r.local)));
            }
            insn.off = i16::try_from(r.target).map_err(|_| fail("offset does not fit".into()))?;
            if r.target_size != r.local_size {
                if insn.code & 0xe0 != 0x60 {
                    return Err(fail(format!("field is {} bytes here, {} in the object, and the access cannot be resized", r.target_size, r.local_size)));
                }
                let size_now = vm::mem_size(insn.code);
                if size_now as u64 != r.local_size {
                    return Err(fail(format!("memory access of {size_now} bytes on a field of {} bytes", r.local_size)));
                }
                let code = match r.target_size {
                    1 => 0x10,
                    2 => 0x08,
                    4 => 0x00,
                    8 => 0x18,
                    _ => return Err(fail(format!("field of {} bytes cannot be accessed", r.target_size))),
                };
                insn.code = insn.code & !0x18 | code;
            }
        }
        0 if insn.code == 0x18 => insn.imm = r.target as i64,
        _ => return Err(fail("relocation on an instruction that cannot carry one".into())),
    }
    Ok(())
}

/// Refuses a store whose CO-RE relocation targets a socket field a congestion control may not
/// write (or a read-only sample).
fn check_store(ctx: &Ctx, sname: &str, idx: usize, insn: &Insn, kind: u32, r: &core_relo::Resolved) -> Result<(), LoadError> {
    let class = insn.code & 7;
    if kind != FIELD_BYTE_OFFSET || !(class == 2 || class == 3) {
        return Ok(());
    }
    let (start, _) = r.target_range.unwrap_or((0, 0));
    match r.root.as_str() {
        "sock" | "inet_sock" | "inet_connection_sock" | "tcp_sock" => {
            // All four sit at offset 0 of the socket view.
            let a = start as usize;
            let b = a + vm::mem_size(insn.code);
            if ctx.writable.iter().any(|(_, s, e)| a >= *s && b <= *e) {
                return Ok(());
            }
            Err(err(format!(
                "{sname}: instruction {idx} writes {}.{}, which a BPF congestion control may not write (writable: {})",
                r.root,
                r.path,
                ctx.writable.iter().map(|w| w.0).collect::<Vec<_>>().join(", ")
            )))
        }
        "ack_sample" | "rate_sample" => Err(err(format!("{sname}: instruction {idx} writes {}.{}, which is read-only", r.root, r.path))),
        _ => Ok(()),
    }
}

/// Helpers `release` may not call (`net/ipv4/bpf_tcp_ca.c`).
const SOCKOPT_HELPERS: [u32; 2] = [crate::kernel::HELPER_SETSOCKOPT, crate::kernel::HELPER_GETSOCKOPT];

/// The helper ids a program can reach from `entry` (following jumps and bpf-to-bpf calls), so
/// that of several programs sharing a section each is judged by its own code.
fn reachable_helpers(insns: &[Insn], entry: usize) -> Vec<i64> {
    let mut seen = vec![false; insns.len()];
    let mut todo = vec![entry];
    let mut helpers = Vec::new();
    while let Some(pc) = todo.pop() {
        if pc >= insns.len() || seen[pc] {
            continue;
        }
        seen[pc] = true;
        let x = &insns[pc];
        let class = x.code & 7;
        match x.code {
            0x95 => continue,
            0x85 => {
                match x.src {
                    CALL_HELPER => helpers.push(x.imm),
                    CALL_LOCAL if x.imm >= 0 => todo.push(x.imm as usize),
                    _ => {}
                }
                todo.push(pc + 1);
            }
            0x05 => todo.push((pc as i64 + 1 + x.off as i64).max(0) as usize),
            0x06 => todo.push((pc as i64 + 1 + x.imm).max(0) as usize),
            0x18 => todo.push(pc + 2),
            _ if class == 5 || class == 6 => {
                todo.push((pc as i64 + 1 + x.off as i64).max(0) as usize);
                todo.push(pc + 1);
            }
            _ => todo.push(pc + 1),
        }
    }
    helpers.sort_unstable();
    helpers.dedup();
    helpers
}

fn helper_known(id: i64) -> bool {
    HELPERS.iter().any(|(h, _)| *h as i64 == id)
}

/// A read-only global (`const volatile`) of an object's `.rodata`: a parameter a caller may set
/// before loading, with [`patch_rodata`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RodataVar {
    pub name: String,
    /// Bytes from the start of `.rodata`.
    pub offset: usize,
    pub size: usize,
    /// The current value (little-endian bytes).
    pub value: Vec<u8>,
}

/// The variables of an object's `.rodata` section, by their symbols.
pub fn rodata_variables(elf_bytes: &[u8]) -> Result<Vec<RodataVar>, LoadError> {
    let elf = Elf::parse(elf_bytes)?;
    let Some((idx, sec)) = elf.section_by_name(".rodata") else { return Ok(Vec::new()) };
    let mut vars: Vec<RodataVar> = elf
        .symbols
        .iter()
        .filter(|s| s.section as usize == idx && s.kind == 1 && !s.name.is_empty())
        .filter_map(|s| {
            let (offset, size) = (usize::try_from(s.value).ok()?, usize::try_from(s.size).ok()?);
            let value = sec.data.get(offset..offset.checked_add(size)?)?.to_vec();
            Some(RodataVar { name: s.name.clone(), offset, size, value })
        })
        .collect();
    vars.sort_by_key(|v| v.offset);
    Ok(vars)
}

/// A copy of the object with `.rodata` variable `name` set to `value` (little-endian bytes, as
/// many as the variable has): what a loader does to a `const volatile` parameter before load.
pub fn patch_rodata(elf_bytes: &[u8], name: &str, value: &[u8]) -> Result<Vec<u8>, LoadError> {
    let elf = Elf::parse(elf_bytes)?;
    let (_, sec) = elf.section_by_name(".rodata").ok_or_else(|| err("the object has no .rodata section"))?;
    let var = rodata_variables(elf_bytes)?
        .into_iter()
        .find(|v| v.name == name)
        .ok_or_else(|| err(format!("the object's .rodata has no variable {name}")))?;
    if value.len() != var.size {
        return Err(err(format!(".rodata variable {name} is {} bytes, not {}", var.size, value.len())));
    }
    let start = (sec.file_offset as usize).checked_add(var.offset).ok_or_else(|| err("bad .rodata offset"))?;
    let mut out = elf_bytes.to_vec();
    out.get_mut(start..start + value.len()).ok_or_else(|| err("bad .rodata offset"))?.copy_from_slice(value);
    Ok(out)
}
