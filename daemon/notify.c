/*
 * notify.c — sd_notify(3) wrappers. A failed notification is logged once
 * at debug level and otherwise ignored: the daemon must keep serving even
 * if the notify socket goes away.
 */
#include "notify.h"

#include "pipeline/ss_common.h"

#include <stdarg.h>
#include <stdio.h>
#include <systemd/sd-daemon.h>
#include <time.h>

#define TAG "notify"

static void send_state(const char *state)
{
    int r = sd_notify(0, state);
    if (r < 0)
        SS_LOG(SS_LOG_DEBUG, TAG, "sd_notify(%s) failed: %d", state, r);
}

void ss_notify_ready(void)
{
    send_state("READY=1");
}

void ss_notify_status(const char *fmt, ...)
{
    char buf[512] = "STATUS=";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + 7, sizeof buf - 7, fmt, ap);
    va_end(ap);
    send_state(buf);
}

void ss_notify_watchdog(void)
{
    send_state("WATCHDOG=1");
}

uint64_t ss_notify_monotonic_usec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

void ss_notify_reloading(void)
{
    char buf[96];
    snprintf(buf, sizeof buf, "RELOADING=1\nMONOTONIC_USEC=%llu",
             (unsigned long long)ss_notify_monotonic_usec());
    send_state(buf);
}

void ss_notify_stopping(uint64_t extend_usec)
{
    char buf[96];
    if (extend_usec)
        snprintf(buf, sizeof buf, "STOPPING=1\nEXTEND_TIMEOUT_USEC=%llu",
                 (unsigned long long)extend_usec);
    else
        snprintf(buf, sizeof buf, "STOPPING=1");
    send_state(buf);
}

uint64_t ss_notify_watchdog_usec(void)
{
    uint64_t usec = 0;
    if (sd_watchdog_enabled(0, &usec) > 0)
        return usec;
    return 0;
}
