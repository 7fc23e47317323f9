/*
 * cpu_engine.c — the CPU tile-streaming sampler (the reference engine and the
 * embedded default), its from-logits twin and the unfused baselines.
 *
 * Fused path: W (V, D) is streamed in tiles of tile_v rows. For a tile, the
 * tile_v x B logits are computed into a small thread-local buffer (L1/L2),
 * divided by each row's temperature, the contract's noise is added, and one
 * (key, index) per row and draw survives. Threads take tiles from a shared
 * counter; per-thread winners merge at the end by (larger key, then lower
 * index), so the token never depends on tiling, thread count or order.
 * B x V is never allocated on this path.
 *
 * Napkin math (D = 4096, V = 151936, bf16 W): 1.24 GB of W read once; B = 1
 * does 0.62 GFMA, far under what 2 AVX2 cores do in the ~60-90 ms the read
 * takes, so B <= 4 is bound by memory bandwidth; B = 16 does 10 GFMA and is
 * bound by the FMA units (~120 ms on 2 cores).
 */
#include "lib/front/internal.h"
#include "lib/cpu/cpu_kernels.h"
#include "lib/base/fls_dtype.h"
#include "lib/base/fls_noise.h"
#include "lib/base/fls_gumbel_bound.h"
#include "lib/cpu/cpu_rules.h"
#include "variants/rule.h"
#include "variants/stair.h"
#include "variants/temperature.h"
#include "variants/topc.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(FLS_X86_SIMD)
#include <cpuid.h>
#endif

/* ---- SIMD dispatch ---- */

#if defined(FLS_X86_SIMD)
static uint64_t xgetbv0(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}
#endif

int fls_cpu_simd_supported(fls_simd simd)
{
    switch (simd) {
    case FLS_SIMD_AUTO:
    case FLS_SIMD_PORTABLE:
        return 1;
    case FLS_SIMD_AVX2:
    case FLS_SIMD_AVX512: {
#if defined(FLS_X86_SIMD)
        unsigned a, b, c, d;
        if (!__get_cpuid(1, &a, &b, &c, &d))
            return 0;
        int osxsave = (c >> 27) & 1, fma = (c >> 12) & 1, f16c = (c >> 29) & 1;
        if (!osxsave || !fma || !f16c)
            return 0;
        uint64_t xcr0 = xgetbv0();
        if ((xcr0 & 0x6) != 0x6)
            return 0;
        if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
            return 0;
        int avx2 = (b >> 5) & 1;
        if (simd == FLS_SIMD_AVX2)
            return avx2;
        int avx512f = (b >> 16) & 1, avx512bw = (b >> 30) & 1, avx512vl = (b >> 31) & 1;
        return avx2 && avx512f && avx512bw && avx512vl && (xcr0 & 0xe6) == 0xe6;
#else
        return 0;
#endif
    }
    case FLS_SIMD_AMX: {
#if defined(FLS_X86_SIMD) && defined(__linux__)
        unsigned a, b, c, d;
        if (!fls_cpu_simd_supported(FLS_SIMD_AVX512) || !__get_cpuid_count(7, 0, &a, &b, &c, &d))
            return 0;
        int amx_bf16 = (d >> 22) & 1, amx_tile = (d >> 24) & 1;
        if (!amx_bf16 || !amx_tile || (xgetbv0() & 0x60000) != 0x60000)
            return 0;
        return fls_cpu_amx_permit();
#else
        return 0;
#endif
    }
    }
    return 0;
}

/* AUTO: AVX-512 where the processor has it, else AVX2, else portable C.
 * The AVX-512 register tiles (one token x up to 16 rows at B <= 16, 6 tokens
 * x 4 rows over converted panels above) do twice the fmas per instruction
 * of the AVX2 kernel; measured on the 2-core Xeon development machine (bf16 W,
 * D = 4096, V = 151936, docs/PERF.md "the SIMD choice"): within 10 % at
 * B = 1 and 1.3-1.8x faster from B = 4 on. Every path gives the same bits, and
 * AVX2 stays selectable (FLS_SIMD_AVX2, `--simd avx2`). */
fls_simd fls_cpu_best_simd(void)
{
    if (fls_cpu_simd_supported(FLS_SIMD_AVX512))
        return FLS_SIMD_AVX512;
    if (fls_cpu_simd_supported(FLS_SIMD_AVX2))
        return FLS_SIMD_AVX2;
    return FLS_SIMD_PORTABLE;
}

void fls_cpu_select_kernels(fls_simd simd, fls_cpu_kernels *k)
{
    fls_cpu_kernels_portable(k);
#if defined(FLS_X86_SIMD)
    if (simd == FLS_SIMD_AVX2)
        fls_cpu_kernels_avx2(k);
    else if (simd == FLS_SIMD_AVX512)
        fls_cpu_kernels_avx512(k);
    else if (simd == FLS_SIMD_AMX)
        fls_cpu_kernels_amx(k);
#else
    (void)simd;
#endif
}

/* ---- a tiny parallel-for ---- */

typedef void (*worker_fn)(void *arg, int thread);

typedef struct worker_launch {
    worker_fn fn;
    void *arg;
    int thread;
} worker_launch;

static void *worker_main(void *p)
{
    worker_launch *w = p;
    w->fn(w->arg, w->thread);
    return NULL;
}

/* Runs fn(arg, t) for t in [0, n) on n threads (the caller is thread 0). */
static fls_status run_threads(int n, worker_fn fn, void *arg)
{
    if (n <= 1) {
        fn(arg, 0);
        return FLS_OK;
    }
    pthread_t *tid = calloc((size_t)n, sizeof *tid);
    worker_launch *wl = calloc((size_t)n, sizeof *wl);
    if (!tid || !wl) {
        free(tid);
        free(wl);
        return FLS_ERR_OUT_OF_MEMORY;
    }
    int started = 1;
    for (int t = 1; t < n; t++) {
        wl[t] = (worker_launch){fn, arg, t};
        if (pthread_create(&tid[t], NULL, worker_main, &wl[t]) != 0)
            break; /* run the rest on the threads we have */
        started++;
    }
    /* Threads that could not start: their share is done by thread 0 below,
     * since workers take tiles from a shared counter until none is left. */
    fn(arg, 0);
    for (int t = 1; t < started; t++)
        pthread_join(tid[t], NULL);
    free(tid);
    free(wl);
    return FLS_OK;
}

