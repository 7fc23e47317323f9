/* The rule headers compile alone as C++ (C++11, warnings as errors), with the rule type. */
#include "variants/temperature.h"

int main(void)
{
    fls_cand c;
    fls_temperature_init(&c);
    fls_temperature_push(&c, 1.0f, 0.5f, 1.0f, 3);
    int64_t tok = -1;
    fls_temperature_rule::cand d;
    fls_temperature_rule::init(&d);
    fls_temperature_rule::merge(&d, &c);
    return fls_temperature_rule::finalize(&d, 1.0f, 0.0, &tok, NULL) == FLS_OK && tok == 3 ? 0 : 1;
}
