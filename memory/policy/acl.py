"""Who may read and write which namespace: the access rules, as pure functions (no I/O).

A namespace's *kind* is its first label. Each kind has a rule naming the principals that may
read and write it; the defaults (``configs/default.yaml``, ``acl:``)::

    kind                         read            write           meaning
    {agent}_memories/{user}      owner           owner           private to one agent (its pre/post nodes)
    user_profile/{user}          *               *               shared by every agent of the user
    domain_facts/{user}          *               *
    shared_context/{user}        *               *               findings one agent leaves for the next
    docs/...                     *               (operators)     global, read-only for agents

Principals come from :class:`memory.policy.manager.Actor`'s ``agent`` label:

* ``None`` or a label starting with one of ``operators`` (``memctl``, ``mcp``, ``operator``) —
  the library's caller, the CLI, maintenance: an *operator*, never restricted (the data's owner
  needs to list, fix and forget everything).
* ``supervisor:<step>:<agent>`` (the memory nodes acting for a sub-agent) and ``agent:<agent>`` —
  the sub-agent ``<agent>``.
* ``supervisor`` / ``supervisor:<step>`` — the Supervisor itself (owner of ``supervisor_memories``).
* any other label — that label (e.g. the ``agent=`` of a middleware).

A rule entry is ``*`` (any principal), ``owner`` (the agent a ``{agent}_memories`` kind names) or
a principal's name. Kinds no rule names follow ``unlisted`` (``allow``: LangGraph store users
put arbitrary namespaces).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from memory.namespace import Namespace

Op = Literal["read", "write"]
OPERATOR = "operator"
OWNER = "owner"
ANY = "*"
PRIVATE_TEMPLATE = "{agent}_memories"


@dataclass(frozen=True)
class KindRule:
    """Principals allowed to read and to write one namespace kind."""

    read: tuple[str, ...] = (ANY,)
    write: tuple[str, ...] = (ANY,)


def _default_rules() -> dict[str, KindRule]:
    shared = KindRule((ANY,), (ANY,))
    return {PRIVATE_TEMPLATE: KindRule((OWNER,), (OWNER,)), "user_profile": shared, "domain_facts": shared,
            "shared_context": shared, "docs": KindRule((ANY,), ())}


@dataclass(frozen=True)
class AccessPolicy:
    enabled: bool = True
    rules: Mapping[str, KindRule] = field(default_factory=_default_rules)
    unlisted: Literal["allow", "deny"] = "allow"
    operators: tuple[str, ...] = ("memctl", "mcp", OPERATOR)


@dataclass(frozen=True)
class Decision:
    allowed: bool
    principal: str
    namespace: Namespace
    op: Op
    reason: str


def principal(actor_agent: str | None, operators: Sequence[str] = AccessPolicy.operators) -> str:
    """The principal an actor label stands for (see the module docstring)."""
    if actor_agent is None or not actor_agent.strip():
        return OPERATOR
    label = actor_agent.strip()
    head = label.split(":", 1)[0]
    if head in operators:
        return OPERATOR
    parts = label.split(":")
    if parts[0] == "supervisor":
        return parts[2] if len(parts) >= 3 and parts[2] else "supervisor"
    if parts[0] == "agent" and len(parts) >= 2 and parts[1]:
        return parts[1]
    return label


def kind_rule(policy: AccessPolicy, ns: Namespace) -> tuple[str | None, str | None]:
    """(rule key, owner) for a namespace: the kind's own rule, or the private template's with
    the agent it names as owner; (None, None) when no rule names the kind."""
    kind = ns[0] if ns else ""
    if kind in policy.rules:
        return kind, None
    if PRIVATE_TEMPLATE in policy.rules and kind.endswith("_memories") and len(kind) > len("_memories"):
        return PRIVATE_TEMPLATE, kind[: -len("_memories")]
    return None, None


def decide(policy: AccessPolicy, who: str, op: Op, ns: Namespace) -> Decision:
    """May principal ``who`` do ``op`` on namespace ``ns`` (or on everything under it, for a prefix)?"""
    if not policy.enabled:
        return Decision(True, who, ns, op, "access control disabled")
    if who == OPERATOR:
        return Decision(True, who, ns, op, "operators are not restricted")
    if not ns:
        # An empty prefix covers every kind, private ones included.
        return Decision(False, who, ns, op, "an empty namespace prefix covers other agents' private memory; "
                                            "name the namespaces to " + op)
    key, owner = kind_rule(policy, ns)
    if key is None:
        ok = policy.unlisted == "allow"
        return Decision(ok, who, ns, op, f"kind {ns[0]!r} has no rule: unlisted={policy.unlisted}")
    rule = policy.rules[key]
    allowed = rule.read if op == "read" else rule.write
    if ANY in allowed or who in allowed or (OWNER in allowed and owner is not None and owner == who):
        return Decision(True, who, ns, op, f"{key}: {op} allowed to {who}")
    if owner is not None and OWNER in allowed:
        why = f"{'/'.join(ns)} is private to agent {owner!r}; {who!r} may not {op} it"
    elif not allowed:
        why = f"{ns[0]} is read-only for agents; only operators (memctl, the library's caller) may write it"
    else:
        why = f"{ns[0]}: {op} is allowed to {', '.join(allowed)}, not to {who!r}"
    return Decision(False, who, ns, op, why)


def check_all(policy: AccessPolicy, who: str, op: Op, namespaces: Iterable[Namespace]) -> list[Decision]:
    """The denied decisions among ``namespaces`` (empty list: all allowed)."""
    return [d for d in (decide(policy, who, op, ns) for ns in namespaces) if not d.allowed]


def readable(policy: AccessPolicy, who: str, ns: Namespace) -> bool:
    return decide(policy, who, "read", ns).allowed


__all__ = ["ANY", "OPERATOR", "OWNER", "PRIVATE_TEMPLATE", "AccessPolicy", "Decision", "KindRule", "check_all",
           "decide", "kind_rule", "principal", "readable"]
