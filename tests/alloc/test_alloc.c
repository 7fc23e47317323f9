/*
 * test_alloc.c — allocation-failure injection over the CPU paths.
 *
 * This executable is linked against the static library with
 * -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=free: every
 * allocation of the library's objects (and of this file) goes through the
 * wrappers below, which count the allocations of an armed window and make
 * the n-th one fail. For every path — context creation, fls_sample_logits
 * and fls_sample_fused with every method, the rule family (filters, without
 * replacement, the exact second pass), the grouped method, and every
 * streaming call (create, feed logits / fused, skip, merge, serialize,
 * deserialize, finalize) — the call is repeated with n = 1, 2, ... until it
 * makes fewer than n allocations. Each time:
 *   - the status is FLS_ERR_OUT_OF_MEMORY, or FLS_OK with the outputs of a
 *     run without failures (a path that recovers must still be right);
 *   - on an error nothing is written: the outputs keep their guard bytes, an
 *     object pointer keeps its guard value, a stream keeps its state (it is
 *     then driven to the end without failures and must give the tokens of a
 *     run without failures);
 *   - nothing leaks: the wrappers' count of live allocations is back where it
 *     was (under ASan and valgrind their own leak checks run as well).
 * The glibc internals (thread creation) do not go through the wrappers.
 * Suite 'unit'; a few seconds natively.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flashsample.h"

/* ---- the wrappers ---- */

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t s);
void *__real_realloc(void *p, size_t n);
void __real_free(void *p);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t s);
void *__wrap_realloc(void *p, size_t n);
void __wrap_free(void *p);

static atomic_long g_count;   /* allocations in the armed window */
static atomic_long g_fail_at; /* 0: none fails; n: the n-th of the window fails */
static atomic_int g_armed;

/* Live allocations made through the wrappers: an open-addressing set. */
#define SET_BITS 18
#define SET_SIZE ((size_t)1 << SET_BITS)
#define TOMB     ((void *)1)
static void *g_set[SET_SIZE];
static long g_live;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

static size_t slot_of(const void *p)
{
    uint64_t h = (uint64_t)(uintptr_t)p * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> (64 - SET_BITS));
}

static void set_add(void *p)
{
    pthread_mutex_lock(&g_lock);
    size_t i = slot_of(p);
    while (g_set[i] && g_set[i] != TOMB)
        i = (i + 1) & (SET_SIZE - 1);
    g_set[i] = p;
    g_live++;
    pthread_mutex_unlock(&g_lock);
}

/* Removes p; 1 if it was there. */
static int set_remove(void *p)
{
    pthread_mutex_lock(&g_lock);
    size_t i = slot_of(p);
    int found = 0;
    while (g_set[i]) {
        if (g_set[i] == p) {
            g_set[i] = TOMB;
            g_live--;
            found = 1;
            break;
        }
        i = (i + 1) & (SET_SIZE - 1);
    }
    pthread_mutex_unlock(&g_lock);
    return found;
}

static long live(void)
{
    pthread_mutex_lock(&g_lock);
    long n = g_live;
    pthread_mutex_unlock(&g_lock);
    return n;
}

/* Whether this allocation is to fail. */
static int fail_now(void)
{
    if (!atomic_load(&g_armed))
        return 0;
    long c = atomic_fetch_add(&g_count, 1) + 1;
    return c == atomic_load(&g_fail_at);
}

void *__wrap_malloc(size_t n)
{
    if (fail_now())
        return NULL;
    void *p = __real_malloc(n);
    if (p)
        set_add(p);
    return p;
}

void *__wrap_calloc(size_t n, size_t s)
{
    if (fail_now())
        return NULL;
    void *p = __real_calloc(n, s);
    if (p)
        set_add(p);
    return p;
}

void *__wrap_realloc(void *p, size_t n)
{
    if (fail_now())
        return NULL; /* p stays valid, as realloc's contract says */
    void *q = __real_realloc(p, n);
    if (q || n == 0) {
        if (p)
            set_remove(p);
        if (q)
            set_add(q);
    }
    return q;
}

