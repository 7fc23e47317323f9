/*
 * registry.h — every filter of the rule family, in the order they apply
 * (vLLM's: min-p, top-k, top-p; then the rules added since). C, C++, CUDA.
 *
 * Adding a rule (docs/RULES.md walks through top-n-sigma): write its header
 * (off / valid / cut, as variants/top_nsigma.h), then add one id below, one
 * row to fls_filter_table and one case to fls_filter_cut. Engines, the API
 * (fls_params.filter names a registry rule) and the command line
 * (`--filter NAME=VALUE`) pick it up from here.
 */
#ifndef FLS_VARIANT_REGISTRY_H
#define FLS_VARIANT_REGISTRY_H

#include "filters.h"
#include "top_nsigma.h"

typedef enum fls_filter_id {
    FLS_FILTER_MIN_P = 0,
    FLS_FILTER_TOP_K = 1,
    FLS_FILTER_TOP_P = 2,
    FLS_FILTER_TOP_NSIGMA = 3,
    FLS_FILTER_COUNT
} fls_filter_id;

typedef struct fls_filter_info {
    const char *name;  /* fls_params.filter / `--filter NAME=VALUE` */
    unsigned needs;    /* FLS_NEED_* beyond the max and the log-sum-exp */
    const char *range; /* for messages */
} fls_filter_info;

static const fls_filter_info fls_filter_table[FLS_FILTER_COUNT] = {
    {"min-p", 0u, "in [0, 1], 0 = off"},
    {"top-k", FLS_NEED_TOP, "an integer >= 0, 0 = off"},
    {"top-p", FLS_NEED_TOP, "in (0, 1], 1 = off"},
    {"top-nsigma", FLS_NEED_MOMENTS, "finite, >= 0, 0 = off"},
};

FLS_HD FLS_BOOL fls_filter_off(int id, double value)
{
    switch (id) {
    case FLS_FILTER_MIN_P:
        return fls_min_p_off(value);
    case FLS_FILTER_TOP_K:
        return fls_top_k_off(value);
    case FLS_FILTER_TOP_P:
        return fls_top_p_off(value);
    case FLS_FILTER_TOP_NSIGMA:
        return fls_top_nsigma_off(value);
    }
    return 1;
}

FLS_HD FLS_BOOL fls_filter_valid(int id, double value)
{
    switch (id) {
    case FLS_FILTER_MIN_P:
        return fls_min_p_valid(value);
    case FLS_FILTER_TOP_K:
        return fls_top_k_valid(value);
    case FLS_FILTER_TOP_P:
        return fls_top_p_valid(value);
    case FLS_FILTER_TOP_NSIGMA:
        return fls_top_nsigma_valid(value);
    }
    return 0;
}

FLS_HD int fls_filter_cut(int id, const fls_filter_stats *st, double value, float c_prev, float *c)
{
    switch (id) {
    case FLS_FILTER_MIN_P:
        return fls_min_p_cut(st, value, c_prev, c);
    case FLS_FILTER_TOP_K:
        return fls_top_k_cut(st, value, c_prev, c);
    case FLS_FILTER_TOP_P:
        return fls_top_p_cut(st, value, c_prev, c);
    case FLS_FILTER_TOP_NSIGMA:
        return fls_top_nsigma_cut(st, value, c_prev, c);
    }
    return FLS_CUT_UNDECIDED;
}

/* The id of a registry rule by name, or -1. */
static inline int fls_filter_lookup(const char *name)
{
    for (int i = 0; name && i < FLS_FILTER_COUNT; i++) {
        const char *a = fls_filter_table[i].name, *b = name;
        while (*a && *a == *b)
            a++, b++;
        if (*a == 0 && *b == 0)
            return i;
    }
    return -1;
}

/* The support cutoff of a row: the filters in registry order (value[id],
 * off ones skipped). FLS_CUT_UNDECIDED when a filter cannot decide from st. */
FLS_HD int fls_filter_chain(const fls_filter_stats *st, const double *value, float *c)
{
    float cut = -INFINITY;
    if (st->m == -INFINITY) {
        *c = cut;
        return FLS_CUT_OK;
    }
    for (int id = 0; id < FLS_FILTER_COUNT; id++) {
        if (fls_filter_off(id, value[id]))
            continue;
        float next;
        if (fls_filter_cut(id, st, value[id], cut, &next) != FLS_CUT_OK)
            return FLS_CUT_UNDECIDED;
        cut = next;
    }
    *c = cut;
    return FLS_CUT_OK;
}

#endif /* FLS_VARIANT_REGISTRY_H */
