/* What HDF5 tells us: datasets described as arrays (type, layout, filters,
 * where the bytes are), attributes, group listings. Every function here runs
 * with the HDF5 lock held. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "source/formats.h"
#include "source/source_internal.h"

/* Recursive: a format reader holds it while building the model and reads
 * small datasets through the same functions readers use later. */
static pthread_mutex_t hdf5_mutex = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
void zm__hdf5_lock(void) { pthread_mutex_lock(&hdf5_mutex); }
void zm__hdf5_unlock(void) { pthread_mutex_unlock(&hdf5_mutex); }

static _Atomic uint64_t next_serial = 1;

const char *zm_dtype_name(zm_dtype dtype)
{
    switch (dtype.type_class) {
    case ZM_TYPE_BOOL:
        return "|b1";
    case ZM_TYPE_STRING:
        return "str";
    case ZM_TYPE_INT:
        return dtype.size == 1 ? "|i1" : dtype.size == 2 ? "<i2" : dtype.size == 4 ? "<i4" : "<i8";
    case ZM_TYPE_UINT:
        return dtype.size == 1 ? "|u1" : dtype.size == 2 ? "<u2" : dtype.size == 4 ? "<u4" : "<u8";
    case ZM_TYPE_FLOAT:
        return dtype.size == 2 ? "<f2" : dtype.size == 4 ? "<f4" : "<f8";
    }
    return "?";
}

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

/* Reads count strings of an attribute or dataset selection of the given file
 * type into *out. reader(buffer, memtype) does the read. */
typedef herr_t (*string_reader)(void *context, hid_t memtype, void *buffer);

static int read_strings(hid_t file_type, size_t count, string_reader reader, void *context,
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
        rc = read_strings(type, (size_t)count, attribute_reader, &attribute, space, out);
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

static int strings_from_list(char **names, size_t count, zm_strings *out)
{
    size_t total = 0;
    for (size_t i = 0; i < count; i++)
        total += strlen(names[i]);
    out->count = count;
    out->offsets = malloc((count + 1) * sizeof *out->offsets);
    out->bytes = malloc(total + 1);
    if (out->offsets == NULL || out->bytes == NULL) {
        zm_strings_free(out);
        return -ENOMEM;
    }
    size_t at = 0;
    for (size_t i = 0; i < count; i++) {
        size_t n = strlen(names[i]);
        out->offsets[i] = at;
        memcpy(out->bytes + at, names[i], n);
        at += n;
    }
    out->offsets[count] = at;
    out->bytes[at] = '\0';
    return 0;
}

int zm__h5_list(hid_t location, const char *group, zm_strings *names)
{
    memset(names, 0, sizeof *names);
    struct list_context c = {0};
    hsize_t index = 0;
    herr_t status = H5Literate_by_name(location, group, H5_INDEX_NAME, H5_ITER_INC, &index,
                                       list_one, &c, H5P_DEFAULT);
    int rc = status < 0 ? -EIO : strings_from_list(c.names, c.count, names);
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
        rc = list ? strings_from_list(list, (size_t)n, names) : -ENOMEM;
        for (int i = 0; list && i < n; i++)
            H5free_memory(list[i]);
        free(list);
    }
    H5Tclose(type);
    H5Dclose(d);
    return rc;
}

/* ---- Arrays ------------------------------------------------------------------- */

static int register_array(zm_source *source, zm_array *array)
{
    if (source->array_count == source->array_capacity) {
        size_t capacity = source->array_capacity ? 2 * source->array_capacity : 64;
        zm_array **arrays = realloc(source->arrays, capacity * sizeof *arrays);
        if (arrays == NULL)
            return -ENOMEM;
        source->arrays = arrays;
        source->array_capacity = capacity;
    }
    source->arrays[source->array_count++] = array;
    return 0;
}

static zm_array *array_new(void)
{
    zm_array *array = calloc(1, sizeof *array);
    if (array == NULL)
        return NULL;
    array->serial = next_serial++;
    array->file = H5I_INVALID_HID;
    array->stored_type = H5I_INVALID_HID;
    pthread_mutex_init(&array->index_mutex, NULL);
    return array;
}

void zm__array_free(zm_array *array)
{
    if (array == NULL)
        return;
    if (array->stored_type >= 0)
        H5Tclose(array->stored_type);
    free(array->h5_path);
    free(array->filters);
    free(array->file_path);
    free(array->reason);
    free(array->field);
    free(array->check_what);
    free(array->chunk_address);
    free(array->chunk_stored_size);
    free(array->chunk_filter_mask);
    free(array->memory);
    zm_strings_free(&array->memory_strings);
    pthread_mutex_destroy(&array->index_mutex);
    free(array);
}

