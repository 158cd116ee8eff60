/*
 * fuzz_frame.c — libFuzzer target: the input-message decoder
 * (ss_proto_decode_input: frame and series messages, a pooled frame).
 */
#include <stdlib.h>

#include "fuzz_parts.h"
#include "pipeline/frame.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static ss_frame_pool_t *pool;
    if (!pool && !(pool = ss_frame_pool_new(1, 64 * 64 * 4, 64 * 64, NULL)))
        abort();
    ss_proto_part_t parts[FUZZ_MAX_PARTS];
    const int n = fuzz_split(data, size, parts);
    ss_proto_limits_t lim;
    ss_proto_limits_default(&lim);
    lim.max_width = lim.max_height = 64;
    static ss_proto_input_t in;
    ss_proto_error_t err;
    ss_frame_t *f = ss_frame_pool_get(pool);
    ss_proto_decode_input(parts, n, &lim, &in, f, &err);
    ss_frame_pool_put(f);
    return 0;
}
