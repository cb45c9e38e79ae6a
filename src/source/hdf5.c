/* What HDF5 tells us of a file's objects: whether a path names one and
 * what it is, attributes, group listings and compound members, and whether
 * a dataset's storage holds what its shape claims (the structure of a file,
 * bounded); and the one lock every HDF5 call is made under. Every function
 * here runs with the HDF5 lock held. Datasets described as arrays are in
 * hdf5_array.c, reads through HDF5 and chunk lookups in hdf5_read.c. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "source/formats.h"
#include "source/container.h"
#include "source/source_internal.h"


/* Recursive: a format reader holds it while building the model and reads
 * small datasets through the same functions readers use later. */
static pthread_mutex_t hdf5_mutex = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
void zm__hdf5_lock(void) { pthread_mutex_lock(&hdf5_mutex); }
void zm__hdf5_unlock(void) { pthread_mutex_unlock(&hdf5_mutex); }

int zm__h5_exists(hid_t location, const char *path)
{
    /* H5Lexists fails on a path whose intermediate parts are missing, so
     * check each component in turn. */
    if (strcmp(path, "/") == 0)
        return 1;
    char buffer[1024];
    snprintf(buffer, sizeof buffer, "%s", path);
    for (char *slash = buffer + (buffer[0] == '/'); ; slash++) {
        slash = strchr(slash, '/');
        if (slash)
            *slash = '\0';
        htri_t e = H5Lexists(location, buffer, H5P_DEFAULT);
        if (e <= 0)
            return 0;
        if (!slash)
            break;
        *slash = '/';
    }
    /* An external or user-defined link exists (it names nothing we may
     * open): readers meet it and leave the element out, saying why. */
    H5L_info_t info;
    if (H5Lget_info(location, path, &info, H5P_DEFAULT) >= 0 && info.type != H5L_TYPE_HARD &&
        info.type != H5L_TYPE_SOFT)
        return 1;
    return H5Oexists_by_name(location, path, H5P_DEFAULT) > 0;
}

int zm__h5_describe(hid_t location, const char *path, zm__h5_object *out)
{
    memset(out, 0, sizeof *out);
    out->type = -1;
    if (path != NULL && !zm__h5_exists(location, path))
        return -ENOENT;
#if H5_VERSION_GE(1, 12, 0)
    /* 1.12 and later: an object is named by a token, which the native
     * format makes of its header's address. */
    H5O_info2_t info;
    herr_t status = path != NULL
                        ? H5Oget_info_by_name3(location, path, &info, H5O_INFO_BASIC, H5P_DEFAULT)
                        : H5Oget_info3(location, &info, H5O_INFO_BASIC);
    if (status < 0)
        return path != NULL ? -ENOENT : -EIO;
    /* Any location in the file says how its addresses are made. */
    haddr_t address = HADDR_UNDEF;
    H5E_BEGIN_TRY {
        if (H5VLnative_token_to_addr(location, info.token, &address) < 0)
            address = HADDR_UNDEF;
    } H5E_END_TRY;
    memcpy(out->id.bytes + sizeof(uint64_t), &info.token, sizeof info.token);
#else
    H5O_info_t info;
    herr_t status = path != NULL
                        ? H5Oget_info_by_name2(location, path, &info, H5O_INFO_BASIC, H5P_DEFAULT)
                        : H5Oget_info2(location, &info, H5O_INFO_BASIC);
    if (status < 0)
        return path != NULL ? -ENOENT : -EIO;
    haddr_t address = info.addr;
    uint64_t header = (uint64_t)info.addr;
    memcpy(out->id.bytes + sizeof(uint64_t), &header, sizeof header);
#endif
    uint64_t fileno = (uint64_t)info.fileno;
    memcpy(out->id.bytes, &fileno, sizeof fileno);
    out->type = (int)info.type;
    out->fileno = info.fileno;
    out->header_address = address == HADDR_UNDEF ? 0 : (uint64_t)address;
    return 0;
}

int zm__h5_object_type(hid_t location, const char *path)
{
    zm__h5_object object;
    return zm__h5_describe(location, path, &object) == 0 ? object.type : -1;
}

int zm__h5_has_attribute(hid_t location, const char *object, const char *name)
{
    if (!zm__h5_exists(location, object))
        return 0;
    return H5Aexists_by_name(location, object, name, H5P_DEFAULT) > 0;
}

