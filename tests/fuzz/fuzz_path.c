/* libFuzzer target: the mounted tree's path grammar (src/tree/paths.c), through
 * the calls the FUSE layer makes with a path (zm__tree_lookup, _getattr,
 * _readlink, _list, _read) and `zarrmount explain`'s (zm__tree_explain),
 * over a small fixture source opened once.
 *
 * Input: the path, relative to the mount point (cut at its first NUL).
 * The source is $ZM_FUZZ_SOURCE, else h5ad/full-csr.h5ad of the fixtures
 * ($ZM_FIXTURES_DIR/sources, else the source tree's): 60 cells with
 * categorical, string and boolean obs columns and dense and sparse obsm
 * entries, so every method has keys to take. The tree's sets directory
 * (sets/) is a temporary one written at start (SETS, the sets
 * tests/integration/hostile_paths.txt names: squares, names, and bad,
 * which does not verify), removed at exit.
 *
 * Properties: a path that does not exist is -ENOENT with a reason (never
 * -EIO: the source is sound); a link reads as k=<K>, K canonical in
 * [1, n], or, for sets/NAME, as NAME@<16 lowercase hex digits>, a directory
 * that exists; readlink of anything else is -EINVAL; a file has a known size,
 * reads to it, and a Zarr document (.zgroup, .zattrs, .zarray, .zmetadata)
 * or .zarrmount file is valid JSON; a directory lists, every name it lists
 * is one path component that exists with the kind (and the size) listed;
 * explain answers for every directory and file that exists, with its kind
 * (a view, or "directory" or "file" as the lookup says) and what it holds.
 */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <unistd.h>

#include "zarrmount/tree.h"
#include "fuzz.h"

#ifndef ZM_FUZZ_FIXTURES
#define ZM_FUZZ_FIXTURES "fixtures"
#endif

/* Names of a listing checked one by one (a listing can hold many chunks). */
#define LISTED_CHECKED 16
/* Bytes read of a file; a JSON document is read whole up to this. */
#define READ_MAX (1u << 20)

static zm_tree *tree;
static unsigned long long n_obs; /* the source's cells, from info.json */

/* The sets directory's files (for the 60 cells of full-csr.h5ad). */
static const struct {
    const char *name, *text;
} SETS[] = {
    {"squares.json", "{\"cells\": {\"kept\": \"AQIEBggKDA==\", \"digest\": \"ce0722014cee9b39\", "
                     "\"spec\": {\"method\": \"selection\", \"nObs\": 60, \"k\": 7}}}\n"},
    {"bad.json", "{\"cells\": {\"kept\": \"AQIEBggKDA==\", \"digest\": \"0000000000000000\", "
                 "\"spec\": {\"method\": \"selection\", \"nObs\": 60, \"k\": 7}}}\n"},
    {"names.txt", "cell_000\ncell_059\n"},
};
static char sets_dir[PATH_MAX];

static void remove_sets(void)
{
    char file[PATH_MAX + 64];
    for (size_t i = 0; i < sizeof SETS / sizeof SETS[0]; i++) {
        snprintf(file, sizeof file, "%s/%s", sets_dir, SETS[i].name);
        unlink(file);
    }
    rmdir(sets_dir);
}

