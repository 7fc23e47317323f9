/*
 * flashsample bench — CPU benchmark of the fused sampler against the unfused
 * baselines and the memory floor, all measured in the same run.
 *
 * Shapes: D=4096, V=151936 (Qwen-class LM head) and D=2048, V=32000; W in
 * bf16 and f32; B in {1, 4, 16}; H in f32; T = 0.7; one draw.
 * Engines: fused (FLS_METHOD_FUSED), unfused_multinomial and unfused_gumbel
 * (the library's baselines that materialize the B x V logits), and floor:
 * a read of W's bytes by the same number of threads, as fast as this
 * machine reads (several streams per thread, the widest vector loads).
 *
 * Napkin math: W is V*D*size bytes (1.24 GB bf16 / 2.49 GB f32 for the large
 * shape; 131 / 262 MB for the small one), far above any CPU cache, so every
 * run streams W from DRAM once; the floor is those bytes at the read
 * bandwidth measured here. fused/floor is how close sampling gets to "free".
 * B*V*D fma per call (10 G at B=16, large shape) decides where the CPU turns
 * compute bound.
 *
 * Caches: consecutive runs cycle through at least 3 copies of W, so that the
 * working set is at least 2 GiB and 8 times the last-level cache; no run finds
 * its W in cache (the copies hold the same values, so every engine sees
 * identical inputs).
 *
 * Timing: CLOCK_MONOTONIC around one call, one warm-up call per
 * configuration, then the median of R calls (min reported too). The CPU
 * engines of a configuration run interleaved (one call of each per round).
 */
#include "tools/bench_cuda.h"
#include "tools/cli.h"
#include "tools/cli_rules.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#define BENCH_DEFAULT_REPS 11
#define BENCH_QUICK_REPS   5
#define BENCH_MAX_LIST     16

static void bench_help(void)
{
    printf(
        "usage: flashsample bench [--device cpu|cuda] [options]\n"
        "\n"
        "Times the fused sampler (fls_sample_fused) against the unfused baselines (logits\n"
        "materialized, then softmax + multinomial or Gumbel argmax) and against the floor: one\n"
        "streaming read of W's bytes with the same number of threads, in the same run.\n"
        "CPU defaults: shapes D=4096 V=151936 and D=2048 V=32000, W in bf16 and f32, B in 1, 4, 16,\n"
        "T=0.7. Inputs are random; W is larger than the caches. Each time is the median of R runs\n"
        "after a warm-up run; on the CPU the engines of a configuration run interleaved (one call\n"
        "of each per round), so a drift of the machine's speed hits them alike. The SIMD path\n"
        "timed is printed and written to the CSV.\n"
        "\n"
        "options (both devices):\n"
        "  --device cpu|cuda   default cpu (cuda runs the GPU benchmark, if built)\n"
        "  --csv out.csv       write the results in long format (one row per engine and shape);\n"
        "                      an existing file is replaced only if it is a CSV this bench wrote\n"
        "                      (or with --force)\n"
        "  --force             let --csv replace any existing file\n"
        "                      created when the results are ready\n"
        "  --quick             fewer shapes and runs: on the CPU only the small shape, %d runs\n"
        "                      each (well under a minute)\n"
        "  --reps R            timed runs per configuration (CPU: default %d, %d with --quick;\n"
        "                      cuda: at least 100 unless --quick)\n"
        "  --shapes D:V,...    the (D, V) shapes to time, e.g. 4096:151936,2048:32000\n"
        "  --batches B,...     the batch sizes to time, e.g. 1,4,16\n"
        "  --engines E,...     time only these engines. CPU: floor, fused, unfused_multinomial,\n"
        "                      unfused_gumbel. cuda: the GPU engines listed by\n"
        "                      `flashsample bench --device cuda --help` (floor, cuBLAS and the\n"
        "                      dispatcher's pick always run there)\n"
        "CPU only:\n"
        "  --rules R,...       time the fused call once per sampling rule instead of the engines\n"
        "                      (off by default): none, all (min-p=0.05+top-k=50+top-p=0.9),\n"
        "                      grouped[=G] (FLS_METHOD_GROUPED, group size G), wr=K (without\n"
        "                      replacement), or NAME=VALUE of the rule registry (min-p, top-k,\n"
        "                      top-p, top-nsigma); terms joined by + combine, e.g.\n"
        "                      none,min-p=0.05,top-k=50,top-p=0.9,all,wr=4,grouped. The CSV then\n"
        "                      has a rule column and the exact second passes per rule\n"
        "  --threads K         threads, 0 = all cores (default)\n"
        "  --simd PATH         SIMD path: auto (default: the library's choice), portable, avx2,\n"
        "                      avx512 or amx (bf16 W through AMX tiles; never the automatic choice)\n"
        "\n"
        "CPU CSV columns: "
        "device,engine,dtype,B,V,D,median_ms,min_ms,gbps,gflops,fma_peak_gflops,reps,threads,\n"
        "simd,date,cpu (gflops = 2 B V D / median time, empty for the floor; fma_peak_gflops: the fp32 FMA\n"
        "peak measured in the same run with the same threads)\n"
        "(gbps = W bytes / median time); with --rules:\n"
        "device,engine,rule,dtype,B,V,D,median_ms,min_ms,gbps,vs_none,second_pass_rows,calls,reps,threads,\n"
        "simd,date,cpu (vs_none: median over the rule none's median of the same row, if timed).\n",
        BENCH_QUICK_REPS, BENCH_DEFAULT_REPS, BENCH_QUICK_REPS);
}

/* "a:b,c:d" (pairs) or "a,b,c" (pairs = 0) of positive integers <= max;
 * returns the count, or -1 after a message. */
static int parse_list(const char *opt, const char *s, int pairs, int64_t max, int64_t *out, int cap)
{
    int n = 0;
    const char *p = s;
    while (*p) {
        for (int k = 0; k <= pairs; k++) {
            char *end;
            long long v = strtoll(p, &end, 10);
            if (end == p || v < 1 || v > max || n >= cap) {
                cli_error("%s: expected %s of positive integers (at most %d entries, each <= %lld), got '%s'",
                          opt, pairs ? "D:V pairs separated by commas" : "a comma-separated list",
                          pairs ? cap / 2 : cap, (long long)max, s);
                return -1;
            }
            out[n++] = v;
            p = end;
            if (k < pairs) {
                if (*p != ':') {
                    cli_error("%s: expected D:V pairs separated by commas, got '%s'", opt, s);
                    return -1;
                }
                p++;
            }
        }
        if (*p == ',' && p[1])
            p++;
        else if (*p) {
            cli_error("%s: unexpected '%s' in '%s'", opt, p, s);
            return -1;
        }
    }
    return pairs ? n / 2 : n;
}

/* ---- a tiny fork-join helper for the floor and for filling the inputs ---- */

typedef void (*par_fn)(void *arg, int t, int n);
typedef struct par_job {
    par_fn fn;
    void *arg;
    int t, n;
} par_job;

