"""Ctrl-C in the ``cctestbed`` command: one line and exit code 130, never a traceback.

While the command starts (its modules load, its arguments are read) nothing has been written, so
Ctrl-C ends the process at once (:func:`while_starting`, installed by the entry point before
anything else loads). Once a command runs, Ctrl-C is Python's ``KeyboardInterrupt`` again
(:func:`command_started`), which the commands turn into an orderly stop: a trial run writes
nothing, a sweep keeps every trial it finished, the kernel backend restores the machine.
"""

from __future__ import annotations

import os

# The C module under ``signal``: ``signal`` itself loads enum, a few milliseconds in which Ctrl-C
# would still end in a traceback. Nor is typing imported: this module loads first, and fast.
import _signal as signal  # type: ignore[import-not-found]  # CPython's, without stubs

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import FrameType
    from typing import Optional

#: What a command interrupted before it wrote anything prints (otherwise: "interrupted").
MESSAGE = "interrupted: nothing was written"

#: Whether Ctrl-C was pressed while a command ran. A library may turn the ``KeyboardInterrupt``
#: into an error of its own (pydantic, building a model's schema as a module loads, raises a
#: SchemaError), which the command then reports as the interruption it is.
pressed = False


def _exit_at_once(signum: int, frame: Optional[FrameType]) -> None:
    os.write(2, (MESSAGE + "\n").encode())
    os._exit(130)


def while_starting() -> None:
    """Ctrl-C ends the process at once from now on (unless SIGINT is ignored, as under nohup)."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _exit_at_once)


def _raise_interrupt(signum: int, frame: Optional[FrameType]) -> None:
    global pressed
    pressed = True
    raise KeyboardInterrupt


def command_started() -> None:
    """Ctrl-C raises ``KeyboardInterrupt`` from now on, for the command to handle, and sets
    :data:`pressed`."""
    if signal.getsignal(signal.SIGINT) is _exit_at_once:
        signal.signal(signal.SIGINT, _raise_interrupt)


def command_finished() -> None:
    """Ctrl-C is ignored from now on: the command has finished and its exit status stands."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
