"""The commands' two output streams, ``out`` and ``err`` (rich consoles made on first use), and
their one way of refusing: :func:`fail` and :func:`refuse`.

Loading rich takes about 40 ms, an eighth of what ``cctestbed validate`` may take in all, so the
consoles are built only when something is printed with them; :meth:`LazyConsole.line` writes a
plain line without loading rich at all (``validate``'s one line on success).

Markup is off: what the commands print holds paths, names and error texts, and a bracket in one
(``-o 'runs/[a]'``) must be printed, not read as a style tag. A line with a style passes
``markup=True`` and runs the values it shows through :func:`escape`.
"""

from __future__ import annotations

import sys
from typing import Any, NoReturn, Sequence


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
    import typer

    err.print("[bold red]error[/]: ", end="", markup=True)
    err.print(message)
    raise typer.Exit(code)


def refuse(what: str, problems: Sequence[str]) -> NoReturn:
    """``error: <what> (<n> problem(s)):`` and one line per problem, then exit 2."""
    import typer

    err.print("[bold red]error[/]: ", end="", markup=True)
    err.print(f"{what} ({len(problems)} problem(s)):")
    for p in problems:
        err.print(f"  - {p}")
    raise typer.Exit(2)
