"""Dense-channel experiments of stop 29 (issue 16): a learned query adapter and which text the vector sees.

    HF_HUB_OFFLINE=1 nice -n 5 .venv/bin/python scripts/dense_adapter_lab.py --locomo ../shared/data/locomo \
        [--cache /tmp/emb.pkl] [--part text|adapter|both|pipeline|rerank] [--grid diag:0.0001] [--strip-speakers]
        [--write]

Loads only the LoCoMo *tuning* half (conv-26/30/41/42/43) and the zh/en sets zh_en ... zh_en_9, embeds every turn
and its retrieval context separately (the stored vector is ``normalise(turn + context_weight * context)``,
:meth:`memory.service.MemoryService.embed_records`) and ranks each question's conversation by cosine alone (the
dense channel, no decay or query rules), so many variants can be scored without re-ingesting:

* ``text``: the vector of the turn alone, turn + context at several weights, and the max / mean of the two cosines.
* ``adapter``: a query-side linear map ``q' = normalise(q + A q)`` fitted with a softmax (InfoNCE) loss over each
  question's 50 nearest turns plus its evidence (the hard negatives), ridge-penalised (``lam * |A|^2``), full,
  low-rank or diagonal ``A``. Leave-one-conversation-out on LoCoMo tuning (fit on 4, score the 5th) and
  leave-one-set-out on the zh/en sets, each fitted with the other LoCoMo conversations and zh/en sets.
* ``pipeline``: the shipped search (hybrid = with the shipped reranker, linear, dense) with each held-out
  conversation's / set's adapter against the same search without it.
* ``rerank``: the reranker refitted leave-one-set-out (shipped grid point and features) on candidates found
  with vs without the adapter: would a refit that sees the adapter beat the shipped one out of set?
* ``--strip-speakers``: every question is embedded without the speakers' names (``scoring.strip_speakers``).
* ``--write``: fit on every fitting set and write ``memory/query_adapter.json`` (the shipped file, lam 1e-4).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memctl.evaluation import _turn_extra, load_dataset  # noqa: E402
from memctl.tune_retrieval import TUNE, DiskCachedEmbedder  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ZH = {f"zh_en{'' if i == 1 else f'_{i}'}": ROOT / "tests" / "data" / f"zh_en{'' if i == 1 else f'_{i}'}"
      for i in range(1, 10)}
ZH_FIT = tuple(f"zh_en{'' if i == 1 else f'_{i}'}" for i in range(1, 7))  # the reranker's fitting sets


@dataclass
class Conv:
    set_name: str
    ids: list[str]
    c: np.ndarray  # turn vectors
    x: np.ndarray  # context vectors (zero when the turn has no context)
    q: np.ndarray  # question vectors
    ev: list[np.ndarray]  # evidence turn indexes per question
    cat: list[str]


def load(data: Path, convs: Sequence[str] | None, emb: DiskCachedEmbedder, set_name: str | None) -> list[Conv]:
    turns, questions = load_dataset(data)
    out = []
    for conv, ts in turns.items():
        if convs is not None and conv not in convs:
            continue
        ids = [t.dia_id for t in ts]
        ctx = [_turn_extra(ts, j, 2).get("context", "") for j in range(len(ts))]
        c = emb.embed_documents([t.content for t in ts])
        x = np.zeros_like(c)
        has = [j for j, s in enumerate(ctx) if s]
        if has:
            x[has] = emb.embed_documents([ctx[j] for j in has])
        qs = [q for q in questions if q.conversation_id == conv]
        pos = {d: j for j, d in enumerate(ids)}
        keep = [q for q in qs if any(e in pos for e in q.evidence)]
        qv = np.stack([emb.embed_query(q.question.strip()) for q in keep])
        out.append(Conv(set_name or conv, ids, c, x, qv,
                        [np.array([pos[e] for e in q.evidence if e in pos]) for q in keep],
                        [q.category for q in keep]))
    return out


def unit(v: np.ndarray) -> np.ndarray:
    return v / np.maximum(np.linalg.norm(v, axis=-1, keepdims=True), 1e-9)


def stored(cv: Conv, w: float = 0.4) -> np.ndarray:
    return unit(cv.c + w * cv.x)


def ranks_from_scores(s: np.ndarray, ev: list[np.ndarray], depth: int = 50) -> list[int | None]:
    out: list[int | None] = []
    for i, e in enumerate(ev):
        best = s[i, e].max()
        r = int((s[i] > best).sum()) + 1
        out.append(r if r <= depth else None)
    return out


def metrics(ranks: Sequence[int | None]) -> tuple[float, float, float]:
    n = len(ranks)
    return (sum(1 for r in ranks if r and r <= 5) / n, sum(1 for r in ranks if r and r <= 10) / n,
            sum(1 / r for r in ranks if r) / n)


def fmt(m: tuple[float, float, float]) -> str:
    return f"{m[0]:.3f} / {m[1]:.3f} / {m[2]:.3f}"


# ----------------------------------------------------------------------------- which text
def text_variants(convs: list[Conv], zh: dict[str, list[Conv]] | None = None) -> None:
    variants: dict[str, Any] = {f"turn+{w}*context": (lambda cv, q, w=w: unit(q) @ stored(cv, w).T)
                                for w in (0.0, 0.2, 0.3, 0.4, 0.5, 0.7, 1.0)}
    variants["max(turn, turn+.4ctx)"] = lambda cv, q: np.maximum(q @ unit(cv.c).T, q @ stored(cv).T)
    variants["max(turn, context)"] = lambda cv, q: np.maximum(q @ unit(cv.c).T, q @ unit(cv.x).T)
    for a in (0.1, 0.2, 0.3):
        variants[f"turn + {a}*max(0, ctx-turn)"] = (
            lambda cv, q, a=a: q @ unit(cv.c).T + a * np.maximum(0, q @ unit(cv.x).T - q @ unit(cv.c).T))
    for name, f in variants.items():
        ranks = [r for cv in convs for r in ranks_from_scores(f(cv, cv.q), cv.ev)]
        line = f"dense {name:32} LoCoMo tuning {fmt(metrics(ranks))}"
        if zh:
            mrr = {k: metrics([r for cv in v for r in ranks_from_scores(f(cv, cv.q), cv.ev)])[2] for k, v in zh.items()}
            line += "; zh/en MRR " + " ".join(f"{k} {m:.3f}" for k, m in mrr.items())
        print(line, flush=True)


# ----------------------------------------------------------------------------- adapter
@dataclass
class Batch:
    q: np.ndarray  # (n, d)
    d: np.ndarray  # (n, k, d) candidate vectors
    y: np.ndarray  # (n, k) 1 for evidence


def batch(convs: list[Conv], k: int = 50) -> Batch:
    qs, ds, ys = [], [], []
    for cv in convs:
        s = stored(cv)
        sc = cv.q @ s.T
        for i, e in enumerate(cv.ev):
            top = list(np.argsort(-sc[i])[:k])
            cand = list(dict.fromkeys([*e.tolist(), *top]))[:k + len(e)]
            pad = k + 4 - len(cand)  # fixed width; evidence lists are short
            cand = (cand + [cand[-1]] * max(0, pad))[:k + 4]
            y = np.isin(cand, e).astype(np.float32)
            y[len(set(cand)):] = 0  # padding repeats are not positives
            qs.append(cv.q[i])
            ds.append(s[cand])
            ys.append(y)
    return Batch(np.stack(qs), np.stack(ds), np.stack(ys))


def apply(a: dict[str, np.ndarray], q: np.ndarray) -> np.ndarray:
    if "u" in a:
        return unit(q + (q @ a["v"]) @ a["u"].T)
    if "diag" in a:
        return unit(q * (1 + a["diag"]))
    return unit(q + q @ a["m"].T)


def fit(b: Batch, kind: str, lam: float, tau: float = 0.05, rank: int = 32, steps: int = 300,
        lr: float = 0.01, seed: int = 0) -> dict[str, np.ndarray]:
    """Adam on mean InfoNCE (log-sum-exp over candidates minus log-sum-exp over evidence) + lam*|A|^2."""
    n, dim = b.q.shape
    rng = np.random.default_rng(seed)
    if kind == "full":
        p = {"m": np.zeros((dim, dim), np.float32)}
    elif kind == "diag":
        p = {"diag": np.zeros(dim, np.float32)}
    else:
        p = {k: rng.normal(0, 0.01, (dim, rank)).astype(np.float32) for k in ("u", "v")}
    mom = {k: np.zeros_like(v) for k, v in p.items()}
    vel = {k: np.zeros_like(v) for k, v in p.items()}
    for t in range(1, steps + 1):
        if kind == "full":
            z = b.q + b.q @ p["m"].T
        elif kind == "diag":
            z = b.q * (1 + p["diag"])
        else:
            h = b.q @ p["v"]
            z = b.q + h @ p["u"].T
        norm = np.linalg.norm(z, axis=1, keepdims=True)
        zn = z / norm
        s = np.einsum("nd,nkd->nk", zn, b.d) / tau
        s -= s.max(axis=1, keepdims=True)
        e = np.exp(s)
        p_all = e / e.sum(axis=1, keepdims=True)
        ep = e * b.y
        p_pos = ep / np.maximum(ep.sum(axis=1, keepdims=True), 1e-30)
        g_s = (p_all - p_pos) / tau / n  # d loss / d s
        g_zn = np.einsum("nk,nkd->nd", g_s, b.d)
        g_z = (g_zn - zn * (g_zn * zn).sum(axis=1, keepdims=True)) / norm
        if kind == "full":
            grads = {"m": g_z.T @ b.q + 2 * lam * p["m"]}
        elif kind == "diag":
            grads = {"diag": (g_z * b.q).sum(axis=0) + 2 * lam * p["diag"]}
        else:
            grads = {"u": g_z.T @ h + 2 * lam * p["u"], "v": b.q.T @ (g_z @ p["u"]) + 2 * lam * p["v"]}
        for k in p:
            mom[k] = 0.9 * mom[k] + 0.1 * grads[k]
            vel[k] = 0.999 * vel[k] + 0.001 * grads[k] ** 2
            p[k] -= lr * (mom[k] / (1 - 0.9 ** t)) / (np.sqrt(vel[k] / (1 - 0.999 ** t)) + 1e-8)
    return p


def dense_ranks(convs: list[Conv], a: dict[str, np.ndarray] | None) -> list[int | None]:
    return [r for cv in convs for r in ranks_from_scores((apply(a, cv.q) if a else cv.q) @ stored(cv).T, cv.ev)]


def adapter_grid(loco: list[Conv], zh: dict[str, list[Conv]], grid: list[dict[str, Any]], with_zh: bool) -> None:
    groups: dict[str, list[Conv]] = {cv.set_name: [cv] for cv in loco}
    for k in ZH_FIT:
        groups[k] = zh[k]
    base_l = metrics(dense_ranks(loco, None))
    base_z = {k: metrics(dense_ranks(v, None)) for k, v in zh.items()}
    print(f"dense base: LoCoMo tuning {fmt(base_l)}; zh/en MRR " +
          " ".join(f"{k} {m[2]:.3f}" for k, m in base_z.items()), flush=True)
    batches = {k: batch(v) for k, v in groups.items()}
    for g in grid:
        fit_on = [k for k in groups if with_zh or k.startswith("conv")]
        lr_: list[int | None] = []
        for held in [k for k in groups if k.startswith("conv")]:
            tr = [k for k in fit_on if k != held]
            b = Batch(*(np.concatenate([getattr(batches[k], f) for k in tr]) for f in ("q", "d", "y")))
            a = fit(b, **g)
            lr_ += dense_ranks(groups[held], a)
        zres = {}
        for k, convs in zh.items():
            tr = [j for j in fit_on if j != k]
            b = Batch(*(np.concatenate([getattr(batches[j], f) for j in tr]) for f in ("q", "d", "y")))
            zres[k] = metrics(dense_ranks(convs, fit(b, **g)))
        worst = min(zres[k][2] - base_z[k][2] for k in zres)
        print(f"adapter {g} zh={with_zh}: LoCoMo LOCO {fmt(metrics(lr_))} (base {fmt(base_l)}); zh/en MRR " +
              " ".join(f"{k} {m[2]:.3f}" for k, m in zres.items()) + f"; worst zh change {worst:+.3f}", flush=True)


# ----------------------------------------------------------------------------- full pipeline
PIPE_MODES = ("hybrid", "linear", "dense")


def _ingest(data: Path, convs: Sequence[str] | None, emb: DiskCachedEmbedder) -> tuple[Any, list[Any], dict]:
    from memctl.evaluation import _ns
    from memory import MemoryService, MemorySettings
    from memory.service import NewMemory

    turns, questions = load_dataset(data)
    if convs is not None:
        turns = {c: t for c, t in turns.items() if c in convs}
    questions = [q for q in questions if q.conversation_id in turns]
    svc = MemoryService.from_settings(MemorySettings(path=":memory:"), embedder=emb)  # type: ignore[arg-type]
    for conv, ts in turns.items():
        svc.write_many([NewMemory(ts[j].content, _ns(conv), {"type": "conversation", "source": "locomo",
                                                             "extra": _turn_extra(ts, j, 2)},
                                  created_at=ts[j].session_date) for j in range(len(ts))])
    return svc, questions, {c: max(t.session_date for t in ts) for c, ts in turns.items()}


def _pipe_ranks(svc: Any, questions: list[Any], as_of: dict, mode: str, adapter: Any) -> list[int | None]:
    import memory.query_adapter as qa
    from memctl.evaluation import MODES, _ns

    shipped = svc.settings
    upd = {**MODES[mode], "query_adapter": adapter is not None}
    svc.settings = shipped.model_copy(update={"scoring": shipped.scoring.model_copy(update=upd)})
    if adapter is not None:
        qa._LOADED[qa.ADAPTER_PATH] = adapter
    out: list[int | None] = []
    try:
        for q in questions:
            hits = svc.search(q.question, _ns(q.conversation_id), top_k=50, min_score=float("-inf"), min_sim=0.0,
                              now=as_of[q.conversation_id])
            ev = set(q.evidence)
            out.append(next((i for i, h in enumerate(hits, 1) if h.record.metadata.extra.get("dia_id") in ev), None))
    finally:
        svc.settings = shipped
        qa._LOADED.pop(qa.ADAPTER_PATH, None)
    return out


def _by_cat(questions: list[Any], ranks: list[int | None]) -> str:
    cats: dict[str, list[int | None]] = {}
    for q, r in zip(questions, ranks, strict=True):
        cats.setdefault(q.category, []).append(r)
    return " ".join(f"{c} {metrics(v)[1]:.3f}/{metrics(v)[2]:.3f}" for c, v in sorted(cats.items()))


def pipeline(locomo: Path, loco: list[Conv], zh: dict[str, list[Conv]], emb: DiskCachedEmbedder,
             g: dict[str, Any], zh_sets: Sequence[str]) -> None:
    """Shipped search with and without the adapter: LoCoMo LOCO, each zh/en set leave-one-set-out."""
    from memory.query_adapter import QueryAdapter

    groups: dict[str, list[Conv]] = {cv.set_name: [cv] for cv in loco}
    for k in ZH_FIT:
        groups[k] = zh[k]
    batches = {k: batch(v) for k, v in groups.items()}

    def adapter_without(held: str) -> QueryAdapter:
        tr = [k for k in groups if k != held]
        b = Batch(*(np.concatenate([getattr(batches[k], f) for k in tr]) for f in ("q", "d", "y")))
        return QueryAdapter(emb.name, 1 + fit(b, **g)["diag"])

    svc, questions, as_of = _ingest(locomo, TUNE, emb)
    folds = {c: adapter_without(c) for c in TUNE}
    for mode in PIPE_MODES:
        base = _pipe_ranks(svc, questions, as_of, mode, None)
        new: list[int | None] = [None] * len(questions)
        for c in TUNE:
            idx = [i for i, q in enumerate(questions) if q.conversation_id == c]
            rs = _pipe_ranks(svc, [questions[i] for i in idx], as_of, mode, folds[c])
            for i, r in zip(idx, rs, strict=True):
                new[i] = r
        print(f"pipeline LoCoMo tuning {mode:6} off {fmt(metrics(base))} -> LOCO {fmt(metrics(new))}\n"
              f"   by category R@10/MRR off {_by_cat(questions, base)}\n   on  {_by_cat(questions, new)}", flush=True)
    svc.close()
    for name in zh_sets:
        a = adapter_without(name)
        s, qs, ao = _ingest(ZH[name], None, emb)
        for mode in PIPE_MODES:
            base = _pipe_ranks(s, qs, ao, mode, None)
            new = _pipe_ranks(s, qs, ao, mode, a)
            print(f"pipeline {name:8} {mode:6} off {fmt(metrics(base))} -> {fmt(metrics(new))} (fitted without it)\n"
                  f"   off {_by_cat(qs, base)}\n   on  {_by_cat(qs, new)}", flush=True)
        s.close()


class Adapted:
    """An embedder whose queries go through one adapter (a fold's), documents unchanged."""

    def __init__(self, inner: DiskCachedEmbedder, adapter: Any):
        self.inner, self.adapter, self.name, self.dim = inner, adapter, inner.name, inner.dim

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> np.ndarray:
        v = self.inner.embed_query(text)
        return self.adapter.apply(v) if self.adapter is not None else v

    def save(self) -> None:
        self.inner.save()


def rerank_refit(locomo: Path, loco: list[Conv], zh: dict[str, list[Conv]], emb: DiskCachedEmbedder,
                 g: dict[str, Any]) -> None:
    """Would a reranker refitted on adapted candidates beat the shipped one? Both out of set, shipped grid point."""
    import memctl.tune_rerank as tr
    from memctl.tune_retrieval import candidates
    from memory.query_adapter import QueryAdapter
    from memory.rerank import FEATURES
    from memory.rerank import VECTOR_FEATURES
    from memory.settings import MemorySettings, ScoringSettings

    groups: dict[str, list[Conv]] = {cv.set_name: [cv] for cv in loco}
    for k in ZH_FIT:
        groups[k] = zh[k]
    batches = {k: batch(v) for k, v in groups.items()}
    cfg, cw = ScoringSettings(), MemorySettings(path=":memory:").context_weight
    width = FEATURES.index(VECTOR_FEATURES[0])
    res = {}
    for label in ("off", "adapter"):
        sets: dict[str, list[Any]] = {}
        for held in groups:
            a = None
            if label == "adapter":
                tr_ = [k for k in groups if k != held]
                b = Batch(*(np.concatenate([getattr(batches[k], f) for k in tr_]) for f in ("q", "d", "y")))
                a = QueryAdapter(emb.name, 1 + fit(b, **g)["diag"])
            data, convs = (locomo, [held]) if held.startswith("conv") else (ZH[held], None)
            sets[held] = tr.featurise(held, candidates(data, convs, Adapted(emb, a), 2, cw, fixed_ids=True), cfg)
        sets = tr.narrow(sets, width)
        ranks = tr.out_of_set(sets, (5, 300, 0.05, 40))
        res[label] = tr.summary(sets, ranks)
        print(f"rerank refit, {label}: linear {tr._fmt(res[label]['locomo']['base'])} -> reranked out of set "
              f"{tr._fmt(res[label]['locomo']['new'])}; zh/en mean MRR linear {res[label]['zh_mean_mrr']['base']:.4f} "
              f"-> {res[label]['zh_mean_mrr']['new']:.4f}", flush=True)
        for key in ("locomo_category", "zh_category"):
            print("   " + key + " MRR " + " ".join(f"{c} {v['base']['MRR']:.3f}->{v['new']['MRR']:.3f}"
                                               for c, v in res[label][key].items()), flush=True)
        print("   per set MRR " + " ".join(f"{k} {v['new']['MRR']:.3f}" for k, v in res[label]["set"].items()))


def write_adapter(loco: list[Conv], zh: dict[str, list[Conv]], emb: DiskCachedEmbedder, g: dict[str, Any]) -> None:
    """Fit the diagonal adapter on every fitting set (LoCoMo tuning + zh_en ... zh_en_6) and write it."""
    from memory.query_adapter import ADAPTER_PATH, QueryAdapter

    groups = [*loco, *(cv for k in ZH_FIT for cv in zh[k])]
    b = batch(groups)
    a = QueryAdapter(emb.name, (1 + fit(b, **g)["diag"]).astype(np.float32))
    info = {"fitted_on": [*TUNE, *ZH_FIT], "lam": g["lam"], "steps": g["steps"], "tau": 0.05, "negatives": 50,
            "by": "scripts/dense_adapter_lab.py --write"}
    ADAPTER_PATH.write_text(a.to_json(**info) + "\n", encoding="utf-8")
    print(f"wrote {ADAPTER_PATH} (scale min {a.scale.min():.3f} max {a.scale.max():.3f})")


class StripSpeakers:
    """Questions embedded without the names of the stores' speakers (``--strip-speakers``): the name pulls the
    question towards every turn that greets or mentions that person. Documents unchanged; keywords still see it."""

    def __init__(self, inner: DiskCachedEmbedder, names: Sequence[str]):
        import re

        self.inner, self.name, self.dim, self.cache = inner, inner.name, inner.dim, inner.cache
        alt = "|".join(map(re.escape, sorted(set(names), key=len, reverse=True)))
        self._re = re.compile(r"\b(" + alt + r")('s)?\b")

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> np.ndarray:
        out = " ".join(self._re.sub("", text).split())
        return self.inner.embed_query(out or text)

    def save(self) -> None:
        self.inner.save()


def all_speakers(locomo: Path) -> list[str]:
    names = {t.speaker for ts in load_dataset(locomo)[0].values() for t in ts}
    for d in ZH.values():
        names |= {t.speaker for ts in load_dataset(d)[0].values() for t in ts}
    return sorted(n for n in names if n and n != "Assistant")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--locomo", type=Path, required=True)
    ap.add_argument("--cache", type=Path, default=None)
    ap.add_argument("--part", choices=("text", "adapter", "both", "pipeline", "rerank"), default="both")
    ap.add_argument("--zh-sets", default=",".join(ZH))
    ap.add_argument("--grid", default="diag:0.001,diag:0.01,full:0.01")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--loco-only", action="store_true")
    ap.add_argument("--strip-speakers", action="store_true", help="embed questions without the speakers' names")
    ap.add_argument("--write", action="store_true", help="fit on every fitting set and write memory/query_adapter.json")
    args = ap.parse_args()
    from memory.embeddings import get_embedder
    from memory.settings import MemorySettings

    emb = DiskCachedEmbedder(get_embedder(MemorySettings(path=":memory:").embedding.model, threads=1), args.cache)
    if args.strip_speakers:
        emb = StripSpeakers(emb, all_speakers(args.locomo))  # type: ignore[assignment]
    loco = load(args.locomo, TUNE, emb, None)
    if args.part in ("text", "both"):
        text_variants(loco, {k: load(d, None, emb, k) for k, d in ZH.items()})
    if args.part in ("adapter", "both", "pipeline", "rerank"):
        zh = {k: load(d, None, emb, k) for k, d in ZH.items()}
        emb.save()
        # --grid "diag:0.001,full:0.01" (kind:lam pairs); --loco-only fits on LoCoMo conversations alone
        grid = [{"kind": k, "lam": float(v), "steps": args.steps}
                for k, v in (p.split(":") for p in args.grid.split(","))]
        if args.write:
            write_adapter(loco, zh, emb, grid[0])
        elif args.part == "rerank":
            rerank_refit(args.locomo, loco, zh, emb, grid[0])
        elif args.part == "pipeline":
            pipeline(args.locomo, loco, zh, emb, grid[0], args.zh_sets.split(","))
        else:
            adapter_grid(loco, zh, grid, with_zh=not args.loco_only)
    emb.save()


if __name__ == "__main__":
    main()
