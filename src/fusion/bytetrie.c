/* Byte trie over a vocabulary's pieces.
 *
 * Tokens are sorted by their exact bytes; every trie node (a byte string u)
 * is the contiguous range of sorted tokens whose bytes start with u, the
 * tokens equal to u coming first.  With a per-distribution cumulative sum in
 * sorted order, "probability of all tokens extending u·b" is
 * cum[child.hi] - cum[child.lo]: the next-byte marginal of one tokenization
 * hypothesis costs O(children of one node), independent of n_vocab. */
#include <stdlib.h>
#include <string.h>

#include "fusion/fusion.h"
#include "util/error.h"

/* qsort has no context argument in C11: the pieces being sorted, per thread so
 * that tries built concurrently (members, server slots, MPI ranks) do not mix */
static _Thread_local const char *g_sort_bytes;
static _Thread_local const int64_t *g_sort_off;

static int cmp_piece(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    int64_t lx = g_sort_off[x + 1] - g_sort_off[x], ly = g_sort_off[y + 1] - g_sort_off[y];
    int64_t n = lx < ly ? lx : ly;
    int c = memcmp(g_sort_bytes + g_sort_off[x], g_sort_bytes + g_sort_off[y], (size_t)n);
    if (c) return c;
    if (lx != ly) return lx < ly ? -1 : 1;
    return x < y ? -1 : (x > y);
}

void fusion_trie_free(fusion_trie *t) {
    if (!t) return;
    free(t->sorted);
    free(t->rank);
    free(t->node);
    free(t->child_byte);
    free(t->child_node);
    free(t->is_eog);
    free(t->unsorted);
    free(t->eog_ids);
    free(t->bytes);
    free(t->off);
    free(t);
}

int32_t fusion_trie_child(const fusion_trie *t, int32_t node, uint8_t b) {
    const fusion_trie_node *nd = &t->node[node];
    /* children are sorted by byte: binary search */
    int32_t lo = 0, hi = nd->n_child;
    while (lo < hi) {
        int32_t mid = (lo + hi) / 2;
        uint8_t c = t->child_byte[nd->child0 + mid];
        if (c == b) return t->child_node[nd->child0 + mid];
        if (c < b) lo = mid + 1;
        else hi = mid;
    }
    return -1;
}

fusion_trie *fusion_trie_build_pieces(int32_t n_vocab, const char *bytes, const int64_t *off, const bool *eog,
                                      const char *prefix, int32_t n_prefix) {
    if (n_vocab <= 0 || n_prefix < 0 || n_prefix > (int32_t)sizeof(((fusion_trie *)0)->prefix)) {
        tutti_set_error("byte trie: invalid vocabulary size %d or prefix length %d", n_vocab, n_prefix);
        return NULL;
    }
    fusion_trie *t = calloc(1, sizeof *t);
    if (!t) goto oom;
    t->n_vocab = n_vocab;
    int64_t total = off[n_vocab];
    t->bytes = malloc((size_t)total + 1);
    t->off = malloc(sizeof(int64_t) * (size_t)(n_vocab + 1));
    t->is_eog = calloc((size_t)n_vocab, sizeof(bool));
    t->rank = malloc(sizeof(int32_t) * (size_t)n_vocab);
    t->sorted = malloc(sizeof(int32_t) * (size_t)n_vocab);
    if (!t->bytes || !t->off || !t->is_eog || !t->rank || !t->sorted) goto oom;
    memcpy(t->bytes, bytes, (size_t)total);
    memcpy(t->off, off, sizeof(int64_t) * (size_t)(n_vocab + 1));
    if (eog) memcpy(t->is_eog, eog, sizeof(bool) * (size_t)n_vocab);
    if (n_prefix > 0) memcpy(t->prefix, prefix, (size_t)n_prefix); /* prefix may be NULL when empty */
    t->n_prefix = n_prefix;

    for (int32_t i = 0; i < n_vocab; i++) {
        t->rank[i] = -1;
        int64_t len = off[i + 1] - off[i];
        if (len > 0 && !t->is_eog[i]) t->sorted[t->n_sorted++] = i;
        if (len > t->max_len) t->max_len = (int32_t)len;
    }
    g_sort_bytes = t->bytes;
    g_sort_off = t->off;
    qsort(t->sorted, (size_t)t->n_sorted, sizeof(int32_t), cmp_piece);
    for (int32_t r = 0; r < t->n_sorted; r++) t->rank[t->sorted[r]] = r;
    /* the few tokens outside the sorted table (control, empty, end of
     * generation), listed so that a distribution's normaliser and its
     * end-of-generation mass need no pass over the whole vocabulary */
    int32_t n_eog = 0;
    for (int32_t i = 0; i < n_vocab; i++) n_eog += t->is_eog[i];
    t->unsorted = malloc(sizeof(int32_t) * (size_t)(n_vocab - t->n_sorted + 1));
    t->eog_ids = malloc(sizeof(int32_t) * (size_t)(n_eog + 1));
    if (!t->unsorted || !t->eog_ids) goto oom;
    for (int32_t i = 0; i < n_vocab; i++) {
        if (t->rank[i] < 0) t->unsorted[t->n_unsorted++] = i;
        if (t->is_eog[i]) t->eog_ids[t->n_eog++] = i;
    }

    /* Breadth-first construction: nodes are appended in BFS order and the
     * node array doubles as the queue, so every node's children are
     * allocated contiguously.  At most one node per piece byte + root. */
    int64_t cap = total + 1;
    t->node = malloc(sizeof(fusion_trie_node) * (size_t)cap);
    t->child_byte = malloc((size_t)cap);
    t->child_node = malloc(sizeof(int32_t) * (size_t)cap);
    int32_t *depth = malloc(sizeof(int32_t) * (size_t)cap);
    if (!t->node || !t->child_byte || !t->child_node || !depth) {
        free(depth);
        goto oom;
    }
    int32_t n_node = 1, n_child = 0;
    t->node[0] = (fusion_trie_node){.lo = 0, .hi = t->n_sorted};
    depth[0] = 0;
    for (int32_t q = 0; q < n_node; q++) {
        fusion_trie_node *nd = &t->node[q];
        int32_t d = depth[q], i = nd->lo;
        while (i < nd->hi && t->off[t->sorted[i] + 1] - t->off[t->sorted[i]] == d) i++;
        nd->n_exact = i - nd->lo;
        nd->child0 = n_child;
        while (i < nd->hi) {
            uint8_t b = (uint8_t)t->bytes[t->off[t->sorted[i]] + d];
            int32_t j = i + 1;
            while (j < nd->hi && (uint8_t)t->bytes[t->off[t->sorted[j]] + d] == b) j++;
            t->child_byte[n_child] = b;
            t->child_node[n_child] = n_node;
            n_child++;
            t->node[n_node] = (fusion_trie_node){.lo = i, .hi = j};
            depth[n_node] = d + 1;
            n_node++;
            nd = &t->node[q];
            i = j;
        }
        nd->n_child = n_child - nd->child0;
    }
    free(depth);
    t->n_node = n_node;
    return t;
oom:
    fusion_trie_free(t);
    tutti_set_error("byte trie: out of memory (%d tokens)", n_vocab);
    return NULL;
}

