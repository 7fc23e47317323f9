/*
 * test_npy.c — the .npy reader and writer (tools/npy.c): round trips, the
 * header grammar numpy writes, and many malformed files, each of which must
 * fail with the right status, a message naming the problem, and no data.
 */
#include "tools/npy.h"

#include <criterion/criterion.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/cli/tmpdir.h"

/* ---- helpers ---- */

static void make_tmpdir(void)
{
    tmpdir_make("fls_npy_test_");
}

TestSuite(npy, .init = make_tmpdir, .fini = tmpdir_remove);

/* An .npy image: prefix for version major.0, the dict padded with spaces to
 * a 64-byte boundary and a newline, then data_bytes bytes of 0xAB. */
typedef struct image {
    unsigned char buf[4096];
    size_t len;
} image;

static void build(image *im, int major, const char *dict, size_t data_bytes)
{
    size_t pre = major == 1 ? 10 : 12;
    size_t dl = strlen(dict);
    size_t total = (pre + dl + 1 + 63) / 64 * 64;
    size_t hl = total - pre;
    cr_assert(total + data_bytes <= sizeof im->buf);
    memcpy(im->buf, "\x93NUMPY", 6);
    im->buf[6] = (unsigned char)major;
    im->buf[7] = 0;
    for (size_t k = 0; k < pre - 8; k++)
        im->buf[8 + k] = (unsigned char)(hl >> (8 * k));
    memset(im->buf + pre, ' ', hl);
    memcpy(im->buf + pre, dict, dl);
    im->buf[total - 1] = '\n';
    memset(im->buf + total, 0xAB, data_bytes);
    im->len = total + data_bytes;
}

static fls_status parse(const image *im, fls_npy_array *a, char *err)
{
    size_t off;
    memset(err, 0, FLS_NPY_ERR_LEN);
    return fls_npy_parse_header(im->buf, im->len, a, &off, err);
}

/* The dict must be rejected with status st and a message containing what. */
static void expect_bad(const char *dict, size_t data_bytes, fls_status st, const char *what)
{
    image im;
    build(&im, 1, dict, data_bytes);
    fls_npy_array a;
    char err[FLS_NPY_ERR_LEN];
    fls_status got = parse(&im, &a, err);
    cr_expect_eq(got, st, "dict %s: status %d, expected %d (%s)", dict, got, st, err);
    cr_expect(strstr(err, what) != NULL, "dict %s: message '%s' lacks '%s'", dict, err, what);
    cr_expect_null(a.data);
    cr_expect_eq(a.ndim, 0);
}

static void write_raw(const char *path, const void *buf, size_t n)
{
    FILE *fp = fopen(path, "wb");
    cr_assert_not_null(fp);
    cr_assert_eq(fwrite(buf, 1, n, fp), n);
    fclose(fp);
}

/* ---- round trips ---- */

Test(npy, roundtrip_every_dtype_and_rank)
{
    const fls_npy_dtype dts[4] = {FLS_NPY_F32, FLS_NPY_F16, FLS_NPY_I64, FLS_NPY_U64};
    const int64_t shapes[5][3] = {{0}, {7}, {3, 5}, {2, 3, 4}, {1, 1, 1}};
    const int ndims[5] = {0, 1, 2, 3, 3};
    unsigned char data[256];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (unsigned char)(i * 37 + 11);
    char err[FLS_NPY_ERR_LEN];
    for (int d = 0; d < 4; d++)
        for (int s = 0; s < 5; s++) {
            const char *p = tpath("rt.npy");
            cr_assert_eq(fls_npy_write(p, dts[d], ndims[s], shapes[s], data, err), FLS_OK, "%s", err);
            fls_npy_array a;
            cr_assert_eq(fls_npy_read(p, &a, err), FLS_OK, "%s", err);
            cr_expect_eq(a.dtype, dts[d]);
            cr_expect_eq(a.ndim, ndims[s]);
            int64_t count = 1;
            for (int k = 0; k < ndims[s]; k++) {
                cr_expect_eq(a.shape[k], shapes[s][k]);
                count *= shapes[s][k];
            }
            cr_expect_eq(a.count, count);
            cr_expect_eq(a.bytes, (size_t)count * fls_npy_dtype_size(dts[d]));
            cr_expect(memcmp(a.data, data, a.bytes) == 0);
            cr_expect_eq((uintptr_t)a.data % 64, 0);
            fls_npy_free(&a);
            cr_expect_null(a.data);
        }
    cr_expect_eq(dir_entries(), 1, "only the output remains, no temporary files");
}

