// trainer/data.h — the training data sources.
//
// Every source produces, per micro-batch, B sequences of T+1 tokens laid out as
// inputs[B*T] and targets[B*T] (targets = inputs shifted by one). A source's whole
// state is its position (DataPos): saving and restoring it makes resume bitwise.
//   synthetic  seeded uniform tokens in [0, V): a pure throughput/numerics load.
//   learnable  a seeded task a small model can learn (so loss visibly falls):
//              a sparse first-order Markov chain over the vocabulary (see data.c
//              for the exact generator and its exactly computed entropies).
//   shards     llm.c token shards: 256 x int32 header (magic 20240520, version 1,
//              token count), then uint16 tokens; a file or a glob of files, read
//              in order, wrapping around.
//   text       raw bytes of a file, byte-level tokenizer (token = byte, V >= 256).
#ifndef NSA_TRAINER_DATA_H
#define NSA_TRAINER_DATA_H
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t batches;   // micro-batches produced so far (synthetic/learnable)
    int64_t shard;      // current shard index (shards)
    int64_t offset;     // token offset in the current shard / byte offset (text)
} DataPos;

typedef struct DataSource DataSource;

// Opens a source. kind: NSA_DATA_* (config.h). path: shards/text only.
// rank/world: data-parallel split (rank r reads the r-th slice of each global
// batch). Returns NULL with err filled ("path: why") on failure.
DataSource *data_open(int kind, const char *path, int vocab_size, int B, int T,
                      uint64_t seed, int rank, int world, char *err, size_t errlen);
// Next micro-batch: inputs[B*T], targets[B*T] (host int32). Returns 0, -1 on error.
int data_next(DataSource *ds, int32_t *inputs, int32_t *targets);
DataPos data_get_pos(const DataSource *ds);
void data_set_pos(DataSource *ds, DataPos pos);
// Whether pos can be a position of this source (a checkpoint's, before data_set_pos):
// DATA_POS_OK, or which field is outside the data with why filled ("the data has 2
// shards (data/*.bin)", "shard 0 (data/a.bin) has 4096 tokens"). shards/text: shard in
// [0, files), offset in [0, tokens of that shard]; synthetic/learnable have neither:
// both 0. batches is not checked (any count is a position of the generated sources).
enum { DATA_POS_OK = 0, DATA_POS_SHARD, DATA_POS_OFFSET };
int data_check_pos(const DataSource *ds, DataPos pos, char *why, size_t n);
const char *data_describe(const DataSource *ds);   // one line for logs
// For the learnable task: entropy (nats/token) of the unigram distribution of its
// tokens, estimated from the generator, and of the best achievable predictor;
// -1 for other sources.
double data_unigram_entropy(const DataSource *ds);
double data_optimal_entropy(const DataSource *ds);
void data_close(DataSource *ds);

// Write an llm.c-format shard (for tests and tools). Returns 0 or -1.
int data_write_shard(const char *path, const uint16_t *tokens, int64_t n);
#endif
