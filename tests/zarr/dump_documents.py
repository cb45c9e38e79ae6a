#!/usr/bin/python3
"""Dumps JSON documents the way zarr-python 2.13 writes them, for
tests/test_zarr.c to compare zm_zarr_dump against.

    /usr/bin/python3 tests/zarr/dump_documents.py FILE

FILE holds one compact JSON document per line; each comes out on stdout as
zarr.util.json_dumps writes it (indent 4, sorted keys, ASCII escapes),
followed by a NUL byte. A line that is a JSON array of binary64 bit patterns
(hex strings) prefixed by "floats " instead prints repr() of each, one per
NUL-terminated record, to check the float formatting directly.
"""
import json
import struct
import sys

from zarr.util import json_dumps


def main():
    out = sys.stdout.buffer
    with open(sys.argv[1], encoding='ascii') as f:
        for line in f:
            line = line.rstrip('\n')
            if line.startswith('floats '):
                for bits in json.loads(line[len('floats '):]):
                    x = struct.unpack('<d', struct.pack('<Q', int(bits, 16)))[0]
                    out.write(json.dumps(x).encode('ascii') + b'\0')
                continue
            out.write(json_dumps(json.loads(line)) + b'\0')


if __name__ == '__main__':
    main()
