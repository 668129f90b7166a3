// trainer/data.c — the training data sources (contract: data.h).
//
// All sources share one layout: a global micro-batch is world*B sequences of
// T+1 tokens; rank r takes sequences [r*B, (r+1)*B); sequence b of the slice
// gives inputs[b*T + t] = tok[t] and targets[b*T + t] = tok[t+1], t < T.
//
// synthetic  token (gs, p) = rng_below(seed, 0x5EED0000 + gs, p, V) where
//            gs = batches*world*B + r*B + b is the global sequence index.
//            Position: batches.
//
// learnable  a seeded sparse first-order Markov chain. Token v has K = 4
//            successors succ[v][k] = rng_below(seed ^ 0xC4A1, v, k, V), taken
//            with probabilities P = (0.6, 0.25, 0.1, 0.05); a step from v draws
//            u = rng_uniform(seed, LEARN_STREAM + gs, i) and takes the first k
//            whose cumulative probability exceeds u. A sequence starts from
//            the uniform token rng_below(seed, LEARN_STREAM + gs, 0, V), runs 32
//            burn-in steps (draws 1..32; the chain contracts by ~0.66 a step
//            for the seeds tried, so the state is then distributed as the
//            stationary pi to ~1e-6), and
//            emits that state and the next T states (draws 33..32+T). Every
//            draw is indexed by (gs, i), so batch n is a pure function of n.
//            Successor lists may repeat a token; the entropies merge repeats.
//            Entropies, both exact functions of the chain (nats/token):
//              unigram  H(pi) = -sum_v pi(v) log pi(v), pi the stationary
//                       distribution, found by power iteration on the sparse
//                       chain (lazy, pi <- (pi + pi P)/2, so it converges even
//                       for a periodic chain; from the uniform start, as the
//                       burn-in starts) until the L1 change is < 1e-13.
//              optimal  H(X_{t+1} | X_t) = sum_v pi(v) H(succ distribution of v):
//                       the loss of the best predictor, which knows the chain.
//            A model that learns only token frequencies reaches ~unigram; one
//            that learns the transitions approaches optimal. O(V*K) time per
//            iteration (~140 iterations) and memory. V=256, seed 1337:
//            unigram 5.2216, optimal 1.0269 nats (log V = 5.5452).
//            There are no copied spans (data.h's summary mentions them): the
//            optimal entropy above is exact only for a pure Markov chain.
//            Position: batches.
//
// shards     llm.c shards: 256 int32 header (20240520, 1, token count), then
//            uint16 tokens. path is a file or a glob(3) pattern (sorted). At
//            open every file's header and size are checked and the first shard
//            is loaded; a shard is loaded (and scanned for tokens >= V, which
//            is cheap next to reading it) when reading first reaches it, one
//            shard in memory at a time. A micro-batch reads the window
//            [offset, offset + world*B*T] of the current shard (rank r's
//            sequence b starts at offset + (r*B + b)*T; sequences overlap by one
//            token, as in llm.c) and advances offset by world*B*T. A window
//            that would run past the shard moves to the next shard (wrapping
//            to the first) at offset 0; a shard too small for one window is an
//            error at open. Position: (shard, offset); the move to the next
//            shard happens at the start of data_next, so a saved position
//            replays exactly.
//
// text       raw bytes of one file, token = byte (V >= 256): a single shard
//            read by the same rule, wrapping to offset 0.
//
// pos.batches counts micro-batches for every source (only synthetic and
// learnable generate from it). data_next has no error channel besides its
// return value, so a failure there (a later shard that is bad, a restored
// position outside the data) is printed to stderr as one line naming the file
// or data set, and it returns -1.
#define _POSIX_C_SOURCE 200809L
#include "trainer/data.h"

#include "common/config.h"
#include "common/log.h"
#include "common/util.h"   // set_err
#include "trainer/rng.h"

#include <errno.h>
#include <glob.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

// Shard headers and tokens are read with memcpy/fread: little-endian only.
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "data.c assumes a little-endian host"
#endif

#define SHARD_MAGIC 20240520
#define SHARD_VERSION 1
#define SHARD_HEADER_INTS 256
#define SHARD_HEADER_BYTES (SHARD_HEADER_INTS * 4)

