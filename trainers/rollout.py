"""Phase 1 of a training step: run the method graph on a batch of questions with the current
policy (sampling), several runs at a time so their model calls share batched decoding."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Sequence

from graphs.run import RunResult, arun
from nodes.context import RunContext
from stores.datasets import QAExample


@dataclass
class Rollout:
    example: QAExample
    result: RunResult


async def collect(graph, examples: Sequence[QAExample], ctx: RunContext, samples: int,
                  concurrency: int, tag: str) -> list[Rollout]:
    """``samples`` runs per question (GRPO groups need more than one), in question order."""
    gate = asyncio.Semaphore(max(1, concurrency))

    async def one(example: QAExample, k: int) -> Rollout:
        async with gate:
            result = await arun(graph, example.question, ctx, run_id=f"{tag}-{example.id}-{k}")
        return Rollout(example, result)

    return list(await asyncio.gather(*(one(e, k) for e in examples for k in range(samples))))
