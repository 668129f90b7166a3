// trainer/rendezvous.c — the TCP rendezvous of the env and Slurm bootstraps (see
// rendezvous.h; the wire format is in docs/ddp.md, "Bootstraps").
//
// Every integer on the wire is big-endian. A frame is a 16-byte header
//   "NSAR" | u16 version (1) | u16 type | u32 seq | u32 payload length
// followed by the payload. Sockets are non-blocking; every wait is a poll(2) bounded by
// the caller's deadline (rdzv_join) or a zero-timeout poll driven by the caller
// (rdzv_ctrl_test). send() uses MSG_NOSIGNAL: a peer that went away is an error that
// names it, never a SIGPIPE.
#define _POSIX_C_SOURCE 200809L   // getaddrinfo, clock_gettime, nanosleep
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "trainer/rendezvous.h"
#include "common/exit_codes.h"
#include "common/log.h"
#include "common/util.h"

// ---- small helpers -------------------------------------------------------------------------

static void put_u16(unsigned char *p, uint32_t v) { p[0] = (unsigned char)(v >> 8); p[1] = (unsigned char)v; }
static void put_u32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24); p[1] = (unsigned char)(v >> 16); p[2] = (unsigned char)(v >> 8); p[3] = (unsigned char)v;
}
static void put_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (56 - 8 * i));
}
static uint32_t get_u16(const unsigned char *p) { return (uint32_t)p[0] << 8 | p[1]; }
static uint32_t get_u32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static uint64_t get_u64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = v << 8 | p[i];
    return v;
}

// Drop the first n bytes of a buffer (a frame that was read).
static void str_drop_front(Str *b, size_t n) {
    if (n >= b->len) { b->len = 0; return; }
    memmove(b->p, b->p + n, b->len - n);
    b->len -= n;
    b->p[b->len] = '\0';
}

typedef struct {
    int fd;
    Str in, out;             // bytes received and not yet taken; bytes queued to send
    size_t out_off;          // bytes of `out` already sent
    char addr[64];           // the peer's address (rank 0: as accepted; others: rank 0's)
    char host[RDZV_HOST_MAX + 1];
    int rank;                // -1 until its HELLO was accepted
    int local_rank, local_size;
    unsigned pid;
    int eof;                 // the peer closed its end
    int sock_errno;          // a socket error (0 none)
} Conn;

struct Rdzv {
    int rank, world, local_rank, local_size;
    char where[300];         // "ADDR:PORT" for messages
    double join_ms;
    Conn *conn;              // rank 0: [world] (conn[0] unused); others: [1], the connection to rank 0
    int n_conn;
    char (*addr)[64];        // [world] every rank's address ("" unknown)
    char (*host)[RDZV_HOST_MAX + 1];
    // the control operation in flight
    int active, phase;       // phase (rank 0): 0 collecting, 1 sending the result
    uint32_t seq;
    int op, count;
    size_t esz;              // element bytes: 8 (sum/max/min), 1 (allgather/bcast)
    void *recv;
    unsigned char *got;      // rank 0: [world] contribution received
    unsigned char *acc;      // rank 0: [world * count * esz] contributions (host values)
    size_t acc_cap;
    char err[1024];
};

static const char *op_name(int op) {
    switch (op) {
    case RDZV_OP_SUM_F64: return "sum f64";
    case RDZV_OP_MAX_I64: return "max i64";
    case RDZV_OP_MIN_I64: return "min i64";
    case RDZV_OP_ALLGATHER_U8: return "allgather";
    case RDZV_OP_BCAST_U8: return "broadcast";
    default: return "unknown";
    }
}

static size_t op_esz(int op) { return op == RDZV_OP_ALLGATHER_U8 || op == RDZV_OP_BCAST_U8 ? 1 : 8; }

// textual address of a sockaddr; IPv4-mapped IPv6 (::ffff:a.b.c.d) as a.b.c.d
static void sa_text(const struct sockaddr *sa, char *out, size_t n) {
    out[0] = 0;
    if (sa->sa_family == AF_INET) {
        inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, out, (socklen_t)n);
    } else if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr;
        static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (!memcmp(a->s6_addr, mapped, 12)) inet_ntop(AF_INET, a->s6_addr + 12, out, (socklen_t)n);
        else inet_ntop(AF_INET6, a, out, (socklen_t)n);
    }
    if (!out[0]) snprintf(out, n, "?");
}

static void set_sock_opts(int fd) {
    int one = 1;
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);   // small control messages: latency
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);   // idle for a whole step between operations
}

static void conn_init(Conn *c, int fd) {
    memset(c, 0, sizeof *c);
    c->fd = fd;
    c->rank = -1;
    c->local_rank = c->local_size = -1;
}

static void conn_close(Conn *c) {
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
    str_free(&c->in);
    str_free(&c->out);
    c->out_off = 0;
}

// Read what is available. 0 ok (maybe nothing), 1 the peer closed, -1 error (sock_errno).
static int conn_read(Conn *c) {
    if (c->fd < 0 || c->eof) return c->eof ? 1 : -1;
    for (;;) {
        char chunk[65536];
        ssize_t k = recv(c->fd, chunk, sizeof chunk, MSG_DONTWAIT);
        if (k > 0) { str_addn(&c->in, chunk, (size_t)k); continue; }
        if (k == 0) { c->eof = 1; return 1; }
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
        c->sock_errno = errno;
        return -1;
    }
}

