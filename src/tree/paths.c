/* The path grammar of the mounted tree: a path to what it names (the root,
 * .zarrmount, a method's settings directories, a link, a view and the place
 * inside its store), refusing with a reason every path that names nothing;
 * and paths as UTF-8 for JSON. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "tree/tree_internal.h"

/* ---- Paths --------------------------------------------------------------------- */

/* A canonical decimal (no sign, no leading zero) in [low, high]. */
int zm__parse_number(const char *text, size_t length, uint64_t low, uint64_t high, uint64_t *out)
{
    if (length == 0 || length > 20 || (text[0] == '0' && length > 1))
        return -1;
    uint64_t v = 0;
    for (size_t i = 0; i < length; i++) {
        if (text[i] < '0' || text[i] > '9')
            return -1;
        unsigned digit = (unsigned)(text[i] - '0');
        if (v > (UINT64_MAX - digit) / 10)
            return -1;
        v = v * 10 + digit;
    }
    if (v < low || v > high)
        return -1;
    *out = v;
    return 0;
}

static size_t component(const char *p) { const char *s = strchr(p, '/'); return s ? (size_t)(s - p) : strlen(p); }

/* The next component of *p (its length), moving *p past it. */
static size_t take(const char **p, const char **part)
{
    *part = *p;
    size_t n = component(*p);
    *p = (*p)[n] ? *p + n + 1 : *p + n;
    return n;
}

/* "seed<S>", then nothing (T_SEED), or a size: k=<K> (a view), share= or
 * pct= (a link to the k= it resolves to). */
static int parse_seed_and_size(zm_tree *t, const char *p, const char *prefix, target *out,
                               zm_err *err)
{
    const char *part;
    size_t n = take(&p, &part);
    uint64_t seed;
    if (n < 5 || strncmp(part, "seed", 4) || zm__parse_number(part + 4, n - 4, 0, UINT32_MAX, &seed) != 0)
        return zm_err_set(err, -ENOENT,
                          "%.*s: expected seed<S> with S a canonical decimal in 0..4294967295",
                          (int)(n > 80 ? 80 : n), part);
    out->spec.seed = (uint32_t)seed;
    if (*p == '\0') {
        out->kind = T_SEED;
        return 0;
    }
    n = take(&p, &part);
    /* Sizes of a share are of the cells the method runs over. */
    uint64_t n_obs = out->spec.set ? out->spec.set->count : zm_source_n_obs(t->source);
    if ((n > 6 && !strncmp(part, "share=", 6)) || (n > 4 && !strncmp(part, "pct=", 4))) {
        int share = part[0] == 's';
        size_t skip = share ? 6 : 4;
        char text[64];
        if (n - skip >= sizeof text)
            return zm_err_set(err, -ENOENT, "%.*s: too long a size", (int)(n > 80 ? 80 : n), part);
        memcpy(text, part + skip, n - skip);
        text[n - skip] = '\0';
        uint64_t k;
        zm_err why;
        zm_err_clear(&why);
        if (zm_size_from_text(text, share ? ZM_SHARE_FRACTION : ZM_SHARE_PERCENT, n_obs, &k, &why) != 0)
            return zm_err_set(err, -ENOENT, "%.*s: %s", (int)n, part, why.reason);
        snprintf(out->link, sizeof out->link, "k=%" PRIu64, k);
        if (*p == '\0') {
            out->kind = T_LINK;
            return 0;
        }
        /* A path through the link (the kernel follows links itself; explain
         * gets them whole): the k= view it names. */
        out->spec.k = k;
        goto view;
    }
    if (n < 3 || strncmp(part, "k=", 2))
        return zm_err_set(err, -ENOENT, "%.*s: expected k=<K>, share=<fraction> or pct=<percent>",
                          (int)(n > 80 ? 80 : n), part);
    if (zm__parse_number(part + 2, n - 2, 0, UINT64_MAX, &out->spec.k) != 0)
        return zm_err_set(err, -ENOENT, "%.*s: k is a canonical decimal", (int)(n > 80 ? 80 : n),
                          part);
    if (out->spec.k == 0)
        return zm_err_set(err, -ENOENT, "%.*s: k = 0 is refused: a subsample keeps at least one cell",
                          (int)n, part);
view:
    out->kind = T_VIEW;
    out->rest = p;
    int length = snprintf(out->key, sizeof out->key, "%s/seed%u/k=%" PRIu64, prefix,
                          out->spec.seed, out->spec.k);
    if (length < 0 || (size_t)length >= sizeof out->key)
        return zm_err_set(err, -ENAMETOOLONG, "%s: too long a view", prefix);
    return 0;
}

