// tests/trainer/test_golden.c — the model against golden/ tensors written by the
// independent PyTorch float64 reference (tools/reference/nsa_reference.py).
//
// For every golden/tiny_*.safetensors: build the model from the file's config, load
// its weights (params.*), run one forward + backward of its batch, and compare the
// logits, the loss and every parameter gradient with the reference:
//   err = ||ours - ref|| / max(||ref||, floor),   floor = 1e-2 * ||ref grads|| * sqrt(numel / total)
// (the floor only matters for gradients that vanish in exact arithmetic, e.g. the
// bias of the compressed keys: softmax is invariant to it; there the reference has
// ~1e-20 and fp32 ~1e-11).
// Backend: NSA_GOLDEN_BACKEND (default cpu) and NSA_GOLDEN_PRECISION. Tolerances:
//   cpu (fp32)        logits 1e-5, loss 1e-6, gradients 1e-4
//   cuda fp32         logits 1e-4, loss 1e-5, gradients 1e-3
//   cuda bf16 / fp16  logits 3e-2, loss 5e-3, gradients 1e-1 (see docs/cuda.md)
// Exit 0 pass, 1 failure, 77 when the backend is unavailable (CUDA without a GPU).
#define _POSIX_C_SOURCE 200809L   // mkstemp, fdopen
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "trainer/model.h"
#include "common/safetensors.h"

static double nrm(const double *a, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += a[i] * a[i];
    return sqrt(s);
}

static int to_f64(const StTensor *t, double *out, int64_t n) {
    int64_t have = (int64_t)(t->nbytes / st_dtype_size(t->dtype));
    if (have != n) return -1;
    for (int64_t i = 0; i < n; i++) {
        if (t->dtype == ST_F64) out[i] = ((const double *)t->data)[i];
        else if (t->dtype == ST_F32) out[i] = ((const float *)t->data)[i];
        else return -1;
    }
    return 0;
}

