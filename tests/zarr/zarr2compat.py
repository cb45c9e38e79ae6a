"""zarr-python 2.13's ways of writing a Zarr v2 array, for the tests' helpers.

zarrmount writes Zarr v2 stores as zarr-python 2.13 (Debian 12) with numcodecs 0.11 writes
them: its .zarray JSON, its chunk padding and encoding.  Debian 13 has zarr-python 3,
which writes v2 metadata differently (and numcodecs 0.16, whose codec configurations have
more keys), so zarr 2's behaviour, the reference for our v2 documents, is reproduced
here, following zarr 2.13's source:

- json_dumps:      zarr.util.json_dumps (indent 4, sorted keys, ASCII escapes, ": " and
                   "," separators, numbers through NumberEncoder), as bytes;
- array_document:  what zarr.create writes as .zarray (storage._init_array_metadata and
                   meta.Metadata2.encode_array_metadata), with numcodecs 0.11's
                   get_config() for the compressor and filters;
- array_files:     .zarray and every chunk that `z[...] = values` writes into a fresh
                   store (core.Array._process_for_setitem and _encode_chunk: whole chunks
                   as they are, edge chunks padded with the fill value, zeros when it is
                   null; all chunks written, write_empty_chunks being on in 2.13; keys
                   joined with ".").

Where zarr-python 2 is installed, check_chunks.py and dump_documents.py compare these with
zarr's own output, so a difference in this reproduction is a test failure there.
"""
import itertools
import json
import numbers

import numpy as np


class NumberEncoder(json.JSONEncoder):
    """zarr.util.NumberEncoder: numpy integers and reals as JSON numbers."""

    def default(self, o):
        if isinstance(o, numbers.Integral):
            return int(o)
        if isinstance(o, numbers.Real):
            return float(o)
        return json.JSONEncoder.default(self, o)


def json_dumps(o):
    """zarr.util.json_dumps: JSON in zarr 2's consistent, human-readable way (bytes)."""
    return json.dumps(o, indent=4, sort_keys=True, ensure_ascii=True, separators=(',', ': '),
                      cls=NumberEncoder).encode('ascii')


def codec_config(codec):
    """A codec's configuration as numcodecs 0.11 gives it (numcodecs 0.16 adds Blosc's
    "typesize" and Zstd's "checksum", which zarr 2.13 never wrote)."""
    if codec is None:
        return None
    name = codec.codec_id
    if name == 'blosc':
        return {'id': 'blosc', 'cname': codec.cname if isinstance(codec.cname, str)
                else codec.cname.decode('ascii'), 'clevel': int(codec.clevel),
                'shuffle': int(codec.shuffle), 'blocksize': int(codec.blocksize)}
    if name == 'zstd':
        return {'id': 'zstd', 'level': int(codec.level)}
    if name == 'vlen-utf8':
        return {'id': 'vlen-utf8'}
    raise ValueError(f'no numcodecs 0.11 configuration known for codec {name!r}')


def normalize_fill_value(fill_value, dtype):
    """zarr.util.normalize_fill_value."""
    if fill_value is None or dtype.hasobject:
        return fill_value
    if fill_value == 0:
        return np.zeros((), dtype=dtype)[()]
    if dtype.kind == 'U':
        if not isinstance(fill_value, str):
            raise ValueError(f'fill_value {fill_value!r} is not valid for dtype {dtype}')
        return fill_value
    return np.array(fill_value, dtype=dtype)[()]


def encode_fill_value(v, dtype):
    """zarr.meta.Metadata2.encode_fill_value for the dtypes zarrmount writes."""
    if v is None:
        return v
    if dtype.kind == 'f':
        if np.isnan(v):
            return 'NaN'
        if np.isposinf(v):
            return 'Infinity'
        if np.isneginf(v):
            return '-Infinity'
        return float(v)
    if dtype.kind in 'ui':
        return int(v)
    if dtype.kind == 'b':
        return bool(v)
    if dtype.kind in 'SV':
        raise ValueError(f'fill values of dtype {dtype} are not reproduced here')
    return v


def array_document(shape, chunks, dtype, compressor, fill_value, object_codec=None):
    """The .zarray bytes zarr 2.13 writes for zarr.create(shape, chunks, dtype, compressor,
    fill_value, object_codec) with order "C" and no other filters."""
    dtype = np.dtype(dtype)
    shape = tuple(int(s) for s in shape)
    chunks = tuple(int(c) for c in chunks)
    fill_value = normalize_fill_value(fill_value, dtype)
    if shape == ():
        compressor = None  # zarr 2 never compresses a 0-d array
    filters = None
    if dtype.hasobject:
        if object_codec is None:
            raise ValueError('missing object_codec for object array')
        filters = [codec_config(object_codec)]
    meta = dict(zarr_format=2, shape=shape, chunks=chunks, dtype=dtype.str,
                compressor=codec_config(compressor),
                fill_value=encode_fill_value(fill_value, dtype), order='C', filters=filters)
    return json_dumps(meta)


def array_files(values, chunks, compressor, fill_value, object_codec=None):
    """{name: bytes} of what zarr 2.13 writes for an array of `values` (a numpy array of
    the array's dtype and shape) created with these settings and then set whole."""
    dtype = values.dtype
    shape = values.shape
    chunks = tuple(int(c) for c in chunks)
    files = {'.zarray': array_document(shape, chunks, dtype, compressor, fill_value,
                                       object_codec)}
    fill = normalize_fill_value(fill_value, dtype)
    if shape == ():
        compressor = None
    grid = [-(-s // c) for s, c in zip(shape, chunks)]
    for coords in itertools.product(*[range(g) for g in grid]):
        region = tuple(slice(i * c, min((i + 1) * c, s)) for i, c, s in zip(coords, chunks, shape))
        part = values[region + (Ellipsis,)]  # an array even where values is 0-d
        if part.shape == chunks:
            chunk = part.astype(dtype, order='C', copy=False)
        else:
            if fill is not None:
                chunk = np.empty(chunks, dtype=dtype, order='C')
                chunk.fill(fill)
            elif dtype == object:
                chunk = np.empty(chunks, dtype=dtype, order='C')
            else:
                chunk = np.zeros(chunks, dtype=dtype, order='C')
            chunk[tuple(slice(0, r.stop - r.start) for r in region)] = part
        if object_codec is not None:
            chunk = object_codec.encode(chunk)
        data = compressor.encode(chunk) if compressor is not None else chunk
        if isinstance(data, np.ndarray):
            data = data.tobytes(order='C')
        files['.'.join(str(i) for i in coords) if coords else '0'] = bytes(data)
    return files
