#define FUSE_USE_VERSION 312

#include "fs/options.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* What fuse_opt_parse fills: our options as text (checked after parsing,
 * so the reason can name the option), the rest straight into the config. */
typedef struct zm__parse {
    zm__fs_config *config;
    zm_err *err;
    char *codec;
    char *cache_size;
    char *cache_dir;
    char *cache_max;
    char *chunk_size;
    char *threads;
    char *ahead_idle;
    char *ahead_rate;
    char *passthrough;
    char *sets;
    char *layout;
    char *index_dtype;
} zm__parse;

enum {
    ZM__KEY_FOREGROUND,
    ZM__KEY_DEBUG,
    ZM__KEY_ALLOW_OTHER,
    ZM__KEY_READ_ONLY,
    ZM__KEY_READ_WRITE,
    ZM__KEY_FSTAB_ONLY,
    ZM__KEY_NONEMPTY,
    ZM__KEY_HELP,
    ZM__KEY_VERSION,
};

#define ZM__OPTION(template, field)                                                                \
    {                                                                                              \
        template, offsetof(zm__parse, field), 0                                                    \
    }

static const struct fuse_opt zm__options[] = {
    ZM__OPTION("codec=%s", codec),
    ZM__OPTION("cache_size=%s", cache_size),
    ZM__OPTION("cache_dir=%s", cache_dir),
    ZM__OPTION("cache_max=%s", cache_max),
    ZM__OPTION("chunk_size=%s", chunk_size),
    ZM__OPTION("threads=%s", threads),
    ZM__OPTION("ahead_idle=%s", ahead_idle),
    ZM__OPTION("ahead_rate=%s", ahead_rate),
    ZM__OPTION("passthrough=%s", passthrough),
    ZM__OPTION("sets=%s", sets),
    ZM__OPTION("layout=%s", layout),
    ZM__OPTION("index_dtype=%s", index_dtype),
    FUSE_OPT_KEY("-f", ZM__KEY_FOREGROUND),
    FUSE_OPT_KEY("-d", ZM__KEY_DEBUG),
    FUSE_OPT_KEY("debug", ZM__KEY_DEBUG),
    FUSE_OPT_KEY("allow_other", ZM__KEY_ALLOW_OTHER),
    FUSE_OPT_KEY("ro", ZM__KEY_READ_ONLY),
    FUSE_OPT_KEY("-r", ZM__KEY_READ_ONLY),
    FUSE_OPT_KEY("rw", ZM__KEY_READ_WRITE),
    /* fstab and mount(8) options that mean nothing to the filesystem;
     * mount.fuse3 passes some of them on. */
    FUSE_OPT_KEY("defaults", ZM__KEY_FSTAB_ONLY),
    FUSE_OPT_KEY("auto", ZM__KEY_FSTAB_ONLY),
    FUSE_OPT_KEY("noauto", ZM__KEY_FSTAB_ONLY),
    FUSE_OPT_KEY("nofail", ZM__KEY_FSTAB_ONLY),
    FUSE_OPT_KEY("_netdev", ZM__KEY_FSTAB_ONLY),
    FUSE_OPT_KEY("user", ZM__KEY_FSTAB_ONLY),
    FUSE_OPT_KEY("users", ZM__KEY_FSTAB_ONLY),
    FUSE_OPT_KEY("nouser", ZM__KEY_FSTAB_ONLY),
    FUSE_OPT_KEY("owner", ZM__KEY_FSTAB_ONLY),
    FUSE_OPT_KEY("group", ZM__KEY_FSTAB_ONLY),
    FUSE_OPT_KEY("comment=", ZM__KEY_FSTAB_ONLY),
    /* Access-time flags libfuse does not know (it knows atime and noatime):
     * a read-only mount never writes an access time. */
    FUSE_OPT_KEY("relatime", ZM__KEY_FSTAB_ONLY),
    FUSE_OPT_KEY("norelatime", ZM__KEY_FSTAB_ONLY),
    FUSE_OPT_KEY("strictatime", ZM__KEY_FSTAB_ONLY),
    FUSE_OPT_KEY("nostrictatime", ZM__KEY_FSTAB_ONLY),
    FUSE_OPT_KEY("diratime", ZM__KEY_FSTAB_ONLY),
    FUSE_OPT_KEY("nodiratime", ZM__KEY_FSTAB_ONLY),
    FUSE_OPT_KEY("lazytime", ZM__KEY_FSTAB_ONLY),
    FUSE_OPT_KEY("nolazytime", ZM__KEY_FSTAB_ONLY),
    /* Ours since libfuse 3 dropped it: mount over a directory that holds
     * entries (zm__check_mountpoint in mount.c). */
    FUSE_OPT_KEY("nonempty", ZM__KEY_NONEMPTY),
    FUSE_OPT_KEY("-h", ZM__KEY_HELP),
    FUSE_OPT_KEY("--help", ZM__KEY_HELP),
    FUSE_OPT_KEY("-V", ZM__KEY_VERSION),
    FUSE_OPT_KEY("--version", ZM__KEY_VERSION),
    FUSE_OPT_END,
};

