// harness/core/files.c — see files.h.
#define _POSIX_C_SOURCE 200809L
#include "harness/core/files.h"
#include "common/log.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

int collect_json_files(StrList *out, char *const *args, int n, const char *default_arg) {
    int rc = 0;
    for (int i = 0; i < (n ? n : 1); i++) {
        const char *a = n ? args[i] : default_arg;
        if (!is_dir(a)) {
            strlist_add(out, a);
            continue;
        }
        DIR *d = opendir(a);
        if (!d) {
            nsa_log(LOG_ERROR, "%s: %s", a, strerror(errno));
            rc = -1;
            continue;
        }
        StrList found = {0};
        struct dirent *e;
        while ((e = readdir(d))) {
            size_t l = strlen(e->d_name);
            if (l > 5 && !strcmp(e->d_name + l - 5, ".json") && e->d_name[0] != '.') {
                char p[4200];
                size_t al = strlen(a);
                while (al > 1 && a[al - 1] == '/') al--;   // "scenarios/" gives scenarios/x.json, not scenarios//x.json
                snprintf(p, sizeof p, "%.*s/%s", (int)al, a, e->d_name);
                if (!is_dir(p)) strlist_add(&found, p);
            }
        }
        closedir(d);
        if (found.n == 0) {   // as an unknown file would be: said, not silently nothing
            nsa_log(LOG_ERROR, "%s: a folder without scenario files (*.json directly in it; subfolders "
                               "are not searched: name them)", a);
            rc = -1;
        }
        strlist_sort(&found);
        for (int k = 0; k < found.n; k++) strlist_add(out, found.v[k]);
        strlist_free(&found);
    }
    return rc;
}
