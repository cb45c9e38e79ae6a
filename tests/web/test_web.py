#!/usr/bin/python3
"""A mount served to a browser (docs/web.md, contrib/nginx/zarrmount.conf):

- fixtures/sources/h5ad/full-csr.h5ad is mounted twice, with -o allow_other
  and without;
- Debian's nginx runs as a child (its own prefix, logs, temp directories and
  pid file in a temporary directory, daemon off, unprivileged ports, workers as
  www-data as on a Debian server; never /etc/nginx or the system service),
  with the server block of contrib/nginx/zarrmount.conf twice, its placeholders
  replaced (the allow_other mount, and the other), and a second server on its
  own port (so another origin) for the page: tests/web/index.html and app.js,
  page.js bundled with zarrita (tests/web/package-lock.json, `npm ci` into a
  cache reused between runs) by esbuild;
- over HTTP: CORS for the configured origin (Access-Control-Allow-Origin on
  200, 206, 304 and 404; an OPTIONS preflight answered 204 allowing GET, HEAD
  and Range) and none of it for another; no Content-Encoding for a request
  with Accept-Encoding: gzip; Range; HEAD; ETag and Last-Modified (the file's
  mtime) revalidated to 304; read-only (POST 403); .zarrmount/ hidden; the
  mount without allow_other is 403 (nginx's workers are not its user);
- Debian's headless Chromium, driven over --remote-debugging-pipe (DevTools
  protocol, no extra package), opens the page on the allowed origin: zarrita
  reads obsm/X_pca, obsm/X_umap, a slice, and X's CSR data/indices/indptr
  (blosc/zstd chunks, decoded by numcodecs.js) of full/ and of a subsample,
  equal to zarr-python's reading of the same paths (integers exactly, floats
  bit for bit), the attributes too, and a suffix Range after a preflight; every
  request the page made went to this nginx; on another origin (localhost for
  127.0.0.1) the browser refuses the responses.

Needs root (allow_other, nginx's user www-data); installs nginx and chromium
with scripts/install-deps --web; skips without npm. Every mount, nginx and
Chromium end in every outcome (run by run_mount_test.sh, which also unmounts
whatever a crash leaves). No step has a time limit. Prints TAP.
"""
import contextlib
import email.utils
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import traceback
import urllib.parse

import numpy as np
import zarr

BINARY = os.environ.get("ZM_BINARY", "build/zarrmount")
ROOT = os.environ.get("ZM_SOURCE_ROOT", ".")
# Mounts go through the Python helper (contrib/python/zarrmount.py), foreground.
sys.path.insert(0, os.path.join(ROOT, "contrib", "python"))
import zarrmount  # noqa: E402
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from nginx_child import free_ports, read_text, request  # noqa: E402
from nginx_child import running as nginx  # noqa: E402
HERE = os.path.join(ROOT, "tests", "web")
TEMPLATE = os.path.join(ROOT, "contrib", "nginx", "zarrmount.conf")
SOURCE = os.path.join(ROOT, "fixtures", "sources", "h5ad", "full-csr.h5ad")
CACHE = os.environ.get("ZM_WEB_CACHE", os.path.join(ROOT, "build", "web-node_modules"))
CHROMIUM = "/usr/bin/chromium"
# What the page reads of each view: obsm (float32 and float64), a slice of
# rows, and X's CSR arrays.
ARRAYS = ["obsm/X_pca", "obsm/X_umap", "obsm/X_pca[10:20]", "X/data", "X/indices", "X/indptr"]
VIEWS = ["full", "uniform/seed1/k=25"]
results = []


def check(name, ok, detail=""):
    results.append((bool(ok), name, detail))


@contextlib.contextmanager
def mounted(source, *options):
    """Mounts source (a foreground daemon, through the Python helper) at point, or a new
    directory; always unmounts. A refused mount raises zarrmount.MountError (a RuntimeError)
    with the daemon's reason."""
    with zarrmount.mount(source, None, parent=os.environ.get("ZM_MOUNT_PARENT"), binary=os.path.abspath(BINARY),
                         foreground=True, **zarrmount.options_from(options)) as mount:
        yield str(mount.path)


# ---- node_modules and the page -----------------------------------------------------


