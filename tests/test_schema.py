"""The config's one schema (numlearn.schema): every preset composes typed, defaults live once (no
preset repeats one), a wrong type or a misspelt key is refused at composition, and the committed
store's runs still recompose to the recipes they were trained with."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from numlearn.records import ResultRecord
from numlearn.rundirs import recipe_differences, training_recipe
from numlearn.schema import SCHEMAS, EvalConfig, TrainConfig

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"
EXPERIMENTS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiment_composes_typed(experiment):
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        cfg = compose("evaluate", overrides=[f"experiment={experiment}"])
    assert OmegaConf.get_type(cfg.train) is TrainConfig and OmegaConf.get_type(cfg.eval) is EvalConfig
    OmegaConf.to_container(cfg.train, resolve=True)  # every interpolation resolves
    from numlearn.schema import unknown_root_keys

    assert unknown_root_keys(cfg) == []  # every top-level key is one a config declares (schema.ROOT_KEYS)


@pytest.mark.parametrize("group", sorted({g for g, _ in SCHEMAS}))
def test_no_preset_repeats_a_default(group):
    """A preset sets only what differs from what it starts from: the schema, or the preset it
    extends (conf/eval/smoke.yaml extends paper.yaml)."""
    node = next(n for (g, _), n in SCHEMAS.items() if g == group)
    schema = OmegaConf.to_container(OmegaConf.structured(node))
    for f in sorted((CONF / group).glob("*.yaml")):
        preset = OmegaConf.to_container(OmegaConf.load(f))
        parents = [d for d in preset.get("defaults", []) if isinstance(d, str) and d not in ("_schema", "_self_")]
        base = schema
        if parents:
            with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
                base = OmegaConf.to_container(compose("config", overrides=[f"{group}={parents[0]}"])[group])
        for key, value in preset.items():
            if key == "defaults":
                continue
            assert key in schema, f"{f.name}: {key} is not in numlearn.schema.{node.__name__}"
            assert value != base[key], f"{f.name}: {key}: {value!r} is what it starts from already; leave it out"


@pytest.mark.parametrize("override, error", [
    ("train.max_steps=ten", "could not be converted to Integer"),
    ("eval.top_p=high", "could not be converted to Float"),
    ("train.max_stepz=3", "max_stepz"),  # a misspelt key is refused (++ forces it, by design)
    ("eval.teacher_forced.nn=4", "nn"),
])
def test_wrong_types_and_keys_are_refused_at_composition(override, error):
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        with pytest.raises((ConfigCompositionException, OmegaConfBaseException)) as e:
            compose("config", overrides=[override])
    assert error in f"{e.value} {e.value.__cause__}"


def test_every_config_group_has_a_schema():
    """Every group directory under conf/ whose files are a config node starts each file from its schema.
    The rest are read otherwise: experiment/ and harness/ are global packages (they set keys of the
    groups above), eval/benchmark/, study/ and cluster/ are read through BenchmarkConfig, StudyConfig and
    ClusterConfig by their loaders, hydra/ is Hydra's own."""
    elsewhere = {"experiment", "harness", "hydra", "study", "cluster"}
    groups = {d.name for d in CONF.iterdir() if d.is_dir()} - elsewhere
    assert groups == {g for g, _ in SCHEMAS}, "a conf group without a schema in numlearn.schema.SCHEMAS"
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        for (group, _), node in SCHEMAS.items():
            for f in sorted((CONF / group).glob("*.yaml")):  # from _schema, or from a preset that does
                cfg = compose("evaluate", overrides=[f"{group}={f.stem}"])
                assert OmegaConf.get_type(cfg[group]) is node, f"{f}: its defaults list starts from _schema"


def test_the_schema_defaults_are_the_embedded_default():
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        cfg = compose("config")
    got = OmegaConf.to_container(cfg.train, resolve=True)
    want = dataclasses.asdict(TrainConfig())
    want["fsdp_config"]["transformer_layer_cls_to_wrap"] = [cfg.model.fsdp_wrap]
    assert got == want


