"""The layers point one way (docs/architecture.md): a module imports only from its own
layer and the layers below it, and nothing imports the command line, the local cluster
runner or the benchmarks but themselves. Read from the source (every import statement,
those inside functions too; `if TYPE_CHECKING:` blocks count as well), so the picture in
docs/architecture.md stays true."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Lowest first. A module belongs to the longest prefix listed.
LAYERS: list[tuple[str, ...]] = [
    ("runtime", "midtown_pb"),  # process start-up, transport, loops, membership, refusals
    ("record",),  # the record contract between the coordinator and the storage node
    ("fleet",),  # ZooKeeper sessions, the machines and their failure domains
    ("log",),  # the replicated log
    ("catalog",),  # the key-value catalog in ZooKeeper: topology, datasets, users, usage; routing
    ("storage_node",),  # replicas applying the logs
    ("coordinator",),  # the KV service: requests to records, answers to responses
    ("drivers",),  # multi-step changes of the cluster (hand-offs, moves) that commands run
    ("midtown",),  # the SDK a user imports, and nothing else
    ("spark_connector",),  # the Spark data source, on the SDK
    ("cluster",),  # the local cluster runner: starts the servers' processes
    ("cli",),  # the `midtown` command
    ("bench",),  # the benchmarks' program, `midtown-bench`
]
PACKAGES = ("runtime", "record", "fleet", "log", "catalog", "storage_node", "coordinator", "drivers",
            "midtown", "spark_connector", "cluster", "cli", "bench")

_SERVERS = {"runtime", "midtown_pb", "record", "fleet", "log", "catalog"}
# Every edge between two top-level packages that may exist: a package imports only these
# (the generated midtown_pb counts as a package). A new edge is a decision, made here.
ALLOWED: dict[str, set[str]] = {
    "runtime": {"midtown_pb"},
    "record": {"runtime", "midtown_pb"},
    "fleet": {"runtime"},
    # The log reads nothing of the key-value store: which logs keep a read lease and mark
    # idle time is the log's own setting (log/zk.py LEASED), which the catalog asks for.
    "log": {"runtime", "midtown_pb", "fleet"},
    "catalog": {"runtime", "fleet", "log"},
    "storage_node": _SERVERS,
    "coordinator": _SERVERS | {"storage_node"},  # coordinator/host.py alone (a test below)
    "drivers": _SERVERS,
    "midtown": {"runtime", "midtown_pb", "fleet", "log", "catalog"},  # ZooKeeper's, for a Client given zk=
    "spark_connector": {"midtown"},  # the SDK alone
    "cluster": {"runtime", "fleet", "log", "catalog"},
    # the command: a restore writes stored values back (storage_node/keys.py, lww.py), the
    # log commands decode records
    "cli": _SERVERS | {"storage_node", "drivers", "midtown", "spark_connector", "cluster"},
    "bench": _SERVERS | {"drivers", "midtown", "spark_connector", "cluster", "cli"},
}


def layer_of(module: str) -> int:
    best, where = "", -1
    for i, names in enumerate(LAYERS):
        for n in names:
            if (module == n or module.startswith(n + ".")) and len(n) > len(best):
                best, where = n, i
    return where


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import of one of our packages in a file."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # `from midtown import cli` imports cli: count the submodule
            names = [f"{node.module}.{a.name}" for a in node.names]
        for n in names:
            if n.split(".")[0] in PACKAGES + ("midtown_pb",):
                out.append((node.lineno, n))
    return out


def upward_imports() -> list[str]:
    bad = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            mine = layer_of(module)
            for line, target in imports(path):
                theirs = layer_of(target)
                if theirs > mine:
                    bad.append(f"{path.relative_to(ROOT)}:{line} imports {target} "
                               f"(layer {theirs}, above its own {mine})")
    return bad


def test_no_layer_imports_a_layer_above_it() -> None:
    assert upward_imports() == []


def package_edges() -> dict[str, dict[str, str]]:
    """package -> {package it imports: the first place it does}."""
    out: dict[str, dict[str, str]] = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            for line, target in imports(path):
                theirs = target.split(".")[0]
                if theirs != pkg:
                    out.setdefault(pkg, {}).setdefault(theirs, f"{path.relative_to(ROOT)}:{line}")
    return out


def edges_not_allowed(edges: dict[str, dict[str, str]]) -> list[str]:
    return [f"{where}: {pkg} imports {theirs}" for pkg, targets in sorted(edges.items())
            for theirs, where in sorted(targets.items()) if theirs not in ALLOWED[pkg]]


def test_packages_import_only_the_allowed_packages() -> None:
    """The edges between top-level packages are the ALLOWED ones (issue 69: the Spark
    connector sat below its own client, the log read the key-value catalog)."""
    assert set(ALLOWED) == set(PACKAGES)
    assert edges_not_allowed(package_edges()) == []


def test_the_allowed_edges_point_down() -> None:
    """The table itself keeps to the layers: no allowed edge points up, so none makes a
    circle."""
    up = [(a, b) for a, bs in ALLOWED.items() for b in bs if layer_of(b) > layer_of(a)]
    assert up == []


def test_the_edge_check_sees_a_new_edge() -> None:
    edges = {"log": {"catalog": "log/election.py:33", "fleet": "log/zk.py:29"},
             "spark_connector": {"midtown": "x", "cluster": "spark_connector/source.py:1"}}
    assert edges_not_allowed(edges) == ["log/election.py:33: log imports catalog",
                                        "spark_connector/source.py:1: spark_connector imports cluster"]


def test_every_package_is_installed_and_in_the_image() -> None:
    """pyproject.toml installs every package, and the image (docker/Dockerfile) copies it:
    drivers/ was missing from the image for a while."""
    import tomllib

    include = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    copied = {line.split()[1] for line in (ROOT / "docker" / "Dockerfile").read_text().splitlines()
              if line.startswith("COPY ")}
    for pkg in PACKAGES:
        assert f"{pkg}*" in include["include"], pkg
        assert pkg in copied, pkg


def test_every_module_has_a_layer() -> None:
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            assert layer_of(module) >= 0, module


@pytest.mark.parametrize("source,target", [
    ("storage_node/node.py", "coordinator.datasets"),
    ("log/zk.py", "midtown.client"),
    ("midtown/client.py", "cli.main"),
    ("cli/main.py", "bench.kv"),
    ("spark_connector/source.py", "cluster"),
])
def test_the_check_sees_an_upward_import(tmp_path: Path, source: str, target: str) -> None:
    """The check itself: an import that points up is reported."""
    f = tmp_path / "m.py"
    f.write_text(f"def f():\n    import {target}\n")
    [(line, got)] = imports(f)
    module = source[:-3].replace("/", ".")
    assert got == target and layer_of(got) > layer_of(module)


def module_graph() -> dict[str, set[str]]:
    """Each of our modules -> the modules of ours it imports (a package is its __init__)."""
    files = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path

    def resolve(target: str) -> str | None:  # `from a.b import name` may name a module or not
        parts = target.split(".")
        while parts and ".".join(parts) not in files:
            parts.pop()
        return ".".join(parts) or None

    return {m: {r for _, t in imports(p) if (r := resolve(t)) not in (None, m)}
            for m, p in files.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other, however far round: a module and those
    it reaches that reach it back (a graph of a few hundred modules: plain searches do)."""
    def reach(start: str) -> set[str]:
        seen: set[str] = set()
        todo = list(graph.get(start, ()))
        while todo:
            m = todo.pop()
            if m not in seen:
                seen.add(m)
                todo += graph.get(m, ())
        return seen

    reaches = {m: reach(m) for m in graph}
    groups = {frozenset(o for o in reaches[m] if m in reaches[o]) for m in graph if m in reaches[m]}
    return sorted(sorted(g) for g in groups)


