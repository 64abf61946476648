import sys
from pathlib import Path

# Test helpers (small_configs, host_mask) sit beside the tests; the package itself comes from the install.
sys.path.insert(0, str(Path(__file__).resolve().parent))
