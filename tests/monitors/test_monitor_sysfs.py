"""RAPL, hwmon and Jetson readers against fake sysfs trees in tmp_path, and for real on
this machine (no /sys/class/powercap, no /sys/class/hwmon: the stated reason)."""

import errno
import os
import socket

import pytest

from hpclaunch.monitors.jetson import JetsonReader, parse_tegrastats
from hpclaunch.monitors.rapl import RaplReader
from hpclaunch.monitors.thermal import CpuTemp, HwmonReader


def put(root, rel, text):
    p = os.path.join(str(root), rel)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "w") as f:
        f.write(f"{text}\n")
    return p


def rapl_tree(root, pkg=1000, dram=500, rng=262143328850):
    base = "class/powercap"
    put(root, f"{base}/intel-rapl:0/name", "package-0")
    put(root, f"{base}/intel-rapl:0/energy_uj", pkg)
    put(root, f"{base}/intel-rapl:0/max_energy_range_uj", rng)
    put(root, f"{base}/intel-rapl:0/intel-rapl:0:0/name", "core")
    put(root, f"{base}/intel-rapl:0/intel-rapl:0:0/energy_uj", 777)
    put(root, f"{base}/intel-rapl:0/intel-rapl:0:1/name", "dram")
    put(root, f"{base}/intel-rapl:0/intel-rapl:0:1/energy_uj", dram)
    put(root, f"{base}/intel-rapl:0/intel-rapl:0:1/max_energy_range_uj", rng)
    put(root, f"{base}/intel-rapl:1/name", "psys")
    put(root, f"{base}/intel-rapl:1/energy_uj", 99999)
    return os.path.join(str(root), base)


# ---------------------------------------------------------------- RAPL
def test_rapl_sums_package_and_dram_only(tmp_path, events):
    base = rapl_tree(tmp_path)
    r = RaplReader(str(tmp_path), events=events)
    assert r.start()
    assert events.of("source_available")[0]["zones"] == ["package-0", "package-0/dram"]
    assert r.read() == 0
    put(tmp_path, "class/powercap/intel-rapl:0/energy_uj", 1600)
    put(tmp_path, "class/powercap/intel-rapl:0/intel-rapl:0:0/energy_uj", 10 ** 9)  # core: ignored
    put(tmp_path, "class/powercap/intel-rapl:1/energy_uj", 10 ** 9)                 # psys: ignored
    put(tmp_path, "class/powercap/intel-rapl:0/intel-rapl:0:1/energy_uj", 700)
    assert r.read() == 600 + 200
    assert os.path.isdir(base)


def test_rapl_wrap_around_is_corrected_and_monotonic(tmp_path, events):
    rng = 1_000_000
    rapl_tree(tmp_path, pkg=999_000, dram=10, rng=rng)
    r = RaplReader(str(tmp_path), events=events)
    assert r.start()
    r.read()
    put(tmp_path, "class/powercap/intel-rapl:0/energy_uj", 4_000)  # wrapped past the range
    assert r.read() == (rng - 999_000) + 4_000
    put(tmp_path, "class/powercap/intel-rapl:0/energy_uj", 6_000)
    assert r.read() == 5_000 + 2_000
    assert not events.of("energy_counter_reset")


def test_rapl_backwards_without_range_is_a_reset_event_not_a_guess(tmp_path, events):
    rapl_tree(tmp_path, pkg=5000)
    os.remove(tmp_path / "class/powercap/intel-rapl:0/max_energy_range_uj")
    r = RaplReader(str(tmp_path), events=events)
    assert r.start()
    put(tmp_path, "class/powercap/intel-rapl:0/energy_uj", 100)
    assert r.read() == 0
    assert events.of("energy_counter_reset")[0]["zone"] == "package-0"


def test_rapl_permission_denied_is_reported_with_the_reason(tmp_path, events):
    # chmod 000 does not stop root, so the reader's file read is injected and raises the
    # same PermissionError the kernel gives a non-root reader of energy_uj (Linux >= 5.10).
    rapl_tree(tmp_path)

    def read(path):
        if path.endswith("energy_uj"):
            raise PermissionError(errno.EACCES, "Permission denied", path)
        with open(path) as f:
            return f.read().strip()
    r = RaplReader(str(tmp_path), read=read, events=events)
    assert not r.start()
    reason = events.of("source_unavailable")[0]["reason"]
    assert "Permission denied" in reason and "errno 13" in reason and "root-only" in reason
    assert r.read() is None


def test_rapl_unreadable_file_for_real_directory_in_place(tmp_path, events):
    rapl_tree(tmp_path)
    p = tmp_path / "class/powercap/intel-rapl:0/energy_uj"
    os.remove(p)
    os.mkdir(p)  # a real OS error even as root: EISDIR
    r = RaplReader(str(tmp_path), events=events)
    assert not r.start()
    assert f"errno {errno.EISDIR}" in events.of("source_unavailable")[0]["reason"]


