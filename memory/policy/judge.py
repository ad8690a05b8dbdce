"""The write-path judge: is an incoming memory the same fact as a stored one (a restatement or an
update of it), or a distinct fact that must be kept beside it?

Hand-set thresholds grown pair by pair fit the phrasing of whoever wrote the pairs (the rules in
:mod:`memory.policy.dedupe` scored .81 on their authors' pairs and .41 on pairs written
independently). So the decision here is **learned**: a small gradient-boosted tree ensemble
(``judge_model.json``, fitted by ``python -m memctl.tune_judge`` on some kinds of memory, its
size and threshold chosen out of fold over those kinds, folds by kind, and reported on kinds it
never saw) plus a linear part, over features that describe a pair without depending on its wording:

* meaning — cosine of the two texts under the packaged multilingual encoder (USE-m3, the
  judge's own, whatever the store embeds with), of their value-masked forms (the same slot,
  values aside), of their subjects, and the English paraphrase model's cosine;
* what the texts say — canonical values (:mod:`memory.policy.reading`) equal / changed /
  new, changed inside the subject (another entity: region, period, table) or after the
  predicate (a new value of the same slot);
* where they differ — units aligned across the two texts (:mod:`memory.policy.align`): what is
  left unmatched on each side, before or after the predicate, values or words;
* change cues, corrections, one-sided negation, names (acronyms) that differ, and the old
  alignment rules' verdict as one signal among the rest;
* names as values (:mod:`memory.policy.names`: people, vendors, places found by capitalisation and
  jieba's name tags) — unmatched before the predicate (another entity) or after it on both sides
  (a new owner / vendor / city of the same slot);
* a second, static view of meaning (WordLlama, :mod:`memory.policy.static_view`): cosines of the
  texts, of their value-masked forms and of those with names masked too (the slot without its value).

Beside the trees sits a logistic regression (:class:`LinearPart`) over the encoder's own view of
the pair — ``|a-b|`` and ``a*b`` of the two texts' vectors and of their value-masked forms — plus
the standardised features above; its log-odds are added to the trees'. The trees see only what
the hand-described features measure; the linear part lets the encoder say which *dimensions* of
meaning differ (a new city vs another metric), which no single cosine shows. On the fit + choose
kinds (5-fold, folds by kind) the sum ranked pairs better than either part alone. The trees also
read the pair vector's top principal components (:class:`Projection`), so they can combine where
the encoder's view differs with the described features (out of fold: updates resolved +.05).

The model gives P(same fact). A pair is merged when it clears the threshold; the incoming
statement then becomes the current one (an update wins; a restatement loses nothing by it).
Pairs within ``unsure_band`` of the threshold are the ones an LLM is asked about when
``policy.chat_model`` is set.
"""

from __future__ import annotations

import difflib
import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from memory.errors import InvalidConfig
from memory.policy import dedupe
from memory.policy.align import ALIGN_FEATURES, align_features, unit_text, units
from memory.policy.judge_lang import pair_lang
from memory.policy.judge_linear import LinearPart, Projection, pair_vector
from memory.policy.names import NAME_FEATURES, name_features
from memory.policy.reading import SCOPE_CLASSES, Reading, changed_classes, equal_classes, read
from memory.policy.static_view import STATIC_FEATURES, StaticView, static_features, static_view
from memory.text import tokenize
from memory.worker import LazyWorker

_log = logging.getLogger(__name__)
MODEL_FILE = Path(__file__).with_name("judge_model.json")
JUDGE_EMBEDDING_MODEL = "local/use-multilingual-v3"

PAIR_FEATURES: tuple[str, ...] = (
    "cos", "cos_para", "cos_masked", "cos_subject", "surface", "jaccard", "cross", "both_latin",
    "n_equal", "n_changed", "changed_subject", "changed_rest", "changed_scope", "new_values", "lost_values",
    "cue_strong", "cue_weak", "cue_existing", "negation_flip", "names_differ", "names_shared",
    "rule_duplicate", "rule_conflict", "length_ratio", "para_gap", "mask_gap", "changed_x_masked",
    "cross_x_cos", "cue_x_masked", "value_only_change",
)
FEATURES: tuple[str, ...] = PAIR_FEATURES + ALIGN_FEATURES + NAME_FEATURES + STATIC_FEATURES


