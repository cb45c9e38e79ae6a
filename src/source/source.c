/* Opening a source: what the file is, its element model, its identity; the
 * default block size; counters. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "source/source_internal.h"
#include "source/zarr_array.h"
#include "zarrmount/config.h"

#define DEFAULT_CACHE_BYTES (256u << 20)

static const char *const format_names[] = {
    [ZM_FORMAT_H5AD] = "h5ad",
    [ZM_FORMAT_LOOM] = "loom",
    [ZM_FORMAT_10X_V3] = "10x-v3",
    [ZM_FORMAT_10X_V2] = "10x-v2",
    [ZM_FORMAT_H5MU] = "h5mu",
    [ZM_FORMAT_ZARR] = "zarr",
};

const char *zm_source_format_name(zm_source_format format) { return format_names[format]; }
zm_source_format zm_source_get_format(const zm_source *source) { return source->format; }
const zm_source_identity *zm_source_get_identity(const zm_source *source)
{
    return &source->identity;
}
uint64_t zm_source_n_obs(const zm_source *source) { return source->n_obs; }
uint64_t zm_source_n_vars(const zm_source *source) { return source->n_vars; }
const zm_element *zm_source_root(const zm_source *source) { return source->root; }

const char *zm_source_container(const zm_source *source)
{
    source = zm__source_top((zm_source *)source);
    if (source->store == NULL)
        return "hdf5";
    return zm__store_get_kind(source->store) == ZM__STORE_ZIP ? "zarr-zip" : "zarr-directory";
}

int zm_source_zarr_format(const zm_source *source)
{
    source = zm__source_top((zm_source *)source);
    return source->ztree ? zm__ztree_format(source->ztree) : 0;
}

int zm_source_check_store(const zm_source *source, zm_err *err)
{
    return zm__zarr_check(zm__source_top((zm_source *)source), err);
}

/* Whether an open file is a zip (a Zarr ZipStore): its first bytes are a
 * local file header, or (an empty zip) the end of its central directory. */
static int is_zip(int fd)
{
    unsigned char head[4];
    return pread(fd, head, 4, 0) == 4 && head[0] == 'P' && head[1] == 'K' &&
           ((head[2] == 3 && head[3] == 4) || (head[2] == 5 && head[3] == 6));
}

/* The decode threads and the cache, as every source has them. */
static int start_threads(zm_source *source, const zm_source_options *options, zm_err *err)
{
    /* Decode threads: the caller of each read plus threads − 1 workers;
     * one thread decodes inline, with no pool at all. */
    unsigned threads = options && options->threads ? options->threads : zm_config_cores();
    size_t cache_bytes = options && options->chunk_cache_bytes ? options->chunk_cache_bytes
                                                                : DEFAULT_CACHE_BYTES;
    int rc;
    if ((threads > 1 && (rc = zm__pool_create(threads - 1, &source->pool)) != 0) ||
        (rc = zm_cache_create(cache_bytes, &source->cache)) != 0)
        return zm_err_set(err, rc, "%s: cannot start the decode threads or cache", source->path);
    return 0;
}

/* HDF5 as every open needs it (at each: it costs nothing, and a library
 * closed and started again in the process, H5close, is set up again). */
static void hdf5_setup(void)
{
    /* Errors come back to us as return values with our own reasons; HDF5's
     * stack dumps on stderr would only confuse. */
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    zm__h5_register_filters();
    /* Before the file is opened: nothing HDF5 does may reach another. */
    zm__h5_confine();
}

/* 0 if the descriptor HDF5 reads the file through is the file checked.
 * sec2 opens it without O_CLOEXEC: it is set here, so that no program the
 * daemon starts (fusermount3) inherits it. */
static int same_file(hid_t file, hid_t fapl, const struct stat *checked)
{
    void *handle = NULL;
    struct stat st;
    if (H5Fget_vfd_handle(file, fapl, &handle) < 0 || handle == NULL ||
        fstat(*(int *)handle, &st) != 0)
        return -EIO;
    int flags = fcntl(*(int *)handle, F_GETFD);
    if (flags >= 0)
        fcntl(*(int *)handle, F_SETFD, flags | FD_CLOEXEC);
    return st.st_dev == checked->st_dev && st.st_ino == checked->st_ino ? 0 : -EIO;
}

