"""Probes of retrieval ideas that were tried and not shipped, on the LoCoMo *tuning* half only.

    python -m memctl.retrieval_probes [--locomo ../shared/data/locomo] [--minilm] [--cache /tmp/emb.pkl]

Each probe prints R@5 / R@10 / MRR next to the shipped search on the same store (conv-26, -30,
-41, -42, -43; the held-out conversations are never loaded), so the "tried, did not help" lines
of MEASUREMENTS.md can be reproduced:

* ``expand-terms``: multi-hop candidate expansion, the keyword terms of the first three hits
  (not in the question) feed a second search; its scores are added with weight ``lam``.
* ``expand-entities``: the same with capitalised names only (the entities of the first hits),
  and only when the first stage is uncertain (top-1 minus top-2 score below ``gate``).
* ``next-turn``: the next turn of the session added to each turn's retrieval context (what a
  stored, updated session context would add; not known when a turn is written).
* ``session-keywords``: the session's 20 most distinctive terms (tf-idf over the conversation's
  sessions) added to each turn's retrieval context, as a session summary would be.
* ``candidates``: 100 / 200 candidates per channel instead of 50.
* ``answer-type`` (``--answer-type``): a question asking for a place ("which city / country / state",
  "where"), a number ("how many / much / long / old") or a title ("what book / movie / game") lifts the
  candidates whose turn holds one (a capitalised word that does not start a sentence and is not the
  speaker; a digit or number word; a quoted or capitalised run), weight chosen leave-one-conversation-out.
* ``minilm`` (``--minilm``; ~2 min): the top hits re-ranked with all-MiniLM-L6-v2's cosine added
  (the English model the dedupe rules use; USE-m3 is weak on English chat).
"""

from __future__ import annotations

import argparse
import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from memctl.evaluation import Turn, _ns, _turn_extra, load_dataset
from memctl.tune_retrieval import TUNE, DiskCachedEmbedder, _rank
from memory import MemoryService, MemorySettings, scoring
from memory.embeddings import get_embedder
from memory.namespace import parse_namespaces
from memory.query import RerankWeights, plan_query, rerank
from memory.records import MemoryQuery, SearchHit
from memory.service import NewMemory
from memory.text import tokenize

Extra = Callable[[list[Turn], int, dict[str, list[int]], dict[str, float]], list[str]]
_CAP = re.compile(r"\b([A-Z][a-z]{2,})\b")
_NOT_NAMES = frozenset(
    "The That This What When Where Who How Hey Yeah Yes Wow Thanks Thank And But Sounds You Your That's Let's Haha "
    "Awesome Great Cool Nice Good Congrats Congratulations Aww Oh Sure Totally Definitely Really Absolutely Glad "
    "Hope Hi Hello It's I'm I've I'll Not Have Did Was Are Can Will Just Also Sorry Take Keep Love Well Anyway".split())


def _metrics(ranks: Sequence[int | None]) -> str:
    n = len(ranks)
    r5 = sum(1 for r in ranks if r and r <= 5) / n
    r10 = sum(1 for r in ranks if r and r <= 10) / n
    return f"R@5 {r5:.3f}  R@10 {r10:.3f}  MRR {sum(1 / r for r in ranks if r) / n:.3f}"


def _build(locomo: Path, emb: DiskCachedEmbedder, extra: Extra | None = None) -> tuple[MemoryService, list[Any], dict]:
    """Ingest the tuning half as ``memctl eval retrieval`` does, plus ``extra`` context lines per turn."""
    turns, questions = load_dataset(locomo)
    turns = {c: t for c, t in turns.items() if c in TUNE}
    questions = [q for q in questions if q.conversation_id in TUNE]
    svc = MemoryService.from_settings(MemorySettings(path=":memory:"), embedder=emb)  # type: ignore[arg-type]
    for conv, ts in turns.items():
        sessions: dict[str, list[int]] = {}
        for j, t in enumerate(ts):
            sessions.setdefault(t.session_date.isoformat(), []).append(j)
        df = Counter(w for js in sessions.values() for w in {w for j in js for w in tokenize(ts[j].content)})
        idf = {w: math.log(1 + len(sessions) / c) for w, c in df.items()}
        items = []
        for j in range(len(ts)):
            ex = _turn_extra(ts, j, 2)
            more = extra(ts, j, sessions, idf) if extra else []
            if more:
                ex["context"] = "\n".join(([ex["context"]] if "context" in ex else []) + more)
            items.append(NewMemory(ts[j].content, _ns(conv), {"type": "conversation", "source": "locomo", "extra": ex},
                                   created_at=ts[j].session_date))
        svc.write_many(items)
    return svc, questions, {c: max(t.session_date for t in ts) for c, ts in turns.items()}


def _next_turn(ts: list[Turn], j: int, sessions: dict[str, list[int]], idf: dict[str, float]) -> list[str]:
    js = sessions[ts[j].session_date.isoformat()]
    k = js.index(j)
    return [ts[js[k + 1]].content] if k + 1 < len(js) else []