#define SYNTH_STREAM 0x5EED0000ull
#define LEARN_STREAM 0x1EA4000000000000ull   // + gs: one stream per learnable sequence
#define LEARN_SUCC_SALT 0xC4A1ull
#define LEARN_K 4
#define LEARN_BURNIN 32
static const double LEARN_P[LEARN_K] = {0.6, 0.25, 0.1, 0.05};

struct DataSource {
    int kind, V, B, T, rank, world;
    uint64_t seed;
    DataPos pos;
    int64_t stride;          // world*B*T: tokens a global micro-batch advances
    char desc[512];
    // learnable
    int32_t *succ;           // [V*K]
    int32_t *seq;            // [T+1] scratch for one sequence
    double h_unigram, h_optimal;
    // shards (text: one "shard", the file)
    char **files;
    int64_t *counts;         // tokens per file
    int n_files;
    int64_t loaded;          // index of the shard in tokens/bytes, -1 none
    uint16_t *tokens;        // shards: the loaded shard
    unsigned char *bytes;    // text: the whole file
};

// ---- learnable ----------------------------------------------------------------

static int32_t learn_step(const DataSource *ds, int32_t v, double u) {
    const int32_t *s = ds->succ + (size_t)v * LEARN_K;
    double c = 0.0;
    for (int k = 0; k < LEARN_K - 1; k++) {
        c += LEARN_P[k];
        if (u < c) return s[k];
    }
    return s[LEARN_K - 1];
}

// Global sequence gs: T+1 tokens into ds->seq.
static void learn_sequence(DataSource *ds, uint64_t gs) {
    uint64_t stream = LEARN_STREAM + gs;
    int32_t v = (int32_t)rng_below(ds->seed, stream, 0, (uint64_t)ds->V);
    for (int i = 1; i <= LEARN_BURNIN; i++)
        v = learn_step(ds, v, rng_uniform(ds->seed, stream, (uint64_t)i));
    ds->seq[0] = v;
    for (int p = 1; p <= ds->T; p++) {
        v = learn_step(ds, v, rng_uniform(ds->seed, stream, (uint64_t)(LEARN_BURNIN + p)));
        ds->seq[p] = v;
    }
}

// Merged successor distribution of v: distinct targets in w[], probabilities in
// p[]; returns how many.
static int learn_merged(const DataSource *ds, int32_t v, int32_t *w, double *p) {
    int m = 0;
    for (int k = 0; k < LEARN_K; k++) {
        int32_t t = ds->succ[(size_t)v * LEARN_K + k];
        int j = 0;
        while (j < m && w[j] != t) j++;
        if (j == m) {
            w[m] = t;
            p[m++] = 0.0;
        }
        p[j] += LEARN_P[k];
    }
    return m;
}

static int learn_init(DataSource *ds, char *err, size_t errlen) {
    size_t V = (size_t)ds->V;
    ds->succ = malloc(V * LEARN_K * sizeof *ds->succ);
    ds->seq = malloc(((size_t)ds->T + 1) * sizeof *ds->seq);
    double *pi = malloc(V * sizeof *pi), *nx = malloc(V * sizeof *nx);
    if (!ds->succ || !ds->seq || !pi || !nx) {
        free(pi);
        free(nx);
        set_err(err, errlen, "data: out of memory for the learnable task (V=%d)", ds->V);
        return -1;
    }
    for (size_t v = 0; v < V; v++)
        for (int k = 0; k < LEARN_K; k++)
            ds->succ[v * LEARN_K + k] =
                (int32_t)rng_below(ds->seed ^ LEARN_SUCC_SALT, v, (uint64_t)k, V);

    for (size_t v = 0; v < V; v++) pi[v] = 1.0 / (double)V;
    // ~140 iterations in practice; the cap only bounds a pathological chain.
    for (int it = 0; it < 20000; it++) {
        for (size_t v = 0; v < V; v++) nx[v] = 0.5 * pi[v];
        for (size_t v = 0; v < V; v++)
            for (int k = 0; k < LEARN_K; k++)
                nx[ds->succ[v * LEARN_K + k]] += 0.5 * LEARN_P[k] * pi[v];
        double d = 0.0;
        for (size_t v = 0; v < V; v++) d += fabs(nx[v] - pi[v]);
        double *t = pi;
        pi = nx;
        nx = t;
        if (d < 1e-13) break;
    }
    double hu = 0.0, ho = 0.0;
    for (size_t v = 0; v < V; v++) {
        if (pi[v] > 0.0) hu -= pi[v] * log(pi[v]);
        int32_t w[LEARN_K];
        double p[LEARN_K], h = 0.0;
        int m = learn_merged(ds, (int32_t)v, w, p);
        for (int j = 0; j < m; j++) h -= p[j] * log(p[j]);
        ho += pi[v] * h;
    }
    ds->h_unigram = hu;
    ds->h_optimal = ho;
    free(pi);
    free(nx);
    return 0;
}

