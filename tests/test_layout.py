"""Which test file covers which source module: the index in tests/README.md, kept true by this test.

A module's test files are the ones named after it (tests/<package>/test_<module>.py, or
test_<module>_<more>.py beside it) and the ones COVERED_BY lists for it by hand, where the module is
exercised through another's tests (a cross-cutting behaviour). Every module of src/trainmesh with
public functions or classes must have at least one; every test file must cover some module or be
listed in CROSS_CUTTING with what it checks. ``python tests/test_layout.py`` rewrites the index.
"""

from __future__ import annotations

import ast
import functools
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC, TESTS = ROOT / "src" / "trainmesh", ROOT / "tests"
README = TESTS / "README.md"
BEGIN, END = "<!-- index: begin (python tests/test_layout.py writes it) -->", "<!-- index: end -->"

# Modules tested through other modules' test files: module (path under src/trainmesh) -> test files.
COVERED_BY: dict[str, list[str]] = {
    "callbacks/rich_summary.py": ["callbacks/test_model_summary_as_lightning.py"],
    "fabric/utilities/apply_func.py": ["fabric/test_utilities_names.py"],
    "fabric/utilities/data.py": ["fabric/test_utilities_names.py"],
    "fabric/utilities/types.py": ["fabric/test_utilities_names.py"],
    "fabric/arguments.py": ["fabric/test_fabric.py", "fabric/test_fabric_ddp.py"],
    "fabric/checkpoints.py": ["fabric/test_fabric.py", "fabric/test_fabric_ddp.py"],
    "fabric/cli.py": ["fabric/test_module_paths.py"],
    "fabric/launching.py": ["fabric/test_fabric.py", "fabric/test_fabric_ddp.py"],
    "fabric/loggers/__init__.py": [
        "fabric/test_loggers_names.py",
        "fabric/test_fabric.py",
        "fabric/test_fabric_ddp.py",
    ],
    "fabric/precision.py": ["fabric/test_fabric.py", "fabric/test_fabric_ddp.py"],
    "fabric/wrappers.py": ["fabric/test_fabric.py", "fabric/test_fabric_ddp.py", "fabric/test_save_collections.py"],
    "tuner/temporary_checkpoint.py": ["tuner/test_tuning_messages.py"],
    "keras/probe_restorer.py": ["keras/test_step_probe.py"],
    "trainer/lightning_resume.py": ["trainer/test_restart_counts_lightning.py", "checkpoint/test_lightning_keys.py"],
    "trainer/own_saves.py": ["trainer/test_resume_newest.py"],
    "trainer/run_identity.py": ["trainer/test_resume_owner.py"],
    "trainer/lightning1/step_end.py": ["utilities/test_lightning1_deprecations.py"],
    "callbacks/model_checkpoint.py": [
        "callbacks/test_monitor_cadence_as_lightning.py",
        "callbacks/test_model_checkpoint_after_validation.py",
    ],
    "callbacks/progress/__init__.py": ["callbacks/test_progress.py", "callbacks/test_progress_streams.py"],
    "callbacks/progress/progress_bar.py": ["callbacks/test_progress_members.py"],
    "callbacks/progress/drawing_bar.py": ["callbacks/test_progress.py", "callbacks/test_progress_streams.py"],
    "callbacks/progress/stage_bars.py": ["callbacks/test_progress_stage_bars.py"],
    "trainer/constructor_arguments.py": ["loops/test_lightning_loop_flags.py", "test_first_hour.py"],
    "trainer/loader_checks.py": ["loops/test_lightning_loop_flags.py"],
    "callbacks/progress/rich_progress.py": ["callbacks/test_progress_lightning_paths.py"],
    "callbacks/progress/bar_meter.py": ["callbacks/test_throughput.py"],
    "demos/lstm.py": ["demos/test_transformer.py"],
    "keras/global_draws.py": ["keras/test_keras_random_draws.py"],
    "keras/probe_reasons.py": ["keras/test_step_probe.py"],
    "trainer/checkpoint_paths.py": ["trainer/test_last_checkpoint_dirs.py", "checkpoint/test_kill_during_save.py"],
    "hparams_files.py": ["core/test_saving.py"],
    "serve/servable_module.py": ["serve/test_servable_module_validator.py"],
    "profiler.py": ["trainer/test_differential_programs_tutorials.py"],
    "trainer/finder_runs.py": ["callbacks/test_finders.py", "tuner/test_in_fit_searches.py"],
    "trainer/stage_setup.py": ["trainer/test_hooks_order.py"],
    "trainer/stage_end.py": ["trainer/test_hooks_order.py", "trainer/test_keyboard_interrupt.py"],
    "trainer/stage_trainer.py": ["trainer/test_hooks_order.py"],
    "trainer/fit_start.py": ["trainer/test_fit_loop.py"],
    "trainer/epoch_counts.py": ["trainer/test_fit_loop.py", "trainer/test_loop_views.py"],
    "trainer/search_trials.py": [
        "tuner/test_in_fit_searches.py",
        "callbacks/test_finders.py",
        "tuner/test_search_logger.py",
    ],
    "trainer/loop_progress.py": ["trainer/test_loop_views.py"],
    "callbacks/checkpoint_names.py": [
        "callbacks/test_model_checkpoint.py",
        "callbacks/test_model_checkpoint_lightning26.py",
        "callbacks/test_model_checkpoint_names_lightning.py",
    ],
    "callbacks/checkpoint_state.py": ["callbacks/test_model_checkpoint.py"],
    "callbacks/checkpoint_last.py": ["callbacks/test_model_checkpoint_last_lightning26.py"],
    "callbacks/checkpoint_removal.py": ["callbacks/test_model_checkpoint.py"],
    "callbacks/checkpoint_top_k.py": ["callbacks/test_model_checkpoint_ranking_lightning.py"],
    "trainer/barebones.py": ["trainer/test_lightning2_arguments.py"],
    "trainer/trainer_fields.py": ["trainer/test_lightning_members.py", "trainer/test_differential.py"],
    "trainer/stage_requirements.py": ["test_first_hour.py", "trainer/test_bad_input.py"],
    "utilities/exceptions.py": ["test_first_hour.py"],
    "utilities/process_group.py": ["trainer/test_evaluation_shares.py"],
    "utilities/wrapped_objects.py": ["trainer/test_optimizer_wrappers.py"],
    "utilities/install_hints.py": ["test_first_hour.py"],
    "utilities/suggestions.py": ["test_first_hour.py"],
    "utilities/command_parser.py": ["cli/test_cli.py"],
    "accelerator_types.py": ["plugins/test_plugins.py"],
    "loggers/params.py": ["loggers/test_mlflow_wandb.py"],
    "loggers/wandb.py": ["loggers/test_mlflow_wandb.py"],
    "loggers/mlflow.py": ["loggers/test_mlflow_wandb.py"],
    "loggers/missing.py": ["loggers/test_mlflow_wandb.py"],
    "plugins/environments.py": ["plugins/test_plugins.py"],
    "plugins/io/__init__.py": ["plugins/test_plugins.py"],
    "plugins/layer_sync.py": ["plugins/test_plugins.py", "test_cuda.py"],
    "plugins/precision/__init__.py": ["plugins/test_plugins.py", "test_lightning_module_paths.py"],
    "plugins/lightning1.py": ["plugins/test_plugins.py"],
    "strategies/lightning_names.py": ["plugins/test_plugins.py"],
    "trainer/lightning1/argparse_arguments.py": ["trainer/test_argparse_1x.py"],
    "trainer/lightning1/trainer_arguments.py": ["trainer/test_lightning1_arguments.py"],
    "trainer/lightning1/trainer_members.py": ["trainer/test_lightning1_members.py"],
    "trainer/lightning1/tune.py": ["trainer/test_lightning1_members.py"],
    "trainer/lightning1/batch_size_search.py": ["trainer/test_lightning1_members.py"],
    "trainer/lightning1/grad_norm.py": ["trainer/test_lightning1_members.py"],
    "trainer/lightning1/one_run.py": ["trainer/test_lightning1_members.py"],
    "utilities/argparse.py": ["trainer/test_lightning1_members.py"],
    "utilities/all_gather_grad.py": ["trainer/test_lightning1_members.py"],
    "utilities/cloud_io.py": ["utilities/test_lightning1_deprecations.py"],
    "utilities/distributed.py": ["utilities/test_lightning1_deprecations.py"],
    "callbacks/lightning1_names.py": ["trainer/test_lightning1_members.py"],
    "trainer/plugins_argument.py": ["plugins/test_plugins.py", "trainer/test_checkpoint_saves.py"],
    "utilities/refusal.py": ["plugins/test_plugins.py"],
    "utilities/filesystem.py": ["utilities/test_filesystem.py", "utilities/test_remote_paths.py"],
    "module_hooks.py": ["trainer/test_hooks_order.py", "trainer/test_automatic_optimization.py"],
    "module_log_calls.py": ["test_module_logging.py", "trainer/test_log_arguments.py"],
    "module_manual_optimization.py": [
        "trainer/test_manual_optimization.py",
        "trainer/test_manual_optimization_single.py",
    ],
    "manual_calls.py": [
        "trainer/test_manual_optimization.py",
        "trainer/test_manual_optimization_single.py",
        "trainer/test_optimizer_wrappers.py",
    ],
    "trainer/peer_state.py": ["strategies/test_fault_tolerance.py"],
    "trainer/run_properties.py": ["trainer/test_states.py", "test_trainer_view.py"],
    "trainer/profiling.py": ["profilers/test_profilers.py"],
    "profilers/profiler.py": ["profilers/test_profilers.py"],
    "profilers/simple.py": ["profilers/test_profilers.py"],
    "profilers/advanced.py": ["profilers/test_profilers.py"],
    "profilers/pytorch.py": ["profilers/test_profilers.py"],
    "profilers/pytorch_schedule.py": ["profilers/test_profilers.py"],
    "trainer/fetching.py": ["trainer/test_fit_loop_reads.py"],
    "trainer/fit_data.py": ["trainer/test_fit_loop_reads.py"],
    "trainer/fit_cadence.py": ["trainer/test_fit_loop.py", "trainer/test_lightning2_arguments.py"],
    "trainer/checkpoint_results.py": ["trainer/test_resume.py"],
    "strategies/replica_quorum.py": ["strategies/test_fault_tolerance.py"],
    "trainer/lightning1/optimizer_hooks.py": ["trainer/test_optimizer_idx.py"],
    "trainer/lightning1/optimizer_turns.py": ["trainer/test_optimizer_idx.py"],
    "trainer/lightning1/tbptt.py": ["trainer/test_tbptt.py", "trainer/test_tbptt_lightning2.py"],
    "trainer/lightning1/legacy_arguments.py": ["trainer/test_legacy_arguments.py"],
    "trainer/lightning1/legacy_hooks.py": ["trainer/test_legacy_hooks.py", "trainer/test_legacy_hooks_1x_data.py"],
    "trainer/optimization/owner.py": ["trainer/test_automatic_optimization.py", "trainer/test_token_loss.py"],
    "trainer/optimization/automatic_optimization.py": ["trainer/test_automatic_optimization.py"],
    "trainer/optimization/runners.py": ["trainer/test_automatic_optimization.py", "trainer/test_optimizer_idx.py"],
    "trainer/optimization/closure.py": ["trainer/test_automatic_optimization_hooks.py", "trainer/test_step_cost.py"],
    "trainer/optimization/step_hooks.py": [
        "trainer/test_automatic_optimization.py",
        "trainer/test_training_step_none.py",
        "trainer/test_step_outputs_lightning.py",
    ],
    "trainer/optimization/progress.py": ["trainer/test_manual_optimization.py", "trainer/test_optimizer_idx.py"],
    "runtime_optimizer.py": [
        "test_runtime.py",
        "trainer/test_optimizer_wrappers.py",
        "test_runtime_optimizer_step_trained.py",
    ],
    "runtime_checkpoints.py": ["test_runtime.py", "trainer/test_checkpoint_saves.py", "trainer/test_checkpointing.py"],
    "runtime_choice.py": ["test_memory_estimate.py"],
    "runtime_port.py": [
        "test_memory_estimate.py",
        "trainer/test_step_hooks.py",
        "strategies/test_fault_tolerance.py",
        "trainer/test_reseed.py",
    ],
    "loops/optimization/optimizer_loop.py": ["loops/test_optimizer_loop.py"],
    "utilities/model_summary/table.py": [
        "callbacks/test_model_summary.py",
        "callbacks/test_model_summary_as_lightning.py",
    ],
    "utilities/model_summary/lightning_summary.py": [
        "test_lightning_module_paths.py",
        "callbacks/test_model_summary_as_lightning.py",
    ],
    "checkpoint/verifying_reader.py": ["checkpoint/test_digest.py", "checkpoint/test_corrupt_checkpoints.py"],
    "accelerators/__init__.py": ["test_cpu_process_count.py", "test_cuda.py", "trainer/test_bad_input.py"],
    # Lightning's module paths below its packages: the same objects, their functions against Lightning's
    "accelerators/cpu.py": ["test_lightning_module_paths.py"],
    "accelerators/cuda.py": ["test_lightning_module_paths.py"],
    "accelerators/mps.py": ["test_lightning_module_paths.py"],
    "utilities/data.py": ["test_lightning_module_paths.py"],
    "utilities/compile.py": ["test_lightning_module_paths.py"],
    "core/optimizer.py": ["test_lightning_module_paths.py"],
    "core/hooks.py": ["test_lightning_module_paths.py"],
    "loops/lightning_internals.py": ["test_lightning_module_paths.py"],
    "callbacks/progress/tqdm_progress.py": ["test_lightning_module_paths.py"],
    "callbacks/base.py": ["callbacks/test_lightning_names.py", "trainer/test_hooks.py"],
    "checkpoint/cleanup.py": ["checkpoint/test_kill_during_save.py"],
    "checkpoint/compat.py": ["trainer/test_bad_input.py", "strategies/test_fsdp.py"],
    "checkpoint/distributed.py": ["strategies/test_fsdp.py", "strategies/test_pipeline.py"],
    "checkpoint/layout.py": ["strategies/test_fsdp.py", "checkpoint/test_distributed_pieces.py"],
    "checkpoint/formats.py": ["checkpoint/test_corrupt_checkpoints.py"],
    "checkpoint/io.py": ["checkpoint/test_kill_during_save.py", "checkpoint/test_corrupt_checkpoints.py"],
    "checkpoint/load_checks.py": ["checkpoint/test_digest.py", "checkpoint/test_corrupt_checkpoints.py"],
    "checkpoint/shard_digest.py": ["checkpoint/test_digest.py", "checkpoint/test_corrupt_checkpoints.py"],
    "checkpoint/keys.py": ["trainer/test_checkpointing.py"],
    "utilities/compiled.py": ["callbacks/test_throughput.py", "strategies/test_compile.py"],
    "checkpoint/saves.py": ["trainer/test_checkpoint_saves.py"],
    "checkpoint/paths.py": [
        "trainer/test_last_checkpoint_dirs.py",
        "trainer/test_checkpointing.py",
        "trainer/test_resume_newest.py",
    ],
    "cli/checkpoint_command.py": ["cli/test_cli.py", "strategies/test_fsdp.py"],
    "utilities/class_paths.py": ["cli/test_cli.py"],
    "model_configuration.py": ["test_memory_estimate.py", "trainer/test_model_placement.py"],
    "utilities/model_input.py": ["cli/test_model_input.py"],
    "cli/estimate_command.py": ["cli/test_cli.py"],
    "cli/lightning_parser.py": ["cli/test_lightning_cli.py"],
    "cli/main.py": ["cli/test_cli.py", "cli/test_cli_processes.py"],
    "cli/save_config.py": ["cli/test_lightning_cli.py"],
    "cli/trainer_arguments.py": ["cli/test_lightning_cli_differential.py"],
    "cli/lightning_paths.py": ["cli/test_lightning_cli_differential.py", "cli/test_lightning_cli_configs.py"],
    "datamodule.py": ["trainer/test_lightning_api.py", "data/test_digits.py", "test_module_utilities.py"],
    "demo.py": ["cli/test_cli.py"],
    "callbacks/checkpoint.py": ["callbacks/test_lightning_callbacks.py"],
    "callbacks/lambda_function.py": ["callbacks/test_lightning_callbacks.py"],
    "hyperparameters.py": ["trainer/test_lightning_api.py", "test_module_utilities.py"],
    "keras/arguments.py": ["keras/test_keras_api.py", "keras/test_keras_ddp.py"],
    "keras/backend.py": ["keras/test_keras_api.py"],
    "keras/backward.py": ["keras/test_keras_unseen_programs.py"],
    "keras/batches.py": ["keras/test_keras_api.py", "keras/test_keras_ddp.py"],
    "keras/internals.py": ["keras/test_keras_api.py"],
    "keras/callbacks.py": ["keras/test_keras_ddp.py", "keras/test_keras_callbacks_ddp.py"],
    "keras/collectives.py": ["keras/test_keras_ddp.py"],
    "keras/data.py": ["keras/test_keras_api.py", "keras/test_keras_ddp.py"],
    "keras/distribute.py": ["keras/test_keras_api.py", "keras/test_keras_ddp.py"],
    "keras/zero.py": ["keras/test_keras_zero1.py", "keras/test_keras_api.py", "keras/test_keras_callbacks_ddp.py"],
    "keras/travel.py": ["keras/test_keras_api.py", "keras/test_keras_ddp.py"],
    "keras/optimizers.py": ["keras/test_keras_zero1.py"],
    "keras/step_logs.py": ["keras/test_keras_callbacks_ddp.py"],
    "keras/printing.py": ["keras/test_keras_callbacks_ddp.py", "keras/test_keras_ddp.py"],
    "keras/step_means.py": [
        "keras/test_keras_unseen_programs.py",
        "keras/test_keras_callbacks_ddp.py",
        "keras/test_step_means.py",
    ],
    "keras/metric_states.py": ["keras/test_keras_unseen_programs.py"],
    "keras/masked_counts.py": ["keras/test_masked_losses.py"],
    "keras/probe_facts.py": ["keras/test_step_probe.py"],
    "keras/probe_accumulation.py": ["keras/test_step_probe.py", "keras/test_keras_random_draws.py"],
    "keras/probe_data.py": ["keras/test_step_probe.py"],
    "keras/probe_callback.py": ["keras/test_step_probe.py", "keras/test_hand_updates.py"],
    "keras/probe_expected_draws.py": ["keras/test_step_probe.py"],
    "keras/draws.py": ["keras/test_keras_random_draws.py", "keras/test_keras_zero1.py"],
    "keras/added_losses.py": ["keras/test_keras_random_draws.py"],
    "keras/batch_statistics.py": ["keras/test_keras_ddp.py"],
    "keras/preemption.py": ["keras/test_keras_preemption.py"],
    "keras/probe_torch_draws.py": ["keras/test_step_probe.py"],
    "keras/torch_draws.py": ["keras/test_keras_random_draws.py"],
    "keras/tensor_draws.py": ["keras/test_keras_random_draws.py", "keras/test_step_probe.py"],
    "keras/unmapped_draws.py": ["keras/test_step_probe.py", "keras/test_keras_random_draws.py"],
    "keras/sync.py": [
        "keras/test_keras_api.py",
        "keras/test_keras_ddp.py",
        "keras/test_keras_callbacks_ddp.py",
        "keras/test_keras_preemption.py",
    ],
    "keras/training.py": [
        "keras/test_keras_api.py",
        "keras/test_keras_differential.py",
        "keras/test_keras_ddp.py",
        "keras/test_keras_callbacks_ddp.py",
        "keras/test_keras_preemption.py",
    ],
    "launchers/__init__.py": ["launchers/test_launch_processes.py", "launchers/test_start_methods.py"],
    "launchers/base.py": ["launchers/test_environments.py"],
    "launchers/elastic.py": [
        "launchers/test_launch_processes.py",
        "launchers/test_restarts.py",
        "launchers/test_agent_startup.py",
        "launchers/test_orphans.py",
    ],
    "launchers/exit_status.py": ["launchers/test_launch_processes.py"],
    "launchers/failure_report.py": ["launchers/test_launch_processes.py"],
    "launchers/agent_link.py": ["launchers/test_orphans.py", "launchers/test_preemption.py"],
    "callbacks/progress/bar_text.py": ["callbacks/test_progress.py"],
    "launchers/in_process.py": ["test_runtime.py"],
    "loggers/base.py": ["loggers/test_module_logger.py"],
    "module.py": [
        "trainer/test_lightning_api.py",
        "trainer/test_log_values.py",
        "trainer/test_hooks.py",
        "trainer/test_all_gather_one_process.py",
        "trainer/test_log_arguments.py",
    ],
    "scaling/__init__.py": ["scaling/test_scale_command.py"],
    "scaling/command.py": ["scaling/test_scale_command.py"],
    "scaling/measure.py": ["scaling/test_scale_command.py"],
    "scaling/report.py": ["scaling/test_analysis_and_report.py", "scaling/test_verdict_mfu_tokens.py"],
    "strategies/__init__.py": ["trainer/test_bad_input.py", "strategies/test_capabilities.py"],
    "strategies/registry.py": ["strategies/test_capabilities.py", "test_memory_estimate.py"],
    "strategies/arguments.py": ["callbacks/test_model_checkpoint_weights_only.py", "trainer/test_lightning_api.py"],
    "strategies/auto.py": ["test_memory_estimate.py"],
    "strategies/checkpoint.py": ["strategies/test_fsdp.py", "trainer/test_checkpointing.py"],
    "strategies/collectives.py": ["test_runtime.py", "strategies/test_ddp.py"],
    "strategies/data_parallel.py": ["strategies/test_dp.py", "strategies/test_dp_user_loop.py"],
    "strategies/distributed.py": ["strategies/test_ddp.py", "strategies/test_protocol.py"],
    "strategies/ddp_manual_sync.py": ["trainer/test_manual_optimization.py", "trainer/test_optimizer_idx.py"],
    "strategies/gradients.py": ["strategies/test_fsdp.py", "strategies/test_pipeline.py", "trainer/test_token_loss.py"],
    "strategies/layers_on_devices.py": ["strategies/test_seed_003.py"],
    "strategies/lockstep.py": ["trainer/test_manual_optimization_split.py"],
    "strategies/optimizer_shards.py": ["strategies/test_zero1_frozen.py", "strategies/test_zero1_optimizers.py"],
    "strategies/model_parallel_support.py": ["strategies/test_model_parallel_errors.py", "trainer/test_step_hooks.py"],
    "strategies/pipeline_cut.py": ["strategies/test_model_parallel_errors.py", "strategies/test_seed_003.py"],
    "strategies/pipeline_steps.py": ["strategies/test_pipeline.py", "strategies/test_pipeline_callbacks.py"],
    "strategies/model_parallel.py": [
        "strategies/test_llama_parallel.py",
        "strategies/test_llama_placement.py",
        "strategies/test_resume_layouts.py",
    ],
    "strategies/process_group.py": ["strategies/test_ddp.py"],
    "strategies/sampling.py": [
        "strategies/test_ddp_dataloaders.py",
        "launchers/test_spawn_evaluation.py",
        "trainer/test_lightning_sampler_ddp.py",
    ],
    "strategies/single.py": ["trainer/test_fit_loop.py", "strategies/test_matrix.py"],
    "strategies/stage_state.py": [
        "strategies/test_pipeline.py",
        "checkpoint/test_distributed_pieces.py",
        "strategies/test_resume_layouts.py",
    ],
    "strategies/step.py": ["trainer/test_step_hooks.py", "strategies/test_dp.py"],
    "trainer/epoch_end.py": ["trainer/test_hooks_order.py", "trainer/test_resume.py"],
    "trainer/construction.py": [
        "callbacks/test_base_duck_typed.py",
        "trainer/test_legacy_arguments.py",
        "trainer/test_differential_callbacks.py",
    ],
    "supervision/preemption.py": ["launchers/test_preemption.py"],
    "supervision/call_site.py": ["trainer/test_hang_after_fit.py"],
    "supervision/departure_report.py": ["trainer/test_hang_after_fit.py"],
    "supervision/departures.py": ["trainer/test_hang_after_fit.py", "strategies/test_process_group.py"],
    "supervision/service.py": ["launchers/test_preemption.py", "trainer/test_watchdog.py"],
    "supervision/stall_report.py": ["trainer/test_watchdog.py"],
    "supervision/stop_agreement.py": ["launchers/test_preemption.py"],
    "supervision/watchdog.py": ["trainer/test_watchdog.py"],
    "trainer/batch_counts.py": ["trainer/test_fit_loop.py"],
    "trainer/combined_loaders.py": [
        "utilities/test_combined_loader.py",
        "trainer/test_differential_combined_loaders.py",
    ],
    "trainer/prediction_loop.py": ["callbacks/test_prediction_writer.py"],
    "tuner/tuning.py": ["tuner/test_lr_finder.py"],
    "trainer/data_source.py": [
        "trainer/test_bad_input.py",
        "trainer/test_lightning_api.py",
        "trainer/test_data_hooks_ddp.py",
    ],
    "trainer/batch_transfer.py": ["trainer/test_data_hooks_ddp.py"],
    "trainer/evaluation.py": ["trainer/test_trainer.py", "trainer/test_hooks.py", "strategies/test_ddp.py"],
    "trainer/loader_results.py": ["trainer/test_legacy_hooks.py", "trainer/test_trainer.py"],
    "trainer/fit_loop.py": ["trainer/test_resume.py"],
    "trainer/epoch_opening.py": ["trainer/test_fit_loop_resume.py", "trainer/test_resume.py"],
    "trainer/training_batches.py": ["trainer/test_fit_loop.py", "trainer/test_fit_loop_reads.py"],
    "trainer/stop_limits.py": ["trainer/test_differential.py"],
    "loggers/logger.py": ["trainer/test_differential_docs.py"],
    "trainer/loop_context.py": ["trainer/test_fit_loop.py"],
    "trainer/loop_state.py": ["test_trainer_view.py", "trainer/test_resume.py"],
    "trainer/optimization_hooks.py": ["trainer/test_step_hooks.py"],
    "trainer/optimizers.py": [
        "trainer/test_bad_input.py",
        "callbacks/test_lr_monitor.py",
        "trainer/test_fit_loop.py",
        "trainer/test_scheduler_strict.py",
    ],
    "trainer/publishing.py": ["trainer/test_log_values.py"],
    "trainer/metric_values.py": ["trainer/test_results_dtypes.py", "trainer/test_log_values.py"],
    "trainer/logging_hooks.py": ["trainer/test_trainer_misconfiguration.py"],
    "trainer/results.py": [
        "trainer/test_log_values.py",
        "trainer/test_fit_loop.py",
        "trainer/test_differential_epoch_means.py",
    ],
    "trainer/stage_results.py": ["trainer/test_resume_epoch_means_lightning.py", "trainer/test_results_per_hook.py"],
    "trainer/epoch_values.py": ["trainer/test_differential_epoch_means.py", "trainer/test_results_sync_dtype.py"],
    "utilities/index_batches.py": [
        "trainer/test_prediction_loop.py",
        "strategies/test_lightning_process_dataloader.py",
    ],
    "trainer/evaluation_epoch.py": [
        "trainer/test_evaluation_sanity_metrics.py",
        "trainer/test_evaluation_step_varargs.py",
    ],
    "loggers/csv_logs.py": ["trainer/test_differential_programs_hydra.py"],
    "trainer/results_table.py": ["trainer/test_differential_programs_hydra.py", "test_seed_isolation.py"],
    "trainer/settings.py": ["trainer/test_bad_input.py"],
    "trainer/trainer.py": ["trainer/test_lightning_api.py", "strategies/test_full_state_dict.py"],
    "trainer/worker_outcome.py": ["launchers/test_spawn.py", "strategies/test_ddp.py"],
    "utilities/attribute_dict.py": ["trainer/test_lightning_api.py"],
    "utilities/dataloaders.py": ["trainer/test_resume.py"],
    "utilities/device_loader.py": [
        "utilities/test_device_loader.py",
        "test_runtime.py",
        "trainer/test_batch_transfer.py",
    ],
    "utilities/dtensors.py": ["trainer/test_run_summary.py", "callbacks/test_model_summary.py"],
    "utilities/memory.py": [
        "test_memory_estimate.py",
        "strategies/test_fsdp.py",
        "utilities/test_lightning_utilities.py",
    ],
    "utilities/enums.py": ["utilities/test_lightning_utilities.py"],
    "utilities/flops.py": ["utilities/test_lightning_utilities.py"],
    "utilities/spike_rules.py": ["callbacks/test_spike.py", "fabric/utilities/test_spike_fabric.py"],
    "utilities/grads.py": ["utilities/test_lightning_utilities.py"],
    "utilities/parameter_tying.py": ["utilities/test_lightning_utilities.py"],
    "utilities/parsing.py": ["utilities/test_lightning_utilities.py"],
    "utilities/seed.py": ["utilities/test_lightning_utilities.py"],
    "utilities/types.py": ["utilities/test_lightning_utilities.py"],
    "utilities/warnings.py": ["utilities/test_lightning_utilities.py"],
    "utilities/workers.py": ["utilities/test_lightning_utilities.py"],
    "utilities/placement.py": ["test_precision.py"],
    "utilities/rank_zero.py": [
        "launchers/test_launch_processes.py",
        "launchers/test_spawn.py",
        "utilities/test_lightning_utilities.py",
    ],
}

