/* A stand-in for src/tree/: every function of zarrmount/tree.h over a
 * small fixed tree, so that the FUSE daemon (src/fs/fuse.c) can be mounted
 * and tested without HDF5. tests/fs/test_fuse.py knows the same tree.
 *
 *   README                 text
 *   empty                  0 bytes
 *   big.bin                3 MiB of pattern 1
 *   options                the options the tree was opened with, as text
 *   link -> full/X/.zarray
 *   full/.zgroup, full/X/.zarray, full/X/.zattrs   text
 *   full/X/0.0, 0.1, 1.0   4096, 4097 and 1 bytes of patterns 2, 3, 4
 *                          (these and big.bin are listed with ZM_SIZE_UNKNOWN,
 *                          as the real tree lists compressed chunks, unless
 *                          kept on disk: see below)
 *   many/f0000 .. f0999    "file NNNN\n"
 *   trouble/eio            not listed; looking it up fails with -EIO
 *   trouble/eio_read       1000 bytes; reading fails with -EIO
 *   trouble/unmade         found, but its bytes cannot be made (zm_node.error, the
 *                          reason "a damaged source chunk"); the mock's read of it
 *                          would succeed (1000 bytes of pattern 6), so that a
 *                          daemon reading it anyway is seen
 *   trouble/flaky          777 bytes of pattern 7, found unmade at its first lookup
 *                          only: a new lookup (after the kernel forgot it) succeeds
 *   trouble/slow00 .. 15   1 MiB of pattern 16 + N; every read sleeps 100 ms
 *   trouble/badlist/       listing it fails with -EIO
 *
 * Pattern s: the 8-byte little-endian word at offset o (o a multiple of 8)
 * is (o + s) * 0x9E3779B97F4A7C15 mod 2^64, so every offset is told apart.
 *
 * Like the real tree, opening it starts a thread (the source's decode pool
 * does), and the mock checks that it is used by the process that opened
 * it: a daemon that forked after opening would fail reads with EIO. The
 * source must exist; a name ending in ".bad" is refused as not HDF5; a
 * codec other than none, zstd..., blosc... is refused. The source is
 * checked like the real one: a changed size or mtime fails open with EIO.
 * With ZM_MOCK_STATS set to a file name, the most slow reads ever in
 * flight at once is written there, to show requests are served in
 * parallel without timing anything.
 *
 * The disk cache, as far as FUSE passthrough sees it: with cache_dir= a
 * directory, the pattern files (big.bin and the chunks of full/X) are "kept on disk":
 * zm__tree_open_kept writes the file's bytes to CACHE_DIR/kept-<name> and
 * lends it, and every open_kept and read is appended to CACHE_DIR/log
 * ("kept PATH", "read PATH"), so a test sees which reads reached the
 * daemon.
 *
 * Times (zm__tree_time_ns): a path's mtime is the source's mtime in whole
 * seconds plus the path's length in seconds, and the path's length in
 * nanoseconds; the FUSE layer must give it as atime, mtime and ctime. */
#include "zarrmount/tree.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MOCK_MANY              1000
#define MOCK_SLOW              16
#define MOCK_SLOW_BYTES        (1u << 20)
#define MOCK_SLOW_MILLISECONDS 100

typedef enum mock_content {
    MOCK_TEXT,    /* text */
    MOCK_PATTERN, /* pattern seed */
    MOCK_OPTIONS, /* the tree's options text */
    MOCK_NONE,    /* directories and links */
} mock_content;

enum {
    MOCK_SLEEPS = 1, /* each read sleeps */
    MOCK_READ_FAILS = 2,
    MOCK_LIST_FAILS = 4,
    MOCK_LOOKUP_FAILS = 8,
    MOCK_UNLISTED = 16,
    MOCK_SIZE_IN_LOOKUP = 32, /* listed with ZM_SIZE_UNKNOWN, like compressed chunks */
    MOCK_UNMADE = 64,         /* found with zm_node.error set */
    MOCK_UNMADE_ONCE = 128,   /* ... at its first lookup only */
};

typedef struct mock_entry {
    const char *path;
    zm_node_kind kind;
    mock_content content;
    uint64_t size;    /* patterns */
    uint64_t seed;    /* patterns */
    const char *text; /* text, or a link's target */
    unsigned flags;
} mock_entry;

