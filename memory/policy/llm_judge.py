"""The chat-model side of the write-path judge: asked only about the pairs the offline judge
(:mod:`memory.policy.judge`) is unsure of, when ``policy.chat_model`` is set.

The model answers with one JSON object (duplicate / update / distinct, and for an update the
merged statement); an unusable answer or a failed call returns None and the offline verdict
stands.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Literal

Label = Literal["duplicate", "conflict", "distinct"]

LLM_JUDGE_PROMPT = """You maintain a user's long-term memory. Compare a STORED memory with an INCOMING one.
- "duplicate": the same fact, maybe paraphrased or in another language (nothing new).
- "update": the same subject and attribute with a new value; the incoming one replaces the stored one.
- "distinct": a different fact (another subject, entity, metric, period, task ...), even if worded alike.
For "update", also give "merged": the current statement in one sentence (the new value wins; keep
details of the stored one that do not contradict it).
Reply with JSON only: {{"label": "duplicate" | "update" | "distinct", "merged": "<sentence or empty>", "reason": "<a few words>"}}
STORED: {existing}
INCOMING: {incoming}"""

_JSON_OBJ = re.compile(r"\{.*\}", re.DOTALL)
_LLM_LABELS = {"duplicate": "duplicate", "update": "conflict", "conflict": "conflict", "distinct": "distinct"}


@dataclass(frozen=True)
class LLMReply:
    label: Label
    reason: str
    merged: str | None = None


def parse_llm_judgement(text: str) -> LLMReply | None:
    """The model's verdict from a reply holding one JSON object (code fences allowed), or None.
    ``"update"`` (or ``"conflict"``) reads as the ``conflict`` label."""
    m = _JSON_OBJ.search(text or "")
    if not m:
        return None
    try:
        obj = json.loads(m.group())
    except ValueError:
        return None
    label = _LLM_LABELS.get(obj.get("label")) if isinstance(obj, dict) else None  # type: ignore[arg-type]
    if label is None:
        return None
    merged = obj.get("merged")
    merged = merged.strip()[:2000] if isinstance(merged, str) and merged.strip() else None
    return LLMReply(label, str(obj.get("reason") or "")[:200], merged)  # type: ignore[arg-type]


def reply_text(msg: object) -> str:
    content = getattr(msg, "content", msg)
    if isinstance(content, list):  # content blocks
        return " ".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return str(content)


class LLMJudge:
    """Ask a chat model about a pair (strict JSON reply). Returns None when the call fails or the
    reply is unusable, so the caller keeps the offline verdict.

    Example:
        >>> from supervisor.scripted import ScriptedChatModel
        >>> j = LLMJudge(ScriptedChatModel(replies=['{"label": "update", "merged": "GMV 含运费", "reason": "new rule"}']))
        >>> j.ask("GMV excludes shipping", "GMV 现在含运费")
        LLMReply(label='conflict', reason='new rule', merged='GMV 含运费')
        >>> j.ask("GMV excludes shipping", "GMV 现在含运费") is None  # script exhausted
        True
    """

    def __init__(self, model: object):
        self.model = model
        self.last_error: str | None = None

    def ask(self, existing: str, incoming: str) -> LLMReply | None:
        try:
            reply = self.model.invoke(LLM_JUDGE_PROMPT.format(existing=existing, incoming=incoming))  # type: ignore[attr-defined]
        except Exception as exc:  # noqa: BLE001 - any model failure: the offline verdict stands
            self.last_error = f"llm judge failed: {type(exc).__name__}"
            return None
        parsed = parse_llm_judgement(reply_text(reply))
        self.last_error = None if parsed is not None else "llm reply unparseable"
        return parsed