static void *par_main(void *p)
{
    par_job *j = p;
    j->fn(j->arg, j->t, j->n);
    return NULL;
}

/* Runs fn(arg, t, n) for t = 0..n-1, thread 0 on the caller. */
static int par_run(int n, par_fn fn, void *arg)
{
    pthread_t tid[1024];
    par_job jobs[1024];
    int started = 0;
    for (int t = 0; t < n; t++)
        jobs[t] = (par_job){fn, arg, t, n};
    for (int t = 1; t < n; t++) {
        if (pthread_create(&tid[t], NULL, par_main, &jobs[t]) != 0)
            break;
        started = t;
    }
    fn(arg, 0, n);
    for (int t = 1; t <= started; t++)
        pthread_join(tid[t], NULL);
    if (started != n - 1) { /* could not start them all: run the rest here */
        for (int t = started + 1; t < n; t++)
            fn(arg, t, n);
    }
    return 0;
}

static void split(size_t total, size_t align, int t, int n, size_t *lo, size_t *hi)
{
    size_t units = total / align, per = units / (size_t)n, rem = units % (size_t)n;
    size_t a = (size_t)t * per + ((size_t)t < rem ? (size_t)t : rem);
    size_t b = a + per + ((size_t)t < rem ? 1 : 0);
    *lo = a * align;
    *hi = t == n - 1 ? total : b * align;
}

/* ---- the floor: every byte of W read once, summed as 64-bit words ---- */

typedef struct floor_job {
    const unsigned char *data;
    size_t bytes;
    atomic_size_t next; /* the next FLOOR_CHUNK to read */
    uint64_t sums[1024];
} floor_job;

static volatile uint64_t floor_sink;

/* The floor reads W as fast as this machine can: the threads take chunks
 * of FLOOR_CHUNK bytes from a shared counter (as the engine takes its
 * tiles: a thread the host delays does not hold up the rest; on a 16-core
 * Xeon 1.2x faster than a static split, on 2 cores equal, while 1-4 MiB
 * chunks were 1.15-1.3x slower there), read each in
 * FLOOR_STREAMS interleaved sequential streams (one keeps too few of W's
 * lines in flight) with the widest vector loads the processor has (the loop
 * is compiled once per instruction set and picked at run time: with 16-byte
 * loads a thread issues too few bytes per cycle, and the fused pass, which
 * reads with 64-byte loads, read W up to 1.4x faster than such a floor). */
#define FLOOR_STREAMS 8
#define FLOOR_CHUNK   ((size_t)16 << 20)

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define FLOOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define FLOOR_CLONES
#endif

/* The wrapping sum of the 64-bit words of nlines 64-byte lines from each of
 * the streams p[s], one line per vector add (GCC's generic vectors: one
 * 64-byte register with AVX-512, pieces of it without); the sum feeds a
 * volatile sink, so no load can be dropped. */
typedef uint64_t floor_vec __attribute__((vector_size(64)));

FLOOR_CLONES static uint64_t floor_sum(const uint64_t *const *p, size_t nlines)
{
    floor_vec acc[FLOOR_STREAMS];
    memset(acc, 0, sizeof acc);
    for (size_t i = 0; i < nlines * 8; i += 8)
        for (int s = 0; s < FLOOR_STREAMS; s++) {
            floor_vec x;
            memcpy(&x, p[s] + i, sizeof x);
            acc[s] += x;
        }
    uint64_t sum = 0;
    for (int s = 0; s < FLOOR_STREAMS; s++)
        for (int k = 0; k < 8; k++)
            sum += acc[s][k];
    return sum;
}

static void floor_worker(void *arg, int t, int n)
{
    (void)n;
    floor_job *j = arg;
    uint64_t sum = 0;
    for (;;) {
        const size_t c = atomic_fetch_add(&j->next, 1);
        if (c >= (j->bytes + FLOOR_CHUNK - 1) / FLOOR_CHUNK)
            break;
        const size_t lo = c * FLOOR_CHUNK, hi = j->bytes - lo < FLOOR_CHUNK ? j->bytes : lo + FLOOR_CHUNK;
        const size_t per = (hi - lo) / 64 / FLOOR_STREAMS;
        const uint64_t *p[FLOOR_STREAMS];
        for (int s = 0; s < FLOOR_STREAMS; s++)
            p[s] = (const uint64_t *)(j->data + lo + (size_t)s * per * 64);
        sum += floor_sum(p, per);
        /* what the streams left: the last words, then the last bytes */
        const uint64_t *q = (const uint64_t *)(j->data + lo);
        for (size_t i = per * FLOOR_STREAMS * 8; i < (hi - lo) / 8; i++)
            sum += q[i];
        for (size_t b = lo + (hi - lo) / 8 * 8; b < hi; b++)
            sum += j->data[b];
    }
    j->sums[t] = sum;
}

static void floor_run(floor_job *j, int threads)
{
    atomic_store(&j->next, 0);
    par_run(threads, floor_worker, j);
    uint64_t s = 0;
    for (int t = 0; t < threads; t++)
        s += j->sums[t];
    floor_sink ^= s;
}

/* ---- random inputs ---- */

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [-scale, scale). */
static float rand_sym(uint64_t *s, float scale)
{
    return ((float)(splitmix64(s) >> 40) * 0x1p-23f - 1.0f) * scale;
}

typedef struct fill_job {
    void *data;
    fls_dtype dtype;
    size_t count;
    float scale;
    uint64_t seed;
} fill_job;

static void fill_worker(void *arg, int t, int n)
{
    fill_job *j = arg;
    size_t lo, hi;
    split(j->count, 4096, t, n, &lo, &hi);
    uint64_t s = j->seed ^ ((uint64_t)t * 0xd1b54a32d192ed03ull);
    if (j->dtype == FLS_DTYPE_F32) {
        float *d = j->data;
        for (size_t i = lo; i < hi; i++)
            d[i] = rand_sym(&s, j->scale);
    } else {
        uint16_t *d = j->data;
        for (size_t i = lo; i < hi; i++)
            d[i] = fls_f32_to_bf16(rand_sym(&s, j->scale));
    }
}

/* ---- cache size ---- */

/* Largest last-level cache size that the system reports (sysfs and sysconf
 * can disagree in a VM; take the larger), 0 if unknown. */
static size_t llc_bytes(void)
{
    size_t best = 0;
#ifdef _SC_LEVEL3_CACHE_SIZE
    long v = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (v > 0)
        best = (size_t)v;
#endif
    for (int idx = 0; idx < 8; idx++) {
        char path[96], buf[32];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", idx);
        FILE *fp = fopen(path, "r");
        if (!fp)
            continue;
        if (fgets(buf, sizeof buf, fp)) {
            char *end;
            unsigned long long n = strtoull(buf, &end, 10);
            if (*end == 'K')
                n <<= 10;
            else if (*end == 'M')
                n <<= 20;
            if (n > best)
                best = (size_t)n;
        }
        fclose(fp);
    }
    return best;
}

