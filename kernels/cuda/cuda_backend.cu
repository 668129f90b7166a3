// kernels/cuda/cuda_backend.cu — the CUDA backend: context (device, one stream),
// memory hooks, the registries that back the low-precision weight copies and the
// fp32 statistic shadows (cuda_common.cuh), recorded op sequences (CUDA graphs: the
// generation counter, capture and replay), start-up accounting, and the three op tables
// (activations bf16 = default, fp32, fp16; parameters/gradients/AdamW state fp32).
#include <string.h>
#include <algorithm>
#include <map>
#include <string>
#include <type_traits>
#include <vector>
#include "kernels/cuda/cuda_common.cuh"
#include "common/envparse.h"

NsaCudaCtx g_nsa_cuda;

void nsa_cuda_gemm_init(void);   // cuda_gemm.cu
static void prof_configure(int on, int skip);   // the op profiler, below

void nsa_cuda_fail(const char *what, const char *detail, const char *file, int line) {
    fprintf(stderr, "%s:%d: CUDA error: %s: %s\n", file, line, what, detail);
    fflush(stderr);
    exit(1);
}

void nsa_cuda_after_launch(const char *file, int line) {
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess && !nsa_cuda_capture_error(e, "a kernel launch")) nsa_cuda_fail("kernel launch", cudaGetErrorString(e), file, line);
    if (g_nsa_cuda.sync_check) {
        e = cudaStreamSynchronize(g_nsa_cuda.stream);
        if (e != cudaSuccess) nsa_cuda_fail("kernel execution (NSA_CUDA_SYNC_CHECK)", cudaGetErrorString(e), file, line);
    }
}

// ---- recorded op sequences: capture state and generation ------------------------------------
// g_gen advances with every (re)allocation and every change of a setting or of cached state the
// ops consult (shadow validity, the attention switches): a graph captured at generation g bakes
// in pointers and decisions that are only known to hold while the generation is still g.
static uint64_t g_gen = 1;
void nsa_cuda_generation_bump(void) { g_gen++; }
static struct {
    int on;              // NSA_CUDA_GRAPH (default 1)
    int active;          // the stream is capturing for graph_begin .. graph_end
    int recording;       // between graph_begin and graph_end (active may be a throw-away capture)
    int broken;          // the current recording cannot be used: why
    char why[192];
} g_cap = {1, 0, 0, 0, ""};

// ---- lanes: independent streams (Backend.lanes_open .. lanes_join) ----------------------------
// Lane 0 is the backend's own stream; lanes 1..n-1 are streams of their own, each with its own
// scratch (nsa_cuda_scratch) and GEMM workspace (cuda_gemm.cu). lanes_fork makes every lane wait
// for what lane 0 has been given so far, lanes_join makes lane 0 wait for every lane: inside a
// recording these are the edges of a graph whose branches run side by side. A recording always
// begins and ends on lane 0 (the capture's origin).
static struct {
    int n;                                // lanes made (1: only the backend's own stream)
    int max;                              // NSA_CUDA_LANES
    int forked;                           // between lanes_fork and lanes_join
    cudaStream_t s[NSA_CUDA_MAX_LANES];   // s[0]: the backend's own stream
    cudaEvent_t ev[NSA_CUDA_MAX_LANES];   // ev[0]: the fork point; ev[l]: lane l's end at the join
    size_t asked[SCR_NSLOTS];             // lane 0's largest scratch request per slot since lanes_track
} g_lanes = {1, 8, 0, {}, {}, {}};

static void lanes_select(int l) {
    g_nsa_cuda.lane = l;
    g_nsa_cuda.stream = g_lanes.s[l];
}
// (inside a capture these only add edges; outside one they order the streams as usual. Errors
// are left to the next launch or to the capture's end, which report them.)
static void lanes_fork_edges(void) {
    (void)cudaEventRecord(g_lanes.ev[0], g_lanes.s[0]);
    for (int l = 1; l < g_lanes.n; l++) (void)cudaStreamWaitEvent(g_lanes.s[l], g_lanes.ev[0], 0);
}
static void lanes_join_edges(void) {
    for (int l = 1; l < g_lanes.n; l++) {
        (void)cudaEventRecord(g_lanes.ev[l], g_lanes.s[l]);
        (void)cudaStreamWaitEvent(g_lanes.s[0], g_lanes.ev[l], 0);
    }
}

// The stream stops capturing (what was captured is dropped) so that `what` can run; the
// recording is marked unusable. Returns 1 if a capture was paused (resume it after the call).
// With the lanes forked, they are joined first (edges only), so that the capture ends on its
// origin with nothing left unjoined.
int nsa_cuda_capture_pause(const char *what) {
    if (!g_cap.active) return 0;
    if (g_lanes.forked) lanes_join_edges();
    cudaGraph_t gr = NULL;
    cudaError_t e = cudaStreamEndCapture(g_lanes.s[0], &gr);
    if (gr) cudaGraphDestroy(gr);
    if (e != cudaSuccess) (void)cudaGetLastError();
    g_cap.active = 0;
    if (!g_cap.broken) {
        g_cap.broken = 1;
        snprintf(g_cap.why, sizeof g_cap.why, "%s while recording", what);
    }
    return 1;
}
int nsa_cuda_capture_error(cudaError_t e, const char *what) {
    if (!g_cap.recording) return 0;
    switch (e) {
    case cudaErrorStreamCaptureUnsupported: case cudaErrorStreamCaptureInvalidated: case cudaErrorStreamCaptureMerge:
    case cudaErrorStreamCaptureUnmatched: case cudaErrorStreamCaptureUnjoined: case cudaErrorStreamCaptureIsolation:
    case cudaErrorStreamCaptureImplicit: case cudaErrorCapturedEvent: case cudaErrorStreamCaptureWrongThread:
        break;
    default:
        return 0;
    }
    (void)cudaGetLastError();
    if (!g_cap.broken) {
        g_cap.broken = 1;
        snprintf(g_cap.why, sizeof g_cap.why, "%s failed while recording: %s", what, cudaGetErrorString(e));
    }
    return 1;
}

// A throw-away capture again after a paused call: the rest of the abandoned stretch is recorded
// (and dropped at graph_end), not run; forked lanes join it again.
void nsa_cuda_capture_resume(int paused) {
    if (!paused) return;
    if (cudaStreamBeginCapture(g_lanes.s[0], cudaStreamCaptureModeThreadLocal) == cudaSuccess) {
        g_cap.active = 1;
        if (g_lanes.forked) lanes_fork_edges();
    } else {
        (void)cudaGetLastError();
        nsa_cuda_fail("cudaStreamBeginCapture", "cannot resume the abandoned recording (the ops after it would run "
                      "out of order)", __FILE__, __LINE__);
    }
}

// ---- start-up accounting ------------------------------------------------------------------------
static struct {
    const char *name[16];
    double secs[16];
    int n;
} g_startup;
void nsa_cuda_startup_add(const char *name, double secs) {
    if (g_startup.n < 16) {
        g_startup.name[g_startup.n] = name;
        g_startup.secs[g_startup.n++] = secs;
    }
}

