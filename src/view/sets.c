/* Sets of cells: a user's own cells, which every method can then run over.
 * From a file (a Cellucid cell set, or obs names one a line) or from an obs
 * column's values (where/KEY/VALUES). A set names cells by original position
 * throughout, as Cellucid does, whatever order a priority-ordered file
 * stores its rows in: the same cells are the same set in either file. */
#include "zarrmount/view.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "zarrmount/text.h"
#include "view/view_internal.h"
#include "zarrmount/select.h"

/* ---- A set ---------------------------------------------------------------------- */

zm_view_set *zm_view_set_ref(zm_view_set *set)
{
    if (set != NULL)
        atomic_fetch_add_explicit(&set->refs, 1, memory_order_relaxed);
    return set;
}

void zm_view_set_unref(zm_view_set *set)
{
    if (set == NULL || atomic_fetch_sub_explicit(&set->refs, 1, memory_order_acq_rel) != 1)
        return;
    free(set->positions);
    free(set->name);
    json_decref(set->record);
    free(set);
}

/* A set of positions (taken: freed on failure too), named name, its digest
 * made; the record is the caller's to add. */
static int set_new(uint32_t *positions, uint64_t count, uint64_t n, const char *name,
                   zm_view_set **out, zm_err *err)
{
    *out = NULL;
    zm_view_set *set = calloc(1, sizeof *set);
    char *copy = strdup(name);
    if (set == NULL || copy == NULL) {
        free(set);
        free(copy);
        free(positions);
        return zm_err_set(err, -ENOMEM, "out of memory for the set %s", name);
    }
    atomic_init(&set->refs, 1);
    set->positions = positions;
    set->count = count;
    set->n = n;
    set->name = copy;
    zm_cellset_digest(positions, count, n, set->digest);
    *out = set;
    return 0;
}

/* ---- Cells as bits of original positions ------------------------------------------ */

static uint64_t *bits_new(uint64_t n)
{
    return calloc(n / 64 + 1, sizeof(uint64_t));
}

/* Sets bit p; returns whether it was set already. */
static int bit_test_set(uint64_t *bits, uint64_t p)
{
    uint64_t mask = (uint64_t)1 << (p % 64);
    int was = (bits[p / 64] & mask) != 0;
    bits[p / 64] |= mask;
    return was;
}

