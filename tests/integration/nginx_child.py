"""Debian's nginx as a test's child process, shared by tests/integration/test_file_times.py
and tests/web/test_web.py: free ports, nginx with a test's own configuration and prefix (never
/etc/nginx or the system's service) until a block ends, and one HTTP request.

Everything nginx writes lies in the prefix: the configuration (nginx.conf), its pid, logs and
temporary files, as the test's configuration names them (error.log before the configuration
is read)."""
import contextlib
import http.client
import os
import signal
import socket
import subprocess
import time

NGINX = "/usr/sbin/nginx"


def free_ports(count):
    """Ports nobody listens on now (the kernel's choice of an ephemeral one)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def read_text(directory, name):
    """A file's text, or "" if it cannot be read."""
    with contextlib.suppress(OSError), open(os.path.join(directory, name), errors="replace") as f:
        return f.read()
    return ""


@contextlib.contextmanager
def running(prefix, conf, ports):
    """nginx -p prefix with the configuration conf (written to prefix/nginx.conf, checked with
    nginx -t first), in the foreground (conf says daemon off) until the block ends, then TERM
    (KILL after 10 s) and waited for. Yields once every port of ports accepts connections;
    RuntimeError with nginx's reason if it refuses the configuration or exits."""
    os.makedirs(os.path.join(prefix, "temp"), exist_ok=True)
    path = os.path.join(prefix, "nginx.conf")
    with open(path, "w") as f:
        f.write(conf)
    base = [NGINX, "-p", prefix, "-c", path, "-e", os.path.join(prefix, "error.log")]
    tested = subprocess.run(base + ["-t", "-q"], capture_output=True, text=True)
    if tested.returncode != 0:
        raise RuntimeError(f"nginx -t refused the configuration: {tested.stderr.strip()}")
    log = open(os.path.join(prefix, "nginx.out"), "wb")
    server = subprocess.Popen(base, stdout=log, stderr=log)
    try:
        for port in ports:
            while True:
                if server.poll() is not None:
                    raise RuntimeError(f"nginx exited with {server.returncode}: "
                                       f"{read_text(prefix, 'error.log')} {read_text(prefix, 'nginx.out')}".strip())
                with socket.socket() as s:
                    if s.connect_ex(("127.0.0.1", port)) == 0:
                        break
                time.sleep(0.05)
        yield server
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
        server.wait()
        log.close()


def request(port, method, path, headers=None):
    """(status, headers as a lower-case dict, body) of one request to 127.0.0.1:port."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        connection.request(method, path, headers=headers or {})
        response = connection.getresponse()
        body = response.read()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, body
    finally:
        connection.close()