static int check_file(const char *path, const char *bname, const char *prec, int *nfail) {
    StFile f;
    char err[1024];
    if (st_read(&f, path, err, sizeof err)) { printf("%s\n", err); return -1; }
    const char *cj = st_meta(&f, "config");
    if (!cj) { printf("%s: no config metadata\n", path); st_free(&f); return -1; }
    char tmp[] = "/tmp/nsa_golden_cfg_XXXXXX";
    int fd = mkstemp(tmp);
    FILE *tf = fdopen(fd, "w");
    fputs(cj, tf);
    fclose(tf);
    NsaConfig cfg;
    int rc = config_load(&cfg, tmp, NULL, 0, err, sizeof err);
    remove(tmp);
    if (rc) { printf("%s: config: %s\n", path, err); st_free(&f); return -1; }
    const char *why = NULL;
    const Backend *be = backend_get(bname, prec, &why);
    if (!be) {
        printf("SKIP: backend %s%s%s: %s\n", bname, prec ? " " : "", prec ? prec : "", why ? why : "unavailable");
        st_free(&f);
        return 77;
    }
    int is_cpu = !strcmp(bname, "cpu");
    int lowp = !is_cpu && be->act_bytes == 2;
    double tl = is_cpu ? 1e-5 : lowp ? 3e-2 : 1e-4;
    double tloss = is_cpu ? 1e-6 : lowp ? 5e-3 : 1e-5;
    double tg = is_cpu ? 1e-4 : lowp ? 1e-1 : 1e-3;
    const StTensor *ti = st_find(&f, "inputs"), *tt = st_find(&f, "targets"), *tlg = st_find(&f, "logits");
    const StTensor *tls = st_find(&f, "loss");
    if (!ti || !tt || !tlg || !tls || ti->ndim != 2) { printf("%s: missing tensors\n", path); st_free(&f); return -1; }
    const int B = (int)ti->shape[0], T = (int)ti->shape[1];
    Model m;
    if (model_init(&m, &cfg, be, err, sizeof err)) { printf("%s\n", err); st_free(&f); return -1; }
    m.keep_logits = 1;
    if (model_alloc_acts(&m, B, T, err, sizeof err)) { printf("%s\n", err); st_free(&f); return -1; }
    int64_t maxn = (int64_t)B * T * m.V;
    for (int i = 0; i < m.n_params; i++) if (m.params[i].numel > maxn) maxn = m.params[i].numel;
    double *h = malloc(sizeof(double) * (size_t)maxn), *r = malloc(sizeof(double) * (size_t)maxn);
    char name[160];
    for (int i = 0; i < m.n_params; i++) {
        snprintf(name, sizeof name, "params.%s", m.params[i].name);
        const StTensor *p = st_find(&f, name);
        if (!p || to_f64(p, h, m.params[i].numel)) { printf("%s: bad %s\n", path, name); return -1; }
        be->param_from_f64(model_param_ptr(&m, i), h, m.params[i].numel);
    }
    model_params_changed(&m);
    model_zero_grad(&m);
    double loss = model_forward(&m, (const int32_t *)ti->data, (const int32_t *)tt->data, 1.0 / ((double)B * T));
    const int64_t NL = (int64_t)B * T * m.V;
    be->act_to_f64(h, m.logits, NL);
    to_f64(tlg, r, NL);
    double num = 0;
    for (int64_t i = 0; i < NL; i++) num += (h[i] - r[i]) * (h[i] - r[i]);
    double el = sqrt(num) / nrm(r, NL), rloss = ((const double *)tls->data)[0];
    double eloss = fabs(loss - rloss) / fabs(rloss);
    const char *label = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    printf("%-34s %-44s %10.3e %8.1e %s\n", label, "logits", el, tl, el <= tl ? "PASS" : "FAIL");
    printf("%-34s %-44s %10.3e %8.1e %s   (ours %.10f, reference %.10f)\n", label, "loss", eloss, tloss,
           eloss <= tloss ? "PASS" : "FAIL", loss, rloss);
    *nfail += !(el <= tl) + !(eloss <= tloss);
    if (model_backward(&m)) { printf("backward failed\n"); (*nfail)++; }
    // global gradient norm of the reference, for the floor
    double gall = 0;
    int64_t ntot = m.n_elems;
    for (int i = 0; i < m.n_params; i++) {
        snprintf(name, sizeof name, "grads.%s", m.params[i].name);
        const StTensor *g = st_find(&f, name);
        if (!g || to_f64(g, r, m.params[i].numel)) { printf("%s: bad %s\n", path, name); return -1; }
        double s = nrm(r, m.params[i].numel);
        gall += s * s;
    }
    gall = sqrt(gall);
    double worst = 0;
    const char *wn = "";
    int bad = 0;
    for (int i = 0; i < m.n_params; i++) {
        const ParamInfo *p = &m.params[i];
        snprintf(name, sizeof name, "grads.%s", p->name);
        to_f64(st_find(&f, name), r, p->numel);
        be->param_to_f64(h, model_grad_ptr(&m, i), p->numel);
        num = 0;
        for (int64_t j = 0; j < p->numel; j++) num += (h[j] - r[j]) * (h[j] - r[j]);
        double den = nrm(r, p->numel), floor_ = 1e-2 * gall * sqrt((double)p->numel / (double)ntot);
        double e = sqrt(num) / (den > floor_ ? den : floor_);
        if (!(e <= tg)) {
            bad++;
            printf("%-34s grad %-39s %10.3e %8.1e FAIL\n", label, p->name, e, tg);
        }
        if (!(e <= worst)) { worst = e; wn = p->name; }
    }
    printf("%-34s %-44s %10.3e %8.1e %s   (worst: %s; %d tensors)\n", label, "gradients (worst tensor)", worst, tg,
           bad ? "FAIL" : "PASS", wn, m.n_params);
    *nfail += bad;
    free(h);
    free(r);
    model_free(&m);
    st_free(&f);
    return 0;
}

int main(void) {
    const char *bname = getenv("NSA_GOLDEN_BACKEND");
    const char *prec = getenv("NSA_GOLDEN_PRECISION");
    if (!bname || !*bname) bname = "cpu";
    if (prec && !*prec) prec = NULL;
    const char *src = getenv("NSA_SOURCE_DIR");
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/golden", src && *src ? src : ".");
    DIR *dp = opendir(dir);
    if (!dp) { printf("SKIP: no %s directory\n", dir); return 77; }
    char *files[64];
    int nf = 0;
    struct dirent *de;
    while ((de = readdir(dp)) && nf < 64) {
        size_t n = strlen(de->d_name);
        if (strncmp(de->d_name, "tiny_", 5) || n < 12 || strcmp(de->d_name + n - 12, ".safetensors")) continue;
        files[nf] = malloc(strlen(dir) + n + 2);
        sprintf(files[nf], "%s/%s", dir, de->d_name);
        nf++;
    }
    closedir(dp);
    if (nf == 0) { printf("SKIP: no golden/tiny_*.safetensors\n"); return 77; }
    for (int i = 1; i < nf; i++)   // sorted, for a stable report
        for (int j = i; j > 0 && strcmp(files[j - 1], files[j]) > 0; j--) { char *t = files[j]; files[j] = files[j - 1]; files[j - 1] = t; }
    printf("golden check: backend %s%s%s\n", bname, prec ? " " : "", prec ? prec : "");
    int nfail = 0, files_failed = 0;
    for (int i = 0; i < nf; i++) {
        int before = nfail;
        int rc = check_file(files[i], bname, prec, &nfail);
        if (rc == 77) return 77;
        if (rc) nfail++;
        files_failed += nfail > before;
        free(files[i]);
    }
    printf("%d passed, %d failed\n", nf - files_failed, files_failed);
    return nfail ? 1 : 0;
}
