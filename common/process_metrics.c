#include "common/process_metrics.h"

#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Fields 14, 15 (utime, stime, in clock ticks), 20 (threads), 22 (start
 * time, ticks after boot) and 23 (vsize, bytes) of /proc/self/stat. */
static bool read_stat(double *cpu_s, double *threads, double *start_ticks, double *vsize) {
    FILE *f = fopen("/proc/self/stat", "r");
    if (!f)
        return false;
    char buf[1024];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the command may hold spaces */
    unsigned long long utime, stime, start, vs;
    long nthreads;
    if (!p || sscanf(p + 2,
                     "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d %ld "
                     "%*d %llu %llu",
                     &utime, &stime, &nthreads, &start, &vs) != 5)
        return false;
    const double tick = (double)sysconf(_SC_CLK_TCK);
    *cpu_s = (double)(utime + stime) / tick;
    *threads = (double)nthreads;
    *start_ticks = (double)start / tick;
    *vsize = (double)vs;
    return true;
}

static double resident_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long long size, resident;
    bool ok = f && fscanf(f, "%llu %llu", &size, &resident) == 2;
    if (f)
        fclose(f);
    return ok ? (double)resident * (double)sysconf(_SC_PAGESIZE) : 0.0;
}

static double open_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return 0.0;
    double n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += e->d_name[0] != '.';
    closedir(d);
    return n - 1; /* the directory's own descriptor */
}

/* Boot time (seconds since the epoch), for the start time. */
static double boot_time(void) {
    struct timespec real, since_boot;
    clock_gettime(CLOCK_REALTIME, &real);
    clock_gettime(CLOCK_BOOTTIME, &since_boot);
    return (double)real.tv_sec - (double)since_boot.tv_sec +
           ((double)real.tv_nsec - (double)since_boot.tv_nsec) * 1e-9;
}

void ss__process_metrics_refresh(ss__metrics *m) {
    double cpu, threads, start, vsize;
    if (!m || !read_stat(&cpu, &threads, &start, &vsize))
        return;
    const struct {
        const char *name, *help;
        double value;
    } g[] = {
        {"process_cpu_seconds_total", "User and system CPU time of the process, seconds.", cpu},
        {"process_resident_memory_bytes", "Resident memory of the process.", resident_bytes()},
        {"process_virtual_memory_bytes", "Virtual memory of the process.", vsize},
        {"process_open_fds", "Open file descriptors of the process.", open_fds()},
        {"process_threads", "Threads of the process.", threads},
        {"process_start_time_seconds", "Start of the process, seconds since the epoch.",
         boot_time() + start},
    };
    for (size_t i = 0; i < sizeof g / sizeof *g; i++) {
        ss__gauge *gauge;
        const ss_status st = i == 0 /* the CPU seconds: a counter */
                                 ? ss__metrics_float_counter(m, g[i].name, g[i].help, NULL, &gauge)
                                 : ss__metrics_gauge(m, g[i].name, g[i].help, NULL, &gauge);
        if (st == SS_OK)
            ss__gauge_set(gauge, g[i].value);
    }
}
