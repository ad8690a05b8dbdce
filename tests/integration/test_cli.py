"""``memctl`` end to end: the real console script in subprocesses, a real SQLite file, the real model.

Every subprocess imports the package and loads the packaged model (a few seconds each), so the
commands of one scenario run concurrently where they are independent, and the whole file starts
about twenty of them. Stores are seeded in-process through the library where the seeding is not
what is under test.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from memory.service import MemoryService
from memory.settings import EmbeddingSettings, MemorySettings

ROOT = Path(__file__).resolve().parents[2]
ZH_EN = ROOT / "tests" / "data" / "zh_en"
_SCRIPT = Path(sys.executable).parent / "memctl"
MEMCTL: list[str] = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "memctl.cli"]
SCORE_KEYS = {"sim", "vector", "keyword", "decay", "boost", "score", "query"}
CHART = "用户偏好柱状图"
CHART_QUERY = "which chart type does the user like?"


# ---------------------------------------------------------------------------- harness
@dataclass
class Run:
    cmd: list[str]
    code: int
    out: str
    err: str

    def json(self) -> Any:
        try:
            return json.loads(self.out)
        except json.JSONDecodeError as exc:  # pragma: no cover - shows the output on failure
            raise AssertionError(f"{self.cmd} did not print one JSON document: {exc}\n{self.out}\n{self.err}")

    def __str__(self) -> str:
        return f"$ {' '.join(self.cmd)}\nexit {self.code}\n--- stdout\n{self.out}\n--- stderr\n{self.err}"


_PYCACHE: dict[str, str] = {}


@pytest.fixture(scope="module", autouse=True)
def _bytecode_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Let the subprocesses share compiled bytecode in a private temp dir (PYTHONPYCACHEPREFIX).

    Without it every memctl run recompiles its imports from source (about 2 s of CPU each when
    PYTHONDONTWRITEBYTECODE is set); nothing is written next to the sources.
    """
    _PYCACHE["dir"] = str(tmp_path_factory.mktemp("pycache"))


def cli_env(store: Path, *, offline_flag: bool = True) -> dict[str, str]:
    # A plain, non-terminal environment: no inherited width or colour settings.
    drop = {"COLUMNS", "LINES", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "PYTHONDONTWRITEBYTECODE"}
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_") and k not in drop}
    if "dir" in _PYCACHE:
        env["PYTHONPYCACHEPREFIX"] = _PYCACHE["dir"]
    else:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["MEMORY_PATH"] = str(store)
    if offline_flag:
        env["HF_HUB_OFFLINE"] = "1"
    else:
        env.pop("HF_HUB_OFFLINE", None)
    return env