/* A key from the path: one component, at most ZM_VIEW_KEY_MAX - 1 bytes. */
static int copy_key(const char *part, size_t n, char *key, zm_err *err)
{
    if (n == 0 || n >= ZM_VIEW_KEY_MAX)
        return zm_err_set(err, -ENOENT, "%.*s: not a key", (int)(n > 80 ? 80 : n), part);
    memcpy(key, part, n);
    key[n] = '\0';
    return 0;
}

static int parse_stratified(zm_tree *t, const char *p, target *out, zm_err *err)
{
    const char *part;
    size_t n = take(&p, &part);
    int rc = copy_key(part, n, out->spec.field, err);
    if (rc != 0)
        return rc;
    if ((rc = zm_view_field_check(t->source, out->spec.field, err)) != 0)
        return rc == -EINVAL || rc == -ENOENT ? -ENOENT : rc;
    out->spec.allocation = ZM_ALLOCATION_PROPORTIONAL;
    out->spec.minimum = 0;
    if (*p == '\0') {
        out->kind = T_FIELD;
        return 0;
    }
    if (strncmp(p, "seed", 4) != 0) {
        n = take(&p, &part);
        char name[32] = "";
        if (n < sizeof name)
            memcpy(name, part, n);
        if (zm_allocation_from_name(name, &out->spec.allocation) != 0)
            return zm_err_set(err, -ENOENT, "%.*s: expected proportional, balanced or seed<S>",
                              (int)(n > 80 ? 80 : n), part);
        if (*p == '\0') {
            out->kind = T_ALLOC;
            return 0;
        }
        n = take(&p, &part);
        if (n < 5 || strncmp(part, "min=", 4) ||
            zm__parse_number(part + 4, n - 4, 0, UINT32_MAX, &out->spec.minimum) != 0)
            return zm_err_set(err, -ENOENT, "%.*s: expected min=<m>, m a canonical decimal",
                              (int)(n > 80 ? 80 : n), part);
        if (*p == '\0') {
            out->kind = T_MINIMUM;
            return 0;
        }
    }
    char prefix[ZM__VIEW_KEY];
    snprintf(prefix, sizeof prefix, "stratified/%s/%s/min=%" PRIu64, out->spec.field,
             zm_allocation_name(out->spec.allocation), out->spec.minimum);
    return parse_seed_and_size(t, p, prefix, out, err);
}

/* The kernel's refusal of a grid that does not depend on the cells: G^d <
 * 2^53 (d the number of columns), as ENOENT with its reason. */
int zm__grid_fits(const char *embedding, uint64_t grid_size, unsigned dims, zm_err *err)
{
    double origin = 0;
    zm_request check = {.method = ZM_METHOD_SPATIAL, .n = 1, .k = 1, .coords = &origin,
                        .dims = dims, .grid_size = grid_size};
    zm_err why;
    zm_err_clear(&why);
    if (dims > 0 && zm_request_check(&check, &why) != 0)
        return zm_err_set(err, -ENOENT, "spatial/%s: %s", embedding, why.reason);
    return 0;
}

