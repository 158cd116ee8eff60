/*
 * adzmq_sender.h — the header part of a frame as EPICS areaDetector's
 * NDPluginZMQ (ADZMQ) sends it, for the tests of source.zmq.format
 * "adzmq" (proto/PROTOCOL.md §11). Written from the plugin's format: its
 * sendNDArray writes the members in this order with ", " between them,
 * then sends the NDArray's raw data as the second and last part.
 * Header-only (one static function), included by the test files.
 */
#ifndef SS_ADZMQ_SENDER_H
#define SS_ADZMQ_SENDER_H

#include <stdio.h>

/* The header of an x-by-y array of type (an NDDataType's name: "uint16",
 * ...) into buf (n bytes): current (ADZMQ >= 1.4.0: htype a string,
 * shape slowest axis first, [y, x]) or pre-1.4 (htype an array, shape
 * fastest axis first, [x, y]). frame is the NDArray's uniqueId, ts its
 * timeStamp (s since 1990-01-01 UTC); codec NULL leaves "encoding" out
 * (ADCore before 3.0); ndattr is the attributes' JSON object. Returns
 * snprintf's count. */
static inline int ss_test_adzmq_header(char *buf, size_t n, int current, const char *type, int x,
                                       int y, long frame, double ts, const char *codec,
                                       const char *ndattr)
{
    char enc[64] = "";
    if (codec)
        snprintf(enc, sizeof enc, "\"encoding\":\"%s\", ", codec);
    return snprintf(buf, n,
                    "{\"htype\":%s, \"type\":\"%s\", \"shape\":[%d,%d], \"frame\":%ld, "
                    "\"timeStamp\":%.17g, %s\"ndattr\":%s}",
                    current ? "\"array-1.0\"" : "[\"array-1.0\"]", type, current ? y : x,
                    current ? x : y, frame, ts, enc, ndattr);
}

#endif
