#!/usr/bin/python3
"""Writes the seed inputs of the libFuzzer targets into tests/fuzz/corpus/<target>/:
inputs that reach deep (valid view paths of every method, shares, select
requests, cell sets, and real chunks HDF5 wrote, from
tests/data/filters/vectors.bin.gz), each named by the SHA-1 of its bytes as
libFuzzer names its own. The committed corpus is these seeds plus what
`tests/fuzz/run_fuzz.py --merge tests/fuzz/corpus` added (minimised
inputs that found new coverage) and the inputs of bugs found (regressions).
Run from the repository root: /usr/bin/python3 tests/fuzz/make_corpus.py
(adds files, removes none).
"""
import gzip
import hashlib
import io
import json
import os
import struct
import warnings
import zipfile
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
CORPUS = os.path.join(HERE, "corpus")
SEED_MAX = 8192  # bytes: the committed corpus stays small
# ../shared/data (the real stores some seeds are cut from), as tests/meson.build finds it.
SHARED = os.environ.get("ZM_SHARED_DATA", os.path.join(ROOT, "..", "shared", "data"))


def write(target, data):
    if isinstance(data, str):
        data = data.encode("utf-8")
    if len(data) > SEED_MAX:
        return
    directory = os.path.join(CORPUS, target)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, hashlib.sha1(data).hexdigest()), "wb") as f:
        f.write(data)


def paths():
    # The fixture fuzz_path opens: h5ad/full-csr.h5ad (60 cells).
    for p in [
        "", ".zarrmount", ".zarrmount/info.json", ".zarrmount/stats.json",
        "full", "full/.zattrs", "full/.zgroup", "full/.zmetadata", "full/X/.zattrs",
        "full/X/data/.zarray", "full/X/data/0", "full/X/indptr/0", "full/obs/.zattrs",
        "full/obs/cell_type/codes/0", "full/obs/cell_type/categories/.zarray",
        "full/obs/label_utf8/0", "full/obs/nullable_int32/mask/0", "full/obsm/X_pca/0.0",
        "full/obsp/connectivities/indices/0", "full/layers/scaled/0.0", "full/uns/.zattrs",
        "full/raw/X/data/0", "full/var/_index/0", "full/varm/PCs/0.0",
        "file", "file/X/indptr/0", "file/obs/_index/0",
        "uniform", "uniform/seed0", "uniform/seed0/k=10", "uniform/seed0/k=10/.zmetadata",
        "uniform/seed4294967295/k=59/X/data/0", "uniform/seed7/k=1000/obs/int64/0",
        "uniform/seed0/share=0.5", "uniform/seed0/pct=5", "uniform/seed1/share=1e-3",
        "uniform/seed2/pct=100/.zattrs", "uniform/seed3/share=0.1/X/indptr/0",
        "blocks", "blocks/B=4", "blocks/seed0/k=7", "blocks/B=4/seed3/k=20/obs/.zattrs",
        "blocks/B=1/seed0/share=0.25", "blocks/B=9007199254740991/seed0/k=3/X/data/0",
        "stratified", "stratified/cell_type", "stratified/cell_type/seed0/k=10",
        "stratified/cell_type/balanced", "stratified/cell_type/balanced/min=2",
        "stratified/cell_type/balanced/min=2/seed1/k=20/.zattrs",
        "stratified/quality/proportional/min=0/seed0/pct=50", "stratified/bool/seed5/k=6",
        "stratified/label_utf8/balanced/min=1/seed0/k=60/obs/.zattrs",
        "stratified/nullable_bool/seed0/share=0.3",
        "spatial", "spatial/X_umap", "spatial/X_umap/seed0/k=5", "spatial/X_pca/G=16",
        "spatial/X_pca/G=16/cols=0,1,2", "spatial/X_pca/G=16/cols=0,1,2/seed0/pct=10",
        "spatial/X_pca/G=2/cols=3/seed9/k=11/obsm/X_pca/0.0",
        "spatial/X_sparse/seed0/k=4", "spatial/X_umap/G=1/cols=1,0/seed0/share=1",
        "spatial/X_pca/G=134217728/cols=0,1/seed0/k=1",
        "uniform/seed0/k=0", "uniform/seed01/k=1", "stratified/nope/seed0/k=1",
        # Regressions: a seed listing named sizes the minimum refuses (test_tree.c).
        "stratified/cell_type/balanced/min=4/seed1",
        # sets/ (fuzz_path.c's sets directory: squares, names, bad) and where/.
        "sets", "sets/squares", "sets/names", "sets/bad", "sets/nope",
        "sets/squares@ce0722014cee9b39", "sets/squares@0000000000000000",
        "sets/squares@ce0722014cee9b39/uniform/seed0/k=3/.zattrs",
        "sets/squares/blocks/B=2/seed1/share=0.5", "sets/names@636535f822d6181d/file/obs/_index/0",
        "sets/squares/stratified/cell_type/balanced/min=1/seed0/k=5/.zmetadata",
        "sets/squares/spatial/X_pca/G=3/cols=2,0/seed0/k=4/obsm/X_pca/0.0",
        "sets/squares/full/X/indptr/0", "sets/squares/uniform/seed0/pct=50",
        "where", "where/cell_type", "where/cell_type/B cell", "where/cell_type/B cell,NK/full",
        "where/cell_type/T cell/uniform/seed0/k=5/.zattrs", "where/cell_type/B%20cell",
        "where/cell_type/%2F", "where/cell_type/%2E%2E", "where/cell_type/,", "where/cell_type/%4",
        "where/quality/low,mid,high/stratified/quality/seed0/k=10",
        "where/label_utf8/zelle-0-\u03b1-\u00fc/file/obs/label_utf8/0",
        "where/label_utf8", "where/barcode/BC000-GGTCCGGG/file",
        "where/bool/true/blocks/B=4/seed2/k=6/X/data/0", "where/bool/false,true/uniform/seed0/share=0.5",
        "where/nullable_bool/false/spatial/X_umap/seed0/k=3", "where/nullable_bool",
        "where/int8/0", "where/cat_none_used/x",
    ]:
        write("path", p)


