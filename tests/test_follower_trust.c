/* A follower that cannot be fooled by its directory: each attack of a
 * black-box probe planted in the directory a follower follows (in
 * process, a look every 10 ms), and what it must do instead. Entries are
 * written as the training PS writes them (a hidden directory renamed into
 * place) from a store and a centre of the test's own. */
#include <check.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check_run.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "common/private_files.h"
#include "embedding-store/emb_store.h"
#include "ps/deltas.h"
#include "shadow/central.h"

enum { DIM = 2 };

static char g_dir[64];  /* what the follower follows */
static char g_work[64]; /* everything else */
static ss__emb_store *g_train;
static ss__central *g_centre, *g_centre5; /* "dense" of 3 floats; of 5 */

static ss__central *centre(size_t n) {
    ss__central_config cfg = {.round_deadline_ms = 1000};
    ss__central *c;
    ck_assert_int_eq(ss__central_create(&cfg, &c, NULL, 0), SS_OK);
    uint64_t member;
    ck_assert_int_eq(ss__central_join(c, "dense", n, 0, &member), SS_OK);
    float s[5] = {1, 2, 3, 4, 5}, d[5];
    ck_assert_int_eq(ss__central_easgd(c, "dense", member, s, 0.5f, d, n), SS_OK);
    return c;
}

static void setup(void) {
    ss__check_tmpdir(g_dir, "ss-follow");
    ss__check_tmpdir(g_work, "ss-follow-work");
    ss__emb_store_config cfg = {0};
    ck_assert_int_eq(ss__emb_store_create(&cfg, &g_train, NULL, 0), SS_OK);
    ss__emb_store_track_changes(g_train);
    ss__emb_spec spec;
    ss__emb_spec_init(&spec, "t", DIM);
    ck_assert_int_eq(ss__emb_store_open_table(g_train, &spec, NULL, NULL, 0), SS_OK);
    g_centre = centre(3);
    g_centre5 = centre(5);
}

static void teardown(void) {
    ss__emb_store_destroy(g_train);
    ss__central_destroy(g_centre);
    ss__central_destroy(g_centre5);
    ss__remove_tree(g_dir);
    ss__remove_tree(g_work);
}

/* Row id gets gradient g on the training store. */
static void push(uint64_t id, float g) {
    const float grads[DIM] = {g, g};
    ck_assert_int_eq(ss__emb_store_push(g_train, "t", &id, 1, grads, NULL, 0), SS_OK);
}

/* Entry `seq` of kind `base` into dir, written whole then renamed into
 * place; its emb.delta's header says hdr_seq (0: seq) and its dense part
 * comes from dense (NULL: g_centre). */
static void publish_as(const char *dir, uint64_t seq, bool base, uint64_t hdr_seq,
                       ss__central *dense) {
    char tmp[128], path[192], final[192];
    snprintf(tmp, sizeof tmp, "%s/.tmp-XXXXXX", dir);
    ck_assert_ptr_nonnull(mkdtemp(tmp));
    snprintf(path, sizeof path, "%s/emb.delta", tmp);
    ck_assert_int_eq(ss__emb_store_write_delta(g_train, path, hdr_seq ? hdr_seq : seq, base, NULL),
                     SS_OK);
    snprintf(path, sizeof path, "%s/dense.ckpt", tmp);
    size_t groups;
    ck_assert_int_eq(ss__central_save_delta(dense ? dense : g_centre, path, base, &groups), SS_OK);
    ss__ps_delta_path(dir, seq, base, NULL, final, sizeof final);
    ck_assert_int_eq(rename(tmp, final), 0);
}

static void publish(uint64_t seq, bool base) {
    publish_as(g_dir, seq, base, 0, NULL);
}

typedef struct follower {
    ss__emb_store *store;
    ss__central *centre;
    ss__metrics *metrics;
    ss__ps_follower *f;
} follower;

static ss_status follow_dir(follower *fl, const char *dir, char *why, size_t whylen) {
    ss__emb_store_config scfg = {0};
    ss__central_config ccfg = {.round_deadline_ms = 1000};
    ck_assert_int_eq(ss__emb_store_create(&scfg, &fl->store, NULL, 0), SS_OK);
    ck_assert_int_eq(ss__central_create(&ccfg, &fl->centre, NULL, 0), SS_OK);
    ck_assert_int_eq(ss__metrics_create(&fl->metrics, NULL, 0), SS_OK);
    const ss__ps_follower_config cfg = {.dir = dir,
                                        .poll_ms = 10,
                                        .store = fl->store,
                                        .centre = fl->centre,
                                        .metrics = fl->metrics};
    return ss__ps_follower_start(&cfg, &fl->f, why, whylen);
}

