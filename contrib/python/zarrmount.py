"""Mount a single-cell file with zarrmount from Python, for notebooks and tests.

``mount()`` runs the ``zarrmount`` binary (``$ZARRMOUNT``, else ``zarrmount`` on ``PATH``),
waits until the mount is ready and unmounts it when the ``with`` block ends, whether it ends
normally or by an exception, and at the latest when the interpreter exits (``atexit``, a
``SIGTERM`` while no other handler is installed, or the mount object being collected)::

    import zarrmount

    with zarrmount.mount("atlas.h5ad", cache_size="2G", threads=4) as m:
        print(m.path)                                   # a pathlib.Path: the mount point
        print(m.view("uniform", seed=0, k=50000))       # MNT/uniform/seed0/k=50000
        print(m.view("blocks", k=10000, block_size=1024))   # MNT/blocks/B=1024/seed0/k=10000
        print(m.view("stratified", share="0.1", key="cell_type",
                     allocation="balanced", minimum=50))
        print(m.view("uniform", k=500, where=("cell_type", ["T cell", "B cell"])))
        adata = m.read("uniform", k=5000)               # an AnnData (anndata.read_zarr)
        print(m.stats()["total"]["chunksSynthesized"])  # .zarrmount/stats.json as a dict

Options are the mount's ``-o`` options (docs/mount.md, "Options"): ``key=value`` gives
``-o key=value`` and ``key=True`` the bare flag (``allow_other=True`` is ``-o allow_other``);
``False`` and ``None`` leave the option out. ``mountpoint=None`` mounts on a new private
directory made with ``tempfile.mkdtemp`` (so under ``$TMPDIR``), removed after the unmount.

A source or option the daemon refuses raises ``MountError``, whose ``reason`` is the daemon's
own one line. Only the standard library is imported here; ``read()`` imports anndata.
"""
import atexit
import decimal
import json
import os
import pathlib
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import weakref

__all__ = ["mount", "Mount", "MountError", "view_path", "escape_value", "options_from"]

#: How long unmount() retries ``fusermount3 -u`` while the mount is busy before it detaches the
#: mount lazily (``fusermount3 -u -z``), in seconds.
UNMOUNT_TIMEOUT = 10.0
#: How long a mount that the command said is ready may take to appear in /proc/self/mountinfo.
READY_TIMEOUT = 30.0

_METHODS = ("full", "file", "uniform", "blocks", "stratified", "spatial")
_SETTINGS = {
    "uniform": (),
    "blocks": ("block_size",),
    "stratified": ("key", "allocation", "minimum"),
    "spatial": ("key", "grid", "columns"),
}


class MountError(RuntimeError):
    """A mount that could not be made (or unmade).

    ``reason`` is the daemon's one-line message, ``returncode`` its exit status (None when the
    command did not run or did not end), ``source`` and ``mountpoint`` what was asked.
    """

    def __init__(self, source, mountpoint, reason, returncode=None):
        super().__init__(f"zarrmount {source} {mountpoint}: {reason}")
        self.source = source
        self.mountpoint = mountpoint
        self.reason = reason
        self.returncode = returncode


def _unescape_mountinfo(field):
    """A path as /proc/self/mountinfo writes it (space, tab, newline, backslash as \\ooo)."""
    out = bytearray()
    raw = field.encode("utf-8", "surrogateescape")
    i = 0
    while i < len(raw):
        if raw[i] == 0x5C and raw[i + 1:i + 4].isdigit() and len(raw[i + 1:i + 4]) == 3:
            out.append(int(raw[i + 1:i + 4], 8))
            i += 4
        else:
            out.append(raw[i])
            i += 1
    return out.decode("utf-8", "surrogateescape")


def is_mounted(path):
    """Whether a FUSE file system is mounted at path, as /proc/self/mountinfo says."""
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            fields = line.split()
            # ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER
            if len(fields) < 7 or _unescape_mountinfo(fields[4]) != path:
                continue
            fstype = fields[fields.index("-") + 1] if "-" in fields else ""
            if fstype.startswith("fuse"):
                return True
    return False


def _binary():
    """The zarrmount binary: $ZARRMOUNT, else zarrmount on PATH."""
    binary = os.environ.get("ZARRMOUNT") or shutil.which("zarrmount")
    if not binary:
        raise FileNotFoundError("zarrmount: not found (set $ZARRMOUNT or put zarrmount on PATH)")
    return binary