void __wrap_free(void *p)
{
    if (p)
        set_remove(p); /* (memory from Criterion's own shared library is not in the set) */
    __real_free(p);
}

static void arm(long n)
{
    atomic_store(&g_count, 0);
    atomic_store(&g_fail_at, n);
    atomic_store(&g_armed, 1);
}

/* Disarms; returns whether the n-th allocation was reached (and failed). */
static int disarm(void)
{
    atomic_store(&g_armed, 0);
    return atomic_load(&g_count) >= atomic_load(&g_fail_at);
}

/* ---- inputs ---- */

#define B  3
#define V  300
#define D  16
#define DR 2

static float g_logits[B * V], g_flat[2 * 3000], g_w32[V * D];
static uint16_t g_wbf[V * D];
static float g_h[B * D], g_temps[B] = {0.7f, 1.0f, 0.0f};
static uint64_t g_seeds[B] = {11, 22, 33};

static uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static float unif(uint64_t i)
{
    return (float)((double)(mix(i + 1) >> 11) * (1.0 / 9007199254740992.0));
}

static void inputs(void)
{
    for (int i = 0; i < B * V; i++)
        g_logits[i] = 4.0f * unif((uint64_t)i) - 2.0f;
    g_logits[5] = -INFINITY; /* a masked token */
    for (int i = 0; i < 2 * 3000; i++)
        g_flat[i] = 0.01f * unif(100000u + (uint64_t)i); /* nearly flat: a nucleus beyond the top list */
    for (int i = 0; i < V * D; i++) {
        g_w32[i] = unif(200000u + (uint64_t)i) - 0.5f;
        g_wbf[i] = fls_f32_to_bf16(g_w32[i]);
    }
    for (int i = 0; i < B * D; i++)
        g_h[i] = 2.0f * unif(300000u + (uint64_t)i) - 1.0f;
}

static fls_context_t *new_ctx(int threads)
{
    fls_context_config cfg;
    fls_context_config_default(&cfg);
    cfg.threads = threads;
    fls_context_t *ctx = NULL;
    cr_assert_eq(fls_context_create(&ctx, &cfg), FLS_OK);
    return ctx;
}

/* ---- outputs with guards ---- */

#define MAXOUT    (B * DR * 4)
#define TOK_GUARD 0x5A5A5A5A5A5A5A5Aull
#define F_GUARD   0xA5A5A5A5u

typedef struct outs {
    int64_t tok[MAXOUT];
    float lse[B], lp[MAXOUT];
} outs;

static void guard(outs *o)
{
    memset(o, 0, sizeof *o); /* the padding too: outputs are compared with memcmp */
    memset(o->tok, 0x5A, sizeof o->tok);
    memset(o->lse, 0xA5, sizeof o->lse);
    memset(o->lp, 0xA5, sizeof o->lp);
}

static int guarded(const outs *o)
{
    outs g;
    guard(&g);
    return !memcmp(o, &g, sizeof g);
}

static fls_outputs view(outs *o, int with_extra)
{
    fls_outputs v = {o->tok, with_extra ? o->lse : NULL, with_extra ? o->lp : NULL};
    return v;
}

/* ---- the sweep ---- */

typedef struct sweep_stats {
    long runs, failures_seen, recovered;
} sweep_stats;

/* One path: call(arg, o) runs the library call between arm() and disarm()
 * itself (so setup and cleanup are not counted) and returns its status;
 * reached says whether the failure was reached. ref holds the outputs of a
 * run without failures. */
typedef fls_status (*path_fn)(void *arg, outs *o, long n, int *reached);