static ss_status follow(follower *fl, char *why, size_t whylen) {
    return follow_dir(fl, g_dir, why, whylen);
}

static void follow_ok(follower *fl) {
    char why[300] = "";
    ck_assert_msg(follow(fl, why, sizeof why) == SS_OK, "%s", why);
}

static void unfollow(follower *fl) {
    ss__ps_follower_stop(fl->f);
    ss__emb_store_destroy(fl->store);
    ss__central_destroy(fl->centre);
    ss__metrics_destroy(fl->metrics);
}

/* The value of series (name and labels, as rendered) on fl's /metrics. */
static double series(follower *fl, const char *name) {
    char *text;
    size_t len;
    ck_assert_int_eq(ss__metrics_render(fl->metrics, &text, &len), SS_OK);
    double v = NAN;
    for (const char *p = text; (p = strstr(p, name)); p++)
        if ((p == text || p[-1] == '\n') && p[strlen(name)] == ' ') {
            v = strtod(p + strlen(name) + 1, NULL);
            break;
        }
    free(text);
    ck_assert_msg(!isnan(v), "no series %s", name);
    return v;
}

#define APPLIED         "shadowsync_follower_applied_seq"
#define REFUSED(reason) "shadowsync_follower_refused_total{reason=\"" reason "\"}"

/* Until series reaches at least want (5 s at most); its value then. */
static double wait_for(follower *fl, const char *name, double want) {
    for (int i = 0; i < 500 && series(fl, name) < want; i++)
        ss__sleep_ns(10000000ull);
    return series(fl, name);
}

/* Long enough for several looks to have happened. */
static void few_looks(void) {
    ss__sleep_ns(150000000ull);
}

/* Row id's first float on the follower (NAN: not held). */
static float row_of(follower *fl, uint64_t id) {
    float rows[DIM + 1];
    bool found;
    ck_assert_int_eq(ss__emb_store_read_full(fl->store, "t", &id, 1, rows, &found), SS_OK);
    return found ? rows[0] : NAN;
}

START_TEST(test_linked_entries_and_directories_are_refused) {
    /* An entry that is a link to a directory elsewhere (a real entry). */
    publish_as(g_work, 1, true, 0, NULL);
    char link[192], target[192];
    ss__ps_delta_path(g_work, 1, true, NULL, target, sizeof target);
    ss__ps_delta_path(g_dir, 1, true, NULL, link, sizeof link);
    ck_assert_int_eq(symlink(target, link), 0);
    follower fl;
    follow_ok(&fl);
    ck_assert_double_eq(wait_for(&fl, REFUSED("not_private"), 1), 1);
    ck_assert_double_eq(series(&fl, APPLIED), 0);
    /* A file of an entry that is a link. */
    push(1, 0.5f);
    publish_as(g_work, 2, true, 0, NULL);
    char entry[192], file[256];
    ss__ps_delta_path(g_dir, 2, true, NULL, entry, sizeof entry);
    ck_assert_int_eq(mkdir(entry, 0700), 0);
    ss__ps_delta_path(g_work, 2, true, "emb.delta", target, sizeof target);
    snprintf(file, sizeof file, "%s/emb.delta", entry);
    ck_assert_int_eq(symlink(target, file), 0);
    ss__ps_delta_path(g_work, 2, true, "dense.ckpt", target, sizeof target);
    snprintf(file, sizeof file, "%s/dense.ckpt", entry);
    ck_assert_int_eq(symlink(target, file), 0);
    ck_assert_double_eq(wait_for(&fl, REFUSED("not_private"), 2), 2);
    ck_assert_double_eq(series(&fl, APPLIED), 0);
    /* Neither hides the next good base. */
    publish(3, true);
    ck_assert_double_eq(wait_for(&fl, APPLIED, 3), 3);
    unfollow(&fl);
    /* The followed directory itself a link: refused at the start. */
    char why[300] = "";
    snprintf(link, sizeof link, "%s/linked", g_work);
    ck_assert_int_eq(symlink(g_dir, link), 0);
    ck_assert_int_eq(follow_dir(&fl, link, why, sizeof why), SS_ERR_PERMISSION);
    ck_assert_msg(strstr(why, "--follow") && strstr(why, "symbolic link"), "%s", why);
    fl.f = NULL;
    unfollow(&fl);
}
END_TEST

