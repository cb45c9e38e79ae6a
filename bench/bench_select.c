/* Times the selection kernel on one request: the seconds zm_select takes and
 * the peak memory of the process. bench/select_vs_numpy.py runs it beside
 * numpy and prints the ratios.
 *
 *   bench_select uniform N K [SEED]
 *   bench_select blocks N K B [SEED]
 *
 * Prints one JSON line: {"method", "n", "k", "seconds", "maxRssBytes", "digest"}. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "zarrmount/select.h"

/* Peak resident memory of this program. VmHWM belongs to the address space
 * made at exec, unlike getrusage's ru_maxrss, which keeps the peak of a
 * parent process it was forked from (Python's, holding numpy arrays). */
static long long peak_rss_bytes(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long long kib = -1;
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "VmHWM: %lld kB", &kib) == 1)
            break;
    if (f != NULL)
        fclose(f);
    if (kib < 0) {
        struct rusage usage;
        getrusage(RUSAGE_SELF, &usage);
        kib = usage.ru_maxrss;
    }
    return kib * 1024;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: bench_select uniform N K [SEED] | blocks N K B [SEED]\n");
        return 2;
    }
    zm_request request = {0};
    if (zm_method_from_name(argv[1], &request.method) != 0 ||
        (request.method != ZM_METHOD_UNIFORM && request.method != ZM_METHOD_BLOCKS)) {
        fprintf(stderr, "bench_select: method must be uniform or blocks\n");
        return 2;
    }
    request.n = strtoull(argv[2], NULL, 10);
    request.k = strtoull(argv[3], NULL, 10);
    int next = 4;
    if (request.method == ZM_METHOD_BLOCKS) {
        if (argc < 5) {
            fprintf(stderr, "bench_select: blocks needs B\n");
            return 2;
        }
        request.block_size = strtoull(argv[next++], NULL, 10);
    }
    request.seed = argc > next ? (uint32_t)strtoul(argv[next], NULL, 10) : 0;

    zm_selection selection;
    zm_err err;
    double start = now();
    if (zm_select(&request, &selection, &err) != 0) {
        fprintf(stderr, "bench_select: %s\n", err.reason);
        return 1;
    }
    double seconds = now() - start;
    char digest[17];
    zm_cellset_digest(selection.positions, selection.k, selection.n, digest);
    printf("{\"method\":\"%s\",\"n\":%llu,\"k\":%llu,\"seconds\":%.6f,\"maxRssBytes\":%lld,"
           "\"digest\":\"%s\",\"orderHead\":[%u,%u,%u]}\n",
           argv[1], (unsigned long long)request.n, (unsigned long long)selection.k, seconds,
           peak_rss_bytes(), digest, selection.k > 0 ? selection.order[0] : 0,
           selection.k > 1 ? selection.order[1] : 0, selection.k > 2 ? selection.order[2] : 0);
    zm_selection_free(&selection);
    return 0;
}
