"""Compile a generated kernel's mask section for the host with a C++ compiler and evaluate it on every
(q, k) pair: the generated mask code checked against the exact definition without a GPU."""

from __future__ import annotations

import ctypes
import hashlib
import os
import pickle
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import numpy as np

HARNESS = r"""
extern "C" void maskc_eval_all(const i64* seq_table, const int* seg_start, const int* seg_code, const int* arrays,
                               int b, int n, unsigned char* out) {
    const MaskSeq s = mask_seq(seq_table, seg_start, seg_code, arrays, b);
    for (int q = 0; q < n; ++q) {
        const MaskRow row = mask_row(s, q);
        for (int k = 0; k < n; ++k) out[(long long)q * n + k] = mask_visible(s, row, mask_col(s, k), 0xffffffffu);
    }
}

// The same pairs as the kernels reach them: query tile by query tile, each row through query_row(), and key tile by
// key tile, each column through key_column() (slot 8 group + offset of its tile, with the tile's segment where
// every tile lies in one). out[n * n] is set where query_row's or key_column's token (or validity) disagrees with
// slot_token's.
extern "C" void maskc_eval_by_tiles(const i64* seq_table, const int* seg_start, const int* seg_code, const int* arrays,
                                    int b, int n, int q_tiles, int q_slots, int k_tiles, int k_slots,
                                    unsigned char* out) {
    const MaskSeq s = mask_seq(seq_table, seg_start, seg_code, arrays, b);
    for (int qt = 0; qt < q_tiles * q_slots; ++qt) {
        const TileSlots queries = q_tile_slots(s, qt / q_slots);
        const int q = slot_token(queries, qt % q_slots);
        const MaskRow row = query_row(s, queries, qt % q_slots);
        if (row.index != q) out[(long long)n * n] = 1;
        if (q < 0) continue;
        for (int t = 0; t < k_tiles; ++t) {
            const TileSlots keys = k_tile_slots(s, t);
            const SegmentAt segment = tile_segment(s, keys);
            for (int c = 0; c < k_slots; ++c) {
                const int k = slot_token(keys, c);
                const MaskCol col = key_column(s, keys, c / 8, c % 8, segment);
                if (col.valid != (k >= 0) || (k >= 0 && col.index != k)) out[(long long)n * n] = 1;
                if (k < 0) continue;
                out[(long long)q * n + k] = mask_visible(s, row, col, 0xffffffffu);
            }
        }
    }
}

extern "C" void maskc_tokens(const i64* seq_table, const int* seg_start, const int* seg_code, const int* arrays,
                             int b, int side, int tiles, int slots, int* out) {
    const MaskSeq s = mask_seq(seq_table, seg_start, seg_code, arrays, b);
    for (int t = 0; t < tiles; ++t)
        for (int i = 0; i < slots; ++i) out[t * slots + i] = side == 0 ? q_token(s, t, i) : k_token(s, t, i);
}
"""


