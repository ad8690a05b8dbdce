"""Build turns.jsonl / questions.jsonl of the zh_en_4 set from the plain-text sources in src/.

Source format (one conversation per file, UTF-8):
  #conv z4-01            conversation id
  #user 周岚              the user's speaker name (the other speaker is "Assistant")
  @session 2025-03-03T09:30|9:30 am on 3 March, 2025
  U|text  or  A|text      a user / assistant turn; U:key|text gives the turn a key for questions
  ?key[,key2]|category|question|answer
Run `python tests/data/zh_en_4/build.py` then `python tests/data/validate_zh_en.py tests/data/zh_en_4`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).parent
ASSISTANT = "Assistant"


def build_one(path: Path) -> tuple[list[dict], list[dict]]:
    cid = user = ""
    session = 0
    date = raw = ""
    turn_in_session = 0
    turns: list[dict] = []
    questions: list[dict] = []
    keys: dict[str, str] = {}
    pending: list[tuple[int, str]] = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        if line.startswith("#conv "):
            cid = line.split(None, 1)[1]
        elif line.startswith("#user "):
            user = line.split(None, 1)[1]
        elif line.startswith("@session "):
            session += 1
            date, raw = line.split(None, 1)[1].split("|")
            turn_in_session = 0
        elif line.startswith("?"):
            pending.append((lineno, line[1:]))
        else:
            head, text = line.split("|", 1)
            who, _, key = head.partition(":")
            turn_in_session += 1
            dia = f"D{session}:{turn_in_session}"
            if key:
                if key in keys:
                    sys.exit(f"{path}:{lineno}: duplicate key {key}")
                keys[key] = dia
            turns.append(
                {
                    "conversation_id": cid,
                    "session_id": session,
                    "session_date": date,
                    "session_date_raw": raw,
                    "dia_id": dia,
                    "turn_index": len(turns),
                    "speaker": {"U": user, "A": ASSISTANT}[who],
                    "text": text.strip(),
                    "blip_caption": None,
                }
            )
    for lineno, q in pending:
        key, cat, question, answer = q.split("|")
        missing = [k for k in key.split(",") if k not in keys]
        if missing:
            sys.exit(f"{path}:{lineno}: unknown key {missing}")
        questions.append(
            {
                "conversation_id": cid,
                "question_id": f"{cid}:q{len(questions)}",
                "question": question.strip(),
                "answer": answer.strip(),
                "category": cat,
                "category_name": cat,
                "evidence": [keys[k] for k in key.split(",")],
            }
        )
    return turns, questions


def main() -> None:
    turns: list[dict] = []
    questions: list[dict] = []
    for path in sorted((HERE / "src").glob("*.txt")):
        t, q = build_one(path)
        turns += t
        questions += q
    for name, rows in (("turns.jsonl", turns), ("questions.jsonl", questions)):
        with open(HERE / name, "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
