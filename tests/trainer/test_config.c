// tests/trainer/test_config.c — the strict config loader and jsonpos.
//
// Expected positions are computed here independently of jsonpos: either written
// out literally or found by searching the test's own JSON text for a marker, so
// a wrong jsonpos cannot make its own test pass. Every case checks the whole
// "<file>:<line>:<col>: <key>: <message>" prefix, not just that loading failed.
#define _POSIX_C_SOURCE 200809L   // mkdtemp, unlink, rmdir, opendir
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/ops.h"
#include "common/config.h"
#include "common/jsonpos.h"

// ---- fixtures --------------------------------------------------------------------
static char g_dir[64];        // per-run temp dir
static char g_files[256][96]; // files written there, removed at the end
static int g_nfiles;
static char g_err[16384];

static const char *src_dir(void) {
    const char *s = getenv("NSA_SOURCE_DIR");   // set by ctest; run by hand: repo root
    return s && *s ? s : ".";
}

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/nsa_test_config_XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    for (int i = 0; i < g_nfiles; i++) unlink(g_files[i]);
    return rmdir(g_dir);
}

// Writes text to a fresh file in the temp dir; its path is returned (static slot).
static const char *write_tmp(const char *text) {
    assert_true(g_nfiles < 256);
    char *path = g_files[g_nfiles];
    snprintf(path, sizeof g_files[0], "%s/c%03d.json", g_dir, g_nfiles);
    g_nfiles++;
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
    assert_int_equal(fclose(f), 0);
    return path;
}

// One key per line, so a test can change one value and know where it is.
static const char BASE[] =
    "{\n"
    "  \"name\": \"t\",\n"
    "  \"model\": {\n"
    "    \"vocab_size\": 256,\n"
    "    \"dim\": 64,\n"
    "    \"n_layers\": 2,\n"
    "    \"n_heads\": 4,\n"
    "    \"n_kv_heads\": 2,\n"
    "    \"head_dim\": 16,\n"
    "    \"ffn_dim\": 128,\n"
    "    \"max_seq_len\": 128\n"
    "  },\n"
    "  \"nsa\": {\n"
    "    \"l\": 8,\n"
    "    \"d\": 4,\n"
    "    \"l_sel\": 16,\n"
    "    \"n\": 4,\n"
    "    \"w\": 32\n"
    "  },\n"
    "  \"train\": {\n"
    "    \"seq_len\": 64,\n"
    "    \"batch_size\": 2\n"
    "  },\n"
    "  \"data\": {\n"
    "    \"kind\": \"learnable\"\n"
    "  }\n"
    "}\n";

// BASE with the single occurrence of `from` replaced by `to` (static buffer).
static const char *edit(const char *from, const char *to) {
    static char out[8192];
    const char *at = strstr(BASE, from);
    assert_non_null(at);
    assert_null(strstr(at + 1, from));   // the marker must be unambiguous
    int n = snprintf(out, sizeof out, "%.*s%s%s", (int)(at - BASE), BASE, to, at + strlen(from));
    assert_true(n > 0 && (size_t)n < sizeof out);
    return out;
}

// line:col (1-based, bytes) of `needle` in text, plus `skip` bytes: the oracle.
static void text_pos(const char *text, const char *needle, size_t skip, int *line, int *col) {
    const char *at = strstr(text, needle);
    assert_non_null(at);
    at += skip;
    *line = 1;
    const char *bol = text;
    for (const char *s = text; s < at; s++)
        if (*s == '\n') {
            (*line)++;
            bol = s + 1;
        }
    *col = (int)(at - bol) + 1;
}

static int load(NsaConfig *c, const char *path, const char *const *ov, int n_ov) {
    g_err[0] = '\0';
    return config_load(c, path, ov, n_ov, g_err, sizeof g_err);
}

static void assert_contains(const char *hay, const char *needle) {
    if (!strstr(hay, needle))
        fail_msg("expected to find\n  %s\nin\n%s", needle, hay);
}

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

// Loading `text` fails with a problem located at `needle`+`skip` that reads `msg`.
static void expect_at(const char *text, const char *needle, size_t skip, const char *msg) {
    NsaConfig c;
    const char *path = write_tmp(text);
    assert_int_equal(load(&c, path, NULL, 0), -1);
    int line, col;
    text_pos(text, needle, skip, &line, &col);
    char want[1024];
    snprintf(want, sizeof want, "%s:%d:%d: %s", path, line, col, msg);
    assert_contains(g_err, want);
}

// The value after `"key": ` in text.
#define VALUE_OF(key) "\"" key "\": ", sizeof("\"" key "\": ") - 1

// ---- good configs ----------------------------------------------------------------
static void load_repo_config(NsaConfig *c, const char *rel) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", src_dir(), rel);
    if (load(c, path, NULL, 0)) fail_msg("%s", g_err);
    assert_string_equal(c->source, path);
    assert_int_equal(strlen(c->digest), 16);
    assert_int_equal(strspn(c->digest, "0123456789abcdef"), 16);
}

static void test_tiny(void **state) {
    (void)state;
    NsaConfig c;
    load_repo_config(&c, "configs/tiny.json");
    assert_string_equal(c.name, "tiny");
    assert_int_equal(c.vocab_size, 256);
    assert_int_equal(c.dim, 64);
    assert_int_equal(c.n_layers, 2);
    assert_int_equal(c.n_heads, 4);
    assert_int_equal(c.n_kv_heads, 2);
    assert_int_equal(c.head_dim, 16);
    assert_int_equal(c.ffn_dim, 128);
    assert_int_equal(c.max_seq_len, 128);
    assert_int_equal(c.l, 8);
    assert_int_equal(c.d, 4);
    assert_int_equal(c.l_sel, 16);
    assert_int_equal(c.n, 4);
    assert_int_equal(c.w, 32);
    assert_int_equal(c.seq_len, 128);
    assert_int_equal(c.batch_size, 4);
    assert_int_equal(c.steps, 200);
    assert_true(c.lr == 3e-3);
    assert_int_equal(c.warmup_steps, 10);
    assert_true(c.weight_decay == 0.0);
    assert_int_equal(c.data_kind, NSA_DATA_LEARNABLE);
    assert_int_equal(c.gate_hidden, 16);   // default dim/4, resolved
    assert_string_equal(c.backend, "cpu");
    assert_string_equal(c.precision, "fp32");
}

