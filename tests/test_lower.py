"""Lowering: the IR produced for representative masks, against hand-built `ir` objects."""

from maskc import ir
from maskc.diagnostics import Span
from maskc.front import read_program
from maskc.ir import (
    Ancestor,
    ArrayLen,
    ArraySum,
    Binary,
    Compare,
    Const,
    FamilyIndex,
    Index,
    Logic,
    Member,
    Param,
    ParamDecl,
    ParamType,
    Pow,
    Segment,
    Side,
    Token,
    Unary,
)

Q, K = Token("q", "index"), Token("k", "index")
CAUSAL = Compare("<=", K, Q)
DIAG = Compare("==", K, Q)
SAME_MEMBER = Compare("==", Member("q"), Member("k"))


def lowered(body: str, params: str = "n: int = 64"):
    return read_program(f"mask m({params})\n{body}")


def predicates(body: str, params: str = "n: int = 64"):
    return [region.pred for region in lowered(body, params).regions]


def where(text: str, params: str = "n: int = 64, w: int = 4"):
    """The predicate of the single rule `S -> S where TEXT`."""
    (pred,) = predicates(f"segments:\n    S = n\nrules:\n    S -> S where {text}\n", params)
    return pred


def test_hstu():
    program = read_program(
        "mask hstu(n: int = 32768, targets: int = 2048)\n"
        "segments:\n    H = n - targets\n    T = targets\n"
        "rules:\n    H -> H causal\n    T -> H full\n    T -> T diag\n"
    )
    assert program.name == "hstu"
    assert program.params == (
        ParamDecl("n", ParamType("int"), default=32768),
        ParamDecl("targets", ParamType("int"), default=2048),
    )
    assert program.segments == (
        Segment("H", "single", length=Binary("-", Param("n"), Param("targets"))),
        Segment("T", "single", length=Param("targets")),
    )
    assert [(r.q, r.k, r.pred) for r in program.regions] == [
        (Side(("H",)), Side(("H",)), CAUSAL),
        (Side(("T",)), Side(("H",)), ir.TRUE),
        (Side(("T",)), Side(("T",)), DIAG),
    ]
    assert [r.rule for r in program.regions] == ["H -> H causal", "T -> H full", "T -> T diag"]
    assert program.batch == () and program.source.path == "<mask>"


def test_params_keep_types_const_and_defaults_as_python_values():
    program = lowered(
        "segments:\n    S = n\nrules:\n",
        "n: int = 8, const w: int = -3, docs: [int] = [1, 2], t: [[bool]] = [[true], [false]], e: [int] = [], p: int",
    )
    assert program.params == (
        ParamDecl("n", ParamType("int"), default=8),
        ParamDecl("w", ParamType("int"), const=True, default=-3),
        ParamDecl("docs", ParamType("int", 1), default=(1, 2)),
        ParamDecl("t", ParamType("bool", 2), default=((True,), (False,))),
        ParamDecl("e", ParamType("int", 1), default=()),
        ParamDecl("p", ParamType("int")),
    )


def test_segments_of_every_kind():
    program = lowered(
        "segments:\n"
        "    P = n - sum(docs)\n"
        "    D[i] = docs[i] + extra[i]\n"
        "    B[j < len(docs) * 2] = 64 + j\n"
        "    I = grid(h, w)\n"
        "    V = grid(2, h, w)\n"
        "rules:\n",
        "n: int = 64, docs: [int] = [1], extra: [int] = [0], const h: int = 2, const w: int = 3",
    )
    assert program.segments == (
        Segment("P", "single", length=Binary("-", Param("n"), ArraySum("docs"))),
        # several lists indexed by i: the first gives the count
        Segment(
            "D",
            "family",
            length=Binary("+", Index("docs", (FamilyIndex(),)), Index("extra", (FamilyIndex(),))),
            count=ArrayLen("docs"),
        ),
        Segment(
            "B",
            "family",
            length=Binary("+", Const(64), FamilyIndex()),
            count=Binary("*", ArrayLen("docs"), Const(2)),
        ),
        Segment("I", "grid", dims=(Param("h"), Param("w"))),
        Segment("V", "grid", dims=(Const(2), Param("h"), Param("w"))),
    )


FAMILIES = "segments:\n    P = 8\n    R[i] = docs[i]\n    T = 8\nrules:\n"


def test_family_with_the_same_index_on_both_sides_is_one_member():
    (pred,) = predicates(FAMILIES + "    R[i] -> R[i] causal where i % 2 == 0\n", "docs: [int] = [4]")
    assert pred == Logic("and", (CAUSAL, SAME_MEMBER, Compare("==", Binary("%", Member("q"), Const(2)), Const(0))))


def test_family_with_different_indices_ranges_independently():
    (pred,) = predicates(FAMILIES + "    R[i] -> R[j] where j < i\n", "docs: [int] = [4]")
    assert pred == Compare("<", Member("k"), Member("q"))