// ---- accounting ------------------------------------------------------------------------
static size_t g_in_use = 0, g_peak = 0;
static void account(int64_t delta) {
    g_in_use = (size_t)((int64_t)g_in_use + delta);
    if (g_in_use > g_peak) g_peak = g_in_use;
}
extern "C" size_t nsa_cuda_bytes_in_use(void) { return g_in_use; }
extern "C" size_t nsa_cuda_peak_bytes(void) { return g_peak; }

static void *dev_malloc(size_t bytes) {
    NsaCapturePause pause_("a device allocation");
    g_gen++;
    void *p = NULL;
    if (bytes == 0) bytes = 256;
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
        size_t fr = 0, tot = 0;
        cudaMemGetInfo(&fr, &tot);
        fprintf(stderr, "nsa cuda: out of device memory allocating %zu bytes (%.2f GiB in use by the backend, %.2f GiB free of %.2f): %s\n",
                bytes, g_in_use / 1073741824.0, fr / 1073741824.0, tot / 1073741824.0, cudaGetErrorString(e));
        exit(1);
    }
    account((int64_t)bytes);
    return p;
}
static void dev_free(void *p, size_t bytes) {
    if (!p) return;
    NsaCapturePause pause_("a device free");
    g_gen++;
    cudaCheck(cudaFree(p));
    account(-(int64_t)bytes);
}

// ---- init ----------------------------------------------------------------------------------
static int g_init_state = 0;   // 0 untried, 1 ok, -1 failed
static char g_init_why[256];

static void print_stats(void) {
    fprintf(stderr, "nsa cuda: peak device memory held by the backend %.3f GiB (%zu bytes)\n",
            g_peak / 1073741824.0, g_peak);
}

// Which of this build's code does the device run? A kernel compiled for every
// architecture of the build answers from the code the device loads: 1 the sm_90a code
// (the warpgroup-MMA kernels can run), 0 other code of the build, -1 none (the launch
// failed, *err says why: a build for other GPUs).
__global__ void k_probe_build_code(int *out) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    *out = 1;
#else
    *out = 0;
#endif
}
static int g_wgmma_avail;   // the probe's answer at init: 1 sm_90a code runs here
static int probe_build_code(cudaError_t *err) {
    int *d = NULL, h = 0;
    cudaError_t e = cudaMalloc(&d, sizeof(int));
    if (e == cudaSuccess) {
        k_probe_build_code<<<1, 1>>>(d);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess) e = cudaMemcpy(&h, d, sizeof(int), cudaMemcpyDeviceToHost);
    if (d) cudaFree(d);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();   // clear a launch error: the backend reports it instead
        *err = e;
        return -1;
    }
    return h;
}

// The backend's environment knobs (docs/cuda.md), read once at init. A knob that is set
// is a whole number in its range (NSA_CUDA_ATTN: "simple"), else init fails naming it and
// the value it got (nsa-train: exit 2); unset or empty means the default.
struct CudaKnobs {
    int device;        // NSA_CUDA_DEVICE: index of the device to use (default 0)
    int sync_check;    // NSA_CUDA_SYNC_CHECK 0/1: synchronize after every launch
    int attn_simple;   // NSA_CUDA_ATTN=simple: the simple attention kernels everywhere
    int sel_pack;      // NSA_CUDA_SEL_PACK 0/1 (default 1)
    int sel_rows;      // NSA_CUDA_SEL_ROWS -1/0/1 (default -1: by shape)
    int wgmma;         // NSA_CUDA_WGMMA 0/1 (default 1: where the device runs sm_90a code)
    int dkdv_ws;       // NSA_CUDA_DKDV_WS -1/0/1 (default -1: by head size)
    int dq_ws;         // NSA_CUDA_DQ_WS -1/0/1 (default -1: by head size)
    int fwd_ws;        // NSA_CUDA_FWD_WS -1/0/1 (default -1: by branch and head size)
    int fwd_kc128;     // NSA_CUDA_FWD_KC128 -1/0/1 (default -1: by shape)
    int fwd_pingpong;  // NSA_CUDA_FWD_PINGPONG -1/0/1 (default -1: by chunk size)
    int select_stream; // NSA_CUDA_SELECT_STREAM 0/1 (default 1: wherever it fits)
    int select_pad;    // NSA_CUDA_SELECT_PAD 0/1/2 (default 2)
    int dkdv_align;    // NSA_CUDA_DKDV_ALIGN 0/1/2 (default 1)
    int sel_dq_tma;    // NSA_CUDA_SEL_DQ_TMA -1/0/1/2 (default -1: by shape)
    int sel_tma_nst;   // NSA_CUDA_SEL_TMA_NST 2..4 (default 2)
    int dkdv_tma;      // NSA_CUDA_DKDV_TMA 0/1 (default 1)
    int rows_tma;      // NSA_CUDA_ROWS_TMA 0/1 (default 1)
    int dkdv_rt64;     // NSA_CUDA_DKDV_RT64 0/1 (default 1)
    int select_pos;    // NSA_CUDA_SELECT_POS -1/0/1 (default -1: by shape)
    int stats;         // NSA_CUDA_STATS 0/1: peak device memory at exit
    int prof, prof_skip;   // NSA_CUDA_PROFILE 0/1, NSA_CUDA_PROFILE_SKIP >= 0
    int graph;         // NSA_CUDA_GRAPH 0/1 (default 1): recorded op sequences (graph_begin)
    int lanes;         // NSA_CUDA_LANES 1..16 (default 8): the most lanes lanes_open makes (1: none)
};
static int read_knobs(CudaKnobs *k, char *err, size_t errlen) {
    *k = CudaKnobs{0, 0, 0, 1, -1, 1, -1, -1, -1, -1, -1, 1, 2, 1, -1, 2, 1, 1, 1, -1, 0, 0, 0, 1, 8};
    const struct { const char *name; long lo, hi; int *out; } ints[] = {
        {"NSA_CUDA_DEVICE", 0, 1023, &k->device},     {"NSA_CUDA_SYNC_CHECK", 0, 1, &k->sync_check},
        {"NSA_CUDA_SEL_PACK", 0, 1, &k->sel_pack},     {"NSA_CUDA_SEL_ROWS", -1, 1, &k->sel_rows},
        {"NSA_CUDA_WGMMA", 0, 1, &k->wgmma},           {"NSA_CUDA_STATS", 0, 1, &k->stats},
        {"NSA_CUDA_PROFILE", 0, 1, &k->prof},          {"NSA_CUDA_PROFILE_SKIP", 0, 1 << 30, &k->prof_skip},
        {"NSA_CUDA_GRAPH", 0, 1, &k->graph},          {"NSA_CUDA_LANES", 1, NSA_CUDA_MAX_LANES, &k->lanes},
        {"NSA_CUDA_DKDV_WS", -1, 1, &k->dkdv_ws},      {"NSA_CUDA_DQ_WS", -1, 1, &k->dq_ws},
        {"NSA_CUDA_FWD_WS", -1, 1, &k->fwd_ws},         {"NSA_CUDA_SELECT_STREAM", 0, 1, &k->select_stream},
        {"NSA_CUDA_SELECT_PAD", 0, 2, &k->select_pad},   {"NSA_CUDA_DKDV_ALIGN", 0, 2, &k->dkdv_align},
        {"NSA_CUDA_SEL_DQ_TMA", -1, 2, &k->sel_dq_tma},   {"NSA_CUDA_SEL_TMA_NST", 2, 4, &k->sel_tma_nst},
        {"NSA_CUDA_DKDV_TMA", 0, 1, &k->dkdv_tma},       {"NSA_CUDA_ROWS_TMA", 0, 1, &k->rows_tma},
        {"NSA_CUDA_DKDV_RT64", 0, 1, &k->dkdv_rt64},     {"NSA_CUDA_SELECT_POS", -1, 1, &k->select_pos},
        {"NSA_CUDA_FWD_KC128", -1, 1, &k->fwd_kc128},   {"NSA_CUDA_FWD_PINGPONG", -1, 1, &k->fwd_pingpong},
    };
    for (const auto &v : ints)
        if (nsa_env_int(v.name, v.lo, v.hi, v.out, err, errlen) < 0) return -1;
    const char *ai = getenv("NSA_CUDA_ATTN");
    if (ai && *ai) {
        if (strcmp(ai, "simple")) {
            snprintf(err, errlen, "NSA_CUDA_ATTN=%s: expected simple (or unset: the tensor-core kernels)", ai);
            return -1;
        }
        k->attn_simple = 1;
    }
    return 0;
}

