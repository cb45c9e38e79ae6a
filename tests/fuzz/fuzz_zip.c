/* libFuzzer target: the Zarr reader's zip store (src/source/zarr_store.c),
 * whose end of central directory, zip64 records, central directory and
 * local headers are read by hand.
 *
 * Input: a zip file's bytes, nothing before or after them. They are
 * written to a memfd and opened with zm__store_open; a store that opens is
 * walked from "" with zm__store_list (every prefix it names, at most
 * WALK_MAX of them), and every key found is located, read whole twice and
 * in a few parts with zm__store_read, and got with zm__store_get under a
 * small limit and a large one.
 *
 * Properties (besides no crash, leak or UB): every failure is a negative
 * errno value the header allows for the call, with a one-line reason; a
 * listing is sorted bytewise, each name once, none empty or holding '/',
 * and every name it gives is a key or a prefix with something below it;
 * a key's bytes appear in the file (names come from its central
 * directory); a located member lies within the file, after a local header
 * that can hold its name; a STORED member's bytes are the file's bytes at
 * its offset, its parts always read, and its whole value reads exactly
 * when the file's bytes have the central directory's CRC-32; a DEFLATED
 * member reads exactly when zlib's one-shot raw inflate of its bytes ends
 * at its uncompressed size with that CRC-32, giving the same bytes; two
 * whole reads agree; a part is the whole value's bytes (or fails with
 * it); reads past the value fail with -EIO; zm__store_get gives the whole
 * read's bytes, NUL-terminated, or -EFBIG past its limit; the bytes read
 * are counted as the header says; keys no store can hold ("", "/a",
 * "a/../b") are -ENOENT; zm__store_check passes on the unchanged file and
 * the identity's size is the file's.
 */
#include <errno.h>
#include <stdbool.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

#include "fuzz.h"
#include "source/zarr_store.h"

/* Bounds on the work one input makes: prefixes listed, and bytes read or
 * inflated in all (a deflated member may claim 1032 times its size). */
#define WALK_MAX     2048
#define DEPTH_MAX    64
#define BYTES_BUDGET ((uint64_t)256 << 20)
#define VALUE_MAX    ((uint64_t)32 << 20)
#define SMALL_LIMIT  64

typedef struct walk {
    zm__store *store;
    const uint8_t *data;
    size_t size;
    unsigned prefixes;
    uint64_t budget;
} walk;

static int file_fd = -1;

static void check_rc(int rc, const zm_err *err, const int *allowed, size_t count, const char *what)
{
    if (rc != 0)
        zm_fuzz_check_failure(rc, err, allowed, count, what);
}

/* zlib's one-shot raw inflate of in into exactly raw bytes, with nothing
 * more to give (a buffer one byte longer is not filled), and its CRC-32.
 * 1 when the stream ends there and the CRC-32 matches. */
static int reference_inflate(const uint8_t *in, uint64_t in_size, uint8_t *out, uint64_t raw,
                             uint32_t crc)
{
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (inflateInit2(&zs, -MAX_WBITS) != Z_OK)
        abort();
    zs.next_in = (Bytef *)in;
    zs.avail_in = (uInt)in_size;
    zs.next_out = out;
    zs.avail_out = (uInt)(raw + 1);
    int z = inflate(&zs, Z_FINISH);
    uint64_t produced = zs.total_out;
    inflateEnd(&zs);
    return z == Z_STREAM_END && produced == raw && (uint32_t)crc32_z(0, out, (size_t)raw) == crc;
}

/* The names of one listing: sorted bytewise (shorter first where one is
 * the other's start), each once, none empty, none holding '/' or NUL. */
static void check_listing(const zm_strings *names, const char *prefix)
{
    for (size_t i = 0; i < names->count; i++) {
        const char *s = names->bytes + names->offsets[i];
        size_t n = (size_t)(names->offsets[i + 1] - names->offsets[i]);
        ZM_FUZZ_CHECK(names->offsets[i] <= names->offsets[i + 1], "%s: offsets go back at %zu",
                      prefix, i);
        ZM_FUZZ_CHECK(n > 0, "listing \"%s\": name %zu is empty", prefix, i);
        ZM_FUZZ_CHECK(memchr(s, '/', n) == NULL && memchr(s, '\0', n) == NULL,
                      "listing \"%s\": name %zu holds '/' or NUL", prefix, i);
        if (i == 0)
            continue;
        const char *p = names->bytes + names->offsets[i - 1];
        size_t m = (size_t)(names->offsets[i] - names->offsets[i - 1]);
        int c = memcmp(p, s, m < n ? m : n);
        ZM_FUZZ_CHECK(c < 0 || (c == 0 && m < n),
                      "listing \"%s\": \"%.*s\" then \"%.*s\" (unsorted or twice)", prefix, (int)m,
                      p, (int)n, s);
    }
    ZM_FUZZ_CHECK(names->bytes[names->offsets[names->count]] == '\0',
                  "listing \"%s\": not NUL-terminated", prefix);
}

