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
        with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
            cfg = compose("config", overrides=["experiment=table1_tiny", f"loss={r.row}",
                                               f"loss.alpha={r.run['alpha']}", f"seed={r.run['seed']}"])
        assert recipe_differences(training_recipe(r.training_config), training_recipe(cfg)) == [], f
        seen += 1
    assert seen >= 6
