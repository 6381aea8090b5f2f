/* Connections of `tutti serve`: accepting, limits, time limits (conn.h). */
#define _GNU_SOURCE /* accept4, pipe2: descriptors close-on-exec from the start */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server/conn.h"
#include "server/format.h"
#include "server/framing.h"
#include "server/server.h"
#include "util/clock.h"

#define FIRST_LINE_MAX 8192 /* the longest request line read before handing over */
#define LINGER_S 2.0        /* draining a closed connection's input */
#define MAX_CLOSING 256

typedef enum phase { PH_PRE, PH_HEAD, PH_BODY, PH_BUSY, PH_IDLE } phase;

typedef struct track {
    struct track *next;
    int fd;
    struct sockaddr_storage addr;
    socklen_t alen;
    unsigned char key[16]; /* the client's address (IPv4 as ::ffff:a.b.c.d) */
    phase ph;
    double deadline;            /* monotonic seconds, 0 = none */
    struct MHD_Connection *mhd; /* once libmicrohttpd has it */
    bool shut, gone;            /* shut down for its deadline; closed (freed by the thread) */
} track;

typedef struct closing {
    int fd;
    double deadline;
} closing;

struct srv_conns {
    pthread_mutex_t mu;
    track *head;
    int n_active; /* connections not gone */
    closing close_q[MAX_CLOSING];
    int n_closing;
    int listen_fd, wake[2];
    pthread_t th;
    bool started;
    volatile int stop;
    struct MHD_Daemon *d;
    srv_server *s;
};

static void addr_key(const struct sockaddr *a, unsigned char *key) {
    memset(key, 0, 16);
    if (a->sa_family == AF_INET) {
        key[10] = key[11] = 0xff;
        memcpy(key + 12, &((const struct sockaddr_in *)a)->sin_addr, 4);
    } else if (a->sa_family == AF_INET6) {
        memcpy(key, &((const struct sockaddr_in6 *)a)->sin6_addr, 16);
    }
}

/* ---- listening ---- */

