/* Logging and errors. A log context belongs to a communicator (or a root);
 * there is no process-wide logger. */
#ifndef OOBX_LOG_H
#define OOBX_LOG_H

#include <stdio.h>
#include "settings.h"

typedef struct oobx__log {
    int level;
    FILE *fp;          /* stderr or the OOBX_LOG_FILE stream */
    int own_fp;        /* fp was opened for this context */
    char prefix[64];   /* "host:pid rank 3/8" */
    const struct oobx_core_api *api; /* the core's services, for modules (tp_module.h) */
} oobx_log_t;

/* Opens the context from settings; falls back to stderr. */
void oobx__log_open(oobx_log_t *log, const oobx_settings_t *s, const char *prefix);
void oobx__log_close(oobx_log_t *log);
void oobx__log_set_prefix(oobx_log_t *log, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

void oobx__log(const oobx_log_t *log, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Records msg as this thread's last error, logs it (at error level, or at
 * debug level for OOBX_ERR_ABORTED) and returns code. log may be NULL. */
int oobx__fail(const oobx_log_t *log, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Sets this thread's last error without logging. */
void oobx__set_last_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define OOBX_LOG(log, lvl, ...)                                         \
    do {                                                                \
        if ((log) && (log)->level >= (lvl)) oobx__log((log), (lvl), __VA_ARGS__); \
    } while (0)
#define OOBX_WARN(log, ...) OOBX_LOG(log, OOBX_LOG_WARN, __VA_ARGS__)
#define OOBX_INFO(log, ...) OOBX_LOG(log, OOBX_LOG_INFO, __VA_ARGS__)
#define OOBX_DEBUG(log, ...) OOBX_LOG(log, OOBX_LOG_DEBUG, __VA_ARGS__)
#define OOBX_TRACE(log, ...) OOBX_LOG(log, OOBX_LOG_TRACE, __VA_ARGS__)

#endif
