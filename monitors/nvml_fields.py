"""NVML's field ids and return codes as the GPU sampler (monitors/nvml.py) uses them, and the
members of an ``nvmlValue_t`` by value type. Kept here so a fake binding need not define them all."""

# Field ids (nvml.h).
FI_MEMORY_TEMP = 82
FI_TOTAL_ENERGY = 83
FI_POWER_AVERAGE = 185
FI_POWER_INSTANT = 186
FI_PERF_POWER = 74       # = nvmlDeviceGetViolationStatus(NVML_PERF_POLICY_POWER), in the batch
FI_PERF_THERMAL = 75     # = nvmlDeviceGetViolationStatus(NVML_PERF_POLICY_THERMAL)
# Cumulative time (ns) the clocks were held down per reason: NVML_FI_DEV_CLOCKS_EVENT_REASON_*
# (74 and 76 are the perf-policy counters NVML_FI_DEV_PERF_POLICY_POWER / _SYNC_BOOST).
# Exact between samples, unlike the instantaneous bitmask; they ride in the same batch.
REASON_FIELDS = {
    74: "sw_power_cap",
    76: "sync_boost",
    269: "sw_thermal_slowdown",
    270: "hw_thermal_slowdown",
    271: "hw_power_brake_slowdown",
}

# Cumulative counters costly to read (see the module docstring): every counter_every_s only.
COUNTER_FIELDS = frozenset({FI_TOTAL_ENERGY, FI_PERF_THERMAL, 270, 271})

# Error codes that mean "this capability is not there": skip it from then on.
NOT_THERE = {3, 4, 13}  # NOT_SUPPORTED, NO_PERMISSION, FUNCTION_NOT_FOUND
# A field id the driver does not know (one older than the field) answers INVALID_ARGUMENT in
# its nvmlFieldValue_t rather than NOT_SUPPORTED: for a field, that is "not there" too.
FIELD_NOT_THERE = NOT_THERE | {2}

# Throttle bits that mean the clocks were really held down (not idle/app/display settings).
THROTTLE_MASK = 0x4 | 0x8 | 0x20 | 0x40 | 0x80


# The member of NVML's value union that holds a value of each nvmlValueType_t (0..6).
VALUE_MEMBERS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")
