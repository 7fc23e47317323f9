/*
 * npy.c — strict .npy reader and atomic .npy writer (see npy.h).
 *
 * File layout (numpy/lib/format.py): the 6-byte magic "\x93NUMPY", one byte
 * major and one byte minor version, the header length (little-endian uint16
 * for 1.0, uint32 for 2.0 and 3.0), the header: a Python dict literal padded
 * with spaces and ended by '\n', then the raw data in C order.
 */
#include "tools/npy.h"

#include <errno.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "npy.c reads and writes little-endian data in place; port it before using a big-endian host"
#endif

static const char npy_magic[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static fls_status
fail(char *err, fls_status st, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, FLS_NPY_ERR_LEN, fmt, ap);
        va_end(ap);
    }
    return st;
}

size_t fls_npy_dtype_size(fls_npy_dtype dtype)
{
    switch (dtype) {
    case FLS_NPY_F32:
        return 4;
    case FLS_NPY_F16:
        return 2;
    case FLS_NPY_I64:
    case FLS_NPY_U64:
    case FLS_NPY_F64:
        return 8;
    case FLS_NPY_I32:
        return 4;
    case FLS_NPY_U8:
        return 1;
    }
    return 0;
}

const char *fls_npy_dtype_descr(fls_npy_dtype dtype)
{
    switch (dtype) {
    case FLS_NPY_F32:
        return "<f4";
    case FLS_NPY_F16:
        return "<f2";
    case FLS_NPY_I64:
        return "<i8";
    case FLS_NPY_U64:
        return "<u8";
    case FLS_NPY_F64:
        return "<f8";
    case FLS_NPY_I32:
        return "<i4";
    case FLS_NPY_U8:
        return "|u1";
    }
    return "?";
}

const char *fls_npy_dtype_name(fls_npy_dtype dtype)
{
    switch (dtype) {
    case FLS_NPY_F32:
        return "float32";
    case FLS_NPY_F16:
        return "float16";
    case FLS_NPY_I64:
        return "int64";
    case FLS_NPY_U64:
        return "uint64";
    case FLS_NPY_F64:
        return "float64";
    case FLS_NPY_I32:
        return "int32";
    case FLS_NPY_U8:
        return "uint8";
    }
    return "?";
}

/* ---- header parser: a tiny recursive-descent parser for exactly the Python
 * literals numpy writes (strings, True/False, tuples of ints). ---- */

typedef struct parser {
    const char *s;
    size_t n;
    size_t i;
} parser;

static int is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static void skip_ws(parser *p)
{
    while (p->i < p->n && is_ws(p->s[p->i]))
        p->i++;
}

static int peek(const parser *p)
{
    return p->i < p->n ? (unsigned char)p->s[p->i] : -1;
}

/* A quoted string without escapes; returns 0 and copies it into out (cap
 * bytes) or -1. */
static int parse_string(parser *p, char *out, size_t cap)
{
    int q = peek(p);
    if (q != '\'' && q != '"')
        return -1;
    p->i++;
    size_t k = 0;
    while (p->i < p->n && p->s[p->i] != (char)q) {
        char c = p->s[p->i];
        if (c == '\\' || (unsigned char)c < 0x20 || c == 0x7f || k + 1 >= cap) /* numpy rejects these too */
            return -1;
        out[k++] = c;
        p->i++;
    }
    if (p->i >= p->n)
        return -1;
    p->i++; /* closing quote */
    out[k] = '\0';
    return 0;
}

