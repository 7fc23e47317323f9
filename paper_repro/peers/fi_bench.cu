// paper_repro/peers/fi_bench.cu: the paper's FlashInfer baselines, timed on this GPU.
//
// FI1 = LM-head matmul + FlashInfer top_k_top_p_sampling_from_logits (a softmax, then
// TopKTopPSamplingFromProb), FI2 = matmul + FlashInfer's Gumbel-max SamplingFromLogits,
// both behind a cuBLAS bf16 GEMM that writes fp32 logits (T folded into its alpha), the way
// the paper (arXiv 2603.15854) defines them. FlashInfer's kernels come from a pinned copy of
// its header-only include/flashinfer (never part of this repository): build with
//     nvcc -O3 -std=c++17 -arch=sm_90a -I FLASHINFER/include fi_bench.cu -lcublas -o fi_bench
// Usage: fi_bench CSV D:V[,D:V...] B[,B...] [REPS]
// Writes one CSV row per (method, shape, B): median milliseconds of REPS timed calls (CUDA
// events around each call, after 25 warm-up calls), W rotated over copies so that no call
// finds it in L2. Methods: matmul (the GEMM alone), fi2_gumbel, fi1_topk_topp (k = V, p = 1:
// the plain sampler), fi1_k50_p09 (k = 50, p = 0.9), fi_minp (min-p 0.05), and the path a
// serving engine takes today when a request has a grammar mask, a logit bias and penalties
// (the inputs of flashsample bench's mods_* engines: a random mask allowing about half the
// tokens, 16 bias pairs, 256 seen tokens with counts, r = 1.1, p = 0.5, f = 0.25): the GEMM
// to fp32 logits, one scatter kernel for the penalties and the bias, one pass for the mask and
// 1 / T over the B x V logits (the least memory traffic such a path can have), then
// FlashInfer's sampler: serving_mods_fi2 (SamplingFromLogits) and serving_mods_fi_k50
// (softmax + TopKTopPSamplingFromProb, k = 50).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <flashinfer/sampling.cuh>

#define CK(...)                                                                                              \
    do {                                                                                                     \
        cudaError_t e_ = (__VA_ARGS__);                                                                      \
        if (e_ != cudaSuccess) {                                                                             \
            std::fprintf(stderr, "fi_bench: %s failed: %s (line %d)\n", #__VA_ARGS__,                        \
                         cudaGetErrorString(e_), __LINE__);                                                  \
            std::exit(1);                                                                                    \
        }                                                                                                    \
    } while (0)
#define CB(x)                                                                                                \
    do {                                                                                                     \
        cublasStatus_t s_ = (x);                                                                             \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                                   \
            std::fprintf(stderr, "fi_bench: %s failed: %d (line %d)\n", #x, (int)s_, __LINE__);              \
            std::exit(1);                                                                                    \
        }                                                                                                    \
    } while (0)

static __global__ void fill_bf16(__nv_bfloat16 *p, size_t n, unsigned seed, float scale)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)i * 2654435761u ^ seed;
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        p[i] = __float2bfloat16(scale * ((float)(h & 0xFFFFFF) / 16777216.0f - 0.5f));
    }
}

#define SERVE_S 256
#define SERVE_K 16

// Penalties then bias of row blockIdx.x's listed tokens, in place on the raw logits (vLLM's
// order: penalties and bias before the temperature); one thread per list entry, the seen list
// first (a token in both lists gets its bias after its penalty: the bias pass is a second
// launch).
static __global__ void serve_penalties(float *L, int V, const int *seen, const int *cnt, float r, float pres,
                                       float freq)
{
    const int b = blockIdx.x, i = threadIdx.x;
    if (i >= SERVE_S)
        return;
    float *l = L + (size_t)b * V;
    const int v = seen[b * SERVE_S + i], c = cnt[b * SERVE_S + i];
    float x = l[v];
    x = x > 0.0f ? x / r : x * r;
    l[v] = x - freq * (float)c - (c > 0 ? pres : 0.0f);
}

static __global__ void serve_bias(float *L, int V, const int *ids, const float *vals)
{
    const int b = blockIdx.x, i = threadIdx.x;
    if (i < SERVE_K)
        L[(size_t)b * V + ids[b * SERVE_K + i]] += vals[b * SERVE_K + i];
}