# Where every rule is an interval of keys per row (the mask code has RowKeys), the two ways the kernels read the
# intervals: by the columns of a thread (visible_columns, the forward and the dQ kernels: bit i of visible[c] is
# slot first_slot + 8 i + c) and by the slot bits of a query (visible_slots, the dK/dV kernels: bit b of word w is
# slot 32 w + b), over every key tile and every rule. out_columns, out_slots: [n, n].
HARNESS_KEY_INTERVALS = r"""
template <int GROUPS>
static void columns_of_tile(const RowKeys& keys_of_row, const TileSlots& keys, int n, unsigned char* out) {
    for (int first_slot = 0; first_slot < 8; first_slot += 2) {
        u32 visible[2];
        visible_columns<GROUPS>(keys_of_row, 0xffffffffu, keys, first_slot, visible);
        for (int i = 0; i < GROUPS; ++i)
            for (int c = 0; c < 2; ++c) {
                const int k = slot_token(keys, first_slot + 8 * i + c);
                if (k >= 0 && k < n) out[k] = (visible[c] >> i) & 1u;
            }
    }
}

extern "C" void maskc_eval_key_intervals(const i64* seq_table, const int* seg_start, const int* seg_code,
                                         const int* arrays, int b, int n, int k_tiles, int k_slots,
                                         unsigned char* out_columns, unsigned char* out_slots) {
    const MaskSeq s = mask_seq(seq_table, seg_start, seg_code, arrays, b);
    for (int q = 0; q < n; ++q) {
        const RowKeys row = row_keys(mask_row(s, q));
        for (int t = 0; t < k_tiles; ++t) {
            const TileSlots keys = k_tile_slots(s, t);
            if (k_slots == 128) columns_of_tile<16>(row, keys, n, out_columns + (long long)q * n);
            else columns_of_tile<8>(row, keys, n, out_columns + (long long)q * n);
            for (int w = 0; w < k_slots / 32; ++w) {
                const u32 bits = visible_slots(row, 0xffffffffu, keys, w);
                for (int i = 0; i < 32; ++i) {
                    const int k = slot_token(keys, 32 * w + i);
                    if (k >= 0 && k < n) out_slots[(long long)q * n + k] = (bits >> i) & 1u;
                }
            }
        }
    }
}
"""


def compiler() -> str | None:
    return shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")


def build(source: str, workdir: Path) -> ctypes.CDLL:
    """The generated .cu compiled as host C++ (its device part is behind __CUDACC__), with test harnesses."""
    text = source + (HARNESS if "maskc_eval_all" not in source else "")
    if "struct RowKeys" in source and "maskc_eval_key_intervals" not in source:
        text += HARNESS_KEY_INTERVALS
    key = hashlib.sha256(text.encode()).hexdigest()[:16]
    src = workdir / f"mask_{key}.cpp"
    lib = workdir / f"mask_{key}.so"
    if not lib.exists():
        src.write_text(text)
        subprocess.run([compiler(), "-O1", "-shared", "-fPIC", "-std=c++17", "-o", str(lib), str(src)],
                       check=True, capture_output=True, text=True)
    return ctypes.CDLL(str(lib))


def _table_pointers(tables) -> list:
    """The kernel tables as the harness functions take them (each pointer keeps its array alive)."""
    arrays = (tables.seq_table, tables.seg_start, tables.seg_code, tables.arrays)
    return [np.ascontiguousarray(a).ctypes.data_as(ctypes.c_void_p) for a in arrays]


def evaluate_all(lib: ctypes.CDLL, tables, b: int, n: int) -> np.ndarray:
    out = np.zeros((n, n), dtype=np.uint8)
    ptrs = _table_pointers(tables)
    lib.maskc_eval_all(*ptrs, ctypes.c_int(b), ctypes.c_int(n), out.ctypes.data_as(ctypes.c_void_p))
    return out.astype(bool)


def evaluate_by_tiles(lib: ctypes.CDLL, tables, b: int, n: int, tiles: tuple[int, int, int, int]) -> np.ndarray:
    """The mask as the kernels evaluate it, tile by tile through query_row() and key_column() (`tiles`: query
    tiles, slots of a query tile, key tiles, slots of a key tile); an AssertionError where either gives another
    token (or validity) than slot_token() for some slot."""
    out = np.zeros(n * n + 1, dtype=np.uint8)
    ptrs = _table_pointers(tables)
    lib.maskc_eval_by_tiles(*ptrs, ctypes.c_int(b), ctypes.c_int(n), *(ctypes.c_int(t) for t in tiles),
                            out.ctypes.data_as(ctypes.c_void_p))
    assert out[-1] == 0, f"sequence {b}: query_row() or key_column() and slot_token() disagree on some slot"
    return out[:-1].reshape(n, n).astype(bool)


