"""XID errors through NVML's event API: one event set for the sampled GPUs, drained without blocking.

XIDs are the driver's error reports (13 graphics engine exception, 31 memory page fault, 48
double-bit ECC, 79 fallen off the bus, ...). At start: ``nvmlEventSetCreate``, then per GPU
``nvmlDeviceGetSupportedEventTypes`` and, where it offers XIDs,
``nvmlDeviceRegisterEvents(handle, nvmlEventTypeXidCriticalError, set)``. Each sample:
``nvmlEventSetWait_v2(set, 0)`` (``nvmlEventSetWait`` where the driver or binding lacks ``_v2``)
until NVML_ERROR_TIMEOUT: one call per sample when nothing happened, whatever the number of GPUs.
Each XID becomes an ``xid`` event and counts in its GPU's ``xid_count``. ``close`` frees the set.

Only the XID type is registered: a double-bit ECC error is itself XID 48 (row remapping 63/64),
so the ECC event types would report it twice, and single-bit ECC events can come in storms that
the aggregate ECC counters already count.

Never fatal, said once (``source_unavailable``, capability ``xid_events``): a binding or driver
without the event API, a GPU without XID events (its ``xid_count`` stays empty), and an error of
the event set mid-run. That one frees the set and leaves ``xid_count`` empty (XIDs may be missed)
until a new set is registered: tried RETRY_FIRST_S later, then at doubling intervals up to
RETRY_MAX_S, without a record per failed try. A new set is said in ``source_available`` (source
``nvml``, ``xid_events``, ``resumed_after_s``) and the counts go on from where they stopped.
"""

from __future__ import annotations

import ctypes
from typing import Dict, List, Optional

from .nvml_batch import direct
from .nvml_errors import err_text

XID_EVENT = 0x8          # nvmlEventTypeXidCriticalError (nvml.h); not every binding version names it
_TIMEOUT = 10            # NVML_ERROR_TIMEOUT: nothing (more) to deliver
_FUNCTION_NOT_FOUND = 13  # pynvml's answer when the driver's library lacks the C function
_UNKNOWN = 999           # RegisterEvents: "the event set is in an undefined state and should be freed"
_INSTANCE_ANY = 0xFFFFFFFF  # gpuInstanceId/computeInstanceId of an event that is not a MIG instance's
MAX_PER_POLL = 256       # bounded work per sample in an XID storm; the rest waits in the set
RETRY_FIRST_S = 30.0     # a mid-run event-set error: first try of a new set after this long
RETRY_MAX_S = 600.0      # ... then doubling, to at most this
CAPABILITY = "xid_events"


def _device_key(handle):
    """pynvml hands back a new ctypes pointer in each event's ``device``: compare the address it
    holds. Handles of other bindings (ints, objects) are compared as they are."""
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value
    except (ctypes.ArgumentError, TypeError):
        return handle


class _RawWait:
    """``nvmlEventSetWait[_v2](set, &data, 0)`` called as pynvml's own wrapper calls it (the C function
    looked up by name at each call), without the wrapper's NVMLError for the common answer: every
    sample asks, and nearly always hears NVML_ERROR_TIMEOUT. Raising and catching that was about
    half of a poll's cost on the real binding (bench/monitor). One answer structure is reused: an
    event's fields are read before the next call."""

    def __init__(self, lookup, error, name: str, ctype):
        self._lookup, self.error, self._name = lookup, error, name
        self.data = ctype()
        self._ref = ctypes.byref(self.data)

    @classmethod
    def of(cls, nv, name: str) -> Optional["_RawWait"]:
        """For pynvml's own wait function; None for any other binding (a fake, a wrapper)."""
        found = direct(nv, name)
        if found is None:
            return None
        lookup, error, scope = found
        ctype = scope.get("c_nvmlEventData_t")
        if not (isinstance(ctype, type) and issubclass(ctype, ctypes.Structure)):
            return None
        return cls(lookup, error, name, ctype)

    def __call__(self, event_set) -> int:
        return self._lookup(self._name)(event_set, self._ref, 0)


