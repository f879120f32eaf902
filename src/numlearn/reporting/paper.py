"""The paper's own reference numbers (the authors' README, mACC over the seven
benchmarks). Quoted, never mixed with ours. Per-benchmark Table 1 values are not available."""

PAPER_MACC = {
    # DEL-trained checkpoints
    ("CodeLlama-7B", "del"): 49.0,
    ("Qwen2.5-1.5B", "del"): 55.4,
    ("Mistral-7B", "del"): 56.5,
    ("DeepSeek-Math-7B-Instruct", "del"): 66.1,
    ("Qwen2.5-7B", "del"): 70.6,
    # loss ablation on Qwen2.5-1.5B
    ("Qwen2.5-1.5B", "mle"): 52.8,
    ("Qwen2.5-1.5B", "mixce"): 52.9,
    ("Qwen2.5-1.5B", "emo"): 53.4,
    ("Qwen2.5-1.5B", "ntl"): 53.8,
    ("Qwen2.5-1.5B", "dist2"): 53.1,
}
