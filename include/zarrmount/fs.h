/* zarrmount fs: the FUSE filesystem. `zarrmount [options] SOURCE MOUNTPOINT`
 * mounts SOURCE read-only as a tree of AnnData Zarr stores (docs/mount.md).
 * This is the only module that knows FUSE; the commands that use the same
 * tree without FUSE (export, explain) are the command line's (cli.h). */
#ifndef ZARRMOUNT_FS_H
#define ZARRMOUNT_FS_H

#include <stdio.h>

/* Runs the mount command with the whole command line (argv[0] is the
 * program). Parses the options (-f, -d, -o allow_other, -o codec=...,
 * -o cache_size=..., -o chunk_size=..., -o threads=..., --help,
 * --version, and mount.fuse3's forms), opens the source, mounts and serves
 * until unmounted (fusermount3 -u, SIGTERM, SIGINT). Returns the exit
 * status: 0 after a clean unmount, 1 when mounting or serving fails, 2 for
 * a bad command line or source; each failure says why on stderr. */
int zm_fs_main(int argc, char **argv);

/* What `zarrmount --version` and `zarrmount -V` print first: "zarrmount
 * VERSION" (meson's project version, the Debian package's and the man
 * page's), then the FUSE library's version, a line each. */
void zm_fs_print_version(FILE *out);

#endif
