/* Datasets described as arrays (type, layout, filters, where the bytes
 * are), arrays held in memory, and the arrays a source registers. Every
 * function here runs with the HDF5 lock held. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "source/formats.h"
#include "source/source_internal.h"

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

/* ---- Arrays ------------------------------------------------------------------- */

int zm__array_register(zm_source *source, zm_array *array)
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

zm_array *zm__array_new(void)
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
    zm__zarr_array_free(array->zarr);
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
hid_t zm__value_memory_type(hid_t stored_type)
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
    zm_array *array = zm__array_new();
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
        hid_t native = zm__value_memory_type(array->stored_type);
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
        rc = zm__array_register(source, array);
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
    zm_array *array = zm__array_new();
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
    int rc = zm__array_register(source, array);
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
