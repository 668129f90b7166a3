// common/config.c — the strict model/training config loader (schema: docs/config.md).
//
// Pipeline: read the file -> Jansson (duplicate keys rejected) -> apply `--set`
// overrides to the JSON tree -> check every key against one schema table (type,
// range, unknown keys, missing keys) -> resolve defaults that depend on other
// values -> cross-field rules -> canonical JSON and its digest.
//
// Every problem is collected, not just the first, each as one line
//   <file>:<line>:<col>: <dotted key>: <message>      (value from the file)
//   --set <a.b=value>: <dotted key>: <message>        (value from an override)
// and the lines are sorted by position, so a user fixes the file top to bottom
// in one pass. Jansson keeps no positions, so jsonpos re-scans the raw text for
// the key (unknown keys), the value (wrong type or range) or the enclosing
// object's brace (missing keys).
//
// The schema table is the single source of truth: parsing, the "known:" lists in
// messages, override validation and config_to_json all iterate it, so a key added
// there is accepted, reported and serialized everywhere at once.
#include "common/config.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/jsonpos.h"
#include "common/nsa_names.h"
#include "common/util.h"

// ---- text ------------------------------------------------------------------------
// All text whose length depends on user input (messages, canonical JSON) goes
// through common/util's Str, so nothing is cut off or overflows.

// JSON string literal. Bytes >= 0x80 pass through (the loader only stores
// strings Jansson validated as UTF-8); control characters are escaped.
static void json_string_lit(Str *b, const char *s) {
    str_add(b, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        switch (c) {
        case '"': str_add(b, "\\\""); break;
        case '\\': str_add(b, "\\\\"); break;
        case '\n': str_add(b, "\\n"); break;
        case '\r': str_add(b, "\\r"); break;
        case '\t': str_add(b, "\\t"); break;
        default:
            if (c < 0x20 || c == 0x7f) {
                str_printf(b, "\\u%04x", c);
            } else {
                char one[2] = {(char)c, '\0'};
                str_add(b, one);
            }
        }
    }
    str_add(b, "\"");
}

// Shortest text that reads back as exactly v, so canonical JSON is both exact
// (a reloaded config has bitwise-identical values and the same digest) and
// readable (3e-4, not 0.00029999999999999997). Jansson does the conversions so
// the result is independent of the C locale's decimal point.
static void real_text(Str *b, double v) {
    if (!isfinite(v)) {   // never produced by config_load; keep the output valid JSON
        str_add(b, "null");
        return;
    }
    if (v == floor(v) && fabs(v) < 1e15) {   // integral: "10000.0", no exponent
        str_printf(b, "%.0f.0", v);
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        json_t *j = json_real(v);
        char *s = j ? json_dumps(j, JSON_ENCODE_ANY | JSON_REAL_PRECISION(prec)) : NULL;
        json_decref(j);
        if (!s) {   // out of memory
            str_add(b, "null");
            return;
        }
        json_t *back = json_loads(s, JSON_DECODE_ANY, NULL);
        int exact = back && json_is_real(back) && json_real_value(back) == v;
        json_decref(back);
        if (exact || prec == 17) {   // 17 significant digits always round-trip
            str_add(b, s);
            free(s);
            return;
        }
        free(s);
    }
}

// ---- schema ------------------------------------------------------------------------
enum {
    T_INT,    // JSON integer in [imin, INT_MAX], stored as int
    T_REAL,   // JSON number (integers accepted) within `range`, stored as double
    T_BOOL,   // true/false, stored as int 0/1
    T_ENUM,   // one of names[]: stored as vals[i] (int), or as the name (char array)
    T_NAME,   // the config name: 1..63 chars of [A-Za-z0-9_.-] (it ends up in file names)
    T_PATH,   // non-empty string that fits the destination char array
    T_SEED,   // non-negative integer, stored as uint64_t
    T_PAIR,   // checkpoint_layers: [begin, end], two non-negative ints
};
enum { R_ANY, R_POS, R_NONNEG, R_UNIT, R_UNIT_OPEN };   // T_REAL ranges

typedef struct {
    const char *sec;          // section, NULL for a top-level key
    const char *key;
    int type;                 // T_*
    int required;
    int imin;                 // T_INT: smallest valid value
    int range;                // T_REAL: R_*
    const char *desc;         // what a valid value is, for "expected <desc>, got ..."
    const char *const *names; // T_ENUM: accepted strings, NULL-terminated
    const int *vals;          // T_ENUM: value stored for names[i]; NULL: store the name
    size_t off, size;         // destination member in NsaConfig and its size
    const char *why;          // T_INT: replaces "expected <desc>" when below imin
} Field;

static const char *const PHI_NAMES[] = {"avg", "mlp", NULL};
static const int PHI_VALS[] = {NSA_PHI_AVG, NSA_PHI_MLP};
static const char *const GATE_NAMES[] = {"softmax", "sigmoid", NULL};
static const int GATE_VALS[] = {NSA_GATE_SOFTMAX, NSA_GATE_SIGMOID};
// the names a force_branch value is written with: "none", then nsa_branch_name() of each
// branch (test_config checks they agree)
static const char *const BRANCH_NAMES[] = {"none", "cmp", "sel", "win", NULL};
static const int BRANCH_VALS[] = {-1, NSA_BR_CMP, NSA_BR_SEL, NSA_BR_WIN};
static const char *const PREFILL_NAMES[] = {"batched", "sequential", NULL};
static const int PREFILL_VALS[] = {NSA_PREFILL_BATCHED, NSA_PREFILL_SEQUENTIAL};
static const char *const BACKEND_NAMES[] = {"cpu", "cpu64", "cuda", NULL};
static const char *const PRECISION_NAMES[] = {"fp32", "fp64", "bf16", "fp16", NULL};
static const char *const DDP_NAMES[] = {"default", "find_unused", "static_graph", NULL};
static const int DDP_VALS[] = {NSA_DDP_DEFAULT, NSA_DDP_FIND_UNUSED, NSA_DDP_STATIC_GRAPH};
static const char *const DATA_NAMES[] = {"synthetic", "learnable", "shards", "text", NULL};
static const int DATA_VALS[] = {NSA_DATA_SYNTHETIC, NSA_DATA_LEARNABLE, NSA_DATA_SHARDS,
                                NSA_DATA_TEXT};

