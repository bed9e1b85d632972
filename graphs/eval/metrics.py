"""Answer metrics, SQuAD/HotpotQA style.

Normalization: lower-case, drop punctuation, drop the articles a/an/the, collapse white space.
- EM: normalized prediction equals a normalized gold.
- F1 / precision / recall: token overlap, best over the golds.
- acc: some normalized gold occurs, as whole words, in the normalized prediction (lenient; it
  credits long answers that contain the gold).
Yes/no/no-answer golds are scored by exact match only, as HotpotQA's official script does: when
the prediction or the gold normalizes to "yes", "no" or "noanswer" and they differ, F1 is 0;
when they match it is 1. Summaries also report F1 over the other questions alone
(``f1_no_yesno``), since a 135M model's answers to yes/no questions are rarely a bare yes/no.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from typing import Iterable

SPECIAL = {"yes", "no", "noanswer"}
_PUNCTUATION = set(string.punctuation)


def normalize(text: str) -> str:
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def _token_scores(prediction: str, gold: str) -> tuple[float, float, float]:
    """(f1, precision, recall) for one gold."""
    pred, ref = normalize(prediction), normalize(gold)
    if (pred in SPECIAL or ref in SPECIAL) and pred != ref:
        return 0.0, 0.0, 0.0
    pred_tokens, ref_tokens = pred.split(), ref.split()
    common = sum((Counter(pred_tokens) & Counter(ref_tokens)).values())
    if common == 0:
        return 0.0, 0.0, 0.0
    precision, recall = common / len(pred_tokens), common / len(ref_tokens)
    return 2 * precision * recall / (precision + recall), precision, recall


def contains_gold(text: str, golds: Iterable[str]) -> bool:
    """Whether some gold occurs, normalized and as whole words, in the normalized text."""
    padded = f" {normalize(text)} "
    return any(normalize(g) and f" {normalize(g)} " in padded for g in golds)


def is_yes_no(golds: Iterable[str]) -> bool:
    return any(normalize(g) in SPECIAL for g in golds)


def score(prediction: str, golds: Iterable[str]) -> dict[str, float]:
    golds = list(golds)
    pred = normalize(prediction or "")
    best = max((_token_scores(prediction or "", g) for g in golds), key=lambda s: s[0])
    return {
        "em": float(any(pred == normalize(g) for g in golds)),
        "f1": best[0], "precision": best[1], "recall": best[2],
        "acc": float(contains_gold(pred, golds)),
    }
