"""The commands' two output streams, ``out`` and ``err``: rich consoles made on first use.

Loading rich takes about 40 ms, an eighth of what ``cctestbed validate`` may take in all, so the
consoles are built only when something is printed with them; :meth:`LazyConsole.line` writes a
plain line without loading rich at all (``validate``'s one line on success).
"""

from __future__ import annotations

import sys
from typing import Any


class LazyConsole:
    """A ``rich.console.Console`` with these options, built at its first use."""

    def __init__(self, stderr: bool = False) -> None:
        self._stderr = stderr
        self._console: Any = None

    @property
    def rich(self) -> Any:
        """The console itself, for what takes one (``rich.progress.Progress(console=...)``)."""
        if self._console is None:
            from rich.console import Console

            self._console = Console(stderr=self._stderr, highlight=False, soft_wrap=True)
        return self._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self.rich, name)

    def line(self, text: str) -> None:
        """``text`` as it is (no markup), and a newline."""
        stream = sys.stderr if self._stderr else sys.stdout
        stream.write(text + "\n")
        stream.flush()


out = LazyConsole()
err = LazyConsole(stderr=True)