static int parse_spatial(zm_tree *t, const char *p, target *out, zm_err *err)
{
    const char *part;
    size_t n = take(&p, &part);
    int rc = copy_key(part, n, out->spec.embedding, err);
    if (rc != 0)
        return rc;
    uint64_t columns;
    if ((rc = zm_view_embedding_columns(t->source, out->spec.embedding, &columns, err)) != 0)
        return rc == -EINVAL || rc == -ENOENT ? -ENOENT : rc;
    out->spec.grid_size = ZM_DEFAULT_GRID_SIZE;
    int columns_given = 0;
    out->spec.column_count = columns < 3 ? (unsigned)columns : 3;
    for (unsigned c = 0; c < out->spec.column_count; c++)
        out->spec.columns[c] = c;
    if (*p == '\0') {
        out->kind = T_FIELD;
        return 0;
    }
    if (strncmp(p, "seed", 4) != 0) {
        n = take(&p, &part);
        if (n < 3 || strncmp(part, "G=", 2) ||
            zm__parse_number(part + 2, n - 2, 1, UINT64_MAX, &out->spec.grid_size) != 0)
            return zm_err_set(err, -ENOENT, "%.*s: expected G=<G> (G ≥ 1, canonical) or seed<S>",
                              (int)(n > 80 ? 80 : n), part);
        /* A grid no column fits (G ≥ 2^53) holds nothing: it does not exist. */
        if ((rc = zm__grid_fits(out->spec.embedding, out->spec.grid_size, 1, err)) != 0)
            return rc;
        if (*p == '\0') {
            out->kind = T_GRID;
            return 0;
        }
        n = take(&p, &part);
        if (n < 6 || strncmp(part, "cols=", 5))
            return zm_err_set(err, -ENOENT, "%.*s: expected cols=<i>[,<j>[,<l>]]",
                              (int)(n > 80 ? 80 : n), part);
        unsigned count = 0;
        const char *c = part + 5, *end = part + n;
        for (;;) {
            const char *comma = memchr(c, ',', (size_t)(end - c));
            size_t length = comma ? (size_t)(comma - c) : (size_t)(end - c);
            uint64_t column;
            if (count == 3 || zm__parse_number(c, length, 0, UINT32_MAX, &column) != 0)
                return zm_err_set(err, -ENOENT,
                                  "%.*s: one to three columns, canonical decimals, comma-separated",
                                  (int)(n > 80 ? 80 : n), part);
            if (column >= columns)
                return zm_err_set(err, -ENOENT, "%.*s: obsm/%s has %" PRIu64 " columns",
                                  (int)(n > 80 ? 80 : n), part, out->spec.embedding, columns);
            out->spec.columns[count++] = (unsigned)column;
            if (comma == NULL)
                break;
            c = comma + 1;
        }
        out->spec.column_count = count;
        columns_given = 1;
    }
    /* The refusal that does not depend on the cells, here: G^d < 2^53 (a
     * cols= directory whose grid is refused does not exist either). */
    rc = zm__grid_fits(out->spec.embedding, out->spec.grid_size, out->spec.column_count, err);
    if (rc != 0)
        return rc;
    if (columns_given && *p == '\0') {
        out->kind = T_COLUMNS;
        return 0;
    }
    char prefix[ZM__VIEW_KEY], cols[48] = "";
    for (unsigned i = 0; i < out->spec.column_count; i++)
        snprintf(cols + strlen(cols), sizeof cols - strlen(cols), "%s%u", i ? "," : "",
                 out->spec.columns[i]);
    snprintf(prefix, sizeof prefix, "spatial/%s/G=%" PRIu64 "/cols=%s", out->spec.embedding,
             out->spec.grid_size, cols);
    return parse_seed_and_size(t, p, prefix, out, err);
}

static int parse_methods(zm_tree *t, const char *p, target *out, zm_err *err);

void zm__target_clear(target *tg)
{
    zm_view_set_unref(tg->spec.set);
    tg->spec.set = NULL;
}

/* Is text[0 .. n) "@" and 16 lowercase hex digits? */
static int is_version(const char *text, size_t n)
{
    if (n != 17 || text[0] != '@')
        return 0;
    for (size_t i = 1; i < 17; i++)
        if (!((text[i] >= '0' && text[i] <= '9') || (text[i] >= 'a' && text[i] <= 'f')))
            return 0;
    return 1;
}

/* sets/, sets/NAME (a link to its version NAME@DIGEST), sets/NAME@DIGEST/
 * and the methods under it. */
static int parse_sets(zm_tree *t, const char *p, target *out, zm_err *err)
{
    if (*p == '\0') {
        if (t->sets_dir == NULL)
            return zm_err_set(err, -ENOENT, "sets/: no sets directory (mount with -o sets=DIR)");
        out->kind = T_SETS;
        return 0;
    }
    const char *part;
    size_t n = take(&p, &part);
    const char *at = n > 17 && is_version(part + n - 17, 17) ? part + n - 17 : NULL;
    size_t name_length = at ? (size_t)(at - part) : n;
    char digest[17] = "";
    if (at != NULL)
        memcpy(digest, at + 1, 16);
    /* NAME@<snapshot>: the kernel's inode of one version of the link. */
    const char *sign = memchr(part, '@', n);
    uint64_t snapshot = 0;
    int rc;
    if (at == NULL && sign != NULL && *p == '\0' &&
        zm__parse_number(sign + 1, n - (size_t)(sign + 1 - part), SET_LINK_SNAPSHOT, UINT64_MAX,
                         &snapshot) == 0) {
        name_length = (size_t)(sign - part);
        rc = zm__set_get_linked(t, part, name_length, snapshot, &out->spec.set, err);
    } else {
        rc = zm__set_get(t, part, name_length, at ? digest : NULL, &out->spec.set, err);
    }
    if (rc != 0)
        return rc;
    if (at == NULL) {
        /* The name: a link to the version it names now. A path through
         * it (explain gets them whole) is that version's. */
        snprintf(out->link, sizeof out->link, "%.*s@%s", (int)name_length, part,
                 out->spec.set->digest);
        out->set_link = 1;
        if (*p == '\0') {
            out->kind = T_LINK;
            return 0;
        }
    }
    snprintf(out->base, sizeof out->base, "sets/%.*s@%s/", (int)name_length, part,
             out->spec.set->digest);
    if (*p == '\0') {
        out->kind = T_SET;
        return 0;
    }
    out->set_link = 0;
    return parse_methods(t, p, out, err);
}