def shares():
    n_values = [60, 1234567, 2**32 - 1, 0, 10**19]
    doubles = [0.1, 2.0**-383, 5e-324, 1.7976931348623157e308, 0.35, 1e22, -0.0, 1.0,
               5.960464477539063e-08, 0.3]
    texts = ["0.01", "0.35", "1", "0.5", "5.960464477539063e-08", "1e-3", ".5", "1.",
             "0.1000000000000000055511151231257827", "1E-40", "0", "-0.5", "1.5",
             "00.0012500", "2.5e-1", "1e+0", "0.999999999999999999999999", "1e-400"]
    percents = ["5", "100", "12.5", "1e2", "0.0001", "50.000", "101"]
    i = 0
    for text in texts:
        write("share", struct.pack("<BQd", 0, n_values[i % len(n_values)],
                                   doubles[i % len(doubles)]) + text.encode())
        i += 1
    for text in percents:
        write("share", struct.pack("<BQd", 1, n_values[i % len(n_values)],
                                   doubles[i % len(doubles)]) + text.encode())
        i += 1


def requests():
    for r in [
        '{"method": "uniform", "n": 10, "k": 3}',
        '{"method": "uniform", "n": 1000.0, "k": 1e2, "seed": 7.0}',
        '{"method": "uniform", "n": 100, "share": "0.35", "summary": true}',
        '{"method": "uniform", "n": 4294967295, "share": 0.01, "sizeOnly": true}',
        '{"method": "uniform", "n": 50, "percent": 12.5, "seed": 4294967295}',
        '{"method": "blocks", "n": 100, "k": 10, "blockSize": 8}',
        '{"method": "blocks", "n": 100, "k": 10, "sizeOnly": true}',
        '{"method": "stratified", "codes": [0, 1, 2, 0, 1, 2, -1, null], "k": 4}',
        '{"method": "stratified", "k": 4, "codes": [0.0, 1.0, NaN, 2.0, 1.0, 0.0, -1.0]}',
        '{"method": "stratified", "values": ["a", "b", null, "a", "\\u00e9"], "k": 3, '
        '"allocation": "balanced", "minimum": 1}',
        '{"method": "stratified", "codes": [0, 1, 2, 0, 1, 2], "k": 2, "minimum": 1}',
        '{"method": "spatial", "k": 3, "seed": 2, "coords": [[0, 1], [NaN, 2], [3, Infinity], '
        '[4, 5]]}',
        '{"method": "spatial", "coords": [[0, 1, 2, 3], [1, 2, 3, 4]], "columns": [3, 1], '
        '"gridSize": 4, "share": "0.5"}',
        '{"method": "spatial", "coords": [["NaN"], ["-Infinity"], [1e308]], "k": 2, '
        '"gridSize": 9007199254740992}',
        '{"method": "spatial", "n": 5, "k": 2, "sizeOnly": true}',
        '{method: uniform}',
        '{"method": "random", "n": 10, "k": 2}',
        '{"method": "uniform", "n": 10}',
        '{"method": "uniform", "n": 10, "k": 2, "share": "0.5"}',
        '{"method": "uniform", "k": 2}',
        '{"method": "uniform", "n": 10, "k": 0}',
        '{"method": "uniform", "n": 4294967296, "k": 2}',
        '{"method": "uniform", "n": 10, "share": "1.5"}',
        '{"method": "uniform", "n": 10, "k": 2, "sed": 3}',
        '{"method": "uniform", "n": 10, "k": 2, "k": 3}',
        '{"method": "stratified", "codes": [0, "x"], "k": 1}',
        '{"method": "spatial", "coords": [[0, 1], [2]], "k": 1}',
        '{"method": "stratified", "field": "cell_type", "k": 1}',
        '[1, 2, 3]',
        # Regressions: a row with a non-finite coordinate and a finite one outside the
        # complete rows' bounds (undefined behaviour in the spatial boxes; test_select.c).
        '{"method": "spatial", "k": 2, "coords": [[5, 5], [NaN, 2], [3, Infinity], [4, 5]]}',
        # Over a set of cells (issue 21): every method, shares of |S|, and each refusal.
        '{"method": "uniform", "n": 10, "k": 2, "set": [1, 3, 4, 7, 8]}',
        '{"method": "blocks", "n": 10, "k": 3, "blockSize": 3, "set": [0, 2, 4, 5, 9]}',
        '{"method": "stratified", "codes": [0, 1, 2, 0, 1, null, 2, 0, null, 1], "k": 4, '
        '"set": [0, 1, 3, 4, 5, 7, 8, 9]}',
        '{"method": "spatial", "coords": [[0], [10], [1], [2], [NaN], [3]], "gridSize": 2, '
        '"k": 3, "set": [2, 3, 4, 5]}',
        '{"method": "uniform", "n": 4294967295, "share": "0.5", "set": [0, 4294967294]}',
        '{"method": "uniform", "n": 10, "k": 2, "set": []}',
        '{"method": "uniform", "n": 10, "k": 2, "set": [3, 3]}',
        '{"method": "uniform", "n": 10, "k": 2, "set": [3, 10]}',
        '{"method": "uniform", "n": 10, "k": 2, "set": [-1, 2.5]}',
    ]:
        write("request", r)