static void write_sets(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(sets_dir, sizeof sets_dir, "%s/zm-fuzz-sets-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (mkdtemp(sets_dir) == NULL) {
        fprintf(stderr, "fuzz_path: cannot make %s: %s\n", sets_dir, strerror(errno));
        exit(1);
    }
    atexit(remove_sets);
    for (size_t i = 0; i < sizeof SETS / sizeof SETS[0]; i++) {
        char file[PATH_MAX + 64];
        snprintf(file, sizeof file, "%s/%s", sets_dir, SETS[i].name);
        FILE *f = fopen(file, "w");
        if (f == NULL || fputs(SETS[i].text, f) < 0 || fclose(f) != 0) {
            fprintf(stderr, "fuzz_path: cannot write %s\n", file);
            exit(1);
        }
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    char source[PATH_MAX];
    const char *given = getenv("ZM_FUZZ_SOURCE");
    const char *fixtures = getenv("ZM_FIXTURES_DIR");
    if (given != NULL && given[0] != '\0')
        snprintf(source, sizeof source, "%s", given);
    else
        snprintf(source, sizeof source, "%s/sources/h5ad/full-csr.h5ad",
                 fixtures != NULL && fixtures[0] != '\0' ? fixtures : ZM_FUZZ_FIXTURES);
    write_sets();
    /* Small caches, nothing on disk, no work ahead: each input's calls are
     * all that runs. */
    zm_tree_options options = {.source = source,
                               .sets_dir = sets_dir,
                               .chunk_bytes = 4096,
                               .cache_bytes = 64u << 20,
                               .threads = 1,
                               .cache_dir = "none",
                               .ahead_idle_seconds = 0};
    zm_err err;
    zm_err_clear(&err);
    if (zm__tree_open(&options, &tree, &err) != 0) {
        fprintf(stderr, "fuzz_path: cannot open %s: %s\n", source, err.reason);
        exit(1);
    }
    char info[65536];
    size_t done = 0;
    json_t *doc = NULL;
    if (zm__tree_read(tree, ".zarrmount/info.json", 0, sizeof info, info, &done, &err) == 0)
        doc = json_loadb(info, done, 0, NULL);
    json_t *n = doc ? json_object_get(doc, "nObs") : NULL;
    if (!json_is_integer(n)) {
        fprintf(stderr, "fuzz_path: no nObs in .zarrmount/info.json\n");
        exit(1);
    }
    n_obs = (unsigned long long)json_integer_value(n);
    json_decref(doc);
    return 0;
}

static void check_refusal(int rc, const zm_err *err, const char *what, const char *path)
{
    static const int allowed[] = {-ENOENT, -ENAMETOOLONG, -ENOTDIR};
    char label[160];
    snprintf(label, sizeof label, "%s \"%.100s\"", what, path);
    zm_fuzz_check_failure(rc, err, allowed, 3, label);
}

/* Whether path is as FUSE gives them: components joined by single slashes,
 * none empty. */
static int fuse_shaped(const char *path)
{
    if (path[0] == '\0')
        return 1;
    if (path[0] == '/' || path[strlen(path) - 1] == '/' || strstr(path, "//"))
        return 0;
    return 1;
}

static const char *leaf(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

static void check_file(const char *path, const zm_node *node)
{
    ZM_FUZZ_CHECK(node->size != ZM_SIZE_UNKNOWN, "file \"%.100s\" without a size", path);
    const char *name = leaf(path);
    int document = (name[0] == '.' && name[1] == 'z') || !strncmp(path, ".zarrmount/", 11);
    size_t want = node->size < (document ? READ_MAX : 4096) ? (size_t)node->size
                                                            : (document ? READ_MAX : 4096);
    uint8_t *buffer = malloc(want + 1);
    size_t done = 0;
    zm_err err;
    zm_err_clear(&err);
    int rc = zm__tree_read(tree, path, 0, want + 1, buffer, &done, &err);
    ZM_FUZZ_CHECK(rc == 0, "read \"%.100s\": %d %s", path, rc, err.reason);
    if (!node->live)
        ZM_FUZZ_CHECK(done == (node->size <= want ? node->size : want + 1),
                      "\"%.100s\" of %llu bytes read %zu", path, (unsigned long long)node->size,
                      done);
    if (document && node->size <= READ_MAX && done <= want) {
        json_error_t error;
        json_t *doc = json_loadb((const char *)buffer, done, 0, &error);
        ZM_FUZZ_CHECK(doc != NULL, "\"%.100s\" is not JSON: %s", path, error.text);
        json_decref(doc);
    }
    free(buffer);
}

typedef struct listing {
    char *names[LISTED_CHECKED];
    zm_node nodes[LISTED_CHECKED];
    size_t count, total;
} listing;

static int collect(void *context, const char *name, const zm_node *node)
{
    listing *l = context;
    ZM_FUZZ_CHECK(name[0] != '\0' && strchr(name, '/') == NULL && strcmp(name, ".") &&
                      strcmp(name, ".."),
                  "listed name \"%.100s\" is not one component", name);
    if (l->count < LISTED_CHECKED) {
        l->names[l->count] = strdup(name);
        l->nodes[l->count++] = *node;
    }
    l->total++;
    return 0;
}

static void check_directory(const char *path)
{
    listing l;
    memset(&l, 0, sizeof l);
    zm_err err;
    zm_err_clear(&err);
    int rc = zm__tree_list(tree, path, collect, &l, &err);
    ZM_FUZZ_CHECK(rc == 0, "list \"%.100s\": %d %s", path, rc, err.reason);
    for (size_t i = 0; i < l.count; i++) {
        size_t length = strlen(path) + strlen(l.names[i]) + 2;
        char *child = malloc(length);
        snprintf(child, length, "%s%s%s", path, path[0] ? "/" : "", l.names[i]);
        zm_node node;
        zm_err_clear(&err);
        rc = zm__tree_lookup(tree, child, &node, &err);
        ZM_FUZZ_CHECK(rc == 0, "\"%.100s\" is listed but does not exist: %s", child, err.reason);
        ZM_FUZZ_CHECK(node.kind == l.nodes[i].kind, "\"%.100s\" listed as kind %d, is %d", child,
                      l.nodes[i].kind, node.kind);
        if (node.kind == ZM_NODE_FILE && !node.live && l.nodes[i].size != ZM_SIZE_UNKNOWN)
            ZM_FUZZ_CHECK(node.size == l.nodes[i].size,
                          "\"%.100s\" listed with %llu bytes, has %llu", child,
                          (unsigned long long)l.nodes[i].size, (unsigned long long)node.size);
        free(child);
        free(l.names[i]);
    }
}

/* sets/NAME: a link to NAME@<16 lowercase hex digits>, a directory. */
static void check_set_link(const char *path, const char *target)
{
    const char *name = path + 5;
    size_t length = strcspn(name, "/"); /* "sets/NAME/" names the link too */
    int shaped = strncmp(target, name, length) == 0 && target[length] == '@' &&
                 strlen(target + length + 1) == 16 &&
                 strspn(target + length + 1, "0123456789abcdef") == 16;
    ZM_FUZZ_CHECK(shaped, "\"%.100s\" links to \"%.100s\", not %.*s@<digest>", path, target,
                  (int)length, name);
    char version[PATH_MAX];
    snprintf(version, sizeof version, "sets/%s", target);
    zm_node node;
    zm_err err;
    zm_err_clear(&err);
    int rc = zm__tree_lookup(tree, version, &node, &err);
    ZM_FUZZ_CHECK(rc == 0 && node.kind == ZM_NODE_DIRECTORY,
                  "\"%.100s\" links to \"%.100s\", which is not a directory: %d %s", path, target,
                  rc, err.reason);
}

static void check_link(const char *path)
{
    char target[PATH_MAX];
    zm_err err;
    zm_err_clear(&err);
    int rc = zm__tree_readlink(tree, path, target, sizeof target, &err);
    ZM_FUZZ_CHECK(rc == 0, "readlink \"%.100s\": %s", path, err.reason);
    /* sets/NAME (a trailing "/" or not: the tree takes both spellings). */
    const char *slash = strncmp(path, "sets/", 5) == 0 ? strchr(path + 5, '/') : NULL;
    if (strncmp(path, "sets/", 5) == 0 && (slash == NULL || slash[1] == '\0')) {
        check_set_link(path, target);
        return;
    }
    ZM_FUZZ_CHECK(!strncmp(target, "k=", 2) && target[2] >= '1' && target[2] <= '9' &&
                      strspn(target + 2, "0123456789") == strlen(target + 2),
                  "\"%.100s\" links to \"%s\"", path, target);
    /* The size a share names is a count of the source's cells (of a set's:
     * at most n). */
    char *end;
    unsigned long long k = strtoull(target + 2, &end, 10);
    ZM_FUZZ_CHECK(k >= 1 && k <= n_obs, "\"%.100s\" links to k = %llu of %llu cells", path, k,
                  n_obs);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *path = zm_fuzz_string(data, size);
    zm_node node;
    zm_err err;
    zm_err_clear(&err);
    int rc = zm__tree_lookup(tree, path, &node, &err);
    if (rc != 0) {
        check_refusal(rc, &err, "lookup", path);
        zm_err_clear(&err);
        ZM_FUZZ_CHECK(zm__tree_getattr(tree, path, &node, &err) != 0,
                      "getattr finds \"%.100s\", lookup does not", path);
        free(path);
        return 0;
    }

    zm_node again;
    zm_err_clear(&err);
    ZM_FUZZ_CHECK(zm__tree_getattr(tree, path, &again, &err) == 0 && again.kind == node.kind &&
                      (node.live || again.size == node.size),
                  "getattr of \"%.100s\" differs from its lookup", path);
    if (node.kind == ZM_NODE_LINK) {
        check_link(path);
    } else {
        char target[PATH_MAX];
        zm_err_clear(&err);
        ZM_FUZZ_CHECK(zm__tree_readlink(tree, path, target, sizeof target, &err) == -EINVAL &&
                          err.reason[0],
                      "readlink of \"%.100s\", not a link", path);
    }
    if (node.kind == ZM_NODE_FILE)
        check_file(path, &node);
    /* The rest holds for paths as FUSE makes them (the tree takes others
     * leniently: "uniform/" is uniform's directory). */
    if (!fuse_shaped(path)) {
        free(path);
        return 0;
    }
    if (node.kind == ZM_NODE_DIRECTORY)
        check_directory(path);
    if (node.kind != ZM_NODE_LINK) {
        json_t *explained = NULL;
        zm_err_clear(&err);
        rc = zm__tree_explain(tree, path, &explained, &err);
        ZM_FUZZ_CHECK(rc == 0, "explain \"%.100s\" (which exists): %d %s", path, rc, err.reason);
        /* It says what the path is: a view (whose store holds directories and
         * files), or a directory or a file, and what that holds. */
        const char *kind = json_string_value(json_object_get(explained, "kind"));
        ZM_FUZZ_CHECK(kind != NULL, "explain \"%.100s\" gives no kind", path);
        if (strcmp(kind, "view") != 0) {
            ZM_FUZZ_CHECK(!strcmp(kind, node.kind == ZM_NODE_FILE ? "file" : "directory"),
                          "explain calls \"%.100s\" a %s", path, kind);
            ZM_FUZZ_CHECK(json_is_string(json_object_get(explained, "holds")),
                          "explain of \"%.100s\" does not say what it holds", path);
        }
        json_decref(explained);
    }
    free(path);
    return 0;
}
