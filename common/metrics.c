#include "common/metrics.h"

#include "common/flags.h"
#include "common/grow.h"
#include "common/strbuf.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* KIND_FLOAT_COUNTER: a counter of a non-integer total (CPU seconds),
 * stored as a gauge's double, typed "counter". */
typedef enum { KIND_COUNTER, KIND_GAUGE, KIND_HISTOGRAM, KIND_FLOAT_COUNTER } metric_kind;

/* Doubles are stored as their bit pattern so updates stay lock-free. */
typedef _Atomic uint64_t atomic_double_bits;

static double bits_to_double(uint64_t b) {
    double d;
    memcpy(&d, &b, sizeof d);
    return d;
}

static uint64_t double_to_bits(double d) {
    uint64_t b;
    memcpy(&b, &d, sizeof b);
    return b;
}

static void atomic_double_add(atomic_double_bits *a, double v) {
    uint64_t old = atomic_load_explicit(a, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(a, &old, double_to_bits(bits_to_double(old) + v),
                                                  memory_order_relaxed, memory_order_relaxed)) {
    }
}

struct ss__counter {
    _Atomic uint64_t value;
};
struct ss__gauge {
    atomic_double_bits value;
};
struct ss__histogram {
    size_t nbounds;
    double *bounds;
    _Atomic uint64_t *buckets; /* nbounds + 1, last is +Inf; not cumulative */
    _Atomic uint64_t count;
    atomic_double_bits sum;
};

typedef struct series {
    char *labels; /* rendered `k="v",k2="v2"` or "" */
    union {
        ss__counter counter;
        ss__gauge gauge;
        ss__histogram hist;
    } u;
} series;

typedef struct family {
    char *name;
    char *help;
    metric_kind kind;
    series **series;
    size_t nseries, capseries;
} family;

typedef struct hold {
    char *label; /* rendered k="v" */
    size_t count;
} hold;

struct ss__metrics {
    pthread_mutex_t lock;
    family *families;
    size_t nfamilies, capfamilies;
    hold *holds;
    size_t nholds, capholds;
};

int ss__metrics_name_valid(const char *name) {
    if (!name || !*name)
        return 0;
    for (const char *p = name; *p; p++) {
        char c = *p;
        bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
        bool digit = c >= '0' && c <= '9';
        if (!(alpha || (digit && p != name)))
            return 0;
    }
    return 1;
}

ss_status ss__metrics_create(ss__metrics **out, char *why, size_t whylen) {
    if (!out)
        return ss__fail(why, whylen, SS_ERR_INVALID_ARGUMENT, "no place for the registry");
    ss__metrics *reg = calloc(1, sizeof *reg);
    if (!reg)
        return ss__fail(why, whylen, SS_ERR_NO_MEMORY, "no memory for a metrics registry");
    pthread_mutex_init(&reg->lock, NULL);
    *out = reg;
    return SS_OK;
}

void ss__metrics_destroy(ss__metrics *reg) {
    if (!reg)
        return;
    for (size_t i = 0; i < reg->nfamilies; i++) {
        family *f = &reg->families[i];
        for (size_t j = 0; j < f->nseries; j++) {
            series *s = f->series[j];
            if (f->kind == KIND_HISTOGRAM) {
                free(s->u.hist.bounds);
                free((void *)s->u.hist.buckets);
            }
            free(s->labels);
            free(s);
        }
        free(f->series);
        free(f->name);
        free(f->help);
    }
    free(reg->families);
    for (size_t i = 0; i < reg->nholds; i++)
        free(reg->holds[i].label);
    free(reg->holds);
    pthread_mutex_destroy(&reg->lock);
    free(reg);
}

/* Escapes a label value per the exposition format: backslash, quote, newline. */
static size_t escape_into(char *dst, const char *src) {
    size_t n = 0;
    for (const char *p = src; *p; p++) {
        if (*p == '\\' || *p == '"') {
            if (dst)
                dst[n] = '\\';
            n++;
            if (dst)
                dst[n] = *p;
            n++;
        } else if (*p == '\n') {
            if (dst) {
                dst[n] = '\\';
                dst[n + 1] = 'n';
            }
            n += 2;
        } else {
            if (dst)
                dst[n] = *p;
            n++;
        }
    }
    return n;
}

