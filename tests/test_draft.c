/* Drafting (speculative decoding: tutti_ensemble_set_draft, src/fusion/draft.c,
 * align_token.c; tutti_sampler_sample_draft):
 *   - greedy identity: stories260K verified, a fine-tune of it drafting
 *     (same tokenizer, often other choices), gives llama.cpp's own 48 greedy
 *     ids (../shared/ref/models/stories260K.pN.jsonl) for every draft length
 *     and cut, with rejected drafts in the runs;
 *   - the draft's KV cache rolls back: with one drafted token per round
 *     and no cut, the rounds and accepted tokens are those predicted from
 *     the draft's argmax after each committed prefix on a fresh session;
 *   - sampled output is distributed as the plain run's: a chi-square test
 *     of the first four tokens' joint frequencies over 4000 seeds against
 *     the exact distribution computed here from the target's logits (top-3
 *     at temperature 1.5, in double);
 *   - drafts with other tokenizers (TinyStories-656K, BabyLlama-tok361),
 *     re-spelled in the target's tokens: greedy identity as above, and the
 *     sampled distribution (one-hot proposals), a token-aligned ensemble's
 *     greedy output with a re-spelled draft;
 *   - byte alignment (align_byte.c): three members with three tokenizers,
 *     a draft proposing bytes (its own tokenizer or another), the fused
 *     greedy text byte for byte the plain run's through rejections, with
 *     fewer forward passes for the member the drafts help most; the
 *     first bytes' sampled frequencies against the plain run's fused rows
 *     (chi-square);
 *   - re-spelling's tokens of a growing text (fusion_retok, retok.h) equal
 *     the whole text's tokenization round by round for SPM and byte-level
 *     BPE vocabularies, while most rounds tokenize only the tail;
 *   - errors (bad lengths, span alignment, prompt lookup in byte
 *     alignment) and the CLI (-md's output equal to the plain run's, the
 *     summary line, usage; byte alignment under `tutti run`). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fusion/retok.h"
#include "test_common.h"
#include "tutti.h"

#define TARGET "models/stories260K.gguf"
#define DRAFT "models/stories260K-ft/stories260K-dreams.gguf"
#define N_GREEDY 48
/* drafts with other tokenizers (re-spelled in the target's tokens) */
#define DRAFT_656K "models/TinyStories-656K-Q8_0.gguf"
#define DRAFT_TOK361 "models/BabyLlama-tok361/babyllama-tok361.gguf"

static const char *g_draft = DRAFT; /* the draft model target_with_draft gives */

typedef struct ids_out {
    int32_t ids[4096];
    int n;
} ids_out;

static int collect(const tutti_step *st, void *user) {
    ids_out *o = user;
    if (o->n < 4096) o->ids[o->n++] = st->chosen;
    return 0;
}

/* The target with the draft model (lookup_n 0) or prompt lookup. */
static tutti_ensemble *target_with_draft(int32_t n_max, float p_min, int32_t lookup_n) {
    const char *rel[1] = {TARGET};
    tutti_ensemble *e = test_ensemble(rel, 1, TUTTI_ALIGN_TOKEN, TUTTI_RULE_MIX);
    assert_non_null(e);
    if (n_max > 0) {
        tutti_draft_params dp = tutti_draft_default_params();
        dp.model_path = lookup_n > 0 ? NULL : shared_path(g_draft);
        dp.lookup_n = lookup_n;
        dp.n_max = n_max;
        dp.p_min = p_min;
        dp.n_threads = 1;
        if (tutti_ensemble_set_draft(e, &dp) != 0) fail_msg("set_draft: %s", tutti_last_error());
    }
    return e;
}

/* The prompt ids (the "token" of every {"pos":..} line) and llama.cpp's
 * greedy ids of ref/models/stories260K.pK.jsonl. */
static void read_ref(int k, int32_t *prompt, int *n_prompt, int32_t *greedy, int *n_greedy) {
    char rel[64];
    snprintf(rel, sizeof rel, "ref/models/stories260K.p%d.jsonl", k);
    size_t len;
    char *js = read_file(shared_path(rel), &len);
    assert_non_null(js);
    *n_prompt = 0;
    for (char *p = js; (p = strstr(p, "\"token\":")); p += 8) prompt[(*n_prompt)++] = (int32_t)atoi(p + 8);
    *n_greedy = json_ids(js, "greedy", greedy, N_GREEDY);
    assert_int_equal(*n_greedy, N_GREEDY);
    free(js);
}

