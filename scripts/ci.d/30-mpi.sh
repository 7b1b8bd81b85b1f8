#!/usr/bin/env bash
# kiln.tensor.distributed under MPI: the collectives, DataParallel and checkpoints on 2 ranks, then jobs where a rank
# fails (each bounded by a timeout). About 30 s here.
set -euo pipefail
cd "$(dirname "$0")/../.."
# CI runs as root, which Open MPI refuses unless told it is meant
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
python=(uv run --locked python)
timeout 150 mpirun -n 2 --oversubscribe "${python[@]}" -m pytest -p no:xdist -p no:cacheprovider -q -rs --color=no \
  packages/tensor/tests/mpi/mpi_test_collectives.py packages/tensor/tests/mpi/mpi_test_group.py
timeout 150 "${python[@]}" -m pytest -p no:xdist -p no:cacheprovider -q -rs --color=no \
  packages/tensor/tests/mpi/mpi_test_failures.py
