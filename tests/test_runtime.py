"""The Python API's checks that need no GPU (maskc.runtime): inputs that are not tensors, per-sequence
runtime values (broadcast or one per sequence), options; with torch installed, tensors on the wrong device.
The launch itself is tested on the GPU machine (tests/gpu)."""

from __future__ import annotations

import functools
import pickle
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from small_configs import SMALL, packed_call

import maskc
from maskc.kernels import KernelOptions
from maskc.runtime import Attention, _host_ints, _is_per_sequence, split_options

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

SHARED_PROMPT = """mask sp(n: int = 64, responses: [int] = [8, 8], bonus: int = 0, table: [[bool]] = [[true]],
        const w: int = 4)
segments:
    P    = n - sum(responses)
    R[i] = responses[i]
rules:
    P    -> P      causal where q - k < w + bonus or table[q // 16][k // 16]
    R[i] -> P      full
    R[i] -> R[i]   causal
"""


CAUSAL_TEXT = "mask causal(n: int = 64)\nsegments:\n    S = n\nrules:\n    S -> S causal\n"


@pytest.fixture(scope="module")
def attn() -> Attention:
    return maskc.loads(SHARED_PROMPT, head_dim=64, dtype="fp16", arch="sm_80")


def test_loads_splits_kernel_options_from_const_values(attn):
    assert attn.compiled.options == KernelOptions(head_dim=64, dtype="fp16", arch="sm_80")
    assert dict(attn.program.consts) == {"w": 4}
    assert "sp" in repr(attn) and "head_dim=64" in repr(attn) and "fp16" in repr(attn)
    assert "backward=portable (deterministic)" in repr(attn)
    other = maskc.loads(SHARED_PROMPT, w=9, arch="sm_80")
    assert dict(other.program.consts) == {"w": 9} and other.compiled.options.head_dim == 128
    assert "backward=hopper_fused (not deterministic)" in repr(maskc.loads(SHARED_PROMPT, arch="sm_90a"))
    assert "backward=hopper (deterministic)" in repr(maskc.loads(SHARED_PROMPT, arch="sm_90a", head_dim=256))
    assert "backward=hopper (deterministic)" in repr(maskc.loads(SHARED_PROMPT, arch="sm_90a", deterministic=True))
    options, consts = split_options({"head_dim": 64, "w": 3})
    assert options.arch == "sm_90a" and consts == {"w": 3}  # no GPU here: the most common target, Hopper


def test_load_refuses_runtime_values_and_unknown_names():
    """A runtime value given to load would go unused (values are given per call): refused, never ignored."""
    examples = Path(__file__).resolve().parent.parent / "examples"
    with pytest.raises(ValueError, match=r"'window' is a runtime parameter of mask sliding_window: its values are "
                                         r"given per call, as in attn\(q, k, v, window=3\)"):
        maskc.load(examples / "sliding_window.mask", window=3, arch="sm_80")
    with pytest.raises(ValueError, match="'bonus' is a runtime parameter of mask sp.*const parameters \\(w\\)"):
        maskc.loads(SHARED_PROMPT, bonus=1, arch="sm_80")
    with pytest.raises(ValueError, match="'n' is the length of each sequence.*shapes of q, k and v"):
        maskc.loads(SHARED_PROMPT, n=64, arch="sm_80")
    for typo in ("windw", "head_dims"):
        with pytest.raises(ValueError, match=f"mask sliding_window has no parameter or option '{typo}': load-time "
                                             r"keywords are kernel options \(head_dim, dtype, arch, key_tile, "
                                             r"kv_stages, backward_kernels, deterministic\) and const parameters "
                                             r"\(sliding_window has none\)"):
            maskc.load(examples / "sliding_window.mask", **{typo: 3})
    assert dict(maskc.loads(SHARED_PROMPT, w=5, arch="sm_80").program.consts) == {"w": 5}


@pytest.mark.parametrize("call, message", [
    (lambda: maskc.loads(CAUSAL_TEXT, head_dim=128.0), "head_dim must be an int, got 128.0"),
    (lambda: maskc.loads(CAUSAL_TEXT, head_dim="128"), "head_dim must be an int, got '128'"),
    (lambda: maskc.loads(CAUSAL_TEXT, head_dim=True), "head_dim must be an int, got True"),
    (lambda: maskc.loads(CAUSAL_TEXT, arch="sm_90a", key_tile=64.0), "key_tile must be an int"),
    (lambda: maskc.loads(CAUSAL_TEXT, deterministic="yes"), "deterministic must be True or False"),
    (lambda: maskc.loads(CAUSAL_TEXT.encode()), "loads takes the text of a mask as a str, got bytes"),
    (lambda: maskc.loads(None), "loads takes the text of a mask as a str, got NoneType"),
])
def test_options_of_the_wrong_type_are_value_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_options_given_as_numpy_integers_are_ints():
    attn = maskc.loads(CAUSAL_TEXT, head_dim=np.int64(64), arch="sm_80")
    assert type(attn.compiled.options.head_dim) is int and attn.compiled.options.head_dim == 64


def test_the_default_family_on_sm90_is_hopper_for_its_head_dims():
    from maskc.runtime import default_arch

    assert default_arch() == "sm_90a"  # every mask, grid masks included (docs/hopper.md)
    assert default_arch(head_dim=96) == "sm_90"  # not a Hopper head dim: the portable family


