#include "zarrmount/log.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "zarrmount/error.h"

/* The prefix the stderr sink writes before a line. */
#define ZM__LOG_PREFIX "zarrmount: "

/* A line's room: a reason (ZM_REASON_MAX) and what a message says around it,
 * with the prefix and the newline (the stderr sink's line). */
#define ZM__LOG_LINE_MAX (ZM_REASON_MAX + 256)

static struct {
    pthread_mutex_t lock;
    zm_log_sink sink;
    void *context;
} zm__log_sink = {.lock = PTHREAD_MUTEX_INITIALIZER, .sink = zm_log_stderr};

void zm_log_set_sink(zm_log_sink sink, void *context)
{
    pthread_mutex_lock(&zm__log_sink.lock);
    zm__log_sink.sink = sink ? sink : zm_log_stderr;
    zm__log_sink.context = sink ? context : NULL;
    pthread_mutex_unlock(&zm__log_sink.lock);
}

void zm_log_stderr(void *context, int priority, const char *line)
{
    (void)context;
    (void)priority;
    char out[ZM__LOG_LINE_MAX];
    int length = snprintf(out, sizeof out, ZM__LOG_PREFIX "%s\n", line);
    if (length < 0)
        return;
    if ((size_t)length >= sizeof out) {
        length = (int)sizeof out - 1;
        out[length - 1] = '\n';
    }
    /* A single write keeps lines from several threads whole. */
    ssize_t written = write(STDERR_FILENO, out, (size_t)length);
    (void)written;
}

void zm_vlog(int priority, const char *fmt, va_list ap)
{
    /* Room for the prefix and the newline is kept, so that the stderr
     * sink's line is never cut. */
    char line[ZM__LOG_LINE_MAX - (sizeof ZM__LOG_PREFIX - 1) - 1];
    vsnprintf(line, sizeof line, fmt, ap);
    /* One event, one line: fold newlines a caller or libfuse let through.
     * Other control bytes (a path's escape sequences, tabs) are shown as
     * '?': a name that does not exist is the caller's text, and must not
     * drive the terminal that reads the log. */
    size_t length = strlen(line);
    while (length > 0 && (line[length - 1] == '\n' || line[length - 1] == ' '))
        line[--length] = '\0';
    for (char *c = line; *c; c++) {
        if (*c == '\n' || *c == '\r')
            *c = ' ';
        else if ((unsigned char)*c < 0x20 || *c == 0x7f)
            *c = '?';
    }
    pthread_mutex_lock(&zm__log_sink.lock);
    zm_log_sink sink = zm__log_sink.sink;
    void *context = zm__log_sink.context;
    pthread_mutex_unlock(&zm__log_sink.lock);
    sink(context, priority, line);
}

void zm_log(int priority, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    zm_vlog(priority, fmt, ap);
    va_end(ap);
}