static int is_ident_char(int c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

static int parse_keyword(parser *p, const char *kw)
{
    size_t len = strlen(kw);
    if (p->n - p->i < len || memcmp(p->s + p->i, kw, len) != 0)
        return 0;
    if (p->i + len < p->n && is_ident_char((unsigned char)p->s[p->i + len]))
        return 0;
    p->i += len;
    return 1;
}

/* Shape tuple. Returns FLS_OK or an error with a message. */
static fls_status parse_shape(parser *p, fls_npy_array *arr, const char *name, char *err)
{
    if (peek(p) != '(')
        return fail(err, FLS_ERR_FORMAT, "%s: header 'shape' is not a tuple", name);
    p->i++;
    int ndim = 0;
    int trailing_comma = 0;
    for (;;) {
        skip_ws(p);
        int c = peek(p);
        if (c == ')') {
            p->i++;
            break;
        }
        if (c == '-')
            return fail(err, FLS_ERR_FORMAT, "%s: header 'shape' has a negative dimension", name);
        if (c < '0' || c > '9')
            return fail(err, FLS_ERR_FORMAT, "%s: header 'shape' is not a tuple of integers", name);
        uint64_t v = 0;
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
            unsigned d = (unsigned)(p->s[p->i] - '0');
            if (v > ((uint64_t)INT64_MAX - d) / 10)
                return fail(err, FLS_ERR_FORMAT, "%s: header 'shape' has a dimension that overflows int64",
                            name);
            v = v * 10 + d;
            p->i++;
        }
        if (peek(p) == 'L') /* Python 2 long literal, written by old numpy */
            p->i++;
        if (ndim >= FLS_NPY_MAX_DIMS)
            return fail(err, FLS_ERR_FORMAT, "%s: more than %d dimensions", name, FLS_NPY_MAX_DIMS);
        arr->shape[ndim++] = (int64_t)v;
        skip_ws(p);
        c = peek(p);
        trailing_comma = 0;
        if (c == ',') {
            p->i++;
            trailing_comma = 1;
        } else if (c == ')') {
            p->i++;
            break;
        } else {
            return fail(err, FLS_ERR_FORMAT, "%s: header 'shape' tuple is malformed", name);
        }
    }
    /* "(3)" is the integer 3 in Python, not a tuple: numpy rejects it too. */
    if (ndim == 1 && !trailing_comma)
        return fail(err, FLS_ERR_FORMAT, "%s: header 'shape' is '(n)', not the tuple '(n,)'", name);
    arr->ndim = ndim;
    return FLS_OK;
}

static fls_status parse_descr(const char *descr, unsigned flags, fls_npy_dtype *dtype, const char *name,
                              char *err)
{
    if ((flags & FLS_NPY_ACCEPT_F64) && strcmp(descr, "<f8") == 0) {
        *dtype = FLS_NPY_F64;
        return FLS_OK;
    }
    if ((flags & FLS_NPY_ACCEPT_I32) && strcmp(descr, "<i4") == 0) {
        *dtype = FLS_NPY_I32;
        return FLS_OK;
    }
    /* numpy writes uint8 as '|u1' ('<u1' is the same type); bool '|b1' is 0 or 1 in a byte */
    if ((flags & FLS_NPY_ACCEPT_U8) &&
        (strcmp(descr, "|u1") == 0 || strcmp(descr, "<u1") == 0 || strcmp(descr, "|b1") == 0)) {
        *dtype = FLS_NPY_U8;
        return FLS_OK;
    }
    static const struct {
        const char *descr;
        fls_npy_dtype dtype;
    } known[] = {{"<f4", FLS_NPY_F32}, {"<f2", FLS_NPY_F16}, {"<i8", FLS_NPY_I64}, {"<u8", FLS_NPY_U64}};
    for (size_t k = 0; k < sizeof known / sizeof known[0]; k++)
        if (strcmp(descr, known[k].descr) == 0) {
            *dtype = known[k].dtype;
            return FLS_OK;
        }
    /* Name the common dtypes the reader refuses, so a message can say what
     * to convert (float64 is numpy's default). */
    static const struct {
        const char *descr, *name;
    } others[] = {{"<f8", "float64"},
                  {">f8", "big-endian float64"},
                  {">f4", "big-endian float32"},
                  {">f2", "big-endian float16"},
                  {"<i4", "int32"},
                  {"<i2", "int16"},
                  {"|i1", "int8"},
                  {"|u1", "uint8"},
                  {"<u2", "uint16"},
                  {"<u4", "uint32"},
                  {"|b1", "bool"},
                  {"<c8", "complex64"},
                  {"<c16", "complex128"},
                  {"|O", "object"},
                  {"<f16", "longdouble"},
                  {">i8", "big-endian int64"},
                  {">u8", "big-endian uint64"}};
    for (size_t k = 0; k < sizeof others / sizeof others[0]; k++)
        if (strcmp(descr, others[k].descr) == 0)
            return fail(err, FLS_ERR_DTYPE, "%s: unsupported dtype '%s' (%s)", name, descr, others[k].name);
    return fail(err, FLS_ERR_DTYPE, "%s: unsupported dtype '%s'", name, descr);
}

