// harness/core/family.c — see family.h: the families as the loader, the runner and the reports
// see them, through the registry of families.
#include "harness/core/family.h"

const FamilyDef *family_find(const char *name) { return registry_find(&family_registry, name); }
const FamilyDef *family_at(int i) { return registry_at(&family_registry, i); }
const char *family_names(void) { return registry_names(&family_registry); }
