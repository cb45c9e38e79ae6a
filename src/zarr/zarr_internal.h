/* Internal to the zarr module: the strict UTF-8 reader the value encoders
 * and the JSON writer share, the number formatting the writer uses (so
 * tests can reach the cases jansson cannot hold, such as NaN), and the
 * tests' stand-in for another codec library version. */
#ifndef ZARRMOUNT_ZARR_INTERNAL_H
#define ZARRMOUNT_ZARR_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "zarrmount/zarr.h"

/* Reads one code point from text[at..length): returns its byte count (1-4)
 * and sets *code_point, or returns 0 and sets *problem to a short phrase
 * ("overlong encoding", "surrogate code point", ...) for bytes that are not
 * UTF-8 as RFC 3629 defines it. */
size_t zm__utf8_next(const unsigned char *text, size_t length, size_t at, uint32_t *code_point,
                     const char **problem);

/* Checks that text is UTF-8; on failure returns -EINVAL with a reason
 * beginning with what (e.g. "item 3") and naming the byte offset. Counts the
 * code points into *code_points when that is not NULL. */
int zm__utf8_check(const char *text, size_t length, size_t *code_points, const char *what,
                   zm_err *err);

/* Writes a binary64 as Python's float.__repr__ does, with json.dumps' words
 * for the non-finite values (NaN, Infinity, -Infinity). Returns the length;
 * out must hold 32 bytes. */
size_t zm__format_python_float(double x, char out[32]);

/* For tests only: makes zm_codec_libraries and zm_codec_build report
 * version for the library name ("blosc", "blosclz", "lz4", "zlib", "zstd"),
 * as a build linked to that version would (version NULL: the real one
 * again), so that a test can open the disk cache as such a build would.
 * Changes no byte any codec makes. -ENOENT for a name not in the list.
 * Call it while no tree is open. */
int zm__codec_library_pretend(const char *name, const char *version);

#endif