def _session_keywords(ts: list[Turn], j: int, sessions: dict[str, list[int]], idf: dict[str, float]) -> list[str]:
    tf = Counter(w for k in sessions[ts[j].session_date.isoformat()] for w in tokenize(ts[k].content))
    return [" ".join(sorted(tf, key=lambda w: -tf[w] * idf[w])[:20])]


def _ids(hits: Sequence[SearchHit]) -> list[str]:
    return [h.record.metadata.extra["dia_id"] for h in hits]


def _combine(h1: Sequence[SearchHit], h2: Sequence[SearchHit], lam: float) -> list[str]:
    s1 = {d: h.breakdown.score for d, h in zip(_ids(h1), h1, strict=True)}
    s2 = {d: h.breakdown.score for d, h in zip(_ids(h2), h2, strict=True)}
    lo1, lo2 = min(s1.values()), min(s2.values())
    return sorted(set(s1) | set(s2), key=lambda d: -(s1.get(d, lo1) + lam * s2.get(d, lo2)))


def _expansion(svc: MemoryService, questions: list[Any], as_of: dict, emb: DiskCachedEmbedder) -> None:
    cfg = svc.settings.scoring
    w = RerankWeights.from_scoring(cfg)
    runs: dict[str, list[int | None]] = {}
    for q in questions:
        now = as_of[q.conversation_id]
        ns = tuple(parse_namespaces(_ns(q.conversation_id)))
        vec = emb.embed_query(q.question.strip())
        plan = plan_query(q.question, now)

        def search(text: str, ns: tuple = ns, vec: Any = vec, now: Any = now, question: str = q.question,
                   plan: Any = plan) -> list[SearchHit]:
            cands = svc.backend.query(MemoryQuery(namespaces=ns, vector=vec, text=text, limit=50, now=now))
            return rerank(scoring.score_candidates(cands, now, cfg, question), plan, w)

        h1 = search(q.question)
        runs.setdefault("shipped", []).append(_rank(q, h1))
        qterms = set(tokenize(q.question))
        terms = list(dict.fromkeys(t for h in h1[:3] for t in tokenize(h.record.content.split(":", 1)[-1])
                                   if t not in qterms))[:30]
        h2 = search(q.question + " " + " ".join(terms)) if terms else h1
        speakers = {h.record.metadata.extra.get("speaker") for h in h1}
        ents = list(dict.fromkeys(m.group(1) for h in h1[:3] for m in _CAP.finditer(h.record.content.split(":", 1)[-1])
                                  if m.group(1) not in _NOT_NAMES and m.group(1) not in speakers
                                  and m.group(1).lower() not in q.question.lower()))[:6]
        h3 = search(q.question + " " + " ".join(ents)) if ents else h1
        margin = h1[0].breakdown.score - h1[1].breakdown.score if len(h1) > 1 else 1.0
        for lam in (0.2, 0.5, 1.0):
            runs.setdefault(f"expand-terms lam={lam}", []).append(_rank_ids(q, _combine(h1, h2, lam)))
            for gate in (0.05, 1.0):
                ids = _combine(h1, h3, lam) if margin < gate else _ids(h1)
                runs.setdefault(f"expand-entities lam={lam} gate={gate}", []).append(_rank_ids(q, ids))
    for name, ranks in runs.items():
        print(f"{name:36} {_metrics(ranks)}", flush=True)


def _rank_ids(q: Any, ids: Sequence[str]) -> int | None:
    ev = set(q.evidence)
    return next((i for i, d in enumerate(ids, 1) if d in ev), None)


def _shipped(svc: MemoryService, questions: list[Any], as_of: dict,
             **scoring_update: Any) -> list[list[SearchHit]]:
    if scoring_update:
        scoring_cfg = svc.settings.scoring.model_copy(update=scoring_update)
        svc.settings = svc.settings.model_copy(update={"scoring": scoring_cfg})
    return [svc.search(q.question, _ns(q.conversation_id), top_k=50, min_score=float("-inf"), min_sim=0.0,
                       now=as_of[q.conversation_id]) for q in questions]


def _minilm(svc: MemoryService, questions: list[Any], as_of: dict) -> None:
    from memory.policy.paraphrase import ParaphraseScorer

    ps = ParaphraseScorer(cache_size=100_000)
    rows = []
    for q, hits in zip(questions, _shipped(svc, questions, as_of), strict=True):
        qv = ps.embed(q.question)
        rows.append((q, [(d, h.breakdown.score, float(qv @ ps.embed(h.record.content)))
                         for d, h in zip(_ids(hits), hits, strict=True)]))
    for head in (20, 50):
        for g in (0.1, 0.2, 0.3, 0.5):
            ranks = [_rank_ids(q, [d for d, *_ in sorted(r[:head], key=lambda x: -(x[1] + g * x[2])) + r[head:]])
                     for q, r in rows]
            print(f"minilm rerank top {head} weight {g:<4}        {_metrics(ranks)}", flush=True)


