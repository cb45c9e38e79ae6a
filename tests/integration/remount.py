#!/usr/bin/python3
"""remount_as: turning a FUSE mount read-write and back, shared by
tests/fs/test_fuse.py and tests/integration/live_mount.py (test_security.py).
Importing it does nothing but define the function."""
import os
import subprocess


def remount_as(point, mode, timeout=None):
    """mount -i -o remount,MODE POINT, through mount(2); the finished
    subprocess.CompletedProcess (text output), timeout as subprocess.run's.

    util-linux 2.39 and later (Debian 13 has 2.41) remount with the new mount
    API (fspick, then fsconfig for every superblock option /proc/self/mountinfo
    lists: user_id, group_id, max_read); the kernel's FUSE refuses any option
    given that way on a reconfigure ("fuse: No changes allowed in reconfigure",
    fs/fuse/inode.c fuse_parse_param) while it ignores the same options passed
    to mount(2) with MS_REMOUNT. LIBMOUNT_FORCE_MOUNT2=always asks libmount
    for mount(2); util-linux 2.38 (Debian 12) uses mount(2) anyway. Only the
    ro/rw flag changes either way: the daemon is not involved."""
    return subprocess.run(["mount", "-i", "-o", f"remount,{mode}", point], capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ, LIBMOUNT_FORCE_MOUNT2="always"))