/* One part [offset, offset + length) of a located key, against the whole
 * value (whole_rc, whole: its bytes when 0). */
static void check_part(walk *w, const char *key, const zm__stored *st, int whole_rc,
                       const uint8_t *whole, uint64_t offset, uint64_t length)
{
    uint8_t *part = malloc(length ? (size_t)length : 1);
    if (part == NULL)
        abort();
    uint64_t counted = 0;
    zm_err err;
    zm_err_clear(&err);
    int rc = zm__store_read(w->store, key, st, offset, part, (size_t)length, &counted, &err);
    static const int allowed[] = {-EIO, -ENOMEM};
    check_rc(rc, &err, allowed, 2, "zm__store_read (a part)");
    if (!st->deflated && offset == 0 && length == st->size) {
        /* The whole value, read as a whole read is (its CRC-32 checked). */
        ZM_FUZZ_CHECK(rc == whole_rc, "%s: the whole value as a part reads %d, whole %d", key, rc,
                      whole_rc);
    } else if (!st->deflated) {
        /* A part of a stored member is never checked against the CRC-32: its
         * bytes lie in the file, so it always reads. */
        ZM_FUZZ_CHECK(rc == 0, "%s: bytes [%llu, +%llu) of a stored member: %s", key,
                      (unsigned long long)offset, (unsigned long long)length, err.reason);
        ZM_FUZZ_CHECK(length == 0 || memcmp(part, w->data + st->offset + offset, length) == 0,
                      "%s: a part of a stored member is not the file's bytes", key);
        ZM_FUZZ_CHECK(counted == length, "%s: %llu bytes read counted for a part of %llu", key,
                      (unsigned long long)counted, (unsigned long long)length);
    } else if (rc != -ENOMEM && whole_rc != -ENOMEM) {
        /* Deflated: the whole member is inflated (and checked) for any part. */
        ZM_FUZZ_CHECK((rc == 0) == (whole_rc == 0), "%s: a part reads %d, the whole %d", key, rc,
                      whole_rc);
    }
    if (rc == 0 && whole_rc == 0)
        ZM_FUZZ_CHECK(length == 0 || memcmp(part, whole + offset, length) == 0,
                      "%s: bytes [%llu, +%llu) are not the whole value's", key,
                      (unsigned long long)offset, (unsigned long long)length);
    free(part);
}

/* Reads past the value fail before anything is written (into a buffer of
 * the length asked: ASan sees a write past it). */
