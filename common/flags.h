/* Command-line flags with SHADOWSYNC_* environment fallbacks.
 *
 * Precedence: built-in default < environment < command line. The flag
 * "sync-every" falls back to SHADOWSYNC_SYNC_EVERY. Flags are written
 * "--name value" or "--name=value"; booleans also as "--name" alone. */
#ifndef SHADOWSYNC_FLAGS_H
#define SHADOWSYNC_FLAGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "shadowsync/status.h"

typedef enum ss__flag_type {
    SS_FLAG_STRING, /* dest: const char ** (points into argv/environ) */
    SS_FLAG_INT,    /* dest: int64_t * */
    SS_FLAG_DOUBLE, /* dest: double * */
    SS_FLAG_BOOL,   /* dest: bool * ("true/false/1/0/yes/no") */
    SS_FLAG_U32,    /* dest: uint32_t * (an int; min >= 0 and max <= UINT32_MAX) */
    SS_FLAG_FLOAT,  /* dest: float * (a double, rounded) */
} ss__flag_type;

typedef struct ss__flag {
    const char *name; /* without leading dashes */
    ss__flag_type type;
    void *dest; /* holds the default on entry: a field of the program's config, typed */
    const char *help;
    /* Optional checks. For STRING: a '|'-separated list of allowed values.
     * For INT/DOUBLE: inclusive range, checked when min < max. */
    const char *choices;
    double min, max;
} ss__flag;

/* Parses argv (argv[0] is the program). On "--help"/"-h" sets *help and
 * returns SS_OK without checking the rest. On a bad flag returns
 * SS_ERR_INVALID_ARGUMENT and writes a one-line reason to err. */
ss_status ss__flags_parse(const ss__flag *flags, size_t nflags, int argc, char **argv, bool *help,
                          char *err, size_t errlen);

/* Prints usage, then every flag with its type, default, env name and help. */
void ss__flags_print_help(FILE *out, const char *prog, const char *summary, const ss__flag *flags,
                          size_t nflags);

/* A program's name and what it does, for --help and --version. */
typedef struct ss__program {
    const char *name;    /* "shadowsync-ps" */
    const char *summary; /* a paragraph for --help */
} ss__program;

/* The command-line step of every main: parses argv against flags. --help
 * prints usage to stdout and --version "NAME (ShadowSync) X.Y.Z": both
 * return 0 (exit with it); a bad flag prints "NAME: reason" to stderr and
 * returns 2; -1: the flags are set, go on. */
int ss__flags_cli(const ss__program *prog, const ss__flag *flags, size_t nflags, int argc,
                  char **argv);

/* The project's version (CMakeLists.txt's project(VERSION), e.g. "0.2.0"). */
const char *ss__version(void);

/* Writes the env variable name of a flag ("sync-every" -> SHADOWSYNC_SYNC_EVERY). */
void ss__flags_env_name(const char *flag_name, char *out, size_t outlen);

#endif