// Field ids, so cross-field rules can name the fields they involve.
enum {
    F_NAME,
    F_VOCAB, F_DIM, F_LAYERS, F_HEADS, F_KV_HEADS, F_HEAD_DIM, F_FFN, F_MAX_SEQ,
    F_ROPE_THETA, F_NORM_EPS, F_TIE,
    F_L, F_D, F_L_SEL, F_N, F_W, F_PHI, F_GATE_ACT, F_GATE_HIDDEN, F_FORCE_BRANCH,
    F_SEQ_LEN, F_BATCH, F_ACCUM, F_STEPS, F_LR, F_MIN_LR, F_WARMUP, F_WD, F_BETA1,
    F_BETA2, F_ADAM_EPS, F_CLIP, F_SEED, F_CKPT, F_PREFILL, F_BACKEND, F_PRECISION, F_DDP_MODE, F_BUCKET_MB,
    F_KIND, F_PATH,
    F_COUNT
};

// Designated initializers: members a kind does not use stay 0/NULL.
#define DEST(member) .off = offsetof(NsaConfig, member), .size = sizeof(((NsaConfig *)0)->member)
#define INT(s, k, req, min, d, member) \
    {.sec = s, .key = k, .type = T_INT, .required = req, .imin = min, .desc = d, DEST(member)}
#define POSINT(s, k, req, member) INT(s, k, req, 1, "a positive integer", member)
#define REAL(s, k, r, d, member) \
    {.sec = s, .key = k, .type = T_REAL, .range = r, .desc = d, DEST(member)}
#define ENUM(s, k, n, v, member) \
    {.sec = s, .key = k, .type = T_ENUM, .names = n, .vals = v, DEST(member)}

// Order within a section is the order of the "known:" lists and of docs/config.md.
static const Field FIELDS[F_COUNT] = {
    [F_NAME] = {.key = "name", .type = T_NAME, .required = 1, DEST(name),
                .desc = "a name of 1 to 63 characters from A-Z a-z 0-9 _ . -"},
    [F_VOCAB] = INT("model", "vocab_size", 1, 2, "an integer >= 2", vocab_size),
    [F_DIM] = POSINT("model", "dim", 1, dim),
    [F_LAYERS] = POSINT("model", "n_layers", 1, n_layers),
    [F_HEADS] = POSINT("model", "n_heads", 1, n_heads),
    [F_KV_HEADS] = POSINT("model", "n_kv_heads", 1, n_kv_heads),
    [F_HEAD_DIM] = POSINT("model", "head_dim", 1, head_dim),
    [F_FFN] = POSINT("model", "ffn_dim", 1, ffn_dim),
    [F_MAX_SEQ] = POSINT("model", "max_seq_len", 1, max_seq_len),
    [F_ROPE_THETA] = REAL("model", "rope_theta", R_POS, "a number > 0", rope_theta),
    [F_NORM_EPS] = REAL("model", "norm_eps", R_POS, "a number > 0", norm_eps),
    [F_TIE] = {.sec = "model", .key = "tie_embeddings", .type = T_BOOL, .desc = "true or false",
               DEST(tie_embeddings)},
    [F_L] = POSINT("nsa", "l", 1, l),
    [F_D] = POSINT("nsa", "d", 1, d),
    [F_L_SEL] = POSINT("nsa", "l_sel", 1, l_sel),
    [F_N] = {.sec = "nsa", .key = "n", .type = T_INT, .required = 1, .imin = 3,
             .desc = "an integer >= 3", DEST(n),
             .why = "n must be >= 3: block 0, the current block and the one before it are "
                    "always selected"},
    [F_W] = POSINT("nsa", "w", 1, w),
    [F_PHI] = ENUM("nsa", "phi", PHI_NAMES, PHI_VALS, phi),
    [F_GATE_ACT] = ENUM("nsa", "gate_act", GATE_NAMES, GATE_VALS, gate_act),
    [F_GATE_HIDDEN] = INT("nsa", "gate_hidden", 0, 0,
                          "a non-negative integer (0: model.dim/4)", gate_hidden),
    [F_FORCE_BRANCH] = ENUM("nsa", "force_branch", BRANCH_NAMES, BRANCH_VALS, force_branch),
    [F_SEQ_LEN] = POSINT("train", "seq_len", 0, seq_len),
    [F_BATCH] = POSINT("train", "batch_size", 0, batch_size),
    [F_ACCUM] = POSINT("train", "grad_accum", 0, grad_accum),
    [F_STEPS] = POSINT("train", "steps", 0, steps),
    [F_LR] = REAL("train", "lr", R_POS, "a number > 0", lr),
    [F_MIN_LR] = REAL("train", "min_lr_frac", R_UNIT, "a number in [0, 1]", min_lr_frac),
    [F_WARMUP] = INT("train", "warmup_steps", 0, 0, "a non-negative integer", warmup_steps),
    [F_WD] = REAL("train", "weight_decay", R_NONNEG, "a number >= 0", weight_decay),
    [F_BETA1] = REAL("train", "beta1", R_UNIT_OPEN, "a number in [0, 1)", beta1),
    [F_BETA2] = REAL("train", "beta2", R_UNIT_OPEN, "a number in [0, 1)", beta2),
    [F_ADAM_EPS] = REAL("train", "adam_eps", R_POS, "a number > 0", adam_eps),
    [F_CLIP] = REAL("train", "grad_clip", R_ANY, "a number (<= 0 disables clipping)",
                    grad_clip),
    [F_SEED] = {.sec = "train", .key = "seed", .type = T_SEED,
                .desc = "a non-negative integer", DEST(seed)},
    [F_CKPT] = {.sec = "train", .key = "checkpoint_layers", .type = T_PAIR,
                .desc = "[begin, end], two non-negative integers", DEST(ckpt_begin)},
    [F_PREFILL] = ENUM("train", "prefill", PREFILL_NAMES, PREFILL_VALS, prefill),
    [F_BACKEND] = ENUM("train", "backend", BACKEND_NAMES, NULL, backend),
    [F_PRECISION] = ENUM("train", "precision", PRECISION_NAMES, NULL, precision),
    [F_DDP_MODE] = ENUM("train", "ddp_mode", DDP_NAMES, DDP_VALS, ddp_mode),
    [F_BUCKET_MB] = REAL("train", "bucket_mb", R_POS, "a number > 0 (MiB)", bucket_mb),
    [F_KIND] = ENUM("data", "kind", DATA_NAMES, DATA_VALS, data_kind),
    [F_PATH] = {.sec = "data", .key = "path", .type = T_PATH, .desc = "a non-empty file path",
                DEST(data_path)},
};

static const char *const SECTIONS[] = {"model", "nsa", "train", "data", NULL};
static const int SECTION_REQUIRED[] = {1, 1, 0, 0};