// Start-up accounting: each part of the start below is timed (NSA_TRAIN_TIMING reports them
// through Backend.startup_times): the driver's first call (device count), the context
// (cudaSetDevice + cudaFree(0): the primary context is created here, not at some later first
// call), the stream and the attributes, the first kernel launch (the build-code probe: its
// module loaded, launched, read back), and cuda_gemm.cu's cuBLASLt load, handle and workspace.
extern "C" int nsa_cuda_init(const char **why) {
    if (g_init_state == 0) {
        CudaKnobs k;
        int count = 0;
        cudaError_t e = cudaSuccess;
        double t = nsa_cuda_now();
        if (read_knobs(&k, g_init_why, sizeof g_init_why)) {
            g_init_state = -1;
        } else if ((e = cudaGetDeviceCount(&count)) != cudaSuccess || count == 0) {
            snprintf(g_init_why, sizeof g_init_why, "no usable CUDA device (%s)",
                     e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
            g_init_state = -1;
        } else if (k.device >= count) {
            snprintf(g_init_why, sizeof g_init_why, "NSA_CUDA_DEVICE=%d: this machine shows %d CUDA device%s (0..%d)",
                     k.device, count, count == 1 ? "" : "s", count - 1);
            g_init_state = -1;
        } else {
            double t1 = nsa_cuda_now();
            nsa_cuda_startup_add("driver (device count)", t1 - t);
            t = t1;
            g_nsa_cuda.device = k.device;
            e = cudaSetDevice(g_nsa_cuda.device);
            if (e == cudaSuccess) e = cudaFree(0);   // the primary context, created now
            t1 = nsa_cuda_now();
            nsa_cuda_startup_add("CUDA context", t1 - t);
            t = t1;
            if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&g_nsa_cuda.stream, cudaStreamNonBlocking);
            if (e != cudaSuccess) {
                snprintf(g_init_why, sizeof g_init_why, "no usable CUDA device (%s)", cudaGetErrorString(e));
                g_init_state = -1;
            } else {
                // one attribute, not cudaGetDeviceProperties (which queries every property);
                // the name and compute capability only where the probe below fails
                int sms = 0;
                cudaCheck(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, g_nsa_cuda.device));
                g_nsa_cuda.sms = sms;
                g_nsa_cuda.sync_check = k.sync_check;
                g_nsa_cuda.attn_impl = k.attn_simple;
                g_nsa_cuda.sel_pack = k.sel_pack;
                g_nsa_cuda.sel_rows = k.sel_rows;
                g_nsa_cuda.dkdv_ws = k.dkdv_ws;
                g_nsa_cuda.dq_ws = k.dq_ws;
                g_nsa_cuda.fwd_ws = k.fwd_ws;
                g_nsa_cuda.fwd_kc128 = k.fwd_kc128;
                g_nsa_cuda.fwd_pingpong = k.fwd_pingpong;
                g_nsa_cuda.select_stream = k.select_stream;
                g_nsa_cuda.select_pad = k.select_pad;
                g_nsa_cuda.dkdv_align = k.dkdv_align;
                g_nsa_cuda.sel_dq_tma = k.sel_dq_tma;
                g_nsa_cuda.sel_tma_nst = k.sel_tma_nst;
                g_nsa_cuda.dkdv_tma = k.dkdv_tma;
                g_nsa_cuda.rows_tma = k.rows_tma;
                g_nsa_cuda.dkdv_rt64 = k.dkdv_rt64;
                g_nsa_cuda.select_pos = k.select_pos;
                g_cap.on = k.graph;
                g_lanes.s[0] = g_nsa_cuda.stream;
                g_lanes.max = k.lanes;
                t1 = nsa_cuda_now();
                nsa_cuda_startup_add("stream, attributes", t1 - t);
                t = t1;
                cudaError_t pe = cudaSuccess;
                const int code = probe_build_code(&pe);
                t1 = nsa_cuda_now();
                nsa_cuda_startup_add("first kernel launch (probe)", t1 - t);
                t = t1;
                if (code < 0) {
                    cudaDeviceProp p;
                    cudaCheck(cudaGetDeviceProperties(&p, g_nsa_cuda.device));
                    snprintf(g_init_why, sizeof g_init_why,
                             "this build has no code that %.96s (sm_%d%d) runs (%.60s): configure with "
                             "-DCMAKE_CUDA_ARCHITECTURES=%d%d%s",
                             p.name, p.major, p.minor, cudaGetErrorString(pe), p.major, p.minor,
                             p.major == 9 && p.minor == 0 ? "a" : "");
                    g_init_state = -1;
                } else {
                    g_wgmma_avail = code;
                    g_nsa_cuda.wgmma = k.wgmma && code;
                    nsa_cuda_gemm_init();   // adds its own parts (cuBLASLt load, handle, workspace)
                    if (k.stats) atexit(print_stats);
                    prof_configure(k.prof, k.prof_skip);
                    g_init_state = 1;
                }
            }
        }
    }
    if (g_init_state < 0 && why) *why = g_init_why;
    return g_init_state > 0;
}

