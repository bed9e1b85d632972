"""The record every store returns and every role reads."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Document:
    id: str
    title: str
    text: str
    score: float = 0.0

    def as_passage(self) -> str:
        return f"{self.title}: {self.text}" if self.title else self.text
