/*
 * fuzz_results.c — libFuzzer target: the result decoders a subscriber
 * runs (residual, detections, tracks, status), chosen by the first part's
 * topic.
 */
#include <stdlib.h>

#include "fuzz_parts.h"
#include "pipeline/pipeline.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static ss_result_t res;
    static uint8_t mask[64 * 64];
    static ss_proto_status_t st;
    if (!res.residual && ss_result_init(&res, 64 * 64, 64) != 0)
        abort();
    ss_proto_part_t parts[FUZZ_MAX_PARTS];
    const int n = fuzz_split(data, size, parts);
    if (n < 1)
        return 0;
    ss_proto_limits_t lim;
    ss_proto_limits_default(&lim);
    lim.max_width = lim.max_height = 64;
    ss_proto_error_t err;
    int has_mask;
    switch (ss_proto_topic_parse(parts[0].data, parts[0].len, NULL)) {
    case SS_MSG_RESIDUAL:
        ss_proto_decode_residual(parts, n, &lim, &res, mask, &has_mask, &err);
        break;
    case SS_MSG_DETECTIONS:
        ss_proto_decode_detections(parts, n, &lim, &res, &err);
        break;
    case SS_MSG_TRACKS:
        ss_proto_decode_tracks(parts, n, &lim, &res, &err);
        break;
    case SS_MSG_STATUS:
        ss_proto_decode_status(parts, n, &lim, &st, &err);
        break;
    default:
        ss_proto_decode_status_body(parts[0].data, parts[0].len, &st, &err);
        break;
    }
    return 0;
}
