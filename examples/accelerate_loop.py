"""DEL in an accelerate loop: ``accelerator.backward`` divides by the accumulation steps and DDP/FSDP
average over processes, so a step-normalised loss is multiplied by ``backward_scale`` first.

    python examples/accelerate_loop.py                      # one process
    ACCELERATE_USE_CPU=true accelerate launch --multi_gpu --num_processes 2 examples/accelerate_loop.py
                                  # two CPU processes over gloo (on GPUs: without ACCELERATE_USE_CPU)
"""

from accelerate import Accelerator

from numlearn.losses import backward_scale, build_loss, step_counts
from numlearn.testing import TEXTS, batch, grads, model, tokenizer

acc = Accelerator(gradient_accumulation_steps=2)
tok = tokenizer()
loss_fn = build_loss("del", tok, alpha=1.28)

rank, world = acc.process_index, acc.num_processes
mine = TEXTS[rank::world]  # this process's share of the step
m = acc.prepare(model(len(tok)))
micro = [batch(tok, mine[i : i + len(mine) // 2]) for i in (0, len(mine) // 2)]
counts = step_counts(micro, loss_fn, all_reduce=lambda t: acc.reduce(t, reduction="sum"))
for mb in micro:
    with acc.accumulate(m):
        out = loss_fn(m(input_ids=mb["input_ids"], attention_mask=mb["attention_mask"]).logits, mb["labels"],
                      step=counts)
        acc.backward(out.loss * backward_scale(acc))

ref = model(len(tok))
b = batch(tok, TEXTS)
loss_fn(ref(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits, b["labels"]).loss.backward()
diff = float((grads(m) - grads(ref)).abs().max())
if acc.is_main_process:
    print(f"{world} process(es) x 2 accumulation: max |grad - grad(one batch of 8)| = {diff:.2e}")
assert diff < 1e-5
