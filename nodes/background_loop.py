"""An asyncio event loop in a daemon thread of its own, for work that must go on while the
calling thread does something else: a vLLM engine (which belongs to one loop while graph runs
come from many) and a trainer's asynchronous rollouts (which run while the learner updates)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading


class BackgroundLoop:
    """An event loop running in a daemon thread named ``name``."""

    def __init__(self, name: str):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self.thread.start()

    def submit(self, coroutine) -> concurrent.futures.Future:
        """Start ``coroutine`` on the loop and return at once; cancelling the future cancels it."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    def call(self, coroutine):
        """Run ``coroutine`` on the loop and wait for it (from a plain thread)."""
        return self.submit(coroutine).result()

    async def run(self, coroutine):
        """Run ``coroutine`` on the loop and await it from the caller's loop."""
        return await asyncio.wrap_future(self.submit(coroutine))

    def cancel_tasks(self) -> None:
        """Cancel every task on the loop and wait until each has ended (nothing dies mid-await)."""
        async def cancel_pending():
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        if self.thread.is_alive():
            self.call(cancel_pending())

    def stop(self) -> None:
        """Cancel what runs, stop the loop and join its thread; safe to call twice."""
        if self.thread.is_alive():
            self.cancel_tasks()
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=30)
