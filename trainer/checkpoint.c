// trainer/checkpoint.c — save/restore parameters, AdamW state and data position
// (format and integrity: checkpoint.h).
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "trainer/checkpoint.h"
#include "common/config.h"
#include "common/digest.h"
#include "common/safetensors.h"

#define CKPT_FORMAT "nsa-harness-checkpoint-1"
#define CKPT_DIGESTS "tensor_digests"
#define CKPT_META_DIGESTS "metadata_digests"
#define INIT_FORMAT "nsa-harness-init-weights-1"

static StDtype param_dtype(const Model *m) { return m->be->param_bytes == 8 ? ST_F64 : ST_F32; }

// name of tensor i of pass 0 (parameters), 1 (optim.m.), 2 (optim.v.)
static void tensor_name(char *out, size_t n, int pass, const char *param) {
    snprintf(out, n, "%s%s", pass == 0 ? "" : pass == 1 ? "optim.m." : "optim.v.", param);
}

// One pass's tensors (parameters, optim.m., optim.v.) from the host copy `base` of a
// parameter-layout buffer into the writer, each with its digest64 in `digests`. The
// writer borrows the data and copies the names.
static void add_pass(StFile *f, json_t *digests, const Model *m, const char *base, int pass) {
    char name[128], hex[17];
    for (int i = 0; i < m->n_params; i++) {
        const ParamInfo *p = &m->params[i];
        const char *data = base + p->offset * m->be->param_bytes;
        tensor_name(name, sizeof name, pass, p->name);
        st_add(f, name, param_dtype(m), p->ndim, p->shape, data);
        digest64_hex(digest64(data, (size_t)p->numel * m->be->param_bytes, 0), hex);
        json_object_set_new(digests, name, json_string(hex));
    }
}

