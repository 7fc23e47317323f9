#include "tests/unit/common.h"

#include <criterion/criterion.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(FLS_HAVE_VALGRIND_H)
#include <valgrind/valgrind.h>
#endif

uint32_t f2u(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

float u2f(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* ---- reference half conversions ---- */

float ref_f16_to_f32(uint16_t h)
{
    int sign = h >> 15, e = (h >> 10) & 0x1f, man = h & 0x3ff;
    float a;
    if (e == 0)
        a = ldexpf((float)man, -24);
    else if (e == 31)
        a = man ? NAN : INFINITY;
    else
        a = ldexpf((float)(1024 + man), e - 25);
    return sign ? -a : a;
}

uint16_t ref_f32_to_f16(float x)
{
    uint16_t sign = (f2u(x) >> 31) ? 0x8000 : 0;
    if (isnan(x))
        return (uint16_t)(sign | 0x7e00);
    double a = fabs((double)x);
    /* 65520 is the midpoint between 65504 (largest half) and 65536: ties to even -> inf. */
    if (a >= 65520.0)
        return (uint16_t)(sign | 0x7c00);
    if (a < 0x1p-14) {
        double q = nearbyint(a * 0x1p24); /* subnormal units, exact scaling; 1024 = min normal */
        return (uint16_t)(sign | (uint16_t)q);
    }
    int E;
    (void)frexp(a, &E); /* a = f 2^E, f in [0.5, 1) */
    int e = E - 1;      /* a in [2^e, 2^(e+1)) */
    double sig = nearbyint(ldexp(a, 10 - e));
    if (sig == 2048.0) {
        sig = 1024.0;
        e += 1;
    }
    if (e > 15)
        return (uint16_t)(sign | 0x7c00);
    return (uint16_t)(sign | (uint16_t)((e + 15) << 10) | (uint16_t)(sig - 1024.0));
}

float ref_bf16_to_f32(uint16_t h)
{
    return u2f((uint32_t)h << 16);
}

uint16_t ref_f32_to_bf16(float x)
{
    uint32_t u = f2u(x);
    if (isnan(x))
        return (uint16_t)((u >> 16) | 0x40); /* keep sign, force a quiet NaN */
    /* Round to nearest even on the dropped low 16 bits. */
    uint32_t hi = u >> 16, lo = u & 0xffff;
    if (lo > 0x8000 || (lo == 0x8000 && (hi & 1)))
        hi += 1; /* carries into the exponent correctly, up to inf */
    return (uint16_t)hi;
}

/* ---- matrices ---- */

static void store(void *mem, fls_dtype dtype, int64_t idx, float x, int exact)
{
    switch (dtype) {
    case FLS_DTYPE_F32:
        ((float *)mem)[idx] = x;
        break;
    case FLS_DTYPE_F16: {
        uint16_t h = ref_f32_to_f16(x);
        if (exact && !isnan(x))
            cr_assert(ref_f16_to_f32(h) == x, "test value %a is not exact in f16", (double)x);
        ((uint16_t *)mem)[idx] = h;
        break;
    }
    case FLS_DTYPE_BF16: {
        uint16_t h = ref_f32_to_bf16(x);
        if (exact && !isnan(x))
            cr_assert(ref_bf16_to_f32(h) == x, "test value %a is not exact in bf16", (double)x);
        ((uint16_t *)mem)[idx] = h;
        break;
    }
    default:
        cr_assert_fail("bad dtype in test helper");
    }
}

static size_t dsize(fls_dtype dtype)
{
    return dtype == FLS_DTYPE_F32 ? 4 : 2;
}

static tmat make(fls_dtype dtype, int64_t rows, int64_t cols, int64_t ld, const float *vals, int exact)
{
    cr_assert(ld >= cols && rows >= 0 && cols >= 0);
    tmat t;
    size_t n = (size_t)(rows * ld);
    /* 64-byte aligned, and at least one element so data is never NULL. */
    size_t bytes = ((n ? n : 1) * dsize(dtype) + 63) / 64 * 64;
    t.mem = aligned_alloc(64, bytes);
    cr_assert_not_null(t.mem);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < ld; j++)
            store(t.mem, dtype, i * ld + j, j < cols ? vals[i * cols + j] : NAN, exact);
    t.m.data = t.mem;
    t.m.dtype = dtype;
    t.m.rows = rows;
    t.m.cols = cols;
    t.m.ld = ld;
    return t;
}

tmat tmat_make(fls_dtype dtype, int64_t rows, int64_t cols, int64_t ld, const float *vals)
{
    return make(dtype, rows, cols, ld, vals, 1);
}

tmat tmat_make_rounded(fls_dtype dtype, int64_t rows, int64_t cols, int64_t ld, const float *vals)
{
    return make(dtype, rows, cols, ld, vals, 0);
}

void tmat_free(tmat *t)
{
    free(t->mem);
    t->mem = NULL;
    t->m.data = NULL;
}

float tmat_get(const tmat *t, int64_t i, int64_t j)
{
    int64_t idx = i * t->m.ld + j;
    switch (t->m.dtype) {
    case FLS_DTYPE_F32:
        return ((const float *)t->mem)[idx];
    case FLS_DTYPE_F16:
        return ref_f16_to_f32(((const uint16_t *)t->mem)[idx]);
    default:
        return ref_bf16_to_f32(((const uint16_t *)t->mem)[idx]);
    }
}

void tmat_set(tmat *t, int64_t i, int64_t j, float x)
{
    store(t->mem, t->m.dtype, i * t->m.ld + j, x, 0);
}

/* ---- test data ---- */

uint64_t trng_next(uint64_t *state)
{
    *state += 0x9E3779B97F4A7C15ull;
    return fls_splitmix64_(*state);
}

int64_t trng_int(uint64_t *state, int64_t lo, int64_t hi)
{
    return lo + (int64_t)(trng_next(state) % (uint64_t)(hi - lo + 1));
}

float trng_float(uint64_t *state)
{
    return (float)((int64_t)(trng_next(state) >> 40) - (1 << 23)) * 0x1p-23f;
}

float *exact_w(int64_t V, int64_t D, uint64_t seed)
{
    float *w = malloc((size_t)(V * D) * sizeof *w);
    cr_assert_not_null(w);
    for (int64_t i = 0; i < V * D; i++)
        w[i] = (float)trng_int(&seed, -8, 8) / 16.0f;
    return w;
}

float *exact_h(int64_t B, int64_t D, uint64_t seed)
{
    float *h = malloc((size_t)(B * D) * sizeof *h);
    cr_assert_not_null(h);
    for (int64_t i = 0; i < B * D; i++)
        h[i] = (float)trng_int(&seed, -8, 8) / 8.0f;
    return h;
}

float *exact_logits(const float *W, const float *H, int64_t V, int64_t B, int64_t D)
{
    cr_assert(D <= 16384, "exact logits need D <= 2^14");
    float *l = malloc((size_t)(B * V) * sizeof *l);
    cr_assert_not_null(l);
    for (int64_t b = 0; b < B; b++)
        for (int64_t v = 0; v < V; v++) {
            double s = 0;
            for (int64_t d = 0; d < D; d++)
                s += (double)H[b * D + d] * (double)W[v * D + d];
            l[b * V + v] = (float)s;
            cr_assert((double)l[b * V + v] == s, "logit not exact in float");
        }
    return l;
}

float *round_to_dtype(const float *x, int64_t n, fls_dtype dtype)
{
    float *y = malloc((size_t)(n ? n : 1) * sizeof *y);
    cr_assert_not_null(y);
    for (int64_t i = 0; i < n; i++)
        y[i] = dtype == FLS_DTYPE_F16    ? ref_f16_to_f32(ref_f32_to_f16(x[i]))
               : dtype == FLS_DTYPE_BF16 ? ref_bf16_to_f32(ref_f32_to_bf16(x[i]))
                                         : x[i];
    return y;
}

float *random_floats(int64_t n, uint64_t seed)
{
    float *x = malloc((size_t)(n ? n : 1) * sizeof *x);
    cr_assert_not_null(x);
    for (int64_t i = 0; i < n; i++)
        x[i] = trng_float(&seed);
    return x;
}

float *canonical_logits(const tmat *W, const tmat *H)
{
    const int64_t V = W->m.rows, B = H->m.rows, D = W->m.cols;
    float *l = malloc((size_t)(B * V) * sizeof *l);
    float *h = malloc((size_t)D * sizeof *h), *w = malloc((size_t)D * sizeof *w);
    cr_assert(l && h && w);
    for (int64_t b = 0; b < B; b++) {
        for (int64_t d = 0; d < D; d++)
            h[d] = tmat_get(H, b, d);
        for (int64_t v = 0; v < V; v++) {
            for (int64_t d = 0; d < D; d++)
                w[d] = tmat_get(W, v, d);
            float a[16] = {0}, s8[8], t4[4], u2[2];
            for (int64_t d = 0; d < D; d++)
                a[d % 16] = fmaf(w[d], h[d], a[d % 16]);
            for (int j = 0; j < 8; j++)
                s8[j] = a[j] + a[j + 8];
            for (int j = 0; j < 4; j++)
                t4[j] = s8[j] + s8[j + 4];
            for (int j = 0; j < 2; j++)
                u2[j] = t4[j] + t4[j + 2];
            l[b * V + v] = u2[0] + u2[1];
        }
    }
    free(h);
    free(w);
    return l;
}

/* ---- reference sampler ---- */

int64_t ref_token(const float *l, int64_t V, float T, uint64_t seed, uint64_t offset, uint32_t draw)
{
    int64_t best = -1;
    float best_key = -INFINITY;
    for (int64_t v = 0; v < V; v++) {
        if (l[v] == -INFINITY)
            continue;
        float key = T == 0.0f ? l[v] : l[v] / T + fls_gumbel(seed, offset, draw, (uint64_t)v);
        if (best < 0 || key > best_key) {
            best = v;
            best_key = key;
        }
    }
    return best;
}

double ref_logsumexp(const float *l, int64_t V, float T)
{
    double m = -INFINITY;
    for (int64_t v = 0; v < V; v++)
        if ((double)l[v] > m)
            m = l[v];
    if (T == 0.0f || m == -INFINITY)
        return m;
    double s = 0;
    for (int64_t v = 0; v < V; v++)
        s += exp(((double)l[v] - m) / (double)T);
    return m / (double)T + log(s);
}

/* ---- outputs ---- */

tout tout_make(int64_t B, int64_t draws, int with_stats)
{
    tout o;
    memset(&o, 0, sizeof o);
    o.B = B;
    o.draws = draws;
    o.tokens = aligned_alloc(64, ((size_t)(B * draws) * 8 + 63) / 64 * 64);
    cr_assert_not_null(o.tokens);
    if (with_stats) {
        o.logsumexp = aligned_alloc(64, ((size_t)B * 4 + 63) / 64 * 64);
        o.logprobs = aligned_alloc(64, ((size_t)(B * draws) * 4 + 63) / 64 * 64);
        cr_assert(o.logsumexp && o.logprobs);
    }
    o.out.tokens = o.tokens;
    o.out.logsumexp = o.logsumexp;
    o.out.logprobs = o.logprobs;
    tout_guard(&o);
    return o;
}

void tout_guard(tout *o)
{
    for (int64_t i = 0; i < o->B * o->draws; i++)
        o->tokens[i] = GUARD_TOKEN;
    if (o->logsumexp)
        for (int64_t i = 0; i < o->B; i++)
            o->logsumexp[i] = u2f(GUARD_F32_BITS);
    if (o->logprobs)
        for (int64_t i = 0; i < o->B * o->draws; i++)
            o->logprobs[i] = u2f(GUARD_F32_BITS);
}

void tout_free(tout *o)
{
    free(o->tokens);
    free(o->logsumexp);
    free(o->logprobs);
    memset(o, 0, sizeof *o);
}

int tout_untouched(const tout *o)
{
    for (int64_t i = 0; i < o->B * o->draws; i++)
        if (o->tokens[i] != GUARD_TOKEN)
            return 0;
    if (o->logsumexp)
        for (int64_t i = 0; i < o->B; i++)
            if (f2u(o->logsumexp[i]) != GUARD_F32_BITS)
                return 0;
    if (o->logprobs)
        for (int64_t i = 0; i < o->B * o->draws; i++)
            if (f2u(o->logprobs[i]) != GUARD_F32_BITS)
                return 0;
    return 1;
}

int tout_written(const tout *o, int64_t V)
{
    for (int64_t i = 0; i < o->B * o->draws; i++)
        if (o->tokens[i] < 0 || o->tokens[i] >= V)
            return 0;
    if (o->logsumexp)
        for (int64_t i = 0; i < o->B; i++)
            if (!isfinite(o->logsumexp[i]))
                return 0;
    if (o->logprobs)
        for (int64_t i = 0; i < o->B * o->draws; i++)
            if (!isfinite(o->logprobs[i]) || o->logprobs[i] > 0.0f)
                return 0;
    return 1;
}

fls_context_t *ctx_make(int threads, fls_simd simd, int64_t tile_v)
{
    fls_context_config cfg;
    fls_context_config_default(&cfg);
    cfg.threads = threads;
    cfg.simd = simd;
    cfg.tile_v = tile_v;
    fls_context_t *ctx = NULL;
    fls_status st = fls_context_create(&ctx, &cfg);
    cr_assert_eq(st, FLS_OK, "fls_context_create(threads %d, simd %d, tile_v %lld): %s", threads, (int)simd,
                 (long long)tile_v, fls_status_string(st));
    cr_assert_not_null(ctx);
    return ctx;
}

int64_t sweep_scale_shift(void)
{
    const char *env = getenv("FLS_UNIT_SWEEP_SHIFT");
    if (env)
        return atoi(env);
#if defined(FLS_HAVE_VALGRIND_H)
    if (RUNNING_ON_VALGRIND)
        return 5;
#endif
    const char *pre = getenv("LD_PRELOAD");
    if (pre && strstr(pre, "vgpreload"))
        return 5;
    return 0;
}

const char *kat_path(const char *path, const char *env)
{
    const char *e = env ? getenv(env) : NULL;
    return e && *e ? e : path;
}

int kat_each(const char *path, const char *env, const char *name, int nfields, int strict, kat_fn fn,
             void *arg)
{
    const char *file = kat_path(path, env);
    FILE *fp = fopen(file, "r");
    cr_assert_not_null(fp, "cannot open %s: %s (set %s)", file, strerror(errno), env ? env : "its path");
    cr_assert(nfields >= 0 && nfields <= 16);
    char buf[512];
    int count = 0, line = 0;
    while (fgets(buf, sizeof buf, fp)) {
        line++;
        char *hash = strchr(buf, '#');
        if (hash)
            *hash = '\0';
        char *save = NULL;
        char *tok = strtok_r(buf, " \t\r\n", &save);
        if (!tok)
            continue;
        if (strcmp(tok, name) != 0) {
            cr_assert(!strict, "%s:%d: unknown record '%s'", file, line, tok);
            continue;
        }
        uint64_t f[16];
        int n = 0;
        while ((tok = strtok_r(NULL, " \t\r\n", &save)) != NULL) {
            cr_assert(n < 16, "%s:%d: too many fields", file, line);
            char *end;
            errno = 0;
            f[n++] = strtoull(tok, &end, 16);
            cr_assert(*end == '\0' && errno == 0, "%s:%d: bad hex field '%s'", file, line, tok);
        }
        cr_assert_eq(n, nfields, "%s:%d: %s needs %d fields, has %d", file, line, name, nfields, n);
        fn(f, n, line, arg);
        count++;
    }
    fclose(fp);
    return count;
}