def test_no_import_cycles() -> None:
    """Within a layer too, imports point one way: no two modules import each other, however
    far round (imports inside functions count)."""
    assert cycles(module_graph()) == []


def test_the_check_sees_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e2"}, "e2": set()}
    assert cycles(graph) == [["a", "b", "c"]]  # d only leads into it
    assert sorted(cycles({**graph, "e2": {"e"}})) == [["a", "b", "c"], ["e", "e2"]]


def test_the_coordinator_imports_nothing_of_the_storage_node() -> None:
    """The coordinator and the storage node meet in the record contract (record/) and in
    narrow ports (coordinator/storage_link.py LocalStorage), never in each other's modules; nor
    does the coordinator reach into the log server's (log/node.py, log/server.py). One
    module is the exception: coordinator/host.py, the host layout's process, which wires a
    log server, a storage node and a coordinator together (the servers' processes start
    from their own packages, and it is the highest server layer)."""
    bad = []
    for path in sorted((ROOT / "coordinator").rglob("*.py")):
        if path.name == "host.py":
            continue
        for line, target in imports(path):
            if target.split(".")[0] == "storage_node" or target.startswith(("log.node", "log.server")):
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {target}")
    assert bad == []


def test_importing_the_coordinator_loads_no_storage_node_module() -> None:
    """Not by a way round either: importing the coordinator's service loads no module of
    storage_node and not RocksDB."""
    import subprocess
    import sys

    code = ("import sys, coordinator.server; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('storage_node', 'rocksdict')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


SHELLS = ("log/server.py", "storage_node/server.py", "coordinator/server.py", "coordinator/replicas.py",
          "coordinator/host.py")


def test_one_way_to_refuse() -> None:
    """A status is made in runtime/ only (runtime/handlers.py, from a Refusal): no server
    module aborts a call itself, and no server shell catches a ValueError to make one."""
    bad = []
    for pkg in PACKAGES:
        if pkg == "runtime":
            continue
        for path in sorted((ROOT / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args
                        and node.func.attr in ("abort", "abort_with_status")):  # not Barrier.abort()
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno} aborts a call")
    for rel in SHELLS:
        path = ROOT / rel
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ExceptHandler) and node.type is not None:
                names = [n.id for n in ast.walk(node.type) if isinstance(n, ast.Name)]
                if "ValueError" in names:
                    bad.append(f"{rel}:{node.lineno} catches ValueError")
    assert bad == []


