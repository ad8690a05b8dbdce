"""Where do the dense-channel switches help? Per-question rules for ``scoring.query_adapter`` (issue 16, stop 30).

    HF_HUB_OFFLINE=1 nice -n 5 .venv/bin/python scripts/switch_rule_lab.py load --cache /tmp/retr16_emb.pkl \
        --out /tmp/retr16/rows.pkl
    HF_HUB_OFFLINE=1 .venv/bin/python scripts/switch_rule_lab.py diag --out /tmp/retr16/rows.pkl
    HF_HUB_OFFLINE=1 nice -n 5 .venv/bin/python scripts/switch_rule_lab.py loso --out /tmp/retr16/rows.pkl \
        --arms off,both,latin [--held zh_en,conv-26,...]   (stop 31: also both+v, latin+v, off+v)

Fitting sets only (:data:`SETS`: LoCoMo tuning conv-26/30/41/42/43 and tests/data/zh_en ... zh_en_11); never the
LoCoMo held-out half, zh_en_12 or zh_en_13.

``load``: every set is ingested once; each question's candidates are fetched through search's own candidate step
(``MemoryService._candidates``) under four switch settings -- off, adapter, strip (speakers' names out of the
dense query), both -- with the adapter fitted WITHOUT the question's set (the diagonal recipe of
``scripts/dense_adapter_lab.py`` on :data:`SETS` minus that set: no leakage into a held-out set's candidates).
Each setting's head is featurised as ``memctl.tune_rerank.featurise`` does and labelled twice: the listed evidence
and the restatement-augmented evidence (``scripts/restatement_diag.augment``: evidence + the next same-session turn
with content-term Dice >= .25).

``diag``: the linear ranking's (no learned reranker) R@10 / MRR per setting, per zh/en direction, split by whether
the question / its evidence contains Han characters -- which switch moves which questions.

``loso``: arms are per-question choices among the four settings by a stated rule (:data:`ARMS`); each arm's
reranker (shipped grid point and 49 features, fitted on the ORIGINAL labels as tune_rerank does) is fitted
leave-one-set-out on that arm's candidates, and every held-out set is scored with both label readings. The gate
(brief retr16, fixed before the run): out of set, LoCoMo tuning MRR >= off + .008, zh/en mean MRR >= off, no zh/en
direction (mean over the zh/en sets of the per-set change) below off by more than .005 -- with either label reading.

Measured (stop 30, load 3-10, out of set, MRR change vs off, original / augmented labels): ``both`` LoCoMo tuning
+.005 / +.005, zh/en mean +.015 / +.011, mixed -.012 / -.014 (zh->en +.049); ``latin`` LoCoMo +.006 / +.006, zh/en
mean +.006 / +.003, zh-zh -.007 / -.010, zh->en -.006. Both fail; nothing ships (README, stop 30). ``latency``:
thread CPU a search 5.9 ms off, 7.4 on, 7.5 latin (LoCoMo conv-26/30, warm, alternated).

Stop 31 (retr18): ``load`` also stores the switch group (``memory.rerank.VECTOR_FEATURES``: the unadapted question's
cosine, its gap / rank, the rank shift, ``adapted``); an arm named ``<arm>+v`` fits its reranker on the 49 + those 5
(a prefix of FEATURES). The first 49 columns, labels and linear ranks of all 10,964 (question, setting) rows equal stop
30's, so the ``off`` / ``latin`` / ``both`` out-of-set scores are stop 30's fits. Out of set, MRR change vs off,
original / augmented labels: ``both+v`` LoCoMo tuning +.004 / +.004 (both: +.005), zh/en mean +.013 / +.011, mixed
-.007 / -.005 (both: -.012 / -.014), en->zh +.006 / -.001; ``latin+v`` LoCoMo +.003 / +.003, zh/en mean +.004 / +.003,
zh-zh -.011 / -.007. The group halves the mixed loss but gives back LoCoMo MRR: every arm fails the gate again.
``off+v`` (switches off: the group repeats the vector columns, ``adapted`` 0) gives log-odds bit-identical to ``off``
for all 2,741 questions. Thread CPU a search (conv-26/30, warm, alternated): off 6.2 ms, on 8.1, on+v 8.7, latin 7.9,
latin+v 8.7.
"""

