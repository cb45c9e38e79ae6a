/* Tests for the Zarr store layer (src/source/zarr_store.c): directory and
 * zip stores read by key.
 *
 * Zips: tests/source/make_zip_stores.py, run at test time, writes zips
 * with Python's zipfile (the reader zarr's ZipStore reads through) and
 * damaged ones, and dumps what zipfile reads of each, and of ../shared's
 * zips: every key's value (a name's last entry), the names below every
 * prefix, the offset a stored member's data starts at (from its local
 * header), and the error zipfile gives for each damaged zip. Directory
 * stores are made here, and ../shared's are compared with the files
 * themselves (read with read(2)) and with os.walk's listing.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* nftw, mkdtemp */
#endif
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "source/zarr_store.h"

static const char *source_root(void)
{
    const char *dir = getenv("ZM_SOURCE_ROOT");
    return dir ? dir : ".";
}

static const char *shared_data(void)
{
    const char *dir = getenv("ZM_SHARED_DATA");
    struct stat st;
    return dir != NULL && stat(dir, &st) == 0 && S_ISDIR(st.st_mode) ? dir : NULL;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static void remove_tree(const char *path)
{
    nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* The generator's zips and manifest, in a directory removed at the end. */
typedef struct generated {
    char directory[64];
    json_t *manifest;
} generated;

static void generate(generated *g)
{
    memset(g, 0, sizeof *g);
    snprintf(g->directory, sizeof g->directory, "/tmp/zm-zarr-store-XXXXXX");
    cr_assert_not_null(mkdtemp(g->directory));
    const char *shared = shared_data();
    char command[2048];
    snprintf(command, sizeof command,
             "/usr/bin/python3 '%s/tests/source/make_zip_stores.py' '%s' '%s' >/dev/null",
             source_root(), g->directory, shared ? shared : "");
    cr_assert_eq(system(command), 0, "make_zip_stores.py failed: %s", command);
    char path[256];
    snprintf(path, sizeof path, "%s/manifest.json", g->directory);
    json_error_t error;
    g->manifest = json_load_file(path, 0, &error);
    cr_assert_not_null(g->manifest, "%s: %s", path, error.text);
}

static void finish(generated *g)
{
    json_decref(g->manifest);
    remove_tree(g->directory);
}

static uint8_t *read_whole(const char *path, size_t *size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    cr_assert_geq(fd, 0, "%s: %s", path, strerror(errno));
    struct stat st;
    cr_assert_eq(fstat(fd, &st), 0);
    uint8_t *bytes = malloc((size_t)st.st_size + 1);
    cr_assert_not_null(bytes);
    size_t done = 0;
    while (done < (size_t)st.st_size) {
        ssize_t n = read(fd, bytes + done, (size_t)st.st_size - done);
        cr_assert_gt(n, 0, "%s: short read", path);
        done += (size_t)n;
    }
    close(fd);
    *size = done;
    return bytes;
}

static void write_file(const char *path, const void *bytes, size_t size)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    cr_assert_geq(fd, 0, "%s: %s", path, strerror(errno));
    cr_assert_eq(write(fd, bytes, size), (ssize_t)size);
    close(fd);
}

/* A store opened through a descriptor of its own (closed by close_store). */
typedef struct opened {
    zm__store *store;
    int fd;
} opened;

static int open_store(const char *path, opened *o, zm_err *err)
{
    o->store = NULL;
    o->fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    cr_assert_geq(o->fd, 0, "%s: %s", path, strerror(errno));
    int rc = zm__store_open(o->fd, path, &o->store, err);
    if (rc != 0) {
        cr_assert_null(o->store);
        close(o->fd);
        o->fd = -1;
    }
    return rc;
}

static void close_store(opened *o)
{
    zm__store_close(o->store);
    if (o->fd >= 0)
        close(o->fd);
    o->store = NULL;
    o->fd = -1;
}

static int errno_named(const char *name)
{
    static const struct {
        const char *name;
        int code;
    } codes[] = {{"EINVAL", EINVAL},
                 {"EIO", EIO},
                 {"ENOTSUP", ENOTSUP},
                 {"ENOENT", ENOENT},
                 {"EFBIG", EFBIG}};
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
        if (strcmp(codes[i].name, name) == 0)
            return codes[i].code;
    cr_assert_fail("unknown errno name %s", name);
    return 0;
}

/* list(prefix) is exactly names, in order. */
static void expect_list(zm__store *store, const char *what, const char *prefix, json_t *names)
{
    zm_strings got;
    zm_err err = {0};
    int rc = zm__store_list(store, prefix, &got, &err);
    cr_assert_eq(rc, 0, "%s: list(\"%s\"): %d %s", what, prefix, rc, err.reason);
    cr_expect_eq(got.count, json_array_size(names), "%s: list(\"%s\"): %zu names, expected %zu",
                 what, prefix, got.count, json_array_size(names));
    for (size_t i = 0; i < got.count && i < json_array_size(names); i++) {
        const char *want = json_string_value(json_array_get(names, i));
        size_t n = got.offsets[i + 1] - got.offsets[i];
        cr_expect(n == strlen(want) && memcmp(got.bytes + got.offsets[i], want, n) == 0,
                  "%s: list(\"%s\")[%zu] is \"%.*s\", expected \"%s\"", what, prefix, i, (int)n,
                  got.bytes + got.offsets[i], want);
    }
    zm_strings_free(&got);
}

static void expect_lists(zm__store *store, const char *what, json_t *lists)
{
    const char *prefix;
    json_t *names;
    json_object_foreach(lists, prefix, names) expect_list(store, what, prefix, names);
    /* A file, and what is not there, have nothing below them. */
    zm_strings got;
    zm_err err = {0};
    cr_expect_eq(zm__store_list(store, "no such prefix", &got, &err), -ENOENT, "%s", what);
    cr_expect_eq(zm__store_list(store, "../", &got, &err), -ENOENT, "%s", what);
}

/* A small generator of offsets, the same every run. */
static uint64_t next_random(uint64_t *state)
{
    *state = *state * 6364136223846793005u + 1442695040888963407u;
    return *state >> 17;
}

/* key's value through zm__store_get and through locate+read at offsets,
 * against expected. */
static void expect_value(zm__store *store, const char *what, const char *key,
                         const uint8_t *expected, size_t size, uint64_t *state)
{
    uint8_t *bytes;
    size_t got_size;
    uint64_t bytes_read = 0;
    zm_err err = {0};
    int rc = zm__store_get(store, key, SIZE_MAX - 1, &bytes, &got_size, &bytes_read, &err);
    cr_assert_eq(rc, 0, "%s: get(%s): %d %s", what, key, rc, err.reason);
    cr_expect_eq(got_size, size, "%s: get(%s): %zu bytes, expected %zu", what, key, got_size, size);
    cr_expect(got_size == size && memcmp(bytes, expected, size) == 0,
              "%s: get(%s): not zipfile's bytes", what, key);
    cr_expect_eq(bytes[got_size], 0, "%s: get(%s) is NUL-terminated", what, key);
    free(bytes);

    zm__stored stored;
    rc = zm__store_locate(store, key, &stored, &err);
    cr_assert_eq(rc, 0, "%s: locate(%s): %s", what, key, err.reason);
    cr_expect_eq(stored.raw_size, size, "%s: %s: raw_size", what, key);
    cr_expect_eq(bytes_read, stored.size, "%s: get(%s) read %llu bytes, its stored size is %llu",
                 what, key, (unsigned long long)bytes_read, (unsigned long long)stored.size);
    uint8_t *buffer = malloc(size + 1);
    cr_assert_not_null(buffer);
    for (int i = 0; i < 12 && size > 0; i++) {
        uint64_t a = next_random(state) % size, b = next_random(state) % size;
        if (i == 0)
            a = 0, b = size - 1;
        if (i == 1)
            a = b = size - 1;
        if (a > b) {
            uint64_t t = a;
            a = b, b = t;
        }
        size_t n = (size_t)(b - a + 1);
        uint64_t counted = 0;
        memset(buffer, 0xA5, n);
        rc = zm__store_read(store, key, &stored, a, buffer, n, &counted, &err);
        cr_assert_eq(rc, 0, "%s: read(%s, %llu, %zu): %s", what, key, (unsigned long long)a, n,
                     err.reason);
        cr_expect(memcmp(buffer, expected + a, n) == 0, "%s: read(%s, %llu, %zu): wrong bytes",
                  what, key, (unsigned long long)a, n);
        cr_expect_eq(counted, stored.deflated ? stored.size : n,
                     "%s: read(%s) counted %llu bytes read", what, key,
                     (unsigned long long)counted);
    }
    /* Past the end: refused, naming the key. */
    rc = zm__store_read(store, key, &stored, size, buffer, 1, NULL, &err);
    cr_expect_eq(rc, -EIO, "%s: read(%s) past its end: %d", what, key, rc);
    cr_expect(strstr(err.reason, key) != NULL, "%s: %s", what, err.reason);
    free(buffer);
    zm__stored_done(&stored);
    cr_expect_eq(stored.fd, -1);
}

/* Every key of a manifest's store read as zipfile read it, its listings,
 * its stored members' offsets, and the names that are no keys absent. */
static void expect_zip_store(json_t *entry)
{
    const char *name = json_string_value(json_object_get(entry, "name"));
    const char *path = json_string_value(json_object_get(entry, "path"));
    opened o;
    zm_err err = {0};
    int rc = open_store(path, &o, &err);
    cr_assert_eq(rc, 0, "%s: %s", name, err.reason);
    cr_expect_eq(zm__store_get_kind(o.store), ZM__STORE_ZIP);
    zm_source_identity id;
    zm__store_identity(o.store, &id);
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    cr_expect(id.device == st.st_dev && id.inode == st.st_ino && id.size == st.st_size &&
                  id.mtime_ns == (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec,
              "%s: identity is not the file's", name);

    uint64_t state = 7;
    const char *key;
    json_t *file;
    json_object_foreach(json_object_get(entry, "values"), key, file)
    {
        size_t size;
        uint8_t *expected = read_whole(json_string_value(file), &size);
        expect_value(o.store, name, key, expected, size, &state);
        free(expected);
    }
    json_t *offset;
    json_object_foreach(json_object_get(entry, "offsets"), key, offset)
    {
        zm__stored stored;
        cr_assert_eq(zm__store_locate(o.store, key, &stored, &err), 0, "%s", err.reason);
        cr_expect_eq(stored.offset, (uint64_t)json_integer_value(offset),
                     "%s: %s: data at offset %llu, its local header says %lld", name, key,
                     (unsigned long long)stored.offset, (long long)json_integer_value(offset));
        cr_expect_eq(stored.fd, o.fd, "%s: a member is read through the store's descriptor", name);
        cr_expect_eq(stored.deflated, 0);
        zm__stored_done(&stored);
    }
    size_t i;
    json_t *unreachable;
    json_array_foreach(json_object_get(entry, "unreachable"), i, unreachable)
    {
        zm__stored stored;
        rc = zm__store_locate(o.store, json_string_value(unreachable), &stored, &err);
        cr_expect_eq(rc, -ENOENT, "%s: member %s is no key: %d", name,
                     json_string_value(unreachable), rc);
    }
    expect_lists(o.store, name, json_object_get(entry, "lists"));
    zm__stored stored;
    cr_expect_eq(zm__store_locate(o.store, "no/such/key", &stored, &err), -ENOENT);
    cr_expect_eq(zm__store_check(o.store, &err), 0, "%s: %s", name, err.reason);
    close_store(&o);
}

Test(zarr_store, generated_zips_read_as_zipfile_reads_them)
{
    generated g;
    generate(&g);
    size_t i, seen = 0;
    json_t *entry;
    json_array_foreach(json_object_get(g.manifest, "stores"), i, entry)
    {
        if (json_is_true(json_object_get(entry, "real")))
            continue;
        expect_zip_store(entry);
        seen++;
    }
    cr_expect_geq(seen, 7, "the generator's good zips");
    finish(&g);
}

Test(zarr_store, shared_zips_read_as_zipfile_reads_them)
{
    if (shared_data() == NULL)
        cr_skip_test("ZM_SHARED_DATA (../shared/data) is not here: its zips are not read");
    generated g;
    generate(&g);
    size_t i, seen = 0;
    json_t *entry;
    json_array_foreach(json_object_get(g.manifest, "stores"), i, entry)
    {
        if (!json_is_true(json_object_get(entry, "real")))
            continue;
        expect_zip_store(entry);
        seen++;
    }
    cr_expect_geq(seen, 1, "no zip of %s read", shared_data());
    cr_log_info("%zu zips of %s read as zipfile reads them", seen, shared_data());
    finish(&g);
}

/* The directory store's digest as the header defines it, from stat(2) of
 * each file (keys in bytewise order). */
static uint64_t manifest_digest(const char *root, json_t *keys, uint64_t *total, int64_t *newest)
{
    XXH64_state_t *hash = XXH64_createState();
    cr_assert_not_null(hash);
    XXH64_reset(hash, 0);
    *total = 0;
    *newest = 0;
    size_t i;
    json_t *key;
    json_array_foreach(keys, i, key)
    {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", root, json_string_value(key));
        struct stat st;
        cr_assert_eq(lstat(path, &st), 0, "%s", path);
        int64_t mtime = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
        uint8_t fields[16];
        for (int b = 0; b < 8; b++) {
            fields[b] = (uint8_t)((uint64_t)st.st_size >> (8 * b));
            fields[8 + b] = (uint8_t)((uint64_t)mtime >> (8 * b));
        }
        XXH64_update(hash, json_string_value(key), strlen(json_string_value(key)) + 1);
        XXH64_update(hash, fields, sizeof fields);
        *total += (uint64_t)st.st_size;
        if (i == 0 || mtime > *newest)
            *newest = mtime;
    }
    uint64_t digest = XXH64_digest(hash);
    XXH64_freeState(hash);
    return digest;
}

static void expect_directory_store(const char *root, json_t *keys, json_t *lists)
{
    opened o;
    zm_err err = {0};
    int rc = open_store(root, &o, &err);
    cr_assert_eq(rc, 0, "%s", err.reason);
    cr_expect_eq(zm__store_get_kind(o.store), ZM__STORE_DIRECTORY);
    uint64_t state = 11;
    size_t i;
    json_t *key;
    json_array_foreach(keys, i, key)
    {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", root, json_string_value(key));
        size_t size;
        uint8_t *expected = read_whole(path, &size);
        expect_value(o.store, root, json_string_value(key), expected, size, &state);
        free(expected);
    }
    expect_lists(o.store, root, lists);
    zm_source_identity id;
    zm__store_identity(o.store, &id);
    uint64_t total;
    int64_t newest;
    uint64_t digest = manifest_digest(root, keys, &total, &newest);
    struct stat st;
    cr_assert_eq(stat(root, &st), 0);
    cr_expect(id.device == st.st_dev && id.inode == st.st_ino, "%s: the directory's identity",
              root);
    cr_expect_eq((uint64_t)id.size, total, "%s: %lld bytes, its files hold %llu", root,
                 (long long)id.size, (unsigned long long)total);
    cr_expect_eq(id.mtime_ns, newest, "%s: newest mtime", root);
    cr_expect_eq(id.digest, digest, "%s: digest %016llx, its manifest's is %016llx", root,
                 (unsigned long long)id.digest, (unsigned long long)digest);
    cr_expect_eq(zm__store_check(o.store, &err), 0, "%s: %s", root, err.reason);
    close_store(&o);
}

Test(zarr_store, shared_directory_stores_read_as_their_files)
{
    if (shared_data() == NULL)
        cr_skip_test("ZM_SHARED_DATA (../shared/data) is not here: its directory stores are "
                     "not read");
    generated g;
    generate(&g);
    size_t i;
    json_t *dir;
    json_array_foreach(json_object_get(g.manifest, "dirs"), i, dir)
        expect_directory_store(json_string_value(json_object_get(dir, "path")),
                               json_object_get(dir, "keys"), json_object_get(dir, "lists"));
    cr_expect_geq(json_array_size(json_object_get(g.manifest, "dirs")), 1);
    finish(&g);
}

Test(zarr_store, damaged_zips_refused_with_a_reason)
{
    generated g;
    generate(&g);
    size_t i;
    json_t *bad;
    json_array_foreach(json_object_get(g.manifest, "bad"), i, bad)
    {
        const char *name = json_string_value(json_object_get(bad, "name"));
        const char *path = json_string_value(json_object_get(bad, "path"));
        json_t *open_error = json_object_get(bad, "open");
        opened o;
        zm_err err = {0};
        int rc = open_store(path, &o, &err);
        if (json_is_string(open_error)) {
            cr_expect_eq(rc, -errno_named(json_string_value(open_error)),
                         "%s: open gave %d (%s), expected %s (zipfile: %s)", name, rc, err.reason,
                         json_string_value(open_error),
                         json_string_value(json_object_get(bad, "python")));
            cr_expect_eq(err.code, rc);
            cr_expect(strstr(err.reason, path) != NULL, "%s: the reason names the file: %s", name,
                      err.reason);
            if (rc == 0)
                close_store(&o);
            continue;
        }
        cr_assert_eq(rc, 0, "%s: %s", name, err.reason);
        const char *key = json_string_value(json_object_get(bad, "key"));
        json_t *locate_error = json_object_get(bad, "locate");
        zm__stored stored;
        rc = zm__store_locate(o.store, key, &stored, &err);
        if (json_is_string(locate_error)) {
            cr_expect_eq(rc, -errno_named(json_string_value(locate_error)),
                         "%s: locate(%s) gave %d (%s), expected %s", name, key, rc, err.reason,
                         json_string_value(locate_error));
        } else {
            cr_assert_eq(rc, 0, "%s: locate(%s): %s", name, key, err.reason);
            uint8_t *buffer = malloc(stored.raw_size + 1);
            cr_assert_not_null(buffer);
            rc = zm__store_read(o.store, key, &stored, 0, buffer, stored.raw_size, NULL, &err);
            cr_expect_eq(rc, -errno_named(json_string_value(json_object_get(bad, "read"))),
                         "%s: read(%s) gave %d (%s)", name, key, rc, err.reason);
            free(buffer);
            zm__stored_done(&stored);
        }
        cr_expect(strstr(err.reason, path) != NULL && strstr(err.reason, key) != NULL,
                  "%s: the reason names the file and the key: %s", name, err.reason);
        /* zm__store_get says the same. */
        uint8_t *bytes;
        size_t size;
        int got = zm__store_get(o.store, key, SIZE_MAX - 1, &bytes, &size, NULL, &err);
        cr_expect_eq(got, rc, "%s: get(%s) gave %d, locate/read %d", name, key, got, rc);
        cr_expect_null(bytes);
        close_store(&o);
    }
    finish(&g);
}

Test(zarr_store, reasons_of_named_damage)
{
    generated g;
    generate(&g);
    struct {
        const char *name, *key, *words;
    } cases[] = {
        {"empty", NULL, "not a zip file"},
        {"bad-eocd", NULL, "not a zip file"},
        {"truncated", NULL, "not a zip file"},
        {"cd-outside", NULL, "central directory"},
        {"cd-too-big", NULL, "outside the file"},
        {"encrypted", "X/c/0", "encrypted"},
        {"bzip2", "X/c/0", "method 12 (bzip2)"},
        {"bad-crc-deflated", "X/c/1", "CRC-32"},
        {"bad-crc-stored", "X/c/0", "CRC-32"},
        {"corrupt-deflate", "X/c/1", "not a deflate stream"},
        {"deflate-longer", "X/c/1", "more than"},
        {"deflate-shorter", "X/c/1", "inflates to"},
        {"local-name-differs", "X/c/0", "names another file"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[256];
        snprintf(path, sizeof path, "%s/bad/%s.zip", g.directory, cases[i].name);
        opened o;
        zm_err err = {0};
        int rc = open_store(path, &o, &err);
        if (cases[i].key != NULL) {
            cr_assert_eq(rc, 0, "%s: %s", path, err.reason);
            uint8_t *bytes = NULL;
            size_t size;
            rc = zm__store_get(o.store, cases[i].key, SIZE_MAX - 1, &bytes, &size, NULL, &err);
            free(bytes);
            close_store(&o);
        }
        cr_expect_neq(rc, 0, "%s", cases[i].name);
        cr_expect(strstr(err.reason, cases[i].words) != NULL, "%s: \"%s\" does not say \"%s\"",
                  cases[i].name, err.reason, cases[i].words);
    }
    /* A stored member whose CRC-32 is wrong is read in part all the same:
     * only a whole value can be checked. */
    char path[256];
    snprintf(path, sizeof path, "%s/bad/bad-crc-stored.zip", g.directory);
    opened o;
    zm_err err = {0};
    cr_assert_eq(open_store(path, &o, &err), 0);
    zm__stored stored;
    cr_assert_eq(zm__store_locate(o.store, "X/c/0", &stored, &err), 0);
    uint8_t part[100];
    cr_expect_eq(zm__store_read(o.store, "X/c/0", &stored, 10, part, sizeof part, NULL, &err), 0,
                 "%s", err.reason);
    zm__stored_done(&stored);
    close_store(&o);
    finish(&g);
}

Test(zarr_store, get_limit_enforced_before_reading)
{
    generated g;
    generate(&g);
    char path[256];
    snprintf(path, sizeof path, "%s/good/deflated.zip", g.directory);
    opened o;
    zm_err err = {0};
    cr_assert_eq(open_store(path, &o, &err), 0, "%s", err.reason);
    uint8_t *bytes;
    size_t size;
    uint64_t bytes_read = 0;
    /* "zeros" is a million zero bytes, deflated to about a kilobyte. */
    int rc = zm__store_get(o.store, "zeros", 999999, &bytes, &size, &bytes_read, &err);
    cr_expect_eq(rc, -EFBIG, "%d %s", rc, err.reason);
    cr_expect(strstr(err.reason, "zeros") && strstr(err.reason, "1000000"), "%s", err.reason);
    cr_expect_eq(bytes_read, 0, "nothing read before the limit refused it");
    cr_expect_null(bytes);
    cr_expect_eq(zm__store_get(o.store, "zeros", 1000000, &bytes, &size, NULL, &err), 0);
    cr_expect_eq(size, 1000000);
    free(bytes);
    close_store(&o);
    finish(&g);
}

/* ---- Concurrent reads -------------------------------------------------------- */

typedef struct reader_key {
    const char *key;
    uint8_t *bytes;
    size_t size;
} reader_key;

typedef struct reader {
    zm__store *store;
    reader_key *keys;
    size_t key_count;
    unsigned seed;
    int failures;
    uint64_t reads;
    char first[ZM_REASON_MAX + 128];
} reader;

static void *read_concurrently(void *arg)
{
    reader *r = arg;
    uint64_t state = r->seed;
    uint8_t *buffer = NULL;
    size_t capacity = 0;
    for (int i = 0; i < 400; i++) {
        reader_key *k = &r->keys[next_random(&state) % r->key_count];
        zm__stored stored;
        zm_err err = {0};
        int rc = zm__store_locate(r->store, k->key, &stored, &err);
        uint64_t a = 0, n = k->size;
        if (rc == 0 && k->size > 0 && next_random(&state) % 2) {
            a = next_random(&state) % k->size;
            n = 1 + next_random(&state) % (k->size - a);
        }
        if (rc == 0 && n > capacity) {
            free(buffer);
            capacity = n;
            buffer = malloc(capacity);
        }
        if (rc == 0)
            rc = zm__store_read(r->store, k->key, &stored, a, buffer, n, NULL, &err);
        if (rc == 0 && n > 0 && memcmp(buffer, k->bytes + a, n) != 0)
            rc = 1, snprintf(err.reason, sizeof err.reason, "wrong bytes");
        zm__stored_done(&stored);
        if (rc != 0 && r->failures++ == 0)
            snprintf(r->first, sizeof r->first, "%s [%llu, +%llu): %s", k->key,
                     (unsigned long long)a, (unsigned long long)n, err.reason);
        r->reads++;
    }
    free(buffer);
    return NULL;
}

static void read_from_threads(json_t *entry)
{
    const char *path = json_string_value(json_object_get(entry, "path"));
    json_t *values = json_object_get(entry, "values");
    size_t count = json_object_size(values);
    reader_key *keys = calloc(count, sizeof *keys);
    cr_assert_not_null(keys);
    size_t i = 0;
    const char *key;
    json_t *file;
    json_object_foreach(values, key, file)
    {
        keys[i].key = key;
        keys[i].bytes = read_whole(json_string_value(file), &keys[i].size);
        i++;
    }
    opened o;
    zm_err err = {0};
    cr_assert_eq(open_store(path, &o, &err), 0, "%s", err.reason);
    reader readers[4];
    pthread_t threads[4];
    for (int t = 0; t < 4; t++) {
        readers[t] = (reader){
            .store = o.store, .keys = keys, .key_count = count, .seed = 100u + (unsigned)t};
        cr_assert_eq(pthread_create(&threads[t], NULL, read_concurrently, &readers[t]), 0);
    }
    for (int t = 0; t < 4; t++) {
        pthread_join(threads[t], NULL);
        cr_expect_eq(readers[t].failures, 0, "%s: thread %d: %d of %llu reads failed, first: %s",
                     path, t, readers[t].failures, (unsigned long long)readers[t].reads,
                     readers[t].first);
    }
    close_store(&o);
    for (i = 0; i < count; i++)
        free(keys[i].bytes);
    free(keys);
}

Test(zarr_store, concurrent_locate_and_read_give_the_right_bytes)
{
    generated g;
    generate(&g);
    size_t i, seen = 0;
    json_t *entry;
    json_array_foreach(json_object_get(g.manifest, "stores"), i, entry)
    {
        const char *name = json_string_value(json_object_get(entry, "name"));
        /* Deflated and stored members, zip64 offsets, and (where it is
         * here) a real store's first reads of each member's local header. */
        if (strcmp(name, "deflated") == 0 || strcmp(name, "stored") == 0 ||
            strcmp(name, "zip64") == 0 ||
            strcmp(name, "modern/modern-tiny-300x120.v3.zarr.zip") == 0) {
            read_from_threads(entry);
            seen++;
        }
    }
    cr_expect_geq(seen, 3);
    finish(&g);
}

/* ---- Directory stores made here --------------------------------------------------- */

typedef struct tempdir {
    char root[64];  /* mkdtemp's */
    char store[96]; /* root/store */
} tempdir;

static void make_tempdir(tempdir *t)
{
    snprintf(t->root, sizeof t->root, "/tmp/zm-dir-store-XXXXXX");
    cr_assert_not_null(mkdtemp(t->root));
    snprintf(t->store, sizeof t->store, "%s/store", t->root);
    cr_assert_eq(mkdir(t->store, 0755), 0);
}

static void put(const tempdir *t, const char *key, const char *content)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", t->store, key);
    /* Its directories first. */
    for (char *slash = strchr(path + strlen(t->store) + 1, '/'); slash != NULL;
         slash = strchr(slash + 1, '/')) {
        *slash = '\0';
        if (mkdir(path, 0755) != 0)
            cr_assert_eq(errno, EEXIST, "%s: %s", path, strerror(errno));
        *slash = '/';
    }
    write_file(path, content, strlen(content));
}

/* Sets a file's mtime to seconds after the epoch (a change a store must
 * see whatever the clock's resolution). */
static void set_mtime(const tempdir *t, const char *key, time_t seconds)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", t->store, key);
    struct timespec times[2] = {{.tv_sec = seconds}, {.tv_sec = seconds}};
    cr_assert_eq(utimensat(AT_FDCWD, path, times, AT_SYMLINK_NOFOLLOW), 0, "%s", path);
}

static json_t *strings(const char *const *names)
{
    json_t *array = json_array();
    for (; *names != NULL; names++)
        json_array_append_new(array, json_string(*names));
    return array;
}

static void make_sample(tempdir *t)
{
    make_tempdir(t);
    put(t, ".zgroup", "{\"zarr_format\": 2}");
    put(t, ".zattrs", "{\"encoding-type\": \"anndata\"}");
    put(t, "obs/.zgroup", "{\"zarr_format\": 2}");
    put(t, "obs/a/.zarray", "{\"chunks\": [2]}");
    put(t, "obs/a/0", "chunk zero");
    put(t, "obs/a/1", "chunk one!");
    put(t, "obs.b/x", "x");
    put(t, "obs-c", "c");
    put(t, "X/0.0", "");
    put(t, "deep/er/and/deeper/file", "deep");
    char path[512];
    snprintf(path, sizeof path, "%s/emptydir", t->store);
    cr_assert_eq(mkdir(path, 0755), 0);
    /* Distinct mtimes, the newest known. */
    const char *keys[] = {
        ".zgroup", ".zattrs", "obs/.zgroup", "obs/a/.zarray", "obs/a/0",
        "obs/a/1", "obs.b/x", "obs-c",       "X/0.0",         "deep/er/and/deeper/file"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        set_mtime(t, keys[i], 1700000000 + (time_t)i);
}

static json_t *sample_keys(void)
{
    static const char *const keys[] = {
        ".zattrs", ".zgroup", "X/0.0",       "deep/er/and/deeper/file",
        "obs-c",   "obs.b/x", "obs/.zgroup", "obs/a/.zarray",
        "obs/a/0", "obs/a/1", NULL};
    return strings(keys);
}

Test(zarr_store, directory_store_lists_reads_and_identifies_its_files)
{
    tempdir t;
    make_sample(&t);
    json_t *lists = json_object();
    json_object_set_new(lists, "",
                        strings((const char *const[]){".zattrs", ".zgroup", "X", "deep", "obs",
                                                      "obs-c", "obs.b", NULL}));
    json_object_set_new(lists, "obs", strings((const char *const[]){".zgroup", "a", NULL}));
    json_object_set_new(lists, "obs/", strings((const char *const[]){".zgroup", "a", NULL}));
    json_object_set_new(lists, "obs/a", strings((const char *const[]){".zarray", "0", "1", NULL}));
    json_object_set_new(lists, "deep/er/and", strings((const char *const[]){"deeper", NULL}));
    json_object_set_new(lists, "X", strings((const char *const[]){"0.0", NULL}));
    json_t *keys = sample_keys();
    expect_directory_store(t.store, keys, lists);

    opened o;
    zm_err err = {0};
    cr_assert_eq(open_store(t.store, &o, &err), 0, "%s", err.reason);
    zm_source_identity id;
    zm__store_identity(o.store, &id);
    cr_expect_eq(id.mtime_ns, (int64_t)(1700000000 + 9) * 1000000000, "the newest mtime");
    zm_strings got;
    cr_expect_eq(zm__store_list(o.store, "emptydir", &got, &err), -ENOENT,
                 "an empty directory holds no key");
    cr_expect_eq(zm__store_list(o.store, "obs/a/0", &got, &err), -ENOENT, "a file lists nothing");
    /* A directory's file is opened for the lookup, and closed after. */
    zm__stored stored;
    cr_assert_eq(zm__store_locate(o.store, "obs/a/0", &stored, &err), 0, "%s", err.reason);
    cr_expect(stored.owned && stored.fd >= 0 && stored.fd != o.fd && stored.offset == 0 &&
              stored.size == 10 && !stored.deflated);
    zm__stored_done(&stored);
    close_store(&o);
    json_decref(keys);
    json_decref(lists);
    remove_tree(t.root);
}

Test(zarr_store, keys_outside_the_store_are_absent)
{
    tempdir t;
    make_sample(&t);
    /* A file beside the store, which ".." would reach. */
    char path[512];
    snprintf(path, sizeof path, "%s/outside", t.root);
    write_file(path, "outside", 7);
    opened o;
    zm_err err = {0};
    cr_assert_eq(open_store(t.store, &o, &err), 0, "%s", err.reason);
    const char *keys[] = {"../outside",
                          "obs/../../outside",
                          "obs/../.zattrs",
                          "./.zattrs",
                          "/etc/passwd",
                          "obs//.zgroup",
                          "obs/a/",
                          "",
                          "..",
                          ".",
                          "obs/./a/0",
                          "/",
                          "emptydir"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        zm__stored stored;
        int rc = zm__store_locate(o.store, keys[i], &stored, &err);
        cr_expect_eq(rc, -ENOENT, "locate(\"%s\") gave %d (%s)", keys[i], rc, err.reason);
        uint8_t *bytes;
        size_t size;
        cr_expect_eq(zm__store_get(o.store, keys[i], 1 << 20, &bytes, &size, NULL, &err), -ENOENT,
                     "get(\"%s\")", keys[i]);
    }
    close_store(&o);
    remove_tree(t.root);
}

Test(zarr_store, directory_store_sees_its_files_change)
{
    tempdir t;
    make_sample(&t);
    opened o;
    zm_err err = {0};
    cr_assert_eq(open_store(t.store, &o, &err), 0, "%s", err.reason);
    zm_source_identity before;
    zm__store_identity(o.store, &before);
    uint8_t *bytes;
    size_t size;
    cr_assert_eq(zm__store_get(o.store, ".zattrs", 1 << 20, &bytes, &size, NULL, &err), 0);
    free(bytes);
    cr_assert_eq(zm__store_get(o.store, "obs/a/.zarray", 1 << 20, &bytes, &size, NULL, &err), 0);
    free(bytes);
    cr_expect_eq(zm__store_check(o.store, &err), 0, "%s", err.reason);

    /* A chunk rewritten in place: the same size, another mtime. Its
     * directory is as it was (check passes); locate sees it. */
    put(&t, "obs/a/0", "CHUNK ZERO");
    set_mtime(&t, "obs/a/0", 1700000100);
    zm__stored stored;
    int rc = zm__store_locate(o.store, "obs/a/0", &stored, &err);
    cr_expect_eq(rc, -EIO, "a chunk changed: %d", rc);
    cr_expect(strstr(err.reason, "obs/a/0") && strstr(err.reason, "changed"), "%s", err.reason);
    cr_expect_eq(zm__store_check(o.store, &err), 0, "chunks are checked by locate: %s", err.reason);
    cr_expect_eq(zm__store_locate(o.store, "obs/a/1", &stored, &err), 0, "the others still read");
    zm__stored_done(&stored);
    /* A fresh open has another digest, and reads the new bytes. */
    opened fresh;
    cr_assert_eq(open_store(t.store, &fresh, &err), 0);
    zm_source_identity after;
    zm__store_identity(fresh.store, &after);
    cr_expect_neq(after.digest, before.digest, "the digest sees a file's new mtime");
    cr_expect_eq(after.size, before.size);
    cr_assert_eq(zm__store_get(fresh.store, "obs/a/0", 1 << 20, &bytes, &size, NULL, &err), 0);
    cr_expect(size == 10 && memcmp(bytes, "CHUNK ZERO", 10) == 0);
    free(bytes);
    close_store(&fresh);

    /* A metadata document read, then changed: check says so. */
    put(&t, ".zattrs", "{\"encoding-type\": \"ANNDATA\"}");
    set_mtime(&t, ".zattrs", 1700000200);
    rc = zm__store_check(o.store, &err);
    cr_expect_eq(rc, -EIO, "a document changed: %d", rc);
    cr_expect(strstr(err.reason, ".zattrs") != NULL, "%s", err.reason);
    close_store(&o);

    /* A file added (in a directory below the root): locate says it
     * appeared, check that its directory changed; a fresh open lists it. */
    cr_assert_eq(open_store(t.store, &o, &err), 0);
    zm__store_identity(o.store, &before);
    put(&t, "obs/a/2", "chunk two");
    rc = zm__store_locate(o.store, "obs/a/2", &stored, &err);
    cr_expect_eq(rc, -EIO, "a file added: %d", rc);
    cr_expect(strstr(err.reason, "obs/a/2") && strstr(err.reason, "appeared"), "%s", err.reason);
    /* check reads the documents read at open (at every read of a mount:
     * never every directory); a new file is locate's to find, above. */
    rc = zm__store_check(o.store, &err);
    cr_expect_eq(rc, 0, "a file added: check %d (%s)", rc, err.reason);
    cr_assert_eq(open_store(t.store, &fresh, &err), 0);
    zm__store_identity(fresh.store, &after);
    cr_expect_neq(after.digest, before.digest);
    cr_expect_eq(after.size, before.size + 9);
    json_t *names = strings((const char *const[]){".zarray", "0", "1", "2", NULL});
    expect_list(fresh.store, "after an add", "obs/a", names);
    json_decref(names);
    close_store(&fresh);

    /* A file removed: in the manifest but gone is a change (EIO), not an
     * absent key. */
    char path[512];
    snprintf(path, sizeof path, "%s/obs/a/1", t.store);
    cr_assert_eq(unlink(path), 0);
    rc = zm__store_locate(o.store, "obs/a/1", &stored, &err);
    cr_expect_eq(rc, -EIO, "a file removed: %d", rc);
    cr_expect(strstr(err.reason, "obs/a/1") && strstr(err.reason, "gone"), "%s", err.reason);
    cr_expect_eq(zm__store_locate(o.store, "obs/a/9", &stored, &err), -ENOENT,
                 "in neither: absent");
    /* A directory replaced by a link to its copy after the store opened:
     * never followed. */
    char moved[512];
    snprintf(path, sizeof path, "%s/deep", t.store);
    snprintf(moved, sizeof moved, "%s/deep-moved", t.root);
    cr_assert_eq(rename(path, moved), 0);
    cr_assert_eq(symlink(moved, path), 0);
    rc = zm__store_locate(o.store, "deep/er/and/deeper/file", &stored, &err);
    cr_expect_eq(rc, -EIO, "through a link: %d (%s)", rc, err.reason);
    cr_expect(strstr(err.reason, "deep/er/and/deeper/file") != NULL, "%s", err.reason);
    close_store(&o);

    /* The store's path naming another directory. */
    remove_tree(t.root);
    make_sample(&t);
    cr_assert_eq(open_store(t.store, &o, &err), 0);
    snprintf(moved, sizeof moved, "%s/store-old", t.root);
    cr_assert_eq(rename(t.store, moved), 0);
    cr_assert_eq(mkdir(t.store, 0755), 0);
    rc = zm__store_check(o.store, &err);
    cr_expect_eq(rc, -EIO, "the path names another directory: %d", rc);
    close_store(&o);
    remove_tree(t.root);
}

Test(zarr_store, directory_store_refuses_links_and_special_files)
{
    struct {
        const char *what;
        const char *name;
    } cases[] = {{"a link to a file", "obs/link"},
                 {"a link to a directory", "linked"},
                 {"a dangling link", "obs/a/dangling"},
                 {"a FIFO", "obs/fifo"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tempdir t;
        make_sample(&t);
        char path[512];
        snprintf(path, sizeof path, "%s/%s", t.store, cases[i].name);
        if (i == 0)
            cr_assert_eq(symlink(".zgroup", path), 0);
        else if (i == 1)
            cr_assert_eq(symlink("obs", path), 0);
        else if (i == 2)
            cr_assert_eq(symlink("/nonexistent", path), 0);
        else
            cr_assert_eq(mkfifo(path, 0644), 0);
        opened o;
        zm_err err = {0};
        int rc = open_store(t.store, &o, &err);
        cr_expect_eq(rc, -EINVAL, "%s: %d", cases[i].what, rc);
        cr_expect(strstr(err.reason, cases[i].name) != NULL && strstr(err.reason, t.store),
                  "%s: the reason names the store and the path: %s", cases[i].what, err.reason);
        if (rc == 0)
            close_store(&o);
        remove_tree(t.root);
    }
    /* What is neither a directory nor a regular file is no store. */
    tempdir t;
    make_tempdir(&t);
    char fifo[512];
    snprintf(fifo, sizeof fifo, "%s/fifo", t.root);
    cr_assert_eq(mkfifo(fifo, 0644), 0);
    opened o;
    zm_err err = {0};
    cr_expect_eq(open_store(fifo, &o, &err), -EINVAL);
    cr_expect(strstr(err.reason, "FIFO") != NULL, "%s", err.reason);
    remove_tree(t.root);
}

Test(zarr_store, directory_store_depth_bounded)
{
    tempdir t;
    make_tempdir(&t);
    /* ZM__STORE_DEPTH_MAX directories nested: read; one more: refused. */
    char key[1024] = "";
    for (int i = 0; i < ZM__STORE_DEPTH_MAX; i++)
        strcat(key, i ? "/d" : "d");
    strcat(key, "/f");
    put(&t, key, "at the bottom");
    opened o;
    zm_err err = {0};
    cr_assert_eq(open_store(t.store, &o, &err), 0, "%d levels: %s", ZM__STORE_DEPTH_MAX,
                 err.reason);
    uint8_t *bytes;
    size_t size;
    cr_expect_eq(zm__store_get(o.store, key, 1 << 20, &bytes, &size, NULL, &err), 0, "%s",
                 err.reason);
    free(bytes);
    close_store(&o);
    key[strlen(key) - 2] = '\0';
    strcat(key, "/d/f");
    put(&t, key, "one too deep");
    int rc = open_store(t.store, &o, &err);
    cr_expect_eq(rc, -EINVAL, "%d levels: %d", ZM__STORE_DEPTH_MAX + 1, rc);
    cr_expect(strstr(err.reason, "deeper than") != NULL, "%s", err.reason);
    remove_tree(t.root);
}

Test(zarr_store, zip_check_sees_its_file_change)
{
    generated g;
    generate(&g);
    char source[256], copy[256];
    snprintf(source, sizeof source, "%s/good/stored.zip", g.directory);
    snprintf(copy, sizeof copy, "%s/copy.zip", g.directory);
    size_t size;
    uint8_t *bytes = read_whole(source, &size);
    write_file(copy, bytes, size);
    opened o;
    zm_err err = {0};
    cr_assert_eq(open_store(copy, &o, &err), 0, "%s", err.reason);
    cr_expect_eq(zm__store_check(o.store, &err), 0, "%s", err.reason);
    /* Touched: its mtime is not what it was. */
    struct timespec times[2] = {{.tv_sec = 1600000000}, {.tv_sec = 1600000000}};
    cr_assert_eq(utimensat(AT_FDCWD, copy, times, 0), 0);
    int rc = zm__store_check(o.store, &err);
    cr_expect_eq(rc, -EIO, "%d", rc);
    cr_expect(strstr(err.reason, copy) != NULL, "%s", err.reason);
    close_store(&o);
    free(bytes);
    finish(&g);
}

/* An archive of no members (the end record alone, as Python's zipfile
 * writes one) and a directory of no files are stores with no key (found
 * by fuzz_zip: sorting their no entries passed qsort a NULL array). */
Test(zarr_store, empty_stores_hold_no_key)
{
    tempdir t;
    make_tempdir(&t);
    static const uint8_t end_record[22] = {0x50, 0x4b, 0x05, 0x06};
    char zip[256];
    snprintf(zip, sizeof zip, "%s/empty.zip", t.root);
    write_file(zip, end_record, sizeof end_record);
    const char *paths[] = {zip, t.store};
    for (size_t i = 0; i < 2; i++) {
        opened o;
        zm_err err = {0};
        cr_assert_eq(open_store(paths[i], &o, &err), 0, "%s: %s", paths[i], err.reason);
        zm_strings names;
        cr_expect_eq(zm__store_list(o.store, "", &names, &err), -ENOENT, "%s", paths[i]);
        zm__stored stored;
        cr_expect_eq(zm__store_locate(o.store, "zarr.json", &stored, &err), -ENOENT, "%s",
                     paths[i]);
        cr_expect_eq(zm__store_check(o.store, &err), 0, "%s: %s", paths[i], err.reason);
        close_store(&o);
    }
    remove_tree(t.root);
}
