/*
 * cases.c — the goodness-of-fit cases of the audit (the one list), their
 * inputs, and how each is sampled and tested.
 *
 * Every case samples through the public API (fls_sample_logits or
 * fls_sample_fused), many draws per row in one pass (params.draws; draw
 * indices have independent noise), several rows with their own row seeds, and
 * splits long runs into calls at successive row offsets (offsets, like draws,
 * have independent noise) so progress can be shown. The samples of all rows of
 * a group are pooled and tested against the group's exact reference (double)
 * on equal-mass bins; groups (distinct temperatures or H rows) add their chi2
 * and dof. Sample sizes come from fls_stats_design_size at the run's alpha and
 * the dof of the bins the case really has at that size (not the largest dof it
 * could have), so a total-variation error of 0.01 in any one group is caught
 * with probability >= 0.999.
 *
 * Fused inputs: W (V, D) in the case's dtype with W[v][0] = target_v / 4 and
 * small N(0, 0.05) entries elsewhere; H (groups, D) f32 with H[g][0] = 4 and
 * N(0, 1) elsewhere. The reference logits are W h accumulated in double from the
 * exact input values; the engine's fp32 accumulation differs by ~1e-6 relative
 * (~1e-5 nats), which moves probabilities by ~1e-5 relative: 3 orders below the
 * 0.01 TV the tests resolve.
 *
 * Inputs come from gsl_rng_mt19937 seeded with a hash of the case name (the
 * same inputs in every run); sampling seeds come from the options' base seed
 * and the case name, and are logged.
 */
#include "fls_cases.h"
#include "fls_stats.h"
#include "fls_tokens.h"

#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
 * logits path and the multinomial baseline). */
/* What the cases add to the temperature rule (docs/RULES.md, docs/GROUPED.md). Off: min-p 0, top-k 0,
 * top-p 0 (read as 1), n-sigma 0. */
#define NOWR                                                                                                 \
    0,                                                                                                       \
    {                                                                                                        \
        0                                                                                                    \
    }
// clang-format off
/*                               min_p per group                top_k per group        top_p per group               nsigma           wr       g     io             pieces */
static const fls_case_ext X_V1          = {{0.5f},                       {1},                    {0.5f},                       {0},             1, {0}, 0,    FLS_IO_CALL,   0};
static const fls_case_ext X_MIXED       = {{0, 0, 0.05f, 0.01f},         {5, 0, 0, 30},          {0, 0.8f, 0, 0.9f},           {0, 0, 0, 1.5},  NOWR,    0,    FLS_IO_CALL,   0};
static const fls_case_ext X_FUSED_SMALL = {{0.01f, 0},                   {40, 100},              {0.95f, 0.7f},                {0, 2.0},        NOWR,    0,    FLS_IO_CALL,   0};
static const fls_case_ext X_TOPK50      = {{0},                          {50},                   {0},                          {0},             NOWR,    0,    FLS_IO_CALL,   0};
static const fls_case_ext X_TOPK20      = {{0},                          {20},                   {0},                          {0},             NOWR,    0,    FLS_IO_CALL,   0};
static const fls_case_ext X_TOPK1       = {{0},                          {1},                    {0},                          {0},             NOWR,    0,    FLS_IO_CALL,   0};
static const fls_case_ext X_TOPP90      = {{0},                          {0},                    {0.9f},                       {0},             NOWR,    0,    FLS_IO_CALL,   0};
static const fls_case_ext X_TOPP95      = {{0},                          {0},                    {0.95f},                      {0},             NOWR,    0,    FLS_IO_CALL,   0};
static const fls_case_ext X_MINP_HEAVY  = {{1e-7f},                      {0},                    {0},                          {0},             NOWR,    0,    FLS_IO_CALL,   0};
static const fls_case_ext X_ALL3        = {{0.02f},                      {200},                  {0.95f},                      {0},             NOWR,    0,    FLS_IO_CALL,   0};
static const fls_case_ext X_FLAT        = {{0.5f},                       {100},                  {0.5f},                       {0},             NOWR,    0,    FLS_IO_CALL,   0};
static const fls_case_ext X_COMBO       = {{0.001f, 0.0005f},            {300, 150},             {0.95f, 0.9f},                {2.0, 1.5},      NOWR,    0,    FLS_IO_CALL,   0};
static const fls_case_ext X_NSIGMA      = {{0},                          {0},                    {0},                          {1.0},           NOWR,    0,    FLS_IO_CALL,   0};
static const fls_case_ext X_HEAVY_BIG   = {{1e-8f},                      {60000},                {0.999f},                     {0},             NOWR,    0,    FLS_IO_CALL,   0};
static const fls_case_ext X_WR_SMALL    = {{0, 0},                       {0, 4},                 {0},                          {0},             3, {3, 2}, 0, FLS_IO_CALL,   0};
static const fls_case_ext X_WR_RULES    = {{0, 0.1f, 0},                 {0, 0, 2},              {0},                          {0},             3, {3, 2, 3}, 0, FLS_IO_CALL, 0};
static const fls_case_ext X_WR_FUSED_SMALL = {{0},                       {0},                    {0.9f},                       {0},             2, {0}, 0,    FLS_IO_CALL,   0};
static const fls_case_ext X_WR_TOPK     = {{0},                          {100},                  {0},                          {0},             4, {0}, 0,    FLS_IO_CALL,   0};
static const fls_case_ext X_WR_TOPP     = {{0},                          {0},                    {0.9f},                       {0},             3, {0}, 0,    FLS_IO_CALL,   0};
static const fls_case_ext X_WR_BIG      = {{0},                          {2000},                 {0},                          {0},             3, {0}, 0,    FLS_IO_CALL,   0};
static const fls_case_ext X_G32         = {{0},                          {0},                    {0},                          {0},             NOWR,    32,   FLS_IO_CALL,   0};
static const fls_case_ext X_G64         = {{0},                          {0},                    {0},                          {0},             NOWR,    64,   FLS_IO_CALL,   0};
static const fls_case_ext X_G128        = {{0},                          {0},                    {0},                          {0},             NOWR,    128,  FLS_IO_CALL,   0};
static const fls_case_ext X_G256        = {{0},                          {0},                    {0},                          {0},             NOWR,    256,  FLS_IO_CALL,   0};
static const fls_case_ext X_G512        = {{0},                          {0},                    {0},                          {0},             NOWR,    512,  FLS_IO_CALL,   0};
static const fls_case_ext X_G1024       = {{0},                          {0},                    {0},                          {0},             NOWR,    1024, FLS_IO_CALL,   0};
static const fls_case_ext X_STREAM5     = {{0},                          {0},                    {0},                          {0},             NOWR,    0,    FLS_IO_STREAM, 5};
static const fls_case_ext X_STREAM7     = {{0},                          {0},                    {0},                          {0},             NOWR,    0,    FLS_IO_STREAM, 7};
static const fls_case_ext X_STREAM9_G64 = {{0},                          {0},                    {0},                          {0},             NOWR,    64,   FLS_IO_STREAM, 9};
static const fls_case_ext X_SHARDS4     = {{0},                          {0},                    {0},                          {0},             NOWR,    0,    FLS_IO_SHARDS, 4};
static const fls_case_ext X_SHARDS_G32  = {{0},                          {0},                    {0},                          {0},             NOWR,    32,   FLS_IO_SHARDS, 3};
static const fls_case_ext X_SHARDS3_G128 = {{0},                         {0},                    {0},                          {0},             NOWR,    128,  FLS_IO_SHARDS, 3};
// clang-format on
#undef NOWR

