/* Parsing a select request: JSON in, a checked zm_request out. */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "zarrmount/cli.h"
#include "zarrmount/view.h"

static const char *const known_keys[] = {
    "method", "n", "seed", "k", "share", "percent", "blockSize", "codes", "values",
    "allocation", "minimum", "coords", "columns", "gridSize", "summary", "sizeOnly",
    "field", "embedding", "set",
};

/* A JSON integer, or a real with an integral value (5.0, 1e3: what a writer
 * holding numbers as doubles prints), as an int64. */
static int integral_value(const json_t *v, int64_t *out)
{
    if (json_is_integer(v)) {
        *out = json_integer_value(v);
        return 1;
    }
    if (json_is_real(v)) {
        double d = json_real_value(v);
        /* [-2^63, 2^63) holds every int64 a double can name. */
        if (d == floor(d) && d >= -9223372036854775808.0 && d < 9223372036854775808.0) {
            *out = (int64_t)d;
            return 1;
        }
    }
    return 0;
}

/* An integer member in [low, high]; absent leaves *value as it is. */
static int read_integer(const json_t *root, const char *key, int64_t low, uint64_t high,
                        uint64_t *value, int *present, zm_err *err)
{
    json_t *member = json_object_get(root, key);
    if (present)
        *present = member != NULL;
    if (member == NULL)
        return 0;
    int64_t v;
    if (!integral_value(member, &v))
        return zm_err_set(err, -EINVAL, "\"%s\" must be an integer", key);
    if (v < low || (v >= 0 && (uint64_t)v > high))
        return zm_err_set(err, -EINVAL, "\"%s\" = %" PRId64 " is outside [%" PRId64 ", %" PRIu64 "]",
                          key, v, low, high);
    *value = (uint64_t)v;
    return 0;
}

static int read_boolean(const json_t *root, const char *key, int *value, zm_err *err)
{
    json_t *member = json_object_get(root, key);
    *value = 0;
    if (member == NULL)
        return 0;
    if (!json_is_boolean(member))
        return zm_err_set(err, -EINVAL, "\"%s\" must be true or false", key);
    *value = json_is_true(member);
    return 0;
}

/* n from "n" or from the per-cell array; both must agree. */
static int settle_n(zm_select_command *command, int *n_given, uint64_t length, const char *key,
                    zm_err *err)
{
    if (!*n_given) {
        *n_given = 1;
        if (length > ZM_N_MAX)
            return zm_err_set(err, -EINVAL, "\"%s\" has %" PRIu64 " entries, more than 2^32 - 1",
                              key, length);
        command->request.n = length;
    } else if (command->request.n != length) {
        return zm_err_set(err, -EINVAL, "n = %" PRIu64 " but \"%s\" has %" PRIu64 " entries",
                          command->request.n, key, length);
    }
    return 0;
}