from __future__ import annotations

import argparse
import os
import pickle
import re
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import memctl.tune_rerank as tr  # noqa: E402
from memory.query_adapter import has_han  # noqa: E402
from memory.rerank import VECTOR_FEATURES  # noqa: E402

ZH16 = tuple(f"zh_en{'' if i == 1 else f'_{i}'}" for i in range(1, 12))
ZH_PATHS = {k: ROOT / "tests" / "data" / k for k in ZH16}
SETS = (*tr.LOCOMO_TUNE, *ZH16)
SETTINGS = {"off": (False, False), "adapter": (True, False), "strip": (False, True), "both": (True, True)}
RECIPE = {"kind": "diag", "lam": 1e-4, "steps": 200}  # the shipped adapter's (query_adapter.json)
WIDTH = tr.WIDTH_49  # the shipped reranker's 49
COLUMNS = [*range(WIDTH), *(tr.FEATURES.index(f) for f in VECTOR_FEATURES)]  # a prefix: the switch group is next
assert COLUMNS == list(range(len(COLUMNS)))
POINT = tr.GRID[0]


def _latin(r: dict[str, Any]) -> bool:
    return not r["han_q"]


_LATIN_WORD = re.compile(r"[A-Za-z]{2,}")


def _not_code_switched(r: dict[str, Any]) -> bool:
    """Not a question mixing Han characters with Latin words (the mixed direction's questions, mostly)."""
    return not (r["han_q"] and _LATIN_WORD.search(r["question"]))


# arm -> (setting for a question the rule accepts, setting otherwise, rule)
ARMS: dict[str, tuple[str, str, Callable[[dict[str, Any]], bool]]] = {
    "off": ("off", "off", lambda r: True),
    "both": ("both", "both", lambda r: True),
    "adapter": ("adapter", "adapter", lambda r: True),
    "strip": ("strip", "strip", lambda r: True),
    "latin": ("both", "off", _latin),  # both switches only for a question without Han characters
    "latin_strip": ("both", "strip", _latin),  # adapter only without Han, speakers stripped always
    "latin_adapter": ("adapter", "off", _latin),
    "no_cs": ("both", "off", _not_code_switched),  # both switches unless the question is code-switched
}


# ----------------------------------------------------------------------------- load
def fold_adapters(emb: Any, locomo: Path) -> dict[str, Any]:
    import dense_adapter_lab as dal
    from memory.query_adapter import QueryAdapter

    groups: dict[str, list[Any]] = {cv.set_name: [cv] for cv in dal.load(locomo, tr.LOCOMO_TUNE, emb, None)}
    for k in ZH16:
        groups[k] = dal.load(ZH_PATHS[k], None, emb, k)
    emb.save()
    batches = {k: dal.batch(v) for k, v in groups.items()}

    def without(held: str | None) -> QueryAdapter:
        keep = [k for k in groups if k != held]
        b = dal.Batch(*(np.concatenate([getattr(batches[k], f) for k in keep]) for f in ("q", "d", "y")))
        return QueryAdapter(emb.name, (1 + dal.fit(b, **RECIPE)["diag"]).astype(np.float32))

    out = {}
    for held in [*SETS, None]:
        t0 = time.time()
        out[held or "all"] = without(held)
        print(f"adapter without {held}: {time.time() - t0:.0f} s", flush=True)
    return out


