"""Issue 16 lab: the slot lift for questions WITHOUT a time (no date window, no "when", not "originally"),
then the shipped reranker, on the zh/en fitting sets' cached candidates (scripts/current_diag.py load).

    python scripts/current_rule_lab.py {off,all,change} [cap] [overlap]

off: search as shipped; all: memory.query's slot lift (current_values) for every question without a time too;
change: the same, only when the newer statement words a change (memory.rerank_supersede.states_change).
Prints MRR (listed evidence) per set and category and the per-category mean over the sets.
"""
from __future__ import annotations

import pickle
import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from memory import scoring  # noqa: E402
from memory.query import RerankWeights, current_values, plan_query, rerank  # noqa: E402
from memory.records import ScoreBreakdown, SearchHit  # noqa: E402
from memory.rerank import apply  # noqa: E402
from memory.settings import ScoringSettings  # noqa: E402
from current_diag import CANDS, SETS, add_set  # noqa: E402  (this folder is on sys.path)


# Update wording, English and Chinese (general change vocabulary, not a list of values): a statement that
# replaces an earlier one mostly says so ("went up to", "from next week", "改成", "换人了", "不再"). A copy of the
# regex commit ea0cc1b put in memory/rerank_supersede.py for reranker features (reverted: see MEASUREMENTS.md, stop 31).
_CHANGE = re.compile(
    r"\b(?:now|no longer|any ?more|instead|switch\w*|chang\w*|mov(?:e|ed|ing)|replac\w*|updat\w*"
    r"|rais(?:e|ed|ing)|lower(?:ed|ing)|increas\w*|decreas\w*|cut|bump\w*|push(?:ed|ing)? back|revis\w*"
    r"|renegotiat\w*|new|took over|takes? over|picks? up|left|gone|retir\w*|resign\w*|quit|going forward"
    r"|after all|back to|goes back|went (?:up|down)|came down|reopen\w*|upgrad\w*|downgrad\w*|extend\w*"
    r"|postpon\w*|delay\w*|reschedul\w*|shift\w*|from (?:next|this|now)|from .{1,30} to)\b"
    r"|现在|目前|如今|改|换|调到|调成|调整|调了|上调|下调|提到|提高|降|涨|加到|减到|缩短|延长|顺延|推迟|提前|挪"
    r"|不再|不用|取消|接手|接替|离职|辞职|退休|变|新|重新|定成|定为|搬|以后|今后|从.{1,12}起",
    re.I,
)


def states_change(text: str) -> float:
    """1 when a memory words a change of value (:data:`_CHANGE`), its speaker prefix left out."""
    m = re.match(r"^[^:：\n]{1,40}[:：]\s*", text)
    return float(bool(_CHANGE.search(text[m.end():] if m else text)))


OVERLAP: float | None = None  # argv[3]: the stricter overlap (None: current_values as shipped)


def lifted(hits: list[SearchHit], cap: float, change_only: bool) -> list[SearchHit]:
    by_id = {h.record.id: h for h in hits}
    found = current_values(hits, OVERLAP or 0.0)
    lift = {i: min(cap, x) for i, x in found.items()
            if not change_only or states_change(by_id[i].record.content)}
    if not lift:
        return hits
    out = [SearchHit(h.record, ScoreBreakdown(h.breakdown.sim, h.breakdown.vector, h.breakdown.keyword,
                                              h.breakdown.decay, h.breakdown.boost, h.breakdown.score + lift[h.record.id],
                                              h.breakdown.query + lift[h.record.id])) if h.record.id in lift else h
           for h in hits]
    out.sort(key=lambda h: (-h.breakdown.score, -h.record.updated_at.timestamp(), h.record.id))
    return out


CAP: float | None = None  # the lift's cap (default: the shipped slot_bonus); argv[2]


def main(arm: str) -> None:
    cands = pickle.loads(CANDS.read_bytes())
    cfg = ScoringSettings()
    w = RerankWeights.from_scoring(cfg)
    per: dict[str, list[float]] = defaultdict(list)
    for s in SETS:
        rr: dict[str, list[float]] = defaultdict(list)
        for q, now, cs in cands[s]:
            plan = plan_query(q.question, now)
            hits = rerank(scoring.score_candidates(cs, now, cfg, q.question), plan, w)
            if arm != "off" and not plan.wants_current and not plan.asks_past and plan.window is None \
                    and not plan.wants_time:
                hits = lifted(hits, CAP if CAP is not None else w.slot, arm == "change")
            hits = apply(hits, plan, {c.record.id: c.keyword_score for c in cs})
            r = next((i for i, h in enumerate(hits, 1) if h.record.metadata.extra.get("dia_id") in set(q.evidence)), None)
            rr[q.category].append(1 / r if r else 0.0)
        add_set(s, rr, per)
    print(arm, "mean over sets:", " ".join(f"{c} {sum(v) / len(v):.4f}" for c, v in sorted(per.items())))


if __name__ == "__main__":
    CAP = float(sys.argv[2]) if len(sys.argv) > 2 else None
    OVERLAP = float(sys.argv[3]) if len(sys.argv) > 3 else None
    main(sys.argv[1])