static hid_t open_attribute(hid_t location, const char *object, const char *name)
{
    if (!zm__h5_has_attribute(location, object, name))
        return H5I_INVALID_HID;
    return H5Aopen_by_name(location, object, name, H5P_DEFAULT, H5P_DEFAULT);
}

/* Number of elements of a dataspace (1 for scalar, 0 for null). */
static hssize_t space_count(hid_t space)
{
    if (H5Sget_simple_extent_type(space) == H5S_NULL)
        return 0;
    return H5Sget_simple_extent_npoints(space);
}

/* Strips the padding of a fixed-length string. */
static size_t fixed_length(const char *text, size_t size, H5T_str_t pad)
{
    size_t n = strnlen(text, size);
    if (pad == H5T_STR_SPACEPAD)
        while (n > 0 && text[n - 1] == ' ')
            n--;
    return n;
}

int zm__read_strings(hid_t file_type, size_t count, zm__string_reader reader, void *context,
                     hid_t space_for_reclaim, zm_strings *out)
{
    memset(out, 0, sizeof *out);
    int vlen = H5Tis_variable_str(file_type) > 0;
    H5T_cset_t cset = H5Tget_cset(file_type);
    hid_t memtype = H5Tcopy(H5T_C_S1);
    size_t size = vlen ? 0 : H5Tget_size(file_type);
    H5T_str_t pad = vlen ? H5T_STR_NULLTERM : H5Tget_strpad(file_type);
    H5Tset_size(memtype, vlen ? H5T_VARIABLE : size);
    H5Tset_cset(memtype, cset);
    H5Tset_strpad(memtype, vlen ? H5T_STR_NULLTERM : pad);
    void *buffer = calloc(count ? count : 1, vlen ? sizeof(char *) : size);
    int rc = 0;
    if (buffer == NULL) {
        H5Tclose(memtype);
        return -ENOMEM;
    }
    if (reader(context, memtype, buffer) < 0) {
        rc = -EIO;
        goto done;
    }
    out->count = count;
    out->offsets = malloc((count + 1) * sizeof *out->offsets);
    size_t total = 0;
    for (size_t i = 0; i < count; i++) {
        const char *s = vlen ? ((char **)buffer)[i] : (char *)buffer + i * size;
        total += s == NULL ? 0 : vlen ? strlen(s) : fixed_length(s, size, pad);
    }
    out->bytes = malloc(total + 1);
    if (out->offsets == NULL || out->bytes == NULL) {
        rc = -ENOMEM;
        goto done;
    }
    size_t at = 0;
    for (size_t i = 0; i < count; i++) {
        const char *s = vlen ? ((char **)buffer)[i] : (char *)buffer + i * size;
        size_t n = s == NULL ? 0 : vlen ? strlen(s) : fixed_length(s, size, pad);
        out->offsets[i] = at;
        memcpy(out->bytes + at, s ? s : "", n);
        at += n;
    }
    out->offsets[count] = at;
    out->bytes[at] = '\0';
done:
    if (vlen && space_for_reclaim >= 0)
        H5Dvlen_reclaim(memtype, space_for_reclaim, H5P_DEFAULT, buffer);
    H5Tclose(memtype);
    free(buffer);
    if (rc != 0)
        zm_strings_free(out);
    return rc;
}

static herr_t attribute_reader(void *context, hid_t memtype, void *buffer)
{
    return H5Aread(*(hid_t *)context, memtype, buffer);
}

int zm__h5_attribute_strings(hid_t location, const char *object, const char *name,
                             zm_strings *out)
{
    memset(out, 0, sizeof *out);
    hid_t attribute = open_attribute(location, object, name);
    if (attribute < 0)
        return -ENOENT;
    hid_t type = H5Aget_type(attribute), space = H5Aget_space(attribute);
    hssize_t count = space_count(space);
    int rc;
    if (H5Tget_class(type) != H5T_STRING) {
        /* h5py writes an empty list as an empty float64 array. */
        rc = count == 0 ? 0 : -EINVAL;
        if (rc == 0) {
            out->offsets = calloc(1, sizeof *out->offsets);
            out->bytes = calloc(1, 1);
        }
    } else {
        rc = zm__read_strings(type, (size_t)count, attribute_reader, &attribute, space, out);
    }
    H5Sclose(space);
    H5Tclose(type);
    H5Aclose(attribute);
    return rc;
}