/* ---- the FMA peak: independent chains of vector fma on every thread ----
 *
 * 12 accumulators per thread (more than latency x throughput of any x86
 * FMA unit), no memory operands: the machine's fp32 FMA throughput with the
 * bench's thread count, in GFLOP/s (2 per lane per fma). The widest vectors
 * the processor has (AVX-512 where present, else AVX2 + FMA), chosen at run
 * time; 0 if neither. The fused pass's fraction of it is 2 B V D / time. */

#define PEAK_ITERS 20000000L

#if defined(__x86_64__) && defined(__GNUC__)
#define PEAK_CHAINS(T, FMA, SET)                                                                             \
    T a0 = SET(1.0f), a1 = SET(2.0f), a2 = SET(3.0f), a3 = SET(4.0f), a4 = SET(5.0f), a5 = SET(6.0f);        \
    T a6 = SET(7.0f), a7 = SET(8.0f), a8 = SET(9.0f), a9 = SET(10.0f), a10 = SET(11.0f), a11 = SET(12.0f);   \
    const T x = SET(0.999999f), y = SET(1e-6f);                                                              \
    for (long k = 0; k < PEAK_ITERS; k++) {                                                                  \
        a0 = FMA(a0, x, y), a1 = FMA(a1, x, y), a2 = FMA(a2, x, y), a3 = FMA(a3, x, y);                      \
        a4 = FMA(a4, x, y), a5 = FMA(a5, x, y), a6 = FMA(a6, x, y), a7 = FMA(a7, x, y);                      \
        a8 = FMA(a8, x, y), a9 = FMA(a9, x, y), a10 = FMA(a10, x, y), a11 = FMA(a11, x, y);                  \
    }

static volatile float peak_sink;

__attribute__((target("avx2,fma"))) static void peak_avx2(void *arg, int t, int n)
{
    (void)arg, (void)t, (void)n;
    PEAK_CHAINS(__m256, _mm256_fmadd_ps, _mm256_set1_ps)
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                             _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
    s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
    peak_sink = _mm256_cvtss_f32(s);
}

__attribute__((target("avx512f"))) static void peak_avx512(void *arg, int t, int n)
{
    (void)arg, (void)t, (void)n;
    PEAK_CHAINS(__m512, _mm512_fmadd_ps, _mm512_set1_ps)
    __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                             _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
    s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)));
    peak_sink = _mm512_cvtss_f32(s);
}
#endif

/* The best of 5 runs after a warm-up, in GFLOP/s on `threads` threads (0: no x86 FMA);
 * *isa names the vectors used. */
static double fma_peak_gflops(int threads, const char **isa)
{
    *isa = "none";
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    par_fn fn = NULL;
    int lanes = 0;
    if (__builtin_cpu_supports("avx512f"))
        fn = peak_avx512, lanes = 16, *isa = "avx512";
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        fn = peak_avx2, lanes = 8, *isa = "avx2";
    if (!fn)
        return 0.0;
    double best = 0.0;
    for (int r = -1; r < 5; r++) { /* r = -1: warm-up (wide vectors may first lower the clock) */
        double t0 = cli_now();
        par_run(threads, fn, NULL);
        double g = 2.0 * 12.0 * lanes * (double)PEAK_ITERS * threads / (cli_now() - t0) / 1e9;
        best = g > best && r >= 0 ? g : best;
    }
    return best;
#else
    (void)threads;
    return 0.0;
#endif
}

/* ---- measurement ---- */

enum { ENG_FLOOR, ENG_FUSED, ENG_UNF_MULT, ENG_UNF_GUMBEL, ENG_COUNT };
static const char *const eng_name[ENG_COUNT] = {"floor", "fused", "unfused_multinomial", "unfused_gumbel"};

typedef struct result {
    int64_t D, V, B;
    fls_dtype dtype;
    double median_ms[ENG_COUNT]; /* NAN = not supported */
    double min_ms[ENG_COUNT];
} result;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct bench_ctx {
    fls_context_t *ctx;
    int threads;
    int reps;
    int step, steps;
    double *times;
    int64_t *tokens;
    const unsigned char *wbase; /* ncopies copies of W, stride bytes apart */
    size_t stride;
    int ncopies;
    unsigned calls; /* calls so far: the next one reads copy calls % ncopies */
} bench_ctx;

/* The copy of W the next timed call reads: the least recently read one. */
static const unsigned char *next_copy(bench_ctx *bc)
{
    return bc->wbase + (size_t)(bc->calls++ % (unsigned)bc->ncopies) * bc->stride;
}

/* The median and the minimum of n times (sorted in place). */
static void median_min(double *t, int n, double *median, double *min)
{
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    *median = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
    *min = t[0];
}

/* Times the wanted engines on one configuration, interleaved: each round
 * calls every engine once (round -1 warms up), so a drift of the machine's
 * speed during the run (a shared host's neighbours, its clocks) lands on
 * all engines alike and their ratios stay fair. Every call reads the copy of
 * W least recently read. Returns FLS_OK, or the status of a failed call; an
 * engine that answers FLS_ERR_UNSUPPORTED is left out (n/a); *failed: the
 * engine whose call failed. */
static fls_status time_engines(bench_ctx *bc, const int *want, const fls_matrix *W0, const fls_matrix *H,
                               floor_job *fj, result *r, int *failed)
{
    fls_matrix Wk = *W0;
    fls_params p[ENG_COUNT];
    int active[ENG_COUNT], nactive = 0;
    for (int e = 0; e < ENG_COUNT; e++) {
        fls_params_default(&p[e]);
        p[e].temperature_value = 0.7f;
        p[e].seed = 20260301;
        p[e].method = e == ENG_FUSED      ? FLS_METHOD_FUSED
                      : e == ENG_UNF_MULT ? FLS_METHOD_UNFUSED_MULTINOMIAL
                                          : FLS_METHOD_UNFUSED_GUMBEL;
        active[e] = want[e];
        nactive += want[e];
        r->median_ms[e] = r->min_ms[e] = NAN;
    }
    fls_outputs out = {bc->tokens, NULL, NULL};
    for (int k = -1; k < bc->reps; k++) { /* k = -1: warm-up */
        cli_progress("[%d/%d] D=%lld V=%lld %s B=%lld, %d engines interleaved, round %d/%d", bc->step,
                     bc->steps, (long long)r->D, (long long)r->V, fls_dtype_name(r->dtype), (long long)r->B,
                     nactive, k + 1, bc->reps);
        for (int e = 0; e < ENG_COUNT; e++) {
            if (!active[e])
                continue;
            const unsigned char *w = next_copy(bc);
            Wk.data = w;
            fj->data = w;
            double t0 = cli_now();
            if (e == ENG_FLOOR) {
                floor_run(fj, bc->threads);
            } else {
                fls_status st = fls_sample_fused(bc->ctx, &Wk, H, &p[e], &out);
                if (st == FLS_ERR_UNSUPPORTED) {
                    active[e] = 0;
                    continue;
                }
                if (st != FLS_OK) {
                    *failed = e;
                    return st;
                }
            }
            double dt = cli_now() - t0;
            if (k >= 0)
                bc->times[e * bc->reps + k] = dt * 1e3;
        }
    }
    for (int e = 0; e < ENG_COUNT; e++)
        if (active[e])
            median_min(bc->times + e * bc->reps, bc->reps, &r->median_ms[e], &r->min_ms[e]);
    return FLS_OK;
}

