/* shadowsync-ctl scale: the PS fleet to M pods while training runs, as
 * deploy/README.md orders it. It reads the shard map the PS pods watch,
 * writes the next one (the epoch one more, the new list, a "from" line
 * with the old) in its place (or has --apply put it in the ConfigMap),
 * and waits, printing progress, until every PS serves the new epoch with
 * no row move pending and each leaving PS holds 0 rows and 0 members:
 * then it is safe for `kubectl scale` to remove them. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/flags.h"
#include "common/shard_map.h"
#include "tools/ctl.h"

#define FLEET_MAX 256

static const ss__program scale_program = {
    "shadowsync-ctl scale",
    "Scales the PS fleet to --replicas pods while training runs: reads the shard map the PS\n"
    "pods watch (--map), checks that every PS of the fleet answers and no move is under way,\n"
    "writes the next map in its place (epoch + 1, the first --replicas of the fleet, a \"from\"\n"
    "line with the old list; atomically), runs --apply when given (e.g. to put the file in the\n"
    "ConfigMap), and waits until every PS serves the new epoch with no row move pending and\n"
    "each leaving PS holds 0 rows and 0 dense members, printing progress every --interval-ms.\n"
    "Grow: `kubectl scale` first (the new pods serve nothing until the map names them), then\n"
    "this. Shrink: this first, then `kubectl scale` once it says done. The fleet is the\n"
    "StatefulSet's pods (--statefulset, --service, --namespace, --port) or --fleet; each PS's\n"
    "HTTP endpoint is its host at --http-port, or --http-urls. Exit 0: done; 1: a PS did\n"
    "not answer, --apply failed or --timeout-s passed (the map stays written); 2: bad input.\n"
    "  shadowsync-ctl scale --map fleet.map --replicas 3 \\\n"
    "      --apply 'kubectl -n shadowsync create configmap ps-map \\\n"
    "          --from-file=fleet.map=\"$SHADOWSYNC_MAP_FILE\" --dry-run=client -o yaml | kubectl "
    "apply -f -'"};

typedef struct scale_opts {
    const char *map, *fleet, *http, *apply, *sts, *svc, *ns;
    int64_t replicas, port, http_port, timeout_s, interval_ms;
} scale_opts;

/* What a PS's /metrics say of the change. */
typedef struct ps_view {
    bool up;
    double epoch, pending, rows, members, moved_in;
} ps_view;

/* The sum of a metric's series in Prometheus text (0 when it has none). */
static double metric_sum(const char *text, const char *name) {
    const size_t n = strlen(name);
    double sum = 0;
    for (const char *line = text; line && *line; line = strchr(line, '\n'), line += !!line) {
        if (strncmp(line, name, n) || (line[n] != '{' && line[n] != ' '))
            continue;
        const char *end = strchr(line, '\n');
        const char *sp = line + (end ? (size_t)(end - line) : strlen(line));
        while (sp > line && sp[-1] != ' ')
            sp--;
        sum += strtod(sp, NULL);
    }
    return sum;
}

static ps_view view_of(const char *http, long timeout_ms, char *err, size_t errlen) {
    ps_view v = {0};
    char *body = NULL;
    const long code = ss__ctl_fetch(http, "/metrics", false, timeout_ms, &body, err, errlen);
    if (code == 200) {
        v.up = true;
        v.epoch = metric_sum(body, "shadowsync_shard_map_epoch");
        v.pending = metric_sum(body, "shadowsync_emb_row_moves_pending");
        v.rows = metric_sum(body, "shadowsync_emb_resident_rows");
        v.members = metric_sum(body, "shadowsync_ps_members");
        v.moved_in = metric_sum(body, "shadowsync_emb_rows_moved_in_total");
    } else if (code > 0) {
        snprintf(err, errlen, "%s/metrics answered HTTP %ld", http, code);
    }
    free(body);
    return v;
}

typedef struct fleet {
    char list[SS_SHARD_MAP_PS_MAX], addr_buf[SS_SHARD_MAP_PS_MAX], http_buf[8192];
    const char *addr[FLEET_MAX], *http[FLEET_MAX];
    char http_own[FLEET_MAX][300];
    size_t n;
} fleet;