def featurise(set_name: str, q: Any, now: Any, cands: list[Any], aug: frozenset[str],
              raw_cos: dict[str, float] | None = None) -> dict[str, Any]:
    from memory import scoring
    from memory.query import RerankWeights, plan_query, rerank
    from memory.rerank import candidate_features
    from memory.settings import ScoringSettings

    cfg = ScoringSettings()
    plan = plan_query(q.question, now)
    hits = rerank(scoring.score_candidates(cands, now, cfg, q.question), plan, RerankWeights.from_scoring(cfg))
    ids = [h.record.metadata.extra.get("dia_id") for h in hits]
    ev = set(q.evidence)
    # The shipped reranker's 49 columns, then the switch group (memory.rerank.VECTOR_FEATURES, stop 31): arms
    # named "<arm>+v" read all of them, the others the first WIDTH.
    x = candidate_features(hits[:tr.DEPTH], plan, {c.record.id: c.keyword_score for c in cands}, hits,
                           None, raw_cos)[:, COLUMNS]

    def base(lab: set[str] | frozenset[str]) -> int | None:
        return next((i for i, d in enumerate(ids, 1) if d in lab), None)

    return {"x": x, "y": np.array([d in ev for d in ids[:tr.DEPTH]], dtype=float),
            "y_aug": np.array([d in aug for d in ids[:tr.DEPTH]], dtype=float), "base": base(ev), "base_aug": base(aug)}


def load_set(name: str, data: Path, convs: Sequence[str] | None, emb: Any, adapters: dict[str, Any]) -> list[dict]:
    import memory.query_adapter as qa
    from memctl.evaluation import _ns, _turn_extra, load_dataset
    from memory import MemoryService, MemorySettings
    from memory.namespace import parse_namespaces
    from memory.service import NewMemory
    from restatement_diag import augment

    turns, questions = load_dataset(data)
    if convs is not None:
        turns = {c: t for c, t in turns.items() if c in convs}
        questions = [q for q in questions if q.conversation_id in convs]
    aug = augment(data, tuple(convs) if convs else None)
    text = {(c, t.dia_id): t.content for c, ts in turns.items() for t in ts}
    rows = []
    with MemoryService.from_settings(MemorySettings(path=":memory:"), embedder=emb) as svc:
        for conv, ts in turns.items():
            svc.write_many(NewMemory(ts[j].content, _ns(conv), {"type": "conversation", "source": "locomo",
                                                                "extra": _turn_extra(ts, j, 2)},
                                     id=f"{conv}#{j:05d}", created_at=ts[j].session_date) for j in range(len(ts)))
        as_of = {c: max(t.session_date for t in ts) for c, ts in turns.items()}
        plain = svc.settings
        qa._LOADED[qa.ADAPTER_PATH] = adapters[name]  # this set's fold: fitted without it
        try:
            for q in questions:
                now = as_of[q.conversation_id]
                ns = tuple(parse_namespaces(_ns(q.conversation_id)))
                row: dict[str, Any] = {"set": name, "cat": q.category, "question": q.question,
                                       "han_q": has_han(q.question),
                                       "han_ev": any(has_han(text.get((q.conversation_id, e), "")) for e in q.evidence)}
                for setting, (adapter, strip) in SETTINGS.items():
                    svc.settings = plain.model_copy(update={"scoring": plain.scoring.model_copy(
                        update={"query_adapter": adapter, "strip_speakers": strip})})
                    vec, cands = svc._candidates(q.question, ns, None, 50, now)
                    raw = svc._raw_cosines(q.question, vec, [c.record.id for c in cands])
                    row[setting] = featurise(name, q, now, cands, aug[(q.conversation_id, q.question_id)], raw)
                rows.append(row)
        finally:
            svc.settings = plain
            qa._LOADED.clear()
    emb.save()
    return rows


def load(args: argparse.Namespace) -> None:
    from memctl.tune_retrieval import DiskCachedEmbedder
    from memory.embeddings import get_embedder
    from memory.settings import MemorySettings

    emb = DiskCachedEmbedder(get_embedder(MemorySettings(path=":memory:").embedding.model, threads=1), args.cache)
    apath = Path(f"{args.out}.adapters")
    adapters = pickle.loads(apath.read_bytes()) if apath.exists() else fold_adapters(emb, args.locomo)
    apath.write_bytes(pickle.dumps(adapters))
    out: dict[str, list[dict]] = {}
    for name in SETS:
        t0 = time.time()
        lo = name in tr.LOCOMO_TUNE
        out[name] = load_set(name, args.locomo if lo else ZH_PATHS[name], (name,) if lo else None, emb, adapters)
        print(f"loaded {name}: {len(out[name])} questions, {time.time() - t0:.0f} s", flush=True)
    args.out.write_bytes(pickle.dumps(out))


