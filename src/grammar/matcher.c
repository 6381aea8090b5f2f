/* Byte-level grammar matcher: llama.cpp's model (a state is the set of
 * stacks of element positions still alive; a stack's top is always a
 * character class, the empty stack means "complete"), made into a lazily
 * built automaton.
 *
 * Stacks are hash-consed persistent lists (position, parent), so equal
 * stacks have one id and pushing/popping costs O(1); a state is the sorted
 * set of its stack ids plus the bytes of an unfinished UTF-8 character,
 * hash-consed too.  Each (state, byte) transition is computed once and
 * memoised in the state's 256-entry table.  Repetitions were made tail
 * recursive by the parser, so x* inside a string keeps coming back to the
 * same state and the automaton stays small; nesting (JSON in JSON) makes
 * new states per depth, as it must.
 *
 * UTF-8: character classes hold code points; a lead byte opens a pending
 * character whose possible code points form an interval, and only stacks
 * whose class meets that interval stay (so "is there any continuation" is
 * exact per byte).  Overlong forms, surrogates and values above U+10FFFF
 * are rejected as they are impossible code points for the length. */
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "util/error.h"

#define GM_MAX_STATES (1 << 22)
#define GM_MAX_STACKS (1 << 26)

static const uint32_t k_min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
static const uint32_t k_max_cp[5] = {0, 0x7F, 0x7FF, 0xFFFF, 0x10FFFF};

static uint64_t mix64(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h;
}

/* ---- stacks ---- */

static int rehash_stacks(tutti_grammar_matcher *m) {
    int32_t nc = m->stk_hcap ? m->stk_hcap * 2 : 1024;
    int32_t *h = malloc(sizeof(int32_t) * (size_t)nc);
    if (!h) return -1;
    for (int32_t i = 0; i < nc; i++) h[i] = -1;
    for (int32_t id = 1; id < m->n_stk; id++) {
        uint64_t k = mix64(((uint64_t)(uint32_t)m->stk[id].pos << 32) | (uint32_t)m->stk[id].parent);
        int32_t j = (int32_t)(k & (uint64_t)(nc - 1));
        while (h[j] >= 0) j = (j + 1) & (nc - 1);
        h[j] = id;
    }
    free(m->stk_hash);
    m->stk_hash = h, m->stk_hcap = nc;
    return 0;
}

/* The stack (pos, parent), created if new; -3 out of memory. */
static int32_t stack_get(tutti_grammar_matcher *m, int32_t pos, int32_t parent) {
    if ((int64_t)(m->n_stk + 1) * 2 > m->stk_hcap && rehash_stacks(m) < 0) return -3;
    uint64_t k = mix64(((uint64_t)(uint32_t)pos << 32) | (uint32_t)parent);
    int32_t j = (int32_t)(k & (uint64_t)(m->stk_hcap - 1));
    while (m->stk_hash[j] >= 0) {
        const gm_stack *s = &m->stk[m->stk_hash[j]];
        if (s->pos == pos && s->parent == parent) return m->stk_hash[j];
        j = (j + 1) & (m->stk_hcap - 1);
    }
    if (m->n_stk >= GM_MAX_STACKS) return -3;
    if (m->n_stk == m->cap_stk) {
        int32_t nc = m->cap_stk * 2;
        gm_stack *ns = realloc(m->stk, sizeof(gm_stack) * (size_t)nc);
        if (!ns) return -3;
        m->stk = ns, m->cap_stk = nc;
    }
    if (m->n_stk >= m->cap_visit) {
        int32_t nc = m->cap_visit * 2;
        uint32_t *nv = realloc(m->visit, sizeof(uint32_t) * (size_t)nc);
        if (!nv) return -3;
        memset(nv + m->cap_visit, 0, sizeof(uint32_t) * (size_t)(nc - m->cap_visit));
        m->visit = nv, m->cap_visit = nc;
    }
    int32_t id = m->n_stk++;
    m->stk[id] = (gm_stack){pos, parent};
    m->stk_hash[j] = id;
    return id;
}

/* ---- states ---- */

