/* The FUSE daemon's life: the command line to a session, the tree opened
 * with the stop signals watched, the mount, the handshake, the source
 * watcher, the session loop, and the unmount (zm_fs_main). The operations
 * it serves are fuse.c's and fuse_dir.c's. */
#include "fs/fuse_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs/daemon.h"
#include "fs/log.h"
#include "zarrmount/config.h"
#include "zarrmount/fs.h"

#ifndef ZM_VERSION
#define ZM_VERSION "unknown"
#endif

#define ZM__EXIT_OK      0
#define ZM__EXIT_FAILURE 1
#define ZM__EXIT_REFUSED 2

/* Worker threads of the session loop: requests block while a chunk is
 * synthesized, so allow many; keep 10 idle ones around between bursts. */
#define ZM__LOOP_THREADS      64
#define ZM__LOOP_IDLE_THREADS 10

/* ---- The mount's life ------------------------------------------------------------- */

/* With allow_other the mount shows the source's own read bits, whatever
 * the directories above it say: a 0644 file in a 0700 home is readable by
 * nobody else there, and by everyone through the mount. Says so once, naming
 * the first directory that keeps out someone the file's bits let in. */
static void zm__warn_hidden_source(const char *source, mode_t file_mode)
{
    char *directory = strdup(source);
    if (directory == NULL)
        return;
    for (char *slash = strrchr(directory, '/'); slash != NULL; slash = strrchr(directory, '/')) {
        *slash = '\0';
        const char *shown = directory[0] ? directory : "/";
        struct stat st;
        if (stat(shown, &st) != 0)
            break;
        /* Search (x) for the group and others who may read the file. */
        int group_kept_out = (file_mode & S_IRGRP) && !(st.st_mode & S_IXGRP);
        int others_kept_out = (file_mode & S_IROTH) && !(st.st_mode & S_IXOTH);
        if (group_kept_out || others_kept_out) {
            zm_log(LOG_WARNING, "allow_other: %s keeps %s out of the source, but the mount shows "
                    "the file's own bits (%04o): through the mount they can read it (chmod the "
                    "source to say who may)", shown, others_kept_out ? "other users" : "its group",
                    (unsigned)(file_mode & 07777));
            break;
        }
        if (!directory[0])
            break;
    }
    free(directory);
}

static void zm__choose_modes(zm__fs *fs)
{
    if (!fs->config.allow_other) {
        /* Only the mounting user can enter the mount at all. */
        fs->file_mode = 0444;
        fs->directory_mode = 0555;
        return;
    }
    /* Everyone can enter: the source's read bits decide who reads, with
     * search bits on directories wherever reading is allowed. */
    mode_t read_bits = fs->config.source_stat.st_mode & 0444;
    fs->file_mode = read_bits;
    fs->directory_mode = read_bits | (read_bits >> 2);
    zm__warn_hidden_source(fs->config.source, fs->config.source_stat.st_mode);
}

/* ---- The mount point ------------------------------------------------------------ */

/* Undoes mountinfo's octal escapes (\040 for a space, \011, \012, \134) in place. */
static void zm__unescape_mountinfo(char *field)
{
    char *out = field;
    for (const char *in = field; *in; out++) {
        if (in[0] == '\\' && in[1] >= '0' && in[1] <= '3' && in[2] >= '0' && in[2] <= '7' &&
            in[3] >= '0' && in[3] <= '7') {
            *out = (char)((in[1] - '0') * 64 + (in[2] - '0') * 8 + (in[3] - '0'));
            in += 4;
        } else {
            *out = *in++;
        }
    }
    *out = '\0';
}

/* Whether path (absolute, resolved) is a mount point in /proc/self/mountinfo:
 * 1 with the mounted filesystem's type and source copied out, 0 if not, -errno
 * if mountinfo cannot be read. The last entry for the point is the one seen. */