/* ---- --rules: the fused call once per sampling rule ---- */

typedef struct bench_rule {
    char name[64]; /* the entry as given */
    char buf[64];  /* its terms, NUL-separated (the option strings point here) */
    fls_method method;
    int64_t group_size;
    cli_rule rule;
} bench_rule;

typedef struct rule_result {
    double median_ms, min_ms; /* NAN: not timed (unsupported) */
    uint64_t second, calls;   /* exact second passes (rows) over the timed calls */
} rule_result;

static int bad_rule(const char *entry, const char *why)
{
    cli_error(
        "--rules: '%s': %s (entries: none, all, grouped[=G], wr=K, or NAME=VALUE with NAME min-p, top-k, "
        "top-p or a rule of the registry such as top-nsigma; terms joined by +)",
        entry, why);
    return -1;
}

/* One entry ("top-k=50+top-p=0.9") into br. 0 or -1 after a message. */
static int parse_rule_entry(const char *entry, size_t len, bench_rule *br)
{
    memset(br, 0, sizeof *br);
    if (len == 0 || len >= sizeof br->buf) {
        snprintf(br->name, sizeof br->name, "%.*s", (int)(len < 60 ? len : 60), entry);
        return bad_rule(br->name, len ? "too long" : "empty entry");
    }
    memcpy(br->name, entry, len);
    memcpy(br->buf, entry, len);
    br->method = FLS_METHOD_FUSED;
    cli_rule_opts ro;
    memset(&ro, 0, sizeof ro);
    int grouped = 0, all = 0, none = 0;
    for (char *t = br->buf; t < br->buf + len;) {
        char *e = strchr(t, '+');
        if (e)
            *e = '\0';
        char *eq = strchr(t, '=');
        const char **slot = NULL;
        if (strcmp(t, "none") == 0) {
            none++;
        } else if (strcmp(t, "all") == 0) {
            if (all++ || ro.min_p || ro.top_k || ro.top_p)
                return bad_rule(br->name, "a filter given twice");
            ro.min_p = "0.05";
            ro.top_k = "50";
            ro.top_p = "0.9";
        } else if (strcmp(t, "grouped") == 0 || strncmp(t, "grouped=", 8) == 0) {
            if (grouped++)
                return bad_rule(br->name, "grouped given twice");
            br->method = FLS_METHOD_GROUPED;
            if (eq) {
                int64_t g;
                if (cli_parse_i64("--rules grouped=G", eq + 1, 2, (int64_t)1 << 20, &g) != 0)
                    return -1;
                if (g & (g - 1))
                    return bad_rule(br->name, "the group size is not a power of two");
                br->group_size = g;
            }
        } else if (eq && strncmp(t, "wr=", 3) == 0) {
            slot = &ro.wr;
        } else if (eq && strncmp(t, "min-p=", 6) == 0) {
            slot = &ro.min_p;
        } else if (eq && strncmp(t, "top-k=", 6) == 0) {
            slot = &ro.top_k;
        } else if (eq && strncmp(t, "top-p=", 6) == 0) {
            slot = &ro.top_p;
        } else if (eq) {
            if (ro.filter)
                return bad_rule(br->name, "one registry rule per entry");
            ro.filter = t; /* NAME=VALUE, checked by cli_rule_parse */
        } else {
            char why[96];
            snprintf(why, sizeof why, "unknown term '%.40s'", t);
            return bad_rule(br->name, why);
        }
        if (slot) {
            if (*slot)
                return bad_rule(br->name, "a term given twice");
            *slot = eq + 1;
        }
        t += strlen(t) + 1;
    }
    if (none && (grouped || all || cli_rule_given(&ro)))
        return bad_rule(br->name, "none combined with a rule");
    if (cli_rule_parse(&ro, &br->rule) != CLI_OK)
        return bad_rule(br->name, "bad value");
    br->rule.opts = NULL; /* ro goes out of scope */
    if (grouped && cli_rule_given(&ro))
        return bad_rule(br->name, "grouped takes no filter or wr (docs/GROUPED.md)");
    return 0;
}

static int parse_rules(const char *s, bench_rule *out, int cap)
{
    int n = 0;
    for (const char *p = s; *p;) {
        size_t len = strcspn(p, ",");
        if (n >= cap) {
            cli_error("--rules: at most %d entries", cap);
            return -1;
        }
        if (parse_rule_entry(p, len, &out[n]) != 0)
            return -1;
        n++;
        p += len + (p[len] == ',');
    }
    if (n == 0)
        cli_error("--rules: empty list");
    return n > 0 ? n : -1;
}

/* Times the fused call with one rule (floor-free: the engines' comparison is
 * the default bench). FLS_ERR_UNSUPPORTED is reported as n/a by the caller. */
static fls_status time_rule(bench_ctx *bc, const bench_rule *br, const fls_matrix *W0, const fls_matrix *H,
                            const result *r, rule_result *rr)
{
    fls_matrix Wk = *W0;
    fls_params p;
    fls_params_default(&p);
    p.temperature_value = 0.7f;
    p.seed = 20260301;
    p.method = br->method;
    p.group_size = br->group_size;
    cli_rule_apply(&br->rule, &p);
    fls_outputs out = {bc->tokens, NULL, NULL};
    fls_counters c0, c1;
    fls_counters_default(&c0);
    fls_counters_default(&c1);
    for (int k = -1; k < bc->reps; k++) { /* k = -1: warm-up */
        cli_progress("[%d/%d] D=%lld V=%lld %s B=%lld rule %-24s run %d/%d", bc->step, bc->steps,
                     (long long)r->D, (long long)r->V, fls_dtype_name(r->dtype), (long long)r->B, br->name,
                     k + 1, bc->reps);
        Wk.data = next_copy(bc);
        if (k == 0)
            (void)fls_context_counters(bc->ctx, &c0);
        double t0 = cli_now();
        fls_status st = fls_sample_fused(bc->ctx, &Wk, H, &p, &out);
        if (st != FLS_OK)
            return st;
        double dt = cli_now() - t0;
        if (k >= 0)
            bc->times[k] = dt * 1e3;
    }
    (void)fls_context_counters(bc->ctx, &c1);
    median_min(bc->times, bc->reps, &rr->median_ms, &rr->min_ms);
    rr->second = c1.second_pass_rows - c0.second_pass_rows;
    rr->calls = c1.calls - c0.calls;
    return FLS_OK;
}