/* The fleet's addresses and HTTP endpoints, at least `need` of them; 2
 * with why when they do not add up. */
static int fleet_of(const scale_opts *o, size_t need, fleet *f, char *why, size_t whylen) {
    if (*o->fleet)
        snprintf(f->list, sizeof f->list, "%s", o->fleet);
    else
        ss__ctl_pod_list(o->sts, o->svc, o->ns, o->port, (int64_t)need, f->list, sizeof f->list);
    f->n = ss__shard_map_split(f->list, f->addr_buf, sizeof f->addr_buf, f->addr, FLEET_MAX);
    if (f->n < need) {
        snprintf(why, whylen, "--fleet names %zu PS; the change needs %zu", f->n, need);
        return 2;
    }
    if (*o->http) {
        const size_t k =
            ss__shard_map_split(o->http, f->http_buf, sizeof f->http_buf, f->http, FLEET_MAX);
        if (k < need) {
            snprintf(why, whylen, "--http-urls names %zu endpoints for %zu PS", k, need);
            return 2;
        }
        return 0;
    }
    for (size_t i = 0; i < need; i++) {
        const char *colon = strrchr(f->addr[i], ':');
        const int hostlen = colon ? (int)(colon - f->addr[i]) : (int)strlen(f->addr[i]);
        snprintf(f->http_own[i], sizeof f->http_own[i], "http://%.*s:%lld", hostlen, f->addr[i],
                 (long long)o->http_port);
        f->http[i] = f->http_own[i];
    }
    return 0;
}

/* "a,b,c" of the first n of the fleet. */
static void first_of(const fleet *f, size_t n, char *out, size_t len) {
    size_t at = 0;
    out[0] = '\0';
    for (size_t i = 0; i < n && at < len; i++)
        at += (size_t)snprintf(out + at, len - at, "%s%s", i ? "," : "", f->addr[i]);
}

/* The map's text written whole in its place (a PS never reads half). */
static int write_map(const char *path, const char *text, char *why, size_t whylen) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.scale-%d", path, (int)getpid());
    const int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    const size_t len = strlen(text);
    bool ok = fd >= 0 && write(fd, text, len) == (ssize_t)len && fsync(fd) == 0;
    const int saved = errno;
    if (fd >= 0)
        close(fd);
    ok = ok && rename(tmp, path) == 0;
    if (!ok) {
        snprintf(why, whylen, "cannot write %s: %s", path, strerror(errno ? errno : saved));
        unlink(tmp);
        return 1;
    }
    return 0;
}

/* --apply's command through /bin/sh with SHADOWSYNC_MAP_FILE set. */
static int run_apply(const char *cmd, const char *map, char *why, size_t whylen) {
    const pid_t pid = fork();
    if (pid == 0) {
        setenv("SHADOWSYNC_MAP_FILE", map, 1);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0) {
        snprintf(why, whylen, "--apply failed (exit %d): the map is written to %s but not applied",
                 WIFEXITED(status) ? WEXITSTATUS(status) : -1, map);
        return 1;
    }
    return 0;
}

/* Before the change: every PS of it answers and none has a move pending
 * (a change under way finishes first). *moved: rows moved in so far. */
static int check_before(const fleet *f, size_t n, size_t had, size_t want, long timeout_ms,
                        double *moved, double *expected, char *why, size_t whylen) {
    *moved = *expected = 0;
    for (size_t i = 0; i < n; i++) {
        char err[600] = "";
        const ps_view v = view_of(f->http[i], timeout_ms, err, sizeof err);
        if (!v.up) {
            snprintf(why, whylen, "PS %s does not answer (%s); grow with `kubectl scale` first",
                     f->addr[i], err);
            return 1;
        }
        if (v.pending > 0) {
            snprintf(why, whylen, "PS %s has %.0f row moves pending: the last change is not done",
                     f->addr[i], v.pending);
            return 1;
        }
        *moved += v.moved_in;
        /* jump hash: a grow moves (want - had) / want of the rows to the
         * new shards, a shrink every row of the leaving ones */
        if (want > had && i < had)
            *expected += v.rows * (double)(want - had) / (double)want;
        else if (want < had && i >= want)
            *expected += v.rows;
    }
    return 0;
}

