/* A fake libnvidia-ml.so.1 for machines without a GPU: the C functions the GPU sampler reaches
 * through the real nvidia-ml-py (pynvml), answering steady H100-like values.
 *
 * tests/monitors/fake_nvml.py replaces the Python binding itself (scenarios, errors, XIDs); this
 * library keeps the real binding -- its ctypes structs, unions and error mapping -- in the path,
 * so a test sees what pynvml makes of C answers and the monitor bench times the Python side a
 * user pays (pynvml's included) rather than a Python fake's own replay code.
 *
 *   cc -O2 -shared -fPIC -o DIR/libnvidia-ml.so.1 fake_libnvml.c
 *   LD_LIBRARY_PATH=DIR FAKE_LIBNVML_GPUS=8 python -m hpclaunch.monitors ...
 *
 * GPU i: power 300 W + 10 W * i (+0..600 mW by 100 ms step in the buffered samples), energy the
 * exact integral of that power since nvmlInit (plus 1e6 mJ), temperature 45 C + i, memory
 * 40000 of 81559 MiB, utilisation 90 % / 40 %, clocks 1980 / 2619 MHz, limit 700 W, no throttle,
 * thresholds 89 C (slowdown) and 92 C (shutdown). Field ids it does not know answer
 * NVML_ERROR_INVALID_ARGUMENT in their nvmlFieldValue_t, as a driver older than the field does.
 * Field 9998 (no NVML field) is answered (7) in a GPU's first batch only and its entry left unwritten
 * after: a driver that skips an entry, so a test sees whether an earlier call's answer survives.
 * Events: XIDs can be registered; none comes (the wait times out at once) unless FAKE_LIBNVML_XIDS
 * lists some, "WAIT:GPU:XID[:GI],...": the event is answered by the WAIT-th call of the wait (1 is
 * the first), GPU -1 answers that call with error XID instead (999: NVML_ERROR_UNKNOWN), GI the
 * event's gpuInstanceId (default 0xFFFFFFFF, the whole GPU). Built with -DFAKE_NO_WAIT_V2 the
 * library has only the legacy nvmlEventSetWait, as a driver older than MIG.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int nvmlReturn_t;
enum { OK = 0, INVALID_ARGUMENT = 2, NOT_SUPPORTED = 3, NOT_FOUND = 6, TIMEOUT = 10 };
enum { VT_DOUBLE, VT_UINT, VT_ULONG, VT_ULLONG, VT_SLLONG, VT_SINT, VT_USHORT };

typedef union { double d; unsigned int ui; unsigned long ul; unsigned long long ull; long long sll; int si; unsigned short us; } nvmlValue_t;
typedef struct { unsigned int fieldId, scopeId; long long timestamp, latencyUsec; int valueType; nvmlReturn_t nvmlReturn; nvmlValue_t value; } nvmlFieldValue_t;
typedef struct { unsigned long long timeStamp; nvmlValue_t sampleValue; } nvmlSample_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;
typedef struct { unsigned long long referenceTime, violationTime; } nvmlViolationTime_t;
typedef struct { int index; unsigned int batches; } device_t;
typedef device_t *nvmlDevice_t;
typedef struct { nvmlDevice_t device; unsigned long long eventType, eventData; unsigned int gpuInstanceId, computeInstanceId; } nvmlEventData_t;
typedef struct { int unused; } *nvmlEventSet_t;

#define MAX_GPUS 64
static device_t devices[MAX_GPUS];
static unsigned int n_gpus;
static long long t_init_us;

static long long now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000LL + ts.tv_nsec / 1000;
}

static unsigned int power_mw(const device_t *d) { return 300000u + 10000u * (unsigned int)d->index; }

static unsigned long long energy_mj(const device_t *d) {
    return 1000000ULL + (unsigned long long)((now_us() - t_init_us) * (double)power_mw(d) / 1e6);
}

static int bad(nvmlDevice_t d) { return d == NULL || d < devices || d >= devices + n_gpus; }

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    const char *env = getenv("FAKE_LIBNVML_GPUS");
    int n = env ? atoi(env) : 2;
    (void)flags;
    n_gpus = n < 0 ? 0 : (n > MAX_GPUS ? MAX_GPUS : (unsigned int)n);
    for (unsigned int i = 0; i < n_gpus; i++) devices[i].index = (int)i;
    if (!t_init_us) t_init_us = now_us();
    return OK;
}
nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }
nvmlReturn_t nvmlShutdown(void) { return OK; }

const char *nvmlErrorString(nvmlReturn_t r) {
    switch (r) {
    case OK: return "Success";
    case INVALID_ARGUMENT: return "Invalid Argument";
    case NOT_SUPPORTED: return "Not Supported";
    case NOT_FOUND: return "Not Found";
    case TIMEOUT: return "Timeout";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    snprintf(version, length, "550.0-fake");
    return OK;
}
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) { *count = n_gpus; return OK; }
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    if (index >= n_gpus) return INVALID_ARGUMENT;
    *device = &devices[index];
    return OK;
}
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned int length) {
    if (bad(d)) return INVALID_ARGUMENT;
    snprintf(uuid, length, "GPU-fa4e11b0-0000-4000-8000-%012d", d->index);
    return OK;
}

nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t d, int count, nvmlFieldValue_t *values) {
    if (bad(d) || count < 0) return INVALID_ARGUMENT;
    long long t = now_us();
    d->batches++;
    for (int i = 0; i < count; i++) {
        nvmlFieldValue_t *v = &values[i];
        if (v->fieldId == 9998 && d->batches > 1) continue;  /* answered once, then left unwritten */
        v->timestamp = t;
        v->latencyUsec = 0;
        v->nvmlReturn = OK;
        switch (v->fieldId) {
        case 185: case 186: v->valueType = VT_UINT; v->value.ui = power_mw(d); break;  /* power, mW */
        case 83: v->valueType = VT_ULLONG; v->value.ull = energy_mj(d); break;        /* energy, mJ */
        case 82: v->valueType = VT_UINT; v->value.ui = 50 + (unsigned int)d->index; break;  /* memory temp */
        case 9998: v->valueType = VT_UINT; v->value.ui = 7; break;
        case 74: case 75: case 76: case 269: case 270: case 271:                      /* throttle ns */
            v->valueType = VT_ULLONG; v->value.ull = 0; break;
        default: v->nvmlReturn = INVALID_ARGUMENT;
        }
    }
    return OK;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int *mw) {
    if (bad(d)) return INVALID_ARGUMENT;
    *mw = power_mw(d);
    return OK;
}
nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t d, unsigned long long *mj) {
    if (bad(d)) return INVALID_ARGUMENT;
    *mj = energy_mj(d);
    return OK;
}
nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor, unsigned int *temp) {
    if (bad(d) || sensor != 0) return INVALID_ARGUMENT;
    *temp = 45 + (unsigned int)d->index;
    return OK;
}
nvmlReturn_t nvmlDeviceGetTemperatureThreshold(nvmlDevice_t d, int kind, unsigned int *temp) {
    if (bad(d)) return INVALID_ARGUMENT;
    if (kind == 0) *temp = 92;       /* NVML_TEMPERATURE_THRESHOLD_SHUTDOWN */
    else if (kind == 1) *temp = 89;  /* NVML_TEMPERATURE_THRESHOLD_SLOWDOWN */
    else return NOT_SUPPORTED;
    return OK;
}
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m) {
    if (bad(d)) return INVALID_ARGUMENT;
    m->total = 81559ULL << 20;
    m->used = 40000ULL << 20;
    m->free = m->total - m->used;
    return OK;
}
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u) {
    if (bad(d)) return INVALID_ARGUMENT;
    u->gpu = 90;
    u->memory = 40;
    return OK;
}
nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t d, int type, unsigned int *mhz) {
    if (bad(d)) return INVALID_ARGUMENT;
    *mhz = type == 1 ? 1980 : (type == 2 ? 2619 : 1755);  /* SM, MEM, others */
    return OK;
}
nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t d, unsigned int *mw) {
    if (bad(d)) return INVALID_ARGUMENT;
    *mw = 700000;
    return OK;
}
nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t d, unsigned long long *reasons) {
    if (bad(d)) return INVALID_ARGUMENT;
    *reasons = 0;
    return OK;
}
nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t d, unsigned long long *reasons) {
    return nvmlDeviceGetCurrentClocksEventReasons(d, reasons);
}
nvmlReturn_t nvmlDeviceGetViolationStatus(nvmlDevice_t d, int policy, nvmlViolationTime_t *v) {
    if (bad(d)) return INVALID_ARGUMENT;
    (void)policy;
    v->referenceTime = (unsigned long long)now_us();
    v->violationTime = 0;
    return OK;
}
nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t d, int type, int counter, unsigned long long *n) {
    if (bad(d)) return INVALID_ARGUMENT;
    (void)type; (void)counter;
    *n = 0;
    return OK;
}