// (each switch changes which kernels the ops launch: a recording made before is stale)
extern "C" void nsa_cuda_set_attn_impl(int impl) { g_nsa_cuda.attn_impl = impl; g_gen++; }
extern "C" int nsa_cuda_get_attn_impl(void) { return g_nsa_cuda.attn_impl; }
extern "C" void nsa_cuda_set_sel_pack(int on) { g_nsa_cuda.sel_pack = on; g_gen++; }
extern "C" void nsa_cuda_set_sel_rows(int mode) { g_nsa_cuda.sel_rows = mode < 0 ? -1 : mode > 0; g_gen++; }
extern "C" void nsa_cuda_set_dq_ws(int mode) { g_nsa_cuda.dq_ws = mode < 0 ? -1 : mode > 0; g_gen++; }
extern "C" void nsa_cuda_set_select_stream(int on) { g_nsa_cuda.select_stream = on != 0; g_gen++; }
extern "C" void nsa_cuda_set_select_pos(int mode) { g_nsa_cuda.select_pos = mode < 0 ? -1 : mode != 0; g_gen++; }
extern "C" void nsa_cuda_set_select_pad(int mode) { g_nsa_cuda.select_pad = mode < 0 ? 0 : mode > 2 ? 2 : mode; g_gen++; }
extern "C" void nsa_cuda_set_dkdv_align(int mode) { g_nsa_cuda.dkdv_align = mode < 0 ? 0 : mode > 2 ? 2 : mode; g_gen++; }
extern "C" void nsa_cuda_set_sel_dq_tma(int nw) { g_nsa_cuda.sel_dq_tma = nw < -1 ? -1 : nw > 2 ? 2 : nw; g_gen++; }
extern "C" void nsa_cuda_set_dkdv_tma(int on) { g_nsa_cuda.dkdv_tma = on != 0; g_gen++; }
extern "C" void nsa_cuda_set_rows_tma(int on) { g_nsa_cuda.rows_tma = on != 0; g_gen++; }
extern "C" void nsa_cuda_set_fwd_kc128(int mode) { g_nsa_cuda.fwd_kc128 = mode < 0 ? -1 : mode != 0; g_gen++; }
extern "C" void nsa_cuda_set_fwd_pingpong(int mode) { g_nsa_cuda.fwd_pingpong = mode < 0 ? -1 : mode != 0; g_gen++; }
extern "C" void nsa_cuda_set_dkdv_rt64(int on) { g_nsa_cuda.dkdv_rt64 = on != 0; g_gen++; }
extern "C" void nsa_cuda_set_sel_tma_nst(int nst) { g_nsa_cuda.sel_tma_nst = nst < 2 ? 2 : nst > 4 ? 4 : nst; g_gen++; }
extern "C" void nsa_cuda_set_fwd_ws(int mode) { g_nsa_cuda.fwd_ws = mode < 0 ? -1 : mode > 0; g_gen++; }
extern "C" void nsa_cuda_set_dkdv_ws(int mode) { g_nsa_cuda.dkdv_ws = mode < 0 ? -1 : mode > 0; g_gen++; }
extern "C" int nsa_cuda_set_wgmma(int on) {
    g_nsa_cuda.wgmma = on && g_wgmma_avail;
    g_gen++;
    return g_nsa_cuda.wgmma;
}
extern "C" void nsa_cuda_sync(void) {
    NsaCapturePause pause_("a wait for the device");
    cudaCheck(cudaStreamSynchronize(NSA_STREAM));
}

// ---- scratch -------------------------------------------------------------------------------
// (one set of slots per lane: ops on different lanes never share a scratch buffer)
static void *g_scr[NSA_CUDA_MAX_LANES][SCR_NSLOTS];
static size_t g_scr_bytes[NSA_CUDA_MAX_LANES][SCR_NSLOTS];

static void scratch_grow(int lane, int slot, size_t bytes) {
    NsaCapturePause pause_("a scratch buffer's growth");
    size_t nb = bytes + bytes / 4 + 256;
    dev_free(g_scr[lane][slot], g_scr_bytes[lane][slot]);
    g_scr[lane][slot] = dev_malloc(nb);
    g_scr_bytes[lane][slot] = nb;
}
void *nsa_cuda_scratch(int slot, size_t bytes) {
    const int l = g_nsa_cuda.lane;
    if (l == 0 && bytes > g_lanes.asked[slot]) g_lanes.asked[slot] = bytes;
    if (!(bytes <= g_scr_bytes[l][slot] && g_scr[l][slot])) scratch_grow(l, slot, bytes);
    return g_scr[l][slot];
}

// ---- allocation registry and fp32 shadows -------------------------------------------------
struct AllocRec {
    size_t bytes;
    float *shadow;
    size_t shadow_bytes;
    bool valid;
};
static std::map<uintptr_t, AllocRec> g_allocs;

static std::map<uintptr_t, AllocRec>::iterator find_alloc(const void *p) {
    uintptr_t a = (uintptr_t)p;
    auto it = g_allocs.upper_bound(a);
    if (it == g_allocs.begin()) return g_allocs.end();
    --it;
    if (a >= it->first && a < it->first + it->second.bytes) return it;
    return g_allocs.end();
}

// (a shadow's validity decides what its readers launch: a change is a new generation)
static void invalidate(const void *p) {
    auto it = find_alloc(p);
    if (it != g_allocs.end() && it->second.valid) {
        it->second.valid = false;
        g_gen++;
    }
}

const float *nsa_cuda_stat_read(int dt, const void *p, int64_t n, int slot) {
    if (dt == NSA_DT_F32) return (const float *)p;
    auto it = find_alloc(p);
    if (it != g_allocs.end() && it->second.shadow && it->second.valid)
        return it->second.shadow + ((uintptr_t)p - it->first) / dt_bytes(dt);
    float *dst = (float *)nsa_cuda_scratch(slot, (size_t)(n > 0 ? n : 1) * 4);
    nsa_cuda_act_to_f32(dt, dst, p, n);
    return dst;
}

float *nsa_cuda_stat_write(int dt, const void *p) {
    if (dt == NSA_DT_F32) return NULL;
    auto it = find_alloc(p);
    if (it == g_allocs.end()) return NULL;
    AllocRec &r = it->second;
    if (!r.shadow) {
        r.shadow_bytes = (r.bytes / dt_bytes(dt) + 1) * 4;
        r.shadow = (float *)dev_malloc(r.shadow_bytes);
    }
    if (!r.valid) g_gen++;
    r.valid = true;
    return r.shadow + ((uintptr_t)p - it->first) / dt_bytes(dt);
}

// ---- low-precision weight copies ----------------------------------------------------------
struct WCopy {
    uintptr_t base;   // fp32 parameter buffer
    int64_t n;
    int dt;
    void *copy;       // n elements of dt
};
static std::vector<WCopy> g_wcopies;

// The trainer packs every parameter into one buffer at arbitrary element offsets, so
// a tensor's slice of the shared copy is often not 16-byte aligned, which keeps
// cuBLASLt off its fastest (TMA) kernels. A weight whose slice is misaligned gets
// its own aligned copy, keyed by (tensor start, type), kept fresh by the same hooks.
struct ACopy {
    int64_t n;
    void *ptr;
};
static std::map<std::pair<uintptr_t, int>, ACopy> g_acopies;

static WCopy *find_wcopy(const void *p, int dt) {
    uintptr_t a = (uintptr_t)p;
    for (auto &c : g_wcopies)
        if (c.dt == dt && a >= c.base && a < c.base + (uintptr_t)c.n * 4) return &c;
    return NULL;
}

const void *nsa_cuda_weight(int dt, const void *w, int64_t n, int slot) {
    if (dt == NSA_DT_F32 || !w) return w;
    WCopy *c = find_wcopy(w, dt);
    if (c) {
        int64_t off = (int64_t)(((uintptr_t)w - c->base) / 4);
        if (off + n <= c->n) {
            const char *cp = (const char *)c->copy + off * dt_bytes(dt);
            if (((uintptr_t)cp & 15) == 0) return cp;
            auto key = std::make_pair((uintptr_t)w, dt);
            auto it = g_acopies.find(key);
            if (it == g_acopies.end() || it->second.n != n) {
                // (paused as a whole: the copy must really be filled, not recorded and dropped)
                NsaCapturePause pause_("a weight's first aligned copy");
                if (it != g_acopies.end()) dev_free(it->second.ptr, (size_t)it->second.n * dt_bytes(dt));
                ACopy a = {n, dev_malloc((size_t)n * dt_bytes(dt))};
                cudaCheck(cudaMemcpyAsync(a.ptr, cp, (size_t)n * dt_bytes(dt), cudaMemcpyDeviceToDevice, NSA_STREAM));
                g_acopies[key] = a;
                return a.ptr;
            }
            return it->second.ptr;
        }
    }
    void *dst = nsa_cuda_scratch(slot, (size_t)n * dt_bytes(dt));
    nsa_cuda_f32_to_act(dt, dst, (const float *)w, n);
    return dst;
}