// "metadata_digests": every metadata entry written so far (so it goes last), name ->
// digest64 of its value's bytes (checkpoint.h). The writer copies the string. 0, or -1
// when out of memory.
static int add_meta_digests(StFile *f) {
    json_t *d = json_object();
    char hex[17];
    for (int i = 0; d && i < f->n_meta; i++) {
        digest64_hex(digest64(f->meta_vals[i], strlen(f->meta_vals[i]), 0), hex);
        json_object_set_new(d, f->meta_keys[i], json_string(hex));
    }
    char *text = d ? json_dumps(d, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(d);
    if (!text) return -1;
    st_add_meta(f, CKPT_META_DIGESTS, text);
    free(text);
    return 0;
}

int checkpoint_save(const char *path, const Model *m, const Optim *o, int64_t step, DataPos pos,
                    char *err, size_t errlen) {
    const Backend *be = m->be;
    size_t bytes = (size_t)m->n_elems * be->param_bytes;
    // host copies of the three parameter-layout buffers (backend memory may be a GPU)
    char *hp = malloc(bytes), *hm = malloc(bytes), *hv = malloc(bytes);
    json_t *digests = json_object();
    if (!hp || !hm || !hv || !digests) {
        free(hp); free(hm); free(hv);
        json_decref(digests);
        snprintf(err, errlen, "%s: out of memory staging %zu bytes", path, bytes);
        errno = 0;
        return -1;
    }
    be->to_host(hp, m->param_mem, bytes);
    be->to_host(hm, o->m_mem, bytes);
    be->to_host(hv, o->v_mem, bytes);
    StFile f;
    st_init(&f);
    for (int pass = 0; pass < 3; pass++) add_pass(&f, digests, m, pass == 0 ? hp : pass == 1 ? hm : hv, pass);
    char buf[64];
    char *cfg = config_to_json(&m->cfg);
    char *dig = json_dumps(digests, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(digests);
    st_add_meta(&f, "format", CKPT_FORMAT);
    st_add_meta(&f, "config", cfg);
    st_add_meta(&f, "config_digest", m->cfg.digest);
    snprintf(buf, sizeof buf, "%" PRId64, step);                 st_add_meta(&f, "step", buf);
    snprintf(buf, sizeof buf, "%" PRId64, o->t);                 st_add_meta(&f, "optim_t", buf);
    snprintf(buf, sizeof buf, "%" PRIu64, pos.batches);          st_add_meta(&f, "data_batches", buf);
    snprintf(buf, sizeof buf, "%" PRId64, pos.shard);            st_add_meta(&f, "data_shard", buf);
    snprintf(buf, sizeof buf, "%" PRId64, pos.offset);           st_add_meta(&f, "data_offset", buf);
    snprintf(buf, sizeof buf, "%" PRIu64, m->cfg.seed);          st_add_meta(&f, "seed", buf);
    st_add_meta(&f, "backend", be->name);
    snprintf(buf, sizeof buf, "%.17g", o->loss_scale);          st_add_meta(&f, "loss_scale", buf);
    snprintf(buf, sizeof buf, "%" PRId64, o->good_steps);        st_add_meta(&f, "loss_scale_good_steps", buf);
    if (dig) st_add_meta(&f, CKPT_DIGESTS, dig);
    if (dig && add_meta_digests(&f)) {
        free(dig);
        dig = NULL;
    }
    int rc = dig ? st_write(&f, path, err, errlen) : -1;
    int e = dig ? errno : 0;
    if (!dig) snprintf(err, errlen, "%s: out of memory serialising the digests", path);
    free(cfg);
    free(dig);
    st_free(&f);   // frees the writer's tables; tensor data was borrowed
    free(hp); free(hm); free(hv);
    errno = rc ? e : 0;
    return rc;
}

// ---- metadata values ------------------------------------------------------------------------

// A metadata value quoted for a message: "VALUE", cut after 40 characters.
static void quoted(const char *v, char *out, size_t n) {
    size_t len = strlen(v);
    snprintf(out, n, "\"%.*s%s\"", 40, v, len > 40 ? "..." : "");
}

// The whole number in metadata `key`: "-"? digits, in [lo, hi] (uint64 when is_u64, else
// int64 bounds). -1 with err naming the file, the key and the value: missing, not a whole
// number (a sign other than a leading '-', spaces, a fraction, an exponent), out of range.
static int meta_whole(const StFile *f, const char *path, const char *key, int is_u64, int64_t lo, const char *range,
                      int64_t *out_i, uint64_t *out_u, char *err, size_t errlen) {
    const char *s = st_meta(f, key);
    char q[64];
    if (!s) {
        snprintf(err, errlen, "%s: metadata '%s' is missing", path, key);
        return -1;
    }
    quoted(s, q, sizeof q);
    const char *d = s + (s[0] == '-');
    int digits = *d != 0;
    for (const char *c = d; *c; c++) digits &= *c >= '0' && *c <= '9';
    if (!digits) {
        snprintf(err, errlen, "%s: metadata '%s' is %s: not a whole number", path, key, q);
        return -1;
    }
    errno = 0;
    unsigned long long u = 0;
    long long v = 0;
    if (is_u64 && s[0] != '-') u = strtoull(s, NULL, 10);
    else v = strtoll(s, NULL, 10);
    if (errno == ERANGE) {
        snprintf(err, errlen, "%s: metadata '%s' is %.40s%s: does not fit in 64 bits", path, key, s,
                 strlen(s) > 40 ? "..." : "");
        return -1;
    }
    if ((is_u64 && s[0] == '-') || (!is_u64 && v < lo)) {
        snprintf(err, errlen, "%s: metadata '%s' is %s: must be %s", path, key, s, range);
        return -1;
    }
    if (is_u64) *out_u = (uint64_t)u;
    else *out_i = (int64_t)v;
    return 0;
}

static int meta_i64(const StFile *f, const char *path, const char *key, int64_t lo, const char *range, int64_t *out,
                    char *err, size_t errlen) {
    return meta_whole(f, path, key, 0, lo, range, out, NULL, err, errlen);
}

static int meta_u64(const StFile *f, const char *path, const char *key, uint64_t *out, char *err, size_t errlen) {
    return meta_whole(f, path, key, 1, 0, "in [0, 2^64)", NULL, out, err, errlen);
}

// ---- config comparison ------------------------------------------------------------------

// A value as short JSON: reals in the shortest %.Ng that reads back (as the
// canonical config writes them), everything else as Jansson's compact form.
static void value_text(const json_t *v, char *out, size_t n) {
    if (!v) { snprintf(out, n, "absent"); return; }
    if (json_is_real(v)) {
        double x = json_real_value(v);
        for (int prec = 15; prec <= 17; prec++) {
            snprintf(out, n, "%.*g", prec, x);
            if (strtod(out, NULL) == x) break;
        }
        return;
    }
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    snprintf(out, n, "%s", s ? s : "?");
    free(s);
}

static int is_allowed_key(const char *key) { return !strcmp(key, "train.steps") || !strcmp(key, "name"); }

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

static void diff_objects(const json_t *a, const json_t *b, const char *prefix, CkptConfigDiff *out, int max,
                         int *count) {
    size_t na = json_object_size(a), nb = json_object_size(b), nk = 0;
    const char **keys = xmalloc(sizeof(char *) * (na + nb + 1));
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)a, k, v) keys[nk++] = k;
    json_object_foreach((json_t *)b, k, v)
        if (!json_object_get(a, k)) keys[nk++] = k;
    qsort(keys, nk, sizeof *keys, cmp_str);
    for (size_t i = 0; i < nk; i++) {
        const json_t *x = json_object_get(a, keys[i]), *y = json_object_get(b, keys[i]);
        char full[96];
        snprintf(full, sizeof full, "%s%s", prefix, keys[i]);
        if (json_is_object(x) && json_is_object(y)) {
            char sub[sizeof full + 2];
            snprintf(sub, sizeof sub, "%s.", full);
            diff_objects(x, y, sub, out, max, count);
            continue;
        }
        if (x && y && json_equal((json_t *)x, (json_t *)y)) continue;
        if (*count < max) {
            CkptConfigDiff *d = &out[*count];
            snprintf(d->key, sizeof d->key, "%s", full);
            value_text(x, d->ckpt, sizeof d->ckpt);
            value_text(y, d->run, sizeof d->run);
            d->allowed = is_allowed_key(full);
        }
        (*count)++;
    }
    free(keys);
}

