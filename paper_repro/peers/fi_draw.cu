// paper_repro/peers/fi_draw.cu: draws tokens with FlashInfer's sampling kernels for the audit
// gallery (paper_repro/peers/gallery.py), one kernel call per draw, the seed and offset advanced
// the way FlashInfer's Python wrappers advance them (flashinfer/sampling.py,
// get_seed_and_offset: offset += round_up(increment, 4) per call, increment B x V from logits,
// B from probabilities, 32 B for top-k / top-p). FlashInfer's kernels come from a pinned copy
// of its header-only include/flashinfer (never part of this repository), compiled with the
// flags FlashInfer's JIT compiles them with (flashinfer/jit/core.py: -use_fast_math, -O3):
//     nvcc -O3 -DNDEBUG -use_fast_math -std=c++17 -arch=sm_90a -I FLASHINFER/include fi_draw.cu -o fi_draw
// Usage: fi_draw METHOD X.f32 B V N SEED OUT.i64 [PARAM] [--row-seeds]
//        fi_draw noise COUNT SEED      (the upper tail of SamplingFromLogits' Gumbel noise)
//   X.f32   the tempered logits x = l / T, float32 (B, V) row-major, raw
//   METHOD  logits (SamplingFromLogits), probs (OnlineSoftmax, then SamplingFromProb),
//           topk (TopKSamplingFromProb, PARAM = k), topp (TopPSamplingFromProb, PARAM = p),
//           minp (MinPSamplingFromProb, PARAM = p)
//   OUT.i64 the tokens, int64 (B, N) row-major, raw
//   --row-seeds: row b gets its own seed SEED + b (seed_arr), the offset shared
// `noise` draws COUNT values of GenerateGumbelNoise<float, 4> (the noise SamplingFromLogits adds,
// the subsequence of value i being i rounded down to a multiple of 4, as for token i of row 0)
// and prints, per threshold g of kNoiseThr, how many exceed g, and the largest value.
#include <cuda_runtime.h>

#include <cstdint>
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
            std::fprintf(stderr, "fi_draw: %s failed: %s (line %d)\n", #__VA_ARGS__, cudaGetErrorString(e_), \
                         __LINE__);                                                                          \
            std::exit(1);                                                                                    \
        }                                                                                                    \
    } while (0)

constexpr int kNoiseT = 12;
__constant__ float kNoiseThr[kNoiseT] = {8.0f,  10.0f, 12.0f, 13.0f, 14.0f, 15.0f,
                                         15.5f, 16.0f, 16.5f, 17.0f, 18.0f, 20.0f};

__global__ void noise_tail(uint64_t seed, uint64_t groups, unsigned long long *count, unsigned *gmax_bits)
{
    unsigned long long local[kNoiseT] = {};
    float gmax = 0.0f;
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < groups; i += stride) {
        const auto g = flashinfer::sampling::GenerateGumbelNoise<float, 4>(seed, 0, i * 4);
#pragma unroll
        for (int j = 0; j < 4; j++) {
            gmax = fmaxf(gmax, g[j]);
#pragma unroll
            for (int t = 0; t < kNoiseT; t++)
                local[t] += g[j] > kNoiseThr[t];
        }
    }
    for (int t = 0; t < kNoiseT; t++)
        if (local[t])
            atomicAdd(&count[t], local[t]);
    atomicMax(gmax_bits, __float_as_uint(gmax)); /* gmax >= 0: its bits order as the floats */
}

