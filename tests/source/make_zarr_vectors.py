#!/usr/bin/python3
"""Writes tests/data/zarr_meta/: Zarr stores made by zarr-python itself, with
the values each writer was given, and what zarr-python reads from the real
stores of ../shared/data, for tests/test_zarr_meta.c.

Four parts, each its own run (each interpreter has its own zarr):

  v2       on the host (Debian 12: zarr 2.13, numcodecs 0.11):
           tests/data/zarr_meta/v2/ (a v2 group of arrays through every
           numcodecs codec the reader decodes: blosc with lz4, lz4hc, zstd,
           blosclz and zlib, shuffle off, byte and bit; zstd, zlib, gzip,
           lz4, bz2, none; vlen-utf8 strings with unicode; C and F order;
           big-endian, bytes, unicode, structured, bool, 0-d, "/" keys;
           chunks deleted to leave fill values), v2-consolidated/ (its
           metadata alone, consolidated by zarr.consolidate_metadata),
           expected-v2.json.gz, and codec-vectors.json.gz (streams numcodecs
           decodes though zarr never writes them: gzip members, bzip2
           streams, bytes after a stream);
  v3       in the Debian 13 chroot (zarr 3.0.6, numcodecs 0.16, crc32c):
           tests/data/zarr_meta/v3/ (crc32c, transpose in 2 and 3
           dimensions, bytes big-endian, sharding with its index at the start
           and at the end, several inner chunks a shard and some absent,
           sharded strings, blosc, gzip, numcodecs.* codecs, the v2 key
           encoding and "." separators, fill values NaN, Infinity,
           -Infinity, 0-d), v3-consolidated/ and expected-v3.json.gz;
  real-v2  on the host: what zarr 2.13 reads from ../shared/data's v2 stores
           (real-v2.json.gz);
  real-v3  in the chroot: what zarr 3.0.6 reads from the v3 stores
           (real-v3.json.gz). Where zarr 3.0.6 has no data type for an
           array (pbmc68k_reduced's "struct" rank_genes_groups), its chunk
           is decoded with numcodecs' Zstd and read by numpy with the dtype
           its zarr.json names.

Run from the repository root:
    /usr/bin/python3 tests/source/make_zarr_vectors.py v2
    /usr/bin/python3 tests/source/make_zarr_vectors.py real-v2
    bash scripts/debian-chroot 13 /usr/bin/python3 tests/source/make_zarr_vectors.py v3
    bash scripts/debian-chroot 13 /usr/bin/python3 tests/source/make_zarr_vectors.py real-v3

expected-*.json.gz: {"arrays": {path: entry}}, entry:
    kind     "number", "vlen", "bytes", "unicode" or "records"
    dtype    numpy's dtype string of the values as written (or "records")
    shape, chunks (the chunk grid; sharded: the shard's shape), inner (sharded:
             the inner chunks' shape), order ("C"/"F", v2)
    codecs   the chain's names in the order the metadata lists them
             (v2: filters then compressor), shard_codecs, index_location
    values   base64 of every value in C order as the reader returns them:
             numbers in little-endian order, "|S" bytes, "<U" as UCS-4
             little-endian, records as numpy stores them; vlen: strings
    fill     base64 of one fill value so (vlen: the fill string), or null
    missing  chunk keys that were not written (read as the fill)
Every value was put in by this script and read back through zarr-python
before being recorded.

real-*.json.gz: {store name: {"format", "consolidated", "children": {group:
names}, "arrays": {path: {"kind", "dtype", "shape", "values" | "strings" |
"sha256"}}}}; sha256 is of the values' bytes as above.

Deterministic: fixed seeds, gzip with mtime 0 (numcodecs' GZip too), keys sorted.
"""

import base64
import gzip
import hashlib
import json
import os
import shutil
import sys
import warnings

import numpy as np

warnings.filterwarnings("ignore")

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.normpath(os.path.join(HERE, "..", "data", "zarr_meta"))
SHARED = os.environ.get("ZM_SHARED_DATA") or os.path.normpath(
    os.path.join(HERE, "..", "..", "..", "shared", "data"))


def b64(raw):
    return base64.standard_b64encode(bytes(raw)).decode("ascii")


def native_bytes(values):
    """The values as the reader returns them: C order, numbers and UCS-4 in
    little-endian order, bytes and records as numpy stores them."""
    values = np.ascontiguousarray(values)
    kind = values.dtype.kind
    if kind in "biufU" and values.dtype.byteorder == ">":
        values = values.astype(values.dtype.newbyteorder("<"))
    return values.tobytes()


