// trainer/flightrec.c — the writer side of the flight recorder (layout and
// readers: trainer/flightrec.h).
//
// Every update is a seqlock write section: seq becomes odd, the state (and the
// ring slot) are stored, seq becomes even. Only the main thread writes, so no
// lock is needed; a reader in another process retries while seq is odd.
// An update costs one clock_gettime(CLOCK_MONOTONIC) (vDSO, ~20 ns) and about
// twenty stores: cheap enough to record every layer of every step.
#define _POSIX_C_SOURCE 200809L   // ftruncate, posix_fallocate, pwrite, clock_gettime
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "trainer/flightrec.h"

static FrHeader *g_fr;   // NULL: recorder off


// bounded copy of a short name into a fixed field, always NUL-terminated
static void put_name(char *dst, const char *src) {
    size_t i = 0;
    if (src)
        for (; i < FR_OP_LEN - 1 && src[i]; i++) dst[i] = src[i];
    for (; i < FR_OP_LEN; i++) dst[i] = 0;
}

static void seq_begin(FrHeader *h) {
    __atomic_store_n(&h->seq, h->seq + 1, __ATOMIC_RELAXED);   // odd: in progress
    __atomic_thread_fence(__ATOMIC_RELEASE);
}
static void seq_end(FrHeader *h) {
    __atomic_store_n(&h->seq, h->seq + 1, __ATOMIC_RELEASE);   // even: consistent
}

int fr_reserve_file(int fd, uint64_t bytes, int try_fallocate) {
    if (try_fallocate) {
        int e = posix_fallocate(fd, 0, (off_t)bytes);   // returns the error, errno untouched
        if (e == 0) return 0;
        // EOPNOTSUPP (EINVAL from older C libraries, ENOSYS without the call): the
        // filesystem cannot allocate ahead; write the zeros instead. Anything else
        // (ENOSPC, EDQUOT, EIO, EFBIG) is the answer.
        if (e != EOPNOTSUPP && e != EINVAL && e != ENOSYS) return e;
    }
    static const char zeros[4096];
    uint64_t done = 0;
    while (done < bytes) {
        size_t n = bytes - done < sizeof zeros ? (size_t)(bytes - done) : sizeof zeros;
        ssize_t k = pwrite(fd, zeros, n, (off_t)done);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return k < 0 ? errno : EIO;
        done += (uint64_t)k;
    }
    return 0;
}

int flightrec_open(const char *path, int rank, char *err, size_t errlen) {
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        int e = errno;
        snprintf(err, errlen, "%s: %s", path, strerror(e));
        errno = e;
        return -1;
    }
    // Every block of the file is allocated before it is mapped: a store to (or, on
    // tmpfs, even a load from) a page of a sparse file allocates that page, and on
    // a full filesystem the fault is SIGBUS — in this process, or in the runner
    // that maps the file to read the header. The reservation fails here with
    // ENOSPC instead, and the file is left empty (a reader sees "not a recorder").
    int e = fr_reserve_file(fd, FR_FILE_BYTES, 1);
    if (e) {
        snprintf(err, errlen, "%s: cannot reserve its %d bytes: %s", path, FR_FILE_BYTES, strerror(e));
        if (ftruncate(fd, 0)) { /* best effort: give the blocks back */ }
        close(fd);
        errno = e;
        return -1;
    }
    void *p = mmap(NULL, FR_FILE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    e = errno;
    close(fd);   // the mapping keeps the file
    if (p == MAP_FAILED) {
        snprintf(err, errlen, "%s: mmap: %s", path, strerror(e));
        errno = e;
        return -1;
    }
    FrHeader *h = p;   // the reserved file reads as zeros; the magic goes in last
    h->version = FR_VERSION;
    h->header_bytes = FR_HEADER_BYTES;
    h->event_bytes = FR_EVENT_BYTES;
    h->ring_len = FR_RING;
    h->file_bytes = FR_FILE_BYTES;
    h->rank = rank;
    h->pid = (int32_t)getpid();
    char host[256] = "";
    if (gethostname(host, sizeof host) != 0) host[0] = 0;
    host[sizeof host - 1] = 0;
    snprintf(h->host, sizeof h->host, "%s", host);   // a long name is cut: the node stays recognisable
    struct timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    h->start_unix_ns = (int64_t)rt.tv_sec * 1000000000 + rt.tv_nsec;
    h->start_mono_ns = (int64_t)mono_ns();
    h->state.heartbeat_ns = h->start_mono_ns;
    h->state.layer = -1;
    h->state.phase = FR_PHASE_INIT;
    put_name(h->state.op, "init");
    __atomic_thread_fence(__ATOMIC_RELEASE);
    memcpy(h->magic, FR_MAGIC, 8);   // last: a reader that sees the magic sees a full header
    g_fr = h;
    return 0;
}