# Test files of behaviour across modules, not of one module: test file -> what it checks.
CROSS_CUTTING: dict[str, str] = {
    "loops/test_lightning_loop_flags.py": "the fit and evaluation loops' flags as Lightning 2.6's own tests use them "
    "(step hooks on the instance, on_train_batch_start -1, grad mode, val_check_interval), against Lightning 2.6",
    "trainer/test_lightning1_examples.py": "what Lightning 1.x's published examples use (finetune_function's "
    "opt_idx, LightningCLI's 1.x keywords), against pytorch-lightning 1.9.5's recorded runs",
    "trainer/test_repeated_runs.py": "one Trainer run again (evaluation without a model after fit, a second "
    "fit's fresh optimizers), against Lightning 2.6",
    "test_first_hour.py": "a new user's first mistakes: missing steps, mistyped settings, logging interval, install hints",
    "test_architecture.py": "who may import whom (layers, the one door), with a self-test of its checkers",
    "test_import.py": "the package imports and its public names",
    "test_gpu_check.py": "benchmarks/gpu_check.py",
    "test_layout.py": "this index",
    "test_batches_crash.py": "the batched launches' harness (helpers/batches.py): a leg whose process dies by a signal is named and run once more",
    "test_xdist_grouping.py": "the suite's xdist grouping (conftest.py, helpers/xdist_groups.py): files sharing a session fixture share a worker",
    "trainer/test_differential.py": "one program under Lightning 2.6 and trainmesh, compared as data (helpers/differential.py)",
    "trainer/test_differential_programs.py": "tutorial-style Lightning programs under Lightning 2.6 and their port, compared as data (helpers/programs.py)",
    "trainer/test_differential_programs_more.py": "more tutorial-style Lightning programs under Lightning 2.6 and their port (helpers/programs.py)",
    "trainer/test_differential_programs_unseen.py": "six more Lightning 2.6 programs nobody here had run, under Lightning 2.6 and their port (helpers/programs.py)",
    "trainer/test_differential_programs_tutorials.py": "what Lightning-AI/tutorials' programs showed trainmesh doing differently from Lightning 2.6, as small programs under both",
    "trainer/test_differential_docs.py": "code from Lightning 2.6's documentation pages, as small programs under Lightning 2.6 and their port (helpers/programs.py)",
    "trainer/test_differential_docs_advanced.py": "code from Lightning 2.6's pages on training tricks, extensions, profiling, debugging and the CLI, as small programs under Lightning 2.6 and their port",
    "trainer/test_differential_programs_bolts.py": "what lightning-bolts' models and callbacks showed trainmesh doing differently from Lightning, as small programs under both",
    "trainer/test_differential_programs_l36.py": "Lightning 2.6 programs using the common API together (DataModule, checkpoint, early stopping, CSV, resume), under Lightning 2.6 and their port",
    "trainer/test_differential_programs_l20.py": "what the l-progs20 campaign's Lightning 2.x programs showed trainmesh doing differently from Lightning 2.6, as small programs under both",
    "trainer/test_differential_programs_l21.py": "what the l-progs21 campaign's Lightning 2.x programs showed trainmesh doing differently from Lightning 2.6, as small programs under both",
    "trainer/test_differential_programs_hydra.py": "what the lightning-hydra-template relies on (torchmetrics objects in self.log, rank_zero_only.rank, ...), under Lightning 2.6 and its port",
    "test_lightning_inventory.py": "docs/lightning-api.md and docs/fabric-api.md, the inventories of Lightning's and Lightning Fabric's API, against the installed Lightning",
    "test_lightning_signatures.py": "every parameter of Lightning 2.6's signatures is taken by trainmesh's, or listed with its reason",
    "test_lightning_parameters.py": "the parameters that comparison found, run under Lightning and trainmesh and compared",
    "test_ci.py": ".ci/run runs the README's test command, which prints each step",
    "test_docs_snippets.py": "every fenced Python block of docs/ and the README runs (or says why not)",
    "test_docstrings.py": "every name in the public __all__ has a docstring with its arguments and an example",
    "keras/test_keras_ddp.py": "Keras' own model.fit at 2 processes (ddp, ddp_spawn) against one process at the global batch",
    "keras/test_keras_zero1.py": "Keras' model.fit under zero1 at 2 processes against ddp: bit-identical, state split",
    "strategies/test_matrix.py": "every strategy x (Trainer, Runtime) x (torch, Keras) cell against a plain loop",
    "strategies/test_llama_whole.py": "the Llama test model trained whole",
    "strategies/test_zero1_frozen.py": "ZeRO-1 with frozen parameters",
    "strategies/test_zero1_optimizers.py": "ZeRO-1 against torch's optimizers",
}