static int generate(tutti_ensemble *e, const int32_t *prompt, int n_prompt, const tutti_sampler_params *sp,
                    int max_tokens, ids_out *out, tutti_ensemble_stats *st) {
    out->n = 0;
    tutti_ensemble_set_step_cb(e, collect, out);
    tutti_mask m = {.max_tokens = max_tokens};
    const int32_t *pids[TUTTI_ENSEMBLE_MAX_MEMBERS];
    int32_t np[TUTTI_ENSEMBLE_MAX_MEMBERS];
    for (int32_t i = 0; i < tutti_ensemble_n_members(e); i++) pids[i] = prompt, np[i] = n_prompt;
    return tutti_ensemble_generate_ids(e, pids, np, sp, &m, NULL, NULL, st);
}

static void test_greedy_identity(void **state) {
    (void)state;
    require_shared();
    /* the draft model at several lengths and cuts, then prompt lookup */
    const struct {
        int32_t n_max;
        float p_min;
        int32_t lookup_n;
        const char *draft;
    } cfg[] = {{16, 0.75f, 0, DRAFT},        {4, 0.0f, 0, DRAFT},        {1, 0.0f, 0, DRAFT},
               {16, 0.0f, 0, DRAFT},         {8, 0.0f, 1, DRAFT},        {8, 0.0f, 2, DRAFT},
               {16, 0.75f, 0, DRAFT_TOK361}, {4, 0.0f, 0, DRAFT_TOK361}, {8, 0.0f, 0, DRAFT_656K}};
    tutti_sampler_params sp = tutti_sampler_default_params();
    sp.temp = 0;
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        int64_t drafted = 0, accepted = 0;
        g_draft = cfg[c].draft;
        tutti_ensemble *e = target_with_draft(cfg[c].n_max, cfg[c].p_min, cfg[c].lookup_n);
        for (int k = 1; k <= 4; k++) {
            int32_t prompt[256], greedy[N_GREEDY + 1];
            int n_prompt, n_greedy;
            read_ref(k, prompt, &n_prompt, greedy, &n_greedy);
            ids_out out;
            tutti_ensemble_stats st;
            assert_int_equal(generate(e, prompt, n_prompt, &sp, N_GREEDY, &out, &st), 0);
            printf("%s draft-max %d p-min %.2f lookup %d p%d: %d rounds, %lld drafted, %lld accepted, %lld target "
                   "passes\n",
                   cfg[c].draft, cfg[c].n_max, (double)cfg[c].p_min, cfg[c].lookup_n, k, st.n_draft_rounds,
                   (long long)st.n_drafted, (long long)st.n_draft_accepted, (long long)st.n_member_passes[0]);
            assert_int_equal(out.n, N_GREEDY);
            for (int i = 0; i < N_GREEDY; i++)
                if (out.ids[i] != greedy[i])
                    fail_msg("p%d token %d: %d, llama.cpp's greedy %d", k, i, out.ids[i], greedy[i]);
            /* verification in batches: one target pass per plain step or round, the
             * accepted tokens for free */
            assert_true(st.n_member_passes[0] + st.n_draft_accepted <= N_GREEDY + 1);
            drafted += st.n_drafted, accepted += st.n_draft_accepted;
        }
        tutti_ensemble_free(e);
        /* both outcomes happened: the identity held through rejections */
        assert_true(accepted > 0 && accepted < drafted);
    }
    g_draft = DRAFT;
}

/* The draft's argmax after ids[0..n) on a fresh session of its model. */
static int32_t fresh_argmax(tutti_model *m, const int32_t *ids, int32_t n) {
    tutti_session_params p = tutti_session_default_params();
    p.n_threads = 1;
    tutti_session *s = tutti_session_new(m, &p);
    assert_non_null(s);
    assert_int_equal(tutti_session_eval(s, ids, n, NULL), 0);
    const float *z = tutti_session_logits(s);
    int32_t best = 0;
    for (int32_t i = 1; i < tutti_model_n_vocab(m); i++)
        if (z[i] > z[best]) best = i;
    tutti_session_free(s);
    return best;
}

static void test_draft_kv_rollback(void **state) {
    (void)state;
    require_shared();
    tutti_model_params mp = tutti_model_default_params();
    tutti_model *dm = tutti_model_load(shared_path(DRAFT), &mp);
    assert_non_null(dm);
    tutti_sampler_params sp = tutti_sampler_default_params();
    sp.temp = 0;
    tutti_ensemble *e = target_with_draft(1, 0.0f, 0);
    for (int k = 1; k <= 2; k++) {
        int32_t seq[256 + N_GREEDY], greedy[N_GREEDY + 1];
        int n_prompt, n_greedy;
        read_ref(k, seq, &n_prompt, greedy, &n_greedy);
        memcpy(seq + n_prompt, greedy, sizeof greedy[0] * N_GREEDY);
        /* the schedule: token 0 plain; then a round drafts one token after
         * the committed ones, accepted (the next row is the bonus: two
         * tokens) or not (one), while a drafted token leaves a row to spare */
        int rounds = 0, acc = 0;
        for (int pos = 1; pos + 1 < N_GREEDY;) {
            rounds++;
            if (fresh_argmax(dm, seq, n_prompt + pos) == greedy[pos]) acc++, pos += 2;
            else pos += 1;
        }
        ids_out out;
        tutti_ensemble_stats st;
        assert_int_equal(generate(e, seq, n_prompt, &sp, N_GREEDY, &out, &st), 0);
        printf("p%d: %d rounds, %lld accepted; predicted from fresh sessions %d, %d\n", k, st.n_draft_rounds,
               (long long)st.n_draft_accepted, rounds, acc);
        assert_int_equal(st.n_draft_rounds, rounds);
        assert_int_equal(st.n_draft_accepted, acc);
        assert_true(acc > 0 && acc < rounds); /* rejections: the draft's cache had to roll back */
    }
    tutti_ensemble_free(e);
    tutti_model_free(dm);
}