/* Parse the dict in hdr[0..n). */
static fls_status parse_dict(const char *hdr, size_t n, unsigned flags, fls_npy_array *arr, const char *name,
                             char *err)
{
    parser p = {hdr, n, 0};
    int have_descr = 0, have_fortran = 0, have_shape = 0;
    int fortran = 0;
    fls_status st;

    if (n == 0 || hdr[n - 1] != '\n')
        return fail(err, FLS_ERR_FORMAT, "%s: header does not end with a newline", name);
    skip_ws(&p);
    if (peek(&p) != '{')
        return fail(err, FLS_ERR_FORMAT, "%s: header is not a Python dict", name);
    p.i++;
    for (;;) {
        skip_ws(&p);
        if (peek(&p) == '}') {
            p.i++;
            break;
        }
        char key[32];
        if (parse_string(&p, key, sizeof key) != 0)
            return fail(err, FLS_ERR_FORMAT, "%s: header dict has a malformed key", name);
        skip_ws(&p);
        if (peek(&p) != ':')
            return fail(err, FLS_ERR_FORMAT, "%s: header dict is missing ':' after '%s'", name, key);
        p.i++;
        skip_ws(&p);
        if (strcmp(key, "descr") == 0) {
            if (have_descr++)
                return fail(err, FLS_ERR_FORMAT, "%s: header repeats 'descr'", name);
            if (peek(&p) == '[')
                return fail(err, FLS_ERR_DTYPE, "%s: structured dtypes are not supported", name);
            char descr[32];
            if (parse_string(&p, descr, sizeof descr) != 0)
                return fail(err, FLS_ERR_FORMAT, "%s: header 'descr' is not a string", name);
            if ((st = parse_descr(descr, flags, &arr->dtype, name, err)) != FLS_OK)
                return st;
        } else if (strcmp(key, "fortran_order") == 0) {
            if (have_fortran++)
                return fail(err, FLS_ERR_FORMAT, "%s: header repeats 'fortran_order'", name);
            if (parse_keyword(&p, "True"))
                fortran = 1;
            else if (parse_keyword(&p, "False"))
                fortran = 0;
            else
                return fail(err, FLS_ERR_FORMAT, "%s: header 'fortran_order' is not True or False", name);
        } else if (strcmp(key, "shape") == 0) {
            if (have_shape++)
                return fail(err, FLS_ERR_FORMAT, "%s: header repeats 'shape'", name);
            if ((st = parse_shape(&p, arr, name, err)) != FLS_OK)
                return st;
        } else {
            return fail(err, FLS_ERR_FORMAT, "%s: header has an unexpected key '%s'", name, key);
        }
        skip_ws(&p);
        if (peek(&p) == ',') {
            p.i++;
            continue;
        }
        if (peek(&p) == '}') {
            p.i++;
            break;
        }
        return fail(err, FLS_ERR_FORMAT, "%s: header dict is malformed", name);
    }
    skip_ws(&p); /* padding spaces and the final newline */
    if (p.i != n)
        return fail(err, FLS_ERR_FORMAT, "%s: unexpected text after the header dict", name);
    if (!have_descr || !have_fortran || !have_shape)
        return fail(err, FLS_ERR_FORMAT, "%s: header lacks %s", name,
                    !have_descr     ? "'descr'"
                    : !have_fortran ? "'fortran_order'"
                                    : "'shape'");
    if (fortran)
        return fail(
            err, FLS_ERR_FORMAT,
            "%s: fortran_order is True; only C-order arrays are supported (use numpy.ascontiguousarray)",
            name);
    return FLS_OK;
}

/* Prefix: magic, version, header length. Needs at least 12 bytes or the
 * whole (shorter) file. Sets *hdr_start and *hdr_len. */