// Send what is queued. 1 all sent, 0 some left, -1 error (sock_errno).
static int conn_flush(Conn *c) {
    while (c->out_off < c->out.len) {
        if (c->fd < 0) return -1;
        ssize_t k = send(c->fd, c->out.p + c->out_off, c->out.len - c->out_off, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (k > 0) { c->out_off += (size_t)k; continue; }
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
        c->sock_errno = k < 0 ? errno : EPIPE;
        return -1;
    }
    c->out.len = c->out_off = 0;
    return 1;
}

static void queue_frame(Conn *c, int type, uint32_t seq, const void *payload, size_t len) {
    unsigned char h[RDZV_HEADER_BYTES];
    memcpy(h, RDZV_MAGIC, 4);
    put_u16(h + 4, RDZV_VERSION);
    put_u16(h + 6, (uint32_t)type);
    put_u32(h + 8, seq);
    put_u32(h + 12, (uint32_t)len);
    str_addn(&c->out, (const char *)h, sizeof h);
    if (len) str_addn(&c->out, payload, len);
}

// A complete frame at the head of c->in? 1 yes (*type, *seq, *pl, *len), 0 not yet,
// -1 not our protocol (bad magic or too large), -2 another protocol version (*seq = it).
static int frame_peek(const Conn *c, int *type, uint32_t *seq, const unsigned char **pl, uint32_t *len) {
    const unsigned char *p = (const unsigned char *)c->in.p;
    size_t have = c->in.len;
    if (have >= 4 && memcmp(p, RDZV_MAGIC, 4)) return -1;
    if (have < 4 && have && memcmp(p, RDZV_MAGIC, have)) return -1;
    if (have < RDZV_HEADER_BYTES) return 0;
    if (get_u16(p + 4) != RDZV_VERSION) { *seq = get_u16(p + 4); return -2; }
    *type = (int)get_u16(p + 6);
    *seq = get_u32(p + 8);
    *len = get_u32(p + 12);
    if (*len > RDZV_MAX_PAYLOAD) return -1;
    if (have < RDZV_HEADER_BYTES + (size_t)*len) return 0;
    *pl = p + RDZV_HEADER_BYTES;
    return 1;
}

static void frame_drop(Conn *c, uint32_t len) { str_drop_front(&c->in, RDZV_HEADER_BYTES + (size_t)len); }

// REJECT / ABORT payload: u8 exit code | u8 kind (0 error, 1 timeout) | u16 length | text
static void queue_abort(Conn *c, int type, int code, int timeout, const char *text) {
    size_t n = strlen(text);
    if (n > 60000) n = 60000;
    unsigned char *pl = xmalloc(4 + n);
    pl[0] = (unsigned char)code;
    pl[1] = (unsigned char)(timeout ? 1 : 0);
    put_u16(pl + 2, (uint32_t)n);
    memcpy(pl + 4, text, n);
    queue_frame(c, type, 0, pl, 4 + n);
    free(pl);
}

// Flush every connection of the list until all is sent or `until` (monotonic) passes.
static void flush_all_until(Conn **cs, int n, double until) {
    for (;;) {
        int left = 0;
        for (int i = 0; i < n; i++)
            if (cs[i]->fd >= 0 && conn_flush(cs[i]) == 0) left++;
        if (!left || mono_s() >= until) return;
        sleep_s(0.002);
    }
}

static void seterr(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void seterr(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

// ---- helpers (exported) --------------------------------------------------------------------

void rdzv_rank_list(const int *ranks, int n_ranks, char *buf, size_t n) {
    size_t len = (size_t)snprintf(buf, n, "%s", n_ranks == 1 ? "rank " : "ranks ");
    for (int i = 0; i < n_ranks && len < n; i++) {
        int j = i;
        while (j + 1 < n_ranks && ranks[j + 1] == ranks[j] + 1) j++;
        char item[48];
        if (j > i) snprintf(item, sizeof item, "%s%d-%d", i ? "," : "", ranks[i], ranks[j]);
        else snprintf(item, sizeof item, "%s%d", i ? "," : "", ranks[i]);
        if (len + strlen(item) + 4 >= n) {
            snprintf(buf + len, n - len, "...");
            return;
        }
        len += (size_t)snprintf(buf + len, n - len, "%s", item);
        i = j;
    }
}

int rdzv_first_host(const char *nl, char *out, size_t n) {
    if (!nl || !n) return -1;
    while (*nl == ' ') nl++;
    size_t o = 0;
    const char *p = nl;
    while (*p && *p != ',' && *p != ' ') {
        if (*p == '[') {
            p++;
            const char *s = p;
            while (*p && *p != ',' && *p != '-' && *p != ']') p++;
            if (p == s) return -1;   // "[]" or "[-"
            for (const char *q = s; q < p; q++) {
                if (o + 1 >= n) return -1;
                out[o++] = *q;
            }
            while (*p && *p != ']') p++;
            if (*p != ']') return -1;  // unterminated
            p++;
            continue;
        }
        if (*p == ']') return -1;
        if (o + 1 >= n) return -1;
        out[o++] = *p++;
    }
    out[o] = 0;
    return o ? 0 : -1;
}

// ---- rdzv_join ------------------------------------------------------------------------------

static Rdzv *rdzv_alloc(const RdzvConfig *c) {
    Rdzv *z = xcalloc(1, sizeof *z);
    z->rank = c->rank;
    z->world = c->world;
    z->local_rank = c->local_rank;
    z->local_size = c->local_size;
    if (strchr(c->addr, ':')) snprintf(z->where, sizeof z->where, "[%s]:%d", c->addr, c->port);
    else snprintf(z->where, sizeof z->where, "%s:%d", c->addr[0] ? c->addr : "-", c->port);
    z->addr = xcalloc((size_t)c->world, sizeof *z->addr);
    z->host = xcalloc((size_t)c->world, sizeof *z->host);
    snprintf(z->host[c->rank], sizeof z->host[0], "%s", c->host);
    return z;
}

static void rdzv_free(Rdzv *z) {
    if (!z) return;
    for (int i = 0; i < z->n_conn; i++) conn_close(&z->conn[i]);
    free(z->conn);
    free(z->addr);
    free(z->host);
    free(z->got);
    free(z->acc);
    free(z);
}

// HELLO payload: u32 rank | u32 world | i32 local_rank | i32 local_size | u32 pid |
// u8 transport | u8 mode | u8 token length | u8 host length | token | host
static void queue_hello(Conn *c, const RdzvConfig *cf) {
    size_t tl = strlen(cf->token), hl = strlen(cf->host);
    if (tl > RDZV_TOKEN_MAX) tl = RDZV_TOKEN_MAX;
    if (hl > RDZV_HOST_MAX) hl = RDZV_HOST_MAX;
    unsigned char pl[24 + RDZV_TOKEN_MAX + RDZV_HOST_MAX];
    put_u32(pl, (uint32_t)cf->rank);
    put_u32(pl + 4, (uint32_t)cf->world);
    put_u32(pl + 8, (uint32_t)cf->local_rank);
    put_u32(pl + 12, (uint32_t)cf->local_size);
    put_u32(pl + 16, (uint32_t)getpid());
    pl[20] = (unsigned char)cf->transport;
    pl[21] = (unsigned char)cf->mode;
    pl[22] = (unsigned char)tl;
    pl[23] = (unsigned char)hl;
    memcpy(pl + 24, cf->token, tl);
    memcpy(pl + 24 + tl, cf->host, hl);
    queue_frame(c, RDZV_HELLO, 0, pl, 24 + tl + hl);
}

typedef struct {
    int rank, world, local_rank, local_size, transport, mode;
    unsigned pid;
    char token[RDZV_TOKEN_MAX + 1], host[RDZV_HOST_MAX + 1];
} Hello;

static int parse_hello(const unsigned char *pl, uint32_t len, Hello *h) {
    if (len < 24) return -1;
    h->rank = (int)get_u32(pl);
    h->world = (int)get_u32(pl + 4);
    h->local_rank = (int)(int32_t)get_u32(pl + 8);
    h->local_size = (int)(int32_t)get_u32(pl + 12);
    h->pid = get_u32(pl + 16);
    h->transport = pl[20];
    h->mode = pl[21];
    size_t tl = pl[22], hl = pl[23];
    if (len != 24 + tl + hl) return -1;
    memcpy(h->token, pl + 24, tl);
    h->token[tl] = 0;
    memcpy(h->host, pl + 24 + tl, hl);
    h->host[hl] = 0;
    if (get_u32(pl) > 0x7fffffffu || get_u32(pl + 4) > 0x7fffffffu) return -1;
    return 0;
}

static const char *mode_text(int mode) { return mode == RDZV_MODE_CHECK ? "--check-world" : "training"; }
// the transport byte of HELLO is comm.h's COMM_* (0 none, 1 mpi, 2 nccl)
static const char *transport_text(int t) { return t == 0 ? "none" : t == 1 ? "mpi" : t == 2 ? "nccl" : "?"; }

// Listen on every address of this host at `port`: IPv6 dual-stack (also takes IPv4), or
// IPv4 where IPv6 is not available. -1 with errno on failure.
static int listen_any(int port) {
    int one = 1, zero = 0;
    int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0) {
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);   // a previous run's TIME_WAIT
        struct sockaddr_in6 a;
        memset(&a, 0, sizeof a);
        a.sin6_family = AF_INET6;
        a.sin6_addr = in6addr_any;
        a.sin6_port = htons((uint16_t)port);
        if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && listen(fd, 4096) == 0) {
            fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
            return fd;
        }
        int e = errno;
        close(fd);
        if (e == EADDRINUSE || e == EACCES) { errno = e; return -1; }
    }
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons((uint16_t)port);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, 4096)) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    return fd;
}

