/*
 * cpu_kernels.h — the CPU engine's per-SIMD-path kernels.
 *
 * One accumulation order for every path, so logits (and therefore tokens)
 * are bit-identical whichever path runs: a dot product over D uses 16 lanes,
 * lane j accumulating the terms d = j (mod 16) with fma, in increasing d;
 * terms past D count as fma(0, 0, acc) = acc. The lanes are then reduced by
 * the fixed tree s[j] = a[j] + a[j+8] (j < 8), t[j] = s[j] + s[j+4] (j < 4),
 * u[j] = t[j] + t[j+2] (j < 2), result u[0] + u[1]. AVX2 holds the 16 lanes
 * in two 8-lane registers, AVX-512 in one, portable C in an array.
 * AVX-512 BF16's vdpbf16ps is not used: on bf16 W and bf16 H it computes
 * fma(even, fma(odd, acc)) per lane, so a permuted layout keeps this order
 * when no partial sum can be subnormal (it flushes them), but on Sapphire
 * Rapids it issues once per two cycles: half the multiply-adds per cycle
 * of vfmadd231ps, so slower in the register tiles than fma. AMX cannot
 * keep the order at all (a tile sums over k inside one accumulator): the
 * opt-in AMX path (cpu_amx.c, FLS_SIMD_AMX) has an order of its own, and
 * AUTO never picks it.
 */
#ifndef FLS_CPU_KERNELS_H
#define FLS_CPU_KERNELS_H

#include "flashsample.h"

#include <stdint.h>

#define FLS_LANES 16

/* The blocked kernels' panels (cpu_avx512.c): W is converted to f32 once
 * per panel of FLS_PANEL_TOKENS tokens x FLS_PANEL_COLS columns (exact; by
 * the first block of H rows, which reads W itself and fills the panel), and
 * each (H row, token) pair keeps its 16 lanes between panels in an
 * accumulator of 16 floats, for up to FLS_PANEL_ROWS H rows per pass
 * (tokens rounded up to whole 6-token register tiles). The accumulators are
 * stored and reloaded unchanged, so the per-lane fma order is the canonical
 * one whatever the panel sizes. */
#define FLS_PANEL_TOKENS    64
#define FLS_PANEL_TOKENS_UP 66
#define FLS_PANEL_COLS      1024
#define FLS_PANEL_ROWS      32
/* Floats of per-thread scratch a dot_direct call may use (64-byte aligned):
 * the converted panel, then the accumulators. */
#define FLS_CPU_SCRATCH_FLOATS                                                                               \
    (FLS_PANEL_TOKENS * FLS_PANEL_COLS + FLS_PANEL_ROWS * FLS_PANEL_TOKENS_UP * FLS_LANES)

typedef struct fls_cpu_kernels {
    /* out[b * ldo + i] = dot(W row i, H row b) for i < nv, b < B.
     * W rows are in their dtype (row stride ldw elements, D columns);
     * H rows are f32, zero padded to Dp = round_up(D, 16), stride Dp.
     * scratch: FLS_CPU_SCRATCH_FLOATS floats, 64-byte aligned, the caller's
     * thread's own. (The kernels do not prefetch the thread's next tile:
     * that cost 7-25 % at B = 8-16; the AVX-512 kernels prefetch the W rows
     * they stream a kilobyte, or 4 tokens, ahead.) */
    void (*dot_direct)(const void *w, fls_dtype wd, int64_t ldw, int64_t nv, int64_t D, const float *h,
                       const float *hp, int64_t B, int64_t Dp, float *out, int64_t ldo, float *scratch);
    /* H in the layout a path's kernels read it from (hp above: NULL, or
     * pack_h's copy of the same h, B, Dp, which callers make once per pass
     * over W and share read-only between threads, instead of every call
     * repacking it): packed_h_floats(B, Dp) floats, 64-byte aligned, or 0
     * (and pack_h NULL) where the path reads H as it is. */
    int64_t (*packed_h_floats)(int64_t B, int64_t Dp);
    void (*pack_h)(const float *h, int64_t B, int64_t Dp, float *hp);
    /* The same for f32 W rows already zero padded to Dp (stride Dp). */
    void (*dot_f32)(const float *w, int64_t nv, const float *h, int64_t B, int64_t Dp, float *out,
                    int64_t ldo);
    /* n elements of dtype -> f32 (exact), then zeros up to n_pad. */
    void (*convert)(const void *src, fls_dtype dt, int64_t n, float *dst, int64_t n_pad);
    /* g[i] = fls_gumbel(seed, offset, draw, v0 + i) for i < n. */
    void (*gumbel)(uint64_t seed, uint64_t offset, uint32_t draw, uint64_t v0, int64_t n, float *g);
    /* The same where token i's key may reach thr, else -inf: g[i] may be
     * -inf only where fl(x[i] + up[bits >> FLS_GB_SHIFT]) < thr, which
     * proves fl(x[i] + G) < thr (lib/base/fls_gumbel_bound.h; up is
     * fls_gumbel_bound_table's). The Philox bits of every token, the two
     * logs only where needed: with thr an exact key of the row, the argmax
     * of x + g is unchanged (portable: per token; AVX2: per 8 tokens). */
    void (*gumbel_skip)(uint64_t seed, uint64_t offset, uint32_t draw, uint64_t v0, int64_t n, const float *x,
                        float thr, const float *up, float *g);
} fls_cpu_kernels;

/* n elements of dtype -> f32 (exact), then zeros up to n_pad. */
void fls_convert_row(const void *src, fls_dtype dt, int64_t n, float *dst, int64_t n_pad);

void fls_cpu_kernels_portable(fls_cpu_kernels *k);
/* The table of a SIMD path (the portable one, upgraded by the path's). */
void fls_cpu_select_kernels(fls_simd simd, fls_cpu_kernels *k);
void fls_cpu_kernels_avx2(fls_cpu_kernels *k);
void fls_cpu_kernels_avx512(fls_cpu_kernels *k);
void fls_cpu_kernels_amx(fls_cpu_kernels *k);
/* Asks Linux for the tile registers' state (1: granted); only after the
 * processor's AMX-TILE and AMX-BF16 bits and XCR0's tile bits are checked. */
int fls_cpu_amx_permit(void);

/* The canonical lane reduction (see above), shared by every path. */
static inline float fls_reduce16(const float a[FLS_LANES])
{
    float s[8], t[4], u[2];
    for (int j = 0; j < 8; j++)
        s[j] = a[j] + a[j + 8];
    for (int j = 0; j < 4; j++)
        t[j] = s[j] + s[j + 4];
    for (int j = 0; j < 2; j++)
        u[j] = t[j] + t[j + 2];
    return u[0] + u[1];
}

#endif
