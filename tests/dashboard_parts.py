"""What the dashboard's tests share: `hpclaunch dashboard` as a subprocess, Debian's chromium driven by
selenium through Debian's chromedriver (tests/test_dashboard.py, tests/test_dashboard_hostile.py,
tests/test_fuzz_dashboard.py; each module's fixtures are two lines over these)."""
from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def require_browser_parts(require) -> None:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.path.exists(p)]
    if importlib.util.find_spec("selenium") is None:
        missing.append("selenium (make venv)")
    require(f"needs {', '.join(missing)} (make deps, make venv)" if missing else None, "tests/test_dashboard.py")


class Dashboard:
    """`hpclaunch dashboard ARGS` as a subprocess: its printed URL, stopped with SIGINT (Ctrl-C). Its
    stderr goes to a file (a pipe nobody reads would stop a server that writes much), read by stderr()."""

    def __init__(self, *args, preexec_fn=None):
        self.err = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, "-m", "hpclaunch", "dashboard", *args], stdout=subprocess.PIPE,
                                     stderr=self.err, text=True, preexec_fn=preexec_fn)
        line = self.proc.stdout.readline()   # the first line is the URL, printed once it listens
        m = re.match(r"hpclaunch dashboard: (http://\S+)$", line.strip())
        assert m, f"no URL printed: {line!r} {self.stderr() if self.proc.poll() is not None else ''}"
        self.url = m.group(1)
        self.port = int(re.match(r"http://.*:(\d+)/", self.url).group(1))
        self.root = re.match(r"http://[^/]*(/[^?]*)", self.url).group(1)   # "/", or with a token "/<random>/"
        self.token = (re.search(r"\?token=([\w-]+)$", self.url) or [None, None])[1]

    def local(self, path: str = "/") -> str:
        """``path`` (the pages', "/job/1") on 127.0.0.1, under the dashboard's root."""
        return f"http://127.0.0.1:{self.port}{self.root}{path.lstrip('/')}"

    def stderr(self) -> str:
        self.err.seek(0)
        return self.err.read().decode("utf-8", "replace")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout=15)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()


@contextlib.contextmanager
def dashboards():
    """``start(*args)`` -> a Dashboard; every one started is stopped on leaving."""
    started = []

    def start(*args, **kwargs):
        started.append(Dashboard(*args, **kwargs))
        return started[-1]

    try:
        yield start
    finally:
        for d in started:
            d.stop()


def chrome():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM    # Debian's, with its own driver: selenium-manager is never asked
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                "--window-size=1300,1500", "--disable-background-networking"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=opts, service=Service(executable_path=CHROMEDRIVER))


def wait_for(driver, script, what, timeout=45.0):
    """The value of a JS expression once it is truthy."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = driver.execute_script("return " + script)
        if got:
            return got
        time.sleep(0.25)
    raise AssertionError(f"no {what} after {timeout} s; console: {driver.get_log('browser')}")


def get(url, cookie=None, timeout=10):
    """(status, body, headers) of a GET, errors included; redirects followed (without cookies)."""
    req = urllib.request.Request(url, headers={"Cookie": cookie} if cookie else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read().decode(), resp.headers
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), e.headers