static const mock_entry mock_entries[] = {
    {"README", ZM_NODE_FILE, MOCK_TEXT, 0, 0,
     "zarrmount mock tree: a fixed tree for the FUSE tests.\n", 0},
    {"empty", ZM_NODE_FILE, MOCK_TEXT, 0, 0, "", 0},
    {"big.bin", ZM_NODE_FILE, MOCK_PATTERN, 3u << 20, 1, NULL, MOCK_SIZE_IN_LOOKUP},
    {"options", ZM_NODE_FILE, MOCK_OPTIONS, 0, 0, NULL, 0},
    {"link", ZM_NODE_LINK, MOCK_NONE, 0, 0, "full/X/.zarray", 0},
    {"full", ZM_NODE_DIRECTORY, MOCK_NONE, 0, 0, NULL, 0},
    {"full/.zgroup", ZM_NODE_FILE, MOCK_TEXT, 0, 0, "{\n    \"zarr_format\": 2\n}", 0},
    {"full/X", ZM_NODE_DIRECTORY, MOCK_NONE, 0, 0, NULL, 0},
    {"full/X/.zarray", ZM_NODE_FILE, MOCK_TEXT, 0, 0,
     "{\n    \"chunks\": [1024, 1],\n    \"zarr_format\": 2\n}", 0},
    {"full/X/.zattrs", ZM_NODE_FILE, MOCK_TEXT, 0, 0, "{}", 0},
    {"full/X/0.0", ZM_NODE_FILE, MOCK_PATTERN, 4096, 2, NULL, MOCK_SIZE_IN_LOOKUP},
    {"full/X/0.1", ZM_NODE_FILE, MOCK_PATTERN, 4097, 3, NULL, MOCK_SIZE_IN_LOOKUP},
    {"full/X/1.0", ZM_NODE_FILE, MOCK_PATTERN, 1, 4, NULL, MOCK_SIZE_IN_LOOKUP},
    {"many", ZM_NODE_DIRECTORY, MOCK_NONE, 0, 0, NULL, 0},
    {"trouble", ZM_NODE_DIRECTORY, MOCK_NONE, 0, 0, NULL, 0},
    {"trouble/eio", ZM_NODE_FILE, MOCK_TEXT, 0, 0, "never read", MOCK_LOOKUP_FAILS | MOCK_UNLISTED},
    {"trouble/eio_read", ZM_NODE_FILE, MOCK_PATTERN, 1000, 5, NULL, MOCK_READ_FAILS},
    {"trouble/unmade", ZM_NODE_FILE, MOCK_PATTERN, 1000, 6, NULL,
     MOCK_UNMADE | MOCK_SIZE_IN_LOOKUP},
    {"trouble/flaky", ZM_NODE_FILE, MOCK_PATTERN, 777, 7, NULL,
     MOCK_UNMADE_ONCE | MOCK_SIZE_IN_LOOKUP},
    {"trouble/badlist", ZM_NODE_DIRECTORY, MOCK_NONE, 0, 0, NULL, MOCK_LIST_FAILS},
};

#define MOCK_FIXED (sizeof mock_entries / sizeof mock_entries[0])

struct zm_tree {
    char *source;
    struct stat source_stat;
    pid_t opened_by;
    char *options_text;
    size_t options_size;
    char *cache_dir; /* NULL: no disk cache */
    pthread_t helper;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    int closing;
    int helper_blocks_sigterm;
    int helper_started;
    atomic_int flaky_lookups; /* lookups of trouble/flaky */
};

/* ---- Entries -------------------------------------------------------------------- */

/* Names of the generated entries live here, one per index. */
static char mock_many_names[MOCK_MANY][24];
static char mock_many_texts[MOCK_MANY][16];
static char mock_slow_names[MOCK_SLOW][24];
static pthread_once_t mock_names_once = PTHREAD_ONCE_INIT;

static void mock_make_names(void)
{
    for (int i = 0; i < MOCK_MANY; i++) {
        snprintf(mock_many_names[i], sizeof mock_many_names[i], "many/f%04d", i);
        snprintf(mock_many_texts[i], sizeof mock_many_texts[i], "file %04d\n", i);
    }
    for (int i = 0; i < MOCK_SLOW; i++)
        snprintf(mock_slow_names[i], sizeof mock_slow_names[i], "trouble/slow%02d", i);
}

static size_t mock_count(void)
{
    return MOCK_FIXED + MOCK_MANY + MOCK_SLOW;
}

