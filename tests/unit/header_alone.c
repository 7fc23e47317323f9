/* Compiles the public header with nothing before it (C11, -pedantic,
 * warnings as errors): it must be self-contained. */
#include "flashsample.h"

int main(void)
{
    fls_params p;
    fls_params_default(&p);
    fls_outputs out = {0, 0, 0};
    fls_matrix m = {0, FLS_DTYPE_F32, 1, 1, 1};
    (void)out;
    (void)m;
    return p.draws == 1 && fls_status_string(FLS_OK) != 0 ? 0 : 1;
}