static void cpu_model(char *out, size_t cap)
{
    snprintf(out, cap, "unknown");
    FILE *fp = fopen("/proc/cpuinfo", "r");
    if (!fp)
        return;
    char line[512];
    while (fgets(line, sizeof line, fp)) {
        if (strncmp(line, "model name", 10) == 0) {
            const char *c = strchr(line, ':');
            if (c) {
                c++;
                while (*c == ' ')
                    c++;
                snprintf(out, cap, "%s", c);
                for (char *q = out; *q; q++)
                    if (*q == ',' || *q == '"' || *q == '\n')
                        *q = *q == '\n' ? '\0' : ' ';
            }
            break;
        }
    }
    fclose(fp);
}

static void print_ratio(double a, double b)
{
    if (isnan(a) || isnan(b))
        printf(" %10s", "n/a");
    else
        printf(" %10.2f", a / b);
}

static void print_ms(double v)
{
    if (isnan(v))
        printf(" %10s", "n/a");
    else
        printf(" %10.2f", v);
}

/* The table and CSV of a --rules run. CLI_OK or CLI_FAIL. */
static int report_rules(const bench_rule *rules, int nrules, const result *res, const rule_result *rres,
                        int nr, const bench_ctx *bc, const char *simd, const char *date, const char *cpu,
                        const char *csv, fls_npy_file *fcsv, long long reps)
{
    int none = -1;
    for (int k = 0; k < nrules && none < 0; k++)
        if (strcmp(rules[k].name, "none") == 0)
            none = k;
    printf("\ntimes in ms (median) of the fused call per rule; vs none = median / the rule none's median\n");
    printf("%6s %7s %5s %5s  %-28s %10s %10s %8s %10s %10s\n", "D", "V", "W", "B", "rule", "median", "min",
           "vs none", "GB/s", "2nd pass");
    for (int i = 0; i < nr; i++) {
        const result *r = &res[i];
        const double wb = (double)(r->V * r->D) * (double)fls_dtype_size(r->dtype);
        for (int k = 0; k < nrules; k++) {
            const rule_result *rr = &rres[(size_t)i * (size_t)nrules + (size_t)k];
            printf("%6lld %7lld %5s %5lld  %-28.28s", (long long)r->D, (long long)r->V,
                   fls_dtype_name(r->dtype), (long long)r->B, rules[k].name);
            print_ms(rr->median_ms);
            print_ms(rr->min_ms);
            if (none >= 0 && !isnan(rr->median_ms) &&
                !isnan(rres[(size_t)i * (size_t)nrules + (size_t)none].median_ms))
                printf(" %8.3f", rr->median_ms / rres[(size_t)i * (size_t)nrules + (size_t)none].median_ms);
            else
                printf(" %8s", "n/a");
            if (isnan(rr->median_ms))
                printf(" %10s %10s\n", "n/a", "n/a");
            else
                printf(" %10.2f %4llu/%-5llu\n", wb / (rr->median_ms * 1e-3) / 1e9,
                       (unsigned long long)rr->second, (unsigned long long)(rr->calls * (uint64_t)r->B));
        }
    }
    if (!csv)
        return CLI_OK;
    if (cli_out_begin(fcsv, csv) != 0)
        return CLI_FAIL;
    FILE *fp = fcsv->fp;
    fprintf(
        fp,
        "device,engine,rule,dtype,B,V,D,median_ms,min_ms,gbps,vs_none,second_pass_rows,calls,reps,threads,"
        "simd,date,cpu\n");
    for (int i = 0; i < nr; i++) {
        const result *r = &res[i];
        const double wb = (double)(r->V * r->D) * (double)fls_dtype_size(r->dtype);
        for (int k = 0; k < nrules; k++) {
            const rule_result *rr = &rres[(size_t)i * (size_t)nrules + (size_t)k];
            if (isnan(rr->median_ms))
                continue;
            const double base = none >= 0 ? rres[(size_t)i * (size_t)nrules + (size_t)none].median_ms : NAN;
            fprintf(fp, "cpu,%s,%s,%s,%lld,%lld,%lld,%.6f,%.6f,%.4f,",
                    rules[k].method == FLS_METHOD_GROUPED ? "fused_grouped" : "fused", rules[k].name,
                    fls_dtype_name(r->dtype), (long long)r->B, (long long)r->V, (long long)r->D,
                    rr->median_ms, rr->min_ms, wb / (rr->median_ms * 1e-3) / 1e9);
            if (isnan(base))
                fprintf(fp, ",");
            else
                fprintf(fp, "%.4f,", rr->median_ms / base);
            fprintf(fp, "%llu,%llu,%lld,%d,%s,%s,%s\n", (unsigned long long)rr->second,
                    (unsigned long long)rr->calls, reps, bc->threads, simd, date, cpu);
        }
    }
    if (cli_out_commit(fcsv) != 0)
        return CLI_FAIL;
    printf("wrote %s\n", csv);
    return CLI_OK;
}

