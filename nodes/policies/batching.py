"""Coalesce requests from many concurrent graph runs into batched generate calls.

Each graph node awaits a single request; on its own that would run the model at batch size 1.
The coalescer queues requests, and a worker drains the queue into batches (grouped by decoding
settings that must agree inside one ``generate`` call) that run in a worker thread, so the event
loop keeps advancing other graph runs — and queueing their requests — while a batch decodes.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Callable, Hashable, Sequence

from ragteam.nodes.policies.protocol import Generation, GenerationRequest

BatchFn = Callable[[list[GenerationRequest]], list[Generation]]


def decoding_key(request: GenerationRequest) -> Hashable:
    """Requests may share a batch only if they decode the same way (greedy vs. temperature)."""
    return (request.sampling.greedy, round(request.sampling.temperature, 6))


class RequestCoalescer:
    def __init__(self, run_batch: BatchFn, max_batch_size: int = 32, gather_window_s: float = 0.01):
        self._run_batch = run_batch
        self.max_batch_size = max_batch_size
        self.gather_window_s = gather_window_s
        self._queue: deque[tuple[GenerationRequest, asyncio.Future]] = deque()
        self._worker: asyncio.Task | None = None
        self.batch_sizes: list[int] = []  # observed batch sizes, for benchmarks and tests

    async def submit(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        loop = asyncio.get_running_loop()
        futures = []
        for request in requests:
            future = loop.create_future()
            self._queue.append((request, future))
            futures.append(future)
        if self._worker is None or self._worker.done() or self._worker.get_loop() is not loop:
            self._worker = loop.create_task(self._drain())
        return list(await asyncio.gather(*futures))

    async def _drain(self) -> None:
        while self._queue:
            # Let the other graph runs reach their next model call before cutting a batch.
            await asyncio.sleep(self.gather_window_s)
            batch = self._take_batch()
            try:
                results = await asyncio.to_thread(self._run_batch, [req for req, _ in batch])
            except BaseException as error:  # hand the failure to every waiter, keep serving
                for _, future in batch:
                    if not future.done():
                        future.set_exception(error)
                continue
            self.batch_sizes.append(len(batch))
            for (_, future), result in zip(batch, results):
                if not future.done():
                    future.set_result(result)

    def _take_batch(self) -> list[tuple[GenerationRequest, asyncio.Future]]:
        key = decoding_key(self._queue[0][0])
        batch, rest = [], deque()
        while self._queue:
            item = self._queue.popleft()
            if len(batch) < self.max_batch_size and decoding_key(item[0]) == key:
                batch.append(item)
            else:
                rest.append(item)
        self._queue.extendleft(reversed(rest))
        return batch
