// common/flightrec_layout.h — the flight recorder's file layout and its readers: a fixed-size memory-mapped file per
// rank that says what the rank is doing right now and what it did last.
//
// nsa-train --flight-recorder FILE creates FILE (truncating it), reserves every
// block of it (posix_fallocate; zeros written where the filesystem cannot
// fallocate), maps it MAP_SHARED and writes the header, the magic last. Another process — the runner's watchdog, or
// `nsa-train --show-flight-recorder FILE` — maps or reads the same file while the
// rank runs, is hung, or after it died, and learns:
//   * the current state: phase, step, layer, op, collective sequence numbers,
//     and heartbeat_ns, the CLOCK_MONOTONIC time of the last recorded event.
//     CLOCK_MONOTONIC is system-wide, so a reader on the same host compares it
//     with its own clock: a heartbeat that stops advancing means the main thread
//     stopped recording (hung, or dead). There is deliberately no background
//     thread that touches the heartbeat: a hung main thread stops it.
//   * whether the rank exited normally (exited = 1, exit_code) or died by a
//     signal the crash handler saw (fatal_signal).
//   * a ring of the last FR_RING events (oldest overwritten first).
//
// This header is self-contained (only <stdint.h> and <stddef.h>) so that the
// runner includes it as is; the writer is trainer/flightrec.{h,c}. It needs GCC or Clang (__atomic builtins).
//
// File layout (little-endian, native alignment, version FR_VERSION):
//   offset 0                FrHeader (FR_HEADER_BYTES = 256 bytes)
//   offset header_bytes     FrEvent ring[ring_len] (event_bytes = 64 each)
//   file_bytes = header_bytes + ring_len * event_bytes
// Event i (0-based, i < state.n_events) lives in ring slot i % ring_len; the
// newest is i = n_events - 1.
//
// Full disks: the file's blocks are allocated BEFORE it is mapped and
// BEFORE the header and magic are written, and the file only reaches its full
// size once they all are (posix_fallocate extends the size after allocating; the
// zero-writing fallback grows it write by write). So a reader that maps the file
// with its current st_size and sees the magic has mapped a fully allocated file:
// its loads cannot fault, not even on a full tmpfs (where a load from a hole of a
// sparse file allocates a page, and on a full filesystem that is SIGBUS). A reader
// that maps a file of st_size < FR_HEADER_BYTES, or sees no magic, treats it as
// "not (yet) a recorder" and must not map beyond st_size. Keep this order: reserve
// everything, then write the header, the magic last. If the blocks cannot be
// reserved (ENOSPC), flightrec_open fails (nsa-train: [IO-ERROR] and exit 6,
// trainer/ioerr.h), leaving an empty file; after a successful open, recording is
// stores into reserved pages and cannot fail. Two hazards this order cannot remove
// for a reader that maps: a file truncated under its mapping (a new run opening the
// same path with O_TRUNC) faults on any filesystem, and a sparse file from an older
// trainer faults on a full tmpfs. Reading with pread(2) is immune to both (holes
// read as zeros, past EOF reads short): flightrec_show does that.
//
// Consistency (seqlock): the only writer is the rank's main thread. Around every
// update of `state` and of the ring it increments FrHeader.seq twice: odd while
// the update is in progress, even when done. A reader copies, then re-reads seq:
// equal and even => the copy is consistent, otherwise it retries. A writer that
// died (or was interrupted by a signal) mid-update leaves seq odd for good; the
// readers below then give up after FR_READ_TRIES and return 1 ("torn") with the
// best-effort copy.
#ifndef NSA_COMMON_FLIGHTREC_LAYOUT_H
#define NSA_COMMON_FLIGHTREC_LAYOUT_H
#include <stddef.h>
#include <stdint.h>

#define FR_MAGIC "NSAFLREC"     // 8 bytes, no terminating NUL in the file
#define FR_VERSION 1u
#define FR_RING 256             // events kept
#define FR_OP_LEN 32            // op / collective name, NUL-terminated, truncated
#define FR_HEADER_BYTES 256
#define FR_EVENT_BYTES 64
#define FR_FILE_BYTES (FR_HEADER_BYTES + FR_RING * FR_EVENT_BYTES)
#define FR_READ_TRIES 10000