/* Which of the formats the file is, from its layout alone. */
static int detect_format(hid_t file, zm_source_format *format)
{
    if (zm__h5_object_type(file, "/matrix") == H5O_TYPE_DATASET &&
        zm__h5_object_type(file, "/row_attrs") == H5O_TYPE_GROUP &&
        zm__h5_object_type(file, "/col_attrs") == H5O_TYPE_GROUP) {
        *format = ZM_FORMAT_LOOM;
        return 0;
    }
    static const char *const tenx_parts[] = {"barcodes", "data", "indices", "indptr", "shape"};
    if (zm__h5_object_type(file, "/matrix") == H5O_TYPE_GROUP) {
        int all = zm__h5_object_type(file, "/matrix/features") == H5O_TYPE_GROUP;
        for (size_t i = 0; all && i < 5; i++) {
            char path[64];
            snprintf(path, sizeof path, "/matrix/%s", tenx_parts[i]);
            all = zm__h5_object_type(file, path) == H5O_TYPE_DATASET;
        }
        if (all) {
            *format = ZM_FORMAT_10X_V3;
            return 0;
        }
    }
    char *encoding = NULL;
    if (zm__h5_attribute_string(file, "/", "encoding-type", &encoding) == 0) {
        int anndata = strcmp(encoding, "anndata") == 0;
        int mudata = strcmp(encoding, "MuData") == 0;
        free(encoding);
        if (anndata || mudata) {
            *format = mudata ? ZM_FORMAT_H5MU : ZM_FORMAT_H5AD;
            return 0;
        }
    }
    /* mudata's own files say MuData in the root's attributes; a file with
     * /mod and no such attribute is read as one too (mudata reads any). */
    if (zm__h5_object_type(file, "/mod") == H5O_TYPE_GROUP && zm__h5_exists(file, "/obs")) {
        *format = ZM_FORMAT_H5MU;
        return 0;
    }
    if (zm__h5_exists(file, "/obs") && zm__h5_exists(file, "/var")) {
        *format = ZM_FORMAT_H5AD;
        return 0;
    }
    /* 10x v2: one group per genome holding the matrix parts and genes. */
    zm_strings names;
    if (zm__h5_list(file, "/", &names) == 0) {
        int found = 0;
        for (size_t g = 0; g < names.count && !found; g++) {
            char group[512];
            snprintf(group, sizeof group, "/%.*s", (int)(names.offsets[g + 1] - names.offsets[g]),
                     names.bytes + names.offsets[g]);
            int all = zm__h5_object_type(file, group) == H5O_TYPE_GROUP;
            for (size_t i = 0; all && i < 5; i++) {
                char path[640];
                snprintf(path, sizeof path, "%s/%s", group, tenx_parts[i]);
                all = zm__h5_object_type(file, path) == H5O_TYPE_DATASET;
            }
            char genes[640];
            snprintf(genes, sizeof genes, "%s/genes", group);
            found = all && zm__h5_object_type(file, genes) == H5O_TYPE_DATASET;
        }
        zm_strings_free(&names);
        if (found) {
            *format = ZM_FORMAT_10X_V2;
            return 0;
        }
    }
    return -EINVAL;
}

/* A part the formats look for that is an external link, as " (PATH: why)":
 * what made the file look like none of them. */
static void outside_part(hid_t file, char *out, size_t size)
{
    static const char *const parts[] = {"/obs",
                                        "/var",
                                        "/matrix",
                                        "/row_attrs",
                                        "/col_attrs",
                                        "/matrix/features",
                                        "/matrix/barcodes",
                                        "/matrix/data",
                                        "/matrix/indices",
                                        "/matrix/indptr",
                                        "/matrix/shape"};
    char why[ZM_REASON_MAX / 2];
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        if (zm__h5_outside(file, parts[i], why, sizeof why)) {
            snprintf(out, size, " (%s: %s)", parts[i], why);
            return;
        }
}