static ss_status render_labels(const char *const *labels, char **out) {
    size_t len = 0;
    for (size_t i = 0; labels && labels[i]; i += 2) {
        if (!labels[i + 1] || !ss__metrics_name_valid(labels[i]) || strchr(labels[i], ':'))
            return SS_ERR_INVALID_ARGUMENT;
        len += strlen(labels[i]) + 4 + escape_into(NULL, labels[i + 1]);
    }
    char *s = malloc(len + 1);
    if (!s)
        return SS_ERR_NO_MEMORY;
    size_t o = 0;
    for (size_t i = 0; labels && labels[i]; i += 2) {
        if (o)
            s[o++] = ',';
        size_t kl = strlen(labels[i]);
        memcpy(s + o, labels[i], kl);
        o += kl;
        s[o++] = '=';
        s[o++] = '"';
        o += escape_into(s + o, labels[i + 1]);
        s[o++] = '"';
    }
    s[o] = '\0';
    *out = s;
    return SS_OK;
}

/* hist_init, when non-NULL, is installed into a newly created series under
 * the lock, so no reader ever sees a histogram without buckets. */
static ss_status get_series(ss__metrics *reg, const char *name, const char *help, metric_kind kind,
                            const char *const *labels, const ss__histogram *hist_init, series **out,
                            bool *created) {
    if (!reg || !out || !ss__metrics_name_valid(name) || !help)
        return SS_ERR_INVALID_ARGUMENT;
    char *lab = NULL;
    ss_status st = render_labels(labels, &lab);
    if (st != SS_OK)
        return st;
    pthread_mutex_lock(&reg->lock);
    family *f = NULL;
    for (size_t i = 0; i < reg->nfamilies; i++)
        if (!strcmp(reg->families[i].name, name))
            f = &reg->families[i];
    if (f && (f->kind != kind || strcmp(f->help, help))) {
        st = SS_ERR_EXISTS;
        goto out;
    }
    if (!f) {
        if (!SS_GROW(reg->families, reg->capfamilies, reg->nfamilies, 16)) {
            st = SS_ERR_NO_MEMORY;
            goto out;
        }
        f = &reg->families[reg->nfamilies];
        memset(f, 0, sizeof *f);
        f->name = strdup(name);
        f->help = strdup(help);
        f->kind = kind;
        if (!f->name || !f->help) {
            free(f->name);
            free(f->help);
            st = SS_ERR_NO_MEMORY;
            goto out;
        }
        reg->nfamilies++;
    }
    for (size_t j = 0; j < f->nseries; j++) {
        if (!strcmp(f->series[j]->labels, lab)) {
            *out = f->series[j];
            *created = false;
            goto out;
        }
    }
    if (!SS_GROW(f->series, f->capseries, f->nseries, 4)) {
        st = SS_ERR_NO_MEMORY;
        goto out;
    }
    series *s = calloc(1, sizeof *s);
    if (!s) {
        st = SS_ERR_NO_MEMORY;
        goto out;
    }
    s->labels = lab;
    lab = NULL;
    if (hist_init) {
        s->u.hist.nbounds = hist_init->nbounds;
        s->u.hist.bounds = hist_init->bounds;
        s->u.hist.buckets = hist_init->buckets;
    }
    f->series[f->nseries++] = s;
    *out = s;
    *created = true;
out:
    pthread_mutex_unlock(&reg->lock);
    free(lab);
    return st;
}

/* The hold of label (rendered) or NULL. Caller holds the lock. */
static hold *find_hold(ss__metrics *reg, const char *label) {
    for (size_t i = 0; i < reg->nholds; i++)
        if (!strcmp(reg->holds[i].label, label))
            return &reg->holds[i];
    return NULL;
}

/* labels (`k="v",k2="v2"`) has the element label, whole. */
static bool has_label(const char *labels, const char *label) {
    size_t n = strlen(label);
    for (const char *p = labels; (p = strstr(p, label)); p++)
        if ((p == labels || p[-1] == ',') && (p[n] == ',' || p[n] == '\0'))
            return true;
    return false;
}

static void free_series(family *f, series *s) {
    if (f->kind == KIND_HISTOGRAM) {
        free(s->u.hist.bounds);
        free((void *)s->u.hist.buckets);
    }
    free(s->labels);
    free(s);
}

ss_status ss__metrics_hold(ss__metrics *reg, const char *key, const char *value) {
    char *label = NULL;
    ss_status st = render_labels((const char *const[]){key, value, NULL}, &label);
    if (st != SS_OK)
        return st;
    pthread_mutex_lock(&reg->lock);
    hold *h = find_hold(reg, label);
    if (h) {
        h->count++;
        free(label);
    } else {
        if (SS_GROW(reg->holds, reg->capholds, reg->nholds, 8)) {
            reg->holds[reg->nholds++] = (hold){.label = label, .count = 1};
        } else {
            free(label);
            st = SS_ERR_NO_MEMORY;
        }
    }
    pthread_mutex_unlock(&reg->lock);
    return st;
}

