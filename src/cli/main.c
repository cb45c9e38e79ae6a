/* zarrmount: the command line front end. */
#include <stdio.h>
#include <string.h>

#include <stdlib.h>

#include "zarrmount/cli.h"
#include "zarrmount/config.h"
#include "zarrmount/fs.h"

static const char usage[] =
    "Usage: zarrmount [options] SOURCE MOUNTPOINT\n"
    "       zarrmount select [--source FILE [--set SETFILE]] < REQUEST.json\n"
    "       zarrmount inspect FILE [--json] [--layout anndata]\n"
    "       zarrmount export SOURCE VIEW DIRECTORY [--codec CODEC] [--chunk-size SIZE] [--layout anndata] [--index-dtype int32]\n"
    "       zarrmount explain SOURCE PATH [--json] | zarrmount explain MNT/PATH [--json]\n"
    "       zarrmount stats MOUNTPOINT [--json] [--watch]\n"
    "       zarrmount --version | -V | --help\n"
    "\n"
    "Commands:\n"
    "  select    run the selection kernel on one JSON request read from stdin and\n"
    "            write the kept cells as JSON on stdout (see zarrmount(1) and\n"
    "            docs/select-contract.md); a refused request prints\n"
    "            {\"error\": reason} and exits 2\n"
    "  inspect   print the elements an .h5ad, loom or 10x .h5 file holds, how each\n"
    "            array is stored and read, and the default block size B0\n"
    "  export    write one view (full, file, uniform/seed0/k=1000, blocks/seed0/k=1000,\n"
    "            ...) as a Zarr directory store: the bytes a mount serves, no FUSE;\n"
    "            --chunk-size as -o chunk_size= (bytes, or 256K, 1M, 2G: powers of 1024)\n"
    "  explain   what a path of the tree is (a view: method, n, k and how it came\n"
    "            from a share, seed, settings, digest, strata, first cells), or why\n"
    "            it does not exist (exit 2); reads no chunk\n"
    "  stats     a mount's counters, per view and in total (lookups, reads, the\n"
    "            daemon's time over them, chunks synthesized, cache hits and misses,\n"
    "            source chunks and bytes read, refused paths, work in progress) from\n"
    "            MOUNTPOINT/.zarrmount/stats.json: a table, --json for the JSON\n"
    "            itself, --watch to redraw every second\n"
    "\n"
    "Mount: zarrmount [options] SOURCE MOUNTPOINT (the options: zarrmount --help, docs/mount.md)\n";

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "select") == 0) {
        const char *source = NULL, *set = NULL;
        for (int i = 2; i < argc; i += 2) {
            if (i + 1 < argc && strcmp(argv[i], "--source") == 0 && source == NULL) {
                source = argv[i + 1];
            } else if (i + 1 < argc && strcmp(argv[i], "--set") == 0 && set == NULL) {
                set = argv[i + 1];
            } else {
                fprintf(stderr, "zarrmount select: unexpected argument '%s' (the request is read "
                                "from stdin; --source FILE gives a file for \"field\" and "
                                "\"embedding\", --set SETFILE the cells to select among)\n",
                        argv[i]);
                return ZM_EXIT_REFUSED;
            }
        }
        /* Results can be hundreds of megabytes: write in large blocks. */
        static char buffer[1 << 20];
        setvbuf(stdout, buffer, _IOFBF, sizeof buffer);
        return zm_select_main_set(stdin, stdout, source, set);
    }
    if (argc >= 2 && strcmp(argv[1], "inspect") == 0)
        return zm_inspect_main(argc - 2, argv + 2, stdout);
    if (argc >= 2 && strcmp(argv[1], "explain") == 0)
        return zm_explain_main(argc - 2, argv + 2);
    if (argc >= 2 && strcmp(argv[1], "stats") == 0)
        return zm_stats_main(argc - 2, argv + 2, stdout);
    /* More subcommands go here, each dispatched on argv[1] like these. */
    if (argc >= 2 && strcmp(argv[1], "export") == 0) {
        const char *codec = NULL;
        uint64_t chunk = 0; /* the default */
        int layout_anndata = 0, index_int32 = 0;
        const char *positional[3];
        int n = 0;
        for (int i = 2; i < argc; i++) {
            if (strcmp(argv[i], "--codec") == 0 && i + 1 < argc)
                codec = argv[++i];
            else if (strcmp(argv[i], "--chunk-size") == 0 && i + 1 < argc) {
                /* The mount's grammar (-o chunk_size=) and its errors. */
                zm_err err;
                zm_err_clear(&err);
                if (zm_parse_size("--chunk-size", argv[++i], &chunk, &err) != 0) {
                    fprintf(stderr, "zarrmount export: %s\n", err.reason);
                    return ZM_EXIT_REFUSED;
                }
            }
            else if (strcmp(argv[i], "--layout") == 0 && i + 1 < argc) {
                /* The mount's -o layout=. */
                const char *layout = argv[++i];
                if (strcmp(layout, "anndata") != 0 && strcmp(layout, "mudata") != 0) {
                    fprintf(stderr, "zarrmount export: --layout %s: give mudata (the default) or "
                                    "anndata\n", layout);
                    return ZM_EXIT_REFUSED;
                }
                layout_anndata = strcmp(layout, "anndata") == 0;
            }
            else if (strcmp(argv[i], "--index-dtype") == 0 && i + 1 < argc) {
                /* The mount's -o index_dtype=int32. */
                if (strcmp(argv[++i], "int32") != 0) {
                    fprintf(stderr, "zarrmount export: --index-dtype %s: give int32 (the default is "
                                    "the source's dtypes)\n", argv[i]);
                    return ZM_EXIT_REFUSED;
                }
                index_int32 = 1;
            }
            else if (argv[i][0] != '-' && n < 3)
                positional[n++] = argv[i];
            else {
                fprintf(stderr, "zarrmount export: unexpected argument '%s'\n", argv[i]);
                return ZM_EXIT_REFUSED;
            }
        }
        if (n != 3) {
            fprintf(stderr, "usage: zarrmount export SOURCE VIEW DIRECTORY [--codec CODEC] [--chunk-size SIZE] [--layout anndata] [--index-dtype int32]\n");
            return ZM_EXIT_REFUSED;
        }
        return zm_export_main(positional[0], positional[1], positional[2], codec, 0, chunk,
                              layout_anndata, index_int32);
    }
    if (argc == 2 && (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-V") == 0)) {
        /* The same lines as `zarrmount SOURCE MOUNTPOINT -V`, then the spec's. */
        zm_fs_print_version(stdout);
        printf("subsampling spec version %d\n", 1); /* as before: ZM_SPEC_VERSION */
        return ZM_EXIT_OK;
    }
    if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        fputs(usage, stdout);
        fputs("\n", stdout);
        fflush(stdout);
        return zm_fs_main(2, (char *[]){argv[0], "--help", NULL});
    }
    if (argc >= 2)
        return zm_fs_main(argc, argv);
    fputs(usage, stderr);
    return ZM_EXIT_REFUSED;
}
