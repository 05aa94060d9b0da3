"""Local receivers for the alert tests: a webhook endpoint and a real SMTP server (aiosmtpd), both
started by the test on an address of this machine, and sinks that are down (refused, silent)."""

import json
import socket
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
