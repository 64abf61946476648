"""bench/consumer_spills.py's reading of SASS, on a made-up listing: where the consumers' code is, and which loops
are step loops (innermost, with a barrier operation; a warp's elect loops and a barrier's retries are not)."""

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("consumer_spills", ROOT / "bench" / "consumer_spills.py")
consumer_spills = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = consumer_spills
spec.loader.exec_module(consumer_spills)


def listing(instructions: list[str]) -> list[str]:
    """cuobjdump's layout: an address comment, the instruction, its encoding; then the encoding's second line."""
    lines = []
    for i, text in enumerate(instructions):
        lines.append(f"        /*{16 * i:04x}*/                   {text} ;                /* 0x000000000000 */")
        lines.append("                                                            /* 0x000fe40000000000 */")
    return lines


def branch_back(to: int) -> str:
    return f"@!P0 BRA {16 * to:#x}"


# index: instruction (the consumers from 1 to the DEALLOC at 33)
SASS = listing(
    ["MOV R1, c[0x0][0x28]",                       # 0
     "USETMAXREG.TRY_ALLOC.CTAPOOL UP0, 0xf0"]     # 1
    + ["STL [R1], R4"]                             # 2: once, before the loop
    + ["SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR4], R0", branch_back(3)]  # 3-4: a wait's retry loop
    + ["HGMMA.64x64x16.F32.BF16 R24, gdesc[UR8], RZ"] * 9               # 5-13
    + ["LDL R5, [R1]", "SYNCS.ARRIVE.TRANS64.A1T0 RZ, [UR4], RZ", branch_back(3)]  # 14-16: the step loop 3-16
    + ["IADD3 R7, R7, 0x1, RZ"] * 8 + [branch_back(3)]                  # 17-25: the item loop, around it
    + ["NOP"] * 7                                                       # 26-32
    + ["USETMAXREG.DEALLOC.CTAPOOL 0x18",                               # 33
       "ELECT P0, URZ, PT", "@P0 BRA.U.ANY " + f"{16 * 34:#x}"]         # 34-35: an elect loop
    + ["IMAD R2, R2, 0x4, RZ"] * 10 + [branch_back(36)]                 # 36-46: a loop with no barrier
    + ["STL [R1+0x4], R3", "BAR.ARV 0x2, 0x120"] + ["FADD R4, R4, R5"] * 8 + ["LDL R3, [R1+0x4]", branch_back(47)])
    # 47-58: the producer's step loop


def test_the_consumers_run_from_their_setmaxnreg_to_the_producers():
    start, end = consumer_spills.consumer_lines(SASS)
    assert "TRY_ALLOC" in SASS[start] and "DEALLOC" in SASS[end]
    assert consumer_spills.spills(SASS) == (2, 4)  # the STL before the loop and the LDL in it; with the producer's two


def test_step_loops_are_the_innermost_loops_with_a_barrier():
    start, end = consumer_spills.consumer_lines(SASS)
    assert consumer_spills.step_loops(SASS[start:end]) == [(16 * 3, 16 * 16, 14, 1)]
    assert consumer_spills.step_loops(SASS[end:]) == [(16 * 47, 16 * 58, 12, 2)]