/* The set bits' positions, ascending: O(n / 64 + count). */
static int positions_of(const uint64_t *bits, uint64_t n, uint32_t **positions, uint64_t *count,
                        zm_err *err)
{
    uint64_t words = n / 64 + 1, total = 0;
    for (uint64_t w = 0; w < words; w++)
        total += (uint64_t)__builtin_popcountll(bits[w]);
    uint32_t *out = malloc((total ? total : 1) * sizeof *out);
    if (out == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory for a set of %" PRIu64 " cells", total);
    uint64_t at = 0;
    for (uint64_t w = 0; w < words; w++)
        for (uint64_t word = bits[w]; word != 0; word &= word - 1)
            out[at++] = (uint32_t)(w * 64 + (uint64_t)__builtin_ctzll(word));
    *positions = out;
    *count = total;
    return 0;
}

/* The original position of stored row r: a priority-ordered file's
 * permutation, else r itself. */
static uint64_t original_of(const zm_priority *priority, uint64_t row)
{
    return priority->verified ? priority->original[row] : row;
}

/* ---- Text ------------------------------------------------------------------------- */

/* Whether bytes are UTF-8 as JSON takes it (jansson's rule: no overlong
 * forms, no surrogates, nothing past U+10FFFF; U+0000 allowed). */
static int is_utf8(const char *text, size_t length)
{
    const unsigned char *s = (const unsigned char *)text;
    for (size_t i = 0; i < length;) {
        unsigned c = s[i];
        size_t extra = c < 0x80             ? 0
                       : (c & 0xE0) == 0xC0 ? 1
                       : (c & 0xF0) == 0xE0 ? 2
                       : (c & 0xF8) == 0xF0 ? 3
                                            : 4;
        if (extra == 4 || (extra > 0 && i + extra >= length))
            return 0;
        uint32_t cp = extra == 0 ? c : c & (0x3Fu >> extra);
        for (size_t j = 1; j <= extra; j++) {
            if ((s[i + j] & 0xC0) != 0x80)
                return 0;
            cp = cp << 6 | (s[i + j] & 0x3Fu);
        }
        static const uint32_t least[4] = {0, 0x80, 0x800, 0x10000};
        if (cp < least[extra] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        i += extra + 1;
    }
    return 1;
}

/* Text for a message: at most 80 bytes of it, control bytes as '?', cut
 * with "..." (never inside a UTF-8 sequence). */
static const char *quoted(const char *text, size_t length, char out[96])
{
    size_t o = 0, limit = 80;
    for (size_t i = 0; i < length && o < limit; i++) {
        unsigned char c = (unsigned char)text[i];
        out[o++] = c < 0x20 || c == 0x7F ? '?' : (char)c;
    }
    if (o < length) {
        while (o > 0 && ((unsigned char)out[o - 1] & 0xC0) == 0x80)
            o--; /* continuation bytes of a sequence cut short */
        if (o > 0 && (unsigned char)out[o - 1] >= 0xC0)
            o--;
        memcpy(out + o, "...", 3);
        o += 3;
    }
    out[o] = '\0';
    return out;
}

/* The order strata names plain values in (code point order: UTF-8's byte
 * order, a prefix first), which a string column's names are sorted by. */
static int compare_bytes(const char *a, size_t alen, const char *b, size_t blen)
{
    size_t common = alen < blen ? alen : blen;
    int c = common ? memcmp(a, b, common) : 0;
    return c != 0 ? c : (alen > blen) - (alen < blen);
}

static const char *string_at(const zm_strings *s, uint64_t i, size_t *length)
{
    *length = (size_t)(s->offsets[i + 1] - s->offsets[i]);
    return s->bytes + s->offsets[i];
}

/* ---- Reading a set file --------------------------------------------------------- */

static int changed(const char *path, zm_err *err)
{
    return zm_err_set(err, -EAGAIN, "%s changed while read: it is read again when it changes",
                      path);
}

/* The whole file, read in one pass and NUL-terminated: refused past
 * ZM_VIEW_SET_FILE_MAX, or when its size, time or inode moved while read
 * (a set is never taken half-written). */
static int read_whole(const char *path, char **out, size_t *size, zm_err *err)
{
    *out = NULL;
    *size = 0;
    /* O_NONBLOCK: a FIFO put in the directory does not hang the open. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0)
        return zm_err_set(err, -errno, "cannot open %s: %s", path, strerror(errno));
    struct stat before, after;
    char *buffer = NULL;
    size_t got = 0;
    int rc = 0;
    if (fstat(fd, &before) != 0) {
        rc = zm_err_set(err, -errno, "cannot stat %s: %s", path, strerror(errno));
    } else if (!S_ISREG(before.st_mode)) {
        rc = zm_err_set(err, -EINVAL, "%s is not a regular file", path);
    } else if ((uint64_t)before.st_size > ZM_VIEW_SET_FILE_MAX) {
        rc = zm_err_set(err, -EFBIG,
                        "%s holds %" PRIu64 " bytes: a set file may hold at most %" PRIu64
                        " (1 GiB)",
                        path, (uint64_t)before.st_size, ZM_VIEW_SET_FILE_MAX);
    } else if ((buffer = malloc((size_t)before.st_size + 1)) == NULL) {
        rc = zm_err_set(err, -ENOMEM, "out of memory reading %s", path);
    }
    size_t want = rc == 0 ? (size_t)before.st_size : 0;
    while (rc == 0 && got < want) {
        ssize_t r = read(fd, buffer + got, want - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            rc = zm_err_set(err, -errno, "cannot read %s: %s", path, strerror(errno));
        else if (r == 0)
            rc = changed(path, err); /* shorter than it was */
        else
            got += (size_t)r;
    }
    if (rc == 0) {
        char extra;
        ssize_t r;
        do
            r = read(fd, &extra, 1);
        while (r < 0 && errno == EINTR);
        if (r < 0)
            rc = zm_err_set(err, -errno, "cannot read %s: %s", path, strerror(errno));
        else if (r > 0)
            rc = changed(path, err); /* longer than it was */
    }
    if (rc == 0 && fstat(fd, &after) != 0)
        rc = zm_err_set(err, -errno, "cannot stat %s: %s", path, strerror(errno));
    if (rc == 0 && (after.st_size != before.st_size || after.st_ino != before.st_ino ||
                    after.st_mtim.tv_sec != before.st_mtim.tv_sec ||
                    after.st_mtim.tv_nsec != before.st_mtim.tv_nsec))
        rc = changed(path, err);
    close(fd);
    if (rc != 0) {
        free(buffer);
        return rc;
    }
    buffer[got] = '\0';
    *out = buffer;
    *size = got;
    return 0;
}

/* ---- NAME.json: a Cellucid cell set ----------------------------------------------- */

static int refuse(zm_err *err, const char *path, const char *why)
{
    return zm_err_set(err, -EINVAL,
                      "%s: %s (a Cellucid cell set is {\"cells\": {\"kept\": base64, "
                      "\"digest\": 16 hex digits, \"spec\": {\"nObs\": N, ...}}})",
                      path, why);
}

static int cells_of_cellucid(zm_source *source, const char *path, const char *text, size_t size,
                             uint32_t **positions, uint64_t *count, zm_err *err)
{
    uint64_t n = zm_source_n_obs(source);
    json_error_t error;
    json_t *root = json_loadb(text, size, JSON_REJECT_DUPLICATES, &error);
    if (root == NULL)
        return zm_err_set(err, -EINVAL, "%s is not JSON: %s (line %d, column %d)", path, error.text,
                          error.line, error.column);
    json_t *cells = json_object_get(root, "cells");
    json_t *kept = json_object_get(cells, "kept");
    json_t *digest = json_object_get(cells, "digest");
    json_t *spec = json_object_get(cells, "spec");
    json_t *n_obs = json_object_get(spec, "nObs");
    int rc = 0;
    char shown[96];
    if (!json_is_object(cells))
        rc = refuse(err, path, "it has no object \"cells\"");
    else if (!json_is_string(kept))
        rc = refuse(err, path, "cells.kept is not a string");
    else if (!json_is_string(digest))
        rc = refuse(err, path, "cells.digest is not a string");
    else if (!json_is_object(spec))
        rc = refuse(err, path, "cells.spec is not an object");
    else if (!json_is_integer(n_obs) || json_integer_value(n_obs) < 0)
        rc = refuse(err, path, "cells.spec.nObs is not a count of cells");
    else if ((uint64_t)json_integer_value(n_obs) != n)
        rc = zm_err_set(err, -EINVAL,
                        "%s is a set of %" PRIu64 " cells (cells.spec.nObs): this "
                        "source has %" PRIu64,
                        path, (uint64_t)json_integer_value(n_obs), n);
    uint8_t *bytes = NULL;
    size_t length = 0;
    if (rc == 0) {
        rc = zm_base64_decode(json_string_value(kept), json_string_length(kept), &bytes, &length);
        if (rc == -EINVAL)
            rc = refuse(err, path, "cells.kept is not base64 (RFC 4648, padded)");
        else if (rc != 0)
            rc = zm_err_set(err, rc, "out of memory reading %s", path);
    }
    *positions = NULL;
    if (rc == 0) {
        zm_err why = {0};
        rc = zm_cellset_decode(bytes, length, n, positions, count, &why);
        if (rc != 0)
            rc = zm_err_set(err, rc,
                            "%s: cells.kept names no set of this source's %" PRIu64 " cells: %s",
                            path, n, why.reason);
        else if (*count == 0)
            rc = zm_err_set(err, -EINVAL, "%s holds no cell", path);
    }
    if (rc == 0) {
        char computed[17];
        zm_cellset_digest(*positions, *count, n, computed);
        if (json_string_length(digest) != 16 || strcmp(json_string_value(digest), computed) != 0)
            rc = zm_err_set(err, -EINVAL,
                            "%s: cells.digest \"%s\" is not the digest of the cells "
                            "it keeps (%s): its cells or its digest were changed",
                            path,
                            quoted(json_string_value(digest), json_string_length(digest), shown),
                            computed);
    }
    free(bytes);
    json_decref(root);
    if (rc != 0) {
        free(*positions);
        *positions = NULL;
    }
    return rc;
}

/* ---- NAME.txt: obs names ---------------------------------------------------------- */

/* obs's index as names: strings as stored; integers (a range index) as
 * decimal text, as anndata names them. */
static int obs_names(zm_source *source, uint64_t n, zm_strings *out, zm_err *err)
{
    memset(out, 0, sizeof *out);
    const zm_element *obs = zm_source_find(source, "obs");
    const zm_element *index = obs != NULL && obs->kind == ZM_ELEMENT_DATAFRAME ? obs->index : NULL;
    if (index == NULL)
        return zm_err_set(err, -EINVAL, "obs has no index: the source's cells have no names");
    if (index->rank != 1 || index->shape[0] != n)
        return zm_err_set(err, -EINVAL, "obs's index is not one name a cell");
    if (index->kind == ZM_ELEMENT_STRING_ARRAY) {
        int rc = zm_array_read_strings(source, index->values, NULL, 0, out, err);
        if (rc == 0 && out->count != n) {
            zm_strings_free(out);
            return zm_err_set(err, -EIO, "obs's index holds %zu names for %" PRIu64 " cells",
                              out->count, n);
        }
        return rc;
    }
    zm_dtype t = index->kind == ZM_ELEMENT_ARRAY ? zm_array_describe(index->values)->dtype
                                                 : (zm_dtype){ZM_TYPE_FLOAT, 8};
    if (t.type_class != ZM_TYPE_INT && t.type_class != ZM_TYPE_UINT)
        return zm_err_set(err, -EINVAL, "obs's index holds %s values, not names", zm_dtype_name(t));
    uint8_t *raw = malloc((n ? n : 1) * t.size);
    out->offsets = malloc((n + 1) * sizeof *out->offsets);
    out->bytes = malloc(n * 21 + 1);
    int rc = raw && out->offsets && out->bytes
                 ? zm_array_read_rows(source, index->values, 0, n, raw, err)
                 : zm_err_set(err, -ENOMEM, "out of memory naming %" PRIu64 " cells", n);
    uint64_t at = 0;
    for (uint64_t i = 0; rc == 0 && i < n; i++) {
        out->offsets[i] = at;
        at += (uint64_t)sprintf(out->bytes + at, "%" PRId64, zm_dtype_integer(t, raw, i));
    }
    free(raw);
    if (rc != 0) {
        zm_strings_free(out);
        return rc;
    }
    out->offsets[n] = at;
    out->count = n;
    return 0;
}

/* The cells by name: open addressing over stored rows, hashed with a
 * seed of this process's (names come from files: none can be chosen to
 * collide), and which names more than one cell share. */
#define NO_ROW UINT32_MAX

typedef struct name_table {
    const zm_strings *names;
    uint32_t *slots; /* a stored row, or NO_ROW */
    uint64_t mask;
    uint64_t *shared; /* bits by stored row: another cell has its name */
    XXH64_hash_t seed;
} name_table;

static void table_free(name_table *t)
{
    free(t->slots);
    free(t->shared);
    t->slots = NULL;
    t->shared = NULL;
}

static int same_name(const zm_strings *names, uint32_t row, const char *text, size_t length)
{
    size_t l;
    const char *s = string_at(names, row, &l);
    return l == length && (length == 0 || memcmp(s, text, length) == 0);
}

/* The slot holding text's row, or the empty slot where it would go. */
static uint64_t table_slot(const name_table *t, const char *text, size_t length)
{
    uint64_t at = XXH3_64bits_withSeed(text, length, t->seed) & t->mask;
    while (t->slots[at] != NO_ROW && !same_name(t->names, t->slots[at], text, length))
        at = (at + 1) & t->mask;
    return at;
}

static int table_build(name_table *t, const zm_strings *names, uint64_t n, zm_err *err)
{
    memset(t, 0, sizeof *t);
    t->names = names;
    if (getrandom(&t->seed, sizeof t->seed, GRND_NONBLOCK) != (ssize_t)sizeof t->seed)
        t->seed = (XXH64_hash_t)(uintptr_t)t ^ 0x9e3779b97f4a7c15u;
    uint64_t slots = 16;
    while (slots < n + n / 2) /* at most two thirds full */
        slots <<= 1;
    t->mask = slots - 1;
    t->slots = malloc(slots * sizeof *t->slots);
    t->shared = bits_new(n);
    if (t->slots == NULL || t->shared == NULL) {
        table_free(t);
        return zm_err_set(err, -ENOMEM, "out of memory looking up %" PRIu64 " cells' names", n);
    }
    memset(t->slots, 0xFF, slots * sizeof *t->slots);
    for (uint64_t row = 0; row < n; row++) {
        size_t length;
        const char *text = string_at(names, row, &length);
        uint64_t at = table_slot(t, text, length);
        if (t->slots[at] == NO_ROW)
            t->slots[at] = (uint32_t)row;
        else
            bit_test_set(t->shared, t->slots[at]);
    }
    return 0;
}

/* Lines of a file of names, numbered from 1 (a leading byte order mark is
 * no part of the first). */
typedef struct lines {
    const char *text;
    size_t size, at;
    uint64_t number;
} lines;

static lines lines_of(const char *text, size_t size)
{
    lines l = {text, size, 0, 0};
    if (size >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0)
        l.at = 3;
    return l;
}

/* The next line that is not blank, its trailing "\r" stripped: 1, or 0 at
 * the end. */
static int next_name(lines *l, const char **name, size_t *length)
{
    while (l->at < l->size) {
        const char *start = l->text + l->at;
        const char *end = memchr(start, '\n', l->size - l->at);
        size_t bytes = end ? (size_t)(end - start) : l->size - l->at;
        l->at += bytes + (end != NULL);
        l->number++;
        if (bytes > 0 && start[bytes - 1] == '\r')
            bytes--;
        size_t i = 0;
        while (i < bytes && (start[i] == ' ' || start[i] == '\t'))
            i++;
        if (i == bytes)
            continue; /* blank */
        *name = start;
        *length = bytes;
        return 1;
    }
    return 0;
}

/* The first line naming name (a duplicate's first, for its message). */
static uint64_t first_line_of(const char *text, size_t size, const char *name, size_t length)
{
    lines l = lines_of(text, size);
    const char *line;
    size_t bytes;
    while (next_name(&l, &line, &bytes))
        if (bytes == length && memcmp(line, name, length) == 0)
            return l.number;
    return 0;
}

static int cells_of_names(zm_source *source, const char *path, const char *text, size_t size,
                          uint32_t **positions, uint64_t *count, zm_err *err)
{
    *positions = NULL;
    uint64_t n = zm_source_n_obs(source);
    const zm_priority *priority = zm_source_priority(source);
    zm_strings names;
    int rc = obs_names(source, n, &names, err);
    if (rc != 0)
        return rc;
    name_table table = {0};
    rc = table_build(&table, &names, n, err);
    uint64_t *bits = rc == 0 ? bits_new(n) : NULL;
    if (rc == 0 && bits == NULL)
        rc = zm_err_set(err, -ENOMEM, "out of memory reading %s", path);
    lines l = lines_of(text, size);
    const char *name;
    size_t length;
    uint64_t named = 0;
    char shown[96];
    while (rc == 0 && next_name(&l, &name, &length)) {
        uint32_t row = table.slots[table_slot(&table, name, length)];
        if (row == NO_ROW) {
            rc = zm_err_set(err, -EINVAL, "%s: line %" PRIu64 ": no cell is named \"%s\"", path,
                            l.number, quoted(name, length, shown));
        } else if (table.shared[row / 64] >> (row % 64) & 1) {
            rc = zm_err_set(err, -EINVAL,
                            "%s: line %" PRIu64 ": \"%s\" names more than one cell "
                            "(the source's obs names are not unique)",
                            path, l.number, quoted(name, length, shown));
        } else if (bit_test_set(bits, original_of(priority, row))) {
            rc = zm_err_set(err, -EINVAL,
                            "%s: line %" PRIu64 ": \"%s\" is named again (first on "
                            "line %" PRIu64 ")",
                            path, l.number, quoted(name, length, shown),
                            first_line_of(text, size, name, length));
        } else {
            named++;
        }
    }
    if (rc == 0 && named == 0)
        rc = zm_err_set(err, -EINVAL, "%s names no cell: every line is blank", path);
    if (rc == 0)
        rc = positions_of(bits, n, positions, count, err);
    free(bits);
    table_free(&table);
    zm_strings_free(&names);
    return rc;
}

int zm_view_set_from_file(zm_source *source, const char *path, const char *name, zm_view_set **out,
                          zm_err *err)
{
    *out = NULL;
    size_t length = strlen(path);
    int json = length >= 5 && strcmp(path + length - 5, ".json") == 0;
    int txt = length >= 4 && strcmp(path + length - 4, ".txt") == 0;
    if (!json && !txt)
        return zm_err_set(err, -EINVAL,
                          "%s is neither NAME.json (a Cellucid cell set) nor NAME.txt "
                          "(obs names, one a line)",
                          path);
    /* The record is JSON, which holds text. */
    if (!is_utf8(name, strlen(name)) || !is_utf8(path, length))
        return zm_err_set(err, -EINVAL, "%s: a set's name and file are UTF-8 text", path);
    char *text;
    size_t size;
    int rc = read_whole(path, &text, &size, err);
    if (rc != 0)
        return rc;
    uint32_t *positions;
    uint64_t count;
    rc = json ? cells_of_cellucid(source, path, text, size, &positions, &count, err)
              : cells_of_names(source, path, text, size, &positions, &count, err);
    free(text);
    if (rc != 0)
        return rc;
    size_t bytes = strlen(name) + sizeof "sets/";
    char *full = malloc(bytes);
    if (full == NULL) {
        free(positions);
        return zm_err_set(err, -ENOMEM, "out of memory for the set %s", name);
    }
    snprintf(full, bytes, "sets/%s", name);
    zm_view_set *set;
    rc = set_new(positions, count, zm_source_n_obs(source), full, &set, err);
    free(full);
    if (rc != 0)
        return rc;
    set->record = json_pack("{s:s, s:s, s:I, s:s}", "name", name, "digest", set->digest, "size",
                            (json_int_t)set->count, "file", path);
    if (set->record == NULL) {
        zm_view_set_unref(set);
        return zm_err_set(err, -ENOMEM, "out of memory for the set %s", name);
    }
    *out = set;
    return 0;
}

/* ---- where/KEY/VALUES: escaping ---------------------------------------------------- */

static int must_escape(unsigned char c)
{
    return c == '%' || c == '/' || c == ',' || c < 0x20 || c == 0x7F;
}

static int is_dots(const char *value, size_t length)
{
    return (length == 1 && value[0] == '.') || (length == 2 && value[0] == '.' && value[1] == '.');
}

int zm_view_where_escape(const char *value, size_t length, char *out, size_t size)
{
    static const char hex[] = "0123456789ABCDEF";
    int dots = is_dots(value, length);
    size_t o = 0;
    for (size_t i = 0; i < length; i++) {
        unsigned char c = (unsigned char)value[i];
        if (dots || must_escape(c)) {
            if (size < 4 || o > size - 4)
                return -ENAMETOOLONG;
            out[o++] = '%';
            out[o++] = hex[c >> 4];
            out[o++] = hex[c & 15];
        } else {
            if (size < 2 || o > size - 2)
                return -ENAMETOOLONG;
            out[o++] = (char)c;
        }
    }
    if (size == 0 || o > INT32_MAX)
        return -ENAMETOOLONG;
    out[o] = '\0';
    return (int)o;
}

static int hex_digit(unsigned char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                  : -1;
}

/* Decodes a spelling into out (at least length + 1 bytes): its length, and
 * *canonical whether zm_view_where_escape writes the value so; -1 when a
 * '%' is not followed by two hex digits. */
static long decode_value(const char *in, size_t length, char *out, int *canonical)
{
    size_t o = 0;
    *canonical = 1;
    for (size_t i = 0; i < length; o++) {
        if (in[i] != '%') {
            out[o] = in[i++];
            continue;
        }
        int high = i + 2 < length ? hex_digit((unsigned char)in[i + 1]) : -1;
        int low = i + 2 < length ? hex_digit((unsigned char)in[i + 2]) : -1;
        if (high < 0 || low < 0)
            return -1;
        if ((in[i + 1] >= 'a' && in[i + 1] <= 'f') || (in[i + 2] >= 'a' && in[i + 2] <= 'f'))
            *canonical = 0; /* hex is uppercase */
        out[o] = (char)(high << 4 | low);
        i += 3;
    }
    out[o] = '\0';
    /* Each byte escaped exactly when the rule says: the value's spelling is
     * one token a byte, walked again beside the decoded bytes. */
    int dots = is_dots(out, o);
    size_t i = 0;
    for (size_t k = 0; k < o; k++) {
        int escaped = in[i] == '%';
        if (escaped != (dots || must_escape((unsigned char)out[k])))
            *canonical = 0;
        i += escaped ? 3 : 1;
    }
    return (long)o;
}

int zm_view_where_unescape(const char *component, size_t length, char *out, size_t size)
{
    char *value = malloc(length + 1);
    if (value == NULL)
        return -ENOMEM;
    int canonical;
    long decoded = decode_value(component, length, value, &canonical);
    int rc = decoded < 0 || !canonical                        ? -ENOENT
             : (size_t)decoded >= size || decoded > INT32_MAX ? -ENAMETOOLONG
                                                              : (int)decoded;
    if (rc >= 0)
        memcpy(out, value, (size_t)decoded + 1);
    free(value);
    return rc;
}

/* ---- where/KEY/VALUES: the cells --------------------------------------------------- */

static const char *where_advice = "where/ filters by a categorical, string or boolean column, one "
                                  "value a cell";

int zm_view_where_check(zm_source *source, const char *key, zm_err *err)
{
    const zm_element *column = zm__obs_column(source, key, err);
    if (column == NULL)
        return -ENOENT;
    if (!is_utf8(key, strlen(key)))
        return zm_err_set(err, -ENOENT, "obs/%s: where/ names columns whose keys are UTF-8 text",
                          quoted(key, strlen(key), (char[96]){0}));
    switch (zm__column_use_of(column)) {
    case ZM__COLUMN_CATEGORICAL:
    case ZM__COLUMN_STRINGS:
    case ZM__COLUMN_BOOLEAN:
        return 0;
    case ZM__COLUMN_NOT_ONE_VALUE:
        return zm_err_set(err, -ENOENT, "obs/%s is not one value a cell: %s", key, where_advice);
    case ZM__COLUMN_NUMBERS:
        return zm_err_set(err, -ENOENT, "obs/%s holds numbers: %s", key, where_advice);
    case ZM__COLUMN_NULLABLE_STRINGS:
        return zm_err_set(err, -ENOENT, "obs/%s holds strings some cells lack "
                          "(nullable-string-array), which where/ does not filter by yet: %s",
                          key, where_advice);
    case ZM__COLUMN_NOT_VALUES:
        break;
    }
    return zm_err_set(err, -ENOENT, "obs/%s is not a column of values: %s", key, where_advice);
}

/* Category names in name order (equal names by code), for looking values up. */
static int compare_names(const void *a, const void *b, void *context)
{
    const zm_strings *names = context;
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    size_t xl, yl;
    const char *xs = string_at(names, x, &xl), *ys = string_at(names, y, &yl);
    int c = compare_bytes(xs, xl, ys, yl);
    return c != 0 ? c : (x > y) - (x < y);
}

static uint64_t *names_sorted(const zm_strings *names)
{
    uint64_t *order = malloc((names->count ? names->count : 1) * sizeof *order);
    if (order == NULL)
        return NULL;
    for (uint64_t i = 0; i < names->count; i++)
        order[i] = i;
    qsort_r(order, names->count, sizeof *order, compare_names, (void *)names);
    return order;
}

/* The first of order (count names, sorted) not below value. */
static uint64_t lower_bound(const zm_strings *names, const uint64_t *order, uint64_t count,
                            const char *value, size_t length)
{
    uint64_t lo = 0, hi = count;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2, at = order ? order[mid] : mid;
        size_t l;
        const char *s = string_at(names, at, &l);
        if (compare_bytes(s, l, value, length) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* One value of a where/ path. */
typedef struct where_value {
    const char *bytes; /* decoded */
    size_t length;
    const char *spelled; /* as the path spells it */
    size_t spelled_length;
} where_value;

static int compare_values(const void *a, const void *b)
{
    const where_value *x = a, *y = b;
    return compare_bytes(x->bytes, x->length, y->bytes, y->length);
}

/* The values of a where/ component, decoded into buffer (strlen(values) +
 * its values bytes): each canonical, UTF-8, not empty, none twice. */
static int parse_values(const char *key, const char *values, char *buffer, where_value *out,
                        size_t *count, zm_err *err)
{
    size_t n = 0, length = strlen(values);
    char *at = buffer;
    char shown[96], spelling[256];
    for (size_t start = 0; start <= length;) {
        const char *comma = memchr(values + start, ',', length - start);
        size_t end = comma ? (size_t)(comma - values) : length;
        const char *spelled = values + start;
        size_t spelled_length = end - start;
        if (spelled_length == 0)
            return zm_err_set(err, -ENOENT,
                              "where/%s/%s: a value cannot be empty (an empty "
                              "value is no path component)",
                              key, quoted(values, length, shown));
        int canonical;
        long decoded = decode_value(spelled, spelled_length, at, &canonical);
        if (decoded < 0)
            return zm_err_set(err, -ENOENT,
                              "where/%s/%s: \"%s\" is not a value: %% begins an "
                              "escape %%XX (two uppercase hex digits), and %% itself is %%25",
                              key, quoted(values, length, shown),
                              quoted(spelled, spelled_length, (char[96]){0}));
        if (!canonical) {
            int written = zm_view_where_escape(at, (size_t)decoded, spelling, sizeof spelling);
            return zm_err_set(err, -ENOENT,
                              "where/%s/%s: \"%s\" is not how where/ spells that "
                              "value%s%s%s",
                              key, quoted(values, length, shown),
                              quoted(spelled, spelled_length, (char[96]){0}),
                              written >= 0 ? ": write \"" : "", written >= 0 ? spelling : "",
                              written >= 0 ? "\"" : "");
        }
        if (!is_utf8(at, (size_t)decoded))
            return zm_err_set(err, -ENOENT, "where/%s/%s: \"%s\" is not UTF-8 text", key,
                              quoted(values, length, shown),
                              quoted(spelled, spelled_length, (char[96]){0}));
        out[n++] = (where_value){at, (size_t)decoded, spelled, spelled_length};
        at += decoded + 1;
        start = end + 1;
    }
    /* Listed twice: a second spelling of the same cells. */
    where_value *sorted = malloc(n * sizeof *sorted);
    if (sorted == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory reading where/%s", key);
    memcpy(sorted, out, n * sizeof *sorted);
    qsort(sorted, n, sizeof *sorted, compare_values);
    for (size_t i = 1; i < n; i++)
        if (compare_values(&sorted[i - 1], &sorted[i]) == 0) {
            int rc = zm_err_set(err, -ENOENT, "where/%s/%s: the value \"%s\" is listed twice", key,
                                quoted(values, length, shown),
                                quoted(sorted[i].spelled, sorted[i].spelled_length, (char[96]){0}));
            free(sorted);
            return rc;
        }
    free(sorted);
    *count = n;
    return 0;
}

/* A boolean's strata name their values as Python does. */
static const char *boolean_name(const char *value, size_t length)
{
    return length == 4 && memcmp(value, "true", 4) == 0    ? "True"
           : length == 5 && memcmp(value, "false", 5) == 0 ? "False"
                                                           : NULL;
}

/* Marks wanted[code] for each category a value names. */
static int mark_values(const char *key, zm__column_use use, const zm_strings *names,
                       const where_value *values, size_t count, uint8_t *wanted, zm_err *err)
{
    uint64_t *order = NULL;
    if (use == ZM__COLUMN_CATEGORICAL && (order = names_sorted(names)) == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory looking up obs/%s's categories", key);
    int rc = 0;
    for (size_t v = 0; rc == 0 && v < count; v++) {
        const char *value = values[v].bytes;
        size_t length = values[v].length;
        if (use == ZM__COLUMN_BOOLEAN) {
            value = boolean_name(values[v].bytes, values[v].length);
            if (value == NULL) {
                rc = zm_err_set(err, -ENOENT,
                                "obs/%s holds booleans: a value is true or false, "
                                "not \"%s\"",
                                key,
                                quoted(values[v].spelled, values[v].spelled_length, (char[96]){0}));
                break;
            }
            length = strlen(value);
        }
        uint64_t at = lower_bound(names, order, names->count, value, length);
        int found = 0;
        for (; at < names->count; at++) {
            uint64_t code = order ? order[at] : at;
            size_t l;
            const char *s = string_at(names, code, &l);
            if (compare_bytes(s, l, value, length) != 0)
                break;
            wanted[code] = 1;
            found = 1;
        }
        /* A string column's or a boolean's values are any strings: one no
         * cell holds selects none. A categorical's are its categories. */
        if (!found && use == ZM__COLUMN_CATEGORICAL)
            rc = zm_err_set(err, -ENOENT, "obs/%s has no category \"%s\"", key,
                            quoted(values[v].spelled, values[v].spelled_length, (char[96]){0}));
    }
    free(order);
    return rc;
}

int zm_view_set_where(zm_source *source, const char *key, const char *values, zm_view_set **out,
                      zm_err *err)
{
    *out = NULL;
    int rc = zm_view_where_check(source, key, err);
    if (rc != 0)
        return rc;
    zm__column_use use = zm__column_use_of(zm__obs_column(source, key, err));
    size_t length = strlen(values), count = 0;
    char *buffer = malloc(2 * length + 2);
    where_value *parsed = malloc((length + 1) * sizeof *parsed);
    if (buffer == NULL || parsed == NULL) {
        free(buffer);
        free(parsed);
        return zm_err_set(err, -ENOMEM, "out of memory reading where/%s", key);
    }
    rc = parse_values(key, values, buffer, parsed, &count, err);
    zm_field_strata strata = {0};
    if (rc == 0)
        rc = zm_view_field_strata(source, key, &strata, err);
    uint8_t *wanted = NULL;
    uint64_t *bits = NULL;
    uint64_t n = zm_source_n_obs(source);
    if (rc == 0) {
        wanted = calloc(strata.count ? strata.count : 1, 1);
        bits = bits_new(n);
        if (wanted == NULL || bits == NULL)
            rc = zm_err_set(err, -ENOMEM, "out of memory filtering %" PRIu64 " cells", n);
    }
    if (rc == 0)
        rc = mark_values(key, use, &strata.names, parsed, count, wanted, err);
    uint64_t selected = 0;
    if (rc == 0) {
        /* A missing value (a negative code) is none of the values. */
        const zm_priority *priority = zm_source_priority(source);
        for (uint64_t row = 0; row < n; row++) {
            int32_t code = strata.codes[row];
            if (code >= 0 && wanted[code]) {
                bit_test_set(bits, original_of(priority, row));
                selected++;
            }
        }
        if (selected == 0)
            rc = zm_err_set(err, -ENOENT, "no cell has obs/%s %s %s", key,
                            count > 1 ? "one of" : "equal to",
                            quoted(values, length, (char[96]){0}));
    }
    uint32_t *positions = NULL;
    uint64_t kept = 0;
    if (rc == 0)
        rc = positions_of(bits, n, &positions, &kept, err);
    zm_view_set *set = NULL;
    char *name = NULL;
    if (rc == 0) {
        size_t bytes = strlen(key) + length + sizeof "where//";
        if ((name = malloc(bytes)) != NULL) {
            snprintf(name, bytes, "where/%s/%s", key, values);
            rc = set_new(positions, kept, n, name, &set, err);
        } else {
            free(positions);
            rc = zm_err_set(err, -ENOMEM, "out of memory for where/%s", key);
        }
    }
    if (rc == 0) {
        /* Every value and the key are UTF-8 (checked): only memory fails. */
        json_t *record = json_object(), *list = json_array();
        int failed = record == NULL || list == NULL ||
                     json_object_set_new(record, "key", json_string(key)) != 0 ||
                     json_object_set(record, "values", list) != 0 ||
                     json_object_set_new(record, "size", json_integer((json_int_t)set->count)) != 0;
        for (size_t v = 0; !failed && v < count; v++)
            failed = json_array_append_new(list, json_stringn(parsed[v].bytes, parsed[v].length));
        json_decref(list);
        set->record = failed ? (json_decref(record), NULL) : record;
        if (set->record == NULL) {
            zm_view_set_unref(set);
            set = NULL;
            rc = zm_err_set(err, -ENOMEM, "out of memory for where/%s", key);
        }
    }
    free(name);
    free(wanted);
    free(bits);
    zm_field_strata_free(&strata);
    free(buffer);
    free(parsed);
    if (rc == 0)
        *out = set;
    return rc;
}

/* ---- where/KEY/: the values listed ------------------------------------------------- */

/* Emits one value's spelling, unless it cannot be one (empty, not UTF-8,
 * longer than a path component). */
static int emit_value(const char *value, size_t length, zm_view_key_emit emit, void *context)
{
    char spelling[ZM_VIEW_WHERE_COMPONENT_MAX + 1];
    if (length == 0 || !is_utf8(value, length) ||
        zm_view_where_escape(value, length, spelling, sizeof spelling) < 0)
        return 0;
    return emit(context, spelling);
}

int zm_view_where_values(zm_source *source, const char *key, zm_view_key_emit emit, void *context,
                         zm_err *err)
{
    int rc = zm_view_where_check(source, key, err);
    if (rc != 0)
        return rc;
    zm__column_use use = zm__column_use_of(zm__obs_column(source, key, err));
    zm_field_strata strata;
    if ((rc = zm_view_field_strata(source, key, &strata, err)) != 0)
        return rc;
    uint64_t n = zm_source_n_obs(source), categories = strata.count;
    /* Only what resolves is listed: a category no cell has names no cell. */
    uint8_t *listed = calloc(categories ? categories : 1, 1);
    if (listed == NULL) {
        zm_field_strata_free(&strata);
        return zm_err_set(err, -ENOMEM, "out of memory listing obs/%s's values", key);
    }
    for (uint64_t row = 0; row < n; row++)
        if (strata.codes[row] >= 0)
            listed[strata.codes[row]] = 1;
    if (use == ZM__COLUMN_CATEGORICAL) {
        /* A name two categories share is one value (it selects both):
         * listed at its first category that has cells. */
        uint64_t *order = names_sorted(&strata.names);
        if (order == NULL)
            rc = zm_err_set(err, -ENOMEM, "out of memory listing obs/%s's values", key);
        for (uint64_t i = 0, group = 0; rc == 0 && i < categories; group = i) {
            /* order[group .. i): one name, by code; the first with cells
             * stays listed. */
            int kept = 0;
            size_t a, b;
            const char *first = string_at(&strata.names, order[group], &a);
            for (; i < categories; i++) {
                const char *x = string_at(&strata.names, order[i], &b);
                if (compare_bytes(x, b, first, a) != 0)
                    break;
                if (listed[order[i]] && kept++)
                    listed[order[i]] = 0;
            }
        }
        free(order);
    }
    if (use == ZM__COLUMN_STRINGS && categories > ZM_VIEW_WHERE_LISTED_MAX)
        categories = 0; /* too many to list: each still resolves */
    for (uint64_t code = 0; rc == 0 && code < categories; code++) {
        if (!listed[code])
            continue;
        size_t length;
        const char *value = string_at(&strata.names, code, &length);
        if (use == ZM__COLUMN_BOOLEAN) { /* "False" < "True": false, then true */
            value = length == 4 && memcmp(value, "True", 4) == 0 ? "true" : "false";
            length = strlen(value);
        }
        rc = emit_value(value, length, emit, context);
    }
    free(listed);
    zm_field_strata_free(&strata);
    return rc;
}

int zm_view_where_fields(zm_source *source, zm_view_key_emit emit, void *context)
{
    const zm_element *obs = zm_source_find(source, "obs");
    if (obs == NULL || obs->kind != ZM_ELEMENT_DATAFRAME)
        return 0;
    for (size_t i = 0; i < obs->child_count; i++) {
        const char *key = obs->children[i]->name;
        if (zm_view_where_check(source, key, NULL) == 0) {
            int rc = emit(context, key);
            if (rc != 0)
                return rc;
        }
    }
    return 0;
}
