"""PII redaction before write: emails, phone numbers (incl. mainland-China mobiles), ID and
card numbers. Conservative patterns: dates, amounts and order numbers must survive."""

from __future__ import annotations

import re
from dataclasses import dataclass

_EMAIL = re.compile(r"(?<![\w.+-])[\w.+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}")
# 18-digit PRC resident ID: region(6) + birth date(8) + sequence(3) + check digit.
_CN_ID = re.compile(r"(?<![\dA-Za-z])[1-9]\d{5}(?:19|20)\d{2}(?:0[1-9]|1[0-2])(?:0[1-9]|[12]\d|3[01])\d{3}[\dXx](?![\dA-Za-z])")
_CN_MOBILE = re.compile(r"(?<![\d+])(?:(?:\+|00)86[\s-]?)?1[3-9]\d(?:[\s-]?\d{4}){2}(?!\d)")
_INTL_PHONE = re.compile(r"(?<![\w+])(?:\+|00)\d{1,3}[\s.-]?(?:\(\d{1,4}\)[\s.-]?)?\d{2,4}(?:[\s.-]?\d{2,4}){1,3}(?!\d)")
_NANP_PHONE = re.compile(r"(?<![\w+])\(?\d{3}\)?[\s.-]\d{3}[\s.-]\d{4}(?!\d)")
_SSN = re.compile(r"(?<!\d)\d{3}-\d{2}-\d{4}(?!\d)")
_CARD = re.compile(r"(?<!\d)(?:\d[ -]?){12,18}\d(?!\d)")


def _luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2 == 1:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


@dataclass(frozen=True)
class Redaction:
    text: str
    counts: dict[str, int]

    @property
    def changed(self) -> bool:
        return bool(self.counts)


def redact(text: str) -> Redaction:
    """Replace PII with ``[EMAIL]``, ``[PHONE]``, ``[ID_NUMBER]``, ``[CARD_NUMBER]``."""
    counts: dict[str, int] = {}

    def sub(pattern: re.Pattern[str], label: str, s: str, check: object = None) -> str:
        def repl(m: re.Match[str]) -> str:
            if check is not None and not check(m.group()):  # type: ignore[operator]
                return m.group()
            counts[label] = counts.get(label, 0) + 1
            return f"[{label}]"

        return pattern.sub(repl, s)

    out = sub(_EMAIL, "EMAIL", text)
    out = sub(_CN_ID, "ID_NUMBER", out)
    out = sub(_SSN, "ID_NUMBER", out)
    # Phones with a country code or a CN mobile prefix go before cards: "+86 138…" passes Luhn by chance.
    out = sub(_CN_MOBILE, "PHONE", out)
    out = sub(_INTL_PHONE, "PHONE", out)
    out = sub(_CARD, "CARD_NUMBER", out, lambda s: _luhn_ok(re.sub(r"\D", "", s)))
    out = sub(_NANP_PHONE, "PHONE", out)
    return Redaction(out, counts)