// What the rank is doing (FrState.phase, FrEvent.phase).
enum {
    FR_PHASE_INIT = 0,      // startup: model build, weight init, checkpoint load
    FR_PHASE_DATA = 1,      // fetching a micro-batch
    FR_PHASE_FORWARD = 2,
    FR_PHASE_BACKWARD = 3,
    FR_PHASE_OPTIMIZER = 4, // grad norm, clipping, AdamW
    FR_PHASE_COMM = 5,      // a collective (data-parallel layer)
    FR_PHASE_CHECKPOINT = 6,// writing a checkpoint
    FR_PHASE_DONE = 7,      // training loop left (normal exit)
    FR_NPHASE = 8
};

// Event kinds (FrEvent.kind).
enum { FR_KIND_BEGIN = 0, FR_KIND_END = 1, FR_KIND_COLLECTIVE = 2, FR_KIND_NOTE = 3, FR_NKIND = 4 };

// Which collective counter a FR_KIND_COLLECTIVE event advanced.
enum { FR_COLL_ENQUEUED = 0, FR_COLL_STARTED = 1, FR_COLL_COMPLETED = 2 };

// The current state: everything here is written under the seqlock.
typedef struct {
    int64_t heartbeat_ns;   // CLOCK_MONOTONIC at the last recorded event (or state update)
    int64_t step;           // optimizer step (1-based; 0 before the first)
    int64_t n_events;       // events recorded so far (monotonic)
    int64_t coll_enqueued;  // collective sequence numbers (data-parallel layer; 0 until it uses them)
    int64_t coll_started;
    int64_t coll_completed;
    int32_t layer;          // block index, -1 outside the blocks
    int32_t phase;          // FR_PHASE_*
    int32_t exited;         // 1 once the process left main normally
    int32_t exit_code;      // its exit code (valid when exited)
    int32_t fatal_signal;   // signal number the crash/stall handler saw, 0 if none
    int32_t reserved;
    char op[FR_OP_LEN];     // short op name, e.g. "layer_fwd", "adamw"
    char coll_name[FR_OP_LEN]; // last collective's name
} FrState;                  // 136 bytes

typedef struct {
    int64_t t_ns;           // CLOCK_MONOTONIC
    int64_t step;
    int64_t coll_seq;       // collective sequence number (FR_KIND_COLLECTIVE), else 0
    int32_t layer;          // -1 outside the blocks
    uint8_t phase;          // FR_PHASE_*
    uint8_t kind;           // FR_KIND_*
    uint16_t aux;           // FR_KIND_COLLECTIVE: FR_COLL_* counter; else 0
    char op[FR_OP_LEN];
} FrEvent;                  // 64 bytes

#define FR_HOST_LEN 48

typedef struct {
    char magic[8];          // FR_MAGIC, written last at creation
    uint32_t version;       // FR_VERSION
    uint32_t header_bytes;  // offset of the ring = FR_HEADER_BYTES
    uint32_t event_bytes;   // sizeof(FrEvent)
    uint32_t ring_len;      // FR_RING
    uint64_t file_bytes;    // whole file
    int32_t rank;           // --rank
    int32_t pid;
    int64_t start_unix_ns;  // CLOCK_REALTIME when the recorder was opened
    int64_t start_mono_ns;  // CLOCK_MONOTONIC at the same moment
    uint64_t seq;           // seqlock counter (odd: update in progress)
    FrState state;          // offset 64
    char host[FR_HOST_LEN]; // gethostname() of the rank, NUL-terminated, cut to fit ("" = not written:
                            // a recorder from before this field); a reader names the rank's node with it
    char reserved[FR_HEADER_BYTES - 64 - sizeof(FrState) - FR_HOST_LEN];
} FrHeader;

#ifndef __cplusplus
_Static_assert(sizeof(FrState) == 136, "FrState layout");
_Static_assert(sizeof(FrEvent) == FR_EVENT_BYTES, "FrEvent layout");
_Static_assert(sizeof(FrHeader) == FR_HEADER_BYTES, "FrHeader layout");
_Static_assert(offsetof(FrHeader, state) == 64, "FrHeader.state offset");
#endif

