"""Who a memory belongs to: user ids as namespace labels, and callers without a user id.

Pure functions, no I/O. Two rules keep users apart by construction:

* **Injective labels.** A user id becomes one namespace label by percent-escaping what a label
  may not hold ('/', '\\', control and invisible characters, surrounding whitespace) and every
  '%' that could be read as an escape — escaping, never replacing, so ``"team/alice"``
  (``team%2Falice``) and ``"team_alice"`` stay two users. The escaping is the LangGraph store
  adapter's (:func:`memory.store_items.encode_label`), so a Supervisor user and a store
  namespace label name the same thing. An id longer than a label may be (128 characters after
  escaping) keeps a readable prefix and ends with ``%~`` and the SHA-256 of the whole id:
  a ``%`` followed by ``~`` in a user id is escaped (``%25~``; the one place where this differs
  from the store adapter's escaping), so no escaped id contains ``%~``, no id can pose as a
  hashed or thread label, and two long ids sharing a prefix do not collide.
* **No shared anonymous namespace.** Without a user id, memory is scoped to the conversation
  thread (``policy.anonymous: thread``, label ``%~thread-<sha256 of the thread id>``, which no
  real user id can produce) or off (``policy.anonymous: off``); with no thread id either,
  memory is off for that run. Two anonymous callers never read each other's memory.
"""

from __future__ import annotations

import hashlib
import unicodedata
from typing import Literal

from memory.errors import InvalidInput  # the error tree only: no other memory module

AnonymousMode = Literal["thread", "off"]
ANONYMOUS_MODES: tuple[str, ...] = ("thread", "off")
MAX_LABEL_CHARS = 128  # memory.namespace.MAX_LABEL_CHARS (kept literal: this module stays import-free)
HASH_MARK = "%~"       # never produced by escaping (which writes '%' + two hex digits)
THREAD_PREFIX = HASH_MARK + "thread-"
_HEX = "0123456789abcdefABCDEF"


def _needs_escape(label: str, i: int, ch: str) -> bool:
    # memory.store_items._needs_escape's rule (a test keeps them equal), plus '%~'.
    if ch in "/\\" or unicodedata.category(ch) in {"Cc", "Cs", "Cf", "Zl", "Zp"}:
        return True
    if ch.isspace() and (not label[:i].strip() or not label[i + 1:].strip()):
        return True
    if ch == "%" and label[i + 1:i + 2] == "~":
        return True  # only this module writes '%~' (hashed and thread labels); see the module docstring
    return ch == "%" and len(label) > i + 2 and label[i + 1] in _HEX and label[i + 2] in _HEX


def _escape(text: str) -> str:
    return "".join("".join(f"%{b:02X}" for b in ch.encode("utf-8", "surrogatepass"))
                   if _needs_escape(text, i, ch) else ch for i, ch in enumerate(text))


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def user_label(user_id: str) -> str:
    """The namespace label of a user id: injective, valid, at most 128 characters.

    Raises:
        ValueError: for an empty id (the caller decides what "no user" means, see
            :func:`scope_label`).

    Example:
        >>> user_label("team/alice"), user_label("team_alice"), user_label("u1")
        ('team%2Falice', 'team_alice', 'u1')
        >>> len(user_label("x" * 300)), user_label("x" * 300) == user_label("x" * 299 + "y")
        (128, False)
    """
    if not isinstance(user_id, str) or not user_id:
        raise ValueError("user id must be a non-empty string")
    label = _escape(user_id)
    if len(label) <= MAX_LABEL_CHARS:
        return label
    keep = MAX_LABEL_CHARS - len(HASH_MARK) - 64
    head = label[:keep]
    cut = head.rfind("%", max(0, keep - 2))  # never end the prefix inside a '%XX' escape
    if cut != -1:
        head = head[:cut]
    return f"{head}{HASH_MARK}{_digest(user_id)}"


def thread_label(thread_id: str) -> str:
    """The label of an anonymous caller's thread: no user id can map to it."""
    return f"{THREAD_PREFIX}{_digest(str(thread_id))[:40]}"


def check_user_id(user_id: object) -> None:
    """Refuse a user id that is neither text nor an integer (None passes: no user).

    str() of a dict / bytes / float made a user of its repr: b"u1" became "b'u1'", another person
    than "u1". The graph's memory nodes turn memory off for the run and say why.

    Raises:
        InvalidInput: naming the type and what to pass.
    """
    if user_id is not None and (isinstance(user_id, bool) or not isinstance(user_id, str | int)):
        raise InvalidInput(f"user id must be a string or an integer, got {type(user_id).__name__} "
                           f"{user_id!r:.40}; pass context.user_id / configurable.user_id as text "
                           "(memory is off for this run)")


def scope_label(user_id: object, thread_id: object, anonymous: str = "thread") -> str | None:
    """The label memory is read and written under, or None when memory is off for this caller.

    ``user_id`` None or blank means "no user": per-thread memory (``anonymous="thread"``, needs a
    thread id) or none (``"off"``).

    Raises:
        InvalidInput: ``user_id`` is neither text nor an integer (a dict, bytes, a float, a bool).
    """
    if anonymous not in ANONYMOUS_MODES:
        raise ValueError(f"policy.anonymous must be one of {ANONYMOUS_MODES}, got {anonymous!r}")
    check_user_id(user_id)
    uid = "" if user_id is None else str(user_id)
    if uid.strip():
        return user_label(uid)
    if anonymous == "thread" and thread_id is not None and str(thread_id).strip():
        return thread_label(str(thread_id))
    return None


def is_anonymous_label(label: str) -> bool:
    return label.startswith(THREAD_PREFIX)


__all__ = ["ANONYMOUS_MODES", "AnonymousMode", "check_user_id", "is_anonymous_label", "scope_label", "thread_label", "user_label"]
