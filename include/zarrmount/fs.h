/* zarrmount fs: the FUSE filesystem. `zarrmount [options] SOURCE MOUNTPOINT`
 * mounts SOURCE read-only as a tree of AnnData Zarr stores (docs/mount.md).
 * This is the only module that knows FUSE. */
#ifndef ZARRMOUNT_FS_H
#define ZARRMOUNT_FS_H

/* Runs the mount command with the whole command line (argv[0] is the
 * program). Parses the options (-f, -d, -o allow_other, -o codec=...,
 * -o cache_size=..., -o chunk_size=..., -o threads=..., --help,
 * --version, and mount.fuse3's forms), opens the source, mounts and serves
 * until unmounted (fusermount3 -u, SIGTERM, SIGINT). Returns the exit
 * status: 0 after a clean unmount, 1 when mounting or serving fails, 2 for
 * a bad command line or source; each failure says why on stderr. */
int zm_fs_main(int argc, char **argv);

#include <stdint.h>

/* `zarrmount export SOURCE VIEW DIRECTORY`: writes one view ("full",
 * "uniform/seed0/k=1000", ...) as a Zarr directory store, the same bytes a
 * mount serves, without FUSE. codec NULL: the default. Returns the exit
 * status (0, 1 on failure, 2 for a bad source or view), saying why on
 * stderr. */
int zm_fs_export(const char *source, const char *view, const char *directory, const char *codec,
                 unsigned threads, uint64_t chunk_bytes);

/* `zarrmount explain SOURCE PATH [--json]` or `zarrmount explain MNT/PATH
 * [--json]` (argv after "explain"): what a path is, or why it does not
 * exist (exit 2), resolved without reading a chunk. */
int zm_fs_explain(int argc, char **argv);

#endif
