/*
 * test_transform.c — the uniform -> exponential -> Gumbel transform of
 * lib/base/fls_noise.h: range at the extremes, monotonicity and accuracy on a
 * dense sweep of the 64-bit input, and fls_logf_ against long double.
 *
 * Reference: U = (k + 1/2) 2^-64 is exact in long double (64-bit significand)
 * on each side when formed from q = k or q = ~k < 2^63, so
 *     E_ref = -logl(U)            (k < 2^63)
 *     E_ref = -log1pl(-(1 - U))   (k >= 2^63, 1 - U = (~k + 1/2) 2^-64)
 *     G_ref = -logl(E_ref).
 * Under valgrind long double arithmetic is done in double; the reference is
 * then still 29 bits finer than float, which these tolerances do not notice.
 */
#include "tests/unit/common.h"

#include <criterion/criterion.h>

#include <float.h>
#include <math.h>
#include <stdio.h>

#define LN2 0.693147180559945309417232121458176568

/* Unit in the last place of a float of magnitude |r| (r normal or zero). */
static long double ulpf(long double r)
{
    r = fabsl(r);
    if (r < (long double)FLT_MIN)
        return ldexpl(1.0L, -149);
    int e;
    (void)frexpl(r, &e); /* r in [2^(e-1), 2^e) */
    return ldexpl(1.0L, e - 1 - 23);
}

static long double ref_exponential(uint64_t k)
{
    if (!(k >> 63))
        return -logl((long double)(2 * k + 1) * 0x1p-65L);
    uint64_t q = ~k;
    return -log1pl(-((long double)(2 * q + 1) * 0x1p-65L));
}

static void check_range(uint64_t k)
{
    float e = fls_exponential_from_bits(k), g = fls_gumbel_from_bits(k);
    cr_assert(isfinite(e) && isfinite(g), "k %016llx: E %a G %a", (unsigned long long)k, (double)e,
              (double)g);
    cr_assert(e >= 0x1p-65f && e <= 45.06f, "k %016llx: E = %.9g outside [2^-65, 45.06]",
              (unsigned long long)k, (double)e);
    cr_assert(g >= -3.808f && g <= 45.06f && g <= FLS_GUMBEL_MAX,
              "k %016llx: G = %.9g outside [-3.808, 45.06]", (unsigned long long)k, (double)g);
    cr_assert_eq(f2u(g), f2u(-fls_logf_(e)), "G must be -log(E)");
}

Test(transform, extremes)
{
    const uint64_t top = 1ull << 63;
    const uint64_t ks[] = {
        0,         1,         2,         3,       0xffffffffull, 0x100000000ull,        top - 3,
        top - 2,   top - 1,   top,       top + 1, top + 2,       0xfffffffeffffffffull, 0xffffffff00000000ull,
        ~0ull - 3, ~0ull - 2, ~0ull - 1, ~0ull};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++)
        check_range(ks[i]);

    /* Both ends of E are reached: k = 0 gives 65 log 2, k = 2^64 - 1 gives 2^-65. */
    cr_assert_float_eq(fls_exponential_from_bits(0), 65.0 * LN2, 1e-5);
    cr_assert_eq(fls_exponential_from_bits(~0ull), 0x1p-65f);
    /* so G spans [-log(65 log 2), 65 log 2] = [-3.80787, 45.0546] */
    float gmax = fls_gumbel_from_bits(~0ull), gmin = fls_gumbel_from_bits(0);
    cr_assert_float_eq(gmax, 65.0 * LN2, 1e-5, "G max %.9g", (double)gmax);
    cr_assert_float_eq(gmin, -log(65.0 * LN2), 1e-5, "G min %.9g", (double)gmin);
    cr_assert(gmax <= FLS_GUMBEL_MAX && FLS_GUMBEL_MAX - gmax < 0.01f);
    /* The two halves meet continuously at U = 1/2: E = log 2 on both sides. */
    cr_assert_eq(f2u(fls_exponential_from_bits(top - 1)), f2u(fls_exponential_from_bits(top)));
    cr_assert_float_eq(fls_exponential_from_bits(top), LN2, 1e-7);
    /* G ordered at the ends */
    cr_assert(fls_gumbel_from_bits(0) <= fls_gumbel_from_bits(1));
    cr_assert(fls_gumbel_from_bits(~0ull - 1) <= fls_gumbel_from_bits(~0ull));
}

