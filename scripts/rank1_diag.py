"""Where dense-only wins rank 1 and the default search loses it (issue 16, stop 33): what the default puts first.

    HF_HUB_OFFLINE=1 nice -n 5 .venv/bin/python scripts/rank1_diag.py [--cache /tmp/emb.pkl] [--sets zh_en_15 ...]
        [--show N]

Ingests each zh/en set as ``memctl eval retrieval`` does (one store), searches every question with the shipped
settings ("hybrid") and with the vector channel alone ("dense", memctl.evaluation.MODES), and keeps the questions
where dense has a listed turn at rank 1 and hybrid does not. Each such question's hybrid rank-1 turn gets one kind
(the first that applies, in this order):

  restatement  the unlisted turn right before / after a listed one that restates it (tune_rerank.restates either way)
  asks         a turn that is mostly a question (memory.query.asks >= .5)
  older_slot   an earlier turn (created before the first listed turn) on the same slot as a listed turn
  newer_slot   a later turn (created after the last listed turn) on the same slot
  same_session_slot  a turn of a listed turn's session on the same slot (neither older nor newer)
  neighbour    a turn within two turns of a listed turn in its session, another slot
  lang_match   another fact, in the question's language while every listed turn is in the other language
  other_lang   another fact, in the other language while every listed turn is in the question's language
  other        another fact

"Same slot": content-term Dice (tune_rerank.dice) >= SLOT_DICE or stored-vector cosine >= SLOT_COS with a listed turn.
Fitting sets only (zh_en_15 became one at stop 33); never the held-out set. Nothing is written to memory/.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from memctl import tune_rerank as tr  # noqa: E402
from memctl.evaluation import MODES, _ns, _turn_extra, _turn_id, load_dataset  # noqa: E402
from memctl.tune_retrieval import DiskCachedEmbedder  # noqa: E402
from memory import MemoryService, MemorySettings  # noqa: E402
from memory.embeddings import get_embedder  # noqa: E402
from memory.query import asks  # noqa: E402
from memory.scoring import han_share  # noqa: E402
from memory.service import NewMemory  # noqa: E402

SLOT_DICE, SLOT_COS = 0.2, 0.6
LINEAR_OK: Counter[str] = Counter()  # per kind: the linear ranking (no reranker) had a listed turn first
KINDS = ("restatement", "asks", "older_slot", "newer_slot", "same_session_slot", "neighbour", "lang_match", "other_lang", "other")


def kind_of(top: Any, ev: list[Any], by_id: dict[str, Any], order: dict[str, int], q_han: float,
            vec: dict[str, np.ndarray]) -> str:
    """The kind of the hybrid rank-1 turn ``top`` (a Turn) against the listed turns ``ev`` (see the docstring)."""
    i = order[top.dia_id]
    sess = top.dia_id.split(":")[0]
    for e in ev:
        j = order[e.dia_id]
        if abs(i - j) == 1 and (tr.restates(e, top) or tr.restates(top, e)):
            return "restatement"
    if asks(top.content) >= 0.5:
        return "asks"
    same = [e for e in ev if tr.dice(top.content, e.content) >= SLOT_DICE
            or float(vec[top.dia_id] @ vec[e.dia_id]) >= SLOT_COS]
    if same:
        if top.session_date < min(e.session_date for e in ev):
            return "older_slot"
        if top.session_date > max(e.session_date for e in ev):
            return "newer_slot"
        return "same_session_slot"
    if any(e.dia_id.split(":")[0] == sess and abs(order[e.dia_id] - i) <= 2 for e in ev):
        return "neighbour"
    q_zh, t_zh = q_han >= 0.5, han_share(top.content) >= 0.5
    if q_zh == t_zh and all((han_share(e.content) >= 0.5) != q_zh for e in ev):
        return "lang_match"
    if q_zh != t_zh and all((han_share(e.content) >= 0.5) == q_zh for e in ev):
        return "other_lang"
    return "other"


def run_set(name: str, emb: DiskCachedEmbedder, first_only: bool, show: int) -> list[tuple[str, str, str]]:
    d = ROOT / "tests" / "data" / name
    turns, questions = load_dataset(d)
    settings = MemorySettings(path=":memory:")
    rows = []
    linear_ok = LINEAR_OK
    with MemoryService.from_settings(settings, embedder=emb) as svc:  # type: ignore[arg-type]
        for conv, ts in turns.items():
            svc.write_many(NewMemory(ts[j].content, _ns(conv), {"type": "conversation", "source": "locomo",
                                                                "extra": _turn_extra(ts, j, 2)},
                                     id=_turn_id(conv, j, ts[j].dia_id), created_at=ts[j].session_date)
                           for j in range(len(ts)))
        as_of = {c: max(t.session_date for t in ts) for c, ts in turns.items()}
        shipped = svc.settings
        tops: dict[str, dict[str, list[str]]] = {}
        for mode in ("hybrid", "dense", "linear"):
            svc.settings = shipped.model_copy(update={"scoring": shipped.scoring.model_copy(update=MODES[mode])})
            tops[mode] = {q.question_id: [h.record.metadata.extra.get("dia_id") for h in
                                          svc.search(q.question, _ns(q.conversation_id), top_k=5,
                                                     min_score=float("-inf"), min_sim=0.0,
                                                     now=as_of[q.conversation_id])] for q in questions}
        svc.settings = shipped
    for q in questions:
        ts = turns[q.conversation_id]
        by_id = {t.dia_id: t for t in ts}
        order = {t.dia_id: k for k, t in enumerate(ts)}
        listed = q.evidence[:1] if first_only else q.evidence
        h1, d1 = tops["hybrid"][q.question_id][:1], tops["dense"][q.question_id][:1]
        if not d1 or d1[0] not in listed or (h1 and h1[0] in listed):
            continue
        vec = dict(zip([t.dia_id for t in ts], emb.embed_documents([t.content for t in ts]), strict=True))
        top = by_id[h1[0]]
        ev = [by_id[e] for e in q.evidence]  # the slot / restatement test reads every listed turn
        k = kind_of(top, ev, by_id, order, han_share(q.question), vec)
        rows.append((name, q.category, k))
        lin1 = tops["linear"][q.question_id][:1]
        linear_ok[k] += int(bool(lin1) and lin1[0] in listed)
        if show and sum(1 for r in rows if r[2] == k) <= show:
            print(f"[{name} {q.category} {k}] Q: {q.question}\n   listed {q.evidence}: "
                  + " || ".join(by_id[e].content[:90] for e in q.evidence)
                  + f"\n   hybrid#1 {top.dia_id} ({top.speaker}): {top.content[:110]}"
                  + f"\n   dense#1 {d1[0]}; hybrid rank of dense#1: "
                  + str(tops['hybrid'][q.question_id].index(d1[0]) + 1 if d1[0] in tops['hybrid'][q.question_id]
                        else '>5'))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cache", type=Path, default=None)
    ap.add_argument("--sets", nargs="+", default=[f"zh_en_{i}" for i in range(10, 16)])
    ap.add_argument("--first-only", action="store_true", help="read only each question's first listed turn")
    ap.add_argument("--show", type=int, default=0, help="print up to N examples per kind per set")
    args = ap.parse_args()
    assert "zh_en_16" not in args.sets, "zh_en_16 is the held-out set"
    emb = DiskCachedEmbedder(get_embedder(MemorySettings(path=":memory:").embedding.model, threads=1), args.cache)
    rows = []
    for name in args.sets:
        rows += run_set(name, emb, args.first_only, args.show)
        emb.save()
    table: dict[str, Counter[str]] = defaultdict(Counter)
    for _, cat, k in rows:
        table[cat][k] += 1
        table["all"][k] += 1
    print("direction".ljust(10) + "".join(k[:12].rjust(13) for k in KINDS) + "total".rjust(7))
    for cat in sorted(table, key=lambda c: (c == "all", c)):
        print(cat.ljust(10) + "".join(str(table[cat][k]).rjust(13) for k in KINDS)
              + str(sum(table[cat].values())).rjust(7))
    print("linear".ljust(10) + "".join(str(LINEAR_OK[k]).rjust(13) for k in KINDS)
          + str(sum(LINEAR_OK.values())).rjust(7) + "  (of those, the linear ranking had a listed turn first)")


if __name__ == "__main__":
    main()
