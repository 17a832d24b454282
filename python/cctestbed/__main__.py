"""The ``cctestbed`` command's entry point (also ``python -m cctestbed``)."""

from __future__ import annotations

import os

from . import interrupt

interrupt.while_starting()  # before the command's modules load

# pydantic looks for plugins among the entry points of every installed distribution before it
# builds its first schema: 60 ms of `validate`'s 0.3 s. The command uses none; whoever wants a
# plugin in it sets PYDANTIC_DISABLE_PLUGINS themselves (to "" to disable none).
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")


def main() -> None:
    from .cli import app

    try:
        app()
    finally:
        interrupt.command_finished()


if __name__ == "__main__":
    main()
