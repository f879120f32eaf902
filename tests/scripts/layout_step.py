"""One optimizer step of NumlearnTrainer on four examples with very different digit counts, per-device
batch 1 and GA = 4 / processes (the authors' per-device batch); rank 0 saves the step's gradient.
Launched by tests/test_distributed.py with 1, 2 and 4 CPU processes.

    python tests/scripts/layout_step.py OUT.pt oq|ol
"""

import os
import sys

import torch
from transformers import TrainerCallback, TrainingArguments

from numlearn.integrations.hf import NumlearnTrainer
from numlearn.losses import build_loss
from numlearn.testing import batch, grads, model, tokenizer

TEXTS4 = ["x 7 y", "12345678 ab", "q 9", "4.25 and 777"]  # 1, 7, 1 and 5 digit targets (a first token is never one)
HARNESS = {"oq": {"alpha": 1.28, "ce_normalization": "token"}, "ol": {"alpha": 0.1, "ce_normalization": "example_mean"}}


def loss_fn(tok, harness):
    return build_loss("del", tok, aux_normalization="example_mean", **HARNESS[harness])


def main(out, harness):
    torch.set_num_threads(1)
    tok = tokenizer()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rows = [{k: v[0] for k, v in batch(tok, [t]).items()} for t in TEXTS4]

    def collate(examples):
        T = max(len(e["input_ids"]) for e in examples)
        pad = {"input_ids": tok.pad_token_id, "labels": -100, "attention_mask": 0}
        return {k: torch.stack([torch.cat([e[k], torch.full((T - len(e[k]),), v)]) for e in examples])
                for k, v in pad.items()}

    kept = {}

    class Keep(TrainerCallback):
        def on_pre_optimizer_step(self, args, state, control, model=None, **kw):
            kept.setdefault("g", grads(model).clone())

    args = TrainingArguments(output_dir=f"/tmp/numlearn-layout-{os.getpid()}", per_device_train_batch_size=1,
                             gradient_accumulation_steps=4 // world, max_steps=1, learning_rate=1e-3,
                             report_to=[], use_cpu=True, save_strategy="no", disable_tqdm=True, max_grad_norm=1e9,
                             dataloader_num_workers=0, seed=0, logging_steps=1)
    tr = NumlearnTrainer(model=model(len(tok)), args=args, train_dataset=rows, data_collator=collate,
                         loss_fn=loss_fn(tok, harness), callbacks=[Keep()])
    tr.train()
    if int(os.environ.get("RANK", "0")) == 0:
        torch.save({"grad": kept["g"], "world": world, "logs": tr.state.log_history}, out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
