/*
 * fls_hd.h — the few macros that let one header serve C, C++ and CUDA:
 * FLS_HD marks a function that compiles for the host and the device, and
 * FLS_F* spell the IEEE operations with exactly one rounding each (the
 * device's __f*_rn intrinsics, or plain operators on the host, which is
 * built with -ffp-contract=off so nothing is fused behind our back).
 * Used by the noise contract (fls_noise.h) and the rules (variants/).
 */
#ifndef FLS_HD_H
#define FLS_HD_H

#if defined(__CUDACC__)
#define FLS_HD __host__ __device__ __forceinline__
/* a member function of a rule's C++ type (variants/, CUDA templates) */
#define FLS_HDM __host__ __device__ __forceinline__
#elif defined(__cplusplus)
#define FLS_HD  static inline
#define FLS_HDM inline
#else
#define FLS_HD static inline
#endif

#if defined(__CUDA_ARCH__)
#define FLS_FMUL(a, b)   __fmul_rn((a), (b))
#define FLS_FADD(a, b)   __fadd_rn((a), (b))
#define FLS_FSUB(a, b)   __fsub_rn((a), (b))
#define FLS_FDIV(a, b)   __fdiv_rn((a), (b))
#define FLS_FMA(a, b, c) __fmaf_rn((a), (b), (c))
#else
#include <math.h>
#include <string.h>
/* Host code is built with -ffp-contract=off, so plain operators round once. */
#define FLS_FMUL(a, b)   ((a) * (b))
#define FLS_FADD(a, b)   ((a) + (b))
#define FLS_FSUB(a, b)   ((a) - (b))
#define FLS_FDIV(a, b)   ((a) / (b))
#define FLS_FMA(a, b, c) fmaf((a), (b), (c))
#endif

#endif /* FLS_HD_H */