/* One look at the fleet: whether the change is done; a progress line. */
static bool look(const fleet *f, size_t n, size_t keep, uint64_t epoch, long timeout_ms,
                 double moved0, double *moved, char *line, size_t len) {
    size_t on = 0, at = 0;
    double pending = 0, leaving_rows = 0, leaving_members = 0;
    bool all_up = true;
    *moved = 0;
    for (size_t i = 0; i < n; i++) {
        char err[600] = "";
        const ps_view v = view_of(f->http[i], timeout_ms, err, sizeof err);
        all_up = all_up && v.up;
        on += v.up && v.epoch == (double)epoch;
        pending += v.pending;
        *moved += v.moved_in;
        if (i >= keep) {
            leaving_rows += v.rows;
            leaving_members += v.members;
        }
    }
    at += (size_t)snprintf(line + at, len - at,
                           "%zu/%zu PS on epoch %llu, %.0f tables' moves pending, %.0f rows moved",
                           on, n, (unsigned long long)epoch, pending, *moved - moved0);
    if (keep < n)
        snprintf(line + at, len - at, ", leaving PS hold %.0f rows and %.0f members", leaving_rows,
                 leaving_members);
    return all_up && on == n && pending == 0 && leaving_rows == 0 && leaving_members == 0;
}

static int scale(const scale_opts *o) {
    char why[1200] = "";
    ss__shard_map cur;
    ss_status st = ss__shard_map_read(o->map, &cur, why, sizeof why);
    if (st != SS_OK) {
        fprintf(stderr, "shadowsync-ctl scale: %s\n", why);
        return st == SS_ERR_INVALID_ARGUMENT || st == SS_ERR_NOT_FOUND ? 2 : 1;
    }
    char cur_buf[SS_SHARD_MAP_PS_MAX];
    const char *cur_addr[FLEET_MAX];
    const size_t had = ss__shard_map_split(cur.ps, cur_buf, sizeof cur_buf, cur_addr, FLEET_MAX);
    const size_t want = (size_t)o->replicas, n = had > want ? had : want;
    static fleet f;
    int rc = fleet_of(o, n, &f, why, sizeof why);
    for (size_t i = 0; rc == 0 && i < had; i++)
        if (strcmp(cur_addr[i], f.addr[i]) != 0) {
            snprintf(why, sizeof why,
                     "%s names %s as PS %zu, the fleet %s: the map's list must be the fleet's "
                     "first %zu",
                     o->map, cur_addr[i], i, f.addr[i], had);
            rc = 2;
        }
    if (rc != 0) {
        fprintf(stderr, "shadowsync-ctl scale: %s\n", why);
        return rc;
    }
    if (want == had) {
        printf("scale: %s already names %zu PS (epoch %llu): nothing to do\n", o->map, had,
               (unsigned long long)cur.epoch);
        return 0;
    }
    const uint64_t epoch = cur.epoch + 1;
    printf("scale: %zu -> %zu PS, epoch %llu -> %llu\n", had, want, (unsigned long long)cur.epoch,
           (unsigned long long)epoch);
    double moved0, expected;
    if (check_before(&f, n, had, want, (long)o->interval_ms * 5, &moved0, &expected, why,
                     sizeof why) != 0) {
        fprintf(stderr, "shadowsync-ctl scale: %s\n", why);
        return 1;
    }
    char list[SS_SHARD_MAP_PS_MAX], text[2 * SS_SHARD_MAP_PS_MAX + 128];
    first_of(&f, want, list, sizeof list);
    snprintf(text, sizeof text, "# written by shadowsync-ctl scale\nepoch %llu\nps %s\nfrom %s\n",
             (unsigned long long)epoch, list, cur.ps);
    ss__shard_map next;
    if (ss__shard_map_parse(text, "(the next map)", &next, why, sizeof why) != SS_OK) {
        fprintf(stderr, "shadowsync-ctl scale: %s\n", why);
        return 2;
    }
    const uint64_t t0 = ss__now_ns();
    if (write_map(o->map, text, why, sizeof why) != 0 ||
        (*o->apply && run_apply(o->apply, o->map, why, sizeof why) != 0)) {
        fprintf(stderr, "shadowsync-ctl scale: %s\n", why);
        return 1;
    }
    printf("scale: wrote %s: epoch %llu, ps %s\n", o->map, (unsigned long long)epoch, list);
    fflush(stdout);
    for (;;) {
        char line[400];
        double moved;
        const bool done =
            look(&f, n, want, epoch, (long)o->interval_ms * 5, moved0, &moved, line, sizeof line);
        const double s = (double)(ss__now_ns() - t0) / 1e9;
        if (done) {
            printf("scale: done in %.1f s: %s (%.3f of the %.0f expected)\n", s, line,
                   expected > 0 ? (moved - moved0) / expected : 0, expected);
            if (want < had)
                printf("scale: the leaving PS are empty: `kubectl scale statefulset %s "
                       "--replicas %zu` may remove them now\n",
                       o->sts, want);
            return 0;
        }
        if (s > (double)o->timeout_s) {
            fprintf(stderr, "shadowsync-ctl scale: not done after %lld s: %s\n",
                    (long long)o->timeout_s, line);
            return 1;
        }
        printf("scale: %.1f s: %s\n", s, line);
        fflush(stdout);
        ss__sleep_ns((uint64_t)o->interval_ms * 1000000ull);
    }
}

