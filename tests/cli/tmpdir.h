/* A scratch directory per test suite, shared by the cli and npy tests. */
#ifndef FLS_TEST_TMPDIR_H
#define FLS_TEST_TMPDIR_H

/* The suite's directory (set by tmpdir_make). */
extern char tmpdir[256];

/* Creates /tmp/<prefix>XXXXXX (asserting success) into tmpdir. */
void tmpdir_make(const char *prefix);
/* Removes the files in tmpdir, then tmpdir itself. */
void tmpdir_remove(void);
/* Files in tmpdir (a leftover temporary output would show here). */
int dir_entries(void);
/* tmpdir/name in one of 8 rotating buffers. */
const char *tpath(const char *name);

#endif
