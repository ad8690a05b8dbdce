"""The write-time language of a pair (en / zh / mixed), read from its two texts.

The judge's merge threshold may differ by language (:class:`memory.policy.judge.TreeModel`
``lang_thresholds``): out of author, distinct English look-alikes score higher than Chinese ones,
so one threshold that keeps Chinese false merges at the target lets English ones through (issue
11). At write time only the texts are known, so the language is read from them, the way the
pair files label it: a text without Han characters is ``en``; one whose Latin letters outnumber
its Han characters three to one is ``mixed``; else ``zh``. A pair is its texts' language when
they agree, else ``mixed`` (a cross-language pair). This agrees with the files' own ``lang`` on
~99% of the corpus pairs (measured by :mod:`memctl.tune_judge`).

Example:
    >>> pair_lang("Prefers CSV", "Wants CSV exports")
    'en'
    >>> pair_lang("喜欢 CSV 格式", "导出用 CSV")
    'zh'
    >>> pair_lang("Prefers CSV", "导出用 CSV")
    'mixed'
"""

from __future__ import annotations

import re

LANGS = ("en", "zh", "mixed")
_HAN = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
_LATIN = re.compile(r"[A-Za-z]")


def text_lang(text: str) -> str:
    """``en`` / ``zh`` / ``mixed`` for one text (see the module docstring)."""
    han = len(_HAN.findall(text))
    if han == 0:
        return "en"
    return "mixed" if len(_LATIN.findall(text)) > 3 * han else "zh"


def pair_lang(existing: str, incoming: str) -> str:
    """The pair's language: its texts' when they agree, else ``mixed``."""
    a, b = text_lang(existing), text_lang(incoming)
    return a if a == b else "mixed"