def test_stored_runs_recompose_to_their_recipes():
    """A schema that added a key with a value the stored runs did not have would make every stored
    result stale (make ... REUSE=1 would retrain them): one result per stored row, recomposed."""
    root = REPO / "results" / "runs" / "table1_tiny" / "tiny"
    seen = 0
    for row in sorted(p for p in root.iterdir() if p.is_dir()):
        f = next(row.rglob("result.json"))
        r = ResultRecord.read(f)
        # a row named by a loss config (del_paper), or a tag a study gives one (mle_lr0.0015: MLE at another rate)
        own = [f"loss={r.row}"] if (CONF / "loss" / f"{r.row}.yaml").is_file() else [
            f"loss={r.run['loss']}", f"loss.tag={r.row}",
            f"train.learning_rate={r.training_config['train']['learning_rate']}"]
        with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
            cfg = compose("config", overrides=["experiment=table1_tiny", *own,
                                               f"loss.alpha={r.run['alpha']}", f"seed={r.run['seed']}"])
        assert recipe_differences(training_recipe(r.training_config), training_recipe(cfg)) == [], f
        seen += 1
    assert seen >= 6


# -- benchmarks: one schema for the evaluator, make data, the spec and the probe (issue 43) -----------------------
BENCHMARKS = sorted(p.stem for p in (CONF / "eval" / "benchmark").glob("*.yaml"))


@pytest.mark.parametrize("name", BENCHMARKS)
def test_every_benchmark_file_reads_through_the_one_schema(name):
    from numlearn.evaluation.spec import BenchmarkSpec
    from numlearn.schema import BenchmarkConfig, load_benchmark_config

    b = load_benchmark_config(CONF / "eval" / "benchmark" / f"{name}.yaml")
    assert OmegaConf.get_type(b) is BenchmarkConfig and b.name == name
    assert bool(b.file) != bool(b.generator)  # a file under the data root, or a generator
    assert BenchmarkSpec.from_config(b).name == name


def _conf_copy(tmp_path: Path) -> Path:
    import shutil

    conf = tmp_path / "conf"
    shutil.copytree(CONF, conf)
    return conf


def test_a_misspelt_benchmark_key_is_refused_in_one_line_by_every_reader(tmp_path, cli, monkeypatch):
    """It used to be ignored: svamp with ``triger:`` evaluated without its trigger."""
    from numlearn.schema import load_benchmark_config

    conf = _conf_copy(tmp_path)
    f = conf / "eval" / "benchmark" / "svamp.yaml"
    f.write_text(f.read_text() + "triger: ['####']\n")
    with pytest.raises(ValueError, match="svamp.yaml: Key 'triger' not in 'BenchmarkConfig'"):
        load_benchmark_config(f)
    r = cli("numlearn.evaluate", ["eval=paper", "model_path=x"],
            env={"NUMLEARN_CONF_DIR": str(conf), "NUMLEARN_OUTPUT_DIR": str(tmp_path / "out")})
    assert r.returncode == 1 and len(r.lines) == 1, r.stderr
    assert "conf/eval/benchmark/svamp.yaml: Key 'triger' not in 'BenchmarkConfig'" in r.lines[0]
    from numlearn.data.fetch import wanted_files

    with pytest.raises(ValueError, match="triger"):  # make data reads the same schema
        wanted_files(conf)


@pytest.mark.parametrize("path,line,schema", [("train/cpu.yaml", "learning_rat: 0.1", "TrainConfig"),
                                               ("model/tiny.yaml", "dtyp: bfloat16", "ModelConfig"),
                                               ("logger/none.yaml", "projct: mine", "LoggerConfig"),
                                               ("paths/default.yaml", "data_dri: /data", "PathsConfig")])
def test_a_misspelt_key_in_a_preset_file_is_one_line(tmp_path, cli, path, line, schema):
    """A model preset's misspelt key was silently ignored (it had no schema), as was a logger's or a
    paths file's."""
    conf = _conf_copy(tmp_path)
    f = conf / path
    f.write_text(f.read_text() + line + "\n")
    r = cli("numlearn.train", ["loss=del"], env={"NUMLEARN_CONF_DIR": str(conf),
                                                "NUMLEARN_OUTPUT_DIR": str(tmp_path / "out")})
    assert r.returncode == 1 and len(r.lines) == 1, r.stderr
    assert f"conf/{path}: Key '{line.split(':')[0]}' not in '{schema}'" in r.lines[0]
    assert not (tmp_path / "out").exists()  # refused before any run dir