/* Entry number i of the whole tree, fixed ones first. */
static mock_entry mock_at(size_t i)
{
    if (i < MOCK_FIXED)
        return mock_entries[i];
    i -= MOCK_FIXED;
    if (i < MOCK_MANY)
        return (mock_entry){
            mock_many_names[i], ZM_NODE_FILE, MOCK_TEXT, 0, 0, mock_many_texts[i], 0};
    i -= MOCK_MANY;
    return (mock_entry){
        mock_slow_names[i], ZM_NODE_FILE, MOCK_PATTERN, MOCK_SLOW_BYTES, 16 + i, NULL, MOCK_SLEEPS};
}

static int mock_find(const char *path, mock_entry *entry)
{
    pthread_once(&mock_names_once, mock_make_names);
    for (size_t i = 0; i < mock_count(); i++) {
        *entry = mock_at(i);
        if (strcmp(entry->path, path) == 0)
            return 1;
    }
    return 0;
}

static uint64_t mock_size(const zm_tree *tree, const mock_entry *entry)
{
    switch (entry->content) {
    case MOCK_TEXT:
        return strlen(entry->text);
    case MOCK_PATTERN:
        return entry->size;
    case MOCK_OPTIONS:
        return tree->options_size;
    case MOCK_NONE:
        break;
    }
    return entry->kind == ZM_NODE_LINK ? strlen(entry->text) : 0;
}

static unsigned char mock_pattern_byte(uint64_t seed, uint64_t offset)
{
    uint64_t word = ((offset & ~UINT64_C(7)) + seed) * UINT64_C(0x9E3779B97F4A7C15);
    return (unsigned char)(word >> ((offset & 7) * 8));
}

static atomic_int mock_slow_in_flight;
static atomic_int mock_slow_most;

/* One slow read: counts it while it sleeps, and records the most at once. */
static void mock_slow_read(void)
{
    int now = atomic_fetch_add(&mock_slow_in_flight, 1) + 1;
    int most = atomic_load(&mock_slow_most);
    while (now > most && !atomic_compare_exchange_weak(&mock_slow_most, &most, now))
        continue;
    const char *stats = getenv("ZM_MOCK_STATS");
    if (now > most && stats != NULL) {
        char text[32];
        int length = snprintf(text, sizeof text, "%d\n", now);
        int fd = open(stats, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd >= 0) {
            ssize_t written = write(fd, text, (size_t)length);
            (void)written;
            close(fd);
        }
    }
    struct timespec pause = {0, MOCK_SLOW_MILLISECONDS * 1000000L};
    while (nanosleep(&pause, &pause) != 0 && errno == EINTR)
        continue;
    atomic_fetch_sub(&mock_slow_in_flight, 1);
}

static int mock_check_process(const zm_tree *tree, zm_err *err)
{
    if (getpid() != tree->opened_by)
        return zm_err_set(err, -EIO,
                          "mock: tree opened by pid %d used by pid %d: forked after opening, its "
                          "threads are gone",
                          (int)tree->opened_by, (int)getpid());
    return 0;
}

/* ---- The helper thread ---------------------------------------------------------- */

static void *mock_helper(void *context)
{
    zm_tree *tree = context;
    sigset_t mask;
    pthread_sigmask(SIG_SETMASK, NULL, &mask);
    pthread_mutex_lock(&tree->lock);
    tree->helper_blocks_sigterm = sigismember(&mask, SIGTERM) == 1;
    tree->helper_started = 1;
    pthread_cond_broadcast(&tree->wake);
    while (!tree->closing)
        pthread_cond_wait(&tree->wake, &tree->lock);
    pthread_mutex_unlock(&tree->lock);
    return NULL;
}

/* ---- tree.h ---------------------------------------------------------------------- */

static int mock_known_codec(const char *codec)
{
    return codec == NULL || strcmp(codec, "none") == 0 || strncmp(codec, "zstd", 4) == 0 ||
           strncmp(codec, "blosc", 5) == 0;
}

