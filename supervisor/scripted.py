"""A chat model that replays scripted replies: for tests and the offline demo.

:class:`ScriptedChatModel` is a real LangChain ``BaseChatModel``: ``bind_tools`` returns the
model itself (recording which tools were offered), and each call returns the next scripted
``AIMessage`` (text and/or tool calls). Every call's input messages are recorded, so a test can
check what an agent was shown; a scripted reply may also state what its input must contain
(``expect``), which is how the demo proves a replayed step saw the injected memory.

Example:
    >>> from langchain_core.messages import HumanMessage
    >>> m = ScriptedChatModel(replies=[{"tool_calls": [{"name": "transfer_to_text2sql",
    ...                                                  "args": {"task": "GMV by month"}}]}, "done"])
    >>> m.bind_tools([]).invoke([HumanMessage("hi")]).tool_calls[0]["name"]
    'transfer_to_text2sql'
    >>> m.invoke([HumanMessage("hi")]).content
    'done'
    >>> m.remaining
    0
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import PrivateAttr

Reply = AIMessage | str | Mapping[str, Any]


class ScriptExhausted(RuntimeError):
    """The model was called more often than the script has replies."""


class ScriptMismatch(AssertionError):
    """A scripted reply's ``expect`` was not found in the model's input (strict mode)."""


def message_text(m: BaseMessage) -> str:
    c = m.content
    if isinstance(c, str):
        return c
    return " ".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in c)


class ScriptedChatModel(BaseChatModel):
    """Replays ``replies`` in order. A reply is an ``AIMessage``, a string, or a dict with
    ``content``, ``tool_calls`` (``[{"name", "args"}]``) and optional ``expect`` (substrings
    the input messages must contain) and ``note`` (shown by the demo).
    """

    replies: list[Any] = []
    role: str = "scripted"
    strict: bool = False

    _queue: list[Any] = PrivateAttr(default_factory=list)
    _lock: Any = PrivateAttr(default_factory=threading.Lock)
    _n: int = PrivateAttr(default=0)
    calls: list[list[BaseMessage]] = []
    bound_tools: list[list[str]] = []
    checks: list[dict[str, Any]] = []

    def model_post_init(self, __context: Any) -> None:
        self._queue = list(self.replies)
        self.calls = []
        self.bound_tools = []
        self.checks = []

    @property
    def _llm_type(self) -> str:
        return "scripted-chat-model"

    @property
    def remaining(self) -> int:
        return len(self._queue)

    def extend(self, replies: Iterable[Reply]) -> ScriptedChatModel:
        with self._lock:
            self._queue.extend(replies)
        return self

    def reset(self, replies: Iterable[Reply] = ()) -> ScriptedChatModel:
        with self._lock:
            self._queue = list(replies)
        return self

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:  # type: ignore[override]
        names = []
        for t in tools:
            name = getattr(t, "name", None) or (t.get("name") if isinstance(t, Mapping) else None)
            if name is None and isinstance(t, Mapping):
                name = t.get("function", {}).get("name")
            names.append(str(name or getattr(t, "__name__", t)))
        self.bound_tools.append(names)
        return self

    def _to_message(self, reply: Reply) -> tuple[AIMessage, list[str]]:
        if isinstance(reply, AIMessage):
            return reply, []
        if isinstance(reply, str):
            return AIMessage(content=reply, name=self.role), []
        calls = []
        for tc in reply.get("tool_calls", []) or []:
            self._n += 1
            calls.append({"name": tc["name"], "args": dict(tc.get("args", {})),
                          "id": tc.get("id") or f"call_{self.role}_{self._n}", "type": "tool_call"})
        expect = reply.get("expect") or []
        msg = AIMessage(content=reply.get("content", ""), tool_calls=calls, name=self.role,
                        response_metadata={"scripted": True, **({"note": reply["note"]} if reply.get("note") else {})})
        return msg, [expect] if isinstance(expect, str) else list(expect)

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        with self._lock:
            self.calls.append(list(messages))
            if not self._queue:
                raise ScriptExhausted(
                    f"scripted model {self.role!r} has no reply left for call #{len(self.calls)}; "
                    "the scenario has fewer steps than the graph took")
            reply = self._queue.pop(0)
            msg, expect = self._to_message(reply)
        if expect:
            seen = "\n".join(message_text(m) for m in messages)
            for e in expect:
                ok = e in seen
                self.checks.append({"role": self.role, "expect": e, "found": ok})
                if not ok and self.strict:
                    raise ScriptMismatch(f"{self.role}: expected {e!r} in the model input")
        return ChatResult(generations=[ChatGeneration(message=msg)])
