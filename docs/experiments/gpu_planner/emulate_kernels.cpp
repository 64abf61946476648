// kernels.cu itself run on the CPU: each launch a loop over the grid's threads, one after another (the kernels
// are a thread per index with no synchronisation inside, so any order of threads gives the GPU's result; the
// atomics become plain updates). gpu_check.py --cpu builds this with g++ to check the kernels, their Plan and
// the order of the passes without a GPU.
#include <cstdint>
#include <cstring>

#define __global__
#define __device__
struct Index { unsigned x = 0; };
static Index blockIdx, threadIdx, blockDim;
static unsigned long long atomicMax(unsigned long long* at, unsigned long long value) {
    const unsigned long long old = *at;
    if (value > old) *at = value;
    return old;
}

#include "kernels.cu"

typedef void (*Kernel)(const Plan*);

// The passes by name, as gpu_check.PASSES launches them.
static const struct { const char* name; Kernel kernel; } kPasses[] = {
    {"plan_classify", plan_classify}, {"plan_keys", plan_keys}, {"plan_place_in_sequence", plan_place_in_sequence},
    {"plan_groups", plan_groups}, {"plan_group_base", plan_group_base}, {"plan_longest", plan_longest},
    {"plan_rank_groups", plan_rank_groups}, {"plan_place_items", plan_place_items}, {"plan_row_ptr", plan_row_ptr},
    {"plan_write", plan_write}, {"plan_key_count", plan_key_count}, {"plan_key_place", plan_key_place},
    {"plan_col_ptr", plan_col_ptr}, {"plan_key_write", plan_key_write},
};

// Launches pass `name` on grid x block threads.
extern "C" int launch(const char* name, int64_t grid, int64_t block, const Plan* plan) {
    for (const auto& pass : kPasses) {
        if (strcmp(pass.name, name) != 0) continue;
        blockDim.x = (unsigned)block;
        for (int64_t b = 0; b < grid; ++b)
            for (int64_t t = 0; t < block; ++t) {
                blockIdx.x = (unsigned)b;
                threadIdx.x = (unsigned)t;
                pass.kernel(plan);
            }
        return 0;
    }
    return -1;
}