def test_rapl_unreadable_file_for_real_socket_in_place(tmp_path, events):
    rapl_tree(tmp_path)
    p = str(tmp_path / "class/powercap/intel-rapl:0/energy_uj")
    os.remove(p)
    if len(p) > 100:
        pytest.skip("unix socket path too long")
    s = socket.socket(socket.AF_UNIX)
    s.bind(p)  # opening a socket file: ENXIO, even as root
    try:
        r = RaplReader(str(tmp_path), events=events)
        assert not r.start()
        assert f"errno {errno.ENXIO}" in events.of("source_unavailable")[0]["reason"]
    finally:
        s.close()


def test_rapl_failing_mid_run_gives_empty_not_partial(tmp_path, events):
    rapl_tree(tmp_path)
    r = RaplReader(str(tmp_path), events=events)
    assert r.start()
    os.remove(tmp_path / "class/powercap/intel-rapl:0/intel-rapl:0:1/energy_uj")
    assert r.read() is None
    assert r.read() is None
    assert len(events.of("error")) == 1  # said once


def test_rapl_absent_here_for_real(events):
    r = RaplReader(events=events)
    if os.path.isdir("/sys/class/powercap"):
        pytest.skip("this machine has powercap")
    assert not r.start()
    assert events.of("source_unavailable")[0]["reason"] == \
        "/sys/class/powercap does not exist (no powercap/RAPL driver on this node)"


# ---------------------------------------------------------------- hwmon / CPU temperature
def hwmon_tree(root):
    put(root, "class/hwmon/hwmon0/name", "nvme")
    put(root, "class/hwmon/hwmon0/temp1_input", 38850)
    put(root, "class/hwmon/hwmon1/name", "coretemp")
    put(root, "class/hwmon/hwmon1/temp1_input", 52000)
    put(root, "class/hwmon/hwmon1/temp1_label", "Package id 0")
    put(root, "class/hwmon/hwmon1/temp2_input", 61500)
    put(root, "class/hwmon/hwmon1/temp2_label", "Core 0")
    put(root, "class/hwmon/hwmon2/name", "k10temp")
    put(root, "class/hwmon/hwmon2/temp1_input", 47125)


def test_hwmon_reader_reads_labels_and_millidegrees(tmp_path):
    hwmon_tree(tmp_path)
    h = HwmonReader(str(tmp_path))
    assert h.scan() == 4
    assert h.read() == {"nvme/temp1": 38.85, "coretemp/Package id 0": 52.0,
                        "coretemp/Core 0": 61.5, "k10temp/temp1": 47.125}


def test_cpu_temp_is_the_hottest_cpu_sensor(tmp_path, events):
    hwmon_tree(tmp_path)
    t = CpuTemp(str(tmp_path), events=events)
    assert t.start() and t.mode == "hwmon"
    assert t.read() == 61.5  # nvme is not a CPU chip
    os.remove(tmp_path / "class/hwmon/hwmon1/temp2_input")
    assert t.read() == 52.0  # a sensor that fails is left out, not guessed


def test_cpu_temp_falls_back_to_psutil(tmp_path, events):
    class S:
        def __init__(self, c):
            self.current = c

    class FakePsutil:
        @staticmethod
        def sensors_temperatures():
            return {"acpitz": [S(99.0)], "k10temp": [S(48.0), S(50.5)]}
    t = CpuTemp(str(tmp_path), psutil_mod=FakePsutil, events=events)
    assert t.start() and t.mode == "psutil"
    assert t.read() == 50.5


def test_cpu_temp_absent_here_for_real(events):
    if os.path.isdir("/sys/class/hwmon"):
        pytest.skip("this machine has hwmon")
    t = CpuTemp(events=events)
    assert not t.start()
    reason = events.of("source_unavailable")[0]["reason"]
    assert "/sys/class/hwmon does not exist" in reason and "psutil" in reason
    assert t.read() is None


# ---------------------------------------------------------------- Jetson
def test_jetson_hwmon_layout_and_thermal_zones(tmp_path, events):
    d = "bus/i2c/drivers/ina3221/1-0040/hwmon/hwmon3"
    put(tmp_path, f"{d}/in1_label", "VDD_IN")
    put(tmp_path, f"{d}/in1_input", 5080)
    put(tmp_path, f"{d}/curr1_input", 1200)
    put(tmp_path, f"{d}/in2_label", "VDD_CPU_GPU_CV")
    put(tmp_path, f"{d}/in2_input", 5072)
    put(tmp_path, f"{d}/curr2_input", 400)
    put(tmp_path, f"{d}/in3_label", "NC")
    put(tmp_path, "class/thermal/thermal_zone0/type", "cpu-thermal")
    put(tmp_path, "class/thermal/thermal_zone0/temp", 47500)
    put(tmp_path, "class/thermal/thermal_zone10/type", "tj-thermal")
    put(tmp_path, "class/thermal/thermal_zone10/temp", 48000)
    put(tmp_path, "class/thermal/thermal_zone2/type", "gpu-thermal")
    put(tmp_path, "class/thermal/thermal_zone2/temp", -256000)  # offline sensor
    j = JetsonReader(str(tmp_path), events=events)
    assert j.start()
    rows = j.sample(1.0, "orin")
    assert rows == [
        (1.0, "orin", "rail", "VDD_IN", 6096.0, 5080.0, 1200.0, None),
        (1.0, "orin", "rail", "VDD_CPU_GPU_CV", 2028.8, 5072.0, 400.0, None),
        (1.0, "orin", "thermal", "cpu-thermal", None, None, None, 47.5),
        (1.0, "orin", "thermal", "gpu-thermal", None, None, None, None),
        (1.0, "orin", "thermal", "tj-thermal", None, None, None, 48.0),
    ]