static int read_codes(const json_t *array, zm_select_command *command, zm_err *err)
{
    size_t length = json_array_size(array);
    command->codes = malloc((length ? length : 1) * sizeof *command->codes);
    if (command->codes == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory reading %zu codes", length);
    for (size_t i = 0; i < length; i++) {
        json_t *v = json_array_get(array, i);
        int64_t code;
        /* Missing: null, NaN (codes held as floats), or any negative code. */
        if (json_is_null(v) || (json_is_string(v) && strcmp(json_string_value(v), "NaN") == 0)) {
            command->codes[i] = -1;
        } else if (integral_value(v, &code)) {
            if (code > INT32_MAX)
                return zm_err_set(err, -EINVAL, "codes[%zu] = %" PRId64
                                  " is past the largest category code (2^31 - 1)", i, code);
            command->codes[i] = code < 0 ? -1 : (int32_t)code;
        } else if (json_is_real(v) && json_real_value(v) < 0) {
            command->codes[i] = -1;
        } else {
            return zm_err_set(err, -EINVAL,
                              "codes[%zu] is not an integer code or a missing value (null, NaN, negative)", i);
        }
    }
    command->request.codes = command->codes;
    return 0;
}

static int read_values(const json_t *array, zm_select_command *command, zm_err *err)
{
    size_t length = json_array_size(array);
    const char **values = malloc((length ? length : 1) * sizeof *values);
    size_t *lengths = malloc((length ? length : 1) * sizeof *lengths);
    command->codes = malloc((length ? length : 1) * sizeof *command->codes);
    int rc = 0;
    if (values == NULL || lengths == NULL || command->codes == NULL)
        rc = zm_err_set(err, -ENOMEM, "out of memory reading %zu values", length);
    for (size_t i = 0; rc == 0 && i < length; i++) {
        json_t *v = json_array_get(array, i);
        if (json_is_null(v)) {
            values[i] = NULL;
            lengths[i] = 0;
        } else if (json_is_string(v)) {
            values[i] = json_string_value(v);
            lengths[i] = json_string_length(v);
        } else {
            rc = zm_err_set(err, -EINVAL, "values[%zu] is not a string or null", i);
        }
    }
    uint64_t categories = 0;
    if (rc == 0)
        rc = zm_codes_from_values(values, lengths, length, command->codes, &categories, err);
    free(values);
    free(lengths);
    command->request.codes = command->codes;
    return rc;
}

static int read_coordinate(const json_t *v, double *out)
{
    if (json_is_null(v)) {
        *out = NAN;
    } else if (json_is_number(v)) {
        *out = json_number_value(v);
    } else if (json_is_string(v)) {
        const char *s = json_string_value(v);
        if (strcmp(s, "NaN") == 0)
            *out = NAN;
        else if (strcmp(s, "Infinity") == 0)
            *out = INFINITY;
        else if (strcmp(s, "-Infinity") == 0)
            *out = -INFINITY;
        else
            return -EINVAL;
    } else {
        return -EINVAL;
    }
    return 0;
}

/* "columns": which 1 to 3 columns of each coords row place the cells; without
 * it, each row holds exactly the 1 to 3 coordinates to use. */
static int read_columns(const json_t *root, size_t width, size_t columns[3], size_t *dims,
                        zm_err *err)
{
    json_t *list = json_object_get(root, "columns");
    if (list == NULL) {
        if (width < 1 || width > 3)
            return zm_err_set(err, -EINVAL,
                              "spatial takes 1 to 3 coordinate columns, coords[0] has %zu "
                              "(choose some with \"columns\")", width);
        *dims = width;
        for (size_t a = 0; a < width; a++)
            columns[a] = a;
        return 0;
    }
    if (!json_is_array(list) || json_array_size(list) < 1 || json_array_size(list) > 3)
        return zm_err_set(err, -EINVAL, "\"columns\" must list 1 to 3 column numbers");
    *dims = json_array_size(list);
    for (size_t a = 0; a < *dims; a++) {
        int64_t c;
        if (!integral_value(json_array_get(list, a), &c) || c < 0)
            return zm_err_set(err, -EINVAL,
                              "columns[%zu] is refused: a spatial column is a non-negative integer", a);
        if ((uint64_t)c >= width)
            return zm_err_set(err, -EINVAL, "spatial column %" PRId64 " is past the %zu columns of coords",
                              c, width);
        columns[a] = (size_t)c;
    }
    return 0;
}

static int read_coords(const json_t *root, const json_t *array, zm_select_command *command,
                       zm_err *err)
{
    size_t length = json_array_size(array);
    size_t width = 1; /* no cell: the grid is still checked, as for one column */
    if (length > 0) {
        json_t *first = json_array_get(array, 0);
        if (!json_is_array(first))
            return zm_err_set(err, -EINVAL, "coords[0] is not an array of coordinates");
        width = json_array_size(first);
    }
    size_t columns[3] = {0, 0, 0}, dims = 0;
    int rc = read_columns(root, width, columns, &dims, err);
    if (rc != 0)
        return rc;
    command->request.dims = (unsigned)dims;
    command->coords = malloc((length ? length : 1) * dims * sizeof *command->coords);
    if (command->coords == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory reading %zu coordinates", length);
    for (size_t i = 0; i < length; i++) {
        json_t *row = json_array_get(array, i);
        if (!json_is_array(row) || json_array_size(row) != width)
            return zm_err_set(err, -EINVAL, "coords[%zu] is not an array of %zu coordinates", i,
                              width);
        for (size_t a = 0; a < dims; a++)
            if (read_coordinate(json_array_get(row, columns[a]),
                                &command->coords[i * dims + a]) != 0)
                return zm_err_set(err, -EINVAL,
                                  "coords[%zu][%zu] is not a number, null, \"NaN\", \"Infinity\" "
                                  "or \"-Infinity\"", i, columns[a]);
    }
    command->request.coords = command->coords;
    return 0;
}

/* "set": the cells to select among, strictly ascending positions below n
 * (checked here, so that a sizeOnly request is refused for a bad set too). */
static int read_set(const json_t *root, zm_select_command *command, zm_err *err)
{
    json_t *array = json_object_get(root, "set");
    if (array == NULL)
        return 0;
    if (!json_is_array(array))
        return zm_err_set(err, -EINVAL, "\"set\" must be an array of cell positions");
    size_t length = json_array_size(array);
    command->set = malloc((length ? length : 1) * sizeof *command->set);
    if (command->set == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory reading a set of %zu cells", length);
    for (size_t i = 0; i < length; i++) {
        int64_t v;
        if (!integral_value(json_array_get(array, i), &v) || v < 0 || v > UINT32_MAX)
            return zm_err_set(err, -EINVAL,
                              "set[%zu] is not a cell position (an integer from 0 to 2^32 - 1)", i);
        command->set[i] = (uint32_t)v;
    }
    command->request.set = command->set;
    command->request.set_count = length;
    return zm_set_check(command->set, length, command->request.n, err);
}

/* The size: exactly one of k, share, percent; a share is of the cells
 * selected from (the set's, when there is one). */
static int read_size(const json_t *root, zm_select_command *command, zm_err *err)
{
    json_t *k = json_object_get(root, "k");
    json_t *share = json_object_get(root, "share");
    json_t *percent = json_object_get(root, "percent");
    int given = (k != NULL) + (share != NULL) + (percent != NULL);
    if (given != 1)
        return zm_err_set(err, -EINVAL, given == 0 ? "give the size as one of \"k\", \"share\", \"percent\""
                                                   : "give only one of \"k\", \"share\", \"percent\"");
    uint64_t n = command->request.set ? command->request.set_count : command->request.n;
    if (k != NULL) {
        int64_t v;
        if (!integral_value(k, &v))
            return zm_err_set(err, -EINVAL, "\"k\" must be an integer");
        if (v == 0)
            return zm_err_set(err, -EINVAL, "k = 0 is refused: a subsample keeps at least one cell");
        if (v < 0)
            return zm_err_set(err, -EINVAL, "k = %" PRId64 " is refused: k counts cells", v);
        command->request.k = (uint64_t)v;
        return 0;
    }
    json_t *value = share ? share : percent;
    zm_share_kind kind = share ? ZM_SHARE_FRACTION : ZM_SHARE_PERCENT;
    const char *name = share ? "share" : "percent";
    uint64_t size = 0;
    int rc;
    if (json_is_string(value))
        rc = zm_size_from_text(json_string_value(value), kind, n, &size, err);
    else if (json_is_number(value))
        rc = zm_size_from_binary64(json_number_value(value), kind, n, &size, err);
    else
        return zm_err_set(err, -EINVAL, "\"%s\" must be a decimal text or a number", name);
    if (rc != 0)
        return rc;
    /* A share of no cell (n = 0) keeps every cell: none. */
    command->request.k = size > 0 ? size : 1;
    return 0;
}

int zm_select_command_parse(const json_t *root, zm_select_command *command, zm_err *err)
{
    return zm_select_command_parse_source(root, NULL, command, err);
}

int zm_select_command_parse_source(const json_t *root, struct zm_source *source,
                                   zm_select_command *command, zm_err *err)
{
    memset(command, 0, sizeof *command);
    command->request.allocation = ZM_ALLOCATION_PROPORTIONAL;
    command->request.grid_size = ZM_DEFAULT_GRID_SIZE;
    if (!json_is_object(root))
        return zm_err_set(err, -EINVAL, "the request must be a JSON object");

    const char *key;
    json_t *member;
    json_object_foreach((json_t *)root, key, member) {
        int known = 0;
        for (size_t i = 0; i < sizeof known_keys / sizeof known_keys[0]; i++)
            known |= strcmp(key, known_keys[i]) == 0;
        if (!known)
            return zm_err_set(err, -EINVAL, "unknown request key \"%s\"", key);
    }

    json_t *method = json_object_get(root, "method");
    if (method == NULL)
        return zm_err_set(err, -EINVAL, "the request has no \"method\"");
    if (!json_is_string(method) ||
        zm_method_from_name(json_string_value(method), &command->request.method) != 0)
        return zm_err_set(err, -EINVAL,
                          "unknown method %s: use uniform, blocks, stratified or spatial",
                          json_is_string(method) ? json_string_value(method) : "(not a string)");
    zm_method m = command->request.method;

    int rc, n_given = 0;
    uint64_t seed = 0;
    if ((rc = read_integer(root, "n", 0, ZM_N_MAX, &command->request.n, &n_given, err)) ||
        (rc = read_integer(root, "seed", 0, UINT32_MAX, &seed, NULL, err)) ||
        (rc = read_boolean(root, "summary", &command->summary, err)) ||
        (rc = read_boolean(root, "sizeOnly", &command->size_only, err)))
        return rc;
    command->request.seed = (uint32_t)seed;

    /* Method settings: each only where its method takes it. */
    struct {
        const char *key;
        zm_method method;
    } const owned[] = {
        {"blockSize", ZM_METHOD_BLOCKS},      {"codes", ZM_METHOD_STRATIFIED},
        {"values", ZM_METHOD_STRATIFIED},     {"allocation", ZM_METHOD_STRATIFIED},
        {"minimum", ZM_METHOD_STRATIFIED},    {"coords", ZM_METHOD_SPATIAL},
        {"gridSize", ZM_METHOD_SPATIAL},     {"columns", ZM_METHOD_SPATIAL},
        {"field", ZM_METHOD_STRATIFIED},      {"embedding", ZM_METHOD_SPATIAL},
    };
    for (size_t i = 0; i < sizeof owned / sizeof owned[0]; i++)
        if (json_object_get(root, owned[i].key) && owned[i].method != m)
            return zm_err_set(err, -EINVAL, "\"%s\" belongs to %s, not %s", owned[i].key,
                              zm_method_name(owned[i].method), zm_method_name(m));

    if (m == ZM_METHOD_BLOCKS) {
        int given = 0;
        if ((rc = read_integer(root, "blockSize", 0, UINT64_MAX >> 1, &command->request.block_size,
                               &given, err)))
            return rc;
        if (!given && !command->size_only)
            return zm_err_set(err, -EINVAL, "blocks needs \"blockSize\"");
        if (given && command->request.block_size == 0)
            return zm_err_set(err, -EINVAL, "blockSize = 0 is refused: a block holds at least one cell");
    }
    json_t *field = json_object_get(root, "field"), *embedding = json_object_get(root, "embedding");
    if ((field || embedding) && source == NULL)
        return zm_err_set(err, -EINVAL, "\"%s\" names a key of a file: give it with --source FILE",
                          field ? "field" : "embedding");
    if (source != NULL && !n_given) {
        command->request.n = zm_source_n_obs(source);
        n_given = 1;
    }
    if (field != NULL) {
        if (json_object_get(root, "codes") || json_object_get(root, "values"))
            return zm_err_set(err, -EINVAL, "give one of \"field\", \"codes\" or \"values\"");
        if (!json_is_string(field))
            return zm_err_set(err, -EINVAL, "\"field\" must be an obs key (a string)");
        if ((rc = settle_n(command, &n_given, zm_source_n_obs(source), "field", err)))
            return rc;
        zm_field_strata strata;
        if ((rc = zm_view_field_strata(source, json_string_value(field), &strata, err)) != 0)
            return rc == -ENOENT ? -EINVAL : rc;
        /* By original position, as a mount selects (a priority-ordered
         * file's rows are not). */
        rc = zm_view_to_original_order(source, strata.codes, sizeof *strata.codes, err);
        command->codes = strata.codes;
        strata.codes = NULL;
        zm_field_strata_free(&strata);
        if (rc != 0)
            return rc;
        command->request.codes = command->codes;
    }
    if (embedding != NULL) {
        if (json_object_get(root, "coords"))
            return zm_err_set(err, -EINVAL, "give either \"embedding\" or \"coords\", not both");
        if (!json_is_string(embedding))
            return zm_err_set(err, -EINVAL, "\"embedding\" must be an obsm key (a string)");
        const char *key = json_string_value(embedding);
        uint64_t width;
        if ((rc = settle_n(command, &n_given, zm_source_n_obs(source), "embedding", err)) ||
            (rc = zm_view_embedding_columns(source, key, &width, err)) != 0)
            return rc == -ENOENT ? -EINVAL : rc;
        size_t columns[3], dims = 0;
        unsigned chosen[3];
        if (json_object_get(root, "columns") == NULL) {
            dims = width < 3 ? (size_t)width : 3;
            for (size_t a = 0; a < dims; a++)
                columns[a] = a;
        } else if ((rc = read_columns(root, (size_t)width, columns, &dims, err)) != 0) {
            return rc;
        }
        for (size_t a = 0; a < dims; a++)
            chosen[a] = (unsigned)columns[a];
        if ((rc = zm_view_embedding_coords(source, key, chosen, (unsigned)dims, &command->coords,
                                           err)) != 0)
            return rc == -ENOENT ? -EINVAL : rc;
        if ((rc = zm_view_to_original_order(source, command->coords, dims * sizeof *command->coords,
                                            err)) != 0)
            return rc;
        command->request.coords = command->coords;
        command->request.dims = (unsigned)dims;
    }
    if (m == ZM_METHOD_STRATIFIED) {
        json_t *codes = json_object_get(root, "codes"), *values = json_object_get(root, "values");
        if (codes && values)
            return zm_err_set(err, -EINVAL, "give either \"codes\" or \"values\", not both");
        json_t *array = codes ? codes : values;
        const char *name = codes ? "codes" : "values";
        if (array == NULL && field == NULL && !command->size_only)
            return zm_err_set(err, -EINVAL, "stratified needs \"codes\" or \"values\"");
        if (array != NULL) {
            if (!json_is_array(array))
                return zm_err_set(err, -EINVAL, "\"%s\" must be an array", name);
            if ((rc = settle_n(command, &n_given, json_array_size(array), name, err)) ||
                (rc = codes ? read_codes(array, command, err) : read_values(array, command, err)))
                return rc;
        }
        json_t *allocation = json_object_get(root, "allocation");
        if (allocation && (!json_is_string(allocation) ||
                           zm_allocation_from_name(json_string_value(allocation),
                                                   &command->request.allocation) != 0))
            return zm_err_set(err, -EINVAL, "\"allocation\" must be \"proportional\" or \"balanced\"");
        if ((rc = read_integer(root, "minimum", 0, UINT64_MAX >> 1, &command->request.minimum,
                               NULL, err)))
            return rc;
    }
    if (m == ZM_METHOD_SPATIAL) {
        int given = 0;
        if ((rc = read_integer(root, "gridSize", 0, UINT64_MAX >> 1, &command->request.grid_size,
                               &given, err)))
            return rc;
        json_t *coords = json_object_get(root, "coords");
        if (coords == NULL && embedding == NULL && !command->size_only)
            return zm_err_set(err, -EINVAL, "spatial needs \"coords\" (or \"embedding\")");
        if (embedding != NULL) {
            /* read above */
        } else if (coords != NULL) {
            if (!json_is_array(coords))
                return zm_err_set(err, -EINVAL, "\"coords\" must be an array");
            if ((rc = settle_n(command, &n_given, json_array_size(coords), "coords", err)) ||
                (rc = read_coords(root, coords, command, err)))
                return rc;
        } else {
            command->request.dims = 1;
        }
    }
    if (!n_given)
        return zm_err_set(err, -EINVAL, "the request has no \"n\" (nor cells that give it)");

    if ((rc = read_set(root, command, err)) != 0 || (rc = read_size(root, command, err)) != 0)
        return rc;
    if (command->size_only)
        return 0;
    return zm_request_check(&command->request, err);
}

void zm_select_command_free(zm_select_command *command)
{
    free(command->codes);
    free(command->coords);
    free(command->set);
    memset(command, 0, sizeof *command);
}
