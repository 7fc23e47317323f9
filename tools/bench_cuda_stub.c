/* The CUDA bench in a build without the CUDA engine (see bench_cuda.h). */
#include "tools/bench_cuda.h"

#include <stdio.h>

int fls_tool_bench_cuda(int argc, char **argv)
{
    (void)argc, (void)argv;
    fprintf(stderr, "flashsample bench: error: flashsample was built without the CUDA engine "
                    "(reconfigure with -Dcuda=enabled on a machine with nvcc); use --device cpu\n");
    return 2;
}
