/*
 * bench_cuda.h — the CUDA half of `flashsample bench --device cuda`.
 *
 * `flashsample bench` hands its own arguments over unchanged: argv[0] is
 * "bench", then every option as given (--device cuda, --csv, --quick, --reps,
 * --threads, ...). The function prints its table, writes its CSV (same long
 * format as the CPU bench: device,engine,dtype,B,V,D,median_ms,... through a
 * temporary file and rename) and returns the process exit status (0 success,
 * 1 failure, 2 usage error).
 *
 * tools/bench_cuda_stub.c defines it when the CUDA engine is not built;
 * the CUDA build links the objects in `cuda_bench_objs` (kernels/meson.build)
 * instead.
 */
#ifndef FLS_BENCH_CUDA_H
#define FLS_BENCH_CUDA_H

#ifdef __cplusplus
extern "C" {
#endif

int fls_tool_bench_cuda(int argc, char **argv);

#ifdef __cplusplus
}
#endif

#endif /* FLS_BENCH_CUDA_H */
