"""The package under test is the installed one (CI installs a wheel), with its grammar and templates."""

import os
from pathlib import Path

import pytest

import maskc
from maskc.resources import resource_dir


@pytest.mark.skipif(not os.environ.get("MASKC_EXPECT_INSTALLED"), reason="only when testing an installed wheel")
def test_tests_run_against_the_installed_package():
    package = Path(maskc.__file__).resolve().parent
    assert "site-packages" in package.parts, f"maskc was imported from {package}, not from the installed wheel"
    assert resource_dir("grammar") == package / "grammar"
    assert resource_dir("templates") == package / "templates"


def test_resources_are_found():
    assert (resource_dir("grammar") / "mask.lark").is_file()
    assert (resource_dir("templates") / "common" / "kernel.cu.j2").is_file()