static void test_m7c(void **state) {
    (void)state;
    NsaConfig c;
    load_repo_config(&c, "configs/m7c_125m.json");
    assert_string_equal(c.name, "m7c_125m");
    assert_int_equal(c.vocab_size, 50304);
    assert_int_equal(c.dim, 768);
    assert_int_equal(c.n_layers, 12);
    assert_int_equal(c.n_heads, 12);
    assert_int_equal(c.n_kv_heads, 2);
    assert_int_equal(c.head_dim, 64);
    assert_int_equal(c.ffn_dim, 2048);
    assert_int_equal(c.max_seq_len, 2048);
    assert_int_equal(c.l, 32);
    assert_int_equal(c.d, 16);
    assert_int_equal(c.l_sel, 64);
    assert_int_equal(c.n, 16);
    assert_int_equal(c.w, 512);
    assert_int_equal(c.seq_len, 2048);
    assert_int_equal(c.batch_size, 1);
    assert_int_equal(c.steps, 1000);
    assert_true(c.lr == 6e-4);
    assert_int_equal(c.warmup_steps, 100);
    assert_int_equal(c.data_kind, NSA_DATA_SYNTHETIC);
    assert_int_equal(c.gate_hidden, 192);
}

static void test_defaults(void **state) {
    (void)state;
    // only the required keys
    const char *text = edit("  \"train\": {\n    \"seq_len\": 64,\n    \"batch_size\": 2\n  },\n"
                            "  \"data\": {\n    \"kind\": \"learnable\"\n  }\n",
                            "  \"train\": {}\n");
    NsaConfig c;
    const char *path = write_tmp(text);
    if (load(&c, path, NULL, 0)) fail_msg("%s", g_err);
    assert_true(c.rope_theta == 10000.0);
    assert_true(c.norm_eps == 1e-5);
    assert_int_equal(c.tie_embeddings, 0);
    assert_int_equal(c.phi, NSA_PHI_AVG);
    assert_int_equal(c.gate_act, NSA_GATE_SOFTMAX);
    assert_int_equal(c.gate_hidden, 16);
    assert_int_equal(c.force_branch, -1);
    assert_int_equal(c.seq_len, 128);   // max_seq_len
    assert_int_equal(c.batch_size, 1);
    assert_int_equal(c.grad_accum, 1);
    assert_int_equal(c.steps, 100);
    assert_true(c.lr == 3e-4);
    assert_true(c.min_lr_frac == 0.1);
    assert_int_equal(c.warmup_steps, 0);
    assert_true(c.weight_decay == 0.1);
    assert_true(c.beta1 == 0.9);
    assert_true(c.beta2 == 0.95);
    assert_true(c.adam_eps == 1e-8);
    assert_true(c.grad_clip == 1.0);
    assert_true(c.seed == 1337);
    assert_int_equal(c.ckpt_begin, 0);
    assert_int_equal(c.ckpt_end, 0);
    assert_int_equal(c.prefill, NSA_PREFILL_BATCHED);
    assert_string_equal(c.backend, "cpu");
    assert_string_equal(c.precision, "fp32");
    assert_int_equal(c.data_kind, NSA_DATA_LEARNABLE);
    assert_string_equal(c.data_path, "");
    assert_string_equal(c.name, "t");

    // the precision default follows the backend; gate_hidden 0 means dim/4
    const char *ov64[] = {"train.backend=cpu64", "nsa.gate_hidden=0", "model.dim=96"};
    if (load(&c, path, ov64, 3)) fail_msg("%s", g_err);
    assert_string_equal(c.precision, "fp64");
    assert_int_equal(c.gate_hidden, 24);
    const char *ovcuda[] = {"train.backend=cuda"};
    if (load(&c, path, ovcuda, 1)) fail_msg("%s", g_err);
    assert_string_equal(c.precision, "bf16");
    const char *ovfp16[] = {"train.backend=cuda", "train.precision=fp16"};
    if (load(&c, path, ovfp16, 2)) fail_msg("%s", g_err);
    assert_string_equal(c.precision, "fp16");
}

static void test_all_keys(void **state) {
    (void)state;
    // every optional key set to a non-default value, in a file
    const char *text = edit(
        "    \"seq_len\": 64,\n    \"batch_size\": 2\n",
        "    \"seq_len\": 64, \"batch_size\": 2, \"grad_accum\": 3, \"steps\": 7,\n"
        "    \"lr\": 1, \"min_lr_frac\": 0, \"warmup_steps\": 2, \"weight_decay\": 0,\n"
        "    \"beta1\": 0, \"beta2\": 0.5, \"adam_eps\": 1e-6, \"grad_clip\": -1,\n"
        "    \"seed\": 9007199254740993, \"checkpoint_layers\": [1, 2],\n"
        "    \"prefill\": \"sequential\", \"backend\": \"cuda\", \"precision\": \"fp32\"\n");
    NsaConfig c;
    const char *ov[] = {"model.rope_theta=500000", "model.norm_eps=1e-6",
                        "model.tie_embeddings=true", "nsa.phi=mlp", "nsa.gate_act=sigmoid",
                        "nsa.gate_hidden=5", "nsa.force_branch=win", "data.kind=shards",
                        "data.path=/data/shard_*.bin"};
    if (load(&c, write_tmp(text), ov, 9)) fail_msg("%s", g_err);
    assert_int_equal(c.grad_accum, 3);
    assert_int_equal(c.steps, 7);
    assert_true(c.lr == 1.0);                  // integers are accepted for reals
    assert_true(c.min_lr_frac == 0.0);
    assert_int_equal(c.warmup_steps, 2);
    assert_true(c.beta2 == 0.5);
    assert_true(c.adam_eps == 1e-6);
    assert_true(c.grad_clip == -1.0);
    assert_true(c.seed == 9007199254740993ull);   // beyond 2^53: kept exact
    assert_int_equal(c.ckpt_begin, 1);
    assert_int_equal(c.ckpt_end, 2);
    assert_int_equal(c.prefill, NSA_PREFILL_SEQUENTIAL);
    assert_string_equal(c.backend, "cuda");
    assert_string_equal(c.precision, "fp32");
    assert_true(c.rope_theta == 500000.0);
    assert_true(c.norm_eps == 1e-6);
    assert_int_equal(c.tie_embeddings, 1);
    assert_int_equal(c.phi, NSA_PHI_MLP);
    assert_int_equal(c.gate_act, NSA_GATE_SIGMOID);
    assert_int_equal(c.gate_hidden, 5);
    assert_int_equal(c.force_branch, NSA_BR_WIN);
    assert_int_equal(c.data_kind, NSA_DATA_SHARDS);
    assert_string_equal(c.data_path, "/data/shard_*.bin");
}

