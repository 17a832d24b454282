"""Congestion controls written in BPF: inspect an object, set its parameters, register it under
a unique name, and unregister it.

A BPF congestion control is an ELF object (clang ``-target bpf``) holding a
``struct tcp_congestion_ops`` in its ``.struct_ops`` section and programs for its callbacks.
Registering it (``bpftool struct_ops register``) adds its name to the kernel's congestion
controls, where a socket selects it with ``TCP_CONGESTION`` like any module.

Parameters are the object's read-only globals (``const volatile`` variables in ``.rodata``):
:func:`build` writes each value into a copy of the object, at the variable's place given by
the ELF symbol table, before the kernel sees it; the kernel then treats them as constants.
The ``name`` field of the ``tcp_congestion_ops`` (its offset from the object's BTF) is
rewritten too, so each flow group gets its own instance (``cct<trial id><group>``) and
instances of one object with different parameters coexist.

Lifetime: the map is registered without a BPF link, so it stays registered after
``bpftool`` exits, exactly like a loaded module, until :func:`unregister` (``bpftool
struct_ops unregister``). That is deliberate: the registration must outlive the process that
made it only as long as the trial's registry entry names it, and ``cctestbed cleanup`` must be
able to remove it after a SIGKILL, which a link held by a dead process's fd would make
impossible to tell apart from a live one. An object whose map is in ``.struct_ops.link``
(registration through a link, kernel 6.4+) is registered the same way: its section is
renamed ``.struct_ops`` in the copy.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import re
import shutil
import struct
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

#: How a trial names a BPF object as its cc: ``bpf:path/to/object.bpf.o``; of an object that
#: defines several tcp_congestion_ops, ``bpf:path/to/object.bpf.o#NAME`` chooses one by its name.
BPF_PREFIX = "bpf:"
#: Prefix of every name the testbed registers (cleanup removes unclaimed ones).
NAME_PREFIX = "cct"
TCP_CA_NAME_MAX = 16
EM_BPF = 247


class BpfError(RuntimeError):
    """The object cannot be used, or the kernel refused it."""


# --- where the project's objects are ------------------------------------------------------


def bpf_dir() -> Path:
    """The built objects: $CCTESTBED_BPF_DIR, else the workspace's target/bpf."""
    env = os.environ.get("CCTESTBED_BPF_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[3] / "target" / "bpf"


def names_a_file(spec: str) -> bool:
    """A ``bpf:`` cc's object (before any ``#NAME``) is a file's path, not a project object's
    name: it has a ``/`` or ends in ``.o``."""
    path = spec.partition("#")[0]
    return "/" in path or path.endswith(".o")


def with_object_path(cc: Any, change: Callable[[str], str]) -> Any:
    """``cc`` with ``change`` applied to the object path of a ``bpf:PATH`` (a ``#NAME`` kept);
    anything else, a project object's name (``bpf:bbr``) among it, as it is."""
    if not (isinstance(cc, str) and cc.startswith(BPF_PREFIX) and names_a_file(cc[len(BPF_PREFIX):])):
        return cc
    path, sep, name = cc[len(BPF_PREFIX):].partition("#")
    return BPF_PREFIX + change(path) + sep + name


def resolve_object(spec: str) -> Path:
    """The object a ``bpf:`` cc names: a path (relative to the file that names it, made
    absolute when the file is read; else to the working directory), or the name of one of the
    project's objects (``bpf:bbr``, ``bpf:reno``: target/bpf/NAME.bpf.o)."""
    if not names_a_file(spec):
        return bpf_dir() / f"{spec}.bpf.o"
    return Path(spec).expanduser()


# --- the kernel's support ------------------------------------------------------------------


def kernel_support() -> Optional[str]:
    """None if this kernel and host can register BPF congestion controls, else why not."""
    if not Path("/sys/kernel/btf/vmlinux").exists():
        return "this kernel has no BTF (/sys/kernel/btf/vmlinux; CONFIG_DEBUG_INFO_BTF=y is needed)"
    if shutil.which("bpftool") is None:
        return "bpftool is not installed: run `make kernel-deps` (apt-get install bpftool)"
    if os.geteuid() != 0:
        return "registering a BPF congestion control requires root"
    try:
        btf = Path("/sys/kernel/btf/vmlinux").read_bytes()
    except OSError as e:
        return f"cannot read /sys/kernel/btf/vmlinux: {e.strerror or e}"
    if kernel_hz() is None:
        return ("the kernel's CONFIG_HZ is unknown (no /proc/config.gz, no /boot/config-RELEASE): the BPF port "
                "of BBR keeps its timers in jiffies as tcp_bbr.c does")
    if b"bpf_struct_ops_tcp_congestion_ops\0" not in btf:
        return ("this kernel cannot load congestion controls from BPF (no struct_ops for tcp_congestion_ops; "
                "Linux 5.6+ with CONFIG_BPF_JIT and CONFIG_BPF_SYSCALL is needed)")
    return None


# --- ELF ------------------------------------------------------------------------------------


@dataclass
class Section:
    name: str
    index: int
    offset: int
    size: int
    name_offset: int


@dataclass
class RodataVar:
    offset: int  # in the file
    size: int
    default: int


@dataclass
class BpfObject:
    """What :func:`inspect` found in an object."""

    path: Path
    data: bytes
    #: read-only globals a trial may set: name -> where and how big
    rodata: dict[str, RodataVar] = field(default_factory=dict)
    #: file offset of each tcp_congestion_ops' name field, and its current name
    ops: list[tuple[int, str]] = field(default_factory=list)
    #: file offset of the section name ".struct_ops.link" in the section name table, if any
    link_names: list[int] = field(default_factory=list)
    #: file offsets of the names of the tcp_congestion_ops a trial did not choose (``bpf:PATH#NAME``
    #: of an object that defines several): :func:`build` empties them, and a nameless
    #: tcp_congestion_ops is one the simulator's loader skips (the kernel refuses to register it)
    unchosen: list[int] = field(default_factory=list)


def _sections(data: bytes) -> list[Section]:
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise BpfError("not a 64-bit little-endian ELF object")
    (e_machine,) = struct.unpack_from("<H", data, 18)
    if e_machine != EM_BPF:
        raise BpfError(f"not a BPF object (ELF machine {e_machine}; compile with clang -target bpf)")
    e_shoff, = struct.unpack_from("<Q", data, 40)
    e_shentsize, e_shnum, e_shstrndx = struct.unpack_from("<HHH", data, 58)
    raw = []
    for i in range(e_shnum):
        sh_name, _type, _flags, _addr, sh_offset, sh_size = struct.unpack_from("<IIQQQQ", data, e_shoff + i * e_shentsize)
        raw.append((sh_name, sh_offset, sh_size))
    str_off = raw[e_shstrndx][1]

    def cstr(off: int) -> str:
        end = data.index(b"\0", off)
        return data[off:end].decode(errors="replace")

    return [Section(cstr(str_off + n), i, off, size, str_off + n) for i, (n, off, size) in enumerate(raw)]


def _symbols(data: bytes, secs: list[Section]) -> list[tuple[str, int, int, int]]:
    """(name, section index, value, size) of every symbol."""
    symtab = next((s for s in secs if s.name == ".symtab"), None)
    if symtab is None:
        return []
    strtab = next((s for s in secs if s.name == ".strtab"), None)
    if strtab is None:
        return []
    out = []
    for k in range(symtab.size // 24):
        st_name, _info, _other, st_shndx, st_value, st_size = struct.unpack_from("<IBBHQQ", data, symtab.offset + 24 * k)
        off = strtab.offset + st_name
        name = data[off:data.index(b"\0", off)].decode(errors="replace")
        out.append((name, st_shndx, st_value, st_size))
    return out


def _btf_name_offset(path: Path) -> int:
    """Byte offset of ``name`` in the object's own struct tcp_congestion_ops (its BTF)."""
    p = subprocess.run(["bpftool", "-j", "btf", "dump", "file", str(path)], capture_output=True, text=True)
    if p.returncode != 0:
        raise BpfError(f"cannot read the object's BTF (compile with clang -g): {p.stderr.strip()}")
    for t in json.loads(p.stdout).get("types", []):
        if t.get("kind") == "STRUCT" and t.get("name") == "tcp_congestion_ops":
            for m in t.get("members", []):
                if m.get("name") == "name":
                    return int(m["bits_offset"]) // 8
    raise BpfError("the object's BTF has no struct tcp_congestion_ops with a name field")


def inspect(path: Path) -> BpfObject:
    """Reads an object: its parameters (read-only globals) and its tcp_congestion_ops."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise BpfError(f"cannot read {path}: {e.strerror or e}") from None
    return _inspect(Path(path), data)


@functools.lru_cache(maxsize=32)
def _inspect(path: Path, data: bytes) -> BpfObject:
    """:func:`inspect` of these bytes, once: checking a trial and building its configuration ask
    for the same object several times, and reading its BTF runs bpftool. Callers only read the
    result (:func:`build` copies the bytes it patches; :func:`user_object` chooses among the
    tcp_congestion_ops in a copy)."""
    try:
        secs = _sections(data)
        syms = _symbols(data, secs)
    except (struct.error, IndexError, ValueError):
        raise BpfError("not a readable ELF object") from None
    obj = BpfObject(path, data)
    by_index = {s.index: s for s in secs}
    ops_secs = [s for s in secs if s.name in (".struct_ops", ".struct_ops.link")]
    if not ops_secs:
        raise BpfError("no struct tcp_congestion_ops in the object (declare it in SEC(\".struct_ops\"))")
    name_off = _btf_name_offset(path)
    for s in ops_secs:
        if s.name == ".struct_ops.link":
            obj.link_names.append(s.name_offset)
            # the BTF names the section's data too (its DATASEC): renamed with it
            btf = next((b for b in secs if b.name == ".BTF"), None)
            if btf is not None:
                chunk = data[btf.offset:btf.offset + btf.size]
                at = chunk.find(b"\0.struct_ops.link\0")
                while at >= 0:
                    obj.link_names.append(btf.offset + at + 1)
                    at = chunk.find(b"\0.struct_ops.link\0", at + 1)
        for name, shndx, value, size in syms:
            if shndx == s.index and size > name_off and name:
                at = s.offset + value + name_off
                raw = data[at:at + TCP_CA_NAME_MAX]
                obj.ops.append((at, raw.split(b"\0", 1)[0].decode(errors="replace")))
    if not obj.ops:
        raise BpfError("no struct tcp_congestion_ops variable in the object's .struct_ops section")
    for name, shndx, value, size in syms:
        sec = by_index.get(shndx)
        if sec is None or not sec.name.startswith(".rodata") or size not in (1, 2, 4, 8) or not name:
            continue
        if name.startswith(".") or "." in name:
            continue
        at = sec.offset + value
        default = int.from_bytes(data[at:at + size], "little")
        obj.rodata[name] = RodataVar(at, size, default)
    return obj


def _shown(v: object) -> str:
    """A parameter value as the user wrote it: 3 rather than 3.0."""
    return f"{v:g}" if isinstance(v, float) and math.isfinite(v) else repr(v)


def encode_values(obj: BpfObject, values: Mapping[str, float], field_prefix: str) -> tuple[dict[str, int], list[str]]:
    """Checks ``values`` against the object's read-only globals; returns the integers to write
    and one problem per bad entry (``field: value: what is valid``)."""
    out: dict[str, int] = {}
    problems = []
    valid = ", ".join(sorted(obj.rodata)) or "none (the object declares no const volatile globals)"
    for k, v in values.items():
        var = obj.rodata.get(k)
        if var is None:
            problems.append(f"{field_prefix}.{k}: {_shown(v)}: {obj.path.name} has no such parameter; valid are {valid}")
            continue
        if not (isinstance(v, (int, float)) and math.isfinite(v) and float(v).is_integer()):
            problems.append(f"{field_prefix}.{k}: {_shown(v)}: must be a whole number (it is a {8 * var.size}-bit integer)")
            continue
        n = int(v)
        if not 0 <= n < 1 << (8 * var.size):
            problems.append(f"{field_prefix}.{k}: {_shown(v)}: must be from 0 to {(1 << (8 * var.size)) - 1} "
                            f"(a {8 * var.size}-bit unsigned integer)")
            continue
        out[k] = n
    return out, problems


def user_object(cc: str, params: Mapping[str, float], index: int) -> tuple[Optional[tuple[BpfObject, dict[str, int]]], list[str]]:
    """The object a group's ``bpf:`` cc names and the read-only values its ``params`` set (the
    one mapping from a trial to an object, for the kernel backend and the simulator alike), or
    the problems (``flows[i].cc`` / ``flows[i].params.x``: value: what is valid).

    ``bpf:bbr-shallow``, ``bpf:bbr-adaptive`` and ``bpf:bbr-stable-rtprop`` name the project's
    BBR port with that variant's parameters, given by the simulator's names and units (the
    ``params`` of the Rust variant), as the kernel backend runs the variants themselves."""
    spec, _, chosen = cc[len(BPF_PREFIX):].partition("#")
    variant = spec in BBR_VARIANTS
    path = resolve_object(BBR_OBJECT if variant else spec)
    try:
        obj = inspect(path)
    except BpfError as e:
        return None, [f"flows[{index}].cc: {cc!r}: {e}"]
    names = ", ".join(n for _, n in obj.ops)
    if chosen:
        keep = [o for o in obj.ops if o[1] == chosen]
        if not keep:
            return None, [f"flows[{index}].cc: {cc!r}: {path.name} has no tcp_congestion_ops named {chosen!r}; it has {names}"]
        obj = dataclasses.replace(obj, ops=keep[:1], unchosen=[at for at, n in obj.ops if n != chosen])
    elif len(obj.ops) > 1:
        return None, [f"flows[{index}].cc: {cc!r}: {path.name} defines {len(obj.ops)} tcp_congestion_ops ({names}); "
                      f"choose one as bpf:{spec}#NAME"]
    if variant:
        values, bad = bbr_values(spec, params, f"flows[{index}].params")
    else:
        values, bad = encode_values(obj, params, f"flows[{index}].params")
    return (None, bad) if bad else ((obj, values), [])


def patched_object(cc: str, params: Mapping[str, float], index: int) -> tuple[Optional[bytes], list[str]]:
    """The bytes the simulator loads for a ``bpf:`` group: the object with its read-only data
    written as the kernel backend writes it before registering (its own name kept)."""
    plan, problems = user_object(cc, params, index)
    if plan is None:
        return None, problems
    obj, values = plan
    return build(obj, obj.ops[0][1] if len(obj.ops) == 1 else "", values), []


def build(obj: BpfObject, name: str, values: Mapping[str, int]) -> bytes:
    """A copy of the object whose tcp_congestion_ops is called ``name`` and whose read-only
    globals hold ``values``."""
    if not re.fullmatch(r"[A-Za-z0-9_]{1,15}", name):
        raise BpfError(f"invalid congestion control name {name!r} (1 to 15 letters, digits, _)")
    if len(obj.ops) != 1:
        raise BpfError(f"the object defines {len(obj.ops)} tcp_congestion_ops; one is supported")
    data = bytearray(obj.data)
    at, _ = obj.ops[0]
    data[at:at + TCP_CA_NAME_MAX] = name.encode().ljust(TCP_CA_NAME_MAX, b"\0")
    for k, v in values.items():
        var = obj.rodata[k]
        data[var.offset:var.offset + var.size] = v.to_bytes(var.size, "little")
    for at in obj.unchosen:
        data[at:at + TCP_CA_NAME_MAX] = bytes(TCP_CA_NAME_MAX)
    for off in obj.link_names:  # ".struct_ops.link" -> ".struct_ops": registered without a link
        data[off + len(".struct_ops")] = 0
    return bytes(data)


# --- registering -------------------------------------------------------------------------------


def register(path: Path, nameless: int = 0) -> int:
    """Registers the object's congestion control; returns the struct_ops map id. ``nameless``:
    how many of its tcp_congestion_ops had their names emptied (those a ``bpf:PATH#NAME`` did
    not choose, :func:`build`): bpftool registers every struct_ops map of an object, the kernel
    refuses each nameless one, and bpftool then exits non-zero having registered the chosen one.
    Any other outcome is an error, and whatever it registered is unregistered first."""
    p = subprocess.run(["bpftool", "struct_ops", "register", str(path)], capture_output=True, text=True)
    out = p.stdout + p.stderr
    ids = [int(m) for m in re.findall(r"Registered tcp_congestion_ops \S+ id (\d+)", out)]
    refused = re.findall(r"can't register struct_ops (\S+)", out)
    if len(ids) == 1 and (p.returncode == 0 or (nameless and len(refused) == nameless)):
        return ids[0]
    for map_id in ids:  # registered by this call a moment ago: its id is not stale
        subprocess.run(["bpftool", "struct_ops", "unregister", "id", str(map_id)], capture_output=True)
    msg = (p.stderr or p.stdout).strip().splitlines()
    # libbpf prints the verifier log; its last lines say what failed
    raise BpfError("the kernel refused the BPF congestion control: " + " | ".join(msg[-6:]))


def registered() -> dict[int, str]:
    """Every registered BPF tcp_congestion_ops: map id -> congestion control name."""
    if shutil.which("bpftool") is None:
        return {}
    p = subprocess.run(["bpftool", "-j", "struct_ops", "dump"], capture_output=True, text=True)
    if p.returncode != 0 or not p.stdout.strip():
        return {}
    try:
        entries = json.loads(p.stdout)
    except ValueError:
        return {}
    out: dict[int, str] = {}
    info: Optional[dict[str, Any]] = None
    for e in entries if isinstance(entries, list) else []:
        if "bpf_map_info" in e:
            info = e["bpf_map_info"]
        elif "bpf_struct_ops_tcp_congestion_ops" in e and info is not None:
            name = e["bpf_struct_ops_tcp_congestion_ops"].get("data", {}).get("name")
            if isinstance(name, str):
                out[int(info["id"])] = name
            info = None
    return out


def unregister(map_id: int, name: str) -> bool:
    """Unregisters map ``map_id`` if it still is congestion control ``name`` (map ids are
    reused, so a stale id is never trusted alone). True if it was removed."""
    if registered().get(map_id) != name:
        return False
    p = subprocess.run(["bpftool", "struct_ops", "unregister", "id", str(map_id)], capture_output=True, text=True)
    return p.returncode == 0


def unique_name(trial_id: str, group: int) -> str:
    name = f"{NAME_PREFIX}{trial_id}{group}"
    assert len(name) < TCP_CA_NAME_MAX, name
    return name


def is_testbed_name(name: str) -> bool:
    return re.fullmatch(rf"{NAME_PREFIX}[0-9a-f]{{6}}\d+", name) is not None


# --- the BPF port of BBRv1 (bpf/bbr.bpf.c) and the simulator's BBR parameters ---------------

#: The BBR variants that run on the kernel as the BPF port; ``bbr``/``bbr1`` too when given params.
BBR_VARIANTS = ("bbr-shallow", "bbr-adaptive", "bbr-stable-rtprop")
BBR_OBJECT = "bbr"
#: Most higher probes the BPF stable RTprop estimator keeps (MAX_STABLE_PROBES in bbr.bpf.c).
MAX_STABLE_PROBES = 16


def _gain(x: float) -> int:
    return round(x * 256)


def _ppm(x: float) -> int:
    return round(x * 1_000_000)


@functools.lru_cache(maxsize=1)
def kernel_hz() -> Optional[int]:
    """The running kernel's CONFIG_HZ (jiffies per second), from /proc/config.gz or
    /boot/config-RELEASE; None if neither says."""
    import gzip

    for path, opener in ((Path("/proc/config.gz"), gzip.open), (Path(f"/boot/config-{os.uname().release}"), open)):
        try:
            with opener(path, "rt") as f:  # type: ignore[operator]
                for line in f:
                    if line.startswith("CONFIG_HZ="):
                        return int(line.split("=", 1)[1])
        except (OSError, ValueError):
            continue
    return None


def _jiffies(seconds: float) -> int:
    """A window in seconds as jiffies (``bbr_min_rtt_win_sec * HZ``)."""
    return round(seconds * (kernel_hz() or 250))


def _jiffies_up(seconds: float) -> int:
    """A hold in seconds as jiffies, rounded up as ``msecs_to_jiffies`` does."""
    hz = kernel_hz() or 250
    return -(-round(seconds * 1000) * hz // 1000)


def _whole(x: float) -> int:
    return int(x)  # the simulator truncates its count parameters (`as u32`)


#: simulator parameter -> (the object's read-only global, conversion to its integer units)
BBR_PARAMS: dict[str, tuple[str, Any]] = {
    # tcp_bbr.c's exact integers for its two irrational gains, as the simulator uses them
    "high_gain": ("bbr_high_gain", lambda x: 256 * 2885 // 1000 + 1 if x == 2.885 else _gain(x)),
    "drain_gain": ("bbr_drain_gain", lambda x: 256 * 1000 // 2885 if x == 1.0 / 2.885 else _gain(x)),
    "cwnd_gain": ("bbr_cwnd_gain", _gain),
    "probe_gain": ("bbr_probe_gain", _gain),
    "drain_cycle_gain": ("bbr_drain_cycle_gain", _gain),
    "cycle_rand": ("bbr_cycle_rand", _whole),
    "bw_filter_rounds": ("bbr_bw_rtts", _whole),
    "probe_rtt_interval": ("bbr_min_rtt_win_jiffies", _jiffies),
    "probe_rtt_duration": ("bbr_probe_rtt_mode_jiffies", _jiffies_up),
    "cwnd_min_target": ("bbr_cwnd_min_target", _whole),
    "full_bw_thresh": ("bbr_full_bw_thresh", _gain),
    "full_bw_cnt": ("bbr_full_bw_cnt", _whole),
    "extra_acked_gain": ("bbr_extra_acked_gain", _gain),
    "extra_acked_win_rtts": ("bbr_extra_acked_win_rtts", _whole),
    "pacing_margin_percent": ("bbr_pacing_margin_bp", lambda x: round(x * 100)),
    "tso_budget": ("bbr_tso_budget", lambda x: int(x != 0)),
    "lt_bw": ("bbr_lt_bw", lambda x: int(x != 0)),
    "adaptive_cap": ("bbr_adaptive_cap", lambda x: int(x != 0)),
    "adaptive_loss_thresh": ("bbr_adaptive_loss_thresh_ppm", _ppm),
    "adaptive_step": ("bbr_adaptive_step", _gain),
    "adaptive_delivery_margin": ("bbr_adaptive_delivery_margin_ppm", _ppm),
    "adaptive_rtt_margin": ("bbr_adaptive_rtt_margin_ppm", _ppm),
    "adaptive_min_gain": ("bbr_adaptive_min_gain", _gain),
    "adaptive_max_gain": ("bbr_adaptive_max_gain", _gain),
    "stable_rtprop": ("bbr_stable_rtprop", lambda x: int(x != 0)),
    "stable_rtprop_probes": ("bbr_stable_rtprop_probes", _whole),
    "stable_rtprop_tolerance": ("bbr_stable_rtprop_tolerance_ppm", _ppm),
    "stable_rtprop_jump": ("bbr_stable_rtprop_jump_ppm", _ppm),
}


def uses_bbr_port(cc: str, params: Mapping[str, float]) -> bool:
    """Whether a flow group with this cc runs as the BPF port of BBR on the kernel."""
    return cc in BBR_VARIANTS or (cc in ("bbr", "bbr1") and bool(params))


def bbr_values(cc: str, params: Mapping[str, float], field_prefix: str) -> tuple[dict[str, int], list[str]]:
    """The BPF port's read-only globals for a simulator BBR (``cc`` and its ``params``): every
    parameter at the value the simulator would use, in the object's integer units."""
    from ..config import algorithms

    full = {**algorithms()[cc], **params}
    out: dict[str, int] = {}
    problems = []
    for k, v in sorted(full.items()):
        conv = BBR_PARAMS.get(k)
        if conv is None:
            problems.append(f"{field_prefix}.{k}: {v!r}: the BPF port of BBR has no such parameter")
            continue
        var, f = conv
        out[var] = int(f(v))
    n = full.get("stable_rtprop_probes", 3)
    if full.get("stable_rtprop") and int(n) > MAX_STABLE_PROBES:
        problems.append(f"{field_prefix}.stable_rtprop_probes: {n!r}: the BPF port keeps at most "
                        f"{MAX_STABLE_PROBES} probes; valid are 1 to {MAX_STABLE_PROBES} on the kernel backend")
    return out, problems
