/*
 * cpu_avx512.c — AVX-512F/BW/VL dot kernels: the 16 accumulation lanes of the
 * canonical order (cpu_kernels.h) are one zmm register. The noise uses the
 * AVX2 kernel (the path is only chosen where AVX2 is present too).
 * The unit tests and tools/simd_check force this path wherever the
 * processor has it, whatever FLS_SIMD_AUTO picks.
 */
#include "lib/cpu/cpu_kernels.h"
#include "lib/base/fls_dtype.h"

#include <immintrin.h>

static inline __m512 load16(const void *p, fls_dtype dt)
{
    switch (dt) {
    case FLS_DTYPE_BF16: {
        /* word 2k + 1 (the high half of lane k) = bf16 k, word 2k = 0: one
         * zero-masked permute, where zero-extend and shift take two uops */
        const __m512i idx = _mm512_set_epi16(15, 0, 14, 0, 13, 0, 12, 0, 11, 0, 10, 0, 9, 0, 8, 0, 7, 0, 6, 0,
                                             5, 0, 4, 0, 3, 0, 2, 0, 1, 0, 0, 0);
        return _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(
            0xAAAAAAAAu, idx, _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)p))));
    }
    case FLS_DTYPE_F16:
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
    case FLS_DTYPE_F32:
    default:
        return _mm512_loadu_ps((const float *)p);
    }
}

