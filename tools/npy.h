/*
 * npy.h — reading and writing NumPy .npy files: the static library fls_npy of
 * the command line (tools/meson.build), also used by the tests of tests/cli;
 * not part of libflashsample and not installed. Public API only.
 *
 * Reader: strict. Accepted are format versions 1.0, 2.0 and 3.0, a header that
 * is exactly a Python dict with the keys 'descr', 'fortran_order' and 'shape',
 * little-endian dtypes '<f4', '<f2', '<i8', '<u8' (and '|'/'=' are not accepted:
 * an .npy file written on a little-endian machine always says '<'), C order
 * only, and a data section whose size is exactly the product of the shape
 * times the item size. Anything else is FLS_ERR_FORMAT (malformed file),
 * FLS_ERR_DTYPE (a well-formed file of a dtype we do not read), FLS_ERR_IO
 * (the file cannot be opened or read) or FLS_ERR_OUT_OF_MEMORY, with a
 * message in err that names the file and the problem.
 *
 * bf16 has no NumPy dtype: fls_npy_read_matrix loads a float32 or float16
 * file and converts it on load (round to nearest even, fls_f32_to_bf16).
 *
 * Writer: writes version 1.0 (2.0 when the header needs it) to a temporary
 * name in the target's directory and renames it over the target, so a failed
 * or interrupted run never leaves a half-written file. The fls_npy_file_*
 * functions give the same guarantee for any output (CSV, JSON).
 */
#ifndef FLS_NPY_H
#define FLS_NPY_H

#include "flashsample.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FLS_NPY_MAX_DIMS 8
#define FLS_NPY_ERR_LEN  256
/* Largest header accepted on read (numpy itself refuses more than 10000
 * bytes by default); bounds what a malformed length field can allocate. */
#define FLS_NPY_MAX_HEADER (1u << 20)

/* Named by bits, like fls_dtype; numpy's descr counts bytes ('<i8' is int64). */
typedef enum fls_npy_dtype {
    FLS_NPY_F32 = 0, /* '<f4' float32 */
    FLS_NPY_F16 = 1, /* '<f2' float16 */
    FLS_NPY_I64 = 2, /* '<i8' int64 */
    FLS_NPY_U64 = 3, /* '<u8' uint64 */
    FLS_NPY_F64 = 4, /* '<f8' float64: read only with FLS_NPY_ACCEPT_F64 (fls_npy_read_flags) */
    FLS_NPY_I32 = 5, /* '<i4' int32: read only with FLS_NPY_ACCEPT_I32 (bitmasks, counts) */
    FLS_NPY_U8 = 6   /* '|u1' uint8: read only with FLS_NPY_ACCEPT_U8 (row selections) */
} fls_npy_dtype;
#define FLS_NPY_DTYPE_LAST FLS_NPY_U8

/* Flags of fls_npy_read_flags / fls_npy_parse_header_flags. */
#define FLS_NPY_ACCEPT_F64 1u /* read '<f8' (float64); without it float64 is FLS_ERR_DTYPE */
/* read '<i4' (int32) and '|u1' (uint8): the few inputs that take them ask
 * for them (the mask and penalty flags of `sample`); every other input
 * refuses them as before */
#define FLS_NPY_ACCEPT_I32 2u
#define FLS_NPY_ACCEPT_U8  4u

/* A loaded array. data is 64-byte aligned, owned by the array (free with
 * fls_npy_free), and NULL when count is 0. */
typedef struct fls_npy_array {
    fls_npy_dtype dtype;
    int ndim;
    int64_t shape[FLS_NPY_MAX_DIMS];
    int64_t count;   /* product of shape (1 for a 0-d array) */
    size_t itemsize; /* bytes per element */
    size_t bytes;    /* count * itemsize */
    void *data;
} fls_npy_array;

size_t fls_npy_dtype_size(fls_npy_dtype dtype);
/* '<f4', '<f2', '<i8', '<u8', '<f8' ("?" for an unknown value). */
const char *fls_npy_dtype_descr(fls_npy_dtype dtype);
/* "float32", "float16", "int64", "uint64", "float64". */
const char *fls_npy_dtype_name(fls_npy_dtype dtype);

/* Parse the header of an .npy image held in memory (buf, len bytes: the
 * whole file). On success fills arr's dtype/ndim/shape/count/itemsize/bytes
 * (arr->data = NULL) and *data_offset, and checks that the data section has
 * exactly arr->bytes bytes. err (may be NULL) receives a message naming what. */