static void set_defaults(NsaConfig *c) {
    memset(c, 0, sizeof *c);
    c->rope_theta = 10000.0;
    c->norm_eps = 1e-5;
    c->phi = NSA_PHI_AVG;
    c->gate_act = NSA_GATE_SOFTMAX;
    c->gate_hidden = 0;       // resolved to dim/4
    c->force_branch = -1;
    c->seq_len = 0;           // resolved to max_seq_len
    c->batch_size = 1;
    c->grad_accum = 1;
    c->steps = 100;
    c->lr = 3e-4;
    c->min_lr_frac = 0.1;
    c->warmup_steps = 0;
    c->weight_decay = 0.1;
    c->beta1 = 0.9;
    c->beta2 = 0.95;
    c->adam_eps = 1e-8;
    c->grad_clip = 1.0;
    c->seed = 1337;
    c->prefill = NSA_PREFILL_BATCHED;
    snprintf(c->backend, sizeof c->backend, "cpu");
    c->precision[0] = '\0';   // resolved from the backend
    c->data_kind = NSA_DATA_LEARNABLE;
    c->ddp_mode = NSA_DDP_DEFAULT;
    c->bucket_mb = 25.0;
}

static int section_index(const char *s) {
    for (int i = 0; SECTIONS[i]; i++)
        if (!strcmp(SECTIONS[i], s)) return i;
    return -1;
}

// sec NULL: top-level keys.
static int field_index(const char *sec, const char *key) {
    for (int i = 0; i < F_COUNT; i++) {
        const Field *f = &FIELDS[i];
        if ((sec == NULL) != (f->sec == NULL)) continue;
        if (sec && strcmp(sec, f->sec)) continue;
        if (!strcmp(f->key, key)) return i;
    }
    return -1;
}

static void dotted(int id, char *out, size_t n) {
    const Field *f = &FIELDS[id];
    if (f->sec) snprintf(out, n, "%s.%s", f->sec, f->key);
    else snprintf(out, n, "%s", f->key);
}

static const char *enum_name(const char *const *names, const int *vals, int v) {
    for (int i = 0; names[i]; i++)
        if (vals[i] == v) return names[i];
    return "?";
}

const char *config_phi_name(int phi) { return enum_name(PHI_NAMES, PHI_VALS, phi); }
const char *config_gate_act_name(int act) { return enum_name(GATE_NAMES, GATE_VALS, act); }
const char *config_branch_name(int branch) { return branch == -1 ? "none" : nsa_branch_name(branch); }
const char *config_data_name(int kind) { return enum_name(DATA_NAMES, DATA_VALS, kind); }
const char *config_ddp_mode_name(int mode) { return enum_name(DDP_NAMES, DDP_VALS, mode); }
const char *config_prefill_name(int prefill) { return enum_name(PREFILL_NAMES, PREFILL_VALS, prefill); }
const char *config_backend_at(int i) { return i >= 0 && i < (int)(sizeof BACKEND_NAMES / sizeof *BACKEND_NAMES) - 1 ? BACKEND_NAMES[i] : NULL; }
const char *config_precision_at(int i) {
    return i >= 0 && i < (int)(sizeof PRECISION_NAMES / sizeof *PRECISION_NAMES) - 1 ? PRECISION_NAMES[i] : NULL;
}

// ---- problems ----------------------------------------------------------------------
typedef struct {
    char *path;        // dotted path the override set (or a section it created)
    const char *flag;  // the override text "a.b=value" (the caller's string)
    int index;         // its position among the overrides
} Origin;

typedef struct {
    const char *path;     // config file as given
    const char *text;     // its contents, for jsonpos (NULL until read)
    Origin *origins;
    int n_origins;
    int cur_ov;           // index of the override being applied
    ConfigProblems *ps;   // what was found (the caller's)
    unsigned char ok[F_COUNT];     // field holds a valid value (given or default)
    unsigned char given[F_COUNT];  // field present in the (overridden) document
} Loader;

static void add_origin(Loader *L, const char *path, const char *flag) {
    Origin *o = L->origins = xrealloc(L->origins, (size_t)(L->n_origins + 1) * sizeof *o);
    o[L->n_origins].path = xstrdup(path);
    o[L->n_origins].flag = flag;
    o[L->n_origins].index = L->cur_ov;
    L->n_origins++;
}

// The override responsible for the value at `where` (the latest one wins, as in
// the tree), or NULL if it came from the file. An override of "a.b" covers
// "a.b[0]"; a section created by an override covers its keys.
static const Origin *origin_of(const Loader *L, const char *where) {
    for (int i = L->n_origins - 1; i >= 0; i--) {
        size_t n = strlen(L->origins[i].path);
        if (!strncmp(where, L->origins[i].path, n) &&
            (where[n] == '\0' || where[n] == '.' || where[n] == '['))
            return &L->origins[i];
    }
    return NULL;
}

// ov: the override the problem is about, or -1; line 0: no position.
static void add_problem(Loader *L, int ov, int line, int col, const char *dk, const char *fmt,
                        va_list ap) {
    ConfigProblems *ps = L->ps;
    Str msg = {0};
    str_vprintf(&msg, fmt, ap);
    if (ps->n == ps->cap) {
        ps->cap = ps->cap ? 2 * ps->cap : 16;
        ps->v = xrealloc(ps->v, (size_t)ps->cap * sizeof *ps->v);
    }
    ps->v[ps->n++] = (ConfigProblem){.key = xstrdup(dk ? dk : ""), .line = line, .col = col, .override = ov,
                                     .message = str_take(&msg)};
}

// A problem with the value (want_key 0) or key (want_key 1) at dotted path
// `where`, reported under dotted key `dk`. Located, in order: at the override
// that set it; at its position in the file; at the nearest enclosing value that
// exists in the file (so a missing key points at its object's brace); at the file.
static void problem(Loader *L, const char *where, int want_key, const char *dk,
                    const char *fmt, ...) {
    int line = 0, col = 0;
    const Origin *o = origin_of(L, where);
    char *path = xstrdup(where);   // shortened in place while walking up
    if (!o) {
        for (;;) {
            if (L->text && jsonpos_find(L->text, path, want_key, &line, &col) == 0) break;
            if (!path[0]) {
                line = col = 0;
                break;
            }
            char *cut = strrchr(path, '.'), *br = strrchr(path, '[');
            if (br > cut) cut = br;
            if (cut) *cut = '\0';
            else path[0] = '\0';
            want_key = 0;
        }
    }
    va_list ap;
    va_start(ap, fmt);
    add_problem(L, o ? o->index : -1, line, col, dk, fmt, ap);
    va_end(ap);
    free(path);
}

