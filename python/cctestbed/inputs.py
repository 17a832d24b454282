"""Every file a user gives a command is read here: one guarded reader.

A path must name a regular file (a symlink to one is fine). A FIFO, a device (``/dev/zero``), a
socket, a directory, a symlink loop or a dangling symlink is refused by name before it is opened,
so nothing blocks on a FIFO or reads a device without end; the file is then opened with
``O_NONBLOCK`` and checked again on the open descriptor (``fstat``), so one swapped in between
the two checks is refused as well. Each kind of input has a size limit, checked before reading
(and again while reading, for a file that grows): see :data:`LIMITS`. Text must be UTF-8; a
UTF-8 byte-order mark is accepted and dropped, a UTF-16 or UTF-32 one is refused as such, and
any other undecodable byte is named with its line. Every refusal is an :class:`InputError`
whose message begins with the path.

Captures have no size limit (the core reads them as a stream); they are checked to be regular
files that start with a pcap or pcapng header (:func:`check_capture`).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import IO, Iterator, Optional, Union

MiB = 1 << 20

#: The largest file of each kind that is read, in bytes. A trial or sweep file is a page of
#: settings (a 100,000-entry arrivals list is about 1 MB); a trace of the longest accepted
#: (10,000,000 opportunities of up to 10 digits each) is about 110 MB; a CDF of 100,000 points a
#: few MB; a summary.json of 10,000 flows a few MB (results JSON files: 64 MB).
LIMITS = {
    "trial file": 16 * MiB,
    "sweep file": 16 * MiB,
    "trace": 128 * MiB,
    "CDF": 16 * MiB,
    "JSON file": 64 * MiB,
}

#: The first bytes of a pcap (micro- or nanosecond, either byte order) and of a pcapng file.
CAPTURE_MAGICS = (b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4", b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d",
                  b"\x0a\x0d\x0d\x0a")

_BOMS = (
    (b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"),
    (b"\xff\xfe", "UTF-16"), (b"\xfe\xff", "UTF-16"),
)
_UTF8_BOM = b"\xef\xbb\xbf"


class InputError(ValueError):
    """An input file that cannot be read; the message names the file (and the line, for text)."""


def _human(n: int) -> str:
    return f"{n / MiB:.0f} MB" if n >= MiB else f"{n} bytes"


def _kind_of(mode: int) -> Optional[str]:
    """What a file that is not a regular file is, in words; None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def check_file(path: Union[str, Path], kind: str = "file", missing: str = "no such file") -> os.stat_result:
    """The status of ``path``, a regular file (or a symlink to one), without opening it;
    :class:`InputError` naming what it is otherwise (``missing``: the words for a path that does
    not exist)."""
    p = os.fspath(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        try:
            os.lstat(p)
        except OSError:
            raise InputError(f"{p}: {missing}") from None
        raise InputError(f"{p}: a symlink to a file that does not exist; a {kind} must be a regular file") from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise InputError(f"{p}: a symlink loop (a link that leads back to itself); "
                             f"a {kind} must be a regular file") from None
        if e.errno == errno.ENAMETOOLONG:
            raise InputError(f"{p[:80]}...: the name is too long") from None
        raise InputError(f"{p}: cannot read: {e.strerror}") from None
    what = _kind_of(st.st_mode)
    if what is not None:
        raise InputError(f"{p}: is {what}, not a {kind}; give a regular file")
    return st


def open_file(path: Union[str, Path], kind: str = "file", limit: Optional[int] = None,
              missing: str = "no such file") -> IO[bytes]:
    """``path`` opened for reading in binary, after :func:`check_file` and, when ``limit`` is
    given, a check that it holds at most ``limit`` bytes."""
    p = os.fspath(path)
    check_file(p, kind, missing)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise InputError(f"{p}: a symlink loop (a link that leads back to itself); "
                             f"a {kind} must be a regular file") from None
        raise InputError(f"{p}: cannot read: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        what = _kind_of(st.st_mode)
        if what is not None:  # swapped after the first check
            raise InputError(f"{p}: is {what}, not a {kind}; give a regular file")
        if limit is not None and st.st_size > limit:
            raise InputError(f"{p}: {st.st_size:,} bytes; a {kind} larger than {_human(limit)} is refused")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: Union[str, Path], kind: str = "file", limit: Optional[int] = None,
               missing: str = "no such file") -> bytes:
    """The contents of ``path`` (see :func:`open_file`); ``limit`` defaults to the kind's."""
    limit = LIMITS.get(kind) if limit is None else limit
    with open_file(path, kind, limit, missing) as f:
        try:
            data = f.read() if limit is None else f.read(limit + 1)
        except OSError as e:
            raise InputError(f"{os.fspath(path)}: cannot read: {e.strerror}") from None
    if limit is not None and len(data) > limit:  # it grew while being read
        raise InputError(f"{os.fspath(path)}: more than {_human(limit)}; a {kind} larger than that is refused")
    return data


def _bom_problem(path: str, head: bytes, kind: str) -> Optional[str]:
    for bom, name in _BOMS:
        if head.startswith(bom):
            return (f"{path}: starts with a {name} byte-order mark: {name} text; "
                    f"a {kind} must be UTF-8 (save it as UTF-8)")
    return None


def decode(path: Union[str, Path], data: bytes, kind: str = "file") -> str:
    """``data`` (the contents of ``path``) as text: UTF-8, a leading UTF-8 byte-order mark
    dropped; :class:`InputError` naming the line of the first byte that is not UTF-8."""
    p = os.fspath(path)
    bom = _bom_problem(p, data[:4], kind)
    if bom is not None:
        raise InputError(bom)
    if data.startswith(_UTF8_BOM):
        data = data[len(_UTF8_BOM):]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise InputError(f"{p}: line {line}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start}); "
                         f"a {kind} must be UTF-8 text") from None


def read_text(path: Union[str, Path], kind: str = "file", limit: Optional[int] = None,
              missing: str = "no such file") -> str:
    """The UTF-8 text of ``path``, read through :func:`read_bytes` and :func:`decode`."""
    return decode(path, read_bytes(path, kind, limit, missing), kind)


def text_lines(path: Union[str, Path], kind: str = "file", limit: Optional[int] = None) -> Iterator[tuple[int, str]]:
    """(line number, text) for each line of ``path``, read as a stream (for long files such as
    traces): the same checks as :func:`read_text`, a line's decoding error naming that line."""
    p = os.fspath(path)
    limit = LIMITS.get(kind) if limit is None else limit
    with open_file(p, kind, limit) as f:
        seen = 0
        for n, raw in enumerate(f, 1):
            seen += len(raw)
            if limit is not None and seen > limit:
                raise InputError(f"{p}: more than {_human(limit)}; a {kind} larger than that is refused")
            if n == 1:
                bom = _bom_problem(p, raw[:4], kind)
                if bom is not None:
                    raise InputError(bom)
                if raw.startswith(_UTF8_BOM):
                    raw = raw[len(_UTF8_BOM):]
            try:
                yield n, raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise InputError(f"{p}: line {n}: not UTF-8 text (byte 0x{raw[e.start]:02x}); "
                                 f"a {kind} must be UTF-8 text") from None


def file_identity(path: Union[str, Path], kind: str = "file") -> tuple[str, int, int]:
    """(path, mtime, size) of a data file a trial names (a trace, a size CDF): the key its parsed
    contents are cached under, so an edited file is read again; :class:`InputError` when it is
    missing, not a regular file, or larger than the kind's limit."""
    p = os.fspath(path)
    st = check_file(p, kind)
    limit = LIMITS.get(kind)
    if limit is not None and st.st_size > limit:
        raise InputError(f"{p}: {st.st_size:,} bytes; a {kind} larger than {_human(limit)} is refused")
    return p, st.st_mtime_ns, st.st_size


def check_capture(path: Union[str, Path]) -> None:
    """Refuse ``path`` unless it is a regular file that starts with a pcap or pcapng header
    (read from the file's first bytes only: a capture's size is not limited)."""
    p = os.fspath(path)
    with open_file(p, "capture", missing="missing") as f:
        try:
            head = f.read(4)
        except OSError as e:
            raise InputError(f"{p}: cannot read: {e.strerror}") from None
    if not head:
        raise InputError(f"{p}: empty; not a pcap or pcapng capture")
    if head not in CAPTURE_MAGICS:
        raise InputError(f"{p}: not a pcap or pcapng capture (it starts with bytes {head.hex(' ')})")
