"""The dashboard's pages and streams (aiohttp; imported only by `hpclaunch dashboard`).

    /                     the job list          /events             its updates (server-sent events)
    /job/<key>            one job               /job/<key>/events   its updates
    /api/jobs, /api/job/<key>                   the same data as JSON, once
    /static/..., /vendor/plotly.min.js          the page's own JS and CSS, the chart library (installed)

With a token, every path is under the random ``root`` (``/<random>/job/<key>``...): its cookie is
scoped to that path. Registry work runs on one thread (board.py); reading logs on the default pool:
the event loop only moves bytes. Every page is read-only: nothing here changes a job. A registry
that cannot be read is a 503 with its one line (said once on stderr), never a 500 and a traceback.
"""
from __future__ import annotations

import asyncio
import hmac
import json
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Optional

import jinja2
from aiohttp import web
from aiohttp_sse import sse_response

from hpclaunch.common.errors import HpclaunchError
from hpclaunch.dashboard.board import Board
from hpclaunch.dashboard.live import LiveCache
from hpclaunch.dashboard.notices import Notices

HERE = os.path.dirname(os.path.abspath(__file__))
EVENT_S = 2.0   # a page is sent what changed this often
LOCAL_NAMES = {"127.0.0.1", "localhost", "::1"}


def make_app(board: Board, plotly_js: str, token: Optional[str], bound: str, cookie: str, root: str = "/",
             notices: Optional[Notices] = None, event_s: float = EVENT_S) -> web.Application:
    notices = notices or Notices()
    app = web.Application(middlewares=[_guard(token, cookie, LOCAL_NAMES | {bound}, root),
                                       _unreadable_registry(notices, root)])
    pages = jinja2.Environment(loader=jinja2.FileSystemLoader(os.path.join(HERE, "pages")), autoescape=True)
    registry_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hpclaunch-registry")
    lives = LiveCache()

    async def on_registry(fn, *args):
        return await asyncio.get_running_loop().run_in_executor(registry_thread, fn, *args)

    def page(name: str, **context) -> web.Response:
        return web.Response(text=pages.get_template(name).render(root=root, **context), content_type="text/html")

    async def index(request: web.Request) -> web.Response:
        return page("index.html", since=_age(board.since_s), refresh=f"{board.refresh_s:g}")

    async def job_page(request: web.Request) -> web.Response:
        key = _key(request)
        row = await on_registry(board.job, key)
        if row is None:   # not a page that would say "reconnecting" forever
            raise web.HTTPNotFound(text=f"no job {key} in the registry (the list: {root})\n")
        if row["local"]:   # its logs read while the browser loads the page's scripts: its events come sooner
            warm = asyncio.get_running_loop().run_in_executor(None, lives.get(row["run_dir"]).warm)
            warm.add_done_callback(lambda f: f.cancelled() or f.exception())   # its events will say what failed
        return page("job.html", key=key)

    async def jobs_json(request: web.Request) -> web.Response:
        return web.json_response(await on_registry(board.rows))

    async def job_state(key: int, seen: Optional[dict]):
        row = await on_registry(board.job, key)
        if row is None:
            raise web.HTTPNotFound(text=f"no job {key} in the registry\n")
        live, seen = ({"full": True, "charts": {}, "ranks": [], "notes": []}, seen) if not row["local"] else \
            await asyncio.get_running_loop().run_in_executor(None, lives.get(row["run_dir"]).payload, seen)
        return {"job": row, "live": live}, seen

    async def job_json(request: web.Request) -> web.Response:
        return web.json_response((await job_state(_key(request), None))[0])

    async def stream(request: web.Request, event: str, next_message) -> web.StreamResponse:
        """Server-sent events: ``next_message(state) -> (data, state)`` every ``event_s``, until the page goes."""
        state = None
        # A page gone before or while its stream starts is a cancelled request, as aiohttp-sse itself
        # says it (it would assert on a closed transport, or fail writing the headers: a 500 and a traceback)
        if request.transport is None or request.transport.is_closing():
            raise asyncio.CancelledError()
        try:
            async with sse_response(request) as resp:
                try:
                    while resp.is_connected():
                        data, state = await next_message(state)
                        await resp.send(json.dumps(data, allow_nan=False), event=event)
                        await asyncio.sleep(event_s)
                except (ConnectionError, asyncio.CancelledError):
                    pass   # the page was closed or reloaded: nothing to tell anyone
                except HpclaunchError as e:   # the registry became unreadable: the page reconnects, gets the 503
                    _say(notices, e)
        except ConnectionError:
            raise asyncio.CancelledError() from None
        return resp

    async def jobs_events(request: web.Request) -> web.StreamResponse:
        async def rows(state):
            try:
                return await on_registry(board.rows), state
            except HpclaunchError as e:   # said on the page, which follows on and shows the jobs once it can
                return {"jobs": [], "error": _say(notices, e)}, state
        return await stream(request, "jobs", rows)

    async def job_events(request: web.Request) -> web.StreamResponse:
        key = _key(request)
        if await on_registry(board.job, key) is None:   # an unknown job: 404 before the stream starts
            raise web.HTTPNotFound(text=f"no job {key} in the registry\n")
        return await stream(request, "job", lambda seen: job_state(key, seen))

    async def plotly(request: web.Request) -> web.FileResponse:
        return web.FileResponse(plotly_js, headers={"Cache-Control": "max-age=86400"})

    statics = {name: os.path.join(HERE, "static", name) for name in os.listdir(os.path.join(HERE, "static"))}

    async def static(request: web.Request) -> web.FileResponse:
        """The page's own files, by name: aiohttp's static route answers 500 to a name too long for the
        file system (ENAMETOOLONG), and nothing else is there to serve."""
        path = statics.get(request.match_info["name"])
        if path is None:
            raise web.HTTPNotFound(text="404: not one of the dashboard's files\n")
        return web.FileResponse(path)

    async def favicon(request: web.Request) -> web.Response:
        return web.Response(status=204)   # the pages name none; a browser still asks (on a 404 page, say)

    async def close_thread(app: web.Application) -> None:
        registry_thread.shutdown(wait=False, cancel_futures=True)

    async def to_root(request: web.Request) -> web.Response:
        """``/?token=`` (the URL as printed before the pages moved under ``root``): the same, there."""
        raise web.HTTPSeeOther(f"{root}?{request.query_string}")

    app.router.add_get(root, index)
    app.router.add_get(root + "job/{key}", job_page)
    app.router.add_get(root + "events", jobs_events)
    app.router.add_get(root + "job/{key}/events", job_events)
    app.router.add_get(root + "api/jobs", jobs_json)
    app.router.add_get(root + "api/job/{key}", job_json)
    app.router.add_get(root + "vendor/plotly.min.js", plotly)
    app.router.add_get("/favicon.ico", favicon)
    app.router.add_get(root + "static/{name}", static)
    if root != "/":
        app.router.add_get("/", to_root)
    app.on_cleanup.append(close_thread)
    return app


