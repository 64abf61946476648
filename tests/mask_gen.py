"""A hypothesis strategy for random `.mask` files with runtime values: a few segments in random order (a
runtime-length segment, a family from a list parameter, sometimes a 2D grid with const dimensions, and the
remainder of n), 1-4 rules with random sides and shapes, and random predicates over q, k, q.pos, grid
coordinates, family indices, parameters and small constants, with and/or/not, //, %, abs, min/max/clamp,
^2, list reads and ancestor(). Every file is valid and cannot overflow 64 bits, so the front end must accept
it. Sequences are short (n <= ~250) so that brute force stays cheap."""

from __future__ import annotations

from hypothesis import strategies as st

PARAMS = ("a: int = 0, w: int = 0, d: int = 1, flag: bool = false, L: [int] = [], M: [bool] = [], "
          "tree: [int] = []")
BIG = 2**31  # the static bound of positions and runtime ints
LIMIT = 2**62  # keep every intermediate well inside 64 bits


class _Gen:
    def __init__(self, draw, grid_side: dict[str, bool], index_vars: list[str]):
        self.draw = draw
        self.grid = grid_side  # side -> whether it is exactly the grid segment
        self.index_vars = index_vars

    def pick(self, options):
        return self.draw(st.sampled_from(options))

    def atom(self) -> tuple[str, int]:
        options = ["q", "k", "q", "k", "q.pos", "k.pos", "a", "w", "n", "len(L)", "const", "const"]
        options += self.index_vars
        for side in "qk":
            if self.grid[side]:
                options += [f"{side}.y", f"{side}.x", f"{side}.y", f"{side}.x"]
        choice = self.pick(options)
        if choice == "const":
            c = self.draw(st.integers(-6, 40))
            return (f"({c})" if c < 0 else str(c)), abs(c)
        return choice, BIG

    def divisor(self) -> tuple[str, int]:
        if self.draw(st.booleans()):
            return "d", BIG
        c = self.draw(st.sampled_from([-5, -3, -2, 2, 3, 4, 7, 16]))
        return (f"({c})" if c < 0 else str(c)), abs(c)

    def int_expr(self, depth: int) -> tuple[str, int]:
        if depth <= 0 or self.draw(st.integers(0, 3)) == 0:
            return self.atom()
        op = self.pick(["+", "-", "*", "//", "%", "abs", "min", "max", "clamp", "^2", "L[]", "neg", "sum"])
        a, ba = self.int_expr(depth - 1)
        if op in ("+", "-"):
            b, bb = self.int_expr(depth - 1)
            text, bound = f"({a} {op} {b})", ba + bb
        elif op == "*":
            b, bb = self.atom() if self.draw(st.booleans()) else (str(self.draw(st.integers(-3, 5))), 5)
            text, bound = f"({a} * {b})", ba * bb
        elif op in ("//", "%"):
            b, bb = self.divisor()
            text, bound = f"({a} {op} {b})", ba if op == "//" else bb
        elif op == "abs":
            text, bound = f"abs({a})", ba
        elif op in ("min", "max"):
            b, bb = self.int_expr(depth - 1)
            text, bound = f"{op}({a}, {b})", max(ba, bb)
        elif op == "clamp":
            lo, blo = self.atom()
            hi, bhi = self.atom()
            text, bound = f"clamp({a}, {lo}, {hi})", max(ba, blo, bhi)
        elif op == "^2":
            text, bound = f"({a})^2", ba * ba
        elif op == "L[]":
            text, bound = f"L[{a}]", BIG
        elif op == "neg":
            text, bound = f"(-{a})", ba
        else:
            text, bound = f"({a} + sum(L))", ba + LIMIT // 2
        return (text, bound) if bound < LIMIT else (a, ba)

    def bool_expr(self, depth: int) -> str:
        kind = self.draw(st.integers(0, 9)) if depth > 0 else self.draw(st.integers(0, 4))
        if kind <= 2:
            op = self.pick(["<", "<=", ">", ">=", "==", "!="])
            return f"{self.int_expr(2)[0]} {op} {self.int_expr(2)[0]}"
        if kind == 3:
            lo, hi = self.pick([("0", "w"), ("(-w)", "w"), ("a", "n")])
            return f"{lo} <= {self.int_expr(2)[0]} < {hi}"
        if kind == 4:
            return self.pick(["flag", "not flag", f"M[{self.int_expr(1)[0]}]",
                              f"ancestor(tree, {self.int_expr(1)[0]}, {self.int_expr(1)[0]})"])
        if kind == 5:
            return f"not ({self.bool_expr(depth - 1)})"
        op = "and" if kind <= 7 else "or"
        return f"({self.bool_expr(depth - 1)} {op} {self.bool_expr(depth - 1)})"

    def row_expr(self) -> str:
        """A condition of the row-interval form, mostly: comparisons of k with a term in q of slope 0 or 1,
        and conditions on the row alone, joined by `and` (now and then a form the fast path leaves to the
        general search: slope 2 or -1, a condition on q.pos, a list)."""
        consts = [str(self.draw(st.integers(0, 40))), f"({self.draw(st.integers(-6, -1))})"]
        member = self.index_vars[:1]
        terms = ["q", "q", "q.pos", "a", "w", "n", "q - w", "q - a", "q + " + self.pick(consts), "q.pos + a",
                 "n - " + self.pick(consts), *consts, *member]
        rare = ["2 * q", "5 - q", "min(q, a)"]
        parts = []
        for _ in range(self.draw(st.integers(1, 3))):
            kind = self.draw(st.integers(0, 9))
            term = self.pick(rare) if self.draw(st.integers(0, 15)) == 7 else self.pick(terms)
            op = self.pick(["<", "<=", ">", ">=", "=="])
            if kind <= 4:
                parts.append(f"k {op} {term}" if kind % 2 else f"{term} {op} k")
            elif kind <= 7:
                diff = self.pick(["q - k", "k - q"])
                parts.append(f"{diff} {op} {self.pick(['w', 'a', 'q.pos', *consts, *member])}")
            else:
                row = ["flag", "not flag", "a < 7", "w >= 0", "len(L) > 1", "q.pos < a"] + [f"{v} < 2" for v in member]
                parts.append(self.pick(row))
        return " and ".join(parts)