/* ---- the tile engine ----
 *
 * The loop knows no rule (lib/cpu/cpu_rules.h): it produces a tile's logits,
 * tempers and checks them, keeps the row's partial statistics (log-sum-exp
 * and, for filters that need them, moments) per tile, pushes the tile into
 * the row's statistics state and, with each draw's noise, into each (row,
 * draw) candidate state. Threads' states merge at the end; partials merge in
 * tile order (the same bits for any thread count); the rule finalizes each
 * row, and rows it cannot decide from what was kept take an exact second
 * pass over their materialized logits (same noise, same token).
 */

typedef struct thread_state {
    char *cand;      /* B x draws rule states (rule.cand_size bytes each) */
    char *rows;      /* B row states (rule.row_size bytes each), or NULL */
    char *greedy;    /* one rule state: a greedy row's tile, shared by its draws */
    float *ltile;    /* B x tile_v logits */
    float *wbuf;     /* tile_v x Dp converted W rows (when convert_w) */
    float *kscratch; /* the dot kernel's FLS_CPU_SCRATCH_FLOATS (fused, not convert_w) */
    float *g;        /* tile_v noise */
    float *scratch;  /* tile_v floats for the rule */
    int bad_nan;
    int bad_temp;
} thread_state;

enum { SRC_FUSED, SRC_LOGITS };

typedef struct tile_job {
    fls_cpu_kernels k;
    cpu_rule rule;
    fls_ref_ctx rc;
    const fls_request *req;
    int src;
    const fls_matrix *W;
    const float *Hf; /* B x Dp f32, zero padded */
    const float *Hp; /* Hf in the kernels' packed layout (pack_h), or NULL */
    int64_t D, Dp;
    const fls_matrix *L;
    float *store; /* non-NULL: only materialize logits into this (B, V) buffer */
    float *keep;  /* non-NULL: the fused pass also keeps its logits (B, V) here, for the exact
                     second pass (which then reads them instead of W again) */
    int64_t tile_v, ntiles, dchunks, dchunk;
    int want_parts;      /* per-tile partials (logsumexp outputs, or the rule needs them) */
    int moments;         /* ... with the moments */
    fls_row_part *parts; /* ntiles x B partials, merged in tile order */
    int convert_w;       /* convert each W tile to f32 first, then the f32 kernel (the portable
                            path at B > 2; the SIMD paths convert W inside dot_direct) */
    atomic_llong next;
    thread_state *ts;
    /* the plain rule with the per-token noise: fls_gumbel_bound_table's up,
     * with which the noise kernel skips the logs of tokens that cannot win
     * (sample_row); NULL: every token's noise */
    const float *gup;
} tile_job;

/* The Gumbel upper bounds per bucket, made once per process. */
static float gb_up[FLS_GB_N];
static pthread_once_t gb_once = PTHREAD_ONCE_INIT;
static void gb_init(void)
{
    float lo[FLS_GB_N];
    fls_gumbel_bound_table(gb_up, lo);
}

/* a * b elements of size es do not fit in memory (so never malloc them) */
static int too_big(int64_t a, int64_t b, size_t es)
{
    return a > 0 && b > 0 && (uint64_t)b > (uint64_t)(SIZE_MAX / es) / (uint64_t)a;
}

/* The noise of the request's scheme (the SIMD span kernels are per-token). */
static void noise_kernels(fls_cpu_kernels *k, fls_noise noise)
{
    if (noise == FLS_NOISE_MIN_FIRST)
        k->gumbel = fls_ref_gumbel_span_mf;
}

static void produce_tile(tile_job *j, thread_state *s, int64_t v0, int64_t nv)
{
    const int64_t B = j->req->batch;
    if (j->src == SRC_FUSED) {
        const fls_matrix *W = j->W;
        const size_t es = fls_dtype_bytes(W->dtype);
        const char *w0 = (const char *)W->data + (size_t)(v0 * W->ld) * es;
        if (!j->convert_w) {
            j->k.dot_direct(w0, W->dtype, W->ld, nv, j->D, j->Hf, j->Hp, B, j->Dp, s->ltile, nv, s->kscratch);
        } else {
            for (int64_t i = 0; i < nv; i++)
                j->k.convert(w0 + (size_t)(i * W->ld) * es, W->dtype, j->D, s->wbuf + i * j->Dp, j->Dp);
            j->k.dot_f32(s->wbuf, nv, j->Hf, B, j->Dp, s->ltile, nv);
        }
    } else {
        const fls_matrix *L = j->L;
        const size_t es = fls_dtype_bytes(L->dtype);
        for (int64_t b = 0; b < B; b++)
            j->k.convert((const char *)L->data + (size_t)(b * L->ld + v0) * es, L->dtype, nv,
                         s->ltile + b * nv, nv);
    }
}

/* The state of (row b, draw d) in an array of B x draws states. */
static void *cand_at(const tile_job *j, char *base, int64_t b, int64_t d)
{
    return base + (size_t)(b * j->req->draws + d) * j->rule.cand_size;
}

/* Tempers row b's logits in place and records input errors. */
static void temper_row(thread_state *s, float *x, int64_t nv, float T)
{
    for (int64_t i = 0; i < nv; i++) {
        float l = x[i];
        s->bad_nan |= fls_bad_logit(l);
        float t = fls_temper(l, T);
        s->bad_temp |= fls_temper_overflows(l, t);
        x[i] = t;
    }
}

/* Samples one row of one tile: x holds the nv logits of row b, v0 the
 * global index of x[0]. Draws [d0, d1) of the row; part (the row's partial
 * of this tile) and the row statistics only on the tile's first draw chunk. */