static fls_status parse_prefix(const unsigned char *b, size_t avail, size_t *hdr_start, size_t *hdr_len,
                               const char *name, char *err)
{
    if (avail < 10 || memcmp(b, npy_magic, sizeof npy_magic) != 0)
        return fail(err, FLS_ERR_FORMAT, "%s: not an .npy file (bad magic)", name);
    unsigned major = b[6], minor = b[7];
    if (minor != 0 || major < 1 || major > 3)
        return fail(err, FLS_ERR_FORMAT, "%s: unsupported .npy format version %u.%u (1.0, 2.0, 3.0 are read)",
                    name, major, minor);
    if (major == 1) {
        *hdr_start = 10;
        *hdr_len = (size_t)b[8] | (size_t)b[9] << 8;
    } else {
        if (avail < 12)
            return fail(err, FLS_ERR_FORMAT, "%s: truncated .npy prefix", name);
        *hdr_start = 12;
        *hdr_len = (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24;
    }
    if (*hdr_len > FLS_NPY_MAX_HEADER)
        return fail(err, FLS_ERR_FORMAT, "%s: header length %zu is implausibly large", name, *hdr_len);
    return FLS_OK;
}

/* Shape product and size, with overflow checks, then the data-size check. */
static fls_status finish_header(fls_npy_array *arr, uint64_t data_bytes, const char *name, char *err)
{
    uint64_t count = 1;
    int empty = 0;
    for (int k = 0; k < arr->ndim; k++)
        empty |= arr->shape[k] == 0;
    for (int k = 0; k < arr->ndim && !empty; k++) { /* a zero dimension makes any shape empty */
        uint64_t d = (uint64_t)arr->shape[k];
        if (count > (uint64_t)INT64_MAX / d)
            return fail(err, FLS_ERR_FORMAT, "%s: shape overflows (product of dimensions exceeds int64)",
                        name);
        count *= d;
    }
    if (empty)
        count = 0;
    arr->itemsize = fls_npy_dtype_size(arr->dtype);
    if (count > (uint64_t)INT64_MAX / arr->itemsize || count * arr->itemsize > (uint64_t)SIZE_MAX)
        return fail(err, FLS_ERR_FORMAT, "%s: shape overflows (data size exceeds the address space)", name);
    arr->count = (int64_t)count;
    arr->bytes = (size_t)(count * arr->itemsize);
    if (data_bytes != (uint64_t)arr->bytes)
        return fail(err, FLS_ERR_FORMAT, "%s: %s: data section has %llu bytes, shape needs %zu (%lld x %s)",
                    name, data_bytes < (uint64_t)arr->bytes ? "truncated" : "trailing bytes",
                    (unsigned long long)data_bytes, arr->bytes, (long long)arr->count,
                    fls_npy_dtype_descr(arr->dtype));
    return FLS_OK;
}

static fls_status parse_all(const unsigned char *b, size_t avail, uint64_t file_size, unsigned flags,
                            fls_npy_array *arr, size_t *data_offset, const char *name, char *err)
{
    size_t hs = 0, hl = 0;
    fls_status st;
    memset(arr, 0, sizeof *arr);
    if ((st = parse_prefix(b, avail, &hs, &hl, name, err)) != FLS_OK)
        return st;
    if (file_size < hs + hl || avail < hs + hl)
        return fail(err, FLS_ERR_FORMAT, "%s: truncated header (%zu bytes announced)", name, hl);
    if ((st = parse_dict((const char *)b + hs, hl, flags, arr, name, err)) != FLS_OK) {
        memset(arr, 0, sizeof *arr);
        return st;
    }
    if ((st = finish_header(arr, file_size - (hs + hl), name, err)) != FLS_OK) {
        memset(arr, 0, sizeof *arr);
        return st;
    }
    *data_offset = hs + hl;
    return FLS_OK;
}

fls_status fls_npy_parse_header_flags(const void *buf, size_t len, unsigned flags, fls_npy_array *arr,
                                      size_t *data_offset, char err[FLS_NPY_ERR_LEN])
{
    if (!buf || !arr || !data_offset)
        return fail(err, FLS_ERR_NULL, "fls_npy_parse_header: NULL argument");
    return parse_all(buf, len, len, flags, arr, data_offset, "<memory>", err);
}

fls_status fls_npy_parse_header(const void *buf, size_t len, fls_npy_array *arr, size_t *data_offset,
                                char err[FLS_NPY_ERR_LEN])
{
    return fls_npy_parse_header_flags(buf, len, 0u, arr, data_offset, err);
}

/* ---- how much memory this process may use ---- */

static void limit_min(size_t *lim, const char **what, uint64_t v, const char *name)
{
    if (v > 0 && v < (uint64_t)*lim) {
        *lim = (size_t)v;
        *what = name;
    }
}

static size_t memory_limit(const char **what)
{
    size_t lim = SIZE_MAX;
    *what = "unknown";
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    if (pages > 0 && psz > 0)
        limit_min(&lim, what, (uint64_t)pages * (uint64_t)psz, "the machine's physical memory");
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        limit_min(&lim, what, (uint64_t)rl.rlim_cur, "the address-space limit, ulimit -v");
    if (getrlimit(RLIMIT_DATA, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        limit_min(&lim, what, (uint64_t)rl.rlim_cur, "the data-segment limit, ulimit -d");
    /* cgroup v2, then v1 */
    static const char *const cg[2] = {"/sys/fs/cgroup/memory.max",
                                      "/sys/fs/cgroup/memory/memory.limit_in_bytes"};
    for (int k = 0; k < 2; k++) {
        FILE *fp = fopen(cg[k], "r");
        if (!fp)
            continue;
        char buf[64];
        if (fgets(buf, sizeof buf, fp)) {
            char *end;
            errno = 0;
            unsigned long long v = strtoull(buf, &end, 10);
            if (end != buf && errno == 0)
                limit_min(&lim, what, (uint64_t)v, "the container's memory limit (cgroup)");
        }
        fclose(fp);
        break;
    }
    return lim;
}

size_t fls_npy_memory_limit(void)
{
    const char *what;
    return memory_limit(&what);
}

int fls_npy_memory_fits(size_t bytes, char *msg, size_t cap)
{
    const char *what;
    size_t lim = memory_limit(&what);
    if (bytes <= lim)
        return 1;
    if (msg && cap)
        snprintf(msg, cap, "%.2f GiB is more than the %.2f GiB of memory available (%s)",
                 (double)bytes / 1073741824.0, (double)lim / 1073741824.0, what);
    return 0;
}

void fls_npy_free(fls_npy_array *arr)
{
    if (!arr)
        return;
    free(arr->data);
    memset(arr, 0, sizeof *arr);
}

static size_t read_full(FILE *fp, void *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        size_t chunk = n - got > ((size_t)1 << 30) ? ((size_t)1 << 30) : n - got;
        size_t r = fread((char *)buf + got, 1, chunk, fp);
        got += r;
        if (r < chunk)
            break;
    }
    return got;
}

static void *aligned_alloc64(size_t bytes)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0)
        return NULL;
    return p;
}