/* where/, where/KEY/, where/KEY/VALUES/ and the methods under it. */
static int parse_where(zm_tree *t, const char *p, target *out, zm_err *err)
{
    if (*p == '\0') {
        out->kind = T_WHERE;
        return 0;
    }
    const char *part;
    size_t n = take(&p, &part);
    int rc = copy_key(part, n, out->spec.field, err);
    if (rc != 0)
        return rc;
    if ((rc = zm_view_where_check(t->source, out->spec.field, err)) != 0)
        return rc == -EINVAL || rc == -ENOENT ? -ENOENT : rc;
    if (*p == '\0') {
        out->kind = T_WHERE_KEY;
        return 0;
    }
    n = take(&p, &part);
    char values[ZM_VIEW_KEY_MAX];
    if ((rc = copy_key(part, n, values, err)) != 0)
        return rc;
    char key[ZM_VIEW_KEY_MAX];
    memcpy(key, out->spec.field, sizeof key);
    out->spec.field[0] = '\0';
    if ((rc = zm__where_get(t, key, values, &out->spec.set, err)) != 0)
        return rc == -EINVAL ? -ENOENT : rc;
    snprintf(out->base, sizeof out->base, "where/%s/%s/", key, values);
    if (*p == '\0') {
        out->kind = T_SET;
        return 0;
    }
    return parse_methods(t, p, out, err);
}

int zm__parse_path(zm_tree *t, const char *path, target *out, zm_err *err)
{
    memset(out, 0, sizeof *out);
    out->rest = "";
    if (*path == '\0') {
        out->kind = T_ROOT;
        return 0;
    }
    const char *p = path, *part;
    const char *after = p;
    size_t n = take(&after, &part);
    if (n == 10 && !strncmp(part, ".zarrmount", 10)) {
        p = after;
        if (*p == '\0')
            out->kind = T_INFO_DIR;
        else if (!strcmp(p, "info.json"))
            out->kind = T_INFO_FILE;
        else if (!strcmp(p, "stats.json"))
            out->kind = T_STATS_FILE;
        else
            return zm_err_set(err, -ENOENT, "%.*s%s: no such file", SHOWN(path));
        return 0;
    }
    int rc;
    if (n == 4 && !strncmp(part, "sets", 4))
        rc = parse_sets(t, after, out, err);
    else if (n == 5 && !strncmp(part, "where", 5))
        rc = parse_where(t, after, out, err);
    else
        rc = parse_methods(t, p, out, err);
    if (rc != 0) {
        zm__target_clear(out);
        return rc;
    }
    /* A view of a set is keyed under the set's directory. */
    if (out->kind == T_VIEW && out->base[0]) {
        char key[ZM__VIEW_KEY];
        if ((size_t)snprintf(key, sizeof key, "%s%s", out->base, out->key) >= sizeof key) {
            zm__target_clear(out);
            return zm_err_set(err, -ENAMETOOLONG, "%.*s%s: too long a view", SHOWN(path));
        }
        memcpy(out->key, key, sizeof key);
    }
    return 0;
}

/* The methods and their settings (at the root, or under a set's
 * directory): p is what follows. */