static void sample_row(tile_job *j, thread_state *s, int64_t b, float *x, int64_t v0, int64_t nv, int64_t d0,
                       int64_t d1, fls_row_part *part, int first_chunk)
{
    const fls_row_params *rp = &j->req->rows[b];
    const float T = rp->temperature;
    temper_row(s, x, nv, T);
    if (part)
        fls_row_part_span(part, x, nv, j->moments);
    if (first_chunk && j->rule.row_size)
        j->rule.row_push(s->rows + (size_t)b * j->rule.row_size, x, v0, nv);
    if (j->rule.push_tile) { /* a rule that draws its own noise */
        j->rule.push_tile(&j->rc, cand_at(j, s->cand, b, 0), d0, d1, x, v0, nv, rp, j->k.gumbel, s->scratch);
        return;
    }
    if (!fls_temperature_noisy(T)) { /* no noise: every draw sees the same keys */
        j->rule.cand_init(&j->rc, s->greedy);
        j->rule.push_span(s->greedy, x, NULL, T, v0, nv, s->scratch);
        for (int64_t d = d0; d < d1; d++)
            j->rule.cand_merge(cand_at(j, s->cand, b, d), s->greedy);
        return;
    }
    for (int64_t d = d0; d < d1; d++) {
        void *c = cand_at(j, s->cand, b, d);
        const uint32_t draw = j->req->first_draw + (uint32_t)d;
        if (j->gup) /* this thread's best key of (row, draw) so far: an exact key */
            j->k.gumbel_skip(rp->seed, rp->offset, draw, (uint64_t)v0, nv, x, ((const fls_cand *)c)->key,
                             j->gup, s->g);
        else
            j->k.gumbel(rp->seed, rp->offset, draw, (uint64_t)v0, nv, s->g);
        j->rule.push_span(c, x, s->g, T, v0, nv, s->scratch);
    }
}

static void tile_worker(void *arg, int thread)
{
    tile_job *j = arg;
    thread_state *s = &j->ts[thread];
    const int64_t B = j->req->batch, V = j->req->vocab, draws = j->req->draws;
    const long long items = (long long)(j->ntiles * j->dchunks);
    /* the tokens do not depend on which thread takes which item */
    for (;;) {
        const long long it = atomic_fetch_add(&j->next, 1);
        if (it >= items)
            break;
        int64_t tile = it / j->dchunks, dc = it % j->dchunks;
        int64_t v0 = tile * j->tile_v;
        int64_t nv = V - v0 < j->tile_v ? V - v0 : j->tile_v;
        produce_tile(j, s, v0, nv);
        /* the masks, bias and penalties on the raw logits, before the kept
         * and stored copies: every reader sees them applied once */
        if (j->req->mods)
            for (int64_t b = 0; b < B; b++)
                fls_mods_apply(&j->req->mods[b], s->ltile + b * nv, v0, nv);
        if (j->keep && dc == 0)
            for (int64_t b = 0; b < B; b++)
                memcpy(j->keep + b * V + v0, s->ltile + b * nv, (size_t)nv * sizeof(float));
        if (j->store) {
            for (int64_t b = 0; b < B; b++)
                memcpy(j->store + b * V + v0, s->ltile + b * nv, (size_t)nv * sizeof(float));
            continue;
        }
        int64_t d0 = dc * j->dchunk, d1 = d0 + j->dchunk < draws ? d0 + j->dchunk : draws;
        for (int64_t b = 0; b < B; b++)
            sample_row(j, s, b, s->ltile + b * nv, v0, nv, d0, d1,
                       j->parts && dc == 0 ? &j->parts[tile * B + b] : NULL, dc == 0);
    }
}

static void free_states(thread_state *ts, int n)
{
    if (!ts)
        return;
    for (int t = 0; t < n; t++) {
        free(ts[t].cand);
        free(ts[t].rows);
        free(ts[t].greedy);
        free(ts[t].ltile);
        free(ts[t].wbuf);
        free(ts[t].kscratch);
        free(ts[t].g);
        free(ts[t].scratch);
    }
    free(ts);
}

static int64_t choose_tile(const fls_context_t *ctx, int src, int convert_w, int64_t Dp, int64_t V)
{
    int64_t t = ctx->config.tile_v;
    if (t <= 0) {
        /* fused, converting W: a tile of converted rows of ~128 KiB stays in L2;
         * fused, W converted in registers: 64 rows, so the vector noise runs
         * on whole 16-token blocks; from-logits: 1024 logits per row */
        t = src != SRC_FUSED ? 1024 : convert_w ? (128 * 1024) / (Dp * 4) : 64;
        if (t < 16)
            t = 16;
        if (t > 1024)
            t = 1024;
    }
    t += t & 1; /* even: a tile never splits a Philox block */
    return t > V + (V & 1) ? V + (V & 1) : t;
}

/* The grouped method's tiles hold whole groups. */
static int64_t group_tile(int64_t t, const fls_request *req)
{
    if (req->method != FLS_METHOD_GROUPED)
        return t;
    const int64_t g = req->group_size;
    return (t + g - 1) / g * g;
}

static fls_status second_pass(const fls_context_t *ctx, tile_job *j, const int64_t *rows, int64_t nrows,
                              const fls_row_part *part, const char *cands, int64_t *tok, float *lp,
                              double *lse);