def _option_args(options):
    """-o arguments for keyword options: key=value, True a bare flag, False/None left out."""
    args = []
    for key, value in options.items():
        if value is None or value is False:
            continue
        if value is True:
            args += ["-o", key]
        else:
            text = os.fspath(value) if isinstance(value, os.PathLike) else str(value)
            if "," in text:
                raise ValueError(f"option {key}={text!r}: a value cannot hold ','")
            args += ["-o", f"{key}={text}"]
    return args


def options_from(texts):
    """Keyword options from ``-o`` option texts, as a command line or an fstab line spells them:
    ``options_from(["codec=none", "allow_other"])`` and ``options_from(["codec=none,allow_other"])``
    are ``{"codec": "none", "allow_other": True}``, for ``mount(source, **options_from(...))``.
    A text may hold several options separated by ','; a later one of the same name wins."""
    if isinstance(texts, str):
        texts = [texts]
    options = {}
    for text in texts:
        for part in str(text).split(","):
            if not part:
                continue
            key, equals, value = part.partition("=")
            if not key:
                raise ValueError(f"option {part!r}: no name before '='")
            options[key] = value if equals else True
    return options


def escape_value(value):
    """A where/ value as the tree spells it (docs/mount.md, "Sets of cells"): %XX (uppercase)
    for '%', '/', ',', bytes below 0x20 and 0x7F, and every byte of a value '.' or '..';
    True/False are true/false. Returns str (bytes that are not UTF-8 stay surrogate escapes)."""
    if value is True or value is False:
        return "true" if value else "false"
    raw = value if isinstance(value, bytes) else str(value).encode("utf-8", "surrogateescape")
    if not raw:
        raise ValueError("where/: an empty value cannot be written in a path")
    if raw in (b".", b".."):
        return "".join(f"%{b:02X}" for b in raw)
    out = bytearray()
    for b in raw:
        if b in b"%/," or b < 0x20 or b == 0x7F:
            out += f"%{b:02X}".encode()
        else:
            out.append(b)
    return out.decode("utf-8", "surrogateescape")


def _number(name, value, least=0):
    """A canonical decimal of an integer setting."""
    if isinstance(value, bool) or not isinstance(value, int) and not (
            isinstance(value, str) and value.isdigit()):
        raise TypeError(f"{name}={value!r}: an integer")
    if int(value) < least:
        raise ValueError(f"{name}={value!r}: at least {least}")
    return str(int(value))


def _share_text(value):
    """A share or percentage as a plain decimal (a float by its shortest repr, no exponent)."""
    if isinstance(value, bool):
        raise TypeError(f"share {value!r}: a number")
    if isinstance(value, str):
        return value
    if isinstance(value, float):
        value = decimal.Decimal(repr(value))
    text = format(decimal.Decimal(value), "f")
    return text


