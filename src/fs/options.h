/* Internal to the fs module: the mount command line, parsed with libfuse's
 * fuse_opt into one config. Accepts `zarrmount [options] SOURCE MOUNTPOINT`
 * with the options anywhere, and mount.fuse3's form `zarrmount SOURCE
 * MOUNTPOINT -o ro,allow_other,dev,suid,...`. Our options are taken out;
 * FUSE mount options are kept for fuse_session_new, which refuses unknown
 * ones; options only fstab and mount(8) mean (defaults, noauto, nofail,
 * _netdev, user, comment=, x-...) are dropped. */
#ifndef ZARRMOUNT_FS_OPTIONS_H
#define ZARRMOUNT_FS_OPTIONS_H

#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>

#include <fuse_opt.h>

#include "zarrmount/config.h"
#include "zarrmount/error.h"

typedef struct zm__fs_config {
    char *source;     /* as given; absolute after zm__fs_config_resolve */
    char *mountpoint; /* likewise */
    /* What the tree is served with (codec and cache_dir malloc'd here), as
     * given: an option not given is "the default" (zarrmount/config.h),
     * which zm_config_resolve (the tree, the push window) turns into its
     * value, so that the FUSE layer writes no default of its own. */
    zm_config options;
    int passthrough; /* -o passthrough=on: files the disk cache holds are read by
                      * the kernel straight from it */
    int foreground;  /* -f (and -d) */
    int debug;       /* -d: log every request */
    int allow_other; /* -o allow_other */
    int nonempty;    /* -o nonempty: the mount point may hold entries */
    int show_help;
    int show_version;
    struct stat source_stat;    /* after zm__fs_config_resolve */
    struct fuse_args fuse_args; /* argv[0] and the FUSE mount options to pass on */
} zm__fs_config;

/* Parses argv. -EINVAL with a one-line reason for a bad command line.
 * With --help or --version only show_help / show_version matter. */
int zm__fs_config_parse(int argc, char **argv, zm__fs_config *config, zm_err *err);

/* Makes source and mountpoint absolute (the daemon changes directory to
 * "/"), records the source's stat, and checks the mount point is a
 * directory. -ENOENT, -ENOTDIR, -EINVAL... with a reason. */
int zm__fs_config_resolve(zm__fs_config *config, zm_err *err);

/* Completes fuse_args: ro always, fsname=SOURCE, subtype=zarrmount,
 * max_read, and default_permissions with allow_other. -ENOMEM. */
int zm__fs_config_finish_fuse_args(zm__fs_config *config, zm_err *err);

void zm__fs_config_free(zm__fs_config *config);

void zm__fs_print_help(FILE *out, const char *program);

/* The largest read the kernel is asked to send (the max_read mount option
 * and conn->max_read agree). */
#define ZM__MAX_READ (1u << 20)

#endif