START_TEST(test_writable_by_others_is_refused) {
    publish(1, true);
    ck_assert_int_eq(chmod(g_dir, 0777), 0);
    follower fl;
    char why[300] = "";
    ck_assert_int_eq(follow(&fl, why, sizeof why), SS_ERR_PERMISSION);
    ck_assert_msg(strstr(why, "--follow") && strstr(why, "writable by others"), "%s", why);
    fl.f = NULL;
    unfollow(&fl);
    /* Made writable after the start: nothing is read from it meanwhile. */
    ck_assert_int_eq(chmod(g_dir, 0700), 0);
    follow_ok(&fl);
    ck_assert_double_eq(wait_for(&fl, APPLIED, 1), 1);
    ck_assert_int_eq(chmod(g_dir, 0772), 0);
    push(7, 1.0f);
    publish(2, false);
    few_looks();
    ck_assert_double_eq(series(&fl, APPLIED), 1);
    ck_assert_int_eq(chmod(g_dir, 0700), 0);
    ck_assert_double_eq(wait_for(&fl, APPLIED, 2), 2);
    /* What Kubernetes' fsGroup makes of a volume, the group the daemon's
     * own (setgid, group-writable): still the daemon's. */
    ck_assert_int_eq(chown(g_dir, (uid_t)-1, getegid()), 0);
    ck_assert_int_eq(chmod(g_dir, 02770), 0);
    /* An entry writable by others, and (as root) a file of another uid:
     * made aside, then renamed in, as a writer would. */
    push(8, 1.0f);
    publish(3, false);
    ck_assert_double_eq(wait_for(&fl, APPLIED, 3), 3);
    char entry[192], in_place[192];
    publish_as(g_work, 4, true, 0, NULL);
    ss__ps_delta_path(g_work, 4, true, NULL, entry, sizeof entry);
    ss__ps_delta_path(g_dir, 4, true, NULL, in_place, sizeof in_place);
    ck_assert_int_eq(chmod(entry, 0777), 0);
    ck_assert_int_eq(rename(entry, in_place), 0);
    ck_assert_double_eq(wait_for(&fl, REFUSED("not_private"), 1), 1);
    ck_assert_double_eq(series(&fl, APPLIED), 3);
    if (geteuid() == 0) {
        publish_as(g_work, 5, true, 0, NULL);
        ss__ps_delta_path(g_work, 5, true, "emb.delta", entry, sizeof entry);
        ck_assert_int_eq(chown(entry, 65534, 65534), 0);
        ss__ps_delta_path(g_work, 5, true, NULL, entry, sizeof entry);
        ss__ps_delta_path(g_dir, 5, true, NULL, in_place, sizeof in_place);
        ck_assert_int_eq(rename(entry, in_place), 0);
        ck_assert_double_eq(wait_for(&fl, REFUSED("not_private"), 2), 2);
        ck_assert_double_eq(series(&fl, APPLIED), 3);
    }
    unfollow(&fl);
}
END_TEST

START_TEST(test_replayed_entry_is_refused) {
    push(1, 0.5f);
    publish(1, true);
    push(1, 1.0f);
    publish(2, false);
    push(1, 2.0f);
    publish(3, false);
    follower fl;
    follow_ok(&fl);
    ck_assert_double_eq(wait_for(&fl, APPLIED, 3), 3);
    const float at3 = row_of(&fl, 1);
    /* Delta 2's files published again as delta 4: state 2 served as 4. */
    char cmd[1024], from[192], to[192];
    ss__ps_delta_path(g_dir, 2, false, NULL, from, sizeof from);
    ss__ps_delta_path(g_dir, 4, false, NULL, to, sizeof to);
    snprintf(cmd, sizeof cmd, "cp -r '%s' '%s/.replay' && mv '%s/.replay' '%s'", from, g_dir, g_dir,
             to);
    ck_assert_int_eq(system(cmd), 0);
    ck_assert_double_eq(wait_for(&fl, REFUSED("mismatch"), 1), 1);
    ck_assert_double_eq(series(&fl, APPLIED), 3);
    ck_assert_float_eq(row_of(&fl, 1), at3);
    /* A delta's files as a base of the same number: the kind is checked too. */
    publish_as(g_work, 5, false, 0, NULL);
    ss__ps_delta_path(g_work, 5, false, NULL, from, sizeof from);
    ss__ps_delta_path(g_dir, 5, true, NULL, to, sizeof to);
    ck_assert_int_eq(rename(from, to), 0);
    ck_assert_double_eq(wait_for(&fl, REFUSED("mismatch"), 2), 2);
    ck_assert_double_eq(series(&fl, APPLIED), 3);
    /* The next true base brings it back in step. */
    push(1, 4.0f);
    publish(6, true);
    ck_assert_double_eq(wait_for(&fl, APPLIED, 6), 6);
    ck_assert_float_ne(row_of(&fl, 1), at3);
    unfollow(&fl);
}
END_TEST