/* The lower-side sample points x(i), increasing in i, i < sweep_count():
 * dense 0 .. 2^D - 1; then for each binade [2^j, 2^(j+1)), j = D..62, S evenly
 * spaced points; then dense up to 2^63 - 1. The upper side uses k = ~x(i),
 * traversed with i decreasing, so the whole sweep is increasing in k. */
typedef struct sweep {
    int dense_log2;
    int per_binade_log2;
    uint64_t count;
} sweep;

static sweep sweep_make(int dense_log2, int per_binade_log2)
{
    sweep s = {dense_log2, per_binade_log2, 0};
    s.count = (2ull << dense_log2) + (uint64_t)(63 - dense_log2) * (1ull << per_binade_log2);
    return s;
}

static uint64_t sweep_x(const sweep *s, uint64_t i)
{
    uint64_t dense = 1ull << s->dense_log2, per = 1ull << s->per_binade_log2;
    if (i < dense)
        return i;
    i -= dense;
    uint64_t binade = i >> s->per_binade_log2;
    if (binade < (uint64_t)(63 - s->dense_log2)) {
        int j = s->dense_log2 + (int)binade;
        uint64_t m = i & (per - 1);
        int shift = j - s->per_binade_log2;
        return (1ull << j) + (shift >= 0 ? m << shift : m >> -shift);
    }
    i -= (uint64_t)(63 - s->dense_log2) * per;
    return (1ull << 63) - dense + i;
}

/* G non-decreasing and E non-increasing in k over the whole sweep (both
 * halves, the junction at 2^63, the ends), and accurate against long double. */
Test(transform, monotone_and_accurate_sweep, .timeout = 120)
{
    int shift = (int)sweep_scale_shift();
    /* about 2^24 points natively: 2^16 dense at each end and around 2^63,
     * 2^17 per binade in between */
    sweep s = sweep_make(16 - shift / 2, 17 - shift);
    int acc_stride_log2 = 2; /* the long-double reference on every 4th point */

    uint64_t prev_k = 0, npts = 0, nacc = 0;
    float prev_g = -INFINITY, prev_e = INFINITY;
    long double max_e_ulp = 0, max_g_ulp = 0, max_g_abs = 0;
    uint64_t worst_e_k = 0, worst_g_k = 0;
    for (int side = 0; side < 2; side++) {
        for (uint64_t t = 0; t < s.count; t++) {
            uint64_t x = sweep_x(&s, side ? s.count - 1 - t : t);
            uint64_t k = side ? ~x : x;
            if (npts > 0 && k <= prev_k)
                continue; /* segment overlaps */
            float e = fls_exponential_from_bits(k), g = fls_gumbel_from_bits(k);
            if (!(isfinite(g) && isfinite(e) && e >= 0x1p-65f && e <= 45.06f && g >= -3.808f && g <= 45.06f))
                cr_assert_fail("k %016llx: E %.9g G %.9g out of range", (unsigned long long)k, (double)e,
                               (double)g);
            if (g < prev_g || e > prev_e)
                cr_assert_fail("not monotone: k %016llx -> %016llx: E %.9g -> %.9g, G %.9g -> %.9g",
                               (unsigned long long)prev_k, (unsigned long long)k, (double)prev_e, (double)e,
                               (double)prev_g, (double)g);
            if ((npts & ((1u << acc_stride_log2) - 1)) == 0 || x < 64) {
                long double er = ref_exponential(k), gr = -logl(er);
                long double de = fabsl((long double)e - er) / ulpf(er);
                long double dg = fabsl((long double)g - gr);
                long double dgu = dg / ulpf(gr);
                if (de > max_e_ulp)
                    max_e_ulp = de, worst_e_k = k;
                if (fabsl(gr) < 0.5L && dg > max_g_abs)
                    max_g_abs = dg;
                /* G in ulps of G away from G = 0 (E near 1); near 0 the error
                 * is absolute, see the tolerance below */
                if (fabsl(gr) >= 0.5L && dgu > max_g_ulp)
                    max_g_ulp = dgu, worst_g_k = k;
                nacc++;
            }
            prev_k = k, prev_g = g, prev_e = e;
            npts++;
        }
    }
    cr_log_info("transform sweep: %llu points (%llu against long double): max error E %.3Lf ulp (k %016llx), "
                "G %.3Lf ulp for |G| >= 1/2 (k %016llx), |G| < 1/2 absolute %.3Lg",
                (unsigned long long)npts, (unsigned long long)nacc, max_e_ulp, (unsigned long long)worst_e_k,
                max_g_ulp, (unsigned long long)worst_g_k, max_g_abs);
    cr_assert_eq(prev_k, ~0ull, "the sweep must end at k = 2^64 - 1");
    /* E: one rounding of U (or 1 - U) to float (<= 1/2 ulp relative, at most
     * 1.5 ulp of E after the log on the U <= 1/2 side, where E >= log 2) plus
     * fls_logf_ (about 1 ulp) and, on the upper side, Goldberg's log1p. */
    cr_assert(max_e_ulp <= 3.0L, "E error %.3Lf ulp > 3 (k %016llx)", max_e_ulp,
              (unsigned long long)worst_e_k);
    /* G = -log E: a relative error r of E becomes an absolute error r in G,
     * so near G = 0 the bound is absolute (E within 3 ulp: <= 2^-21) and away from
     * it relative (measured: E 1.96 ulp, G 1.71 ulp, 1.3 2^-24 absolute). */
    cr_assert(max_g_ulp <= 3.0L, "G error %.3Lf ulp > 3 (k %016llx)", max_g_ulp,
              (unsigned long long)worst_g_k);
    cr_assert(max_g_abs <= 0x1p-21L, "G absolute error %.3Lg > 2^-21", max_g_abs);
}

