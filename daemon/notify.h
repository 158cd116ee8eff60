/*
 * notify.h — the systemd side of the daemon's contract (Type=notify):
 * READY=1, STATUS=, WATCHDOG=1, RELOADING=1 with MONOTONIC_USEC, STOPPING=1.
 *
 * All calls go through sd_notify(3) and are no-ops when NOTIFY_SOCKET is not
 * set (running by hand), so the daemon never needs to know whether it runs
 * under systemd. Call from the main thread only.
 */
#ifndef SS_NOTIFY_H
#define SS_NOTIFY_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Sockets are bound and backends are up. Also ends a reload (after
 * ss_notify_reloading). */
void ss_notify_ready(void);
/* One human-readable status line (STATUS=...), e.g. frames/s and drops. */
void ss_notify_status(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Tell the service manager we are alive; call only from the loop that
 * has just checked that every pipeline makes progress. */
void ss_notify_watchdog(void);
/* A reload starts (RELOADING=1 + MONOTONIC_USEC=<now>, as systemd >= 253's
 * Type=notify-reload expects and older versions accept). */
void ss_notify_reloading(void);
/* Shutdown starts (STOPPING=1); extend_usec > 0 also asks systemd (>= 236)
 * for that long to finish (EXTEND_TIMEOUT_USEC), beyond TimeoutStopSec. */
void ss_notify_stopping(uint64_t extend_usec);

/* The watchdog interval asked for by the service manager (WATCHDOG_USEC,
 * honouring WATCHDOG_PID), in microseconds; 0 when no watchdog is set. */
uint64_t ss_notify_watchdog_usec(void);

/* CLOCK_MONOTONIC in microseconds (what MONOTONIC_USEC carries). */
uint64_t ss_notify_monotonic_usec(void);

#ifdef __cplusplus
}
#endif
#endif