def test_numpy_arrays_are_not_tensors(attn):
    q = np.zeros((1, 64, 2, 64), dtype=np.float16)
    with pytest.raises(ValueError, match="q must be a torch tensor or a CuPy array, got ndarray"):
        attn(q, q, q)
    with pytest.raises(ValueError):
        attn([[0.0]], q, q)


def test_scalars_and_lists_are_broadcast_to_every_sequence(attn):
    seqs = attn.sequences([64, 40, 16], {"bonus": 3, "responses": [4, 4], "table": [[True, False]]})
    assert [s["n"] for s in seqs] == [64, 40, 16]
    assert all(s["bonus"] == 3 and s["responses"] == [4, 4] and s["table"] == [[True, False]] for s in seqs)
    seqs = attn.sequences([64, 40], {"responses": []})
    assert [s["responses"] for s in seqs] == [[], []]
    seqs = attn.sequences([64, 40], {"bonus": np.array(3)})  # a numpy array of no dimensions is its number
    assert [s["bonus"] for s in seqs] == [3, 3] and type(seqs[0]["bonus"]) is int


def test_one_value_per_sequence(attn):
    seqs = attn.sequences([64, 40, 16], {"bonus": [1, 2, 3], "responses": [[8], [], [2, 2, 2]],
                                         "table": [[[True]], [[False, True]], np.zeros((0, 0), bool)]})
    assert [s["bonus"] for s in seqs] == [1, 2, 3]
    assert [s["responses"] for s in seqs] == [[8], [], [2, 2, 2]]
    assert [np.asarray(s["table"]).shape for s in seqs] == [(1, 1), (1, 2), (0, 0)]
    seqs = attn.sequences([64, 40], {"bonus": np.array([5, 6]), "responses": [[], [1]]})
    assert [int(s["bonus"]) for s in seqs] == [5, 6] and [s["responses"] for s in seqs] == [[], [1]]
    # The values reach planning: each sequence is laid out with its own.
    desc, _, layouts = attn.compiled.tables(seqs)
    assert [lay.n for lay in layouts] == [64, 40] and [len(lay.starts) for lay in layouts] == [1, 2]


@pytest.mark.parametrize("params, message", [
    ({"bonus": [1, 2, 3]}, "'bonus' has 3 values for 2 sequences"),
    ({"responses": [[1], [2], [3]]}, "'responses' has 3 values for 2 sequences"),
    ({"radius": 3}, "unknown runtime parameter 'radius'"),
    ({"n": 5}, "unknown runtime parameter 'n'"),
    ({"w": 5}, "'w' is const"),
    ({"responses": functools.reduce(lambda inner, _: [inner], range(5000), [])}, "'responses' is nested too deeply"),
])
def test_bad_runtime_values_are_value_errors(attn, params, message):
    with pytest.raises(ValueError, match=message):
        attn.sequences([64, 40], params)


def test_list_values_past_64_bits_are_out_of_range(attn):  # (numpy holds them as objects: not a shape problem)
    with pytest.raises(ValueError, match="'responses' has values outside the 32-bit range"):
        attn.plan(batch=1, n=64, responses=[8, 10**23])


def test_values_that_do_not_fit_the_mask_are_value_errors_naming_them(attn):
    for params in ({"responses": [40, 40]}, {"bonus": 2**31}, {"bonus": 1.5}, {"responses": [[1, 2], 3]}):
        with pytest.raises(ValueError) as info:
            attn.compiled.tables(attn.sequences([64, 40], params))
        assert "responses" in str(info.value) or "bonus" in str(info.value)


def test_bad_values_point_at_the_source_they_concern(attn, tmp_path):
    """A bad runtime value is still a ValueError, reported as maskc's other diagnostics are: the file (`<mask>` for
    a string), line and column, then the line with a caret under the parameter's declaration or the segment."""
    def report(fn, *args, **kwargs) -> list[str]:
        with pytest.raises(ValueError) as info:
            fn(*args, **kwargs)
        return str(info.value).splitlines()

    def caret(col: int, width: int) -> str:
        return "     | " + " " * (col - 1) + "^" * width

    header = "   1 | mask sp(n: int = 64, responses: [int] = [8, 8], bonus: int = 0, table: [[bool]] = [[true]],"
    assert report(attn.sequences, [64, 40], {"bonus": [1, 2, 3]}) == [
        "<mask>:1:49: error: 'bonus' has 3 values for 2 sequences", header, caret(49, 14)]
    assert report(attn.sequences, [64], {"w": 5}) == [
        "<mask>:2:9: error: 'w' is const (compiled in); compile again to change it",
        "   2 |         const w: int = 4)", caret(9, 16)]
    assert report(attn.sequences, [64], {"radius": 3}) == [
        "<mask>:1:6: error: unknown runtime parameter 'radius' for mask sp (runtime parameters: responses, bonus, "
        "table)", header, caret(6, 2)]
    assert report(attn.compiled.tables, attn.sequences([64, 40], {"bonus": True})) == [
        "<mask>:1:49: error: sequence 0: parameter 'bonus' is an int, got true", header, caret(49, 14)]
    assert report(attn.compiled.tables, attn.sequences([64], {"responses": [40, 40]})) == [
        "<mask>:4:5: error: sp: segment P has negative length -16 (n = 64, responses = [40, 40])",
        "   4 |     P    = n - sum(responses)", caret(5, 25)]
    assert report(maskc.loads, SHARED_PROMPT, bonus=1, arch="sm_80")[1:] == [header, caret(49, 14)]
    path = tmp_path / "sp.mask"
    path.write_text(SHARED_PROMPT)
    loaded = maskc.load(path, arch="sm_80")
    assert report(loaded.compiled.tables, loaded.sequences([64], {"table": [[1]]})) == [
        f"{path}:1:65: error: sp: parameter 'table' must hold bools, got [[1]]", header,
        caret(65, 26)]