/* fls_logf_ within 2 ulp of logl, and non-decreasing, on [2^-66, 64]: evenly
 * over every binade, densely around 1 (where log x -> 0), around each
 * binade's range-reduction switch at m = sqrt(1/2), and at powers of two. */
Test(transform, logf_accuracy, .timeout = 120)
{
    int shift = (int)sweep_scale_shift();
    long double max_ulp = 0;
    float worst = 0;
    uint64_t n = 0;
    float prev_x = 0, prev_y = -INFINITY;
    uint32_t per_binade = 1u << (16 - shift);
    for (int e = -66; e < 6; e++) {
        uint32_t base = f2u(ldexpf(1.0f, e));
        uint32_t sw = f2u(ldexpf(0.70710678118654752f, e + 1)); /* the branch point of this binade */
        uint32_t step = (1u << 23) / per_binade;
        /* increasing bit patterns = increasing floats: three ordered segments */
        uint32_t seg[3][2] = {{base, sw - 512}, {sw - 512, sw + 512}, {sw + 512, base + (1u << 23)}};
        for (int sg = 0; sg < 3; sg++) {
            uint32_t st = sg == 1 ? 1 : step;
            for (uint32_t u = seg[sg][0]; u < seg[sg][1]; u += st) {
                float x = u2f(u);
                float y = fls_logf_(x);
                long double r = logl((long double)x);
                long double err =
                    r == 0 ? fabsl((long double)y) / 0x1p-149L : fabsl((long double)y - r) / ulpf(r);
                if (err > max_ulp)
                    max_ulp = err, worst = x;
                if (x > prev_x && y < prev_y)
                    cr_assert_fail("fls_logf_ not monotone: log(%a) = %a > log(%a) = %a", (double)prev_x,
                                   (double)prev_y, (double)x, (double)y);
                prev_x = x, prev_y = y;
                n++;
            }
        }
    }
    /* dense around 1, where the result has its own small ulp */
    for (int32_t d = -(1 << (17 - shift)); d <= (1 << (17 - shift)); d++) {
        float x = u2f((uint32_t)((int32_t)f2u(1.0f) + d));
        float y = fls_logf_(x);
        long double r = logl((long double)x);
        if (r == 0) {
            cr_assert_eq(y, 0.0f, "log(1) = %a", (double)y);
            continue;
        }
        long double err = fabsl((long double)y - r) / ulpf(r);
        if (err > max_ulp)
            max_ulp = err, worst = x;
        n++;
    }
    cr_log_info("fls_logf_: %llu points on [2^-66, 64]: max error %.3Lf ulp at x = %a", (unsigned long long)n,
                max_ulp, (double)worst);
    cr_assert(max_ulp <= 2.0L, "fls_logf_ error %.3Lf ulp > 2 at x = %a", max_ulp, (double)worst);
}

/* The noise of consecutive tokens is a plain function of its arguments:
 * evaluating it twice, or in another order, gives the same bits. */
Test(transform, gumbel_is_pure)
{
    float g[64];
    for (int v = 0; v < 64; v++)
        g[v] = fls_gumbel(12345, 6, 1, (uint64_t)v);
    for (int v = 63; v >= 0; v--)
        cr_assert_eq(f2u(g[v]), f2u(fls_gumbel(12345, 6, 1, (uint64_t)v)));
}
