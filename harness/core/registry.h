// harness/core/registry.h — a table of named parts of the runner, found by name: the checks a
// scenario lists (harness/core/check.h, the table harness/checks/checks.c) and the families
// (harness/core/family.h, the table harness/families/families.c). Each part is a small struct
// of callbacks whose first member is its name (`const char *name`); a table lists them in the
// order `nsa-harness list` shows them. Finding, indexing and naming them is this code, once.
#ifndef NSA_HARNESS_REGISTRY_H
#define NSA_HARNESS_REGISTRY_H

typedef struct {
    const char *what;              // what the parts are ("check", "family")
    const void *const *items;      // the parts, each a struct whose first member is its name
    int n;
    char names[1024];              // "a, b, c": the names in table order, made on first use
} Registry;

// The part named `name` (exactly), or NULL.
const void *registry_find(const Registry *r, const char *name);
// Part i in table order, or NULL past the end (or before it).
const void *registry_at(const Registry *r, int i);
// Every name, comma-separated in table order ("finite, grad_arrival, ..."), for messages
// and help; the same text every call.
const char *registry_names(Registry *r);
// The name of a part of a registry.
const char *registry_name_of(const void *item);
#endif
