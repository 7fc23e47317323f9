/*
 * fuzz_npy.c — the .npy reader of the command line (tools/npy.c) on any
 * bytes: the in-memory header parser with and without float64, the file
 * reader and the matrix loader (every storage dtype) on the same bytes as a
 * file, and for every accepted image a write/re-read round trip.
 *
 * Invariants (a violation aborts): an accepted image has its data section
 * exactly at data_offset .. end; a refused one leaves the array zeroed and a
 * NUL-terminated message; the file reader agrees with the parser; a written
 * header parses back to the same dtype and shape, and the data survives.
 */
#include "tests/fuzz/fuzz.h"
#include "tools/npy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[64], path[96];

static void cleanup(void)
{
    unlink(path);
    rmdir(dir);
}

void fuzz_fail(const char *what)
{
    fprintf(stderr, "fuzz_npy: invariant broken: %s\n", what);
    abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    snprintf(dir, sizeof dir, "/tmp/fls_fuzz_npy_XXXXXX");
    if (!mkdtemp(dir))
        fuzz_fail("mkdtemp");
    snprintf(path, sizeof path, "%s/in.npy", dir);
    atexit(cleanup);
    return 0;
}

static int zeroed(const fls_npy_array *a)
{
    static const fls_npy_array z;
    return memcmp(a, &z, sizeof z) == 0;
}

static void roundtrip(const fls_npy_array *a, const uint8_t *payload)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *fp = open_memstream(&buf, &len);
    if (!fp)
        return;
    char err[FLS_NPY_ERR_LEN];
    fls_status st = fls_npy_write_stream(fp, a->dtype, a->ndim, a->shape, payload, err);
    fclose(fp);
    if (st != FLS_OK)
        fuzz_fail("an accepted array cannot be written back");
    fls_npy_array b;
    size_t off = 0;
    if (fls_npy_parse_header_flags(buf, len, FLS_NPY_ACCEPT_F64, &b, &off, err) != FLS_OK)
        fuzz_fail("a written header does not parse back");
    if (b.dtype != a->dtype || b.ndim != a->ndim || b.bytes != a->bytes ||
        memcmp(b.shape, a->shape, sizeof b.shape) != 0)
        fuzz_fail("a written header parses back to another array");
    if (a->bytes && memcmp(buf + off, payload, a->bytes) != 0)
        fuzz_fail("written data differs");
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[FLS_NPY_ERR_LEN];
    int ok[2] = {0, 0};
    for (unsigned flags = 0; flags < 2; flags++) {
        fls_npy_array a;
        size_t off = 0;
        memset(err, 0x55, sizeof err);
        fls_status st = fls_npy_parse_header_flags(data, size, flags, &a, &off, err);
        if (st == FLS_OK) {
            ok[flags] = 1;
            if (a.data || off > size || size - off != a.bytes || a.ndim < 0 || a.ndim > FLS_NPY_MAX_DIMS)
                fuzz_fail("accepted image: data section does not match the header");
            if (a.bytes != (size_t)a.count * fls_npy_dtype_size(a.dtype))
                fuzz_fail("accepted image: bytes != count x itemsize");
            if (a.dtype == FLS_NPY_F64 && !flags)
                fuzz_fail("float64 accepted without FLS_NPY_ACCEPT_F64");
            roundtrip(&a, data + off);
        } else {
            if (!zeroed(&a))
                fuzz_fail("refused image: the array is not zeroed");
            if (!memchr(err, 0, sizeof err) || !err[0])
                fuzz_fail("refused image: no message");
        }
    }
    if (ok[0] && !ok[1])
        fuzz_fail("accepting float64 refused an image the strict parser accepts");

    /* the same bytes as a file */
    FILE *fp = fopen(path, "wb");
    if (!fp)
        return 0;
    size_t w = fwrite(data, 1, size, fp);
    fclose(fp);
    if (w != size)
        return 0;
    for (unsigned flags = 0; flags < 2; flags++) {
        fls_npy_array a;
        fls_status st = fls_npy_read_flags(path, flags ? FLS_NPY_ACCEPT_F64 : 0u, &a, err);
        if ((st == FLS_OK) != ok[flags])
            fuzz_fail("the file reader and the parser disagree");
        if (st == FLS_OK && a.bytes && memcmp(a.data, data + (size - a.bytes), a.bytes) != 0)
            fuzz_fail("the file reader's data differs from the file's");
        if (st != FLS_OK && !zeroed(&a))
            fuzz_fail("refused file: the array is not zeroed");
        fls_npy_free(&a);
    }
    const fls_dtype wants[3] = {FLS_DTYPE_F32, FLS_DTYPE_F16, FLS_DTYPE_BF16};
    for (int k = 0; k <= 3; k++) {
        fls_npy_matrix m;
        fls_status st = fls_npy_read_matrix(path, k < 3 ? &wants[k] : NULL, &m, err);
        if (st == FLS_OK) {
            if (!m.data || m.rows < 1 || m.cols < 1 || (m.ndim != 1 && m.ndim != 2))
                fuzz_fail("a loaded matrix is empty or of another rank");
            if (k < 3 && m.dtype != wants[k])
                fuzz_fail("a loaded matrix is not of the dtype asked for");
            /* touch every element */
            volatile unsigned char sink = 0;
            const size_t bytes = (size_t)(m.rows * m.cols) * fls_dtype_size(m.dtype);
            for (size_t i = 0; i < bytes; i++)
                sink ^= ((const unsigned char *)m.data)[i];
            (void)sink;
        }
        fls_npy_matrix_free(&m);
    }
    return 0;
}
