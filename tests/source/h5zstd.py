"""Register a Zstandard HDF5 filter (id 32015) with the libhdf5 that h5py uses.

Debian ships no zstd HDF5 plugin: its python3-hdf5plugin only wraps the system plugins
(blosc, lz4, bzip2, lzf, zfp), so h5py can neither write nor read filter 32015.  This module
implements the filter in Python over libzstd with ctypes and registers it with H5Zregister,
after which h5py (and so anndata) reads and writes zstd-filtered datasets.

The chunk format is the one of the registered filter 32015 (HDF5Plugin-Zstandard, also in
hdf5plugin): each chunk is one zstd frame with its content size; cd_values[0], if present, is
the compression level used when writing.

Usage:  import h5zstd; h5zstd.register()   (idempotent; a no-op when 32015 is available)
"""

import ctypes
import ctypes.util
import os

import h5py

ZSTD_FILTER_ID = 32015
_H5Z_FLAG_REVERSE = 0x0100
_KEEP = []  # ctypes objects that must outlive the registration


def _libhdf5():
    """The libhdf5 shared object already loaded by h5py (same process, same library)."""
    with open("/proc/self/maps") as fh:
        for line in fh:
            path = line.split()[-1] if "/" in line else ""
            base = os.path.basename(path)
            if base.startswith("libhdf5") and "_hl" not in base and ".so" in base:
                return ctypes.CDLL(path)
    raise OSError("libhdf5 is not loaded in this process")


def _libzstd():
    name = ctypes.util.find_library("zstd") or "libzstd.so.1"
    lib = ctypes.CDLL(name)
    lib.ZSTD_compressBound.restype = ctypes.c_size_t
    lib.ZSTD_compressBound.argtypes = [ctypes.c_size_t]
    lib.ZSTD_compress.restype = ctypes.c_size_t
    lib.ZSTD_compress.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p,
                                  ctypes.c_size_t, ctypes.c_int]
    lib.ZSTD_decompress.restype = ctypes.c_size_t
    lib.ZSTD_decompress.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p,
                                    ctypes.c_size_t]
    lib.ZSTD_getFrameContentSize.restype = ctypes.c_ulonglong
    lib.ZSTD_getFrameContentSize.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    lib.ZSTD_isError.restype = ctypes.c_uint
    lib.ZSTD_isError.argtypes = [ctypes.c_size_t]
    return lib


_FILTER_FUNC = ctypes.CFUNCTYPE(
    ctypes.c_size_t, ctypes.c_uint, ctypes.c_size_t, ctypes.POINTER(ctypes.c_uint),
    ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_void_p))


class _H5ZClass2(ctypes.Structure):
    _fields_ = [
        ("version", ctypes.c_int),
        ("id", ctypes.c_int),
        ("encoder_present", ctypes.c_uint),
        ("decoder_present", ctypes.c_uint),
        ("name", ctypes.c_char_p),
        ("can_apply", ctypes.c_void_p),
        ("set_local", ctypes.c_void_p),
        ("filter", _FILTER_FUNC),
    ]


def register():
    """Make filter 32015 available to h5py.  Returns True when it is available afterwards."""
    if h5py.h5z.filter_avail(ZSTD_FILTER_ID):
        return True
    hdf5 = _libhdf5()
    zstd = _libzstd()
    hdf5.H5allocate_memory.restype = ctypes.c_void_p
    hdf5.H5allocate_memory.argtypes = [ctypes.c_size_t, ctypes.c_bool]
    hdf5.H5free_memory.restype = ctypes.c_int
    hdf5.H5free_memory.argtypes = [ctypes.c_void_p]
    hdf5.H5Zregister.restype = ctypes.c_int
    hdf5.H5Zregister.argtypes = [ctypes.c_void_p]

    def zstd_filter(flags, cd_nelmts, cd_values, nbytes, buf_size, buf):
        try:
            src = buf[0]
            if flags & _H5Z_FLAG_REVERSE:
                size = zstd.ZSTD_getFrameContentSize(src, nbytes)
                if size >= 2**64 - 2:  # ZSTD_CONTENTSIZE_UNKNOWN / _ERROR
                    return 0
                out = hdf5.H5allocate_memory(max(size, 1), False)
                if not out:
                    return 0
                n = zstd.ZSTD_decompress(out, size, src, nbytes)
                if zstd.ZSTD_isError(n) or n != size:
                    hdf5.H5free_memory(out)
                    return 0
                cap = size
            else:
                level = cd_values[0] if cd_nelmts > 0 else 3
                cap = zstd.ZSTD_compressBound(nbytes)
                out = hdf5.H5allocate_memory(cap, False)
                if not out:
                    return 0
                n = zstd.ZSTD_compress(out, cap, src, nbytes, level)
                if zstd.ZSTD_isError(n):
                    hdf5.H5free_memory(out)
                    return 0
            hdf5.H5free_memory(src)
            buf[0] = out
            buf_size[0] = cap
            return n
        except Exception:  # never let an exception cross into C
            return 0

    func = _FILTER_FUNC(zstd_filter)
    cls = _H5ZClass2(1, ZSTD_FILTER_ID, 1, 1, b"Zstandard (zarrmount test helper)", None, None, func)
    _KEEP.extend([hdf5, zstd, func, cls])
    if hdf5.H5Zregister(ctypes.byref(cls)) < 0:
        return False
    return bool(h5py.h5z.filter_avail(ZSTD_FILTER_ID))
