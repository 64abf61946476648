// The descriptor from the classified query tiles (see tiles.h): the GPU's form of planner._visiting_order.
// The work items in the host planner's visiting order (planner._visiting_order: groups of items that share keys,
// longest group first, inside a group longest item first, ties in query tile order), then the CSR. Every pass is
// a function of one index (an item, a sequence, a group): a thread each on the GPU, a loop on the CPU. Sorting
// is by counting (an item's place is how many items come before it), O(n) per thread and O(n^2) in all: ~10^7
// comparisons for the 4,096 items of a million tokens, no shared memory, no synchronisation inside a pass.

#pragma once
#include "tiles.h"

namespace maskc_plan {

// Pass 1, per item g: its keys as the host planner orders them. `none` is one past the last key tile any item
// visits (items without tiles come last in their sequence, as one group); each sequence's keys lie on a stretch
// of one axis of their own.
MASKC_HD inline void item_keys(int64_t g, const int64_t* seq, const int64_t* first, const int64_t* last,
                               const int64_t* count, int64_t none, int64_t* key_first, int64_t* key_last) {
    const int64_t f = count[g] ? first[g] : none;
    const int64_t l = count[g] ? max64(last[g], f) : none;
    key_first[g] = f + seq[g] * (none + 1);
    key_last[g] = l + seq[g] * (none + 1);
}

// Pass 2, per item g: its place among the items of its sequence by (key_first, g): items [begin, end).
MASKC_HD inline void place_in_sequence(int64_t g, int64_t begin, int64_t end, const int64_t* key_first,
                                       int64_t* by_keys) {
    int64_t place = 0;
    for (int64_t j = begin; j < end; ++j)
        place += key_first[j] < key_first[g] || (key_first[j] == key_first[g] && j < g);
    by_keys[begin + place] = g;
}

// Pass 3, per sequence: items in key order grouped where a chain of overlapping key ranges breaks (ranges that
// meet in one tile do not chain; items starting on the same tile always do). Writes each item's group, numbered
// from 0 in the sequence; returns how many groups.
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

// Pass 4, per group: its rank, by (longest item descending, group number).
MASKC_HD inline void rank_group(int64_t grp, int64_t groups, const int64_t* longest, int64_t* rank) {
    int64_t place = 0;
    for (int64_t j = 0; j < groups; ++j)
        place += longest[j] > longest[grp] || (longest[j] == longest[grp] && j < grp);
    rank[grp] = place;
}

// Pass 5, per item g: its place in the visiting order, by (its group's rank, its tiles descending, g).
MASKC_HD inline void place_item(int64_t g, int64_t items, const int64_t* group_rank, const int64_t* count,
                                int64_t* visit) {
    const int64_t rank = group_rank[g];
    int64_t place = 0;
    for (int64_t j = 0; j < items; ++j) {
        const int64_t r = group_rank[j];
        place += r < rank || (r == rank && (count[j] > count[g] || (count[j] == count[g] && j < g)));
    }
    visit[place] = g;
}

}  // namespace maskc_plan
