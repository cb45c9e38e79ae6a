/* Chunk codecs as numcodecs 0.11 writes them: Blosc (c-blosc 1.x through its
 * context calls, so there is no global state to initialise or lock) and Zstd
 * (one-shot ZSTD_compress, whose frames record their content size, which
 * numcodecs before 0.16.2 needs to decode them).
 *
 * Both calls are the ones numcodecs makes, with the same arguments, so for
 * the same library versions the bytes are the same as numcodecs' own. */
#include "zarrmount/zarr.h"

#include <blosc.h>
#include <dlfcn.h>
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>
#include <zstd_errors.h>

#include "zarr/zarr_internal.h"

#define ZM__ZSTD_MIN_LEVEL   1
#define ZM__ZSTD_MAX_LEVEL   22
#define ZM__BLOSC_MAX_LEVEL  9
#define ZM__DEFAULT_LEVEL    1 /* numcodecs' Zstd default, and ours for blosc-zstd */
#define ZM__BLOSC_LEVEL      5 /* numcodecs' Blosc default, what anndata writes with lz4 */
#define ZM__CODEC_SYNTAX     "none, zstd[:LEVEL] or blosc[:COMPRESSOR[:LEVEL[:SHUFFLE]]]"
#define ZM__SHUFFLE_NAMES_TEXT "shuffle, bitshuffle or noshuffle"

/* blosc's shuffles by name, as numcodecs names them (Blosc.SHUFFLE,
 * BITSHUFFLE, NOSHUFFLE): the index is blosc's number. */
static const char *const zm__shuffle_names[] = {"noshuffle", "shuffle", "bitshuffle"};
#define ZM__BLOSC_NAMES_TEXT "zstd, lz4, lz4hc, blosclz or zlib"

static const char *const zm__blosc_names[] = {"zstd", "lz4", "lz4hc", "blosclz", "zlib"};

static int zm__blosc_name_known(const char *name)
{
    for (size_t i = 0; i < sizeof zm__blosc_names / sizeof zm__blosc_names[0]; i++)
        if (strcmp(name, zm__blosc_names[i]) == 0)
            return 1;
    return 0;
}

/* blosc as "blosc" names it: zstd at level 1, byte shuffle (numcodecs'
 * Blosc shuffle), our fixed block size. */
static zm_codec zm__blosc_named(void)
{
    zm_codec codec;
    memset(&codec, 0, sizeof codec);
    codec.kind = ZM_CODEC_BLOSC;
    strcpy(codec.blosc_cname, "zstd");
    codec.level = ZM__DEFAULT_LEVEL;
    codec.shuffle = BLOSC_SHUFFLE;
    codec.blocksize = ZM_BLOSC_BLOCKSIZE;
    return codec;
}

/* The default, chosen by issue 25's measures (docs/performance.md, "The
 * default codec"): blosc's lz4 at numcodecs' level 5 with bit shuffle. Of
 * the codecs measured, the fastest walk of a store (the encoder is on its
 * critical path), the one 1.5x faster than anndata's own conversion in most
 * runs (which writes blosc-lz4 with byte shuffle, 12% larger), a view reads
 * as fast, and its bytes were the same on Debian 12 and 13; zstd's stores
 * are smaller. */
zm_codec zm_codec_default(void)
{
    zm_codec codec = zm__blosc_named();
    strcpy(codec.blosc_cname, "lz4");
    codec.level = ZM__BLOSC_LEVEL;
    codec.shuffle = BLOSC_BITSHUFFLE;
    return codec;
}

/* Reads a level: decimal digits only (no sign, no spaces), within [low,
 * high]. The reason names the whole text and the part that was wrong. */
