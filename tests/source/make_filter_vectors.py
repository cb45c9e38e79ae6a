#!/usr/bin/python3
"""Writes tests/data/filters/vectors.bin.gz: stored HDF5 chunks with their
filter pipelines and the bytes HDF5 decodes them to, for tests/test_filters.c.

Each vector comes from a real HDF5 file written by h5py (with hdf5plugin's
blosc and h5py's lzf), read back chunk by chunk with read_direct_chunk, so
the stored bytes, the pipeline (ids, flags, cd_values as HDF5 reports them)
and the filter mask are exactly what zarrmount meets in the wild. The
expected bytes are what HDF5 itself returns when it reads the chunk, so the
C decoder is checked against HDF5 rather than against our idea of it.

Debian ships no HDF5 zstd plugin, so zstd chunks (filter 32015, a bare zstd
frame as the HDF Group / hdf5plugin filter writes it) are compressed here
through libzstd with ctypes and written with write_direct_chunk into a
dataset whose pipeline names 32015; their expected bytes are the source
array.

The output is deterministic for given library versions (fixed seeds, gzip
with mtime 0). Run from the repository root:
    /usr/bin/python3 tests/source/make_filter_vectors.py

File format (little-endian):
    "ZMFV0001"
    u32 blob count, then per blob: u32 length, bytes
    u32 vector count, then per vector:
        u16 name length, name
        u32 element_size, u32 raw_size, u32 filter_mask,
        u32 stored blob index, u32 expected blob index,
        u32 filter count, then per filter:
            u32 id, u32 flags, u32 cd count, u32 cd values..., u16 name length, name
"""

import ctypes
import gzip
import io
import os
import struct
import sys
import tempfile
import zlib

import h5py
import hdf5plugin
import numpy as np

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "filters",
                   "vectors.bin.gz")

_zstd = ctypes.CDLL("libzstd.so.1")
_zstd.ZSTD_createCCtx.restype = ctypes.c_void_p
_zstd.ZSTD_freeCCtx.argtypes = [ctypes.c_void_p]
_zstd.ZSTD_CCtx_setParameter.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
_zstd.ZSTD_CCtx_setParameter.restype = ctypes.c_size_t
_zstd.ZSTD_compress2.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t,
                                 ctypes.c_char_p, ctypes.c_size_t]
_zstd.ZSTD_compress2.restype = ctypes.c_size_t
_zstd.ZSTD_compressBound.argtypes = [ctypes.c_size_t]
_zstd.ZSTD_compressBound.restype = ctypes.c_size_t
_zstd.ZSTD_isError.argtypes = [ctypes.c_size_t]
ZSTD_c_compressionLevel, ZSTD_c_checksumFlag, ZSTD_c_contentSizeFlag = 100, 201, 200


def zstd_frame(data, level, content_size=True, checksum=False):
    cctx = _zstd.ZSTD_createCCtx()
    try:
        _zstd.ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level)
        _zstd.ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, int(content_size))
        _zstd.ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, int(checksum))
        cap = _zstd.ZSTD_compressBound(len(data))
        buf = ctypes.create_string_buffer(cap)
        n = _zstd.ZSTD_compress2(cctx, buf, cap, data, len(data))
        assert not _zstd.ZSTD_isError(n)
        return buf.raw[:n]
    finally:
        _zstd.ZSTD_freeCCtx(cctx)


def shuffle_bytes(data, element_size):
    """HDF5's shuffle: byte j of every element together, leftovers as-is."""
    n = len(data) // element_size
    if element_size <= 1 or n <= 1:
        return data
    body = np.frombuffer(data[:n * element_size], dtype=np.uint8)
    return body.reshape(n, element_size).T.tobytes() + data[n * element_size:]


def smooth(shape, dtype, seed):
    """Compressible but not trivial data: waves plus a little noise."""
    rng = np.random.default_rng(seed)
    size = int(np.prod(shape))
    x = np.arange(size, dtype=np.float64)
    # Whole and quarter values keep most mantissa bits zero, so the chunks
    # compress as real measurements do and the vectors file stays small.
    v = np.round(800.0 * np.sin(x / 97.0) + 200.0 * np.cos(x / 13.0)) / 4.0
    v += rng.integers(-1, 2, size)
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return v.astype(dt).reshape(shape)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        span = float(info.max) - float(info.min)
        scaled = (v - v.min()) / (v.max() - v.min()) * span * 0.05 + float(info.min) + span * 0.3
        return scaled.astype(dt).reshape(shape)
    raise ValueError(dtype)


