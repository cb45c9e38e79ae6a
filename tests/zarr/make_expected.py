#!/usr/bin/python3
"""Writes tests/zarr/expected.h: what zarr-python 2.13, numcodecs 0.11,
numpy and anndata 0.8 produce, for tests/test_zarr.c to compare against.

    /usr/bin/python3 tests/zarr/make_expected.py > tests/zarr/expected.h

Run it with Debian's /usr/bin/python3 (python3-zarr 2.13.6, python3-numcodecs
0.11, python3-anndata 0.8): the point is what those versions write.

The header holds:
- documents: every .zgroup, .zarray and .zattrs anndata's write_zarr writes
  for a store like shared/reference's (the exact file bytes), and hand-made
  documents with tricky strings, numbers and nesting, dumped with zarr's own
  json_dumps; each with its content as compact JSON for jansson to parse;
- array_documents: the .zarray zarr-python writes for an array's shape,
  chunks, dtype, fill value, compressor and filters (from the same anndata
  store, and from zarr.create for other codecs and fills);
- vlen_vectors: numcodecs' VLenUTF8().encode of lists of strings;
- utf32_vectors: numpy's bytes and dtype for 0-d strings (np.array(s)).

numcodecs' compressed bytes are not here: they depend on the compression
libraries' versions, and tests/zarr/make_codec_vectors.py records them per
version set (tests/zarr/codec-vectors/).
"""
import json
import os
import shutil
import sys
import tempfile

import anndata
import numcodecs
import numpy as np
import pandas as pd
import scipy.sparse as sp
import zarr
from numcodecs import Blosc, VLenUTF8, Zstd
from zarr.util import json_dumps



# ---- C literals -------------------------------------------------------------

def c_string(data):
    """A C string literal for bytes (or str, as UTF-8): printable ASCII as is,
    the usual short escapes, anything else as three-digit octal (never
    greedy, unlike \\x), split over lines between escapes."""
    if isinstance(data, str):
        data = data.encode('utf-8', 'surrogatepass')
    short = {ord('"'): '\\"', ord('\\'): '\\\\', ord('?'): '\\?', ord('\n'): '\\n',
             ord('\t'): '\\t'}
    tokens = []
    for b in data:
        if b in short:
            tokens.append(short[b])
        elif 0x20 <= b < 0x7f:
            tokens.append(chr(b))
        else:
            tokens.append('\\%03o' % b)
    pieces, line = [], ''
    for token in tokens:
        if len(line) + len(token) > 90:
            pieces.append(line)
            line = ''
        line += token
    pieces.append(line)
    return '\n        '.join('"%s"' % p for p in pieces)


def compact(doc):
    # jansson parses this; ensure_ascii keeps the header ASCII, and
    # allow_nan=False because jansson cannot hold NaN or Infinity.
    return json.dumps(doc, ensure_ascii=True, allow_nan=False, separators=(',', ':'))


# ---- An AnnData store like shared/reference's -------------------------------

def anndata_store():
    rng = np.random.default_rng(0)
    n_obs, n_vars = 60, 40
    X = sp.random(n_obs, n_vars, density=0.1, format='csr', dtype=np.float32, random_state=0)
    cell_types = np.array(['T cell', 'B cell', 'NK', 'Monocyte'])
    obs = pd.DataFrame({
        'cell_type': pd.Categorical(cell_types[rng.integers(0, 4, n_obs)]),
        'barcode': ['AAAC%04d-1' % i for i in range(n_obs)],
        'n_counts': rng.integers(100, 5000, n_obs).astype('i8'),
        'score': rng.normal(size=n_obs),
        'is_doublet': rng.random(n_obs) < 0.1,
    }, index=['cell_%d' % i for i in range(n_obs)])
    var = pd.DataFrame({'gene_symbol': ['G%d' % i for i in range(n_vars)]},
                       index=['ENSG%05d' % i for i in range(n_vars)])
    adata = anndata.AnnData(X=X, obs=obs, var=var)
    adata.layers['counts'] = rng.poisson(1.0, (n_obs, n_vars)).astype(np.float32)
    adata.obsm['X_umap'] = rng.normal(size=(n_obs, 2)).astype(np.float32)
    adata.obsp['connectivities'] = sp.random(n_obs, n_obs, density=0.05, format='csr',
                                             dtype=np.float32, random_state=1)
    adata.uns['cell_type_colors'] = np.array(['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728'],
                                             dtype=object)
    adata.uns['neighbors'] = {'connectivities_key': 'connectivities',
                              'params': {'method': 'umap', 'metric': 'euclidean',
                                         'n_neighbors': 15}}
    adata.uns['note'] = 'héllo'
    adata.uns['empty'] = ''
    adata.uns['emoji'] = 'cell \U0001F9EC'
    adata.uns['version'] = 3
    directory = tempfile.mkdtemp(prefix='zarrmount-expected-')
    path = os.path.join(directory, 'ref.zarr')
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        adata.write_zarr(path)
    files = []
    for root, dirs, names in os.walk(path):
        dirs.sort()
        for name in sorted(names):
            if name in ('.zgroup', '.zarray', '.zattrs'):
                full = os.path.join(root, name)
                with open(full, 'rb') as f:
                    files.append(('/' + os.path.relpath(full, path), f.read()))
    shutil.rmtree(directory)
    return files


