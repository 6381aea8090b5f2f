/* The `hub` layer (internal): models by name from a Hugging Face-style hub,
 * as llama.cpp's -hf does (common/arg.cpp, common/download.cpp,
 * common/hf-cache.cpp), kept in the Hugging Face hub cache.
 *
 * A model spec "hf://USER/MODEL[:QUANT]" or "hf://USER/MODEL/FILE" names a
 * repository and either a quantisation tag or a file in it.  Resolving it
 * (resolve.c, behind tutti_hub_resolve in include/tutti.h):
 *   1. GET {endpoint}api/models/{repo}/refs          -> the commit of main
 *      GET {endpoint}api/models/{repo}/tree/{commit}?recursive=true
 *                                                     -> the files, sizes, sha256 (LFS oids)
 *   2. pick the file by tag (select.c): the tag followed by '.' or '-' in the
 *      path, case-insensitive; no tag: Q4_K_M, then Q8_0, then the first
 *      model file; a split model by its first part, with all its parts;
 *   3. download what the cache lacks (download.c): GET
 *      {endpoint}{repo}/resolve/{commit}/{path} (redirects followed, at most
 *      5, http(s) only) into blobs/{oid}.incomplete under a lock, resuming a
 *      partial file with Range, checking the size and the sha256 before the
 *      file is renamed to blobs/{oid};
 *   4. link snapshots/{commit}/{path} -> ../../blobs/{oid} and return it.
 * Offline (--offline, or when the hub cannot be reached) steps 1 and 3 use
 * the cache alone: refs/main and the snapshot's files.
 *
 * Cache (cache.c), the hub's own layout, shared with llama.cpp and
 * huggingface_hub: $LLAMA_CACHE, else $HF_HUB_CACHE, $HUGGINGFACE_HUB_CACHE,
 * $HF_HOME/hub, $XDG_CACHE_HOME/huggingface/hub, ~/.cache/huggingface/hub;
 *   models--USER--MODEL/refs/main            the commit last resolved
 *   models--USER--MODEL/blobs/{oid}          file contents, by sha256 (or git oid)
 *   models--USER--MODEL/snapshots/{commit}/{path} -> ../../blobs/{oid}
 *   .locks/models--USER--MODEL/{oid}.lock    one download of a blob at a time
 *
 * Everything the hub sends is untrusted: JSON is parsed with cJSON and every
 * field checked (repository ids, commits, oids, sizes); a file path becomes
 * a cache path only after hub_path_valid (no "..", no absolute path, no
 * backslash or control byte, bounded length and depth). */
#ifndef TUTTI_HUB_H
#define TUTTI_HUB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HUB_PREFIX "hf://"
#define HUB_MAX_REPO 256
#define HUB_MAX_TAG 64
#define HUB_MAX_PATH 512
#define HUB_MAX_DEPTH 16

/* ---- names (spec.c) ---- */

/* llama.cpp's repository ids: [A-Za-z0-9_] and '/', '.', '-' each between
 * two of those, exactly one '/', at most 256 bytes. */
bool hub_repo_valid(const char *s, size_t n);
/* Quantisation tags: 1..64 bytes of [A-Za-z0-9_.-] ("Q4_K_M", "UD-Q4_K_XL"). */
bool hub_tag_valid(const char *s, size_t n);
/* A file path inside a repository: components separated by single '/', none
 * empty, "." or "..", no leading '/', no '\\', no byte below 0x20 or 0x7f,
 * at most HUB_MAX_PATH bytes and HUB_MAX_DEPTH components. */
bool hub_path_valid(const char *s, size_t n);
/* n lowercase-or-uppercase hex digits exactly. */
bool hub_hex_valid(const char *s, size_t len, size_t n);

typedef struct hub_spec {
    char repo[HUB_MAX_REPO + 1];
    char tag[HUB_MAX_TAG + 1];   /* "" = the default tags */
    char file[HUB_MAX_PATH + 1]; /* "" = by tag */
} hub_spec;

/* "hf://REPO", "hf://REPO:TAG", "hf://REPO/FILE" (also without "hf://").
 * -1 with an error saying the form on anything else. */
int hub_spec_parse(const char *s, hub_spec *out);

/* ---- the hub's listings (listing.c) ---- */

typedef struct hub_file {
    char *path;      /* validated (hub_path_valid) */
    int64_t size;    /* bytes, -1 unknown */
    char sha256[65]; /* the LFS oid, "" unknown */
    char oid[65];    /* blob name in the cache: sha256, else the git oid; "" none */
} hub_file;

