"""Run a command in a child process that cannot take the test machine's memory or time: its address space is
capped (RLIMIT_AS) and it is killed after a timeout. A size guard under test that fails to refuse in time
meets a MemoryError there (maskc reports it as an internal error, exit code 3), not the machine's limits."""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from dataclasses import dataclass

GiB = 1 << 30


@dataclass
class Finished:
    returncode: int
    stdout: str
    stderr: str
    seconds: float  # wall time of the whole child, Python's start and imports included


def run(args: list[str], memory: int, timeout: float = 60.0, env: dict[str, str] | None = None) -> Finished:
    def cap_memory():
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    start = time.perf_counter()
    result = subprocess.run(args, capture_output=True, text=True, timeout=timeout, preexec_fn=cap_memory, env=env)
    return Finished(result.returncode, result.stdout, result.stderr, time.perf_counter() - start)


def maskc(*args: str, memory: int, timeout: float = 60.0, env: dict[str, str] | None = None) -> Finished:
    """`maskc ARGS...` in a bounded child."""
    return run([sys.executable, "-m", "maskc", *map(str, args)], memory, timeout, env)
