"""User ids → namespace labels: injective, valid, no shared anonymous label (memory.policy.identity)."""

from __future__ import annotations

import pytest

from memory.namespace import parse_namespace
from memory.policy.identity import HASH_MARK, scope_label, thread_label, user_label
from memory.policy.tools import user_id_from_config
from memory.store_items import encode_label
from supervisor.context import resolve_user_id

TRICKY = ["team/alice", "team_alice", "team%2Falice", "team%252Falice", "team\\alice", "alice", " alice", "alice ",
          "alice\n", "a\u200bb", "ab", "50%", "50%25", "anonymous", "%~thread-x", "用户/张三", "用户_张三", "%", "%%",
          "x" * 128, "x" * 129, "x" * 300, "x" * 299 + "y", "/" * 60, "/" * 61, "%2F" * 50, "a" * 127 + "/"]


def test_labels_are_injective_and_valid():
    labels = [user_label(u) for u in TRICKY]
    assert len(set(labels)) == len(TRICKY), "two user ids share a label"
    for u, lab in zip(TRICKY, labels, strict=True):
        assert parse_namespace(("user_profile", lab)) == ("user_profile", lab)  # a valid label, <= 128 chars
        assert len(lab) <= 128, u


def test_escape_not_replace_and_same_as_the_store_adapter():
    assert user_label("team/alice") == "team%2Falice" != user_label("team_alice") == "team_alice"
    for u in TRICKY:
        if len(encode_label(u)) <= 128 and "%~" not in u:
            assert user_label(u) == encode_label(u), u  # one label for a user in the graph and in the store
    assert user_label("u1") == "u1" and user_label("张三") == "张三"  # plain ids unchanged


def test_long_ids_do_not_collide_on_truncation():
    a, b = "org:" + "x" * 200 + ":alice", "org:" + "x" * 200 + ":bob"
    assert user_label(a) != user_label(b) and HASH_MARK in user_label(a) and len(user_label(a)) == 128
    assert user_label(a) == user_label(a)  # stable across calls (and processes: sha256)
    # an id crafted to look like a's hashed label is escaped, not taken for it
    assert user_label(user_label(a)) != user_label(a) and user_label("x%~y") == "x%25~y"


def test_no_shared_anonymous_label():
    t1, t2 = scope_label(None, "thread-1"), scope_label("", "thread-2")
    assert t1 and t2 and t1 != t2 and t1 == thread_label("thread-1")
    assert scope_label("  ", "t", "off") is None and scope_label(None, None) is None  # no thread: off
    assert all(user_label(u) != t1 for u in TRICKY + ["%~thread-" + t1[9:]])  # no user id maps to a thread label
    with pytest.raises(ValueError, match="policy.anonymous"):
        scope_label(None, "t", "shared")


def test_supervisor_and_tools_resolve_the_same_label():
    cfg = {"configurable": {"user_id": "team/alice", "thread_id": "t"}}
    assert resolve_user_id(None, cfg) == user_id_from_config(cfg) == "team%2Falice"
    assert resolve_user_id({"user_id": "team_alice"}, cfg) == "team_alice"  # context wins over configurable
    anon = {"configurable": {"thread_id": "t9"}}
    assert resolve_user_id(None, anon) == user_id_from_config(anon) == thread_label("t9")
    assert resolve_user_id(None, anon, "off") is None and user_id_from_config(anon, "off") is None


def test_docstring_examples_run():
    import doctest

    import memory.policy.identity

    result = doctest.testmod(memory.policy.identity)
    assert result.attempted > 0 and result.failed == 0
