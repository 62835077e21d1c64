"""Generate the protobuf and gRPC code of proto/midtown_pb/*.proto into OUT/midtown_pb (the
package `midtown_pb`, never edited by hand, never committed). The one generator: `make
proto` runs it into the checkout, and the package build (setup.py) into what it builds,
so `pip install .` from a clone needs no step before it.

    python scripts/gen_proto.py OUT"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def generate(out: Path) -> list[Path]:
    """Write midtown_pb/{name}_pb2.py, _pb2_grpc.py and _pb2.pyi of each .proto under `out`."""
    from importlib.resources import files

    from grpc_tools import protoc

    protos = sorted((ROOT / "proto" / "midtown_pb").glob("*.proto"))
    (out / "midtown_pb").mkdir(parents=True, exist_ok=True)
    (out / "midtown_pb" / "__init__.py").touch()
    well_known = str(files("grpc_tools") / "_proto")
    for p in protos:
        code = protoc.main(["grpc_tools.protoc", f"-I{ROOT / 'proto'}", f"-I{well_known}",
                            f"--python_out={out}", f"--grpc_python_out={out}", f"--pyi_out={out}",
                            str(p)])
        if code != 0:
            raise SystemExit(f"protoc failed on {p} ({code})")
    return protos


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    for p in generate(Path(sys.argv[1]).resolve()):
        print(f"generated {p.stem}")