// ---- syntax ----------------------------------------------------------------------
static void test_syntax(void **state) {
    (void)state;
    NsaConfig c;
    // Jansson's own positions (its column is the offending token's last character)
    const char *p = write_tmp(edit("\"dim\": 64,", "\"dim\": ,"));
    assert_int_equal(load(&c, p, NULL, 0), -1);
    char want[256];
    snprintf(want, sizeof want, "%s:5:12: unexpected token near ','\n", p);
    assert_string_equal(g_err, want);

    p = write_tmp(edit("\"w\": 32\n", "\"w\": 32,\n"));
    assert_int_equal(load(&c, p, NULL, 0), -1);
    snprintf(want, sizeof want, "%s:19:3: string or '}' expected near '}'", p);
    assert_contains(g_err, want);

    p = write_tmp(edit("\"n_layers\": 2,", "\"n_layers\": 2, \"dim\": 64,"));
    assert_int_equal(load(&c, p, NULL, 0), -1);
    snprintf(want, sizeof want, "%s:6:24: duplicate object key near '\"dim\"'", p);
    assert_contains(g_err, want);

    p = write_tmp("");
    assert_int_equal(load(&c, p, NULL, 0), -1);
    assert_contains(g_err, "'[' or '{' expected near end of file");

    snprintf(want, sizeof want, "%s/no_such_file.json", g_dir);
    assert_int_equal(load(&c, want, NULL, 0), -1);
    assert_contains(g_err, "no_such_file.json: cannot open: ");

    expect_at("[1, 2]\n", "[", 0, "expected the config to be a JSON object, got array of 2 elements");
}

// ---- keys ------------------------------------------------------------------------
static void test_unknown_keys(void **state) {
    (void)state;
    expect_at(edit("\"name\": \"t\",", "\"name\": \"t\", \"optimizer\": 1,"), "\"optimizer\"", 0,
              "optimizer: unknown key 'optimizer' at the top level (known: name, model, nsa, "
              "train, data)\n");
    expect_at(edit("\"w\": 32", "\"w\": 32,\n    \"foo\": {\"w\": 1}"), "\"foo\"", 0,
              "nsa.foo: unknown key 'foo' in 'nsa' (known: l, d, l_sel, n, w, phi, gate_act, "
              "gate_hidden, force_branch)\n");
    // a near miss gets a suggestion
    expect_at(edit("\"ffn_dim\"", "\"ffn_dims\""), "\"ffn_dims\"", 0,
              "model.ffn_dims: unknown key 'ffn_dims' in 'model'");
    assert_contains(g_err, "did you mean 'ffn_dim'?)");
    assert_contains(g_err, "missing required key 'ffn_dim' in 'model'");
}

static void test_wrong_types(void **state) {
    (void)state;
    expect_at(edit("\"n_heads\": 4", "\"n_heads\": \"4\""), VALUE_OF("n_heads"),
              "model.n_heads: expected a positive integer, got string \"4\"\n");
    expect_at(edit("\"dim\": 64", "\"dim\": 64.0"), VALUE_OF("dim"),
              "model.dim: expected a positive integer, got real 64.0 (write integers "
              "without a decimal point or exponent)\n");
    expect_at(edit("\"dim\": 64", "\"dim\": 6.4e1"), VALUE_OF("dim"),
              "model.dim: expected a positive integer, got real 64.0");
    expect_at(edit("\"max_seq_len\": 128", "\"max_seq_len\": 128, \"tie_embeddings\": 1"),
              VALUE_OF("tie_embeddings"),
              "model.tie_embeddings: expected true or false, got integer 1\n");
    expect_at(edit("\"batch_size\": 2", "\"batch_size\": 2, \"lr\": true"), VALUE_OF("lr"),
              "train.lr: expected a number > 0, got boolean true\n");
    expect_at(edit("\"batch_size\": 2", "\"batch_size\": null"), VALUE_OF("batch_size"),
              "train.batch_size: expected a positive integer, got null\n");
    expect_at(edit("\"kind\": \"learnable\"", "\"kind\": [\"learnable\"]"), VALUE_OF("kind"),
              "data.kind: expected one of \"synthetic\", \"learnable\", \"shards\", \"text\", "
              "got array of 1 element\n");
    expect_at(edit("\"name\": \"t\"", "\"name\": 7"), VALUE_OF("name"),
              "name: expected a name of 1 to 63 characters");
    expect_at(edit("\"train\": {\n    \"seq_len\": 64,\n    \"batch_size\": 2\n  }",
                   "\"train\": [64, 2]"),
              VALUE_OF("train"), "train: expected an object, got array of 2 elements\n");
}

static void test_missing(void **state) {
    (void)state;
    // at the enclosing object's opening brace
    expect_at(edit("    \"dim\": 64,\n", ""), VALUE_OF("model"),
              "model.dim: missing required key 'dim' in 'model'\n");
    expect_at(edit("\"name\": \"t\",", ""), "{", 0,
              "name: missing required key 'name' at the top level\n");
    expect_at(edit("  \"nsa\": {\n    \"l\": 8,\n    \"d\": 4,\n    \"l_sel\": 16,\n"
                   "    \"n\": 4,\n    \"w\": 32\n  },\n", ""),
              "{", 0, "nsa: missing required key 'nsa' at the top level\n");
    // an empty section: every key, one line each
    const char *text = edit("  \"nsa\": {\n    \"l\": 8,\n    \"d\": 4,\n    \"l_sel\": 16,\n"
                            "    \"n\": 4,\n    \"w\": 32\n  },\n", "  \"nsa\": {},\n");
    expect_at(text, VALUE_OF("nsa"), "nsa.l: missing required key 'l' in 'nsa'");
    assert_int_equal(count_lines(g_err), 5);
}

// ---- values ----------------------------------------------------------------------
typedef struct {
    const char *from, *to;   // edit of BASE
    const char *at;          // the key whose value the problem is located at
    const char *msg;         // expected "<key>: <message>" (a prefix of it)
} Rule;

