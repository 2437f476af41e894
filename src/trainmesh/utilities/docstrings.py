"""The docstrings of four public classes whose files are at the house limit of 500 lines
(`tests/test_architecture.py`): Trainer, Runtime, ModelCheckpoint and ModelParallelStrategy.

Each class sets ``__doc__`` from here, so ``help()`` shows it as the class's own; the reference
pages read it through docs/hooks/docstring_constants.py (mkdocstrings does not import the code),
and `tests/test_docstrings.py` checks them like any other.
"""

TRAINER = """Runs a :class:`trainmesh.Module` through fit, validate, test and predict.

Args:
    accelerator: ``"auto"``, ``"cpu"``, ``"gpu"``/``"cuda"`` or ``"mps"`` (default ``'auto'``).
    devices: devices (processes) per node, a list of indices, or ``"auto"`` (default ``'auto'``).
    num_nodes: number of nodes (default ``1``).
    max_restarts: restart every worker this many times after a failure, resuming from the newest checkpoint (default ``0``).
    exact_resume: trainmesh's own: ``fit(ckpt_path=...)`` continues the saved epoch exactly (its random generators, the rest of its batches: the uninterrupted run's numbers) instead of Lightning's resume, which reads the loader afresh; an automatic restart always resumes exactly (default ``False``).
    strategy: a strategy name (``"ddp"``, ``"fsdp"``, ``"tp"``, ``"pp"``, ...) or a Strategy object; ``"auto"`` picks by memory (default ``'auto'``).
    precision: ``"32-true"``, ``"bf16-mixed"``, ``"16-mixed"``, ``"bf16-true"``, ``"16-true"``, ``"64-true"`` (``32``, ``16`` and ``"bf16"`` too); ``"16-mixed"`` on the CPU is ``"bf16-mixed"``, with Lightning's warning (float16 with a GradScaler there: ``plugins=[MixedPrecision("16-mixed", "cpu")]``); None: a precision plugin's, else ``"32-true"`` (default ``None``).
    compile: ``True`` or a dict of ``torch.compile`` options: compile in place where the strategy's order says (default ``False``).
    max_epochs: stop after this many epochs (None: 1000 when ``max_steps`` is -1, else no epoch limit) (default ``None``).
    min_epochs: train at least this many epochs, whatever asks to stop (default ``None``).
    min_steps: train at least this many optimizer steps, whatever asks to stop (with ``min_epochs``: both must be met) (default ``None``).
    max_steps: stop after this many optimizer steps (-1: no limit) (default ``-1``).
    limit_train_batches: batches per training epoch: an int, or a fraction of the loader (default ``None``).
    limit_val_batches: validation batches: an int or a fraction (0 turns validation off) (default ``None``).
    limit_test_batches: test batches: an int or a fraction (default ``None``).
    limit_predict_batches: predict batches: an int or a fraction (default ``None``).
    val_check_interval: validate every this many training batches (int), this fraction of an epoch (float), or after this much time (str "DD:HH:MM:SS", timedelta, dict of its keywords) (default ``None``).
    check_val_every_n_epoch: validate every this many epochs (None: by ``val_check_interval`` only) (default ``1``).
    num_sanity_val_steps: validation batches run before training (-1: all) (default ``2``).
    log_every_n_steps: log step metrics every this many steps (default ``50``).
    accumulate_grad_batches: accumulate gradients over this many batches per optimizer step (default ``1``).
    gradient_clip_val: clip gradients at this value (None: no clipping) (default ``None``).
    gradient_clip_algorithm: ``"norm"`` (the default when clipping) or ``"value"`` (default ``None``).
    callbacks: callbacks, added to the defaults (progress bar, summary, checkpoint) (default ``None``).
    logger: ``True`` (TensorBoard if installed, else CSV), ``False``, a logger or a list (default ``True``).
    default_root_dir: where logs and checkpoints go (None: the working directory) (default ``None``).
    enable_progress_bar: show the progress bar (default ``True``).
    enable_checkpointing: add a default ModelCheckpoint (default ``True``).
    enable_model_summary: print the model summary and the run's one-line banner (default ``True``).
    deterministic: ask torch for deterministic algorithms (default ``False``).
    watchdog_timeout: seconds without a completed step on some rank before the run is ended (exit 124); ``"auto"``: 300 where the run has several processes, off on one; None turns it off (default ``"auto"``).
    fast_dev_run: run 1 (or n) batches of each loop, with no logging or checkpoints, to check the code (default ``False``).
    inference_mode: evaluate under ``torch.inference_mode`` (else ``no_grad``) (default ``True``).
    gpus: Lightning 1.x's spelling of ``accelerator="gpu", devices=gpus`` (``0``: the CPU) (default ``None``).
    distributed_backend: Lightning 1.x's spelling of ``strategy`` (default ``None``).
    weights_summary: Lightning 1.x's spelling of the summary setting (None turns it off) (default ``'top'``).
    num_tpu_cores: Lightning 1.x's TPU setting: refused (no TPU strategy) (default ``None``).
    fault_tolerance: a :class:`FaultTolerance`: replica groups that survive a failure (torchft) (default ``None``).
    plugins: ``[AsyncCheckpointIO()]`` for background saves; other plugins are refused (default ``None``).
    profiler: ``"simple"``, ``"advanced"``, ``"pytorch"`` or a Profiler (default ``None``).
    max_time: stop after this long: ``"DD:HH:MM:SS"``, a ``timedelta`` or a dict (default ``None``).
    overfit_batches: train and validate on this many (int) or this fraction of the first batches (default ``0.0``).
    sync_batchnorm: convert batch-norm layers to ``torch.nn.SyncBatchNorm`` when several processes train (CUDA only: refused on CPU with several processes) (default ``False``).
    auto_select_gpus: Lightning 1.x's spelling of ``devices=find_usable_cuda_devices(gpus)``, with an int ``gpus`` (default ``False``).
    tpu_cores: Lightning 1.x's TPU setting: refused (TPUs are not supported) (default ``None``).
    ipus: Lightning 1.x's Graphcore IPU setting: refused (IPUs are not supported) (default ``None``).
    num_processes: Lightning 1.x's spelling of ``accelerator="cpu", devices=num_processes`` (default ``None``).
    amp_backend: Lightning 1.x's AMP backend: ``"native"`` (torch's AMP, the only one) is accepted; ``"apex"`` is refused (default ``None``).
    amp_level: Lightning 1.x's Apex optimization level: refused unless None (default ``None``).
    auto_lr_find: Lightning 1.x's learning-rate finder, run by ``trainer.tune(model)`` (True, or the attribute the suggestion is written to) (default ``False``).
    auto_scale_batch_size: Lightning 1.x's batch-size search, run by ``trainer.tune(model)`` (True or ``"power"``, ``"binsearch"``) (default ``False``).
    track_grad_norm: Lightning 1.x's gradient-norm logging: the p-norms go to the module's ``log_grad_norm`` at each optimizer step (-1: off) (default ``-1``).
    replace_sampler_ddp: Lightning 1.x's sampler switch: only True is accepted (each process always gets a ``DistributedSampler`` share) (default ``True``).
    resume_from_checkpoint: Lightning 1.x's checkpoint a ``fit`` without ``ckpt_path`` resumes from (default ``None``).
    move_metrics_to_cpu: Lightning 1.x's: ``callback_metrics`` and ``logged_metrics`` as CPU tensors (default ``False``).
    multiple_trainloader_mode: Lightning 1.x's reading of several train loaders: ``"max_size_cycle"`` or ``"min_size"`` (default ``"max_size_cycle"``).
    benchmark: ``torch.backends.cudnn.benchmark`` for the run (None: left as it is, or False with ``deterministic=True``), as Lightning sets it (default ``None``).
    use_distributed_sampler: False: each loader is read as the program made it on every process (its own ``DistributedSampler``, or the whole data) (default ``True``).
    detect_anomaly: torch's autograd anomaly mode around fit's training (from the train loader to ``on_train_end``) (default ``False``).
    barebones: everything that may slow a step off (checkpointing, loggers, progress bar, summary, sanity check, ``self.log``); passing one of them is refused with Lightning's error (default ``False``).
    reload_dataloaders_every_n_epochs: ask ``train_dataloader()`` / ``val_dataloader()`` again every n epochs, where Lightning asks (default ``0``: never).
    enable_autolog_hparams: False: the hyperparameters are not given to the loggers at fit's start (default ``True``).
    model_registry: Lightning AI's model registry: refused (it uploads to Lightning's cloud); save checkpoints and upload them yourself (default ``None``).

Examples:
    >>> trainer = Trainer(max_epochs=1, accelerator="cpu", enable_progress_bar=False, logger=False,
    ...                   enable_checkpointing=False, enable_model_summary=False)
    >>> # trainer.fit(model, datamodule=dm); trainer.test(model, datamodule=dm)
"""

