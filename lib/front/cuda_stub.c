/* The CUDA engine's entry points in a build without nvcc: every call says
 * the engine is not built, so a CPU-only library still links and answers. */
#include "lib/front/internal.h"

fls_status fls_cuda_context_init(fls_context_t *ctx)
{
    (void)ctx;
    return FLS_ERR_NO_DEVICE;
}

void fls_cuda_context_fini(fls_context_t *ctx)
{
    (void)ctx;
}

fls_status fls_cuda_sample_fused(fls_context_t *ctx, const fls_matrix *W, const fls_matrix *H,
                                 const fls_request *req, const fls_outputs *out)
{
    (void)ctx, (void)W, (void)H, (void)req, (void)out;
    return FLS_ERR_NO_DEVICE;
}

fls_status fls_cuda_sample_logits(fls_context_t *ctx, const fls_matrix *L, const fls_request *req,
                                  const fls_outputs *out)
{
    (void)ctx, (void)L, (void)req, (void)out;
    return FLS_ERR_NO_DEVICE;
}

int fls_cuda_available_impl(void)
{
    return 0;
}

fls_status fls_cuda_sync(fls_context_t *ctx)
{
    (void)ctx;
    return FLS_ERR_NO_DEVICE;
}

int fls_cuda_built_impl(void)
{
    return 0;
}

fls_status fls_cuda_check_device_pointer(const void *p)
{
    (void)p;
    return FLS_ERR_NO_DEVICE;
}

fls_status fls_cuda_malloc(void **p, size_t bytes)
{
    (void)bytes;
    if (p)
        *p = NULL;
    return FLS_ERR_NO_DEVICE;
}

void fls_cuda_free(void *p)
{
    (void)p;
}

fls_status fls_cuda_memcpy(void *dst, const void *src, size_t bytes, int to_device)
{
    (void)dst, (void)src, (void)bytes, (void)to_device;
    return FLS_ERR_NO_DEVICE;
}

fls_status fls_cuda_memcpy2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                             size_t rows, int to_device)
{
    (void)dst, (void)dpitch, (void)src, (void)spitch, (void)width, (void)rows, (void)to_device;
    return FLS_ERR_NO_DEVICE;
}

fls_status fls_cuda_stream_chunk(fls_context_t *ctx, const float *L, int64_t ldl, int64_t B, int64_t n,
                                 int64_t v0, const fls_row_params *rows, int64_t draws, uint32_t first_draw,
                                 int g, fls_cand *cand, fls_gbest *gbest, fls_lse *lse)
{
    (void)ctx, (void)L, (void)ldl, (void)B, (void)n, (void)v0, (void)rows, (void)draws, (void)first_draw;
    (void)g, (void)cand, (void)gbest, (void)lse;
    return FLS_ERR_NO_DEVICE;
}

fls_status fls_cuda_chunk_logits(fls_context_t *ctx, const fls_matrix *Wc, const fls_matrix *H, float *C)
{
    (void)ctx, (void)Wc, (void)H, (void)C;
    return FLS_ERR_NO_DEVICE;
}

int fls_cuda_capturing(const fls_context_t *ctx)
{
    (void)ctx;
    return 0;
}
