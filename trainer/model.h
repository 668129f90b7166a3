// trainer/model.h — the NSA decoder: parameters, activations, forward, backward.
//
// Llama-style: token embedding, L blocks of
//     x += Wo · NSA(RMSNorm(x));   x += SwiGLU(RMSNorm(x))
// final RMSNorm, LM head (tied or not), cross-entropy. docs/design.md sections 2-3.
//
// All compute goes through the op table (kernels/ops.h), so this file is the
// model for every backend. All parameters live in one contiguous buffer (and
// their gradients in another, same layout), in the stable order listed by
// model_param_name: tok_emb, blocks.0 ... blocks.L-1, norm_f, lm_head.
#ifndef NSA_TRAINER_MODEL_H
#define NSA_TRAINER_MODEL_H
#include <stddef.h>
#include <stdint.h>
#include "kernels/ops.h"
#include "common/config.h"

// Parameter slots of one block. Slots that a config does not have (the phi=mlp
// compressor with phi=avg) have id -1.
enum {
    LP_ATTN_NORM,
    LP_WQ,
    LP_WK_CMP, LP_WV_CMP, LP_WK_SEL, LP_WV_SEL, LP_WK_WIN, LP_WV_WIN,
    LP_CK_PE, LP_CK_FC1_W, LP_CK_FC1_B, LP_CK_FC2_W, LP_CK_FC2_B,   // phi=mlp, keys
    LP_CV_PE, LP_CV_FC1_W, LP_CV_FC1_B, LP_CV_FC2_W, LP_CV_FC2_B,   // phi=mlp, values
    LP_GATE_FC1_W, LP_GATE_FC1_B, LP_GATE_FC2_W, LP_GATE_FC2_B,
    LP_WO,
    LP_MLP_NORM,
    LP_W_GATE, LP_W_UP, LP_W_DOWN,
    LP_COUNT
};

typedef struct {
    char name[80];          // e.g. "blocks.4.attn.k_proj_sel.weight"
    int ndim;
    int64_t shape[2];
    int64_t numel;
    int64_t offset;         // element offset in the parameter buffer
    int layer;              // block index, -1 for tok_emb / norm_f / lm_head
    int decay;              // AdamW weight decay applies: every 2-D .weight (linear maps, tok_emb,
                            // lm_head); not norms, biases or the phi=mlp pos_emb (docs/config.md)
    int init_kind;          // MODEL_INIT_* (model.c)
    double init_a;          // std (normal) or gain (xavier)
} ParamInfo;

// Activations of one block for a [B, T] micro-batch (N = B*T rows).
// Every tensor is in the backend's activation type unless noted.
typedef struct {
    void *xn1;              // [N, C]   RMSNorm(x_in)
    void *rstd1;            // [N]
    void *q;                // [N, H*D] after RoPE
    void *k[3], *v[3];      // [N, G*D] per branch (k after RoPE); NULL if branch unused
    void *Kc, *Vc;          // [B, NC, G, D] compressed keys/values
    void *Xk, *Xv;          // [B*NC*G, l*D] phi=mlp gathered blocks (+ pos emb)
    void *Hk_pre, *Hv_pre;  // [B*NC*G, D] phi=mlp hidden before SiLU
    void *Hk, *Hv;          // [B*NC*G, D] after SiLU
    void *o[3];             // [N, H*D] branch outputs
    void *lse[3];           // [N, H]
    int32_t *sel_idx;       // [N, G, n] selected blocks (backend memory, int32)
    void *gh_pre, *gh;      // [N, gate_hidden] gate MLP hidden, before/after SiLU
    void *glogits, *gate;   // [N, G*3] gate logits and activations
    void *attn_o;           // [N, H*D] combined NSA output
    void *x_mid;            // [N, C]   residual after attention
    void *xn2;              // [N, C]
    void *rstd2;            // [N]
    void *ffa, *ffb, *ffh;  // [N, F]   SwiGLU gate/up/hidden
} LayerActs;

// Where the first non-finite value was found (anomaly localisation).
typedef struct {
    int found;
    int layer;              // -1 outside the blocks
    char branch[8];         // "cmp", "sel", "win", "gate", "" (not NSA)
    char op[32];            // the op that produced it, e.g. "sel_attn_fwd"
    char tensor[96];        // dotted activation name, e.g. "blocks.3.attn.sel.o"
    char phase[12];         // "forward" or "backward"
    int b, t, col;          // position: sequence, token, column within the row
    double value;
} Anomaly;

// Hook called when a parameter's gradient is final for the current backward
// (used by gradient-arrival traces and data-parallel buckets).
typedef void (*GradReadyFn)(void *ctx, int param_id);