static inline float reduce(__m512 a)
{
    __m256 s = _mm256_add_ps(_mm512_castps512_ps256(a),
                             _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
    __m128 t = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    __m128 u = _mm_add_ps(t, _mm_movehl_ps(t, t));
    return _mm_cvtss_f32(_mm_add_ss(u, _mm_shuffle_ps(u, u, 1)));
}

#define NR 4
/* How far ahead the kernels prefetch the W rows they stream: the hardware's
 * streams alone left them waiting on memory (the panels' converting block:
 * bf16 fused/floor at B = 8-32 about 10-15 % higher without, 512 and 2048
 * bytes did worse; the direct kernel on 2-byte W: 13 % slower on one
 * thread, while 4-byte W, twice the bytes per instruction, gains nothing). */
#define W_AHEAD 1024

static void dot_direct_avx512(const void *w, fls_dtype wd, int64_t ldw, int64_t nv, int64_t D, const float *h,
                              int64_t B, int64_t Dp, float *out, int64_t ldo)
{
    const size_t es = fls_dtype_bytes(wd);
    const int64_t Dfull = D / FLS_LANES * FLS_LANES;
    for (int64_t i = 0; i < nv; i += NR) {
        int nr = nv - i < NR ? (int)(nv - i) : NR;
        const char *wr[NR];
        float tail[NR][FLS_LANES];
        for (int r = 0; r < nr; r++) {
            wr[r] = (const char *)w + (size_t)((i + r) * ldw) * es;
            if (Dfull < Dp)
                fls_convert_row(wr[r] + (size_t)Dfull * es, wd, D - Dfull, tail[r], FLS_LANES);
        }
        for (int64_t b = 0; b < B; b++) {
            const float *hb = h + b * Dp;
            __m512 acc[NR];
            for (int r = 0; r < NR; r++)
                acc[r] = _mm512_setzero_ps();
            for (int64_t d = 0; d < Dfull; d += FLS_LANES) {
                __m512 hv = _mm512_loadu_ps(hb + d);
                if (b == 0 && es == 2 && (d * es) % 64 == 0) /* 2-byte W: the rows' lines a kilobyte ahead */
                    for (int r = 0; r < nr; r++)
                        _mm_prefetch(wr[r] + d * es + W_AHEAD, _MM_HINT_T0);
                for (int r = 0; r < nr; r++)
                    acc[r] = _mm512_fmadd_ps(load16(wr[r] + (size_t)d * es, wd), hv, acc[r]);
            }
            if (Dfull < Dp) {
                __m512 hv = _mm512_loadu_ps(hb + Dfull);
                for (int r = 0; r < nr; r++)
                    acc[r] = _mm512_fmadd_ps(_mm512_loadu_ps(tail[r]), hv, acc[r]);
            }
            for (int r = 0; r < nr; r++)
                out[b * ldo + i + r] = reduce(acc[r]);
        }
    }
}

/* ---- the register-tiled kernels (B > 2) ----
 *
 * A register tile is MR tokens x NB H rows: MR * NB = 24 accumulators in zmm
 * registers (of 32), and per 16 columns MR W and NB H vector loads for 24
 * fmas. Each accumulator is one (token, H row) pair's 16 lanes, so lane j
 * sees the terms d = j (mod 16) in increasing d, one fma each, whatever the
 * tiling; between column ranges it is stored to scratch and reloaded bit
 * for bit. Edge tiles repeat the last valid W or H row and drop those sums.
 *
 * B <= NB (stream): one tile height covers every row, so each W vector is
 * loaded and converted in registers exactly once, straight from W.
 * B > NB (panel): W is converted to f32 once per panel of FLS_PANEL_TOKENS
 * tokens x FLS_PANEL_COLS columns, by the first NB-row block of H as it
 * computes; the other blocks read the panel from L1/L2: the conversion is
 * paid once per panel, not per row block. */

#define MR        6
#define NB        4
#define SRC_PANEL 3 /* W from a converted f32 panel; 0-2 are fls_dtype values */

static inline __attribute__((always_inline)) __m512 load_w(const int src, const char *p)
{
    return src == SRC_PANEL ? _mm512_load_ps((const float *)p) : load16(p, (fls_dtype)src);
}

/* One MR x NB tile over n columns (a multiple of 16): w[i] and h[b] point at
 * the first column (W in src's element size es, H f32); acc holds the
 * accumulators ([b * lda + i * 16]); first: start from zero, else from acc;
 * last: reduce the mv x bv valid sums into out, else store all into acc;
 * keep: also store each converted W vector at pw[i] (the panel rows), so
 * that the other row blocks read it there. */
static inline __attribute__((always_inline)) void
tile(const int src, const int es, const int first, const int last, const int keep,
     const char *const *restrict w, float *const *restrict pw, const float *const *restrict h, int64_t n,
     float *acc, int64_t lda, float *out, int64_t ldo, int mv, int bv)
{
    __m512 a[MR][NB];
    for (int i = 0; i < MR; i++)
        for (int b = 0; b < NB; b++)
            a[i][b] = first ? _mm512_setzero_ps() : _mm512_load_ps(acc + b * lda + i * FLS_LANES);
    for (int64_t d = 0; d < n; d += FLS_LANES) {
        __m512 x[MR];
        for (int i = 0; i < MR; i++) {
            /* W read from memory: its next lines, W_AHEAD bytes ahead (past the
             * column range: the next range's first lines) */
            if (src != SRC_PANEL && (d * es) % 64 == 0)
                _mm_prefetch(w[i] + d * es + W_AHEAD, _MM_HINT_T0);
            x[i] = load_w(src, w[i] + d * es);
            if (keep)
                _mm512_store_ps(pw[i] + d, x[i]);
        }
        for (int b = 0; b < NB; b++) {
            const __m512 hv = _mm512_loadu_ps(h[b] + d);
            for (int i = 0; i < MR; i++)
                a[i][b] = _mm512_fmadd_ps(x[i], hv, a[i][b]);
        }
    }
    if (last) {
        for (int i = 0; i < MR; i++)
            for (int b = 0; b < NB; b++)
                if (i < mv && b < bv)
                    out[b * ldo + i] = reduce(a[i][b]);
    } else {
        for (int i = 0; i < MR; i++)
            for (int b = 0; b < NB; b++)
                _mm512_store_ps(acc + b * lda + i * FLS_LANES, a[i][b]);
    }
}

/* mode: bit 0 = first column range, bit 1 = last, bit 2 = keep (W read
 * from src, a dtype, and stored into the panel). One instance per (src,
 * mode) used, so the loads and the accumulators' fate are not branches. */
static void run_tile(int src, int mode, const char *const *w, float *const *pw, const float *const *h,
                     int64_t n, float *acc, int64_t lda, float *out, int64_t ldo, int mv, int bv)
{
#define T(S, ES, F, L, K) tile(S, ES, F, L, K, w, pw, h, n, acc, lda, out, ldo, mv, bv)
#define DT(S, ES)                                                                                            \
    case S * 8 + 1:                                                                                          \
        T(S, ES, 1, 0, 0);                                                                                   \
        break;                                                                                               \
    case S * 8 + 3:                                                                                          \
        T(S, ES, 1, 1, 0);                                                                                   \
        break;                                                                                               \
    case S * 8 + 4:                                                                                          \
        T(S, ES, 0, 0, 1);                                                                                   \
        break;                                                                                               \
    case S * 8 + 5:                                                                                          \
        T(S, ES, 1, 0, 1);                                                                                   \
        break;                                                                                               \
    case S * 8 + 6:                                                                                          \
        T(S, ES, 0, 1, 1);                                                                                   \
        break;                                                                                               \
    case S * 8 + 7:                                                                                          \
        T(S, ES, 1, 1, 1);                                                                                   \
        break;
    switch (src * 8 + mode) {
        DT(FLS_DTYPE_F32, 4)
        DT(FLS_DTYPE_F16, 2)
        DT(FLS_DTYPE_BF16, 2)
    case SRC_PANEL * 8 + 0:
        T(SRC_PANEL, 4, 0, 0, 0);
        break;
    case SRC_PANEL * 8 + 1:
        T(SRC_PANEL, 4, 1, 0, 0);
        break;
    case SRC_PANEL * 8 + 2:
        T(SRC_PANEL, 4, 0, 1, 0);
        break;
    default:
        T(SRC_PANEL, 4, 1, 1, 0);
        break;
    }
#undef DT
#undef T
}

/* H row pointers of the block at row b (bv valid rows) at column k0 */
static inline void h_rows(const float *h, int64_t Dp, int64_t b, int bv, int64_t k0, const float **hr)
{
    for (int r = 0; r < NB; r++)
        hr[r] = h + (b + (r < bv ? r : bv - 1)) * Dp + k0;
}

/* B <= NB: MR-token tiles straight from W over its full 16-column chunks,
 * then the zero-padded tail (D mod 16 columns) from a converted copy. */
static void dot_stream_avx512(const void *w, fls_dtype wd, int64_t ldw, int64_t nv, int64_t D, const float *h,
                              int64_t B, int64_t Dp, float *out, int64_t ldo, float *scratch)
{
    const size_t es = fls_dtype_bytes(wd);
    const int64_t Dfull = D / FLS_LANES * FLS_LANES;
    const int bv = (int)B;
    float *acc = scratch, *tail = scratch + MR * NB * FLS_LANES;
    const float *hr[NB];
    for (int64_t i = 0; i < nv; i += MR) {
        const int mv = nv - i < MR ? (int)(nv - i) : MR;
        const char *wr[MR];
        for (int r = 0; r < MR; r++)
            wr[r] = (const char *)w + (size_t)((i + (r < mv ? r : mv - 1)) * ldw) * es;
        if (Dfull > 0) {
            h_rows(h, Dp, 0, bv, 0, hr);
            run_tile(wd, Dfull < Dp ? 1 : 3, wr, NULL, hr, Dfull, acc, MR * FLS_LANES, out + i, ldo, mv, bv);
        }
        if (Dfull < Dp) {
            const char *tr[MR];
            for (int r = 0; r < MR; r++) {
                fls_convert_row(wr[r] + (size_t)Dfull * es, wd, D - Dfull, tail + r * FLS_LANES, FLS_LANES);
                tr[r] = (const char *)(tail + r * FLS_LANES);
            }
            h_rows(h, Dp, 0, bv, Dfull, hr);
            run_tile(SRC_PANEL, Dfull > 0 ? 2 : 3, tr, NULL, hr, FLS_LANES, acc, MR * FLS_LANES, out + i, ldo,
                     mv, bv);
        }
    }
}

/* The columns of [k0, k0 + n) past W's last full 16-column chunk (D mod 16
 * of them, then zeros up to n; none if the range holds no tail) of nt W
 * rows, converted into the panel p (stride FLS_PANEL_COLS). Returns where
 * the full chunks end (relative to k0). */
static int64_t pack_tail(const char *w, fls_dtype wd, int64_t ldw, int64_t nt, int64_t D, int64_t k0,
                         int64_t n, float *p)
{
    const size_t es = fls_dtype_bytes(wd);
    const int64_t full = D - k0 < n ? (D - k0) / FLS_LANES * FLS_LANES : n;
    for (int64_t i = 0; full < n && i < nt; i++)
        fls_convert_row(w + (size_t)(i * ldw + k0 + full) * es, wd, D - k0 - full,
                        p + i * FLS_PANEL_COLS + full, n - full);
    return full;
}

/* B > NB: per panel of columns, the MR-token tiles (outer: their W rows stay
 * in L1) over the NB-row blocks of H (inner), up to FLS_PANEL_ROWS rows per
 * pass. The first block of rows reads W itself, converts it in registers
 * and leaves it in the panel, where the other blocks read it: the
 * conversion overlaps that block's arithmetic instead of a pass of its own. */
static void dot_panel_avx512(const void *w, fls_dtype wd, int64_t ldw, int64_t nv, int64_t D, const float *h,
                             int64_t B, int64_t Dp, float *out, int64_t ldo, float *scratch)
{
    const size_t es = fls_dtype_bytes(wd);
    float *panel = scratch, *acc = scratch + FLS_PANEL_TOKENS * FLS_PANEL_COLS;
    const float *hr[NB];
    for (int64_t t0 = 0; t0 < nv; t0 += FLS_PANEL_TOKENS) {
        const int64_t nt = nv - t0 < FLS_PANEL_TOKENS ? nv - t0 : FLS_PANEL_TOKENS;
        const int64_t lda = FLS_PANEL_TOKENS_UP * FLS_LANES; /* accumulators: [row][token][16] */
        const char *wt = (const char *)w + (size_t)(t0 * ldw) * es;
        for (int64_t b0 = 0; b0 < B; b0 += FLS_PANEL_ROWS) {
            const int64_t nb = B - b0 < FLS_PANEL_ROWS ? B - b0 : FLS_PANEL_ROWS;
            for (int64_t k0 = 0; k0 < Dp; k0 += FLS_PANEL_COLS) {
                const int64_t n = Dp - k0 < FLS_PANEL_COLS ? Dp - k0 : FLS_PANEL_COLS;
                const int first = k0 == 0, last = k0 + n == Dp, mode = first | last << 1;
                const int64_t full = pack_tail(wt, wd, ldw, nt, D, k0, n, panel);
                for (int64_t i = 0; i < nt; i += MR) {
                    const int mv = nt - i < MR ? (int)(nt - i) : MR;
                    const char *wr[MR], *pr[MR];
                    float *pw[MR];
                    for (int r = 0; r < MR; r++) {
                        const int64_t t = i + (r < mv ? r : mv - 1);
                        wr[r] = wt + (size_t)(t * ldw + k0) * es;
                        pw[r] = panel + t * FLS_PANEL_COLS;
                        pr[r] = (const char *)pw[r];
                    }
                    for (int64_t b = 0; b < nb; b += NB) {
                        const int bv = nb - b < NB ? (int)(nb - b) : NB;
                        float *ab = acc + b * lda + i * FLS_LANES, *ob = out + (b0 + b) * ldo + t0 + i;
                        h_rows(h, Dp, b0 + b, bv, k0, hr);
                        if (b > 0) {
                            run_tile(SRC_PANEL, mode, pr, NULL, hr, n, ab, lda, ob, ldo, mv, bv);
                            continue;
                        }
                        if (full > 0) /* W's full chunks, kept in the panel */
                            run_tile(wd, first | (last && full == n) << 1 | 4, wr, pw, hr, full, ab, lda, ob,
                                     ldo, mv, bv);
                        if (full < n) { /* the tail, converted by pack_tail */
                            const char *tr[MR];
                            for (int r = 0; r < MR; r++)
                                tr[r] = (const char *)(pw[r] + full);
                            h_rows(h, Dp, b0 + b, bv, k0 + full, hr);
                            run_tile(SRC_PANEL, (first && full == 0) | last << 1, tr, NULL, hr, n - full, ab,
                                     lda, ob, ldo, mv, bv);
                        }
                    }
                }
            }
        }
    }
}

/* ---- the row tiles (NB < B <= ROW_MAX) ----
 *
 * A register tile is one token x RB rows of H (RB = 8, 12 or 16
 * accumulators): per 16 columns one W vector, loaded and converted once,
 * meets RB H vectors, so W is read from memory exactly once, as the tile
 * computes, and never stored; the panels instead read it in their first
 * row block only and leave memory idle during the others (bf16, one
 * thread, W from DRAM: B = 8 0.72x, B = 16 0.79x the panels' time). H is
 * packed per range of ROW_COLS columns as [16-column chunk][row][16], so a
 * tile's RB loads are consecutive lines of L1 from one pointer (rows of H
 * lie 16 KiB apart at D = 4096: every one in the same L1 set). Between
 * ranges each (token, row) pair's lanes wait in acc, stored and reloaded
 * unchanged: the canonical order. */
/* RB x ROW_COLS floats of packed H stay in L1 (1024 columns: 1.6-1.9x
 * slower at RB = 16). A tile prefetches the W lines of the token ROW_AHEAD
 * tokens on (against the panels: 1 ahead 0.90-0.97x, 2 0.79-0.80, 4
 * 0.72-0.79, 8 no better). */
#define ROW_COLS  512
#define ROW_AHEAD 4
#define ROW_MAX   16 /* the largest B (and RB) of the row tiles */

_Static_assert(ROW_MAX *ROW_COLS + FLS_PANEL_TOKENS * ROW_MAX * FLS_LANES + FLS_LANES <=
                   FLS_CPU_SCRATCH_FLOATS,
               "the row tiles' packed H, accumulators and tail fit the scratch");

static inline __attribute__((always_inline)) void rows_tile(const fls_dtype dt, const int RB, const int first,
                                                            const int last, const char *w, const float *tail,
                                                            int64_t nfull, const char *wpf, const float *hp,
                                                            float *acc, float *out, int64_t ldo, int bv)
{
    const int es = dt == FLS_DTYPE_F32 ? 4 : 2;
    __m512 a[ROW_MAX];
    for (int r = 0; r < RB; r++)
        a[r] = first ? _mm512_setzero_ps() : _mm512_load_ps(acc + r * FLS_LANES);
    for (int64_t d = 0; d < nfull; d += FLS_LANES) {
        if ((d * es) % 64 == 0)
            _mm_prefetch(wpf + d * es, _MM_HINT_T0);
        const __m512 x = load16(w + d * es, dt);
        const float *hc = hp + d * RB;
        for (int r = 0; r < RB; r++)
            a[r] = _mm512_fmadd_ps(x, _mm512_load_ps(hc + r * FLS_LANES), a[r]);
    }
    if (tail) { /* the last chunk: W's D mod 16 columns, converted and zero padded */
        const __m512 x = _mm512_loadu_ps(tail);
        const float *hc = hp + nfull * RB;
        for (int r = 0; r < RB; r++)
            a[r] = _mm512_fmadd_ps(x, _mm512_load_ps(hc + r * FLS_LANES), a[r]);
    }
    if (last) {
        for (int r = 0; r < RB; r++)
            if (r < bv)
                out[r * ldo] = reduce(a[r]);
    } else {
        for (int r = 0; r < RB; r++)
            _mm512_store_ps(acc + r * FLS_LANES, a[r]);
    }
}

/* One instance per (dtype, RB, first, last), so neither is a branch. */
static void run_rows_tile(fls_dtype dt, int RB, int mode, const char *w, const float *tail, int64_t nfull,
                          const char *wpf, const float *hp, float *acc, float *out, int64_t ldo, int bv)
{
#define T(D, R, F, L)                                                                                        \
    if (dt == D && RB == R && mode == (F | L << 1)) {                                                        \
        rows_tile(D, R, F, L, w, tail, nfull, wpf, hp, acc, out, ldo, bv);                                   \
        return;                                                                                              \
    }
#define TR(D, R) T(D, R, 0, 0) T(D, R, 1, 0) T(D, R, 0, 1) T(D, R, 1, 1)
#define TD(D)    TR(D, 8) TR(D, 12) TR(D, 16)
    TD(FLS_DTYPE_BF16)
    TD(FLS_DTYPE_F16)
    TD(FLS_DTYPE_F32)
#undef TD
#undef TR
#undef T
}

static inline int rows_rb(int64_t B)
{
    return B <= 8 ? 8 : B <= 12 ? 12 : ROW_MAX;
}

/* H's range [k0, k0 + n) packed as [16-column chunk][row][16] (RB rows,
 * those past B zero) at hp. */
static void pack_range(const float *h, int64_t B, int64_t Dp, int RB, int64_t k0, int64_t n, float *hp)
{
    for (int64_t c = 0; c < n; c += FLS_LANES)
        for (int r = 0; r < RB; r++)
            _mm512_store_ps(hp + (c * RB + r * FLS_LANES),
                            r < B ? _mm512_loadu_ps(h + r * Dp + k0 + c) : _mm512_setzero_ps());
}

/* The row tiles' whole H: range k0 at hp + k0 * RB. */
static int64_t packed_h_floats_avx512(int64_t B, int64_t Dp)
{
    return B > NB && B <= ROW_MAX ? rows_rb(B) * Dp : 0;
}

static void pack_h_avx512(const float *h, int64_t B, int64_t Dp, float *hp)
{
    const int RB = rows_rb(B);
    for (int64_t k0 = 0; k0 < Dp; k0 += ROW_COLS)
        pack_range(h, B, Dp, RB, k0, Dp - k0 < ROW_COLS ? Dp - k0 : ROW_COLS, hp + k0 * RB);
}

static void dot_rows_avx512(const void *w, fls_dtype wd, int64_t ldw, int64_t nv, int64_t D, const float *h,
                            const float *hpack, int64_t B, int64_t Dp, float *out, int64_t ldo,
                            float *scratch)
{
    const size_t es = fls_dtype_bytes(wd);
    const int RB = rows_rb(B);
    const int64_t Dfull = D / FLS_LANES * FLS_LANES;
    float *hp = scratch, *acc = scratch + ROW_MAX * ROW_COLS,
          *tail = acc + FLS_PANEL_TOKENS * ROW_MAX * FLS_LANES;
    for (int64_t t0 = 0; t0 < nv; t0 += FLS_PANEL_TOKENS) {
        const int64_t nt = nv - t0 < FLS_PANEL_TOKENS ? nv - t0 : FLS_PANEL_TOKENS;
        const char *wt = (const char *)w + (size_t)(t0 * ldw) * es;
        for (int64_t k0 = 0; k0 < Dp; k0 += ROW_COLS) {
            const int64_t n = Dp - k0 < ROW_COLS ? Dp - k0 : ROW_COLS;
            const int mode = (k0 == 0) | (k0 + n == Dp) << 1;
            const int64_t nfull = Dfull - k0 < n ? Dfull - k0 : n; /* W's full chunks in the range */
            const float *hr = hpack ? hpack + k0 * RB : hp; /* H's range, packed (by the caller: 6 %) */
            if (!hpack)
                pack_range(h, B, Dp, RB, k0, n, hp);
            for (int64_t t = 0; t < nt; t++) {
                const char *wr = wt + (size_t)(t * ldw + k0) * es;
                if (nfull < n)
                    fls_convert_row(wr + (size_t)nfull * es, wd, D - k0 - nfull, tail, FLS_LANES);
                /* the token ROW_AHEAD on, in this range or (past the last token) the next */
                const int64_t tp = t + ROW_AHEAD < nt ? t + ROW_AHEAD : t + ROW_AHEAD - nt,
                              kp = t + ROW_AHEAD < nt ? k0 : k0 + n;
                const char *wpf = tp < nt && kp < Dfull ? wt + (size_t)(tp * ldw + kp) * es : wr;
                run_rows_tile(wd, RB, mode, wr, nfull < n ? tail : NULL, nfull, wpf, hr,
                              acc + t * ROW_MAX * FLS_LANES, out + t0 + t, ldo, (int)B);
            }
        }
    }
}

/* B = 1: the direct kernel, one pass over W with 4 row streams (bound by
 * the read of W); up to NB rows: the stream tiles (at B = 2 the direct
 * kernel's second pass over each row group left memory idle: 1.4x the
 * floor against 1.2x); up to 16: the row tiles (measured faster than the
 * panels at every B on the 2-core development machine; on a 16-thread
 * host of the same model only at B <= 8: docs/PERF.md); more: the panels. */
static void dot_avx512(const void *w, fls_dtype wd, int64_t ldw, int64_t nv, int64_t D, const float *h,
                       const float *hp, int64_t B, int64_t Dp, float *out, int64_t ldo, float *scratch)
{
    if (B == 1)
        dot_direct_avx512(w, wd, ldw, nv, D, h, B, Dp, out, ldo);
    else if (B <= NB)
        dot_stream_avx512(w, wd, ldw, nv, D, h, B, Dp, out, ldo, scratch);
    else if (B <= ROW_MAX)
        dot_rows_avx512(w, wd, ldw, nv, D, h, hp, B, Dp, out, ldo, scratch);
    else
        dot_panel_avx512(w, wd, ldw, nv, D, h, B, Dp, out, ldo, scratch);
}

static void dot_f32_avx512(const float *w, int64_t nv, const float *h, int64_t B, int64_t Dp, float *out,
                           int64_t ldo)
{
    dot_direct_avx512(w, FLS_DTYPE_F32, Dp, nv, Dp, h, B, Dp, out, ldo);
}

void fls_cpu_kernels_avx512(fls_cpu_kernels *k)
{
    fls_cpu_kernels_avx2(k);
    k->dot_direct = dot_avx512;
    k->packed_h_floats = packed_h_floats_avx512;
    k->pack_h = pack_h_avx512;
    k->dot_f32 = dot_f32_avx512;
}
