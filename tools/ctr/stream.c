#include "tools/ctr/stream.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/strbuf.h"

/* Two chunks: the trainer's and the one the reader fills. */
#define SLOTS 2

struct ss__ctr_stream {
    ss__ctr_stream_config cfg;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    ss__ctr_dataset slot[SLOTS];
    ss__ctr_reader rd[SLOTS];
    bool filled[SLOTS];
    int head; /* the next slot to hand out */
    int held; /* the slot the trainer holds (-1: none) */
    bool ended;
    ss_status error;
    atomic_int stop;
    /* the reader's own */
    FILE *in;
    char name[512];    /* the file read now, for messages */
    char last[256];    /* follower: the last file opened */
    uint64_t position; /* well-formed rows seen (rank filter) */
    uint64_t rows, skipped, files;
    size_t line_in_file;
};

static bool is_data_name(const char *n) {
    size_t len = strlen(n);
    return n[0] != '.' && n[0] != '_' && !(len >= 4 && strcmp(n + len - 4, ".tmp") == 0);
}

/* Follower: opens the first data file after s->last in name order. Returns
 * 1 when one is open, 0 when there is none yet, -1 on an error. */
static int open_next_file(ss__ctr_stream *s) {
    DIR *d = opendir(s->cfg.follow_dir);
    if (!d) {
        SS_LOG_ERRORF("ctr-stream", "event=follow_failed dir=%s error=\"%s\"", s->cfg.follow_dir,
                      strerror(errno));
        return -1;
    }
    char best[256] = "";
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!is_data_name(e->d_name) || strlen(e->d_name) >= sizeof best ||
            strcmp(e->d_name, s->last) <= 0)
            continue;
        if (!best[0] || strcmp(e->d_name, best) < 0)
            snprintf(best, sizeof best, "%s", e->d_name);
    }
    closedir(d);
    if (!best[0])
        return 0;
    snprintf(s->last, sizeof s->last, "%s", best);
    snprintf(s->name, sizeof s->name, "%s/%s", s->cfg.follow_dir, best);
    if (!(s->in = fopen(s->name, "r"))) {
        SS_LOG_ERRORF("ctr-stream", "event=open_failed path=%s error=\"%s\"", s->name,
                      strerror(errno));
        return -1;
    }
    s->files++;
    s->line_in_file = 0;
    SS_LOG_INFOF("ctr-stream", "event=file_opened path=%s", s->name);
    return 1;
}

static bool done_marker(const ss__ctr_stream *s) {
    char path[512];
    snprintf(path, sizeof path, "%s/_DONE", s->cfg.follow_dir);
    return access(path, F_OK) == 0;
}

/* Keeps only this rank's rows of those appended from index from on. */
static void keep_rank(ss__ctr_stream *s, ss__ctr_dataset *c, size_t from) {
    const size_t world = s->cfg.world > 1 ? s->cfg.world : 1;
    size_t k = from;
    for (size_t i = from; i < c->nrows; i++, s->position++)
        if (s->position % world == s->cfg.rank)
            c->rows[k++] = c->rows[i];
    c->nrows = k;
}

/* Fills chunk c until it is full, or nothing more is there to read for
 * now. Sets *end when the stream is over. */
static ss_status fill(ss__ctr_stream *s, ss__ctr_dataset *c, ss__ctr_reader *rd, bool *end) {
    c->nrows = c->skipped = 0;
    while (c->nrows < s->cfg.chunk_rows && !atomic_load(&s->stop)) {
        if (!s->in) {
            int got = s->cfg.follow_dir ? open_next_file(s) : 0;
            if (got < 0)
                return SS_ERR_IO;
            if (got == 0 && (!s->cfg.follow_dir || c->nrows > 0))
                break; /* a file read to its end; a follower hands out what it has */
            if (got == 0) {
                if (done_marker(s) && open_next_file(s) == 0) {
                    *end = true;
                    return SS_OK;
                }
                ss__sleep_ns((uint64_t)s->cfg.poll_ms * 1000000ull);
                continue;
            }
        }
        size_t before = c->nrows;
        /* The one place the reader may be cancelled (close while a read
         * blocks): never while it holds the lock. */
        rd->lineno = s->line_in_file;
        pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, NULL);
        ss_status st = ss__ctr_dataset_read(s->in, s->name, s->cfg.chunk_rows, rd, c);
        pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
        s->line_in_file = rd->lineno;
        keep_rank(s, c, before);
        if (st != SS_OK)
            return st;
        if (ferror(s->in)) { /* interrupted (EINTR): the loop looks at stop */
            clearerr(s->in);
            continue;
        }
        if (feof(s->in)) {
            if (s->in != stdin)
                fclose(s->in);
            s->in = NULL;
            if (!s->cfg.follow_dir)
                *end = true;
        }
    }
    if (atomic_load(&s->stop))
        *end = true;
    return SS_OK;
}