def test_per_sequence_detection():
    assert not _is_per_sequence(3, 0, 2) and _is_per_sequence([3, 4], 0, 2) and _is_per_sequence(np.array([1]), 0, 1)
    assert not _is_per_sequence([3, 4], 1, 2) and not _is_per_sequence([], 1, 2) and _is_per_sequence([[], [1]], 1, 2)
    assert not _is_per_sequence([[True]], 2, 1) and _is_per_sequence([[[True]]], 2, 1)
    assert not _is_per_sequence(np.zeros((2, 3)), 2, 2) and _is_per_sequence(np.zeros((2, 2, 3)), 2, 2)
    # A first sequence's empty table: its depth is the other entries' to say (it was read as one ragged table).
    assert _is_per_sequence([[], [[1, 2], [3, 4]]], 2, 2) and _is_per_sequence([[], [], [[True]]], 2, 3)
    assert _is_per_sequence([np.zeros((0, 3)), np.ones((2, 2))], 2, 2)
    # Only empty tables: either reading fits, and one entry per sequence reads per sequence.
    assert _is_per_sequence([[], []], 2, 2) and not _is_per_sequence([[], []], 2, 3)


def _depth_bounds_one_by_one(value) -> tuple[int, float]:
    """runtime._depth_bounds as it was written first: along the entries one call each."""
    import math

    if isinstance(value, np.ndarray):
        return value.ndim, value.ndim
    if not isinstance(value, (list, tuple)):
        return 0, 0
    if not value:
        return 1, math.inf
    lowest, highest = _depth_bounds_one_by_one(value[0])
    if lowest != highest:
        for entry in value[1:]:
            low, high = _depth_bounds_one_by_one(entry)
            lowest, highest = max(lowest, low), min(highest, high)
    return 1 + lowest, 1 + highest


_nested = st.recursive(st.one_of(st.integers(0, 3), st.booleans(), st.just(1.5), st.just(np.zeros((0, 2))),
                                 st.just(np.int64(2))),
                       lambda inner: st.one_of(st.lists(inner, max_size=3), st.lists(inner, max_size=3).map(tuple)),
                       max_leaves=12)


@settings(max_examples=500, deadline=None)
@given(rest=st.lists(st.one_of(_nested, st.lists(st.integers(0, 3), max_size=2)), max_size=5),
       first=st.sampled_from([[], ()]))
@example(rest=[[], [1, 2], (3,), []], first=[])
def test_depth_bounds_of_lists_that_begin_empty_are_read_along_every_entry(rest, first):
    """A list of lists whose first is empty is read in a few passes where every entry is a list of numbers
    (runtime._flat_lists_bounds), with the bounds of one call per entry, whatever the entries are."""
    from maskc.runtime import _depth_bounds

    for value in ([first, *rest], [[first, *rest]], [first, [first, *rest]]):
        assert _depth_bounds(value) == _depth_bounds_one_by_one(value)


def test_per_sequence_tables_may_begin_with_an_empty_one(attn):
    """A table per sequence whose first is empty: each sequence gets its own (the first sequence's [] made the
    whole list look like one ragged table, refused for values that are fine)."""
    seqs = attn.sequences([64, 40], {"table": [[], [[True, False], [False, True]]]})
    assert [np.asarray(s["table"]).shape for s in seqs] == [(0,), (2, 2)]
    values, _ = attn.compiled.bind(seqs)
    assert [v.arrays["table"].shape[0] for v in values] == [0, 2]
    seqs = attn.sequences([64, 40], {"table": [[], []]})
    assert [s["table"] for s in seqs] == [[], []]


def test_cu_seqlens_must_be_one_dimensional_integers():
    assert _host_ints(np.array([0, 3, 7], np.int32), "cu_seqlens").tolist() == [0, 3, 7]
    assert _host_ints([0, 5], "cu_seqlens").dtype == np.int64
    assert _host_ints(None, "cu_seqlens") is None
    for bad in (np.zeros((2, 2), np.int32), np.array([0.0, 3.0]), [[0, 1]]):
        with pytest.raises(ValueError, match="cu_seqlens must be a 1-D integer array"):
            _host_ints(bad, "cu_seqlens")


def test_torch_tensors_on_the_cpu_are_refused(attn):
    torch = pytest.importorskip("torch")
    q = torch.zeros((1, 64, 2, 64), dtype=torch.float16)
    with pytest.raises(ValueError, match="q is on cpu; maskc needs CUDA tensors"):
        attn(q, q, q)
    assert _host_ints(torch.tensor([0, 4, 9], dtype=torch.int32), "cu_seqlens").tolist() == [0, 4, 9]
    with pytest.raises(ValueError):
        _host_ints(torch.zeros(3), "cu_seqlens")