// A problem of the file whose position the caller already knows (Jansson's), or
// none (line 0: the file itself).
static void located_problem(Loader *L, int line, int col, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    add_problem(L, -1, line, col, NULL, fmt, ap);
    va_end(ap);
}

// A problem with the override being applied itself (malformed, unknown key).
static void flag_problem(Loader *L, const char *dk, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    add_problem(L, L->cur_ov, 0, 0, dk, fmt, ap);
    va_end(ap);
}

// A rule relating two fields: reported at `blame`, unless only `other`'s value
// came from --set, in which case the override is what the user just changed.
static void relation(Loader *L, int blame, int other, const char *fmt, ...) {
    char b[64], o[64], msg[512];
    dotted(blame, b, sizeof b);
    dotted(other, o, sizeof o);
    const char *use = (!origin_of(L, b) && origin_of(L, o)) ? o : b;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    problem(L, use, 0, use, "%s", msg);
}

// Copy of a user string safe to print on one line: control bytes become '?',
// long strings are cut with "...".
static void printable(const char *s, char *out, size_t n) {
    size_t i = 0;
    for (; s[i] && i + 1 < n; i++)
        out[i] = ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) ? '?' : s[i];
    out[i] = '\0';
    if (s[i] && n >= 4) memcpy(out + n - 4, "...", 4);
}

// "got ..." text for a value of the wrong type or out of range.
static void describe(const json_t *v, int want_int, char *out, size_t n) {
    char s[48];
    Str b = {0};
    switch (json_typeof(v)) {
    case JSON_OBJECT: snprintf(out, n, "object"); return;
    case JSON_ARRAY:
        snprintf(out, n, "array of %zu element%s", json_array_size(v),
                 json_array_size(v) == 1 ? "" : "s");
        return;
    case JSON_STRING:
        printable(json_string_value(v), s, sizeof s);
        snprintf(out, n, "string \"%s\"", s);
        return;
    case JSON_INTEGER:
        snprintf(out, n, "integer %" JSON_INTEGER_FORMAT, json_integer_value(v));
        return;
    case JSON_REAL:
        real_text(&b, json_real_value(v));
        // 64.0 or 6.4e1 where an integer belongs: Jansson reads those as reals
        snprintf(out, n, "real %s%s", str_c(&b),
                 want_int && json_real_value(v) == floor(json_real_value(v))
                     ? " (write integers without a decimal point or exponent)" : "");
        str_free(&b);
        return;
    case JSON_TRUE: snprintf(out, n, "boolean true"); return;
    case JSON_FALSE: snprintf(out, n, "boolean false"); return;
    case JSON_NULL: snprintf(out, n, "null"); return;
    }
    snprintf(out, n, "?");
}

static void type_problem(Loader *L, const char *dk, const char *desc, const json_t *v,
                         int want_int) {
    char got[160];
    describe(v, want_int, got, sizeof got);
    problem(L, dk, 0, dk, "expected %s, got %s", desc, got);
}

// Edit distance, for "did you mean" on unknown keys (short strings only).
static int edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    int row[65];
    if (la > 64 || lb > 64) return INT_MAX;
    for (size_t j = 0; j <= lb; j++) row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int up = row[j];
            int best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

// "unknown key 'x' in 'sec' (known: a, b; did you mean 'y'?)". sec NULL: top level,
// where sections and top-level keys are both known. flag != NULL: report at the
// override instead of the key's position in the file.
static void unknown_key(Loader *L, const char *sec, const char *key, const char *flag) {
    Str known = {0};
    const char *best = NULL;
    int best_d = INT_MAX;
    const char *cand[F_COUNT + 8];
    int nc = 0;
    for (int i = 0; i < F_COUNT; i++)
        if ((sec == NULL) == (FIELDS[i].sec == NULL) && (!sec || !strcmp(sec, FIELDS[i].sec)))
            cand[nc++] = FIELDS[i].key;
    if (!sec)
        for (int i = 0; SECTIONS[i]; i++) cand[nc++] = SECTIONS[i];
    for (int i = 0; i < nc; i++) {
        str_printf(&known, "%s%s", i ? ", " : "", cand[i]);
        int d = edit_distance(key, cand[i]);
        if (d < best_d) {
            best_d = d;
            best = cand[i];
        }
    }
    // one typo in a short key, two in a longer one
    if (best_d > (strlen(key) <= 3 ? 1 : 2)) best = NULL;
    char k[80], dk[160];
    printable(key, k, sizeof k);
    snprintf(dk, sizeof dk, "%s%s%s", sec ? sec : "", sec ? "." : "", k);
    Str where = {0};   // the key in full: a shortened one would not be found
    str_printf(&where, "%s%s%s", sec ? sec : "", sec ? "." : "", key);
    char in[40];
    if (sec) snprintf(in, sizeof in, "in '%s'", sec);
    else snprintf(in, sizeof in, "at the top level");
    const char *list = str_c(&known);
    if (flag) {
        if (best) flag_problem(L, dk, "unknown key '%s' %s (known: %s; did you mean '%s'?)",
                               k, in, list, best);
        else flag_problem(L, dk, "unknown key '%s' %s (known: %s)", k, in, list);
    } else {
        if (best) problem(L, str_c(&where), 1, dk, "unknown key '%s' %s (known: %s; did you mean '%s'?)",
                          k, in, list, best);
        else problem(L, str_c(&where), 1, dk, "unknown key '%s' %s (known: %s)", k, in, list);
    }
    str_free(&known);
    str_free(&where);
}

// ---- reading values ----------------------------------------------------------------
static int real_in_range(int range, double v) {
    switch (range) {
    case R_POS: return v > 0;
    case R_NONNEG: return v >= 0;
    case R_UNIT: return v >= 0 && v <= 1;
    case R_UNIT_OPEN: return v >= 0 && v < 1;
    default: return 1;
    }
}

// Shared by T_INT, T_SEED and the elements of T_PAIR: a JSON integer >= imin
// (and <= INT_MAX unless wide). Returns 0 and sets *out, or reports and returns -1.
// why: the message for a too-small value, when the generic one would not say why.
static int read_int(Loader *L, const char *dk, const char *desc, const char *why,
                    const json_t *v, int imin, int wide, json_int_t *out) {
    if (!json_is_integer(v)) {
        type_problem(L, dk, desc, v, 1);
        return -1;
    }
    json_int_t x = json_integer_value(v);
    if (x < imin) {
        if (why)
            problem(L, dk, 0, dk, "%s (got %" JSON_INTEGER_FORMAT ")", why, x);
        else
            problem(L, dk, 0, dk, "expected %s, got %" JSON_INTEGER_FORMAT, desc, x);
        return -1;
    }
    if (!wide && x > INT_MAX) {
        problem(L, dk, 0, dk, "expected %s, got %" JSON_INTEGER_FORMAT
                " (larger than %d, the largest supported value)", desc, x, INT_MAX);
        return -1;
    }
    *out = x;
    return 0;
}