static void set_reason(zm_array *array, const char *fmt, ...)
{
    char buffer[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buffer, sizeof buffer, fmt, ap);
    va_end(ap);
    free(array->reason);
    array->reason = strdup(buffer);
    array->info.path_reason = array->reason;
}

/* Maps an HDF5 type to the values reads return. */
/* The file's address and length sizes and its base address, which heap ids
 * of variable-length strings (vlen.c) and chunk indexes (btree.c) need; 0
 * if they are not ones those read. */
static int file_sizes(zm_array *array, hid_t dataset)
{
    hid_t file = H5Iget_file_id(dataset);
    hid_t fcpl = file >= 0 ? H5Fget_create_plist(file) : H5I_INVALID_HID;
    size_t sizeof_addr = 0, sizeof_size = 0;
    hsize_t userblock = 0;
    int ok = fcpl >= 0 && H5Pget_sizes(fcpl, &sizeof_addr, &sizeof_size) >= 0 &&
             H5Pget_userblock(fcpl, &userblock) >= 0 &&
             (sizeof_addr == 4 || sizeof_addr == 8) && (sizeof_size == 4 || sizeof_size == 8);
    if (fcpl >= 0)
        H5Pclose(fcpl);
    if (file >= 0)
        H5Fclose(file);
    if (ok) {
        array->sizeof_addr = (unsigned)sizeof_addr;
        array->sizeof_size = (unsigned)sizeof_size;
        array->base_address = userblock;
    }
    return ok;
}

/* The memory type of one value as reads return it: native order and the
 * presented size. HDF5's native type for a half float is a float (4 bytes,
 * which would not fit the values asked for): a half is read as a half. */
static hid_t value_memory_type(hid_t stored_type)
{
    if (H5Tget_class(stored_type) == H5T_FLOAT && H5Tget_size(stored_type) == 2) {
        hid_t half = H5Tcopy(H5T_IEEE_F32LE);
        H5Tset_fields(half, 15, 10, 5, 0, 10);
        H5Tset_size(half, 2);
        H5Tset_ebias(half, 15);
        return half;
    }
    return H5Tget_native_type(stored_type, H5T_DIR_ASCEND);
}

static int classify(hid_t type, zm_dtype *dtype, int *big_endian, int *vlen, int *utf8)
{
    *big_endian = 0;
    *vlen = 0;
    *utf8 = 0;
    switch (H5Tget_class(type)) {
    case H5T_INTEGER:
        dtype->type_class = H5Tget_sign(type) == H5T_SGN_NONE ? ZM_TYPE_UINT : ZM_TYPE_INT;
        dtype->size = (unsigned)H5Tget_size(type);
        *big_endian = H5Tget_order(type) == H5T_ORDER_BE;
        return dtype->size == 1 || dtype->size == 2 || dtype->size == 4 || dtype->size == 8 ? 0 : -ENOTSUP;
    case H5T_FLOAT:
        dtype->type_class = ZM_TYPE_FLOAT;
        dtype->size = (unsigned)H5Tget_size(type);
        *big_endian = H5Tget_order(type) == H5T_ORDER_BE;
        return dtype->size == 2 || dtype->size == 4 || dtype->size == 8 ? 0 : -ENOTSUP;
    case H5T_ENUM: {
        /* h5py's bool: an enum over a one-byte integer, FALSE = 0, TRUE = 1. */
        hid_t base = H5Tget_super(type);
        int is_bool = H5Tget_size(base) == 1 && H5Tget_nmembers(type) == 2;
        H5Tclose(base);
        dtype->type_class = is_bool ? ZM_TYPE_BOOL : ZM_TYPE_INT;
        dtype->size = (unsigned)H5Tget_size(type);
        return is_bool ? 0 : -ENOTSUP;
    }
    case H5T_BITFIELD:
        if (H5Tget_size(type) != 1)
            return -ENOTSUP;
        dtype->type_class = ZM_TYPE_BOOL;
        dtype->size = 1;
        return 0;
    case H5T_STRING:
        dtype->type_class = ZM_TYPE_STRING;
        dtype->size = 0;
        *vlen = H5Tis_variable_str(type) > 0;
        *utf8 = H5Tget_cset(type) == H5T_CSET_UTF8;
        return 0;
    default:
        return -ENOTSUP;
    }
}