// Diagnostics hook (flight recorder, gate statistics; trainer/train.c): called at
// the points below with the layer (-1 outside the blocks) and the first row t of
// the call (0 in batched prefill and in backward; the token in sequential prefill).
enum {
    MODEL_EV_LAYER_FWD,       // a layer's forward starts (rows from t)
    MODEL_EV_LAYER_FWD_DONE,  // a layer's forward is complete over all T rows: its
                              // activations are valid until the next layer runs
                              // (checkpointed layers share one scratch)
    MODEL_EV_HEAD,            // final norm, LM head, loss (rows from t)
    MODEL_EV_BWD_HEAD,        // backward starts: LM head, final norm
    MODEL_EV_LAYER_RECOMPUTE, // a checkpointed layer's forward runs again in backward
    MODEL_EV_LAYER_BWD,       // a layer's backward starts
    MODEL_EV_EMBED_BWD,       // embedding backward (last of the backward)
};
struct Model;
typedef void (*ModelEventFn)(void *ctx, struct Model *m, int ev, int layer, int t);
struct Faults;   // trainer/faults.h: opt-in fault injection, NULL when none
// Where fault injection acts inside the model (trainer/faults.c binds the table with the Faults;
// the model knows nothing else of it). Each hook may change what the model computes there.
typedef struct ModelFaultHooks {
    int (*grad_dropped)(const struct Model *m, int param_id);       // drop_grad: never reported ready
    void (*after_branch_fwd)(struct Model *m, int layer, int branch, void *o, int t0, int Tn);  // nan_at_seqlen
    int (*keep_stale_cmp)(struct Model *m, int layer, int t0, int Tn);   // prefill_state_leak: 1 = skip
    void (*before_recompute)(struct Model *m, int layer);           // gc_recompute_mismatch
    void (*after_recompute)(struct Model *m, int layer);
    void (*after_forward)(struct Model *m);                         // clobber_activation
    void (*after_backward)(struct Model *m);                        // drop_grad: the gradients stay zero
} ModelFaultHooks;

// Tokens of sequential prefill per recorded graph (model.c, "Sequential prefill as a graph"):
// m7c_125m at S = 2048, 12 layers: 16 graphs of ~38k operations each.
#define MODEL_SEQ_GRAPH_TOKENS 128
// The most lanes (Backend.lanes_open) a sequential forward's recording spreads its tokens over.
#define MODEL_SEQ_LANES 16