int checkpoint_config_diff(const char *ckpt_json, const char *run_json, CkptConfigDiff *out, int max) {
    json_t *a = ckpt_json ? json_loads(ckpt_json, 0, NULL) : NULL;
    json_t *b = run_json ? json_loads(run_json, 0, NULL) : NULL;
    int count = -1;
    if (json_is_object(a) && json_is_object(b)) {
        count = 0;
        diff_objects(a, b, "", out, max, &count);
    }
    json_decref(a);
    json_decref(b);
    return count;
}

// "; config differs: k: checkpoint X, this run Y; ..." for a shape error, or "".
static void diff_hint(const char *ckpt_cfg, const NsaConfig *cfg, char *out, size_t n) {
    out[0] = 0;
    if (!ckpt_cfg) return;
    CkptConfigDiff d[8];
    char *run = config_to_json(cfg);
    int nd = checkpoint_config_diff(ckpt_cfg, run, d, 8);
    free(run);
    size_t at = 0;
    for (int i = 0; i < nd && i < 8 && at < n; i++)
        at += (size_t)snprintf(out + at, n - at, "%s%s: checkpoint %s, this run %s", i ? "; " : " (config differs: ",
                               d[i].key, d[i].ckpt, d[i].run);
    if (nd > 8 && at < n) at += (size_t)snprintf(out + at, n - at, "; and %d more", nd - 8);
    if (nd > 0 && at < n) snprintf(out + at, n - at, ")");
}

// ---- load -------------------------------------------------------------------------------

// Every tensor of f against the digest64 its metadata "tensor_digests" recorded
// (checkpoint.h); `what` names the file in the message. Returns 1 (all verified), 0 (the file has no digests: unverified),
// or -1 with err naming the damaged metadata or the first tensor whose bytes changed.
static int verify_digests(const StFile *f, const char *path, const char *what, char *err, size_t errlen) {
    const char *dj = st_meta(f, CKPT_DIGESTS);
    if (!dj) return 0;
    json_t *digests = json_loads(dj, 0, NULL);
    int rc = 1;
    if (!json_is_object(digests)) {
        snprintf(err, errlen, "%s: metadata '%s' is not a JSON object: the file is damaged", path, CKPT_DIGESTS);
        rc = -1;
    }
    for (int i = 0; rc == 1 && i < f->n_tensors; i++) {
        const StTensor *t = &f->tensors[i];
        const char *want = json_string_value(json_object_get(digests, t->name));
        if (!want) {
            snprintf(err, errlen, "%s: tensor '%s' has no checksum in metadata '%s': the file is damaged", path,
                     t->name, CKPT_DIGESTS);
            rc = -1;
            break;
        }
        char have[17];
        digest64_hex(digest64(t->data, t->nbytes, 0), have);
        if (strcmp(have, want)) {
            snprintf(err, errlen,
                     "%s: tensor '%s' is corrupt: the digest64 of its %zu bytes is %s, the %s recorded %s "
                     "(the file changed after it was written)",
                     path, t->name, t->nbytes, have, what, want);
            rc = -1;
        }
    }
    json_decref(digests);
    return rc;
}

