/* The JSON schema compiler's intermediate form (js_*.c).
 *
 * A schema becomes a graph of nodes, each the set of JSON values it
 * admits.  Nodes are lazy: a node made from a schema object, an
 * intersection (allOf, $ref next to other keywords), a negation (not, the
 * other branches of a oneOf, the else of if/then/else) or a exactly-one
 * choice is computed only when something looks at it (js_force), into one
 * of two shapes:
 *   JK_BASE  per JSON type, the constraints on values of that type (a type
 *            not in `types` admits nothing; each type's constraints are
 *            independent, as the keywords of one schema object are);
 *   JK_OR    the union of its kids.
 * Children (items, property values) stay lazy, so recursive schemas are
 * finite graphs: a node is forced once and its rule emitted once.
 *
 * Exactness: a BASE admits exactly the values its constraints say, except
 * where a keyword's value cannot be spelled exactly by a grammar; then the
 * spellings are a subset (never an invalid value, js_number.h, regex.h),
 * and for negation the node also keeps the superset it must complement.
 * Whatever cannot be kept exact is refused with its schema path and
 * keyword (or, lenient, dropped with a warning). */
#ifndef TUTTI_GRAMMAR_JS_IR_H
#define TUTTI_GRAMMAR_JS_IR_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "grammar/fsa.h"

/* JSON types.  Numbers are split by spelling: JT_INT the integer literals,
 * JT_FLOAT the other spellings (decimals, exponents); "integer" admits
 * JT_INT, "number" both. */
enum {
    JT_NULL = 1,
    JT_TRUE = 2,
    JT_FALSE = 4,
    JT_INT = 8,
    JT_FLOAT = 16,
    JT_STR = 32,
    JT_ARR = 64,
    JT_OBJ = 128,
    JT_ALL = 255,
};

enum { JK_SCHEMA, JK_AND, JK_NOT, JK_ONEOF, JK_BASE, JK_OR };

typedef struct js_node js_node;

typedef struct js_prop {
    char *name; /* the property's name (UTF-8) */
    js_node *node;
    bool required;
} js_prop;

typedef struct js_pat {
    fsa *key; /* the names it applies to */
    js_node *node;
} js_pat;

struct js_node {
    int kind;
    int state; /* 0 not forced, 1 being forced, 2 forced */
    int32_t id;
    char *path; /* schema path (JSON pointer), for messages and rule names */
    /* before forcing */
    const cJSON *schema; /* JK_SCHEMA */
    js_node *a, *b;      /* JK_AND: a and b; JK_NOT: a */
    /* JK_OR, JK_ONEOF */
    js_node **kid;
    int32_t n_kid;
    /* JK_BASE */
    uint32_t types;
    fsa *num;             /* number texts admitted (JT_INT/JT_FLOAT), NULL: all */
    fsa *str, *str_sup;   /* string values admitted (decoded): a subset and a superset of the
                                 schema's, NULL: all; equal unless a pattern's engines differ */
    bool str_no_neg;      /* a format: the strings cannot be complemented exactly */
    bool str_canon;       /* str is (a subset of) const/enum strings: written in their canonical
                                 spelling only (js_ctx.all_spellings false) */
    const char **sup_src; /* patterns whose superset automaton is still to be built into
                                 str_sup (only `not` needs it: built then) */
    int32_t n_sup_src;
    int64_t min_len, max_len; /* code points; max -1: none */
    js_node **prefix;         /* prefixItems (items as an array) */
    int32_t n_prefix;
    js_node *items; /* the items after the prefix, NULL: any */
    int64_t min_items, max_items;
    js_node *contains; /* NULL: none; else at least one item */
    bool unique;
    js_prop *props; /* in schema order; values include matching patternProperties */
    int32_t n_props;
    js_pat *pats; /* a name in several: all of their values apply */
    int32_t n_pats;
    js_node *additional; /* names in no props/pats; NULL: any value */
    bool add_open;       /* additionalProperties said so (true or a schema), not absent */
    fsa *names;          /* propertyNames, NULL: any */
    int64_t min_props, max_props;
    js_node *fwd;      /* forced into another node: its content is there */
    const char *kw;    /* JK_NOT: the keyword it stands for (not, oneOf, else) */
    bool num_inexact;  /* num came from multipleOf: exact on integer literals only */
    fsa *need_key;     /* objects: some property has a name in need_key ... */
    js_node *need_val; /* ... and a value in need_val (NULL: none asked) */
    /* emission */
    char *rule;
};

