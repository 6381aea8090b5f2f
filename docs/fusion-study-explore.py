#!/usr/bin/env python3
"""Session 15's offline study of fusion rules on the four story models
(docs/fusion-study.md, "Session 15"): every candidate fitted on one half of
stories-dev.txt and measured on the other (cross-validated, summed by bytes),
fitted on the whole dev file and measured on it (in-sample) and on two
held-out texts (tests/data/heldout/stories.txt, H1, and
docs/fusion-study/heldout-s15/stories.txt, H2, written in session 15).

The members' rows come from bench/byte_tables (the very tables `tutti eval`
and `tutti fit` fuse, byte alignment, temperature 1; the four story models also at `fit`'s
temperature grid), so the static product
and mixture rows reproduce eval's figures (uniform product: dev 1.0255,
H1 1.1080).  Fitting is numpy only: BFGS with central-difference gradients
for the non-convex rules, Newton's method for the log-linear pools (convex:
every parameter multiplies a feature of the outcome).

usage: docs/fusion-study-explore.py BUILD WORK [CANDIDATE...]
  (writes the halves and the tables to WORK; candidates: see CANDIDATES; default all, ~30 minutes of one core)
"""
import itertools, os, subprocess, sys
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__)) + '/..'
SH = os.environ.get('TUTTI_SHARED_DIR', HERE + '/../shared')
MS = SH + '/models'
MEMBERS = {'s260': MS + '/stories260K.gguf', 'ts656': MS + '/TinyStories-656K-Q8_0.gguf',
           't105': MS + '/BabyLlama-tok105/babyllama-tok105.gguf', 't361': MS + '/BabyLlama-tok361/babyllama-tok361.gguf',
           'sdr': MS + '/stories260K-ft/stories260K-dreams.gguf', 'spo': MS + '/stories260K-ft/stories260K-poems.gguf',
           'aid': MS + '/aidreams260K/aidreams260K.gguf'}
FOUR = ['s260', 'ts656', 't105', 't361']
CL = -1e4  # FUSION_POOL_CLAMP: an outcome a member rules out
TEMPS = ['0.8', '0.9', '1', '1.1', '1.25']  # tutti fit's default temperature grid


def prepare(build, work):
    paras = [p.strip() for p in open(SH + '/eval/stories-dev.txt', encoding='utf-8').read().split('\n\n') if p.strip()]
    h = len(paras) // 2
    texts = {'A': paras[:h], 'B': paras[h:]}
    for k, ps in texts.items():
        open(f'{work}/{k}.txt', 'w', encoding='utf-8').write('\n\n'.join(ps) + '\n')
    src = {'DEV': SH + '/eval/stories-dev.txt', 'H1': HERE + '/tests/data/heldout/stories.txt',
           'H2': HERE + '/docs/fusion-study/heldout-s15/stories.txt'}
    for k, p in src.items():
        open(f'{work}/{k}.txt', 'wb').write(open(p, 'rb').read())
    for k in ['A', 'B', 'DEV', 'H1', 'H2']:
        for m, path in MEMBERS.items():
            temps = TEMPS if m in FOUR else ['1']
            if not os.path.exists(f'{work}/{k}.{m}.t{temps[-1]}'):
                subprocess.run([build + '/byte_tables', path, f'{work}/{k}.txt', f'{work}/{k}.{m}'] + temps, check=True,
                               stderr=subprocess.DEVNULL)


def lse(s):
    mx = s.max(1, keepdims=True)
    return (mx + np.log(np.exp(s - mx).sum(1, keepdims=True)))[:, 0]


class Text:
    def __init__(self, work, name, mem):
        self.y = np.fromfile(f'{work}/{name}.{mem[0]}.y', dtype=np.int32)
        self.n, self.I = len(self.y), np.arange(len(self.y))
        self.L = [np.maximum(np.fromfile(f'{work}/{name}.{m}.t1', dtype=np.float32).reshape(self.n, 257).astype(float), CL)
                  for m in mem]
        self.P = [np.exp(l) for l in self.L]
        self.cs = np.fromfile(f'{work}/{name}.{mem[0]}.cs', dtype=np.int64)
        self.work, self.name = work, name

    def bpb(self, logq):
        return -(logq[self.I, self.y]).sum() / np.log(2) / self.n


