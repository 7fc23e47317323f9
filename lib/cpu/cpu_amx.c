/*
 * cpu_amx.c — bf16 W through AMX tiles (AMX-TILE + AMX-BF16), the AVX-512
 * path for everything else (f32 and f16 W, the noise, conversions).
 *
 * The one path whose logits are NOT in the canonical order (cpu_kernels.h):
 * tdpbf16ps sums 32 products per accumulator inside the tile unit, in an
 * order and with internal roundings the instruction does not specify, so
 * its logits differ from the other paths' in the last bits (measured by
 * tools/simd_check) and tokens agree with theirs except at near-ties.
 * FLS_SIMD_AUTO therefore never picks it. What does hold, and is tested:
 *   - every product is exact: W is bf16 and H (f32) is split into up to
 *     three bf16 parts h = h1 + h2 + h3 (truncations; exact for normal h
 *     above 2^-103), each part's products summed in its own tdpbf16ps;
 *   - a logit is a function of its W row and H row alone: every token is
 *     computed the same way (D in chunks of 32 from 0, parts 1..3 in order,
 *     the tails copied into zero-padded tiles), wherever it sits in a call,
 *     in a tile, or in the batch, so tokens do not depend on the tiling,
 *     the thread count or the batch position, and repeat run to run on one
 *     processor. The number of parts is the most any value of H needs; a
 *     part that is zero for a row adds +0 products, which leave a finite
 *     sum unchanged (W must be finite: inf x 0 is NaN, FLS_ERR_NAN).
 * The tile unit flushes subnormal inputs and results to zero (products of
 * values below about 2^-63 in magnitude).
 *
 * Layout: C[token][row] += A[token][k] B[k/2][row][k%2] per chunk of 32
 * columns, A read from W's rows as they are (16 tokens x 64 bytes), B the
 * chunk of one part of 16 H rows in the tile's pair layout (pack_h_amx).
 * One A tile at a time runs its whole D against up to four row blocks of H
 * in four accumulators (dot_amx).
 */
#define _GNU_SOURCE /* syscall */
#include "lib/cpu/cpu_kernels.h"
#include "lib/base/fls_dtype.h"

#include <immintrin.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ARCH_REQ_XCOMP_PERM 0x1023 /* asm/prctl.h */
#define XFEATURE_XTILEDATA  18

#define TOK    16 /* tokens per tile (A and C rows) */
#define ROWS   16 /* H rows per tile (C columns) */
#define KC     32 /* columns of D per chunk (A's 64 bytes) */
#define NACC   4  /* accumulator tiles: row blocks of H per pass over an A tile */
#define TILE_B 1024
#define PARTS  3

typedef struct {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

static int64_t chunks(int64_t Dp)
{
    return (Dp + KC - 1) / KC;
}

static int64_t round16(int64_t n)
{
    return (n + 15) / 16 * 16;
}

/* The AVX-512 table's packed H first (for the other dtypes), then a
 * 16-float header (the number of parts), then the tiles. */
static int64_t amx_offset(int64_t B, int64_t Dp)
{
    fls_cpu_kernels k;
    fls_cpu_kernels_avx512(&k);
    return round16(k.packed_h_floats(B, Dp));
}

static int64_t packed_h_floats_amx(int64_t B, int64_t Dp)
{
    const int64_t nrb = (B + ROWS - 1) / ROWS;
    return amx_offset(B, Dp) + 16 + nrb * PARTS * chunks(Dp) * (TILE_B / 4);
}

static float trunc_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    u &= 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}

static uint16_t bf16_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    return (uint16_t)(u >> 16);
}

/* Part p (0, 1, 2) of h: h1 = trunc(h), h2 = trunc(h - h1), h3 = h - h1 - h2
 * (every subtraction exact: it clears leading bits) */
static float part_of(float x, int p)
{
    for (int q = 0; q < p; q++)
        x -= trunc_bf16(x);
    return trunc_bf16(x);
}

