/* The disk cache: entries survive a reopen (a remount), a damaged or
 * truncated entry is detected, removed and reported missing (never served),
 * spaces (sources) never see each other's entries, a crash's temporary files
 * are never read and are cleaned up, another format is ignored, the bound
 * holds with the least recently used entries out first, and threads share
 * it safely. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "zarrmount/cache.h"

#include "cache/disk_internal.h" /* zm__disk_see, zm__disk_remove_seen */

static char root[64];

static void make_root(void)
{
    snprintf(root, sizeof root, "/tmp/zm-disk-test-XXXXXX");
    cr_assert_not_null(mkdtemp(root));
}

static void remove_tree(const char *path)
{
    char command[256];
    snprintf(command, sizeof command, "rm -rf '%s'", path);
    cr_assert_eq(system(command), 0);
}

static void fill(uint8_t *bytes, size_t size, unsigned seed)
{
    for (size_t i = 0; i < size; i++)
        bytes[i] = (uint8_t)(i * 131 + seed * 7 + (i >> 9));
}

/* Calls visit with every file under directory (path, name, stat). */
typedef void (*file_visit_fn)(void *context, const char *path, const char *name,
                              const struct stat *st);

static void each_file(const char *directory, file_visit_fn visit, void *context)
{
    DIR *d = opendir(directory);
    if (d == NULL)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char path[512];
        snprintf(path, sizeof path, "%s/%s", directory, e->d_name);
        struct stat st;
        if (stat(path, &st) != 0)
            continue;
        if (S_ISDIR(st.st_mode))
            each_file(path, visit, context);
        else
            visit(context, path, e->d_name, &st);
    }
    closedir(d);
}

struct suffixed {
    const char *suffix;
    char *out;
    size_t size;
    int found;
};

static void match_suffix(void *context, const char *path, const char *name, const struct stat *st)
{
    (void)st;
    struct suffixed *m = context;
    size_t length = strlen(name), tail = strlen(m->suffix);
    if (length > tail && strcmp(name + length - tail, m->suffix) == 0) {
        snprintf(m->out, m->size, "%s", path);
        m->found++;
    }
}

/* The path of the one file under directory whose name ends in suffix
 * (".entry": a header, ".data": a payload); returns how many there are. */
static int only_file(const char *directory, const char *suffix, char *out, size_t size)
{
    struct suffixed m = {suffix, out, size, 0};
    each_file(directory, match_suffix, &m);
    return m.found;
}

static void add_size(void *context, const char *path, const char *name, const struct stat *st)
{
    (void)path;
    (void)name;
    *(uint64_t *)context += (uint64_t)st->st_size;
}

/* Bytes of all files under a directory. */
static uint64_t bytes_under(const char *directory)
{
    uint64_t total = 0;
    each_file(directory, add_size, &total);
    return total;
}

Test(disk, round_trip_and_survives_a_reopen)
{
    make_root();
    zm_disk *disk;
    zm_err err = {0};
    cr_assert_eq(zm_disk_open(root, 1 << 20, &disk, &err), 0, "%s", err.reason);
    uint8_t value[5000];
    fill(value, sizeof value, 1);
    cr_assert_eq(zm_disk_put(disk, "source-a", "uniform|0|X/data|3", value, sizeof value, &err), 0,
                 "%s", err.reason);
    uint8_t *got;
    size_t size;
    cr_assert_eq(zm_disk_get(disk, "source-a", "uniform|0|X/data|3", &got, &size, &err), 0, "%s",
                 err.reason);
    cr_assert_eq(size, sizeof value);
    cr_assert(memcmp(got, value, size) == 0);
    free(got);
    /* Absent keys and other spaces miss. */
    cr_expect_eq(zm_disk_get(disk, "source-a", "uniform|0|X/data|4", &got, &size, &err), -ENOENT);
    cr_expect_eq(zm_disk_get(disk, "source-b", "uniform|0|X/data|3", &got, &size, &err), -ENOENT);
    zm_disk_close(disk);
    /* A second mount finds it. */
    cr_assert_eq(zm_disk_open(root, 1 << 20, &disk, &err), 0, "%s", err.reason);
    zm_disk_stats stats;
    zm_disk_get_stats(disk, &stats);
    cr_expect_eq(stats.entries, 1);
    cr_assert_eq(zm_disk_get(disk, "source-a", "uniform|0|X/data|3", &got, &size, &err), 0, "%s",
                 err.reason);
    cr_expect(size == sizeof value && memcmp(got, value, size) == 0);
    free(got);
    /* An empty entry is an entry. */
    cr_assert_eq(zm_disk_put(disk, "source-a", "empty", "", 0, &err), 0, "%s", err.reason);
    cr_assert_eq(zm_disk_get(disk, "source-a", "empty", &got, &size, &err), 0, "%s", err.reason);
    cr_expect_eq(size, 0);
    free(got);
    zm_disk_close(disk);
    remove_tree(root);
}

/* Damages the entry's payload (or its header: "header", "header-cut"). */
static void damage_and_check(const char *how)
{
    make_root();
    zm_disk *disk;
    zm_err err = {0};
    cr_assert_eq(zm_disk_open(root, 1 << 20, &disk, &err), 0, "%s", err.reason);
    uint8_t value[3000];
    fill(value, sizeof value, 2);
    cr_assert_eq(zm_disk_put(disk, "s", "k", value, sizeof value, &err), 0, "%s", err.reason);
    char path[512], header[512];
    cr_assert_eq(only_file(root, ".entry", header, sizeof header), 1);
    cr_assert_eq(only_file(root, ".data", path, sizeof path), 1);
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_eq(st.st_size, sizeof value, "the payload is not exactly the bytes");
    if (strcmp(how, "flip") == 0) {
        int fd = open(path, O_RDWR);
        uint8_t byte;
        cr_assert_eq(pread(fd, &byte, 1, st.st_size - 100), 1);
        byte ^= 0x10;
        cr_assert_eq(pwrite(fd, &byte, 1, st.st_size - 100), 1);
        close(fd);
    } else if (strcmp(how, "header") == 0) {
        int fd = open(header, O_RDWR);
        uint8_t byte = 0x7f;
        cr_assert_eq(pwrite(fd, &byte, 1, 20), 1);
        close(fd);
    } else if (strcmp(how, "header-cut") == 0) {
        cr_assert_eq(truncate(header, 30), 0);
    } else if (strcmp(how, "truncate") == 0) {
        cr_assert_eq(truncate(path, st.st_size / 2), 0);
    } else if (strcmp(how, "empty") == 0) {
        cr_assert_eq(truncate(path, 0), 0);
    } else if (strcmp(how, "extend") == 0) {
        int fd = open(path, O_WRONLY | O_APPEND);
        cr_assert_eq(write(fd, "more", 4), 4);
        close(fd);
    }
    uint8_t *got = NULL;
    size_t size;
    zm_err_clear(&err);
    cr_expect_eq(zm_disk_get(disk, "s", "k", &got, &size, &err), -EBADMSG, "%s: served", how);
    cr_expect_null(got);
    cr_expect(strstr(err.reason, "removed") != NULL, "%s: %s", how, err.reason);
    cr_expect_neq(access(header, F_OK), 0, "%s: the damaged entry is still there", how);
    if (strncmp(how, "header", 6) != 0)
        cr_expect_neq(access(path, F_OK), 0, "%s: the damaged payload is still there", how);
    zm_disk_stats stats;
    zm_disk_get_stats(disk, &stats);
    cr_expect_eq(stats.damaged, 1);
    /* Rebuilt: put again, read again. */
    cr_assert_eq(zm_disk_put(disk, "s", "k", value, sizeof value, &err), 0, "%s", err.reason);
    cr_assert_eq(zm_disk_get(disk, "s", "k", &got, &size, &err), 0, "%s", err.reason);
    cr_expect(size == sizeof value && memcmp(got, value, size) == 0);
    free(got);
    zm_disk_close(disk);
    remove_tree(root);
}

Test(disk, a_flipped_byte_is_never_served) { damage_and_check("flip"); }
Test(disk, a_damaged_header_is_never_served) { damage_and_check("header"); }
Test(disk, a_cut_header_is_never_served) { damage_and_check("header-cut"); }
Test(disk, a_truncated_entry_is_never_served) { damage_and_check("truncate"); }
Test(disk, an_empty_file_is_never_served) { damage_and_check("empty"); }
Test(disk, an_extended_entry_is_never_served) { damage_and_check("extend"); }

