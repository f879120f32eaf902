"""notebooks/analysis.ipynb executes on small artefacts (two tiny runs, a few problems)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

REPO = Path(__file__).resolve().parents[1]
SMALL = ["model.config.hidden_size=32", "model.config.intermediate_size=64", "model.config.num_hidden_layers=2",
         "model.config.num_attention_heads=2", "model.config.num_key_value_heads=2", "model.vocab_size=300",
         "data.n_train=200", "eval.teacher_forced.n=16", "train=smoke", "experiment_name=nb",
         "eval.benchmarks.synthetic_test.generator.n=6", "eval.benchmarks.synthetic_ood.generator.n=4",
         "eval.max_new_tokens_cap=8"]


@pytest.mark.long  # two trainings, two evaluations and the notebook: ~15 s; CI runs the long tier
def test_analysis_notebook_executes(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("nbclient")
    from numlearn.evaluate import run_evaluation
    from numlearn.reporting import store
    from numlearn.training.run import train

    for loss in ("mle", "del"):
        with initialize_config_dir(version_base="1.3", config_dir=str(REPO / "conf")):
            over = [*SMALL, f"loss={loss}", f"paths.output_dir={tmp_path}/out", f"paths.cache_dir={tmp_path}/cache"]
            train(compose("config", overrides=over))
            run_evaluation(compose("evaluate", overrides=over))
            val = [o for o in over if not o.startswith("eval.benchmarks.")]
            run_evaluation(compose("evaluate", overrides=[*val, "eval=synthetic_val",
                                                          "eval.benchmarks.synthetic_val.generator.n=6"]))
    # the tables read the committed store; a stored run whose model this machine lacks is named, not plotted
    store.publish([tmp_path / "out" / "nb"], tmp_path / "out", tmp_path / "store")
    (del_final,) = (tmp_path / "out" / "nb" / "tiny" / "del").glob("alpha=*/seed=0/final")
    del_final.rename(del_final.with_name("final.elsewhere"))
    nb = nbformat.read(REPO / "notebooks" / "analysis.ipynb", as_version=4)
    _generator().execute(nb, REPO, env={"NUMLEARN_NB_RUNS": str(tmp_path / "store" / "nb"),
                                        "NUMLEARN_NB_SWEEP": str(tmp_path / "store" / "nb" / "tiny"),
                                        "NUMLEARN_NB_CACHE": str(tmp_path / "cache"), "NUMLEARN_NB_MAX_EXAMPLES": "8"})
    images = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if "image/png" in o.get("data", {})]
    assert len(images) >= 3  # per-digit accuracy, weight sweep, digit distributions
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "1 of 2 runs have no local model" in printed


def _generator():
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_analysis_notebook", REPO / "notebooks" / "make_analysis_notebook.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # builds the cells; executes nothing (the __main__ guard)
    return mod


def _analysis():
    return _generator().nb


def test_analysis_notebook_is_committed_with_outputs_from_the_store():
    """make notebook (python -m numlearn.pipeline notebook): the committed notebook is its generator's,
    executed on the committed store, so its tables and plots show on a code host."""
    nbformat = pytest.importorskip("nbformat")
    committed = nbformat.read(REPO / "notebooks" / "analysis.ipynb", as_version=4)
    assert [c.source for c in committed.cells] == [c.source for c in _analysis().cells], \
        "notebooks/analysis.ipynb is stale: run make notebook"
    code = [c for c in committed.cells if c.cell_type == "code"]
    assert all(c.outputs for c in code)
    assert not [o for c in code for o in c.outputs if o.get("output_type") == "error"]
    images = [o for c in code for o in c.outputs if "image/png" in o.get("data", {})]
    assert len(images) >= 3  # per-digit accuracy, weight sweep, digit distributions (the stored figure)


def _tutorial():
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_library_tutorial", REPO / "notebooks" / "make_library_tutorial.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # builds the cells; executes nothing (the __main__ guard)
    return mod.nb


def test_library_tutorial_is_committed_with_outputs_of_its_generator():
    nbformat = pytest.importorskip("nbformat")
    committed = nbformat.read(REPO / "notebooks" / "library_tutorial.ipynb", as_version=4)
    assert [c.source for c in committed.cells] == [c.source for c in _tutorial().cells], \
        "notebooks/library_tutorial.ipynb is stale: run .venv/bin/python notebooks/make_library_tutorial.py"
    assert all(c.outputs for c in committed.cells if c.cell_type == "code")


@pytest.mark.long  # the default tier's time (make test-distributed and CI run it)
def test_library_tutorial_executes():
    import re

    nbclient = pytest.importorskip("nbclient")
    nb = _tutorial()
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(REPO / "notebooks")}}).execute()
    printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert not [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert float(re.search(r"max \|grad\(4 x 2\) - grad\(1 x 8\)\| = (\S+)", printed).group(1)) < 1e-5
    assert re.search(r"del: ce 3\.\d+ -> 0\.\d+, digit entropy", printed)  # DEL trains: CE falls below 1
    assert any("image/png" in o.get("data", {}) for c in nb.cells for o in c.get("outputs", []))
