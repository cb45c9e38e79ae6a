/* The options' defaults and the one parser of sizes (zarrmount/config.h). */
#include "zarrmount/config.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

unsigned zm_config_cores(void)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    return cores > 1 ? (unsigned)cores : 1;
}

uint64_t zm_config_memory(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
}

void zm_config_unset(zm_config *config)
{
    *config = (zm_config){.ahead_idle_seconds = -1};
}

void zm_config_resolve(const zm_config *given, zm_config *resolved)
{
    zm_config c = *given;
    if (c.chunk_bytes == 0)
        c.chunk_bytes = ZM_DEFAULT_CHUNK_BYTES;
    if (c.cache_bytes == 0)
        c.cache_bytes = ZM_DEFAULT_CACHE_BYTES;
    if (c.cache_max == 0)
        c.cache_max = ZM_DEFAULT_DISK_CACHE_MAX;
    if (c.threads == 0)
        c.threads = zm_config_cores();
    if (c.ahead_idle_seconds < 0)
        c.ahead_idle_seconds = ZM_DEFAULT_AHEAD_IDLE_SECONDS;
    *resolved = c;
}

void zm_config_defaults(zm_config *config)
{
    zm_config_unset(config);
    zm_config_resolve(config, config);
}

uint64_t zm_config_push_window(uint64_t cache_bytes)
{
    uint64_t window = cache_bytes / 8;
    return window < ZM_PUSH_WINDOW_MAX ? window : ZM_PUSH_WINDOW_MAX;
}

int zm_parse_size(const char *option, const char *text, uint64_t *bytes, zm_err *err)
{
    static const char usage[] = "bytes, or a number with K, M, G or T (powers of 1024): 256M, 1G";
    if (!isdigit((unsigned char)text[0]))
        return zm_err_set(err, -EINVAL, "%s=%s: not a size (%s)", option, text, usage);
    errno = 0;
    char *end;
    unsigned long long value = strtoull(text, &end, 10);
    if (errno == ERANGE)
        return zm_err_set(err, -EINVAL, "%s=%s: too large", option, text);
    unsigned shift = 0;
    switch (toupper((unsigned char)*end)) {
    case 'K':
        shift = 10;
        break;
    case 'M':
        shift = 20;
        break;
    case 'G':
        shift = 30;
        break;
    case 'T':
        shift = 40;
        break;
    default:
        break;
    }
    if (shift != 0) {
        end++;
        if (strcmp(end, "iB") == 0)
            end += 2;
    }
    if (*end != '\0')
        return zm_err_set(err, -EINVAL, "%s=%s: not a size (%s)", option, text, usage);
    if (value == 0)
        return zm_err_set(err, -EINVAL, "%s=%s: must be more than 0", option, text);
    if (value > (UINT64_MAX >> shift))
        return zm_err_set(err, -EINVAL, "%s=%s: too large", option, text);
    *bytes = (uint64_t)value << shift;
    return 0;
}

int zm_parse_threads(const char *option, const char *text, unsigned *threads, zm_err *err)
{
    char *end;
    errno = 0;
    unsigned long value = isdigit((unsigned char)text[0]) ? strtoul(text, &end, 10) : 0;
    if (!isdigit((unsigned char)text[0]) || *end != '\0' || errno == ERANGE || value == 0 ||
        value > ZM_MAX_THREADS)
        return zm_err_set(err, -EINVAL, "%s=%s: not a number of threads from 1 to %u", option,
                          text, ZM_MAX_THREADS);
    *threads = (unsigned)value;
    return 0;
}