/* The driver's power-sample ring: a sample every 100 ms, the last 2 s of them, after ``since``. */
nvmlReturn_t nvmlDeviceGetSamples(nvmlDevice_t d, int type, unsigned long long since, int *value_type,
                                  unsigned int *count, nvmlSample_t *samples) {
    if (bad(d) || count == NULL || value_type == NULL) return INVALID_ARGUMENT;
    if (type != 0) return NOT_SUPPORTED;  /* NVML_TOTAL_POWER_SAMPLES only */
    unsigned long long now = (unsigned long long)(now_us() / 100000) * 100000;
    unsigned long long start = since > now - 2000000 ? since : now - 2000000;
    unsigned long long first = (start / 100000 + 1) * 100000;
    unsigned int n = first <= now ? (unsigned int)((now - first) / 100000 + 1) : 0;
    *value_type = VT_UINT;
    if (n == 0) return NOT_FOUND;
    if (samples == NULL) { *count = n; return OK; }
    if (*count < n) n = *count;
    for (unsigned int i = 0; i < n; i++) {
        unsigned long long ts = first + 100000ULL * i;
        samples[i].timeStamp = ts;
        samples[i].sampleValue.ui = power_mw(d) + (unsigned int)(ts / 100000 % 7) * 100;
    }
    *count = n;
    return OK;
}