static int zm__take_argument(zm__parse *parse, const char *arg)
{
    zm__fs_config *config = parse->config;
    char **slot = config->source == NULL       ? &config->source
                  : config->mountpoint == NULL ? &config->mountpoint
                                               : NULL;
    if (slot == NULL) {
        zm_err_set(parse->err, -EINVAL,
                   "unexpected argument '%s' (usage: zarrmount [options] SOURCE MOUNTPOINT)", arg);
        return -1;
    }
    *slot = strdup(arg);
    if (*slot == NULL) {
        zm_err_set(parse->err, -ENOMEM, "out of memory reading the command line");
        return -1;
    }
    return 0;
}

/* Returns 1 to keep arg for fuse_session_new, 0 to drop it, -1 to fail. */
static int zm__option(void *data, const char *arg, int key, struct fuse_args *outargs)
{
    (void)outargs;
    zm__parse *parse = data;
    zm__fs_config *config = parse->config;
    switch (key) {
    case ZM__KEY_FOREGROUND:
        config->foreground = 1;
        return 0;
    case ZM__KEY_DEBUG:
        /* Request lines are only useful where someone reads them. */
        config->debug = 1;
        config->foreground = 1;
        return 0;
    case ZM__KEY_ALLOW_OTHER:
        config->allow_other = 1;
        return 1;
    case ZM__KEY_READ_ONLY:
    case ZM__KEY_FSTAB_ONLY:
        return 0; /* ro is added back, last, whatever was given */
    case ZM__KEY_READ_WRITE:
        /* mount(8) passes rw unless told ro: say so rather than pretend. */
        zm_err_set(parse->err, -EINVAL,
                   "option rw: zarrmount is a read-only filesystem (give -o ro; in fstab: ro)");
        return -1;
    case ZM__KEY_NONEMPTY:
        config->nonempty = 1;
        return 0;
    case ZM__KEY_HELP:
        config->show_help = 1;
        return 0;
    case ZM__KEY_VERSION:
        config->show_version = 1;
        return 0;
    case FUSE_OPT_KEY_NONOPT:
        return zm__take_argument(parse, arg);
    default:
        break;
    }
    if (arg[0] == '-') {
        zm_err_set(parse->err, -EINVAL, "unknown option '%s' (see zarrmount --help)", arg);
        return -1;
    }
    if (strncmp(arg, "x-", 2) == 0)
        return 0; /* x-systemd.automount and the like are for other programs */
    return 1;     /* a FUSE mount option; fuse_session_new refuses unknown ones */
}

/* A number of seconds or a rate: a decimal from 0 to limit. */
static int zm__parse_decimal(const char *option, const char *text, double limit, const char *what,
                             double *out, zm_err *err)
{
    char *end;
    errno = 0;
    double value = isdigit((unsigned char)text[0]) ? strtod(text, &end) : -1;
    if (!isdigit((unsigned char)text[0]) || *end != '\0' || errno == ERANGE || !(value >= 0) ||
        value > limit)
        return zm_err_set(err, -EINVAL, "%s=%s: not %s from 0 to %.0f", option, text, what, limit);
    *out = value;
    return 0;
}