int ss__ctl_scale_main(int argc, char **argv) {
    scale_opts o = {.map = "",
                    .fleet = "",
                    .http = "",
                    .apply = "",
                    .sts = "ps",
                    .svc = "ps",
                    .ns = "",
                    .replicas = 0,
                    .port = 7070,
                    .http_port = 9471,
                    .timeout_s = 1800,
                    .interval_ms = 1000};
    ss__flag flags[] = {
        {"map", SS_FLAG_STRING, &o.map, "the shard map file the PS pods watch (rewritten in place)",
         NULL, 0, 0},
        {"replicas", SS_FLAG_INT, &o.replicas, "the PS pods of the next map", NULL, 0, FLEET_MAX},
        {"fleet", SS_FLAG_STRING, &o.fleet,
         "every PS's host:port, in shard order (\"\" = the StatefulSet's pod names)", NULL, 0, 0},
        {"http-urls", SS_FLAG_STRING, &o.http,
         "each PS's HTTP endpoint, in the fleet's order (\"\" = its host at --http-port)", NULL, 0,
         0},
        {"http-port", SS_FLAG_INT, &o.http_port, "the PS pods' HTTP port", NULL, 1, 65535},
        {"apply", SS_FLAG_STRING, &o.apply,
         "a shell command run once the map is written, with SHADOWSYNC_MAP_FILE set (\"\" = none)",
         NULL, 0, 0},
        {"statefulset", SS_FLAG_STRING, &o.sts, "the PS StatefulSet's name", NULL, 0, 0},
        {"service", SS_FLAG_STRING, &o.svc, "its headless Service (serviceName)", NULL, 0, 0},
        {"namespace", SS_FLAG_STRING, &o.ns, "their namespace (\"\" = the reader's own)", NULL, 0,
         0},
        {"port", SS_FLAG_INT, &o.port, "the PS pods' gRPC port", NULL, 1, 65535},
        {"timeout-s", SS_FLAG_INT, &o.timeout_s, "how long to wait for the moves", NULL, 1, 1e6},
        {"interval-ms", SS_FLAG_INT, &o.interval_ms, "how often to look and print progress", NULL,
         50, 600000},
    };
    const int rc = ss__flags_cli(&scale_program, flags, sizeof flags / sizeof *flags, argc, argv);
    if (rc >= 0)
        return rc;
    if (!*o.map || o.replicas < 1) {
        fprintf(stderr, "shadowsync-ctl scale: %s is needed (--help for more)\n",
                !*o.map ? "--map" : "--replicas (1 or more)");
        return 2;
    }
    return scale(&o);
}
