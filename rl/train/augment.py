"""SFT pairs repaired by verified mutation (:mod:`rl.mutate`): ``prore train sft --augment-mutations``.

Two sources of programs are repaired, each against its own instance's gold (the verifier alone sees it):

- the training programs themselves, where the served index no longer ranks the gold first;
- with ``rollouts_from``, a model's greedy programs for the training requests that parse but miss.

Each repaired program becomes one more (request, program) pair for SFT; a summary of what was tried and
repaired is written to ``<out>/augment.json``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from indexing.config import Config
from indexing.workspace import Workspace, atomic_write_json
from rl.eval.planner_methods import close_llm, open_llm
from rl.mutate import DEFAULT_BUDGET, repair
from rl.prompt import Profile, messages
from rl.reward import parse_completion
from rl.train.data import load_instances, split_train_val, window
from serving.dsl import Program
from serving.engine import Engine, ExecutionResult


def _rollouts(model_dir: Path, instances: Sequence[Any], profile: Profile) -> list[str]:
    import os

    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from vllm import SamplingParams

    llm = open_llm(model_dir)
    tok = llm.get_tokenizer()
    prompts = [tok.apply_chat_template(messages(i.domain, i.nl, profile=profile), tokenize=False,  # type: ignore[arg-type]
                                       add_generation_prompt=True) for i in instances]  # fmt: skip
    try:
        outs = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=256), use_tqdm=True)
    finally:
        close_llm(llm)
    return [o.outputs[0].text for o in outs]


def augment(cfg: Config, bench: Path, domains: Sequence[str], *, rollouts_from: Path | None, profile: Profile,
            limit: int | None, offset: int = 0, budget: int = DEFAULT_BUDGET,
            out: Path) -> tuple[tuple[str, str, str], ...]:  # fmt: skip
    """(domain, request, repaired program) for every program the search repaired; ``cfg`` serves the
    indexes, ``bench`` is the workspace whose train split is read."""
    ws = Workspace(bench)
    pairs: list[tuple[str, str, str]] = []
    stats: dict[str, dict[str, int]] = {}
    for domain in domains:
        train, _ = split_train_val(load_instances(ws, [domain], "train"))
        train = window(train, offset=offset, limit=limit)  # the instances the SFT run trains on
        candidates: list[tuple[Any, Program]] = []
        for inst in train:
            parsed = parse_completion(inst.program)
            if parsed.program is not None:
                candidates.append((inst, parsed.program))
        if rollouts_from is not None:
            for inst, text in zip(train, _rollouts(rollouts_from, train, profile), strict=True):
                parsed = parse_completion(text)
                if parsed.program is not None:
                    candidates.append((inst, parsed.program))
        engine = Engine.open(cfg, domain)
        tried = repaired = failing = 0
        try:
            results = engine.execute_many([p for _, p in candidates], k=20)
            for (inst, program), got in zip(candidates, results, strict=True):
                if isinstance(got, ExecutionResult) and got.ids[:1] == (inst.gold_id,):
                    continue
                if not isinstance(got, ExecutionResult):
                    continue  # a program that does not run has no structure to mutate
                failing += 1
                gold = inst.gold_id

                def verifier(result: ExecutionResult, gold: str = gold) -> bool:
                    return result.ids[:1] == (gold,)

                found = repair(program, verifier, engine=engine, budget=budget)
                tried += found.executed
                if found.mutant is not None:
                    repaired += 1
                    pairs.append((domain, inst.nl, found.mutant.program.to_json()))
        finally:
            engine.close()
        stats[domain] = {
            "programs": len(candidates),
            "failing": failing,
            "repaired": repaired,
            "executed": tried,
        }
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(
        out / "augment.json", {"budget": budget, "rollouts_from": str(rollouts_from), "domains": stats}
    )
    print(f"verified mutation: {stats}")
    return tuple(pairs)
