"""DEL in the Hugging Face ``Trainer``: ``NumlearnTrainer`` is ``Trainer`` with the loss computed per
micro-batch as its share of the step's loss, so accumulation 4 x 2 trains what one batch of 8 trains.
(``Trainer(compute_loss_func=LossBridge(...))`` cannot see the step's digit count and refuses
accumulation; ``class MyTrainer(NumlearnTrainerMixin, YourTrainer)`` adds the same to any subclass.)

    python examples/hf_trainer.py
"""

import torch
from transformers import TrainerCallback, TrainingArguments

from numlearn.integrations.hf import NumlearnTrainer
from numlearn.losses import build_loss
from numlearn.testing import TEXTS, batch, grads, model, tokenizer

tok = tokenizer()
loss_fn = build_loss("del", tok, alpha=1.28)
rows = [{k: v[0] for k, v in batch(tok, [t]).items()} for t in TEXTS]  # one example per row


def collate(examples):  # pad to the longest row of the micro-batch
    T = max(len(e["input_ids"]) for e in examples)
    pad = {"input_ids": tok.pad_token_id, "labels": -100, "attention_mask": 0}
    return {k: torch.stack([torch.cat([e[k], torch.full((T - len(e[k]),), v)]) for e in examples])
            for k, v in pad.items()}


class KeepGradient(TrainerCallback):  # read the accumulated gradient before the optimizer step
    def on_pre_optimizer_step(self, args, state, control, model=None, **kw):
        self.g = grads(model).clone()


keep = KeepGradient()
args = TrainingArguments(output_dir="/tmp/numlearn-example-hf", per_device_train_batch_size=2,
                         gradient_accumulation_steps=4, max_steps=1, learning_rate=1e-3, logging_steps=1,
                         report_to=[], use_cpu=True, save_strategy="no", disable_tqdm=True, max_grad_norm=1e9)
trainer = NumlearnTrainer(model=model(len(tok)), args=args, train_dataset=rows, data_collator=collate,
                          loss_fn=loss_fn, callbacks=[keep])
trainer._get_train_sampler = lambda *a, **k: torch.utils.data.SequentialSampler(rows)  # the rows in order
trainer.train()
log = trainer.state.log_history[0]
print(f"loss {log['loss']:.4f} = ce {log['loss/ce']:.4f} + aux {log['loss/aux']:.4f}; "
      f"digit entropy {log['train/digit_entropy']:.3f}, digit accuracy {log['train/digit_acc']:.3f}")

ref = model(len(tok))
b = batch(tok, TEXTS)
loss_fn(ref(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits, b["labels"]).loss.backward()
diff = float((keep.g - grads(ref)).abs().max())
print(f"Trainer, 4 x 2 accumulation: max |grad - grad(one batch of 8)| = {diff:.2e}")
assert diff < 1e-5
