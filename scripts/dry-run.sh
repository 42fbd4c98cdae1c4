#!/usr/bin/env bash
# A local dry run of the main job (`aicr-runner plan`): resolve the recipe, render
# and verify the bundle, print the component table. No cluster is touched.
#
# With no arguments it runs an offline demo: the example org pack in packs/ and
# the contract-faithful aicr stand-in from the test suite (this machine cannot
# download the real release). Pass your own arguments to plan anything else, e.g.
#   scripts/dry-run.sh --accelerator h100 --service eks --intent training --os ubuntu
# which downloads and checksums the pinned aicr release and verifies its Sigstore
# provenance with cosign (built by scripts/bootstrap-tools.sh when not on PATH).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
bash scripts/setup.sh --python-only >&2
if (($# == 0)); then
  fake=$(.venv/bin/python -c 'from tests.fake_aicr import install_fake_aicr; import pathlib; print(install_fake_aicr(pathlib.Path(".venv/fake-aicr")))')
  echo "offline demo: this runs the test suite's stand-in aicr (tests/fake_aicr), not NVIDIA's aicr" \
    "release; its component versions are the stand-in's, and it carries no Sigstore attestation" \
    "(provenance check off). Give plan arguments to run the real pinned aicr." >&2
  export AICR_RUNNER_AICR__PROVENANCE__MODE=off
  set -- --aicr-binary "$fake" --pack-dir packs/k0s-h200-training \
    --service k0s --accelerator h200 --intent training --os ubuntu --output out/plan
  # The stand-in has no NVIDIA attestation; the real release's provenance is verified.
  export AICR_RUNNER_AICR__PROVENANCE__MODE=off
elif ! command -v cosign >/dev/null; then
  # aicr's Sigstore provenance is verified with cosign (the pinned build, as in the image).
  bash scripts/bootstrap-tools.sh cosign >&2
  export PATH="$root/.tools/bin:$PATH"
fi
exec .venv/bin/aicr-runner plan "$@"
