"""The monitor log contract: file names, schema versions and columns.

Producers (the daemon) and consumers (reports, users' scripts) both import this
module, so a column is named in exactly one place. Any change that removes or
renames a column bumps the version; adding a column at the end does not.

Each CSV file starts with one comment line, ``# schema=<name>/<version>``, then a
header line, then rows. An empty cell means "not measured" (never zero). A row
counts only if its line ends in a newline: a killed writer can leave a partial
last line, and one cut inside its last cell has the right cell count and a wrong
value. Readers must also skip any line whose cell count differs from the
header's (a restarted writer pads a partial line it finds so that it does).
"""

GPU_SCHEMA = "hpclaunch.monitor.gpu/1"
HOST_SCHEMA = "hpclaunch.monitor.host/1"
EVENTS_SCHEMA = "hpclaunch.monitor.events/1"
POWER_TRACE_SCHEMA = "hpclaunch.monitor.power_trace/1"

MONITOR_DIR = "monitor"

GPU_COLUMNS = (
    "time_unix",          # float seconds since the epoch, sample time
    "host",
    "gpu_index",          # NVML index on this host
    "gpu_uuid",
    "ranks",              # global ranks using this GPU, ';'-separated ("" if none known)
    "power_w",            # instantaneous (or driver-averaged) board power
    "power_avg_w",        # driver's 1 s average where it differs from power_w
    "energy_mj",          # total-energy counter since driver load (Volta+), empty if unavailable
    "temp_c",             # GPU core temperature
    "mem_temp_c",         # HBM temperature where available
    "mem_used_mib",
    "mem_total_mib",
    "util_pct",           # GPU utilisation (coarse, NVML)
    "mem_util_pct",
    "sm_clock_mhz",
    "mem_clock_mhz",
    "power_limit_w",      # enforced power limit
    "throttle_reasons",   # current clocks-event-reasons bitmask (integer)
    "slowdown_temp_c",
    "shutdown_temp_c",
    "viol_power_ns",      # cumulative time throttled by power capping (NVML violation counter)
    "viol_thermal_ns",    # cumulative time throttled by thermal limits
    "ecc_dbe_total",      # aggregate double-bit ECC errors, where cheap
    "error",              # empty, or the reason this GPU's row has no measurements
    # Added after "error" (appended: same version, old readers and old files still work).
    # Cumulative time held down per clocks-event reason, ns (NVML field values
    # NVML_FI_DEV_CLOCKS_EVENT_REASON_*); empty where the driver does not offer them.
    "throttle_sw_power_cap_ns",
    "throttle_sync_boost_ns",
    "throttle_sw_thermal_slowdown_ns",
    "throttle_hw_thermal_slowdown_ns",
    "throttle_hw_power_brake_slowdown_ns",
    # Appended after those (same version). XID errors (NVML's XidCriticalError events) this GPU
    # raised since the daemon started: restarts at 0 with each daemon start, like rapl_energy_uj.
    # Empty where the driver offers no XID events for it, or after the event set failed. Each XID
    # is also an "xid" event with its code.
    "xid_count",
)

HOST_COLUMNS = (
    "time_unix",
    "host",
    "cpu_pct",            # whole-host CPU utilisation over the last interval
    "mem_used_mib",
    "mem_total_mib",
    "load1",
    "rapl_energy_uj",     # sum over RAPL package/dram domains, wrap-corrected, monotonic; empty if unavailable
    "cpu_temp_c",         # hottest CPU package/core sensor, empty if unavailable
    "monitor_cpu_s",      # the monitor's own cumulative CPU time (user+system)
    "monitor_rss_mib",    # the monitor's own resident memory
)

POWER_TRACE_COLUMNS = (
    "time_unix",          # from the driver's sample timestamp
    "host",
    "gpu_index",
    "power_w",
)

# Throttle (clocks event) reason bits, from NVML's header.
THROTTLE_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


# THROTTLE_REASONS name -> the GPU column with that reason's cumulative time (ns).
THROTTLE_COUNTER_COLUMNS = {
    "sw_power_cap": "throttle_sw_power_cap_ns",
    "sync_boost": "throttle_sync_boost_ns",
    "sw_thermal_slowdown": "throttle_sw_thermal_slowdown_ns",
    "hw_thermal_slowdown": "throttle_hw_thermal_slowdown_ns",
    "hw_power_brake_slowdown": "throttle_hw_power_brake_slowdown_ns",
}


def header_comment(schema: str) -> str:
    return f"# schema={schema}\n"


def gpu_file(host: str) -> str:
    return f"{host}.gpu.csv"


def host_file(host: str) -> str:
    return f"{host}.host.csv"


def events_file(host: str) -> str:
    return f"{host}.events.jsonl"


def power_trace_file(host: str) -> str:
    return f"{host}.power_trace.csv"


# --- added with the per-node sampler daemon (monitors/daemon.py) -------------------

JETSON_SCHEMA = "hpclaunch.monitor.jetson/1"

# Long format: one row per sensor per sample, because rail names are board-specific
# (VDD_GPU_SOC, VDD_CPU_CV, VIN_SYS_5V0, POM_5V_GPU, ...). Cells that do not apply
# to a sensor's kind are empty.
JETSON_COLUMNS = (
    "time_unix",
    "host",
    "kind",               # "rail" (INA3221 power monitor channel) or "thermal" (thermal zone)
    "sensor",             # rail label or thermal-zone type, as the board names it
    "power_mw",           # rail power (driver's in_power, or voltage x current)
    "voltage_mv",         # rail bus voltage
    "current_ma",         # rail current
    "temp_c",             # thermal-zone temperature
)

# The ``kind`` values of ``<host>.events.jsonl`` records.
EVENT_KINDS = (
    "header",             # first record of each daemon start: schema, interval, GPU-to-rank map
    "source_available",
    "source_unavailable",
    "nvml_error",
    "energy_counter_reset",
    "throttle_counter_reset",  # a cumulative throttle-time counter (viol_*_ns, throttle_*_ns) went backwards
    "throttle_start",
    "throttle_stop",
    "thermal_margin_low",
    "xid",                # an XID error (the driver's error report) on a sampled GPU: code, GPU, ranks
    "disk_full",
    "disk_write_recovered",  # writes to a file succeed again after a failure streak
    "error",              # an unexpected exception in a source, logged once per distinct message
    "monitor_stats",
    "stopped",
)


RANKS_SCHEMA = "hpclaunch.monitor.ranks/1"

# One row per rank of this node every monitors/rank_progress.EVERY_S seconds (docs/monitor-logs.md).
RANKS_COLUMNS = (
    "time_unix",
    "host",
    "attempt",            # HPCLAUNCH_ATTEMPT: the rows of several attempts share the file
    "rank",               # global rank, from logs/attempt<N>/ranks.tsv
    "pid",                # the rank's process (the program the wrapper exec'd)
    "cpu_s",              # its CPU time, user+system, with its reaped children's; empty once it ended
    "log_bytes",          # the size of logs/attempt<N>/rank<R>.log
    "sockets",            # how many sockets (network or local) the rank's process holds open; empty once it ended
)


def ranks_file(host: str) -> str:
    return f"{host}.ranks.csv"


def jetson_file(host: str) -> str:
    return f"{host}.jetson.csv"


def prometheus_port_file(host: str) -> str:
    """The port this node's Prometheus exporter serves on (``--prometheus-port``), one line."""
    return f"{host}.prometheus.port"
