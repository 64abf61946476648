// The GPU planner's passes as kernels (an experiment; maskc/plan/cpp's tiles.h and order.h, with ranks.cuh and
// transpose.cuh here, hold the logic, which check.py checks on the CPU): each kernel runs one function of one
// index per thread, and the host launches them in order on one stream, with nothing read back. gpu_check.py
// builds this with NVRTC (through CuPy) and compares the result with the host planner.
//
// Buffers (the host sizes them from the lengths alone): per query tile g, a slot of `room` key tiles (the most
// key tiles of a sequence); per item, its sequence, counts, first and last tile, keys, group; per sequence, the
// query tile base and group base; one word `state` with, in order, none (one past the last key tile visited,
// set by atomicMax), the number of groups, the head-major run [first, last) of the forward, and the backward's
// long items of the query and the key descriptors (by_key.long_items).
#include "ranks.cuh"
#include "transpose.cuh"

using namespace maskc_plan;

// Plain arrays in one struct, so that each kernel takes one argument (a pointer to it in device memory).
struct Plan {
    Inputs in;
    int64_t sequences, items, room;
    const int64_t* qtile_base;  // [sequences + 1]
    int64_t *seq, *counts, *first, *last, *key_first, *key_last, *by_keys, *group, *group_base, *longest,
        *rank, *visit;
    int64_t* tiles;
    uint32_t* kinds;
    Piece* pieces;  // scratch: bq per query tile
    Span* spans;    // scratch: bq x regions per query tile
    unsigned long long* state;  // none, groups, run first, run last, long query items, long key items
    int32_t *work_seq, *work_qtile, *row_ptr, *k_tile;
    uint32_t* kind;
    // The key descriptor (by_key): per global key tile its count and place; the items (sequence, key tile)
    // side by side as the dK/dV kernel reads them, col_ptr, and per listed tile its query tile, kind, item.
    const int64_t* ktile_base;  // [sequences + 1]
    int64_t keys, multiprocessors;
    int64_t *item_of_qtile, *key_count, *key_place;
    int32_t *key_work, *col_ptr, *q_tile, *q_item;
    uint32_t* q_kind;
};

__device__ Forward forward_of(const Plan& p) {
    return {p.row_ptr, p.k_tile, p.kind, p.item_of_qtile, p.qtile_base, p.ktile_base, p.sequences};
}

__device__ int64_t sequence_of(const Plan& p, int64_t g) {  // the last sequence whose first query tile <= g
    int64_t lo = 0, hi = p.sequences - 1;
    while (lo < hi) {
        const int64_t mid = (lo + hi + 1) / 2;
        if (p.qtile_base[mid] <= g) lo = mid; else hi = mid - 1;
    }
    return lo;
}

extern "C" __global__ void plan_classify(const Plan* plan) {
    const Plan& p = *plan;
    const int64_t g = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (g >= p.items) return;
    const int64_t s = sequence_of(p, g);
    const int64_t count = classify_query_tile(p.in, s, g - p.qtile_base[s], p.pieces + g * p.in.bq,
                                              p.spans + g * p.in.bq * p.in.regions, p.tiles + g * p.room,
                                              p.kinds + g * p.room);
    p.seq[g] = s;
    p.counts[g] = count;
    p.first[g] = count ? p.tiles[g * p.room] : 0;
    p.last[g] = count ? p.tiles[g * p.room + count - 1] : -1;
    if (count) atomicMax(&p.state[0], (unsigned long long)p.last[g] + 1);  // none (0 where nothing is visited... )
}

extern "C" __global__ void plan_keys(const Plan* plan) {
    const Plan& p = *plan;
    const int64_t g = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (g >= p.items) return;
    // none = max(0, last visited tile) + 1; state[0] holds last + 1 of the largest, 0 if none was visited.
    const int64_t none = p.state[0] ? (int64_t)p.state[0] : 1;
    item_keys(g, p.seq, p.first, p.last, p.counts, none, p.key_first, p.key_last);
}

extern "C" __global__ void plan_place_in_sequence(const Plan* plan) {
    const Plan& p = *plan;
    const int64_t g = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (g >= p.items) return;
    place_in_sequence(g, p.qtile_base[p.seq[g]], p.qtile_base[p.seq[g] + 1], p.key_first, p.by_keys);
}

extern "C" __global__ void plan_groups(const Plan* plan) {
    const Plan& p = *plan;
    const int64_t s = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (s >= p.sequences) return;
    p.group_base[s + 1] = groups_of_sequence(p.qtile_base[s], p.qtile_base[s + 1], p.by_keys, p.key_first,
                                             p.key_last, p.group);
}

// One thread: the group counts' running sum (sequences are few: a thousand at most in practice).
extern "C" __global__ void plan_group_base(const Plan* plan) {
    const Plan& p = *plan;
    if (blockIdx.x * blockDim.x + threadIdx.x != 0) return;
    p.group_base[0] = 0;
    for (int64_t s = 0; s < p.sequences; ++s) p.group_base[s + 1] += p.group_base[s];
    p.state[1] = p.group_base[p.sequences];
}

