"""Starting the dashboard: the `[dashboard]` extra's parts found (one line when missing), the socket
bound (one line per way that fails), a token made when the address is not loopback (or when asked),
with the random path the pages then live under (app.py's guard), the URL printed, and the server run
(connections.py) until Ctrl-C or SIGTERM (exit 0)."""
from __future__ import annotations

import errno
import importlib.util
import ipaddress
import os
import secrets
import socket
import sys
import threading
from typing import Optional, Tuple

from hpclaunch.common.errors import HpclaunchError

EXTRA = "pip install 'hpclaunch[dashboard]' (in this repository: make venv)"


def serve(host: str, port: int, since_s: float, token: bool = False) -> int:
    """``token``: require the token on loopback too (a shared login node's 127.0.0.1 is every user's)."""
    if not 0 <= port <= 65535:
        raise HpclaunchError(f"--port {port}: expected a port from 1 to 65535, or 0 for any free one")
    plotly_js = plotly_js_path()
    try:
        from hpclaunch.dashboard.app import make_app
        from hpclaunch.dashboard.connections import run
    except ImportError as e:
        raise HpclaunchError(f"hpclaunch dashboard: {e.name or e} is not installed \u2014 {EXTRA}") from None
    from hpclaunch.dashboard.board import Board
    from hpclaunch.dashboard.notices import Notices
    from hpclaunch.reports import readers

    sock, loopback = bind(host, port)
    secret = secrets.token_urlsafe(32) if token or not loopback else None
    # With a token, the pages live under a random path, the only one its cookie is sent to: a browser
    # sends a host's cookies to all of its ports, so a cookie for "/" would reach every other server on
    # this machine (another user's too), token and all
    root = f"/{secrets.token_urlsafe(12)}/" if secret else "/"
    bound = sock.getsockname()
    notices = Notices()
    board = Board(since_s)
    app = make_app(board, plotly_js, secret, bound[0], cookie=f"hpclaunch_dashboard_{bound[1]}", root=root,
                   notices=notices)
    # the log readers' pyarrow (0.2 s to import) loaded while no page is open: not in a job page's first read
    threading.Thread(target=readers.have_pyarrow, name="hpclaunch-preload", daemon=True).start()
    print(f"hpclaunch dashboard: {url(bound, secret, root)}", flush=True)
    print("  (Ctrl-C stops it" + ("; the token in this URL is printed only here" if secret else "") + ")",
          file=sys.stderr, flush=True)
    run(app, sock, notices)
    return 0


def plotly_js_path() -> str:
    """plotly.min.js as the installed plotly package ships it (found without importing plotly)."""
    spec = importlib.util.find_spec("plotly")
    if spec is None or not spec.submodule_search_locations:
        raise HpclaunchError(f"hpclaunch dashboard: plotly (its chart library) is not installed \u2014 {EXTRA}")
    for folder in spec.submodule_search_locations:
        path = os.path.join(folder, "package_data", "plotly.min.js")
        if os.path.isfile(path):
            return path
    raise HpclaunchError(f"hpclaunch dashboard: the installed plotly has no package_data/plotly.min.js \u2014 "
                         f"reinstall it: {EXTRA}")


def bind(host: str, port: int) -> Tuple[socket.socket, bool]:
    """A listening socket on host:port, and whether the address is loopback."""
    # an address, never a name: a name would mean a DNS lookup, and the guard decides on the address
    try:
        ip = ipaddress.ip_address("127.0.0.1" if host == "localhost" else host)
    except ValueError:
        raise HpclaunchError(f"--host {host}: expected an IP address of this machine \u2014 127.0.0.1 (the "
                             "default), 0.0.0.0 (every interface) or one of its own addresses") from None
    family, kind, proto, _, addr = socket.getaddrinfo(str(ip), port, type=socket.SOCK_STREAM,
                                                      flags=socket.AI_PASSIVE | socket.AI_NUMERICHOST)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(128)   # serving listens again with connections.BACKLOG
    except OSError as e:
        sock.close()
        fix = {errno.EADDRINUSE: f"--port {port}: already in use on {host} \u2014 pick another, or --port 0 for any free one",
               errno.EADDRNOTAVAIL: f"--host {host}: not an address of this machine \u2014 use one of its own, "
                                    "127.0.0.1 (the default) or 0.0.0.0 (every interface)",
               errno.EACCES: f"--port {port}: needs privileges here \u2014 pick a port from 1024 up, or 0 for any free one"}
        raise HpclaunchError(fix.get(e.errno) or f"--host {host} --port {port}: cannot listen there: "
                             f"{e.strerror or e}") from None
    return sock, ip.is_loopback


def url(bound: tuple, token: Optional[str], root: str = "/") -> str:
    """The URL to open: the machine's name when bound to every interface."""
    name = bound[0]
    if ipaddress.ip_address(name.split("%")[0]).is_unspecified:
        name = socket.getfqdn()
    if ":" in name:
        name = f"[{name}]"
    return f"http://{name}:{bound[1]}{root}" + (f"?token={token}" if token else "")