int zm__tree_open(const zm_tree_options *options, zm_tree **out, zm_err *err)
{
    *out = NULL;
    struct stat st;
    if (stat(options->source, &st) != 0)
        return zm_err_set(err, -errno, "%s: %s", options->source, strerror(errno));
    size_t length = strlen(options->source);
    if (length >= 4 && strcmp(options->source + length - 4, ".bad") == 0)
        return zm_err_set(err, -EINVAL, "%s: not an HDF5 file (mock)", options->source);
    if (!mock_known_codec(options->codec))
        return zm_err_set(err, -EINVAL,
                          "codec '%s': unknown (none, zstd[:LEVEL], blosc[:CNAME[:LEVEL]])",
                          options->codec);
    zm_tree *tree = calloc(1, sizeof *tree);
    if (tree == NULL || (tree->source = strdup(options->source)) == NULL) {
        free(tree);
        return zm_err_set(err, -ENOMEM, "out of memory");
    }
    tree->source_stat = st;
    tree->opened_by = getpid();
    if (options->cache_dir != NULL && strcmp(options->cache_dir, "none") != 0)
        tree->cache_dir = strdup(options->cache_dir);
    pthread_mutex_init(&tree->lock, NULL);
    pthread_cond_init(&tree->wake, NULL);
    if (pthread_create(&tree->helper, NULL, mock_helper, tree) != 0) {
        free(tree->source);
        free(tree);
        return zm_err_set(err, -EAGAIN, "cannot start a thread");
    }
    pthread_mutex_lock(&tree->lock);
    while (!tree->helper_started)
        pthread_cond_wait(&tree->wake, &tree->lock);
    pthread_mutex_unlock(&tree->lock);
    char text[2048];
    int size =
        snprintf(text, sizeof text,
                 "source=%s\ncodec=%s\nchunk_bytes=%llu\ncache_bytes=%llu\nthreads=%u\n"
                 "helper_blocks_sigterm=%d\n",
                 options->source, options->codec ? options->codec : "(default)",
                 (unsigned long long)options->chunk_bytes, (unsigned long long)options->cache_bytes,
                 options->threads, tree->helper_blocks_sigterm);
    tree->options_text = strdup(text);
    tree->options_size = (size_t)size;
    if (tree->options_text == NULL) {
        zm__tree_close(tree);
        return zm_err_set(err, -ENOMEM, "out of memory");
    }
    *out = tree;
    return 0;
}

void zm__tree_close(zm_tree *tree)
{
    if (tree == NULL)
        return;
    pthread_mutex_lock(&tree->lock);
    tree->closing = 1;
    pthread_cond_broadcast(&tree->wake);
    pthread_mutex_unlock(&tree->lock);
    pthread_join(tree->helper, NULL);
    pthread_cond_destroy(&tree->wake);
    pthread_mutex_destroy(&tree->lock);
    free(tree->options_text);
    free(tree->cache_dir);
    free(tree->source);
    free(tree);
}

int zm__tree_check_source(zm_tree *tree, zm_err *err)
{
    struct stat st;
    if (stat(tree->source, &st) != 0)
        return zm_err_set(err, -EIO, "%s: %s since it was mounted; remount to serve it again",
                          tree->source, strerror(errno));
    if (st.st_dev != tree->source_stat.st_dev || st.st_ino != tree->source_stat.st_ino ||
        st.st_size != tree->source_stat.st_size ||
        st.st_mtim.tv_sec != tree->source_stat.st_mtim.tv_sec ||
        st.st_mtim.tv_nsec != tree->source_stat.st_mtim.tv_nsec)
        return zm_err_set(err, -EIO,
                          "%s changed since it was mounted; remount to serve the new file",
                          tree->source);
    return 0;
}

int zm__tree_lookup(zm_tree *tree, const char *path, zm_node *node, zm_err *err)
{
    int rc = mock_check_process(tree, err);
    if (rc != 0)
        return rc;
    if (path[0] == '\0') {
        *node = (zm_node){.kind = ZM_NODE_DIRECTORY, .size = 0};
        return 0;
    }
    mock_entry entry;
    if (!mock_find(path, &entry))
        return zm_err_set(err, -ENOENT, "%s: no such file in the mock tree", path);
    if (entry.flags & MOCK_LOOKUP_FAILS)
        return zm_err_set(err, -EIO, "mock: cannot make %s (synthesis failed)", path);
    *node = (zm_node){.kind = entry.kind, .size = mock_size(tree, &entry)};
    if ((entry.flags & MOCK_UNMADE) ||
        ((entry.flags & MOCK_UNMADE_ONCE) && atomic_fetch_add(&tree->flaky_lookups, 1) == 0)) {
        node->error = -EIO;
        node->size = ZM_SIZE_UNMADE;
        zm_err_set(err, -EIO, "mock: %s: a damaged source chunk", path);
    }
    return 0;
}

