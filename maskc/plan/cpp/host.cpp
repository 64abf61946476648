// The row-interval planner on the host, for plan/native.py (ctypes): the descriptor of a batch and its transpose,
// the same bytes as plan/rows.py with planner._descriptor, and plan/by_key.py. The classes come from tiles.h
// (shared with the GPU's form), a run of key tiles at a time; the orders from sorts, which a CPU does well,
// where the GPU's form counts ranks.
#include <algorithm>
#include <memory>
#include <new>
#include <vector>

#include "order.h"

using namespace maskc_plan;

namespace {

// Key tiles first .. end - 1 of one class.
struct Run {
    int64_t first, end;
    uint32_t kind;
};

// A descriptor until the caller has room for its tiles (maskc_descriptor_tiles): each query tile's runs, and
// the visiting order.
struct Runs {
    std::vector<Run> runs;
    std::vector<int64_t> start;  // query tile g's runs: runs[start[g] .. start[g + 1])
    std::vector<int64_t> visit;
};

// The runs of one query tile, appended to `out`. A tile's class holds between any two consecutive ends of the
// pieces' spans (tile_class), except where two regions meet in one piece: there the union decides tile by
// tile. Returns the tiles listed.
int64_t runs_of(const Inputs& in, const Piece* pieces, int64_t count, Span* spans, std::vector<int64_t>& points,
                std::vector<Run>& out) {
    int64_t lowest, highest, listed = 0;
    spans_of(in, pieces, count, spans, &lowest, &highest);
    if (lowest >= highest) return 0;
    points.clear();
    points.push_back(lowest);
    points.push_back(highest);
    for (int64_t i = 0; i < count * in.regions; ++i) {
        const Span& s = spans[i];
        if (!s.met) continue;
        for (int64_t p : {s.m0, s.m1, s.f0, s.f1})
            if (lowest < p && p < highest) points.push_back(p);
    }
    std::sort(points.begin(), points.end());
    points.erase(std::unique(points.begin(), points.end()), points.end());
    const size_t mine = out.size();  // (this query tile's runs begin here)
    auto add = [&](int64_t first, int64_t end, uint64_t c) {
        if (!c) return;
        const uint32_t kind = (uint32_t)c;
        if (out.size() > mine && out.back().end == first && out.back().kind == kind) {
            out.back().end = end;  // (a tile the union decided, like its neighbour)
        } else {
            out.push_back({first, end, kind});
        }
        listed += end - first;
    };
    for (size_t j = 0; j + 1 < points.size(); ++j) {
        bool shared;
        const uint64_t c = tile_class(in, pieces, count, spans, points[j], &shared);
        if (!shared) {
            add(points[j], points[j + 1], c);
            continue;
        }
        add(points[j], points[j] + 1, c);
        for (int64_t t = points[j] + 1; t < points[j + 1]; ++t)
            add(t, t + 1, tile_class(in, pieces, count, spans, t, &shared));
    }
    return listed;
}

}  // namespace

