"""The ``cctestbed`` command's entry point (also ``python -m cctestbed``)."""

from __future__ import annotations

from . import interrupt

interrupt.while_starting()  # before the command's modules load


def main() -> None:
    from .cli import app

    try:
        app()
    finally:
        interrupt.command_finished()


if __name__ == "__main__":
    main()