/* The table and CSV of the engines' run. CLI_OK or CLI_FAIL. */
static int report_engines(const result *res, int nr, const bench_ctx *bc, const char *simd, const char *date,
                          const char *cpu, const char *csv, fls_npy_file *fcsv, long long reps, double peak)
{
    printf("\ntimes in ms (median); ratios < 1 mean fused is faster; GB/s = W bytes / fused time;\n"
           "GFLOP/s = 2 B V D / fused time, %%peak its fraction of the FMA peak (%.1f GFLOP/s)\n",
           peak);
    printf("%6s %7s %5s %3s %10s %10s %10s %10s %10s %10s %10s %10s %10s %6s\n", "D", "V", "W", "B", "floor",
           "fused", "unf_mult", "unf_gumbel", "fus/floor", "fus/mult", "fus/gumbel", "fused GB/s", "GFLOP/s",
           "%peak");
    for (int i = 0; i < nr; i++) {
        const result *r = &res[i];
        printf("%6lld %7lld %5s %3lld", (long long)r->D, (long long)r->V, fls_dtype_name(r->dtype),
               (long long)r->B);
        for (int e = 0; e < ENG_COUNT; e++)
            print_ms(r->median_ms[e]);
        print_ratio(r->median_ms[ENG_FUSED], r->median_ms[ENG_FLOOR]);
        print_ratio(r->median_ms[ENG_FUSED], r->median_ms[ENG_UNF_MULT]);
        print_ratio(r->median_ms[ENG_FUSED], r->median_ms[ENG_UNF_GUMBEL]);
        double wb = (double)(r->V * r->D) * (double)fls_dtype_size(r->dtype);
        const double gf =
            2.0 * (double)r->B * (double)r->V * (double)r->D / (r->median_ms[ENG_FUSED] * 1e-3) / 1e9;
        if (isnan(r->median_ms[ENG_FUSED]))
            printf(" %10s %10s %6s\n", "n/a", "n/a", "n/a");
        else if (peak > 0)
            printf(" %10.2f %10.1f %5.1f%%\n", wb / (r->median_ms[ENG_FUSED] * 1e-3) / 1e9, gf,
                   100.0 * gf / peak);
        else
            printf(" %10.2f %10.1f %6s\n", wb / (r->median_ms[ENG_FUSED] * 1e-3) / 1e9, gf, "n/a");
    }
    if (!csv)
        return CLI_OK;
    if (cli_out_begin(fcsv, csv) != 0)
        return CLI_FAIL;
    FILE *fp = fcsv->fp;
    fprintf(fp,
            "device,engine,dtype,B,V,D,median_ms,min_ms,gbps,gflops,fma_peak_gflops,reps,threads,simd,date,"
            "cpu\n");
    for (int i = 0; i < nr; i++) {
        const result *r = &res[i];
        double wb = (double)(r->V * r->D) * (double)fls_dtype_size(r->dtype);
        for (int e = 0; e < ENG_COUNT; e++) {
            if (isnan(r->median_ms[e]))
                continue;
            /* gflops: the engine's 2 B V D over its time (none for the floor, which reads only) */
            char gf[32] = "";
            if (e != ENG_FLOOR)
                snprintf(gf, sizeof gf, "%.3f",
                         2.0 * (double)r->B * (double)r->V * (double)r->D / (r->median_ms[e] * 1e-3) / 1e9);
            fprintf(fp, "cpu,%s,%s,%lld,%lld,%lld,%.6f,%.6f,%.4f,%s,%.3f,%lld,%d,%s,%s,%s\n", eng_name[e],
                    fls_dtype_name(r->dtype), (long long)r->B, (long long)r->V, (long long)r->D,
                    r->median_ms[e], r->min_ms[e], wb / (r->median_ms[e] * 1e-3) / 1e9, gf, peak, reps,
                    bc->threads, simd, date, cpu);
        }
    }
    if (cli_out_commit(fcsv) != 0)
        return CLI_FAIL;
    printf("wrote %s\n", csv);
    return CLI_OK;
}

/* ---- the subcommand: options, then the runs ---- */

/* The options of a CPU bench: as given, then their values. */
typedef struct bench_opts {
    const char *csv, *reps_s, *threads_s, *simd_s, *shapes_s, *batches_s, *engines_s, *rules_s;
    int quick;
    int64_t reps, threads;
    fls_simd simd_want;
    int64_t shapes[BENCH_MAX_LIST][2]; /* {D, V} pairs */
    int64_t batches[BENCH_MAX_LIST];
    int nshapes, nbatches, want[ENG_COUNT];
    bench_rule *rules; /* nrules entries (0: the engines are timed) */
    int nrules;
    int64_t maxB, maxK; /* the largest batch, the most tokens per draw */
} bench_opts;

/* The device decides who parses the rest: the CUDA bench takes the same
 * argv and may accept options this one does not know. CLI_OK or CLI_USAGE. */
static int bench_parse_device(int argc, char **argv, fls_engine *engine)
{
    const char *device = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--device") == 0 && i + 1 < argc)
            device = argv[i + 1];
        else if (strncmp(argv[i], "--device=", 9) == 0)
            device = argv[i] + 9;
    }
    return cli_parse_device(device, engine) != 0 ? CLI_USAGE : CLI_OK;
}

/* The option table into bo's strings. CLI_OK (*help set or not) or CLI_USAGE. */
static int bench_parse_args(int argc, char **argv, bench_opts *bo, int *help)
{
    const char *device = NULL; /* parsed already (bench_parse_device); listed so that it is known */
    int force = 0;             /* read by bench_csv_guard */
    const cli_option opts[] = {{"--device", &device, NULL},         {"--csv", &bo->csv, NULL},
                               {"--force", NULL, &force},           {"--quick", NULL, &bo->quick},
                               {"--reps", &bo->reps_s, NULL},       {"--threads", &bo->threads_s, NULL},
                               {"--simd", &bo->simd_s, NULL},       {"--shapes", &bo->shapes_s, NULL},
                               {"--batches", &bo->batches_s, NULL}, {"--engines", &bo->engines_s, NULL},
                               {"--rules", &bo->rules_s, NULL},     {NULL, NULL, NULL}};
    return cli_parse(argc, argv, opts, help);
}

/* --engines E,...: the CPU engines to time into want[]. CLI_OK or CLI_USAGE. */
static int bench_parse_engines(const char *s, int *want)
{
    for (int e = 0; e < ENG_COUNT; e++)
        want[e] = 0;
    for (const char *p = s; *p;) {
        size_t n = strcspn(p, ",");
        int found = 0;
        for (int e = 0; e < ENG_COUNT; e++)
            if (strlen(eng_name[e]) == n && strncmp(p, eng_name[e], n) == 0)
                want[e] = found = 1;
        if (!found) {
            cli_error("--engines: unknown CPU engine '%.*s' (expected floor, fused, unfused_multinomial, "
                      "unfused_gumbel)",
                      (int)n, p);
            return CLI_USAGE;
        }
        p += n + (p[n] == ',');
    }
    return CLI_OK;
}

/* --reps, --threads, --simd, --shapes, --batches and --engines into their
 * values (defaults where not given; --quick: fewer). CLI_OK or CLI_USAGE. */
static int bench_parse_values(bench_opts *bo)
{
    bo->reps = bo->quick ? BENCH_QUICK_REPS : BENCH_DEFAULT_REPS;
    bo->threads = 0;
    if ((bo->reps_s && cli_parse_i64("--reps", bo->reps_s, 1, 100000, &bo->reps) != 0) ||
        (bo->threads_s && cli_parse_i64("--threads", bo->threads_s, 0, 1024, &bo->threads) != 0) ||
        cli_parse_simd(bo->simd_s, &bo->simd_want) != 0)
        return CLI_USAGE;
    const int64_t default_shapes[2][2] = {{4096, 151936}, {2048, 32000}}, default_batches[3] = {1, 4, 16};
    memcpy(bo->shapes, default_shapes, sizeof default_shapes);
    memcpy(bo->batches, default_batches, sizeof default_batches);
    bo->nshapes = 2;
    bo->nbatches = 3;
    for (int e = 0; e < ENG_COUNT; e++)
        bo->want[e] = 1;
    if (bo->quick) {
        bo->shapes[0][0] = 2048, bo->shapes[0][1] = 32000;
        bo->nshapes = 1;
    }
    if (bo->shapes_s && (bo->nshapes = parse_list("--shapes", bo->shapes_s, 1, (int64_t)1 << 32,
                                                  &bo->shapes[0][0], 2 * BENCH_MAX_LIST)) < 0)
        return CLI_USAGE;
    if (bo->batches_s &&
        (bo->nbatches = parse_list("--batches", bo->batches_s, 0, 4096, bo->batches, BENCH_MAX_LIST)) < 0)
        return CLI_USAGE;
    if (bo->engines_s && bench_parse_engines(bo->engines_s, bo->want) != CLI_OK)
        return CLI_USAGE;
    bo->maxB = 1;
    for (int i = 0; i < bo->nbatches; i++)
        bo->maxB = bo->batches[i] > bo->maxB ? bo->batches[i] : bo->maxB;
    return CLI_OK;
}

