"""Value-substitution augmentation for the write-path judge (round 5 experiment; fit folds only).

From a labelled **duplicate** pair whose two texts carry an equal canonical value
(:mod:`memory.policy.reading`), make

* ``val``: an **update** (label conflict) by changing that value in the incoming text to another
  plausible value of the same class and format — when the value sits after the predicate (a new
  value of the same slot): "deadline is May 30" / "due May 30th" -> "due May 18th";
* ``ent``: a **distinct** pair when the equal value sits in the subject part and is of an entity
  class (region, period, year, country, city): "East China GMV ..." / "华东 GMV ..." -> "华南 GMV ...".

Every made pair is checked with the reading itself: the changed value must read as a value of the
same class with another canonical form. The source pair's index is kept, so an augmented pair
trains only when its source pair is in the training folds (never in a held-out fold).
"""

from __future__ import annotations

import pickle
import random
import re
import unicodedata
from typing import Any

import numpy as np

from memory.policy.lexicon import CITIES, VALUE_LEXICON
from memory.policy.reading import Reading, Value, read

# Classes whose change after the predicate is a new value of the same slot.
VALUE_CLASSES = {"num", "percent", "time", "date", "decimals", "duration", "weekday", "frequency", "format", "chart",
                 "color", "theme", "channel", "dialect", "units", "date_format", "language", "sort", "timezone",
                 "city", "month"}
# Classes whose change inside the subject names another entity.
ENTITY_CLASSES = {"region", "period", "year", "country", "city", "channel_sales"}
_CJK = re.compile(r"[\u3400-\u9fff]")
_ZH_DIGITS = "一二三四五六七八九"
_DIGITS = re.compile(r"\d+")


def _lexicon(cls: str) -> dict[str, str]:
    if cls == "city":
        return {k: v[0] for k, v in CITIES.items()}
    return VALUE_LEXICON.get(cls, {})


def _other_surface(cls: str, surface: str, canon: str, rng: random.Random) -> str | None:
    """Another surface form of the same lexicon class, another canonical value, same script."""
    lex = _lexicon(cls)
    cjk = bool(_CJK.search(surface))
    cands = sorted(k for k, c in lex.items() if c != canon and bool(_CJK.search(k)) == cjk and len(k) > 1)
    return rng.choice(cands) if cands else None