// A write into [p, p+bytes) of fp32 parameter memory outside adamw: refresh the
// overlapping part of every copy (robust to writers that forget params_changed).
static void refresh_copies(const void *p, size_t bytes) {
    uintptr_t a0 = (uintptr_t)p, a1 = a0 + bytes;
    for (auto &c : g_wcopies) {
        uintptr_t c1 = c.base + (uintptr_t)c.n * 4;
        uintptr_t lo = a0 > c.base ? a0 : c.base, hi = a1 < c1 ? a1 : c1;
        if (hi <= lo) continue;
        int64_t e0 = (int64_t)((lo - c.base) / 4), e1 = (int64_t)((hi - c.base + 3) / 4);
        nsa_cuda_f32_to_act(c.dt, (char *)c.copy + e0 * dt_bytes(c.dt), (const float *)(c.base + e0 * 4), e1 - e0);
    }
    for (auto &kv : g_acopies) {   // whole tensor, when any part of it was written
        uintptr_t w0 = kv.first.first, w1 = w0 + (uintptr_t)kv.second.n * 4;
        if (w1 <= a0 || w0 >= a1) continue;
        nsa_cuda_f32_to_act(kv.first.second, kv.second.ptr, (const float *)w0, kv.second.n);
    }
}

static void params_changed_dt(int dt, void *param_mem, int64_t n) {
    if (dt == NSA_DT_F32 || !param_mem) return;
    NsaCapturePause pause_("a refresh of the weight copies");
    WCopy *c = NULL;
    for (auto &x : g_wcopies)
        if (x.base == (uintptr_t)param_mem && x.dt == dt) c = &x;
    if (c && c->n != n) {
        dev_free(c->copy, (size_t)c->n * dt_bytes(dt));
        c->copy = dev_malloc((size_t)n * dt_bytes(dt));
        c->n = n;
    }
    if (!c) {
        WCopy w = {(uintptr_t)param_mem, n, dt, dev_malloc((size_t)n * dt_bytes(dt))};
        g_wcopies.push_back(w);
        c = &g_wcopies.back();
    }
    nsa_cuda_f32_to_act(dt, c->copy, (const float *)param_mem, n);
    uintptr_t a0 = (uintptr_t)param_mem, a1 = a0 + (uintptr_t)n * 4;
    for (auto &kv : g_acopies)
        if (kv.first.second == dt && kv.first.first >= a0 && kv.first.first < a1)
            nsa_cuda_f32_to_act(dt, kv.second.ptr, (const float *)kv.first.first, kv.second.n);
}

static int g_syncs = 0;   // Backend.sync calls (once per training step)

// ---- memory hooks ----------------------------------------------------------------------
static void *cu_alloc(size_t bytes) {
    NsaCapturePause pause_("a device allocation");
    size_t sz = (bytes + 255) & ~(size_t)255;
    void *p = dev_malloc(sz);
    cudaCheck(cudaMemsetAsync(p, 0, sz, NSA_STREAM));
    AllocRec r = {sz, NULL, 0, false};
    g_allocs[(uintptr_t)p] = r;
    return p;
}

static void cu_free(void *p) {
    if (!p) return;
    NsaCapturePause pause_("a device free");
    g_gen++;
    auto it = g_allocs.find((uintptr_t)p);
    size_t bytes = 0;
    if (it != g_allocs.end()) {
        bytes = it->second.bytes;
        dev_free(it->second.shadow, it->second.shadow_bytes);
        g_allocs.erase(it);
    }
    for (auto it2 = g_acopies.begin(); it2 != g_acopies.end();) {
        if (it2->first.first >= (uintptr_t)p && it2->first.first < (uintptr_t)p + (bytes ? bytes : 1)) {
            dev_free(it2->second.ptr, (size_t)it2->second.n * dt_bytes(it2->first.second));
            it2 = g_acopies.erase(it2);
        } else {
            ++it2;
        }
    }
    for (size_t i = 0; i < g_wcopies.size(); i++) {
        if (g_wcopies[i].base != (uintptr_t)p) continue;
        dev_free(g_wcopies[i].copy, (size_t)g_wcopies[i].n * dt_bytes(g_wcopies[i].dt));
        g_wcopies.erase(g_wcopies.begin() + (long)i);
        i--;
    }
    cudaCheck(cudaFree(p));
    account(-(int64_t)bytes);
}

static void cu_zero(void *p, size_t bytes) {
    if (!bytes) return;
    cudaCheck(cudaMemsetAsync(p, 0, bytes, NSA_STREAM));
    invalidate(p);
    refresh_copies(p, bytes);
}
static void cu_to_host(void *h, const void *d, size_t bytes) {
    if (!bytes) return;
    NsaCapturePause pause_("a device-to-host copy");
    cudaCheck(cudaMemcpyAsync(h, d, bytes, cudaMemcpyDeviceToHost, NSA_STREAM));
    cudaCheck(cudaStreamSynchronize(NSA_STREAM));
}
static void cu_from_host(void *d, const void *h, size_t bytes) {
    if (!bytes) return;
    NsaCapturePause pause_("a host-to-device copy");
    cudaCheck(cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, NSA_STREAM));
    cudaCheck(cudaStreamSynchronize(NSA_STREAM));
    invalidate(d);
    refresh_copies(d, bytes);
}
static void cu_copy(void *dst, const void *src, size_t bytes) {
    if (!bytes) return;
    cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, NSA_STREAM));
    invalidate(dst);
    refresh_copies(dst, bytes);
}
static void cu_sync(void) {
    NsaCapturePause pause_("a wait for the device");
    cudaCheck(cudaStreamSynchronize(NSA_STREAM));
    g_syncs++;   // the trainer syncs once per step: NSA_CUDA_PROFILE_SKIP counts these
}

// host-side element conversions
static inline double h_tod(int dt, const void *p, int64_t i) {
    if (dt == NSA_DT_F32) return ((const float *)p)[i];
    if (dt == NSA_DT_BF16) return (double)__bfloat162float(((const bf16 *)p)[i]);
    return (double)__half2float(((const f16 *)p)[i]);
}
static inline void h_fromd(int dt, void *p, int64_t i, double x) {
    if (dt == NSA_DT_F32) ((float *)p)[i] = (float)x;
    else if (dt == NSA_DT_BF16) ((bf16 *)p)[i] = __float2bfloat16_rn((float)x);
    else ((f16 *)p)[i] = __float2half_rn((float)x);
}

static void to_f64_dt(int dt, double *h, const void *d, int64_t n) {
    if (n <= 0) return;
    size_t bytes = (size_t)n * dt_bytes(dt);
    void *tmp = malloc(bytes);
    cu_to_host(tmp, d, bytes);
    for (int64_t i = 0; i < n; i++) h[i] = h_tod(dt, tmp, i);
    free(tmp);
}
static void from_f64_dt(int dt, void *d, const double *h, int64_t n) {
    if (n <= 0) return;
    size_t bytes = (size_t)n * dt_bytes(dt);
    void *tmp = malloc(bytes);
    for (int64_t i = 0; i < n; i++) h_fromd(dt, tmp, i, h[i]);
    cu_from_host(d, tmp, bytes);
    free(tmp);
}