Test(disk, a_crash_leaves_no_entry_and_its_leftovers_go)
{
    make_root();
    zm_disk *disk;
    zm_err err = {0};
    cr_assert_eq(zm_disk_open(root, 1 << 20, &disk, &err), 0, "%s", err.reason);
    cr_assert_eq(zm_disk_put(disk, "s", "k", "abc", 3, &err), 0, "%s", err.reason);
    char path[512], leftover[600];
    cr_assert_eq(only_file(root, ".entry", path, sizeof path), 1);
    zm_disk_close(disk);
    /* A write cut short: a temporary file beside the entries, named for a
     * process that is gone. */
    *strrchr(path, '/') = '\0';
    pid_t gone = fork();
    cr_assert_geq(gone, 0);
    if (gone == 0)
        _exit(0);
    waitpid(gone, NULL, 0);
    snprintf(leftover, sizeof leftover, "%s/tmp.%d.1", path, (int)gone);
    FILE *f = fopen(leftover, "w");
    fputs("half an entry", f);
    fclose(f);
    /* One a live process (another mount sharing the directory) is writing. */
    char writing[600];
    snprintf(writing, sizeof writing, "%s/tmp.%d.7", path, (int)getppid());
    f = fopen(writing, "w");
    fputs("being written", f);
    fclose(f);
    cr_assert_eq(zm_disk_open(root, 1 << 20, &disk, &err), 0, "%s", err.reason);
    cr_expect_neq(access(leftover, F_OK), 0, "the leftover was not removed");
    cr_expect_eq(access(writing, F_OK), 0, "a live process's temporary file was removed");
    uint8_t *got;
    size_t size;
    cr_expect_eq(zm_disk_get(disk, "s", "k", &got, &size, &err), 0, "%s", err.reason);
    free(got);
    zm_disk_close(disk);
    remove_tree(root);
}

Test(disk, another_format_is_ignored_and_evicted_first)
{
    make_root();
    /* Another format's entry lies where every format files them:
     * v<n>/<space hash>/<key hash>.entry. */
    char old[128];
    snprintf(old, sizeof old, "%s/v0", root);
    cr_assert_eq(mkdir(old, 0700), 0);
    snprintf(old, sizeof old, "%s/v0/00000000000000ff", root);
    cr_assert_eq(mkdir(old, 0700), 0);
    char old_entry[200];
    snprintf(old_entry, sizeof old_entry, "%s/0123456789abcdef.entry", old);
    FILE *f = fopen(old_entry, "w");
    for (int i = 0; i < 3000; i++)
        fputc('x', f);
    fclose(f);
    zm_disk *disk;
    zm_err err = {0};
    cr_assert_eq(zm_disk_open(root, 8000, &disk, &err), 0, "%s", err.reason);
    uint8_t value[2000];
    fill(value, sizeof value, 3);
    cr_assert_eq(zm_disk_put(disk, "s", "a", value, sizeof value, &err), 0, "%s", err.reason);
    cr_assert_eq(zm_disk_put(disk, "s", "b", value, sizeof value, &err), 0, "%s", err.reason);
    /* Past the bound: the old format's file goes before either entry. */
    cr_assert_eq(zm_disk_put(disk, "s", "c", value, sizeof value, &err), 0, "%s", err.reason);
    cr_expect_neq(access(old_entry, F_OK), 0, "the other format's entry is still there");
    uint8_t *got;
    size_t size;
    cr_expect_eq(zm_disk_get(disk, "s", "c", &got, &size, &err), 0, "%s", err.reason);
    free(got);
    zm_disk_close(disk);
    remove_tree(root);
}

Test(disk, the_bound_holds_least_recently_used_out_first)
{
    make_root();
    zm_disk *disk;
    zm_err err = {0};
    uint64_t bound = 64 * 1024;
    cr_assert_eq(zm_disk_open(root, bound, &disk, &err), 0, "%s", err.reason);
    uint8_t value[4000];
    char key[32];
    for (int i = 0; i < 60; i++) {
        fill(value, sizeof value, (unsigned)i);
        snprintf(key, sizeof key, "entry-%d", i);
        cr_assert_eq(zm_disk_put(disk, "s", key, value, sizeof value, &err), 0, "%s", err.reason);
        if (i == 1) {
            /* entry-0 is used again: it outlives entry-1 and later ones. */
            struct timespec pause = {0, 20 * 1000 * 1000};
            nanosleep(&pause, NULL);
        }
        if (i >= 1) {
            uint8_t *got;
            size_t size;
            if (zm_disk_get(disk, "s", "entry-0", &got, &size, &err) == 0)
                free(got);
        }
        cr_assert_leq(bytes_under(root), bound, "past the bound after %d entries", i + 1);
    }
    uint8_t *got;
    size_t size;
    cr_expect_eq(zm_disk_get(disk, "s", "entry-0", &got, &size, &err), 0, "the entry in use went");
    free(got);
    cr_expect_eq(zm_disk_get(disk, "s", "entry-1", &got, &size, &err), -ENOENT,
                 "an old unused entry stayed");
    cr_expect_eq(zm_disk_get(disk, "s", "entry-59", &got, &size, &err), 0, "the newest went");
    free(got);
    zm_disk_stats stats;
    zm_disk_get_stats(disk, &stats);
    cr_expect_gt(stats.evictions, 0);
    cr_expect_leq(stats.bytes_held, bound);
    /* An entry larger than the bound is refused. */
    uint8_t *big = calloc(1, bound);
    cr_expect_eq(zm_disk_put(disk, "s", "big", big, bound, &err), -EFBIG);
    free(big);
    zm_disk_close(disk);
    remove_tree(root);
}

Test(disk, refuses_a_relative_or_unwritable_directory)
{
    zm_disk *disk;
    zm_err err = {0};
    cr_expect_eq(zm_disk_open("relative/dir", 1 << 20, &disk, &err), -EINVAL);
    cr_expect(strstr(err.reason, "absolute") != NULL, "%s", err.reason);
    zm_err_clear(&err);
    cr_expect_neq(zm_disk_open("/proc/zarrmount-cache", 1 << 20, &disk, &err), 0);
    cr_expect(strstr(err.reason, "/proc/zarrmount-cache") != NULL, "%s", err.reason);
}

struct job {
    zm_disk *disk;
    int thread;
    int failures;
};

static void *hammer(void *context)
{
    struct job *j = context;
    uint8_t value[2048];
    char key[32];
    for (int i = 0; i < 200; i++) {
        int which = (i * 7 + j->thread) % 20;
        snprintf(key, sizeof key, "shared-%d", which);
        fill(value, sizeof value, (unsigned)which);
        zm_err err;
        zm_err_clear(&err);
        if (i % 3 == 0) {
            if (zm_disk_put(j->disk, "s", key, value, sizeof value, &err) != 0)
                j->failures++;
        } else {
            uint8_t *got;
            size_t size;
            int rc = zm_disk_get(j->disk, "s", key, &got, &size, &err);
            if (rc == 0) {
                if (size != sizeof value || memcmp(got, value, size) != 0)
                    j->failures++;
                free(got);
            } else if (rc != -ENOENT) {
                j->failures++;
            }
        }
    }
    return NULL;
}

Test(disk, threads_share_it)
{
    make_root();
    zm_disk *disk;
    zm_err err = {0};
    cr_assert_eq(zm_disk_open(root, 32 * 1024, &disk, &err), 0, "%s", err.reason);
    pthread_t threads[6];
    struct job jobs[6];
    for (int t = 0; t < 6; t++) {
        jobs[t] = (struct job){disk, t, 0};
        cr_assert_eq(pthread_create(&threads[t], NULL, hammer, &jobs[t]), 0);
    }
    for (int t = 0; t < 6; t++) {
        pthread_join(threads[t], NULL);
        cr_expect_eq(jobs[t].failures, 0, "thread %d", t);
    }
    cr_expect_leq(bytes_under(root), 32 * 1024);
    zm_disk_stats stats;
    zm_disk_get_stats(disk, &stats);
    cr_expect_eq(stats.damaged, 0);
    zm_disk_close(disk);
    remove_tree(root);
}

