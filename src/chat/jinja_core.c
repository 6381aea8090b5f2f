/* Arena, error unwinding, strings and growable buffers of the Jinja engine. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja.h"

struct jchunk {
    struct jchunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

_Noreturn void jctx_fail(jctx *c, int line, int col, const char *fmt, ...) {
    size_t off = 0;
    if (line > 0) off = (size_t)snprintf(c->err, sizeof c->err, "line %d, column %d: ", line, col);
    if (off >= sizeof c->err) off = sizeof c->err - 1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err + off, sizeof c->err - off, fmt, ap);
    va_end(ap);
    longjmp(c->jmp, 1);
}

void *jalloc(jctx *c, size_t n) {
    struct jarena *a = &c->arena;
    n = (n + 15) & ~(size_t)15;
    if (n > JINJA_MAX_ARENA || a->used_total + n > JINJA_MAX_ARENA)
        jctx_fail(c, 0, 0, "template needs more than %u MiB of memory (runaway loop or string growth?)",
                  JINJA_MAX_ARENA >> 20);
    struct jchunk *h = a->head;
    if (!h || h->cap - h->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        h = malloc(sizeof *h + cap);
        if (!h) jctx_fail(c, 0, 0, "out of memory");
        h->used = 0;
        h->cap = cap;
        h->next = a->head;
        a->head = h;
    }
    void *p = h->data + h->used;
    h->used += n;
    a->used_total += n;
    memset(p, 0, n);
    return p;
}

void jarena_free(struct jarena *a) {
    struct jchunk *h = a->head;
    while (h) {
        struct jchunk *next = h->next;
        free(h);
        h = next;
    }
    a->head = NULL;
    a->used_total = 0;
}

jstr jstr_dup(jctx *c, const char *p, size_t n) {
    char *d = jalloc(c, n + 1);
    if (n) memcpy(d, p, n);
    return (jstr){d, n, NULL};
}

jstr jstr_cat(jctx *c, jstr a, jstr b) {
    if (a.n > JINJA_MAX_ARENA || b.n > JINJA_MAX_ARENA - a.n) jctx_fail(c, 0, 0, "string too long");
    char *d = jalloc(c, a.n + b.n + 1);
    if (a.n) memcpy(d, a.p, a.n);
    if (b.n) memcpy(d + a.n, b.p, b.n);
    jstr r = {d, a.n + b.n, NULL};
    if (jstr_has_data(a) || jstr_has_data(b)) {
        unsigned char *m = jalloc(c, r.n + 1);
        if (a.d && a.n) memcpy(m, a.d, a.n);
        if (b.d && b.n) memcpy(m + a.n, b.d, b.n);
        r.d = m;
    }
    return r;
}

jstr jstr_sub(jstr s, size_t off, size_t n) { return (jstr){s.p + off, n, s.d ? s.d + off : NULL}; }

bool jstr_has_data(jstr s) {
    if (!s.d) return false;
    for (size_t i = 0; i < s.n; i++)
        if (s.d[i]) return true;
    return false;
}

jstr jstr_data(jctx *c, const char *p, size_t n) {
    jstr r = jstr_dup(c, p, n);
    unsigned char *m = jalloc(c, n + 1);
    memset(m, 1, n);
    r.d = m;
    return r;
}

jstr jstr_taint(jctx *c, jstr s, bool data) {
    if (!data) return s;
    unsigned char *m = jalloc(c, s.n + 1);
    memset(m, 1, s.n);
    s.d = m;
    return s;
}

const char *jmemfind(const char *h, size_t hn, const char *nd, size_t nn) {
    if (nn == 0) return h;
    if (nn > hn) return NULL;
    const char *end = h + (hn - nn) + 1;
    for (const char *p = h; p < end; p++) {
        p = memchr(p, nd[0], (size_t)(end - p));
        if (!p) return NULL;
        if (memcmp(p, nd, nn) == 0) return p;
    }
    return NULL;
}

jstr jstr_z(const char *z) { return (jstr){z, strlen(z), NULL}; }

bool jstr_eq(jstr a, jstr b) { return a.n == b.n && (a.n == 0 || memcmp(a.p, b.p, a.n) == 0); }

bool jstr_eqz(jstr a, const char *z) {
    size_t n = strlen(z);
    return a.n == n && memcmp(a.p, z, n) == 0;
}

/* Buffers grow inside the arena (old blocks are abandoned, at most doubling
 * the footprint) so that an error unwinding through a half-built string
 * leaks nothing.  The mark array is made the first time a data byte comes
 * (arena memory is zeroed: everything before it is template text). */
static void jbuf_grow(jctx *c, struct jbuf *b, size_t n, bool need_marks) {
    if (n > JINJA_MAX_OUTPUT || b->n + n > JINJA_MAX_OUTPUT)
        jctx_fail(c, 0, 0, "rendered text longer than %u MiB", JINJA_MAX_OUTPUT >> 20);
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1) cap *= 2;
        char *q = jalloc(c, cap);
        if (b->n) memcpy(q, b->p, b->n);
        b->p = q;
        if (b->d) {
            unsigned char *m = jalloc(c, cap);
            if (b->n) memcpy(m, b->d, b->n);
            b->d = m;
        }
        b->cap = cap;
    }
    if (need_marks && !b->d) b->d = jalloc(c, b->cap);
}

void jbuf_put(jctx *c, struct jbuf *b, const char *p, size_t n) { jbuf_put_as(c, b, p, n, false); }

void jbuf_put_as(jctx *c, struct jbuf *b, const char *p, size_t n, bool data) {
    if (n == 0) return;
    jbuf_grow(c, b, n, data);
    memcpy(b->p + b->n, p, n);
    if (b->d) memset(b->d + b->n, data ? 1 : 0, n);
    b->n += n;
    b->p[b->n] = 0;
}

void jbuf_puts(jctx *c, struct jbuf *b, jstr s) {
    if (s.n == 0) return;
    bool data = jstr_has_data(s);
    jbuf_grow(c, b, s.n, data);
    memcpy(b->p + b->n, s.p, s.n);
    if (b->d) {
        if (data) memcpy(b->d + b->n, s.d, s.n);
        else memset(b->d + b->n, 0, s.n);
    }
    b->n += s.n;
    b->p[b->n] = 0;
}

void jbuf_putz(jctx *c, struct jbuf *b, const char *z) { jbuf_put(c, b, z, strlen(z)); }

jstr jbuf_take(jctx *c, struct jbuf *b) {
    (void)c;
    jstr s = {b->p ? b->p : "", b->n, b->d};
    b->p = NULL;
    b->d = NULL;
    b->n = b->cap = 0;
    return s;
}
