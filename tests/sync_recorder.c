/* LD_PRELOAD shim for the durability test: records every fsync and
 * fdatasync of a RocksDB write-ahead log (a file named *.log) as one line
 * "start_ns end_ns" (CLOCK_MONOTONIC, the clock the test's acks use) in
 * the file $SS_SYNC_LOG. A process-crash test (SIGKILL) keeps page-cache
 * writes, so it cannot tell a synced write from an unsynced one; this
 * can: an acknowledged update needs a WAL sync between its request and
 * its reply. With $SS_SYNC_DELAY_MS every fsync/fdatasync first sleeps
 * that long: a slow disk, for the tests that a checkpoint freezes nothing.
 * With $SS_WAL_WRITE_BYTES_PER_S every write() to a WAL first sleeps as
 * long as that many bytes a second would take: a disk slower than the
 * pushes, for the write-behind back-pressure test.
 * Built without sanitizers (it is preloaded into any build). */
#include <ctype.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int log_fd = -1;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int (*real_fsync)(int), (*real_fdatasync)(int);
static ssize_t (*real_write)(int, const void *, size_t);
static long delay_ms;
static double wal_bytes_per_s;

static void init(void) {
    real_fsync = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    real_fdatasync = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    const char *delay = getenv("SS_SYNC_DELAY_MS");
    delay_ms = delay ? atol(delay) : 0;
    real_write = (ssize_t(*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
    const char *rate = getenv("SS_WAL_WRITE_BYTES_PER_S");
    wal_bytes_per_s = rate ? atof(rate) : 0;
    const char *path = getenv("SS_SYNC_LOG");
    if (path)
        log_fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A RocksDB write-ahead log: digits then ".log" (000012.log), not the
 * process's own log that a test may have named ps.log. */
static int is_wal(int fd) {
    char link[64], path[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n < 5)
        return 0;
    path[n] = '\0';
    if (strcmp(path + n - 4, ".log") != 0)
        return 0;
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    if (base == path + n - 4)
        return 0;
    for (const char *c = base; c < path + n - 4; c++)
        if (!isdigit((unsigned char)*c))
            return 0;
    return 1;
}

static void sleep_ns(uint64_t ns) {
    struct timespec d = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
    while (nanosleep(&d, &d) != 0) {
    }
}

static int recorded(int (*real)(int), int fd) {
    uint64_t t0 = now_ns();
    if (delay_ms > 0)
        sleep_ns((uint64_t)delay_ms * 1000000ull);
    int rc = real(fd);
    uint64_t t1 = now_ns();
    if (rc == 0 && log_fd >= 0 && is_wal(fd)) {
        char line[64];
        int n = snprintf(line, sizeof line, "%llu %llu\n", (unsigned long long)t0,
                         (unsigned long long)t1);
        if (write(log_fd, line, (size_t)n) != n) /* O_APPEND: one line at a time */
            abort();
    }
    return rc;
}

int fsync(int fd) {
    pthread_once(&once, init);
    return recorded(real_fsync, fd);
}

int fdatasync(int fd) {
    pthread_once(&once, init);
    return recorded(real_fdatasync, fd);
}

ssize_t write(int fd, const void *buf, size_t count) {
    pthread_once(&once, init);
    if (wal_bytes_per_s > 0 && fd != log_fd && is_wal(fd))
        sleep_ns((uint64_t)((double)count / wal_bytes_per_s * 1e9));
    return real_write(fd, buf, count);
}