// Every metadata entry of f against "metadata_digests" (checkpoint.h); `what` names the
// file in the message. 1 (all verified), 0 (the file has none: written before they
// existed), or -1 with err naming the entry that changed, is missing, or has no checksum.
static int verify_meta_digests(const StFile *f, const char *path, const char *what, char *err, size_t errlen) {
    const char *dj = st_meta(f, CKPT_META_DIGESTS);
    if (!dj) return 0;
    json_t *digests = json_loads(dj, 0, NULL);
    int rc = 1;
    if (!json_is_object(digests)) {
        snprintf(err, errlen, "%s: metadata '%s' is not a JSON object: the file is damaged", path, CKPT_META_DIGESTS);
        rc = -1;
    }
    for (int i = 0; rc == 1 && i < f->n_meta; i++) {
        const char *key = f->meta_keys[i], *val = f->meta_vals[i];
        if (!strcmp(key, CKPT_META_DIGESTS)) continue;
        const char *want = json_string_value(json_object_get(digests, key));
        char have[17], q[64];
        quoted(val, q, sizeof q);
        if (!want) {
            snprintf(err, errlen, "%s: metadata '%s' (%s) has no checksum in '%s': it was added after the %s was "
                     "written", path, key, q, CKPT_META_DIGESTS, what);
            rc = -1;
            break;
        }
        digest64_hex(digest64(val, strlen(val), 0), have);
        if (strcmp(have, want)) {
            snprintf(err, errlen, "%s: metadata '%s' is %s, changed after the %s was written: the digest64 of its %zu "
                     "bytes is %s, the %s recorded %s", path, key, q, what, strlen(val), have, what, want);
            rc = -1;
        }
    }
    const char *k;
    json_t *v;
    if (rc == 1) json_object_foreach(digests, k, v) {
        if (!st_meta(f, k)) {
            snprintf(err, errlen, "%s: metadata '%s' is missing: the %s recorded a checksum for it (removed after it "
                     "was written)", path, k, what);
            rc = -1;
            break;
        }
    }
    json_decref(digests);
    return rc;
}

void checkpoint_info_free(CkptInfo *info) {
    free(info->config);
    info->config = NULL;
}

// What checkpoint_load restores from the metadata, validated.
typedef struct {
    int64_t step, optim_t, good_steps;
    DataPos pos;
    double loss_scale;
} CkptMeta;