static int parts_needed(const float *h, int64_t n)
{
    int np = 1;
    for (int64_t i = 0; i < n && np < PARTS; i++) {
        float r = h[i] - trunc_bf16(h[i]);
        if (r != 0.0f) {
            np = np < 2 ? 2 : np;
            if (r - trunc_bf16(r) != 0.0f)
                np = 3;
        }
    }
    return np;
}

/* The B tile of chunk c, part p, rows r0 .. r0 + 15: [kk][row][2] bf16. */
static void pack_tile(const float *h, int64_t B, int64_t Dp, int64_t r0, int64_t c, int p, uint16_t *t)
{
    for (int kk = 0; kk < KC / 2; kk++)
        for (int n = 0; n < ROWS; n++)
            for (int q = 0; q < 2; q++) {
                const int64_t d = c * KC + 2 * kk + q, r = r0 + n;
                t[(kk * ROWS + n) * 2 + q] = r < B && d < Dp ? bf16_bits(part_of(h[r * Dp + d], p)) : 0;
            }
}

static void pack_h_amx(const float *h, int64_t B, int64_t Dp, float *hp)
{
    fls_cpu_kernels k;
    fls_cpu_kernels_avx512(&k);
    if (k.pack_h)
        k.pack_h(h, B, Dp, hp);
    float *hdr = hp + amx_offset(B, Dp);
    const int32_t np = parts_needed(h, B * Dp);
    memset(hdr, 0, 16 * sizeof(float));
    memcpy(hdr, &np, sizeof np);
    uint16_t *tiles = (uint16_t *)(hdr + 16);
    const int64_t nc = chunks(Dp), nrb = (B + ROWS - 1) / ROWS;
    for (int64_t rb = 0; rb < nrb; rb++)
        for (int p = 0; p < PARTS; p++)
            for (int64_t c = 0; c < nc; c++)
                pack_tile(h, B, Dp, rb * ROWS, c, p, tiles + ((rb * PARTS + p) * nc + c) * (TILE_B / 2));
}

/* A tile from W rows t0 .. t0 + 15 (of nv), columns c * 32 .. + 31 (of D),
 * zeros past either end, into buf (16 x 64 bytes) */
static void build_a(const uint16_t *w, int64_t ldw, int64_t t0, int64_t nv, int64_t D, int64_t c,
                    uint16_t *buf)
{
    const int64_t n = D - c * KC < KC ? D - c * KC : KC;
    const __mmask32 m = n >= 32 ? 0xffffffffu : (1u << n) - 1u;
    for (int r = 0; r < TOK; r++) {
        __m512i v = _mm512_setzero_si512();
        if (t0 + r < nv)
            v = _mm512_maskz_loadu_epi16(m, w + (t0 + r) * ldw + c * KC);
        _mm512_storeu_si512(buf + r * (KC), v);
    }
}

/* H's tiles of chunk c, part p, row block rb: packed by the caller, or
 * built here into buf (the same bits) */
static const uint16_t *h_tile(const uint16_t *tiles, const float *h, int64_t B, int64_t Dp, int64_t nc,
                              int64_t rb, int p, int64_t c, uint16_t *buf)
{
    if (tiles)
        return tiles + ((rb * PARTS + p) * nc + c) * (TILE_B / 2);
    pack_tile(h, B, Dp, rb * ROWS, c, p, buf);
    return buf;
}

/* accumulator CT += the A tile (4) times row block rb's parts (5, 6, 7) */
#define ROW_BLOCK(CT, j)                                                                                     \
    do {                                                                                                     \
        if ((j) < nrg) {                                                                                     \
            const int64_t rb = g0 + (j);                                                                     \
            _tile_loadd(5, h_tile(tiles, h, B, Dp, nc, rb, 0, c, hbuf), 64);                                 \
            _tile_dpbf16ps(CT, 4, 5);                                                                        \
            if (np > 1) {                                                                                    \
                _tile_loadd(6, h_tile(tiles, h, B, Dp, nc, rb, 1, c, hbuf), 64);                             \
                _tile_dpbf16ps(CT, 4, 6);                                                                    \
            }                                                                                                \
            if (np > 2) {                                                                                    \
                _tile_loadd(7, h_tile(tiles, h, B, Dp, nc, rb, 2, c, hbuf), 64);                             \
                _tile_dpbf16ps(CT, 4, 7);                                                                    \
            }                                                                                                \
        }                                                                                                    \
    } while (0)