RUNTIME = """Place a model, its optimizers and its data, and synchronise values across processes.

``compile=True`` (or a dict of ``torch.compile`` options) has the strategy compile the module
in place where its order of wrapping says (strategies/compile.py); its keys stay its own.

Args:
    accelerator: ``"auto"``, ``"cpu"``, ``"gpu"``/``"cuda"`` or ``"mps"`` (default ``'auto'``).
    devices: devices (processes) per node, a list of indices, or ``"auto"`` (default ``'auto'``).
    strategy: a strategy name (``"ddp"``, ``"fsdp"``, ``"tp"``, ...) or a Strategy object (default ``'auto'``).
    precision: ``"32-true"``, ``"bf16-mixed"``, ``"16-mixed"``, ``"bf16-true"``, ``"16-true"``, ``"64-true"``; ``"16-mixed"`` is float16 with a GradScaler on every device, the CPU's too (default ``'32-true'``).
    num_nodes: number of nodes (default ``1``).
    max_restarts: restart every worker this many times after a failure (the elastic agent) (default ``0``).
    compile: ``True`` or a dict of ``torch.compile`` options: compile the model where the strategy says (default ``False``).
    fault_tolerance: a :class:`FaultTolerance`: replica groups over torchft (default ``None``).

Examples:
    >>> runtime = Runtime(accelerator="cpu", devices=1)
    >>> model = torch.nn.Linear(4, 1)
    >>> model, optimizer = runtime.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    >>> loss = model(torch.ones(2, 4)).pow(2).mean()
    >>> runtime.backward(loss)
    >>> optimizer.step()
"""