/* Checks and converts the options fuse_opt_parse left as text. */
static int zm__check_values(zm__parse *parse, zm_err *err)
{
    zm_config *options = &parse->config->options;
    int rc;
    if (parse->codec && parse->codec[0] == '\0')
        return zm_err_set(err, -EINVAL,
                          "codec= needs a value (none, zstd[:LEVEL], "
                          "blosc[:CNAME[:LEVEL[:SHUFFLE]]])");
    if (parse->chunk_size &&
        (rc = zm_parse_size("chunk_size", parse->chunk_size, &options->chunk_bytes, err)))
        return rc;
    if (parse->cache_size &&
        (rc = zm_parse_size("cache_size", parse->cache_size, &options->cache_bytes, err)))
        return rc;
    if (parse->threads &&
        (rc = zm_parse_threads("threads", parse->threads, &options->threads, err)))
        return rc;
    if (parse->cache_max &&
        (rc = zm_parse_size("cache_max", parse->cache_max, &options->cache_max, err)))
        return rc;
    if (parse->ahead_idle && (rc = zm__parse_decimal("ahead_idle", parse->ahead_idle, 86400,
                                                     "a number of seconds",
                                                     &options->ahead_idle_seconds, err)))
        return rc;
    if (parse->ahead_rate && (rc = zm__parse_decimal("ahead_rate", parse->ahead_rate, 1e6,
                                                     "a number of chunks a second",
                                                     &options->ahead_rate, err)))
        return rc;
    if (parse->passthrough) {
        if (strcmp(parse->passthrough, "on") == 0)
            parse->config->passthrough = 1;
        else if (strcmp(parse->passthrough, "off") != 0)
            return zm_err_set(err, -EINVAL, "passthrough=%s: give on or off", parse->passthrough);
    }
    if (parse->layout) {
        if (strcmp(parse->layout, "anndata") == 0)
            options->layout_anndata = 1;
        else if (strcmp(parse->layout, "mudata") == 0)
            options->layout_anndata = 0;
        else
            return zm_err_set(err, -EINVAL, "layout=%s: give mudata (the default) or anndata",
                              parse->layout);
    }
    if (parse->index_dtype) {
        /* Sparse indices and indptr as int32, for readers without int64. */
        if (strcmp(parse->index_dtype, "int32") != 0)
            return zm_err_set(err, -EINVAL, "index_dtype=%s: give int32 (the default is the source's "
                              "dtypes)", parse->index_dtype);
        options->index_int32 = 1;
    }
    if (parse->cache_dir && parse->cache_dir[0] == '\0')
        return zm_err_set(err, -EINVAL, "cache_dir= needs a directory (or none)");
    if (parse->sets) {
        /* Made absolute now: the daemon leaves the working directory. */
        char *absolute = parse->sets[0] ? realpath(parse->sets, NULL) : NULL;
        if (absolute == NULL)
            return zm_err_set(err, -EINVAL, "sets=%s: %s", parse->sets,
                              parse->sets[0] ? strerror(errno) : "needs a directory");
        free((char *)options->sets_dir);
        options->sets_dir = absolute;
    }
    options->codec = parse->codec;
    parse->codec = NULL;
    options->cache_dir = parse->cache_dir;
    parse->cache_dir = NULL;
    return 0;
}

int zm__fs_config_parse(int argc, char **argv, zm__fs_config *config, zm_err *err)
{
    memset(config, 0, sizeof *config);
    zm_config_unset(&config->options);
    zm_err_clear(err);
    zm__parse parse = {.config = config, .err = err};
    struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
    int rc = 0;
    if (fuse_opt_parse(&args, &parse, zm__options, zm__option) != 0) {
        /* fuse_opt_parse says why itself for its own complaints (a -o
         * without a value); the caller captures that line. */
        rc = err->code ? err->code
                       : zm_err_set(err, -EINVAL, "bad command line (see zarrmount --help)");
    }
    config->fuse_args = args;
    if (rc == 0 && !config->show_help && !config->show_version) {
        rc = zm__check_values(&parse, err);
        if (rc == 0 && config->source == NULL)
            rc = zm_err_set(
                err, -EINVAL,
                "missing SOURCE and MOUNTPOINT (usage: zarrmount [options] SOURCE MOUNTPOINT)");
        else if (rc == 0 && config->mountpoint == NULL)
            rc = zm_err_set(err, -EINVAL,
                            "missing MOUNTPOINT (usage: zarrmount [options] SOURCE MOUNTPOINT)");
    }
    free(parse.codec);
    free(parse.cache_size);
    free(parse.cache_dir);
    free(parse.cache_max);
    free(parse.chunk_size);
    free(parse.threads);
    free(parse.ahead_idle);
    free(parse.passthrough);
    free(parse.sets);
    free(parse.layout);
    free(parse.index_dtype);
    free(parse.ahead_rate);
    return rc;
}

/* Replaces *path by its absolute, symlink-free form. */
static int zm__make_absolute(const char *what, char **path, zm_err *err)
{
    char *absolute = realpath(*path, NULL);
    if (absolute == NULL)
        return zm_err_set(err, -errno, "%s '%s': %s", what, *path, strerror(errno));
    free(*path);
    *path = absolute;
    return 0;
}

