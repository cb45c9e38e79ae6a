#!/usr/bin/python3
"""Reads the Zarr stores tests/test_zarr.c wrote and says, as one JSON object
on stdout, what zarr-python (2.13 or 3), numcodecs and anndata make of them.

    /usr/bin/python3 tests/zarr/check_chunks.py DIRECTORY [--part arrays|anndata]

DIRECTORY/manifest.json lists the arrays the C test wrote:
    {"arrays": [{"path": "store/X", "shape": [7, 5], "chunks": [3, 2],
                 "dtype": "<f4", "fill": 0.0, "codec": "blosc:zstd:1" or null,
                 "vlen": false, "values": "values/3"}, ...],
     "anndata": [{"path": "adata.zarr", "expected": "adata.json"}]}
Array values are raw little-endian C-order bytes, or a JSON list of strings
for vlen arrays, or a JSON string for "<U" scalars.

The report has "zarr" (the installed zarr-python's version), "reference"
(what wrote the reference files) and, per part asked for (both by default):

For each array ("arrays")
- "read": whether the installed zarr-python's open_array reads back exactly
  the values (numcodecs decodes every chunk);
- "identical": whether zarr-python 2.13, writing the same values with the
  same shape, chunks, dtype, fill value, compressor and filters into a fresh
  store, writes byte for byte the same files (.zarray and every chunk), with
  blosc's use_threads off as numcodecs' blosc_compress_ctx path. Where
  zarr-python 2 is installed it writes them itself; with zarr-python 3 the
  files come from zarr2compat.py, which reproduces zarr 2.13's writing
  (zarr 3 writes v2 metadata its own way);
- "different": the file names that differ, "error" on an exception, and
  (with zarr-python 2) "reproduction_differs": the files zarr2compat.py
  writes otherwise than zarr 2 itself, which must be none.
For each AnnData store ("anndata"): whether anndata.read_zarr reads the
expected X, obs/var names and columns and uns values. Where anndata is not
installed, "anndata" is absent and "anndata_skip" (the release does not
package it) or "anndata_fail" (it does, but it is not installed) says why.
"""
import json
import os
import sys
import traceback

import numpy as np
import zarr
from numcodecs import Blosc, VLenUTF8, Zstd, blosc

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.append(os.path.join(os.path.dirname(HERE), 'source'))
import zarr2compat  # noqa: E402
import optional_modules  # noqa: E402 (tests/source/optional_modules.py)

blosc.use_threads = False
ZARR2 = int(zarr.__version__.split('.')[0]) == 2


def codec_of(text):
    if text is None or text == 'none':
        return None
    parts = text.split(':')
    if parts[0] == 'zstd':
        return Zstd(level=int(parts[1]))
    # zarrmount's blosc block: a whole 1 MiB chunk (ZM_BLOSC_BLOCKSIZE); the
    # shuffle a fourth part, bytes when unsaid (as numcodecs' Blosc).
    shuffles = {'shuffle': Blosc.SHUFFLE, 'bitshuffle': Blosc.BITSHUFFLE, 'noshuffle': Blosc.NOSHUFFLE}
    shuffle = shuffles[parts[3]] if len(parts) > 3 else Blosc.SHUFFLE
    return Blosc(cname=parts[1], clevel=int(parts[2]), shuffle=shuffle, blocksize=1 << 20)


def load_values(directory, entry):
    path = os.path.join(directory, entry['values'])
    if entry['vlen']:
        with open(path, encoding='utf-8') as f:
            items = json.load(f)
        values = np.empty(len(items), dtype=object)
        values[:] = items
        return values.reshape(entry['shape'])
    if entry['dtype'].startswith('<U'):
        with open(path, encoding='utf-8') as f:
            return np.array(json.load(f), dtype=entry['dtype'])
    with open(path, 'rb') as f:
        data = f.read()
    return np.frombuffer(data, dtype=entry['dtype']).reshape(entry['shape'])


def store_files(path):
    files = {}
    for name in os.listdir(path):
        full = os.path.join(path, name)
        if os.path.isfile(full):
            with open(full, 'rb') as f:
                files[name] = f.read()
    return files


def zarr2_files(entry, values):
    """The files zarr-python 2 itself writes for the entry (zarr 2 only)."""
    store = zarr.MemoryStore()
    kwargs = dict(shape=tuple(entry['shape']), chunks=tuple(entry['chunks']) or True,
                  dtype=object if entry['vlen'] else entry['dtype'],
                  compressor=codec_of(entry['codec']), fill_value=entry['fill'],
                  store=store)
    if entry['vlen']:
        kwargs['object_codec'] = VLenUTF8()
    ref = zarr.create(**kwargs)
    ref[...] = values
    return {k: bytes(v) for k, v in store.items()}