static void sweep(const char *name, path_fn call, void *arg, const outs *ref, sweep_stats *ss)
{
    for (long n = 1; n < 100000; n++) {
        outs o;
        guard(&o);
        const long before = live();
        int reached = 0;
        fls_status st = call(arg, &o, n, &reached);
        const long after = live();
        ss->runs++;
        cr_expect_eq(after, before, "%s: allocation %ld failed: %ld allocation(s) leaked", name, n,
                     after - before);
        if (!reached) {
            cr_expect_eq(st, FLS_OK, "%s: no failure injected (%ld allocations) yet %s", name, n - 1,
                         fls_status_string(st));
            if (ref)
                cr_expect(!memcmp(&o, ref, sizeof o), "%s: outputs differ from the reference run", name);
            printf("%-44s %3ld allocation(s), each failed once: clean\n", name, n - 1);
            return;
        }
        ss->failures_seen++;
        if (st == FLS_OK) { /* a path that recovered: its outputs must be right */
            ss->recovered++;
            if (ref)
                cr_expect(!memcmp(&o, ref, sizeof o), "%s: allocation %ld failed, FLS_OK, wrong outputs",
                          name, n);
            continue;
        }
        cr_expect_eq(st, FLS_ERR_OUT_OF_MEMORY, "%s: allocation %ld failed: status %s", name, n,
                     fls_status_string(st));
        cr_expect(guarded(&o), "%s: allocation %ld failed: outputs written", name, n);
    }
    cr_assert_fail("%s: never finished", name);
}

/* ---- paths: sampling calls ---- */

typedef struct call_arg {
    fls_context_t *ctx;
    fls_params p;
    int fused, extra;
    const fls_matrix *L, *W, *H;
} call_arg;

static fls_status sample_call(void *a, outs *o, long n, int *reached)
{
    call_arg *c = a;
    fls_outputs out = view(o, c->extra);
    if (n)
        arm(n);
    fls_status st = c->fused ? fls_sample_fused(c->ctx, c->W, c->H, &c->p, &out)
                             : fls_sample_logits(c->ctx, c->L, &c->p, &out);
    if (n)
        *reached = disarm();
    return st;
}

static void sweep_sample(const char *name, call_arg *c, sweep_stats *ss)
{
    outs ref;
    guard(&ref);
    int r = 0;
    cr_assert_eq(sample_call(c, &ref, 0, &r), FLS_OK, "%s: the reference run", name);
    sweep(name, sample_call, c, &ref, ss);
}

static void base_params(fls_params *p)
{
    fls_params_default(p);
    p->temperature = g_temps;
    p->row_seeds = g_seeds;
    p->draws = DR;
}

Test(alloc, context_create)
{
    sweep_stats ss = {0};
    for (long n = 1; n < 1000; n++) {
        fls_context_config cfg;
        fls_context_config_default(&cfg);
        fls_context_t *ctx = (fls_context_t *)(uintptr_t)0x1234;
        const long before = live();
        arm(n);
        fls_status st = fls_context_create(&ctx, &cfg);
        const int reached = disarm();
        if (st == FLS_OK)
            fls_context_destroy(ctx);
        cr_expect_eq(live(), before, "context create: allocation %ld failed: leak", n);
        if (!reached) {
            cr_expect_eq(st, FLS_OK);
            printf("%-44s %3ld allocation(s), each failed once: clean\n", "fls_context_create", n - 1);
            return;
        }
        if (st != FLS_OK) {
            cr_expect_eq(st, FLS_ERR_OUT_OF_MEMORY, "context create: allocation %ld failed: %s", n,
                         fls_status_string(st));
            cr_expect_eq(ctx, (fls_context_t *)(uintptr_t)0x1234, "context create: *ctx written on error");
        }
        ss.runs++;
    }
    cr_assert_fail("context create never finished");
}

