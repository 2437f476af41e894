"""What ``trainmesh checkpoint`` does, in one line: here, apart from the command (which imports torch),
so that ``trainmesh --help`` lists the commands without importing torch."""

CHECKPOINT_SUMMARY = "Consolidate, inspect or verify a saved checkpoint."