static int zm__parse_level(const char *text, const char *part, size_t part_length, const char *what,
                           int low, int high, int *level, zm_err *err)
{
    int value = 0;
    if (part_length == 0)
        return zm_err_set(err, -EINVAL, "codec \"%.100s\": %s level is empty (use %d to %d)", text,
                          what, low, high);
    for (size_t i = 0; i < part_length; i++) {
        if (part[i] < '0' || part[i] > '9')
            return zm_err_set(
                err, -EINVAL, "codec \"%.100s\": %s level %.*s is not a number (use %d to %d)",
                text, what, (int)(part_length > 32 ? 32 : part_length), part, low, high);
        /* Stop growing once past any range we accept, so long digit runs
         * cannot overflow; the range check below refuses them. */
        if (value <= high)
            value = value * 10 + (part[i] - '0');
    }
    if (value < low || value > high)
        return zm_err_set(err, -EINVAL,
                          "codec \"%.100s\": %s level %.*s is out of range (use %d to %d)", text,
                          what, (int)(part_length > 32 ? 32 : part_length), part, low, high);
    *level = value;
    return 0;
}

int zm_codec_parse(const char *text, zm_codec *codec, zm_err *err)
{
    if (text == NULL)
        return zm_err_set(err, -EINVAL, "codec: none given (use " ZM__CODEC_SYNTAX ")");

    /* Split at the colons into at most four parts (blosc's shuffle the
     * fourth); a fifth is an error. */
    const char *parts[4];
    size_t lengths[4];
    size_t count = 0;
    const char *start = text;
    for (;;) {
        const char *colon = strchr(start, ':');
        size_t n = colon ? (size_t)(colon - start) : strlen(start);
        if (count == 4)
            return zm_err_set(err, -EINVAL,
                              "codec \"%.100s\": too many parts (use " ZM__CODEC_SYNTAX ")", text);
        parts[count] = start;
        lengths[count] = n;
        count++;
        if (colon == NULL)
            break;
        start = colon + 1;
    }

    zm_codec result;
    memset(&result, 0, sizeof result);
    if (lengths[0] == 4 && memcmp(parts[0], "none", 4) == 0) {
        if (count > 1)
            return zm_err_set(err, -EINVAL, "codec \"%.100s\": none takes no level or compressor",
                              text);
        result.kind = ZM_CODEC_NONE;
    } else if (lengths[0] == 4 && memcmp(parts[0], "zstd", 4) == 0) {
        if (count > 2)
            return zm_err_set(err, -EINVAL,
                              "codec \"%.100s\": zstd takes only a level (zstd:LEVEL, 1 to 22)",
                              text);
        result.kind = ZM_CODEC_ZSTD;
        result.level = ZM__DEFAULT_LEVEL;
        if (count == 2) {
            int rc = zm__parse_level(text, parts[1], lengths[1], "zstd", ZM__ZSTD_MIN_LEVEL,
                                     ZM__ZSTD_MAX_LEVEL, &result.level, err);
            if (rc != 0)
                return rc;
        }
    } else if (lengths[0] == 5 && memcmp(parts[0], "blosc", 5) == 0) {
        result = zm__blosc_named(); /* the shuffle numcodecs' Blosc takes unsaid */
        if (count >= 2) {
            char name[sizeof result.blosc_cname] = "";
            if (lengths[1] < sizeof name) {
                memcpy(name, parts[1], lengths[1]);
                name[lengths[1]] = '\0';
            }
            if (!zm__blosc_name_known(name))
                return zm_err_set(
                    err, -EINVAL,
                    "codec \"%.100s\": unknown blosc compressor %.*s (use " ZM__BLOSC_NAMES_TEXT
                    ")",
                    text, (int)(lengths[1] > 32 ? 32 : lengths[1]), parts[1]);
            strcpy(result.blosc_cname, name);
            /* blosc:zstd is at our level 1; the other compressors start
             * from numcodecs' Blosc default level. */
            result.level = strcmp(name, "zstd") == 0 ? ZM__DEFAULT_LEVEL : ZM__BLOSC_LEVEL;
        }
        if (count >= 3) {
            int rc = zm__parse_level(text, parts[2], lengths[2], "blosc", 0, ZM__BLOSC_MAX_LEVEL,
                                     &result.level, err);
            if (rc != 0)
                return rc;
        }
        if (count == 4) {
            int found = -1;
            for (int i = 0; i < 3; i++)
                if (lengths[3] == strlen(zm__shuffle_names[i]) &&
                    memcmp(parts[3], zm__shuffle_names[i], lengths[3]) == 0)
                    found = i;
            if (found < 0)
                return zm_err_set(err, -EINVAL,
                                  "codec \"%.100s\": unknown blosc shuffle %.*s (use "
                                  ZM__SHUFFLE_NAMES_TEXT ")",
                                  text, (int)(lengths[3] > 32 ? 32 : lengths[3]), parts[3]);
            result.shuffle = found;
        }
    } else {
        return zm_err_set(err, -EINVAL,
                          "codec \"%.100s\": unknown codec %.*s (use " ZM__CODEC_SYNTAX ")", text,
                          (int)(lengths[0] > 32 ? 32 : lengths[0]), parts[0]);
    }
    *codec = result;
    return 0;
}