/* Runs the tile engine. With store != NULL it only materializes logits. */
static fls_status run_tiles(const fls_context_t *ctx, tile_job *j, const fls_outputs *out)
{
    const int64_t B = j->req->batch, V = j->req->vocab, draws = j->req->draws;
    j->ntiles = (V + j->tile_v - 1) / j->tile_v;
    int threads = ctx->threads;
    j->dchunks = 1;
    j->dchunk = draws;
    if (!j->store && j->src == SRC_LOGITS && j->ntiles < 2 * threads && draws > 1) {
        /* few tiles, many draws: split draws too so every thread has work */
        int64_t want = (2 * threads + j->ntiles - 1) / j->ntiles;
        j->dchunks = want < draws ? want : draws;
        j->dchunk = (draws + j->dchunks - 1) / j->dchunks;
        j->dchunks = (draws + j->dchunk - 1) / j->dchunk;
    }
    if (threads > j->ntiles * j->dchunks)
        threads = (int)(j->ntiles * j->dchunks);
    atomic_init(&j->next, 0);

    const size_t cs = j->rule.cand_size, rs = j->rule.row_size;
    j->parts = NULL;
    if (j->want_parts && !j->store) { /* every tile's dc == 0 item writes its B parts */
        if ((size_t)j->ntiles > SIZE_MAX / sizeof(fls_row_part) / (size_t)B)
            return FLS_ERR_SIZE;
        j->parts = malloc((size_t)j->ntiles * (size_t)B * sizeof(fls_row_part));
        if (!j->parts)
            return FLS_ERR_OUT_OF_MEMORY;
    }
    if (too_big(B, j->tile_v, sizeof(float)) || too_big(j->tile_v, j->Dp, sizeof(float)) ||
        too_big(B * draws, j->req->K, sizeof(int64_t) + sizeof(float)) || too_big(B, draws, cs) ||
        (rs && too_big(B, 1, rs))) {
        free(j->parts);
        return FLS_ERR_SIZE;
    }
    thread_state *ts = calloc((size_t)threads, sizeof *ts);
    if (!ts) {
        free(j->parts);
        return FLS_ERR_OUT_OF_MEMORY;
    }
    int need_wbuf = j->src == SRC_FUSED && j->convert_w, need_kscratch = j->src == SRC_FUSED && !j->convert_w;
    for (int t = 0; t < threads; t++) {
        thread_state *s = &ts[t];
        s->ltile = malloc((size_t)(B * j->tile_v) * sizeof(float));
        s->g = malloc((size_t)j->tile_v * sizeof(float));
        s->scratch = malloc((size_t)j->tile_v * 2 * sizeof(float));
        s->wbuf = need_wbuf ? malloc((size_t)(j->tile_v * j->Dp) * sizeof(float)) : NULL;
        s->kscratch = need_kscratch ? aligned_alloc(64, FLS_CPU_SCRATCH_FLOATS * sizeof(float)) : NULL;
        if (!j->store) {
            s->cand = malloc((size_t)(B * draws) * cs);
            s->greedy = malloc(cs);
            s->rows = rs ? malloc((size_t)B * rs) : NULL;
        }
        if (!s->ltile || !s->g || !s->scratch || (need_wbuf && !s->wbuf) || (need_kscratch && !s->kscratch) ||
            (!j->store && (!s->cand || !s->greedy || (rs && !s->rows)))) {
            free_states(ts, threads);
            free(j->parts);
            return FLS_ERR_OUT_OF_MEMORY;
        }
        if (!j->store) {
            for (int64_t i = 0; i < B * draws; i++)
                j->rule.cand_init(&j->rc, s->cand + (size_t)i * cs);
            for (int64_t b = 0; rs && b < B; b++)
                j->rule.row_init(&j->rc, s->rows + (size_t)b * rs);
        }
    }
    j->ts = ts;
    /* H packed once for the whole pass, shared read-only by the threads (the
     * kernels would otherwise repack it for every tile); without the memory
     * they pack it per tile */
    float *hp = NULL;
    const int64_t hpn = need_kscratch && j->k.pack_h ? j->k.packed_h_floats(B, j->Dp) : 0;
    if (hpn > 0 && !too_big(hpn, 1, sizeof(float)) &&
        (hp = aligned_alloc(64, ((size_t)hpn * sizeof(float) + 63) / 64 * 64)) != NULL)
        j->k.pack_h(j->Hf, B, j->Dp, hp);
    j->Hp = hp;
    fls_status st = run_threads(threads, tile_worker, j);
    j->Hp = NULL;
    free(hp);
    if (st != FLS_OK || j->store) {
        free_states(ts, threads);
        free(j->parts);
        return st;
    }

    /* merge, check, and only then write the outputs */
    for (int t = 0; t < threads && st == FLS_OK; t++) {
        if (ts[t].bad_nan)
            st = FLS_ERR_NAN;
        else if (ts[t].bad_temp)
            st = FLS_ERR_TEMPERATURE;
    }
    for (int t = 1; t < threads && st == FLS_OK; t++) {
        for (int64_t i = 0; i < B * draws; i++)
            j->rule.cand_merge(ts[0].cand + (size_t)i * cs, ts[t].cand + (size_t)i * cs);
        for (int64_t b = 0; rs && b < B; b++)
            j->rule.row_merge(ts[0].rows + (size_t)b * rs, ts[t].rows + (size_t)b * rs);
    }
    /* every row: its partials in tile order, then the rule; the outputs are
     * staged, so nothing is written unless every row succeeds */
    const int64_t K = j->req->K, nout = B * draws * K;
    int64_t *tok = NULL, *redo = NULL;
    float *lp = NULL;
    double *lse = NULL;
    fls_row_part *row_part = NULL;
    int64_t nredo = 0;
    if (st == FLS_OK) {
        tok = malloc((size_t)nout * sizeof *tok);
        lp = malloc((size_t)nout * sizeof *lp);
        lse = malloc((size_t)B * sizeof *lse);
        redo = malloc((size_t)B * sizeof *redo);
        row_part = malloc((size_t)B * sizeof *row_part);
        if (!tok || !lp || !lse || !redo || !row_part)
            st = FLS_ERR_OUT_OF_MEMORY;
    }
    for (int64_t b = 0; b < B && st == FLS_OK; b++) {
        row_part[b] = fls_row_part_empty();
        if (j->parts)
            for (int64_t t = 0; t < j->ntiles; t++)
                fls_row_part_merge(&row_part[b], &j->parts[t * B + b]);
        int r = j->rule.finalize(&j->rc, b, rs ? ts[0].rows + (size_t)b * rs : NULL, &row_part[b],
                                 ts[0].cand + (size_t)(b * draws) * cs, tok + b * draws * K,
                                 lp + b * draws * K, &lse[b]);
        if (r == CPU_RULE_SECOND_PASS)
            redo[nredo++] = b;
        else if (r != FLS_OK)
            st = (fls_status)r;
    }
    free(j->parts);
    j->parts = NULL;
    if (st == FLS_OK && nredo > 0) {
        st = second_pass(ctx, j, redo, nredo, row_part, ts[0].cand, tok, lp, lse);
        if (j->req->second_pass_rows)
            *j->req->second_pass_rows += (uint64_t)nredo;
    }
    free_states(ts, threads);
    if (st == FLS_OK) {
        memcpy(out->tokens, tok, (size_t)nout * sizeof *tok);
        if (out->logprobs)
            memcpy(out->logprobs, lp, (size_t)nout * sizeof *lp);
        for (int64_t b = 0; out->logsumexp && b < B; b++)
            out->logsumexp[b] = (float)lse[b];
    }
    free(tok);
    free(lp);
    free(lse);
    free(redo);
    free(row_part);
    return st;
}

