#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tp_module.h"
#include "util.h"

/* The only thread-local state: each thread's last error message. */
static _Thread_local char last_error[1024];

static const char *const level_names[] = {"NONE", "ERROR", "WARN", "INFO", "DEBUG", "TRACE"};

static void expand_path(char *out, size_t outlen, const char *pattern)
{
    char host[256] = "unknown";
    gethostname(host, sizeof(host) - 1);
    size_t o = 0;
    for (const char *p = pattern; *p && o + 1 < outlen; p++) {
        if (p[0] == '%' && (p[1] == 'h' || p[1] == 'p')) {
            int n = p[1] == 'h' ? snprintf(out + o, outlen - o, "%s", host)
                                : snprintf(out + o, outlen - o, "%d", (int)getpid());
            if (n < 0) break;
            o += (size_t)n;
            if (o >= outlen) o = outlen - 1;
            p++;
        } else {
            out[o++] = *p;
        }
    }
    out[o] = '\0';
}

void oobx__log_open(oobx_log_t *log, const oobx_settings_t *s, const char *prefix)
{
    memset(log, 0, sizeof(*log));
    log->level = s ? s->log_level : OOBX_LOG_WARN;
    log->fp = stderr;
    if (s && s->log_file[0]) {
        char path[512];
        expand_path(path, sizeof(path), s->log_file);
        FILE *fp = fopen(path, "a");
        if (fp) {
            setvbuf(fp, NULL, _IOLBF, 0);
            log->fp = fp;
            log->own_fp = 1;
        }
    }
    snprintf(log->prefix, sizeof(log->prefix), "%s", prefix ? prefix : "");
    log->api = &oobx__core_api;
}

void oobx__log_close(oobx_log_t *log)
{
    if (log && log->own_fp && log->fp) fclose(log->fp);
    if (log) {
        log->fp = stderr;
        log->own_fp = 0;
    }
}

void oobx__log_set_prefix(oobx_log_t *log, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(log->prefix, sizeof(log->prefix), fmt, ap);
    va_end(ap);
}

static void log_emit(const oobx_log_t *log, int level, const char *msg)
{
    FILE *fp = log && log->fp ? log->fp : stderr;
    char host[64] = "";
    gethostname(host, sizeof(host) - 1);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (level < 0 || level > OOBX_LOG_TRACE) level = OOBX_LOG_ERROR;
    /* one fprintf so that lines of several processes do not interleave */
    fprintf(fp, "%s:%d %ld.%06ld oobx %s %s%s%s\n", host, (int)getpid(), (long)ts.tv_sec,
            (long)(ts.tv_nsec / 1000), level_names[level], log && log->prefix[0] ? log->prefix : "",
            log && log->prefix[0] ? ": " : "", msg);
}

void oobx__log(const oobx_log_t *log, int level, const char *fmt, ...)
{
    char msg[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    log_emit(log, level, msg);
}

void oobx__set_last_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof(last_error), fmt, ap);
    va_end(ap);
}

int oobx__fail(const oobx_log_t *log, int code, const char *fmt, ...)
{
    int saved = errno;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof(last_error), fmt, ap);
    va_end(ap);
    int level = code == OOBX_ERR_ABORTED ? OOBX_LOG_DEBUG : OOBX_LOG_ERROR;
    int threshold = log ? log->level : OOBX_LOG_WARN;
    if (threshold >= level) log_emit(log, level, last_error);
    errno = saved;
    return code;
}


const char *oobx_last_error(void)
{
    return last_error;
}

const char *oobx_strerror(int status)
{
    switch (status) {
#define OOBX_ERROR_STR_(name, value, desc) \
    case value: return desc;
        OOBX_ERROR_MAP(OOBX_ERROR_STR_)
#undef OOBX_ERROR_STR_
    }
    return "unknown error code";
}

const char *oobx_error_name(int status)
{
    switch (status) {
#define OOBX_ERROR_NAME_(name, value, desc) \
    case value: return "OOBX_" #name;
        OOBX_ERROR_MAP(OOBX_ERROR_NAME_)
#undef OOBX_ERROR_NAME_
    }
    return "OOBX_ERR_UNKNOWN";
}

const char *oobx_version(void)
{
    return OOBX_VERSION_STRING;
}

unsigned oobx_version_number(void)
{
    return OOBX_VERSION_HEX;
}
