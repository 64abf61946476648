"""compute-sanitizer on every kernel: memcheck (out-of-bounds and misaligned accesses), racecheck (shared-memory
hazards), synccheck (barrier misuse) and initcheck (reads of uninitialised global memory), each over the forward
and backward pass of every example at its small, ragged configuration, for every kernel family and backward
pass of this GPU (tests/gpu/sanitized_run.py). Skipped where compute-sanitizer is not installed or refuses the
device. Run with `pytest -m gpu`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("cupy")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

SCRIPT = Path(__file__).resolve().parent / "sanitized_run.py"
TOOLS = ["memcheck", "racecheck", "synccheck", "initcheck"]


def sanitizer() -> str:
    found = shutil.which("compute-sanitizer") or next(
        (p for p in ("/usr/local/cuda/bin/compute-sanitizer",) if os.path.exists(p)), None)
    if found is None:
        pytest.skip("compute-sanitizer is not installed")
    return found


@pytest.mark.parametrize("tool", TOOLS)
def test_kernels_are_sanitizer_clean(tool):
    # API errors are not kernel errors: cuda-bindings probes driver entry points that this driver lacks.
    command = [sanitizer(), "--tool", tool, "--error-exitcode", "99", "--report-api-errors", "no",
               "--print-limit", "20", sys.executable, str(SCRIPT)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1500)
    report = done.stdout[-6000:] + done.stderr[-6000:]
    if "Device not supported" in report or "not supported on this" in report:
        pytest.skip(f"compute-sanitizer refuses this device: {report[-300:]}")
    assert done.returncode == 0, f"compute-sanitizer --tool {tool} (exit {done.returncode}):\n{report}"
    summary = "RACECHECK SUMMARY: 0 hazards" if tool == "racecheck" else "ERROR SUMMARY: 0 errors"
    assert summary in done.stdout, report