def _other_number(surface: str, cls: str, rng: random.Random) -> str | None:
    """The surface with its first number changed (digits or a zh numeral digit)."""
    m = _DIGITS.search(surface)
    if m:
        n = int(m.group())
        if cls in ("time",) or (cls == "date" and n <= 31):
            hi = 12 if cls == "time" and n <= 12 else (23 if cls == "time" else 28)
            cands = [k for k in range(1, hi + 1) if k != n]
        elif cls == "decimals":
            cands = [k for k in range(0, 5) if k != n]
        else:
            cands = [k for k in {n * 2, max(1, n // 2), n + max(1, n // 4), n * 3 // 2} if k != n and k > 0]
        if not cands:
            return None
        k = rng.choice(sorted(cands))
        s = str(k).zfill(len(m.group())) if m.group().startswith("0") else str(k)
        return surface[:m.start()] + s + surface[m.end():]
    for i, ch in enumerate(surface):
        if ch in _ZH_DIGITS or ch == "两":
            cur = "二" if ch == "两" else ch
            new = rng.choice([d for d in _ZH_DIGITS if d != cur])
            return surface[:i] + new + surface[i + 1:]
    return None


def _replace(text: str, r: Reading, v: Value, new_surface: str) -> str | None:
    """Replace the value's span in the original text (spans are in the NFKC lower-cased text)."""
    if len(unicodedata.normalize("NFKC", text).lower()) != len(text):
        return None  # spans would not map one to one
    old = text[v.start:v.end]
    if old.lower() != r.text[v.start:v.end]:
        return None
    if old[:1].isupper():
        new_surface = new_surface[:1].upper() + new_surface[1:]
    return text[:v.start] + new_surface + text[v.end:]


def _changed(text: str, new: str, v: Value) -> bool:
    """The new text reads the value's class with another canonical value (and not the old one)."""
    vs = [w for w in read(new).values if w.cls == v.cls]
    return bool(vs) and all(w.canon != v.canon for w in vs if abs(w.start - v.start) <= 2)


def make(pairs: list[dict[str, Any]], mode: str, seed: int = 5) -> list[dict[str, Any]]:
    """Augmented pairs (each with ``src``: the index of its source pair) of the given mode."""
    rng = random.Random(seed)
    out = []
    for i, p in enumerate(pairs):
        if p["label"] != "duplicate":
            continue
        ra, rb = read(p["existing"]), read(p["incoming"])
        eq = {(v.cls, v.canon) for v in ra.values}
        done = set()
        for v in rb.values:
            if (v.cls, v.canon) not in eq or v.cls in done:
                continue
            in_rest = v.start >= rb.split or rb.split >= len(rb.text)
            in_subject = v.start < rb.split < len(rb.text)
            if mode in ("val", "all") and in_rest and v.cls in VALUE_CLASSES:
                label = "conflict"
            elif mode in ("ent", "all") and in_subject and v.cls in ENTITY_CLASSES:
                label = "distinct"
            else:
                continue
            surface = rb.text[v.start:v.end]
            new_s = (_other_surface(v.cls, surface, v.canon, rng) if _lexicon(v.cls)
                     else _other_number(surface, v.cls, rng))
            if not new_s:
                continue
            new = _replace(p["incoming"], rb, v, new_s)
            if not new or new == p["incoming"] or not _changed(p["incoming"], new, v):
                continue
            done.add(v.cls)
            out.append({**p, "incoming": new, "label": label, "src": i, "aug": f"{mode}:{v.cls}",
                        "id": f"{p.get('id')}+{v.cls}"})
            break  # one augmented pair per source pair
    return out


def augment_rows(d: dict[str, Any], mode: str, with_e5_cols: tuple[bool, bool] = (False, False)) -> dict[str, Any]:
    """Features of the augmented pairs (cached beside the lab cache), aligned like ``d``'s columns."""
    import judge_lab as jl

    from memctl import tune_judge as tj

    path = jl.CACHE.with_suffix(f".aug_{mode}.pkl")
    if path.exists():
        a = pickle.loads(path.read_bytes())
    else:
        from memory.policy.judge import FEATURES, PairJudge, TreeModel
        from memory.policy.paraphrase import get_paraphrase_scorer

        aug = make(d["pairs"], mode)
        judge = PairJudge(TreeModel(FEATURES, 0.0, (), 0.5, 1.0, {}),
                          paraphrase=get_paraphrase_scorer("all-MiniLM-L6-v2"))
        x, v = tj.featurize(aug, judge) if aug else (np.zeros((0, d["x"].shape[1])), np.zeros((0, d["v"].shape[1])))
        a = {"pairs": aug, "x": x, "v": v}
        path.write_bytes(pickle.dumps(a))
    x, v = a["x"], a["v"]
    cos, pv = with_e5_cols
    if (cos or pv) and len(a["pairs"]):
        import judge_lab5

        c, e = judge_lab5.e5_views(a["pairs"])
        if cos:
            x = np.hstack([x, c])
        if pv:
            v = np.hstack([v, e])
    y = np.array([0 if p["label"] == "distinct" else 1 for p in a["pairs"]], dtype=int)
    return {"x": x, "v": v, "y": y, "src": np.array([p["src"] for p in a["pairs"]], dtype=int), "pairs": a["pairs"]}


if __name__ == "__main__":
    import sys

    import judge_lab as jl

    d = jl.load_cache(".x5.pkl")
    for m in sys.argv[1:] or ["val", "ent"]:
        aug = make(d["pairs"], m)
        from collections import Counter

        print(m, len(aug), Counter(p["aug"] for p in aug).most_common(), Counter(p["lang"] for p in aug))
        for p in random.Random(0).sample(aug, min(12, len(aug))):
            print("  ", p["existing"], "||", p["incoming"], "->", p["label"])