// Readers per field type: the value v of field f (dotted key dk) into dst, its
// destination in the config. 0, or -1 when it was reported.
static int read_real(Loader *L, const Field *f, const char *dk, const json_t *v, char *dst) {
    if (!json_is_number(v)) {
        type_problem(L, dk, f->desc, v, 0);
        return -1;
    }
    double r = json_number_value(v);
    if (!real_in_range(f->range, r)) {   // "got 0", not "got integer 0"
        Str got = {0};
        if (json_is_integer(v)) str_printf(&got, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        else real_text(&got, r);
        problem(L, dk, 0, dk, "expected %s, got %s", f->desc, str_c(&got));
        str_free(&got);
        return -1;
    }
    *(double *)dst = r;
    return 0;
}

static int read_bool(Loader *L, const Field *f, const char *dk, const json_t *v, char *dst) {
    if (!json_is_boolean(v)) {
        type_problem(L, dk, f->desc, v, 0);
        return -1;
    }
    *(int *)dst = json_is_true(v);
    return 0;
}

// One of f->names: stored as f->vals[i], or as the name itself without vals.
static int read_enum(Loader *L, const Field *f, const char *dk, const json_t *v, char *dst) {
    Str one_of = {0};
    str_add(&one_of, "one of ");
    for (int i = 0; f->names[i]; i++) str_printf(&one_of, "%s\"%s\"", i ? ", " : "", f->names[i]);
    int hit = -1;
    if (json_is_string(v))
        for (int i = 0; f->names[i]; i++)
            if (!strcmp(f->names[i], json_string_value(v))) hit = i;
    if (hit < 0) type_problem(L, dk, str_c(&one_of), v, 0);   // "got string \"gpu\""
    str_free(&one_of);
    if (hit < 0) return -1;
    if (f->vals) *(int *)dst = f->vals[hit];
    else snprintf(dst, f->size, "%s", f->names[hit]);   // names fit: checked by tests
    return 0;
}

static int read_name(Loader *L, const Field *f, const char *dk, const json_t *v, char *dst) {
    if (!json_is_string(v)) {
        type_problem(L, dk, f->desc, v, 0);
        return -1;
    }
    const char *s = json_string_value(v);
    size_t n = strlen(s);
    int good = n >= 1 && n < f->size;
    for (size_t i = 0; good && i < n; i++)
        good = (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
               (s[i] >= '0' && s[i] <= '9') || s[i] == '_' || s[i] == '.' || s[i] == '-';
    if (!good) {
        type_problem(L, dk, f->desc, v, 0);
        return -1;
    }
    memcpy(dst, s, n + 1);
    return 0;
}

static int read_path(Loader *L, const Field *f, const char *dk, const json_t *v, char *dst) {
    if (!json_is_string(v) || !*json_string_value(v)) {
        type_problem(L, dk, f->desc, v, 0);
        return -1;
    }
    const char *s = json_string_value(v);
    size_t n = strlen(s);
    if (n >= f->size) {
        problem(L, dk, 0, dk, "path is %zu bytes long; at most %zu are supported", n, f->size - 1);
        return -1;
    }
    memcpy(dst, s, n + 1);
    return 0;
}

// checkpoint_layers: [begin, end], each element checked (and reported) on its own.
static int read_pair(Loader *L, const Field *f, const char *dk, const json_t *v, NsaConfig *cfg) {
    if (!json_is_array(v) || json_array_size(v) != 2) {
        type_problem(L, dk, f->desc, v, 0);
        return -1;
    }
    json_int_t be[2];
    int bad = 0;
    for (size_t i = 0; i < 2; i++) {
        char edk[80];
        snprintf(edk, sizeof edk, "%s[%zu]", dk, i);
        bad |= read_int(L, edk, "a non-negative integer", NULL, json_array_get(v, i), 0, 0, &be[i]);
    }
    if (bad) return -1;
    cfg->ckpt_begin = (int)be[0];
    cfg->ckpt_end = (int)be[1];
    return 0;
}

// Field id's value v into cfg; L->ok[id] when it is valid.
static void read_field(Loader *L, NsaConfig *cfg, int id, const json_t *v) {
    const Field *f = &FIELDS[id];
    char dk[64];
    dotted(id, dk, sizeof dk);
    char *dst = (char *)cfg + f->off;
    json_int_t x;
    int rc = -1;
    switch (f->type) {
    case T_INT:
        if ((rc = read_int(L, dk, f->desc, f->why, v, f->imin, 0, &x)) == 0) *(int *)dst = (int)x;
        break;
    case T_SEED:
        if ((rc = read_int(L, dk, f->desc, NULL, v, 0, 1, &x)) == 0) *(uint64_t *)dst = (uint64_t)x;
        break;
    case T_REAL: rc = read_real(L, f, dk, v, dst); break;
    case T_BOOL: rc = read_bool(L, f, dk, v, dst); break;
    case T_ENUM: rc = read_enum(L, f, dk, v, dst); break;
    case T_NAME: rc = read_name(L, f, dk, v, dst); break;
    case T_PATH: rc = read_path(L, f, dk, v, dst); break;
    case T_PAIR: rc = read_pair(L, f, dk, v, cfg); break;
    }
    if (rc == 0) L->ok[id] = 1;
}

// ---- overrides ---------------------------------------------------------------------
// "sec.key=value" or "key=value" (top-level keys). The value is JSON if it parses
// as JSON, else the raw text as a string, so `--set train.backend=cuda` works
// unquoted while `--set train.lr=1e-3` is a number.
static void apply_override(Loader *L, json_t *root, const char *ov) {
    const char *eq = strchr(ov, '=');
    if (!eq || eq == ov) {
        flag_problem(L, NULL, "expected section.key=value (e.g. --set train.lr=1e-3)");
        return;
    }
    char path[128], dk[160];
    size_t plen = (size_t)(eq - ov);
    if (plen >= sizeof path) {
        flag_problem(L, NULL, "key path is longer than %zu bytes", sizeof path - 1);
        return;
    }
    memcpy(path, ov, plen);
    path[plen] = '\0';
    printable(path, dk, sizeof dk);
    char *dot = strchr(path, '.');
    const char *sec = NULL, *key = path;
    if (dot) {
        *dot = '\0';
        sec = path;
        key = dot + 1;
    }
    int s = sec ? section_index(sec) : -1;
    if (!sec && section_index(key) >= 0) {
        int first = 0;
        for (int i = 0; i < F_COUNT; i++)
            if (FIELDS[i].sec && !strcmp(FIELDS[i].sec, key)) {
                first = i;
                break;
            }
        flag_problem(L, dk, "'%s' is a section: set its keys one at a time "
                     "(e.g. --set %s.%s=...)", key, key, FIELDS[first].key);
        return;
    }
    if (sec && s < 0) {
        char sp[80];
        printable(sec, sp, sizeof sp);
        Str known = {0};
        for (int i = 0; SECTIONS[i]; i++) str_printf(&known, "%s%s", i ? ", " : "", SECTIONS[i]);
        flag_problem(L, dk, "unknown section '%s' (known: %s)", sp, str_c(&known));
        str_free(&known);
        return;
    }
    if (field_index(sec, key) < 0) {
        unknown_key(L, sec, key, ov);
        return;
    }
    json_error_t je;
    json_t *v = json_loads(eq + 1, JSON_DECODE_ANY, &je);
    if (!v && strstr(je.text, "overflow")) {   // 1e999: a number, but none a double holds
        flag_problem(L, dk, "%s is out of the range of a number (|x| < 1.8e308)", eq + 1);
        return;
    }
    if (!v) v = json_string(eq + 1);
    if (!v) {
        flag_problem(L, dk, "the value is not valid UTF-8");
        return;
    }
    json_t *obj = root;
    if (sec) {
        obj = json_object_get(root, sec);
        if (!obj) {
            obj = json_object();
            if (!obj || json_object_set_new(root, sec, obj)) {
                json_decref(v);
                L->ps->oom = 1;
                return;
            }
            add_origin(L, sec, ov);   // errors about the new section point here
        } else if (!json_is_object(obj)) {
            json_decref(v);
            flag_problem(L, dk, "cannot set a key: '%s' in the file is not an object", sec);
            return;
        }
    }
    if (json_object_set_new(obj, key, v)) {
        L->ps->oom = 1;
        return;
    }
    char full[128];   // the dotted path as written (path[] had its '.' cut)
    memcpy(full, ov, plen);
    full[plen] = '\0';
    add_origin(L, full, ov);
}

// ---- validation --------------------------------------------------------------------
int config_backend_allows(const char *backend, const char *precision) {
    if (!strcmp(backend, "cpu")) return !strcmp(precision, "fp32");
    if (!strcmp(backend, "cpu64")) return !strcmp(precision, "fp64");
    return strcmp(precision, "fp64") != 0;   // cuda: bf16, fp32, fp16
}

// Every key on its own: unknown keys (at the key), sections of the wrong type,
// missing sections and keys, each value read and range-checked (L->ok, L->given).
static void read_keys(Loader *L, json_t *root, NsaConfig *c) {
    const char *k;
    json_t *v;
    // unknown keys (at the key), sections of the wrong type, missing sections
    json_object_foreach(root, k, v) {
        if (section_index(k) < 0 && field_index(NULL, k) < 0) unknown_key(L, NULL, k, NULL);
    }
    json_t *sec_obj[4] = {NULL, NULL, NULL, NULL};
    int sec_bad[4] = {0, 0, 0, 0};   // missing-required or not an object: skip its keys
    for (int s = 0; SECTIONS[s]; s++) {
        json_t *sv = json_object_get(root, SECTIONS[s]);
        if (!sv) {
            if (SECTION_REQUIRED[s]) {
                problem(L, "", 0, SECTIONS[s], "missing required key '%s' at the top level",
                        SECTIONS[s]);
                sec_bad[s] = 1;
            }
            continue;
        }
        if (!json_is_object(sv)) {
            type_problem(L, SECTIONS[s], "an object", sv, 0);
            sec_bad[s] = 1;
            continue;
        }
        sec_obj[s] = sv;
        json_object_foreach(sv, k, v) {
            if (field_index(SECTIONS[s], k) < 0) unknown_key(L, SECTIONS[s], k, NULL);
        }
    }
    // each key: missing, default, or read and checked on its own
    for (int id = 0; id < F_COUNT; id++) {
        const Field *f = &FIELDS[id];
        json_t *obj = root;
        if (f->sec) {
            int s = section_index(f->sec);
            if (sec_bad[s]) continue;
            obj = sec_obj[s];
        }
        json_t *fv = obj ? json_object_get(obj, f->key) : NULL;
        if (!fv) {
            if (f->required) {
                char dk[64];
                dotted(id, dk, sizeof dk);
                if (f->sec) problem(L, f->sec, 0, dk, "missing required key '%s' in '%s'",
                                    f->key, f->sec);
                else problem(L, "", 0, dk, "missing required key '%s' at the top level", f->key);
            } else {
                L->ok[id] = 1;   // the default
            }
            continue;
        }
        L->given[id] = 1;
        read_field(L, c, id, fv);
    }
}

// Defaults that depend on other values: seq_len, gate_hidden, precision.
static void resolve_defaults(Loader *L, NsaConfig *c) {
    unsigned char *ok = L->ok;
    if (!L->given[F_SEQ_LEN]) {
        c->seq_len = c->max_seq_len;
        ok[F_SEQ_LEN] = ok[F_MAX_SEQ];
    }
    if (ok[F_GATE_HIDDEN] && c->gate_hidden == 0) {
        if (!ok[F_DIM]) {
            ok[F_GATE_HIDDEN] = 0;
        } else if ((c->gate_hidden = c->dim / 4) < 1) {
            relation(L, F_GATE_HIDDEN, F_DIM, "defaults to model.dim/4, which is 0 "
                     "(model.dim is %d); set nsa.gate_hidden to a positive integer", c->dim);
            ok[F_GATE_HIDDEN] = 0;
        }
    }
    if (!L->given[F_PRECISION] && ok[F_BACKEND])
        snprintf(c->precision, sizeof c->precision, "%s",
                 !strcmp(c->backend, "cpu64") ? "fp64" : !strcmp(c->backend, "cuda") ? "bf16"
                                                                                      : "fp32");
}

// Cross-field rules, each checked only when the values involved are valid.
static void check_relations(Loader *L, const NsaConfig *c) {
    const unsigned char *ok = L->ok;
    // model shape
    if (ok[F_HEADS] && ok[F_KV_HEADS] && c->n_heads % c->n_kv_heads)
        relation(L, F_KV_HEADS, F_HEADS, "n_kv_heads (%d) must divide n_heads (%d): each KV "
                 "group serves the same number of query heads", c->n_kv_heads, c->n_heads);
    if (ok[F_HEAD_DIM] && c->head_dim % 2)
        relation(L, F_HEAD_DIM, F_HEAD_DIM, "head_dim (%d) must be even: RoPE rotates pairs "
                 "of dimensions", c->head_dim);
    if (ok[F_HEADS] && ok[F_HEAD_DIM] && (long long)c->n_heads * c->head_dim > INT_MAX)
        relation(L, F_HEAD_DIM, F_HEADS, "n_heads * head_dim (%lld) exceeds %d",
                 (long long)c->n_heads * c->head_dim, INT_MAX);
    // NSA geometry
    if (ok[F_D] && ok[F_L] && c->l % c->d)
        relation(L, F_D, F_L, "d (%d) must divide l (%d): compression blocks of length l "
                 "start every d tokens", c->d, c->l);
    if (ok[F_D] && ok[F_L_SEL] && c->l_sel % c->d)
        relation(L, F_D, F_L_SEL, "d (%d) must divide l_sel (%d): selection scores are sums "
                 "of whole compression strides", c->d, c->l_sel);
    if (ok[F_L] && ok[F_L_SEL] && c->l > c->l_sel)
        relation(L, F_L, F_L_SEL, "l (%d) must be <= l_sel (%d)", c->l, c->l_sel);
    // training
    if (ok[F_SEQ_LEN] && ok[F_MAX_SEQ] && c->seq_len > c->max_seq_len)
        relation(L, F_SEQ_LEN, F_MAX_SEQ, "seq_len (%d) must be <= model.max_seq_len (%d)",
                 c->seq_len, c->max_seq_len);
    if (ok[F_SEQ_LEN] && ok[F_BATCH] && (long long)c->batch_size * c->seq_len > INT_MAX)
        relation(L, F_BATCH, F_SEQ_LEN, "batch_size * seq_len (%lld tokens) exceeds %d",
                 (long long)c->batch_size * c->seq_len, INT_MAX);
    if (ok[F_CKPT] && c->ckpt_begin > c->ckpt_end)
        relation(L, F_CKPT, F_CKPT, "begin (%d) must be <= end (%d): the range is [begin, end)",
                 c->ckpt_begin, c->ckpt_end);
    else if (ok[F_CKPT] && ok[F_LAYERS] && c->ckpt_end > c->n_layers)
        relation(L, F_CKPT, F_LAYERS, "end (%d) must be <= model.n_layers (%d)", c->ckpt_end,
                 c->n_layers);
    if (ok[F_BACKEND] && ok[F_PRECISION] && !config_backend_allows(c->backend, c->precision))
        relation(L, F_PRECISION, F_BACKEND, "precision \"%s\" is not available on backend "
                 "\"%s\" (cpu: fp32; cpu64: fp64; cuda: bf16, fp32, fp16)", c->precision,
                 c->backend);
    // data
    if (ok[F_KIND]) {
        const char *kind = config_data_name(c->data_kind);
        int needs_path = c->data_kind == NSA_DATA_SHARDS || c->data_kind == NSA_DATA_TEXT;
        if (needs_path && !L->given[F_PATH])
            relation(L, F_PATH, F_KIND, "missing required key 'path' in 'data' (required "
                     "when kind is \"%s\")", kind);
        if (!needs_path && L->given[F_PATH])
            relation(L, F_PATH, F_KIND, "only allowed when data.kind is \"shards\" or "
                     "\"text\" (kind is \"%s\"%s)", kind, L->given[F_KIND] ? "" : ", the default");
        if (c->data_kind == NSA_DATA_TEXT && ok[F_VOCAB] && c->vocab_size < 256)
            relation(L, F_VOCAB, F_KIND, "vocab_size (%d) must be >= 256 for data.kind "
                     "\"text\": the byte-level tokenizer uses one token per byte value",
                     c->vocab_size);
    }
}

// The (overridden) document into c: each key, the defaults that depend on others, the rules.
static void validate(Loader *L, json_t *root, NsaConfig *c) {
    if (!json_is_object(root)) {
        char got[80];
        describe(root, 0, got, sizeof got);
        problem(L, "", 0, NULL, "expected the config to be a JSON object, got %s", got);
        return;
    }
    read_keys(L, root, c);
    resolve_defaults(L, c);
    check_relations(L, c);
}

// ---- canonical JSON and digest -----------------------------------------------------
// Top-level order key: the section for section keys, the key itself otherwise.
static int field_order(const void *a, const void *b) {
    const Field *fa = &FIELDS[*(const int *)a], *fb = &FIELDS[*(const int *)b];
    int t = strcmp(fa->sec ? fa->sec : fa->key, fb->sec ? fb->sec : fb->key);
    if (t) return t;
    return strcmp(fa->key, fb->key);
}

static void put_value(Str *b, const NsaConfig *c, int id) {
    const Field *f = &FIELDS[id];
    const char *src = (const char *)c + f->off;
    switch (f->type) {
    case T_INT: str_printf(b, "%d", *(const int *)src); break;
    case T_SEED: str_printf(b, "%" PRIu64, *(const uint64_t *)src); break;
    case T_REAL: real_text(b, *(const double *)src); break;
    case T_BOOL: str_add(b, *(const int *)src ? "true" : "false"); break;
    case T_ENUM:
        json_string_lit(b, f->vals ? enum_name(f->names, f->vals, *(const int *)src) : src);
        break;
    case T_NAME:
    case T_PATH: json_string_lit(b, src); break;
    case T_PAIR: str_printf(b, "[%d, %d]", c->ckpt_begin, c->ckpt_end); break;
    }
}

// Same schema as the input (a --check-config dump loads back as a config with the
// same digest), every key present with its resolved value, keys sorted at every
// level, two-space indent. data.path is left out when empty: it is only allowed
// for the kinds that need it.
char *config_to_json(const NsaConfig *c) {
    int order[F_COUNT];
    for (int i = 0; i < F_COUNT; i++) order[i] = i;
    qsort(order, F_COUNT, sizeof order[0], field_order);
    Str b = {0};
    str_add(&b, "{");
    const char *open = NULL;   // section whose object is open
    int n_top = 0, n_in = 0;
    for (int i = 0; i < F_COUNT; i++) {
        const Field *f = &FIELDS[order[i]];
        if (order[i] == F_PATH && !c->data_path[0]) continue;
        if (open && (!f->sec || strcmp(open, f->sec))) {
            str_add(&b, "\n  }");
            open = NULL;
        }
        if (!f->sec) {
            str_printf(&b, "%s\n  \"%s\": ", n_top++ ? "," : "", f->key);
            put_value(&b, c, order[i]);
            continue;
        }
        if (!open) {
            str_printf(&b, "%s\n  \"%s\": {", n_top++ ? "," : "", f->sec);
            open = f->sec;
            n_in = 0;
        }
        str_printf(&b, "%s\n    \"%s\": ", n_in++ ? "," : "", f->key);
        put_value(&b, c, order[i]);
    }
    if (open) str_add(&b, "\n  }");
    str_add(&b, "\n}\n");
    return str_take(&b);
}

// 64-bit FNV-1a.
void config_digest_of(const char *s, char out[17]) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ull;
    }
    snprintf(out, 17, "%016" PRIx64, h);
}