FrHeader *flightrec_header(void) { return g_fr; }

static void set_state(FrHeader *h, int64_t now, int phase, int64_t step, int layer, const char *op) {
    h->state.heartbeat_ns = now;
    h->state.phase = phase;
    h->state.step = step;
    h->state.layer = layer;
    put_name(h->state.op, op);
}

void flightrec_event(int phase, int kind, int64_t step, int layer, const char *op) {
    FrHeader *h = g_fr;
    if (!h) return;
    int64_t now = (int64_t)mono_ns();
    seq_begin(h);
    FrEvent *e = (FrEvent *)((char *)h + FR_HEADER_BYTES) + h->state.n_events % FR_RING;
    e->t_ns = now;
    e->step = step;
    e->coll_seq = 0;
    e->layer = layer;
    e->phase = (uint8_t)phase;
    e->kind = (uint8_t)kind;
    e->aux = 0;
    put_name(e->op, op);
    h->state.n_events++;
    set_state(h, now, phase, step, layer, op);
    seq_end(h);
}

void flightrec_state(int phase, int64_t step, int layer, const char *op) {
    FrHeader *h = g_fr;
    if (!h) return;
    int64_t now = (int64_t)mono_ns();
    seq_begin(h);
    set_state(h, now, phase, step, layer, op);
    seq_end(h);
}

void flightrec_collective(int which, int64_t seq, const char *name, int64_t step) {
    FrHeader *h = g_fr;
    if (!h) return;
    int64_t now = (int64_t)mono_ns();
    seq_begin(h);
    FrEvent *e = (FrEvent *)((char *)h + FR_HEADER_BYTES) + h->state.n_events % FR_RING;
    e->t_ns = now;
    e->step = step;
    e->coll_seq = seq;
    e->layer = -1;
    e->phase = FR_PHASE_COMM;
    e->kind = FR_KIND_COLLECTIVE;
    e->aux = (uint16_t)which;
    put_name(e->op, name);
    h->state.n_events++;
    if (which == FR_COLL_ENQUEUED) h->state.coll_enqueued = seq;
    else if (which == FR_COLL_STARTED) h->state.coll_started = seq;
    else h->state.coll_completed = seq;
    put_name(h->state.coll_name, name);
    h->state.heartbeat_ns = now;
    seq_end(h);
}

void flightrec_finish(int exit_code) {
    FrHeader *h = g_fr;
    if (!h) return;
    flightrec_event(FR_PHASE_DONE, FR_KIND_NOTE, h->state.step, -1, "exit");
    seq_begin(h);
    h->state.exited = 1;
    h->state.exit_code = exit_code;
    seq_end(h);
    g_fr = NULL;
    munmap(h, FR_FILE_BYTES);
}

void flightrec_note_signal(int sig) {
    // async-signal-safe: plain stores. Not inside the seqlock on purpose: the
    // signal may have interrupted a write section of this very thread.
    FrHeader *h = g_fr;
    if (h) h->state.fatal_signal = sig;
}

// ---- reader tool: nsa-train --show-flight-recorder FILE ------------------------------

static json_t *event_json(const FrEvent *e, int64_t t0) {
    json_t *o = json_object();
    json_object_set_new(o, "t_ns", json_integer(e->t_ns));
    json_object_set_new(o, "t_s", json_real((double)(e->t_ns - t0) * 1e-9));   // since the recorder opened
    json_object_set_new(o, "step", json_integer(e->step));
    json_object_set_new(o, "layer", json_integer(e->layer));
    json_object_set_new(o, "phase", json_string(fr_phase_name(e->phase)));
    json_object_set_new(o, "kind", json_string(fr_kind_name(e->kind)));
    json_object_set_new(o, "op", json_stringn(e->op, strnlen(e->op, FR_OP_LEN)));
    if (e->kind == FR_KIND_COLLECTIVE) {
        json_object_set_new(o, "coll_seq", json_integer(e->coll_seq));
        json_object_set_new(o, "coll_counter", json_string(e->aux == FR_COLL_ENQUEUED  ? "enqueued"
                                                          : e->aux == FR_COLL_STARTED ? "started"
                                                                                      : "completed"));
    }
    return o;
}