static void *reader_main(void *arg) {
    ss__ctr_stream *s = arg;
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
    for (int w = 0;; w = (w + 1) % SLOTS) {
        pthread_mutex_lock(&s->lock);
        while (s->filled[w] || s->held == w)
            pthread_cond_wait(&s->cond, &s->lock);
        pthread_mutex_unlock(&s->lock);
        bool end = false;
        ss_status st = fill(s, &s->slot[w], &s->rd[w], &end);
        pthread_mutex_lock(&s->lock);
        s->rows += s->slot[w].nrows;
        s->skipped += s->slot[w].skipped;
        s->filled[w] = s->slot[w].nrows > 0;
        if (st != SS_OK || end) {
            s->error = st;
            s->ended = true;
        }
        pthread_cond_broadcast(&s->cond);
        pthread_mutex_unlock(&s->lock);
        if (st != SS_OK || end)
            return NULL;
    }
}

ss_status ss__ctr_stream_open(const ss__ctr_stream_config *cfg, ss__ctr_stream **out, char *why,
                              size_t whylen) {
    if (!cfg || !out || !cfg->path == !cfg->follow_dir || cfg->chunk_rows == 0 ||
        cfg->chunk_rows > SS_CTR_STREAM_MAX_CHUNK || (cfg->world > 1 && cfg->rank >= cfg->world))
        return ss__fail(why, whylen, SS_ERR_INVALID_ARGUMENT,
                        "a stream reads a file or follows a directory (one of them) in chunks of "
                        "at least a row");
    ss__ctr_stream *s = calloc(1, sizeof *s);
    if (!s)
        return ss__fail(why, whylen, SS_ERR_NO_MEMORY, "no memory for the stream");
    s->cfg = *cfg;
    s->held = -1;
    if (!s->cfg.poll_ms)
        s->cfg.poll_ms = 100;
    struct stat sb;
    if (cfg->follow_dir && (stat(cfg->follow_dir, &sb) != 0 || !S_ISDIR(sb.st_mode))) {
        const char *e = errno ? strerror(errno) : "not a directory";
        SS_LOG_ERRORF("ctr-stream", "event=follow_failed dir=%s error=\"%s\"", cfg->follow_dir, e);
        free(s);
        return ss__fail(why, whylen, SS_ERR_IO, "--train-follow %s: %s", cfg->follow_dir, e);
    }
    if (cfg->path) {
        snprintf(s->name, sizeof s->name, "%s", strcmp(cfg->path, "-") ? cfg->path : "stdin");
        s->in = strcmp(cfg->path, "-") ? fopen(cfg->path, "r") : stdin;
        if (!s->in) {
            const char *e = strerror(errno);
            SS_LOG_ERRORF("ctr-stream", "event=open_failed path=%s error=\"%s\"", cfg->path, e);
            free(s);
            return ss__fail(why, whylen, SS_ERR_IO, "--train %s: %s", cfg->path, e);
        }
    }
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cond, NULL);
    if (pthread_create(&s->thread, NULL, reader_main, s) != 0) {
        if (s->in && s->in != stdin)
            fclose(s->in);
        pthread_mutex_destroy(&s->lock);
        pthread_cond_destroy(&s->cond);
        free(s);
        return ss__fail(why, whylen, SS_ERR_NO_MEMORY, "no thread to read the stream");
    }
    *out = s;
    return SS_OK;
}

ss_status ss__ctr_stream_next(ss__ctr_stream *s, const ss__ctr_dataset **chunk) {
    static const ss__ctr_dataset empty = {0};
    pthread_mutex_lock(&s->lock);
    if (s->held >= 0) { /* the trainer is done with the chunk it held */
        s->filled[s->held] = false;
        s->held = -1;
        pthread_cond_broadcast(&s->cond);
    }
    while (!s->filled[s->head] && !s->ended)
        pthread_cond_wait(&s->cond, &s->lock);
    ss_status st = SS_OK;
    if (s->filled[s->head]) {
        *chunk = &s->slot[s->head];
        s->held = s->head;
        s->head = (s->head + 1) % SLOTS;
    } else {
        *chunk = &empty;
        st = s->error;
    }
    pthread_mutex_unlock(&s->lock);
    return st;
}

void ss__ctr_stream_stop(ss__ctr_stream *s) {
    if (s)
        atomic_store(&s->stop, 1);
}

void ss__ctr_stream_get_stats(ss__ctr_stream *s, ss__ctr_stream_stats *out) {
    pthread_mutex_lock(&s->lock);
    *out = (ss__ctr_stream_stats){.rows = s->rows,
                                  .skipped = s->skipped,
                                  .files = s->files,
                                  .stopped = atomic_load(&s->stop) != 0};
    pthread_mutex_unlock(&s->lock);
}

void ss__ctr_stream_close(ss__ctr_stream *s) {
    if (!s)
        return;
    atomic_store(&s->stop, 1);
    pthread_mutex_lock(&s->lock);
    s->held = -1;
    for (int i = 0; i < SLOTS; i++)
        s->filled[i] = false; /* frees the reader if it waits for a slot */
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    pthread_cancel(s->thread); /* out of a blocking read, if it is in one */
    pthread_join(s->thread, NULL);
    if (s->in && s->in != stdin)
        fclose(s->in);
    for (int i = 0; i < SLOTS; i++) {
        ss__ctr_dataset_free(&s->slot[i]);
        free(s->rd[i].line);
    }
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->cond);
    free(s);
}
