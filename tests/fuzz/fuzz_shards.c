// tests/fuzz/fuzz_shards.c — libFuzzer target: the llm.c shard reader
// (trainer/data.c, data_open with kind shards: the glob, every file's header and
// size, the first shard's tokens against vocab_size; data_next: windows, the move
// to the next shard, wrapping, a later shard loaded when reached).
// Input: one or two shard files' bytes; the 8 bytes "NSASHARD" split the input into
// shard_0.bin and shard_1.bin (a committed seed has two). Opened as
// "TMP/shard_*.bin" with vocab_size 512, B 2, T 8, then 6 micro-batches are read;
// every token must be < vocab_size and the targets the inputs shifted by one.
#include "tests/fuzz/fuzz_common.h"
#include "common/config.h"
#include "trainer/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { V = 512, B = 2, T = 8, BATCHES = 6 };

static const uint8_t *find_sep(const uint8_t *p, size_t n) {
    static const char sep[] = "NSASHARD";
    for (size_t i = 0; i + 8 <= n; i++)
        if (!memcmp(p + i, sep, 8)) return p + i;
    return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *t = fuzz_tmpdir();
    char p0[600], p1[600], pattern[600];
    snprintf(p0, sizeof p0, "%s/shard_0.bin", t);
    snprintf(p1, sizeof p1, "%s/shard_1.bin", t);
    snprintf(pattern, sizeof pattern, "%s/shard_*.bin", t);
    const uint8_t *sep = find_sep(data, size);
    if (sep) {
        fuzz_write(p0, data, (size_t)(sep - data));
        fuzz_write(p1, sep + 8, size - (size_t)(sep - data) - 8);
    } else {
        fuzz_write(p0, data, size);
        unlink(p1);
    }
    char err[1024] = "";
    DataSource *ds = data_open(NSA_DATA_SHARDS, pattern, V, B, T, 1337, 0, 1, err, sizeof err);
    if (!ds) {
        if (!err[0]) {
            fprintf(stderr, "fuzz_shards: data_open failed without a message\n");
            abort();
        }
        return 0;
    }
    int32_t in[B * T], tg[B * T];
    for (int b = 0; b < BATCHES; b++) {
        if (data_next(ds, in, tg) != 0) break;   // a later shard may be bad: an error, said on stderr
        for (int i = 0; i < B * T; i++) {
            if (in[i] < 0 || in[i] >= V || tg[i] < 0 || tg[i] >= V) {
                fprintf(stderr, "fuzz_shards: batch %d token %d out of [0, %d): %d -> %d\n", b, i, V, in[i], tg[i]);
                abort();
            }
            if (i % T + 1 < T && tg[i] != in[i + 1]) {
                fprintf(stderr, "fuzz_shards: batch %d: targets are not the inputs shifted by one at %d\n", b, i);
                abort();
            }
        }
    }
    DataPos pos = data_get_pos(ds);
    data_set_pos(ds, pos);
    (void)data_describe(ds);
    data_close(ds);
    return 0;
}