extern "C" {

// The descriptor of the row-interval masks' batch in `in`'s form (tiles.h): work_seq, work_qtile (one per query
// tile) and row_ptr (one more) into the caller's arrays, in planner._visiting_order's order; the listed tiles'
// count and how many are FULL into *tiles and *full. Returns a handle to the tiles (maskc_descriptor_tiles writes
// them), or null where memory ran out.
void* maskc_descriptor(const int64_t* consts, const int64_t* seg_start, const int64_t* seg_length,
                       const int64_t* entry_ptr, const int64_t* seq_length, const uint32_t* bits, int64_t segments,
                       int regions, int64_t bq, int64_t bk, int64_t sequences, int32_t* work_seq, int32_t* work_qtile,
                       int32_t* row_ptr, int64_t* tiles, int64_t* full) try {
    const Inputs in{consts, seg_start, seg_length, entry_ptr, seq_length, bits, segments, regions, bq, bk};
    std::vector<int64_t> qtile_base(sequences + 1, 0);
    for (int64_t s = 0; s < sequences; ++s) qtile_base[s + 1] = qtile_base[s] + (seq_length[s] + bq - 1) / bq;
    const int64_t items = qtile_base[sequences];

    // Every query tile's runs, in query tile order.
    std::unique_ptr<Runs> out(new Runs);
    out->start.assign(items + 1, 0);
    std::vector<int64_t> seq(items), first(items), last(items), count(items), points;
    std::vector<Piece> pieces(bq);
    std::vector<Span> spans(bq * regions);
    int64_t full_tiles = 0;
    for (int64_t s = 0; s < sequences; ++s)
        for (int64_t g = qtile_base[s]; g < qtile_base[s + 1]; ++g) {
            const int64_t n = pieces_of(in, s, g - qtile_base[s], pieces.data());
            seq[g] = s;
            count[g] = runs_of(in, pieces.data(), n, spans.data(), points, out->runs);
            out->start[g + 1] = (int64_t)out->runs.size();
            first[g] = count[g] ? out->runs[out->start[g]].first : 0;
            last[g] = count[g] ? out->runs[out->start[g + 1] - 1].end - 1 : -1;
            for (int64_t i = out->start[g]; i < out->start[g + 1]; ++i)
                if (out->runs[i].kind == kFull) full_tiles += out->runs[i].end - out->runs[i].first;
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
    std::vector<int64_t> longest(groups, 0), by_length(groups), rank(groups);
    for (int64_t g = 0; g < items; ++g) longest[group[g]] = max64(longest[group[g]], count[g]);
    for (int64_t i = 0; i < groups; ++i) by_length[i] = i;
    std::stable_sort(by_length.begin(), by_length.end(), [&](int64_t x, int64_t y) { return longest[x] > longest[y]; });
    for (int64_t i = 0; i < groups; ++i) rank[by_length[i]] = i;
    std::vector<int64_t>& visit = out->visit;
    visit.resize(items);
    for (int64_t g = 0; g < items; ++g) visit[g] = g;
    std::stable_sort(visit.begin(), visit.end(), [&](int64_t x, int64_t y) {
        return rank[group[x]] != rank[group[y]] ? rank[group[x]] < rank[group[y]] : count[x] > count[y];
    });

    // The CSR's pointers in visiting order (its tiles: maskc_descriptor_tiles).
    row_ptr[0] = 0;
    for (int64_t w = 0; w < items; ++w) {
        const int64_t g = visit[w];
        work_seq[w] = (int32_t)seq[g];
        work_qtile[w] = (int32_t)(g - qtile_base[seq[g]]);
        row_ptr[w + 1] = row_ptr[w] + (int32_t)count[g];
    }
    *tiles = row_ptr[items];
    *full = full_tiles;
    return out.release();
} catch (const std::bad_alloc&) {
    return nullptr;
}

// Writes a descriptor's tiles (maskc_descriptor's count of each) in visiting order, and frees them; with null
// arrays, only frees.
void maskc_descriptor_tiles(void* handle, int32_t* k_tile, uint32_t* kind) {
    const std::unique_ptr<Runs> t(static_cast<Runs*>(handle));
    if (k_tile == nullptr) return;
    int64_t at = 0;
    for (const int64_t g : t->visit)
        for (int64_t i = t->start[g]; i < t->start[g + 1]; ++i) {
            const Run& run = t->runs[i];
            for (int64_t k = run.first; k < run.end; ++k, ++at) {
                k_tile[at] = (int32_t)k;
                kind[at] = run.kind;
            }
        }
}

// by_key.staggered: the lists that begin at the same forward item as a neighbour's, each rotated to begin at its
// key tile's diagonal (the first of its query tiles at or past query tile work_ktile * block_k / block_q).
static void stagger(int64_t keys, const int32_t* work_ktile, const int32_t* col_ptr, int32_t* q_tile, uint32_t* kind,
                    int32_t* q_item, int32_t block_k, int32_t block_q) {
    std::vector<int32_t> first(keys, -1);  // (before any list is rotated)
    for (int64_t p = 0; p < keys; ++p)
        if (col_ptr[p + 1] > col_ptr[p]) first[p] = q_item[col_ptr[p]];
    for (int64_t p = 0; p < keys; ++p) {
        const bool together = first[p] >= 0 && ((p > 0 && first[p - 1] == first[p]) ||
                                                (p + 1 < keys && first[p + 1] == first[p]));
        if (!together) continue;
        int32_t* const lo = q_tile + col_ptr[p];
        int32_t* const hi = q_tile + col_ptr[p + 1];
        const int32_t diagonal = (int32_t)((int64_t)work_ktile[p] * block_k / block_q);
        const int64_t shift = std::lower_bound(lo, hi, diagonal) - lo;
        if (shift == 0 || lo + shift == hi) continue;
        const int64_t at = col_ptr[p], end = col_ptr[p + 1];
        std::rotate(q_tile + at, q_tile + at + shift, q_tile + end);
        std::rotate(kind + at, kind + at + shift, kind + end);
        std::rotate(q_item + at, q_item + at + shift, q_item + end);
    }
}

// The transpose of a descriptor (by_key.by_key): per key tile (most query tiles first, ties by key tile) the query
// tiles that see it, ascending, with their kinds and forward items. qtile_base and ktile_base: per sequence the
// global number of its first query and key tile (one more: all). The caller's arrays: work_seq, work_ktile (a
// key tile each), col_ptr (one more), q_tile, kind, q_item (a listed tile each). Returns 0, or -1 where memory ran
// out. With block_k > 0, the lists are staggered as by_key.staggered says (block_k and block_q: the tiles' sizes).
int maskc_key_descriptor(const int32_t* work_seq_in, const int32_t* work_qtile, const int32_t* row_ptr,
                         const int32_t* k_tile, const uint32_t* kind_in, int64_t items, const int64_t* qtile_base,
                         const int64_t* ktile_base, int64_t sequences, int32_t* work_seq, int32_t* work_ktile,
                         int32_t* col_ptr, int32_t* q_tile, uint32_t* kind, int32_t* q_item, int32_t block_k,
                         int32_t block_q) try {
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
    if (block_k > 0) stagger(keys, work_ktile, col_ptr, q_tile, kind, q_item, block_k, block_q);
    return 0;
} catch (const std::bad_alloc&) {
    return -1;
}

}  // extern "C"
