/*
 * case_table.c — the goodness-of-fit cases of the audit: the one list, its
 * tiers and the tests each case makes (fls_cases.h). How a case is run is
 * cases.c; its inputs case_inputs.c; how its tokens are drawn case_io.c.
 */
#include "stats/fls_cases.h"

#include <stdlib.h>

#define LOGITS    FLS_CASE_GOF, 0, FLS_METHOD_FUSED
#define FUSED     FLS_CASE_GOF, 1, FLS_METHOD_FUSED
#define PAIRS     0, FLS_METHOD_FUSED
#define GROUPED_L FLS_CASE_GOF, 0, FLS_METHOD_GROUPED
#define GROUPED_F FLS_CASE_GOF, 1, FLS_METHOD_GROUPED

/* Cost of a case is about V x draws x 7 ns on one core (AVX2 noise); the
 * goodness-of-fit alone needs ~2-3e5 draws per group, so V = 4096 costs ~7
 * core-seconds. The deep cases need more: a tail sample t nats below the head
 * costs ~e^t evaluations whatever V is (tail.c), so a design deficit r at t =
 * 15 with the tail at 17-19 nats costs ~4e9 / r^2-ish evaluations. Tier 0 is
 * the quick list (every mechanism at small sizes: temperatures 0.3, 0.7, 2.5,
 * 0, deep tails, offsets, draws, seeds, both paths, masks, ties, V = 1, 2, 17);
 * tier 1 adds the rest in a full run; tier 2 only in a full run on the CUDA
 * engine (too slow for two CPU cores: V = 262144, a 10% deficit of a tail at
 * 16-30 nats); tier 3 is quick on the CUDA engine and full-only on the CPU
 * (the fused deep tail: ~35 s on two cores, which the quick audit of the
 * command line should not take; the CPU's quick list has the deep tail on the
 * logits path and the multinomial baseline); tier 4 only in a full CPU run
 * outside the CI suite (minutes each on two cores); tier 5 in every CUDA run
 * and as tier 4 on the CPU: the min-first cases whose CPU cost is minutes
 * (the CPU engine makes min-first noise with the scalar reference span,
 * fls_ref_gumbel_span_mf: 10-30x the cost of the per-token SIMD spans). */
/* What the cases add to the temperature rule (docs/RULES.md, docs/GROUPED.md): F(ID, g0, g1, ...) is the
 * value of the registry filter FLS_FILTER_<ID> in each group; a filter not named, or 0, is off. */
#define F(ID, ...) [FLS_FILTER_##ID] = {__VA_ARGS__}
#define NOWR                                                                                                 \
    0,                                                                                                       \
    {                                                                                                        \
        0                                                                                                    \
    }
