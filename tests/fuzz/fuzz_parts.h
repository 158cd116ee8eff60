/*
 * fuzz_parts.h — the multipart framing the message fuzzers share: the
 * input is [n][len0 lo][len0 hi][part 0] ... where n (1..8, n % 8 + 1)
 * counts the parts and every part but the last has a 16-bit little-endian
 * length before it; the last part is the rest. A short input gives fewer
 * parts. The seed corpora (tests/fuzz/corpus/) are written this way by
 * tests/fuzz/make_seeds.py.
 */
#ifndef SS_FUZZ_PARTS_H
#define SS_FUZZ_PARTS_H

#include <stddef.h>
#include <stdint.h>

#include "proto/proto.h"

#define FUZZ_MAX_PARTS 8

/* Split data into parts (at most FUZZ_MAX_PARTS); returns their number. */
static inline int fuzz_split(const uint8_t *data, size_t size, ss_proto_part_t *parts)
{
    if (size == 0)
        return 0;
    const int want = data[0] % FUZZ_MAX_PARTS + 1;
    size_t at = 1;
    int n = 0;
    while (n < want - 1 && at + 2 <= size) {
        size_t len = (size_t)data[at] | (size_t)data[at + 1] << 8;
        at += 2;
        if (len > size - at)
            len = size - at;
        parts[n].data = data + at;
        parts[n].len = len;
        at += len;
        n++;
    }
    parts[n].data = data + at;
    parts[n].len = size - at;
    return n + 1;
}

#endif
