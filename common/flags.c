#include "common/flags.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"

void ss__flags_env_name(const char *flag_name, char *out, size_t outlen) {
    static const char prefix[] = "SHADOWSYNC_";
    size_t o = 0;
    for (size_t i = 0; prefix[i] && o + 1 < outlen; i++)
        out[o++] = prefix[i];
    for (size_t i = 0; flag_name[i] && o + 1 < outlen; i++) {
        char c = flag_name[i];
        out[o++] = (c == '-') ? '_' : (char)toupper((unsigned char)c);
    }
    if (outlen)
        out[o] = '\0';
}

static bool choice_allowed(const char *choices, const char *value) {
    size_t vlen = strlen(value);
    const char *p = choices;
    while (*p) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == vlen && strncmp(p, value, len) == 0)
            return true;
        if (!bar)
            break;
        p = bar + 1;
    }
    return false;
}

static ss_status set_value(const ss__flag *f, const char *value, const char *source, char *err,
                           size_t errlen) {
    char *end = NULL;
    switch (f->type) {
    case SS_FLAG_STRING:
        if (f->choices && !choice_allowed(f->choices, value)) {
            snprintf(err, errlen, "%s --%s: '%s' is not one of %s", source, f->name, value,
                     f->choices);
            return SS_ERR_INVALID_ARGUMENT;
        }
        *(const char **)f->dest = value;
        return SS_OK;
    case SS_FLAG_INT:
    case SS_FLAG_U32: {
        errno = 0;
        long long v = strtoll(value, &end, 10);
        if (errno || end == value || *end != '\0') {
            snprintf(err, errlen, "%s --%s: '%s' is not an integer", source, f->name, value);
            return SS_ERR_INVALID_ARGUMENT;
        }
        if (f->min < f->max && ((double)v < f->min || (double)v > f->max)) {
            snprintf(err, errlen, "%s --%s: %lld is outside [%.17g, %.17g]", source, f->name, v,
                     f->min, f->max);
            return SS_ERR_INVALID_ARGUMENT;
        }
        if (f->type == SS_FLAG_U32 && (v < 0 || (unsigned long long)v > UINT32_MAX)) {
            snprintf(err, errlen, "%s --%s: %lld is outside [0, %u]", source, f->name, v,
                     UINT32_MAX);
            return SS_ERR_INVALID_ARGUMENT;
        }
        if (f->type == SS_FLAG_U32)
            *(uint32_t *)f->dest = (uint32_t)v;
        else
            *(int64_t *)f->dest = (int64_t)v;
        return SS_OK;
    }
    case SS_FLAG_DOUBLE:
    case SS_FLAG_FLOAT: {
        errno = 0;
        double v = strtod(value, &end);
        if (errno || end == value || *end != '\0' || !isfinite(v)) {
            snprintf(err, errlen, "%s --%s: '%s' is not a finite number", source, f->name, value);
            return SS_ERR_INVALID_ARGUMENT;
        }
        if (f->min < f->max && (v < f->min || v > f->max)) {
            snprintf(err, errlen, "%s --%s: %g is outside [%g, %g]", source, f->name, v, f->min,
                     f->max);
            return SS_ERR_INVALID_ARGUMENT;
        }
        if (f->type == SS_FLAG_FLOAT)
            *(float *)f->dest = (float)v;
        else
            *(double *)f->dest = v;
        return SS_OK;
    }
    case SS_FLAG_BOOL:
        if (!strcmp(value, "true") || !strcmp(value, "1") || !strcmp(value, "yes")) {
            *(bool *)f->dest = true;
        } else if (!strcmp(value, "false") || !strcmp(value, "0") || !strcmp(value, "no")) {
            *(bool *)f->dest = false;
        } else {
            snprintf(err, errlen, "%s --%s: '%s' is not a boolean", source, f->name, value);
            return SS_ERR_INVALID_ARGUMENT;
        }
        return SS_OK;
    }
    return SS_ERR_INTERNAL;
}

static const ss__flag *find_flag(const ss__flag *flags, size_t n, const char *name, size_t len) {
    for (size_t i = 0; i < n; i++)
        if (strlen(flags[i].name) == len && strncmp(flags[i].name, name, len) == 0)
            return &flags[i];
    return NULL;
}

