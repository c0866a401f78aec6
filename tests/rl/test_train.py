"""Local training: tokenizer, model sizes, defaults, SFT keeping the best checkpoint, logs and plots."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from indexing.workspace import Workspace
from prore.cli import main
from rl.datasets import load_split
from rl.errors import TrainError
from rl.prompt import read_card
from rl.train.config import load_defaults
from rl.train.logs import read_metrics
from rl.train.model import SIZES, approx_parameters, build_model, load_model, parameter_count
from rl.train.run import native_bf16, uses_bf16
from rl.train.tokenizer import SPLITS, Split, check_round_trip, load_tokenizer, train_tokenizer
from tests.rl.train_support import DOMAINS, TINY


def test_defaults_are_the_papers_where_stated() -> None:
    d = load_defaults()
    assert (d.grpo.loss_type, d.grpo.epsilon, d.grpo.epsilon_high, d.grpo.beta, d.grpo.num_generations) == (
        "grpo", 0.2, 0.2, 0.001, 4)  # fmt: skip
    assert (d.dapo.loss_type, d.dapo.epsilon, d.dapo.epsilon_high, d.dapo.beta) == ("dapo", 0.1, 0.28, 0.001)
    assert d.sft.epochs == 3 and d.profile == "compact" and d.split == "lines" and d.sft.group_by_length
    assert d.init_embeddings == "random" and d.grpo.execution_credit == d.dapo.execution_credit == 1.0
    # TRL's configs turn gradient checkpointing on; the local models need no activation memory saved
    assert d.precision == "auto" and not d.gradient_checkpointing


def _cpu_flags() -> set[str]:
    with open("/proc/cpuinfo") as info:
        return {f for line in info if line.startswith("flags") for f in line.split(":", 1)[1].split()}


def test_training_runs_in_bf16_only_where_the_cpu_computes_it() -> None:
    """TRL turns bf16 on by default; a CPU without bf16 units (AVX2) emulates it, many times slower than fp32."""
    assert native_bf16() == bool({"amx_tile", "avx512_bf16"} & _cpu_flags())
    assert (uses_bf16("fp32"), uses_bf16("bf16"), uses_bf16("auto")) == (False, True, native_bf16())
    with pytest.raises(TrainError, match=r"^precision must be one of auto, fp32, bf16, got 'fp16'$"):
        uses_bf16("fp16")  # type: ignore[arg-type]


def test_the_local_and_verl_recipes_agree_wherever_both_quote_the_paper() -> None:
    """The paper's numbers live in rl/train/defaults.yaml (TRL) and rl/verl/recipes/defaults.yaml (verl);
    where both give the paper's value, it is the same value (the local recipe's departures, such as the
    learning rates and batch sizes of a model trained from scratch, are each documented in its file)."""
    from rl.verl.recipes import recipe

    d = load_defaults()
    sft = recipe("sft")
    assert d.sft.epochs == sft["trainer.total_epochs"] == 3
    for algorithm, loss_agg in (("grpo", "seq-mean-token-mean"), ("dapo", "token-mean")):
        local, verl = d.rl(algorithm), recipe(algorithm)
        assert local.num_generations == verl["actor_rollout_ref.rollout.n"] == 4
        assert local.beta == verl["actor_rollout_ref.actor.kl_loss_coef"] == 0.001
        assert (local.epsilon, local.epsilon_high) == (verl["actor_rollout_ref.actor.clip_ratio_low"],
                                                       verl["actor_rollout_ref.actor.clip_ratio_high"])  # fmt: skip
        assert local.loss_type == algorithm and verl["actor_rollout_ref.actor.loss_agg_mode"] == loss_agg
        assert (
            local.num_iterations == 1
            and verl["actor_rollout_ref.actor.ppo_mini_batch_size"] == verl["data.train_batch_size"]
        )
        assert local.execution_credit == 1.0  # the paper's reward, which the reward service serves by default


def test_the_trainers_flags_are_the_defaults_files_keys() -> None:
    """A flag given replaces its key of rl/train/defaults.yaml, one left out keeps it (core.flags)."""
    import dataclasses

    from prore.cli import build_parser
    from rl.train.commands import model_flags, params_flags

    d = load_defaults()
    args = build_parser().parse_args(["train", "dapo", "--lr", "2e-5", "--epsilon-high", "0.3", "--no-filter-prompts",
                                      "--filter-on", "accuracy", "--execution-credit", "0", "--size", "xs"])  # fmt: skip
    assert params_flags("dapo").over(d.dapo, args) == dataclasses.replace(
        d.dapo,
        learning_rate=2e-5,
        epsilon_high=0.3,
        filter_prompts=False,
        filter_on="accuracy",
        execution_credit=0.0,
    )
    assert model_flags("dapo").over(d, args) == dataclasses.replace(d, model_size="xs")
    assert "profile" not in model_flags("dapo").given(args)  # RL then takes the initial model's profile
    args = build_parser().parse_args(["train", "sft", "--epochs", "1.5", "--max-steps", "7", "--exemplars", "2",
                                      "--profile", "short", "--tokenizer-split", "words", "--recombine", "1",
                                      "--precision", "fp32", "--gradient-checkpointing"])  # fmt: skip
    assert params_flags("sft").over(d.sft, args) == dataclasses.replace(d.sft, epochs=1.5, max_steps=7)
    assert model_flags("sft").over(d, args) == dataclasses.replace(d, exemplars=2, profile="short", split="words",
                                                                   recombine=1, precision="fp32",
                                                                   gradient_checkpointing=True)  # fmt: skip
    assert params_flags("grpo").over(d.grpo, build_parser().parse_args(["train", "grpo"])) == d.grpo


def test_a_defaults_file_missing_a_key_is_refused(tmp_path: Path) -> None:
    from rl.train.config import DEFAULTS_FILE

    text = DEFAULTS_FILE.read_text().replace("  beta: 0.001", "", 1)
    assert text != DEFAULTS_FILE.read_text()
    (tmp_path / "defaults.yaml").write_text(text)
    with pytest.raises(TrainError, match="missing key\\(s\\) in grpo: beta"):
        load_defaults(tmp_path / "defaults.yaml")


@pytest.mark.parametrize(
    ("line", "bad", "error"),
    [("precision: auto", "precision: fp8", "model.precision must be one of auto, fp32, bf16, got 'fp8'"),
     ("gradient_checkpointing: false", "gradient_checkpointing: sometimes",
      "model.gradient_checkpointing must be true or false, got 'sometimes'"),
     ("init_embeddings: random", "init_embeddings: glove",
      "model.init_embeddings must be one of random, minilm, minilm-untied, got 'glove'"),
     ("\n  split: lines", "\n  split: chars", "tokenizer.split must be one of lines, words, got 'chars'"),
     ("profile: compact", "profile: tiny", "prompt.profile must be one of full, short, compact, request, got 'tiny'"),
     ("exemplars: 0", "exemplars: 9", "prompt.exemplars must be an integer from 0 to 8, got 9"),
     ("recombine: 0", "recombine: -1", "sft.recombine must be an integer from 0 to 4, got -1")],
    ids=["precision", "gradient_checkpointing", "init_embeddings", "split", "profile", "exemplars", "recombine"],
)  # fmt: skip
def test_a_defaults_file_value_out_of_its_range_is_refused_in_one_line(
    tmp_path: Path, line: str, bad: str, error: str
) -> None:
    from rl.train.config import DEFAULTS_FILE

    text = DEFAULTS_FILE.read_text()
    assert line in text
    (tmp_path / "defaults.yaml").write_text(text.replace(line, bad, 1))
    with pytest.raises(TrainError, match="^" + re.escape(error) + "$"):
        load_defaults(tmp_path / "defaults.yaml")


@pytest.mark.parametrize("split", SPLITS)
def test_tokenizer_round_trips_every_program_exactly(train_bench: Workspace, split: Split) -> None:
    programs = [
        i.program for d in DOMAINS for s in ("train", "test", "ood") for i in load_split(train_bench, d, s)
    ]
    tricky = ['{"sql": "SELECT id FROM products WHERE brand = \'Levi\'\'s\' AND price < 19.99", "retrieval_list": []}',
              '{"sql": "SELECT id FROM emails WHERE sender ILIKE \'%Ünïcødé%\'", "retrieval_list": []}',
              "MiXeD CaSe,\tpunctuation!?\n\n  spaces  "]  # fmt: skip
    tok = train_tokenizer(programs[: len(programs) // 2], vocab_size=512, split=split)
    assert check_round_trip(tok, programs + tricky) == len(programs) + len(tricky)
    ids = tok.encode(programs[0], add_special_tokens=False)
    assert len(ids) < len(programs[0]) / 2, "merges make a program much shorter than its bytes"


def test_the_words_split_makes_a_request_phrase_the_same_tokens_in_the_program(
    train_bench: Workspace,
) -> None:
    insts = [i for d in DOMAINS for i in load_split(train_bench, d, "train")]
    texts = [t for i in insts for t in (i.nl, i.program)]
    phrase = next(e["query"] for i in insts for e in json.loads(i.program)["retrieval_list"]
                  if len(e["query"].split()) >= 3 and f" {e['query']} " in f" {i.nl} ")  # fmt: skip
    words = train_tokenizer(texts, vocab_size=600, split="words")

    def tokens(tok: object, text: str) -> list[str]:
        return [tok.decode([t]) for t in tok.encode(text, add_special_tokens=False)]  # type: ignore[attr-defined]

    in_request = tokens(words, f"items where {phrase} or not")
    in_program = tokens(words, f'"query": "{phrase}"}}')
    rest = tokens(words, " " + " ".join(phrase.split()[1:]))
    assert _contains(in_request, rest) and _contains(in_program, rest), (in_request, in_program, rest)


def _contains(seq: list[str], sub: list[str]) -> bool:
    return any(seq[i : i + len(sub)] == sub for i in range(len(seq) - len(sub) + 1))


def test_tokenizer_refuses_a_bad_split() -> None:
    with pytest.raises(TrainError, match="unknown tokenizer split 'chars'"):
        train_tokenizer(["x"], vocab_size=300, split="chars")  # type: ignore[arg-type]


def test_tokenizer_refuses_a_vocabulary_without_room_for_the_bytes() -> None:
    with pytest.raises(TrainError, match="vocab_size"):
        train_tokenizer(["x"], vocab_size=100)


def test_model_sizes_match_their_documented_parameter_counts() -> None:
    tok = train_tokenizer(["SELECT id FROM products"] * 3, vocab_size=300)
    for size in SIZES.values():
        assert parameter_count(build_model(size, tok)) == approx_parameters(size, vocab_size=len(tok))
    assert round(approx_parameters(SIZES["s"], vocab_size=4096) / 1e6, 1) == 5.0


def test_sft_keeps_the_checkpoint_with_the_lowest_validation_loss(train_bench: Workspace, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    out = tmp_path / "sft"
    rc = main(["--workspace", str(train_bench.root), "train", "sft", *TINY, "--max-steps", "9", "--out", str(out),
               "--lr", "3e-3", "--init-embeddings", "minilm-untied"])  # fmt: skip
    assert rc == 0
    assert "embeddings from minilm-untied:" in capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 9 and summary["precision"] == ("bf16" if native_bf16() else "fp32")
    assert summary["gradient_checkpointing"] is False  # TRL's SFTConfig would turn it on
    records = read_metrics(out)
    evals = {r["step"]: r["eval_loss"] for r in records if "eval_loss" in r}
    assert sorted(evals) == [3, 6, 9]
    best_step = min(evals, key=lambda s: evals[s])
    card = read_card(out / "final")
    assert card["profile"] == "compact" and card["best_eval_loss"] == pytest.approx(evals[best_step])
    assert card["init_embeddings"] == "minilm-untied"
    final = load_model(out / "final")
    assert not final.config.tie_word_embeddings, "the saved planner keeps an output layer of its own"
    assert final.get_output_embeddings().weight.data_ptr() != final.get_input_embeddings().weight.data_ptr()
    assert card["best_checkpoint"].endswith(f"checkpoint-{best_step}")
    assert [r["step"] for r in records if "loss" in r] == list(range(1, 10))
    tok = load_tokenizer(out / "final")
    assert tok.chat_template and tok.eos_token == "<|im_end|>"
    assert rc == main(["train", "plot", str(out)]) and (out / "curves.png").stat().st_size > 10_000
    assert "training curves" in capsys.readouterr().out


def test_sft_refuses_chats_whose_program_falls_past_max_length(
    train_bench: Workspace, tmp_path: Path
) -> None:
    from rl.train.config import replace
    from rl.train.sft import SftJob, run_sft

    params = replace(load_defaults().sft, max_length=24, max_steps=1)
    job = SftJob(workspace=train_bench.root, domains=DOMAINS, out=tmp_path / "sft", params=params, size="xs",
                 profile="short", vocab_size=512, limit=20)  # fmt: skip
    with pytest.raises(TrainError) as err:
        run_sft(job)
    assert err.value.code == "train_max_length" and "raise sft.max_length" in err.value.one_line()
    assert not (tmp_path / "sft" / "final").exists()


def test_offset_gives_training_requests_the_limited_run_never_saw(
    train_bench: Workspace, tmp_path: Path
) -> None:
    from rl.train.sft import SftJob, rows

    def job(*, limit: int | None = None, offset: int = 0) -> SftJob:
        return SftJob(workspace=train_bench.root, domains=DOMAINS, out=tmp_path, profile="compact", limit=limit,
                      offset=offset)  # fmt: skip

    def requests(rs: list[dict[str, object]]) -> set[str]:
        return {r["prompt"][-1]["content"] for r in rs}  # type: ignore[index]

    seen, val = rows(job(limit=30))
    unseen, val_after = rows(job(offset=30, limit=30))
    everything, _ = rows(job())
    assert len(seen) == len(unseen) == 2 * 30
    assert not requests(seen) & requests(unseen), "the offset window shares no request with the first --limit"
    assert requests(seen) | requests(unseen) <= requests(everything)
    assert val == val_after, "the validation hold-out does not move with the offset"
    with pytest.raises(TrainError) as err:
        rows(job(offset=10_000))
    assert err.value.code == "train_window" and "skips all" in err.value.one_line()


@pytest.mark.slow
@pytest.mark.parametrize("config", ["zero2", "zero3"])
def test_sft_trains_under_deepspeed_zero_on_cpu(config: str, train_bench: Workspace, tmp_path: Path) -> None:
    """`prore train sft --deepspeed zeroN`: DeepSpeed's own engine (CPU accelerator, a world of one over gloo)
    trains the tiny planner a few steps; its checkpoints are ZeRO's (sharded optimizer states), and the final
    model, gathered from the shards, loads as a planner. Run as the README's command in its own process, so that
    its process group cannot leak into other tests."""
    import subprocess
    import sys

    pytest.importorskip("deepspeed", reason="needs the deepspeed extra")

    out = tmp_path / config
    cmd = [sys.executable, "-m", "prore", "--workspace", str(train_bench.root), "train", "sft", *TINY,
           "--max-steps", "4", "--eval-steps", "2", "--lr", "3e-3", "--deepspeed", config, "--out", str(out)]  # fmt: skip
    ran = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert ran.returncode == 0, ran.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 4 and summary["train_loss"] > 0
    losses = [r["loss"] for r in read_metrics(out) if "loss" in r]
    assert len(losses) == 4 and losses[-1] < losses[0]
    states = sorted(p.name for p in (out / "checkpoint-4" / "global_step4").iterdir())
    assert any("zero_pp_rank_0" in name and name.endswith("optim_states.pt") for name in states), states
    assert read_card(out / "final")["deepspeed"] == {"config": config, "zero_stage": int(config[-1])}
    model = load_model(out / "final")
    assert parameter_count(model) == summary["parameters"]


@pytest.mark.parametrize(("world", "skipped"), [("1", True), ("2", False)])
def test_deepspeed_skips_its_shared_memory_op_only_in_a_world_of_one(
    world: str, skipped: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A single rank has no peer to reduce with through shared memory: DeepSpeed is told the op is unavailable
    (so its CPU backend does not compile it); a world of several ranks keeps whatever DeepSpeed's probe found."""
    pytest.importorskip("deepspeed", reason="needs the deepspeed extra")
    import deepspeed.ops

    from rl.train.deepspeed import SHM_COMM, skip_shared_memory_comm

    ops = deepspeed.ops.__compatible_ops__
    monkeypatch.setitem(ops, SHM_COMM, True)  # as the probe finds it on Linux; restored after the test
    monkeypatch.setenv("WORLD_SIZE", world)
    assert skip_shared_memory_comm() is skipped
    assert ops[SHM_COMM] is (not skipped)
    from deepspeed.comm.torch import build_shm_op

    if skipped:  # what DeepSpeed's torch backend calls at init: no op, so nothing is compiled
        assert build_shm_op() is None