// ---- shards and text ------------------------------------------------------------

// "12345", "12.3M", "4.56B": sizes for data_describe.
static void fmt_count(char *buf, size_t n, int64_t x) {
    if (x < 100000) snprintf(buf, n, "%lld", (long long)x);
    else if (x < 1000000000) snprintf(buf, n, "%.1fM", (double)x / 1e6);
    else snprintf(buf, n, "%.2fB", (double)x / 1e9);
}

// Reads and checks a shard's header and size: magic, version, a non-negative
// count, and a file exactly 1024 + 2*count bytes long. *count gets the count.
static int shard_header(FILE *fp, const char *file, int64_t *count, char *err, size_t errlen) {
    struct stat sb;
    if (fstat(fileno(fp), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        set_err(err, errlen, "%s: not a regular file", file);
        return -1;
    }
    int32_t h[SHARD_HEADER_INTS];
    if (sb.st_size < SHARD_HEADER_BYTES || fread(h, 4, SHARD_HEADER_INTS, fp) != SHARD_HEADER_INTS) {
        set_err(err, errlen, "%s: truncated file: %lld bytes, shorter than the %d-byte header",
                file, (long long)sb.st_size, SHARD_HEADER_BYTES);
        return -1;
    }
    if (h[0] != SHARD_MAGIC) {
        set_err(err, errlen, "%s: bad magic %ld (expected %d)", file, (long)h[0], SHARD_MAGIC);
        return -1;
    }
    if (h[1] != SHARD_VERSION) {
        set_err(err, errlen, "%s: unsupported version %ld (expected %d)", file, (long)h[1],
                SHARD_VERSION);
        return -1;
    }
    if (h[2] < 0) {
        set_err(err, errlen, "%s: negative token count %ld", file, (long)h[2]);
        return -1;
    }
    int64_t want = SHARD_HEADER_BYTES + 2 * (int64_t)h[2];
    if ((int64_t)sb.st_size < want) {
        set_err(err, errlen, "%s: truncated file: %lld bytes, the header's %ld tokens need %lld",
                file, (long long)sb.st_size, (long)h[2], (long long)want);
        return -1;
    }
    if ((int64_t)sb.st_size > want) {
        set_err(err, errlen, "%s: %lld bytes after the header's %ld tokens (size %lld, expected %lld)",
                file, (long long)sb.st_size - want, (long)h[2], (long long)sb.st_size,
                (long long)want);
        return -1;
    }
    *count = h[2];
    return 0;
}

// Makes shard s the loaded one: re-checks its header (the file may have changed
// since open), reads its tokens and scans them against V.
static int load_shard(DataSource *ds, int64_t s, char *err, size_t errlen) {
    const char *file = ds->files[s];
    FILE *fp = fopen(file, "rb");
    if (!fp) {
        set_err(err, errlen, "%s: %s", file, strerror(errno));
        return -1;
    }
    int64_t n;
    int rc = -1;
    ds->loaded = -1;
    if (shard_header(fp, file, &n, err, errlen) != 0) goto out;
    if (n != ds->counts[s]) {
        set_err(err, errlen, "%s: token count changed from %lld to %lld since the data was opened",
                file, (long long)ds->counts[s], (long long)n);
        goto out;
    }
    if (fread(ds->tokens, 2, (size_t)n, fp) != (size_t)n) {
        set_err(err, errlen, "%s: reading tokens: %s", file,
                ferror(fp) ? strerror(errno) : "unexpected end of file");
        goto out;
    }
    for (int64_t i = 0; i < n; i++)
        if (ds->tokens[i] >= ds->V) {
            set_err(err, errlen, "%s: token %u at index %lld is >= vocab_size %d", file,
                    (unsigned)ds->tokens[i], (long long)i, ds->V);
            goto out;
        }
    ds->loaded = s;
    rc = 0;
out:
    fclose(fp);
    return rc;
}

static int open_shards(DataSource *ds, const char *path, char *err, size_t errlen) {
    glob_t g;
    int gr = glob(path, 0, NULL, &g);
    if (gr != 0) {
        if (gr == GLOB_NOMATCH)
            set_err(err, errlen, "%s: %s", path,
                    strpbrk(path, "*?[") ? "no file matches the pattern" : strerror(ENOENT));
        else
            set_err(err, errlen, "%s: glob failed (%s)", path,
                    gr == GLOB_NOSPACE ? "out of memory" : "read error");
        globfree(&g);
        return -1;
    }
    int rc = -1;
    ds->n_files = (int)g.gl_pathc;
    ds->files = calloc(g.gl_pathc, sizeof *ds->files);
    ds->counts = calloc(g.gl_pathc, sizeof *ds->counts);
    if (!ds->files || !ds->counts) {
        set_err(err, errlen, "%s: out of memory", path);
        goto out;
    }
    int64_t max = 0, total = 0;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        const char *file = g.gl_pathv[i];
        size_t len = strlen(file) + 1;
        if (!(ds->files[i] = malloc(len))) {
            set_err(err, errlen, "%s: out of memory", path);
            goto out;
        }
        memcpy(ds->files[i], file, len);
        FILE *fp = fopen(file, "rb");
        if (!fp) {
            set_err(err, errlen, "%s: %s", file, strerror(errno));
            goto out;
        }
        int hr = shard_header(fp, file, &ds->counts[i], err, errlen);
        fclose(fp);
        if (hr != 0) goto out;
        if (ds->counts[i] < ds->stride + 1) {
            set_err(err, errlen, "%s: %lld tokens, too few for one micro-batch (world*B*T+1 = %lld)",
                    file, (long long)ds->counts[i], (long long)ds->stride + 1);
            goto out;
        }
        if (ds->counts[i] > max) max = ds->counts[i];
        total += ds->counts[i];
    }
    // One buffer sized for the largest shard: later loads cannot fail for memory.
    if (!(ds->tokens = malloc((size_t)max * sizeof *ds->tokens))) {
        set_err(err, errlen, "%s: out of memory for a %lld-token shard", path, (long long)max);
        goto out;
    }
    if (load_shard(ds, 0, err, errlen) != 0) goto out;
    char amount[32];
    fmt_count(amount, sizeof amount, total);
    snprintf(ds->desc, sizeof ds->desc, "shards %d file%s, %s tokens (%s)", ds->n_files,
             ds->n_files == 1 ? "" : "s", amount, path);
    rc = 0;
out:
    globfree(&g);
    return rc;
}

