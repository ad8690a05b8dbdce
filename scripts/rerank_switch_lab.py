"""Refit the reranker on the adapted dense channel (issue 16, stop 30): both dense switches off vs on.

    HF_HUB_OFFLINE=1 nice -n 5 .venv/bin/python scripts/rerank_switch_lab.py --arms off,on --out /tmp/r14
    HF_HUB_OFFLINE=1 nice -n 5 .venv/bin/python scripts/rerank_switch_lab.py --arms fold --out /tmp/r14
    HF_HUB_OFFLINE=1 .venv/bin/python scripts/rerank_switch_lab.py --report --out /tmp/r14 [--write]

Loads only the fitting sets of :mod:`memctl.tune_rerank` (LoCoMo tuning conv-26/30/41/42/43, zh_en ... zh_en_9);
never the LoCoMo held-out half, zh_en_10 or zh_en_11. Every arm refits the shipped grid point and features (38)
leave-one-set-out, on candidates found through search's own candidate step (``MemoryService._candidates``):

* ``off``: ``scoring.query_adapter`` and ``scoring.strip_speakers`` off (what ships today), plus two references:
  the shipped file applied as it is (in sample on LoCoMo tuning and zh_en ... zh_en_6, out of set on zh_en_7/8/9)
  and the shipped configuration left-one-set-out over its own eleven fitting sets (stop 29's reference).
* ``on``: both switches on with the shipped adapter (``memory/query_adapter.json``). The adapter was fitted on
  LoCoMo tuning + zh_en ... zh_en_6, so on those folds the held-out set's candidates leak (second order).
* ``fold``: both switches on, each set's candidates found with an adapter fitted without that set (the shipped
  adapter's recipe and fitting sets minus the held-out one, ``scripts/dense_adapter_lab.py``): no leakage into
  the held-out set's candidates. The other sets' candidates also come from adapters fitted without them (the
  exact recipe would need one candidate pass per (fold, set) pair), so training rows are slightly harder than
  at ship time, where the reranker sees candidates of an adapter fitted on them.

* ``fold_adapter`` / ``strip``: one switch at a time (per-fold adapter with the speakers' names kept; speakers
  stripped without the adapter), to see which switch moves what.

Measured (stop 30, fitting sets only, out of set, R@5 / R@10 / MRR; load 2.5-4.9): LoCoMo tuning off .799 / .858 /
.638, on .808 / .876 / .659, per-fold .804 / .864 / .649; zh/en mean MRR .769 / .783 / .777; the mixed direction
loses .015 (on) / .020 (per fold) MRR, so the gate fails and nothing ships.

``--report`` prints per set, per LoCoMo category and per zh/en direction R@5 / R@10 / MRR out of set for each arm,
and the gate of the brief: switches on beats off on LoCoMo MRR by >= .005 and on the zh/en mean MRR, with no zh/en
direction losing more than .01 MRR (per direction, mean over the zh/en sets of the change), for the ``on`` and
``fold`` arms. ``--write`` then fits the shipped point on every set with the switches on (as the ``on`` arm
loaded them) and writes ``memory/rerank_model.json``; ``python -m memctl.tune_retrieval --stage rerank --check``
reproduces it once the switches are the defaults.
"""

from __future__ import annotations

import argparse
import os
import pickle
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import memctl.tune_rerank as tr  # noqa: E402
from memctl.tune_retrieval import DiskCachedEmbedder  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SWITCHES = ("MEMORY_SCORING__QUERY_ADAPTER", "MEMORY_SCORING__STRIP_SPEAKERS")
OLD_SETS = (*tr.LOCOMO_TUNE, "zh_en", "zh_en_2", "zh_en_3", "zh_en_4", "zh_en_5", "zh_en_6")  # the shipped fit's
ADAPTER_FIT = OLD_SETS  # the shipped adapter's fitting sets (memory/query_adapter.json "fitted_on")
ADAPTER_RECIPE = {"kind": "diag", "lam": 1e-4, "steps": 200}  # the shipped adapter's (its file's info)


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def switches(adapter: bool, strip: bool) -> None:
    """scoring.query_adapter and scoring.strip_speakers through the environment (read by MemorySettings)."""
    for k, v in zip(SWITCHES, (adapter, strip), strict=True):
        os.environ[k] = "true" if v else "false"


