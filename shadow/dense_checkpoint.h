/* The dense checkpoint file: every group's central variable (S-EASGD),
 * last round result (MA: the mean; BMUF: the block start b) and S-BMUF
 * global state (w, m and the parameters), as shadowsync-ps saves them
 * (dense.ckpt) and restores them at start (shadow/central_checkpoint.c), so
 * a restarted PS goes on with the same block momentum.
 *
 * Layout (host byte order; a checkpoint moves with its PS, not across
 * architectures): "SSDENSE2", u32 group count, then per group: u32 name
 * length, name, u64 n, u8 has_central, u8 has_mean, u64 mean round, u8
 * has_bmuf, [f32 eta, f32 zeta, u8 nesterov, w[n], m[n]] when has_bmuf,
 * central[n] and mean[n] as present; then a u64 FNV-1a of all bytes before
 * it, so a torn or corrupted file is refused instead of loaded. Files of
 * the first layout ("SSDENSE1": no has_bmuf byte) are still read.
 *
 * Writing is atomic: path.tmp, fsync, rename, fsync of the directory; a
 * crash leaves the old checkpoint or the new one, never half of one. */
#ifndef SS_SHADOW_DENSE_CHECKPOINT_H
#define SS_SHADOW_DENSE_CHECKPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shadowsync/status.h"

/* One group in the file. central and mean point at n floats each (NULL:
 * not present). On reading they point into the file's buffer, which need
 * not be aligned for floats: copy them out with memcpy. */
typedef struct ss__dense_ckpt_group {
    const char *name;
    size_t n;
    const void *central;
    const void *mean;
    uint64_t mean_round;
    /* S-BMUF: the global model w and momentum m (n floats each; NULL: not
     * a BMUF group, or no round closed yet) and the group's parameters. */
    const void *bmuf_w, *bmuf_m;
    float bmuf_eta, bmuf_zeta;
    bool bmuf_nesterov;
} ss__dense_ckpt_group;

typedef struct ss__dense_ckpt_writer ss__dense_ckpt_writer;

/* Starts a checkpoint of exactly `groups` groups into a new file beside
 * path (a random name, 0600, never a planted link; SS_ERR_IO when it
 * cannot be made). put() writes a group through a 1 MiB buffer (no copy
 * of the state is kept: callers put a group under its lock); commit()
 * fsyncs the file, renames it over path and fsyncs the directory. */
ss_status ss__dense_ckpt_begin(const char *path, uint32_t groups, ss__dense_ckpt_writer **out);
void ss__dense_ckpt_put(ss__dense_ckpt_writer *w, const ss__dense_ckpt_group *g);
/* Seals the file and moves it over path (SS_ERR_IO: a write failed, or the
 * group count was not kept; SS_ERR_NON_FINITE: a group held NaN or Inf;
 * path is then unchanged). Frees w either way. */
ss_status ss__dense_ckpt_commit(ss__dense_ckpt_writer *w);

typedef struct ss__dense_ckpt_file ss__dense_ckpt_file;

/* Reads and checks the whole file (hash, layout, every group) before
 * anything is handed out. SS_ERR_NOT_FOUND: no such file; SS_ERR_PARSE:
 * torn or corrupted; SS_ERR_NON_FINITE: a value is NaN or Inf (a file of
 * a build that did not check, or forged with a matching hash). */
ss_status ss__dense_ckpt_read(const char *path, ss__dense_ckpt_file **out);
/* The same from len bytes in buf (malloc'd; the file takes it, freed
 * either way). verify_hash false skips only the trailing hash check, so
 * that a fuzzer reaches the layout checks behind it. */
ss_status ss__dense_ckpt_parse(uint8_t *buf, size_t len, bool verify_hash,
                               ss__dense_ckpt_file **out);
size_t ss__dense_ckpt_count(const ss__dense_ckpt_file *f);
const ss__dense_ckpt_group *ss__dense_ckpt_group_at(const ss__dense_ckpt_file *f, size_t i);
void ss__dense_ckpt_close(ss__dense_ckpt_file *f);

#endif
