"""``memctl eval pii``: precision and recall of the PII redactor on the labelled set.

The set (``tests/data/pii/pii.jsonl``, made by ``tests/data/pii/generate.py``) holds zh/en strings
with gold spans (EMAIL, PHONE, ID_NUMBER, CARD_NUMBER, IBAN) and look-alikes with none. Scoring,
per class: a detected span is a true positive when it overlaps a gold span of the same class, else
a false positive of its class; a gold span no detection of its class overlaps is a false negative.
A look-alike *survives* when the redacted text equals the input. Figures are given per split
(``tune``: the half the patterns were adjusted on; ``heldout``: the half that was not).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from memory.policy.pii import LABELS, Redaction, redact

DEFAULT_DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "pii" / "pii.jsonl"


def load(path: str | Path = DEFAULT_DATA) -> list[dict[str, Any]]:
    """The labelled rows; ``ValueError`` with the line number for a malformed file."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"no PII set at {p}; pass --data FILE (a .jsonl like tests/data/pii/pii.jsonl)")
    rows = []
    for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            assert isinstance(row["text"], str) and isinstance(row["spans"], list)
        except (ValueError, KeyError, TypeError, AssertionError) as exc:
            raise ValueError(f"{p}:{n}: not a labelled row ({{'text', 'spans', 'split'}}): {exc}") from exc
        rows.append(row)
    return rows


def _score(rows: Iterable[Mapping[str, Any]], redactor: Callable[[str], Redaction]) -> dict[str, Any]:
    counts = {label: {"tp": 0, "fp": 0, "fn": 0} for label in LABELS}
    look = survived = strings = 0
    damaged: list[dict[str, str]] = []
    missed: list[dict[str, str]] = []
    for row in rows:
        strings += 1
        text, gold = row["text"], row["spans"]
        r = redactor(text)
        pred = list(r.spans)
        for p in pred:
            hit = any(g["label"] == p.label and p.start < g["end"] and g["start"] < p.end for g in gold)
            counts.setdefault(p.label, {"tp": 0, "fp": 0, "fn": 0})["tp" if hit else "fp"] += 1
            if not hit:
                damaged.append({"text": text, "as": p.label, "span": text[p.start:p.end]})
        for g in gold:
            if not any(p.label == g["label"] and p.start < g["end"] and g["start"] < p.end for p in pred):
                counts[g["label"]]["fn"] += 1
                missed.append({"text": text, "label": g["label"], "span": text[g["start"]:g["end"]]})
        if not gold:
            look += 1
            survived += r.text == text
    per_class = {}
    for label, c in counts.items():
        tp, fp, fn = c["tp"], c["fp"], c["fn"]
        per_class[label] = {**c, "precision": round(tp / (tp + fp), 4) if tp + fp else None,
                            "recall": round(tp / (tp + fn), 4) if tp + fn else None}
    tp = sum(c["tp"] for c in counts.values())
    fp = sum(c["fp"] for c in counts.values())
    fn = sum(c["fn"] for c in counts.values())
    return {"strings": strings, "classes": per_class,
            "micro": {"tp": tp, "fp": fp, "fn": fn, "precision": round(tp / (tp + fp), 4) if tp + fp else None,
                      "recall": round(tp / (tp + fn), 4) if tp + fn else None},
            "lookalikes": {"n": look, "survived": survived}, "false_positives": damaged[:50], "missed": missed[:50]}


def evaluate(rows: Sequence[Mapping[str, Any]], redactor: Callable[[str], Redaction] = redact,
             splits: Sequence[str] = ("tune", "heldout")) -> dict[str, Any]:
    """Figures per split and over all rows."""
    out: dict[str, Any] = {}
    for split in splits:
        part = [r for r in rows if r.get("split") == split]
        if part:
            out[split] = _score(part, redactor)
    out["all"] = _score(rows, redactor)
    return out


def render(report: Mapping[str, Any]) -> str:
    lines = []
    for split, rep in report.items():
        look = rep["lookalikes"]
        lines.append(f"{split}: {rep['strings']} strings, look-alikes survived {look['survived']}/{look['n']}, "
                     f"micro P {rep['micro']['precision']} R {rep['micro']['recall']}")
        for label, c in rep["classes"].items():
            lines.append(f"  {label:<12} P {c['precision']!s:<6} R {c['recall']!s:<6} "
                         f"(tp {c['tp']}, fp {c['fp']}, fn {c['fn']})")
    return "\n".join(lines)


__all__ = ["DEFAULT_DATA", "evaluate", "load", "render"]