// The metadata's values (checkpoint.h, "Validation"): types, ranges, and consistency with
// each other, the tensors (tdt: their dtype), the checkpoint's own config and, when ds is
// given, the data. 0 with *cm filled (loss scale fields default to o's), or -1 with err
// naming the key and its value.
static int check_meta(const StFile *f, const char *path, StDtype tdt, const DataSource *ds, const Optim *o,
                      CkptMeta *cm, char *err, size_t errlen) {
    uint64_t batches, seed;
    if (meta_i64(f, path, "step", 0, ">= 0", &cm->step, err, errlen)) return -1;
    if (meta_i64(f, path, "optim_t", 0, ">= 0", &cm->optim_t, err, errlen)) return -1;
    if (cm->optim_t > cm->step) {
        snprintf(err, errlen, "%s: metadata 'optim_t' is %" PRId64 ": more than 'step' %" PRId64 " (AdamW makes at "
                 "most one update per step)", path, cm->optim_t, cm->step);
        return -1;
    }
    if (meta_u64(f, path, "data_batches", &batches, err, errlen)) return -1;
    if (batches < (uint64_t)cm->step) {
        snprintf(err, errlen, "%s: metadata 'data_batches' is %" PRIu64 ": fewer than 'step' %" PRId64 " (every step "
                 "reads at least one micro-batch)", path, batches, cm->step);
        return -1;
    }
    cm->pos.batches = batches;
    if (meta_i64(f, path, "data_shard", 0, ">= 0", &cm->pos.shard, err, errlen)) return -1;
    if (meta_i64(f, path, "data_offset", 0, ">= 0", &cm->pos.offset, err, errlen)) return -1;
    char why[512];
    int pr = ds ? data_check_pos(ds, cm->pos, why, sizeof why) : DATA_POS_OK;
    if (pr != DATA_POS_OK) {
        snprintf(err, errlen, "%s: metadata '%s' is %" PRId64 ": outside this run's data: %s", path,
                 pr == DATA_POS_SHARD ? "data_shard" : "data_offset", pr == DATA_POS_SHARD ? cm->pos.shard : cm->pos.offset,
                 why);
        return -1;
    }
    if (meta_u64(f, path, "seed", &seed, err, errlen)) return -1;
    // the checkpoint's own config: a JSON object, its digest, its seed and backend
    const char *cfg = st_meta(f, "config"), *cdig = st_meta(f, "config_digest"), *bname = st_meta(f, "backend");
    json_t *cj = cfg ? json_loads(cfg, 0, NULL) : NULL;
    int bad = 0;
    if (cfg && !json_is_object(cj)) {
        snprintf(err, errlen, "%s: metadata 'config' is not a JSON object", path);
        bad = 1;
    }
    char want[17];
    if (!bad && cfg && cdig) {
        config_digest_of(cfg, want);
        if (strcmp(cdig, want)) {
            char q[64];
            quoted(cdig, q, sizeof q);
            snprintf(err, errlen, "%s: metadata 'config_digest' is %s: the digest of metadata 'config' is %s", path, q,
                     want);
            bad = 1;
        }
    }
    const json_t *train = json_object_get(cj, "train");
    const json_t *cseed = json_object_get(train, "seed"), *cback = json_object_get(train, "backend");
    if (!bad && json_is_integer(cseed) && (uint64_t)json_integer_value(cseed) != seed) {
        snprintf(err, errlen, "%s: metadata 'seed' is %" PRIu64 ": the checkpoint's config has train.seed %lld", path,
                 seed, (long long)json_integer_value(cseed));
        bad = 1;
    }
    if (!bad && bname) {
        char q[64];
        quoted(bname, q, sizeof q);
        int known = 0;
        for (int i = 0; config_backend_at(i); i++) known |= !strcmp(bname, config_backend_at(i));
        const StDtype bdt = !strcmp(bname, "cpu64") ? ST_F64 : ST_F32;   // cpu64 keeps F64 parameters, the others F32
        bad = 1;
        if (!known) snprintf(err, errlen, "%s: metadata 'backend' is %s: not a backend (cpu, cpu64, cuda)", path, q);
        else if (json_is_string(cback) && strcmp(json_string_value(cback), bname))
            snprintf(err, errlen, "%s: metadata 'backend' is %s: the checkpoint's config has train.backend \"%s\"", path,
                     q, json_string_value(cback));
        else if (bdt != tdt)
            snprintf(err, errlen, "%s: metadata 'backend' is %s: its tensors are %s (%s writes %s)", path, q,
                     st_dtype_name(tdt), bname, st_dtype_name(bdt));
        else bad = 0;
    }
    json_decref(cj);
    if (bad) return -1;
    // fp16 dynamic loss scaling (absent from older checkpoints: o's values stay)
    cm->loss_scale = o->loss_scale;
    cm->good_steps = o->good_steps;
    const char *ls = st_meta(f, "loss_scale");
    if (ls) {
        char *end = NULL, q[64];
        errno = 0;
        double x = strtod(ls, &end);
        if (end == ls || *end || errno == ERANGE || !(x >= 1.0 && x <= OPTIM_SCALE_MAX)) {
            quoted(ls, q, sizeof q);
            snprintf(err, errlen, "%s: metadata 'loss_scale' is %s: must be a number in [1, %.0f]", path, q,
                     OPTIM_SCALE_MAX);
            return -1;
        }
        cm->loss_scale = x;
        if (meta_i64(f, path, "loss_scale_good_steps", 0, ">= 0", &cm->good_steps, err, errlen)) return -1;
        if (cm->good_steps > cm->optim_t) {
            snprintf(err, errlen, "%s: metadata 'loss_scale_good_steps' is %" PRId64 ": more than 'optim_t' %" PRId64
                     " (it counts updates)", path, cm->good_steps, cm->optim_t);
            return -1;
        }
    }
    return 0;
}

