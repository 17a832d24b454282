"""Where a results directory goes: the checks made before anything runs, the atomic write
into place, and the leftovers of runs that were killed.

Kept apart from :mod:`cctestbed.results` so that a command checks its destination before it
loads the libraries that build results (polars, NumPy, pyarrow), and can run the simulation
while they load.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional, Union


class ReplaceRefused(ValueError):
    """``--force`` was asked to replace something that is not a results directory of this tool."""


#: A directory holding all of these was written by :func:`write_dir` (a trial's results).
MARKER_FILES = ("trial.toml", "summary.json")
#: ... or these: captures analysed without their trial (``cctestbed analyze``).
ANALYSIS_MARKER_FILES = ("capture.json", "summary.json")


def _holds(directory: Path, inputs: Iterable[Union[str, Path]]) -> Optional[Path]:
    """The first of ``inputs`` that is ``directory`` itself or lies inside it, else None."""
    real = directory.resolve()
    for p in inputs:
        pr = Path(p).resolve()
        if pr == real or real in pr.parents:
            return Path(p)
    return None


def check_replaceable(dest: Union[str, Path], protect: Iterable[Union[str, Path]] = ()) -> None:
    """Raise :class:`ReplaceRefused` unless ``dest`` may be replaced by a new results directory.

    Only a results directory of this tool (one holding trial.toml and summary.json) may be
    replaced, and never the working directory or one of its parents, nor a directory holding
    one of the ``protect`` paths: every input of the command (trial file, link trace, size CDF,
    capture). A path that does not exist is fine.
    """
    dest = Path(dest)
    if not dest.exists() and not dest.is_symlink():
        return
    real = dest.resolve()
    if dest.is_symlink() or not dest.is_dir():
        raise ReplaceRefused(f"{dest} is not a directory; --force replaces only a results directory")
    cwd = Path.cwd().resolve()
    if real == cwd or real in cwd.parents:
        raise ReplaceRefused(
            f"{dest} is the working directory or one of its parents; --force replaces only a results directory"
        )
    held = _holds(real, protect)
    if held is not None:
        raise ReplaceRefused(f"{dest} holds {held}, one of this command's inputs; choose another output directory")
    missing = [f for f in MARKER_FILES if not (dest / f).is_file()]
    analysed = all((dest / f).is_file() for f in ANALYSIS_MARKER_FILES)
    if missing and not analysed:
        raise ReplaceRefused(
            f"{dest} is not a cctestbed results directory (no {', '.join(missing)}); "
            "--force replaces only a results directory written by cctestbed"
        )


class DestinationError(ValueError):
    """The results cannot be written where asked (a path through a file, a read-only directory)."""


#: The longest name a destination may have, in bytes: the temporaries beside it add their marks
#: (``.<name>.tmp-XXXXXXXX``) and must stay within a file system's 255.
MAX_NAME_BYTES = 200


def check_destination(dest: Union[str, Path], temporaries: bool = True) -> None:
    """Raise :class:`DestinationError` unless a directory can be created at ``dest``: not a
    symbolic link (a dangling one included), every existing ancestor a directory, no name on
    the way longer than the file system takes (the last at most :data:`MAX_NAME_BYTES`), and
    the nearest existing ancestor one a directory can be made in: tried with a directory
    (``.cctestbed-probe-*``) made and removed at once, since root passes every permission check and a file system such
    as /proc takes no new directory whatever its mode. Checked before a trial runs, so a bad
    ``-o`` costs nothing; every message names ``dest`` as it was given. ``temporaries``: the
    directory is written beside itself under a longer name (a results directory); without it
    (the folder a figure is written into) its name may be as long as the file system takes."""
    given = Path(dest)
    dest = given.absolute()
    _check_lengths(given, MAX_NAME_BYTES if temporaries else 255)
    if dest.is_symlink() and (temporaries or not dest.is_dir()):
        target = os.readlink(dest)
        what = "to a directory" if dest.is_dir() else "to nothing" if not dest.exists() else "to a file"
        raise DestinationError(f"{given} is a symbolic link {what} ({target}); a results directory is written "
                               "where the link is: choose another output directory")
    if dest.exists() and not dest.is_dir():
        raise DestinationError(f"{given} is a file, not a directory; choose another output directory")
    if not temporaries and dest.is_dir():  # written into, not beside
        _check_can_create_in(given, dest)
        return
    for anc in dest.parents:
        if anc.is_symlink() and not anc.exists():
            raise DestinationError(f"{anc} is a symbolic link to nothing ({os.readlink(anc)}), so {given} "
                                   "cannot be created; choose another output directory")
        if anc.exists():
            if not anc.is_dir():
                raise DestinationError(
                    f"{anc} is a file, not a directory, so {given} cannot be created; choose another output directory"
                )
            _check_names(given, dest, anc)
            _check_can_create_in(given, anc)
            return


def _check_lengths(given: Path, last: int = MAX_NAME_BYTES) -> None:
    """The last name of ``given`` is at most ``last`` bytes long and none is longer than any
    file system takes; checked before the path is looked up, which such a name would fail."""
    path = given.absolute()
    if len(path.name.encode()) > last:
        raise DestinationError(f"{given}: the name is longer than {last} bytes "
                               f"({len(path.name.encode())}); choose a shorter one")
    for part in path.parts:
        if len(part.encode()) > 255:
            raise DestinationError(f"{given}: the name {part} is longer than 255 bytes, the most a file "
                                   "system takes; choose a shorter one")
    if len(os.fsencode(path)) >= 4000:
        raise DestinationError(f"{given}: the path is longer than 4,000 bytes; choose a shorter one")


def _check_names(given: Path, dest: Path, anc: Path) -> None:
    """Every name ``dest`` has below its existing ancestor ``anc`` fits the file system there."""
    try:
        most = os.pathconf(anc, "PC_NAME_MAX")
    except (OSError, ValueError):
        most = 255
    for part in dest.relative_to(anc).parts:
        if len(part.encode()) > most:
            raise DestinationError(f"{given}: the name {part} is longer than {most} bytes, the most "
                                   f"{anc} takes; choose a shorter one")


def _check_can_create_in(given: Path, anc: Path) -> None:
    """A directory can be made in ``anc`` (one is made and removed at once)."""
    if not os.access(anc, os.W_OK | os.X_OK):
        raise DestinationError(f"cannot create {given}: {anc} is not writable")
    try:
        probe = tempfile.mkdtemp(prefix=".cctestbed-probe-", dir=anc)
    except OSError as e:
        raise DestinationError(f"cannot create {given}: {anc} takes no new directory ({e.strerror})") from None
    os.rmdir(probe)


#: Every temporary directory this project makes beside a destination holds this file with this
#: text from the moment it exists; cleanup removes a leftover only when it does, so a user's own
#: ``.res.tmp-mywork`` is never touched.
OWNER_FILE = ".cctestbed-temporary"
OWNER_TEXT = "a temporary directory of cctestbed: removed with its directory when the run that made it is gone\n"


def mark_owned(directory: Path) -> None:
    """Mark ``directory`` as a temporary directory of this project (see :data:`OWNER_FILE`)."""
    (directory / OWNER_FILE).write_text(OWNER_TEXT, encoding="utf-8")


def is_owned(directory: Path) -> bool:
    """Whether ``directory`` carries this project's temporary-directory marker."""
    try:
        marker = directory / OWNER_FILE
        return marker.is_file() and not marker.is_symlink() and marker.read_text(encoding="utf-8") == OWNER_TEXT
    except (OSError, UnicodeDecodeError):
        return False


