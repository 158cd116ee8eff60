/*
 * fuzz_control.c — libFuzzer target: the control request decoder (what
 * the daemon reads) and the response decoder (what skysieve-ctl reads).
 */
#include "proto/proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ss_ctl_request_t req;
    ss_ctl_response_t resp;
    ss_proto_error_t err;
    ss_proto_decode_request(data, size, &req, &err);
    if (ss_proto_decode_response(data, size, &resp, &err) == SS_OK)
        ss_ctl_response_free(&resp);
    return 0;
}
