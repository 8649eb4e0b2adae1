"""`make lambda-package`: the stream Lambda's deployment zip (pagination_index.aws_lambda.handler).

The dependencies are requirements.lock's, hash-checked, as binary wheels for the Lambda runtime's
Python and architecture (manylinux wheels up to glibc 2.34, Amazon Linux 2023's), installed into a
folder with the project's Django apps beside them; then zipped with fixed timestamps, so the same
inputs give the same zip. Lambda's quotas ("Lambda quotas"): 50 MB zipped for a direct upload and
250 MB unzipped however it is uploaded; the build fails past the unzipped limit and says when the zip
needs S3 (the template takes it from S3 anyway).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The Django project's packages the handler's django.setup() imports (INSTALLED_APPS and settings).
PACKAGES = ("shop", "comments", "pagination_index", "ops", "moderation", "metrics")
UNZIPPED_LIMIT = 250 * 1024 * 1024
DIRECT_UPLOAD_LIMIT = 50 * 1024 * 1024
PLATFORMS = {
    "x86_64": ["manylinux_2_34_x86_64", "manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"],
    "arm64": ["manylinux_2_34_aarch64", "manylinux_2_28_aarch64", "manylinux_2_17_aarch64", "manylinux2014_aarch64"],
}
ZIP_DATE = (2020, 1, 1, 0, 0, 0)


class PackageError(RuntimeError):
    pass


def install_dependencies(folder: Path, *, python_version: str, arch: str, requirements: Path) -> None:
    platforms = [argument for platform in PLATFORMS[arch] for argument in ("--platform", platform)]
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile",
               "--target", str(folder), "--implementation", "cp", "--python-version", python_version,
               "--only-binary=:all:", "--require-hashes", "--no-deps", *platforms, "-r", str(requirements)]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode:
        raise PackageError(f"pip could not install {requirements.name} for Python {python_version} on {arch}:\n"
                           f"{result.stderr.strip()}")


def copy_project(folder: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for package in PACKAGES:
        if (ROOT / package).is_dir():
            shutil.copytree(ROOT / package, folder / package, ignore=ignore)


def write_zip(folder: Path, output: Path) -> tuple[int, int]:
    """(zipped bytes, unzipped bytes)."""
    files = sorted(path for path in folder.rglob("*") if path.is_file() and "__pycache__" not in path.parts)
    unzipped = sum(path.stat().st_size for path in files)
    output.parent.mkdir(parents=True, exist_ok=True)
    partial = output.with_suffix(".zip.tmp")
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED, compresslevel=6) as archive:
        for path in files:
            info = zipfile.ZipInfo(str(path.relative_to(folder)), ZIP_DATE)
            info.external_attr = (0o755 if os.access(path, os.X_OK) else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, path.read_bytes())
    partial.replace(output)
    return output.stat().st_size, unzipped


def build(output: Path, *, python_version: str, arch: str, requirements: Path) -> tuple[int, int]:
    with tempfile.TemporaryDirectory(prefix="lambda-package-") as scratch:
        folder = Path(scratch)
        install_dependencies(folder, python_version=python_version, arch=arch, requirements=requirements)
        copy_project(folder)
        zipped, unzipped = write_zip(folder, output)
    if unzipped > UNZIPPED_LIMIT:
        output.unlink()
        raise PackageError(f"the package unzips to {unzipped / 2**20:.1f} MiB, over Lambda's 250 MB limit")
    return zipped, unzipped


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.aws.lambda_package", description=__doc__.split("\n")[0])
    parser.add_argument("--python-version", default="3.12", help="the Lambda runtime's Python (template: python3.12)")
    parser.add_argument("--arch", choices=sorted(PLATFORMS), default="x86_64", help="the function's architecture")
    parser.add_argument("--requirements", type=Path, default=ROOT / "requirements.lock")
    parser.add_argument("--output", type=Path, default=ROOT / "var" / "lambda" / "sync-index.zip")
    args = parser.parse_args(argv)
    try:
        zipped, unzipped = build(args.output, python_version=args.python_version, arch=args.arch,
                                 requirements=args.requirements)
    except PackageError as exc:
        print(f"lambda-package: {exc}", file=sys.stderr)
        return 1
    print(f"{args.output}: {zipped / 2**20:.1f} MiB zipped, {unzipped / 2**20:.1f} MiB unzipped "
          f"(Python {args.python_version}, {args.arch})")
    if zipped > DIRECT_UPLOAD_LIMIT:
        print("over 50 MB zipped: upload it to S3 (LambdaCodeBucket), not directly", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