def memctl(store: Path, *args: str, stdin: bytes | None = None, prefix: Sequence[str] = (),
           offline_flag: bool = True) -> Run:
    cmd = [*prefix, *MEMCTL, *args]
    p = subprocess.run(cmd, input=stdin if stdin is not None else b"", capture_output=True, timeout=300,
                       env=cli_env(store, offline_flag=offline_flag), cwd=ROOT)
    return Run(cmd, p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace"))


def memctl_many(store: Path, calls: dict[str, tuple[Sequence[str], bytes | None]]) -> dict[str, Run]:
    """Run independent commands concurrently (each one pays the model load)."""
    with ThreadPoolExecutor(max_workers=3) as pool:
        futures = {name: pool.submit(memctl, store, *args, stdin=stdin) for name, (args, stdin) in calls.items()}
        return {name: f.result() for name, f in futures.items()}


def assert_clean_error(r: Run, code: int = 2, *mentions: str) -> str:
    """Exit ``code``, exactly one non-empty stderr line starting with 'error:', no traceback."""
    assert r.code == code, str(r)
    assert "Traceback" not in r.err, str(r)
    lines = [ln for ln in r.err.splitlines() if ln.strip()]
    assert len(lines) == 1, f"expected a one-line error, got {len(lines)} lines:\n{r}"
    assert lines[0].startswith("error: "), str(r)
    for m in mentions:
        assert m in lines[0], f"{m!r} not in {lines[0]!r}"
    assert r.out == "", str(r)
    return lines[0]


def open_service(store: Path) -> MemoryService:
    return MemoryService.from_settings(MemorySettings(path=str(store)))


@pytest.fixture(autouse=True)
def _no_memory_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith("MEMORY_"):
            monkeypatch.delenv(key)


# ---------------------------------------------------------------------------- add/search/get/list/stats
@pytest.fixture(scope="module")
def populated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """u1 and u12 seeded in-process; two memories added through memctl; then search/get/list/stats."""
    store = tmp_path_factory.mktemp("cli") / "memory.sqlite"
    base = datetime.now(UTC) - timedelta(days=3)
    u1_texts = [
        "用户每天早上喝一杯美式咖啡",
        "The user lives in Shanghai and commutes by metro",
        "用户的周报每周五下午五点前提交",
        "User's favourite programming language is Python",
        "用户不喜欢开早会",
    ]
    with open_service(store) as svc:
        seeded = [svc.write(t, "u1", {"type": "user_profile"}, now=base + timedelta(hours=i))
                  for i, t in enumerate(u1_texts)]
        expired = svc.write("User used to like pie charts", "u1", {"type": "user_profile"}, ttl_days=1,
                            now=datetime.now(UTC) - timedelta(days=30))
        u12 = [svc.write("User u12 prefers pie charts", "u12", {"type": "user_profile"}, now=base),
               svc.write("u12 用户喜欢雷达图", "u12", {"type": "user_profile"}, now=base)]

    adds = memctl_many(store, {
        "add": (["add", CHART, "--ns", "u1", "--type", "user_profile", "--tag", "chart", "--tag", "preference",
                 "--json"], None),
        "stdin": (["add", "-", "--ns", "u1", "--json"], "用户的时区是北京时间 (UTC+8)\n".encode()),
    })
    for r in adds.values():
        assert r.code == 0, str(r)
    chart_id = adds["add"].json()["id"]
    reads = memctl_many(store, {
        "search": (["search", CHART_QUERY, "--ns", "u1", "--top-k", "10", "--json"], None),
        "get": (["get", chart_id, "--json"], None),
        "list": (["list", "--ns", "u1", "--json"], None),
        "stats": (["stats", "--json"], None),
    })
    return {"store": store, "seeded": seeded, "expired": expired, "u12": u12, **adds, **reads}


def test_add_with_type_tags_and_json(populated):
    r = populated["add"]
    assert r.code == 0, str(r)
    d = r.json()
    assert re.fullmatch(r"[0-9a-f]{32}", d["id"])
    assert d["namespace"] == "u1" and d["content"] == CHART
    assert d["metadata"]["type"] == "user_profile"
    assert d["metadata"]["tags"] == ["chart", "preference"]
    assert d["metadata"]["source"] == "cli"
    assert d["expires_at"] is None
    created = datetime.fromisoformat(d["created_at"])
    assert created.tzinfo is not None and abs(datetime.now(UTC) - created) < timedelta(minutes=10)
    # It really is in the file, not just echoed.
    with open_service(populated["store"]) as svc:
        rec = svc.get(d["id"])
    assert rec.content == CHART and rec.metadata.tags == ("chart", "preference")


def test_add_reads_stdin(populated):
    r = populated["stdin"]
    assert r.code == 0, str(r)
    d = r.json()
    assert d["content"] == "用户的时区是北京时间 (UTC+8)"  # decoded as UTF-8, trailing newline stripped
    assert d["namespace"] == "u1" and d["metadata"]["type"] == "note"
    with open_service(populated["store"]) as svc:
        assert svc.get(d["id"]).content == d["content"]
    # Text from stdin goes through the same write path as text given as an argument (no --raw given).
    assert d.get("reason") != "raw write", f"`add -` skipped the write policy as if --raw were given: {d}"


def test_get_json_matches_added_record(populated):
    r = populated["get"]
    assert r.code == 0, str(r)
    got, added = r.json(), populated["add"].json()
    assert set(got) >= {"id", "namespace", "content", "metadata", "created_at", "updated_at", "expires_at"}
    assert got == {k: added[k] for k in got}  # `add --json` may add status/reason on top of the record


def test_list_ns_json_is_newest_first_and_isolated(populated):
    r = populated["list"]
    assert r.code == 0, str(r)
    listed = r.json()
    ids = [d["id"] for d in listed]
    assert all(d["namespace"] == "u1" for d in listed), listed
    current = [(rec.id, rec.updated_at) for rec in populated["seeded"]]
    for name in ("add", "stdin"):
        d = populated[name].json()
        current.append((d["id"], datetime.fromisoformat(d["updated_at"])))
    expected = [i for i, _ in sorted(current, key=lambda x: x[1], reverse=True)]
    assert ids == expected
    stamps = [datetime.fromisoformat(d["updated_at"]) for d in listed]
    assert stamps == sorted(stamps, reverse=True)
    assert populated["expired"].id not in ids  # expired: not current
    assert not {rec.id for rec in populated["u12"]} & set(ids)  # u12 is not under u1


def test_search_json_breakdown(populated):
    r = populated["search"]
    assert r.code == 0, str(r)
    hits = r.json()
    assert isinstance(hits, list) and hits
    for h in hits:
        assert set(h["score"]) == SCORE_KEYS, h["score"]
        b = h["score"]
        assert all(isinstance(b[k], float) for k in SCORE_KEYS)
        assert 0.0 <= b["sim"] <= 1.0 and 0.0 <= b["decay"] <= 1.0 and 0.0 <= b["boost"] <= 1.0
        # Default weights: S = 1.0*sim + 0.05*decay + 0.05*boost + query (the question's own bonus).
        assert b["score"] == pytest.approx(b["sim"] + 0.05 * b["decay"] + 0.05 * b["boost"] + b["query"], abs=1e-5)
        assert h["namespace"] == "u1"
    scores = [h["score"]["score"] for h in hits]
    assert scores == sorted(scores, reverse=True)
    ids = {h["id"] for h in hits}
    assert populated["expired"].id not in ids
    assert not {rec.id for rec in populated["u12"]} & ids


def test_search_paraphrase_finds_the_right_memory_first(populated):
    hits = populated["search"].json()
    ranking = [(h["content"], h["score"]) for h in hits]
    chart = next((h for h in hits if h["content"] == CHART), None)
    assert chart is not None, f"the chart preference was not returned at all: {ranking}"
    # The semantic channel does see it as the closest memory...
    assert chart["score"]["vector"] == max(h["score"]["vector"] for h in hits), ranking
    # ...and the final ranking must put it first.
    assert hits[0]["content"] == CHART, "ranking:\n" + "\n".join(
        f"  {c!r} {s}" for c, s in ranking)


def test_stats_json(populated):
    r = populated["stats"]
    assert r.code == 0, str(r)
    s = r.json()
    assert s["embedding_model"] == EmbeddingSettings().model
    assert s["dim"] == 512
    assert Path(s["path"]) == populated["store"]
    n_current = len(populated["seeded"]) + 2 + len(populated["u12"])  # + the two CLI adds
    n_rows = n_current + 1  # + the expired one, still stored
    assert s["memories"] == n_current
    assert s["rows"] == s["keyword_rows"] == s["vectors"] == n_rows
    assert set(s["namespaces"]) == {"u1", "u12"}
    assert s["namespaces"]["u12"] == 2
    assert sum(s["namespaces"].values()) == n_rows
    assert s["file_bytes"] > 0


# ---------------------------------------------------------------------------- delete
def test_delete_by_id_and_namespace(tmp_path):
    store = tmp_path / "memory.sqlite"
    with open_service(store) as svc:
        u1 = [svc.write(t, "u1") for t in ("likes tea", "likes hiking", "works remotely")]
        sub = svc.write("draft notes", "u1/drafts")
        keep = svc.write("likes coffee", "u12")

    runs = memctl_many(store, {
        "by_id": (["delete", u1[0].id, "--json"], None),
        "no_yes": (["delete", "--ns", "u1"], None),
    })
    assert runs["by_id"].code == 0, str(runs["by_id"])
    assert runs["by_id"].json() == {"deleted": 1}
    assert_clean_error(runs["no_yes"], 2, "--yes")
    with open_service(store) as svc:
        assert svc.backend.get([u1[0].id]) == []
        assert {r.id for r in svc.list("u1")} == {u1[1].id, u1[2].id, sub.id}  # --ns without --yes: nothing
        assert svc.count("u12") == 1

    r = memctl(store, "delete", "--ns", "u1", "--yes", "--json")
    assert r.code == 0, str(r)
    assert r.json() == {"deleted": 3}  # u1 and u1/drafts, label-prefix only
    with open_service(store) as svc:
        assert svc.count("u1") == 0
        assert [x.id for x in svc.list("u12")] == [keep.id]
        assert svc.count() == 1


# ---------------------------------------------------------------------------- bad input
BAD = {
    "empty-text": (["add", "", "--ns", "u1"], None, ("empty",)),
    "bad-namespace": (["add", "User likes tea", "--ns", "a//b"], None, ("a//b", "empty label")),
    "stdin-invalid-utf8": (["add", "-", "--ns", "u1"], b"\xff\xfe bad \xc3\x28", ("UTF-8",)),
    # A typical 32-hex id makes the message longer than 80 columns.
    "get-missing-uuid": (["get", "9f" * 16], None, ("9f" * 16,)),
    # Square brackets in user input must be printed, not parsed as console markup.
    "get-id-with-brackets": (["get", "[/nope]"], None, ("[/nope]",)),
}


@pytest.fixture(scope="module")
def bad_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    store = tmp_path_factory.mktemp("cli-bad") / "memory.sqlite"
    with open_service(store) as svc:
        svc.write("User prefers bar charts", "u1", {"type": "user_profile"})
        svc.write("用户喜欢喝茶", "u1", {"type": "user_profile"})
        before = sorted((r.id, r.content, r.updated_at) for r in svc.list("u1"))
    runs = memctl_many(store, {name: (args, stdin) for name, (args, stdin, _) in BAD.items()})
    with open_service(store) as svc:
        after = sorted((r.id, r.content, r.updated_at) for r in svc.list("u1"))
        total = svc.count()
    return {"runs": runs, "before": before, "after": after, "total": total}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_exits_2_with_one_line_error(bad_runs, case):
    assert_clean_error(bad_runs["runs"][case], 2, *BAD[case][2])


def test_bad_input_changed_nothing(bad_runs):
    assert len(bad_runs["before"]) == 2
    assert bad_runs["after"] == bad_runs["before"]
    assert bad_runs["total"] == 2


# ---------------------------------------------------------------------------- eval retrieval
def _tiny_locomo(root: Path) -> Path:
    d = root / "tiny_locomo"
    d.mkdir()
    turns = [
        ("D1:1", "Caroline", "I went to a support group for LGBTQ people yesterday, it was powerful."),
        ("D1:2", "Melanie", "I painted a sunrise over the lake last weekend."),
        ("D1:3", "Caroline", "我下个月要去北京参加一个心理咨询师的培训。"),
        ("D1:4", "Melanie", "My kids and I went camping in the mountains and roasted marshmallows."),
        ("D2:1", "Caroline", "I adopted a grey cat called Oscar from the shelter."),
        ("D2:2", "Melanie", "I started learning to play the violin, it is hard but fun."),
    ]
    with (d / "turns.jsonl").open("w", encoding="utf-8") as fh:
        for i, (dia, speaker, text) in enumerate(turns):
            session = "2023-05-08T13:56" if dia.startswith("D1") else "2023-06-09T10:00"
            fh.write(json.dumps({"conversation_id": "conv-t", "session_id": int(dia[1]), "session_date": session,
                                 "dia_id": dia, "turn_index": i, "speaker": speaker, "text": text,
                                 "blip_caption": "a cat on a sofa" if dia == "D2:1" else None},
                                ensure_ascii=False) + "\n")
    questions = [
        {"question": "What did Melanie paint?", "category": 1, "evidence": ["D1:2"]},  # int category
        {"question": "What pet did Caroline adopt?", "category": "1", "evidence": ["D2:1"]},  # str category
        {"question": "Where did Melanie go camping?", "category": 2, "evidence": ["D1:4"]},
        {"question": "What instrument did Caroline start learning?", "category": 5,  # adversarial: skipped
         "evidence": ["D2:2"]},
        {"question": "Did Melanie adopt a dog?", "category": "5", "evidence": ["D2:1"]},  # adversarial (str)
        {"question": "What is Caroline's favourite food?", "category": 3, "evidence": []},  # no evidence: skipped
    ]
    with (d / "questions.jsonl").open("w", encoding="utf-8") as fh:
        for i, q in enumerate(questions):
            fh.write(json.dumps({"conversation_id": "conv-t", "question_id": f"q{i}", "answer": "x", **q}) + "\n")
    return d


@pytest.fixture(scope="module")
def eval_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    root = tmp_path_factory.mktemp("cli-eval")
    tiny = _tiny_locomo(root)
    store = root / "user-store.sqlite"
    runs = memctl_many(store, {
        "zh_en": (["eval", "retrieval", "--data", "tests/data/zh_en", "--json"], None),
        "tiny": (["eval", "retrieval", "--data", str(tiny), "--json"], None),
    })
    runs["store_exists"] = store.exists()  # type: ignore[assignment]
    return runs


def _scorable(questions: Path) -> tuple[int, dict[str, int]]:
    n, by_cat = 0, {}
    for line in questions.read_text(encoding="utf-8").splitlines():
        q = json.loads(line)
        cat = str(q.get("category_name") or q.get("category"))
        if not q.get("evidence") or str(q.get("category")) in {"5", "adversarial"} or cat in {"5", "adversarial"}:
            continue
        n += 1
        by_cat[cat] = by_cat.get(cat, 0) + 1
    return n, by_cat


def test_eval_retrieval_zh_en_json(eval_runs):
    r = eval_runs["zh_en"]
    assert r.code == 0, str(r)
    d = r.json()  # the whole of stdout is one JSON object
    assert isinstance(d, dict)
    assert {"overall", "by_category", "timing"} <= set(d)
    overall = d["overall"]
    assert set(overall) == {"n", "R@5", "R@10", "MRR"}
    n, by_cat = _scorable(ZH_EN / "questions.jsonl")
    assert overall["n"] == n > 0
    assert {c: m["n"] for c, m in d["by_category"].items()} == by_cat
    for m in [overall, *d["by_category"].values()]:
        assert 0.0 <= m["R@5"] <= m["R@10"] <= 1.0 and 0.0 <= m["MRR"] <= 1.0
    assert overall["R@10"] >= 0.8  # a floor well below the measured figure: retrieval actually works
    assert set(d["timing"]) == {"ingest_per_s", "search_p50_ms", "search_p95_ms"}
    t = d["timing"]
    assert t["ingest_per_s"] > 0 and 0 < t["search_p50_ms"] <= t["search_p95_ms"]
    assert not eval_runs["store_exists"], "eval must not touch the user's store (MEMORY_PATH)"


def test_eval_retrieval_tiny_locomo_mixed_category_types(eval_runs):
    r = eval_runs["tiny"]
    assert r.code == 0, str(r)
    d = r.json()
    assert d["overall"]["n"] == 3  # 6 questions - 2 adversarial (int and str 5) - 1 without evidence
    assert {c: m["n"] for c, m in d["by_category"].items()} == {"1": 2, "2": 1}  # 1 and "1" are one category
    assert d["config"]["turns"] == 6 and d["config"]["questions"] == 3
    assert d["overall"]["R@10"] == 1.0  # only 6 turns: every evidence turn is within the top 10
    for m in [d["overall"], *d["by_category"].values()]:
        assert 0.0 < m["MRR"] <= m["R@10"]


# ---------------------------------------------------------------------------- no network
def _unshare_works() -> tuple[bool, str]:
    if shutil.which("unshare") is None:
        return False, "the unshare command is not installed"
    try:
        p = subprocess.run(["unshare", "-rn", "true"], capture_output=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"unshare -rn true failed: {exc}"
    if p.returncode != 0:
        return False, f"unshare -rn true exited {p.returncode}: {p.stderr.decode(errors='replace').strip()}"
    return True, ""


def test_add_and_search_with_the_network_cut(tmp_path):
    ok, why = _unshare_works()
    if not ok:
        pytest.skip(f"cannot cut the network here (user + network namespaces unavailable): {why}")
    store = tmp_path / "memory.sqlite"
    # No HF_HUB_OFFLINE here: the cut network itself must be enough.
    r = memctl(store, "add", CHART, "--ns", "user_profile/u1", "--type", "user_profile", "--json",
               prefix=["unshare", "-rn"], offline_flag=False)
    assert r.code == 0, str(r)
    added = r.json()
    r = memctl(store, "search", CHART_QUERY, "--ns", "user_profile/u1", "--json",
               prefix=["unshare", "-rn"], offline_flag=False)
    assert r.code == 0, str(r)
    hits = r.json()
    assert hits and hits[0]["id"] == added["id"] and hits[0]["content"] == CHART
    assert hits[0]["score"]["vector"] > 0


def test_bench_json_keys_and_the_handoff_headline(tmp_path):
    """``memctl bench --json`` keeps the keys the issue fixed; the handoff headline follows the
    default mode (write-behind) and both modes are reported."""
    env = {**cli_env(tmp_path / "unused.sqlite"), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    cmd = [*MEMCTL, "bench", "--sizes", "200", "--queries", "5", "--systems", "sqlite,numpy,handoff",
           "--json", "--out", str(tmp_path / "b.json"), "--plot", str(tmp_path / "b.png")]
    p = subprocess.run(cmd, capture_output=True, timeout=600, env=env, cwd=ROOT)
    r = Run(cmd, p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace"))
    assert r.code == 0, str(r)
    out = r.json()
    assert {(x["system"], x["n"]) for x in out["results"]} == {("memory-sqlite", 200), ("numpy-floor", 200)}
    for x in out["results"]:
        assert {"system", "n", "search_p50_ms", "search_p95_ms", "write_per_s"} <= x.keys()
        assert 0 < x["search_p50_ms"] <= x["search_p95_ms"]
    assert out["handoff_overhead_mode"] == "write-behind"
    assert out["handoff_overhead_p95_ms"] == out["handoff_overhead_write_behind_p95_ms"]
    assert out["handoff_overhead_inline_p95_ms"] == out["handoff_overhead"]["200"]["total_p95_ms"] > 0
    assert out["handoff_overhead_write_behind"]["200"]["errors"] == 0
    # two whole turns run untimed first (one-time loads), then the heap is frozen for the timed ones
    for mode in ("handoff_overhead", "handoff_overhead_write_behind"):
        assert len(out[mode]["200"]["warmup_ms"]) == 6 and out[mode]["200"]["freeze_gc"] is True
    assert json.loads((tmp_path / "b.json").read_text()) == out
    assert (tmp_path / "b.png").stat().st_size > 0
    assert list((tmp_path / "cache").rglob("*.npy"))  # corpus vectors cached under XDG_CACHE_HOME
