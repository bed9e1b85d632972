"""The learner's end of the weight channel: after an update, its weights stream to every rollout
engine at once, bucket by bucket, over a ``torch.distributed`` group (format and group:
``nodes.policies.weight_buckets``).

The object-store path (a safetensors blob per engine, one engine after another) costs a
serialized copy and an RPC message per engine; here every byte is packed once and broadcast
once, and each engine loads the tensors as their buckets arrive. The blob path stays for an
engine that restarts (it joins no channel until the channel is opened again).

    channel = WeightChannel([engine_a, engine_b])     # every engine joins; blocks until all have
    channel.send(learner.weights(), engine_a.engine_dtype)
"""

from __future__ import annotations

import time
from typing import Mapping, Sequence

import torch

from ragteam.nodes.policies.weight_buckets import (BUCKET_BYTES, broadcast, listening_socket, open_group, pack_buckets,
                                           plain_layout, without_tied_copies)


class WeightChannel:
    """Rank 0 of a group whose other ranks are the engines' workers. ``engines``: policies with
    ``in_background``, ``join_channel`` and ``receive_weights`` (``nodes.policies.vllm``)."""

    def __init__(self, engines: Sequence, transport: str = "gloo", host: str = "127.0.0.1",
                 bucket_bytes: int = BUCKET_BYTES):
        self.engines, self.transport, self.bucket_bytes = list(engines), transport, bucket_bytes
        self.server = listening_socket(host)  # the group's store, on ``host`` only
        port, world = self.server.getsockname()[1], 1 + len(self.engines)
        joining = [engine.in_background(engine.join_channel(host, port, rank, world, transport))
                   for rank, engine in enumerate(self.engines, 1)]
        self.group = open_group(host, port, 0, world, transport, self.server)  # once every engine is in
        for future in joining:
            future.result()

    def send(self, state_dict: Mapping[str, torch.Tensor], dtype: torch.dtype | None = None) -> dict:
        """Every engine's weights replaced by ``state_dict`` (cast to ``dtype``); the figures of
        the transfer."""
        started = time.perf_counter()
        device = "cuda" if self.transport == "nccl" else "cpu"
        buckets = pack_buckets(without_tied_copies(state_dict), self.bucket_bytes, dtype, device)
        packed = time.perf_counter()
        layouts = [plain_layout(bucket) for bucket in buckets]
        receiving = [engine.in_background(engine.receive_weights(layouts)) for engine in self.engines]
        for bucket in buckets:
            broadcast(self.group, bucket.data)
        for future in receiving:
            future.result()
        return {"buckets": len(buckets), "bytes": sum(b.data.numel() for b in buckets),
                "pack_s": packed - started, "send_s": time.perf_counter() - packed}