class Vectors:
    def __init__(self):
        self.blobs = []
        self.blob_index = {}
        self.vectors = []
        self.pending = []

    def blob(self, data):
        data = bytes(data)
        if data not in self.blob_index:
            self.blob_index[data] = len(self.blobs)
            self.blobs.append(data)
        return self.blob_index[data]

    def add(self, name, ds, offset, expected=None):
        """Notes the chunk of ds at element offset `offset`, to extract once
        the file has been closed and opened again: HDF5 1.10 keeps a chunk
        written by write_direct_chunk in its cache with a filter mask of 0,
        so until the file is reopened it reports (and decodes) it wrongly."""
        self.pending.append((name, ds.name, offset, expected))

    def extract(self, f):
        for name, path, offset, expected in self.pending:
            self.extract_one(name, f[path], offset, expected)

    def extract_one(self, name, ds, offset, expected):
        mask, stored = ds.id.read_direct_chunk(offset)
        chunk = ds.chunks
        sel = tuple(slice(o, o + c) for o, c in zip(offset, chunk))
        if expected is None:
            expected = np.ascontiguousarray(ds[sel]).tobytes()
        raw_size = int(np.prod(chunk)) * ds.dtype.itemsize
        assert len(expected) == raw_size, (name, len(expected), raw_size)
        plist = ds.id.get_create_plist()
        filters = []
        for i in range(plist.get_nfilters()):
            fid, flags, cd, fname = plist.get_filter(i)
            filters.append((fid, flags, tuple(cd), fname))
        self.vectors.append((name, ds.dtype.itemsize, raw_size, mask, self.blob(stored),
                             self.blob(expected), filters))

    def serialize(self):
        out = io.BytesIO()
        out.write(b"ZMFV0001")
        out.write(struct.pack("<I", len(self.blobs)))
        for b in self.blobs:
            out.write(struct.pack("<I", len(b)))
            out.write(b)
        out.write(struct.pack("<I", len(self.vectors)))
        for name, esize, raw, mask, sb, eb, filters in self.vectors:
            n = name.encode()
            out.write(struct.pack("<H", len(n)) + n)
            out.write(struct.pack("<IIIIII", esize, raw, mask, sb, eb, len(filters)))
            for fid, flags, cd, fname in filters:
                out.write(struct.pack("<III", fid, flags, len(cd)))
                out.write(struct.pack("<%dI" % len(cd), *cd))
                out.write(struct.pack("<H", len(fname)) + fname)
        return out.getvalue()


def low_level(f, name, shape, chunks, dtype, pipeline):
    """Creates a dataset with filters in exactly the given order. pipeline
    holds ("shuffle",), ("fletcher32",), ("deflate", level) or
    (id, flags, cd_values)."""
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_chunk(chunks)
    for step in pipeline:
        if step[0] == "shuffle":
            dcpl.set_shuffle()
        elif step[0] == "fletcher32":
            dcpl.set_fletcher32()
        elif step[0] == "deflate":
            dcpl.set_deflate(step[1])
        else:
            dcpl.set_filter(step[0], step[1], step[2])
    tid = h5py.h5t.py_create(np.dtype(dtype))
    space = h5py.h5s.create_simple(shape)
    h5py.h5d.create(f.id, name.encode(), tid, space, dcpl=dcpl)
    return f[name]


