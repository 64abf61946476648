// The visiting order's steps that the host (host.cpp) and the GPU's form of the planner share: planner.
// _visiting_order's groups of work items that share keys (the groups go longest first, inside a group the
// longest item first, ties in query tile order; the host orders them with sorts, the GPU by counting ranks:
// docs/experiments/gpu_planner/ranks.cuh). Each step is a function of one index (an item, a sequence).

#pragma once
#include "tiles.h"

namespace maskc_plan {

// Per item g: its keys as the host planner orders them. `none` is one past the last key tile any item
// visits (items without tiles come last in their sequence, as one group); each sequence's keys lie on a stretch
// of one axis of their own.
MASKC_HD inline void item_keys(int64_t g, const int64_t* seq, const int64_t* first, const int64_t* last,
                               const int64_t* count, int64_t none, int64_t* key_first, int64_t* key_last) {
    const int64_t f = count[g] ? first[g] : none;
    const int64_t l = count[g] ? max64(last[g], f) : none;
    key_first[g] = f + seq[g] * (none + 1);
    key_last[g] = l + seq[g] * (none + 1);
}

// Per sequence: its items (by_keys[begin .. end), in key order) grouped where a chain of overlapping key ranges
// breaks (ranges that meet in one tile do not chain; items starting on the same tile always do). Writes each
// item's group, numbered from 0 in the sequence; returns how many groups.
MASKC_HD inline int64_t groups_of_sequence(int64_t begin, int64_t end, const int64_t* by_keys,
                                           const int64_t* key_first, const int64_t* key_last, int64_t* group) {
    int64_t groups = 0, reach = 0;
    for (int64_t i = begin; i < end; ++i) {
        const int64_t g = by_keys[i];
        const bool starts = i == begin || (key_first[g] >= reach && key_first[g] != key_first[by_keys[i - 1]]);
        groups += starts;
        group[g] = groups - 1;
        reach = i == begin ? key_last[g] : max64(reach, key_last[g]);
    }
    return groups;
}

}  // namespace maskc_plan
