/* zarrmount cli: the command line's commands (libzarrmount-cli, src/cli/),
 * apart from the library: select, inspect, stats, export and explain; the
 * mount itself is zm_fs_main (zarrmount/fs.h). `zarrmount select` runs the
 * selection kernel on one JSON request (docs/select-contract.md gives the
 * contract). */
#ifndef ZARRMOUNT_CLI_H
#define ZARRMOUNT_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "zarrmount/error.h"
#include "zarrmount/select.h"

struct json_t;

/* Exit codes. */
#define ZM_EXIT_OK 0
#define ZM_EXIT_FAILURE 1 /* out of memory, I/O */
#define ZM_EXIT_REFUSED 2 /* a refused or malformed request, a bad command line */

/* One parsed select request. */
typedef struct zm_select_command {
    zm_request request; /* k resolved from k, share or percent */
    int summary;        /* heads and tails instead of every position */
    int size_only;      /* only the size */
    int32_t *codes;     /* owned storage behind request.codes */
    double *coords;     /* owned storage behind request.coords */
    uint32_t *set;      /* owned storage behind request.set ("set": the cells to select among) */
} zm_select_command;

/* Reads a request object. -EINVAL with a one-line reason for anything the
 * contract does not allow or the kernel refuses up front. */
int zm_select_command_parse(const struct json_t *root, zm_select_command *command, zm_err *err);
/* The same with a source file (NULL: none): "field" (an obs key: its
 * codes, as a stratified view takes them) and "embedding" (an obsm key,
 * with "columns" of it: its coordinates) read from it, and n its cells. */
struct zm_source;
int zm_select_command_parse_source(const struct json_t *root, struct zm_source *source,
                                   zm_select_command *command, zm_err *err);
void zm_select_command_free(zm_select_command *command);

/* Runs a parsed request and writes the result object and a newline to out. */
int zm_select_command_run(const zm_select_command *command, FILE *out, zm_err *err);

/* The whole command: one request read from in, the result (or
 * {"error": reason}) written to out. Returns the exit code. */
int zm_select_main(FILE *in, FILE *out);
/* The same with --source FILE (NULL: none). */
int zm_select_main_source(FILE *in, FILE *out, const char *source);
/* The same, selecting among the cells of a set file (set_path: NAME.json,
 * a Cellucid cell set, or NAME.txt, obs names; as -o sets= reads them),
 * which needs the source. */
int zm_select_main_set(FILE *in, FILE *out, const char *source, const char *set_path);

/* `zarrmount inspect FILE [--json]` (argv after "inspect"). Returns the exit
 * code. */
int zm_inspect_main(int argc, char **argv, FILE *out);

/* `zarrmount stats MOUNTPOINT [--json] [--watch]` (argv after "stats"): a
 * mount's counters (MOUNTPOINT/.zarrmount/stats.json) as a table, as the
 * JSON, or redrawn every second until interrupted. Returns the exit code. */
int zm_stats_main(int argc, char **argv, FILE *out);

/* `zarrmount export SOURCE VIEW DIRECTORY`: writes one view ("full",
 * "uniform/seed0/k=1000", ...) as a Zarr directory store, the same bytes a
 * mount serves, without FUSE. codec NULL: the default; layout_anndata: the
 * mount's -o layout=anndata; index_int32: its -o index_dtype=int32. Returns the exit
 * status (0, 1 on failure, 2 for a bad source or view), saying why on
 * stderr. */
int zm_export_main(const char *source, const char *view, const char *directory, const char *codec,
                 unsigned threads, uint64_t chunk_bytes, int layout_anndata, int index_int32);

/* `zarrmount explain SOURCE PATH [--json]` or `zarrmount explain MNT/PATH
 * [--json]` (argv after "explain"): what a path is, or why it does not
 * exist (exit 2), resolved without reading a chunk. */
int zm_explain_main(int argc, char **argv);

#endif
