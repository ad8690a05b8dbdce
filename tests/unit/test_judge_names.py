"""Names as values for the write-path judge (memory.policy.names), the static view
(memory.policy.static_view), and the Chinese subject / value split's verb fallback."""

from __future__ import annotations

import numpy as np

from memory.policy.judge import FEATURES, PairJudge
from memory.policy.names import mask_names, name_features, names
from memory.policy.reading import read
from memory.policy.static_view import StaticView


def keys(text: str) -> list[str]:
    return [n.key for n in names(text)]


def test_names_are_found_without_a_list():
    assert keys("Tableau admin: Kevin (BI team)") == ["kevin", "bi"]
    assert "priya nair" in keys("星河零售的客户经理是 Priya Nair。")  # a Latin name inside Chinese text
    assert "张磊" in keys("安全事件联系人：信息安全部张磊。")  # jieba tags it a person's name
    assert "greenfield co" in keys("Greenfield Co. is managed out of the Singapore office.")
    # One ordinary word that starts a sentence is not a name; a run of capitalised words is.
    assert keys("Laptops auto-lock after 5 minutes idle.") == []


def test_a_new_name_after_the_predicate_reads_as_a_new_value():
    # The slot (admin of Tableau) stays, the name after the predicate changes: an update's shape.
    f = name_features("Billing disputes escalate to Hannah in Finance Ops.", "Billing disputes go to Rohan now.")
    assert f["nm_un_rest_both"] == 1 and f["nm_un_subj"] == 0
    # Names that differ before the predicate: another entity.
    f = name_features("Greenfield Co. is managed out of the Singapore office.",
                      "Bluewave Ltd. is managed out of the Singapore office.")
    assert f["nm_un_subj"] == 1 and f["nm_matched"] == 1
    # The same names: nothing unmatched.
    f = name_features("Priya Nair is the account manager for Xinghe Retail.", "星河零售的客户经理是 Priya Nair。")
    assert f["nm_un_b"] == 0 and f["nm_matched"] >= 1


def test_masking_names_leaves_the_slot():
    a, b = mask_names("Tableau admin: Kevin (BI team)"), mask_names("Tableau admin: Sunita (BI team)")
    assert a == b and "kevin" not in a
    # Whole words only: a short name does not eat into other words.
    assert "comes" in mask_names("Greenfield Co comes first, says Co.")


def test_chinese_split_falls_back_to_the_first_verb():
    r = read("报销问题找财务 Lily，#finance-help")  # no listed predicate
    assert r.subject == "报销问题" and r.rest.startswith("找")
    r = read("用户的直属上级是 Lisa。")  # a listed one still wins
    assert r.subject == "用户的直属上级"


def test_static_view_caches_per_text():
    v = StaticView()
    same = v.cosine("Exports should be CSV files.", "Exports should be CSV files.")
    assert same > 0.999
    assert v.cosine("Standup is at 9:15.", "Quarterly revenue is in USD.") < same
    cached = v.vectors(["Exports should be CSV files."])[0]
    v._model = None  # a miss would now fail; a hit must not load anything
    assert v.vectors(["Exports should be CSV files."])[0] is cached


def test_the_judge_reads_names_and_the_static_view():
    j = PairJudge()
    f = j.features("Tableau admin: Kevin (BI team)", "Tableau admin: Sunita (BI team)")
    assert {"nm_un_rest_both", "cos_wl", "cos_wl_masked", "cos_wl_nmask"} <= set(FEATURES)
    assert f["nm_un_rest_both"] == 1 and f["cos_wl_nmask"] > 0.999  # names masked, the two texts are one slot
    assert f["cos_wl_nmask"] > f["cos_wl"] and 0 < f["cos_wl"] < 1 and np.isfinite(f["cos_wl_masked"])
