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
typedef void (*visit_fn)(void *context, const char *path, const char *name, const struct stat *st);

static void each_file(const char *directory, visit_fn visit, void *context)
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
    char old[128];
    snprintf(old, sizeof old, "%s/v0", root);
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
