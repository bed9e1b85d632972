"""Data parallelism for the learner: N ranks (processes) hold the same model under DeepSpeed ZeRO
(or, for small trainable sets, whole on every rank under plain AdamW: ``Ranks.average_gradients``)
and each computes its share of every pass.

What every rank must agree on, and how it is kept:

- **the work is dealt, never negotiated.** Every rank holds the whole scored buffer and shuffles
  it with the same seed, so each sees the same mini-batches cut into the same micro-batches;
  ``deal`` gives rank r the micro-batches r, r + N, ... of each.
- **equal counts.** Under ZeRO-3 every forward gathers parameters and every backward
  reduce-scatters gradients *collectively*, so all ranks must run the same number of each. A rank
  dealt one micro-batch fewer runs a **stand-in**: a real micro-batch whose loss is multiplied by 0
  (the same graph, so the same parameters get gradients, all of them zero).
- **weights.** DeepSpeed averages gradients over the ranks, so each rank scales its micro-batch
  loss by N: the average of N rank sums is then the one-process sum (the mini-batch mean).
- **statistics** (losses, token counts, values) are gathered from every rank's real work.

World size 1 is the same code with one rank and nothing to gather.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Sequence, TypeVar

import torch
import torch.distributed as dist

from ragteam.nodes.policies.weight_buckets import listening_socket, rendezvous_store

T = TypeVar("T")
GROUP_TIMEOUT = timedelta(minutes=30)  # one rank may wait out another's long rollout share


@dataclass(frozen=True)
class Ranks:
    """This process's place in the learner group: ``rank`` of ``size``."""

    rank: int = 0
    size: int = 1

    @classmethod
    def current(cls) -> "Ranks":
        """The default process group's ranks (one rank when there is none)."""
        if dist.is_available() and dist.is_initialized():
            return cls(dist.get_rank(), dist.get_world_size())
        return cls()

    @property
    def is_first(self) -> bool:
        return self.rank == 0

    def deal(self, work: Sequence[T]) -> list[tuple[T, bool]]:
        """This rank's items of ``work`` (the items r, r + N, ...), each with True, padded with
        stand-ins (False) to ``ceil(len(work) / N)`` so every rank runs as many. A stand-in
        repeats one of the items (computed, its result thrown away); no work, no stand-ins."""
        mine = [(item, True) for item in work[self.rank::self.size]]
        count = -(-len(work) // self.size)
        return mine + [(work[0], False)] * (count - len(mine)) if work else []

    def gather(self, value: T) -> list[T]:
        """Every rank's ``value``, in rank order (a list of one with one rank)."""
        if self.size == 1:
            return [value]
        out: list = [None] * self.size
        dist.all_gather_object(out, value)
        return out

    def barrier(self) -> None:
        if self.size > 1:
            dist.barrier()

    def broadcast_from_first(self, parameters: Sequence[torch.nn.Parameter]) -> None:
        """Every rank's ``parameters`` set to the first rank's (a fresh LoRA adapter is drawn at
        random on each rank)."""
        if self.size > 1:
            for parameter in parameters:
                dist.broadcast(parameter.data, src=0)

    def average_gradients(self, parameters: Sequence[torch.nn.Parameter]) -> None:
        """Every rank's gradients of ``parameters`` replaced by their mean over the ranks (plain
        data parallelism: each rank holds everything): one small collective for which parameters
        any rank touched, one for all their gradients at once. A parameter no rank touched keeps
        no gradient (AdamW skips it, as on one rank); one that only another rank touched gets
        the mean here too."""
        if self.size == 1 or not parameters:
            return
        touched = torch.tensor([p.grad is not None for p in parameters], dtype=torch.uint8,
                               device=parameters[0].device)
        dist.all_reduce(touched, op=dist.ReduceOp.MAX)
        chosen = [p for p, flag in zip(parameters, touched.tolist()) if flag]
        if not chosen:
            return
        flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).flatten() for p in chosen])
        dist.all_reduce(flat)
        flat /= self.size
        offset = 0
        for p in chosen:
            p.grad = flat[offset:offset + p.numel()].view_as(p)  # views of one buffer, dropped at zero_grad
            offset += p.numel()


def init_learner_group(host: str, port: int, rank: int, size: int, transport: str | None = None) -> Ranks:
    """The default process group of ``size`` learner ranks: gloo on CPU, NCCL on CUDA. Rank 0
    serves the rendezvous store on ``host``:``port`` only (torch's own server listens on every
    interface); on the loopback, gloo's connections stay there too."""
    transport = transport or ("nccl" if torch.cuda.is_available() else "gloo")
    if host in ("127.0.0.1", "localhost"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    server = listening_socket(host, port) if rank == 0 else None
    store = rendezvous_store(host, port, rank, size, server, GROUP_TIMEOUT)
    dist.init_process_group(transport, store=store, rank=rank, world_size=size, timeout=GROUP_TIMEOUT)
    _keep_open.append(server)  # the store's socket lives as long as the group
    return Ranks(rank, size)


_keep_open: list = []
