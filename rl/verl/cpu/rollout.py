"""A rollout that generates with transformers on CPU, plugged into verl 0.9.1 the way its vLLM adapter is.

verl's trainer never generates itself: its agent loop sends token ids to a rollout *server* (one per
replica) and the hybrid worker's rollout *adapter* pushes the actor's weights to that server after each
update. verl ships servers only for vLLM, SGLang and TensorRT-LLM, none of which runs here on CPU, so:

- :class:`HFServer` is the server: a Ray actor holding a ``transformers`` causal LM that answers
  ``generate(prompt_ids, sampling_params)`` with :class:`verl.workers.rollout.replica.TokenOutput`. verl's
  agent loop sends one request per rollout, all of a step's at once; the server gathers the requests that
  arrive within :data:`BATCH_WINDOW_S` (up to :data:`MAX_BATCH`) and answers those with the same sampling
  parameters in one left-padded ``model.generate`` (in a thread, so the actor keeps answering). Each
  rollout keeps its own token budget and ends at its first end-of-sequence token.
- :class:`HFReplica` is its :class:`~verl.workers.rollout.replica.RolloutReplica` (launches the server).
- :class:`HFServerAdapter` is the worker-side :class:`~verl.workers.rollout.base.BaseRollout`: verl's
  ``naive`` checkpoint engine calls its ``update_weights`` with the actor's full tensors
  (verl/workers/engine_workers.py:804), which it sends to the server by Ray (a state dict, in memory).

All three register under the rollout name ``hf`` (``actor_rollout_ref.rollout.name=hf``).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Generator
from typing import Any

import ray
import torch
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica, TokenOutput

NAME = "hf"
"""The rollout name (``actor_rollout_ref.rollout.name``)."""
BATCH_WINDOW_S = 0.02
"""How long the server waits for more requests before it generates a batch."""
MAX_BATCH = 64
"""Most rollouts generated together (a step's rollouts are batch x G; 64 keeps padding waste small)."""


def server_name(replica_rank: int, suffix: str = "") -> str:
    """The Ray actor name of replica ``replica_rank``'s server."""
    return f"prore_hf_rollout_{replica_rank}{suffix}"


@ray.remote(num_cpus=0)
class HFServer:
    """One rollout server: a transformers model on CPU, generating one request at a time."""

    def __init__(self, config: Any, model_config: Any, replica_rank: int) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from verl.utils.fs import copy_to_local

        self.config = config
        self.replica_rank = replica_rank
        # A DictConfig here (RolloutReplica keeps the trainer's model section as given): its ``path``.
        path = copy_to_local(model_config.path, use_shm=model_config.get("use_shm", False))
        self.model: Any = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32)
        torch.nn.Module.eval(self.model)
        tok = AutoTokenizer.from_pretrained(path)
        eos = {tok.eos_token_id, getattr(self.model.generation_config, "eos_token_id", None)}
        self.eos = sorted(e for e in eos if isinstance(e, int))
        self.pad = tok.pad_token_id if tok.pad_token_id is not None else self.eos[0]
        self.global_steps: int | None = None
        self.weight_updates = 0
        self.batches: list[int] = []
        """The size of every batch generated (what :meth:`stats` reports)."""
        self._printed = 0
        self._pending: list[tuple[list[int], dict[str, Any], asyncio.Future[list[int]]]] = []
        self._drainer: asyncio.Task[None] | None = None

    def ready(self) -> bool:
        return True

    def update_weights(self, state: dict[str, torch.Tensor], global_steps: int | None = None) -> int:
        """Load the actor's tensors (HF names); every parameter of the model must be among them."""
        own = self.model.state_dict()
        missing = [k for k in own if k not in state and not k.endswith("rotary_emb.inv_freq")]
        if missing:
            raise KeyError(f"weight sync lacks {len(missing)} of the rollout's tensors, e.g. {missing[:3]}")
        with torch.no_grad():
            for name, t in own.items():
                if name in state:
                    t.copy_(state[name].to(t.dtype))
        self.weight_updates += 1
        if global_steps is not None:
            self.global_steps = global_steps
        since = self.batches[self._printed :]
        self._printed = len(self.batches)
        print(f"hf rollout {self.replica_rank}: loaded {len(own)} tensors from the actor "
              f"(sync {self.weight_updates}, global step {global_steps}); since the last sync "
              f"{sum(since)} rollouts in {len(since)} batches", flush=True)  # fmt: skip
        return len(state)

    def _budget(self, prompt_len: int, params: dict[str, Any]) -> int:
        cfg = self.config
        budget = params.get("max_tokens") or params.get("max_new_tokens") or cfg.response_length
        room = int(cfg.prompt_length) + int(cfg.response_length) - prompt_len
        return max(0, min(int(budget), int(cfg.response_length), room))

    def _generate_batch(self, prompts: list[list[int]], params: dict[str, Any]) -> list[list[int]]:
        """One left-padded ``model.generate`` of ``prompts`` under one set of sampling parameters."""
        budgets = [self._budget(len(p), params) for p in prompts]
        if max(budgets) == 0:
            return [[] for _ in prompts]
        temperature = float(params.get("temperature", 1.0) or 0.0)
        kwargs: dict[str, Any] = {"do_sample": temperature > 0}
        if temperature > 0:
            top_k = int(params.get("top_k", -1))
            kwargs.update(temperature=temperature, top_p=float(params.get("top_p", 1.0)),
                          top_k=top_k if top_k > 0 else 0)  # fmt: skip
        width = max(len(p) for p in prompts)
        ids = torch.tensor([[self.pad] * (width - len(p)) + p for p in prompts])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        with torch.no_grad():
            out = self.model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max(budgets),
                                      eos_token_id=self.eos, pad_token_id=self.pad,
                                      repetition_penalty=float(params.get("repetition_penalty", 1.0)), **kwargs)  # fmt: skip
        answers = []
        for row, budget in zip(out[:, width:].tolist(), budgets, strict=True):
            tokens: list[int] = row[:budget]
            end = next((n for n, t in enumerate(tokens) if t in self.eos), None)  # up to the first end token
            answers.append(tokens if end is None else tokens[: end + 1])
        return answers

    async def _drain(self) -> None:
        """Generate what is pending, batch by batch, until nothing is."""
        while self._pending:
            await asyncio.sleep(BATCH_WINDOW_S)  # the rest of the step's requests arrive
            batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
            groups: dict[str, list[tuple[list[int], dict[str, Any], asyncio.Future[list[int]]]]] = {}
            for item in batch:
                groups.setdefault(repr(sorted(item[1].items())), []).append(item)
            for items in groups.values():
                self.batches.append(len(items))
                try:
                    answers = await asyncio.to_thread(
                        self._generate_batch, [i[0] for i in items], items[0][1]
                    )
                except Exception as exc:  # every request of the batch gets the failure
                    for _, _, fut in items:
                        if not fut.done():
                            fut.set_exception(exc)
                    continue
                for (_, _, fut), tokens in zip(items, answers, strict=True):
                    if not fut.done():
                        fut.set_result(tokens)

    async def generate(self, prompt_ids: Any, sampling_params: dict[str, Any], request_id: str,
                       **kwargs: Any) -> TokenOutput:  # fmt: skip
        if any(kwargs.get(k) for k in ("image_data", "video_data", "audio_data")):
            raise NotImplementedError("the hf CPU rollout generates text only")
        ids = [int(x) for x in (prompt_ids.tolist() if hasattr(prompt_ids, "tolist") else prompt_ids)]
        fut: asyncio.Future[list[int]] = asyncio.get_running_loop().create_future()
        self._pending.append((ids, dict(sampling_params), fut))
        if self._drainer is None or self._drainer.done():
            self._drainer = asyncio.create_task(self._drain())
        tokens = await fut
        return TokenOutput(
            token_ids=tokens, stop_reason="completed", extra_fields={"global_steps": self.global_steps}
        )

    def stats(self) -> dict[str, Any]:
        return {
            "weight_updates": self.weight_updates,
            "global_steps": self.global_steps,
            "batches": list(self.batches),
        }

    # The control calls verl makes on a server; nothing to free or resume on CPU.
    async def set_global_steps(self, global_steps: int) -> None:
        self.global_steps = global_steps

    async def wake_up(self) -> None: ...
    async def sleep(self) -> None: ...
    async def abort_all_requests(self, reject_request: bool = False) -> None: ...
    async def resume_generation(self) -> None: ...
    async def clear_kv_cache(self) -> None: ...
    async def release_kv_cache(self) -> None: ...
    async def resume_kv_cache(self) -> None: ...
    async def start_profile(self, **kwargs: Any) -> None: ...
    async def stop_profile(self) -> None: ...


