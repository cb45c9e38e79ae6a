/* Internal to the fs module: the daemon's log, the sink of the library's
 * zm_log (zarrmount/log.h). One line per event: to stderr ("zarrmount:
 * ...") while the daemon has a terminal, to syslog (facility daemon) once
 * it has detached. libfuse's own messages come through here too, so they
 * land in the same place. */
#ifndef ZARRMOUNT_FS_LOG_H
#define ZARRMOUNT_FS_LOG_H

#include "zarrmount/error.h"
#include "zarrmount/log.h"

/* Makes this module the sink of every line zm_log writes (called first
 * thing at start-up). */
void zm__log_start(void);

/* Sends every later line to syslog instead of stderr (called when the
 * daemon detaches from its terminal). */
void zm__log_to_syslog(void);

/* Closes syslog if it was opened. */
void zm__log_close(void);

/* With debug on, zm__log_failure logs every failure, not one per reason. */
void zm__log_set_debug(int debug);

/* Logs "WHAT: REASON" for a request that failed with code (a negative
 * errno; err may be NULL or empty, then strerror says it), once per
 * distinct reason: a source that changed under the mount makes every
 * request fail for the same reason, and one line says it. New reasons are
 * also limited to a few lines a second. Returns 1 if it wrote the line. */
int zm__log_failure(const char *what, int code, const zm_err *err);

/* As zm__log_failure, but once per distinct WHAT and reason: each file
 * whose bytes cannot be made is said for itself, though many fail for one
 * reason (the chunks that need one damaged source chunk). */
int zm__log_failure_of(const char *what, int code, const zm_err *err);

/* While capturing, libfuse's messages are kept (the first one) instead of
 * logged, so that a failure while starting is reported as one line of
 * ours. zm__log_captured returns that message ("" if none). */
void zm__log_capture_fuse(int capture);
const char *zm__log_captured(void);

#endif
