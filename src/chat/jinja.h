/* Internal interface of the chat-template engine: a Jinja2 subset.
 *
 * Pipeline: jinja_lex (template text -> tokens, whitespace control applied)
 * -> jinja_parse (tokens -> AST) -> jinja_eval (AST + variables -> text).
 *
 * Memory: every object of one render (tokens, AST, values, strings) lives in
 * one arena (struct jarena) that is freed at once at the end, so no value
 * needs reference counting and an error can unwind with longjmp without
 * leaking.  The arena has a byte cap: a template that would allocate more
 * fails with an error instead of exhausting memory.
 *
 * Errors: every stage reports through jctx_fail(), which formats
 * "line L, column C: reason" into the context and longjmps back to the entry
 * point (jinja_render).  There is no global state: everything hangs off one
 * struct jctx per call, so concurrent renders on several threads are safe.
 *
 * Semantics follow Jinja2 as configured by Hugging Face transformers for
 * chat templates (trim_blocks and lstrip_blocks on, a single trailing newline
 * dropped); values print as Python prints them (tests/data/chat/ holds
 * Python jinja2's renderings of our case table). */
#ifndef TUTTI_CHAT_JINJA_H
#define TUTTI_CHAT_JINJA_H

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Limits for untrusted templates. */
#define JINJA_MAX_DEPTH 128                 /* parser nesting and eval recursion */
#define JINJA_MAX_STEPS 2000000             /* loop iterations + statements + macro calls */
#define JINJA_MAX_ARENA (64u * 1024 * 1024) /* bytes allocated per render */
#define JINJA_MAX_OUTPUT (16u * 1024 * 1024)

/* ---- arena ------------------------------------------------------------- */
struct jchunk;
struct jarena {
    struct jchunk *head;
    size_t used_total;
};

/* ---- values ------------------------------------------------------------ */
typedef enum {
    JV_UNDEF,
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,
    JV_LIST,  /* list or tuple */
    JV_DICT,  /* insertion-ordered mapping with string keys */
    JV_NS,    /* namespace(): a dict whose attributes can be assigned */
    JV_MACRO, /* a {% macro %} */
    JV_LOOP,  /* the `loop` variable of a for loop */
    JV_FUNC,  /* a global function (range, raise_exception ...): name in u.s */
} jv_type;

struct jlist;
struct jdict;
struct jmacro;
struct jloop;

/* A string and where its bytes came from.  d == NULL: every byte is
 * template text (literals, numbers printed by the engine); otherwise d[i] != 0
 * marks byte i as caller data (message contents, roles, JSON context values
 * and keys).  The marks travel with the bytes through slicing, concatenation,
 * trimming, splitting and every builtin; a builtin that cannot follow bytes
 * one to one marks its whole result as data when any input byte was.  The
 * rendered text keeps the marks, so that the tokenizer can refuse to read
 * control tokens out of data (tutti_chat_tokenize). */
typedef struct jstr {
    const char *p;
    size_t n;
    const unsigned char *d;
} jstr;

typedef struct jv {
    jv_type t;
    union {
        bool b;
        int64_t i;
        double f;
        jstr s;
        struct jlist *l;
        struct jdict *d;
        struct jmacro *m;
        struct jloop *loop;
    } u;
} jv;

struct jlist {
    jv *v;
    size_t n, cap;
    bool tuple; /* prints as (a, b) */
};

struct jdict {
    jstr *k;
    jv *v;
    size_t n, cap;
};

struct jloop {
    const jv *items;
    size_t i, n;
};

/* ---- tokens ------------------------------------------------------------ */
typedef enum {
    JT_TEXT,      /* literal template text (already whitespace-trimmed) */
    JT_VAR_BEGIN, /* {{ */
    JT_VAR_END,   /* }} */
    JT_BLOCK_BEGIN,
    JT_BLOCK_END,
    JT_NAME,
    JT_STRING, /* unescaped value in s */
    JT_INT,
    JT_FLOAT,
    JT_OP, /* operator or punctuation, text in s */
    JT_EOF,
} jtok_type;

typedef struct jtok {
    jtok_type t;
    int line, col;
    jstr s;
    int64_t i;
    double f;
} jtok;