@st.composite
def _tree(draw, size: int) -> list[int]:
    return [draw(st.integers(-1, x - 1)) for x in range(size)]


@st.composite
def random_masks(draw, max_sequences: int = 2, max_rest: int = 80, rows: bool = False):
    """(text, consts, sequences): a random mask, its const values and per-sequence runtime values. With `rows`,
    no grid, and conditions mostly of the row-interval form (`_Gen.row_expr`): what the planner's fast path
    takes."""
    has_grid = draw(st.booleans()) and not rows
    parts = {"A": ("A = a", "a"), "F": ("F[i] = L[i]", "sum(L)"), "C": ("C = 5", "5"), "G": ("G = grid(gh, gw)", "gh * gw")}
    chosen = [name for name in "AFC" if draw(st.integers(0, 4))] + (["G"] if has_grid else [])
    segments = [parts[name][0] for name in chosen]
    segments.append("Z = " + " - ".join(["n"] + [parts[name][1] for name in chosen]))
    segments = draw(st.permutations(segments))
    names = [s.split()[0] for s in segments]
    plain = [s[0] for s in names]
    grid_segments = [s for s in plain if s == "G"]

    rules = []
    for _ in range(draw(st.integers(1, 4))):
        family = "F" in plain and draw(st.integers(0, 3)) == 0
        if family:
            q_side = "F[i]"
            k_side = draw(st.sampled_from(["F[i]", "F[j]", "*", draw(st.sampled_from(plain))]))
            index_vars = ["i"] + (["j"] if k_side == "F[j]" else [])
        else:
            forms = ["one", "one", "one", "union", "all"]
            q_side, k_side = (_side(draw, draw(st.sampled_from(forms)), plain) for _ in "qk")
            index_vars = []
        grid = {"q": q_side in grid_segments, "k": k_side in grid_segments}
        gen = _Gen(draw, grid, index_vars)
        shape = draw(st.sampled_from(["", "", "full", "causal", "diag"]))
        where = "" if shape and draw(st.integers(0, 3)) == 0 else gen.row_expr() if rows else gen.bool_expr(2)
        if not shape and not where:
            shape = "full"
        rules.append(f"{q_side} -> {k_side}   {shape}{' where ' + where if where else ''}")

    consts = {}
    header = PARAMS
    if has_grid:
        header += ", const gh: int = 1, const gw: int = 1"
        consts = {"gh": draw(st.integers(1, 6)), "gw": draw(st.integers(1, 9))}
    text = (f"mask rnd({header})\nsegments:\n" + "".join(f"    {s}\n" for s in segments) +
            "rules:\n" + "".join(f"    {r}\n" for r in rules))

    sequences = []
    for _ in range(draw(st.integers(1, max_sequences))):
        values = {
            "a": draw(st.integers(0, 40)),
            "L": draw(st.lists(st.integers(0, 25), max_size=4)),
            "w": draw(st.integers(-10, 40)),
            "d": draw(st.sampled_from([-5, -2, -1, 1, 2, 3, 6])),
            "flag": draw(st.booleans()),
            "M": draw(st.lists(st.booleans(), max_size=8)),
            "tree": draw(_tree(draw(st.integers(0, 10)))),
        }
        rest = draw(st.integers(0, max_rest))
        lengths = {"A": values["a"], "F": sum(values["L"]), "C": 5, "G": consts["gh"] * consts["gw"] if has_grid else 0}
        values["n"] = sum(lengths[name] for name in chosen) + rest
        sequences.append(values)
    return text, consts, sequences


def _side(draw, form: str, plain: list[str]) -> str:
    if form == "all":
        return "*"
    if form == "union" and len(plain) > 1:
        a, b = draw(st.lists(st.sampled_from(plain), min_size=2, max_size=2, unique=True))
        return f"{a}|{b}"
    return draw(st.sampled_from(plain))
