"""The weight channel's wire format and group: weights packed into a few flat byte buckets, sent
by one broadcast each over a ``torch.distributed`` group that the learner and every engine join.

Both sides import this module (the engine side inside vLLM's worker process), so it needs torch
only. A bucket's layout (names, dtypes, shapes, byte offsets) is small and travels by RPC ahead
of the bytes; the receiver allocates the bucket from it and unpacks views into it.

    learner (rank 0) ── broadcast(bucket 1), broadcast(bucket 2) … ──► engines (ranks 1..N)

The group's transport (torch.distributed calls it the backend) follows the device: gloo for CPU
tensors, NCCL for CUDA ones.
"""

from __future__ import annotations

import datetime
import math
import socket
from dataclasses import dataclass
from typing import Iterator, Mapping

import torch

BUCKET_BYTES = 256 * 2**20  # large enough that per-broadcast latency vanishes, small enough to stage twice
GROUP_TIMEOUT = datetime.timedelta(minutes=10)


@dataclass(frozen=True)
class Entry:
    """Where one tensor lies in its bucket."""

    name: str
    dtype: str      # torch dtype name, e.g. "float32"
    shape: tuple[int, ...]
    offset: int     # byte offset in the bucket
    nbytes: int


@dataclass
class Bucket:
    data: torch.Tensor         # uint8 [total bytes]
    entries: list[Entry]


def _alignment(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def without_tied_copies(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state_dict`` without the entries that are the very tensor of an earlier one (tied input
    and output embeddings: ``lm_head.weight`` is ``model.embed_tokens.weight``). An engine loads a
    tied model's shared weight under its first name, so a second copy is bytes for nothing
    (SmolLM2-135M: 113 MB of 651)."""
    seen, kept = set(), {}
    for name, tensor in state_dict.items():
        identity = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape),
                    tuple(tensor.stride()))
        if identity not in seen:
            seen.add(identity)
            kept[name] = tensor
    return kept


def pack_buckets(state_dict: Mapping[str, torch.Tensor], bucket_bytes: int = BUCKET_BYTES,
                 dtype: torch.dtype | None = None, device: str | torch.device = "cpu") -> list[Bucket]:
    """``state_dict``'s tensors (cast to ``dtype`` when given), in order, in buckets of at most
    ``bucket_bytes`` (a larger tensor gets a bucket of its own). Each tensor starts at a multiple
    of its element size, so the receiver's views are aligned."""
    buckets, entries, size = [], [], 0

    def close() -> None:
        nonlocal entries, size
        if entries:
            data = torch.empty(size, dtype=torch.uint8, device=device)
            for entry, tensor in entries:
                data[entry.offset:entry.offset + entry.nbytes] = tensor.reshape(-1).view(torch.uint8)
            buckets.append(Bucket(data, [entry for entry, _ in entries]))
        entries, size = [], 0

    for name, tensor in state_dict.items():
        tensor = tensor.detach().to(device=device, dtype=dtype or tensor.dtype).contiguous()
        nbytes = tensor.numel() * tensor.element_size()
        offset = math.ceil(size / _alignment(tensor.dtype)) * _alignment(tensor.dtype)
        if entries and offset + nbytes > bucket_bytes:
            close()
            offset = 0
        entries.append((Entry(name, str(tensor.dtype).removeprefix("torch."), tuple(tensor.shape), offset, nbytes),
                        tensor))
        size = offset + nbytes
    close()
    return buckets


def plain_layout(bucket: Bucket) -> list[list]:
    """A bucket's entries as plain lists, which cross any RPC (vLLM's, Ray's) unchanged."""
    return [[e.name, e.dtype, list(e.shape), e.offset, e.nbytes] for e in bucket.entries]


def bucket_size(entries: list[Entry]) -> int:
    return max((e.offset + e.nbytes for e in entries), default=0)


def unpack_bucket(data: torch.Tensor, entries: list[Entry]) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) for each entry: views into ``data`` (copy them to keep them past it)."""
    for e in entries:
        raw = data[e.offset:e.offset + e.nbytes]
        yield e.name, raw.view(getattr(torch, e.dtype)).reshape(e.shape)


def listening_socket(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    """A socket listening on ``host`` only (at ``port``, or a free one), for rank 0's store
    (torch's own store server would listen on every interface)."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((host, port))
    server.listen()
    return server


def rendezvous_store(host: str, port: int, rank: int, world_size: int, server: socket.socket | None,
                     timeout: datetime.timedelta = GROUP_TIMEOUT):
    """The group's TCP store: rank 0 serves it on ``server`` (``listening_socket``), the others
    connect to ``host``:``port``."""
    import torch.distributed as dist

    if rank == 0 and server is None:
        raise ValueError("rank 0 serves the group's store: give it a listening_socket")
    return dist.TCPStore(host, port, world_size, is_master=rank == 0, timeout=timeout,
                         master_listen_fd=server.fileno() if rank == 0 else None)


def open_group(host: str, port: int, rank: int, world_size: int, transport: str = "gloo",
               server: socket.socket | None = None):
    """A process group of its own (not torch's default one, which a learner may already use)
    over a TCP store that rank 0 serves on ``server`` (``rendezvous_store``), with gloo's own
    connections on ``host`` too. Every rank blocks here until all have joined."""
    import torch.distributed as dist

    store = rendezvous_store(host, port, rank, world_size, server)
    if transport == "nccl":
        return dist.ProcessGroupNCCL(store, rank, world_size)
    options = dist.ProcessGroupGloo._Options()
    options._devices = [dist.ProcessGroupGloo.create_device(hostname=host)]
    options._timeout = GROUP_TIMEOUT
    return dist.ProcessGroupGloo(store, rank, world_size, options)


def broadcast(group, tensor: torch.Tensor) -> None:
    """Rank 0's ``tensor`` into every other rank's ``tensor`` (same size), in place."""
    import torch.distributed as dist

    options = dist.BroadcastOptions()
    options.rootRank = 0
    group.broadcast([tensor], options).wait()


def receive_buckets(group, layouts: list[list[Entry]], device: str | torch.device = "cpu"
                    ) -> Iterator[tuple[str, torch.Tensor]]:
    """The receiving side of ``send``: one broadcast per bucket, in order, unpacked. Each
    bucket's buffer is fresh, so the tensors stay valid after the next bucket arrives."""
    for entries in layouts:
        entries = [e if isinstance(e, Entry) else Entry(e[0], e[1], tuple(e[2]), e[3], e[4]) for e in entries]
        data = torch.empty(bucket_size(entries), dtype=torch.uint8, device=device)
        broadcast(group, data)
        yield from unpack_bucket(data, entries)
