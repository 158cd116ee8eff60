/*
 * fuzz_config.c — libFuzzer target: the config loader
 * (ss_config_load_string; no file is touched: the path checks of
 * ss_config_check_paths are not run).
 */
#include <stdlib.h>

#include "config/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static ss_config_t *c;
    if (!c && !(c = malloc(sizeof *c)))
        abort();
    char err[512];
    ss_config_load_string((const char *)data, size, c, err, sizeof err);
    return 0;
}
