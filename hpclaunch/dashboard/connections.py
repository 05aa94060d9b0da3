"""How the dashboard serves: aiohttp's runner behind a bounded set of connections. Its port is open to
every user of the login node, token or not, so a connection must earn its socket:

- HEAD_S: a request's head (request line and headers) must arrive within HEAD_S of the connection, or
  of its first byte after a kept-alive pause: a half-sent request is closed, not waited on;
- IDLE_S: a kept-alive connection with nothing to ask is closed after IDLE_S (aiohttp's own
  keepalive_timeout is set to the same);
- STALL_S: an answer whose reader stopped reading (asyncio paused the writing) is dropped after STALL_S;
- the cap (from `ulimit -n`): past it, the connection that has waited longest without a request being
  answered is closed to make room, else the longest-stalled one, else the new one. A flood of
  half-open sockets costs the flood its own oldest sockets; the token holder's request, complete at
  once, is answered. Connections never use up the descriptors, so the event loop's accept does not
  fail on their account (it logs a traceback per failed attempt: loop_error makes that one line).

aiohttp has no connection cap and no head timeout (only its recent releases start the keepalive timer
at connect; setup.cfg allows 3.9), so these sit in front of its RequestHandler as an asyncio protocol
that passes everything through: public asyncio API and aiohttp extension points only (a middleware
sees a request start, the access logger, called once a response is written, sees it end).
Each condition is one stderr line, rate-limited (notices.py), aiohttp's own included: it logs a
traceback for every malformed request, which anyone could repeat to fill the disk.
"""
from __future__ import annotations

import asyncio
import logging
import resource
import signal
import socket
import time
import traceback
from collections import OrderedDict
from typing import Dict, Optional

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger
from aiohttp.http_exceptions import HttpProcessingError

from hpclaunch.dashboard.notices import Notices

HEAD_S = 10.0
IDLE_S = 60.0
STALL_S = 30.0
SWEEP_S = 0.5
MAX_CONNECTIONS = 512
BACKLOG = 128          # listen(): also how many sockets one loop tick may accept before the cap sees them
RESERVE_FDS = 64       # the registry, logs being read, the loop's own, stdio
SHUTDOWN_S = 1.0       # open event streams get this long to close on Ctrl-C


def descriptors() -> int:
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return 1 << 20 if soft == resource.RLIM_INFINITY else soft