int zm__tree_list(zm_tree *tree, const char *path, zm__tree_emit emit, void *context, zm_err *err)
{
    int rc = mock_check_process(tree, err);
    if (rc != 0)
        return rc;
    mock_entry entry;
    if (path[0] != '\0' && !mock_find(path, &entry))
        return zm_err_set(err, -ENOENT, "%s: no such directory in the mock tree", path);
    if (path[0] != '\0' && entry.kind != ZM_NODE_DIRECTORY)
        return zm_err_set(err, -ENOTDIR, "%s: not a directory", path);
    if (path[0] != '\0' && (entry.flags & MOCK_LIST_FAILS))
        return zm_err_set(err, -EIO, "mock: cannot list %s", path);
    size_t prefix = strlen(path);
    pthread_once(&mock_names_once, mock_make_names);
    for (size_t i = 0; i < mock_count(); i++) {
        mock_entry child = mock_at(i);
        const char *name = child.path;
        if (prefix > 0) {
            if (strncmp(name, path, prefix) != 0 || name[prefix] != '/')
                continue;
            name += prefix + 1;
        }
        if (strchr(name, '/') != NULL || (child.flags & MOCK_UNLISTED))
            continue;
        zm_node node = {.kind = child.kind, .size = mock_size(tree, &child)};
        /* Kept on disk (a disk cache), the size is known from its entry, as
         * the real tree lists kept chunks. */
        if ((child.flags & MOCK_SIZE_IN_LOOKUP) && tree->cache_dir == NULL)
            node.size = ZM_SIZE_UNKNOWN;
        /* A file whose bytes could not be made has no size a listing knows. */
        if (child.flags & (MOCK_UNMADE | MOCK_UNMADE_ONCE))
            node.size = ZM_SIZE_UNKNOWN;
        if ((rc = emit(context, name, &node)) != 0)
            return rc;
    }
    return 0;
}

static void mock_log(zm_tree *tree, const char *what, const char *path)
{
    if (tree->cache_dir == NULL)
        return;
    char name[4096];
    snprintf(name, sizeof name, "%s/log", tree->cache_dir);
    pthread_mutex_lock(&tree->lock);
    FILE *f = fopen(name, "a");
    if (f != NULL) {
        fprintf(f, "%s %s\n", what, path);
        fclose(f);
    }
    pthread_mutex_unlock(&tree->lock);
}

int zm__tree_read(zm_tree *tree, const char *path, uint64_t offset, size_t size, void *buffer,
                  size_t *done, zm_err *err)
{
    *done = 0;
    int rc = mock_check_process(tree, err);
    if (rc != 0)
        return rc;
    mock_entry entry;
    if (!mock_find(path, &entry) || entry.kind != ZM_NODE_FILE)
        return zm_err_set(err, -ENOENT, "%s: no such file in the mock tree", path);
    if (entry.flags & MOCK_READ_FAILS)
        return zm_err_set(err, -EIO, "mock: cannot make %s (chunk could not be read)", path);
    if (entry.flags & MOCK_SLEEPS)
        mock_slow_read();
    mock_log(tree, "read", path);
    uint64_t total = mock_size(tree, &entry);
    if (offset >= total)
        return 0;
    size_t count = total - offset < size ? (size_t)(total - offset) : size;
    unsigned char *bytes = buffer;
    if (entry.content == MOCK_PATTERN) {
        for (size_t i = 0; i < count; i++)
            bytes[i] = mock_pattern_byte(entry.seed, offset + i);
    } else {
        const char *text = entry.content == MOCK_OPTIONS ? tree->options_text : entry.text;
        memcpy(bytes, text + offset, count);
    }
    *done = count;
    return 0;
}

