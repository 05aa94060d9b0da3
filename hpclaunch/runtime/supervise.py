"""The supervisor's judgements, for the job runtime's restart loop (hl_supervise in recovery.sh):

    python -m hpclaunch.runtime.supervise judge    ...   # while a step runs: how it ends
    python -m hpclaunch.runtime.supervise liveness ...   # after a step failed: did a node die?
    python -m hpclaunch.runtime.supervise drain    ...   # after a kill: until its ranks are gone
    python -m hpclaunch.runtime.supervise kill-tree PID  # a process and its descendants, at once
    python -m hpclaunch.runtime.supervise interval ...   # the checkpoint interval to export

It knows no scheduler: the node watches' heartbeats (`.hpclaunch/watch/<node>.json`, watch.py) and
the step's pid are all it reads; recovery.sh turns its verdicts into scheduler commands. A verdict is one
line of KEY=VALUE words written atomically to `--out` (docs/recovery.md), which the state file keeps:

    verdict=ended                                 the step ended by itself
    verdict=node node=N since=T                   node N stopped beating at about T
    verdict=spare node=N since=T                  a spare died (fence it; the step runs on)
    verdict=hang rank=R node=N bound_s=B quiet_s=Q state=S since=T stacks=DIR
    verdict=alive                                 (liveness) every node beats on

Heartbeats are timed on this process's clock (a node's sequence number changing), so nodes' clocks
never matter; `since` is this machine's wall time.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from typing import Dict, List, Optional

from hpclaunch.common.atomic import write_atomic
from hpclaunch.runtime import cadence, progress

POLL_S = 0.5
STARTUP_GRACE_S = 60.0   # a node's watch may take this long to write its first heartbeat
DUMP_WAIT_S = 30.0       # how long stacks may take before the step is killed anyway


class Beats:
    """When each node's heartbeat last changed, on this process's clock."""

    def __init__(self, run_dir: str, nodes: List[str], timeout: float):
        self.dir = os.path.join(run_dir, ".hpclaunch", "watch")
        self.timeout = timeout
        self.started = time.monotonic()
        self.seen: Dict[str, tuple] = {}     # node -> (seq, monotonic, wall)
        self.docs: Dict[str, dict] = {}
        for node in nodes:
            self.read(node, first=True)

    def read(self, node: str, first: bool = False) -> Optional[dict]:
        try:
            with open(os.path.join(self.dir, f"{node}.json"), encoding="utf-8") as f:
                doc = json.loads(f.read(1 << 20))
        except (OSError, ValueError):
            return None
        if not isinstance(doc, dict):
            return None
        seq = doc.get("seq")
        old = self.seen.get(node)
        if old is None or old[0] != seq:
            # at the first look a heartbeat counts as fresh: this process cannot tell its age
            self.seen[node] = (seq, time.monotonic(), time.time())
        self.docs[node] = doc
        return doc

    def dead(self, node: str) -> Optional[float]:
        """The wall time the node was last heard of, when it has been silent too long; else None."""
        self.read(node)
        now = time.monotonic()
        old = self.seen.get(node)
        if old is None:
            if now - self.started > max(STARTUP_GRACE_S, self.timeout):
                return time.time() - (now - self.started)
            return None
        return old[2] if now - old[1] > self.timeout else None


def step_ended(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[-1].split()[0]
    except (OSError, IndexError):
        return True
    return state in (b"Z", b"X")


def hung(beats: Beats, nodes: List[str], attempt: int, hang: List[float]) -> Optional[dict]:
    """The hang verdict, when a rank of this attempt has been quiet longer than its bound."""
    factor, floor, ceiling = hang[:3]
    quiet, over = {}, []
    for node in nodes:
        doc = beats.docs.get(node)
        if not doc or doc.get("attempt") != attempt:
            continue
        for rank, info in (doc.get("ranks") or {}).items():
            if not isinstance(info, dict) or not info.get("alive"):
                continue
            b = progress.bound(info.get("p99_s"), bool(info.get("stepped")), factor, floor, ceiling)
            q = float(info.get("quiet_s") or 0.0)
            quiet[rank] = {"state": info.get("state"), "quiet_s": q, "node": node, "bound_s": b}
            if q > b:
                over.append(rank)
    if not over:
        return None
    # name the stopped one, or the one quiet the longest, among every rank over its bound or close to it
    candidates = {r: v for r, v in quiet.items() if r in over or v["quiet_s"] > 0.5 * v["bound_s"]}
    rank = progress.hung_rank(candidates)
    info = quiet[rank]
    return {"verdict": "hang", "rank": int(rank), "node": info["node"], "bound_s": round(info["bound_s"], 3),
            "quiet_s": round(info["quiet_s"], 3), "state": info["state"],
            "since": round(time.time() - info["quiet_s"], 3)}


def request_stacks(run_dir: str, attempt: int, beats: Beats, nodes: List[str]) -> str:
    ctl = os.path.join(run_dir, ".hpclaunch")
    try:
        with open(os.path.join(ctl, "dump-request")) as f:
            serial = int(json.loads(f.read(4096)).get("serial", 0)) + 1
    except (OSError, ValueError, AttributeError, TypeError):
        serial = 1
    folder = os.path.join(run_dir, "hangs", f"attempt{attempt}-{serial}")
    write_atomic(os.path.join(ctl, "dump-request"),
                 json.dumps({"serial": serial, "attempt": attempt, "dir": folder, "time_unix": time.time()}))
    deadline = time.monotonic() + DUMP_WAIT_S
    while time.monotonic() < deadline:
        if all((beats.read(n) or {}).get("dumped", 0) >= serial or beats.dead(n) is not None for n in nodes):
            break
        time.sleep(POLL_S)
    return folder


def judge(a) -> dict:
    nodes, spares = _names(a.nodes), _names(a.spares)
    watched = [n for n in nodes + spares if n != a.batch_node] if a.node_watch else []
    beats = Beats(a.run_dir, nodes + spares, a.heartbeat_timeout)
    hang = _hang(a.hang)
    while True:
        if step_ended(a.step_pid):
            return {"verdict": "ended"}
        for node in watched:
            since = beats.dead(node)
            if since is not None:
                return {"verdict": "spare" if node in spares else "node", "node": node, "since": round(since, 3)}
        if hang is not None:
            for node in nodes:
                beats.read(node)
            found = hung(beats, nodes, a.attempt, hang)
            if found is not None:
                found["stacks"] = request_stacks(a.run_dir, a.attempt, beats, nodes)
                return found
        time.sleep(POLL_S)


def liveness(a) -> dict:
    """After a failed step: wait until every node has beaten since the failure (alive), or one has
    been silent for the heartbeat timeout (dead)."""
    nodes = [n for n in _names(a.nodes) if n != a.batch_node]
    beats = Beats(a.run_dir, nodes, a.heartbeat_timeout)
    fresh = {n: beats.seen.get(n, (None,))[0] for n in nodes}
    beat_again = set()
    deadline = time.monotonic() + a.heartbeat_timeout + 5.0
    while time.monotonic() < deadline:
        for node in nodes:
            since = beats.dead(node)
            if since is not None:
                return {"verdict": "node", "node": node, "since": round(since, 3)}
            if beats.seen.get(node, (None,))[0] != fresh[node]:
                beat_again.add(node)
        if len(beat_again) == len(nodes):
            return {"verdict": "alive"}
        time.sleep(POLL_S)
    return {"verdict": "alive"}


def drain(a) -> dict:
    """Until no rank of the attempt lives on a node that still beats (at most --timeout s)."""
    nodes = [n for n in _names(a.nodes)]
    beats = Beats(a.run_dir, nodes, a.heartbeat_timeout)
    deadline = time.monotonic() + a.timeout
    left: List[str] = []
    while time.monotonic() < deadline:
        left = []
        for node in nodes:
            doc = beats.read(node)
            if beats.dead(node) is not None or not doc or doc.get("attempt") != a.attempt:
                continue
            left += [f"rank {r} on {node}" for r, info in (doc.get("ranks") or {}).items()
                     if isinstance(info, dict) and info.get("alive")]
        if not left:
            return {"verdict": "drained"}
        time.sleep(POLL_S)
    return {"verdict": "left", "ranks": left[:32]}


def kill_tree(pid: int, wait_s: float = 10.0) -> int:
    """SIGSTOP then SIGKILL the process and every descendant (stopped first, so none forks away)."""
    found = descendants(pid) + [pid]
    for p in found:
        _signal(p, signal.SIGSTOP)
    for p in descendants(pid):          # anything forked before it stopped
        if p not in found:
            found.append(p)
            _signal(p, signal.SIGSTOP)
    for p in found:
        _signal(p, signal.SIGKILL)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and any(not step_ended(p) for p in found if p != pid):
        time.sleep(0.05)
    return len(found)


def descendants(pid: int) -> List[int]:
    parents: Dict[int, List[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[-1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        parents.setdefault(ppid, []).append(int(name))
    out, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except OSError:
        pass


def _names(text: Optional[str]) -> List[str]:
    return [n for n in (text or "").split(",") if n]


def _hang(text: Optional[str]) -> Optional[List[float]]:
    if not text or text == "off":
        return None
    return [float(x) for x in text.split(":")]


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m hpclaunch.runtime.supervise", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("judge", "liveness", "drain"):
        s = sub.add_parser(name)
        s.add_argument("--run-dir", required=True)
        s.add_argument("--nodes", required=True, help="the step's nodes, comma-separated")
        s.add_argument("--heartbeat-timeout", type=float, default=10.0)
        s.add_argument("--batch-node", default=None, help="the batch shell's node (its death ends the job anyway)")
        s.add_argument("--out", required=True)
        if name == "judge":
            s.add_argument("--spares", default="")
            s.add_argument("--step-pid", type=int, required=True)
            s.add_argument("--attempt", type=int, required=True)
            s.add_argument("--hang", default="off", help="FACTOR:FLOOR:CEILING[:CPU], or off")
            s.add_argument("--no-node-watch", dest="node_watch", action="store_false")
        if name == "drain":
            s.add_argument("--attempt", type=int, required=True)
            s.add_argument("--timeout", type=float, default=30.0)
    k = sub.add_parser("kill-tree")
    k.add_argument("pid", type=int)
    i = sub.add_parser("interval")
    i.add_argument("--run-dir", required=True)
    i.add_argument("--policy", default="auto", help="auto, off, or seconds")
    i.add_argument("--cost", type=float, default=30.0, help="the checkpoint cost assumed until one is measured")
    i.add_argument("--rate", default="", help="node failures per node-hour on the partition (empty: the default)")
    i.add_argument("--nodes", type=int, default=1)
    return p.parse_args(argv)


def main(argv=None) -> int:
    a = parse_args(argv)
    if a.command == "kill-tree":
        kill_tree(a.pid)
        return 0
    if a.command == "interval":
        rate = float(a.rate) if a.rate not in ("", "none") else None
        interval, mtbf = cadence.for_job(a.run_dir, a.policy, a.cost, rate, a.nodes)
        # "INTERVAL MTBF" (seconds; "-" for none): job.sh exports both
        print(" ".join("-" if v is None else f"{v:.0f}" for v in (interval, mtbf)))
        return 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    verdict = {"judge": judge, "liveness": liveness, "drain": drain}[a.command](a)
    write_atomic(a.out, verdict_line(verdict) + "\n", durable=False)
    return 0


def verdict_line(verdict: dict) -> str:
    """One line of words, KEY=VALUE (the verdict first), as job.sh reads it and the state file keeps it."""
    return " ".join(f"{k}={_word(v)}" for k, v in verdict.items())


def _word(value) -> str:
    if isinstance(value, (list, tuple)):
        value = ",".join(str(v) for v in value)
    return "".join(c if c.isprintable() and not c.isspace() else "_" for c in str(value)) or "-"


if __name__ == "__main__":
    raise SystemExit(main())