// clang-format off
static const fls_audit_case cases[] = {
    /* name                 kind/path/method  shape              scale  V       G  temps                           R    W dtype          D   tier tail deficit ext */
    {"v1-logits",           LOGITS,           FLS_SHAPE_FLAT,    0.0,   1,      1, {1.0f},                         2,   FLS_DTYPE_F32,   0,  0,   0,   0.0, NULL},
    {"coin-logits",         LOGITS,           FLS_SHAPE_COIN,    0.0,   2,      1, {1.0f},                         2,   FLS_DTYPE_F32,   0,  0,   0,   0.0, NULL},
    {"v17-logits",          LOGITS,           FLS_SHAPE_NORMAL,  1.0,   17,     1, {1.0f},                         2,   FLS_DTYPE_F32,   0,  0,   0,   0.0, NULL},
    {"flat-logits",         LOGITS,           FLS_SHAPE_FLAT,    0.0,   1000,   1, {1.0f},                         4,   FLS_DTYPE_F32,   0,  1,   0,   0.0, NULL},
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
};
// clang-format on

#define N_CASES (sizeof cases / sizeof cases[0])

/* Token-samples per API call: ~1 s on two cores, so progress stays live. */
#define CALL_BUDGET 300000000.0

/* (Row, draw) pairs per call for the cases with a rule, without replacement or
 * streaming: their state per (row, draw) is larger than a candidate, and
 * touching it all at once costs more in page faults than it saves in calls. */
#define MAX_CALL_DRAWS 16384

/* The threshold at which a case's tail deficit is designed (nats below the head). */
#define TAIL_DESIGN_T 15.0

size_t fls_audit_case_count(void)
{
    return N_CASES;
}

const fls_audit_case *fls_audit_case_get(size_t i)
{
    return i < N_CASES ? &cases[i] : NULL;
}

static int ext_rule(const fls_case_ext *x)
{
    if (!x)
        return 0;
    for (int g = 0; g < 8; g++)
        if (x->min_p[g] != 0.0f || x->top_k[g] != 0 || (x->top_p[g] != 0.0f && x->top_p[g] != 1.0f) ||
            x->nsigma[g] != 0.0)
            return 1;
    return 0;
}

int fls_audit_case_cpu_only(const fls_audit_case *c)
{
    /* the CUDA engine runs every rule and without replacement since 0.3; the
     * multinomial baseline's filters stay the CPU engine's */
    return c->ext && (ext_rule(c->ext) || c->ext->wr_k > 0) && c->method == FLS_METHOD_UNFUSED_MULTINOMIAL;
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
           (tier == 4 && full == 1 && !cuda);
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
}

/* ---- inputs ---- */