ss_status ss__flags_parse(const ss__flag *flags, size_t nflags, int argc, char **argv, bool *help,
                          char *err, size_t errlen) {
    if (!flags || !argv || !help || !err)
        return SS_ERR_INVALID_ARGUMENT;
    *help = false;
    err[0] = '\0';
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            *help = true;
            return SS_OK;
        }
    }
    for (size_t i = 0; i < nflags; i++) {
        char env_name[128];
        ss__flags_env_name(flags[i].name, env_name, sizeof env_name);
        const char *env = getenv(env_name);
        if (env && *env) {
            char source[160];
            snprintf(source, sizeof source, "environment %s for", env_name);
            ss_status st = set_value(&flags[i], env, source, err, errlen);
            if (st != SS_OK)
                return st;
        }
    }
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0') {
            snprintf(err, errlen, "unexpected argument '%s' (flags start with --)", arg);
            return SS_ERR_INVALID_ARGUMENT;
        }
        const char *name = arg + 2;
        const char *eq = strchr(name, '=');
        size_t name_len = eq ? (size_t)(eq - name) : strlen(name);
        const ss__flag *f = find_flag(flags, nflags, name, name_len);
        if (!f) {
            snprintf(err, errlen, "unknown flag '--%.*s' (see --help)", (int)name_len, name);
            return SS_ERR_INVALID_ARGUMENT;
        }
        const char *value;
        if (eq) {
            value = eq + 1;
        } else if (f->type == SS_FLAG_BOOL &&
                   (i + 1 >= argc || strncmp(argv[i + 1], "--", 2) == 0)) {
            value = "true";
        } else if (i + 1 < argc) {
            value = argv[++i];
        } else {
            snprintf(err, errlen, "flag --%s needs a value", f->name);
            return SS_ERR_INVALID_ARGUMENT;
        }
        ss_status st = set_value(f, value, "flag", err, errlen);
        if (st != SS_OK)
            return st;
    }
    return SS_OK;
}

static const char *type_name(ss__flag_type t) {
    switch (t) {
    case SS_FLAG_STRING:
        return "string";
    case SS_FLAG_INT:
    case SS_FLAG_U32:
        return "int";
    case SS_FLAG_DOUBLE:
    case SS_FLAG_FLOAT:
        return "float";
    case SS_FLAG_BOOL:
        return "bool";
    }
    return "?";
}

void ss__flags_print_help(FILE *out, const char *prog, const char *summary, const ss__flag *flags,
                          size_t nflags) {
    fprintf(out, "Usage: %s [flags]\n\n%s\n\nFlags (environment fallback in brackets):\n", prog,
            summary);
    for (size_t i = 0; i < nflags; i++) {
        const ss__flag *f = &flags[i];
        char env_name[128], def[128];
        ss__flags_env_name(f->name, env_name, sizeof env_name);
        switch (f->type) {
        case SS_FLAG_STRING: {
            const char *v = *(const char **)f->dest;
            snprintf(def, sizeof def, "%s", v ? v : "(none)");
            break;
        }
        case SS_FLAG_INT:
            snprintf(def, sizeof def, "%lld", (long long)*(int64_t *)f->dest);
            break;
        case SS_FLAG_DOUBLE:
            snprintf(def, sizeof def, "%g", *(double *)f->dest);
            break;
        case SS_FLAG_U32:
            snprintf(def, sizeof def, "%u", *(uint32_t *)f->dest);
            break;
        case SS_FLAG_FLOAT:
            snprintf(def, sizeof def, "%g", (double)*(float *)f->dest);
            break;
        case SS_FLAG_BOOL:
            snprintf(def, sizeof def, "%s", *(bool *)f->dest ? "true" : "false");
            break;
        }
        fprintf(out, "  --%-22s %-6s %s\n  %24s [%s] default: %s%s%s\n", f->name,
                type_name(f->type), f->help, "", env_name, def, f->choices ? "; one of " : "",
                f->choices ? f->choices : "");
    }
    fprintf(out, "  --%-22s        print this help and exit\n", "help");
    fprintf(out, "  --%-22s        print the version and exit\n", "version");
}

const char *ss__version(void) {
    return SS_VERSION;
}

int ss__flags_cli(const ss__program *prog, const ss__flag *flags, size_t nflags, int argc,
                  char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--version")) {
            printf("%s (ShadowSync) %s\n", prog->name, SS_VERSION);
            return 0;
        }
    }
    /* Every program's own flags, then the ones every program has. */
    ss__flag *all = malloc((nflags + 1) * sizeof *all);
    if (!all) {
        fprintf(stderr, "%s: out of memory\n", prog->name);
        return 1;
    }
    memcpy(all, flags, nflags * sizeof *flags);
    const char *log_format = "text";
    all[nflags] = (ss__flag){"log-format",
                             SS_FLAG_STRING,
                             &log_format,
                             "log lines as text (ts level component key=value ...) or json (one "
                             "object per line)",
                             "text|json",
                             0,
                             0};
    bool help = false;
    char err[256];
    ss_status st = ss__flags_parse(all, nflags + 1, argc, argv, &help, err, sizeof err);
    if (st == SS_OK && help)
        ss__flags_print_help(stdout, prog->name, prog->summary, all, nflags + 1);
    free(all);
    if (st != SS_OK) {
        fprintf(stderr, "%s: %s\n", prog->name, err);
        return 2;
    }
    if (help)
        return 0;
    ss__log_format format;
    ss__log_format_parse(log_format, &format); /* one of its choices */
    ss__log_set_format(format);
    /* A level the logger does not know would be ignored silently. */
    const char *level = getenv("SHADOWSYNC_LOG_LEVEL");
    ss__log_level parsed;
    if (level && *level && ss__log_level_parse(level, &parsed) != SS_OK) {
        fprintf(stderr,
                "%s: SHADOWSYNC_LOG_LEVEL=%s is not a level (debug, info, warn, error, off)\n",
                prog->name, level);
        return 2;
    }
    return -1;
}
