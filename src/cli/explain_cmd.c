/* `zarrmount explain SOURCE PATH [--json]` or `zarrmount explain MNT/PATH
 * [--json]`: what a path is, or why it does not exist, from the tree's
 * zm__tree_explain (src/tree/explain.c), printed as text or JSON. */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "zarrmount/cli.h"
#include "zarrmount/text.h"
#include "zarrmount/tree.h"

#define EXIT_REFUSED 2

/* For MNT/PATH: the mount's root (the longest prefix holding
 * .zarrmount/info.json), its source, and the path inside. */
static int find_mount(const char *given, char **source, char **inside, char **sets, zm_err *err)
{
    char absolute[PATH_MAX * 2];
    if (given[0] == '/') {
        snprintf(absolute, sizeof absolute, "%s", given);
    } else {
        char cwd[PATH_MAX];
        if (getcwd(cwd, sizeof cwd) == NULL)
            return zm_err_set(err, -errno, "cannot find the current directory: %s", strerror(errno));
        snprintf(absolute, sizeof absolute, "%s/%s", cwd, given);
    }
    size_t length = strlen(absolute);
    while (length > 1 && absolute[length - 1] == '/')
        absolute[--length] = '\0';
    for (size_t end = length; end > 0; end--) {
        if (end != length && absolute[end] != '/')
            continue;
        char info[PATH_MAX * 2 + 32];
        snprintf(info, sizeof info, "%.*s/.zarrmount/info.json", (int)end, absolute);
        struct stat st;
        if (stat(info, &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        json_error_t error;
        json_t *document = json_load_file(info, 0, &error);
        const char *path = json_string_value(json_object_get(document, "source"));
        if (path == NULL) {
            json_decref(document);
            return zm_err_set(err, -EINVAL, "%s does not name the mount's source", info);
        }
        *source = strdup(path);
        /* The mount's sets directory, if it has one (-o sets=). */
        const char *directory =
            json_string_value(json_object_get(json_object_get(document, "options"), "sets"));
        *sets = directory ? strdup(directory) : NULL;
        json_decref(document);
        const char *rest = absolute + end;
        while (*rest == '/')
            rest++;
        *inside = strdup(rest);
        return *source && *inside ? 0 : zm_err_set(err, -ENOMEM, "out of memory");
    }
    return zm_err_set(err, -EINVAL,
                      "%s is not inside a zarrmount mount (no .zarrmount/info.json above it): "
                      "give SOURCE PATH",
                      given);
}

static void print_value(FILE *out, const json_t *v)
{
    char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    fputs(text ? text : "?", out);
    free(text);
}

static void print_text(FILE *out, const json_t *e)
{
    const char *kind = json_string_value(json_object_get(e, "kind"));
    printf("%s: %s\n", json_string_value(json_object_get(e, "path")), kind);
    if (kind && (strcmp(kind, "directory") == 0 || strcmp(kind, "file") == 0)) {
        fprintf(out, "  holds       %s\n", json_string_value(json_object_get(e, "holds")));
        return;
    }
    if (kind && strcmp(kind, "link") == 0)
        fprintf(out, "  link        %s -> %s\n  size rule   %s\n",
                json_string_value(json_object_get(e, "size")),
                json_string_value(json_object_get(e, "target")),
                json_string_value(json_object_get(e, "sizeRule")));
    static const struct {
        const char *key, *label;
    } rows[] = {
        {"view", "view"},          {"inside", "inside"},        {"method", "method"},
        {"rule", "rule"},          {"nObs", "cells (n)"},       {"kRequested", "k asked"},
        {"k", "k kept"},           {"seed", "seed"},            {"blockSize", "block size"},
        {"blockSizeFrom", "B from"}, {"field", "field"},        {"allocation", "allocation"},
        {"minimum", "minimum"},    {"embedding", "embedding"},  {"columns", "columns"},
        {"gridSize", "grid size"}, {"digest", "digest"},      {"read", "read as"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const json_t *v = json_object_get(e, rows[i].key);
        if (v == NULL)
            continue;
        fprintf(out, "  %-11s ", rows[i].label);
        if (json_is_string(v))
            fputs(json_string_value(v), out);
        else if (json_is_object(v))
            fprintf(out, "%s (%s: %s)", json_string_value(json_object_get(v, "rule")),
                    json_string_value(json_object_get(v, "element")),
                    json_string_value(json_object_get(v, "explanation")));
        else
            print_value(out, v);
        fputc('\n', out);
    }
    /* Over a set of cells: which, and from where. */
    const json_t *set = json_object_get(e, "set");
    if (json_is_object(set))
        fprintf(out, "  set         %s: %lld cells, digest %s, from %s\n",
                json_string_value(json_object_get(set, "name")),
                (long long)json_integer_value(json_object_get(set, "size")),
                json_string_value(json_object_get(set, "digest")),
                json_string_value(json_object_get(set, "file")));
    const json_t *where = json_object_get(e, "where");
    if (json_is_object(where)) {
        fprintf(out, "  where       obs/%s is one of ", json_string_value(json_object_get(where, "key")));
        size_t i;
        const json_t *v;
        json_array_foreach(json_object_get(where, "values"), i, v)
            fprintf(out, "%s\"%s\"", i ? ", " : "", json_string_value(v));
        fprintf(out, ": %lld cells\n", (long long)json_integer_value(json_object_get(where, "size")));
    }
    /* A file with a priority record: whether it verified. */
    const json_t *priority = json_object_get(e, "priority");
    if (json_is_true(json_object_get(priority, "verified")))
        fprintf(out, "  priority    verified: the rows are seed %lld's priority order, cells named "
                "by original position\n",
                (long long)json_integer_value(json_object_get(priority, "seed")));
    else if (json_is_true(json_object_get(priority, "recorded")))
        fprintf(out, "  priority    not verified (%s): each row its own position\n",
                json_string_value(json_object_get(priority, "reason")));
    const json_t *strata = json_object_get(e, "strata");
    if (strata) {
        fprintf(out, "  strata      %zu occupied (stratum, name: cells -> kept)\n",
                json_array_size(strata));
        size_t i;
        const json_t *s;
        json_array_foreach(strata, i, s) {
            if (i == 50) {
                fprintf(out, "              ... %zu more (--json lists them all)\n",
                        json_array_size(strata) - 50);
                break;
            }
            fprintf(out, "              %lld, ", (long long)json_integer_value(json_object_get(s, "stratum")));
            print_value(out, json_object_get(s, "name"));
            fprintf(out, ": %lld -> %lld\n", (long long)json_integer_value(json_object_get(s, "cells")),
                    (long long)json_integer_value(json_object_get(s, "kept")));
        }
    }
    const json_t *cells = json_object_get(e, "firstCells");
    if (cells) {
        const json_t *names = json_object_get(e, "firstCellNames");
        fprintf(out, "  first cells ");
        size_t i;
        const json_t *c;
        json_array_foreach(cells, i, c) {
            fprintf(out, "%s%lld", i ? ", " : "", (long long)json_integer_value(c));
            if (names)
                fprintf(out, " (%s)", json_string_value(json_array_get(names, i)));
        }
        fputc('\n', out);
    }
    const json_t *modalities = json_object_get(e, "modalities");
    if (modalities) {
        fprintf(out, "  modalities  %s\n", json_string_value(json_object_get(e, "modalityRule")));
        size_t i;
        const json_t *m;
        json_array_foreach(modalities, i, m)
            fprintf(out, "              %s: %lld of its %lld cells (%s)\n",
                    json_string_value(json_object_get(m, "name")),
                    (long long)json_integer_value(json_object_get(m, "rows")),
                    (long long)json_integer_value(json_object_get(m, "nObs")),
                    json_string_value(json_object_get(m, "store")));
    }
}

int zm_explain_main(int argc, char **argv)
{
    const char *positional[2];
    int count = 0, as_json = 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0)
            as_json = 1;
        else if (count < 2 && argv[i][0] != '-')
            positional[count++] = argv[i];
        else {
            fprintf(stderr, "zarrmount explain: unexpected argument '%s' (usage: zarrmount explain "
                            "SOURCE PATH [--json] or zarrmount explain MNT/PATH [--json])\n",
                    argv[i]);
            return EXIT_REFUSED;
        }
    }
    if (count == 0) {
        fprintf(stderr, "zarrmount explain: give SOURCE PATH or MNT/PATH\n");
        return EXIT_REFUSED;
    }
    zm_err err;
    zm_err_clear(&err);
    char *source = NULL, *inside = NULL, *sets = NULL;
    if (count == 2) {
        source = strdup(positional[0]);
        inside = strdup(positional[1]);
    } else if (find_mount(positional[0], &source, &inside, &sets, &err) != 0) {
        fprintf(stderr, "zarrmount explain: %s\n", err.reason);
        return EXIT_REFUSED;
    }
    /* Paths inside the tree have no leading or trailing slash. */
    char *path = inside;
    while (*path == '/')
        path++;
    size_t length = strlen(path);
    while (length > 0 && path[length - 1] == '/')
        path[--length] = '\0';
    zm_tree_options options = {.source = source, .threads = 1, .cache_dir = "none",
                               .sets_dir = sets};
    zm_tree *tree = NULL;
    int status = 0;
    int rc = zm__tree_open(&options, &tree, &err);
    json_t *e = NULL;
    if (rc == 0)
        rc = zm__tree_explain(tree, path, &e, &err);
    if (rc == 0) {
        if (as_json) {
            char *text = json_dumps(e, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
            printf("%s\n", text ? text : "{}");
            free(text);
        } else {
            print_text(stdout, e);
        }
    } else if (as_json) {
        /* JSON holds UTF-8 only; the path (and the reason quoting it) may be any bytes. */
        char *shown = malloc(strlen(path) + 1);
        char reason[ZM_REASON_MAX];
        if (shown != NULL)
            zm_text_utf8_copy(shown, strlen(path) + 1, path);
        zm_text_utf8_copy(reason, sizeof reason, err.reason);
        json_t *refusal = json_pack("{s:s, s:s, s:s}", "path", shown ? shown : "", "kind", "refused",
                                    "reason", reason);
        free(shown);
        char *text = json_dumps(refusal, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        printf("%s\n", text ? text : "{}");
        free(text);
        json_decref(refusal);
        status = rc == -ENOMEM ? 1 : EXIT_REFUSED;
    } else {
        printf("%s: does not exist: %s\n", path[0] ? path : "/", err.reason);
        status = rc == -ENOMEM ? 1 : EXIT_REFUSED;
    }
    json_decref(e);
    if (tree)
        zm__tree_close(tree);
    free(source);
    free(inside);
    free(sets);
    if (fflush(stdout) != 0)
        status = 1;
    return status;
}