// clang-format off
/*                                   filters per group                                      wr, wr per group  g  io  pieces  noise */
static const fls_case_ext X_V1             = {{F(MIN_P, 0.5f), F(TOP_K, 1), F(TOP_P, 0.5f)}, 1, {0}, 0, FLS_IO_CALL, 0, FLS_NOISE_PER_TOKEN, NULL};
static const fls_case_ext X_MIXED          = {{F(MIN_P, 0, 0, 0.05f, 0.01f), F(TOP_K, 5, 0, 0, 30), F(TOP_P, 0, 0.8f, 0, 0.9f), F(TOP_NSIGMA, 0, 0, 0, 1.5)}, NOWR, 0, FLS_IO_CALL, 0, FLS_NOISE_PER_TOKEN, NULL};
static const fls_case_ext X_FUSED_SMALL    = {{F(MIN_P, 0.01f, 0), F(TOP_K, 40, 100), F(TOP_P, 0.95f, 0.7f), F(TOP_NSIGMA, 0, 2.0)}, NOWR, 0, FLS_IO_CALL, 0, FLS_NOISE_PER_TOKEN, NULL};
static const fls_case_ext X_TOPK50         = {{F(TOP_K, 50)}, NOWR, 0, FLS_IO_CALL, 0, FLS_NOISE_PER_TOKEN, NULL};
static const fls_case_ext X_TOPK20         = {{F(TOP_K, 20)}, NOWR, 0, FLS_IO_CALL, 0, FLS_NOISE_PER_TOKEN, NULL};
static const fls_case_ext X_TOPK1          = {{F(TOP_K, 1)}, NOWR, 0, FLS_IO_CALL, 0, FLS_NOISE_PER_TOKEN, NULL};
static const fls_case_ext X_TOPP90         = {{F(TOP_P, 0.9f)}, NOWR, 0, FLS_IO_CALL, 0, FLS_NOISE_PER_TOKEN, NULL};
static const fls_case_ext X_TOPP95         = {{F(TOP_P, 0.95f)}, NOWR, 0, FLS_IO_CALL, 0, FLS_NOISE_PER_TOKEN, NULL};
static const fls_case_ext X_MINP_HEAVY     = {{F(MIN_P, 1e-7f)}, NOWR, 0, FLS_IO_CALL, 0, FLS_NOISE_PER_TOKEN, NULL};
static const fls_case_ext X_ALL3           = {{F(MIN_P, 0.02f), F(TOP_K, 200), F(TOP_P, 0.95f)}, NOWR, 0, FLS_IO_CALL, 0, FLS_NOISE_PER_TOKEN, NULL};
static const fls_case_ext X_FLAT           = {{F(MIN_P, 0.5f), F(TOP_K, 100), F(TOP_P, 0.5f)}, NOWR, 0, FLS_IO_CALL, 0, FLS_NOISE_PER_TOKEN, NULL};
static const fls_case_ext X_COMBO          = {{F(MIN_P, 0.001f, 0.0005f), F(TOP_K, 300, 150), F(TOP_P, 0.95f, 0.9f), F(TOP_NSIGMA, 2.0, 1.5)}, NOWR, 0, FLS_IO_CALL, 0, FLS_NOISE_PER_TOKEN, NULL};
static const fls_case_ext X_NSIGMA         = {{F(TOP_NSIGMA, 1.0)}, NOWR, 0, FLS_IO_CALL, 0, FLS_NOISE_PER_TOKEN, NULL};
static const fls_case_ext X_EPSILON        = {{F(EPSILON, 2e-3)}, NOWR, 0, FLS_IO_CALL, 0, FLS_NOISE_PER_TOKEN, NULL};
static const fls_case_ext X_HEAVY_BIG      = {{F(MIN_P, 1e-8f), F(TOP_K, 60000), F(TOP_P, 0.999f)}, NOWR, 0, FLS_IO_CALL, 0, FLS_NOISE_PER_TOKEN, NULL};
static const fls_case_ext X_WR_SMALL       = {{F(TOP_K, 0, 4)}, 3, {3, 2}, 0, FLS_IO_CALL, 0, FLS_NOISE_PER_TOKEN, NULL};
static const fls_case_ext X_WR_RULES       = {{F(MIN_P, 0, 0.1f, 0), F(TOP_K, 0, 0, 2)}, 3, {3, 2, 3}, 0, FLS_IO_CALL, 0, FLS_NOISE_PER_TOKEN, NULL};
static const fls_case_ext X_WR_FUSED_SMALL = {{F(TOP_P, 0.9f)}, 2, {0}, 0, FLS_IO_CALL, 0, FLS_NOISE_PER_TOKEN, NULL};
static const fls_case_ext X_WR_TOPK        = {{F(TOP_K, 100)}, 4, {0}, 0, FLS_IO_CALL, 0, FLS_NOISE_PER_TOKEN, NULL};
static const fls_case_ext X_WR_TOPP        = {{F(TOP_P, 0.9f)}, 3, {0}, 0, FLS_IO_CALL, 0, FLS_NOISE_PER_TOKEN, NULL};
static const fls_case_ext X_WR_BIG         = {{F(TOP_K, 2000)}, 3, {0}, 0, FLS_IO_CALL, 0, FLS_NOISE_PER_TOKEN, NULL};
static const fls_case_ext X_G32            = {{{0}}, NOWR, 32, FLS_IO_CALL, 0, FLS_NOISE_PER_TOKEN, NULL};
static const fls_case_ext X_G64            = {{{0}}, NOWR, 64, FLS_IO_CALL, 0, FLS_NOISE_PER_TOKEN, NULL};
static const fls_case_ext X_G128           = {{{0}}, NOWR, 128, FLS_IO_CALL, 0, FLS_NOISE_PER_TOKEN, NULL};
static const fls_case_ext X_G256           = {{{0}}, NOWR, 256, FLS_IO_CALL, 0, FLS_NOISE_PER_TOKEN, NULL};
static const fls_case_ext X_G512           = {{{0}}, NOWR, 512, FLS_IO_CALL, 0, FLS_NOISE_PER_TOKEN, NULL};
static const fls_case_ext X_G1024          = {{{0}}, NOWR, 1024, FLS_IO_CALL, 0, FLS_NOISE_PER_TOKEN, NULL};
static const fls_case_ext X_STREAM5        = {{{0}}, NOWR, 0, FLS_IO_STREAM, 5, FLS_NOISE_PER_TOKEN, NULL};
static const fls_case_ext X_STREAM7        = {{{0}}, NOWR, 0, FLS_IO_STREAM, 7, FLS_NOISE_PER_TOKEN, NULL};
static const fls_case_ext X_STREAM9_G64    = {{{0}}, NOWR, 64, FLS_IO_STREAM, 9, FLS_NOISE_PER_TOKEN, NULL};
static const fls_case_ext X_SHARDS4        = {{{0}}, NOWR, 0, FLS_IO_SHARDS, 4, FLS_NOISE_PER_TOKEN, NULL};
static const fls_case_ext X_SHARDS_G32     = {{{0}}, NOWR, 32, FLS_IO_SHARDS, 3, FLS_NOISE_PER_TOKEN, NULL};
static const fls_case_ext X_SHARDS3_G128   = {{{0}}, NOWR, 128, FLS_IO_SHARDS, 3, FLS_NOISE_PER_TOKEN, NULL};
static const fls_case_ext X_MF             = {{{0}}, NOWR, 0, FLS_IO_CALL, 0, FLS_NOISE_MIN_FIRST, NULL};
/* Masks, bias and penalties (fls_case_mods; docs/RULES.md): R(k) is the token of rank k of the target logits. */
#define R FLS_CASE_RANK
static const fls_case_mods M_MASK_HEAD = {.mask = {1, 0, 1}, .head_cut = 5, .drop = 0.3, .ld_pad = 3};
static const fls_case_mods M_BIAS_DEEP = {.bias_k = 4, .bias_id = {R(1000), -1, R(0), R(500)}, .bias_value = {{30.0f, 0.0f, -1.5f, 4.0f}}};
static const fls_case_mods M_PEN_TIES = {
    .seen_k = 8, .seen_id = {0, 5, 10, -1, 2, 3, 8, 4},
    .seen_count = {{0, 1, 3, 0, 2, 0, 4, 1}, {2, 0, 1, 0, 5, 3, 0, 2}, {1, 1, 6, 0, 0, 2, 2, 0}},
    .bias_k = 2, .bias_id = {10, 13}, .bias_value = {{0.5f, 0.25f}, {-0.5f, 1.0f}, {0.3f, -0.7f}},
    .repetition = {1.3f, 0.8f, 0.0f}, .presence = {0.4f, -0.3f, 0.6f}, .frequency = {0.25f, 0.1f, 0.5f}};