fls_status fls_npy_read(const char *path, fls_npy_array *arr, char err[FLS_NPY_ERR_LEN])
{
    return fls_npy_read_flags(path, 0u, arr, err);
}

fls_status fls_npy_read_flags(const char *path, unsigned flags, fls_npy_array *arr, char err[FLS_NPY_ERR_LEN])
{
    if (!path || !arr)
        return fail(err, FLS_ERR_NULL, "fls_npy_read: NULL argument");
    memset(arr, 0, sizeof *arr);
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return fail(err, FLS_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(fp), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(fp);
        return fail(err, FLS_ERR_IO, "%s: not a regular file", path);
    }
    uint64_t file_size = (uint64_t)sb.st_size;

    unsigned char prefix[12];
    size_t avail = read_full(fp, prefix, sizeof prefix);
    size_t hs = 0, hl = 0;
    fls_status st = parse_prefix(prefix, avail, &hs, &hl, path, err);
    if (st != FLS_OK) {
        fclose(fp);
        return st;
    }
    if (file_size < hs + hl) {
        fclose(fp);
        return fail(err, FLS_ERR_FORMAT, "%s: truncated header (%zu bytes announced)", path, hl);
    }
    unsigned char *head = malloc(hs + hl);
    if (!head) {
        fclose(fp);
        return fail(err, FLS_ERR_OUT_OF_MEMORY, "%s: out of memory for the header", path);
    }
    memcpy(head, prefix, hs); /* avail >= hs: parse_prefix checked it */
    if (fseek(fp, (long)hs, SEEK_SET) != 0 || read_full(fp, head + hs, hl) != hl) {
        free(head);
        fclose(fp);
        return fail(err, FLS_ERR_IO, "%s: read error in the header", path);
    }
    size_t data_offset;
    st = parse_all(head, hs + hl, file_size, flags, arr, &data_offset, path, err);
    free(head);
    if (st != FLS_OK) {
        fclose(fp);
        return st;
    }
    char why[160];
    if (!fls_npy_memory_fits(arr->bytes, why, sizeof why)) {
        memset(arr, 0, sizeof *arr);
        fclose(fp);
        return fail(err, FLS_ERR_OUT_OF_MEMORY, "%s: the file's data is too large to load: %s", path, why);
    }
    if (arr->bytes > 0) {
        arr->data = aligned_alloc64(arr->bytes);
        if (!arr->data) {
            size_t bytes = arr->bytes;
            memset(arr, 0, sizeof *arr);
            fclose(fp);
            return fail(err, FLS_ERR_OUT_OF_MEMORY, "%s: out of memory (%zu bytes of data)", path, bytes);
        }
        if (fseek(fp, (long)data_offset, SEEK_SET) != 0 ||
            read_full(fp, arr->data, arr->bytes) != arr->bytes) {
            fls_npy_free(arr);
            fclose(fp);
            return fail(err, FLS_ERR_IO, "%s: read error in the data (file changed while reading?)", path);
        }
    }
    fclose(fp);
    return FLS_OK;
}