int checkpoint_load(const char *path, Model *m, Optim *o, const DataSource *ds, CkptInfo *info, char *err,
                    size_t errlen) {
    const Backend *be = m->be;
    memset(info, 0, sizeof *info);
    StFile f;
    if (st_read(&f, path, err, errlen)) return -1;
    int rc = -1;
    const char *fmt = st_meta(&f, "format");
    if (!fmt || strcmp(fmt, CKPT_FORMAT)) {
        snprintf(err, errlen, "%s: not an nsa-harness checkpoint (metadata format = %s)", path, fmt ? fmt : "absent");
        goto done;
    }
    // 0. the metadata is what was written (checkpoint.h): before any of it is used
    int mr = verify_meta_digests(&f, path, "checkpoint", err, errlen);
    if (mr < 0) goto done;
    info->meta_checksums = mr;
    const char *ck_cfg = st_meta(&f, "config");
    // 1. every tensor this model needs is there, with its shape and dtype
    char name[128];
    for (int pass = 0; pass < 3; pass++) {
        for (int i = 0; i < m->n_params; i++) {
            const ParamInfo *p = &m->params[i];
            tensor_name(name, sizeof name, pass, p->name);
            const StTensor *t = st_find(&f, name);
            char hint[1024];
            if (!t) {
                diff_hint(ck_cfg, &m->cfg, hint, sizeof hint);
                snprintf(err, errlen, "%s: tensor '%s' missing%s", path, name, hint);
                goto done;
            }
            int same = t->dtype == param_dtype(m) && t->ndim == p->ndim && t->shape[0] == p->shape[0] &&
                       (p->ndim < 2 || t->shape[1] == p->shape[1]);
            if (!same) {
                diff_hint(ck_cfg, &m->cfg, hint, sizeof hint);
                snprintf(err, errlen, "%s: tensor '%s' is %s [%lld%s%lld], this model needs %s [%lld%s%lld]%s", path,
                         name, st_dtype_name(t->dtype), (long long)t->shape[0], t->ndim > 1 ? "," : "",
                         t->ndim > 1 ? (long long)t->shape[1] : 0LL, st_dtype_name(param_dtype(m)),
                         (long long)p->shape[0], p->ndim > 1 ? "," : "", p->ndim > 1 ? (long long)p->shape[1] : 0LL,
                         hint);
                goto done;
            }
        }
    }
    // 2. every tensor's bytes are the bytes that were written (checkpoint.h)
    int vr = verify_digests(&f, path, "checkpoint", err, errlen);
    if (vr < 0) goto done;
    info->checksums = vr;
    // 3. the metadata's values (checkpoint.h, "Validation")
    CkptMeta cm;
    if (check_meta(&f, path, param_dtype(m), ds, o, &cm, err, errlen)) goto done;
    info->step = cm.step;
    info->pos = cm.pos;
    // 4. everything checked: restore
    for (int pass = 0; pass < 3; pass++) {
        void *base = pass == 0 ? m->param_mem : pass == 1 ? o->m_mem : o->v_mem;
        for (int i = 0; i < m->n_params; i++) {
            const ParamInfo *p = &m->params[i];
            tensor_name(name, sizeof name, pass, p->name);
            const StTensor *t = st_find(&f, name);
            be->from_host((char *)base + p->offset * be->param_bytes, t->data, t->nbytes);
        }
    }
    model_params_changed(m);
    o->t = cm.optim_t;
    o->loss_scale = cm.loss_scale;
    o->good_steps = cm.good_steps;
    const char *dg = st_meta(&f, "config_digest");
    snprintf(info->digest, sizeof info->digest, "%s", dg ? dg : "");
    if (ck_cfg) info->config = xstrdup(ck_cfg);
    rc = 0;
done:
    st_free(&f);
    return rc;
}

// ---- start weights: --write-init / --init-weights -------------------------------------------

