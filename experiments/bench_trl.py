"""DEL in TRL's SFTTrainer: ``compute_loss_func=LossBridge`` against ``NumlearnSFTTrainer`` (a benchmark, not a test).

    python experiments/bench_trl.py [--steps 8] [--vocab 32000] [--seq 256]

Three trainers on the same data, model and seed, GA 1 (where the plain ``compute_loss_func`` is exact):
  * ``compute_loss_func`` -- TRL's ``SFTTrainer(compute_loss_func=LossBridge(loss))``; TRL 1.16 runs an
    extra no-grad forward per step for its entropy/accuracy logs on this route;
  * ``numlearn_logits`` -- ``NumlearnSFTTrainer(loss_fn=loss)``: the loss in ``compute_loss``;
  * ``numlearn_fused`` -- the same with ``fused_linear=True``: the loss from the decoder's hidden states,
    no full-vocabulary logits.
Each trainer runs ``--steps`` optimizer steps after one warm-up step; the time is per optimizer step,
the ratios are against ``compute_loss_func`` in this one run (machines are noisy). The last column is
the first step's loss, so that the routes are seen to train the same objective.
"""

from __future__ import annotations

import argparse
import tempfile
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=4)
    a = ap.parse_args()

    import transformers
    from datasets import Dataset
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast, TrainerCallback
    from trl import SFTConfig, SFTTrainer

    from numlearn.integrations.hf import LossBridge
    from numlearn.integrations.trl import NumlearnSFTTrainer
    from numlearn.losses import build_loss

    chars = list("0123456789.") + list("abcdefghijklmnopqrstuvwxyz ,=+-*$") + ["<eos>"]
    vocab = {c: i for i, c in enumerate(chars)} | {f"<x{i}>": len(chars) + i for i in range(a.vocab - len(chars))}
    raw = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<eos>"))
    raw.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    raw.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="<eos>", pad_token="<eos>")

    g = torch.Generator().manual_seed(0)
    def text(n):
        return "".join(chars[int(i)] for i in torch.randint(0, len(chars) - 1, (n,), generator=g))
    rows = [{"prompt": text(a.seq // 4), "completion": text(a.seq - a.seq // 4 - 1)}
            for _ in range(a.batch * (a.steps + 1))]
    data = Dataset.from_list(rows)

    class Clock(TrainerCallback):
        def __init__(self):
            self.t = []

        def on_step_end(self, args, state, control, **k):
            self.t.append(time.perf_counter())

    results = {}
    for name in ("compute_loss_func", "numlearn_logits", "numlearn_fused"):
        transformers.set_seed(0)
        model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=128, intermediate_size=256,
                                             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                                             max_position_embeddings=a.seq + 8))
        loss = build_loss("del", tok, alpha=1.28)
        with tempfile.TemporaryDirectory() as out:
            args = SFTConfig(output_dir=out, per_device_train_batch_size=a.batch, gradient_accumulation_steps=1,
                             max_steps=a.steps + 1, learning_rate=1e-4, logging_steps=1, save_strategy="no",
                             report_to=[], use_cpu=True, seed=0, disable_tqdm=True, shuffle_dataset=False,
                             dataloader_num_workers=0, max_length=a.seq)
            clock = Clock()
            if name == "compute_loss_func":
                tr = SFTTrainer(model=model, args=args, train_dataset=data, processing_class=tok,
                                compute_loss_func=LossBridge(loss), callbacks=[clock])
            else:
                tr = NumlearnSFTTrainer(model=model, args=args, train_dataset=data, processing_class=tok,
                                        loss_fn=loss, fused_linear=name == "numlearn_fused", callbacks=[clock])
            tr.train()
        per_step = (clock.t[-1] - clock.t[0]) / (len(clock.t) - 1)
        first = next(h["loss"] for h in tr.state.log_history if "loss" in h)
        results[name] = (per_step, first)

    base = results["compute_loss_func"][0]
    print(f"TRL SFTTrainer, DEL alpha 1.28, batch {a.batch} x {a.seq} tokens, vocab {len(tok)}, {a.steps} timed steps")
    print(f"{'route':<20} {'ms/step':>9} {'ratio':>7} {'step-1 loss':>12}")
    for name, (t, first) in results.items():
        print(f"{name:<20} {1000 * t:>9.1f} {t / base:>7.2f} {first:>12.4f}")


if __name__ == "__main__":
    main()
