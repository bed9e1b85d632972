"""State of one compiled workflow (one round on one target query) and its reducers."""

from __future__ import annotations

import operator
from typing import Annotated, TypedDict

from stores.documents import Document


def merge_documents(existing: list[Document] | None, new: list[Document] | None) -> list[Document]:
    """Union by document id, first occurrence wins: the join of parallel retrieval branches."""
    merged = list(existing or [])
    seen = {doc.id for doc in merged}
    for doc in new or []:
        if doc.id not in seen:
            seen.add(doc.id)
            merged.append(doc)
    return merged


class WorkflowState(TypedDict, total=False):
    # inputs
    task_id: str
    round: int
    question: str                     # the target query this round works on
    known: list[tuple[str, str]]      # Select(s_t): solved sub-questions the roles may see
    max_items: int                    # decomposition limit
    # intra-round context, written by the roles
    query: str                        # current search query (QR rewrites it)
    documents: Annotated[list[Document], merge_documents]
    selected: list[Document]          # DS's choice; AG reads it when present
    answer: str
    subquestions: list[str]
    # bookkeeping
    executed: Annotated[list[str], operator.add]  # node names in completion order (RA included)


class BranchOutput(TypedDict, total=False):
    """What a parallel branch hands to the join: its documents and bookkeeping, never its query."""

    documents: Annotated[list[Document], merge_documents]
    executed: Annotated[list[str], operator.add]
