/* zarrmount: the log. The library says what happens (a disk cache it cannot
 * use, work ahead that stopped) one line at a time through zm_log; where a
 * line goes is the program's choice, given as a sink, as a tree's progress
 * lines go to the callback its options name. Until a program sets a sink,
 * lines go to stderr as "zarrmount: LINE".
 */
#ifndef ZARRMOUNT_LOG_H
#define ZARRMOUNT_LOG_H

#include <stdarg.h>
#include <syslog.h> /* the priorities: LOG_ERR, LOG_WARNING, LOG_INFO, ... */

/* Receives one line at a syslog priority: already one line (newlines
 * folded to spaces, other control bytes shown as '?', trailing spaces
 * dropped), without a prefix or a newline. May be called from any thread
 * at once. */
typedef void (*zm_log_sink)(void *context, int priority, const char *line);

/* Sends every later line to sink (called with context); NULL restores the
 * default, zm_log_stderr. Set once at start-up, before threads log. */
void zm_log_set_sink(zm_log_sink sink, void *context);

/* The default sink: "zarrmount: LINE\n" to stderr in a single write, so
 * lines from several threads stay whole. */
void zm_log_stderr(void *context, int priority, const char *line);

/* Writes one line at a syslog priority (LOG_ERR, LOG_WARNING, LOG_INFO,
 * LOG_DEBUG) to the sink. Newlines inside the message are folded to
 * spaces, other control bytes shown as '?'. */
void zm_log(int priority, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void zm_vlog(int priority, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));

#endif