/* ---- sampled output: chi-square against the exact distribution ---- */

#define TOPK 3
#define N_TOK 4
#define N_CELLS 81 /* TOPK^N_TOK */
#define N_SEEDS 4000
#define TEMP 1.5f

/* The plain run's distribution of the next token after ids[0..n): top-3 of
 * the target's logits at temperature TEMP, in double (cand ids in c[]). */
static void plain_dist(tutti_model *m, const int32_t *ids, int32_t n, int32_t *c, double *p) {
    tutti_session_params sp = tutti_session_default_params();
    sp.n_threads = 1;
    tutti_session *s = tutti_session_new(m, &sp);
    assert_non_null(s);
    assert_int_equal(tutti_session_eval(s, ids, n, NULL), 0);
    const float *z = tutti_session_logits(s);
    int32_t V = tutti_model_n_vocab(m);
    for (int k = 0; k < TOPK; k++) {
        c[k] = -1;
        for (int32_t i = 0; i < V; i++) {
            bool taken = false;
            for (int j = 0; j < k; j++) taken |= c[j] == i;
            if (!taken && (c[k] < 0 || z[i] > z[c[k]])) c[k] = i;
        }
    }
    double sum = 0;
    for (int k = 0; k < TOPK; k++) sum += p[k] = exp(((double)z[c[k]] - z[c[0]]) / TEMP);
    for (int k = 0; k < TOPK; k++) p[k] /= sum;
    tutti_session_free(s);
}

/* Exact probabilities of every cell (the index of each of the N_TOK tokens
 * among its position's top 3) and the ids behind the indices. */
typedef struct tree {
    int32_t cand[1 + TOPK + TOPK * TOPK + TOPK * TOPK * TOPK][TOPK];
    double want[N_CELLS];
} tree;

static void build_tree(tutti_model *m, const int32_t *prompt, int n_prompt, tree *t, int node, int depth, int32_t *seq,
                       int n_seq, double pr, int cell) {
    double p[TOPK];
    plain_dist(m, seq, n_seq, t->cand[node], p);
    for (int k = 0; k < TOPK; k++) {
        if (depth + 1 == N_TOK) {
            t->want[cell * TOPK + k] = pr * p[k];
            continue;
        }
        seq[n_seq] = t->cand[node][k];
        build_tree(m, prompt, n_prompt, t, node * TOPK + 1 + k, depth + 1, seq, n_seq + 1, pr * p[k], cell * TOPK + k);
    }
}

/* The cell of a generated sequence, -1 if a token is outside its top 3. */
static int cell_of(const tree *t, const int32_t *ids) {
    int node = 0, cell = 0;
    for (int d = 0; d < N_TOK; d++) {
        int k = 0;
        while (k < TOPK && t->cand[node][k] != ids[d]) k++;
        if (k == TOPK) return -1;
        cell = cell * TOPK + k;
        node = node * TOPK + 1 + k;
    }
    return cell;
}

