#!/usr/bin/env bash
# A local dry run of the main job (`aicr-runner plan`): resolve the recipe, render
# and verify the bundle, print the component table. No cluster is touched.
#
# With no arguments it runs an offline demo: the example org pack in packs/ and
# the contract-faithful aicr stand-in from the test suite (this machine cannot
# download the real release). Pass your own arguments to plan anything else, e.g.
#   scripts/dry-run.sh --accelerator h100 --service eks --intent training --os ubuntu
# which downloads and checksums the pinned aicr release.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
bash scripts/setup.sh --python-only >&2
if (($# == 0)); then
  fake=$(.venv/bin/python -c 'from tests.fake_aicr import install_fake_aicr; import pathlib; print(install_fake_aicr(pathlib.Path(".venv/fake-aicr")))')
  set -- --aicr-binary "$fake" --pack-dir packs/k0s-h200-training \
    --service k0s --accelerator h200 --intent training --os ubuntu --output out/plan
fi
exec .venv/bin/aicr-runner plan "$@"
