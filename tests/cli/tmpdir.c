#include "tests/cli/tmpdir.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

char tmpdir[256];

void tmpdir_make(const char *prefix)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/%sXXXXXX", prefix);
    cr_assert_not_null(mkdtemp(tmpdir));
}

/* Removes dir's files and, one level down, its folders' files and folders. */
static void remove_tree(const char *dir, int depth)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    char p[768];
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            if (unlink(p) != 0 && depth < 2)
                remove_tree(p, depth + 1);
        }
    closedir(d);
    rmdir(dir);
}

void tmpdir_remove(void)
{
    remove_tree(tmpdir, 0);
}

int dir_entries(void)
{
    DIR *d = opendir(tmpdir);
    cr_assert_not_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

const char *tpath(const char *name)
{
    static char p[8][512];
    static int k;
    k = (k + 1) % 8;
    snprintf(p[k], sizeof p[k], "%s/%s", tmpdir, name);
    return p[k];
}