int flightrec_show(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) { nsa_log(LOG_ERROR, "--show-flight-recorder %s: %s", path, strerror(errno)); return -1; }
    struct stat sb;
    if (fstat(fd, &sb) || sb.st_size < FR_HEADER_BYTES) {
        nsa_log(LOG_ERROR, "--show-flight-recorder %s: not a flight recorder (too short)", path);
        close(fd);
        return -1;
    }
    // read(2), not mmap: reading a hole of a sparse file through read returns
    // zeros, while a load from a mapped hole allocates a page on tmpfs and is
    // SIGBUS when the filesystem is full (a recorder of an older trainer, which
    // did not reserve its blocks). A copy is as good as a mapping here: the seqlock
    // checks below still tell a torn copy of a live recorder.
    size_t bytes = (size_t)sb.st_size, got = 0;
    void *p = malloc(bytes);
    while (p && got < bytes) {
        ssize_t k = pread(fd, (char *)p + got, bytes - got, (off_t)got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        got += (size_t)k;
    }
    close(fd);
    if (!p || got < bytes) {
        nsa_log(LOG_ERROR, "--show-flight-recorder %s: cannot read it: %s", path,
                p ? "short read" : "out of memory");
        free(p);
        return -1;
    }
    const volatile FrHeader *h = p;
    if (fr_check_header(h, bytes)) {
        nsa_log(LOG_ERROR, "--show-flight-recorder %s: not a flight recorder of version %u (bad magic, version or sizes)",
                path, FR_VERSION);
        free(p);
        return -1;
    }
    FrEvent *ev = xmalloc(sizeof(FrEvent) * h->ring_len);
    FrState st;
    int n = 0;
    int torn = fr_read_events(h, ev, (int)h->ring_len, &n, &st);
    json_t *o = json_object();
    json_object_set_new(o, "version", json_integer(h->version));
    json_object_set_new(o, "rank", json_integer(h->rank));
    json_object_set_new(o, "pid", json_integer(h->pid));
    json_object_set_new(o, "host", json_stringn((const char *)h->host, strnlen((const char *)h->host, FR_HOST_LEN)));
    json_object_set_new(o, "start_unix_ns", json_integer(h->start_unix_ns));
    json_object_set_new(o, "start_mono_ns", json_integer(h->start_mono_ns));
    int64_t now = (int64_t)mono_ns();
    json_object_set_new(o, "now_mono_ns", json_integer(now));
    json_object_set_new(o, "torn", json_boolean(torn));
    json_t *s = json_object();
    json_object_set_new(s, "heartbeat_ns", json_integer(st.heartbeat_ns));
    json_object_set_new(s, "heartbeat_age_s", json_real((double)(now - st.heartbeat_ns) * 1e-9));
    json_object_set_new(s, "step", json_integer(st.step));
    json_object_set_new(s, "phase", json_string(fr_phase_name(st.phase)));
    json_object_set_new(s, "layer", json_integer(st.layer));
    json_object_set_new(s, "op", json_stringn(st.op, strnlen(st.op, FR_OP_LEN)));
    json_object_set_new(s, "n_events", json_integer(st.n_events));
    json_object_set_new(s, "coll_enqueued", json_integer(st.coll_enqueued));
    json_object_set_new(s, "coll_started", json_integer(st.coll_started));
    json_object_set_new(s, "coll_completed", json_integer(st.coll_completed));
    json_object_set_new(s, "coll_name", json_stringn(st.coll_name, strnlen(st.coll_name, FR_OP_LEN)));
    json_object_set_new(s, "exited", json_boolean(st.exited));
    json_object_set_new(s, "exit_code", json_integer(st.exit_code));
    json_object_set_new(s, "fatal_signal", json_integer(st.fatal_signal));
    json_object_set_new(o, "state", s);
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, event_json(&ev[i], h->start_mono_ns));
    json_object_set_new(o, "events", a);
    char *js = json_dumps(o, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
    puts(js);
    fflush(stdout);
    free(js);
    json_decref(o);
    free(ev);
    free(p);
    return 0;
}
