"""Where dense-only wins rank 1 and the default search loses it (issue 16, stop 33): what the default puts first.

    HF_HUB_OFFLINE=1 nice -n 5 .venv/bin/python scripts/rank1_diag.py [--cache /tmp/emb.pkl] [--sets zh_en_15 ...]
        [--show N] [--top5]

--top5 (stop 34, retr21): the questions where dense-only has a listed turn in its top 5 and the default has none:
the default's (and the linear ranking's) rank of the best listed turn (6-10, 11-50, dropped from the 50) and, for each
of the default's top 5, its kind (below) and its script and channel (keyword match / in dense's top 50 / both).
Stop 34 on zh_en_10 ... zh_en_16 (1,268 questions): 34 such questions (en-en 14, current 6, en->zh 4, zh-zh 4, mixed 3,
zh->en 3); the default ranks the listed turn 6-10 in 25, 11-50 in 9, never below 50; the linear ranking had it in its
top 5 in 14. Of the 170 turns in the default's top 5: other_lang 48 (en-en 30, zh-zh 8; median cosine .21 against
.27-.36 for the other kinds, imputed keyword part median .79), other 61, neighbour 16, newer_slot 14, lang_match 13
(en->zh 6, zh->en 5), older_slot 9, restatement 4, same_session_slot 4, asks 1.

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
Fitting sets only (zh_en_16 became one at stop 34, zh_en_17 at stop 35, zh_en_18 at stop 36); never the held-out set
(zh_en_19). Nothing is written to memory/.
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


def rank_bucket(r: int | None) -> str:
    """Where the default ranks a question's best listed turn when it is not in the top 5."""
    return "6-10" if r is not None and r <= 10 else "11-50" if r is not None else "dropped"


def occupant_tags(hit: Any, q_han: float, ev: list[Any], dense50: list[str]) -> tuple[str, str, str]:
    """Script of a top-5 occupant against the question and the listed turns, and how each channel found it:
    (same / other script as the question; "ev_other": every listed turn is in the other script;
    "kw_only" / "vec_only" / "both": a keyword match (breakdown.keyword > 0) and / or in dense's top 50)."""
    same = (han_share(hit.record.content) >= 0.5) == (q_han >= 0.5)
    ev_other = all((han_share(e.content) >= 0.5) != (q_han >= 0.5) for e in ev)
    kw, vec = hit.breakdown.keyword > 0, hit.record.metadata.extra.get("dia_id") in dense50
    chan = "both" if kw and vec else "kw_only" if kw else "vec_only" if vec else "neither"
    return ("same" if same else "other"), ("ev_other" if ev_other else "ev_same_or_mixed"), chan


def _mode_hits(name: str, emb: DiskCachedEmbedder, top_k: int) -> tuple[Any, Any, dict[str, dict[str, list[Any]]]]:
    """One fitting set stored turn by turn as the evaluation stores it, and each question's top_k hits under the
    default (hybrid), dense-only and linear rankings, searched as of the conversation's last session."""
    turns, questions = load_dataset(ROOT / "tests" / "data" / name)
    hits: dict[str, dict[str, list[Any]]] = {}
    with MemoryService.from_settings(MemorySettings(path=":memory:"), embedder=emb) as svc:  # type: ignore[arg-type]
        for conv, ts in turns.items():
            svc.write_many(NewMemory(ts[j].content, _ns(conv), {"type": "conversation", "source": "locomo",
                                                                "extra": _turn_extra(ts, j, 2)},
                                     id=_turn_id(conv, j, ts[j].dia_id), created_at=ts[j].session_date)
                           for j in range(len(ts)))
        as_of = {c: max(t.session_date for t in ts) for c, ts in turns.items()}
        shipped = svc.settings
        for mode in ("hybrid", "dense", "linear"):
            svc.settings = shipped.model_copy(update={"scoring": shipped.scoring.model_copy(update=MODES[mode])})
            hits[mode] = {q.question_id: svc.search(q.question, _ns(q.conversation_id), top_k=top_k,
                                                     min_score=float("-inf"), min_sim=0.0,
                                                     now=as_of[q.conversation_id]) for q in questions}
        svc.settings = shipped
    return turns, questions, hits