// ---- opt-in op profiler (NSA_CUDA_PROFILE=1) ------------------------------------------------
// Every table op is bracketed by two CUDA events on the stream (no synchronisation);
// at exit the device time of each op (matmuls by shape) is summed and printed to
// stderr, largest first. Off: one branch per op.
struct ProfRec {
    cudaEvent_t a, b;
    char name[48];
};
static int g_prof = 0, g_prof_skip = 0;   // prof_configure, at init
static std::vector<ProfRec> g_prof_recs;
static std::vector<cudaEvent_t> g_prof_pool;
static cudaEvent_t prof_event(void) {
    if (g_prof_pool.empty()) {
        cudaEvent_t e;
        cudaCheck(cudaEventCreate(&e));
        return e;
    }
    cudaEvent_t e = g_prof_pool.back();
    g_prof_pool.pop_back();
    return e;
}
static void prof_report(void) {
    cudaDeviceSynchronize();
    std::map<std::string, std::pair<double, long>> acc;
    double total = 0;
    for (auto &r : g_prof_recs) {
        float ms = 0;
        if (cudaEventElapsedTime(&ms, r.a, r.b) != cudaSuccess) continue;
        auto &x = acc[r.name];
        x.first += ms;
        x.second++;
        total += ms;
    }
    std::vector<std::pair<double, std::string>> v;
    for (auto &kv : acc) v.push_back(std::make_pair(kv.second.first, kv.first));
    std::sort(v.rbegin(), v.rend());
    fprintf(stderr, "nsa cuda profile: %.1f ms of device time in %zu op calls\n", total, g_prof_recs.size());
    fprintf(stderr, "  %-44s %10s %6s %8s\n", "op", "ms", "%", "calls");
    for (auto &x : v)
        fprintf(stderr, "  %-44s %10.2f %5.1f%% %8ld\n", x.second.c_str(), x.first, 100.0 * x.first / total, acc[x.second].second);
}
struct ProfScope {
    bool on;
    ProfRec r;
    explicit ProfScope(const char *name) {
        on = g_prof == 1 && g_syncs >= g_prof_skip;
        if (!on) return;
        snprintf(r.name, sizeof r.name, "%s", name);
        r.a = prof_event();
        r.b = prof_event();
        cudaCheck(cudaEventRecord(r.a, NSA_STREAM));
    }
    ~ProfScope() {
        if (!on) return;
        cudaEventRecord(r.b, NSA_STREAM);
        g_prof_recs.push_back(r);
    }
};
#define PROF(name) ProfScope prof_scope_(name)
static void prof_configure(int on, int skip) {
    g_prof = on ? 1 : 0;
    g_prof_skip = skip;
    if (g_prof) atexit(prof_report);
}
static const char *mm_name(char *buf, size_t n, const char *op, int M, int N, int K) {
    if (g_prof != 1) return op;
    snprintf(buf, n, "%s N%d K%d%s", op, N, K, M < 4096 ? " (small M)" : "");
    return buf;
}

// ---- recorded op sequences: the Backend hooks -------------------------------------------------
// graph_begin starts a stream capture (thread-local mode: a call of this thread that cannot be
// captured fails instead of running, and every such call of ours pauses first, above);
// graph_end instantiates what was captured. A graph is only launched at the generation it was
// captured at (the model compares before launching; graph_launch checks again and stops the
// process rather than run a stale graph). Refused while NSA_CUDA_GRAPH=0, NSA_CUDA_SYNC_CHECK=1
// (a wait after every launch) or NSA_CUDA_PROFILE=1 (events around every op).
struct NsaGraph {
    cudaGraphExec_t exec;
    size_t nodes;
    uint64_t gen;
};
static int cu_graph_begin(void) {
    if (!g_cap.on || g_nsa_cuda.sync_check || g_prof || g_cap.recording || g_lanes.forked) return 0;
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(NSA_STREAM, &st) != cudaSuccess || st != cudaStreamCaptureStatusNone) {
        (void)cudaGetLastError();
        return 0;
    }
    if (cudaStreamBeginCapture(NSA_STREAM, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    g_cap.active = g_cap.recording = 1;
    g_cap.broken = 0;
    g_cap.why[0] = 0;
    return 1;
}
static void *cu_graph_end(size_t *nodes, const char **why) {
    if (nodes) *nodes = 0;
    if (why) *why = NULL;
    cudaGraph_t gr = NULL;
    if (g_lanes.forked) {   // a recording ends on its origin, every lane joined
        lanes_select(0);
        lanes_join_edges();
        g_lanes.forked = 0;
        if (!g_cap.broken) {
            g_cap.broken = 1;
            snprintf(g_cap.why, sizeof g_cap.why, "graph_end with the lanes forked (lanes_join missing)");
        }
    }
    if (g_cap.active) {
        cudaError_t e = cudaStreamEndCapture(g_lanes.s[0], &gr);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            if (!g_cap.broken) snprintf(g_cap.why, sizeof g_cap.why, "cudaStreamEndCapture: %s", cudaGetErrorString(e));
            g_cap.broken = 1;
        }
    } else if (!g_cap.recording) {
        g_cap.broken = 1;
        snprintf(g_cap.why, sizeof g_cap.why, "graph_end without graph_begin");
    }
    g_cap.active = g_cap.recording = 0;
    if (!g_cap.broken && !gr) {
        g_cap.broken = 1;
        snprintf(g_cap.why, sizeof g_cap.why, "the capture returned no graph");
    }
    if (g_cap.broken) {
        if (gr) cudaGraphDestroy(gr);
        if (why) *why = g_cap.why;
        return NULL;
    }
    size_t n = 0;
    if (cudaGraphGetNodes(gr, NULL, &n) != cudaSuccess) (void)cudaGetLastError();
    cudaGraphExec_t ex = NULL;
    cudaError_t e = cudaGraphInstantiate(&ex, gr, 0);
    cudaGraphDestroy(gr);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(g_cap.why, sizeof g_cap.why, "cudaGraphInstantiate (%zu nodes): %s", n, cudaGetErrorString(e));
        if (why) *why = g_cap.why;
        return NULL;
    }
    NsaGraph *g = new NsaGraph{ex, n, g_gen};
    if (nodes) *nodes = n;
    return g;
}
static void cu_graph_launch(void *h) {
    NsaGraph *g = (NsaGraph *)h;
    if (!g) nsa_cuda_fail("graph_launch", "NULL graph", __FILE__, __LINE__);
    if (g->gen != g_gen) {
        char msg[160];
        snprintf(msg, sizeof msg, "a graph captured at generation %llu launched at generation %llu (stale: the caller "
                 "must capture again)", (unsigned long long)g->gen, (unsigned long long)g_gen);
        nsa_cuda_fail("graph_launch", msg, __FILE__, __LINE__);
    }
    cudaCheck(cudaGraphLaunch(g->exec, NSA_STREAM));
    CUDA_LAUNCHED();
}
static void cu_graph_free(void *h) {
    NsaGraph *g = (NsaGraph *)h;
    if (!g) return;
    if (!g_cap.active) cudaCheck(cudaStreamSynchronize(NSA_STREAM));   // a launch may be in flight
    cudaCheck(cudaGraphExecDestroy(g->exec));
    delete g;
}
static uint64_t cu_generation(void) { return g_gen; }