// ---- loading -----------------------------------------------------------------------
// Whole file into memory, NUL-terminated. Read once and parsed from memory (the
// same bytes feed Jansson and jsonpos), so `--config <(generate)` works (a pipe is read
// too) and an edit between two reads cannot make positions point at the wrong text.
// Through common/util's reader: at most 64 MiB, a device or folder refused unread.
static char *read_config_file(const char *path, size_t *len, Str *why) {
    char err[300];
    char *text = read_file_limited(path, READ_LIMIT_DEFAULT, READ_PIPE_OK, len, err, sizeof err);
    if (!text) str_printf(why, "%s%s", err, errno == EFBIG ? ": not a config" : "");
    return text;   // "" for an empty file: Jansson reports it
}

// Sort key of a problem: no position first, then the file's by position, then
// the overrides' in override order.
static int problem_before(const ConfigProblem *a, const ConfigProblem *b) {
    long la = a->override >= 0 ? INT_MAX : a->line, lb = b->override >= 0 ? INT_MAX : b->line;
    long ca = a->override >= 0 ? a->override : a->col, cb = b->override >= 0 ? b->override : b->col;
    return la != lb ? la < lb : ca < cb;
}

// Stable (insertion): problems at the same place keep the order they were found in.
static void sort_problems(ConfigProblems *ps) {
    for (int i = 1; i < ps->n; i++) {
        ConfigProblem p = ps->v[i];
        int j = i;
        for (; j > 0 && problem_before(&p, &ps->v[j - 1]); j--) ps->v[j] = ps->v[j - 1];
        ps->v[j] = p;
    }
}

