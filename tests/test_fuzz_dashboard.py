"""Fuzz (issue 44): the dashboard's HTTP surface, as the login node's other users can reach it. Raw
requests over TCP against two running dashboards (one with --token, one on loopback without): random
methods, paths (the routes, mutated), query strings, headers (Host, Cookie with and without the token,
Range, framing), bodies, and requests cut short. None may answer 500 or leave a traceback (or any line
but the one-per-condition notices) on the server's stderr, and both keep answering their token holder.

A fixed number of cases from a fixed seed (HPCLAUNCH_FUZZ_RANDOM=1 explores new ones, the printed seed
in HPCLAUNCH_FUZZ_SEED repeats one), as tests/test_fuzz_inputs.py does; HARD_S only stops a run whose cases became pathologically slow.
Prints "dashboard fuzz: N requests, ...".
"""
from __future__ import annotations

import json
import os
import random
import socket
import sys
import time

import pytest
from dashboard_parts import dashboards

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = 10_000         # ~1.5 ms each; half against each server
NOTICES = ("answered 400 to a malformed request", "answered 413 to a malformed request",   # what stderr may say
           "answered 414 to a malformed request", "answered 431 to a malformed request",
           "closed a connection that sent part of a request", "closed a connection that stopped reading")
HARD_S = 240
CHECK_EVERY = 250      # the token holder's request, this often
ANSWER_S = 5.0         # a complete request is answered within this

METHODS = ["GET"] * 14 + ["HEAD"] * 3 + ["POST", "PUT", "DELETE", "OPTIONS", "PATCH", "TRACE", "CONNECT"]
BAD_METHODS = ["get", "G\x00T", "GET GET", "X" * 300, "", "PRI", "M-SEARCH", "\u00e9"]
PATHS = ["/", "/job/{k}", "/job/{k}/events", "/events", "/api/jobs", "/api/job/{k}", "/static/dashboard.js",
         "/static/dashboard.css", "/vendor/plotly.min.js", "/favicon.ico"]
KEYS = ["1", "2", "3", "4", "0", "-1", "999999", "9" * 18, "9" * 19, "9" * 400, "%C2%B2", "%D9%A1", "1e3", "0x1",
        "1%00", "%31", "1.0", "%201", "1/", "", "..", "%2e%2e", "%EF%BC%91", "1;x", "1~"]
SEGMENTS = ["..", "%2e%2e", "%2E%2e/", "..%2f", "%2f", "//", "%5c", "%00", "%ff", "%", "%zz", "%C3%A9", "%ED%A0%80",
            "x" * 3000, "static", "job", "api", "events", ".", "~", "*", ";", "%0d%0aX-Injected:%201", "%3Cb%3E", "'"]
BAD_SEGMENTS = ["\x00", "\\", "\u00e9", "\ud800", "#", " ", "\r\nX: 1", "x" * 9000, "\x7f", "\udcff"]
QUERY_KEYS = ["token"] * 4 + ["t", "", "a", "token[]", "%74oken", "x" * 2000, "%C3%A9", "callback", "since"]
QUERY_VALUES = ["", "x", "%", "%zz", "%00", "%C3%A9", "%ff%fe", "a" * 3000, "{token}", "{token}", "{token}x",
                "{token_cut}", "%3Cscript%3E", "1;2", "&&", "=", "+", "'"]
HOSTS = ["127.0.0.1:{port}", "localhost:{port}", "[::1]:{port}", "127.0.0.1", "attacker.example:{port}", "",
         "127.0.0.1:{port}:80", "[::1", "[]:1", ":::", "127.0.0.1:99999", "x" * 9000, "127.0.0.1 :{port}",
         "0x7f.1:{port}", "2130706433:{port}", "localhost.:{port}", "LOCALHOST:{port}"]
COOKIES = ["hpclaunch_dashboard_{port}={token}"] * 3 + [
    "hpclaunch_dashboard_{port}={token}x", "hpclaunch_dashboard_{port}=", "hpclaunch_dashboard_{port}", "=;;=;",
    "a=b; hpclaunch_dashboard_{port}={token}", '"quoted"="{token}"', "hpclaunch_dashboard_{port}=\"{token}\"",
    "x" * 9000, "$Version=1; hpclaunch_dashboard_{port}={token}; $Path=/", "hpclaunch_dashboard_{port}={token_cut}",
    "hpclaunch_dashboard_{port}=a; hpclaunch_dashboard_{port}={token}"]
