#!/usr/bin/python3
"""Writes the zip stores of tests/test_zarr_store.c and what each holds as Python's zipfile
reads it (the reader zarr's ZipStore uses), apart from zarrmount.

    /usr/bin/python3 tests/source/make_zip_stores.py OUT_DIR [SHARED_DATA]

Writes into OUT_DIR:

  good/NAME.zip   zips zipfile writes (or, for prefixed.zip, a zip zipfile reads):
                  stored.zip    stored members (a 200 KB random blob read at offsets), names
                                whose order tests the listing ("obs", "obs.b", "obs-c",
                                "obs/a"), a hidden ".zattrs", UTF-8 and a space, explicit
                                directory entries, and names no key can spell ("../evil",
                                "/abs", "a//b", "./dot"), which are not keys
                  dup.zip       names written two and three times (the last entry wins)
                  deflated.zip  deflated members: compressible text, random bytes, empty
                  zip64.zip     zipfile's own zip64 writing (ZIP64_LIMIT lowered to 4 KiB
                                while writing): 0xFFFFFFFF sizes and offsets with their 64-bit
                                values in the central directory's 0x0001 extra field, a zip64
                                end record and locator (checked here to be there)
                  force64.zip   members written with force_zip64=True: their local headers
                                carry a zip64 extra field the central directory has not
                  prefixed.zip  stored.zip's members after 1000 bytes of something else
                  comment.zip   an archive comment after the end record
  bad/NAME.zip    zips that are damaged, each refused by zipfile too (checked here), but
                  bzip2.zip (zipfile reads it; zarrmount reads stored and deflate only) and
                  deflate-shorter.zip (zipfile does not compare its inflated size)
  values/...      the value of every key of every zip above and of ../shared's zips
                  (zipfile.ZipFile.read, which takes a name's last entry)
  manifest.json   {"stores": [...], "dirs": [...], "bad": [...]}:
                  a store: {"name", "path", "values": {key: file}, "lists": {prefix: names},
                  "unreachable": [member names that are no keys], "offsets": {key: the
                  offset its stored data starts at, from its local header}, "real": bool}
                  a dir: one of ../shared's directory stores, {"path", "keys", "lists"}
                  (os.walk's files)
                  a bad zip: {"name", "path", "open": errno name or null, "key", "locate":
                  errno name or null, "read": errno name or null, "python": zipfile's error}

SHARED_DATA (../shared/data) is optional: without it only the generated zips are written.
Deterministic: random bytes from random.Random(2024); member times fixed.
"""
import json
import os
import random
import struct
import sys
import warnings
import zipfile
import zlib

DATE = (2026, 1, 1, 0, 0, 0)
# A key names a file beneath the store: no leading '/', no empty, "." or ".." component.
# Names that are not (and directory entries) are no keys of a store.


def is_key(name):
    if name == "" or name.startswith("/") or name.endswith("/") or "\0" in name:
        return False
    return all(part not in ("", ".", "..") for part in name.split("/"))


def listings(keys):
    """{prefix: the names one level below it, sorted bytewise}, for every prefix the keys
    imply ("" is the root)."""
    below = {}
    for key in keys:
        parts = key.split("/")
        for i in range(len(parts)):
            below.setdefault("/".join(parts[:i]), set()).add(parts[i])
    return {p: sorted(names, key=lambda s: s.encode()) for p, names in below.items()}


def info(name, method=zipfile.ZIP_STORED):
    zi = zipfile.ZipInfo(name, DATE)
    zi.compress_type = method
    return zi


def local_data_offset(path, zi):
    """Where a member's data starts: after its local header's own name and extra fields."""
    with open(path, "rb") as f:
        f.seek(zi.header_offset)
        header = f.read(30)
    sig, = struct.unpack("<I", header[:4])
    assert sig == 0x04034B50, (path, zi.filename)
    name_length, extra_length = struct.unpack("<HH", header[26:30])
    return zi.header_offset + 30 + name_length + extra_length


class Out:
    def __init__(self, root):
        self.root = root
        self.count = 0
        for d in ("good", "bad", "values"):
            os.makedirs(os.path.join(root, d), exist_ok=True)

    def value_file(self, data):
        self.count += 1
        path = os.path.join(self.root, "values", "%06d.bin" % self.count)
        with open(path, "wb") as f:
            f.write(data)
        return path


def describe_zip(out, name, path, real=False):
    """The store as zipfile reads it: every key's value, the listings, the stored offsets."""
    with zipfile.ZipFile(path) as zf:
        infos = zf.infolist()
        members = [zi.filename for zi in infos]
        keys = sorted({m for m in members if is_key(m)}, key=lambda s: s.encode())
        last = {}
        for zi in infos:
            last[zi.filename] = zi
        values = {}
        offsets = {}
        for key in keys:
            assert zf.getinfo(key) is last[key]  # zipfile's name lookup takes the last entry
            values[key] = out.value_file(zf.read(key))
            if last[key].compress_type == zipfile.ZIP_STORED:
                offsets[key] = local_data_offset(path, last[key])
    unreachable = sorted({m for m in members if not is_key(m) and not m.endswith("/")})
    return {"name": name, "path": path, "values": values, "lists": listings(keys),
            "unreachable": unreachable, "offsets": offsets, "real": real}