def kind_of(dtype):
    if dtype.names is not None:
        return "records"
    return {"O": "vlen", "T": "vlen", "S": "bytes", "U": "unicode"}.get(dtype.kind, "number")


def write_gz(name, document):
    text = json.dumps(document, sort_keys=True, indent=1, ensure_ascii=True).encode()
    path = os.path.join(OUT, name)
    with open(path, "wb") as raw:
        with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as f:
            f.write(text)
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


def entry(values, dtype, fill, **extra):
    dtype = np.dtype(dtype)
    e = {"kind": kind_of(dtype), "dtype": dtype.str if dtype.names is None else "records",
         "shape": list(values.shape)}
    if e["kind"] == "vlen":
        e["strings"] = [str(v) for v in np.asarray(values, dtype=object).ravel(order="C")]
        e["fill"] = fill if isinstance(fill, str) else None
    else:
        e["values"] = b64(native_bytes(values))
        if fill is None:
            e["fill"] = None
        elif dtype.names is not None:
            e["fill"] = b64(native_bytes(np.frombuffer(fill, dtype=dtype)))
        else:
            e["fill"] = b64(native_bytes(np.array([fill], dtype=dtype)))
    e.update(extra)
    return e


def strings(rng, n):
    pool = ["", "a", "ok", "Zelle №2", "émoji 🧬", "tab\there", 'quote"d', "x" * 70,
            "日本語テキスト", "ünïcödé", "CD4+/CD25 T Reg", "\u00a0nbsp"]
    return np.array([pool[i] + ("" if i == 0 else str(k)) for k, i in
                     enumerate(rng.integers(0, len(pool), n))], dtype=object)


def floats(rng, shape, dtype="<f4"):
    base = np.add.outer(np.arange(shape[0]), np.arange(int(np.prod(shape[1:])))).reshape(shape)
    noise = rng.integers(0, 4, size=shape)
    return (base * 0.25 + noise).astype(dtype)


def gzip_without_time():
    """numcodecs' GZip (zarr 3's gzip codec too) stamps each chunk with the
    time: 0 instead, so that the stores come out the same on every run."""
    import types

    import numcodecs.gzip

    class GzipFile(numcodecs.gzip._gzip.GzipFile):
        def __init__(self, *args, **kwargs):
            kwargs.setdefault("mtime", 0)
            super().__init__(*args, **kwargs)
    numcodecs.gzip._gzip = types.SimpleNamespace(GzipFile=GzipFile)


# ---- v2 (zarr 2.13, numcodecs 0.11) ---------------------------------------------------

