/* Model specs and the names the hub hands out (see hub.h). */
#include <string.h>

#include "hub/hub.h"
#include "util/error.h"

static bool base_char(char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
}

bool hub_repo_valid(const char *s, size_t n) {
    if (!s || n == 0 || n > HUB_MAX_REPO) return false;
    int slashes = 0;
    bool after_special = true; /* a special character may not start the id */
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (base_char(c)) {
            after_special = false;
        } else if (c == '/' || c == '.' || c == '-') {
            if (after_special) return false;
            slashes += c == '/';
            after_special = true;
        } else {
            return false;
        }
    }
    return !after_special && slashes == 1;
}

bool hub_tag_valid(const char *s, size_t n) {
    if (!s || n == 0 || n > HUB_MAX_TAG) return false;
    for (size_t i = 0; i < n; i++)
        if (!base_char(s[i]) && s[i] != '-' && s[i] != '.') return false;
    return true;
}

bool hub_path_valid(const char *s, size_t n) {
    if (!s || n == 0 || n > HUB_MAX_PATH || s[0] == '/') return false;
    int depth = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && s[j] != '/') {
            unsigned char c = (unsigned char)s[j];
            if (c < 0x20 || c == 0x7f || c == '\\') return false;
            j++;
        }
        size_t len = j - i;
        if (len == 0 || (len == 1 && s[i] == '.') || (len == 2 && s[i] == '.' && s[i + 1] == '.')) return false;
        if (++depth > HUB_MAX_DEPTH) return false;
        if (j == n) break;
        i = j + 1;
        if (i == n) return false; /* a trailing '/' */
    }
    return true;
}

bool hub_hex_valid(const char *s, size_t len, size_t n) {
    if (!s || len != n) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))) return false;
    }
    return true;
}

int hub_spec_parse(const char *s, hub_spec *out) {
    memset(out, 0, sizeof *out);
    if (!s) return tutti_set_error("hub: no model spec");
    const char *b = !strncmp(s, HUB_PREFIX, strlen(HUB_PREFIX)) ? s + strlen(HUB_PREFIX) : s;
    /* the repository: USER/MODEL up to the next '/' or ':' */
    const char *slash = strchr(b, '/');
    size_t rl = slash ? (size_t)(slash - b) + 1 + strcspn(slash + 1, "/:") : strlen(b);
    if (!hub_repo_valid(b, rl))
        return tutti_set_error(
            "'%.300s' is not a Hugging Face repository: expected USER/MODEL[:QUANT] (letters, "
            "digits, '_', and '.', '-' between them; e.g. bartowski/Qwen2.5-0.5B-Instruct-GGUF:Q4_K_M)",
            b);
    memcpy(out->repo, b, rl);
    const char *rest = b + rl;
    if (*rest == ':') {
        if (!hub_tag_valid(rest + 1, strlen(rest + 1)))
            return tutti_set_error("'%.300s': the quantisation tag '%.80s' is not valid (letters, digits, '_', '.', "
                                   "'-'; e.g. Q4_K_M)",
                                   b, rest + 1);
        memcpy(out->tag, rest + 1, strlen(rest + 1));
    } else if (*rest == '/') {
        if (!hub_path_valid(rest + 1, strlen(rest + 1)))
            return tutti_set_error("'%.300s': '%.300s' is not a file path inside a repository (no '..', no "
                                   "absolute path, no backslash)",
                                   b, rest + 1);
        memcpy(out->file, rest + 1, strlen(rest + 1));
    }
    return 0;
}
