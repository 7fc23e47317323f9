/*
 * fls_dtype.h — element sizes of the dtypes, for the engines (a static
 * inline, so the CPU engine and its SIMD paths need nothing from api.c).
 */
#ifndef FLS_DTYPE_H
#define FLS_DTYPE_H

#include "flashsample.h"

#include <stddef.h>

/* Bytes of one element of dtype, 0 for an unknown dtype. */
static inline size_t fls_dtype_bytes(fls_dtype dtype)
{
    switch (dtype) {
    case FLS_DTYPE_F32:
        return 4;
    case FLS_DTYPE_F16:
    case FLS_DTYPE_BF16:
        return 2;
    }
    return 0;
}

#endif /* FLS_DTYPE_H */