def test_a_prepared_launch_holds_every_argument_as_the_kernel_reads_it():
    """The packed arguments of a repeated launch (maskc.runtime.launch): at the address cuLaunchKernel is given
    for each argument, its value in its C type's bytes; the slots (output pointers) where a launch sets them; a
    value out of its type's range refused, never wrapped."""
    import ctypes
    import struct

    from maskc.kernels import SM90A
    from maskc.runtime.launch import Kernel, PreparedLaunch

    args = SM90A.forward_args
    values = {a.name: i + 1 for i, a in enumerate(args)}
    maps = {a.name: bytes((7 * i + j) % 256 for j in range(128)) for i, a in enumerate(args) if a.kind == "tensor_map"}
    values.update(maps, scale_log2=0.25, num_heads=-3)
    launch = PreparedLaunch((Kernel(1234, 132, 384, 1000),), None, args, values, ("o", "lse"), keep=None)
    addresses = ctypes.cast(launch._params, ctypes.POINTER(ctypes.c_void_p))
    formats = {"ptr": "<Q", "i64": "<q", "i32": "<i", "f32": "<f"}
    for i, arg in enumerate(args):
        if arg.kind == "tensor_map":
            assert ctypes.string_at(addresses[i], 128) == values[arg.name]
            assert addresses[i] % 64 == 0
        else:
            size = struct.calcsize(formats[arg.kind])
            assert struct.unpack(formats[arg.kind], ctypes.string_at(addresses[i], size))[0] == values[arg.name]
            assert addresses[i] % size == 0
    launch._slots[:] = (111, 222)
    names = [a.name for a in args]
    assert [ctypes.c_uint64.from_address(addresses[names.index(n)]).value for n in ("o", "lse")] == [111, 222]
    with pytest.raises(OverflowError):
        PreparedLaunch((Kernel(1234, 132, 384, 1000),), None, args, values | {"num_heads": 2**31}, ("o", "lse"),
                       keep=None)


def test_each_stream_gets_its_own_work_counter_without_allocating(monkeypatch):
    """The Hopper forward's scheduler counters (maskc.runtime.launch): one int[2] per (device, stream) from one
    pool per device; the same stream always gets the same one, streams seen at once get different ones, and
    past SLOTS streams the oldest stream's slot is handed on."""
    from types import SimpleNamespace

    from maskc.runtime.launch import _WorkCounters

    pools = []

    def fake_pool(self, device):
        pools.append(device)
        return SimpleNamespace(data=SimpleNamespace(ptr=(device + 1) << 32))

    monkeypatch.setattr(_WorkCounters, "_zeroed_pool", fake_pool)
    monkeypatch.setattr(_WorkCounters, "SLOTS", 4)
    counters = _WorkCounters()
    first = [counters.address(0, stream) for stream in (11, 22, 33, 44)]
    assert len(set(first)) == 4 and all((a - (1 << 32)) % 8 == 0 for a in first)
    assert counters.address(0, 22) == first[1]
    assert counters.address(1, 22) == (2 << 32)  # another device: its own pool
    assert pools == [0, 1]
    assert counters.address(0, 55) == first[0]  # the fifth stream takes the oldest slot (stream 11's)
    assert [counters.address(0, s) for s in (22, 33, 44)] == first[1:]


def _tensor(name, shape, strides, ptr=1 << 20):
    from maskc.runtime import _Tensor

    return _Tensor(name, "torch", shape, strides, "bf16", 0, ptr, False, None)


def _contiguous(shape):
    return tuple(int(np.prod(shape[i + 1:])) for i in range(len(shape)))


@pytest.mark.parametrize("layout, step", [("packed", 0), ("padded", 300), ("heads_first", 2 * 300), ("one", 0),
                                          ("gapped", None)])
def test_grid_key_tiles_use_whole_boxes_where_the_layout_allows(layout, step, monkeypatch):
    """The Hopper forward's 5-D box maps (abi.GRID_BOXES): one per tensor with the grid's extents and the key
    tile as its box, and k_box_seq_tokens placing each sequence on the x axis; where sequences are not whole
    token steps apart (or differ in grid extents, below), grid_boxes is 0 and the 4-D maps stand in."""
    import maskc.runtime as rt

    made = []
    monkeypatch.setattr(rt, "grid_box_map", lambda *a: made.append(a) or bytes([len(made)]) * 128)
    attn = maskc.load(EXAMPLES / "clear.mask", arch="sm_90a", h=12, w=25)  # 300 tokens
    n, heads = 300, 2
    shapes = {"packed": ((2 * n, heads, 128), None), "padded": ((2, n, heads, 128), None),
              "heads_first": ((2, n, heads, 128), (heads * n * 128, 128, n * 128, 1)),
              "one": ((1, n, heads, 128), None), "gapped": ((2, n, heads, 128), (n * heads * 128 + 8, heads * 128, 128, 1))}
    shape, strides = shapes[layout]
    k, v = (_tensor(name, shape, strides or _contiguous(shape)) for name in "kv")
    _, tables, _ = attn.compiled.tables([{"n": n, "r": 4}] * (1 if layout == "one" else 2))
    fallback = {"tm_k": b"k" * 128, "tm_v": b"v" * 128}
    got = rt._grid_boxes(attn.compiled, layout == "packed", tables.seq_table, fallback,
                         {"k": (k, "k", 128), "v": (v, "k", 128)})
    if step is None:
        assert got == {"tm_k_box": b"k" * 128, "tm_v_box": b"v" * 128, "grid_boxes": 0, "q_box_seq_tokens": 0,
                       "k_box_seq_tokens": 0}
        return
    assert got["grid_boxes"] == 1 and got["k_box_seq_tokens"] == step
    assert [a[5] for a in made] == [(1, 12, 25)] * 2  # (t, y, x) extents of the grid
    assert [a[8] for a in made] == [attn.compiled.tiling.blocks[0].k_shape] * 2 == [(1, 8, 16)] * 2
    extent = {"packed": 2 * n, "padded": n + n, "heads_first": 2 * n + n, "one": n}[layout]
    assert [a[4] for a in made] == [extent] * 2  # tokens on the x axis: every sequence's, from the tensor's start