fls_status fls_npy_parse_header(const void *buf, size_t len, fls_npy_array *arr, size_t *data_offset,
                                char err[FLS_NPY_ERR_LEN]);
fls_status fls_npy_parse_header_flags(const void *buf, size_t len, unsigned flags, fls_npy_array *arr,
                                      size_t *data_offset, char err[FLS_NPY_ERR_LEN]);

/* Read a whole file. On error *arr is left zeroed (data NULL) and err says why.
 * A data section larger than the memory this process may use
 * (fls_npy_memory_limit) is FLS_ERR_OUT_OF_MEMORY before anything is
 * allocated, with a message that gives both sizes. */
fls_status fls_npy_read(const char *path, fls_npy_array *arr, char err[FLS_NPY_ERR_LEN]);
fls_status fls_npy_read_flags(const char *path, unsigned flags, fls_npy_array *arr,
                              char err[FLS_NPY_ERR_LEN]);

/* The most memory this process can expect to allocate, in bytes: the
 * smallest of the machine's physical memory, the address-space and data
 * limits (ulimit -v, -d) and the cgroup's memory.max; SIZE_MAX if none is
 * known. An allocation above it would fail or be killed when touched. */
size_t fls_npy_memory_limit(void);
/* Whether bytes fit under fls_npy_memory_limit(); if not, and msg is not
 * NULL, a sentence "X GiB ... larger than the Y GiB of memory available
 * (<which limit>)" of at most cap bytes. */
int fls_npy_memory_fits(size_t bytes, char *msg, size_t cap);

void fls_npy_free(fls_npy_array *arr); /* NULL and zeroed arrays are fine */

/* A 2-D float matrix loaded for the sampler, stored as dtype. */
typedef struct fls_npy_matrix {
    void *data;               /* 64-byte aligned; free with fls_npy_matrix_free */
    fls_dtype dtype;          /* storage dtype (the one asked for) */
    fls_npy_dtype file_dtype; /* what the file held */
    int ndim;                 /* of the file: 1 or 2 */
    int64_t rows;
    int64_t cols;
} fls_npy_matrix;

/* Read a float32 or float16 file and store it as *want (F32, F16 or BF16;
 * want NULL keeps the file's dtype), converting on load: f16 -> f32 is exact; f32 -> f16 and f32/f16 -> bf16
 * round to nearest even (one rounding). ndim must be 1 or 2: a 1-D file of n
 * entries is returned as 1 x n. Integer files are FLS_ERR_DTYPE, other ranks
 * FLS_ERR_SHAPE, an empty array FLS_ERR_SIZE. */
fls_status fls_npy_read_matrix(const char *path, const fls_dtype *want, fls_npy_matrix *m,
                               char err[FLS_NPY_ERR_LEN]);
void fls_npy_matrix_free(fls_npy_matrix *m); /* NULL and zeroed structs are fine */

/* Atomic output file: fls_npy_file_begin opens a temporary file next to path
 * (mode 0666 & ~umask, like fopen), fls_npy_file_commit flushes, syncs, closes
 * and renames it over path; fls_npy_file_abort closes and removes it. After
 * commit or abort the struct is reset; abort on a reset struct does nothing. */
typedef struct fls_npy_file {
    FILE *fp;
    char *tmp_path;
    char *path;
} fls_npy_file;

/* Whether an output at path could be begun, without creating anything: path
 * is not an existing non-regular file and its directory takes new files.
 * Call it before the work, and fls_npy_file_begin only when the result is
 * ready, so an interrupted run leaves no temporary file. */
fls_status fls_npy_file_check(const char *path, char err[FLS_NPY_ERR_LEN]);

fls_status fls_npy_file_begin(fls_npy_file *f, const char *path, char err[FLS_NPY_ERR_LEN]);
fls_status fls_npy_file_commit(fls_npy_file *f, char err[FLS_NPY_ERR_LEN]);
void fls_npy_file_abort(fls_npy_file *f);

/* Write the header and data of an array into an open stream. */
fls_status fls_npy_write_stream(FILE *fp, fls_npy_dtype dtype, int ndim, const int64_t *shape,
                                const void *data, char err[FLS_NPY_ERR_LEN]);

/* Write an .npy file atomically (temporary name + rename). ndim 0..8. */
fls_status fls_npy_write(const char *path, fls_npy_dtype dtype, int ndim, const int64_t *shape,
                         const void *data, char err[FLS_NPY_ERR_LEN]);

#ifdef __cplusplus
}
#endif

#endif /* FLS_NPY_H */
