"""Retrieval quality with the real packaged model: regression floors well below measured figures."""

from __future__ import annotations

from pathlib import Path

import pytest

from memctl.evaluation import run_retrieval_eval
from memory import MemoryService, MemorySettings
from memory.errors import InvalidInput

ROOT = Path(__file__).resolve().parents[2]
ZH_EN = ROOT / "tests" / "data" / "zh_en"
LOCOMO = ROOT.parent / "shared" / "data" / "locomo"


@pytest.fixture
def eval_service(embedder):
    svc = MemoryService.from_settings(MemorySettings(path=":memory:"), embedder=embedder)
    yield svc
    svc.close()


def test_zh_en_set_including_cross_language(eval_service):
    r = run_retrieval_eval(eval_service, ZH_EN, modes=("hybrid", "plain", "dense"))
    assert r["overall"]["n"] == 165
    assert r["config"]["mode"] == "hybrid" and set(r["modes"]) == {"hybrid", "plain", "dense"}
    assert r["modes"]["hybrid"]["overall"] == r["overall"]
    # Measured .958 / .970 / .851 (memctl eval retrieval --mode all); the floors catch real regressions.
    assert r["overall"]["R@10"] >= 0.94
    assert r["overall"]["MRR"] >= 0.84
    hyb, plain, dense = (r["modes"][m]["by_category"] for m in ("hybrid", "plain", "dense"))
    for cat in ("zh->en", "en->zh"):
        assert hyb[cat]["R@10"] >= 0.85, (cat, hyb[cat])
        # Language-aware fusion: a weak same-language keyword match no longer buries the
        # cross-language answer (plain fusion: MRR .58 / .35; hybrid .75 / .75).
        assert hyb[cat]["MRR"] >= 0.72, (cat, hyb[cat])
        assert hyb[cat]["MRR"] >= plain[cat]["MRR"] + 0.15, (cat, hyb[cat], plain[cat])
    # Hybrid vs dense-only per direction. MRR: measured en->zh .808 vs .752 (.751 before the
    # CC-CEDICT keyword bridge, memory.cedict), zh->en .732 vs .715 (.749 before the bridge: this
    # set is one of the six it was fitted on, and its out-of-set zh->en gain came from the others),
    # zh->zh .936 vs .872 (Chinese unigrams in the keyword index and the mixed-script keyword cap),
    # en->en .887 vs .802 (.870 before the bridge), mixed .924 vs .913; overall MRR .851 (.837).
    for cat in ("en->zh", "zh->en", "zh-zh", "en-en", "mixed"):
        assert hyb[cat]["MRR"] >= dense[cat]["MRR"] - 0.002, (cat, hyb[cat], dense[cat])
    for cat in ("en->zh", "zh-zh", "en-en"):
        assert hyb[cat]["MRR"] >= dense[cat]["MRR"] + 0.02, (cat, hyb[cat], dense[cat])
    assert hyb["zh->en"]["MRR"] >= dense["zh->en"]["MRR"] + 0.01, (hyb["zh->en"], dense["zh->en"])
    # R@5: equal or better in every direction but zh->en, one question short (.946 vs .973:
    # a question whose vector scores are all below .1, issue 16's target not met there).
    for cat in ("en->zh", "zh-zh", "en-en", "mixed"):
        assert hyb[cat]["R@5"] >= dense[cat]["R@5"], (cat, hyb[cat], dense[cat])
    assert hyb["zh-zh"]["R@5"] >= dense["zh-zh"]["R@5"] + 1 / 30 - 0.001  # 1.000 vs .967
    assert hyb["zh->en"]["R@5"] >= dense["zh->en"]["R@5"] - 1 / 37 - 0.001  # figures are rounded to 4 places