typedef struct hub_listing {
    hub_file *files;
    int n, cap;
    int n_rejected; /* entries dropped: malformed, or a path that is not valid */
} hub_listing;

/* The tree API's answer: a JSON array of {"type": "file", "path", "size",
 * "oid", "lfs": {"oid", "size"}}; other types are skipped, malformed or
 * invalid entries counted in n_rejected.  At most 100000 files.  -1 when the
 * text is not a JSON array (error set). */
int hub_tree_parse(const char *json, size_t n, hub_listing *out);
/* The refs API's answer: {"branches": [{"name", "targetCommit"}]}: the commit
 * (40 hex digits) of "main", else of the first valid branch.  -1 when none. */
int hub_refs_parse(const char *json, size_t n, char commit[41]);
int hub_listing_add(hub_listing *l, const char *path, int64_t size, const char *sha256, const char *oid);
void hub_listing_free(hub_listing *l);

/* ---- choosing files (select.c) ---- */

typedef struct hub_split {
    size_t prefix_len;         /* of the path before "-NNNNN-of-NNNNN.gguf" (or ".gguf") */
    int index, count;          /* 1-based part and parts; 1, 1 when not split */
    char tag[HUB_MAX_TAG + 1]; /* upper case, "" none: after the last '-' or '.' of the prefix */
} hub_split;

/* false when path does not end in ".gguf". */
bool hub_split_info(const char *path, hub_split *out);
/* Not a projector, imatrix or draft head (llama.cpp's gguf_filename_is_model). */
bool hub_is_model_file(const char *path);
/* The files to fetch for spec: sel[0] the one to open, then the other parts
 * of its split model in order; *n_sel their count (at most max).  -1 with an
 * error listing the repository's tags (or files) when nothing matches. */
int hub_select(const hub_listing *l, const hub_spec *spec, int *sel, int max, int *n_sel);
/* The distinct tags of the listing's model files, ", "-separated. */
void hub_tags(const hub_listing *l, char *buf, size_t cap);

/* ---- the cache (cache.c) ---- */

/* Every cache path fits in this many bytes. */
#define HUB_PATH_CAP 4608
/* snprintf into a path buffer; -1 with an error when it does not fit. */
int hub_pathf(char *out, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* The cache folder (see above); -1 when no variable names one and there is
 * no home folder. */
int hub_cache_root(char *out, size_t cap);
/* The cache folder of the settings in force (tutti_hub_configure, resolve.c). */
int hub_cache_dir_in_force(char *out, size_t cap);
/* root/models--USER--MODEL */
int hub_repo_dir(const char *root, const char *repo, char *out, size_t cap);
/* "models--USER--MODEL" -> "USER/MODEL" (validated); false otherwise. */
bool hub_repo_from_dir(const char *name, char *repo, size_t cap);
/* mkdir -p */
int hub_mkdirs(const char *path, bool last_too);
/* refs/main of a cached repository (else the first valid ref); -1 none. */
int hub_cache_ref(const char *repo_dir, char commit[41]);
int hub_cache_write_ref(const char *repo_dir, const char *commit);
/* The files of snapshots/{commit}/ (regular files or links to them; sizes of
 * what they point to). */
int hub_cache_listing(const char *repo_dir, const char *commit, hub_listing *out);
/* snapshots/{commit}/{path} -> ../../blobs/{oid} (relative, as the hub's
 * tools make it; replaced atomically).  Without symlinks the blob is moved
 * there instead. */
int hub_cache_link(const char *repo_dir, const char *commit, const char *path, const char *oid);
/* Records a use: the snapshot entry's own mtime (not the blob's). */
void hub_cache_touch(const char *snapshot_path);

/* ---- downloads (download.c) ---- */

typedef struct hub_download {
    const char *url;    /* the resolve URL */
    const char *token;  /* NULL = none */
    const char *dest;   /* blobs/{oid}: written as dest.incomplete, renamed when complete and checked */
    const char *lock;   /* the lock file */
    const char *sha256; /* expected digest (64 hex), NULL/"" = the response's X-Linked-Etag if any */
    int64_t size;       /* expected bytes, -1 = Content-Length */
    const char *label;  /* "REPO/FILE" in messages */
    bool progress;      /* progress lines on stderr */
} hub_download;

/* Downloads unless dest exists (another process may just have made it: the
 * lock is taken first).  0, or -1 with an error saying what happened and
 * what to do (401/403: set HF_TOKEN; 404; a checksum mismatch; no space). */
int hub_download_file(const hub_download *d);
/* Seconds between attempts, for tests (default 1, doubling). */
extern double hub_retry_delay_s;

#endif
