"""Shared pieces of the verl tests: a small synthesized benchmark, its export, and the skip for verl itself.

verl 0.9.1 lives in its own environment (``.venv-verl``, made by ``scripts/verl-env.sh``); tests that import
verl call :func:`require_verl`, which skips them elsewhere with a reason saying how to run them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pyarrow.parquet as pq
import pytest

from indexing.config import Config
from indexing.workspace import Workspace
from rl.datasets import SynthConfig, synthesize
from rl.datasets.context import BenchContext
from rl.reward import RewardScorer
from rl.reward.instances import InstanceIndex
from rl.reward.service import create_app
from rl.reward.settings import ServiceSettings
from rl.verl.export import ExportConfig, export, train_dir
from serving.engine import Engine
from serving.http.server import ServerThread

SIZES = {"train": 24, "test": 4, "ood": 4}
ROOT = Path(__file__).resolve().parents[2]
VERL_VENV = ROOT / ".venv-verl"


def require_verl() -> ModuleType:
    """``verl`` itself, or a skip naming the environment that has it."""
    if VERL_VENV.is_dir():
        reason = "verl 0.9.1 is installed in .venv-verl, not here: run `make test-verl`"
    else:
        reason = "verl 0.9.1 needs its own environment: `bash scripts/verl-env.sh` makes .venv-verl, then `make test-verl`"
    verl: ModuleType = pytest.importorskip("verl", reason=reason)
    assert verl.__version__ == "0.9.1", f"the verl tests pin verl 0.9.1, found {verl.__version__}"
    return verl


def synth_bench(
    cfg: Config, domain: str, engine: Engine, out: Path, sizes: dict[str, int] | None = None
) -> Workspace:
    """A small benchmark of ``domain`` synthesized on ``engine`` into the workspace ``out``."""

    def opener(c: Config, d: str, s: SynthConfig) -> Any:
        return BenchContext(c, d, engine, seed=s.seed, sizes=s.sizes, progress=s.progress)

    ws = Workspace(out)
    synthesize(cfg, domain, SynthConfig(sizes=sizes or SIZES, seed=11, progress=False), out=ws, opener=opener)
    return ws


@dataclass(frozen=True)
class ServedExport:
    """A small benchmark, its verl export and the reward service scoring it (see :func:`served_export`)."""

    ws: Workspace
    out: Path
    """The export's directory: ``rl/`` and ``sft/`` parquet."""
    scorer: RewardScorer
    url: str
    """The reward service on a loopback port."""

    def sft_texts(self) -> list[str]:
        """Every message of the SFT train split (what a tiny model's tokenizer is trained on)."""
        rows = pq.read_table(self.out / "sft" / "train.parquet").to_pylist()
        return [m["content"] for r in rows for m in r["messages"]]


@contextlib.contextmanager
def served_export(cfg: Config, domain: str, root: Path) -> Iterator[ServedExport]:
    """A benchmark of ``domain`` synthesized under ``root``, exported for verl, and the reward service on it
    (a real scorer on ``cfg``'s index behind a loopback server); both are stopped on exit."""
    scorer = RewardScorer.open(cfg, [domain])
    try:
        ws = synth_bench(cfg, domain, scorer.engines[domain], root / "ws")
        export(ws, domain, ExportConfig(profile="short", val_fraction=0.25))
        out = train_dir(ws, domain)
        settings = ServiceSettings(domains=(domain,), window_ms=20.0)
        server = ServerThread(create_app(settings, scorer, InstanceIndex.load(ws, [domain]))).start()
        try:
            yield ServedExport(ws, out, scorer, server.url)
        finally:
            server.stop()
    finally:
        scorer.close()


CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""Qwen's ChatML layout, without tools or thinking."""


def tiny_qwen3(out: Path, texts: list[str], *, vocab: int = 1024, with_model: bool = True) -> Path:
    """A byte-level BPE tokenizer trained on ``texts`` and, with ``with_model``, a randomly initialised
    Qwen3 of about 0.2M parameters built from a config, both saved in Hugging Face layout under ``out``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())  # fmt: skip
    tok.train_from_iterator(texts, trainer)
    # transformers leaves the tokenizer's and the model's __init__ unannotated (as in rl.train).
    fast = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    if with_model:
        cfg = Qwen3Config(
            vocab_size=len(fast), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=2, num_key_value_heads=1, head_dim=32, max_position_embeddings=4096,
            tie_word_embeddings=False, eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id,
            bos_token_id=None, dtype="float32",
        )  # fmt: skip
        Qwen3ForCausalLM(cfg).save_pretrained(out)  # type: ignore[no-untyped-call]
    return out


def compose_argv(cmd: list[str]) -> Any:
    """The config (an OmegaConf ``DictConfig``) an ``argv`` of :func:`rl.verl.launch.argv` would run with,
    composed by Hydra from verl's own config files as its entrypoint does; the config name is read from the
    entrypoint's ``@hydra.main``, not assumed."""
    import importlib
    import inspect

    import verl
    from hydra import compose, initialize_config_dir

    from rl.verl.launch import PPO_MODULE, SFT_MODULE, SFT_RAY_MODULE

    names = {
        PPO_MODULE: "ppo_trainer",
        SFT_MODULE: "sft_trainer_engine",
        SFT_RAY_MODULE: "sft_trainer_engine",
    }
    module = cmd[cmd.index("-m") + 1]
    name = names[module]
    assert f'config_name="{name}"' in inspect.getsource(importlib.import_module(module)), (
        f"{module} no longer composes {name}"
    )
    config_dir = Path(verl.__file__).parent / "trainer" / "config"
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        return compose(config_name=name, overrides=cmd[cmd.index("-m") + 2 :])
