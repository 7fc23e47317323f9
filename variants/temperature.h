/*
 * temperature.h — the temperature rule, shared by every engine (C and CUDA).
 *
 * Row b samples v with probability softmax(l_b / T_b)_v by Gumbel-max:
 *     key_v = fl(fl(l_v / T) + G_v),   token = argmax key (lowest index on ties)
 * with IEEE division and addition, one rounding each (no fma contraction), so
 * every engine computes the same key from the same logit and noise.
 * T = 0 is greedy: key_v = l_v and no noise. -inf (a masked token) stays -inf
 * and never wins; a row with no finite key is an error.
 */
#ifndef FLS_VARIANT_TEMPERATURE_H
#define FLS_VARIANT_TEMPERATURE_H

#include "fls_noise.h"

/* The tempered logit l / T (l itself for T = 0). */
FLS_HD float fls_temper(float l, float T)
{
    return T == 0.0f ? l : FLS_FDIV(l, T);
}

/* The Gumbel-max key of a tempered logit x and its noise g. */
FLS_HD float fls_gumbel_key(float x, float g)
{
    return FLS_FADD(x, g);
}

#endif