static void methods_sweep(int threads)
{
    inputs();
    fls_context_t *ctx = new_ctx(threads);
    fls_matrix L = {g_logits, FLS_DTYPE_F32, B, V, V}, W = {g_wbf, FLS_DTYPE_BF16, V, D, D},
               H = {g_h, FLS_DTYPE_F32, B, D, D};
    sweep_stats ss = {0};
    const fls_method methods[4] = {FLS_METHOD_FUSED, FLS_METHOD_UNFUSED_GUMBEL,
                                   FLS_METHOD_UNFUSED_MULTINOMIAL, FLS_METHOD_GROUPED};
    const char *mname[4] = {"fused", "unfused-gumbel", "unfused-multinomial", "grouped"};
    for (int path = 0; path < 2; path++)
        for (int m = 0; m < 4; m++) {
            call_arg c = {ctx, {0}, path, 1, &L, &W, &H};
            base_params(&c.p);
            c.p.method = methods[m];
            c.p.group_size = 64; /* V = 300: the last group is short */
            char name[96];
            snprintf(name, sizeof name, "%s %s, %d thread(s)",
                     path ? "fls_sample_fused" : "fls_sample_logits", mname[m], threads);
            sweep_sample(name, &c, &ss);
        }
    printf("%ld runs, %ld with a failed allocation, %ld recovered with the right outputs\n", ss.runs,
           ss.failures_seen, ss.recovered);
    fls_context_destroy(ctx);
}

Test(alloc, every_method_one_thread)
{
    methods_sweep(1);
}

Test(alloc, every_method_two_threads)
{
    methods_sweep(2);
}

Test(alloc, rule_family)
{
    inputs();
    fls_context_t *ctx = new_ctx(2);
    fls_matrix L = {g_logits, FLS_DTYPE_F32, B, V, V}, W = {g_wbf, FLS_DTYPE_BF16, V, D, D},
               H = {g_h, FLS_DTYPE_F32, B, D, D};
    sweep_stats ss = {0};
    static const int64_t rk[B] = {5, 0, 40};
    static const float rp[B] = {0.9f, 0.5f, 1.0f}, rm[B] = {0.0f, 0.05f, 0.1f};
    static const double rn[B] = {1.0, 0.0, 2.0};
    static const int64_t rwr[B] = {2, 1, 2};
    for (int path = 0; path < 2; path++)
        for (int wr = 0; wr < 2; wr++) {
            call_arg c = {ctx, {0}, path, 1, &L, &W, &H};
            base_params(&c.p);
            c.p.row_top_k = rk;
            c.p.row_top_p = rp;
            c.p.row_min_p = rm;
            c.p.filter = "top-nsigma";
            c.p.row_filter_value = rn;
            if (wr) {
                c.p.without_replacement_k = 2;
                c.p.row_without_replacement_k = rwr;
            }
            char name[96];
            snprintf(name, sizeof name, "%s rules%s", path ? "fls_sample_fused" : "fls_sample_logits",
                     wr ? ", without replacement K 2" : "");
            sweep_sample(name, &c, &ss);
        }
    /* the exact second pass: a nucleus of ~2700 tokens, beyond the one-pass top list */
    fls_matrix F = {g_flat, FLS_DTYPE_F32, 2, 3000, 3000};
    call_arg c = {ctx, {0}, 0, 1, &F, NULL, NULL};
    fls_params_default(&c.p);
    c.p.top_p = 0.9f;
    c.p.draws = DR;
    fls_counters k0, k1;
    fls_counters_default(&k0);
    fls_counters_default(&k1);
    cr_assert_eq(fls_context_counters(ctx, &k0), FLS_OK);
    sweep_sample("fls_sample_logits top-p, second pass", &c, &ss);
    cr_assert_eq(fls_context_counters(ctx, &k1), FLS_OK);
    cr_expect(k1.second_pass_rows > k0.second_pass_rows, "the second pass did not run");
    printf("%ld runs, %ld with a failed allocation, %ld recovered with the right outputs\n", ss.runs,
           ss.failures_seen, ss.recovered);
    fls_context_destroy(ctx);
}

/* ---- paths: streaming ---- */

typedef struct stream_arg {
    fls_context_t *ctx;
    fls_params p;
    int fused;
    int op; /* which call is armed */
} stream_arg;

enum { OP_CREATE, OP_FEED, OP_SKIP, OP_MERGE, OP_SERIALIZE, OP_DESERIALIZE, OP_FINALIZE, N_OPS };
static const char *const op_name[N_OPS] = {"create",    "feed",        "skip",    "merge",
                                           "serialize", "deserialize", "finalize"};