/* The tempered logits of row b of the request, all V of them, into x (the
 * same floats as the one-pass engine's: same kernels, same accumulation). */
static fls_status materialize_rows(const fls_context_t *ctx, const tile_job *j, const int64_t *rows,
                                   int64_t n, float *x);

/* The rows of one batch of the second pass, shared by the threads. */
typedef struct repass_job {
    tile_job *j;
    const int64_t *rows;
    int64_t n;
    const float *x; /* n x V tempered logits */
    const fls_row_part *part;
    const char *cands; /* the first pass's B x draws states, or NULL */
    int64_t *tok;
    float *lp;
    double *lse;
    atomic_llong next;
    atomic_int status; /* the first error, FLS_OK while none */
} repass_job;

static void repass_worker(void *arg, int thread)
{
    (void)thread;
    repass_job *r = arg;
    const int64_t V = r->j->req->vocab, dk = r->j->req->draws * r->j->req->K;
    for (;;) {
        const long long i = atomic_fetch_add(&r->next, 1);
        if (i >= r->n || atomic_load(&r->status) != FLS_OK)
            break;
        const int64_t b = r->rows[i];
        const char *c = r->cands ? r->cands + (size_t)(b * r->j->req->draws) * r->j->rule.cand_size : NULL;
        const int st = cpu_rule_second_pass_row(&r->j->rc, b, r->x + i * V, &r->part[b], c, r->j->k.gumbel,
                                                r->tok + b * dk, r->lp + b * dk, &r->lse[b]);
        if (st != FLS_OK) {
            int ok = FLS_OK;
            atomic_compare_exchange_strong(&r->status, &ok, st);
        }
    }
}

/* The exact second pass: the rows' logits materialized (a batch of rows at
 * a time; the first pass's kept logits when it kept them), then the rule's
 * sort-based reference with the statistics of the first pass (so every
 * decision the first pass could make comes out the same) and the
 * contract's noise, rows spread over the context's threads. */
static fls_status second_pass(const fls_context_t *ctx, tile_job *j, const int64_t *rows, int64_t nrows,
                              const fls_row_part *part, const char *cands, int64_t *tok, float *lp,
                              double *lse)
{
    const int64_t V = j->req->vocab;
    const int64_t batch = 16;
    float *x = too_big(batch, V, sizeof(float)) ? NULL : malloc((size_t)(batch * V) * sizeof(float));
    if (!x)
        return FLS_ERR_OUT_OF_MEMORY;
    fls_status st = FLS_OK;
    for (int64_t r0 = 0; r0 < nrows && st == FLS_OK; r0 += batch) {
        const int64_t n = nrows - r0 < batch ? nrows - r0 : batch;
        st = materialize_rows(ctx, j, rows + r0, n, x);
        if (st != FLS_OK)
            break;
        repass_job r = {.j = j,
                        .rows = rows + r0,
                        .n = n,
                        .x = x,
                        .part = part,
                        .cands = cands,
                        .tok = tok,
                        .lp = lp,
                        .lse = lse};
        atomic_init(&r.next, 0);
        atomic_init(&r.status, FLS_OK);
        const int threads = ctx->threads < n ? ctx->threads : (int)n;
        st = run_threads(threads, repass_worker, &r);
        if (st == FLS_OK)
            st = (fls_status)atomic_load(&r.status);
    }
    free(x);
    return st;
}

/* The most the fused pass keeps of its logits for the second pass
 * (fls_cpu_opts.no_keep: nothing, the tests' switch). */
#define FLS_CPU_KEEP_BYTES ((uint64_t)256 << 20)

/* Whether some row may be left to the exact second pass: a filter that
 * reads a list no value bounds (FLS_LIST_OPEN), a list longer than the kept
 * one, or the log-sum-exp of a filtered support asked for (the support may
 * be larger than the list). */
static int may_need_second_pass(const tile_job *j, const fls_outputs *out)
{
    const fls_request *req = j->req;
    if (!req->rule || req->method != FLS_METHOD_FUSED)
        return 0;
    if (out->logsumexp || out->logprobs)
        return 1;
    for (int64_t b = 0; b < req->batch; b++) {
        /* a list no value bounds, or one longer than the kept list */
        int64_t exact;
        FLS_BOOL bounded, open;
        fls_filter_row_list(req->rule[b].value, INFINITY, &exact, &bounded, &open);
        if (open || exact > j->rc.top_cap)
            return 1;
    }
    return 0;
}

/* H (B, D) in any dtype -> f32 (B, Dp), zero padded to a multiple of 16. */
static float *convert_hidden(const fls_matrix *H, int64_t Dp)
{
    if (too_big(H->rows, Dp, sizeof(float)))
        return NULL;
    float *hf = malloc((size_t)(H->rows * Dp) * sizeof(float));
    if (!hf)
        return NULL;
    const size_t es = fls_dtype_bytes(H->dtype);
    for (int64_t b = 0; b < H->rows; b++)
        fls_convert_row((const char *)H->data + (size_t)(b * H->ld) * es, H->dtype, H->cols, hf + b * Dp, Dp);
    return hf;
}

static fls_status multinomial(const fls_context_t *ctx, const fls_matrix *L, const fls_request *req,
                              const fls_outputs *out);
static fls_status unfused_rules(const fls_context_t *ctx, const fls_matrix *L, const fls_request *req,
                                const fls_outputs *out);

