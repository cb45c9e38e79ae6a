#!/usr/bin/python3
"""Dumps JSON documents the way zarr-python 2.13 writes them, for
tests/test_zarr.c to compare zm_zarr_dump against.

    /usr/bin/python3 tests/zarr/dump_documents.py FILE

FILE holds one compact JSON document per line; each comes out on stdout as
zarr 2's zarr.util.json_dumps writes it (indent 4, sorted keys, ASCII
escapes), followed by a NUL byte. A line that is a JSON array of binary64
bit patterns (hex strings) prefixed by "floats " instead prints repr() of
each, one per NUL-terminated record, to check the float formatting directly.

zarr-python 3 has no zarr.util.json_dumps (and writes v2 metadata its own
way), so the dump is tests/zarr/zarr2compat.py's reproduction of zarr 2's;
where zarr-python 2 is installed, every document is dumped by both and a
difference is an error (exit 1), so the reproduction is checked there.
"""
import json
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zarr2compat  # noqa: E402

try:
    from zarr.util import json_dumps as zarr2_json_dumps  # zarr-python 2 only
except ImportError:
    zarr2_json_dumps = None


def main():
    out = sys.stdout.buffer
    with open(sys.argv[1], encoding='ascii') as f:
        for number, line in enumerate(f, 1):
            line = line.rstrip('\n')
            if line.startswith('floats '):
                for bits in json.loads(line[len('floats '):]):
                    x = struct.unpack('<d', struct.pack('<Q', int(bits, 16)))[0]
                    out.write(json.dumps(x).encode('ascii') + b'\0')
                continue
            document = json.loads(line)
            text = zarr2compat.json_dumps(document)
            if zarr2_json_dumps is not None and zarr2_json_dumps(document) != text:
                sys.stderr.write(f'line {number}: zarr2compat.json_dumps differs from '
                                 f'zarr.util.json_dumps for {line[:200]}\n')
                return 1
            out.write(text + b'\0')
    return 0


if __name__ == '__main__':
    sys.exit(main())
