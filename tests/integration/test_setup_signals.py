#!/usr/bin/python3
"""A stop signal ends a daemon that is still opening its source (issue 17:
"SIGTERM/SIGINT end a daemon that is still opening its source within a
second").

The open is made to hang for as long as the test likes, deterministically: the
source lies on another zarrmount mount whose daemon is stopped (SIGSTOP). The
kernel already knows the file's name and attributes (looked up before the
stop: realpath and stat succeed, as a source's would) but has none of its
pages, so the second daemon's first read of it, in the source's open, waits in
the kernel for an answer that never comes. Each stop signal is then sent, to a daemon in the foreground (-f) and to
the command that waits for its background daemon; the process must end, die of
that signal (so whoever waits sees why), say in one line that nothing was
mounted, and leave no mount. None of this is timed: a generous timeout turns
a hang into a failure.
"""
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from live_mount import BINARY, PARENT, SOURCE, Mount, check, daemon_env, mounted_points, report  # noqa: E402

# Long enough for any machine to end a signalled process; only a hang waits it out.
HANG_SECONDS = 60


def waits_on_fuse(pid, task):
    """Whether a thread sleeps in the kernel on the stopped mount: a FUSE
    request, or a page of it (uninterruptible sleep: no other thread of a
    daemon that is opening its source sleeps so)."""
    with open(f"/proc/{pid}/task/{task}/wchan") as f:
        wchan = f.read()
    with open(f"/proc/{pid}/task/{task}/stat") as f:
        state = f.read().rsplit(")", 1)[1].split()[0]
    return "fuse" in wchan or state == "D"


def wait_blocked(process, foreground, seconds=20):
    """Waits until the daemon (the process itself in the foreground, else its
    child) has a thread asleep on the stopped mount, or ends; True when it is
    waiting."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        try:
            pids = [process.pid]
            if not foreground:
                with open(f"/proc/{process.pid}/task/{process.pid}/children") as f:
                    pids = [int(p) for p in f.read().split()]
            for pid in pids:
                # The source is opened on a thread of its own while the
                # main thread waits for stop signals: a main thread in
                # uninterruptible sleep is still starting (paging the binary
                # in on a loaded machine), before its signals are set.
                for task in os.listdir(f"/proc/{pid}/task"):
                    if int(task) != pid and waits_on_fuse(pid, task):
                        return True
        except (FileNotFoundError, ProcessLookupError, PermissionError, IndexError, ValueError):
            pass
        time.sleep(0.05)
    return False


def wait_stopped(pid, seconds=HANG_SECONDS):
    """Waits until every thread of pid is stopped (state T): kill() returns
    once SIGSTOP is sent, and on a loaded machine a worker of the first
    daemon may still answer a read (the second daemon's, of its source) before
    it stops. True when all are."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        states = []
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{task}/stat") as f:
                    states.append(f.read().rsplit(")", 1)[1].split()[0])
            except FileNotFoundError:
                pass
        if states and all(state in ("T", "t") for state in states):
            return True
        time.sleep(0.01)
    return False


def main():
    with Mount(SOURCE, debug=False) as hung:
        # The second daemon's source: a file of the first mount whose name and
        # attributes the kernel keeps (looked up and opened now) and none of
        # whose pages it has (never read), so reading it must ask the
        # (stopped) first daemon.
        source = os.path.join(hung.point, ".zarrmount", "info.json")
        os.close(os.open(source, os.O_RDONLY))
        os.kill(hung.daemon.pid, signal.SIGSTOP)
        try:
            check("the first daemon is stopped, every thread of it", wait_stopped(hung.daemon.pid))
            for foreground in (True, False):
                for number in (signal.SIGTERM, signal.SIGINT):
                    name = f"{signal.Signals(number).name} {'to a daemon in the foreground' if foreground else 'to the command waiting for its daemon'}"
                    point = tempfile.mkdtemp(prefix="zm-setup-", dir=PARENT)
                    args = [BINARY, source, point] + (["-f"] if foreground else [])
                    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                               env=daemon_env(), start_new_session=True)
                    blocked = wait_blocked(process, foreground)
                    check(f"{name}: the daemon is still opening its source", blocked,
                          "it ended or never waited")
                    process.send_signal(number)
                    try:
                        output, _ = process.communicate(timeout=HANG_SECONDS)
                        ended = True
                    except subprocess.TimeoutExpired:
                        process.kill()
                        output, _ = process.communicate()
                        ended = False
                    text = output.decode(errors="replace")
                    check(f"{name}: the process ends", ended, text)
                    if foreground:
                        check(f"{name}: it dies of the signal", process.returncode == -number,
                              f"exit status {process.returncode}\n{text}")
                    else:
                        check(f"{name}: the command fails and says the daemon was stopped",
                              process.returncode != 0 and f"signal {int(number)}" in text,
                              f"exit status {process.returncode}\n{text}")
                    check(f"{name}: one line says nothing was mounted",
                          f"stopped by signal {int(number)}" in text and "nothing was mounted" in text,
                          text)
                    check(f"{name}: no mount is left", point not in mounted_points(), point)
                    # The background daemon is in a session of its own: none may be left.
                    leftover = subprocess.run(["pgrep", "-f", "--", point], capture_output=True, text=True)
                    check(f"{name}: no daemon is left", leftover.stdout.strip() == "", leftover.stdout)
                    os.rmdir(point)
        finally:
            os.kill(hung.daemon.pid, signal.SIGCONT)
    # And a daemon that did open its source still stops on SIGTERM as before.
    point = tempfile.mkdtemp(prefix="zm-setup-", dir=PARENT)
    process = subprocess.Popen([BINARY, SOURCE, point, "-f"], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, env=daemon_env())
    deadline = time.monotonic() + HANG_SECONDS
    while point not in mounted_points() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    check("a mounted daemon: mounted", point in mounted_points())
    process.send_signal(signal.SIGTERM)
    try:
        output, _ = process.communicate(timeout=HANG_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
    check("a mounted daemon: SIGTERM unmounts and exits 0", process.returncode == 0 and
          point not in mounted_points(), output.decode(errors="replace"))
    return report()


if __name__ == "__main__":
    sys.exit(main())
