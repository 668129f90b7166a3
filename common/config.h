// common/config.h — the model/training configuration and its strict loader.
//
// A config is a JSON file (configs/*.json, schema in docs/config.md) loaded with
// Jansson (duplicate keys rejected), then overridden by `--set path=value`
// (value parsed as JSON, else taken as a string), then validated. Every problem
// is collected (ConfigProblem: key, position, override, message) and makes the
// load fail; as text it reads `file:line:col: message` (or `--set path=value:
// message` for an override); callers exit with status 2.
#ifndef NSA_TRAINER_CONFIG_H
#define NSA_TRAINER_CONFIG_H
#include <stddef.h>
#include <stdint.h>

typedef struct {
    // model
    int vocab_size;     // V
    int dim;            // C, residual width
    int n_layers;       // L
    int n_heads;        // H, query heads
    int n_kv_heads;     // G, KV groups per branch; n_heads % n_kv_heads == 0
    int head_dim;       // D, even (RoPE)
    int ffn_dim;        // F, SwiGLU hidden width
    int max_seq_len;    // RoPE table length; train.seq_len <= max_seq_len
    double rope_theta;  // 10000
    double norm_eps;    // RMSNorm epsilon
    int tie_embeddings; // 1: lm_head shares tok_emb.weight
    // nsa (paper letters)
    int l;              // compression block length
    int d;              // compression stride; d | l, d | l_sel
    int l_sel;          // selection block length l'; l <= l_sel
    int n;              // selected blocks per query (>= 3: block 0, current, previous)
    int w;              // sliding window
    int phi;            // NSA_PHI_AVG | NSA_PHI_MLP
    int gate_act;       // NSA_GATE_SOFTMAX | NSA_GATE_SIGMOID (kernels/ops.h)
    int gate_hidden;    // gate MLP width (0 in the file = dim/4)
    int force_branch;   // -1 none, else NSA_BR_CMP/SEL/WIN: one-hot gate, gate MLP skipped
    // train
    int seq_len;        // T
    int batch_size;     // B, sequences per micro-batch
    int grad_accum;     // micro-batches per optimizer step
    int steps;          // optimizer steps
    double lr, min_lr_frac;   // peak LR, cosine floor as a fraction of lr
    int warmup_steps;
    double weight_decay, beta1, beta2, adam_eps, grad_clip;  // grad_clip <= 0: off
    uint64_t seed;
    int ckpt_begin, ckpt_end; // gradient checkpointing over layers [begin, end); equal: off
    int prefill;        // NSA_PREFILL_BATCHED | NSA_PREFILL_SEQUENTIAL
    char backend[16];   // "cpu", "cpu64", "cuda"
    char precision[8];  // "fp32", "fp64", "bf16", "fp16"
    int ddp_mode;       // NSA_DDP_*: data-parallel gradient reduction mode (docs/ddp.md)
    double bucket_mb;   // data-parallel bucket size cap, MiB of the gradient dtype
    // data
    int data_kind;      // NSA_DATA_*
    char data_path[1024]; // shards: file or glob; text: file
    // provenance
    char name[64];      // config name (file's "name")
    char source[1024];  // file it was loaded from
    char digest[17];    // 64-bit FNV-1a of the canonical validated JSON, hex
} NsaConfig;

enum { NSA_PHI_AVG = 0, NSA_PHI_MLP = 1 };
enum { NSA_PREFILL_BATCHED = 0, NSA_PREFILL_SEQUENTIAL = 1 };
enum { NSA_DDP_DEFAULT = 0, NSA_DDP_FIND_UNUSED = 1, NSA_DDP_STATIC_GRAPH = 2 };
enum { NSA_DATA_SYNTHETIC = 0, NSA_DATA_LEARNABLE = 1, NSA_DATA_SHARDS = 2, NSA_DATA_TEXT = 3 };

// One problem found while loading a config: where it is and what is wrong, kept
// apart so a caller can place it elsewhere (the scenario loader moves a problem
// with an override to where that override stands in the scenario file).
typedef struct {
    char *key;       // dotted key it is about ("model.dim", "train.checkpoint_layers[0]"); "" when none
    int line, col;   // its position in the config file; line 0: none (a missing file, an override)
    int override;    // index of the --set override it is about, or -1: the file itself
    char *message;   // what is wrong, without location or key
} ConfigProblem;

typedef struct {
    ConfigProblem *v;   // sorted: problems without a position, the file's by position, then the
    int n, cap;         // overrides' in override order (as found within each)
    int oom;            // memory ran out while loading: the list may be incomplete
    char file[1024];    // what the file's problems are reported at: the path as given, or
                        // "config" when there is none to name (none given, or too long)
} ConfigProblems;

// Load `path`, apply `n_overrides` strings of the form "a.b=value", validate.
// Every problem is appended to *ps (zero it first; free with config_problems_free).
// Returns 0, or -1 when there are problems (or memory ran out).
int config_load_problems(NsaConfig *cfg, const char *path, const char *const *overrides,
                         int n_overrides, ConfigProblems *ps);
void config_problems_free(ConfigProblems *ps);
// Problem i as nsa-train prints it, without a newline: "<file>:<line>:<col>: <key>: <message>",
// "<file>: <message>" or "--set <override>: <key>: <message>" (": <key>" only with a key).
// The caller frees it.
char *config_problem_text(const ConfigProblems *ps, int i, const char *const *overrides);

// config_load_problems, the problems as text: on failure returns -1 and writes one
// line per problem (config_problem_text) into err (NUL-terminated; when it is too
// small, the whole lines that fit and "(N more problems)"). On success returns 0.
int config_load(NsaConfig *cfg, const char *path, const char *const *overrides,
                int n_overrides, char *err, size_t errlen);

// The validated config as canonical JSON (caller frees with free()); what the
// digest is computed over and what checkpoints/env.json embed.
char *config_to_json(const NsaConfig *cfg);
// The config digest of a canonical JSON text (NsaConfig.digest is this of config_to_json):
// 16 lowercase hex digits + NUL. A checkpoint's "config_digest" is checked against it.
void config_digest_of(const char *canonical_json, char out[17]);

// Names for enums, for logs.
const char *config_phi_name(int phi);
const char *config_gate_act_name(int act);
const char *config_branch_name(int branch);   // "none", "cmp", "sel", "win"
const char *config_data_name(int kind);
const char *config_ddp_mode_name(int mode);  // "default", "find_unused", "static_graph"
const char *config_prefill_name(int prefill);  // "batched", "sequential"; "?" past the end
// train.backend / train.precision names the loader accepts, i = 0, 1, ...; NULL past the end
const char *config_backend_at(int i);
const char *config_precision_at(int i);
// the loader's rule: cpu computes in fp32, cpu64 in fp64, cuda in bf16, fp16 or fp32
int config_backend_allows(const char *backend, const char *precision);
#endif