def main():
    v = Vectors()
    OPT = h5py.h5z.FLAG_OPTIONAL
    with tempfile.TemporaryDirectory() as tmp:
        f = h5py.File(os.path.join(tmp, "v.h5"), "w", libver="earliest")

        f4 = smooth((64, 64), "f4", 1)  # 32x32 chunks: 4 KiB
        for level in (1, 9):
            ds = f.create_dataset("deflate%d" % level, data=f4, chunks=(32, 32),
                                  compression="gzip", compression_opts=level)
            v.add("deflate%d_f4" % level, ds, (0, 0))
            v.add("deflate%d_f4_b" % level, ds, (32, 32))

        # A bigger chunk (32 KiB) so inflate runs over several blocks.
        big = smooth((8192,), "f4", 2)
        ds = f.create_dataset("deflate_big", data=big, chunks=(8192,), compression="gzip",
                              compression_opts=6)
        v.add("deflate6_f4_32k", ds, (0,))

        for dt, n in (("u1", 3000), ("i2", 2000), ("f4", 1500), ("f8", 1000)):
            a = smooth((n * 2,), dt, 3)
            ds = f.create_dataset("shuf_defl_" + dt, data=a, chunks=(n,), shuffle=True,
                                  compression="gzip", compression_opts=4)
            v.add("shuffle_deflate_" + dt, ds, (n,))
            ds = f.create_dataset("shuf_" + dt, data=a, chunks=(n,), shuffle=True)
            v.add("shuffle_only_" + dt, ds, (0,))

        # Fletcher32 before shuffle: shuffle sees raw + 4 bytes, which is not a
        # multiple of the element size, so HDF5's leftover handling runs.
        a8 = smooth((1000,), "f8", 4)
        ds = low_level(f, "fl_shuf_defl_f8", (1000,), (500,), "f8",
                       [("fletcher32",), ("shuffle",), ("deflate", 5)])
        ds[...] = a8
        v.add("fletcher32_shuffle_deflate_f8", ds, (500,))
        s3 = np.array([b"%03d" % (i % 1000) for i in range(999)], dtype="S3")
        ds = low_level(f, "fl_shuf_s3", (999,), (333,), "S3", [("fletcher32",), ("shuffle",)])
        ds[...] = s3
        v.add("fletcher32_shuffle_S3", ds, (333,))
        ds = low_level(f, "fl_shuf_defl_s3", (999,), (333,), "S3",
                       [("fletcher32",), ("shuffle",), ("deflate", 6)])
        ds[...] = s3
        v.add("fletcher32_shuffle_deflate_S3", ds, (0,))
        cmp_t = np.dtype([("a", "<i4"), ("b", "<f8"), ("c", "u1")])  # 13 bytes
        comp = np.zeros(600, dtype=cmp_t)
        comp["a"] = np.arange(600)
        comp["b"] = smooth((600,), "f8", 5)
        comp["c"] = np.arange(600) % 7
        ds = low_level(f, "fl_shuf_defl_cmp", (600,), (300,), cmp_t,
                       [("fletcher32",), ("shuffle",), ("deflate", 6)])
        ds[...] = comp
        v.add("fletcher32_shuffle_deflate_compound13", ds, (300,))

        # Fletcher32 alone, with odd and even byte counts.
        u1 = smooth((2002,), "u1", 6)
        ds = f.create_dataset("fl_u1", data=u1, chunks=(1001,), fletcher32=True)
        v.add("fletcher32_u1_odd", ds, (1001,))
        ds = f.create_dataset("fl_f4", data=f4, chunks=(32, 32), fletcher32=True)
        v.add("fletcher32_f4", ds, (0, 32))
        ds = f.create_dataset("shuf_defl_fl_f4", data=f4, chunks=(32, 32), shuffle=True,
                              compression="gzip", fletcher32=True)
        v.add("shuffle_deflate_fletcher32_f4", ds, (32, 0))

        # LZF, including a chunk it cannot shrink (stored raw, mask bit set).
        ds = f.create_dataset("lzf_f4", data=f4, chunks=(32, 32), compression="lzf")
        v.add("lzf_f4", ds, (0, 0))
        i2 = smooth((4096,), "i2", 7)
        ds = f.create_dataset("shuf_lzf_i2", data=i2, chunks=(2048,), shuffle=True,
                              compression="lzf")
        v.add("shuffle_lzf_i2", ds, (2048,))
        noise = np.random.default_rng(8).integers(0, 256, 4096, dtype=np.uint8)
        ds = f.create_dataset("lzf_noise", data=noise, chunks=(2048,), compression="lzf")
        v.add("lzf_incompressible", ds, (0,))
        ds = f.create_dataset("shuf_lzf_fl", data=f4, chunks=(32, 32), shuffle=True,
                              compression="lzf", fletcher32=True)
        v.add("shuffle_lzf_fletcher32_f4", ds, (32, 32))
        big8 = smooth((4096,), "f8", 9)
        ds = f.create_dataset("lzf_big", data=big8, chunks=(4096,), compression="lzf")
        v.add("lzf_f8_32k", ds, (0,))

        # Two compressors in a row: the middle size is unknown to the decoder.
        ds = low_level(f, "defl_lzf", (4096,), (2048,), "i2", [("deflate", 3), (32000, OPT, ())])
        ds[...] = i2
        v.add("deflate_lzf_i2", ds, (0,))
        ds = low_level(f, "lzf_defl", (4096,), (2048,), "i2", [(32000, OPT, ()), ("deflate", 3)])
        ds[...] = i2
        v.add("lzf_deflate_i2", ds, (2048,))

        # Blosc (hdf5plugin's filter): several inner codecs and shuffles.
        B = hdf5plugin.Blosc
        for name, dt, cname, shuf in (("lz4_shuffle_f4", "f4", "lz4", B.SHUFFLE),
                                      ("lz4_bitshuffle_f8", "f8", "lz4", B.BITSHUFFLE),
                                      ("zstd_shuffle_i2", "i2", "zstd", B.SHUFFLE),
                                      ("zstd_bitshuffle_f4", "f4", "zstd", B.BITSHUFFLE),
                                      ("blosclz_noshuffle_u1", "u1", "blosclz", B.NOSHUFFLE),
                                      ("zlib_shuffle_f8", "f8", "zlib", B.SHUFFLE),
                                      ("lz4hc_shuffle_i2", "i2", "lz4hc", B.SHUFFLE)):
            a = smooth((4096,), dt, 10)
            ds = f.create_dataset("blosc_" + name, data=a, chunks=(2048,),
                                  **B(cname=cname, clevel=5, shuffle=shuf))
            v.add("blosc_" + name, ds, (2048,))
        ds = f.create_dataset("blosc_noise", data=noise, chunks=(2048,),
                              **B(cname="lz4", clevel=5, shuffle=B.NOSHUFFLE))
        v.add("blosc_lz4_incompressible_u1", ds, (0,))
        # Blosc picks 32 KiB blocks for zstd at level 1: two blocks here.
        a = smooth((16384,), "f4", 11)
        ds = f.create_dataset("blosc_big", data=a, chunks=(16384,),
                              **B(cname="zstd", clevel=1, shuffle=B.SHUFFLE))
        v.add("blosc_zstd1_shuffle_f4_64k", ds, (0,))
        ds = f.create_dataset("blosc_fl", data=f4, chunks=(32, 32), fletcher32=True,
                              **B(cname="zstd", clevel=3, shuffle=B.SHUFFLE))
        v.add("blosc_zstd_fletcher32_f4", ds, (0, 32))

        # Zstd (32015) written as the zstd filter writes it: a bare frame.
        zsrc = smooth((2048,), "f4", 12)
        for name, kw, pipeline in (("zstd_f4", {}, []),
                                   ("zstd_nosize_f4", {"content_size": False}, []),
                                   ("zstd_checksum_f4", {"checksum": True}, []),
                                   ("shuffle_zstd_f4", {}, [("shuffle",)]),
                                   ("zstd_fletcher32_f4", {}, ["fl"])):
            steps = [s for s in pipeline if s != "fl"] + [(32015, OPT, (3,))]
            if "fl" in pipeline:
                steps.append(("fletcher32",))
            ds = low_level(f, name, (2048,), (2048,), "f4", steps)
            raw = zsrc.tobytes()
            data = shuffle_bytes(raw, 4) if ("shuffle",) in pipeline else raw
            stored = zstd_frame(data, 3, **kw)
            if "fl" in pipeline:
                # Fletcher32 appended by HDF5's own code path: compute it in
                # the same way and check it against HDF5 below.
                stored += struct.pack("<I", fletcher32(stored))
            ds.id.write_direct_chunk((0,), stored, 0)
            v.add(name, ds, (0,), expected=raw)
        # A deflate chunk inside zstd: zstd's output size is not known ahead.
        ds = low_level(f, "deflate_zstd", (2048,), (2048,), "f4",
                       [("deflate", 6), (32015, OPT, (3,))])
        raw = zsrc.tobytes()
        ds.id.write_direct_chunk((0,), zstd_frame(zlib.compress(raw, 6), 5, content_size=False), 0)
        v.add("deflate_zstd_nosize_f4", ds, (0,), expected=raw)

        # Filter masks written by hand, read back through HDF5: deflate
        # skipped (raw bytes), and deflate skipped under shuffle.
        ds = f.create_dataset("mask_defl", data=f4, chunks=(32, 32), compression="gzip")
        chunk = np.ascontiguousarray(f4[32:64, 0:32]) + 1
        ds.id.write_direct_chunk((32, 0), chunk.tobytes(), 1)
        v.add("deflate_masked", ds, (32, 0))
        ds = f.create_dataset("mask_shuf_defl", data=f4, chunks=(32, 32), shuffle=True,
                              compression="gzip")
        chunk = np.ascontiguousarray(f4[0:32, 32:64]) * 2
        ds.id.write_direct_chunk((0, 32), shuffle_bytes(chunk.tobytes(), 4), 2)
        v.add("shuffle_deflate_mask_deflate", ds, (0, 32))
        ds.id.write_direct_chunk((32, 32), zlib.compress(chunk.tobytes(), 6), 1)
        v.add("shuffle_deflate_mask_shuffle", ds, (32, 32))
        ds = f.create_dataset("mask_all", data=f4, chunks=(32, 32), shuffle=True,
                              compression="gzip", fletcher32=True)
        ds.id.write_direct_chunk((0, 0), chunk.tobytes(), 7)
        v.add("shuffle_deflate_fletcher32_mask_all", ds, (0, 0))

        # Cross-check: the zstd chunks' fletcher32 matches HDF5's own.
        ds = f.create_dataset("fl_check", data=zsrc, chunks=(2048,), fletcher32=True)
        stored = ds.id.read_direct_chunk((0,))[1]
        assert stored[-4:] == struct.pack("<I", fletcher32(stored[:-4]))
        path = f.filename
        f.close()
        with h5py.File(path, "r") as f:
            v.extract(f)
    by_name = {vec[0]: vec for vec in v.vectors}
    assert by_name["lzf_incompressible"][3] == 1, "lzf on noise should have been skipped"
    assert by_name["shuffle_deflate_fletcher32_mask_all"][3] == 7

    data = v.serialize()
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=9, mtime=0, filename="") as g:
        g.write(data)
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "wb") as out:
        out.write(buf.getvalue())
    print("%d vectors, %d blobs, %d bytes raw, %d bytes gzipped -> %s"
          % (len(v.vectors), len(v.blobs), len(data), len(buf.getvalue()),
             os.path.normpath(OUT)), file=sys.stderr)


def fletcher32(data):
    """H5_checksum_fletcher32 (HDF5's variant: big-endian 16-bit words,
    sums start at 0, an odd last byte is the high half of a word)."""
    sum1 = sum2 = 0
    n = len(data) // 2
    for i in range(n):
        sum1 = (sum1 + ((data[2 * i] << 8) | data[2 * i + 1]))
        sum2 = (sum2 + sum1)
        if (i + 1) % 360 == 0:
            sum1 = (sum1 & 0xFFFF) + (sum1 >> 16)
            sum2 = (sum2 & 0xFFFF) + (sum2 >> 16)
    if n % 360:
        sum1 = (sum1 & 0xFFFF) + (sum1 >> 16)
        sum2 = (sum2 & 0xFFFF) + (sum2 >> 16)
    if len(data) % 2:
        sum1 += data[-1] << 8
        sum2 += sum1
        sum1 = (sum1 & 0xFFFF) + (sum1 >> 16)
        sum2 = (sum2 & 0xFFFF) + (sum2 >> 16)
    sum1 = (sum1 & 0xFFFF) + (sum1 >> 16)
    sum2 = (sum2 & 0xFFFF) + (sum2 >> 16)
    return (sum2 << 16) | sum1


if __name__ == "__main__":
    main()