static const fls_case_mods M_MASK_RULE = {.mask = {1, 1}, .head_cut = 3, .drop = 0.25,
                                          .bias_k = 1, .bias_id = {R(40)}, .bias_value = {{3.0f}, {1.0f}}};
static const fls_case_mods M_MASK_WR = {.mask = {1, 1}, .head_cut = 2, .drop = 0.2,
                                        .bias_k = 1, .bias_id = {R(7)}, .bias_value = {{2.0f}, {1.0f}}};
static const fls_case_mods M_FUSED = {
    .mask = {1, 0}, .head_cut = 2, .drop = 0.2, .ld_pad = 1,
    .bias_k = 2, .bias_id = {R(450), R(1)}, .bias_value = {{9.0f, -2.0f}, {6.0f, -2.0f}},
    .seen_k = 4, .seen_id = {R(2), R(3), R(4), R(5)}, .seen_count = {{0, 1, 2, 3}, {3, 0, 1, 0}},
    .repetition = {1.2f, 0.9f}, .presence = {0.3f, 0.1f}, .frequency = {0.2f, 0.4f}};
static const fls_case_mods M_WR_FUSED = {
    .mask = {1}, .head_cut = 4, .drop = 0.3, .bias_k = 1, .bias_id = {R(1000)}, .bias_value = {{8.0f}},
    .seen_k = 4, .seen_id = {R(4), R(5), R(6), R(7)}, .seen_count = {{1, 2, 0, 5}},
    .repetition = {1.5f}, .presence = {0.5f}, .frequency = {0.3f}};
static const fls_case_mods M_UNFUSED = {
    .mask = {1}, .head_cut = 1, .drop = 0.1, .bias_k = 2, .bias_id = {R(500), R(2)}, .bias_value = {{5.0f, -1.0f}},
    .seen_k = 3, .seen_id = {R(1), R(3), R(4)}, .seen_count = {{2, 0, 1}},
    .repetition = {1.4f}, .presence = {0.2f}, .frequency = {0.3f}};
#undef R
static const fls_case_ext X_MODS_MASK_HEAD = {{{0}}, NOWR, 0, FLS_IO_CALL, 0, FLS_NOISE_PER_TOKEN, &M_MASK_HEAD};
static const fls_case_ext X_MODS_BIAS_DEEP = {{{0}}, NOWR, 0, FLS_IO_CALL, 0, FLS_NOISE_PER_TOKEN, &M_BIAS_DEEP};
static const fls_case_ext X_MODS_PEN_TIES  = {{{0}}, NOWR, 0, FLS_IO_CALL, 0, FLS_NOISE_PER_TOKEN, &M_PEN_TIES};
static const fls_case_ext X_MODS_RULE      = {{F(TOP_K, 20, 0), F(MIN_P, 0, 0.05f)}, NOWR, 0, FLS_IO_CALL, 0, FLS_NOISE_PER_TOKEN, &M_MASK_RULE};
static const fls_case_ext X_MODS_WR        = {{F(TOP_K, 0, 4)}, 3, {3, 2}, 0, FLS_IO_CALL, 0, FLS_NOISE_PER_TOKEN, &M_MASK_WR};
static const fls_case_ext X_MODS_FUSED     = {{F(MIN_P, 0.01f, 0), F(TOP_P, 0, 0.9f)}, NOWR, 0, FLS_IO_CALL, 0, FLS_NOISE_PER_TOKEN, &M_FUSED};
static const fls_case_ext X_MODS_WR_FUSED  = {{F(TOP_P, 0.9f)}, 3, {0}, 0, FLS_IO_CALL, 0, FLS_NOISE_PER_TOKEN, &M_WR_FUSED};
static const fls_case_ext X_MODS_UNFUSED   = {{{0}}, NOWR, 0, FLS_IO_CALL, 0, FLS_NOISE_PER_TOKEN, &M_UNFUSED};
// clang-format on
#undef NOWR
#undef F