static inline const char *fr_phase_name(int phase) {
    static const char *names[FR_NPHASE] = {"init", "data", "forward", "backward",
                                           "optimizer", "comm", "checkpoint", "done"};
    return phase >= 0 && phase < FR_NPHASE ? names[phase] : "?";
}
static inline const char *fr_kind_name(int kind) {
    static const char *names[FR_NKIND] = {"begin", "end", "collective", "note"};
    return kind >= 0 && kind < FR_NKIND ? names[kind] : "?";
}

// The ring of a mapped file (the events follow the header).
static inline const volatile FrEvent *fr_ring(const volatile FrHeader *h) {
    return (const volatile FrEvent *)((const volatile char *)h + h->header_bytes);
}

// 0 if `h` (at least `bytes` long) is a flight recorder this header can read.
static inline int fr_check_header(const volatile FrHeader *h, size_t bytes) {
    if (bytes < FR_HEADER_BYTES) return -1;
    for (int i = 0; i < 8; i++)
        if (h->magic[i] != FR_MAGIC[i]) return -1;
    if (h->version != FR_VERSION || h->header_bytes != FR_HEADER_BYTES || h->event_bytes != FR_EVENT_BYTES ||
        h->ring_len == 0 || (uint64_t)bytes < h->file_bytes ||
        h->file_bytes != (uint64_t)h->header_bytes + (uint64_t)h->ring_len * h->event_bytes)
        return -1;
    return 0;
}

// volatile byte copy (the other side may be writing)
static inline void fr_copy_(void *dst, const volatile void *src, size_t n) {
    unsigned char *d = (unsigned char *)dst;
    const volatile unsigned char *s = (const volatile unsigned char *)src;
    for (size_t i = 0; i < n; i++) d[i] = s[i];
}

// Consistent copy of the current state. Returns 0, or 1 if no consistent copy
// was seen in FR_READ_TRIES attempts (writer stopped mid-update): *out then
// holds a best-effort copy.
static inline int fr_read_state(const volatile FrHeader *h, FrState *out) {
    for (int tries = 0; tries < FR_READ_TRIES; tries++) {
        uint64_t s0 = __atomic_load_n(&h->seq, __ATOMIC_ACQUIRE);
        if (s0 & 1) continue;
        fr_copy_(out, &h->state, sizeof *out);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        uint64_t s1 = __atomic_load_n(&h->seq, __ATOMIC_RELAXED);
        if (s0 == s1) return 0;
    }
    fr_copy_(out, &h->state, sizeof *out);
    return 1;
}

// The last min(max, n_events, ring_len) events, oldest first, into out[].
// *n_out receives the count; st (or NULL) the state they go with. Returns 0, or
// 1 if the copy may be torn (as fr_read_state).
static inline int fr_read_events(const volatile FrHeader *h, FrEvent *out, int max, int *n_out, FrState *st) {
    const volatile FrEvent *ring = fr_ring(h);
    const uint32_t R = h->ring_len;
    int torn = 1, n = 0;
    FrState s = {0};
    for (int tries = 0; tries < FR_READ_TRIES && torn; tries++) {
        uint64_t s0 = __atomic_load_n(&h->seq, __ATOMIC_ACQUIRE);
        if ((s0 & 1) && tries < FR_READ_TRIES - 1) continue;
        fr_copy_(&s, &h->state, sizeof s);
        int64_t total = s.n_events;
        n = (int)(total < (int64_t)R ? total : (int64_t)R);
        if (n > max) n = max;
        if (n < 0) n = 0;
        for (int i = 0; i < n; i++) {
            int64_t e = total - n + i;
            fr_copy_(&out[i], &ring[e % R], sizeof(FrEvent));
        }
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        torn = !(s0 == __atomic_load_n(&h->seq, __ATOMIC_RELAXED) && !(s0 & 1));
    }
    *n_out = n;
    if (st) *st = s;
    return torn;
}
#endif
