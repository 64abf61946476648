// The GPU's form of the visiting order's sorts (host.cpp sorts; see maskc/plan/cpp/order.h): each a function of
// one index, a thread each, by counting (an index's place is how many come before it): O(n) per thread and O(n^2)
// in all, ~10^7 comparisons for the 4,096 items of a million tokens, no shared memory, no synchronisation.

#pragma once
#include "order.h"

namespace maskc_plan {

// Per item g: its place among the items of its sequence by (key_first, g): items [begin, end).
MASKC_HD inline void place_in_sequence(int64_t g, int64_t begin, int64_t end, const int64_t* key_first,
                                       int64_t* by_keys) {
    int64_t place = 0;
    for (int64_t j = begin; j < end; ++j)
        place += key_first[j] < key_first[g] || (key_first[j] == key_first[g] && j < g);
    by_keys[begin + place] = g;
}

// Per group: its rank, by (longest item descending, group number).
MASKC_HD inline void rank_group(int64_t grp, int64_t groups, const int64_t* longest, int64_t* rank) {
    int64_t place = 0;
    for (int64_t j = 0; j < groups; ++j)
        place += longest[j] > longest[grp] || (longest[j] == longest[grp] && j < grp);
    rank[grp] = place;
}

// Per item g: its place in the visiting order, by (its group's rank, its tiles descending, g).
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