int zm__tree_open_kept(zm_tree *tree, const char *path, int *fd, uint64_t *size, zm_err *err)
{
    *fd = -1;
    *size = 0;
    mock_entry entry;
    if (tree->cache_dir == NULL || !mock_find(path, &entry) || entry.kind != ZM_NODE_FILE ||
        entry.content != MOCK_PATTERN ||
        (entry.flags & (MOCK_READ_FAILS | MOCK_UNMADE | MOCK_UNMADE_ONCE)))
        return zm_err_set(err, -ENOENT, "%s: not kept on disk (mock)", path);
    char name[4096];
    int at = snprintf(name, sizeof name, "%s/kept-", tree->cache_dir);
    for (const char *p = path; *p && at < (int)sizeof name - 1; p++)
        name[at++] = *p == '/' ? '_' : *p;
    name[at] = '\0';
    uint64_t total = mock_size(tree, &entry);
    FILE *f = fopen(name, "w");
    if (f == NULL)
        return zm_err_set(err, -errno, "%s: %s", name, strerror(errno));
    for (uint64_t i = 0; i < total; i++)
        fputc(mock_pattern_byte(entry.seed, i), f);
    fclose(f);
    *fd = open(name, O_RDONLY | O_CLOEXEC);
    if (*fd < 0)
        return zm_err_set(err, -errno, "%s: %s", name, strerror(errno));
    *size = total;
    mock_log(tree, "kept", path);
    return 0;
}

void zm__tree_kernel_reads_kept(zm_tree *tree)
{
    (void)tree; /* the mock makes nothing ahead */
}

int zm__tree_read_kept(zm_tree *tree, const char *path, uint8_t **bytes, size_t *size, zm_err *err)
{
    *bytes = NULL;
    *size = 0;
    mock_entry entry;
    if (tree->cache_dir == NULL || !mock_find(path, &entry) || entry.kind != ZM_NODE_FILE ||
        entry.content != MOCK_PATTERN ||
        (entry.flags & (MOCK_READ_FAILS | MOCK_UNMADE | MOCK_UNMADE_ONCE)))
        return zm_err_set(err, -ENOENT, "%s: not kept on disk (mock)", path);
    uint64_t total = mock_size(tree, &entry);
    uint8_t *out = malloc(total ? total : 1);
    if (out == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory");
    for (uint64_t i = 0; i < total; i++)
        out[i] = mock_pattern_byte(entry.seed, i);
    *bytes = out;
    *size = total;
    mock_log(tree, "pushed", path);
    return 0;
}

size_t zm__tree_skipped(zm_tree *tree, const char *const **lines)
{
    (void)tree;
    *lines = NULL;
    return 0; /* the mock's files are all served */
}

int zm__tree_kept_on_disk(zm_tree *tree)
{
    return tree->cache_dir != NULL;
}

int64_t zm__tree_time_ns(zm_tree *tree, const char *path, const zm_node *node)
{
    (void)node;
    int64_t length = (int64_t)strlen(path);
    return ((int64_t)tree->source_stat.st_mtim.tv_sec + length) * 1000000000 + length;
}

int zm__tree_readlink(zm_tree *tree, const char *path, char *target, size_t size, zm_err *err)
{
    int rc = mock_check_process(tree, err);
    if (rc != 0)
        return rc;
    mock_entry entry;
    if (!mock_find(path, &entry))
        return zm_err_set(err, -ENOENT, "%s: no such link in the mock tree", path);
    if (entry.kind != ZM_NODE_LINK)
        return zm_err_set(err, -EINVAL, "%s: not a link", path);
    if (strlen(entry.text) >= size)
        return zm_err_set(err, -ENAMETOOLONG, "%s: target too long", path);
    strcpy(target, entry.text);
    return 0;
}

int zm__tree_getattr(zm_tree *tree, const char *path, zm_node *node, zm_err *err)
{
    return zm__tree_lookup(tree, path, node, err);
}

void zm__tree_count_open(zm_tree *tree, const char *path)
{
    (void)tree;
    (void)path;
}

void zm__tree_count_unmade(zm_tree *tree, const char *path, int read)
{
    (void)tree;
    (void)path;
    (void)read;
}

void zm__tree_release_snapshot(zm_tree *tree, uint64_t snapshot)
{
    (void)tree; /* the mock has no live file */
    (void)snapshot;
}

int zm__tree_changes(zm_tree *tree, const char *path)
{
    (void)tree; /* the mock's names never change */
    (void)path;
    return 0;
}

int zm__tree_send(zm_tree *tree, const char *path, uint64_t offset, size_t size,
                  zm__tree_sink send, void *context, size_t *done, zm_err *err)
{
    uint8_t *buffer = malloc(size ? size : 1);
    if (buffer == NULL)
        return zm_err_set(err, -ENOMEM, "mock: out of memory");
    int rc = zm__tree_read(tree, path, offset, size, buffer, done, err);
    if (rc == 0)
        send(context, buffer, *done);
    free(buffer);
    return rc;
}
