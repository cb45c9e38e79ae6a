/* The element model under malformed but HDF5-valid files: for each file,
 * does what a mount does, without FUSE, and says what happened.
 *
 *   model_driver [--timeout SECONDS] [--chunk-bytes N] [--cache-bytes N] FILE...
 *
 * Each file is handled in a child process of its own (a crash, a sanitizer
 * report or a hang is that file's, and the next file starts clean): the
 * tree is opened over it (zm__tree_open: the source, its element model and
 * checks, the default block size), `zarrmount inspect` runs over it, and
 * views are built and read whole: file/ and full/, a uniform and a blocks
 * subsample, and the first stratified and spatial views the tree lists
 * (every other field and embedding is built, not read). Every file of a
 * walked view is read to its end: the metadata documents and every chunk.
 * Chunks are small (1 KiB) and the memory small (16 KiB): arrays are cut
 * into many chunks, walks of a few KiB go through spill files and the
 * caches evict all the time, so those paths meet the malformed files too.
 *
 * One JSON line a file on stdout:
 *   {"file": F, "open": "ok" | "refused", "reason": R,
 *    "views": [{"view": V, "status": "ok" | "refused", "reason": R,
 *               "files": N, "bytes": B, "digest": D,
 *               "errors": [{"path": P, "code": C, "reason": R}, ...]}, ...],
 *    "walks_spilled": N, "problems": ["an error with an empty reason", ...]}
 * where D is an xxh3 of every file read (its path in the view, size and
 * bytes; but the root's .zattrs and .zmetadata, which record the source's
 * size), so two files that must serve the same store can be compared. A
 * child that dies (signal, sanitizer, leak, an exit status other than 0)
 * or runs out of time gets {"file": F, "crash": "why"} instead; its stderr
 * follows a line "== model_driver: F" on stderr.
 *
 * Exit status: 0 when every child finished (whatever each file's outcome),
 * 1 when one did not, 2 for a bad command line. */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include "zarrmount/tree.h"
#include "zarrmount/cli.h"
#include "zarrmount/synth.h"

/* Store files read from one view at most: a mutation that makes a store
 * of millions of chunks is cut short here (and said so), not a hang. */
#define MAX_FILES_PER_VIEW 20000
/* Stratified fields and embeddings built (beyond the first, which is read). */
#define MAX_KEYS 16

typedef struct run {
    zm_tree *tree;
    json_t *problems;
} run;

typedef struct view_walk {
    run *r;
    const char *view;
    json_t *errors;
    uint64_t files, bytes;
    XXH3_state_t *digest;
    int truncated;
} view_walk;

/* A JSON string of a reason: bytes that are not UTF-8 (a name the file
 * holds, quoted in a message) become '?' rather than losing the reason. */
static json_t *text(const char *s)
{
    json_t *j = json_string(s);
    if (j != NULL)
        return j;
    char *copy = strdup(s);
    for (char *p = copy; p && *p; p++)
        if ((unsigned char)*p >= 0x80)
            *p = '?';
    j = json_string(copy ? copy : "");
    free(copy);
    return j;
}

static void note_problem(run *r, const char *fmt, const char *path)
{
    char line[1024];
    snprintf(line, sizeof line, fmt, path);
    json_array_append_new(r->problems, text(line));
}

/* An error a read gave: it must say why. */
static void note_error(view_walk *w, const char *path, int code, const zm_err *err)
{
    if (err->reason[0] == '\0')
        note_problem(w->r, "%s: an error with an empty reason", path);
    if (code >= 0)
        note_problem(w->r, "%s: an error without a negative code", path);
    if (json_array_size(w->errors) < 64)
        json_array_append_new(w->errors, json_pack("{s:o, s:i, s:o}", "path", text(path), "code",
                                                   code, "reason", text(err->reason)));
}