def connection_cap(limit: int) -> int:
    """Half of what is left after BACKLOG and RESERVE_FDS: a connection may also hold the file it sends."""
    return max(8, min(MAX_CONNECTIONS, (limit - BACKLOG - RESERVE_FDS) // 2))


class _Conn(asyncio.Protocol):
    """One connection: aiohttp's RequestHandler (``inner``), watched."""

    def __init__(self, pool: "Pool", inner: asyncio.Protocol):
        self.pool, self.inner = pool, inner
        self.transport: Optional[asyncio.Transport] = None
        self.phase = "head"        # "head": a request arriving; "busy": being answered; "idle": kept alive
        self.since = 0.0           # when the phase began
        self.got = False           # bytes of a request's head arrived in this phase
        self.paused: Optional[float] = None   # since when the other end has not been reading

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.inner.connection_made(transport)
        self.pool.made(self)

    def data_received(self, data: bytes) -> None:
        if self.phase == "idle":
            self.pool.moved(self, "head")
        self.got = True
        self.inner.data_received(data)

    def eof_received(self):
        return self.inner.eof_received()

    def connection_lost(self, exc) -> None:
        self.pool.lost(self)
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.paused = time.monotonic()
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.paused = None
        self.inner.resume_writing()


class Pool:
    def __init__(self, notices: Notices, limit: Optional[int] = None, cap: Optional[int] = None,
                 head_s: float = HEAD_S, idle_s: float = IDLE_S, stall_s: float = STALL_S):
        self.notices = notices
        self.limit = limit or descriptors()
        self.cap = cap or connection_cap(self.limit)
        self.head_s, self.idle_s, self.stall_s = head_s, idle_s, stall_s
        self.conns: Dict[object, _Conn] = {}                   # transport -> connection
        self.waiting: "OrderedDict[_Conn, None]" = OrderedDict()   # not being answered, longest first

    def protocol_factory(self, server: web.Server):
        return lambda: _Conn(self, server())

    def made(self, conn: _Conn) -> None:
        conn.since = time.monotonic()
        self.conns[conn.transport] = conn
        self.waiting[conn] = None
        if len(self.conns) > self.cap:
            victim = next((c for c in self.waiting if c is not conn), None)
            if victim is None:
                stalled = [c for c in self.conns.values() if c.paused is not None]
                victim = min(stalled, key=lambda c: c.paused) if stalled else conn
            self.notices.say("cap", f"{self.cap} connections open, the most `ulimit -n` {self.limit} allows: "
                                    "closing the one waiting longest to make room (if they are not yours, "
                                    "someone on this machine is flooding the port)")
            self.drop(victim)

    def moved(self, conn: _Conn, phase: str) -> None:
        conn.phase, conn.since, conn.got = phase, time.monotonic(), False
        if phase == "busy":
            self.waiting.pop(conn, None)
        elif conn.transport in self.conns:
            self.waiting[conn] = None
            self.waiting.move_to_end(conn)

    def lost(self, conn: _Conn) -> None:
        self.conns.pop(conn.transport, None)
        self.waiting.pop(conn, None)

    def drop(self, conn: _Conn) -> None:
        self.lost(conn)
        conn.transport.abort()   # the socket is closed now, not after a goodbye the other end may never read

    def sweep(self) -> None:
        now = time.monotonic()
        for conn in list(self.waiting):
            if conn.phase == "head" and now - conn.since > self.head_s:
                if conn.got:   # a browser's unused spare connection sends nothing: not worth a line
                    self.notices.say("head", f"closed a connection that sent part of a request and then "
                                             f"nothing for {self.head_s:g} s")
                self.drop(conn)
            elif conn.phase == "idle" and now - conn.since > self.idle_s:
                self.drop(conn)
        for conn in [c for c in self.conns.values() if c.paused is not None and now - c.paused > self.stall_s]:
            self.notices.say("stall", f"closed a connection that stopped reading its answer for {self.stall_s:g} s")
            self.drop(conn)

    def middleware(self):
        @web.middleware
        async def started(request: web.Request, handler):
            conn = self.conns.get(request.transport)
            if conn is not None:
                self.moved(conn, "busy")
            return await handler(request)
        return started

    def answered_class(self):
        pool = self

        class Answered(AbstractAccessLogger):
            """Not a log: aiohttp calls it once a response is written, ending its connection's busy time."""

            def log(self, request, response, time) -> None:
                conn = pool.conns.get(request.transport)
                if conn is not None:
                    pool.moved(conn, "idle")

            @property
            def enabled(self) -> bool:
                return True

        return Answered

    def loop_error(self, loop, context: dict) -> None:
        """The event loop's errors as one line each (asyncio would print a traceback for every one)."""
        message, exc = context.get("message", "error"), context.get("exception")
        if message == "socket.accept() out of system resource":
            self.notices.say("accept", f"cannot accept connections: {getattr(exc, 'strerror', exc)} "
                                       f"(`ulimit -n` {self.limit}); retrying every second")
        else:
            self.notices.say("loop " + message, f"{message}: {exc!r}" if exc else message)


class _OneLine(logging.Handler):
    """aiohttp's server log (a traceback per malformed request, per failed handler) as notices."""

    def __init__(self, notices: Notices):
        super().__init__()
        self.notices = notices

    def emit(self, record: logging.LogRecord) -> None:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError):   # the other end's fault: a 400-class answer, no traceback
            what = _printable(str(exc.message or "").strip().split("\n")[0])
            self.notices.say("malformed", f"answered {exc.code} to a malformed request ({what})")
        elif isinstance(exc, ConnectionError):     # the other end went mid-answer (aiohttp's own 100-continue
            pass                                   # write, say): nobody is left to answer, nothing to fix
        elif exc is not None:                      # ours: the request was answered 500
            where = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
            at = f" at {where[0].filename}:{where[0].lineno}" if where else ""
            self.notices.say(f"failed {type(exc).__name__}{at}", f"a request failed (answered 500): "
                                                               f"{type(exc).__name__}: {_printable(str(exc))}{at}")
        else:
            self.notices.say("server " + str(record.msg), _printable(record.getMessage()))


def _printable(text: str, most: int = 200) -> str:
    """Text from a request, safe for a terminal: no control characters (escape sequences), bounded."""
    return "".join(c if c.isprintable() else "?" for c in text[:most])


def server_logger(notices: Notices) -> logging.Logger:
    log = logging.getLogger("hpclaunch dashboard: aiohttp")
    log.propagate = False
    log.handlers[:] = [_OneLine(notices)]
    return log


async def serve(app: web.Application, sock: socket.socket, pool: Pool, stop: asyncio.Event) -> None:
    """Serves ``app`` on ``sock`` until ``stop`` is set, then lets open streams close for SHUTDOWN_S."""
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(pool.loop_error)
    app.middlewares.insert(0, pool.middleware())
    runner = web.AppRunner(app, access_log_class=pool.answered_class(),
                           access_log=logging.getLogger("hpclaunch dashboard: answers"),
                           logger=server_logger(pool.notices),
                           keepalive_timeout=pool.idle_s, shutdown_timeout=SHUTDOWN_S)
    await runner.setup()
    server = await loop.create_server(pool.protocol_factory(runner.server), sock=sock, backlog=BACKLOG)
    try:
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), SWEEP_S)
            except asyncio.TimeoutError:
                pool.sweep()
    finally:
        server.close()
        await runner.cleanup()


def run(app: web.Application, sock: socket.socket, notices: Notices) -> None:
    """``serve`` until SIGINT (Ctrl-C) or SIGTERM."""
    async def main() -> None:
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            asyncio.get_running_loop().add_signal_handler(sig, stop.set)
        await serve(app, sock, Pool(notices), stop)

    asyncio.run(main())