Test(npy, writer_layout_matches_numpy)
{
    /* What numpy.save writes for np.zeros((3, 4), '<f4'), version 1.0. */
    const char *p = tpath("layout.npy");
    float z[12] = {0};
    const int64_t shape[2] = {3, 4};
    char err[FLS_NPY_ERR_LEN];
    cr_assert_eq(fls_npy_write(p, FLS_NPY_F32, 2, shape, z, err), FLS_OK);
    FILE *fp = fopen(p, "rb");
    unsigned char b[128 + 48];
    size_t n = fread(b, 1, sizeof b, fp);
    fclose(fp);
    cr_assert_eq(n, 128 + 48);
    cr_expect(memcmp(b, "\x93NUMPY\x01\x00", 8) == 0);
    cr_expect_eq(b[8] | b[9] << 8, 118); /* data starts at 128 */
    const char *dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }";
    cr_expect(memcmp(b + 10, dict, strlen(dict)) == 0);
    cr_expect_eq(b[127], '\n');
    for (size_t i = 10 + strlen(dict); i < 127; i++)
        cr_expect_eq(b[i], ' ');

    /* 1-D shape is written "(n,)" */
    const int64_t s1[1] = {5};
    cr_assert_eq(fls_npy_write(p, FLS_NPY_I64, 1, s1, z, err), FLS_OK);
    fp = fopen(p, "rb");
    n = fread(b, 1, 80, fp);
    fclose(fp);
    cr_expect(strstr((char *)b + 10, "'shape': (5,), }") != NULL);
}

Test(npy, header_grammar_accepts_what_numpy_accepts)
{
    const char *ok[] = {
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}",
        "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (2, 3)}",
        "{'shape': (2, 3), 'fortran_order': False, 'descr': '<f4'}",
        "  {  'descr' :'<f4' ,'fortran_order':False,'shape':( 2 ,3 , ) , }  ",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 3L), }",
    };
    for (size_t k = 0; k < sizeof ok / sizeof ok[0]; k++) {
        image im;
        build(&im, 1, ok[k], 24);
        fls_npy_array a;
        char err[FLS_NPY_ERR_LEN];
        cr_expect_eq(parse(&im, &a, err), FLS_OK, "%s: %s", ok[k], err);
        cr_expect_eq(a.ndim, 2);
        cr_expect_eq(a.shape[0], 2);
        cr_expect_eq(a.shape[1], 3);
    }
    /* 0-d and 1-d, versions 2.0 and 3.0 */
    for (int major = 1; major <= 3; major++) {
        image im;
        fls_npy_array a;
        char err[FLS_NPY_ERR_LEN];
        build(&im, major, "{'descr': '<u8', 'fortran_order': False, 'shape': (), }", 8);
        cr_expect_eq(parse(&im, &a, err), FLS_OK, "v%d: %s", major, err);
        cr_expect_eq(a.ndim, 0);
        cr_expect_eq(a.count, 1);
        build(&im, major, "{'descr': '<i8', 'fortran_order': False, 'shape': (4,), }", 32);
        cr_expect_eq(parse(&im, &a, err), FLS_OK, "v%d: %s", major, err);
        cr_expect_eq(a.ndim, 1);
        cr_expect_eq(a.shape[0], 4);
        cr_expect_eq(a.dtype, FLS_NPY_I64);
        build(&im, major, "{'descr': '<f2', 'fortran_order': False, 'shape': (0, 9), }", 0);
        cr_expect_eq(parse(&im, &a, err), FLS_OK, "v%d: %s", major, err);
        cr_expect_eq(a.count, 0);
    }
}

Test(npy, version_2_file_reads_from_disk)
{
    image im;
    build(&im, 2, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }", 16);
    float v[4] = {1.5f, -2.0f, 3.25f, 0.0f};
    memcpy(im.buf + im.len - 16, v, 16);
    const char *p = tpath("v2.npy");
    write_raw(p, im.buf, im.len);
    fls_npy_array a;
    char err[FLS_NPY_ERR_LEN];
    cr_assert_eq(fls_npy_read(p, &a, err), FLS_OK, "%s", err);
    cr_expect(memcmp(a.data, v, 16) == 0);
    fls_npy_free(&a);
}

/* ---- malformed headers ---- */

