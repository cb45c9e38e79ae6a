/* libFuzzer target: the select request (`zarrmount select`: JSON text in,
 * one JSON line out), through zm_select_command_parse and zm_select_main.
 *
 * Input: the request text, as stdin would hold it.
 *
 * Properties: a parsed request is one the kernel can run (n ≤ 2^32 − 1,
 * k ≥ 1, the arrays its method needs present and as long as n); a refusal
 * is -EINVAL with a reason. The whole command always writes exactly one
 * JSON line and exits 0 or 2 (2 whenever the parse refused): {"error":
 * reason} with a reason when refused; else k = min(request k, n),
 * positions ascending below n, order a
 * permutation of them, the digest of the positions, and "kept" the base64
 * of the positions' LEB128 encoding (decoded back here); the summary form
 * is the heads and tails of the same; sizeOnly is {"k": k}.
 *
 * Requests over more than REQUEST_N_MAX cells are only parsed: running them
 * would spend the time on the kernel, which test_select.c covers.
 */
#include <errno.h>
#include <jansson.h>

#include "zarrmount/text.h"
#include "fuzz.h"
#include "zarrmount/cli.h"

#define REQUEST_N_MAX 4096

/* The bare NaN, Infinity and -Infinity that Python's json writes, quoted
 * (as zm_select_main does) so that the request parsed here is the one the
 * command parses. */
static char *quoted(const uint8_t *text, size_t length, size_t *out_length)
{
    static const char *const tokens[] = {"NaN", "Infinity", "-Infinity"};
    char *out = malloc(length * 2 + 16);
    if (out == NULL)
        abort();
    size_t o = 0;
    int in_string = 0;
    for (size_t i = 0; i < length; i++) {
        if (in_string) {
            if (text[i] == '\\' && i + 1 < length)
                out[o++] = (char)text[i++];
            else if (text[i] == '"')
                in_string = 0;
        } else if (text[i] == '"') {
            in_string = 1;
        } else {
            int matched = 0;
            for (size_t t = 0; t < 3 && !matched; t++) {
                size_t n = strlen(tokens[t]);
                if (length - i >= n && memcmp(text + i, tokens[t], n) == 0) {
                    o += (size_t)sprintf(out + o, "\"%s\"", tokens[t]);
                    i += n - 1;
                    matched = 1;
                }
            }
            if (matched)
                continue;
        }
        out[o++] = (char)text[i];
    }
    *out_length = o;
    return out;
}

/* An array member of the result: its values, checked to be uint32s. */
static uint32_t *uint32_array(json_t *result, const char *key, size_t *length)
{
    json_t *array = json_object_get(result, key);
    ZM_FUZZ_CHECK(json_is_array(array), "the result has no array \"%s\"", key);
    *length = json_array_size(array);
    uint32_t *values = malloc((*length ? *length : 1) * sizeof *values);
    if (values == NULL)
        abort();
    for (size_t i = 0; i < *length; i++) {
        json_t *v = json_array_get(array, i);
        ZM_FUZZ_CHECK(json_is_integer(v) && json_integer_value(v) >= 0 &&
                          json_integer_value(v) <= (json_int_t)UINT32_MAX,
                      "%s[%zu] is not a position", key, i);
        values[i] = (uint32_t)json_integer_value(v);
    }
    return values;
}