/* The job's rule for the request, and what the tile loop must keep. */
static void job_rule(tile_job *j, const fls_outputs *out)
{
    const int want_lse = out->logsumexp || out->logprobs;
    j->rule = *cpu_rule_for(j->req, want_lse, &j->rc);
    if (j->rule.cand_size == 0) /* the family: sized per request */
        j->rule.cand_size = fls_stair_bytes(j->rc.stair_cap);
    j->rule.row_size = j->rc.top_cap ? fls_topc_bytes(j->rc.top_cap) : 0;
    j->want_parts = want_lse || j->rule.needs_part;
    j->moments = (j->req->needs & FLS_NEED_MOMENTS) != 0;
    /* skipping needs a rule that keeps the argmax alone and the per-token
     * noise (the kernel skips per token) */
    j->gup = NULL;
    if (j->rule.argmax_only && !j->rule.push_tile && j->req->noise != FLS_NOISE_MIN_FIRST &&
        j->k.gumbel_skip) {
        pthread_once(&gb_once, gb_init);
        j->gup = gb_up;
    }
}

static fls_status materialize_rows(const fls_context_t *ctx, const tile_job *j, const int64_t *rows,
                                   int64_t n, float *x)
{
    const int64_t V = j->req->vocab;
    if (j->keep) { /* the first pass's logits (the same floats a recomputation gives), masks,
                      bias and penalties applied */
        for (int64_t i = 0; i < n; i++)
            memcpy(x + i * V, j->keep + rows[i] * V, (size_t)V * sizeof(float));
    } else if (j->src == SRC_LOGITS) {
        const size_t es = fls_dtype_bytes(j->L->dtype);
        for (int64_t i = 0; i < n; i++) {
            j->k.convert((const char *)j->L->data + (size_t)(rows[i] * j->L->ld) * es, j->L->dtype, V,
                         x + i * V, V);
            if (j->req->mods)
                fls_mods_apply(&j->req->mods[rows[i]], x + i * V, 0, V);
        }
    } else {
        /* the rows' hidden states against all of W, through the same kernels */
        float *h = malloc((size_t)(n * j->Dp) * sizeof(float));
        if (!h)
            return FLS_ERR_OUT_OF_MEMORY;
        for (int64_t i = 0; i < n; i++)
            memcpy(h + i * j->Dp, j->Hf + rows[i] * j->Dp, (size_t)j->Dp * sizeof(float));
        fls_request sub = *j->req;
        sub.batch = n;
        sub.draws = 1;
        sub.K = 1;
        sub.mods = NULL; /* applied below, by the rows' own indices */
        tile_job m = *j;
        m.req = &sub;
        m.Hf = h;
        m.store = x;
        m.want_parts = 0;
        m.parts = NULL;
        fls_status st = run_tiles(ctx, &m, NULL);
        free(h);
        if (st != FLS_OK)
            return st;
        for (int64_t i = 0; j->req->mods && i < n; i++)
            fls_mods_apply(&j->req->mods[rows[i]], x + i * V, 0, V);
    }
    for (int64_t i = 0; i < n; i++) {
        const float T = j->req->rows[rows[i]].temperature;
        for (int64_t v = 0; v < V; v++)
            x[i * V + v] = fls_temper(x[i * V + v], T);
    }
    return FLS_OK;
}

fls_status fls_cpu_sample_fused(const fls_context_t *ctx, const fls_matrix *W, const fls_matrix *H,
                                const fls_request *req, const fls_outputs *out)
{
    const int64_t D = W->cols, Dp = (D + FLS_LANES - 1) / FLS_LANES * FLS_LANES;
    const int64_t B = req->batch, V = req->vocab;
    float *hf = convert_hidden(H, Dp);
    if (!hf)
        return FLS_ERR_OUT_OF_MEMORY;
    tile_job j;
    memset(&j, 0, sizeof j);
    fls_cpu_select_kernels(ctx->simd, &j.k);
    noise_kernels(&j.k, req->noise);
    j.req = req;
    job_rule(&j, out);
    j.src = SRC_FUSED;
    j.W = W;
    j.Hf = hf;
    j.D = D;
    j.Dp = Dp;
    /* the SIMD paths convert W inside dot_direct; the portable path converts
     * a tile once, then runs its f32 kernel */
    j.convert_w = ctx->simd == FLS_SIMD_PORTABLE && B > 2;
    j.tile_v = group_tile(choose_tile(ctx, SRC_FUSED, j.convert_w, Dp, V), req);

    fls_status st;
    if (req->method == FLS_METHOD_FUSED || req->method == FLS_METHOD_GROUPED) {
        /* a rule that may leave rows to the exact second pass: keep the
         * logits (B x V floats, at most FLS_CPU_KEEP_BYTES) so that pass
         * does not read W again; without the memory it recomputes them */
        if (!ctx->cpu_dev.no_keep && may_need_second_pass(&j, out) && !too_big(B, V, sizeof(float)) &&
            (uint64_t)(B * V) * sizeof(float) <= FLS_CPU_KEEP_BYTES)
            j.keep = malloc((size_t)(B * V) * sizeof(float));
        st = run_tiles(ctx, &j, out);
        free(j.keep);
    } else {
        /* unfused baselines: materialize B x V fp32 logits first */
        float *logits = too_big(B, V, sizeof(float)) ? NULL : malloc((size_t)(B * V) * sizeof(float));
        if (!logits) {
            free(hf);
            return FLS_ERR_OUT_OF_MEMORY;
        }
        j.store = logits;
        j.want_parts = 0;
        st = run_tiles(ctx, &j, out);
        fls_matrix L = {logits, FLS_DTYPE_F32, B, V, V};
        /* the stored logits have the masks, bias and penalties applied */
        fls_request plain = *req;
        plain.mods = NULL;
        if (st == FLS_OK)
            st = fls_cpu_sample_logits(ctx, &L, &plain, out);
        free(logits);
    }
    free(hf);
    return st;
}