fls_status fls_npy_read_matrix(const char *path, const fls_dtype *want_p, fls_npy_matrix *m,
                               char err[FLS_NPY_ERR_LEN])
{
    if (!path || !m)
        return fail(err, FLS_ERR_NULL, "fls_npy_read_matrix: NULL argument");
    memset(m, 0, sizeof *m);
    if (want_p && *want_p != FLS_DTYPE_F32 && *want_p != FLS_DTYPE_F16 && *want_p != FLS_DTYPE_BF16)
        return fail(err, FLS_ERR_DTYPE, "%s: unknown storage dtype %d requested", path, (int)*want_p);
    fls_npy_array a;
    fls_status st = fls_npy_read(path, &a, err);
    if (st == FLS_ERR_DTYPE && err) { /* say what a matrix may be */
        size_t n = strlen(err);
        snprintf(err + n, FLS_NPY_ERR_LEN - n, "; expected float32 ('<f4') or float16 ('<f2')");
    }
    if (st != FLS_OK)
        return st;
    if (a.dtype != FLS_NPY_F32 && a.dtype != FLS_NPY_F16) {
        fls_npy_dtype got = a.dtype;
        fls_npy_free(&a);
        return fail(err, FLS_ERR_DTYPE, "%s: dtype is %s ('%s'); expected float32 ('<f4') or float16 ('<f2')",
                    path, fls_npy_dtype_name(got), fls_npy_dtype_descr(got));
    }
    if (a.ndim != 1 && a.ndim != 2) {
        int nd = a.ndim;
        fls_npy_free(&a);
        return fail(err, FLS_ERR_SHAPE, "%s: expected a 1-D or 2-D array, got %d dimensions", path, nd);
    }
    if (a.count == 0) {
        fls_npy_free(&a);
        return fail(err, FLS_ERR_SIZE, "%s: the array is empty", path);
    }
    fls_dtype want = want_p ? *want_p : a.dtype == FLS_NPY_F32 ? FLS_DTYPE_F32 : FLS_DTYPE_F16;
    m->rows = a.ndim == 2 ? a.shape[0] : 1;
    m->cols = a.ndim == 2 ? a.shape[1] : a.shape[0];
    m->file_dtype = a.dtype;
    m->ndim = a.ndim;
    m->dtype = want;

    int keep = (want == FLS_DTYPE_F32 && a.dtype == FLS_NPY_F32) ||
               (want == FLS_DTYPE_F16 && a.dtype == FLS_NPY_F16);
    if (keep) {
        m->data = a.data; /* take ownership */
        return FLS_OK;
    }
    size_t n = (size_t)a.count;
    void *dst = aligned_alloc64(n * fls_dtype_size(want));
    if (!dst) {
        fls_npy_free(&a);
        memset(m, 0, sizeof *m);
        return fail(err, FLS_ERR_OUT_OF_MEMORY, "%s: out of memory converting to %s", path,
                    fls_dtype_name(want));
    }
    if (want == FLS_DTYPE_F32) { /* f16 -> f32: exact */
        const uint16_t *s = a.data;
        float *d = dst;
        for (size_t i = 0; i < n; i++)
            d[i] = fls_f16_to_f32(s[i]);
    } else if (a.dtype == FLS_NPY_F32) { /* f32 -> f16 or bf16: one rounding to nearest even */
        const float *s = a.data;
        uint16_t *d = dst;
        if (want == FLS_DTYPE_F16)
            for (size_t i = 0; i < n; i++)
                d[i] = fls_f32_to_f16(s[i]);
        else
            for (size_t i = 0; i < n; i++)
                d[i] = fls_f32_to_bf16(s[i]);
    } else { /* f16 -> bf16: through f32 (exact), then one rounding */
        const uint16_t *s = a.data;
        uint16_t *d = dst;
        for (size_t i = 0; i < n; i++)
            d[i] = fls_f32_to_bf16(fls_f16_to_f32(s[i]));
    }
    fls_npy_free(&a);
    m->data = dst;
    return FLS_OK;
}