class XidWatcher:
    """XID events of the GPUs passed to :meth:`start` (objects with index, uuid, ranks, handle)."""

    def __init__(self, nvml, events, error_cls=Exception, source: str = "nvml"):
        self.nv = nvml
        self.events = events
        self._NVMLError = error_cls
        self.source = source
        self.set = None
        self.counts: Dict[int, int] = {}   # GPU index -> XIDs since start, for the GPUs registered
        self._by_key: Dict[object, object] = {}
        self._gpus: List[object] = []
        self._waits: List[str] = []        # wait functions still to try, preferred first
        self._wait_fn = None               # the first of them, looked up once
        self._raw: Optional[_RawWait] = None  # the same through pynvml's C lookup: no exception a poll
        self.last_poll: Optional[float] = None
        self._kept: Dict[int, int] = {}    # counts when collection stopped, continued on a new set
        self._stopped_at: Optional[float] = None
        self._retry_at: Optional[float] = None
        self._retry_s = RETRY_FIRST_S

    # -- set-up --------------------------------------------------------------------------
    def start(self, gpus, now: float) -> List[int]:
        """Register the GPUs that offer XID events; returns their indices (empty: nothing to poll)."""
        self._gpus = list(gpus)
        if not hasattr(self.nv, "nvmlEventSetCreate"):
            self._off("the NVML binding has no event API (nvmlEventSetCreate)")
            return []
        return self._open(now, self._off)

    def _open(self, now: float, say) -> List[int]:
        """A new event set with every GPU that takes XID registration; ``say`` gets each reason one
        is refused (a retry passes a no-op: the first stop was said)."""
        nv = self.nv
        try:
            self.set = nv.nvmlEventSetCreate()
        except Exception as e:  # NOT_SUPPORTED, FUNCTION_NOT_FOUND (a driver without it), ...
            say(f"nvmlEventSetCreate: {err_text(e)}")
            return []
        self._by_key.clear()
        for g in self._gpus:
            try:
                mask = int(nv.nvmlDeviceGetSupportedEventTypes(g.handle))
            except Exception as e:
                say(f"nvmlDeviceGetSupportedEventTypes: {err_text(e)}", g)
                continue
            if not mask & XID_EVENT:
                say(f"the driver offers no XID events for this GPU (event types 0x{mask:x})", g)
                continue
            try:
                nv.nvmlDeviceRegisterEvents(g.handle, XID_EVENT, self.set)
            except Exception as e:
                if getattr(e, "value", None) == _UNKNOWN:  # the whole set is unusable
                    self.counts.clear()
                    self._free()
                    say(f"nvmlDeviceRegisterEvents: {err_text(e)}")
                    return []
                say(f"nvmlDeviceRegisterEvents: {err_text(e)}", g)
                continue
            self._by_key[_device_key(g.handle)] = g
            self.counts[g.index] = self._kept.get(g.index, 0)
        if not self.counts:
            self._free()
            return []
        self._waits = [n for n in ("nvmlEventSetWait_v2", "nvmlEventSetWait") if hasattr(nv, n)]
        self._wait_fn = getattr(nv, self._waits[0]) if self._waits else None
        self._raw = _RawWait.of(nv, self._waits[0]) if self._waits else None
        self.last_poll = now
        return sorted(self.counts)

    def _off(self, reason: str, g=None) -> None:
        d = {"source": self.source, "capability": CAPABILITY, "reason": reason}
        if g is not None:
            d["gpu_index"] = g.index
        self.events.emit("source_unavailable", d)

    # -- each sample -----------------------------------------------------------------------
    def count(self, index: int) -> Optional[int]:
        """The ``xid_count`` cell: None (empty) where XIDs are not collected for this GPU."""
        return self.counts.get(index)

    def poll(self, now: float) -> int:
        """Drain the events that arrived since the last poll; returns the number of XIDs.

        Every sample pays for it, so the wait function is looked up once (``_open``) and called
        here in one frame: its NVML_ERROR_TIMEOUT, the common answer, is caught once, not raised
        on through a helper."""
        if self.set is None:
            if self._retry_at is None or now < self._retry_at or not self._reopen(now):
                return 0
        since, self.last_poll = self.last_poll, now
        n = 0
        wait, es, raw = self._wait_fn, self.set, self._raw
        for _ in range(MAX_PER_POLL):
            try:
                if raw is not None:  # pynvml: the C function's answer, no NVMLError raised for a timeout
                    ret = raw(es)
                    if ret == _TIMEOUT:
                        break
                    if ret:
                        raise raw.error(ret)
                    data = raw.data
                elif wait is None:
                    raise AttributeError("the NVML binding has no nvmlEventSetWait")
                else:
                    data = wait(es, 0)
                if int(data.eventType) & XID_EVENT:  # the only type registered; others are not ours
                    self._record(data, now, since)
                    n += 1
            except Exception as e:  # whatever it is, the GPU rows of this sample go on
                code = getattr(e, "value", None)
                if code == _TIMEOUT:
                    break
                if code == _FUNCTION_NOT_FOUND and isinstance(e, self._NVMLError) and len(self._waits) > 1:
                    # an absent _v2 (old driver or binding): the legacy name, once and for all
                    self._waits.pop(0)
                    wait = self._wait_fn = getattr(self.nv, self._waits[0])
                    raw = self._raw = _RawWait.of(self.nv, self._waits[0])
                    continue
                self._stop(f"{self._waits[0] if self._waits else 'nvmlEventSetWait'} failed: "
                           f"{err_text(e)}; XID collection stopped", now, retry=bool(self._waits))
                break
        return n

    def _reopen(self, now: float) -> bool:
        """One try at a new event set after a mid-run stop; True when XIDs are collected again."""
        registered = self._open(now, lambda *a: None)
        if not registered:
            self._retry_s = min(self._retry_s * 2, RETRY_MAX_S)
            self._retry_at = now + self._retry_s
            return False
        self.events.emit("source_available", {
            "source": self.source, "capability": CAPABILITY, "xid_events": registered,
            "resumed_after_s": round(now - self._stopped_at, 3), "stopped_unix": round(self._stopped_at, 3)}, now)
        self._retry_at, self._retry_s, self._kept = None, RETRY_FIRST_S, {}
        return True

    def _gpu_of(self, device):
        g = self._by_key.get(_device_key(device))
        if g is not None:
            return g
        try:  # not the handle registered (another binding's handle type): match by UUID
            uuid = self.nv.nvmlDeviceGetUUID(device)
            uuid = uuid.decode("ascii", "replace") if isinstance(uuid, bytes) else uuid
        except Exception:
            return None
        return next((x for x in self._gpus if x.uuid == uuid and x.index in self.counts), None)

    def _record(self, data, now: float, since: Optional[float]) -> None:
        g = self._gpu_of(data.device)
        count = None
        if g is not None:
            self.counts[g.index] += 1
            count = self.counts[g.index]
        # The event carries no time: it happened after the previous poll (since_unix) and at or
        # before this one (the record's time, the sample's).
        detail = {
            "gpu_index": g.index if g is not None else None, "uuid": g.uuid if g is not None else None,
            "ranks": g.ranks if g is not None else "", "xid": int(data.eventData), "xid_count": count,
            "since_unix": round(since, 3) if since is not None else None}
        # On a MIG GPU the driver names the instance the error hit (0xFFFFFFFF: the whole GPU);
        # only a MIG instance's jobs are affected, so an admin needs it.
        for key, attr in (("gpu_instance_id", "gpuInstanceId"), ("compute_instance_id", "computeInstanceId")):
            value = getattr(data, attr, None)
            if isinstance(value, int) and value != _INSTANCE_ANY:
                detail[key] = value
        self.events.emit("xid", detail, now)

    # -- stopping ----------------------------------------------------------------------------
    def _stop(self, reason: str, now: float, retry: bool) -> None:
        """Stop collecting (cells empty from now on); ``retry``: try a new set later, keeping the
        counts to go on from (not where the binding has no wait function at all)."""
        self._off(reason)
        if retry:
            self._kept, self._stopped_at = dict(self.counts), now
            self._retry_at, self._retry_s = now + RETRY_FIRST_S, RETRY_FIRST_S
        self.counts.clear()
        self._free()

    def _free(self) -> None:
        if self.set is not None:
            try:
                self.nv.nvmlEventSetFree(self.set)
            except Exception:
                pass
            self.set = None

    def close(self) -> None:
        self._free()
