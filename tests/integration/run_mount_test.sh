#!/usr/bin/env bash
# Runs a test that mounts (argument: the Python script) with every mount
# point under one private directory, and unmounts whatever is left there in
# every outcome, even if the test itself crashes.
set -u
parent=$(mktemp -d /tmp/zm-mounts.XXXXXX)
export ZM_MOUNT_PARENT="$parent"
# The mounts' disk cache (by default under $XDG_CACHE_HOME) stays in here too.
export XDG_CACHE_HOME="$parent/cache"
cleanup() {
    for point in $(awk -v p="$parent/" '$3 ~ /^fuse/ && index($2, p) == 1 {print $2}' /proc/mounts); do
        fusermount3 -u "$point" 2>/dev/null || fusermount3 -u -z "$point" 2>/dev/null
    done
    pkill -f -- "$parent/" 2>/dev/null
    rm -rf "$parent" 2>/dev/null
}
trap cleanup EXIT INT TERM
/usr/bin/python3 "$@"