int zm__h5_attribute_string(hid_t location, const char *object, const char *name, char **out)
{
    *out = NULL;
    zm_strings strings;
    int rc = zm__h5_attribute_strings(location, object, name, &strings);
    if (rc != 0)
        return rc;
    if (strings.count != 1) {
        zm_strings_free(&strings);
        return -EINVAL;
    }
    *out = strdup(strings.bytes);
    zm_strings_free(&strings);
    return *out ? 0 : -ENOMEM;
}

int zm__h5_attribute_integers(hid_t location, const char *object, const char *name,
                              int64_t **values, size_t *count)
{
    *values = NULL;
    *count = 0;
    hid_t attribute = open_attribute(location, object, name);
    if (attribute < 0)
        return -ENOENT;
    hid_t type = H5Aget_type(attribute), space = H5Aget_space(attribute);
    hssize_t n = space_count(space);
    int rc = 0;
    H5T_class_t cls = H5Tget_class(type);
    if (cls != H5T_INTEGER && cls != H5T_FLOAT) {
        rc = -EINVAL;
    } else {
        *values = calloc(n ? (size_t)n : 1, sizeof **values);
        if (*values == NULL)
            rc = -ENOMEM;
        else if (H5Aread(attribute, H5T_NATIVE_INT64, *values) < 0)
            rc = -EIO;
        else
            *count = (size_t)n;
    }
    if (rc != 0) {
        free(*values);
        *values = NULL;
    }
    H5Sclose(space);
    H5Tclose(type);
    H5Aclose(attribute);
    return rc;
}

int zm__h5_attribute_bool(hid_t location, const char *object, const char *name, int *value)
{
    hid_t attribute = open_attribute(location, object, name);
    if (attribute < 0)
        return -ENOENT;
    hid_t type = H5Aget_type(attribute), space = H5Aget_space(attribute);
    int rc = 0;
    H5T_class_t cls = H5Tget_class(type);
    /* One value (H5Aread reads them all: an array would not fit below). */
    hssize_t count = space_count(space);
    H5Sclose(space);
    if (count != 1) {
        rc = -EINVAL;
    } else if (cls == H5T_ENUM || cls == H5T_INTEGER) {
        /* h5py's bool is an enum over int8; read its raw byte(s). */
        hid_t native = H5Tget_native_type(type, H5T_DIR_ASCEND);
        unsigned char buffer[16] = {0};
        if (H5Tget_size(native) > sizeof buffer || H5Aread(attribute, native, buffer) < 0)
            rc = -EIO;
        else {
            *value = 0;
            for (size_t i = 0; i < H5Tget_size(native); i++)
                *value |= buffer[i] != 0;
        }
        H5Tclose(native);
    } else {
        rc = -EINVAL;
    }
    H5Tclose(type);
    H5Aclose(attribute);
    return rc;
}

int zm__h5_attribute_reference(hid_t location, const char *object, const char *name,
                               char **path)
{
    *path = NULL;
    hid_t attribute = open_attribute(location, object, name);
    if (attribute < 0)
        return -ENOENT;
    hid_t type = H5Aget_type(attribute);
    int rc = -EINVAL;
    if (H5Tget_class(type) == H5T_REFERENCE && H5Tequal(type, H5T_STD_REF_OBJ) > 0) {
        hobj_ref_t reference;
        if (H5Aread(attribute, H5T_STD_REF_OBJ, &reference) >= 0) {
            hid_t target = H5Rdereference2(attribute, H5P_DEFAULT, H5R_OBJECT, &reference);
            if (target >= 0) {
                char buffer[1024];
                ssize_t n = H5Iget_name(target, buffer, sizeof buffer);
                if (n > 0 && (size_t)n < sizeof buffer) {
                    *path = strdup(buffer);
                    rc = *path ? 0 : -ENOMEM;
                }
                H5Oclose(target);
            }
        }
    }
    H5Tclose(type);
    H5Aclose(attribute);
    return rc;
}

struct list_context {
    char **names;
    size_t count, capacity;
};

static herr_t list_one(hid_t group, const char *name, const H5L_info_t *info, void *data)
{
    (void)group;
    (void)info;
    struct list_context *c = data;
    if (c->count == c->capacity) {
        size_t capacity = c->capacity ? 2 * c->capacity : 16;
        char **names = realloc(c->names, capacity * sizeof *names);
        if (names == NULL)
            return -1;
        c->names = names;
        c->capacity = capacity;
    }
    c->names[c->count] = strdup(name);
    return c->names[c->count++] ? 0 : -1;
}