hid_t zm__array_dataset(const zm_array *array, zm_err *err)
{
    if (array->h5_path == NULL) {
        zm_err_set(err, -EIO, "%s: not a dataset of the file", array->file_path);
        return H5I_INVALID_HID;
    }
    hid_t dataset = H5Dopen2(array->file, array->h5_path, H5P_DEFAULT);
    if (dataset < 0) {
        zm_err_set(err, -EIO, "%s: cannot open the dataset again", array->file_path);
        return H5I_INVALID_HID;
    }
    /* The confinement checks made at open hold for this very object only. */
    zm__h5_object object;
    if (zm__h5_describe(dataset, NULL, &object) != 0 ||
        memcmp(&object.id, &array->id, sizeof object.id) != 0) {
        H5Dclose(dataset);
        zm_err_set(err, -EIO,
                   "%s: opened again, its path leads to another object than the one "
                   "described",
                   array->file_path);
        return H5I_INVALID_HID;
    }
    return dataset;
}

int zm__array_open(zm_source *source, hid_t file, const char *dataset_path, const char *field,
                   int presented_transposed, zm_array **out, zm_err *err)
{
    *out = NULL;
    zm_array *array = array_new();
    if (array == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory describing %s", dataset_path);
    char label[1024];
    snprintf(label, sizeof label, field ? "%s#%s" : "%s", dataset_path, field);
    array->file_path = strdup(label);
    array->info.file_path = array->file_path;
    int rc = 0;
    hid_t dcpl = H5I_INVALID_HID, space = H5I_INVALID_HID, type = H5I_INVALID_HID;

    hid_t dataset = H5Dopen2(file, dataset_path, H5P_DEFAULT);
    if (dataset < 0) {
        /* External links are never traversed (confine.c): a path through
         * one fails to open, and says why. */
        char why[ZM_REASON_MAX];
        if (zm__h5_outside(file, dataset_path, why, sizeof why))
            rc = zm_err_set(err, ZM__OUTSIDE, "%s: %s", label, why);
        else
            rc = zm_err_set(err, -EIO, "%s: cannot open the dataset", label);
        goto done;
    }
    /* Before anything else is asked of it (its extent would open a virtual
     * dataset's sources). */
    if ((rc = zm__h5_dataset_check(file, dataset, label, err)) != 0)
        goto done;
    /* What it is, to know it again when opened by its path. */
    array->file = file;
    array->h5_path = strdup(dataset_path);
    zm__h5_object object;
    if (array->h5_path == NULL || array->file_path == NULL) {
        rc = zm_err_set(err, -ENOMEM, "out of memory describing %s", label);
        goto done;
    }
    if (zm__h5_describe(dataset, NULL, &object) != 0) {
        rc = zm_err_set(err, -EIO, "%s: HDF5 cannot say which object it is", label);
        goto done;
    }
    array->id = object.id;
    array->object_addr = object.header_address;
    space = H5Dget_space(dataset);
    type = H5Dget_type(dataset);
    int rank = H5Sget_simple_extent_ndims(space);
    if (rank < 0 || rank > ZM_MAX_RANK - 1) {
        rc = zm_err_set(err, -EINVAL, "%s: rank %d is not supported", label, rank);
        goto done;
    }
    hsize_t dims[ZM_MAX_RANK] = {0};
    H5Sget_simple_extent_dims(space, dims, NULL);
    array->storage_rank = (unsigned)rank;
    for (int d = 0; d < rank; d++)
        array->storage_shape[d] = dims[d];

    hid_t value_type = type;
    hid_t member = H5I_INVALID_HID;
    unsigned extra_rank = 0;
    hsize_t extra_dims[ZM_MAX_RANK];
    if (field != NULL) {
        if (H5Tget_class(type) != H5T_COMPOUND) {
            rc = zm_err_set(err, -EINVAL, "%s: not a compound dataset", label);
            goto done;
        }
        int index = H5Tget_member_index(type, field);
        if (index < 0) {
            rc = zm_err_set(err, -EINVAL, "%s: no member %s", dataset_path, field);
            goto done;
        }
        member = H5Tget_member_type(type, (unsigned)index);
        value_type = member;
        if (H5Tget_class(member) == H5T_ARRAY) {
            /* A legacy obsm member like X_pca(50,): its dims follow the rows. */
            int n = H5Tget_array_ndims(member);
            if (n < 1 || (unsigned)(rank + n) > ZM_MAX_RANK) {
                rc = zm_err_set(err, -EINVAL, "%s: array member of rank %d", label, n);
                goto done;
            }
            H5Tget_array_dims2(member, extra_dims);
            extra_rank = (unsigned)n;
            value_type = H5Tget_super(member);
            H5Tclose(member);
            member = value_type;
        }
        array->field = strdup(field);
    }
    array->stored_type = H5Tcopy(value_type);
    if (member >= 0)
        H5Tclose(member);
    int big_endian = 0, vlen = 0, utf8 = 0;
    if (classify(array->stored_type, &array->info.dtype, &big_endian, &vlen, &utf8) != 0) {
        char *name = NULL;
        H5T_class_t cls = H5Tget_class(array->stored_type);
        rc = zm_err_set(err, -ENOTSUP, "%s: values of HDF5 type class %d are not supported", label,
                        (int)cls);
        free(name);
        goto done;
    }
    array->info.big_endian = big_endian;
    array->vlen_string = vlen;
    array->string_is_utf8 = utf8;
    array->stored_size = vlen ? sizeof(char *) : H5Tget_size(array->stored_type);

    /* Presented shape: rows first; a field's array dims follow; loom's
     * genes × cells matrix is shown as cells × genes. */
    array->info.rank = (unsigned)rank + extra_rank;
    for (int d = 0; d < rank; d++)
        array->info.shape[d] = dims[d];
    for (unsigned d = 0; d < extra_rank; d++)
        array->info.shape[rank + d] = extra_dims[d];
    if (presented_transposed) {
        if (rank != 2 || field != NULL) {
            rc = zm_err_set(err, -EINVAL, "%s: only a 2-d dataset can be presented transposed", label);
            goto done;
        }
        array->info.transposed = 1;
        array->info.shape[0] = dims[1];
        array->info.shape[1] = dims[0];
    }

    dcpl = H5Dget_create_plist(dataset);
    H5D_layout_t layout = H5Pget_layout(dcpl);
    array->info.storage_bytes = H5Dget_storage_size(dataset);
    int nfilters = H5Pget_nfilters(dcpl);
    if (nfilters > 0) {
        array->filters = calloc(nfilters < ZM__FILTER_MAX ? (size_t)nfilters : ZM__FILTER_MAX,
                                sizeof *array->filters);
        if (array->filters == NULL) {
            rc = zm_err_set(err, -ENOMEM, "out of memory describing %s", label);
            goto done;
        }
    }
    for (int i = 0; i < nfilters && i < ZM__FILTER_MAX; i++) {
        zm__filter *f = &array->filters[i];
        size_t cd = ZM__FILTER_MAX_CD;
        unsigned config;
        H5Z_filter_t id = H5Pget_filter2(dcpl, (unsigned)i, &f->flags, &cd, f->cd_values,
                                         sizeof f->name, f->name, &config);
        f->id = (unsigned)id;
        f->cd_count = cd < ZM__FILTER_MAX_CD ? cd : ZM__FILTER_MAX_CD;
        zm_filter_info *info = &array->info.filters[i];
        info->id = f->id;
        zm__filter_name(f->id, info->name);
        if ((f->id == ZM__FILTER_DEFLATE || f->id == ZM__FILTER_ZSTD) && f->cd_count > 0)
            info->level = f->cd_values[0];
        else if (f->id == ZM__FILTER_BLOSC && f->cd_count > 4)
            info->level = f->cd_values[4];
    }
    array->filter_count = nfilters > ZM__FILTER_MAX ? ZM__FILTER_MAX : (unsigned)nfilters;
    array->info.filter_count = array->filter_count;

    /* The fill value of unallocated chunks, when it fits a value. */
    if (!vlen && array->stored_size <= sizeof array->fill) {
        hid_t native = value_memory_type(array->stored_type);
        if (native >= 0) {
            H5Pget_fill_value(dcpl, native, array->fill);
            H5Tclose(native);
        }
    }

    int direct_type = array->info.dtype.type_class != ZM_TYPE_STRING;
    const char *unsupported = NULL;
    for (unsigned i = 0; i < array->filter_count; i++)
        if (!zm__filter_supported(array->filters[i].id))
            unsupported = array->info.filters[i].name;
    if (nfilters > ZM__FILTER_MAX)
        unsupported = "more than 16 filters";

    array->info.data_path = ZM_PATH_HDF5;
    if (field != NULL) {
        array->info.layout = ZM_LAYOUT_FIELD;
        set_reason(array, "a member of a compound dataset");
    } else if (layout == H5D_COMPACT) {
        array->info.layout = ZM_LAYOUT_COMPACT;
        set_reason(array, "compact layout (the values live in the object header)");
    } else if (layout == H5D_CONTIGUOUS) {
        array->info.layout = ZM_LAYOUT_CONTIGUOUS;
        haddr_t offset = H5Dget_offset(dataset);
        if (array->vlen_string && rank == 1 && field == NULL && !presented_transposed &&
            offset != HADDR_UNDEF && file_sizes(array, dataset)) {
            /* Heap ids in the dataset, bytes in the global heap: vlen.c. */
            array->vlen_direct = 1;
            array->contiguous_offset = offset;
            array->info.file_offset = offset;
            array->info.data_path = ZM_PATH_DIRECT;
            set_reason(array, "variable-length strings, read from the global heap");
        } else if (!direct_type)
            set_reason(array, array->vlen_string ? "variable-length strings" : "fixed-length strings");
        else if (presented_transposed)
            set_reason(array, "contiguous and presented transposed");
        else if (offset == HADDR_UNDEF && array->info.storage_bytes > 0)
            rc = zm_err_set(err, -EIO, "%s: contiguous values without a file offset", label);
        else {
            array->contiguous_offset = offset == HADDR_UNDEF ? UINT64_MAX : offset;
            array->info.file_offset = offset == HADDR_UNDEF ? 0 : offset;
            array->info.data_path = ZM_PATH_DIRECT;
        }
    } else if (layout == H5D_CHUNKED) {
        array->info.layout = ZM_LAYOUT_CHUNKED;
        hsize_t chunk[ZM_MAX_RANK];
        int chunk_rank = H5Pget_chunk(dcpl, ZM_MAX_RANK, chunk);
        array->chunk_count = 1;
        for (int d = 0; d < chunk_rank && d < rank; d++) {
            array->chunk[d] = chunk[d];
            array->info.chunk_shape[d] = chunk[d];
            array->grid[d] = chunk[d] ? (dims[d] + chunk[d] - 1) / chunk[d] : 0;
            array->chunk_count *= array->grid[d];
        }
        (void)file_sizes(array, dataset);
        if (!direct_type)
            set_reason(array, array->vlen_string ? "variable-length strings" : "fixed-length strings");
        else if (unsupported)
            set_reason(array, "filter %s is decoded by HDF5", unsupported);
        else
            array->info.data_path = ZM_PATH_DIRECT;
    } else {
        /* Virtual datasets were refused above: anything else is new to us. */
        rc = zm_err_set(err, -ENOTSUP, "%s: HDF5 layout %d is not supported", label, (int)layout);
    }

done:
    if (dcpl >= 0)
        H5Pclose(dcpl);
    if (space >= 0)
        H5Sclose(space);
    if (type >= 0)
        H5Tclose(type);
    if (dataset >= 0)
        H5Dclose(dataset);
    if (rc == 0)
        rc = register_array(source, array);
    if (rc != 0) {
        zm__array_free(array);
        if (err && err->code == 0)
            zm_err_set(err, rc, "%s: cannot describe the dataset", label);
        return rc;
    }
    *out = array;
    return 0;
}

int zm__array_memory(zm_source *source, const char *label, zm_dtype dtype, unsigned rank,
                     const uint64_t *shape, const void *values, zm_strings *strings,
                     zm_array **out, zm_err *err)
{
    *out = NULL;
    zm_array *array = array_new();
    if (array == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory for %s", label);
    array->file_path = strdup(label);
    array->info.file_path = array->file_path;
    array->info.dtype = dtype;
    array->info.rank = rank;
    uint64_t count = 1;
    for (unsigned d = 0; d < rank; d++) {
        array->info.shape[d] = shape[d];
        count *= shape[d];
    }
    array->storage_rank = rank;
    memcpy(array->storage_shape, array->info.shape, sizeof array->storage_shape);
    array->info.layout = ZM_LAYOUT_VIRTUAL;
    array->info.data_path = ZM_PATH_MEMORY;
    set_reason(array, "made by the reader");
    if (dtype.type_class == ZM_TYPE_STRING) {
        array->memory_strings = *strings;
        memset(strings, 0, sizeof *strings);
    } else {
        size_t bytes = count * dtype.size;
        array->memory = malloc(bytes ? bytes : 1);
        if (array->memory == NULL) {
            zm__array_free(array);
            return zm_err_set(err, -ENOMEM, "out of memory for %s", label);
        }
        memcpy(array->memory, values, bytes);
    }
    int rc = register_array(source, array);
    if (rc != 0) {
        zm__array_free(array);
        return zm_err_set(err, rc, "out of memory for %s", label);
    }
    *out = array;
    return 0;
}

const zm_array_info *zm_array_describe(const zm_array *array) { return &array->info; }

void zm_strings_free(zm_strings *strings)
{
    if (strings == NULL)
        return;
    free(strings->offsets);
    free(strings->bytes);
    memset(strings, 0, sizeof *strings);
}

/* ---- Reading through HDF5 --------------------------------------------------------- */

/* Selects ranges of presented rows in the dataset's file space. */
static hid_t select_ranges(const zm_array *array, hid_t dataset, const zm_range *ranges,
                           size_t count, uint64_t *rows_selected)
{
    hid_t space = H5Dget_space(dataset);
    *rows_selected = 0;
    if (array->storage_rank == 0)
        return space; /* a scalar: everything */
    H5Sselect_none(space);
    for (size_t i = 0; i < count; i++) {
        hsize_t start[ZM_MAX_RANK] = {0}, block[ZM_MAX_RANK];
        for (unsigned d = 0; d < array->storage_rank; d++)
            block[d] = array->storage_shape[d];
        unsigned row_dim = array->info.transposed ? 1 : 0;
        start[row_dim] = ranges[i].start;
        block[row_dim] = ranges[i].end - ranges[i].start;
        if (block[row_dim] == 0)
            continue;
        H5Sselect_hyperslab(space, H5S_SELECT_OR, start, NULL, (hsize_t[]){1, 1, 1, 1, 1, 1, 1, 1},
                            block);
        *rows_selected += block[row_dim];
    }
    return space;
}

/* The memory type reads convert to: native order; a compound member is
 * wrapped in a one-member compound so HDF5 picks it out. */
static hid_t memory_type(const zm_array *array, hid_t dataset, hid_t value_type)
{
    hid_t native = value_type;
    if (array->field == NULL)
        return native;
    /* The member may be an array (legacy obsm): rebuild that around it. */
    hid_t file_type = H5Dget_type(dataset);
    int index = H5Tget_member_index(file_type, array->field);
    hid_t member = H5Tget_member_type(file_type, (unsigned)index);
    hid_t wrapped = native;
    if (H5Tget_class(member) == H5T_ARRAY) {
        hsize_t dims[ZM_MAX_RANK];
        int n = H5Tget_array_ndims(member);
        H5Tget_array_dims2(member, dims);
        wrapped = H5Tarray_create2(native, (unsigned)n, dims);
    }
    hid_t compound = H5Tcreate(H5T_COMPOUND, H5Tget_size(wrapped));
    H5Tinsert(compound, array->field, 0, wrapped);
    if (wrapped != native)
        H5Tclose(wrapped);
    H5Tclose(member);
    H5Tclose(file_type);
    return compound;
}

/* An H5Dread that failed: a filter only a plugin decodes (from the system's
 * plugin directory alone) is the likelier cause than damage. */
static int read_failed(const zm_array *array, const char *what, zm_err *err)
{
    for (unsigned i = 0; i < array->filter_count; i++)
        if (!zm__filter_supported(array->filters[i].id))
            return zm_err_set(err, -EIO,
                              "%s: HDF5 could not read the %s (%s is decoded by an HDF5 "
                              "plugin from %s: missing, or corrupt data?)",
                              array->file_path, what, array->info.filters[i].name,
                              zm__h5_plugin_directory());
    return zm_err_set(err, -EIO, "%s: HDF5 could not read the %s (corrupt or truncated?)",
                      array->file_path, what);
}

/* Reads at most this many ranges per H5Dread: HDF5's selections grow slow
 * with thousands of pieces. */
#define RANGES_PER_READ 512

int zm__h5_read_ranges(zm_source *source, zm_array *array, const zm_range *ranges, size_t count,
                       void *out, zm_err *err)
{
    uint64_t row_bytes = zm_array_row_bytes(array);
    int rc = 0;
    zm__hdf5_lock();
    hid_t dataset = zm__array_dataset(array, err);
    if (dataset < 0) {
        zm__hdf5_unlock();
        return -EIO;
    }
    hid_t native = value_memory_type(array->stored_type);
    hid_t memtype = memory_type(array, dataset, native);
    uint8_t *at = out;
    for (size_t first = 0; rc == 0 && first < count; first += RANGES_PER_READ) {
        size_t n = count - first < RANGES_PER_READ ? count - first : RANGES_PER_READ;
        uint64_t rows = 0;
        hid_t file_space = select_ranges(array, dataset, ranges + first, n, &rows);
        if (array->storage_rank == 0)
            rows = 1;
        if (rows == 0) {
            H5Sclose(file_space);
            continue;
        }
        /* A compound member is one memory element a row (the member may be
         * an array of values); anything else one a value. */
        uint64_t values = array->field ? rows : rows * (row_bytes / array->info.dtype.size);
        hsize_t mem_dims[1] = {values};
        hid_t mem_space = H5Screate_simple(1, mem_dims, NULL);
        void *target = at;
        uint8_t *staging = NULL;
        if (array->info.transposed) {
            staging = malloc(rows * row_bytes);
            target = staging;
        }
        if (target == NULL) {
            rc = zm_err_set(err, -ENOMEM, "%s: out of memory reading %llu rows", array->file_path,
                            (unsigned long long)rows);
        } else if (H5Dread(dataset, memtype, mem_space, file_space, H5P_DEFAULT, target) < 0) {
            rc = read_failed(array, "values", err);
        } else if (staging != NULL) {
            /* The selection came back genes × cells: turn it into rows. */
            uint64_t genes = array->storage_shape[0];
            size_t size = array->info.dtype.size;
            for (uint64_t g = 0; g < genes; g++)
                for (uint64_t r = 0; r < rows; r++)
                    memcpy(at + (r * genes + g) * size, staging + (g * rows + r) * size, size);
        }
        free(staging);
        H5Sclose(mem_space);
        H5Sclose(file_space);
        at += rows * row_bytes;
        zm__count_hdf5_read(source);
    }
    if (memtype != native)
        H5Tclose(memtype);
    H5Tclose(native);
    H5Dclose(dataset);
    zm__hdf5_unlock();
    return rc;
}

struct dataset_read {
    const zm_array *array;
    hid_t dataset, file_space, mem_space;
};

static herr_t dataset_reader(void *context, hid_t memtype, void *buffer)
{
    struct dataset_read *r = context;
    hid_t type = memory_type(r->array, r->dataset, memtype);
    herr_t status = H5Dread(r->dataset, type, r->mem_space, r->file_space, H5P_DEFAULT, buffer);
    if (type != memtype)
        H5Tclose(type);
    return status;
}

int zm__h5_read_strings(zm_source *source, zm_array *array, const zm_range *ranges, size_t count,
                        zm_strings *out, zm_err *err)
{
    memset(out, 0, sizeof *out);
    zm__hdf5_lock();
    hid_t dataset = zm__array_dataset(array, err);
    if (dataset < 0) {
        zm__hdf5_unlock();
        return -EIO;
    }
    uint64_t rows = 0;
    hid_t file_space;
    if (ranges == NULL) {
        file_space = H5Dget_space(dataset);
        rows = array->storage_rank == 0 ? 1 : array->storage_shape[0];
    } else {
        file_space = select_ranges(array, dataset, ranges, count, &rows);
        if (array->storage_rank == 0)
            rows = 1;
    }
    uint64_t per_row = 1;
    for (unsigned d = 1; d < array->info.rank; d++)
        per_row *= array->info.shape[d];
    hsize_t mem_dims[1] = {rows * per_row};
    hid_t mem_space = H5Screate_simple(1, mem_dims, NULL);
    struct dataset_read r = {array, dataset, file_space, mem_space};
    int rc = mem_dims[0] == 0 ? 0 : read_strings(array->stored_type, mem_dims[0], dataset_reader, &r,
                                                 mem_space, out);
    if (mem_dims[0] == 0) {
        out->offsets = calloc(1, sizeof *out->offsets);
        out->bytes = calloc(1, 1);
    }
    H5Sclose(mem_space);
    H5Sclose(file_space);
    H5Dclose(dataset);
    zm__count_hdf5_read(source);
    zm__hdf5_unlock();
    if (rc == -ENOMEM)
        return zm_err_set(err, -ENOMEM, "%s: out of memory reading the strings", array->file_path);
    if (rc != 0)
        return read_failed(array, "strings", err);
    return 0;
}

int zm__h5_chunk_lookup(zm_array *array, const uint64_t *chunks, size_t count, zm_err *err)
{
    /* One B-tree lookup per chunk the first time a request needs it: a
     * request costs O(its chunks · log chunks), never O(all chunks). */
    unsigned rank = array->storage_rank;
    hid_t dataset = H5I_INVALID_HID; /* opened at the first chunk to look up */
    int rc = 0;
    for (size_t c = 0; rc == 0 && c < count; c++) {
        uint64_t i = chunks[c];
        if (array->chunk_address[i] != ZM__CHUNK_UNKNOWN)
            continue;
        if (dataset < 0 && (dataset = zm__array_dataset(array, err)) < 0)
            return -EIO;
        hsize_t coord[ZM_MAX_RANK] = {0};
        uint64_t rest = i;
        for (int d = (int)rank - 1; d >= 0; d--) {
            coord[d] = (rest % array->grid[d]) * array->chunk[d];
            rest /= array->grid[d];
        }
        unsigned mask = 0;
        haddr_t address = HADDR_UNDEF;
        hsize_t size = 0;
        H5E_BEGIN_TRY {
            if (H5Dget_chunk_info_by_coord(dataset, coord, &mask, &address, &size) < 0)
                address = HADDR_UNDEF;
        } H5E_END_TRY;
        if (address != HADDR_UNDEF && size > UINT32_MAX) {
            rc = zm_err_set(err, -EIO, "%s: chunk %llu is %llu bytes, past 4 GiB", array->file_path,
                            (unsigned long long)i, (unsigned long long)size);
            break;
        }
        array->chunk_stored_size[i] = (uint32_t)size;
        array->chunk_filter_mask[i] = mask;
        array->chunk_address[i] =
            address == HADDR_UNDEF ? ZM__CHUNK_ABSENT : ZM__H5_CHUNK_OFFSET(array, address);
    }
    if (dataset >= 0)
        H5Dclose(dataset);
    return rc;
}

#if ZM__H5_HAS_CHUNK_ITER
struct chunk_iteration {
    zm_array *array;
    uint64_t seen;
    int rc;
    zm_err *err;
};

static int one_chunk(const hsize_t *offset, unsigned mask, haddr_t address, hsize_t size,
                     void *data)
{
    struct chunk_iteration *it = data;
    zm_array *array = it->array;
    /* offset is the chunk's first element (HDF5 1.14 and later). */
    uint64_t index = 0;
    for (unsigned d = 0; d < array->storage_rank; d++) {
        uint64_t at = offset[d] / array->chunk[d];
        if (offset[d] % array->chunk[d] != 0 || at >= array->grid[d]) {
            it->rc = zm_err_set(it->err, -EIO, "%s: HDF5 lists a chunk at an offset outside the "
                                "dataset", array->file_path);
            return -1;
        }
        index = index * array->grid[d] + at;
    }
    if (size > UINT32_MAX) {
        it->rc = zm_err_set(it->err, -EIO, "%s: chunk %llu is %llu bytes, past 4 GiB",
                            array->file_path, (unsigned long long)index, (unsigned long long)size);
        return -1;
    }
    if (array->chunk_address[index] == ZM__CHUNK_UNKNOWN) {
        array->chunk_stored_size[index] = (uint32_t)size;
        array->chunk_filter_mask[index] = mask;
        array->chunk_address[index] =
            address == HADDR_UNDEF ? ZM__CHUNK_ABSENT : ZM__H5_CHUNK_OFFSET(array, address);
    }
    it->seen++;
    return 0;
}

int zm__h5_chunk_iterate(zm_array *array, zm_err *err)
{
    hid_t dataset = zm__array_dataset(array, err);
    if (dataset < 0)
        return -EIO;
    struct chunk_iteration it = {array, 0, 0, err};
    herr_t status;
    H5E_BEGIN_TRY {
        status = H5Dchunk_iter(dataset, H5P_DEFAULT, one_chunk, &it);
    } H5E_END_TRY;
    H5Dclose(dataset);
    if (it.rc != 0)
        return it.rc;
    if (status < 0)
        return zm_err_set(err, -EIO, "%s: HDF5 cannot list the dataset's chunks", array->file_path);
    /* What the index does not hold was never written. */
    for (uint64_t i = 0; i < array->chunk_count; i++)
        if (array->chunk_address[i] == ZM__CHUNK_UNKNOWN)
            array->chunk_address[i] = ZM__CHUNK_ABSENT;
    return 0;
}
#endif

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