START_TEST(test_half_an_entry_applies_nothing) {
    push(1, 0.5f);
    publish(1, true);
    follower fl;
    follow_ok(&fl);
    ck_assert_double_eq(wait_for(&fl, APPLIED, 1), 1);
    const float before = row_of(&fl, 1);
    /* Delta 2: good rows, and a dense group "dense" of 5 floats where the
     * follower serves 3. */
    push(1, 1.0f);
    push(2, 1.0f);
    publish_as(g_dir, 2, false, 0, g_centre5);
    ck_assert_double_eq(wait_for(&fl, REFUSED("not_applicable"), 1), 1);
    ck_assert_double_eq(series(&fl, APPLIED), 1);
    ck_assert_float_eq(row_of(&fl, 1), before); /* no row of it applied */
    ck_assert(isnan(row_of(&fl, 2)));
    /* Delta 3 from another store: table "a" (new here) first, then a "t"
     * of another dim: not even "a" may apply. */
    ss__emb_store *other = g_train;
    ss__emb_store_config cfg = {0};
    ck_assert_int_eq(ss__emb_store_create(&cfg, &g_train, NULL, 0), SS_OK);
    ss__emb_store_track_changes(g_train);
    ss__emb_spec a, t3;
    ss__emb_spec_init(&a, "a", DIM);
    ss__emb_spec_init(&t3, "t", DIM + 1);
    ck_assert_int_eq(ss__emb_store_open_table(g_train, &a, NULL, NULL, 0), SS_OK);
    ck_assert_int_eq(ss__emb_store_open_table(g_train, &t3, NULL, NULL, 0), SS_OK);
    const uint64_t id = 9;
    const float g[DIM] = {1, 1};
    ck_assert_int_eq(ss__emb_store_push(g_train, "a", &id, 1, g, NULL, 0), SS_OK);
    publish(3, true);
    ck_assert_double_eq(wait_for(&fl, REFUSED("not_applicable"), 2), 2);
    ck_assert_double_eq(series(&fl, APPLIED), 1);
    float row[DIM + 1];
    bool found = false;
    const ss_status held = ss__emb_store_read_full(fl.store, "a", &id, 1, row, &found);
    ck_assert_msg(held != SS_OK || !found, "a row of the refused entry was applied");
    ss__emb_store_destroy(g_train);
    g_train = other;
    unfollow(&fl);
}
END_TEST

START_TEST(test_refused_entries_never_hide_later_ones) {
    publish(1, true);
    follower fl;
    follow_ok(&fl);
    ck_assert_double_eq(wait_for(&fl, APPLIED, 1), 1);
    /* An empty base of the largest number, there for a moment. */
    char entry[192];
    ss__ps_delta_path(g_dir, UINT64_MAX, true, NULL, entry, sizeof entry);
    ck_assert_int_eq(mkdir(entry, 0700), 0);
    ck_assert_double_eq(wait_for(&fl, REFUSED("out_of_range"), 1), 1);
    ck_assert_int_eq(rmdir(entry), 0);
    push(3, 1.0f);
    publish(2, false);
    publish(3, false);
    ck_assert_double_eq(wait_for(&fl, APPLIED, 3), 3);
    ck_assert_double_eq(series(&fl, "shadowsync_follower_behind_deltas"), 0);
    /* An empty delta in sequence: refused, and the next base re-bases. */
    ss__ps_delta_path(g_dir, 4, false, NULL, entry, sizeof entry);
    ck_assert_int_eq(mkdir(entry, 0700), 0);
    ck_assert_double_eq(wait_for(&fl, REFUSED("unreadable"), 1), 1);
    publish(5, true);
    ck_assert_double_eq(wait_for(&fl, APPLIED, 5), 5);
    unfollow(&fl);
}
END_TEST

SS_CHECK_MAIN("follower_trust", 60, setup, teardown,
              test_linked_entries_and_directories_are_refused, test_writable_by_others_is_refused,
              test_replayed_entry_is_refused, test_half_an_entry_applies_nothing,
              test_refused_entries_never_hide_later_ones)
