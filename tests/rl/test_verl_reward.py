"""The project's ``compute_score`` inside verl 0.9.1's own reward loop, on a real ``DataProto`` batch,
against the reward service running on a loopback port (real HTTP, real chDB and Milvus Lite behind it).

Runs in .venv-verl (``make test-verl``); skipped elsewhere.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from indexing.stores.server import free_port
from tests.rl.verl_support import require_verl

require_verl()

import numpy as np  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
import torch  # noqa: E402
from omegaconf import DictConfig, OmegaConf  # noqa: E402

from indexing.workspace import Workspace  # noqa: E402
from rl.reward import RewardItem, RewardScorer  # noqa: E402
from rl.reward.service import create_app  # noqa: E402
from rl.reward.settings import URL_ENV, ServiceSettings  # noqa: E402
from rl.verl.launch import LaunchParams, argv  # noqa: E402
from rl.verl.reward_fn import compute_score  # noqa: E402
from serving.http.server import ServerThread  # noqa: E402
from tests.rl.verl_support import ServedExport, compose_argv, tiny_qwen3  # noqa: E402

DOMAIN = "ecommerce"


@pytest.fixture(scope="module")
def setup(verl_export: ServedExport, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The session's benchmark and export, its scorer and service on a loopback port, and a tokenizer trained on
    the export."""
    served = verl_export
    rows = pq.read_table(served.out / "rl" / "train.parquet").to_pylist()
    model = tiny_qwen3(tmp_path_factory.mktemp("verl-reward") / "model", served.sft_texts(), with_model=False)
    return {"ws": served.ws, "out": served.out, "rows": rows, "model": model, "scorer": served.scorer,
            "url": served.url}  # fmt: skip


def _samples(setup: dict[str, Any]) -> list[tuple[dict[str, Any], str]]:
    """(row, completion): per prompt its gold program, the program in a ```json fence after a think block,
    a program that does not validate, garbage, and another prompt's gold program (runs, misses)."""
    ws: Workspace = setup["ws"]
    from rl.datasets import load_split

    gold = {i.qid: i.program for i in load_split(ws, DOMAIN, "train")}
    rows = setup["rows"][:6]
    out = []
    for n, row in enumerate(rows):
        prog = gold[row["extra_info"]["instance_id"]]
        other = gold[rows[(n + 1) % len(rows)]["extra_info"]["instance_id"]]
        bad = json.dumps({"sql": "SELECT id FROM products WHERE colour = 'red'", "retrieval_list": []})
        for c in (prog, f"<think>easy</think>```json\n{prog}\n```", bad, "I cannot help with that.", other):
            out.append((row, c))
    return out


def _batch(samples: list[tuple[dict[str, Any], str]], model: Path) -> Any:
    """A DataProto as verl's rollout hands it to the reward loop: left-padded prompts, right-padded responses."""
    from verl import DataProto
    from verl.utils import hf_tokenizer

    tok = hf_tokenizer(str(model))
    p_ids = [
        tok.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=True) for r, _ in samples
    ]
    p_ids = [list(x["input_ids"]) if not isinstance(x, list) else x for x in p_ids]
    r_ids = [[*tok.encode(c, add_special_tokens=False), tok.eos_token_id] for _, c in samples]
    P, R = max(map(len, p_ids)), max(map(len, r_ids))
    pad = tok.pad_token_id
    prompts = torch.tensor([[pad] * (P - len(x)) + x for x in p_ids])
    responses = torch.tensor([x + [pad] * (R - len(x)) for x in r_ids])
    mask = torch.tensor([[0] * (P - len(p)) + [1] * len(p) + [1] * len(r) + [0] * (R - len(r))
                         for p, r in zip(p_ids, r_ids, strict=True)])  # fmt: skip
    rows = [r for r, _ in samples]
    return DataProto.from_dict(
        tensors={"prompts": prompts, "responses": responses, "input_ids": torch.cat([prompts, responses], 1),
                 "attention_mask": mask},
        non_tensors={"data_source": np.array([r["data_source"] for r in rows], dtype=object),
                     "reward_model": np.array([r["reward_model"] for r in rows], dtype=object),
                     "extra_info": np.array([dict(r["extra_info"]) for r in rows], dtype=object),
                     "raw_prompt": np.array([r["prompt"] for r in rows], dtype=object)},
    )  # fmt: skip


def _requests_answered(url: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(url + "/metrics").text
    return sum(s.value for fam in text_string_to_metric_families(text) for s in fam.samples
               if s.name == "reward_requests_total" and s.labels.get("status") == "200")  # fmt: skip


def _worker_config(setup: dict[str, Any]) -> DictConfig:
    cfg = compose_argv(argv("grpo", LaunchParams(model=str(setup["model"]), data_dir=str(setup["out"]),
                                                 reward_url=setup["url"], n_gpus_per_node=1)))  # fmt: skip
    OmegaConf.resolve(cfg)
    return cfg


def test_compute_score_runs_in_verls_reward_loop_on_a_dataproto(setup: dict[str, Any]) -> None:
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

    samples = _samples(setup)
    data = _batch(samples, setup["model"])
    worker = RewardLoopWorker(_worker_config(setup))
    before = _requests_answered(setup["url"])
    outputs = worker.loop.run_until_complete(worker.compute_score_batch(data))
    # verl awaits one compute_score per sample; the worker's client sends them in batches.
    assert 1 <= _requests_answered(setup["url"]) - before < len(samples)

    scorer: RewardScorer = setup["scorer"]
    direct = scorer.score([RewardItem(c, DOMAIN, r["reward_model"]["ground_truth"]) for r, c in samples])
    assert [o["reward_score"] for o in outputs] == [d.total for d in direct]
    for o, d in zip(outputs, direct, strict=True):
        info = o["reward_extra_info"]
        assert (info["s_f"], info["s_e"], info["s_r"], info["s_l"]) == (
            d.terms.s_f,
            d.terms.s_e,
            d.terms.s_r,
            d.terms.s_l,
        )
    scores = [o["reward_score"] for o in outputs]
    per_prompt = [scores[i : i + 5] for i in range(0, len(scores), 5)]
    for gold, fenced, bad, garbage, _other in per_prompt:
        assert gold == fenced == 4.0, "the gold program hits, bare or fenced after a think block"
        assert (bad, garbage) == (1.0, 0.0), "parses but fails validation; does not parse"
    assert any(p[4] == 2.0 for p in per_prompt), "another prompt's program runs and misses"

    # verl turns the scores into token-level rewards with its own helper.
    rm = worker.reward_manager.assemble_rm_scores(data, scores)
    assert rm.sum(dim=1).tolist() == pytest.approx(scores)


def test_compute_score_retries_until_the_service_comes_up(setup: dict[str, Any],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """The worker's first calls find nothing listening; the client retries until the service starts."""
    port = free_port()
    monkeypatch.setenv(URL_ENV, f"http://127.0.0.1:{port}")
    row, completion = _samples(setup)[0]
    settings = ServiceSettings(domains=(DOMAIN,), window_ms=5.0)
    started: list[ServerThread] = []

    def start_later() -> None:
        time.sleep(0.5)
        started.append(ServerThread(create_app(settings, setup["scorer"]), port=port).start())

    t = threading.Thread(target=start_later)
    t.start()
    try:
        got = asyncio.run(compute_score(row["data_source"], completion, row["reward_model"]["ground_truth"],
                                        dict(row["extra_info"])))  # fmt: skip
    finally:
        t.join()
        for s in started:
            s.stop()
    assert got == {"score": 4.0, "s_f": 1.0, "s_e": 1.0, "s_r": 1.0, "s_l": 1.0}
