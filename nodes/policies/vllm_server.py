"""A client for a vLLM OpenAI-compatible server, for users who serve one model to several jobs.

It keeps the exact-id contract: the prompt is rendered and tokenized here with the served model's
own tokenizer and sent as token ids to ``/v1/completions``; the server returns the completion's
token ids (``return_token_ids``) and the sampled tokens' log-probs. Start the server with
processed log-probs so they are the sampling distribution's, and with prefix caching::

    vllm serve MODEL_DIR --logprobs-mode processed_logprobs --enable-prefix-caching

The tokenizer is loaded from the model directory the server reports (``/v1/models``), so client
and server must see the same path (same machine or shared storage); ``tokenizer=`` overrides it.
"""

from __future__ import annotations

import asyncio
from typing import Sequence

import httpx

from ragteam.nodes.policies.hf import encode_prompt
from ragteam.nodes.policies.protocol import EngineError, Generation, GenerationRequest


class VLLMServerPolicy:
    exact_ids = True  # its traces can train a model offline, though no trainer pushes weights to it

    def __init__(self, url: str, tokenizer: str | None = None, name: str | None = None,
                 timeout_s: float = 600.0):
        self.url = url.rstrip("/")
        self.name = name or f"vllm-server:{self.url}"
        self.timeout_s = timeout_s
        self._tokenizer_path = tokenizer
        self._model: str | None = None
        self.tokenizer = None

    def connect(self) -> "VLLMServerPolicy":
        """Ask the server which model it serves and load that model's tokenizer."""
        from transformers import AutoTokenizer

        try:
            listed = httpx.get(f"{self.url}/v1/models", timeout=30).raise_for_status().json()
        except (httpx.HTTPError, ValueError) as error:
            raise EngineError(f"no vLLM server answers at {self.url}: {error}") from error
        served = listed["data"][0]
        self._model = served["id"]
        path = self._tokenizer_path or served.get("root") or served["id"]
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(path)
        except OSError as error:
            raise ValueError(f"the server at {self.url} serves {served['id']!r}, whose tokenizer is "
                             f"not at {path!r} here; pass its path as tokenizer=") from error
        return self

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        if self.tokenizer is None:
            await asyncio.to_thread(self.connect)
        async with httpx.AsyncClient(timeout=self.timeout_s) as client:
            return list(await asyncio.gather(*(self._one(client, r) for r in requests)))

    async def _one(self, client: httpx.AsyncClient, request: GenerationRequest) -> Generation:
        prompt_text, prompt_ids = encode_prompt(self.tokenizer, request)
        sampling = request.sampling
        body = {"model": self._model, "prompt": prompt_ids, "max_tokens": sampling.max_new_tokens,
                "temperature": max(sampling.temperature, 0.0), "top_p": 1.0, "top_k": 0,
                "min_p": 0.0, "stop": list(sampling.stop), "include_stop_str_in_output": True,
                "logprobs": 0, "return_token_ids": True}
        try:
            response = await client.post(f"{self.url}/v1/completions", json=body)
            choice = response.raise_for_status().json()["choices"][0]
        except (httpx.HTTPError, KeyError, IndexError, ValueError) as error:
            raise EngineError(f"vLLM server at {self.url} failed: {error}") from error
        ids = list(choice["token_ids"])
        logprobs = list(choice["logprobs"]["token_logprobs"])
        reason = choice.get("finish_reason")
        finish = "length" if reason == "length" else "stop" if isinstance(choice.get("stop_reason"), str) else "eos"
        return Generation(text=self.tokenizer.decode(ids, skip_special_tokens=True),
                          prompt_text=prompt_text, prompt_ids=prompt_ids, completion_ids=ids,
                          logprobs=logprobs, finish_reason=finish)