// rank 0 ends the rendezvous: the message to every registered rank (ABORT) and to
// `offender` (REJECT), flushed for at most a second, then every connection closed.
static void root_fail(Rdzv *z, Conn *pend, int n_pend, Conn *offender, int code, int timeout, const char *msg) {
    Conn **cs = xcalloc((size_t)n_pend + 1, sizeof *cs);
    int n = 0;
    for (int i = 0; i < n_pend; i++) {
        Conn *c = &pend[i];
        if (c->fd < 0 || c->eof) continue;
        if (c == offender) queue_abort(c, RDZV_REJECT, code, timeout, msg);
        else if (c->rank >= 0) queue_abort(c, RDZV_ABORT, code, timeout, msg);
        else continue;
        cs[n++] = c;
    }
    flush_all_until(cs, n, mono_s() + 1.0);
    free(cs);
    (void)z;
}

// ---- rank 0: listen, gather every rank's HELLO, send the world's description ------------------------

// rank 0's gathering of the world, as its stages pass it on.
typedef struct {
    Rdzv *z;
    const RdzvConfig *cf;
    int W;
    double deadline, timeout_s;
    int lfd;                  // the listening socket
    Conn *pend;               // [cap] pending connections: accepted, HELLO not yet (or accepted and registered)
    int n, cap;
    struct pollfd *pf;        // [cap + 1]
    int *by_rank;             // [W] index into pend, -1
    int registered;
    char notes[1024];         // rejected or lost connections, for the timeout message
    size_t nl;
    char msg[1536];           // why the rendezvous failed
    int fail_code, fail_timeout;
    Conn *offender;           // the connection that made it fail (REJECTed), or NULL
} Gather;

