// trainer/checkpoint.h — training checkpoints as safetensors.
//
// One file holds: every parameter under its dotted name (F32, or F64 on cpu64),
// so PyTorch's safetensors loader reads the weights directly; the AdamW moments
// as "optim.m.<name>" / "optim.v.<name>"; and in the metadata the step, the
// optimizer step count, the data position, the seed and the canonical config.
// Randomness is counter-based (trainer/rng.h): the seed and the data position
// are the whole RNG state, so resume continues bit for bit.
//
// Integrity: the metadata entry "tensor_digests" holds a JSON object
// (as a string, like every safetensors metadata value) mapping every tensor's name
// to the digest64 (common/digest.h, seed 0) of its raw bytes as stored in the
// file, 16 lowercase hex digits. checkpoint_load verifies every tensor against it
// before anything is copied into the model, and names the first tensor whose bytes
// differ. Checkpoints written before checksums existed have no "tensor_digests":
// they load unverified (CkptInfo.checksums = 0; nsa-train prints a note).
// The file stays a valid safetensors file: the digests are metadata.
//
// Metadata integrity: "metadata_digests", written last, holds a JSON object
// mapping every other metadata entry's name ("step", "optim_t", ..., "tensor_digests")
// to the digest64 (seed 0) of its value's bytes (the string, without a terminator).
// checkpoint_load checks it first, before any value is used, and names the entry that
// changed, disappeared or was added. A checkpoint without it (written before it
// existed) loads with CkptInfo.meta_checksums = 0 (nsa-train prints a note): its
// values are still validated below, which is what stands between an edited old file
// and a wrong run. Start-weights files carry it too, verified when present.
//
// Validation: whatever the digests say, the values must make sense: "step", "optim_t",
// "data_shard", "data_offset", "loss_scale_good_steps" whole numbers >= 0 (written by
// the trainer: "-"? digits, no sign, space, fraction or exponent), "data_batches" and
// "seed" whole numbers in [0, 2^64); optim_t <= step (one AdamW update per step at most;
// fewer when fp16 skipped steps), data_batches >= step (a step reads at least one
// micro-batch), loss_scale_good_steps <= optim_t, loss_scale a number in [1, 2^24]; the
// data position inside this run's data (data_check_pos: a shard that exists, an offset
// within it; 0 and 0 for the generated sources); "config" a JSON object whose digest is
// "config_digest", whose train.seed is "seed" and train.backend is "backend"; "backend"
// one of cpu, cpu64, cuda, with the tensors' dtype (F64 for cpu64, F32 otherwise).
// A value that fails is an error naming the key and the value ("metadata 'step' is -5:
// must be >= 0").
#ifndef NSA_TRAINER_CHECKPOINT_H
#define NSA_TRAINER_CHECKPOINT_H
#include <stddef.h>
#include <stdint.h>
#include "trainer/data.h"
#include "trainer/model.h"
#include "trainer/optim.h"

// Returns 0, or -1 with err filled and errno set as st_write leaves it (the system
// error when the file could not be written, e.g. ENOSPC; 0 for any other failure).
int checkpoint_save(const char *path, const Model *m, const Optim *o, int64_t step, DataPos pos,
                    char *err, size_t errlen);

// What a loaded checkpoint says about itself.
typedef struct {
    int64_t step;        // the last step it completed
    DataPos pos;         // data position after that step
    char digest[17];     // config digest it was written with ("" if absent)
    char *config;        // its canonical config JSON (malloc'd), NULL if absent
    int checksums;       // 1: every tensor was verified against "tensor_digests"; 0: the file has none
    int meta_checksums;  // 1: every metadata entry was verified against "metadata_digests"; 0: the file has none
} CkptInfo;

// Restores parameters and optimizer state into an initialised model/optimizer of
// the same shape. Errors (-1, err = "path: why"): an unreadable or malformed file,
// not a checkpoint, a metadata entry that changed after it was written ("metadata
// 'seed' is "7", changed after ..."), a missing tensor, a shape/dtype mismatch (the
// message also lists the config keys that differ from m->cfg), a tensor whose bytes do
// not match its stored digest ("tensor 'NAME' is corrupt: ..."), a metadata value that
// fails validation (above; with ds, the data position is checked against that source,
// NULL skips that check). Everything is checked before the model or optimizer is
// touched. The caller compares info->config with its own (checkpoint_config_diff) and
// frees it (checkpoint_info_free).
int checkpoint_load(const char *path, Model *m, Optim *o, const DataSource *ds, CkptInfo *info, char *err,
                    size_t errlen);
void checkpoint_info_free(CkptInfo *info);

// One key whose value differs between two canonical configs (config_to_json).
typedef struct {
    char key[96];        // dotted, e.g. "nsa.w", or "name"
    char ckpt[160];      // the checkpoint's value as JSON ("absent" when missing)
    char run[160];       // this run's value
    int allowed;         // a key that may differ on resume without --allow-config-change
} CkptConfigDiff;

// Key-by-key comparison of the checkpoint's canonical config with this run's, in
// sorted key order (nested objects are walked; arrays and scalars compared whole).
// Keys that may legitimately differ on resume are marked allowed: "train.steps"
// (resuming to train longer is normal; the LR schedule then spans the new value)
// and "name" (a label: it changes nothing that is computed). Writes up to max
// entries; returns how many keys differ (may exceed max), or -1 if either text is
// not a JSON object.
int checkpoint_config_diff(const char *ckpt_json, const char *run_json, CkptConfigDiff *out, int max);

// Start weights (--write-init / --init-weights, docs/diagnostics.md "Start weights").
// checkpoint_write_weights: the model's parameters under their names (F32, F64 on
// cpu64) with "tensor_digests", "metadata_digests", the config and the seed in the metadata (format
// "nsa-harness-init-weights-1"); no optimizer state. 0, or -1 with err and errno as
// checkpoint_save. The file is what `--init-weights` and the PyTorch trainer read.
int checkpoint_write_weights(const char *path, const Model *m, char *err, size_t errlen);
// checkpoint_load_weights: every parameter of m from a safetensors file, by name and
// shape, dtype F32 or F64 (cast to the master precision like model_init_weights);
// metadata is not required (any writer's file loads), but "metadata_digests" and
// "tensor_digests", when present, are verified. Nothing is touched unless everything fits. -1 with err
// "path: tensor 'NAME' ..." for a missing, misshapen, wrongly typed or extra tensor
// (or "path: why" for an unreadable file).
int checkpoint_load_weights(const char *path, Model *m, char *err, size_t errlen);
#endif
