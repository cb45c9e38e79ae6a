#!/usr/bin/python3
"""`zarrmount select` as a user runs it: every conformance case through the
binary (request on stdin, result on stdout, exit code), plus the command's
own contract: malformed JSON, missing fields, summary and sizeOnly.

Prints TAP. Needs ZM_BINARY (the zarrmount executable) and ZM_FIXTURES_DIR.
"""
import json
import os
import subprocess
import sys

BINARY = os.environ.get("ZM_BINARY", "build/zarrmount")
FIXTURES = os.environ.get("ZM_FIXTURES_DIR", "fixtures")

results = []


def run(request_text):
    """Runs zarrmount select; returns (exit code, stdout, stderr)."""
    done = subprocess.run([BINARY, "select"], input=request_text.encode(),
                          capture_output=True, timeout=600)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def check(name, ok, detail=""):
    results.append((ok, name, detail))


def expect_refusal(name, request_text, needle=None):
    code, out, err = run(request_text)
    lines = out.splitlines()
    try:
        body = json.loads(out)
    except ValueError:
        body = None
    ok = (code == 2 and len(lines) == 1 and isinstance(body, dict)
          and list(body) == ["error"] and isinstance(body["error"], str)
          and body["error"] and "\n" not in body["error"]
          and (needle is None or needle in body["error"]))
    check(f"refused: {name}", ok, f"exit {code}, stdout {out[:300]!r}, stderr {err[:200]!r}")


def conformance_cases():
    with open(os.path.join(FIXTURES, "subsample_conformance.json"), encoding="utf-8") as f:
        fixture = json.load(f)
    for case in fixture["cases"]:
        text = json.dumps(case["request"])
        if "refused" in case:
            expect_refusal(case["name"], text)
            continue
        code, out, err = run(text)
        try:
            got = json.loads(out)
        except ValueError:
            got = None
        ok = code == 0 and got == case["expect"] and out.endswith("\n") and out.count("\n") == 1
        check(f"case: {case['name']}", ok, f"exit {code}, stdout {out[:300]!r}, stderr {err[:200]!r}")


