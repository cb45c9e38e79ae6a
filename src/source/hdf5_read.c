/* Reading through HDF5: rows and ranges of values and strings (H5Dread, for
 * the arrays we do not decode ourselves), and the chunk index as HDF5 gives
 * it (looked up chunk by chunk, or with HDF5 1.14 and later every chunk in
 * one H5Dchunk_iter pass). The reads take the HDF5 lock themselves; the
 * lookups run with it held. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "source/formats.h"
#include "source/source_internal.h"

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
    hid_t native = zm__value_memory_type(array->stored_type);
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
    int rc = mem_dims[0] == 0 ? 0
                              : zm__read_strings(array->stored_type, mem_dims[0], dataset_reader,
                                                 &r, mem_space, out);
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
