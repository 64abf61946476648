"""Local loads and stores (spills) in the Hopper dK/dV kernel's consumers, per example, from the SASS of the
backward cubin as maskc builds it (NVRTC): no GPU needed, only cuobjdump (a development probe for
docs/training.md's log). The consumers' code is what runs between their `setmaxnreg` (USETMAXREG.TRY_ALLOC) and
the producer's (USETMAXREG.DEALLOC); which of the examples spill there changes with small edits of the kernel
(thirty-sixth session), so count them before a device run.

    PYTHONPATH=. python bench/consumer_spills.py [--examples document hstu ...] [--head-dim 128]
                                                 [--backward-kernels hopper_fused] [--loops]

Prints one line per example: the local loads and stores in the consumers' code and in the whole kernel. With
--loops, also each role's step loops, where the whole-kernel count does not say what a step executes: every
innermost loop that waits on or arrives at a barrier (the consumers' step, the producer warp's, the dQ writer's),
with its SASS instructions and local accesses, the consumers' and the producer warpgroup's apart. (A spill in a
step loop runs every step; one outside, once an item.)
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

from maskc.codegen import KernelOptions
from maskc.compiler import compile_file

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
sys.path.insert(0, str(ROOT / "tests"))  # (under PYTHONSAFEPATH the script's folder is not there either)
from sass_tools import sass_tools

LOCAL = re.compile(r"\b(LDL|STL)\b")


INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);")
BACK_BRANCH = re.compile(r"\bBRA (0x[0-9a-f]+)")
BARRIER = re.compile(r"\b(SYNCS\.|BAR\.)")


def dkdv_sass(name: str, head_dim: int, tools: tuple[str, dict], backward_kernels: str | None = None) -> list[str]:
    """The SASS of one example's dK/dV kernel, a line each."""
    c = compile_file(EXAMPLES / f"{name}.mask",
                     KernelOptions(arch="sm_90a", head_dim=head_dim, backward_kernels=backward_kernels))
    kernel = next(n for n in c.backward_names if "dkdv" in n)
    cuobjdump, env = tools
    return subprocess.run([cuobjdump, "-sass", "-fun", kernel, str(c.build("cubin", "bwd").path)],
                          capture_output=True, text=True, env=env, check=True).stdout.splitlines()


def consumer_lines(sass: list[str]) -> tuple[int, int]:
    """Where the consumers' code is: from their `setmaxnreg` to the producer warpgroup's."""
    return (next(i for i, line in enumerate(sass) if "USETMAXREG.TRY_ALLOC" in line),
            next(i for i, line in enumerate(sass) if "USETMAXREG.DEALLOC" in line))


def local_accesses(lines: list[str]) -> int:
    return sum(bool(LOCAL.search(line)) for line in lines)


def spills(sass: list[str]) -> tuple[int, int]:
    """(local loads and stores in the dK/dV kernel's consumers, in the whole kernel)."""
    start, end = consumer_lines(sass)
    return local_accesses(sass[start:end]), local_accesses(sass)


def step_loops(lines: list[str]) -> list[tuple[int, int, int, int]]:
    """(first address, last address, instructions, local accesses) of each innermost loop of `lines` that has a
    barrier operation: loops are closed by a branch backwards (the `.U.ANY` ones are a warp's elect loops, and
    loops of a few instructions are a barrier's retries)."""
    code = [(int(m.group(1), 16), m.group(2)) for m in map(INSTRUCTION.search, lines) if m]
    loops = []
    for address, text in code:
        branch = BACK_BRANCH.search(text)
        if not branch or ".U.ANY" in text:
            continue
        target = int(branch.group(1), 16)
        if target < address:
            body = [t for a, t in code if target <= a <= address]
            if len(body) > 8 and any(BARRIER.search(t) for t in body):
                loops.append((target, address, len(body), local_accesses(body)))
    return [loop for loop in loops  # innermost: no other such loop inside it
            if not any(other != loop and loop[0] <= other[0] and other[1] <= loop[1] for other in loops)]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", nargs="*", default=sorted(p.stem for p in EXAMPLES.glob("*.mask")))
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--backward-kernels", default=None, help="a Hopper backward pass (default: the options')")
    parser.add_argument("--loops", action="store_true", help="also each role's step loops")
    args = parser.parse_args(argv)
    tools = sass_tools()
    if tools is None:
        raise SystemExit("no cuobjdump and nvdisasm (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)")
    for name in args.examples:
        sass = dkdv_sass(name, args.head_dim, tools, args.backward_kernels)
        consumers, kernel = spills(sass)
        print(f"{name:16s} local loads/stores: consumers {consumers:3d}, whole dK/dV kernel {kernel:3d}")
        if args.loops:
            start, end = consumer_lines(sass)
            for role, lines in (("consumers", sass[start:end]), ("producer warpgroup", sass[end:])):
                for first, last, instructions, local in step_loops(lines):
                    print(f"    {role:18s} loop {first:#07x}-{last:#07x}: {instructions:4d} instructions, "
                          f"{local:3d} local loads/stores")


if __name__ == "__main__":
    main()
