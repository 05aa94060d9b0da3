"""The dashboard against the other users of a shared login node (issue 44, docs/dashboard.md "Who can
open it"): its port takes connections from anyone, its browser cookie goes wherever the browser sends
a host's cookies, its charts draw host names that a job's programs wrote, and its registry may be a
file that is not one. Each test here failed on the code before its fix."""
from __future__ import annotations

import asyncio
import io
import json
import os
import resource
import socket
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from dashboard_parts import chrome, dashboards, get, require_browser_parts, wait_for

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture
def browser_parts(require):
    require_browser_parts(require)


@pytest.fixture
def dashboard():
    with dashboards() as start:
        yield start


def _limit_descriptors():
    """The server's `ulimit -n 1024` (a common default), set in the child before it runs."""
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))


def _half_open(port: int, count: int) -> list:
    """``count`` connections that send half a request head and then nothing."""
    socks = []
    for _ in range(count):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        try:
            s.sendall(b"GET /api/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Half: ")
        except OSError:
            pass   # already closed by the server to make room: what it should do
        socks.append(s)
    return socks


def _condition_lines(stderr: str) -> list:
    """stderr's lines other than the start's "(Ctrl-C stops it ...)"."""
    return [line for line in stderr.splitlines() if not line.startswith("  (Ctrl-C stops it")]


def test_half_open_connections_do_not_lock_out_the_token_holder(hpc_home, dashboard):
    dash = dashboard("--token", preexec_fn=_limit_descriptors)
    socks = _half_open(dash.port, 1100)   # more than `ulimit -n` allows the server
    try:
        start = time.monotonic()
        code, body, _ = get(dash.local("/api/jobs?token=" + dash.token), timeout=5)
        served_s = time.monotonic() - start
        assert code == 200 and json.loads(body)["jobs"] == [], (code, body)
        assert served_s < 1.0, served_s
        socks += _half_open(dash.port, 500)   # the flood goes on: still one line per condition
        assert get(dash.local("/?token=" + dash.token), timeout=5)[0] == 200
    finally:
        for s in socks:
            s.close()
    assert dash.stop() == 0
    err = dash.stderr()
    lines = _condition_lines(err)
    assert "Traceback" not in err and len(err) < 2000, err[:3000]
    assert len(lines) == 1 and "connections open, the most `ulimit -n` 1024 allows" in lines[0], lines


# --- the connection rules themselves, in-process with short timeouts ---------------------------------

def _serve(scenario, **pool_args):
    """Runs ``scenario(port, pool)`` against a small aiohttp app served by connections.serve."""
    from aiohttp import web

    from hpclaunch.dashboard.connections import Pool, serve
    from hpclaunch.dashboard.notices import Notices

    release = asyncio.Event

    async def main():
        gate = release()
        app = web.Application()

        async def ok(request):
            return web.Response(text="ok")

        async def big(request):
            return web.Response(body=b"x" * (64 << 20))

        async def held(request):
            await gate.wait()
            return web.Response(text="released")

        app.router.add_get("/", ok)
        app.router.add_get("/big", big)
        app.router.add_get("/held", held)
        out = io.StringIO()
        pool = Pool(Notices(out), **pool_args)
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        stop = asyncio.Event()
        server = asyncio.ensure_future(serve(app, sock, pool, stop))
        try:
            await scenario(sock.getsockname()[1], pool, gate)
        finally:
            gate.set()
            stop.set()
            await server
        return out.getvalue()

    return asyncio.run(main())


async def _closed_within(reader, seconds: float) -> float:
    """Seconds until the server closed the connection (EOF or reset); fails after ``seconds``."""
    start = time.monotonic()
    try:
        while await asyncio.wait_for(reader.read(65536), seconds):
            pass
    except ConnectionError:
        pass
    return time.monotonic() - start


async def _ask(port: int, path: str = "/"):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    return reader, writer


