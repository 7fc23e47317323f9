/*
 * flashsample — the command line of the flashsample library.
 *
 *   flashsample sample   sample tokens from .npy logits, or from W and H (fused LM head)
 *   flashsample audit    goodness-of-fit audit of the samplers against the exact categorical
 *   flashsample bench    CPU (or CUDA) benchmark against the weight-streaming floor
 */
#include "tools/cli.h"

#include <stdio.h>
#include <string.h>

static void usage(FILE *fp)
{
    fprintf(
        fp,
        "usage: flashsample <command> [options]\n"
        "\n"
        "Exact Gumbel-max categorical sampling fused into the LM-head matmul.\n"
        "\n"
        "commands:\n"
        "  sample   sample tokens from logits (B, V) or from weights W (V, D) and hidden states H (B, D)\n"
        "  audit    chi-square audit: are the samplers exact?\n"
        "  bench    benchmark the fused sampler against unfused baselines and the memory floor\n"
        "\n"
        "flashsample <command> --help shows the options of a command.\n"
        "flashsample --version prints the version.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return CLI_USAGE;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        usage(stdout);
        return CLI_OK;
    }
    if (strcmp(cmd, "--version") == 0) {
        /* fls_cuda_available is asked only where the engine is built. */
        const char *cuda = !fls_cuda_built()      ? "built without CUDA"
                           : fls_cuda_available() ? "built with CUDA, GPU available"
                                                  : "built with CUDA, no GPU found";
        printf("flashsample %d.%d.%d (%s)\n", FLS_VERSION_MAJOR, FLS_VERSION_MINOR, FLS_VERSION_PATCH, cuda);
        return CLI_OK;
    }
    static const struct {
        const char *name;
        const char *prog;
        int (*fn)(int, char **);
    } cmds[] = {{"sample", "flashsample sample", cli_sample},
                {"audit", "flashsample audit", cli_audit},
                {"bench", "flashsample bench", cli_bench}};
    for (size_t k = 0; k < sizeof cmds / sizeof cmds[0]; k++)
        if (strcmp(cmd, cmds[k].name) == 0) {
            cli_prog = cmds[k].prog;
            return cmds[k].fn(argc - 1, argv + 1);
        }
    fprintf(stderr, "flashsample: error: unknown command '%s'\n\n", cmd);
    usage(stderr);
    return CLI_USAGE;
}
