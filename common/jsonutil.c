// common/jsonutil.c — small Jansson helpers (see jsonutil.h).
#include "common/jsonutil.h"

#include <math.h>

json_t *json_real_or_name(double v) {
    if (isfinite(v)) return json_real(v);
    return json_string(isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
}