def _invalid_argument_refusals(source: str) -> list[int]:
    """Lines that spell a refusal of a bad request as Refusal(...INVALID_ARGUMENT...)."""
    return [node.lineno for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Refusal" and node.args
            and isinstance(node.args[0], ast.Attribute) and node.args[0].attr == "INVALID_ARGUMENT"]


def test_a_bad_request_has_one_spelling() -> None:
    """A request no retry can make right is refused as BadRequest (runtime/refusals.py),
    never as Refusal(INVALID_ARGUMENT, ...) beside it (issue 69: the coordinator had 31)."""
    paths = [path for pkg in PACKAGES for path in sorted((ROOT / pkg).rglob("*.py"))]
    bad = [f"{path.relative_to(ROOT)}:{line}" for path in paths
           for line in _invalid_argument_refusals(path.read_text())]
    assert bad == []


def test_the_spelling_check_sees_a_second_spelling() -> None:
    assert _invalid_argument_refusals("raise Refusal(Code.INVALID_ARGUMENT, 'x: bad')\n") == [1]
    assert _invalid_argument_refusals("raise BadRequest('x: bad')\n") == []


# The classes that carry a gRPC status: the one refusal (and BadRequest, a Refusal whose
# code is INVALID_ARGUMENT), and what a call without gRPC fails with as gRPC's own error does
# (runtime/stubs.py CallFailed, an RpcError: the client's side of a call, not a refusal).
STATUS_CARRIERS = {"runtime/refusals.py": {"Refusal", "BadRequest"}, "runtime/stubs.py": {"CallFailed"}}
# The one place a refusal becomes a status, and the one it is read back from one
STATUS_CONVERSIONS = {"runtime/refusals.py"}