// A rejected or lost connection, for the timeout message ("; "-separated, cut at the end).
static void gather_note(Gather *G, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void gather_note(Gather *G, const char *fmt, ...) {
    const size_t cap = sizeof G->notes;
    if (G->nl < cap - 2) G->nl += (size_t)snprintf(G->notes + G->nl, cap - G->nl, "%s", G->nl ? "; " : "");
    if (G->nl < cap - 2) {
        va_list ap;
        va_start(ap, fmt);
        G->nl += (size_t)vsnprintf(G->notes + G->nl, cap - G->nl, fmt, ap);
        va_end(ap);
    }
    if (G->nl > cap - 1) G->nl = cap - 1;
}

// The rendezvous fails: code (an NSA_EXIT_*), the message, the connection to REJECT.
static void gather_fail(Gather *G, int code, Conn *offender) {
    G->fail_code = code;
    G->offender = offender;
}

// The deadline passed: the missing ranks and the notes.
static void gather_timed_out(Gather *G) {
    const int W = G->W;
    int *miss = xmalloc(sizeof(int) * (size_t)W), nm = 0;
    for (int r = 1; r < W; r++)
        if (G->by_rank[r] < 0) miss[nm++] = r;
    char list[512];
    rdzv_rank_list(miss, nm, list, sizeof list);
    snprintf(G->msg, sizeof G->msg, "%d of %d ranks never arrived within %g s (missing: %s)%s", nm, W, G->timeout_s,
             list, G->nl ? "; " : "");
    size_t k = strlen(G->msg), nn = strlen(G->notes);   // the notes, cut at the end of the message
    if (nn > sizeof G->msg - 1 - k) nn = sizeof G->msg - 1 - k;
    memcpy(G->msg + k, G->notes, nn);
    G->msg[k + nn] = '\0';
    free(miss);
    gather_fail(G, NSA_EXIT_COMM_TIMEOUT, NULL);
    G->fail_timeout = 1;
}

// Every connection waiting to be accepted.
static void gather_accept(Gather *G) {
    for (;;) {
        struct sockaddr_storage sa;
        socklen_t sl = sizeof sa;
        int fd = accept(G->lfd, (struct sockaddr *)&sa, &sl);
        if (fd < 0) break;
        fcntl(fd, F_SETFD, FD_CLOEXEC);
        set_sock_opts(fd);
        if (G->n == G->cap) {
            G->cap *= 2;
            G->pend = xrealloc(G->pend, sizeof *G->pend * (size_t)G->cap);
            G->pf = xrealloc(G->pf, sizeof *G->pf * (size_t)(G->cap + 1));
        }
        conn_init(&G->pend[G->n], fd);
        sa_text((struct sockaddr *)&sa, G->pend[G->n].addr, sizeof G->pend[G->n].addr);
        G->n++;
    }
}

// A well-formed HELLO from pending connection i: rejected (another job's token: the
// connection is closed, the rendezvous goes on), the rendezvous failed (another world
// size, command, or a rank taken or out of range), or the rank registered.
static void gather_hello(Gather *G, int i, const Hello *h) {
    const RdzvConfig *cf = G->cf;
    const int W = G->W;
    Conn *c = &G->pend[i];
    if (strcmp(h->token, cf->token)) {
        char m[1024];
        snprintf(m, sizeof m, "rank %d (from %s, host %s) has job token '%s', rank 0 has '%s': a process of "
                 "another job (or a different NSA_RDZV_TOKEN) reached this rendezvous; rejected", h->rank,
                 c->addr, h->host, h->token, cf->token);
        nsa_log(LOG_ERROR, "rank 0: rendezvous at %s: %s", G->z->where, m);
        gather_note(G, "rejected rank %d from %s (job token '%s', this job's '%s')", h->rank, c->addr, h->token, cf->token);
        queue_abort(c, RDZV_REJECT, NSA_EXIT_USAGE, 0, m);
        Conn *one = c;
        flush_all_until(&one, 1, mono_s() + 1.0);
        conn_close(c);
        return;
    }
    if (h->world != W) {
        snprintf(G->msg, sizeof G->msg, "rank %d (from %s, host %s) has WORLD_SIZE %d, rank 0 has %d: every rank "
                 "must be started with the same world size", h->rank, c->addr, h->host, h->world, W);
        gather_fail(G, NSA_EXIT_USAGE, c);
        return;
    }
    if (h->transport != cf->transport || h->mode != cf->mode) {
        snprintf(G->msg, sizeof G->msg, "rank %d (from %s, host %s) runs %s with --transport %s, rank 0 %s with "
                 "--transport %s: every rank must run the same command", h->rank, c->addr, h->host,
                 mode_text(h->mode), transport_text(h->transport), mode_text(cf->mode),
                 transport_text(cf->transport));
        gather_fail(G, NSA_EXIT_USAGE, c);
        return;
    }
    if (h->rank <= 0 || h->rank >= W || G->by_rank[h->rank] >= 0) {
        const Conn *o = h->rank > 0 && h->rank < W ? &G->pend[G->by_rank[h->rank]] : NULL;
        if (h->rank == 0)
            snprintf(G->msg, sizeof G->msg, "two processes claim rank 0: this one (host %s) and one from %s "
                     "(host %s, pid %u): every process needs its own RANK", cf->host, c->addr, h->host, h->pid);
        else if (o)
            snprintf(G->msg, sizeof G->msg, "rank %d arrived twice: from %s (host %s, pid %u) and from %s (host %s, "
                     "pid %u): every process needs its own RANK", h->rank, o->addr, o->host, o->pid, c->addr,
                     h->host, h->pid);
        else
            snprintf(G->msg, sizeof G->msg, "a process from %s (host %s) claims rank %d of a world of %d", c->addr,
                     h->host, h->rank, W);
        gather_fail(G, NSA_EXIT_USAGE, c);
        return;
    }
    c->rank = h->rank;
    c->local_rank = h->local_rank;
    c->local_size = h->local_size;
    c->pid = h->pid;
    snprintf(c->host, sizeof c->host, "%s", h->host);
    G->by_rank[h->rank] = i;
    G->registered++;
}

// What pending connection i sent or did: its HELLO (or something else: ignored), another
// protocol version (the rendezvous fails), or it went away (a registered rank is
// unregistered: it may come back).
static void gather_read(Gather *G, int i) {
    Conn *c = &G->pend[i];
    const char *where = G->z->where;
    if (c->fd < 0) return;
    int rr = conn_read(c);
    int type = 0, fr;
    uint32_t seq = 0, len = 0;
    const unsigned char *pl = NULL;
    fr = c->rank < 0 ? frame_peek(c, &type, &seq, &pl, &len) : 0;
    if (fr == -1) {
        char first[16] = "";
        const unsigned char *in = (const unsigned char *)c->in.p;
        for (size_t k = 0; k < c->in.len && k < 4; k++) first[k] = in[k] >= 32 && in[k] < 127 ? (char)in[k] : '.';
        nsa_log(LOG_STATUS, "rank 0: rendezvous at %s: ignored a connection from %s that is not an "
                "nsa-train rendezvous (first bytes '%s')", where, c->addr, first);
        conn_close(c);
        return;
    }
    if (fr == -2) {
        snprintf(G->msg, sizeof G->msg, "a process at %s speaks rendezvous protocol version %u, rank 0 version %d: "
                 "every rank must run the same nsa-train", c->addr, (unsigned)seq, RDZV_VERSION);
        gather_fail(G, NSA_EXIT_USAGE, c);
        return;
    }
    if (fr == 1) {
        Hello h;
        if (type != RDZV_HELLO || parse_hello(pl, len, &h)) {
            nsa_log(LOG_STATUS, "rank 0: rendezvous at %s: ignored a connection from %s: its first frame "
                    "is not a well-formed HELLO (type %d, %u bytes)", where, c->addr, type, (unsigned)len);
            conn_close(c);
            return;
        }
        frame_drop(c, len);
        gather_hello(G, i, &h);
        return;
    }
    if (rr != 0 && fr == 0) {   // closed (or failed) before or after its HELLO
        if (c->rank >= 0) {
            gather_note(G, "rank %d (from %s) connected and went away", c->rank, c->addr);
            nsa_log(LOG_STATUS, "rank 0: rendezvous at %s: rank %d (from %s) closed its connection before "
                    "the world was complete; waiting for it to come back", where, c->rank, c->addr);
            G->by_rank[c->rank] = -1;
            G->registered--;
        }
        conn_close(c);
    }
}

// Poll, accept and read until every rank registered, the deadline passed or the
// rendezvous failed (G->fail_code).
static void gather_world(Gather *G) {
    while (G->registered < G->W - 1 && !G->fail_code) {
        double now = mono_s();
        if (now >= G->deadline) {
            gather_timed_out(G);
            break;
        }
        int np = 0;
        G->pf[np].fd = G->lfd;
        G->pf[np].events = POLLIN;
        np++;
        for (int i = 0; i < G->n; i++) {
            G->pf[np].fd = G->pend[i].fd;
            G->pf[np].events = POLLIN;
            np++;
        }
        int ms = (int)((G->deadline - now) * 1000.0) + 1;
        if (ms > 200) ms = 200;
        int pr = poll(G->pf, (nfds_t)np, ms);
        if (pr < 0 && errno != EINTR) {
            snprintf(G->msg, sizeof G->msg, "poll: %s", strerror(errno));
            gather_fail(G, NSA_EXIT_RUNTIME, NULL);
            break;
        }
        gather_accept(G);   // new connections
        for (int i = 0; i < G->n && !G->fail_code; i++) gather_read(G, i);   // HELLOs and disconnects
    }
}

// rank 0 listens on the rendezvous port (every address of this host). The socket, or -1
// with *rc and err set.
static int root_listen(const Rdzv *z, const RdzvConfig *cf, int *rc, char *err, size_t errlen) {
    int lfd = listen_any(cf->port);
    if (lfd >= 0) return lfd;
    int e = errno;
    *rc = NSA_EXIT_RUNTIME;
    if (e == EADDRINUSE)
        seterr(err, errlen, "rank 0: rendezvous at %s: cannot listen on port %d (every address of this host): %s: "
               "another process holds the port (another job, or a previous run still exiting): choose another "
               "MASTER_PORT (or NSA_RDZV_PORT)", z->where, cf->port, strerror(e));
    else
        seterr(err, errlen, "rank 0: rendezvous at %s: cannot listen on port %d: %s", z->where, cf->port, strerror(e));
    return -1;
}

// The world is complete: keep the registered connections (by rank), drop the rest; every
// rank's address and host.
static void root_keep_world(Gather *G) {
    Rdzv *z = G->z;
    const int W = G->W;
    z->n_conn = W;
    z->conn = xcalloc((size_t)W, sizeof *z->conn);
    z->conn[0].fd = -1;
    for (int r = 1; r < W; r++) z->conn[r] = G->pend[G->by_rank[r]];
    for (int i = 0; i < G->n; i++)
        if (G->pend[i].rank < 0) conn_close(&G->pend[i]);
    // rank 0's own address: its end of the connection to rank 1
    struct sockaddr_storage sa;
    socklen_t sl = sizeof sa;
    if (W > 1 && getsockname(z->conn[1].fd, (struct sockaddr *)&sa, &sl) == 0)
        sa_text((struct sockaddr *)&sa, z->addr[0], sizeof z->addr[0]);
    else
        snprintf(z->addr[0], sizeof z->addr[0], "%.63s", G->cf->addr);
    for (int r = 1; r < W; r++) {
        snprintf(z->addr[r], sizeof z->addr[0], "%s", z->conn[r].addr);
        snprintf(z->host[r], sizeof z->host[0], "%s", z->conn[r].host);
    }
}

// Local ranks: as given, else the rank's position among the ranks of its host; lr[W],
// ls[W]. Sets rank 0's own.
static void root_local_ranks(Rdzv *z, const RdzvConfig *cf, int W, int *lr, int *ls) {
    for (int r = 0; r < W; r++) {
        int given_lr = r == 0 ? cf->local_rank : z->conn[r].local_rank;
        int given_ls = r == 0 ? cf->local_size : z->conn[r].local_size;
        int pos = 0, cnt = 0;
        for (int q = 0; q < W; q++) {
            if (strcmp(z->host[q], z->host[r])) continue;
            if (q < r) pos++;
            cnt++;
        }
        lr[r] = given_lr >= 0 ? given_lr : pos;
        ls[r] = given_ls > 0 ? given_ls : cnt;
        if (r == 0) {
            z->local_rank = lr[0];
            z->local_size = ls[0];
        }
    }
}

// Every rank's WELCOME, flushed until the deadline (at least 10 s). 0, or -1 with *rc and
// err set.
static int root_welcome(Rdzv *z, const int *lr, const int *ls, double deadline, int *rc, char *err, size_t errlen) {
    const int W = z->n_conn;
    // WELCOME payload: u32 world | u32 n entries | entries of
    //   u32 rank | i32 local_rank | i32 local_size | u8 addr length | u8 host length | addr | host
    // (every rank when world <= RDZV_TABLE_ALL_MAX, else rank 0 and the receiver)
    Conn **cs = xmalloc(sizeof *cs * (size_t)W);
    Str pl = {0};
    for (int r = 1; r < W; r++) {
        pl.len = 0;
        unsigned char hd[8];
        const int all = W <= RDZV_TABLE_ALL_MAX;
        put_u32(hd, (uint32_t)W);
        put_u32(hd + 4, (uint32_t)(all ? W : 2));
        str_addn(&pl, (const char *)hd, 8);
        for (int q = 0; q < W; q++) {
            if (!all && q != 0 && q != r) continue;
            unsigned char e[14];
            size_t al = strlen(z->addr[q]), hl = strlen(z->host[q]);
            if (hl > RDZV_HOST_MAX) hl = RDZV_HOST_MAX;
            put_u32(e, (uint32_t)q);
            put_u32(e + 4, (uint32_t)lr[q]);
            put_u32(e + 8, (uint32_t)ls[q]);
            e[12] = (unsigned char)al;
            e[13] = (unsigned char)hl;
            str_addn(&pl, (const char *)e, 14);
            str_addn(&pl, z->addr[q], al);
            str_addn(&pl, z->host[q], hl);
        }
        queue_frame(&z->conn[r], RDZV_WELCOME, 0, pl.p, pl.len);
        cs[r - 1] = &z->conn[r];
    }
    str_free(&pl);
    double until = deadline > mono_s() + 10 ? deadline : mono_s() + 10;
    flush_all_until(cs, W - 1, until);
    free(cs);
    for (int r = 1; r < W; r++) {
        if (z->conn[r].out.len == 0) continue;
        *rc = NSA_EXIT_COMM_TIMEOUT;
        seterr(err, errlen, "[COMM-ERROR] rank 0: rendezvous at %s: could not send the world's description to rank %d "
               "(%s): %s", z->where, r, z->conn[r].addr,
               z->conn[r].sock_errno ? strerror(z->conn[r].sock_errno) : "it does not read its connection");
        return -1;
    }
    return 0;
}

static Rdzv *join_root(Rdzv *z, const RdzvConfig *cf, double t0, double timeout_s, int *rc, char *err, size_t errlen) {
    const int W = cf->world;
    Gather G = {.z = z, .cf = cf, .W = W, .deadline = t0 + timeout_s, .timeout_s = timeout_s};
    G.lfd = root_listen(z, cf, rc, err, errlen);
    if (G.lfd < 0) {
        rdzv_free(z);
        return NULL;
    }
    G.cap = W + 8;
    G.pend = xcalloc((size_t)G.cap, sizeof *G.pend);
    G.by_rank = xmalloc(sizeof(int) * (size_t)W);
    for (int r = 0; r < W; r++) G.by_rank[r] = -1;
    G.pf = xmalloc(sizeof *G.pf * (size_t)(G.cap + 1));
    gather_world(&G);
    free(G.pf);
    close(G.lfd);
    if (G.fail_code) {
        root_fail(z, G.pend, G.n, G.offender, G.fail_code, G.fail_timeout, G.msg);
        *rc = G.fail_code;
        seterr(err, errlen, "%srank 0: rendezvous at %s: %s", G.fail_code == NSA_EXIT_COMM_TIMEOUT ? "[COMM-TIMEOUT] " : "",
               z->where, G.msg);
        for (int i = 0; i < G.n; i++) conn_close(&G.pend[i]);
        free(G.pend);
        free(G.by_rank);
        rdzv_free(z);
        return NULL;
    }
    root_keep_world(&G);
    free(G.pend);
    free(G.by_rank);
    int *lr = xcalloc((size_t)W * 2, sizeof(int)), *ls = lr + W;   // zeroed: W >= 1 here
    root_local_ranks(z, cf, W, lr, ls);
    int bad = root_welcome(z, lr, ls, G.deadline, rc, err, errlen);
    free(lr);
    if (bad) {
        rdzv_free(z);
        return NULL;
    }
    return z;
}

// ---- the other ranks: connect to rank 0, say HELLO, wait for the world's description ---------------

// Connect to rank 0 (MASTER_ADDR resolved again at every attempt, a growing back-off),
// until the deadline. The socket and rank 0's address, or -1 with *rc and err set.
static int peer_connect(const Rdzv *z, const RdzvConfig *cf, double deadline, double timeout_s, char *peer_addr,
                        size_t peer_n, int *rc, char *err, size_t errlen) {
    char port[16], last[256] = "";
    snprintf(port, sizeof port, "%d", cf->port);
    int fd = -1, attempts = 0, resolved = 0;
    double backoff = 0.02;
    while (fd < 0) {
        if (mono_s() >= deadline) {
            *rc = NSA_EXIT_COMM_TIMEOUT;
            if (!resolved)
                seterr(err, errlen, "[COMM-TIMEOUT] rank %d: rendezvous at %s: MASTER_ADDR '%s' did not resolve within "
                       "%g s (%d attempt%s, last error: %s)", cf->rank, z->where, cf->addr, timeout_s, attempts,
                       attempts == 1 ? "" : "s", last);
            else
                seterr(err, errlen, "[COMM-TIMEOUT] rank %d: rendezvous at %s: rank 0 not reachable within %g s (%d "
                       "attempt%s, last error: %s): is rank 0 running, and do MASTER_ADDR and MASTER_PORT name it on "
                       "every rank?", cf->rank, z->where, timeout_s, attempts, attempts == 1 ? "" : "s", last);
            return -1;
        }
        attempts++;
        struct addrinfo hints, *res = NULL;
        memset(&hints, 0, sizeof hints);
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        int g = getaddrinfo(cf->addr, port, &hints, &res);
        if (g) {
            snprintf(last, sizeof last, "%s", g == EAI_SYSTEM ? strerror(errno) : gai_strerror(g));
        } else {
            resolved = 1;
            for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
                int s = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
                if (s < 0) { snprintf(last, sizeof last, "socket: %s", strerror(errno)); continue; }
                set_sock_opts(s);
                int cr = connect(s, ai->ai_addr, ai->ai_addrlen);
                if (cr < 0 && errno == EINPROGRESS) {
                    double now = mono_s(), lim = deadline - now;
                    if (lim > 3) lim = 3;
                    struct pollfd p = {s, POLLOUT, 0};
                    int pr = poll(&p, 1, (int)(lim * 1000) + 1);
                    int so = 0;
                    socklen_t sl = sizeof so;
                    if (pr == 1 && getsockopt(s, SOL_SOCKET, SO_ERROR, &so, &sl) == 0 && so == 0) cr = 0;
                    else errno = pr == 0 ? ETIMEDOUT : so ? so : errno;
                }
                if (cr == 0) {
                    fd = s;
                    sa_text(ai->ai_addr, peer_addr, peer_n);
                } else {
                    snprintf(last, sizeof last, "%s", strerror(errno));
                    close(s);
                }
            }
            freeaddrinfo(res);
        }
        if (fd < 0) {
            double rem = deadline - mono_s();
            sleep_s(backoff < rem ? backoff : rem);
            if (backoff < 0.5) backoff *= 2;
        }
    }
    return fd;
}

