"""Local loads and stores (spills) in the Hopper dK/dV kernel's consumers, per example, from the SASS: no GPU
needed, only nvcc and cuobjdump (a development probe for docs/training.md's log). The consumers' code is what
runs between their `setmaxnreg` (USETMAXREG.TRY_ALLOC) and the producer's (USETMAXREG.DEALLOC); which of the
examples spill there changes with small edits of the kernel (thirty-sixth session), so count them before a device run.

    PYTHONPATH=. python bench/consumer_spills.py [--examples document hstu ...] [--head-dim 128]

Prints one line per example: the consumers' local loads and stores, and the kernel's spill bytes from ptxas.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from maskc.codegen import KernelOptions
from maskc.compiler import compile_file

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def cuobjdump() -> str:
    """cuobjdump from PATH, or from the nvidia-cuda-cuobjdump wheel beside this Python."""
    found = shutil.which("cuobjdump")
    if found:
        return found
    for candidate in Path(sys.prefix).glob("lib/python3*/site-packages/nvidia/cu*/bin/cuobjdump"):
        return str(candidate)
    raise SystemExit("no cuobjdump: put CUDA's bin on PATH or install nvidia-cuda-cuobjdump")


def consumer_spills(name: str, head_dim: int, work: Path) -> tuple[int, str]:
    """(local loads and stores in the dK/dV consumers' code, ptxas's spill line) of one example."""
    options = KernelOptions(arch="sm_90a", head_dim=head_dim)
    source = compile_file(EXAMPLES / f"{name}.mask", options).source
    cu, cubin = work / f"{name}.cu", work / f"{name}.cubin"
    cu.write_text(source)
    built = subprocess.run(["nvcc", "-arch=sm_90a", "-cubin", str(cu), "-o", str(cubin), "-Xptxas", "-v"],
                           capture_output=True, text=True, check=True)
    kernel = re.search(r"maskc_\w+_bwd_dkdv_sm90a_\w+", source).group(0)
    lines = built.stderr.splitlines()
    spill = next((lines[i + 1].strip() for i, line in enumerate(lines[:-1])
                  if "Function properties for " + kernel in line), "?")
    sass = subprocess.run([cuobjdump(), "-sass", "-fun", kernel, str(cubin)], capture_output=True, text=True,
                          check=True).stdout.splitlines()
    start = next(i for i, line in enumerate(sass) if "USETMAXREG.TRY_ALLOC" in line)
    end = next(i for i, line in enumerate(sass) if "USETMAXREG.DEALLOC" in line)
    return sum(bool(re.search(r"\b(LDL|STL)\b", line)) for line in sass[start:end]), spill


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", nargs="*", default=sorted(p.stem for p in EXAMPLES.glob("*.mask")))
    parser.add_argument("--head-dim", type=int, default=128)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.examples:
            count, spill = consumer_spills(name, args.head_dim, Path(tmp))
            print(f"{name:16s} consumers' local loads/stores {count:3d}   ptxas: {spill}")


if __name__ == "__main__":
    main()