def has_public_code(path: Path) -> bool:
    tree = ast.parse(path.read_text())
    return any(
        isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not node.name.startswith("_")
        for node in tree.body
    )


def all_test_files() -> list[str]:
    return sorted(str(path.relative_to(TESTS)) for path in TESTS.rglob("test_*.py"))


def named_after(module: str, files: list[str]) -> list[str]:
    """tests/<package>/test_<module>.py and test_<module>_*.py beside it."""
    folder, stem = _folder_and_stem(module)
    return [
        name
        for name in files
        if _folder_and_stem(name)[0] == folder
        and (_folder_and_stem(name)[1] == f"test_{stem}" or _folder_and_stem(name)[1].startswith(f"test_{stem}_"))
    ]


@functools.cache
def _folder_and_stem(path: str) -> tuple[Path, str]:
    # Path's parent and stem, once per name: index() compares 400 modules with 300 test files,
    # three times a run (3.2 CPU-s went to building those Paths again; 0.1 now).
    return Path(path).parent, Path(path).stem


def index() -> dict[str, list[str]]:
    """Every module of src/trainmesh -> its test files (empty for a module without public code)."""
    files = all_test_files()
    rows = {}
    for path in sorted(SRC.rglob("*.py")):
        module = str(path.relative_to(SRC))
        named = named_after(module, files)
        covering = named + [f for f in COVERED_BY.get(module, []) if f not in named]
        rows[module] = covering
    return rows