static int noise_main(int argc, char **argv)
{
    if (argc < 4) {
        std::fprintf(stderr, "usage: fi_draw noise COUNT SEED\n");
        return 2;
    }
    const uint64_t n = std::strtoull(argv[2], nullptr, 10) / 4, seed = std::strtoull(argv[3], nullptr, 10);
    unsigned long long *count;
    unsigned *gmax;
    CK(cudaMalloc(&count, kNoiseT * sizeof(unsigned long long)));
    CK(cudaMalloc(&gmax, sizeof(unsigned)));
    CK(cudaMemset(count, 0, kNoiseT * sizeof(unsigned long long)));
    CK(cudaMemset(gmax, 0, sizeof(unsigned)));
    noise_tail<<<132 * 8, 256>>>(seed, n, count, gmax);
    CK(cudaGetLastError());
    unsigned long long c[kNoiseT];
    unsigned gb;
    float thr[kNoiseT];
    CK(cudaMemcpy(c, count, sizeof c, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(&gb, gmax, sizeof gb, cudaMemcpyDeviceToHost));
    CK(cudaMemcpyFromSymbol(thr, kNoiseThr, sizeof thr));
    float mx;
    std::memcpy(&mx, &gb, sizeof mx);
    std::printf("values %llu\nmax %.9g\n", (unsigned long long)(n * 4), (double)mx);
    for (int t = 0; t < kNoiseT; t++)
        std::printf("above %g %llu\n", (double)thr[t], c[t]);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && !std::strcmp(argv[1], "noise"))
        return noise_main(argc, argv);
    if (argc < 8) {
        std::fprintf(stderr, "usage: fi_draw METHOD X.f32 B V N SEED OUT.i64 [PARAM] [--row-seeds]\n");
        return 2;
    }
    const std::string method = argv[1];
    const uint32_t B = (uint32_t)std::atol(argv[3]), V = (uint32_t)std::atol(argv[4]);
    const long N = std::atol(argv[5]);
    const uint64_t seed = std::strtoull(argv[6], nullptr, 10);
    double param = 0.0;
    bool row_seeds = false;
    for (int i = 8; i < argc; i++) {
        if (!std::strcmp(argv[i], "--row-seeds"))
            row_seeds = true;
        else
            param = std::atof(argv[i]);
    }
    std::vector<float> x((size_t)B * V);
    FILE *f = std::fopen(argv[2], "rb");
    if (!f || std::fread(x.data(), sizeof(float), x.size(), f) != x.size()) {
        std::fprintf(stderr, "fi_draw: cannot read %s\n", argv[2]);
        return 2;
    }
    std::fclose(f);
    cudaStream_t st;
    CK(cudaStreamCreate(&st));
    float *dx, *probs;
    int *tok;
    bool *valid;
    uint64_t *dseeds = nullptr;
    void *ws;
    const size_t ws_bytes = 64u << 20;
    CK(cudaMalloc(&dx, x.size() * sizeof(float)));
    CK(cudaMalloc(&probs, x.size() * sizeof(float)));
    CK(cudaMalloc(&tok, B * sizeof(int)));
    CK(cudaMalloc(&valid, B * sizeof(bool)));
    CK(cudaMalloc(&ws, ws_bytes));
    CK(cudaMemcpy(dx, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice));
    if (row_seeds) {
        std::vector<uint64_t> s(B);
        for (uint32_t b = 0; b < B; b++)
            s[b] = seed + b;
        CK(cudaMalloc(&dseeds, B * sizeof(uint64_t)));
        CK(cudaMemcpy(dseeds, s.data(), B * sizeof(uint64_t), cudaMemcpyHostToDevice));
    }
    if (method != "logits")
        CK(flashinfer::sampling::OnlineSoftmax<float>(dx, probs, B, V, nullptr, 1.0f, ws, ws_bytes, false,
                                                      st));
    const uint64_t inc = method == "logits"                       ? (uint64_t)B * V
                         : (method == "topk" || method == "topp") ? 32ull * B
                                                                  : (uint64_t)B;
    std::vector<int> t(B);
    std::vector<int64_t> out((size_t)B * N);
    uint64_t off = 0;
    for (long n = 0; n < N; n++) {
        if (method == "logits")
            CK(flashinfer::sampling::SamplingFromLogits<float, int>(dx, tok, nullptr, B, V, true, dseeds,
                                                                    seed, nullptr, off, st));
        else if (method == "probs")
            CK(flashinfer::sampling::SamplingFromProb<float, int>(probs, tok, valid, nullptr, B, V, true,
                                                                  dseeds, seed, nullptr, off, st));
        else if (method == "topk")
            CK(flashinfer::sampling::TopKSamplingFromProb<float, int>(probs, tok, valid, nullptr, nullptr, B,
                                                                      (uint32_t)param, V, true, dseeds, seed,
                                                                      nullptr, off, st));
        else if (method == "topp")
            CK(flashinfer::sampling::TopPSamplingFromProb<float, int>(probs, tok, valid, nullptr, nullptr, B,
                                                                      (float)param, V, true, dseeds, seed,
                                                                      nullptr, off, st));
        else if (method == "minp")
            CK(flashinfer::sampling::MinPSamplingFromProb<float, int>(probs, nullptr, tok, valid, nullptr, B,
                                                                      (float)param, V, true, dseeds, seed,
                                                                      nullptr, off, st));
        else {
            std::fprintf(stderr, "fi_draw: unknown method %s\n", method.c_str());
            return 2;
        }
        off += (inc + 3) / 4 * 4;
        CK(cudaMemcpyAsync(t.data(), tok, B * sizeof(int), cudaMemcpyDeviceToHost, st));
        CK(cudaStreamSynchronize(st));
        for (uint32_t b = 0; b < B; b++)
            out[(size_t)b * N + n] = t[b];
    }
    f = std::fopen(argv[7], "wb");
    if (!f || std::fwrite(out.data(), sizeof(int64_t), out.size(), f) != out.size()) {
        std::fprintf(stderr, "fi_draw: cannot write %s\n", argv[7]);
        return 2;
    }
    std::fclose(f);
    return 0;
}
