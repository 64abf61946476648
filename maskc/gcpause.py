"""Python's cycle collector, paused while maskc builds and rewrites trees.

A large mask (a chain of 100,000 terms) makes millions of small objects, and the collector scans the growing
heap again and again as they are made: a third of the front end's and the passes' time. maskc's trees have no
cycles, so reference counting frees them all the same; the collector runs again as soon as the call is over.
"""

from __future__ import annotations

import contextlib
import gc
from typing import Iterator


@contextlib.contextmanager
def paused() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