MODEL_CHECKPOINT = """Write checkpoints during ``fit`` and keep the best ``save_top_k`` of them.

With ``monitor=None`` the latest checkpoint is kept (``save_top_k=-1`` keeps every one);
with a monitor, the ``save_top_k`` best by that metric are kept and the others deleted.
Saves happen every ``every_n_epochs`` epochs (after that epoch's validation) and/or every
``every_n_train_steps`` optimizer steps; with neither given, once per epoch.

``filename`` is a template: ``{epoch}``, ``{step}`` and any logged metric, with an optional
format spec (``{val_loss:.3f}``). Like Lightning, a bare ``{val_loss}`` is written as
``val_loss=0.123`` unless the template already spells ``val_loss=`` before it or
``auto_insert_metric_name=False``; a "/" in a metric name becomes "_" so it makes no folder.
A name already taken gets ``-v1``, ``-v2``... unless ``enable_version_counter=False``
(then the file is overwritten).

``save_weights_only=True`` writes the weights and hyperparameters alone (smaller files):
validate/test/predict and ``Module.load_from_checkpoint`` load them, ``fit`` cannot resume.
After fit, ``best_model_path``, ``best_model_score`` (a tensor), ``best_k_models``
(path -> score) and ``last_model_path`` say what was kept.

Args:
    dirpath: the folder (None: ``<log dir>/checkpoints``) (default ``None``).
    filename: a name pattern such as ``"{epoch}-{val_loss:.2f}"`` (default ``None``).
    monitor: the metric to rank checkpoints by (None: the latest) (default ``None``).
    mode: ``"min"`` or ``"max"`` (default ``'min'``).
    save_top_k: keep the best k (-1: all, 0: none) (default ``1``).
    save_last: also write ``last.ckpt``, as Lightning 2.6: with each step-cadence save; at an epoch's end (or after validation) only beside a checkpoint written there; at the fit's end only if none was written. ``'link'``: a symbolic link to the newest checkpoint instead of a copy (default ``None``).
    every_n_train_steps: save every this many training steps (default ``None``).
    train_time_interval: save when this ``datetime.timedelta`` of training has passed since the last such save, checked at each batch's end (rank 0's clock); the only cadence then (default ``None``).
    every_n_epochs: save every this many epochs (default ``None``).
    save_on_train_epoch_end: save at the training epoch's end (None: after validation when there is one) (default ``None``).
    verbose: say what was saved (default ``False``).
    auto_insert_metric_name: write ``name=value`` in the file name (default ``True``).
    save_weights_only: save the weights only (not resumable) (default ``False``).
    save_on_exception: when fit fails, save where the run stands (named as a save there would be, not ranked), and ``last.ckpt`` with ``save_last`` (default ``False``).
    enable_version_counter: add ``-v1``, ``-v2`` when a name exists (default ``True``).

Examples:
    >>> checkpoint = ModelCheckpoint(monitor="val_loss", save_top_k=2, save_last=True,
    ...                              filename="{epoch}-{val_loss:.2f}")
    >>> checkpoint.format_checkpoint_name({"epoch": 3, "step": 120, "val_loss": 0.25})  # dirpath is set in setup()
    'epoch=3-val_loss=0.25.ckpt'
"""