static int zm__find_mount(const char *path, char *type, size_t type_size, char *source,
                          size_t source_size)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (f == NULL)
        return -errno;
    char *line = NULL;
    size_t capacity = 0;
    int found = 0;
    while (getline(&line, &capacity, f) > 0) {
        /* ID PARENT MAJOR:MINOR ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - TYPE SOURCE SUPER */
        char *save = NULL;
        char *field = strtok_r(line, " \n", &save);
        for (int i = 1; field != NULL && i < 5; i++)
            field = strtok_r(NULL, " \n", &save);
        if (field == NULL)
            continue;
        zm__unescape_mountinfo(field);
        if (strcmp(field, path) != 0)
            continue;
        while ((field = strtok_r(NULL, " \n", &save)) != NULL && strcmp(field, "-") != 0)
            ;
        char *fs_type = field ? strtok_r(NULL, " \n", &save) : NULL;
        char *fs_source = fs_type ? strtok_r(NULL, " \n", &save) : NULL;
        if (fs_source)
            zm__unescape_mountinfo(fs_source);
        snprintf(type, type_size, "%s", fs_type ? fs_type : "?");
        snprintf(source, source_size, "%s", fs_source ? fs_source : "?");
        found = 1;
    }
    free(line);
    fclose(f);
    return found;
}

/* Refuses, before anything is mounted, a mount point that is itself mounted
 * (libfuse 3 would stack a second mount over it and succeed) or, without -o
 * nonempty, a directory that holds entries (which the mount would hide). An
 * automount point (autofs) is what it is for: allowed. */
static int zm__check_mountpoint(const zm__fs_config *config, zm_err *err)
{
    const char *point = config->mountpoint;
    char type[64], source[256];
    int rc = zm__find_mount(point, type, sizeof type, source, sizeof source);
    /* Without /proc (a bare chroot) nothing says; libfuse mounts without it. */
    if (rc < 0)
        zm_log(LOG_WARNING, "mount point '%s': cannot read /proc/self/mountinfo (%s): not checked "
                "for a mount already there", point, strerror(-rc));
    /* systemd's automount (x-systemd.automount) mounts over its own autofs
     * trap, which is empty; listing it would trigger the mount being made. */
    if (rc == 1 && strcmp(type, "autofs") == 0)
        return 0;
    if (rc == 1)
        return zm_err_set(err, -EBUSY,
                          "mount point '%s' is already mounted (%s from %s): unmount it first "
                          "(a second mount would stack on it)",
                          point, type, source);
    if (config->nonempty)
        return 0;
    DIR *directory = opendir(point);
    if (directory == NULL)
        return zm_err_set(err, -errno, "mount point '%s': %s", point, strerror(errno));
    const struct dirent *entry;
    int entries = 0;
    errno = 0;
    while (!entries && (entry = readdir(directory)) != NULL)
        entries = strcmp(entry->d_name, ".") != 0 && strcmp(entry->d_name, "..") != 0;
    closedir(directory);
    if (entries)
        return zm_err_set(err, -ENOTEMPTY,
                          "mount point '%s' is not empty: the mount would hide what it holds "
                          "(-o nonempty mounts over it anyway)",
                          point);
    return 0;
}

/* The tree's progress lines (long work, every few seconds) go to the log. */
static void zm__log_progress(void *context, const char *line)
{
    (void)context;
    zm_log(LOG_INFO, "%s", line);
}

/* Opening the tree (the source, its structure, the disk cache) runs on a
 * thread of its own with the stop signals blocked, so that the threads it
 * starts (the source's decode pool, the disk writer, the progress teller)
 * inherit the mask: libfuse's loop wakes only when a stop signal lands on
 * the thread that waits in it. Meanwhile the calling thread waits for those
 * signals: an open can take long on a large or hostile file, and nothing
 * is mounted yet, so SIGTERM, SIGINT, SIGHUP or SIGQUIT then ends the
 * process at once (after a line saying so) rather than after the open. The
 * disk cache survives that as it survives SIGKILL (docs/reliability.md). */
typedef struct zm__opening {
    zm_tree_options options;
    zm_tree *tree;
    zm_err *err;
    int rc;
    atomic_int done;
} zm__opening;

/* How often the waiting thread looks whether the open has finished: a
 * stop signal is taken at once either way. */
#define ZM__OPEN_POLL_NANOSECONDS 100000000L

static void *zm__open_tree_thread(void *arg)
{
    zm__opening *o = arg;
    o->rc = zm__tree_open(&o->options, &o->tree, o->err);
    atomic_store(&o->done, 1);
    return NULL;
}

static _Noreturn void zm__stopped_while_opening(const char *source, int signal_number)
{
    zm_log(LOG_ERR, "stopped by signal %d (%s) while opening %s: nothing was mounted",
            signal_number, strsignal(signal_number), source);
    /* Die of the signal itself, so that whoever waits sees why. */
    signal(signal_number, SIG_DFL);
    sigset_t only;
    sigemptyset(&only);
    sigaddset(&only, signal_number);
    raise(signal_number);
    pthread_sigmask(SIG_UNBLOCK, &only, NULL);
    _exit(128 + signal_number);
}