static fls_status feed(const stream_arg *a, fls_stream_t *s, int64_t v0, int64_t n)
{
    if (a->fused) {
        fls_matrix Wc = {g_wbf + v0 * D, FLS_DTYPE_BF16, n, D, D}, H = {g_h, FLS_DTYPE_F32, B, D, D};
        return fls_stream_feed_fused(s, &Wc, &H, v0);
    }
    fls_matrix Lc = {g_logits + v0, FLS_DTYPE_F32, B, n, V};
    return fls_stream_feed_logits(s, &Lc, v0);
}

/* st = expr with the n-th allocation failing (n = 0: no failure); *reached
 * records whether any armed window reached its n-th allocation. */
#define ARMED(st, n, expr, reached)                                                                          \
    do {                                                                                                     \
        if (n)                                                                                               \
            arm(n);                                                                                          \
        (st) = (expr);                                                                                       \
        if (n)                                                                                               \
            *(reached) |= disarm();                                                                          \
    } while (0)

/* The streaming sequence: chunks [200, 300) and [0, 10) into state A, [100,
 * 110) into state B (groups split: pending partials), A's bytes through
 * serialize / deserialize into C, C += B, then [10, 100) and [110, 200)
 * into C, finalize. One call of the
 * sequence is armed; after a failure there, the sequence goes on without
 * failures (repeating that call), so a state left changed by a failed call
 * shows as wrong tokens. */
static fls_status stream_seq(void *arg, outs *o, long n, int *reached)
{
    stream_arg *a = arg;
    fls_stream_t *sa = NULL, *sb = NULL, *sc = NULL;
    fls_outputs out = view(o, 0);
    fls_status st, res = FLS_OK;
    void *buf = NULL;
#define STEP(OP, expr)                                                                                       \
    do {                                                                                                     \
        const long n_ = a->op == (OP) ? n : 0;                                                               \
        ARMED(st, n_, (expr), reached);                                                                      \
        if (st != FLS_OK && n_) {                                                                            \
            res = st; /* the armed call failed: go on without failures */                                    \
            st = (expr);                                                                                     \
        }                                                                                                    \
        cr_assert_eq(st, FLS_OK, "stream %s: %s", op_name[OP], fls_status_string(st));                       \
    } while (0)

    /* create: a failure leaves the pointer alone */
    sa = (fls_stream_t *)(uintptr_t)0x1234;
    {
        const long n_ = a->op == OP_CREATE ? n : 0;
        ARMED(st, n_, fls_stream_create(&sa, a->ctx, B, V, &a->p), reached);
        if (st != FLS_OK && n_) {
            res = st;
            cr_expect_eq(sa, (fls_stream_t *)(uintptr_t)0x1234, "stream create: *stream written on error");
            st = fls_stream_create(&sa, a->ctx, B, V, &a->p);
        }
        cr_assert_eq(st, FLS_OK);
    }
    cr_assert_eq(fls_stream_create(&sb, a->ctx, B, V, &a->p), FLS_OK);
    STEP(OP_FEED, feed(a, sa, 200, 100));
    st = feed(a, sa, 0, 10);
    cr_assert_eq(st, FLS_OK);
    STEP(OP_FEED, feed(a, sb, 100, 10)); /* a partial group of its own: merging it adds a pending group */
    /* skip: a chunk no token of which can win is not part of this sequence
     * (it would change the logsumexp); skip is armed on a state of its own */
    size_t bytes = 0;
    STEP(OP_SERIALIZE, fls_stream_serialize(sa, NULL, &bytes));
    buf = malloc(bytes);
    cr_assert(buf);
    STEP(OP_SERIALIZE, fls_stream_serialize(sa, buf, &bytes));
    sc = (fls_stream_t *)(uintptr_t)0x1234;
    {
        const long n_ = a->op == OP_DESERIALIZE ? n : 0;
        ARMED(st, n_, fls_stream_deserialize(&sc, a->ctx, buf, bytes), reached);
        if (st != FLS_OK && n_) {
            res = st;
            cr_expect_eq(sc, (fls_stream_t *)(uintptr_t)0x1234,
                         "stream deserialize: *stream written on error");
            st = fls_stream_deserialize(&sc, a->ctx, buf, bytes);
        }
        cr_assert_eq(st, FLS_OK);
    }
    STEP(OP_MERGE, fls_stream_merge(sc, sb));
    STEP(OP_FEED, feed(a, sc, 10, 90));
    STEP(OP_FEED, feed(a, sc, 110, 90));
    {
        const long n_ = a->op == OP_FINALIZE ? n : 0;
        ARMED(st, n_, fls_stream_finalize(sc, &out), reached);
        if (st != FLS_OK && n_) {
            res = st;
            cr_expect(guarded(o), "stream finalize: outputs written on error");
            st = fls_stream_finalize(sc, &out);
        }
        cr_assert_eq(st, FLS_OK);
    }
#undef STEP
    free(buf);
    fls_stream_destroy(sa);
    fls_stream_destroy(sb);
    fls_stream_destroy(sc);
    return res;
}