static uint64_t state_key(const int32_t *ids, int32_t n, uint32_t v, uint8_t rem, uint8_t len) {
    uint64_t h = mix64(((uint64_t)v << 16) | ((uint64_t)rem << 8) | len);
    for (int32_t i = 0; i < n; i++) h = mix64(h ^ (uint32_t)ids[i]) + (uint64_t)i;
    return h;
}

static int rehash_states(tutti_grammar_matcher *m) {
    int32_t nc = m->st_hcap ? m->st_hcap * 2 : 1024;
    int32_t *h = malloc(sizeof(int32_t) * (size_t)nc);
    if (!h) return -1;
    for (int32_t i = 0; i < nc; i++) h[i] = -1;
    for (int32_t id = 0; id < m->n_st; id++) {
        const gm_state *s = &m->st[id];
        uint64_t k = state_key(m->pool + s->off, s->n, s->v, s->rem, s->len);
        int32_t j = (int32_t)(k & (uint64_t)(nc - 1));
        while (h[j] >= 0) j = (j + 1) & (nc - 1);
        h[j] = id;
    }
    free(m->st_hash);
    m->st_hash = h, m->st_hcap = nc;
    return 0;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

/* The state of ids[0..n) (sorted, unique) with a pending character, created
 * if new; -3 out of memory. */
static int32_t state_get(tutti_grammar_matcher *m, const int32_t *ids, int32_t n, uint32_t v, uint8_t rem,
                         uint8_t len) {
    if ((int64_t)(m->n_st + 1) * 2 > m->st_hcap && rehash_states(m) < 0) return -3;
    uint64_t k = state_key(ids, n, v, rem, len);
    int32_t j = (int32_t)(k & (uint64_t)(m->st_hcap - 1));
    while (m->st_hash[j] >= 0) {
        const gm_state *s = &m->st[m->st_hash[j]];
        if (s->n == n && s->v == v && s->rem == rem && s->len == len &&
            !memcmp(m->pool + s->off, ids, sizeof(int32_t) * (size_t)n))
            return m->st_hash[j];
        j = (j + 1) & (m->st_hcap - 1);
    }
    if (m->n_st >= GM_MAX_STATES) return -3;
    if (m->n_st == m->cap_st) {
        int32_t nc = m->cap_st * 2;
        gm_state *ns = realloc(m->st, sizeof(gm_state) * (size_t)nc);
        if (!ns) return -3;
        m->st = ns, m->cap_st = nc;
    }
    if (m->n_pool + n > m->cap_pool) {
        int64_t nc = m->cap_pool * 2;
        while (nc < m->n_pool + n) nc *= 2;
        int32_t *np = realloc(m->pool, sizeof(int32_t) * (size_t)nc);
        if (!np) return -3;
        m->pool = np, m->cap_pool = nc;
    }
    memcpy(m->pool + m->n_pool, ids, sizeof(int32_t) * (size_t)n);
    int32_t id = m->n_st++;
    gm_state *s = &m->st[id];
    s->off = m->n_pool, s->n = n, s->v = v, s->rem = rem, s->len = len;
    s->accept = rem == 0 && n > 0 && ids[0] == 0;
    s->trans = NULL;
    s->mask = -1;
    m->n_pool += n;
    m->st_hash[j] = id;
    return id;
}

/* ---- closure: expand rule references until every stack's top is a class ---- */

static int work_push(tutti_grammar_matcher *m, int32_t *nw, int32_t node) {
    if (node < 0) return -3;
    if (m->visit[node] == m->stamp) return 0;
    m->visit[node] = m->stamp;
    if (*nw == m->cap_work) {
        int32_t nc = m->cap_work * 2;
        int32_t *w = realloc(m->work, sizeof(int32_t) * (size_t)nc);
        if (!w) return -3;
        m->work = w, m->cap_work = nc;
    }
    m->work[(*nw)++] = node;
    return 0;
}

static int out_push(tutti_grammar_matcher *m, int32_t *no, int32_t node) {
    if (*no == m->cap_out) {
        int32_t nc = m->cap_out * 2;
        int32_t *o = realloc(m->out, sizeof(int32_t) * (size_t)nc);
        if (!o) return -3;
        m->out = o, m->cap_out = nc;
    }
    m->out[(*no)++] = node;
    return 0;
}

static void new_stamp(tutti_grammar_matcher *m) {
    if (++m->stamp == 0) {
        memset(m->visit, 0, sizeof(uint32_t) * (size_t)m->cap_visit);
        m->stamp = 1;
    }
}

/* The stack after the element at node's top was matched: pops through ENDs. */
static int32_t stack_after(tutti_grammar_matcher *m, int32_t node) {
    const gm_stack s = m->stk[node];
    if (m->g->elems[s.pos + 1].type == GR_END) return s.parent;
    return stack_get(m, s.pos + 1, s.parent);
}

/* Expands the queued stacks into m->out (class tops and the empty stack);
 * returns the count or -3. */
static int32_t closure_run(tutti_grammar_matcher *m, int32_t nw) {
    const tutti_grammar *g = m->g;
    int32_t no = 0;
    while (nw > 0) {
        int32_t node = m->work[--nw];
        if (node == 0) {
            if (out_push(m, &no, 0) < 0) return -3;
            continue;
        }
        gm_stack s = m->stk[node];
        gr_elem e = g->elems[s.pos];
        if (e.type == GR_CLASS) {
            if (out_push(m, &no, node) < 0) return -3;
            continue;
        }
        /* reference: continue after it, then each alternative of the rule */
        int32_t cont = g->elems[s.pos + 1].type == GR_END ? s.parent : stack_get(m, s.pos + 1, s.parent);
        if (cont < 0) return -3;
        for (int32_t a = 0; a < g->rule_nalt[e.arg]; a++) {
            int32_t start = g->alt_pos[g->rule_alt0[e.arg] + a];
            int32_t child = g->elems[start].type == GR_END ? cont : stack_get(m, start, cont);
            if (work_push(m, &nw, child) < 0) return -3;
        }
    }
    /* a state's stacks are usually few: insertion sort (qsort's set-up is a
     * tenth of the time of new states of small grammars) */
    if (no <= 32)
        for (int32_t i = 1; i < no; i++) {
            int32_t x = m->out[i], j = i;
            for (; j > 0 && m->out[j - 1] > x; j--) m->out[j] = m->out[j - 1];
            m->out[j] = x;
        }
    else qsort(m->out, (size_t)no, sizeof(int32_t), cmp_i32);
    return no;
}

/* ---- transitions ---- */

/* A pending character whose every completion is a valid code point that
 * every kept stack's class holds: its exact bytes no longer matter, only
 * how many are still to come.  Such states share v = GM_ANY, which keeps
 * the automaton from growing one state per lead byte (JSON strings accept
 * any non-ASCII character). */
#define GM_ANY 0xFFFFFFFFu

/* State after a complete code point cp (GM_ANY: one every stack holds) from
 * the stacks ids[0..n). */
static int32_t advance_cp(tutti_grammar_matcher *m, const int32_t *ids, int32_t n, uint32_t cp) {
    new_stamp(m);
    int32_t nw = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t node = ids[i];
        if (node == 0) continue;
        const gr_elem *e = &m->g->elems[m->stk[node].pos];
        if (cp != GM_ANY && !gr_class_has(m->g, e->arg, cp)) continue;
        int32_t nx = stack_after(m, node);
        if (work_push(m, &nw, nx) < 0) return -3;
    }
    if (nw == 0) return -1;
    int32_t no = closure_run(m, nw);
    if (no < 0) return -3;
    return state_get(m, m->out, no, 0, 0, 0);
}