def bfgs(f, x0, iters=200, eps=1e-5):
    x = np.array(x0, float)
    n = len(x)
    H = np.eye(n)

    def grad(x):
        return np.array([(f(x + e) - f(x - e)) / (2 * eps) for e in np.eye(n) * eps])
    fx, g = f(x), grad(x)
    for _ in range(iters):
        p = -H @ g
        if g @ p >= 0:
            H, p = np.eye(n), -g
        t = 1.0
        while True:
            xn = x + t * p
            fn = f(xn)
            if fn <= fx + 1e-4 * t * (g @ p) or t < 1e-8:
                break
            t *= 0.5
        if t < 1e-8:
            break
        gn = grad(xn)
        s, yv = xn - x, gn - g
        if s @ yv > 1e-12:
            r, I = 1 / (s @ yv), np.eye(n)
            H = (I - r * np.outer(s, yv)) @ H @ (I - r * np.outer(yv, s)) + r * np.outer(s, s)
        x, fx, g = xn, fn, gn
        if np.abs(g).max() < 1e-7:
            break
    return x


def sm(th):
    e = np.exp(th - th.max())
    return e / e.sum()


def prod(t, c):
    S = sum(ci * l for ci, l in zip(c, t.L))
    return S - lse(S)[:, None]


def mix(t, w):
    w = np.asarray(w) / np.sum(w)
    return np.log(sum(wi * p for wi, p in zip(w, t.P)) + 1e-300)


def sig(z):
    return 1 / (1 + np.exp(-z))


# ---- the log-linear pools: log q(x) = Σ_k θ_k φ_k(x) - log Z, fitted by Newton (convex) ----
def unit_feats(t, kind):
    """Per-unit context features (the same for every outcome of the unit)."""
    pos, prev = np.zeros(t.n), np.full(t.n, -1)
    for a, b in zip(t.cs[:-1], t.cs[1:]):
        pos[a:b] = np.arange(b - a)
        prev[a + 1:b] = t.y[a:b - 1]
    H = [-(p * np.where(l > -1e3, l, 0)).sum(1) / np.log(257) for p, l in zip(t.P, t.L)]
    f = []
    if 'H' in kind: f += H
    if 'top' in kind: f += [p.max(1) for p in t.P]
    if 'pos' in kind: f += [np.log1p(pos) / 5, (pos == 0) * 1.0]
    if 'prev' in kind:
        ch = [chr(c) if c >= 0 else '' for c in prev]
        f += [np.array([c == ' ' for c in ch]) * 1.0, np.array([c.isupper() for c in ch]) * 1.0,
              np.array([c in '.,!?"\'' for c in ch]) * 1.0]
    if 'agree' in kind:
        Pm = sum(t.P) / len(t.P)
        f += [(p * Pm).sum(1) for p in t.P]
    if 'dis' in kind:
        Pm = sum(t.P) / len(t.P)
        f += [-(Pm * np.log(Pm + 1e-300)).sum(1) - np.mean(H, 0) * np.log(257)]
    return f


def outcome_feats(t, kind, ctx=''):
    Ls = [np.maximum(l, -30) for l in t.L]
    F = list(Ls)
    if 'sq' in kind: F += [l * l / 30 for l in Ls]
    if 'mm' in kind: F += [np.stack(Ls).max(0), np.stack(Ls).min(0)]
    if 'mix' in kind: F += [np.log(sum(t.P) / len(t.P) + 1e-300)]
    if 'pair' in kind: F += [np.maximum(a, b) for a, b in itertools.combinations(Ls, 2)]
    if 'temps' in kind:  # every member at every grid temperature as its own row (log-linear: exponents fitted per row)
        F = [np.maximum(np.fromfile(f'{t.work}/{t.name}.{m}.t{tt}', dtype=np.float32).reshape(t.n, 257).astype(float), -30)
             for m in FOUR for tt in TEMPS]
    for u in unit_feats(t, ctx) if ctx else []:
        F += [u[:, None] * l for l in Ls]
    return np.stack(F)


