"""MEMORY.md export → hand edits → import through the write policy (audited), daily notes, and
files a person edited never overwritten. Real SQLite file, real packaged model."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from memory.errors import InvalidInput
from memory.markdown_io import (
    apply_import,
    parse_memory_md,
    plan_import,
    render_daily_notes,
    render_memory_md,
    touched_since,
    write_guarded,
)
from memory.policy.manager import MemoryManager
from memory.settings import MemorySettings

T0 = datetime(2025, 1, 7, 9, 0, tzinfo=UTC)


@pytest.fixture
def mm(tmp_path, embedder):
    m = MemoryManager.from_settings(MemorySettings(path=str(tmp_path / "memory.sqlite")), embedder=embedder)
    yield m
    m.close()


@pytest.fixture
def seeded(mm):
    ids = {
        "unit": mm.remember("以后报表金额都用万元为单位", "user_profile/u1", now=T0).id,
        "chart": mm.remember("The user prefers bar charts over pie charts", "user_profile/u1", now=T0).id,
        "city": mm.remember("User lives in Hangzhou\nand works in Shanghai on Mondays", "user_profile/u1", now=T0).id,
        "other": mm.remember("User u12 prefers line charts", "user_profile/u12", now=T0).id,
    }
    return ids


def _export(mm, ns="user_profile/u1", now=None):
    return render_memory_md(mm.service.list(ns, limit=1000), ns, now=now or T0 + timedelta(hours=1))


def _import(mm, text, ns=None):
    parsed = parse_memory_md(text, ns)
    plan = plan_import(parsed, mm.service.list(parsed.namespace, limit=1000),
                       touched_since(mm.audit, parsed.namespace, parsed.exported_at))
    return plan, apply_import(mm, plan, source_name="MEMORY.md")


def test_export_is_readable_markdown_with_ids_and_dates(mm, seeded):
    text = _export(mm)
    assert text.startswith("<!-- memctl:export namespace=user_profile/u1 ")
    assert "# Memory · user_profile/u1" in text and "\n## user_profile\n" in text
    assert f"- 以后报表金额都用万元为单位 · 2025-01-07 · `{seeded['unit']}`" in text
    assert "- User lives in Hangzhou\n  and works in Shanghai on Mondays · 2025-01-07 · " in text  # one bullet
    assert seeded["other"] not in text and "u12" not in text  # label boundaries: u1 is not u12
    parsed = parse_memory_md(text)
    assert {b.id: b.content for b in parsed.bullets} == {
        r.id: r.content for r in mm.service.list("user_profile/u1", limit=100)}
    plan = plan_import(parsed, mm.service.list("user_profile/u1", limit=100))
    assert (plan.unchanged, plan.add, plan.update, plan.remove, plan.conflicts) == (3, [], [], [], [])


def test_edit_add_delete_then_import_goes_through_the_policy_with_audit(mm, seeded):
    text = _export(mm)
    text = text.replace("The user prefers bar charts over pie charts", "The user prefers stacked bar charts")
    text = re.sub(r"- User lives in Hangzhou\n.*\n", "", text)  # delete a bullet (both of its lines)
    text = text.replace("## user_profile\n", "## user_profile\n\n- Answer in English by default\n"
                        "- 以后报表金额都用万元为单位\n")  # a new bullet, and one restating a stored memory
    plan, res = _import(mm, text)
    assert res.updated == [seeded["chart"]] and res.removed == [seeded["city"]] and not res.conflicts
    assert sorted(a["status"] for a in res.added) == ["added", "skipped"]  # the restatement merged (same words)
    cur = {r.content for r in mm.service.list("user_profile/u1", limit=100)}
    assert cur == {"以后报表金额都用万元为单位", "The user prefers stacked bar charts", "Answer in English by default"}
    # audited, and the removed memory is restorable
    actions = {(e.action, e.memory_id) for e in mm.audit.events(namespace=("user_profile", "u1"), limit=50)
               if e.actor == "memctl:import"}
    assert {("update", seeded["chart"]), ("delete", seeded["city"]), ("import", None)} <= actions
    hist = mm.audit.history(seeded["chart"])
    assert hist[-1].before["content"] == "The user prefers bar charts over pie charts"
    assert mm.restore(seeded["city"]).content.startswith("User lives in Hangzhou")
    assert mm.service.count("user_profile/u12") == 1  # another user's memory untouched
    # importing the same file again changes nothing: the edits are in the store now, and the
    # restored memory came back after the export, so the stale file does not delete it again
    _, again = _import(mm, text)
    assert (again.updated, again.removed) == ([], []) and {a["status"] for a in again.added} == {"skipped"}


def test_changes_made_after_the_export_win_over_the_file(mm, seeded):
    text = _export(mm)
    later = T0 + timedelta(days=1)
    mm.update(seeded["chart"], "The user prefers line charts now", now=later)  # changed after the export
    new = mm.remember("User prefers dark mode dashboards", "user_profile/u1", now=later).id  # not in the file
    mm.delete([seeded["unit"]], now=later)
    edited = text.replace("The user prefers bar charts over pie charts", "The user prefers donut charts")
    plan, res = _import(mm, edited)
    assert len(res.conflicts) == 2 and res.updated == [] and res.removed == []
    assert any("changed in the store after the export" in c for c in res.conflicts)
    assert any("no longer in" in c for c in res.conflicts)  # the deleted one is not resurrected
    assert mm.service.get(seeded["chart"]).content == "The user prefers line charts now"
    assert mm.service.get(new)  # written after the export: not deleted for missing from the file


def test_bad_files_import_nothing(mm, seeded):
    text = _export(mm)
    n = mm.service.count("user_profile/u1")
    bullet = next(line for line in text.splitlines() if line.startswith("- ") and line.endswith("`"))
    cases = {
        "same id": text.replace(bullet, bullet + "\n" + bullet),
        "before any": text.replace("# Memory", "- orphan bullet\n\n# Memory"),
        "not under": text.replace("## user_profile\n", "## user_profile\n\n### user_profile/u12\n\n- x\n"),
    }
    for why, bad in cases.items():
        with pytest.raises(InvalidInput, match=why):
            parse_memory_md(bad)
    with pytest.raises(InvalidInput, match="--ns"):
        parse_memory_md("## note\n\n- a fact without a header\n")
    with pytest.raises(InvalidInput, match="exported from"):
        parse_memory_md(text, "user_profile/u12")
    assert mm.service.count("user_profile/u1") == n
    # a hand-written file needs --ns; without an export time nothing is deleted
    plan, res = _import(mm, "## user_profile\n\n- Prefers Monday reports\n", "user_profile/u1")
    assert [a["status"] for a in res.added] == ["added"] and res.removed == []


def test_daily_notes_and_guarded_writes(mm, seeded, tmp_path):
    mm.remember("Prefers weekly summaries on Friday", "user_profile/u1", now=T0 + timedelta(days=1))
    days = render_daily_notes(mm.audit.events(limit=1000))
    assert sorted(days) == ["2025-01-07", "2025-01-08"]
    assert "## user_profile/u12" in days["2025-01-07"] and "Prefers weekly summaries" in days["2025-01-08"]
    assert re.search(r"- 09:00 add: 以后报表金额都用万元为单位 · `\w+`", days["2025-01-07"])
    f = tmp_path / "out" / "2025-01-07.md"
    assert write_guarded(f, days["2025-01-07"]) == "written"
    assert write_guarded(f, days["2025-01-07"]) == "unchanged"
    regenerated = days["2025-01-07"].replace("09:00", "09:01")
    assert write_guarded(f, regenerated) == "written"  # ours and unedited: regenerated freely
    f.write_text(f.read_text(encoding="utf-8") + "\nmy own note\n", encoding="utf-8")
    assert write_guarded(f, days["2025-01-07"]) == "edited" and "my own note" in f.read_text(encoding="utf-8")
    assert write_guarded(f, days["2025-01-07"], force=True) == "written"
    mine = tmp_path / "MEMORY.md"
    mine.write_text("hand written\n", encoding="utf-8")
    assert write_guarded(mine, _export(mm)) == "edited" and mine.read_text(encoding="utf-8") == "hand written\n"