# ----------------------------------------------------------------------------- scoring helpers
def metrics(ranks: Sequence[int | None]) -> dict[str, float]:
    return tr.metrics(ranks)


def fmt(m: dict[str, float], mrr_only: bool = False) -> str:
    return f"{m['MRR']:.3f}" if mrr_only else f"{m['R@5']:.3f}/{m['R@10']:.3f}/{m['MRR']:.3f}"


def diag(args: argparse.Namespace) -> None:
    sets = pickle.loads(args.out.read_bytes())
    for lab in ("base", "base_aug"):
        print(f"\nlinear ranking (no learned reranker), {'original' if lab == 'base' else 'augmented'} labels, "
              "R@5/R@10/MRR: " + " | ".join(SETTINGS))
        groups: dict[str, list[dict]] = defaultdict(list)
        for k, rows in sets.items():
            for r in rows:
                scope = "LoCoMo" if k in tr.LOCOMO_TUNE else "zh/en"
                groups[f"{scope} all"].append(r)
                groups[f"{scope} {r['cat']}"].append(r)
                if scope == "zh/en":
                    groups[f"zh/en {r['cat']} q{'Han' if r['han_q'] else 'Latin'} "
                           f"ev{'Han' if r['han_ev'] else 'Latin'}"].append(r)
                    groups[f"zh/en q{'Han' if r['han_q'] else 'Latin'}"].append(r)
        for g in sorted(groups):
            rows = groups[g]
            print(f"  {g:34} n {len(rows):4d}  " + " | ".join(fmt(metrics([r[s][lab] for r in rows])) for s in SETTINGS))
    # per set x direction MRR change (both vs off), linear
    print("\nlinear MRR change per zh/en set and direction, adapter / strip / both vs off (original labels):")
    for k in ZH16:
        cats: dict[str, list[dict]] = defaultdict(list)
        for r in sets[k]:
            cats[r["cat"]].append(r)
        print(f"  {k:8} " + "  ".join(
            f"{c} " + "/".join(f"{metrics([r[s]['base'] for r in v])['MRR'] - metrics([r['off']['base'] for r in v])['MRR']:+.3f}"
                               for s in ("adapter", "strip", "both")) for c, v in sorted(cats.items())))


# ----------------------------------------------------------------------------- leave one set out
def arm_queries(sets: dict[str, list[dict]], arm: str) -> dict[str, list[tuple[tr.Query, dict]]]:
    """An arm's queries; "<arm>+v": the same candidates, the reranker also reads the switch group."""
    base, width = (arm[:-2], len(COLUMNS)) if arm.endswith("+v") else (arm, WIDTH)
    yes, no, rule = ARMS[base]
    out = {}
    for k, rows in sets.items():
        out[k] = [(tr.Query(k, r["cat"], (f := r[yes if rule(r) else no])["x"][:, :width], f["y"], f["base"]), f)
                  for r in rows]
    return out


def loso(sets: dict[str, list[dict]], arm: str, held: Sequence[str]) -> dict[str, list[np.ndarray]]:
    qs = arm_queries(sets, arm)
    out = {}
    for h in held:
        t0 = time.time()
        clf = tr.fit([q for k, v in qs.items() if k != h for q, _ in v], POINT)
        x = [q.x for q, _ in qs[h]]
        z = clf._raw_predict(np.vstack(x))[:, 0]
        parts, i = [], 0
        for q, _ in qs[h]:
            parts.append(z[i:i + len(q.y)])
            i += len(q.y)
        out[h] = parts
        print(f"  {arm} without {h}: {time.time() - t0:.0f} s", flush=True)
    return out


def ranks_of(sets: dict[str, list[dict]], arm: str, z: dict[str, list[np.ndarray]], lab: str) -> dict[str, list]:
    qs = arm_queries(sets, arm)
    return {h: [tr.new_rank(tr.Query(h, q.category, q.x, f[lab], None), s) for (q, f), s in zip(qs[h], zs, strict=True)]
            for h, zs in z.items()}