def test_grids_that_differ_between_sequences_copy_row_by_row(monkeypatch):
    import maskc.runtime as rt

    monkeypatch.setattr(rt, "grid_box_map", lambda *a: bytes(128))
    attn = maskc.loads("mask g(h: int = 4, w: int = 32)\nsegments:\n    I = grid(h, w)\nrules:\n"
                       "    I -> I   where abs(q.x - k.x) <= 2\n", arch="sm_90a")
    _, tables, _ = attn.compiled.tables([{"n": 128, "h": 4, "w": 32}, {"n": 128, "h": 8, "w": 16}])
    k = _tensor("k", (256, 2, 128), _contiguous((256, 2, 128)))
    got = rt._grid_boxes(attn.compiled, True, tables.seq_table, {"tm_k": b"k" * 128}, {"k": (k, "k", 128)})
    assert got == {"tm_k_box": b"k" * 128, "grid_boxes": 0, "q_box_seq_tokens": 0, "k_box_seq_tokens": 0}


def test_grids_that_differ_in_rows_only_copy_boxes_inside_each_grid(monkeypatch):
    """Grids of one width and different heights (a packed batch of dilated windows laid out as grids): the maps
    take the tallest grid, and grid_boxes 2 tells the kernels to copy a box only where it stays inside its own
    sequence's grid (templates/sm90a/hopper.cu.j2, load_k_box)."""
    import maskc.runtime as rt

    made = []
    monkeypatch.setattr(rt, "grid_box_map", lambda *a: made.append(a) or bytes(128))
    attn = maskc.loads("mask g(h: int = 4, w: int = 32)\nsegments:\n    I = grid(h, w)\nrules:\n"
                       "    I -> I   where abs(q.x - k.x) <= 2\n", arch="sm_90a")
    _, tables, _ = attn.compiled.tables([{"n": 128, "h": 4, "w": 32}, {"n": 320, "h": 10, "w": 32}])
    k = _tensor("k", (448, 2, 128), _contiguous((448, 2, 128)))
    got = rt._grid_boxes(attn.compiled, True, tables.seq_table, {"tm_k": b"k" * 128}, {"k": (k, "k", 128)})
    assert got["grid_boxes"] == 2 and [a[5] for a in made] == [(1, 10, 32)]
    _, tables, _ = attn.compiled.tables([{"n": 320, "h": 10, "w": 32}] * 2)
    got = rt._grid_boxes(attn.compiled, True, tables.seq_table, {"tm_k": b"k" * 128}, {"k": (k, "k", 128)})
    assert got["grid_boxes"] == 1
    source = attn.compiled.source
    assert "if (grid_boxes == 2 && last_slot / TILE_X % TILE_Y >= slots.left_y) return false;" in source


def test_the_query_and_key_sides_step_through_the_box_maps_apart(monkeypatch):
    """q's and k's sequences may be different steps apart on the maps' x axis (GQA with heads first: q's 4 heads
    make its step 4 n, k's 2 heads 2 n): each side gets its own step. Tensors of one side that disagree (q and a
    dout laid out otherwise) leave every tile to the row copies."""
    import maskc.runtime as rt

    monkeypatch.setattr(rt, "grid_box_map", lambda *a: bytes(128))
    attn = maskc.load(EXAMPLES / "clear.mask", arch="sm_90a", h=12, w=25)  # 300 tokens
    n = 300
    _, tables, _ = attn.compiled.tables([{"n": n, "r": 4}] * 2)

    def heads_first(name, heads):
        return _tensor(name, (2, n, heads, 128), (heads * n * 128, 128, n * 128, 1))

    q, k, v = heads_first("q", 4), heads_first("k", 2), heads_first("v", 2)
    tiles = {"q": (q, "q", 64), "k": (k, "k", 128), "v": (v, "k", 128)}
    got = rt._grid_boxes(attn.compiled, False, tables.seq_table, {}, tiles)
    assert (got["grid_boxes"], got["q_box_seq_tokens"], got["k_box_seq_tokens"]) == (1, 4 * n, 2 * n)
    dout = _tensor("dout", (2, n, 4, 128), _contiguous((2, n, 4, 128)))  # q's side, step n instead of 4 n
    fallback = {f"tm_{name}": name.encode() * 32 for name in ("q", "dout", "k", "v")}
    got = rt._grid_boxes(attn.compiled, False, tables.seq_table, fallback, tiles | {"dout": (dout, "q", 64)})
    assert got["grid_boxes"] == 0 and got["tm_dout_box"] == fallback["tm_dout"]