def view_path(method, seed=0, k=None, share=None, *, pct=None, where=None, set=None,
              **settings):
    """The path of a view, relative to the mount point, as the tree spells it (README, the
    tree's table):

    - ``"full"``, ``"file"``: no seed or size;
    - ``"uniform"``: ``uniform/seed<S>/<size>``;
    - ``"blocks"``: ``blocks[/B=<block_size>]/seed<S>/<size>``;
    - ``"stratified"`` (``key`` an obs column): ``stratified/<key>[/<allocation>/min=<minimum>]
      /seed<S>/<size>``, allocation ``proportional`` (default) or ``balanced``, minimum 0 by
      default, both written when either is given;
    - ``"spatial"`` (``key`` an obsm entry): ``spatial/<key>[/G=<grid>/cols=<columns>]
      /seed<S>/<size>``, both written when either is given (grid 32 by default; ``columns``, a
      list of one to three column numbers, must then be given: ``Mount.view`` fills it in).

    The size is exactly one of ``k`` (``k=<K>``), ``share`` (``share=<fraction>``) or ``pct``
    (``pct=<percent>``); ``share=`` and ``pct=`` paths are the links to the ``k=`` they resolve
    to. ``where=(key, values)`` (or a one-item dict) puts the view under
    ``where/<key>/<v1>,<v2>/`` (values escaped by ``escape_value``); ``set=NAME`` under
    ``sets/<NAME>/`` (a set file of ``-o sets=DIR``). Only one of the two.
    """
    if method not in _METHODS:
        raise ValueError(f"method {method!r}: one of {', '.join(_METHODS)}")
    allowed = _SETTINGS.get(method, ())
    unknown = sorted(set_ for set_ in settings if set_ not in allowed)
    if unknown:
        raise TypeError(f"{method}: unknown setting {unknown[0]!r}"
                        + (f" (it takes {', '.join(allowed)})" if allowed else " (it takes none)"))
    if where is not None and set is not None:
        raise ValueError("where= and set= cannot be combined (the tree nests neither)")
    prefix = ""
    if set is not None:
        name = str(set)
        if not name or "/" in name or name in (".", ".."):
            raise ValueError(f"set {name!r}: a set file's name")
        prefix = f"sets/{name}/"
    elif where is not None:
        if isinstance(where, dict):
            if len(where) != 1:
                raise ValueError("where=: one obs key and its values")
            where = next(iter(where.items()))
        key, values = where
        if isinstance(values, (str, bytes, bool)) or not hasattr(values, "__iter__"):
            values = [values]
        values = [escape_value(v) for v in values]
        if not values:
            raise ValueError("where=: at least one value")
        prefix = f"where/{key}/{','.join(values)}/"
    sizes = [(name, value) for name, value in (("k", k), ("share", share), ("pct", pct))
             if value is not None]
    if method in ("full", "file"):
        if sizes:
            raise ValueError(f"{method}: takes no size (every cell)")
        return prefix + method
    if len(sizes) != 1:
        raise ValueError(f"{method}: exactly one of k=, share= or pct=")
    size_name, size_value = sizes[0]
    size = f"k={_number('k', size_value, 1)}" if size_name == "k" else \
        f"{size_name}={_share_text(size_value)}"
    parts = [method]
    if method == "blocks" and settings.get("block_size") is not None:
        parts.append(f"B={_number('block_size', settings['block_size'], 1)}")
    elif method in ("stratified", "spatial"):
        if not settings.get("key"):
            raise ValueError(f"{method}: key= names the {'obs column' if method == 'stratified' else 'obsm entry'}")
        parts.append(str(settings["key"]))
        if method == "stratified" and (settings.get("allocation") is not None
                                       or settings.get("minimum") is not None):
            allocation = settings.get("allocation") or "proportional"
            if allocation not in ("proportional", "balanced"):
                raise ValueError(f"allocation {allocation!r}: proportional or balanced")
            parts += [allocation, f"min={_number('minimum', settings.get('minimum') or 0)}"]
        if method == "spatial" and (settings.get("grid") is not None
                                    or settings.get("columns") is not None):
            columns = settings.get("columns")
            if columns is None:
                raise ValueError("spatial: grid= needs columns= (Mount.view fills them in)")
            if isinstance(columns, int):
                columns = [columns]
            columns = [_number("columns", c) for c in columns]
            if not 1 <= len(columns) <= 3:
                raise ValueError("spatial: columns= holds one to three column numbers")
            grid = settings.get("grid")
            parts += [f"G={_number('grid', 32 if grid is None else grid, 1)}",
                      f"cols={','.join(columns)}"]
    parts += [f"seed{_number('seed', seed)}", size]
    return prefix + "/".join(parts)


class _State:
    """What unmounting needs, apart from the Mount (the finalizer must not hold it)."""

    def __init__(self, point, private, binary):
        self.point = point
        self.private = private
        self.binary = binary
        self.daemon = None       # the foreground daemon (subprocess.Popen), if any
        self.pid = None          # the daemon's pid (a background daemon: found in /proc)
        self.start_time = None   # its start time (/proc/PID/stat), so a reused pid is not it
        self.log_file = None
        self.returncode = None
        self.lock = threading.Lock()


def _proc_start_time(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rindex(b")") + 2:].split()
    state, start = fields[0], fields[19]
    return None if state in (b"Z", b"X") else int(start)


def _find_daemon(binary, point):
    """The background daemon of point: the process whose arguments are the command's."""
    want = os.path.realpath(point).encode("utf-8", "surrogateescape")
    name = os.path.basename(binary).encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv and os.path.basename(argv[0]) == name and want in argv[1:]:
            return int(entry)
    return None