int zm__h5_list(hid_t location, const char *group, zm_strings *names)
{
    memset(names, 0, sizeof *names);
    struct list_context c = {0};
    hsize_t index = 0;
    herr_t status = H5Literate_by_name(location, group, H5_INDEX_NAME, H5_ITER_INC, &index,
                                       list_one, &c, H5P_DEFAULT);
    int rc = status < 0 ? -EIO : zm__strings_of_names((const char *const *)c.names, c.count, names);
    for (size_t i = 0; i < c.count; i++)
        free(c.names[i]);
    free(c.names);
    return rc;
}

int zm__h5_compound_members(hid_t location, const char *dataset, zm_strings *names)
{
    memset(names, 0, sizeof *names);
    hid_t d = H5Dopen2(location, dataset, H5P_DEFAULT);
    if (d < 0)
        return -EIO;
    hid_t type = H5Dget_type(d);
    int rc = -EINVAL;
    if (H5Tget_class(type) == H5T_COMPOUND) {
        int n = H5Tget_nmembers(type);
        char **list = calloc(n > 0 ? (size_t)n : 1, sizeof *list);
        for (int i = 0; list && i < n; i++)
            list[i] = H5Tget_member_name(type, (unsigned)i);
        rc = list ? zm__strings_of_names((const char *const *)list, (size_t)n, names) : -ENOMEM;
        for (int i = 0; list && i < n; i++)
            H5free_memory(list[i]);
        free(list);
    }
    H5Tclose(type);
    H5Dclose(d);
    return rc;
}

/* ---- The structure of a file, bounded ------------------------------------------------ */

int zm__h5_identify(hid_t location, const char *path, int *type, zm__h5_object_id *id)
{
    zm__h5_object object;
    int rc = zm__h5_describe(location, path, &object);
    *type = object.type;
    *id = object.id;
    return rc == 0 ? 0 : -ENOENT;
}

/* "(1000000000, 10)", as numpy writes a shape. */
static void shape_text(const uint64_t *dims, unsigned rank, char *out, size_t size)
{
    size_t at = (size_t)snprintf(out, size, "(");
    for (unsigned d = 0; d < rank && at < size; d++)
        at += (size_t)snprintf(out + at, size - at, "%s%llu", d ? ", " : "",
                               (unsigned long long)dims[d]);
    if (at < size)
        snprintf(out + at, size - at, "%s)", rank == 1 ? "," : "");
}

/* a * b, or UINT64_MAX past it. */
static uint64_t times(uint64_t a, uint64_t b)
{
    return b != 0 && a > UINT64_MAX / b ? UINT64_MAX : a * b;
}

/* A value's bytes in the file. A variable-length string is a heap id there
 * (its length, the collection's address, an index), whatever its memory form
 * takes; with the address size not known, its least (4). */
static uint64_t value_bytes(const zm_array *array)
{
    if (array->vlen_string)
        return 4 + (array->sizeof_addr ? array->sizeof_addr : 4) + 4;
    return array->stored_size;
}

/* How a dataset is stored, for zm__h5_check_stored. */
struct storage {
    H5D_layout_t layout;
    unsigned rank;
    uint64_t dims[ZM_MAX_RANK], chunk[ZM_MAX_RANK];
    uint64_t value_bytes; /* a value's bytes in the file */
    uint64_t stored;      /* bytes the file holds for it */
};

/* From what describing the array found (no HDF5 call: a file of 100,000
 * arrays is checked in milliseconds), except for a compound member, whose
 * dataset's layout was not described, and a contiguous one that does not
 * hold what it claims (is it virtual?). */
static int storage_of(const zm_array *array, hid_t dataset, struct storage *s)
{
    memset(s, 0, sizeof *s);
    s->rank = array->storage_rank;
    memcpy(s->dims, array->storage_shape, sizeof s->dims);
    s->stored = array->info.storage_bytes;
    s->value_bytes = value_bytes(array);
    if (array->info.layout == ZM_LAYOUT_COMPACT) {
        s->layout = H5D_COMPACT;
        return 0;
    }
    if (array->info.layout == ZM_LAYOUT_CHUNKED) {
        s->layout = H5D_CHUNKED;
        memcpy(s->chunk, array->chunk, sizeof s->chunk);
        return 0;
    }
    hid_t dcpl = H5Dget_create_plist(dataset);
    if (dcpl < 0)
        return -EIO;
    H5D_layout_t layout = H5Pget_layout(dcpl);
    if (array->field != NULL) {
        /* The whole record is what the file stores a row. */
        hid_t type = H5Dget_type(dataset);
        s->value_bytes = type >= 0 ? H5Tget_size(type) : 0;
        if (type >= 0)
            H5Tclose(type);
        if (layout == H5D_CHUNKED) {
            hsize_t chunk[H5S_MAX_RANK] = {0};
            if (H5Pget_chunk(dcpl, H5S_MAX_RANK, chunk) != (int)s->rank) {
                H5Pclose(dcpl);
                return -EIO;
            }
            for (unsigned d = 0; d < s->rank; d++)
                s->chunk[d] = chunk[d];
        }
    }
    s->layout = layout;
    H5Pclose(dcpl);
    return 0;
}

