"""Every command's --help shows each option's whole help text and its default.

The help is drawn with rich, which reads ``[...]`` as a style tag: a default written into a help
text as ``[default: results/<name>]`` vanished from ``run --help``.
"""

from __future__ import annotations

from typing import Any, Iterator

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from cctestbed.cli import app


def commands(cmd: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    yield path, cmd
    for name, sub in sorted(getattr(cmd, "commands", {}).items()):
        yield from commands(sub, (*path, name))


ALL = list(commands(get_command(app)))


def flat(text: str) -> str:
    """The help without its panel borders and line breaks: words separated by single spaces."""
    return " ".join(text.replace("│", " ").replace("╭", " ").replace("╰", " ").split())


@pytest.mark.parametrize("path,cmd", ALL, ids=[" ".join(p) or "cctestbed" for p, _ in ALL])
def test_help_shows_every_option_text_and_default(path, cmd):
    r = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "400", "TERMINAL_WIDTH": "400"})
    assert r.exit_code == 0, r.output
    shown = flat(r.output)
    for p in cmd.params:
        if getattr(p, "help", None):
            assert flat(p.help) in shown, f"{' '.join(path)} --help: {p.name}: {p.help!r} not shown"
        if isinstance(getattr(p, "show_default", None), str):
            assert p.show_default in shown, f"{' '.join(path)} --help: {p.name}: default {p.show_default!r} not shown"