static void count_headless(void *context, const char *path, const char *name, const struct stat *st)
{
    (void)st;
    size_t length = strlen(name);
    if (length == 38 && strcmp(name + 33, ".data") == 0) {
        char header[600];
        snprintf(header, sizeof header, "%.*s/%.16s.entry", (int)(strrchr(path, '/') - path), path, name);
        *(int *)context += access(header, F_OK) != 0;
    }
}

/* Payloads with no header beside them: eviction and replacement leave no
 * half entry. */
static int payloads_without_header(const char *directory)
{
    int found = 0;
    each_file(directory, count_headless, &found);
    return found;
}

Test(disk, eviction_takes_header_and_payload_together)
{
    make_root();
    zm_disk *disk;
    zm_err err = {0};
    cr_assert_eq(zm_disk_open(root, 40 * 1024, &disk, &err), 0, "%s", err.reason);
    uint8_t value[3000];
    char key[32];
    for (int i = 0; i < 50; i++) {
        fill(value, sizeof value, (unsigned)i);
        snprintf(key, sizeof key, "k-%d", i);
        cr_assert_eq(zm_disk_put(disk, "s", key, value, sizeof value, &err), 0, "%s", err.reason);
    }
    cr_expect_eq(payloads_without_header(root), 0);
    cr_expect_leq(bytes_under(root), 40 * 1024);
    zm_disk_stats stats;
    zm_disk_get_stats(disk, &stats);
    cr_expect_gt(stats.evictions, 0);
    cr_expect_eq(stats.bytes_held, bytes_under(root), "counted %llu, on disk %llu",
                 (unsigned long long)stats.bytes_held, (unsigned long long)bytes_under(root));
    zm_disk_close(disk);
    remove_tree(root);
}

Test(disk, a_replaced_entry_serves_only_its_new_bytes)
{
    make_root();
    zm_disk *disk;
    zm_err err = {0};
    cr_assert_eq(zm_disk_open(root, 1 << 20, &disk, &err), 0, "%s", err.reason);
    uint8_t first[2000], second[2500];
    fill(first, sizeof first, 1);
    fill(second, sizeof second, 2);
    cr_assert_eq(zm_disk_put(disk, "s", "k", first, sizeof first, &err), 0, "%s", err.reason);
    /* A reader holding the old bytes keeps them. */
    int held;
    uint64_t held_size;
    cr_assert_eq(zm_disk_open_entry(disk, "s", "k", &held, &held_size, &err), 0, "%s", err.reason);
    cr_assert_eq(zm_disk_put(disk, "s", "k", second, sizeof second, &err), 0, "%s", err.reason);
    uint8_t *got;
    size_t size;
    cr_assert_eq(zm_disk_get(disk, "s", "k", &got, &size, &err), 0, "%s", err.reason);
    cr_expect(size == sizeof second && memcmp(got, second, size) == 0);
    free(got);
    uint8_t old[2000];
    cr_expect_eq(held_size, sizeof first);
    cr_expect_eq(pread(held, old, sizeof old, 0), (ssize_t)sizeof old);
    cr_expect(memcmp(old, first, sizeof old) == 0, "the held file changed under its reader");
    close(held);
    char path[512];
    cr_expect_eq(only_file(root, ".data", path, sizeof path), 1, "the old payload is still there");
    zm_disk_stats stats;
    zm_disk_get_stats(disk, &stats);
    cr_expect_eq(stats.entries, 1);
    cr_expect_eq(stats.bytes_held, bytes_under(root));
    zm_disk_close(disk);
    remove_tree(root);
}

Test(disk, open_entry_lends_exactly_the_bytes_checked)
{
    make_root();
    zm_disk *disk;
    zm_err err = {0};
    cr_assert_eq(zm_disk_open(root, 1 << 20, &disk, &err), 0, "%s", err.reason);
    uint8_t value[70000];
    fill(value, sizeof value, 4);
    cr_assert_eq(zm_disk_put(disk, "s", "k", value, sizeof value, &err), 0, "%s", err.reason);
    int fd;
    uint64_t size;
    cr_assert_eq(zm_disk_open_entry(disk, "s", "k", &fd, &size, &err), 0, "%s", err.reason);
    cr_expect_eq(size, sizeof value);
    struct stat st;
    cr_assert_eq(fstat(fd, &st), 0);
    cr_expect_eq(st.st_size, (off_t)sizeof value, "the file is not exactly the bytes");
    uint8_t *back = malloc(sizeof value + 1);
    cr_expect_eq(pread(fd, back, sizeof value + 1, 0), (ssize_t)sizeof value);
    cr_expect(memcmp(back, value, sizeof value) == 0);
    free(back);
    cr_expect_eq(fcntl(fd, F_GETFL) & O_ACCMODE, O_RDONLY);
    close(fd);
    /* Missing, and damaged: the damage is found at open, never lent. */
    cr_expect_eq(zm_disk_open_entry(disk, "s", "other", &fd, &size, &err), -ENOENT);
    cr_expect_eq(fd, -1);
    char path[512];
    cr_assert_eq(only_file(root, ".data", path, sizeof path), 1);
    int w = open(path, O_RDWR);
    uint8_t byte = 0;
    cr_assert_eq(pwrite(w, &byte, 1, 12345), 1);
    close(w);
    zm_err_clear(&err);
    cr_expect_eq(zm_disk_open_entry(disk, "s", "k", &fd, &size, &err), -EBADMSG);
    cr_expect_eq(fd, -1);
    cr_expect(strstr(err.reason, "damaged") != NULL, "%s", err.reason);
    cr_expect_neq(access(path, F_OK), 0);
    /* An empty entry lends an empty file. */
    cr_assert_eq(zm_disk_put(disk, "s", "empty", "", 0, &err), 0, "%s", err.reason);
    cr_assert_eq(zm_disk_open_entry(disk, "s", "empty", &fd, &size, &err), 0, "%s", err.reason);
    cr_expect_eq(size, 0);
    close(fd);
    cr_expect(zm_disk_has_space(disk, "s"));
    cr_expect_not(zm_disk_has_space(disk, "nothing here"));
    zm_disk_close(disk);
    remove_tree(root);
}

/* tests/data/disk-cache-v1 was written by zarrmount's format 1 (commit
 * 8c61bdb, the last to write it): space "released-space", keys
 * "released|key|1" (3000 bytes of fill(.., 7)) and "released|key|empty". */
Test(disk, entries_of_format_1_are_read_and_moved)
{
    make_root();
    const char *source_root = getenv("ZM_SOURCE_ROOT");
    cr_assert_not_null(source_root, "ZM_SOURCE_ROOT is not set");
    char command[1024];
    snprintf(command, sizeof command, "cp -r '%s/tests/data/disk-cache-v1/v1' '%s/'", source_root, root);
    cr_assert_eq(system(command), 0);
    zm_disk *disk;
    zm_err err = {0};
    cr_assert_eq(zm_disk_open(root, 1 << 20, &disk, &err), 0, "%s", err.reason);
    zm_disk_stats stats;
    zm_disk_get_stats(disk, &stats);
    cr_expect_eq(stats.entries, 2, "format 1 entries are counted");
    uint8_t expected[3000];
    fill(expected, sizeof expected, 7);
    uint8_t *got;
    size_t size;
    cr_assert_eq(zm_disk_get(disk, "released-space", "released|key|1", &got, &size, &err), 0, "%s",
                 err.reason);
    cr_expect(size == sizeof expected && memcmp(got, expected, size) == 0);
    free(got);
    int fd;
    uint64_t length;
    cr_assert_eq(zm_disk_open_entry(disk, "released-space", "released|key|empty", &fd, &length, &err), 0,
                 "%s", err.reason);
    cr_expect_eq(length, 0);
    close(fd);
    zm_disk_get_stats(disk, &stats);
    cr_expect_eq(stats.migrated, 2);
    cr_expect_eq(stats.entries, 2);
    cr_expect_eq(stats.bytes_held, bytes_under(root));
    char v1[128], path[512];
    snprintf(v1, sizeof v1, "%s/v1", root);
    cr_expect_eq(only_file(v1, ".entry", path, sizeof path), 0, "format 1 files were left");
    zm_disk_close(disk);
    /* Moved for good: a new open reads them in format 2. */
    cr_assert_eq(zm_disk_open(root, 1 << 20, &disk, &err), 0, "%s", err.reason);
    cr_assert_eq(zm_disk_get(disk, "released-space", "released|key|1", &got, &size, &err), 0, "%s",
                 err.reason);
    cr_expect(size == sizeof expected && memcmp(got, expected, size) == 0);
    free(got);
    zm_disk_get_stats(disk, &stats);
    cr_expect_eq(stats.migrated, 0);
    zm_disk_close(disk);
    remove_tree(root);
}