static const Rule RULES[] = {
    {"\"d\": 4", "\"d\": 16", "d", "nsa.d: d (16) must divide l (8)"},
    {"\"l_sel\": 16", "\"l_sel\": 18", "l_sel", NULL},   // see below: blamed on d
    {"\"l\": 8", "\"l\": 32", "l", "nsa.l: l (32) must be <= l_sel (16)"},
    {"\"n_kv_heads\": 2", "\"n_kv_heads\": 3", "n_kv_heads",
     "model.n_kv_heads: n_kv_heads (3) must divide n_heads (4)"},
    {"\"head_dim\": 16", "\"head_dim\": 15", "head_dim",
     "model.head_dim: head_dim (15) must be even"},
    {"\"n\": 4", "\"n\": 2", "n",
     "nsa.n: n must be >= 3: block 0, the current block and the one before it are always "
     "selected (got 2)\n"},
    {"\"w\": 32", "\"w\": 0", "w", "nsa.w: expected a positive integer, got 0\n"},
    {"\"w\": 32", "\"w\": -4", "w", "nsa.w: expected a positive integer, got -4\n"},
    {"\"seq_len\": 64", "\"seq_len\": 129", "seq_len",
     "train.seq_len: seq_len (129) must be <= model.max_seq_len (128)\n"},
    {"\"batch_size\": 2", "\"batch_size\": 2, \"checkpoint_layers\": [2, 1]",
     "checkpoint_layers", "train.checkpoint_layers: begin (2) must be <= end (1)"},
    {"\"batch_size\": 2", "\"batch_size\": 2, \"checkpoint_layers\": [0, 3]",
     "checkpoint_layers", "train.checkpoint_layers: end (3) must be <= model.n_layers (2)\n"},
    {"\"batch_size\": 2", "\"batch_size\": 2, \"checkpoint_layers\": [0, 1, 2]",
     "checkpoint_layers",
     "train.checkpoint_layers: expected [begin, end], two non-negative integers, got array "
     "of 3 elements\n"},
    {"\"vocab_size\": 256", "\"vocab_size\": 1", "vocab_size",
     "model.vocab_size: expected an integer >= 2, got 1\n"},
    {"\"ffn_dim\": 128", "\"ffn_dim\": 0", "ffn_dim",
     "model.ffn_dim: expected a positive integer, got 0\n"},
    {"\"ffn_dim\": 128", "\"ffn_dim\": 2147483648", "ffn_dim",
     "model.ffn_dim: expected a positive integer, got 2147483648 (larger than 2147483647"},
    {"\"kind\": \"learnable\"", "\"kind\": \"shards\"", "data",
     "data.path: missing required key 'path' in 'data' (required when kind is \"shards\")\n"},
    {"\"kind\": \"learnable\"", "\"kind\": \"synthetic\", \"path\": \"x.bin\"", "path",
     "data.path: only allowed when data.kind is \"shards\" or \"text\" (kind is "
     "\"synthetic\")\n"},
    {"\"kind\": \"learnable\"", "\"path\": \"x.bin\"", "path",
     "data.path: only allowed when data.kind is \"shards\" or \"text\" (kind is "
     "\"learnable\", the default)\n"},
    {"\"kind\": \"learnable\"", "\"kind\": \"text\", \"path\": \"\"", "path",
     "data.path: expected a non-empty file path, got string \"\"\n"},
    {"\"kind\": \"learnable\"", "\"kind\": \"Learnable\"", "kind",
     "data.kind: expected one of \"synthetic\", \"learnable\", \"shards\", \"text\", got "
     "string \"Learnable\"\n"},
    {"\"batch_size\": 2", "\"batch_size\": 2, \"precision\": \"fp64\"", "precision",
     "train.precision: precision \"fp64\" is not available on backend \"cpu\""},
    {"\"batch_size\": 2", "\"batch_size\": 2, \"backend\": \"cuda\", \"precision\": \"fp64\"",
     "precision", "train.precision: precision \"fp64\" is not available on backend \"cuda\""},
    {"\"batch_size\": 2", "\"batch_size\": 2, \"backend\": \"cpu64\", \"precision\": \"bf16\"",
     "precision", "train.precision: precision \"bf16\" is not available on backend \"cpu64\""},
    {"\"batch_size\": 2", "\"batch_size\": 2, \"backend\": \"gpu\"", "backend",
     "train.backend: expected one of \"cpu\", \"cpu64\", \"cuda\", got string \"gpu\"\n"},
    {"\"batch_size\": 2", "\"batch_size\": 2, \"prefill\": \"parallel\"", "prefill",
     "train.prefill: expected one of \"batched\", \"sequential\", got string \"parallel\"\n"},
    {"\"w\": 32", "\"w\": 32, \"force_branch\": \"all\"", "force_branch",
     "nsa.force_branch: expected one of \"none\", \"cmp\", \"sel\", \"win\", got string \"all\"\n"},
    {"\"w\": 32", "\"w\": 32, \"gate_act\": \"relu\"", "gate_act",
     "nsa.gate_act: expected one of \"softmax\", \"sigmoid\", got string \"relu\"\n"},
    {"\"w\": 32", "\"w\": 32, \"gate_hidden\": -1", "gate_hidden",
     "nsa.gate_hidden: expected a non-negative integer (0: model.dim/4), got -1\n"},
    {"\"dim\": 64", "\"dim\": 3", "nsa",   // the default dim/4 is 0; nsa.gate_hidden is absent
     "nsa.gate_hidden: defaults to model.dim/4, which is 0 (model.dim is 3)"},
    {"\"name\": \"t\"", "\"name\": \"my config\"", "name",
     "name: expected a name of 1 to 63 characters from A-Z a-z 0-9 _ . -, got string "
     "\"my config\"\n"},
    {"\"name\": \"t\"",
     "\"name\": \"a234567890123456789012345678901234567890123456789012345678901234\"", "name",
     "name: expected a name of 1 to 63 characters"},
    {"\"batch_size\": 2", "\"batch_size\": 2, \"lr\": 0", "lr",
     "train.lr: expected a number > 0, got 0\n"},
    {"\"batch_size\": 2", "\"batch_size\": 2, \"beta1\": 1.0", "beta1",
     "train.beta1: expected a number in [0, 1), got 1.0\n"},
    {"\"batch_size\": 2", "\"batch_size\": 2, \"beta2\": -0.5", "beta2",
     "train.beta2: expected a number in [0, 1), got -0.5\n"},
    {"\"batch_size\": 2", "\"batch_size\": 2, \"min_lr_frac\": 1.5", "min_lr_frac",
     "train.min_lr_frac: expected a number in [0, 1], got 1.5\n"},
    {"\"batch_size\": 2", "\"batch_size\": 2, \"adam_eps\": 0.0", "adam_eps",
     "train.adam_eps: expected a number > 0, got 0.0\n"},
    {"\"batch_size\": 2", "\"batch_size\": 2, \"weight_decay\": -1e-3", "weight_decay",
     "train.weight_decay: expected a number >= 0, got -0.001\n"},
    {"\"batch_size\": 2", "\"batch_size\": 2, \"warmup_steps\": -1", "warmup_steps",
     "train.warmup_steps: expected a non-negative integer, got -1\n"},
    {"\"batch_size\": 2", "\"batch_size\": 2, \"steps\": 0", "steps",
     "train.steps: expected a positive integer, got 0\n"},
    {"\"batch_size\": 2", "\"batch_size\": 2, \"grad_accum\": 0", "grad_accum",
     "train.grad_accum: expected a positive integer, got 0\n"},
    {"\"batch_size\": 2", "\"batch_size\": 2, \"seed\": -1", "seed",
     "train.seed: expected a non-negative integer, got -1\n"},
    {"\"batch_size\": 2", "\"batch_size\": 2, \"seed\": 1.5", "seed",
     "train.seed: expected a non-negative integer, got real 1.5\n"},
    {"\"max_seq_len\": 128", "\"max_seq_len\": 128, \"rope_theta\": 0", "rope_theta",
     "model.rope_theta: expected a number > 0, got 0\n"},
    {"\"max_seq_len\": 128", "\"max_seq_len\": 128, \"norm_eps\": \"1e-5\"", "norm_eps",
     "model.norm_eps: expected a number > 0, got string \"1e-5\"\n"},
    {"\"max_seq_len\": 128", "\"max_seq_len\": 128, \"tie_embeddings\": \"true\"",
     "tie_embeddings", "model.tie_embeddings: expected true or false, got string \"true\"\n"},
};