static void sampled_distribution(int32_t lookup_n) {
    require_shared();
    tutti_model_params mp = tutti_model_default_params();
    tutti_model *m = tutti_model_load(shared_path(TARGET), &mp);
    assert_non_null(m);
    int32_t prompt[512], greedy[N_GREEDY + 1], seq[512 + N_TOK];
    int n_prompt, n_greedy;
    read_ref(1, prompt, &n_prompt, greedy, &n_greedy);
    if (lookup_n > 0) { /* a text that repeats: the story, then its start again (BOS left out) */
        int n0 = n_prompt;
        memcpy(prompt + n_prompt, greedy, sizeof greedy[0] * N_GREEDY);
        n_prompt += N_GREEDY;
        memcpy(prompt + n_prompt, prompt + 1, sizeof prompt[0] * (size_t)(n0 - 1));
        n_prompt += n0 - 1;
    }
    static tree t;
    memcpy(seq, prompt, sizeof prompt[0] * (size_t)n_prompt);
    build_tree(m, prompt, n_prompt, &t, 0, 0, seq, n_prompt, 1.0, 0);
    tutti_ensemble *e = target_with_draft(3, 0.0f, lookup_n);
    static int count[N_CELLS];
    memset(count, 0, sizeof count);
    tutti_sampler_params sp = {.temp = TEMP, .top_k = TOPK, .top_p = 1.0f, .min_p = 0.0f, .repeat_penalty = 1.0f};
    int64_t drafted = 0, accepted = 0;
    for (int s = 0; s < N_SEEDS; s++) {
        sp.seed = 1000 + (uint64_t)s;
        ids_out out;
        tutti_ensemble_stats st;
        assert_int_equal(generate(e, prompt, n_prompt, &sp, N_TOK, &out, &st), 0);
        assert_int_equal(out.n, N_TOK);
        int c = cell_of(&t, out.ids);
        assert_true(c >= 0); /* top-k 3: nothing else can come */
        count[c]++;
        drafted += st.n_drafted, accepted += st.n_draft_accepted;
    }
    int df;
    double crit, chi2 = test_chi2(count, t.want, N_CELLS, N_SEEDS, &df, &crit);
    printf("chi-square %.1f on %d degrees of freedom (0.1%% critical value %.1f); %lld drafted, %lld accepted\n", chi2,
           df, crit, (long long)drafted, (long long)accepted);
    assert_true(accepted > 0 && accepted < drafted);
    assert_true(chi2 < crit);
    tutti_ensemble_free(e);
    tutti_model_free(m);
}

static void test_sampled_distribution(void **state) {
    (void)state;
    sampled_distribution(0);
}

/* prompt lookup: one-hot proposals, accepted with probability p(x) */
static void test_sampled_distribution_lookup(void **state) {
    (void)state;
    sampled_distribution(2);
}

/* a draft with another tokenizer: its greedy text re-spelled in the
 * target's tokens, a one-hot proposal */
static void test_sampled_distribution_respell(void **state) {
    (void)state;
    g_draft = DRAFT_TOK361;
    sampled_distribution(0);
    g_draft = DRAFT;
}

/* A token-aligned ensemble: both members verify each round in one pass, and
 * the fused rule's greedy choices are those of the plain fused run. */
static void test_ensemble_greedy(void **state) {
    (void)state;
    require_shared();
    const char *rel[2] = {TARGET, "models/stories260K-ft/stories260K-poems.gguf"};
    tutti_sampler_params sp = tutti_sampler_default_params();
    sp.temp = 0;
    int32_t prompt[256], greedy[N_GREEDY + 1];
    int n_prompt, n_greedy;
    read_ref(3, prompt, &n_prompt, greedy, &n_greedy);
    /* a draft of the members' tokenizer, then one of another (re-spelled) */
    for (int c = 0; c < 2 * (TUTTI_RULE_PRODUCT - TUTTI_RULE_MIX + 1); c++) {
        int rule = TUTTI_RULE_MIX + c / 2;
        ids_out plain, drafted;
        tutti_ensemble_stats st;
        tutti_ensemble *e = test_ensemble(rel, 2, TUTTI_ALIGN_TOKEN, rule);
        assert_non_null(e);
        if (generate(e, prompt, n_prompt, &sp, 100, &plain, &st) != 0) fail_msg("plain: %s", tutti_last_error());
        tutti_draft_params dp = tutti_draft_default_params();
        dp.model_path = shared_path(c % 2 ? DRAFT_TOK361 : DRAFT);
        dp.p_min = 0.3f;
        dp.n_max = 6;
        assert_int_equal(tutti_ensemble_set_draft(e, &dp), 0);
        assert_int_equal(generate(e, prompt, n_prompt, &sp, 100, &drafted, &st), 0);
        printf("%s, %s: %d tokens, %d rounds, %lld drafted, %lld accepted, member passes %lld and %lld\n",
               tutti_rule_name((tutti_fusion_rule)rule), c % 2 ? DRAFT_TOK361 : DRAFT, drafted.n, st.n_draft_rounds,
               (long long)st.n_drafted, (long long)st.n_draft_accepted, (long long)st.n_member_passes[0],
               (long long)st.n_member_passes[1]);
        assert_int_equal(drafted.n, plain.n);
        assert_memory_equal(drafted.ids, plain.ids, sizeof plain.ids[0] * (size_t)plain.n);
        assert_true(st.n_draft_accepted > 0 && st.n_draft_accepted < st.n_drafted);
        assert_true(st.n_member_passes[0] < plain.n && st.n_member_passes[1] < plain.n);
        tutti_ensemble_free(e);
    }
}

