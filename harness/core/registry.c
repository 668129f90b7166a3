// harness/core/registry.c — see registry.h.
#include "harness/core/registry.h"

#include <stdio.h>
#include <string.h>

const char *registry_name_of(const void *item) { return item ? *(const char *const *)item : NULL; }

const void *registry_find(const Registry *r, const char *name) {
    if (!name) return NULL;
    for (int i = 0; i < r->n; i++)
        if (!strcmp(registry_name_of(r->items[i]), name)) return r->items[i];
    return NULL;
}

const void *registry_at(const Registry *r, int i) { return i >= 0 && i < r->n ? r->items[i] : NULL; }

const char *registry_names(Registry *r) {
    if (!r->names[0]) {
        size_t used = 0;
        for (int i = 0; i < r->n && used < sizeof r->names; i++)
            used += (size_t)snprintf(r->names + used, sizeof r->names - used, "%s%s", i ? ", " : "",
                                     registry_name_of(r->items[i]));
    }
    return r->names;
}
