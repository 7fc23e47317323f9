/*
 * registry.h — every filter of the rule family, in the order they apply
 * (vLLM's: min-p, top-k, top-p; then the rules added since). C, C++, CUDA.
 *
 * A filter is a descriptor (fls_filter_desc): its name, its parameter's
 * range and "off" value, what it needs from the row (FLS_NEED_*, and how
 * much of the top list, FLS_LIST_*), and its functions off / valid / cut,
 * which its header defines as fls_<rule>_off, fls_<rule>_valid and
 * fls_<rule>_cut beside the macros FLS_<RULE>_NAME, _RANGE, _OFF, _NEEDS,
 * _LIST, _INTEGER and _EXAMPLE. The registry is the list FLS_FILTERS below; the array fls_filters
 * and the dispatching functions are made from it, so engines, the API, the
 * command line, the bindings, the audit and the tests plan and loop from
 * descriptors and never name a rule.
 *
 * Adding a rule (docs/RULES.md walks through epsilon): its header in
 * variants/, one line in FLS_FILTERS, its exact pmf in stats/rules.c, its
 * docs.
 */
#ifndef FLS_VARIANT_REGISTRY_H
#define FLS_VARIANT_REGISTRY_H

#include "variants/epsilon.h"
#include "variants/filters.h"
#include "variants/top_nsigma.h"

/* X(ID, rule): FLS_FILTER_<ID> is the rule's id, fls_<rule>_* its functions
 * and FLS_<ID>_* its descriptor's macros. The order is the order of
 * application. */
#define FLS_FILTERS_PRODUCT(X)                                                                               \
    X(MIN_P, min_p)                                                                                          \
    X(TOP_K, top_k)                                                                                          \
    X(TOP_P, top_p)                                                                                          \
    X(TOP_NSIGMA, top_nsigma)                                                                                \
    X(EPSILON, epsilon)
#define FLS_FILTERS(X) FLS_FILTERS_PRODUCT(X) FLS_FILTERS_EXTRA(X)

/* Test builds only (meson -Dprobe_rule=true): a header that defines
 * FLS_FILTERS_EXTRA(X) appends test rules (tests/probe/probe_rule.h). */
#ifdef FLS_REGISTRY_EXTRA
#include FLS_REGISTRY_EXTRA
#else
#define FLS_FILTERS_EXTRA(X)
#endif

#define FLS_FILTER_ENUM_(ID, rule) FLS_FILTER_##ID,
typedef enum fls_filter_id { FLS_FILTERS(FLS_FILTER_ENUM_) FLS_FILTER_COUNT } fls_filter_id;
#undef FLS_FILTER_ENUM_

/* The product's rules: ids 0 .. FLS_FILTER_PRODUCT_COUNT - 1 (a test build's
 * extra rules follow them). Tests with a table per rule size it by this. */
#define FLS_FILTER_ONE_(ID, rule) +1
enum { FLS_FILTER_PRODUCT_COUNT = 0 FLS_FILTERS_PRODUCT(FLS_FILTER_ONE_) };
#undef FLS_FILTER_ONE_

typedef struct fls_filter_desc {
    const char *name;  /* fls_params.filter / `--filter NAME=VALUE` */
    const char *range; /* the parameter's range, for messages */
    double off;        /* the value that turns it off */
    unsigned needs;    /* FLS_NEED_*: what the engine gathers for it */
    int list;          /* FLS_LIST_*: how much of the top list its cut reads */
    int integer;       /* its parameter is a count (parsed as an integer) */
    double example;    /* a typical value (messages, and the tests that loop over the registry) */
} fls_filter_desc;

