// common/jsonutil.c — small Jansson helpers (see jsonutil.h).
#include "common/jsonutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/util.h"

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

json_t *json_load_path(const char *path, size_t flags, json_error_t *je) {
    size_t len = 0;
    char why[300];
    char *text = read_file_limited(path, 0, 0, &len, why, sizeof why);
    if (!text) {
        if (je) {
            je->line = je->column = -1;
            je->position = 0;
            snprintf(je->source, sizeof je->source, "%s", path);
            snprintf(je->text, sizeof je->text, "%.159s", why);   // jansson keeps 160 bytes of text
        }
        return NULL;
    }
    json_t *v = json_loadb(text, len, flags, je);
    if (!v && je) snprintf(je->source, sizeof je->source, "%s", path);
    free(text);
    return v;
}