/* The bytes a tokenizer puts in front of any text, found by tokenizing "a"
 * and looking at what precedes "a" in the pieces (SPM with add_space_prefix:
 * " "; byte-level BPE: nothing).  Asking the tokenizer itself avoids
 * guessing from metadata flags. */
static int find_prefix(const tutti_vocab *vocab, char *prefix, int32_t *n_prefix) {
    int32_t ids[16];
    int32_t n = tutti_tokenize(vocab, "a", 1, false, false, ids, 16);
    *n_prefix = 0;
    if (n <= 0) return 0;
    char buf[64];
    int32_t len = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t k = tutti_token_to_piece(vocab, ids[i], false, buf + len, (int32_t)sizeof buf - len);
        if (k < 0) return 0;
        len += k;
    }
    if (len >= 1 && buf[len - 1] == 'a' && len - 1 <= 8) {
        memcpy(prefix, buf, (size_t)(len - 1));
        *n_prefix = len - 1;
    }
    return 0;
}

fusion_trie *fusion_trie_build(const tutti_vocab *vocab) {
    int32_t n_vocab = tutti_vocab_n_tokens(vocab);
    if (n_vocab <= 0) {
        tutti_set_error("byte trie: vocabulary has no tokens");
        return NULL;
    }
    int64_t cap = (int64_t)n_vocab * 8 + 64, total = 0;
    char *bytes = malloc((size_t)cap);
    int64_t *off = malloc(sizeof(int64_t) * (size_t)(n_vocab + 1));
    bool *eog = malloc(sizeof(bool) * (size_t)n_vocab);
    if (!bytes || !off || !eog) {
        free(bytes), free(off), free(eog);
        tutti_set_error("byte trie: out of memory (%d tokens)", n_vocab);
        return NULL;
    }
    for (int32_t id = 0; id < n_vocab; id++) {
        off[id] = total;
        eog[id] = tutti_vocab_is_eog(vocab, id);
        int32_t k = 0;
        if (!tutti_vocab_is_control(vocab, id)) {
            for (;;) {
                k = tutti_token_to_piece(vocab, id, false, bytes + total,
                                         (int32_t)(cap - total > INT32_MAX ? INT32_MAX : cap - total));
                if (k >= 0) break;
                if (k == TUTTI_ERR && cap - total > 4096) {
                    free(bytes), free(off), free(eog);
                    tutti_error_prefix("byte trie: token %d", id);
                    return NULL;
                }
                int64_t need = total + (k < 0 ? -(int64_t)k : 0) + 4096;
                cap = cap * 2 > need ? cap * 2 : need;
                char *nb = realloc(bytes, (size_t)cap);
                if (!nb) {
                    free(bytes), free(off), free(eog);
                    tutti_set_error("byte trie: out of memory");
                    return NULL;
                }
                bytes = nb;
            }
        }
        total += k;
    }
    off[n_vocab] = total;
    char prefix[8];
    int32_t n_prefix = 0;
    find_prefix(vocab, prefix, &n_prefix);
    fusion_trie *t = fusion_trie_build_pieces(n_vocab, bytes, off, eog, prefix, n_prefix);
    free(bytes), free(off), free(eog);
    return t;
}
