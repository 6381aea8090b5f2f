/* A model server's answers for remote members (remote_json.h): bytes in,
 * no network.  The cJSON parser reads every answer; llama-server's
 * /completion answer has a fast scanner of its own (below), checked bit for
 * bit against the cJSON path by fuzz/fuzz_remote.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "member/remote_json.h"
#include "util/error.h"

void fusion_remote_excerpt(const char *s, size_t n, char *out, size_t cap) {
    size_t k = 0;
    for (size_t i = 0; i < n && k + 1 < cap && k < 120; i++) out[k++] = (s[i] >= 32 && s[i] < 127) ? s[i] : '.';
    out[k] = 0;
}

/* The JSON root of an answer, or NULL + error. */
static cJSON *parse_json(const char *where, const char *resp, size_t n) {
    cJSON *j = cJSON_ParseWithLength(resp, n);
    if (!j) {
        char ex[128];
        fusion_remote_excerpt(resp, n, ex, sizeof ex);
        tutti_set_error("%s: the answer is not JSON: \"%s\"", where, ex);
    }
    return j;
}

/* ---- piece -> id (classic OpenAI answers name tokens by text) ---- */

static _Thread_local const fusion_remote_vocab *g_sort_rv; /* qsort has no context argument (C11) */

static int cmp_piece(const void *a, const void *b) {
    const fusion_remote_vocab *rv = g_sort_rv;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    int64_t lx = rv->piece_off[x + 1] - rv->piece_off[x], ly = rv->piece_off[y + 1] - rv->piece_off[y];
    int c = memcmp(rv->pieces + rv->piece_off[x], rv->pieces + rv->piece_off[y], (size_t)(lx < ly ? lx : ly));
    if (c) return c;
    if (lx != ly) return lx < ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

static int build_pieces(fusion_remote_vocab *rv) {
    int32_t V = rv->n_vocab;
    rv->piece_off = malloc(sizeof(int64_t) * ((size_t)V + 1));
    rv->by_piece = malloc(sizeof(int32_t) * (size_t)V);
    size_t cap = (size_t)V * 8 + 64, n = 0;
    rv->pieces = malloc(cap);
    if (!rv->piece_off || !rv->by_piece || !rv->pieces) return tutti_set_error("out of memory");
    for (int32_t i = 0; i < V; i++) {
        rv->piece_off[i] = (int64_t)n;
        for (;;) {
            int32_t k = tutti_token_to_piece(rv->vocab, i, true, rv->pieces + n,
                                             (int32_t)(cap - n > 1 << 20 ? 1 << 20 : cap - n));
            if (k >= 0) {
                n += (size_t)k;
                break;
            }
            char *np = realloc(rv->pieces, cap * 2);
            if (!np) return tutti_set_error("out of memory");
            rv->pieces = np, cap *= 2;
        }
        rv->by_piece[i] = i;
    }
    rv->piece_off[V] = (int64_t)n;
    g_sort_rv = rv;
    qsort(rv->by_piece, (size_t)V, sizeof(int32_t), cmp_piece);
    return 0;
}

int fusion_remote_vocab_init(fusion_remote_vocab *rv, const tutti_vocab *vocab, int32_t n_vocab) {
    memset(rv, 0, sizeof *rv);
    rv->vocab = vocab;
    rv->n_vocab = n_vocab;
    rv->seen = calloc((size_t)n_vocab + 1, 1);
    return rv->seen ? 0 : tutti_set_error("out of memory");
}

void fusion_remote_vocab_free(fusion_remote_vocab *rv) {
    free(rv->seen), free(rv->by_piece), free(rv->pieces), free(rv->piece_off);
    memset(rv, 0, sizeof *rv);
}

/* Equal pieces (SPM's byte token <0x61> and "a"): the highest id, as
 * byte-fallback and control tokens come first in the vocabularies, and a
 * server naming a token by its text means the ordinary one. */
int32_t fusion_remote_piece_id(fusion_remote_vocab *rv, const char *s, size_t n) {
    if (!rv->vocab) return -1;
    if (!rv->by_piece && build_pieces(rv) < 0) return -1;
    int32_t lo = 0, hi = rv->n_vocab;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2, id = rv->by_piece[mid];
        size_t l = (size_t)(rv->piece_off[id + 1] - rv->piece_off[id]);
        int c = memcmp(rv->pieces + rv->piece_off[id], s, l < n ? l : n);
        if (!c) c = l < n ? -1 : l > n;
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    int32_t found = -1;
    for (; lo < rv->n_vocab; lo++) {
        int32_t id = rv->by_piece[lo];
        size_t l = (size_t)(rv->piece_off[id + 1] - rv->piece_off[id]);
        if (l != n || memcmp(rv->pieces + rv->piece_off[id], s, n)) break;
        found = id; /* equal pieces are sorted by id */
    }
    return found;
}

/* ---- next-token answers ---- */

/* Reads one entry {id|token, logprob} into (*id, *lp). */
static int read_entry(fusion_remote_vocab *rv, const cJSON *e, int32_t *id, double *lp) {
    const cJSON *jid = cJSON_GetObjectItemCaseSensitive(e, "id");
    const cJSON *jlp = cJSON_GetObjectItemCaseSensitive(e, "logprob");
    if (!cJSON_IsNumber(jlp)) return -1;
    *lp = jlp->valuedouble;
    if (cJSON_IsNumber(jid)) {
        double d = jid->valuedouble;
        if (!(d >= 0 && d < rv->n_vocab) || d != floor(d)) return -2;
        *id = (int32_t)d;
        return 0;
    }
    const cJSON *tok = cJSON_GetObjectItemCaseSensitive(e, "token");
    if (!cJSON_IsString(tok)) return -1;
    *id = fusion_remote_piece_id(rv, tok->valuestring, strlen(tok->valuestring));
    return *id < 0 ? -3 : 0;
}

/* Finds the array of top entries in a response. */
static const cJSON *top_list(int api, const cJSON *root, bool *classic) {
    *classic = false;
    if (api == FUSION_REMOTE_API_LLAMA) {
        const cJSON *cp = cJSON_GetObjectItemCaseSensitive(root, "completion_probabilities");
        const cJSON *first = cJSON_IsArray(cp) ? cJSON_GetArrayItem(cp, 0) : NULL;
        return first ? cJSON_GetObjectItemCaseSensitive(first, "top_logprobs") : NULL;
    }
    const cJSON *ch = cJSON_GetObjectItemCaseSensitive(root, "choices");
    const cJSON *c0 = cJSON_IsArray(ch) ? cJSON_GetArrayItem(ch, 0) : NULL;
    const cJSON *lp = c0 ? cJSON_GetObjectItemCaseSensitive(c0, "logprobs") : NULL;
    if (!lp) return NULL;
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(lp, "content");
    if (cJSON_IsArray(content)) { /* llama-server's /v1 form: by id */
        const cJSON *f = cJSON_GetArrayItem(content, 0);
        return f ? cJSON_GetObjectItemCaseSensitive(f, "top_logprobs") : NULL;
    }
    const cJSON *tl = cJSON_GetObjectItemCaseSensitive(lp, "top_logprobs"); /* classic: [{text: lp}] */
    *classic = true;
    return cJSON_IsArray(tl) ? cJSON_GetArrayItem(tl, 0) : NULL;
}

/* ---- fast path for llama-server's /completion answer ----
 *
 * With the full distribution the answer holds n_vocab entries, each with
 * the token's text and bytes, and cJSON builds a tree of them (about 0.4 ms
 * a step for a 512-token vocabulary, most of our part of a step).  This
 * scanner reads only completion_probabilities[0].top_logprobs[].{id,
 * logprob} and timings.{prompt_ms, predicted_ms}, skipping every other
 * value while checking the JSON syntax.  It gives up (-1) on anything it
 * does not expect -- duplicate or escaped keys, a token listed twice, an id
 * out of range, a non-finite number, a number or string cJSON would not
 * take -- and the cJSON path then parses the answer and names the error.
 * So whatever the scanner reads, cJSON reads the same way (fuzz/
 * fuzz_remote.c checks it bit for bit). */

typedef struct jscan {
    const char *p, *end; /* not NUL-terminated: nothing at or past end is read */
} jscan;

static void js_ws(jscan *s) {
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\n' || *s->p == '\r' || *s->p == '\t')) s->p++;
}

static bool js_lit(jscan *s, char c) {
    js_ws(s);
    if (s->p < s->end && *s->p == c) {
        s->p++;
        return true;
    }
    return false;
}

/* \uXXXX at p (p + 6 <= end): its code unit, or -1 when a digit is not hex */
static long js_hex4(const char *p) {
    long v = 0;
    for (int i = 2; i < 6; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* a string; [*a, *a + *n) are its raw (still escaped) contents.  Escapes
 * are checked as strictly as cJSON decodes them (or more: then the full
 * parser decides), so that the scanner never takes a string it rejects:
 * one of \" \\ \/ \b \f \n \r \t, or \u with 4 hex digits, a surrogate
 * only as a high-low pair. */
static bool js_str(jscan *s, const char **a, size_t *n) {
    js_ws(s);
    if (s->p >= s->end || *s->p != '"') return false;
    const char *st = ++s->p;
    while (s->p < s->end && *s->p != '"') {
        if ((unsigned char)*s->p < 0x20) return false;
        if (*s->p != '\\') {
            s->p++;
            continue;
        }
        if (s->end - s->p < 2) return false;
        char c = s->p[1];
        if (c != 'u') {
            if (!c || !strchr("\"\\/bfnrt", c)) return false;
            s->p += 2;
            continue;
        }
        long u = s->end - s->p >= 6 ? js_hex4(s->p) : -1;
        if (u < 0 || (u >= 0xDC00 && u <= 0xDFFF)) return false;
        if (u >= 0xD800 && u <= 0xDBFF) {
            long lo = s->end - s->p >= 12 && s->p[6] == '\\' && s->p[7] == 'u' ? js_hex4(s->p + 6) : -1;
            if (!(lo >= 0xDC00 && lo <= 0xDFFF)) return false;
            s->p += 6;
        }
        s->p += 6;
    }
    if (s->p >= s->end) return false;
    *a = st, *n = (size_t)(s->p - st);
    s->p++;
    return true;
}

/* a key and its ':' (in skipped values: any key) */
static bool js_any_key(jscan *s) {
    const char *a;
    size_t n;
    return js_str(s, &a, &n) && js_lit(s, ':');
}

/* a key that is compared, and its ':'.  One with an escape is declined:
 * cJSON compares the decoded text ("\u0069d" is "id", "id\u0000x" too) */
static bool js_name(jscan *s, const char **a, size_t *n) {
    return js_str(s, a, n) && !memchr(*a, '\\', *n) && js_lit(s, ':');
}

static bool js_key(jscan *s, const char *want, bool *match) {
    const char *a;
    size_t n;
    if (!js_name(s, &a, &n)) return false;
    *match = n == strlen(want) && !memcmp(a, want, n);
    return true;
}

/* A number, read as cJSON reads it: the run of the characters it takes
 * (digits + - . e E, at most 63 of them, else declined) copied and given
 * to strtod.  Not strtod on the text itself: it would read on past end
 * (the text is not NUL-terminated) and it takes more than JSON (0x10, inf,
 * nan), which the full parser rejects. */
static bool js_num(jscan *s, double *out) {
    js_ws(s);
    if (s->p >= s->end || !(*s->p == '-' || (*s->p >= '0' && *s->p <= '9'))) return false;
    char buf[64];
    size_t n = 0;
    for (; s->p + n < s->end; n++) {
        char c = s->p[n];
        if (!((c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.' || c == 'e' || c == 'E')) break;
        if (n == sizeof buf - 1) return false;
        buf[n] = c;
    }
    buf[n] = 0;
    char *e;
    *out = strtod(buf, &e);
    if (e == buf || !isfinite(*out)) return false;
    s->p += e - buf;
    return true;
}

static bool js_skip(jscan *s, int depth) {
    js_ws(s);
    if (s->p >= s->end || depth > 32) return false;
    char c = *s->p;
    if (c == '"') {
        const char *a;
        size_t n;
        return js_str(s, &a, &n);
    }
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        s->p++;
        if (js_lit(s, close)) return true;
        for (;;) {
            if (c == '{' && !js_any_key(s)) return false;
            if (!js_skip(s, depth + 1)) return false;
            if (js_lit(s, ',')) continue;
            return js_lit(s, close);
        }
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        double d;
        return js_num(s, &d);
    }
    static const char *const lits[3] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++) {
        size_t l = strlen(lits[i]);
        if ((size_t)(s->end - s->p) >= l && !memcmp(s->p, lits[i], l)) {
            s->p += l;
            return true;
        }
    }
    return false;
}

/* completion_probabilities[0]: its top_logprobs into out/seen */
static bool js_first_entry(fusion_remote_vocab *rv, jscan *s, float *out, int32_t *k, double *mass) {
    if (!js_lit(s, '{')) return false;
    bool got = false;
    if (js_lit(s, '}')) return false;
    for (;;) {
        bool is_top;
        if (!js_key(s, "top_logprobs", &is_top)) return false;
        if (is_top) {
            if (got || !js_lit(s, '[') || js_lit(s, ']')) return false;
            got = true;
            do {
                if (!js_lit(s, '{')) return false;
                bool has_id = false, has_lp = false;
                double id = -1, lp = 0;
                for (;;) {
                    const char *a;
                    size_t n;
                    if (!js_name(s, &a, &n)) return false;
                    if (n == 2 && !memcmp(a, "id", 2)) {
                        if (has_id || !js_num(s, &id)) return false;
                        has_id = true;
                    } else if (n == 7 && !memcmp(a, "logprob", 7)) {
                        if (has_lp || !js_num(s, &lp)) return false;
                        has_lp = true;
                    } else if (!js_skip(s, 3)) {
                        return false;
                    }
                    if (js_lit(s, ',')) continue;
                    if (!js_lit(s, '}')) return false;
                    break;
                }
                if (!has_id || !has_lp || !(id >= 0 && id < rv->n_vocab) || id != floor(id) || lp > 1e-3) return false;
                int32_t i = (int32_t)id;
                if (rv->seen[i]) return false;
                rv->seen[i] = 1;
                out[i] = lp > 0 ? 0.0f : (float)lp;
                *mass += exp(lp > 0 ? 0 : lp);
                (*k)++;
            } while (js_lit(s, ','));
            if (!js_lit(s, ']')) return false;
        } else if (!js_skip(s, 2)) {
            return false;
        }
        if (js_lit(s, ',')) continue;
        return js_lit(s, '}') && got;
    }
}

/* 0: read (k entries, their mass, the server's ms); -1: use cJSON */
static int fast_llama_answer(fusion_remote_vocab *rv, const char *resp, size_t n, float *out, int32_t *k, double *mass,
                             double *server_ms) {
    jscan s = {resp, resp + n};
    bool got = false, got_t = false;
    *k = 0, *mass = 0, *server_ms = 0;
    if (!js_lit(&s, '{') || js_lit(&s, '}')) return -1;
    for (;;) {
        const char *a;
        size_t kl;
        if (!js_name(&s, &a, &kl)) return -1;
        if (kl == 24 && !memcmp(a, "completion_probabilities", 24)) {
            if (got || !js_lit(&s, '[') || js_lit(&s, ']') || !js_first_entry(rv, &s, out, k, mass)) return -1;
            while (js_lit(&s, ','))
                if (!js_skip(&s, 1)) return -1;
            if (!js_lit(&s, ']')) return -1;
            got = true;
        } else if (kl == 7 && !memcmp(a, "timings", 7)) {
            if (got_t || !js_lit(&s, '{')) return -1;
            got_t = true;
            bool got_pm = false, got_pd = false; /* cJSON takes the first of a key given twice */
            if (!js_lit(&s, '}'))
                for (;;) {
                    const char *b;
                    size_t bl;
                    double v;
                    if (!js_name(&s, &b, &bl)) return -1;
                    bool pm = bl == 9 && !memcmp(b, "prompt_ms", 9), pd = bl == 12 && !memcmp(b, "predicted_ms", 12);
                    if ((pm && got_pm) || (pd && got_pd)) return -1;
                    got_pm |= pm, got_pd |= pd;
                    bool want = pm || pd;
                    js_ws(&s);
                    if (want && s.p < s.end && (*s.p == '-' || (*s.p >= '0' && *s.p <= '9'))) {
                        if (!js_num(&s, &v)) return -1;
                        *server_ms += v;
                    } else if (!js_skip(&s, 2)) {
                        return -1;
                    }
                    if (js_lit(&s, ',')) continue;
                    if (!js_lit(&s, '}')) return -1;
                    break;
                }
        } else if (!js_skip(&s, 1)) {
            return -1;
        }
        if (js_lit(&s, ',')) continue;
        if (!js_lit(&s, '}')) return -1;
        break;
    }
    js_ws(&s);
    return s.p == s.end && got && *k > 0 ? 0 : -1;
}

static void clear_next(fusion_remote_vocab *rv, float *out, fusion_remote_next *info) {
    memset(rv->seen, 0, (size_t)rv->n_vocab);
    for (int32_t i = 0; i < rv->n_vocab; i++) out[i] = -INFINITY;
    info->k = 0, info->mass = 0, info->server_ms = 0;
}

int fusion_remote_scan_llama(fusion_remote_vocab *rv, const char *resp, size_t n, float *out,
                             fusion_remote_next *info) {
    clear_next(rv, out, info);
    if (fast_llama_answer(rv, resp, n, out, &info->k, &info->mass, &info->server_ms) == 0) return 0;
    clear_next(rv, out, info);
    return -1;
}

int fusion_remote_parse_next(fusion_remote_vocab *rv, int api, bool scan, const char *where, const char *resp, size_t n,
                             float *out, fusion_remote_next *info) {
    if (scan && api == FUSION_REMOTE_API_LLAMA && fusion_remote_scan_llama(rv, resp, n, out, info) == 0) return 0;
    clear_next(rv, out, info);
    cJSON *root = parse_json(where, resp, n);
    if (!root) return TUTTI_ERR;
    int rc = 0;
    int32_t k = 0;
    double mass = 0;
    bool classic;
    const cJSON *list = top_list(api, root, &classic);
    if (!list || (classic ? !cJSON_IsObject(list) : !cJSON_IsArray(list)) || !cJSON_GetArraySize(list)) {
        rc = tutti_set_error("%s: the answer has no top log-probabilities for the next token", where);
        goto done;
    }
    const cJSON *e;
    cJSON_ArrayForEach(e, list) {
        int32_t id = -1;
        double lp = 0;
        int r;
        if (classic) {
            if (!cJSON_IsNumber(e) || !e->string) r = -1;
            else {
                lp = e->valuedouble;
                id = fusion_remote_piece_id(rv, e->string, strlen(e->string));
                r = id < 0 ? -3 : 0;
            }
        } else {
            r = read_entry(rv, e, &id, &lp);
        }
        if (r == -3) continue; /* a token text the vocabulary does not have: its mass counts as approximated */
        if (r < 0 || isnan(lp) || lp > 1e-3 || (id >= 0 && rv->seen[id])) {
            rc = tutti_set_error("%s: malformed top log-probability entry %d (%s)", where, k,
                                 r == -2                     ? "token id out of range"
                                 : r < 0                     ? "missing id or logprob"
                                 : (id >= 0 && rv->seen[id]) ? "token listed twice"
                                                             : "not a log-probability");
            goto done;
        }
        rv->seen[id] = 1;
        out[id] = lp > 0 ? 0.0f : (float)lp;
        mass += exp(lp > 0 ? 0 : lp);
        k++;
    }
    if (k == 0) {
        rc = tutti_set_error("%s: none of the answer's tokens is in the vocabulary", where);
        goto done;
    }
    info->k = k, info->mass = mass;
    /* the server's own compute, to tell our overhead from its work */
    const cJSON *tm = cJSON_GetObjectItemCaseSensitive(root, "timings");
    if (cJSON_IsObject(tm)) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(tm, "prompt_ms");
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(tm, "predicted_ms");
        info->server_ms = (cJSON_IsNumber(a) ? a->valuedouble : 0) + (cJSON_IsNumber(b) ? b->valuedouble : 0);
    }
done:
    cJSON_Delete(root);
    return rc;
}

int fusion_remote_check_next(const fusion_remote_vocab *rv, const char *where, float *out, fusion_remote_next *info,
                             bool *renormalised) {
    *renormalised = false;
    double m = info->mass;
    if (!isfinite(m) || m <= 0) return tutti_set_error("%s: the answer's probabilities sum to %g", where, m);
    if (info->k >= rv->n_vocab && fabs(m - 1) > FUSION_REMOTE_MASS_TOL)
        return tutti_set_error("%s: the answer's probabilities of all %d tokens sum to %g, not 1: it is not a "
                               "distribution",
                               where, rv->n_vocab, m);
    if (m <= 1 + FUSION_REMOTE_MASS_TOL) return 0;
    float shift = (float)log(m);
    for (int32_t i = 0; i < rv->n_vocab; i++)
        if (rv->seen[i]) out[i] -= shift;
    info->mass = 1;
    *renormalised = true;
    return 0;
}

/* ---- the start's answers ---- */

int fusion_remote_parse_tokenize(const char *where, const char *resp, size_t n, const int32_t *want, int32_t n_want,
                                 int32_t *n_got) {
    *n_got = 0;
    cJSON *r = parse_json(where, resp, n);
    if (!r) return TUTTI_ERR;
    const cJSON *toks = cJSON_GetObjectItemCaseSensitive(r, "tokens");
    int ok = cJSON_IsArray(toks) ? 1 : -1;
    int32_t nr = ok > 0 ? cJSON_GetArraySize(toks) : 0;
    if (ok > 0 && nr != n_want) ok = 0;
    for (int32_t i = 0; ok > 0 && i < nr; i++) {
        const cJSON *t = cJSON_GetArrayItem(toks, i);
        if (cJSON_IsObject(t)) t = cJSON_GetObjectItemCaseSensitive(t, "id"); /* with_pieces form */
        if (!cJSON_IsNumber(t) || t->valuedouble != want[i]) ok = 0;
    }
    cJSON_Delete(r);
    *n_got = nr;
    if (ok < 0) return tutti_set_error("%s: the answer has no \"tokens\" array", where);
    return ok;
}

int fusion_remote_parse_detokenize(const char *where, const char *resp, size_t n, const char *text, size_t len) {
    cJSON *r = parse_json(where, resp, n);
    if (!r) return TUTTI_ERR;
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(r, "content");
    /* the server renders BOS as text and may keep the SPM leading space:
     * the text must be the end of what it gives */
    size_t lc = cJSON_IsString(c) ? strlen(c->valuestring) : 0;
    bool same = cJSON_IsString(c) && lc >= len && !memcmp(c->valuestring + lc - len, text, len);
    cJSON_Delete(r);
    return same ? 1 : 0;
}

static int json_int(const cJSON *o, const char *k, int64_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble < 1e15)) return -1;
    *out = (int64_t)v->valuedouble;
    return 0;
}

int fusion_remote_parse_props(const char *resp, size_t n, bool *llama, int64_t *n_ctx) {
    *llama = false, *n_ctx = 0;
    cJSON *props = cJSON_ParseWithLength(resp, n);
    if (!props) return -1;
    const cJSON *dgs = cJSON_GetObjectItemCaseSensitive(props, "default_generation_settings");
    if (cJSON_IsObject(dgs)) {
        *llama = true;
        int64_t c;
        if (json_int(dgs, "n_ctx", &c) == 0) *n_ctx = c;
    }
    cJSON_Delete(props);
    return 0;
}

int fusion_remote_parse_models(const char *resp, size_t n, const char *model, int64_t *n_vocab, int64_t *n_ctx) {
    *n_vocab = 0, *n_ctx = 0;
    cJSON *models = cJSON_ParseWithLength(resp, n);
    if (!models) return -1;
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(models, "data");
    const cJSON *d;
    cJSON_ArrayForEach(d, data) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(d, "id");
        if (*model && (!cJSON_IsString(id) || strcmp(id->valuestring, model))) continue;
        const cJSON *meta = cJSON_GetObjectItemCaseSensitive(d, "meta");
        int64_t c;
        if (cJSON_IsObject(meta)) {
            if (json_int(meta, "n_vocab", &c) == 0) *n_vocab = c;
            if (json_int(meta, "n_ctx", &c) == 0) *n_ctx = c;
        }
        break;
    }
    cJSON_Delete(models);
    return 0;
}