def test_jetson_old_iio_layout(tmp_path, events):
    d = "bus/i2c/drivers/ina3221x/6-0040/iio:device0"
    put(tmp_path, f"{d}/rail_name_0", "VDD_SYS_GPU")
    put(tmp_path, f"{d}/in_power0_input", 1523)
    put(tmp_path, f"{d}/in_voltage0_input", 19000)
    put(tmp_path, f"{d}/in_current0_input", 80)
    put(tmp_path, f"{d}/rail_name_1", "VDD_SYS_SOC")
    put(tmp_path, f"{d}/in_power1_input", 761)
    j = JetsonReader(str(tmp_path), events=events)
    assert j.start()
    assert j.sample(2.0, "tx2") == [
        (2.0, "tx2", "rail", "VDD_SYS_GPU", 1523.0, 19000.0, 80.0, None),
        (2.0, "tx2", "rail", "VDD_SYS_SOC", 761.0, None, None, None),
    ]


def test_not_a_jetson_here_for_real(events):
    j = JetsonReader(events=events)
    if os.path.isdir("/sys/bus/i2c/drivers/ina3221"):
        pytest.skip("this is a Jetson")
    assert not j.start()
    assert "not a Jetson" in events.of("source_unavailable")[0]["reason"]


def test_tegra_devicetree_without_rails_is_a_jetson(tmp_path, events):
    put(tmp_path, "firmware/devicetree/base/compatible", "nvidia,p3737-0000\x00nvidia,tegra234")
    put(tmp_path, "class/thermal/thermal_zone0/type", "cpu-thermal")
    put(tmp_path, "class/thermal/thermal_zone0/temp", 40000)
    j = JetsonReader(str(tmp_path), events=events)
    assert j.start()
    assert [d.get("capability") for d in events.of("source_unavailable")] == ["rails"]


ORIN = ("11-22-2026 02:40:01 RAM 2048/7772MB (lfb 2x4MB) SWAP 0/3886MB (cached 0MB) "
        "CPU [12%@1190,8%@1190,off,off,3%@729,0%@729] EMC_FREQ 0% GR3D_FREQ 45% "
        "cpu@47.5C soc2@45.1C soc0@45.4C gpu@46.8C tj@48C soc1@44.9C "
        "VDD_GPU_SOC 2794mW/2794mW VDD_CPU_CV 397mW/397mW VIN_SYS_5V0 3126mW/3126mW")
NANO = ("RAM 1521/3956MB (lfb 118x4MB) SWAP 0/1978MB (cached 0MB) IRAM 0/252kB(lfb 252kB) "
        "CPU [9%@102,5%@102,4%@102,3%@102] EMC_FREQ 3%@1600 GR3D_FREQ 0%@76 APE 25 "
        "PLL@31C CPU@33.5C PMIC@100C GPU@33C AO@40.5C thermal@33.25C iwlwifi@-256C "
        "POM_5V_IN 1308/1308 POM_5V_GPU 40/40 POM_5V_CPU 164/164")


def test_tegrastats_orin_line():
    p = parse_tegrastats(ORIN)
    assert p["rails"] == {"VDD_GPU_SOC": (2794, 2794), "VDD_CPU_CV": (397, 397),
                          "VIN_SYS_5V0": (3126, 3126)}
    assert p["temps"]["cpu"] == 47.5 and p["temps"]["gpu"] == 46.8 and p["temps"]["tj"] == 48.0
    assert p["ram_used_mib"] == 2048 and p["ram_total_mib"] == 7772 and p["gr3d_pct"] == 45


def test_tegrastats_nano_line_old_units_and_offline_sensor():
    p = parse_tegrastats(NANO)
    assert p["rails"] == {"POM_5V_IN": (1308, 1308), "POM_5V_GPU": (40, 40), "POM_5V_CPU": (164, 164)}
    assert "iwlwifi" not in p["temps"] and p["temps"]["CPU"] == 33.5 and p["temps"]["thermal"] == 33.25
    assert p["gr3d_pct"] == 0


def test_tegrastats_short_lines():
    assert parse_tegrastats("VDD_GPU_SOC 2794mW/2794mW VDD_CPU_CV 397mW/397mW VIN_SYS_5V0 3126mW/3126mW")[
        "rails"]["VIN_SYS_5V0"] == (3126, 3126)
    assert parse_tegrastats("cpu@47.5C gpu@46.8C")["temps"] == {"cpu": 47.5, "gpu": 46.8}
    assert parse_tegrastats("") == {"rails": {}, "temps": {}, "ram_used_mib": None,
                                    "ram_total_mib": None, "gr3d_pct": None}
