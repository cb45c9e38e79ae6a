/* `zarrmount stats MOUNTPOINT [--json] [--watch]`: a mount's counters
 * (MOUNTPOINT/.zarrmount/stats.json, a new snapshot at every open) as a
 * table, as the JSON itself, or as a table redrawn every second. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "zarrmount/cli.h"

static const char stats_usage[] = "usage: zarrmount stats MOUNTPOINT [--json] [--watch]\n";

/* The whole of stats.json, read to its end (its size is that of the
 * snapshot the open took). malloc'd, NUL-terminated. */
static char *read_stats(const char *mountpoint, size_t *size, char *why, size_t why_size)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/.zarrmount/stats.json", mountpoint);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(why, why_size, "%s: not a zarrmount mount (cannot read %s: %s)", mountpoint, path,
                 strerror(errno));
        return NULL;
    }
    size_t capacity = 1 << 16, used = 0;
    char *text = malloc(capacity + 1);
    while (text != NULL) {
        if (used == capacity) {
            char *grown = realloc(text, 2 * capacity + 1);
            if (grown == NULL) {
                free(text);
                text = NULL;
                break;
            }
            text = grown;
            capacity *= 2;
        }
        ssize_t n = read(fd, text + used, capacity - used);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            snprintf(why, why_size, "cannot read %s: %s", path, strerror(errno));
            free(text);
            text = NULL;
            break;
        }
        if (n == 0)
            break;
        used += (size_t)n;
    }
    close(fd);
    if (text == NULL) {
        if (why[0] == '\0')
            snprintf(why, why_size, "out of memory reading %s", path);
        return NULL;
    }
    text[used] = '\0';
    *size = used;
    return text;
}

static uint64_t number(const json_t *object, const char *key)
{
    const json_t *v = json_object_get(object, key);
    return json_is_integer(v) ? (uint64_t)json_integer_value(v) : 0;
}

static double real(const json_t *object, const char *key)
{
    const json_t *v = json_object_get(object, key);
    return json_is_number(v) ? json_number_value(v) : 0;
}

static const char *text_of(const json_t *object, const char *key)
{
    const char *v = json_string_value(json_object_get(object, key));
    return v ? v : "";
}

/* "93 B", "12.0 KiB", "1.5 GiB". */
static void bytes_text(uint64_t bytes, char *out, size_t size)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = (double)bytes;
    unsigned u = 0;
    while (v >= 1024 && u + 1 < sizeof units / sizeof units[0]) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(out, size, "%" PRIu64 " B", bytes);
    else
        snprintf(out, size, "%.1f %s", v, units[u]);
}

static void duration_text(double seconds, char *out, size_t size)
{
    uint64_t s = (uint64_t)seconds;
    if (s < 60)
        snprintf(out, size, "%" PRIu64 "s", s);
    else if (s < 3600)
        snprintf(out, size, "%" PRIu64 "m %02" PRIu64 "s", s / 60, s % 60);
    else
        snprintf(out, size, "%" PRIu64 "h %02" PRIu64 "m", s / 3600, s / 60 % 60);
}

/* One row: requests, then (when it has them) the file cache and the source
 * reads; "-" where a row has none (paths outside views synthesize nothing). */
static void print_row(FILE *out, int width, const char *name, const json_t *v, const json_t *cache,
                      uint64_t source_chunks, uint64_t source_bytes, int has_source)
{
    char served[32], held[32], read_bytes[32];
    bytes_text(number(v, "bytesServed"), served, sizeof served);
    fprintf(out, "%-*s %8" PRIu64 " %6" PRIu64 " %8" PRIu64 " %10s %9.3f %7" PRIu64 " %7" PRIu64,
            width, name, number(v, "lookups"), number(v, "opens"), number(v, "reads"), served,
            real(v, "daemonSeconds"), number(v, "refused"), number(v, "chunksSynthesized"));
    if (cache != NULL) {
        bytes_text(number(cache, "bytesHeld"), held, sizeof held);
        fprintf(out, " %7" PRIu64 " %7" PRIu64 " %8" PRIu64 " %10s", number(cache, "hits"),
                number(cache, "misses"), number(cache, "evictions"), held);
    } else {
        fprintf(out, " %7s %7s %8s %10s", "-", "-", "-", "-");
    }
    if (has_source) {
        bytes_text(source_bytes, read_bytes, sizeof read_bytes);
        fprintf(out, " %10" PRIu64 " %10s\n", source_chunks, read_bytes);
    } else {
        fprintf(out, " %10s %10s\n", "-", "-");
    }
}