def make_v2():
    import numcodecs
    import zarr
    assert zarr.__version__.startswith("2."), zarr.__version__
    from numcodecs import BZ2, GZip, LZ4, Blosc, VLenUTF8, Zlib, Zstd
    gzip_without_time()

    root = os.path.join(OUT, "v2")
    shutil.rmtree(root, ignore_errors=True)
    store = zarr.DirectoryStore(root)
    group = zarr.group(store=store, overwrite=True)
    group.attrs["purpose"] = "tests/test_zarr_meta.c"
    rng = np.random.default_rng(20260101)
    arrays = {}

    def put(path, values, chunks, fill, compressor=None, filters=None, order="C", dtype=None,
            separator=None, delete=()):
        dtype = np.dtype(dtype if dtype is not None else values.dtype)
        kwargs = {}
        if separator is not None:
            kwargs["dimension_separator"] = separator
        a = group.create_dataset(path, shape=values.shape, chunks=chunks, dtype=dtype,
                                 compressor=compressor, filters=filters, order=order,
                                 fill_value=fill, object_codec=None, **kwargs)
        a[...] = values
        directory = os.path.join(root, path)
        for key in delete:
            os.remove(os.path.join(directory, key))
        # What zarr reads back is what the test expects: the values put in,
        # the fill where a chunk was deleted.
        got = a[...]
        expect = np.array(values, dtype=dtype)
        if delete:
            expect = got
        if dtype.kind == "f":
            assert np.array_equal(got, expect, equal_nan=True), path
        else:
            assert np.array_equal(got, expect), path
        meta = json.load(open(os.path.join(directory, ".zarray")))
        names = [f["id"] for f in meta["filters"] or []]
        if meta["compressor"] is not None:
            names.append(meta["compressor"]["id"])
        arrays[path] = entry(got, dtype, fill, chunks=list(chunks), order=order, codecs=names,
                             missing=list(delete))

    f4 = floats(rng, (50, 30))
    for cname in ["lz4", "lz4hc", "zstd", "blosclz", "zlib"]:
        for shuffle, sname in [(Blosc.NOSHUFFLE, "noshuffle"), (Blosc.SHUFFLE, "shuffle"),
                               (Blosc.BITSHUFFLE, "bitshuffle")]:
            put(f"blosc/{cname}_{sname}", f4, (32, 20), 0.0,
                compressor=Blosc(cname=cname, clevel=5, shuffle=shuffle))
    put("blosc/i8_shuffle", (rng.integers(-2**40, 2**40, (41, 17))).astype("<i8"), (16, 16), 0,
        compressor=Blosc(cname="lz4", clevel=9, shuffle=Blosc.SHUFFLE))
    put("blosc/u2_bitshuffle", rng.integers(0, 2**16, (300,)).astype("<u2"), (128,), 0,
        compressor=Blosc(cname="zstd", clevel=3, shuffle=Blosc.BITSHUFFLE))
    put("blosc/snappy", f4, (32, 20), 0.0, compressor=Blosc(cname="snappy", clevel=5))
    put("compressors/zstd_1", f4, (32, 20), 0.0, compressor=Zstd(level=1))
    put("compressors/zstd_9", floats(rng, (50, 30), "<f8"), (32, 20), 0.0, compressor=Zstd(level=9))
    put("compressors/zlib_1", f4, (32, 20), 0.0, compressor=Zlib(level=1))
    put("compressors/zlib_9", f4, (32, 20), 0.0, compressor=Zlib(level=9))
    put("compressors/gzip", f4, (32, 20), 0.0, compressor=GZip(level=5))
    put("compressors/lz4", f4, (32, 20), 0.0, compressor=LZ4(acceleration=1))
    put("compressors/bz2", f4, (32, 20), 0.0, compressor=BZ2(level=9))
    put("compressors/none", f4, (32, 20), 0.0, compressor=None)
    # Orders, byte orders and types.
    put("order/f8_F_zlib", floats(rng, (50, 30), "<f8"), (32, 20), 0.0, compressor=Zlib(level=5),
        order="F")
    put("order/i4_F_3d", rng.integers(-1000, 1000, (7, 9, 11)).astype("<i4"), (4, 5, 6), 0,
        compressor=Blosc(cname="lz4", shuffle=Blosc.SHUFFLE), order="F")
    put("order/i4_C_3d", rng.integers(-1000, 1000, (7, 9, 11)).astype("<i4"), (4, 5, 6), 0,
        compressor=Blosc(cname="lz4", shuffle=Blosc.SHUFFLE))
    put("order/strings_F", strings(rng, 35).reshape(5, 7), (3, 4), "", filters=[VLenUTF8()],
        compressor=Zstd(level=3), order="F", dtype=object)
    put("types/i4_big", rng.integers(-2**31, 2**31, (40, 6)).astype(">i4"), (16, 4), 3,
        compressor=Zstd(level=1))
    put("types/f8_big", floats(rng, (25,), ">f8"), (10,), -1.5, compressor=None)
    put("types/u8_max", rng.integers(0, 2**63, (30,)).astype("<u8") * 2, (8,),
        np.uint64(2**64 - 1), compressor=Zstd(level=1), delete=("3",))
    put("types/bool", rng.integers(0, 2, (70,)).astype("|b1"), (32,), True,
        compressor=BZ2(level=1), delete=("1",))
    put("types/i1", rng.integers(-128, 128, (33, 3)).astype("|i1"), (10, 3), -7,
        compressor=GZip(level=1), delete=("2.0",))
    put("types/S7", np.array([b"abc", b"", b"seven77", b"x\x00y", b"\xff\xfe"] * 5, dtype="|S7"),
        (8,), b"fill", compressor=Blosc(cname="lz4", shuffle=Blosc.NOSHUFFLE), delete=("1",))
    put("types/U6", np.array(["abc", "", "séptimo", "日本", "🧬x", "zz"] * 4, dtype="<U6"), (7,),
        "nö", compressor=LZ4(), delete=("1",))
    put("types/U5_big", np.array(["big", "énd", "", "🧬🧬"] * 3, dtype=">U5"), (5,), "", compressor=Zlib())
    rec = np.dtype([("a", "<i4"), ("b", "|S3"), ("c", ">f8"), ("d", "<U2")])
    values = np.zeros(23, dtype=rec)
    values["a"] = np.arange(23) - 5
    values["b"] = [b"x%d" % (i % 10) for i in range(23)]
    values["c"] = np.linspace(-1, 1, 23)
    values["d"] = ["é" + str(i % 10) for i in range(23)]
    # A record's fill as zarr 2 takes it: its bytes (then base64 in .zarray).
    fill = np.array([(-1, b"zz", 2.5, "ü")], dtype=rec).tobytes()
    put("types/records", values, (10,), fill,
        compressor=Blosc(cname="zstd", shuffle=Blosc.SHUFFLE), delete=("1",))
    put("types/f4_nan", f4, (32, 20), np.float32("nan"), compressor=Zstd(level=1),
        delete=("1.0",))
    put("types/f8_inf", floats(rng, (12,), "<f8"), (5,), np.float64("-inf"), compressor=None,
        delete=("0",))
    put("types/scalar", np.array(3.25, dtype="<f8"), (), 0.0, compressor=Zstd(level=1))
    put("types/empty", np.zeros((0, 5), dtype="<f4"), (4, 5), 0.0, compressor=Zstd(level=1))
    put("keys/slash", rng.integers(0, 100, (9, 8)).astype("<i2"), (4, 3), 0,
        compressor=Zlib(level=1), separator="/")
    s = strings(rng, 40)
    put("strings/blosc", s, (16,), "", filters=[VLenUTF8()],
        compressor=Blosc(cname="lz4", shuffle=Blosc.NOSHUFFLE), dtype=object)
    put("strings/gzip", s, (9,), "", filters=[VLenUTF8()], compressor=GZip(level=6), dtype=object)
    put("strings/none", s, (40,), "", filters=[VLenUTF8()], compressor=None, dtype=object)
    put("strings/missing", s, (16,), "", filters=[VLenUTF8()], compressor=Zstd(level=1),
        dtype=object, delete=("1",))
    group.create_group("empty_group").attrs["note"] = "no children"

    # The same metadata, consolidated: metadata files only (the test reads
    # no chunk of it), so that both readings can be compared.
    consolidated = os.path.join(OUT, "v2-consolidated")
    shutil.rmtree(consolidated, ignore_errors=True)
    for directory, _, files in os.walk(root):
        for name in files:
            if name in (".zarray", ".zgroup", ".zattrs"):
                target = os.path.join(consolidated, os.path.relpath(directory, root))
                os.makedirs(target, exist_ok=True)
                shutil.copy(os.path.join(directory, name), target)
    zarr.consolidate_metadata(zarr.DirectoryStore(consolidated))
    write_gz("codec-vectors.json.gz", codec_vectors())
    write_gz("expected-v2.json.gz", {"writer": f"zarr {zarr.__version__}, numcodecs "
                                               f"{numcodecs.__version__}",
                                     "arrays": arrays})