/* --rules R,...: the entries, each checked against every shape's V. CLI_OK or CLI_USAGE. */
static int bench_parse_rule_option(bench_opts *bo)
{
    static bench_rule rules[BENCH_MAX_LIST];
    bo->rules = rules;
    bo->nrules = 0;
    bo->maxK = 1;
    if (!bo->rules_s)
        return CLI_OK;
    if (bo->engines_s) {
        cli_error("--rules times the fused call per rule; it does not combine with --engines");
        return CLI_USAGE;
    }
    if ((bo->nrules = parse_rules(bo->rules_s, rules, BENCH_MAX_LIST)) < 0)
        return CLI_USAGE;
    for (int k = 0; k < bo->nrules; k++) {
        const cli_rule *rule = &rules[k].rule;
        bo->maxK = rule->wr_k > bo->maxK ? rule->wr_k : bo->maxK;
        for (int si = 0; si < bo->nshapes; si++) {
            const int64_t D = bo->shapes[si][0], V = bo->shapes[si][1];
            if (rule->top_k > V || rule->wr_k > V) {
                cli_error("--rules: '%s': %s %lld exceeds the vocabulary V = %lld of shape %lld:%lld",
                          rules[k].name, rule->top_k > V ? "top-k" : "wr",
                          (long long)(rule->top_k > V ? rule->top_k : rule->wr_k), (long long)V, (long long)D,
                          (long long)V);
                return CLI_USAGE;
            }
        }
    }
    return CLI_OK;
}

/* One CPU bench: its buffers, the timings, what is written. */
typedef struct bench_run {
    const bench_opts *o;
    fls_context_t *ctx;
    bench_ctx bc;
    result *res;       /* nres configurations (shape, dtype, batch), nr timed so far */
    rule_result *rres; /* nres x nrules */
    int nr;
    float *h;            /* H of the largest batch */
    void *w;             /* the copies of W */
    size_t llc, min_set; /* the last-level cache, W's working set */
    const char *simd;
    double peak;          /* the FMA peak, GFLOP/s (0: not measured) */
    const char *peak_isa; /* the vectors it used */
    char date[32], cpu[128];
    fls_npy_file fcsv;
} bench_run;

/* The results, the timing and token buffers, the bench context. CLI_OK or CLI_FAIL. */
static int bench_alloc(bench_run *run)
{
    const bench_opts *bo = run->o;
    const int nres = bo->nshapes * 2 * bo->nbatches;
    run->res = calloc((size_t)nres, sizeof *run->res);
    run->rres = calloc((size_t)nres * (size_t)(bo->nrules ? bo->nrules : 1), sizeof *run->rres);
    double *times = malloc((size_t)(ENG_COUNT * bo->reps) * sizeof *times); /* per engine */
    int64_t *tokens = malloc((size_t)(bo->maxB * bo->maxK) * sizeof *tokens);
    cli_utc_date(run->date);
    cpu_model(run->cpu, sizeof run->cpu);
    /* steps: one per rule and configuration, or one per configuration (its engines interleaved) */
    const int nwant = bo->nrules ? bo->nrules : 1;
    run->bc = (bench_ctx){
        run->ctx, fls_context_threads(run->ctx), (int)bo->reps, 0, nres * nwant, times, tokens, NULL, 0, 1,
        0};
    run->llc = llc_bytes();
    /* Rotate >= 3 copies over >= max(8 LLC, 2 GiB): a guest's reported LLC
     * need not be the host's, and no run may find W in a cache. */
    run->min_set = run->llc * 8 > ((size_t)2048 << 20) ? run->llc * 8 : ((size_t)2048 << 20);
    run->simd = fls_simd_name(fls_context_simd(run->ctx));
    if (!run->res || !run->rres || !times || !tokens) {
        cli_error("out of memory");
        return CLI_FAIL;
    }
    return CLI_OK;
}

/* Times every rule (--rules) or every wanted engine on W (one shape and
 * dtype) at batch B. CLI_OK or CLI_FAIL after a message. */
static int bench_time_batch(bench_run *run, const fls_matrix *W, floor_job *flj, int64_t B)
{
    const bench_opts *bo = run->o;
    bench_ctx *bc = &run->bc;
    const int64_t D = W->cols, V = W->rows;
    const fls_dtype dt = W->dtype;
    result *r = &run->res[run->nr++];
    r->D = D;
    r->V = V;
    r->B = B;
    r->dtype = dt;
    fls_matrix H = {run->h, FLS_DTYPE_F32, B, D, D};
    for (int e = 0; e < ENG_COUNT; e++)
        r->median_ms[e] = r->min_ms[e] = NAN;
    for (int k = 0; k < bo->nrules; k++) {
        rule_result *rr = &run->rres[(size_t)(run->nr - 1) * (size_t)bo->nrules + (size_t)k];
        bc->step++;
        fls_status st = time_rule(bc, &bo->rules[k], W, &H, r, rr);
        if (st == FLS_ERR_UNSUPPORTED) {
            rr->median_ms = rr->min_ms = NAN;
        } else if (st != FLS_OK) {
            cli_error("rule %s failed on D=%lld V=%lld %s B=%lld: %s", bo->rules[k].name, (long long)D,
                      (long long)V, fls_dtype_name(dt), (long long)r->B, fls_status_string(st));
            return CLI_FAIL;
        }
    }
    if (!bo->nrules) {
        bc->step++;
        int failed = -1;
        fls_status st = time_engines(bc, bo->want, W, &H, flj, r, &failed);
        if (st != FLS_OK) {
            cli_error("%s failed on D=%lld V=%lld %s B=%lld: %s", eng_name[failed], (long long)D,
                      (long long)V, fls_dtype_name(dt), (long long)r->B, fls_status_string(st));
            return CLI_FAIL;
        }
    }
    return CLI_OK;
}

/* Shape si (D, V) in dtype di: W generated in enough copies, then every
 * batch. CLI_OK or CLI_FAIL. */