char *config_problem_text(const ConfigProblems *ps, int i, const char *const *overrides) {
    const ConfigProblem *p = &ps->v[i];
    Str out = {0};
    if (p->override >= 0) str_printf(&out, "--set %s", overrides[p->override]);
    else if (p->line > 0) str_printf(&out, "%s:%d:%d", ps->file, p->line, p->col);
    else str_add(&out, ps->file);
    str_add(&out, ": ");
    if (p->key[0]) str_printf(&out, "%s: ", p->key);
    str_add(&out, p->message);
    return str_take(&out);
}

void config_problems_free(ConfigProblems *ps) {
    for (int i = 0; i < ps->n; i++) {
        free(ps->v[i].key);
        free(ps->v[i].message);
    }
    free(ps->v);
    ps->v = NULL;
    ps->n = ps->cap = 0;
    ps->oom = 0;
}

int config_load_problems(NsaConfig *cfg, const char *path, const char *const *overrides,
                         int n_overrides, ConfigProblems *ps) {
    Loader L;
    memset(&L, 0, sizeof L);
    L.path = path;
    L.ps = ps;
    int before = ps->n;
    set_defaults(cfg);
    snprintf(ps->file, sizeof ps->file, "%s", path && strlen(path) < sizeof cfg->source ? path : "config");
    json_t *root = NULL;
    char *text = NULL;
    size_t len = 0;
    Str why = {0};
    if (!path) {
        located_problem(&L, 0, 0, "no config file given");
        goto done;
    }
    if (strlen(path) >= sizeof cfg->source) {
        located_problem(&L, 0, 0, "path is longer than %zu bytes", sizeof cfg->source - 1);
        goto done;
    }
    snprintf(cfg->source, sizeof cfg->source, "%s", path);
    if (!(text = read_config_file(path, &len, &why))) {
        located_problem(&L, 0, 0, "%s", str_c(&why));
        goto done;
    }
    json_error_t je;
    root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {   // syntax: Jansson's own position (line >= 1) and text
        located_problem(&L, je.line, je.column, "%s", je.text);
        goto done;
    }
    L.text = text;
    for (int i = 0; i < n_overrides; i++) {
        if (!json_is_object(root)) break;   // validate() reports the root
        L.cur_ov = i;
        apply_override(&L, root, overrides[i]);
    }
    validate(&L, root, cfg);
    if (ps->n == before && !ps->oom) {
        char *canon = config_to_json(cfg);
        config_digest_of(canon, cfg->digest);
        free(canon);
    }
done:
    sort_problems(ps);
    for (int i = 0; i < L.n_origins; i++) free(L.origins[i].path);
    free(L.origins);
    str_free(&why);
    free(text);
    json_decref(root);
    return (ps->n != before || ps->oom) ? -1 : 0;
}

