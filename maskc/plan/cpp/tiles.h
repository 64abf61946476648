// The interval masks' tile classes, one query tile at a time: what plan/rows.py computes for a whole batch with
// numpy, in C++ that builds for the host (plan/native.py: a C++ compiler, when one is found) and for the GPU
// (NVRTC; docs/experiments/gpu_planner), with the same results, byte for byte.
//
// rows.py works on ranges of key tiles vectorised over the batch, and merges them with a sort where a query tile
// has several pieces or two regions meet one key tile. Here each query tile is on its own: it is cut into pieces
// (runs of rows of one concrete segment), each region's ranges on each piece come from the same closed forms,
// and its key tiles are classified one by one, which needs no sort. See rows.py's docstring for the forms.

#pragma once
#ifdef __CUDACC_RTC__  // NVRTC has no standard headers
typedef long long int64_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
#define INT64_MAX 9223372036854775807LL
#define INT64_MIN (-INT64_MAX - 1)
#else
#include <stdint.h>
#endif

#ifdef __CUDACC__
#define MASKC_HD __host__ __device__
#else
#define MASKC_HD
#endif

namespace maskc_plan {

constexpr uint32_t kFull = 0;  // TileKind.FULL (a partial tile's kind is its regions' bits, never 0)
constexpr int kMaxRegions = 8;  // rows.MAX_REGIONS

// What the classifier reads. Per concrete segment c (every sequence's segments end to end, in order): its start
// in its sequence and its length, and per region r its constants consts[(row * R + r) * C + c] with rows
// L, H, l, h, Hf (rows.segment_constants: L = +BIG, H = -BIG where the region does not apply). Per sequence s:
// its length and its segments [entry_ptr[s], entry_ptr[s + 1]).
struct Inputs {
    const int64_t* consts;
    const int64_t* seg_start;
    const int64_t* seg_length;
    const int64_t* entry_ptr;
    const int64_t* seq_length;
    const uint32_t* bits;  // each region's bit in a partial tile's kind
    int64_t segments;      // C
    int regions;           // R
    int64_t bq, bk;
};

MASKC_HD inline int64_t floordiv(int64_t a, int64_t b) {  // b > 0
    const int64_t q = a / b;
    return q - ((a % b != 0) && (a < 0));
}
MASKC_HD inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
MASKC_HD inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

struct Constants {
    int64_t L, H, l, h, Hf;
};

MASKC_HD inline Constants constants_of(const Inputs& in, int r, int64_t c) {
    const int64_t C = in.segments, R = in.regions;
    return {in.consts[(0 * R + r) * C + c], in.consts[(1 * R + r) * C + c], in.consts[(2 * R + r) * C + c],
            in.consts[(3 * R + r) * C + c], in.consts[(4 * R + r) * C + c]};
}

// Rows [a, b) of concrete segment c.
struct Piece {
    int64_t c, a, b;
};

// One region on one piece: the key tiles it meets, m0 .. m1 - 1, and those it covers for every row, f0 .. f1 - 1
// (f0 = f1 where none), as rows.plan_ranges computes them.
struct Span {
    bool met;
    int64_t m0, m1, f0, f1;
};

MASKC_HD inline Span span_of(const Constants& k, int64_t a, int64_t b, int64_t bk) {
    const int64_t xa = max64(a, k.L - k.h + 1), xb = min64(b, k.H - k.l);  // rows with keys: xa .. xb - 1
    Span s;
    s.met = xa < xb;
    s.m0 = floordiv(max64(k.L, xa + k.l), bk);
    s.m1 = floordiv(min64(k.H + (bk - 1), xb + k.h + (bk - 2)), bk);
    s.f0 = floordiv(max64(k.L + (bk - 1), k.l + (b + bk - 2)), bk);
    s.f1 = floordiv(min64(k.Hf, a + k.h), bk);
    if (!(s.f0 < s.f1)) s.f0 = s.f1 = s.m1;
    return s;
}

// How far [first, reach) extends through the union of one row's intervals [lo_r, hi_r).
MASKC_HD inline int64_t reach_of(const int64_t* lo, const int64_t* hi, int regions, int64_t first) {
    int64_t reach = first;
    for (int round = 0; round < regions; ++round) {  // a chain has at most as many links as intervals
        int64_t next = reach;
        for (int r = 0; r < regions; ++r)
            if (lo[r] < hi[r] && lo[r] <= reach) next = max64(next, hi[r]);
        if (next == reach) break;
        reach = next;
    }
    return reach;
}

// Whether every row of the piece sees every key of key tile t through the union of its regions' intervals
// (rows._covered_by_union: intervals cut at Hf; three pseudo-rows first, then row by row).
MASKC_HD inline bool covered_by_union(const Inputs& in, const Piece& piece, int64_t t) {
    const int64_t first = t * in.bk, end = first + in.bk, a = piece.a, z = piece.b - 1;
    const int R = in.regions;
    Constants k[kMaxRegions];
    for (int r = 0; r < R; ++r) k[r] = constants_of(in, r, piece.c);
    int64_t lo[kMaxRegions], hi[kMaxRegions];
    bool covered[3];
    const int64_t rows_lo[3] = {a, z, z}, rows_hi[3] = {a, z, a};  // first row, last row, what every row sees
    for (int p = 0; p < 3; ++p) {
        for (int r = 0; r < R; ++r) {
            lo[r] = max64(k[r].L, rows_lo[p] + k[r].l);
            hi[r] = min64(k[r].Hf, rows_hi[p] + k[r].h);
        }
        covered[p] = reach_of(lo, hi, R, first) >= end;
    }
    if (covered[2]) return true;
    if (!(covered[0] && covered[1])) return false;
    for (int64_t x = a; x <= z; ++x) {
        for (int r = 0; r < R; ++r) {
            lo[r] = max64(k[r].L, x + k[r].l);
            hi[r] = min64(k[r].Hf, x + k[r].h);
        }
        if (reach_of(lo, hi, R, first) < end) return false;
    }
    return true;
}

// The pieces of query tile `tile` of sequence `seq`, in row order, written to pieces[] (at most bq). Returns how
// many. A piece ends where the next non-empty segment begins, or with the tile.
MASKC_HD inline int64_t pieces_of(const Inputs& in, int64_t seq, int64_t tile, Piece* pieces) {
    const int64_t row0 = tile * in.bq, row_end = min64(row0 + in.bq, in.seq_length[seq]);
    const int64_t e0 = in.entry_ptr[seq], e1 = in.entry_ptr[seq + 1];
    int64_t c = -1;  // the segment holding row0: the last non-empty one starting at or before it
    for (int64_t e = e0; e < e1; ++e)
        if (in.seg_length[e] > 0 && in.seg_start[e] <= row0) c = e;
    int64_t count = 0;
    for (int64_t a = row0; a < row_end;) {
        int64_t next = c + 1;
        while (next < e1 && in.seg_length[next] == 0) ++next;
        const int64_t b = next < e1 ? min64(in.seg_start[next], row_end) : row_end;
        pieces[count++] = {c, a, b};
        a = b;
        c = next;
    }
    return count;
}

// Each region's span on each piece, into spans[] (count x regions); returns the key tiles any of them meets,
// [*lowest, *highest) (empty: lowest >= highest).
MASKC_HD inline void spans_of(const Inputs& in, const Piece* pieces, int64_t count, Span* spans, int64_t* lowest,
                              int64_t* highest) {
    const int R = in.regions;
    *lowest = INT64_MAX;
    *highest = INT64_MIN;
    for (int64_t i = 0; i < count; ++i)
        for (int r = 0; r < R; ++r) {
            const Piece& p = pieces[i];
            const Span s = spans[i * R + r] = span_of(constants_of(in, r, p.c), p.a, p.b, in.bk);
            if (s.met && s.m0 < s.m1) {
                *lowest = min64(*lowest, s.m0);
                *highest = max64(*highest, s.m1);
            }
        }
}

// The class of key tile t of a query tile of `count` pieces: 0 where no region meets it (not listed), else its
// kind (FULL where every piece covers it, else the bits of the regions meeting it) with bit 32 set, so that a
// FULL tile is not 0. `shared`: set where two regions meet t in one piece (the union decides there, tile by
// tile; elsewhere the class holds between any two of the spans' ends).
constexpr uint64_t kListed = 1ull << 32;

MASKC_HD inline uint64_t tile_class(const Inputs& in, const Piece* pieces, int64_t count, const Span* spans,
                                    int64_t t, bool* shared) {
    const int R = in.regions;
    uint32_t bits = 0;
    int64_t covering = 0;
    *shared = false;
    for (int64_t i = 0; i < count; ++i) {
        int meeting = 0, alone = 0;
        for (int r = 0; r < R; ++r) {
            const Span& s = spans[i * R + r];
            if (s.met && s.m0 <= t && t < s.m1) {
                bits |= in.bits[r];
                ++meeting;
            }
            if (s.met && s.f0 <= t && t < s.f1) ++alone;
        }
        // A tile two regions meet in one piece may be covered by their union only.
        *shared |= meeting >= 2;
        covering += meeting >= 2 ? covered_by_union(in, pieces[i], t) : alone > 0;
    }
    return bits ? kListed | (covering == count ? kFull : bits) : 0;
}

// The visited key tiles of a query tile of `count` pieces, ascending, with their kinds, written to k_tile[] and
// kind[] (room for the sequence's key tiles). `spans`: room for count x regions. Returns how many tiles. (The
// GPU's form: a tile at a time. The host's, host.cpp, classifies a run of tiles at once.)
MASKC_HD inline int64_t classify_pieces(const Inputs& in, const Piece* pieces, int64_t count, Span* spans,
                                        int64_t* k_tile, uint32_t* kind) {
    int64_t lowest, highest, listed = 0;
    spans_of(in, pieces, count, spans, &lowest, &highest);
    for (int64_t t = lowest; t < highest; ++t) {
        bool shared;
        const uint64_t c = tile_class(in, pieces, count, spans, t, &shared);
        if (c) {
            k_tile[listed] = t;
            kind[listed] = (uint32_t)c;
            ++listed;
        }
    }
    return listed;
}

// A query tile's classes: pieces_of, then classify_pieces, in the caller's scratch (room for bq pieces and for
// bq x regions spans).
MASKC_HD inline int64_t classify_query_tile(const Inputs& in, int64_t seq, int64_t tile, Piece* pieces, Span* spans,
                                            int64_t* k_tile, uint32_t* kind) {
    return classify_pieces(in, pieces, pieces_of(in, seq, tile, pieces), spans, k_tile, kind);
}

}  // namespace maskc_plan
