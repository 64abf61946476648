"""Local loads and stores (spills) in the Hopper dK/dV kernel's consumers, per example, from the SASS of the
backward cubin as maskc builds it (NVRTC): no GPU needed, only cuobjdump (a development probe for
docs/training.md's log). The consumers' code is what runs between their `setmaxnreg` (USETMAXREG.TRY_ALLOC) and
the producer's (USETMAXREG.DEALLOC); which of the examples spill there changes with small edits of the kernel
(thirty-sixth session), so count them before a device run.

    PYTHONPATH=. python bench/consumer_spills.py [--examples document hstu ...] [--head-dim 128]
                                                 [--backward-kernels hopper_fused]

Prints one line per example: the local loads and stores in the consumers' code and in the whole kernel.
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


def spills(name: str, head_dim: int, tools: tuple[str, dict], backward_kernels: str | None = None) -> tuple[int, int]:
    """(local loads and stores in the dK/dV kernel's consumers, in the whole kernel) of one example."""
    c = compile_file(EXAMPLES / f"{name}.mask",
                     KernelOptions(arch="sm_90a", head_dim=head_dim, backward_kernels=backward_kernels))
    kernel = next(n for n in c.backward_names if "dkdv" in n)
    cuobjdump, env = tools
    sass = subprocess.run([cuobjdump, "-sass", "-fun", kernel, str(c.build("cubin", "bwd").path)],
                          capture_output=True, text=True, env=env, check=True).stdout.splitlines()
    start = next(i for i, line in enumerate(sass) if "USETMAXREG.TRY_ALLOC" in line)
    end = next(i for i, line in enumerate(sass) if "USETMAXREG.DEALLOC" in line)
    return sum(bool(LOCAL.search(line)) for line in sass[start:end]), sum(bool(LOCAL.search(line)) for line in sass)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", nargs="*", default=sorted(p.stem for p in EXAMPLES.glob("*.mask")))
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--backward-kernels", default=None, help="a Hopper backward pass (default: the options')")
    args = parser.parse_args(argv)
    tools = sass_tools()
    if tools is None:
        raise SystemExit("no cuobjdump and nvdisasm (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)")
    for name in args.examples:
        consumers, kernel = spills(name, args.head_dim, tools, args.backward_kernels)
        print(f"{name:16s} local loads/stores: consumers {consumers:3d}, whole dK/dV kernel {kernel:3d}")


if __name__ == "__main__":
    main()
