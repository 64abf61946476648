"""The kernels: one ABI (`abi`) and the kernel families (`family`) that implement it."""

from maskc.kernels.abi import Arg, SeqTable, TileKind
from maskc.kernels.family import (
    ARCHS,
    BACKWARD_PASSES,
    DTYPES,
    FAMILIES,
    HEAD_DIMS,
    SM80,
    SM90A,
    KernelFamily,
    KernelOptions,
    family_for,
    kernel_name,
    planner_name,
)

__all__ = ["ARCHS", "BACKWARD_PASSES", "DTYPES", "FAMILIES", "HEAD_DIMS", "SM80", "SM90A", "Arg", "KernelFamily",
           "KernelOptions", "SeqTable", "TileKind", "family_for", "kernel_name", "planner_name"]