Test(disk, a_damaged_format_1_entry_is_never_served)
{
    make_root();
    const char *source_root = getenv("ZM_SOURCE_ROOT");
    cr_assert_not_null(source_root, "ZM_SOURCE_ROOT is not set");
    char command[1024];
    snprintf(command, sizeof command, "cp -r '%s/tests/data/disk-cache-v1/v1' '%s/'", source_root, root);
    cr_assert_eq(system(command), 0);
    char v1[128], path[512];
    snprintf(v1, sizeof v1, "%s/v1/086643ae35e901a4/e977145fbe1221b5.entry", root);
    int fd = open(v1, O_RDWR);
    cr_assert_geq(fd, 0, "the fixture's layout changed");
    uint8_t byte = 0xff;
    cr_assert_eq(pwrite(fd, &byte, 1, 2000), 1);
    close(fd);
    zm_disk *disk;
    zm_err err = {0};
    cr_assert_eq(zm_disk_open(root, 1 << 20, &disk, &err), 0, "%s", err.reason);
    uint8_t *got = NULL;
    size_t size;
    cr_expect_eq(zm_disk_get(disk, "released-space", "released|key|1", &got, &size, &err), -ENOENT);
    cr_expect_null(got);
    cr_expect_neq(access(v1, F_OK), 0, "the damaged format 1 entry is still there");
    cr_expect_eq(only_file(root, ".data", path, sizeof path), 0);
    zm_disk_close(disk);
    remove_tree(root);
}

Test(disk, an_old_payload_nothing_names_goes_at_open)
{
    make_root();
    zm_disk *disk;
    zm_err err = {0};
    cr_assert_eq(zm_disk_open(root, 1 << 20, &disk, &err), 0, "%s", err.reason);
    cr_assert_eq(zm_disk_put(disk, "s", "k", "abc", 3, &err), 0, "%s", err.reason);
    zm_disk_close(disk);
    char header[512], directory[512], old[600], young[600];
    cr_assert_eq(only_file(root, ".entry", header, sizeof header), 1);
    snprintf(directory, sizeof directory, "%s", header);
    *strrchr(directory, '/') = '\0';
    /* A crash between a payload's rename and its header's. */
    snprintf(old, sizeof old, "%s/00000000000000aa-0123456789abcdef.data", directory);
    snprintf(young, sizeof young, "%s/00000000000000bb-0123456789abcdef.data", directory);
    FILE *f = fopen(old, "w");
    fputs("old", f);
    fclose(f);
    f = fopen(young, "w");
    fputs("young", f);
    fclose(f);
    struct timespec times[2] = {{time(NULL) - 3600, 0}, {time(NULL) - 3600, 0}};
    cr_assert_eq(utimensat(AT_FDCWD, old, times, 0), 0);
    cr_assert_eq(zm_disk_open(root, 1 << 20, &disk, &err), 0, "%s", err.reason);
    cr_expect_neq(access(old, F_OK), 0, "an hour-old payload with no header stayed");
    cr_expect_eq(access(young, F_OK), 0, "a payload being filed (its header to come) went");
    uint8_t *got;
    size_t size;
    cr_expect_eq(zm_disk_get(disk, "s", "k", &got, &size, &err), 0, "%s", err.reason);
    free(got);
    zm_disk_close(disk);
    remove_tree(root);
}

/* ---- Trust: a cache only where it is private --------------------------------------- */

#define NOBODY 65534

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "cannot write %s", path);
    fputs(text, f);
    fclose(f);
}

/* The whole of a small file ("" if it cannot be read). */
static const char *text_of(const char *path, char *out, size_t size)
{
    out[0] = '\0';
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return out;
    size_t n = fread(out, 1, size - 1, f);
    out[n] = '\0';
    fclose(f);
    return out;
}

