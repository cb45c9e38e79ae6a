/* `zarrmount select`: one JSON request on stdin, one JSON result on stdout. */
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "cli/base64.h"
#include "zarrmount/cli.h"

#define SUMMARY_LENGTH 20

/* Writes values[from, to) as a JSON array; results can hold 10^8 numbers, so
 * this avoids building them as JSON values. */
static void write_array(FILE *out, const char *name, const uint32_t *values, uint64_t from,
                        uint64_t to)
{
    fprintf(out, ",\"%s\":[", name);
    for (uint64_t i = from; i < to; i++) {
        char digits[11];
        int at = sizeof digits;
        uint32_t v = values[i];
        do {
            digits[--at] = (char)('0' + v % 10);
            v /= 10;
        } while (v);
        if (i > from)
            putc(',', out);
        fwrite(digits + at, 1, sizeof digits - at, out);
    }
    putc(']', out);
}

static void write_head_tail(FILE *out, const char *head, const char *tail, const uint32_t *values,
                            uint64_t k)
{
    uint64_t take = k < SUMMARY_LENGTH ? k : SUMMARY_LENGTH;
    write_array(out, head, values, 0, take);
    write_array(out, tail, values, k - take, k);
}

int zm_select_command_run(const zm_select_command *command, FILE *out, zm_err *err)
{
    const zm_request *request = &command->request;
    if (command->size_only) {
        uint64_t k = request->k < request->n ? request->k : request->n;
        fprintf(out, "{\"k\":%llu}\n", (unsigned long long)k);
        return 0;
    }
    zm_selection selection;
    int rc = zm_select(request, &selection, err);
    if (rc != 0)
        return rc;
    uint8_t *bytes = NULL;
    size_t length = 0;
    rc = zm_cellset_encode(selection.positions, selection.k, selection.n, &bytes, &length, err);
    char *kept = rc == 0 ? malloc(zm__base64_length(length) + 1) : NULL;
    if (rc == 0 && kept == NULL)
        rc = zm_err_set(err, -ENOMEM, "out of memory encoding the kept cells");
    if (rc == 0) {
        zm__base64_encode(bytes, length, kept);
        char digest[17];
        zm_cellset_digest(selection.positions, selection.k, selection.n, digest);
        fprintf(out, "{\"k\":%llu", (unsigned long long)selection.k);
        if (command->summary) {
            write_head_tail(out, "positionsHead", "positionsTail", selection.positions, selection.k);
            write_head_tail(out, "orderHead", "orderTail", selection.order, selection.k);
        } else {
            write_array(out, "positions", selection.positions, 0, selection.k);
            write_array(out, "order", selection.order, 0, selection.k);
        }
        fprintf(out, ",\"digest\":\"%s\",\"kept\":\"%s\"}\n", digest, kept);
    }
    free(kept);
    free(bytes);
    zm_selection_free(&selection);
    return rc;
}

static void write_error(FILE *out, const char *reason)
{
    json_t *object = json_pack("{s:s}", "error", reason);
    char *text = object ? json_dumps(object, JSON_COMPACT) : NULL;
    fprintf(out, "%s\n", text ? text : "{\"error\":\"out of memory\"}");
    free(text);
    json_decref(object);
}

int zm_select_main(FILE *in, FILE *out)
{
    json_error_t parse_error;
    json_t *root = json_loadf(in, JSON_REJECT_DUPLICATES, &parse_error);
    if (root == NULL) {
        char reason[ZM_REASON_MAX];
        snprintf(reason, sizeof reason, "the request is not valid JSON: %s (line %d, column %d)",
                 parse_error.text, parse_error.line, parse_error.column);
        write_error(out, reason);
        return ZM_EXIT_REFUSED;
    }
    zm_select_command command;
    zm_err err;
    zm_err_clear(&err);
    int rc = zm_select_command_parse(root, &command, &err);
    json_decref(root); /* the command owns copies of everything it keeps */
    if (rc == 0)
        rc = zm_select_command_run(&command, out, &err);
    zm_select_command_free(&command);
    if (rc != 0) {
        write_error(out, err.reason);
        return rc == -EINVAL ? ZM_EXIT_REFUSED : ZM_EXIT_FAILURE;
    }
    if (fflush(out) != 0 || ferror(out)) {
        fprintf(stderr, "zarrmount select: could not write the result: %s\n", strerror(errno));
        return ZM_EXIT_FAILURE;
    }
    return ZM_EXIT_OK;
}