def reproduced_files(entry, values):
    """The files zarr2compat.py says zarr 2.13 writes for the entry."""
    return zarr2compat.array_files(values, entry['chunks'], codec_of(entry['codec']),
                                   entry['fill'], VLenUTF8() if entry['vlen'] else None)


def differing(a, b):
    return [n for n in sorted(set(a) | set(b)) if a.get(n) != b.get(n)]


def read_back(path):
    """(the array's dtype as its metadata says, its values as a numpy array). zarr 3.4
    gives a 0-d array's value as a numpy scalar (np.str_('') has dtype <U0), so the dtype
    is the array's, not the value's."""
    if ZARR2:
        z = zarr.open_array(path, mode='r')
    else:
        z = zarr.open_array(store=path, mode='r', zarr_format=2)
    return np.dtype(z.dtype), np.asarray(z[...])


def check_array(directory, entry):
    result = {'path': entry['path'], 'read': False, 'identical': False, 'different': []}
    try:
        values = load_values(directory, entry)
        path = os.path.join(directory, entry['path'])
        dtype, got = read_back(path)
        if entry['vlen']:
            result['read'] = got.shape == values.shape and all(
                a == b for a, b in zip(got.ravel().tolist(), values.ravel().tolist()))
        else:
            result['read'] = (dtype == values.dtype and got.shape == values.shape and
                              got.astype(dtype).tobytes() == values.tobytes())
        theirs = reproduced_files(entry, values)
        if ZARR2:
            written = zarr2_files(entry, values)
            result['reproduction_differs'] = differing(written, theirs)
            theirs = written
        ours = store_files(path)
        ours.pop('.zattrs', None)
        result['different'] = differing(theirs, ours)
        result['identical'] = not result['different']
        result['files'] = len(set(theirs) | set(ours))
    except Exception:
        result['error'] = traceback.format_exc()
    return result


def check_anndata(directory, entry):
    import anndata
    result = {'path': entry['path'], 'read': False, 'problems': []}
    try:
        with open(os.path.join(directory, entry['expected']), encoding='utf-8') as f:
            expected = json.load(f)
        adata = anndata.read_zarr(os.path.join(directory, entry['path']))
        problems = result['problems']
        X = np.asarray(adata.X)
        if X.dtype != np.float32 or X.tolist() != expected['X']:
            problems.append('X differs: %r' % (X.tolist(),))
        if list(adata.obs_names) != expected['obs_names']:
            problems.append('obs_names differ: %r' % list(adata.obs_names))
        if list(adata.var_names) != expected['var_names']:
            problems.append('var_names differ: %r' % list(adata.var_names))
        if list(adata.obs.columns) != list(expected['obs']):
            problems.append('obs columns differ: %r' % list(adata.obs.columns))
        for column, want in expected['obs'].items():
            if column in adata.obs and adata.obs[column].tolist() != want:
                problems.append('obs[%s] differs: %r' % (column, adata.obs[column].tolist()))
        for key, want in expected['uns'].items():
            got = adata.uns.get(key)
            if isinstance(got, np.generic):
                got = got.item()
            if got != want or type(got) is not type(want):
                problems.append('uns[%s] is %r, not %r' % (key, got, want))
        result['read'] = not problems
    except Exception:
        result['error'] = traceback.format_exc()
    return result


def main():
    directory = sys.argv[1]
    parts = ('arrays', 'anndata')
    if len(sys.argv) == 4 and sys.argv[2] == '--part' and sys.argv[3] in parts:
        parts = (sys.argv[3],)
    elif len(sys.argv) != 2:
        sys.exit('usage: check_chunks.py DIRECTORY [--part arrays|anndata]')
    with open(os.path.join(directory, 'manifest.json'), encoding='utf-8') as f:
        manifest = json.load(f)
    report = {'zarr': zarr.__version__,
              'reference': 'zarr-python %s' % zarr.__version__ if ZARR2 else
              'zarr 2.13 as tests/zarr/zarr2compat.py reproduces it (zarr-python %s is '
              'installed)' % zarr.__version__}
    if 'arrays' in parts:
        report['arrays'] = [check_array(directory, e) for e in manifest.get('arrays', [])]
    if 'anndata' in parts:
        status = optional_modules.missing('anndata', 'python3-anndata')
        if status is None:
            report['anndata'] = [check_anndata(directory, e) for e in manifest.get('anndata', [])]
        else:
            report['anndata_' + status[0]] = status[1]
    json.dump(report, sys.stdout)


if __name__ == '__main__':
    main()