// rank 0's WELCOME: every rank's address and host (or rank 0's and this rank's), and this
// rank's local rank and size.
static void peer_take_welcome(Rdzv *z, const RdzvConfig *cf, const unsigned char *pl, uint32_t len) {
    uint32_t ne = get_u32(pl + 4), off = 8;
    for (uint32_t k = 0; k < ne; k++) {
        if (off + 14 > len) break;
        uint32_t q = get_u32(pl + off);
        int qlr = (int)(int32_t)get_u32(pl + off + 4), qls = (int)(int32_t)get_u32(pl + off + 8);
        size_t al = pl[off + 12], hl = pl[off + 13];
        if (off + 14 + al + hl > len || q >= (uint32_t)cf->world) break;
        snprintf(z->addr[q], sizeof z->addr[0], "%.*s", (int)al, (const char *)pl + off + 14);
        snprintf(z->host[q], sizeof z->host[0], "%.*s", (int)hl, (const char *)pl + off + 14 + al);
        if ((int)q == cf->rank) {
            z->local_rank = qlr;
            z->local_size = qls;
        }
        off += 14 + (uint32_t)(al + hl);
    }
}

static Rdzv *join_peer(Rdzv *z, const RdzvConfig *cf, double t0, double timeout_s, int *rc, char *err, size_t errlen) {
    const double deadline = t0 + timeout_s;
    char peer_addr[64] = "";
    int fd = peer_connect(z, cf, deadline, timeout_s, peer_addr, sizeof peer_addr, rc, err, errlen);
    if (fd < 0) {
        rdzv_free(z);
        return NULL;
    }
    z->n_conn = 1;
    z->conn = xcalloc(1, sizeof *z->conn);
    Conn *c = &z->conn[0];
    conn_init(c, fd);
    c->rank = 0;
    snprintf(c->addr, sizeof c->addr, "%s", peer_addr);
    queue_hello(c, cf);
    for (;;) {
        double now = mono_s();
        if (now >= deadline) {
            *rc = NSA_EXIT_COMM_TIMEOUT;
            seterr(err, errlen, "[COMM-TIMEOUT] rank %d: rendezvous at %s: connected to rank 0, but the world of %d ranks "
                   "was not complete within %g s (rank 0 names the ranks that never arrived)", cf->rank, z->where,
                   cf->world, timeout_s);
            rdzv_free(z);
            return NULL;
        }
        int fl = conn_flush(c);
        struct pollfd p = {fd, (short)(POLLIN | (fl == 0 ? POLLOUT : 0)), 0};
        int ms = (int)((deadline - now) * 1000.0) + 1;
        if (ms > 200) ms = 200;
        poll(&p, 1, ms);
        int rr = conn_read(c);
        int type = 0;
        uint32_t seq = 0, len = 0;
        const unsigned char *pl = NULL;
        int fr = frame_peek(c, &type, &seq, &pl, &len);
        if (fr == -1 || fr == -2) {
            *rc = NSA_EXIT_COMM_TIMEOUT;
            if (fr == -2)
                seterr(err, errlen, "[COMM-ERROR] rank %d: rendezvous at %s: rank 0 speaks rendezvous protocol version %u, "
                       "this rank %d: every rank must run the same nsa-train", cf->rank, z->where, (unsigned)seq,
                       RDZV_VERSION);
            else
                seterr(err, errlen, "[COMM-ERROR] rank %d: rendezvous at %s: what listens there is not an nsa-train "
                       "rank 0 (not our protocol): check MASTER_ADDR and MASTER_PORT", cf->rank, z->where);
            rdzv_free(z);
            return NULL;
        }
        if (fr == 1) {
            if (type == RDZV_REJECT || type == RDZV_ABORT) {
                int code = len >= 4 ? pl[0] : NSA_EXIT_COMM_TIMEOUT, tmo = len >= 4 ? pl[1] : 0;
                size_t tl = len >= 4 ? get_u16(pl + 2) : 0;
                if (4 + tl > len) tl = len >= 4 ? len - 4 : 0;
                *rc = code == NSA_EXIT_USAGE || code == NSA_EXIT_COMM_TIMEOUT || code == NSA_EXIT_RUNTIME
                          ? code : NSA_EXIT_COMM_TIMEOUT;
                seterr(err, errlen, "%srank %d: rendezvous at %s: rank 0 %s: %.*s",
                       *rc == NSA_EXIT_COMM_TIMEOUT ? (tmo ? "[COMM-TIMEOUT] " : "[COMM-ERROR] ") : "", cf->rank, z->where,
                       type == RDZV_REJECT ? "rejected this rank" : "ended the rendezvous", (int)tl,
                       (const char *)pl + 4);
                rdzv_free(z);
                return NULL;
            }
            if (type != RDZV_WELCOME || len < 8 || (int)get_u32(pl) != cf->world) {
                *rc = NSA_EXIT_COMM_TIMEOUT;
                seterr(err, errlen, "[COMM-ERROR] rank %d: rendezvous at %s: unexpected answer from rank 0 (frame type %d, "
                       "%u bytes)", cf->rank, z->where, type, (unsigned)len);
                rdzv_free(z);
                return NULL;
            }
            peer_take_welcome(z, cf, pl, len);
            frame_drop(c, len);
            return z;
        }
        if (rr != 0) {
            *rc = NSA_EXIT_COMM_TIMEOUT;
            seterr(err, errlen, "[COMM-ERROR] rank %d: rendezvous at %s: rank 0 (%s) %s before the world was complete "
                   "(rank 0 exited or failed: see its log)", cf->rank, z->where, c->addr,
                   rr > 0 || c->sock_errno == ECONNRESET ? "closed the connection"
                   : c->sock_errno ? strerror(c->sock_errno) : "failed");
            rdzv_free(z);
            return NULL;
        }
    }
}