static void read_file(view_walk *w, const char *path, uint64_t listed_size)
{
    static uint8_t buffer[1 << 16];
    zm_err err;
    zm_err_clear(&err);
    zm_node node;
    int rc = zm__tree_lookup(w->r->tree, path, &node, &err);
    if (rc != 0) {
        note_error(w, path, rc, &err);
        return;
    }
    if (listed_size != ZM_SIZE_UNKNOWN && listed_size != node.size)
        note_problem(w->r, "%s: listed with one size, looked up with another", path);
    /* The root's attributes (and so the consolidated metadata) record the
     * source's size: left out of the digest, so that a file holding the same
     * values stored otherwise serves the same digest. */
    size_t view_length = strlen(w->view);
    int digested = !(strncmp(path, w->view, view_length) == 0 &&
                     (strcmp(path + view_length, "/.zattrs") == 0 ||
                      strcmp(path + view_length, "/.zmetadata") == 0));
    uint64_t offset = 0;
    uint64_t path_length = strlen(path);
    if (digested) {
        XXH3_64bits_update(w->digest, &path_length, sizeof path_length);
        XXH3_64bits_update(w->digest, path, path_length);
    }
    for (;;) {
        size_t done = 0;
        zm_err_clear(&err);
        rc = zm__tree_read(w->r->tree, path, offset, sizeof buffer, buffer, &done, &err);
        if (rc != 0) {
            note_error(w, path, rc, &err);
            return;
        }
        if (done == 0)
            break;
        if (digested)
            XXH3_64bits_update(w->digest, buffer, done);
        offset += done;
    }
    if (!node.live && offset != node.size)
        note_problem(w->r, "%s: the bytes read are not the size looked up", path);
    if (digested)
        XXH3_64bits_update(w->digest, &offset, sizeof offset);
    w->files++;
    w->bytes += offset;
}

static int walk_directory(view_walk *w, const char *path);

struct listing {
    char **names;
    uint64_t *sizes;
    int *kinds;
    size_t count, capacity;
};

static int collect(void *context, const char *name, const zm_node *node)
{
    struct listing *l = context;
    if (l->count == l->capacity) {
        size_t capacity = l->capacity ? 2 * l->capacity : 32;
        char **names = realloc(l->names, capacity * sizeof *names);
        if (names)
            l->names = names;
        uint64_t *sizes = realloc(l->sizes, capacity * sizeof *sizes);
        if (sizes)
            l->sizes = sizes;
        int *kinds = realloc(l->kinds, capacity * sizeof *kinds);
        if (kinds)
            l->kinds = kinds;
        if (!names || !sizes || !kinds)
            return -ENOMEM;
        l->capacity = capacity;
    }
    l->names[l->count] = strdup(name);
    l->sizes[l->count] = node->size;
    l->kinds[l->count] = node->kind;
    if (l->names[l->count] == NULL)
        return -ENOMEM;
    l->count++;
    return 0;
}

static void listing_free(struct listing *l)
{
    for (size_t i = 0; i < l->count; i++)
        free(l->names[i]);
    free(l->names);
    free(l->sizes);
    free(l->kinds);
}

