/*
 * test_half.c — the public bf16/f16 <-> f32 conversions against independent
 * references (tests/unit/common.c): every 16-bit pattern to f32, and f32 to
 * 16 bits at every representable value, at every midpoint between
 * neighbours (ties to even) and one f32 ulp either side of it.
 */
#include "tests/unit/common.h"

#include <criterion/criterion.h>

#include <float.h>
#include <math.h>

static int same_float(float a, float b)
{
    return (isnan(a) && isnan(b)) || f2u(a) == f2u(b);
}

Test(half, bf16_to_f32_all_patterns)
{
    for (uint32_t h = 0; h < 65536; h++) {
        float got = fls_bf16_to_f32((uint16_t)h), want = ref_bf16_to_f32((uint16_t)h);
        cr_assert(same_float(got, want), "bf16 %04x -> %a, want %a", h, (double)got, (double)want);
    }
}

Test(half, f16_to_f32_all_patterns)
{
    for (uint32_t h = 0; h < 65536; h++) {
        float got = fls_f16_to_f32((uint16_t)h), want = ref_f16_to_f32((uint16_t)h);
        cr_assert(same_float(got, want), "f16 %04x -> %a, want %a", h, (double)got, (double)want);
    }
}

/* f32 -> half of x, checked against the reference and, for non-NaN x, for a
 * NaN-free result of the right sign. */
static void check_to_f16(float x)
{
    uint16_t got = fls_f32_to_f16(x), want = ref_f32_to_f16(x);
    if (isnan(x))
        cr_assert(isnan(ref_f16_to_f32(got)), "f16(NaN %08x) = %04x is not NaN", f2u(x), got);
    else
        cr_assert_eq(got, want, "f16(%a) = %04x, want %04x", (double)x, got, want);
}

static void check_to_bf16(float x)
{
    uint16_t got = fls_f32_to_bf16(x), want = ref_f32_to_bf16(x);
    if (isnan(x))
        cr_assert(isnan(ref_bf16_to_f32(got)), "bf16(NaN %08x) = %04x is not NaN", f2u(x), got);
    else
        cr_assert_eq(got, want, "bf16(%a) = %04x, want %04x", (double)x, got, want);
}

Test(half, f32_to_f16_round_to_nearest_even)
{
    for (uint32_t h = 0; h < 65536; h++) {
        float x = ref_f16_to_f32((uint16_t)h);
        check_to_f16(x);
        if (isnan(x))
            continue;
        if (!isinf(x))
            cr_assert_eq(fls_f32_to_f16(x), (uint16_t)h, "f16 %04x does not round-trip", h);
        /* the midpoint to the next half away from zero (exact in f32), and
         * one f32 ulp either side of it */
        uint16_t hn = (uint16_t)(h + 1);
        if ((h & 0x7fff) >= 0x7c00)
            continue;
        float xn = (h & 0x7fff) == 0x7bff ? copysignf(65536.0f, x) : ref_f16_to_f32(hn);
        float mid = (float)(((double)x + (double)xn) / 2);
        cr_assert_eq((double)mid, ((double)x + (double)xn) / 2, "midpoint must be exact in f32");
        check_to_f16(mid);
        check_to_f16(nextafterf(mid, 0.0f));
        check_to_f16(nextafterf(mid, copysignf(INFINITY, x)));
        /* ties to even */
        uint16_t r = fls_f32_to_f16(mid);
        cr_assert((r & 1) == 0, "f16(midpoint %a) = %04x is odd", (double)mid, r);
    }
    check_to_f16(NAN);
    check_to_f16(-NAN);
    check_to_f16(u2f(0x7f800001u)); /* signalling NaN with only low mantissa bits */
    check_to_f16(INFINITY);
    check_to_f16(-INFINITY);
    check_to_f16(1e30f);
    check_to_f16(0x1p-30f);  /* underflows to zero */
    check_to_f16(-0x1p-25f); /* exactly half the smallest subnormal: ties to even (0) */
    check_to_f16(0x1.8p-25f);
    check_to_f16(FLT_MIN);
    check_to_f16(u2f(1)); /* f32 subnormal */
    cr_assert_eq(fls_f32_to_f16(-0.0f), 0x8000);
}

Test(half, f32_to_bf16_round_to_nearest_even)
{
    for (uint32_t h = 0; h < 65536; h++) {
        float x = ref_bf16_to_f32((uint16_t)h);
        check_to_bf16(x);
        if (isnan(x))
            continue;
        if (!isinf(x))
            cr_assert_eq(fls_f32_to_bf16(x), (uint16_t)h, "bf16 %04x does not round-trip", h);
        if ((h & 0x7fff) >= 0x7f80)
            continue;
        /* the f32 patterns between h and h + 1: midpoint and its neighbours,
         * and a few others */
        uint32_t base = h << 16;
        const uint32_t lows[] = {0x0001, 0x7fff, 0x8000, 0x8001, 0xffff, 0x1234};
        for (int i = 0; i < 6; i++)
            check_to_bf16(u2f(base | lows[i]));
    }
    check_to_bf16(NAN);
    check_to_bf16(u2f(0x7f800001u)); /* a NaN whose payload is below bit 16 must stay NaN */
    check_to_bf16(u2f(0xff800001u));
    check_to_bf16(FLT_MAX); /* rounds up to inf */
    cr_assert_eq(fls_f32_to_bf16(FLT_MAX), 0x7f80);
    cr_assert_eq(fls_f32_to_bf16(-0.0f), 0x8000);
}
