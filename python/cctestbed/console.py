"""The commands' two output streams, ``out`` and ``err`` (rich consoles made on first use), and
their one way of refusing: :func:`fail` and :func:`refuse`.

Loading rich takes about 40 ms, an eighth of what ``cctestbed validate`` may take in all, so the
consoles are built only when something is printed with them; :meth:`LazyConsole.line` writes a
plain line without loading rich at all (``validate``'s one line on success).

Markup is off: what the commands print holds paths, names and error texts, and a bracket in one
(``-o 'runs/[a]'``) must be printed, not read as a style tag. A line that opens with a styled
word (``error:``, ``failed:``, ``miss:``) is :meth:`LazyConsole.tagged`; any other line with a
style passes ``markup=True`` and runs the values it shows through :func:`escape`. Both consoles
are the same objects a progress bar draws on (:attr:`LazyConsole.rich`), so what is printed
while one runs appears above it.
"""

from __future__ import annotations

import sys
from typing import Any, NoReturn, Sequence

import typer


class LazyConsole:
    """A ``rich.console.Console`` (markup off, no highlighting, long lines not wrapped), built at
    its first use."""

    def __init__(self, stderr: bool = False) -> None:
        self._stderr = stderr
        self._console: Any = None

    @property
    def rich(self) -> Any:
        """The console itself, for what takes one (``rich.progress.Progress(console=...)``)."""
        if self._console is None:
            from rich.console import Console

            self._console = Console(stderr=self._stderr, markup=False, highlight=False, soft_wrap=True)
        return self._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self.rich, name)

    def tagged(self, tag: str, style: str, text: str) -> None:
        """``tag: text``, the tag in ``style`` and the text as it is."""
        from rich.text import Text

        self.rich.print(Text.assemble((tag, style), ": ", text))

    def line(self, text: str) -> None:
        """``text`` as it is (no markup), and a newline."""
        stream = sys.stderr if self._stderr else sys.stdout
        stream.write(text + "\n")
        stream.flush()


out = LazyConsole()
err = LazyConsole(stderr=True)


def escape(text: object) -> str:
    """``text`` as a string that markup prints as it is."""
    from rich.markup import escape as rich_escape

    return rich_escape(str(text))


def fail(message: str, code: int = 2) -> NoReturn:
    """``error: message`` on stderr and exit ``code`` (2: bad input, nothing done; 1: a run failed).
    The message is printed as it is: a path or a value with brackets is never read as markup."""
    err.tagged("error", "bold red", message)
    raise typer.Exit(code)


def refuse(what: str, problems: Sequence[str]) -> NoReturn:
    """``error: <what> (<n> problem(s)):`` and one line per problem, then exit 2."""
    err.tagged("error", "bold red", f"{what} ({len(problems)} problem(s)):")
    for p in problems:
        err.print(f"  - {p}")
    raise typer.Exit(2)