// clang-format off
static const fls_audit_case cases[] = {
    /* name                 kind/path/method  shape              scale  V       G  temps                           R    W dtype          D   tier tail deficit ext */
    {"v1-logits",           LOGITS,           FLS_SHAPE_FLAT,    0.0,   1,      1, {1.0f},                         2,   FLS_DTYPE_F32,   0,  0,   0,   0.0, NULL},
    {"coin-logits",         LOGITS,           FLS_SHAPE_COIN,    0.0,   2,      1, {1.0f},                         2,   FLS_DTYPE_F32,   0,  0,   0,   0.0, NULL},
    {"v17-logits",          LOGITS,           FLS_SHAPE_NORMAL,  1.0,   17,     1, {1.0f},                         2,   FLS_DTYPE_F32,   0,  0,   0,   0.0, NULL},
    {"flat-logits",         LOGITS,           FLS_SHAPE_FLAT,    0.0,   1000,   1, {1.0f},                         4,   FLS_DTYPE_F32,   0,  1,   0,   0.0, NULL},
    /* exact ties just inside the key resolution (variants/rule.h): |l / T| = 4000, keys within 2^12 */
    {"ties-key-bound-high", LOGITS,           FLS_SHAPE_FLAT,    40.0,  8,      1, {0.01f},                        4,   FLS_DTYPE_F32,   0,  0,   0,   0.0, NULL},
    {"ties-key-bound-low",  LOGITS,           FLS_SHAPE_FLAT,    -40.0, 8,      1, {0.01f},                        4,   FLS_DTYPE_F32,   0,  1,   0,   0.0, NULL},
    {"zipf-logits",         LOGITS,           FLS_SHAPE_ZIPF,    0.0,   4096,   1, {1.0f},                         4,   FLS_DTYPE_F32,   0,  1,   0,   0.0, NULL},
    {"peaked-logits",       LOGITS,           FLS_SHAPE_PEAKED,  0.0,   4096,   1, {1.0f},                         4,   FLS_DTYPE_F32,   0,  1,   1,   0.0, NULL},
    {"heavy-logits",        LOGITS,           FLS_SHAPE_HEAVY,   0.0,   4096,   1, {1.0f},                         4,   FLS_DTYPE_F32,   0,  1,   1,   0.3, NULL},
    {"masked-logits",       LOGITS,           FLS_SHAPE_MASKED,  0.0,   1031,   1, {1.0f},                         4,   FLS_DTYPE_F32,   0,  0,   0,   0.0, NULL},
    {"rowtemp-small",       LOGITS,           FLS_SHAPE_NORMAL,  2.0,   256,    4, {0.7f, 2.5f, 0.3f, 0.0f},       2,   FLS_DTYPE_F32,   0,  0,   1,   0.0, NULL},
    {"rowtemp-logits",      LOGITS,           FLS_SHAPE_NORMAL,  2.0,   1024,   5, {0.3f, 0.7f, 0.0f, 1.0f, 2.5f}, 2,   FLS_DTYPE_F32,   0,  1,   1,   0.0, NULL},
    {"greedy-logits",       LOGITS,           FLS_SHAPE_TIES,    0.0,   4096,   1, {0.0f},                         4,   FLS_DTYPE_F32,   0,  0,   0,   0.0, NULL},
    {"deep-logits",         LOGITS,           FLS_SHAPE_DEEP,    17.0,  4096,   1, {1.0f},                         4,   FLS_DTYPE_F32,   0,  0,   1,   0.7, NULL},
    {"deep-logits-fine",    LOGITS,           FLS_SHAPE_DEEP,    16.0,  16384,  1, {1.0f},                         4,   FLS_DTYPE_F32,   0,  2,   1,   0.25, NULL},
    {"pairs-offset",        FLS_CASE_PAIRS_OFFSET, PAIRS,        FLS_SHAPE_NORMAL, 0.7, 8, 1, {1.0f},             512, FLS_DTYPE_F32,   0,  0,   0,   0.0, NULL},
    {"pairs-draw",          FLS_CASE_PAIRS_DRAW,   PAIRS,        FLS_SHAPE_NORMAL, 0.7, 8, 1, {1.0f},             512, FLS_DTYPE_F32,   0,  0,   0,   0.0, NULL},
    {"pairs-seed",          FLS_CASE_PAIRS_SEED,   PAIRS,        FLS_SHAPE_NORMAL, 0.7, 8, 1, {1.0f},             512, FLS_DTYPE_F32,   0,  0,   0,   0.0, NULL},
    {"zipf-fused",          FUSED,            FLS_SHAPE_ZIPF,    0.0,   4096,   2, {1.0f, 0.8f},                   2,   FLS_DTYPE_BF16,  16, 1,   0,   0.0, NULL},
    {"peaked-fused-f16",    FUSED,            FLS_SHAPE_PEAKED,  0.0,   4099,   1, {1.2f},                         4,   FLS_DTYPE_F16,   8,  1,   1,   0.0, NULL},
    {"normal-fused-f32",    FUSED,            FLS_SHAPE_NORMAL,  1.5,   1031,   2, {0.7f, 2.5f},                   2,   FLS_DTYPE_F32,   33, 0,   0,   0.0, NULL},
    {"heavy-fused",         FUSED,            FLS_SHAPE_HEAVY,   0.0,   4096,   1, {1.0f},                         4,   FLS_DTYPE_BF16,  16, 1,   1,   0.3, NULL},
    {"deep-fused",          FUSED,            FLS_SHAPE_DEEP,    17.0,  4096,   1, {0.8f},                         4,   FLS_DTYPE_BF16,  16, 3,   1,   0.7, NULL},
    {"greedy-fused",        FUSED,            FLS_SHAPE_TIES,    0.0,   4096,   1, {0.0f},                         4,   FLS_DTYPE_BF16,  16, 0,   0,   0.0, NULL},
    {"zipf-unfused-gumbel", FLS_CASE_GOF, 1, FLS_METHOD_UNFUSED_GUMBEL, FLS_SHAPE_ZIPF, 0.0, 1024, 1, {1.0f},       4,   FLS_DTYPE_BF16,  16, 1,   0,   0.0, NULL},
    {"zipf-multinomial",    FLS_CASE_GOF, 1, FLS_METHOD_UNFUSED_MULTINOMIAL, FLS_SHAPE_ZIPF, 0.0, 1024, 1, {1.0f},  4,   FLS_DTYPE_BF16,  16, 1,   0,   0.0, NULL},
    {"deep-multinomial",    FLS_CASE_GOF, 1, FLS_METHOD_UNFUSED_MULTINOMIAL, FLS_SHAPE_DEEP, 17.0, 4096, 1, {1.0f}, 4,   FLS_DTYPE_BF16,  16, 0,   1,   0.7, NULL},
    {"heavy-fused-262144",  FUSED,            FLS_SHAPE_HEAVY,   0.0,   262144, 1, {1.0f},                         4,   FLS_DTYPE_BF16,  16, 2,   1,   0.0, NULL},
    {"deep-fused-262144",   FUSED,            FLS_SHAPE_DEEP,    16.0,  262144, 1, {1.0f},                         4,   FLS_DTYPE_BF16,  16, 2,   1,   0.1, NULL},

    /* the rule family (both engines): every filter, ties at the k-th value and at the nucleus boundary, mixed
     * per-row parameters, both paths, V = 1 .. 2^18 */
    {"rules-v1",            LOGITS,           FLS_SHAPE_FLAT,    0.0,   1,      1, {0.8f},                         2,   FLS_DTYPE_F32,   0,  0,   0,   0.0, &X_V1},
    {"rules-mixed-small",   LOGITS,           FLS_SHAPE_NORMAL,  1.5,   64,     4, {0.7f, 1.0f, 1.3f, 0.9f},       2,   FLS_DTYPE_F32,   0,  0,   0,   0.0, &X_MIXED},
    {"rules-fused-small",   FUSED,            FLS_SHAPE_NORMAL,  1.5,   257,    2, {0.8f, 1.2f},                   2,   FLS_DTYPE_F32,   8,  0,   0,   0.0, &X_FUSED_SMALL},
    {"topk-zipf-logits",    LOGITS,           FLS_SHAPE_ZIPF,    0.0,   2048,   1, {0.8f},                         4,   FLS_DTYPE_F32,   0,  1,   0,   0.0, &X_TOPK50},
    {"topk-ties-logits",    LOGITS,           FLS_SHAPE_TIE_K,   1.0,   1024,   1, {1.0f},                         4,   FLS_DTYPE_F32,   0,  1,   0,   0.0, &X_TOPK20},
    {"topk-ties-fused",     FUSED,            FLS_SHAPE_TIE_K,   1.0,   1024,   1, {0.9f},                         4,   FLS_DTYPE_BF16,  16, 1,   0,   0.0, &X_TOPK20},
    {"topp-ties-logits",    LOGITS,           FLS_SHAPE_TIE_P,   1.5,   2048,   1, {1.0f},                         4,   FLS_DTYPE_F32,   0,  1,   0,   0.0, &X_TOPP90},
    {"topp-wide-fused",     FUSED,            FLS_SHAPE_NORMAL,  0.5,   2048,   1, {1.0f},                         4,   FLS_DTYPE_BF16,  16, 1,   0,   0.0, &X_TOPP90},
    {"minp-heavy-logits",   LOGITS,           FLS_SHAPE_HEAVY,   0.0,   4096,   1, {1.0f},                         4,   FLS_DTYPE_F32,   0,  1,   1,   0.5, &X_MINP_HEAVY},
    {"rules-masked-logits", LOGITS,           FLS_SHAPE_MASKED,  0.0,   1031,   1, {0.9f},                         4,   FLS_DTYPE_F32,   0,  1,   0,   0.0, &X_ALL3},
    {"rules-flat-logits",   LOGITS,           FLS_SHAPE_FLAT,    0.0,   1000,   1, {1.0f},                         4,   FLS_DTYPE_F32,   0,  1,   0,   0.0, &X_FLAT},
    {"combo-fused",         FUSED,            FLS_SHAPE_NORMAL,  2.0,   1024,   2, {0.8f, 1.3f},                   2,   FLS_DTYPE_BF16,  16, 1,   0,   0.0, &X_COMBO},
    {"nsigma-logits",       LOGITS,           FLS_SHAPE_NORMAL,  2.0,   2048,   1, {1.5f},                         4,   FLS_DTYPE_F32,   0,  1,   0,   0.0, &X_NSIGMA},
    {"epsilon-logits",      LOGITS,           FLS_SHAPE_NORMAL,  2.0,   2048,   1, {0.7f},                         4,   FLS_DTYPE_F32,   0,  1,   0,   0.0, &X_EPSILON},
    {"topk1-logits-262144", LOGITS,           FLS_SHAPE_NORMAL,  1.0,   262144, 1, {1.0f},                         2,   FLS_DTYPE_F32,   0,  1,   0,   0.0, &X_TOPK1},
    {"rules-heavy-262144",  LOGITS,           FLS_SHAPE_HEAVY,   0.0,   262144, 1, {1.0f},                         4,   FLS_DTYPE_F32,   0,  4,   1,   0.0, &X_HEAVY_BIG},
    {"topp-fused-262144",   FUSED,            FLS_SHAPE_HEAVY,   0.0,   262144, 1, {1.0f},                         4,   FLS_DTYPE_BF16,  16, 4,   0,   0.0, &X_TOPP95},
    /* sampling without replacement: ordered tuples at small V, first position and the conditional test at large V */
    {"wr-tuples-small",     LOGITS,           FLS_SHAPE_NORMAL,  1.0,   6,      2, {1.0f, 0.8f},                   2,   FLS_DTYPE_F32,   0,  0,   0,   0.0, &X_WR_SMALL},
    {"wr-tuples-rules",     LOGITS,           FLS_SHAPE_NORMAL,  1.0,   8,      3, {1.0f, 0.7f, 1.4f},             2,   FLS_DTYPE_F32,   0,  1,   0,   0.0, &X_WR_RULES},
    {"wr-tuples-fused",     FUSED,            FLS_SHAPE_NORMAL,  1.0,   7,      1, {1.0f},                         4,   FLS_DTYPE_F32,   4,  1,   0,   0.0, &X_WR_FUSED_SMALL},
    {"wr-zipf-logits",      LOGITS,           FLS_SHAPE_ZIPF,    0.0,   2048,   1, {1.0f},                         4,   FLS_DTYPE_F32,   0,  1,   0,   0.0, &X_WR_TOPK},
    {"wr-fused",            FUSED,            FLS_SHAPE_NORMAL,  1.5,   1024,   1, {1.0f},                         4,   FLS_DTYPE_BF16,  16, 1,   0,   0.0, &X_WR_TOPP},
    {"wr-logits-262144",    LOGITS,           FLS_SHAPE_NORMAL,  2.0,   262144, 1, {1.0f},                         4,   FLS_DTYPE_F32,   0,  4,   0,   0.0, &X_WR_BIG},
    /* the grouped method (both engines): flat, Zipf, peaked, heavy tails across groups and inside one group,
     * masked groups, g = 32 .. 1024, V not a multiple of g */
    {"grouped-small",       GROUPED_L,        FLS_SHAPE_ZIPF,    0.0,   1000,   2, {0.7f, 1.0f},                   2,   FLS_DTYPE_F32,   0,  0,   0,   0.0, &X_G64},
    {"grouped-flat",        GROUPED_L,        FLS_SHAPE_FLAT,    0.0,   1000,   1, {1.0f},                         4,   FLS_DTYPE_F32,   0,  1,   0,   0.0, &X_G128},
    {"grouped-zipf",        GROUPED_L,        FLS_SHAPE_ZIPF,    0.0,   4096,   1, {0.8f},                         4,   FLS_DTYPE_F32,   0,  1,   0,   0.0, &X_G32},
    {"grouped-peaked-fused", GROUPED_F,       FLS_SHAPE_PEAKED,  0.0,   4099,   1, {1.2f},                         4,   FLS_DTYPE_BF16,  8,  1,   1,   0.0, &X_G1024},
    {"grouped-heavy",       GROUPED_L,        FLS_SHAPE_HEAVY,   0.0,   4096,   1, {1.0f},                         4,   FLS_DTYPE_F32,   0,  1,   1,   0.3, &X_G256},
    {"grouped-deep-in-group", GROUPED_L,      FLS_SHAPE_GROUP_DEEP, 0.0, 2048,  1, {1.0f},                         4,   FLS_DTYPE_F32,   0,  1,   1,   0.7, &X_G1024},
    {"grouped-masked",      GROUPED_L,        FLS_SHAPE_MASKED_GROUPS, 0.0, 1000, 2, {1.0f, 0.0f},                 2,   FLS_DTYPE_F32,   0,  1,   0,   0.0, &X_G64},
    {"grouped-rowtemp-fused", GROUPED_F,      FLS_SHAPE_NORMAL,  1.5,   1031,   2, {0.7f, 2.5f},                   2,   FLS_DTYPE_F32,   33, 1,   0,   0.0, &X_G512},
    /* streaming (both engines): random chunkings in random orders; shards serialized, deserialized and merged */
    {"stream-small",        LOGITS,           FLS_SHAPE_NORMAL,  1.0,   777,    1, {0.9f},                         2,   FLS_DTYPE_F32,   0,  0,   0,   0.0, &X_STREAM5},
    {"shards-grouped-small", GROUPED_L,       FLS_SHAPE_ZIPF,    0.0,   1031,   1, {1.0f},                         2,   FLS_DTYPE_F32,   0,  0,   0,   0.0, &X_SHARDS_G32},
    {"stream-zipf-logits",  LOGITS,           FLS_SHAPE_ZIPF,    0.0,   2048,   1, {1.0f},                         4,   FLS_DTYPE_F32,   0,  1,   0,   0.0, &X_STREAM7},
    {"stream-grouped-fused", GROUPED_F,       FLS_SHAPE_NORMAL,  1.5,   1031,   1, {1.0f},                         4,   FLS_DTYPE_BF16,  16, 1,   0,   0.0, &X_STREAM9_G64},
    {"shards-peaked-logits", LOGITS,          FLS_SHAPE_PEAKED,  0.0,   4096,   1, {1.0f},                         4,   FLS_DTYPE_F32,   0,  1,   1,   0.0, &X_SHARDS4},
    {"shards-grouped-fused", GROUPED_F,       FLS_SHAPE_ZIPF,    0.0,   4096,   1, {0.9f},                         4,   FLS_DTYPE_BF16,  16, 1,   0,   0.0, &X_SHARDS3_G128},
    /* masks, bias and penalties (fls_case_mods): a mask that cuts the head (T = 0 too, a row unmasked
     * through bitmask_rows, a padded bitmask_ld), a bias that lifts a deep-tail token to the top,
     * penalties on tied tokens with distinct counts (per-row arrays across groups), a mask under a rule and
     * without replacement, both paths, the unfused methods */
    {"mods-mask-head",      LOGITS,           FLS_SHAPE_NORMAL,  1.5,   300,    3, {1.0f, 0.8f, 0.0f},             2,   FLS_DTYPE_F32,   0,  0,   0,   0.0, &X_MODS_MASK_HEAD},
    {"mods-bias-deep",      LOGITS,           FLS_SHAPE_DEEP,    17.0,  1024,   1, {1.0f},                         4,   FLS_DTYPE_F32,   0,  0,   0,   0.0, &X_MODS_BIAS_DEEP},
    {"mods-penalty-ties",   LOGITS,           FLS_SHAPE_CLASSES, 0.0,   60,     3, {1.0f, 1.0f, 0.7f},             2,   FLS_DTYPE_F32,   0,  0,   0,   0.0, &X_MODS_PEN_TIES},
    {"mods-mask-rules",     LOGITS,           FLS_SHAPE_ZIPF,    0.0,   512,    2, {0.8f, 1.0f},                   2,   FLS_DTYPE_F32,   0,  3,   0,   0.0, &X_MODS_RULE},
    {"mods-mask-wr-tuples", LOGITS,           FLS_SHAPE_NORMAL,  1.0,   8,      2, {1.0f, 0.8f},                   2,   FLS_DTYPE_F32,   0,  3,   0,   0.0, &X_MODS_WR},
    {"mods-rules-fused",    FUSED,            FLS_SHAPE_NORMAL,  2.0,   512,    2, {0.8f, 1.3f},                   2,   FLS_DTYPE_BF16,  16, 3,   0,   0.0, &X_MODS_FUSED},
    {"mods-wr-fused",       FUSED,            FLS_SHAPE_NORMAL,  1.5,   1024,   1, {1.0f},                         4,   FLS_DTYPE_BF16,  16, 5,   0,   0.0, &X_MODS_WR_FUSED},
    {"mods-unfused-gumbel", FLS_CASE_GOF, 1, FLS_METHOD_UNFUSED_GUMBEL, FLS_SHAPE_ZIPF, 0.0, 1024, 1, {1.0f},       4,   FLS_DTYPE_BF16,  16, 5,   0,   0.0, &X_MODS_UNFUSED},
    {"mods-multinomial",    FLS_CASE_GOF, 1, FLS_METHOD_UNFUSED_MULTINOMIAL, FLS_SHAPE_ZIPF, 0.0, 1024, 1, {1.0f},  4,   FLS_DTYPE_BF16,  16, 3,   0,   0.0, &X_MODS_UNFUSED},
    /* the min-first noise scheme (FLS_NOISE_MIN_FIRST): each case its per-token twin's (the name without
     * "mf-": shape, sizes, tier, design; inputs from its own name) but for the noise, those of minutes on two
     * CPU cores at tier 5 (or 3 for seconds beyond the quick list's); V = 2, 8, 17 in one group
     * (the group's minimum may fall past V), V = 1031 not a multiple of 64, T = 0 rows, the deep tail that
     * only the group's largest noise M carries, a deep tail inside the head's group, offsets, draws, seeds */
    {"mf-coin-logits",      LOGITS,           FLS_SHAPE_COIN,    0.0,   2,      1, {1.0f},                         2,   FLS_DTYPE_F32,   0,  0,   0,   0.0, &X_MF},
    {"mf-v17-logits",       LOGITS,           FLS_SHAPE_NORMAL,  1.0,   17,     1, {1.0f},                         2,   FLS_DTYPE_F32,   0,  0,   0,   0.0, &X_MF},
    {"mf-flat-logits",      LOGITS,           FLS_SHAPE_FLAT,    0.0,   1000,   1, {1.0f},                         4,   FLS_DTYPE_F32,   0,  1,   0,   0.0, &X_MF},
    {"mf-zipf-logits",      LOGITS,           FLS_SHAPE_ZIPF,    0.0,   4096,   1, {1.0f},                         4,   FLS_DTYPE_F32,   0,  5,   0,   0.0, &X_MF},
    {"mf-peaked-logits",    LOGITS,           FLS_SHAPE_PEAKED,  0.0,   4096,   1, {1.0f},                         4,   FLS_DTYPE_F32,   0,  5,   1,   0.0, &X_MF},
    {"mf-heavy-logits",     LOGITS,           FLS_SHAPE_HEAVY,   0.0,   4096,   1, {1.0f},                         4,   FLS_DTYPE_F32,   0,  5,   1,   0.3, &X_MF},
    {"mf-masked-logits",    LOGITS,           FLS_SHAPE_MASKED,  0.0,   1031,   1, {1.0f},                         4,   FLS_DTYPE_F32,   0,  0,   0,   0.0, &X_MF},
    {"mf-rowtemp-small",    LOGITS,           FLS_SHAPE_NORMAL,  2.0,   256,    4, {0.7f, 2.5f, 0.3f, 0.0f},       2,   FLS_DTYPE_F32,   0,  0,   1,   0.0, &X_MF},
    {"mf-rowtemp-logits",   LOGITS,           FLS_SHAPE_NORMAL,  2.0,   1024,   5, {0.3f, 0.7f, 0.0f, 1.0f, 2.5f}, 2,   FLS_DTYPE_F32,   0,  5,   1,   0.0, &X_MF},
    {"mf-greedy-logits",    LOGITS,           FLS_SHAPE_TIES,    0.0,   4096,   1, {0.0f},                         4,   FLS_DTYPE_F32,   0,  0,   0,   0.0, &X_MF},
    {"mf-deep-logits",      LOGITS,           FLS_SHAPE_DEEP,    17.0,  4096,   1, {1.0f},                         4,   FLS_DTYPE_F32,   0,  5,   1,   0.7, &X_MF},
    {"mf-deep-small",       LOGITS,           FLS_SHAPE_DEEP,    15.0,  1024,   1, {1.0f},                         4,   FLS_DTYPE_F32,   0,  1,   1,   0.7, &X_MF},
    {"mf-deep-logits-fine", LOGITS,           FLS_SHAPE_DEEP,    16.0,  16384,  1, {1.0f},                         4,   FLS_DTYPE_F32,   0,  2,   1,   0.25, &X_MF},
    {"mf-group-deep-logits", LOGITS,          FLS_SHAPE_GROUP_DEEP, 0.0, 256,   1, {1.0f},                         4,   FLS_DTYPE_F32,   0,  5,   1,   0.7, &X_MF},
    {"mf-pairs-offset",     FLS_CASE_PAIRS_OFFSET, PAIRS,        FLS_SHAPE_NORMAL, 0.7, 8, 1, {1.0f},             512, FLS_DTYPE_F32,   0,  0,   0,   0.0, &X_MF},
    {"mf-pairs-draw",       FLS_CASE_PAIRS_DRAW,   PAIRS,        FLS_SHAPE_NORMAL, 0.7, 8, 1, {1.0f},             512, FLS_DTYPE_F32,   0,  0,   0,   0.0, &X_MF},
    {"mf-pairs-seed",       FLS_CASE_PAIRS_SEED,   PAIRS,        FLS_SHAPE_NORMAL, 0.7, 8, 1, {1.0f},             512, FLS_DTYPE_F32,   0,  0,   0,   0.0, &X_MF},
    {"mf-zipf-fused",       FUSED,            FLS_SHAPE_ZIPF,    0.0,   4096,   2, {1.0f, 0.8f},                   2,   FLS_DTYPE_BF16,  16, 5,   0,   0.0, &X_MF},
    {"mf-normal-fused-f32", FUSED,            FLS_SHAPE_NORMAL,  1.5,   1031,   2, {0.7f, 2.5f},                   2,   FLS_DTYPE_F32,   33, 3,   0,   0.0, &X_MF},
    {"mf-heavy-fused",      FUSED,            FLS_SHAPE_HEAVY,   0.0,   4096,   1, {1.0f},                         4,   FLS_DTYPE_BF16,  16, 5,   1,   0.3, &X_MF},
    {"mf-deep-fused",       FUSED,            FLS_SHAPE_DEEP,    17.0,  4096,   1, {0.8f},                         4,   FLS_DTYPE_BF16,  16, 5,   1,   0.7, &X_MF},
    {"mf-greedy-fused",     FUSED,            FLS_SHAPE_TIES,    0.0,   4096,   1, {0.0f},                         4,   FLS_DTYPE_BF16,  16, 0,   0,   0.0, &X_MF},
    {"mf-zipf-unfused-gumbel", FLS_CASE_GOF, 1, FLS_METHOD_UNFUSED_GUMBEL, FLS_SHAPE_ZIPF, 0.0, 1024, 1, {1.0f},    4,   FLS_DTYPE_BF16,  16, 1,   0,   0.0, &X_MF},
    {"mf-deep-fused-262144", FUSED,           FLS_SHAPE_DEEP,    16.0,  262144, 1, {1.0f},                         4,   FLS_DTYPE_BF16,  16, 2,   1,   0.1, &X_MF},
};
// clang-format on