# ---- Documents --------------------------------------------------------------

def hand_documents():
    docs = []

    def add(name, doc):
        docs.append((name, doc))

    add('empty object', {})
    add('empty list', [])
    add('empty containers nested', {'a': [], 'b': {}, 'c': [[], {}, [[]]]})
    add('scalar int', 5)
    add('scalar string', 'x')
    add('null', None)
    add('true', True)
    add('group', {'zarr_format': 2})
    add('integers', [0, -1, 1, 2 ** 31, -2 ** 31, 2 ** 53 + 1, 2 ** 63 - 1, -2 ** 63])
    add('reals', [0.0, -0.0, 1.5, 1e-05, 0.0001, 1e16, 1e15, 123456789012345678.0, 1e22, 1e-7,
                  5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, 0.1, 0.3,
                  1 / 3, -2.5e-10, 100.0, 1e+100, 9007199254740993.0, 3.14159])
    add('booleans and null', {'t': True, 'f': False, 'n': None})
    add('quotes and backslashes', {'q"uote': 'say "hi"', 'back\\slash': 'C:\\path\\',
                                  'slash': 'a/b'})
    add('control characters', {'ctl': ''.join(chr(c) for c in range(0, 32)) + '\x7f',
                               'tab\tkey': 'line\nbreak\r\n', 'bf': '\b\f'})
    add('latin and cjk', {'é': 'café', 'ü': 'naïve', '中': '细胞类型', 'ß': 'Straße'})
    add('astral', {'emoji': '\U0001F600\U0001F9EC', 'math': '\U0001D49C', 'max': '\U0010FFFF',
                   'bmp edge': '\uFFFF\uE000\uD7FF'})
    add('key order', {'b': 1, 'a': 2, 'B': 3, 'A': 4, '_index': 5, 'é': 6, 'e': 7, '': 8,
                      'ab': 9, 'a b': 10, 'aa': 11, '\U0001F600': 12, '\uFFFF': 13,
                      'Z': 14, '0': 15, '10': 16, '9': 17, '-': 18})
    add('prefix keys', {'abc': 1, 'ab': 2, 'a': 3, 'abcd': 4})
    add('deep nesting', {'a': {'b': {'c': {'d': [1, [2, [3, {'e': None}]]]}}}})
    add('dataframe attrs', {'_index': '_index', 'column-order': ['cell_type', 'barcode'],
                            'encoding-type': 'dataframe', 'encoding-version': '0.2.0'})
    add('mixed list', [1, 'two', 3.0, None, True, False, {'k': 'v'}, ['x']])
    add('long string', 'x' * 5000)
    add('all of latin-1', ''.join(chr(c) for c in range(32, 256)))
    return docs


def emit_documents(out, anndata_files):
    out.append('static const expected_document expected_documents[] = {')
    entries = []
    for path, data in anndata_files:
        doc = json.loads(data)
        # Our dumper must give the bytes anndata wrote; zarr's json_dumps
        # must too (a check on this script).
        assert json_dumps(doc) == data, path
        entries.append(('anndata ' + path, compact(doc), data))
    for name, doc in hand_documents():
        entries.append((name, compact(doc), json_dumps(doc)))
    for name, text, expected in entries:
        out.append('    {%s,\n     %s,\n     %s},' % (c_string(name), c_string(text),
                                                    c_string(expected)))
    out.append('};')


