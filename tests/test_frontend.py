"""read_program / read_file: the whole front end, and input that is not a readable mask at all."""

import pytest

from maskc.diagnostics import MaskError
from maskc.frontend import read_file, read_program

CAUSAL = "mask m()\nsegments:\n    S = n\nrules:\n    S -> S causal\n"


def error_text(call, *args) -> str:
    with pytest.raises(MaskError) as info:
        call(*args)
    return info.value.render()


def test_read_file(tmp_path):
    path = tmp_path / "m.mask"
    path.write_text(CAUSAL)
    program = read_file(path)
    assert program.name == "m" and program.source.path == str(path)


def test_errors_carry_the_source_and_its_path():
    text = error_text(read_program, CAUSAL.replace("causal", "casual"), "dir/m.mask")
    assert text.splitlines()[0].startswith("dir/m.mask:5:12: error: unexpected name 'casual'")
    assert text.splitlines()[1] == "   5 |     S -> S casual"


def test_missing_file(tmp_path):
    path = tmp_path / "missing.mask"
    assert error_text(read_file, path) == f"{path}: error: cannot read {path}: No such file or directory"


def test_directory(tmp_path):
    assert error_text(read_file, tmp_path) == f"{tmp_path}: error: cannot read {tmp_path}: Is a directory"


def test_file_that_is_not_utf8(tmp_path):
    path = tmp_path / "latin1.mask"
    path.write_bytes(CAUSAL.replace("S -> S", "# caf\xe9\n    S -> S").encode("latin-1"))
    assert error_text(read_file, path) == (
        f"{path}: error: {path} is not UTF-8 text: byte 0xe9 on line 5 cannot be decoded"
    )


def test_byte_order_mark_is_ignored(tmp_path):
    path = tmp_path / "bom.mask"
    path.write_bytes(b"\xef\xbb\xbf" + CAUSAL.encode())
    assert read_file(path).regions


@pytest.mark.parametrize("predicate", ["-" * 5000 + "q < k", " + ".join(["q"] * 5000) + " < k"])
def test_pathological_nesting_is_an_error_not_a_crash(predicate):
    text = error_text(read_program, CAUSAL.replace("causal", "where " + predicate))
    assert text == "<mask>: error: expressions are nested too deeply"