Rdzv *rdzv_join(const RdzvConfig *cf, double timeout_s, int *rc, char *err, size_t errlen) {
    *rc = NSA_EXIT_OK;
    err[0] = 0;
    const double t0 = mono_s();
    if (cf->world < 1 || cf->rank < 0 || cf->rank >= cf->world) {
        *rc = NSA_EXIT_USAGE;
        seterr(err, errlen, "rendezvous: rank %d of a world of %d", cf->rank, cf->world);
        return NULL;
    }
    Rdzv *z = rdzv_alloc(cf);
    if (cf->world == 1) {
        z->local_rank = cf->local_rank >= 0 ? cf->local_rank : 0;
        z->local_size = cf->local_size > 0 ? cf->local_size : 1;
        snprintf(z->addr[0], sizeof z->addr[0], "%.63s", cf->addr[0] ? cf->addr : "-");
        return z;
    }
    z = cf->rank == 0 ? join_root(z, cf, t0, timeout_s, rc, err, errlen) : join_peer(z, cf, t0, timeout_s, rc, err, errlen);
    if (z) z->join_ms = (mono_s() - t0) * 1e3;
    return z;
}

int rdzv_rank(const Rdzv *z) { return z->rank; }
int rdzv_world(const Rdzv *z) { return z->world; }
int rdzv_local_rank(const Rdzv *z) { return z->local_rank; }
int rdzv_local_size(const Rdzv *z) { return z->local_size; }
double rdzv_join_ms(const Rdzv *z) { return z->join_ms; }
const char *rdzv_peer_addr(const Rdzv *z, int r) { return r >= 0 && r < z->world ? z->addr[r] : ""; }
const char *rdzv_peer_host(const Rdzv *z, int r) { return r >= 0 && r < z->world ? z->host[r] : ""; }
const char *rdzv_error(const Rdzv *z) { return z->err; }

