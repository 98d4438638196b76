/* A whole file read into memory: the one way the programs read the files
 * they take whole (dense checkpoints, deltas, shard maps, PEM files,
 * token files), so that each applies the same link policy and size bound
 * and says the same things when the file is missing, too large or not a
 * file. */
#ifndef SS_COMMON_READ_FILE_H
#define SS_COMMON_READ_FILE_H

#include <stddef.h>

#include "shadowsync/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Who put the file there, which decides what is followed and read. */
typedef enum ss__file_origin {
    /* This program wrote it (a delta): a link in its place or anything
     * but a regular file is refused, never read through. */
    SS_FILE_OURS,
    /* An operator gave it (a shard map, a certificate, a token, a
     * checkpoint restored from a backup): links
     * are followed (a Kubernetes Secret's files are links) and pipes
     * read to their end. */
    SS_FILE_OPERATORS,
} ss__file_origin;

/* Reads the file at path into *buf (malloc'd, with one byte more than
 * *len, a NUL, so that a text can be parsed as a string). SS_ERR_NOT_FOUND:
 * no such file; SS_ERR_TOO_LARGE: more than max_bytes; SS_ERR_IO: not one
 * to read by origin, or a read failed (errno says why); SS_ERR_NO_MEMORY.
 * Nothing is kept on failure. */
ss_status ss__read_file(const char *path, ss__file_origin origin, size_t max_bytes,
                        unsigned char **buf, size_t *len);

/* The same from an open descriptor (read from where it stands). */
ss_status ss__read_fd(int fd, size_t max_bytes, unsigned char **buf, size_t *len);

#ifdef __cplusplus
}
#endif

#endif