/* One A tile (16 tokens) at a time, its whole D against up to NACC row
 * blocks of H in the accumulators: 16 W rows are read at once, as 16
 * ascending streams, which the hardware prefetcher follows (64 rows at
 * once, or software prefetches, left the memory at half its speed). */
static void dot_amx(const void *wv, fls_dtype wd, int64_t ldw, int64_t nv, int64_t D, const float *h,
                    const float *hp, int64_t B, int64_t Dp, float *out, int64_t ldo, float *scratch)
{
    if (wd != FLS_DTYPE_BF16) {
        fls_cpu_kernels k5;
        fls_cpu_kernels_avx512(&k5);
        k5.dot_direct(wv, wd, ldw, nv, D, h, hp, B, Dp, out, ldo, scratch);
        return;
    }
    const uint16_t *w = (const uint16_t *)wv;
    const int64_t nc = chunks(Dp), nrb = (B + ROWS - 1) / ROWS;
    /* scratch: the accumulators (4 KB), one A tile, one H tile */
    float *cbuf = scratch;
    uint16_t *abuf = (uint16_t *)(scratch + NACC * TILE_B / 4);
    uint16_t *hbuf = abuf + TILE_B / 2;
    const uint16_t *tiles = NULL;
    int np;
    if (hp) {
        const float *hdr = hp + amx_offset(B, Dp);
        int32_t n32;
        memcpy(&n32, hdr, sizeof n32);
        np = n32;
        tiles = (const uint16_t *)(hdr + 16);
    } else {
        np = parts_needed(h, B * Dp);
    }
    tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) {
        cfg.rows[t] = 16;
        cfg.colsb[t] = 64;
    }
    _tile_loadconfig(&cfg);
    for (int64_t t0 = 0; t0 < nv; t0 += TOK) {
        const int64_t nt = nv - t0 < TOK ? nv - t0 : TOK;
        for (int64_t g0 = 0; g0 < nrb; g0 += NACC) {
            const int nrg = (int)(nrb - g0 < NACC ? nrb - g0 : NACC);
            _tile_zero(0);
            _tile_zero(1);
            _tile_zero(2);
            _tile_zero(3);
            for (int64_t c = 0; c < nc; c++) {
                if (nt == TOK && (c + 1) * KC <= D) {
                    _tile_loadd(4, w + t0 * ldw + c * KC, ldw * 2);
                } else {
                    build_a(w, ldw, t0, nv, D, c, abuf);
                    _tile_loadd(4, abuf, KC * 2);
                }
                ROW_BLOCK(0, 0);
                ROW_BLOCK(1, 1);
                ROW_BLOCK(2, 2);
                ROW_BLOCK(3, 3);
            }
            _tile_stored(0, cbuf, 64);
            _tile_stored(1, cbuf + 256, 64);
            _tile_stored(2, cbuf + 512, 64);
            _tile_stored(3, cbuf + 768, 64);
            for (int j = 0; j < nrg; j++) {
                const int64_t r0 = (g0 + j) * ROWS, nb = B - r0 < ROWS ? B - r0 : ROWS;
                for (int64_t n = 0; n < nb; n++)
                    for (int64_t m = 0; m < nt; m++)
                        out[(r0 + n) * ldo + t0 + m] = cbuf[j * 256 + m * ROWS + n];
            }
        }
    }
    _tile_release();
}

/* Linux hands a process the tile registers' 8 KB of state only on request
 * (idempotent; the permission is the whole process's). */
int fls_cpu_amx_permit(void)
{
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}

void fls_cpu_kernels_amx(fls_cpu_kernels *k)
{
    fls_cpu_kernels_avx512(k);
    k->dot_direct = dot_amx;
    k->packed_h_floats = packed_h_floats_amx;
    k->pack_h = pack_h_amx;
}
