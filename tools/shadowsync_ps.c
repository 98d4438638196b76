/* shadowsync-ps: serves dense sync (S-EASGD central variables, S-MA/S-BMUF
 * round aggregation with membership and a round deadline) over gRPC. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shadowsync/dense_service.h"
#include "shadowsync/flags.h"
#include "shadowsync/log.h"

int main(int argc, char **argv) {
    const char *listen = "127.0.0.1:7070";
    int64_t threads = 2, deadline_ms = 1000, max_floats = 64 << 20;
    ss_flag flags[] = {
        {"listen", SS_FLAG_STRING, &listen, "address to serve gRPC on (port 0: pick one)", NULL, 0,
         0},
        {"threads", SS_FLAG_INT, &threads, "completion-queue threads", NULL, 1, 64},
        {"round-deadline-ms", SS_FLAG_INT, &deadline_ms,
         "an MA/BMUF round closes this long after its first snapshot, members or not", NULL, 1,
         3.6e6},
        {"max-group-floats", SS_FLAG_INT, &max_floats, "largest dense group accepted", NULL, 1,
         (double)(1u << 30)},
    };
    const size_t nflags = sizeof flags / sizeof *flags;
    bool help;
    char err[256];
    if (ss_flags_parse(flags, nflags, argc, argv, &help, err, sizeof err) != SS_OK) {
        fprintf(stderr, "shadowsync-ps: %s\n", err);
        return 2;
    }
    if (help) {
        ss_flags_print_help(stdout, "shadowsync-ps",
                            "ShadowSync parameter server: holds the central variables of dense "
                            "groups (S-EASGD)\nand aggregates S-MA/S-BMUF rounds, over gRPC. Stops "
                            "on SIGINT or SIGTERM.",
                            flags, nflags);
        return 0;
    }
    /* Signals go to sigwait below, not to gRPC's threads. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);

    ss_metrics *metrics;
    ss_transport *backend;
    ss_inproc_config icfg = {.round_deadline_ms = (uint32_t)deadline_ms};
    if (ss_metrics_create(&metrics) != SS_OK ||
        ss_inproc_transport_create(&icfg, &backend) != SS_OK) {
        fprintf(stderr, "shadowsync-ps: out of memory\n");
        return 1;
    }
    ss_dense_service svc = {.backend = backend, .max_floats = (size_t)max_floats};
    ss_metrics_counter(metrics, "shadowsync_ps_rejected_requests_total",
                       "Requests refused as invalid (bad size, NaN/Inf, garbage).", NULL,
                       &svc.rejected);
    size_t nmethods;
    const ss_rpc_method *methods = ss_dense_service_methods(&nmethods);
    ss_rpc_server_config scfg = {.listen = listen,
                                 .threads = (uint32_t)threads,
                                 .max_message_bytes = (size_t)max_floats * 4 + 4096,
                                 .metrics = metrics};
    ss_rpc_server *srv;
    ss_status st = ss_rpc_server_start(&scfg, methods, nmethods, &svc, &srv);
    if (st != SS_OK) {
        fprintf(stderr, "shadowsync-ps: cannot serve on %s: %s\n", listen, ss_strerror(st));
        ss_transport_destroy(backend);
        ss_metrics_destroy(metrics);
        return 1;
    }
    char host[256];
    snprintf(host, sizeof host, "%s", listen);
    char *colon = strrchr(host, ':');
    if (colon)
        *colon = '\0';
    printf("shadowsync-ps: listening on %s:%d\n", host, ss_rpc_server_port(srv));
    fflush(stdout);
    int sig;
    sigwait(&sigs, &sig);
    ss_log(SS_LOG_INFO, "ps", "event=stopping signal=%d", sig);
    ss_rpc_server_stop(srv);
    ss_transport_destroy(backend);
    ss_metrics_destroy(metrics);
    printf("shadowsync-ps: stopped\n");
    return 0;
}