def test_a_local_benchmark_without_url_or_checksum_is_read_and_make_data_says_where_it_goes(tmp_path, capsys):
    """A doc-conformant local benchmark (file, no url, no sha256) used to crash make data."""
    from numlearn.data.fetch import fetch, wanted_files
    from numlearn.evaluation.benchmarks import load_benchmark
    from numlearn.schema import load_benchmark_config

    conf = _conf_copy(tmp_path)
    f = conf / "eval" / "benchmark" / "mine.yaml"
    f.write_text("name: mine\nfile: benchmarks/mine/mine.jsonl\nloader: gsm8k\nanswer: number\n")
    assert {"name": "mine", "file": "benchmarks/mine/mine.jsonl", "sha256": None, "url": None} in wanted_files(conf)
    data = tmp_path / "data"
    import numlearn.data.fetch as fetch_mod

    orig = fetch_mod.wanted_files
    fetch_mod.wanted_files = lambda: orig(conf)
    try:
        assert fetch(data, ["mine"]) == 1
        assert "a local benchmark (no url in its config): put benchmarks/mine/mine.jsonl under" in capsys.readouterr().err
        (data / "benchmarks" / "mine").mkdir(parents=True)
        (data / "benchmarks" / "mine" / "mine.jsonl").write_text('{"question": "1+1?", "answer": "so #### 2"}\n')
        assert fetch(data, ["mine"]) == 0
    finally:
        fetch_mod.wanted_files = orig
    problems, info = load_benchmark(load_benchmark_config(f), data, tmp_path / "cache")
    assert [p.answer for p in problems] == ["2"] and info["name"] == "mine"


def test_a_misspelt_key_in_a_loss_file_is_one_line_and_null_options_are_the_losses_defaults(tmp_path, cli):
    """conf/loss files have a schema too (LossConfig): `plac_weights: none` was refused only when the loss was
    built; now before anything runs. A null option is not passed: the loss's own default applies."""
    from numlearn.training.run import loss_options

    conf = _conf_copy(tmp_path)
    f = conf / "loss" / "del_nopw.yaml"
    f.write_text(f.read_text().replace("place_weights: none", "plac_weights: none"))
    r = cli("numlearn.train", ["loss=del_nopw"], env={"NUMLEARN_CONF_DIR": str(conf),
                                                     "NUMLEARN_OUTPUT_DIR": str(tmp_path / "out")})
    assert r.returncode == 1 and len(r.lines) == 1, r.stderr
    assert "conf/loss/del_nopw.yaml: Key 'plac_weights' not in 'LossConfig'" in r.lines[0]
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        cfg = compose("config", overrides=["loss=dist2"])
    assert cfg.loss.beta is None and "beta" not in loss_options(cfg.loss) and "form" not in loss_options(cfg.loss)
    assert loss_options(cfg.loss)["tau"] == 1.0


def test_the_cluster_template_is_the_schema_and_a_misspelt_key_is_named(tmp_path):
    from numlearn.schema import ClusterConfig, load_cluster_config

    assert load_cluster_config(CONF / "cluster" / "default.yaml") == ClusterConfig()
    bad = tmp_path / "site.yaml"
    bad.write_text("time_margin: 0.5\n")
    with pytest.raises(ValueError, match="time_margin=0.5 must be >= 1"):
        load_cluster_config(bad)


def test_a_misspelt_top_level_section_of_an_experiment_file_is_refused_with_the_nearest_key(tmp_path):
    """Issue 62: ``trian:`` in an experiment file was accepted silently (the run trained with the defaults). Every
    shipped preset composes with known top-level keys only; a misspelt one is one line naming it and the nearest."""
    import shutil

    from hydra import compose, initialize_config_dir

    from numlearn.schema import check_ranges

    conf = tmp_path / "conf"  # (every shipped preset: test_every_experiment_composes_typed)
    shutil.copytree(CONF, conf)
    (conf / "experiment" / "typo.yaml").write_text(
        "# @package _global_\ndefaults:\n  - table1_tiny\n  - _self_\ntrian:\n  max_steps: 3\n")
    with initialize_config_dir(version_base="1.3", config_dir=str(conf)):
        cfg = compose("config", overrides=["experiment=typo"])
    with pytest.raises(ValueError, match=r"^trian: no such top-level key .*did you mean train\?: fix the key"):
        check_ranges(cfg)