static int check_stored(zm_source *source, const zm_array *array, hid_t dataset, int whole,
                        zm_err *err);

int zm__h5_check_stored(zm_source *source, const zm_array *array, int whole, zm_err *err)
{
    if (array->h5_path == NULL || array->storage_rank == 0)
        return 0; /* made in memory; a scalar claims one value */
    uint64_t values = 1;
    for (unsigned d = 0; d < array->storage_rank; d++)
        values = times(values, array->storage_shape[d]);
    if (values == 0)
        return 0;
    /* Contiguous and holding it all: nothing to ask HDF5. */
    uint64_t claimed = times(values, value_bytes(array));
    if (array->info.layout == ZM_LAYOUT_CONTIGUOUS && array->field == NULL &&
        array->info.storage_bytes >= claimed)
        return 0;
    hid_t dataset = zm__array_dataset(array, err);
    if (dataset < 0)
        return -EIO;
    int rc = check_stored(source, array, dataset, whole, err);
    H5Dclose(dataset);
    return rc;
}

/* zm__h5_check_stored where HDF5 must be asked: the dataset open. */
static int check_stored(zm_source *source, const zm_array *array, hid_t dataset, int whole,
                        zm_err *err)
{
    const char *what = array->file_path;
    struct storage s;
    uint64_t values = 1;
    for (unsigned d = 0; d < array->storage_rank; d++)
        values = times(values, array->storage_shape[d]);
    uint64_t claimed;
    if (storage_of(array, dataset, &s) != 0)
        return zm_err_set(err, -EIO, "%s: cannot read how the dataset is stored", what);
    claimed = times(values, s.value_bytes);
    char shape[160];
    shape_text(s.dims, s.rank, shape, sizeof shape);

    if (s.layout == H5D_CONTIGUOUS) {
        /* Allocated whole or not at all. */
        if (s.stored >= claimed || (!whole && claimed <= ZM__UNSTORED_BYTES_MAX))
            return 0;
        return zm_err_set(err, -EINVAL,
                          "%s: its shape %s claims %llu bytes, but the file "
                          "allocates %llu bytes for them%s",
                          what, shape, (unsigned long long)claimed, (unsigned long long)s.stored,
                          whole ? " (an axis's index must be stored whole)" : "");
    }
    if (s.layout != H5D_CHUNKED)
        return 0; /* compact: in the object header; virtual: refused where it is met */
    uint64_t chunks = 1, chunk_values = 1;
    for (unsigned d = 0; d < s.rank; d++) {
        if (s.chunk[d] == 0)
            return zm_err_set(err, -EINVAL, "%s: a chunk dimension of 0", what);
        chunks = times(chunks, s.dims[d] / s.chunk[d] + (s.dims[d] % s.chunk[d] != 0));
        chunk_values = times(chunk_values, s.chunk[d]);
    }
    /* Every chunk that exists takes at least a byte of the file: more than
     * that many cannot all be stored, and are refused before the index is
     * read (its entries would take 16 bytes a chunk in memory). */
    uint64_t file_bytes = (uint64_t)source->identity.size;
    if (chunks > file_bytes)
        return zm_err_set(err, -EINVAL,
                          "%s: its shape %s claims %llu chunks, more than the file "
                          "has bytes (%llu)",
                          what, shape, (unsigned long long)chunks, (unsigned long long)file_bytes);
    hid_t space = H5Dget_space(dataset);
    hsize_t written = 0;
    herr_t counted = space >= 0 ? H5Dget_num_chunks(dataset, space, &written) : -1;
    if (space >= 0)
        H5Sclose(space);
    if (counted < 0)
        return zm_err_set(err, -EIO, "%s: cannot read its chunk index", what);
    if (written >= chunks)
        return 0;
    uint64_t unstored = times(chunks - written, times(chunk_values, s.value_bytes));
    if (!whole && (unstored <= ZM__UNSTORED_BYTES_MAX ||
                   chunks - written <= times(written, ZM__UNSTORED_RATIO)))
        return 0;
    return zm_err_set(err, -EINVAL,
                      "%s: its shape %s claims %llu chunks, but the file stores "
                      "%llu of them%s",
                      what, shape, (unsigned long long)chunks, (unsigned long long)written,
                      whole ? " (an axis's index must be stored whole)"
                            : " (unwritten chunks may hold at most 64 MiB, or 1024 times the "
                              "chunks written)");
}