#: Temporary names beside a destination: ``.<name>.tmp-*`` while being written (locked by the
#: writer), ``.<name>.old-*`` holding the directory a ``--force`` run moved aside.
TMP_MARK = ".tmp-"
OLD_MARK = ".old-"
_LEFTOVER = re.compile(r"^\.[^/]+\.(tmp|old)-[a-z0-9_]+$")


def _lock_dir(path: Path) -> Optional[int]:
    """An exclusive flock on directory ``path`` (held until the fd is closed), or None if taken."""
    import fcntl

    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def clean_stale(parent: Union[str, Path]) -> tuple[list[Path], list[Path]]:
    """Remove the temporary directories that killed runs left in ``parent``.

    A run writes its results into ``.<name>.tmp-*`` holding a lock on it and this project's marker
    (:data:`OWNER_FILE`); a marked directory whose lock can be taken was left by a run that died
    (SIGKILL, power loss) and is removed. A directory without the marker is not ours and stays. Returns
    (removed, kept): kept are ``.<name>.old-*`` directories holding results a ``--force`` run had
    moved aside when it was killed; they are reported, never deleted.
    """
    parent = Path(parent)
    removed: list[Path] = []
    kept: list[Path] = []
    try:
        entries = list(parent.iterdir())
    except OSError:
        return removed, kept
    for p in entries:
        m = _LEFTOVER.match(p.name)
        if m is None or p.is_symlink() or not p.is_dir():
            continue
        if m.group(1) == "tmp":
            if not is_owned(p):
                continue  # a name like ours, but a directory this project did not make
            try:
                fd = _lock_dir(p)
            except OSError:
                continue  # gone meanwhile, or not ours to open
            if fd is None:
                continue  # a run is writing it now
            try:
                shutil.rmtree(p, ignore_errors=True)
                removed.append(p)
            finally:
                os.close(fd)
        elif any(p.iterdir()):
            kept.append(p)
    return removed, kept