void fls_npy_matrix_free(fls_npy_matrix *m)
{
    if (!m)
        return;
    free(m->data);
    memset(m, 0, sizeof *m);
}

/* ---- writer ---- */

fls_status fls_npy_file_check(const char *path, char err[FLS_NPY_ERR_LEN])
{
    if (!path)
        return fail(err, FLS_ERR_NULL, "fls_npy_file_check: NULL argument");
    if (!*path)
        return fail(err, FLS_ERR_IO, "empty output file name");
    struct stat sb;
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode))
        return fail(err, FLS_ERR_IO, "%s: exists and is not a regular file", path);
    /* The temporary file goes next to path: its directory must take new files. */
    const char *slash = strrchr(path, '/');
    size_t dl = slash ? (size_t)(slash - path) : 0;
    char *dir = malloc(dl + 2);
    if (!dir)
        return fail(err, FLS_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    if (!slash)
        memcpy(dir, ".", 2);
    else if (dl == 0)
        memcpy(dir, "/", 2);
    else {
        memcpy(dir, path, dl);
        dir[dl] = '\0';
    }
    int bad = stat(dir, &sb) != 0             ? errno
              : !S_ISDIR(sb.st_mode)          ? ENOTDIR
              : access(dir, W_OK | X_OK) != 0 ? errno
                                              : 0;
    free(dir);
    if (bad)
        return fail(err, FLS_ERR_IO, "%s: cannot create output: %s", path, strerror(bad));
    return FLS_OK;
}

fls_status fls_npy_file_begin(fls_npy_file *f, const char *path, char err[FLS_NPY_ERR_LEN])
{
    static atomic_uint counter;
    if (!f || !path)
        return fail(err, FLS_ERR_NULL, "fls_npy_file_begin: NULL argument");
    memset(f, 0, sizeof *f);
    if (!*path)
        return fail(err, FLS_ERR_IO, "empty output file name");
    struct stat sb;
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) /* fail before any work, not at rename */
        return fail(err, FLS_ERR_IO, "%s: exists and is not a regular file", path);
    size_t len = strlen(path) + 64;
    char *tmp = malloc(len);
    char *dst = strdup(path);
    if (!tmp || !dst) {
        free(tmp);
        free(dst);
        return fail(err, FLS_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    }
    /* Same directory as the target, so rename() is atomic (no cross-device move). */
    int fd = -1;
    for (int attempt = 0; attempt < 100 && fd < 0; attempt++) {
        snprintf(tmp, len, "%s.tmp-%ld-%u", path, (long)getpid(), atomic_fetch_add(&counter, 1u));
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0 && errno != EEXIST)
            break;
    }
    if (fd < 0) {
        int e = errno;
        free(tmp);
        free(dst);
        return fail(err, FLS_ERR_IO, "%s: cannot create output: %s", path, strerror(e));
    }
    f->fp = fdopen(fd, "wb");
    if (!f->fp) {
        int e = errno;
        close(fd);
        unlink(tmp);
        free(tmp);
        free(dst);
        return fail(err, FLS_ERR_IO, "%s: cannot open output stream: %s", path, strerror(e));
    }
    f->tmp_path = tmp;
    f->path = dst;
    return FLS_OK;
}

void fls_npy_file_abort(fls_npy_file *f)
{
    if (!f)
        return;
    if (f->fp)
        fclose(f->fp);
    if (f->tmp_path)
        unlink(f->tmp_path);
    free(f->tmp_path);
    free(f->path);
    memset(f, 0, sizeof *f);
}