static int zm__open_tree(zm__fs *fs, zm_err *err)
{
    const zm__fs_config *config = &fs->config;
    zm__opening opening = {
        .options =
            {
                .source = config->source,
                .codec = config->options.codec,
                .chunk_bytes = config->options.chunk_bytes,
                .cache_bytes = config->options.cache_bytes,
                .cache_dir = config->options.cache_dir,
                .sets_dir = config->options.sets_dir,
                .layout_anndata = config->options.layout_anndata,
                .index_int32 = config->options.index_int32,
                .cache_max = config->options.cache_max,
                .threads = config->options.threads,
                .ahead_idle_seconds = config->options.ahead_idle_seconds,
                .ahead_rate = config->options.ahead_rate,
                .progress = zm__log_progress,
                .progress_context = NULL,
            },
        .err = err,
    };
    sigset_t stop_signals, previous;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGHUP);
    sigaddset(&stop_signals, SIGQUIT);
    pthread_sigmask(SIG_BLOCK, &stop_signals, &previous);
    pthread_t opener;
    int rc = pthread_create(&opener, NULL, zm__open_tree_thread, &opening);
    if (rc != 0) {
        /* No thread: open here, as before (signals wait until it is done). */
        zm__open_tree_thread(&opening);
    } else {
        while (!atomic_load(&opening.done)) {
            struct timespec wait = {0, ZM__OPEN_POLL_NANOSECONDS};
            int got = sigtimedwait(&stop_signals, NULL, &wait);
            if (got > 0)
                zm__stopped_while_opening(config->source, got);
        }
        pthread_join(opener, NULL);
    }
    pthread_sigmask(SIG_SETMASK, &previous, NULL);
    fs->tree = opening.tree;
    rc = opening.rc;
    if (rc != 0 && err->reason[0] == '\0')
        zm_err_set(err, rc, "%s: %s", config->source, strerror(-rc));
    /* What the source holds but the stores leave out (an element outside
     * the file, an encoding not read): said once, each with why. */
    const char *const *skipped;
    size_t skipped_count = rc == 0 ? zm__tree_skipped(fs->tree, &skipped) : 0;
    for (size_t i = 0; i < skipped_count; i++)
        zm_log(LOG_NOTICE, "%s: left out: %s", config->source, skipped[i]);
    return rc;
}

/* ---- The source watcher -------------------------------------------------------- */

/* Drops every page and attribute the kernel keeps for the mount's inodes, so
 * that later reads reach the daemon (and fail with EIO there). */
static void zm__drop_kernel_cache(zm__fs *fs)
{
    uint64_t *numbers = NULL;
    size_t count = 0;
    if (zm__inodes_numbers(fs->inodes, &numbers, &count) != 0) {
        zm_log(LOG_WARNING, "out of memory listing inodes: cached pages stay until remount");
        return;
    }
    for (size_t i = 0; i < count; i++)
        fuse_lowlevel_notify_inval_inode(fs->session, numbers[i], 0, 0);
    free(numbers);
}

/* Whether an inotify event may mean the source changed: anything on the
 * file itself, or its name in its directory created, moved or deleted. */
static int zm__event_matters(const struct inotify_event *event, int file_watch, const char *name)
{
    if (event->wd == file_watch)
        return 1;
    return event->len > 0 && strcmp(event->name, name) == 0;
}

/* Watches the source (the file, and its directory for a replacement by
 * rename). On a change it checks the identity as a read would; if the
 * source is no longer the mounted file, it logs why (once) and drops what
 * the kernel keeps, so that no reader is served the old file's pages after
 * the new file is in place and every read says to remount. */