int32_t gm_step_slow(tutti_grammar_matcher *m, int32_t s, uint8_t b) {
    if (!m->st[s].trans) {
        int32_t *t = malloc(sizeof(int32_t) * 256);
        if (!t) return -3;
        for (int i = 0; i < 256; i++) t[i] = -2;
        m->st[s].trans = t;
    }
    gm_state cur = m->st[s]; /* copy: m->st may move while states are made */
    int32_t r;
    /* the stack ids are copied too, since the pool may move */
    int32_t stack_buf[64];
    int32_t *ids = cur.n <= 64 ? stack_buf : malloc(sizeof(int32_t) * (size_t)cur.n);
    if (!ids) return -3;
    memcpy(ids, m->pool + cur.off, sizeof(int32_t) * (size_t)cur.n);
    uint32_t v;
    uint8_t rem, len;
    if (cur.rem == 0) {
        if (b < 0x80) {
            r = advance_cp(m, ids, cur.n, b);
            goto done;
        }
        len = b >= 0xC2 && b <= 0xDF ? 2 : b >= 0xE0 && b <= 0xEF ? 3 : b >= 0xF0 && b <= 0xF4 ? 4 : 0;
        if (!len) {
            r = -1;
            goto done;
        }
        v = b & (0x7Fu >> len);
        rem = (uint8_t)(len - 1);
    } else {
        if ((b & 0xC0) != 0x80) {
            r = -1;
            goto done;
        }
        rem = (uint8_t)(cur.rem - 1);
        len = cur.len;
        if (cur.v == GM_ANY) { /* any continuation byte, every stack follows */
            r = rem == 0 ? advance_cp(m, ids, cur.n, GM_ANY) : state_get(m, ids, cur.n, GM_ANY, rem, len);
            goto done;
        }
        v = (cur.v << 6) | (b & 0x3Fu);
        if (rem == 0) {
            if (v < k_min_cp[len] || v > k_max_cp[len] || (v >= 0xD800 && v <= 0xDFFF)) r = -1;
            else r = advance_cp(m, ids, cur.n, v);
            goto done;
        }
    }
    /* a pending character: keep the stacks whose class meets the code
     * points it can still become */
    {
        uint32_t lo = v << (6 * rem), hi = lo | ((1u << (6 * rem)) - 1);
        if (lo < k_min_cp[len]) lo = k_min_cp[len];
        if (hi > k_max_cp[len]) hi = k_max_cp[len];
        int32_t k = 0;
        bool all = lo == (v << (6 * rem)) && hi == (lo | ((1u << (6 * rem)) - 1)) && (hi < 0xD800 || lo > 0xDFFF);
        if (lo <= hi)
            for (int32_t i = 0; i < cur.n; i++) {
                if (ids[i] == 0) continue;
                int32_t cls = m->g->elems[m->stk[ids[i]].pos].arg;
                if (!gr_class_meets(m->g, cls, lo, hi)) continue;
                ids[k++] = ids[i];
                all = all && gr_class_covers(m->g, cls, lo, hi);
            }
        r = k ? state_get(m, ids, k, all ? GM_ANY : v, rem, len) : -1;
    }
done:
    if (ids != stack_buf) free(ids);
    if (r >= -1) m->st[s].trans[b] = r;
    return r;
}