HEADERS = ["Accept: text/event-stream", "Accept: */*", "Range: bytes=0-10", "Range: bytes=999999999-",
           "Range: bytes=5-1", "Range: bytes=-0", "Range: bytes=0-1,2-3,4-5", "Range: lines=1-2", "Range: bytes=x",
           "If-Modified-Since: Sat, 01 Jan 2000 00:00:00 GMT", "If-Modified-Since: yesterday", "If-None-Match: *",
           "If-Range: x", "If-Unmodified-Since: 0", "Accept-Encoding: gzip, br, zstd, x", "Accept-Encoding: identity;q=0",
           "Connection: close", "Connection: keep-alive, Upgrade", "Upgrade: websocket", "Upgrade: h2c",
           "Sec-WebSocket-Key: x", "Content-Type: application/json", "Content-Type: multipart/form-data; boundary=",
           "Transfer-Encoding: chunked", "Transfer-Encoding: gzip, chunked", "Content-Length: 5", "Expect: 100-continue",
           "Last-Event-ID: 1", "Last-Event-ID: 99999999999999999999", "X-Forwarded-For: 1.2.3.4",
           "Forwarded: for=1.2.3.4;host=x", "X-Forwarded-Host: attacker.example", "Origin: http://attacker.example",
           "Origin: null", "Authorization: Bearer x", "Cache-Control: no-cache", "X-Long: " + "y" * 4000]
BAD_HEADERS = ["Transfer-Encoding: x", "Content-Length: -1", "Content-Length: 99999999999999999999",
               "Content-Length: 1, 2", "Expect: x", "Last-Event-ID: \u00e9", "Referer: \x00", "NoColon",
               " leading-space: x", "X-Long: " + "y" * 9000, ": empty-name", "X-Folded: a\r\n b", "X-Null: a\x00b",
               "X-Bytes: \udcff\udcfe", "Accept-Encoding: \x00", "Cookie: \x7f\x01=\x02", "Host: \u00e9"]