static void test_errors(void **state) {
    (void)state;
    require_shared();
    tutti_ensemble *e = target_with_draft(0, 0, 0);
    tutti_draft_params dp = tutti_draft_default_params();
    dp.model_path = shared_path(DRAFT_656K); /* another tokenizer: re-spelled */
    if (tutti_ensemble_set_draft(e, &dp) != 0) fail_msg("set_draft: %s", tutti_last_error());
    dp.model_path = shared_path(DRAFT);
    dp.n_min = 17;
    assert_int_equal(tutti_ensemble_set_draft(e, &dp), TUTTI_ERR);
    assert_non_null(strstr(tutti_last_error(), "n_min 17"));
    dp.n_min = 0, dp.p_min = 1.5f;
    assert_int_equal(tutti_ensemble_set_draft(e, &dp), TUTTI_ERR);
    dp.p_min = 0.5f, dp.model_path = "/nonexistent/draft.gguf";
    assert_int_equal(tutti_ensemble_set_draft(e, &dp), TUTTI_ERR);
    assert_non_null(strstr(tutti_last_error(), "cannot open"));
    tutti_ensemble_free(e);
    const char *rel[2] = {TARGET, "models/TinyStories-656K-Q8_0.gguf"};
    e = test_ensemble(rel, 2, TUTTI_ALIGN_BYTE, TUTTI_RULE_MIX);
    assert_non_null(e);
    dp.model_path = shared_path(DRAFT);
    assert_int_equal(tutti_ensemble_set_draft(e, &dp), 0); /* byte alignment: the draft proposes bytes */
    dp.model_path = NULL, dp.lookup_n = 2;
    assert_int_equal(tutti_ensemble_set_draft(e, &dp), TUTTI_ERR);
    assert_non_null(strstr(tutti_last_error(), "prompt lookup needs token alignment"));
    tutti_ensemble_free(e);
    e = test_ensemble(rel, 2, TUTTI_ALIGN_SPAN, TUTTI_RULE_MIX);
    assert_non_null(e);
    dp.model_path = shared_path(DRAFT), dp.lookup_n = 0;
    assert_int_equal(tutti_ensemble_set_draft(e, &dp), TUTTI_ERR);
    assert_non_null(strstr(tutti_last_error(), "span alignment"));
    tutti_ensemble_free(e);
}

/* ---- byte alignment ---- */

#define BYTE_MAX 4096
typedef struct bytes_out {
    char b[BYTE_MAX];
    int chosen[BYTE_MAX]; /* the outcomes (256: the end) */
    int n;
    float row[8][257]; /* the first rows' log-probabilities (the sampled check) */
} bytes_out;

static int collect_bytes(const tutti_step *st, void *user) {
    bytes_out *o = user;
    if (o->n < 8 && st->n_outcomes == 257) memcpy(o->row[o->n], st->logprobs, sizeof o->row[0]);
    if (o->n < BYTE_MAX) o->chosen[o->n] = st->chosen, o->b[o->n++] = (char)st->chosen;
    return 0;
}

static int generate_bytes(tutti_ensemble *e, const char *prompt, const tutti_sampler_params *sp, int max_len,
                          bytes_out *out, tutti_ensemble_stats *st) {
    out->n = 0;
    tutti_ensemble_set_step_cb(e, collect_bytes, out);
    tutti_mask m = {.max_len = max_len};
    return tutti_ensemble_generate(e, prompt, strlen(prompt), sp, &m, NULL, NULL, st);
}

/* The three quick-start members (three tokenizers) fused byte by byte */
static const char *const byte_members[3] = {TARGET, DRAFT_656K, DRAFT_TOK361};

static void set_byte_draft(tutti_ensemble *e, const char *draft, int32_t n_max, float p_min) {
    tutti_draft_params dp = tutti_draft_default_params();
    dp.model_path = shared_path(draft);
    dp.n_max = n_max;
    dp.p_min = p_min;
    dp.n_threads = 1;
    if (tutti_ensemble_set_draft(e, &dp) != 0) fail_msg("set_draft: %s", tutti_last_error());
}

/* Greedy identity: the drafted run's bytes are the plain run's, for drafts
 * of a member's tokenizer and of another, several lengths and cuts, two
 * rules and prompts; drafts were rejected (the identity held through
 * rejections: a round accepted without the fused rule's verification
 * would write the draft's text, which differs) and accepted; and the
 * member with the shortest tokens (BabyLlama-tok361, about a byte per
 * token) verifies in fewer forward passes than it runs plain. */