def _cap(x: float, hi: float = 3.0) -> float:
    return min(float(x), hi)


@lru_cache(maxsize=16384)
def _tokens(text: str) -> frozenset[str]:
    return frozenset(tokenize(text))


def _surface(a: str, b: str) -> float:
    return difflib.SequenceMatcher(a=dedupe._diff_seq(a), b=dedupe._diff_seq(b), autojunk=False).ratio()


def _changed_positions(r: Reading, classes: set[str], other: dict[str, frozenset[str]]) -> list[float]:
    n = max(1, len(r.text))
    return [((v.start + v.end) / 2) / n for v in r.values if v.cls in classes and v.canon not in other.get(v.cls, ())]


def pair_features(existing: str, incoming: str, *, cos: float, cos_masked: float, cos_subject: float,
                  cos_para: float | None) -> dict[str, float]:
    """The hand-described features of one pair (pure; the cosines come from :class:`PairJudge`)."""
    ra, rb = read(existing), read(incoming)
    cross = ra.cjk != rb.cjk
    both_latin = not (dedupe._CJK.search(existing) or dedupe._CJK.search(incoming))
    para = cos_para if (cos_para is not None and both_latin) else cos
    surface = 0.0 if cross else _surface(existing, incoming)
    ta, tb = _tokens(existing), _tokens(incoming)
    jacc = len(ta & tb) / len(ta | tb) if ta | tb else 1.0
    va, vb = ra.classes(), rb.classes()
    changed, equal = changed_classes(va, vb), equal_classes(va, vb)
    changed_subject = changed_classes(ra.classes("subject"), rb.classes("subject"))
    changed_rest = changed_classes(ra.classes("rest"), rb.classes("rest"))
    new_values = len(vb.keys() - va.keys())
    lost_values = len(va.keys() - vb.keys())
    (strong_a, weak_a), (strong_b, weak_b) = dedupe._cues(existing), dedupe._cues(incoming)
    neg_a, neg_b = bool(dedupe._NEGATION.search(existing)), bool(dedupe._NEGATION.search(incoming))
    ea, eb = dedupe.entities(existing), dedupe.entities(incoming)
    rule = dedupe._rule_judge(existing, incoming, cos).label
    la, lb = len(ra.text), len(rb.text)
    pos = _changed_positions(rb, changed, va)
    changed_any = 1.0 if changed else 0.0
    cue = 1.0 if (strong_b and not strong_a) else 0.0
    return {
        "cos": cos, "cos_para": para, "cos_masked": cos_masked, "cos_subject": cos_subject,
        "surface": surface, "jaccard": jacc, "cross": float(cross), "both_latin": float(both_latin),
        "n_equal": _cap(len(equal)), "n_changed": _cap(len(changed)),
        "changed_subject": float(bool(changed_subject)), "changed_rest": float(bool(changed_rest)),
        "changed_scope": float(bool(changed & SCOPE_CLASSES)),
        "new_values": _cap(new_values), "lost_values": _cap(lost_values),
        "cue_strong": cue, "cue_weak": float(weak_b and not (weak_a or strong_a)),
        "cue_existing": float(strong_a or weak_a), "negation_flip": float(neg_a != neg_b),
        "names_differ": float(bool(ea and eb and not (ea <= eb or eb <= ea))),
        "names_shared": float(bool(ea & eb)),
        "rule_duplicate": float(rule == "duplicate"), "rule_conflict": float(rule == "conflict"),
        "length_ratio": min(la, lb) / max(la, lb, 1), "para_gap": para - surface,
        "mask_gap": cos_masked - cos, "changed_x_masked": changed_any * cos_masked,
        "cross_x_cos": float(cross) * cos, "cue_x_masked": cue * cos_masked,
        # Every change sits after the predicate and the subjects read alike: a new value of one slot.
        "value_only_change": float(bool(changed) and not changed_subject and (not pos or min(pos) > 0.3)),
    }