def report(sets: dict[str, list[dict]], scores: dict[str, dict[str, list[np.ndarray]]],
           summ: dict[str, Any] | None = None) -> dict[str, bool]:
    """Print the tables; return the gate per arm (both label readings), and fill ``summ`` (arm -> labels ->
    the gate's figures, for the shipped file's info)."""
    arms = list(scores)
    held = list(scores[arms[0]])
    zh = [h for h in held if h not in tr.LOCOMO_TUNE]
    lo = [h for h in held if h in tr.LOCOMO_TUNE]
    verdict: dict[str, bool] = {}
    for lab in ("y", "y_aug"):
        r = {a: ranks_of(sets, a, scores[a], lab) for a in arms}
        print(f"\nout of set, {'original' if lab == 'y' else 'restatement-augmented'} labels, R@5/R@10/MRR: "
              + " | ".join(arms))
        for h in held:
            print(f"  {h:20} n {len(r[arms[0]][h]):4d} " + " | ".join(fmt(metrics(r[a][h])) for a in arms))

        def pooled(a: str, keys: Sequence[str], cat: str | None = None, han: bool | None = None) -> list:
            return [x for k in keys for row, x in zip(sets[k], r[a][k], strict=True)
                    if (cat is None or row["cat"] == cat) and (han is None or row["han_q"] == han)]

        print(f"  {'LoCoMo tuning':20} n {len(pooled(arms[0], lo)):4d} " + " | ".join(fmt(metrics(pooled(a, lo))) for a in arms))
        for c in sorted({row["cat"] for k in lo for row in sets[k]}):
            print(f"  {'LoCoMo ' + c:20} " + " | ".join(fmt(metrics(pooled(a, lo, c))) for a in arms))
        for c in sorted({row["cat"] for k in zh for row in sets[k]}):
            print(f"  {'zh/en ' + c:20} " + " | ".join(fmt(metrics(pooled(a, zh, c))) for a in arms))
        for hq in (False, True):
            print(f"  {'zh/en q' + ('Han' if hq else 'Latin'):20} " + " | ".join(
                fmt(metrics(pooled(a, zh, None, hq))) for a in arms))
        mean = {a: float(np.mean([metrics(r[a][k])["MRR"] for k in zh])) for a in arms}
        print(f"  {'zh/en mean MRR':20}        " + " | ".join(f"{mean[a]:.4f}" for a in arms))
        if "off" not in arms or not lo or not zh:
            continue
        for a in arms:
            if a == "off":
                continue
            d_lo = metrics(pooled(a, lo))["MRR"] - metrics(pooled("off", lo))["MRR"]
            per: dict[str, list[float]] = defaultdict(list)
            for k in zh:
                for c in sorted({row["cat"] for row in sets[k]}):
                    per[c].append(metrics(pooled(a, [k], c))["MRR"] - metrics(pooled("off", [k], c))["MRR"])
            dirs = {c: float(np.mean(v)) for c, v in per.items()}
            ok = d_lo >= 0.008 and mean[a] >= mean["off"] and min(dirs.values()) >= -0.005
            verdict[a] = verdict.get(a, True) and ok
            if summ is not None:
                summ.setdefault(a, {})["original" if lab == "y" else "augmented"] = {
                    "locomo_tuning_mrr": [metrics(pooled("off", lo))["MRR"], metrics(pooled(a, lo))["MRR"]],
                    "zh_mean_mrr": [mean["off"], mean[a]], "zh_direction_mrr_change": dirs}
            print(f"  gate {a} vs off ({lab}): LoCoMo MRR {d_lo:+.4f} (>= +.008), zh/en mean MRR "
                  f"{mean[a] - mean['off']:+.4f} (>= 0), per direction " +
                  ", ".join(f"{c} {d:+.4f}" for c, d in dirs.items()) + f" (>= -.005) -> {'PASS' if ok else 'FAIL'}")
    return verdict


