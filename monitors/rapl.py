"""CPU (and DRAM) energy from Linux powercap RAPL: ``<root>/class/powercap/intel-rapl:*``.

Domains summed (no double counting):

* top-level zones ``intel-rapl:N`` named ``package-N`` (the whole socket: cores,
  uncore, and on some parts the memory controller);
* their sub-zones named ``dram`` (``intel-rapl:N:M``), which packages do not include.

Left out: ``core``/``uncore`` sub-zones (inside the package already) and ``psys``
(the platform zone of some client parts, which includes the packages). AMD's
powercap driver exposes the same ``intel-rapl`` names (package and core only).

``energy_uj`` wraps at ``max_energy_range_uj``; each reading is differenced against
the last and a negative step is corrected by adding the range, so the output is a
monotonic cumulative µJ since the reader started (0 at the first reading). A zone
whose range is unreadable and which steps backwards adds nothing for that step and
is reported (``energy_counter_reset``). Since Linux 5.10 ``energy_uj`` is readable
by root only (CVE-2020-8694): an unreadable file makes the source unavailable with
the OS's reason; the reader never estimates.
"""

from __future__ import annotations

import glob
import os
from typing import Callable, List, Optional


def _read_text(path: str) -> str:
    with open(path, "rb") as f:
        return f.read(4096).decode("ascii", "replace").strip()


class _Zone:
    __slots__ = ("path", "name", "range_uj", "last")

    def __init__(self, path, name, range_uj):
        self.path = path
        self.name = name
        self.range_uj = range_uj
        self.last: Optional[int] = None


class RaplReader:
    name = "rapl"

    def __init__(self, root: str = "/sys", read: Callable[[str], str] = _read_text, events=None):
        self.root = root
        self._read = read
        self.events = events
        self.zones: List[_Zone] = []
        self.available = False
        self.reason: Optional[str] = None
        self.total_uj = 0
        self._failing: Optional[str] = None

    def _emit(self, kind, detail):
        if self.events is not None:
            self.events.emit(kind, detail)

    def start(self) -> bool:
        base = os.path.join(self.root, "class", "powercap")
        if not os.path.isdir(base):
            return self._unavailable(f"{base} does not exist (no powercap/RAPL driver on this node)")
        tops = sorted(p for p in glob.glob(os.path.join(base, "intel-rapl:*"))
                      if os.path.basename(p).count(":") == 1)
        if not tops:
            return self._unavailable(f"no intel-rapl zones under {base}")
        chosen = []
        for top in tops:
            name = self._name(top)
            if name is not None and name.startswith("package"):
                chosen.append((top, name))
                for sub in sorted(glob.glob(top + "/" + os.path.basename(top) + ":*")):
                    sname = self._name(sub)
                    if sname == "dram":
                        chosen.append((sub, f"{name}/dram"))
        if not chosen:
            return self._unavailable(f"no package zone among {[os.path.basename(t) for t in tops]}")
        for path, name in chosen:
            rng = None
            try:
                rng = int(self._read(os.path.join(path, "max_energy_range_uj")))
            except (OSError, ValueError):
                rng = None
            z = _Zone(path, name, rng)
            try:
                z.last = int(self._read(os.path.join(path, "energy_uj")))
            except OSError as e:
                return self._unavailable(f"cannot read {os.path.join(path, 'energy_uj')}: "
                                         f"{e.strerror or e} (errno {e.errno})"
                                         + (" - energy_uj is root-only on Linux >= 5.10"
                                            if e.errno == 13 else ""))
            except ValueError as e:
                return self._unavailable(f"unparsable {os.path.join(path, 'energy_uj')}: {e}")
            self.zones.append(z)
        self.available = True
        self._emit("source_available", {"source": self.name,
                                        "zones": [z.name for z in self.zones],
                                        "paths": [z.path for z in self.zones]})
        return True

    def _name(self, path: str) -> Optional[str]:
        try:
            return self._read(os.path.join(path, "name"))
        except OSError:
            return None

    def _unavailable(self, reason: str) -> bool:
        self.available = False
        self.reason = reason
        self._emit("source_unavailable", {"source": self.name, "reason": reason})
        return False

    def read(self) -> Optional[int]:
        """Cumulative µJ over the chosen zones since start, or None if a zone failed now."""
        if not self.available:
            return None
        for z in self.zones:
            try:
                v = int(self._read(z.path + "/energy_uj"))
            except (OSError, ValueError) as e:
                msg = f"{z.path}/energy_uj: {e}"
                if msg != self._failing:
                    self._failing = msg
                    self._emit("error", {"source": self.name, "error": msg})
                return None  # a partial sum would be a fake number
            d = v - z.last
            if d < 0:
                if z.range_uj:
                    d += z.range_uj
                else:
                    self._emit("energy_counter_reset", {"source": self.name, "zone": z.name,
                                                        "previous_uj": z.last, "now_uj": v})
                    d = 0
            z.last = v
            self.total_uj += d
        self._failing = None
        return self.total_uj
