/* Fuzz harness of the hub's answers (src/hub/listing.c, select.c): the JSON
 * a Hugging Face-style hub sends for -hf is outside input, and its file
 * names become cache paths.  See fuzz/README.md for the pattern.
 *
 * Input: byte 0 picks the parser and the spec, the rest is the answer as it
 * came over HTTP (not NUL-terminated; copied before an inaccessible page,
 * guarded.h, since cJSON is not instrumented).
 *   bit 0:    0 the tree listing (hub_tree_parse), 1 the branches (hub_refs_parse)
 *   bits 1-2: the spec the listing is chosen from: no tag (the default
 *             tags), tag Q8_0, tag q4_k_m, a file named by the listing's first
 *             path
 *
 * Promises checked (trap when broken):
 *  - tree: 0 or TUTTI_ERR; on 0 every kept path passes hub_path_valid and has
 *    no "." or ".." component, no leading '/', no '\\' or control byte; a
 *    sha256 is 64 lowercase hex digits, an oid 40 or 64; sizes >= -1;
 *  - selection: 0 or TUTTI_ERR; on 0, 1 <= n <= max indices into the
 *    listing, distinct, the first a GGUF model file, the others parts of the
 *    same split model in order;
 *  - refs: on 0 a commit of 40 lowercase hex digits;
 *  - tag lists fit their buffer.
 * Crashes, leaks, undefined behaviour and timeouts are the other findings. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "guarded.h"
#include "hub/hub.h"
#include "tutti.h"

#define CHECK(c)                    \
    do {                            \
        if (!(c)) __builtin_trap(); \
    } while (0)

static bool lower_hex(const char *s, size_t n) {
    if (strlen(s) != n) return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
    return true;
}

/* An independent statement of what may become a cache path. */
static bool safe_path(const char *p) {
    size_t n = strlen(p);
    if (n == 0 || n > HUB_MAX_PATH || p[0] == '/' || p[n - 1] == '/') return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)p[i] < 0x20 || p[i] == 0x7f || p[i] == '\\') return false;
    for (const char *c = p; c;) {
        const char *e = strchr(c, '/');
        size_t len = e ? (size_t)(e - c) : strlen(c);
        if (len == 0 || (len == 1 && c[0] == '.') || (len == 2 && c[0] == '.' && c[1] == '.')) return false;
        c = e ? e + 1 : NULL;
    }
    return true;
}

static void check_selection(const hub_listing *l, int mode) {
    hub_spec sp;
    memset(&sp, 0, sizeof sp);
    memcpy(sp.repo, "f/z", 4);
    if (mode == 1) memcpy(sp.tag, "Q8_0", 5);
    if (mode == 2) memcpy(sp.tag, "q4_k_m", 7);
    if (mode == 3 && l->n > 0) snprintf(sp.file, sizeof sp.file, "%s", l->files[0].path);
    int sel[64], n = -1;
    int rc = hub_select(l, &sp, sel, 64, &n);
    CHECK(rc == 0 || rc == TUTTI_ERR);
    if (rc == 0) {
        CHECK(n >= 1 && n <= 64);
        for (int i = 0; i < n; i++) {
            CHECK(sel[i] >= 0 && sel[i] < l->n);
            for (int j = 0; j < i; j++) CHECK(sel[j] != sel[i]);
        }
        hub_split s0;
        const char *p0 = l->files[sel[0]].path;
        CHECK(hub_split_info(p0, &s0) || mode == 3);
        if (mode != 3) CHECK(hub_is_model_file(p0));
        for (int i = 1; i < n; i++) {
            hub_split s;
            CHECK(hub_split_info(l->files[sel[i]].path, &s) && s.index == i + 1 && s.count == n);
            CHECK(s.prefix_len == s0.prefix_len && !strncmp(l->files[sel[i]].path, p0, s0.prefix_len));
        }
    }
    char tags[128];
    memset(tags, 'x', sizeof tags);
    hub_tags(l, tags, 64);
    CHECK(memchr(tags, 0, 64) != NULL && tags[64] == 'x');
}

int tutti_fuzz_hub_one(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    uint8_t ctl = data[0];
    const char *text = guarded_copy(data + 1, size - 1);
    if (!text) return 0;
    size_t n = size - 1;
    if (ctl & 1) {
        char commit[41];
        int rc = hub_refs_parse(text, n, commit);
        CHECK(rc == 0 || rc == TUTTI_ERR);
        if (rc == 0) CHECK(lower_hex(commit, 40));
        return 0;
    }
    hub_listing l;
    int rc = hub_tree_parse(text, n, &l);
    CHECK(rc == 0 || rc == TUTTI_ERR);
    if (rc != 0) return 0;
    CHECK(l.n >= 0 && l.n_rejected >= 0);
    for (int i = 0; i < l.n; i++) {
        const hub_file *f = &l.files[i];
        CHECK(safe_path(f->path) && hub_path_valid(f->path, strlen(f->path)));
        CHECK(f->size >= -1);
        CHECK(!f->sha256[0] || lower_hex(f->sha256, 64));
        CHECK(!f->oid[0] || lower_hex(f->oid, 40) || lower_hex(f->oid, 64));
    }
    check_selection(&l, (ctl >> 1) & 3);
    hub_listing_free(&l);
    return 0;
}

#ifdef TUTTI_LIBFUZZER
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tutti_fuzz_hub_one(data, size);
    return 0;
}
#endif