Test(npy, rejects_bad_dtypes)
{
    expect_bad("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", 16, FLS_ERR_DTYPE, "'<f8'");
    expect_bad("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", 8, FLS_ERR_DTYPE, "'>f4'");
    expect_bad("{'descr': '|u1', 'fortran_order': False, 'shape': (2,), }", 2, FLS_ERR_DTYPE, "'|u1'");
    expect_bad("{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }", 8, FLS_ERR_DTYPE,
               "unsupported dtype");
    expect_bad("{'descr': '', 'fortran_order': False, 'shape': (2,), }", 8, FLS_ERR_DTYPE,
               "unsupported dtype");
    expect_bad("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", 8, FLS_ERR_DTYPE,
               "structured");
    expect_bad("{'descr': 4, 'fortran_order': False, 'shape': (2,), }", 8, FLS_ERR_FORMAT, "'descr'");
}

/* int32 and uint8 (bool too) only where a reader asks for them (the mask and
 * count inputs of `sample`); every other input still refuses them. */
Test(npy, int32_and_uint8_only_with_their_flags)
{
    const struct {
        const char *descr;
        unsigned flag;
        fls_npy_dtype dtype;
        size_t item;
    } cases[] = {{"<i4", FLS_NPY_ACCEPT_I32, FLS_NPY_I32, 4},
                 {"|u1", FLS_NPY_ACCEPT_U8, FLS_NPY_U8, 1},
                 {"<u1", FLS_NPY_ACCEPT_U8, FLS_NPY_U8, 1},
                 {"|b1", FLS_NPY_ACCEPT_U8, FLS_NPY_U8, 1}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char dict[128];
        snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (2, 3), }",
                 cases[k].descr);
        image im;
        build(&im, 1, dict, 6 * cases[k].item);
        fls_npy_array a;
        size_t off;
        char err[FLS_NPY_ERR_LEN];
        cr_expect_eq(fls_npy_parse_header_flags(im.buf, im.len, 0u, &a, &off, err), FLS_ERR_DTYPE, "%s",
                     cases[k].descr);
        cr_expect_eq(fls_npy_parse_header_flags(im.buf, im.len, FLS_NPY_ACCEPT_F64, &a, &off, err),
                     FLS_ERR_DTYPE, "%s", cases[k].descr);
        const unsigned other = cases[k].flag == FLS_NPY_ACCEPT_I32 ? FLS_NPY_ACCEPT_U8 : FLS_NPY_ACCEPT_I32;
        cr_expect_eq(fls_npy_parse_header_flags(im.buf, im.len, other, &a, &off, err), FLS_ERR_DTYPE, "%s",
                     cases[k].descr);
        cr_assert_eq(fls_npy_parse_header_flags(im.buf, im.len, cases[k].flag, &a, &off, err), FLS_OK,
                     "%s: %s", cases[k].descr, err);
        cr_expect_eq(a.dtype, cases[k].dtype);
        cr_expect_eq(a.bytes, 6 * cases[k].item);
        cr_expect_eq(fls_npy_dtype_size(a.dtype), cases[k].item);
    }
    /* written back as '<i4' and '|u1', read back with the flags */
    const int32_t i4[3] = {-1, 0, 0x7fffffff};
    const uint8_t u1[3] = {0, 1, 255};
    const int64_t n3[1] = {3};
    char err[FLS_NPY_ERR_LEN];
    const char *p = tpath("small.npy");
    fls_npy_array a;
    cr_assert_eq(fls_npy_write(p, FLS_NPY_I32, 1, n3, i4, err), FLS_OK, "%s", err);
    cr_expect_eq(fls_npy_read(p, &a, err), FLS_ERR_DTYPE);
    cr_assert_eq(fls_npy_read_flags(p, FLS_NPY_ACCEPT_I32, &a, err), FLS_OK, "%s", err);
    cr_expect(a.dtype == FLS_NPY_I32 && memcmp(a.data, i4, sizeof i4) == 0);
    fls_npy_free(&a);
    cr_assert_eq(fls_npy_write(p, FLS_NPY_U8, 1, n3, u1, err), FLS_OK, "%s", err);
    cr_assert_eq(fls_npy_read_flags(p, FLS_NPY_ACCEPT_U8, &a, err), FLS_OK, "%s", err);
    cr_expect(a.dtype == FLS_NPY_U8 && memcmp(a.data, u1, sizeof u1) == 0);
    cr_expect_str_eq(fls_npy_dtype_descr(FLS_NPY_U8), "|u1");
    cr_expect_str_eq(fls_npy_dtype_name(FLS_NPY_I32), "int32");
    fls_npy_free(&a);
}