/* ---- AST --------------------------------------------------------------- */
typedef enum {
    /* statements */
    JN_TEXT,   /* s */
    JN_OUTPUT, /* a */
    JN_IF,     /* a = condition, body, else_body */
    JN_FOR,    /* names (targets), a = iterable, b = filter cond, body, else_body */
    JN_SET,    /* names[0] (+ attr in s) or tuple names, a = value (or body) */
    JN_MACRO,  /* s = name, names = params, args = defaults (NULL entries), body */
    JN_BREAK,
    JN_CONTINUE,
    JN_CALLBLOCK,   /* {% call m(args) %}body{% endcall %}: a = call expr, body = caller */
    JN_FILTERBLOCK, /* {% filter f %}body{% endfilter %}: a = filter expr (operand NULL) */
    /* expressions */
    JN_LITERAL, /* val */
    JN_NAME,    /* s */
    JN_LIST,    /* args */
    JN_TUPLE,   /* args */
    JN_DICT,    /* args = key, value, key, value ... */
    JN_ATTR,    /* a . s */
    JN_INDEX,   /* a [ b ] */
    JN_SLICE,   /* a [ args[0] : args[1] : args[2] ] (NULL = omitted) */
    JN_CALL,    /* a ( args ), kwnames[i] non-empty for keyword arguments */
    JN_FILTER,  /* a | s ( args ) ; a may be NULL in a filter block */
    JN_TEST,    /* a is [not] s ( args ); op = 1 when negated */
    JN_UNARY,   /* op a */
    JN_BINARY,  /* a op b */
    JN_TERNARY, /* b if a else c */
} jnode_type;

typedef enum {
    JOP_NONE,
    JOP_ADD,
    JOP_SUB,
    JOP_MUL,
    JOP_DIV,
    JOP_FLOORDIV,
    JOP_MOD,
    JOP_POW,
    JOP_CONCAT,
    JOP_EQ,
    JOP_NE,
    JOP_LT,
    JOP_LE,
    JOP_GT,
    JOP_GE,
    JOP_IN,
    JOP_NOTIN,
    JOP_AND,
    JOP_OR,
    JOP_NOT,
    JOP_NEG,
    JOP_POS,
} jop;

typedef struct jnode jnode;
typedef struct jnodes {
    jnode **v;
    size_t n, cap;
} jnodes;

struct jnode {
    jnode_type t;
    int line, col;
    jop op;
    int negate; /* JN_TEST: "is not" */
    jstr s;
    jv val;
    jnode *a, *b, *c;
    jnodes args;
    jstr *kwnames; /* parallel to args for JN_CALL / JN_FILTER / JN_TEST; NULL if none */
    jstr *names;   /* JN_FOR / JN_SET / JN_MACRO */
    size_t n_names;
    jnodes body, else_body;
};

struct jmacro {
    const jnode *def;
    struct jscope *closure;
};

/* ---- context ----------------------------------------------------------- */
struct jvar {
    jstr name;
    jv v;
};
struct jscope {
    struct jscope *parent;
    struct jvar *vars;
    size_t n, cap;
};

struct jbuf {
    char *p;
    unsigned char *d; /* data marks, [cap]; NULL until a data byte is put */
    size_t n, cap;
};

typedef struct jctx {
    struct jarena arena;
    jmp_buf jmp;
    char err[512];
    const char *src; /* template text, for error positions */
    int depth;
    long steps;
    /* lexer output */
    jtok *toks;
    size_t n_toks, cap_toks;
    size_t pos; /* parser cursor */
    /* evaluation */
    struct jbuf out;
    struct jscope *globals;
    const jv *caller; /* body of the innermost {% call %} (a macro), or NULL */
} jctx;

/* ---- functions --------------------------------------------------------- */
/* Aborts the render: formats the message (with "line L, column C: " when
 * line > 0) and longjmps to jinja_render. */
