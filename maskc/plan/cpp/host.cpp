// The row-interval planner on the host, for plan/native.py (ctypes): the descriptor of a batch and its transpose,
// the same bytes as plan/rows.py with planner._descriptor, and plan/by_key.py. The classes come from tiles.h
// (shared with the GPU's form); the orders from sorts, which a CPU does well, where the GPU's form counts ranks.
#include <algorithm>
#include <new>
#include <vector>

#include "order.h"

using namespace maskc_plan;

namespace {

// A descriptor's tiles until the caller has room for them (maskc_descriptor_tiles).
struct Tiles {
    std::vector<int32_t> k_tile;
    std::vector<uint32_t> kind;
};

}  // namespace

extern "C" {

// The descriptor of the row-interval masks' batch in `in`'s form (tiles.h): work_seq, work_qtile (one per query
// tile) and row_ptr (one more) into the caller's arrays, in planner._visiting_order's order; the listed tiles'
// count and how many are FULL into *tiles and *full. Returns a handle to the tiles (maskc_descriptor_tiles takes
// them), or null where memory ran out.
void* maskc_descriptor(const int64_t* consts, const int64_t* seg_start, const int64_t* seg_length,
                       const int64_t* entry_ptr, const int64_t* seq_length, const uint32_t* bits, int64_t segments,
                       int regions, int64_t bq, int64_t bk, int64_t sequences, int32_t* work_seq, int32_t* work_qtile,
                       int32_t* row_ptr, int64_t* tiles, int64_t* full) try {
    const Inputs in{consts, seg_start, seg_length, entry_ptr, seq_length, bits, segments, regions, bq, bk};
    std::vector<int64_t> qtile_base(sequences + 1, 0);
    int64_t room = 0;  // the most key tiles of a sequence: what one query tile can list
    for (int64_t s = 0; s < sequences; ++s) {
        qtile_base[s + 1] = qtile_base[s] + (seq_length[s] + bq - 1) / bq;
        room = max64(room, (seq_length[s] + bk - 1) / bk);
    }
    const int64_t items = qtile_base[sequences];

    // Every query tile's tiles, in query tile order.
    std::vector<int64_t> seq(items), start(items + 1, 0), slot(room);
    std::vector<uint32_t> slot_kind(room);
    std::vector<Piece> pieces(bq);
    std::vector<Span> spans(bq * regions);
    Tiles* out = new Tiles;
    std::vector<int64_t> first(items), last(items), count(items);
    for (int64_t s = 0; s < sequences; ++s)
        for (int64_t g = qtile_base[s]; g < qtile_base[s + 1]; ++g) {
            const int64_t listed = classify_query_tile(in, s, g - qtile_base[s], pieces.data(), spans.data(),
                                                       slot.data(), slot_kind.data());
            seq[g] = s;
            count[g] = listed;
            first[g] = listed ? slot[0] : 0;
            last[g] = listed ? slot[listed - 1] : -1;
            start[g + 1] = start[g] + listed;
            out->k_tile.insert(out->k_tile.end(), slot.begin(), slot.begin() + listed);
            out->kind.insert(out->kind.end(), slot_kind.begin(), slot_kind.begin() + listed);
        }

    // The visiting order: groups of items whose key ranges chain, longest group first, longest item first.
    int64_t none = 0;
    for (int64_t g = 0; g < items; ++g) none = max64(none, last[g]);
    none += 1;
    std::vector<int64_t> key_first(items), key_last(items), by_keys(items), group(items);
    for (int64_t g = 0; g < items; ++g)
        item_keys(g, seq.data(), first.data(), last.data(), count.data(), none, key_first.data(), key_last.data());
    for (int64_t g = 0; g < items; ++g) by_keys[g] = g;
    std::stable_sort(by_keys.begin(), by_keys.end(), [&](int64_t x, int64_t y) { return key_first[x] < key_first[y]; });
    int64_t groups = 0;
    for (int64_t s = 0; s < sequences; ++s) {  // (each sequence's items lie together in key order)
        const int64_t in_sequence = groups_of_sequence(qtile_base[s], qtile_base[s + 1], by_keys.data(),
                                                       key_first.data(), key_last.data(), group.data());
        for (int64_t i = qtile_base[s]; i < qtile_base[s + 1]; ++i) group[by_keys[i]] += groups;
        groups += in_sequence;
    }
    std::vector<int64_t> longest(groups, 0), by_length(groups), rank(groups), visit(items);
    for (int64_t g = 0; g < items; ++g) longest[group[g]] = max64(longest[group[g]], count[g]);
    for (int64_t i = 0; i < groups; ++i) by_length[i] = i;
    std::stable_sort(by_length.begin(), by_length.end(), [&](int64_t x, int64_t y) { return longest[x] > longest[y]; });
    for (int64_t i = 0; i < groups; ++i) rank[by_length[i]] = i;
    for (int64_t g = 0; g < items; ++g) visit[g] = g;
    std::stable_sort(visit.begin(), visit.end(), [&](int64_t x, int64_t y) {
        return rank[group[x]] != rank[group[y]] ? rank[group[x]] < rank[group[y]] : count[x] > count[y];
    });

    // The CSR in visiting order.
    Tiles* csr = new Tiles;
    csr->k_tile.resize(start[items]);
    csr->kind.resize(start[items]);
    row_ptr[0] = 0;
    int64_t at = 0, full_tiles = 0;
    for (int64_t w = 0; w < items; ++w) {
        const int64_t g = visit[w];
        work_seq[w] = (int32_t)seq[g];
        work_qtile[w] = (int32_t)(g - qtile_base[seq[g]]);
        for (int64_t i = start[g]; i < start[g + 1]; ++i, ++at) {
            csr->k_tile[at] = out->k_tile[i];
            csr->kind[at] = out->kind[i];
            full_tiles += out->kind[i] == kFull;
        }
        row_ptr[w + 1] = (int32_t)at;
    }
    delete out;
    *tiles = at;
    *full = full_tiles;
    return csr;
} catch (const std::bad_alloc&) {
    return nullptr;
}

// Copies a descriptor's tiles (maskc_descriptor's count of each) and frees them; with null arrays, only frees.
void maskc_descriptor_tiles(void* handle, int32_t* k_tile, uint32_t* kind) {
    Tiles* t = static_cast<Tiles*>(handle);
    if (k_tile != nullptr) {
        std::copy(t->k_tile.begin(), t->k_tile.end(), k_tile);
        std::copy(t->kind.begin(), t->kind.end(), kind);
    }
    delete t;
}

// The transpose of a descriptor (by_key.by_key): per key tile (most query tiles first, ties by key tile) the query
// tiles that see it, ascending, with their kinds and forward items. qtile_base and ktile_base: per sequence the
// global number of its first query and key tile (one more: all). The caller's arrays: work_seq, work_ktile (a
// key tile each), col_ptr (one more), q_tile, kind, q_item (a listed tile each). Returns 0, or -1 where memory ran
// out.
int maskc_key_descriptor(const int32_t* work_seq_in, const int32_t* work_qtile, const int32_t* row_ptr,
                         const int32_t* k_tile, const uint32_t* kind_in, int64_t items, const int64_t* qtile_base,
                         const int64_t* ktile_base, int64_t sequences, int32_t* work_seq, int32_t* work_ktile,
                         int32_t* col_ptr, int32_t* q_tile, uint32_t* kind, int32_t* q_item) try {
    const int64_t keys = ktile_base[sequences];
    std::vector<int64_t> count(keys, 0), item_of(qtile_base[sequences], -1);
    for (int64_t w = 0; w < items; ++w) {
        item_of[qtile_base[work_seq_in[w]] + work_qtile[w]] = w;
        for (int64_t i = row_ptr[w]; i < row_ptr[w + 1]; ++i) ++count[ktile_base[work_seq_in[w]] + k_tile[i]];
    }
    std::vector<int64_t> visit(keys), place(keys), fill(keys);
    for (int64_t k = 0; k < keys; ++k) visit[k] = k;
    std::stable_sort(visit.begin(), visit.end(), [&](int64_t x, int64_t y) { return count[x] > count[y]; });
    col_ptr[0] = 0;
    for (int64_t p = 0; p < keys; ++p) {
        const int64_t k = visit[p];
        place[k] = p;
        const int64_t s = std::upper_bound(ktile_base, ktile_base + sequences + 1, k) - ktile_base - 1;
        work_seq[p] = (int32_t)s;
        work_ktile[p] = (int32_t)(k - ktile_base[s]);
        col_ptr[p + 1] = col_ptr[p] + (int32_t)count[k];
    }
    // Query tiles ascending within each sequence, so each key tile's list fills in ascending order.
    for (int64_t g = 0; g < qtile_base[sequences]; ++g) {
        const int64_t w = item_of[g];
        if (w < 0) continue;
        const int64_t s = work_seq_in[w];
        for (int64_t i = row_ptr[w]; i < row_ptr[w + 1]; ++i) {
            const int64_t k = ktile_base[s] + k_tile[i];
            const int64_t at = col_ptr[place[k]] + fill[k]++;
            q_tile[at] = work_qtile[w];
            kind[at] = kind_in[i];
            q_item[at] = (int32_t)w;
        }
    }
    return 0;
} catch (const std::bad_alloc&) {
    return -1;
}

}  // extern "C"