static int exists_nofollow(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

/* The names the cache gives space's directory and key's header. */
static void hashed_names(const char *space, const char *key, char space_name[17], char entry[24])
{
    snprintf(space_name, 17, "%016llx", (unsigned long long)zm_cache_key(space, strlen(space)));
    snprintf(entry, 24, "%016llx.entry", (unsigned long long)zm_cache_key(key, strlen(key)));
}

static void need_root(void)
{
    if (geteuid() != 0)
        cr_skip_test("needs root (chown to another user)");
}

/* Opening directory is refused (-EPERM) with a reason naming it and holding
 * why; nothing is made in it. */
static void refused(const char *directory, const char *why)
{
    zm_disk *disk = NULL;
    zm_err err = {0};
    cr_expect_eq(zm_disk_open(directory, 1 << 20, &disk, &err), -EPERM, "%s: opened (%s)",
                 directory, err.reason);
    cr_expect_null(disk);
    cr_expect(strstr(err.reason, directory) != NULL, "the reason does not name %s: %s", directory,
              err.reason);
    cr_expect(strstr(err.reason, why) != NULL, "the reason does not say \"%s\": %s", why,
              err.reason);
    cr_expect(strchr(err.reason, '\n') == NULL, "not one line: %s", err.reason);
    char v2[600];
    snprintf(v2, sizeof v2, "%s/v2", directory);
    cr_expect_not(exists_nofollow(v2), "%s: written through (%s was made)", directory, v2);
    if (disk != NULL)
        zm_disk_close(disk);
}

static void make_mode(const char *path, mode_t mode)
{
    cr_assert_eq(mkdir(path, 0700), 0, "mkdir %s: %s", path, strerror(errno));
    cr_assert_eq(chmod(path, mode), 0);
}

Test(trust, a_directory_others_may_write_is_refused)
{
    make_root();
    char path[256];
    static const struct {
        mode_t mode;
        const char *why;
    } modes[] = {{0777, "writable by its group and by others"},
                 {0770, "writable by its group (mode 0770)"},
                 {0757, "writable by others (mode 0757)"},
                 {01777, "writable by its group and by others (mode 1777)"}};
    for (size_t i = 0; i < sizeof modes / sizeof *modes; i++) {
        snprintf(path, sizeof path, "%s/mode-%04o", root, (unsigned)modes[i].mode);
        make_mode(path, modes[i].mode);
        /* Someone else's file there is left as it was. */
        char theirs[300], back[64];
        snprintf(theirs, sizeof theirs, "%s/theirs", path);
        write_text(theirs, "theirs");
        refused(path, modes[i].why);
        cr_expect_str_eq(text_of(theirs, back, sizeof back), "theirs");
    }
    remove_tree(root);
}

Test(trust, a_directory_of_another_user_is_refused)
{
    need_root();
    make_root();
    char path[256];
    snprintf(path, sizeof path, "%s/nobodys", root);
    make_mode(path, 0700);
    cr_assert_eq(chown(path, NOBODY, NOBODY), 0);
    refused(path, "owned by uid 65534, not by uid 0");
    remove_tree(root);
}

Test(trust, a_symbolic_link_is_refused_even_to_a_good_directory)
{
    make_root();
    char good[256], link[256];
    snprintf(good, sizeof good, "%s/good", root);
    snprintf(link, sizeof link, "%s/link", root);
    make_mode(good, 0700);
    cr_assert_eq(symlink(good, link), 0);
    refused(link, "is a symbolic link");
    char v2[300];
    snprintf(v2, sizeof v2, "%s/v2", good);
    cr_expect_not(exists_nofollow(v2), "written through the link");
    /* The good directory itself is fine. */
    zm_disk *disk;
    zm_err err = {0};
    cr_expect_eq(zm_disk_open(good, 1 << 20, &disk, &err), 0, "%s", err.reason);
    zm_disk_close(disk);
    remove_tree(root);
}

Test(trust, a_directory_above_that_others_may_change_is_refused)
{
    make_root();
    char above[256], path[300];
    /* Writable by others and not sticky: anyone could rename the cache
     * away and put their own in its place. Nothing is made in it. */
    snprintf(above, sizeof above, "%s/shared", root);
    make_mode(above, 0777);
    snprintf(path, sizeof path, "%s/cache", above);
    refused(path, "above it is writable by others and not sticky");
    cr_expect_not(exists_nofollow(path), "the cache directory was made in %s", above);
    /* Writable by its group, not sticky. */
    snprintf(above, sizeof above, "%s/group", root);
    make_mode(above, 0770);
    snprintf(path, sizeof path, "%s/cache", above);
    make_mode(path, 0700);
    refused(path, "above it is writable by its group and not sticky");
    remove_tree(root);
}

Test(trust, a_directory_above_of_another_user_is_refused)
{
    need_root();
    make_root();
    char above[256], path[300];
    snprintf(above, sizeof above, "%s/theirs", root);
    make_mode(above, 0755);
    snprintf(path, sizeof path, "%s/cache", above);
    make_mode(path, 0700);
    cr_assert_eq(chown(above, NOBODY, NOBODY), 0);
    refused(path, "owned by uid 65534, neither root nor uid 0");
    /* A link above owned by another user (in a sticky directory, as /tmp) is
     * not followed either: its owner chose where it points. */
    char sticky[256], link[300], target[300];
    snprintf(sticky, sizeof sticky, "%s/sticky", root);
    make_mode(sticky, 01777);
    snprintf(target, sizeof target, "%s/target", root);
    make_mode(target, 0755);
    snprintf(link, sizeof link, "%s/link", sticky);
    cr_assert_eq(symlink(target, link), 0);
    cr_assert_eq(lchown(link, NOBODY, NOBODY), 0);
    snprintf(path, sizeof path, "%s/cache", link);
    refused(path, "above it is a symbolic link owned by uid 65534");
    snprintf(path, sizeof path, "%s/cache", target);
    cr_expect_not(exists_nofollow(path), "made through another user's link");
    remove_tree(root);
}

Test(trust, a_sticky_directory_above_and_links_of_root_are_fine)
{
    make_root();
    char sticky[256], path[300];
    /* As /tmp: writable by everyone, but sticky. */
    snprintf(sticky, sizeof sticky, "%s/tmp-like", root);
    make_mode(sticky, 01777);
    snprintf(path, sizeof path, "%s/cache", sticky);
    zm_disk *disk;
    zm_err err = {0};
    cr_assert_eq(zm_disk_open(path, 1 << 20, &disk, &err), 0, "%s", err.reason);
    cr_assert_eq(zm_disk_put(disk, "s", "k", "abc", 3, &err), 0, "%s", err.reason);
    zm_disk_close(disk);
    /* A link above made by the user (or root), as /home -> /usr/home. */
    char real[256], link[256];
    snprintf(real, sizeof real, "%s/real", root);
    snprintf(link, sizeof link, "%s/linked", root);
    make_mode(real, 0755);
    cr_assert_eq(symlink(real, link), 0);
    snprintf(path, sizeof path, "%s/a/cache", link);
    cr_assert_eq(zm_disk_open(path, 1 << 20, &disk, &err), 0, "%s", err.reason);
    cr_assert_eq(zm_disk_put(disk, "s", "k", "abc", 3, &err), 0, "%s", err.reason);
    zm_disk_close(disk);
    snprintf(path, sizeof path, "%s/a/cache/v2", real);
    struct stat st;
    cr_expect_eq(lstat(path, &st), 0, "not filed in the link's target");
    remove_tree(root);
}

Test(trust, directories_made_are_0700_whatever_the_umask)
{
    make_root();
    mode_t previous = umask(0);
    char path[256];
    snprintf(path, sizeof path, "%s/a/b/cache", root);
    zm_disk *disk;
    zm_err err = {0};
    cr_assert_eq(zm_disk_open(path, 1 << 20, &disk, &err), 0, "%s", err.reason);
    cr_assert_eq(zm_disk_put(disk, "s", "k", "abc", 3, &err), 0, "%s", err.reason);
    zm_disk_close(disk);
    umask(previous);
    char space_name[17], entry[24];
    hashed_names("s", "k", space_name, entry);
    const char *made[] = {"a", "a/b", "a/b/cache", "a/b/cache/v2", NULL};
    for (int i = 0; made[i] != NULL; i++) {
        char each[400];
        snprintf(each, sizeof each, "%s/%s", root, made[i]);
        struct stat st;
        cr_assert_eq(lstat(each, &st), 0, "%s", each);
        cr_expect_eq(st.st_mode & 07777, 0700, "%s: mode %04o", each,
                     (unsigned)(st.st_mode & 07777));
        cr_expect_eq(st.st_uid, geteuid());
    }
    char space[400], file[500];
    snprintf(space, sizeof space, "%s/a/b/cache/v2/%s", root, space_name);
    struct stat st;
    cr_assert_eq(lstat(space, &st), 0);
    cr_expect_eq(st.st_mode & 07777, 0700, "space directory: mode %04o",
                 (unsigned)(st.st_mode & 07777));
    snprintf(file, sizeof file, "%s/%s", space, entry);
    cr_assert_eq(lstat(file, &st), 0);
    cr_expect_eq(st.st_mode & 077, 0, "an entry readable by others: mode %04o",
                 (unsigned)(st.st_mode & 07777));
    remove_tree(root);
}

Test(trust, paths_with_dot_components_are_refused)
{
    zm_disk *disk;
    zm_err err = {0};
    cr_expect_eq(zm_disk_open("/tmp/../tmp/zm-cache", 1 << 20, &disk, &err), -EINVAL);
    cr_expect(strstr(err.reason, "..") != NULL, "%s", err.reason);
    cr_expect_eq(zm_disk_open("/tmp/./zm-cache", 1 << 20, &disk, &err), -EINVAL);
}

/* A victim: a directory of files that are not the cache's, outside it. */
struct victim {
    char directory[256], file[300], entry_like[300];
};

static void make_victim(struct victim *v)
{
    snprintf(v->directory, sizeof v->directory, "%s/victim", root);
    make_mode(v->directory, 0755);
    snprintf(v->file, sizeof v->file, "%s/secret", v->directory);
    write_text(v->file, "the victim's secret");
    snprintf(v->entry_like, sizeof v->entry_like, "%s/0123456789abcdef.entry", v->directory);
    write_text(v->entry_like, "named like an entry, but the victim's");
}

static void victim_untouched(const struct victim *v)
{
    char back[128];
    cr_expect_str_eq(text_of(v->file, back, sizeof back), "the victim's secret",
                     "the victim's file changed");
    cr_expect_str_eq(text_of(v->entry_like, back, sizeof back),
                     "named like an entry, but the victim's",
                     "the victim's entry-named file changed");
    int count = 0;
    DIR *d = opendir(v->directory);
    cr_assert_not_null(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        count += e->d_name[0] != '.';
    closedir(d);
    cr_expect_eq(count, 2, "files were added to or removed from the victim's directory (%d)",
                 count);
}

Test(trust, foreign_files_survive_eviction_and_the_census_and_are_never_served)
{
    make_root();
    struct victim victim;
    make_victim(&victim);
    char cache[256];
    snprintf(cache, sizeof cache, "%s/cache", root);
    zm_disk *disk;
    zm_err err = {0};
    uint64_t bound = 16 * 1024;
    cr_assert_eq(zm_disk_open(cache, bound, &disk, &err), 0, "%s", err.reason);
    cr_assert_eq(zm_disk_put(disk, "s", "first", "abc", 3, &err), 0, "%s", err.reason);
    zm_disk_close(disk);

    char space_name[17], entry[24], bait_space[17], bait_entry[24];
    hashed_names("s", "k", space_name, entry);
    hashed_names("bait", "k", bait_space, bait_entry);
    char paths[16][600];
    int count = 0;
    /* Files with other names, wherever they are. */
    snprintf(paths[count], 600, "%s/notes.txt", cache);
    write_text(paths[count++], "notes");
    snprintf(paths[count], 600, "%s/v2/README", cache);
    write_text(paths[count++], "readme");
    const char *names[] = {"garbage.entry",
                           "tmp.",
                           "tmp.12",
                           "tmp.x.1",
                           "tmp.1.2.3",
                           "tmp.-5.1",
                           "0123456789ABCDEF.entry",
                           "0123456789abcdef-zz23456789abcdef.data"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        snprintf(paths[count], 600, "%s/v2/%s/%s", cache, space_name, names[i]);
        write_text(paths[count++], "not the cache's");
    }
    /* Someone's subdirectory of files, with a name like a space's, and
     * another with a name like an entry's inside a space. */
    char theirs[600];
    snprintf(theirs, sizeof theirs, "%s/v2/00000000000000aa", cache);
    cr_assert_eq(mkdir(theirs, 0700), 0);
    snprintf(theirs, sizeof theirs, "%s/v2/someone", cache);
    cr_assert_eq(mkdir(theirs, 0700), 0);
    snprintf(paths[count], 600, "%s/v2/someone/0123456789abcdef.entry", cache);
    write_text(paths[count++], "someone's");
    snprintf(theirs, sizeof theirs, "%s/v2/%s/fedcba9876543210.entry", cache, space_name);
    cr_assert_eq(mkdir(theirs, 0700), 0);
    snprintf(paths[count], 600, "%s/data", theirs);
    write_text(paths[count++], "inside a directory named like an entry");
    /* A symbolic link named like the entry of ("s", "k"), and one named like
     * a payload, each pointing at the victim's file. */
    char link[600], data_link[600];
    snprintf(link, sizeof link, "%s/v2/%s/%s", cache, space_name, entry);
    cr_assert_eq(symlink(victim.file, link), 0);
    snprintf(data_link, sizeof data_link, "%s/v2/%s/%.16s-0000000000000001.data", cache, space_name,
             entry);
    cr_assert_eq(symlink(victim.file, data_link), 0);
    /* A space directory ("bait") that is a link to the victim's directory,
     * and a FIFO named like an entry (reading it would block). */
    char space_link[600], fifo[600];
    snprintf(space_link, sizeof space_link, "%s/v2/%s", cache, bait_space);
    cr_assert_eq(symlink(victim.directory, space_link), 0);
    hashed_names("s", "fifo", space_name, entry);
    snprintf(fifo, sizeof fifo, "%s/v2/%s/%s", cache, space_name, entry);
    cr_assert_eq(mkfifo(fifo, 0600), 0);

    /* The census. */
    cr_assert_eq(zm_disk_open(cache, bound, &disk, &err), 0, "%s", err.reason);
    char example[256];
    uint64_t foreign = zm_disk_foreign(disk, example, sizeof example);
    cr_expect_geq(foreign, (uint64_t)count, "foreign files counted: %llu of %d",
                  (unsigned long long)foreign, count);
    cr_expect(strncmp(example, cache, strlen(cache)) == 0, "example: %s", example);
    zm_disk_stats stats;
    zm_disk_get_stats(disk, &stats);
    cr_expect_eq(stats.entries, 1, "foreign files counted as entries: %llu",
                 (unsigned long long)stats.entries);
    cr_expect_eq(stats.foreign, foreign);
    /* Never served: through the link named like the entry, through the
     * linked space, from the FIFO. */
    uint8_t *got = NULL;
    size_t size;
    int fd = -1;
    uint64_t length;
    cr_expect_eq(zm_disk_get(disk, "s", "k", &got, &size, &err), -ENOENT, "served through a link");
    cr_expect_null(got);
    cr_expect_eq(zm_disk_open_entry(disk, "s", "k", &fd, &length, &err), -ENOENT);
    cr_expect_eq(fd, -1);
    cr_expect_eq(zm_disk_get(disk, "bait", "k", &got, &size, &err), -ENOENT,
                 "served a linked space");
    cr_expect_eq(zm_disk_get(disk, "s", "fifo", &got, &size, &err), -ENOENT);
    cr_expect_eq(zm_disk_size(disk, "s", "k", &length), -ENOENT);
    cr_expect_not(zm_disk_has_space(disk, "bait"));
    /* Never written through: the link is not replaced, the linked space
     * not filled. */
    zm_err_clear(&err);
    cr_expect_eq(zm_disk_put(disk, "s", "k", "mine", 4, &err), -EEXIST);
    cr_expect(strstr(err.reason, "left alone") != NULL, "%s", err.reason);
    cr_expect_eq(zm_disk_put(disk, "bait", "k", "mine", 4, &err), -EEXIST);
    cr_expect(strstr(err.reason, "left alone") != NULL, "%s", err.reason);
    /* Eviction under a tiny bound, many times over. */
    uint8_t value[3000];
    char key[32];
    for (int i = 0; i < 40; i++) {
        fill(value, sizeof value, (unsigned)i);
        snprintf(key, sizeof key, "entry-%d", i);
        cr_assert_eq(zm_disk_put(disk, "s", key, value, sizeof value, &err), 0, "%s", err.reason);
    }
    zm_disk_get_stats(disk, &stats);
    cr_expect_gt(stats.evictions, 0);
    zm_disk_close(disk);
    /* And the census again. */
    cr_assert_eq(zm_disk_open(cache, bound, &disk, &err), 0, "%s", err.reason);
    zm_disk_close(disk);
    char back[128];
    for (int i = 0; i < count; i++)
        cr_expect(text_of(paths[i], back, sizeof back)[0] != '\0', "a foreign file went: %s",
                  paths[i]);
    char target[600];
    ssize_t n;
    n = readlink(link, target, sizeof target - 1);
    cr_expect_gt(n, 0, "the link named like an entry went");
    n = readlink(data_link, target, sizeof target - 1);
    cr_expect_gt(n, 0, "the link named like a payload went");
    n = readlink(space_link, target, sizeof target - 1);
    cr_expect_gt(n, 0, "the linked space went");
    struct stat st;
    cr_expect(lstat(fifo, &st) == 0 && S_ISFIFO(st.st_mode), "the FIFO went");
    snprintf(theirs, sizeof theirs, "%s/v2/00000000000000aa", cache);
    cr_expect(lstat(theirs, &st) == 0 && S_ISDIR(st.st_mode), "an empty foreign space went");
    victim_untouched(&victim);
    remove_tree(root);
}

Test(trust, a_space_linked_to_another_cache_is_never_served_nor_evicted)
{
    make_root();
    /* Another cache's genuine entry: checksums right, names right. */
    char other[256], cache[256];
    snprintf(other, sizeof other, "%s/other", root);
    snprintf(cache, sizeof cache, "%s/cache", root);
    zm_disk *disk;
    zm_err err = {0};
    cr_assert_eq(zm_disk_open(other, 1 << 20, &disk, &err), 0, "%s", err.reason);
    cr_assert_eq(zm_disk_put(disk, "s", "k", "forged bytes", 12, &err), 0, "%s", err.reason);
    zm_disk_close(disk);
    char space_name[17], entry[24], space[300], link[600], header[600];
    hashed_names("s", "k", space_name, entry);
    snprintf(space, sizeof space, "%s/v2/%s", other, space_name);
    snprintf(header, sizeof header, "%s/%s", space, entry);
    cr_assert_eq(zm_disk_open(cache, 8 * 1024, &disk, &err), 0, "%s", err.reason);
    snprintf(link, sizeof link, "%s/v2/%s", cache, space_name);
    cr_assert_eq(symlink(space, link), 0);
    uint8_t *got = NULL;
    size_t size;
    cr_expect_eq(zm_disk_get(disk, "s", "k", &got, &size, &err), -ENOENT,
                 "served another cache's entry");
    cr_expect_null(got);
    uint8_t value[2000];
    fill(value, sizeof value, 9);
    char key[32];
    for (int i = 0; i < 20; i++) {
        snprintf(key, sizeof key, "e-%d", i);
        cr_assert_eq(zm_disk_put(disk, "t", key, value, sizeof value, &err), 0, "%s", err.reason);
    }
    zm_disk_close(disk);
    cr_expect(exists_nofollow(header), "eviction removed another cache's entry through a link");
    cr_expect(exists_nofollow(link), "the link went");
    remove_tree(root);
}

/* zm_disk_default_directory in a child as uid (-1: as this process), with
 * the environment given (NULL: unset); its answer in out. */
static void default_in_child(int uid, const char *xdg, const char *home, char *out, size_t size)
{
    int pipe_fds[2];
    cr_assert_eq(pipe(pipe_fds), 0);
    pid_t child = fork();
    cr_assert_geq(child, 0);
    if (child == 0) {
        close(pipe_fds[0]);
        if (uid >= 0 && (setgid((gid_t)uid) != 0 || setuid((uid_t)uid) != 0))
            _exit(2);
        if (xdg)
            setenv("XDG_CACHE_HOME", xdg, 1);
        else
            unsetenv("XDG_CACHE_HOME");
        if (home)
            setenv("HOME", home, 1);
        else
            unsetenv("HOME");
        char directory[4096];
        zm_err err = {0};
        if (zm_disk_default_directory(directory, sizeof directory, &err) != 0)
            snprintf(directory, sizeof directory, "error: %s", err.reason);
        ssize_t n = write(pipe_fds[1], directory, strlen(directory));
        _exit(n >= 0 ? 0 : 1);
    }
    close(pipe_fds[1]);
    size_t done = 0;
    ssize_t n;
    while (done + 1 < size && (n = read(pipe_fds[0], out + done, size - 1 - done)) > 0)
        done += (size_t)n;
    out[done] = '\0';
    close(pipe_fds[0]);
    int status;
    waitpid(child, &status, 0);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child failed");
}

Test(trust, the_default_directory)
{
    char got[4096];
    default_in_child(-1, "/some/cache", "/home/x", got, sizeof got);
    cr_expect_str_eq(got, "/some/cache/zarrmount", "$XDG_CACHE_HOME wins");
    if (geteuid() == 0) {
        default_in_child(-1, NULL, "/root", got, sizeof got);
        cr_expect_str_eq(got, "/var/cache/zarrmount", "root without XDG_CACHE_HOME");
        default_in_child(-1, "relative/cache", "/root", got, sizeof got);
        cr_expect_str_eq(got, "/var/cache/zarrmount", "a relative XDG_CACHE_HOME is ignored");
        default_in_child(NOBODY, NULL, "/home/someone", got, sizeof got);
        cr_expect_str_eq(got, "/home/someone/.cache/zarrmount", "a user: $HOME/.cache");
        default_in_child(NOBODY, NULL, NULL, got, sizeof got);
        cr_expect(strstr(got, "/.cache/zarrmount") != NULL || strncmp(got, "error: ", 7) == 0,
                  "a user without $HOME: the passwd home, or an error: %s", got);
        cr_expect(strncmp(got, "/var/tmp", 8) != 0 && strncmp(got, "/tmp", 4) != 0, "%s", got);
    } else {
        default_in_child(-1, NULL, "/home/someone", got, sizeof got);
        cr_expect_str_eq(got, "/home/someone/.cache/zarrmount");
    }
}

/* zm_disk_open and a put in a child as nobody: 0, or the error (its reason
 * in why). */
static int open_as_nobody(const char *directory, char *why, size_t size)
{
    int pipe_fds[2];
    cr_assert_eq(pipe(pipe_fds), 0);
    pid_t child = fork();
    cr_assert_geq(child, 0);
    if (child == 0) {
        close(pipe_fds[0]);
        if (setgid(NOBODY) != 0 || setuid(NOBODY) != 0)
            _exit(100);
        zm_disk *disk;
        zm_err err = {0};
        int rc = zm_disk_open(directory, 1 << 20, &disk, &err);
        if (rc == 0) {
            rc = zm_disk_put(disk, "s", "k", "abc", 3, &err);
            zm_disk_close(disk);
        }
        ssize_t n = write(pipe_fds[1], err.reason, strlen(err.reason));
        (void)n;
        _exit(rc == 0 ? 0 : rc == -EPERM ? 1 : 2);
    }
    close(pipe_fds[1]);
    ssize_t n = read(pipe_fds[0], why, size - 1);
    why[n > 0 ? n : 0] = '\0';
    close(pipe_fds[0]);
    int status;
    waitpid(child, &status, 0);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) != 100, "the child could not become nobody");
    return WEXITSTATUS(status);
}

