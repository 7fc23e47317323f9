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
// the plain sampler), fi1_k50_p09 (k = 50, p = 0.9), fi_minp (min-p 0.05).
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
        CK(cudaStreamSynchronize(st));
        for (int B : batches) {
            int rot = 0;
            uint64_t off = 0;
            auto gemm = [&]() {
                const float alpha = 1.0f / T, beta = 0.0f;
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
                int kind; // 0 matmul, 1 gumbel, 2 top-k/top-p, 3 min-p
            } methods[] = {{"matmul", 0, 0, 0},
                           {"fi2_gumbel", 0, 0, 1},
                           {"fi1_topk_topp", V, 1.0f, 2},
                           {"fi1_k50_p09", 50, 0.9f, 2},
                           {"fi_minp", 0, 0.05f, 3}};
            for (const Method &m : methods) {
                auto call = [&]() {
                    gemm();
                    off += 4;
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
    }
    std::fclose(out);
    cublasDestroy(h);
    return 0;
}