class HFReplica(RolloutReplica):  # type: ignore[misc]
    """A rollout replica of one :class:`HFServer` (tensor, data and pipeline parallel sizes 1)."""

    def rollout_worker_use_gpu(self) -> bool:
        return False

    async def launch_servers(self) -> None:
        if self.world_size != 1:
            raise ValueError(
                f"the hf CPU rollout runs unsharded (tp = dp = pp = 1), got world size {self.world_size}"
            )
        server = HFServer.options(name=server_name(self.replica_rank, self.name_suffix),  # type: ignore[attr-defined]
                                  max_concurrency=self.max_concurrency).remote(
            self.config, self.model_config, self.replica_rank)  # fmt: skip
        await server.ready.remote()
        self.servers = [server]
        self._server_handle = server
        self._server_address = f"hf-cpu-{self.replica_rank}{self.name_suffix}"


class HFServerAdapter(BaseRollout):  # type: ignore[misc]
    """The hybrid worker's side of the hf rollout: sends the actor's weights to its replica's server."""

    def __init__(self, config: Any, model_config: Any, device_mesh: Any, replica_rank: int = -1) -> None:
        super().__init__(config, model_config, device_mesh)
        world = (self.config.tensor_model_parallel_size * self.config.data_parallel_size
                 * self.config.pipeline_model_parallel_size)  # fmt: skip
        rank = int(os.environ["RANK"])
        self.replica_rank = rank // world if replica_rank == -1 else replica_rank
        self.rollout_rank = rank % world
        self._server: Any = None

    def _server_handle(self) -> Any:
        if self._server is None:
            self._server = ray.get_actor(server_name(self.replica_rank))
        return self._server

    async def resume(self, tags: list[str]) -> None:
        return None

    async def release(self) -> None:
        return None

    async def update_weights(self, weights: Generator[tuple[str, torch.Tensor], None, None],
                             wire_format: str = "named_tensors", **kwargs: Any) -> None:  # fmt: skip
        if wire_format != "named_tensors":
            raise NotImplementedError(f"the hf CPU rollout takes full named tensors, not {wire_format!r}")
        state = {}
        for name, t in weights:
            full = t.full_tensor() if hasattr(t, "full_tensor") else t
            state[name] = full.detach().to("cpu", copy=True)
        if self.rollout_rank == 0:
            await self._server_handle().update_weights.remote(state, kwargs.get("global_steps"))