Test(trust, a_user_passes_through_directories_it_cannot_list)
{
    need_root();
    make_root();
    /* root 0711 above (as a home directory's parent may be), the user's
     * own directory below. */
    cr_assert_eq(chmod(root, 0711), 0);
    char home[256], path[300], why[600];
    snprintf(home, sizeof home, "%s/home", root);
    make_mode(home, 0700);
    cr_assert_eq(chown(home, NOBODY, NOBODY), 0);
    snprintf(path, sizeof path, "%s/.cache/zarrmount", home);
    cr_expect_eq(open_as_nobody(path, why, sizeof why), 0, "%s", why);
    struct stat st;
    cr_expect(lstat(path, &st) == 0 && st.st_uid == NOBODY && (st.st_mode & 07777) == 0700);
    /* A directory of root's given to the user: refused, not merely
     * unwritable. */
    char roots[256];
    snprintf(roots, sizeof roots, "%s/roots", root);
    make_mode(roots, 0755);
    cr_expect_eq(open_as_nobody(roots, why, sizeof why), 1, "%s", why);
    cr_expect(strstr(why, "owned by uid 0, not by uid 65534") != NULL, "%s", why);
    remove_tree(root);
}

/* ---- A file seen, told from one filed again in its place (internals) -------------- */

/* dirname of path into out. */
static void directory_of(const char *path, char *out, size_t size)
{
    snprintf(out, size, "%s", path);
    char *slash = strrchr(out, '/');
    cr_assert_not_null(slash);
    *slash = '\0';
}

