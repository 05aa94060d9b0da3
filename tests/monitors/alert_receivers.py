"""Local receivers for the alert tests: a webhook endpoint and a real SMTP server (aiosmtpd), both
started by the test on an address of this machine, and sinks that are down (refused, silent)."""

import json
import os
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def free_port(host="127.0.0.1"):
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class WebhookReceiver:
    """Records every POST: (path, JSON body). Mattermost's webhook path is /hooks/<key>."""

    def __init__(self, host="127.0.0.1", port=0):
        got = self.got = []

        class H(BaseHTTPRequestHandler):
            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n)
                try:
                    data = json.loads(body)
                except ValueError:
                    data = {"raw": body.decode("utf-8", "replace")}
                got.append((self.path, data))
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer((host, port), H)
        self.host, self.port = host, self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, key="alertkey0123456789"):
        return f"http://{self.host}:{self.port}/hooks/{key}"

    def texts(self):
        return [d.get("text", "") for _, d in self.got]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class SmtpReceiver:
    """A real SMTP server (aiosmtpd) keeping each message: (from, to, subject, body)."""

    def __init__(self, host="127.0.0.1"):
        from email import message_from_bytes, policy
        from aiosmtpd.controller import Controller
        got = self.got = []

        class Handler:
            async def handle_DATA(self, server, session, envelope):
                msg = message_from_bytes(envelope.original_content or envelope.content, policy=policy.default)
                parts = [p.get_payload(decode=True).decode("utf-8", "replace") for p in msg.walk()
                         if p.get_content_type() == "text/plain"]
                got.append((envelope.mail_from, list(envelope.rcpt_tos), str(msg["Subject"]), "\n".join(parts)))
                return "250 OK"

        self.host, self.port = host, free_port(host)
        self.controller = Controller(Handler(), hostname=host, port=self.port)
        self.controller.start()

    def subjects(self):
        return [s for _, _, s, _ in self.got]

    def close(self):
        self.controller.stop()


class SilentPort:
    """A port that accepts connections and never answers (a sink that times out)."""

    def __init__(self, host="127.0.0.1"):
        self.sock = socket.socket()
        self.sock.bind((host, 0))
        self.sock.listen(64)
        self.host, self.port = host, self.sock.getsockname()[1]

    def close(self):
        self.sock.close()


def wait_until(check, timeout=30.0, step=0.1):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = check()
        if got:
            return got
        time.sleep(step)
    return check()


# -- the monitor with alerts, on the fake NVML ---------------------------------------------------------

def conf(**over):
    """The resolved alerts: section (hpclaunch's defaults, resolve_after_s 5), keys set by path a__b__c."""
    from hpclaunch.spec.alerts import Alerts
    from hpclaunch.spec.typedload import to_plain
    c = to_plain(Alerts())
    c["resolve_after_s"] = 5.0
    c["evaluate_every_s"] = 0.0   # every sample: the tests' samples are 0.1 s apart
    for path, value in over.items():
        node = c
        *parts, last = path.split("__")
        for p in parts:
            node = node[p]
        node[last] = value
    return c


def flat_series(temps=None):
    return {"power_instant_mw": [90000], "power_average_mw": [88000], "power_usage_mw": [88000],
            "energy_mj": [1000 * i for i in range(1, 80)], "mem_temp_c": [40], "temp_c": temps or [50],
            "mem_used_mib": [100], "mem_total_mib": [81559], "util_gpu": [50], "util_mem": [10], "sm_clock": [1980],
            "mem_clock": [2619], "power_limit_mw": [700000], "clocks_event_reasons": [0], "viol_power_ns": [0],
            "viol_thermal_ns": [0], "ecc_dbe": [0], "slowdown_c": [89], "shutdown_c": [92]}


def run_monitor(tmp_path, alerts, extra_env, duration="3"):
    sc = {"driver": "550", "devices": [
        {"uuid": "GPU-aaaa", "series": flat_series()},
        {"uuid": "GPU-bbbb", "series": flat_series([60] * 4 + [87] * 8 + [60]), "xids": [{"after_s": 1.5, "xid": 79}]}]}
    (tmp_path / "scenario.json").write_text(json.dumps(sc))
    run = tmp_path / "job-42"
    (run / ".hpclaunch").mkdir(parents=True)
    if alerts is not None:
        (run / ".hpclaunch" / "alerts.json").write_text(json.dumps(alerts))
    env = {k: v for k, v in os.environ.items()
           if k not in ("SLURM_JOB_GPUS", "SLURM_STEP_GPUS", "CUDA_VISIBLE_DEVICES", "SLURM_NODEID")}
    from monitor_helpers import FAKE_PATH
    env.update({"HPCLAUNCH_MONITOR_FAKE_NVML": FAKE_PATH, "HPCLAUNCH_TASKS_PER_NODE": "2",
                "HPCLAUNCH_FAKE_NVML_SCENARIO": str(tmp_path / "scenario.json"), "SLURM_JOB_ID": "42",
                "HPCLAUNCH_JOB_NAME": "hot job", **extra_env})
    p = subprocess.run([sys.executable, "-m", "hpclaunch.monitors", "--interval", "0.1", "--duration", duration,
                        "--run-dir", str(run), "--host", "n7", "--no-power-trace"],
                       env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return run, p


