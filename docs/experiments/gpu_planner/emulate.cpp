// The classifier run on the CPU: the GPU's thread per query tile as a loop (check.py builds this with g++).
#include <vector>

#include "tiles.h"

extern "C" int64_t classify_all(const int64_t* consts, const int64_t* seg_start, const int64_t* seg_length,
                                const int64_t* entry_ptr, const int64_t* seq_length, const uint32_t* bits,
                                int64_t segments, int regions, int64_t bq, int64_t bk, int64_t sequences,
                                int64_t* counts, int64_t* k_tile, uint32_t* kind) {
    // Query tiles in order, sequence by sequence; tile g's tiles at its slot k_tile[g * room ...] where room is
    // the most key tiles of any sequence. Returns that room.
    const maskc_plan::Inputs in{consts, seg_start, seg_length, entry_ptr, seq_length, bits, segments, regions, bq, bk};
    std::vector<maskc_plan::Piece> pieces(bq);
    std::vector<maskc_plan::Span> spans(bq * regions);
    int64_t room = 0;
    for (int64_t s = 0; s < sequences; ++s) room = maskc_plan::max64(room, (seq_length[s] + bk - 1) / bk);
    int64_t g = 0;
    for (int64_t s = 0; s < sequences; ++s)
        for (int64_t t = 0; t * bq < seq_length[s]; ++t, ++g)
            counts[g] = maskc_plan::classify_query_tile(in, s, t, pieces.data(), spans.data(), k_tile + g * room,
                                                        kind + g * room);
    return room;
}

#include "ranks.cuh"

// The whole descriptor, pass by pass as the GPU would run them (each loop: one thread per index). Returns the
// number of tiles listed; work_seq, work_qtile (items), row_ptr (items + 1), k_tile and kind (room for every
// query tile's slot) are the caller's.
extern "C" int64_t plan_all(const int64_t* consts, const int64_t* seg_start, const int64_t* seg_length,
                            const int64_t* entry_ptr, const int64_t* seq_length, const uint32_t* bits,
                            int64_t segments, int regions, int64_t bq, int64_t bk, int64_t sequences,
                            int32_t* work_seq, int32_t* work_qtile, int32_t* row_ptr, int32_t* k_tile,
                            uint32_t* kind) {
    using namespace maskc_plan;
    std::vector<int64_t> qtile_base(sequences + 1, 0);
    for (int64_t s = 0; s < sequences; ++s) qtile_base[s + 1] = qtile_base[s] + (seq_length[s] + bq - 1) / bq;
    const int64_t items = qtile_base[sequences];
    std::vector<int64_t> counts(items), seq(items);
    int64_t room = 0;
    for (int64_t s = 0; s < sequences; ++s) room = max64(room, (seq_length[s] + bk - 1) / bk);
    std::vector<int64_t> tiles(items * room);
    std::vector<uint32_t> kinds(items * room);
    const Inputs in{consts, seg_start, seg_length, entry_ptr, seq_length, bits, segments, regions, bq, bk};
    std::vector<Piece> pieces(bq);
    std::vector<Span> spans(bq * regions);
    for (int64_t s = 0; s < sequences; ++s)  // classify: a thread per query tile
        for (int64_t g = qtile_base[s]; g < qtile_base[s + 1]; ++g) {
            seq[g] = s;
            counts[g] = classify_query_tile(in, s, g - qtile_base[s], pieces.data(), spans.data(), &tiles[g * room],
                                            &kinds[g * room]);
        }
    std::vector<int64_t> first(items), last(items);
    int64_t none = 0;  // a reduction
    for (int64_t g = 0; g < items; ++g) {
        first[g] = counts[g] ? tiles[g * room] : 0;
        last[g] = counts[g] ? tiles[g * room + counts[g] - 1] : -1;
        none = max64(none, last[g]);
    }
    none += 1;
    std::vector<int64_t> key_first(items), key_last(items), by_keys(items), group(items);
    for (int64_t g = 0; g < items; ++g) item_keys(g, seq.data(), first.data(), last.data(), counts.data(), none,
                                                  key_first.data(), key_last.data());
    for (int64_t g = 0; g < items; ++g)
        place_in_sequence(g, qtile_base[seq[g]], qtile_base[seq[g] + 1], key_first.data(), by_keys.data());
    std::vector<int64_t> group_base(sequences + 1, 0);
    for (int64_t s = 0; s < sequences; ++s)  // a thread per sequence, then a scan of the group counts
        group_base[s + 1] = groups_of_sequence(qtile_base[s], qtile_base[s + 1], by_keys.data(), key_first.data(),
                                               key_last.data(), group.data());
    for (int64_t s = 0; s < sequences; ++s) group_base[s + 1] += group_base[s];
    const int64_t groups = group_base[sequences];
    std::vector<int64_t> longest(groups, 0), rank(groups), group_rank(items), visit(items);
    for (int64_t g = 0; g < items; ++g) {
        group[g] += group_base[seq[g]];
        longest[group[g]] = max64(longest[group[g]], counts[g]);  // an atomicMax on the GPU
    }
    for (int64_t grp = 0; grp < groups; ++grp) rank_group(grp, groups, longest.data(), rank.data());
    for (int64_t g = 0; g < items; ++g) group_rank[g] = rank[group[g]];
    for (int64_t g = 0; g < items; ++g) place_item(g, items, group_rank.data(), counts.data(), visit.data());
    row_ptr[0] = 0;
    for (int64_t w = 0; w < items; ++w) row_ptr[w + 1] = row_ptr[w] + (int32_t)counts[visit[w]];  // a scan
    for (int64_t w = 0; w < items; ++w) {  // a thread (a warp) per item
        const int64_t g = visit[w];
        work_seq[w] = (int32_t)seq[g];
        work_qtile[w] = (int32_t)(g - qtile_base[seq[g]]);
        for (int64_t i = 0; i < counts[g]; ++i) {
            k_tile[row_ptr[w] + i] = (int32_t)tiles[g * room + i];
            kind[row_ptr[w] + i] = kinds[g * room + i];
        }
    }
    return row_ptr[items];
}

