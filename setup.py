"""The package build generates the protobuf code (scripts/gen_proto.py) into what it
builds, so `pip install .` from a clone works with no step before it (grpcio-tools is a
build requirement in pyproject.toml; everything else about the package is there)."""

import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildWithProtos(build_py):
    def run(self) -> None:
        sys.path.insert(0, str(Path(__file__).resolve().parent / "scripts"))
        from gen_proto import generate

        generate(Path(self.build_lib))
        super().run()


setup(cmdclass={"build_py": BuildWithProtos})
