"""Sanity checks for a zh/en retrieval set: `python tests/data/validate_zh_en.py tests/data/zh_en_3`
(written for zh_en_3; zh_en_4 and zh_en_5 were checked with the same rules).

Checks the schema, that every evidence id exists in its conversation, the per-category counts, that
each category's language matches its name, and that no question copies a 4-character Chinese span or a
3-word English span from its evidence text (questions must paraphrase, or lexical search is rewarded
for copying). Exits non-zero and prints the offenders when a check fails.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import sys
from collections import Counter, defaultdict
from itertools import pairwise
from pathlib import Path

# The set to check: its folder as the first argument (zh_en_3 when none is given).
HERE = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "zh_en_3"
CATEGORIES = ("en-en", "zh-zh", "en->zh", "zh->en", "mixed", "current")
TURN_KEYS = {
    "conversation_id",
    "session_id",
    "session_date",
    "session_date_raw",
    "dia_id",
    "turn_index",
    "speaker",
    "text",
    "blip_caption",
}
QUESTION_KEYS = {"conversation_id", "question_id", "question", "answer", "category", "category_name", "evidence"}
CJK_RUN = re.compile(r"[\u3400-\u9fff]+")
EN_WORD = re.compile(r"[a-z0-9]+")


def load(name: str) -> list[dict]:
    with open(HERE / name, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def language(text: str) -> str:
    """'zh', 'en' or 'mixed', by how much of the text is CJK characters vs Latin words."""
    cjk = sum(len(r) for r in CJK_RUN.findall(text))
    words = len(re.findall(r"[A-Za-z]{2,}", text))
    if cjk == 0:
        return "en"
    # A Chinese sentence may carry a name or an acronym (HIS, DHL) and still read as Chinese.
    if words <= 1 or cjk >= 8 * words:
        return "zh"
    return "mixed"


def code_switched(text: str) -> bool:
    """Both scripts in one text: Chinese characters and at least one lowercase English word."""
    return bool(CJK_RUN.search(text)) and bool(re.search(r"\b[a-z]{2,}\b", text))


def zh_spans(text: str, n: int = 4) -> set[str]:
    return {r[i : i + n] for r in CJK_RUN.findall(text) for i in range(len(r) - n + 1)}


def en_spans(text: str, n: int = 3) -> set[tuple[str, ...]]:
    words = EN_WORD.findall(text.lower())
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def main() -> int:
    turns, questions = load("turns.jsonl"), load("questions.jsonl")
    errors: list[str] = []
    by_conv: dict[str, dict[str, dict]] = defaultdict(dict)
    sessions: dict[str, dict[int, str]] = defaultdict(dict)
    for t in turns:
        if set(t) != TURN_KEYS:
            errors.append(f"turn keys {sorted(set(t) ^ TURN_KEYS)} in {t.get('dia_id')}")
        cid = t["conversation_id"]
        if t["dia_id"] in by_conv[cid]:
            errors.append(f"{cid} duplicate {t['dia_id']}")
        if t["turn_index"] != len(by_conv[cid]):
            errors.append(f"{cid} {t['dia_id']} turn_index {t['turn_index']} out of order")
        by_conv[cid][t["dia_id"]] = t
        if not t["dia_id"].startswith(f"D{t['session_id']}:"):
            errors.append(f"{cid} {t['dia_id']} not in session {t['session_id']}")
        sessions[cid].setdefault(t["session_id"], t["session_date"])
    for cid, ss in sessions.items():
        dates = [dt.datetime.fromisoformat(ss[k]) for k in sorted(ss)]
        gaps = [(b - a).days for a, b in pairwise(dates)]
        n_turns = len(by_conv[cid])
        print(f"{cid}: {len(ss)} sessions, {n_turns} turns, gaps in days {gaps}")
        if not 3 <= len(ss) <= 5 or not 50 <= n_turns <= 80 or min(gaps) < 7:
            errors.append(f"{cid}: sessions/turns/gaps out of the brief's range")
    ids: set[str] = set()
    counts: Counter[str] = Counter()
    per_conv: dict[str, Counter[str]] = defaultdict(Counter)
    for q in questions:
        qid, cid, cat = q["question_id"], q["conversation_id"], q["category"]
        if set(q) != QUESTION_KEYS or q["category_name"] != cat or cat not in CATEGORIES:
            errors.append(f"{qid}: bad keys or category")
        if qid in ids or not qid.startswith(f"{cid}:q"):
            errors.append(f"{qid}: duplicate or malformed id")
        ids.add(qid)
        counts[cat] += 1
        per_conv[cid][cat] += 1
        ev = [by_conv[cid].get(e) for e in q["evidence"]]
        if not ev or any(e is None for e in ev):
            errors.append(f"{qid}: evidence {q['evidence']} missing from {cid}")
            continue
        ev_text = " ".join(e["text"] for e in ev if e)
        ql, el = language(q["question"]), language(ev_text)
        want = {"en-en": ("en", "en"), "zh-zh": ("zh", "zh"), "en->zh": ("en", "zh"), "zh->en": ("zh", "en")}.get(cat)
        if want and (ql, el) != want:
            errors.append(f"{qid} [{cat}] languages are question={ql} evidence={el}")
        if cat == "mixed" and not (code_switched(q["question"]) or code_switched(ev_text)):
            errors.append(f"{qid} [mixed] neither question nor evidence is code-switched")
        shared_zh = zh_spans(q["question"]) & zh_spans(ev_text)
        shared_en = en_spans(q["question"]) & en_spans(ev_text)
        if shared_zh or shared_en:
            spans = sorted(shared_zh) + [" ".join(s) for s in sorted(shared_en)]
            errors.append(f"{qid} copies {spans} from its evidence: {q['question']}")
    print(f"{len(turns)} turns, {len(questions)} questions in {len(by_conv)} conversations")
    print("conversation " + " ".join(f"{c:>7}" for c in CATEGORIES))
    for cid in sorted(per_conv):
        print(f"{cid:<12} " + " ".join(f"{per_conv[cid][c]:>7}" for c in CATEGORIES))
    print(f"{'total':<12} " + " ".join(f"{counts[c]:>7}" for c in CATEGORIES))
    for e in errors:
        print("ERROR", e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