#define JS_MAX_GBNF (8 << 20) /* bytes of one schema's grammar */

/* The conversion of one schema document. */
typedef struct js_ctx {
    const cJSON *root;
    bool lenient;
    bool all_spellings; /* const/enum strings in every spelling (else canonical only) */
    bool open_objects;  /* additionalProperties absent: any other name (else none, as llama.cpp) */
    struct sbuf *warn;  /* lenient: the warnings, one per line */
    bool failed;
    js_node **nodes; /* every node (owned) */
    int32_t n_nodes, cap_nodes;
    /* memo: schema object -> node, (a, b) -> and, a -> not */
    struct js_memo *memo;
    int32_t memo_n, memo_cap;
    js_node *any, *nothing;
    int64_t budget; /* work left (forced nodes, emitted rules) */
} js_ctx;

/* ---- js_ir.c: from the schema ---- */

/* Records "json schema: at PATH: MESSAGE" and returns TUTTI_ERR (once). */
int js_err(js_ctx *c, const char *path, const char *fmt, ...) TUTTI_PRINTF(3, 4);
/* A keyword that constrains but cannot be enforced: an error, or with
 * lenient a warning (then 0: the caller drops it). */
int js_unsupported(js_ctx *c, const char *path, const char *keyword, const char *fmt, ...) TUTTI_PRINTF(4, 5);
js_node *js_node_new(js_ctx *c, int kind, const char *path);
/* The (lazy) node of schema s found at path. */
js_node *js_of_schema(js_ctx *c, const cJSON *s, const char *path);
/* Forces a JK_SCHEMA node into its parts (js_ops.c combines them). */
int js_force_schema(js_ctx *c, js_node *n);
/* The value of keyword k of object s (the last one when written twice, as
 * Python's json reads it), or NULL. */
const cJSON *js_kw(const cJSON *s, const char *k);
/* path + "/" + a + ("/" + b) with JSON pointer escaping, malloc'd. */
char *js_path(const char *path, const char *a, const char *b);

/* ---- js_ops.c: combining ---- */

js_node *js_memo_get(js_ctx *c, int kind, const void *a, const void *b);
void js_memo_put(js_ctx *c, int kind, const void *a, const void *b, js_node *n);
/* The forced node holding n's content (JK_BASE or JK_OR), NULL on error. */
js_node *js_hnf(js_ctx *c, js_node *n);
/* The strings n admits (propertyNames), NULL + error. */
fsa *js_string_language(js_ctx *c, js_node *n, const char *path);
/* The names of BASE b's named properties as one automaton (NULL + error). */
fsa *js_named_fsa(const js_node *b);
/* Object keywords of one schema object: property values also meet the
 * patterns that match their names, and propertyNames. */
int js_object_fixup(js_ctx *c, js_node *b, const char *path);
void js_ctx_free(js_ctx *c);

js_node *js_and(js_ctx *c, js_node *a, js_node *b, const char *path);
js_node *js_not(js_ctx *c, js_node *a, const char *path);
js_node *js_or(js_ctx *c, js_node **kid, int32_t n, const char *path);
js_node *js_oneof(js_ctx *c, js_node **kid, int32_t n, const char *path);
/* A BASE admitting everything (copied so that it may be filled in). */
js_node *js_base(js_ctx *c, const char *path, uint32_t types);
/* Forces n into JK_BASE or JK_OR; 0 or TUTTI_ERR. */
int js_force(js_ctx *c, js_node *n);
/* true when n provably admits nothing (looking depth levels into
 * children); false when it admits something or it cannot tell. */
bool js_is_empty(js_ctx *c, js_node *n, int depth);
/* The schema of property `name` in object BASE n: its named property,
 * else the patterns matching it, else additionalProperties (NULL: any). */
js_node *js_prop_schema(js_ctx *c, js_node *n, const char *name);

/* ---- js_emit.c: to GBNF ---- */

/* Writes the rules of n (and what it uses) to out; its rule name in name. */
int js_emit(js_ctx *c, js_node *n, const char *hint, struct sbuf *out, char *name, size_t cap);

#endif
