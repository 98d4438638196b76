/* A stream of training rows for online training: standard input ("-"), a
 * file read once, or a directory followed as files appear in it. Rows come
 * in chunks of at most chunk_rows, parsed by a reader thread one chunk
 * ahead of the trainer, so that parsing overlaps training; a chunk is
 * handed out as soon as it is full, or as soon as no more rows are there
 * to read for now (a follower does not hold rows back waiting for the
 * next file).
 *
 * A followed directory is read file by file in name order (strcmp), each
 * file once, as it appears; names starting with '.' or '_' and names
 * ending in ".tmp" are not data (a writer publishes a file by renaming it
 * into place). The stream ends when DIR/_DONE exists and every file before
 * it has been read, or when ss__ctr_stream_stop is called (SIGTERM). */
#ifndef SS_CTR_STREAM_H
#define SS_CTR_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shadowsync/status.h"
#include "tools/ctr/criteo.h"

typedef struct ss__ctr_stream ss__ctr_stream;

/* The largest chunk_rows (a trainer's pass buffers are sized for it). */
#define SS_CTR_STREAM_MAX_CHUNK ((size_t)1 << 20)

typedef struct ss__ctr_stream_config {
    const char *path;       /* "-" (standard input) or a file; NULL with follow_dir */
    const char *follow_dir; /* a directory to follow; NULL with path */
    size_t chunk_rows;      /* at most this many rows per chunk (1 to SS_CTR_STREAM_MAX_CHUNK) */
    uint32_t poll_ms;       /* follower: pause between looks for a new file */
    /* Only rows rank, rank + world, ... of the stream (process mode: each
     * trainer process its share of one stream); world 0 or 1: all. */
    size_t rank, world;
} ss__ctr_stream_config;

typedef struct ss__ctr_stream_stats {
    uint64_t rows;    /* handed out */
    uint64_t skipped; /* malformed lines */
    uint64_t files;   /* followed files opened */
    bool stopped;     /* ended by ss__ctr_stream_stop */
} ss__ctr_stream_stats;

/* Starts the reader thread. SS_ERR_INVALID_ARGUMENT (neither or both of
 * path and follow_dir; chunk_rows 0), SS_ERR_IO (the file or directory
 * cannot be opened: said in the log with the reason). */
ss_status ss__ctr_stream_open(const ss__ctr_stream_config *cfg, ss__ctr_stream **out, char *why,
                              size_t whylen);

/* The next chunk, blocking until one is there; *chunk stays valid until
 * the next call (or close). At the end of the stream, a chunk of 0 rows.
 * SS_ERR_IO: a read failed (the rows before it were handed out). */
ss_status ss__ctr_stream_next(ss__ctr_stream *s, const ss__ctr_dataset **chunk);

/* Ends the stream at the next line boundary (async-signal-safe: it only
 * sets a flag; the reader thread, which alone takes SIGTERM and SIGINT
 * while it runs, sees it at once). */
void ss__ctr_stream_stop(ss__ctr_stream *s);

void ss__ctr_stream_get_stats(ss__ctr_stream *s, ss__ctr_stream_stats *out);
void ss__ctr_stream_close(ss__ctr_stream *s);

#endif