#define FLS_FILTER_DESC_(ID, rule)                                                                           \
    {FLS_##ID##_NAME, FLS_##ID##_RANGE,   FLS_##ID##_OFF,    FLS_##ID##_NEEDS,                               \
     FLS_##ID##_LIST, FLS_##ID##_INTEGER, FLS_##ID##_EXAMPLE},
static const fls_filter_desc fls_filters[FLS_FILTER_COUNT] = {FLS_FILTERS(FLS_FILTER_DESC_)};
#undef FLS_FILTER_DESC_

#define FLS_FILTER_CASE_OFF_(ID, rule)                                                                       \
    case FLS_FILTER_##ID:                                                                                    \
        return fls_##rule##_off(value);
FLS_HD FLS_BOOL fls_filter_off(int id, double value)
{
    switch (id) {
        FLS_FILTERS(FLS_FILTER_CASE_OFF_)
    }
    return 1;
}
#undef FLS_FILTER_CASE_OFF_

#define FLS_FILTER_CASE_VALID_(ID, rule)                                                                     \
    case FLS_FILTER_##ID:                                                                                    \
        return fls_##rule##_valid(value);
FLS_HD FLS_BOOL fls_filter_valid(int id, double value)
{
    switch (id) {
        FLS_FILTERS(FLS_FILTER_CASE_VALID_)
    }
    return 0;
}
#undef FLS_FILTER_CASE_VALID_

#define FLS_FILTER_CASE_CUT_(ID, rule)                                                                       \
    case FLS_FILTER_##ID:                                                                                    \
        return fls_##rule##_cut(st, value, c_prev, c);
FLS_HD int fls_filter_cut(int id, const fls_filter_stats *st, double value, float c_prev, float *c)
{
    switch (id) {
        FLS_FILTERS(FLS_FILTER_CASE_CUT_)
    }
    return FLS_CUT_UNDECIDED;
}
#undef FLS_FILTER_CASE_CUT_

/* The descriptor's needs and list kind, usable in device code too. */
#define FLS_FILTER_CASE_NEEDS_(ID, rule)                                                                     \
    case FLS_FILTER_##ID:                                                                                    \
        return FLS_##ID##_NEEDS;
FLS_HD unsigned fls_filter_needs(int id)
{
    switch (id) {
        FLS_FILTERS(FLS_FILTER_CASE_NEEDS_)
    }
    return 0u;
}
#undef FLS_FILTER_CASE_NEEDS_

#define FLS_FILTER_CASE_LIST_(ID, rule)                                                                      \
    case FLS_FILTER_##ID:                                                                                    \
        return FLS_##ID##_LIST;
FLS_HD int fls_filter_list(int id)
{
    switch (id) {
        FLS_FILTERS(FLS_FILTER_CASE_LIST_)
    }
    return FLS_LIST_NONE;
}
#undef FLS_FILTER_CASE_LIST_

/* The id of a registry rule by name, or -1. */
static inline int fls_filter_lookup(const char *name)
{
    for (int i = 0; name && i < FLS_FILTER_COUNT; i++) {
        const char *a = fls_filters[i].name, *b = name;
        while (*a && *a == *b)
            a++, b++;
        if (*a == 0 && *b == 0)
            return i;
    }
    return -1;
}

/* ---- A row's plan, from its values (value[id], off ones skipped) ---- */

/* FLS_NEED_* of the filters a row uses. */
FLS_HD unsigned fls_filter_row_needs(const double *value)
{
    unsigned needs = 0u;
    for (int id = 0; id < FLS_FILTER_COUNT; id++)
        if (!fls_filter_off(id, value[id]))
            needs |= fls_filter_needs(id);
    return needs;
}

/* Whether any filter of the row is on. */
FLS_HD FLS_BOOL fls_filter_row_active(const double *value)
{
    for (int id = 0; id < FLS_FILTER_COUNT; id++)
        if (!fls_filter_off(id, value[id]))
            return 1;
    return 0;
}

/* Whether the row's decision needs its sum of exp(x - m) over every finite
 * token (fls_filter_stats.lse_s): a filter that needs it always
 * (FLS_NEED_SUM), or one that needs its support's sum (FLS_NEED_SUPPORT_SUM)
 * where no filter before it is on. list_sums: the engine sums the top list
 * where an earlier filter cut (else the row's sum serves every such
 * filter). */
FLS_HD FLS_BOOL fls_filter_row_needs_sum(const double *value, FLS_BOOL list_sums)
{
    FLS_BOOL earlier = 0;
    for (int id = 0; id < FLS_FILTER_COUNT; id++) {
        if (fls_filter_off(id, value[id]))
            continue;
        const unsigned n = fls_filter_needs(id);
        if ((n & FLS_NEED_SUM) || ((n & FLS_NEED_SUPPORT_SUM) && (!list_sums || !earlier)))
            return 1;
        earlier = 1;
    }
    return 0;
}

/* The top list a row's filters read: *exact = the largest list length that
 * a FLS_LIST_BY_VALUE filter asks for (0: none, or one above max_len, which
 * the second pass decides); *bounded = such a filter is on (its support lies
 * within its list); *open = a FLS_LIST_OPEN filter is on (it reads the list
 * as far as its support goes). */
FLS_HD void fls_filter_row_list(const double *value, double max_len, int64_t *exact, FLS_BOOL *bounded,
                                FLS_BOOL *open)
{
    *exact = 0;
    *bounded = 0;
    *open = 0;
    for (int id = 0; id < FLS_FILTER_COUNT; id++) {
        if (fls_filter_off(id, value[id]))
            continue;
        const int l = fls_filter_list(id);
        if (l == FLS_LIST_BY_VALUE) {
            *bounded = 1;
            if (value[id] > (double)*exact && value[id] <= max_len)
                *exact = (int64_t)value[id];
        } else if (l == FLS_LIST_OPEN) {
            *open = 1;
        }
    }
}

/* The smallest list length that bounds the row's support (a FLS_LIST_BY_VALUE
 * filter's value), or -1 when none does. */
FLS_HD double fls_filter_row_bound(const double *value)
{
    double k = -1.0;
    for (int id = 0; id < FLS_FILTER_COUNT; id++)
        if (!fls_filter_off(id, value[id]) && fls_filter_list(id) == FLS_LIST_BY_VALUE &&
            (k < 0.0 || value[id] < k))
            k = value[id];
    return k;
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
