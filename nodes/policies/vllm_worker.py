"""Runs inside vLLM's worker process (``worker_extension_cls``): receives new weights.

Kept apart from ``nodes.policies.vllm`` so the worker imports nothing of ragteam but this."""

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
        return len(tensors)
