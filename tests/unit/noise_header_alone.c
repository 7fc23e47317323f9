/* Compiles the noise contract header with nothing before it (C11,
 * -pedantic, warnings as errors): the CUDA kernels include it the same way. */
#include "lib/base/fls_noise.h"

int main(void)
{
    /* Random123's all-zero known answer, and a finite Gumbel value */
    const uint32_t c[4] = {0, 0, 0, 0}, k[2] = {0, 0};
    fls_philox_block r = fls_philox4x32_10(c, k);
    float g = fls_gumbel(1, 2, 3, 4);
    return r.r[0] == 0x6627e8d5u && g > -3.81f && g < FLS_GUMBEL_MAX ? 0 : 1;
}