static struct { int unused; } event_set;
nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) { *set = (nvmlEventSet_t)&event_set; return OK; }
nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t d, unsigned long long *types) {
    if (bad(d)) return INVALID_ARGUMENT;
    *types = 0x1ULL | 0x2ULL | 0x4ULL | 0x8ULL | 0x10ULL;  /* ECC, PState, XID, clock */
    return OK;
}
nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t d, unsigned long long types, nvmlEventSet_t set) {
    (void)types; (void)set;
    return bad(d) ? INVALID_ARGUMENT : OK;
}
static unsigned long wait_calls;
/* The event the n-th wait call answers, from FAKE_LIBNVML_XIDS: 1 (event), -1 (error *err), 0 (none). */
static int queued(unsigned long n, nvmlEventData_t *data, nvmlReturn_t *err) {
    const char *p = getenv("FAKE_LIBNVML_XIDS");
    while (p && *p) {
        unsigned long wait = strtoul(p, (char **)&p, 10);
        long gpu = 0, xid = 0;
        unsigned long gi = 0xFFFFFFFFul;
        if (*p == ':') gpu = strtol(p + 1, (char **)&p, 10);
        if (*p == ':') xid = strtol(p + 1, (char **)&p, 10);
        if (*p == ':') gi = strtoul(p + 1, (char **)&p, 10);
        if (wait == n) {
            if (gpu < 0) { *err = (nvmlReturn_t)xid; return -1; }
            if (gpu >= (long)n_gpus) return 0;
            data->device = &devices[gpu];
            data->eventType = 0x8ULL;
            data->eventData = (unsigned long long)xid;
            data->gpuInstanceId = (unsigned int)gi;
            data->computeInstanceId = 0xFFFFFFFFu;
            return 1;
        }
        while (*p && *p != ',') p++;
        if (*p == ',') p++;
    }
    return 0;
}
static nvmlReturn_t event_wait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeout_ms) {
    nvmlReturn_t err = OK;
    (void)set; (void)timeout_ms;
    switch (queued(++wait_calls, data, &err)) {
    case 1: return OK;
    case -1: return err;
    default: return TIMEOUT;
    }
}
#ifndef FAKE_NO_WAIT_V2
nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeout_ms) {
    return event_wait(set, data, timeout_ms);
}
#endif
nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeout_ms) {
    return event_wait(set, data, timeout_ms);
}
nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) { (void)set; return OK; }
