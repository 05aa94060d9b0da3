"""Sending alerts: chat webhooks and e-mail through apprise, off the sampling path, rate-limited.

One :class:`Sender` per process (the node monitor, or the login side's command): ``submit`` puts an
alert record on a queue and returns at once; a daemon thread sends it to every sink that wants its
severity, each try bounded by the job's ``alerts.timeout_s`` (apprise's connect and read timeouts),
and writes each try's outcome to the delivery log (monitors/alert_log.py). A sink that is down (refused,
timed out, an HTTP error) delays nothing but that thread: the alert stays pending and is tried again
5 s later, then at doubling intervals up to 5 min. Each sink sends at most ``rate_limit.max`` messages
in any ``rate_limit.per_s`` seconds (a token bucket); alerts beyond that wait and go out together, as
one message, when the bucket allows. Whatever is still pending when the process stops is in the alert
log without a ``delivered`` record: ``hpclaunch alerts list`` shows it and ``hpclaunch alerts send``
sends it (the login side does, too, once the job has ended).

apprise (PyPI, the ``[alerts]`` extra) speaks Slack's, Mattermost's and Teams' webhooks and SMTP, and about
a hundred services more, each from one URL: a Slack webhook URL as Slack gives it, a Microsoft Teams
workflow URL as Power Automate gives it, a Mattermost incoming-webhook URL (``https://HOST/hooks/KEY``,
turned into apprise's ``mmosts://HOST/KEY``), or any apprise URL (``json://``, ``ntfy://``, ...).
It is imported on the first message, in the sending thread: a job without sinks never loads it.

Secrets come from the environment variable or the file that the sink names, read when a message is
sent, and go nowhere else: no record, message or log line here holds one (apprise's own log lines are
captured, stripped of every part of the secret, and kept to one line).
"""

from __future__ import annotations

import os
import re
import threading
import time
from typing import Callable, Dict, List, Optional, Tuple
from urllib.parse import quote

from .alert_log import JsonLog, text, wanted

RETRY_FIRST_S = 5.0
RETRY_MAX_S = 300.0
MAX_PENDING = 1000       # per sink; beyond, the oldest wait in the alert log for `alerts send`
MAX_SECRET_BYTES = 64 * 1024
_MATTERMOST = re.compile(r"(https?)://([^/?#]+)((?:/[^?#]*)?)/hooks/([A-Za-z0-9]+)/?")


class SecretError(Exception):
    """A secret that cannot be had: one line, naming where it was looked for, never its value."""


