// The GPU planner's passes as kernels (an experiment; see classify.cuh and descriptor.cuh, which hold the logic
// and are checked on the CPU by check.py): each kernel runs one function of one index per thread, and the host
// launches them in order on one stream, with nothing read back. gpu_check.py builds this with NVRTC (through
// CuPy) and compares the result with the host planner.
//
// Buffers (the host sizes them from the lengths alone): per query tile g, a slot of `room` key tiles (the most
// key tiles of a sequence); per item, its sequence, counts, first and last tile, keys, group; per sequence, the
// query tile base and group base; one word `state` with, in order, none (one past the last key tile visited,
// set by atomicMax), the number of groups, and the head-major run [first, last) of the forward.
#include "descriptor.cuh"

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
    unsigned long long* state;  // none, groups, run first, run last
    int32_t *work_seq, *work_qtile, *row_ptr, *k_tile;
    uint32_t* kind;
};

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
    const int64_t count = classify_query_tile(p.in, s, g - p.qtile_base[s], p.tiles + g * p.room, p.kinds + g * p.room);
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
    for (int64_t i = 0, at = p.row_ptr[w]; i < p.counts[g]; ++i) {
        p.k_tile[at + i] = (int32_t)p.tiles[g * p.room + i];
        p.kind[at + i] = p.kinds[g * p.room + i];
    }
}