_PLACE_Q = re.compile(r"\b(where|countr(y|ies)|cit(y|ies)|states?|places?|locations?|geographical)\b", re.I)
_NUMBER_Q = re.compile(r"\bhow (many|much|long|old|often)\b", re.I)
_TITLE_Q = re.compile(r"\b(books?|movies?|films?|songs?|games?|shows?|album|novels?|title|console|band)\b", re.I)
_NUMBER_T = re.compile(r"\d|\b(one|two|three|four|five|six|seven|eight|nine|ten|twice|dozen|hundred)\b", re.I)
_TITLE_T = re.compile(r"[\"“][^\"”]{2,60}[\"”]|\b[A-Z][a-z]+(?: [A-Z][a-z]+)+\b")


def _proper_nouns(text: str, speaker: str) -> list[str]:
    """Capitalised words that do not start a sentence and are not the speaker (place/brand/name cues)."""
    body = text.split(":", 1)[-1].split(" [image:", 1)[0]
    out = []
    for m in _CAP.finditer(body):
        before = body[:m.start()].rstrip()
        if not before or before[-1] in ".!?\"“(":
            continue
        w = m.group(1)
        if w not in _NOT_NAMES and w != speaker:
            out.append(w)
    return out


def _answer_cues(question: str, hit: SearchHit) -> float:
    """1 when the question asks for a kind of answer (place, number, title) the turn contains, else 0."""
    text, spk = hit.record.content, str(hit.record.metadata.extra.get("speaker", ""))
    body = text.split(":", 1)[-1].split(" [image:", 1)[0]
    if _PLACE_Q.search(question) and _proper_nouns(text, spk):
        return 1.0
    if _NUMBER_Q.search(question) and _NUMBER_T.search(body):
        return 1.0
    if _TITLE_Q.search(question) and _TITLE_T.search(body):
        return 1.0
    return 0.0


def _answer_type(svc: MemoryService, questions: list[Any], as_of: dict) -> None:
    """Answer-type lift over the linear ranking's 50 best; the weight chosen on 4 conversations, scored on the 5th."""
    svc.settings = svc.settings.model_copy(
        update={"scoring": svc.settings.scoring.model_copy(update={"rerank": False})})
    rows = []
    for q, hits in zip(questions, _shipped(svc, questions, as_of), strict=True):
        rows.append((q, [(d, h.breakdown.score, _answer_cues(q.question, h))
                         for d, h in zip(_ids(hits), hits, strict=True)]))
    typed = sum(1 for q, _ in rows if _PLACE_Q.search(q.question) or _NUMBER_Q.search(q.question)
                or _TITLE_Q.search(q.question))
    grid = (0.0, 0.02, 0.05, 0.1, 0.2)

    def ranks(sub: list[Any], w: float) -> list[int | None]:
        return [_rank_ids(q, [d for d, *_ in sorted(r, key=lambda x: -(x[1] + w * x[2]))]) for q, r in sub]

    for w in grid:
        print(f"{f'answer-type w={w} (all, in sample)':36} {_metrics(ranks(rows, w))}", flush=True)
    loco: list[int | None] = []
    for held in sorted({q.conversation_id for q, _ in rows}):
        train = [x for x in rows if x[0].conversation_id != held]
        best = max(grid, key=lambda w: sum(1 / r for r in ranks(train, w) if r))
        loco += ranks([x for x in rows if x[0].conversation_id == held], best)
        print(f"  {held}: weight {best}", flush=True)
    print(f"{'answer-type, LOCO':36} {_metrics(loco)} ({typed} typed questions of {len(rows)})", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--locomo", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo")
    ap.add_argument("--cache", type=Path, default=None, help="pickle file for cached embeddings")
    ap.add_argument("--minilm", action="store_true", help="also the MiniLM re-rank probe (~2 min)")
    ap.add_argument("--answer-type", action="store_true", help="only the answer-type probe")
    args = ap.parse_args()
    emb = DiskCachedEmbedder(get_embedder(MemorySettings(path=":memory:").embedding.model, threads=1), args.cache)
    svc, questions, as_of = _build(args.locomo, emb)
    if args.answer_type:
        _answer_type(svc, questions, as_of)
        svc.close()
        emb.save()
        return
    _expansion(svc, questions, as_of, emb)
    for n in (100, 200):
        ranks = [_rank(q, h) for q, h in zip(questions, _shipped(svc, questions, as_of, candidates=n), strict=True)]
        print(f"{f'candidates={n}':36} {_metrics(ranks)}", flush=True)
    svc.settings = MemorySettings(path=":memory:")
    if args.minilm:
        _minilm(svc, questions, as_of)
    svc.close()
    for name, extra in (("next-turn", _next_turn), ("session-keywords", _session_keywords)):
        s, qs, ao = _build(args.locomo, emb, extra)
        print(f"{name:36} {_metrics([_rank(q, h) for q, h in zip(qs, _shipped(s, qs, ao), strict=True)])}", flush=True)
        s.close()
    emb.save()


if __name__ == "__main__":
    main()