static void *zm__watch_source(void *arg)
{
    zm__fs *fs = arg;
    const char *source = fs->config.source;
    int fd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
    if (fd < 0) {
        zm_log(LOG_WARNING, "cannot watch %s for changes (%s): reads still check it",
                source, strerror(errno));
        return NULL;
    }
    const char *slash = strrchr(source, '/');
    char *directory = slash ? strndup(source, slash == source ? 1 : (size_t)(slash - source))
                            : strdup(".");
    const char *name = slash ? slash + 1 : source;
    int file_watch = inotify_add_watch(fd, source,
                                       IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_DELETE_SELF |
                                           IN_MOVE_SELF);
    int directory_watch =
        directory ? inotify_add_watch(fd, directory,
                                      IN_CREATE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE)
                  : -1;
    if (file_watch < 0 || directory_watch < 0)
        zm_log(LOG_WARNING, "cannot watch %s for changes (%s): reads still check it", source,
                strerror(errno));
    _Alignas(struct inotify_event) char events[4096];
    while (file_watch >= 0 || directory_watch >= 0) {
        struct pollfd waits[2] = {{.fd = fd, .events = POLLIN},
                                  {.fd = fs->watcher_stop[0], .events = POLLIN}};
        if (poll(waits, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (waits[1].revents)
            break; /* the mount is ending */
        ssize_t got = read(fd, events, sizeof events);
        if (got <= 0)
            continue;
        int matters = 0;
        for (ssize_t at = 0; at < got;) {
            const struct inotify_event *event = (const struct inotify_event *)(events + at);
            matters |= zm__event_matters(event, file_watch, name);
            at += (ssize_t)(sizeof *event + event->len);
        }
        zm_err err;
        zm_err_clear(&err);
        if (matters && zm__tree_check_source(fs->tree, &err) != 0) {
            zm__log_failure("source", -EIO, &err);
            zm__drop_kernel_cache(fs);
            break; /* a mount never serves again what changed: nothing more to watch */
        }
    }
    free(directory);
    close(fd);
    return NULL;
}

/* Starts the watcher with the stop signals blocked (libfuse's loop wakes
 * only when they land on its own thread). Not fatal if it cannot start. */
static void zm__start_watcher(zm__fs *fs, struct fuse_session *session)
{
    fs->session = session;
    if (pipe2(fs->watcher_stop, O_CLOEXEC) != 0) {
        zm_log(LOG_WARNING, "cannot watch %s for changes (%s): reads still check it",
                fs->config.source, strerror(errno));
        return;
    }
    sigset_t all, previous;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &previous);
    fs->watching = pthread_create(&fs->watcher, NULL, zm__watch_source, fs) == 0;
    pthread_sigmask(SIG_SETMASK, &previous, NULL);
    if (!fs->watching) {
        close(fs->watcher_stop[0]);
        close(fs->watcher_stop[1]);
        zm_log(LOG_WARNING, "cannot watch %s for changes: reads still check it",
                fs->config.source);
    }
}

static void zm__stop_watcher(zm__fs *fs)
{
    if (!fs->watching)
        return;
    char byte = 1;
    if (write(fs->watcher_stop[1], &byte, 1) != 1)
        zm_log(LOG_WARNING, "cannot stop the source watcher: %s", strerror(errno));
    pthread_join(fs->watcher, NULL);
    close(fs->watcher_stop[0]);
    close(fs->watcher_stop[1]);
    fs->watching = 0;
}

/* How far ahead of a walking reader kept files are pushed: the memory
 * cache's share (zm_config_push_window). */
static uint64_t zm__push_window(const zm__fs_config *config)
{
    zm_config resolved;
    zm_config_resolve(&config->options, &resolved);
    return zm_config_push_window(resolved.cache_bytes);
}

/* Answers the kernel's INIT, asking for passthrough when it is wanted
 * (passthrough=on), as root (the kernel lends backing files to
 * CAP_SYS_ADMIN only). 0, or -errno when the session ended. */
static int zm__handshake(zm__fs *fs, struct fuse_session *session)
{
    int wanted = fs->config.passthrough;
    int offer = wanted && geteuid() == 0 && zm__backings_create(&fs->backings) == 0;
    if (wanted && geteuid() != 0)
        zm_log(LOG_WARNING, "passthrough=on needs root (the kernel lends backing files to "
                "CAP_SYS_ADMIN only): the daemon serves every read");
    /* Read by the init operation, which libfuse calls while answering. */
    fs->passthrough = offer;
    int granted = 0;
    int rc = zm__passthrough_handshake(session, offer, &granted);
    fs->passthrough = granted;
    if (offer && !granted)
        zm_log(LOG_WARNING, "passthrough=on: this kernel has no FUSE passthrough (Linux 6.9 or "
                "later has): the daemon serves every read");
    if (granted)
        zm_log(LOG_INFO, "passthrough: files the disk cache holds are read by the kernel from it");
    return rc;
}

/* Runs the multi-threaded loop until unmounted (0), stopped by a signal
 * (the signal number) or failed (-errno). */
static int zm__run_loop(struct fuse_session *session)
{
    struct fuse_loop_config *loop = fuse_loop_cfg_create();
    if (loop == NULL)
        return -ENOMEM;
    fuse_loop_cfg_set_clone_fd(loop, 1); /* a device descriptor per worker */
    fuse_loop_cfg_set_idle_threads(loop, ZM__LOOP_IDLE_THREADS);
    fuse_loop_cfg_set_max_threads(loop, ZM__LOOP_THREADS);
    int rc = fuse_session_loop_mt(session, loop);
    fuse_loop_cfg_destroy(loop);
    return rc;
}

static const char *zm__fuse_reason(const char *fallback)
{
    const char *captured = zm__log_captured();
    return captured[0] ? captured : fallback;
}

/* From the session to the unmount. report is the daemon's line to its
 * waiting parent (-1 in the foreground). Returns the exit status. */
static int zm__serve(zm__fs *fs, int report)
{
    zm__fs_config *config = &fs->config;
    int status = ZM__EXIT_REFUSED;
    int handlers = 0;
    int mounted = 0;
    zm_err err;
    zm_err_clear(&err);

    /* libfuse says why it fails in its own messages: keep them, and say it
     * in one line of ours. */
    zm__log_capture_fuse(1);
    /* The session first: it checks the FUSE mount options, before the
     * source is opened (which may take a while). */
    struct fuse_session *session =
        fuse_session_new(&config->fuse_args, &zm__operations, sizeof zm__operations, fs);
    if (session == NULL) {
        zm_log(LOG_ERR, "%s", zm__fuse_reason("cannot start a FUSE session"));
        goto done;
    }
    int rc = zm__inodes_create(&fs->inodes);
    if (rc == 0)
        rc = zm__open_tree(fs, &err);
    if (rc != 0) {
        zm_log(LOG_ERR, "%s",
                rc == -ENOMEM && err.reason[0] == '\0' ? "out of memory" : err.reason);
        status = rc == -ENOMEM ? ZM__EXIT_FAILURE : ZM__EXIT_REFUSED;
        goto done;
    }
    status = ZM__EXIT_FAILURE;
    if (fuse_set_signal_handlers(session) != 0) {
        zm_log(LOG_ERR, "%s", zm__fuse_reason("cannot install the signal handlers"));
        goto done;
    }
    handlers = 1;
    if (fuse_session_mount(session, config->mountpoint) != 0) {
        zm_log(LOG_ERR, "cannot mount at %s: %s", config->mountpoint,
                zm__fuse_reason("mount failed"));
        goto done;
    }
    mounted = 1;
    zm__log_capture_fuse(0);
    if (report >= 0) {
        zm__daemon_detach(report);
        report = -1;
    } else if (chdir("/") != 0) {
        /* Not fatal: only keeps the directory busy. */
        zm_log(LOG_WARNING, "cannot change directory to /: %s", strerror(errno));
    }
    zm_log(LOG_INFO, "serving %s at %s", config->source, config->mountpoint);

    fs->session = session;
    rc = zm__handshake(fs, session);
    zm__start_watcher(fs, session);
    /* Without passthrough, a remount pushes kept files ahead of walking
     * readers. (A first mount has none when a walk lists a directory, and
     * what it makes is in memory.) */
    if (rc == 0 && !fs->passthrough && zm__tree_kept_on_disk(fs->tree) &&
        zm__pusher_start(session, fs->tree, fs->inodes, zm__push_window(config), &fs->pusher) != 0)
        zm_log(LOG_WARNING, "cannot start pushing kept files into the page cache: they are read "
                "as usual");
    if (fs->passthrough || fs->pusher != NULL)
        zm__tree_kernel_reads_kept(fs->tree);
    if (rc == 0)
        rc = zm__run_loop(session);
    else if (rc == -ENODEV)
        rc = 0; /* unmounted before INIT */
    zm__pusher_stop(fs->pusher);
    fs->pusher = NULL;
    zm__stop_watcher(fs);
    status = rc < 0 ? ZM__EXIT_FAILURE : ZM__EXIT_OK;
    if (rc < 0)
        zm_log(LOG_ERR, "serving %s failed: %s", config->mountpoint, strerror(-rc));

done:
    zm__log_capture_fuse(0);
    /* Requests still running have finished: the loop joins its workers. */
    if (mounted)
        fuse_session_unmount(session);
    if (handlers)
        fuse_remove_signal_handlers(session);
    if (session)
        fuse_session_destroy(session);
    if (mounted)
        zm_log(LOG_INFO, "unmounted %s", config->mountpoint);
    zm__handles_free_all(fs);
    zm__backings_destroy(fs->backings);
    fs->backings = NULL;
    if (fs->listing)
        zm__dir_free(fs->listing);
    fs->listing = NULL;
    if (fs->tree)
        zm__tree_close(fs->tree);
    zm__inodes_destroy(fs->inodes);
    fs->tree = NULL;
    fs->inodes = NULL;
    /* A daemon that fails before detaching closes its line: the parent then
     * takes this status from waitpid. */
    if (report >= 0)
        close(report);
    return status;
}

static const char *zm__program_name(int argc, char **argv)
{
    if (argc < 1 || argv[0] == NULL)
        return "zarrmount";
    const char *slash = strrchr(argv[0], '/');
    return slash ? slash + 1 : argv[0];
}

void zm_fs_print_version(FILE *out)
{
    /* The first line is the package's version, the man page's and meson's. */
    fprintf(out, "zarrmount %s\nFUSE library %s\n", ZM_VERSION, fuse_pkgversion());
}

int zm_fs_main(int argc, char **argv)
{
    /* The library's lines, and ours, go where the daemon's log is. */
    zm__log_start();
    /* Chunks are made and freed by the thousand, each up to a few MiB: kept
     * on the heap (not a fresh mapping each, whose every page faults in
     * zeroed) and not trimmed back after each, glibc's memory is reused.
     * Measured: a fifth of the daemon's time on a walk from the disk cache
     * was page faults of new chunk buffers. */
    mallopt(M_MMAP_THRESHOLD, 8 << 20);
    mallopt(M_TRIM_THRESHOLD, 16 << 20);
    /* An arena a core, not eight: each FUSE thread would otherwise keep
     * its own free memory (measured: 75 MB more at the peak of a walk of
     * ten million cells, no faster). */
    mallopt(M_ARENA_MAX, (int)zm_config_cores());
    zm__fs fs;
    memset(&fs, 0, sizeof fs);
    clock_gettime(CLOCK_MONOTONIC, &fs.began);
    pthread_mutex_init(&fs.handles_lock, NULL);
    pthread_mutex_init(&fs.listing_lock, NULL);
    fs.handles.next = fs.handles.previous = &fs.handles;
    zm_err err;

    zm__log_capture_fuse(1);
    int rc = zm__fs_config_parse(argc, argv, &fs.config, &err);
    zm__log_capture_fuse(0);
    if (rc != 0) {
        zm_log(LOG_ERR, "%s", zm__fuse_reason(err.reason));
        zm__fs_config_free(&fs.config);
        return rc == -ENOMEM ? ZM__EXIT_FAILURE : ZM__EXIT_REFUSED;
    }
    if (fs.config.show_help || fs.config.show_version) {
        if (fs.config.show_help)
            zm__fs_print_help(stdout, zm__program_name(argc, argv));
        else
            zm_fs_print_version(stdout);
        zm__fs_config_free(&fs.config);
        return ZM__EXIT_OK;
    }
    /* Paths become absolute before the daemon changes directory to "/". */
    if ((rc = zm__fs_config_resolve(&fs.config, &err)) != 0 ||
        (rc = zm__check_mountpoint(&fs.config, &err)) != 0 ||
        (rc = zm__fs_config_finish_fuse_args(&fs.config, &err)) != 0) {
        zm_log(LOG_ERR, "%s", err.reason);
        zm__fs_config_free(&fs.config);
        return rc == -ENOMEM ? ZM__EXIT_FAILURE : ZM__EXIT_REFUSED;
    }
    zm__choose_modes(&fs);
    zm__log_set_debug(fs.config.debug);

    int report = -1;
    if (!fs.config.foreground && (rc = zm__daemon_fork(&report, &err)) != 0) {
        zm_log(LOG_ERR, "%s", err.reason);
        zm__fs_config_free(&fs.config);
        return ZM__EXIT_FAILURE;
    }
    int status = zm__serve(&fs, report);
    zm__fs_config_free(&fs.config);
    zm__log_close();
    return status;
}
