"""Training and generation throughput of the local planner sizes, side by side in one run.

For each model size of :mod:`rl.train.model` (``xs``, ``s``, ``m``): an optimizer step of a batch of 16
chats as long as the short-profile chats of the benchmark (forward, backward and AdamW, as TRL's SFT
step), and greedy ``generate`` of 8 prompts x 4 completions x 64 new tokens (a GRPO rollout). The tokenizer
is trained on the short-profile prompts and the example programs, so the lengths are the trainer's.

Prints a table (seconds per step, tokens/s) and writes ``bench/results/train_speed.json``. The model
size used by default (``s``) is the largest whose SFT step stays near a second on a quiet 2-core machine;
on a shared machine every number is several times slower (record ``load`` with them).
"""

from __future__ import annotations

import argparse
import json
import os
import time

from common import RESULTS, ROOT, run_main, write_results


def main() -> None:
    import torch

    from rl.prompt import messages
    from rl.train.model import SIZES, build_model, parameter_count
    from rl.train.tokenizer import train_tokenizer

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=5, help="timed optimizer steps per size")
    ap.add_argument("--sizes", nargs="+", default=list(SIZES))
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    programs = [
        json.dumps(json.loads(p.read_text())) for p in sorted((ROOT / "examples/programs").glob("*.json"))
    ]
    chats = [[*messages(p.name.split("_")[0], f"request {i}: {p.stem.replace('_', ' ')}", profile="short"), {"role": "assistant", "content": prog}]
             for i, (p, prog) in enumerate(zip(sorted((ROOT / "examples/programs").glob("*.json")), programs, strict=True))]  # fmt: skip
    tok = train_tokenizer([m["content"] for c in chats for m in c] * 50, vocab_size=4096)
    texts = [tok.apply_chat_template(c, tokenize=False) for c in chats]
    length = round(sum(len(tok(t)["input_ids"]) for t in texts) / len(texts))
    prompt_ids = tok(tok.apply_chat_template(chats[0][:-1], tokenize=False, add_generation_prompt=True),
                     return_tensors="pt")["input_ids"]  # fmt: skip
    rows = []
    for name in args.sizes:
        model = build_model(SIZES[name], tok)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        batch = torch.randint(0, len(tok), (16, length))
        model.train()
        model(input_ids=batch, labels=batch).loss.backward()  # warm-up
        opt.step()
        opt.zero_grad()
        t0 = time.perf_counter()
        for _ in range(args.steps):
            model(input_ids=batch, labels=batch).loss.backward()
            opt.step()
            opt.zero_grad()
        step_s = (time.perf_counter() - t0) / args.steps
        model.eval()
        prompts = prompt_ids.repeat(32, 1)
        t0 = time.perf_counter()
        with torch.no_grad():
            model.generate(
                prompts, max_new_tokens=64, min_new_tokens=64, do_sample=True, pad_token_id=tok.pad_token_id
            )
        gen_s = time.perf_counter() - t0
        rows.append({"size": name, "parameters": parameter_count(model), "chat_tokens": length,
                     "sft_step_s": round(step_s, 3), "sft_tokens_per_s": round(16 * length / step_s),
                     "generate_32x64_s": round(gen_s, 2), "generate_tokens_per_s": round(32 * 64 / gen_s)})  # fmt: skip
    load = os.getloadavg()[0]
    print(
        f"{'size':5} {'params':>10} {'SFT s/step':>11} {'SFT tok/s':>10} {'gen 32x64 s':>12} {'gen tok/s':>10}"
    )
    for r in rows:
        print(f"{r['size']:5} {r['parameters']:>10,} {r['sft_step_s']:>11} {r['sft_tokens_per_s']:>10,} "
              f"{r['generate_32x64_s']:>12} {r['generate_tokens_per_s']:>10,}")  # fmt: skip
    print(f"batch 16 x {length} tokens; {args.threads} threads; 1-minute load average {load:.1f}")
    write_results(RESULTS / "train_speed.json", {"threads": args.threads, "load_average": load, "rows": rows})


if __name__ == "__main__":
    run_main(main)