static int bench_time_dtype(bench_run *run, int si, int di)
{
    static const fls_dtype dtypes[2] = {FLS_DTYPE_BF16, FLS_DTYPE_F32};
    const bench_opts *bo = run->o;
    const int64_t D = bo->shapes[si][0], V = bo->shapes[si][1];
    const fls_dtype dt = dtypes[di];
    const size_t bytes = (size_t)(V * D) * fls_dtype_size(dt);
    const size_t stride = (bytes + 4095) / 4096 * 4096;
    int ncopies = (int)((run->min_set + bytes - 1) / bytes);
    ncopies = ncopies < 3 ? 3 : ncopies > 16 ? 16 : ncopies;
    cli_progress("generating W (%lld x %lld, %s, %.2f GB, %d cop%s)", (long long)V, (long long)D,
                 fls_dtype_name(dt), (double)bytes / 1e9, ncopies, ncopies == 1 ? "y" : "ies");
    if (posix_memalign(&run->w, 64, stride * (size_t)ncopies) != 0) {
        run->w = NULL;
        cli_error("out of memory for W (%.2f GB)", (double)(stride * (size_t)ncopies) / 1e9);
        return CLI_FAIL;
    }
    void *w = run->w;
    /* Logit standard deviation ~ 4/3 (W uniform in +-4/sqrt(D), H in +-1):
     * a realistic spread, neither flat nor one-hot. */
    fill_job fjob = {w, dt, (size_t)(V * D), 4.0f / sqrtf((float)D),
                     1000u + (uint64_t)((si + (bo->quick && !bo->shapes_s)) * 2 + di)};
    par_run(run->bc.threads, fill_worker, &fjob);
    for (int c = 1; c < ncopies; c++)
        memcpy((unsigned char *)w + (size_t)c * stride, w, bytes);
    run->bc.wbase = w;
    run->bc.stride = stride;
    run->bc.ncopies = ncopies;
    floor_job *flj = malloc(sizeof *flj);
    if (!flj) {
        cli_error("out of memory");
        return CLI_FAIL;
    }
    flj->data = w;
    flj->bytes = bytes;
    fls_matrix W = {w, dt, V, D, D};
    int rc = CLI_OK;
    for (int bi = 0; bi < bo->nbatches && rc == CLI_OK; bi++)
        rc = bench_time_batch(run, &W, flj, bo->batches[bi]);
    free(flj);
    if (rc != CLI_OK)
        return rc;
    free(run->w);
    run->w = NULL;
    return CLI_OK;
}

/* Every shape: H (the largest batch), then W in bf16 and in f32. CLI_OK or CLI_FAIL. */
static int bench_time_all(bench_run *run)
{
    const bench_opts *bo = run->o;
    for (int si = 0; si < bo->nshapes; si++) {
        const int64_t D = bo->shapes[si][0];
        if (posix_memalign((void **)&run->h, 64, (size_t)(bo->maxB * D) * sizeof(float)) != 0) {
            cli_error("out of memory for H");
            return CLI_FAIL;
        }
        uint64_t hs = 7;
        for (int64_t i = 0; i < bo->maxB * D; i++)
            run->h[i] = rand_sym(&hs, 1.0f);
        for (int di = 0; di < 2; di++)
            if (bench_time_dtype(run, si, di) != CLI_OK)
                return CLI_FAIL;
        free(run->h);
        run->h = NULL;
    }
    cli_progress_done();
    return CLI_OK;
}

/* The CPU bench with parsed options: times, prints, writes. Returns the exit status. */
static int bench_cpu(const bench_opts *bo)
{
    /* The CSV is created when the results are ready; an unwritable path fails now. */
    if (bo->csv && cli_out_check("--csv", bo->csv) != 0)
        return CLI_FAIL;
    bench_run run;
    memset(&run, 0, sizeof run);
    run.o = bo;
    if (cli_context_create(&run.ctx, FLS_ENGINE_CPU, (int)bo->threads, bo->simd_want) != 0)
        return CLI_FAIL;
    int rc = bench_alloc(&run);
    if (rc == CLI_OK) {
        printf(
            "flashsample bench: cpu, %d threads, simd %s (%s), %lld timed runs per configuration (median), "
            "%s\n",
            run.bc.threads, run.simd,
            bo->simd_want == FLS_SIMD_AUTO ? "the library's automatic choice" : "--simd", (long long)bo->reps,
            run.date);
        printf("cpu: %s; last-level cache %.0f MiB; W working set >= %.0f MiB\n", run.cpu,
               (double)run.llc / 1048576.0, (double)run.min_set / 1048576.0);
        fflush(stdout);
        run.peak = fma_peak_gflops(run.bc.threads, &run.peak_isa);
        printf(
            "fma peak: %.1f GFLOP/s fp32 on %d threads (%s vectors, 12 independent fma chains per thread)\n",
            run.peak, run.bc.threads, run.peak_isa);
        fflush(stdout);
        rc = bench_time_all(&run);
    }
    if (rc == CLI_OK && bo->nrules)
        rc = report_rules(bo->rules, bo->nrules, run.res, run.rres, run.nr, &run.bc, run.simd, run.date,
                          run.cpu, bo->csv, &run.fcsv, (long long)bo->reps);
    else if (rc == CLI_OK)
        rc = report_engines(run.res, run.nr, &run.bc, run.simd, run.date, run.cpu, bo->csv, &run.fcsv,
                            (long long)bo->reps, run.peak);
    cli_progress_done();
    cli_out_abort(&run.fcsv);
    free(run.w);
    free(run.h);
    free(run.res);
    free(run.rres);
    free(run.bc.times);
    free(run.bc.tokens);
    fls_context_destroy(run.ctx);
    return rc;
}

/* --csv PATH may replace a CSV this bench wrote (its first line starts with
 * "device,engine,"), but no other existing file unless --force is given:
 * before any work, on both devices. CLI_OK or CLI_USAGE. */
static int bench_csv_guard(int argc, char **argv)
{
    const char *csv = NULL;
    int force = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--csv") == 0 && i + 1 < argc)
            csv = argv[++i];
        else if (strcmp(argv[i], "--force") == 0)
            force = 1;
    }
    if (!csv || force)
        return CLI_OK;
    FILE *f = fopen(csv, "rb");
    if (!f)
        return CLI_OK; /* nothing there (or unreadable: the write reports it) */
    char head[16] = {0};
    const size_t n = fread(head, 1, sizeof head - 1, f);
    fclose(f);
    if (n >= 14 && memcmp(head, "device,engine,", 14) == 0)
        return CLI_OK;
    cli_error(
        "--csv %s: the file exists and is not a CSV written by flashsample bench (its first line does not "
        "start with 'device,engine,'): refusing to replace it; give another name, remove it, or pass --force",
        csv);
    return CLI_USAGE;
}

int cli_bench(int argc, char **argv)
{
    fls_engine engine;
    if (bench_parse_device(argc, argv, &engine) != CLI_OK || bench_csv_guard(argc, argv) != CLI_OK)
        return CLI_USAGE;
    if (engine == FLS_ENGINE_CUDA)
        return fls_tool_bench_cuda(argc, argv);
    bench_opts bo;
    memset(&bo, 0, sizeof bo);
    int help;
    if (bench_parse_args(argc, argv, &bo, &help) != CLI_OK)
        return CLI_USAGE;
    if (help) {
        bench_help();
        return CLI_OK;
    }
    if (bench_parse_values(&bo) != CLI_OK || bench_parse_rule_option(&bo) != CLI_OK)
        return CLI_USAGE;
    if (cli_parse_only)
        return CLI_OK;
    return bench_cpu(&bo);
}