// The bitmask (-inf where a bit is clear) and 1 / T over the B x V logits, in place.
static __global__ void serve_mask_temper(float *L, int V, int words, const unsigned *mask, float rT)
{
    const int b = blockIdx.y;
    for (int v = blockIdx.x * blockDim.x + threadIdx.x; v < V; v += gridDim.x * blockDim.x) {
        const bool ok = (mask[(size_t)b * words + v / 32] >> (v % 32)) & 1u;
        float *x = L + (size_t)b * V + v;
        *x = ok ? *x * rT : -INFINITY;
    }
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        std::fprintf(stderr, "usage: fi_bench CSV D:V[,D:V...] B[,B...] [REPS]\n");
        return 2;
    }
    const char *csv = argv[1];
    std::vector<std::pair<int, int>> shapes;
    std::vector<int> batches;
    for (char *t = std::strtok(argv[2], ","); t; t = std::strtok(nullptr, ",")) {
        int d = 0, v = 0;
        if (std::sscanf(t, "%d:%d", &d, &v) != 2 || d <= 0 || v <= 0) {
            std::fprintf(stderr, "fi_bench: bad shape '%s' (want D:V)\n", t);
            return 2;
        }
        shapes.push_back({d, v});
    }
    for (char *t = std::strtok(argv[3], ","); t; t = std::strtok(nullptr, ",")) {
        int b = std::atoi(t);
        if (b <= 0) {
            std::fprintf(stderr, "fi_bench: bad batch '%s'\n", t);
            return 2;
        }
        batches.push_back(b);
    }
    const int reps = argc > 4 ? std::atoi(argv[4]) : 100;
    FILE *out = std::fopen(csv, "w");
    if (!out) {
        std::perror(csv);
        return 1;
    }
    std::fprintf(out, "method,D,V,B,median_ms,reps\n");
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    std::printf("fi_bench on %s: FlashInfer sampling.cuh behind cuBLAS bf16 -> fp32 logits, "
                "T = 0.7, median of %d\n",
                prop.name, reps);
    cublasHandle_t h;
    CB(cublasCreate(&h));
    cudaStream_t st;
    CK(cudaStreamCreate(&st));
    CB(cublasSetStream(h, st));
    const float T = 0.7f;
    int maxB = *std::max_element(batches.begin(), batches.end());
    for (const auto &shape : shapes) {
        const int D = shape.first, V = shape.second;
        const int copies = 3;
        std::vector<__nv_bfloat16 *> W(copies);
        for (int c = 0; c < copies; c++) {
            CK(cudaMalloc(&W[c], (size_t)V * D * sizeof(__nv_bfloat16)));
            fill_bf16<<<1024, 256, 0, st>>>(W[c], (size_t)V * D, 17u + c, 0.2f);
        }
        __nv_bfloat16 *H;
        float *logits, *probs;
        int *tok;
        bool *valid;
        void *ws;
        const size_t ws_bytes = 64u << 20;
        CK(cudaMalloc(&H, (size_t)maxB * D * sizeof(__nv_bfloat16)));
        CK(cudaMalloc(&logits, (size_t)maxB * V * sizeof(float)));
        CK(cudaMalloc(&probs, (size_t)maxB * V * sizeof(float)));
        CK(cudaMalloc(&tok, maxB * sizeof(int)));
        CK(cudaMalloc(&valid, maxB * sizeof(bool)));
        CK(cudaMalloc(&ws, ws_bytes));
        fill_bf16<<<1024, 256, 0, st>>>(H, (size_t)maxB * D, 99u, 2.0f);
        // the serving path's inputs (as flashsample bench's mods engines build them)
        const int words = (V + 31) / 32;
        std::vector<unsigned> hmask((size_t)maxB * words);
        std::vector<int> hseen((size_t)maxB * SERVE_S), hcnt((size_t)maxB * SERVE_S),
            hbid((size_t)maxB * SERVE_K);
        std::vector<float> hbv((size_t)maxB * SERVE_K);
        unsigned long long x = 0x9E3779B97F4A7C15ull;
        for (auto &w : hmask) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            w = (unsigned)(x >> 32);
        }
        for (int r = 0; r < maxB; r++) {
            for (int i = 0; i < SERVE_S; i++) {
                hseen[r * SERVE_S + i] = (int)(((long long)r * 7919 + (long long)i * 593) % V);
                hcnt[r * SERVE_S + i] = i % 4;
            }
            for (int i = 0; i < SERVE_K; i++) {
                hbid[r * SERVE_K + i] = (int)(((long long)r * 31 + (long long)i * 9973) % V);
                hbv[r * SERVE_K + i] = (float)(i % 5) - 2.0f;
            }
        }
        unsigned *dmask;
        int *dseen, *dcnt, *dbid;
        float *dbv;
        CK(cudaMalloc(&dmask, hmask.size() * 4));
        CK(cudaMalloc(&dseen, hseen.size() * 4));
        CK(cudaMalloc(&dcnt, hcnt.size() * 4));
        CK(cudaMalloc(&dbid, hbid.size() * 4));
        CK(cudaMalloc(&dbv, hbv.size() * 4));
        CK(cudaMemcpy(dmask, hmask.data(), hmask.size() * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dseen, hseen.data(), hseen.size() * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dcnt, hcnt.data(), hcnt.size() * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dbid, hbid.data(), hbid.size() * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dbv, hbv.data(), hbv.size() * 4, cudaMemcpyHostToDevice));
        CK(cudaStreamSynchronize(st));
        for (int B : batches) {
            int rot = 0;
            uint64_t off = 0;
            bool raw = false; // the serving path: raw logits (T after the penalties)
            auto gemm = [&]() {
                const float alpha = raw ? 1.0f : 1.0f / T, beta = 0.0f;
                // logits (B x V, row-major) = H (B x D) . W^T: column-major V x B = W^T . H^T
                CB(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, V, B, D, &alpha, W[rot], CUDA_R_16BF, D, H,
                                CUDA_R_16BF, D, &beta, logits, CUDA_R_32F, V, CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT));
                rot = (rot + 1) % copies;
            };
            auto softmax = [&]() {
                CK(flashinfer::sampling::OnlineSoftmax<float>(logits, probs, B, V, nullptr, 1.0f, ws,
                                                              ws_bytes, false, st));
            };
            struct Method {
                const char *name;
                int k;
                float p;
                int kind; // 0 matmul, 1 gumbel, 2 top-k/top-p, 3 min-p; + 10: the serving mods first
            } methods[] = {{"matmul", 0, 0, 0},
                           {"fi2_gumbel", 0, 0, 1},
                           {"fi1_topk_topp", V, 1.0f, 2},
                           {"fi1_k50_p09", 50, 0.9f, 2},
                           {"fi_minp", 0, 0.05f, 3},
                           {"serving_mods_fi2", 0, 0, 11},
                           {"serving_mods_fi_k50", 50, 1.0f, 12}};
            for (const Method &mm : methods) {
                Method m = mm;
                raw = m.kind >= 10;
                m.kind %= 10;
                auto call = [&]() {
                    gemm();
                    off += 4;
                    if (raw) {
                        serve_penalties<<<B, SERVE_S, 0, st>>>(logits, V, dseen, dcnt, 1.1f, 0.5f, 0.25f);
                        serve_bias<<<B, 32, 0, st>>>(logits, V, dbid, dbv);
                        serve_mask_temper<<<dim3((V + 1023) / 1024, B), 256, 0, st>>>(logits, V, words, dmask,
                                                                                      1.0f / T);
                    }
                    if (m.kind == 1) {
                        CK(flashinfer::sampling::SamplingFromLogits<float, int>(
                            logits, tok, nullptr, B, V, true, nullptr, 1234, nullptr, off, st));
                    } else if (m.kind == 2) {
                        softmax();
                        CK(flashinfer::sampling::TopKTopPSamplingFromProb<float, int>(
                            probs, nullptr, nullptr, tok, valid, nullptr, B, m.k, m.p, V, true, nullptr, 1234,
                            nullptr, off, st));
                    } else if (m.kind == 3) {
                        softmax();
                        CK(flashinfer::sampling::MinPSamplingFromProb<float, int>(
                            probs, nullptr, tok, valid, nullptr, B, m.p, V, true, nullptr, 1234, nullptr, off,
                            st));
                    }
                };
                for (int i = 0; i < 25; i++)
                    call();
                CK(cudaStreamSynchronize(st));
                std::vector<float> ms(reps);
                cudaEvent_t e0, e1;
                CK(cudaEventCreate(&e0));
                CK(cudaEventCreate(&e1));
                for (int r = 0; r < reps; r++) {
                    CK(cudaEventRecord(e0, st));
                    call();
                    CK(cudaEventRecord(e1, st));
                    CK(cudaEventSynchronize(e1));
                    CK(cudaEventElapsedTime(&ms[r], e0, e1));
                }
                CK(cudaEventDestroy(e0));
                CK(cudaEventDestroy(e1));
                std::sort(ms.begin(), ms.end());
                float med = ms[reps / 2];
                std::fprintf(out, "%s,%d,%d,%d,%.5f,%d\n", m.name, D, V, B, med, reps);
                std::printf("  D=%d V=%d B=%4d %-14s %.4f ms\n", D, V, B, m.name, med);
                std::fflush(stdout);
            }
        }
        for (auto w : W)
            CK(cudaFree(w));
        CK(cudaFree(H));
        CK(cudaFree(logits));
        CK(cudaFree(probs));
        CK(cudaFree(tok));
        CK(cudaFree(valid));
        CK(cudaFree(ws));
        CK(cudaFree(dmask));
        CK(cudaFree(dseen));
        CK(cudaFree(dcnt));
        CK(cudaFree(dbid));
        CK(cudaFree(dbv));
    }
    std::fclose(out);
    cublasDestroy(h);
    return 0;
}
