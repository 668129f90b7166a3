// common/jsonutil.c — small Jansson helpers (see jsonutil.h).
#include "common/jsonutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

json_t *json_real_or_name(double v) {
    if (isfinite(v)) return json_real(v);
    return json_string(isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
}

void json_value_text(const json_t *v, char *out, size_t n) {
    if (json_is_string(v)) {
        snprintf(out, n, "%s", json_string_value(v));
        return;
    }
    char *js = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    snprintf(out, n, "%s", js ? js : "?");
    free(js);
}
