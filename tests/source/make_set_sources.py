#!/usr/bin/python3
"""Writes the sources, set files and expected sets of tests/test_view_sets.c (issue 21: sets of
cells from files and from obs values), each expectation computed here, independently of
zarrmount: the positions with numpy and h5py, the digest and the LEB128 gaps as the
specification says (../shared/seeds/subsampling-spec.txt, "Cell set digest", "Cell set
encoding"), the escaping of where/ values from its rule.

    /usr/bin/python3 tests/source/make_set_sources.py OUT_DIR

Writes into OUT_DIR:

  sets.h5ad       1,200 cells. obs index: "c0000" ... with two cells both named "twin", one
                  "zelle-ü", one "cell with space". obs: label, a categorical whose categories
                  hold "/", ",", "%", non-ASCII, ".", "..", a tab, an unused one and the empty
                  string, with missing codes; dupcat, a categorical two of whose categories are
                  both "p" (written past pandas, which refuses it); cat_int, integer
                  categories; tissue, strings (the empty string among them); barcode, 1,200
                  distinct strings; flag, booleans; maybe, a nullable boolean with a mask;
                  score, numbers (cannot filter).
  original.h5ad, priority-seed7.h5ad
                  tests/integration/make_priority_sources.py's (300 cells): the same cells, the
                  second stored in seed 7's priority order (its sets name original positions).
  *.json, *.txt   set files, valid and not.
  manifest.json   {"cases": [...]}: each case a source, what is asked ("where": key and
                  values as the path spells them; "file": a set file; "values": where/KEY/'s
                  listing) and what it gives: {"positions", "digest", "record"}, a listing, or
                  {"refused": errno name, "reason": a piece of the reason}.

Deterministic: every random value from numpy's default_rng(21).
"""
import base64
import json
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np
import pandas as pd
import scipy.sparse as sp

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import h5ad_writer  # noqa: E402
from set_rules import digest, encode_kept as leb128_gaps  # noqa: E402

N = 1200
LABELS = ["a/b", "x,y", "Zelle-ü", "50%", ".", "..", "tab\there", "plain", "unused", ""]
TISSUES = ["lung", "liver", "a/b", "brain", ""]


# ---- The specification ---------------------------------------------------------------------

# The digest and the LEB128 gaps: set_rules.py, the tests' one reading of them.

def escape(value):
    """A where/ value (str or bytes) as its path component."""
    raw = value.encode() if isinstance(value, str) else value
    dots = raw in (b".", b"..")
    pieces = []
    for c in raw:
        if dots or c in b"%/," or c < 0x20 or c == 0x7F:
            pieces.append(b"%%%02X" % c)
        else:
            pieces.append(bytes([c]))
    return b"".join(pieces).decode("utf-8", "surrogateescape")


# ---- The sources -----------------------------------------------------------------------------

def write_sets_source(path, rng):
    names = ["c%04d" % i for i in range(N)]
    names[5] = names[6] = "twin"
    names[7] = "zelle-ü"
    names[8] = "cell with space"
    codes = rng.integers(0, len(LABELS), size=N)
    codes[codes == LABELS.index("unused")] = LABELS.index("plain")
    codes[rng.random(N) < 0.05] = -1
    tissue = np.array([TISSUES[i] for i in rng.integers(0, len(TISSUES), size=N)], dtype=object)
    maybe_values = rng.random(N) < 0.5
    maybe_mask = rng.random(N) < 0.1
    obs = pd.DataFrame({
        "label": pd.Categorical.from_codes(codes, categories=LABELS),
        "dupcat": pd.Categorical.from_codes(rng.integers(0, 3, size=N), categories=["p", "q", "r"]),
        "cat_int": pd.Categorical.from_codes(rng.integers(-1, 3, size=N), categories=[3, 10, 42]),
        "tissue": tissue,
        "barcode": np.array(["BC%05d-%d" % (i, v) for i, v in enumerate(rng.integers(0, 99, size=N))],
                            dtype=object),
        "flag": rng.random(N) < 0.3,
        "maybe": pd.arrays.BooleanArray(maybe_values, maybe_mask),
        "score": rng.random(N).astype(np.float32),
    }, index=pd.Index(names))
    X = sp.random(N, 20, density=0.1, format="csr", dtype=np.float32, random_state=rng)
    h5ad_writer.write_h5ad(path, X=X, obs=obs)
    # Two categories of the same name: pandas refuses them, a file may hold them.
    with h5py.File(path, "r+") as f:
        del f["obs/dupcat/categories"]
        f["obs/dupcat"].create_dataset("categories", data=np.array(["p", "q", "p"], dtype=object),
                                       dtype=h5py.string_dtype("utf-8"))
        f["obs/dupcat/categories"].attrs["encoding-type"] = "string-array"
        f["obs/dupcat/categories"].attrs["encoding-version"] = "0.2.0"