def test_a_half_sent_request_is_closed_after_the_head_timeout_and_a_kept_alive_one_after_the_idle_timeout():
    async def scenario(port, pool, gate):
        half_r, half_w = await asyncio.open_connection("127.0.0.1", port)
        half_w.write(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")          # no blank line: the head never ends
        spare_r, _ = await asyncio.open_connection("127.0.0.1", port)  # a browser's spare: says nothing
        kept_r, kept_w = await _ask(port)
        assert b"200 OK" in await kept_r.readuntil(b"ok")              # answered, then kept alive
        half_s, spare_s, kept_s = await asyncio.gather(*(_closed_within(r, 10) for r in (half_r, spare_r, kept_r)))
        assert 0.8 <= half_s <= 3.0 and 0.8 <= spare_s <= 3.0, (half_s, spare_s)   # 1 s, +0.5 s sweep, +slack
        assert 2.8 <= kept_s <= 6.0, kept_s                                       # 3 s
        assert pool.conns == {}

    said = _serve(scenario, head_s=1.0, idle_s=3.0)
    assert said.count("\n") == 1 and "sent part of a request and then nothing for 1 s" in said, said


def test_an_answer_nobody_reads_is_dropped_after_the_stall_timeout():
    async def scenario(port, pool, gate):
        reader, writer = await _ask(port, "/big")   # 64 MiB, never read
        await asyncio.sleep(0.5)
        assert len(pool.conns) == 1 and next(iter(pool.conns.values())).paused is not None
        await asyncio.sleep(2.5)
        assert pool.conns == {}
        writer.close()

    said = _serve(scenario, stall_s=1.0)
    assert "stopped reading its answer for 1 s" in said, said


def test_past_the_cap_the_longest_waiting_connection_makes_room_and_a_full_house_refuses_the_newcomer():
    async def scenario(port, pool, gate):
        halves = []
        for _ in range(4):
            halves.append(await asyncio.open_connection("127.0.0.1", port))
            halves[-1][1].write(b"GET / HTTP/1.1\r\n")
            await asyncio.sleep(0.05)
        reader, writer = await _ask(port)                             # the fifth: answered at once
        assert b"ok" in await asyncio.wait_for(reader.readuntil(b"ok"), 2)
        assert await _closed_within(halves[0][0], 1) < 1               # the oldest half-open made room
        assert len(pool.conns) == 4
        for _, w in halves[1:] + [(reader, writer)]:
            w.close()
        await asyncio.sleep(0.3)
        assert pool.conns == {}
        helds = [await _ask(port, "/held") for _ in range(4)]          # four being answered, none waiting
        await asyncio.sleep(0.3)
        assert len(pool.conns) == 4 and not pool.waiting
        newcomer, _ = await _ask(port)
        assert await _closed_within(newcomer, 1) < 1                   # refused: nothing else to close
        gate.set()
        for r, _ in helds:
            assert b"released" in await asyncio.wait_for(r.readuntil(b"released"), 2)

    said = _serve(scenario, cap=4, head_s=30)
    assert said.count("\n") == 1 and "4 connections open" in said, said


# --- the token's cookie stays on the dashboard's own paths ------------------------------------------

class _Recorder(BaseHTTPRequestHandler):
    seen: list = []

    def do_GET(self):
        type(self).seen.append((self.path, dict(self.headers)))
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        self.wfile.write(b"another server on this machine\n")

    def log_message(self, *args):
        pass


def test_the_token_cookie_is_not_sent_to_another_port_in_chromium(browser_parts, hpc_home, dashboard):
    dash = dashboard("--token")
    other = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    _Recorder.seen = []
    threading.Thread(target=other.serve_forever, daemon=True).start()
    driver = chrome()
    try:
        for first in (dash.url, f"http://127.0.0.1:{dash.port}/?token={dash.token}"):   # as printed; the old form
            driver.get(first)
            wait_for(driver, "document.getElementById('conn').className.indexOf('live') >= 0", "the list's events")
            assert "token" not in driver.current_url and driver.current_url.startswith(dash.local("/"))
        driver.get(dash.local("/api/jobs"))                 # the cookie does its work under the root
        assert '"jobs"' in driver.page_source, driver.page_source
        base = f"http://127.0.0.1:{other.server_address[1]}"
        # what a server elsewhere on this machine would be asked: any path but the dashboard's random one
        for path in ("/", "/api/jobs", "/job/1", "/events", "/static/dashboard.js", "/?token=x"):
            driver.get(base + path)
            assert "another server" in driver.page_source
        driver.get(dash.local("/"))
        wait_for(driver, "document.getElementById('conn').className.indexOf('live') >= 0", "the list again")
        driver.execute_script(f"fetch('{base}/from-the-dashboard-page', {{mode: 'no-cors', credentials: 'include'}})")
        end = time.monotonic() + 10
        while len(_Recorder.seen) < 7 and time.monotonic() < end:
            time.sleep(0.1)
    finally:
        driver.quit()
        other.shutdown()
    assert len(_Recorder.seen) >= 7, _Recorder.seen
    for path, headers in _Recorder.seen:
        leaked = {k: v for k, v in headers.items() if dash.token in v or "hpclaunch_dashboard" in v}
        assert not leaked, (path, leaked)
    assert dash.stop() == 0


# --- host names from a job's logs are text in the charts ----------------------------------------------

HOSTILE_HOSTS = ['<a href="https://evil.example/">n1</a>', '<b style="color:red">n2</b><br>x', "&lt;i&gt;n3"]


def _hostile_run(run_dir) -> None:
    """A run directory whose GPU logs name hosts with plotly's HTML (a link, styling, a line break)."""
    sys.path.insert(0, os.path.join(HERE, "report"))
    from synth import GpuSpec, write_run

    from hpclaunch.monitors import schema

    write_run(run_dir, [GpuSpec(f"h{i}", 0) for i in range(len(HOSTILE_HOSTS))], duration=60)
    for i, host in enumerate(HOSTILE_HOSTS):
        path = run_dir / schema.MONITOR_DIR / schema.gpu_file(f"h{i}")
        schema_line, header, *rows = path.read_text().splitlines(keepends=True)
        col = header.split(",").index("host")   # the monitor's CSV quotes nothing: a cell is what it holds
        rows = [",".join(host if i == col else cell for i, cell in enumerate(row.split(","))) for row in rows]
        path.write_text(schema_line + header + "".join(rows))


def test_host_names_from_gpu_logs_are_text_in_the_chart_legends(browser_parts, hpc_home, dashboard, tmp_path):
    from hpclaunch.runs.registry import Registry

    _hostile_run(tmp_path / "run")
    reg = Registry()
    rec = reg.add(backend="local", cluster="local", job_id="4711", name="hostile-hosts", run_dir=str(tmp_path / "run"),
                  state="COMPLETED", nodes=3)
    reg.close()
    dash = dashboard()
    driver = chrome()
    try:
        driver.get(dash.local(f"/job/{rec.key}"))
        legend = ("[...document.querySelectorAll('#chart-power .legend .traces')].map(t => t.textContent).sort()")
        shown = wait_for(driver, f"(function () {{ var l = {legend}; return l.length === 3 && l; }})()", "legend")
        assert shown == sorted(f"{h} GPU0" for h in HOSTILE_HOSTS), shown
        for chart in ("power", "temp"):
            assert driver.execute_script(f"return document.querySelectorAll('#chart-{chart} .legend a').length") == 0
            styled = driver.execute_script(f"return [...document.querySelectorAll('#chart-{chart} .legend tspan')]"
                                           ".filter(t => (t.getAttribute('style') || '').match(/color|fill|bold/))"
                                           ".length")
            assert styled == 0
    finally:
        driver.quit()
    assert dash.stop() == 0


# --- a registry that is not one -----------------------------------------------------------------------

def test_a_registry_that_is_not_a_database_is_a_503_with_one_line_and_one_stderr_line(hpc_home, dashboard):
    hpc_home.mkdir(parents=True, exist_ok=True)
    (hpc_home / "registry.db").write_bytes(b"these are notes, not a database\n" * 64)
    dash = dashboard()
    why = f"{hpc_home / 'registry.db'}: cannot use the job registry: file is not a database"
    for _ in range(3):
        for path in ("/api/jobs", "/api/job/1"):
            code, body, headers = get(dash.local(path))
            assert code == 503 and headers["Content-Type"].startswith("application/json"), (path, code, body)
            assert json.loads(body)["error"].startswith(why), body
        for path in ("/job/1", "/job/1/events"):
            code, body, _ = get(dash.local(path))
            assert code == 503 and body.startswith(f"503: {why}") and body.count("\n") == 1, (path, code, body)
        assert get(dash.local("/"))[0] == 200   # the list's page: it says why in place of the jobs
        with urllib.request.urlopen(dash.local("/events"), timeout=10) as stream:
            data = next(line for line in iter(stream.readline, b"") if line.startswith(b"data:"))
        event = json.loads(data[5:])
        assert event["jobs"] == [] and event["error"].startswith(why), event
    assert dash.stop() == 0
    err = dash.stderr()
    lines = _condition_lines(err)
    assert "Traceback" not in err and len(lines) == 1 and why in lines[0], err[:3000]


# --- what the HTTP fuzz (tests/test_fuzz_dashboard.py) found, kept as plain cases ---------------------

def _raw(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(request)
        return s.recv(200)


def test_odd_names_are_404_and_malformed_requests_400_without_a_traceback(hpc_home, dashboard):
    dash = dashboard()
    for path in ("/job/%C2%B2", "/api/job/%C2%B2", "/job/%C2%B2/events",   # "²": a digit to str.isdigit
                 "/static/" + "x" * 300, "/static/../app.py", "/static/%2e%2e/app.py", "/static/"):
        code, body, _ = get(dash.local(path))
        assert code == 404, (path, code, body)
    assert get(dash.local("/static/dashboard.js"))[0] == 200
    for bad in (b"GET /a b HTTP/1.1\r\n\r\n", b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
                b"GET / HTTP/1.1\r\nX: \x00\r\n\r\n", b"GET /" + b"x" * 9000 + b" HTTP/1.1\r\n\r\n"):
        for _ in range(20):
            assert _raw(dash.port, bad).split(b" ")[1].startswith(b"4"), bad
    assert dash.stop() == 0
    err = dash.stderr()
    lines = _condition_lines(err)
    assert "Traceback" not in err and len(lines) == 1 and "answered 400 to a malformed request" in lines[0], err[:3000]