@dataclass(frozen=True)
class Verdict:
    label: str  # duplicate | conflict | distinct
    p_same: float  # P(the two state the same fact), from the model
    merge: bool
    unsure: bool
    reason: str
    merged: str | None = None  # an LLM's merged statement for an update, when one was asked


@dataclass(frozen=True)
class TreeModel:
    """A gradient-boosted ensemble of binary trees over named features (log-odds of "same fact").

    Each tree is a list of nodes ``[feature, threshold, left, right, value]``; a node whose
    ``feature`` is -1 is a leaf holding ``value``. ``x[feature] <= threshold`` goes left.
    Exported from scikit-learn's ``HistGradientBoostingClassifier`` by ``memctl.tune_judge``, so
    the package needs numpy only.
    """

    features: tuple[str, ...]
    baseline: float
    trees: tuple[np.ndarray, ...]  # (n_nodes, 5) float arrays
    merge_threshold: float
    unsure_band: float
    info: dict[str, Any]
    linear: LinearPart | None = None
    # Principal directions of the pair vector; the trees read them after the named features
    # (a tree feature index >= len(features) is one of them).
    projection: Projection | None = None
    # Per write-time language (memory.policy.judge_lang.pair_lang): the threshold a pair of that
    # language must reach, chosen out of author by memctl.tune_judge. ``merge_threshold`` stays a
    # floor for every pair (a stricter one set by the caller, e.g. the deferred write threshold,
    # still applies), and is the threshold when the language is not given or not listed.
    lang_thresholds: tuple[tuple[str, float], ...] = ()

    @classmethod
    def load(cls, path: str | Path = MODEL_FILE, extra_features: tuple[str, ...] = ()) -> TreeModel:
        """``extra_features``: inputs beyond :data:`FEATURES` the caller computes itself (the
        consolidation judge's ``e5_cos``, :mod:`memory.policy.consolidate_judge`)."""
        p = Path(path)
        try:
            obj = json.loads(p.read_text(encoding="utf-8"))
            model = cls(tuple(obj["features"]), float(obj["baseline"]),
                        tuple(np.asarray(t, dtype=float).reshape(-1, 5) for t in obj["trees"]),
                        float(obj["merge_threshold"]), float(obj["unsure_band"]), dict(obj.get("info", {})),
                        LinearPart.from_json(obj["linear"]) if obj.get("linear") else None,
                        Projection.from_json(obj["projection"]) if obj.get("projection") else None,
                        tuple((str(k), float(t)) for k, t in sorted(obj.get("lang_thresholds", {}).items())))
            if model.linear is not None and model.linear.mean.shape != (len(model.features),):
                raise ValueError("the linear part's feature statistics do not match the feature list")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise InvalidConfig(f"cannot read the dedupe judge model {p}: {exc}; reinstall the package "
                                "(pip install -e .) or refit it with python -m memctl.tune_judge") from exc
        unknown = set(model.features) - set(FEATURES) - set(extra_features)
        if unknown:
            raise InvalidConfig(f"dedupe judge model {p} does not match this code (features {sorted(unknown)}); "
                                "refit it with python -m memctl.tune_judge")
        return model

    def to_json(self) -> dict[str, Any]:
        return {"features": list(self.features), "baseline": round(self.baseline, 8),
                "trees": [[[int(n[0]), round(float(n[1]), 8), int(n[2]), int(n[3]), round(float(n[4]), 8)]
                           for n in t] for t in self.trees],
                "merge_threshold": self.merge_threshold, "unsure_band": self.unsure_band, "info": self.info,
                **({"linear": self.linear.to_json()} if self.linear is not None else {}),
                **({"projection": self.projection.to_json()} if self.projection is not None else {}),
                **({"lang_thresholds": dict(self.lang_thresholds)} if self.lang_thresholds else {})}

    def vector(self, feats: dict[str, float]) -> np.ndarray:
        return np.array([feats[f] for f in self.features], dtype=float)

    def log_odds(self, x: np.ndarray, pv: np.ndarray | None = None) -> float:
        """Log-odds of "same fact"; ``pv`` (:func:`pair_vector`) is needed when the model has a
        linear part or a projection."""
        z = self.baseline
        if (self.linear is not None or self.projection is not None) and pv is None:
            raise ValueError("this judge model reads the pair vector: pass it (judge.pair_vector)")
        if self.linear is not None:
            z += self.linear.log_odds(x, pv)
        # All trees walked at once, one level per step (they are shallow), on padded node tables;
        # a per-node Python walk cost ~0.5-0.9 ms a pair. The leaves are then added one by one
        # in tree order, as before: the same float64 additions, the same sum.
        feature, threshold, left, right, value = self._node_table
        rows = np.arange(len(self.trees))
        node = np.zeros(len(self.trees), dtype=np.intp)
        xv = np.asarray(x, dtype=float)
        if self.projection is not None:
            xv = np.concatenate([xv, self.projection(pv)])
        while True:
            f = feature[rows, node]
            inner = f >= 0
            if not inner.any():
                break
            go_left = xv[np.where(inner, f, 0)] <= threshold[rows, node]
            node = np.where(inner, np.where(go_left, left[rows, node], right[rows, node]), node)
        for leaf in value[rows, node].tolist():
            z += leaf
        return float(z)

    @cached_property
    def _node_table(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The trees as padded (n_trees, max_nodes) arrays: feature (-1 = leaf or padding),
        threshold, left, right, value."""
        width = max((len(t) for t in self.trees), default=1)
        feature = np.full((len(self.trees), width), -1, dtype=np.intp)
        threshold = np.zeros((len(self.trees), width))
        left = np.zeros((len(self.trees), width), dtype=np.intp)
        right = np.zeros((len(self.trees), width), dtype=np.intp)
        value = np.zeros((len(self.trees), width))
        for k, t in enumerate(self.trees):
            n = len(t)
            feature[k, :n] = t[:, 0].astype(np.intp)
            threshold[k, :n], value[k, :n] = t[:, 1], t[:, 4]
            left[k, :n], right[k, :n] = t[:, 2].astype(np.intp), t[:, 3].astype(np.intp)
        return feature, threshold, left, right, value

    def p_same(self, x: np.ndarray, pv: np.ndarray | None = None) -> float:
        return 1.0 / (1.0 + np.exp(-self.log_odds(x, pv)))

    def threshold(self, lang: str | None = None) -> float:
        """The P(same) a pair of write-time language ``lang`` must reach to merge."""
        return max(self.merge_threshold, dict(self.lang_thresholds).get(lang or "", self.merge_threshold))

    def decide(self, p_same: float, feats: dict[str, float], lang: str | None = None) -> Verdict:
        t = self.threshold(lang)
        merge = p_same >= t
        # The band is in log-odds: "unsure" means within a factor e^band of the threshold's odds.
        unsure = abs(_logit(p_same) - _logit(t)) < self.unsure_band
        label = ("conflict" if _states_new_value(feats) else "duplicate") if merge else "distinct"
        where = f" ({lang})" if lang and self.lang_thresholds else ""
        reason = f"P(same fact) {p_same:.2f} {'>=' if merge else '<'} {t:.2f}{where}; {_describe(feats)}"
        return Verdict(label, p_same, merge, unsure, reason)


def _logit(p: float) -> float:
    p = min(max(p, 1e-9), 1 - 1e-9)
    return float(np.log(p / (1 - p)))


def _states_new_value(f: dict[str, float]) -> bool:
    """For a merged pair: does the incoming text change what the stored one says (an update) rather
    than restate it? Only names the audit label; either way the incoming statement becomes current."""
    return bool(f["n_changed"] or f["cue_strong"] or f["negation_flip"] or (f["un_values_a"] and f["un_values_b"]))


def _describe(f: dict[str, float]) -> str:
    """A short human account of the pair for the audit log (what was compared, not why the model
    weighed it so: a tree ensemble has no two-feature explanation)."""
    bits = [f"cos {f['cos']:.2f}"]
    if f["cos_para"] != f["cos"]:
        bits.append(f"paraphrase {f['cos_para']:.2f}")
    bits.append(f"unmatched {int(f['un_a'])}/{int(f['un_b'])}")
    if f["n_changed"]:
        bits.append(f"{int(f['n_changed'])} value(s) changed")
    if f["cue_strong"]:
        bits.append("change cue")
    if f["cross"]:
        bits.append("cross-language")
    return ", ".join(bits)


class PairJudge:
    """Computes what the features need (encoder vectors cached per text and per unit) and applies
    the fitted model. Verdicts are cached per pair. Thread-safe.

    ``embed`` maps texts to L2-normalised rows (the packaged USE-m3 by default); ``paraphrase``
    scores two English texts (MiniLM) or is None.

    Example:
        >>> j = PairJudge()
        >>> j("The user prefers CSV exports.", "Exports should be CSV files, the user says.").merge
        True
        >>> j("East China GMV in 2024 was 1.2M yuan", "South China GMV in 2024 was 0.8M yuan").label
        'distinct'
    """

    # The static view (memory.policy.static_view) whose cosines are features; None: the process-wide one.
    static: StaticView | None = None

    def __init__(self, model: TreeModel | None = None, *, embed: Callable[[list[str]], np.ndarray] | None = None,
                 paraphrase: Callable[[str, str], float] | None = None, cache_size: int = 16384,
                 encoder_id: str | None = None):
        self.model = model or default_model()
        self._embed_fn = embed
        # The encoder's name, for vectors kept beyond this process (memory.policy.view_cache);
        # None for an injected encoder that gave none: its vectors are never persisted.
        self.encoder_id = JUDGE_EMBEDDING_MODEL if embed is None else encoder_id
        self.paraphrase = paraphrase
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._verdicts: OrderedDict[tuple[str, str], Verdict] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()
        self._warned = False

    def _put(self, text: str, v: np.ndarray) -> None:
        self._cache[text] = np.asarray(v, dtype=np.float32)
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)

    def _embed(self, texts: Sequence[str]) -> list[np.ndarray]:
        with self._lock:
            missing = [t for t in dict.fromkeys(texts) if t not in self._cache]
        if missing:
            rows = (self._embed_fn or _default_embed)(missing)
            with self._lock:
                for t, v in zip(missing, rows, strict=True):
                    self._put(t, v)
        with self._lock:
            out = []
            for t in texts:
                v = self._cache.get(t)
                if v is None:  # evicted between the two locks: embed it alone
                    v = np.asarray((self._embed_fn or _default_embed)([t])[0], dtype=np.float32)
                else:
                    self._cache.move_to_end(t)
                out.append(v)
            return out

    def seed(self, text: str, vector: np.ndarray) -> None:
        """Hand over a vector the store already computed with the judge's own model."""
        with self._lock:
            self._put(text, vector)

    def cached(self, text: str) -> np.ndarray | None:
        """The encoder's vector of ``text`` if this process has it (never embeds)."""
        with self._lock:
            return self._cache.get(text)

    def vector(self, text: str) -> np.ndarray:
        """The encoder's vector of one text (cached; embedded on a miss)."""
        return self._embed([text])[0]

    @staticmethod
    def _views(text: str) -> list[str]:
        r = read(text)
        return [text, r.masked, r.subject or text] + [unit_text(u) for u in units(text)]

    def view_texts(self, text: str) -> list[str]:
        """The strings whose encoder vectors the features of ``text`` read (what :meth:`prime` embeds)."""
        return self._views(text)

    def prime(self, texts: Sequence[str]) -> None:
        """Embed everything the features of these texts need: the encoder's views in one batch per
        512 strings, and each English text's paraphrase vector. Returns when both are done.

        The manager primes a text at its own write, so the work a later comparison needs of it
        is done once, by the write that stored it: a write that meets an English neighbour then
        runs the paraphrase model on its own text only, not on the neighbour's too (two ~6 ms
        model runs on the same write were the tail of write latency). The paraphrase model runs
        on a worker thread while this one reads the texts and runs the encoder: both models
        release the GIL in their kernels and each runs on one thread, so the write waits for the
        slower of the two instead of their sum.
        """
        unique = list(dict.fromkeys(texts))
        pending = self._prime_paraphrase_async(unique)
        try:
            views = [v for t in unique for v in self._views(t)]
            for i in range(0, len(views), 512):
                self._embed(views[i: i + 512])
        finally:
            if pending is not None:
                pending.result()  # never raises: _prime_paraphrase swallows a missing model

    def _prime_paraphrase_async(self, texts: Sequence[str]) -> Future[None] | None:
        # Only a scorer that caches per text can be primed (ParaphraseScorer.embed); a plain
        # similarity callable is simply called per pair. pair_view reads the paraphrase model for
        # Latin pairs only, so Chinese texts are left out.
        if getattr(self.paraphrase, "embed", None) is None:
            return None
        latin = [t for t in texts if not dedupe._CJK.search(t)]
        if not latin:
            return None
        return PARAPHRASE_WORKER.submit(self._prime_paraphrase, latin)

    def _prime_paraphrase(self, texts: Sequence[str]) -> None:
        # Each text is embedded on its own, as similarity() does, so a primed vector is the very
        # vector the pair would have computed.
        embed = self.paraphrase.embed  # type: ignore[union-attr]
        for t in texts:
            try:
                embed(t)
            except Exception as exc:  # noqa: BLE001 - a missing model: pair_view falls back (and warns)
                _log.debug("paraphrase model not primed: %s", exc)
                return

    def features(self, existing: str, incoming: str) -> dict[str, float]:
        return self.pair_view(existing, incoming)[0]

    def pair_view(self, existing: str, incoming: str) -> tuple[dict[str, float], np.ndarray]:
        """The pair's features and its :func:`pair_vector` (what the model reads)."""
        ra, rb = read(existing), read(incoming)
        va, vb, ma, mb, sa, sb = self._embed([existing, incoming, ra.masked, rb.masked,
                                              ra.subject or existing, rb.subject or incoming])
        para = None
        if self.paraphrase is not None and not (dedupe._CJK.search(existing) or dedupe._CJK.search(incoming)):
            try:
                para = float(self.paraphrase(existing, incoming))
            except Exception as exc:  # noqa: BLE001 - a missing paraphrase model: the encoder's cosine stands in
                if not self._warned:
                    self._warned = True
                    _log.warning("paraphrase model unavailable, the judge uses the encoder's cosine: %s", exc)
                para = None
        feats = pair_features(existing, incoming, cos=float(va @ vb), cos_masked=float(ma @ mb),
                              cos_subject=float(sa @ sb), cos_para=para)
        feats.update(align_features(existing, incoming, self._embed))
        feats.update(name_features(existing, incoming))
        feats.update(static_features(self.static or static_view(), existing, incoming))
        return feats, pair_vector(va, vb, ma, mb)

    def __call__(self, existing: str, incoming: str) -> Verdict:
        key = (existing, incoming)
        with self._lock:
            hit = self._verdicts.get(key)
        if hit is not None:
            return hit
        if dedupe._norm(existing) == dedupe._norm(incoming):
            v = Verdict("duplicate", 1.0, True, False, "same words")
        else:
            feats, pv = self.pair_view(existing, incoming)
            v = self.model.decide(float(self.model.p_same(self.model.vector(feats), pv)), feats,
                                  pair_lang(existing, incoming))
        with self._lock:
            self._verdicts[key] = v
            if len(self._verdicts) > self._cache_size:
                self._verdicts.popitem(last=False)
        return v


def _default_embed(texts: list[str]) -> np.ndarray:
    from memory.embeddings import get_embedder

    return get_embedder(JUDGE_EMBEDDING_MODEL).embed_documents(texts)


# One thread for the paraphrase model (it runs one text at a time anyway).
PARAPHRASE_WORKER = LazyWorker("judge-paraphrase")

_DEFAULT: TreeModel | None = None
_DEFAULT_LOCK = threading.Lock()


def default_model() -> TreeModel:
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            _DEFAULT = TreeModel.load()
        return _DEFAULT
