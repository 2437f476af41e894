cd /tmp/c36
./run.sh p11_ddp; /work/main/.venv/bin/python compare.py p11_ddp
./run.sh p13_cli fit --trainer.max_epochs 2 --data.batch_size 8 --model.lr 0.02; /work/main/.venv/bin/python compare.py p13_cli