/* merge, armed, of two states of 9 disjoint chunks each (the coverage lists
 * outgrow their first allocation), then the rest fed and finalized. */
static fls_status merge_many_seq(void *arg, outs *o, long n, int *reached)
{
    stream_arg *a = arg;
    fls_stream_t *sa = NULL, *sb = NULL;
    fls_status res = FLS_OK, st;
    cr_assert_eq(fls_stream_create(&sa, a->ctx, B, V, &a->p), FLS_OK);
    cr_assert_eq(fls_stream_create(&sb, a->ctx, B, V, &a->p), FLS_OK);
    for (int i = 0; i < 9; i++) {
        cr_assert_eq(feed(a, sa, 20 * i, 10), FLS_OK);
        cr_assert_eq(feed(a, sb, 20 * i + 10, 10), FLS_OK);
    }
    ARMED(st, n, fls_stream_merge(sa, sb), reached);
    if (st != FLS_OK) {
        res = st;
        st = fls_stream_merge(sa, sb);
    }
    cr_assert_eq(st, FLS_OK);
    cr_assert_eq(feed(a, sa, 180, 120), FLS_OK);
    fls_outputs out = view(o, 0);
    cr_assert_eq(fls_stream_finalize(sa, &out), FLS_OK);
    fls_stream_destroy(sa);
    fls_stream_destroy(sb);
    return res;
}

/* skip, armed: a chunk far below every leader is skipped; a failed skip
 * leaves the state as it was (then skipped without failures). */
static fls_status skip_seq(void *arg, outs *o, long n, int *reached)
{
    stream_arg *a = arg;
    fls_stream_t *s = NULL;
    fls_status res = FLS_OK, st;
    fls_params p = a->p;
    cr_assert_eq(fls_stream_create(&s, a->ctx, B, V, &p), FLS_OK);
    cr_assert_eq(feed(a, s, 0, 256), FLS_OK); /* (the grouped method skips whole groups: [256, 300) is one) */
    const float upper[B] = {-1e30f, -1e30f, -1e30f};
    int skipped = 0;
    ARMED(st, n, fls_stream_skip(s, 256, 44, upper, &skipped), reached);
    if (st != FLS_OK) {
        res = st;
        st = fls_stream_skip(s, 256, 44, upper, &skipped);
    }
    cr_assert_eq(st, FLS_OK);
    cr_expect_eq(skipped, 1);
    fls_outputs out = view(o, 0);
    cr_assert_eq(fls_stream_finalize(s, &out), FLS_OK);
    fls_stream_destroy(s);
    return res;
}

/* In the sweep a stream sequence returns the armed call's status; its
 * outputs are always written (the sequence goes on), so they are compared
 * with the reference whatever the status. */
