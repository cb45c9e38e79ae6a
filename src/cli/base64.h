/* Standard base64 (RFC 4648, with padding) for the cell set bytes in JSON. */
#ifndef ZARRMOUNT_CLI_BASE64_H
#define ZARRMOUNT_CLI_BASE64_H

#include <stddef.h>
#include <stdint.h>

/* Length of the encoding of length bytes, without the NUL. */
size_t zm__base64_length(size_t length);
/* Writes the encoding and a NUL into out (zm__base64_length + 1 bytes). */
void zm__base64_encode(const uint8_t *bytes, size_t length, char *out);
/* Decodes text (padding required, no whitespace); *bytes is malloc'd.
 * Returns 0 or -EINVAL for text that is not base64, -ENOMEM. */
int zm__base64_decode(const char *text, size_t text_length, uint8_t **bytes, size_t *length);

#endif