MODEL_PARALLEL_STRATEGY = """``Trainer(devices=4, strategy=ModelParallelStrategy(pp=2, dp_shard=-1, schedule="1F1B", microbatches=4))``.

Sizes multiply to the number of processes (one may be ``-1``: the rest). ``pp``: pipeline
stages across ranks (``stages_per_rank`` more per rank for the interleaved and V schedules),
cut at ``split_points`` or balanced by parameter count; ``microbatches`` per batch (default:
the number of stages). ``tp``: tensor-parallel ways, by the module's
``tensor_parallel_plan()``; ``loss_parallel=True`` runs the step (forward and backward)
under torch's ``loss_parallel`` for a vocabulary-sharded cross-entropy. ``dp_shard`` /
``dp_replicate``: FSDP2 sharding / replication of each stage and shard.
``pp_within_node=True`` puts a pipeline's stages on one node's devices and replicas across
nodes (model parallel within a machine, data parallel across machines).

Args:
    parallelize_fn: Lightning Fabric 2.6's form: ``fabric.setup`` calls ``parallelize_fn(module, device_mesh)`` on the mesh ``("data_parallel", "tensor_parallel")`` that ``data_parallel_size``/``tensor_parallel_size`` lay out (default ``None``).
    pp: pipeline stages (default ``1``).
    tp: tensor-parallel degree (default ``1``).
    dp_shard: FSDP2 sharding degree (-1: the rest) (default ``-1``).
    dp_replicate: replicas (FSDP2 ``replicate``) (default ``1``).
    schedule: the pipeline schedule: ``"GPipe"``, ``"1F1B"``, ``"Interleaved1F1B"``, ``"LoopedBFS"``, ``"InterleavedZeroBubble"``, ``"ZBVZeroBubble"``, ``"DualPipeV"`` (default ``'1F1B'``).
    microbatches: micro-batches per batch (None: the number of stages) (default ``None``).
    split_points: part names to cut the stages before (None: balanced by parameters) (default ``None``).
    stages_per_rank: stages each rank holds (None: 2 for the interleaved and V schedules, else 1) (default ``None``).
    loss_parallel: compute the loss on the vocabulary-sharded output (default ``False``).
    activation_checkpointing: module classes whose activations are recomputed in backward (default ``None``).
    reshard_after_forward: FSDP2's option on ``dp_shard`` (default ``True``).
    data_parallel: how the data-parallel axes are applied (``"fsdp"``; ``"ddp"`` is refused with model parallelism) (default ``'fsdp'``).
    pp_within_node: a pipeline's stages on one node, replicas across nodes (default ``False``).
    start_method: how the processes start: ``"elastic"`` (the script re-run once per device by torch's elastic agent, as torchrun would), ``"spawn"`` or ``"fork"`` (default ``'elastic'``).
    timeout: the process group's timeout (a ``timedelta``) (default ``datetime.timedelta(seconds=1800)``).
    process_group_backend: ``"gloo"`` or ``"nccl"`` (None: nccl on CUDA, gloo otherwise) (default ``None``).
    placement: the devices and precision (set by the Trainer/Runtime; leave it None) (default ``None``).
    **kwargs: Lightning 2.6's ``data_parallel_size``, ``tensor_parallel_size`` (``"auto"`` or a number) and ``save_distributed_checkpoint`` (True: a folder per checkpoint; False: one file of whole tensors): Lightning's form, where the module's ``configure_model`` applies ``parallelize_module``/``fully_shard`` on ``self.device_mesh`` and the strategy applies nothing (``strategies/lightning_model_parallel.py``); not together with ``pp``/``tp``/``dp_shard``/``dp_replicate``.

Examples:
    >>> strategy = ModelParallelStrategy(pp=2, dp_shard=1, schedule="1F1B", microbatches=4)
    >>> # Trainer(strategy=strategy, devices=2): two pipeline stages
"""