static void print_work(FILE *out, const json_t *w)
{
    uint64_t done = number(w, "done"), total = number(w, "total");
    double rate = real(w, "rate");
    const char *view = text_of(w, "view");
    fprintf(out, "  %s%s%s: %.0f%% (%" PRIu64 " of %" PRIu64 " %s), %.0f %s/s", view,
            view[0] ? ": " : "", text_of(w, "what"),
            total ? 100.0 * (double)done / (double)total : 100.0, done, total, text_of(w, "unit"),
            rate, text_of(w, "unit"));
    const json_t *left = json_object_get(w, "secondsLeft");
    if (json_is_number(left) && json_number_value(left) < 1)
        fprintf(out, ", under a second left\n");
    else if (json_is_number(left))
        fprintf(out, ", about %.0f s left\n", json_number_value(left));
    else if (left != NULL)
        fprintf(out, ", time left unknown yet\n");
    else
        fprintf(out, " in %.3f s\n", real(w, "seconds"));
}

/* The table: a row per view, paths outside views, and the total; then the
 * works in progress and the paths lately refused. */
static void print_table(FILE *out, const char *mountpoint, const json_t *root)
{
    const json_t *views = json_object_get(root, "views");
    const json_t *total = json_object_get(root, "total");
    char up[32];
    duration_text(real(root, "uptimeSeconds"), up, sizeof up);
    fprintf(out, "zarrmount stats: %s (source %s, up %s, snapshot %" PRIu64 ")\n\n", mountpoint,
            text_of(root, "source"), up, number(root, "snapshot"));
    int width = (int)strlen("(outside views)");
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)views, key, v) if ((int)strlen(key) > width) width =
        (int)strlen(key);
    fprintf(out, "%-*s %8s %6s %8s %10s %9s %7s %7s %7s %7s %8s %10s %10s %10s\n", width, "VIEW",
            "LOOKUPS", "OPENS", "READS", "SERVED", "DAEMON S", "REFUSED", "CHUNKS", "HITS",
            "MISSES", "EVICTED", "HELD", "SRC CHUNKS", "SRC READ");
    json_object_foreach((json_t *)views, key, v)
    {
        const json_t *source = json_object_get(v, "source");
        const json_t *build = json_object_get(json_object_get(v, "build"), "source");
        print_row(out, width, key, v, json_object_get(v, "cache"),
                  number(source, "chunksDecoded") + number(build, "chunksDecoded"),
                  number(source, "bytesRead") + number(build, "bytesRead"), 1);
    }
    print_row(out, width, "(outside views)", json_object_get(root, "outsideViews"), NULL, 0, 0, 0);
    const json_t *source = json_object_get(total, "source");
    print_row(out, width, "total", total, json_object_get(total, "cache"),
              number(source, "chunksDecoded"), number(source, "bytesRead"), 1);
    const json_t *chunk_cache = json_object_get(source, "chunkCache");
    char held[32];
    bytes_text(number(chunk_cache, "bytesHeld"), held, sizeof held);
    fprintf(out,
            "\nDAEMON S: seconds the daemon took over the lookups, listings and reads (the rest "
            "of a\nreader's time is its own and the round trips); CHUNKS: chunks synthesized; "
            "HITS, MISSES,\nEVICTED, HELD: the cache of synthesized files; SRC: source chunks "
            "decoded and bytes read\n(building the view included; the total also opening the "
            "source).\nSource chunk cache: %" PRIu64 " hits, %" PRIu64 " misses, %" PRIu64
            " evicted, %s held.\n",
            number(chunk_cache, "hits"), number(chunk_cache, "misses"),
            number(chunk_cache, "evictions"), held);
    const json_t *disk = json_object_get(root, "diskCache");
    if (json_is_object(disk)) {
        char capacity[32];
        bytes_text(number(disk, "bytesHeld"), held, sizeof held);
        bytes_text(number(disk, "capacityBytes"), capacity, sizeof capacity);
        fprintf(out,
                "Disk cache: %" PRIu64 " hits, %" PRIu64 " misses, %" PRIu64 " written, %" PRIu64
                " evicted, %" PRIu64 " damaged, %" PRIu64 " moved from an older format; %" PRIu64
                " entries, %s held of %s.\n",
                number(disk, "hits"), number(disk, "misses"), number(disk, "writes"),
                number(disk, "evictions"), number(disk, "damaged"), number(disk, "migrated"),
                number(disk, "entries"), held, capacity);
    } else {
        fprintf(out, "Disk cache: off.\n");
    }
    const json_t *pushed = json_object_get(total, "pushed");
    const json_t *passthrough = json_object_get(total, "passthrough");
    if (number(pushed, "files") || number(passthrough, "opens")) {
        char pushed_bytes[32], passthrough_bytes[32];
        bytes_text(number(pushed, "bytes"), pushed_bytes, sizeof pushed_bytes);
        bytes_text(number(passthrough, "bytes"), passthrough_bytes, sizeof passthrough_bytes);
        fprintf(out,
                "Read by the kernel from the disk cache (not in READS or SERVED): %" PRIu64
                " files pushed ahead (%s), %" PRIu64 " passthrough opens (%s).\n",
                number(pushed, "files"), pushed_bytes, number(passthrough, "opens"),
                passthrough_bytes);
    }
    const json_t *works = json_object_get(root, "works");
    fprintf(out, "\nWork in progress:%s\n", json_array_size(works) ? "" : " none");
    size_t i;
    json_array_foreach((json_t *)works, i, v) print_work(out, v);
    const json_t *refusals = json_object_get(root, "refusals");
    if (json_array_size(refusals)) {
        fprintf(out, "\nRefused lately (newest first):\n");
        json_array_foreach((json_t *)refusals, i, v)
            fprintf(out, "  %s: %s\n", text_of(v, "path"), text_of(v, "reason"));
    }
}