void zm_codec_format(const zm_codec *codec, char *out, size_t size)
{
    if (size == 0)
        return;
    switch (codec->kind) {
    case ZM_CODEC_NONE:
        snprintf(out, size, "none");
        break;
    case ZM_CODEC_ZSTD:
        snprintf(out, size, "zstd:%d", codec->level);
        break;
    case ZM_CODEC_BLOSC:
        /* Byte shuffle (blosc's, when none is named) is left unsaid, so
         * that the text, and the disk cache's keys and the file times made
         * from it, stay what they were before a shuffle could be chosen. */
        if (codec->shuffle == BLOSC_SHUFFLE)
            snprintf(out, size, "blosc:%.16s:%d", codec->blosc_cname, codec->level);
        else if (codec->shuffle >= BLOSC_NOSHUFFLE && codec->shuffle <= BLOSC_BITSHUFFLE)
            snprintf(out, size, "blosc:%.16s:%d:%s", codec->blosc_cname, codec->level,
                     zm__shuffle_names[codec->shuffle]);
        else
            snprintf(out, size, "blosc:%.16s:%d (shuffle %d)", codec->blosc_cname, codec->level,
                     codec->shuffle);
        break;
    default:
        snprintf(out, size, "unknown");
        break;
    }
}

/* Sets key to a new value in object, stealing value; 0 or -1 (which frees
 * nothing further: json_object_set_new drops value on failure). */
static int zm__set(json_t *object, const char *key, json_t *value)
{
    return value == NULL ? -1 : json_object_set_new(object, key, value);
}

json_t *zm_codec_config(const zm_codec *codec)
{
    if (codec == NULL || codec->kind == ZM_CODEC_NONE)
        return NULL;
    json_t *config = json_object();
    if (config == NULL)
        return NULL;
    int failed = 0;
    if (codec->kind == ZM_CODEC_BLOSC) {
        failed |= zm__set(config, "id", json_string("blosc"));
        failed |= zm__set(config, "cname", json_string(codec->blosc_cname));
        failed |= zm__set(config, "clevel", json_integer(codec->level));
        failed |= zm__set(config, "shuffle", json_integer(codec->shuffle));
        failed |= zm__set(config, "blocksize", json_integer(codec->blocksize));
    } else {
        failed |= zm__set(config, "id", json_string("zstd"));
        failed |= zm__set(config, "level", json_integer(codec->level));
    }
    if (failed) {
        json_decref(config);
        return NULL;
    }
    return config;
}

