/*
 * rules.cuh — the rule family on the CUDA engine (kernels/rules.cu): the
 * device form of the CPU engine's one-pass statistics, over fp32 logits in
 * device memory (the caller's, or a block of rows the engine computed with
 * cuBLAS). The semantics are the headers of variants/ (topc.h, stair.h,
 * filters.h, registry.h), called from device code; nothing is restated.
 *
 * A row is cut into P parts of S tokens; one warp folds a part into
 *   - its log-sum-exp partial and moments (double) and its input errors,
 *   - its top list (fls_topc, capacity top_cap; none when 0),
 *   - one K-staircase per draw of the pass (fls_stair, capacity stair_cap),
 * with the contract's noise. Parts merge in a fixed binary tree (the lists
 * and staircases are partition-independent; the partials' rounding is the
 * tree's). Then one thread per row runs the filter chain on the merged
 * statistics (fls_filter_chain): a cutoff, or "undecided" (the engine
 * decides those rows from the row's full logits on the host with the CPU
 * engine's code, fls_ref_cut_lse), and one thread per (row, draw)
 * selects the K best keys of the support from its staircase. A staircase
 * that overflowed sends its row to the CPU engine's exact reference.
 *
 * That is the staircase path. The default is the threshold-first path
 * (fls_rule_launch_fast_*, below): the same decision from statistics with no
 * per-token state, then noise only on the support.
 */
#ifndef FLS_RULES_CUH
#define FLS_RULES_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "lib/front/internal.h"
#include "variants/stair.h"
#include "variants/topc.h"

/* A part's (then, merged, a row's) partial statistics. */
struct fls_rpart {
    double lse_m, lse_s; /* log-sum-exp partial of the finite tempered logits */
    double n, mean, m2;  /* their moments (when a filter needs them) */
    unsigned bad;        /* FLS_RBAD_* */
    unsigned pad_;
};

#define FLS_RBAD_NAN  1u /* a NaN or +inf logit */
#define FLS_RBAD_TEMP 2u /* a finite logit whose l / T overflows */

/* A row's state after the decision (fls_rule_decide). */
enum fls_rcode : int {
    FLS_RC_OK = 0,         /* cut and lse hold the row's cutoff and support log-sum-exp */
    FLS_RC_SECOND = 1,     /* the statistics cannot decide: the full row decides (host) */
    FLS_RC_NAN = 2,        /* a NaN or +inf logit */
    FLS_RC_TEMP = 3,       /* l / T overflowed */
    FLS_RC_ALL_MASKED = 4, /* no finite logit, or an empty selection */
    FLS_RC_OVERFLOW = 5,   /* a staircase of the row overflowed: the exact reference decides every draw */
    FLS_RC_PENDING = 6,    /* threshold-first path: the row waits for its top list */
};

/* One block of rows [r0, r0 + nb) of a call: device pointers. */
struct fls_rule_dev {
    const float *L; /* logits of row r0 + i at L + i * ldl */
    int64_t ldl;
    int nb;          /* rows in the block */
    int r0;          /* the block's first row in the call */
    int64_t V;       /* vocabulary */
    int P;           /* states per row in global memory (one per block in shared-memory mode) */
    int Pw;          /* warp parts per row: warp part p folds tokens [p S, (p + 1) S) */
    int64_t S;       /* tokens per warp part (a multiple of 64) */
    int rw;          /* warps per block */
    int smem;        /* the warps' states live in shared memory and merge in the block first */
    int64_t top_cap; /* 0: no top list */
    int32_t stair_cap;
    int64_t K;        /* tokens per draw in the output */
    int moments;      /* a filter needs the moments */
    int need_s;       /* the row's sum is needed (fls_filter_row_needs_sum, logsumexp / logprobs); else
                         only the max */
    const float *gup; /* the Gumbel bound table (fls_gumbel_bound.h, device) or NULL: every key exact */
    int want_lse;
    int nd;                     /* draws of the pass */
    uint32_t draw0;             /* the call's draw index of the pass's first draw */
    uint32_t first_draw;        /* the noise's draw index of the call's draw 0 */
    int64_t draws;              /* the call's draws */
    const fls_row_params *rows; /* [B] (the call's) */
    const fls_row_rule *rule;   /* [B] */
    fls_rpart *part;            /* [nb * P] */
    char *top;                  /* [nb * P] lists of fls_topc_bytes(top_cap) */
    char *stair;                /* [(nb * P) * nd] staircases of fls_stair_bytes(stair_cap) */
    float *cut;                 /* [B] */
    double *lse;                /* [B] */
    int *code;                  /* [B] fls_rcode */
    int32_t *pick;              /* [nb * nd * K] */
    float *px;                  /* [nb * nd * K] */
    int64_t *pv;                /* [nb * nd * K] */
    int64_t *tok;               /* [B * draws * K] staged tokens */
    float *lp;                  /* [B * draws * K] staged log-probabilities */
    /* the threshold-first path (fls_rule_launch_fast_*; P = nchunk there) */
    int nchunk;               /* chunks (blocks) per row */
    int vec;                  /* rows 16-byte aligned (L and ldl): loads of 4 logits */
    int cf;                   /* sub-chunks of FLS_FCK tokens per chunk */
    int gsz;                  /* tokens per group maximum: 64 to 2048 */
    int M;                    /* group maxima per row */
    float *gmax;              /* [nb * M] */
    float *thr;               /* [nb] the candidates' threshold */
    unsigned *ccount;         /* [nb] */
    unsigned long long *cand; /* [nb * FLS_FCCAP] candidates: ordered x, then ~v */
    fls_stair_entry *sel;     /* [nb * draws * nsel * K] each chunk's (CTA's) K best keys of the support */
    double *lsep;             /* [nb * nchunk] each chunk's sum of exp(x - m) over the support */
    int *lsedev;              /* [B] the support's log-sum-exp is summed on the device */
    int *nsup;                /* [nb] >= 0: the support is the first nsup of the sorted candidates;
                                 -1: the select pass reads the row */
    /* the matmul's 64-token tables (fls_launch_wgmma_logits), or NULL: row i's
     * group q at i * m64 + q. With them the collect and select kernels read
     * only the groups whose maximum reaches their threshold, and (gfold:
     * no need_s; the moments, where needed, in gmo) the row kernel folds the
     * statistics from them and the statistics pass is not run */
    const float *g64, *gab;
    const double *gmo; /* [nb * m64 * 3] each group's count, mean and m2 (fls_launch_wgmma_logits) */
    int64_t m64;
    int gfold;
    int ldraw; /* the list kernel draws its rows (fls_rule_launch_fast_decide) */
    int wkeys; /* the matmul kept the K best keys of each CTA (fls_wg_rule_extra): no select pass */
    int nsel;  /* entries per (row, draw) in sel: nchunk (select pass), or the matmul's CTAs (wkeys) */
    int pdl;   /* the threshold-first path's kernels after the first are launched as programmatic
                  dependents (fls_pdl_wait): each may start while the one before it ends */
};

