"""The stages stay separate: what a stage imports, checked in a fresh interpreter (an import made earlier by
another test would hide a dependency here).

- code generation (`maskc.codegen`) never loads the runtime values (`maskc.plan.layout`) or the planner;
- `maskc compile` never loads the tooling (`maskc.tools`: explain, trial, the brute-force reference), nor
  does the launch path (`maskc.compiler`, `maskc.runtime`);
- the planner never loads the test oracle (`maskc.tools.reference`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import maskc

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
TOOLS = ("maskc.tools", "maskc.tools.explain", "maskc.tools.trial", "maskc.tools.reference")


def loaded_after(code: str, cwd: Path | None = None) -> set[str]:
    """The maskc modules loaded after running `code` in a fresh interpreter, on the same maskc as this one."""
    script = code + "\nimport json, sys\nprint(json.dumps(sorted(m for m in sys.modules if m.startswith('maskc'))))\n"
    package_root = str(Path(maskc.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([package_root] + sys.path)}
    out = subprocess.run([sys.executable, "-c", script], env=env, cwd=cwd, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return set(json.loads(out.stdout.splitlines()[-1]))


def test_codegen_does_not_load_the_runtime_values_or_the_planner():
    modules = loaded_after("import maskc.codegen")
    assert "maskc.codegen" in modules and "maskc.plan.tiling" in modules
    assert not modules & {"maskc.plan.layout", "maskc.plan.planner", "maskc.runtime"}, sorted(modules)


def test_the_planner_does_not_load_the_reference():
    modules = loaded_after("import maskc.plan.planner")
    assert "maskc.plan.planner" in modules
    assert not modules & set(TOOLS), sorted(modules)


def test_the_launch_path_does_not_load_the_tooling():
    modules = loaded_after("import maskc, maskc.compiler, maskc.runtime\nmaskc.load")
    assert "maskc.runtime" in modules
    assert not modules & set(TOOLS), sorted(modules)


def test_maskc_compile_does_not_load_the_tooling(tmp_path):
    code = ("from maskc.cli import cli\n"
            f"cli.main(['compile', {str(EXAMPLES / 'document.mask')!r}, '-o', 'document.cu'], standalone_mode=False)")
    modules = loaded_after(code, cwd=tmp_path)
    assert (tmp_path / "document.cu").is_file()
    assert "maskc.codegen" in modules
    assert not modules & set(TOOLS), sorted(modules)
