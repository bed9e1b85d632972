"""Text as it enters ragteam (a question, a dataset record, a corpus passage, a command-line
argument): cleaned once, there, so nothing downstream meets text it cannot encode.

Python hands undecodable command-line bytes over as lone surrogates, and JSON can spell them
(``"\\ud800"``); neither is valid UTF-8, so a tokenizer, a JSON writer or an HTML page would fail
on them later, far from the input. Each becomes U+FFFD, the replacement character.
"""

from __future__ import annotations

import re

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD."""
    return _LONE_SURROGATE.sub("\ufffd", text)