fls_status fls_cpu_logits(const fls_context_t *ctx, const fls_matrix *W, const fls_matrix *H, float *out)
{
    const int64_t D = W->cols, Dp = (D + FLS_LANES - 1) / FLS_LANES * FLS_LANES;
    float *hf = convert_hidden(H, Dp);
    if (!hf)
        return FLS_ERR_OUT_OF_MEMORY;
    fls_request req;
    memset(&req, 0, sizeof req);
    req.batch = H->rows;
    req.vocab = W->rows;
    req.draws = 1;
    req.K = 1;
    tile_job j;
    memset(&j, 0, sizeof j);
    fls_cpu_select_kernels(ctx->simd, &j.k);
    j.req = &req;
    j.rule = cpu_rule_temperature;
    j.src = SRC_FUSED;
    j.W = W;
    j.Hf = hf;
    j.D = D;
    j.Dp = Dp;
    j.convert_w = ctx->simd == FLS_SIMD_PORTABLE && H->rows > 2;
    j.tile_v = choose_tile(ctx, SRC_FUSED, j.convert_w, Dp, W->rows);
    j.store = out;
    fls_status st = run_tiles(ctx, &j, NULL);
    free(hf);
    return st;
}

fls_status fls_cpu_sample_logits(const fls_context_t *ctx, const fls_matrix *L, const fls_request *req,
                                 const fls_outputs *out)
{
    if (req->method == FLS_METHOD_UNFUSED_MULTINOMIAL)
        return multinomial(ctx, L, req, out);
    if (req->method == FLS_METHOD_UNFUSED_GUMBEL && req->rule)
        return unfused_rules(ctx, L, req, out);
    tile_job j;
    memset(&j, 0, sizeof j);
    fls_cpu_select_kernels(ctx->simd, &j.k);
    noise_kernels(&j.k, req->noise);
    j.req = req;
    job_rule(&j, out);
    j.src = SRC_LOGITS;
    j.L = L;
    j.tile_v = group_tile(choose_tile(ctx, SRC_LOGITS, 0, 0, req->vocab), req);
    return run_tiles(ctx, &j, out);
}

/* ---- the unfused Gumbel method with a rule: every row materialized,
 * sorted, filtered, then the Gumbel-max over the support (the reference
 * the tests compare the one-pass path with) ---- */

typedef struct unf_job {
    const fls_matrix *L;
    const fls_request *req;
    fls_ref_ctx rc;
    fls_cpu_kernels k;
    atomic_llong next;
    atomic_int oom;
    fls_status *row_status;
    int64_t *tok;
    float *lp;
    double *lse;
} unf_job;

static void unfused_rules_worker(void *arg, int thread)
{
    (void)thread;
    unf_job *j = arg;
    const int64_t V = j->req->vocab, nout = j->req->draws * j->req->K;
    const size_t es = fls_dtype_bytes(j->L->dtype);
    float *x = malloc((size_t)V * sizeof(float));
    if (!x) {
        atomic_store(&j->oom, 1);
        return;
    }
    for (;;) {
        long long b = atomic_fetch_add(&j->next, 1);
        if (b >= j->req->batch)
            break;
        j->k.convert((const char *)j->L->data + (size_t)(b * j->L->ld) * es, j->L->dtype, V, x, V);
        if (j->req->mods)
            fls_mods_apply(&j->req->mods[b], x, 0, V);
        thread_state s;
        memset(&s, 0, sizeof s);
        temper_row(&s, x, V, j->req->rows[b].temperature);
        if (s.bad_nan || s.bad_temp) {
            j->row_status[b] = s.bad_nan ? FLS_ERR_NAN : FLS_ERR_TEMPERATURE;
            continue;
        }
        j->row_status[b] = (fls_status)fls_ref_row(&j->rc, b, x, NULL, j->k.gumbel, j->tok + b * nout,
                                                   j->lp + b * nout, &j->lse[b]);
    }
    free(x);
}

static fls_status unfused_rules(const fls_context_t *ctx, const fls_matrix *L, const fls_request *req,
                                const fls_outputs *out)
{
    const int64_t B = req->batch, nout = req->draws * req->K;
    unf_job j;
    memset(&j, 0, sizeof j);
    j.L = L;
    j.req = req;
    (void)cpu_rule_for(req, out->logsumexp || out->logprobs, &j.rc);
    fls_cpu_select_kernels(ctx->simd, &j.k);
    noise_kernels(&j.k, req->noise);
    atomic_init(&j.next, 0);
    atomic_init(&j.oom, 0);
    j.row_status = calloc((size_t)B, sizeof *j.row_status);
    j.tok = malloc((size_t)(B * nout) * sizeof *j.tok);
    j.lp = malloc((size_t)(B * nout) * sizeof *j.lp);
    j.lse = malloc((size_t)B * sizeof *j.lse);
    fls_status st = FLS_OK;
    if (!j.row_status || !j.tok || !j.lp || !j.lse)
        st = FLS_ERR_OUT_OF_MEMORY;
    if (st == FLS_OK) {
        int threads = ctx->threads < B ? ctx->threads : (int)B;
        st = run_threads(threads, unfused_rules_worker, &j);
        if (st == FLS_OK && atomic_load(&j.oom))
            st = FLS_ERR_OUT_OF_MEMORY;
        const fls_status order[] = {FLS_ERR_NAN, FLS_ERR_TEMPERATURE, FLS_ERR_ALL_MASKED,
                                    FLS_ERR_OUT_OF_MEMORY, FLS_ERR_INTERNAL};
        for (int k = 0; k < 5 && st == FLS_OK; k++)
            for (int64_t b = 0; b < B; b++)
                if (j.row_status[b] == order[k])
                    st = order[k];
    }
    if (st == FLS_OK) {
        memcpy(out->tokens, j.tok, (size_t)(B * nout) * sizeof *j.tok);
        if (out->logprobs)
            memcpy(out->logprobs, j.lp, (size_t)(B * nout) * sizeof *j.lp);
        for (int64_t b = 0; out->logsumexp && b < B; b++)
            out->logsumexp[b] = (float)j.lse[b];
    }
    free(j.row_status);
    free(j.tok);
    free(j.lp);
    free(j.lse);
    return st;
}

/* ---- the unfused multinomial baseline: softmax, then inverse CDF ---- */

