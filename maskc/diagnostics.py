"""Source positions and user-facing errors.

Every stage reports problems in the user's `.mask` file through `MaskError`, which carries one or more
`Diagnostic`s. Each diagnostic points at a `Span` and renders as `path:line:col: error: message`, the
source line and a caret, the format compilers and editors understand.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Span:
    """A region of a source file; lines and columns are 1-based, `end_col` is exclusive."""

    line: int
    col: int
    end_line: int
    end_col: int

    @staticmethod
    def unknown() -> "Span":
        return Span(0, 0, 0, 0)

    def merge(self, other: "Span") -> "Span":
        """The smallest span covering both."""
        if self.line == 0:
            return other
        if other.line == 0:
            return self
        start = min((self.line, self.col), (other.line, other.col))
        end = max((self.end_line, self.end_col), (other.end_line, other.end_col))
        return Span(start[0], start[1], end[0], end[1])


@dataclass(frozen=True, slots=True)
class Source:
    """The text of one `.mask` file and the name it is reported under."""

    path: str
    text: str

    def line_text(self, line: int) -> str:
        lines = _lines(self.text)
        return lines[line - 1] if 1 <= line <= len(lines) else ""


@functools.lru_cache(maxsize=1)  # the messages about one file all read its lines
def _lines(text: str) -> list[str]:
    return text.split("\n")  # the parser counts only \n as a line break


@dataclass(frozen=True, slots=True)
class Diagnostic:
    span: Span
    message: str
    severity: str = "error"
    notes: tuple[str, ...] = ()

    def render(self, source: Source | None) -> str:
        path = source.path if source is not None else "<mask>"
        if self.span.line == 0:
            head = f"{path}: {self.severity}: {self.message}"
            return "\n".join([head, *(f"  note: {n}" for n in self.notes)])
        head = f"{path}:{self.span.line}:{self.span.col}: {self.severity}: {self.message}"
        out = [head]
        if source is not None:
            text = source.line_text(self.span.line).expandtabs(1)
            if text:
                # Carets cover the span on its first line (at least one character).
                end = self.span.end_col if self.span.end_line == self.span.line else len(text) + 1
                width = max(1, min(end, len(text) + 1) - self.span.col)
                text, col, width = _excerpt(text, self.span.col, width)
                gutter = f"{self.span.line:>4} | "
                out.append(gutter + text)
                out.append(" " * (len(gutter) - 2) + "| " + " " * (col - 1) + "^" * width)
        out.extend(f"  note: {n}" for n in self.notes)
        return "\n".join(out)


MAX_SHOWN_LINE = 160  # characters of a source line under a message; a longer line is shown around the caret


def _excerpt(text: str, col: int, width: int) -> tuple[str, int, int]:
    """The part of a long source line (a list of a million numbers) to show: from a little before the caret,
    `...` marking what is left out. Returns the text, the caret's column in it and the caret's width."""
    if len(text) <= MAX_SHOWN_LINE:
        return text, col, width
    start = max(0, min(col - 1 - 40, len(text) - MAX_SHOWN_LINE))
    shown = text[start : start + MAX_SHOWN_LINE]
    col -= start
    if start > 0:
        shown, col = "..." + shown, col + 3
    if start + MAX_SHOWN_LINE < len(text):
        shown += "..."
    return shown, col, max(1, min(width, len(shown) + 1 - col))


class MaskError(Exception):
    """An error in the user's mask or its parameters: reported, never a traceback (exit code 1)."""

    def __init__(self, diagnostics: list[Diagnostic] | Diagnostic, source: Source | None = None):
        if isinstance(diagnostics, Diagnostic):
            diagnostics = [diagnostics]
        self.diagnostics = list(diagnostics)
        self.source = source
        super().__init__(self.render())

    def with_source(self, source: Source) -> "MaskError":
        return self if self.source is not None else MaskError(self.diagnostics, source)

    def __reduce__(self):  # pickled and copied with its diagnostics (its only argument is their rendering)
        return type(self), (self.diagnostics, self.source)

    def render(self) -> str:
        return "\n".join(d.render(self.source) for d in self.diagnostics)


class ValueProblem(MaskError, ValueError):
    """Runtime values that do not fit the mask (values given per call, with `--param` or `--n`): a MaskError
    that points at the source it concerns (the parameter's declaration, the segment being laid out), and a
    ValueError, as the Python API reports bad values. Its message is the rendered diagnostic."""

    def with_source(self, source: Source | None) -> "ValueProblem":
        return self if self.source is not None or source is None else ValueProblem(self.diagnostics, source)


def show_value(value, limit: int = 8) -> str:
    """A value as the language writes it, for messages: `true`, `-3`, `[1, 2]`, `[[true], [false, true]]`
    (numpy values and arrays too; a list longer than `limit` shows its first and last three elements around
    `...`). What the language cannot write (a string, a float) is shown as Python shows it: `'3'`, `2.5`."""
    is_array = hasattr(value, "tolist") and not isinstance(value, (bool, int))  # numpy (or torch) values
    if is_array and getattr(value, "ndim", 0) == 0:
        value, is_array = value.tolist(), False
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if is_array or isinstance(value, (list, tuple)):  # an array's rows stay arrays: never converted whole
        items = list(value) if len(value) <= limit else [*value[:3], ..., *value[-3:]]
        return "[" + ", ".join("..." if x is ... else show_value(x, limit) for x in items) + "]"
    return repr(value)


def nested_too_deeply(exc: RecursionError, source: Source) -> MaskError:
    """The error for a file whose expressions nest deeper than the recursive stages can follow, at the point
    where they stopped: the start of the innermost expression reached, that is of the most specific node held by
    the deepest frame of the traceback that holds one (an AST or IR node's `span`, a Lark tree's `meta`, a Lark
    token). Only the error path pays for the search."""
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    span = Span.unknown()
    for frame in reversed(frames):
        spans = [s for s in map(_position_of, frame.f_locals.values()) if s is not None and s.line]
        if spans:
            inner = min(spans, key=lambda s: (s.end_line - s.line, s.end_col - s.col))
            span = Span(inner.line, inner.col, inner.line, inner.col + 1)  # a point: the node may be long
            break
    return MaskError(Diagnostic(span, "expressions are nested too deeply"), source)


def _position_of(value) -> Span | None:
    span = getattr(value, "span", None)
    if isinstance(span, Span):
        return span
    meta = getattr(value, "meta", None)  # a Lark tree
    if meta is not None and not getattr(meta, "empty", True):
        return Span(meta.line, meta.column, meta.end_line, meta.end_column)
    if isinstance(getattr(value, "end_column", None), int):  # a Lark token
        return Span(value.line, value.column, value.end_line, value.end_column)
    return None


def error(span: Span, message: str, *notes: str) -> MaskError:
    return MaskError(Diagnostic(span, message, notes=tuple(notes)))


def value_problem(span: Span, message: str, *notes: str) -> ValueProblem:
    return ValueProblem(Diagnostic(span, message, notes=tuple(notes)))