static int walk_directory(view_walk *w, const char *path)
{
    struct listing l = {0};
    zm_err err;
    zm_err_clear(&err);
    int rc = zm__tree_list(w->r->tree, path, collect, &l, &err);
    if (rc == -ENOMEM && err.reason[0] == '\0') {
        listing_free(&l);
        fprintf(stderr, "model_driver: out of memory listing %s\n", path);
        exit(3);
    }
    if (rc != 0) {
        note_error(w, path, rc, &err);
        listing_free(&l);
        return rc;
    }
    /* A listing is a directory: each name once, and each a name a
     * directory can hold. */
    for (size_t i = 0; i < l.count; i++) {
        const char *name = l.names[i];
        if (name[0] == '\0' || strchr(name, '/') || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
            note_problem(w->r, "%s: lists a name no directory can hold", path);
        for (size_t j = 0; j < i; j++)
            if (strcmp(l.names[j], name) == 0) {
                char where[1024];
                snprintf(where, sizeof where, "%s/%s", path, name);
                note_problem(w->r, "%s: listed twice", where);
                break;
            }
    }
    for (size_t i = 0; i < l.count; i++) {
        if (w->files >= MAX_FILES_PER_VIEW) {
            w->truncated = 1;
            break;
        }
        size_t n = strlen(path) + strlen(l.names[i]) + 2;
        char *child = malloc(n);
        if (child == NULL)
            break;
        snprintf(child, n, "%s/%s", path, l.names[i]);
        if (l.kinds[i] == ZM_NODE_DIRECTORY)
            walk_directory(w, child);
        else if (l.kinds[i] == ZM_NODE_FILE)
            read_file(w, child, l.sizes[i]);
        free(child);
    }
    listing_free(&l);
    return 0;
}

/* Builds a view (looks its directory up) and, if asked, reads all of it. */
static void visit_view(run *r, json_t *views, const char *view, int read_all)
{
    json_t *v = json_pack("{s:o}", "view", text(view));
    zm_err err;
    zm_err_clear(&err);
    zm_node node;
    int rc = zm__tree_lookup(r->tree, view, &node, &err);
    if (rc != 0) {
        if (err.reason[0] == '\0')
            note_problem(r, "%s: a view refused with an empty reason", view);
        json_object_set_new(v, "status", json_string("refused"));
        json_object_set_new(v, "code", json_integer(rc));
        json_object_set_new(v, "reason", text(err.reason));
        json_array_append_new(views, v);
        return;
    }
    json_object_set_new(v, "status", json_string("ok"));
    /* What a view says it is, as `zarrmount explain` would. */
    json_t *explained = NULL;
    zm_err_clear(&err);
    rc = zm__tree_explain(r->tree, view, &explained, &err);
    if (rc != 0 && err.reason[0] == '\0')
        note_problem(r, "%s: explain failed with an empty reason", view);
    json_decref(explained);
    if (read_all) {
        view_walk w = {r, view, json_array(), 0, 0, XXH3_createState(), 0};
        XXH3_64bits_reset(w.digest);
        walk_directory(&w, view);
        char digest[17];
        snprintf(digest, sizeof digest, "%016" PRIx64, (uint64_t)XXH3_64bits_digest(w.digest));
        XXH3_freeState(w.digest);
        json_object_set_new(v, "files", json_integer((json_int_t)w.files));
        json_object_set_new(v, "bytes", json_integer((json_int_t)w.bytes));
        json_object_set_new(v, "digest", json_string(digest));
        json_object_set_new(v, "truncated", json_boolean(w.truncated));
        json_object_set_new(v, "errors", w.errors);
    }
    json_array_append_new(views, v);
}

struct keys {
    char *names[MAX_KEYS];
    size_t count;
};

static int collect_key(void *context, const char *name, const zm_node *node)
{
    (void)node;
    struct keys *k = context;
    if (k->count < MAX_KEYS)
        k->names[k->count++] = strdup(name);
    return 0;
}

static void keys_free(struct keys *k)
{
    for (size_t i = 0; i < k->count; i++)
        free(k->names[i]);
}

/* The number of cells, from .zarrmount/info.json. */
static uint64_t cells(run *r)
{
    char text[8192];
    size_t done = 0;
    zm_err err;
    zm_err_clear(&err);
    zm_node node;
    if (zm__tree_lookup(r->tree, ".zarrmount/info.json", &node, &err) != 0 ||
        zm__tree_read(r->tree, ".zarrmount/info.json", 0, sizeof text - 1, text, &done, &err) != 0) {
        note_problem(r, "%s: cannot read it", ".zarrmount/info.json");
        return 0;
    }
    text[done] = '\0';
    json_t *info = json_loads(text, 0, NULL);
    uint64_t n = (uint64_t)json_integer_value(json_object_get(info, "nObs"));
    json_decref(info);
    return n;
}

static void method_views(run *r, json_t *views, const char *method, const char *k_text)
{
    struct keys keys = {{0}, 0};
    zm_err err;
    zm_err_clear(&err);
    int rc = zm__tree_list(r->tree, method, collect_key, &keys, &err);
    if (rc != 0 && err.reason[0] == '\0')
        note_problem(r, "%s: listing failed with an empty reason", method);
    for (size_t i = 0; i < keys.count; i++) {
        char view[1024];
        snprintf(view, sizeof view, "%s/%s/seed0/%s", method, keys.names[i], k_text);
        visit_view(r, views, view, i == 0);
    }
    if (strcmp(method, "stratified") == 0 && keys.count > 0) {
        /* The other allocation, with a minimum, over the first field. */
        char view[1024];
        snprintf(view, sizeof view, "stratified/%s/balanced/min=1/seed2/%s", keys.names[0], k_text);
        visit_view(r, views, view, 0);
    }
    keys_free(&keys);
}

/* `zarrmount inspect FILE` and `--json`, their output dropped: what matters
 * is that they return. (A refusal's line goes to stderr, which is kept: a
 * sanitizer's report there must not be lost.) */
static int inspect(const char *path)
{
    FILE *out = fopen("/dev/null", "w");
    if (out == NULL)
        return 0;
    char *argv_text[] = {(char *)path, NULL};
    char *argv_json[] = {(char *)path, "--json", NULL};
    int rc = zm_inspect_main(1, argv_text, out);
    int rc_json = zm_inspect_main(2, argv_json, out);
    fclose(out);
    return rc != 0 || rc_json != 0;
}

static void one_file(const char *path, uint64_t chunk_bytes, uint64_t cache_bytes)
{
    json_t *report = json_pack("{s:o}", "file", text(path));
    run r = {NULL, json_array()};
    zm_tree_options options = {.source = path,
                               .codec = "none",
                               .chunk_bytes = chunk_bytes,
                               .cache_bytes = cache_bytes,
                               .threads = 2,
                               .cache_dir = "none",
                               .ahead_idle_seconds = 0};
    zm_err err;
    zm_err_clear(&err);
    int refused_by_inspect = inspect(path);
    int rc = zm__tree_open(&options, &r.tree, &err);
    if (rc != 0) {
        json_object_set_new(report, "open", json_string("refused"));
        json_object_set_new(report, "code", json_integer(rc));
        json_object_set_new(report, "reason", text(err.reason));
        if (err.reason[0] == '\0')
            note_problem(&r, "%s: refused with an empty reason", path);
        if (strchr(err.reason, '\n'))
            note_problem(&r, "%s: a refusal of more than one line", path);
    } else {
        json_object_set_new(report, "open", json_string("ok"));
        json_object_set_new(report, "inspect", json_string(refused_by_inspect ? "refused" : "ok"));
        json_t *views = json_array();
        uint64_t n = cells(&r);
        char half[64], third[64];
        snprintf(half, sizeof half, "k=%" PRIu64, n / 2 ? n / 2 : 1);
        snprintf(third, sizeof third, "k=%" PRIu64, n / 3 ? n / 3 : 1);
        visit_view(&r, views, "file", 1);
        visit_view(&r, views, "full", 1);
        char view[128];
        snprintf(view, sizeof view, "uniform/seed7/%s", half);
        visit_view(&r, views, view, 1);
        snprintf(view, sizeof view, "blocks/seed3/%s", third);
        visit_view(&r, views, view, 1);
        method_views(&r, views, "stratified", half);
        method_views(&r, views, "spatial", half);
        json_object_set_new(report, "views", views);
        zm_synth_walk_stats walks;
        zm_synth_get_walk_stats(zm__tree_synth(r.tree), &walks);
        zm__tree_close(r.tree);
        json_object_set_new(report, "walks_spilled", json_integer((json_int_t)walks.spilled));
    }
    json_object_set_new(report, "problems", r.problems);
    char *line = json_dumps(report, JSON_COMPACT | JSON_ENSURE_ASCII);
    json_decref(report);
    if (line) {
        printf("%s\n", line);
        free(line);
    }
    fflush(stdout);
}

static void report_crash(const char *path, const char *why)
{
    json_t *report = json_pack("{s:s, s:s}", "file", path, "crash", why);
    char *line = json_dumps(report, JSON_COMPACT | JSON_ENSURE_ASCII);
    json_decref(report);
    printf("%s\n", line ? line : "{}");
    free(line);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    unsigned timeout = 120;
    uint64_t chunk_bytes = 1024;
    /* Small: a quarter of it is what walks may hold, so arrays of a few KiB
     * are walked through a spill file, and the caches evict all the time. */
    uint64_t cache_bytes = 16u << 10;
    int first = 1;
    for (; first < argc && argv[first][0] == '-'; first++) {
        if (strcmp(argv[first], "--timeout") == 0 && first + 1 < argc)
            timeout = (unsigned)strtoul(argv[++first], NULL, 10);
        else if (strcmp(argv[first], "--chunk-bytes") == 0 && first + 1 < argc)
            chunk_bytes = strtoull(argv[++first], NULL, 10);
        else if (strcmp(argv[first], "--cache-bytes") == 0 && first + 1 < argc)
            cache_bytes = strtoull(argv[++first], NULL, 10);
        else {
            fprintf(stderr, "usage: model_driver [--timeout SECONDS] [--chunk-bytes N] "
                            "[--cache-bytes N] FILE...\n");
            return 2;
        }
    }
    int status = 0;
    for (int i = first; i < argc; i++) {
        fflush(stdout);
        fprintf(stderr, "== model_driver: %s\n", argv[i]);
        fflush(stderr);
        pid_t child = fork();
        if (child < 0) {
            perror("model_driver: fork");
            return 1;
        }
        if (child == 0) {
            /* A hang ends here: SIGALRM's default action kills the child. */
            alarm(timeout);
            one_file(argv[i], chunk_bytes, cache_bytes);
            exit(0);
        }
        int wstatus = 0;
        while (waitpid(child, &wstatus, 0) < 0 && errno == EINTR)
            ;
        char why[128] = "";
        if (WIFSIGNALED(wstatus))
            snprintf(why, sizeof why, WTERMSIG(wstatus) == SIGALRM ? "hang: killed after %u s"
                                                                   : "killed by signal %d",
                     WTERMSIG(wstatus) == SIGALRM ? timeout : (unsigned)WTERMSIG(wstatus));
        else if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) != 0)
            snprintf(why, sizeof why, "exit status %d (a sanitizer report or a leak)",
                     WEXITSTATUS(wstatus));
        if (why[0]) {
            report_crash(argv[i], why);
            status = 1;
        }
    }
    return status;
}
