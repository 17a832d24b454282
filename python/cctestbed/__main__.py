"""The ``cctestbed`` command's entry point (also ``python -m cctestbed``)."""

from __future__ import annotations

import os

from . import interrupt

interrupt.while_starting()  # before the command's modules load

# pydantic looks for plugins among the entry points of every installed distribution before it
# builds its first schema: 60 ms of `validate`'s 0.3 s. The command uses none; whoever wants a
# plugin in it sets PYDANTIC_DISABLE_PLUGINS themselves (to "" to disable none).
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

# NumPy's OpenBLAS starts a thread per core when NumPy loads, and those threads spin for a
# while: 0.15 s of CPU that `run` needs for the core, which simulates while NumPy loads. No
# command does linear algebra; sweep workers inherit the setting.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def main() -> None:
    from .cli import app

    try:
        app()
    finally:
        interrupt.command_finished()


if __name__ == "__main__":
    main()
