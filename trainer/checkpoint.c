// trainer/checkpoint.c — save/restore parameters, AdamW state and data position.
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainer/checkpoint.h"
#include "trainer/safetensors.h"

#define CKPT_FORMAT "nsa-harness-checkpoint-1"

static StDtype param_dtype(const Model *m) { return m->be->param_bytes == 8 ? ST_F64 : ST_F32; }

int checkpoint_save(const char *path, const Model *m, const Optim *o, int64_t step, DataPos pos,
                    char *err, size_t errlen) {
    const Backend *be = m->be;
    size_t bytes = (size_t)m->n_elems * be->param_bytes;
    // host copies of the three parameter-layout buffers (backend memory may be a GPU)
    char *hp = malloc(bytes), *hm = malloc(bytes), *hv = malloc(bytes);
    if (!hp || !hm || !hv) {
        free(hp); free(hm); free(hv);
        snprintf(err, errlen, "%s: out of memory staging %zu bytes", path, bytes);
        return -1;
    }
    be->to_host(hp, m->param_mem, bytes);
    be->to_host(hm, o->m_mem, bytes);
    be->to_host(hv, o->v_mem, bytes);
    StFile f;
    st_init(&f);
    char name[128];
    for (int pass = 0; pass < 3; pass++) {
        char *base = pass == 0 ? hp : pass == 1 ? hm : hv;
        for (int i = 0; i < m->n_params; i++) {
            const ParamInfo *p = &m->params[i];
            snprintf(name, sizeof name, "%s%s", pass == 0 ? "" : pass == 1 ? "optim.m." : "optim.v.", p->name);
            st_add(&f, name, param_dtype(m), p->ndim, p->shape, base + p->offset * be->param_bytes);
        }
    }
    char buf[64];
    char *cfg = config_to_json(&m->cfg);
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
    int rc = st_write(&f, path, err, errlen);
    free(cfg);
    st_free(&f);   // frees the writer's tables; tensor data was borrowed
    free(hp); free(hm); free(hv);
    return rc;
}

static int meta_i64(const StFile *f, const char *path, const char *key, int64_t *out, char *err, size_t errlen) {
    const char *s = st_meta(f, key);
    char *end = NULL;
    if (s) *out = strtoll(s, &end, 10);
    if (!s || !end || *end || end == s) {
        snprintf(err, errlen, "%s: metadata '%s' missing or not an integer", path, key);
        return -1;
    }
    return 0;
}

int checkpoint_load(const char *path, Model *m, Optim *o, int64_t *step, DataPos *pos,
                    char *digest_out, char *err, size_t errlen) {
    const Backend *be = m->be;
    StFile f;
    if (st_read(&f, path, err, errlen)) return -1;
    int rc = -1;
    const char *fmt = st_meta(&f, "format");
    if (!fmt || strcmp(fmt, CKPT_FORMAT)) {
        snprintf(err, errlen, "%s: not an nsa-harness checkpoint (metadata format = %s)", path, fmt ? fmt : "absent");
        goto done;
    }
    char name[128];
    for (int pass = 0; pass < 3; pass++) {
        void *base = pass == 0 ? m->param_mem : pass == 1 ? o->m_mem : o->v_mem;
        for (int i = 0; i < m->n_params; i++) {
            const ParamInfo *p = &m->params[i];
            snprintf(name, sizeof name, "%s%s", pass == 0 ? "" : pass == 1 ? "optim.m." : "optim.v.", p->name);
            const StTensor *t = st_find(&f, name);
            if (!t) { snprintf(err, errlen, "%s: tensor '%s' missing", path, name); goto done; }
            int same = t->dtype == param_dtype(m) && t->ndim == p->ndim && t->shape[0] == p->shape[0] &&
                       (p->ndim < 2 || t->shape[1] == p->shape[1]);
            if (!same) {
                snprintf(err, errlen, "%s: tensor '%s' is %s [%lld%s%lld], this model needs %s [%lld%s%lld]", path,
                         name, st_dtype_name(t->dtype), (long long)t->shape[0], t->ndim > 1 ? "," : "",
                         t->ndim > 1 ? (long long)t->shape[1] : 0LL, st_dtype_name(param_dtype(m)),
                         (long long)p->shape[0], p->ndim > 1 ? "," : "", p->ndim > 1 ? (long long)p->shape[1] : 0LL);
                goto done;
            }
            be->from_host((char *)base + p->offset * be->param_bytes, t->data, t->nbytes);
        }
    }
    int64_t v;
    if (meta_i64(&f, path, "step", step, err, errlen)) goto done;
    if (meta_i64(&f, path, "optim_t", &o->t, err, errlen)) goto done;
    if (meta_i64(&f, path, "data_batches", &v, err, errlen)) goto done;
    pos->batches = (uint64_t)v;
    if (meta_i64(&f, path, "data_shard", &pos->shard, err, errlen)) goto done;
    if (meta_i64(&f, path, "data_offset", &pos->offset, err, errlen)) goto done;
    model_params_changed(m);
    if (st_meta(&f, "loss_scale")) {   // fp16 dynamic loss scaling state
        const char *s = st_meta(&f, "loss_scale");
        char *end = NULL;
        o->loss_scale = strtod(s, &end);
        if (!end || *end || !(o->loss_scale > 0)) {
            snprintf(err, errlen, "%s: metadata 'loss_scale' is not a positive number", path);
            goto done;
        }
        if (meta_i64(&f, path, "loss_scale_good_steps", &o->good_steps, err, errlen)) goto done;
    }
    const char *dg = st_meta(&f, "config_digest");
    snprintf(digest_out, 17, "%s", dg ? dg : "");
    rc = 0;
done:
    st_free(&f);
    return rc;
}
