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

Set metric (``metric="set"``, PhantomWiki): the golds are not alternatives but one answer set, all
of it required. The prediction is read as a list (split on commas, semicolons, newlines and
"and"), each item normalized as above, number words read as digits ("two" == "2"); precision and
recall are those of the predicted set against the gold set, F1 their harmonic mean, EM whether the
sets are equal, acc whether every gold item was given.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from typing import Iterable

from ragteam.nodes.parsing import AND, LIST_SEPARATORS

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


ANSWER_METRICS = ("max", "set")  # best over alternative golds | the golds are one answer set

_UNITS = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
          "fifteen sixteen seventeen eighteen nineteen").split()
_TENS = {word: 10 * n for n, word in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split(), 2)}
_NUMBER_WORDS = {**{word: n for n, word in enumerate(_UNITS)}, **_TENS,
                 **{f"{ten}{unit}": value + n for ten, value in _TENS.items()  # "twenty-one": the hyphen
                    for n, unit in enumerate(_UNITS[1:10], 1)}}              # goes with punctuation


def _set_item(text: str) -> str:
    """One list item normalized; a number, as a word or digits, becomes its plain digits."""
    item = normalize(text)
    if item.replace(" ", "") in _NUMBER_WORDS:  # "twenty one" as well as "twentyone"
        return str(_NUMBER_WORDS[item.replace(" ", "")])
    return str(int(item)) if item.isdigit() and len(item) <= 6 else item  # "02" == "2"


def answer_items(prediction: str, golds: Iterable[str] = ()) -> set[str]:
    """The normalized items of a list answer. A piece that is itself a gold item is kept whole, so
    "health and safety inspector" is not split at its "and"; any other piece is split there."""
    gold_items = {_set_item(g) for g in golds}
    items = set()
    for piece in LIST_SEPARATORS.split(prediction or ""):
        whole = _set_item(piece)
        items.update([whole] if whole in gold_items else map(_set_item, AND.split(piece)))
    items.discard("")
    return items


def set_score(prediction: str, golds: Iterable[str]) -> dict[str, float]:
    """Precision/recall/F1 of the predicted set against the gold set; EM: the sets are equal."""
    golds = list(golds)
    gold, predicted = {_set_item(g) for g in golds} - {""}, answer_items(prediction, golds)
    common = len(gold & predicted)
    precision = common / len(predicted) if predicted else 0.0
    recall = common / len(gold) if gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if common else 0.0
    return {"em": float(bool(gold) and predicted == gold), "f1": f1, "precision": precision,
            "recall": recall, "acc": float(bool(gold) and gold <= predicted)}


def score(prediction: str, golds: Iterable[str], metric: str = "max") -> dict[str, float]:
    """EM / F1 / precision / recall / acc of one prediction: against the best-matching gold
    (``metric="max"``, SQuAD/HotpotQA) or against the golds as one answer set (``"set"``)."""
    if metric == "set":
        return set_score(prediction, golds)
    if metric != "max":
        raise ValueError(f"unknown answer metric {metric!r}; choose one of {', '.join(ANSWER_METRICS)}")
    golds = list(golds)
    pred = normalize(prediction or "")
    best = max((_token_scores(prediction or "", g) for g in golds), key=lambda s: s[0])
    return {
        "em": float(any(pred == normalize(g) for g in golds)),
        "f1": best[0], "precision": best[1], "recall": best[2],
        "acc": float(contains_gold(pred, golds)),
    }