extern "C" __global__ void plan_longest(const Plan* plan) {
    const Plan& p = *plan;
    const int64_t g = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (g >= p.items) return;
    p.group[g] += p.group_base[p.seq[g]];
    atomicMax((unsigned long long*)&p.longest[p.group[g]], (unsigned long long)p.counts[g]);  // (counts >= 0)
}

extern "C" __global__ void plan_rank_groups(const Plan* plan) {
    const Plan& p = *plan;
    const int64_t grp = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    const int64_t groups = p.state[1];
    if (grp >= groups) return;
    rank_group(grp, groups, p.longest, p.rank);
}

extern "C" __global__ void plan_place_items(const Plan* plan) {
    const Plan& p = *plan;
    const int64_t g = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (g >= p.items) return;
    // (group_rank[j] read as rank[group[j]]: group holds global numbers after plan_longest)
    const int64_t rank = p.rank[p.group[g]];
    int64_t place = 0;
    for (int64_t j = 0; j < p.items; ++j) {
        const int64_t r = p.rank[p.group[j]];
        place += r < rank || (r == rank && (p.counts[j] > p.counts[g] || (p.counts[j] == p.counts[g] && j < g)));
    }
    p.visit[place] = g;
}

// One thread: row_ptr's running sum, and the forward's head-major run (Descriptor.longest_equal_run: the first
// longest run of consecutive items with equal tile counts).
extern "C" __global__ void plan_row_ptr(const Plan* plan) {
    const Plan& p = *plan;
    if (blockIdx.x * blockDim.x + threadIdx.x != 0) return;
    p.row_ptr[0] = 0;
    int64_t best_first = 0, best_last = 0, run_first = 0;
    for (int64_t w = 0; w < p.items; ++w) {
        const int64_t count = p.counts[p.visit[w]];
        p.row_ptr[w + 1] = p.row_ptr[w] + (int32_t)count;
        if (w > 0 && count != p.counts[p.visit[w - 1]]) run_first = w;
        if (w + 1 - run_first > best_last - best_first) best_first = run_first, best_last = w + 1;
    }
    p.state[2] = best_first;
    p.state[3] = best_last;
}

extern "C" __global__ void plan_write(const Plan* plan) {
    const Plan& p = *plan;
    const int64_t w = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (w >= p.items) return;
    const int64_t g = p.visit[w];
    p.work_seq[w] = (int32_t)p.seq[g];
    p.work_qtile[w] = (int32_t)(g - p.qtile_base[p.seq[g]]);
    p.item_of_qtile[g] = w;
    for (int64_t i = 0, at = p.row_ptr[w]; i < p.counts[g]; ++i) {
        p.k_tile[at + i] = (int32_t)p.tiles[g * p.room + i];
        p.kind[at + i] = p.kinds[g * p.room + i];
    }
}

extern "C" __global__ void plan_key_count(const Plan* plan) {
    const Plan& p = *plan;
    const int64_t key = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (key >= p.keys) return;
    p.key_count[key] = count_key(forward_of(p), key);
}

extern "C" __global__ void plan_key_place(const Plan* plan) {
    const Plan& p = *plan;
    const int64_t key = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (key >= p.keys) return;
    const int64_t place = place_key(key, p.keys, p.key_count);
    p.key_place[key] = place;
    p.col_ptr[place + 1] = (int32_t)p.key_count[key];  // (made a running sum by plan_col_ptr)
}

// The first item of a CSR that is not long (by_key.long_items): items with more tiles than LONG_ITEM_SHARES (2)
// times one head's work spread over the multiprocessors.
__device__ int64_t long_items(const int32_t* ptr, int64_t items, int64_t multiprocessors) {
    for (int64_t w = 0; w < items; ++w)
        if ((int64_t)(ptr[w + 1] - ptr[w]) * multiprocessors <= 2 * (int64_t)ptr[items]) return w;
    return items;
}

// One thread: col_ptr's running sum, and both descriptors' long items.
extern "C" __global__ void plan_col_ptr(const Plan* plan) {
    const Plan& p = *plan;
    if (blockIdx.x * blockDim.x + threadIdx.x != 0) return;
    p.col_ptr[0] = 0;
    for (int64_t i = 0; i < p.keys; ++i) p.col_ptr[i + 1] += p.col_ptr[i];
    p.state[4] = long_items(p.row_ptr, p.items, p.multiprocessors);
    p.state[5] = long_items(p.col_ptr, p.keys, p.multiprocessors);
}

extern "C" __global__ void plan_key_write(const Plan* plan) {
    const Plan& p = *plan;
    const int64_t key = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (key >= p.keys) return;
    const int64_t place = p.key_place[key];
    const KeyItem item = write_key(forward_of(p), key, place, p.col_ptr, p.q_tile, p.q_kind, p.q_item);
    p.key_work[2 * place] = item.seq;
    p.key_work[2 * place + 1] = item.ktile;
}
