"""Runs inside vLLM's worker process (``worker_extension_cls``): receives new weights.

Kept apart from ``nodes.policies.vllm`` so the worker imports nothing of ragteam but this (and,
for the weight channel, ``nodes.policies.weight_buckets``, which needs torch only)."""

from __future__ import annotations


class WeightReceiver:
    """Mixed into vLLM's worker class; ``self`` is the worker."""

    def ragteam_load_weights(self, blob: bytes) -> int:
        """Load a safetensors blob of Hugging Face-named tensors in place, through vLLM's
        reload path (it re-applies each layer's weight loader, which plain ``load_weights`` on
        an initialised model lacks). Returns how many tensors arrived."""
        from safetensors.torch import load

        tensors = load(blob)
        self.reload_weights(weights_iterator=iter(tensors.items()), is_checkpoint_format=True)
        self._refresh_cpu_gemm()
        return len(tensors)

    def ragteam_join_channel(self, host: str, port: int, rank: int, world_size: int, transport: str) -> None:
        """Join the learner's weight channel (``nodes.policies.weight_buckets``) as ``rank``."""
        from ragteam.nodes.policies.weight_buckets import open_group

        self._ragteam_channel = open_group(host, port, rank, world_size, transport)
        self._ragteam_channel_device = "cuda" if transport == "nccl" else "cpu"  # gloo moves CPU tensors

    def ragteam_receive_buckets(self, layouts: list) -> int:
        """Receive one weight update over the channel, bucket by bucket as the learner
        broadcasts them, straight into the reload path; returns how many tensors arrived."""
        from ragteam.nodes.policies.weight_buckets import receive_buckets

        device = self._ragteam_channel_device
        count = 0

        def counted():
            nonlocal count
            for item in receive_buckets(self._ragteam_channel, layouts, device):
                count += 1
                yield item

        self.reload_weights(weights_iterator=counted(), is_checkpoint_format=True)
        self._refresh_cpu_gemm()
        return count

    def _refresh_cpu_gemm(self) -> None:
        """On CPU, vLLM 0.32 wraps each linear layer in a oneDNN handler that caches one matmul
        primitive per batch shape, some holding a reordered copy of the weights; an in-place
        reload leaves those copies stale (measured: log-probs off by up to 0.9 for batch shapes
        seen before the update). Rebuilding the handlers from the reloaded weights clears them."""
        from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

        for module in self.model_runner.get_model().modules():
            weight = getattr(module, "weight", None)
            if hasattr(module, "cpu_linear") and weight is not None and weight.dim() == 2 \
                    and weight.numel() > 0:
                dispatch_cpu_unquantized_gemm(module, remove_weight=False)