static void test_rules(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof RULES / sizeof RULES[0]; i++) {
        const Rule *r = &RULES[i];
        const char *text = edit(r->from, r->to);
        char key[64];
        snprintf(key, sizeof key, "\"%s\": ", r->at);
        if (r->msg) {
            expect_at(text, key, strlen(key), r->msg);
        } else {   // d (4) does not divide l_sel (18): located at d, the stride
            expect_at(text, "\"d\": ", 5, "nsa.d: d (4) must divide l_sel (18): ");
        }
        assert_int_equal(count_lines(g_err), 1);   // exactly this problem, nothing else
    }
    // checkpoint elements: at the element itself
    const char *text = edit("\"batch_size\": 2", "\"batch_size\": 2, \"checkpoint_layers\": [0, \"2\"]");
    expect_at(text, "\"2\"", 0,
              "train.checkpoint_layers[1]: expected a non-negative integer, got string \"2\"\n");
    text = edit("\"batch_size\": 2", "\"batch_size\": 2, \"checkpoint_layers\": [-1, 1]");
    expect_at(text, "-1", 0, "train.checkpoint_layers[0]: expected a non-negative integer, got -1\n");
    // the byte-level text data needs one token per byte
    text = edit("\"vocab_size\": 256", "\"vocab_size\": 255");
    const char *t2 = strstr(text, "\"kind\": \"learnable\"");
    char buf[8192];
    snprintf(buf, sizeof buf, "%.*s\"kind\": \"text\", \"path\": \"a.txt\"%s", (int)(t2 - text),
             text, t2 + strlen("\"kind\": \"learnable\""));
    expect_at(buf, VALUE_OF("vocab_size"),
              "model.vocab_size: vocab_size (255) must be >= 256 for data.kind \"text\"");
    // B*T must fit the int token counts the kernels take
    expect_at(edit("\"batch_size\": 2", "\"batch_size\": 40000000"), VALUE_OF("batch_size"),
              "train.batch_size: batch_size * seq_len (2560000000 tokens) exceeds 2147483647\n");
}

static void test_all_problems_reported(void **state) {
    (void)state;
    // three problems, discovered in a different order than they appear: reported
    // one line each, sorted by position
    const char *text =
        "{\n"
        "  \"nsa\": {\"l\": 8, \"d\": 3, \"l_sel\": 16, \"n\": 1, \"w\": 1, \"bogus\": 0},\n"
        "  \"model\": {\"vocab_size\": 256, \"dim\": 64, \"n_layers\": 2, \"n_heads\": 4,\n"
        "            \"n_kv_heads\": 2, \"head_dim\": 16, \"ffn_dim\": 128, \"max_seq_len\": true},\n"
        "  \"name\": \"x\"\n"
        "}\n";
    NsaConfig c;
    const char *p = write_tmp(text);
    assert_int_equal(load(&c, p, NULL, 0), -1);
    char want[2048];
    snprintf(want, sizeof want,
             "%s:2:24: nsa.d: d (3) must divide l (8): compression blocks of length l start "
             "every d tokens\n"
             "%s:2:24: nsa.d: d (3) must divide l_sel (16): selection scores are sums of whole "
             "compression strides\n"
             "%s:2:45: nsa.n: n must be >= 3: block 0, the current block and the one before it "
             "are always selected (got 1)\n"
             "%s:2:56: nsa.bogus: unknown key 'bogus' in 'nsa' (known: l, d, l_sel, n, w, phi, "
             "gate_act, gate_hidden, force_branch)\n"
             "%s:4:77: model.max_seq_len: expected a positive integer, got boolean true\n",
             p, p, p, p, p);
    assert_string_equal(g_err, want);
}

static void test_err_truncated(void **state) {
    (void)state;
    const char *p = write_tmp("{\"name\": \"\", \"model\": {}, \"nsa\": {}}\n");
    NsaConfig c;
    char small[200];
    memset(small, 'x', sizeof small);
    assert_int_equal(config_load(&c, p, NULL, 0, small, sizeof small), -1);
    size_t n = strlen(small);   // NUL-terminated inside the buffer
    assert_true(n < sizeof small);
    assert_contains(small, "more problems)\n");
    assert_int_equal(config_load(&c, p, NULL, 0, NULL, 0), -1);   // no buffer: still fails
    char one[1];
    assert_int_equal(config_load(&c, p, NULL, 0, one, 1), -1);
    assert_int_equal(one[0], '\0');
}

// ---- overrides -------------------------------------------------------------------
static void test_overrides_apply(void **state) {
    (void)state;
    char path[1024];
    snprintf(path, sizeof path, "%s/configs/tiny.json", src_dir());
    const char *ov[] = {"train.lr=0.01",    "nsa.phi=mlp",      "train.checkpoint_layers=[0, 1]",
                        "data.kind=shards", "data.path=/x/t.bin", "name=\"tiny-2\"",
                        "train.backend=cuda", "train.steps=5",  "train.steps=6"};
    NsaConfig c;
    if (load(&c, path, ov, 9)) fail_msg("%s", g_err);
    assert_true(c.lr == 0.01);
    assert_int_equal(c.phi, NSA_PHI_MLP);
    assert_int_equal(c.ckpt_begin, 0);
    assert_int_equal(c.ckpt_end, 1);
    assert_int_equal(c.data_kind, NSA_DATA_SHARDS);
    assert_string_equal(c.data_path, "/x/t.bin");
    assert_string_equal(c.name, "tiny-2");
    assert_string_equal(c.backend, "cuda");
    assert_string_equal(c.precision, "bf16");
    assert_int_equal(c.steps, 6);   // the last one wins

    // an override can fix a file's bad value, and create an optional section
    const char *no_data = write_tmp(edit("  \"train\": {\n    \"seq_len\": 64,\n    \"batch_size\": 2\n  },\n"
                                         "  \"data\": {\n    \"kind\": \"learnable\"\n  }\n",
                                         "  \"train\": {}\n"));
    const char *p = write_tmp(edit("\"w\": 32", "\"w\": 0"));
    const char *fix[] = {"nsa.w=64"};
    if (load(&c, p, fix, 1)) fail_msg("%s", g_err);
    assert_int_equal(c.w, 64);
    const char *create[] = {"data.kind=synthetic"};
    if (load(&c, no_data, create, 1)) fail_msg("%s", g_err);
    assert_int_equal(c.data_kind, NSA_DATA_SYNTHETIC);
}