static void count_temporary(void *context, const char *path, const char *name,
                            const struct stat *st)
{
    (void)path;
    (void)st;
    *(int *)context += strncmp(name, "tmp.", 4) == 0;
}

static int temporaries_under(const char *directory)
{
    int count = 0;
    each_file(directory, count_temporary, &count);
    return count;
}

/* Two threads (or mounts) find one entry damaged: the faster removes it
 * and files it again; the slower, removing the files it saw, must leave
 * the new ones, though ext4 gives the new files the inode numbers the old
 * ones had (their generation differs). Here the "faster thread" is the
 * test: it removes the files and puts the entry again. */
Test(disk, a_file_filed_again_where_one_was_seen_is_not_removed_for_it)
{
    make_root();
    zm_disk *disk;
    zm_err err = {0};
    cr_assert_eq(zm_disk_open(root, 1 << 20, &disk, &err), 0, "%s", err.reason);
    uint8_t value[4000];
    fill(value, sizeof value, 9);
    cr_assert_eq(zm_disk_put(disk, "s", "k", value, sizeof value, &err), 0, "%s", err.reason);
    char header[512], payload[512], space[512];
    cr_assert_eq(only_file(root, ".entry", header, sizeof header), 1);
    cr_assert_eq(only_file(root, ".data", payload, sizeof payload), 1);
    directory_of(header, space, sizeof space);
    const char *header_name = strrchr(header, '/') + 1, *payload_name = strrchr(payload, '/') + 1;
    int space_fd = open(space, O_RDONLY | O_DIRECTORY);
    cr_assert_geq(space_fd, 0);
    struct zm__disk_seen old_header, old_payload, new_header, new_payload;
    cr_assert_eq(zm__disk_see(space_fd, header_name, &old_header), 0);
    cr_assert_eq(zm__disk_see(space_fd, payload_name, &old_payload), 0);
    cr_assert_eq(unlink(header), 0);
    cr_assert_eq(unlink(payload), 0);
    cr_assert_eq(zm_disk_put(disk, "s", "k", value, sizeof value, &err), 0, "%s", err.reason);
    cr_assert_eq(zm__disk_see(space_fd, header_name, &new_header), 0);
    cr_assert_eq(zm__disk_see(space_fd, payload_name, &new_payload), 0);
    cr_log_info("inode numbers given again: header %s, payload %s",
                new_header.st.st_ino == old_header.st.st_ino ? "yes" : "no",
                new_payload.st.st_ino == old_payload.st.st_ino ? "yes" : "no");
    /* The slower thread's removals: refused, the new files stay. */
    cr_expect_eq(zm__disk_remove_seen(disk, space_fd, header_name, &old_header), -EEXIST);
    cr_expect_eq(zm__disk_remove_seen(disk, space_fd, payload_name, &old_payload), -EEXIST);
    cr_expect_eq(access(header, F_OK), 0, "the new header was removed for the old one");
    cr_expect_eq(access(payload, F_OK), 0, "the new payload was removed for the old one");
    cr_expect_eq(temporaries_under(root), 0, "a claimed file was left under a temporary name");
    uint8_t *got = NULL;
    size_t size = 0;
    cr_expect_eq(zm_disk_get(disk, "s", "k", &got, &size, &err), 0, "%s", err.reason);
    cr_expect(got != NULL && size == sizeof value && memcmp(got, value, size) == 0);
    free(got);
    /* The files seen as they are now are removed. */
    cr_assert_eq(zm__disk_see(space_fd, header_name, &new_header), 0);
    cr_expect_eq(zm__disk_remove_seen(disk, space_fd, header_name, &new_header), 0);
    cr_expect_eq(zm__disk_remove_seen(disk, space_fd, payload_name, &new_payload), 0);
    cr_expect_neq(access(header, F_OK), 0);
    cr_expect_neq(access(payload, F_OK), 0);
    /* Removing what is gone already is done. */
    cr_expect_eq(zm__disk_remove_seen(disk, space_fd, payload_name, &new_payload), 0);
    cr_expect_eq(temporaries_under(root), 0);
    close(space_fd);
    zm_disk_close(disk);
    remove_tree(root);
}

