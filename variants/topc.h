/*
 * topc.h — a row's C largest tempered logits (draw-independent), the
 * statistic the truncation filters (top-k, top-p) decide on. C, C++, CUDA.
 *
 * The C best (x, v) in the order "larger x first, lower index first on
 * ties" (the order every filter ranks tokens in), kept as a binary heap
 * whose root is the worst kept entry, plus `dropped`: the largest x of any
 * finite token that is not in the list (rejected or evicted). So the list
 * holds EVERY token with x > dropped, and is complete for a support
 * {x >= c} exactly when c > dropped (tokens at x == dropped may be missing).
 * Merging two lists (push every entry of one into the other) gives the list
 * of the union, whatever the partition or order: the filters' decisions
 * never depend on tiling or threads.
 */
#ifndef FLS_VARIANT_TOPC_H
#define FLS_VARIANT_TOPC_H

#include "variants/rule.h"

typedef struct fls_top_entry {
    float x;
    uint32_t pad_;
    int64_t v;
} fls_top_entry;

/* The list's header; its cap entries follow it in memory (fls_topc_entries). */
typedef struct fls_topc {
    int64_t n, cap;
    float dropped; /* -inf: nothing dropped, the list is the whole row */
    uint32_t pad_;
    uint64_t pad2_;
} fls_topc;

FLS_HD size_t fls_topc_bytes(int64_t cap)
{
    return sizeof(fls_topc) + (size_t)cap * sizeof(fls_top_entry);
}

FLS_HD fls_top_entry *fls_topc_entries(fls_topc *t)
{
    return (fls_top_entry *)(t + 1);
}

FLS_HD const fls_top_entry *fls_topc_entries_c(const fls_topc *t)
{
    return (const fls_top_entry *)(t + 1);
}

/* a before b in rank order: larger x, then lower index */
FLS_HD FLS_BOOL fls_rank_before(float xa, int64_t va, float xb, int64_t vb)
{
    return xa > xb || (xa == xb && va < vb);
}

FLS_HD void fls_topc_init(fls_topc *t, int64_t cap)
{
    t->n = 0;
    t->cap = cap;
    t->dropped = -INFINITY;
    t->pad_ = 0;
    t->pad2_ = 0;
}

/* heap order: the root is the LAST in rank order (the first to evict) */
FLS_HD void fls_topc_sift_down_(fls_top_entry *e, int64_t n, int64_t i)
{
    for (;;) {
        int64_t l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && fls_rank_before(e[w].x, e[w].v, e[l].x, e[l].v))
            w = l;
        if (r < n && fls_rank_before(e[w].x, e[w].v, e[r].x, e[r].v))
            w = r;
        if (w == i)
            return;
        fls_top_entry tmp = e[i];
        e[i] = e[w];
        e[w] = tmp;
        i = w;
    }
}

FLS_HD void fls_topc_push(fls_topc *t, float x, int64_t v)
{
    if (!(x > -INFINITY))
        return; /* masked tokens are never ranked */
    fls_top_entry *e = fls_topc_entries(t);
    if (t->n < t->cap) {
        int64_t i = t->n++;
        e[i].x = x;
        e[i].pad_ = 0;
        e[i].v = v;
        while (i > 0) { /* sift up */
            int64_t p = (i - 1) / 2;
            if (!fls_rank_before(e[p].x, e[p].v, e[i].x, e[i].v))
                break;
            fls_top_entry tmp = e[i];
            e[i] = e[p];
            e[p] = tmp;
            i = p;
        }
        return;
    }
    if (t->cap == 0 || !fls_rank_before(x, v, e[0].x, e[0].v)) {
        t->dropped = x > t->dropped ? x : t->dropped;
        return;
    }
    t->dropped = e[0].x > t->dropped ? e[0].x : t->dropped;
    e[0].x = x;
    e[0].v = v;
    fls_topc_sift_down_(e, t->n, 0);
}

/* n tokens v0.. with tempered logits x: one compare per token once full */
FLS_HD void fls_topc_push_span(fls_topc *t, const float *x, int64_t v0, int64_t n)
{
    const fls_top_entry *e = fls_topc_entries(t);
    for (int64_t i = 0; i < n; i++) {
        if (t->n == t->cap && t->cap > 0 && !(x[i] >= e[0].x)) {
            if (x[i] > t->dropped)
                t->dropped = x[i];
            continue;
        }
        fls_topc_push(t, x[i], v0 + i);
    }
}

FLS_HD void fls_topc_merge(fls_topc *a, const fls_topc *b)
{
    const fls_top_entry *e = fls_topc_entries_c(b);
    for (int64_t i = 0; i < b->n; i++)
        fls_topc_push(a, e[i].x, e[i].v);
    a->dropped = b->dropped > a->dropped ? b->dropped : a->dropped;
}

/* Sorts the list into rank order (destroys the heap; call once, at the end). */
FLS_HD void fls_topc_sort(fls_topc *t)
{
    fls_top_entry *e = fls_topc_entries(t);
    for (int64_t n = t->n; n > 1; n--) { /* heapsort: the root (the last in rank order) to the end */
        fls_top_entry tmp = e[0];
        e[0] = e[n - 1];
        e[n - 1] = tmp;
        fls_topc_sift_down_(e, n - 1, 0);
    }
}

#endif /* FLS_VARIANT_TOPC_H */