void rdzv_close(Rdzv *z) { rdzv_free(z); }

// ---- control operations -----------------------------------------------------------------------

// CTRL payload: u8 op | 3 bytes 0 | u32 count | data. Data: 8-byte big-endian elements
// (sum/max/min), bytes (allgather: a contribution is count bytes, the result world*count;
// broadcast: a contribution is empty, the result count bytes).
static void queue_ctrl(Conn *c, uint32_t seq, int op, int count, const void *data, size_t n_elems, size_t esz) {
    size_t bytes = n_elems * esz;
    unsigned char *pl = xmalloc(8 + bytes);
    pl[0] = (unsigned char)op;
    pl[1] = pl[2] = pl[3] = 0;
    put_u32(pl + 4, (uint32_t)count);
    if (esz == 8) {
        for (size_t i = 0; i < n_elems; i++) {
            uint64_t v;
            memcpy(&v, (const unsigned char *)data + 8 * i, 8);
            put_u64(pl + 8 + 8 * i, v);
        }
    } else if (bytes) {
        memcpy(pl + 8, data, bytes);
    }
    queue_frame(c, RDZV_CTRL, seq, pl, 8 + bytes);
    free(pl);
}

static void decode_elems(void *dst, const unsigned char *src, size_t n_elems, size_t esz) {
    if (esz == 8) {
        for (size_t i = 0; i < n_elems; i++) {
            uint64_t v = get_u64(src + 8 * i);
            memcpy((unsigned char *)dst + 8 * i, &v, 8);
        }
    } else if (n_elems) {
        memcpy(dst, src, n_elems);
    }
}

// rank 0: every contribution is in acc: the result into z->recv (rank order)
static void reduce_into_recv(Rdzv *z) {
    const int W = z->world, n = z->count;
    const size_t slot = (size_t)n * z->esz;
    switch (z->op) {
    case RDZV_OP_SUM_F64:
        for (int i = 0; i < n; i++) {
            double s, v;
            memcpy(&s, z->acc + 8 * (size_t)i, 8);
            for (int r = 1; r < W; r++) {
                memcpy(&v, z->acc + (size_t)r * slot + 8 * (size_t)i, 8);
                s += v;
            }
            memcpy((unsigned char *)z->recv + 8 * (size_t)i, &s, 8);
        }
        break;
    case RDZV_OP_MAX_I64:
    case RDZV_OP_MIN_I64:
        for (int i = 0; i < n; i++) {
            int64_t s, v;
            memcpy(&s, z->acc + 8 * (size_t)i, 8);
            for (int r = 1; r < W; r++) {
                memcpy(&v, z->acc + (size_t)r * slot + 8 * (size_t)i, 8);
                if (z->op == RDZV_OP_MAX_I64 ? v > s : v < s) s = v;
            }
            memcpy((unsigned char *)z->recv + 8 * (size_t)i, &s, 8);
        }
        break;
    case RDZV_OP_ALLGATHER_U8:
        memcpy(z->recv, z->acc, (size_t)W * slot);
        break;
    case RDZV_OP_BCAST_U8:
        if (z->recv != (void *)z->acc) memcpy(z->recv, z->acc, slot);
        break;
    }
}