def arm_plain(emb: Any, locomo: Path, adapter: bool, strip: bool) -> dict[str, Any]:
    """Candidates with the switches as given (the shipped adapter), then the shipped point out of set."""
    import memory.query_adapter as qa

    qa._LOADED.clear()
    switches(adapter, strip)
    on = adapter or strip
    t0 = time.time()
    sets = tr.narrow(tr.load_sets(emb, locomo), 38)
    t1 = time.time()
    ranks = tr.out_of_set(sets, POINT)
    t2 = time.time()
    print(f"arm adapter={adapter} strip={strip}: load {t1 - t0:.0f} s, {len(sets)} folds {t2 - t1:.0f} s; {uptime()}",
          flush=True)
    out: dict[str, Any] = {"sets": sets, "ranks": ranks, "times": (t1 - t0, t2 - t1)}
    if not on:
        from memory.rerank import RerankModel

        shipped = RerankModel.load()
        out["shipped_as_is"] = {k: [tr.new_rank(q, shipped.log_odds(q.x)) for q in qs] for k, qs in sets.items()}
        t3 = time.time()
        out["shipped_loso_old"] = tr.out_of_set({k: sets[k] for k in OLD_SETS}, POINT)
        print(f"  shipped point LOSO over its own 11 sets: {time.time() - t3:.0f} s; {uptime()}", flush=True)
    return out


