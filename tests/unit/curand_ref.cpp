// curand_ref.cpp — cuRAND's own Philox4x32-10 (curand_Philox4x32_10 from
// <curand_philox4x32_x.h>), compiled for the host, as an independent
// reference for lib/base/fls_noise.h. C++ because the cuRAND header overloads.
#define QUALIFIERS static inline
#include <vector_types.h>
#include <vector_functions.h>
#include <curand_philox4x32_x.h>

#include <stdint.h>

extern "C" void fls_test_curand_philox(const uint32_t c[4], const uint32_t k[2], uint32_t out[4]);

extern "C" void fls_test_curand_philox(const uint32_t c[4], const uint32_t k[2], uint32_t out[4])
{
    uint4 ctr = make_uint4(c[0], c[1], c[2], c[3]);
    uint2 key = make_uint2(k[0], k[1]);
    uint4 r = curand_Philox4x32_10(ctr, key);
    out[0] = r.x;
    out[1] = r.y;
    out[2] = r.z;
    out[3] = r.w;
}
