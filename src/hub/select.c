/* Which files of a repository a spec names, as llama.cpp's download.cpp picks
 * them (find_best_model, get_gguf_split_info, get_split_files). */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "hub/hub.h"
#include "util/error.h"

#define MAX_SPLIT 9999

static bool digits5(const char *s) {
    for (int i = 0; i < 5; i++)
        if (!isdigit((unsigned char)s[i])) return false;
    return true;
}

bool hub_split_info(const char *path, hub_split *out) {
    memset(out, 0, sizeof *out);
    size_t n = strlen(path);
    if (n < 5 || strcmp(path + n - 5, ".gguf") != 0) return false;
    size_t p = n - 5; /* the prefix: the path without ".gguf" */
    out->index = out->count = 1;
    /* "PREFIX-NNNNN-of-NNNNN" (the "of" in any case, as llama.cpp's icase regex) */
    if (p > 15 && path[p - 15] == '-' && digits5(path + p - 14) && path[p - 9] == '-' &&
        tolower((unsigned char)path[p - 8]) == 'o' && tolower((unsigned char)path[p - 7]) == 'f' &&
        path[p - 6] == '-' && digits5(path + p - 5)) {
        int idx = 0, cnt = 0;
        for (int i = 0; i < 5; i++) idx = idx * 10 + (path[p - 14 + i] - '0'), cnt = cnt * 10 + (path[p - 5 + i] - '0');
        out->index = idx, out->count = cnt;
        p -= 15;
    }
    out->prefix_len = p;
    /* the tag: [A-Za-z0-9_]+ after the last '-' or '.' of the prefix */
    size_t t = p;
    while (t > 0 && (isalnum((unsigned char)path[t - 1]) || path[t - 1] == '_')) t--;
    if (t > 0 && t < p && (path[t - 1] == '-' || path[t - 1] == '.') && p - t <= HUB_MAX_TAG) {
        for (size_t i = t; i < p; i++) out->tag[i - t] = (char)toupper((unsigned char)path[i]);
        out->tag[p - t] = 0;
    }
    return true;
}

bool hub_is_model_file(const char *path) {
    size_t n = strlen(path);
    if (n < 5 || strcmp(path + n - 5, ".gguf") != 0) return false;
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    static const char *const not_models[] = {"mmproj", "imatrix", "mtp-", "eagle3-", "dflash-", "dspark-"};
    for (size_t i = 0; i < sizeof not_models / sizeof not_models[0]; i++)
        if (strstr(base, not_models[i])) return false;
    return true;
}

/* TAG followed by '.' or '-' anywhere in path, ignoring case (llama.cpp's
 * regex TAG[.-] with icase, the tag taken literally). */
static bool has_tag(const char *path, const char *tag) {
    size_t n = strlen(path), k = strlen(tag);
    for (size_t i = 0; k && i + k < n; i++)
        if (strncasecmp(path + i, tag, k) == 0 && (path[i + k] == '.' || path[i + k] == '-')) return true;
    return false;
}

/* The first model file for tag (NULL: any), a split model by its first part. */
static int find_model(const hub_listing *l, const char *tag) {
    for (int i = 0; i < l->n; i++) {
        hub_split s;
        const char *p = l->files[i].path;
        if (!hub_is_model_file(p) || (tag && !has_tag(p, tag)) || !hub_split_info(p, &s)) continue;
        if (s.count > 1 && s.index != 1) continue;
        return i;
    }
    return -1;
}

void hub_tags(const hub_listing *l, char *buf, size_t cap) {
    enum { MAX_TAGS = 64 };
    char seen[MAX_TAGS][HUB_MAX_TAG + 1];
    int n_seen = 0;
    size_t o = 0;
    buf[0] = 0;
    for (int i = 0; i < l->n && n_seen < MAX_TAGS; i++) {
        hub_split s;
        if (!hub_is_model_file(l->files[i].path) || !hub_split_info(l->files[i].path, &s) || !s.tag[0] || s.index != 1)
            continue;
        bool dup = false;
        for (int j = 0; j < n_seen && !dup; j++) dup = !strcmp(seen[j], s.tag);
        if (dup) continue;
        memcpy(seen[n_seen++], s.tag, sizeof s.tag);
        if (o < cap) o += (size_t)snprintf(buf + o, cap - o, "%s%s", o ? ", " : "", s.tag);
    }
}

/* The GGUF files of the listing, for a message. */
static void gguf_names(const hub_listing *l, char *buf, size_t cap) {
    size_t o = 0;
    buf[0] = 0;
    for (int i = 0; i < l->n && o < cap; i++) {
        size_t n = strlen(l->files[i].path);
        if (n >= 5 && !strcmp(l->files[i].path + n - 5, ".gguf"))
            o += (size_t)snprintf(buf + o, cap - o, "%s%s", o ? ", " : "", l->files[i].path);
    }
    if (!buf[0]) snprintf(buf, cap, "none");
}

/* sel[0] = primary; the other parts of its split model follow in order. */
static int with_parts(const hub_listing *l, int primary, int *sel, int max, int *n_sel) {
    hub_split s;
    const char *p = l->files[primary].path;
    if (!hub_split_info(p, &s) || s.count <= 1) {
        sel[0] = primary;
        *n_sel = 1;
        return 0;
    }
    if (s.count > max || s.count > MAX_SPLIT)
        return tutti_set_error("%s: a split model of %d parts (at most %d)", p, s.count,
                               max < MAX_SPLIT ? max : MAX_SPLIT);
    for (int k = 0; k < s.count; k++) sel[k] = -1;
    for (int i = 0; i < l->n; i++) {
        hub_split t;
        const char *q = l->files[i].path;
        if (hub_split_info(q, &t) && t.count == s.count && t.prefix_len == s.prefix_len &&
            !strncmp(q, p, s.prefix_len) && t.index >= 1 && t.index <= s.count && sel[t.index - 1] < 0)
            sel[t.index - 1] = i;
    }
    for (int k = 0; k < s.count; k++)
        if (sel[k] < 0)
            return tutti_set_error("%s: part %d of the %d parts of this split model is not in the repository", p, k + 1,
                                   s.count);
    *n_sel = s.count;
    return 0;
}

int hub_select(const hub_listing *l, const hub_spec *spec, int *sel, int max, int *n_sel) {
    char names[1024], tags[512];
    *n_sel = 0;
    int primary = -1;
    if (spec->file[0]) {
        for (int i = 0; i < l->n && primary < 0; i++)
            if (!strcasecmp(l->files[i].path, spec->file)) primary = i;
        if (primary < 0) {
            gguf_names(l, names, sizeof names);
            return tutti_set_error("%s has no file %s; its GGUF files: %s", spec->repo, spec->file, names);
        }
    } else if (spec->tag[0]) {
        primary = find_model(l, spec->tag);
        if (primary < 0) {
            hub_tags(l, tags, sizeof tags);
            gguf_names(l, names, sizeof names);
            return tutti_set_error("%s has no model file with the quantisation tag %s; its tags: %s (files: %s)",
                                   spec->repo, spec->tag, tags[0] ? tags : "none", names);
        }
    } else {
        /* llama.cpp's default: Q4_K_M, then Q8_0, then the first model file */
        primary = find_model(l, "Q4_K_M");
        if (primary < 0) primary = find_model(l, "Q8_0");
        if (primary < 0) primary = find_model(l, NULL);
        if (primary < 0) {
            gguf_names(l, names, sizeof names);
            return tutti_set_error("%s has no GGUF model file (its GGUF files: %s)", spec->repo, names);
        }
    }
    return with_parts(l, primary, sel, max, n_sel);
}
