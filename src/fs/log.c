#define FUSE_USE_VERSION 312

#include "fs/log.h"

#include <fuse_log.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The last distinct failure reasons logged (by hash), and a budget of lines
 * per second for new ones. 64 reasons cover the ways a mount fails at once
 * (source changed, a chunk that cannot be made, out of memory). */
#define ZM__RECENT_REASONS   64
#define ZM__LINES_PER_SECOND 10

static atomic_int zm__use_syslog;
static atomic_int zm__debug;

static struct {
    pthread_mutex_t lock;
    uint64_t recent[ZM__RECENT_REASONS];
    size_t next;
    time_t second;
    unsigned lines_this_second;
} zm__limiter = {.lock = PTHREAD_MUTEX_INITIALIZER};

static struct {
    pthread_mutex_t lock;
    int capturing;
    char message[ZM_REASON_MAX];
} zm__capture = {.lock = PTHREAD_MUTEX_INITIALIZER};

void zm__log_to_syslog(void)
{
    openlog("zarrmount", LOG_PID, LOG_DAEMON);
    atomic_store(&zm__use_syslog, 1);
}

void zm__log_close(void)
{
    if (atomic_exchange(&zm__use_syslog, 0))
        closelog();
}

void zm__log_set_debug(int debug)
{
    atomic_store(&zm__debug, debug);
}

/* The program's sink for the library's lines (and its own): syslog once the
 * daemon has detached, stderr as the library's default writes it before. */
static void zm__log_line(void *context, int priority, const char *line)
{
    if (atomic_load(&zm__use_syslog)) {
        syslog(priority, "%s", line);
        return;
    }
    zm_log_stderr(context, priority, line);
}

void zm__log_start(void)
{
    zm_log_set_sink(zm__log_line, NULL);
}

static uint64_t zm__hash_text(const char *text)
{
    uint64_t hash = 0xcbf29ce484222325u; /* FNV-1a */
    for (const unsigned char *c = (const unsigned char *)text; *c; c++)
        hash = (hash ^ *c) * 0x100000001b3u;
    return hash;
}

/* Decides whether a failure with this reason (its hash) gets a line. */
static int zm__limiter_admit(uint64_t hash)
{
    time_t now = time(NULL);
    int admit = 1;
    pthread_mutex_lock(&zm__limiter.lock);
    for (size_t i = 0; i < ZM__RECENT_REASONS; i++)
        if (zm__limiter.recent[i] == hash)
            admit = 0;
    if (admit && now == zm__limiter.second && zm__limiter.lines_this_second >= ZM__LINES_PER_SECOND)
        admit = 0; /* not remembered: it may be logged in a later second */
    if (admit) {
        if (now != zm__limiter.second) {
            zm__limiter.second = now;
            zm__limiter.lines_this_second = 0;
        }
        zm__limiter.lines_this_second++;
        zm__limiter.recent[zm__limiter.next] = hash;
        zm__limiter.next = (zm__limiter.next + 1) % ZM__RECENT_REASONS;
    }
    pthread_mutex_unlock(&zm__limiter.lock);
    return admit;
}

int zm__log_failure(const char *what, int code, const zm_err *err)
{
    const char *reason = err && err->reason[0] ? err->reason : strerror(-code);
    if (!atomic_load(&zm__debug) && !zm__limiter_admit(zm__hash_text(reason)))
        return 0;
    zm_log(LOG_ERR, "%s: %s", what, reason);
    return 1;
}

int zm__log_failure_of(const char *what, int code, const zm_err *err)
{
    const char *reason = err && err->reason[0] ? err->reason : strerror(-code);
    uint64_t hash = zm__hash_text(reason) ^ (zm__hash_text(what) * 0x9e3779b97f4a7c15u);
    if (!atomic_load(&zm__debug) && !zm__limiter_admit(hash))
        return 0;
    zm_log(LOG_ERR, "%s: %s", what, reason);
    return 1;
}

/* libfuse's messages: kept while capturing, logged otherwise. libfuse's
 * levels are syslog's. One message may come in fragments ("unknown
 * option(s): `", "-o foo", "'\n"), so captured text accumulates and is
 * made into one line when asked for. */
static void zm__fuse_log(enum fuse_log_level level, const char *fmt, va_list ap)
{
    pthread_mutex_lock(&zm__capture.lock);
    int capturing = zm__capture.capturing;
    if (capturing) {
        size_t length = strlen(zm__capture.message);
        vsnprintf(zm__capture.message + length, sizeof zm__capture.message - length, fmt, ap);
    }
    pthread_mutex_unlock(&zm__capture.lock);
    if (!capturing)
        zm_vlog((int)level, fmt, ap);
}

void zm__log_capture_fuse(int capture)
{
    fuse_set_log_func(zm__fuse_log);
    pthread_mutex_lock(&zm__capture.lock);
    zm__capture.capturing = capture;
    if (capture)
        zm__capture.message[0] = '\0';
    pthread_mutex_unlock(&zm__capture.lock);
}

const char *zm__log_captured(void)
{
    /* Read after the capture ended, from the thread that started it: the
     * messages as one line, without libfuse's "fuse: " prefixes. */
    static char line[ZM_REASON_MAX];
    const char *from = zm__capture.message;
    size_t length = 0;
    int message_start = 1;
    while (*from && length + 3 < sizeof line) {
        if (message_start && strncmp(from, "fuse: ", 6) == 0)
            from += 6;
        message_start = *from == '\n';
        if (message_start) {
            from++;
            if (*from && length > 0) {
                line[length++] = ';';
                line[length++] = ' ';
            }
            continue;
        }
        line[length++] = *from++;
    }
    line[length] = '\0';
    return line;
}