// ---- lanes: the Backend hooks -------------------------------------------------------------------
static void cu_lanes_track(void) { memset(g_lanes.asked, 0, sizeof g_lanes.asked); }
static int cu_lanes_open(int n) {
    if (n > g_lanes.max) n = g_lanes.max;
    if (n < 1 || g_cap.recording || g_lanes.forked || g_nsa_cuda.sync_check || g_prof) return g_lanes.n;
    for (int l = g_lanes.n; l < n; l++) {   // (never while recording: refused above)
        cudaCheck(cudaStreamCreateWithFlags(&g_lanes.s[l], cudaStreamNonBlocking));
        cudaCheck(cudaEventCreateWithFlags(&g_lanes.ev[l], cudaEventDisableTiming));
    }
    if (!g_lanes.ev[0]) cudaCheck(cudaEventCreateWithFlags(&g_lanes.ev[0], cudaEventDisableTiming));
    if (n > g_lanes.n) {
        g_lanes.n = n;
        g_gen++;
    }
    if (nsa_cuda_gemm_lanes(g_lanes.n)) g_gen++;
    for (int l = 1; l < g_lanes.n; l++)
        for (int slot = 0; slot < SCR_NSLOTS; slot++)
            if (g_lanes.asked[slot] && g_scr_bytes[l][slot] < g_lanes.asked[slot]) scratch_grow(l, slot, g_lanes.asked[slot]);
    cu_lanes_track();
    return g_lanes.n;
}
static void cu_lanes_fork(void) {
    if (g_lanes.n <= 1) return;
    if (g_lanes.forked) nsa_cuda_fail("lanes_fork", "the lanes are forked already (lanes_join missing)", __FILE__, __LINE__);
    lanes_fork_edges();
    g_lanes.forked = 1;
}
static void cu_lane_use(int l) {
    if (l == g_nsa_cuda.lane) return;
    if (!g_lanes.forked || l < 0 || l >= g_lanes.n) {
        char msg[128];
        snprintf(msg, sizeof msg, "lane %d of %d%s", l, g_lanes.n, g_lanes.forked ? "" : " outside lanes_fork .. lanes_join");
        nsa_cuda_fail("lane_use", msg, __FILE__, __LINE__);
    }
    lanes_select(l);
}
static void cu_lanes_join(void) {
    if (!g_lanes.forked) return;
    lanes_select(0);
    lanes_join_edges();
    g_lanes.forked = 0;
}

// the start-up parts measured at init, then the GEMM plans made so far (count, host time)
static int cu_startup_times(const char **names, double *secs, int max) {
    int n = 0;
    for (int i = 0; i < g_startup.n && n < max; i++, n++) {
        names[n] = g_startup.name[i];
        secs[n] = g_startup.secs[i];
    }
    static char plans_name[48];
    int np = 0;
    double ps = 0;
    nsa_cuda_gemm_plan_stats(&np, &ps);
    if (n < max) {
        snprintf(plans_name, sizeof plans_name, "cuBLASLt plans (%d made)", np);
        names[n] = plans_name;
        secs[n++] = ps;
    }
    return n;
}

// ---- the op tables ---------------------------------------------------------------------
// Most entries of a Backend table are a launcher of cuda_launch.h with the activation type
// bound as its first argument: bound<launcher, name, DT>, inside a profiling scope
// (NSA_CUDA_PROFILE) named `name`, or none where name is NULL.
template <typename Sig> struct Binder;
template <typename R, typename... A> struct Binder<R(int, A...)> {
    template <R (*Fn)(int, A...), const char *Name, int DT> static R call(A... args) {
        if constexpr (Name == nullptr) {
            return Fn(DT, args...);
        } else {
            PROF(Name);
            return Fn(DT, args...);
        }
    }
};
template <auto Fn, const char *Name, int DT>
constexpr auto bound = &Binder<std::remove_pointer_t<decltype(Fn)>>::template call<Fn, Name, DT>;
// the profiled launchers: Backend field, launcher, profile name
#define NSA_CUDA_PROFILED_OPS(X)                                     \
    X(embedding_fwd, nsa_cuda_embedding_fwd, embedding_fwd)          \
    X(embedding_bwd, nsa_cuda_embedding_bwd, embedding_bwd)          \
    X(rmsnorm_fwd, nsa_cuda_rmsnorm_fwd, rmsnorm_fwd)                \
    X(rmsnorm_bwd, nsa_cuda_rmsnorm_bwd, rmsnorm_bwd)                \
    X(rope_fwd, nsa_cuda_rope_fwd, rope_fwd)                         \
    X(rope_bwd, nsa_cuda_rope_bwd, rope_bwd)                         \
    X(kv_split_rope_fwd, nsa_cuda_kv_split_rope_fwd, kv_split_rope)  \
    X(kv_gather_rope_bwd, nsa_cuda_kv_gather_rope_bwd, kv_gather_rope) \
    X(swiglu_fwd, nsa_cuda_swiglu_fwd, swiglu_fwd)                   \
    X(swiglu_bwd, nsa_cuda_swiglu_bwd, swiglu_bwd)                   \
    X(silu_fwd, nsa_cuda_silu_fwd, silu_fwd)                         \
    X(silu_bwd, nsa_cuda_silu_bwd, silu_bwd)                         \
    X(add, nsa_cuda_add, add)                                        \
    X(add_inplace, nsa_cuda_add_inplace, add_inplace)                \
    X(xent_fwd_bwd, nsa_cuda_xent_fwd_bwd, xent)                     \
    X(compress_avg_fwd, nsa_cuda_compress_avg_fwd, compress_avg_fwd) \
    X(compress_avg_bwd, nsa_cuda_compress_avg_bwd, compress_avg_bwd) \
    X(block_gather_fwd, nsa_cuda_block_gather_fwd, block_gather_fwd) \
    X(block_gather_bwd, nsa_cuda_block_gather_bwd, block_gather_bwd) \
    X(cmp_attn_fwd, nsa_cuda_cmp_attn_fwd, cmp_attn_fwd)             \
    X(cmp_attn_bwd, nsa_cuda_cmp_attn_bwd, cmp_attn_bwd)             \
    X(select_blocks, nsa_cuda_select_blocks, select_blocks)          \
    X(sel_attn_fwd, nsa_cuda_sel_attn_fwd, sel_attn_fwd)             \
    X(sel_attn_bwd, nsa_cuda_sel_attn_bwd, sel_attn_bwd)             \
    X(win_attn_fwd, nsa_cuda_win_attn_fwd, win_attn_fwd)             \
    X(win_attn_bwd, nsa_cuda_win_attn_bwd, win_attn_bwd)             \
    X(gate_act_fwd, nsa_cuda_gate_act_fwd, gate_act_fwd)             \
    X(gate_act_bwd, nsa_cuda_gate_act_bwd, gate_act_bwd)             \
    X(combine_fwd, nsa_cuda_combine_fwd, combine_fwd)                \
    X(combine_bwd, nsa_cuda_combine_bwd, combine_bwd)