/* ---- The container an AnnData reader walks (container.h) ------------------------ */

static hid_t container_file(const zm__container *c)
{
    return *(const hid_t *)c->state;
}

static int h5_node_type(const zm__container *c, const char *path)
{
    int type = zm__h5_object_type(container_file(c), path);
    if (type == H5O_TYPE_GROUP)
        return ZM__NODE_GROUP;
    if (type == H5O_TYPE_DATASET)
        return ZM__NODE_ARRAY;
    /* A named type, or a link that exists but is never followed. */
    return type >= 0 || zm__h5_exists(container_file(c), path) ? ZM__NODE_OTHER : ZM__NODE_NONE;
}

static int h5_identify(const zm__container *c, const char *path, int *type, zm__h5_object_id *id)
{
    return zm__h5_identify(container_file(c), path, type, id);
}

static int h5_has_attribute(const zm__container *c, const char *path, const char *name)
{
    return zm__h5_has_attribute(container_file(c), path, name);
}

static int h5_attribute_string(const zm__container *c, const char *path, const char *name,
                               char **out)
{
    return zm__h5_attribute_string(container_file(c), path, name, out);
}

static int h5_attribute_integers(const zm__container *c, const char *path, const char *name,
                                 int64_t **values, size_t *count)
{
    return zm__h5_attribute_integers(container_file(c), path, name, values, count);
}

static int h5_attribute_strings(const zm__container *c, const char *path, const char *name,
                                zm_strings *out)
{
    return zm__h5_attribute_strings(container_file(c), path, name, out);
}

static int h5_attribute_bool(const zm__container *c, const char *path, const char *name, int *value)
{
    return zm__h5_attribute_bool(container_file(c), path, name, value);
}

static int h5_attribute_reference(const zm__container *c, const char *path, const char *name,
                                  char **target)
{
    return zm__h5_attribute_reference(container_file(c), path, name, target);
}

static int h5_list(const zm__container *c, const char *path, zm_strings *names)
{
    return zm__h5_list(container_file(c), path, names);
}

static int h5_values(const zm__container *c, const char *path)
{
    hid_t d = H5Dopen2(container_file(c), path, H5P_DEFAULT);
    hid_t t = d >= 0 ? H5Dget_type(d) : H5I_INVALID_HID;
    H5T_class_t class = t >= 0 ? H5Tget_class(t) : H5T_NO_CLASS;
    if (t >= 0)
        H5Tclose(t);
    if (d >= 0)
        H5Dclose(d);
    return class == H5T_COMPOUND    ? ZM__VALUES_RECORDS
           : class == H5T_REFERENCE ? ZM__VALUES_REFERENCE
                                    : ZM__VALUES_PLAIN;
}

static int h5_fields(const zm__container *c, const char *path, zm_strings *names)
{
    return zm__h5_compound_members(container_file(c), path, names);
}

static int h5_outside(const zm__container *c, const char *path, char *why, size_t size)
{
    return zm__h5_outside(container_file(c), path, why, size);
}

static int h5_array_open(zm_source *source, const zm__container *c, const char *path,
                         const char *field, zm_array **out, zm_err *err)
{
    return zm__array_open(source, container_file(c), path, field, 0, out, err);
}

static const zm__container_ops h5_container_ops = {
    .node_type = h5_node_type,
    .identify = h5_identify,
    .has_attribute = h5_has_attribute,
    .attribute_string = h5_attribute_string,
    .attribute_integers = h5_attribute_integers,
    .attribute_strings = h5_attribute_strings,
    .attribute_bool = h5_attribute_bool,
    .attribute_reference = h5_attribute_reference,
    .list = h5_list,
    .values = h5_values,
    .fields = h5_fields,
    .outside = h5_outside,
    .array_open = h5_array_open,
    .what = "HDF5 file",
};

void zm__h5_container(zm_source *source, zm__container *out)
{
    out->ops = &h5_container_ops;
    out->state = &source->file;
}