def _second_spellings(rel: str, source: str) -> list[str]:
    """What in `source` spells a refusal a second way: a class of its own carrying a
    status code (an __init__ taking `code`), or a call ended through its context
    (ctx.abort, set_code) outside runtime/refusals.py."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name not in STATUS_CARRIERS.get(rel, ()):
            for f in node.body:
                if isinstance(f, ast.FunctionDef) and f.name == "__init__" and "code" in [
                        a.arg for a in f.args.args + f.args.kwonlyargs]:
                    out.append(f"{rel}:{node.lineno} class {node.name} carries a status code")
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("abort", "set_code") and rel not in STATUS_CONVERSIONS
                and len(node.args) >= 2):
            out.append(f"{rel}:{node.lineno} ends a call through its context")
    return out


def test_a_refusal_has_one_type_and_one_conversion() -> None:
    """One refusal (issue 69): the log client's errors and its refused appends, the
    servers' refusals and the access lists' are all runtime/refusals.py Refusal, made a
    gRPC status in one place (Refusal.abort, called by runtime/handlers.py end) and read
    back from one in one place (Refusal.of_call). No class of ours carries a status code
    beside them, and nothing ends a call through its context elsewhere."""
    bad = [hit for pkg in PACKAGES for path in sorted((ROOT / pkg).rglob("*.py"))
           for hit in _second_spellings(str(path.relative_to(ROOT)), path.read_text())]
    assert bad == []


def test_the_one_refusal_check_sees_a_second_spelling() -> None:
    log_error = "class LogError(Exception):\n    def __init__(self, code, message):\n        pass\n"
    assert _second_spellings("log/client_link.py", log_error) == [
        "log/client_link.py:1 class LogError carries a status code"]
    aborted = "def check(ctx):\n    ctx.abort(grpc.StatusCode.NOT_FOUND, 'no such service')\n"
    assert _second_spellings("runtime/health.py", aborted) == [
        "runtime/health.py:2 ends a call through its context"]
    assert _second_spellings("runtime/refusals.py", aborted) == []


def test_importing_the_sdk_loads_the_client_only() -> None:
    """`import midtown` is the client: its own modules, the generated protos, the pure key
    routing (catalog/routing.py) and the runtime's transport, refusals, group commit,
    world port (the standard library's clock and threads), reach (is an address known
    to be down) and tracing (off unless configured: OpenTelemetry is not loaded),
    nothing else of ours: no module of the servers (storage node, coordinator, the record
    contract, the log), not the catalog's ZooKeeper readers, and neither kazoo (loaded by a
    Client given zk= only) nor RocksDB, the metrics or certificate libraries, nor Spark."""
    import subprocess
    import sys

    ours = ("midtown", "midtown_pb", "catalog", "runtime", "log", "record", "storage_node", "coordinator",
            "spark_connector", "drivers", "cluster", "cli", "bench", "kazoo", "rocksdict",
            "prometheus_client", "cryptography", "pyspark", "opentelemetry")
    code = (f"import sys, midtown; print(sorted(m for m in sys.modules if m.split('.')[0] in {ours!r}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    loaded = set(ast.literal_eval(out.stdout))
    allowed = {"catalog", "catalog.routing", "runtime", "runtime.transport", "runtime.refusals",
               "runtime.group_commit", "runtime.reach", "runtime.world", "runtime.tracing"}
    assert {m for m in loaded if m.split(".")[0] not in ("midtown", "midtown_pb")} <= allowed, loaded
    assert not [m for m in loaded if m.split(".")[0] in ("cli", "cluster", "bench")]


def test_the_client_and_the_command_line_work_without_the_server_libraries() -> None:
    """What `pip install midtown` brings (pyproject.toml: grpcio, protobuf, kazoo) is enough
    for `import midtown`, for the `midtown` command's parser and for the log client its
    commands load: with RocksDB, the metrics, health and reflection services and
    cryptography made unimportable, all three load (the log client once pulled in the
    metrics through runtime/inprocess.py, and `midtown put` failed in a client-only install)."""
    import subprocess
    import sys

    code = ("import sys\n"
            "for m in ('rocksdict', 'prometheus_client', 'grpc_health', 'grpc_reflection', 'cryptography'):\n"
            "    sys.modules[m] = None\n"
            "import midtown\n"
            "from cli.main import parser\n"
            "parser().parse_args(['get', 'd', 'p', 'l'])\n"
            "import log.client  # what every command loads to run (cli/main.py)\n"
            "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def private_reaches(source: str) -> list[str]:
    """Where code uses another object's private name: `x._name` with x not self or cls, or
    `from module import _name` (a module's own `os._exit`-style calls of the standard
    library are named in ALLOWED_PRIVATE)."""
    bad = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            if ast.unparse(node) in ALLOWED_PRIVATE:
                continue
            bad.append(f"{node.lineno}: {ast.unparse(node)}")
        if isinstance(node, ast.ImportFrom):
            bad += [f"{node.lineno}: from {node.module} import {a.name}" for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")]
    return bad


ALLOWED_PRIVATE = {"os._exit"}


def test_the_sdk_uses_no_private_name_of_another_object() -> None:
    """Client and AsyncClient share the operations (midtown/operations.py), where calls go
    (midtown/endpoints.py) and the retry policy through their public faces; neither reaches
    into the other's fields, as AsyncClient once did into thirteen of a Client subclass's."""
    bad = []
    for path in sorted((ROOT / "midtown").rglob("*.py")):
        bad += [f"{path.relative_to(ROOT)}:{b}" for b in private_reaches(path.read_text())]
    assert bad == []


def test_the_private_name_check_sees_a_reach() -> None:
    assert private_reaches("def f(c):\n    return c._routes\n") == ["2: c._routes"]
    assert private_reaches("from midtown.client import _b\n") == ["1: from midtown.client import _b"]
    assert private_reaches("class A:\n    def f(self):\n        return self._x\n") == []


def test_the_coordinator_reads_answers_through_the_record_contract() -> None:
    """A storage node's answer comes as a model object (in the same process) or as protobuf
    (over the network); the coordinator reads either through record/answer.py and never asks
    which it holds (`RecordResult | pb.RecordResult` once ran through three of its files)."""
    bad = [f"{p.relative_to(ROOT)}:{i}" for p in sorted((ROOT / "coordinator").rglob("*.py"))
           for i, line in enumerate(p.read_text().splitlines(), 1) if "pb.RecordResult" in line]
    assert bad == []


def text_decisions(source: str) -> list[str]:
    """Where code compares an error's message text (`.details()`, `.debug_error_string()`,
    or a name given one of them) to decide something."""
    def reads_text(node: ast.AST, names: set[str]) -> bool:
        for n in ast.walk(node):
            if (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                    and n.func.attr in ("details", "debug_error_string")):
                return True
            if isinstance(n, ast.Name) and n.id in names:
                return True
        return False

    bad = []
    for fn in ast.walk(ast.parse(source)):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        names: set[str] = set()
        for n in ast.walk(fn):
            if isinstance(n, ast.Assign) and reads_text(n.value, set()):
                names |= {t.id for t in n.targets if isinstance(t, ast.Name)}
        for n in ast.walk(fn):
            if isinstance(n, ast.Compare) and reads_text(n, names):
                bad.append(f"{n.lineno}: {ast.unparse(n)}")
    return bad


def test_no_module_decides_on_an_errors_text() -> None:
    """Refusals travel as codes and trailers (runtime/refusals.py); messages are for people.
    The log client once read gRPC's "connection refused" text (log/client.py _not_sent)."""
    bad = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            bad += [f"{path.relative_to(ROOT)}:{b}" for b in text_decisions(path.read_text())]
    assert bad == []