int32_t gm_state_of(tutti_grammar_matcher *m, const int32_t *ids, int32_t n) { return state_get(m, ids, n, 0, 0, 0); }

/* ---- public ---- */

tutti_grammar_matcher *tutti_grammar_matcher_new(const tutti_grammar *g) {
    if (!g) {
        tutti_set_error("grammar matcher: no grammar");
        return NULL;
    }
    tutti_grammar_matcher *m = calloc(1, sizeof *m);
    if (!m) goto oom;
    m->g = g;
    m->cap_stk = m->cap_visit = m->cap_st = m->cap_work = m->cap_out = 256;
    m->cap_pool = 1024;
    m->stk = malloc(sizeof(gm_stack) * (size_t)m->cap_stk);
    m->visit = calloc((size_t)m->cap_visit, sizeof(uint32_t));
    m->st = malloc(sizeof(gm_state) * (size_t)m->cap_st);
    m->pool = malloc(sizeof(int32_t) * (size_t)m->cap_pool);
    m->work = malloc(sizeof(int32_t) * (size_t)m->cap_work);
    m->out = malloc(sizeof(int32_t) * (size_t)m->cap_out);
    if (!m->stk || !m->visit || !m->st || !m->pool || !m->work || !m->out) goto oom;
    m->stk[0] = (gm_stack){-1, -1}; /* the empty stack */
    m->n_stk = 1;
    if (rehash_stacks(m) < 0 || rehash_states(m) < 0) goto oom;
    new_stamp(m);
    int32_t nw = 0;
    for (int32_t a = 0; a < g->rule_nalt[g->root]; a++) {
        int32_t start = g->alt_pos[g->rule_alt0[g->root] + a];
        int32_t child = g->elems[start].type == GR_END ? 0 : stack_get(m, start, 0);
        if (work_push(m, &nw, child) < 0) goto oom;
    }
    int32_t no = closure_run(m, nw);
    if (no < 0) goto oom;
    m->initial = m->cur = state_get(m, m->out, no, 0, 0, 0);
    if (m->initial < 0) goto oom;
    return m;
oom:
    tutti_grammar_matcher_free(m);
    tutti_set_error("grammar matcher: out of memory");
    return NULL;
}

