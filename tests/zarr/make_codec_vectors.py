#!/usr/bin/python3
"""Records what numcodecs' Blosc and Zstd make of arrays tests/test_zarr.c generates the
same way, with the versions of the compression libraries that made those bytes.

    /usr/bin/python3 tests/zarr/make_codec_vectors.py [DIRECTORY]

writes DIRECTORY/numcodecs-N_zstd-Z_blosc-B_lz4-L_zlib-Y.json (DIRECTORY defaults to
tests/zarr/codec-vectors beside this script) and prints its name.  Run it with Debian's
/usr/bin/python3 (python3-numcodecs) on each release the tests should compare bytes on:
compressed bytes are only the same where the libraries' versions are (zstd 1.5.4 and
1.5.7 compress differently), so codec::bytes_as_numcodecs_* compares our bytes with a
recording only where the running libraries are the ones that made it.

The file holds
    {"generator": ..., "written_on": "Debian GNU/Linux 12 (bookworm)",
     "numcodecs": "0.11.0",
     "libraries": {"zstd": "1.5.4", "blosc": "1.21.3", "lz4": "1.9.4", "zlib": "1.2.13"},
     "vectors": [{"codec": "blosc:zstd:1", "kind": "counts_f4", "count": 30000, "seed": 1,
                  "typesize": 4, "size": 13193, "fnv1a64": "e9f90417c8761110"}, ...]}
"size" and "fnv1a64" are the length and FNV-1a 64 of numcodecs' encoding; "libraries" are
the versions of the shared libraries numcodecs has loaded (read from /proc/self/maps and
asked through ctypes: ZSTD_versionString, blosc_get_version_string, LZ4_versionString,
zlibVersion), so they are the ones that made the bytes.  Blosc runs with use_threads off,
as numcodecs' blosc_compress_ctx path with one thread, like zarrmount (with threads
numcodecs' output varies from run to run: c-blosc's threads append blocks in the order
they finish).  Blosc's block is zarrmount's: a whole 1 MiB chunk (ZM_BLOSC_BLOCKSIZE).
"""
import ctypes
import json
import os
import sys

import numcodecs
import numcodecs.blosc
import numcodecs.zstd
import numpy as np
from numcodecs import Blosc, Zstd

numcodecs.blosc.use_threads = False

CASES = [
    # (data kind, count, seed)
    ('counts_f4', 30000, 1),
    ('indices_i4', 30000, 2),
    ('real_f8', 9000, 3),
    ('codes_i1', 5000, 4),
    ('bytes_u1', 70000, 5),
    ('int_i8', 7, 6),
    ('counts_f4', 0, 7),
    ('counts_f4', 1, 8),
]
CODECS = ['blosc:zstd:1', 'blosc:lz4:5', 'blosc:lz4hc:9', 'blosc:blosclz:5', 'blosc:zlib:1',
          'blosc:zstd:0', 'blosc:zstd:9', 'zstd:1', 'zstd:3', 'zstd:22']


def gen_values(kind, count, seed):
    """The values test_zarr.c's gen_values makes (keep the two in step): a 64-bit LCG
    (Knuth's MMIX constants); each kind maps its outputs (the top 31 bits) to values with
    some structure, as real data has."""
    x = seed
    out = []
    total = 0
    for _ in range(count):
        x = (x * 6364136223846793005 + 1442695040888963407) & 0xffffffffffffffff
        v = x >> 33
        if kind == 'counts_f4':
            out.append(float(v % 40) if v % 5 == 0 else 0.0)
        elif kind == 'indices_i4':
            total += v % 7
            out.append(total)
        elif kind == 'real_f8':
            out.append((v % 1000003) / 1024.0 - 400.0)
        elif kind == 'codes_i1':
            out.append(v % 4)
        elif kind == 'bytes_u1':
            out.append(v & 0xff)
        elif kind == 'int_i8':
            out.append(v * 3 - (1 << 31))
        else:
            raise ValueError(kind)
    dtype = {'counts_f4': '<f4', 'indices_i4': '<i4', 'real_f8': '<f8', 'codes_i1': '|i1',
             'bytes_u1': '|u1', 'int_i8': '<i8'}[kind]
    return np.array(out, dtype=dtype)


def fnv1a64(data):
    h = 0xcbf29ce484222325
    for b in data:
        h ^= b
        h = (h * 0x100000001b3) & 0xffffffffffffffff
    return h


def numcodecs_codec(text):
    parts = text.split(':')
    if parts[0] == 'zstd':
        return Zstd(level=int(parts[1]))
    return Blosc(cname=parts[1], clevel=int(parts[2]), shuffle=Blosc.SHUFFLE, blocksize=1 << 20)


def loaded_library(stem):
    """The path of the shared library this process has loaded whose name starts with stem
    (e.g. "libzstd.so"), from /proc/self/maps."""
    with open('/proc/self/maps', encoding='utf-8') as f:
        for line in f:
            path = line.split()[-1]
            if os.path.basename(path).startswith(stem):
                return path
    raise SystemExit(f'numcodecs has not loaded a shared {stem}*: it may carry its own copy, '
                     'so which version made its bytes cannot be said')


def version_of(stem, function):
    fn = getattr(ctypes.CDLL(loaded_library(stem)), function)
    fn.restype = ctypes.c_char_p
    return fn().decode('ascii')


def libraries():
    # Encoding once loads every library (blosc loads lz4 and zlib itself).
    for text in ('zstd:1', 'blosc:lz4:5', 'blosc:zlib:1'):
        numcodecs_codec(text).encode(np.zeros(16, dtype='<f4'))
    return {'zstd': version_of('libzstd.so', 'ZSTD_versionString'),
            'blosc': version_of('libblosc.so', 'blosc_get_version_string'),
            'lz4': version_of('liblz4.so', 'LZ4_versionString'),
            'zlib': version_of('libz.so', 'zlibVersion')}


def release():
    try:
        with open('/etc/os-release', encoding='utf-8') as f:
            for line in f:
                if line.startswith('PRETTY_NAME='):
                    return line.split('=', 1)[1].strip().strip('"')
    except OSError:
        pass
    return 'unknown'


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    directory = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, 'codec-vectors')
    libs = libraries()
    vectors = []
    for kind, count, seed in CASES:
        values = gen_values(kind, count, seed)
        for text in CODECS:
            encoded = bytes(numcodecs_codec(text).encode(values))
            vectors.append({'codec': text, 'kind': kind, 'count': count, 'seed': seed,
                            'typesize': values.dtype.itemsize, 'size': len(encoded),
                            'fnv1a64': '%016x' % fnv1a64(encoded)})
    version = numcodecs.__version__.split('+')[0]
    name = 'numcodecs-%s_zstd-%s_blosc-%s_lz4-%s_zlib-%s.json' % (
        version, libs['zstd'], libs['blosc'], libs['lz4'], libs['zlib'])
    doc = {'generator': 'tests/zarr/make_codec_vectors.py', 'written_on': release(),
           'numcodecs': numcodecs.__version__, 'libraries': libs, 'vectors': vectors}
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, name), 'w', encoding='ascii') as f:
        json.dump(doc, f, indent=1)
        f.write('\n')
    print(name)


if __name__ == '__main__':
    main()
