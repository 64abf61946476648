"""The front end in one call: `.mask` text -> parse -> check -> lower -> `ir.Program`.

Every problem with the input, including an unreadable file, comes out as a `MaskError` that carries
the `Source`, so it renders as `path:line:col: error: ...` with the offending line.
"""

from __future__ import annotations

import os

from maskc import ir
from maskc.diagnostics import Diagnostic, MaskError, Source, Span, nested_too_deeply
from maskc.front.check import check
from maskc.front.lower import lower
from maskc.front.syntax import MAX_FILE_BYTES, parse, too_large


def read_program(text: str, path: str = "<mask>") -> ir.Program:
    source = Source(path, text)
    try:
        ast = parse(text, path)
        check(ast, source)
        return lower(ast, source)
    except MaskError as e:
        raise e.with_source(source) from None
    except RecursionError as e:  # only a pathological file nests deep enough for the recursive passes
        raise nested_too_deeply(e, source) from None


def read_file(path: str | os.PathLike) -> ir.Program:
    name = os.fspath(path)
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)  # no more: a larger file is refused unread
            size = max(len(data), os.fstat(f.fileno()).st_size)
    except OSError as e:
        message = f"cannot read {name}: {e.strerror or e}"
        raise MaskError(Diagnostic(Span.unknown(), message), Source(name, "")) from None
    if size > MAX_FILE_BYTES:
        raise MaskError(too_large(size, "bytes"), Source(name, ""))
    try:
        text = data.decode("utf-8-sig")  # an editor's byte-order mark is not part of the mask
    except UnicodeDecodeError as e:
        # Point at the byte: its line, and its column counted in characters of what decodes before it.
        line = data[: e.start].count(b"\n") + 1
        line_start = data.rfind(b"\n", 0, e.start) + 1
        col = len(data[line_start:e.start].decode("utf-8", errors="replace")) + 1
        message = f"this file is not UTF-8 text: byte 0x{data[e.start]:02x} cannot be decoded"
        shown = data.decode("utf-8", errors="replace")  # for the source line under the message
        raise MaskError(Diagnostic(Span(line, col, line, col + 1), message, notes=("save it as UTF-8",)),
                        Source(name, shown)) from None
    return read_program(text, name)