def contract():
    expect_refusal("not JSON", "{method: uniform}", "not valid JSON")
    expect_refusal("empty input", "")
    expect_refusal("a JSON array", "[1, 2]", "object")
    expect_refusal("no method", '{"n": 10, "k": 2}', "method")
    expect_refusal("unknown method", '{"method": "random", "n": 10, "k": 2}', "unknown method")
    expect_refusal("no size", '{"method": "uniform", "n": 10}', "one of")
    expect_refusal("two sizes", '{"method": "uniform", "n": 10, "k": 2, "share": "0.5"}', "only one")
    expect_refusal("no n", '{"method": "uniform", "k": 2}', "\"n\"")
    expect_refusal("k = 0", '{"method": "uniform", "n": 10, "k": 0}', "k = 0")
    expect_refusal("k not an integer", '{"method": "uniform", "n": 10, "k": 2.5}', "integer")
    expect_refusal("seed past uint32", '{"method": "uniform", "n": 10, "k": 2, "seed": 4294967296}', "seed")
    expect_refusal("negative seed", '{"method": "uniform", "n": 10, "k": 2, "seed": -1}', "seed")
    expect_refusal("n past uint32", '{"method": "uniform", "n": 4294967296, "k": 2}', "\"n\"")
    expect_refusal("share above 1", '{"method": "uniform", "n": 10, "share": "1.5"}', "1.5")
    expect_refusal("share text not a number", '{"method": "uniform", "n": 10, "share": "abc"}')
    expect_refusal("percent above 100", '{"method": "uniform", "n": 10, "percent": 150}')
    expect_refusal("blocks without blockSize", '{"method": "blocks", "n": 10, "k": 2}', "blockSize")
    expect_refusal("blockSize on uniform", '{"method": "uniform", "n": 10, "k": 2, "blockSize": 3}', "blockSize")
    expect_refusal("unknown key", '{"method": "uniform", "n": 10, "k": 2, "sed": 3}', "sed")
    expect_refusal("codes length differs from n", '{"method": "stratified", "n": 3, "codes": [0, 1], "k": 1}', "entries")
    expect_refusal("codes and values", '{"method": "stratified", "codes": [0], "values": ["a"], "k": 1}')
    expect_refusal("a code that is text", '{"method": "stratified", "codes": [0, "x"], "k": 1}', "codes[1]")
    expect_refusal("a coordinate that is text", '{"method": "spatial", "coords": [[0], ["x"]], "k": 1}', "coords[1]")
    expect_refusal("ragged coordinates", '{"method": "spatial", "coords": [[0, 1], [2]], "k": 1}', "coords[1]")
    expect_refusal("four columns without a choice", '{"method": "spatial", "coords": [[0, 1, 2, 3]], "k": 1}', "1 to 3")
    expect_refusal("duplicate key", '{"method": "uniform", "n": 10, "k": 2, "k": 3}', "not valid JSON")
    expect_refusal("minimum that does not fit",
                   '{"method": "stratified", "codes": [0, 1, 2, 0, 1, 2], "k": 2, "minimum": 1}', "minimum")

    # What Python's json writes for numbers held as floats: bare NaN and
    # Infinity tokens, integral reals. They mean what the contract's forms do.
    nan, inf = float("nan"), float("inf")
    code_a, out_a, _ = run(json.dumps({"method": "spatial", "k": 3, "seed": 2,
                                       "coords": [[0.0, 1.0], [nan, 2.0], [3.0, -inf], [4.0, 5.0], [1.5, 0.5]]}))
    code_b, out_b, _ = run('{"method": "spatial", "k": 3, "seed": 2, "coords": [[0, 1], ["NaN", 2], '
                           '[3, "-Infinity"], [4, 5], [1.5, 0.5]]}')
    check("bare NaN/Infinity tokens read as the contract's strings",
          code_a == 0 and out_a == out_b)
    code_a, out_a, _ = run(json.dumps({"method": "stratified", "k": 4, "codes": [0.0, 1.0, nan, 2.0, 1.0, 0.0, -1.0]}))
    code_b, out_b, _ = run('{"method": "stratified", "k": 4, "codes": [0, 1, null, 2, 1, 0, -1]}')
    check("codes held as floats (NaN missing)", code_a == 0 and out_a == out_b)
    code_a, out_a, _ = run('{"method": "uniform", "n": 1000.0, "k": 1e2, "seed": 7.0}')
    code_b, out_b, _ = run('{"method": "uniform", "n": 1000, "k": 100, "seed": 7}')
    check("integral reals are integers", code_a == 0 and out_a == out_b)
    expect_refusal("a fractional code", '{"method": "stratified", "codes": [0, 1.5], "k": 1}', "codes[1]")
    expect_refusal("a NaN string in the JSON share", '{"method": "uniform", "n": 10, "share": NaN}')

    # columns: pick 1 to 3 columns of wider rows.
    rows = [[i * 0.5, (i * 7) % 11, -i, i * i] for i in range(40)]
    code_a, out_a, _ = run(json.dumps({"method": "spatial", "k": 9, "coords": rows, "columns": [3, 1]}))
    code_b, out_b, _ = run(json.dumps({"method": "spatial", "k": 9, "coords": [[r[3], r[1]] for r in rows]}))
    check("columns picks coordinates from wider rows", code_a == 0 and out_a == out_b)
    expect_refusal("a negative spatial column", json.dumps({"method": "spatial", "k": 2, "coords": rows, "columns": [-1]}), "column")
    expect_refusal("a spatial column that is not an integer", json.dumps({"method": "spatial", "k": 2, "coords": rows, "columns": [0.5]}), "column")
    expect_refusal("a spatial column past the row", json.dumps({"method": "spatial", "k": 2, "coords": rows, "columns": [4]}), "column")
    expect_refusal("four columns chosen", json.dumps({"method": "spatial", "k": 2, "coords": rows, "columns": [0, 1, 2, 3]}), "columns")

    # summary: heads and tails of at most 20, same digest as the full result.
    full_code, full_out, _ = run('{"method": "uniform", "n": 100000, "k": 1000, "seed": 5}')
    sum_code, sum_out, _ = run('{"method": "uniform", "n": 100000, "k": 1000, "seed": 5, "summary": true}')
    full, summ = json.loads(full_out), json.loads(sum_out)
    check("summary: heads and tails match the full result",
          full_code == 0 and sum_code == 0
          and summ["positionsHead"] == full["positions"][:20]
          and summ["positionsTail"] == full["positions"][-20:]
          and summ["orderHead"] == full["order"][:20]
          and summ["orderTail"] == full["order"][-20:]
          and summ["digest"] == full["digest"] and summ["kept"] == full["kept"]
          and "positions" not in summ and "order" not in summ)
    code, out, _ = run('{"method": "uniform", "n": 5, "k": 3, "summary": true}')
    small = json.loads(out)
    check("summary: fewer than 20 cells gives them all",
          code == 0 and len(small["positionsHead"]) == 3 and small["positionsTail"] == small["positionsHead"])

    # sizeOnly: constant time at the largest n.
    code, out, _ = run('{"method": "uniform", "n": 4294967295, "share": "0.5", "sizeOnly": true}')
    check("sizeOnly at n = 2^32 - 1", code == 0 and json.loads(out) == {"k": 2147483648})
    code, out, _ = run('{"method": "blocks", "n": 1000, "percent": "2.5", "sizeOnly": true}')
    check("sizeOnly needs no blockSize", code == 0 and json.loads(out) == {"k": 25})

    # Determinism: the same request twice gives the same bytes.
    a = run('{"method": "blocks", "n": 200000, "k": 5000, "blockSize": 64, "seed": 3}')
    b = run('{"method": "blocks", "n": 200000, "k": 5000, "blockSize": 64, "seed": 3}')
    check("the same request gives the same bytes", a == b and a[0] == 0)

    # Usage errors.
    done = subprocess.run([BINARY, "select", "extra"], capture_output=True, input=b"{}")
    check("select with an argument is a usage error", done.returncode == 2 and b"unexpected" in done.stderr)
    done = subprocess.run([BINARY, "--version"], capture_output=True)
    check("--version", done.returncode == 0 and done.stdout.startswith(b"zarrmount "))


def main():
    conformance_cases()
    contract()
    print(f"1..{len(results)}")
    for i, (ok, name, detail) in enumerate(results, 1):
        print(f"{'ok' if ok else 'not ok'} {i} - {name}")
        if not ok:
            print(f"# {detail}")
    return 0 if all(ok for ok, _, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