# ---- Array documents --------------------------------------------------------

def fill_kind(value):
    if value is None:
        return 'ZM_FILL_NULL'
    if value is False:
        return 'ZM_FILL_FALSE'
    if isinstance(value, str):
        assert value == ''
        return 'ZM_FILL_EMPTY_TEXT'
    if isinstance(value, float):
        assert value == 0.0
        return 'ZM_FILL_ZERO_FLOAT'
    assert value == 0 and isinstance(value, int)
    return 'ZM_FILL_ZERO_INT'


def codec_text(compressor):
    if compressor is None:
        return None
    if compressor['id'] == 'zstd':
        return 'zstd:%d' % compressor['level']
    assert compressor['id'] == 'blosc' and compressor['shuffle'] == 1
    assert compressor['blocksize'] == 0
    return 'blosc:%s:%d' % (compressor['cname'], compressor['clevel'])


def array_entry(name, data):
    meta = json.loads(data)
    assert meta['order'] == 'C' and meta['zarr_format'] == 2
    filters = meta['filters']
    assert filters in (None, [{'id': 'vlen-utf8'}])
    codec = codec_text(meta['compressor'])
    rank = len(meta['shape'])
    dims = lambda v: '{%s}' % ', '.join('%d' % x for x in v) if v else '{0}'
    return '    {%s, %d, %s, %s, %s, %s, %s, %d,\n     %s},' % (
        c_string(name), rank, dims(meta['shape']), dims(meta['chunks']), c_string(meta['dtype']),
        fill_kind(meta['fill_value']), c_string(codec) if codec else 'NULL',
        1 if filters else 0, c_string(data))


def zarr_created_arrays():
    cases = []

    def add(name, **kwargs):
        store = zarr.MemoryStore()
        zarr.create(store=store, **kwargs)
        cases.append((name, store['.zarray']))

    add('zstd 2-d f8 fill null', shape=(5, 3), chunks=(2, 2), dtype='<f8', fill_value=None,
        compressor=Zstd(level=3))
    add('default codec f4', shape=(1000000,), chunks=(125000,), dtype='<f4', fill_value=0.0,
        compressor=Blosc(cname='zstd', clevel=1, shuffle=1))
    add('no compressor i4', shape=(7,), chunks=(7,), dtype='<i4', fill_value=0, compressor=None)
    add('blosc zlib 9 bool', shape=(10,), chunks=(4,), dtype='|b1', fill_value=False,
        compressor=Blosc(cname='zlib', clevel=9, shuffle=1))
    add('blosc lz4hc 0 u1', shape=(3,), chunks=(3,), dtype='|u1', fill_value=0,
        compressor=Blosc(cname='lz4hc', clevel=0, shuffle=1))
    add('blosc blosclz strings', shape=(4,), chunks=(2,), dtype=object,
        object_codec=VLenUTF8(), compressor=Blosc(cname='blosclz', clevel=5, shuffle=1))
    add('zstd 22 rank 3', shape=(2, 3, 4), chunks=(1, 3, 2), dtype='<i8', fill_value=0,
        compressor=Zstd(level=22))
    add('rank 8', shape=(1, 2, 3, 4, 5, 6, 7, 8), chunks=(1, 1, 1, 1, 1, 1, 1, 1),
        dtype='<f4', fill_value=0.0, compressor=Zstd(level=1))
    add('big shape', shape=(2 ** 40, 3), chunks=(2 ** 20, 3), dtype='<f8', fill_value=0.0,
        compressor=Blosc(cname='zstd', clevel=1, shuffle=1))
    add('zero length', shape=(0,), chunks=(1,), dtype='<f4', fill_value=0.0,
        compressor=Blosc(cname='zstd', clevel=1, shuffle=1))
    add('0-d f8', shape=(), dtype='<f8', fill_value=0.0, compressor=None)
    add('0-d bool', shape=(), dtype='|b1', fill_value=False, compressor=None)
    return cases