def cellsets():
    for flags, n, data in [
        (0, 10, bytes([0, 0, 3])), (0, 1000, bytes([0x80, 0x01])),
        (0, 2**32 - 1, bytes([0xfe, 0xff, 0xff, 0xff, 0x0f])), (0, 100, b""),
        (0, 10, bytes([0x80, 0x00])), (0, 2**32 - 1, bytes([0xff] * 5 + [0x7f])),
        (0, 3, bytes([0, 0, 0])), (1, 5, bytes([1])), (0, 200, bytes(range(0, 60, 3))),
        (0, 2**20, bytes([0xff, 0x7f] * 30)), (0, 7, bytes([0x81])),
    ]:
        write("cellset", struct.pack("<BI", flags, n) + data)


def filter_vectors():
    """Each chunk HDF5 wrote, as the seed of the decoder its last filter needs."""
    data = gzip.open(os.path.join(ROOT, "tests", "data", "filters", "vectors.bin.gz")).read()
    at = 8

    def u32():
        nonlocal at
        v = struct.unpack_from("<I", data, at)[0]
        at += 4
        return v

    def u16():
        nonlocal at
        v = struct.unpack_from("<H", data, at)[0]
        at += 2
        return v

    blobs = []
    for _ in range(u32()):
        length = u32()
        blobs.append(data[at:at + length])
        at += length
    names = {1: "deflate", 32000: "lzf", 32015: "zstd", 32001: "blosc"}
    for _ in range(u32()):
        skip = u16()  # the name
        at += skip
        element, raw, mask, stored, expected, count = [u32() for _ in range(6)]
        filters = []
        for _ in range(count):
            fid, _flags, cd = u32(), u32(), u32()
            at += 4 * cd
            skip = u16()  # the filter's name
            at += skip
            filters.append(fid)
        stored, expected = blobs[stored], blobs[expected]
        table = [1, 2, 3, 32000, 32001, 32015, 4, 32004]
        if all(f in table for f in filters) and 1 <= len(filters) <= 4 and raw < 65536:
            # The whole pipeline (fuzz_pipeline.c's layout).
            write("pipeline", bytes([len(filters) - 1] + [table.index(f) for f in filters]) +
                  struct.pack("<BBH", mask & 0xff, element & 0xff, raw) + stored)
        active = [f for i, f in enumerate(filters) if not (mask >> i) & 1]
        if not active:
            continue
        last = active[-1]
        if last in names and all(f == 2 for f in active[:-1]):
            # The stored bytes are one stream of the last filter, raw bytes long.
            write(names[last], struct.pack("<IB", raw, len(stored) % 256) + stored)
        if last == 3 and len(active) == 1:
            write("fletcher32", struct.pack("<HB", len(stored) // 2, 0x10) + stored)
        if active == [2]:
            write("shuffle", struct.pack("<BB", 0, element) + stored)
    # A few by hand: empty and tiny chunks, an incompressible one.
    for level in (1, 9):
        for raw in (b"", b"\x00" * 100, bytes(range(256)) * 4):
            write("deflate", struct.pack("<IB", len(raw), level) + zlib.compress(raw, level))
    for element, cd in ((4, 0), (8, 8), (3, 0), (1, 0), (0, 0), (0, 2)):
        write("shuffle", struct.pack("<BB", cd, element) + bytes(range(64)))
    for position in (0, 5, 300):
        write("fletcher32", struct.pack("<HB", position, 0x80) + bytes(range(200)))
    write("lzf", struct.pack("<IB", 12, 0) + bytes([2, 0x61, 0x62, 0x63, 0xe0, 0x00, 0x02]))


# ---- zip stores (fuzz_zip.c) ---------------------------------------------------------------


def zip_of(members, comment=b"", compression=zipfile.ZIP_STORED):
    """A zip written by Python's zipfile (as zarr's ZipStore writes one), each member
    (name, bytes[, compression[, force_zip64]]), dated 1980-01-01 so that the bytes are
    the same at every run."""
    out = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Duplicate name": on purpose
        with zipfile.ZipFile(out, "w", compression=compression) as zf:
            for member in members:
                name, data = member[0], member[1]
                info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
                info.compress_type = member[2] if len(member) > 2 else compression
                if len(member) > 3 and member[3]:
                    with zf.open(info, "w", force_zip64=True) as f:
                        f.write(data)
                else:
                    zf.writestr(info, data)
            zf.comment = comment
    return out.getvalue()


def zip_records(data):
    """The central directory's records of a zip without zip64 end records, and where
    the end record lies."""
    eocd = data.rfind(b"PK\x05\x06")
    size, offset = struct.unpack_from("<II", data, eocd + 12)
    records, p = [], offset
    while p < offset + size:
        n, m, k = struct.unpack_from("<HHH", data, p + 28)
        records.append(data[p:p + 46 + n + m + k])
        p += 46 + n + m + k
    return records, offset, eocd


def zip64_end(data):
    """The same zip with a zip64 end of central directory record and locator before
    its end record, whose fields then say 0xFFFF.. (as a writer past zip64's limits
    writes them)."""
    records, offset, eocd = zip_records(data)
    size = sum(len(r) for r in records)
    at = offset + size
    record = struct.pack("<IQHHIIQQQQ", 0x06064b50, 44, 45, 45, 0, 0, len(records), len(records),
                         size, offset)
    locator = struct.pack("<IIQI", 0x07064b50, 0, at, 1)
    end = struct.pack("<IHHHHIIH", 0x06054b50, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    return data[:at] + record + locator + end


def zip_cut(path, limit):
    """The first members of a real zip whose local headers and data end within limit
    bytes, their central directory records as the writer wrote them, and an end record."""
    with open(path, "rb") as f:
        data = f.read()
    records, _, _ = zip_records(data)
    kept, end = [], 0
    for record in sorted(records, key=lambda r: struct.unpack_from("<I", r, 42)[0]):
        header = struct.unpack_from("<I", record, 42)[0]
        stored = struct.unpack_from("<I", record, 20)[0]
        n, m = struct.unpack_from("<HH", data, header + 26)
        member_end = header + 30 + n + m + stored
        if member_end + sum(len(r) for r in kept) + len(record) + 22 > limit:
            break
        kept.append(record)
        end = member_end
    directory = b"".join(kept)
    return data[:end] + directory + struct.pack("<IHHHHIIH", 0x06054b50, 0, 0, len(kept),
                                                len(kept), len(directory), end, 0)


def zips():
    group = b'{"zarr_format": 3, "node_type": "group", "attributes": {}}'
    array = json.dumps({"zarr_format": 3, "node_type": "array", "shape": [4],
                        "data_type": "int32", "chunk_grid": {"name": "regular",
                        "configuration": {"chunk_shape": [4]}}, "fill_value": 0,
                        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]
                        }).encode()
    chunk = struct.pack("<4i", 1, -2, 3, 40000)
    store = [("zarr.json", group), ("a/zarr.json", array), ("a/c/0", chunk)]
    write("zip", zip_of([]))                                     # the end record alone
    write("zip", zip_of(store))                                  # stored
    write("zip", zip_of(store, compression=zipfile.ZIP_DEFLATED))
    write("zip", zip_of([("zeros", b"\0" * 60000, zipfile.ZIP_DEFLATED), ("empty", b""),
                         ("empty-deflated", b"", zipfile.ZIP_DEFLATED)]))
    # A name written twice (zarr's ZipStore rewrites metadata so): the last entry holds.
    write("zip", zip_of(store + [("zarr.json", b'{"zarr_format": 3, "node_type": "array"}'),
                                 ("a/c/0", chunk[:8], zipfile.ZIP_DEFLATED)]))
    # zip64: sizes and offsets in each member's extra field; the end records too.
    write("zip", zip_of([(n, d, zipfile.ZIP_STORED, True) for n, d in store]))
    write("zip", zip_of([(n, d, zipfile.ZIP_DEFLATED, True) for n, d in store]))
    write("zip", zip64_end(zip_of(store)))
    # A comment, one holding an end record's signature, a prefix before the archive.
    write("zip", zip_of(store, comment=b"written by make_corpus.py"))
    write("zip", zip_of(store[:1], comment=b"PK\x05\x06" + b"\0" * 18))
    write("zip", b"#!/bin/sh\nexit 0\n" + zip_of(store))
    # Names no key spells, directory entries, methods and flags not read.
    write("zip", zip_of([("a/", b""), ("a//b", b"x"), ("../up", b"x"), ("./here", b"x"),
                         ("/abs", b"x"), ("a/b", b"y"), ("a.b", b"z")]))
    write("zip", zip_of([("bz", b"bzip2 " * 20, zipfile.ZIP_BZIP2),
                         ("xz", b"lzma " * 20, zipfile.ZIP_LZMA), ("ok", b"stored")]))
    encrypted = bytearray(zip_of([("secret", b"not really")]))
    for at in (6, len(encrypted) - 22 - 46 - 6 + 8):  # the local and central flags
        encrypted[at] |= 1
    write("zip", bytes(encrypted))
    # The first members of real stores (zarr-python's ZipStore; anndata 0.13).
    for name, limit in (("zarr/pbmc68k_reduced.zarr.zip", 4096),
                        ("modern/modern-tiny-300x120.v2.zarr.zip", 4096),
                        ("modern/modern-tiny-300x120.v3.zarr.zip", 8000)):
        path = os.path.join(SHARED, name)
        if os.path.isfile(path):
            write("zip", zip_cut(path, limit))


# ---- Zarr metadata and chunks (fuzz_zarr_meta.c) ----------------------------------------

SEPARATOR = b"\n--\n"


def framed(flags, root, child=b"", chunk=b""):
    """fuzz_zarr_meta.c's input: flags (bit 0 v3, bit 1 v2 consolidated, bit 2 the
    child's document for "b" too), the root document, the child array's ("a"), the
    chunk's bytes."""
    parts = [p.encode() if isinstance(p, str) else p for p in (root, child, chunk)]
    return bytes([flags]) + SEPARATOR.join(parts)


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def lz4_literals(data):
    """numcodecs' LZ4 of data as one LZ4 block of literals only (valid LZ4: the last
    sequence), after the 4-byte size."""
    n = len(data)
    token, extra = (min(n, 15) << 4), b""
    if n >= 15:
        rest = n - 15
        while rest >= 255:
            extra += b"\xff"
            rest -= 255
        extra += bytes([rest])
    return struct.pack("<I", n) + bytes([token]) + extra + data


def real_array(store, path, chunk_key, flags):
    """A real array's document (root: its store's root group document) and its
    chunk, as fuzz_zarr_meta.c frames them."""
    root = os.path.join(SHARED, store)
    v3 = flags & 1
    group = os.path.join(root, "zarr.json" if v3 else ".zgroup")
    document = os.path.join(root, path, "zarr.json" if v3 else ".zarray")
    chunk = os.path.join(root, path, chunk_key)
    if not all(os.path.isfile(f) for f in (group, document, chunk)):
        return
    group_bytes = open(group, "rb").read()
    if v3:  # the root's consolidated metadata is read apart (cut_consolidated)
        doc = json.loads(group_bytes)
        doc.pop("consolidated_metadata", None)
        group_bytes = json.dumps(doc, indent=2).encode()
    chunk_bytes = open(chunk, "rb").read()
    if len(chunk_bytes) > 6000:
        chunk_bytes = chunk_bytes[:6000]  # a damaged chunk, still a seed
    write("zarr_meta", framed(flags, group_bytes, open(document, "rb").read(), chunk_bytes))


def cut_consolidated(store, flags, count):
    """A real store's consolidated metadata, cut to its first count nodes."""
    v3 = flags & 1
    path = os.path.join(SHARED, store, "zarr.json" if v3 else ".zmetadata")
    if not os.path.isfile(path):
        return
    doc = json.load(open(path))
    if v3:
        metadata = doc["consolidated_metadata"]["metadata"]
        kept = {}
        for key in list(metadata)[:count]:
            node = metadata[key]
            if "consolidated_metadata" in node:
                node["consolidated_metadata"]["metadata"] = {}
            kept[key] = node
        doc["consolidated_metadata"]["metadata"] = kept
    else:
        metadata = doc["metadata"]
        keys = [k for k in metadata if k.count("/") <= 2][:count]
        doc["metadata"] = {k: metadata[k] for k in sorted(set(keys) | {".zgroup"})}
    write("zarr_meta", framed(flags, json.dumps(doc, indent=1)))


def zarr_metas():
    # Real stores (anndata 0.13 + zarr 3.4; zarr 2's legacy 0.6 layout).
    tiny = "modern/modern-tiny-300x120"
    for store, path, key, flags in [
        (tiny + ".v2.zarr", "X/data", "0", 0),
        (tiny + ".v2.zarr", "obs/_index", "0", 0),
        (tiny + ".v2.zarr", "obs/cell_type/codes", "0", 0),
        (tiny + ".v2.zarr", "obsm/X_umap", "0.0", 0),
        (tiny + ".v2.zarr", "obs/passed_qc", "0", 0),
        ("zarr/10x-10k-subset.legacy-0.6.zarr", "obs", "0", 0),
        (tiny + ".v3-unsharded.zarr", "X/data", "c/0", 1),
        (tiny + ".v3-unsharded.zarr", "obs/_index", "c/0", 1),
        (tiny + ".v3-unsharded.zarr", "obsm/X_umap", "c/0/0", 1),
        (tiny + ".v3-sharded.zarr", "X/data", "c/2", 1),
        (tiny + ".v3-sharded.zarr", "obs/cell_type/codes", "c/0", 1),
        ("zarr/pbmc68k_reduced.zarr", "obs/bulk_labels/codes", "c/0", 1),
    ]:
        real_array(store, path, key, flags)
    real_array(tiny + ".v2.zarr", "obs/_index", "0", 4)  # the document for "b" too
    real_array(tiny + ".v3-unsharded.zarr", "obs/n_genes_nullable/mask", "c/0", 5)
    cut_consolidated(tiny + ".v2.zarr", 2, 12)
    cut_consolidated(tiny + ".v3-unsharded.zarr", 1, 14)
    cut_consolidated("zarr/pbmc68k_reduced.zarr", 1, 3)

    # By hand: each codec, order and type the reader takes, with a chunk that decodes.
    v2_group = '{"zarr_format": 2}'
    v3_group = '{"zarr_format": 3, "node_type": "group", "attributes": {"x": NaN}}'

    def zarray(dtype, shape, chunks, compressor="null", filters="null", fill="0", order="C",
               extra=""):
        return (f'{{"zarr_format": 2, "shape": {shape}, "chunks": {chunks}, "dtype": {dtype}, '
                f'"fill_value": {fill}, "order": "{order}", "compressor": {compressor}, '
                f'"filters": {filters}{extra}}}')

    def v3_array(data_type, shape, chunks, codecs, fill="0", extra=""):
        return (f'{{"zarr_format": 3, "node_type": "array", "shape": {shape}, "data_type": '
                f'{data_type}, "chunk_grid": {{"name": "regular", "configuration": '
                f'{{"chunk_shape": {chunks}}}}}, "chunk_key_encoding": {{"name": "default"}}, '
                f'"fill_value": {fill}, "codecs": {codecs}{extra}}}')

    values = struct.pack("<6i", 1, -2, 3, -4, 5, 600000)
    # v2: F order, big-endian, zlib, gzip, bz2, lz4, crc32c, strings, records, a 0-d array.
    write("zarr_meta", framed(0, v2_group, zarray('">i4"', "[2, 3]", "[2, 3]", order="F"),
                              struct.pack(">6i", 1, -4, -2, 5, 3, 600000)))
    write("zarr_meta", framed(0, v2_group, zarray('"<i4"', "[6]", "[6]",
                                                  '{"id": "zlib", "level": 1}'),
                              zlib.compress(values)))
    write("zarr_meta", framed(0, v2_group, zarray('"<i4"', "[6]", "[6]", '{"id": "gzip"}'),
                              gzip.compress(values, mtime=0)))
    import bz2
    write("zarr_meta", framed(0, v2_group, zarray('"<U3"', "[2]", "[2]", '{"id": "bz2"}',
                                                  fill='""'),
                              bz2.compress("abcxé\0".encode("utf-32-le"))))
    write("zarr_meta", framed(0, v2_group, zarray('"|S4"', "[3]", "[3]", '{"id": "lz4"}',
                                                  fill='"AAAAAA=="'),
                              lz4_literals(b"abcdefghij\0\0")))
    write("zarr_meta", framed(0, v2_group, zarray('"<f8"', "[1]", "[1]", '{"id": "crc32c"}',
                                                  fill='"NaN"'),
                              struct.pack("<d", 1.5) + struct.pack("<I",
                                                                   crc32c(struct.pack("<d", 1.5)))))
    strings = [b"", b"a", "\u00e9t\u00e9".encode()]
    vlen = struct.pack("<I", 3) + b"".join(struct.pack("<I", len(x)) + x for x in strings)
    write("zarr_meta", framed(0, v2_group, zarray('"|O"', "[3]", "[3]", '{"id": "zlib"}',
                                                  '[{"id": "vlen-utf8"}]', '""'),
                              zlib.compress(vlen)))
    write("zarr_meta", framed(0, v2_group,
                              zarray('[["a", "<i2"], ["b", "|S1"], ["c", ">f4"]]', "[2]", "[2]",
                                     fill='"AQBhAAAAAA=="', extra=', "dimension_separator": "/"'),
                              struct.pack("<hc", 1, b"x") + struct.pack(">f", 2.5) +
                              struct.pack("<hc", -1, b"y") + struct.pack(">f", -0.5)))
    write("zarr_meta", framed(0, v2_group, zarray('"<u8"', "[]", "[]",
                                                  fill="18446744073709551615"),
                              struct.pack("<Q", 7)))
    write("zarr_meta", framed(0, v2_group, zarray('"<f2"', "[3]", "[2]",
                                                  '{"id": "lzma"}')))  # unsupported
    # v3: transpose, crc32c, gzip, big-endian bytes, strings, a sharded array (index at
    # the start, a crc32c), fixed-length strings, struct.
    body = struct.pack("<6h", 1, 4, 2, 5, 3, 6)  # [[1, 2, 3], [4, 5, 6]] transposed
    write("zarr_meta", framed(1, v3_group, v3_array(
        '"int16"', "[2, 3]", "[2, 3]",
        '[{"name": "transpose", "configuration": {"order": [1, 0]}}, '
        '{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]'),
        body + struct.pack("<I", crc32c(body))))
    write("zarr_meta", framed(1, v3_group, v3_array(
        '"float64"', "[3]", "[3]",
        '[{"name": "bytes", "configuration": {"endian": "big"}}, '
        '{"name": "gzip", "configuration": {"level": 1}}]', fill='"0x7ff8000000000000"'),
        gzip.compress(struct.pack(">3d", 0.5, -1.0, 1e300), mtime=0)))
    write("zarr_meta", framed(1, v3_group, v3_array(
        '"string"', "[3]", "[3]",
        '[{"name": "vlen-utf8"}, {"name": "numcodecs.zlib", "configuration": {"level": 1}}]',
        fill='""'), zlib.compress(vlen)))
    inner = [struct.pack("<2i", 1, 2), b"", struct.pack("<2i", 5, 6)]
    index = b""
    offset = 3 * 16 + 4
    for chunk in inner:
        if chunk:
            index += struct.pack("<QQ", offset, len(chunk))
            offset += len(chunk)
        else:
            index += struct.pack("<QQ", 2**64 - 1, 2**64 - 1)
    index += struct.pack("<I", crc32c(index))
    write("zarr_meta", framed(1, v3_group, v3_array(
        '"int32"', "[6]", "[6]",
        '[{"name": "sharding_indexed", "configuration": {"chunk_shape": [2], "codecs": '
        '[{"name": "bytes", "configuration": {"endian": "little"}}], "index_codecs": '
        '[{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}], '
        '"index_location": "start"}}]'), index + b"".join(inner)))
    write("zarr_meta", framed(1, v3_group, v3_array(
        '{"name": "fixed_length_utf32", "configuration": {"length_bytes": 8}}', "[2]", "[2]",
        '[{"name": "bytes", "configuration": {"endian": "big"}}]', fill='"x"'),
        "ab\u00e9\0".encode("utf-32-be")))
    write("zarr_meta", framed(1, v3_group, v3_array(
        '{"name": "struct", "configuration": {"fields": [{"name": "n", "data_type": "uint8"}, '
        '{"name": "s", "data_type": {"name": "null_terminated_bytes", "configuration": '
        '{"length_bytes": 3}}}]}}', "[2]", "[2]", '["bytes"]', fill='{"n": 1, "s": "YQ=="}'),
        b"\x01ab\0\x02cde"))
    write("zarr_meta", framed(1, v3_array('"uint8"', "[]", "[]", '["bytes"]', fill="true",
                                          extra=', "dimension_names": []'), "", b"\x05"))
    # Regressions: claims the reader must refuse, not allocate (test_zarr_meta.c):
    # a value of 16 GB, and a chunk of 2^32 - 1 strings in 8 bytes.
    write("zarr_meta", framed(0, v2_group, zarray('"<U4000000000"', "[1]", "[1]", fill='""')))
    write("zarr_meta", framed(1, v3_group, v3_array(
        '{"name": "fixed_length_utf32", "configuration": {"length_bytes": 4000000000}}', "[1]",
        "[1]", '["bytes"]', fill='""')))
    write("zarr_meta", framed(1, v3_group, v3_array('"string"', "[3]", "[4294967295]",
                                                    '["vlen-utf8"]', fill='""'),
                              b"\xff\xff\xff\xff\0\0\0\0"))


def main():
    paths()
    shares()
    requests()
    cellsets()
    filter_vectors()
    zips()
    zarr_metas()
    for target in sorted(os.listdir(CORPUS)):
        files = os.listdir(os.path.join(CORPUS, target))
        size = sum(os.path.getsize(os.path.join(CORPUS, target, f)) for f in files)
        print(f"{target}: {len(files)} files, {size} bytes")


if __name__ == "__main__":
    main()