static int open_text(DataSource *ds, const char *path, char *err, size_t errlen) {
    if (ds->V < 256) {
        set_err(err, errlen, "%s: the text source's byte tokens need vocab_size >= 256 (got %d)",
                path, ds->V);
        return -1;
    }
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        set_err(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    int rc = -1;
    struct stat sb;
    if (fstat(fileno(fp), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        set_err(err, errlen, "%s: not a regular file", path);
        goto out;
    }
    int64_t n = (int64_t)sb.st_size;
    if (n == 0) {
        set_err(err, errlen, "%s: empty file", path);
        goto out;
    }
    if (n < ds->stride + 1) {
        set_err(err, errlen, "%s: %lld bytes, too few for one micro-batch (world*B*T+1 = %lld)",
                path, (long long)n, (long long)ds->stride + 1);
        goto out;
    }
    ds->files = calloc(1, sizeof *ds->files);
    ds->counts = malloc(sizeof *ds->counts);
    ds->bytes = malloc((size_t)n);
    if (!ds->files || !ds->counts || !ds->bytes || !(ds->files[0] = malloc(strlen(path) + 1))) {
        set_err(err, errlen, "%s: out of memory", path);
        goto out;
    }
    ds->n_files = 1;
    strcpy(ds->files[0], path);
    ds->counts[0] = n;
    if (fread(ds->bytes, 1, (size_t)n, fp) != (size_t)n) {
        set_err(err, errlen, "%s: reading: %s", path,
                ferror(fp) ? strerror(errno) : "unexpected end of file");
        goto out;
    }
    ds->loaded = 0;
    char amount[32];
    fmt_count(amount, sizeof amount, n);
    snprintf(ds->desc, sizeof ds->desc, "text %s bytes, byte tokens (%s)", amount, path);
    rc = 0;
out:
    fclose(fp);
    return rc;
}

// One micro-batch of the shards/text sources (see the file comment).
static int next_stream(DataSource *ds, int32_t *inputs, int32_t *targets) {
    char err[1024];
    DataPos *p = &ds->pos;
    if (data_check_pos(ds, *p, err, sizeof err) != DATA_POS_OK) {
        nsa_log(LOG_ERROR, "data: position (shard %lld, offset %lld) is outside the data: %s",
                (long long)p->shard, (long long)p->offset, err);
        return -1;
    }
    if (ds->counts[p->shard] - p->offset < ds->stride + 1) {
        p->shard = (p->shard + 1) % ds->n_files;
        p->offset = 0;
    }
    if (ds->loaded != p->shard && load_shard(ds, p->shard, err, sizeof err) != 0) {
        nsa_log(LOG_ERROR, "%s", err);
        return -1;
    }
    int64_t base = p->offset + (int64_t)ds->rank * ds->B * ds->T;
    for (int b = 0; b < ds->B; b++) {
        int64_t s = base + (int64_t)b * ds->T;
        for (int t = 0; t < ds->T; t++) {
            size_t i = (size_t)b * ds->T + t;
            if (ds->bytes) {
                inputs[i] = ds->bytes[s + t];
                targets[i] = ds->bytes[s + t + 1];
            } else {
                inputs[i] = ds->tokens[s + t];
                targets[i] = ds->tokens[s + t + 1];
            }
        }
    }
    p->offset += ds->stride;
    p->batches++;
    return 0;
}

// ---- API ------------------------------------------------------------------------

DataSource *data_open(int kind, const char *path, int vocab_size, int B, int T,
                      uint64_t seed, int rank, int world, char *err, size_t errlen) {
    int streamed = kind == NSA_DATA_SHARDS || kind == NSA_DATA_TEXT;
    const char *where = streamed && path ? path : "data";
    if (kind < NSA_DATA_SYNTHETIC || kind > NSA_DATA_TEXT) {
        set_err(err, errlen, "data: unknown data kind %d", kind);
        return NULL;
    }
    if (streamed && (!path || !*path)) {
        set_err(err, errlen, "data: the %s source needs a path",
                kind == NSA_DATA_SHARDS ? "shards" : "text");
        return NULL;
    }
    // Sizes are bounded so that every index below fits comfortably in int64 and
    // B*T (the caller's array length) in int.
    if (vocab_size < 1 || B < 1 || T < 1 || (int64_t)B * T > INT32_MAX ||
        world < 1 || rank < 0 || rank >= world) {
        set_err(err, errlen, "%s: invalid parameters (vocab_size %d, B %d, T %d, rank %d, world %d)",
                where, vocab_size, B, T, rank, world);
        return NULL;
    }
    DataSource *ds = calloc(1, sizeof *ds);
    if (!ds) {
        set_err(err, errlen, "%s: out of memory", where);
        return NULL;
    }
    ds->kind = kind;
    ds->V = vocab_size;
    ds->B = B;
    ds->T = T;
    ds->seed = seed;
    ds->rank = rank;
    ds->world = world;
    ds->stride = (int64_t)world * B * T;
    ds->loaded = -1;
    int rc = 0;
    switch (kind) {
    case NSA_DATA_SYNTHETIC:
        snprintf(ds->desc, sizeof ds->desc, "synthetic uniform V=%d seed=%llu", vocab_size,
                 (unsigned long long)seed);
        break;
    case NSA_DATA_LEARNABLE:
        rc = learn_init(ds, err, errlen);
        snprintf(ds->desc, sizeof ds->desc,
                 "learnable markov V=%d K=%d seed=%llu (unigram %.2f nats, optimal %.2f nats)",
                 vocab_size, LEARN_K, (unsigned long long)seed, ds->h_unigram, ds->h_optimal);
        break;
    case NSA_DATA_SHARDS:
        rc = open_shards(ds, path, err, errlen);
        break;
    default:
        rc = open_text(ds, path, err, errlen);
        break;
    }
    if (rc != 0) {
        data_close(ds);
        return NULL;
    }
    if (world > 1) {
        size_t n = strlen(ds->desc);
        snprintf(ds->desc + n, sizeof ds->desc - n, " rank %d/%d", rank, world);
    }
    return ds;
}

int data_next(DataSource *ds, int32_t *inputs, int32_t *targets) {
    if (ds->kind == NSA_DATA_SHARDS || ds->kind == NSA_DATA_TEXT)
        return next_stream(ds, inputs, targets);
    uint64_t gs0 = ds->pos.batches * (uint64_t)ds->world * (uint64_t)ds->B +
                   (uint64_t)ds->rank * (uint64_t)ds->B;
    for (int b = 0; b < ds->B; b++) {
        uint64_t gs = gs0 + (uint64_t)b;
        int32_t *in = inputs + (size_t)b * ds->T, *tg = targets + (size_t)b * ds->T;
        if (ds->kind == NSA_DATA_SYNTHETIC) {
            // Each token is drawn once and used as target t-1 and input t.
            uint64_t V = (uint64_t)ds->V;
            int32_t prev = (int32_t)rng_below(ds->seed, SYNTH_STREAM + gs, 0, V);
            for (int t = 0; t < ds->T; t++) {
                int32_t cur = (int32_t)rng_below(ds->seed, SYNTH_STREAM + gs, (uint64_t)t + 1, V);
                in[t] = prev;
                tg[t] = cur;
                prev = cur;
            }
        } else {
            learn_sequence(ds, gs);
            memcpy(in, ds->seq, (size_t)ds->T * sizeof *in);
            memcpy(tg, ds->seq + 1, (size_t)ds->T * sizeof *tg);
        }
    }
    ds->pos.batches++;
    return 0;
}

DataPos data_get_pos(const DataSource *ds) { return ds->pos; }

// Validated lazily by data_next (which can report), since this cannot; a caller that
// can report checks first (data_check_pos).
void data_set_pos(DataSource *ds, DataPos pos) { ds->pos = pos; }

int data_check_pos(const DataSource *ds, DataPos pos, char *why, size_t n) {
    if (ds->kind != NSA_DATA_SHARDS && ds->kind != NSA_DATA_TEXT) {
        const char *kind = config_data_name(ds->kind);
        if (pos.shard != 0) {
            set_err(why, n, "the %s source has no shards (always 0)", kind);
            return DATA_POS_SHARD;
        }
        if (pos.offset != 0) {
            set_err(why, n, "the %s source has no offset (always 0)", kind);
            return DATA_POS_OFFSET;
        }
        return DATA_POS_OK;
    }
    if (pos.shard < 0 || pos.shard >= ds->n_files) {
        set_err(why, n, "the data has %d shard%s (%s)", ds->n_files, ds->n_files == 1 ? "" : "s", ds->desc);
        return DATA_POS_SHARD;
    }
    if (pos.offset < 0 || pos.offset > ds->counts[pos.shard]) {
        set_err(why, n, "shard %lld (%s) has %lld %s", (long long)pos.shard, ds->files[pos.shard],
                (long long)ds->counts[pos.shard], ds->bytes ? "bytes" : "tokens");
        return DATA_POS_OFFSET;
    }
    return DATA_POS_OK;
}

const char *data_describe(const DataSource *ds) { return ds->desc; }

double data_unigram_entropy(const DataSource *ds) {
    return ds->kind == NSA_DATA_LEARNABLE ? ds->h_unigram : -1.0;
}

double data_optimal_entropy(const DataSource *ds) {
    return ds->kind == NSA_DATA_LEARNABLE ? ds->h_optimal : -1.0;
}

void data_close(DataSource *ds) {
    if (!ds) return;
    free(ds->succ);
    free(ds->seq);
    for (int i = 0; ds->files && i < ds->n_files; i++) free(ds->files[i]);
    free(ds->files);
    free(ds->counts);
    free(ds->tokens);
    free(ds->bytes);
    free(ds);
}

int data_write_shard(const char *path, const uint16_t *tokens, int64_t n) {
    if (n < 0 || n > INT32_MAX || (n > 0 && !tokens)) return -1;
    int32_t h[SHARD_HEADER_INTS] = {SHARD_MAGIC, SHARD_VERSION, (int32_t)n};
    FILE *fp = fopen(path, "wb");
    if (!fp) return -1;
    int bad = fwrite(h, 4, SHARD_HEADER_INTS, fp) != SHARD_HEADER_INTS ||
              (n > 0 && fwrite(tokens, 2, (size_t)n, fp) != (size_t)n);
    if (fclose(fp) != 0 || bad) {
        remove(path);
        return -1;
    }
    return 0;
}
