/* zarrmount text: the few text functions the other modules share, below
 * all of them (select writes a share's text with them, zarr a document's
 * numbers, the tree a path in JSON). Depends on nothing but the C library.
 */
#ifndef ZARRMOUNT_TEXT_H
#define ZARRMOUNT_TEXT_H

#include <stddef.h>

/* Writes the shortest round-trip decimal of a finite x into buf: the fewest
 * significant digits whose text reads back as x under correctly rounded
 * conversion, and among those the nearest to x, the one with the even last
 * digit when two are as near (JavaScript String(x), Python repr(x) digits).
 * Format: Python repr style ("0.35", "5.960464477539063e-08", "1e+22", "-0.0").
 * Returns the length written, or -EINVAL for a non-finite x, -ERANGE if buf
 * (cap bytes, NUL included) is too small; 32 bytes always suffice. */
int zm_shortest_decimal(double x, char *buf, size_t cap);

/* Copies text into out (size bytes, size >= 1) as valid UTF-8, which JSON
 * needs (jansson refuses anything else): a path is whatever bytes a caller
 * chose. A byte that starts no valid sequence becomes '?'; a sequence that
 * does not fit whole is cut off. */
void zm_text_utf8_copy(char *out, size_t size, const char *text);

#endif