int zm_source_open(const char *path, const zm_source_options *options, zm_source **out,
                   zm_err *err)
{
    *out = NULL;
    zm__hdf5_lock();
    hdf5_setup();
    zm__hdf5_unlock();
    zm_source *source = calloc(1, sizeof *source);
    if (source == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory opening %s", path);
    source->fd = -1;
    source->file = H5I_INVALID_HID;
    source->layout_anndata = options && options->layout_anndata;
    source->path = strdup(path);
    pthread_mutex_init(&source->passes_mutex, NULL);
    pthread_mutex_init(&source->map_mutex, NULL);
    int rc = 0;

    /* O_NONBLOCK: a FIFO (or a device) named as the source is refused
     * below rather than waited on for ever; reads of a regular file do
     * not see the flag. */
    source->fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat st;
    if (source->fd < 0 || fstat(source->fd, &st) != 0) {
        rc = zm_err_set(err, -errno, "%s: cannot open: %s", path, strerror(errno));
        goto fail;
    }
    if (S_ISDIR(st.st_mode) || (S_ISREG(st.st_mode) && is_zip(source->fd))) {
        /* A Zarr store: a directory, or a zip. A directory is opened again
         * as one (O_NONBLOCK means nothing for it). */
        if (S_ISDIR(st.st_mode)) {
            int dir = open(path, O_RDONLY | O_CLOEXEC | O_DIRECTORY | O_NOFOLLOW);
            struct stat again;
            if (dir < 0 || fstat(dir, &again) != 0 || again.st_dev != st.st_dev ||
                again.st_ino != st.st_ino) {
                if (dir >= 0)
                    close(dir);
                rc = zm_err_set(err, -EIO, "%s: the directory changed while it was opened", path);
                goto fail;
            }
            close(source->fd);
            source->fd = dir;
        }
        source->format = ZM_FORMAT_ZARR;
        if ((rc = start_threads(source, options, err)) != 0 ||
            (rc = zm__read_zarr(source, err)) != 0 || (rc = zm__validate(source, err)) != 0 ||
            (rc = zm__priority_read(source, err)) != 0)
            goto named;
        *out = source;
        return 0;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = zm_err_set(err, -EINVAL,
                        "%s: neither a regular file nor a directory (expected an HDF5 file or a "
                        "Zarr store)",
                        path);
        goto fail;
    }
    source->identity.device = st.st_dev;
    source->identity.inode = st.st_ino;
    source->identity.size = st.st_size;
    source->identity.mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;

    /* HDF5 opens files by name: it is given the descriptor just checked,
     * as /proc/self/fd/N, so the file it reads is the one fstat'ed, even if
     * the path is replaced meanwhile. */
    char h5name[64];
    snprintf(h5name, sizeof h5name, "/proc/self/fd/%d", source->fd);
    struct stat named;
    int by_descriptor =
        stat(h5name, &named) == 0 && named.st_dev == st.st_dev && named.st_ino == st.st_ino;
    const char *name = by_descriptor ? h5name : path; /* no /proc: the path */

    zm__hdf5_lock();
    htri_t is_hdf5 = H5Fis_hdf5(name);
    if (is_hdf5 <= 0) {
        zm__hdf5_unlock();
        rc = zm_err_set(err, -EINVAL,
                        "%s: not an HDF5 file (expected an AnnData .h5ad, a loom file or a 10x "
                        "Genomics .h5)", path);
        goto fail;
    }
    hid_t fapl = zm__h5_file_access();
    source->file = fapl >= 0 ? H5Fopen(name, H5F_ACC_RDONLY, fapl) : H5I_INVALID_HID;
    if (source->file < 0) {
        if (fapl >= 0)
            H5Pclose(fapl);
        zm__hdf5_unlock();
        rc = zm_err_set(err, -EIO, "%s: HDF5 cannot open it (truncated or corrupt?)", path);
        goto fail;
    }
    rc = same_file(source->file, fapl, &st);
    H5Pclose(fapl);
    if (rc != 0) {
        zm__hdf5_unlock();
        rc = zm_err_set(err, -EIO,
                        "%s: HDF5 opened another file than the one checked (was the "
                        "path replaced?)",
                        path);
        goto fail;
    }
    rc = detect_format(source->file, &source->format);
    char outside[ZM_REASON_MAX] = "";
    if (rc != 0)
        outside_part(source->file, outside, sizeof outside);
    zm__hdf5_unlock();
    if (rc != 0) {
        rc = zm_err_set(err, -EINVAL,
                        "%s: an HDF5 file, but not an AnnData .h5ad (/obs and /var), a MuData "
                        ".h5mu (/mod), a loom file (/matrix, /row_attrs, /col_attrs) or a 10x "
                        "Genomics .h5 (/matrix or /<genome> with barcodes, data, indices, indptr, "
                        "shape)%s",
                        path, outside);
        goto fail;
    }

    if ((rc = start_threads(source, options, err)) != 0)
        goto fail;

    switch (source->format) {
    case ZM_FORMAT_H5AD:
        rc = zm__read_h5ad(source, err);
        break;
    case ZM_FORMAT_LOOM:
        rc = zm__read_loom(source, err);
        break;
    case ZM_FORMAT_10X_V3:
    case ZM_FORMAT_10X_V2:
        rc = zm__read_10x(source, err);
        break;
    case ZM_FORMAT_H5MU:
        rc = zm__read_h5mu(source, err); /* the global model, then each modality's */
        break;
    case ZM_FORMAT_ZARR:
        break; /* read above, never detected in an HDF5 file */
    }
    if (rc == 0)
        rc = zm__validate(source, err);
    if (rc == 0 && source->format == ZM_FORMAT_H5MU)
        rc = zm__mudata_map(source, err);
    if (rc == 0)
        rc = zm__priority_read(source, err);
named:
    if (rc != 0) {
        /* Name the file in reasons that name only an element. */
        if (err && strncmp(err->reason, path, strlen(path)) != 0) {
            char reason[ZM_REASON_MAX];
            snprintf(reason, sizeof reason, "%s: %s", path, err->reason);
            snprintf(err->reason, sizeof err->reason, "%s", reason);
        }
        goto fail;
    }
    *out = source;
    return 0;

fail:
    zm_source_close(source);
    return rc;
}

void zm_source_close(zm_source *source)
{
    if (source == NULL || source->parent != NULL)
        return; /* a modality is closed with its source */
    zm__modalities_free(source);
    zm__pool_destroy(source->pool);
    zm_cache_destroy(source->cache);
    zm__priority_free(&source->priority);
    pthread_mutex_destroy(&source->passes_mutex);
    zm__element_free(source->root);
    zm__hdf5_lock();
    for (size_t i = 0; i < source->array_count; i++)
        zm__array_free(source->arrays[i]);
    if (source->file >= 0)
        H5Fclose(source->file);
    zm__hdf5_unlock();
    zm__zarr_close(source);
    free(source->arrays);
    for (size_t i = 0; i < source->skipped_count; i++)
        free(source->skipped_list[i]);
    free(source->skipped_list);
    zm__source_unmap(source);
    pthread_mutex_destroy(&source->map_mutex);
    if (source->fd >= 0)
        close(source->fd);
    free(source->path);
    free(source);
}

ssize_t zm_source_read_raw(const zm_source *source, uint64_t offset, void *buffer, size_t size)
{
    if (source->store != NULL && zm__store_get_kind(source->store) == ZM__STORE_DIRECTORY)
        return -EISDIR; /* a directory store has no bytes of its own: its digest names it */
    ssize_t got = pread(source->fd, buffer, size, (off_t)offset);
    return got < 0 ? -errno : got;
}

const char *zm__source_skip_reason(const zm_source *source, const char *path)
{
    source = zm__source_top((zm_source *)source);
    size_t n = strlen(path);
    for (size_t i = 0; i < source->skipped_count; i++)
        if (strncmp(source->skipped_list[i], path, n) == 0 && source->skipped_list[i][n] == ':')
            return source->skipped_list[i];
    return NULL;
}

/* ---- Counting reads ----------------------------------------------------------- */

static _Thread_local zm_source_tally *current_tally;

zm_source_tally *zm_source_tally_set(zm_source_tally *tally)
{
    zm_source_tally *previous = current_tally;
    current_tally = tally;
    return previous;
}

zm_source_tally *zm__tally_current(void)
{
    return current_tally;
}

static _Thread_local const _Atomic int *current_background;

const _Atomic int *zm_source_background_set(const _Atomic int *flag)
{
    const _Atomic int *previous = current_background;
    current_background = flag;
    return previous;
}

const _Atomic int *zm__background_current(void)
{
    return current_background;
}

void zm__count_bytes(zm_source *source, uint64_t bytes)
{
    source = zm__source_top(source);
    source->bytes_read += bytes;
    if (current_tally != NULL)
        current_tally->bytes_read += bytes;
}

void zm__count_chunk(zm_source *source)
{
    source = zm__source_top(source);
    source->chunks_decoded++;
    if (current_tally != NULL)
        current_tally->chunks_decoded++;
}

void zm__count_hdf5_read(zm_source *source)
{
    source = zm__source_top(source);
    source->hdf5_reads++;
    if (current_tally != NULL)
        current_tally->hdf5_reads++;
}

static double seconds_since(const struct timespec *began)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - began->tv_sec) + (double)(now.tv_nsec - began->tv_nsec) / 1e9;
}

