"""``python -m torch.distributed.run ARGS`` (torchrun) as a program that helpers/forked.py can fork
(it runs a program by its path): torch's own ``main`` on the same command line. Its workers are
new interpreters all the same (torchrun starts them with subprocess)."""

from torch.distributed.run import main

if __name__ == "__main__":
    main()
