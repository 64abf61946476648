// The backward's key descriptor from the forward's, the GPU's form (maskc/plan/cpp/host.cpp has the host's):
// maskc/plan/by_key.py's transpose, a function of one key tile per thread: the key tile walks the
// query tiles of its sequence in ascending order and finds itself in each one's (ascending) key tiles by a
// binary search, once to count and once to write. No atomics, no sort of the tile-sized arrays; O(query tiles
// x log) per key tile.

#pragma once
#include "tiles.h"

namespace maskc_plan {

// The forward descriptor (Descriptor's arrays) and, per global query tile, its work item (the inverse of the
// visiting order); per sequence the global numbers of its first query tile and first key tile.
struct Forward {
    const int32_t* row_ptr;
    const int32_t* k_tile;
    const uint32_t* kind;
    const int64_t* item_of_qtile;  // [query tiles]
    const int64_t* qtile_base;     // [sequences + 1]
    const int64_t* ktile_base;     // [sequences + 1]
    int64_t sequences;
};

MASKC_HD inline int64_t sequence_of_key(const Forward& f, int64_t key) {  // the last sequence with base <= key
    int64_t lo = 0, hi = f.sequences - 1;
    while (lo < hi) {
        const int64_t mid = (lo + hi + 1) / 2;
        if (f.ktile_base[mid] <= key) lo = mid; else hi = mid - 1;
    }
    return lo;
}

// Where key tile t sits in work item w's key tiles (ascending), or -1.
MASKC_HD inline int64_t find_tile(const Forward& f, int64_t w, int64_t t) {
    int64_t lo = f.row_ptr[w], hi = f.row_ptr[w + 1];
    while (lo < hi) {
        const int64_t mid = (lo + hi) / 2;
        if (f.k_tile[mid] < t) lo = mid + 1; else hi = mid;
    }
    return lo < f.row_ptr[w + 1] && f.k_tile[lo] == t ? lo : -1;
}

// Pass 1, per global key tile: how many query tiles see it.
MASKC_HD inline int64_t count_key(const Forward& f, int64_t key) {
    const int64_t s = sequence_of_key(f, key), t = key - f.ktile_base[s];
    int64_t count = 0;
    for (int64_t g = f.qtile_base[s]; g < f.qtile_base[s + 1]; ++g) count += find_tile(f, f.item_of_qtile[g], t) >= 0;
    return count;
}

// Pass 2, per global key tile: its place among the key items, most query tiles first, ties by key tile.
MASKC_HD inline int64_t place_key(int64_t key, int64_t keys, const int64_t* count) {
    int64_t place = 0;
    for (int64_t j = 0; j < keys; ++j) place += count[j] > count[key] || (count[j] == count[key] && j < key);
    return place;
}

// Pass 4, per global key tile at its place: its query tiles ascending, with their kinds and forward items, from
// col_ptr[place]. Returns its key item: (sequence, key tile in it).
struct KeyItem {
    int32_t seq, ktile;
};

MASKC_HD inline KeyItem write_key(const Forward& f, int64_t key, int64_t place, const int32_t* col_ptr,
                                  int32_t* q_tile, uint32_t* kind, int32_t* q_item) {
    const int64_t s = sequence_of_key(f, key), t = key - f.ktile_base[s];
    int64_t at = col_ptr[place];
    for (int64_t g = f.qtile_base[s]; g < f.qtile_base[s + 1]; ++g) {
        const int64_t w = f.item_of_qtile[g], i = find_tile(f, w, t);
        if (i < 0) continue;
        q_tile[at] = (int32_t)(g - f.qtile_base[s]);
        kind[at] = f.kind[i];
        q_item[at] = (int32_t)w;
        ++at;
    }
    return {(int32_t)s, (int32_t)t};
}

}  // namespace maskc_plan