def node_modules():
    """`npm ci` of tests/web's lock into CACHE, unless CACHE already holds that lock's
    install. Returns CACHE, or raises naming what failed."""
    with open(os.path.join(HERE, "package-lock.json"), "rb") as f:
        lock = f.read()
    installed = os.path.join(CACHE, "installed-package-lock.json")
    with contextlib.suppress(OSError), open(installed, "rb") as f:
        if f.read() == lock and os.path.isdir(os.path.join(CACHE, "node_modules", "zarrita")):
            return CACHE
    os.makedirs(CACHE, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(installed)
    for name in ("package.json", "package-lock.json"):
        shutil.copyfile(os.path.join(HERE, name), os.path.join(CACHE, name))
    # --ignore-scripts: esbuild's install script only checks the binary its optional
    # dependency @esbuild/linux-x64 brings.
    done = subprocess.run(["npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund"],
                          cwd=CACHE, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"npm ci in {CACHE} failed: {done.stderr.strip()[-2000:]}")
    with open(installed, "wb") as f:
        f.write(lock)
    return CACHE


def make_page(directory):
    """index.html and app.js (page.js and zarrita, bundled) in directory."""
    cache = node_modules()
    # Bundled from inside CACHE, where "zarrita" resolves to its node_modules.
    shutil.copyfile(os.path.join(HERE, "page.js"), os.path.join(cache, "page.js"))
    done = subprocess.run([os.path.join(cache, "node_modules", ".bin", "esbuild"), "page.js",
                           "--bundle", "--format=esm", "--platform=browser", "--target=es2022",
                           "--log-level=warning", f"--outfile={os.path.join(directory, 'app.js')}"],
                          cwd=cache, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"esbuild failed: {done.stderr.strip()}")
    shutil.copyfile(os.path.join(HERE, "index.html"), os.path.join(directory, "index.html"))
    for name in os.listdir(directory):
        os.chmod(os.path.join(directory, name), 0o644)
    os.chmod(directory, 0o755)


# ---- nginx ---------------------------------------------------------------------------


def server_block(listen, mount_point, origin):
    """contrib/nginx/zarrmount.conf with its placeholders replaced, as docs/web.md's sed."""
    with open(TEMPLATE) as f:
        text = f.read()
    for key, value in (("@LISTEN@", listen), ("@MOUNT_POINT@", mount_point),
                       ("@ALLOWED_ORIGIN@", origin)):
        if key not in text:
            raise RuntimeError(f"{TEMPLATE} has no placeholder {key}")
        text = text.replace(key, value)
    left = re.findall(r"@[A-Z_]+@", text)
    if left:
        raise RuntimeError(f"{TEMPLATE} has placeholders the docs do not name: {left}")
    return text


LOG_FIELDS = ["method", "uri", "status", "origin", "accept_encoding", "content_encoding",
              "allow_origin", "range", "user_agent", "port"]


def nginx_conf(prefix, servers, page_port, page_dir, store_origin):
    """The main configuration: everything nginx writes in prefix, the server blocks,
    and the page's server with a Content-Security-Policy that lets it fetch only from
    itself and the store's server."""
    temps = "\n".join(f"    {kind}_temp_path {prefix}/temp/{kind};"
                      for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    log_format = "\\t".join(f"${v}" for v in ("request_method", "uri", "status", "http_origin",
                                              "http_accept_encoding", "sent_http_content_encoding",
                                              "sent_http_access_control_allow_origin", "http_range",
                                              "http_user_agent", "server_port"))
    return f"""daemon off;
master_process on;
worker_processes 2;
user www-data;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log info;
events {{
    worker_connections 256;
}}
http {{
{temps}
    log_format zarrmount "{log_format}";
    access_log {prefix}/access.log zarrmount;
{servers}
    server {{
        listen 127.0.0.1:{page_port};
        root {page_dir};
        types {{
            text/html html;
            text/javascript js;
        }}
        add_header Content-Security-Policy "default-src 'none'; script-src 'self' 'unsafe-eval' 'wasm-unsafe-eval'; connect-src 'self' {store_origin}" always;
        add_header Cache-Control no-store always;
    }}
}}
"""


def file_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def check_http(port, point, origin, closed_port):
    """What nginx answers plain HTTP clients: CORS, gzip, Range, validators, read-only."""
    chunk = "/full/obsm/X_pca/0.0"
    expected = file_bytes(point + chunk)
    status, headers, body = request(port, "GET", chunk, {"Origin": origin, "Accept-Encoding": "gzip, deflate, br"})
    check("a chunk asked with Accept-Encoding: gzip is the mount's bytes, 200, without Content-Encoding",
          status == 200 and body == expected and "content-encoding" not in headers,
          f"{status} {headers}")
    check("a chunk's answer names the configured origin in Access-Control-Allow-Origin",
          headers.get("access-control-allow-origin") == origin, headers)
    check("a chunk is application/octet-stream, of Content-Length its size",
          headers.get("content-type") == "application/octet-stream"
          and headers.get("content-length") == str(len(expected)), headers)
    st = os.stat(point + chunk)
    check("Last-Modified is the mount's mtime of the file, and there is an ETag",
          headers.get("last-modified") == email.utils.formatdate(st.st_mtime, usegmt=True)
          and re.fullmatch(r'"[0-9a-f]+-[0-9a-f]+"', headers.get("etag", "")),
          f"{headers.get('last-modified')} {headers.get('etag')} mtime {st.st_mtime}")
    check("Access-Control-Expose-Headers lets a script read Content-Range and ETag",
          {"content-range", "etag"} <= {h.strip().lower() for h in headers.get("access-control-expose-headers", "").split(",")},
          headers)

    metadata = file_bytes(point + "/full/.zmetadata")
    status, headers, body = request(port, "GET", "/full/.zmetadata", {"Origin": origin, "Accept-Encoding": "gzip"})
    check(".zmetadata asked with Accept-Encoding: gzip is the mount's bytes, not gzip'd",
          status == 200 and body == metadata and "content-encoding" not in headers
          and headers.get("content-type") == "application/octet-stream", f"{status} {headers}")

    status, headers, body = request(port, "GET", chunk, {"Origin": origin, "Range": "bytes=4-13"})
    check("Range bytes=4-13 is 206 with those bytes, Content-Range and the origin",
          status == 206 and body == expected[4:14]
          and headers.get("content-range") == f"bytes 4-13/{len(expected)}"
          and headers.get("access-control-allow-origin") == origin, f"{status} {headers}")
    status, headers, body = request(port, "GET", chunk, {"Range": "bytes=-16"})
    check("a suffix Range bytes=-16 is 206 with the last 16 bytes",
          status == 206 and body == expected[-16:], f"{status} {headers}")

    status, headers, body = request(port, "HEAD", chunk, {"Origin": origin})
    check("HEAD is 200, no body, Content-Length the size",
          status == 200 and body == b"" and headers.get("content-length") == str(len(expected)), headers)

    status, headers, body = request(port, "OPTIONS", chunk, {
        "Origin": origin, "Access-Control-Request-Method": "GET",
        "Access-Control-Request-Headers": "range"})
    methods = {m.strip() for m in headers.get("access-control-allow-methods", "").split(",")}
    allowed = {h.strip().lower() for h in headers.get("access-control-allow-headers", "").split(",")}
    check("an OPTIONS preflight is 204, no body, allowing the origin, GET and HEAD, the Range header, for a day",
          status == 204 and body == b"" and headers.get("access-control-allow-origin") == origin
          and {"GET", "HEAD"} <= methods and "range" in allowed
          and headers.get("access-control-max-age") == "86400", f"{status} {headers}")

    _, first, _ = request(port, "GET", chunk)
    status, headers, body = request(port, "GET", chunk, {"Origin": origin, "If-None-Match": first.get("etag", "")})
    check("If-None-Match with the ETag is 304, no body, still with the origin",
          status == 304 and body == b"" and headers.get("access-control-allow-origin") == origin, f"{status} {headers}")
    status, headers, body = request(port, "GET", chunk, {"If-Modified-Since": first.get("last-modified", "")})
    check("If-Modified-Since with Last-Modified is 304", status == 304 and body == b"", f"{status} {headers}")
    check("answers say Cache-Control: no-cache (revalidate)", first.get("cache-control") == "no-cache", first)

    status, headers, _ = request(port, "GET", "/full/obsm/no-such-array/.zarray", {"Origin": origin})
    check("a missing file is 404 with the origin (a reader sees 404, not a CORS failure)",
          status == 404 and headers.get("access-control-allow-origin") == origin, f"{status} {headers}")
    status, _, _ = request(port, "POST", chunk, {"Content-Length": "0"})
    check("POST is refused (403): read-only", status == 403, status)
    status, _, _ = request(port, "GET", "/.zarrmount/info.json")
    check(".zarrmount/info.json, on the mount, is not served (404)",
          status == 404 and os.path.exists(point + "/.zarrmount/info.json"), status)

    status, _, _ = request(closed_port, "GET", "/full/.zmetadata")
    check("a mount without -o allow_other is 403 (nginx's workers, www-data, may not enter it)",
          status == 403, status)


# ---- Chromium over the DevTools protocol -----------------------------------------------


class Browser:
    """Headless Chromium driven over --remote-debugging-pipe: JSON messages, each
    ended by NUL, written to its fd 3 and read from its fd 4."""

    def __init__(self, directory):
        commands_r, self.commands = os.pipe()
        self.replies, replies_w = os.pipe()
        self.log = open(os.path.join(directory, "chromium.log"), "wb")
        flags = ["--headless", "--no-sandbox", "--remote-debugging-pipe",
                 f"--user-data-dir={directory}/profile", "--disable-gpu", "--no-first-run",
                 "--no-default-browser-check", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-default-apps",
                 "--disable-extensions", "--mute-audio", "about:blank"]
        # The shell puts the pipes on fds 3 and 4, then becomes chromium.
        self.process = subprocess.Popen(
            ["bash", "-c", f'exec 3<&{commands_r} 4>&{replies_w} {commands_r}<&- {replies_w}>&-; exec "$@"',
             "chromium", CHROMIUM] + flags,
            pass_fds=(commands_r, replies_w), stdin=subprocess.DEVNULL,
            stdout=self.log, stderr=self.log)
        os.close(commands_r)
        os.close(replies_w)
        self.buffer = b""
        self.next_id = 0
        self.events = []
        # A page of our own (the first tab may not be there yet), and a session on it.
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Network"):
            self.call(f"{domain}.enable", session=True)

    def _message(self):
        while b"\0" not in self.buffer:
            piece = os.read(self.replies, 1 << 20)
            if not piece:
                raise RuntimeError(f"chromium closed its pipe (exit {self.process.poll()})")
            self.buffer += piece
        text, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(text)

    def call(self, method, session=False, **params):
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = self.session
        os.write(self.commands, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._message()
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]
            self.events.append(reply)

    def wait_event(self, method):
        while True:
            event = self._message()
            self.events.append(event)
            if event.get("method") == method and event.get("sessionId") == self.session:
                return event

    def open_page(self, url):
        """Navigates to url, waits for its load and then for window.zarrmountDone;
        returns that JSON decoded, and the URLs of the requests made meanwhile."""
        first = len(self.events)
        self.call("Page.navigate", session=True, url=url)
        self.wait_event("Page.loadEventFired")
        reply = self.call("Runtime.evaluate", session=True, expression="window.zarrmountDone",
                          awaitPromise=True, returnByValue=True)
        value = reply["result"].get("value")
        if not isinstance(value, str):
            raise RuntimeError(f"the page set no result: {reply} "
                               f"{[e for e in self.events[first:] if 'exception' in e.get('method', '').lower()]}")
        events = self.events[first:]
        urls = [e["params"]["request"]["url"] for e in events if e.get("method") == "Network.requestWillBeSent"]
        result = json.loads(value)
        if "error" in result:
            # What the console said, for the report.
            result["error"] += "".join(
                f"\n{e['params'].get('type', '')}: " + " ".join(str(a.get("value", a.get("description", "")))
                                                           for a in e["params"].get("args", []))
                for e in events if e.get("method") == "Runtime.consoleAPICalled")
        return result, urls

    def close(self):
        if self.process.poll() is None:
            with contextlib.suppress(Exception):
                os.write(self.commands, json.dumps({"id": 0, "method": "Browser.close"}).encode() + b"\0")
        os.close(self.commands)
        # Reads to the end so that chromium never blocks writing to us.
        with contextlib.suppress(OSError):
            while os.read(self.replies, 1 << 20):
                pass
        os.close(self.replies)
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        self.process.wait()
        self.log.close()


def decode(values, dtype):
    """The page's JSON values (page.js's encode) as a numpy array of dtype."""
    if np.dtype(dtype).kind == "f":
        return np.array([float(v) for v in values], dtype=np.float64)
    return np.array([int(v) for v in values], dtype=dtype)


def same_values(got, expected):
    """Integers equal; floats equal as float64 bit for bit (-0.0 included; the float32
    ones having gone float32 -> double -> JSON -> float64, exact both ways), NaN where
    NaN (JSON carries "NaN", not its payload)."""
    expected = np.asarray(expected)
    if expected.dtype.kind != "f":
        return got.dtype == expected.dtype and np.array_equal(got, expected.ravel())
    wide = expected.astype(np.float64).ravel()
    if got.shape != wide.shape:
        return False
    nan = np.isnan(wide)
    return (np.array_equal(np.isnan(got), nan)
            and np.array_equal(got[~nan].view(np.uint64), wide[~nan].view(np.uint64)))


def check_page(label, result, point, view):
    if "error" in result:
        check(f"{label}: zarrita read the view", False, result["error"])
        return
    group = zarr.open_group(os.path.join(point, view), mode="r")
    check(f"{label}: the root's and X's attributes are zarr-python's",
          result["attrs"]["/"] == group.attrs.asdict() and result["attrs"]["X"] == group["X"].attrs.asdict(),
          result["attrs"])
    for spec, got in result["arrays"].items():
        path, _, rows = spec.partition("[")
        array = group[path]
        if rows:
            start, stop = (int(v) for v in rows.rstrip("]").split(":"))
            expected = array[start:stop]
        else:
            expected = array[...]
        compressor = array.compressor.get_config() if array.compressor is not None else {}
        values = decode(got["values"], got["dtype"])
        check(f"{label}: zarrita's {spec} ({got['dtype']} {got['shape']}, {compressor.get('id')}/"
              f"{compressor.get('cname')}) equals zarr-python's",
              got["dtype"] == str(array.dtype) and got["shape"] == list(expected.shape)
              and same_values(values, expected),
              f"{got['dtype']} {got['shape']} vs {array.dtype} {expected.shape}: "
              f"{values[:8]} vs {np.asarray(expected).ravel()[:8]}")


def run_browser(work, page_port, store_port, point):
    origin_ok = f"http://127.0.0.1:{page_port}"
    browser = Browser(work)
    try:
        store = f"http://127.0.0.1:{store_port}"
        for view in VIEWS:
            query = urllib.parse.urlencode({"store": f"{store}/{view}/", "arrays": ",".join(ARRAYS),
                                            "range": "obsm/X_pca/0.0"})
            result, urls = browser.open_page(f"{origin_ok}/index.html?{query}")
            label = f"chromium+zarrita {view}/"
            check_page(label, result, point, view)
            if "range" in result:
                chunk = file_bytes(os.path.join(point, view, "obsm/X_pca/0.0"))
                got = result["range"]
                check(f"{label}: a suffix Range (preflighted) is 206 with the chunk's last 16 bytes",
                      got["status"] == 206 and bytes(got["bytes"]) == chunk[-16:]
                      and got["contentRange"] == f"bytes {len(chunk) - 16}-{len(chunk) - 1}/{len(chunk)}",
                      got)
            foreign = [u for u in urls + result.get("resources", [])
                       if urllib.parse.urlsplit(u).scheme not in ("data", "blob")
                       and not (u.startswith(origin_ok + "/") or u.startswith(store + "/"))]
            check(f"{label}: every request went to the local nginx ({len(urls)} requests)",
                  urls and not foreign, foreign)
        # The same page on another origin: the browser keeps the answers from it.
        query = urllib.parse.urlencode({"store": f"{store}/full/", "arrays": "obsm/X_umap"})
        result, _ = browser.open_page(f"http://localhost:{page_port}/index.html?{query}")
        check("chromium+zarrita on another origin (localhost): CORS refuses the store (Failed to fetch)",
              result.get("error", "").startswith("TypeError: Failed to fetch"), result.get("error", result))
    finally:
        browser.close()


def check_access_log(prefix, origin, store_port):
    """The browser's requests to the store, as nginx logged them."""
    lines = [dict(zip(LOG_FIELDS, line.split("\t")))
             for line in read_text(prefix, "access.log").splitlines()]
    # The browser's requests to the store's server (this test's own name no User-Agent).
    store = [e for e in lines if e.get("port") == str(store_port) and "Chrome" in e.get("user_agent", "")]
    browser = [e for e in store if e["origin"] == origin]
    # Chromium asks Range requests with identity, the others with gzip, deflate, br, zstd.
    chunks = [e for e in browser if e["method"] == "GET" and re.search(r"/\d+(\.\d+)*$", e["uri"])
              and "gzip" in e["accept_encoding"]]
    check(f"nginx served the browser's chunk requests ({len(chunks)}), asked with gzip in "
          "Accept-Encoding, with no Content-Encoding",
          chunks and all(e["status"] in ("200", "304") and e["content_encoding"] == "-" for e in chunks),
          [e for e in chunks if e["content_encoding"] != "-" or e["status"] not in ("200", "304")][:3])
    # The page reads obsm/X_pca/0.0 twice (the array, then a slice): no-cache, so the
    # second time the browser revalidates its copy.
    check("the browser revalidated a chunk it had read (304 Not Modified, from its ETag)",
          any(e["status"] == "304" and e["uri"].endswith("/obsm/X_pca/0.0") for e in browser),
          [(e["uri"], e["status"]) for e in browser])
    # zarrita asks for the .zattrs of arrays that have none (404: absent).
    failed = [e for e in browser if e["status"] not in ("200", "204", "206", "304")
              and not (e["status"] == "404" and e["uri"].endswith("/.zattrs"))]
    check(f"the browser's requests ({len(browser)}) all got the origin allowed, none failed "
          "(but 404s of absent .zattrs)",
          browser and not failed and all(e["allow_origin"] == origin for e in browser), failed[:3])
    check("the browser sent an OPTIONS preflight for its Range request",
          any(e["method"] == "OPTIONS" for e in browser), [e["method"] for e in browser][:20])
    other = [e for e in store if e["origin"] == origin.replace("127.0.0.1", "localhost")]
    check("the other origin's requests got the configured origin, not theirs",
          other and all(e["allow_origin"] == origin for e in other), other[:3])


def run(work):
    parent = os.environ.get("ZM_MOUNT_PARENT")
    if parent:
        # nginx's workers (www-data) walk to the mount point and the page.
        os.chmod(parent, 0o711)
    os.chmod(work, 0o711)
    page_dir = os.path.join(work, "page")
    os.mkdir(page_dir)
    make_page(page_dir)
    prefix = os.path.join(work, "nginx")
    os.mkdir(prefix, 0o755)
    with mounted(SOURCE, "allow_other") as point, mounted(SOURCE) as closed:
        store_port, closed_port, page_port = free_ports(3)
        origin = f"http://127.0.0.1:{page_port}"
        servers = (server_block(f"127.0.0.1:{store_port}", point, origin)
                   + server_block(f"127.0.0.1:{closed_port}", closed, origin))
        conf = nginx_conf(prefix, servers, page_port, page_dir, f"http://127.0.0.1:{store_port}")
        with nginx(prefix, conf, (store_port, closed_port, page_port)):
            check("nginx runs the configuration made from contrib/nginx/zarrmount.conf (nginx -t)", True)
            check_http(store_port, point, origin, closed_port)
            run_browser(work, page_port, store_port, point)
        check_access_log(prefix, origin, store_port)
        error_log = read_text(prefix, "error.log")
        check("nginx's error log says why the mount without allow_other is 403 (Permission denied)",
              "Permission denied" in error_log, error_log[-500:])


def main():
    skip = None
    if os.geteuid() != 0:
        skip = "needs root (-o allow_other, nginx's workers as www-data)"
    else:
        done = subprocess.run(["bash", os.path.join(ROOT, "scripts", "install-deps"), "--web"],
                              capture_output=True, text=True)
        if done.returncode != 0:
            check("scripts/install-deps --web installs nginx and chromium", False, done.stderr)
        elif shutil.which("npm") is None:
            skip = "no npm on PATH (apt-get install nodejs npm)"
    if skip:
        print(f"1..0 # SKIP {skip}")
        return 0
    if not results:
        work = tempfile.mkdtemp(prefix="zm-web-", dir=os.environ.get("ZM_MOUNT_PARENT"))
        try:
            run(work)
        except Exception:  # noqa: BLE001
            check("web", False, traceback.format_exc(limit=6))
        finally:
            shutil.rmtree(work, ignore_errors=True)
    print(f"1..{len(results)}")
    for i, (ok, name, detail) in enumerate(results, 1):
        print(f"{'ok' if ok else 'not ok'} {i} - {name}")
        if not ok:
            for line in str(detail).strip().splitlines()[-12:]:
                print(f"# {line}")
    return 0 if all(ok for ok, _, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