static void test_byte_greedy(void **state) {
    (void)state;
    require_shared();
    const struct {
        const char *draft;
        int32_t n_max;
        float p_min;
    } cfg[] = {
        {TARGET, 16, 0.75f}, {TARGET, 3, 0.0f}, {DRAFT, 6, 0.3f}, {DRAFT_TOK361, 8, 0.5f}, {DRAFT_656K, 1, 0.0f}};
    const char *prompts[2] = {"Once upon a time", "The little dog"};
    tutti_sampler_params sp = tutti_sampler_default_params();
    sp.temp = 0;
    for (int rule = TUTTI_RULE_MIX; rule <= TUTTI_RULE_PRODUCT; rule++)
        for (int p = 0; p < 2; p++) {
            tutti_ensemble *e = test_ensemble(byte_members, 3, TUTTI_ALIGN_BYTE, rule);
            assert_non_null(e);
            static bytes_out plain, drafted;
            tutti_ensemble_stats st0, st;
            if (generate_bytes(e, prompts[p], &sp, 160, &plain, &st0) != 0) fail_msg("plain: %s", tutti_last_error());
            assert_true(plain.n > 100);
            for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
                set_byte_draft(e, cfg[c].draft, cfg[c].n_max, cfg[c].p_min);
                if (generate_bytes(e, prompts[p], &sp, 160, &drafted, &st) != 0)
                    fail_msg("drafted: %s", tutti_last_error());
                printf("%s, \"%s\", draft %s max %d p-min %.2f: %d bytes, %d rounds, %lld drafted, %lld accepted; "
                       "passes %lld %lld %lld (plain %lld %lld %lld)\n",
                       tutti_rule_name((tutti_fusion_rule)rule), prompts[p], cfg[c].draft, cfg[c].n_max,
                       (double)cfg[c].p_min, drafted.n, st.n_draft_rounds, (long long)st.n_drafted,
                       (long long)st.n_draft_accepted, (long long)st.n_member_passes[0],
                       (long long)st.n_member_passes[1], (long long)st.n_member_passes[2],
                       (long long)st0.n_member_passes[0], (long long)st0.n_member_passes[1],
                       (long long)st0.n_member_passes[2]);
                assert_int_equal(drafted.n, plain.n);
                assert_memory_equal(drafted.b, plain.b, (size_t)plain.n);
                assert_true(st.n_draft_accepted > 0 && st.n_draft_accepted < st.n_drafted);
                assert_true(st.n_draft_rounds > 0 && st.n_draft_rounds < plain.n);
                if (cfg[c].n_max > 1) assert_true(st.n_member_passes[2] < st0.n_member_passes[2]);
            }
            tutti_ensemble_free(e);
        }
}

/* Sampled byte alignment: the first two bytes' joint frequencies over
 * 3000 seeds against the plain run's distribution, p(b0) p(b1 | b0), read
 * from the fused rows the plain runs report (a prompt ending in b0 gives
 * the row after it: the byte states commit a prompt byte by byte as they
 * commit generated bytes).  Temperature 1 without filters, so the rows are
 * what the sampler draws from; the drafts are deterministic (one-hot q). */
static void test_byte_sampled(void **state) {
    (void)state;
    require_shared();
    const char *prompt = "Once upon a time, there was a";
    tutti_ensemble *e = test_ensemble(byte_members, 3, TUTTI_ALIGN_BYTE, TUTTI_RULE_MIX);
    assert_non_null(e);
    tutti_sampler_params sp = {.temp = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .repeat_penalty = 1.0f};
    static bytes_out o;
    tutti_ensemble_stats st;
    /* the exact distribution: p(b0) from the plain first row, p(b1 | b0)
     * from the first row after prompt · b0, for the b0 worth a cell */
    assert_int_equal(generate_bytes(e, prompt, &sp, 1, &o, &st), 0);
    double p0[257], want[257][257];
    int n_b0 = 0, b0s[257];
    for (int b = 0; b < 257; b++) p0[b] = exp((double)o.row[0][b]);
    memset(want, 0, sizeof want);
    for (int b = 0; b < 256; b++) {
        if (p0[b] * 3000 < 5) continue;
        char pr[128];
        snprintf(pr, sizeof pr, "%s%c", prompt, (char)b);
        assert_int_equal(generate_bytes(e, pr, &sp, 1, &o, &st), 0);
        for (int c = 0; c < 257; c++) want[b][c] = p0[b] * exp((double)o.row[0][c]);
        b0s[n_b0++] = b;
    }
    printf("byte alignment, sampled: %d first bytes worth a cell\n", n_b0);
    assert_true(n_b0 >= 1);
    set_byte_draft(e, TARGET, 4, 0.0f);
    static int count[257][257]; /* [b0][b1], b0 < 256 */
    memset(count, 0, sizeof count);
    int64_t drafted = 0, accepted = 0;
    const int n_seeds = 3000;
    for (int s = 0; s < n_seeds; s++) {
        sp.seed = 5000 + (uint64_t)s;
        assert_int_equal(generate_bytes(e, prompt, &sp, 2, &o, &st), 0);
        assert_true(o.n >= 1);
        int b0 = o.chosen[0], b1 = o.n > 1 ? o.chosen[1] : 256;
        if (b0 == 256) continue; /* the end at once: in the pool (no cell has b0 = end) */
        count[b0][b1]++;
        drafted += st.n_drafted, accepted += st.n_draft_accepted;
    }
    /* cells: (b0, b1) with an expected count >= 5, the rest pooled */
    double chi2 = 0, pool_e = 0, pool_o = n_seeds;
    int df = -1;
    for (int k = 0; k < n_b0; k++)
        for (int c = 0; c < 257; c++) {
            double ex = want[b0s[k]][c] * n_seeds;
            if (ex < 5) continue;
            int ob = count[b0s[k]][c];
            chi2 += (ob - ex) * (ob - ex) / ex;
            pool_e -= ex, pool_o -= ob;
            df++;
        }
    pool_e += n_seeds;
    if (pool_e > 0) chi2 += (pool_o - pool_e) * (pool_o - pool_e) / pool_e, df++;
    double a = 2.0 / (9.0 * df), crit = df * pow(1 - a + 3.090 * sqrt(a), 3);
    printf("byte alignment, sampled: chi-square %.1f on %d degrees of freedom (0.1%% critical value %.1f); %lld "
           "bytes drafted, %lld accepted\n",
           chi2, df, crit, (long long)drafted, (long long)accepted);
    assert_true(df >= 3);
    assert_true(accepted > 0 && accepted < drafted);
    assert_true(chi2 < crit);
    tutti_ensemble_free(e);
}

