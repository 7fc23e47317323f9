/* The rule headers compile alone (C11, -pedantic, warnings as errors). */
#include "variants/temperature.h"

int main(void)
{
    fls_cand c;
    fls_temperature_init(&c);
    fls_temperature_push(&c, 1.0f, 0.5f, 1.0f, 3);
    int64_t tok = -1;
    return fls_temperature_finalize(&c, 1.0f, 0.0, &tok, NULL) == FLS_OK && tok == 3 ? 0 : 1;
}