def write_good(out, rng):
    good = os.path.join(out.root, "good")
    stores = []
    blob = rng.randbytes(200_000)

    path = os.path.join(good, "stored.zip")
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(info(".zattrs"), b'{"encoding-type": "anndata"}')
        zf.writestr(info("blob"), blob)
        zf.writestr(info("obs/"), b"")
        zf.writestr(info("emptydir/"), b"")
        zf.writestr(info("obs/a/.zarray"), b'{"zarr_format": 2}')
        zf.writestr(info("obs/a/0"), rng.randbytes(999))
        zf.writestr(info("obs/b/0"), b"b0")
        zf.writestr(info("obs.b/x"), b"x")
        zf.writestr(info("obs-c"), b"c")
        zf.writestr(info("obs/a b"), b"space")
        zf.writestr(info("zelle-\u00fc/0"), "\u00fc".encode())
        zf.writestr(info("empty"), b"")
        for bad in ("../evil", "/abs", "a//b", "./dot"):
            zf.writestr(info(bad), b"never a key")
    stores.append(describe_zip(out, "stored", path))

    path = os.path.join(good, "dup.zip")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns of a name written twice
        with zipfile.ZipFile(path, "w") as zf:
            zf.writestr(info(".zgroup"), b'{"zarr_format": 2, "first": true}')
            zf.writestr(info("x/.zattrs"), b"{}")
            zf.writestr(info("x/0"), rng.randbytes(300))
            zf.writestr(info("x/.zattrs", zipfile.ZIP_DEFLATED), b'{"second": 2}' * 50)
            zf.writestr(info(".zgroup"), b'{"zarr_format": 2}')
            zf.writestr(info("x/.zattrs"), b'{"third": 3, "last": "wins"}')
            zf.writestr(info("y"), b"only once")
    stores.append(describe_zip(out, "dup", path))

    path = os.path.join(good, "deflated.zip")
    text = "".join("cell%05d,%d,%s\n" % (i, i * 7 % 113, "ACGT"[i % 4] * (i % 9))
                   for i in range(12_000)).encode()
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(info("text.csv", zipfile.ZIP_DEFLATED), text)
        zf.writestr(info("random", zipfile.ZIP_DEFLATED), rng.randbytes(50_000))
        zf.writestr(info("empty", zipfile.ZIP_DEFLATED), b"")
        zf.writestr(info("X/.zarray", zipfile.ZIP_DEFLATED), b'{"chunks": [10]}')
        zf.writestr(info("X/0", zipfile.ZIP_STORED), rng.randbytes(4000))
        zf.writestr(info("zeros", zipfile.ZIP_DEFLATED), bytes(1_000_000))
    stores.append(describe_zip(out, "deflated", path))

    path = os.path.join(good, "zip64.zip")
    limits = zipfile.ZIP64_LIMIT, zipfile.ZIP_FILECOUNT_LIMIT
    zipfile.ZIP64_LIMIT = 4096
    try:
        with zipfile.ZipFile(path, "w", allowZip64=True) as zf:
            zf.writestr(info("small"), b"small, at offset 0")
            zf.writestr(info("big/stored"), rng.randbytes(20_000))
            zf.writestr(info("big/deflated", zipfile.ZIP_DEFLATED), text[:50_000])
            for i in range(20):
                zf.writestr(info("late/%02d" % i), b"after 4 KiB: a zip64 offset %d" % i)
    finally:
        zipfile.ZIP64_LIMIT, zipfile.ZIP_FILECOUNT_LIMIT = limits
    with open(path, "rb") as f:
        data = f.read()
    at = data.rfind(b"PK\x05\x06")
    assert data[at - 20:at - 16] == b"PK\x06\x07", "zip64.zip has no zip64 locator"
    assert data[at - 76:at - 72] == b"PK\x06\x06", "zip64.zip has no zip64 end record"
    with zipfile.ZipFile(path) as zf:
        extras = [zi for zi in zf.infolist() if zi.extra[:2] == b"\x01\x00"]
    assert len(extras) >= 21, "zip64.zip's central directory has too few zip64 extra fields"
    stores.append(describe_zip(out, "zip64", path))

    path = os.path.join(good, "force64.zip")
    with zipfile.ZipFile(path, "w") as zf:
        for name, method, data in (("a", zipfile.ZIP_STORED, b"forced zip64 a"),
                                   ("b/c", zipfile.ZIP_DEFLATED, text[:9000]),
                                   ("d", zipfile.ZIP_STORED, rng.randbytes(5000))):
            with zf.open(info(name, method), "w", force_zip64=True) as f:
                f.write(data)
    with zipfile.ZipFile(path) as zf:
        for zi in zf.infolist():
            with open(path, "rb") as f:
                f.seek(zi.header_offset + 28)
                local_extra, = struct.unpack("<H", f.read(2))
            assert local_extra != len(zi.extra), "force64.zip: local and central extras agree"
    stores.append(describe_zip(out, "force64", path))

    path = os.path.join(good, "prefixed.zip")
    with open(os.path.join(good, "stored.zip"), "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(b"#!/bin/sh\n# not a zip" + b"\n" * 978 + data)
    stores.append(describe_zip(out, "prefixed", path))

    path = os.path.join(good, "comment.zip")
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(info("zarr.json"), b'{"zarr_format": 3, "node_type": "group"}')
        zf.comment = b"an archive comment " * 40
    stores.append(describe_zip(out, "comment", path))
    return stores


class Patch:
    """A zip's records, to damage them where zipfile's writer would not."""

    def __init__(self, data):
        self.data = bytearray(data)
        self.eocd = self.data.rfind(b"PK\x05\x06")
        self.cd_size, self.cd_offset = struct.unpack("<II", self.data[self.eocd + 12:self.eocd + 20])

    def central(self, name):
        """The offset of name's (last) central directory entry."""
        found = None
        p = self.cd_offset
        while p < self.cd_offset + self.cd_size:
            n, e, c = struct.unpack("<HHH", self.data[p + 28:p + 34])
            if bytes(self.data[p + 46:p + 46 + n]) == name.encode():
                found = p
            p += 46 + n + e + c
        assert found is not None, name
        return found

    def local(self, name):
        return struct.unpack("<I", self.data[self.central(name) + 42:self.central(name) + 46])[0]

    def data_offset(self, name):
        at = self.local(name)
        n, e = struct.unpack("<HH", self.data[at + 26:at + 30])
        return at + 30 + n + e

    def put(self, at, fmt, *values):
        struct.pack_into(fmt, self.data, at, *values)


def python_error(path, key):
    """What zipfile says of the zip (None: it reads key, or every member, fine)."""
    try:
        with zipfile.ZipFile(path) as zf:
            for name in [key] if key is not None else zf.namelist():
                zf.read(name)
        return None
    except Exception as e:  # noqa: BLE001 - the error is the evidence
        return "%s: %s" % (type(e).__name__, e)


def write_bad(out, rng):
    bad_dir = os.path.join(out.root, "bad")
    plain = os.path.join(bad_dir, "plain.zip.src")
    text = b"".join(b"row %d of a text that deflates well\n" % i for i in range(3000))
    with zipfile.ZipFile(plain, "w") as zf:
        zf.writestr(info("zarr.json"), b'{"zarr_format": 3}')
        zf.writestr(info("X/c/0"), rng.randbytes(3000))
        zf.writestr(info("X/c/1", zipfile.ZIP_DEFLATED), text)
        zf.writestr(info("obs/zarr.json"), b'{"node_type": "group"}')
    with open(plain, "rb") as f:
        source = f.read()
    os.unlink(plain)
    bad = []

    def add(name, data, open_error=None, key=None, locate=None, read=None, python_reads=False):
        path = os.path.join(bad_dir, name + ".zip")
        with open(path, "wb") as f:
            f.write(data)
        said = python_error(path, key)
        if python_reads:
            assert said is None, (name, said)
        else:
            assert said is not None, "zipfile reads %s without complaint" % name
        bad.append({"name": name, "path": path, "open": open_error, "key": key,
                    "locate": locate, "read": read, "python": said})

    add("empty", b"", "EINVAL")
    add("not-a-zip", b"{\"zarr_format\": 3}\n" * 10, "EINVAL")
    add("truncated", source[:len(source) * 6 // 10], "EINVAL")
    p = Patch(source)
    p.put(p.eocd, "<I", 0x06054B51)
    add("bad-eocd", bytes(p.data), "EINVAL")
    p = Patch(source)
    p.put(p.eocd + 16, "<I", len(source) + 100)
    add("cd-outside", bytes(p.data), "EINVAL")
    p = Patch(source)
    p.put(p.eocd + 12, "<I", 1 << 30)
    add("cd-too-big", bytes(p.data), "EINVAL")
    p = Patch(source)
    p.put(p.central("X/c/0"), "<I", 0x02014B51)
    add("cd-bad-signature", bytes(p.data), "EINVAL")

    p = Patch(source)
    p.data[p.data_offset("X/c/1")] = 0x07  # BFINAL, then the reserved block type 11
    add("corrupt-deflate", bytes(p.data), key="X/c/1", read="EIO")
    p = Patch(source)
    at = p.data_offset("X/c/1") + 40
    p.data[at:at + 8] = b"\xff" * 8
    add("garbled-deflate", bytes(p.data), key="X/c/1", read="EIO")
    p = Patch(source)
    crc, = struct.unpack("<I", p.data[p.central("X/c/1") + 16:p.central("X/c/1") + 20])
    p.put(p.central("X/c/1") + 16, "<I", crc ^ 1)
    add("bad-crc-deflated", bytes(p.data), key="X/c/1", read="EIO")
    p = Patch(source)
    crc, = struct.unpack("<I", p.data[p.central("X/c/0") + 16:p.central("X/c/0") + 20])
    p.put(p.central("X/c/0") + 16, "<I", crc ^ 0x80000000)
    add("bad-crc-stored", bytes(p.data), key="X/c/0", read="EIO")
    p = Patch(source)
    raw, = struct.unpack("<I", p.data[p.central("X/c/1") + 24:p.central("X/c/1") + 28])
    p.put(p.central("X/c/1") + 24, "<I", raw // 2)
    add("deflate-longer", bytes(p.data), key="X/c/1", read="EIO")
    p = Patch(source)
    p.put(p.central("X/c/1") + 24, "<I", raw + 100)
    # zipfile reads this one (it stops at the stream's end, its CRC-32 right, never comparing
    # the length with the central directory's); a store refuses a member that is not the size
    # it says, since a reader trusting that size would read past the value.
    add("deflate-shorter", bytes(p.data), key="X/c/1", read="EIO", python_reads=True)
    p = Patch(source)
    flags, = struct.unpack("<H", p.data[p.central("X/c/0") + 8:p.central("X/c/0") + 10])
    p.put(p.central("X/c/0") + 8, "<H", flags | 1)
    p.put(p.local("X/c/0") + 6, "<H", flags | 1)
    add("encrypted", bytes(p.data), key="X/c/0", locate="ENOTSUP")
    p = Patch(source)
    p.put(p.local("X/c/0"), "<I", 0x04034B51)
    add("bad-local-signature", bytes(p.data), key="X/c/0", locate="EIO")
    p = Patch(source)
    p.data[p.local("X/c/0") + 30] ^= 0x20  # "X/c/0" -> "x/c/0" in the local header only
    add("local-name-differs", bytes(p.data), key="X/c/0", locate="EIO")
    p = Patch(source)
    p.put(p.central("obs/zarr.json") + 20, "<I", 50_000)
    p.put(p.central("obs/zarr.json") + 24, "<I", 50_000)
    add("member-overruns", bytes(p.data), key="obs/zarr.json", locate="EIO")

    path = os.path.join(bad_dir, "bzip2.zip.src")
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(info("zarr.json"), b'{"zarr_format": 3}')
        zf.writestr(info("X/c/0", zipfile.ZIP_BZIP2), text)
    with open(path, "rb") as f:
        data = f.read()
    os.unlink(path)
    add("bzip2", data, key="X/c/0", locate="ENOTSUP", python_reads=True)
    return bad


def describe_dir(path):
    keys = []
    for top, dirs, files in os.walk(path):
        dirs.sort()
        for name in files:
            keys.append(os.path.relpath(os.path.join(top, name), path))
    keys.sort(key=lambda s: s.encode())
    return {"path": path, "keys": keys, "lists": listings(keys)}


def main():
    root = os.path.abspath(sys.argv[1])
    shared = sys.argv[2] if len(sys.argv) > 2 else None
    out = Out(root)
    rng = random.Random(2024)
    stores = write_good(out, rng)
    bad = write_bad(out, rng)
    dirs = []
    if shared and os.path.isdir(shared):
        for rel in ("modern/modern-tiny-300x120.v3.zarr.zip", "modern/modern-tiny-300x120.v2.zarr.zip",
                    "modern/modern-pbmc-1200x400.v3.zarr.zip", "zarr/pbmc68k_reduced.zarr.zip",
                    "synthetic/anndata-0.7.8-archive.zarr.zip"):
            path = os.path.join(shared, rel)
            if os.path.exists(path):
                stores.append(describe_zip(out, rel, os.path.abspath(path), real=True))
        for rel in ("modern/modern-tiny-300x120.v3.zarr", "modern/modern-tiny-300x120.v2.zarr",
                    "zarr/pbmc68k_reduced.zarr"):
            path = os.path.join(shared, rel)
            if os.path.isdir(path):
                dirs.append(describe_dir(os.path.abspath(path)))
    with open(os.path.join(root, "manifest.json"), "w") as f:
        json.dump({"stores": stores, "dirs": dirs, "bad": bad}, f, indent=1, ensure_ascii=False)


if __name__ == "__main__":
    main()