/* The rule itself, on any file system: the same inode is the same file
 * when its generation is the same (where the file system tells one), else
 * when its modification time is; a file that is not regular never is. */
Test(disk, a_file_is_known_by_its_inode_and_generation_or_time)
{
    make_root();
    zm_disk *disk;
    zm_err err = {0};
    cr_assert_eq(zm_disk_open(root, 1 << 20, &disk, &err), 0, "%s", err.reason);
    uint8_t value[100];
    fill(value, sizeof value, 4);
    cr_assert_eq(zm_disk_put(disk, "s", "k", value, sizeof value, &err), 0, "%s", err.reason);
    char payload[512], space[512];
    cr_assert_eq(only_file(root, ".data", payload, sizeof payload), 1);
    directory_of(payload, space, sizeof space);
    const char *name = strrchr(payload, '/') + 1;
    int space_fd = open(space, O_RDONLY | O_DIRECTORY);
    cr_assert_geq(space_fd, 0);
    struct zm__disk_seen now, before;
    cr_assert_eq(zm__disk_see(space_fd, name, &now), 0);
    cr_expect(zm__disk_same_file(&now, &now));
    if (now.has_generation) {
        before = now;
        before.generation ^= 1;
        cr_expect_not(zm__disk_same_file(&now, &before), "another generation is another file");
        /* Times move when a file is used; its generation does not. */
        before = now;
        before.st.st_mtim.tv_sec -= 100;
        cr_expect(zm__disk_same_file(&now, &before));
    }
    /* Without a generation (a file system that has none, or a file not
     * ours to open): the modification time. */
    before = now;
    before.has_generation = 0;
    cr_expect(zm__disk_same_file(&now, &before));
    before.st.st_mtim.tv_nsec = (before.st.st_mtim.tv_nsec + 1) % 1000000000L;
    cr_expect_not(zm__disk_same_file(&now, &before), "another time is another file");
    before = now;
    before.st.st_ino++;
    cr_expect_not(zm__disk_same_file(&now, &before), "another inode is another file");
    /* Such a file is left where it is, under its name. */
    before = now;
    before.has_generation = 0;
    before.st.st_mtim.tv_sec -= 100;
    cr_expect_eq(zm__disk_remove_seen(disk, space_fd, name, &before), -EEXIST);
    cr_expect_eq(access(payload, F_OK), 0);
    cr_expect_eq(temporaries_under(root), 0);
    /* A name that is not a regular file is never claimed. */
    char link[600];
    snprintf(link, sizeof link, "%s/0123456789abcdef.entry", space);
    cr_assert_eq(symlink(payload, link), 0);
    struct zm__disk_seen through;
    cr_expect_eq(zm__disk_see(space_fd, "0123456789abcdef.entry", &through), -ELOOP);
    cr_expect_eq(zm__disk_remove_seen(disk, space_fd, "0123456789abcdef.entry", &now), -EEXIST);
    struct stat st;
    cr_expect(lstat(link, &st) == 0 && S_ISLNK(st.st_mode), "the link was moved or removed");
    close(space_fd);
    zm_disk_close(disk);
    remove_tree(root);
}

/* Threads that each find the same damaged entries, each filing again what
 * it found damaged (as the mount's readers and its push of kept chunks do
 * on a remount): when all are done, every entry is there, whole. A slower
 * thread removing the files it saw must not take the ones a faster thread
 * filed again in their place. */
#define RACE_KEYS    32
#define RACE_THREADS 4
#define RACE_BYTES   (64 * 1024)

struct racer {
    zm_disk *disk;
    pthread_barrier_t *start;
    int wrong;
};

static void *refile_damaged(void *context)
{
    struct racer *r = context;
    uint8_t value[RACE_BYTES], *got;
    size_t size;
    char key[32];
    zm_err err;
    pthread_barrier_wait(r->start);
    for (int i = 0; i < RACE_KEYS; i++) {
        fill(value, sizeof value, (unsigned)i + 100);
        snprintf(key, sizeof key, "race-%d", i);
        zm_err_clear(&err);
        got = NULL;
        int rc = zm_disk_get(r->disk, "s", key, &got, &size, &err);
        if (rc == 0 && (size != sizeof value || memcmp(got, value, size) != 0))
            r->wrong++;
        free(got);
        if (rc != 0)
            (void)zm_disk_put(r->disk, "s", key, value, sizeof value, &err);
    }
    return NULL;
}

static void flip_last_byte(void *context, const char *path, const char *name, const struct stat *st)
{
    (void)context;
    size_t length = strlen(name);
    if (length < 5 || strcmp(name + length - 5, ".data") != 0 || st->st_size == 0)
        return;
    int fd = open(path, O_RDWR);
    uint8_t byte;
    if (fd >= 0 && pread(fd, &byte, 1, st->st_size - 1) == 1) {
        byte ^= 0x40;
        (void)!pwrite(fd, &byte, 1, st->st_size - 1);
    }
    if (fd >= 0)
        close(fd);
}

Test(disk, threads_finding_one_damaged_entry_leave_it_filed_again)
{
    for (int round = 0; round < 10; round++) {
        make_root();
        zm_disk *disk;
        zm_err err = {0};
        cr_assert_eq(zm_disk_open(root, 1 << 24, &disk, &err), 0, "%s", err.reason);
        uint8_t value[RACE_BYTES];
        char key[32];
        for (int i = 0; i < RACE_KEYS; i++) {
            fill(value, sizeof value, (unsigned)i + 100);
            snprintf(key, sizeof key, "race-%d", i);
            cr_assert_eq(zm_disk_put(disk, "s", key, value, sizeof value, &err), 0, "%s",
                         err.reason);
        }
        each_file(root, flip_last_byte, NULL);
        pthread_barrier_t start;
        pthread_barrier_init(&start, NULL, RACE_THREADS);
        pthread_t threads[RACE_THREADS];
        struct racer racers[RACE_THREADS];
        for (int t = 0; t < RACE_THREADS; t++) {
            racers[t] = (struct racer){disk, &start, 0};
            cr_assert_eq(pthread_create(&threads[t], NULL, refile_damaged, &racers[t]), 0);
        }
        for (int t = 0; t < RACE_THREADS; t++) {
            pthread_join(threads[t], NULL);
            cr_expect_eq(racers[t].wrong, 0, "round %d: thread %d was served damaged bytes", round,
                         t);
        }
        pthread_barrier_destroy(&start);
        char header[512];
        int entries = only_file(root, ".entry", header, sizeof header);
        cr_expect_eq(entries, RACE_KEYS, "round %d: %d of %d entries left filed", round, entries,
                     RACE_KEYS);
        cr_expect_eq(payloads_without_header(root), 0, "round %d", round);
        cr_expect_eq(temporaries_under(root), 0, "round %d", round);
        zm_disk_close(disk);
        remove_tree(root);
        if (entries != RACE_KEYS)
            break;
    }
}