typedef struct Model {
    NsaConfig cfg;
    const Backend *be;
    int C, L, H, G, D, F, V, gh;   // dims (gh = gate hidden)
    int used[3];                   // branch outputs that reach the loss
    int cmp_needed;                // compressed branch computed (output or selection)

    // parameters
    int n_params;
    ParamInfo *params;             // [n_params]
    int64_t n_elems;               // total parameter elements
    void *param_mem;               // [n_elems] parameter type
    void *grad_mem;                // [n_elems] parameter type
    int id_tok_emb, id_norm_f, id_lm_head;   // lm_head == tok_emb when tied
    int (*lid)[LP_COUNT];          // [L][LP_COUNT] parameter id per slot, -1 absent

    // activations for the allocated [B, T]
    int B, T;
    NsaGeom geom;
    int32_t *d_inputs, *d_targets; // [N] backend memory
    void **res;                    // [L+1] residual stream, [N, C] each: res[0] = embeddings
    LayerActs *acts;               // [L] (checkpointed layers share acts_ckpt)
    LayerActs acts_ckpt;           // scratch for checkpointed layers
    int acts_ckpt_used;
    void *xf, *rstdf;              // [N, C], [N] final norm
    void *logits;                  // [N, V]
    void *dlogits;                 // [N, V] (== logits unless keep_logits)
    void *losses;                  // [N]
    void *rope_cs;                 // [T, D/2, 2]
    // backward scratch
    void *dres, *dxn, *dq, *dk[3], *dv[3], *dKc, *dVc, *dXk, *dXv, *dHk, *dHv;
    void *dob[3], *dattn_o, *dgate, *dglogits, *dgh, *dffa, *dffb, *dffh, *dxf;
    // The fused K/V projection (model.c, layer_forward/layer_backward): with all three
    // branches in use the six K/V weights are one [6*G*D, C] weight and run as one GEMM
    // through kv_scratch [N, 6*G*D] (dffa where F >= 6*G*D, else its own buffer; live
    // only inside one layer's forward or backward). kv_fused = 0 runs the per-branch
    // GEMMs instead (force_branch; NSA_KV_FUSED=0 in the environment; tests set it).
    int kv_fused;
    void *kv_scratch;
    void **allocs; int n_allocs, cap_allocs;   // every activation buffer, for freeing
    size_t act_bytes;              // bytes of activations + scratch currently allocated
    size_t param_bytes_total;      // params + grads

    // switches
    int keep_logits;               // keep logits intact (dump-step): dlogits separate
    int check_finite;              // check every op output (anomaly localisation)
    int seq_layer_major;           // eager sequential forwards in the layer-major order of a recording
                                   // on lanes (model.c; tests: the token-major loop's bits)
    Anomaly anomaly;
    GradReadyFn grad_ready; void *grad_ready_ctx;
    ModelEventFn event; void *event_ctx;   // diagnostics hook, NULL = off
    struct Faults *faults;                 // fault injection, NULL = off (a pointer test per hook)
    const ModelFaultHooks *fault_hooks;    // with faults: where they act (faults_bind)

    double last_loss;              // mean loss of the last forward

    // Sequential prefill as recorded op sequences (model.c, "Sequential prefill as a graph";
    // backends with Backend.graph_begin: CUDA graphs). The first forward of a given key
    // (shape, buffers, targets or not, keep_logits, dscale, the backend's generation) runs
    // eagerly; the next one with the same key is recorded (one graph per MODEL_SEQ_GRAPH_TOKENS
    // tokens) and launched; later ones launch the recording again, until the key changes.
    // (MODEL_SEQ_GRAPH_TOKENS, below)
    // Never with faults bound, check_finite, or where the backend refuses to record
    // (NSA_CUDA_GRAPH=0, NSA_CUDA_SYNC_CHECK=1, NSA_CUDA_PROFILE=1).
    struct {
        void **graphs;             // [n] the recordings, in token order; NULL: none held
        int n;
        int lanes;                 // lanes the next recording uses (> 1: layer-major, one per layer)
        int off;                   // a recording failed once: eager from then on (noted once)
        int have_last;             // `last` holds the key of the last sequential forward
        uint64_t key[12], last[12];  // the recordings' key; the last forward's key
        // counters (NSA_TRAIN_TIMING reports them)
        int captures, replays, eager, failures;
        size_t nodes;              // operations in the recordings held
        double capture_s;          // host time recording and instantiating, all captures
    } seq_graph;
    uint64_t acts_gen;             // advanced by every (re)allocation of the activations
} Model;

// Build the parameter table and allocate parameters + gradients (zeroed).
// Returns 0; -1 (allocation failed) or -2 (NSA_KV_FUSED is set but not 0 or 1) with err filled.
int model_init(Model *m, const NsaConfig *cfg, const Backend *be, char *err, size_t errlen);
void model_free(Model *m);
// Seeded deterministic init (DESIGN 2): values are a pure function of (seed,
// parameter, element), identical on every backend up to its rounding.
void model_init_weights(Model *m, uint64_t seed);
// (Re)allocate activations for a [B, T] micro-batch. Returns 0 or -1 (err).
int model_alloc_acts(Model *m, int B, int T, char *err, size_t errlen);
// Forward of one micro-batch (host int32 inputs/targets [B*T]). Returns the mean
// loss. Leaves dL/dlogits scaled by dscale ready for model_backward (dscale =
// 1 / (B*T*grad_accum) for a mean over the optimizer step). Sequential prefill
// when cfg.prefill says so. If check_finite and a non-finite value appears,
// stops early and fills m->anomaly (the return value is then NaN).
double model_forward(Model *m, const int32_t *inputs, const int32_t *targets, double dscale);
// Backward of the last forward; parameter gradients are accumulated (+=).
// Returns 0, or -1 if check_finite found a non-finite gradient (m->anomaly).
int model_backward(Model *m);
void model_zero_grad(Model *m);
// A backend allocation owned by the model's activation list (freed with the
// activations, counted in act_bytes). Used by the prefill_state_leak fault.
void *model_alloc_tracked(Model *m, size_t bytes);
// Tell the backend that the parameter buffer was written outside its adamw op
// (init, checkpoint load, a test poking weights): see Backend.params_changed.
void model_params_changed(Model *m);

// Helpers over the parameter table.
int model_find_param(const Model *m, const char *name);   // id or -1
void *model_param_ptr(const Model *m, int id);
void *model_grad_ptr(const Model *m, int id);
// Parameter ids that get no gradient by construction in this config
// (force_branch): out[i] = 1 if param i is expected to receive no gradient.
void model_expected_unused(const Model *m, uint8_t *out);
#endif
