"""CPU temperature: hwmon sysfs (cheap, chosen at start) or psutil.sensors_temperatures().

:class:`HwmonReader` lists ``<root>/class/hwmon/hwmon*/name`` once, keeps the
``temp*_input`` files (millidegrees C) of CPU chips (coretemp, k10temp, zenpower,
cpu_thermal, ...) with their ``temp*_label``, and afterwards reads only those files.
:class:`CpuTemp` is what the daemon uses: hwmon first; else psutil (which rescans
hwmon on every call, so it costs more) if it sees a CPU chip; else unavailable, with
the reason. The host row's ``cpu_temp_c`` is the hottest CPU sensor.
"""

from __future__ import annotations

import glob
import os
from typing import Callable, Dict, List, Optional, Tuple

CPU_CHIPS = ("coretemp", "k10temp", "zenpower", "cpu_thermal", "cpu-thermal", "cputemp",
             "soc_thermal", "nvidia_grace_thermal")


def _read_text(path: str) -> str:
    with open(path, "rb") as f:
        return f.read(256).decode("ascii", "replace").strip()


class HwmonReader:
    """All hwmon temperature sensors under ``root``; :meth:`read` returns °C per sensor."""

    def __init__(self, root: str = "/sys", read: Callable[[str], str] = _read_text,
                 chips: Optional[Tuple[str, ...]] = None):
        self.root = root
        self._read = read
        self.chips = chips
        self.sensors: List[Tuple[str, str, str]] = []  # (chip, label, temp*_input path)
        self.reason: Optional[str] = None

    def scan(self) -> int:
        base = os.path.join(self.root, "class", "hwmon")
        if not os.path.isdir(base):
            self.reason = f"{base} does not exist (no hwmon driver on this node)"
            return 0
        found = []
        for d in sorted(glob.glob(os.path.join(base, "hwmon*"))):
            try:
                chip = self._read(os.path.join(d, "name"))
            except OSError:
                continue
            if self.chips is not None and chip not in self.chips:
                continue
            for inp in sorted(glob.glob(os.path.join(d, "temp*_input"))):
                stem = os.path.basename(inp)[: -len("_input")]
                try:
                    label = self._read(os.path.join(d, stem + "_label"))
                except OSError:
                    label = stem
                found.append((chip, label, inp))
        self.sensors = found
        if not found:
            self.reason = (f"no temperature sensor of a CPU chip {self.chips} under {base}"
                           if self.chips else f"no temp*_input under {base}")
        return len(found)

    def read(self) -> Dict[str, float]:
        out = {}
        for chip, label, path in self.sensors:
            try:
                out[f"{chip}/{label}"] = int(self._read(path)) / 1000.0
            except (OSError, ValueError):
                continue  # a sensor that fails now is left out, not guessed
        return out


class CpuTemp:
    name = "cpu_temp"

    def __init__(self, root: str = "/sys", psutil_mod=None, events=None,
                 read: Callable[[str], str] = _read_text):
        self.hwmon = HwmonReader(root, read, CPU_CHIPS)
        self._psutil = psutil_mod
        self.events = events
        self.mode: Optional[str] = None
        self.reason: Optional[str] = None

    def _emit(self, kind, detail):
        if self.events is not None:
            self.events.emit(kind, detail)

    def start(self) -> bool:
        if self.hwmon.scan():
            self.mode = "hwmon"
            self._emit("source_available", {"source": self.name, "via": "hwmon",
                                            "sensors": [f"{c}/{l}" for c, l, _ in self.hwmon.sensors]})
            return True
        reasons = [self.hwmon.reason]
        if self._start_psutil(reasons):
            return True
        self.reason = "; ".join(reasons)
        self._emit("source_unavailable", {"source": self.name, "reason": self.reason})
        return False

    def _start_psutil(self, reasons: List[str]) -> bool:
        ps = self._psutil
        if ps is None and not self._psutil_could_find():
            # psutil reads the same hwmon tree, then the thermal zones: with neither there it finds
            # nothing, and importing it would cost the daemon's start-up ~10 ms for that.
            reasons.append(f"no thermal zone under {os.path.join(self.hwmon.root, 'class', 'thermal')} "
                           "either: psutil.sensors_temperatures would find none")
            return False
        if ps is None:
            try:
                import psutil as ps  # noqa: WPS433
            except ImportError:
                ps = None
        fn = getattr(ps, "sensors_temperatures", None) if ps is not None else None
        if fn is None:
            reasons.append("psutil.sensors_temperatures is not offered on this platform")
            return False
        try:
            temps = fn()
        except Exception as e:  # psutil raises on odd sysfs content
            temps = {}
            reasons.append(f"psutil.sensors_temperatures failed: {e}")
        cpu = [k for k in temps if k in CPU_CHIPS]
        if cpu:
            self.mode = "psutil"
            self._psutil = ps
            self._emit("source_available", {"source": self.name, "via": "psutil", "chips": cpu})
            return True
        reasons.append(f"psutil.sensors_temperatures() found no CPU chip (got {sorted(temps)})")
        return False

    def _psutil_could_find(self) -> bool:
        """Whether what psutil.sensors_temperatures reads on Linux is there at all."""
        root = self.hwmon.root
        return os.path.isdir(os.path.join(root, "class", "hwmon")) or bool(
            glob.glob(os.path.join(root, "class", "thermal", "thermal_zone*"))
            or glob.glob(os.path.join(root, "devices", "platform", "coretemp.*")))

    def read(self) -> Optional[float]:
        """Hottest CPU sensor in °C, or None."""
        if self.mode == "hwmon":
            vals = self.hwmon.read()
            return max(vals.values()) if vals else None
        if self.mode == "psutil":
            try:
                temps = self._psutil.sensors_temperatures()
            except Exception:
                return None
            vals = [s.current for k, ss in temps.items() if k in CPU_CHIPS for s in ss
                    if s.current is not None]
            return max(vals) if vals else None
        return None