# -- plans made ahead of the call (Attention.plan) -----------------------------------------------------


def _checked(sequences, offsets) -> SimpleNamespace:
    """What _adopt reads of a call's checked inputs (_Inputs)."""
    from maskc.compiler import CompiledMask

    return SimpleNamespace(sequences=sequences, offsets=offsets, plan_key=CompiledMask.plan_key(sequences, offsets))


def test_a_plan_made_ahead_pickles_and_is_what_the_call_would_plan(attn):
    """A plan made in another process (pickled) and adopted by a fresh callable of the same mask serves the
    call's runtime values: the call finds it cached and plans nothing."""
    plan = attn.plan(cu_seqlens=[0, 40, 64], responses=[4, 4], bonus=[0, 2])
    assert isinstance(plan, maskc.Plan) and plan.key_tables is not None
    fresh = maskc.loads(SHARED_PROMPT, head_dim=64, dtype="fp16", arch="sm_80")
    sequences = fresh.sequences([40, 24], {"responses": [4, 4], "bonus": [0, 2]})
    offsets = np.array([0, 40])
    fresh._adopt(pickle.loads(pickle.dumps(plan)), _checked(sequences, offsets))
    desc, tables, _ = fresh.compiled.tables(sequences, offsets)
    expected = maskc.loads(SHARED_PROMPT, head_dim=64, dtype="fp16", arch="sm_80").compiled.tables(sequences, offsets)
    for got, want in zip(tables.arrays_in_order(), expected[1].arrays_in_order()):
        assert np.array_equal(got, want) and got.dtype == want.dtype
    assert np.array_equal(desc.k_tile, expected[0].k_tile) and np.array_equal(desc.row_ptr, expected[0].row_ptr)
    assert fresh.compiled.key_tables(desc, tables) is not None and len(fresh.compiled._plans) == 1


REWARD = """mask rm(prompt: int, responses: [int])
segments:
    P    = prompt
    R[i] = responses[i]
rules:
    P    -> P      causal
    R[i] -> P      full
    R[i] -> R[i]   causal
"""


def test_a_plan_of_many_sequences_bound_at_once_pickles_and_serves_the_call(monkeypatch):
    """A packed batch long enough to be bound at once (plan/layout_batch.py): its plan, pickled and adopted,
    holds the same tables as planning it one sequence at a time."""
    from maskc import compiler

    rng = np.random.default_rng(5)
    prompts = rng.integers(0, 90, compiler.BIND_AT_ONCE + 5).tolist()
    responses = [rng.integers(0, 40, rng.integers(0, 4)).tolist() for _ in prompts]
    lengths = [p + sum(r) for p, r in zip(prompts, responses)]
    cu = np.concatenate([[0], np.cumsum(lengths)])
    plan = maskc.loads(REWARD, arch="sm_90a").plan(cu_seqlens=cu, prompt=prompts, responses=responses)
    assert type(plan.tables[2]).__name__ == "BatchLayouts"
    fresh = maskc.loads(REWARD, arch="sm_90a")
    sequences = fresh.sequences(lengths, {"prompt": prompts, "responses": responses})
    fresh._adopt(pickle.loads(pickle.dumps(plan)), _checked(sequences, cu[:-1]))
    desc, tables, layouts = fresh.compiled.tables(sequences, cu[:-1])
    monkeypatch.setattr(compiler, "BIND_AT_ONCE", 10**9)  # every sequence bound by itself
    expected = maskc.loads(REWARD, arch="sm_90a").compiled.tables(sequences, cu[:-1])
    assert type(expected[2]) is list
    for got, want in zip(tables.arrays_in_order(), expected[1].arrays_in_order()):
        assert np.array_equal(got, want) and got.dtype == want.dtype
    assert [lay.n for lay in layouts] == lengths and len(fresh.compiled._plans) == 1


def test_a_plan_of_a_padded_batch_is_the_calls_plan():
    attn = maskc.loads(SHARED_PROMPT, arch="sm_90a")
    plan = attn.plan(batch=3, n=64)
    sequences = attn.sequences([64] * 3, {})
    assert plan.values == attn.compiled.plan_key(sequences, np.zeros(3, np.int64))
    assert plan.tables is attn.compiled.tables(sequences)  # made by the same cache the call uses


def test_a_plan_for_other_values_or_another_mask_is_refused(attn):
    plan = attn.plan(cu_seqlens=[0, 40, 64], responses=[4, 4])
    other_values = _checked(attn.sequences([40, 24], {"responses": [4, 5]}), np.array([0, 40]))
    with pytest.raises(ValueError, match="other runtime values"):
        attn._adopt(plan, other_values)
    other_offsets = _checked(attn.sequences([40, 24], {"responses": [4, 4]}), np.array([0, 48]))
    with pytest.raises(ValueError, match="other runtime values"):
        attn._adopt(plan, other_offsets)
    other_mask = maskc.loads(SHARED_PROMPT, head_dim=64, dtype="fp16", arch="sm_80", w=5)
    same_values = _checked(other_mask.sequences([40, 24], {"responses": [4, 4]}), np.array([0, 40]))
    with pytest.raises(ValueError, match="another mask"):
        other_mask._adopt(plan, same_values)
    with pytest.raises(ValueError, match="what Attention.plan returns"):
        attn._adopt({"values": plan.values}, same_values)