void gm_masks_clear(tutti_grammar_matcher *m);

void tutti_grammar_matcher_free(tutti_grammar_matcher *m) {
    if (!m) return;
    for (int32_t i = 0; i < m->n_st; i++) free(m->st[i].trans);
    gm_masks_clear(m);
    free(m->masks);
    free(m->stk), free(m->stk_hash), free(m->st), free(m->st_hash), free(m->pool);
    free(m->visit), free(m->work), free(m->out);
    free(m->walk), free(m->save), free(m->ids_tmp), free(m->bits), free(m->chain);
    free(m->cls_run), free(m->cls_bx), free(m->big_cls);
    free(m);
}

void tutti_grammar_matcher_reset(tutti_grammar_matcher *m) { m->cur = m->initial; }

int32_t tutti_grammar_matcher_state(const tutti_grammar_matcher *m) { return m->cur; }

int tutti_grammar_matcher_set_state(tutti_grammar_matcher *m, int32_t state) {
    if (state < 0 || state >= m->n_st) return tutti_set_error("grammar matcher: no state %d", state);
    m->cur = state;
    return 0;
}

size_t tutti_grammar_matcher_accept_prefix(tutti_grammar_matcher *m, const char *bytes, size_t n) {
    size_t i = 0;
    int32_t s = m->cur;
    for (; i < n; i++) {
        int32_t nx = gm_step(m, s, (uint8_t)bytes[i]);
        if (nx < 0) break;
        s = nx;
    }
    m->cur = s;
    return i;
}

int tutti_grammar_matcher_accept(tutti_grammar_matcher *m, const char *bytes, size_t n) {
    int32_t s = m->cur;
    for (size_t i = 0; i < n; i++) {
        int32_t nx = gm_step(m, s, (uint8_t)bytes[i]);
        if (nx == -3) return tutti_set_error("grammar matcher: out of memory");
        if (nx < 0)
            return tutti_set_error("grammar: byte %zu (0x%02x) of the text is not allowed here", i,
                                   (unsigned)(uint8_t)bytes[i]);
        s = nx;
    }
    m->cur = s;
    return 0;
}

bool tutti_grammar_matcher_is_complete(const tutti_grammar_matcher *m) { return m->st[m->cur].accept; }

int tutti_grammar_matcher_allowed_bytes(tutti_grammar_matcher *m, bool *allowed) {
    for (int b = 0; b < 256; b++) {
        int32_t nx = gm_step(m, m->cur, (uint8_t)b);
        if (nx == -3) return tutti_set_error("grammar matcher: out of memory");
        allowed[b] = nx >= 0;
    }
    allowed[256] = m->st[m->cur].accept;
    return 0;
}

bool tutti_grammar_matcher_can_continue(tutti_grammar_matcher *m) {
    /* a non-empty stack always has a class top with at least one code point
     * (empty classes were dropped at compile time) */
    const gm_state *s = &m->st[m->cur];
    return s->rem > 0 || s->n > (s->accept ? 1 : 0);
}

int32_t tutti_grammar_matcher_n_states(const tutti_grammar_matcher *m) { return m->n_st; }