Test(npy, rejects_fortran_order)
{
    expect_bad("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", 24, FLS_ERR_FORMAT,
               "fortran_order is True");
    expect_bad("{'descr': '<f4', 'fortran_order': 0, 'shape': (2, 3), }", 24, FLS_ERR_FORMAT,
               "fortran_order");
    expect_bad("{'descr': '<f4', 'fortran_order': Falsehood, 'shape': (2, 3), }", 24, FLS_ERR_FORMAT,
               "fortran_order");
}

Test(npy, rejects_malformed_dicts)
{
    const size_t n = 24;
    expect_bad("{'descr': '<f4', 'shape': (2, 3), }", n, FLS_ERR_FORMAT, "lacks 'fortran_order'");
    expect_bad("{'fortran_order': False, 'shape': (2, 3), }", n, FLS_ERR_FORMAT, "lacks 'descr'");
    expect_bad("{'descr': '<f4', 'fortran_order': False}", n, FLS_ERR_FORMAT, "lacks 'shape'");
    expect_bad("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'extra': 1}", n, FLS_ERR_FORMAT,
               "unexpected key 'extra'");
    expect_bad("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}", n, FLS_ERR_FORMAT,
               "repeats 'descr'");
    expect_bad("{'descr' '<f4', 'fortran_order': False, 'shape': (2, 3)}", n, FLS_ERR_FORMAT, "missing ':'");
    expect_bad("{'descr': '<f4' 'fortran_order': False, 'shape': (2, 3)}", n, FLS_ERR_FORMAT, "malformed");
    expect_bad("{'descr: '<f4', 'fortran_order': False, 'shape': (2, 3)}", n, FLS_ERR_FORMAT, "");
    expect_bad("{descr: '<f4', 'fortran_order': False, 'shape': (2, 3)}", n, FLS_ERR_FORMAT, "malformed key");
    expect_bad("['descr', '<f4']", n, FLS_ERR_FORMAT, "not a Python dict");
    expect_bad("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)", n, FLS_ERR_FORMAT, "");
    expect_bad("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)} x", n, FLS_ERR_FORMAT,
               "after the header dict");
    expect_bad("{'descr': '<\\x66\\x34', 'fortran_order': False, 'shape': (2, 3)}", n, FLS_ERR_FORMAT,
               "'descr'");
}

Test(npy, rejects_malformed_shapes)
{
    expect_bad("{'descr': '<f4', 'fortran_order': False, 'shape': (6), }", 24, FLS_ERR_FORMAT, "'(n,)'");
    expect_bad("{'descr': '<f4', 'fortran_order': False, 'shape': [2, 3], }", 24, FLS_ERR_FORMAT,
               "not a tuple");
    expect_bad("{'descr': '<f4', 'fortran_order': False, 'shape': 6, }", 24, FLS_ERR_FORMAT, "not a tuple");
    expect_bad("{'descr': '<f4', 'fortran_order': False, 'shape': (-2, 3), }", 24, FLS_ERR_FORMAT,
               "negative");
    expect_bad("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3.0), }", 24, FLS_ERR_FORMAT,
               "malformed");
    expect_bad("{'descr': '<f4', 'fortran_order': False, 'shape': (2,, 3), }", 24, FLS_ERR_FORMAT,
               "integers");
    expect_bad("{'descr': '<f4', 'fortran_order': False, 'shape': (2 3), }", 24, FLS_ERR_FORMAT, "malformed");
    expect_bad("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1, 1, 1, 1, 1), }", 4,
               FLS_ERR_FORMAT, "more than 8 dimensions");
}

Test(npy, rejects_huge_shapes_without_allocating)
{
    /* one dimension beyond int64 */
    expect_bad("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", 0,
               FLS_ERR_FORMAT, "overflows int64");
    /* product beyond int64 */
    expect_bad("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", 0,
               FLS_ERR_FORMAT, "shape overflows");
    /* count fits int64, bytes do not */
    expect_bad("{'descr': '<u8', 'fortran_order': False, 'shape': (4611686018427387904,), }", 0,
               FLS_ERR_FORMAT, "shape overflows");
    /* a huge but representable shape with a tiny file: the size check fails before any allocation */
    expect_bad("{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000, 1000), }", 16, FLS_ERR_FORMAT,
               "truncated");
    /* a zero dimension makes the product 0 even next to a huge one */
    image im;
    build(&im, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 9223372036854775807), }", 0);
    fls_npy_array a;
    char err[FLS_NPY_ERR_LEN];
    cr_expect_eq(parse(&im, &a, err), FLS_OK, "%s", err);
    cr_expect_eq(a.count, 0);
    /* ... wherever the zero stands (the overflow check must not run first) */
    build(
        &im, 1,
        "{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 4611686018427387904, 0), }",
        0);
    cr_expect_eq(parse(&im, &a, err), FLS_OK, "%s", err);
    cr_expect_eq(a.count, 0);
}

