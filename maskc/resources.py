"""Where the grammar and the templates live.

In a wheel they are shipped inside the package (`maskc/grammar`, `maskc/templates`); in a source checkout
they sit at the top of the repository, beside `maskc/`. Both layouts are looked up the same way.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def resource_dir(name: str) -> Path:
    for candidate in (_PACKAGE / name, _PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"maskc is installed without its {name}/ folder (looked in {_PACKAGE})")