def emit_array_documents(out, anndata_files):
    out.append('static const expected_array_document expected_array_documents[] = {')
    for path, data in anndata_files:
        if path.endswith('/.zarray'):
            out.append(array_entry('anndata ' + path, data))
    for name, data in zarr_created_arrays():
        out.append(array_entry(name, data))
    out.append('};')


# ---- Values -----------------------------------------------------------------

VLEN_CASES = [
    ('empty list', []),
    ('one empty string', ['']),
    ('ascii', ['AAACCTGAGAAGGCCT-1', 'AAACCTGAGACAGACC-1', 'B cell']),
    ('unicode', ['café', '细胞', '\U0001F9EC', 'a\x00b', '', 'x' * 300]),
    ('gene names', ['G%d' % i for i in range(1000)]),
]

UTF32_CASES = ['hello', 'connectivities', '', 'a\x00', 'héllo', 'h\U0001F600é', '\uFFFF',
               '\U0010FFFF', '细胞类型', 'x' * 100]


def emit_values(out):
    for index, (name, items) in enumerate(VLEN_CASES):
        out.append('static const char *const vlen_items_%d[] = {%s};' % (
            index, ', '.join(c_string(s) for s in items) if items else 'NULL'))
        out.append('static const size_t vlen_lengths_%d[] = {%s};' % (
            index, ', '.join(str(len(s.encode())) for s in items) if items else '0'))
    out.append('static const expected_vlen expected_vlens[] = {')
    for index, (name, items) in enumerate(VLEN_CASES):
        encoded = bytes(VLenUTF8().encode(np.array(items, dtype=object)))
        out.append('    {%s, %d, vlen_items_%d, vlen_lengths_%d, %d,\n     %s},' % (
            c_string(name), len(items), index, index, len(encoded), c_string(encoded)))
    out.append('};')
    out.append('static const expected_utf32 expected_utf32s[] = {')
    for s in UTF32_CASES:
        a = np.array(s)
        assert a.dtype.byteorder in ('<', '=') and a.dtype.kind == 'U'
        data = a.tobytes()
        out.append('    {%s, %d, "<U%d", %d,\n     %s},' % (
            c_string(s), len(s.encode()), a.dtype.itemsize // 4, len(data), c_string(data)))
    out.append('};')


def main():
    anndata_files = anndata_store()
    out = ['/* Generated by tests/zarr/make_expected.py with zarr %s, numcodecs %s, numpy %s,'
           % (zarr.__version__, numcodecs.__version__, np.__version__),
           ' * anndata %s. Do not edit. */' % anndata.__version__,
           '#ifndef ZARRMOUNT_TESTS_ZARR_EXPECTED_H',
           '#define ZARRMOUNT_TESTS_ZARR_EXPECTED_H',
           '',
           '#include <stddef.h>',
           '#include <stdint.h>',
           '',
           '#include "zarrmount/zarr.h"',
           '',
           'typedef struct expected_document {',
           '    const char *name;',
           '    const char *input;    /* compact JSON of the content */',
           '    const char *expected; /* what zarr-python writes for it */',
           '} expected_document;',
           '',
           'typedef struct expected_array_document {',
           '    const char *name;',
           '    unsigned rank;',
           '    uint64_t shape[ZM_ZARR_MAX_RANK], chunks[ZM_ZARR_MAX_RANK];',
           '    const char *dtype;',
           '    zm_fill fill;',
           '    const char *codec; /* zm_codec_parse text; NULL: "compressor": null */',
           '    int vlen_utf8;',
           '    const char *expected;',
           '} expected_array_document;',
           '',
           'typedef struct expected_vlen {',
           '    const char *name;',
           '    size_t count;',
           '    const char *const *items;',
           '    const size_t *lengths;',
           '    size_t size;',
           '    const char *encoded;',
           '} expected_vlen;',
           '',
           'typedef struct expected_utf32 {',
           '    const char *utf8;',
           '    size_t length;',
           '    const char *dtype; /* numpy\'s, e.g. "<U5" */',
           '    size_t size;',
           '    const char *bytes;',
           '} expected_utf32;',
           '']
    emit_documents(out, anndata_files)
    out.append('')
    emit_array_documents(out, anndata_files)
    out.append('')
    emit_values(out)
    out.append('')
    out.append('#endif')
    sys.stdout.write('\n'.join(out) + '\n')


if __name__ == '__main__':
    main()
