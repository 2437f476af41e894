"""trainmesh.keras routes Keras' own methods for the run's model and optimizer (routes.py): nothing is written
onto the user's model, optimizer, metrics or their classes, any other model runs Keras' own methods, and a
class of the user's overriding a routed method is refused under several processes.

Before routes.py, sync.py put ``train_step``, ``test_step``, ``_get_metrics_result_or_logs`` and
``compute_metrics`` on the model and ``finalize_variable_values`` on the optimizer for the length of a call,
zero.py ``add_variable_from_reference`` on the optimizer, draws.py ``predict_step`` on the model, and
batch_metrics.py ``update_state`` on metrics a step updated by hand (test_batch_metrics.py: now refused).
"""

import importlib.util
import os
import sys
from pathlib import Path

os.environ["KERAS_BACKEND"] = "torch"  # before keras is imported

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("keras") is None, reason="the keras extra is not installed (pip install trainmesh[keras])"
)


@pytest.fixture(scope="module")
def ddp(keras_ddp_programs) -> Path:
    return keras_ddp_programs("keras_batch_metric_programs")


def test_nothing_is_written_onto_the_program_s_objects_during_a_run(ddp):
    """keras_batch_metric_programs' ``pair_own_step`` at 2 processes under zero1: a train_step/test_step of
    the model's own returning compute_metrics, a coupled compiled metric (given the global batch), an Adam
    of the program's own class; fit with validation, evaluate and predict. Its ``Untouched`` callback looked
    at every batch's beginning (and WatchedAdam at each build, zero1's rebuilds included) for instance
    attributes of trainmesh's old names or shadowing a method, on the model, its optimizer and its metrics,
    and for any change to their own classes: none on either rank (before: 33 on rank 0, such as
    ``OwnStep.train_step``, ``WatchedAdam.finalize_variable_values``, ``WatchedAdam.add_variable_from_reference``).
    Its numbers against Keras' own: test_batch_metrics.py."""
    for rank in (0, 1):
        result = torch.load(ddp / f"pair_own_step.rank{rank}", weights_only=False)
        assert "error" not in result, result.get("error")
        assert result["touched"] == []
        assert result["history"][0]["pair_matches"][-1] > 100, "the program must count many pairs"


def _model(cls=None):
    import keras

    keras.utils.set_random_seed(0)
    cls = cls or keras.Sequential
    model = cls([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    return model


def test_only_the_run_s_model_takes_the_routed_steps_and_keras_cache_comes_back():
    """Within steps_through(model, ...), the model's fit, evaluate and predict run the given steps (which call
    its own), another model's fit runs Keras' own step function, and afterwards the model's step functions are
    Keras' own again (a later fit of Keras' own runs Keras' step): its attributes are the same names."""
    from trainmesh.keras.routes import steps_through

    x, y = np.ones((8, 3), dtype="float32"), np.ones((8, 1), dtype="float32")
    model, other = _model(), _model()
    model.fit(x, y, batch_size=4, verbose=0)  # Keras' step functions, cached
    model.evaluate(x, y, batch_size=4, verbose=0)
    model.predict(x, batch_size=4, verbose=0)
    kinds = ("train", "test", "predict")
    keras_functions, names = [getattr(model, f"{kind}_function") for kind in kinds], set(vars(model))
    seen = []

    def step(kind):
        def run(data, keras_step):
            seen.append(kind)
            assert keras_step == getattr(model, f"{kind}_step")  # the model's own (not compiled: no jit_compile)
            return keras_step(data)

        return run

    with steps_through(model, {kind: step(kind) for kind in kinds}):
        model.fit(x, y, batch_size=4, verbose=0)
        model.evaluate(x, y, batch_size=4, verbose=0)
        model.predict(x, batch_size=4, verbose=0)
        other.fit(x, y, batch_size=4, verbose=0)
    assert seen == ["train"] * 2 + ["test"] * 2 + ["predict"] * 2
    assert [getattr(model, f"{kind}_function") for kind in kinds] == keras_functions
    assert set(vars(model)) == names
    model.fit(x, y, batch_size=4, verbose=0)
    assert len(seen) == 6


def test_under_jit_compile_the_model_s_step_is_compiled_and_trainmesh_s_around_it_is_not():
    """jit_compile=True: Keras torch.compile's its step function, which calls the model's train_step. Before,
    trainmesh's step around it (step counts, batch sizes, the batch logs' collectives) was compiled with it: a
    graph break at each of its Python-state reads, and a callback reading the batch logs under 2 processes
    failed in the first step with InternalTorchDynamoError (all_gather_object traced, /work/progs/k-left). Now
    the model's step alone is compiled, as Keras compiles it, and trainmesh's runs eagerly (nothing is
    compiled here: the step given is not called)."""
    import keras
    from trainmesh.keras.routes import steps_through

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse", jit_compile=True)
    seen = []

    def run(data, keras_step=None):
        seen.append((torch.compiler.is_compiling(), getattr(keras_step, "_torchdynamo_orig_callable", None)))
        return {}

    with steps_through(model, {"train": run}):
        model.fit(np.ones((4, 3), dtype="float32"), np.ones((4, 1), dtype="float32"), batch_size=4, verbose=0)
    assert seen == [(False, model.train_step)]


def test_a_model_overriding_a_routed_keras_method_is_refused_under_several_processes():
    """A model class of the user's with its own make_train_function (or _get_metrics_result_or_logs, or
    make_predict_function) would go around trainmesh's steps or metric sums: refused before start under 2
    processes, naming it; one process is Keras' own."""
    import keras
    from trainmesh.keras.arguments import check_evaluate, check_fit, check_predict

    class OwnMaker(keras.Sequential):
        def make_train_function(self, force=False):
            return super().make_train_function(force)

        def make_predict_function(self, force=False):
            return super().make_predict_function(force)

    model = _model(OwnMaker)
    x, y = np.ones((8, 3), dtype="float32"), np.ones((8, 1), dtype="float32")
    with pytest.raises(ValueError, match=r"OwnMaker overrides .*OwnMaker.make_train_function.*run on one process"):
        check_fit(model, x, y, {"batch_size": 2}, world=2)
    with pytest.raises(ValueError, match=r"OwnMaker.make_predict_function"):
        check_predict(model, x, {"batch_size": 2}, world=2)
    check_evaluate(model, x, y, {"batch_size": 2}, world=2)  # its test step is Keras' own
    check_fit(model, x, y, {"batch_size": 2}, world=1)


def test_zero1_refuses_an_optimizer_overriding_finalize_variable_values_under_several_processes():
    """Keras calls finalize_variable_values when fit ends; zero1 gathers the split state in Keras' own
    method first (routed for the run's optimizer), which an override of the user's may not reach:
    refused before start under 2 processes, naming it; under one process nothing is split."""
    import keras
    from trainmesh.keras.zero import refuse_unsupported

    class Finalizing(keras.optimizers.SGD):
        def finalize_variable_values(self, var_list):
            pass

    model = _model()
    model.compile(optimizer=Finalizing(), loss="mse")
    with pytest.raises(ValueError, match=r"Finalizing: it overrides .*Finalizing.finalize_variable_values"):
        refuse_unsupported(model, {}, world=2)
    refuse_unsupported(model, {}, world=1)