# ---- Reading a column as a where/ filter reads it, independently ----------------------------

def text(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def column(f, key):
    """(values per stored row as str or None for missing, kind)."""
    node = f["obs"][key]
    kind = node.attrs.get("encoding-type", "array")
    if isinstance(kind, bytes):
        kind = kind.decode()
    if kind == "categorical":
        cats = node["categories"][:]
        cats = [text(c) if not isinstance(c, (np.integer, int)) else str(int(c)) for c in cats]
        return [None if c < 0 else cats[c] for c in node["codes"][:]], "categorical"
    if kind == "nullable-boolean":
        return [None if m else ("true" if v else "false")
                for v, m in zip(node["values"][:], node["mask"][:])], "boolean"
    values = node[:]
    if values.dtype == bool:
        return ["true" if v else "false" for v in values], "boolean"
    return [text(v) for v in values], "strings"


def original_positions(f):
    n = f["obs"][f["obs"].attrs["_index"]].shape[0]
    if "cellucid_original_position" in f["obs"]:
        return [int(p) for p in f["obs"]["cellucid_original_position"][:]]
    return list(range(n))


def where_case(directory, source, key, values):
    """The cells whose obs/key is one of values (decoded)."""
    with h5py.File(os.path.join(directory, source), "r") as f:
        col, _ = column(f, key)
        original = original_positions(f)
        n = len(col)
    positions = sorted(original[r] for r, v in enumerate(col) if v is not None and v in values)
    return {"source": source, "where": {"key": key, "values": ",".join(escape(v) for v in values)},
            "positions": positions, "digest": digest(positions, n),
            "record": {"key": key, "values": list(values), "size": len(positions)}}


def where_refused(source, key, spelled, errno_name, reason):
    return {"source": source, "where": {"key": key, "values": spelled},
            "refused": errno_name, "reason": reason}


def values_case(directory, source, key, max_listed=1000):
    with h5py.File(os.path.join(directory, source), "r") as f:
        col, kind = column(f, key)
        present = set(v for v in col if v is not None)
        if kind == "categorical":
            node = f["obs"][key]["categories"][:]
            order = [text(c) if not isinstance(c, (np.integer, int)) else str(int(c)) for c in node]
        elif kind == "boolean":
            order = ["false", "true"]
        else:
            order = sorted(present, key=lambda s: s.encode())
            if len(order) > max_listed:
                order = []
    listed, seen = [], set()
    for v in order:
        if v in present and v not in seen and v != "" and len(escape(v).encode()) <= 255:
            listed.append(escape(v))
            seen.add(v)
    return {"source": source, "values": key, "listed": listed}


def names_of(directory, source):
    with h5py.File(os.path.join(directory, source), "r") as f:
        index = f["obs"][f["obs"].attrs["_index"]][:]
        return [text(v) for v in index], original_positions(f)


def file_case(directory, source, file_name, lines_or_bytes, positions=None, refused=None, reason=None):
    path = os.path.join(directory, file_name)
    with open(path, "wb") as out:
        out.write(lines_or_bytes)
    name = file_name.rsplit(".", 1)[0]
    case = {"source": source, "file": file_name, "name": name}
    if refused:
        case.update(refused=refused, reason=reason)
    else:
        with h5py.File(os.path.join(directory, source), "r") as f:
            n = f["obs"][f["obs"].attrs["_index"]].shape[0]
        case.update(positions=positions, digest=digest(positions, n),
                    record={"name": name, "digest": digest(positions, n), "size": len(positions),
                            "file": path})
    return case


def cellucid(positions, n, n_obs=None, digest_text=None, kept=None):
    doc = {"version": 1, "cells": {
        "kept": kept if kept is not None else base64.b64encode(leb128_gaps(positions, n)).decode(),
        "digest": digest_text if digest_text is not None else digest(positions, n),
        "spec": {"method": "uniform", "nObs": n if n_obs is None else n_obs, "k": len(positions),
                 "seed": 3}}}
    return json.dumps(doc).encode()


def main():
    directory = sys.argv[1]
    os.makedirs(directory, exist_ok=True)
    rng = np.random.default_rng(21)
    write_sets_source(os.path.join(directory, "sets.h5ad"), rng)
    subprocess.run([sys.executable, os.path.join(HERE, "..", "integration", "make_priority_sources.py"),
                    directory, "--cells", "300", "--only", "original,priority-seed7"],
                   check=True, stdout=subprocess.DEVNULL)
    shutil.copy(os.path.join(HERE, "..", "..", "fixtures", "sources", "h5ad", "full-csr.h5ad"), directory)
    cases = []
    S = "sets.h5ad"

    # where/ over a categorical: "/", ",", "%", non-ASCII, ".", "..", a tab; missing codes.
    for values in (["a/b"], ["x,y"], ["Zelle-ü"], ["50%"], ["."], [".."], ["tab\there"],
                   ["plain", "a/b", "Zelle-ü"], ["x,y", "."]):
        cases.append(where_case(directory, S, "label", values))
    cases.append(where_case(directory, S, "dupcat", ["p"]))
    cases.append(where_case(directory, S, "cat_int", ["3", "42"]))
    cases.append(where_refused(S, "label", "unused", "ENOENT", "no cell has obs/label"))
    cases.append(where_refused(S, "label", "nosuch", "ENOENT", "has no category \"nosuch\""))
    cases.append(where_refused(S, "label", "a%2fb", "ENOENT", "write \"a%2Fb\""))
    cases.append(where_refused(S, "label", "%70lain", "ENOENT", "write \"plain\""))
    cases.append(where_refused(S, "label", ".", "ENOENT", "write \"%2E\""))
    cases.append(where_refused(S, "label", "%2E.", "ENOENT", "write \"%2E%2E\""))
    cases.append(where_refused(S, "label", "x,y", "ENOENT", "has no category \"x\""))
    cases.append(where_refused(S, "label", "tab\there", "ENOENT", "is not how where/ spells"))
    cases.append(where_refused(S, "label", "50%", "ENOENT", "% begins an escape"))
    cases.append(where_refused(S, "label", "50%2", "ENOENT", "% begins an escape"))
    cases.append(where_refused(S, "label", "plain,a%2Fb,plain", "ENOENT", "listed twice"))
    cases.append(where_refused(S, "label", "plain,", "ENOENT", "cannot be empty"))
    cases.append(where_refused(S, "label", "", "ENOENT", "cannot be empty"))
    cases.append(where_refused(S, "label", "%FF", "ENOENT", "is not how where/ spells"))
    # Strings: any values; the cells holding one of them.
    cases.append(where_case(directory, S, "tissue", ["lung", "liver"]))
    cases.append(where_case(directory, S, "tissue", ["a/b"]))
    cases.append(where_case(directory, S, "tissue", ["kidney", "brain"]))
    cases.append(where_case_barcodes(directory, S))
    cases.append(where_refused(S, "tissue", "kidney", "ENOENT", "no cell has obs/tissue"))
    # Booleans and a nullable boolean (its masked cells in neither).
    cases.append(where_case(directory, S, "flag", ["true"]))
    cases.append(where_case(directory, S, "flag", ["false", "true"]))
    cases.append(where_case(directory, S, "maybe", ["true"]))
    cases.append(where_case(directory, S, "maybe", ["false"]))
    cases.append(where_case(directory, S, "maybe", ["true", "false"]))
    cases.append(where_refused(S, "flag", "yes", "ENOENT", "a value is true or false"))
    cases.append(where_refused(S, "flag", "True", "ENOENT", "a value is true or false"))
    cases.append(where_refused(S, "score", "1", "ENOENT", "holds numbers"))
    cases.append(where_refused(S, "nosuch", "1", "ENOENT", "obs has no column nosuch"))
    # The fixture every source test reads (fixtures/sources/h5ad/full-csr.h5ad, copied here).
    F = "full-csr.h5ad"
    cases.append(where_case(directory, F, "cell_type", ["T cell", "B cell"]))
    cases.append(where_case(directory, F, "quality", ["high"]))
    cases.append(where_case(directory, F, "label_utf8", ["zelle-1-β-ü", "zelle-2-γ-ü"]))
    cases.append(where_case(directory, F, "bool", ["false"]))
    cases.append(where_case(directory, F, "nullable_bool", ["true"]))
    cases.append(where_refused(F, "cat_none_used", "x", "ENOENT", "no cell has"))
    # Priority-ordered: the original's cells, by original position.
    for source in ("original.h5ad", "priority-seed7.h5ad"):
        cases.append(where_case(directory, source, "cell_type", ["T-CD4"]))
        cases.append(where_case(directory, source, "donor", ["donor-1", "donor-3"]))

    # where/KEY/ listings.
    for key in ("label", "dupcat", "cat_int", "tissue", "barcode", "flag", "maybe"):
        cases.append(values_case(directory, S, key))
    for key in ("cell_type", "quality", "cat_none_used", "label_utf8", "nullable_bool", "bool"):
        cases.append(values_case(directory, F, key))

    # Set files: obs names.
    names, original = names_of(directory, S)
    n = len(names)
    chosen = sorted(int(r) for r in rng.choice([r for r in range(n) if r not in (5, 6)], 200, replace=False))
    chosen = sorted(set(chosen) | {7, 8})
    lines = [names[r] for r in chosen]
    rng.shuffle(lines)
    body = "\ufeff" + "".join(l + ("\r\n" if i % 3 == 0 else "\n") + ("\n" if i % 7 == 0 else "") +
                              (" \t \n" if i % 11 == 0 else "") for i, l in enumerate(lines))
    cases.append(file_case(directory, S, "names.txt", body.encode(), positions=chosen))
    cases.append(file_case(directory, S, "last-line.txt", ("c0010\nc0003").encode(), positions=[3, 10]))
    cases.append(file_case(directory, S, "unknown.txt", b"c0001\n\nc9999\n", refused="EINVAL",
                           reason="line 3: no cell is named \"c9999\""))
    cases.append(file_case(directory, S, "shared-name.txt", b"c0001\ntwin\n", refused="EINVAL",
                           reason="line 2: \"twin\" names more than one cell"))
    cases.append(file_case(directory, S, "twice.txt", b"c0001\nc0002\r\n\nc0001\n", refused="EINVAL",
                           reason="line 4: \"c0001\" is named again (first on line 1)"))
    cases.append(file_case(directory, S, "blank.txt", b"\n \n\t\r\n", refused="EINVAL",
                           reason="every line is blank"))
    cases.append(file_case(directory, S, "padded.txt", b" c0001\n", refused="EINVAL",
                           reason="no cell is named \" c0001\""))
    p_names, p_original = names_of(directory, "priority-seed7.h5ad")
    o_names, _ = names_of(directory, "original.h5ad")
    picked = [o_names[i] for i in (0, 5, 17, 123, 299)]
    for source in ("original.h5ad", "priority-seed7.h5ad"):
        # The same names, the same original positions, in either file.
        cases.append(file_case(directory, source, source.split(".")[0] + "-names.txt",
                               "\n".join(picked).encode(), positions=[0, 5, 17, 123, 299]))
    # Set files: Cellucid cell sets.
    subset = sorted(int(p) for p in rng.choice(n, 300, replace=False))
    cases.append(file_case(directory, S, "cellucid.json", cellucid(subset, n), positions=subset))
    cases.append(file_case(directory, S, "every.json", cellucid(list(range(n)), n),
                           positions=list(range(n))))
    cases.append(file_case(directory, S, "one.json", cellucid([n - 1], n), positions=[n - 1]))
    cases.append(file_case(directory, S, "wrong-digest.json",
                           cellucid(subset, n, digest_text=digest(subset[1:], n)), refused="EINVAL",
                           reason="is not the digest of the cells"))
    cases.append(file_case(directory, S, "wrong-nobs.json", cellucid(subset, n, n_obs=n + 1),
                           refused="EINVAL", reason="is a set of %d cells (cells.spec.nObs)" % (n + 1)))
    past = subset + [n]
    cases.append(file_case(directory, S, "past-n.json",
                           cellucid(past, n, kept=base64.b64encode(leb128_gaps(past, n + 1)).decode(),
                                    digest_text=digest(past, n)),
                           refused="EINVAL", reason="cells.kept names no set"))
    cases.append(file_case(directory, S, "bad-base64.json", cellucid(subset, n, kept="AB$="),
                           refused="EINVAL", reason="cells.kept is not base64"))
    cases.append(file_case(directory, S, "unpadded.json", cellucid(subset, n, kept="AAE"),
                           refused="EINVAL", reason="cells.kept is not base64"))
    cases.append(file_case(directory, S, "not-json.json", b"{\"cells\": ", refused="EINVAL",
                           reason="is not JSON"))
    cases.append(file_case(directory, S, "no-cells.json", b"{\"kept\": \"\"}", refused="EINVAL",
                           reason="has no object \"cells\""))
    cases.append(file_case(directory, S, "nobs-text.json",
                           json.dumps({"cells": {"kept": "", "digest": digest(list(range(n)), n),
                                                 "spec": {"nObs": str(n)}}}).encode(),
                           refused="EINVAL", reason="nObs is not a count"))
    # A Cellucid set of the original's cells is the same set in the priority-ordered file.
    few = [3, 40, 41, 200, 299]
    for source in ("original.h5ad", "priority-seed7.h5ad"):
        cases.append(file_case(directory, source, source.split(".")[0] + "-cellucid.json",
                               cellucid(few, 300), positions=few))
    with open(os.path.join(directory, "manifest.json"), "w") as out:
        json.dump({"cases": cases}, out, indent=1, ensure_ascii=False)


def where_case_barcodes(directory, source):
    """Two of barcode's 1,200 distinct values (more than where/ lists: they still resolve)."""
    with h5py.File(os.path.join(directory, source), "r") as f:
        values = [text(f["obs"]["barcode"][i]) for i in (17, 3)]
    return where_case(directory, source, "barcode", values)


if __name__ == "__main__":
    main()
