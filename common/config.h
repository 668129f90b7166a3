// common/config.h — the model/training configuration and its strict loader.
//
// A config is a JSON file (configs/*.json, schema in docs/config.md) loaded with
// Jansson (duplicate keys rejected), then overridden by `--set path=value`
// (value parsed as JSON, else taken as a string), then validated. Every problem
// is reported as `file:line:col: message` (or `--set path=value: message` for an
// override) and makes the load fail; callers exit with status 2.
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

// Load `path`, apply `n_overrides` strings of the form "a.b=value", validate.
// On failure returns -1 and writes one or more lines "where: message\n" into
// err (NUL-terminated, truncated to errlen). On success returns 0.
int config_load(NsaConfig *cfg, const char *path, const char *const *overrides,
                int n_overrides, char *err, size_t errlen);

// The validated config as canonical JSON (caller frees with free()); what the
// digest is computed over and what checkpoints/env.json embed.
char *config_to_json(const NsaConfig *cfg);

// Names for enums, for logs.
const char *config_phi_name(int phi);
const char *config_gate_act_name(int act);
const char *config_branch_name(int branch);   // "none", "cmp", "sel", "win"
const char *config_data_name(int kind);
const char *config_ddp_mode_name(int mode);  // "default", "find_unused", "static_graph"
#endif