static int by_value(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

static void check_positions(const uint32_t *positions, size_t count, uint64_t n)
{
    for (size_t i = 0; i < count; i++) {
        ZM_FUZZ_CHECK(positions[i] < n, "position %u past n = %llu", positions[i],
                      (unsigned long long)n);
        ZM_FUZZ_CHECK(i == 0 || positions[i] > positions[i - 1], "positions not ascending");
    }
}

static void check_result(json_t *result, const zm_select_command *command)
{
    const zm_request *request = &command->request;
    uint64_t n = request->n;
    uint64_t selected_from = request->set ? request->set_count : n;
    uint64_t expected_k = request->k < selected_from ? request->k : selected_from;
    json_t *k_member = json_object_get(result, "k");
    ZM_FUZZ_CHECK(json_is_integer(k_member) && (uint64_t)json_integer_value(k_member) == expected_k,
                  "k is not min(request k, n or |set|) = %llu", (unsigned long long)expected_k);
    if (command->size_only) {
        ZM_FUZZ_CHECK(json_object_size(result) == 1, "sizeOnly gave more than k");
        return;
    }
    size_t k = (size_t)expected_k;
    if (command->summary) {
        size_t head, tail, order_head, order_tail;
        uint32_t *ph = uint32_array(result, "positionsHead", &head);
        uint32_t *pt = uint32_array(result, "positionsTail", &tail);
        uint32_t *oh = uint32_array(result, "orderHead", &order_head);
        uint32_t *ot = uint32_array(result, "orderTail", &order_tail);
        size_t take = k < 20 ? k : 20;
        ZM_FUZZ_CHECK(head == take && tail == take && order_head == take && order_tail == take,
                      "summary lengths are not min(k, 20)");
        check_positions(ph, head, n);
        check_positions(pt, tail, n);
        free(ph);
        free(pt);
        free(oh);
        free(ot);
        ZM_FUZZ_CHECK(json_object_get(result, "positions") == NULL, "summary with positions");
    } else {
        size_t count, order_count;
        uint32_t *positions = uint32_array(result, "positions", &count);
        uint32_t *order = uint32_array(result, "order", &order_count);
        ZM_FUZZ_CHECK(count == k && order_count == k, "%zu positions and %zu in order for k = %zu",
                      count, order_count, k);
        check_positions(positions, count, n);
        /* Over a set, every position kept is one of the set's. */
        for (size_t i = 0, j = 0; request->set != NULL && i < count; i++) {
            while (j < request->set_count && request->set[j] < positions[i])
                j++;
            ZM_FUZZ_CHECK(j < request->set_count && request->set[j] == positions[i],
                          "position %u is not in the set", positions[i]);
        }
        qsort(order, order_count, sizeof *order, by_value);
        ZM_FUZZ_CHECK(k == 0 || memcmp(order, positions, k * sizeof *order) == 0,
                      "order is not a permutation of positions");

        char digest[17];
        zm_cellset_digest(positions, k, n, digest);
        json_t *digest_member = json_object_get(result, "digest");
        ZM_FUZZ_CHECK(json_is_string(digest_member) &&
                          strcmp(json_string_value(digest_member), digest) == 0,
                      "digest is not the positions' (%s)", digest);

        json_t *kept = json_object_get(result, "kept");
        ZM_FUZZ_CHECK(json_is_string(kept), "no \"kept\"");
        uint8_t *bytes = NULL;
        size_t length = 0;
        ZM_FUZZ_CHECK(zm_base64_decode(json_string_value(kept), json_string_length(kept), &bytes,
                                        &length) == 0,
                      "\"kept\" is not base64");
        uint32_t *decoded = NULL;
        uint64_t decoded_k = 0;
        zm_err err;
        ZM_FUZZ_CHECK(zm_cellset_decode(bytes, length, n, &decoded, &decoded_k, &err) == 0,
                      "\"kept\" does not decode: %s", err.reason);
        ZM_FUZZ_CHECK(decoded_k == k && (k == 0 || memcmp(decoded, positions, k * 4) == 0),
                      "\"kept\" names other cells");
        free(decoded);
        free(bytes);
        free(positions);
        free(order);
    }
}

/* Runs the whole command over the text; checks its one line. */
static void check_command(const uint8_t *data, size_t size, const zm_select_command *command,
                          int parsed)
{
    FILE *in = fmemopen((void *)data, size, "r");
    char *output = NULL;
    size_t output_size = 0;
    FILE *out = open_memstream(&output, &output_size);
    if (in == NULL || out == NULL)
        abort();
    int status = zm_select_main(in, out);
    fclose(in);
    fclose(out);
    ZM_FUZZ_CHECK(status == ZM_EXIT_OK || status == ZM_EXIT_REFUSED, "exit status %d: %s", status,
                  output);
    ZM_FUZZ_CHECK(output_size > 0 && output[output_size - 1] == '\n' &&
                      memchr(output, '\n', output_size) == output + output_size - 1,
                  "the result is not one line");
    json_error_t error;
    json_t *result = json_loadb(output, output_size, JSON_REJECT_DUPLICATES, &error);
    ZM_FUZZ_CHECK(json_is_object(result), "the result is not a JSON object: %s", error.text);
    /* A parsed request may still be refused when run (a minimum that does
     * not fit the strata depends on the cells); a refused one never runs. */
    ZM_FUZZ_CHECK(status == ZM_EXIT_REFUSED || parsed == 0, "exit %d, but the request was refused",
                  status);
    if (status == ZM_EXIT_REFUSED) {
        json_t *reason = json_object_get(result, "error");
        ZM_FUZZ_CHECK(json_object_size(result) == 1 && json_is_string(reason) &&
                          json_string_length(reason) > 0,
                      "a refusal without a reason: %s", output);
    } else {
        check_result(result, command);
    }
    json_decref(result);
    free(output);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t length = 0;
    char *text = quoted(data, size, &length);
    json_error_t error;
    json_t *root = json_loadb(text, length, JSON_REJECT_DUPLICATES, &error);
    free(text);

    zm_select_command command;
    memset(&command, 0, sizeof command);
    zm_err err;
    zm_err_clear(&err);
    int rc = root != NULL ? zm_select_command_parse(root, &command, &err) : -EINVAL;
    if (root != NULL && rc != 0) {
        static const int allowed[] = {-EINVAL, -ENOMEM};
        zm_fuzz_check_failure(rc, &err, allowed, 2, "zm_select_command_parse");
    }
    if (rc == 0) {
        const zm_request *r = &command.request;
        ZM_FUZZ_CHECK(r->n <= ZM_N_MAX && r->k >= 1, "n = %llu, k = %llu", (unsigned long long)r->n,
                      (unsigned long long)r->k);
        if (!command.size_only) {
            if (r->method == ZM_METHOD_BLOCKS)
                ZM_FUZZ_CHECK(r->block_size >= 1, "blocks with B = 0");
            if (r->method == ZM_METHOD_STRATIFIED)
                ZM_FUZZ_CHECK(r->codes != NULL || r->n == 0, "stratified without codes");
            if (r->method == ZM_METHOD_SPATIAL)
                ZM_FUZZ_CHECK(r->dims >= 1 && r->dims <= 3 && (r->coords != NULL || r->n == 0),
                              "spatial with %u dimensions", r->dims);
        }
    }
    json_decref(root);

    /* The whole command, unless it would run the kernel over many cells. */
    if (size > 0 && (rc != 0 || command.size_only || command.request.n <= REQUEST_N_MAX))
        check_command(data, size, &command, rc);
    zm_select_command_free(&command);
    return 0;
}
