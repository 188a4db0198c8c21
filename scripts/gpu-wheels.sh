#!/usr/bin/env bash
# The wheels scripts/gpu-check.sh installs on a lent GPU machine (Python 3.12, no registry):
# what `verillm bench device` imports beyond the machine image's packages, at this project's versions.
set -euo pipefail
mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
  pycryptodome==3.24.1 blake3==1.0.11 cytoolz==1.2.0 eth-hash==0.8.0 eth-keys==0.8.0 eth-typing==6.0.0 \
  eth-utils==6.0.0 pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 hexbytes==2.0.0