typedef struct mn_job {
    const fls_matrix *L;
    const fls_request *req;
    fls_ref_ctx rc;
    const fls_outputs *out;
    atomic_llong next;
    atomic_int oom;
    fls_status *row_status; /* per row, so the reported error does not depend on threads */
    int64_t *tokens;        /* staging, B x draws */
    float *lse;             /* staging, B */
    float *lp;              /* staging, B x draws */
} mn_job;

static void multinomial_worker(void *arg, int thread)
{
    (void)thread;
    mn_job *j = arg;
    const int64_t V = j->req->vocab, draws = j->req->draws;
    const size_t es = fls_dtype_bytes(j->L->dtype);
    double *p = malloc((size_t)V * sizeof(double));
    float *x = malloc((size_t)V * sizeof(float));
    if (!p || !x) {
        atomic_store(&j->oom, 1);
        free(p);
        free(x);
        return;
    }
    for (;;) {
        long long b = atomic_fetch_add(&j->next, 1);
        if (b >= j->req->batch)
            break;
        const fls_row_params *rp = &j->req->rows[b];
        fls_convert_row((const char *)j->L->data + (size_t)(b * j->L->ld) * es, j->L->dtype, V, x, V);
        if (j->req->mods)
            fls_mods_apply(&j->req->mods[b], x, 0, V);
        double m = -INFINITY;
        int64_t amax = -1;
        int nan = 0, overflow = 0;
        for (int64_t v = 0; v < V; v++) {
            nan |= fls_bad_logit(x[v]);
            float t = fls_temper(x[v], rp->temperature);
            overflow |= fls_temper_overflows(x[v], t);
            x[v] = t;
            if (t > m) {
                m = t;
                amax = v;
            }
        }
        /* the tile engine's priority: NaN, then temperature, then all masked */
        j->row_status[b] = nan        ? FLS_ERR_NAN
                           : overflow ? FLS_ERR_TEMPERATURE
                           : amax < 0 ? FLS_ERR_ALL_MASKED
                                      : FLS_OK;
        if (j->row_status[b] != FLS_OK)
            continue;
        if (j->req->rule && fls_temperature_noisy(rp->temperature)) {
            /* the rule's support, from the sorted row; the rest gets no mass */
            float c;
            int r = fls_ref_cut(&j->rc, b, x, &c);
            if (r != FLS_OK) {
                j->row_status[b] = (fls_status)r;
                continue;
            }
            for (int64_t v = 0; v < V; v++)
                if (x[v] < c)
                    x[v] = -INFINITY;
        }
        if (!fls_temperature_noisy(rp->temperature)) { /* greedy: the first maximum */
            j->lse[b] = (float)m;
            for (int64_t d = 0; d < draws; d++) {
                j->tokens[b * draws + d] = amax;
                j->lp[b * draws + d] = 0.0f;
            }
            continue;
        }
        double s = 0.0;
        for (int64_t v = 0; v < V; v++)
            s += (p[v] = exp((double)x[v] - m));
        double lse = m + log(s);
        j->lse[b] = (float)lse;
        for (int64_t d = 0; d < draws; d++) {
            double u = fls_uniform_from_bits(fls_noise_bits(
                           rp->seed, rp->offset, j->req->first_draw + (uint32_t)d, FLS_MULTINOMIAL_TOKEN)) *
                       s;
            double c = 0.0;
            int64_t tok = -1;
            for (int64_t v = 0; v < V; v++) {
                if (p[v] == 0.0)
                    continue;
                c += p[v];
                tok = v;
                if (u < c)
                    break;
            }
            /* rounding can leave u >= c at the end: tok is then the last
             * token with positive probability, never a masked one */
            j->tokens[b * draws + d] = tok;
            j->lp[b * draws + d] = (float)((double)x[tok] - lse);
        }
    }
    free(p);
    free(x);
}

static fls_status multinomial(const fls_context_t *ctx, const fls_matrix *L, const fls_request *req,
                              const fls_outputs *out)
{
    const int64_t B = req->batch, draws = req->draws;
    mn_job j;
    memset(&j, 0, sizeof j);
    j.L = L;
    j.req = req;
    (void)cpu_rule_for(req, 0, &j.rc);
    j.out = out;
    atomic_init(&j.next, 0);
    atomic_init(&j.oom, 0);
    j.row_status = calloc((size_t)B, sizeof *j.row_status);
    j.tokens = malloc((size_t)(B * draws) * sizeof(int64_t));
    j.lse = malloc((size_t)B * sizeof(float));
    j.lp = malloc((size_t)(B * draws) * sizeof(float));
    fls_status st = FLS_OK;
    if (!j.tokens || !j.lse || !j.lp || !j.row_status)
        st = FLS_ERR_OUT_OF_MEMORY;
    if (st == FLS_OK) {
        int threads = ctx->threads < B ? ctx->threads : (int)B;
        st = run_threads(threads, multinomial_worker, &j);
        if (st == FLS_OK && atomic_load(&j.oom))
            st = FLS_ERR_OUT_OF_MEMORY;
        const fls_status order[] = {FLS_ERR_NAN, FLS_ERR_TEMPERATURE, FLS_ERR_ALL_MASKED,
                                    FLS_ERR_OUT_OF_MEMORY, FLS_ERR_INTERNAL};
        for (int k = 0; k < 5 && st == FLS_OK; k++)
            for (int64_t b = 0; b < B; b++)
                if (j.row_status[b] == order[k])
                    st = order[k];
    }
    if (st == FLS_OK) {
        memcpy(out->tokens, j.tokens, (size_t)(B * draws) * sizeof(int64_t));
        if (out->logsumexp)
            memcpy(out->logsumexp, j.lse, (size_t)B * sizeof(float));
        if (out->logprobs)
            memcpy(out->logprobs, j.lp, (size_t)(B * draws) * sizeof(float));
    }
    free(j.tokens);
    free(j.lse);
    free(j.lp);
    free(j.row_status);
    return st;
}

void fls_cpu_set_dev_opts(fls_context_t *ctx, const fls_cpu_opts *opts)
{
    if (!ctx)
        return;
    if (opts)
        ctx->cpu_dev = *opts;
    else
        memset(&ctx->cpu_dev, 0, sizeof ctx->cpu_dev);
}