static int parse_methods(zm_tree *t, const char *p, target *out, zm_err *err)
{
    const char *part;
    size_t n = take(&p, &part);
    if ((n == 4 && !strncmp(part, "full", 4)) || (n == 4 && !strncmp(part, "file", 4))) {
        out->kind = T_VIEW;
        out->spec.kind = part[1] == 'u' ? ZM_VIEW_FULL : ZM_VIEW_FILE;
        out->spec.k = 1;
        snprintf(out->key, sizeof out->key, "%.4s", part);
        out->rest = p;
        return 0;
    }
    int blocks = n == 6 && !strncmp(part, "blocks", 6);
    int uniform = n == 7 && !strncmp(part, "uniform", 7);
    int stratified = n == 10 && !strncmp(part, "stratified", 10);
    int spatial = n == 7 && !strncmp(part, "spatial", 7);
    if (!blocks && !uniform && !stratified && !spatial)
        return zm_err_set(err, -ENOENT,
                          "%.*s: no such view (full, file, uniform, blocks, stratified, spatial)",
                          (int)(n > 80 ? 80 : n), part);
    out->spec.kind = blocks ? ZM_VIEW_BLOCKS
                   : uniform ? ZM_VIEW_UNIFORM
                   : stratified ? ZM_VIEW_STRATIFIED
                                : ZM_VIEW_SPATIAL;
    out->spec.block_size = t->b0.block_size;
    if (*p == '\0') {
        out->kind = T_METHOD;
        return 0;
    }
    if (stratified)
        return parse_stratified(t, p, out, err);
    if (spatial)
        return parse_spatial(t, p, out, err);
    if (blocks && !strncmp(p, "B=", 2)) {
        n = take(&p, &part);
        if (zm__parse_number(part + 2, n - 2, 1, UINT64_MAX >> 1, &out->spec.block_size) != 0)
            return zm_err_set(err, -ENOENT, "%.*s: a block size is B=<integer ≥ 1> in canonical decimal",
                              (int)(n > 80 ? 80 : n), part);
        out->spec.block_size_given = 1;
        if (*p == '\0') {
            out->kind = T_BLOCK;
            return 0;
        }
    }
    char prefix[64];
    if (blocks)
        snprintf(prefix, sizeof prefix, "blocks/B=%" PRIu64, out->spec.block_size);
    else
        snprintf(prefix, sizeof prefix, "uniform");
    return parse_seed_and_size(t, p, prefix, out, err);
}

/* ---- Inside a view --------------------------------------------------------------- */

int zm__locate(zm_view *view, const char *rest, place *out, zm_err *err)
{
    memset(out, 0, sizeof *out);
    const zm_store_node *node = zm_view_root(view);
    const char *p = rest;
    size_t at = 0;
    while (*p) {
        size_t n = component(p);
        const char *next = p[n] ? p + n + 1 : p + n;
        /* By name in O(log n): an ls of 100,000 columns is as many lookups. */
        const zm_store_node *child = zm_view_child(node, p, n);
        if (child) {
            /* The store path names the node in caches: never cut short (a
             * cut path could be another node's). The source keeps element
             * paths short enough (ZM_ELEMENT_PATH_MAX) for this to fit. */
            size_t length = strlen(child->name) + (at ? 1 : 0);
            if (at + length >= sizeof out->store_path)
                return zm_err_set(err, -ENAMETOOLONG,
                                  "%.*s%s: the store path is longer than %zu "
                                  "bytes",
                                  SHOWN(rest), sizeof out->store_path - 1);
            at += (size_t)snprintf(out->store_path + at, sizeof out->store_path - at, "%s%s",
                                   at ? "/" : "", child->name);
            node = child;
            p = next;
            continue;
        }
        if (*next != '\0')
            return zm_err_set(err, -ENOENT, "%.*s%s: no such element", SHOWN(rest));
        /* The last component: a file of this node. */
        out->node = node;
        if (!strcmp(p, ".zattrs") && node->attrs)
            out->file = F_ZATTRS;
        else if (!node->is_array && !strcmp(p, ".zgroup"))
            out->file = F_ZGROUP;
        else if (!node->is_array && node == zm_view_root(view) && !strcmp(p, ".zmetadata"))
            out->file = F_ZMETADATA;
        else if (node->is_array && !strcmp(p, ".zarray"))
            out->file = F_ZARRAY;
        else if (node->is_array &&
                 zm_zarr_parse_chunk_key(p, node->meta.rank, node->grid, out->coords) == 0)
            out->file = F_CHUNK;
        else
            return zm_err_set(err, -ENOENT, "%.*s%s: no such file", SHOWN(rest));
        return 0;
    }
    out->node = node;
    out->file = F_NONE;
    return 0;
}