@pytest.mark.parametrize("kw, message", [
    ({}, "cu_seqlens .* or batch and n"),
    ({"cu_seqlens": [0, 64], "batch": 1}, "cu_seqlens .* or batch and n"),
    ({"batch": 2}, "cu_seqlens .* or batch and n"),
    ({"cu_seqlens": [0, 64, 32]}, "never decrease"),
    ({"cu_seqlens": [1, 64]}, "start at 0"),
    ({"batch": 2, "n": -1}, "non-negative integers"),
    ({"batch": True, "n": 64}, "non-negative integers"),
    ({"batch": 10**9, "n": 0}, "batch holds 1,000,000,000 sequences; a call takes at most 1,048,576"),  # (not 8 GB)
    ({"cu_seqlens": np.zeros(2**20 + 2, np.int32)}, "cu_seqlens holds 1,048,577 sequences"),
])
def test_plan_takes_cu_seqlens_or_a_padded_shape(attn, kw, message):
    with pytest.raises(ValueError, match=message):
        attn.plan(**kw)


_ODD_VALUES = st.one_of(st.integers(-3, 70), st.booleans(), st.floats(allow_nan=True), st.text(max_size=2),
                        st.none(), st.lists(st.integers(-3, 40), max_size=4),
                        st.lists(st.lists(st.integers(-3, 40), max_size=3), max_size=3))
_BOUNDS = st.lists(st.integers(0, 80), max_size=5).map(lambda x: [0] + sorted(x))  # valid cu_seqlens


@settings(max_examples=300, deadline=None)
@given(shape=st.one_of(
           st.fixed_dictionaries({"cu_seqlens": st.one_of(_BOUNDS, _BOUNDS.map(lambda x: np.array(x, dtype=np.int32)),
                                                          st.lists(st.integers(-2, 80), max_size=5), _ODD_VALUES)}),
           st.fixed_dictionaries({"batch": st.one_of(st.integers(0, 3), _ODD_VALUES),
                                  "n": st.one_of(st.integers(0, 80), _ODD_VALUES)})),
       params=st.dictionaries(st.sampled_from(["responses", "bonus", "table", "w", "nope", "n"]),
                              st.one_of(st.lists(st.integers(0, 20), max_size=3), st.integers(0, 5), _ODD_VALUES),
                              max_size=2))
def test_plan_of_any_values_is_a_plan_or_says_what_is_wrong(attn, shape, params):
    """Attention.plan on any cu_seqlens or padded shape and any runtime values: a Plan, or a ValueError that says
    why (a MaskError pointing into the mask is one); never another exception."""
    try:
        plan = attn.plan(**(params | shape))
    except ValueError as error:
        assert str(error)
        return
    assert plan.mask == attn.compiled.fingerprint and plan.key_tables is not None  # (sm_80 has a backward)


def test_plan_checks_runtime_values_as_the_call_does(attn):
    with pytest.raises(ValueError, match="unknown runtime parameter 'nope'"):
        attn.plan(cu_seqlens=[0, 64], nope=1)