/* Refuses a codec no text could have produced, before any library sees it. */
static int zm__codec_check(const zm_codec *codec, zm_err *err)
{
    switch (codec->kind) {
    case ZM_CODEC_NONE:
        return 0;
    case ZM_CODEC_ZSTD:
        if (codec->level < ZM__ZSTD_MIN_LEVEL || codec->level > ZM__ZSTD_MAX_LEVEL)
            return zm_err_set(err, -EINVAL, "codec zstd: level %d is out of range (use 1 to 22)",
                              codec->level);
        return 0;
    case ZM_CODEC_BLOSC:
        if (memchr(codec->blosc_cname, '\0', sizeof codec->blosc_cname) == NULL ||
            !zm__blosc_name_known(codec->blosc_cname))
            return zm_err_set(err, -EINVAL,
                              "codec blosc: unknown compressor %.16s (use " ZM__BLOSC_NAMES_TEXT
                              ")",
                              codec->blosc_cname);
        if (codec->level < 0 || codec->level > ZM__BLOSC_MAX_LEVEL)
            return zm_err_set(err, -EINVAL, "codec blosc: level %d is out of range (use 0 to 9)",
                              codec->level);
        if (codec->shuffle < BLOSC_NOSHUFFLE || codec->shuffle > BLOSC_BITSHUFFLE)
            return zm_err_set(err, -EINVAL,
                              "codec blosc: shuffle %d is not 0 (none), 1 (byte) or 2 (bit)",
                              codec->shuffle);
        return 0;
    }
    return zm_err_set(err, -EINVAL, "codec: unknown kind %d", (int)codec->kind);
}

/* malloc that never returns NULL for a request of 0 bytes, so NULL always
 * means out of memory. */
static uint8_t *zm__alloc(size_t size)
{
    return malloc(size ? size : 1);
}

/* Where a chunk is compressed: a buffer of the worst case's size, kept by
 * the thread for its next chunk, and the output then copied into a buffer of
 * its own exact size. Compressing into a fresh worst-case buffer and
 * shrinking it with realloc left a hole of the unused tail (about two thirds
 * of a 1 MiB chunk) between the cache's long-lived entries, too small for the
 * next worst case: at 10 million cells the daemon's heap held about 200 MiB
 * more than its caches and cells. A thread keeps up to ZM__SCRATCH_KEEP (the
 * worst case of chunks four times the default 1 MiB), so that the threads
 * that compress (the pool's and FUSE's, a few tens at most) keep little
 * beside the caches whatever chunk_size is; a larger one is allocated for
 * that chunk alone. The copy is of the compressed bytes only. */
#define ZM__SCRATCH_KEEP ((size_t)4 << 20)

struct zm__scratch {
    uint8_t *bytes;
    size_t capacity;
};

static pthread_key_t zm__scratch_key;
static pthread_once_t zm__scratch_once = PTHREAD_ONCE_INIT;
static int zm__scratch_ready;

static void zm__scratch_free(void *p)
{
    struct zm__scratch *s = p;
    free(s->bytes);
    free(s);
}

static void zm__scratch_init(void)
{
    zm__scratch_ready = pthread_key_create(&zm__scratch_key, zm__scratch_free) == 0;
}

/* A buffer of at least CAPACITY bytes for this thread to compress into, or
 * NULL when out of memory; *owned says it is the caller's to free. */
static uint8_t *zm__scratch_get(size_t capacity, int *owned)
{
    pthread_once(&zm__scratch_once, zm__scratch_init);
    struct zm__scratch *s = NULL;
    if (capacity <= ZM__SCRATCH_KEEP && zm__scratch_ready) {
        s = pthread_getspecific(zm__scratch_key);
        if (s == NULL && (s = calloc(1, sizeof *s)) != NULL &&
            pthread_setspecific(zm__scratch_key, s) != 0) {
            free(s);
            s = NULL;
        }
    }
    *owned = s == NULL; /* past the keep, or no kept buffer to be had */
    if (s == NULL)
        return zm__alloc(capacity);
    if (s->capacity < capacity) {
        /* Grown to the largest chunk seen, never past the keep limit. */
        free(s->bytes);
        s->bytes = zm__alloc(capacity);
        s->capacity = s->bytes ? capacity : 0;
    }
    return s->bytes;
}

/* The first SIZE bytes of a compression buffer in a buffer of their own;
 * frees the compression buffer when it was the caller's. */