/* The threshold-first path's sizes: tokens per chunk (one block), the
 * candidates a row may hold for its top list, the largest top list and K. */
#define FLS_FCK   2048
#define FLS_FCCAP 8192
#define FLS_FTOP  2048
#define FLS_FKMAX 8

/* Shared memory a block may take (the H200 allows 227 KB; leave room). */
#define FLS_RSMEM_MAX (200 << 10)
/* The bytes of one warp's states: its list (first pass) and its nd staircases. */
static inline __host__ __device__ size_t fls_rule_warp_bytes(const fls_rule_dev &d, int first)
{
    return (first && d.top_cap > 0 ? fls_topc_bytes(d.top_cap) : 0) +
           (size_t)d.nd * fls_stair_bytes(d.stair_cap);
}

/* The parts of a pass (first: also the statistics; later passes only the
 * staircases), their merge, and (first pass) the decision. */
cudaError_t fls_rule_launch_fold(const fls_rule_dev &d, int first, cudaStream_t st);
/* Each (row, draw) of the pass from its staircase, for rows decided. */
cudaError_t fls_rule_launch_select(const fls_rule_dev &d, cudaStream_t st);
/*
 * The threshold-first path (rows whose K <= FLS_FKMAX and top list <=
 * FLS_FTOP): no per-token state. One pass folds each chunk's statistics
 * (and group maxima); per row, the merge and, when a top list is needed,
 * the C-th largest group maximum t (a lower bound of the row's C-th value,
 * so {x >= t} holds the list), the tokens x >= t collected and sorted into
 * the exact top list; the decision (fls_filter_chain) as above. Then only
 * the support {x >= cut} is drawn: each chunk's K best keys per draw, then
 * per (row, draw) the K best of those (the staircase's answer, computed
 * directly). A row with more than FLS_FCCAP candidates (massive ties) goes
 * to the host like an undecided one.
 */
cudaError_t fls_rule_launch_fast_decide(const fls_rule_dev &d, cudaStream_t st);
/* The select pass's resident blocks per multiprocessor at this K (its
 * registers decide it: 5 at K = 1, 3 at K <= 4 on sm_90), 0 if unknown. */
int fls_rule_select_blocks_per_sm(int64_t K);
cudaError_t fls_rule_launch_fast_select(const fls_rule_dev &d, cudaStream_t st);

/* When every code of the call's B rows is FLS_RC_OK: otok[q] = tok[q] and
 * (olp not NULL) olp[q] = lp[q] for q < n, (olse not NULL) olse[b] =
 * (float)lse[b]; otherwise nothing is written and, when sticky is not NULL
 * (an asynchronous call), the call's first error goes there (fls_status_code;
 * FLS_SC_UNSUPPORTED for rows only the host can decide). tflag (rows packed
 * from device arrays) not 0: a temperature out of range, FLS_SC_TEMPERATURE;
 * pflag not 0 (kernels/mods.cu): a mask, bias or penalty value, FLS_SC_PARAM.
 * pdl: launched as a programmatic dependent of the kernel before it. */
cudaError_t fls_rule_launch_commit(const int *code, int B, const int64_t *tok, const float *lp,
                                   const double *lse, int64_t n, int64_t *otok, float *olp, float *olse,
                                   unsigned *sticky, const unsigned *tflag, const unsigned *pflag, int pdl,
                                   cudaStream_t st);

/* dst[b] = r for the B rows (the rule values of a captured call). */
cudaError_t fls_rule_launch_fill(fls_row_rule *dst, int B, const fls_row_rule &r, cudaStream_t st);

/* out[i] = (float)in[i] for n values. */
cudaError_t fls_rule_launch_to_float(const double *in, float *out, int64_t n, cudaStream_t st);

#endif /* FLS_RULES_CUH */