def codec_vectors():
    """Streams zarr's own writers never make but other writers may, and
    numcodecs 0.11 decodes (or refuses): {name: {compressor, raw_size,
    encoded, decoded (null: numcodecs refuses it)}}."""
    import bz2
    import gzip as gz
    import zlib

    import numcodecs
    data = bytes(range(256)) * 20

    def member(raw):
        return gz.compress(raw, compresslevel=6, mtime=0)

    streams = {
        "zlib_then_garbage": ({"id": "zlib", "level": 1}, zlib.compress(data, 1) + b"garbage!"),
        "gzip_members_padded": ({"id": "gzip", "level": 6},
                                member(data[:1000]) + b"\0\0\0" + member(data[1000:])),
        "gzip_then_junk": ({"id": "gzip", "level": 6}, member(data) + b"junk"),
        "bz2_streams": ({"id": "bz2", "level": 9}, bz2.compress(data[:3000]) +
                        bz2.compress(data[3000:])),
        "bz2_then_junk": ({"id": "bz2", "level": 9}, bz2.compress(data) + b"junkjunk"),
    }
    out = {}
    for name, (config, encoded) in streams.items():
        codec = numcodecs.get_codec(dict(config))
        try:
            decoded = bytes(codec.decode(encoded))
            assert decoded == data, name
        except Exception:
            decoded = None
        out[name] = {"compressor": config, "raw_size": len(data), "encoded": b64(encoded),
                     "decoded": None if decoded is None else b64(decoded)}
    return {"writer": f"numcodecs {numcodecs.__version__}", "vectors": out}


