"""DEL in TRL's ``SFTTrainer``: ``NumlearnSFTTrainer`` computes the loss in ``compute_loss`` (exact under
accumulation and several processes) and, with ``fused_linear=True``, from the decoder's hidden states
without the full-vocabulary logits. Prompt/completion data: only the completions are trained.

    python examples/trl_sft.py
"""

import transformers
from datasets import Dataset
from trl import SFTConfig

from numlearn.integrations.trl import NumlearnSFTTrainer
from numlearn.losses import build_loss
from numlearn.testing import TEXTS, model, tokenizer

tok = tokenizer()
data = Dataset.from_list([{"prompt": t[: len(t) // 2], "completion": t[len(t) // 2 :]} for t in TEXTS])
losses = {}
for fused in (False, True):
    transformers.set_seed(0)
    args = SFTConfig(output_dir="/tmp/numlearn-example-trl", per_device_train_batch_size=2,
                     gradient_accumulation_steps=2, max_steps=2, learning_rate=1e-2, logging_steps=1,
                     report_to=[], use_cpu=True, save_strategy="no", disable_tqdm=True, shuffle_dataset=False)
    trainer = NumlearnSFTTrainer(model=model(len(tok)), args=args, train_dataset=data, processing_class=tok,
                                 loss_fn=build_loss("del", tok, alpha=1.28), fused_linear=fused)
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss/aux" in h]
    losses[fused] = [h["loss"] for h in logs]
    print(f"fused_linear={fused}: " + "; ".join(
        f"step {i + 1} loss {h['loss']:.4f} (ce {h['loss/ce']:.4f} + aux {h['loss/aux']:.4f}), "
        f"digit entropy {h['train/digit_entropy']:.3f}" for i, h in enumerate(logs)))
gaps = [abs(a - b) for a, b in zip(losses[False], losses[True])]
print("|loss(logits) - loss(fused)| by step: " + ", ".join(f"{g:.1e}" for g in gaps)
      + "  (the same weights at step 1; after it, Adam's g / sqrt(v) magnifies float-rounding differences)")
assert gaps[0] < 1e-4 and gaps[1] < 1e-3
