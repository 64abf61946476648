"""Where the tests (and bench/consumer_spills.py) find cuobjdump, which reads a cubin's SASS."""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def sass_tools() -> tuple[str, dict] | None:
    """cuobjdump and the environment it finds nvdisasm in (it disassembles with it): from the wheels
    nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm (test dependencies), else from PATH; None without both."""
    try:
        import nvidia

        wheel_bins = [Path(p) / "cu13" / "bin" for p in nvidia.__path__]
    except ImportError:
        wheel_bins = []
    cuobjdump, nvdisasm = (next((str(d / tool) for d in wheel_bins if (d / tool).is_file()), shutil.which(tool))
                           for tool in ("cuobjdump", "nvdisasm"))
    if cuobjdump is None or nvdisasm is None:
        return None
    return cuobjdump, dict(os.environ, NVDISASM_PATH=str(Path(nvdisasm).parent))