def read_secret_file(path: str) -> str:
    """The first line of a file only its owner can read. A file readable by its group or others, one
    owned by someone else, or anything but a regular file is refused with one line."""
    full = os.path.expanduser(path)
    try:
        fd = os.open(full, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
                     | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        raise SecretError(f"{path}: cannot read the secret file: {e.strerror or e} \u2014 "
                          "check the path (a link is not followed)") from None
    try:
        st = os.fstat(fd)
        import stat
        if not stat.S_ISREG(st.st_mode):
            raise SecretError(f"{path}: is not a regular file \u2014 give a file holding the secret")
        if st.st_uid != os.getuid():
            raise SecretError(f"{path}: is owned by another user \u2014 keep your secrets in your own files")
        if st.st_mode & 0o077:
            raise SecretError(f"{path}: is readable or writable by others (mode {stat.S_IMODE(st.st_mode):04o}) "
                              f"\u2014 chmod 600 {path}")
        data = os.read(fd, MAX_SECRET_BYTES)
    finally:
        os.close(fd)
    for line in data.decode("utf-8", "replace").splitlines():
        if line.strip():
            return line.strip()
    raise SecretError(f"{path}: is empty \u2014 write the secret on its first line")


def secret(env_name: Optional[str], file_path: Optional[str], what: str, environ=None) -> Optional[str]:
    """The secret from ``env_name`` or ``file_path``; None when neither is given."""
    if env_name:
        value = (os.environ if environ is None else environ).get(env_name, "").strip()
        if not value:
            raise SecretError(f"{what}: ${env_name} is not set where the alert is sent \u2014 export {env_name} "
                              "before submitting (the job inherits it), or use a file only you can read")
        return value
    if file_path:
        return read_secret_file(file_path)
    return None


class Sink:
    """One destination: ``name`` (its place in the job's alerts section, as delivery records name
    it), the least severity it wants, and how to make its apprise URL (secrets read then)."""

    def __init__(self, name: str, kind: str, conf: dict, environ=None):
        self.name, self.kind, self.conf = name, kind, conf
        self.min_severity = conf.get("min_severity", "warning")
        self.environ = environ

    def url(self) -> Tuple[str, List[str]]:
        """(apprise URL, the secret parts to strip from any message)."""
        c = self.conf
        if self.kind == "webhook":
            url = secret(c.get("url_env"), c.get("url_file"), f"alerts.{self.name}", self.environ) or ""
            parts = [url] + [p for p in re.split(r"[/?&=:@#]", url) if len(p) >= 6]
            m = _MATTERMOST.fullmatch(url)
            if m:  # Mattermost's own webhook URL: apprise's form of it (Slack-compatible payload)
                url = f"mmost{'s' if m.group(1) == 'https' else ''}://{m.group(2)}{m.group(3)}/{m.group(4)}"
            return url, parts
        password = secret(c.get("password_env"), c.get("password_file"), f"alerts.{self.name}", self.environ)
        auth = ""
        if c.get("user"):
            auth = quote(c["user"], safe="") + (":" + quote(password, safe="") if password else "") + "@"
        mode = {"none": "insecure", "starttls": "starttls", "ssl": "ssl"}[c.get("security", "none")]
        query = "&".join([f"smtp={c.get('smtp_host', 'localhost')}", f"from={quote(c.get('sender', ''), safe='@')}",
                          "to=" + ",".join(quote(a, safe="@") for a in c.get("to", [])), f"mode={mode}"])
        url = (f"mailto{'s' if mode != 'insecure' else ''}://{auth}{c.get('smtp_host', 'localhost')}:"
               f"{int(c.get('smtp_port', 25))}?{query}")
        return url, [p for p in (password, quote(password or "", safe="")) if p]


def sinks_of(conf: Optional[dict], environ=None) -> List[Sink]:
    """The sinks of a job's `alerts` mapping (job.yaml's, or .hpclaunch/alerts.json)."""
    if not conf:
        return []
    out = [Sink(f"webhooks[{i}]", "webhook", w, environ) for i, w in enumerate(conf.get("webhooks") or [])]
    if conf.get("email"):
        out.append(Sink("email", "email", conf["email"], environ))
    return out


def _scrub(msg: str, secrets: List[str]) -> str:
    for s in sorted((s for s in secrets if s), key=len, reverse=True):
        msg = msg.replace(s, "***")
    msg = " ".join(msg.split())
    return msg if len(msg) <= 300 else msg[:299] + "\u2026"


_LOG_LOCK = threading.Lock()


def _apprise_send(sink: Sink, title: str, body: str, severity: str, timeout_s: float) -> Optional[str]:
    """Send one message; None, or why it failed (one line, no secret)."""
    try:
        url, secrets = sink.url()
    except SecretError as e:
        return str(e)
    try:
        import logging
        import apprise
    except ImportError as e:
        return f"cannot import apprise ({e}): pip install 'hpclaunch[alerts]' in the Python the job runs"
    captured: List[str] = []

    class _Keep(logging.Handler):
        def emit(self, record):
            if len(captured) < 20:
                captured.append(record.getMessage())

    log = logging.getLogger("apprise")
    handler = _Keep(level=logging.WARNING)
    with _LOG_LOCK:  # apprise's log lines come here, never to stderr (they may hold parts of the URL)
        log.propagate = False
        log.addHandler(handler)
    try:
        # memory only: apprise's persistent store would keep state per URL under the user's home
        ap = apprise.Apprise(asset=apprise.AppriseAsset(storage_mode="memory"))
        if not ap.add(url):
            return _scrub(f"{sink.kind}: apprise does not read this URL"
                          + (f" ({captured[-1]})" if captured else ""), secrets)
        for service in ap:
            service.socket_connect_timeout = timeout_s
            service.socket_read_timeout = timeout_s
        kind = {"critical": apprise.NotifyType.FAILURE, "warning": apprise.NotifyType.WARNING}.get(
            severity, apprise.NotifyType.INFO)
        if ap.notify(title=title, body=body, notify_type=kind):
            return None
        return _scrub(captured[-1] if captured else f"{sink.kind}: not delivered", secrets)
    except Exception as e:  # a plugin's own error: never the thread's end
        return _scrub(f"{type(e).__name__}: {e}", secrets)
    finally:
        with _LOG_LOCK:
            log.removeHandler(handler)


class _State:
    __slots__ = ("pending", "tokens", "stamp", "fails", "next_try")

    def __init__(self, tokens: float, now: float):
        self.pending: List[dict] = []
        self.tokens = tokens
        self.stamp = now
        self.fails = 0
        self.next_try = 0.0


class Sender:
    """Sends alert records to ``sinks`` from a thread of its own (see the module's docstring).
    ``send`` is the function that sends one message (tests give their own)."""

    def __init__(self, sinks: List[Sink], log: JsonLog, rate_max: int = 20, rate_per_s: float = 3600.0,
                 timeout_s: float = 5.0, send: Callable = _apprise_send, clock=time.monotonic,
                 on_error: Optional[Callable[[str], None]] = None):
        self.sinks, self.log = sinks, log
        self.rate_max, self.refill = float(rate_max), rate_max / rate_per_s
        self.timeout_s, self._send, self.clock, self.on_error = timeout_s, send, clock, on_error
        now = clock()
        self.state: Dict[str, _State] = {s.name: _State(self.rate_max, now) for s in sinks}
        self._cond = threading.Condition()
        self._inbox: List[dict] = []
        self._closing = False
        self._said: set = set()
        self._ready = False
        self.thread: Optional[threading.Thread] = None

    def start(self) -> "Sender":
        """Ready to send: the thread itself starts with the first record (a job with no alert has none:
        a thread is no cost while it waits, but its start is, and most jobs never raise anything)."""
        self._ready = True
        with self._cond:
            waiting = bool(self._inbox)
        if waiting and self.thread is None:
            self._spawn()
        return self

    def _spawn(self) -> None:
        self.thread = threading.Thread(target=self._run, name="hpclaunch-alerts", daemon=True)
        self.thread.start()

    def submit(self, record: dict) -> None:
        """Queue one alert record; returns at once."""
        if not self.sinks:
            return
        with self._cond:
            self._inbox.append(record)
            self._cond.notify()
        if self.thread is None and self._ready:
            self._spawn()

    def stop(self) -> None:
        """Ask for one last try of what is pending, then the thread's end (``join`` waits for it)."""
        with self._cond:
            self._closing = True
            for st in self.state.values():
                st.next_try = 0.0
            self._cond.notify()

    def join(self, wait_s: float) -> None:
        if self.thread is not None:
            self.thread.join(max(0.0, wait_s))

    def close(self, wait_s: float = 3.0) -> None:
        """One last try of what is pending, for at most ``wait_s``; what is left stays undelivered."""
        self.stop()
        self.join(wait_s)

    def pending(self) -> int:
        with self._cond:
            return sum(len(s.pending) for s in self.state.values()) + len(self._inbox)

    # -- the thread ------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cond:
                self._take()
                now = self.clock()
                if not self._due(now):
                    if self._closing:
                        return
                    self._cond.wait(self._next_wake(now))  # None: until an alert comes
                    continue
            self._work(self.clock())

    def _take(self) -> None:
        inbox, self._inbox = self._inbox, []
        for rec in inbox:
            for s in self.sinks:
                if wanted(rec, s.min_severity):
                    st = self.state[s.name]
                    st.pending.append(rec)
                    if len(st.pending) > MAX_PENDING:
                        del st.pending[0]

    def _refill(self, st: _State, now: float) -> None:
        st.tokens = min(self.rate_max, st.tokens + (now - st.stamp) * self.refill)
        st.stamp = now

    def _due(self, now: float) -> bool:
        for st in self.state.values():
            self._refill(st, now)
            if st.pending and now >= st.next_try and st.tokens >= 1.0:
                return True
        return False

    def _next_wake(self, now: float) -> Optional[float]:
        best = None
        for st in self.state.values():
            if not st.pending:
                continue
            self._refill(st, now)
            at = max(st.next_try, now + (0.0 if st.tokens >= 1.0 else (1.0 - st.tokens) / self.refill))
            best = at if best is None else min(best, at)
        return None if best is None else max(0.0, best - now)

    def _work(self, now: float) -> None:
        for s in self.sinks:
            st = self.state[s.name]
            with self._cond:
                self._refill(st, now)
                if not st.pending or now < st.next_try or st.tokens < 1.0:
                    continue
                # the last token of the window carries everything pending, as one message
                batch = list(st.pending) if st.tokens < 2.0 else st.pending[:1]
            if len(batch) == 1:
                title, body = text(batch[0])
            else:
                title = f"[hpclaunch] {len(batch)} alerts for job {batch[0].get('job_id')}"
                body = "\n\n".join("\n".join(text(r)) for r in batch)
            worst = max((r.get("severity") for r in batch), key=lambda x: {"info": 0, "warning": 1}.get(x, 2))
            error = self._send(s, title, body, worst, self.timeout_s)
            with self._cond:
                st.tokens -= 1.0
                if error is None:
                    del st.pending[:len(batch)]
                    st.fails, st.next_try = 0, 0.0
                else:
                    st.fails += 1
                    st.next_try = self.clock() + min(RETRY_MAX_S, RETRY_FIRST_S * 2 ** (st.fails - 1))
            for rec in batch:
                self.log.append({"time_unix": round(time.time(), 3), "id": rec.get("id"), "event": rec.get("event"),
                                 "sink": s.name, "status": "delivered" if error is None else "failed",
                                 "attempt": st.fails or 1, "error": error})
            if error is not None and self.on_error is not None and (s.name, error) not in self._said:
                self._said.add((s.name, error))
                try:
                    self.on_error(f"alerts: {s.name}: {error}")
                except Exception:
                    pass


class Senders:
    """One :class:`Sender` (one thread) per sink, so that a sink that is down delays no other."""

    def __init__(self, sinks: List[Sink], log: JsonLog, rate_max: int = 20, rate_per_s: float = 3600.0,
                 timeout_s: float = 5.0, on_error: Optional[Callable[[str], None]] = None, send: Callable = None):
        extra = {"send": send} if send is not None else {}
        self.log = log
        self.each = [Sender([s], log, rate_max, rate_per_s, timeout_s, on_error=on_error, **extra) for s in sinks]

    def start(self) -> "Senders":
        for s in self.each:
            s.start()
        return self

    def submit(self, record: dict) -> None:
        for s in self.each:
            s.submit(record)

    def pending(self) -> int:
        return sum(s.pending() for s in self.each)

    def close(self, wait_s: float = 3.0) -> None:
        """Every sink's last try at once; at most ``wait_s`` in all."""
        for s in self.each:
            s.stop()
        end = time.monotonic() + max(0.0, wait_s)
        for s in self.each:
            s.join(end - time.monotonic())