#define NSA_PROF_NAME(field, fn, name) static constexpr char prof_##field[] = #name;
NSA_CUDA_PROFILED_OPS(NSA_PROF_NAME)
#undef NSA_PROF_NAME

static void scale_param(void *x, double s, int64_t n) {
    nsa_cuda_scale_f32(x, s, n);
    refresh_copies(x, (size_t)n * 4);   // only matters if x is parameter memory
}
static int64_t nonfinite_param(const void *x, int64_t n) { return nsa_cuda_first_nonfinite(NSA_DT_F32, x, n); }

// the entries that do more than forward
template <int DT> struct Ops {
    static void matmul_fwd(void *out, int64_t ldo, const void *inp, int64_t ldi, const void *w, const void *bias,
                           int M, int N, int K) {
        char nb[48];
        PROF(mm_name(nb, sizeof nb, "matmul_fwd", M, N, K));
        nsa_cuda_matmul_fwd(DT, out, ldo, inp, ldi, w, bias, M, N, K);
    }
    static void matmul_bwd(void *dinp, void *dw, void *dbias, const void *dout, const void *inp, const void *w,
                           int M, int N, int K, int acc) {
        char nb[48];
        PROF(mm_name(nb, sizeof nb, "matmul_bwd", M, N, K));
        nsa_cuda_matmul_bwd(DT, dinp, dw, dbias, dout, inp, w, M, N, K, acc);
    }
    static void sumsq_params(const void *base, const int64_t *off, const int64_t *len, int n, double *out) {
        PROF("grad_sumsq");
        nsa_cuda_sumsq_many_f32(base, off, len, n, out);
    }
    // a run's weight copies: the slice of the buffer's copy, and the aligned copy when one
    // covers exactly the run
    static NsaAdamwRun adamw_run(void *base, int64_t off, int64_t n, double wd) {
        void *p = (char *)base + off * 4;
        NsaAdamwRun r = {off, n, wd, NULL, NULL};
        if constexpr (DT != NSA_DT_F32) {
            if (WCopy *c = find_wcopy(p, DT)) r.wcopy = (char *)c->copy + (((uintptr_t)p - c->base) / 4) * dt_bytes(DT);
            auto it = g_acopies.find(std::make_pair((uintptr_t)p, DT));
            if (it != g_acopies.end() && it->second.n == n) r.wcopy2 = it->second.ptr;
        }
        return r;
    }
    // the aligned copies of the other tensors inside [p, p + n) (a run over several tensors),
    // after the update
    static void adamw_refresh_acopies(const void *p, int64_t n, const void *wa) {
        if constexpr (DT != NSA_DT_F32)
            for (auto &kv : g_acopies) {
                uintptr_t w0 = kv.first.first;
                if (kv.first.second != DT || kv.second.ptr == wa) continue;
                if (w0 + (uintptr_t)kv.second.n * 4 <= (uintptr_t)p || w0 >= (uintptr_t)p + (uintptr_t)n * 4) continue;
                nsa_cuda_f32_to_act(DT, kv.second.ptr, (const float *)w0, kv.second.n);
            }
    }
    static void adamw_runs(void *p, const void *g, void *m, void *v, const int64_t *off, const int64_t *len, const double *wd,
                           int n, double lr, double b1, double b2, double bc1, double bc2, double eps) {
        PROF("adamw");
        std::vector<NsaAdamwRun> runs((size_t)n);
        for (int r = 0; r < n; r++) runs[r] = adamw_run(p, off[r], len[r], wd[r]);
        nsa_cuda_adamw_runs(p, g, m, v, runs.data(), n, lr, b1, b2, bc1, bc2, eps, DT);
        for (int r = 0; r < n; r++) adamw_refresh_acopies((char *)p + off[r] * 4, len[r], runs[r].wcopy2);
    }
    static void adamw(void *p, const void *g, void *m, void *v, int64_t n, double lr, double b1, double b2,
                      double bc1, double bc2, double eps, double wd) {
        const int64_t off = 0;
        adamw_runs(p, g, m, v, &off, &n, &wd, 1, lr, b1, b2, bc1, bc2, eps);
    }

    static void fill(Backend *b) {
        memset(b, 0, sizeof *b);
        b->name = "cuda";
        b->act_bytes = (int)dt_bytes(DT);
        b->param_bytes = 4;
        b->threads = 0;
        b->alloc = cu_alloc;
        b->free = cu_free;
        b->zero = cu_zero;
        b->to_host = cu_to_host;
        b->from_host = cu_from_host;
        b->copy = cu_copy;
        b->sync = cu_sync;
        b->mem_peak = nsa_cuda_peak_bytes;
        b->act_to_f64 = bound<to_f64_dt, nullptr, DT>;
        b->act_from_f64 = bound<from_f64_dt, nullptr, DT>;
        b->param_to_f64 = bound<to_f64_dt, nullptr, NSA_DT_F32>;
        b->param_from_f64 = bound<from_f64_dt, nullptr, NSA_DT_F32>;
        b->matmul_fwd = matmul_fwd;
        b->matmul_bwd = matmul_bwd;
        b->rope_table = bound<nsa_cuda_rope_table, nullptr, DT>;
        b->sumsq_param = nsa_cuda_sumsq_f32;
        b->sumsq_params = sumsq_params;
        b->scale_param = scale_param;
        b->first_nonfinite_act = bound<nsa_cuda_first_nonfinite, nullptr, DT>;
        b->first_nonfinite_param = nonfinite_param;
        b->adamw = adamw;
        b->adamw_runs = adamw_runs;
        b->params_changed = DT == NSA_DT_F32 ? NULL : bound<params_changed_dt, nullptr, DT>;
        b->graph_begin = cu_graph_begin;
        b->graph_end = cu_graph_end;
        b->graph_launch = cu_graph_launch;
        b->graph_free = cu_graph_free;
        b->generation = cu_generation;
        b->lanes_track = cu_lanes_track;
        b->lanes_open = cu_lanes_open;
        b->lanes_fork = cu_lanes_fork;
        b->lane_use = cu_lane_use;
        b->lanes_join = cu_lanes_join;
        b->startup_times = cu_startup_times;
#define NSA_BIND(field, fn, name) b->field = bound<fn, prof_##field, DT>;
        NSA_CUDA_PROFILED_OPS(NSA_BIND)
#undef NSA_BIND
    }
};

static Backend g_tables[3];
static int g_tables_filled = 0;

extern "C" const Backend *cuda_backend_get(const char *precision, const char **why) {
    int dt;
    if (!precision || !strcmp(precision, "bf16")) dt = NSA_DT_BF16;
    else if (!strcmp(precision, "fp32")) dt = NSA_DT_F32;
    else if (!strcmp(precision, "fp16")) dt = NSA_DT_F16;
    else {
        if (why) *why = "the CUDA backend computes in bf16 (default), fp32 or fp16";
        return NULL;
    }
    if (!nsa_cuda_init(why)) return NULL;
    if (!g_tables_filled) {
        Ops<NSA_DT_F32>::fill(&g_tables[NSA_DT_F32]);
        Ops<NSA_DT_BF16>::fill(&g_tables[NSA_DT_BF16]);
        Ops<NSA_DT_F16>::fill(&g_tables[NSA_DT_F16]);
        g_tables_filled = 1;
    }
    return &g_tables[dt];
}