def fit_loglinear(F, y, lam):
    K, n = F.shape[0], F.shape[1]
    I = np.arange(n)
    th = np.zeros(K)
    th[:4] = 0.25
    Fy = F[:, I, y]

    def obj(th):
        S = np.tensordot(th, F, 1)
        S = S - lse(S)[:, None]
        return -(S[I, y]).sum() / n + lam / 2 * th @ th, S
    for _ in range(60):
        f0, S = obj(th)
        q = np.exp(S)
        Eq = np.einsum('knx,nx->kn', F, q)
        g = -(Fy - Eq).sum(1) / n + lam * th
        C = np.einsum('knx,jnx,nx->kj', F, F, q) / n - Eq @ Eq.T / n + lam * np.eye(K)
        step, t = np.linalg.solve(C + 1e-9 * np.eye(K), g), 1.0
        while t >= 1e-4 and obj(th - t * step)[0] > f0:
            t /= 2
        th = th - t * step
        if np.abs(g).max() < 1e-8:
            break
    return th


def ev_loglinear(F, y, th):
    S = np.tensordot(th, F, 1)
    S = S - lse(S)[:, None]
    return -(S[np.arange(len(y)), y]).sum() / np.log(2) / len(y)


# ---- candidates: name -> (members, fit(t) -> params, eval(t, params) -> bpb) ----
def pmean(t, par):  # power mean (Σ w_i p_i^β)^(γ/β), renormalised
    w, beta, g = sm(par[:4]), par[4], np.exp(par[5])
    if abs(beta) < 1e-6:
        S = sum(wi * l for wi, l in zip(w, t.L))
    else:
        A = np.stack([np.log(wi) + beta * l for wi, l in zip(w, t.L)])
        mx = A.max(0)
        S = (mx + np.log(np.exp(A - mx).sum(0))) / beta
    S = g * S
    return S - lse(S)[:, None]


def prodmix(t, par):  # Π p_i^c_i · (Σ w_j p_j)^c_m
    S = sum(ci * l for ci, l in zip(par[:4], t.L)) + par[4] * mix(t, sm(par[5:9]))
    return S - lse(S)[:, None]


def smoothed(t, par, toward):  # Π ((1-ε_i) p_i + ε_i r)^c_i, r the uniform mixture or uniform
    r = sum(t.P) / len(t.P) if toward == 'mix' else 1 / 257
    S = sum(c * np.log((1 - e) * p + e * r) for c, e, p in zip(par[:4], sig(par[4:8]), t.P))
    return S - lse(S)[:, None]


def ctxprod(t, par, U):  # the implemented context product: w_i(t) = softmax_i(a_i + b_i·f(t)), Σ w_i = 1
    K = len(U)
    B = par[4:].reshape(4, K)
    u = np.stack([par[i] + sum(B[i, k] * U[k] for k in range(K)) for i in range(4)])
    w = np.exp(u - u.max(0))
    w /= w.sum(0)
    S = sum(w[i][:, None] * t.L[i] for i in range(4))
    return S - lse(S)[:, None]


def static(mem, rule):
    n = len(mem)
    f = (lambda t, th: t.bpb(prod(t, sm(th)))) if rule == 'product' else (lambda t, th: t.bpb(mix(t, sm(th))))
    return mem, lambda t: bfgs(lambda th: f(t, th), np.zeros(n)), f


def loglinear(kind, ctx, lam):
    return FOUR, ('ll', kind, ctx, lam), None