static void expect_override_error(const char *file, const char *ov, const char *msg) {
    NsaConfig c;
    const char *ovs[] = {"train.steps=3", ov};   // a valid one first: the right flag is named
    assert_int_equal(load(&c, file, ovs, 2), -1);
    char want[1024];
    snprintf(want, sizeof want, "--set %s: %s", ov, msg);
    assert_contains(g_err, want);
    assert_int_equal(count_lines(g_err), 1);
}

// The structured problems (what the scenario loader places in its own file):
// key, position in the config file, override index and message kept apart, and
// the text form built from them.
static void test_problem_structure(void **state) {
    (void)state;
    const char *text = edit("\"n\": 4", "\"n\": 2");
    const char *p = write_tmp(text);
    const char *ov[] = {"train.lr=1", "nsa.w=abc"};
    NsaConfig c;
    ConfigProblems ps = {0};
    assert_int_equal(config_load_problems(&c, p, ov, 2, &ps), -1);
    assert_int_equal(ps.n, 2);
    int line, col;
    text_pos(text, "\"n\": ", 5, &line, &col);
    // the file's problem first (by position), then the overrides'
    assert_string_equal(ps.v[0].key, "nsa.n");
    assert_int_equal(ps.v[0].line, line);
    assert_int_equal(ps.v[0].col, col);
    assert_int_equal(ps.v[0].override, -1);
    assert_string_equal(ps.v[0].message, "n must be >= 3: block 0, the current block and the one "
                                         "before it are always selected (got 2)");
    assert_string_equal(ps.v[1].key, "nsa.w");
    assert_int_equal(ps.v[1].line, 0);
    assert_int_equal(ps.v[1].override, 1);
    assert_string_equal(ps.v[1].message, "expected a positive integer, got string \"abc\"");
    char *t = config_problem_text(&ps, 1, ov);
    assert_string_equal(t, "--set nsa.w=abc: nsa.w: expected a positive integer, got string \"abc\"");
    free(t);
    t = config_problem_text(&ps, 0, ov);
    char want[1200];
    snprintf(want, sizeof want, "%s:%d:%d: nsa.n: %s", p, line, col, ps.v[0].message);
    assert_string_equal(t, want);
    free(t);
    config_problems_free(&ps);
    // a malformed override has no key; a missing file no position
    const char *bad[] = {"train.lr"};
    assert_int_equal(config_load_problems(&c, write_tmp(BASE), bad, 1, &ps), -1);
    assert_int_equal(ps.n, 1);
    assert_string_equal(ps.v[0].key, "");
    assert_int_equal(ps.v[0].override, 0);
    config_problems_free(&ps);
    assert_int_equal(config_load_problems(&c, "no_such_file.json", NULL, 0, &ps), -1);
    assert_int_equal(ps.n, 1);
    assert_int_equal(ps.v[0].line, 0);
    assert_int_equal(ps.v[0].override, -1);
    assert_string_equal(ps.file, "no_such_file.json");
    config_problems_free(&ps);
}

static void test_override_errors(void **state) {
    (void)state;
    const char *p = write_tmp(BASE);
    expect_override_error(p, "nsa.w=0", "nsa.w: expected a positive integer, got 0\n");
    expect_override_error(p, "nsa.w=abc", "nsa.w: expected a positive integer, got string \"abc\"\n");
    expect_override_error(p, "nsa.w=1.5", "nsa.w: expected a positive integer, got real 1.5\n");
    expect_override_error(p, "model.dimm=3",
                          "model.dimm: unknown key 'dimm' in 'model' (known: vocab_size, dim, ");
    assert_contains(g_err, "did you mean 'dim'?)");
    expect_override_error(p, "optim.lr=1", "optim.lr: unknown section 'optim' (known: model, "
                                           "nsa, train, data)\n");
    expect_override_error(p, "seed=3", "seed: unknown key 'seed' at the top level");
    expect_override_error(p, "train.lr", "expected section.key=value (e.g. --set train.lr=1e-3)\n");
    expect_override_error(p, "=3", "expected section.key=value");
    expect_override_error(p, "model=3", "model: 'model' is a section: set its keys one at a time "
                                        "(e.g. --set model.vocab_size=...)\n");
    expect_override_error(p, "train.lr.x=3", "train.lr.x: unknown key 'lr.x' in 'train'");
    expect_override_error(p, "train.checkpoint_layers=[0,\"a\"]",
                          "train.checkpoint_layers[1]: expected a non-negative integer, got "
                          "string \"a\"\n");
    expect_override_error(p, "data.kind=shards", "data.kind: missing required key 'path' in "
                                                 "'data' (required when kind is \"shards\")\n");
    // a relation between two values is reported at the one that was overridden
    expect_override_error(p, "nsa.l=10", "nsa.l: d (4) must divide l (10)");
    expect_override_error(p, "model.max_seq_len=32",
                          "model.max_seq_len: seq_len (64) must be <= model.max_seq_len (32)\n");
    expect_override_error(p, "train.precision=bf16", "train.precision: precision \"bf16\" is "
                          "not available on backend \"cpu\"");
    // ... but not when the file's value is still in place: that one is in the file
    NsaConfig c;
    const char *bad = write_tmp(edit("\"d\": 4", "\"d\": 3"));
    const char *ov[] = {"nsa.w=abc"};
    assert_int_equal(load(&c, bad, ov, 1), -1);
    char want[512];
    int line, col;
    text_pos(edit("\"d\": 4", "\"d\": 3"), "\"d\": ", 5, &line, &col);
    snprintf(want, sizeof want, "%s:%d:%d: nsa.d: d (3) must divide l (8)", bad, line, col);
    assert_contains(g_err, want);
    assert_contains(g_err, "--set nsa.w=abc: nsa.w: expected a positive integer");
    // file problems come first, then the overrides in command-line order
    assert_true(strstr(g_err, want) < strstr(g_err, "--set nsa.w=abc"));
}