/* The row-offset spreader of the pairs-offset case (splitmix64's finalizer). */
static uint64_t splitmix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t name_hash(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return h;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct sorted_l {
    double l;
    int64_t i;
} sorted_l;

static int by_l_desc(const void *a, const void *b)
{
    const sorted_l *x = a, *y = b;
    if (x->l != y->l)
        return x->l > y->l ? -1 : 1;
    return x->i < y->i ? -1 : (x->i > y->i);
}

/* N(0, scale) logits, sorted copy in s (V entries). */
static void gaussian_sorted(gsl_rng *r, double scale, int64_t V, float *l, sorted_l *s)
{
    for (int64_t v = 0; v < V; v++) {
        l[v] = (float)gsl_ran_gaussian(r, scale);
        s[v].l = l[v];
        s[v].i = v;
    }
    qsort(s, (size_t)V, sizeof *s, by_l_desc);
}

/* Three bit-identical tokens straddling the nucleus of top-p p at temperature
 * T: the mass of the tokens above them is < p Z by a relative margin of 1e-3
 * and the mass up to their end is > p Z by as much. Ties in tie[0..2]. */
static void gen_tie_p(const fls_audit_case *c, gsl_rng *r, float *l, sorted_l *s, int64_t *tie)
{
    const int64_t V = c->V;
    const double p = (double)c->ext->top_p[0], T = c->temps[0] > 0.0f ? (double)c->temps[0] : 1.0;
    for (int attempt = 0; attempt < 1000; attempt++) {
        gaussian_sorted(r, c->scale, V, l, s);
        const double m = s[0].l / T;
        double Z = 0.0, A = 0.0;
        for (int64_t k = 0; k < V; k++)
            Z += exp(s[k].l / T - m);
        int64_t k = 0;
        while (k < V && (A + exp(s[k].l / T - m)) < p * Z) {
            A += exp(s[k].l / T - m);
            k++;
        }
        if (k < 1 || k + 1 >= V)
            continue;
        /* ranks k-1, k, k+1 take the value of rank k */
        const float cval = l[s[k].i];
        l[s[k - 1].i] = l[s[k + 1].i] = cval;
        double Z2 = 0.0, A2 = 0.0;
        for (int64_t j = 0; j < V; j++) {
            const double e = exp((double)l[s[j].i] / T - m);
            Z2 += e;
            A2 += j < k - 1 ? e : 0.0;
        }
        const double mc = 3.0 * exp((double)cval / T - m);
        if (A2 < p * Z2 * (1.0 - 1e-3) && A2 + mc > p * Z2 * (1.0 + 1e-3)) {
            tie[0] = s[k - 1].i;
            tie[1] = s[k].i;
            tie[2] = s[k + 1].i;
            return;
        }
    }
}

/* The case's target logits (float values, as the logits path receives them).
 * Shapes with planted ties list the tied tokens in tie (the fused path copies
 * their rows of W, so their logits are bit-identical there too). */
static void gen_logits(const fls_audit_case *c, gsl_rng *r, float *l, int64_t *tie, int *n_tie)
{
    const int64_t V = c->V;
    *n_tie = 0;
    switch (c->shape) {
    case FLS_SHAPE_FLAT:
        for (int64_t v = 0; v < V; v++)
            l[v] = 0.75f;
        break;
    case FLS_SHAPE_COIN:
        for (int64_t v = 0; v < V; v++)
            l[v] = v == 0 ? 0.0f : -0.85f;
        break;
    case FLS_SHAPE_ZIPF: {
        size_t *perm = malloc((size_t)V * sizeof(size_t));
        for (int64_t v = 0; v < V; v++)
            perm[v] = (size_t)v;
        gsl_ran_shuffle(r, perm, (size_t)V, sizeof(size_t));
        for (int64_t k = 0; k < V; k++)
            l[perm[k]] = (float)(-1.1 * log((double)k + 1.0));
        free(perm);
        break;
    }
    case FLS_SHAPE_PEAKED:
        for (int64_t v = 0; v < V; v++)
            l[v] = (float)gsl_ran_gaussian(r, 1.0);
        l[gsl_rng_uniform_int(r, (unsigned long)V)] = 12.0f;
        break;
    case FLS_SHAPE_HEAVY: {
        /* Tail 15..15+w nats below the head (2% of the tail down to 25 nats):
         * V = 4096, one head token, w = 0.5: tail mass ~1e-3;
         * V = 262144, three head tokens, w = 4: tail mass ~1e-2.
         * Head tokens sit at random places, so tiles of every thread hold some. */
        const int big = V >= 65536;
        const double w = big ? 4.0 : 0.5;
        for (int64_t v = 0; v < V; v++) {
            double u = gsl_rng_uniform(r);
            l[v] = gsl_rng_uniform(r) < 0.98 ? (float)(-15.0 - w * u) : (float)(-15.0 - w - (10.0 - w) * u);
        }
        const float head[3] = {0.0f, -0.7f, -1.4f};
        for (int k = 0; k < (big ? 3 : 1); k++)
            l[gsl_rng_uniform_int(r, (unsigned long)V)] = head[k];
        break;
    }
    case FLS_SHAPE_DEEP: {
        /* One head token; 12% of the tokens 10.5-14.5 nats below it (the t = 10
         * tail); the rest deeper: 75% uniform in [s, s + 2] nats, 25% in
         * [s + 2, 30], s = scale (16 or 17), where uniforms of 24 bits lose most
         * of the mass (their Gumbel noise stops at 16.6). Depths are in nats of
         * l / T: the logits are depth x T. */
        const double s0 = c->scale, T = c->temps[0] > 0.0f ? (double)c->temps[0] : 1.0;
        for (int64_t v = 0; v < V; v++) {
            double u = gsl_rng_uniform(r), w = gsl_rng_uniform(r), d;
            if (w < 0.12)
                d = 10.5 + 4.0 * u;
            else if (w < 0.12 + 0.88 * 0.75)
                d = s0 + 2.0 * u;
            else
                d = s0 + 2.0 + (30.0 - s0 - 2.0) * u;
            l[v] = (float)(-d * T);
        }
        l[gsl_rng_uniform_int(r, (unsigned long)V)] = 0.0f;
        break;
    }
    case FLS_SHAPE_MASKED:
        for (int64_t v = 0; v < V; v++) {
            int masked = v % 3 == 1 || (v >= V / 2 && v < V / 2 + V / 8) || v == 0 || v == V - 1;
            l[v] = masked ? -INFINITY : (float)gsl_ran_gaussian(r, 1.5);
        }
        break;
    case FLS_SHAPE_NORMAL:
        for (int64_t v = 0; v < V; v++)
            l[v] = (float)gsl_ran_gaussian(r, c->scale);
        break;
    case FLS_SHAPE_TIE_K: {
        /* ranks k-1, k, k+1 (1-based) share the value of rank k: top-k keeps k + 1 tokens */
        sorted_l *s = malloc((size_t)V * sizeof *s);
        if (!s)
            break;
        gaussian_sorted(r, c->scale, V, l, s);
        const int64_t k = c->ext ? c->ext->top_k[0] : 2;
        if (k >= 2 && k + 1 <= V) {
            l[s[k - 2].i] = l[s[k].i] = l[s[k - 1].i];
            tie[0] = s[k - 2].i;
            tie[1] = s[k - 1].i;
            tie[2] = s[k].i;
            *n_tie = 3;
        }
        free(s);
        break;
    }
    case FLS_SHAPE_TIE_P: {
        sorted_l *s = malloc((size_t)V * sizeof *s);
        if (!s || !c->ext)
            break;
        tie[0] = -1;
        gen_tie_p(c, r, l, s, tie);
        *n_tie = tie[0] >= 0 ? 3 : 0;
        free(s);
        break;
    }
    case FLS_SHAPE_MASKED_GROUPS: {
        const int64_t g = c->ext && c->ext->group_size ? c->ext->group_size : 128;
        for (int64_t v = 0; v < V; v++) {
            double u = gsl_rng_uniform(r);
            int masked = ((v / g) % 3 == 1) || (u < 0.1 && v > 0);
            l[v] = masked ? -INFINITY : (float)gsl_ran_gaussian(r, 1.5);
        }
        break;
    }
    case FLS_SHAPE_GROUP_DEEP: {
        /* the head's group (group 1): its other members 15.2-15.7 nats below the
         * head (98%) or 15.7-25 (2%); every other group 10.5-14.5 nats below.
         * Depths in nats of l / T. */
        const int64_t g = c->ext && c->ext->group_size ? c->ext->group_size : 128;
        const int64_t hg = V > g ? 1 : 0, h0 = hg * g, hn = V - h0 < g ? V - h0 : g;
        const double T = c->temps[0] > 0.0f ? (double)c->temps[0] : 1.0;
        for (int64_t v = 0; v < V; v++) {
            double u = gsl_rng_uniform(r), w = gsl_rng_uniform(r), d;
            if (v / g == hg)
                d = w < 0.98 ? 15.2 + 0.5 * u : 15.7 + 9.3 * u;
            else
                d = 10.5 + 4.0 * u;
            l[v] = (float)(-d * T);
        }
        l[h0 + (int64_t)gsl_rng_uniform_int(r, (unsigned long)hn)] = 0.0f;
        break;
    }
    case FLS_SHAPE_TIES: {
        float m = -INFINITY;
        for (int64_t v = 0; v < V; v++) {
            l[v] = (float)gsl_ran_gaussian(r, 1.0);
            m = l[v] > m ? l[v] : m;
        }
        /* a clear gap (3 nats) to every other token, so fp32 and double agree on the argmax set */
        l[V / 3] = l[V / 2] = l[V - 1] = m + 3.0f;
        break;
    }
    }
}

/* W (V, D) and H (G, D) for the fused path (see the header comment). */
static fls_status gen_fused(const fls_audit_case *c, gsl_rng *r, const float *target, const int64_t *tie,
                            int n_tie, void **W, float **H)
{
    const int64_t V = c->V, D = c->D, G = c->groups;
    const size_t es = fls_dtype_size(c->w_dtype);
    *W = malloc((size_t)(V * D) * es);
    *H = malloc((size_t)(G * D) * sizeof(float));
    if (!*W || !*H)
        return FLS_ERR_OUT_OF_MEMORY;
    for (int64_t v = 0; v < V; v++)
        for (int64_t k = 0; k < D; k++) {
            float x = k == 0 ? target[v] / 4.0f : (float)gsl_ran_gaussian(r, 0.05);
            size_t i = (size_t)(v * D + k);
            if (c->w_dtype == FLS_DTYPE_F32)
                ((float *)*W)[i] = x;
            else if (c->w_dtype == FLS_DTYPE_BF16)
                ((uint16_t *)*W)[i] = fls_f32_to_bf16(x);
            else
                ((uint16_t *)*W)[i] = fls_f32_to_f16(x);
        }
    if (c->shape == FLS_SHAPE_TIES) { /* identical rows: identical fp32 logits, a true tie */
        const int64_t tied[2] = {V / 2, V - 1};
        for (int k = 0; k < 2; k++)
            memcpy((char *)*W + (size_t)(tied[k] * D) * es, (char *)*W + (size_t)((V / 3) * D) * es,
                   (size_t)D * es);
    }
    for (int k = 1; k < n_tie; k++) /* planted ties: identical rows, bit-identical fp32 logits */
        memcpy((char *)*W + (size_t)(tie[k] * D) * es, (char *)*W + (size_t)(tie[0] * D) * es,
               (size_t)D * es);
    for (int64_t g = 0; g < G; g++)
        for (int64_t k = 0; k < D; k++)
            (*H)[g * D + k] = k == 0 ? 4.0f : (float)gsl_ran_gaussian(r, 1.0);
    return FLS_OK;
}

/* ---- calling the engine (host or device memory) ---- */

typedef struct case_io {
    fls_context_t *ctx;
    int cuda;
    int fused;
    fls_matrix L, W, H; /* host views */
    void *dL, *dW, *dH; /* device copies (CUDA engine) */
    int64_t *dtok;
    size_t dtok_bytes;
    int fault; /* FLS_AUDIT_FAULT names this case */
    fls_case_io mode;
    int pieces;        /* stream: chunks; shards: shards */
    gsl_rng *chunking; /* the random chunkings and orders (seeded per call, logged) */
} case_io;

static fls_status upload(const fls_matrix *m, void **dev)
{
    size_t bytes = (size_t)(m->rows * m->ld) * fls_dtype_size(m->dtype);
    fls_status st = fls_device_malloc(dev, bytes);
    if (st == FLS_OK)
        st = fls_device_upload(*dev, m->data, bytes);
    return st;
}

static fls_status io_prepare(case_io *io)
{
    if (!io->cuda)
        return FLS_OK;
    if (io->fused) {
        fls_status st = upload(&io->W, &io->dW);
        return st == FLS_OK ? upload(&io->H, &io->dH) : st;
    }
    return upload(&io->L, &io->dL);
}

static void io_release(case_io *io)
{
    if (!io->cuda)
        return;
    fls_device_free(io->dL);
    fls_device_free(io->dW);
    fls_device_free(io->dH);
    fls_device_free(io->dtok);
}

/* ---- the streaming API: random chunkings, random orders, shards through bytes ---- */

/* Feeds tokens [v0, v0 + n) of the case's input to a stream. */
static fls_status stream_feed(case_io *io, fls_stream_t *s, int64_t v0, int64_t n)
{
    /* the CUDA engine's streams take device memory */
    if (io->fused) {
        const size_t es = fls_dtype_size(io->W.dtype);
        fls_matrix Wc = {(const char *)(io->cuda ? io->dW : io->W.data) + (size_t)(v0 * io->W.ld) * es,
                         io->W.dtype, n, io->W.cols, io->W.ld};
        fls_matrix H = io->H;
        if (io->cuda)
            H.data = io->dH;
        return fls_stream_feed_fused(s, &Wc, &H, v0);
    }
    fls_matrix Lc = {(const float *)(io->cuda ? io->dL : io->L.data) + v0, FLS_DTYPE_F32, io->L.rows, n,
                     io->L.ld};
    return fls_stream_feed_logits(s, &Lc, v0);
}

/* Cuts [a, b) into k nonempty random pieces: cut[0] = a < cut[1] < ... < cut[k] = b
 * (k <= b - a). */
static void random_cuts(gsl_rng *r, int64_t a, int64_t b, int k, int64_t *cut)
{
    cut[0] = a;
    cut[k] = b;
    for (int j = 1; j < k; j++) {
        int64_t x;
        int dup;
        do { /* distinct interior points, sorted below */
            x = a + 1 + (int64_t)gsl_rng_uniform_int(r, (unsigned long)(b - a - 1));
            dup = 0;
            for (int i = 1; i < j; i++)
                dup |= cut[i] == x;
        } while (dup);
        cut[j] = x;
    }
    for (int j = 1; j < k; j++) /* insertion sort of the interior */
        for (int i = j; i > 1 && cut[i - 1] > cut[i]; i--) {
            int64_t t = cut[i];
            cut[i] = cut[i - 1];
            cut[i - 1] = t;
        }
}

#define MAX_PIECES 16

/* One batch of draws through fls_stream_*: FLS_IO_STREAM feeds the vocabulary
 * in io->pieces random chunks in a random order; FLS_IO_SHARDS cuts it into
 * io->pieces random shards, feeds each to a state of its own in 1-3 random
 * chunks (random order), serializes every state, deserializes the bytes
 * into new states and merges them in a random order. Then finalize. */
static fls_status io_stream(case_io *io, const fls_params *p, int64_t B, const fls_outputs *out)
{
    const int64_t V = io->fused ? io->W.rows : io->L.cols;
    int k = io->pieces < 1 ? 1 : io->pieces > MAX_PIECES ? MAX_PIECES : io->pieces;
    k = k > V ? (int)V : k;
    int64_t cut[MAX_PIECES + 1];
    int order[MAX_PIECES];
    random_cuts(io->chunking, 0, V, k, cut);
    for (int j = 0; j < k; j++)
        order[j] = j;
    gsl_ran_shuffle(io->chunking, order, (size_t)k, sizeof(int));
    fls_status st = FLS_OK;
    if (io->mode == FLS_IO_STREAM) {
        fls_stream_t *s = NULL;
        if ((st = fls_stream_create(&s, io->ctx, B, V, p)) != FLS_OK)
            return st;
        for (int j = 0; j < k && st == FLS_OK; j++)
            st = stream_feed(io, s, cut[order[j]], cut[order[j] + 1] - cut[order[j]]);
        if (st == FLS_OK)
            st = fls_stream_finalize(s, out);
        fls_stream_destroy(s);
        return st;
    }
    fls_stream_t *shard[MAX_PIECES] = {0};
    for (int j = 0; j < k && st == FLS_OK; j++) {
        fls_stream_t *s = NULL;
        if ((st = fls_stream_create(&s, io->ctx, B, V, p)) != FLS_OK)
            break;
        const int64_t a = cut[j], b = cut[j + 1];
        int sub = 1 + (int)gsl_rng_uniform_int(io->chunking, 3);
        sub = sub > b - a ? (int)(b - a) : sub;
        int64_t sc[4];
        int so[3] = {0, 1, 2};
        random_cuts(io->chunking, a, b, sub, sc);
        gsl_ran_shuffle(io->chunking, so, (size_t)sub, sizeof(int));
        for (int q = 0; q < sub && st == FLS_OK; q++)
            st = stream_feed(io, s, sc[so[q]], sc[so[q] + 1] - sc[so[q]]);
        /* through bytes: serialize, destroy, deserialize */
        size_t bytes = 0;
        void *buf = NULL;
        if (st == FLS_OK && (st = fls_stream_serialize(s, NULL, &bytes)) == FLS_OK) {
            if (!(buf = malloc(bytes)))
                st = FLS_ERR_OUT_OF_MEMORY;
            else if ((st = fls_stream_serialize(s, buf, &bytes)) == FLS_OK)
                st = fls_stream_deserialize(&shard[j], io->ctx, buf, bytes);
        }
        free(buf);
        fls_stream_destroy(s);
    }
    for (int j = 1; j < k && st == FLS_OK; j++)
        st = fls_stream_merge(shard[order[0]], shard[order[j]]);
    if (st == FLS_OK)
        st = fls_stream_finalize(shard[order[0]], out);
    for (int j = 0; j < k; j++)
        fls_stream_destroy(shard[j]);
    return st;
}

/* tokens (B x draws, host) are filled with the guard -1 first: a token the
 * engine fails to write is out of range and fails the test. Fault injection
 * for the tests of the audit itself: with FLS_AUDIT_FAULT set to a case's name
 * (or "*": every case), that case's sampling fails (FLS_ERR_INTERNAL), as a
 * broken engine would. */
static fls_status io_sample(case_io *io, const fls_params *p, int64_t B, int64_t *tokens)
{
    const size_t n = (size_t)(B * p->draws * (p->without_replacement_k > 0 ? p->without_replacement_k : 1));
    if (io->fault)
        return FLS_ERR_INTERNAL;
    for (size_t i = 0; i < n; i++)
        tokens[i] = -1;
    if (!io->cuda) {
        fls_outputs out = {tokens, NULL, NULL};
        if (io->mode != FLS_IO_CALL)
            return io_stream(io, p, B, &out);
        return io->fused ? fls_sample_fused(io->ctx, &io->W, &io->H, p, &out)
                         : fls_sample_logits(io->ctx, &io->L, p, &out);
    }
    fls_status st = FLS_OK;
    if (io->dtok_bytes < n * sizeof(int64_t)) {
        fls_device_free(io->dtok);
        io->dtok = NULL;
        io->dtok_bytes = 0;
        st = fls_device_malloc((void **)&io->dtok, n * sizeof(int64_t));
        if (st != FLS_OK)
            return st;
        io->dtok_bytes = n * sizeof(int64_t);
    }
    st = fls_device_upload(io->dtok, tokens, n * sizeof(int64_t)); /* the guard, on the device too */
    if (st != FLS_OK)
        return st;
    fls_outputs out = {io->dtok, NULL, NULL};
    if (io->mode != FLS_IO_CALL) {
        st = io_stream(io, p, B, &out);
    } else if (io->fused) {
        fls_matrix W = io->W, H = io->H;
        W.data = io->dW;
        H.data = io->dH;
        st = fls_sample_fused(io->ctx, &W, &H, p, &out);
    } else {
        fls_matrix L = io->L;
        L.data = io->dL;
        st = fls_sample_logits(io->ctx, &L, p, &out);
    }
    if (st == FLS_OK)
        st = fls_device_download(tokens, io->dtok, n * sizeof(int64_t));
    return st;
}

/* ---- running a case ---- */

static int64_t ceil_div(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

typedef struct case_run {
    const fls_audit_case *c;
    const fls_audit_options *o;
    double alpha; /* the run's per-test level */
    uint64_t input_seed, case_seed;
    double t0;
    fls_audit_row *rows; /* fls_audit_case_tests rows */
    char err[112];       /* what failed, for the error rows */
} case_run;

static void fail(case_run *cr, const char *fmt, fls_status st, long long at)
{
    snprintf(cr->err, sizeof cr->err, fmt, fls_status_string(st), at);
}

/* The case's rule for group g, as the reference reads it. */
static fls_stats_rule group_rule(const fls_audit_case *c, int64_t g)
{
    fls_stats_rule r;
    fls_stats_rule_off(&r);
    const fls_case_ext *x = c->ext;
    if (!x)
        return r;
    r.min_p = (double)x->min_p[g];
    r.top_k = x->top_k[g];
    r.top_p = x->top_p[g] > 0.0f ? (double)x->top_p[g] : 1.0;
    r.nsigma = x->nsigma[g];
    return r;
}

/* K_b of group g without replacement (0: off). */
static int64_t group_k(const fls_audit_case *c, int64_t g)
{
    const fls_case_ext *x = c->ext;
    if (!x || x->wr_k < 1)
        return 0;
    return x->wr_rows[g] > 0 ? x->wr_rows[g] : x->wr_k;
}

/* The draws per group: the goodness-of-fit design (TV 0.01, power 0.999) on
 * the case's cells (tokens, or ordered tuples), the tail design at
 * TAIL_DESIGN_T for a case with a tail deficit, and without replacement over
 * tokens the conditional test's (32 equal cells of n_cond pooled transforms,
 * cond_per_draw of them per draw summed over groups). */
static fls_status design_case(case_run *cr, const double *gref, int64_t cells, const double *ref,
                              int64_t cond_per_draw, fls_gof_design *d, int64_t *N)
{
    const fls_audit_case *c = cr->c;
    fls_status st = fls_stats_design(gref, c->groups, cells, cr->alpha, d);
    if (st != FLS_OK)
        return st;
    *N = d->N;
    if (c->tail_deficit > 0.0) {
        /* one group (the deep cases): the exact binomial design */
        double m = fls_stats_tail_mass(ref, c->V, TAIL_DESIGN_T);
        int64_t n = fls_stats_tail_sample_size(m, c->tail_deficit, cr->alpha, FLS_STATS_POWER);
        if (n > *N)
            *N = n;
    }
    if (cond_per_draw > 0) {
        int64_t n = fls_stats_sample_size(FLS_STATS_MAX_BINS - 1, cr->alpha / FLS_STATS_CHI2_KAPPA,
                                          FLS_STATS_TV, FLS_STATS_POWER);
        const int64_t floor_n = (int64_t)(FLS_STATS_MIN_EXPECTED * FLS_STATS_MAX_BINS);
        n = n > floor_n ? n : floor_n;
        n = ceil_div(n, cond_per_draw);
        if (n > *N)
            *N = n;
    }
    return FLS_OK;
}

/* A hash uniform in [0, 1) for the conditional transforms (seed, row, draw, position). */
static double cond_uniform(uint64_t seed, int64_t b, int64_t n, int j)
{
    uint64_t h = splitmix64(seed ^ splitmix64((uint64_t)b * 0x9E3779B97F4A7C15ull + (uint64_t)j) ^
                            ((uint64_t)n * 0xD1B54A32D192ED03ull));
    return (double)(h >> 11) * (1.0 / 9007199254740992.0);
}

/* The smallest margin (fls_stats_support.margin, relative) of a rule's
 * decisions a case accepts, after fls_stats_rule_center has moved min-p,
 * top-p and top-n-sigma to the middle of their gaps. The engines decide on
 * float tempered logits, the reference on double ones: from logits at T = 1
 * the floats are the same (only sums differ in order: 1e-11), at other T
 * fl(l / T) is within 2^-24 relative (2e-6); on the fused path the fp32 dot
 * products of these inputs are within ~1e-6 of the double ones (1e-5). */
#define FUSED_MARGIN 1e-5

static fls_status run_gof(case_run *cr, case_io *io)
{
    const fls_audit_case *c = cr->c;
    const fls_case_ext *x = c->ext;
    const int64_t V = c->V, G = c->groups, R = c->rows_per_group, B = G * R;
    const int K = FLS_STATS_MAX_BINS;
    const int tuples = fls_audit_case_tuples(c);
    const int64_t KW = x && x->wr_k > 0 ? x->wr_k : 0, stride = KW > 0 ? KW : 1;
    const int cond = KW >= 2 && !tuples;
    const int64_t cells = tuples ? fls_stats_pl_cells(V, (int)KW) : V;
    const int rule = ext_rule(x);
    fls_status st = FLS_ERR_OUT_OF_MEMORY;
    gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);
    float *target = malloc((size_t)V * sizeof(float));
    float *L = NULL, *Hg = NULL, *H = NULL, *temps = malloc((size_t)B * sizeof(float));
    void *W = NULL;
    double *ref = malloc((size_t)(G * V) * sizeof(double)), *lg = malloc((size_t)V * sizeof(double));
    double *tref = tuples ? malloc((size_t)(G * cells) * sizeof(double)) : NULL;
    double *start = cond ? malloc((size_t)(G * V) * sizeof(double)) : NULL;
    uint64_t *seeds = malloc((size_t)B * sizeof(uint64_t)), *offsets = malloc((size_t)B * sizeof(uint64_t));
    int64_t *counts = calloc((size_t)(G * cells), sizeof(int64_t)), *oor = calloc((size_t)G, sizeof(int64_t));
    int64_t *ng = calloc((size_t)G, sizeof(int64_t));
    int64_t *tokens = NULL, *rk = NULL, *rwr = NULL;
    float *rmin = NULL, *rtop = NULL;
    double *rns = NULL;
    int64_t ccount[FLS_STATS_MAX_BINS] = {0}, cimp = 0, ncond = 0;
    int64_t support[8] = {0};
    fls_stats_rule grule[8]; /* the groups' rules, centered (fls_stats_rule_center) */
    fls_bins bins = {0};
    if (x) {
        rk = malloc((size_t)B * sizeof(int64_t));
        rwr = malloc((size_t)B * sizeof(int64_t));
        rmin = malloc((size_t)B * sizeof(float));
        rtop = malloc((size_t)B * sizeof(float));
        rns = malloc((size_t)B * sizeof(double));
    }
    snprintf(cr->err, sizeof cr->err, "out of memory preparing the case");
    if (!rng || !target || !temps || !ref || !lg || !seeds || !offsets || !counts || !oor || !ng ||
        (tuples && !tref) || (cond && !start) || (x && (!rk || !rwr || !rmin || !rtop || !rns)))
        goto done;
    if (G > 8) {
        st = FLS_ERR_PARAM;
        snprintf(cr->err, sizeof cr->err, "more than 8 groups");
        goto done;
    }
    gsl_rng_set(rng, (unsigned long)cr->input_seed);
    int64_t tie[3];
    int n_tie = 0;
    gen_logits(c, rng, target, tie, &n_tie);

    /* the exact references: the rule's pmf per group (softmax without a rule) */
    double worst_margin = INFINITY;
    if (!c->fused) {
        if (!(L = malloc((size_t)(B * V) * sizeof(float))))
            goto done;
        for (int64_t b = 0; b < B; b++)
            memcpy(L + b * V, target, (size_t)V * sizeof(float));
        io->L = (fls_matrix){L, FLS_DTYPE_F32, B, V, V};
        for (int64_t v = 0; v < V; v++)
            lg[v] = (double)target[v];
        for (int64_t g = 0; g < G; g++) {
            fls_stats_rule r0 = group_rule(c, g);
            fls_stats_support sup;
            if ((st = fls_stats_rule_center(lg, V, c->temps[g], &r0, &grule[g])) != FLS_OK ||
                (st = fls_stats_probs_rule(lg, V, c->temps[g], &grule[g], ref + g * V, &sup)) != FLS_OK)
                goto done;
            support[g] = c->temps[g] > 0.0f ? sup.size : 1;
            const double need = c->temps[g] == 1.0f ? 1e-11 : 2e-6;
            worst_margin = rule && sup.margin / need < worst_margin ? sup.margin / need : worst_margin;
        }
    } else {
        if ((st = gen_fused(c, rng, target, tie, n_tie, &W, &Hg)) != FLS_OK)
            goto done;
        st = FLS_ERR_OUT_OF_MEMORY;
        if (!(H = malloc((size_t)(B * c->D) * sizeof(float))))
            goto done;
        for (int64_t b = 0; b < B; b++)
            memcpy(H + b * c->D, Hg + (b % G) * c->D, (size_t)c->D * sizeof(float));
        io->W = (fls_matrix){W, c->w_dtype, V, c->D, c->D};
        io->H = (fls_matrix){H, FLS_DTYPE_F32, B, c->D, c->D};
        fls_matrix Hm = {Hg, FLS_DTYPE_F32, G, c->D, c->D};
        for (int64_t g = 0; g < G; g++) {
            fls_stats_rule r0 = group_rule(c, g);
            fls_stats_support sup;
            if ((st = fls_stats_logits_fused(&io->W, &Hm, g, lg)) != FLS_OK)
                goto done;
            if ((st = fls_stats_rule_center(lg, V, c->temps[g], &r0, &grule[g])) != FLS_OK ||
                (st = fls_stats_probs_rule(lg, V, c->temps[g], &grule[g], ref + g * V, &sup)) != FLS_OK)
                goto done;
            support[g] = c->temps[g] > 0.0f ? sup.size : 1;
            worst_margin =
                rule && sup.margin / FUSED_MARGIN < worst_margin ? sup.margin / FUSED_MARGIN : worst_margin;
        }
    }
    if (worst_margin < 1.0) {
        st = FLS_ERR_INTERNAL;
        snprintf(cr->err, sizeof cr->err,
                 "a decision of the rule is %.2g x the smallest safe margin from its threshold",
                 worst_margin);
        goto done;
    }
    int64_t cond_per_draw = 0;
    for (int64_t g = 0; g < G; g++) {
        const int64_t kb = group_k(c, g);
        if (tuples &&
            (st = fls_stats_pl_tuples(ref + g * V, V, (int)KW, (int)kb, tref + g * cells)) != FLS_OK)
            goto done;
        if (cond) {
            if ((st = fls_stats_cdf_start(ref + g * V, V, start + g * V)) != FLS_OK)
                goto done;
            const int64_t kk = kb < support[g] ? kb : support[g];
            cond_per_draw += R * (kk - 1);
        }
    }
    const double *gref = tuples ? tref : ref;

    /* Sample size for the bins the case really has at that size (any one group
     * may carry the whole error), and for its tail design. */
    fls_gof_design design;
    int64_t N = 0;
    snprintf(cr->err, sizeof cr->err, "the design failed");
    if ((st = design_case(cr, gref, cells, ref, cond_per_draw, &design, &N)) != FLS_OK)
        goto done;
    int64_t draws_row = ceil_div(N, R);
    int64_t dpc = (int64_t)(CALL_BUDGET / ((double)B * (double)V));
    if (x && dpc * B > MAX_CALL_DRAWS) /* the rule family's and the streams' per-draw state */
        dpc = MAX_CALL_DRAWS / B;
    dpc = dpc < 1 ? 1 : dpc > draws_row ? draws_row : dpc;
    const int64_t calls = ceil_div(draws_row, dpc);
    dpc = ceil_div(draws_row, calls);
    const int64_t per_group = R * calls * dpc;
    for (int r = 0; r < fls_audit_case_tests((size_t)(c - cases)); r++)
        cr->rows[r].draws = B * calls * dpc;
    snprintf(cr->err, sizeof cr->err, "out of memory for the tokens");
    st = FLS_ERR_OUT_OF_MEMORY;
    if (!(tokens = malloc((size_t)(B * dpc * stride) * sizeof(int64_t))))
        goto done;

    for (int64_t b = 0; b < B; b++) {
        temps[b] = c->temps[b % G];
        seeds[b] = fls_row_seed(cr->case_seed, (uint64_t)b);
        if (x) {
            const fls_stats_rule r = grule[b % G];
            rmin[b] = (float)r.min_p;
            rk[b] = r.top_k;
            rtop[b] = (float)r.top_p;
            rns[b] = r.nsigma;
            rwr[b] = group_k(c, b % G);
        }
    }
    if (cr->o->progress) {
        fprintf(
            stderr,
            "[audit] %s: %s%s%s, V %lld, %lld group(s) x %lld rows, N %lld per group (alpha %.3g; gof design "
            "N %lld on %lld %s: %d bins, dof %d + %d exact)"
            ", %lld call(s) x %lld draws/row, input seed 0x%016llx, case seed 0x%016llx"
            " (row b: seed fls_row_seed(case seed, b), offset = call index)\n",
            c->name, c->fused ? "fls_sample_fused" : "fls_sample_logits",
            c->method == FLS_METHOD_GROUPED ? " grouped" : "",
            io->mode == FLS_IO_STREAM   ? " through fls_stream (random chunks, random order)"
            : io->mode == FLS_IO_SHARDS ? " through fls_stream shards (bytes, merged in a random order)"
                                        : "",
            (long long)V, (long long)G, (long long)R, (long long)per_group, cr->alpha, (long long)design.N,
            (long long)cells, tuples ? "tuple cells" : "tokens", design.bins, design.dof, design.n_exact,
            (long long)calls, (long long)dpc, (unsigned long long)cr->input_seed,
            (unsigned long long)cr->case_seed);
        if (x && (rule || KW > 0 || x->group_size))
            for (int64_t g = 0; g < G; g++) {
                const fls_stats_rule r = grule[g];
                fprintf(stderr,
                        "[audit]   group %lld rule: min-p %g, top-k %lld, top-p %g, top-n-sigma %g, without "
                        "replacement K %lld, group size %lld: support %lld tokens (margins >= %.3g x safe)\n",
                        (long long)g, r.min_p, (long long)r.top_k, r.top_p, r.nsigma,
                        (long long)group_k(c, g), (long long)x->group_size, (long long)support[g],
                        worst_margin);
            }
        if (io->mode != FLS_IO_CALL)
            fprintf(stderr,
                    "[audit]   %d %s per call, cut and ordered by mt19937 seeded with case seed ^ call\n",
                    io->pieces, io->mode == FLS_IO_STREAM ? "chunks" : "shards");
        if (B <= 16) {
            fprintf(stderr, "[audit]   row seeds:");
            for (int64_t b = 0; b < B; b++)
                fprintf(stderr, " 0x%016llx", (unsigned long long)seeds[b]);
            fprintf(stderr, "\n");
        }
        for (int64_t g = 0; g < G; g++) {
            const double *p = ref + g * V;
            double pmax = 0.0;
            int64_t masked = 0;
            for (int64_t v = 0; v < V; v++) {
                pmax = p[v] > pmax ? p[v] : pmax;
                masked += p[v] == 0.0;
            }
            fprintf(stderr,
                    "[audit]   group %lld: T %g, max p %.4g, %lld zero-probability tokens; mass below",
                    (long long)g, (double)c->temps[g], pmax, (long long)masked);
            for (int k = 0; k < FLS_STATS_N_TAILS; k++)
                fprintf(stderr, " %g nats %.3g%s", fls_stats_tail_t[k],
                        fls_stats_tail_mass(p, V, fls_stats_tail_t[k]),
                        k + 1 < FLS_STATS_N_TAILS ? "," : "\n");
        }
    }
    snprintf(cr->err, sizeof cr->err, "device memory");
    if ((st = io_prepare(io)) != FLS_OK)
        goto done;

    fls_params p;
    fls_params_default(&p);
    p.method = c->method;
    p.draws = dpc;
    p.row_seeds = seeds;
    p.row_offsets = offsets;
    if (G > 1)
        p.temperature = temps; /* per-row temperatures */
    else
        p.temperature_value = c->temps[0];
    if (x) {
        p.group_size = x->group_size;
        if (rule && G > 1) { /* per-row parameters */
            p.row_min_p = rmin;
            p.row_top_k = rk;
            p.row_top_p = rtop;
            int ns = 0;
            for (int64_t g = 0; g < G; g++)
                ns |= x->nsigma[g] != 0.0;
            if (ns) {
                p.filter = "top-nsigma";
                p.row_filter_value = rns;
            }
        } else if (rule) {
            p.min_p = rmin[0];
            p.top_k = rk[0];
            p.top_p = rtop[0];
            if (rns[0] != 0.0) {
                p.filter = "top-nsigma";
                p.filter_value = rns[0];
            }
        }
        if (KW > 0) {
            p.without_replacement_k = KW;
            int per_row = 0;
            for (int64_t g = 0; g < G; g++)
                per_row |= group_k(c, g) != KW;
            if (per_row)
                p.row_without_replacement_k = rwr;
        }
    }
    double last = now_s();
    for (int64_t call = 0; call < calls; call++) {
        for (int64_t b = 0; b < B; b++)
            offsets[b] = (uint64_t)call;
        if (io->chunking)
            gsl_rng_set(io->chunking, (unsigned long)(cr->case_seed ^ (uint64_t)call));
        if ((st = io_sample(io, &p, B, tokens)) != FLS_OK) {
            fail(cr, "sampling failed (%s) at call %lld", st, (long long)call);
            if (cr->o->progress)
                fprintf(stderr, "[audit] %s: %s\n", c->name, cr->err);
            goto done;
        }
        for (int64_t b = 0; b < B; b++) {
            int64_t g = b % G;
            for (int64_t d = 0; d < dpc; d++) {
                const int64_t *tup = tokens + (b * dpc + d) * stride;
                if (tuples) {
                    const int64_t cl = fls_stats_pl_cell(tup, V, (int)KW);
                    if (cl < 0)
                        oor[g]++;
                    else {
                        counts[g * cells + cl]++;
                        ng[g]++;
                    }
                    continue;
                }
                int64_t t = tup[0];
                if (t < 0 || t >= V)
                    oor[g]++;
                else {
                    counts[g * V + t]++;
                    ng[g]++;
                }
                if (cond) {
                    double U[8], u[8];
                    const int kk = (int)(KW < 8 ? KW : 8);
                    for (int j = 0; j < kk; j++)
                        U[j] = cond_uniform(cr->case_seed, b, call * dpc + d, j);
                    int set = KW <= 8 ? fls_stats_pl_transform(ref + g * V, start + g * V, V, support[g], tup,
                                                               kk, (int)group_k(c, g), U, u)
                                      : -1;
                    if (set < 0) {
                        cimp++;
                        continue;
                    }
                    for (int j = 1; j < kk; j++)
                        if (u[j] >= 0.0) {
                            int cc = (int)(u[j] * K);
                            ccount[cc < K ? cc : K - 1]++;
                            ncond++;
                        }
                }
            }
        }
        if (cr->o->progress && now_s() - last > 10.0) {
            last = now_s();
            fprintf(stderr, "[audit] %s: call %lld/%lld, %.0f s\n", c->name, (long long)call + 1,
                    (long long)calls, last - cr->t0);
        }
    }

    /* the goodness of fit (over tokens, or over ordered tuples) */
    snprintf(cr->err, sizeof cr->err, "the test failed to run");
    fls_gof gof;
    fls_gof_init(&gof);
    for (int64_t g = 0; g < G; g++) {
        if ((st = fls_bins_build(&bins, gref + g * cells, cells, per_group, K)) != FLS_OK)
            goto done;
        st = fls_gof_add_counts(&gof, &bins, counts + g * cells, oor[g]);
        fls_bins_free(&bins);
        if (st != FLS_OK)
            goto done;
    }
    fls_gof_design seen;
    if ((st = fls_stats_design_at(gref, G, cells, cr->alpha, per_group, &seen)) != FLS_OK)
        goto done;
    fls_audit_row *row = &cr->rows[0];
    snprintf(row->kind, sizeof row->kind, "gof");
    row->chi2 = gof.impossible ? INFINITY : gof.chi2;
    row->dof = gof.dof + gof.n_exact;
    row->p = gof.p;
    row->pass = fls_gof_pass(&gof, cr->alpha);
    row->bins = gof.bins;
    row->min_mass = gof.min_mass;
    row->tv_caught = seen.tv;
    snprintf(row->note, sizeof row->note, "%s%s%s", tuples ? "ordered tuples: " : "",
             gof.dof ? "chi-square" : "",
             gof.n_exact ? (gof.dof ? " + exact binomial" : "exact binomial")
             : gof.dof   ? ""
                         : "impossible set only");
    if (cr->o->progress && gof.impossible)
        fprintf(stderr, "[audit] %s: %lld sample(s) on zero-probability or out-of-range %s\n", c->name,
                (long long)gof.impossible, tuples ? "tuples" : "tokens");

    /* the tail tests */
    if (c->tail)
        for (int k = 0; k < FLS_STATS_N_TAILS; k++) {
            fls_tail_result tr;
            if ((st = fls_stats_tail_test(ref, counts, ng, G, V, fls_stats_tail_t[k], cr->alpha, &tr)) !=
                FLS_OK)
                goto done;
            int64_t oor_all = 0;
            for (int64_t g = 0; g < G; g++)
                oor_all += oor[g];
            row = &cr->rows[1 + k];
            snprintf(row->kind, sizeof row->kind, "tail");
            row->tail_t = tr.t;
            row->tail_mass = tr.mass;
            row->expected = tr.expected;
            row->observed = (double)tr.observed;
            row->deficit_caught = tr.deficit;
            row->excess_caught = tr.excess;
            double var = tr.expected * (1.0 - tr.mass);
            row->chi2 = var > 0.0 ? (tr.observed - tr.expected) * (tr.observed - tr.expected) / var : 0.0;
            row->dof = 1;
            row->p = oor_all ? 0.0 : tr.p;
            row->pass = !oor_all && tr.p >= cr->alpha;
            snprintf(row->note, sizeof row->note, "exact %s%s", G > 1 ? "sum of binomials" : "binomial",
                     tr.bonferroni ? " (Bonferroni over groups)" : "");
        }
    /* without replacement over tokens: positions 2..K given the ones before */
    if (cond) {
        row = &cr->rows[1 + (c->tail ? FLS_STATS_N_TAILS : 0)];
        snprintf(row->kind, sizeof row->kind, "pl");
        if ((st = fls_audit_equal_cells(ccount, K, cimp, cr->alpha, row)) != FLS_OK)
            goto done;
        snprintf(row->note, sizeof row->note, "%lld conditional transforms (positions 2..K); %lld impossible",
                 (long long)ncond, (long long)cimp);
    }
    st = FLS_OK;
done:
    fls_bins_free(&bins);
    gsl_rng_free(rng);
    free(target);
    free(L);
    free(W);
    free(Hg);
    free(H);
    free(temps);
    free(ref);
    free(tref);
    free(start);
    free(lg);
    free(seeds);
    free(offsets);
    free(counts);
    free(oor);
    free(ng);
    free(tokens);
    free(rk);
    free(rwr);
    free(rmin);
    free(rtop);
    free(rns);
    return st;
}

static fls_status run_pairs(case_run *cr, case_io *io)
{
    const fls_audit_case *c = cr->c;
    const int64_t V = c->V, M = c->rows_per_group, V2 = V * V;
    const int K = FLS_STATS_MAX_BINS;
    const int per_row = c->kind == FLS_CASE_PAIRS_DRAW; /* pairs inside a row, else across two rows */
    const int64_t B = per_row ? M : 2 * M;
    fls_status st = FLS_ERR_OUT_OF_MEMORY;
    gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);
    float *target = malloc((size_t)V * sizeof(float)), *L = malloc((size_t)(B * V) * sizeof(float));
    double *p1 = malloc((size_t)V * sizeof(double)), *ref = malloc((size_t)V2 * sizeof(double));
    uint64_t *seeds = malloc((size_t)B * sizeof(uint64_t)), *offsets = malloc((size_t)B * sizeof(uint64_t));
    int64_t *counts = calloc((size_t)V2, sizeof(int64_t)), *tokens = NULL, oor = 0;
    fls_bins bins = {0};
    snprintf(cr->err, sizeof cr->err, "out of memory preparing the case");
    if (!rng || !target || !L || !p1 || !ref || !seeds || !offsets || !counts)
        goto done;
    gsl_rng_set(rng, (unsigned long)cr->input_seed);
    int64_t tie[3];
    int n_tie = 0;
    gen_logits(c, rng, target, tie, &n_tie);
    for (int64_t b = 0; b < B; b++)
        memcpy(L + b * V, target, (size_t)V * sizeof(float));
    io->L = (fls_matrix){L, FLS_DTYPE_F32, B, V, V};
    if ((st = fls_stats_probs_temperature_f32(target, V, c->temps[0], p1)) != FLS_OK)
        goto done;
    fls_stats_product(p1, V, p1, V, ref);

    fls_gof_design design;
    snprintf(cr->err, sizeof cr->err, "the design failed");
    if ((st = fls_stats_design(ref, 1, V2, cr->alpha, &design)) != FLS_OK)
        goto done;
    const int64_t N = design.N;
    const int64_t d = ceil_div(N, M); /* pairs per row pair */
    const int64_t draws = per_row ? 2 * d : d;
    cr->rows[0].draws = B * draws;
    st = FLS_ERR_OUT_OF_MEMORY;
    if (!(tokens = malloc((size_t)(B * draws) * sizeof(int64_t))))
        goto done;
    for (int64_t i = 0; i < M; i++) {
        if (c->kind == FLS_CASE_PAIRS_OFFSET) {
            /* one seed, offsets o and o + 1, o spread over all 64 bits */
            uint64_t s = fls_row_seed(cr->case_seed, (uint64_t)i);
            uint64_t o = splitmix64(cr->case_seed ^ (0x5bd1e995ull * (uint64_t)(i + 1)));
            seeds[2 * i] = seeds[2 * i + 1] = s;
            offsets[2 * i] = o;
            offsets[2 * i + 1] = o + 1;
        } else if (c->kind == FLS_CASE_PAIRS_SEED) {
            /* raw consecutive seeds, as a user numbering requests would pass them */
            seeds[2 * i] = cr->case_seed + 2 * (uint64_t)i;
            seeds[2 * i + 1] = cr->case_seed + 2 * (uint64_t)i + 1;
            offsets[2 * i] = offsets[2 * i + 1] = 0;
        } else {
            seeds[i] = fls_row_seed(cr->case_seed, (uint64_t)i);
            offsets[i] = 0;
        }
    }
    if (cr->o->progress)
        fprintf(stderr,
                "[audit] %s: V %lld, %lld pairs (%lld row pairs x %lld; %d bins), %s, input seed 0x%016llx, "
                "case seed 0x%016llx\n",
                c->name, (long long)V, (long long)(M * d), (long long)M, (long long)d, design.bins,
                c->kind == FLS_CASE_PAIRS_OFFSET
                    ? "rows 2i, 2i+1: seed fls_row_seed(case seed, i), offsets o_i, o_i + 1 with o_i "
                      "= splitmix64(case seed ^ 0x5bd1e995 (i + 1))"
                : c->kind == FLS_CASE_PAIRS_SEED
                    ? "rows 2i, 2i+1: raw seeds case seed + 2i, + 2i + 1, offset 0"
                    : "row i: seed fls_row_seed(case seed, i), pairs of draws (2k, 2k+1)",
                (unsigned long long)cr->input_seed, (unsigned long long)cr->case_seed);
    snprintf(cr->err, sizeof cr->err, "device memory");
    if ((st = io_prepare(io)) != FLS_OK)
        goto done;
    fls_params p;
    fls_params_default(&p);
    p.draws = draws;
    p.row_seeds = seeds;
    p.row_offsets = offsets;
    p.temperature_value = c->temps[0];
    if ((st = io_sample(io, &p, B, tokens)) != FLS_OK) {
        snprintf(cr->err, sizeof cr->err, "sampling failed (%s)", fls_status_string(st));
        goto done;
    }
    for (int64_t i = 0; i < M; i++)
        for (int64_t k = 0; k < d; k++) {
            int64_t x = per_row ? tokens[i * draws + 2 * k] : tokens[(2 * i) * draws + k];
            int64_t y = per_row ? tokens[i * draws + 2 * k + 1] : tokens[(2 * i + 1) * draws + k];
            if (x < 0 || x >= V || y < 0 || y >= V)
                oor++;
            else
                counts[x * V + y]++;
        }
    snprintf(cr->err, sizeof cr->err, "the test failed to run");
    if ((st = fls_bins_build(&bins, ref, V2, M * d, K)) != FLS_OK)
        goto done;
    fls_gof gof;
    fls_gof_init(&gof);
    if ((st = fls_gof_add_counts(&gof, &bins, counts, oor)) != FLS_OK)
        goto done;
    fls_gof_design seen;
    if ((st = fls_stats_design_at(ref, 1, V2, cr->alpha, M * d, &seen)) != FLS_OK)
        goto done;
    fls_audit_row *row = &cr->rows[0];
    snprintf(row->kind, sizeof row->kind, "pairs");
    row->chi2 = gof.impossible ? INFINITY : gof.chi2;
    row->dof = gof.dof + gof.n_exact;
    row->p = gof.p;
    row->pass = fls_gof_pass(&gof, cr->alpha);
    row->bins = gof.bins;
    row->min_mass = gof.min_mass;
    row->tv_caught = seen.tv;
    snprintf(row->note, sizeof row->note, "pairs against p x p");
done:
    fls_bins_free(&bins);
    gsl_rng_free(rng);
    free(target);
    free(L);
    free(p1);
    free(ref);
    free(seeds);
    free(offsets);
    free(counts);
    free(tokens);
    return st;
}