static void test_cli(void **state) {
    (void)state;
    require_shared();
    char cmd[4096], target[1024], draft[1024];
    snprintf(target, sizeof target, "%s", shared_path(TARGET));
    snprintf(draft, sizeof draft, "%s", shared_path(DRAFT));
    int st;
    /* generate, run, and generate past a full context that shifts (-c 48: rounds pause there) */
    for (int run = 0; run < 3; run++) {
        const char *sub = run == 1 ? "run" : "generate", *lim = run == 2 ? "-c 48 -n 120" : "-n 60";
        snprintf(cmd, sizeof cmd, "%s %s -m %s -p 'Once upon a time' %s --temp 0 -t 1 2>/dev/null", TUTTI_CLI, sub,
                 target, lim);
        char *plain = run_cmd(cmd, &st);
        assert_int_equal(st, 0);
        snprintf(cmd, sizeof cmd,
                 "%s %s -m %s -md %s --draft-p-min 0 -p 'Once upon a time' %s --temp 0 -t 1 "
                 "2>/tmp/test_draft_err.%d",
                 TUTTI_CLI, sub, target, draft, lim, (int)getpid());
        char *drafted = run_cmd(cmd, &st);
        assert_int_equal(st, 0);
        assert_string_equal(plain, drafted);
        char path[64];
        snprintf(path, sizeof path, "/tmp/test_draft_err.%d", (int)getpid());
        size_t len;
        char *err = read_file(path, &len);
        assert_non_null(err);
        assert_non_null(strstr(err, "accepted ("));
        unlink(path);
        free(err), free(plain), free(drafted);
    }
    /* byte alignment under tutti run: the same text, the summary in bytes */
    {
        char m2[1024], m3[1024], bcmd[8192];
        snprintf(m2, sizeof m2, "%s", shared_path(DRAFT_656K));
        snprintf(m3, sizeof m3, "%s", shared_path(DRAFT_TOK361));
        snprintf(bcmd, sizeof bcmd,
                 "%s run -m %s -m %s -m %s --align byte -p 'Once upon a time' -n 40 --temp 0 -t 1 2>/dev/null",
                 TUTTI_CLI, target, m2, m3);
        char *plain = run_cmd(bcmd, &st);
        assert_int_equal(st, 0);
        assert_true(strlen(plain) > 60);
        char path[64];
        snprintf(path, sizeof path, "/tmp/test_draft_err.%d", (int)getpid());
        snprintf(bcmd, sizeof bcmd,
                 "%s run -m %s -m %s -m %s --align byte -md %s --draft-max 3 --draft-p-min 0 -p 'Once upon a time' "
                 "-n 40 --temp 0 -t 1 2>%s",
                 TUTTI_CLI, target, m2, m3, target, path);
        char *drafted = run_cmd(bcmd, &st);
        assert_int_equal(st, 0);
        assert_string_equal(plain, drafted);
        size_t len;
        char *err = read_file(path, &len);
        assert_non_null(err);
        assert_non_null(strstr(err, "bytes drafted"));
        unlink(path);
        free(err), free(plain), free(drafted);
    }
    snprintf(cmd, sizeof cmd, "%s generate -m %s --draft-max 4 -p x 2>&1", TUTTI_CLI, target);
    char *o = run_cmd(cmd, &st);
    assert_int_equal(st, 2);
    assert_non_null(strstr(o, "need a draft model"));
    free(o);
    snprintf(cmd, sizeof cmd, "%s generate -m %s -md %s --draft-min 5 --draft-max 4 -p x 2>&1", TUTTI_CLI, target,
             draft);
    o = run_cmd(cmd, &st);
    assert_int_equal(st, 2);
    free(o);
    snprintf(cmd, sizeof cmd, "%s generate --help", TUTTI_CLI);
    o = run_cmd(cmd, &st);
    assert_int_equal(st, 0);
    assert_non_null(strstr(o, "--draft-max N"));
    assert_non_null(strstr(o, "default: 16"));
    assert_non_null(strstr(o, "-hfd, --hf-repo-draft"));
    free(o);
}

