"""The package's shape: no import cycles, public faces pinned, old public paths still work."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "datacheck"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Every datacheck module ``name`` imports, at module level or inside a function."""
    is_pkg = path.name == "__init__.py"
    base = name if is_pkg else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level:
                anchor = base.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                mod = ".".join([*anchor, mod] if mod else anchor)
            targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in known else mod for a in node.names]
        else:
            continue
        found.update(t for t in targets if t in known and t != name)
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles_inside_the_package() -> None:
    mods = _modules()
    graph = {name: _imports(name, path, set(mods)) for name, path in mods.items()}
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c"]]


PUBLIC_FACES = {
    "datacheck": [
        "CHECKS",
        "CheckSpec",
        "DatacheckError",
        "FP16_MAX",
        "InferConfig",
        "InputError",
        "Report",
        "ScanConfig",
        "SchemaError",
        "Severity",
        "UsageError",
        "__version__",
        "infer",
        "load_profile",
        "load_report",
        "load_schema",
        "scan",
        "write_demo",
    ],
    "datacheck.checks": [
        "CHECKS",
        "CORRUPT",
        "DRIFT",
        "EXTREME",
        "FP16_MAX",
        "INF",
        "NAN",
        "NULL",
        "OUT_OF_RANGE",
        "SCHEMA",
        "UNNORMALIZED",
        "CheckSpec",
        "Severity",
        "SpikeConfig",
        "SpikeDetector",
        "get_check",
        "register_pandera_checks",
    ],
    "datacheck.formats": [
        "Chunk",
        "Format",
        "Opened",
        "Ragged",
        "WorkUnit",
        "check_requirements",
        "detect",
        "estimated_work",
        "format_modules",
        "get_format",
        "memory_budget",
        "register",
    ],
    "datacheck.schema": ["CompiledSchema", "compile_schema", "load_schema"],
    "datacheck.history": ["History", "Overrides", "read_history", "sniff"],
    "datacheck.engine": ["UnitResult", "discover", "plan_units", "poison_result", "scan_unit"],
    "datacheck.execute": [
        "EXECUTOR_NAMES",
        "OnPoison",
        "UnitFn",
        "WorkerFiles",
        "check_executor",
        "default_workers",
        "prestart",
        "run_units",
    ],
    "datacheck.profile": ["load_profile"],
    "datacheck.report": [
        "FAIL_ON",
        "FORMAT_VERSION",
        "MANIFEST",
        "QUARANTINE",
        "REPORT_JSON",
        "Report",
        "ReportData",
        "exit_code_for",
        "load_report",
        "write_report_json",
    ],
    "datacheck.cli": ["ExitCode", "build_parser", "console_main", "main"],
    "datacheck.errors": [
        "BadSampleError",
        "DatacheckError",
        "InputError",
        "SchemaError",
        "UsageError",
    ],
    "datacheck.torch": [
        "Action",
        "GuardConfig",
        "GuardedLoader",
        "LoaderConfig",
        "LoaderStats",
        "StepResult",
        "TrainingGuard",
        "TrainingStopped",
        "bad_steps",
        "indices_from_scan",
        "read_quarantine",
    ],
    "datacheck.torch.integrations.hf": ["GuardedTrainer"],
    "datacheck.torch.integrations.lightning": ["GuardCallback"],
    "datacheck.torch.stream": [
        "quarantined_keys",
        "report_errors",
        "reporting",
        "skip_quarantined",
    ],
}


@pytest.mark.parametrize("face", sorted(PUBLIC_FACES))
def test_public_face_is_pinned(face: str) -> None:
    module = importlib.import_module(face)
    assert list(module.__all__) == PUBLIC_FACES[face]
    for name in module.__all__:
        assert hasattr(module, name), f"{face}.{name} is in __all__ but missing"


@pytest.mark.parametrize(
    "path",
    [
        "datacheck.cli:console_main",
        "datacheck.cli:main",
        "datacheck.schema:load_schema",
        "datacheck.report:Report",
        "datacheck.report:load_report",
        "datacheck.findings:Finding",
        "datacheck.errors:DatacheckError",
        "datacheck.checks:CHECKS",
        "datacheck.formats:Format",
        "datacheck.torch:TrainingGuard",
        "datacheck.torch:GuardedLoader",
    ],
)
def test_public_import_paths_still_work(path: str) -> None:
    module, _, attr = path.partition(":")
    assert callable(getattr(importlib.import_module(module), attr)) or attr.isupper()