def test_zh_en_3_hybrid_is_not_below_dense(eval_service):
    # The third set, written by another author: the fusion fitted on zh_en alone ranked below
    # dense-only here (MRR .625 vs .648, zh->zh .824 vs .895). Fitted leave-one-set-out on the
    # three sets (python -m memctl.tune_retrieval --stage loso), so not a held-out figure: it
    # guards the fit. Measured hybrid .857 / .910 / .664, dense .825 / .905 / .648; zh->zh MRR
    # .911 vs .895, zh->en .521 vs .493.
    r = run_retrieval_eval(eval_service, ROOT / "tests" / "data" / "zh_en_3", modes=("hybrid", "dense"))
    assert r["overall"]["n"] == 189
    hyb, dense = r["modes"]["hybrid"], r["modes"]["dense"]
    assert hyb["overall"]["MRR"] >= dense["overall"]["MRR"] + 0.01
    assert hyb["overall"]["R@5"] >= dense["overall"]["R@5"] + 0.02
    for cat in ("zh-zh", "zh->en", "en-en", "mixed"):
        assert hyb["by_category"][cat]["MRR"] >= dense["by_category"][cat]["MRR"], (cat, hyb["by_category"][cat])


@pytest.mark.skipif(not LOCOMO.is_dir(), reason=f"LoCoMo data not found at {LOCOMO}")
def test_locomo_one_conversation_beats_bm25_baseline(eval_service):
    r = run_retrieval_eval(eval_service, LOCOMO, conversations=["conv-26"])
    assert r["overall"]["n"] == 150  # 199 QAs - 47 adversarial - 2 without evidence
    # Measured .860 / .585 with the query rules (memory.query); BM25 alone: .561 over all ten.
    assert r["overall"]["R@10"] >= 0.82
    assert r["overall"]["MRR"] >= 0.55
    assert set(r["timing"]) == {"ingest_per_s", "search_p50_ms", "search_p95_ms"}


def test_cross_language_search_and_isolation(service):
    service.write("以后报表里的金额都用人民币万元为单位", "user_profile/zhang", {"type": "user_profile"})
    service.write("GMV 口径是指已支付订单金额，不含退款", "domain_facts/zhang", {"type": "domain_facts"})
    service.write("Always show charts as bar charts", "user_profile/zhang1", {"type": "user_profile"})
    hits = service.search("How should money amounts be shown in reports?", ["user_profile/zhang", "domain_facts/zhang"])
    assert hits and "万元" in hits[0].record.content
    assert all(h.record.namespace[1] == "zhang" for h in hits)
    hits = service.search("what counts as GMV", "domain_facts/zhang")
    assert hits and "GMV" in hits[0].record.content
    # An unrelated question returns nothing rather than the newest memories.
    assert service.search("favourite football team", "domain_facts/zhang") == []


