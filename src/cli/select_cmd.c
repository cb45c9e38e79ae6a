/* `zarrmount select`: one JSON request on stdin, one JSON result on stdout. */
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "zarrmount/text.h"
#include "zarrmount/cli.h"
#include "zarrmount/view.h"
#include "zarrmount/source.h"

static int zm_select_main_with(FILE *in, FILE *out, zm_source *source, const zm_view_set *set);

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
        uint64_t count = request->set ? request->set_count : request->n;
        uint64_t k = request->k < count ? request->k : count;
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
    char *kept = rc == 0 ? malloc(zm_base64_length(length) + 1) : NULL;
    if (rc == 0 && kept == NULL)
        rc = zm_err_set(err, -ENOMEM, "out of memory encoding the kept cells");
    if (rc == 0) {
        zm_base64_encode(bytes, length, kept);
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

/* Reads all of in; NULL when memory runs out. */
static char *read_all(FILE *in, size_t *length)
{
    size_t capacity = 1 << 16, used = 0;
    char *text = malloc(capacity);
    while (text != NULL) {
        used += fread(text + used, 1, capacity - used, in);
        if (used < capacity)
            break;
        char *grown = realloc(text, capacity * 2);
        if (grown == NULL)
            free(text);
        text = grown;
        capacity *= 2;
    }
    *length = used;
    return text;
}

/* Python's json module writes non-finite floats as the bare tokens NaN,
 * Infinity and -Infinity, which JSON does not have; a request written that
 * way means the strings the contract names, so quote them. Outside strings
 * nothing else in JSON starts with N, I or -I. */
static char *quote_non_finite(const char *text, size_t length, size_t *out_length)
{
    static const char *const tokens[] = {"NaN", "Infinity", "-Infinity"};
    char *out = malloc(length / 3 * 5 + 16);
    if (out == NULL)
        return NULL;
    size_t o = 0;
    int in_string = 0;
    for (size_t i = 0; i < length; i++) {
        char c = text[i];
        if (in_string) {
            if (c == '\\' && i + 1 < length)
                out[o++] = text[i++];
            else if (c == '"')
                in_string = 0;
        } else if (c == '"') {
            in_string = 1;
        } else {
            int quoted = 0;
            for (size_t t = 0; t < 3 && !quoted; t++) {
                size_t n = strlen(tokens[t]);
                if (length - i >= n && memcmp(text + i, tokens[t], n) == 0) {
                    out[o++] = '"';
                    memcpy(out + o, tokens[t], n);
                    o += n;
                    out[o++] = '"';
                    i += n - 1;
                    quoted = 1;
                }
            }
            if (quoted)
                continue;
        }
        out[o++] = text[i];
    }
    *out_length = o;
    return out;
}

int zm_select_main(FILE *in, FILE *out) { return zm_select_main_source(in, out, NULL); }

int zm_select_main_source(FILE *in, FILE *out, const char *source_path)
{
    return zm_select_main_set(in, out, source_path, NULL);
}

int zm_select_main_set(FILE *in, FILE *out, const char *source_path, const char *set_path)
{
    zm_source *source = NULL;
    zm_err open_err;
    zm_err_clear(&open_err);
    if (source_path != NULL && zm_source_open(source_path, NULL, &source, &open_err) != 0) {
        write_error(out, open_err.reason);
        return ZM_EXIT_REFUSED;
    }
    zm_view_set *set = NULL;
    if (set_path != NULL) {
        int rc = source == NULL
                     ? zm_err_set(&open_err, -EINVAL, "--set needs --source FILE: a set names the "
                                                      "cells of a file")
                     : zm_view_set_from_file(source, set_path, "set", &set, &open_err);
        if (rc != 0) {
            write_error(out, open_err.reason);
            zm_source_close(source);
            return rc == -ENOMEM ? ZM_EXIT_FAILURE : ZM_EXIT_REFUSED;
        }
    }
    int status = zm_select_main_with(in, out, source, set);
    zm_view_set_unref(set);
    zm_source_close(source);
    return status;
}

static int zm_select_main_with(FILE *in, FILE *out, zm_source *source, const zm_view_set *set)
{
    json_error_t parse_error;
    size_t raw_length = 0, length = 0;
    char *raw = read_all(in, &raw_length);
    char *text = raw ? quote_non_finite(raw, raw_length, &length) : NULL;
    free(raw);
    if (text == NULL) {
        write_error(out, "out of memory reading the request");
        return ZM_EXIT_FAILURE;
    }
    json_t *root = json_loadb(text, length, JSON_REJECT_DUPLICATES, &parse_error);
    free(text);
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
    /* A set file's cells (original positions) are the request's "set". */
    if (set != NULL) {
        json_t *cells = json_object_get(root, "set") ? NULL : json_array();
        for (uint64_t i = 0; cells != NULL && i < set->count; i++)
            if (json_array_append_new(cells, json_integer(set->positions[i])) != 0) {
                json_decref(cells);
                cells = NULL;
            }
        if (cells == NULL) {
            int both = json_object_get(root, "set") != NULL;
            json_decref(root);
            write_error(out, both ? "give the cells either with --set or as \"set\", not both"
                                  : "out of memory");
            return both ? ZM_EXIT_REFUSED : ZM_EXIT_FAILURE;
        }
        json_object_set_new(root, "set", cells);
    }
    int rc = zm_select_command_parse_source(root, source, &command, &err);
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
