/* The hub's JSON answers (untrusted): the tree listing of a commit and the
 * branches of a repository (see hub.h).  Every field is checked before it is
 * kept; what does not pass is dropped and counted, never guessed at. */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "hub/hub.h"
#include "util/error.h"

#define MAX_FILES 100000
#define MAX_JSON (64u << 20)

int hub_listing_add(hub_listing *l, const char *path, int64_t size, const char *sha256, const char *oid) {
    if (l->n == MAX_FILES) return tutti_set_error("hub: a listing of more than %d files", MAX_FILES);
    if (l->n == l->cap) {
        int c = l->cap ? 2 * l->cap : 16;
        hub_file *f = realloc(l->files, sizeof *f * (size_t)c);
        if (!f) return tutti_set_error("hub: out of memory");
        l->files = f, l->cap = c;
    }
    hub_file *f = &l->files[l->n];
    memset(f, 0, sizeof *f);
    if (!(f->path = strdup(path))) return tutti_set_error("hub: out of memory");
    f->size = size;
    if (sha256) snprintf(f->sha256, sizeof f->sha256, "%s", sha256);
    if (oid) snprintf(f->oid, sizeof f->oid, "%s", oid);
    l->n++;
    return 0;
}

void hub_listing_free(hub_listing *l) {
    for (int i = 0; l && i < l->n; i++) free(l->files[i].path);
    if (l) free(l->files);
    if (l) memset(l, 0, sizeof *l);
}

/* A JSON number that is a whole count of bytes (0 .. 2^53). */
static bool byte_count(const cJSON *v, int64_t *out) {
    if (!cJSON_IsNumber(v)) return false;
    double d = v->valuedouble;
    if (!(d >= 0 && d <= 9007199254740992.0) || d != (double)(int64_t)d) return false;
    *out = (int64_t)d;
    return true;
}

/* The string of member `key` when it is n hex digits, lower-cased; else NULL. */
static const char *hex_member(const cJSON *o, const char *key, size_t n, char *buf) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsString(v) || !hub_hex_valid(v->valuestring, strlen(v->valuestring), n)) return NULL;
    for (size_t i = 0; i < n; i++) {
        char c = v->valuestring[i];
        buf[i] = c >= 'A' && c <= 'F' ? (char)(c - 'A' + 'a') : c;
    }
    buf[n] = 0;
    return buf;
}

/* One entry of the tree: 1 kept, 0 skipped (not a file), -1 rejected. */
static int tree_entry(const cJSON *it, hub_listing *out) {
    if (!cJSON_IsObject(it)) return -1;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(it, "type");
    if (!cJSON_IsString(type)) return -1;
    if (strcmp(type->valuestring, "file") != 0) return 0; /* "directory" entries come with recursive=true */
    const cJSON *path = cJSON_GetObjectItemCaseSensitive(it, "path");
    if (!cJSON_IsString(path) || !hub_path_valid(path->valuestring, strlen(path->valuestring))) return -1;
    int64_t size = -1;
    const cJSON *sz = cJSON_GetObjectItemCaseSensitive(it, "size");
    if (sz && !byte_count(sz, &size)) return -1;
    char sha[65] = "", oid[65] = "";
    const char *git = hex_member(it, "oid", 40, oid);
    const cJSON *lfs = cJSON_GetObjectItemCaseSensitive(it, "lfs");
    if (lfs) {
        /* a large file: its oid is the content's sha256, its size the file's */
        int64_t ls;
        if (!cJSON_IsObject(lfs) || !hex_member(lfs, "oid", 64, sha)) return -1;
        const cJSON *lsz = cJSON_GetObjectItemCaseSensitive(lfs, "size");
        if (lsz) {
            if (!byte_count(lsz, &ls)) return -1;
            size = ls;
        }
        memcpy(oid, sha, sizeof sha);
    } else if (!git) {
        oid[0] = 0;
    }
    return hub_listing_add(out, path->valuestring, size, sha[0] ? sha : NULL, oid[0] ? oid : NULL) < 0 ? -2 : 1;
}

int hub_tree_parse(const char *json, size_t n, hub_listing *out) {
    memset(out, 0, sizeof *out);
    if (!json || n > MAX_JSON) return tutti_set_error("hub: the file listing is missing or larger than 64 MiB");
    cJSON *root = cJSON_ParseWithLength(json, n);
    if (!cJSON_IsArray(root)) {
        cJSON_Delete(root);
        return tutti_set_error("hub: the file listing is not a JSON array");
    }
    const cJSON *it;
    cJSON_ArrayForEach(it, root) {
        int r = tree_entry(it, out);
        if (r == -2) {
            cJSON_Delete(root);
            hub_listing_free(out);
            return TUTTI_ERR;
        }
        if (r < 0) out->n_rejected++;
    }
    cJSON_Delete(root);
    return 0;
}

/* A branch name usable as refs/NAME: one component of [A-Za-z0-9._-]. */
static bool ref_name_valid(const char *s) {
    size_t n = strlen(s);
    return hub_tag_valid(s, n) && hub_path_valid(s, n);
}

int hub_refs_parse(const char *json, size_t n, char commit[41]) {
    commit[0] = 0;
    if (!json || n > MAX_JSON) return tutti_set_error("hub: the list of branches is missing or too large");
    cJSON *root = cJSON_ParseWithLength(json, n);
    const cJSON *br = cJSON_GetObjectItemCaseSensitive(root, "branches");
    const cJSON *it;
    if (cJSON_IsArray(br)) cJSON_ArrayForEach(it, br) {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(it, "name");
            char c[41];
            if (!cJSON_IsObject(it) || !cJSON_IsString(name) || !ref_name_valid(name->valuestring) ||
                !hex_member(it, "targetCommit", 40, c))
                continue;
            if (!strcmp(name->valuestring, "main")) {
                memcpy(commit, c, sizeof c);
                break;
            }
            if (!commit[0]) memcpy(commit, c, sizeof c);
        }
    cJSON_Delete(root);
    if (!commit[0]) return tutti_set_error("hub: the repository's branches name no valid commit");
    return 0;
}
