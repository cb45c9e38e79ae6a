/* Times reads of a CSR X through the source reader: a full read, or a gather
 * of rows (uniform at random, or the blocks method with the file's B0).
 * bench/source_vs_h5py.py runs it beside h5py and anndata.
 *
 *   bench_source FILE full [THREADS]
 *   bench_source FILE random|blocks FRACTION [THREADS] [ROWS_OUT]
 *
 * Prints one JSON line: mode, rows, entries, seconds, chunksDecoded,
 * bytesRead, blockSize, and a checksum of what was read. ROWS_OUT, if
 * given, receives the rows as little-endian int64 for the peer to read. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "zarrmount/select.h"
#include "zarrmount/source.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void die(const char *what, const zm_err *err)
{
    fprintf(stderr, "bench_source: %s: %s\n", what, err ? err->reason : "");
    exit(1);
}

static int64_t pointer_at(const uint8_t *indptr, size_t size, uint64_t i)
{
    if (size == 4) {
        int32_t v;
        memcpy(&v, indptr + i * 4, 4);
        return v;
    }
    int64_t v;
    memcpy(&v, indptr + i * 8, 8);
    return v;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: bench_source FILE full [THREADS] | FILE random|blocks FRACTION "
                        "[THREADS] [ROWS_OUT]\n");
        return 2;
    }
    const char *mode = argv[2];
    int full = strcmp(mode, "full") == 0;
    double fraction = full ? 1.0 : atof(argc > 3 ? argv[3] : "0.01");
    int next = full ? 3 : 4;
    unsigned threads = argc > next ? (unsigned)atoi(argv[next]) : 0;
    const char *rows_out = argc > next + 1 ? argv[next + 1] : NULL;

    double start = now();
    zm_source_options options = {.threads = threads};
    zm_source *source;
    zm_err err;
    if (zm_source_open(argv[1], &options, &source, &err) != 0)
        die("open", &err);
    const zm_element *x = zm_source_find(source, "X");
    if (x == NULL || x->kind != ZM_ELEMENT_SPARSE || x->sparse_format != ZM_SPARSE_CSR)
        die("X is not a CSR matrix", NULL);
    uint64_t n = zm_source_n_obs(source);
    zm_block_size block;
    zm_source_default_block_size(source, &block, &err);

    /* The rows: every one, or a selection in ascending order. */
    uint64_t count = n;
    uint32_t *selected = NULL;
    if (!full) {
        zm_request request = {.method = strcmp(mode, "blocks") == 0 ? ZM_METHOD_BLOCKS : ZM_METHOD_UNIFORM,
                              .n = n, .k = (uint64_t)llround(fraction * (double)n), .seed = 0,
                              .block_size = block.block_size};
        zm_selection selection;
        if (zm_select(&request, &selection, &err) != 0)
            die("select", &err);
        count = selection.k;
        selected = selection.positions;
        selection.positions = NULL;
        zm_selection_free(&selection);
        if (rows_out) {
            FILE *f = fopen(rows_out, "wb");
            for (uint64_t i = 0; f && i < count; i++) {
                int64_t r = selected[i];
                fwrite(&r, sizeof r, 1, f);
            }
            if (f)
                fclose(f);
        }
    }
    double selected_at = now();

    /* The rows' pointers (r and r + 1 for each row: only the indptr chunks
     * they lie in), then the rows' entry ranges of data and indices. */
    const zm_array_info *ip = zm_array_describe(x->indptr);
    uint64_t pointer_count = full ? ip->shape[0] : 0;
    uint64_t *pointer_rows = NULL;
    if (!full) {
        pointer_rows = malloc(2 * (count ? count : 1) * sizeof *pointer_rows);
        for (uint64_t i = 0; i < count; i++) {
            if (pointer_count == 0 || pointer_rows[pointer_count - 1] < selected[i])
                pointer_rows[pointer_count++] = selected[i];
            pointer_rows[pointer_count++] = (uint64_t)selected[i] + 1;
        }
    }
    uint8_t *indptr = malloc(pointer_count * ip->dtype.size + 1);
    if ((full ? zm_array_read_rows(source, x->indptr, 0, pointer_count, indptr, &err)
              : zm_array_gather_rows(source, x->indptr, pointer_rows, pointer_count, indptr, &err)) != 0)
        die("indptr", &err);
    zm_range *ranges = malloc((count ? count : 1) * sizeof *ranges);
    uint64_t entries = 0, at = 0;
    for (uint64_t i = 0; i < count; i++) {
        /* Where row i's pointer sits among those read. */
        if (!full)
            while (pointer_rows[at] != selected[i])
                at++;
        uint64_t p = full ? i : at;
        ranges[i].start = (uint64_t)pointer_at(indptr, ip->dtype.size, p);
        ranges[i].end = (uint64_t)pointer_at(indptr, ip->dtype.size, p + 1);
        entries += ranges[i].end - ranges[i].start;
    }
    free(pointer_rows);
    size_t data_size = zm_array_describe(x->values)->dtype.size;
    size_t index_size = zm_array_describe(x->indices)->dtype.size;
    uint8_t *data = malloc(entries * data_size + 1), *indices = malloc(entries * index_size + 1);
    if (full) {
        if (zm_array_read_rows(source, x->values, 0, entries, data, &err) != 0 ||
            zm_array_read_rows(source, x->indices, 0, entries, indices, &err) != 0)
            die("read", &err);
    } else if (zm_array_gather_ranges(source, x->values, ranges, count, data, &err) != 0 ||
               zm_array_gather_ranges(source, x->indices, ranges, count, indices, &err) != 0) {
        die("gather", &err);
    }
    double done = now();

    /* A checksum so the compiler cannot skip the work and peers can compare. */
    double sum = 0;
    for (uint64_t i = 0; i < entries && data_size == 4; i++) {
        float v;
        memcpy(&v, data + i * 4, 4);
        sum += v;
    }
    zm_source_stats stats;
    zm_source_get_stats(source, &stats);
    printf("{\"mode\":\"%s\",\"fraction\":%g,\"threads\":%u,\"rows\":%llu,\"entries\":%llu,"
           "\"seconds\":%.6f,\"openSeconds\":%.6f,\"chunksDecoded\":%llu,\"bytesRead\":%llu,"
           "\"blockSize\":%llu,\"dataSum\":%.6f}\n",
           mode, fraction, threads, (unsigned long long)count, (unsigned long long)entries,
           done - selected_at, selected_at - start, (unsigned long long)stats.chunks_decoded,
           (unsigned long long)stats.bytes_read, (unsigned long long)block.block_size, sum);
    free(data);
    free(indices);
    free(ranges);
    free(indptr);
    free(selected);
    zm_source_close(source);
    return 0;
}