int checkpoint_write_weights(const char *path, const Model *m, char *err, size_t errlen) {
    size_t bytes = (size_t)m->n_elems * m->be->param_bytes;
    char *hp = malloc(bytes);
    json_t *digests = json_object();
    if (!hp || !digests) {
        free(hp);
        json_decref(digests);
        snprintf(err, errlen, "%s: out of memory staging %zu bytes", path, bytes);
        errno = 0;
        return -1;
    }
    m->be->to_host(hp, m->param_mem, bytes);
    StFile f;
    st_init(&f);
    add_pass(&f, digests, m, hp, 0);
    char buf[64];
    char *cfg = config_to_json(&m->cfg);
    char *dig = json_dumps(digests, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(digests);
    st_add_meta(&f, "format", INIT_FORMAT);
    st_add_meta(&f, "config", cfg);
    st_add_meta(&f, "config_digest", m->cfg.digest);
    snprintf(buf, sizeof buf, "%" PRIu64, m->cfg.seed);
    st_add_meta(&f, "seed", buf);
    st_add_meta(&f, "backend", m->be->name);
    if (dig) st_add_meta(&f, CKPT_DIGESTS, dig);
    if (dig && add_meta_digests(&f)) {
        free(dig);
        dig = NULL;
    }
    int rc = dig ? st_write(&f, path, err, errlen) : -1;
    int e = dig ? errno : 0;
    if (!dig) snprintf(err, errlen, "%s: out of memory serialising the digests", path);
    free(cfg);
    free(dig);
    st_free(&f);
    free(hp);
    errno = rc ? e : 0;
    return rc;
}

// "[64,256]" / "[]"
static void shape_text(char *out, size_t n, int ndim, const int64_t *shape) {
    size_t at = (size_t)snprintf(out, n, "[");
    for (int d = 0; d < ndim && at < n; d++) at += (size_t)snprintf(out + at, n - at, "%s%lld", d ? "," : "", (long long)shape[d]);
    if (at < n) snprintf(out + at, n - at, "]");
}

int checkpoint_load_weights(const char *path, Model *m, char *err, size_t errlen) {
    StFile f;
    if (st_read(&f, path, err, errlen)) return -1;
    int rc = -1;
    double *h = NULL;
    if (verify_meta_digests(&f, path, "file", err, errlen) < 0 || verify_digests(&f, path, "file", err, errlen) < 0)
        goto done;
    // 1. every parameter there, F32 or F64, with this config's shape; nothing else there
    int64_t maxn = 1;
    for (int i = 0; i < m->n_params; i++) {
        const ParamInfo *p = &m->params[i];
        const StTensor *t = st_find(&f, p->name);
        char want[64], have[64];
        shape_text(want, sizeof want, p->ndim, p->shape);
        if (!t) {
            snprintf(err, errlen, "%s: tensor '%s' missing (this config needs it, %s)", path, p->name, want);
            goto done;
        }
        shape_text(have, sizeof have, t->ndim, t->shape);
        int same = t->ndim == p->ndim;
        for (int d = 0; same && d < p->ndim; d++) same = t->shape[d] == p->shape[d];
        if (!same) {
            snprintf(err, errlen, "%s: tensor '%s' has shape %s, this config needs %s", path, p->name, have, want);
            goto done;
        }
        if (t->dtype != ST_F32 && t->dtype != ST_F64) {
            snprintf(err, errlen, "%s: tensor '%s' is %s: expected F32 or F64", path, p->name, st_dtype_name(t->dtype));
            goto done;
        }
        if (p->numel > maxn) maxn = p->numel;
    }
    for (int i = 0; i < f.n_tensors; i++) {
        int known = 0;
        for (int k = 0; k < m->n_params && !known; k++) known = !strcmp(f.tensors[i].name, m->params[k].name);
        if (!known) {
            snprintf(err, errlen, "%s: tensor '%s' is not a parameter of this config (`nsa-harness list --tensors` "
                     "names them, as grads.<parameter>)", path, f.tensors[i].name);
            goto done;
        }
    }
    // 2. everything checked: cast to the master precision, as model_init_weights does
    h = malloc(sizeof(double) * (size_t)maxn);
    if (!h) {
        snprintf(err, errlen, "%s: out of memory", path);
        goto done;
    }
    for (int i = 0; i < m->n_params; i++) {
        const StTensor *t = st_find(&f, m->params[i].name);
        for (int64_t e = 0; e < m->params[i].numel; e++) h[e] = st_elem_f64(t, (size_t)e);
        m->be->param_from_f64(model_param_ptr(m, i), h, m->params[i].numel);
    }
    model_params_changed(m);
    rc = 0;
done:
    free(h);
    st_free(&f);
    return rc;
}