# ---- v3 (zarr 3.0.6, numcodecs 0.16) ---------------------------------------------------

def make_v3():
    import numcodecs
    import numcodecs.zarr3 as nz
    import zarr
    from zarr.codecs import (BloscCodec, BytesCodec, Crc32cCodec, GzipCodec, ShardingCodec,
                             TransposeCodec, VLenUTF8Codec, ZstdCodec)
    assert zarr.__version__.startswith("3."), zarr.__version__
    gzip_without_time()

    root = os.path.join(OUT, "v3")
    shutil.rmtree(root, ignore_errors=True)
    group = zarr.open_group(root, mode="w", zarr_format=3)
    group.attrs["purpose"] = "tests/test_zarr_meta.c"
    rng = np.random.default_rng(20260102)
    arrays = {}

    def put(path, values, chunks, fill, write=None, **kwargs):
        dtype = values.dtype if values.dtype != object else np.dtype(str)
        a = group.create_array(path, shape=values.shape, dtype=dtype, chunks=chunks,
                               fill_value=fill, **kwargs)
        if write is None:
            a[...] = values
        else:
            a[write] = values[write]
        got = a[...]
        expect = np.array(values, dtype=object if values.dtype == object else values.dtype)
        if write is not None:
            assert got[write].tolist() == expect[write].tolist() or np.array_equal(
                got[write], expect[write], equal_nan=True), path
        else:
            assert got.tolist() == expect.tolist() or np.array_equal(got, expect,
                                                                     equal_nan=True), path
        directory = os.path.join(root, path)
        meta = json.load(open(os.path.join(directory, "zarr.json")))
        e = entry(np.asarray(got, dtype=object) if values.dtype == object else
                  got.astype(values.dtype), values.dtype if values.dtype != object else object,
                  fill, chunks=list(meta["chunk_grid"]["configuration"]["chunk_shape"]),
                  codecs=[c["name"] for c in meta["codecs"]])
        if values.dtype == object:
            e["fill"] = fill
        if meta["codecs"][0]["name"] == "sharding_indexed":
            c = meta["codecs"][0]["configuration"]
            e["inner"] = c["chunk_shape"]
            e["shard_codecs"] = [x["name"] for x in c["codecs"]]
            e["index_location"] = c.get("index_location", "end")
        # Chunks (or shards) never written: every key of the grid not on disk.
        grid = [-(-s // c) for s, c in zip(values.shape, e["chunks"])]
        keys = []
        for coords in np.ndindex(*grid) if grid else [()]:
            enc = meta["chunk_key_encoding"]
            sep = enc.get("configuration", {}).get("separator",
                                                   "/" if enc["name"] == "default" else ".")
            if enc["name"] == "default":
                key = sep.join(["c"] + [str(x) for x in coords])
            else:
                key = sep.join(str(x) for x in coords) if coords else "0"
            if not os.path.exists(os.path.join(directory, key)):
                keys.append(key)
        e["missing"] = keys
        arrays[path] = e

    f4 = floats(rng, (37, 23))
    put("codecs/crc32c", f4, (16, 10), 0.0, compressors=[ZstdCodec(level=3), Crc32cCodec()])
    put("codecs/crc32c_only", f4, (16, 10), 0.0, compressors=[Crc32cCodec()])
    put("codecs/transpose_2d", floats(rng, (37, 23), "<f8"), (16, 10), 0.0,
        filters=[TransposeCodec(order=(1, 0))], compressors=[ZstdCodec(level=1)])
    put("codecs/transpose_3d", rng.integers(-300, 300, (6, 7, 9)).astype("<i2"), (4, 5, 3), 0,
        filters=[TransposeCodec(order=(2, 0, 1))], compressors=[GzipCodec(level=4)])
    put("codecs/big_endian", rng.integers(-2**31, 2**31, (37, 23)).astype(">i4"), (16, 10), 0,
        serializer=BytesCodec(endian="big"),
        compressors=[BloscCodec(cname="lz4", clevel=5, shuffle="shuffle")])
    put("codecs/big_endian_f8", floats(rng, (30,), ">f8"), (7,), 0.0,
        serializer=BytesCodec(endian="big"), compressors=None)
    put("codecs/transpose_big", rng.integers(0, 2**16, (6, 7)).astype(">u2"), (4, 4), 5,
        filters=[TransposeCodec(order=(1, 0))], serializer=BytesCodec(endian="big"),
        compressors=[nz.Zlib(level=3), Crc32cCodec()])
    put("codecs/blosc_bitshuffle", f4, (16, 10), 0.0,
        compressors=[BloscCodec(cname="zstd", clevel=3, shuffle="bitshuffle")])
    put("codecs/blosc_noshuffle", f4, (16, 10), 0.0,
        compressors=[BloscCodec(cname="blosclz", clevel=5, shuffle="noshuffle")])
    put("codecs/gzip", f4, (16, 10), 0.0, compressors=[GzipCodec(level=9)])
    put("codecs/numcodecs_zlib", f4, (16, 10), 0.0, compressors=[nz.Zlib(level=5)])
    put("codecs/numcodecs_lz4", f4, (16, 10), 0.0, compressors=[nz.LZ4()])
    put("codecs/numcodecs_bz2", f4, (16, 10), 0.0, compressors=[nz.BZ2(level=5)])
    put("codecs/numcodecs_zstd", f4, (16, 10), 0.0, compressors=[nz.Zstd(level=2)])
    put("codecs/numcodecs_crc32c", f4, (16, 10), 0.0,
        compressors=[ZstdCodec(level=1), nz.CRC32C()])
    put("codecs/none", f4, (16, 10), 0.0, compressors=None)
    # Sharding: several inner chunks a shard, ragged edges, absent inner
    # chunks and shards (only rows below 20 written, NaN elsewhere).
    half = (slice(0, 20), slice(None))
    put("shards/end", f4, (16, 10), float("nan"), write=half,
        serializer=ShardingCodec(chunk_shape=(8, 5), codecs=[BytesCodec(), ZstdCodec(level=1)],
                                 index_location="end"), compressors=None)
    put("shards/start", f4, (16, 10), float("nan"), write=half,
        serializer=ShardingCodec(chunk_shape=(8, 5), codecs=[BytesCodec(), ZstdCodec(level=1)],
                                 index_location="start"), compressors=None)
    put("shards/transpose_inner", rng.integers(-99, 99, (30, 20)).astype("<i8"), (10, 20), -1,
        serializer=ShardingCodec(chunk_shape=(5, 4),
                                 codecs=[TransposeCodec(order=(1, 0)), BytesCodec(endian="big"),
                                         GzipCodec(level=1), Crc32cCodec()]),
        compressors=None)
    put("shards/strings", strings(rng, 50), (20,), "",
        serializer=ShardingCodec(chunk_shape=(5,), codecs=[VLenUTF8Codec(), ZstdCodec(level=1)]),
        compressors=None)
    put("shards/one_d", floats(rng, (1000,)), (384,), 0.0,
        serializer=ShardingCodec(chunk_shape=(96,), codecs=[BytesCodec(), ZstdCodec(level=0)]),
        compressors=None)
    put("strings/zstd", strings(rng, 30), (8,), "", compressors=[ZstdCodec(level=1)])
    put("strings/none", strings(rng, 30), (30,), "", compressors=None)
    put("strings/missing", strings(rng, 30), (8,), "", write=(slice(0, 8),),
        compressors=[ZstdCodec(level=1)])
    put("keys/v2_dot", rng.integers(0, 9, (9, 8)).astype("<i2"), (4, 3), 0,
        chunk_key_encoding={"name": "v2", "separator": "."}, compressors=[ZstdCodec(level=1)])
    put("keys/v2_slash", rng.integers(0, 9, (9, 8)).astype("<i2"), (4, 3), 0,
        chunk_key_encoding={"name": "v2", "separator": "/"}, compressors=[ZstdCodec(level=1)])
    put("keys/default_dot", rng.integers(0, 9, (9, 8)).astype("<i2"), (4, 3), 0,
        chunk_key_encoding={"name": "default", "separator": "."},
        compressors=[ZstdCodec(level=1)])
    put("keys/scalar", np.array(7.5, dtype="<f8"), (), 0.0, compressors=[ZstdCodec(level=1)])
    put("keys/scalar_v2", np.array(-2, dtype="<i4"), (), 0,
        chunk_key_encoding={"name": "v2", "separator": "."}, compressors=None)
    put("fill/nan", f4, (16, 10), float("nan"), write=half, compressors=[ZstdCodec(level=1)])
    put("fill/inf", floats(rng, (20,), "<f8"), (6,), float("inf"), write=(slice(0, 6),),
        compressors=None)
    put("fill/neg_inf", floats(rng, (20,), "<f4"), (6,), float("-inf"), write=(slice(0, 6),),
        compressors=None)
    put("fill/bool", rng.integers(0, 2, (40,)).astype("|b1"), (16,), True,
        write=(slice(0, 16),), compressors=None)
    put("fill/u8_max", rng.integers(0, 2**63, (30,)).astype("<u8"), (8,), 2**64 - 1,
        write=(slice(0, 8),), compressors=[ZstdCodec(level=1)])
    put("fill/i1", rng.integers(-128, 128, (30,)).astype("|i1"), (8,), -128,
        write=(slice(0, 8),), compressors=None)
    group.create_group("empty_group").attrs["note"] = "no children"

    consolidated = os.path.join(OUT, "v3-consolidated")
    shutil.rmtree(consolidated, ignore_errors=True)
    for directory, _, files in os.walk(root):
        if "zarr.json" in files:
            target = os.path.join(consolidated, os.path.relpath(directory, root))
            os.makedirs(target, exist_ok=True)
            shutil.copy(os.path.join(directory, "zarr.json"), target)
    zarr.consolidate_metadata(consolidated)
    # zarr lists the nodes in whatever order its concurrent listing gives:
    # the entries sorted by name, so that the file is the same every run.
    path = os.path.join(consolidated, "zarr.json")
    root_doc = json.load(open(path))
    entries = root_doc["consolidated_metadata"]["metadata"]
    root_doc["consolidated_metadata"]["metadata"] = {k: entries[k] for k in sorted(entries)}
    with open(path, "w") as f:
        json.dump(root_doc, f, indent=2)
    write_gz("expected-v3.json.gz", {"writer": f"zarr {zarr.__version__}, numcodecs "
                                               f"{numcodecs.__version__}",
                                     "arrays": arrays})


# ---- the real stores ---------------------------------------------------------------------

def array_record(values, dtype=None, full=True):
    values = np.asarray(values)
    dtype = np.dtype(dtype or values.dtype)
    kind = kind_of(dtype)
    e = {"kind": kind, "dtype": dtype.str if dtype.names is None else "records",
         "shape": list(values.shape)}
    if kind == "vlen":
        e["strings"] = [str(v) for v in values.ravel()]
    else:
        raw = native_bytes(values)
        e["sha256"] = hashlib.sha256(raw).hexdigest()
        if full and len(raw) <= 64 * 1024:
            e["values"] = b64(raw)
    return e


def consolidated_children_v2(path):
    meta = json.load(open(os.path.join(path, ".zmetadata")))["metadata"]
    nodes = {k.rsplit("/", 1)[0] if "/" in k else "" for k in meta
             if k.endswith(".zarray") or k.endswith(".zgroup")}
    return nodes


def children_of(nodes, group):
    out = []
    for n in nodes:
        if n == "":
            continue
        parent = n.rsplit("/", 1)[0] if "/" in n else ""
        if parent == group:
            out.append(n.rsplit("/", 1)[-1])
    return sorted(out, key=lambda s: s.encode())


def listed_children(path, group, marker):
    """A store read node by node: the directories below group that hold a
    node's document, as zarr lists a group's members."""
    directory = os.path.join(path, group)
    return sorted((n for n in os.listdir(directory)
                   if any(os.path.exists(os.path.join(directory, n, m)) for m in marker)),
                  key=lambda s: s.encode())


def real_v2():
    import zarr
    assert zarr.__version__.startswith("2.")
    out = {}
    for name in ["modern/modern-tiny-300x120.v2.zarr", "zarr/10x-10k-subset.legacy-0.6.zarr"]:
        path = os.path.join(SHARED, name)
        consolidated = os.path.exists(os.path.join(path, ".zmetadata"))
        g = zarr.open_consolidated(path, mode="r") if consolidated else zarr.open_group(path,
                                                                                      mode="r")
        record = {"format": 2, "consolidated": consolidated, "children": {}, "arrays": {}}
        groups = [""] + ([k for k in ["obs", "X", "uns"] if k in g and
                          isinstance(g[k], zarr.hierarchy.Group)])
        for group in groups:
            node = g if group == "" else g[group]
            names = sorted(list(node.group_keys()) + list(node.array_keys()),
                           key=lambda s: s.encode())
            record["children"][group] = names
            if consolidated:
                assert names == children_of(consolidated_children_v2(path), group), group
            else:
                assert names == listed_children(path, group, [".zarray", ".zgroup"]), group
        wanted = (["X/data", "X/indices", "X/indptr", "obs/comment", "obs/_index",
                   "obs/cell_type/codes", "obs/pct_mito", "uns/title"]
                  if "modern" in name else ["X", "obs", "var"])
        for p in wanted:
            a = g[p]
            record["arrays"][p] = array_record(a[...], a.dtype)
        out[os.path.basename(name)] = record
    write_gz("real-v2.json.gz", out)


def real_v3():
    import numcodecs
    import zarr
    assert zarr.__version__.startswith("3.")
    out = {}
    modern = ["modern/modern-tiny-300x120.v3.zarr", "modern/modern-tiny-300x120.v3-unsharded.zarr",
              "modern/modern-tiny-300x120.v3-sharded.zarr"]
    for name in modern + ["zarr/pbmc68k_reduced.zarr"]:
        path = os.path.join(SHARED, name)
        root = json.load(open(os.path.join(path, "zarr.json")))
        cm = root.get("consolidated_metadata")
        record = {"format": 3, "consolidated": bool(cm), "children": {}, "arrays": {}}
        nodes = set([""]) | set(cm["metadata"]) if cm else None
        for group in ["", "obs", "X", "uns"]:
            meta = root if group == "" else json.load(open(os.path.join(path, group,
                                                                        "zarr.json")))
            if meta["node_type"] != "group":
                continue
            if nodes is not None:
                names = children_of(nodes, group)
            else:
                names = listed_children(path, group, ["zarr.json"])
            record["children"][group] = names
        if "modern" in name:
            g = zarr.open_group(path, mode="r")
            for group in record["children"]:
                node = g if group == "" else g[group]
                assert sorted(node.keys(), key=lambda s: s.encode()) == \
                    record["children"][group], group
            for p in ["X/data", "X/indices", "X/indptr", "obs/comment", "obs/_index",
                      "obs/cell_type/codes", "obs/pct_mito", "uns/title", "layers/lognorm"]:
                a = g[p]
                v = a[...]
                if a.dtype.kind == "T":
                    v = np.asarray(v, dtype=object)
                record["arrays"][p] = array_record(v, object if a.dtype.kind == "T" else a.dtype,
                                                   full=p != "layers/lognorm")
        else:
            # zarr 3.0.6 has no "struct" data type, so the root's
            # consolidated metadata does not open: arrays are opened alone.
            for p in ["X", "obs/louvain/categories", "obs/n_genes"]:
                a = zarr.open_array(os.path.join(path, p), mode="r")
                v = a[...]
                if a.dtype.kind in "TO":
                    v = np.asarray(v, dtype=object)
                record["arrays"][p] = array_record(v, object if a.dtype.kind in "TO" else a.dtype,
                                                   full=False)
            for p in ["uns/rank_genes_groups/names", "uns/rank_genes_groups/scores"]:
                meta = json.load(open(os.path.join(path, p, "zarr.json")))
                fields = []
                for f in meta["data_type"]["configuration"]["fields"]:
                    t = f["data_type"]
                    if isinstance(t, dict):
                        assert t["name"] == "fixed_length_utf32"
                        fields.append((f["name"], "<U%d" % (t["configuration"]["length_bytes"] // 4)))
                    else:
                        fields.append((f["name"], {"float32": "<f4"}[t]))
                dtype = np.dtype(fields)
                assert [c["name"] for c in meta["codecs"]] == ["bytes", "zstd"]
                assert meta["shape"] == meta["chunk_grid"]["configuration"]["chunk_shape"]
                raw = numcodecs.Zstd().decode(open(os.path.join(path, p, "c", "0"), "rb").read())
                values = np.frombuffer(raw, dtype=dtype)
                assert values.shape == tuple(meta["shape"])
                record["arrays"][p] = array_record(values, dtype, full=False)
        out[os.path.basename(name)] = record
    write_gz("real-v3.json.gz", out)


def main():
    os.makedirs(OUT, exist_ok=True)
    parts = {"v2": make_v2, "v3": make_v3, "real-v2": real_v2, "real-v3": real_v3}
    if len(sys.argv) != 2 or sys.argv[1] not in parts:
        print(f"usage: {sys.argv[0]} {'|'.join(parts)}", file=sys.stderr)
        return 2
    parts[sys.argv[1]]()
    return 0


if __name__ == "__main__":
    sys.exit(main())