def _key(request: web.Request) -> int:
    text = request.match_info["key"]
    if not (text.isascii() and text.isdigit()) or len(text) > 18:   # "²" is a digit to isdigit, not to int
        raise web.HTTPNotFound(text=f"no job {text!r}: job pages are /job/<registry key>, linked from the list\n")
    return int(text)


def _age(seconds: float) -> str:
    """7 days, 12 hours, 30 minutes."""
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size:
            n = seconds / size
            return f"{n:.3g} {unit}{'' if n == 1 else 's'}"
    return f"{seconds:.3g} seconds"


def _say(notices: Notices, error: HpclaunchError) -> str:
    line = str(error).splitlines()[0]
    notices.say("registry " + line, line)
    return line


def _unreadable_registry(notices: Notices, root: str):
    """A registry that cannot be read (not a database, damaged, locked up): 503 and its one line."""

    @web.middleware
    async def unreadable(request: web.Request, handler):
        try:
            return await handler(request)
        except HpclaunchError as e:
            line = _say(notices, e)
            if request.path.startswith(root + "api/"):
                return web.json_response({"error": line}, status=503)
            return web.Response(status=503, text=f"503: {line}\n")

    return unreadable


def _guard(token: Optional[str], cookie: str, local_names: set, root: str = "/"):
    """Bound to loopback: no token, but only requests addressed to a loopback name or address (a page
    on another site that points its own name at 127.0.0.1 gets 403). Bound elsewhere: the token, in
    the URL (?token=, then kept in a cookie sent only to paths under ``root``) or the cookie, compared
    in constant time."""

    @web.middleware
    async def guard(request: web.Request, handler):
        if token is None:
            if _host_name(request.host) not in local_names:
                raise web.HTTPForbidden(text="403: this dashboard answers only to 127.0.0.1 or localhost\n")
            return await handler(request)
        given = request.query.get("token") or request.cookies.get(cookie) or ""
        if not hmac.compare_digest(given.encode("utf-8", "replace"), token.encode()):
            raise web.HTTPForbidden(text="403: open the dashboard with the URL it printed (it holds ?token=...)\n")
        resp = await handler(request)
        if "token" in request.query and not resp.prepared:
            resp.set_cookie(cookie, token, path=root, httponly=True, samesite="Strict")
        return resp

    return guard


def _host_name(host_header: str) -> str:
    """"127.0.0.1:8080" -> "127.0.0.1", "[::1]:8080" -> "::1"."""
    if host_header.startswith("["):
        return host_header[1:].split("]", 1)[0]
    return host_header.rsplit(":", 1)[0] if host_header.count(":") == 1 else host_header