#include "transpose.cuh"

// The key descriptor from a forward descriptor, pass by pass (each loop: one thread per key tile). work_seq,
// work_ktile (keys), col_ptr (keys + 1), q_tile, kind and q_item (the forward's tiles) are the caller's.
extern "C" void by_key_all(const int32_t* row_ptr, const int32_t* k_tile, const uint32_t* kind,
                           const int64_t* item_of_qtile, const int64_t* qtile_base, const int64_t* ktile_base,
                           int64_t sequences, int32_t* work_seq, int32_t* work_ktile, int32_t* col_ptr,
                           int32_t* q_tile, uint32_t* q_kind, int32_t* q_item) {
    using namespace maskc_plan;
    const Forward f{row_ptr, k_tile, kind, item_of_qtile, qtile_base, ktile_base, sequences};
    const int64_t keys = ktile_base[sequences];
    std::vector<int64_t> count(keys), place(keys);
    for (int64_t key = 0; key < keys; ++key) count[key] = count_key(f, key);
    for (int64_t key = 0; key < keys; ++key) place[key] = place_key(key, keys, count.data());
    std::vector<int64_t> at_place(keys);
    for (int64_t key = 0; key < keys; ++key) at_place[place[key]] = count[key];
    col_ptr[0] = 0;
    for (int64_t p = 0; p < keys; ++p) col_ptr[p + 1] = col_ptr[p] + (int32_t)at_place[p];  // a scan
    for (int64_t key = 0; key < keys; ++key) {
        const KeyItem item = write_key(f, key, place[key], col_ptr, q_tile, q_kind, q_item);
        work_seq[place[key]] = item.seq;
        work_ktile[place[key]] = item.ktile;
    }
}
