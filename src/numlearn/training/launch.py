"""How the processes of a training run were started, and the ``torch.distributed`` environment they need.

``accelerate launch`` / ``torchrun`` export ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and
``MASTER_PORT`` themselves. A Hydra multirun through hydra-submitit-launcher (``hydra/launcher=
slurm_fsdp_*``, or ``submitit_local`` / ``local_2cpu`` here) instead starts one task per GPU, each
running the Hydra job; those variables are exported from the job's task identity before anything
initialises ``torch.distributed`` (one task per GPU rather than ``srun accelerate launch``: no
second launcher inside the job, and SLURM itself accounts, signals and requeues every rank).
"""

from __future__ import annotations

import os

DIST_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def export_submitit_distributed_env() -> dict | None:
    """Inside a submitit job with several tasks: export the ``env://`` variables of this task and
    return them; otherwise do nothing and return None. Every GPU of the node stays visible (each
    process takes ``cuda:LOCAL_RANK``)."""
    if not os.environ.get("SUBMITIT_EXECUTOR"):
        return None
    import submitit
    from submitit.helpers import TorchDistributedEnvironment

    if submitit.JobEnvironment().num_tasks <= 1:
        return None
    TorchDistributedEnvironment().export(set_cuda_visible_devices=False, overwrite=True)
    return {k: os.environ[k] for k in DIST_VARS}


def launch_info() -> dict:
    """What ``run.json`` records about the process layout (the world size is also its own key)."""
    info = {k.lower(): os.environ[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE") if k in os.environ}
    if os.environ.get("SUBMITIT_EXECUTOR"):
        info["launcher"] = f"submitit-{os.environ['SUBMITIT_EXECUTOR']}"
    elif os.environ.get("ACCELERATE_DYNAMO_BACKEND") is not None or os.environ.get("ACCELERATE_MIXED_PRECISION"):
        info["launcher"] = "accelerate"
    elif os.environ.get("TORCHELASTIC_RUN_ID"):
        info["launcher"] = "torchrun"
    else:
        info["launcher"] = "python"
    for k in ("SLURM_JOB_ID", "SLURM_NTASKS", "SLURM_JOB_NUM_NODES", "SLURM_GPUS_ON_NODE"):
        if k in os.environ:
            info[k.lower()] = os.environ[k]
    return info