def _canonical(value):
    """Runtime values as bind reads them: numpy's ints are ints, bools are not ints, lists and tuples alike."""
    if isinstance(value, dict):
        return tuple(sorted((k, _canonical(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return ("list", tuple(_canonical(v) for v in value))
    if isinstance(value, (bool, np.bool_)):
        return ("bool", bool(value))
    if isinstance(value, (int, np.integer)):
        return ("int", int(value))
    return (type(value).__name__, value)


_leaf = st.one_of(st.integers(0, 2), st.integers(0, 2).map(np.int64), st.booleans(), st.just(1.0))
_value = st.one_of(_leaf, st.lists(st.integers(0, 2), max_size=2), st.lists(_leaf, max_size=2).map(tuple),
                   st.lists(st.lists(st.one_of(st.booleans(), st.integers(0, 1)), max_size=2), max_size=2))
_batch = st.lists(st.dictionaries(st.sampled_from(["n", "a", "b"]), _value, max_size=3), max_size=3)


@settings(max_examples=400, deadline=None)
@given(first=_batch, second=_batch)
@example(first=[{"n": [], "a": [], "b": 0}], second=[{"n": [], "a": (), "b": 0}])  # a list and a tuple key alike
def test_plan_keys_never_confuse_different_runtime_values(first, second):
    """The plan cache's key (CompiledMask.plan_key): batches with equal keys hold the same values (so one plan
    serves both), and equal values as the call builds them get equal keys."""
    from maskc.compiler import CompiledMask, frozen_values

    same_key = CompiledMask.plan_key(first) == CompiledMask.plan_key(second)
    if same_key:
        assert [_canonical(s) for s in first] == [_canonical(s) for s in second]
    if [frozen_values(s) for s in first] == [frozen_values(s) for s in second]:  # the same values, types and all
        assert same_key


@settings(max_examples=300, deadline=None)
@given(batch=_batch, flips=st.randoms(use_true_random=False))
def test_plan_keys_of_the_same_values_agree_whether_lists_or_tuples(batch, flips):
    """Values that bind alike key alike: a list and a tuple of the same entries (frozen_values' own rule)."""
    from maskc.compiler import CompiledMask

    def flip(value):
        if isinstance(value, (list, tuple)) and flips.random() < 0.5:
            return (tuple if isinstance(value, list) else list)(value)
        return value

    other = [{name: flip(value) for name, value in s.items()} for s in batch]
    assert CompiledMask.plan_key(other) == CompiledMask.plan_key(batch)


def test_long_frozen_values_keep_their_hash_and_their_types_apart():
    """Lists of a value per sequence of a large batch freeze to tuples that hash once (HashedOnce): equal to the
    plain tuples of shorter lists' rule, kept apart by type, and pickled without their hash (another process's
    differs)."""
    import pickle

    from maskc.compiler import HashedOnce, frozen_values

    ints, lists = list(range(100)), [[b, b + 1] for b in range(100)]
    frozen = frozen_values({"a": ints, "b": lists})
    assert isinstance(frozen[0][1][1], HashedOnce) and frozen[0][1][1] == tuple(ints)
    assert frozen == frozen_values({"a": tuple(ints), "b": [tuple(x) for x in lists]})
    assert hash(frozen) == hash(frozen_values({"a": ints, "b": lists}))
    assert frozen_values([True] * 100) != frozen_values([1] * 100) != frozen_values([1.0] * 100)
    assert frozen_values(lists[:-1] + [[99, True]]) != frozen_values(lists)
    ints[3] = 4  # a list changed in place keys anew
    assert frozen_values({"a": ints, "b": lists}) != frozen
    again = pickle.loads(pickle.dumps(frozen))
    assert "hash" not in again[0][1][1].__dict__ and again == frozen and hash(again) == hash(frozen)


_ODD = st.sampled_from([-1, -(2**31), 2**31, 2**40, 1.5, True, "3", None, [], [1, -1], [[1], [2, 3]], {"a": 1},
                        np.int64(3), np.int8(-2), np.uint64(2**63), np.float32(2.0), np.bool_(True), np.array(3),
                        np.array([1, 2]), np.array([[1, 2], [3, 4]]), np.array([1.5]), np.array([], dtype=np.int64)])


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_every_examples_plan_of_odd_values_is_a_plan_or_says_what_is_wrong(data):
    """Each example's small batch with one runtime value changed (to a negative, an int past 32 bits, a float, a
    bool, a string, None, a list where a number goes, a number where a list goes, a ragged list), or a sequence's
    value dropped, or the sequences' lengths changed: Attention.plan gives a Plan or a ValueError, and a value the
    kernels cannot hold is never planned silently."""
    name = data.draw(st.sampled_from(sorted(SMALL)), label="example")
    attn = _example_attention(name)
    lengths, call = packed_call(attn, SMALL[name][1])
    params = {key: value for key, value in call.items() if key != "cu_seqlens"}
    change = data.draw(st.sampled_from(["value", "value", "drop", "lengths"]), label="change")
    if change == "value" and params:
        param = data.draw(st.sampled_from(sorted(params)), label="param")
        b = data.draw(st.integers(0, len(lengths) - 1), label="sequence")
        params[param][b] = data.draw(_ODD, label="odd value")
    elif change == "drop" and params:
        params[data.draw(st.sampled_from(sorted(params)), label="param")].pop()
    else:
        b = data.draw(st.integers(0, len(lengths) - 1), label="sequence")
        lengths[b] = data.draw(st.sampled_from([0, 1, lengths[b] + 1, lengths[b] * 3, 2**31]), label="length")
    cu = np.concatenate([[0], np.cumsum(lengths)])
    try:
        plan = attn.plan(cu_seqlens=cu, **params)
    except ValueError as error:
        assert str(error)
        return
    code, seq_table = attn.compiled.code, plan.tables[1].seq_table
    for i, value in enumerate(code.seq_values):  # the mask code reads each in the C type its range needs
        if value.ctype == "int":
            column = seq_table[:, code.seq_table.value(i)]
            assert ((-(2**31) <= column) & (column < 2**31)).all(), f"{value.text} does not fit its int"


@functools.lru_cache(maxsize=None)
def _example_attention(name):
    return maskc.load(EXAMPLES / f"{name}.mask", arch="sm_90a", **SMALL[name][0])


_OPTION_VALUES = st.one_of(st.sampled_from([64, 128, 256, 100, 0, -1, "bf16", "fp16", "fp32", "sm_80", "sm_90a",
                                            "sm_70", "sm_100", "hopper", "hopper_fused", "portable", "x", 2, 3,
                                            True, False, None, 1.5, [64], "128"]))


@settings(max_examples=300, deadline=None)
@given(options=st.dictionaries(st.sampled_from(["head_dim", "dtype", "arch", "key_tile", "kv_stages",
                                                "backward_kernels", "deterministic", "w", "bonus", "n", "zzz"]),
                               _OPTION_VALUES, max_size=4))
def test_loading_with_any_options_compiles_or_says_what_is_wrong(options):
    """maskc.loads with any kernel options and load-time keywords: an Attention whose options are the ones given,
    or a ValueError (a MaskError pointing into the mask is one); never another exception. (Nothing is built:
    NVRTC runs at the first call.)"""
    try:
        attn = maskc.loads(SHARED_PROMPT, **options)
    except ValueError as error:
        assert str(error)
        return
    for name in ("head_dim", "dtype", "arch"):
        if name in options:
            assert getattr(attn.compiled.options, name) == options[name]