Test(npy, rejects_control_characters_in_strings)
{
    /* numpy refuses these headers; a NUL must not truncate a key to a valid one */
    image im;
    build(&im, 1, "{'descrXjunk': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 24);
    unsigned char *k = memchr(im.buf, 'X', im.len);
    cr_assert_not_null(k);
    *k = '\0'; /* 'descr\0junk' reads as 'descr' to strcmp */
    fls_npy_array a;
    char err[FLS_NPY_ERR_LEN];
    cr_expect_eq(parse(&im, &a, err), FLS_ERR_FORMAT, "%s", err);
    build(&im, 1, "{'descr': '<f4\t', 'fortran_order': False, 'shape': (2, 3), }", 24);
    cr_expect_eq(parse(&im, &a, err), FLS_ERR_FORMAT, "%s", err);
}

Test(npy, rejects_size_mismatch)
{
    expect_bad("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 23, FLS_ERR_FORMAT,
               "truncated");
    expect_bad("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 0, FLS_ERR_FORMAT, "truncated");
    expect_bad("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 25, FLS_ERR_FORMAT,
               "trailing bytes");
    expect_bad("{'descr': '<f2', 'fortran_order': False, 'shape': (), }", 4, FLS_ERR_FORMAT,
               "trailing bytes");
}

/* ---- malformed prefixes ---- */

Test(npy, rejects_bad_prefixes)
{
    image im;
    fls_npy_array a;
    char err[FLS_NPY_ERR_LEN];
    const char *dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";

    build(&im, 1, dict, 8);
    im.buf[0] = 0x94;
    cr_expect_eq(parse(&im, &a, err), FLS_ERR_FORMAT);
    cr_expect(strstr(err, "bad magic"));
    build(&im, 1, dict, 8);
    memcpy(im.buf + 1, "numpy", 5);
    cr_expect_eq(parse(&im, &a, err), FLS_ERR_FORMAT);

    build(&im, 1, dict, 8);
    im.buf[6] = 4;
    cr_expect_eq(parse(&im, &a, err), FLS_ERR_FORMAT);
    cr_expect(strstr(err, "version 4.0"), "%s", err);
    build(&im, 1, dict, 8);
    im.buf[7] = 1;
    cr_expect_eq(parse(&im, &a, err), FLS_ERR_FORMAT);
    cr_expect(strstr(err, "version 1.1"), "%s", err);
    build(&im, 1, dict, 8);
    im.buf[6] = 0;
    cr_expect_eq(parse(&im, &a, err), FLS_ERR_FORMAT);

    /* header length beyond the file */
    build(&im, 1, dict, 8);
    im.buf[8] = 0xff;
    im.buf[9] = 0xff;
    cr_expect_eq(parse(&im, &a, err), FLS_ERR_FORMAT);
    cr_expect(strstr(err, "truncated header"), "%s", err);
    /* absurd v2 header length */
    build(&im, 2, dict, 8);
    im.buf[11] = 0x7f;
    cr_expect_eq(parse(&im, &a, err), FLS_ERR_FORMAT);
    cr_expect(strstr(err, "implausibly large"), "%s", err);
    /* header not ended by a newline */
    build(&im, 1, dict, 8);
    im.buf[im.len - 8 - 1] = ' '; /* the byte before the data */
    cr_expect_eq(parse(&im, &a, err), FLS_ERR_FORMAT);
    cr_expect(strstr(err, "newline"), "%s", err);
    /* header length that cuts the dict */
    build(&im, 1, dict, 8);
    im.buf[8] = 20;
    im.buf[9] = 0;
    cr_expect_eq(parse(&im, &a, err), FLS_ERR_FORMAT);

    /* every truncation of a valid file fails, none crashes */
    build(&im, 1, dict, 8);
    for (size_t n = 0; n < im.len; n++) {
        size_t off;
        cr_expect_eq(fls_npy_parse_header(im.buf, n, &a, &off, err), FLS_ERR_FORMAT, "length %zu", n);
        cr_expect_eq(a.ndim, 0);
    }
    size_t off;
    cr_expect_eq(fls_npy_parse_header(im.buf, im.len, &a, &off, err), FLS_OK);
    cr_expect_eq(off, im.len - 8);
    cr_expect_eq(off % 64, 0);
}

/* ---- files ---- */

Test(npy, file_errors_name_the_file)
{
    fls_npy_array a;
    char err[FLS_NPY_ERR_LEN];
    const char *missing = tpath("missing.npy");
    cr_expect_eq(fls_npy_read(missing, &a, err), FLS_ERR_IO);
    cr_expect(strstr(err, missing) && strstr(err, "cannot open"), "%s", err);
    cr_expect_null(a.data);

    cr_expect_eq(fls_npy_read(tmpdir, &a, err), FLS_ERR_IO);
    cr_expect(strstr(err, "not a regular file"), "%s", err);

    const char *empty = tpath("empty.npy");
    write_raw(empty, "", 0);
    cr_expect_eq(fls_npy_read(empty, &a, err), FLS_ERR_FORMAT);
    cr_expect(strstr(err, empty) && strstr(err, "bad magic"), "%s", err);

    const char *text = tpath("text.npy");
    write_raw(text, "hello, world\n", 13);
    cr_expect_eq(fls_npy_read(text, &a, err), FLS_ERR_FORMAT);

    /* truncated data on disk */
    image im;
    build(&im, 1, "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }", 24);
    const char *trunc = tpath("trunc.npy");
    for (size_t n = 0; n < im.len; n++) {
        write_raw(trunc, im.buf, n);
        cr_expect_eq(fls_npy_read(trunc, &a, err), FLS_ERR_FORMAT, "length %zu", n);
        cr_expect_null(a.data);
    }
    write_raw(trunc, im.buf, im.len);
    cr_expect_eq(fls_npy_read(trunc, &a, err), FLS_OK, "%s", err);
    fls_npy_free(&a);

    cr_expect_eq(fls_npy_read(NULL, &a, err), FLS_ERR_NULL);
}

Test(npy, read_matrix_converts_on_load)
{
    const float v[6] = {1.0f, -0.333333343f, 65504.0f, 1e-8f, 3.14159274f, -0.0f};
    const int64_t shape[2] = {2, 3};
    char err[FLS_NPY_ERR_LEN];
    const char *p = tpath("m.npy");
    cr_assert_eq(fls_npy_write(p, FLS_NPY_F32, 2, shape, v, err), FLS_OK);

    fls_npy_matrix m;
    cr_assert_eq(fls_npy_read_matrix(p, NULL, &m, err), FLS_OK, "%s", err);
    cr_expect_eq(m.dtype, FLS_DTYPE_F32);
    cr_expect_eq(m.rows, 2);
    cr_expect_eq(m.cols, 3);
    cr_expect_eq(m.ndim, 2);
    cr_expect(memcmp(m.data, v, sizeof v) == 0);
    fls_npy_matrix_free(&m);

    const fls_dtype bf = FLS_DTYPE_BF16, h = FLS_DTYPE_F16, f = FLS_DTYPE_F32;
    cr_assert_eq(fls_npy_read_matrix(p, &bf, &m, err), FLS_OK, "%s", err);
    cr_expect_eq(m.dtype, FLS_DTYPE_BF16);
    cr_expect_eq(m.file_dtype, FLS_NPY_F32);
    for (int i = 0; i < 6; i++)
        cr_expect_eq(((uint16_t *)m.data)[i], fls_f32_to_bf16(v[i]), "element %d", i);
    fls_npy_matrix_free(&m);

    cr_assert_eq(fls_npy_read_matrix(p, &h, &m, err), FLS_OK, "%s", err);
    uint16_t hv[6];
    for (int i = 0; i < 6; i++) {
        hv[i] = fls_f32_to_f16(v[i]);
        cr_expect_eq(((uint16_t *)m.data)[i], hv[i], "element %d", i);
    }
    fls_npy_matrix_free(&m);

    /* float16 file: kept, widened exactly, or rounded once to bf16 */
    const int64_t s1[1] = {6};
    cr_assert_eq(fls_npy_write(p, FLS_NPY_F16, 1, s1, hv, err), FLS_OK);
    cr_assert_eq(fls_npy_read_matrix(p, NULL, &m, err), FLS_OK, "%s", err);
    cr_expect_eq(m.dtype, FLS_DTYPE_F16);
    cr_expect_eq(m.ndim, 1);
    cr_expect_eq(m.rows, 1);
    cr_expect_eq(m.cols, 6);
    fls_npy_matrix_free(&m);
    cr_assert_eq(fls_npy_read_matrix(p, &f, &m, err), FLS_OK, "%s", err);
    for (int i = 0; i < 6; i++)
        cr_expect_eq(((float *)m.data)[i], fls_f16_to_f32(hv[i]));
    fls_npy_matrix_free(&m);
    cr_assert_eq(fls_npy_read_matrix(p, &bf, &m, err), FLS_OK, "%s", err);
    for (int i = 0; i < 6; i++)
        cr_expect_eq(((uint16_t *)m.data)[i], fls_f32_to_bf16(fls_f16_to_f32(hv[i])));
    fls_npy_matrix_free(&m);
}

Test(npy, read_matrix_rejects_what_is_not_a_float_matrix)
{
    char err[FLS_NPY_ERR_LEN];
    fls_npy_matrix m;
    const char *p = tpath("bad.npy");
    int64_t iv[4] = {1, 2, 3, 4};
    const int64_t s2[2] = {2, 2}, s3[3] = {1, 2, 2}, s0[2] = {0, 4};
    cr_assert_eq(fls_npy_write(p, FLS_NPY_I64, 2, s2, iv, err), FLS_OK);
    cr_expect_eq(fls_npy_read_matrix(p, NULL, &m, err), FLS_ERR_DTYPE);
    cr_expect(strstr(err, "int64") && strstr(err, "expected float32 ('<f4') or float16 ('<f2')"), "%s", err);
    cr_expect_null(m.data);
    cr_assert_eq(fls_npy_write(p, FLS_NPY_F32, 3, s3, iv, err), FLS_OK);
    cr_expect_eq(fls_npy_read_matrix(p, NULL, &m, err), FLS_ERR_SHAPE);
    cr_expect(strstr(err, "3 dimensions"), "%s", err);
    cr_assert_eq(fls_npy_write(p, FLS_NPY_F32, 0, NULL, iv, err), FLS_OK);
    cr_expect_eq(fls_npy_read_matrix(p, NULL, &m, err), FLS_ERR_SHAPE);
    cr_assert_eq(fls_npy_write(p, FLS_NPY_F32, 2, s0, NULL, err), FLS_OK);
    cr_expect_eq(fls_npy_read_matrix(p, NULL, &m, err), FLS_ERR_SIZE);
    cr_expect(strstr(err, "empty"), "%s", err);
    cr_expect_null(m.data);
}

/* ---- atomic writes ---- */

Test(npy, failed_write_leaves_nothing)
{
    char err[FLS_NPY_ERR_LEN];
    int64_t v[2] = {1, 2};
    const int64_t s[1] = {2};
    const char *nodir = tpath("no/such/dir/x.npy");
    cr_expect_eq(fls_npy_write(nodir, FLS_NPY_I64, 1, s, v, err), FLS_ERR_IO);
    cr_expect(strstr(err, "cannot create"), "%s", err);
    cr_expect_eq(dir_entries(), 0);

    /* a bad argument after the temporary file exists: removed, target untouched */
    const char *p = tpath("keep.npy");
    write_raw(p, "old", 3);
    const int64_t neg[1] = {-1};
    cr_expect_eq(fls_npy_write(p, FLS_NPY_I64, 1, neg, v, err), FLS_ERR_SHAPE);
    cr_expect_eq(fls_npy_write(p, FLS_NPY_I64, 9, s, v, err), FLS_ERR_SHAPE);
    cr_expect_eq(fls_npy_write(p, (fls_npy_dtype)17, 1, s, v, err), FLS_ERR_DTYPE);
    cr_expect_eq(fls_npy_write(p, FLS_NPY_I64, 1, s, NULL, err), FLS_ERR_NULL);
    cr_expect_eq(dir_entries(), 1);
    struct stat sb;
    cr_expect_eq(stat(p, &sb), 0);
    cr_expect_eq(sb.st_size, 3);

    /* the target is a directory: rename fails, the temporary file goes */
    char sub[512];
    snprintf(sub, sizeof sub, "%s/adir", tmpdir);
    cr_assert_eq(mkdir(sub, 0755), 0);
    cr_expect_eq(fls_npy_write(sub, FLS_NPY_I64, 1, s, v, err), FLS_ERR_IO);
    cr_expect_eq(dir_entries(), 2);
    rmdir(sub);

    /* abort: nothing left, old file intact */
    fls_npy_file f;
    cr_assert_eq(fls_npy_file_begin(&f, p, err), FLS_OK);
    fputs("half-written", f.fp);
    cr_expect_eq(dir_entries(), 2);
    fls_npy_file_abort(&f);
    cr_expect_eq(dir_entries(), 1);
    cr_expect_eq(stat(p, &sb), 0);
    cr_expect_eq(sb.st_size, 3);
    fls_npy_file_abort(&f); /* a second abort is harmless */

    /* commit replaces the old file */
    cr_expect_eq(fls_npy_write(p, FLS_NPY_I64, 1, s, v, err), FLS_OK);
    fls_npy_array a;
    cr_assert_eq(fls_npy_read(p, &a, err), FLS_OK);
    cr_expect_eq(((int64_t *)a.data)[1], 2);
    fls_npy_free(&a);
    cr_expect_eq(dir_entries(), 1);
}

Test(npy, output_mode_follows_umask)
{
    mode_t old = umask(022);
    char err[FLS_NPY_ERR_LEN];
    const int64_t s[1] = {1};
    int64_t v = 5;
    const char *p = tpath("mode.npy");
    cr_assert_eq(fls_npy_write(p, FLS_NPY_I64, 1, s, &v, err), FLS_OK);
    umask(old);
    struct stat sb;
    cr_assert_eq(stat(p, &sb), 0);
    cr_expect_eq(sb.st_mode & 0777, 0644);
}

Test(npy, random_corruptions_never_crash)
{
    /* Every byte of a valid file flipped to random values, many times over:
     * the parser either accepts (a benign change, e.g. in padding) with a
     * consistent size, or refuses with a message. Run under valgrind too. */
    image ref;
    build(&ref, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 24);
    uint64_t s = 12345;
    for (int iter = 0; iter < 20000; iter++) {
        image im = ref;
        int flips = 1 + iter % 4;
        for (int k = 0; k < flips; k++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            size_t pos = (size_t)(s >> 33) % im.len;
            im.buf[pos] = (unsigned char)(s >> 20);
        }
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        size_t len = iter % 5 == 0 ? (size_t)(s >> 33) % (im.len + 1) : im.len;
        fls_npy_array a;
        size_t off = 0;
        char err[FLS_NPY_ERR_LEN] = "";
        fls_status st = fls_npy_parse_header(im.buf, len, &a, &off, err);
        if (st == FLS_OK) {
            cr_assert_eq(off + a.bytes, len);
            cr_assert(a.ndim >= 0 && a.ndim <= FLS_NPY_MAX_DIMS);
        } else {
            cr_assert(st == FLS_ERR_FORMAT || st == FLS_ERR_DTYPE, "status %d", st);
            cr_assert(err[0] != '\0');
            cr_assert_eq(a.ndim, 0);
        }
    }
}

/* Found by tests/fuzz (fuzz_npy, regress_npy/writer-refused-empty-shape-with-huge-dims.npy):
 * an empty shape whose other dimensions multiply past int64 is accepted by
 * the reader; the writer must write it back, not call it an overflow. */
Test(npy, writer_takes_every_shape_the_reader_accepts)
{
    const int64_t shape[3] = {99999999999, 99999999999, 0};
    const char *p = tpath("empty_huge.npy");
    char err[FLS_NPY_ERR_LEN];
    cr_assert_eq(fls_npy_write(p, FLS_NPY_F32, 3, shape, NULL, err), FLS_OK, "%s", err);
    fls_npy_array a;
    cr_assert_eq(fls_npy_read(p, &a, err), FLS_OK, "%s", err);
    cr_expect_eq(a.ndim, 3);
    cr_expect_eq(a.count, 0);
    cr_expect(a.shape[0] == shape[0] && a.shape[1] == shape[1] && a.shape[2] == 0);
    fls_npy_free(&a);
    const int64_t over[2] = {(int64_t)1 << 40, (int64_t)1 << 40};
    cr_expect_eq(fls_npy_write(p, FLS_NPY_F32, 2, over, NULL, err), FLS_ERR_SIZE);
}