struct zm__pass *zm__pass_begin(zm_source *source, const zm_array *array, const char *unit,
                                uint64_t total)
{
    struct zm__pass *pass = calloc(1, sizeof *pass);
    if (pass == NULL)
        return NULL;
    snprintf(pass->shown.what, sizeof pass->shown.what, "%s", array->file_path);
    pass->shown.unit = unit;
    pass->shown.tally = current_tally;
    pass->shown.total = total;
    clock_gettime(CLOCK_MONOTONIC, &pass->began);
    source = zm__source_top(source);
    pthread_mutex_lock(&source->passes_mutex);
    pass->next = source->passes;
    source->passes = pass;
    pthread_mutex_unlock(&source->passes_mutex);
    return pass;
}

void zm__pass_step(struct zm__pass *pass)
{
    if (pass != NULL)
        pass->done++;
}

void zm__pass_end(zm_source *source, struct zm__pass *pass)
{
    if (pass == NULL)
        return;
    source = zm__source_top(source);
    pthread_mutex_lock(&source->passes_mutex);
    struct zm__pass **link = &source->passes;
    while (*link != pass)
        link = &(*link)->next;
    *link = pass->next;
    zm_source_pass *kept = &source->finished[source->finished_next];
    *kept = pass->shown;
    kept->done = pass->done;
    kept->seconds = seconds_since(&pass->began);
    kept->finished = 1;
    source->finished_next = (source->finished_next + 1) % ZM__FINISHED_PASSES;
    if (source->finished_count < ZM__FINISHED_PASSES)
        source->finished_count++;
    pthread_mutex_unlock(&source->passes_mutex);
    free(pass);
}

