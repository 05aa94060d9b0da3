/* floor.py's "wake" and "host" modes in C, run beside them (bench/monitor/daemons.py): what
 * waking on the daemon's grid, and the host row's syscalls, cost a process with no interpreter.
 * Python's share of a floor is its figure over this one's, from the same rounds.
 *
 *   cc -O2 -o floor-c floor.c && ./floor-c MODE SECONDS INTERVAL DIR
 *
 * Prints {"mode": "c-MODE", "ticks", "cpu_s_per_sample"} as JSON, CPU from after set-up. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double clock_s(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc != 5 || (strcmp(argv[1], "wake") && strcmp(argv[1], "host"))) {
        fprintf(stderr, "usage: floor-c wake|host SECONDS INTERVAL DIR\n");
        return 2;
    }
    int host = !strcmp(argv[1], "host");
    double seconds = atof(argv[2]), interval = atof(argv[3]);
    int st = open("/proc/stat", O_RDONLY), mi = open("/proc/meminfo", O_RDONLY),
        sm = open("/proc/self/statm", O_RDONLY);
    char path[4096], buf[512], line[100];
    snprintf(path, sizeof path, "%s/floor-c-%s.csv", argv[4], argv[1]);
    int out = open(path, O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (st < 0 || mi < 0 || sm < 0 || out < 0) {
        perror("floor-c: open");
        return 1;
    }
    memset(line, 'x', sizeof line - 1);
    line[sizeof line - 1] = '\n';
    double cpu0 = clock_s(CLOCK_PROCESS_CPUTIME_ID), t0 = clock_s(CLOCK_MONOTONIC), load[3];
    long k = 0;
    for (;;) {
        if (host) {  /* what floor.py's "host" does, call for call */
            if (pread(st, buf, 512, 0) < 0 || pread(mi, buf, 256, 0) < 0 || pread(sm, buf, 128, 0) < 0)
                return 1;
            getloadavg(load, 3);
            clock_s(CLOCK_PROCESS_CPUTIME_ID);
            if (write(out, line, sizeof line) < 0)
                return 1;
        }
        k++;
        double nxt = t0 + k * interval;
        if (nxt - t0 >= seconds - 1e-9)
            break;
        double wait = nxt - clock_s(CLOCK_MONOTONIC);
        poll(NULL, 0, wait > 0 ? (int)(wait * 1000.0 + 0.5) : 0);
    }
    printf("{\"mode\": \"c-%s\", \"ticks\": %ld, \"cpu_s_per_sample\": %.9f}\n", argv[1], k,
           (clock_s(CLOCK_PROCESS_CPUTIME_ID) - cpu0) / k);
    return 0;
}