// ---- canonical JSON and digest ---------------------------------------------------
static uint64_t fnv1a(const char *s) {
    uint64_t h = 14695981039346656037ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

// Keys of every object in text order must be sorted (Jansson keeps insertion order).
static void assert_sorted_keys(const json_t *v) {
    if (!json_is_object(v)) return;
    const char *k, *prev = NULL;
    json_t *child;
    json_object_foreach((json_t *)v, k, child) {
        if (prev && strcmp(prev, k) >= 0) fail_msg("keys not sorted: '%s' before '%s'", prev, k);
        prev = k;
        assert_sorted_keys(child);
    }
}

static void test_canonical(void **state) {
    (void)state;
    char path[1024];
    snprintf(path, sizeof path, "%s/configs/tiny.json", src_dir());
    NsaConfig a, b;
    if (load(&a, path, NULL, 0)) fail_msg("%s", g_err);
    if (load(&b, path, NULL, 0)) fail_msg("%s", g_err);
    char *ja = config_to_json(&a), *jb = config_to_json(&b);
    assert_non_null(ja);
    assert_string_equal(ja, jb);
    assert_string_equal(a.digest, b.digest);
    char hex[17];
    snprintf(hex, sizeof hex, "%016" PRIx64, fnv1a(ja));
    assert_string_equal(a.digest, hex);

    // readable, exact numbers and every resolved default present
    assert_contains(ja, "\"lr\": 0.003,");
    assert_contains(ja, "\"norm_eps\": 1e-5,");
    assert_contains(ja, "\"rope_theta\": 10000.0,");
    assert_contains(ja, "\"gate_hidden\": 16,");
    assert_contains(ja, "\"checkpoint_layers\": [0, 0],");
    assert_contains(ja, "\"precision\": \"fp32\",");
    assert_contains(ja, "\"name\": \"tiny\",");
    assert_null(strstr(ja, "\"path\""));   // only for shards/text
    json_error_t je;
    json_t *tree = json_loads(ja, 0, &je);
    assert_non_null(tree);
    assert_sorted_keys(tree);
    json_decref(tree);

    // the dump is itself a valid config with the same digest and text
    const char *p2 = write_tmp(ja);
    if (load(&b, p2, NULL, 0)) fail_msg("%s", g_err);
    char *j2 = config_to_json(&b);
    assert_string_equal(ja, j2);
    assert_string_equal(a.digest, b.digest);
    free(j2);

    // a change of value changes the digest; the same value written differently does not
    const char *ov_lr[] = {"train.lr=0.0030000000000000001"};   // the same double
    if (load(&b, path, ov_lr, 1)) fail_msg("%s", g_err);
    assert_string_equal(a.digest, b.digest);
    const char *ov_lr2[] = {"train.lr=0.004"};
    if (load(&b, path, ov_lr2, 1)) fail_msg("%s", g_err);
    assert_string_not_equal(a.digest, b.digest);
    const char *ov_seed[] = {"train.seed=1338"};
    if (load(&b, path, ov_seed, 1)) fail_msg("%s", g_err);
    assert_string_not_equal(a.digest, b.digest);

    // odd doubles, long paths with characters to escape: still a round trip
    const char *ov_odd[] = {"train.lr=0.1234567890123456789", "model.norm_eps=2.5e-300",
                            "data.kind=text", "data.path=dir with \"quotes\"\\and\ttab.txt"};
    if (load(&b, path, ov_odd, 4)) fail_msg("%s", g_err);
    char *j3 = config_to_json(&b);
    if (load(&a, write_tmp(j3), NULL, 0)) fail_msg("%s", g_err);
    assert_true(a.lr == b.lr);
    assert_true(a.norm_eps == b.norm_eps);
    assert_string_equal(a.data_path, "dir with \"quotes\"\\and\ttab.txt");
    assert_string_equal(a.digest, b.digest);
    free(j3);
    free(ja);
    free(jb);
}

static void test_names(void **state) {
    (void)state;
    assert_string_equal(config_phi_name(NSA_PHI_AVG), "avg");
    assert_string_equal(config_phi_name(NSA_PHI_MLP), "mlp");
    assert_string_equal(config_gate_act_name(NSA_GATE_SIGMOID), "sigmoid");
    assert_string_equal(config_branch_name(-1), "none");
    assert_string_equal(config_branch_name(NSA_BR_CMP), "cmp");
    assert_string_equal(config_branch_name(NSA_BR_SEL), "sel");
    assert_string_equal(config_branch_name(NSA_BR_WIN), "win");
    // the config spells a forced branch as common/nsa_names.h names it
    const char *p = write_tmp(BASE);
    for (int br = 0; br < NSA_NBRANCH; br++) {
        char set[64];
        snprintf(set, sizeof set, "nsa.force_branch=%s", nsa_branch_name(br));
        const char *ov[] = {set};
        NsaConfig c;
        if (load(&c, p, ov, 1)) fail_msg("%s", g_err);
        assert_int_equal(c.force_branch, br);
    }
    assert_string_equal(config_data_name(NSA_DATA_TEXT), "text");
    assert_string_equal(config_data_name(NSA_DATA_SHARDS), "shards");
    assert_string_equal(config_data_name(42), "?");
}

// ---- the bad config files the CLI test also runs ---------------------------------
static void test_bad_config_files(void **state) {
    (void)state;
    char dir[1024], path[1400];
    snprintf(dir, sizeof dir, "%s/tests/bad_configs", src_dir());
    snprintf(path, sizeof path, "%s/EXPECTED", dir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[256], listed[4096] = " ";
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        if (!line[0]) continue;
        char *sp = strchr(line, ' ');
        assert_non_null(sp);
        *sp = '\0';
        NsaConfig c;
        snprintf(path, sizeof path, "%s/%s", dir, line);
        if (load(&c, path, NULL, 0) != -1) fail_msg("%s loaded without error", line);
        char want[2048];
        snprintf(want, sizeof want, "%s:%s", path, sp + 1);
        assert_contains(g_err, want);
        assert_true(strlen(listed) + strlen(line) + 2 < sizeof listed);
        strcat(listed, line);
        strcat(listed, " ");
        n++;
    }
    fclose(f);
    assert_true(n >= 17);
    // every *.json in the directory has its expectation
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 5, ".json")) continue;
        char key[300];
        snprintf(key, sizeof key, " %s ", e->d_name);
        if (!strstr(listed, key)) fail_msg("%s has no line in EXPECTED", e->d_name);
    }
    closedir(d);
}