static volatile sig_atomic_t interrupted;

static void on_interrupt(int signal_number)
{
    (void)signal_number;
    interrupted = 1;
}

/* One snapshot, printed. Returns the exit code. */
static int show(const char *mountpoint, int as_json, FILE *out)
{
    char why[4400] = "";
    size_t size = 0;
    char *text = read_stats(mountpoint, &size, why, sizeof why);
    if (text == NULL) {
        fprintf(stderr, "zarrmount stats: %s\n", why);
        return ZM_EXIT_FAILURE;
    }
    if (as_json) {
        fwrite(text, 1, size, out);
        free(text);
        fflush(out);
        return ZM_EXIT_OK;
    }
    json_error_t error;
    json_t *root = json_loadb(text, size, 0, &error);
    free(text);
    if (!json_is_object(root)) {
        fprintf(stderr,
                "zarrmount stats: %s/.zarrmount/stats.json is not valid JSON (%s, line %d)\n",
                mountpoint, error.text, error.line);
        json_decref(root);
        return ZM_EXIT_FAILURE;
    }
    print_table(out, mountpoint, root);
    json_decref(root);
    fflush(out);
    return ZM_EXIT_OK;
}

int zm_stats_main(int argc, char **argv, FILE *out)
{
    const char *mountpoint = NULL;
    int as_json = 0, watch = 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0)
            as_json = 1;
        else if (strcmp(argv[i], "--watch") == 0)
            watch = 1;
        else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(stats_usage, out);
            return ZM_EXIT_OK;
        } else if (argv[i][0] != '-' && mountpoint == NULL)
            mountpoint = argv[i];
        else {
            fprintf(stderr, "zarrmount stats: unexpected argument '%s'\n%s", argv[i], stats_usage);
            return ZM_EXIT_REFUSED;
        }
    }
    if (mountpoint == NULL) {
        fprintf(stderr, "zarrmount stats: which mount? %s", stats_usage);
        return ZM_EXIT_REFUSED;
    }
    if (!watch)
        return show(mountpoint, as_json, out);
    /* Redrawn every second until interrupted (Ctrl-C: exit 0). */
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_interrupt;
    sigaction(SIGINT, &action, NULL);
    sigaction(SIGTERM, &action, NULL);
    int status = ZM_EXIT_OK;
    while (!interrupted) {
        if (!as_json)
            fputs("\033[H\033[2J", out);
        if ((status = show(mountpoint, as_json, out)) != ZM_EXIT_OK)
            break;
        struct timespec second = {1, 0};
        while (!interrupted && nanosleep(&second, &second) != 0 && errno == EINTR)
            ;
    }
    return status;
}
