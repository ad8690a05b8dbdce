"""memory.policy.zh_pos: jieba's POS tags with the HMM step in numpy must be jieba's own tags."""

from __future__ import annotations

import json
import re
import unicodedata
from pathlib import Path

import pytest

from memory.policy import zh_pos
from memory.policy.names import _posseg, names
from memory.policy.reading import read

DATA = Path(__file__).resolve().parents[1] / "data"
_HAN = re.compile("[\u4e00-\u9fd5]+")

# Traditional / Cantonese runs (mostly unseen by jieba's Simplified HMM: every state stays open),
# Simplified ones, single characters, and characters jieba has no entry for at all.
RUNS = [
    "用戶係保險代理人喺尖沙咀分行做咗九年", "入行到而家九個年頭由第一日起就坐喺尖咀辦公室",
    "我哋講嘅圓桌就係嗰個要做夠生意先有資格參加嘅國際會籍", "報價單上面啲銀碼全部轉做", "旭日嘅標準色係深藍",
    "用户每周三下午去健身房", "报销问题找财务", "安全事件联系人信息安全部张磊", "华东区", "一", "係", "喺",
    "嘅咗哋", "囍龘靐", "以后报表都用万元为单位", "老爺都係姓陳嘅佢九月廿三生日記得提我買蛋糕",
]


def _jieba_viterbi(obs: str) -> tuple[float, tuple[tuple[str, str], ...]]:
    from jieba.posseg import char_state_tab_P, emit_P, start_P, trans_P
    from jieba.posseg.viterbi import viterbi

    prob, route = viterbi(obs, char_state_tab_P, start_P, trans_P, emit_P)
    return prob, tuple(route)


def _corpus_runs(limit: int) -> list[str]:
    """Han runs of the Cantonese held-out author's texts (the ones that were slow)."""
    out: list[str] = []
    for line in (DATA / "dedupe_heldout" / "author_ab.jsonl").read_text(encoding="utf-8").splitlines():
        obj = json.loads(line)
        for key in ("existing", "incoming"):
            out += _HAN.findall(unicodedata.normalize("NFKC", obj[key]).lower())
    return sorted(set(out), key=lambda r: (-len(r), r))[:limit]


@pytest.mark.parametrize("run", RUNS + _corpus_runs(12))
def test_viterbi_is_jiebas(run: str) -> None:
    """The same route and the same float score, to the last bit."""
    assert zh_pos._viterbi(run) == _jieba_viterbi(run)


def test_tags_are_jiebas_on_mixed_text() -> None:
    import jieba.posseg as posseg

    tagger = _posseg()
    for text in ["保單嗰個 tab 嘅 status，講嘅係張單生效緊、斷咗供定係退咗保。",
                 "Kelvin 喺上個月個組會應承咗整扣稅計算表", "九龍灣講座：訂咗佢哋12樓培訓室，7月3號",
                 "以后报表都用万元为单位", "East China GMV 2024 华东区 1.2M"]:
        assert [(p.word, p.flag) for p in tagger.cut(text)] == [(p.word, p.flag) for p in posseg.dt.cut(text)]


def test_the_judge_never_runs_jiebas_python_viterbi(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reading and the names of a Chinese text go through zh_pos, not jieba's own loop (which
    cost 30-170 ms of a write on Traditional text)."""
    import jieba.posseg as posseg

    _posseg()  # loaded before the patch

    def forbidden(*_a: object, **_k: object) -> None:
        raise AssertionError("jieba's pure-Python POS Viterbi ran")

    monkeypatch.setattr(posseg, "viterbi", forbidden)
    text = "佢哋嗰間舖頭喺旺角開咗廿幾年，老闆姓麥，星期日唔開門。"  # unseen by every cache here
    assert names(text) is not None
    assert read(text).split > 0
