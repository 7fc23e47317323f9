/*
 * flashsample_status.h — the status codes of every flashsample call
 * (fls_status), on their own so that the rule headers of variants/ (which
 * compile as C and CUDA and know no engine) share them without the public
 * API. Included by flashsample.h; installed beside it.
 */
#ifndef FLASHSAMPLE_STATUS_H
#define FLASHSAMPLE_STATUS_H

/* Status codes: 0 is success, negative values are errors. */
typedef enum fls_status {
    FLS_OK = 0,
    FLS_ERR_NULL = -1,         /* a required pointer is NULL */
    FLS_ERR_ALIGN = -2,        /* a pointer is misaligned for its dtype */
    FLS_ERR_SIZE = -3,         /* a size is zero, negative or overflows */
    FLS_ERR_SHAPE = -4,        /* shapes or strides do not match */
    FLS_ERR_DTYPE = -5,        /* unsupported dtype */
    FLS_ERR_TEMPERATURE = -6,  /* temperature negative, NaN or infinite */
    FLS_ERR_NAN = -7,          /* NaN in an input or in a computed logit */
    FLS_ERR_ALL_MASKED = -8,   /* a row whose every logit is -inf */
    FLS_ERR_PARAM = -9,        /* a parameter out of range (top-k > V, p outside [0,1], ...) */
    FLS_ERR_POINTER = -10,     /* host pointer where device memory is expected, or the reverse */
    FLS_ERR_UNSUPPORTED = -11, /* valid request this build or engine does not implement yet */
    FLS_ERR_NO_DEVICE = -12,   /* the CUDA engine was asked for and no usable GPU is present */
    FLS_ERR_OUT_OF_MEMORY = -13,
    FLS_ERR_CUDA = -14,   /* a CUDA, cuBLAS or cuRAND call failed */
    FLS_ERR_IO = -15,     /* a file could not be read or written */
    FLS_ERR_FORMAT = -16, /* a malformed file */
    FLS_ERR_INTERNAL = -17
} fls_status;

#endif /* FLASHSAMPLE_STATUS_H */