def _unmount(state, timeout):
    """Unmounts state's point (fusermount3 -u, retried while busy, then -u -z), waits for the
    daemon to end and removes a private mount point. Safe to call more than once."""
    with state.lock:
        point = state.point
        lazy = False
        if is_mounted(point):
            deadline = time.monotonic() + timeout
            while True:
                done = subprocess.run(["fusermount3", "-u", point], capture_output=True)
                if done.returncode == 0 or not is_mounted(point):
                    break
                if time.monotonic() >= deadline:
                    subprocess.run(["fusermount3", "-u", "-z", point], capture_output=True)
                    lazy = True
                    break
                time.sleep(0.1)
        # The daemon ends once the kernel has let the mount go. After a lazy unmount that is
        # once the last file open on it is closed, which may be this process's own: it is not
        # waited for.
        if lazy:
            pass
        elif state.daemon is not None:
            try:
                state.returncode = state.daemon.wait(timeout=max(timeout, 1.0) * 6)
            except subprocess.TimeoutExpired:
                state.daemon.kill()
                state.returncode = state.daemon.wait()
            if state.log_file is not None:
                state.log_file.close()
                state.log_file = None
        elif state.pid is not None:
            deadline = time.monotonic() + max(timeout, 1.0) * 6
            while (_proc_start_time(state.pid) == state.start_time
                   and time.monotonic() < deadline):
                time.sleep(0.01)
            state.pid = None
        if state.private:
            try:
                os.rmdir(point)
            except OSError:
                pass
            state.private = False


_live = weakref.WeakSet()
_sigterm_installed = False


def _on_sigterm(signum, frame):
    """SIGTERM while mounts are live: exit as on sys.exit, so that atexit unmounts them."""
    raise SystemExit(128 + signum)


def _install_sigterm():
    """Makes SIGTERM unmount (through SystemExit and atexit) if nothing else handles it."""
    global _sigterm_installed
    if _sigterm_installed or threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _on_sigterm)
    _sigterm_installed = True


def _unmount_all():
    for m in list(_live):
        m.unmount()


atexit.register(_unmount_all)


