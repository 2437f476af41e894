"""``PyTorchProfiler``: torch.profiler around the run, as Lightning 2.6's (CPU activities, and CUDA
where there is a GPU): every profiled action a ``record_function``, a profiler step at each
training/validation/test/predict step on a schedule (by default wait 1, warm up 1, record 3), a
Chrome trace per step kind in ``dirpath``, and a table of the operators in the report.
``emit_nvtx`` is not offered (refused)."""

from __future__ import annotations

import inspect
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch
from torch.autograd.profiler import EventList, record_function
from torch.profiler import ProfilerAction, ProfilerActivity, tensorboard_trace_handler

from trainmesh.profilers.profiler import Profiler
from trainmesh.profilers.pytorch_schedule import RegisterRecordFunction, ScheduleWrapper
from trainmesh.utilities.rank_zero import rank_zero_warn


class PyTorchProfiler(Profiler):
    """torch.profiler over the run; ``**profiler_kwargs`` go to ``torch.profiler.profile``.

    >>> profiler = PyTorchProfiler(filename="perf", row_limit=10)
    """

    STEP_FUNCTIONS = {"training_step", "validation_step", "test_step", "predict_step"}
    AVAILABLE_SORT_KEYS = {
        "cpu_time",
        "cuda_time",
        "cpu_time_total",
        "cuda_time_total",
        "cpu_memory_usage",
        "cuda_memory_usage",
        "self_cpu_memory_usage",
        "self_cuda_memory_usage",
        "count",
    }

    def __init__(
        self,
        dirpath: str | Path | None = None,
        filename: str | None = None,
        group_by_input_shapes: bool = False,
        emit_nvtx: bool = False,
        export_to_chrome: bool = True,
        row_limit: int = 20,
        sort_by_key: str | None = None,
        record_module_names: bool = True,
        table_kwargs: dict[str, Any] | None = None,
        **profiler_kwargs: Any,
    ) -> None:
        super().__init__(dirpath=dirpath, filename=filename)
        if emit_nvtx:
            raise ValueError("PyTorchProfiler(emit_nvtx=True) is not offered by trainmesh: use emit_nvtx=False")
        self._group_by_input_shapes = group_by_input_shapes and profiler_kwargs.get("record_shapes", False)
        self._export_to_chrome = export_to_chrome
        self._row_limit = row_limit
        self._sort_by_key = sort_by_key or _default_sort_by_key(profiler_kwargs)
        self._record_module_names = record_module_names
        self._profiler_kwargs = profiler_kwargs
        self._table_kwargs = table_kwargs if table_kwargs is not None else {}
        self.profiler: Any = None
        self.function_events: EventList | None = None
        self._lightning_module: Any = None  # set by the Trainer as a stage starts
        self._register: RegisterRecordFunction | None = None
        self._recording_map: dict[str, record_function] = {}
        self._schedule: ScheduleWrapper | None = None
        self._init_kineto(profiler_kwargs)
        if self._sort_by_key not in self.AVAILABLE_SORT_KEYS:
            raise ValueError(f"Found sort_by_key: {self._sort_by_key}. Should be within {self.AVAILABLE_SORT_KEYS}. ")
        valid_table_keys = set(inspect.signature(EventList.table).parameters) - {"self", "sort_by", "row_limit"}
        for key in self._table_kwargs:
            if key in {"sort_by", "row_limit"}:
                raise KeyError(
                    f"Found invalid table_kwargs key: {key}. This is already a positional argument of the Profiler."
                )
            if key not in valid_table_keys:
                raise KeyError(f"Found invalid table_kwargs key: {key}. Should be within {valid_table_keys}.")

    def _init_kineto(self, profiler_kwargs: Any) -> None:
        has_schedule = "schedule" in profiler_kwargs
        self._has_on_trace_ready = "on_trace_ready" in profiler_kwargs
        schedule = profiler_kwargs.get("schedule")
        if schedule is not None:
            if not callable(schedule):
                raise ValueError(f"Schedule should be a callable. Found: {schedule}")
            action = schedule(0)
            if not isinstance(action, ProfilerAction):
                raise ValueError(f"Schedule should return a `torch.profiler.ProfilerAction`. Found: {action}")
        schedule = schedule if has_schedule else self._default_schedule()
        self._schedule = ScheduleWrapper(schedule) if schedule is not None else None
        self._profiler_kwargs["schedule"] = self._schedule
        self._profiler_kwargs["activities"] = profiler_kwargs.get("activities") or _default_activities()
        self._export_to_flame_graph = profiler_kwargs.get("export_to_flame_graph", False)
        self._metric = profiler_kwargs.get("metric", "self_cpu_time_total")
        self._profiler_kwargs["with_stack"] = profiler_kwargs.get("with_stack", False) or self._export_to_flame_graph

    @property
    def _total_steps(self) -> int | float:
        assert self._schedule is not None and self._lightning_module is not None
        trainer = self._lightning_module.trainer
        if self._schedule.is_training:
            return trainer.num_training_batches
        if self._schedule.is_validating:
            # Lightning's sums: every loader of the run (and of the sanity check) under one schedule
            return sum(trainer.num_val_batches) + sum(trainer.num_sanity_val_batches)
        if self._schedule.is_testing:
            return sum(trainer.num_test_batches)
        if self._schedule.is_predicting:
            return sum(trainer.num_predict_batches)
        raise NotImplementedError("Unsupported schedule")

    def _should_override_schedule(self) -> bool:
        return (
            self._lightning_module is not None
            and self._schedule is not None
            and self._total_steps < 5
            and self._schedule._schedule == self._default_schedule()
        )

    @staticmethod
    @lru_cache(1)
    def _default_schedule() -> Any:
        # Lightning's defaults: the profiling overhead is negligible over a run.
        return torch.profiler.schedule(wait=1, warmup=1, active=3)

    def start(self, action_name: str) -> None:
        if self.profiler is None:
            if torch.autograd._profiler_enabled():  # another profiler left open (never described)
                torch.autograd._disable_profiler()
            if self._schedule is not None:
                self._schedule.setup(action_name)
            profiler = self._create_profilers().__enter__()
            if profiler is not None:
                self.profiler = profiler
        if self._lightning_module is not None and self._register is None and self._record_module_names:
            self._register = RegisterRecordFunction(self._lightning_module)
            self._register.__enter__()
        if self.profiler is not None and action_name not in self._recording_map:
            recording = record_function("[pl][profile]" + action_name)  # the name Lightning's traces use
            recording.__enter__()
            self._recording_map[action_name] = recording

    def stop(self, action_name: str) -> None:
        if action_name in self._recording_map:
            self._recording_map[action_name].__exit__(None, None, None)
            del self._recording_map[action_name]
        if self.profiler is None or not any(action_name.endswith(func) for func in self.STEP_FUNCTIONS):
            return
        if self._schedule is not None:
            self._schedule.pre_step(action_name)
        if self._should_override_schedule():
            # The default schedule needs 5 steps (wait 1, warm up 1, record 3); with fewer torch fails.
            rank_zero_warn(
                "The PyTorch Profiler default schedule will be overridden as there is not enough "
                "steps to properly record traces."
            )
            self._schedule = None
            self.profiler.schedule = torch.profiler.profiler._default_schedule_fn
        if not self._has_on_trace_ready:
            self.profiler.on_trace_ready = self._trace_handler(action_name)
        if self._schedule is not None:
            self.profiler.step_num = self._schedule.num_step
        self.profiler.step()
        self.profiler.add_metadata("Framework", "trainmesh")

    def _trace_handler(self, action_name: str) -> Any:
        def on_trace_ready(profiler: Any) -> None:
            if self.dirpath is None:
                rank_zero_warn("The PyTorchProfiler failed to export trace as `dirpath` is None")
                return
            if self._export_to_chrome:
                name = self._prepare_filename(action_name=action_name, extension="")
                tensorboard_trace_handler(str(self.dirpath), name)(profiler)
            if self._export_to_flame_graph:
                path = Path(self.dirpath) / self._prepare_filename(action_name=action_name, extension=".stack")
                profiler.export_stacks(str(path), metric=self._metric)

        return on_trace_ready

    def summary(self) -> str:
        if not self._profiler_kwargs.get("enabled", True):
            return ""
        self._delete_profilers()
        if not self.function_events:
            return ""
        data = self.function_events.key_averages(group_by_input_shapes=self._group_by_input_shapes)
        table = data.table(sort_by=self._sort_by_key, row_limit=self._row_limit, **self._table_kwargs)
        return self._stats_to_str({"records": table})

    def _create_profilers(self) -> Any:
        if self.profiler is None:
            init_parameters = inspect.signature(torch.profiler.profile.__init__).parameters
            self.profiler = torch.profiler.profile(
                **{k: v for k, v in self._profiler_kwargs.items() if k in init_parameters}
            )
        return self.profiler

    def _delete_profilers(self) -> None:
        if self.profiler is not None:
            self.profiler.__exit__(None, None, None)
            try:
                self.function_events = self.profiler.events()
            except AssertionError:  # torch's: it never recorded (no step reached the schedule's recording)
                self.function_events = None
            self.profiler = None
        if self._schedule is not None:
            self._schedule.reset()
        if self._register is not None:
            self._register.__exit__(None, None, None)
            self._register = None

    def teardown(self, stage: str | None) -> None:
        self._delete_profilers()
        for k in list(self._recording_map):
            self.stop(k)
        self._recording_map = {}
        super().teardown(stage=stage)


def _default_activities() -> list[ProfilerActivity]:
    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    return activities


def _default_sort_by_key(profiler_kwargs: dict[str, Any]) -> str:
    activities = profiler_kwargs.get("activities", [])
    is_cuda = (activities and ProfilerActivity.CUDA in activities) or (not activities and torch.cuda.is_available())
    return f"{'cuda' if is_cuda else 'cpu'}_time_total"