def run_set_top5(name: str, emb: DiskCachedEmbedder, show: int) -> list[dict[str, Any]]:
    """Questions where dense-only has a listed turn in its top 5 and the default has none (brief retr21): the
    default's and the linear ranking's rank of the best listed turn, and the kind and tags of each of the
    default's top 5 (:func:`kind_of`, :func:`occupant_tags`)."""
    turns, questions, hits = _mode_hits(name, emb, 50)
    out: list[dict[str, Any]] = []
    vec_all: dict[str, np.ndarray] = {}
    for q in questions:
        ts = turns[q.conversation_id]
        by_id = {t.dia_id: t for t in ts}
        order = {t.dia_id: k for k, t in enumerate(ts)}
        ids = {m: [h.record.metadata.extra.get("dia_id") for h in hits[m][q.question_id]] for m in hits}
        listed = set(q.evidence)

        def best(m: str) -> int | None:
            return next((i for i, x in enumerate(ids[m], 1) if x in listed), None)

        rd, rh, rl = best("dense"), best("hybrid"), best("linear")
        if rd is None or rd > 5 or (rh is not None and rh <= 5):
            continue
        if q.conversation_id not in vec_all:
            vec_all[q.conversation_id] = dict(zip([t.dia_id for t in ts], emb.embed_documents([t.content for t in ts]),
                                                  strict=True))  # type: ignore[assignment]
        vec = vec_all[q.conversation_id]
        ev = [by_id[e] for e in q.evidence]
        qh = han_share(q.question)
        occ = []
        for h in hits["hybrid"][q.question_id][:5]:
            top = by_id[h.record.metadata.extra.get("dia_id")]
            occ.append((kind_of(top, ev, by_id, order, qh, vec), *occupant_tags(h, qh, ev, ids["dense"])))  # type: ignore[arg-type]
        first = next(e for e in ids["dense"] if e in listed)
        out.append({"set": name, "cat": q.category, "hyb": rank_bucket(rh), "lin": rank_bucket(rl)
                    if rl is None or rl > 5 else "1-5", "ev_cross": (han_share(by_id[first].content) >= 0.5) != (qh >= 0.5),
                    "ev_kw": any(h.breakdown.keyword > 0 for h in hits["hybrid"][q.question_id]
                                 if h.record.metadata.extra.get("dia_id") == first), "occ": occ})
        if show:
            print(f"[{name} {q.category}] Q: {q.question}\n   listed {q.evidence} dense rank {rd} hybrid {rh} "
                  f"linear {rl}: " + " || ".join(by_id[e].content[:80] for e in q.evidence))
            for h, o in zip(hits["hybrid"][q.question_id][:5], occ, strict=True):
                b = h.breakdown
                print(f"     {o} kw {b.keyword:.3f} vec {b.vector:.3f} q {b.query:+.3f}: {h.record.content[:90]}")
    return out


def top5_table(rows: list[dict[str, Any]]) -> None:
    """Counts by direction: the default's rank of the listed turn, the linear ranking's, and the top-5 occupants."""
    cats = sorted({r["cat"] for r in rows}) + ["all"]
    def sel(c: str) -> list[dict[str, Any]]:
        return [r for r in rows if c in ("all", r["cat"])]
    print(f"{len(rows)} questions: dense has a listed turn in its top 5, the default none")
    print("direction".ljust(10) + "".join(h.rjust(9) for h in ("n", "h6-10", "h11-50", "hdrop", "lin1-5", "cross",
                                                              "ev_kw")))
    for c in cats:
        rs = sel(c)
        print(c.ljust(10) + "".join(str(v).rjust(9) for v in (
            len(rs), sum(r["hyb"] == "6-10" for r in rs), sum(r["hyb"] == "11-50" for r in rs),
            sum(r["hyb"] == "dropped" for r in rs), sum(r["lin"] == "1-5" for r in rs), sum(r["ev_cross"] for r in rs),
            sum(r["ev_kw"] for r in rs))))
    print("top-5 occupants by kind (rows: direction)")
    print("direction".ljust(10) + "".join(k[:11].rjust(12) for k in KINDS))
    for c in cats:
        cnt = Counter(o[0] for r in sel(c) for o in r["occ"])
        print(c.ljust(10) + "".join(str(cnt[k]).rjust(12) for k in KINDS))
    print("top-5 occupants by script / channel (question script same|other, listed turn cross-language or not)")
    keys = sorted({(o[1], o[2], o[3]) for r in rows for o in r["occ"]})
    print("direction".ljust(10) + "".join("/".join(k).rjust(30) for k in keys))
    for c in cats:
        cnt2 = Counter((o[1], o[2], o[3]) for r in sel(c) for o in r["occ"])
        print(c.ljust(10) + "".join(str(cnt2[k]).rjust(30) for k in keys))


def run_set(name: str, emb: DiskCachedEmbedder, first_only: bool, show: int) -> list[tuple[str, str, str]]:
    turns, questions, hits = _mode_hits(name, emb, 5)
    rows = []
    linear_ok = LINEAR_OK
    tops = {m: {qid: [h.record.metadata.extra.get("dia_id") for h in hs] for qid, hs in by_q.items()}
            for m, by_q in hits.items()}
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
    ap.add_argument("--sets", nargs="+", default=[f"zh_en_{i}" for i in range(10, 17)])
    ap.add_argument("--first-only", action="store_true", help="read only each question's first listed turn")
    ap.add_argument("--show", type=int, default=0, help="print up to N examples per kind per set")
    ap.add_argument("--top5", action="store_true", help="dense has a listed turn in its top 5, the default none "
                    "(brief retr21): the default's rank of it and what fills its top 5")
    args = ap.parse_args()
    assert tr.HELD_OUT_ZH not in args.sets, f"{tr.HELD_OUT_ZH} is the held-out set"
    emb = DiskCachedEmbedder(get_embedder(MemorySettings(path=":memory:").embedding.model, threads=1), args.cache)
    if args.top5:
        t5: list[dict[str, Any]] = []
        for name in args.sets:
            t5 += run_set_top5(name, emb, args.show)
            emb.save()
        top5_table(t5)
        return
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