def test_the_text_check_sees_a_decision() -> None:
    src = ("def f(e):\n    d = (e.details() or '').lower()\n    return 'connection refused' in d\n"
           "def g(e):\n    return e.details() == 'x'\n"
           "def h(e):\n    raise ValueError(e.details())\n")
    assert [b.split(":")[0] for b in text_decisions(src)] == ["3", "5"]


# Allowed edges into the log (issue 51): outside log/, the servers use the log through its
# client (and its limits): the coordinator appends and asks ReadIndex rounds
# (LogClient.read_index_by), the storage node follows the logs (LogClient.follow). Only the
# module that wires a host's process together reaches the log server's parts.
LOG_USERS_ALLOWED = {"coordinator": ("log.client", "log.limits"),
                     "storage_node": ("log.client", "log.limits")}
WIRING = {"coordinator.host"}


def log_edges_not_allowed(graph: dict[str, set[str]]) -> list[str]:
    bad = []
    for module, targets in sorted(graph.items()):
        allowed = next((a for pkg, a in LOG_USERS_ALLOWED.items()
                        if module == pkg or module.startswith(pkg + ".")), None)
        if allowed is None or module in WIRING:
            continue
        bad += [f"{module} imports {t}" for t in sorted(targets)
                if (t == "log" or t.startswith("log.")) and t not in allowed]
    return bad


def test_the_coordinator_and_the_storage_node_use_the_log_through_its_client() -> None:
    assert log_edges_not_allowed(module_graph()) == []


def test_the_check_sees_a_server_reaching_into_the_log() -> None:
    graph = {"coordinator.node": {"log.client", "log.read_index"}, "coordinator.host": {"log.node"},
             "storage_node.apply_loop": {"log.client", "log.node"}, "storage_node.reads": {"log.limits"}}
    assert log_edges_not_allowed(graph) == ["coordinator.node imports log.read_index",
                                            "storage_node.apply_loop imports log.node"]


SERVER_PACKAGES = ("fleet", "log", "storage_node", "coordinator", "catalog", "record")


