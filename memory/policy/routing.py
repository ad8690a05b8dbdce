"""When to read and write memory, where, and how much — rules for Chinese and English.

``route()`` is pure and fast (precompiled regexes; well under 1 ms per message). An LLM router
(:class:`LLMRouter`) can replace it when a chat model is configured; it falls back to the rules
whenever the model fails or answers nonsense.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from memory.namespace import Namespace

Role = Literal["user", "assistant", "agent", "tool"]

_PREF = re.compile(
    r"以后|今后|默认|记住|记一下|偏好|习惯|改成|改为|改用|不再|别再|不要再|总是|一律|统一用|请用|我喜欢|我更喜欢|我倾向"
    r"|\b(?:always|from now on|going forward|remember|i prefer|prefer|preference|stop (?:using|showing|sending)"
    r"|don't (?:ever|use|show)|never (?:use|show)|by default|default to|i like|i'd like|i want .* (?:in|as) "
    r"|please use|use .* instead|no longer|switch to)\b",
    re.IGNORECASE,
)
_FACT = re.compile(
    r"口径|定义|别名|是指|指的是|也叫|简称|即为|等于|计算方式|算法是"
    r"|\b(?:means|defined as|definition|alias|stands for|refers to|a\.k\.a\.?|aka|is calculated as|is computed as)\b",
    re.IGNORECASE,
)
_SQL = re.compile(r"\bselect\b[\s\S]+?\bfrom\b", re.IGNORECASE)
_PATH = re.compile(
    r"(?:[A-Za-z]:\\|/|\./|~/)[\w.\-/\\\u4e00-\u9fff]+\.(?:csv|xlsx?|png|jpe?g|svg|pdf|html?|json|parquet|md|txt|pptx?|docx?)\b",
    re.IGNORECASE,
)
_CONCLUSION = re.compile(
    r"结论|总结|最终|答案是|结果是|发现|\b(?:conclusion|in summary|final answer|the answer is|we found|result:|findings?)\b",
    re.IGNORECASE,
)
_CROSS_SESSION = re.compile(
    r"上次|之前|以前|还记得|我们说过|按之前|照旧|老样子|跟上回|同上次"
    r"|\b(?:last time|previously|as before|like before|as usual|remember when|same as|we discussed|earlier you)\b",
    re.IGNORECASE,
)
_SMALL_TALK = re.compile(
    r"^\s*(?:hi|hello|hey|thanks?|thank you|ok(?:ay)?|cool|great|bye|good (?:morning|night)|你好|您好|谢谢|好的|嗯+|收到|再见|哈+)[\s!.。！~]*$",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class RouteContext:
    """Who speaks and for whom: ``agent`` is the sub-agent a handoff targets (None: supervisor)."""

    user_id: str
    role: Role = "user"
    agent: str | None = None


@dataclass(frozen=True)
class RouteDecision:
    should_read: bool
    should_write: bool
    read_namespaces: tuple[Namespace, ...]
    write_namespace: Namespace | None
    memory_type: str | None
    top_k: int
    reason: str
    extra: dict[str, Any] = field(default_factory=dict)


def agent_namespace(agent: str | None, user_id: str) -> Namespace:
    return (f"{agent or 'supervisor'}_memories", user_id)


SHARED_CONTEXT = "shared_context"


def shared_namespace(user_id: str) -> Namespace:
    """Where agents leave findings for each other (``memory.policy.findings``): shared per user."""
    return (SHARED_CONTEXT, user_id)


def read_namespaces(user_id: str, agent: str | None = None) -> tuple[Namespace, ...]:
    """Profile and facts always; the agent's own memories when a sub-agent is the target; the
    findings agents shared for this user (``shared_context/{user}``)."""
    ns: list[Namespace] = [("user_profile", user_id), ("domain_facts", user_id)]
    ns.append(agent_namespace(agent, user_id))
    ns.append(shared_namespace(user_id))
    return tuple(ns)


def route(message: str, ctx: RouteContext, *, default_top_k: int = 5) -> RouteDecision:
    """Decide read/write for one message. Pure; no I/O."""
    text = message.strip()
    reads = read_namespaces(ctx.user_id, ctx.agent)
    if not text or _SMALL_TALK.match(text):
        return RouteDecision(False, False, (), None, None, 0, "small talk or empty: nothing to read or write")

    reasons: list[str] = []
    cross = bool(_CROSS_SESSION.search(text))
    top_k = default_top_k * 2 if cross else default_top_k
    if cross:
        reasons.append("refers to an earlier session: read profile + facts wider")

    mtype: str | None = None
    write_ns: Namespace | None = None
    if ctx.role == "user":
        if _FACT.search(text):
            mtype, write_ns = "domain_facts", ("domain_facts", ctx.user_id)
            reasons.append("states a definition/alias")
        elif _PREF.search(text):
            mtype, write_ns = "user_profile", ("user_profile", ctx.user_id)
            reasons.append("states a preference or standing instruction")
    else:
        if _SQL.search(text) or _PATH.search(text):
            mtype, write_ns = "tool_effects", agent_namespace(ctx.agent, ctx.user_id)
            reasons.append("SQL or a generated file path")
        elif _CONCLUSION.search(text) or (ctx.role == "agent" and len(text) >= 40):
            mtype, write_ns = "task_traces", agent_namespace(ctx.agent, ctx.user_id)
            reasons.append("a task conclusion")
    # Agents' own outputs are written, not searched with; user messages and handoffs read.
    should_read = ctx.role == "user" or ctx.agent is not None
    if not reasons:
        reasons.append("task message: read context, nothing durable to write")
    return RouteDecision(
        should_read=should_read,
        should_write=write_ns is not None,
        read_namespaces=reads if should_read else (),
        write_namespace=write_ns,
        memory_type=mtype,
        top_k=top_k if should_read else 0,
        reason="; ".join(reasons),
        extra={"cross_session": cross},
    )


class LLMRouter:
    """Route with a chat model (structured output), falling back to :func:`route` on any failure."""

    def __init__(self, model: Any, *, default_top_k: int = 5):
        self.model = model
        self.default_top_k = default_top_k

    def __call__(self, message: str, ctx: RouteContext) -> RouteDecision:
        base = route(message, ctx, default_top_k=self.default_top_k)
        try:
            from pydantic import BaseModel

            class _Out(BaseModel):
                should_read: bool
                should_write: bool
                memory_type: Literal["user_profile", "domain_facts", "task_traces", "tool_effects", "none"]
                reason: str

            prompt = (
                "Decide whether this message should be stored in long-term memory and whether memory "
                "should be searched before answering. Types: user_profile (preferences, standing "
                "instructions), domain_facts (definitions, aliases), task_traces (conclusions), "
                f"tool_effects (SQL, file paths), none.\nRole: {ctx.role}\nMessage: {message}"
            )
            out = self.model.with_structured_output(_Out).invoke(prompt)
            mtype = None if out.memory_type == "none" or not out.should_write else out.memory_type
            write_ns: Namespace | None = None
            if mtype in ("user_profile", "domain_facts"):
                write_ns = (mtype, ctx.user_id)
            elif mtype is not None:
                write_ns = agent_namespace(ctx.agent, ctx.user_id)
            return RouteDecision(
                should_read=out.should_read,
                should_write=write_ns is not None,
                read_namespaces=base.read_namespaces or read_namespaces(ctx.user_id, ctx.agent)
                if out.should_read else (),
                write_namespace=write_ns,
                memory_type=mtype,
                top_k=base.top_k or self.default_top_k if out.should_read else 0,
                reason=f"llm: {out.reason}",
            )
        except Exception as exc:  # any model failure: the rules still answer
            return RouteDecision(**{**base.__dict__, "reason": f"{base.reason} (llm router failed: {exc!s:.80})"})


# ---------------------------------------------------------------------- memory the user steers
# Requests about memory itself, recognised in zh and en without a model: what the Supervisor
# remembers about the user, forget that, correct that, remember for the whole team, undo a forget.
_STEER: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("recall_me", re.compile(
        r"\bwhat (?:do|did|else do) you (?:remember|know|recall|have stored) about me\b"
        r"|\bwhat have you (?:remembered|stored|saved|memori[sz]ed) about me\b|\bwhat do you have on me\b"
        r"|\bshow (?:me )?(?:my memories|what you remember)"
        r"|你(?:都|还)?(?:记得|记住了|记着|知道|存了)(?:些)?(?:关于)?我(?:的)?(?:什么|哪些|些什么|啥)"
        r"|关于我你(?:都)?(?:记得|记住了|知道|存了)(?:什么|哪些|些什么|啥)|你记了我(?:哪些|什么)", re.I)),
    ("team", re.compile(
        r"\bremember (?:this|that|it)? ?for (?:the whole|the entire|all the|all of the|our|the) team\b"
        r"[\s,:;.!-]*(?P<x>.*)"
        r"|\b(?:let|tell) (?:the whole team|everyone on the team|all the agents|the whole team know)\b"
        r"[\s,:;.!-]*(?P<y>.*)"
        r"|(?:记住(?:这个|这条|这点|以下)?[，,\s]*)?(?:让|给)?(?:整个|全)(?:团队|组|队)(?:的人)?(?:都)?(?:要)?(?:记住|知道)"
        r"(?:这个|这条|这点)?[：:，,。\s]*(?P<z>.*)", re.I | re.S)),
    ("restore", re.compile(
        r"\b(?:undo (?:that|it|the (?:forget|deletion))|restore (?:that|it|what you (?:just )?forgot)"
        r"|bring (?:it|that) back)\b|恢复(?:刚才|那条|它|刚刚)|撤销(?:刚才|刚刚)|撤回(?:刚才|刚刚)", re.I)),
    ("correct", re.compile(
        r"\b(?:that's|that is|this is|it's|you're|you are) (?:wrong|not right|incorrect|mistaken)\b"
        r"[\s,.;:!-]*(?:(?:it|this|that) (?:is|should be)|actually,?|instead,?|rather,?)?\s*(?P<x>.*)"
        r"|\bcorrection:\s*(?P<y>.+)"
        r"|(?:^|[，,。\s])(?:不对|错了|搞错了|说错了|记错了|不是这样的?)(?=[，,。！!：:\s]|$|应该|其实)"
        r"[，,。！!：:\s]*(?:应该是|应该|其实是|实际上是|是|改成|改为)?\s*(?P<z>.*)"
        r"|更正[：:]\s*(?P<w>.+)", re.I | re.S)),
    ("forget", re.compile(
        r"\b(?:please\s+)?(?:forget|stop remembering|erase|delete) (?:that|this|it|what i (?:just )?said)\b"
        r"(?: memory)?[\s,:;.!-]*(?P<x>.*)"
        r"|(?:(?<![别不要能])(?:忘掉|忘记|忘了)(?=这|那|刚才|吧|它|我)|(?:别记住?|不要记住?|删掉|删除)(?=这|那|刚才|了))"
        r"(?:这条|那条|这个|那个|刚才(?:那条|说的|的)?|吧|它|了)?(?:记忆)?[，,：:\s]*(?P<y>.*)", re.I | re.S)),
)
_TRIM = re.compile(r"^[\s，,。.：:;；!！-]+|[\s，,。.：:;；!！]+$")


@dataclass(frozen=True)
class SteerIntent:
    """A request about memory itself: ``kind`` and the text it carries (the correction, the fact
    for the team, what to forget), empty when the message only points back ("forget that")."""

    kind: Literal["recall_me", "team", "restore", "correct", "forget"]
    text: str = ""


def steer_intent(message: str) -> SteerIntent | None:
    """Recognise a memory-steering request in zh or en. Pure."""
    text = message.strip()
    if not text:
        return None
    for kind, rx in _STEER:
        m = rx.search(text)
        if m is None:
            continue
        carried = next((v for v in m.groupdict().values() if v), "")
        return SteerIntent(kind, _TRIM.sub("", carried))  # type: ignore[arg-type]
    return None