def fold_adapters(emb: Any, locomo: Path) -> dict[str, Any]:
    """Per held-out set, the diagonal adapter fitted on ADAPTER_FIT minus that set (dense_adapter_lab's fit)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import dense_adapter_lab as dal
    from memory.query_adapter import QueryAdapter, shipped

    groups: dict[str, list[Any]] = {cv.set_name: [cv] for cv in dal.load(locomo, tr.LOCOMO_TUNE, emb, None)}
    for k in ADAPTER_FIT[len(tr.LOCOMO_TUNE):]:
        groups[k] = dal.load(dal.ZH[k], None, emb, k)
    batches = {k: dal.batch(v) for k, v in groups.items()}

    def without(held: str | None) -> QueryAdapter:
        keep = [k for k in groups if k != held]
        b = dal.Batch(*(np.concatenate([getattr(batches[k], f) for k in keep]) for f in ("q", "d", "y")))
        return QueryAdapter(emb.name, (1 + dal.fit(b, **ADAPTER_RECIPE)["diag"]).astype(np.float32))

    full = without(None)
    dev = float(np.max(np.abs(full.scale - shipped().scale)))
    print(f"adapter refit on all {len(groups)} sets vs the shipped file: max |scale difference| {dev:.2e}", flush=True)
    return {held: (without(held) if held in groups else full) for held in [*tr.LOCOMO_TUNE, *tr.ZH_NAMES]}


def fold_candidates(data: Path, convs: Sequence[str] | None, emb: Any, adapters: dict[str, Any]) -> list[Any]:
    """:func:`memctl.tune_retrieval.candidates`, but each conversation's questions use ``adapters[conv]``
    (one store for all conversations, so keyword statistics are those of the plain arms)."""
    import memory.query_adapter as qa
    from memctl.evaluation import _ns, _turn_extra, load_dataset
    from memory import MemoryService, MemorySettings
    from memory.namespace import parse_namespaces
    from memory.service import NewMemory

    turns, questions = load_dataset(data)
    if convs is not None:
        turns = {c: t for c, t in turns.items() if c in convs}
        questions = [q for q in questions if q.conversation_id in convs]
    settings = MemorySettings(path=":memory:")  # the switches from the environment (both on)
    assert settings.scoring.query_adapter
    out = []
    with MemoryService.from_settings(settings, embedder=emb) as svc:
        for conv, ts in turns.items():
            svc.write_many(NewMemory(ts[j].content, _ns(conv), {"type": "conversation", "source": "locomo",
                                                                "extra": _turn_extra(ts, j, 2)},
                                     id=f"{conv}#{j:05d}", created_at=ts[j].session_date) for j in range(len(ts)))
        as_of = {c: max(t.session_date for t in ts) for c, ts in turns.items()}
        for q in questions:
            qa._LOADED[qa.ADAPTER_PATH] = adapters[q.conversation_id]
            _, cands = svc._candidates(q.question, tuple(parse_namespaces(_ns(q.conversation_id))), None, 50,
                                       as_of[q.conversation_id])
            out.append((q, as_of[q.conversation_id], cands))
    qa._LOADED.clear()
    emb.save()
    return out


def arm_fold(emb: Any, locomo: Path, strip: bool = True) -> dict[str, Any]:
    from memory.settings import ScoringSettings

    switches(True, strip)
    t0 = time.time()
    ad = fold_adapters(emb, locomo)
    t1 = time.time()
    cfg = ScoringSettings()
    sets: dict[str, list[tr.Query]] = {}
    lo = fold_candidates(locomo, tr.LOCOMO_TUNE, emb, {c: ad[c] for c in tr.LOCOMO_TUNE})
    for conv in tr.LOCOMO_TUNE:
        sets[conv] = tr.featurise(conv, [c for c in lo if c[0].conversation_id == conv], cfg)
    for name, d in tr.ZH_DIRS.items():
        cs = fold_candidates(d, None, emb, _Every(ad[name]))
        sets[name] = tr.featurise(name, cs, cfg)
    sets = tr.narrow(sets, 38)
    t2 = time.time()
    ranks = tr.out_of_set(sets, POINT)
    t3 = time.time()
    print(f"arm fold: adapters {t1 - t0:.0f} s, load {t2 - t1:.0f} s, folds {t3 - t2:.0f} s; {uptime()}", flush=True)
    return {"sets": sets, "ranks": ranks, "times": (t2 - t1, t3 - t2)}


class _Every(dict):  # type: ignore[type-arg]
    """One adapter for every conversation of a zh/en set."""

    def __init__(self, a: Any):
        super().__init__()
        self.a = a

    def __missing__(self, key: str) -> Any:
        return self.a


ARMS = ("off", "on", "fold", "fold_adapter", "strip")
POINT = (5, 300, 0.05, 40)  # the shipped grid point (memory/rerank_model.json info.grid_point)


def _line(name: str, m: dict[str, float]) -> str:
    return f"{name} {tr._fmt(m)}"


def table(sets: dict[str, list[tr.Query]], arms: dict[str, dict[str, list[int | None]]]) -> None:
    """Per set, LoCoMo pooled and per category, zh/en per direction (pooled over the sets) and the zh/en mean MRR."""
    names = list(arms)
    print("   " + " | ".join(names))

    def row(label: str, per: dict[str, list[int | None]]) -> None:
        print(f"  {label:18} " + " | ".join(tr._fmt(tr.metrics(per[a])) for a in names))

    first = next(iter(arms.values()))
    for k in sets:
        if k in first:
            row(k, {a: r[k] for a, r in arms.items()})
    row("LoCoMo tuning", {a: [x for k in tr.LOCOMO_TUNE for x in r[k]] for a, r in arms.items()})
    for scope, keys in (("LoCoMo", tr.LOCOMO_TUNE), ("zh/en", [k for k in tr.ZH_NAMES if k in first])):
        cats = sorted({q.category for k in keys for q in sets[k]})
        for c in cats:
            row(f"{scope} {c}", {a: [x for k in keys for q, x in zip(sets[k], r[k], strict=True) if q.category == c]
                                 for a, r in arms.items()})
    zk = [k for k in tr.ZH_NAMES if k in first]
    print(f"  {'zh/en mean MRR':18} " + " | ".join(f"{np.mean([tr.metrics(r[k])['MRR'] for k in zk]):.3f}"
                                                     for r in arms.values()))


def gate(sets: dict[str, list[tr.Query]], on: dict[str, list[int | None]], off: dict[str, list[int | None]],
         label: str) -> bool:
    res = tr.summary(sets, on, off)
    d_lo = res["locomo"]["new"]["MRR"] - res["locomo"]["base"]["MRR"]
    d_zh = res["zh_mean_mrr"]["new"] - res["zh_mean_mrr"]["base"]
    dirs = res["zh_direction_mrr_change"]
    pooled = {c: v["new"]["MRR"] - v["base"]["MRR"] for c, v in res["zh_category"].items()}
    ok = d_lo >= 0.005 and d_zh > 0 and min(dirs.values()) >= -0.01
    print(f"gate {label} vs off: LoCoMo MRR {d_lo:+.4f} (>= +.005), zh/en mean MRR {d_zh:+.4f} (> 0), per direction "
          "(mean over sets) " + ", ".join(f"{c} {d:+.3f}" for c, d in dirs.items()) + " (none < -.01); pooled "
          + ", ".join(f"{c} {d:+.3f}" for c, d in pooled.items()) + f" -> {'PASS' if ok else 'FAIL'}", flush=True)
    return ok


def write(on: dict[str, Any], res_info: dict[str, Any]) -> None:
    """Fit the shipped point on every set's switched-on candidates and write memory/rerank_model.json."""
    sets = on["sets"]
    clf = tr.fit([q for qs in sets.values() for q in qs], POINT)
    model, text = tr.model_text(clf, res_info, 38, np.vstack([q.x for qs in sets.values() for q in qs]))
    tr.MODEL_FILE.write_text(text, encoding="utf-8")
    print(f"wrote {tr.MODEL_FILE} ({len(text)} bytes, {len(model.trees)} trees)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--locomo", type=Path, default=ROOT.parents[1] / "shared" / "data" / "locomo")
    ap.add_argument("--cache", type=Path, default=None)
    ap.add_argument("--arms", default="off,on", help="comma-separated: off, on, fold; one-switch probes: fold_adapter (per-fold adapter, speakers kept), strip "
                    "(speakers stripped, no adapter)")
    ap.add_argument("--out", type=Path, required=True, help="prefix of the pickles each arm writes / --report reads")
    ap.add_argument("--report", action="store_true")
    ap.add_argument("--write", action="store_true", help="with --report: write the switched-on model if the gate passes")
    args = ap.parse_args()
    if not args.report:
        from memory.embeddings import get_embedder
        from memory.settings import MemorySettings

        emb = DiskCachedEmbedder(get_embedder(MemorySettings(path=":memory:").embedding.model, threads=1), args.cache)
        print(uptime(), flush=True)
        for arm in args.arms.split(","):
            # fold_adapter: per-fold adapter, speakers kept; strip: speakers stripped, no adapter (one-switch probes)
            if arm in ("fold", "fold_adapter"):
                res = arm_fold(emb, args.locomo, strip=arm == "fold")
            else:
                res = arm_plain(emb, args.locomo, arm == "on", arm in ("on", "strip"))
            Path(f"{args.out}_{arm}.pkl").write_bytes(pickle.dumps(res))
        return
    arms = {a: pickle.loads(Path(f"{args.out}_{a}.pkl").read_bytes()) for a in ARMS
            if Path(f"{args.out}_{a}.pkl").exists()}
    off = arms["off"]
    sets = off["sets"]
    cols = {"linear (off)": {k: [q.base_rank for q in qs] for k, qs in sets.items()},
            "shipped file as is": off["shipped_as_is"], "off LOSO": off["ranks"]}
    cols.update({f"{a} LOSO": arms[a]["ranks"] for a in ARMS[1:] if a in arms})
    print("out of set R@5 / R@10 / MRR (shipped file as is: in sample on LoCoMo tuning and zh_en..zh_en_6)")
    table(sets, cols)
    print("shipped point LOSO over its own 11 fitting sets (stop 29's reference) vs the same sets in the off arm:")
    table({k: sets[k] for k in OLD_SETS}, {"old 11 sets": off["shipped_loso_old"],
                                           "14 sets": {k: off["ranks"][k] for k in OLD_SETS}})
    for a in ARMS[1:]:
        if a in arms:
            print(f"{a} arm: linear (its own candidates), LoCoMo tuning "
                  f"{tr._fmt(tr.metrics([q.base_rank for k in tr.LOCOMO_TUNE for q in arms[a]['sets'][k]]))}")
    verdict = {a: gate(sets, arms[a]["ranks"], off["ranks"], a) for a in ("on", "fold") if a in arms}
    for a in ARMS[3:]:  # the one-switch probes: not a ship decision, the same comparison
        if a in arms:
            gate(sets, arms[a]["ranks"], off["ranks"], a)
    if args.write:
        if not verdict or not all(verdict.values()):
            print("gate not passed by every arm run; nothing written")
            return
        res = tr.summary(arms["on"]["sets"], arms["on"]["ranks"], off["ranks"])
        info = tr._rounded({"grid_point": dict(zip(tr.POINT_KEYS, POINT, strict=True)),
                            "fitted_on": list(arms["on"]["sets"]), "scoring": {"query_adapter": True,
                                                                               "strip_speakers": True},
                            "out_of_set_vs_switches_off": {"locomo_tuning": res["locomo"],
                                                           "zh_mean_mrr": res["zh_mean_mrr"],
                                                           "zh_direction_mrr_change": res["zh_direction_mrr_change"]}})
        write(arms["on"], info)


if __name__ == "__main__":
    main()