/* fusion_retok against tutti_tokenize of the whole text: the committed
 * text grows by 1-48 bytes a round and each round also tokenizes it with a
 * continuation that the next round drops (a rejected draft), as
 * respell_propose does. */
static void test_retok(void **state) {
    (void)state;
    require_shared();
    const char *vocabs[] = {"models/stories260K.gguf",
                            "models/BabyLlama-tok361/babyllama-tok361.gguf",
                            "models/vocab/ggml-vocab-llama-spm.gguf",
                            "models/vocab/ggml-vocab-llama3.gguf",
                            "models/vocab/ggml-vocab-gpt-2.gguf",
                            "models/vocab/ggml-vocab-qwen3.gguf",
                            "models/vocab/ggml-vocab-phi-3.gguf"};
    size_t n_story, n_mixed;
    char *story = read_file(shared_path("eval/stories-dev.txt"), &n_story);
    char *mixed = read_file(shared_path("eval/mixed-dev.txt"), &n_mixed);
    assert_non_null(story);
    assert_non_null(mixed);
    int32_t len = 3000;
    char *text = malloc((size_t)len * 2 + 64);
    memcpy(text, story, 2000);
    memcpy(text + 2000, mixed + n_mixed / 2, 1000); /* other scripts, digits, newlines */
    int32_t *want = malloc(sizeof(int32_t) * (size_t)(len * 2 + 64));
    for (size_t f = 0; f < sizeof vocabs / sizeof *vocabs; f++) {
        tutti_vocab *v = tutti_vocab_load(shared_path(vocabs[f]));
        assert_non_null(v);
        bool bos = tutti_vocab_add_bos(v);
        fusion_retok r = {0};
        uint64_t rng = 12345;
        int32_t rounds = 0, bad = 0;
        for (int32_t at = 1; at < len; rounds++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            at += 1 + (int32_t)((rng >> 33) % 48);
            if (at > len) at = len;
            for (int pass = 0; pass < 2; pass++) {
                /* pass 1: the text with a continuation of the next bytes' reverse */
                char *t = text;
                int32_t n = at;
                char buf[3200];
                if (pass) {
                    memcpy(buf, text, (size_t)at);
                    for (int32_t j = 0; j < 12 && at + j < len; j++)
                        buf[at + j] = text[at + 11 - j < len ? at + 11 - j : at];
                    n = at + 12 < len ? at + 12 : len;
                    t = buf;
                }
                int32_t m = fusion_retok_update(&r, v, bos, t, n);
                int32_t w = tutti_tokenize(v, t, (size_t)n, bos, false, want, len * 2 + 64);
                assert_true(w > 0);
                if (m != w || memcmp(r.ids, want, sizeof(int32_t) * (size_t)w)) {
                    bad++;
                    int32_t i = 0;
                    while (i < m && i < w && r.ids[i] == want[i]) i++;
                    int32_t b0 = i > 0 ? r.end[i - 1] : 0;
                    fprintf(stderr, "retok %s: differs at token %d, byte %d: \"%.*s\"\n", vocabs[f], i, b0,
                            n - b0 < 40 ? n - b0 : 40, t + b0);
                }
            }
        }
        fprintf(stderr, "retok %s: %d rounds, %lld whole, %lld tail, %d differ\n", vocabs[f], rounds,
                (long long)r.n_full, (long long)r.n_tail, bad);
        assert_int_equal(bad, 0);
        assert_true(r.n_tail >= 3 * r.n_full); /* the tail is what is tokenized */
        fusion_retok_free(&r);
        tutti_vocab_free(v);
    }
    free(want), free(text), free(story), free(mixed);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_identity),
        cmocka_unit_test(test_draft_kv_rollback),
        cmocka_unit_test(test_sampled_distribution),
        cmocka_unit_test(test_sampled_distribution_lookup),
        cmocka_unit_test(test_sampled_distribution_respell),
        cmocka_unit_test(test_ensemble_greedy),
        cmocka_unit_test(test_byte_greedy),
        cmocka_unit_test(test_byte_sampled),
        cmocka_unit_test(test_retok),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_cli),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