// ---- jsonpos ---------------------------------------------------------------------
static const char POS_TEXT[] =
    "{\n"
    "  \"a\": {\"b\": [1, {\"c\": \"x\"}, [2, 3]], \"s\": \"br}a[ce\\\"q\\\\\", \"t\": \"\\u00e9\"},\n"
    "  \"\\u00e9t\\u00e9\": 5,\n"
    "  \"k\": \"k\",\n"
    "  \"d\": 1, \"d\": 2,\n"
    "  \"emoji\\ud83d\\ude00\": true,\n"
    "  \"\xc3\xa9\": \"multi\", \"after\": 7\n"
    "}\n";

static void expect_pos(const char *text, const char *path, int want_key, int line, int col) {
    int l = -7, c = -7;
    if (jsonpos_find(text, path, want_key, &l, &c) != 0)
        fail_msg("jsonpos_find(\"%s\", key=%d) not found", path, want_key);
    if (l != line || c != col)
        fail_msg("jsonpos_find(\"%s\", key=%d) = %d:%d, expected %d:%d", path, want_key, l, c,
                 line, col);
}

static void expect_no_pos(const char *text, const char *path, int want_key) {
    int l, c;
    assert_int_equal(jsonpos_find(text, path, want_key, &l, &c), -1);
}

static void test_jsonpos(void **state) {
    (void)state;
    const char *t = POS_TEXT;
    expect_pos(t, "", 0, 1, 1);
    expect_pos(t, "a", 0, 2, 8);
    expect_pos(t, "a", 1, 2, 3);
    expect_pos(t, "a.b", 0, 2, 14);
    expect_pos(t, "a.b", 1, 2, 9);
    expect_pos(t, "a.b[0]", 0, 2, 15);
    expect_pos(t, "a.b[1]", 0, 2, 18);
    expect_pos(t, "a.b[1].c", 0, 2, 24);
    expect_pos(t, "a.b[1].c", 1, 2, 19);
    expect_pos(t, "a.b[2]", 0, 2, 30);
    expect_pos(t, "a.b[2][1]", 0, 2, 34);
    expect_pos(t, "a.s", 0, 2, 44);   // the string with an escaped quote and brackets
    expect_pos(t, "a.t", 0, 2, 65);   // found after it: the skip honoured the escapes
    expect_pos(t, "\xc3\xa9t\xc3\xa9", 0, 3, 20);   // key written with \u escapes
    expect_pos(t, "\xc3\xa9t\xc3\xa9", 1, 3, 3);
    expect_pos(t, "k", 1, 4, 3);      // key and value with the same text
    expect_pos(t, "k", 0, 4, 8);
    expect_pos(t, "d", 0, 5, 16);     // duplicate: the last, as Jansson keeps it
    expect_pos(t, "d", 1, 5, 11);
    expect_pos(t, "emoji\xf0\x9f\x98\x80", 0, 6, 24);   // surrogate pair
    expect_pos(t, "\xc3\xa9", 0, 7, 9);
    expect_pos(t, "after", 1, 7, 18);   // columns count bytes: "é" is two
    expect_pos(t, "after", 0, 7, 27);
    expect_no_pos(t, "", 1);            // the root has no key
    expect_no_pos(t, "a.b[0]", 1);      // nor has an array element
    expect_no_pos(t, "a.b[3]", 0);
    expect_no_pos(t, "missing", 0);
    expect_no_pos(t, "a.x", 0);
    expect_no_pos(t, "k.x", 0);         // a string has no members
    expect_no_pos(t, "a[0]", 0);        // an object is not an array
    expect_no_pos(t, "a..b", 0);
    expect_no_pos(t, ".a", 0);
    expect_no_pos(t, "a.b[x]", 0);
    expect_no_pos(t, "a.b[0", 0);
    expect_no_pos(t, "a.b[1]c", 0);
    expect_no_pos(t, "\xc3\xa9t", 0);   // a prefix of a key is not the key
    // keys with dots or brackets, written ["key"]
    const char *dots = "{\"ov\": {\"train.steps\": 2, \"a[1]\": {\"x.y\": [5, 6]}}}";
    expect_pos(dots, "ov[\"train.steps\"]", 0, 1, 24);
    expect_pos(dots, "ov.[\"train.steps\"]", 1, 1, 9);
    expect_pos(dots, "ov[\"a[1]\"][\"x.y\"][1]", 0, 1, 47);
    expect_pos(dots, "[\"ov\"]", 1, 1, 2);
    expect_no_pos(dots, "ov.train.steps", 0);    // the plain syntax splits at the dot
    expect_no_pos(dots, "ov[\"train.steps", 0);  // unterminated
    expect_no_pos(dots, "ov[\"train\"]", 0);
    // whitespace: CRLF and tabs; root arrays; empty containers
    expect_pos("{\r\n\t\"x\": 1}", "x", 1, 2, 2);
    expect_pos("  [ {\"a\": []}, {} ]", "[0].a", 0, 1, 11);
    expect_pos("  [ {\"a\": []}, {} ]", "[1]", 0, 1, 16);
    expect_pos("  [ {\"a\": []}, {} ]", "", 0, 1, 3);
    expect_no_pos("[]", "[0]", 0);
    expect_no_pos("{}", "a", 0);
    // malformed or truncated text: -1, never a read past the end
    expect_no_pos("", "", 0);
    expect_no_pos("{\"a\": ", "a", 0);
    expect_no_pos("{\"a\": \"open", "a", 0);
    expect_no_pos("{\"a\": [1, 2", "a", 0);
    expect_no_pos("{\"a\" 1}", "a", 0);
    expect_no_pos("{\"a\\", "a", 0);
    expect_no_pos("{\"\\u00", "x", 0);
    expect_no_pos("[1", "[1]", 0);
    expect_no_pos(NULL, "a", 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiny),
        cmocka_unit_test(test_m7c),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_all_keys),
        cmocka_unit_test(test_syntax),
        cmocka_unit_test(test_unknown_keys),
        cmocka_unit_test(test_wrong_types),
        cmocka_unit_test(test_missing),
        cmocka_unit_test(test_rules),
        cmocka_unit_test(test_all_problems_reported),
        cmocka_unit_test(test_err_truncated),
        cmocka_unit_test(test_overrides_apply),
        cmocka_unit_test(test_override_errors),
        cmocka_unit_test(test_problem_structure),
        cmocka_unit_test(test_canonical),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_bad_config_files),
        cmocka_unit_test(test_jsonpos),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