static void sweep_stream(const char *name, path_fn fn, stream_arg *a, const outs *ref, sweep_stats *ss)
{
    for (long n = 1; n < 100000; n++) {
        outs o;
        guard(&o);
        const long before = live();
        int reached = 0;
        fls_status st = fn(a, &o, n, &reached);
        ss->runs++;
        cr_expect_eq(live(), before, "%s: allocation %ld failed: leak of %ld", name, n, live() - before);
        cr_expect(!memcmp(o.tok, ref->tok, sizeof o.tok), "%s: allocation %ld failed: then wrong tokens",
                  name, n);
        if (!reached) {
            printf("%-44s %3ld allocation(s), each failed once: clean\n", name, n - 1);
            return;
        }
        ss->failures_seen++;
        ss->recovered += st == FLS_OK;
        cr_expect(st == FLS_OK || st == FLS_ERR_OUT_OF_MEMORY, "%s: allocation %ld failed: status %s", name,
                  n, fls_status_string(st));
    }
    cr_assert_fail("%s: never finished", name);
}

Test(alloc, streaming)
{
    inputs();
    fls_context_t *ctx = new_ctx(2);
    sweep_stats ss = {0};
    for (int grouped = 0; grouped < 2; grouped++)
        for (int fused = 0; fused < 2; fused++) {
            stream_arg a = {ctx, {0}, fused, -1};
            base_params(&a.p);
            if (grouped) {
                a.p.method = FLS_METHOD_GROUPED;
                a.p.group_size = 64;
            }
            outs ref;
            guard(&ref);
            int r = 0;
            a.op = -1;
            cr_assert_eq(stream_seq(&a, &ref, 0, &r), FLS_OK);
            /* the one-shot call gives the same tokens */
            outs one;
            guard(&one);
            fls_matrix L = {g_logits, FLS_DTYPE_F32, B, V, V}, W = {g_wbf, FLS_DTYPE_BF16, V, D, D},
                       H = {g_h, FLS_DTYPE_F32, B, D, D};
            fls_outputs ov = view(&one, 0);
            cr_assert_eq(fused ? fls_sample_fused(ctx, &W, &H, &a.p, &ov)
                               : fls_sample_logits(ctx, &L, &a.p, &ov),
                         FLS_OK);
            cr_assert(!memcmp(one.tok, ref.tok, sizeof one.tok),
                      "the stream's tokens are not the one-shot ones");
            for (int op = 0; op < N_OPS; op++) {
                if (op == OP_SKIP)
                    continue;
                a.op = op;
                char name[96];
                snprintf(name, sizeof name, "fls_stream_%s (%s, %s)", op_name[op],
                         grouped ? "grouped" : "flat", fused ? "fused" : "logits");
                sweep_stream(name, stream_seq, &a, &ref, &ss);
            }
            char mname[96];
            snprintf(mname, sizeof mname, "fls_stream_merge, 9 + 9 chunks (%s, %s)",
                     grouped ? "grouped" : "flat", fused ? "fused" : "logits");
            sweep_stream(mname, merge_many_seq, &a, &ref, &ss);
            outs sref;
            guard(&sref);
            cr_assert_eq(skip_seq(&a, &sref, 0, &r), FLS_OK);
            char name[96];
            snprintf(name, sizeof name, "fls_stream_skip (%s, %s)", grouped ? "grouped" : "flat",
                     fused ? "fused" : "logits");
            sweep_stream(name, skip_seq, &a, &sref, &ss);
        }
    printf("%ld runs, %ld with a failed allocation, %ld recovered\n", ss.runs, ss.failures_seen,
           ss.recovered);
    fls_context_destroy(ctx);
}

/* The harness itself: the wrappers count, fail and track what they should. */
Test(alloc, the_wrappers_fail_and_track)
{
    const long before = live();
    void *p = malloc(10), *q = calloc(3, 4);
    cr_assert(p && q);
    cr_expect_eq(live(), before + 2);
    p = realloc(p, 100);
    cr_assert(p);
    cr_expect_eq(live(), before + 2);
    arm(2);
    void *a = malloc(1), *b = malloc(1), *c = realloc(p, 200);
    const int reached = disarm();
    cr_expect(a && !b && c && reached, "the second allocation of the window fails, the others do not");
    free(a);
    free(c);
    free(q);
    cr_expect_eq(live(), before);
    arm(5);
    void *d = malloc(1);
    cr_expect(!disarm() && d, "a window of one allocation does not reach the fifth");
    free(d);
}
