/* Shared by the multi-process tests: start shadowsync-ps and trainer
 * processes on 127.0.0.1, read what they print. */
#ifndef SS_TESTS_PROCS_H
#define SS_TESTS_PROCS_H

#include <check.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* Spawns argv with stdout and stderr to the file `log` (truncated). */
static inline pid_t proc_spawn(char *const argv[], const char *log) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    pid_t pid;
    ck_assert_int_eq(posix_spawn(&pid, argv[0], &fa, NULL, argv, environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    return pid;
}

/* The whole file as a string (caller frees); "" when missing. */
static inline char *proc_read(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return strdup("");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    size_t got = fread(buf, 1, (size_t)n, f);
    buf[got] = '\0';
    fclose(f);
    return buf;
}

/* Waits up to timeout_s for `needle` to appear in the file. */
static inline int proc_wait_for(const char *path, const char *needle, double timeout_s) {
    for (int i = 0; i < (int)(timeout_s * 100); i++) {
        char *text = proc_read(path);
        int found = strstr(text, needle) != NULL;
        free(text);
        if (found)
            return 1;
        usleep(10000);
    }
    return 0;
}

/* Waits for "<marker> " in a log and writes the address after it
 * (up to a space, comma or newline) to out. */
static inline void proc_address_after(const char *log, const char *marker, char *out,
                                      size_t outlen) {
    char needle[64];
    snprintf(needle, sizeof needle, "%s ", marker);
    ck_assert_msg(proc_wait_for(log, needle, 20), "no \"%s\" in %s", needle, log);
    char *text = proc_read(log);
    const char *at = strstr(text, needle) + strlen(needle);
    snprintf(out, outlen, "%.*s", (int)strcspn(at, " ,\n"), at);
    free(text);
}

/* Starts shadowsync-ps (extra args NULL-terminated, at most 12) with its
 * output in `log`; waits until it listens and writes "127.0.0.1:port" to
 * target. */
static inline pid_t proc_start_ps(const char *log, char *target, size_t targetlen,
                                  const char *listen, char *const extra[]) {
    char *argv[20] = {SHADOWSYNC_PS, "--listen", (char *)listen};
    int n = 3;
    for (int i = 0; extra && extra[i] && n < 18; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    /* A PS given a token refuses SHADOWSYNC_INSECURE_LOOPBACK beside it
     * (the suite sets it for every test): the child starts without it. */
    bool token = false;
    for (int i = 3; i < n; i++)
        token = token || !strcmp(argv[i], "--auth-token-file");
    char *insecure = getenv("SHADOWSYNC_INSECURE_LOOPBACK");
    insecure = token && insecure ? strdup(insecure) : NULL;
    if (insecure)
        unsetenv("SHADOWSYNC_INSECURE_LOOPBACK");
    pid_t pid = proc_spawn(argv, log);
    if (insecure)
        setenv("SHADOWSYNC_INSECURE_LOOPBACK", insecure, 1);
    free(insecure);
    proc_address_after(log, "listening on", target, targetlen);
    return pid;
}

/* waitpid with a timeout (SIGKILL after it); returns the wait status. */
static inline int proc_wait(pid_t pid, double timeout_s) {
    int status = 0;
    for (int i = 0; i < (int)(timeout_s * 100); i++) {
        if (waitpid(pid, &status, WNOHANG) == pid)
            return status;
        usleep(10000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    ck_abort_msg("process %d did not exit in %.0f s", (int)pid, timeout_s);
    return status;
}

/* Value of `key=` in the last line that starts with `prefix`; -1 if none. */
static inline double proc_last_value(const char *text, const char *prefix, const char *key) {
    double v = -1;
    char pat[64];
    snprintf(pat, sizeof pat, " %s=", key);
    for (const char *line = text; line && *line;) {
        const char *end = strchr(line, '\n');
        if (!strncmp(line, prefix, strlen(prefix))) {
            const char *at = strstr(line, pat);
            if (at && (!end || at < end))
                v = atof(at + strlen(pat));
        }
        line = end ? end + 1 : NULL;
    }
    return v;
}

/* Stops a child (SIGSTOP) and returns once it is stopped: kill() alone
 * returns before the signal takes effect, and the child may still answer
 * a request meanwhile. */
static inline void proc_freeze(pid_t pid) {
    kill(pid, SIGSTOP);
    int status;
    ck_assert_int_eq(waitpid(pid, &status, WUNTRACED), pid);
    ck_assert(WIFSTOPPED(status));
}

/* A test program's start: SIGPIPE ignored (a write to a killed server's
 * socket must fail, not end the test) and its scratch directory made from
 * the mkdtemp template in dir. 0, or the exit code after saying why. */
static inline int proc_main_start(char *dir) {
    signal(SIGPIPE, SIG_IGN);
    if (mkdtemp(dir))
        return 0;
    perror("mkdtemp");
    return EXIT_FAILURE;
}

/* Removes a test's scratch directory and everything in it. */
static inline void proc_remove_tree(const char *dir) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

#endif