void ss__metrics_drop(ss__metrics *reg, const char *key, const char *value) {
    char *label = NULL;
    if (render_labels((const char *const[]){key, value, NULL}, &label) != SS_OK)
        return;
    pthread_mutex_lock(&reg->lock);
    hold *h = find_hold(reg, label);
    if (h && --h->count == 0) {
        free(h->label);
        *h = reg->holds[--reg->nholds];
        for (size_t i = 0; i < reg->nfamilies; i++) {
            family *f = &reg->families[i];
            size_t kept = 0;
            for (size_t j = 0; j < f->nseries; j++) {
                if (has_label(f->series[j]->labels, label))
                    free_series(f, f->series[j]);
                else
                    f->series[kept++] = f->series[j];
            }
            f->nseries = kept;
        }
    }
    pthread_mutex_unlock(&reg->lock);
    free(label);
}

ss_status ss__metrics_counter(ss__metrics *reg, const char *name, const char *help,
                              const char *const *labels, ss__counter **out) {
    series *s;
    bool created;
    ss_status st = get_series(reg, name, help, KIND_COUNTER, labels, NULL, &s, &created);
    if (st == SS_OK)
        *out = &s->u.counter;
    return st;
}

void ss__metrics_count(ss__metrics *reg, const char *name, const char *help, const char *key,
                       const char *value, uint64_t n) {
    ss__counter *c;
    if (ss__metrics_counter(reg, name, help, (const char *const[]){key, value, NULL}, &c) == SS_OK)
        ss__counter_add(c, n);
}

/* A series whose value is a double: a gauge, or a float counter. */
static ss_status double_series(ss__metrics *reg, metric_kind kind, const char *name,
                               const char *help, const char *const *labels, ss__gauge **out) {
    series *s;
    bool created;
    ss_status st = get_series(reg, name, help, kind, labels, NULL, &s, &created);
    if (st == SS_OK)
        *out = &s->u.gauge;
    return st;
}

ss_status ss__metrics_float_counter(ss__metrics *reg, const char *name, const char *help,
                                    const char *const *labels, ss__gauge **out) {
    return double_series(reg, KIND_FLOAT_COUNTER, name, help, labels, out);
}

ss_status ss__metrics_gauge(ss__metrics *reg, const char *name, const char *help,
                            const char *const *labels, ss__gauge **out) {
    return double_series(reg, KIND_GAUGE, name, help, labels, out);
}

ss_status ss__metrics_histogram(ss__metrics *reg, const char *name, const char *help,
                                const char *const *labels, const double *bounds, size_t nbounds,
                                ss__histogram **out) {
    if (!bounds || nbounds == 0)
        return SS_ERR_INVALID_ARGUMENT;
    for (size_t i = 0; i < nbounds; i++)
        if (!isfinite(bounds[i]) || (i && bounds[i] <= bounds[i - 1]))
            return SS_ERR_INVALID_ARGUMENT;
    series *s;
    bool created;
    ss__histogram init = {.nbounds = nbounds};
    init.bounds = malloc(nbounds * sizeof *init.bounds);
    init.buckets = calloc(nbounds + 1, sizeof *init.buckets);
    if (!init.bounds || !init.buckets) {
        free(init.bounds);
        free((void *)init.buckets);
        return SS_ERR_NO_MEMORY;
    }
    memcpy(init.bounds, bounds, nbounds * sizeof *init.bounds);
    ss_status st = get_series(reg, name, help, KIND_HISTOGRAM, labels, &init, &s, &created);
    if (st != SS_OK || !created) {
        free(init.bounds);
        free((void *)init.buckets);
    }
    if (st == SS_OK)
        *out = &s->u.hist;
    return st;
}

void ss__counter_add(ss__counter *c, uint64_t v) {
    atomic_fetch_add_explicit(&c->value, v, memory_order_relaxed);
}
uint64_t ss__counter_value(const ss__counter *c) {
    return atomic_load_explicit(&((ss__counter *)c)->value, memory_order_relaxed);
}
void ss__gauge_set(ss__gauge *g, double v) {
    atomic_store_explicit(&g->value, double_to_bits(v), memory_order_relaxed);
}
void ss__gauge_add(ss__gauge *g, double v) {
    atomic_double_add(&g->value, v);
}
double ss__gauge_value(const ss__gauge *g) {
    return bits_to_double(atomic_load_explicit(&((ss__gauge *)g)->value, memory_order_relaxed));
}