PRIMITIVES = ("Lock", "RLock", "Condition", "Event", "Semaphore")
MADE_ELSEWHERE = ("Queue", "SimpleQueue", "Future", "ThreadPoolExecutor", "as_completed")


def world_escapes(source: str) -> list[str]:
    """Where a module reads the clock, sleeps, starts a thread or makes a lock, condition,
    event, queue, future or thread pool other than through runtime/world.py: an import of
    `time`, a `threading.Thread`/`threading.Timer`, a `threading.Lock()` (and the like) made
    or handed to a dataclass as its factory, a `queue.Queue()`, a `Future()`, a
    `ThreadPoolExecutor()` (but the one handed to `grpc.server`, the gRPC shell's) or
    `as_completed`. The standard library's names as types are fine."""
    def called(node: ast.AST) -> str | None:
        f = node.func if isinstance(node, ast.Call) else None
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "world":
            return None  # the port's own
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
        return name if name in MADE_ELSEWHERE else None

    tree = ast.parse(source)
    grpc_pools = {id(a) for node in ast.walk(tree)
                  if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                  and node.func.attr == "server" for a in node.args}
    def threading_attr(node: ast.AST, names: tuple[str, ...]) -> str | None:
        if (isinstance(node, ast.Attribute) and node.attr in names
                and isinstance(node.value, ast.Name) and node.value.id == "threading"):
            return node.attr
        return None

    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name == "time" for a in node.names):
            bad.append(f"{node.lineno}: import time")
        elif isinstance(node, ast.ImportFrom) and node.module in ("time", "threading"):
            bad.append(f"{node.lineno}: from {node.module} import ...")
        elif (name := threading_attr(node, ("Thread", "Timer"))) is not None:
            bad.append(f"{node.lineno}: threading.{name}")
        elif isinstance(node, ast.Call) and (name := threading_attr(node.func, PRIMITIVES)) is not None:
            bad.append(f"{node.lineno}: threading.{name}()")
        elif isinstance(node, ast.keyword) and node.arg == "default_factory" and \
                (name := threading_attr(node.value, PRIMITIVES)) is not None:
            bad.append(f"{node.value.lineno}: threading.{name} as a factory")
        elif (name := called(node)) is not None and id(node) not in grpc_pools:
            bad.append(f"{node.lineno}: {name}()")
    return sorted(bad, key=lambda b: int(b.split(":")[0]))


# The runtime's modules the servers' request paths share, held to the same rule (the SDK
# loads them too, and runtime/world.py with them: the standard library alone).
WORLD_RUNTIME = ("group_commit.py", "refreshed.py", "membership.py", "loops.py")
# The SDK's modules a Client runs (midtown/aio.py runs on asyncio's clock and is not held):
# the whole-cluster simulation runs the SDK on its clock, and replays its retries' jitter
# and request ids from the seed.
WORLD_SDK = ("client.py", "retries.py", "endpoints.py", "coalescing.py", "operations.py", "watch.py",
             "routes.py", "placements.py")


def test_the_servers_read_the_clock_and_start_tasks_through_the_world_port() -> None:
    """runtime/world.py is the servers' clock, sleep, task spawner and maker of locks,
    conditions and events (issue 51's environment port): a simulation that installs its
    own backend owns them all."""
    bad = []
    shared = [ROOT / "runtime" / m for m in WORLD_RUNTIME] + [ROOT / "midtown" / m for m in WORLD_SDK]
    for path in [p for pkg in SERVER_PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))] + shared:
        bad += [f"{path.relative_to(ROOT)}:{b}" for b in world_escapes(path.read_text())]
    assert bad == []


def test_the_world_check_sees_an_escape() -> None:
    src = ("import time\nimport threading\nfrom time import monotonic\n"
           "def f(stop: threading.Event) -> threading.Lock:\n    threading.Thread(target=f).start()\n"
           "    c = field(default_factory=threading.Condition)\n    return threading.Lock()\n"
           "q = queue.SimpleQueue()\nf = Future()\np = futures.ThreadPoolExecutor(4)\n"
           "s = grpc.server(futures.ThreadPoolExecutor(8))\nfor x in futures.as_completed(fs): pass\n")
    assert world_escapes(src) == ["1: import time", "3: from time import ...", "5: threading.Thread",
                                  "6: threading.Condition as a factory", "7: threading.Lock()",
                                  "8: SimpleQueue()", "9: Future()", "10: ThreadPoolExecutor()",
                                  "12: as_completed()"]
