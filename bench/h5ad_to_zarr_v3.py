#!/usr/bin/python3
"""Writes an .h5ad's AnnData again as a Zarr v3 sharded directory store, as anndata 0.13 with
zarr-python 3 lays it out (its defaults: bytes + zstd level 0 inside sharding_indexed, index
at the end with crc32c, vlen-utf8 strings, consolidated metadata in the root zarr.json).

    h5ad_to_zarr_v3.py SOURCE.h5ad OUT.zarr [--inner N] [--shard M]

Run it where zarr-python 3 is (Debian 13: bash scripts/debian-chroot 13 /usr/bin/python3 ...).
Every group and dataset of the file is copied with its attributes; a 1-d numeric dataset gets
inner chunks of N values (default: the dataset's own HDF5 chunks, else 65,536) and shards of M
inner chunks (default 16); a 2-d one inner chunks of the HDF5 chunk rows (else 4,096 rows) by
all columns, 16 a shard; strings one chunk, as anndata's auto-sharding gives at these sizes.
Values are copied a shard at a time: memory stays about a shard's worth.
"""
import argparse
import json
import shutil

import h5py
import numpy as np
import zarr
from zarr.codecs import ZstdCodec


def attrs_of(obj):
    out = {}
    for k, v in obj.attrs.items():
        if isinstance(v, bytes):
            v = v.decode()
        elif isinstance(v, np.ndarray):
            v = [x.decode() if isinstance(x, bytes) else x.item() if hasattr(x, "item") else x for x in v]
        elif isinstance(v, np.generic):
            v = v.item()
        out[k] = v
    return out


def copy(h5, group, inner_1d, per_shard):
    for name, item in h5.items():
        if isinstance(item, h5py.Group):
            sub = group.create_group(name)
            sub.attrs.update(attrs_of(item))
            copy(item, sub, inner_1d, per_shard)
            continue
        attrs = attrs_of(item)
        if item.dtype.kind in "OSU":
            values = np.array([v.decode() if isinstance(v, bytes) else str(v) for v in np.ravel(item[()])],
                              dtype=object).reshape(item.shape)
            a = group.create_array(name, shape=item.shape, dtype=str,
                                   chunks=item.shape if item.ndim else None)
            a[...] = values
            a.attrs.update(attrs)
            continue
        dtype = np.dtype(bool) if item.dtype.kind == "b" or h5py.check_enum_dtype(item.dtype) else item.dtype
        if item.ndim == 0:
            a = group.create_array(name, shape=(), dtype=dtype, compressors=ZstdCodec(level=0))
            a[...] = item[()]
            a.attrs.update(attrs)
            continue
        rows = (item.chunks[0] if item.chunks else (inner_1d if item.ndim == 1 else 4096))
        rows = max(1, min(rows, item.shape[0]))
        chunks = (rows,) + tuple(item.shape[1:])
        shards = (min(item.shape[0], rows * per_shard) if item.shape[0] else 1,) + tuple(item.shape[1:])
        shards = (-(-shards[0] // rows) * rows,) + shards[1:]
        a = group.create_array(name, shape=item.shape, dtype=dtype, chunks=chunks, shards=shards,
                               compressors=ZstdCodec(level=0))
        step = shards[0]
        for start in range(0, item.shape[0], step):
            a[start:start + step] = item[start:start + step].astype(dtype)
        a.attrs.update(attrs)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("source")
    p.add_argument("out")
    p.add_argument("--inner", type=int, default=65536)
    p.add_argument("--shard", type=int, default=16)
    a = p.parse_args()
    shutil.rmtree(a.out, ignore_errors=True)
    root = zarr.open_group(a.out, mode="w", zarr_format=3)
    with h5py.File(a.source, "r") as h5:
        root.attrs.update(attrs_of(h5))
        copy(h5, root, a.inner, a.shard)
    zarr.consolidate_metadata(a.out)
    print(json.dumps({"out": a.out}))


if __name__ == "__main__":
    main()