BODIES = [b"", b"x", b"{}", b"0\r\n\r\n", b"5\r\nhello\r\n0\r\n\r\n", b"zz\r\n", b"\x00" * 64, bytes(range(256)) * 2,
          b"a=1&token=x", b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"]


@pytest.fixture
def dashboard():
    with dashboards() as start:
        yield start


class Server:
    def __init__(self, dash, label):
        self.dash, self.label = dash, label
        self.seen = 0   # bytes of its stderr already judged

    def subs(self, text: str) -> str:
        token = self.dash.token or "no-token"
        return text.format(port=self.dash.port, token=token, token_cut=token[:10], k="{k}")


def _request(rng: random.Random, server: Server):
    """(raw request, malformed on purpose): a mutated route, a query, headers and a body."""
    bad = rng.random() < 0.25
    path = rng.choice(PATHS).replace("{k}", rng.choice(KEYS))
    if rng.random() < 0.7:
        path = server.dash.root.rstrip("/") + path   # the pages' own paths (under the random root, with a token)
    for _ in range(rng.choice([0, 0, 0, 1, 2])):
        cut = rng.randrange(len(path) + 1)
        path = path[:cut] + rng.choice(BAD_SEGMENTS if bad and rng.random() < 0.5 else SEGMENTS) + path[cut:]
    if rng.random() < 0.5:
        pairs = [f"{rng.choice(QUERY_KEYS)}={server.subs(rng.choice(QUERY_VALUES))}" for _ in range(rng.randrange(1, 4))]
        path += "?" + "&".join(pairs)
    if rng.random() < 0.03:
        path = rng.choice(["*", "http://127.0.0.1/", "//", "", "a", "http://attacker.example" + path])
    version = "HTTP/1.1" if not bad or rng.random() < 0.6 else rng.choice(
        ["HTTP/1.0", "HTTP/2.0", "HTTP/0.9", "HTTP/1.1 x", "http/1.1", "", "HTTP/1.10", "HTTP/9.9"])
    method = rng.choice(BAD_METHODS if bad and rng.random() < 0.3 else METHODS)
    headers = []
    if rng.random() < 0.95:
        headers.append("Host: " + server.subs(rng.choice(HOSTS[:2] * 8 + HOSTS)))
    if rng.random() < 0.05:
        headers.append("Host: " + server.subs(rng.choice(HOSTS)))   # a second one
    if rng.random() < 0.5:
        headers.append("Cookie: " + server.subs(rng.choice(COOKIES)))
    headers += [rng.choice(BAD_HEADERS if bad and rng.random() < 0.5 else HEADERS)
                for _ in range(rng.choice([0, 0, 1, 2, 3]))]
    body = rng.choice(BODIES) if rng.random() < 0.3 else b""
    if body and rng.random() < 0.7:
        headers.append(f"Content-Length: {len(body) + rng.choice([0, 0, 0, -1, 1, 1000])}")
    head = f"{method} {path} {version}".rstrip() + "\r\n" + "".join(h + "\r\n" for h in headers) + "\r\n"
    try:   # "\udcff": the raw byte 0xff; a lone "\ud800": its (invalid) UTF-8 bytes
        return head.encode("utf-8", "surrogateescape") + body, bad
    except UnicodeEncodeError:
        return head.encode("utf-8", "surrogatepass") + body, bad


def _send(server: Server, raw: bytes, partial: bool):
    """The status the server answered (None: none, as for a request cut short)."""
    with socket.create_connection(("127.0.0.1", server.dash.port), timeout=ANSWER_S) as s:
        try:
            s.sendall(raw)
            if partial:
                if random.random() < 0.5:
                    s.shutdown(socket.SHUT_WR)
                return None
            got = b""
            while b"\r\n" not in got:   # the status line is enough: an event stream would go on
                chunk = s.recv(4096)
                if not chunk:
                    break
                got += chunk
        except ConnectionError:
            return "reset"
        except socket.timeout:
            return "timeout"
    if not got:
        return "closed"
    parts = got.split(b"\r\n", 1)[0].split(b" ")
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else got[:80]


def _healthy(server: Server) -> bool:
    """The token holder (or, without a token, a loopback visitor) is answered at once."""
    path = server.dash.root + "api/jobs" + (f"?token={server.dash.token}" if server.dash.token else "")
    raw = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{server.dash.port}\r\nConnection: close\r\n\r\n".encode()
    return _send(server, raw, partial=False) == 200


def _new_stderr(server: Server) -> str:
    server.dash.err.seek(server.seen)
    new = server.dash.err.read()
    server.seen += len(new)
    return new.decode("utf-8", "replace")


def _registry_with_jobs(tmp_path):
    """A registry whose rows the routes can show: a local run with logs, one elsewhere, one vanished."""
    sys.path.insert(0, os.path.join(HERE, "report"))
    from synth import GpuSpec, HostSpec, write_run

    from hpclaunch.runs.registry import Registry

    write_run(tmp_path / "run", [GpuSpec("n1", 0), GpuSpec("n1", 1)], hosts=[HostSpec("n1")], duration=120)
    reg = Registry()
    reg.add(backend="local", cluster="local", job_id="11", name="done", run_dir=str(tmp_path / "run"), state="COMPLETED")
    reg.add(backend="remote", cluster="far", job_id="12", name="far", run_dir="/nonexistent/x", state="FAILED")
    reg.add(backend="local", cluster="local", job_id="13", name="gone", run_dir=str(tmp_path / "gone"), state="CANCELLED")
    reg.add(backend="slurm", cluster="c", job_id="14", name="<b>x</b>", run_dir=str(tmp_path / "run"), state="TIMEOUT")
    reg.close()


def test_fuzz_the_dashboards_http_surface(hpc_home, tmp_path, dashboard):
    _registry_with_jobs(tmp_path)
    servers = [Server(dashboard("--token"), "--token"), Server(dashboard(), "loopback")]
    seed = int(os.environ.get("HPCLAUNCH_FUZZ_SEED") or (random.randrange(1 << 30) if os.environ.get("HPCLAUNCH_FUZZ_RANDOM") else 44))
    rng = random.Random(seed)
    failures, statuses, notices = [], {}, []
    start = time.monotonic()
    cases = 0
    while cases < CASES and time.monotonic() - start < HARD_S:
        server = servers[cases % 2]
        raw, bad = _request(rng, server)
        partial = rng.random() < 0.15
        if partial:
            raw = raw[:rng.randrange(len(raw))]
        got = _send(server, raw, partial)
        cases += 1
        statuses[got] = statuses.get(got, 0) + 1
        # a malformed one may read as a head not yet ended ("PRI" opens HTTP/2's preface): HEAD_S closes it
        unanswered = got in ("timeout", "closed", "reset") and not (partial or bad)
        if got == 500 or unanswered or isinstance(got, bytes):
            failures.append(f"{server.label}: {got!r} for {raw[:400]!r}")
        said = _new_stderr(server)
        notices += said.splitlines()
        if os.environ.get("HPCLAUNCH_FUZZ_SHOW"):
            print(got, raw[:300])
        if "Traceback" in said or any(line and not line.startswith(("  (Ctrl-C", *(f"hpclaunch dashboard: {n}"
                                                                                     for n in NOTICES)))
                                      for line in said.splitlines()):
            failures.append(f"{server.label}: stderr {said[:2000]!r} after {raw[:400]!r}")
        if cases % CHECK_EVERY == 0:
            for s in servers:
                if not _healthy(s):
                    failures.append(f"{s.label}: the token holder was not answered after {cases} cases")
    fuzz_s = time.monotonic() - start
    for s in servers:
        assert _healthy(s), s.label
        assert s.dash.stop() == 0, s.label
        said = _new_stderr(s)
        assert "Traceback" not in said and "failed" not in said, said[:3000]
        notices += said.splitlines()
    print(f"\ndashboard fuzz: {cases} requests (seed {seed}), {len(failures)} failures, {fuzz_s:.0f} s; answers: "
          + json.dumps({str(k): v for k, v in sorted(statuses.items(), key=lambda kv: -kv[1])}))
    print("\n".join(notices))
    assert not failures, f"{len(failures)} failures; the first ones:\n" + "\n".join(failures[:20])
    assert cases >= CASES, f"only {cases} requests in {HARD_S} s: requests became far slower"