def latency(args: argparse.Namespace, modes: Sequence[str], rounds: int = 3) -> None:
    """Search wall time per question, switches per mode (``--modes``), warm, one process, modes alternated per
    question (LoCoMo tuning conv-26 + conv-30 in one :memory: store, cached embeddings: the query LRU's case)."""
    from memctl.evaluation import _ns, _turn_extra, load_dataset
    from memctl.tune_retrieval import DiskCachedEmbedder
    from memory import MemoryService, MemorySettings
    from memory.embeddings import get_embedder
    from memory.service import NewMemory

    emb = DiskCachedEmbedder(get_embedder(MemorySettings(path=":memory:").embedding.model, threads=1), args.cache)
    turns, questions = load_dataset(args.locomo)
    convs = ("conv-26", "conv-30")
    turns = {c: t for c, t in turns.items() if c in convs}
    questions = [q for q in questions if q.conversation_id in convs]
    with MemoryService.from_settings(MemorySettings(path=":memory:"), embedder=emb) as svc:
        for conv, ts in turns.items():
            svc.write_many(NewMemory(ts[j].content, _ns(conv), {"type": "conversation", "source": "locomo",
                                                                "extra": _turn_extra(ts, j, 2)},
                                     created_at=ts[j].session_date) for j in range(len(ts)))
        plain = svc.settings
        cfgs = {m: plain.model_copy(update={"scoring": plain.scoring.model_copy(
            update={"query_adapter": MODE_VALUES[m.removesuffix("+v")], "strip_speakers": MODE_VALUES[m.removesuffix("+v")]})})
                for m in modes}
        # "<mode>+v": a reranker that also reads the switch group. Its cost: the shipped trees (the tree walk costs
        # the same for any 300 depth-5 trees) over the 49 + switch prefix, so search fetches the stored vectors and
        # computes the unadapted cosines and the group's columns.
        import memory.rerank as rr

        shipped = rr.default_model()
        wide = rr.RerankModel(rr.FEATURES[:len(COLUMNS)], shipped.baseline, shipped.trees, shipped.depth, {})
        models = {m: wide if m.endswith("+v") else shipped for m in modes}
        real_default = rr.default_model
        times: dict[str, list[float]] = {m: [] for m in modes}
        cpu: dict[str, list[float]] = {m: [] for m in modes}  # CPU time: robust to other jobs on a busy host
        for r in range(rounds + 1):  # round 0 warms the caches (embeddings, adapter file, text features)
            for i, q in enumerate(questions):
                order = list(modes) if (i + r) % 2 == 0 else list(reversed(modes))
                for m in order:
                    svc.settings = cfgs[m]
                    rr.default_model = lambda m=m: models[m]  # type: ignore[assignment]  # what apply() reads
                    t0, c0 = time.perf_counter(), time.thread_time()
                    svc.search(q.question, _ns(q.conversation_id), top_k=10)
                    if r:
                        times[m].append((time.perf_counter() - t0) * 1000)
                        cpu[m].append((time.thread_time() - c0) * 1000)
        svc.settings = plain
        rr.default_model = real_default  # type: ignore[assignment]
    emb.save()
    for m, t in times.items():
        a, c = np.array(t), np.array(cpu[m])
        print(f"search, switches {m}: n {a.size}, wall mean {a.mean():.2f} ms, p50 {np.percentile(a, 50):.2f}, "
              f"p95 {np.percentile(a, 95):.2f}; thread CPU mean {c.mean():.2f} ms, p50 {np.percentile(c, 50):.2f}, "
              f"p95 {np.percentile(c, 95):.2f}")


MODE_VALUES: dict[str, bool | str] = {"off": False, "on": True, "latin": "latin"}


