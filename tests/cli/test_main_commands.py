"""Every command is named where a user looks (``--help``, the unknown-command error), and
``scale`` refuses a bad setting in one line before starting any process, as ``fit`` does."""

from trainmesh.cli.main import main


def test_an_unknown_command_lists_every_command(capsys):
    assert main(["frobnicate"]) == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'frobnicate'" in err
    for command in ("fit", "validate", "test", "predict", "checkpoint", "estimate", "scale", "project"):
        assert f"'{command}'" in err


def test_scale_refuses_a_bad_strategy_or_precision_in_one_line_like_fit(tmp_path, capsys):
    assert main(["scale", "--strategy", "bogus", "--out_dir", str(tmp_path)]) == 2
    scale_err = capsys.readouterr().err.splitlines()
    assert main(["fit", "--trainer.strategy", "bogus"]) == 2
    fit_err = capsys.readouterr().err.splitlines()
    assert scale_err == fit_err  # the same sentence, and the --traceback hint
    assert scale_err[0].startswith("error: strategy='bogus' is not known; choose one of: auto, ddp")
    assert main(["scale", "--precision", "8-true", "--out_dir", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("error: precision='8-true' is not known")
    assert not list(tmp_path.iterdir())  # nothing measured, nothing written


def test_scale_and_estimate_take_the_underscore_spelling_and_the_hyphen_alias(capsys):
    assert main(["estimate", "--world-size", "4", "--strategy", "ddp"]) == 0
    assert "N = 4" in capsys.readouterr().out
    assert main(["estimate", "--world_size", "4", "--strategy", "ddp"]) == 0
    assert "N = 4" in capsys.readouterr().out
    from trainmesh.scaling.command import build_scale_parser

    help_text = build_scale_parser().format_help()
    for flag in ("--max_processes", "--batch_size", "--warmup_steps", "--peak_flops", "--out_dir"):
        assert flag in help_text and flag.replace("_", "-") in help_text
