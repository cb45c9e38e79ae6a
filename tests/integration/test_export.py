#!/usr/bin/python3
"""Every view of every source, written by `zarrmount export` (the bytes a
mount serves), read back with anndata.read_zarr, equals anndata's reading
of the source subset to the view's cells in the view's order. Also zarr-python
reads every array. Prints TAP.
"""
import os
import shutil
import sys
import tempfile
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import views  # noqa: E402

import anndata  # noqa: E402
import zarr  # noqa: E402



def sources():
    return views.sources()


def every_array(group, prefix=""):
    for name, item in group.items():
        if isinstance(item, zarr.Array):
            item[...]
        else:
            every_array(item, prefix + name + "/")


def main():
    results = []
    scratch = tempfile.mkdtemp(prefix="zm-export-")
    try:
        for path in sources():
            name = views.display_name(path)
            try:
                info, view_list = views.views_for(path)
                ref = views.reference(path)
            except Exception as error:  # noqa: BLE001
                results.append((False, f"{name}: setup", str(error)))
                continue
            # Small chunks too: many chunks an array, cut from one-pass walks.
            view_list = view_list + [(v, m, s_, k_, b_, "1024") for v, m, s_, k_, b_ in view_list
                                     if v.startswith(("full", "blocks/B=3"))]
            for entry in view_list:
                view, method, seed, k, b = entry[:5]
                chunk = entry[5] if len(entry) > 5 else None
                out = os.path.join(scratch, "store")
                shutil.rmtree(out, ignore_errors=True)
                label = f"{name} {view}" + (f" (chunks of {chunk} bytes)" if chunk else "")
                try:
                    views.run_json  # the binary is shared
                    args = [views.BINARY, "export", path, view, out] + (["--chunk-size", chunk] if chunk else [])
                    done = __import__("subprocess").run(args, capture_output=True, text=True, timeout=600)
                    if done.returncode != 0:
                        raise views.Differ(f"export failed: {done.stderr.strip()}")
                    order = views.order_of("file" if method == "file" else method, info["nObs"], seed, k, b)
                    got = anndata.read_zarr(out)
                    views.check_view(got, ref, order, "full" if view == "full" else method, info["nObs"])
                    every_array(zarr.open_group(out, mode="r"))
                    results.append((True, label, ""))
                except Exception as error:  # noqa: BLE001
                    detail = str(error) if isinstance(error, views.Differ) else traceback.format_exc(limit=3)
                    results.append((False, label, detail))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"1..{len(results)}")
    for i, (ok, label, detail) in enumerate(results, 1):
        print(f"{'ok' if ok else 'not ok'} {i} - {label}")
        if not ok:
            for line in detail.strip().splitlines()[-6:]:
                print(f"# {line}")
    return 0 if all(ok for ok, _, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