_Noreturn void jctx_fail(jctx *c, int line, int col, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

void *jalloc(jctx *c, size_t n); /* zeroed, never NULL (fails the render) */
void jarena_free(struct jarena *a);
jstr jstr_dup(jctx *c, const char *p, size_t n); /* template text */
jstr jstr_cat(jctx *c, jstr a, jstr b);          /* keeps both sides' marks */
jstr jstr_z(const char *z);                      /* template text, not copied */
/* s[off..off+n) with its marks (off + n <= s.n). */
jstr jstr_sub(jstr s, size_t off, size_t n);
/* true when any byte of s is caller data. */
bool jstr_has_data(jstr s);
/* A copy of p[0..n) whose every byte is caller data. */
jstr jstr_data(jctx *c, const char *p, size_t n);
/* s itself if `data` is false, else s with every byte marked as data: for
 * results that a builtin computed from data in a way it does not track. */
jstr jstr_taint(jctx *c, jstr s, bool data);
/* First occurrence of nd[0..nn) in h[0..hn) (memmem, which C11 lacks). */
const char *jmemfind(const char *h, size_t hn, const char *nd, size_t nn);
bool jstr_eq(jstr a, jstr b);
bool jstr_eqz(jstr a, const char *z);

/* Appends template text (bytes the engine itself writes). */
void jbuf_put(jctx *c, struct jbuf *b, const char *p, size_t n);
void jbuf_putz(jctx *c, struct jbuf *b, const char *z);
/* Appends a string value with its marks. */
void jbuf_puts(jctx *c, struct jbuf *b, jstr s);
/* Appends p[0..n) marked as data when `data` (escaped forms of data). */
void jbuf_put_as(jctx *c, struct jbuf *b, const char *p, size_t n, bool data);
void jinja_put_utf8(jctx *c, struct jbuf *b, uint32_t cp); /* UTF-8 of code point cp */
/* The buffer contents as a string (arena memory, marks kept); the buffer is
 * reset. */
jstr jbuf_take(jctx *c, struct jbuf *b);

void jinja_lex(jctx *c, const char *src, size_t len);
jnodes jinja_parse(jctx *c);
void jinja_exec(jctx *c, const jnodes *prog, struct jscope *scope);
struct jscope *jscope_new(jctx *c, struct jscope *parent);
/* Assigns in scope s itself (not in a parent). */
void jscope_set(jctx *c, struct jscope *s, jstr name, jv v);

/* values (jinja_value.c) */
jv jv_undef(void);
jv jv_none(void);
jv jv_bool(bool b);
jv jv_int(int64_t i);
jv jv_float(double f);
jv jv_str(jstr s);
jv jv_strz(jctx *c, const char *z);
jv jv_list_new(jctx *c, size_t cap);
jv jv_dict_new(jctx *c, jv_type t);
void jlist_push(jctx *c, struct jlist *l, jv v);
void jdict_set(jctx *c, struct jdict *d, jstr k, jv v);
const jv *jdict_get(const struct jdict *d, jstr k);
bool jv_truthy(const jv *v);
bool jv_equal(const jv *a, const jv *b);
/* <0, 0, >0; fails for values that do not order (line/col for the message). */
int jv_compare(jctx *c, const jv *a, const jv *b, int line, int col);
const char *jv_type_name(const jv *v);
/* Text of a value as {{ }} prints it (undefined and none print nothing). */
void jv_print(jctx *c, struct jbuf *b, const jv *v);
jstr jv_to_str(jctx *c, const jv *v);
/* JSON text as Python's json.dumps writes it (tojson). */
typedef struct jjson_opts {
    bool has_indent; /* indent given (even 0 or ""): one item per line */
    jstr indent;     /* per level */
    jstr item_sep, key_sep;
    bool sort_keys, ensure_ascii;
} jjson_opts;
void jv_to_json(jctx *c, struct jbuf *b, const jv *v, const jjson_opts *o, int depth, int line, int col);

/* builtins (jinja_builtins.c): a = operand, args/kwnames already evaluated */
typedef struct jargs {
    jv *v;
    jstr *kw; /* kw[i].n > 0 for keyword argument i */
    size_t n;
    int line, col;
} jargs;
jv jinja_filter(jctx *c, jstr name, jv a, const jargs *args);
bool jinja_test(jctx *c, jstr name, const jv *a, const jargs *args);
/* Method call on a value (str.strip(), dict.items(), list.append() ...). */
jv jinja_method(jctx *c, jv obj, jstr name, const jargs *args);
/* Global function (range, namespace, raise_exception, dict, strftime_now);
 * found = false when no such function exists. */
jv jinja_global_call(jctx *c, jstr name, const jargs *args, bool *found);
/* true for the names of the global functions (they are `defined`). */
bool jinja_is_global(jstr name);
/* Positional-or-keyword argument lookup: argument pos, or keyword kw, or NULL. */
const jv *jargs_get(const jargs *a, size_t pos, const char *kw);

#endif