int zm__fs_config_resolve(zm__fs_config *config, zm_err *err)
{
    int rc;
    if ((rc = zm__make_absolute("source", &config->source, err)) ||
        (rc = zm__make_absolute("mount point", &config->mountpoint, err)))
        return rc;
    if (stat(config->source, &config->source_stat) != 0)
        return zm_err_set(err, -errno, "source '%s': %s", config->source, strerror(errno));
    if (!S_ISREG(config->source_stat.st_mode) && !S_ISDIR(config->source_stat.st_mode))
        return zm_err_set(err, -EINVAL,
                          "source '%s': neither a regular file nor a directory (a Zarr store)",
                          config->source);
    /* A directory store mounted inside itself would be read through the
     * mount: its walk at start would wait on the daemon that makes it. */
    size_t n = strlen(config->source);
    if (S_ISDIR(config->source_stat.st_mode) &&
        strncmp(config->mountpoint, config->source, n) == 0 &&
        (config->mountpoint[n] == '/' || config->mountpoint[n] == '\0' || n == 1))
        return zm_err_set(err, -EINVAL, "mount point '%s' lies inside the source store '%s'",
                          config->mountpoint, config->source);
    struct stat mountpoint;
    if (stat(config->mountpoint, &mountpoint) != 0)
        return zm_err_set(err, -errno, "mount point '%s': %s", config->mountpoint, strerror(errno));
    if (!S_ISDIR(mountpoint.st_mode))
        return zm_err_set(err, -ENOTDIR, "mount point '%s': not a directory", config->mountpoint);
    return 0;
}

/* Adds "-o NAME=VALUE" with VALUE's commas and backslashes escaped, as
 * fuse_opt splits -o lists on commas. */
static int zm__add_named_option(struct fuse_args *args, int position, const char *name,
                                const char *value)
{
    size_t size = strlen(name) + strlen(value) + 2;
    char *option = malloc(size);
    char *escaped = NULL;
    int rc = -ENOMEM;
    if (option) {
        snprintf(option, size, "%s=%s", name, value);
        if (fuse_opt_add_opt_escaped(&escaped, option) == 0) {
            size_t length = strlen(escaped) + 3;
            char *arg = malloc(length);
            if (arg) {
                snprintf(arg, length, "-o%s", escaped);
                rc = fuse_opt_insert_arg(args, position, arg) == 0 ? 0 : -ENOMEM;
                free(arg);
            }
        }
    }
    free(option);
    free(escaped);
    return rc;
}

int zm__fs_config_finish_fuse_args(zm__fs_config *config, zm_err *err)
{
    struct fuse_args *args = &config->fuse_args;
    char max_read[32];
    snprintf(max_read, sizeof max_read, "%u", ZM__MAX_READ);
    /* Defaults go first, so that options given on the command line win;
     * ro goes last, so that nothing can undo it. */
    int failed = zm__add_named_option(args, 1, "fsname", config->source) ||
                 zm__add_named_option(args, 1, "subtype", "zarrmount") ||
                 zm__add_named_option(args, 1, "max_read", max_read) ||
                 (config->allow_other && fuse_opt_add_arg(args, "-odefault_permissions") != 0) ||
                 fuse_opt_add_arg(args, "-oro") != 0;
    if (failed)
        return zm_err_set(err, -ENOMEM, "out of memory building the mount options");
    return 0;
}

void zm__fs_config_free(zm__fs_config *config)
{
    free(config->source);
    free(config->mountpoint);
    /* The two strings zm__check_values took from the parse. */
    free((char *)config->options.codec);
    free((char *)config->options.cache_dir);
    free((char *)config->options.sets_dir);
    fuse_opt_free_args(&config->fuse_args);
    memset(config, 0, sizeof *config);
}

