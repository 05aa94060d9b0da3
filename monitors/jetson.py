"""NVIDIA Jetson boards: INA3221 power rails and thermal zones from sysfs, and a
``tegrastats`` line parser.

Rails (root ``/sys`` by default):

* hwmon layout (L4T r32.5+ / JetPack 5-6):
  ``<root>/bus/i2c/drivers/ina3221/*/hwmon/hwmon*/in<N>_label`` (rail name),
  ``in<N>_input`` (bus voltage, mV), ``curr<N>_input`` (current, mA);
  power = voltage x current / 1000 (mW).
* older iio layout (L4T r32.4 and before, driver ``ina3221x``):
  ``<root>/bus/i2c/drivers/ina3221x/*/iio:device*/rail_name_<N>``,
  ``in_power<N>_input`` (mW), ``in_voltage<N>_input`` (mV), ``in_current<N>_input`` (mA).

Thermal zones: ``<root>/class/thermal/thermal_zone*/type`` and ``temp`` (millidegrees).
Every Linux host has thermal zones, so the source is only active on a Jetson: when
INA3221 rails are found or ``<root>/firmware/devicetree/base/compatible`` names a
Tegra SoC. Rows go to ``<host>.jetson.csv`` in the long format of
``schema.JETSON_COLUMNS`` (one row per sensor per sample), because rail names differ
from board to board.
"""

from __future__ import annotations

import glob
import os
import re
from typing import Callable, Dict, List, Optional, Tuple


def _read_text(path: str) -> str:
    with open(path, "rb") as f:
        return f.read(256).decode("ascii", "replace").strip("\x00 \n\t")


class JetsonReader:
    name = "jetson"

    def __init__(self, root: str = "/sys", read: Callable[[str], str] = _read_text, events=None):
        self.root = root
        self._read = read
        self.events = events
        # (label, power_path or None, voltage_path or None, current_path or None)
        self.rails: List[Tuple[str, Optional[str], Optional[str], Optional[str]]] = []
        self.zones: List[Tuple[str, str]] = []
        self.available = False
        self.reason: Optional[str] = None

    def _emit(self, kind, detail):
        if self.events is not None:
            self.events.emit(kind, detail)

    def _try(self, path: str) -> Optional[str]:
        try:
            return self._read(path)
        except OSError:
            return None

    def scan(self) -> None:
        r = self.root
        rails = []
        for d in sorted(glob.glob(os.path.join(r, "bus/i2c/drivers/ina3221*/*/hwmon/hwmon*"))):
            for lab in sorted(glob.glob(os.path.join(d, "in*_label"))):
                n = re.match(r"in(\d+)_label$", os.path.basename(lab))
                if not n:
                    continue
                label = self._try(lab)
                if not label or label.upper() == "NC":  # unconnected channel
                    continue
                k = n.group(1)
                v = os.path.join(d, f"in{k}_input")
                c = os.path.join(d, f"curr{k}_input")
                rails.append((label, None, v if os.path.exists(v) else None,
                              c if os.path.exists(c) else None))
        for d in sorted(glob.glob(os.path.join(r, "bus/i2c/drivers/ina3221*/*/iio:device*"))):
            for p in sorted(glob.glob(os.path.join(d, "in_power*_input"))):
                n = re.match(r"in_power(\d+)_input$", os.path.basename(p))
                if not n:
                    continue
                k = n.group(1)
                label = self._try(os.path.join(d, f"rail_name_{k}")) or f"{os.path.basename(d)}/ch{k}"
                v = os.path.join(d, f"in_voltage{k}_input")
                c = os.path.join(d, f"in_current{k}_input")
                rails.append((label, p, v if os.path.exists(v) else None,
                              c if os.path.exists(c) else None))
        zones = []
        for z in sorted(glob.glob(os.path.join(r, "class/thermal/thermal_zone*")),
                        key=lambda p: int(re.sub(r"\D", "", os.path.basename(p)) or 0)):
            t = self._try(os.path.join(z, "type"))
            if t is not None and os.path.exists(os.path.join(z, "temp")):
                zones.append((t, os.path.join(z, "temp")))
        self.rails, self.zones = rails, zones

    def is_jetson(self) -> bool:
        if self.rails:
            return True
        compat = self._try(os.path.join(self.root, "firmware/devicetree/base/compatible"))
        return bool(compat) and "tegra" in compat.lower()

    def start(self) -> bool:
        self.scan()
        if not self.is_jetson():
            self.reason = (f"not a Jetson: no INA3221 rails under {self.root}/bus/i2c/drivers "
                           f"and no Tegra devicetree")
            self._emit("source_unavailable", {"source": self.name, "reason": self.reason})
            return False
        self.available = True
        self._emit("source_available", {"source": self.name,
                                        "rails": [x[0] for x in self.rails],
                                        "thermal_zones": [z[0] for z in self.zones]})
        if not self.rails:
            self._emit("source_unavailable", {"source": self.name, "capability": "rails",
                                              "reason": "Tegra board without readable INA3221 rails"})
        return True

    def _num(self, path: Optional[str]) -> Optional[float]:
        if path is None:
            return None
        try:
            return float(self._read(path))
        except (OSError, ValueError):
            return None

    def sample(self, now: float, host: str) -> List[tuple]:
        rows = []
        for label, p, v, c in self.rails:
            mv, ma = self._num(v), self._num(c)
            mw = self._num(p)
            if mw is None and mv is not None and ma is not None:
                mw = mv * ma / 1000.0
            rows.append((now, host, "rail", label, mw, mv, ma, None))
        for t, path in self.zones:
            mc = self._num(path)
            temp = mc / 1000.0 if mc is not None and mc > -200000 else None  # -256 C = offline
            rows.append((now, host, "thermal", t, None, None, None, temp))
        return rows


_RAIL = re.compile(r"\b([A-Z][A-Z0-9_]*)\s+(\d+)(?:mW)?/(\d+)(?:mW)?\b")
_TEMP = re.compile(r"\b([A-Za-z][\w]*)@(-?\d+(?:\.\d+)?)C\b")
_RAM = re.compile(r"\bRAM\s+(\d+)/(\d+)MB\b")
_GR3D = re.compile(r"\bGR3D_FREQ\s+(\d+)%")


def parse_tegrastats(line: str) -> Dict[str, object]:
    """Parse one ``tegrastats`` line.

    Returns ``{"rails": {name: (now_mw, avg_mw)}, "temps": {name: celsius},
    "ram_used_mib": int|None, "ram_total_mib": int|None, "gr3d_pct": int|None}``.
    Rails are ``NAME <now>mW/<avg>mW`` (JetPack 5+) or ``NAME <now>/<avg>`` (older, mW).
    A temperature of -256 C or below is tegrastats' "sensor offline" and is left out.
    """
    rails = {}
    for m in _RAIL.finditer(line):
        name = m.group(1)
        if name in ("RAM", "SWAP", "IRAM", "LFB"):
            continue
        rails[name] = (int(m.group(2)), int(m.group(3)))
    temps = {}
    for m in _TEMP.finditer(line):
        v = float(m.group(2))
        if v > -200:
            temps[m.group(1)] = v
    ram = _RAM.search(line)
    gr3d = _GR3D.search(line)
    return {
        "rails": rails,
        "temps": temps,
        "ram_used_mib": int(ram.group(1)) if ram else None,
        "ram_total_mib": int(ram.group(2)) if ram else None,
        "gr3d_pct": int(gr3d.group(1)) if gr3d else None,
    }
