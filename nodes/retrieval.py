"""Retrieval as a tool call: every graph's retrieval step goes through ``retrieve`` so it is
counted on the run's tracer and never blocks the event loop."""

from __future__ import annotations

import asyncio

from ragteam.nodes.context import RunContext
from ragteam.stores.documents import Document
from ragteam.stores.retriever import search_unseen


async def retrieve(ctx: RunContext, query: str, k: int | None = None,
                   seen: set[str] | None = None) -> list[Document]:
    """Top-k documents for ``query``; with ``seen``, only documents the run has not read yet."""
    if ctx.retriever is None:
        raise RuntimeError("this graph retrieves but the run has no retriever")
    k = ctx.settings.top_k if k is None else k
    ctx.tracer.retrievals += 1
    if seen is None:
        return await asyncio.to_thread(ctx.retriever.search, query, k)
    return await asyncio.to_thread(search_unseen, ctx.retriever, query, k, seen)