int srv_conns_listen(srv_server *s, int *port, char *err, size_t cap) {
    const server_opts *o = &s->opts;
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    socklen_t len;
    struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, o->host, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET, a4->sin_port = htons((uint16_t)o->port), len = sizeof *a4;
    } else if (inet_pton(AF_INET6, o->host, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6, a6->sin6_port = htons((uint16_t)o->port), len = sizeof *a6;
    } else {
        snprintf(err, cap, "--host %s is not an IPv4 or IPv6 address", o->host);
        return -2;
    }
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int one = 1;
    if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, (struct sockaddr *)&ss, len) < 0 || listen(fd, 128) < 0) {
        snprintf(err, cap, "cannot listen on %s:%d: %s", o->host, o->port, strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    struct sockaddr_storage got;
    socklen_t gl = sizeof got;
    *port = o->port;
    if (getsockname(fd, (struct sockaddr *)&got, &gl) == 0)
        *port = ntohs(got.ss_family == AF_INET ? ((struct sockaddr_in *)&got)->sin_port
                                               : ((struct sockaddr_in6 *)&got)->sin6_port);
    srv_conns *cs = calloc(1, sizeof *cs);
    if (!cs) {
        close(fd);
        snprintf(err, cap, "out of memory");
        return -1;
    }
    pthread_mutex_init(&cs->mu, NULL);
    cs->listen_fd = fd;
    cs->wake[0] = cs->wake[1] = -1;
    cs->s = s;
    s->conns = cs;
    return 0;
}

/* ---- closing with an answer ---- */

/* Sends a short answer on a connection we own, then closes it lingering:
 * our side is shut for writing and the client's bytes are read and dropped
 * until it closes or LINGER_S pass (closing with unread input would reset
 * the connection, and the client might never read the answer). */
static void reject(srv_conns *cs, int fd, int status, const char *reason, const char *msg) {
    char *json = srv_error_json(status, msg, NULL, NULL);
    char head[256];
    size_t nj = json ? strlen(json) : 0;
    int k = snprintf(head, sizeof head,
                     "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\nConnection: close\r\n"
                     "%s\r\n",
                     status, reason, nj, status == 503 ? "Retry-After: 1\r\n" : "");
    /* small enough for the socket's buffer: one non-blocking send each */
    ssize_t w = send(fd, head, (size_t)k, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w == k && json) w = send(fd, json, nj, MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)w;
    free(json);
    shutdown(fd, SHUT_WR);
    pthread_mutex_lock(&cs->mu);
    if (cs->n_closing < MAX_CLOSING) {
        cs->close_q[cs->n_closing++] = (closing){fd, tutti_now_s() + LINGER_S};
        fd = -1;
    }
    pthread_mutex_unlock(&cs->mu);
    if (fd >= 0) close(fd);
}

/* ---- accepting ---- */

static int count_addr(const srv_conns *cs, const unsigned char *key) {
    int n = 0;
    for (const track *t = cs->head; t; t = t->next) n += !t->gone && !memcmp(t->key, key, 16);
    return n;
}

static void admit(srv_conns *cs, int fd, const struct sockaddr_storage *a, socklen_t alen) {
    const server_opts *o = &cs->s->opts;
    unsigned char key[16];
    addr_key((const struct sockaddr *)a, key);
    char msg[256] = "";
    pthread_mutex_lock(&cs->mu);
    if (cs->n_active >= o->max_conns)
        snprintf(msg, sizeof msg, "the server holds as many connections as it takes (%d); retry later", o->max_conns);
    else if (o->max_conns_per_ip > 0 && count_addr(cs, key) >= o->max_conns_per_ip)
        snprintf(msg, sizeof msg,
                 "this client address holds as many connections as one address may (%d); reuse "
                 "them or retry later",
                 o->max_conns_per_ip);
    track *t = msg[0] ? NULL : calloc(1, sizeof *t);
    if (t) {
        t->fd = fd;
        memcpy(&t->addr, a, sizeof *a);
        t->alen = alen;
        memcpy(t->key, key, 16);
        t->ph = PH_PRE;
        t->deadline = tutti_now_s() + o->timeout_head;
        t->next = cs->head;
        cs->head = t;
        cs->n_active++;
    }
    pthread_mutex_unlock(&cs->mu);
    if (!t) reject(cs, fd, 503, "Service Unavailable", msg[0] ? msg : "out of memory");
}

static void drop_track(srv_conns *cs, track *t) {
    pthread_mutex_lock(&cs->mu);
    if (!t->gone) t->gone = true, cs->n_active--;
    pthread_mutex_unlock(&cs->mu);
}

/* A connection before libmicrohttpd has it: its first request line, peeked */
static void first_line(srv_conns *cs, track *t) {
    char buf[FIRST_LINE_MAX];
    ssize_t n = recv(t->fd, buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    if (n <= 0) { /* closed before a request */
        drop_track(cs, t);
        close(t->fd);
        return;
    }
    int r = srv_first_line(buf, (size_t)n, sizeof buf);
    if (r == 0) return;
    if (r < 0) {
        drop_track(cs, t);
        reject(cs, t->fd, 400, "Bad Request", "malformed request line: expected METHOD /path HTTP/1.1");
        return;
    }
    pthread_mutex_lock(&cs->mu);
    t->ph = PH_HEAD; /* the head's time limit still counts from the connection's start */
    pthread_mutex_unlock(&cs->mu);
    /* libmicrohttpd closes the socket itself when it cannot take it */
    if (MHD_add_connection(cs->d, t->fd, (struct sockaddr *)&t->addr, t->alen) != MHD_YES) drop_track(cs, t);
}

/* Deadlines: a connection we hold gets 408; one libmicrohttpd holds is shut
 * down, and libmicrohttpd then closes it (the notification frees it). */
static void reap(srv_conns *cs, double now) {
    track *late[64];
    int n_late = 0;
    pthread_mutex_lock(&cs->mu);
    for (track **pp = &cs->head; *pp;) {
        track *t = *pp;
        if (t->gone) { /* freed here only, so that pointers held elsewhere stay valid until now */
            *pp = t->next;
            free(t);
            continue;
        }
        if (t->deadline > 0 && now > t->deadline && !t->shut) {
            if (t->ph == PH_PRE && n_late < 64) late[n_late++] = t;
            else if (t->ph != PH_PRE) shutdown(t->fd, SHUT_RDWR);
            t->shut = t->ph != PH_PRE;
        }
        pp = &t->next;
    }
    for (int i = 0; i < cs->n_closing;) {
        if (now > cs->close_q[i].deadline) {
            close(cs->close_q[i].fd);
            cs->close_q[i] = cs->close_q[--cs->n_closing];
        } else {
            i++;
        }
    }
    pthread_mutex_unlock(&cs->mu);
    for (int i = 0; i < n_late; i++) {
        drop_track(cs, late[i]);
        reject(cs, late[i]->fd, 408, "Request Timeout", "the request did not arrive in time");
    }
}

/* drains the lingering connections that are readable */
static void drain(srv_conns *cs, const struct pollfd *p, int n) {
    for (int i = 0; i < n; i++) {
        if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        char buf[4096];
        ssize_t r = recv(p[i].fd, buf, sizeof buf, MSG_DONTWAIT);
        if (r > 0 || (r < 0 && (errno == EAGAIN || errno == EINTR))) continue;
        pthread_mutex_lock(&cs->mu);
        for (int k = 0; k < cs->n_closing; k++)
            if (cs->close_q[k].fd == p[i].fd) {
                close(p[i].fd);
                cs->close_q[k] = cs->close_q[--cs->n_closing];
                break;
            }
        pthread_mutex_unlock(&cs->mu);
    }
}

static void *conns_main(void *arg) {
    srv_conns *cs = arg;
    int cap = 2 + cs->s->opts.max_conns + MAX_CLOSING;
    struct pollfd *p = calloc((size_t)cap, sizeof *p);
    track **pre = calloc((size_t)cap, sizeof *pre);
    if (!p || !pre) {
        free(p), free(pre);
        return NULL;
    }
    while (!cs->stop) {
        int n = 0, n_pre = 0;
        p[n++] = (struct pollfd){cs->wake[0], POLLIN, 0};
        p[n++] = (struct pollfd){cs->listen_fd, POLLIN, 0};
        pthread_mutex_lock(&cs->mu);
        for (track *t = cs->head; t && n_pre < cap - 2 - MAX_CLOSING; t = t->next)
            if (!t->gone && t->ph == PH_PRE) pre[n_pre++] = t;
        int first_closing = n;
        for (int k = 0; k < cs->n_closing; k++) p[n++] = (struct pollfd){cs->close_q[k].fd, POLLIN, 0};
        pthread_mutex_unlock(&cs->mu);
        /* connections still sending their first line are peeked every tick
         * (polling them would spin: the peeked bytes stay readable) */
        int r = poll(p, (nfds_t)n, n_pre ? 20 : 100);
        if (cs->stop) break;
        if (r > 0 && (p[1].revents & POLLIN))
            for (int k = 0; k < 64; k++) {
                struct sockaddr_storage a;
                socklen_t al = sizeof a;
                int fd = accept4(cs->listen_fd, (struct sockaddr *)&a, &al, SOCK_CLOEXEC);
                if (fd < 0) {
                    if (errno == EMFILE || errno == ENFILE) usleep(10000);
                    break;
                }
                admit(cs, fd, &a, al);
            }
        if (r > 0) drain(cs, p + first_closing, n - first_closing);
        for (int i = 0; i < n_pre; i++) first_line(cs, pre[i]);
        reap(cs, tutti_now_s());
    }
    free(p), free(pre);
    return NULL;
}

int srv_conns_start(srv_server *s, struct MHD_Daemon *d, char *err, size_t cap) {
    srv_conns *cs = s->conns;
    cs->d = d;
    if (pipe2(cs->wake, O_CLOEXEC) < 0 || pthread_create(&cs->th, NULL, conns_main, cs) != 0) {
        snprintf(err, cap, "cannot start the connection thread: %s", strerror(errno));
        return -1;
    }
    cs->started = true;
    return 0;
}

void srv_conns_stop(srv_server *s) {
    srv_conns *cs = s->conns;
    if (!cs) return;
    if (cs->started) {
        cs->stop = 1;
        ssize_t w = write(cs->wake[1], "x", 1);
        (void)w;
        pthread_join(cs->th, NULL);
        cs->started = false;
    }
    if (cs->listen_fd >= 0) close(cs->listen_fd);
    cs->listen_fd = -1;
    pthread_mutex_lock(&cs->mu);
    for (track *t = cs->head; t; t = t->next)
        if (!t->gone && t->ph == PH_PRE) {
            close(t->fd);
            t->gone = true;
            cs->n_active--;
        }
    for (int k = 0; k < cs->n_closing; k++) close(cs->close_q[k].fd);
    cs->n_closing = 0;
    pthread_mutex_unlock(&cs->mu);
}

void srv_conns_free(srv_server *s) {
    srv_conns *cs = s->conns;
    if (!cs) return;
    srv_conns_stop(s);
    for (track *t = cs->head, *nx; t; t = nx) nx = t->next, free(t);
    for (int k = 0; k < 2; k++)
        if (cs->wake[k] >= 0) close(cs->wake[k]);
    pthread_mutex_destroy(&cs->mu);
    free(cs);
    s->conns = NULL;
}

/* ---- libmicrohttpd's side ---- */

void srv_conn_notify(void *cls, struct MHD_Connection *c, void **socket_ctx, enum MHD_ConnectionNotificationCode code) {
    srv_server *s = cls;
    srv_conns *cs = s->conns;
    if (!cs) return;
    pthread_mutex_lock(&cs->mu);
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        for (track *t = cs->head; ci && t; t = t->next)
            if (!t->gone && !t->mhd && t->ph == PH_HEAD && t->fd == ci->connect_fd) {
                t->mhd = c;
                *socket_ctx = t;
                break;
            }
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED && *socket_ctx) {
        /* called before libmicrohttpd closes the socket: a deadline's
         * shutdown never reaches a reused descriptor */
        track *t = *socket_ctx;
        if (!t->gone) t->gone = true, cs->n_active--;
        *socket_ctx = NULL;
    }
    pthread_mutex_unlock(&cs->mu);
}

static void set_phase(srv_server *s, struct MHD_Connection *c, phase ph, double limit_s) {
    srv_conns *cs = s->conns;
    /* libmicrohttpd's silence limit is off while a request generates (a
     * long prompt's first streamed piece may take longer; the client
     * leaving cancels it) and back once the response is out */
    if (ph == PH_BUSY) MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    if (ph == PH_IDLE) MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)s->opts.timeout_read);
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    if (!cs || !ci || !ci->socket_context) return;
    pthread_mutex_lock(&cs->mu);
    track *t = ci->socket_context;
    if (!t->gone) {
        t->ph = ph;
        t->deadline = limit_s > 0 ? tutti_now_s() + limit_s : 0;
    }
    pthread_mutex_unlock(&cs->mu);
}

void srv_conn_head_read(srv_server *s, struct MHD_Connection *c) { set_phase(s, c, PH_BODY, s->opts.timeout_body); }
void srv_conn_request_read(srv_server *s, struct MHD_Connection *c) { set_phase(s, c, PH_BUSY, 0); }
void srv_conn_response_sent(srv_server *s, struct MHD_Connection *c) { set_phase(s, c, PH_IDLE, s->opts.timeout_head); }