def test_demo_runs_end_to_end(tmp_path):
    from rich.console import Console

    from memctl.demo import run_demo

    out_file = tmp_path / "out.txt"
    with open(out_file, "w") as fh:
        checks = run_demo(str(tmp_path / "demo.sqlite"), Console(file=fh, width=120), detail="verbose")
    text = out_file.read_text()
    # The same run in the two short views, at 80 columns: --quiet fits one screen, the default
    # stays under ~120 lines, and both end with the checks.
    from memctl.demo import render

    for detail, most in (("quiet", 40), ("normal", 120)):
        view = tmp_path / f"{detail}.txt"
        with open(view, "w") as fh:
            render(checks["events"], checks, Console(file=fh, width=80), detail, "demo.sqlite")
        lines = view.read_text().splitlines()
        assert len(lines) <= most, (detail, len(lines))
        assert all(len(line) <= 80 for line in lines)
        assert "✓ a changed preference replaces the old one" in view.read_text()
        assert "scenario checks passed: 28/28" in view.read_text()
    assert "memory updated: user_profile/zhang" in (tmp_path / "normal.txt").read_text()
    # No LLM: the output says plainly that the agents' LLM steps are replayed.
    assert checks["replayed"] is True and "REPLAYED" in text and "[LLM replayed from scenario]" in text
    # Session 2 (a new thread, asked in English) recalls the Chinese preference and definition.
    assert "万元" in str(checks["cross_language_top"])
    assert "GMV" in str(checks["definition_top"])
    # Session 3: the changed preference wins.
    assert "元为单位" in str(checks["updated_top"]) and "万元" not in str(checks["updated_top"])
    # The second user never sees the first user's memories.
    assert checks["alice_sees_zhang"] is False
    assert all(c["ok"] for c in checks["checks"]), [c for c in checks["checks"] if not c["ok"]]
    assert checks["expectations"] and all(e["found"] for e in checks["expectations"])
    assert checks["memory_errors"] == [] and checks["agent_errors"] == []
    ns = checks["namespaces"]
    assert checks["memories"] == sum(ns.values()) >= 10  # nothing expired: the scenario's clock ends today
    assert ns["user_profile/zhang"] == 1 and ns["domain_facts/zhang"] == 1 and ns["user_profile/alice"] == 1
    assert ns["text2sql_memories/zhang"] >= 1 and ns["text2sql_memories/alice"] >= 1
    # Three tasks about other regions / metrics: nothing merged away (the scenario's `stored:`
    # checks name each conclusion, SQL and report; these are their counts).
    assert (ns["text2sql_memories/zhang"], ns["statistics_memories/zhang"], ns["analysis_memories/zhang"]) == (3, 3, 4)
    assert sum("still holds" in c["check"] for c in checks["checks"]) == 10
    for step in ("routed:", "retrieved:", "injected:", "added:", "updated:"):
        assert step in text


def test_eval_retrieval_unknown_mode_is_refused_before_any_work(tmp_path):
    from typer.testing import CliRunner

    from memctl.cli import app

    res = CliRunner().invoke(app, ["eval", "retrieval", "--data", str(ZH_EN), "--mode", "hybrid,vector"])
    assert res.exit_code != 0
    assert "unknown mode vector" in res.stderr and "bm25" in res.stderr
    with pytest.raises(InvalidInput, match="unknown search mode"):
        run_retrieval_eval(None, ZH_EN, modes=("sparse",))  # type: ignore[arg-type]


def test_a_rerun_ranks_exact_ties_alike(embedder, tmp_path):
    """Turns of one session share a time, so exact score ties were broken by random ids and a re-run of
    the same data could score differently. Here every question's evidence has a word-for-word twin in
    the same session (an exact tie): two runs in fresh stores must give the same figures, and both
    twins must keep distinct ids (nothing overwritten)."""
    import json

    texts = ["the courier comes on Tuesday", "our office code is 4417", "Mia handles the invoices",
             "the van is parked in bay 9", "lunch is at noon", "the printer is on floor 3"]
    turns, questions = [], []
    for i, text in enumerate(texts * 2):  # each text twice: the twins tie exactly on text and time
        turns.append({"conversation_id": "c1", "session_id": 1, "session_date": "2025-03-01T10:00",
                      "dia_id": f"D1:{i + 1}", "speaker": "u", "text": text})
    for i, text in enumerate(texts):
        questions.append({"conversation_id": "c1", "question_id": f"c1:q{i}", "question": text + "?",
                          "category": "en-en", "evidence": [f"D1:{i + 1}"]})
    (tmp_path / "turns.jsonl").write_text("\n".join(json.dumps(t) for t in turns), encoding="utf-8")
    (tmp_path / "questions.jsonl").write_text("\n".join(json.dumps(q) for q in questions), encoding="utf-8")
    runs = []
    for _ in range(2):
        svc = MemoryService.from_settings(MemorySettings(path=":memory:"), embedder=embedder)
        try:
            r = run_retrieval_eval(svc, tmp_path, context_turns=0)
            assert svc.count(("eval", "c1")) == len(turns)
            runs.append((r["overall"], sorted(h.record.id for h in svc.search("courier", ("eval", "c1"), top_k=20))))
        finally:
            svc.close()
    assert runs[0] == runs[1]