fls_status fls_npy_file_commit(fls_npy_file *f, char err[FLS_NPY_ERR_LEN])
{
    if (!f || !f->fp)
        return fail(err, FLS_ERR_NULL, "fls_npy_file_commit: no open file");
    int bad = ferror(f->fp) || fflush(f->fp) != 0 || fsync(fileno(f->fp)) != 0;
    int e = errno;
    bad |= fclose(f->fp) != 0;
    if (!bad)
        e = 0;
    else if (!e)
        e = errno;
    f->fp = NULL;
    if (bad) {
        fls_status st = fail(err, FLS_ERR_IO, "%s: write error: %s", f->path, e ? strerror(e) : "unknown");
        fls_npy_file_abort(f);
        return st;
    }
    if (rename(f->tmp_path, f->path) != 0) {
        fls_status st = fail(err, FLS_ERR_IO, "%s: cannot rename the finished output into place: %s", f->path,
                             strerror(errno));
        fls_npy_file_abort(f);
        return st;
    }
    free(f->tmp_path);
    free(f->path);
    memset(f, 0, sizeof *f);
    return FLS_OK;
}

fls_status fls_npy_write_stream(FILE *fp, fls_npy_dtype dtype, int ndim, const int64_t *shape,
                                const void *data, char err[FLS_NPY_ERR_LEN])
{
    if (!fp || (ndim > 0 && !shape))
        return fail(err, FLS_ERR_NULL, "fls_npy_write: NULL argument");
    if (ndim < 0 || ndim > FLS_NPY_MAX_DIMS)
        return fail(err, FLS_ERR_SHAPE, "fls_npy_write: %d dimensions (0..%d supported)", ndim,
                    FLS_NPY_MAX_DIMS);
    size_t itemsize = fls_npy_dtype_size(dtype);
    if (!itemsize)
        return fail(err, FLS_ERR_DTYPE, "fls_npy_write: unknown dtype %d", (int)dtype);
    uint64_t count = 1;
    char dict[64 + FLS_NPY_MAX_DIMS * 24];
    int k = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (",
                     fls_npy_dtype_descr(dtype));
    int empty = 0; /* a zero dimension makes any shape empty, as the reader has it */
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return fail(err, FLS_ERR_SHAPE, "fls_npy_write: negative dimension");
        empty |= shape[i] == 0;
    }
    for (int i = 0; i < ndim; i++) {
        if (!empty && count > (uint64_t)INT64_MAX / (uint64_t)shape[i])
            return fail(err, FLS_ERR_SIZE, "fls_npy_write: shape overflows");
        count = empty ? 0 : count * (uint64_t)shape[i];
        k += snprintf(dict + k, sizeof dict - (size_t)k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    }
    k += snprintf(dict + k, sizeof dict - (size_t)k, "%s), }", ndim == 1 ? "," : "");
    if (count > (uint64_t)SIZE_MAX / itemsize)
        return fail(err, FLS_ERR_SIZE, "fls_npy_write: data size overflows");
    size_t bytes = (size_t)count * itemsize;
    if (bytes && !data)
        return fail(err, FLS_ERR_NULL, "fls_npy_write: NULL data");

    /* Version 1.0 prefix is 10 bytes; pad the header with spaces so the data
     * starts on a 64-byte boundary, as numpy does. The dict is far below the
     * 65535-byte limit of 1.0 for at most 8 dimensions. */
    size_t total = 10 + (size_t)k + 1;
    total = (total + 63) / 64 * 64;
    size_t hl = total - 10;
    unsigned char prefix[10];
    memcpy(prefix, npy_magic, 6);
    prefix[6] = 1;
    prefix[7] = 0;
    prefix[8] = (unsigned char)(hl & 0xff);
    prefix[9] = (unsigned char)(hl >> 8);
    char header[512];
    memset(header, ' ', hl);
    memcpy(header, dict, (size_t)k);
    header[hl - 1] = '\n';
    if (fwrite(prefix, 1, 10, fp) != 10 || fwrite(header, 1, hl, fp) != hl ||
        (bytes && fwrite(data, 1, bytes, fp) != bytes))
        return fail(err, FLS_ERR_IO, "write error: %s", strerror(errno));
    return FLS_OK;
}

fls_status fls_npy_write(const char *path, fls_npy_dtype dtype, int ndim, const int64_t *shape,
                         const void *data, char err[FLS_NPY_ERR_LEN])
{
    fls_npy_file f;
    fls_status st = fls_npy_file_begin(&f, path, err);
    if (st != FLS_OK)
        return st;
    char e2[FLS_NPY_ERR_LEN];
    st = fls_npy_write_stream(f.fp, dtype, ndim, shape, data, e2);
    if (st != FLS_OK) {
        fls_npy_file_abort(&f);
        return fail(err, st, "%s: %s", path, e2);
    }
    return fls_npy_file_commit(&f, err);
}