def write(args: argparse.Namespace, mode: str, oos: dict[str, Any]) -> None:
    """Ship an arm: the adapter fitted on every set of :data:`SETS` (memory/query_adapter.json), then the reranker
    refitted as ``tune_retrieval --stage rerank --check`` will refit it -- tune_rerank's own fitting sets and
    candidates, with the switches in ``mode`` (the new defaults) -- written to memory/rerank_model.json."""

    from memctl.tune_retrieval import DiskCachedEmbedder
    from memory.embeddings import get_embedder
    from memory.query_adapter import ADAPTER_PATH
    from memory.settings import MemorySettings

    adapters = pickle.loads(Path(f"{args.out}.adapters").read_bytes())
    info = {"fitted_on": list(SETS), "lam": RECIPE["lam"], "steps": RECIPE["steps"], "tau": 0.05, "negatives": 50,
            "by": "scripts/switch_rule_lab.py write"}
    ADAPTER_PATH.write_text(adapters["all"].to_json(**info) + "\n", encoding="utf-8")
    print(f"wrote {ADAPTER_PATH}", flush=True)
    for k in ("MEMORY_SCORING__QUERY_ADAPTER", "MEMORY_SCORING__STRIP_SPEAKERS"):
        os.environ[k] = str(MODE_VALUES[mode]).lower()
    import memory.query_adapter as qa

    qa._LOADED.clear()
    emb = DiskCachedEmbedder(get_embedder(MemorySettings(path=":memory:").embedding.model, threads=1), args.cache)
    sets = tr.narrow(tr.load_sets(emb, args.locomo), WIDTH)
    clf = tr.fit([q for qs in sets.values() for q in qs], POINT, tr.LOCOMO_WEIGHT)
    rinfo = tr._rounded({"grid_point": dict(zip(tr.POINT_KEYS, POINT, strict=True)), "fitted_on": list(sets),
                         "locomo_weight": tr.LOCOMO_WEIGHT, "scoring": {"query_adapter": MODE_VALUES[mode],
                                                                        "strip_speakers": MODE_VALUES[mode]},
                         "out_of_set_vs_switches_off": oos})
    model, text = tr.model_text(clf, rinfo, WIDTH, np.vstack([q.x for qs in sets.values() for q in qs]))
    tr.MODEL_FILE.write_text(text, encoding="utf-8")
    print(f"wrote {tr.MODEL_FILE} ({len(text)} bytes, {len(model.trees)} trees)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("stage", choices=("load", "diag", "loso", "report", "latency"))
    ap.add_argument("--write", default=None, help="report: ship this arm (both or latin) if it passes the gate")
    ap.add_argument("--modes", default="off,on", help="latency: switch values to alternate (off, on, latin; "
                    "'+v' after one: a reranker that also reads the switch group)")
    ap.add_argument("--locomo", type=Path, default=Path("/work/shared/data/locomo"))
    ap.add_argument("--cache", type=Path, default=None)
    ap.add_argument("--out", type=Path, required=True, help="pickle of the featurised rows (load writes it)")
    ap.add_argument("--arms", default="off,both,latin")
    ap.add_argument("--held", default=",".join(SETS))
    ap.add_argument("--scores", default=None, help="pickle of the out-of-set scores (default: --out + .scores); "
                    "report: comma-separated, merged, so arms can run in parallel processes")
    args = ap.parse_args()
    if args.stage == "load":
        load(args)
        return
    if args.stage == "diag":
        diag(args)
        return
    if args.stage == "latency":
        latency(args, args.modes.split(","))
        return
    sets = pickle.loads(args.out.read_bytes())
    paths = [Path(p) for p in (args.scores or f"{args.out}.scores").split(",")]
    scores: dict[str, dict[str, list[np.ndarray]]] = {}
    for p in paths:
        for arm, per in (pickle.loads(p.read_bytes()) if p.exists() else {}).items():
            scores.setdefault(arm, {}).update(per)
    spath = paths[0]
    if args.stage == "loso":
        for arm in args.arms.split(","):
            todo = [h for h in args.held.split(",") if h not in scores.get(arm, {})]
            scores.setdefault(arm, {}).update(loso(sets, arm, todo))
            spath.write_bytes(pickle.dumps(scores))
    held = args.held.split(",")
    summ: dict[str, Any] = {}
    verdict = report(sets, {a: {h: scores[a][h] for h in held} for a in args.arms.split(",") if a in scores}, summ)
    if args.write:
        if not verdict.get(args.write):
            print(f"arm {args.write} did not pass the gate with both label readings; nothing written")
            return
        write(args, {"latin": "latin", "both": "on"}[args.write], summ[args.write])


if __name__ == "__main__":
    main()