void zm__fs_print_help(FILE *out, const char *program)
{
    fprintf(out,
            "Usage: %s [options] SOURCE MOUNTPOINT\n"
            "\n"
            "Mounts SOURCE (an .h5ad, loom or 10x .h5 file) read-only at MOUNTPOINT as a\n"
            "tree of AnnData Zarr v2 stores; every file is made when it is read.\n"
            "Unmount with `fusermount3 -u MOUNTPOINT` (or SIGTERM or SIGINT to the daemon).\n"
            "\n"
            "Options:\n"
            "  -f                  stay in the foreground and log to stderr\n"
            "                      (default: detach once mounted and log to syslog)\n"
            "  -d                  debug: log every request, how long it took and when\n"
            "                      (implies -f)\n"
            "  -o codec=CODEC      compressor of the chunk files: none, zstd[:LEVEL],\n"
            "                      blosc[:zstd|lz4|lz4hc|blosclz|zlib[:LEVEL\n"
            "                      [:shuffle|bitshuffle|noshuffle]]]\n"
            "                      (default blosc:lz4:5:bitshuffle: fast to make and to\n"
            "                      decode, compresses counts well; blosc alone is zstd:1\n"
            "                      with byte shuffle, smaller, slower to make)\n"
            "  -o chunk_size=SIZE  raw bytes a chunk aims at (default 1M)\n"
            "  -o cache_size=SIZE  memory kept for reuse (default 1G): half for synthesized\n"
            "                      files, a quarter each for decoded source chunks and walks\n"
            "  -o cache_dir=DIR    where chunks of walked views are kept across mounts\n"
            "                      (default $XDG_CACHE_HOME/zarrmount, else for root\n"
            "                      /var/cache/zarrmount, else ~/.cache/zarrmount; none: keep\n"
            "                      nothing on disk). It must be private: owned by the user\n"
            "                      mounting, writable by nobody else, not a symbolic link,\n"
            "                      below directories only root or that user can change;\n"
            "                      else a given DIR refuses the mount and the default is\n"
            "                      not used (said in the log)\n"
            "  -o cache_max=SIZE   the most that directory holds (default 4G)\n"
            "  -o threads=N        threads that read, decode and encode chunks, 1 to %u\n"
            "                      (default: one per core): the pool decoding source\n"
            "                      chunks and the encoders of a walked array's chunks\n"
            "                      ahead each have N\n"
            "  -o ahead_idle=SEC   once a view is read, its chunks are made ahead at idle\n"
            "                      priority, first cells first, until no reader has asked\n"
            "                      anything of it for SEC seconds (default 5; 0: off)\n"
            "  -o ahead_rate=N     make at most N chunks a second ahead (default: no limit)\n"
            "  -o passthrough=on   let the kernel read files the disk cache holds straight\n"
            "                      from it (FUSE passthrough; Linux 6.9+, as root; every\n"
            "                      open then costs a round trip). Default off: a remount\n"
            "                      pushes them into the page cache ahead of a reader\n"
            "                      walking a directory\n"
            "  -o sets=DIR         serve sets/NAME/ for each Cellucid cell set NAME.json or\n"
            "                      obs names file NAME.txt in DIR (read again when it changes)\n"
            "  -o layout=anndata   a 10x file with several feature types (or a v2 file with\n"
            "                      several genomes) as one AnnData, as scanpy reads it\n"
            "                      (default mudata: a MuData store of modalities)\n"
            "  -o index_dtype=int32\n"
            "                      sparse indices and indptr as int32 (<i4), for readers\n"
            "                      without 64-bit integers; a source whose matrix could not\n"
            "                      fit is refused (default: the source's dtypes)\n"
            "  -o allow_other      let every user read the mount; files then carry SOURCE's\n"
            "                      owner and permission bits minus write, enforced by the\n"
            "                      kernel (default_permissions is added); needs\n"
            "                      user_allow_other in /etc/fuse.conf unless run as root\n"
            "  -o ro               read-only: always, given or not; rw is refused (mount(8)\n"
            "                      passes rw unless given -o ro, as fstab lines must say)\n"
            "  -o nonempty         mount over a directory that holds entries (refused\n"
            "                      otherwise, as is a mount point that is already mounted)\n"
            "  -o OPTION           other FUSE mount options (fsname=, subtype=, nosuid,\n"
            "                      nodev, noatime, ...) are passed to the mount; fstab-only\n"
            "                      ones (defaults, noauto, nofail, _netdev, x-*) and\n"
            "                      relatime, nodiratime, ... are dropped\n"
            "  -h, --help          print this help and exit\n"
            "  -V, --version       print the version (and the FUSE library's) and exit\n"
            "\n"
            "SIZE is bytes, or a number with K, M, G or T (powers of 1024): 256M, 1G.\n"
            "\n"
            "In /etc/fstab (mount.fuse3 runs `zarrmount SOURCE MOUNTPOINT -o OPTIONS`):\n"
            "  /data/pbmc.h5ad  /mnt/pbmc  fuse.zarrmount  ro,allow_other  0 0\n"
            "\n"
            "Exit status: 0 after a clean unmount, 1 when mounting or serving fails,\n"
            "2 for a bad command line or source. See docs/mount.md.\n",
            program, ZM_MAX_THREADS);
}