void ss__histogram_observe(ss__histogram *h, double v) {
    size_t i = 0;
    while (i < h->nbounds && v > h->bounds[i])
        i++;
    atomic_fetch_add_explicit(&h->buckets[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
    atomic_double_add(&h->sum, v);
}
uint64_t ss__histogram_count(const ss__histogram *h) {
    return atomic_load_explicit(&((ss__histogram *)h)->count, memory_order_relaxed);
}
double ss__histogram_sum(const ss__histogram *h) {
    return bits_to_double(atomic_load_explicit(&((ss__histogram *)h)->sum, memory_order_relaxed));
}

/* Prometheus wants +Inf/-Inf/NaN spelled this way; %.17g round-trips doubles. */
static void sb_double(ss__strbuf *b, double v) {
    if (isnan(v))
        ss__strbuf_printf(b, "NaN");
    else if (isinf(v))
        ss__strbuf_printf(b, v > 0 ? "+Inf" : "-Inf");
    else
        ss__strbuf_printf(b, "%.17g", v);
}

static void render_help(ss__strbuf *b, const char *help) {
    for (const char *p = help; *p; p++) {
        if (*p == '\\')
            ss__strbuf_printf(b, "\\\\");
        else if (*p == '\n')
            ss__strbuf_printf(b, "\\n");
        else
            ss__strbuf_printf(b, "%c", *p);
    }
}

static void render_histogram(ss__strbuf *b, const char *name, const series *s) {
    const ss__histogram *h = &s->u.hist;
    const char *sep = s->labels[0] ? "," : "";
    uint64_t cum = 0;
    for (size_t i = 0; i <= h->nbounds; i++) {
        cum += atomic_load_explicit(&((ss__histogram *)h)->buckets[i], memory_order_relaxed);
        ss__strbuf_printf(b, "%s_bucket{%s%sle=\"", name, s->labels, sep);
        if (i < h->nbounds)
            sb_double(b, h->bounds[i]);
        else
            ss__strbuf_printf(b, "+Inf");
        ss__strbuf_printf(b, "\"} %llu\n", (unsigned long long)cum);
    }
    const char *lb = s->labels[0] ? "{" : "", *rb = s->labels[0] ? "}" : "";
    ss__strbuf_printf(b, "%s_sum%s%s%s ", name, lb, s->labels, rb);
    sb_double(b, ss__histogram_sum(h));
    /* _count equals the +Inf bucket so a scrape is self-consistent. */
    ss__strbuf_printf(b, "\n%s_count%s%s%s %llu\n", name, lb, s->labels, rb,
                      (unsigned long long)cum);
}

ss_status ss__metrics_render(ss__metrics *reg, char **out, size_t *len) {
    if (!reg || !out)
        return SS_ERR_INVALID_ARGUMENT;
    ss__strbuf b = {0};
    static const char *const type_names[] = {"counter", "gauge", "histogram", "counter"};
    pthread_mutex_lock(&reg->lock);
    for (size_t i = 0; i < reg->nfamilies; i++) {
        const family *f = &reg->families[i];
        ss__strbuf_printf(&b, "# HELP %s ", f->name);
        render_help(&b, f->help);
        ss__strbuf_printf(&b, "\n# TYPE %s %s\n", f->name, type_names[f->kind]);
        for (size_t j = 0; j < f->nseries; j++) {
            const series *s = f->series[j];
            if (f->kind == KIND_HISTOGRAM) {
                render_histogram(&b, f->name, s);
                continue;
            }
            if (s->labels[0])
                ss__strbuf_printf(&b, "%s{%s} ", f->name, s->labels);
            else
                ss__strbuf_printf(&b, "%s ", f->name);
            if (f->kind == KIND_COUNTER)
                ss__strbuf_printf(&b, "%llu\n",
                                  (unsigned long long)ss__counter_value(&s->u.counter));
            else {
                sb_double(&b, ss__gauge_value(&s->u.gauge));
                ss__strbuf_printf(&b, "\n");
            }
        }
    }
    pthread_mutex_unlock(&reg->lock);
    return ss__strbuf_take(&b, out, len);
}

ss_status ss__metrics_build_info(ss__metrics *reg) {
    const char *labels[] = {"version", ss__version(), NULL};
    ss__gauge *g;
    ss_status st =
        ss__metrics_gauge(reg, "shadowsync_build_info",
                          "1, labelled with the ShadowSync version of this process", labels, &g);
    if (st == SS_OK)
        ss__gauge_set(g, 1);
    return st;
}