def write_dir(
    dest: Path,
    write: Callable[[Path], None],
    force: bool = False,
    replaceable: Callable[[Path], None] = check_replaceable,
) -> Path:
    """Fill a temporary directory beside ``dest`` with ``write`` and rename it to ``dest``.

    An existing ``dest`` is refused (``FileExistsError``) unless ``force``; then, if
    ``replaceable`` accepts it (by default :func:`check_replaceable`: a results directory), it is
    moved aside, the new directory renamed into place, and the old one deleted. On any error the
    temporary directory is removed and ``dest`` is left as it was.
    """
    dest = dest.absolute()
    if dest.exists() and not force:
        raise FileExistsError(f"{dest} exists; pass force=True (--force) to replace it")
    if force:
        replaceable(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    clean_stale(dest.parent)
    # Created under another name and locked before it is renamed to a .tmp- name, so that
    # clean_stale never sees an unlocked directory of a live run.
    new = Path(tempfile.mkdtemp(prefix=f".{dest.name}.new-", dir=dest.parent))
    lock = _lock_dir(new)
    mark_owned(new)
    tmp = new.with_name(new.name.replace(".new-", TMP_MARK, 1))
    os.rename(new, tmp)
    try:
        write(tmp)
        os.chmod(tmp, 0o755)
        (tmp / OWNER_FILE).unlink()
        if dest.exists():
            if not force:
                raise FileExistsError(f"{dest} exists; pass force=True (--force) to replace it")
            replaceable(dest)
            old = Path(tempfile.mkdtemp(prefix=f".{dest.name}{OLD_MARK}", dir=dest.parent))
            os.rename(dest, old / "previous")
            os.rename(tmp, dest)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        if lock is not None:
            os.close(lock)
    return dest


#: The one mark of a file this project wrote: PNG, SVG and PDF figures carry it as their creating
#: software, HTML reports as their generator. An existing file is overwritten only when it has it.
GENERATOR = "cctestbed"
FIGURE_SUFFIXES = (".png", ".svg", ".pdf")
REPORT_SUFFIXES = (".html", ".htm")


def written_by_us(path: Path) -> bool:
    """Whether the regular file ``path`` carries :data:`GENERATOR` in its first or last 64 KiB
    (a PNG's text chunk and an HTML head lead the file; a PDF's information dictionary ends it)."""
    try:
        with open(path, "rb") as f:
            head = f.read(65536)
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 65536))
            tail = f.read(65536)
    except OSError:
        return False
    mark = GENERATOR.encode()
    return mark in head or mark in tail


def check_output_file(dest: Union[str, Path], suffixes: tuple[str, ...]) -> None:
    """Raise :class:`DestinationError` unless one file may be written at ``dest`` (``plot -o``,
    ``compare -o``, ``report -o``): a suffix among ``suffixes``; not an existing directory,
    device or other non-file; an existing file only if this project wrote it
    (:func:`written_by_us`: so never one of the command's inputs, which are results
    directories and their data files); and a parent that can be created."""
    dest = Path(dest)
    if dest.suffix.lower() not in suffixes:
        raise DestinationError(
            f"{dest}: cannot write a {dest.suffix or 'suffix-less'} file; valid suffixes: {', '.join(suffixes)}"
        )
    _check_lengths(dest)
    if dest.is_symlink() or (dest.exists() and not dest.is_file()):
        raise DestinationError(f"{dest} exists and is not a regular file; choose another output path")
    if dest.exists() and not written_by_us(dest):
        raise DestinationError(
            f"{dest} exists and was not written by cctestbed; choose another output path or remove it first"
        )
    check_destination(dest.parent, temporaries=False)


def write_file_atomically(dest: Path, write: Callable[[Path], object]) -> Path:
    """Call ``write`` with a temporary path beside ``dest`` (same suffix) and rename the file into
    place: an interrupted or failed write leaves ``dest`` as it was and nothing beside it."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{dest.stem}.tmp-", suffix=dest.suffix, dir=dest.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        write(tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return dest


@contextlib.contextmanager
def undone_if_interrupted(*paths: Union[str, Path]) -> Iterator[None]:
    """Ctrl-C (or an error in its place) inside the block removes what the block created for
    ``paths`` and nothing else: the first of each path's directories (or the path itself) that
    did not exist before, with all it holds; and, in a directory that existed (the destination of
    several figures), each new file in it that this project wrote (:func:`written_by_us`).
    Whatever existed before is left as it was."""
    from . import interrupt

    missing: list[Path] = []
    listed: dict[Path, set[str]] = {}
    for p in paths:
        path = Path(p).absolute()
        top = None
        for q in (path, *path.parents):
            if q.exists() or q.is_symlink():
                break
            top = q
        if top is not None:
            missing.append(top)
        elif path.is_dir() and not path.is_symlink():
            listed[path] = set(os.listdir(path))
    try:
        yield
    except BaseException as e:
        if isinstance(e, KeyboardInterrupt) or interrupt.pressed:
            for top in missing:
                if top.is_dir() and not top.is_symlink():
                    shutil.rmtree(top, ignore_errors=True)
                elif top.is_file() and written_by_us(top):
                    top.unlink(missing_ok=True)
            for d, before in listed.items():
                for name in set(os.listdir(d)) - before:
                    f = d / name
                    if f.is_file() and not f.is_symlink() and written_by_us(f):
                        f.unlink(missing_ok=True)
        raise
