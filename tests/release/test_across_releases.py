#!/usr/bin/python3
"""Runs compare_exports.py for each other release named in
$ZM_RELEASE_BUILDS ("13=build/debian-13/test/zarrmount sid=..."), against
this build ($ZM_BINARY); skipped, saying why, when it names none. Prints TAP."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))


def main():
    builds = [entry.partition("=") for entry in os.environ.get("ZM_RELEASE_BUILDS", "").split()]
    builds = [(release, binary) for release, _, binary in builds if release and binary]
    host = dict(line.rstrip("\n").split("=", 1) for line in open("/etc/os-release") if "=" in line)
    if builds and host.get("VERSION_ID", "").strip('"') != "12":
        print(f"1..0 # SKIP the comparison is made from a Debian 12 build (this is "
              f"{host.get('PRETTY_NAME', '?').strip(chr(34))})")
        return 0
    if not builds:
        print("1..0 # SKIP no other release's build named (ZM_RELEASE_BUILDS; scripts/run-tests sets it)")
        return 0
    lines, failed = [], False
    for release, binary in builds:
        binary = binary if os.path.isabs(binary) else os.path.join(ROOT, binary)
        done = subprocess.run([sys.executable, os.path.join(HERE, "compare_exports.py"), release,
                               os.environ["ZM_BINARY"], binary], capture_output=True, text=True)
        failed |= done.returncode != 0
        for line in done.stdout.splitlines():
            if line.startswith(("ok ", "not ok ")):
                status, _, rest = line.partition(" - ")
                lines.append((status.split()[0] == "ok" and not status.startswith("not"),
                              f"Debian 12 and {release}: {rest}"))
            elif line.startswith("#"):
                lines.append((None, f"# Debian {release}: {line[1:].strip()}"))
        if done.returncode != 0 and not any(ok is False for ok, _ in lines):
            lines.append((False, f"Debian 12 and {release}: compare_exports.py failed: "
                          f"{done.stderr.strip()[-300:]}"))
    count = sum(1 for ok, _ in lines if ok is not None)
    print(f"1..{count}")
    n = 0
    for ok, text in lines:
        if ok is None:
            print(text)
            continue
        n += 1
        print(f"{'ok' if ok else 'not ok'} {n} - {text}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