size_t zm_source_passes(zm_source *source, zm_source_pass *out, size_t capacity)
{
    size_t count = 0;
    source = zm__source_top(source);
    pthread_mutex_lock(&source->passes_mutex);
    for (struct zm__pass *p = source->passes; p != NULL && count < capacity; p = p->next) {
        out[count] = p->shown;
        out[count].done = p->done;
        out[count].seconds = seconds_since(&p->began);
        count++;
    }
    for (unsigned i = 0; i < source->finished_count && count < capacity; i++)
        out[count++] = source->finished[(source->finished_next + ZM__FINISHED_PASSES - 1 - i) %
                                        ZM__FINISHED_PASSES];
    pthread_mutex_unlock(&source->passes_mutex);
    return count;
}

uint64_t zm_source_chunk_cache_need(const zm_source *source)
{
    uint64_t need = 0;
    for (size_t i = 0; i < source->array_count; i++) {
        const zm_array *a = source->arrays[i];
        if (a->info.layout != ZM_LAYOUT_CHUNKED || zm__chunks_as_stored(a))
            continue; /* never kept */
        if (a->info.dtype.type_class == ZM_TYPE_STRING || a->info.dtype.size == 0)
            return UINT64_MAX;
        uint64_t bytes = a->info.dtype.size;
        for (unsigned d = 0; d < a->storage_rank; d++) {
            if (a->chunk[d] != 0 && bytes > UINT64_MAX / a->chunk[d])
                return UINT64_MAX;
            bytes *= a->chunk[d];
        }
        if (a->chunk_count != 0 && bytes > (UINT64_MAX - need) / a->chunk_count)
            return UINT64_MAX;
        need += bytes * a->chunk_count;
    }
    for (size_t m = 0; m < source->modality_count; m++) {
        uint64_t more = zm_source_chunk_cache_need(source->modalities[m]);
        if (more > UINT64_MAX - need)
            return UINT64_MAX;
        need += more;
    }
    return need;
}

void zm_source_get_stats(zm_source *source, zm_source_stats *stats)
{
    memset(stats, 0, sizeof *stats);
    source = zm__source_top(source);
    stats->chunks_decoded = source->chunks_decoded;
    stats->bytes_read = source->bytes_read;
    stats->hdf5_reads = source->hdf5_reads;
    zm_cache_stats c;
    zm_cache_get_stats(source->cache, &c);
    stats->cache_hits = c.hits;
    stats->cache_misses = c.misses;
    stats->cache_evictions = c.evictions;
    stats->cache_bytes = c.bytes_held;
}