// Problems into err, one per line, sorted by position; if err is too small, as
// many whole lines as fit and a count of the rest (room for it is kept).
static void write_problems(const ConfigProblems *ps, const char *const *overrides, char *err,
                           size_t errlen) {
    if (!err || !errlen) return;
    err[0] = '\0';
    size_t used = 0;
    for (int i = 0; i < ps->n; i++) {
        char *line = config_problem_text(ps, i, overrides);
        size_t n = strlen(line);
        size_t tail = i + 1 < ps->n ? 32 : 0;   // "(N more problems)\n" fits in 32
        if (used + n + 1 + tail >= errlen) {
            snprintf(err + used, errlen - used, "(%d more problems)\n", ps->n - i);
            free(line);
            return;
        }
        memcpy(err + used, line, n);
        err[used + n] = '\n';
        err[used + n + 1] = '\0';
        used += n + 1;
        free(line);
    }
    if (ps->oom) snprintf(err + used, errlen - used, "out of memory while loading the config\n");
}

int config_load(NsaConfig *cfg, const char *path, const char *const *overrides,
                int n_overrides, char *err, size_t errlen) {
    ConfigProblems ps = {0};
    int rc = config_load_problems(cfg, path, overrides, n_overrides, &ps);
    write_problems(&ps, overrides, err, errlen);
    config_problems_free(&ps);
    return rc;
}