#define N_CASES (sizeof cases / sizeof cases[0])

size_t fls_audit_case_count(void)
{
    return N_CASES;
}

const fls_audit_case *fls_audit_case_get(size_t i)
{
    return i < N_CASES ? &cases[i] : NULL;
}

fls_stats_rule fls_audit_case_rule(const fls_audit_case *c, int g)
{
    fls_stats_rule r;
    fls_stats_rule_off(&r);
    for (int id = 0; c && c->ext && id < FLS_FILTER_COUNT; id++)
        if (c->ext->filter[id][g] != 0.0)
            r.value[id] = c->ext->filter[id][g];
    return r;
}

int fls_audit_case_has_rule(const fls_audit_case *c)
{
    for (int g = 0; c && c->ext && g < 8; g++) {
        const fls_stats_rule r = fls_audit_case_rule(c, g);
        if (fls_stats_rule_active(&r))
            return 1;
    }
    return 0;
}

int fls_audit_case_cpu_only(const fls_audit_case *c)
{
    /* the CUDA engine runs every rule and without replacement since 0.3; the
     * multinomial baseline's filters stay the CPU engine's */
    return c->ext && (fls_audit_case_has_rule(c) || c->ext->wr_k > 0) &&
           c->method == FLS_METHOD_UNFUSED_MULTINOMIAL;
}