def evaluate_key_intervals(lib: ctypes.CDLL, tables, b: int, n: int, k_tiles: int, k_slots: int):
    """The mask through the rows' key intervals, as (visible_columns, visible_slots) see it: two [n, n] arrays."""
    columns, slots = np.zeros((n, n), dtype=np.uint8), np.zeros((n, n), dtype=np.uint8)
    ptrs = _table_pointers(tables)
    lib.maskc_eval_key_intervals(*ptrs, ctypes.c_int(b), ctypes.c_int(n), ctypes.c_int(k_tiles), ctypes.c_int(k_slots),
                                 columns.ctypes.data_as(ctypes.c_void_p), slots.ctypes.data_as(ctypes.c_void_p))
    return columns.astype(bool), slots.astype(bool)


def tokens(lib: ctypes.CDLL, tables, b: int, side: str, tiles: int, slots: int) -> np.ndarray:
    out = np.zeros((tiles, slots), dtype=np.int32)
    ptrs = _table_pointers(tables)
    lib.maskc_tokens(*ptrs, ctypes.c_int(b), ctypes.c_int(0 if side == "q" else 1), ctypes.c_int(tiles),
                     ctypes.c_int(slots), out.ctypes.data_as(ctypes.c_void_p))
    return out


def workdir() -> Path:
    return Path(tempfile.mkdtemp(prefix="maskc-host-"))


def check_generated_code(compiled, sequences, workdir: Path, note: str = "") -> None:
    """The generated mask code (compiled for the host) equals the exact mask on every pair, both token by
    token and tile by tile as the kernels evaluate it, and its q_token / k_token equal the planner's tiles,
    for every sequence."""
    from maskc.tools.reference import dense_mask

    lib = build(compiled.source, workdir)
    desc, tables, layouts = compiled.tables(sequences)
    values, _ = compiled.bind(sequences)
    for b, (lay, val) in enumerate(zip(layouts, values)):
        want = dense_mask(compiled.program, lay, val)
        k_tiles, k_slots = int(desc.blocks.tiles("k")[b]), compiled.options.block_k
        tiles = (int(desc.blocks.tiles("q")[b]), compiled.options.block_q, k_tiles, k_slots)
        ways = [("the generated code", evaluate_all(lib, tables, b, lay.n)),
                ("the generated code, tile by tile,", evaluate_by_tiles(lib, tables, b, lay.n, tiles))]
        if "struct RowKeys" in compiled.source:  # every rule an interval of keys per row
            columns, slots = evaluate_key_intervals(lib, tables, b, lay.n, k_tiles, k_slots)
            ways += [("visible_columns", columns), ("visible_slots", slots)]
        for how, got in ways:
            if not np.array_equal(got, want):
                q, k = np.argwhere(got != want)[0]
                raise AssertionError(f"sequence {b}: {how} says {got[q, k]} at (q={q}, k={k}), the exact mask "
                                     f"{want[q, k]}{note}")
        for side, size in (("q", compiled.options.block_q), ("k", compiled.options.block_k)):
            count = int(desc.blocks.tiles(side)[b])
            assert np.array_equal(tokens(lib, tables, b, side, count, size), desc.tokens(side, b, np.arange(count))), \
                f"sequence {b}: {side}_token differs from the planner's tiles{note}"


def isolated(fn):
    """fn() in a forked process, so that generated code that traps (an integer division overflow raises
    SIGFPE on x86) fails the test instead of killing pytest. An exception in fn fails it as an AssertionError
    with the same message."""
    if not hasattr(os, "fork"):
        return fn()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: only the result, none of pytest's cleanup
        code = 1
        try:
            os.close(read)
            try:
                result = ("ok", fn())
            except Exception as exc:  # noqa: BLE001 - reported by the parent
                result = ("error", f"{type(exc).__name__}: {exc}")
            with os.fdopen(write, "wb") as out:
                out.write(pickle.dumps(result))
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as got:
        data = got.read()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        raise AssertionError(f"the generated code died of {signal.Signals(os.WTERMSIG(status)).name}")
    assert os.WEXITSTATUS(status) == 0 and data, "the test harness in the child process failed"
    kind, value = pickle.loads(data)
    if kind == "error":
        raise AssertionError(value)
    return value