static void check_past_end(walk *w, const char *key, const zm__stored *st)
{
    const uint64_t raw = st->raw_size;
    const uint64_t cases[][2] = {{raw, 1}, {raw + 1, 0}, {UINT64_MAX, 1}, {1, raw}, {0, raw + 1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint64_t offset = cases[i][0], length = cases[i][1];
        if (offset <= raw && length <= raw - offset)
            continue; /* {1, raw} of an empty value; {raw + 1, 0} wrapped past UINT64_MAX */
        uint8_t *buffer = malloc(length ? (size_t)length : 1);
        if (buffer == NULL)
            abort();
        zm_err err;
        zm_err_clear(&err);
        uint64_t counted = 0;
        int rc = zm__store_read(w->store, key, st, offset, buffer, (size_t)length, &counted, &err);
        static const int allowed[] = {-EIO};
        ZM_FUZZ_CHECK(rc != 0, "%s: bytes [%llu, +%llu) past its %llu read", key,
                      (unsigned long long)offset, (unsigned long long)length,
                      (unsigned long long)raw);
        zm_fuzz_check_failure(rc, &err, allowed, 1, "zm__store_read (past the end)");
        ZM_FUZZ_CHECK(counted == 0, "%s: a refused read counted %llu bytes", key,
                      (unsigned long long)counted);
        free(buffer);
    }
}

/* zm__store_get under limit, against the whole read. */
static void check_get(walk *w, const char *key, const zm__stored *st, size_t limit, int whole_rc,
                      const uint8_t *whole)
{
    uint8_t *bytes = NULL;
    size_t size = 0;
    uint64_t counted = 0;
    zm_err err;
    zm_err_clear(&err);
    int rc = zm__store_get(w->store, key, limit, &bytes, &size, &counted, &err);
    static const int allowed[] = {-EIO, -ENOMEM, -EFBIG};
    check_rc(rc, &err, allowed, 3, "zm__store_get");
    if (st->raw_size > limit) {
        ZM_FUZZ_CHECK(rc == -EFBIG, "%s: %llu bytes got under a limit of %zu: %d", key,
                      (unsigned long long)st->raw_size, limit, rc);
    } else if (rc != -ENOMEM && whole_rc != -ENOMEM) {
        ZM_FUZZ_CHECK(rc == whole_rc, "%s: zm__store_get %d, zm__store_read %d", key, rc, whole_rc);
    }
    if (rc == 0) {
        ZM_FUZZ_CHECK(size == st->raw_size, "%s: got %zu bytes of %llu", key, size,
                      (unsigned long long)st->raw_size);
        ZM_FUZZ_CHECK(bytes[size] == '\0', "%s: got bytes not NUL-terminated", key);
        if (whole_rc == 0)
            ZM_FUZZ_CHECK(size == 0 || memcmp(bytes, whole, size) == 0,
                          "%s: got other bytes than read", key);
    } else {
        ZM_FUZZ_CHECK(bytes == NULL && size == 0, "%s: a failed get left a value", key);
    }
    free(bytes);
}

/* A located key: where it lies, and every way of reading it. */
static void check_located(walk *w, const char *key, const zm__stored *st)
{
    const size_t key_length = strlen(key);
    ZM_FUZZ_CHECK(!st->owned, "%s: a zip member's descriptor is its lookup's", key);
    ZM_FUZZ_CHECK(st->fd == file_fd, "%s: read from descriptor %d, not the store's %d", key, st->fd,
                  file_fd);
    ZM_FUZZ_CHECK(st->offset <= w->size && st->size <= w->size - st->offset,
                  "%s: %llu bytes at offset %llu, past the file's %zu", key,
                  (unsigned long long)st->size, (unsigned long long)st->offset, w->size);
    ZM_FUZZ_CHECK(st->offset >= 30 + key_length,
                  "%s: data at offset %llu leaves no room for its local header", key,
                  (unsigned long long)st->offset);
    if (!st->deflated)
        ZM_FUZZ_CHECK(st->raw_size == st->size, "%s: stored, yet %llu bytes become %llu", key,
                      (unsigned long long)st->size, (unsigned long long)st->raw_size);
    const uint64_t raw = st->raw_size;
    if (raw > VALUE_MAX || raw * 6 > w->budget)
        return;
    w->budget -= raw * 6;

    uint8_t *whole[2];
    int rc[2];
    uint64_t counted[2] = {0, 0};
    for (int i = 0; i < 2; i++) {
        whole[i] = malloc(raw ? (size_t)raw : 1);
        if (whole[i] == NULL)
            abort();
        zm_err err;
        zm_err_clear(&err);
        rc[i] = zm__store_read(w->store, key, st, 0, whole[i], (size_t)raw, &counted[i], &err);
        static const int allowed[] = {-EIO, -ENOMEM};
        check_rc(rc[i], &err, allowed, 2, "zm__store_read (whole)");
    }
    if (rc[0] != -ENOMEM && rc[1] != -ENOMEM)
        ZM_FUZZ_CHECK(rc[0] == rc[1], "%s: read whole twice: %d, then %d", key, rc[0], rc[1]);
    if (rc[0] == 0 && rc[1] == 0)
        ZM_FUZZ_CHECK(raw == 0 || memcmp(whole[0], whole[1], raw) == 0,
                      "%s: read whole twice, other bytes", key);
    if (rc[0] == 0)
        ZM_FUZZ_CHECK(counted[0] == st->size, "%s: a whole read counted %llu bytes, not its %llu",
                      key, (unsigned long long)counted[0], (unsigned long long)st->size);

    const uint8_t *file_bytes = w->data + st->offset;
    if (!st->deflated) {
        bool crc_ok = (uint32_t)crc32_z(0, file_bytes, (size_t)st->size) == st->crc32;
        ZM_FUZZ_CHECK((rc[0] == 0) == crc_ok, "%s: stored, CRC-32 %s, whole read %d", key,
                      crc_ok ? "matches" : "differs", rc[0]);
        if (rc[0] == 0)
            ZM_FUZZ_CHECK(raw == 0 || memcmp(whole[0], file_bytes, raw) == 0,
                          "%s: a stored member read is not the file's bytes", key);
    } else if (rc[0] != -ENOMEM) {
        uint8_t *reference = malloc((size_t)raw + 1);
        if (reference == NULL)
            abort();
        int ok = reference_inflate(file_bytes, st->size, reference, raw, st->crc32);
        ZM_FUZZ_CHECK((rc[0] == 0) == ok, "%s: deflated: read %d, zlib's one-shot inflate %s", key,
                      rc[0], ok ? "ends at its size with its CRC-32" : "does not");
        if (ok && rc[0] == 0)
            ZM_FUZZ_CHECK(raw == 0 || memcmp(whole[0], reference, raw) == 0,
                          "%s: inflated other bytes than zlib's", key);
        free(reference);
    }

    /* Parts: the start, the second half, the last byte, nothing at the end;
     * a deflated member inflates whole for each, so two of them. */
    const uint64_t parts[][2] = {{raw / 2, raw - raw / 2},
                                 {0, raw < 7 ? raw : 7},
                                 {raw ? raw - 1 : 0, raw ? 1 : 0},
                                 {raw, 0}};
    size_t part_count = st->deflated ? 2 : sizeof parts / sizeof parts[0];
    for (size_t i = 0; i < part_count; i++)
        check_part(w, key, st, rc[0], whole[0], parts[i][0], parts[i][1]);
    check_past_end(w, key, st);
    check_get(w, key, st, SMALL_LIMIT, rc[0], whole[0]);
    if (raw > SMALL_LIMIT)
        check_get(w, key, st, (size_t)raw, rc[0], whole[0]);
    free(whole[0]);
    free(whole[1]);
}

/* key as a key: 1 when the store has it (located, or refused as a member
 * it cannot read), 0 when it has none. */
static int visit_key(walk *w, const char *key)
{
    zm__stored st;
    zm_err err;
    zm_err_clear(&err);
    int rc = zm__store_locate(w->store, key, &st, &err);
    static const int allowed[] = {-ENOENT, -EIO, -ENOTSUP, -ENOMEM};
    check_rc(rc, &err, allowed, 4, "zm__store_locate");
    if (rc != 0) {
        ZM_FUZZ_CHECK(st.fd == -1 && !st.owned, "%s: a failed lookup left a descriptor", key);
        if (rc == -ENOMEM)
            return 1;
        /* zm__store_get looks the key up the same way. */
        uint8_t *bytes = NULL;
        size_t size = 0;
        zm_err get_err;
        zm_err_clear(&get_err);
        int got = zm__store_get(w->store, key, SIZE_MAX, &bytes, &size, NULL, &get_err);
        ZM_FUZZ_CHECK(got == rc, "%s: zm__store_locate %d, zm__store_get %d", key, rc, got);
        ZM_FUZZ_CHECK(bytes == NULL, "%s: a failed get left a value", key);
        return rc != -ENOENT;
    }
    ZM_FUZZ_CHECK(memmem(w->data, w->size, key, strlen(key)) != NULL,
                  "key \"%s\" is spelled nowhere in the file", key);
    check_located(w, key, &st);
    zm__stored_done(&st);
    return 1;
}

/* The names below prefix (listed already: names), each a key or a prefix. */
static void visit_prefix(walk *w, const char *prefix, const zm_strings *names, unsigned depth)
{
    check_listing(names, prefix);
    size_t prefix_length = strlen(prefix);
    for (size_t i = 0; i < names->count && w->prefixes < WALK_MAX; i++) {
        size_t n = (size_t)(names->offsets[i + 1] - names->offsets[i]);
        char *child = malloc(prefix_length + n + 2);
        if (child == NULL)
            abort();
        if (prefix_length > 0)
            sprintf(child, "%s/%.*s", prefix, (int)n, names->bytes + names->offsets[i]);
        else
            sprintf(child, "%.*s", (int)n, names->bytes + names->offsets[i]);
        int is_key = visit_key(w, child);
        zm_strings below;
        zm_err err;
        zm_err_clear(&err);
        w->prefixes++;
        int rc = zm__store_list(w->store, child, &below, &err);
        static const int allowed[] = {-ENOENT, -ENOMEM};
        check_rc(rc, &err, allowed, 2, "zm__store_list");
        ZM_FUZZ_CHECK(is_key || rc != -ENOENT,
                      "listed \"%s\" is neither a key nor a prefix of any (%s)", child, err.reason);
        if (rc == 0) {
            /* The same listing with a '/' at its end. */
            char *slashed = malloc(strlen(child) + 2);
            if (slashed == NULL)
                abort();
            sprintf(slashed, "%s/", child);
            zm_strings again;
            zm_err_clear(&err);
            int rc2 = zm__store_list(w->store, slashed, &again, &err);
            ZM_FUZZ_CHECK(rc2 == 0 && again.count == below.count &&
                              again.offsets[again.count] == below.offsets[below.count] &&
                              memcmp(again.bytes, below.bytes, below.offsets[below.count]) == 0,
                          "listing \"%s\" and \"%s\" differ", child, slashed);
            zm_strings_free(&again);
            free(slashed);
            if (depth < DEPTH_MAX)
                visit_prefix(w, child, &below, depth + 1);
            zm_strings_free(&below);
        }
        free(child);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (file_fd < 0 && (file_fd = memfd_create("fuzz_zip", MFD_CLOEXEC)) < 0)
        abort();
    if (ftruncate(file_fd, 0) != 0)
        abort();
    for (size_t done = 0; done < size;) {
        ssize_t n = pwrite(file_fd, data + done, size - done, (off_t)done);
        if (n <= 0)
            abort();
        done += (size_t)n;
    }

    zm__store *store = NULL;
    zm_err err;
    zm_err_clear(&err);
    int rc = zm__store_open(file_fd, "fuzz.zip", &store, &err);
    if (rc != 0) {
        /* Everything open reads lies within the file: never -EIO. */
        static const int allowed[] = {-EINVAL, -ENOMEM};
        zm_fuzz_check_failure(rc, &err, allowed, 2, "zm__store_open");
        ZM_FUZZ_CHECK(store == NULL, "a failed open gave a store");
        return 0;
    }
    ZM_FUZZ_CHECK(zm__store_get_kind(store) == ZM__STORE_ZIP, "a regular file opened as %d",
                  (int)zm__store_get_kind(store));
    zm_source_identity identity;
    zm__store_identity(store, &identity);
    ZM_FUZZ_CHECK((uint64_t)identity.size == size, "identity: %lld bytes, the file %zu",
                  (long long)identity.size, size);

    walk w = {store, data, size, 0, BYTES_BUDGET};
    zm_strings names;
    zm_err_clear(&err);
    rc = zm__store_list(store, "", &names, &err);
    static const int list_allowed[] = {-ENOENT, -ENOMEM};
    check_rc(rc, &err, list_allowed, 2, "zm__store_list (root)");
    if (rc == 0) {
        visit_prefix(&w, "", &names, 0);
        zm_strings_free(&names);
    }

    /* Keys no store holds. */
    static const char *const not_keys[] = {"",  "/",  "/a",     "a/",  "a//b",
                                           ".", "..", "a/../b", "./a", "a/."};
    for (size_t i = 0; i < sizeof not_keys / sizeof not_keys[0]; i++) {
        zm__stored st;
        zm_err_clear(&err);
        rc = zm__store_locate(store, not_keys[i], &st, &err);
        static const int allowed[] = {-ENOENT};
        ZM_FUZZ_CHECK(rc != 0, "\"%s\" located", not_keys[i]);
        zm_fuzz_check_failure(rc, &err, allowed, 1, "zm__store_locate (no key)");
    }
    zm_err_clear(&err);
    rc = zm__store_list(store, "a/../b", &names, &err);
    ZM_FUZZ_CHECK(rc == -ENOENT, "\"a/../b\" listed: %d", rc);

    zm_err_clear(&err);
    rc = zm__store_check(store, &err);
    ZM_FUZZ_CHECK(rc == 0, "the unchanged file fails its check: %s", err.reason);
    zm__store_close(store);
    return 0;
}