class Mount:
    """A live zarrmount mount (made by ``mount()``); a context manager that unmounts on exit.

    ``path`` is the mount point (a ``pathlib.Path``), ``source`` the source, ``options`` the
    ``-o`` options given. After ``unmount()``, ``returncode`` is the daemon's exit status when
    it ran in the foreground (``foreground=True``; None otherwise) and ``log()`` its log.
    """

    def __init__(self, source, mountpoint=None, *, binary=None, foreground=False,
                 unmount_timeout=UNMOUNT_TIMEOUT, env=None, parent=None, **options):
        self.source = os.fspath(source)
        self.options = dict(options)
        self.unmount_timeout = unmount_timeout
        binary = binary or _binary()
        private = mountpoint is None
        point = (tempfile.mkdtemp(prefix="zarrmount-", dir=parent) if private
                 else os.fspath(mountpoint))
        point = os.path.realpath(point)
        self.path = pathlib.Path(point)
        self._state = _State(point, private, binary)
        self._finalizer = weakref.finalize(self, _unmount, self._state, unmount_timeout)
        args = [binary, self.source, point] + _option_args(self.options)
        try:
            if foreground:
                self._start_foreground(args, env)
            else:
                self._start_background(args, env)
            self._wait_ready()
        except BaseException:
            self._finalizer()
            raise
        _live.add(self)
        _install_sigterm()

    def _start_background(self, args, env):
        """The command detaches once the mount is ready (docs/mount.md): its exit status says
        how starting went, and a refusal is its one line on stderr."""
        done = subprocess.run(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, env=env)
        if done.returncode != 0:
            raise MountError(self.source, self._state.point, _last_line(done.stderr) or
                             f"exit status {done.returncode}", done.returncode)
        pid = _find_daemon(self._state.binary, self._state.point)
        if pid is not None:
            self._state.pid, self._state.start_time = pid, _proc_start_time(pid)

    def _start_foreground(self, args, env):
        """-f: the daemon is our child, logging to a file; ready once mounted."""
        state = self._state
        state.log_file = tempfile.TemporaryFile()
        state.daemon = subprocess.Popen(args + ["-f"], stdin=subprocess.DEVNULL,
                                        stdout=state.log_file, stderr=subprocess.STDOUT, env=env)
        while not is_mounted(state.point):
            if state.daemon.poll() is not None:
                state.returncode = state.daemon.returncode
                raise MountError(self.source, state.point,
                                 _last_line(self.log()) or f"exit status {state.returncode}",
                                 state.returncode)
            time.sleep(0.02)

    def _wait_ready(self):
        """Ready: the mount is in /proc/self/mountinfo and its root lists."""
        deadline = time.monotonic() + READY_TIMEOUT
        while not is_mounted(self._state.point):
            if time.monotonic() >= deadline:
                raise MountError(self.source, self._state.point,
                                 "the command succeeded but nothing is mounted there")
            time.sleep(0.02)
        try:
            os.listdir(self._state.point)
        except OSError as error:
            raise MountError(self.source, self._state.point,
                             f"mounted, but its root does not list: {error.strerror}") from error

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.unmount()
        return False

    def __repr__(self):
        state = "mounted" if self.mounted else "unmounted"
        return f"<zarrmount.Mount {self.source} at {self.path} ({state})>"

    @property
    def mounted(self):
        """Whether the mount is still there."""
        return self._finalizer.alive and is_mounted(self._state.point)

    @property
    def pid(self):
        """The daemon's process id (None if it could not be found)."""
        return self._state.daemon.pid if self._state.daemon is not None else self._state.pid

    @property
    def returncode(self):
        """The foreground daemon's exit status once unmounted (None for a background one)."""
        return self._state.returncode

    def log(self):
        """The foreground daemon's log as bytes (b"" for a background daemon: it logs to
        syslog)."""
        f = self._state.log_file
        if f is None:
            return getattr(self, "_log", b"")
        f.flush()
        f.seek(0)
        self._log = f.read()
        return self._log

    def unmount(self, timeout=None):
        """Unmounts (``fusermount3 -u``, retried for ``timeout`` seconds while a file is open on
        the mount, then ``fusermount3 -u -z``, which detaches it at once and lets the daemon
        end when the last open file is closed), waits for the daemon to end (but after a lazy
        unmount) and removes a private mount point. Does nothing the second time."""
        if self._state.log_file is not None:
            self.log()
        if timeout is not None and self._finalizer.alive:
            self._finalizer.detach()
            _unmount(self._state, timeout)
        else:
            self._finalizer()
        _live.discard(self)

    def view(self, method, seed=0, k=None, share=None, **settings):
        """The path (``pathlib.Path``) of a view under the mount: ``view_path``'s arguments
        (``pct=``, ``where=``, ``set=`` and the method's settings). Spatial ``grid=`` without
        ``columns=`` takes the first (up to) three columns, as the tree does. Raises
        FileNotFoundError, with the tree's reason, if the view does not exist."""
        if method == "spatial" and settings.get("grid") is not None and \
                settings.get("columns") is None and settings.get("key"):
            with open(self.path / "full" / "obsm" / str(settings["key"]) / ".zarray") as f:
                shape = json.load(f)["shape"]
            count = shape[1] if len(shape) > 1 else 1
            settings["columns"] = list(range(min(3, count)))
        path = self.path / view_path(method, seed, k, share, **settings)
        if not os.path.exists(path):
            raise FileNotFoundError(2, f"no such view: {self.explain(path)}", str(path))
        return path

    def explain(self, path):
        """``zarrmount explain`` of a path (under the mount, or relative to it) as text."""
        path = pathlib.Path(path)
        if not path.is_absolute():
            path = self.path / path
        done = subprocess.run([self._state.binary, "explain", str(path)], capture_output=True)
        if done.returncode:
            return _last_line(done.stdout) or _last_line(done.stderr)
        return done.stdout.decode(errors="replace").strip()

    def read(self, method, seed=0, k=None, share=None, **settings):
        """The view as an AnnData (``anndata.read_zarr``); the arguments are ``view``'s."""
        import anndata  # only here: the module imports nothing beyond the standard library
        return anndata.read_zarr(str(self.view(method, seed, k, share, **settings)))

    def stats(self):
        """The mount's counters: MOUNTPOINT/.zarrmount/stats.json as a dict (docs/mount.md,
        "Stats")."""
        return json.loads((self.path / ".zarrmount" / "stats.json").read_bytes())

    def info(self):
        """MOUNTPOINT/.zarrmount/info.json as a dict: the source, the version, the options."""
        return json.loads((self.path / ".zarrmount" / "info.json").read_bytes())


def _last_line(data):
    text = data.decode(errors="replace") if isinstance(data, bytes) else data
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def mount(source, mountpoint=None, **options):
    """Mounts source (an .h5ad, .h5mu, loom or 10x .h5 file, or a Zarr store) and returns a
    ready ``Mount``; use it as ``with zarrmount.mount(source) as m:``.

    ``mountpoint``: an existing directory, or None for a new private one (removed after).
    ``options``: ``-o`` options (``key=value``; ``True`` a bare flag; ``False``/``None`` left
    out). Keyword-only extras: ``binary`` (else ``$ZARRMOUNT`` or PATH), ``foreground=True``
    (the daemon runs with ``-f`` as a child, its exit status and log kept), ``unmount_timeout``
    (seconds of ``fusermount3 -u`` retries before ``-z``), ``env`` (the daemon's environment),
    ``parent`` (the directory a private mount point is made in; default ``$TMPDIR``).
    Raises MountError with the daemon's one-line reason if the mount is refused.
    """
    return Mount(source, mountpoint, **options)