int fls_audit_case_tuples(const fls_audit_case *c)
{
    if (!c->ext || c->ext->wr_k < 2)
        return 0;
    const int64_t cells = fls_stats_pl_cells(c->V, (int)c->ext->wr_k);
    return cells > 0 && cells <= 4096;
}

int fls_audit_case_in_run(size_t i, int full, fls_engine engine)
{
    if (i >= N_CASES)
        return 0;
    const int tier = cases[i].tier, cuda = engine == FLS_ENGINE_CUDA;
    if (cuda && fls_audit_case_cpu_only(&cases[i]))
        return 0;
    return tier == 0 || (tier == 1 && full) || (tier == 2 && full && cuda) || (tier == 3 && (full || cuda)) ||
           (tier == 4 && full == 1 && !cuda) || (tier == 5 && (cuda || full == 1));
}

size_t fls_audit_run_count(int full, fls_engine engine)
{
    size_t n = 0;
    for (size_t i = 0; i < N_CASES; i++)
        n += (size_t)fls_audit_case_in_run(i, full, engine);
    return n;
}

size_t fls_audit_run_index(int full, fls_engine engine, size_t k)
{
    for (size_t i = 0; i < N_CASES; i++)
        if (fls_audit_case_in_run(i, full, engine)) {
            if (k == 0)
                return i;
            k--;
        }
    return (size_t)-1;
}

int fls_audit_case_tests(size_t i)
{
    if (i >= N_CASES)
        return 0;
    const fls_audit_case *c = &cases[i];
    const int cond = c->ext && c->ext->wr_k >= 2 && !fls_audit_case_tuples(c);
    return 1 + (c->tail ? FLS_STATS_N_TAILS : 0) + cond;
}

int fls_audit_run_tests(int full, fls_engine engine)
{
    int n = 0;
    for (size_t i = 0; i < N_CASES; i++)
        if (fls_audit_case_in_run(i, full, engine))
            n += fls_audit_case_tests(i);
    return n;
}

void fls_audit_options_default(fls_audit_options *o)
{
    o->full = 0;
    o->engine = FLS_ENGINE_CPU;
    o->threads = 0;
    o->seed = 20260301;
    o->progress = 0;
    o->family = NULL;
    o->fault_case = NULL;
    o->omit_mods = 0;
}