CANDIDATES = {
    'product': static(FOUR, 'product'),
    'mix': static(FOUR, 'mix'),
    'product-free-scale': (FOUR, lambda t: bfgs(lambda c: t.bpb(prod(t, c)), np.ones(4) / 4), lambda t, c: t.bpb(prod(t, c))),
    'product-7-members': static(list(MEMBERS), 'product'),
    **{f'product-{"-".join(s)}': static(list(s), 'product') for s in
       [('s260', 't105', 't361'), ('s260', 'ts656', 't361'), ('s260', 'ts656', 't105'), ('ts656', 't105', 't361'),
        ('s260', 't361')]},
    'power-mean': (FOUR, lambda t: bfgs(lambda p: t.bpb(pmean(t, p)), np.r_[np.zeros(4), 0.3, 0.0]),
                   lambda t, p: t.bpb(pmean(t, p))),
    'product-times-mix': (FOUR, lambda t: bfgs(lambda p: t.bpb(prodmix(t, p)), np.r_[np.ones(4) / 4, 0.0, np.zeros(4)]),
                          lambda t, p: t.bpb(prodmix(t, p))),
    'product-of-smoothed-to-mix': (FOUR, lambda t: bfgs(lambda p: t.bpb(smoothed(t, p, 'mix')), np.r_[np.ones(4) / 4, -3 * np.ones(4)], 80),
                                   lambda t, p: t.bpb(smoothed(t, p, 'mix'))),
    'product-of-smoothed-to-uniform': (FOUR, lambda t: bfgs(lambda p: t.bpb(smoothed(t, p, 'unif')), np.r_[np.ones(4) / 4, -5 * np.ones(4)], 80),
                                       lambda t, p: t.bpb(smoothed(t, p, 'unif'))),
    **{f'loglinear-{k or "plain"}-lam{lam:g}': loglinear(k, '', lam) for k in ['', 'sq', 'mm', 'mix', 'sq mm mix', 'pair', 'sq mm mix pair']
       for lam in [0, 1e-3, 1e-2]},
    **{f'loglinear-ctx-{c}-lam{lam:g}': loglinear('', c, lam) for c in ['H', 'top', 'pos', 'prev', 'agree', 'dis', 'H,top,pos,prev,agree,dis']
       for lam in [1e-3, 1e-2]},
    **{f'loglinear-temps-ctx-{c or "none"}-lam{lam:g}': loglinear('temps', c, lam) for c in ['', 'H,top,pos,prev,agree,dis']
       for lam in [1e-3, 1e-2]},
    **{f'ctxproduct-{c}': (FOUR, ('ctx', c), None) for c in ['pos', 'H']},
}


def run(name, work):
    mem, fit, evf = CANDIDATES[name]
    ts = {k: Text(work, k, mem) for k in ['A', 'B', 'DEV', 'H1', 'H2']}
    if isinstance(fit, tuple) and fit[0] == 'll':
        _, kind, ctx, lam = fit
        Fs = {k: outcome_feats(t, kind, ctx) for k, t in ts.items()}
        fit = lambda t: fit_loglinear(Fs[t.key], t.y, lam)
        evf = lambda t, th: ev_loglinear(Fs[t.key], t.y, th)
    elif isinstance(fit, tuple) and fit[0] == 'ctx':
        Us = {k: unit_feats(t, fit[1]) for k, t in ts.items()}
        K = len(Us['A'])
        evf = lambda t, p: t.bpb(ctxprod(t, p, Us[t.key]))
        fit = lambda t: bfgs(lambda p: evf(t, p) + 1e-3 * np.sum(p[4:] ** 2), np.zeros(4 + 4 * K), 60)
    for k, t in ts.items():
        t.key = k
    pa, pb, pd = fit(ts['A']), fit(ts['B']), fit(ts['DEV'])
    nA, nB = ts['A'].n, ts['B'].n
    cv = (evf(ts['B'], pa) * nB + evf(ts['A'], pb) * nA) / (nA + nB)
    h1, h2 = evf(ts['H1'], pd), evf(ts['H2'], pd)
    # the best members: tok361 on the dev file and H1, stories260K on H2 (eval's figures)
    print(f'{name:40s} CV {cv:.4f} ({(cv / 1.1286 - 1) * 100:+.1f} %)  dev {evf(ts["DEV"], pd):.4f}  '
          f'H1 {h1:.4f} ({(h1 / 1.2075 - 1) * 100:+.1f} %)  H2 {h2:.4f} ({(h2 / 1.2666 - 1) * 100:+.1f} %)', flush=True)


if __name__ == '__main__':
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    build, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    prepare(build, work)
    for name in sys.argv[3:] or CANDIDATES:
        run(name, work)