def table() -> str:
    lines = ["| source module (src/trainmesh/) | test files (tests/) |", "| --- | --- |"]
    for module, files in index().items():
        lines.append(f"| `{module}` | {', '.join(f'`{name}`' for name in files) or '(no public code)'} |")
    lines += ["", "| test file (tests/) | what it checks, across modules |", "| --- | --- |"]
    lines += [f"| `{name}` | {what} |" for name, what in sorted(CROSS_CUTTING.items())]
    return "\n".join(lines)


def written_table() -> str:
    text = README.read_text()
    assert BEGIN in text and END in text, f"{README} lost its index markers; run python tests/test_layout.py"
    return text[text.index(BEGIN) + len(BEGIN) : text.index(END)].strip("\n")


def test_every_module_with_public_code_has_a_test_file():
    missing = [module for module, files in index().items() if not files and has_public_code(SRC / module)]
    assert not missing, (
        f"modules with public functions or classes and no test file: {missing}; name a test file "
        "after the module (tests/<package>/test_<module>.py) or list its tests in COVERED_BY"
    )


def test_the_index_names_only_files_and_modules_that_exist():
    files = set(all_test_files())
    named = {name for listed in COVERED_BY.values() for name in listed} | set(CROSS_CUTTING)
    assert named <= files, f"COVERED_BY/CROSS_CUTTING name test files that do not exist: {sorted(named - files)}"
    stale = [module for module in COVERED_BY if not (SRC / module).exists()]
    assert not stale, f"COVERED_BY names modules that do not exist: {stale}"


def test_every_test_file_covers_a_module_or_says_what_it_checks():
    covering = {name for files in index().values() for name in files} | set(CROSS_CUTTING)
    orphans = sorted(set(all_test_files()) - covering)
    assert not orphans, (
        f"test files in no row of the index: {orphans}; name them after their module, or list "
        "them in COVERED_BY or CROSS_CUTTING"
    )


def test_the_readme_index_is_the_generated_one():
    assert written_table() == table(), "tests/README.md's index is out of date: run python tests/test_layout.py"


def write_index() -> None:
    text = README.read_text()
    README.write_text(text[: text.index(BEGIN) + len(BEGIN)] + "\n" + table() + "\n" + text[text.index(END) :])


if __name__ == "__main__":
    write_index()
    sys.exit(0)
