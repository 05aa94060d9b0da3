"""The dashboard's stderr: one line per condition, not per event. A login node's other users can make
a condition repeat thousands of times a second (refused connections, a registry that is not one): the
first occurrence is said at once, the next at most once a WINDOW_S, with how many went unsaid."""
from __future__ import annotations

import sys
import threading
import time
from typing import Dict, Optional, TextIO, Tuple

WINDOW_S = 60.0


class Notices:
    def __init__(self, stream: Optional[TextIO] = None, window_s: float = WINDOW_S):
        self.stream = stream
        self.window_s = window_s
        self._said: Dict[str, Tuple[float, int]] = {}   # condition -> (when said, how many since)
        self._lock = threading.Lock()                    # the registry thread says things too

    def say(self, condition: str, line: str) -> None:
        now = time.monotonic()
        with self._lock:
            said, unsaid = self._said.get(condition, (float("-inf"), 0))
            if now - said < self.window_s:
                self._said[condition] = (said, unsaid + 1)
                return
            self._said[condition] = (now, 0)
        more = f" ({unsaid} more since the last such line)" if unsaid else ""
        print(f"hpclaunch dashboard: {line}{more}", file=self.stream or sys.stderr, flush=True)
