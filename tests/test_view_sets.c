/* Sets of cells (issue 21): sets from files (Cellucid cell sets, obs names
 * one a line) and from obs values (where/KEY/VALUES), their listings and the
 * escaping of values as path components.
 *
 * The sources, set files and every expected set come from
 * tests/source/make_set_sources.py, run at test time: it computes the
 * positions with h5py and numpy, the digest and the LEB128 gaps from the
 * specification's formulas and the escaping from its rule, apart from
 * zarrmount. Its sources: sets.h5ad (categories holding "/", ",", "%",
 * non-ASCII, "." and "..", missing codes, two cells of one name, two
 * categories of one name, strings, booleans, a nullable boolean),
 * fixtures/sources/h5ad/full-csr.h5ad, and a priority-ordered file beside
 * its original (the same sets by original position). */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "zarrmount/view.h"

static const char *source_root(void)
{
    const char *dir = getenv("ZM_SOURCE_ROOT");
    return dir ? dir : ".";
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

/* A directory of the generator's files, removed when the test ends. */
typedef struct generated {
    char directory[64];
    json_t *manifest;
    /* Sources opened by file name, each once. */
    char names[8][64];
    zm_source *sources[8];
    int opened;
} generated;

static void generate(generated *g)
{
    memset(g, 0, sizeof *g);
    snprintf(g->directory, sizeof g->directory, "/tmp/zm-view-sets-XXXXXX");
    cr_assert_not_null(mkdtemp(g->directory));
    char command[1024];
    snprintf(command, sizeof command,
             "/usr/bin/python3 '%s/tests/source/make_set_sources.py' '%s' >/dev/null",
             source_root(), g->directory);
    cr_assert_eq(system(command), 0, "make_set_sources.py failed: %s", command);
    char path[256];
    snprintf(path, sizeof path, "%s/manifest.json", g->directory);
    json_error_t error;
    g->manifest = json_load_file(path, 0, &error);
    cr_assert_not_null(g->manifest, "%s: %s", path, error.text);
}

static void finish(generated *g)
{
    for (int i = 0; i < g->opened; i++)
        zm_source_close(g->sources[i]);
    json_decref(g->manifest);
    nftw(g->directory, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static zm_source *source_of(generated *g, const char *name)
{
    for (int i = 0; i < g->opened; i++)
        if (strcmp(g->names[i], name) == 0)
            return g->sources[i];
    cr_assert_lt(g->opened, 8);
    char path[256];
    snprintf(path, sizeof path, "%s/%s", g->directory, name);
    zm_err err = {0};
    zm_source *s = NULL;
    cr_assert_eq(zm_source_open(path, NULL, &s, &err), 0, "%s: %s", path, err.reason);
    snprintf(g->names[g->opened], sizeof g->names[0], "%s", name);
    g->sources[g->opened++] = s;
    return s;
}

static int errno_of(const char *name)
{
    return strcmp(name, "ENOENT") == 0 ? ENOENT : strcmp(name, "EINVAL") == 0 ? EINVAL : -1;
}

/* What a case expects of a set it makes, or of its refusal. */
static void expect_set(json_t *c, const char *what, int rc, const zm_err *err, zm_view_set *set,
                       const char *name)
{
    json_t *refused = json_object_get(c, "refused");
    if (refused != NULL) {
        int code = errno_of(json_string_value(refused));
        const char *reason = json_string_value(json_object_get(c, "reason"));
        cr_expect_eq(rc, -code, "%s: refused with %d, not -%s (%s)", what, rc,
                     json_string_value(refused), err->reason);
        cr_expect_null(set, "%s: a refused set is no set", what);
        cr_expect(strstr(err->reason, reason) != NULL, "%s: the reason \"%s\" does not say \"%s\"",
                  what, err->reason, reason);
        return;
    }
    cr_expect_eq(rc, 0, "%s: %s", what, err->reason);
    if (rc != 0 || set == NULL)
        return;
    json_t *positions = json_object_get(c, "positions");
    size_t count = json_array_size(positions);
    cr_expect_eq(set->count, count, "%s: %llu cells, not %zu", what, (unsigned long long)set->count,
                 count);
    size_t wrong = 0;
    for (size_t i = 0; i < count && i < set->count; i++)
        if (set->positions[i] != (uint32_t)json_integer_value(json_array_get(positions, i)))
            wrong++;
    cr_expect_eq(wrong, 0, "%s: %zu positions differ from the generator's", what, wrong);
    for (uint64_t i = 1; i < set->count; i++)
        cr_expect_lt(set->positions[i - 1], set->positions[i], "%s: not strictly ascending", what);
    cr_expect_str_eq(set->digest, json_string_value(json_object_get(c, "digest")), "%s", what);
    cr_expect_str_eq(set->name, name, "%s", what);
    cr_expect_eq(set->refs, 1, "%s", what);
    char *got = json_dumps(set->record, JSON_SORT_KEYS | JSON_COMPACT);
    char *want = json_dumps(json_object_get(c, "record"), JSON_SORT_KEYS | JSON_COMPACT);
    cr_expect(json_equal(set->record, json_object_get(c, "record")), "%s: record %s, not %s", what,
              got, want);
    free(got);
    free(want);
}

Test(view_sets, where_sets_are_the_generators)
{
    generated g;
    generate(&g);
    json_t *c;
    size_t i, checked = 0;
    json_array_foreach(json_object_get(g.manifest, "cases"), i, c)
    {
        json_t *where = json_object_get(c, "where");
        if (where == NULL)
            continue;
        const char *source = json_string_value(json_object_get(c, "source"));
        const char *key = json_string_value(json_object_get(where, "key"));
        const char *values = json_string_value(json_object_get(where, "values"));
        char what[512], name[512];
        snprintf(what, sizeof what, "%s: where/%s/%s", source, key, values);
        snprintf(name, sizeof name, "where/%s/%s", key, values);
        zm_err err = {0};
        zm_view_set *set = NULL;
        int rc = zm_view_set_where(source_of(&g, source), key, values, &set, &err);
        expect_set(c, what, rc, &err, set, name);
        zm_view_set_unref(set);
        checked++;
    }
    cr_expect_geq(checked, 40, "the manifest holds %zu where/ cases", checked);
    finish(&g);
}

typedef struct listing {
    json_t *values;
} listing;

static int collect(void *context, const char *value)
{
    json_array_append_new(((listing *)context)->values, json_string(value));
    return 0;
}

static int stop_at_first(void *context, const char *value)
{
    (void)value;
    (*(int *)context)++;
    return 7;
}

Test(view_sets, where_listings_are_the_generators)
{
    generated g;
    generate(&g);
    json_t *c;
    size_t i, checked = 0;
    json_array_foreach(json_object_get(g.manifest, "cases"), i, c)
    {
        json_t *key_node = json_object_get(c, "values");
        if (!json_is_string(key_node))
            continue;
        const char *source = json_string_value(json_object_get(c, "source"));
        const char *key = json_string_value(key_node);
        zm_source *s = source_of(&g, source);
        listing l = {json_array()};
        zm_err err = {0};
        int rc = zm_view_where_values(s, key, collect, &l, &err);
        cr_expect_eq(rc, 0, "%s: where/%s/: %s", source, key, err.reason);
        char *got = json_dumps(l.values, JSON_COMPACT);
        char *want = json_dumps(json_object_get(c, "listed"), JSON_COMPACT);
        cr_expect(json_equal(l.values, json_object_get(c, "listed")),
                  "%s: where/%s/ lists %s, not %s", source, key, got, want);
        free(got);
        free(want);
        /* Everything listed resolves. */
        json_t *v;
        size_t j;
        json_array_foreach(l.values, j, v)
        {
            zm_view_set *set = NULL;
            rc = zm_view_set_where(s, key, json_string_value(v), &set, &err);
            cr_expect_eq(rc, 0, "%s: where/%s/%s is listed and does not resolve: %s", source, key,
                         json_string_value(v), err.reason);
            zm_view_set_unref(set);
        }
        if (json_array_size(l.values) > 0) {
            int calls = 0;
            cr_expect_eq(zm_view_where_values(s, key, stop_at_first, &calls, &err), 7,
                         "emit's value is returned");
            cr_expect_eq(calls, 1, "emit stops the listing");
        }
        json_decref(l.values);
        checked++;
    }
    cr_expect_geq(checked, 13, "the manifest holds %zu listings", checked);
    finish(&g);
}

Test(view_sets, set_files_are_the_generators)
{
    generated g;
    generate(&g);
    json_t *c;
    size_t i, checked = 0;
    json_array_foreach(json_object_get(g.manifest, "cases"), i, c)
    {
        json_t *file = json_object_get(c, "file");
        if (file == NULL)
            continue;
        const char *source = json_string_value(json_object_get(c, "source"));
        const char *set_name = json_string_value(json_object_get(c, "name"));
        char path[512], what[600], name[512];
        snprintf(path, sizeof path, "%s/%s", g.directory, json_string_value(file));
        snprintf(what, sizeof what, "%s: %s", source, json_string_value(file));
        snprintf(name, sizeof name, "sets/%s", set_name);
        zm_err err = {0};
        zm_view_set *set = NULL;
        int rc = zm_view_set_from_file(source_of(&g, source), path, set_name, &set, &err);
        expect_set(c, what, rc, &err, set, name);
        if (json_object_get(c, "refused") != NULL)
            cr_expect(strstr(err.reason, path) != NULL, "%s: the reason names the file: %s", what,
                      err.reason);
        zm_view_set_unref(set);
        checked++;
    }
    cr_expect_geq(checked, 20, "the manifest holds %zu set files", checked);
    finish(&g);
}

/* ---- Escaping, against the rule written out again ------------------------------- */

static int rule_escapes(unsigned char c, int dots)
{
    return dots || c == '%' || c == '/' || c == ',' || c < 0x20 || c == 0x7F;
}

/* The spelling the rule gives a value, built here byte by byte. */
static size_t rule_spelling(const unsigned char *v, size_t length, char *out)
{
    int dots = (length == 1 && v[0] == '.') || (length == 2 && v[0] == '.' && v[1] == '.');
    size_t o = 0;
    for (size_t i = 0; i < length; i++)
        o += rule_escapes(v[i], dots) ? (size_t)sprintf(out + o, "%%%02X", v[i])
                                      : (size_t)sprintf(out + o, "%c", v[i]);
    out[o] = '\0';
    return o;
}

static void round_trip(const unsigned char *value, size_t length)
{
    char spelling[64], want[64], back[64];
    size_t want_length = rule_spelling(value, length, want);
    int written = zm_view_where_escape((const char *)value, length, spelling, sizeof spelling);
    cr_assert_eq(written, (int)want_length, "escape of %zu bytes (%02x...)", length, value[0]);
    cr_assert_str_eq(spelling, want);
    for (int i = 0; i < written; i++)
        cr_assert(spelling[i] != '/' && spelling[i] != ',' && (unsigned char)spelling[i] >= 0x20 &&
                      spelling[i] != 0x7F,
                  "%s holds a byte a path component or a list cannot", spelling);
    int decoded = zm_view_where_unescape(spelling, (size_t)written, back, sizeof back);
    cr_assert_eq(decoded, (int)length, "%s decodes to %d bytes", spelling, decoded);
    cr_assert_eq(memcmp(back, value, length), 0, "%s decodes to another value", spelling);
    cr_assert_eq(back[length], '\0');
}

Test(view_sets, escaping_round_trips)
{
    unsigned char value[2];
    for (unsigned a = 0; a < 256; a++) {
        value[0] = (unsigned char)a;
        round_trip(value, 1);
        for (unsigned b = 0; b < 256; b++) {
            value[1] = (unsigned char)b;
            round_trip(value, 2);
        }
    }
    const char *texts[] = {"T cell",
                           "a/b",
                           "x,y",
                           "50%",
                           "Zelle-\xc3\xbc",
                           "...",
                           ".a",
                           "a.",
                           "\xe4\xb8\xad\xe6\x96\x87",
                           "tab\there",
                           "\x7f"};
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++)
        round_trip((const unsigned char *)texts[i], strlen(texts[i]));
    char out[8];
    cr_expect_eq(zm_view_where_escape("abc", 3, out, 4), 3);
    cr_expect_eq(zm_view_where_escape("abcd", 4, out, 4), -ENAMETOOLONG, "no room for the NUL");
    cr_expect_eq(zm_view_where_escape("a/", 2, out, 4), -ENAMETOOLONG, "no room for %%2F");
    cr_expect_eq(zm_view_where_escape("", 0, out, 1), 0, "the empty value is no bytes");
    cr_expect_eq(zm_view_where_escape("", 0, out, 0), -ENAMETOOLONG);
    cr_expect_eq(zm_view_where_unescape("abcd", 4, out, 4), -ENAMETOOLONG);
    cr_expect_eq(zm_view_where_unescape("a%2F", 4, out, 3), 2);
    cr_expect_str_eq(out, "a/");
}

Test(view_sets, only_the_canonical_spelling_resolves)
{
    /* Every other spelling of each byte: escaped when the rule leaves it,
     * left when the rule escapes it, lowercase hex. */
    for (unsigned c = 0; c < 256; c++) {
        char spelling[8], out[8];
        int escaped = rule_escapes((unsigned char)c, c == '.');
        if (escaped) {
            spelling[0] = (char)c;
            cr_expect_eq(zm_view_where_unescape(spelling, 1, out, sizeof out), -ENOENT,
                         "byte %02x left as it is", c);
        } else {
            snprintf(spelling, sizeof spelling, "%%%02X", c);
            cr_expect_eq(zm_view_where_unescape(spelling, 3, out, sizeof out), -ENOENT,
                         "%s escaped though it need not be", spelling);
        }
        snprintf(spelling, sizeof spelling, "%%%02x", c);
        if (strpbrk(spelling + 1, "abcdef") != NULL)
            cr_expect_eq(zm_view_where_unescape(spelling, 3, out, sizeof out), -ENOENT,
                         "%s in lowercase hex", spelling);
    }
    const char *refused[] = {"%",    "%2",   "%G0", "a%",  "%%",  ".",   "..",
                             "%2E.", ".%2E", "a,b", "a/b", "%2e", "%41", "\x01"};
    char out[16];
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++)
        cr_expect_eq(zm_view_where_unescape(refused[i], strlen(refused[i]), out, sizeof out),
                     -ENOENT, "\"%s\" is not a canonical spelling", refused[i]);
    const char *taken[][2] = {{"%2E", "."}, {"%2E%2E", ".."}, {"...", "..."},
                              {"%25", "%"}, {"%2F%2C", "/,"}, {"a.b", "a.b"}};
    for (size_t i = 0; i < sizeof taken / sizeof *taken; i++) {
        int n = zm_view_where_unescape(taken[i][0], strlen(taken[i][0]), out, sizeof out);
        cr_expect_eq(n, (int)strlen(taken[i][1]), "%s", taken[i][0]);
        cr_expect_str_eq(out, taken[i][1]);
    }
}

/* ---- Files that are no set, and the rest of the API ------------------------------- */

static zm_source *open_fixture(const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/fixtures/sources/h5ad/%s", source_root(), name);
    zm_err err = {0};
    zm_source *s = NULL;
    cr_assert_eq(zm_source_open(path, NULL, &s, &err), 0, "%s: %s", path, err.reason);
    return s;
}

static void expect_refused(zm_source *s, const char *path, int code, const char *reason)
{
    zm_err err = {0};
    zm_view_set *set = (zm_view_set *)&err; /* set to NULL on failure */
    int rc = zm_view_set_from_file(s, path, "x", &set, &err);
    cr_expect_eq(rc, code, "%s: %d, not %d (%s)", path, rc, code, err.reason);
    cr_expect_null(set);
    cr_expect(strstr(err.reason, reason) != NULL, "%s: \"%s\" does not say \"%s\"", path,
              err.reason, reason);
}

Test(view_sets, files_that_are_no_set)
{
    char directory[] = "/tmp/zm-view-sets-files-XXXXXX";
    cr_assert_not_null(mkdtemp(directory));
    zm_source *s = open_fixture("full-csr.h5ad");
    char path[256];

    snprintf(path, sizeof path, "%s/absent.txt", directory);
    expect_refused(s, path, -ENOENT, "cannot open");
    snprintf(path, sizeof path, "%s/cells.csv", directory);
    expect_refused(s, path, -EINVAL, "neither NAME.json");
    /* A directory and a FIFO: refused, the FIFO without waiting for a writer. */
    snprintf(path, sizeof path, "%s/folder.txt", directory);
    cr_assert_eq(mkdir(path, 0700), 0);
    expect_refused(s, path, -EINVAL, "is not a regular file");
    snprintf(path, sizeof path, "%s/fifo.json", directory);
    cr_assert_eq(mkfifo(path, 0600), 0);
    expect_refused(s, path, -EINVAL, "is not a regular file");
    /* Past the limit (a sparse file: no disk). */
    snprintf(path, sizeof path, "%s/huge.txt", directory);
    int fd = open(path, O_CREAT | O_WRONLY, 0600);
    cr_assert_geq(fd, 0);
    cr_assert_eq(ftruncate(fd, (off_t)ZM_VIEW_SET_FILE_MAX + 1), 0);
    close(fd);
    expect_refused(s, path, -EFBIG, "at most");
    /* A file longer than it said it was when opened: /proc's files say 0
     * bytes and hold more. */
    snprintf(path, sizeof path, "%s/proc.txt", directory);
    cr_assert_eq(symlink("/proc/self/status", path), 0);
    expect_refused(s, path, -EAGAIN, "changed while read");
    /* A name that is not UTF-8 cannot be recorded. */
    snprintf(path, sizeof path, "%s/ok.txt", directory);
    FILE *f = fopen(path, "w");
    fputs("cell_003\n", f);
    fclose(f);
    zm_err err = {0};
    zm_view_set *set = NULL;
    cr_expect_eq(zm_view_set_from_file(s, path, "bad\xff", &set, &err), -EINVAL);
    cr_expect(strstr(err.reason, "UTF-8") != NULL, "%s", err.reason);
    cr_assert_eq(zm_view_set_from_file(s, path, "ok", &set, &err), 0, "%s", err.reason);
    cr_expect_eq(set->count, 1);
    cr_expect_eq(set->positions[0], 3);
    cr_expect_eq(set->n, 60);

    /* References: each unref undoes a ref; the last frees (ASan sees). */
    cr_expect_eq(zm_view_set_ref(set), set);
    cr_expect_eq(set->refs, 2);
    zm_view_set_unref(set);
    cr_expect_eq(set->refs, 1);
    zm_view_set_unref(set);
    zm_view_set_unref(NULL);
    cr_expect_null(zm_view_set_ref(NULL));

    zm_source_close(s);
    nftw(directory, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static int collect_keys(void *context, const char *key)
{
    json_array_append_new(context, json_string(key));
    return 0;
}

Test(view_sets, which_columns_filter)
{
    zm_source *s = open_fixture("full-csr.h5ad");
    zm_err err = {0};
    const char *filter[] = {"bool",          "barcode", "label_utf8",
                            "cell_type",     "quality", "cat_no_categories",
                            "cat_none_used", "cat_int", "nullable_bool"};
    json_t *want = json_array();
    for (size_t i = 0; i < sizeof filter / sizeof *filter; i++) {
        cr_expect_eq(zm_view_where_check(s, filter[i], &err), 0, "%s: %s", filter[i], err.reason);
        json_array_append_new(want, json_string(filter[i]));
    }
    const char *numbers[] = {"int8", "float32", "uint64", "nullable_int64"};
    for (size_t i = 0; i < sizeof numbers / sizeof *numbers; i++) {
        cr_expect_eq(zm_view_where_check(s, numbers[i], &err), -ENOENT, "%s", numbers[i]);
        cr_expect(strstr(err.reason, "holds numbers") != NULL, "%s", err.reason);
    }
    cr_expect_eq(zm_view_where_check(s, "nosuch", &err), -ENOENT);
    cr_expect_str_eq(err.reason, "obs has no column nosuch");
    /* where/ lists exactly the columns that pass, in the file's order. */
    json_t *got = json_array();
    cr_expect_eq(zm_view_where_fields(s, collect_keys, got), 0);
    cr_expect_eq(json_array_size(got), json_array_size(want));
    size_t i;
    json_t *key;
    json_array_foreach(got, i, key) cr_expect_eq(
        zm_view_where_check(s, json_string_value(key), &err), 0, "%s", json_string_value(key));
    /* A category-less column filters nothing; a value that is not UTF-8
     * names no cell. */
    zm_view_set *set = NULL;
    cr_expect_eq(zm_view_set_where(s, "cat_no_categories", "x", &set, &err), -ENOENT);
    cr_expect_eq(zm_view_set_where(s, "barcode", "\xff", &set, &err), -ENOENT);
    cr_expect(strstr(err.reason, "not UTF-8") != NULL, "%s", err.reason);
    cr_expect_null(set);
    json_decref(want);
    json_decref(got);
    zm_source_close(s);
}