fls_status fls_audit_run_case(fls_context_t *ctx, const fls_audit_options *o, double alpha, size_t i,
                              fls_audit_row *rows)
{
    if (!ctx || !o || !rows)
        return FLS_ERR_NULL;
    if (i >= N_CASES)
        return FLS_ERR_PARAM;
    const fls_audit_case *c = &cases[i];
    const int n_rows = fls_audit_case_tests(i);
    case_run cr;
    memset(&cr, 0, sizeof cr);
    cr.c = c;
    cr.o = o;
    cr.alpha = alpha;
    cr.input_seed = name_hash(c->name);
    cr.case_seed = splitmix64(o->seed ^ cr.input_seed);
    cr.t0 = now_s();
    cr.rows = rows;
    case_io io;
    memset(&io, 0, sizeof io);
    io.ctx = ctx;
    io.cuda = fls_context_engine(ctx) == FLS_ENGINE_CUDA;
    io.fused = c->fused;
    const char *fault = getenv("FLS_AUDIT_FAULT");
    io.fault = fault && (!strcmp(fault, c->name) || !strcmp(fault, "*"));
    io.mode = c->ext ? c->ext->io : FLS_IO_CALL;
    io.pieces = c->ext ? c->ext->pieces : 0;
    if (io.mode != FLS_IO_CALL && !(io.chunking = gsl_rng_alloc(gsl_rng_mt19937))) {
        for (int r = 0; r < n_rows; r++)
            fls_audit_row_error(&rows[r], FLS_ERR_OUT_OF_MEMORY, "out of memory");
        return FLS_ERR_OUT_OF_MEMORY;
    }

    for (int r = 0; r < n_rows; r++) {
        fls_audit_row *row = &rows[r];
        memset(row, 0, sizeof *row);
        if (r == 0)
            snprintf(row->test, sizeof row->test, "%s", c->name);
        else if (c->tail && r <= FLS_STATS_N_TAILS)
            snprintf(row->test, sizeof row->test, "%.48s/tail%d", c->name, (int)fls_stats_tail_t[r - 1]);
        else
            snprintf(row->test, sizeof row->test, "%.48s/pl-cond", c->name);
        snprintf(row->engine, sizeof row->engine, "%s", io.cuda ? "cuda" : "cpu");
        row->V = c->V;
        row->alpha = alpha;
        row->p = NAN;
        row->chi2 = NAN;
        row->deficit_caught = row->excess_caught = INFINITY;
        row->tv_caught = INFINITY;
    }
    fls_status st = c->kind == FLS_CASE_GOF ? run_gof(&cr, &io) : run_pairs(&cr, &io);
    io_release(&io);
    if (io.chunking)
        gsl_rng_free(io.chunking);
    if (st != FLS_OK) {
        for (int r = 0; r < n_rows; r++)
            fls_audit_row_error(&rows[r], st, cr.err);
        return st;
    }
    if (o->progress) {
        fprintf(stderr, "[audit] %s: %.1f s\n", c->name, now_s() - cr.t0);
        for (int r = 0; r < n_rows; r++)
            fls_audit_print_row(stderr, &rows[r]);
    }
    return FLS_OK;
}
