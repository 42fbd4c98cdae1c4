#!/usr/bin/env python3
"""What verifying aicr's provenance costs: cosign's size and the verification time.

* size: the pinned cosign build (tools/versions.env) on its own, raw
  and gzip-compressed;
* time: ``check_provenance`` end to end (the bundle read, the subject digest, the
  cosign subprocess) on the real sigstore@3.1.0 bundle and its 10 KB tarball,
  offline; and cosign on a 100 MB artifact (aicr's binary is about that size), where
  hashing dominates. The large artifact is not the attested one, so cosign runs its
  whole check and refuses at the digest comparison: the same work as a success.

Usage: scripts/bench-provenance.py [--runs 10] [--markdown]
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aicr_runner.aicr.provenance import CosignVerifier, check_provenance, default_trusted_root  # noqa: E402
from aicr_runner.children.process import SubprocessRunner  # noqa: E402
from aicr_runner.errors import ProvenanceError  # noqa: E402
from aicr_runner.settings.config import AicrSettings, ProvenanceSettings  # noqa: E402
from e2e.tools import npm_tarball, pinned_versions, tool  # noqa: E402

BUNDLE = ROOT / "tests" / "data" / "sigstore" / "sigstore-3.1.0.sigstore.json"
IDENTITY = "https://github.com/sigstore/sigstore-js/.github/workflows/release.yml@refs/heads/main"
ISSUER = "https://token.actions.githubusercontent.com"


def _gzip_size(path: Path) -> int:
    with path.open("rb") as raw, tempfile.TemporaryFile() as out:
        with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=6) as packed:
            shutil.copyfileobj(raw, packed, 1 << 20)
        return out.tell()


def _timed(runs: int, action: object) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        action()  # type: ignore[operator]
        times.append(time.perf_counter() - start)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    cosign = tool("cosign")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        environ = {
            "PATH": f"{cosign.parent}:/usr/bin:/bin",
            "HOME": str(work),
            "HTTPS_PROXY": "http://127.0.0.1:9",
            "HTTP_PROXY": "http://127.0.0.1:9",
        }
        verifier = CosignVerifier(SubprocessRunner(), environ)
        settings = AicrSettings(provenance=ProvenanceSettings(identity=IDENTITY))
        tarball = npm_tarball()

        def real() -> None:
            check = check_provenance(tarball, BUNDLE, settings, verifier, work)
            assert check.verified is not None

        big = work / "aicr"
        with big.open("wb") as out:
            for _ in range(100):
                out.write(os.urandom(1 << 20))

        def large() -> None:
            try:
                verifier.verify(
                    bundle=BUNDLE,
                    artifact=big,
                    identity=IDENTITY,
                    issuer=ISSUER,
                    trusted_root=default_trusted_root(),
                    work=work,
                )
            except ProvenanceError as exc:
                if "subject digest does not match" not in exc.message:
                    raise
            else:
                raise AssertionError("a random artifact verified")

        small_times = _timed(args.runs, real)
        large_times = _timed(args.runs, large)
    size = cosign.stat().st_size
    packed = _gzip_size(cosign)
    version = pinned_versions()["COSIGN_VERSION"]
    rows = [
        (
            "cosign binary, built alone (the image holds it in one binary with helm and kubectl)",
            f"{size / 1e6:.1f} MB raw, {packed / 1e6:.1f} MB gzip",
        ),
        (
            "verify the real sigstore@3.1.0 bundle (10 KB artifact)",
            f"median {statistics.median(small_times) * 1000:.0f} ms, max {max(small_times) * 1000:.0f} ms",
        ),
        (
            "cosign on a 100 MB artifact (aicr-sized)",
            f"median {statistics.median(large_times) * 1000:.0f} ms, max {max(large_times) * 1000:.0f} ms",
        ),
    ]
    if args.markdown:
        print(f"| cosign {version}, {args.runs} runs each | |")
        print("|---|---:|")
        for name, value in rows:
            print(f"| {name} | {value} |")
    else:
        for name, value in rows:
            print(f"{name}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