int rdzv_ctrl_start(Rdzv *z, int op, const void *send, void *recv, int count) {
    if (z->active) { snprintf(z->err, sizeof z->err, "control operation already in flight"); return -1; }
    if (count < 0 || op < RDZV_OP_SUM_F64 || op > RDZV_OP_BCAST_U8) {
        snprintf(z->err, sizeof z->err, "bad control operation %d (count %d)", op, count);
        return -1;
    }
    z->seq++;
    z->op = op;
    z->count = count;
    z->esz = op_esz(op);
    z->recv = recv;
    z->phase = 0;
    z->err[0] = 0;
    const size_t slot = (size_t)count * z->esz;
    if (z->rank == 0) {
        size_t need = (size_t)z->world * slot + 1;
        if (need > z->acc_cap) {
            free(z->acc);
            z->acc = xmalloc(need);
            z->acc_cap = need;
        }
        if (!z->got) z->got = xcalloc((size_t)z->world, 1);
        memset(z->got, 0, (size_t)z->world);
        z->got[0] = 1;
        if (slot) memcpy(z->acc, send, slot);
    } else {
        // a broadcast's contribution is empty: "ready for count bytes"
        queue_ctrl(&z->conn[0], z->seq, op, count, send, op == RDZV_OP_BCAST_U8 ? 0 : (size_t)count, z->esz);
        if (conn_flush(&z->conn[0]) < 0) {
            snprintf(z->err, sizeof z->err, "control operation %u: sending to rank 0 (%s) failed: %s", (unsigned)z->seq,
                     z->conn[0].addr, strerror(z->conn[0].sock_errno));
            return -1;
        }
    }
    z->active = 1;
    return 0;
}

// the peer's connection ended (or failed) while an operation needs it
static int lost(Rdzv *z, int r, int rr) {
    const Conn *c = &z->conn[z->rank == 0 ? r : 0];
    // a reset is a peer that exited with our bytes unread: the same story as a close
    if (rr > 0 || c->sock_errno == ECONNRESET || c->sock_errno == EPIPE)
        snprintf(z->err, sizeof z->err, "rank %d (%s) closed its connection during control operation %u (%s)%s: it "
                 "exited or crashed (see its log)", r, c->addr, (unsigned)z->seq, op_name(z->op),
                 rr > 0 ? "" : " (connection reset)");
    else
        snprintf(z->err, sizeof z->err, "connection to rank %d (%s) failed during control operation %u (%s): %s", r,
                 c->addr, (unsigned)z->seq, op_name(z->op), c->sock_errno ? strerror(c->sock_errno) : "error");
    z->active = 0;
    return -1;
}

// one frame from rank r (rank 0) or from rank 0 (others): 1 handled, 0 none yet, -1 error
static int take_frame(Rdzv *z, int r) {
    Conn *c = &z->conn[z->rank == 0 ? r : 0];
    int type = 0;
    uint32_t seq = 0, len = 0;
    const unsigned char *pl = NULL;
    int fr = frame_peek(c, &type, &seq, &pl, &len);
    if (fr == 0) return 0;
    if (fr < 0) {
        snprintf(z->err, sizeof z->err, "rank %d (%s) sent bytes that are not a rendezvous frame during control operation "
                 "%u", r, c->addr, (unsigned)z->seq);
        return -1;
    }
    if (type == RDZV_ABORT) {
        size_t tl = len >= 4 ? get_u16(pl + 2) : 0;
        if (4 + tl > len) tl = len >= 4 ? len - 4 : 0;
        snprintf(z->err, sizeof z->err, "rank %d ended the world: %.*s", r, (int)tl, (const char *)pl + 4);
        return -1;
    }
    const size_t W = (size_t)z->world, n = (size_t)z->count;
    size_t expect_elems = z->rank == 0 ? (z->op == RDZV_OP_BCAST_U8 ? 0 : n)
                                       : (z->op == RDZV_OP_ALLGATHER_U8 ? W * n : n);
    if (type != RDZV_CTRL || len < 8 || seq != z->seq || pl[0] != z->op || get_u32(pl + 4) != (uint32_t)z->count ||
        len != 8 + expect_elems * z->esz) {
        snprintf(z->err, sizeof z->err, "rank %d (%s) sent control operation %u (%s, count %u, %u bytes) while rank %d is "
                 "in operation %u (%s, count %d): the ranks run different programs or configs", r, c->addr,
                 (unsigned)seq, len >= 8 ? op_name(pl[0]) : "?", len >= 8 ? (unsigned)get_u32(pl + 4) : 0u,
                 (unsigned)len, z->rank, (unsigned)z->seq, op_name(z->op), z->count);
        return -1;
    }
    if (z->rank == 0) decode_elems(z->acc + (size_t)r * n * z->esz, pl + 8, expect_elems, z->esz);
    else decode_elems(z->recv, pl + 8, expect_elems, z->esz);
    frame_drop(c, len);
    return 1;
}

int rdzv_ctrl_test(Rdzv *z) {
    if (!z->active) return z->err[0] ? -1 : 1;
    const int W = z->world;
    if (z->rank != 0) {
        Conn *c = &z->conn[0];
        if (conn_flush(c) < 0) return lost(z, 0, -1);
        int rr = conn_read(c);
        int t = take_frame(z, 0);
        if (t < 0) { z->active = 0; return -1; }
        if (t == 1) { z->active = 0; return 1; }
        if (rr != 0) return lost(z, 0, rr);
        return 0;
    }
    if (z->phase == 0) {
        int missing = 0;
        for (int r = 1; r < W; r++) {
            if (z->got[r]) continue;
            Conn *c = &z->conn[r];
            int rr = conn_read(c);
            int t = take_frame(z, r);
            if (t < 0) { z->active = 0; return -1; }
            if (t == 1) { z->got[r] = 1; continue; }
            if (rr != 0) return lost(z, r, rr);
            missing++;
        }
        if (missing) return 0;
        reduce_into_recv(z);
        const size_t n_res = z->op == RDZV_OP_ALLGATHER_U8 ? (size_t)W * (size_t)z->count : (size_t)z->count;
        for (int r = 1; r < W; r++) queue_ctrl(&z->conn[r], z->seq, z->op, z->count, z->recv, n_res, z->esz);
        z->phase = 1;
    }
    int left = 0;
    for (int r = 1; r < W; r++) {
        int f = conn_flush(&z->conn[r]);
        if (f < 0) return lost(z, r, -1);
        if (f == 0) left++;
    }
    if (left) return 0;
    z->active = 0;
    return 1;
}

void rdzv_ctrl_waiting(const Rdzv *z, char *buf, size_t n) {
    buf[0] = 0;
    if (!z->active) return;
    if (z->rank != 0) {
        snprintf(buf, n, "%s rank 0 (%s)", z->conn[0].out.len ? "sending to" : "waiting for the result from",
                 z->conn[0].addr);
        return;
    }
    int *rs = xcalloc((size_t)z->world, sizeof(int)), k = 0;
    for (int r = 1; r < z->world; r++)
        if (z->phase == 0 ? !z->got[r] : z->conn[r].out.len > 0) rs[k++] = r;
    char list[400];
    rdzv_rank_list(rs, k, list, sizeof list);
    if (k == 1) snprintf(buf, n, "%s %s (%s)", z->phase == 0 ? "waiting for" : "sending the result to", list,
                         z->conn[rs[0]].addr);
    else if (k) snprintf(buf, n, "%s %s", z->phase == 0 ? "waiting for" : "sending the result to", list);
    free(rs);
}