def test_a_bare_family_name_is_every_member():
    (region,) = lowered(FAMILIES + "    R -> R[i] full\n", "docs: [int] = [4]").regions
    assert (region.q, region.k, region.pred) == (Side(("R",)), Side(("R",)), ir.TRUE)


def test_sides_list_segments_in_layout_order_without_repeats():
    program = lowered(FAMILIES + "    T|P|T -> * full\n    * -> R|P causal\n", "docs: [int] = [4]")
    assert [(r.q, r.k) for r in program.regions] == [
        (Side(("P", "T")), Side(("P", "R", "T"))),
        (Side(("P", "R", "T")), Side(("P", "R"))),
    ]


def test_grid_coordinates_and_powers():
    (pred,) = predicates(
        "segments:\n    I = grid(h, w)\nrules:\n    I -> I where (q.y - k.y)^2 + (q.x - k.x)^(1 + 1) <= r^2\n",
        "const h: int = 4, const w: int = 4, r: int = 2",
    )
    dy = Binary("-", Token("q", "y"), Token("k", "y"))
    dx = Binary("-", Token("q", "x"), Token("k", "x"))
    assert pred == Compare("<=", Binary("+", Pow(dy, 2), Pow(dx, 2)), Pow(Param("r"), 2))


def test_chained_comparison_becomes_a_conjunction_of_pairs():
    q_minus_k = Binary("-", Q, K)
    assert where("0 <= q - k < w") == Logic("and", (Compare("<=", Const(0), q_minus_k), Compare("<", q_minus_k, Param("w"))))


def test_shape_comes_before_the_where_predicate():
    (pred,) = predicates("segments:\n    S = n\nrules:\n    S -> S causal where q - k < 8\n")
    assert pred == Logic("and", (CAUSAL, Compare("<", Binary("-", Q, K), Const(8))))


def test_functions():
    assert where("clamp(q, 0, w) == max(k, 1, w)") == Compare(
        "==",
        Binary("min", Binary("max", Q, Const(0)), Param("w")),
        Binary("max", Binary("max", K, Const(1)), Param("w")),
    )
    assert where("min(q, k, w, n) > abs(-k)") == Compare(
        ">",
        Binary("min", Binary("min", Binary("min", Q, K), Param("w")), Param("n")),
        Unary("abs", Unary("neg", K)),
    )
    assert where("ancestor(parent, q.pos, k.pos)", "n: int = 8, parent: [int] = [-1]") == Ancestor(
        "parent", Token("q", "pos"), Token("k", "pos")
    )
    assert where("len(d) + sum(d) > 0", "n: int = 8, d: [int] = [1]") == Compare(
        ">", Binary("+", ArrayLen("d"), ArraySum("d")), Const(0)
    )


def test_logic_tables_and_literals():
    assert where("not layout[q // 128][k // 128] or flag and true", "n: int = 8, layout: [[bool]] = [[true]], flag: bool = false") == Logic(
        "or",
        (
            Unary("not", Index("layout", (Binary("//", Q, Const(128)), Binary("//", K, Const(128))))),
            Logic("and", (Param("flag"), Const(True))),
        ),
    )
    assert where("-q^2 < -5") == Compare("<", Unary("neg", Pow(Q, 2)), Const(-5))


def test_batch_lines_become_name_value_pairs():
    program = read_program(
        "mask m(prompt: int, responses: [int])\nsegments:\n    P = prompt\n    R[i] = responses[i]\nrules:\n"
        "    R[i] -> P full\nbatch:\n    prompt = 12, responses = [3, 4]\n    n = 7, prompt = 7, responses = []\n"
    )
    assert program.batch == (
        (("prompt", 12), ("responses", (3, 4))),
        (("n", 7), ("prompt", 7), ("responses", ())),
    )


def test_rule_text_is_one_line_without_comments():
    (region,) = lowered(
        "segments:\n    S = n\nrules:\n    S  ->  S   where (q < k   # first\n        and  k < 4)  # second\n"
    ).regions
    assert region.rule == "S -> S where (q < k and k < 4)"


def test_nodes_keep_the_span_of_their_text():
    program = lowered("segments:\n    S = n\nrules:\n    S -> S causal where q - k < w\n", "n: int = 64, w: int = 4")
    (region,) = program.regions
    shape, limit = region.pred.args
    assert region.span == Span(5, 5, 5, 34)
    assert shape.span == shape.lhs.span == Span(5, 12, 5, 18)  # the `causal` keyword
    assert limit.span == Span(5, 25, 5, 34)
    assert limit.lhs.span == Span(5, 25, 5, 30) and limit.rhs.span == Span(5, 33, 5, 34)
    assert region.q.span == Span(5, 5, 5, 6) and region.k.span == Span(5, 10, 5, 11)
    assert program.segments[0].span == Span(3, 5, 3, 10)
    assert program.params[1].span == Span(1, 21, 1, 31)
