"""Coalesce requests from many concurrent graph runs into batched generate calls.

Each graph node awaits a single request; on its own that would run the model at batch size 1.
The coalescer queues requests, and a worker drains the queue into batches (grouped by decoding
settings that must agree inside one ``generate`` call) that run in a worker thread, so the event
loop keeps advancing other graph runs — and queueing their requests — while a batch decodes.

Each event loop has its own queue and worker: a policy shared by runs on two loops (a trainer's
asynchronous rollouts on theirs, an evaluation on the main thread's) batches each loop's requests
apart, and the policy's decode lock takes the batches one at a time. (One queue for both would be
drained by two workers in two threads, and a future completed from the wrong loop.)
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any, Callable, Hashable, Sequence

from ragteam.nodes.policies.protocol import Generation, GenerationRequest

BatchFn = Callable[[list[GenerationRequest]], list[Generation]]


def decoding_key(request: GenerationRequest) -> Hashable:
    """Requests may share a batch only if they decode the same way (greedy vs. temperature)."""
    return (request.sampling.greedy, round(request.sampling.temperature, 6))


class RequestCoalescer:
    """``submit`` queues items (generation requests, or anything ``key`` can sort) for
    ``run_batch``, which gets up to ``max_batch_size`` of one ``key`` at a time."""

    def __init__(self, run_batch: BatchFn, max_batch_size: int = 32, gather_window_s: float = 0.01,
                 key: Callable[[Any], Hashable] = decoding_key):
        self._run_batch = run_batch
        self.max_batch_size = max_batch_size
        self.gather_window_s = gather_window_s
        self.key = key
        # per event loop, while its worker drains (a loop's entries go when its queue empties)
        self._queues: dict[asyncio.AbstractEventLoop, deque] = {}
        self._workers: dict[asyncio.AbstractEventLoop, asyncio.Task] = {}
        self.batch_sizes: list[int] = []  # observed batch sizes, for benchmarks and tests

    async def submit(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        loop = asyncio.get_running_loop()
        queue = self._queues.setdefault(loop, deque())
        futures = []
        for request in requests:
            future = loop.create_future()
            queue.append((request, future))
            futures.append(future)
        worker = self._workers.get(loop)
        if worker is None or worker.done():
            self._workers[loop] = loop.create_task(self._drain(queue))
        return list(await asyncio.gather(*futures))

    async def _drain(self, queue: deque) -> None:
        try:
            while queue:
                # Let the other graph runs reach their next model call before cutting a batch.
                await asyncio.sleep(self.gather_window_s)
                batch = take_batch(queue, self.max_batch_size, self.key)
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
        finally:  # no await since the queue was found empty: nothing was queued meanwhile
            loop = asyncio.get_running_loop()
            self._queues.pop(loop, None)
            self._workers.pop(loop, None)


def take_batch(queue: deque, max_batch_size: int,
               key: Callable[[Any], Hashable] = decoding_key) -> list[tuple[GenerationRequest, asyncio.Future]]:
    """Up to ``max_batch_size`` queued requests of the first one's ``key`` (by default: that
    decode like it), in order; the rest stay queued, in order."""
    first = key(queue[0][0])
    batch, rest = [], deque()
    while queue:
        item = queue.popleft()
        if len(batch) < max_batch_size and key(item[0]) == first:
            batch.append(item)
        else:
            rest.append(item)
    queue.extendleft(reversed(rest))
    return batch