static int zm__scratch_output(uint8_t *scratch, int owned, size_t size, uint8_t **out,
                              zm_err *err)
{
    uint8_t *copy = zm__alloc(size);
    if (copy != NULL && size > 0)
        memcpy(copy, scratch, size);
    if (owned)
        free(scratch);
    if (copy == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory for a %zu-byte compressed chunk", size);
    *out = copy;
    return 0;
}

static int zm__encode_blosc(const zm_codec *codec, size_t typesize, const void *in, size_t size,
                            uint8_t **out, size_t *out_size, zm_err *err)
{
    if (size > (size_t)BLOSC_MAX_BUFFERSIZE)
        return zm_err_set(err, -EINVAL,
                          "blosc: a chunk of %zu bytes is larger than blosc's limit of %d bytes",
                          size, BLOSC_MAX_BUFFERSIZE);
    /* numcodecs gives blosc room for the input plus its header, in which
     * compression always succeeds (blosc stores the bytes as they are when
     * they do not shrink). */
    size_t capacity = size + BLOSC_MAX_OVERHEAD;
    int owned;
    uint8_t *buffer = zm__scratch_get(capacity, &owned);
    if (buffer == NULL)
        return zm_err_set(err, -ENOMEM, "blosc: out of memory for a %zu-byte chunk", size);
    /* c-blosc treats typesize 0 or past 255 as 1; say so rather than rely on it. */
    size_t blosc_typesize = typesize == 0 || typesize > BLOSC_MAX_TYPESIZE ? 1 : typesize;
    int n = blosc_compress_ctx(codec->level, codec->shuffle, blosc_typesize, size, in, buffer,
                               capacity, codec->blosc_cname, (size_t)codec->blocksize, 1);
    if (n <= 0) {
        if (owned)
            free(buffer);
        return zm_err_set(err, -EIO,
                          "blosc-%s: compression failed (blosc_compress_ctx returned %d)",
                          codec->blosc_cname, n);
    }
    int rc = zm__scratch_output(buffer, owned, (size_t)n, out, err);
    if (rc == 0)
        *out_size = (size_t)n;
    return rc;
}

static int zm__encode_zstd(const zm_codec *codec, const void *in, size_t size, uint8_t **out,
                           size_t *out_size, zm_err *err)
{
    size_t capacity = ZSTD_compressBound(size);
    if (ZSTD_isError(capacity))
        return zm_err_set(err, -EINVAL, "zstd: a chunk of %zu bytes is too large", size);
    int owned;
    uint8_t *buffer = zm__scratch_get(capacity, &owned);
    if (buffer == NULL)
        return zm_err_set(err, -ENOMEM, "zstd: out of memory for a %zu-byte chunk", size);
    size_t n = ZSTD_compress(buffer, capacity, in, size, codec->level);
    if (ZSTD_isError(n)) {
        if (owned)
            free(buffer);
        if (ZSTD_getErrorCode(n) == ZSTD_error_memory_allocation)
            return zm_err_set(err, -ENOMEM, "zstd: out of memory compressing a %zu-byte chunk",
                              size);
        return zm_err_set(err, -EIO, "zstd: compression failed (%s)", ZSTD_getErrorName(n));
    }
    int rc = zm__scratch_output(buffer, owned, n, out, err);
    if (rc == 0)
        *out_size = n;
    return rc;
}

static int zm__copy(const void *in, size_t size, uint8_t **out, size_t *out_size, zm_err *err)
{
    uint8_t *buffer = zm__alloc(size);
    if (buffer == NULL)
        return zm_err_set(err, -ENOMEM, "out of memory for a %zu-byte chunk", size);
    if (size > 0)
        memcpy(buffer, in, size);
    *out = buffer;
    *out_size = size;
    return 0;
}

int zm_codec_encode(const zm_codec *codec, size_t typesize, const void *in, size_t size,
                    uint8_t **out, size_t *out_size, zm_err *err)
{
    int rc = zm__codec_check(codec, err);
    if (rc != 0)
        return rc;
    switch (codec->kind) {
    case ZM_CODEC_BLOSC:
        return zm__encode_blosc(codec, typesize, in, size, out, out_size, err);
    case ZM_CODEC_ZSTD:
        return zm__encode_zstd(codec, in, size, out, out_size, err);
    default:
        return zm__copy(in, size, out, out_size, err);
    }
}

static int zm__decode_blosc(const uint8_t *in, size_t size, uint8_t **out, size_t *out_size,
                            zm_err *err)
{
    if (size < BLOSC_MIN_HEADER_LENGTH)
        return zm_err_set(err, -EIO, "blosc: chunk truncated (%zu bytes, the header alone is %d)",
                          size, BLOSC_MIN_HEADER_LENGTH);
    /* c-blosc's decompressor takes no input size and trusts the header;
     * blosc_cbuffer_validate checks that header against the bytes we have. */
    size_t nbytes = 0;
    if (blosc_cbuffer_validate(in, size, &nbytes) != 0)
        return zm_err_set(err, -EIO, "blosc: chunk corrupt (its header does not fit its %zu bytes)",
                          size);
    uint8_t *buffer = zm__alloc(nbytes);
    if (buffer == NULL)
        return zm_err_set(err, -ENOMEM, "blosc: out of memory for a %zu-byte chunk", nbytes);
    int n = nbytes == 0 ? 0 : blosc_decompress_ctx(in, buffer, nbytes, 1);
    if (n < 0 || (size_t)n != nbytes) {
        free(buffer);
        return zm_err_set(err, -EIO,
                          "blosc: chunk corrupt (blosc_decompress_ctx returned %d for %zu bytes)",
                          n, nbytes);
    }
    *out = buffer;
    *out_size = nbytes;
    return 0;
}

static int zm__decode_zstd(const uint8_t *in, size_t size, uint8_t **out, size_t *out_size,
                           zm_err *err)
{
    /* We write exactly one frame with its content size; anything else is
     * not ours. */
    unsigned long long content = ZSTD_getFrameContentSize(in, size);
    if (content == ZSTD_CONTENTSIZE_ERROR)
        return zm_err_set(err, -EIO, "zstd: chunk corrupt (no zstd frame header in %zu bytes)",
                          size);
    if (content == ZSTD_CONTENTSIZE_UNKNOWN)
        return zm_err_set(err, -EIO, "zstd: chunk's frame does not record its content size");
    size_t frame = ZSTD_findFrameCompressedSize(in, size);
    if (ZSTD_isError(frame))
        return zm_err_set(err, -EIO, "zstd: chunk corrupt (%s)", ZSTD_getErrorName(frame));
    if (frame != size)
        return zm_err_set(err, -EIO, "zstd: chunk has %zu bytes after its frame of %zu",
                          size - frame, frame);
    if (content > SIZE_MAX)
        return zm_err_set(err, -EIO, "zstd: chunk claims %llu bytes", content);
    uint8_t *buffer = zm__alloc((size_t)content);
    if (buffer == NULL)
        return zm_err_set(err, -ENOMEM, "zstd: out of memory for a %llu-byte chunk", content);
    size_t n = ZSTD_decompress(buffer, (size_t)content, in, size);
    if (ZSTD_isError(n) || n != content) {
        free(buffer);
        return zm_err_set(err, -EIO, "zstd: chunk corrupt (%s)",
                          ZSTD_isError(n) ? ZSTD_getErrorName(n) : "content size mismatch");
    }
    *out = buffer;
    *out_size = n;
    return 0;
}

int zm_codec_decode(const zm_codec *codec, const void *in, size_t size, uint8_t **out,
                    size_t *out_size, zm_err *err)
{
    int rc = zm__codec_check(codec, err);
    if (rc != 0)
        return rc;
    switch (codec->kind) {
    case ZM_CODEC_BLOSC:
        return zm__decode_blosc(in, size, out, out_size, err);
    case ZM_CODEC_ZSTD:
        return zm__decode_zstd(in, size, out, out_size, err);
    default:
        return zm__copy(in, size, out, out_size, err);
    }
}

/* ---- Codec libraries ------------------------------------------------------------- */

/* The libraries, in the order zm_codec_libraries lists them (by name). */
enum { ZM__LIB_BLOSC, ZM__LIB_BLOSCLZ, ZM__LIB_LZ4, ZM__LIB_ZLIB, ZM__LIB_ZSTD, ZM__LIB_COUNT };

#define ZM__VERSION_MAX 48

static const char *const zm__library_names[ZM__LIB_COUNT] = {"blosc", "blosclz", "lz4", "zlib",
                                                             "zstd"};
/* The name blosc_get_complib_info knows each of blosc's compressors by. */
static const char *const zm__blosc_compressor[ZM__LIB_COUNT] = {NULL, "blosclz", "lz4", "zlib",
                                                                "zstd"};

static struct {
    pthread_once_t once;
    pthread_mutex_t lock;
    char real[ZM__LIB_COUNT][ZM__VERSION_MAX];    /* "": not in this build */
    char pretend[ZM__LIB_COUNT][ZM__VERSION_MAX]; /* "": the real one */
    zm_codec_library list[ZM__LIB_COUNT];
    size_t count;
} zm__libraries = {.once = PTHREAD_ONCE_INIT, .lock = PTHREAD_MUTEX_INITIALIZER};

/* Copies a library's version text: printable ASCII without spaces or '+'
 * (the build text joins names and versions with '-' and '+'; JSON holds
 * only UTF-8), at most ZM__VERSION_MAX - 1 bytes; "unknown" for none. */
static void zm__version_copy(char out[ZM__VERSION_MAX], const char *text)
{
    if (text == NULL || text[0] == '\0')
        text = "unknown";
    size_t n = 0;
    for (; text[n] != '\0' && n < ZM__VERSION_MAX - 1; n++)
        out[n] = text[n] > ' ' && text[n] < 0x7f && text[n] != '+' ? text[n] : '_';
    out[n] = '\0';
}

typedef const char *(*zm__version_function)(void);

/* A library's version function as the process's global scope binds it
 * (NULL if no loaded object defines it): the scope in which the dynamic
 * linker bound blosc's calls to a shared library blosc is linked with, so
 * this is the copy blosc runs. A blosc built with a copy of its own inside,
 * its names hidden, is seen only where no shared copy is loaded (nothing is
 * found, and blosc's own word stands); with both, the shared one would be
 * named. Debian's blosc has no copy inside (its "+ds" sources drop them)
 * and links liblz4, zlib and libzstd. */
static zm__version_function zm__loaded(const char *symbol)
{
    void *address = dlsym(RTLD_DEFAULT, symbol);
    zm__version_function function = NULL;
    if (address != NULL)
        memcpy(&function, &address, sizeof function);
    return function;
}

static void zm__libraries_find(void)
{
    zm__version_copy(zm__libraries.real[ZM__LIB_BLOSC], blosc_get_version_string());
    for (int i = ZM__LIB_BLOSCLZ; i < ZM__LIB_COUNT; i++) {
        /* blosc's own word first: whether it has the compressor at all,
         * and the version it was built with (blosclz is inside blosc, so
         * that is the one it runs). */
        char *complib = NULL, *version = NULL;
        int code = blosc_get_complib_info(zm__blosc_compressor[i], &complib, &version);
        if (code >= 0)
            zm__version_copy(zm__libraries.real[i], version);
        free(complib);
        free(version);
        /* Then, for a shared library, the version running, which is not the
         * one blosc was built with after an update of the library alone
         * (Debian 12's blosc was built with zstd 1.5.2 and runs 1.5.4). The
         * zstd codec calls libzstd itself: its version is asked of it,
         * whether blosc has zstd or not. */
        const char *running = NULL;
        if (i == ZM__LIB_ZSTD) {
            running = ZSTD_versionString();
        } else if (code >= 0 && i == ZM__LIB_LZ4) {
            zm__version_function function = zm__loaded("LZ4_versionString");
            running = function ? function() : NULL;
        } else if (code >= 0 && i == ZM__LIB_ZLIB) {
            zm__version_function function = zm__loaded("zlibVersion");
            running = function ? function() : NULL;
        }
        if (running != NULL)
            zm__version_copy(zm__libraries.real[i], running);
    }
}

/* Fills the list from the real versions and any pretended ones (under lock). */
static void zm__libraries_list(void)
{
    zm__libraries.count = 0;
    for (int i = 0; i < ZM__LIB_COUNT; i++) {
        /* A library this build lacks stays out whatever a test pretends. */
        if (zm__libraries.real[i][0] == '\0')
            continue;
        const char *version =
            zm__libraries.pretend[i][0] ? zm__libraries.pretend[i] : zm__libraries.real[i];
        zm__libraries.list[zm__libraries.count].name = zm__library_names[i];
        zm__libraries.list[zm__libraries.count].version = version;
        zm__libraries.count++;
    }
}

static void zm__libraries_init(void)
{
    zm__libraries_find();
    zm__libraries_list();
}

const zm_codec_library *zm_codec_libraries(size_t *count)
{
    pthread_once(&zm__libraries.once, zm__libraries_init);
    pthread_mutex_lock(&zm__libraries.lock);
    *count = zm__libraries.count;
    pthread_mutex_unlock(&zm__libraries.lock);
    return zm__libraries.list;
}

/* One library's version as the list has it ("absent" for a compressor this
 * blosc lacks, whose encoding fails anyway). */
static const char *zm__library_version(int library)
{
    if (zm__libraries.real[library][0] == '\0')
        return "absent";
    return zm__libraries.pretend[library][0] ? zm__libraries.pretend[library]
                                             : zm__libraries.real[library];
}

void zm_codec_build(const zm_codec *codec, char *out, size_t size)
{
    if (size == 0)
        return;
    out[0] = '\0';
    pthread_once(&zm__libraries.once, zm__libraries_init);
    pthread_mutex_lock(&zm__libraries.lock);
    if (codec->kind == ZM_CODEC_ZSTD) {
        snprintf(out, size, "zstd-%s", zm__library_version(ZM__LIB_ZSTD));
    } else if (codec->kind == ZM_CODEC_BLOSC) {
        int compressor = -1;
        for (int i = ZM__LIB_BLOSCLZ; i < ZM__LIB_COUNT; i++)
            if (strcmp(codec->blosc_cname, zm__blosc_compressor[i]) == 0)
                compressor = i;
        /* LZ4HC is liblz4's too. */
        if (strcmp(codec->blosc_cname, "lz4hc") == 0)
            compressor = ZM__LIB_LZ4;
        if (compressor < 0)
            snprintf(out, size, "blosc-%s+%.16s-unknown", zm__library_version(ZM__LIB_BLOSC),
                     codec->blosc_cname);
        else
            snprintf(out, size, "blosc-%s+%s-%s", zm__library_version(ZM__LIB_BLOSC),
                     zm__library_names[compressor], zm__library_version(compressor));
    }
    pthread_mutex_unlock(&zm__libraries.lock);
}

int zm__codec_library_pretend(const char *name, const char *version)
{
    pthread_once(&zm__libraries.once, zm__libraries_init);
    for (int i = 0; i < ZM__LIB_COUNT; i++) {
        if (strcmp(name, zm__library_names[i]) != 0)
            continue;
        pthread_mutex_lock(&zm__libraries.lock);
        if (version == NULL)
            zm__libraries.pretend[i][0] = '\0';
        else
            zm__version_copy(zm__libraries.pretend[i], version);
        zm__libraries_list();
        pthread_mutex_unlock(&zm__libraries.lock);
        return 0;
    }
    return -ENOENT;
}
